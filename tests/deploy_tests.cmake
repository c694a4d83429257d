# Deploy checks: the shipped HAProxy configuration in front of three real flashgate instances
# and one real redis-server (haproxy from deploy/install-deps.sh test), and the static checks of
# the systemd unit, the container file and the Kubernetes manifests (tests/deploy/).
fg_add_test(deploy_haproxy COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/deploy/test_haproxy.py
            LABELS deploy FIXTURES_REQUIRED models TIMEOUT 600)
# Issue 20's proof behind the same HAProxy: the cluster view in /v1/status, 200 sessions under one
# global limit, an instance SIGKILLed mid-response and one drained by SIGTERM (their sessions resumed
# on the others), with the session directory on.
fg_add_test(deploy_cluster COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/deploy/test_cluster.py
            LABELS deploy FIXTURES_REQUIRED models TIMEOUT 300)
# The same cases on a Redis Cluster of three masters started by the test (redis.mode cluster).
fg_add_test(deploy_cluster_redis_cluster COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/deploy/test_cluster.py
            --redis=cluster LABELS deploy FIXTURES_REQUIRED models TIMEOUT 300)
# The systemd unit: systemd-analyze verify in a scratch root holding the installed build.
fg_add_test(deploy_systemd COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/deploy/check_systemd.sh
            ${CMAKE_SOURCE_DIR} ${CMAKE_BINARY_DIR} LABELS deploy TIMEOUT 120)
# The container file: its apt steps simulated, its COPY sources, its cmake configure, its libraries.
fg_add_test(deploy_containerfile COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/deploy/check_containerfile.py
            ${CMAKE_SOURCE_DIR} ${CMAKE_BINARY_DIR} LABELS deploy TIMEOUT 300)
set_tests_properties(deploy_containerfile PROPERTIES SKIP_RETURN_CODE 77)
# The Kubernetes manifests against the Kubernetes API schemas (npm kubernetes-models, offline once installed).
fg_add_test(deploy_k8s COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/deploy/check_k8s.sh LABELS deploy TIMEOUT 400)
set_tests_properties(deploy_k8s PROPERTIES SKIP_RETURN_CODE 77)
