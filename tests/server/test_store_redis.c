/* The Redis store, driven directly on a libuv loop against a private
 * redis-server: counts, expiries, the clock, and every kind of trouble
 * (never started, killed mid-batch, restarted, stuck, flushed, closed with
 * batches in flight). Callbacks are counted and the counts asserted after
 * the loop ran; every wait has a deadline. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <hiredis/hiredis.h>
#include <uv.h>

#include "rl_admit.h"
#include "rl_error.h"
#include "rl_window.h"
#include "batch.h"
#include "policy/config.h"
#include "server.h"
#include "store/redis_clock.h"
#include "store/redis_encode.h"
#include "store/redis_parse.h"
#include "store/redis_reply_alloc.h"
#include "store/redis_script.h"
#include "store/redis.h"
#include "store/store.h"
#include "rlt.h"

#define MAX_OPS 300

typedef struct fx_s {
    uv_loop_t loop;
    uv_timer_t tick; /* wakes uv_run(UV_RUN_ONCE) so deadlines are seen */
    rlt_redis_t redis;
    rlt_redis_t replica; /* test_module_replicates; pid 0 if none */
    redisContext *rc; /* blocking connection, to inspect Redis */
    rls_store_t *st;
    int closed;
    const char *password;
} fx_t;

/* One batch and what its callback saw: each op one 60 s window (index 1)
 * with a limit nothing reaches, and one request of cost `incr`, so the
 * count after the batch is before + admitted * incr. */
typedef struct job_s {
    rls_op_t ops[MAX_OPS];
    rls_wop_t win[MAX_OPS][RLS_WINDOWS_MAX];
    uint32_t cost[MAX_OPS][32];
    char keys[MAX_OPS][96];  /* the ops' base keys */
    char wkeys[MAX_OPS][128]; /* their counters */
    /* A stored quota's windows, copied in the callback. */
    rls_wop_t qwin[MAX_OPS][RLS_WINDOWS_MAX];
    uint32_t nqwin[MAX_OPS];
    size_t n;
    int calls, status;
    uint64_t fired_ms;
    fx_t *resubmit; /* submit again from inside the callback */
    int resubmit_status, resubmit_calls;
} job_t;

static void on_tick(uv_timer_t *t)
{
    (void)t;
}

static void on_done(void *arg)
{
    (*(int *)arg)++;
}

/* Runs the loop until cond holds or ms pass; evaluates to cond. */
#define RUN_UNTIL(f, cond, ms)                                                 \
    do {                                                                       \
        uint64_t dl_ = rlt_mono_ms() + (ms);                                   \
        while (!(cond) && rlt_mono_ms() < dl_)                                 \
            uv_run(&(f)->loop, UV_RUN_ONCE);                                   \
    } while (0)

static void run_for(fx_t *f, uint64_t ms)
{
    uint64_t dl = rlt_mono_ms() + ms;

    while (rlt_mono_ms() < dl)
        uv_run(&f->loop, UV_RUN_ONCE);
}

static rls_store_t *open_store(fx_t *f, int port, uint64_t timeout_ms, int db)
{
    rls_redis_opts_t o;

    memset(&o, 0, sizeof(o));
    o.host = "127.0.0.1";
    o.port = port;
    o.password = f->password;
    o.db = db;
    o.timeout_ms = timeout_ms;
    o.grace_ms = 1000;
    f->st = rls_store_redis_new(&f->loop, &o);
    assert_non_null(f->st);
    f->closed = 0;
    return f->st;
}

static void close_store(fx_t *f)
{
    int done = 0;

    if (f->st == NULL || f->closed)
        return;
    f->st->v->close(f->st, on_done, &done);
    f->closed = 1;
    assert_int_equal(done, 0); /* from a close callback, never inline */
    RUN_UNTIL(f, done > 0, 5000);
    assert_int_equal(done, 1);
    f->st = NULL;
}

static int fx_setup_with(void **state, char *const extra[], const char *pw)
{
    fx_t *f = calloc(1, sizeof(*f));

    if (f == NULL)
        return -1;
    uv_loop_init(&f->loop);
    uv_timer_init(&f->loop, &f->tick);
    uv_timer_start(&f->tick, on_tick, 5, 5);
    if (rlt_redis_start_with(&f->redis, extra) != 0) {
        free(f);
        return -1;
    }
    f->rc = rlt_redis_connect(&f->redis);
    f->password = pw;
    if (f->rc != NULL && pw != NULL) {
        redisReply *r = redisCommand(f->rc, "AUTH %s", pw);
        if (r)
            freeReplyObject(r);
    }
    *state = f;
    return f->rc != NULL ? 0 : -1;
}

static int fx_setup(void **state)
{
    return fx_setup_with(state, NULL, NULL);
}

static int fx_setup_auth(void **state)
{
    static char *const extra[] = {"--requirepass", "s3cret pw", NULL};

    return fx_setup_with(state, extra, "s3cret pw");
}

static int fx_teardown(void **state)
{
    fx_t *f = *state;

    rlt_redis_pause(&f->redis, 0);
    close_store(f);
    uv_close((uv_handle_t *)&f->tick, NULL);
    uv_run(&f->loop, UV_RUN_DEFAULT);
    assert_int_equal(uv_loop_close(&f->loop), 0);
    if (f->rc)
        redisFree(f->rc);
    rlt_redis_stop(&f->redis);
    if (f->replica.pid > 0)
        rlt_redis_stop(&f->replica);
    free(f);
    return 0;
}

static void on_job(void *data, rls_op_t *ops, size_t n, int status)
{
    job_t *j = data;

    size_t i;

    assert_ptr_equal(ops, j->ops);
    assert_int_equal(n, j->n);
    for (i = 0; i < n; i++) {
        /* qwin is valid during the callback only */
        j->nqwin[i] = ops[i].nqwin;
        if (ops[i].nqwin > 0)
            memcpy(j->qwin[i], ops[i].qwin,
                   ops[i].nqwin * sizeof(ops[i].qwin[0]));
    }
    j->calls++;
    j->status = status;
    j->fired_ms = rlt_mono_ms();
    if (j->resubmit != NULL && j->calls == 1) {
        job_t *again = calloc(1, sizeof(*again));
        assert_non_null(again);
        again->n = 1;
        again->ops[0] = j->ops[0];
        again->ops[0].err = 0;
        j->resubmit->st->v->submit(j->resubmit->st, again->ops, 1, on_job,
                                   again);
        /* The store is closing or down here: it must answer at once. */
        j->resubmit_calls = again->calls;
        j->resubmit_status = again->status;
        free(again);
    }
}

/* A one-op batch, small enough to submit a thousand of. */
typedef struct small_s {
    rls_op_t op;
    rls_wop_t win;
    uint32_t cost;
    int calls, status;
} small_t;

/* One request of cost 1 on the 60 s window of index 1 of key. */
static void small_init(small_t *s, const char *key, uint64_t expire_at_ms)
{
    memset(&s->op, 0, sizeof(s->op));
    s->op.key = key;
    s->op.key_len = strlen(key);
    s->op.tag_len = (size_t)(strchr(key, '}') + 1 - key);
    s->op.scale = 1;
    s->win.window_s = 60;
    s->win.limit = INT64_MAX;
    s->win.index = 1;
    s->win.expire_at_ms = expire_at_ms;
    s->win.before = -1;
    s->op.win = &s->win;
    s->op.nwin = 1;
    s->cost = 1;
    s->op.costs = &s->cost;
    s->op.ncosts = 1;
    s->op.equal_cost = 1;
}

/* The count of op's first window after the batch, its requests all of
 * one cost. */
static int64_t after(const rls_op_t *op)
{
    return op->win[0].before + (int64_t)(op->admitted * op->costs[0]);
}

/* Sets up op i of j: base key `key`, one window (60 s, index 1, expiring
 * at expire_at_ms, no reachable limit), one request of cost incr. */
static void job_op(job_t *j, size_t i, const char *key, uint64_t incr,
                   uint64_t expire_at_ms)
{
    rls_op_t *op = &j->ops[i];

    snprintf(j->keys[i], sizeof(j->keys[i]), "%s", key);
    memset(op, 0, sizeof(*op));
    op->key = j->keys[i];
    op->key_len = strlen(j->keys[i]);
    op->tag_len = (size_t)(strrchr(j->keys[i], '}') + 1 - j->keys[i]);
    op->scale = 1;
    j->win[i][0].window_s = 60;
    j->win[i][0].limit = INT64_MAX;
    j->win[i][0].index = 1;
    j->win[i][0].expire_at_ms = expire_at_ms;
    j->win[i][0].before = -1;
    op->win = j->win[i];
    op->nwin = 1;
    j->cost[i][0] = (uint32_t)incr;
    op->costs = j->cost[i];
    op->ncosts = 1;
    op->equal_cost = (uint32_t)incr;
    op->admitted = UINT64_MAX;
    rls_wkey(op, 60, 1, j->wkeys[i]);
}

static void on_small(void *data, rls_op_t *ops, size_t n, int status)
{
    small_t *s = data;

    assert_ptr_equal(ops, &s->op);
    assert_int_equal(n, 1);
    s->calls++;
    s->status = status;
}

/* Counts a callback for a batch whose ops array is shared. */
static int counted;

static void on_count(void *data, rls_op_t *ops, size_t n, int status)
{
    small_t *s = data;

    (void)ops;
    (void)n;
    counted++;
    s->calls++;
    s->status = status;
}

/* Fills a job with n ops "rl:{<tag>:<i>}:r:t" (counters
 * "rl:{<tag>:<i>}:r:t:60:1"), each due to expire a minute from now on the
 * store's clock. */
static void job_init(job_t *j, fx_t *f, size_t n, const char *tag,
                     uint64_t incr)
{
    uint64_t now = f->st->v->now_ms(f->st);
    char key[96];
    size_t i;

    memset(j, 0, sizeof(*j));
    j->n = n;
    for (i = 0; i < n; i++) {
        snprintf(key, sizeof(key), "rl:{%s:%zu}:r:t", tag, i);
        job_op(j, i, key, incr, now + 60000);
    }
}

static void submit(fx_t *f, job_t *j)
{
    f->st->v->submit(f->st, j->ops, j->n, on_job, j);
}

/* Builds job j, submits it and runs the loop until it is answered (5 s at
 * most). */
static void run_new_job(fx_t *f, job_t *j, size_t n, const char *tag,
                        uint64_t incr)
{
    job_init(j, f, n, tag, incr);
    submit(f, j);
    RUN_UNTIL(f, j->calls > 0, 5000);
}

static void wait_up(fx_t *f, uint64_t ms)
{
    RUN_UNTIL(f, f->st->v->up(f->st), ms);
    assert_true(f->st->v->up(f->st));
}

static long long redis_int(fx_t *f, const char *fmt, const char *key)
{
    redisReply *r = redisCommand(f->rc, fmt, key);
    long long v;

    assert_non_null(r);
    if (r->type == REDIS_REPLY_INTEGER)
        v = r->integer;
    else if (r->type == REDIS_REPLY_STRING)
        v = strtoll(r->str, NULL, 10);
    else
        v = -999;
    freeReplyObject(r);
    return v;
}

/* Every key in the current db of f->rc carries a TTL no longer than
 * max_ms. Returns how many keys there are. */
static long long assert_all_keys_expire(fx_t *f, long long max_ms)
{
    redisReply *r = redisCommand(f->rc, "KEYS *");
    long long n;
    size_t i;

    assert_non_null(r);
    assert_int_equal(r->type, REDIS_REPLY_ARRAY);
    for (i = 0; i < r->elements; i++) {
        long long pttl = redis_int(f, "PTTL %s", r->element[i]->str);
        if (pttl <= 0 || pttl > max_ms)
            fail_msg("key %s has PTTL %lld", r->element[i]->str, pttl);
    }
    n = (long long)r->elements;
    freeReplyObject(r);
    return n;
}

/* ---- the command and its reply, without Redis ---------------------------*/

/* ops[0..n): nwin windows and ncosts costs each. */
static void parse_ops(rls_op_t *ops, rls_wop_t (*win)[RLS_WINDOWS_MAX],
                      size_t n, uint32_t nwin, uint32_t ncosts)
{
    size_t i;

    memset(ops, 0, n * sizeof(*ops));
    memset(win, 0, n * sizeof(*win));
    for (i = 0; i < n; i++) {
        ops[i].win = win[i];
        ops[i].nwin = nwin;
        ops[i].ncosts = ncosts;
    }
}

/* RESP for a reply written "e1|e2|...": an element ":N" is an integer,
 * "-T" an error, "+T" a status, "~" a nil, "*" an empty array, anything
 * else a string; "=T" alone is the string reply T, "" an empty array. */
static size_t resp_of(const char *note, char *out, size_t cap)
{
    size_t n = 0, k = 0, len = strlen(note);
    const char *p = note, *e;

    if (note[0] == '=')
        return (size_t)snprintf(out, cap, "$%zu\r\n%s\r\n", len - 1, note + 1);
    if (len > 0)
        for (n = 1, e = note; (e = strchr(e, '|')) != NULL; e++)
            n++;
    k = (size_t)snprintf(out, cap, "*%zu\r\n", n);
    while (n-- > 0) {
        size_t el;
        e = strchr(p, '|');
        el = e ? (size_t)(e - p) : strlen(p);
        if (el > 0 && (p[0] == ':' || p[0] == '-' || p[0] == '+'))
            k += (size_t)snprintf(out + k, cap - k, "%.*s\r\n", (int)el, p);
        else if (el == 1 && p[0] == '~')
            k += (size_t)snprintf(out + k, cap - k, "$-1\r\n");
        else if (el == 1 && p[0] == '*')
            k += (size_t)snprintf(out + k, cap - k, "*0\r\n");
        else
            k += (size_t)snprintf(out + k, cap - k, "$%zu\r\n%.*s\r\n", el,
                                  (int)el, p);
        assert_true(k < cap);
        p = e ? e + 1 : p + el;
    }
    return k;
}

/* Reads the reply `note` (see resp_of) as the store does, through a hiredis
 * reader making the store's objects (redis_reply_alloc.c), and parses it. The
 * reply (errs->text points into it) lives until the next call, or until a
 * call with a NULL note frees it. */
static int parse_note(const char *note, rls_op_t *ops, size_t n,
                      rls_wop_t *qwin, rls_redis_errs_t *errs)
{
    static char resp[8192];
    static void *rep;
    redisReader *rd;
    size_t len;

    rls_redis_reply_fns.freeObject(rep);
    rep = NULL;
    if (note == NULL)
        return 0;
    len = resp_of(note, resp, sizeof(resp));
    rd = redisReaderCreateWithFunctions(&rls_redis_reply_fns);
    assert_non_null(rd);
    assert_int_equal(redisReaderFeed(rd, resp, len), REDIS_OK);
    assert_int_equal(redisReaderGetReply(rd, &rep), REDIS_OK);
    redisReaderFree(rd);
    assert_non_null(rep);
    return rls_redis_parse_reply(rep, ops, n, qwin, errs);
}

static void test_parse_counts(void **state)
{
    /* For 3 ops of 2 windows and 3 costs each; "G" stands for two good
     * ops after the one under test. */
#define G "|:1|:2|:3|:1|:2|:3"
    static const char *const bad[] = {
        "",
        "x",
        "=x",
        "=1 2 3",
        ":1|:2|:3",                     /* too few ops */
        ":1|:2|:3" G "|:1|:2|:3",       /* an op too many */
        ":1|:2" G,                      /* a window's count missing */
        ":1|:2|:3|:4" G,                /* a window too many */
        ":4|:2|:3" G,                   /* admitted > ncosts */
        ":-1|:2|:3" G,
        ":1|x|:3" G,                    /* a count that is a string */
        ":1|~|:3" G,
        ":1|:2|*" G,
        "~" G,
        "*" G,
        "-ERR x" G,
        "+OK" G,
        "1  2 3" G,
        " 1 2 3" G,
        "1 2 3 " G,
        "1 2" G,
        "1 2 3 4" G,
        "1e+14 2 3" G,
        "1 - 3" G,
        "1 2 3x" G,
        "1 2 0x3" G,
        "4 2 3" G,
        "-1 2 3" G,
        "1 99999999999999999999 3" G,
        "1 2 9223372036854775808" G,
        "1 q" G,                        /* a quota of no window */
        "1 q " G,
        "1 q 60 5" G,                   /* a quota window's count missing */
        "1 q 0 5 1" G,                  /* window 0 */
        "1 q 31622401 5 1" G,
        "1 q 60 0 1" G,                 /* limit 0 */
        "1 q 60 -5 1" G,
        "1 q 60 5 1 " G,
        "1 q 1 1 0 2 1 0 3 1 0 4 1 0 5 1 0 6 1 0 7 1 0 8 1 0 9 1 0" G,
        "1 Q" G,
        "1 QQ 2 3" G,
        "1 Z 2 3" G,                    /* unknown tags */
        "1 z 2 3" G,
        "1 e 2 3" G,
        "" G,
        "E" G,
        "late" G,
        ":1|:2|:3" G "|:0",             /* an integer after the ops */
        ":1|:2|:3" G "|a|b",            /* two texts after the ops */
        ":1|:2|:3" G "|~",
        "=lat",
        "=latex"};
    const char *ok = ":2|:5|:7|eOOM|0 Q -1 3";
    const char *q = "1 q 60 10 4 3600 100 50|:3|:0|:0|0 q 1 1 9";
    const char *oom = "eOOM|:3|:1|:2|eOVERFLOW|OOM command not allowed";
    static rls_wop_t qwin[3 * RLS_WINDOWS_MAX];
    rls_wop_t win[3][RLS_WINDOWS_MAX];
    rls_redis_errs_t errs;
    rls_op_t ops[3];
    size_t i;

    (void)state;
    parse_ops(ops, win, 3, 2, 3);
    assert_int_equal(parse_note(ok, ops, 3, qwin, &errs), 0);
    assert_int_equal(ops[0].err, 0);
    assert_int_equal(ops[0].admitted, 2);
    assert_int_equal(ops[0].win[0].before, 5);
    assert_int_equal(ops[0].win[1].before, 7);
    assert_int_equal(ops[0].nqwin, 0);
    assert_int_equal(ops[1].err, RL_ESTORE);
    assert_int_equal(ops[2].err, 0);
    assert_int_equal(ops[2].admitted, 0);
    assert_int_equal(ops[2].win[0].before, -1);
    assert_int_equal(ops[2].win[1].before, 3);
    assert_int_equal(errs.failed, 1);
    assert_int_equal(errs.by_kind[RLS_SERR_OOM], 1);
    assert_int_equal(errs.bad_quotas, 1);
    assert_null(errs.text);

    /* The caller's quota: its windows replace the op's. */
    parse_ops(ops, win, 3, 2, 3);
    assert_int_equal(parse_note(q, ops, 3, qwin, &errs), 0);
    assert_int_equal(ops[0].admitted, 1);
    assert_int_equal(ops[0].nqwin, 2);
    assert_ptr_equal(ops[0].qwin, &qwin[0]);
    assert_int_equal(ops[0].qwin[0].window_s, 60);
    assert_int_equal(ops[0].qwin[0].limit, 10);
    assert_int_equal(ops[0].qwin[0].before, 4);
    assert_int_equal(ops[0].qwin[1].window_s, 3600);
    assert_int_equal(ops[0].qwin[1].limit, 100);
    assert_int_equal(ops[0].qwin[1].before, 50);
    assert_int_equal(ops[1].nqwin, 0);
    assert_null(ops[1].qwin);
    assert_int_equal(ops[1].admitted, 3);
    assert_int_equal(ops[2].nqwin, 1);
    assert_ptr_equal(ops[2].qwin, &qwin[2 * RLS_WINDOWS_MAX]);
    assert_int_equal(ops[2].qwin[0].before, 9);
    assert_int_equal(errs.bad_quotas, 0);
    /* ...and without room for quota windows it is malformed, not a write
     * through a null pointer. */
    assert_int_equal(parse_note(q, ops, 3, NULL, &errs), RL_EINVAL);
    assert_int_equal(parse_note(":3|:0|:0|1 q 60 10 4", ops, 2, NULL, &errs),
                     RL_EINVAL);
    /* Eight quota windows is the most. */
    parse_ops(ops, win, 1, 2, 3);
    assert_int_equal(
        parse_note("1 q 1 1 0 2 1 0 3 1 0 4 1 0 5 1 0 6 1 0 7 1 0 8 1 0",
                   ops, 1, qwin, &errs),
        0);
    assert_int_equal(ops[0].nqwin, 8);
    assert_int_equal(ops[0].qwin[7].window_s, 8);
    /* The extremes of a count, as an integer and as text. */
    parse_ops(ops, win, 1, 1, 1);
    assert_int_equal(
        parse_note(":1|:9223372036854775807", ops, 1, qwin, &errs), 0);
    assert_int_equal(ops[0].win[0].before, INT64_MAX);
    assert_int_equal(
        parse_note(":1|:-9223372036854775808", ops, 1, qwin, &errs), 0);
    assert_int_equal(ops[0].win[0].before, INT64_MIN);
    assert_int_equal(parse_note("1 -9223372036854775807", ops, 1, qwin, &errs),
                     0);
    assert_int_equal(ops[0].win[0].before, -INT64_MAX);

    parse_ops(ops, win, 3, 2, 3);
    for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        if (parse_note(bad[i], ops, 3, qwin, &errs) != RL_EINVAL)
            fail_msg("accepted \"%s\"", bad[i]);
#undef G
    /* Every array short of a good reply's elements is refused. */
    {
        static const char *const goods[] = {
            ":2|:5|:7|eOOM|0 Q -1 3",
            "1 q 60 10 4 3600 100 50|:3|:0|:0|0 q 1 1 9"};
        char cut[128];
        size_t g;
        for (g = 0; g < 2; g++) {
            const char *p = goods[g];
            while ((p = strchr(p, '|')) != NULL) {
                memcpy(cut, goods[g], (size_t)(p - goods[g]));
                cut[p - goods[g]] = '\0';
                if (parse_note(cut, ops, 3, qwin, &errs) != RL_EINVAL)
                    fail_msg("accepted \"%s\"", cut);
                p++;
            }
        }
    }
    /* No op at all is an empty array. */
    assert_int_equal(parse_note("", ops, 0, qwin, &errs), 0);
    assert_int_equal(parse_note(":1|:2|:3", ops, 0, qwin, &errs), RL_EINVAL);

    /* Refusals by kind, and the first one's text after the ops. */
    parse_ops(ops, win, 3, 2, 3);
    assert_int_equal(parse_note(oom, ops, 3, qwin, &errs), 0);
    assert_int_equal(ops[0].err, RL_ESTORE);
    assert_int_equal(ops[1].err, 0);
    assert_int_equal(ops[1].admitted, 3);
    assert_int_equal(ops[1].win[1].before, 2);
    assert_int_equal(ops[2].err, RL_ESTORE);
    assert_int_equal(errs.failed, 2);
    assert_int_equal(errs.by_kind[RLS_SERR_OOM], 1);
    assert_int_equal(errs.by_kind[RLS_SERR_OVERFLOW], 1);
    assert_int_equal(errs.text_len, strlen("OOM command not allowed"));
    assert_memory_equal(errs.text, "OOM command not allowed", errs.text_len);
    /* A script run after its deadline: ops untouched. */
    ops[0].admitted = 5;
    ops[0].win[0].before = 6;
    assert_int_equal(parse_note("=late", ops, 1, qwin, &errs),
                     RLS_REDIS_LATE);
    assert_int_equal(ops[0].admitted, 5);
    assert_int_equal(ops[0].win[0].before, 6);
    parse_note(NULL, NULL, 0, NULL, NULL);
    /* Error texts by kind. */
    assert_int_equal(rls_redis_err_kind("BUSY Redis is busy", 18),
                     RLS_SERR_BUSY);
    assert_int_equal(rls_redis_err_kind("READONLY You can't", 18),
                     RLS_SERR_READONLY);
    assert_int_equal(rls_redis_err_kind("NOSCRIPT No", 11), RLS_SERR_NOSCRIPT);
    assert_int_equal(rls_redis_err_kind("LOADING", 7), RLS_SERR_LOADING);
    assert_int_equal(rls_redis_err_kind("ERR increment or decrement would "
                                        "overflow",
                                        41),
                     RLS_SERR_OVERFLOW);
    assert_int_equal(rls_redis_err_kind("OOMX", 4), RLS_SERR_OTHER);
    assert_int_equal(rls_redis_err_kind("", 0), RLS_SERR_OTHER);
}

/* Reads a command back with hiredis's own parser: RESP commands are arrays
 * of bulk strings. */
static redisReply *read_back(const char *p, size_t len)
{
    redisReader *rd = redisReaderCreate();
    void *rep = NULL;

    assert_non_null(rd);
    assert_int_equal(redisReaderFeed(rd, p, len), REDIS_OK);
    assert_int_equal(redisReaderGetReply(rd, &rep), REDIS_OK);
    assert_non_null(rep);
    redisReaderFree(rd);
    return rep;
}

static void test_encode(void **state)
{
    static const char sha[] = "0123456789abcdef0123456789abcdef01234567";
    static const uint32_t costs0[] = {1, 3, 2};
    static const uint32_t costs1[] = {7, 7};
    static const char *const want[] = {
        "EVALSHA", sha, "4",
        /* keys: op 0's two windows and its quota hash, op 1's window */
        "rl:{a b}:r:api:60:29396283", "rl:{a b}:r:api:3600:489938",
        "rl:{a b}:q", NULL /* op 1's window key */,
        /* deadline, clock, grace, 2 ops, 1 profile: one window, op 1's
         * expiry and limit */
        "1763777001000", "1763777000123", "2500", "2", "1", "1",
        "1763777002000", "5",
        /* op 0: not a profile; two windows, a quota, unequal costs */
        "0", "2", "api", "1763777040000", "33", "1763778000000",
        "18446744073709551615", "0.5", "3", "1", "3", "2",
        /* op 1: profile 1, two requests of cost 7 */
        "-1", "2", "7"};
    rls_cmdbuf_t buf = {NULL, 0, 0};
    rls_wop_t w0[2], w1[1];
    rls_op_t ops[2];
    redisReply *r;
    size_t len, cap, i;
    char *p;

    (void)state;
    memset(ops, 0, sizeof(ops));
    memset(w0, 0, sizeof(w0));
    memset(w1, 0, sizeof(w1));
    ops[0].key = "rl:{a b}:r:api";
    ops[0].key_len = strlen(ops[0].key);
    ops[0].tag_len = 8;
    ops[0].quota = ops[0].key + 11;
    ops[0].quota_len = 3;
    ops[0].scale = 0.5;
    w0[0] = (rls_wop_t){60, 33, 29396283, 1763777040000ULL, 0};
    w0[1] = (rls_wop_t){3600, UINT64_MAX, 489938, 1763778000000ULL, 0};
    ops[0].win = w0;
    ops[0].nwin = 2;
    ops[0].costs = costs0;
    ops[0].ncosts = 3;
    ops[1].key = "rl:{\xe6\x97\xa5\r\n}:i";
    ops[1].key_len = strlen(ops[1].key);
    ops[1].tag_len = ops[1].key_len - 2;
    ops[1].scale = 1;
    w1[0] = (rls_wop_t){1, 5, 1763777000, 1763777002000ULL, 0};
    ops[1].win = w1;
    ops[1].nwin = 1;
    ops[1].costs = costs1;
    ops[1].ncosts = 2;
    ops[1].equal_cost = 7;
    assert_int_equal(rls_redis_encode(&buf, sha, ops, 2, 1763777000123ULL, 2500,
                                      1763777001000ULL),
                     0);
    len = buf.len;
    assert_true(len > 0);
    r = read_back(buf.p, len);
    assert_int_equal(r->type, REDIS_REPLY_ARRAY);
    assert_int_equal(r->elements, sizeof(want) / sizeof(want[0]));
    for (i = 0; i < r->elements; i++) {
        if (want[i] == NULL) {
            /* the key, ":1:1763777000" */
            assert_int_equal(r->element[i]->len, ops[1].key_len + 13);
            assert_memory_equal(r->element[i]->str, ops[1].key,
                                ops[1].key_len);
            assert_memory_equal(r->element[i]->str + ops[1].key_len,
                                ":1:1763777000", 13);
            continue;
        }
        if (strcmp(r->element[i]->str, want[i]) != 0)
            fail_msg("argument %zu: \"%s\", want \"%s\"", i,
                     r->element[i]->str, want[i]);
    }
    freeReplyObject(r);
    /* The buffer stays: a smaller command reuses it. */
    p = buf.p;
    cap = buf.cap;
    assert_int_equal(rls_redis_encode(&buf, NULL, &ops[1], 1, 1, 0, 0), 0);
    len = buf.len;
    assert_ptr_equal(buf.p, p);
    assert_int_equal(buf.cap, cap);
    r = read_back(buf.p, len);
    assert_int_equal(r->elements, 15);
    assert_string_equal(r->element[0]->str, "EVAL");
    assert_string_equal(r->element[1]->str, rls_redis_script);
    /* one key; no deadline, clock 1 */
    assert_string_equal(r->element[2]->str, "1");
    assert_string_equal(r->element[4]->str, "0");
    assert_string_equal(r->element[5]->str, "1");
    freeReplyObject(r);
    /* A batch of many ops with every window and many costs fits. */
    {
        enum { N = 200 };
        static rls_op_t big[N];
        static rls_wop_t bw[RLS_WINDOWS_MAX];
        static uint32_t bc[500];

        for (i = 0; i < RLS_WINDOWS_MAX; i++)
            bw[i] = (rls_wop_t){RL_WINDOW_MAX_S, INT64_MAX, UINT64_MAX,
                                UINT64_MAX, 0};
        for (i = 0; i < 500; i++)
            bc[i] = UINT32_MAX;
        for (i = 0; i < N; i++) {
            big[i] = ops[0];
            big[i].win = bw;
            big[i].nwin = RLS_WINDOWS_MAX;
            big[i].costs = bc;
            big[i].ncosts = 500;
            big[i].scale = 1.0 / 3;
        }
        assert_int_equal(rls_redis_encode(&buf, NULL, big, N, UINT64_MAX,
                                          UINT64_MAX, UINT64_MAX),
                         0);
        len = buf.len;
        assert_true(len > 0 && len <= buf.cap);
        r = read_back(buf.p, len);
        /* command, script, nkeys; N ops of 8 window keys and a quota
         * key; 5 batch arguments (no profile); per op 0, nwin, field,
         * 8 x (expiry, limit), scale, the count and 500 costs */
        assert_int_equal(r->elements,
                         3 + N * (RLS_WINDOWS_MAX + 1) + 5 +
                             N * (3 + 2 * RLS_WINDOWS_MAX + 1 + 1 + 500));
        assert_string_equal(
            r->element[3 + N * (RLS_WINDOWS_MAX + 1) + 5 + 3 +
                       2 * RLS_WINDOWS_MAX]
                ->str,
            "0.33333333333333331");
        freeReplyObject(r);
    }
    free(buf.p);
}

/* Points stderr (where rls_log writes) at a temporary file until
 * log_end, which returns whether a line holds every one of the given
 * strings (NULL-terminated). */
typedef struct logcap_s {
    char path[64];
    int saved;
} logcap_t;

static void log_begin(logcap_t *l)
{
    int fd;

    strcpy(l->path, "/tmp/rlt-storelog-XXXXXX");
    fd = mkstemp(l->path);
    assert_true(fd >= 0);
    fflush(stderr);
    l->saved = dup(STDERR_FILENO);
    assert_true(l->saved >= 0);
    assert_true(dup2(fd, STDERR_FILENO) >= 0);
    close(fd);
}

static int log_end(logcap_t *l, ...)
{
    char line[1024];
    int found = 0;
    FILE *fp;

    fflush(stderr);
    dup2(l->saved, STDERR_FILENO);
    close(l->saved);
    fp = fopen(l->path, "r");
    assert_non_null(fp);
    while (!found && fgets(line, sizeof(line), fp) != NULL) {
        va_list ap;
        const char *want;

        fputs(line, stderr);
        found = 1;
        va_start(ap, l);
        while ((want = va_arg(ap, const char *)) != NULL)
            if (strstr(line, want) == NULL)
                found = 0;
        va_end(ap);
    }
    fclose(fp);
    unlink(l->path);
    return found;
}

static int fx_setup_oom(void **state)
{
    static char *const extra[] = {"--maxmemory", "1mb", "--maxmemory-policy",
                                  "noeviction", NULL};

    return fx_setup_with(state, extra, NULL);
}

static int responded, resp_errors;
static rls_rule_stats_t inline_stats;

static void on_respond(void *owner, const rl_result_t *r)
{
    (void)owner;
    responded++;
    resp_errors += r->error_len > 0;
}

/* Sends n requests for distinct keys through the batcher, waits for every
 * answer. */
static void decide(fx_t *f, rls_batcher_t *b, int n, const char *tag)
{
    static unsigned seq;
    char key[64];
    int i, want = responded + n;
    rls_spec_t spec;

    memset(&spec, 0, sizeof(spec));
    spec.stats = &inline_stats;
    spec.mode = RLS_MODE_ENFORCE;
    spec.limits.n = 1;
    spec.limits.w[0].limit = 100;
    spec.limits.w[0].window_s = 600;
    spec.scale = 1;
    for (i = 0; i < n; i++) {
        int len = snprintf(key, sizeof(key), "%s-%u", tag, seq++);
        assert_int_equal(rls_batcher_add(b, on_respond, NULL, (uint64_t)i, key,
                                         (size_t)len, 1, &spec),
                         0);
    }
    rls_batcher_flush(b);
    RUN_UNTIL(f, responded >= want, 3000);
    assert_int_equal(responded, want);
}

/* Redis at maxmemory with noeviction refuses every new key: the refusals
 * are counted by kind, logged at warn, and turn /healthz unhealthy with a
 * reason; once Redis has room again, and the errors have left the 10 s
 * window, it is healthy again. */
static void test_oom_counted_logged_unhealthy(void **state)
{
    fx_t *f = *state;
    static rls_server_t srv;
    static rls_config_t cfg;
    static job_t a;
    redisReply *rep;
    const char *why = NULL;
    logcap_t lc;
    uint64_t dl;
    int i, oom = 0;

    /* Fill Redis until it refuses writes. */
    for (i = 0; i < 100000 && !oom; i++) {
        rep = redisCommand(f->rc, "SET fill:%d %s", i,
                           "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx");
        assert_non_null(rep);
        oom = rep->type == REDIS_REPLY_ERROR &&
              strncmp(rep->str, "OOM", 3) == 0;
        freeReplyObject(rep);
    }
    assert_true(oom);

    log_begin(&lc);
    open_store(f, f->redis.port, 1000, 0);
    wait_up(f, 5000);
    job_init(&a, f, 3, "oom", 1);
    submit(f, &a);
    RUN_UNTIL(f, a.calls > 0, 3000);
    assert_int_equal(a.calls, 1);
    assert_int_equal(a.status, 0);
    for (i = 0; i < 3; i++)
        assert_int_equal(a.ops[i].err, RL_ESTORE);
    assert_int_equal(f->st->stats.errors_kind[RLS_SERR_OOM], 3);

    /* The server's health, on the same store. */
    rls_config_defaults(&cfg);
    memset(&srv, 0, sizeof(srv));
    srv.cfg = &cfg;
    srv.store = f->st;
    rls_batcher_init(&srv.batcher, f->st, NULL, "rl:", 3, 1024,
                     1000, 1);
    assert_true(rls_server_healthy(&srv, &why));
    decide(f, &srv.batcher, 50, "oom");
    assert_int_equal(resp_errors, 50);
    assert_false(rls_server_healthy(&srv, &why));
    assert_non_null(strstr(why, "store errors: 50 of 50 decisions failed"));
    assert_true(log_end(&lc, "level=warn", "msg=\"redis errors\"", "kind=oom",
                        "OOM command not allowed", NULL));

    /* Room again: decisions succeed at once; health returns once the
     * failures are older than the window. */
    rep = redisCommand(f->rc, "CONFIG SET maxmemory 0");
    assert_non_null(rep);
    freeReplyObject(rep);
    resp_errors = 0;
    dl = rlt_mono_ms() + 15000;
    while (!rls_server_healthy(&srv, &why) && rlt_mono_ms() < dl) {
        decide(f, &srv.batcher, 5, "ok");
        run_for(f, 100);
    }
    assert_true(rls_server_healthy(&srv, &why));
    assert_string_equal(why, "ok");
    assert_int_equal(resp_errors, 0);
    rls_batcher_free(&srv.batcher);
}

typedef struct tick_s {
    fx_t *f;
    small_t *s;
    int n, max;
} tick_t;

static void on_feed(uv_timer_t *t)
{
    tick_t *k = t->data;
    small_t *s;

    if (k->n >= k->max)
        return;
    s = &k->s[k->n++];
    small_init(s, "rl:{paused}:r:t", k->f->st->v->now_ms(k->f->st) + 600000);
    k->f->st->v->submit(k->f->st, &s->op, 1, on_small, s);
}

/* A steady stream of batches while Redis is paused for 1.5 s: batches
 * answered by timeout must not be counted when Redis wakes up and runs
 * what it had read. The counter ends equal to the ops answered with a
 * count. */
static void test_timeout_consumes_nothing_later(void **state)
{
    fx_t *f = *state;
    enum { MAX = 1200 };
    static tick_t k;
    static uv_timer_t feed;
    redisReply *rep;
    long long total, clients = 0;
    int i, ok = 0, timedout = 0;
    uint64_t dl;

    open_store(f, f->redis.port, 200, 0);
    wait_up(f, 5000);
    k.f = f;
    k.n = 0;
    k.max = MAX;
    k.s = calloc(MAX, sizeof(*k.s));
    assert_non_null(k.s);
    uv_timer_init(&f->loop, &feed);
    feed.data = &k;
    uv_timer_start(&feed, on_feed, 3, 3);
    run_for(f, 300);
    rlt_redis_pause(&f->redis, 1);
    run_for(f, 1500);
    rlt_redis_pause(&f->redis, 0);
    run_for(f, 300);
    uv_timer_stop(&feed);
    uv_close((uv_handle_t *)&feed, NULL);
    RUN_UNTIL(f, k.n > 0 && k.s[k.n - 1].calls > 0, 3000);
    wait_up(f, 5000);
    for (i = 0; i < k.n; i++) {
        assert_int_equal(k.s[i].calls, 1);
        if (k.s[i].status == 0 && k.s[i].op.err == 0) {
            assert_int_equal(k.s[i].op.admitted, 1);
            ok++;
        }
        timedout += k.s[i].status == RL_ETIMEDOUT;
    }
    assert_true(timedout > 0);
    assert_true(ok > 0);
    /* The old connection is gone once Redis has read all it held (it
     * closes a client at the end of its input): then nothing more can
     * be run. */
    dl = rlt_mono_ms() + 5000;
    do {
        rep = redisCommand(f->rc, "INFO clients");
        assert_non_null(rep);
        clients = strtoll(strstr(rep->str, "connected_clients:") + 18, NULL,
                          10);
        freeReplyObject(rep);
        if (clients > 2)
            run_for(f, 10);
    } while (clients > 2 && rlt_mono_ms() < dl);
    assert_int_equal(clients, 2);
    total = redis_int(f, "GET %s", "rl:{paused}:r:t:60:1");
    assert_int_equal(total, ok);
    free(k.s);
}

/* A restarted Redis (new run_id) is counted and logged; a reconnection to
 * the same instance is not. */
static void test_restart_noticed(void **state)
{
    fx_t *f = *state;
    redisReply *rep;
    logcap_t lc;
    uint64_t rc0;

    open_store(f, f->redis.port, 200, 0);
    wait_up(f, 5000);
    assert_int_equal(f->st->stats.restarts, 0);
    log_begin(&lc);
    rc0 = f->st->stats.reconnects;
    rep = redisCommand(f->rc, "CLIENT KILL TYPE normal SKIPME yes");
    assert_non_null(rep);
    freeReplyObject(rep);
    RUN_UNTIL(f, f->st->stats.reconnects > rc0 && f->st->v->up(f->st), 5000);
    assert_true(f->st->stats.reconnects > rc0);
    assert_int_equal(f->st->stats.restarts, 0);

    redisFree(f->rc);
    f->rc = NULL;
    rlt_redis_kill(&f->redis);
    RUN_UNTIL(f, !f->st->v->up(f->st), 5000);
    assert_int_equal(rlt_redis_restart(&f->redis), 0);
    f->rc = rlt_redis_connect(&f->redis);
    rc0 = f->st->stats.reconnects;
    RUN_UNTIL(f, f->st->stats.reconnects > rc0 && f->st->v->up(f->st), 5000);
    assert_int_equal(f->st->stats.restarts, 1);
    assert_true(log_end(&lc, "level=warn", "msg=\"redis restarted", "run_id=",
                        NULL));
}

static void test_clock(void **state)
{
    /* Redis's clock: 2026-11-22, in us; the local monotonic clock starts
     * at 1 s and the local realtime clock is 3 s behind Redis. */
    const uint64_t R = UINT64_C(1795315969000000), M = 1000000;
    const uint64_t local = R / 1000 - 3000;
    rls_redis_clock_t c;

    (void)state;
    rls_redis_clock_init(&c);
    /* Before any sample: the local clock, clamped so it never goes back. */
    assert_int_equal(rls_redis_clock_now(&c, M, local), local);
    assert_int_equal(rls_redis_clock_now(&c, M, local - 50), local);
    assert_int_equal(rls_redis_clock_now(&c, M, local + 7), local + 7);
    /* TIME sent at M, answered 2 ms later: Redis read R at M + 1 ms. */
    assert_int_equal(rls_redis_clock_sample(&c, M, M + 2000, R), 1);
    assert_int_equal(rls_redis_clock_now(&c, M + 1000, 0), R / 1000);
    assert_int_equal(rls_redis_clock_now(&c, M + 61000, 0), R / 1000 + 60);
    /* A later sample says Redis is 5 ms behind our estimate: time stands
     * still until it catches up, then follows the new offset. */
    assert_int_equal(
        rls_redis_clock_sample(&c, M + 100000, M + 102000, R + 100000 - 5000),
        1);
    assert_int_equal(rls_redis_clock_now(&c, M + 62000, 0), R / 1000 + 60);
    assert_int_equal(rls_redis_clock_now(&c, M + 66000, 0), R / 1000 + 60);
    assert_int_equal(rls_redis_clock_now(&c, M + 70000, 0), R / 1000 + 64);
    /* A reply that waited behind big batches (20 ms round trip against a
     * best of 2 ms) is ignored while the offset is fresh... */
    assert_int_equal(
        rls_redis_clock_sample(&c, M + 200000, M + 220000, R + 900000), 0);
    /* (the offset in use: Redis read R + 95000 at M + 101000) */
    assert_int_equal(rls_redis_clock_now(&c, M + 201000, 0),
                     (R + 195000) / 1000);
    /* ...used when the offset is over 10 s old, or on a new path. */
    assert_int_equal(
        rls_redis_clock_sample(&c, M + 20000000, M + 20020000, R + 20010000),
        1);
    rls_redis_clock_new_path(&c);
    assert_int_equal(
        rls_redis_clock_sample(&c, M + 20100000, M + 20140000, R + 20120000),
        1);
    assert_int_equal(rls_redis_clock_now(&c, M + 20120000, 0),
                     (R + 20120000) / 1000);
    /* A receive time before the send time is nonsense, not a sample. */
    assert_int_equal(rls_redis_clock_sample(&c, M + 5, M + 4, R), 0);
}

/* ---- the store against a private redis-server ---------------------------*/

static void test_counts_and_ttl(void **state)
{
    fx_t *f = *state;
    static const char *const names[] = {"rl:{user:1}:r:t",
                                        "rl:{a:b:c}:r:t",
                                        "rl:{{x}}:r:t",
                                        "rl:{ip:203.0.113.7:/search}:i",
                                        "rl:{us\xc3\xa9r:\xe6\x97\xa5}:r:t",
                                        "rl:{}:r:t",
                                        "rl:{ sp ace }:r:t"};
    enum { NK = sizeof(names) / sizeof(names[0]) };
    static job_t j[3];
    uint64_t now;
    size_t i, b;

    open_store(f, f->redis.port, 2000, 0);
    wait_up(f, 5000);
    now = f->st->v->now_ms(f->st);
    /* Three batches in one loop iteration: one pipelined write. */
    for (b = 0; b < 3; b++) {
        memset(&j[b], 0, sizeof(j[b]));
        j[b].n = NK;
        for (i = 0; i < NK; i++)
            job_op(&j[b], i, names[i], i + 1 + b * 10, now + 30000);
        submit(f, &j[b]);
    }
    RUN_UNTIL(f, j[2].calls > 0, 5000);
    for (b = 0; b < 3; b++) {
        assert_int_equal(j[b].calls, 1);
        assert_int_equal(j[b].status, 0);
        for (i = 0; i < NK; i++) {
            /* running sum of incr over batches 0..b */
            int64_t want = (int64_t)((b + 1) * (i + 1) + 10 * b * (b + 1) / 2);
            assert_int_equal(j[b].ops[i].err, 0);
            assert_int_equal(j[b].ops[i].admitted, 1);
            assert_int_equal(after(&j[b].ops[i]), want);
        }
    }
    for (i = 0; i < NK; i++) {
        long long pttl = redis_int(f, "PTTL %s", j[0].wkeys[i]);
        assert_int_equal(redis_int(f, "GET %s", j[0].wkeys[i]),
                         3 * (i + 1) + 30);
        assert_true(pttl > 25000);
        assert_true(pttl <= 30000 + 50);
    }
    assert_int_equal(assert_all_keys_expire(f, 30050), NK);
    assert_int_equal(f->st->stats.batches, 3);
    assert_int_equal(f->st->stats.ops, 3 * NK);
    assert_int_equal(f->st->stats.errors, 0);
    assert_true(f->st->stats.rtt_us_last > 0);
    assert_true(f->st->stats.rtt_us_last < 2000000);
}

static void test_big_batch_and_resubmit_from_callback(void **state)
{
    fx_t *f = *state;
    static job_t a, b;
    size_t i;

    open_store(f, f->redis.port, 2000, 0);
    wait_up(f, 5000);
    run_new_job(f, &a, MAX_OPS, "big", 3);
    assert_int_equal(a.status, 0);
    run_new_job(f, &b, MAX_OPS, "big", 4);
    assert_int_equal(b.calls, 1);
    assert_int_equal(b.status, 0);
    for (i = 0; i < MAX_OPS; i++)
        assert_int_equal(after(&b.ops[i]), 7);
    assert_int_equal(assert_all_keys_expire(f, 60050), MAX_OPS);
}

static void test_ttl_after_delete_and_flush(void **state)
{
    fx_t *f = *state;
    static job_t j;
    redisReply *r;

    open_store(f, f->redis.port, 2000, 0);
    wait_up(f, 5000);
    run_new_job(f, &j, 4, "del", 2);
    assert_int_equal(after(&j.ops[3]), 2);
    /* Mid-run: one key deleted, then everything flushed; both come back
     * with a TTL when the next batch recreates them. */
    assert_int_equal(redis_int(f, "DEL %s", j.wkeys[1]), 1);
    run_new_job(f, &j, 4, "del", 2);
    assert_int_equal(j.status, 0);
    assert_int_equal(after(&j.ops[0]), 4);
    assert_int_equal(after(&j.ops[1]), 2);
    assert_int_equal(assert_all_keys_expire(f, 60050), 4);
    r = redisCommand(f->rc, "FLUSHALL");
    assert_non_null(r);
    freeReplyObject(r);
    run_new_job(f, &j, 4, "del", 5);
    assert_int_equal(j.status, 0);
    assert_int_equal(after(&j.ops[0]), 5);
    assert_int_equal(j.ops[0].win[0].before, 0);
    assert_int_equal(assert_all_keys_expire(f, 60050), 4);
}

static void test_bad_key_fails_only_its_op(void **state)
{
    fx_t *f = *state;
    static job_t j;
    redisReply *r;

    open_store(f, f->redis.port, 2000, 0);
    wait_up(f, 5000);
    job_init(&j, f, 5, "bad", 1);
    r = redisCommand(f->rc, "SET %s notanumber", j.wkeys[1]);
    freeReplyObject(r);
    r = redisCommand(f->rc, "RPUSH %s x", j.wkeys[3]);
    freeReplyObject(r);
    /* A counter that would pass 2^63-1 fails its op too: near 2^63 Lua's
     * doubles see room (2^63 - 9223372036854774784) that Redis's integer
     * has not. */
    r = redisCommand(f->rc, "SET %s 9223372036854775000", j.wkeys[4]);
    freeReplyObject(r);
    j.cost[4][0] = j.ops[4].equal_cost = 1000;
    submit(f, &j);
    RUN_UNTIL(f, j.calls > 0, 5000);
    assert_int_equal(j.calls, 1);
    assert_int_equal(j.status, 0);
    assert_int_equal(j.ops[0].err, 0);
    assert_int_equal(after(&j.ops[0]), 1);
    assert_int_equal(j.ops[1].err, RL_ESTORE);
    assert_int_equal(j.ops[2].err, 0);
    assert_int_equal(after(&j.ops[2]), 1);
    assert_int_equal(j.ops[3].err, RL_ESTORE);
    assert_int_equal(j.ops[4].err, RL_ESTORE);
    assert_true(redis_int(f, "PTTL %s", j.wkeys[0]) > 0);
    assert_true(redis_int(f, "PTTL %s", j.wkeys[2]) > 0);
    r = redisCommand(f->rc, "GET %s", j.wkeys[4]);
    assert_non_null(r);
    assert_string_equal(r->str, "9223372036854775000");
    freeReplyObject(r);
    assert_int_equal(f->st->stats.errors, 0);
    assert_int_equal(f->st->stats.errors_kind[RLS_SERR_OVERFLOW], 1);
    assert_int_equal(f->st->stats.errors_kind[RLS_SERR_OTHER], 2);
}

static void test_never_started(void **state)
{
    fx_t *f = *state;
    static job_t j;
    int port = rlt_port_reserve(); /* reserved: nothing listens there */

    open_store(f, port, 500, 0);
    run_for(f, 100);
    assert_false(f->st->v->up(f->st));
    job_init(&j, f, 3, "nobody", 1);
    submit(f, &j);
    /* Fails inside submit: nothing to wait for. */
    assert_int_equal(j.calls, 1);
    assert_int_equal(j.status, RL_ESTORE);
    assert_int_equal(j.ops[0].err, RL_ESTORE);
    assert_int_equal(j.ops[2].err, RL_ESTORE);
    run_for(f, 50);
    assert_int_equal(j.calls, 1);
    assert_int_equal(f->st->stats.errors, 1);
    assert_int_equal(f->st->stats.reconnects, 0);
}

static void test_killed_mid_batch_then_restarted(void **state)
{
    fx_t *f = *state;
    static job_t a, b, c;
    uint64_t t0;

    open_store(f, f->redis.port, 5000, 0);
    wait_up(f, 5000);
    run_new_job(f, &a, 2, "kill", 1);
    assert_int_equal(a.status, 0);
    /* Paused, the server accepts our write but never answers; killed, it
     * takes the batch down with it. */
    rlt_redis_pause(&f->redis, 1);
    job_init(&b, f, MAX_OPS, "kill", 1);
    submit(f, &b);
    run_for(f, 50);
    assert_int_equal(b.calls, 0);
    t0 = rlt_mono_ms();
    rlt_redis_kill(&f->redis);
    RUN_UNTIL(f, b.calls > 0, 3000);
    assert_int_equal(b.calls, 1);
    assert_int_equal(b.status, RL_ESTORE);
    assert_int_equal(b.ops[0].err, RL_ESTORE);
    assert_int_equal(b.ops[MAX_OPS - 1].err, RL_ESTORE);
    assert_true(b.fired_ms - t0 < 2500); /* promptly, not at the 5 s timeout */
    assert_false(f->st->v->up(f->st));
    /* While down, batches fail inside submit. */
    job_init(&c, f, 1, "kill", 1);
    submit(f, &c);
    assert_int_equal(c.calls, 1);
    assert_int_equal(c.status, RL_ESTORE);
    run_for(f, 100);
    assert_int_equal(b.calls, 1);
    /* Back with no data (persistence is off): the store reconnects by
     * itself, and recreated keys get their TTL. */
    assert_int_equal(rlt_redis_restart(&f->redis), 0);
    redisFree(f->rc);
    f->rc = rlt_redis_connect(&f->redis);
    assert_non_null(f->rc);
    wait_up(f, 5000);
    assert_int_equal(f->st->stats.reconnects, 1);
    run_new_job(f, &c, 2, "kill", 4);
    assert_int_equal(c.status, 0);
    assert_int_equal(after(&c.ops[0]), 4);
    assert_int_equal(after(&c.ops[1]), 4);
    assert_int_equal(assert_all_keys_expire(f, 60050), 2);
}

static void test_timeout_then_recovery(void **state)
{
    fx_t *f = *state;
    enum { NB = 1100 };
    static job_t a, b;
    small_t *small;
    uint64_t t0;
    int i, at_once = 0, fired = 0, timedout = 0;

    open_store(f, f->redis.port, 200, 0);
    wait_up(f, 5000);
    rlt_redis_pause(&f->redis, 1);
    t0 = rlt_mono_ms();
    job_init(&a, f, 3, "slow", 1);
    job_init(&b, f, 3, "slow", 1);
    submit(f, &a);
    run_for(f, 20);
    submit(f, &b);
    RUN_UNTIL(f, a.calls > 0 && b.calls > 0, 2000);
    assert_int_equal(a.calls, 1);
    assert_int_equal(b.calls, 1);
    assert_int_equal(a.status, RL_ETIMEDOUT);
    assert_int_equal(b.status, RL_ETIMEDOUT);
    assert_int_equal(a.ops[2].err, RL_ETIMEDOUT);
    assert_true(a.fired_ms - t0 >= 195);
    assert_true(a.fired_ms - t0 <= 200 + 300);
    assert_false(f->st->v->up(f->st));
    assert_int_equal(f->st->stats.timeouts, 2);

    /* Still stuck once reconnected at TCP level: batches beyond the
     * in-flight cap fail at once, the rest at their timeout; memory stays
     * bounded and each callback fires once. */
    rlt_redis_pause(&f->redis, 0);
    wait_up(f, 5000);
    rlt_redis_pause(&f->redis, 1);
    small = calloc(NB, sizeof(*small));
    assert_non_null(small);
    for (i = 0; i < NB; i++) {
        small_init(&small[i], "rl:{flood}:r:t", f->st->v->now_ms(f->st) + 60000);
        f->st->v->submit(f->st, &small[i].op, 1, on_small, &small[i]);
        at_once += small[i].calls;
    }
    assert_true(at_once > 0);
    assert_true(at_once < NB);
    RUN_UNTIL(f, f->st->stats.timeouts >= 2 + (uint64_t)(NB - at_once), 3000);
    for (i = 0; i < NB; i++) {
        fired += small[i].calls;
        timedout += small[i].status == RL_ETIMEDOUT;
        assert_int_equal(small[i].calls, 1);
    }
    assert_int_equal(fired, NB);
    assert_int_equal(timedout, NB - at_once);
    free(small);

    /* The same with big batches: the cap on ops in flight holds. */
    rlt_redis_pause(&f->redis, 0);
    wait_up(f, 5000);
    rlt_redis_pause(&f->redis, 1);
    {
        enum { NBIG = 300 };
        static job_t big;
        static small_t seen[NBIG];

        job_init(&big, f, 256, "bigflood", 1);
        memset(seen, 0, sizeof(seen));
        at_once = fired = counted = 0;
        for (i = 0; i < NBIG; i++) {
            /* One ops array shared by every batch: only callbacks are
             * counted here. */
            f->st->v->submit(f->st, big.ops, 256, on_count, &seen[i]);
            at_once += seen[i].calls;
        }
        assert_true(at_once > 0);
        assert_true(at_once < NBIG);
        RUN_UNTIL(f, counted >= NBIG, 3000);
        for (i = 0; i < NBIG; i++) {
            fired += seen[i].calls;
            assert_int_equal(seen[i].calls, 1);
            assert_true(seen[i].status == RL_ESTORE ||
                        seen[i].status == RL_ETIMEDOUT);
        }
        assert_int_equal(fired, NBIG);
    }

    rlt_redis_pause(&f->redis, 0);
    wait_up(f, 5000);
    run_new_job(f, &a, 3, "slow", 1);
    assert_int_equal(a.status, 0);
    assert_true(after(&a.ops[0]) >= 1);
    assert_true(f->st->stats.reconnects >= 1);
}

static void test_now_ms_follows_redis(void **state)
{
    fx_t *f = *state;
    uint64_t prev, now, redis_ms;
    redisReply *r;
    int i;

    open_store(f, rlt_port_reserve(), 500, 0); /* nothing listens */
    /* Before any sample: the local clock, still never decreasing. */
    prev = f->st->v->now_ms(f->st);
    for (i = 0; i < 1000; i++) {
        now = f->st->v->now_ms(f->st);
        assert_true(now >= prev);
        prev = now;
    }
    close_store(f);
    open_store(f, f->redis.port, 500, 0);
    wait_up(f, 5000);
    r = redisCommand(f->rc, "TIME");
    assert_non_null(r);
    assert_int_equal(r->elements, 2);
    redis_ms = strtoull(r->element[0]->str, NULL, 10) * 1000 +
               strtoull(r->element[1]->str, NULL, 10) / 1000;
    freeReplyObject(r);
    now = f->st->v->now_ms(f->st);
    assert_true(now + 20 >= redis_ms && now <= redis_ms + 20);
    /* Across periodic re-samples it never goes backwards. */
    prev = f->st->v->now_ms(f->st);
    {
        uint64_t dl = rlt_mono_ms() + 2200;
        while (rlt_mono_ms() < dl) {
            uv_run(&f->loop, UV_RUN_NOWAIT);
            now = f->st->v->now_ms(f->st);
            assert_true(now >= prev);
            prev = now;
        }
    }
}

static void test_close_with_batches_in_flight(void **state)
{
    fx_t *f = *state;
    static job_t j[3];
    int done = 0, i;

    open_store(f, f->redis.port, 5000, 0);
    wait_up(f, 5000);
    rlt_redis_pause(&f->redis, 1);
    for (i = 0; i < 3; i++) {
        job_init(&j[i], f, 2, "close", 1);
        j[i].resubmit = f;
        submit(f, &j[i]);
    }
    run_for(f, 30);
    f->st->v->close(f->st, on_done, &done);
    f->closed = 1;
    RUN_UNTIL(f, done > 0, 5000);
    assert_int_equal(done, 1);
    for (i = 0; i < 3; i++) {
        assert_int_equal(j[i].calls, 1);
        assert_int_equal(j[i].status, RL_ESHUTDOWN);
        assert_int_equal(j[i].ops[1].err, RL_ESHUTDOWN);
        /* a submit from the callback is answered at once */
        assert_int_equal(j[i].resubmit_calls, 1);
        assert_int_equal(j[i].resubmit_status, RL_ESHUTDOWN);
    }
    f->st = NULL;
    rlt_redis_pause(&f->redis, 0);
    /* teardown checks uv_loop_close() == 0 */
}

static void test_close_while_down_and_connecting(void **state)
{
    fx_t *f = *state;
    int done = 0;

    open_store(f, rlt_port_reserve(), 500, 0); /* nothing listens */
    run_for(f, 30);
    close_store(f);
    /* Closed right after new, mid-connect. */
    open_store(f, f->redis.port, 500, 0);
    f->st->v->close(f->st, on_done, &done);
    f->closed = 1;
    f->st = NULL;
    RUN_UNTIL(f, done > 0, 5000);
    assert_int_equal(done, 1);
}

static void test_noscript_after_script_flush(void **state)
{
    fx_t *f = *state;
    static job_t j;
    redisReply *r;

    open_store(f, f->redis.port, 2000, 0);
    wait_up(f, 5000);
    r = redisCommand(f->rc, "SCRIPT FLUSH");
    assert_non_null(r);
    freeReplyObject(r);
    run_new_job(f, &j, 3, "ns", 2);
    assert_int_equal(j.calls, 1);
    assert_int_equal(j.status, 0);
    assert_int_equal(after(&j.ops[2]), 2);
    run_new_job(f, &j, 3, "ns", 2);
    assert_int_equal(j.status, 0);
    assert_int_equal(after(&j.ops[2]), 4);
    assert_int_equal(assert_all_keys_expire(f, 60050), 3);
}

static void test_hostname_is_resolved(void **state)
{
    fx_t *f = *state;
    static job_t j;
    rls_redis_opts_t o;

    memset(&o, 0, sizeof(o));
    o.host = "localhost";
    o.port = f->redis.port;
    o.timeout_ms = 2000;
    f->st = rls_store_redis_new(&f->loop, &o);
    assert_non_null(f->st);
    wait_up(f, 5000);
    run_new_job(f, &j, 1, "host", 1);
    assert_int_equal(j.status, 0);
    assert_int_equal(after(&j.ops[0]), 1);
}

static void test_auth_and_select(void **state)
{
    fx_t *f = *state;
    static job_t j;
    redisReply *r;

    open_store(f, f->redis.port, 2000, 3);
    wait_up(f, 5000);
    run_new_job(f, &j, 2, "auth", 6);
    assert_int_equal(j.status, 0);
    assert_int_equal(after(&j.ops[1]), 6);
    assert_int_equal(redis_int(f, "EXISTS %s", j.wkeys[0]), 0); /* db 0 */
    r = redisCommand(f->rc, "SELECT 3");
    assert_non_null(r);
    freeReplyObject(r);
    assert_int_equal(redis_int(f, "GET %s", j.wkeys[0]), 6);
    assert_int_equal(assert_all_keys_expire(f, 60050), 2);
    close_store(f);

    /* A wrong password never comes up, and says so at once. */
    f->password = "wrong";
    open_store(f, f->redis.port, 2000, 0);
    run_for(f, 200);
    assert_false(f->st->v->up(f->st));
    job_init(&j, f, 1, "auth", 1);
    submit(f, &j);
    assert_int_equal(j.calls, 1);
    assert_int_equal(j.status, RL_ESTORE);
}

/* ---- the script's decisions: several windows, costs, quotas --------------*/

/* Window w: length ws, limit lim, at index idx, expiring at its end plus
 * grace. */
static void win_at(rls_wop_t *w, uint32_t ws, uint64_t lim, uint64_t idx,
                   uint64_t grace)
{
    w->window_s = ws;
    w->limit = lim;
    w->index = idx;
    w->expire_at_ms = (idx + 1) * ws * 1000 + grace;
    w->before = -1;
}

/* Makes op i of j a request list on base key `key` with windows set by the
 * caller (nw of them in j->win[i]); equal: all costs are costs[0]. */
static void job_costs(job_t *j, size_t i, const char *key, uint32_t nw,
                      const uint32_t *costs, uint32_t nc, int equal)
{
    rls_op_t *op = &j->ops[i];

    snprintf(j->keys[i], sizeof(j->keys[i]), "%s", key);
    memset(op, 0, sizeof(*op));
    op->key = j->keys[i];
    op->key_len = strlen(j->keys[i]);
    op->tag_len = (size_t)(strrchr(j->keys[i], '}') + 1 - j->keys[i]);
    op->scale = 1;
    op->win = j->win[i];
    op->nwin = nw;
    assert_true(nc <= 32);
    memcpy(j->cost[i], costs, nc * sizeof(*costs));
    op->costs = j->cost[i];
    op->ncosts = nc;
    op->equal_cost = equal ? costs[0] : 0;
    op->admitted = UINT64_MAX;
}

/* Op i of j names the stored quota of its rule (the base key's last
 * part, after ":r:"), scaled. */
static void job_quota(job_t *j, size_t i, double scale)
{
    rls_op_t *op = &j->ops[i];

    op->quota = op->key + op->tag_len + 3;
    op->quota_len = op->key_len - op->tag_len - 3;
    op->scale = scale;
}

static void run_job(fx_t *f, job_t *j, size_t n)
{
    j->n = n;
    j->calls = 0;
    submit(f, j);
    RUN_UNTIL(f, j->calls > 0, 5000);
    assert_int_equal(j->calls, 1);
    assert_int_equal(j->status, 0);
}

static uint64_t redis_now_ms(fx_t *f)
{
    redisReply *r = redisCommand(f->rc, "TIME");
    uint64_t ms;

    assert_non_null(r);
    assert_int_equal(r->elements, 2);
    ms = strtoull(r->element[0]->str, NULL, 10) * 1000 +
         strtoull(r->element[1]->str, NULL, 10) / 1000;
    freeReplyObject(r);
    return ms;
}

/* Every counter key ("...:<window_s>:<index>") matching pattern expires
 * no later than its window's end + grace + slack_ms, and does expire.
 * Returns how many there are. */
static long long assert_counters_expire(fx_t *f, const char *pattern,
                                        uint64_t grace, uint64_t slack_ms)
{
    redisReply *r = redisCommand(f->rc, "KEYS %s", pattern);
    uint64_t now = redis_now_ms(f);
    long long n;
    size_t i;

    assert_non_null(r);
    assert_int_equal(r->type, REDIS_REPLY_ARRAY);
    for (i = 0; i < r->elements; i++) {
        const char *k = r->element[i]->str, *c1, *c2;
        uint64_t ws, idx, end;
        long long pttl;

        c2 = strrchr(k, ':');
        assert_non_null(c2);
        for (c1 = c2 - 1; c1 > k && *c1 != ':'; c1--)
            ;
        ws = strtoull(c1 + 1, NULL, 10);
        idx = strtoull(c2 + 1, NULL, 10);
        end = (idx + 1) * ws * 1000 + grace + slack_ms;
        pttl = redis_int(f, "PTTL %s", k);
        if (pttl <= 0 || (uint64_t)pttl > end - now)
            fail_msg("key %s has PTTL %lld, its window ends in %llu ms", k,
                     pttl, (unsigned long long)(end - now));
    }
    n = (long long)r->elements;
    freeReplyObject(r);
    return n;
}

static long long redis_get(fx_t *f, const rls_op_t *op, uint32_t ws,
                           uint64_t idx)
{
    char key[256];

    rls_wkey(op, ws, idx, key);
    return redis_int(f, "GET %s", key);
}

static long long redis_exists(fx_t *f, const rls_op_t *op, uint32_t ws,
                              uint64_t idx)
{
    char key[256];

    rls_wkey(op, ws, idx, key);
    return redis_int(f, "EXISTS %s", key);
}

/* 3/60 s and 5/3600 s: admitted in order, only when both windows have
 * room; a refusal consumes nothing in either and creates no key. */
static void test_two_windows(void **state)
{
    fx_t *f = *state;
    static job_t j;
    static const uint32_t c11[] = {1, 1}, c211[] = {2, 1, 1}, c1[] = {1},
                          c111[] = {1, 1, 1};
    const char *key = "rl:{two}:r:api";
    uint64_t now, m, h;

    open_store(f, f->redis.port, 2000, 0);
    wait_up(f, 5000);
    now = f->st->v->now_ms(f->st);
    m = now / 60000;
    h = now / 3600000;
#define TWO(min, costs, nc, equal)                                             \
    do {                                                                       \
        job_costs(&j, 0, key, 2, costs, nc, equal);                            \
        win_at(&j.win[0][0], 60, 3, min, 1000);                                \
        win_at(&j.win[0][1], 3600, 5, h, 1000);                                \
        run_job(f, &j, 1);                                                     \
        assert_int_equal(j.ops[0].err, 0);                                     \
        assert_int_equal(j.nqwin[0], 0);                                       \
    } while (0)

    TWO(m, c11, 2, 1);
    assert_int_equal(j.ops[0].admitted, 2);
    assert_int_equal(j.win[0][0].before, 0);
    assert_int_equal(j.win[0][1].before, 0);
    assert_int_equal(redis_get(f, &j.ops[0], 60, m), 2);
    assert_int_equal(redis_get(f, &j.ops[0], 3600, h), 2);
    /* Cost 2 does not fit the minute (1 left): refused; the 1 after it
     * fits; the last 1 does not. */
    TWO(m, c211, 3, 0);
    assert_int_equal(j.ops[0].admitted, 1);
    assert_int_equal(j.win[0][0].before, 2);
    assert_int_equal(j.win[0][1].before, 2);
    assert_int_equal(redis_get(f, &j.ops[0], 60, m), 3);
    assert_int_equal(redis_get(f, &j.ops[0], 3600, h), 3);
    TWO(m, c1, 1, 1);
    assert_int_equal(j.ops[0].admitted, 0);
    assert_int_equal(j.win[0][0].before, 3);
    assert_int_equal(redis_get(f, &j.ops[0], 60, m), 3);
    assert_int_equal(redis_get(f, &j.ops[0], 3600, h), 3);
    /* The next minute: room 3 there, but the hour has 2 left. */
    TWO(m + 1, c111, 3, 1);
    assert_int_equal(j.ops[0].admitted, 2);
    assert_int_equal(j.win[0][0].before, 0);
    assert_int_equal(j.win[0][1].before, 3);
    assert_int_equal(redis_get(f, &j.ops[0], 60, m + 1), 2);
    assert_int_equal(redis_get(f, &j.ops[0], 3600, h), 5);
    assert_int_equal(redis_get(f, &j.ops[0], 60, m), 3);
    /* The hour is full: a fresh minute refuses too, and gets no key. */
    TWO(m + 2, c111, 3, 1);
    assert_int_equal(j.ops[0].admitted, 0);
    assert_int_equal(j.win[0][0].before, 0);
    assert_int_equal(j.win[0][1].before, 5);
    assert_int_equal(redis_exists(f, &j.ops[0], 60, m + 2), 0);
    assert_int_equal(redis_get(f, &j.ops[0], 3600, h), 5);
    TWO(m + 2, c211, 3, 0);
    assert_int_equal(j.ops[0].admitted, 0);
    assert_int_equal(redis_exists(f, &j.ops[0], 60, m + 2), 0);
#undef TWO
    assert_int_equal(assert_counters_expire(f, "rl:*", 1000, 50), 3);
}

static uint64_t lcg = 20261123;

static uint32_t rnd(uint32_t n)
{
    lcg = lcg * 6364136223846793005ULL + 1442695040888963407ULL;
    return (uint32_t)((lcg >> 33) % n);
}

/* 1 when this run loads the ratelimit module into its redis-servers
 * (test_store_redis_module): the store must then use it, and script_run
 * runs RL.BATCH instead of the script. */
static int with_module(void)
{
    const char *e = getenv("RLT_EXPECT_MODULE");

    return e != NULL && strcmp(e, "1") == 0;
}

/* Shuffles order[0..4) (window lengths to pick from). */
static void shuffle4(uint32_t *order)
{
    uint32_t k;

    for (k = 0; k < 4; k++) {
        uint32_t o = rnd(4), t = order[k];
        order[k] = order[o];
        order[o] = t;
    }
}

/* One batch as EVAL of the script or as RL.BATCH; the raw reply. */
static redisReply *raw_run(fx_t *f, const rls_op_t *ops, size_t n,
                           uint64_t now, int module)
{
    rls_cmdbuf_t buf = {NULL, 0, 0};
    redisReply *rep = NULL;
    int rc = module ? rls_redis_encode_module(&buf, ops, n, now, 1000, 0)
                    : rls_redis_encode(&buf, NULL, ops, n, now, 1000, 0);
    size_t len = buf.len;

    assert_int_equal(rc, 0);
    assert_true(len > 0);
    assert_int_equal(redisAppendFormattedCommand(f->rc, buf.p, len),
                     REDIS_OK);
    assert_int_equal(redisGetReply(f->rc, (void **)&rep), REDIS_OK);
    assert_non_null(rep);
    free(buf.p);
    return rep;
}

/* Runs ops through the script on the blocking connection (EVAL, no
 * deadline; RL.BATCH with the module) and parses the reply. */
static int script_run(fx_t *f, rls_op_t *ops, size_t n, uint64_t now,
                      rls_wop_t *qwin, rls_redis_errs_t *errs)
{
    redisReply *rep = raw_run(f, ops, n, now, with_module());
    int rc;

    if (rep->type != REDIS_REPLY_ARRAY && rep->type != REDIS_REPLY_STRING)
        fail_msg("script reply type %d: %s", rep->type,
                 rep->type == REDIS_REPLY_ERROR ? rep->str : "");
    rc = rls_redis_parse_reply(rep, ops, n, qwin, errs);
    freeReplyObject(rep);
    return rc;
}

/* Random small cases: 1-3 windows with small limits and random counts
 * already there (some above the limit, some negative, some absent), 1-8
 * requests of equal (closed form) or unequal (list) costs. The script
 * admits exactly what rl_admit_one does in a loop, reports the counts it
 * found, and adds exactly the admitted costs, creating no key when it
 * admitted nothing. */
static void test_script_matches_model(void **state)
{
    enum { ROUNDS = 20, PER = 20 };
    static const uint32_t lens[] = {1, 60, 3600, 86400};
    fx_t *f = *state;
    static job_t j;
    static rls_wop_t qwin[PER * RLS_WINDOWS_MAX];
    static long long preset[PER][4];
    static int set[PER][4];
    static uint64_t sum[PER], want[PER];
    rls_redis_errs_t errs;
    uint64_t now = redis_now_ms(f), nequal = 0, nrefused = 0, nruns = 0;
    size_t round, i, k;

    for (round = 0; round < ROUNDS; round++) {
        memset(&j, 0, sizeof(j));
        for (i = 0; i < PER; i++) {
            rl_admit_win_t w[4], w2[4];
            uint32_t costs[8], nw = 1 + rnd(3), nc = 1 + rnd(8), c;
            int equal = rnd(2);
            char key[64];
            uint32_t order[4] = {0, 1, 2, 3};
            /* Every other round, mostly the commonest op: one request of
             * cost 1 on one 60 s window of limit 3 or 5, so that ops of
             * one profile come in runs (sent as "r", count, profile). */
            int unit = round % 2 == 1 && rnd(5) != 0;

            snprintf(key, sizeof(key), "rl:{m%zu:%zu}:r:t", round, i);
            shuffle4(order);
            c = 1 + rnd(4);
            if (unit) {
                nw = 1;
                nc = 1;
                equal = 1;
                c = 1;
                order[0] = 1; /* lens[1]: 60 s */
            }
            for (k = 0; k < nc; k++)
                costs[k] = equal ? c : 1 + rnd(4);
            job_costs(&j, i, key, nw, costs, nc, equal);
            for (k = 0; k < nw; k++) {
                uint64_t lim = unit ? 3 + 2 * rnd(2) : 1 + rnd(10);
                win_at(&j.win[i][k], lens[order[k]], lim, 7, 0);
                j.win[i][k].expire_at_ms = now + 600000;
                preset[i][k] = 0;
                set[i][k] = rnd(2);
                if (set[i][k]) {
                    char wk[128];
                    redisReply *r;
                    preset[i][k] = (long long)rnd((uint32_t)lim + 5) - 2;
                    rls_wkey(&j.ops[i], lens[order[k]], 7, wk);
                    r = redisCommand(f->rc, "SET %s %lld", wk, preset[i][k]);
                    assert_non_null(r);
                    freeReplyObject(r);
                }
                w[k].limit = lim;
                w[k].count = preset[i][k] > 0 ? (uint64_t)preset[i][k] : 0;
                w[k].window_s = lens[order[k]];
                w[k].reset_after_ms = 1;
            }
            memcpy(w2, w, sizeof(w));
            want[i] = sum[i] = 0;
            for (k = 0; k < nc; k++)
                if (rl_admit_one(w, nw, costs[k])) {
                    want[i]++;
                    sum[i] += costs[k];
                }
            if (equal) {
                assert_int_equal(rl_admit_equal(w2, nw, c, nc), want[i]);
                nequal++;
            }
            nrefused += want[i] < nc;
        }
        for (i = 1; i < PER; i++)
            nruns += j.ops[i].nwin == 1 && j.ops[i - 1].nwin == 1 &&
                     j.ops[i].ncosts == 1 && j.ops[i - 1].ncosts == 1 &&
                     j.ops[i].equal_cost == 1 && j.ops[i - 1].equal_cost == 1 &&
                     j.ops[i].win[0].limit == j.ops[i - 1].win[0].limit &&
                     j.ops[i].win[0].window_s == 60 &&
                     j.ops[i - 1].win[0].window_s == 60;
        assert_int_equal(script_run(f, j.ops, PER, now, qwin, &errs), 0);
        assert_int_equal(errs.failed, 0);
        for (i = 0; i < PER; i++) {
            rls_op_t *op = &j.ops[i];

            assert_int_equal(op->err, 0);
            assert_int_equal(op->nqwin, 0);
            if (op->admitted != want[i])
                fail_msg("round %zu op %zu: script admitted %llu, model %llu",
                         round, i, (unsigned long long)op->admitted,
                         (unsigned long long)want[i]);
            for (k = 0; k < op->nwin; k++) {
                rls_wop_t *w = &op->win[k];
                assert_int_equal(w->before, preset[i][k]);
                if (sum[i] > 0)
                    assert_int_equal(redis_get(f, op, w->window_s, 7),
                                     preset[i][k] + (long long)sum[i]);
                else if (!set[i][k])
                    /* never created by a refusal */
                    assert_int_equal(redis_exists(f, op, w->window_s, 7), 0);
                else if (preset[i][k] == 0)
                    /* A counter at 0 is as good as none: the script may
                     * remove it (its own counters never hold 0). */
                    assert_true(redis_get(f, op, w->window_s, 7) == 0 ||
                                redis_exists(f, op, w->window_s, 7) == 0);
                else
                    assert_int_equal(redis_get(f, op, w->window_s, 7),
                                     preset[i][k]);
            }
        }
    }
    /* Both forms, runs, and refusals, were exercised. */
    assert_true(nequal > 50 && nequal < ROUNDS * PER - 50);
    assert_true(nruns > 10);
    assert_true(nrefused > 50);
    /* No key the script created lacks its expiry. */
    {
        redisReply *r = redisCommand(f->rc, "KEYS rl:*");
        size_t n = 0;
        assert_non_null(r);
        for (i = 0; i < r->elements; i++) {
            long long pttl = redis_int(f, "PTTL %s", r->element[i]->str);
            /* the preset keys have none (-1) unless the script created
             * them, which it cannot: SET made them first */
            n += pttl > 0;
            assert_true(pttl == -1 || (pttl > 0 && pttl <= 600050));
        }
        freeReplyObject(r);
        assert_true(n > 0);
    }
}

/* The store sends its batches to the module where Redis has it (and to
 * the script where it has not, or with no_module). */
static void test_module_in_use(void **state)
{
    fx_t *f = *state;
    static job_t j;
    redisReply *r;
    int pass;

    for (pass = 0; pass < 2; pass++) {
        rls_redis_opts_t o;
        int done = 0, module = with_module() && pass == 0;

        memset(&o, 0, sizeof(o));
        o.host = "127.0.0.1";
        o.port = f->redis.port;
        o.timeout_ms = 2000;
        o.grace_ms = 1000;
        o.no_module = pass == 1;
        r = redisCommand(f->rc, "CONFIG RESETSTAT");
        freeReplyObject(r);
        f->st = rls_store_redis_new(&f->loop, &o);
        f->closed = 0;
        wait_up(f, 5000);
        job_op(&j, 0, "rl:{use}:r:t", 1, redis_now_ms(f) + 60000);
        run_job(f, &j, 1);
        assert_int_equal(j.ops[0].err, 0);
        assert_int_equal(j.ops[0].admitted, 1);
        assert_int_equal(redis_int(f, "GET %s", "rl:{use}:r:t:60:1"),
                         pass + 1);
        assert_int_equal(f->st->stats.redis_module, module);
        r = redisCommand(f->rc, "INFO commandstats");
        assert_non_null(r);
        assert_int_equal(r->type, REDIS_REPLY_STRING);
        if ((strstr(r->str, "cmdstat_rl.batch:calls=1,") != NULL) != module ||
            (strstr(r->str, "cmdstat_evalsha:calls=1,") != NULL) == module)
            fail_msg("pass %d, module expected %d: %s", pass, module,
                     r->str);
        freeReplyObject(r);
        if (module) {
            /* The module unloaded under a live connection: the batch
             * that finds it gone goes to the script, and so do the
             * next. */
            logcap_t lc;
            r = redisCommand(f->rc, "MODULE UNLOAD ratelimit");
            assert_non_null(r);
            assert_int_equal(r->type, REDIS_REPLY_STATUS);
            freeReplyObject(r);
            log_begin(&lc);
            run_job(f, &j, 1);
            assert_int_equal(j.ops[0].err, 0);
            assert_int_equal(j.ops[0].admitted, 1);
            run_job(f, &j, 1);
            assert_int_equal(j.ops[0].err, 0);
            assert_int_equal(redis_int(f, "GET %s", "rl:{use}:r:t:60:1"), 3);
            assert_int_equal(f->st->stats.redis_module, 0);
            assert_int_equal(f->st->stats.errors, 0);
            assert_true(log_end(&lc, "level=warn",
                                "the ratelimit module is gone", NULL));
            r = redisCommand(f->rc, "DEL %s", "rl:{use}:r:t:60:1");
            freeReplyObject(r);
            r = redisCommand(f->rc, "SET %s 1", "rl:{use}:r:t:60:1");
            freeReplyObject(r);
        }
        f->st->v->close(f->st, on_done, &done);
        f->closed = 1;
        RUN_UNTIL(f, done > 0, 5000);
        f->st = NULL;
    }
}

/* Presets a copy of a key ("A" or "B" after "rl:{d"): kind 0 none, 1 a
 * count, 2 not a number, 3 2^63 - 1, 4 a list, 5 zero. */
static void preset_key(fx_t *f, const char *key, int kind, long long v)
{
    /* 2^63 - 1: any increment overflows. (Below that the script's doubles
     * are not exact, where the module's integers are.) */
    static const char *const text[] = {NULL, NULL, "abc",
                                       "9223372036854775807", NULL, "0"};
    redisReply *r;

    if (kind < 1 || kind > 5)
        return;
    if (kind == 1)
        r = redisCommand(f->rc, "SET %s %lld", key, v);
    else if (kind == 4)
        r = redisCommand(f->rc, "RPUSH %s %s", key, "x");
    else
        r = redisCommand(f->rc, "SET %s %s", key, text[kind]);
    assert_non_null(r);
    assert_int_not_equal(r->type, REDIS_REPLY_ERROR);
    freeReplyObject(r);
}

static void same_reply(const redisReply *a, const redisReply *b, size_t round)
{
    size_t i;

    if (a->type != b->type)
        fail_msg("round %zu: script reply type %d, module %d (%s / %s)",
                 round, a->type, b->type,
                 a->type == REDIS_REPLY_ERROR ? a->str : "",
                 b->type == REDIS_REPLY_ERROR ? b->str : "");
    switch (a->type) {
    case REDIS_REPLY_INTEGER:
        if (a->integer != b->integer)
            fail_msg("round %zu: script %lld, module %lld", round,
                     a->integer, b->integer);
        break;
    case REDIS_REPLY_ARRAY:
        if (a->elements != b->elements)
            fail_msg("round %zu: script %zu entries, module %zu", round,
                     a->elements, b->elements);
        for (i = 0; i < a->elements; i++)
            same_reply(a->element[i], b->element[i], round);
        break;
    default:
        if (a->len != b->len || memcmp(a->str, b->str, a->len) != 0)
            fail_msg("round %zu: script \"%s\", module \"%s\"", round,
                     a->str, b->str);
    }
}

/* The module decides as the script does: random batches (1-3 windows,
 * equal and listed costs, runs, callers repeated within a batch, stored
 * quotas good, bad and of the wrong type, counters absent, counting,
 * negative, zero, at 2^63 - 1, not numbers, of the wrong type) run once
 * through each, on two copies of the same keys; the replies are
 * identical, and so is every key after (value, type, expiry). */
static void test_module_matches_script(void **state)
{
    enum { ROUNDS = 30, PER = 24, CALLERS = 10 };
    static const uint32_t lens[] = {1, 60, 3600, 86400};
    static const char *const quotas[] = {"2/60 4/3600", "3/60", "abc",
                                         "0/60", "5/60 3/60", "1.5/60",
                                         "9223372036854775807/60 3/3600",
                                         "5"};
    enum { NQ = sizeof(quotas) / sizeof(quotas[0]) };
    fx_t *f = *state;
    static job_t ja, jb;
    static rls_wop_t qwin[PER * RLS_WINDOWS_MAX];
    rls_redis_errs_t errs;
    uint64_t now;
    size_t round, i, k, c, nerr = 0, nq = 0, nrefused = 0, nkeys = 0;

    if (!with_module())
        skip();
    now = redis_now_ms(f);
    for (round = 0; round < ROUNDS; round++) {
        redisReply *ra, *rb, *keys;
        int qkind[CALLERS];
        char pat[64];

        memset(&ja, 0, sizeof(ja));
        memset(&jb, 0, sizeof(jb));
        for (c = 0; c < CALLERS; c++) {
            /* The caller's quota hash: none, a quota, a list. */
            char qk[64];
            qkind[c] = (int)rnd(NQ + 3);
            for (k = 0; k < 2; k++) {
                redisReply *r = NULL;
                snprintf(qk, sizeof(qk), "rl:{d%c%zu:%zu}:q", "AB"[k],
                         round, c);
                if (qkind[c] < NQ)
                    r = redisCommand(f->rc, "HSET %s t %s", qk,
                                     quotas[qkind[c]]);
                else if (qkind[c] == NQ)
                    r = redisCommand(f->rc, "RPUSH %s x", qk);
                if (r != NULL)
                    freeReplyObject(r);
            }
        }
        for (i = 0; i < PER; i++) {
            uint32_t costs[8], nw = 1 + rnd(3), nc = 1 + rnd(8), cost;
            uint32_t order[4] = {0, 1, 2, 3};
            int equal = rnd(2), unit = rnd(3) == 0, quota = rnd(4) == 0;
            double scale = rnd(3) == 0 ? 0.5 : rnd(2) ? 1 : 2.5;
            char key[64];

            c = rnd(CALLERS);
            shuffle4(order);
            cost = 1 + rnd(4);
            if (unit) {
                nw = 1;
                nc = 1;
                equal = 1;
                cost = 1;
                quota = 0;
                order[0] = 1;
            }
            for (k = 0; k < nc; k++)
                costs[k] = equal ? cost : 1 + rnd(4);
            for (k = 0; k < 2; k++) {
                job_t *j = k == 0 ? &ja : &jb;
                snprintf(key, sizeof(key), "rl:{d%c%zu:%zu}:r:t", "AB"[k],
                         round, c);
                job_costs(j, i, key, nw, costs, nc, equal);
                if (quota)
                    job_quota(j, i, scale);
            }
            nq += quota;
            for (k = 0; k < nw; k++) {
                uint64_t lim = unit         ? 3 + 2 * rnd(2)
                               : rnd(8) == 0 ? (UINT64_C(1) << 62)
                                             : 1 + rnd(10);
                int kind = (int)rnd(12);
                uint32_t span = lim < 20 ? (uint32_t)lim + 5 : 25;
                long long v = (long long)rnd(span) - 2;
                size_t h;
                win_at(&ja.win[i][k], lens[order[k]], lim, 7, 0);
                ja.win[i][k].expire_at_ms =
                    now + 600000 + (unit ? 0 : rnd(1000));
                jb.win[i][k] = ja.win[i][k];
                for (h = 0; h < 2; h++) {
                    char wk[128];
                    rls_wkey(h == 0 ? &ja.ops[i] : &jb.ops[i],
                             lens[order[k]], 7, wk);
                    if (kind <= 5 && redis_int(f, "EXISTS %s", wk) == 0)
                        preset_key(f, wk, kind, v);
                }
            }
        }
        ra = raw_run(f, ja.ops, PER, now, 0);
        rb = raw_run(f, jb.ops, PER, now, 1);
        same_reply(ra, rb, round);
        assert_int_equal(ra->type, REDIS_REPLY_ARRAY);
        for (i = 0; i < ra->elements; i++)
            if (ra->element[i]->type == REDIS_REPLY_STRING &&
                ra->element[i]->str[0] == 'e')
                nerr++;
        assert_int_equal(rls_redis_parse_reply(ra, ja.ops, PER, qwin, &errs),
                         0);
        for (i = 0; i < PER; i++)
            nrefused += ja.ops[i].err == 0 &&
                        ja.ops[i].admitted < ja.ops[i].ncosts;
        freeReplyObject(ra);
        freeReplyObject(rb);
        /* Every key of copy A as its twin in copy B. */
        snprintf(pat, sizeof(pat), "rl:{dA%zu:*", round);
        keys = redisCommand(f->rc, "KEYS %s", pat);
        assert_non_null(keys);
        for (i = 0; i < keys->elements; i++) {
            char twin[160];
            const char *a = keys->element[i]->str;
            redisReply *ta, *tb;
            snprintf(twin, sizeof(twin), "%s", a);
            twin[5] = 'B';
            ta = redisCommand(f->rc, "TYPE %s", a);
            tb = redisCommand(f->rc, "TYPE %s", twin);
            assert_string_equal(ta->str, tb->str);
            if (strcmp(ta->str, "string") == 0) {
                redisReply *ga = redisCommand(f->rc, "GET %s", a);
                redisReply *gb = redisCommand(f->rc, "GET %s", twin);
                if (strcmp(ga->str, gb->str) != 0)
                    fail_msg("%s: script left %s, module %s", a, ga->str,
                             gb->str);
                freeReplyObject(ga);
                freeReplyObject(gb);
                assert_int_equal(redis_int(f, "PEXPIRETIME %s", a),
                                 redis_int(f, "PEXPIRETIME %s", twin));
            }
            freeReplyObject(ta);
            freeReplyObject(tb);
        }
        nkeys += keys->elements;
        k = keys->elements;
        freeReplyObject(keys);
        pat[5] = 'B';
        keys = redisCommand(f->rc, "KEYS %s", pat);
        assert_non_null(keys);
        assert_int_equal(keys->elements, k);
        freeReplyObject(keys);
    }
    /* What could differ was exercised. */
    assert_true(nerr > 20);
    assert_true(nq > 50);
    assert_true(nrefused > 50);
    assert_true(nkeys > 200);
}

/* A replica WITHOUT the module ends up with the master's counters, values
 * and absolute expiries alike, as the module decided them on the master:
 * quotas, refusals, a counter at 0 removed, and all; its log has no
 * CRITICAL line (what a replica writes when it cannot run a command its
 * master sent). */
static void test_module_replicates(void **state)
{
    fx_t *f = *state;
    static job_t j;
    static const uint32_t ones[] = {1, 1, 1, 1}, five[] = {5};
    char port[16], key[64], zero[64], module[512], log[192], line[1024];
    char *extra[] = {"--replicaof", "127.0.0.1", port, NULL};
    rlt_redis_t *rep = &f->replica;
    redisContext *rc;
    redisReply *r, *keys;
    uint64_t now, deadline;
    size_t i, round;
    FILE *lf;

    if (!with_module())
        skip();
    snprintf(port, sizeof(port), "%d", f->redis.port);
    /* rlt_redis_start loads RLT_REDIS_MODULE: not into this one. */
    snprintf(module, sizeof(module), "%s", getenv("RLT_REDIS_MODULE"));
    unsetenv("RLT_REDIS_MODULE");
    i = (size_t)rlt_redis_start_with(rep, extra);
    setenv("RLT_REDIS_MODULE", module, 1);
    assert_int_equal(i, 0);
    rc = rlt_redis_connect(rep);
    assert_non_null(rc);
    deadline = rlt_mono_ms() + 10000;
    for (;;) {
        int up;
        r = redisCommand(rc, "INFO replication");
        assert_non_null(r);
        up = strstr(r->str, "master_link_status:up") != NULL;
        freeReplyObject(r);
        if (up)
            break;
        assert_true(rlt_mono_ms() < deadline);
        run_for(f, 20);
    }
    r = redisCommand(f->rc, "HSET rl:{rq0}:q t %s", "3/60 5/3600");
    freeReplyObject(r);
    open_store(f, f->redis.port, 2000, 0);
    wait_up(f, 5000);
    now = f->st->v->now_ms(f->st);
    /* A counter at 0 that a refusal removes (the script's INCRBY, DEL). */
    snprintf(zero, sizeof(zero), "rl:{rq9}:r:t:60:%llu",
             (unsigned long long)(now / 60000));
    r = redisCommand(f->rc, "SET %s 0", zero);
    freeReplyObject(r);
    for (round = 0; round < 5; round++) {
        for (i = 0; i < 8; i++) {
            snprintf(key, sizeof(key), "rl:{rq%zu}:r:t", i % 4);
            job_costs(&j, i, key, 1, ones, 1 + (uint32_t)(i % 3), 1);
            win_at(&j.win[i][0], 60, 4, now / 60000, 1000);
            if (i % 4 == 0)
                job_quota(&j, i, 1);
        }
        job_costs(&j, 8, "rl:{rq9}:r:t", 1, five, 1, 1);
        win_at(&j.win[8][0], 60, 4, now / 60000, 1000);
        run_job(f, &j, 9);
        assert_int_equal(j.status, 0);
        assert_int_equal(j.ops[8].admitted, 0);
    }
    assert_int_equal(redis_int(f, "EXISTS %s", zero), 0);
    /* The module decided (its calls, no script's). */
    r = redisCommand(f->rc, "INFO commandstats");
    assert_non_null(r);
    assert_non_null(strstr(r->str, "cmdstat_rl.batch:calls=5,"));
    assert_null(strstr(r->str, "cmdstat_evalsha:"));
    freeReplyObject(r);
    r = redisCommand(f->rc, "WAIT 1 2000");
    assert_non_null(r);
    assert_int_equal(r->integer, 1);
    freeReplyObject(r);
    keys = redisCommand(f->rc, "KEYS rl:{rq*}:r:*");
    assert_non_null(keys);
    assert_true(keys->elements >= 5);
    for (i = 0; i < keys->elements; i++) {
        const char *k = keys->element[i]->str;
        redisReply *a = redisCommand(f->rc, "GET %s", k);
        redisReply *b = redisCommand(rc, "GET %s", k);
        redisReply *ea = redisCommand(f->rc, "PEXPIRETIME %s", k);
        redisReply *eb = redisCommand(rc, "PEXPIRETIME %s", k);
        assert_int_equal(b->type, REDIS_REPLY_STRING);
        assert_string_equal(a->str, b->str);
        assert_true(ea->integer > 0);
        assert_int_equal(ea->integer, eb->integer);
        freeReplyObject(a);
        freeReplyObject(b);
        freeReplyObject(ea);
        freeReplyObject(eb);
    }
    r = redisCommand(rc, "DBSIZE");
    assert_int_equal((size_t)r->integer, keys->elements + 1); /* + quota */
    freeReplyObject(r);
    freeReplyObject(keys);
    redisFree(rc);
    snprintf(log, sizeof(log), "%s/redis.log", rep->dir);
    lf = fopen(log, "r");
    assert_non_null(lf);
    while (fgets(line, sizeof(line), lf) != NULL)
        if (strstr(line, "CRITICAL") != NULL)
            fail_msg("replica log: %s", line);
    fclose(lf);
}

/* A refusal on a window nobody used yet creates no key; with the list
 * form too. Checked per created key: the keys that exist are exactly those
 * the model says received an admission or were preset. */
static void test_refusal_creates_no_key(void **state)
{
    fx_t *f = *state;
    static job_t j;
    static const uint32_t big[] = {9, 9}, mixed[] = {9, 4, 9};
    static rls_wop_t qwin[2 * RLS_WINDOWS_MAX];
    rls_redis_errs_t errs;
    uint64_t now = redis_now_ms(f);

    job_costs(&j, 0, "rl:{nk:0}:r:t", 2, big, 2, 1);
    win_at(&j.win[0][0], 60, 5, now / 60000, 1000);
    win_at(&j.win[0][1], 3600, 50, now / 3600000, 1000);
    job_costs(&j, 1, "rl:{nk:1}:r:t", 2, mixed, 3, 0);
    win_at(&j.win[1][0], 60, 5, now / 60000, 1000);
    win_at(&j.win[1][1], 3600, 3, now / 3600000, 1000);
    assert_int_equal(script_run(f, j.ops, 2, now, qwin, &errs), 0);
    assert_int_equal(j.ops[0].admitted, 0);
    assert_int_equal(j.ops[1].admitted, 0);
    assert_int_equal(redis_int(f, "DBSIZE%s", ""), 0);
}

/* A stored quota ("N/S N/S" under the rule's field of "<tag>:q") replaces
 * the rule's windows: decided on them, keys made for them, reported in
 * qwin. One that does not parse is ignored and counted. */
static void test_quota_replaces_windows(void **state)
{
    logcap_t lc;
    static const char *const garbage[] = {
        "abc", "0/60", "5/0", "", " ",
        "1/1 1/2 1/3 1/4 1/5 1/6 1/7 1/8 1/9", /* nine windows */
        "5/60 3/60",                            /* a window twice */
        "1.5/60", "-5/60", "5/60,6/3600", "5/60 abc", "5/31622401",
        "5/99999999999999999999", "5 / 60", "5/60/60"};
    enum { NG = sizeof(garbage) / sizeof(garbage[0]) };
    fx_t *f = *state;
    static job_t j;
    static const uint32_t ones[] = {1, 1, 1, 1, 1};
    char key[64];
    redisReply *r;
    uint64_t now;
    size_t g;

    open_store(f, f->redis.port, 2000, 0);
    wait_up(f, 5000);
    now = f->st->v->now_ms(f->st);
    r = redisCommand(f->rc, "HSET rl:{qa}:q api %s", "2/60 4/3600");
    freeReplyObject(r);
    /* Another rule's quota is not this rule's. */
    r = redisCommand(f->rc, "HSET rl:{qa}:q other %s", "1/60");
    freeReplyObject(r);
    job_costs(&j, 0, "rl:{qa}:r:api", 1, ones, 3, 1);
    win_at(&j.win[0][0], 60, 10, now / 60000, 1000);
    job_quota(&j, 0, 1);
    run_job(f, &j, 1);
    assert_int_equal(j.ops[0].err, 0);
    assert_int_equal(j.ops[0].admitted, 2);
    assert_int_equal(j.nqwin[0], 2);
    assert_int_equal(j.qwin[0][0].window_s, 60);
    assert_int_equal(j.qwin[0][0].limit, 2);
    assert_int_equal(j.qwin[0][0].before, 0);
    assert_int_equal(j.qwin[0][1].window_s, 3600);
    assert_int_equal(j.qwin[0][1].limit, 4);
    assert_int_equal(j.qwin[0][1].before, 0);
    assert_int_equal(assert_counters_expire(f, "rl:{qa}:r:api:60:*", 1000,
                                            50),
                     1);
    assert_int_equal(assert_counters_expire(f, "rl:{qa}:r:api:3600:*", 1000,
                                            50),
                     1);
    /* Again: the quota's hour has 2 left, its minute none. */
    job_costs(&j, 0, "rl:{qa}:r:api", 1, ones, 3, 1);
    win_at(&j.win[0][0], 60, 10, now / 60000, 1000);
    job_quota(&j, 0, 1);
    run_job(f, &j, 1);
    assert_int_equal(j.ops[0].admitted, 0);
    assert_int_equal(j.qwin[0][0].before, 2);
    assert_int_equal(j.qwin[0][1].before, 2);
    /* The same op without a quota named: the rule's windows. */
    job_costs(&j, 0, "rl:{qa}:r:other", 1, ones, 3, 1);
    win_at(&j.win[0][0], 60, 10, now / 60000, 1000);
    run_job(f, &j, 1);
    assert_int_equal(j.ops[0].admitted, 3);
    assert_int_equal(j.nqwin[0], 0);
    assert_int_equal(f->st->stats.bad_quotas, 0);

    /* The largest limit rl-ctl writes (2^63-1) is a quota like any other,
     * not a reply the parser must refuse (which failed the whole
     * batch). */
    r = redisCommand(f->rc, "HSET rl:{qbig}:q api %s",
                     "9223372036854775807/60 3/3600");
    freeReplyObject(r);
    job_costs(&j, 0, "rl:{qbig}:r:api", 1, ones, 5, 1);
    win_at(&j.win[0][0], 60, 10, now / 60000, 1000);
    job_quota(&j, 0, 1);
    job_op(&j, 1, "rl:{qbig2}:r:t", 1, now + 60000);
    run_job(f, &j, 2);
    assert_int_equal(j.ops[0].err, 0);
    assert_int_equal(j.ops[0].admitted, 3);
    assert_int_equal(j.nqwin[0], 2);
    assert_true(j.qwin[0][0].limit >= (UINT64_C(1) << 62));
    assert_true(j.qwin[0][0].limit <= INT64_MAX);
    assert_int_equal(j.ops[1].err, 0);
    assert_int_equal(j.ops[1].admitted, 1);

    /* Garbage: the rule's windows (3/60) apply, each counted once, and
     * the operator is told, once a second at most. */
    log_begin(&lc);
    for (g = 0; g < NG; g++) {
        snprintf(key, sizeof(key), "rl:{qg%zu}:q", g);
        r = redisCommand(f->rc, "HSET %s api %s", key, garbage[g]);
        assert_non_null(r);
        assert_int_equal(r->type, REDIS_REPLY_INTEGER);
        freeReplyObject(r);
        snprintf(key, sizeof(key), "rl:{qg%zu}:r:api", g);
        job_costs(&j, 0, key, 1, ones, 5, 1);
        win_at(&j.win[0][0], 60, 3, now / 60000, 1000);
        job_quota(&j, 0, 1);
        run_job(f, &j, 1);
        if (j.ops[0].err != 0 || j.ops[0].admitted != 3 || j.nqwin[0] != 0)
            fail_msg("quota \"%s\": err %d admitted %llu nqwin %u",
                     garbage[g], j.ops[0].err,
                     (unsigned long long)j.ops[0].admitted, j.nqwin[0]);
        assert_int_equal(redis_get(f, &j.ops[0], 60, now / 60000), 3);
        assert_int_equal(f->st->stats.bad_quotas, g + 1);
    }
    assert_true(log_end(&lc, "level=warn", "stored quotas that do not parse",
                        "count=1", NULL));
    assert_counters_expire(f, "rl:{q*}:r:*", 1000, 50);
}

/* The rule's scale multiplies a stored quota's limits: floored, at least
 * 1. */
static void test_quota_scaled(void **state)
{
    static const struct {
        double scale;
        uint64_t l60, l3600;
    } cases[] = {{0.5, 5, 1}, {0.05, 1, 1}, {2.5, 25, 7}, {1, 10, 3},
                 {0.999, 9, 2}};
    fx_t *f = *state;
    static job_t j;
    static uint32_t ones[30];
    char key[64];
    redisReply *r;
    uint64_t now;
    size_t c, k;

    for (k = 0; k < 30; k++)
        ones[k] = 1;
    open_store(f, f->redis.port, 2000, 0);
    wait_up(f, 5000);
    now = f->st->v->now_ms(f->st);
    for (c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        snprintf(key, sizeof(key), "rl:{qs%zu}:q", c);
        r = redisCommand(f->rc, "HSET %s api %s", key, "10/60 3/3600");
        freeReplyObject(r);
        snprintf(key, sizeof(key), "rl:{qs%zu}:r:api", c);
        job_costs(&j, 0, key, 1, ones, 30, 1);
        win_at(&j.win[0][0], 60, 1000, now / 60000, 1000);
        job_quota(&j, 0, 1);
        j.ops[0].scale = cases[c].scale;
        run_job(f, &j, 1);
        assert_int_equal(j.ops[0].err, 0);
        assert_int_equal(j.nqwin[0], 2);
        assert_int_equal(j.qwin[0][0].limit, cases[c].l60);
        assert_int_equal(j.qwin[0][1].limit, cases[c].l3600);
        assert_int_equal(j.ops[0].admitted, cases[c].l60 < cases[c].l3600
                                                ? cases[c].l60
                                                : cases[c].l3600);
    }
    assert_int_equal(f->st->stats.bad_quotas, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_counts),
        cmocka_unit_test(test_encode),
        cmocka_unit_test(test_clock),
        cmocka_unit_test_setup_teardown(test_counts_and_ttl, fx_setup,
                                        fx_teardown),
        cmocka_unit_test_setup_teardown(
            test_big_batch_and_resubmit_from_callback, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_ttl_after_delete_and_flush,
                                        fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_bad_key_fails_only_its_op,
                                        fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_never_started, fx_setup,
                                        fx_teardown),
        cmocka_unit_test_setup_teardown(test_killed_mid_batch_then_restarted,
                                        fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_timeout_then_recovery, fx_setup,
                                        fx_teardown),
        cmocka_unit_test_setup_teardown(test_now_ms_follows_redis, fx_setup,
                                        fx_teardown),
        cmocka_unit_test_setup_teardown(test_close_with_batches_in_flight,
                                        fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_close_while_down_and_connecting,
                                        fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_noscript_after_script_flush,
                                        fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_hostname_is_resolved, fx_setup,
                                        fx_teardown),
        cmocka_unit_test_setup_teardown(test_oom_counted_logged_unhealthy,
                                        fx_setup_oom, fx_teardown),
        cmocka_unit_test_setup_teardown(test_timeout_consumes_nothing_later,
                                        fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_restart_noticed, fx_setup,
                                        fx_teardown),
        cmocka_unit_test_setup_teardown(test_auth_and_select, fx_setup_auth,
                                        fx_teardown),
        cmocka_unit_test_setup_teardown(test_two_windows, fx_setup,
                                        fx_teardown),
        cmocka_unit_test_setup_teardown(test_script_matches_model, fx_setup,
                                        fx_teardown),
        cmocka_unit_test_setup_teardown(test_module_in_use, fx_setup,
                                        fx_teardown),
        cmocka_unit_test_setup_teardown(test_module_matches_script, fx_setup,
                                        fx_teardown),
        cmocka_unit_test_setup_teardown(test_module_replicates, fx_setup,
                                        fx_teardown),
        cmocka_unit_test_setup_teardown(test_refusal_creates_no_key, fx_setup,
                                        fx_teardown),
        cmocka_unit_test_setup_teardown(test_quota_replaces_windows, fx_setup,
                                        fx_teardown),
        cmocka_unit_test_setup_teardown(test_quota_scaled, fx_setup,
                                        fx_teardown),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
