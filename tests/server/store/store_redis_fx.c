/* What the Redis store's tests share; see store_redis_fx.h. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "store/redis.h"
#include "store_redis_fx.h"

static void on_tick(uv_timer_t *t)
{
    (void)t;
}

void on_done(void *arg)
{
    (*(int *)arg)++;
}

void run_for(fx_t *f, uint64_t ms)
{
    uint64_t dl = rlt_mono_ms() + ms;

    while (rlt_mono_ms() < dl)
        uv_run(&f->loop, UV_RUN_ONCE);
}

rls_store_t *open_store(fx_t *f, int port, uint64_t timeout_ms, int db)
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

void close_store(fx_t *f)
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

int fx_setup_with(void **state, char *const extra[], const char *pw)
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

int fx_setup(void **state)
{
    return fx_setup_with(state, NULL, NULL);
}

int fx_setup_auth(void **state)
{
    static char *const extra[] = {"--requirepass", "s3cret pw", NULL};

    return fx_setup_with(state, extra, "s3cret pw");
}

int fx_teardown(void **state)
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

void on_job(void *data, rls_op_t *ops, size_t n, int status)
{
    job_t *j = data;

    size_t i;

    assert_ptr_equal(ops, j->ops);
    assert_int_equal(n, j->n);
    for (i = 0; i < n; i++) {
        /* quota_win is valid during the callback only */
        j->nquota_win[i] = ops[i].nquota_win;
        if (ops[i].nquota_win > 0)
            memcpy(j->quota_win[i], ops[i].quota_win,
                   ops[i].nquota_win * sizeof(ops[i].quota_win[0]));
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

void small_init(small_t *s, const char *key, uint64_t expire_at_ms)
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

int64_t after(const rls_op_t *op)
{
    return op->win[0].before + (int64_t)(op->admitted * op->costs[0]);
}

void job_op(job_t *j, size_t i, const char *key, uint64_t incr,
            uint64_t expire_at_ms)
{
    uint32_t cost = (uint32_t)incr;

    job_costs(j, i, key, 1, &cost, 1, 1);
    j->win[i][0].window_s = 60;
    j->win[i][0].limit = INT64_MAX;
    j->win[i][0].index = 1;
    j->win[i][0].expire_at_ms = expire_at_ms;
    j->win[i][0].before = -1;
    rls_wkey_fixed(&j->ops[i], 60, 1, j->wkeys[i]);
}

void on_small(void *data, rls_op_t *ops, size_t n, int status)
{
    small_t *s = data;

    assert_ptr_equal(ops, &s->op);
    assert_int_equal(n, 1);
    s->calls++;
    s->status = status;
}

void job_init(job_t *j, fx_t *f, size_t n, const char *tag, uint64_t incr)
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

void submit(fx_t *f, job_t *j)
{
    f->st->v->submit(f->st, j->ops, j->n, on_job, j);
}

void run_new_job(fx_t *f, job_t *j, size_t n, const char *tag, uint64_t incr)
{
    job_init(j, f, n, tag, incr);
    submit(f, j);
    RUN_UNTIL(f, j->calls > 0, 5000);
}

void wait_up(fx_t *f, uint64_t ms)
{
    RUN_UNTIL(f, f->st->v->up(f->st), ms);
    assert_true(f->st->v->up(f->st));
}

long long redis_int(fx_t *f, const char *fmt, const char *key)
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

uint64_t redis_now_ms(fx_t *f)
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

long long assert_all_keys_expire(fx_t *f, long long max_ms)
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

long long assert_counters_expire(fx_t *f, const char *pattern, uint64_t grace,
                                 uint64_t slack_ms)
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

long long redis_get(fx_t *f, const rls_op_t *op, uint32_t ws, uint64_t idx)
{
    char key[256];

    rls_wkey_fixed(op, ws, idx, key);
    return redis_int(f, "GET %s", key);
}

long long redis_exists(fx_t *f, const rls_op_t *op, uint32_t ws, uint64_t idx)
{
    char key[256];

    rls_wkey_fixed(op, ws, idx, key);
    return redis_int(f, "EXISTS %s", key);
}

void win_at(rls_op_window_t *w, uint32_t ws, uint64_t lim, uint64_t idx,
            uint64_t grace)
{
    w->window_s = ws;
    w->limit = lim;
    w->index = idx;
    w->expire_at_ms = (idx + 1) * ws * 1000 + grace;
    w->before = -1;
}

void job_costs(job_t *j, size_t i, const char *key, uint32_t nw,
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

void job_quota(job_t *j, size_t i, double scale)
{
    rls_op_t *op = &j->ops[i];

    op->quota = op->key + op->tag_len + 3;
    op->quota_len = op->key_len - op->tag_len - 3;
    op->scale = scale;
}

void run_job(fx_t *f, job_t *j, size_t n)
{
    j->n = n;
    j->calls = 0;
    submit(f, j);
    RUN_UNTIL(f, j->calls > 0, 5000);
    assert_int_equal(j->calls, 1);
    assert_int_equal(j->status, 0);
}

int with_module(void)
{
    const char *e = getenv("RLT_EXPECT_MODULE");

    return e != NULL && strcmp(e, "1") == 0;
}

void log_begin(logcap_t *l)
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

int log_end(logcap_t *l, ...)
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
