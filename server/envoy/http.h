/* envoy-ratelimit's HTTP listener (envoy_http.c): its HOST:PORT, 8080
 * there, here --envoy-http. It serves what the reference's does:
 *
 *   GET /healthcheck  200 "OK" while the server takes work
 *                     (rls_server_takes_work), else 500 with no body, as
 *                     the reference's health checker answers (any method,
 *                     as its router takes any);
 *   POST /json        ShouldRateLimit in protobuf's JSON mapping
 *                     (envoy/json.h): the body a RateLimitRequest, the
 *                     answer the RateLimitResponse, 200 when OK, 429 when
 *                     OVER_LIMIT, 400 when the JSON or the request is bad
 *                     (the reason in the body), 413 over the body cap.
 *
 * A call goes through envoy/rls.c exactly as a gRPC call does: the
 * same configuration in force (the gRPC listener's, shared with it), the
 * same batcher and statistics. The listener is the generic HTTP server
 * (net/http_server.h) with request bodies on; a connection serves one
 * request at a time and keeps its memory while an answer is owed. As a
 * front end (net/frontend.h) it answers through the drain (/healthcheck
 * then says 500) and closes with the others at the stop. */
#ifndef RLS_NET_ENVOY_HTTP_H
#define RLS_NET_ENVOY_HTTP_H

#include <stddef.h>
#include <stdint.h>

#include <uv.h>

#include "envoy/rls.h"
#include "net/frontend.h"
#include "net/http_server.h"
#include "rl_buf.h"

/* Connections open at once (over it the HTTP server evicts, see
 * http_server.h) and the idle limit between requests. */
#define RLS_EHTTP_CONNS_MAX 1024
#define RLS_EHTTP_IDLE_MS 60000

typedef struct rls_ehttp_stats_s {
    uint64_t json_ok;       /* /json answered 200 */
    uint64_t json_over;     /* ... 429 */
    uint64_t json_bad_json; /* 400: the body is not a RateLimitRequest */
    uint64_t json_refused;  /* 400: the service refused the request */
    uint64_t json_failed;   /* 500/503: out of memory, or unencodable */
    uint64_t health_ok;     /* /healthcheck answered 200 */
    uint64_t health_fail;   /* ... 500 */
} rls_ehttp_stats_t;

typedef struct rls_ehttp_s {
    rls_frontend_t fe; /* its life, as the server sees it */
    rls_http_server_t *http;
    rls_envoy_ctx_t *ctx; /* the gRPC listener's, outliving us */
    /* 1 while the server takes work, with a reason either way. */
    int (*takes_work)(void *arg, const char **why);
    void *arg;
    rl_buf_t wire;  /* the request's or the response's protobuf bytes */
    rl_buf_t json;  /* the body being answered */
    char text[320]; /* a 400's body */
    rls_ehttp_stats_t stats;
} rls_ehttp_t;

/* Listens on host:port; calls go to ctx (which must outlive every call:
 * the gRPC listener's), bodies up to max_body bytes. Returns 0, or
 * RL_EADDR (cannot listen) or RL_ENOMEM with err (errlen bytes) saying
 * why and nothing left open. */
int rls_ehttp_start(rls_ehttp_t *e, uv_loop_t *loop, const char *host,
                    int port, rls_envoy_ctx_t *ctx, size_t max_body,
                    int (*takes_work)(void *arg, const char **why), void *arg,
                    char *err, size_t errlen);

/* The listener as a front end. */
rls_frontend_t *rls_ehttp_frontend(rls_ehttp_t *e);

#endif
