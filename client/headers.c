/* HTTP answers from a result: the status, and the rate-limit headers of
 * lib/rl_headers.h. Pure functions: time comes from the result (unix_ms),
 * so the output is exact and testable. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "rl_error.h"
#include "rl_headers.h"
#include "rlc_int.h"

int rlc_http_status(const rlc_result_t *r)
{
    if (r == NULL)
        return 503;
    switch (r->code) {
    case RLC_CODE_OK:
        return 200;
    case RLC_CODE_OVER_LIMIT:
        return 429;
    default:
        return 503;
    }
}

const char *rlc_http_reason(int status)
{
    switch (status) {
    case 200:
        return "OK";
    case 429:
        return "Too Many Requests";
    case 503:
        return "Service Unavailable";
    default:
        return "";
    }
}

int rlc_http_headers(const rlc_result_t *r, const char *policy,
                     rlc_http_header_t *out, size_t cap)
{
    rl_hdr_t h[RL_HDR_MAX];
    rl_result_t d;
    int n, i;

    if (r == NULL || out == NULL)
        return RLC_EINVAL;
    if (policy != NULL && (policy[0] == '\0' ||
                           strlen(policy) > RLC_POLICY_MAX))
        return RLC_EINVAL;
    /* Only a server's decision carries counters worth telling the client;
     * a policy decision or an error knows nothing about its usage. */
    memset(&d, 0, sizeof(d));
    if (r->status == RLC_OK && r->flags == 0 &&
        (r->code == RLC_CODE_OK || r->code == RLC_CODE_OVER_LIMIT)) {
        d.code = r->code == RLC_CODE_OK ? RL_CODE_OK : RL_CODE_OVER_LIMIT;
        d.limit = r->limit;
        d.used = r->used;
        d.remaining = r->remaining;
        d.reset_after_ms = r->reset_after_ms;
        d.retry_after_ms = r->retry_after_ms;
        d.window_s = r->window_s;
    }
    /* The one implementation every HTTP surface uses (lib/rl_headers.h):
     * rl-server's /check and Envoy answers say the same. */
    n = rl_headers(&d, r->unix_ms, policy, policy ? strlen(policy) : 0,
                   RL_HDR_ALL, h, RL_HDR_MAX);
    if (n < 0)
        return n == RL_EFULL ? RLC_EFULL : RLC_EINVAL;
    if ((size_t)n > cap)
        return RLC_EFULL;
    for (i = 0; i < n; i++) {
        out[i].name = h[i].name;
        snprintf(out[i].value, sizeof(out[i].value), "%s", h[i].value);
    }
    return n;
}

int rlc_http_format(const rlc_result_t *r, const char *policy, char *buf,
                    size_t cap)
{
    rlc_http_header_t h[RLC_HTTP_HEADERS_MAX];
    size_t k = 0;
    int n, i;

    if (buf == NULL || cap == 0)
        return RLC_EINVAL;
    buf[0] = '\0';
    n = rlc_http_headers(r, policy, h, RLC_HTTP_HEADERS_MAX);
    if (n < 0)
        return n;
    for (i = 0; i < n; i++) {
        int w = snprintf(buf + k, cap - k, "%s: %s\r\n", h[i].name, h[i].value);
        if (w < 0 || (size_t)w >= cap - k) {
            buf[0] = '\0';
            return RLC_EFULL;
        }
        k += (size_t)w;
    }
    return (int)k;
}
