/* rl-server's life (server.c): its front ends (net/frontend.h: the native
 * protocol, --metrics, --grpc, --http), the batcher, the policy and the
 * store, all on one libuv loop; start, one tick per loop iteration, drain
 * and graceful stop. */
#ifndef RLS_SERVER_H
#define RLS_SERVER_H

#include <stdint.h>

#include <uv.h>

#include "core/decide.h"
#include "admin.h"
#include "admin/admin_api.h"
#include "core/top_publish.h"
#include "check/http_check.h"
#include "native/conn.h"
#include "envoy/debug_http.h"
#include "envoy/http.h"
#include "envoy/grpc.h"
#include "net/http_server.h"
#include "net/tls_reload.h"
#include "flags.h"
#include "envoy/stats.h"
#include "envoy/statsd.h"
#include "envoy/xds_client.h"
#include "envoy/reload.h"
#include "policy/rules_reload.h"
#include "policy/runtime.h"
#include "policy/switches.h"
#include "rl_buf.h"
#include "store/store.h"
#include "trace/tracer.h"

/* The listeners a server may open, one front end each, in the order they
 * start, flush and stop. */
typedef enum {
    RLS_LISTENER_NATIVE = 0, /* --listen */
    RLS_LISTENER_METRICS,    /* --metrics */
    RLS_LISTENER_GRPC,       /* --grpc */
    RLS_LISTENER_HTTP,       /* --http */
    RLS_LISTENER_ENVOY_HTTP, /* --envoy-http */
    RLS_LISTENER_DEBUG_HTTP, /* --debug-http */
    RLS_LISTENER_ADMIN,      /* --admin */
    RLS_LISTENERS
} rls_listener_t;

/* What the first loop of --threads tells the others (server/loops.c sets
 * them; NULL with one loop). Each runs on the first loop. */
typedef struct rls_server_hooks_s {
    void (*stop)(void *arg); /* its stop began */
    /* a new policy or new switches are in force in rt */
    void (*changed)(void *arg, const rls_runtime_t *rt);
    /* a new Envoy tree is in force (borrowed: a hook keeps a reference) */
    void (*envoy_conf)(void *arg, rls_envoy_conf_t *conf);
    void (*ready)(void *arg); /* the runtime switches were read */
    /* new listener certificates are in force in tls */
    void (*tls)(void *arg, struct rls_tls_s *tls);
    int (*metrics)(void *arg, rl_buf_t *out); /* every loop's page */
    /* --admin: loop i's state, and its pause (rls_loops_pause) */
    int (*loop_info)(void *arg, unsigned i, rls_admin_loop_t *out);
    int (*loop_pause)(void *arg, unsigned i, int on);
    void *arg;
} rls_server_hooks_t;

typedef struct rls_server_s {
    uv_loop_t *loop;
    /* --threads: the first loop's server, which binds the listeners and
     * reads the policy; NULL in the first loop (or the only one). */
    const struct rls_server_s *first;
    rls_server_hooks_t hooks; /* the first loop's */
    int sw_ready;   /* another loop: the first has read the switches */
    /* --threads: where the loop says whether its store is up (read by
     * the hand-off on the first loop's thread), written on change; NULL:
     * not told. */
    int *store_up_out;
    int store_up_last;
    int ready_told; /* the first loop: hooks.ready was called */
    const rls_flags_t *cfg;
    rls_store_t *store;
    rls_decider_t decider; /* the batcher, the handle secret */
    rls_runtime_t rt;     /* the policy in force */
    rls_rules_reload_t reload;  /* SIGHUP and the rules file's changes */
    rls_switch_poll_t switches; /* rl-ctl's switches, from Redis */
    rls_local_t local;          /* --fail-local's decisions and charges */
    /* Top offenders (--top-k): the process's sketches, the first loop's
     * (every loop joins them), and its publisher to Redis. */
    struct rls_top_s *top;
    rls_top_pub_t top_pub;

    /* The front ends by listener, NULL for one not opened; the server
     * treats them alike through this table. Their state: */
    rls_frontend_t *fe[RLS_LISTENERS];
    rls_conns_t conns;       /* --listen */
    rls_admin_t admin;       /* --metrics */
    rls_grpc_t *grpc;        /* --grpc */
    rls_envoy_reload_t envoy_reload; /* its --envoy-config files */
    rls_estats_t estats;             /* its per-descriptor statistics */
    int estats_on;                   /* --envoy-stats on */
    rls_statsd_t statsd;             /* --statsd, which exports them */
    rls_tracer_t tracer;     /* --trace-otlp: this loop's spans and exporter */
    char trace_instance[40]; /* its service.instance.id (the first loop's) */
    rls_xds_t xds;                   /* or its --envoy-xds control plane */
    rls_check_t check;       /* --http */
    rls_ehttp_t ehttp;       /* --envoy-http */
    rls_dhttp_t dhttp;       /* --debug-http */
    rls_admin_api_t admin_api; /* --admin */
    struct rls_tls_s *tls;   /* --tls-cert's, NULL: no TLS listener */
    rls_tls_reload_t tls_reload; /* SIGHUP and its files' changes */

    uv_check_t tick;  /* end of every loop iteration: submit, then write */
    uv_prepare_t before_poll; /* the same before each poll */
    uv_poll_t hold;   /* hold_fd: wakes the loop when a held batch is due */
    int hold_fd;      /* a timerfd with --batch-hold-us, else -1 */
    uint64_t hold_due_ns; /* when it fires (uv_hrtime), 0: disarmed */
    uv_signal_t sigterm, sigint;
    uv_timer_t stop_timer;

    int stopping;       /* SIGTERM/SIGINT seen: no new work accepted */
    int draining;       /* reporting unhealthy before stopping */
    int told;           /* the front ends have said goodbye */
    int closed;         /* handles closed, loop may end */
    uint64_t start_unix_ms;
} rls_server_t;

/* Binds the listeners and starts serving on loop under `policy` (the
 * server takes the reference; NULL: built from cfg's --rule flags alone).
 * Returns 0, or an RL_E* code (RL_EADDR: a listener cannot bind; RL_EINVAL:
 * bad --rule flags or --envoy-config; RL_ENOMEM) with a one-line reason in
 * err (errlen bytes) and nothing left open but handles closing, which a
 * run of the loop finishes. From a start that succeeded, the store
 * belongs to the server and is closed by it. */
int rls_server_start(rls_server_t *s, uv_loop_t *loop,
                     const rls_flags_t *cfg, rls_store_t *store,
                     rls_policy_t *policy, char *err, size_t errlen);

/* Starts another loop of --threads (server/loops.c) on loop, beside
 * first (started, its loop not running yet): first's flags and policy,
 * the store given (the server's from then on, as above), first's handle
 * secret; no listener of its own (first's hand it connections,
 * rls_frontend_ops_t.adopt), no signals, no reloading: first hands it
 * what it installs. Returns as rls_server_start. */
int rls_server_start_loop(rls_server_t *s, uv_loop_t *loop,
                          const rls_server_t *first, rls_store_t *store,
                          char *err, size_t errlen);

/* The loop's own /metrics page (rls_server_metrics is the process's:
 * with --threads, every loop's merged). */
int rls_server_metrics_loop(const rls_server_t *s, rl_buf_t *out);

/* The port a listener is bound to (the one the system picked for port 0),
 * or 0 when it is not open. */
int rls_server_port(const rls_server_t *s, rls_listener_t which);

/* Writes one line per open listener, "FLAG HOST:PORT" (FLAG: listen,
 * metrics, grpc, http, envoy-http, debug-http or admin, as the options are
 * named; PORT the one bound),
 * to path, atomically: the file appears whole or not at all, so a process
 * that started the server on port 0 can wait for it and read it. Returns
 * 0 or RL_EIO. */
int rls_server_write_ports(const rls_server_t *s, const char *path);

/* Begins a graceful stop: report unhealthy for --drain-ms, stop accepting,
 * answer everything already received, close every connection, close the
 * store, then every handle, so that uv_run returns. Idempotent. */
void rls_server_stop(rls_server_t *s);

/* Frees what the server holds after uv_run has returned. */
void rls_server_free(rls_server_t *s);

/* 1 while the server takes work and its store answers; otherwise 0 with
 * a one-line reason in *why. */
int rls_server_healthy(const rls_server_t *s, const char **why);

/* What envoy-ratelimit's health checks mean (GET /healthcheck, the gRPC
 * listener's grpc.health.v1): 1 while the server takes work, which is
 * rls_server_healthy or, under --fail-open, a store that is down (the
 * answers are the fail mode's); 0 while draining, failing closed on a
 * store that is down, or any other reason rls_server_healthy gives, with
 * a one-line reason in *why. */
int rls_server_takes_work(const rls_server_t *s, const char **why);

/* Renders the /metrics page of the server into out (see metrics.h). */
int rls_server_metrics(const rls_server_t *s, rl_buf_t *out);

/* The front ends' settings taken from the flags (the server's own start
 * uses these; so do harnesses that start one front end alone). */
void rls_server_stream_opts(const rls_flags_t *cfg, rls_stream_opts_t *o);
void rls_server_conns_opts(const rls_flags_t *cfg, rls_conns_opts_t *o);
void rls_server_grpc_opts(const rls_flags_t *cfg, rls_grpc_opts_t *o);

#endif
