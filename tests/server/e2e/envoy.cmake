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
    # The same through the ratelimit module (RL.BATCH) in that Redis.
    add_test(NAME e2e_envoy_grpc_module
      COMMAND ${RL_DEBIAN_PYTHON}
              ${CMAKE_CURRENT_SOURCE_DIR}/envoy/e2e_envoy_grpc.py
              $<TARGET_FILE:rl-server> ${PROJECT_SOURCE_DIR}/proto
              ${CMAKE_CURRENT_SOURCE_DIR}/envoy ${RL_REDIS_SERVER})
    set_tests_properties(e2e_envoy_grpc_module PROPERTIES TIMEOUT 120
                         LABELS integration
                         ENVIRONMENT
                         "RL_CHECK=$<TARGET_FILE:rl-check>;RL_ENVOY_REDIS_MODULE=$<TARGET_FILE:rl_redis_module>")
    # And through it with --threads 2 (e2e/CMakeLists.txt's _threads2).
    add_test(NAME e2e_envoy_grpc_module_threads2
      COMMAND ${RL_DEBIAN_PYTHON}
              ${CMAKE_CURRENT_SOURCE_DIR}/envoy/e2e_envoy_grpc.py
              $<TARGET_FILE:rl-server> ${PROJECT_SOURCE_DIR}/proto
              ${CMAKE_CURRENT_SOURCE_DIR}/envoy ${RL_REDIS_SERVER})
    set_tests_properties(e2e_envoy_grpc_module_threads2 PROPERTIES
                         TIMEOUT 120 LABELS "integration;threads"
                         ENVIRONMENT
                         "RLT_SERVER_ARGS=--threads 2;RL_CHECK=$<TARGET_FILE:rl-check>;RL_ENVOY_REDIS_MODULE=$<TARGET_FILE:rl_redis_module>")
    # RLQS: clients that behave as Envoy's rate_limit_quota filter, two
    # rl-servers on one Redis (the fleet-wide bound), the memory store.
    add_test(NAME e2e_rlqs
      COMMAND ${RL_DEBIAN_PYTHON}
              ${CMAKE_CURRENT_SOURCE_DIR}/envoy/e2e_rlqs.py
              $<TARGET_FILE:rl-server> ${PROJECT_SOURCE_DIR}/proto
              ${RL_REDIS_SERVER})
    set_tests_properties(e2e_rlqs PROPERTIES TIMEOUT 180
                         LABELS integration)
  endif()
  # The memory store with --threads 2: one table for both loops.
  add_test(NAME e2e_envoy_grpc_threads2
    COMMAND ${RL_DEBIAN_PYTHON}
            ${CMAKE_CURRENT_SOURCE_DIR}/envoy/e2e_envoy_grpc.py
            $<TARGET_FILE:rl-server> ${PROJECT_SOURCE_DIR}/proto
            ${CMAKE_CURRENT_SOURCE_DIR}/envoy)
  set_tests_properties(e2e_envoy_grpc_threads2 PROPERTIES TIMEOUT 120
                       LABELS "integration;threads"
                       ENVIRONMENT
                       "RLT_SERVER_ARGS=--threads 2;RL_CHECK=$<TARGET_FILE:rl-check>")
endif()

# grpc.health.v1 on the --grpc listener (grpcio; stubs from
# proto/grpc/health/v1/health.proto): Check, Watch through a drain, the
# caps, hostile watchers, TLS; with a private redis-server, the fail modes.
if(RL_DEBIAN_PYTHON)
  set(rl_health_redis)
  if(RL_REDIS_SERVER)
    set(rl_health_redis ${RL_REDIS_SERVER})
  endif()
  add_test(NAME e2e_grpc_health
    COMMAND ${RL_DEBIAN_PYTHON}
            ${CMAKE_CURRENT_SOURCE_DIR}/envoy/e2e_grpc_health.py
            $<TARGET_FILE:rl-server> ${PROJECT_SOURCE_DIR}/proto
            ${rl_health_redis})
  set_tests_properties(e2e_grpc_health PROPERTIES TIMEOUT 120
                       LABELS integration)
endif()

# The --grpc listener (raw frames, HPACK by nghttp2; grpc_fx.c shared),
# each case with its gRPC status or GOAWAY and a well-behaved client
# served throughout: bad input (e2e_grpc_bad), and the connection's
# limits and deadlines (e2e_grpc_limits).
add_library(rlt_grpc STATIC grpc_fx.c)
target_link_libraries(rlt_grpc PUBLIC rl_h2raw rl_testfx)
target_compile_definitions(rlt_grpc PRIVATE
  RL_SERVER_BIN="$<TARGET_FILE:rl-server>"
  RL_FIXTURES="${CMAKE_CURRENT_SOURCE_DIR}/envoy")
rl_warnings(rlt_grpc)
foreach(t e2e_grpc_bad e2e_grpc_limits)
  rl_add_test(${t} SOURCES ${t}.c
    LIBS rlt_grpc LABELS integration TIMEOUT 120)
  add_dependencies(${t} rl-server)
endforeach()

# Envoy's descriptors from a control plane (--envoy-xds): a grpcio
# aggregated discovery service in the test pushes RateLimitConfig versions,
# a bad one, goes away and comes back; one rl-server, decisions checked
# over gRPC (e2e_envoy_xds.py).
if(RL_DEBIAN_PYTHON)
  add_test(NAME e2e_envoy_xds
    COMMAND ${RL_DEBIAN_PYTHON}
            ${CMAKE_CURRENT_SOURCE_DIR}/envoy/e2e_envoy_xds.py
            $<TARGET_FILE:rl-server> ${PROJECT_SOURCE_DIR}/proto)
  set_tests_properties(e2e_envoy_xds PROPERTIES TIMEOUT 60
                       LABELS integration)
endif()

# A hostile control plane (HTTP/2 by hand on a loopback socket): an HPACK
# bomb of informational header blocks, then endless small ones; rl-server
# drops each connection (counted), comes back after its backoff and takes
# a well-behaved response (e2e_envoy_xds_hostile.py).
if(RL_DEBIAN_PYTHON)
  add_test(NAME e2e_envoy_xds_hostile
    COMMAND ${RL_DEBIAN_PYTHON}
            ${CMAKE_CURRENT_SOURCE_DIR}/envoy/e2e_envoy_xds_hostile.py
            $<TARGET_FILE:rl-server> ${PROJECT_SOURCE_DIR}/proto)
  set_tests_properties(e2e_envoy_xds_hostile PROPERTIES TIMEOUT 60
                       LABELS integration)
endif()

# envoy-ratelimit's HTTP and debug listeners (--envoy-http, --debug-http):
# /healthcheck through the drain, the store down failing closed and open;
# POST /json against the gRPC answer, bad bodies, hostile clients beside a
# bystander; /rlconfig from a file and from an xDS control plane in the
# test (e2e_envoy_http.py).
if(RL_DEBIAN_PYTHON AND RL_REDIS_SERVER)
  add_test(NAME e2e_envoy_http
    COMMAND ${RL_DEBIAN_PYTHON}
            ${CMAKE_CURRENT_SOURCE_DIR}/envoy/e2e_envoy_http.py
            $<TARGET_FILE:rl-server> ${PROJECT_SOURCE_DIR}/proto
            ${RL_REDIS_SERVER})
  set_tests_properties(e2e_envoy_http PROPERTIES TIMEOUT 120
                       LABELS integration)
endif()

# Envoy Gateway's rate limit Deployment played end to end: rl-server
# started as /bin/ratelimit from EG's environment alone (default.yaml of
# EG's testdata, loopback addresses), fed over mutual TLS by a control
# plane serving what EG's translator builds for a request limit and a
# token budget (response cost), then called as Envoy calls (checks with
# hits_addend 0, end-of-stream charges), each answer compared with
# envoy-ratelimit's arithmetic; /healthcheck, grpc.health.v1, the
# dashboard's series, /rlconfig and the drain (e2e_envoy_gateway.py).
if(RL_DEBIAN_PYTHON)
  add_test(NAME e2e_envoy_gateway
    COMMAND ${RL_DEBIAN_PYTHON}
            ${CMAKE_CURRENT_SOURCE_DIR}/envoy/e2e_envoy_gateway.py
            $<TARGET_FILE:rl-server> ${PROJECT_SOURCE_DIR}/proto)
  set_tests_properties(e2e_envoy_gateway PROPERTIES TIMEOUT 60
                       LABELS integration)
endif()
