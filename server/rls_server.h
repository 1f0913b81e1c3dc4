/* rl-server: the listener, its connections, the batcher and the store, all
 * on one libuv loop. */
#ifndef RLS_SERVER_H
#define RLS_SERVER_H

#include <stdint.h>

#include <uv.h>

#include "rl_buf.h"
#include "rls_batch.h"
#include "rls_config.h"
#include "rls_store.h"
#include "rls_util.h"

/* Why frames were refused, for metrics. */
enum {
    RLS_REJECT_FLAG,    /* flag byte not 0: connection closed */
    RLS_REJECT_SIZE,    /* over --max-frame: connection closed */
    RLS_REJECT_DECODE,  /* payload not a CheckRequest */
    RLS_REJECT_INVALID, /* decoded, but breaks a request rule */
    RLS_REJECT_RULE,    /* names an unknown rule */
    RLS_REJECT_MAX
};

typedef struct rls_stats_s {
    uint64_t decisions[4]; /* by rl_code_t */
    uint64_t rejected[RLS_REJECT_MAX];
    uint64_t conns_accepted;
    uint64_t conns_refused; /* over --max-connections */
    uint64_t conns_overflow; /* closed for not reading their responses */
    uint64_t conns_open;
    uint64_t inflight;       /* requests read and not yet answered */
} rls_stats_t;

typedef struct rls_server_s {
    uv_loop_t *loop;
    const rls_config_t *cfg;
    rls_store_t *store;
    rls_batcher_t batcher;

    uv_tcp_t listener;
    uv_check_t tick;  /* end of every loop iteration: submit, then write */
    uv_idle_t spin;   /* keeps poll from blocking while work is deferred */
    uv_signal_t sigterm, sigint;
    uv_timer_t stop_timer;

    rls_list_t conns;   /* every open connection */
    rls_list_t dirty;   /* connections with responses to write */
    rls_list_t resume;  /* connections to read again */

    int stopping;       /* SIGTERM/SIGINT seen: no new work accepted */
    int draining;       /* reporting unhealthy before stopping */
    int closed;         /* handles closed, loop may end */
    rls_stats_t stats;
    void *metrics;      /* the --metrics HTTP listener (metrics.c) */
    const char *failed_flag; /* which listener failed to start */
    uint64_t refusal_logged_ms; /* loop time of the last refusal warning */
    uint64_t refused_unlogged;  /* refusals since that warning */
} rls_server_t;

/* Binds the listener and starts serving on loop. Returns 0, or a negative
 * libuv error (address in use, cannot bind) with nothing left open. The
 * store belongs to the server from here on and is closed by it. */
int rls_server_start(rls_server_t *s, uv_loop_t *loop,
                     const rls_config_t *cfg, rls_store_t *store);

/* Begins a graceful stop: report unhealthy for --drain-ms, stop accepting,
 * answer everything already received, close every connection, close the
 * store, then every handle, so that uv_run returns. Idempotent. */
void rls_server_stop(rls_server_t *s);

/* Frees what the server holds after uv_run has returned. */
void rls_server_free(rls_server_t *s);

/* 1 while the server takes work and its store answers; otherwise 0 with
 * a one-line reason in *why. */
int rls_server_healthy(const rls_server_t *s, const char **why);

/* The --metrics listener (metrics.c): GET /metrics, GET /healthz.
 * rls_metrics_start returns 0 or a negative libuv error; rls_metrics_close
 * closes its handles (idempotent). */
int rls_metrics_start(rls_server_t *s);
void rls_metrics_close(rls_server_t *s);

/* Connection module (conn.c). */
void rls_conn_on_connection(uv_stream_t *listener, int status);
void rls_conn_respond(void *owner, const rl_result_t *r);
void rls_conn_flush(rls_server_t *s);   /* one write per dirty conn */
void rls_conn_resume(rls_server_t *s);  /* read conns under their limit */
/* Sends every open connection the GOAWAY notice (id 0, ERROR, "server is
 * shutting down") and keeps serving it until the client closes. Returns the
 * number of connections told. */
size_t rls_conn_goaway_all(rls_server_t *s);
void rls_conn_close_all(rls_server_t *s); /* close at once */

#endif
