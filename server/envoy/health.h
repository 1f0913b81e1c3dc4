/* gRPC's health checking protocol (grpc.health.v1, proto/grpc/health/v1/
 * health.proto) as the --grpc listener serves it: the messages only; the
 * streams (Check is unary, Watch server-streaming) are envoy/grpc.c's.
 *
 * Services known: "" (the server as a whole), "ratelimit" (the name
 * envoy-ratelimit registers its status under) and
 * "envoy.service.ratelimit.v3.RateLimitService" (the service's full
 * name, as gRPC suggests). All three carry one status, the server's
 * rls_server_takes_work: SERVING while it takes work, NOT_SERVING while
 * it drains, fails closed with the store down, and so on. */
#ifndef RLS_NET_GRPC_HEALTH_H
#define RLS_NET_GRPC_HEALTH_H

#include <stddef.h>
#include <stdint.h>

#define RLS_HEALTH_CHECK_PATH "/grpc.health.v1.Health/Check"
#define RLS_HEALTH_WATCH_PATH "/grpc.health.v1.Health/Watch"

/* HealthCheckResponse.ServingStatus, the published numbers. */
enum {
    RLS_HEALTH_UNKNOWN = 0,
    RLS_HEALTH_SERVING = 1,
    RLS_HEALTH_NOT_SERVING = 2,
    RLS_HEALTH_SERVICE_UNKNOWN = 3
};

/* A response as one gRPC message: the 5-byte prefix and at most 2 bytes
 * of HealthCheckResponse. */
#define RLS_HEALTH_MSG_MAX 8

/* Whether the server takes work (rls_server_takes_work's meaning): 1 or
 * 0. Called at most once per status check, from the loop. */
typedef int (*rls_health_fn)(void *arg);

/* Decodes the HealthCheckRequest p[0, n) (the message without its gRPC
 * prefix). Returns 1 when it names a service served here, 0 when it names
 * another, or RL_EINVAL when it is no HealthCheckRequest. Holds nothing
 * on return. */
int rls_health_service(const uint8_t *p, size_t n);

/* Writes the HealthCheckResponse with status, as one gRPC message, to
 * out. Returns its length (at most RLS_HEALTH_MSG_MAX). */
size_t rls_health_encode(int status, uint8_t out[RLS_HEALTH_MSG_MAX]);

#endif
