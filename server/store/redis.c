/* Redis store: fixed-window counters in one Redis server, over one hiredis
 * async connection driven by the server's libuv loop.
 *
 * Commands. Each batch is ONE `EVALSHA` whose KEYS are the batch's counters
 * and whose ARGV holds each counter's increment and absolute expiry
 * (redis_script.lua, written by redis_encode.c), or the same as the
 * module's RL.BATCH where Redis has it. The script INCRBYs every key with
 * redis.pcall (a key holding a non-integer fails only its own op), sets
 * PEXPIREAT only when the INCRBY created the key, and answers with the
 * counts, one integer each, in one array (read without an allocation per
 * integer, redis_reply_alloc.c, and parsed by redis_parse.c). A script runs
 * atomically, so no key is ever created without its expiry, whatever
 * happens to rl-server or the connection; keys recreated after a flush or
 * a restart are created by the script too.
 *
 * Why this command and not a pipeline, MULTI/EXEC or a script per op:
 * measured, see BENCHMARKS.md ("Redis command strategy"). Counts travel
 * through Lua numbers (doubles): exact up to 2^53.
 *
 * The connection, its handshake, its clock and its backoff are
 * redis_conn.c's; it reports to this file through callbacks only.
 *
 * Failure: every batch handed to hiredis is finished from its reply
 * callback and from nowhere else, so it is recycled exactly once. A batch
 * unanswered at its deadline is answered by timeout then (its callback
 * fires, the record stays in flight until its reply or the connection's
 * end, and the reply is ignored). The script carries that deadline on
 * Redis's clock and counts nothing when Redis runs it later, so a request
 * answered by timeout never consumes quota afterwards. The store then
 * counts as stalled: new batches fail at once, and once nothing in flight
 * can be answered any more the connection is dropped and remade. Dropping
 * it earlier would fail younger batches before their deadline, while a
 * Redis that wakes up would still run them. To fail the batches in flight
 * at once (an I/O error, close) the hiredis context is freed, which calls
 * every pending callback with a NULL reply; rls_redis_conn_gone says which
 * status those callbacks report. Ops with their own error (a key holding a
 * non-integer, OOM) come back with status 0 and op->err set. Every failure
 * is counted by kind (store.h), and Redis's error replies are logged at
 * warn, at most one line a second.
 *
 * Sentinel (opts->sentinel): redis_sentinel.c tells where the master is,
 * and the connection reads it before every connect and asks ROLE. A
 * READONLY reply (the master was demoted under us: the whole call
 * refused, or with the script each op's write) means Redis counted
 * nothing of that call: the batch is answered by the fail mode like any
 * other refused batch, and the connection is dropped, which fails the
 * batches in flight after it (each answered once, by its reply callback)
 * and asks the sentinels where the master went.
 *
 * opts->grace_ms: the batcher puts it into the windows' expire_at_ms; the
 * script adds it to the windows of a stored quota, which it places. */
#include <stdlib.h>
#include <string.h>

#include <hiredis/async.h>
#include <hiredis/hiredis.h>

#include "base/log.h"
#include "rl_clock.h"
#include "rl_error.h"
#include "store/redis.h"
#include "store/redis_conn.h"
#include "store/redis_encode.h"
#include "store/redis_parse.h"
#include "store/redis_script.h"
#include "store/redis_uv.h"
#include "store/store.h"

/* Batches or ops in flight beyond these fail at once: while Redis is stuck,
 * memory (ours and hiredis's output buffer, at most ~600 bytes an op)
 * stays bounded until the timeout. A healthy Redis needs far less: 500k
 * ops/s with a 1 ms round trip keep 500 ops in flight. */
#define MAX_INFLIGHT 1024
#define MAX_INFLIGHT_OPS 65536

typedef struct rls_redis_store_s rls_redis_store_t;

typedef struct batch_s {
    struct batch_s *prev, *next; /* in flight list; next: free list */
    rls_redis_store_t *st;
    rls_op_t *ops;
    size_t n;
    rls_store_cb cb;
    void *data;
    uint64_t sent_ns;
    uint64_t deadline_ms; /* the script's, on Redis's clock */
    uint64_t now_ms;      /* Redis's clock when sent: places quota windows */
    int retried;          /* already resent as EVAL after NOSCRIPT */
    int module;           /* sent as RL.BATCH */
    int asking;           /* preceded by ASKING */
    int undeclared;       /* keys in ARGV (the cluster script) */
    int abandoned;        /* answered by timeout; ops is the caller's */
} batch_t;

struct rls_redis_store_s {
    rls_store_t base;
    rls_redis_conn_t *conn; /* NULL once closed */
    rls_redis_sentinel_t *sentinel; /* NULL without Sentinel, or closed */
    const char *script;
    size_t script_len;
    int (*is_redirect)(const char *err, size_t len);
    int closing;
    uint64_t timeout_ms;
    uint64_t grace_ms; /* a stored quota's counters outlive their window */
    rls_op_window_t *quota_win;   /* quota windows of the reply being read */
    size_t quota_win_ops;         /* ops quota_win has room for */
    uint64_t bad_quota_logged_ms; /* loop time of the last warning */
    uint64_t bad_quota_pending;   /* bad quotas since it */
    uv_loop_t *loop;
    uv_timer_t expiry; /* deadline of the oldest batch in flight */
    uv_timer_t errlog; /* logs the errors held back by the rate limit */
    int open;          /* timers and the connection not yet closed */
    batch_t *head, *tail, *pool;
    size_t inflight, inflight_ops;
    size_t live; /* batches in flight not yet answered by timeout */
    /* A batch timed out, or TIME went unanswered: Redis is stuck. New
     * batches fail at once; the connection is dropped once every batch in
     * flight is answered (by Redis or by its own deadline), never before,
     * so that Redis cannot later run a batch answered early. */
    int stalled;
    /* Redis error replies not yet logged (at most one line a second). */
    uint64_t err_pending, err_logged_ms;
    int err_kind;
    char err_text[160];
    rls_cmdbuf_t cmd;
    int cork;        /* rls_redis_cork depth */
    char redir[160]; /* the redirection of the batch being failed */
    size_t redir_len;
    void (*done)(void *);
    void *done_arg;
};

static void on_batch_reply(redisAsyncContext *ac, void *r, void *priv);

/* A Redis error text saying the node is a replica now. */
static int is_readonly(const char *text, size_t len)
{
    return text != NULL && len >= 8 && memcmp(text, "READONLY", 8) == 0;
}

/* After a READONLY reply: this node no longer takes writes. Dropping the
 * connection fails what is in flight on it (nothing of it can count
 * there) and, with Sentinel, asks where the master is now. Inside ac's
 * reply callback the free waits for it to return. */
static void left_readonly(rls_redis_store_t *st, const redisAsyncContext *ac)
{
    if (ac != NULL && ac == rls_redis_conn_ctx(st->conn))
        rls_redis_conn_drop(st->conn, RL_ESTORE,
                            "READONLY: this Redis is a replica now");
}

static void maybe_finish(rls_redis_store_t *st)
{
    batch_t *b;

    if (!st->closing || st->open > 0)
        return;
    while ((b = st->pool) != NULL) {
        st->pool = b->next;
        free(b);
    }
    free(st->cmd.p);
    free(st->quota_win);
    if (st->done != NULL)
        st->done(st->done_arg);
    free(st);
}

static void on_closed(uv_handle_t *h)
{
    rls_redis_store_t *st = h->data;

    st->open--;
    maybe_finish(st);
}

/* ---- errors -------------------------------------------------------------*/

static void on_errlog(uv_timer_t *t);

/* Logs the Redis errors noted since the last line, if any, once that line
 * is a second old; until then a timer holds them, so that the count is
 * not held back once errors stop. */
static void errors_log(rls_redis_store_t *st)
{
    uint64_t now = rl_mono_ms();

    if (st->err_pending == 0)
        return;
    if (now - st->err_logged_ms < 1000) {
        if (!st->closing && !uv_is_active((uv_handle_t *)&st->errlog))
            uv_timer_start(&st->errlog, on_errlog,
                           1000 - (now - st->err_logged_ms), 0);
        return;
    }
    RLS_WARN("redis errors", " count=%llu kind=%s err=\"%s\"",
             (unsigned long long)st->err_pending,
             rls_store_err_name(st->err_kind), st->err_text);
    st->err_pending = 0;
    st->err_logged_ms = now;
}

static void on_errlog(uv_timer_t *t)
{
    errors_log(t->data);
}

/* Notes n ops or batches refused by Redis, of `kind`, with the text of one
 * refusal, for the warn line; logs now if the last line is a second old.
 * The text is made safe to quote: no quotes, no control characters. */
static void note_errors(rls_redis_store_t *st, uint64_t n, int kind,
                        const char *text, size_t len)
{
    size_t i;

    if (len >= sizeof(st->err_text))
        len = sizeof(st->err_text) - 1;
    for (i = 0; i < len; i++) {
        char ch = text[i];
        st->err_text[i] = ch == '"' || ch == '\\'  ? '\''
                          : (unsigned char)ch < 32 ? ' '
                                                   : ch;
    }
    st->err_text[len] = '\0';
    st->err_kind = kind;
    st->err_pending += n;
    errors_log(st);
}

/* A stored quota that does not parse falls back to the rule's limits; the
 * operator hears of it once a second at most, with the count since. */
static void note_bad_quotas(rls_redis_store_t *st, uint64_t n)
{
    uint64_t now = uv_now(st->loop);

    st->bad_quota_pending += n;
    if (st->bad_quota_logged_ms != 0 && now - st->bad_quota_logged_ms < 1000)
        return;
    RLS_WARN("stored quotas that do not parse: those callers get their "
             "rule's limits (fix with rl-ctl quota set or del)",
             " count=%llu", (unsigned long long)st->bad_quota_pending);
    st->bad_quota_logged_ms = now ? now : 1;
    st->bad_quota_pending = 0;
}

/* ---- batches ------------------------------------------------------------*/

/* Reports a batch: status 0 means every op has its count or its own err;
 * anything else fails every op, and counts once under `kind`. The
 * callback may submit again. */
static void complete(rls_redis_store_t *st, rls_op_t *ops, size_t n, int status,
                     int kind, rls_store_cb cb, void *data)
{
    size_t i;

    if (status != 0) {
        for (i = 0; i < n; i++)
            ops[i].err = status;
    }
    /* A redirection is not an error: the caller resends. */
    if (status != 0 && st->redir_len == 0) {
        st->base.stats.errors++;
        st->base.stats.errors_kind[kind]++;
        if (status == RL_ETIMEDOUT)
            st->base.stats.timeouts++;
    }
    cb(data, ops, n, status);
}

/* Takes a batch off the in-flight list, back to the pool, and reports it
 * unless it was answered by timeout already. Called only from the batch's
 * hiredis reply callback. */
static void finish(rls_redis_store_t *st, batch_t *b, int status, int kind)
{
    rls_op_t *ops = b->ops;
    size_t n = b->n;
    rls_store_cb cb = b->cb;
    void *data = b->data;
    int abandoned = b->abandoned;

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
    b->next = st->pool;
    st->pool = b;
    if (abandoned)
        return;
    st->live--;
    if (status == 0) {
        st->base.stats.rtt_us_last = (uv_hrtime() - b->sent_ns) / 1000;
        rls_hist_observe(&st->base.stats.rtt_us, st->base.stats.rtt_us_last);
    }
    complete(st, ops, n, status, kind, cb, data);
}

/* A stuck Redis is left once nothing in flight can still be answered by
 * it: every batch was answered, by Redis or by its deadline. ac is the
 * context last heard from; nothing is dropped unless it is still the
 * connection's. */
static void maybe_leave_stall(rls_redis_store_t *st,
                              const redisAsyncContext *ac)
{
    char why[64];

    if (!st->stalled || st->live > 0 || ac == NULL ||
        ac != rls_redis_conn_ctx(st->conn))
        return;
    snprintf(why, sizeof(why), "no reply within %llu ms",
             (unsigned long long)st->timeout_ms);
    rls_redis_conn_drop(st->conn, RL_ETIMEDOUT, why);
}

/* Room for the quota windows a reply may carry: only a reply that has
 * some (an op's entry "<admitted> q ...") needs any. Returns 0 or
 * RL_ENOMEM. */
static int quota_win_room(rls_redis_store_t *st, const redisReply *rep,
                          size_t n)
{
    size_t i, e;
    rls_op_window_t *q;

    if (n <= st->quota_win_ops || rep->type != REDIS_REPLY_ARRAY)
        return 0;
    for (e = 0; e < rep->elements; e++) {
        const redisReply *x = rep->element[e];
        if (x->type != REDIS_REPLY_STRING)
            continue;
        for (i = 0; i + 2 < x->len; i++)
            if (x->str[i] == ' ' &&
                (x->str[i + 1] == 'q' || x->str[i + 1] == 'A') &&
                x->str[i + 2] == ' ')
                break;
        if (i + 2 < x->len)
            break;
    }
    if (e == rep->elements)
        return 0;
    if ((q = realloc(st->quota_win, n * RL_ADMIT_WINDOWS_MAX * sizeof(*q))) ==
        NULL)
        return RL_ENOMEM;
    st->quota_win = q;
    st->quota_win_ops = n;
    return 0;
}

/* The batch's command into st->cmd: RL.BATCH where Redis has the module,
 * else EVALSHA with sha, or EVAL when sha is NULL. Returns 0 or
 * RL_ENOMEM. */
static int encode(rls_redis_store_t *st, batch_t *b, const char *sha)
{
    b->module = rls_redis_conn_module(st->conn) && sha != NULL;
    if (b->module)
        return rls_redis_encode_module(&st->cmd, b->ops, b->n, b->now_ms,
                                       st->grace_ms, b->deadline_ms);
    return rls_redis_encode_ex(&st->cmd, sha, st->script, st->script_len,
                               b->undeclared, b->ops, b->n, b->now_ms,
                               st->grace_ms, b->deadline_ms);
}

/* Sends batch b on ac (see encode). Returns 0, or RL_ENOMEM / RL_ESTORE:
 * nothing was sent, and the reply callback will not fire. */
static int send_batch(rls_redis_store_t *st, batch_t *b, redisAsyncContext *ac,
                      const char *sha)
{
    int rc = encode(st, b, sha);

    if (rc != 0)
        return rc;
    /* ASKING admits only the one command after it, and it must come
     * before every send of the call, the EVAL this store resends after
     * NOSCRIPT included. That resend is decided here, from the reply,
     * out of the cluster store's sight: so ASKING is a flag of the batch
     * (RLS_REDIS_ASKING), not a command the cluster store sends. */
    if (b->asking)
        redisAsyncCommand(ac, NULL, NULL, "ASKING");
    return redisAsyncFormattedCommand(ac, on_batch_reply, b, st->cmd.p,
                                      st->cmd.len) == REDIS_OK
               ? 0
               : RL_ESTORE;
}

static void on_batch_reply(redisAsyncContext *ac, void *r, void *priv)
{
    batch_t *b = priv;
    rls_redis_store_t *st = b->st;
    redisReply *rep = r;
    rls_redis_errs_t errs;
    size_t len;
    int rc, k;

    if (rep == NULL) {
        rc = rls_redis_conn_gone(ac);
        finish(st, b, rc,
               rc == RL_ETIMEDOUT ? RLS_SERR_TIMEOUT : RLS_SERR_UNAVAILABLE);
        return;
    }
    if (b->abandoned) {
        /* Answered by timeout already. The script saw its deadline pass
         * and did nothing ("late"), unless Redis ran it just in time and
         * only its reply was late. */
        if (rep->type != REDIS_REPLY_STRING || rep->len != 4 ||
            memcmp(rep->str, "late", 4) != 0)
            RLS_DEBUG("redis reply after the batch timed out", NULL);
        finish(st, b, 0, 0);
        maybe_leave_stall(st, ac);
        return;
    }
    rc = RL_EINVAL;
    if (rep->type != REDIS_REPLY_ERROR &&
        (rc = quota_win_room(st, rep, b->n)) == 0)
        rc = rls_redis_parse_reply(rep, b->ops, b->n, st->quota_win, &errs);
    if (rc == 0 || rc == RLS_REDIS_LATE) {
        st->base.stats.bad_quotas += errs.bad_quotas;
        if (errs.bad_quotas > 0)
            note_bad_quotas(st, errs.bad_quotas);
        if (rc == RLS_REDIS_LATE) {
            /* Our timer had not fired yet, Redis's clock had passed the
             * deadline: nothing was counted. */
            finish(st, b, RL_ETIMEDOUT, RLS_SERR_TIMEOUT);
        } else {
            if (errs.failed > 0) {
                for (k = 0; k < RLS_SERR_MAX; k++)
                    st->base.stats.errors_kind[k] += errs.by_kind[k];
                note_errors(st, errs.failed,
                            rls_redis_err_kind(errs.text, errs.text_len),
                            errs.text, errs.text_len);
            }
            rc = errs.failed > 0 && is_readonly(errs.text, errs.text_len);
            finish(st, b, 0, 0);
            if (rc) {
                left_readonly(st, ac);
                return;
            }
        }
        maybe_leave_stall(st, ac);
        return;
    }
    /* The script cache was flushed: EVAL runs the script and caches it
     * again, so the batches after this one find it. The module was
     * unloaded (Redis ran nothing): the script takes over until the next
     * connection looks for it again. */
    if (rep->type == REDIS_REPLY_ERROR && !b->retried &&
        (strncmp(rep->str, "NOSCRIPT", 8) == 0 ||
         (b->module && strncmp(rep->str, "ERR unknown command", 19) == 0))) {
        b->retried = 1;
        if (b->module)
            rls_redis_conn_module_gone(st->conn);
        if (send_batch(st, b, ac, NULL) == 0)
            return;
    }
    /* A redirection (opts.is_redirect): Redis ran nothing of the call;
     * the caller reads the text and resends. */
    if (rep->type == REDIS_REPLY_ERROR && st->is_redirect != NULL &&
        st->is_redirect(rep->str, rep->len)) {
        len = rep->len < sizeof(st->redir) ? rep->len : sizeof(st->redir) - 1;
        memcpy(st->redir, rep->str, len);
        st->redir[len] = '\0';
        st->redir_len = len > 0 ? len : 1;
        finish(st, b, RL_ESTORE, RLS_SERR_OTHER);
        st->redir_len = 0;
        maybe_leave_stall(st, ac);
        return;
    }
    if (rep->type == REDIS_REPLY_ERROR) {
        k = rls_redis_err_kind(rep->str, rep->len);
        note_errors(st, 1, k, rep->str, rep->len);
    } else {
        k = RLS_SERR_OTHER;
        note_errors(st, 1, k, "unexpected reply", 16);
    }
    rc = rep->type == REDIS_REPLY_ERROR && is_readonly(rep->str, rep->len);
    finish(st, b, RL_ESTORE, k);
    if (rc) {
        left_readonly(st, ac);
        return;
    }
    maybe_leave_stall(st, ac);
}

static batch_t *first_live(rls_redis_store_t *st)
{
    batch_t *b = st->head;

    while (b != NULL && b->abandoned)
        b = b->next;
    return b;
}

/* Fires at the deadline of the oldest batch not yet answered; replies
 * come in order, so if it is late, Redis is stuck. Each batch is answered
 * by timeout at its own deadline, never earlier: the script, if Redis
 * runs it later, sees that deadline passed and counts nothing. The
 * connection is dropped once the last batch in flight is answered. */
static void on_expiry(uv_timer_t *t)
{
    rls_redis_store_t *st = t->data;
    batch_t *b;
    uint64_t age_ms;

    while ((b = first_live(st)) != NULL) {
        age_ms = (uv_hrtime() - b->sent_ns) / 1000000;
        if (age_ms < st->timeout_ms) {
            uv_timer_start(t, on_expiry, st->timeout_ms - age_ms, 0);
            return;
        }
        if (!st->stalled)
            RLS_DEBUG("redis stuck: batches time out", NULL);
        st->stalled = 1;
        b->abandoned = 1;
        st->live--;
        /* The callback may submit (failed at once: stalled) or close the
         * store (every batch is then finished): look again from the
         * head. */
        complete(st, b->ops, b->n, RL_ETIMEDOUT, RLS_SERR_TIMEOUT, b->cb,
                 b->data);
        b->ops = NULL;
        if (st->closing)
            return;
    }
    maybe_leave_stall(st, rls_redis_conn_ctx(st->conn));
}

static void submit_ex(rls_store_t *s, rls_op_t *ops, size_t n, rls_store_cb cb,
                      void *data, int flags)
{
    rls_redis_store_t *st = (rls_redis_store_t *)s;
    redisAsyncContext *ac = st->closing ? NULL : rls_redis_conn_ctx(st->conn);
    uint64_t margin_ms;
    batch_t *b;

    st->redir_len = 0;
    s->stats.batches++;
    s->stats.ops += n;
    if (n == 0) {
        cb(data, ops, n, 0);
        return;
    }
    if (ac == NULL || st->stalled || st->inflight >= MAX_INFLIGHT ||
        (st->inflight_ops > 0 && st->inflight_ops + n > MAX_INFLIGHT_OPS)) {
        complete(st, ops, n, st->closing ? RL_ESHUTDOWN : RL_ESTORE,
                 RLS_SERR_UNAVAILABLE, cb, data);
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
    b->asking = (flags & RLS_REDIS_ASKING) != 0;
    b->undeclared = (flags & RLS_REDIS_UNDECLARED) != 0;
    b->abandoned = 0;
    b->sent_ns = uv_hrtime();
    /* The script's deadline, on Redis's clock, a little before ours: our
     * estimate of Redis's clock may be off by half the best TIME round
     * trip, and the reply of a script run just in time still has to
     * reach us before our timer fires. */
    margin_ms = 1 + rls_redis_conn_rtt_us(st->conn) / 1000;
    if (margin_ms > st->timeout_ms / 2)
        margin_ms = st->timeout_ms / 2;
    b->deadline_ms =
        rls_redis_conn_now_ms(st->conn) + st->timeout_ms - margin_ms;
    /* The batch decides at the batcher's clock reading (store.h), which
     * its replay uses too; ops without one (a caller other than the
     * batcher) at Redis's clock now. */
    b->now_ms = b->n > 0 && b->ops[0].now_ms != 0
                    ? b->ops[0].now_ms
                    : rls_redis_conn_now_ms(st->conn);
    rls_redis_uv_hold(ac);
    if (send_batch(st, b, ac, rls_redis_conn_sha(st->conn)) != 0) {
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
    st->live++;
    if (!uv_is_active((uv_handle_t *)&st->expiry))
        uv_timer_start(&st->expiry, on_expiry, st->timeout_ms, 0);
    /* Written now, not when the loop next polls: one iteration and the
     * epoll_ctl calls of a write-interest round sooner. A failed write
     * fails the batch (b is then finished already): touch nothing
     * after. */
    rls_redis_uv_release(ac, st->cork == 0);
    return;
fail:
    complete(st, ops, n, RL_ESTORE, RLS_SERR_UNAVAILABLE, cb, data);
}

static void st_submit(rls_store_t *s, rls_op_t *ops, size_t n, rls_store_cb cb,
                      void *data)
{
    submit_ex(s, ops, n, cb, data, 0);
}

void rls_redis_submit_ex(rls_store_t *s, rls_op_t *ops, size_t n,
                         rls_store_cb cb, void *data, int flags)
{
    submit_ex(s, ops, n, cb, data, flags);
}

const char *rls_redis_redirect(const rls_store_t *s, size_t *len)
{
    const rls_redis_store_t *st = (const rls_redis_store_t *)s;

    *len = st->redir_len;
    return st->redir_len > 0 ? st->redir : NULL;
}

void rls_redis_cork(rls_store_t *s)
{
    ((rls_redis_store_t *)s)->cork++;
}

/* Writes what the calls submitted while corked left in hiredis's buffer.
 * The write may fail the connection and its batches (their callbacks run
 * now). */
void rls_redis_uncork(rls_store_t *s)
{
    rls_redis_store_t *st = (rls_redis_store_t *)s;
    redisAsyncContext *ac;

    if (st->cork > 0 && --st->cork > 0)
        return;
    if (st->closing || (ac = rls_redis_conn_ctx(st->conn)) == NULL)
        return;
    rls_redis_uv_hold(ac);
    rls_redis_uv_release(ac, 1);
}

static uint64_t st_now_ms(rls_store_t *s)
{
    return rls_redis_conn_now_ms(((rls_redis_store_t *)s)->conn);
}

static int st_up(rls_store_t *s)
{
    rls_redis_store_t *st = (rls_redis_store_t *)s;

    return !st->closing && rls_redis_conn_ctx(st->conn) != NULL && !st->stalled;
}

static void st_close(rls_store_t *s, void (*done)(void *arg), void *arg)
{
    rls_redis_store_t *st = (rls_redis_store_t *)s;

    st->done = done;
    st->done_arg = arg;
    st->closing = 1;
    /* Fails the batches in flight (RL_ESHUTDOWN): their callbacks fire
     * now, or as soon as the hiredis callback we may be inside returns. */
    rls_redis_conn_close(st->conn);
    if (st->sentinel != NULL)
        rls_redis_sentinel_close(st->sentinel);
    uv_close((uv_handle_t *)&st->expiry, on_closed);
    uv_close((uv_handle_t *)&st->errlog, on_closed);
}

typedef struct {
    void (*cb)(void *data, void *reply);
    void *data;
} cmd_t;

static void on_cmd_reply(redisAsyncContext *ac, void *r, void *priv)
{
    cmd_t *k = priv;

    (void)ac;
    k->cb(k->data, r);
    free(k);
}

static int send_command(rls_store_t *s, int argc, const char **argv,
                        const size_t *lens, void (*cb)(void *data, void *reply),
                        void *data, int write_now)
{
    rls_redis_store_t *st = (rls_redis_store_t *)s;
    redisAsyncContext *ac = st->closing ? NULL : rls_redis_conn_ctx(st->conn);
    cmd_t *k;

    if (ac == NULL || st->stalled)
        return RL_ESTORE;
    if ((k = malloc(sizeof(*k))) == NULL)
        return RL_ENOMEM;
    k->cb = cb;
    k->data = data;
    rls_redis_uv_hold(ac);
    if (redisAsyncCommandArgv(ac, on_cmd_reply, k, argc, argv, lens) !=
        REDIS_OK) {
        rls_redis_uv_release(ac, 0);
        free(k);
        return RL_ESTORE;
    }
    /* command(): written now, since a command sent as the server stops
     * (its goodbye) must leave before the store closes. command_later():
     * with the loop's next write. A failed write fails it through its
     * callback. */
    rls_redis_uv_release(ac, write_now);
    return RL_OK;
}

static int st_command(rls_store_t *s, int argc, const char **argv,
                      const size_t *lens, void (*cb)(void *data, void *reply),
                      void *data)
{
    return send_command(s, argc, argv, lens, cb, data, 1);
}

static int st_command_later(rls_store_t *s, int argc, const char **argv,
                            const size_t *lens,
                            void (*cb)(void *data, void *reply), void *data)
{
    return send_command(s, argc, argv, lens, cb, data, 0);
}

static const rls_store_vtbl_t vtbl = {st_submit, st_now_ms,       st_up,
                                      st_close,  st_command,      NULL,
                                      NULL,      st_command_later};

/* ---- what the connection reports ----------------------------------------*/

/* The connection was lost: what was in flight fails through its replies;
 * a stall ends with the connection it was on. */
static void on_conn_down(void *data)
{
    rls_redis_store_t *st = data;

    st->stalled = 0;
}

/* TIME went unanswered: Redis hangs. Dropping the connection now would
 * fail the batches in flight before their deadline, and a Redis that wakes
 * up would still run them: stop sending instead; the last batch's
 * deadline drops it (maybe_leave_stall), or this does when there is
 * none. */
static void on_conn_stuck(void *data)
{
    rls_redis_store_t *st = data;

    st->stalled = 1;
    if (st->live == 0)
        rls_redis_conn_drop(st->conn, RL_ETIMEDOUT, "TIME unanswered");
}

/* Sentinel: the master's address changed (or became known). */
static void on_master_moved(void *data)
{
    rls_redis_store_t *st = data;

    if (!st->closing)
        rls_redis_conn_retarget(st->conn);
}

static void on_sentinel_closed(void *data)
{
    rls_redis_store_t *st = data;

    st->sentinel = NULL;
    st->open--;
    maybe_finish(st);
}

static void on_conn_closed(void *data)
{
    rls_redis_store_t *st = data;

    st->conn = NULL;
    st->open--;
    maybe_finish(st);
}

rls_store_t *rls_store_redis_new(uv_loop_t *loop, const rls_redis_opts_t *opts)
{
    static const rls_redis_conn_cbs_t cbs = {on_conn_down, on_conn_stuck,
                                             on_conn_closed};
    static const rls_redis_sentinel_cbs_t scbs = {on_master_moved,
                                                  on_sentinel_closed};
    rls_redis_store_t *st = calloc(1, sizeof(*st));
    rls_redis_sentinel_opts_t so;
    rls_redis_conn_opts_t co;

    if (st == NULL)
        return NULL;
    st->base.v = &vtbl;
    rls_hist_init(&st->base.stats.rtt_us, rls_rtt_bounds_us,
                  sizeof(rls_rtt_bounds_us) / sizeof(rls_rtt_bounds_us[0]));
    st->loop = loop;
    st->timeout_ms = opts->timeout_ms > 0 ? opts->timeout_ms : 1000;
    st->grace_ms = opts->grace_ms;
    st->script = opts->script != NULL ? opts->script : rls_redis_script;
    st->script_len =
        opts->script != NULL ? opts->script_len : rls_redis_script_len;
    st->is_redirect = opts->is_redirect;
    memset(&co, 0, sizeof(co));
    co.host = opts->host != NULL ? opts->host : "127.0.0.1";
    co.port = opts->port > 0 ? opts->port : 6379;
    co.user = opts->user;
    co.password = opts->password;
    co.db = opts->db;
    co.tls = opts->tls;
    co.timeout_ms = st->timeout_ms;
    co.script = st->script;
    co.script_len = st->script_len;
    co.use_module = !opts->no_module;
    co.quiet = opts->quiet;
    co.stats = &st->base.stats;
    co.over_cap = opts->over_cap;
    if (opts->sentinel != NULL) {
        so = *opts->sentinel;
        so.stats = &st->base.stats;
        if ((st->sentinel = rls_redis_sentinel_new(loop, &so, &scbs, st)) ==
            NULL) {
            free(st);
            return NULL;
        }
        co.addr = rls_redis_sentinel_addr;
        co.addr_stale = rls_redis_sentinel_stale;
        co.addr_arg = st->sentinel;
        co.want_master = 1;
    }
    if ((st->conn = rls_redis_conn_new(loop, &co, &cbs, st)) == NULL) {
        /* The sentinels' handles close in the background; st is freed
         * once they have (on_sentinel_closed). */
        if (st->sentinel != NULL) {
            st->closing = 1;
            st->open = 1;
            rls_redis_sentinel_close(st->sentinel);
        } else {
            free(st);
        }
        return NULL;
    }
    uv_timer_init(loop, &st->expiry);
    uv_timer_init(loop, &st->errlog);
    st->expiry.data = st->errlog.data = st;
    st->open = st->sentinel != NULL ? 4 : 3;
    return &st->base;
}
