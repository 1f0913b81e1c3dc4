# The Redis store against a private redis-server (included by
# tests/server/CMakeLists.txt).
rl_add_test(test_store_redis
  SOURCES test_store_redis.c
  LIBS rls_core rl_testsupport
  LABELS integration
  TIMEOUT 120)
