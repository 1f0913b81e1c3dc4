# Envoy's rate limit service (included by tests/server/CMakeLists.txt):
# grpcio from Debian's /usr/bin/python3 (the PATH python3 may lack it)
# calls rl-server --grpc with envoy-ratelimit's README examples as
# fixtures, on the memory store and on a private redis-server.
find_program(RL_DEBIAN_PYTHON /usr/bin/python3 NO_DEFAULT_PATH)
find_program(RL_REDIS_SERVER redis-server)
if(RL_DEBIAN_PYTHON)
  add_test(NAME test_envoy_grpc
    COMMAND ${RL_DEBIAN_PYTHON}
            ${CMAKE_CURRENT_SOURCE_DIR}/envoy/test_envoy_grpc.py
            $<TARGET_FILE:rl-server> ${PROJECT_SOURCE_DIR}/proto
            ${CMAKE_CURRENT_SOURCE_DIR}/envoy)
  set_tests_properties(test_envoy_grpc PROPERTIES TIMEOUT 120
                       LABELS integration
                       ENVIRONMENT "RL_CHECK=$<TARGET_FILE:rl-check>")
  if(RL_REDIS_SERVER)
    add_test(NAME test_envoy_grpc_redis
      COMMAND ${RL_DEBIAN_PYTHON}
              ${CMAKE_CURRENT_SOURCE_DIR}/envoy/test_envoy_grpc.py
              $<TARGET_FILE:rl-server> ${PROJECT_SOURCE_DIR}/proto
              ${CMAKE_CURRENT_SOURCE_DIR}/envoy ${RL_REDIS_SERVER})
    set_tests_properties(test_envoy_grpc_redis PROPERTIES TIMEOUT 120
                         LABELS integration
                         ENVIRONMENT "RL_CHECK=$<TARGET_FILE:rl-check>")
  endif()
endif()

# Bad input on the --grpc listener, each case with its gRPC status or
# GOAWAY, a well-behaved client served throughout (raw frames, HPACK by
# nghttp2).
add_library(rl_h2raw STATIC ${PROJECT_SOURCE_DIR}/tests/support/h2raw.c)
target_include_directories(rl_h2raw PUBLIC ${PROJECT_SOURCE_DIR}/tests/support)
target_link_libraries(rl_h2raw PUBLIC rl_envoy_proto PkgConfig::NGHTTP2)
rl_warnings(rl_h2raw)
rl_add_test(test_grpc_bad SOURCES test_grpc_bad.c
  LIBS rl_h2raw rl_testsupport LABELS integration TIMEOUT 120)
target_compile_definitions(test_grpc_bad PRIVATE
  RL_SERVER_BIN="$<TARGET_FILE:rl-server>"
  RL_FIXTURES="${CMAKE_CURRENT_SOURCE_DIR}/envoy")
add_dependencies(test_grpc_bad rl-server)

# The descriptor files' loader and matcher, and descriptor counter keys.
rl_add_test(test_envoy_conf SOURCES test_envoy_conf.c LIBS rls_core
  TIMEOUT 30)

# The example shipped in deploy/ stays valid.
add_test(NAME envoy_deploy_example
  COMMAND rl-server --check-envoy-config
          ${PROJECT_SOURCE_DIR}/deploy/envoy/edge_proxy_per_ip.yaml)
set_tests_properties(envoy_deploy_example PROPERTIES TIMEOUT 30)
