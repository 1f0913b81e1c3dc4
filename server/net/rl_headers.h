/* The rate-limit response headers of one decision (rl_headers.c), shared
 * by every front end that speaks HTTP: the /check endpoint writes them as
 * header lines, the Envoy service puts them in response_headers_to_add.
 *
 *   X-RateLimit-Limit: 100          the deciding window's limit
 *   X-RateLimit-Remaining: 37       what it has left after this decision
 *   X-RateLimit-Reset: 21           seconds until it ends (rounded up)
 *   RateLimit-Policy: "api";q=100;w=60     (draft-ietf-httpapi-ratelimit-
 *   RateLimit: "api";r=37;t=21              headers, structured fields)
 *   Retry-After: 21                 only when refused: seconds (rounded up)
 *
 * The policy name is a rule name (or "inline"), so it is always a valid
 * structured-field string: rule names are [A-Za-z0-9_.:-] (rules.c). */
#ifndef RLS_NET_RL_HEADERS_H
#define RLS_NET_RL_HEADERS_H

#include <stddef.h>

#include "rl_msg.h"

/* Which headers to emit. */
enum {
    RLS_HDR_X = 1,     /* X-RateLimit-Limit, -Remaining, -Reset */
    RLS_HDR_DRAFT = 2, /* RateLimit, RateLimit-Policy */
    RLS_HDR_RETRY = 4  /* Retry-After, when refused */
};

/* Longest value any header below takes (two quoted names of RL_RULE_MAX
 * would not fit: the name appears once per value). */
#define RLS_HDR_VALUE_MAX (96 + 64)

/* Called once per header; name and value are NUL-terminated and valid
 * only during the call. Returns 0, or an error that stops the walk. */
typedef int (*rls_hdr_fn)(void *arg, const char *name, const char *value);

/* Emits the headers of `which` for result r under the policy `name`
 * (name_len bytes; NULL or empty: "default"). A result with no window
 * (window_s 0: an error, a fail-open answer without a window) emits only
 * what it can: no policy and no reset. Returns 0 or emit's error. */
int rls_rl_headers(const rl_result_t *r, const char *name, size_t name_len,
                   unsigned which, rls_hdr_fn emit, void *arg);

#endif
