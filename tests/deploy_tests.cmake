# Deploy checks: the shipped HAProxy configuration in front of three real flashgate instances
# and one real redis-server (haproxy from deploy/install-deps.sh test), and the static checks of
# the systemd unit, the container file and the Kubernetes manifests (tests/deploy/).
fg_add_test(deploy_haproxy COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/deploy/test_haproxy.py
            LABELS deploy FIXTURES_REQUIRED models TIMEOUT 600)
