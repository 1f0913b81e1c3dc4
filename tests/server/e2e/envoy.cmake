# Envoy's rate limit service (included by e2e/CMakeLists.txt): grpcio from
# Debian's /usr/bin/python3 (the PATH python3 may lack it) calls rl-server
# --grpc with envoy-ratelimit's README examples as fixtures, on the memory
# store and on a private redis-server.
find_program(RL_REDIS_SERVER redis-server)
if(RL_DEBIAN_PYTHON)
  add_test(NAME e2e_envoy_grpc
    COMMAND ${RL_DEBIAN_PYTHON}
            ${CMAKE_CURRENT_SOURCE_DIR}/envoy/e2e_envoy_grpc.py
            $<TARGET_FILE:rl-server> ${PROJECT_SOURCE_DIR}/proto
            ${CMAKE_CURRENT_SOURCE_DIR}/envoy)
  set_tests_properties(e2e_envoy_grpc PROPERTIES TIMEOUT 120
                       LABELS integration
                       ENVIRONMENT "RL_CHECK=$<TARGET_FILE:rl-check>")
  if(RL_REDIS_SERVER)
    add_test(NAME e2e_envoy_grpc_redis
      COMMAND ${RL_DEBIAN_PYTHON}
              ${CMAKE_CURRENT_SOURCE_DIR}/envoy/e2e_envoy_grpc.py
              $<TARGET_FILE:rl-server> ${PROJECT_SOURCE_DIR}/proto
              ${CMAKE_CURRENT_SOURCE_DIR}/envoy ${RL_REDIS_SERVER})
    set_tests_properties(e2e_envoy_grpc_redis PROPERTIES TIMEOUT 120
                         LABELS integration
                         ENVIRONMENT "RL_CHECK=$<TARGET_FILE:rl-check>")
  endif()
endif()

# Bad input on the --grpc listener, each case with its gRPC status or
# GOAWAY, a well-behaved client served throughout (raw frames, HPACK by
# nghttp2).
rl_add_test(e2e_grpc_bad SOURCES e2e_grpc_bad.c
  LIBS rl_h2raw rl_testfx LABELS integration TIMEOUT 120)
target_compile_definitions(e2e_grpc_bad PRIVATE
  RL_SERVER_BIN="$<TARGET_FILE:rl-server>"
  RL_FIXTURES="${CMAKE_CURRENT_SOURCE_DIR}/envoy")
add_dependencies(e2e_grpc_bad rl-server)
