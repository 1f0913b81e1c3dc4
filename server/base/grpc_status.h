/* gRPC's status codes (grpc/doc/statuscode.md), the ones rl-server
 * answers with: the Envoy rate limit service and its transport
 * (envoy/rls.h, envoy/grpc.c), grpc.health.v1, and Envoy's quota streams
 * (rlqs/rlqs.c). Protocol constants: nothing to link. */
#ifndef RLS_GRPC_STATUS_H
#define RLS_GRPC_STATUS_H

enum {
    RLS_GRPC_OK = 0,
    RLS_GRPC_UNKNOWN = 2, /* envoy-ratelimit's answer to an empty domain or
                             descriptor list (a Go error) */
    RLS_GRPC_INVALID_ARGUMENT = 3,
    RLS_GRPC_DEADLINE_EXCEEDED = 4,
    RLS_GRPC_NOT_FOUND = 5, /* grpc.health.v1 Check: an unknown service */
    RLS_GRPC_RESOURCE_EXHAUSTED = 8,
    RLS_GRPC_UNIMPLEMENTED = 12,
    RLS_GRPC_INTERNAL = 13,
    RLS_GRPC_UNAVAILABLE = 14,
    RLS_GRPC_CODES = 17
};

#endif
