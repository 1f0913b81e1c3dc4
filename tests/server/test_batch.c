/* The batcher against both stores, on a scripted clock.
 *
 * A wrapper store passes batches to the real store (memory or a private
 * redis-server) but answers now_ms() from the script, so a test can stand
 * exactly on a window boundary. The same script run through both stores must
 * give identical decisions, field by field. */
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

void *malloc(size_t n)
{
    n_allocs++;
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

typedef struct {
    rls_store_t base;
    rls_store_t *inner;
    uint64_t now;
    void (*done)(void *);
    void *done_arg;
    uint64_t expiry[64]; /* expire_at_ms of the first ops submitted */
    size_t nexpiry;
} clock_store_t;

static void w_submit(rls_store_t *s, rls_op_t *ops, size_t n, rls_store_cb cb,
                     void *data)
{
    clock_store_t *w = (clock_store_t *)s;
    size_t i;

    for (i = 0; i < n && w->nexpiry < 64; i++)
        w->expiry[w->nexpiry++] = ops[i].expire_at_ms;
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

#define MAXR 4096

typedef struct {
    uv_loop_t loop;
    rlt_redis_t redis;
    int use_redis;
    clock_store_t *store;
    rls_batcher_t b;
    rl_result_t res[MAXR];
    char err[MAXR][160];
    int answers[MAXR]; /* responses per request slot */
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
    h->answered++;
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
    rls_batcher_init(&h->b, &h->store->base, respond, "rl:", 3, max_reqs,
                     1000, fail_open);
}

/* Adds a request at the scripted time `now`; its id is its slot. */
static size_t h_add(h_t *h, uint64_t now, const char *key, uint64_t limit,
                    uint32_t window, uint32_t cost)
{
    size_t i = h->n++;

    assert_true(i < MAXR);
    /* the clock is read when a batch starts; keep one time per batch */
    h->store->now = now;
    assert_int_equal(rls_batcher_add(&h->b, h, i, key, strlen(key),
                                     cost, limit, window),
                     RL_OK);
    return i;
}

/* Submits and runs the loop until every request so far is answered. */
static void h_flush(h_t *h)
{
    uint64_t deadline = rlt_mono_ms() + 5000;

    rls_batcher_flush(&h->b);
    while (h->answered < h->n && rlt_mono_ms() < deadline)
        uv_run(&h->loop, UV_RUN_ONCE);
    assert_int_equal(h->answered, h->n);
}

static void h_close(h_t *h)
{
    size_t i;

    for (i = 0; i < h->n; i++)
        assert_int_equal(h->answers[i], 1); /* exactly one response each */
    rls_batcher_free(&h->b);
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

/* ---- scripted scenarios, each run on a store ---- */

/* The textbook example, 5 per 60 s: the sixth is refused with retry_after =
 * time left. */
static void scenario_five_per_minute(h_t *h, uint64_t B)
{
    size_t i, first = h->n;

    for (i = 0; i < 6; i++)
        h_add(h, B + 20000, "user:fpm", 5, 60, 1);
    h_flush(h);
    for (i = 0; i < 6; i++) {
        rl_result_t *r = &h->res[first + i];
        assert_int_equal(r->used, i + 1);
        assert_int_equal(r->code, i < 5 ? RL_CODE_OK : RL_CODE_OVER_LIMIT);
        assert_int_equal(r->reset_after_ms, 40000);
        assert_int_equal(r->retry_after_ms, i < 5 ? 0 : 40000);
    }
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
    for (i = 0; i < 10; i++) {
        rl_result_t *r = &h->res[first + i];
        assert_int_equal(r->code, RL_CODE_OK);
        assert_int_equal(r->used, i % 5 + 1);
        assert_int_equal(r->reset_after_ms, i < 5 ? 1 : 60000);
    }
    /* and the sixth in the new window is refused */
    i = h_add(h, B + 1, "user:edge", 5, 60, 1);
    h_flush(h);
    assert_int_equal(h->res[i].code, RL_CODE_OVER_LIMIT);
}

/* Costs add up: limit 10, cost 3: 3, 6, 9 allowed, 12 refused; then a cost
 * of 1 is refused too (13), since refused requests still count. */
static void scenario_cost(h_t *h, uint64_t B)
{
    size_t i, first = h->n;

    for (i = 0; i < 4; i++)
        h_add(h, B + 5, "user:cost", 10, 1, 3);
    h_add(h, B + 6, "user:cost", 10, 1, 1);
    h_flush(h);
    for (i = 0; i < 4; i++) {
        assert_int_equal(h->res[first + i].used, 3 * (i + 1));
        assert_int_equal(h->res[first + i].code,
                         i < 3 ? RL_CODE_OK : RL_CODE_OVER_LIMIT);
    }
    assert_int_equal(h->res[first + 4].used, 13);
    assert_int_equal(h->res[first + 4].code, RL_CODE_OVER_LIMIT);
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
    for (i = 0; i < 1000; i++) {
        assert_int_equal(h->res[first + i].code,
                         i < 300 ? RL_CODE_OK : RL_CODE_OVER_LIMIT);
        assert_int_equal(h->res[first + i].used, i + 1);
        assert_int_equal(h->res[first + i].remaining, i < 300 ? 299 - i : 0);
    }
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

static void test_memory_store(void **state)
{
    h_t *h = calloc(1, sizeof(*h));

    (void)state;
    h_open(h, 0, 1024, 1);
    run_all(h);
    h_close(h);
    free(h);
}

static void test_redis_store(void **state)
{
    h_t *h = calloc(1, sizeof(*h));

    (void)state;
    h_open(h, 1, 1024, 1);
    run_all(h);
    h_close(h);
    free(h);
}

/* The same script through both stores gives the same answers, field by
 * field, with batches capped small so the script spans many batches. */
static void test_stores_agree(void **state)
{
    h_t *m = calloc(1, sizeof(*m)), *r = calloc(1, sizeof(*r));
    size_t i;

    (void)state;
    h_open(m, 0, 7, 1);
    h_open(r, 1, 7, 1);
    run_all(m);
    run_all(r);
    assert_int_equal(m->n, r->n);
    for (i = 0; i < m->n; i++) {
        assert_int_equal(m->res[i].code, r->res[i].code);
        assert_int_equal(m->res[i].limit, r->res[i].limit);
        assert_int_equal(m->res[i].used, r->res[i].used);
        assert_int_equal(m->res[i].remaining, r->res[i].remaining);
        assert_int_equal(m->res[i].reset_after_ms, r->res[i].reset_after_ms);
        assert_int_equal(m->res[i].retry_after_ms, r->res[i].retry_after_ms);
        assert_string_equal(m->err[i], r->err[i]);
    }
    h_close(m);
    h_close(r);
    free(m);
    free(r);
}

/* Redis gone: every request answered once, per the fail mode. */
static void test_store_down_fail_modes(void **state)
{
    int mode;

    (void)state;
    for (mode = 0; mode <= 1; mode++) {
        h_t *h = calloc(1, sizeof(*h));
        size_t i;

        h_open(h, 1, 1024, mode);
        rlt_redis_kill(&h->redis);
        for (i = 0; i < 50; i++)
            h_add(h, base_ms(), i % 2 ? "x" : "y", 10, 60, 1);
        h_flush(h);
        for (i = 0; i < 50; i++) {
            assert_int_equal(h->res[i].code,
                             mode ? RL_CODE_OK : RL_CODE_ERROR);
            assert_non_null(strstr(h->err[i], "store unavailable"));
            assert_non_null(strstr(h->err[i], mode ? "fail-open"
                                                   : "fail-closed"));
        }
        assert_int_equal(h->b.stats.failed_open, mode ? 50 : 0);
        h_close(h);
        free(h);
    }
}

/* A store reply can claim any count: Redis's parses to as low as
 * -INT64_MAX whatever the increment. Such a counter is below zero, so the
 * requests are decided as on 0, with no signed overflow on the way (found by
 * fuzz_conn: count - incr overflowed in on_store_done). */
static void low_submit(rls_store_t *s, rls_op_t *ops, size_t n,
                       rls_store_cb cb, void *data)
{
    size_t i;

    (void)s;
    for (i = 0; i < n; i++) {
        ops[i].count = -INT64_MAX;
        ops[i].err = 0;
    }
    cb(data, ops, n, 0);
}

static uint64_t low_now(rls_store_t *s)
{
    (void)s;
    return UINT64_C(1700000000000);
}

static int low_up(rls_store_t *s)
{
    (void)s;
    return 1;
}

static void test_store_count_far_below_incr(void **state)
{
    static const rls_store_vtbl_t v = {low_submit, low_now, low_up, NULL};
    rls_store_t store = {&v, {0}};
    h_t *h = calloc(1, sizeof(*h));
    size_t i;

    (void)state;
    assert_non_null(h);
    rls_batcher_init(&h->b, &store, respond, "rl:", 3, 1024, 1000, 0);
    for (i = 0; i < 4; i++) {
        h->n++;
        assert_int_equal(rls_batcher_add(&h->b, h, i, "k", 1, 3, 10, 60),
                         RL_OK);
    }
    rls_batcher_flush(&h->b);
    assert_int_equal(h->answered, 4);
    for (i = 0; i < 4; i++) {
        assert_int_equal(h->answers[i], 1);
        assert_int_equal(h->res[i].code, RL_CODE_OK);
        assert_int_equal(h->res[i].used, 0);
    }
    rls_batcher_free(&h->b);
    free(h);
}

/* In steady state (keys known, batches pooled) the memory store path makes
 * no allocation at all per request. */
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
            h_add(h, B + 10, key, 1000000, 60, 1);
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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_memory_store, teardown),
        cmocka_unit_test_teardown(test_redis_store, teardown),
        cmocka_unit_test_teardown(test_stores_agree, teardown),
        cmocka_unit_test_teardown(test_store_down_fail_modes, teardown),
        cmocka_unit_test_teardown(test_no_alloc_per_request, teardown),
        cmocka_unit_test(test_store_count_far_below_incr),
        cmocka_unit_test_teardown(test_expiry_spread, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
