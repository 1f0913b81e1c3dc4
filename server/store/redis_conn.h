/* The Redis store's connection (redis_conn.c): connecting, AUTH/SELECT,
 * the script and clock handshake, backoff, health; and the state that it
 * shares with the batches (redis.c). Private to those two files. */
#ifndef RLS_REDIS_CONN_H
#define RLS_REDIS_CONN_H

#include <stddef.h>
#include <stdint.h>

#include <hiredis/async.h>
#include <uv.h>

#include "store/redis_clock.h"
#include "store/redis_encode.h"
#include "store/redis_script.h"
#include "store/store.h"

enum { RLS_REDIS_DOWN, RLS_REDIS_CONNECTING, RLS_REDIS_UP, RLS_REDIS_CLOSING };

typedef struct rls_redis_store_s rls_redis_store_t;
typedef struct rls_redis_batch_s rls_redis_batch_t; /* redis.c */

/* One hiredis connection (ac->data points here). It outlives its context:
 * freed once the poll handle that drove the context has closed. */
typedef struct rls_redis_conn_s {
    redisAsyncContext *ac;
    rls_redis_store_t *st;
    int fail;         /* status of batches failed by freeing the context */
    uint64_t time_ns; /* when the pending TIME was sent, 0 if none */
} rls_redis_conn_t;

struct rls_redis_store_s {
    rls_store_t base;
    uv_loop_t *loop;
    char *host, *password;
    int port, db, numeric, state, ever_up;
    int quiet; /* a failure was logged; more go to debug until up again */
    int *quiet_shared; /* the cluster store's: the same for all its nodes */
    uint64_t timeout_ms, backoff_ms, down_since_ms;
    uint64_t grace_ms;   /* a stored quota's counters outlive their window */
    rls_wop_t *qwin;     /* quota windows of the reply being read */
    size_t qwin_ops;     /* ops qwin has room for */
    uint64_t bad_quota_logged_ms; /* loop time of the last warning */
    uint64_t bad_quota_pending;   /* bad quotas since it */
    rls_redis_conn_t *conn; /* current connection, NULL while down */
    uv_timer_t retry;       /* reconnect backoff, or handshake deadline */
    uv_timer_t expiry;      /* deadline of the oldest batch in flight */
    uv_timer_t clock;
    uv_getaddrinfo_t gai;
    int gai_busy, open; /* handles and requests not yet finished */
    rls_redis_batch_t *head, *tail, *pool;
    size_t inflight, inflight_ops;
    size_t live; /* batches in flight not yet answered by timeout */
    /* A batch timed out, or TIME went unanswered: Redis is stuck. New
     * batches fail at once; the connection is dropped once every batch in
     * flight is answered (by Redis or by its own deadline), never before,
     * so that Redis cannot later run a batch answered early. */
    int stalled;
    char run_id[41]; /* Redis's INFO run_id; "" until known */
    /* Redis error replies not yet logged (at most one line a second). */
    uint64_t err_pending, err_logged_ms;
    int err_kind;
    char err_text[160];
    rls_cmdbuf_t cmd;
    char sha[41];
    rls_redis_clock_t clk;
    uint64_t rng;
    int cluster;     /* a cluster master: redirections go to the caller */
    int use_module;  /* look for the ratelimit module at each connect;
                      * base.stats.redis_module: this connection's Redis
                      * has it (RL.BATCH) */
    int cork;        /* rls_redis_cork depth */
    char redir[160]; /* the redirection of the batch being failed */
    size_t redir_len;
    void (*done)(void *);
    void *done_arg;
};

static inline rls_redis_conn_t *rls_redis_conn_of(const redisAsyncContext *ac)
{
    return ac->data;
}

/* Starts the clock sampling timer and the first connection attempt; from
 * then on the store reconnects by itself until it closes. */
void rls_redis_conn_start(rls_redis_store_t *st);

/* Records that connection c is gone or going; idempotent, since hiredis
 * reports one loss through several callbacks. Logs the state change and
 * schedules the reconnect. */
void rls_redis_conn_lost(rls_redis_store_t *st, rls_redis_conn_t *c,
                         const char *why);

/* Drops the current connection; batches in flight fail with `status`.
 * Inside a hiredis callback the free (and their callbacks) happen as soon
 * as that callback returns. */
void rls_redis_conn_drop(rls_redis_store_t *st, int status, const char *why);

/* The store's vtbl entries for the clock and health. */
uint64_t rls_redis_now_ms(rls_store_t *s);
int rls_redis_up(rls_store_t *s);

/* Logs the Redis errors noted since the last line, if any, and if the
 * last line is at least a second old. Defined in redis.c; the connection's
 * clock timer calls it every second so that the count is not held back
 * once errors stop. */
void rls_redis_errors_log(rls_redis_store_t *st);

/* Frees the store once it is closing and every handle and request has
 * finished (st->open == 0); calls the close callback. Defined in redis.c. */
void rls_redis_maybe_finish(rls_redis_store_t *st);

#endif
