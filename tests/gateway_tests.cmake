# Gateway integration tests: real flashgate processes on free loopback ports, real WebSocket
# connections, the tiny generated model (fixture "models"). Plain Python scripts on Debian's
# /usr/bin/python3 with python3-websockets; each prints "N passed, M failed" and exits non-zero
# on a failure. Run one by hand: FG_BIN=build/bin FG_TEST_DATA=build/testdata /usr/bin/python3
# tests/gateway/test_errors.py [test names]
foreach(name protocol_flow errors resume isolation backpressure shutdown concurrency cli admin quotas metrics
             dashboard logs expert_parallel persist hostile_persist hostile_http hostile_ws v4 session_dir items
             redis_cluster)
  fg_add_test(gateway_${name} COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/gateway/test_${name}.py
              LABELS gateway FIXTURES_REQUIRED models TIMEOUT 300)
endforeach()
# flashgate-cli chat on the committed English model answers in dictionary words
fg_add_test(gateway_english_chat COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/gateway/test_english_chat.py
            LABELS gateway TIMEOUT 300)
# 1000 sessions at once: alone, so that the other tests do not slow it past its timeout
set_tests_properties(gateway_concurrency PROPERTIES RUN_SERIAL TRUE)
# The fault matrix (test_faults.py's table): Redis stopped and killed, the gateway killed,
# a full disk, a reader that never reads, a trickling body. Mounts a tmpfs where it may (root).
fg_add_test(gateway_faults COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/gateway/test_faults.py
            LABELS faults FIXTURES_REQUIRED models TIMEOUT 900)
# OpenAI's own npm clients (openai, @openai/agents-realtime), unmodified, over wss:// to a
# real flashgate with TLS; the test installs the pinned packages into ${FG_TEST_DATA}/npm-openai
# and skips (77) only when node/npm cannot.
fg_add_test(gateway_openai_sdk COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/gateway/test_openai_sdk.py
            LABELS gateway FIXTURES_REQUIRED models TIMEOUT 600)
set_tests_properties(gateway_openai_sdk PROPERTIES SKIP_RETURN_CODE 77)
# POST /v1/chat/completions and /v1/responses with the official openai npm client (the packages
# test_openai_sdk.py installs), real redis-server quotas, and bad input over plain HTTP.
fg_add_test(gateway_openai_http COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/gateway/test_openai_http.py
            LABELS gateway FIXTURES_REQUIRED models TIMEOUT 600)
set_tests_properties(gateway_openai_http PROPERTIES SKIP_RETURN_CODE 77)
