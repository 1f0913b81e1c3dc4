/* The batcher against both stores, on a scripted clock.
 *
 * A wrapper store passes batches to the real store (memory or a private
 * redis-server) but answers now_ms() from the script, so a test can stand
 * exactly on a window boundary; it can also hold batches back, so a test
 * can keep some in flight. The same script run through both stores must
 * give identical decisions, field by field. Requests are inline limits
 * (an rls_spec_t built here) or named rules resolved through a runtime
 * whose policy comes from rls_policy_build_buf. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <uv.h>

#include "rl_error.h"
#include "rl_window.h"
#include "batch.h"
#include "policy/rules.h"
#include "policy/runtime.h"
#include "store/memory.h"
#include "store/redis.h"
#include "store/store.h"
#include "rlt.h"

/* ---- a counting allocator (not under ASan, which owns malloc) ---- */

#if !defined(__SANITIZE_ADDRESS__) && !defined(__has_feature)
#define COUNT_ALLOCS 1
#elif defined(__has_feature)
#if !__has_feature(address_sanitizer)
#define COUNT_ALLOCS 1
#endif
#endif

#ifdef COUNT_ALLOCS
extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
static uint64_t n_allocs;
static uint64_t fail_alloc; /* this allocation (n_allocs) fails; 0: none */

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

/* A batch the wrapper holds back instead of passing on. */
typedef struct {
    rls_op_t *ops;
    size_t n;
    rls_store_cb cb;
    void *data;
} held_t;

#define HELD_MAX 64

typedef struct {
    rls_store_t base;
    rls_store_t *inner;
    uint64_t now;
    void (*done)(void *);
    void *done_arg;
    uint64_t expiry[64]; /* expire_at_ms of the first ops' first window */
    size_t nexpiry;
    int hold;            /* 1: keep submitted batches in held[] */
    held_t held[HELD_MAX];
    size_t nheld;
} clock_store_t;

static void w_submit(rls_store_t *s, rls_op_t *ops, size_t n, rls_store_cb cb,
                     void *data)
{
    clock_store_t *w = (clock_store_t *)s;
    size_t i;

    for (i = 0; i < n && w->nexpiry < 64; i++)
        w->expiry[w->nexpiry++] = ops[i].win[0].expire_at_ms;
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

#define MAXR 16384

typedef struct {
    uv_loop_t loop;
    rlt_redis_t redis;
    int use_redis;
    clock_store_t *store;
    rls_batcher_t b;
    rls_runtime_t rt;  /* named rules; set up by h_rules */
    int have_rt;
    rls_rule_stats_t istats; /* inline limits without a runtime */
    rl_result_t res[MAXR];
    char err[MAXR][160];
    int answers[MAXR]; /* responses per request slot */
    size_t order[MAXR]; /* request slots in the order answered */
    size_t n;          /* requests added */
    size_t answered;
} h_t;

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

static int teardown(void **state)
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

static void h_open(h_t *h, int use_redis, size_t max_reqs, int fail_open)
{
    memset(h, 0, sizeof(*h));
    assert_int_equal(uv_loop_init(&h->loop), 0);
    h->use_redis = use_redis;
    h->store = calloc(1, sizeof(*h->store));
    assert_non_null(h->store);
    h->store->base.v = &clock_vtbl;
    if (use_redis) {
        rls_redis_opts_t o = {"127.0.0.1", 0, NULL, 0, 1000, 1000};
        assert_int_equal(rlt_redis_start(&h->redis), 0);
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
    } else {
        h->store->inner = rls_store_memory_new(&h->loop);
    }
    assert_non_null(h->store->inner);
    rls_batcher_init(&h->b, &h->store->base, NULL, "rl:", 3,
                     max_reqs, 1000, fail_open);
}

static rls_policy_t *policy(const char *yaml)
{
    rls_policy_t *p = NULL;
    rls_diag_t d;

    if (rls_policy_build_buf(NULL, 0, "test.yaml", yaml, strlen(yaml), 100,
                             &p, &d) != RL_OK)
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
static void h_rules(h_t *h, const char *yaml)
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
    assert_int_equal(rls_batcher_add(&h->b, respond, h, i, key, strlen(key),
                                     cost, spec),
                     RL_OK);
    return i;
}

/* Adds an inline-limit request at the scripted time `now`; its id is its
 * slot. */
static size_t h_add(h_t *h, uint64_t now, const char *key, uint64_t limit,
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
static void resolve(h_t *h, const char *key, const char *rule, uint32_t cost,
                    rls_spec_t *spec)
{
    (void)cost;
    assert_int_equal(rls_runtime_resolve(&h->rt, rule, strlen(rule), key,
                                         strlen(key), spec),
                     RL_OK);
}

/* Adds a request naming `rule` at the scripted time `now`. */
static size_t h_rule(h_t *h, uint64_t now, const char *key, const char *rule,
                     uint32_t cost)
{
    rls_spec_t spec;

    resolve(h, key, rule, cost, &spec);
    return h_spec(h, now, key, cost, &spec);
}

/* The counters of a rule ("" for inline limits). */
static const rls_rule_stats_t *rule_stats(h_t *h, const char *rule)
{
    rls_spec_t spec;

    if (rule[0] == '\0')
        return &h->rt.inline_stats;
    resolve(h, "k", rule, 1, &spec);
    return spec.stats;
}

/* The quota-fit counters of one window length of a rule, or NULL. */
static const rls_win_stats_t *win_stats(const rls_rule_stats_t *st,
                                        uint32_t window_s)
{
    uint32_t i;

    for (i = 0; i < st->nwin; i++)
        if (st->win[i].window_s == window_s)
            return &st->win[i];
    return NULL;
}

/* Runs the loop until every request so far is answered. */
static void h_wait(h_t *h)
{
    uint64_t deadline = rlt_mono_ms() + 5000;

    while (h->answered < h->n && rlt_mono_ms() < deadline)
        uv_run(&h->loop, UV_RUN_ONCE);
    assert_int_equal(h->answered, h->n);
}

/* Submits and waits until every request so far is answered. */
static void h_flush(h_t *h)
{
    rls_batcher_flush(&h->b);
    h_wait(h);
}

/* Passes the batches held so far to the store, in the order submitted, and
 * stops holding. */
static void h_release(h_t *h)
{
    clock_store_t *w = h->store;
    size_t i, n = w->nheld;

    w->hold = 0;
    w->nheld = 0;
    for (i = 0; i < n; i++)
        w->inner->v->submit(w->inner, w->held[i].ops, w->held[i].n,
                            w->held[i].cb, w->held[i].data);
}

static void h_close(h_t *h)
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
static uint64_t base_ms(void)
{
    uint64_t day = 86400000;
    struct timespec ts;

    clock_gettime(CLOCK_REALTIME, &ts);
    return ((uint64_t)ts.tv_sec * 1000 / day + 2) * day;
}

/* The decision fields of request i. */
static void assert_result(const h_t *h, size_t i, int code, uint64_t limit,
                          uint64_t used, uint64_t remaining,
                          uint64_t reset_after_ms, uint32_t window_s)
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
static uint32_t rnd(uint64_t *s)
{
    *s = *s * UINT64_C(6364136223846793005) + UINT64_C(1442695040888963407);
    return (uint32_t)(*s >> 33);
}

/* ---- scripted scenarios, each run on a store ---- */

/* The textbook example, 5 per 60 s: the sixth is refused with retry_after =
 * time left, and (refusals consume nothing) used stays at 5. */
static void scenario_five_per_minute(h_t *h, uint64_t B)
{
    size_t i, first = h->n;

    for (i = 0; i < 6; i++)
        h_add(h, B + 20000, "user:fpm", 5, 60, 1);
    h_flush(h);
    for (i = 0; i < 6; i++)
        assert_result(h, first + i, i < 5 ? RL_CODE_OK : RL_CODE_OVER_LIMIT,
                      5, i < 5 ? i + 1 : 5, i < 5 ? 4 - i : 0, 40000, 60);
}

/* Five at the last millisecond of a window, five at the first of the next:
 * all allowed (the 2x boundary burst of the fixed-window algorithm). */
static void scenario_boundary(h_t *h, uint64_t B)
{
    size_t i, first = h->n;

    for (i = 0; i < 5; i++)
        h_add(h, B - 1, "user:edge", 5, 60, 1);
    h_flush(h);
    for (i = 0; i < 5; i++)
        h_add(h, B, "user:edge", 5, 60, 1);
    h_flush(h);
    for (i = 0; i < 10; i++)
        assert_result(h, first + i, RL_CODE_OK, 5, i % 5 + 1, 4 - i % 5,
                      i < 5 ? 1 : 60000, 60);
    /* and the sixth in the new window is refused */
    i = h_add(h, B + 1, "user:edge", 5, 60, 1);
    h_flush(h);
    assert_result(h, i, RL_CODE_OVER_LIMIT, 5, 5, 0, 59999, 60);
}

/* Costs add up: limit 10, cost 3: 3, 6, 9 allowed, the fourth refused at
 * 9 (it consumes nothing); then a cost of 1 still fits (10). Before the
 * policy work the refused 3 counted and the cost of 1 was refused at 13. */
static void scenario_cost(h_t *h, uint64_t B)
{
    size_t i, first = h->n;

    for (i = 0; i < 4; i++)
        h_add(h, B + 5, "user:cost", 10, 1, 3);
    h_add(h, B + 5, "user:cost", 10, 1, 1);
    h_add(h, B + 5, "user:cost", 10, 1, 1);
    h_flush(h);
    for (i = 0; i < 4; i++)
        assert_result(h, first + i, i < 3 ? RL_CODE_OK : RL_CODE_OVER_LIMIT,
                      10, i < 3 ? 3 * (i + 1) : 9, i < 3 ? 7 - 3 * i : 1, 995,
                      1);
    assert_result(h, first + 4, RL_CODE_OK, 10, 10, 0, 995, 1);
    assert_result(h, first + 5, RL_CODE_OVER_LIMIT, 10, 10, 0, 995, 1);
}

/* 1,000 requests for one key in one batch, limit 300: exactly 300 allowed,
 * and they are the first 300 in arrival order. Coalesced into one op. */
static void scenario_coalesce(h_t *h, uint64_t B)
{
    size_t i, first = h->n;
    uint64_t coalesced = h->b.stats.coalesced;

    for (i = 0; i < 1000; i++)
        h_add(h, B + 100, "user:hot", 300, 60, 1);
    h_flush(h);
    /* every request but the first of each batch shares an earlier op */
    assert_int_equal(h->b.stats.coalesced - coalesced,
                     1000 - (1000 + h->b.max_reqs - 1) / h->b.max_reqs);
    for (i = 0; i < 1000; i++)
        assert_result(h, first + i, i < 300 ? RL_CODE_OK : RL_CODE_OVER_LIMIT,
                      300, i < 300 ? i + 1 : 300, i < 300 ? 299 - i : 0,
                      59900, 60);
}

/* Interleaved keys, windows and limits in one batch; mixed with the same
 * caller under two window sizes (separate counters). */
static void scenario_mixed(h_t *h, uint64_t B)
{
    static const char *keys[] = {"a", "b", "{c}", "d:e", "\xc3\xa9"};
    size_t i;

    for (i = 0; i < 300; i++)
        h_add(h, B + 7000 + (i / 100) * 60000, keys[i % 5], 20 + i % 3,
              i % 2 ? 60 : 3600, (uint32_t)(1 + i % 4));
    h_flush(h);
}

static void run_all(h_t *h)
{
    uint64_t B = base_ms();

    scenario_five_per_minute(h, B);
    scenario_boundary(h, B);
    scenario_cost(h, B);
    scenario_coalesce(h, B);
    scenario_mixed(h, B);
}

/* Runs a scenario on a fresh harness over the memory store (0) or Redis
 * (1). */
static void on_store(int redis, void (*scenario)(h_t *h))
{
    h_t *h = calloc(1, sizeof(*h));

    h_open(h, redis, 1024, 1);
    scenario(h);
    h_close(h);
    free(h);
}

static void test_memory_store(void **state)
{
    (void)state;
    on_store(0, run_all);
}

static void test_redis_store(void **state)
{
    (void)state;
    on_store(1, run_all);
}

/* Every decision field of the two harnesses' answers. */
static void assert_same_answers(const h_t *m, const h_t *r)
{
    size_t i;

    assert_int_equal(m->n, r->n);
    for (i = 0; i < m->n; i++) {
        const rl_result_t *a = &m->res[i], *b = &r->res[i];

        if (a->code != b->code || a->limit != b->limit ||
            a->used != b->used || a->remaining != b->remaining ||
            a->reset_after_ms != b->reset_after_ms ||
            a->retry_after_ms != b->retry_after_ms ||
            a->window_s != b->window_s ||
            a->shadow_refused != b->shadow_refused ||
            strcmp(m->err[i], r->err[i]) != 0)
            fail_msg("request %zu: memory code=%d limit=%llu used=%llu "
                     "remaining=%llu reset=%llu retry=%llu window=%u "
                     "shadow=%d err='%s'; redis code=%d limit=%llu "
                     "used=%llu remaining=%llu reset=%llu retry=%llu "
                     "window=%u shadow=%d err='%s'",
                     i, a->code, (unsigned long long)a->limit,
                     (unsigned long long)a->used,
                     (unsigned long long)a->remaining,
                     (unsigned long long)a->reset_after_ms,
                     (unsigned long long)a->retry_after_ms, a->window_s,
                     a->shadow_refused, m->err[i], b->code,
                     (unsigned long long)b->limit,
                     (unsigned long long)b->used,
                     (unsigned long long)b->remaining,
                     (unsigned long long)b->reset_after_ms,
                     (unsigned long long)b->retry_after_ms, b->window_s,
                     b->shadow_refused, r->err[i]);
    }
}

/* The same script through both stores gives the same answers, field by
 * field, with batches capped small so the script spans many batches. */
static void test_stores_agree(void **state)
{
    h_t *m = calloc(1, sizeof(*m)), *r = calloc(1, sizeof(*r));

    (void)state;
    h_open(m, 0, 7, 1);
    h_open(r, 1, 7, 1);
    run_all(m);
    run_all(r);
    assert_same_answers(m, r);
    h_close(m);
    h_close(r);
    free(m);
    free(r);
}

/* ---- several windows per rule, both stores, field by field ---- */

static const char agree_yaml[] =
    "rules:\n"
    "  api:\n"
    "    limits: [33/1m, 2000/1h]\n"
    "  burst:\n"
    "    limits: [4/1s, 10/10s, 25/1m]\n"
    "  tiny:\n"
    "    limits: [3/1s]\n"
    "    overrides:\n"
    "      \"c3\": [5/1s, 7/1m]\n"
    "  sh:\n"
    "    limits: [2/1s, 5/10s]\n"
    "    mode: shadow\n";

static const char *const agree_rules[] = {"api", "burst", "tiny", "sh", ""};

/* 400 steps a quarter second apart (crossing second, 10 s and minute
 * boundaries), each of 1 to 12 requests from six callers, on four rules
 * (one in shadow mode) and two inline limits, costs 1 to 3, in batches of
 * at most 7 (set by the caller). */
static void script_agree(h_t *h, uint64_t B)
{
    uint64_t seed = 20240607;
    size_t step, k;
    char key[16];

    for (step = 0; step < 400; step++) {
        uint64_t t = B + 55000 + step * 250 + step % 7;
        uint32_t nreq = 1 + rnd(&seed) % 12;

        for (k = 0; k < nreq; k++) {
            uint32_t caller = rnd(&seed) % 6, kind = rnd(&seed) % 6;
            uint32_t cost = 1 + rnd(&seed) % 3;

            snprintf(key, sizeof(key), "c%u", caller);
            if (kind < 4)
                h_rule(h, t, key, agree_rules[kind], cost);
            else if (kind == 4)
                h_add(h, t, key, 6, 10, cost);
            else
                h_add(h, t, key, 20, 60, cost);
        }
        h_flush(h);
    }
}

static void assert_same_stats(const rls_rule_stats_t *a,
                              const rls_rule_stats_t *b)
{
    uint32_t i;

    assert_int_equal(a->allowed, b->allowed);
    assert_int_equal(a->refused, b->refused);
    assert_int_equal(a->shadow_refused, b->shadow_refused);
    assert_int_equal(a->nwin, b->nwin);
    for (i = 0; i <= RLS_STATS_WINDOWS; i++) {
        assert_int_equal(a->win[i].window_s, b->win[i].window_s);
        assert_int_equal(a->win[i].started, b->win[i].started);
        assert_int_equal(a->win[i].reached[0], b->win[i].reached[0]);
        assert_int_equal(a->win[i].reached[1], b->win[i].reached[1]);
        assert_int_equal(a->win[i].reached[2], b->win[i].reached[2]);
    }
}

static void test_stores_agree_rules(void **state)
{
    h_t *m = calloc(1, sizeof(*m)), *r = calloc(1, sizeof(*r));
    uint64_t B = base_ms();
    size_t i, k, ok[5] = {0}, refused[5] = {0};

    (void)state;
    h_open(m, 0, 7, 1);
    h_open(r, 1, 7, 1);
    h_rules(m, agree_yaml);
    h_rules(r, agree_yaml);
    script_agree(m, B);
    script_agree(r, B);
    assert_same_answers(m, r);
    for (k = 0; k < 5; k++)
        assert_same_stats(rule_stats(m, agree_rules[k]),
                          rule_stats(r, agree_rules[k]));

    /* Not a trivial script: requests shared ops, and every rule both
     * allowed and refused (or shadow-refused); several windows decided. */
    assert_true(m->b.stats.coalesced > 100);
    for (k = 0; k < 5; k++) {
        const rls_rule_stats_t *st = rule_stats(m, agree_rules[k]);
        ok[k] = st->allowed;
        refused[k] = st->refused + st->shadow_refused;
        assert_true(ok[k] > 50);
        assert_true(refused[k] > 20);
    }
    assert_int_equal(rule_stats(m, "sh")->refused, 0);
    {
        size_t by_window[3] = {0}; /* deciding window 1 s, 10 s, 60 s */
        for (i = 0; i < m->n; i++) {
            uint32_t w = m->res[i].window_s;
            by_window[w == 1 ? 0 : w == 10 ? 1 : 2] +=
                m->res[i].code == RL_CODE_OVER_LIMIT;
        }
        assert_true(by_window[0] > 0 && by_window[1] > 0 && by_window[2] > 0);
    }
    h_close(m);
    h_close(r);
    free(m);
    free(r);
}

/* The refusal cache changes no decision: the rules script, with the cache
 * on and off, gives the same answers field by field, on each store; and
 * with it on, some answers came without a store call. */
static void test_refusal_cache_changes_nothing(void **state)
{
    int redis;

    (void)state;
    for (redis = 0; redis < 2; redis++) {
        h_t *off = calloc(1, sizeof(*off)), *on = calloc(1, sizeof(*on));
        uint64_t B = base_ms();

        h_open(off, redis, 7, 1);
        h_open(on, redis, 7, 1);
        assert_int_equal(rls_refusals_init(&on->b.refusals, 64), RL_OK);
        h_rules(off, agree_yaml);
        h_rules(on, agree_yaml);
        script_agree(off, B);
        script_agree(on, B);
        assert_same_answers(off, on);
        assert_int_equal(off->b.refusals.stats.hits, 0);
        assert_true(on->b.refusals.stats.hits > 50);
        print_message("%s store: %llu of %zu requests refused without a "
                      "store call\n",
                      redis ? "redis" : "memory",
                      (unsigned long long)on->b.refusals.stats.hits, on->n);
        h_close(off);
        h_close(on);
        free(off);
        free(on);
    }
}


/* ---- 33 per minute and 2000 per hour ---- */

static const char api_yaml[] = "rules:\n"
                               "  api:\n"
                               "    limits: [33/1m, 2000/1h]\n";

/* Scripted over three hours from B (an hour boundary):
 *
 * hour 0: 50 requests a minute for 60 minutes. Each minute the first 33
 * are allowed and the rest refused by the minute window; refusals consume
 * nothing, so the hour reaches only 1,980 and never refuses (had they
 * counted, it would have refused from minute 40 on). After each minute
 * rolls over, the caller continues.
 *
 * hour 1: the operator raises the minute to 199 for ten minutes (1,990 in
 * the hour) and swaps 33/1m back: ten more fit, the hour decides; then it
 * refuses with room in the minute, and again in later minutes.
 *
 * hour 2: a new hour: 33 allowed, the 34th refused by the minute. */
static void scenario_minute_hour(h_t *h)
{
    const uint64_t B = base_ms(), H = 3600000;
    const rls_rule_stats_t *st;
    const rls_win_stats_t *ws;
    size_t slot[200], other[5], m, k;
    uint64_t t;

    h_rules(h, api_yaml);
    for (m = 0; m < 60; m++) {
        t = B + m * 60000 + 1000;
        /* two batches a minute, and another caller in them */
        for (k = 0; k < 50; k++) {
            slot[k] = h_rule(h, t, "user:mh", "api", 1);
            if (k % 10 == 0)
                other[k / 10] = h_rule(h, t, "user:other", "api", 1);
            if (k == 19)
                h_flush(h);
        }
        h_flush(h);
        for (k = 0; k < 50; k++) {
            if (k < 33)
                assert_result(h, slot[k], RL_CODE_OK, 33, k + 1, 32 - k,
                              59000, 60);
            else
                assert_result(h, slot[k], RL_CODE_OVER_LIMIT, 33, 33, 0,
                              59000, 60);
        }
        for (k = 0; k < 5; k++)
            assert_result(h, other[k], RL_CODE_OK, 33, k + 1, 32 - k, 59000,
                          60);
    }

    /* hour 1: 10 minutes of 199 */
    assert_int_equal(
        rls_runtime_set_policy(&h->rt, policy("rules:\n"
                                              "  api:\n"
                                              "    limits: [199/1m, "
                                              "2000/1h]\n")),
        RL_OK);
    for (m = 0; m < 10; m++) {
        t = B + H + m * 60000 + 500;
        for (k = 0; k < 199; k++)
            slot[k] = h_rule(h, t, "user:mh", "api", 1);
        h_flush(h);
        for (k = 0; k < 199; k++)
            assert_result(h, slot[k], RL_CODE_OK, 199, k + 1, 198 - k, 59500,
                          60);
    }
    /* back to 33/1m: 10 fit the hour, which decides; then it refuses with
     * room left in the minute */
    assert_int_equal(rls_runtime_set_policy(&h->rt, policy(api_yaml)), RL_OK);
    t = B + H + 10 * 60000 + 2000;
    for (k = 0; k < 15; k++)
        slot[k] = h_rule(h, t, "user:mh", "api", 1);
    h_flush(h);
    for (k = 0; k < 15; k++) {
        if (k < 10)
            assert_result(h, slot[k], RL_CODE_OK, 2000, 1991 + k, 9 - k,
                          H - 602000, 3600);
        else
            assert_result(h, slot[k], RL_CODE_OVER_LIMIT, 2000, 2000, 0,
                          H - 602000, 3600);
    }
    /* later minutes: the hour refuses from their first request on */
    for (m = 11; m < 60; m += m == 11 ? 19 : 29) {
        t = B + H + m * 60000;
        for (k = 0; k < 3; k++)
            slot[k] = h_rule(h, t, "user:mh", "api", 1);
        h_flush(h);
        for (k = 0; k < 3; k++)
            assert_result(h, slot[k], RL_CODE_OVER_LIMIT, 2000, 2000, 0,
                          H - m * 60000, 3600);
    }

    /* hour 2: a fresh hour; the minute decides again */
    t = B + 2 * H + 30000;
    for (k = 0; k < 34; k++)
        slot[k] = h_rule(h, t, "user:mh", "api", 1);
    h_flush(h);
    for (k = 0; k < 34; k++) {
        if (k < 33)
            assert_result(h, slot[k], RL_CODE_OK, 33, k + 1, 32 - k, 30000,
                          60);
        else
            assert_result(h, slot[k], RL_CODE_OVER_LIMIT, 33, 33, 0, 30000,
                          60);
    }

    /* The rule's counters, across the swaps (kept by name). */
    st = rule_stats(h, "api");
    assert_int_equal(st->allowed, 60 * (33 + 5) + 1990 + 10 + 33);
    assert_int_equal(st->refused, 60 * 17 + 5 + 3 * 3 + 1);
    assert_int_equal(st->shadow_refused, 0);
    /* minutes started: 60 + 60 (hour 0, two callers), 10 + 1 (hour 1: the
     * refused minutes consumed nothing), 1 (hour 2); reached 50/80/100 %:
     * user:mh's full minutes (60 + 10 + 1) */
    ws = win_stats(st, 60);
    assert_non_null(ws);
    assert_int_equal(ws->started, 132);
    assert_int_equal(ws->reached[0], 71);
    assert_int_equal(ws->reached[1], 71);
    assert_int_equal(ws->reached[2], 71);
    /* hours started: 2 + 1 + 1; hour 0 reached 1,980 (50 and 80 %) for
     * user:mh, hour 1 all 2,000 */
    ws = win_stats(st, 3600);
    assert_non_null(ws);
    assert_int_equal(ws->started, 4);
    assert_int_equal(ws->reached[0], 2);
    assert_int_equal(ws->reached[1], 2);
    assert_int_equal(ws->reached[2], 1);
}

static void test_minute_hour_memory(void **state)
{
    (void)state;
    on_store(0, scenario_minute_hour);
}

static void test_minute_hour_redis(void **state)
{
    (void)state;
    on_store(1, scenario_minute_hour);
}

/* ---- shadow mode against a model ---- */

static const char shadow_yaml[] = "rules:\n"
                                  "  enf:\n"
                                  "    limits: [3/1m, 5/1h]\n"
                                  "  shd:\n"
                                  "    limits: [3/1m, 5/1h]\n"
                                  "    mode: shadow\n";

/* The model: one counter per (caller, window length, window index). */
typedef struct {
    uint32_t caller, window_s;
    uint64_t index, count;
} mcount_t;

typedef struct {
    mcount_t c[256];
    size_t n;
    uint64_t allowed, refused;
} model_t;

static mcount_t *model_get(model_t *mo, uint32_t caller, uint32_t window_s,
                           uint64_t index)
{
    size_t i;

    for (i = 0; i < mo->n; i++)
        if (mo->c[i].caller == caller && mo->c[i].window_s == window_s &&
            mo->c[i].index == index)
            return &mo->c[i];
    assert_true(mo->n < 256);
    mo->c[mo->n] = (mcount_t){caller, window_s, index, 0};
    return &mo->c[mo->n++];
}

/* Check, then consume: admitted only when both windows have room. */
static int model_admit(model_t *mo, uint32_t caller, uint64_t now,
                       uint32_t cost)
{
    mcount_t *m = model_get(mo, caller, 60, now / 60000);
    mcount_t *h = model_get(mo, caller, 3600, now / 3600000);

    if (m->count + cost > 3 || h->count + cost > 5) {
        mo->refused++;
        return 0;
    }
    m->count += cost;
    h->count += cost;
    mo->allowed++;
    return 1;
}

/* The model's quota-fit counts for one window length and its limit. */
static void model_fit(const model_t *mo, uint32_t window_s, uint64_t limit,
                      uint64_t *nstart, uint64_t reached[3])
{
    static const uint64_t pct[3] = {50, 80, 100};
    size_t i, k;

    *nstart = reached[0] = reached[1] = reached[2] = 0;
    for (i = 0; i < mo->n; i++) {
        if (mo->c[i].window_s != window_s || mo->c[i].count == 0)
            continue;
        (*nstart)++;
        for (k = 0; k < 3; k++)
            reached[k] += mo->c[i].count * 100 >= limit * pct[k];
    }
}

/* Each request goes to an enforced rule and to the same rule in shadow
 * mode (separate counters). The shadow rule decides and counts as enforce
 * would: same limit, used, remaining, reset and window; answered OK with
 * shadow_refused = 1 and no retry where enforce refused. Both rules'
 * counters and quota-fit counts equal the model's. */
static void test_shadow(void **state)
{
    h_t *h = calloc(1, sizeof(*h));
    const uint64_t B = base_ms();
    uint64_t seed = 7, nstart, reached[3];
    const rls_rule_stats_t *st[2];
    model_t *mo = calloc(1, sizeof(*mo));
    size_t step, k, j, enf[16], shd[16];
    char key[16];
    int expect[16], r;

    (void)state;
    assert_non_null(mo);
    h_open(h, 0, 5, 1);
    h_rules(h, shadow_yaml);
    /* minutes 0-5 of hour 0 and 0-2 of hour 1, a few steps a minute */
    for (step = 0; step < 36; step++) {
        uint64_t t = B + (step / 4 / 6) * 3600000 + (step / 4 % 6) * 60000 +
                     (step % 4) * 15000 + 7;
        uint32_t nreq = 1 + rnd(&seed) % 6;

        for (k = 0; k < nreq; k++) {
            uint32_t caller = rnd(&seed) % 3, cost = 1 + rnd(&seed) % 3;

            snprintf(key, sizeof(key), "u%u", caller);
            enf[k] = h_rule(h, t, key, "enf", cost);
            shd[k] = h_rule(h, t, key, "shd", cost);
            expect[k] = model_admit(mo, caller, t, cost);
        }
        h_flush(h);
        for (k = 0; k < nreq; k++) {
            const rl_result_t *e = &h->res[enf[k]], *s = &h->res[shd[k]];

            assert_int_equal(e->code,
                             expect[k] ? RL_CODE_OK : RL_CODE_OVER_LIMIT);
            assert_int_equal(e->shadow_refused, 0);
            assert_int_equal(s->code, RL_CODE_OK);
            assert_int_equal(s->shadow_refused, !expect[k]);
            assert_int_equal(s->retry_after_ms, 0);
            assert_int_equal(s->limit, e->limit);
            assert_int_equal(s->used, e->used);
            assert_int_equal(s->remaining, e->remaining);
            assert_int_equal(s->reset_after_ms, e->reset_after_ms);
            assert_int_equal(s->window_s, e->window_s);
            assert_string_equal(h->err[shd[k]], "");
        }
    }
    assert_true(mo->allowed > 10 && mo->refused > 10);

    st[0] = rule_stats(h, "enf");
    st[1] = rule_stats(h, "shd");
    assert_int_equal(st[0]->allowed, mo->allowed);
    assert_int_equal(st[0]->refused, mo->refused);
    assert_int_equal(st[0]->shadow_refused, 0);
    assert_int_equal(st[1]->allowed, mo->allowed);
    assert_int_equal(st[1]->refused, 0);
    assert_int_equal(st[1]->shadow_refused, mo->refused);
    for (r = 0; r < 2; r++) {
        for (j = 0; j < 2; j++) {
            uint32_t w = j ? 3600 : 60;
            const rls_win_stats_t *ws = win_stats(st[r], w);

            model_fit(mo, w, j ? 5 : 3, &nstart, reached);
            assert_true(nstart > 0 && reached[2] > 0);
            assert_non_null(ws);
            assert_int_equal(ws->started, nstart);
            assert_int_equal(ws->reached[0], reached[0]);
            assert_int_equal(ws->reached[1], reached[1]);
            assert_int_equal(ws->reached[2], reached[2]);
        }
    }
    h_close(h);
    free(h);
    free(mo);
}

/* ---- inline limits that disagree, in one batch ---- */

/* One caller and window under different inline limits share a counter; the
 * batcher cannot decide them in one op, so it submits what it has before
 * the request that changes the limit. Decided in arrival order: 2/60 twice
 * (1, 2), 3/60 (3), 2/60 again (refused at 3), 5/60 (4). Another caller
 * and another window of this one ride along, unaffected. */
static void scenario_inline_order(h_t *h)
{
    const uint64_t B = base_ms(), t = B + 10;
    uint64_t batches = h->b.stats.batches;
    size_t r[5], v[3], w;

    r[0] = h_add(h, t, "u", 2, 60, 1);
    v[0] = h_add(h, t, "v", 2, 60, 1);
    r[1] = h_add(h, t, "u", 2, 60, 1);
    w = h_add(h, t, "u", 1, 3600, 1);
    r[2] = h_add(h, t, "u", 3, 60, 1); /* submits r0, v0, r1, w */
    v[1] = h_add(h, t, "v", 2, 60, 1);
    r[3] = h_add(h, t, "u", 2, 60, 1); /* submits r2, v1 */
    r[4] = h_add(h, t, "u", 5, 60, 1); /* submits r3 */
    v[2] = h_add(h, t, "v", 2, 60, 1);
    h_flush(h);
    assert_int_equal(h->b.stats.batches - batches, 4);
    assert_result(h, r[0], RL_CODE_OK, 2, 1, 1, 59990, 60);
    assert_result(h, r[1], RL_CODE_OK, 2, 2, 0, 59990, 60);
    assert_result(h, r[2], RL_CODE_OK, 3, 3, 0, 59990, 60);
    assert_result(h, r[3], RL_CODE_OVER_LIMIT, 2, 3, 0, 59990, 60);
    assert_result(h, r[4], RL_CODE_OK, 5, 4, 1, 59990, 60);
    assert_result(h, v[0], RL_CODE_OK, 2, 1, 1, 59990, 60);
    assert_result(h, v[1], RL_CODE_OK, 2, 2, 0, 59990, 60);
    assert_result(h, v[2], RL_CODE_OVER_LIMIT, 2, 2, 0, 59990, 60);
    assert_result(h, w, RL_CODE_OK, 1, 1, 0, 3599990, 3600);
}

static void test_inline_order(void **state)
{
    int redis;

    (void)state;
    for (redis = 0; redis <= 1; redis++) {
        h_t *h = calloc(1, sizeof(*h));
        h_open(h, redis, 1024, 1);
        scenario_inline_order(h);
        h_close(h);
        free(h);
    }
}

/* ---- holding a batch under load (--batch-hold-us) ---- */

/* rls_batcher_tick with a clock of the test's: at low load a batch goes at
 * the first tick; once the arrival rate promises RLS_HOLD_GAIN more
 * requests within the hold, it waits until its first tick is hold_ns old
 * (telling how long is left), and never past that; a full batch and
 * flush_now go regardless; with a batch in flight nothing is held (the
 * in-flight bound already lets it fill); holds that gain nothing (bursty
 * arrivals) stop but for probes. */
static void test_hold(void **state)
{
    h_t *h = calloc(1, sizeof(*h));
    const uint64_t t = base_ms() + 10;
    const uint64_t MS = 1000000;
    uint64_t now = 1000 * MS, batches;
    size_t i, k;

    (void)state;
    h_open(h, 0, 8, 1);
    h_rules(h, "rules:\n  api:\n    limits: [1000000/1h]\n");
    h->b.hold_ns = 300000; /* 300 us */
    h->b.max_in_flight = 1; /* rl-server's default */

    /* Low load: 1 request per ms, 0.3 expected within a hold. */
    for (i = 0; i < 5; i++) {
        h_rule(h, t, "u", "api", 1);
        assert_int_equal(rls_batcher_tick(&h->b, now), 0);
        now += MS;
    }
    assert_int_equal(h->b.stats.batches, 5);
    assert_int_equal(h->b.stats.held, 0);

    /* High load: 40 requests per ms, 12 within a hold. The estimate is
     * smoothed over spans of 1 ms: a few spans to catch up. */
    for (k = 0; k < 6; k++) {
        for (i = 0; i < 5; i++)
            h_rule(h, t, "u", "api", 1);
        rls_batcher_flush_now(&h->b);
        h->b.stats.requests += 35; /* as if 35 more had come */
        now += MS;
        assert_int_equal(rls_batcher_tick(&h->b, now), 0);
    }
    assert_true(h->b.rate * 300000.0 >= RLS_HOLD_GAIN);
    batches = h->b.stats.batches;
    h_rule(h, t, "u", "api", 1);
    assert_int_equal(rls_batcher_tick(&h->b, now), 300000); /* all left */
    assert_int_equal(h->b.stats.batches, batches);
    h_rule(h, t, "v", "api", 1);
    assert_int_equal(rls_batcher_tick(&h->b, now + 100000), 200000);
    assert_int_equal(h->b.stats.batches, batches);
    assert_int_equal(h->b.stats.held, 2);
    /* Due: it goes, with both requests. */
    assert_int_equal(rls_batcher_tick(&h->b, now + 300000), 0);
    assert_int_equal(h->b.stats.batches, batches + 1);
    assert_int_equal(rls_batcher_tick(&h->b, now + 300001), 0);
    assert_int_equal(h->b.stats.batches, batches + 1); /* nothing left */

    /* A full batch goes at once, held or not. */
    now += 400000;
    for (i = 0; i < 8; i++)
        h_rule(h, t, "u", "api", 1);
    assert_int_equal(h->b.stats.batches, batches + 2);
    /* flush_now ignores the hold. */
    h_rule(h, t, "u", "api", 1);
    assert_true(rls_batcher_tick(&h->b, now) > 0);
    rls_batcher_flush_now(&h->b);
    assert_int_equal(h->b.stats.batches, batches + 3);

    /* A batch in flight: the next one fills meanwhile, never held. */
    h->store->hold = 1;
    h_rule(h, t, "u", "api", 1);
    rls_batcher_flush_now(&h->b);
    assert_int_equal(h->b.in_flight, 1);
    h_rule(h, t, "w", "api", 1);
    assert_int_equal(rls_batcher_tick(&h->b, now + 1000), 0);
    assert_int_equal(h->b.in_flight, 1);
    h_release(h);
    rls_batcher_flush_now(&h->b);
    h_wait(h);
    assert_int_equal(h->b.in_flight, 0);

    /* Bursts: held batches that nothing joins. Once the smoothed gain is
     * under RLS_HOLD_GAIN / 2, only every RLS_HOLD_PROBE-th batch is
     * held. */
    {
        unsigned held = 0, n;
        now += MS;
        for (n = 0; n < 40; n++) {
            uint64_t w;
            h->b.rate = 0.04; /* 40 a ms: the rate alone says hold */
            h_rule(h, t, "u", "api", 1);
            if ((w = rls_batcher_tick(&h->b, now)) > 0) {
                held++;
                assert_int_equal(rls_batcher_tick(&h->b, now + w), 0);
            }
            now += MS;
        }
        assert_true(h->b.hold_joined < RLS_HOLD_GAIN / 2.0);
        assert_true(held >= 40 / RLS_HOLD_PROBE);
        assert_true(held <= 6 + 40 / RLS_HOLD_PROBE);
    }

    /* Every request got exactly one answer, all allowed. */
    assert_int_equal(h->answered, h->n);
    for (i = 0; i < h->n; i++) {
        assert_int_equal(h->answers[i], 1);
        assert_int_equal(h->res[i].code, RL_CODE_OK);
    }
    h_close(h);
    free(h);
}

/* ---- a policy swap while batches are in flight ---- */

/* Batches hold the policy they were filled under: swapping it while they
 * are in flight leaves their rules valid (ASan would catch a read of a
 * freed rule) and they are answered under the old limits; the batch being
 * filled goes out before the swap. Later batches use the new rule on the
 * same counters. */
static void test_policy_swap_in_flight(void **state)
{
    h_t *h = calloc(1, sizeof(*h));
    const uint64_t B = base_ms(), t = B + 10;
    const rls_rule_t *old_rule;
    rls_spec_t spec;
    size_t first, i;

    (void)state;
    h_open(h, 0, 1024, 1);
    h_rules(h, "rules:\n  api:\n    limits: [2/1m]\n");
    resolve(h, "u", "api", 1, &spec);
    old_rule = spec.rule;

    h->store->hold = 1;
    first = h->n;
    for (i = 0; i < 4; i++)
        h_rule(h, t, "u", "api", 1);
    rls_batcher_flush(&h->b);   /* batch 1, in flight */
    h_rule(h, t, "u", "api", 1); /* batch 2, filling */
    assert_int_equal(h->b.in_flight, 1);

    assert_int_equal(
        rls_runtime_set_policy(&h->rt, policy("rules:\n  api:\n"
                                              "    limits: [5/1m, 100/1h]\n")),
        RL_OK);
    /* the swap sent the filling batch out first */
    assert_int_equal(h->b.in_flight, 2);
    assert_int_equal(h->store->nheld, 2);
    /* the old rule is still there: the batches hold its policy */
    assert_string_equal(old_rule->name, "api");
    assert_int_equal(old_rule->limits.n, 1);
    assert_int_equal(old_rule->limits.w[0].limit, 2);
    resolve(h, "u", "api", 1, &spec);
    assert_true(spec.rule != old_rule);
    assert_int_equal(spec.limits.n, 2);

    for (i = 0; i < 3; i++)
        h_rule(h, t, "u", "api", 1);
    rls_batcher_flush(&h->b); /* batch 3, new rule */
    assert_int_equal(h->b.in_flight, 3);
    assert_int_equal(h->answered, 0);

    h_release(h);
    h_wait(h);
    assert_int_equal(h->b.in_flight, 0);
    /* batches 1 and 2 under 2/1m */
    assert_result(h, first + 0, RL_CODE_OK, 2, 1, 1, 59990, 60);
    assert_result(h, first + 1, RL_CODE_OK, 2, 2, 0, 59990, 60);
    for (i = 2; i < 5; i++)
        assert_result(h, first + i, RL_CODE_OVER_LIMIT, 2, 2, 0, 59990, 60);
    /* batch 3 under 5/1m + 100/1h, on the same minute counter */
    for (i = 5; i < 8; i++)
        assert_result(h, first + i, RL_CODE_OK, 5, i - 2, 7 - i, 59990, 60);
    assert_int_equal(rule_stats(h, "api")->allowed, 5);
    assert_int_equal(rule_stats(h, "api")->refused, 3);
    h_close(h);
    free(h);
}

/* ---- spare batches ---- */

/* A store that stalls piles batches up in flight; once they come back at
 * most SPARE_MAX (8) are kept for reuse and the rest freed, and the next
 * stall reuses them. Every request is answered once, in order. */
static void test_spare_batches(void **state)
{
    h_t *h = calloc(1, sizeof(*h));
    const uint64_t B = base_ms();
    size_t i, round;

    (void)state;
    h_open(h, 0, 2, 1);
    for (round = 0; round < 2; round++) {
        size_t first = h->n, nb = round ? 10 : 20;

        h->store->hold = 1;
        for (i = 0; i < 2 * nb; i++)
            h_add(h, B + 10, "spare", 1000, 60, 1);
        assert_int_equal(h->b.in_flight, nb);
        assert_int_equal(h->store->nheld, nb);
        assert_int_equal(h->b.nfree, 0); /* round 1: all 8 reused */
        h_release(h);
        h_wait(h);
        assert_int_equal(h->b.in_flight, 0);
        assert_int_equal(h->b.nfree, 8);
        for (i = 0; i < 2 * nb; i++) {
            assert_int_equal(h->order[first + i], first + i);
            assert_result(h, first + i, RL_CODE_OK, 1000, first + i + 1,
                          999 - first - i, 59990, 60);
        }
    }
    h_close(h);
    free(h);
}

/* A store that reports a batch in parts (the cluster store, one part per
 * master): a part's requests are answered at once, the batch's callback
 * answers the rest, and every request exactly once. */
static void test_part_answers(void **state)
{
    h_t *h = calloc(1, sizeof(*h));
    const uint64_t B = base_ms();
    held_t *hb;
    uint32_t idx[1] = {0};

    (void)state;
    h_open(h, 0, 1024, 1);
    h->store->hold = 1;
    h_add(h, B + 10, "p1", 5, 60, 1);
    h_add(h, B + 10, "p1", 5, 60, 1);
    h_add(h, B + 10, "p2", 5, 60, 1);
    rls_batcher_flush(&h->b);
    assert_int_equal(h->store->nheld, 1);
    hb = &h->store->held[0];
    assert_int_equal(hb->n, 2); /* p1 (two requests), p2 */
    assert_non_null(h->store->base.part);
    /* p1's master answered: 3 counted before, both admitted. */
    hb->ops[0].admitted = 2;
    hb->ops[0].win[0].before = 3;
    hb->ops[0].err = 0;
    h->store->base.part(hb->data, hb->ops, idx, 1);
    assert_int_equal(h->answered, 2);
    assert_int_equal(h->answers[2], 0);
    assert_result(h, 0, RL_CODE_OK, 5, 4, 1, 59990, 60);
    assert_result(h, 1, RL_CODE_OK, 5, 5, 0, 59990, 60);
    /* Then p2's master failed: fail open, p1 not answered again. */
    hb->ops[1].err = RL_ETIMEDOUT;
    h->store->nheld = 0;
    h->store->hold = 0;
    hb->cb(hb->data, hb->ops, hb->n, 0);
    assert_int_equal(h->answered, 3);
    assert_int_equal(h->res[2].code, RL_CODE_OK);
    assert_non_null(strstr(h->err[2], "timed out"));
    assert_int_equal(h->b.in_flight, 0);
    h_close(h);
    free(h);
}

/* Redis gone: every request answered once, per the fail mode; a rule's
 * answer names its smallest limit. */
static void test_store_down_fail_modes(void **state)
{
    int mode;

    (void)state;
    for (mode = 0; mode <= 1; mode++) {
        h_t *h = calloc(1, sizeof(*h));
        uint64_t B = base_ms();
        size_t i;

        h_open(h, 1, 1024, mode);
        h_rules(h, api_yaml);
        rlt_redis_kill(&h->redis);
        for (i = 0; i < 50; i++)
            h_add(h, B + 20000, i % 2 ? "x" : "y", 10, 60, 1);
        for (i = 0; i < 10; i++)
            h_rule(h, B + 20000, i % 2 ? "x" : "y", "api", 1);
        h_flush(h);
        for (i = 0; i < 60; i++) {
            const rl_result_t *r = &h->res[i];

            assert_int_equal(r->code, mode ? RL_CODE_OK : RL_CODE_ERROR);
            assert_non_null(strstr(h->err[i], "store unavailable"));
            assert_non_null(strstr(h->err[i], mode ? "fail-open"
                                                   : "fail-closed"));
            assert_int_equal(r->limit, i < 50 ? 10 : 33);
            assert_int_equal(r->window_s, 60);
            assert_int_equal(r->used, 0);
            assert_int_equal(r->remaining, mode ? r->limit : 0);
            assert_int_equal(r->reset_after_ms, mode ? 40000 : 0);
        }
        assert_int_equal(h->b.stats.failed_open, mode ? 60 : 0);
        assert_int_equal(h->b.stats.store_errors, 60);
        h_close(h);
        free(h);
    }
}

/* In steady state (keys known, batches pooled) the memory store path makes
 * no allocation at all per request, for inline limits and for a rule of
 * two windows. */
static void test_no_alloc_per_request(void **state)
{
#ifdef COUNT_ALLOCS
    h_t *h = calloc(1, sizeof(*h));
    char key[32];
    uint64_t before = 0, B = base_ms();
    int round;
    size_t i;

    (void)state;
    h_open(h, 0, 1024, 1);
    h_rules(h, "rules:\n  api:\n    limits: [1000000/1m, 2000000/1h]\n");
    for (round = 0; round < 4; round++) {
        if (round == 0)
            before = n_allocs;
        if (round == 1) {
            /* the counter works: warming up allocated the batch and keys */
            assert_true(n_allocs - before >= 500);
            before = n_allocs;
        }
        h->n = h->answered = 0;
        memset(h->answers, 0, sizeof(h->answers));
        for (i = 0; i < 4000; i++) {
            snprintf(key, sizeof(key), "user:%zu", i % 500);
            if (i % 2)
                h_add(h, B + 10, key, 1000000, 60, 1);
            else
                h_rule(h, B + 10, key, "api", 1);
        }
        h_flush(h);
    }
    assert_int_equal(n_allocs - before, 0); /* 12,000 requests, 0 mallocs */
    h_close(h);
    free(h);
#else
    (void)state;
    skip();
#endif
}

/* The expiry of `n` single-request batches, each asking for a new key with
 * the given window at B + 10 ms. */
static void expiries(h_t *h, uint64_t B, uint32_t window, size_t n)
{
    char key[32];
    size_t i;

    h->store->nexpiry = 0;
    for (i = 0; i < n; i++) {
        snprintf(key, sizeof(key), "spread:%u:%zu", window, i);
        h_add(h, B + 10, key, 10, window, 1);
        h_flush(h);
    }
    assert_int_equal(h->store->nexpiry, n);
}

/* With a spread, each batch's keys expire at window end + grace + a random
 * extra of at most the spread and at most a quarter of the window; batches
 * differ, so a window's keys do not all expire at once. Without, every key
 * expires at window end + grace exactly. */
static void test_expiry_spread(void **state)
{
    h_t *h = calloc(1, sizeof(*h));
    uint64_t B = base_ms(), lo, hi;
    size_t i, distinct;

    (void)state;
    h_open(h, 0, 1024, 1);

    expiries(h, B, 60, 64); /* spread 0: the default after init */
    for (i = 0; i < 64; i++)
        assert_int_equal(h->store->expiry[i], B + 60000 + 1000);

    h->b.spread_ms = 10000;
    expiries(h, B, 60, 64);
    lo = hi = h->store->expiry[0];
    for (i = distinct = 0; i < 64; i++) {
        uint64_t e = h->store->expiry[i];
        assert_true(e >= B + 60000 + 1000 && e <= B + 60000 + 1000 + 10000);
        distinct += i > 0 && e != h->store->expiry[i - 1];
        lo = e < lo ? e : lo;
        hi = e > hi ? e : hi;
    }
    /* 64 draws from 10,001 values: equal neighbours would be a broken
     * generator, and so would a narrow range (chance below 1e-15) */
    assert_true(distinct >= 60);
    assert_true(hi - lo >= 5000);

    /* a 1 s window: capped at a quarter of it, 250 ms */
    expiries(h, B, 1, 64);
    for (i = 0; i < 64; i++)
        assert_true(h->store->expiry[i] >= B + 1000 + 1000 &&
                    h->store->expiry[i] <= B + 1000 + 1000 + 250);
    h_close(h);
    free(h);
}

/* ---- the memory store's own errors and its cap ---- */

static int cb_status;
static size_t cb_calls;

static void on_ops(void *data, rls_op_t *ops, size_t n, int status)
{
    (void)data;
    (void)ops;
    (void)n;
    cb_calls++;
    cb_status = status;
}

/* A raw op on key (tag up to its '}'): windows 60 s (limit 10) and, when
 * nwin is 2, 3600 s (limit 100), at now; the given costs. */
static void set_op(rls_op_t *op, rls_wop_t *w, const char *key,
                   uint32_t nwin, uint64_t now, const uint32_t *costs,
                   uint32_t ncosts)
{
    static const uint32_t len[2] = {60, 3600};
    static const uint64_t lim[2] = {10, 100};
    uint32_t j;

    memset(op, 0, sizeof(*op));
    op->key = key;
    op->key_len = strlen(key);
    op->tag_len = (size_t)(strchr(key, '}') + 1 - key);
    op->scale = 1.0;
    op->win = w;
    op->nwin = nwin;
    for (j = 0; j < nwin; j++) {
        uint64_t ms = (uint64_t)len[j] * 1000;
        w[j] = (rls_wop_t){len[j], lim[j], now / ms,
                           (now / ms + 1) * ms + 1000, -1};
    }
    op->costs = costs;
    op->ncosts = ncosts;
    op->equal_cost = costs[0];
    for (j = 1; j < ncosts; j++)
        if (costs[j] != costs[0])
            op->equal_cost = 0;
}

/* An op is applied whole or not at all, and one that fails fails alone,
 * with batch status 0: the others of the batch were counted, as with
 * Redis. What can fail now: a new counter in a full store (RL_ENOMEM) and
 * a malformed op (RL_EINVAL). An op that needs a new counter for one
 * window of two is refused whole, the other window untouched; an op whose
 * requests are all refused creates nothing and so cannot fail for memory.
 * (A counter overflow is no longer reachable: admitted counts stay at or
 * below a limit, and limits are at most 2^63-1.) */
static void test_memory_op_errors(void **state)
{
    static const uint32_t c3[4] = {3, 3, 3, 3}, c1[1] = {1}, c12[2] = {1, 2},
                          c11[1] = {11};
    uint64_t now = base_ms() + 5000, bytes;
    rls_wop_t w[5][2];
    rls_op_t ops[5];
    uv_loop_t loop;
    rls_store_t *s;

    (void)state;
    assert_int_equal(uv_loop_init(&loop), 0);
    s = rls_store_memory_new(&loop);
    assert_non_null(s);

    set_op(&ops[0], w[0], "rl:{a}:i", 1, now, c3, 4);
    set_op(&ops[1], w[1], "rl:{d}:r:x", 1, now, c1, 1);
    cb_calls = 0;
    s->v->submit(s, ops, 2, on_ops, NULL);
    assert_int_equal(cb_calls, 1);
    assert_int_equal(cb_status, 0);
    assert_int_equal(ops[0].err, 0);
    assert_int_equal(ops[0].admitted, 3);
    assert_int_equal(w[0][0].before, 0);
    assert_int_equal(ops[1].err, 0);
    assert_int_equal(ops[1].admitted, 1);

    /* Full: no new counter fits any more. */
    bytes = s->stats.mem_bytes;
    rls_store_memory_set_max(s, bytes);
    set_op(&ops[0], w[0], "rl:{a}:i", 1, now, c12, 2);
    set_op(&ops[1], w[1], "rl:{b}:i", 1, now, c1, 1);
    set_op(&ops[2], w[2], "rl:{c}:i", 1, now, c1, 1);
    ops[2].nwin = 0;
    set_op(&ops[3], w[3], "rl:{d}:r:x", 2, now, c1, 1);
    set_op(&ops[4], w[4], "rl:{e}:i", 1, now, c11, 1);
    s->v->submit(s, ops, 5, on_ops, NULL);
    assert_int_equal(cb_calls, 2);
    assert_int_equal(cb_status, 0);
    assert_int_equal(ops[0].err, 0); /* an existing counter: counted */
    assert_int_equal(w[0][0].before, 9);
    assert_int_equal(ops[0].admitted, 1); /* 10; the 2 does not fit */
    assert_int_equal(ops[1].err, RL_ENOMEM);
    assert_int_equal(ops[2].err, RL_EINVAL);
    assert_int_equal(ops[3].err, RL_ENOMEM);
    assert_int_equal(ops[4].err, 0);
    assert_int_equal(ops[4].admitted, 0);
    assert_int_equal(s->stats.mem_refused, 2);
    assert_int_equal(s->stats.mem_full, 1);
    assert_int_equal(s->stats.mem_bytes, bytes);
    assert_int_equal(s->stats.errors, 0); /* no batch failed */

    /* Room again: the refused op left its existing window at 1, the
     * refused request created no counter, the full window stays full. */
    rls_store_memory_set_max(s, RLS_MEMORY_MAX_DEFAULT);
    assert_int_equal(s->stats.mem_full, 0);
    set_op(&ops[0], w[0], "rl:{d}:r:x", 2, now, c1, 1);
    set_op(&ops[1], w[1], "rl:{e}:i", 1, now, c1, 1);
    set_op(&ops[2], w[2], "rl:{a}:i", 1, now, c1, 1);
    s->v->submit(s, ops, 3, on_ops, NULL);
    assert_int_equal(cb_calls, 3);
    assert_int_equal(cb_status, 0);
    assert_int_equal(ops[0].err, 0);
    assert_int_equal(w[0][0].before, 1);
    assert_int_equal(w[0][1].before, 0);
    assert_int_equal(ops[0].admitted, 1);
    assert_int_equal(ops[1].err, 0);
    assert_int_equal(w[1][0].before, 0);
    assert_int_equal(ops[2].err, 0);
    assert_int_equal(w[2][0].before, 10);
    assert_int_equal(ops[2].admitted, 0);

    s->v->close(s, NULL, NULL);
    uv_run(&loop, UV_RUN_DEFAULT);
    assert_int_equal(uv_loop_close(&loop), 0);
}

/* An op whose second new counter cannot be allocated changes no count:
 * the first window's counter used to keep the op's cost although the op
 * failed (and was answered by the fail mode). Needs the counting
 * allocator, so not under ASan. */
static void test_memory_op_alloc_failure(void **state)
{
#ifdef COUNT_ALLOCS
    static const uint32_t c1[1] = {1};
    uint64_t now = base_ms() + 5000;
    rls_wop_t w[2];
    rls_op_t op;
    uv_loop_t loop;
    rls_store_t *s;

    (void)state;
    assert_int_equal(uv_loop_init(&loop), 0);
    s = rls_store_memory_new(&loop);
    assert_non_null(s);
    /* another caller makes both windows' expiry groups */
    set_op(&op, w, "rl:{warm}:r:x", 2, now, c1, 1);
    s->v->submit(s, &op, 1, on_ops, NULL);
    assert_int_equal(op.err, 0);

    /* two new counters: the second allocation fails */
    set_op(&op, w, "rl:{u}:r:x", 2, now, c1, 1);
    fail_alloc = n_allocs + 2;
    s->v->submit(s, &op, 1, on_ops, NULL);
    fail_alloc = 0;
    assert_int_equal(op.err, RL_ENOMEM);

    set_op(&op, w, "rl:{u}:r:x", 2, now, c1, 1);
    s->v->submit(s, &op, 1, on_ops, NULL);
    assert_int_equal(op.err, 0);
    assert_int_equal(w[0].before, 0);
    assert_int_equal(w[1].before, 0);
    assert_int_equal(op.admitted, 1);

    s->v->close(s, NULL, NULL);
    uv_run(&loop, UV_RUN_DEFAULT);
    assert_int_equal(uv_loop_close(&loop), 0);
#else
    (void)state;
    skip();
#endif
}

/* A request for a key refused by a full store, answered by the fail mode. */
static void assert_refused(const h_t *h, size_t i, int fail_open)
{
    assert_int_equal(h->res[i].code, fail_open ? RL_CODE_OK : RL_CODE_ERROR);
    assert_non_null(strstr(h->err[i], "store unavailable (out of memory)"));
    assert_non_null(
        strstr(h->err[i], fail_open ? "allowed by fail-open"
                                    : "refused by fail-closed"));
    if (fail_open)
        assert_int_equal(h->res[i].remaining, h->res[i].limit);
}

static void assert_counted(const h_t *h, size_t i, int code, uint64_t used)
{
    assert_int_equal(h->res[i].code, code);
    assert_int_equal(h->res[i].used, used);
    assert_string_equal(h->err[i], "");
}

/* A tiny cap and many keys: the store fills, new keys are refused per the
 * fail mode (and only they: the keys it holds, in the same batches, are
 * still decided exactly), it says it is full until the windows end, and
 * then takes new keys again. */
static void test_memory_full(void **state)
{
    int mode;

    (void)state;
    for (mode = 0; mode <= 1; mode++) {
        h_t *h = calloc(1, sizeof(*h));
        uint64_t B = base_ms(), T, after;
        rls_store_t *ms;
        size_t i, j, first_new, first_refused, late;
        char key[32];

        h_open(h, 0, 1024, mode);
        ms = h->store->inner;
        rls_store_memory_set_max(ms, 65536);
        assert_int_equal(ms->stats.mem_max, 65536);
        assert_true(ms->stats.mem_bytes > 0 &&
                    ms->stats.mem_bytes < 65536 / 2);

        /* Eight keys counted once each, then 2,000 new ones. */
        for (i = 0; i < 8; i++) {
            snprintf(key, sizeof(key), "old:%zu", i);
            h_add(h, B + 10, key, 5, 60, 1);
        }
        h_flush(h);
        for (i = 0; i < 8; i++)
            assert_counted(h, i, RL_CODE_OK, 1);
        first_new = h->n;
        for (i = 0; i < 2000; i++) {
            snprintf(key, sizeof(key), "new:%zu", i);
            h_add(h, B + 10, key, 5, 60, 1);
            if (i % 100 == 99)
                h_flush(h);
        }
        /* The first keys fit, then every later one is refused. */
        for (i = first_new; i < h->n && h->err[i][0] == '\0'; i++)
            assert_counted(h, i, RL_CODE_OK, 1);
        first_refused = i;
        assert_true(first_refused > first_new + 100);
        assert_true(first_refused < h->n);
        for (; i < h->n; i++)
            assert_refused(h, i, mode);
        assert_int_equal(ms->stats.mem_refused, h->n - first_refused);
        assert_int_equal(ms->stats.mem_full, 1);
        assert_true(ms->stats.mem_bytes <= 65536);
        assert_true(ms->stats.mem_bytes > 65536 - 65536 / 8);

        /* One batch: the old keys up to and past their limit, a new key
         * that fit, and a new one. Only the new one is refused. */
        T = h->n;
        for (i = 0; i < 8; i++) {
            snprintf(key, sizeof(key), "old:%zu", i);
            for (j = 0; j < 5; j++)
                h_add(h, B + 20, key, 5, 60, 1);
        }
        h_add(h, B + 20, "new:0", 5, 60, 1);
        late = h_add(h, B + 20, "late", 5, 60, 1);
        h_flush(h);
        for (i = 0; i < 8; i++) {
            for (j = 0; j < 4; j++)
                assert_counted(h, T + 5 * i + j, RL_CODE_OK, 2 + j);
            /* refused: it consumes nothing */
            assert_counted(h, T + 5 * i + 4, RL_CODE_OVER_LIMIT, 5);
        }
        assert_counted(h, late - 1, RL_CODE_OK, 2);
        assert_refused(h, late, mode);

        /* Not before the windows end (+ 1 s grace)... */
        after = B + 60000 + 1000;
        assert_int_equal(rls_store_memory_sweep(ms, after - 1), 0);
        assert_int_equal(ms->stats.mem_full, 1);
        /* ...then every counter is freed, and new keys are taken again. */
        while (rls_store_memory_sweep(ms, after) > 0)
            ;
        assert_int_equal(ms->stats.mem_full, 0);
        assert_true(ms->stats.mem_bytes < 65536 / 2);
        T = h->n;
        for (i = 0; i < 100; i++) {
            snprintf(key, sizeof(key), "again:%zu", i);
            h_add(h, after + 10, key, 5, 60, 1);
        }
        h_add(h, after + 10, "late", 5, 60, 1);
        h_flush(h);
        for (i = T; i < h->n; i++)
            assert_counted(h, i, RL_CODE_OK, 1);
        h_close(h);
        free(h);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_memory_store, teardown),
        cmocka_unit_test_teardown(test_redis_store, teardown),
        cmocka_unit_test_teardown(test_stores_agree, teardown),
        cmocka_unit_test_teardown(test_store_down_fail_modes, teardown),
        cmocka_unit_test_teardown(test_no_alloc_per_request, teardown),
        cmocka_unit_test_teardown(test_expiry_spread, teardown),
        cmocka_unit_test_teardown(test_memory_op_errors, teardown),
        cmocka_unit_test_teardown(test_memory_op_alloc_failure, teardown),
        cmocka_unit_test_teardown(test_memory_full, teardown),
        cmocka_unit_test_teardown(test_stores_agree_rules, teardown),
        cmocka_unit_test_teardown(test_refusal_cache_changes_nothing,
                                  teardown),
        cmocka_unit_test_teardown(test_minute_hour_memory, teardown),
        cmocka_unit_test_teardown(test_minute_hour_redis, teardown),
        cmocka_unit_test_teardown(test_shadow, teardown),
        cmocka_unit_test_teardown(test_inline_order, teardown),
        cmocka_unit_test_teardown(test_hold, teardown),
        cmocka_unit_test_teardown(test_policy_swap_in_flight, teardown),
        cmocka_unit_test_teardown(test_spare_batches, teardown),
        cmocka_unit_test_teardown(test_part_answers, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
