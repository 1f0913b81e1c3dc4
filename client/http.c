/* HTTP headers from a result: the de-facto X-Ratelimit-* headers (Limit,
 * Used, Remaining, Reset) and the IETF RateLimit / RateLimit-Policy fields.
 * Pure functions: time comes from the result (unix_ms), so the output is
 * exact and testable. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "rlc_int.h"

static uint64_t ceil_s(uint64_t ms)
{
    return ms / 1000 + (ms % 1000 != 0);
}

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

/* Writes policy as a structured-field string ("..." with \ and " escaped)
 * to dst. Returns its length, or RLC_EINVAL for a name that is too long or
 * holds a byte a header value cannot carry. */
static int sf_string(char *dst, size_t cap, const char *policy)
{
    size_t i, k = 0, n = strlen(policy);

    if (n == 0 || n > RLC_POLICY_MAX || cap < 2 * n + 3)
        return RLC_EINVAL;
    dst[k++] = '"';
    for (i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)policy[i];
        if (ch < 0x20 || ch > 0x7e)
            return RLC_EINVAL;
        if (ch == '"' || ch == '\\')
            dst[k++] = '\\';
        dst[k++] = (char)ch;
    }
    dst[k++] = '"';
    dst[k] = '\0';
    return (int)k;
}

int rlc_http_headers(const rlc_result_t *r, const char *policy,
                     rlc_http_header_t *out, size_t cap)
{
    char name[2 * RLC_POLICY_MAX + 3];
    int n = 0, over;

    if (r == NULL || out == NULL)
        return RLC_EINVAL;
    if (sf_string(name, sizeof(name), policy ? policy : "default") < 0)
        return RLC_EINVAL;
    /* Only a server's decision carries counters worth telling the client;
     * a policy decision or an error knows nothing about its usage. */
    if (r->status != RLC_OK || r->flags != 0 || r->limit == 0 ||
        (r->code != RLC_CODE_OK && r->code != RLC_CODE_OVER_LIMIT))
        return 0;
    over = r->code == RLC_CODE_OVER_LIMIT;
    if (cap < (size_t)(6 + over))
        return RLC_EFULL;

#define HDR(hname, ...)                                                        \
    do {                                                                       \
        out[n].name = (hname);                                                 \
        snprintf(out[n].value, sizeof(out[n].value), __VA_ARGS__);             \
        n++;                                                                   \
    } while (0)

    HDR("X-Ratelimit-Limit", "%" PRIu64, r->limit);
    HDR("X-Ratelimit-Used", "%" PRIu64, r->used);
    HDR("X-Ratelimit-Remaining", "%" PRIu64, r->remaining);
    /* Windows end on whole seconds of the server's clock; rounding to the
     * nearest second absorbs a small skew between the two clocks. */
    HDR("X-Ratelimit-Reset", "%" PRIu64,
        (r->unix_ms + r->reset_after_ms + 500) / 1000);
    if (r->window_s)
        HDR("RateLimit-Policy", "%s;q=%" PRIu64 ";w=%" PRIu32, name, r->limit,
            r->window_s);
    else
        HDR("RateLimit-Policy", "%s;q=%" PRIu64, name, r->limit);
    HDR("RateLimit", "%s;r=%" PRIu64 ";t=%" PRIu64, name, r->remaining,
        ceil_s(r->reset_after_ms));
    if (over)
        HDR("Retry-After", "%" PRIu64, ceil_s(r->retry_after_ms));
#undef HDR
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
