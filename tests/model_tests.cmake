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
foreach(variant tiny tiny-softmax tiny-groups tiny-lite tiny-yarn)
  fg_add_test(reference_${variant} COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/reference/check_reference.sh ${variant}.gguf
              LABELS "model;reference" FIXTURES_REQUIRED models TIMEOUT 300)
endforeach()

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

# Bad files and requests through the command line: clear errors, no crash.
fg_add_test(bad_inputs_cli COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/model/check_bad_inputs.sh
            LABELS model FIXTURES_REQUIRED models)

# The GPU self-check: a clear exit 2 where there is no GPU (CI); the op and
# forward checks where there is one.
fg_add_test(gpucheck_cli COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/model/check_gpucheck.sh
            LABELS "model;gpu" FIXTURES_REQUIRED models)
