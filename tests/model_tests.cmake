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

# Mixed types: the routed experts in MXFP4. The reference reads the same MXFP4
# values exactly; the engine quantizes the experts' activations to Q8_0 (as
# ggml's mxfp4 x q8_0 dot does), at most amax/254 per element, which a random
# 4-layer model turns into ~0.1 of logit at most positions and, where it flips
# an expert choice, ~1.5 (measured: max 1.5, 32/32 greedy tokens identical). So
# the tolerance catches misread weights (a wrong scale or nibble moves the
# logits by their whole spread, ~3), not rounding; test_mxfp4 bounds the
# products themselves and test_formats the whole-model error against F32.
fg_add_test(reference_tiny-mxfp4 COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/reference/check_reference.sh tiny-mxfp4.gguf 2.0 1.0
            LABELS "model;reference" FIXTURES_REQUIRED models TIMEOUT 300)

# Byte-exact greedy output of the tiny model (update with check_golden.sh --update).
fg_add_test(golden_tiny COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/golden/check_golden.sh
            LABELS model FIXTURES_REQUIRED models)

# Bad files and requests through the command line: clear errors, no crash.
fg_add_test(bad_inputs_cli COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/model/check_bad_inputs.sh
            LABELS model FIXTURES_REQUIRED models)

# The GPU self-check: a clear exit 2 where there is no GPU (CI); the op and
# forward checks where there is one.
fg_add_test(gpucheck_cli COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/model/check_gpucheck.sh
            LABELS "model;gpu" FIXTURES_REQUIRED models)
