/* The --metrics listener (admin.c): GET (or HEAD) /metrics and /healthz
 * for Prometheus and the load balancer, on an HTTP listener of its own.
 * The pages are the owner's: admin.c routes, the owner renders. As a
 * front end (net/frontend.h) it outlives the stop's goaway, so that
 * /healthz answers 503 while the server finishes; it owes no client
 * anything and never keeps the stop waiting. */
#ifndef RLS_NET_ADMIN_H
#define RLS_NET_ADMIN_H

#include <stddef.h>

#include <uv.h>

#include "net/frontend.h"
#include "net/http_server.h"
#include "rl_buf.h"

typedef struct rls_admin_s {
    rls_frontend_t fe; /* its life, as the server sees it */
    rls_http_server_t *http;
    /* Renders the /metrics page into out: 0 or an RL_E* code (then the
     * scrape gets a 500). */
    int (*page)(void *arg, rl_buf_t *out);
    /* 1 when healthy; else 0. *why is a one-line reason either way. */
    int (*health)(void *arg, const char **why);
    void *arg;
    rl_buf_t buf; /* the page being sent */
} rls_admin_t;

/* Listens on host:port. Returns 0, or RL_EADDR (cannot listen) or
 * RL_ENOMEM with err (errlen bytes) saying why and nothing left open. */
int rls_admin_start(rls_admin_t *a, uv_loop_t *loop, const char *host,
                    int port, int (*page)(void *arg, rl_buf_t *out),
                    int (*health)(void *arg, const char **why), void *arg,
                    char *err, size_t errlen);

/* The listener as a front end. */
rls_frontend_t *rls_admin_frontend(rls_admin_t *a);

#endif
