/* grpc.health.v1's messages; see grpc_health.h. */
#include "envoy/health.h"

#include <string.h>

#include "grpc/health/v1/health.pb-c.h"
#include "rl_error.h"
#include "rl_frame.h"

static const char *const services[] = {
    "",
    "ratelimit",
    "envoy.service.ratelimit.v3.RateLimitService",
};

int rls_health_service(const uint8_t *p, size_t n)
{
    Grpc__Health__V1__HealthCheckRequest *req;
    size_t i;
    int known = 0;

    /* The message is at most --max-frame bytes (grpc.c checked): what
     * protobuf-c reserves for it is bounded by that. */
    req = grpc__health__v1__health_check_request__unpack(NULL, n, p);
    if (req == NULL)
        return RL_EINVAL;
    for (i = 0; i < sizeof(services) / sizeof(services[0]); i++)
        if (req->service != NULL && strcmp(req->service, services[i]) == 0)
            known = 1;
    grpc__health__v1__health_check_request__free_unpacked(req, NULL);
    return known;
}

size_t rls_health_encode(int status, uint8_t out[RLS_HEALTH_MSG_MAX])
{
    Grpc__Health__V1__HealthCheckResponse r =
        GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__INIT;
    size_t n;

    r.status = (Grpc__Health__V1__HealthCheckResponse__ServingStatus)status;
    /* A varint of 0-3 under field 1: two bytes, or none for UNKNOWN. */
    n = grpc__health__v1__health_check_response__pack(&r,
                                                      out + RL_FRAME_HEADER);
    rl_frame_header(out, (uint32_t)n);
    return n + RL_FRAME_HEADER;
}
