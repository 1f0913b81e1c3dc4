/* Redis store: fixed-window counters in one Redis server, over one hiredis
 * async connection driven by the server's libuv loop.
 *
 * Commands. Each batch is ONE `EVALSHA` whose KEYS are the batch's counters
 * and whose ARGV holds each counter's increment and absolute expiry
 * (store_redis_script.c). The script INCRBYs every key with redis.pcall (a
 * key holding a non-integer fails only its own op), sets PEXPIREAT only
 * when the INCRBY created the key, and answers with the counts packed in
 * one string. A script runs atomically, so no key is ever created without
 * its expiry, whatever happens to rl-server or the connection; keys
 * recreated after a flush or a restart are created by the script too.
 *
 * Why, measured with tests/bench/store_commands.sh (private redis-server
 * 7.0.15 on loopback, hiredis 0.14.1, 8 batches in flight, a shared 2-core
 * VM, median of 5 interleaved runs; run-to-run noise is about 20%):
 *   pipe   INCRBY + PEXPIREAT per op, pipelined
 *   multi  the same inside MULTI/EXEC, one transaction per batch
 *   eval1  one EVALSHA per op
 *   evalb  one EVALSHA per batch, PEXPIREAT every op, array reply
 *   new    as evalb, PEXPIREAT only when INCRBY created the key
 *   store  this file: as new, counts packed into one string reply
 *
 *   Redis CPU, s per million ops:
 *   batch keys        pipe  multi  eval1  evalb    new  store
 *       1 distinct    16.9   15.7   21.0   19.0   17.8   18.9
 *       1 repeat       8.2    9.2   11.2   12.3   12.2   14.2
 *      16 distinct     3.2    3.2    5.5    4.0    4.3    5.0
 *      16 repeat       2.2    2.4    5.1    3.9    2.9    3.1
 *     256 distinct     3.7    3.4    7.6    4.6    5.2    5.4
 *     256 repeat       2.3    2.1    4.7    2.9    2.1    2.5
 *
 *   Thousand ops/s:
 *   batch keys        pipe  multi  eval1  evalb    new  store
 *       1 distinct      25     28     24     30     32     30
 *       1 repeat        44     39     45     42     41     41
 *      16 distinct     170    158    135    177    170    161
 *      16 repeat       196    186    127    190    241    240
 *     256 distinct     165    189    116    188    169    169
 *     256 repeat       207    202    147    240    379    364
 *
 *   rl-server CPU s per million ops, and allocations per op:
 *   batch keys        pipe  multi  eval1  evalb    new  store
 *       1 cpu        10.68  13.28   8.56   8.47  10.19   7.82
 *       1 allocs      4.62  14.88   2.50   4.50   4.50   3.50
 *      16 cpu         2.51   2.96   2.15   1.21   1.17   0.80
 *      16 allocs      4.07   8.45   2.06   1.22   1.22   0.22
 *     256 cpu         2.48   2.71   2.02   1.01   0.94   0.42
 *     256 allocs      4.01   8.04   2.03   1.02   1.02   0.02
 *
 * pipe is out: a connection lost between INCRBY and PEXPIREAT leaves a key
 * without a TTL. multi is atomic and the cheapest for Redis with distinct
 * keys (15-40% under store), but hiredis allocates per queued command and
 * per reply element: 8 allocations and 3-6x our CPU per op, where the
 * store's 3.5 allocations are per batch (callback node, output buffer,
 * reply), none per request. eval1 pays Lua's fixed cost per op. Setting
 * the expiry only on creation is what "remembering which keys already
 * have their expiry" buys, without memory on our side: about 25% less
 * Redis CPU than evalb on hot keys (repeat), the common case within a
 * window. The packed reply costs Redis a little over new's array (an
 * in-Lua number-to-string per op) and saves one allocation per op here.
 * At batch 1 Lua's fixed cost makes the script dearer than multi; batches
 * are that small only when traffic is light. Counts travel through Lua
 * numbers (doubles): exact up to 2^53.
 *
 * Connection: AUTH and SELECT (when configured), SCRIPT LOAD and TIME are
 * pipelined on every (re)connect; the store is up once TIME answers. A
 * NOSCRIPT reply (SCRIPT FLUSH, failover) resends that batch once as EVAL,
 * which also reloads the script. Reconnects back off from 20 ms, doubling
 * to 1 s, plus up to 50% jitter. Names are resolved on libuv's thread pool.
 *
 * Failure: every batch handed to hiredis is finished from its reply
 * callback and from nowhere else, so it finishes exactly once. To fail the
 * batches in flight (timeout, close) we free the hiredis context, which
 * calls every pending callback with a NULL reply at once; the connection's
 * `fail` field says which status those callbacks report. Only the oldest
 * batch needs a deadline: replies come in order. Ops with their own error
 * (a key holding a non-integer) come back with status 0 and op->err set.
 *
 * hiredis's own libuv adapter ignores poll errors (see store/redis_uv.h), so
 * a refused connect would never be reported; store_redis_uv.c replaces it.
 * opts->grace_ms is not used here: the batcher puts it into expire_at_ms. */
#include <arpa/inet.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <hiredis/async.h>
#include <hiredis/hiredis.h>

#include "rl_error.h"
#include "log.h"
#include "store/redis_clock.h"
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
#define BACKOFF_MIN_MS 20
#define BACKOFF_MAX_MS 1000
#define CLOCK_EVERY_MS 1000

enum { ST_DOWN, ST_CONNECTING, ST_UP, ST_CLOSING };

typedef struct redis_store_s redis_store_t;

typedef struct batch_s {
    struct batch_s *prev, *next; /* in flight list; next links free list */
    redis_store_t *st;
    rls_op_t *ops;
    size_t n;
    rls_store_cb cb;
    void *data;
    uint64_t sent_ns;
    int retried; /* already resent as EVAL after NOSCRIPT */
} batch_t;

/* One hiredis connection (ac->data points here). It outlives its context:
 * freed once the poll handle that drove the context has closed. */
typedef struct conn_s {
    redisAsyncContext *ac;
    redis_store_t *st;
    int fail;         /* status of batches failed by freeing the context */
    uint64_t time_ns; /* when the pending TIME was sent, 0 if none */
} conn_t;

struct redis_store_s {
    rls_store_t base;
    uv_loop_t *loop;
    char *host, *password;
    int port, db, numeric, state, ever_up;
    int quiet; /* a failure was logged; more go to debug until up again */
    uint64_t timeout_ms, backoff_ms, down_since_ms;
    conn_t *conn;      /* current connection, NULL while down */
    uv_timer_t retry;  /* reconnect backoff, or handshake deadline */
    uv_timer_t expiry; /* deadline of the oldest batch in flight */
    uv_timer_t clock;
    uv_getaddrinfo_t gai;
    int gai_busy, open; /* handles and requests not yet finished */
    batch_t *head, *tail, *pool;
    size_t inflight, inflight_ops;
    rls_cmdbuf_t cmd;
    char sha[41];
    rls_redis_clock_t clk;
    uint64_t rng;
    void (*done)(void *);
    void *done_arg;
};

static void start_connect(redis_store_t *st);

static uint64_t mono_ms(void)
{
    return uv_hrtime() / 1000000;
}

/* ---- clock -------------------------------------------------------------*/

static uint64_t st_now_ms(rls_store_t *s)
{
    redis_store_t *st = (redis_store_t *)s;
    struct timespec ts = {0, 0};

    /* The local clock is read only until Redis's is known. */
    if (st->clk.sampled_us == 0)
        clock_gettime(CLOCK_REALTIME, &ts);
    return rls_redis_clock_now(&st->clk, uv_hrtime() / 1000,
                               (uint64_t)ts.tv_sec * 1000 +
                                   (uint64_t)ts.tv_nsec / 1000000);
}

/* Applies a TIME reply received at now_ns. Returns 0, or -1 if the reply
 * is malformed. */
static int clock_sample(redis_store_t *st, conn_t *c, redisReply *r,
                        uint64_t now_ns)
{
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 ||
        r->element[0]->type != REDIS_REPLY_STRING ||
        r->element[1]->type != REDIS_REPLY_STRING)
        return -1;
    rls_redis_clock_sample(&st->clk, c->time_ns / 1000, now_ns / 1000,
                           strtoull(r->element[0]->str, NULL, 10) * 1000000 +
                               strtoull(r->element[1]->str, NULL, 10));
    return 0;
}

static void maybe_finish(redis_store_t *st)
{
    batch_t *b;

    if (st->state != ST_CLOSING || st->open > 0)
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
    redis_store_t *st = h->data;

    st->open--;
    maybe_finish(st);
}

/* The connection's poll handle closed: hiredis freed its context. */
static void on_conn_closed(void *arg)
{
    conn_t *c = arg;
    redis_store_t *st = c->st;

    free(c);
    st->open--;
    maybe_finish(st);
}

/* ---- connection state ---------------------------------------------------*/

static void on_retry(uv_timer_t *t)
{
    start_connect(t->data);
}

static void schedule_retry(redis_store_t *st)
{
    uint64_t delay = st->backoff_ms;

    /* xorshift64: jitter only, so that many servers do not reconnect in
     * lockstep after Redis returns. */
    st->rng ^= st->rng << 13;
    st->rng ^= st->rng >> 7;
    st->rng ^= st->rng << 17;
    delay += st->rng % (st->backoff_ms / 2 + 1);
    st->backoff_ms *= 2;
    if (st->backoff_ms > BACKOFF_MAX_MS)
        st->backoff_ms = BACKOFF_MAX_MS;
    uv_timer_start(&st->retry, on_retry, delay, 0);
}

/* A connection attempt failed before there was a connection to lose. */
static void connect_failed(redis_store_t *st, const char *why)
{
    if (!st->quiet)
        RLS_WARN("redis unreachable", " addr=%s:%d err=\"%s\"", st->host,
                 st->port, why);
    else
        RLS_DEBUG("redis connect failed", " addr=%s:%d err=\"%s\"", st->host,
                  st->port, why);
    st->quiet = 1;
    st->state = ST_DOWN;
    schedule_retry(st);
}

/* Records that connection c is gone or going; idempotent, since hiredis
 * reports one loss through several callbacks. Logs the state change and
 * schedules the reconnect. */
static void conn_lost(redis_store_t *st, conn_t *c, const char *why)
{
    if (c == NULL || st->conn != c)
        return;
    st->conn = NULL;
    if (st->state == ST_CLOSING)
        return;
    if (st->state != ST_UP) {
        connect_failed(st, why);
        return;
    }
    RLS_WARN("redis down", " addr=%s:%d err=\"%s\"", st->host, st->port, why);
    st->down_since_ms = mono_ms();
    st->quiet = 1;
    st->state = ST_DOWN;
    schedule_retry(st);
}

/* Drops the current connection; batches in flight fail with `status`.
 * Inside a hiredis callback the free (and their callbacks) happen as soon
 * as that callback returns. */
static void drop_conn(redis_store_t *st, int status, const char *why)
{
    conn_t *c = st->conn;
    redisAsyncContext *ac;

    if (c == NULL)
        return;
    ac = c->ac;
    c->fail = status;
    conn_lost(st, c, why);
    redisAsyncFree(ac);
}

static conn_t *conn_of(const redisAsyncContext *ac)
{
    return ac->data;
}

static void on_connect(const redisAsyncContext *ac, int status)
{
    /* hiredis frees the context itself after a failed connect. */
    if (status != REDIS_OK)
        conn_lost(conn_of(ac)->st, conn_of(ac), ac->errstr ? ac->errstr : "?");
}

static void on_disconnect(const redisAsyncContext *ac, int status)
{
    (void)status;
    conn_lost(conn_of(ac)->st, conn_of(ac),
              ac->err && ac->errstr ? ac->errstr : "connection closed");
}

/* Checks a handshake reply; on trouble drops the connection and returns
 * -1. */
static int hs_check(redisAsyncContext *ac, redisReply *r, int type)
{
    conn_t *c = conn_of(ac);
    redis_store_t *st = c->st;

    if (r == NULL) {
        conn_lost(st, c, ac->err && ac->errstr ? ac->errstr : "dropped");
        return -1;
    }
    if (st->conn != c)
        return -1;
    if (r->type == type)
        return 0;
    drop_conn(st, RL_ESTORE,
              r->type == REDIS_REPLY_ERROR ? r->str : "unexpected reply");
    return -1;
}

static void on_status_reply(redisAsyncContext *ac, void *r, void *priv)
{
    (void)priv;
    hs_check(ac, r, REDIS_REPLY_STATUS);
}

static void on_load_reply(redisAsyncContext *ac, void *r, void *priv)
{
    redis_store_t *st = conn_of(ac)->st;
    redisReply *rep = r;

    (void)priv;
    if (hs_check(ac, rep, REDIS_REPLY_STRING) != 0)
        return;
    if (rep->len != 40) {
        drop_conn(st, RL_ESTORE, "bad SCRIPT LOAD reply");
        return;
    }
    memcpy(st->sha, rep->str, 40);
}

static void on_time_reply(redisAsyncContext *ac, void *r, void *priv)
{
    conn_t *c = conn_of(ac);
    redis_store_t *st = c->st;

    (void)priv;
    if (hs_check(ac, r, REDIS_REPLY_ARRAY) != 0)
        return;
    if (clock_sample(st, c, r, uv_hrtime()) != 0) {
        drop_conn(st, RL_ESTORE, "bad TIME reply");
        return;
    }
    c->time_ns = 0;
    if (st->state != ST_CONNECTING)
        return;
    uv_timer_stop(&st->retry);
    st->state = ST_UP;
    st->backoff_ms = BACKOFF_MIN_MS;
    st->quiet = 0;
    if (st->ever_up) {
        st->base.stats.reconnects++;
        RLS_INFO("redis reconnected", " addr=%s:%d down_ms=%llu", st->host,
                 st->port, (unsigned long long)(mono_ms() - st->down_since_ms));
    } else {
        RLS_INFO("redis connected", " addr=%s:%d db=%d", st->host, st->port,
                 st->db);
    }
    st->ever_up = 1;
}

static void send_time(conn_t *c)
{
    c->time_ns = uv_hrtime();
    if (redisAsyncCommand(c->ac, on_time_reply, NULL, "TIME") != REDIS_OK)
        c->time_ns = 0;
}

/* Samples Redis's clock every CLOCK_EVERY_MS. A TIME left unanswered also
 * tells an idle store that Redis hangs, so up() turns 0 without waiting for
 * a batch to time out. */
static void on_clock(uv_timer_t *t)
{
    redis_store_t *st = t->data;
    uint64_t wait_ms;

    if (st->state != ST_UP)
        return;
    if (st->conn->time_ns == 0) {
        send_time(st->conn);
        return;
    }
    wait_ms = (uv_hrtime() - st->conn->time_ns) / 1000000;
    if (wait_ms > st->timeout_ms)
        drop_conn(st, RL_ETIMEDOUT, "TIME unanswered");
}

/* The handshake did not finish in time (Redis stopped, or a black hole).
 * It gets at least 250 ms, because a very short batch timeout says nothing
 * about how long a TCP connect plus four commands may take. */
static void on_hs_deadline(uv_timer_t *t)
{
    redis_store_t *st = t->data;

    drop_conn(st, RL_ESTORE, "connect timed out");
}

static void connect_addr(redis_store_t *st, const char *ip)
{
    redisAsyncContext *ac = redisAsyncConnect(ip, st->port);
    conn_t *c = NULL;
    char why[128];

    snprintf(why, sizeof(why), "%s",
             ac == NULL ? "out of memory"
             : ac->err  ? ac->errstr
                        : "");
    if (ac == NULL || ac->err)
        goto fail;
    snprintf(why, sizeof(why), "cannot attach to the loop");
    if ((c = calloc(1, sizeof(*c))) == NULL ||
        rls_redis_uv_attach(ac, st->loop, on_conn_closed, c) != 0)
        goto fail;
    st->open++;
    c->ac = ac;
    c->st = st;
    c->fail = RL_ESTORE;
    rls_redis_clock_new_path(&st->clk);
    ac->data = c;
    st->conn = c;
    redisAsyncSetConnectCallback(ac, on_connect);
    redisAsyncSetDisconnectCallback(ac, on_disconnect);
    /* The handshake is pipelined behind the connect; hiredis sends it once
     * the socket is writable. */
    if (st->password != NULL)
        redisAsyncCommand(ac, on_status_reply, NULL, "AUTH %s", st->password);
    if (st->db > 0)
        redisAsyncCommand(ac, on_status_reply, NULL, "SELECT %d", st->db);
    redisAsyncCommand(ac, on_load_reply, NULL, "SCRIPT LOAD %s",
                      rls_redis_script);
    send_time(c);
    uv_timer_start(&st->retry, on_hs_deadline,
                   st->timeout_ms > 250 ? st->timeout_ms : 250, 0);
    return;
fail:
    free(c);
    if (ac != NULL)
        redisAsyncFree(ac);
    connect_failed(st, why);
}

static void on_resolved(uv_getaddrinfo_t *req, int status, struct addrinfo *res)
{
    redis_store_t *st = req->data;
    struct addrinfo *ai, *pick = NULL;
    char ip[64] = "";

    st->gai_busy = 0;
    st->open--;
    /* IPv4 first, as hiredis does for names: "localhost" often lists ::1
     * first, while Redis commonly binds 127.0.0.1 only. */
    for (ai = status == 0 ? res : NULL; ai != NULL; ai = ai->ai_next) {
        if (ai->ai_family == AF_INET ||
            (pick == NULL && ai->ai_family == AF_INET6))
            pick = ai;
        if (ai->ai_family == AF_INET)
            break;
    }
    if (pick != NULL && pick->ai_family == AF_INET)
        inet_ntop(AF_INET, &((struct sockaddr_in *)pick->ai_addr)->sin_addr, ip,
                  sizeof(ip));
    else if (pick != NULL)
        inet_ntop(AF_INET6, &((struct sockaddr_in6 *)pick->ai_addr)->sin6_addr,
                  ip, sizeof(ip));
    uv_freeaddrinfo(res);
    if (st->state == ST_CLOSING) {
        maybe_finish(st);
    } else if (ip[0] == '\0') {
        connect_failed(st, status ? uv_strerror(status) : "no address");
    } else {
        connect_addr(st, ip);
    }
}

static void start_connect(redis_store_t *st)
{
    struct addrinfo hints;
    int rc;

    st->state = ST_CONNECTING;
    if (st->numeric) {
        connect_addr(st, st->host);
        return;
    }
    /* A name is resolved on libuv's thread pool: getaddrinfo blocks. */
    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    st->gai.data = st;
    rc =
        uv_getaddrinfo(st->loop, &st->gai, on_resolved, st->host, NULL, &hints);
    if (rc == 0) {
        st->gai_busy = 1;
        st->open++;
        return;
    }
    connect_failed(st, uv_strerror(rc));
}

/* ---- batches ------------------------------------------------------------*/

/* Reports a batch: status 0 means every op has its count or its own err;
 * anything else fails every op. The callback may submit again. */
static void complete(redis_store_t *st, rls_op_t *ops, size_t n, int status,
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
static void finish(redis_store_t *st, batch_t *b, int status)
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
    batch_t *b = priv;
    redis_store_t *st = b->st;
    conn_t *c = conn_of(ac);
    redisReply *rep = r;
    size_t len;

    if (rep == NULL) {
        /* The context is being freed: by us (c->fail says why) or by
         * hiredis after an I/O error (RL_ESTORE). */
        conn_lost(st, c, ac->err && ac->errstr ? ac->errstr : "dropped");
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
    redis_store_t *st = t->data;
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
    drop_conn(st, RL_ETIMEDOUT, why);
}

static void st_submit(rls_store_t *s, rls_op_t *ops, size_t n, rls_store_cb cb,
                      void *data)
{
    redis_store_t *st = (redis_store_t *)s;
    redisAsyncContext *ac;
    batch_t *b;
    size_t len;

    s->stats.batches++;
    s->stats.ops += n;
    if (n == 0) {
        cb(data, ops, n, 0);
        return;
    }
    if (st->state != ST_UP || st->inflight >= MAX_INFLIGHT ||
        (st->inflight_ops > 0 && st->inflight_ops + n > MAX_INFLIGHT_OPS)) {
        complete(st, ops, n, st->state == ST_CLOSING ? RL_ESHUTDOWN : RL_ESTORE,
                 cb, data);
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
    if (len == 0 || redisAsyncFormattedCommand(ac, on_batch_reply, b,
                                               st->cmd.p, len) != REDIS_OK) {
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

static int st_up(rls_store_t *s)
{
    return ((redis_store_t *)s)->state == ST_UP;
}

static void st_close(rls_store_t *s, void (*done)(void *arg), void *arg)
{
    redis_store_t *st = (redis_store_t *)s;

    st->done = done;
    st->done_arg = arg;
    st->state = ST_CLOSING;
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

static const rls_store_vtbl_t vtbl = {st_submit, st_now_ms, st_up, st_close};

rls_store_t *rls_store_redis_new(uv_loop_t *loop, const rls_redis_opts_t *opts)
{
    redis_store_t *st = calloc(1, sizeof(*st));
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
    st->backoff_ms = BACKOFF_MIN_MS;
    st->rng = (uv_hrtime() ^ (uint64_t)(uintptr_t)st) | 1;
    rls_redis_clock_init(&st->clk);
    st->state = ST_DOWN;
    uv_timer_init(loop, &st->retry);
    uv_timer_init(loop, &st->expiry);
    uv_timer_init(loop, &st->clock);
    st->retry.data = st->expiry.data = st->clock.data = st;
    st->open = 3;
    uv_timer_start(&st->clock, on_clock, CLOCK_EVERY_MS, CLOCK_EVERY_MS);
    start_connect(st);
    return &st->base;
fail:
    if (st != NULL) {
        free(st->host);
        free(st->password);
        free(st);
    }
    return NULL;
}
