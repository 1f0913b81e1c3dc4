/* The HTTP check endpoint (http_check.c) on its own listener, --http: for
 * proxies that ask an HTTP service whether to let a request through
 * (nginx auth_request, Traefik forwardAuth, any "auth subrequest").
 *
 *   GET /check?rule=NAME&key=KEY[&cost=N][&deny_status=403]   (or HEAD)
 *
 *   200  allowed (also: shadow mode, mode off, fail-open)
 *   429  refused (or 403 with deny_status=403: nginx auth_request passes
 *        only 401 and 403 through, anything else becomes a 500)
 *   400  bad input: no rule, no key, unknown rule, bad escape, bad cost...
 *        with a plain body (the reason is logged, at most a line a second,
 *        and counted; --check-error-details puts it in the body too)
 *   405  another method; 404 another path; 414 a target over 4 KiB or a
 *        request line over 8 KiB; 431 a head over 8 KiB or 64 headers
 *   503  the store failed and the fail mode is closed (or out of memory)
 *
 * A decision carries X-RateLimit-Limit/-Remaining/-Reset, RateLimit-Policy,
 * RateLimit and, when refused, Retry-After (lib/rl_headers.h). The request
 * is decided as a native one naming that rule: validated, resolved under
 * the policy in force, mode off answered at once, and the rest added to
 * the batcher, so HTTP checks share batches, coalescing and counters with
 * native requests. */
#ifndef RLS_NET_CHECK_H
#define RLS_NET_CHECK_H

#include <stdint.h>

#include <uv.h>

#include "core/decide.h"
#include "check/http_check_query.h"
#include "net/frontend.h"
#include "net/http_server.h"

/* Connections the --http listener keeps open at once (a proxy keeps a pool
 * of kept-alive connections per worker). */
#define RLS_CHECK_CONNS_MAX 1024
/* Idle limit of a kept-alive check connection. Proxies should close theirs
 * sooner (nginx: keepalive_timeout in the upstream block). */
#define RLS_CHECK_IDLE_MS 60000

typedef struct rls_check_s {
    rls_frontend_t fe; /* its life, as the server sees it */
    rls_http_server_t *http;
    uv_loop_t *loop;
    rls_decider_t *decider;
    rls_check_opts_t opts;
    uint64_t pending; /* checks in the batcher, not yet answered */
    char extra[2048]; /* the header lines of the answer being built */
    size_t extra_len;
    /* Checks answered 400 before a decision, by RLS_CHECK_* reason. */
    uint64_t rejected[RLS_CHECK_REASONS];
    uint64_t log_next_ms;   /* the next such refusal is logged from then */
    uint64_t log_suppressed; /* ...and the ones not logged before it */
} rls_check_t;

/* Listens on host:port and answers checks with b (whose runtime holds the
 * policy). Returns 0, or RL_EADDR (cannot listen) or RL_ENOMEM with err
 * (errlen bytes) saying why and nothing left open. */
int rls_check_start(rls_check_t *k, uv_loop_t *loop, const char *host, int port,
                    rls_decider_t *d, const rls_check_opts_t *o, char *err,
                    size_t errlen);

/* The listener as a front end (net/frontend.h). */
rls_frontend_t *rls_check_frontend(rls_check_t *k);

/* The metric label of an RLS_CHECK_* reason. */
const char *rls_check_reason_name(int reason);

/* The listener's counters, or NULL when not started or closed. */
const rls_http_stats_t *rls_check_stats(const rls_check_t *k);

#endif
