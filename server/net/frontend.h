/* The one life every front end has: the native protocol (conn.c), Envoy's
 * service over gRPC (grpc.c), HTTP checks (http_check.c) and the metrics and
 * health pages (admin.c). Each is started by its own function, which binds
 * its listener; from then on the server treats them alike through this
 * table, as libuv treats its handles: once per loop iteration it flushes
 * them, on SIGTERM it drains them, then tells them to send their clients
 * away, waits until none is busy (or the grace is over, and closes them),
 * and frees them; each appends its own part of the /metrics page.
 *
 * A front end reports nothing up but through on_empty, which it calls
 * once it has said goodbye and holds no connection any more. Starting one
 * returns 0 or an RL_E* code with a one-line reason for the operator, and
 * a front end that did not start holds nothing. */
#ifndef RLS_NET_FRONTEND_H
#define RLS_NET_FRONTEND_H

#include <stddef.h>

#include "rl_buf.h"

typedef struct rls_frontend_s rls_frontend_t;

typedef struct rls_frontend_ops_s {
    const char *flag; /* its option, as --port-file names it: "listen"... */
    /* Once per loop iteration, before the batch is sent: connections that
     * waited read again. NULL: nothing to do. */
    void (*resume)(rls_frontend_t *fe);
    /* Once per loop iteration, after: what is due is written. NULL:
     * nothing to do (it writes as it answers). */
    void (*flush)(rls_frontend_t *fe);
    /* SIGTERM with --drain-ms: it keeps serving, new connections too, while
     * the load balancer notices /healthz. NULL: nothing changes. */
    void (*drain)(rls_frontend_t *fe);
    /* The stop: no new connection, and every client is told to go (GOAWAY,
     * Connection: close) and answered what it asked. Returns the
     * connections told. NULL: it serves on until freed. */
    size_t (*goaway)(rls_frontend_t *fe);
    /* 1 while a connection is open or an answer owed after goaway: the
     * stop waits for it. NULL: never. */
    int (*busy)(const rls_frontend_t *fe);
    /* The stop's grace is over: every connection is closed at once, its
     * answers dropped when they come. NULL: nothing to close. */
    void (*close_all)(rls_frontend_t *fe);
    /* Closes its handles; its memory goes with their close callbacks (or
     * the last answer owed). Required. */
    void (*free)(rls_frontend_t *fe);
    /* Appends its families to the /metrics page. Returns 0 or the
     * buffer's error. NULL: none. */
    int (*metrics)(const rls_frontend_t *fe, rl_buf_t *out);
    /* --threads: serves the connection fd, which the first loop's
     * listener accepted and handed to this loop (it owns fd now). NULL:
     * this listener is served by the first loop alone. */
    void (*adopt)(rls_frontend_t *fe, int fd);
    /* Its listener's set (net/stream.h), where --threads hooks the
     * hand-off and counts the loop's streams; NULL: it has none. */
    struct rls_streams_s *(*streams)(rls_frontend_t *fe);
} rls_frontend_ops_t;

struct rls_frontend_s {
    const rls_frontend_ops_t *ops;
    const char *host; /* its listener's, as configured */
    /* Its TLS handshakes (net/tls.h), NULL when it speaks no TLS: the
     * server shows every listener's in one /metrics family. */
    const struct rls_tls_stats_s *tls;
    /* Its TLS clients when it speaks no TLS, NULL when it does. */
    const struct rls_tls_plain_s *plain;
    int port;         /* ...and the port it is bound to */
    /* Called once its last connection has closed after goaway. */
    void (*on_empty)(void *arg);
    void *arg;
};

#endif
