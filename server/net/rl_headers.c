#include "net/rl_headers.h"

#include <inttypes.h>
#include <stdio.h>

#include "rl_error.h"

/* Milliseconds to whole seconds, rounded up: a client that waits this long
 * is never early. */
static uint64_t ceil_s(uint64_t ms)
{
    return ms / 1000 + (ms % 1000 != 0);
}

int rls_rl_headers(const rl_result_t *r, const char *name, size_t name_len,
                   unsigned which, rls_hdr_fn emit, void *arg)
{
    char v[RLS_HDR_VALUE_MAX];
    uint64_t reset = ceil_s(r->reset_after_ms);
    int refused = r->code == RL_CODE_OVER_LIMIT, e;

    if (name == NULL || name_len == 0) {
        name = "default";
        name_len = 7;
    }
    if (name_len > 64)
        name_len = 64;
    if (which & RLS_HDR_X) {
        snprintf(v, sizeof(v), "%" PRIu64, r->limit);
        if ((e = emit(arg, "X-RateLimit-Limit", v)) != 0)
            return e;
        snprintf(v, sizeof(v), "%" PRIu64, r->remaining);
        if ((e = emit(arg, "X-RateLimit-Remaining", v)) != 0)
            return e;
        snprintf(v, sizeof(v), "%" PRIu64, reset);
        if ((e = emit(arg, "X-RateLimit-Reset", v)) != 0)
            return e;
    }
    if (which & RLS_HDR_DRAFT) {
        if (r->window_s != 0) {
            snprintf(v, sizeof(v), "\"%.*s\";q=%" PRIu64 ";w=%u",
                     (int)name_len, name, r->limit, r->window_s);
            if ((e = emit(arg, "RateLimit-Policy", v)) != 0)
                return e;
        }
        snprintf(v, sizeof(v), "\"%.*s\";r=%" PRIu64 ";t=%" PRIu64,
                 (int)name_len, name, r->remaining, reset);
        if ((e = emit(arg, "RateLimit", v)) != 0)
            return e;
    }
    if ((which & RLS_HDR_RETRY) && refused) {
        snprintf(v, sizeof(v), "%" PRIu64, ceil_s(r->retry_after_ms));
        if ((e = emit(arg, "Retry-After", v)) != 0)
            return e;
    }
    return RL_OK;
}
