# The Redis store against a private redis-server (included by
# store/CMakeLists.txt), by concern: the basics (test_store_redis),
# the connection's life and failures (_fail), the script's and the
# module's decisions (_script); and its pure parts, without Redis (_pure).
# The tests' shared fixture and helpers: store_redis_fx.c.
add_library(rlt_store_redis STATIC store_redis_fx.c)
target_include_directories(rlt_store_redis PUBLIC ${CMAKE_CURRENT_SOURCE_DIR}
                                                  ${CMOCKA_INCLUDE})
target_link_libraries(rlt_store_redis PUBLIC rls_core rl_testsupport
                                             ${CMOCKA_LIB})
rl_warnings(rlt_store_redis)

rl_add_test(test_store_redis_pure
  SOURCES test_store_redis_pure.c
  LIBS rls_core
  TIMEOUT 60)

# Each runs a second time (*_module) with the ratelimit module loaded into
# every redis-server it starts: the store finds it and sends RL.BATCH
# (test_module_in_use checks that it does); every decision must be the
# script's.
foreach(t test_store_redis test_store_redis_fail test_store_redis_script)
  rl_add_test(${t}
    SOURCES ${t}.c
    LIBS rlt_store_redis
    LABELS integration
    TIMEOUT 120)
  add_test(NAME ${t}_module COMMAND ${t})
  set_tests_properties(${t}_module PROPERTIES
    TIMEOUT 120 LABELS integration
    ENVIRONMENT
      "RLT_REDIS_MODULE=$<TARGET_FILE:rl_redis_module>;RLT_EXPECT_MODULE=1")
endforeach()
