/* Redis store: fixed-window counters in one Redis server, over one hiredis
 * async connection driven by the server's libuv loop.
 *
 * Commands. Each batch is ONE `EVALSHA` whose KEYS are the batch's counters
 * and whose ARGV holds each counter's increment and absolute expiry
 * (redis_script.c). The script INCRBYs every key with redis.pcall (a
 * key holding a non-integer fails only its own op), sets PEXPIREAT only
 * when the INCRBY created the key, and answers with the counts packed in
 * one string. A script runs atomically, so no key is ever created without
 * its expiry, whatever happens to rl-server or the connection; keys
 * recreated after a flush or a restart are created by the script too.
 *
 * Why this command and not a pipeline, MULTI/EXEC or a script per op:
 * measured, see BENCHMARKS.md ("Redis command strategy"). Counts travel
 * through Lua numbers (doubles): exact up to 2^53.
 *
 * The connection, its handshake and its backoff are in redis_conn.c.
 *
 * Failure: every batch handed to hiredis is finished from its reply
 * callback and from nowhere else, so it finishes exactly once. To fail the
 * batches in flight (timeout, close) we free the hiredis context, which
 * calls every pending callback with a NULL reply at once; the connection's
 * `fail` field says which status those callbacks report. Only the oldest
 * batch needs a deadline: replies come in order. Ops with their own error
 * (a key holding a non-integer) come back with status 0 and op->err set.
 *
 * opts->grace_ms is not used here: the batcher puts it into expire_at_ms. */
#include <arpa/inet.h>
#include <stdlib.h>
#include <string.h>

#include <hiredis/async.h>
#include <hiredis/hiredis.h>

#include "rl_error.h"
#include "log.h"
#include "store/redis_clock.h"
#include "store/redis_conn.h"
#include "store/redis_script.h"
#include "store/redis_uv.h"
#include "store/redis.h"
#include "store/store.h"

/* Batches or ops in flight beyond these fail at once: while Redis is stuck,
 * memory (ours and hiredis's output buffer, at most ~600 bytes an op)
 * stays bounded until the timeout. A healthy Redis needs far less: 500k
 * ops/s with a 1 ms round trip keep 500 ops in flight. */
#define MAX_INFLIGHT 1024
#define MAX_INFLIGHT_OPS 65536

struct rls_redis_batch_s {
    struct rls_redis_batch_s *prev, *next; /* in flight list; next: free list */
    rls_redis_store_t *st;
    rls_op_t *ops;
    size_t n;
    rls_store_cb cb;
    void *data;
    uint64_t sent_ns;
    int retried; /* already resent as EVAL after NOSCRIPT */
};

void rls_redis_maybe_finish(rls_redis_store_t *st)
{
    rls_redis_batch_t *b;

    if (st->state != RLS_REDIS_CLOSING || st->open > 0)
        return;
    while ((b = st->pool) != NULL) {
        st->pool = b->next;
        free(b);
    }
    free(st->cmd.p);
    free(st->host);
    free(st->password);
    if (st->done != NULL)
        st->done(st->done_arg);
    free(st);
}

static void on_closed(uv_handle_t *h)
{
    rls_redis_store_t *st = h->data;

    st->open--;
    rls_redis_maybe_finish(st);
}

/* ---- batches ------------------------------------------------------------*/

/* Reports a batch: status 0 means every op has its count or its own err;
 * anything else fails every op. The callback may submit again. */
static void complete(rls_redis_store_t *st, rls_op_t *ops, size_t n, int status,
                     rls_store_cb cb, void *data)
{
    size_t i;

    if (status != 0) {
        for (i = 0; i < n; i++)
            ops[i].err = status;
        st->base.stats.errors++;
        if (status == RL_ETIMEDOUT)
            st->base.stats.timeouts++;
    }
    cb(data, ops, n, status);
}

/* Takes a batch off the in-flight list, back to the pool, and reports it.
 * Called only from the batch's hiredis reply callback. */
static void finish(rls_redis_store_t *st, rls_redis_batch_t *b, int status)
{
    rls_op_t *ops = b->ops;
    size_t n = b->n;
    rls_store_cb cb = b->cb;
    void *data = b->data;

    if (b->prev != NULL)
        b->prev->next = b->next;
    else
        st->head = b->next;
    if (b->next != NULL)
        b->next->prev = b->prev;
    else
        st->tail = b->prev;
    st->inflight--;
    st->inflight_ops -= n;
    if (status == 0) {
        st->base.stats.rtt_us_last = (uv_hrtime() - b->sent_ns) / 1000;
        rls_hist_observe(&st->base.stats.rtt_us, st->base.stats.rtt_us_last);
    }
    b->next = st->pool;
    st->pool = b;
    complete(st, ops, n, status, cb, data);
}

static void on_batch_reply(redisAsyncContext *ac, void *r, void *priv)
{
    rls_redis_batch_t *b = priv;
    rls_redis_store_t *st = b->st;
    rls_redis_conn_t *c = rls_redis_conn_of(ac);
    redisReply *rep = r;
    size_t len;

    if (rep == NULL) {
        /* The context is being freed: by us (c->fail says why) or by
         * hiredis after an I/O error (RL_ESTORE). */
        rls_redis_conn_lost(st, c,
                            ac->err && ac->errstr ? ac->errstr : "dropped");
        finish(st, b, c->fail);
        return;
    }
    if (rep->type == REDIS_REPLY_STRING &&
        rls_redis_parse_counts(rep->str, rep->len, b->ops, b->n) == 0) {
        finish(st, b, 0);
        return;
    }
    /* The script cache was flushed: EVAL runs the script and caches it
     * again, so the batches after this one find it. */
    if (rep->type == REDIS_REPLY_ERROR && !b->retried &&
        strncmp(rep->str, "NOSCRIPT", 8) == 0) {
        b->retried = 1;
        len = rls_redis_encode(&st->cmd, NULL, b->ops, b->n);
        if (len > 0 && redisAsyncFormattedCommand(ac, on_batch_reply, b,
                                                  st->cmd.p, len) == REDIS_OK)
            return;
    }
    RLS_DEBUG("redis batch failed", " err=\"%s\"",
              rep->type == REDIS_REPLY_ERROR ? rep->str : "unexpected reply");
    finish(st, b, RL_ESTORE);
}

/* Fires at the deadline of the oldest batch in flight; replies come in
 * order, so if it is late, Redis is stuck for every batch behind it too. */
static void on_expiry(uv_timer_t *t)
{
    rls_redis_store_t *st = t->data;
    uint64_t age_ms;
    char why[64];

    if (st->head == NULL)
        return;
    age_ms = (uv_hrtime() - st->head->sent_ns) / 1000000;
    if (age_ms < st->timeout_ms) {
        uv_timer_start(t, on_expiry, st->timeout_ms - age_ms, 0);
        return;
    }
    snprintf(why, sizeof(why), "no reply within %llu ms",
             (unsigned long long)st->timeout_ms);
    rls_redis_conn_drop(st, RL_ETIMEDOUT, why);
}

static void st_submit(rls_store_t *s, rls_op_t *ops, size_t n, rls_store_cb cb,
                      void *data)
{
    rls_redis_store_t *st = (rls_redis_store_t *)s;
    redisAsyncContext *ac;
    rls_redis_batch_t *b;
    size_t len;

    s->stats.batches++;
    s->stats.ops += n;
    if (n == 0) {
        cb(data, ops, n, 0);
        return;
    }
    if (st->state != RLS_REDIS_UP || st->inflight >= MAX_INFLIGHT ||
        (st->inflight_ops > 0 && st->inflight_ops + n > MAX_INFLIGHT_OPS)) {
        complete(st, ops, n,
                 st->state == RLS_REDIS_CLOSING ? RL_ESHUTDOWN : RL_ESTORE, cb,
                 data);
        return;
    }
    /* Batch records come from a pool that grows to the most ever in
     * flight, so steady traffic allocates nothing here. */
    if ((b = st->pool) != NULL)
        st->pool = b->next;
    else if ((b = malloc(sizeof(*b))) == NULL)
        goto fail;
    b->st = st;
    b->ops = ops;
    b->n = n;
    b->cb = cb;
    b->data = data;
    b->retried = 0;
    b->sent_ns = uv_hrtime();
    ac = st->conn->ac;
    len = rls_redis_encode(&st->cmd, st->sha, b->ops, b->n);
    rls_redis_uv_hold(ac);
    if (len == 0 || redisAsyncFormattedCommand(ac, on_batch_reply, b, st->cmd.p,
                                               len) != REDIS_OK) {
        rls_redis_uv_release(ac, 0);
        b->next = st->pool;
        st->pool = b;
        goto fail;
    }
    b->next = NULL;
    b->prev = st->tail;
    if (st->tail != NULL)
        st->tail->next = b;
    else
        st->head = b;
    st->tail = b;
    st->inflight++;
    st->inflight_ops += n;
    if (!uv_is_active((uv_handle_t *)&st->expiry))
        uv_timer_start(&st->expiry, on_expiry, st->timeout_ms, 0);
    /* Written now, not when the loop next polls: one iteration and the
     * epoll_ctl calls of a write-interest round sooner. A failed write
     * fails the batch (b is then finished already): touch nothing
     * after. */
    rls_redis_uv_release(ac, 1);
    return;
fail:
    complete(st, ops, n, RL_ESTORE, cb, data);
}

static void st_close(rls_store_t *s, void (*done)(void *arg), void *arg)
{
    rls_redis_store_t *st = (rls_redis_store_t *)s;

    st->done = done;
    st->done_arg = arg;
    st->state = RLS_REDIS_CLOSING;
    /* Fails the batches in flight: their callbacks fire now, or as soon as
     * the hiredis callback we may be inside returns. */
    if (st->conn != NULL) {
        st->conn->fail = RL_ESHUTDOWN;
        if (st->conn->ac != NULL)
            redisAsyncFree(st->conn->ac);
        st->conn = NULL;
    }
    if (st->gai_busy)
        uv_cancel((uv_req_t *)&st->gai);
    uv_close((uv_handle_t *)&st->retry, on_closed);
    uv_close((uv_handle_t *)&st->expiry, on_closed);
    uv_close((uv_handle_t *)&st->clock, on_closed);
}

static const rls_store_vtbl_t vtbl = {st_submit, rls_redis_now_ms, rls_redis_up,
                                      st_close};

rls_store_t *rls_store_redis_new(uv_loop_t *loop, const rls_redis_opts_t *opts)
{
    rls_redis_store_t *st = calloc(1, sizeof(*st));
    const char *host = opts->host != NULL ? opts->host : "127.0.0.1";
    unsigned char addr[16];

    if (st == NULL)
        goto fail;
    if ((st->host = strdup(host)) == NULL)
        goto fail;
    if (opts->password != NULL &&
        (st->password = strdup(opts->password)) == NULL)
        goto fail;
    st->base.v = &vtbl;
    rls_hist_init(&st->base.stats.rtt_us, rls_rtt_bounds_us,
                  sizeof(rls_rtt_bounds_us) / sizeof(rls_rtt_bounds_us[0]));
    st->loop = loop;
    st->port = opts->port > 0 ? opts->port : 6379;
    st->db = opts->db;
    st->timeout_ms = opts->timeout_ms > 0 ? opts->timeout_ms : 1000;
    st->numeric = inet_pton(AF_INET, host, addr) == 1 ||
                  inet_pton(AF_INET6, host, addr) == 1;
    st->rng = (uv_hrtime() ^ (uint64_t)(uintptr_t)st) | 1;
    rls_redis_clock_init(&st->clk);
    st->state = RLS_REDIS_DOWN;
    uv_timer_init(loop, &st->retry);
    uv_timer_init(loop, &st->expiry);
    uv_timer_init(loop, &st->clock);
    st->retry.data = st->expiry.data = st->clock.data = st;
    st->open = 3;
    rls_redis_conn_start(st);
    return &st->base;
fail:
    if (st != NULL) {
        free(st->host);
        free(st->password);
        free(st);
    }
    return NULL;
}
