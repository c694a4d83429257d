# Tests that run generated models. The "models" fixture writes them into
# ${FG_TEST_DATA} first (deterministic; nothing generated is committed).
fg_add_test(gen_test_models COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/model/gen_models.sh
            LABELS model FIXTURES_SETUP models TIMEOUT 300)

file(GLOB FG_MODEL_TESTS CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/model/test_*.c)
foreach(src ${FG_MODEL_TESTS})
  get_filename_component(name ${src} NAME_WE)
  add_executable(${name} ${src})
  target_link_libraries(${name} PRIVATE fg_engine)
  fg_add_test(${name} COMMAND ${name} LABELS model FIXTURES_REQUIRED models TIMEOUT 300)
endforeach()

# The engine against the independent float64 numpy reference (non-absorbed MLA).
fg_add_test(reference_selfcheck COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/reference/test_reference_selfcheck.py
            LABELS reference TIMEOUT 300)
# The deepseek4 reference against itself: one pass vs its explicit cache, validation, MXFP4.
fg_add_test(reference_deepseek4_selfcheck COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/reference/test_deepseek4_selfcheck.py
            LABELS reference TIMEOUT 300)
# The generator's deepseek4 files (v4-tiny, no hash layers, converter types) through the
# deepseek4 reference: 300 prompt + 32 greedy tokens, cache == one pass, HCA rows, top-k drops.
fg_add_test(reference_v4_generated COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/reference/test_v4_generated.py
            LABELS "model;reference" FIXTURES_REQUIRED models TIMEOUT 300)
# Every key, tensor name, ggml type and shape of v4-tiny (3 variants) and v4-mini against
# the table of llama.cpp's deepseek4 loader; v4-mini written twice, byte-identical.
fg_add_test(reference_v4_layout COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/reference/test_v4_layout.py
            LABELS "model;reference" FIXTURES_REQUIRED models TIMEOUT 300)
# The deepseek4 engine against its reference: fixtures from make_v4_fixture.py,
# the engine through flashgate-generate and ds4_probe (MTP, chunks, formats).
add_executable(ds4_probe ${CMAKE_CURRENT_SOURCE_DIR}/model/ds4_probe.c)
target_link_libraries(ds4_probe PRIVATE fg_engine)
set_target_properties(ds4_probe PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bin)
fg_add_test(reference_deepseek4_engine COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/reference/check_deepseek4.py
            LABELS "model;reference" TIMEOUT 600)
# The same checks on the generator's files (v4-tiny, v4-tiny-nohash), and v4-tiny-mxfp4
# (the converter's types) against the reference with a median-position bound and a
# misread-MXFP4 negative control.
fg_add_test(reference_deepseek4_generated COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/reference/check_deepseek4.py generated
            LABELS "model;reference" FIXTURES_REQUIRED models TIMEOUT 600)
# deepseek2's MTP block (tiny-mtp.gguf): the trunk's and the MTP block's logits of the forward
# pass (ds2_mtp_probe, absorbed and decompressed) against the reference's forward_mtp().
add_executable(ds2_mtp_probe ${CMAKE_CURRENT_SOURCE_DIR}/model/ds2_mtp_probe.c)
target_link_libraries(ds2_mtp_probe PRIVATE fg_engine)
set_target_properties(ds2_mtp_probe PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bin)
fg_add_test(reference_deepseek2_mtp COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/reference/check_deepseek2_mtp.py
            LABELS "model;reference" FIXTURES_REQUIRED models TIMEOUT 300)
# flashgate-modelgen --from keeps the source's MTP block (a Q8_0 copy of a trained model drafts too).
fg_add_test(modelgen_from COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/model/check_modelgen_from.sh
            LABELS model FIXTURES_REQUIRED models TIMEOUT 120)
foreach(variant tiny tiny-softmax tiny-groups tiny-lite tiny-yarn)
  fg_add_test(reference_${variant} COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/reference/check_reference.sh ${variant}.gguf
              LABELS "model;reference" FIXTURES_REQUIRED models TIMEOUT 300)
endforeach()

# kernels/cpu/quantize.c's bytes are checked by test_quantize against
# tests/unit/data/quantize_vectors.h; this checks that header is what the numpy
# reference of ggml's quantizers (tests/reference/quantize_ref.py) writes.
fg_add_test(quantize_vectors_current COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/reference/quantize_vectors.py
            --check LABELS "reference;unit")

# Other weight types against the same reference, which reads their values
# exactly (tests/reference/quant_vectors.py's dequantization for the legacy and
# K types). The engine quantizes the activations of every block-type product to
# Q8_0 (ggml's dots do the same), at most amax/254 per element; a random 4-layer
# model turns that into ~0.1-0.25 of logit at a typical position and, where it
# flips an expert choice, a few units at that one. So the check is on the
# median position's max |dlogit| (measured: mxfp4 experts 0.087, the mixed file
# 0.35, and tiny-q8_0 0.25 for comparison); a misread weight moves it to the
# logits' spread (a swapped Q4_K nibble order: 9.8). tiny-256 (F32, width 256
# so that rows fit the K-quants' 256-value blocks) is the mixed file's source.
foreach(variant tiny-mxfp4:0.25 tiny-mixed:0.7 tiny-q4_k_m:0.7)
  string(REPLACE ":" ";" parts ${variant})
  list(GET parts 0 name)
  list(GET parts 1 median)
  fg_add_test(reference_${name} COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/reference/check_reference.sh ${name}.gguf 10 10
              ${median} LABELS "model;reference" FIXTURES_REQUIRED models TIMEOUT 300)
endforeach()
fg_add_test(reference_tiny-256 COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/reference/check_reference.sh tiny-256.gguf
            LABELS "model;reference" FIXTURES_REQUIRED models TIMEOUT 300)

# The committed trained model (models/flash-english.gguf, docs/english-model.md) against the
# reference too: trained weights have logits of other magnitudes and structure than random ones.
fg_add_test(reference_english COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/reference/check_reference.sh
            ${CMAKE_SOURCE_DIR}/models/flash-english.gguf LABELS "model;reference" TIMEOUT 300)

# Byte-exact greedy output of the tiny model and of the trained English model
# (update with check_golden.sh [tiny|english] --update).
fg_add_test(golden_tiny COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/golden/check_golden.sh tiny
            LABELS model FIXTURES_REQUIRED models)
fg_add_test(golden_english COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/golden/check_golden.sh english
            LABELS model)

# Perplexity and top-1 agreement of the English model on the held-out text, per KV format and
# weight type; the bounds (in the script) are the measured values plus a margin.
fg_add_test(perplexity_english COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/model/check_perplexity_english.sh
            LABELS model TIMEOUT 600)

# flashgate-quantize: every type's bytes against the numpy reference of ggml's quantizers on a
# model's tensors, file round trips, the Q4_K_M and Q5_K_M mixes (llama-quantize's choices, loading,
# generating, logits against the F32 model of tiny-256 and the trained English model), bad input.
fg_add_test(quantize_cli COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/model/check_quantize.py
            LABELS "model;reference" FIXTURES_REQUIRED models TIMEOUT 600)

# The same bytes against ggml itself: libggml-base.so from the pinned npm package
# @node-llama-cpp/linux-x64 (llama.cpp's own build), its ggml_quantize_chunk on the same rows.
fg_add_test(quantize_ggml COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/model/check_quantize_ggml.sh
            LABELS "model;reference" FIXTURES_REQUIRED models TIMEOUT 600)
set_tests_properties(quantize_ggml PROPERTIES SKIP_RETURN_CODE 77)

# Bad files and requests through the command line: clear errors, no crash.
fg_add_test(bad_inputs_cli COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/model/check_bad_inputs.sh
            LABELS model FIXTURES_REQUIRED models)

# flashgate-quantize --imatrix on malformed or mismatched importance matrices, and q2_k_s
# without one: clear errors naming the entry, no file left, no crash.
fg_add_test(bad_imatrix_cli COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/model/check_bad_imatrix.sh
            LABELS model FIXTURES_REQUIRED models)

# The GPU self-check: a clear exit 2 where there is no GPU (CI); the op and
# forward checks where there is one.
fg_add_test(gpucheck_cli COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/model/check_gpucheck.sh
            LABELS "model;gpu" FIXTURES_REQUIRED models)

# The lattice IQ types' dequantization (quant_vectors.py, to which test_quants holds the
# engine bit for bit) against ggml's own dequantize_row_iq* in libggml-base.so from the pinned
# npm package @node-llama-cpp/linux-x64 (llama.cpp's build), bit for bit; grids included.
fg_add_test(iq_types_ggml COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/reference/check_iq_ggml.sh
            LABELS "unit;reference" TIMEOUT 600)
set_tests_properties(iq_types_ggml PROPERTIES SKIP_RETURN_CODE 77)
