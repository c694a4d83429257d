# Quota tests (policies/): one executable, one CTest test per case. Each case
# but sha256 starts its own redis-server on a unix socket in a temp dir, so
# they run in parallel safely; they are skipped (exit 77) without redis-server.
file(GLOB FG_QUOTA_TEST_SOURCES CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/policies/*.c)
add_executable(test_quota ${FG_QUOTA_TEST_SOURCES})
target_include_directories(test_quota PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/policies ${CMAKE_CURRENT_SOURCE_DIR}/unit)
target_link_libraries(test_quota PRIVATE fg_policies)

fg_add_test(quota_sha256 COMMAND test_quota sha256 LABELS unit TIMEOUT 30)
fg_add_test(quota_leaseset COMMAND test_quota leaseset LABELS unit TIMEOUT 30)
fg_add_test(quota_rlink COMMAND test_quota rlink LABELS unit TIMEOUT 30)
# cluster: six redis-server nodes on loopback ports (3 masters, 3 replicas);
# sentinel: a master, a replica and two sentinels (redis-server --sentinel).
foreach(case limits leases global faults journal traffic admin dir instances cluster sentinel)
  fg_add_test(quota_${case} COMMAND test_quota ${case} LABELS redis TIMEOUT 120)
  set_tests_properties(quota_${case} PROPERTIES SKIP_RETURN_CODE 77)
endforeach()
