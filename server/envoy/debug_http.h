/* envoy-ratelimit's debug listener (debug_http.c): its
 * DEBUG_HOST:DEBUG_PORT, 6070 there, here --debug-http. Of what the
 * reference serves there it has counterparts for two paths:
 *
 *   /rlconfig  the Envoy descriptors in force (--envoy-config files or
 *              the control plane's), in the reference's Dump() form
 *              (envoy/dump.h); empty before a configuration;
 *   /          the list of paths with a line of help each, as there.
 *
 * Go's /debug/pprof/... and /stats (expvar) have none: another path is
 * 404 (the metrics are on --metrics). Any method, as the reference's mux
 * takes any. As a front end (net/frontend.h) it is --metrics' kind: it
 * serves through the stop and never keeps it waiting. */
#ifndef RLS_NET_DEBUG_HTTP_H
#define RLS_NET_DEBUG_HTTP_H

#include <stddef.h>

#include <uv.h>

#include "envoy/rls.h"
#include "net/frontend.h"
#include "net/http_server.h"
#include "rl_buf.h"

typedef struct rls_dhttp_s {
    rls_frontend_t fe;
    rls_http_server_t *http;
    rls_envoy_ctx_t *ctx; /* the gRPC listener's: its configuration */
    rl_buf_t buf;         /* the page being sent */
} rls_dhttp_t;

/* Listens on host:port. Returns 0, or RL_EADDR or RL_ENOMEM with err
 * (errlen bytes) saying why and nothing left open. */
int rls_dhttp_start(rls_dhttp_t *d, uv_loop_t *loop, const char *host,
                    int port, rls_envoy_ctx_t *ctx, char *err, size_t errlen);

rls_frontend_t *rls_dhttp_frontend(rls_dhttp_t *d);

#endif
