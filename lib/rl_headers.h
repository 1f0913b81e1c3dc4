/* The rate-limit headers of one decision (headers.c): the one
 * implementation behind every HTTP surface, so that a client hears the
 * same thing from a backend using librlc, from a proxy asking /check and
 * from Envoy's response_headers_to_add.
 *
 *   X-RateLimit-Limit: 100        the deciding window's limit
 *   X-RateLimit-Used: 63          counted in it, this request included
 *   X-RateLimit-Remaining: 37     what it has left
 *   X-RateLimit-Reset: 1764090000 when it ends: Unix time in seconds, as
 *                                 a client that sleeps until then reads it
 *   RateLimit-Policy: "api";q=100;w=3600     (IETF httpapi-ratelimit-
 *   RateLimit: "api";r=37;t=21                headers: t is the delta)
 *   Retry-After: 21               when refused: seconds, rounded up
 *
 * Pure: the decision's wall-clock time is a parameter. */
#ifndef RL_HEADERS_H
#define RL_HEADERS_H

#include <stddef.h>
#include <stdint.h>

#include "rl_msg.h"

/* Which headers. */
enum {
    RL_HDR_X = 1,     /* X-RateLimit-Limit, -Used, -Remaining, -Reset */
    RL_HDR_IETF = 2,  /* RateLimit-Policy, RateLimit */
    RL_HDR_RETRY = 4, /* Retry-After, when refused */
    RL_HDR_ALL = 7
};

#define RL_HDR_MAX 7         /* headers at most */
#define RL_HDR_VALUE_MAX 256 /* a value's bytes, NUL included */
#define RL_HDR_POLICY_MAX 100 /* a policy name's bytes */

typedef struct rl_hdr_s {
    const char *name; /* a static string */
    char value[RL_HDR_VALUE_MAX];
} rl_hdr_t;

/* Fills out[0..cap) with the headers of `which` for decision r, made at
 * unix_ms on the wall clock, under the policy name (policy_len bytes of
 * printable ASCII, quoted and escaped as a structured-field string; NULL
 * or empty: "default"). A result without counters (limit 0: an error, a
 * fail-open answer) gets none; one without a window length (window_s 0)
 * a RateLimit-Policy without w. X-RateLimit-Reset is rounded to the nearest second:
 * windows end on whole seconds of the store's clock, and the rounding
 * absorbs a small skew between that clock and the caller's. Returns the
 * number of headers, or RL_EINVAL (a policy name too long or with a byte a
 * header cannot carry), RL_EFULL (cap too small). */
int rl_headers(const rl_result_t *r, uint64_t unix_ms, const char *policy,
               size_t policy_len, unsigned which, rl_hdr_t *out, size_t cap);

#endif
