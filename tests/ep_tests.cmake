# Expert-parallel tests that need more than a unit test: the NCCL id
# exchange through a private redis-server (skipped, exit 77, without one).
# The in-process dispatch/combine runs are model tests (model/test_ep_logits.c).
pkg_check_modules(HIREDIS REQUIRED IMPORTED_TARGET hiredis)
add_executable(test_ep_bootstrap ${CMAKE_CURRENT_SOURCE_DIR}/ep/test_ep_bootstrap.c
               ${CMAKE_CURRENT_SOURCE_DIR}/policies/redis_fixture.c)
target_include_directories(test_ep_bootstrap PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/policies)
target_link_libraries(test_ep_bootstrap PRIVATE fg_engine PkgConfig::HIREDIS)
fg_add_test(ep_bootstrap COMMAND test_ep_bootstrap LABELS redis TIMEOUT 60)
set_tests_properties(ep_bootstrap PROPERTIES SKIP_RETURN_CODE 77)
