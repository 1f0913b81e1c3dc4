#include "rl_headers.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "rl_error.h"

/* Milliseconds to whole seconds, rounded up: a client that waits this long
 * is never early. */
static uint64_t ceil_s(uint64_t ms)
{
    return ms / 1000 + (ms % 1000 != 0);
}

/* policy as a structured-field string ("..." with \ and " escaped) in dst,
 * which holds at least 2 * RL_HDR_POLICY_MAX + 3 bytes. Returns 0 or
 * RL_EINVAL. */
static int sf_string(char *dst, const char *policy, size_t n)
{
    size_t i, k = 0;

    if (n > RL_HDR_POLICY_MAX)
        return RL_EINVAL;
    dst[k++] = '"';
    for (i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)policy[i];
        if (ch < 0x20 || ch > 0x7e)
            return RL_EINVAL;
        if (ch == '"' || ch == '\\')
            dst[k++] = '\\';
        dst[k++] = (char)ch;
    }
    dst[k++] = '"';
    dst[k] = '\0';
    return RL_OK;
}

int rl_headers(const rl_result_t *r, uint64_t unix_ms, const char *policy,
               size_t policy_len, unsigned which, rl_hdr_t *out, size_t cap)
{
    char name[2 * RL_HDR_POLICY_MAX + 3];
    uint64_t delta = ceil_s(r->reset_after_ms);
    int refused = r->code == RL_CODE_OVER_LIMIT;
    size_t n = 0, need;

    if (policy == NULL || policy_len == 0) {
        policy = "default";
        policy_len = 7;
    }
    if (sf_string(name, policy, policy_len) != RL_OK)
        return RL_EINVAL;
    if (r->limit == 0)
        return 0; /* nothing known of the caller's usage */
    need = ((which & RL_HDR_X) ? 4 : 0) + ((which & RL_HDR_IETF) ? 2 : 0) +
           ((which & RL_HDR_RETRY) && refused);
    if (need > cap)
        return RL_EFULL;

#define HDR(hname, ...)                                                        \
    do {                                                                       \
        out[n].name = (hname);                                                 \
        snprintf(out[n].value, sizeof(out[n].value), __VA_ARGS__);             \
        n++;                                                                   \
    } while (0)

    if (which & RL_HDR_X) {
        HDR("X-RateLimit-Limit", "%" PRIu64, r->limit);
        HDR("X-RateLimit-Used", "%" PRIu64, r->used);
        HDR("X-RateLimit-Remaining", "%" PRIu64, r->remaining);
        HDR("X-RateLimit-Reset", "%" PRIu64,
            (unix_ms + r->reset_after_ms + 500) / 1000);
    }
    if (which & RL_HDR_IETF) {
        if (r->window_s != 0)
            HDR("RateLimit-Policy", "%s;q=%" PRIu64 ";w=%" PRIu32, name,
                r->limit, r->window_s);
        else
            HDR("RateLimit-Policy", "%s;q=%" PRIu64, name, r->limit);
        HDR("RateLimit", "%s;r=%" PRIu64 ";t=%" PRIu64, name, r->remaining,
            delta);
    }
    if ((which & RL_HDR_RETRY) && refused)
        HDR("Retry-After", "%" PRIu64, ceil_s(r->retry_after_ms));
#undef HDR
    return (int)n;
}
