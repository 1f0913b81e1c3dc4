# The --metrics listener (included by net/CMakeLists.txt): the HTTP
# parser on its own, then the listener in process against a real rl-server
# loop (its Redis health test starts a private redis-server, hence the
# integration label).
find_package(Threads REQUIRED)

rl_add_test(test_http
  SOURCES test_http.c
  LIBS rls_core
  TIMEOUT 60)

rl_add_test(test_metrics
  SOURCES test_metrics.c
  LIBS rlt_inproc
  LABELS integration
  TIMEOUT 120)
# Its Redis loads the ratelimit module (rl_store_redis_module).
target_compile_definitions(test_metrics PRIVATE
  RL_TEST_REDIS_MODULE="$<TARGET_FILE:rl_redis_module>")
add_dependencies(test_metrics rl_redis_module)
