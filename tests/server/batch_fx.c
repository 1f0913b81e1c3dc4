/* The batcher's harness on a scripted clock (batch_fx.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "rl_error.h"
#include "store/memory.h"
#include "store/redis.h"
#include "batch_fx.h"

/* ---- a counting allocator ---- */

#ifdef COUNT_ALLOCS
extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
uint64_t n_allocs;
uint64_t fail_alloc;

void *malloc(size_t n)
{
    if (++n_allocs == fail_alloc)
        return NULL;
    return __libc_malloc(n);
}

void *calloc(size_t a, size_t b)
{
    n_allocs++;
    return __libc_calloc(a, b);
}

void *realloc(void *p, size_t n)
{
    n_allocs++;
    return __libc_realloc(p, n);
}
#endif

/* ---- the scripted-clock wrapper ---- */

static void w_submit(rls_store_t *s, rls_op_t *ops, size_t n, rls_store_cb cb,
                     void *data)
{
    clock_store_t *w = (clock_store_t *)s;
    size_t i;

    for (i = 0; i < n && w->nexpiry < 64; i++)
        w->expiry[w->nexpiry++] = ops[i].win[0].expire_at_ms;
    if (w->fail != 0) {
        if (w->fail > 0)
            w->fail--;
        for (i = 0; i < n; i++)
            ops[i].err = RL_ESTORE;
        cb(data, ops, n, RL_ESTORE);
        return;
    }
    if (w->hold) {
        assert_true(w->nheld < HELD_MAX);
        w->held[w->nheld++] = (held_t){ops, n, cb, data};
        return;
    }
    w->inner->v->submit(w->inner, ops, n, cb, data);
}

static uint64_t w_now(rls_store_t *s)
{
    return ((clock_store_t *)s)->now;
}

static int w_up(rls_store_t *s)
{
    clock_store_t *w = (clock_store_t *)s;
    return w->inner->v->up(w->inner);
}

static void w_inner_closed(void *arg)
{
    clock_store_t *w = arg;
    if (w->done)
        w->done(w->done_arg);
    free(w);
}

static void w_close(rls_store_t *s, void (*done)(void *), void *arg)
{
    clock_store_t *w = (clock_store_t *)s;
    w->done = done;
    w->done_arg = arg;
    w->inner->v->close(w->inner, w_inner_closed, w);
}

static const rls_store_vtbl_t clock_vtbl = {w_submit, w_now, w_up, w_close};

/* ---- the harness ---- */

static void respond(void *owner, const rl_result_t *r)
{
    h_t *h = owner;
    size_t i = (size_t)r->id;

    assert_true(i < h->n);
    h->answers[i]++;
    h->res[i] = *r;
    h->res[i].error = NULL;
    snprintf(h->err[i], sizeof(h->err[i]), "%.*s", (int)r->error_len,
             r->error ? r->error : "");
    h->order[h->answered++] = i;
}

/* Redis servers started by the running test, stopped by teardown even when
 * an assertion failed mid-test. */
static rlt_redis_t *started[4];

int h_teardown(void **state)
{
    size_t i;

    (void)state;
    for (i = 0; i < 4; i++) {
        if (started[i] != NULL)
            rlt_redis_stop(started[i]);
        started[i] = NULL;
    }
    return 0;
}

static void untrack(rlt_redis_t *r)
{
    size_t i;

    for (i = 0; i < 4; i++)
        if (started[i] == r)
            started[i] = NULL;
}

static void track(rlt_redis_t *r)
{
    size_t i;

    for (i = 0; i < 4; i++) {
        if (started[i] == NULL) {
            started[i] = r;
            return;
        }
    }
    fail_msg("too many redis servers in one test");
}

void h_open(h_t *h, int use_redis, size_t max_reqs, int fail_open)
{
    memset(h, 0, sizeof(*h));
    assert_int_equal(uv_loop_init(&h->loop), 0);
    h->use_redis = use_redis;
    h->store = calloc(1, sizeof(*h->store));
    assert_non_null(h->store);
    h->store->base.v = &clock_vtbl;
    if (use_redis == 3) {
        /* The memory store's table of many stripes, as --threads has it:
         * a group's levels fall in several. */
        rls_memtab_t *tab = rls_memtab_new(UINT64_C(1) << 30, 64);
        assert_non_null(tab);
        h->store->inner = rls_store_memory_new_shared(&h->loop, tab);
        rls_memtab_release(tab);
        h->use_redis = 0;
    } else if (use_redis) {
        rls_redis_opts_t o = {.host = "127.0.0.1", .timeout_ms = 1000,
                              .grace_ms = 1000};
        if (use_redis == 2) {
            /* The module, where the test's environment names it. */
            char *mod[] = {"--loadmodule", getenv("RLT_MODULE_SO"), NULL};
            assert_non_null(mod[1]);
            assert_int_equal(rlt_redis_start_with(&h->redis, mod), 0);
        } else {
            assert_int_equal(rlt_redis_start(&h->redis), 0);
        }
        track(&h->redis);
        o.port = h->redis.port;
        h->store->inner = rls_store_redis_new(&h->loop, &o);
        assert_non_null(h->store->inner);
        /* wait (bounded) until connected */
        uint64_t deadline = rlt_mono_ms() + 5000;
        while (!h->store->inner->v->up(h->store->inner) &&
               rlt_mono_ms() < deadline)
            uv_run(&h->loop, UV_RUN_ONCE);
        assert_true(h->store->inner->v->up(h->store->inner));
        assert_int_equal(h->store->inner->stats.redis_module, use_redis == 2);
    } else {
        h->store->inner = rls_store_memory_new(&h->loop);
    }
    assert_non_null(h->store->inner);
    rls_batcher_init(&h->b, &h->store->base, NULL, "rl:", 3, max_reqs, 1000,
                     fail_open);
}

rls_policy_t *policy(const char *yaml)
{
    rls_policy_t *p = NULL;
    rls_diag_t d;

    if (rls_policy_build_buf(NULL, 0, "test.yaml", yaml, strlen(yaml), 100, &p,
                             &d) != RL_OK)
        fail_msg("policy: %s", d.n > 0 ? d.msg[0] : "out of memory");
    return p;
}

/* As in the server: the batch being filled goes out before a swap. */
static void before_change(void *arg)
{
    h_t *h = arg;
    rls_batcher_flush(&h->b);
}

/* Puts the rules of `yaml` in force, through a runtime the batcher holds
 * (before the first request). */
void h_rules(h_t *h, const char *yaml)
{
    assert_int_equal(rls_runtime_init(&h->rt, policy(yaml), 100), RL_OK);
    h->rt.before_change = before_change;
    h->rt.arg = h;
    h->have_rt = 1;
    h->b.rt = &h->rt;
}

static size_t h_spec(h_t *h, uint64_t now, const char *key, uint32_t cost,
                     const rls_spec_t *spec)
{
    size_t i = h->n++;

    assert_true(i < MAXR);
    /* the clock is read when a batch starts; keep one time per batch */
    h->store->now = now;
    assert_int_equal(
        rls_batcher_add(&h->b, respond, h, i, key, strlen(key), cost, spec),
        RL_OK);
    return i;
}

/* Adds an inline-limit request at the scripted time `now`; its id is its
 * slot. */
size_t h_add(h_t *h, uint64_t now, const char *key, uint64_t limit,
             uint32_t window, uint32_t cost)
{
    rls_spec_t spec;

    memset(&spec, 0, sizeof(spec));
    spec.rule = NULL;
    spec.stats = h->have_rt ? &h->rt.inline_stats : &h->istats;
    spec.mode = RLS_MODE_ENFORCE;
    spec.limits.n = 1;
    spec.limits.w[0].limit = limit;
    spec.limits.w[0].window_s = window;
    spec.scale = 1.0;
    return h_spec(h, now, key, cost, &spec);
}

/* Resolves a request naming `rule` through the runtime. */
void resolve(h_t *h, const char *key, const char *rule, uint32_t cost,
             rls_spec_t *spec)
{
    (void)cost;
    assert_int_equal(
        rls_runtime_resolve(&h->rt, rule, strlen(rule), key, strlen(key), spec),
        RL_OK);
}

/* Adds a request naming `rule` at the scripted time `now`. */
size_t h_rule(h_t *h, uint64_t now, const char *key, const char *rule,
              uint32_t cost)
{
    rls_spec_t spec;

    resolve(h, key, rule, cost, &spec);
    return h_spec(h, now, key, cost, &spec);
}

size_t h_group(h_t *h, uint64_t now, size_t n, const char *const *keys,
               const char *const *rules, uint32_t cost)
{
    rls_spec_t spec[RLS_GROUP_MAX];
    rls_level_spec_t lv[RLS_GROUP_MAX];
    size_t i, id = h->n++;
    int mode = RLS_MODE_ENFORCE;

    assert_true(id < MAXR && n <= RLS_GROUP_MAX);
    for (i = 0; i < n; i++) {
        resolve(h, keys[i], rules[i], cost, &spec[i]);
        spec[i].quota = 0;
        if (spec[i].mode == RLS_MODE_SHADOW)
            mode = RLS_MODE_SHADOW;
        lv[i].key = keys[i];
        lv[i].key_len = strlen(keys[i]);
        lv[i].spec = &spec[i];
        lv[i].index = (uint32_t)i;
    }
    h->store->now = now;
    assert_int_equal(
        rls_batcher_add_group(&h->b, respond, h, id, lv, n, cost, mode), RL_OK);
    return id;
}

/* The counters of a rule ("" for inline limits). */
const rls_rule_stats_t *rule_stats(h_t *h, const char *rule)
{
    rls_spec_t spec;

    if (rule[0] == '\0')
        return &h->rt.inline_stats;
    resolve(h, "k", rule, 1, &spec);
    return spec.stats;
}

/* The quota-fit counters of one window length of a rule, or NULL. */
const rls_win_stats_t *win_stats(const rls_rule_stats_t *st, uint32_t window_s)
{
    uint32_t i;

    for (i = 0; i < st->nwin; i++)
        if (st->win[i].window_s == window_s)
            return &st->win[i];
    return NULL;
}

/* Runs the loop until every request so far is answered. */
void h_wait(h_t *h)
{
    uint64_t deadline = rlt_mono_ms() + 5000;

    while (h->answered < h->n && rlt_mono_ms() < deadline)
        uv_run(&h->loop, UV_RUN_ONCE);
    assert_int_equal(h->answered, h->n);
}

/* Submits and waits until every request so far is answered. */
void h_flush(h_t *h)
{
    rls_batcher_flush(&h->b);
    h_wait(h);
}

/* Passes the batches held so far to the store, in the order submitted, and
 * stops holding. */
void h_release(h_t *h)
{
    clock_store_t *w = h->store;
    size_t i, n = w->nheld;

    w->hold = 0;
    w->nheld = 0;
    for (i = 0; i < n; i++)
        w->inner->v->submit(w->inner, w->held[i].ops, w->held[i].n,
                            w->held[i].cb, w->held[i].data);
}

void h_close(h_t *h)
{
    size_t i;

    assert_int_equal(h->store->nheld, 0);
    for (i = 0; i < h->n; i++)
        assert_int_equal(h->answers[i], 1); /* exactly one response each */
    assert_int_equal(h->b.stats.replay_mismatch, 0);
    rls_batcher_free(&h->b);
    if (h->have_rt)
        rls_runtime_free(&h->rt);
    h->store->base.v->close(&h->store->base, NULL, NULL);
    uv_run(&h->loop, UV_RUN_DEFAULT);
    assert_int_equal(uv_loop_close(&h->loop), 0);
    if (h->use_redis) {
        rlt_redis_stop(&h->redis);
        untrack(&h->redis);
    }
}

/* A day from now, on a day boundary: every window size used divides it.
 * In the future, so Redis never sees an expiry already past. */
uint64_t base_ms(void)
{
    uint64_t day = 86400000;
    struct timespec ts;

    clock_gettime(CLOCK_REALTIME, &ts);
    return ((uint64_t)ts.tv_sec * 1000 / day + 2) * day;
}

/* The decision fields of request i. */
void assert_result(const h_t *h, size_t i, int code, uint64_t limit,
                   uint64_t used, uint64_t remaining, uint64_t reset_after_ms,
                   uint32_t window_s)
{
    const rl_result_t *r = &h->res[i];

    assert_int_equal(r->code, code);
    assert_int_equal(r->limit, limit);
    assert_int_equal(r->used, used);
    assert_int_equal(r->remaining, remaining);
    assert_int_equal(r->reset_after_ms, reset_after_ms);
    assert_int_equal(r->retry_after_ms,
                     code == RL_CODE_OVER_LIMIT ? reset_after_ms : 0);
    assert_int_equal(r->window_s, window_s);
    assert_int_equal(r->shadow_refused, 0);
    assert_string_equal(h->err[i], "");
}

/* A deterministic sequence (a 64-bit LCG), the same on every run. */
uint32_t rnd(uint64_t *s)
{
    *s = *s * UINT64_C(6364136223846793005) + UINT64_C(1442695040888963407);
    return (uint32_t)(*s >> 33);
}
