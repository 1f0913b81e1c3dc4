# The Redis store against a private redis-server (included by
# tests/server/CMakeLists.txt).
rl_add_test(test_store_redis
  SOURCES test_store_redis.c
  LIBS rls_core rl_testsupport
  LABELS integration
  TIMEOUT 120)

# The same tests with the ratelimit module loaded into every redis-server
# they start: the store finds it and sends RL.BATCH (test_module_in_use
# checks that it does); every decision must be the script's.
add_test(NAME test_store_redis_module COMMAND test_store_redis)
set_tests_properties(test_store_redis_module PROPERTIES
  TIMEOUT 120 LABELS integration
  ENVIRONMENT "RLT_REDIS_MODULE=$<TARGET_FILE:rl_redis_module>;RLT_EXPECT_MODULE=1")

# The module as Redis runs it (test_redis_module.c): its AOF loads into a
# Redis without it, a replica without it holds what the master holds,
# out-of-range arguments are refused, and on a Redis Cluster it keeps to
# the node's slots. It loads the module by path itself.
rl_add_test(test_redis_module
  SOURCES test_redis_module.c
  LIBS rl_testsupport
  LABELS integration
  TIMEOUT 180)
set_tests_properties(test_redis_module PROPERTIES
  ENVIRONMENT "RLT_MODULE_SO=$<TARGET_FILE:rl_redis_module>")
add_dependencies(test_redis_module rl_redis_module)
