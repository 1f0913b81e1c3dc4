/* Admission against several windows: check, then increment. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "rl_admit.h"

/* 33/1m + 2000/1h: a caller refused by the minute keeps the hour. */
static void test_minute_refusal_keeps_hour(void **state)
{
    rl_admit_win_t w[2] = {{33, 0, 20000, 60}, {2000, 0, 1800000, 3600}};
    rl_result_t r;
    int i;

    (void)state;
    for (i = 0; i < 33; i++)
        assert_int_equal(rl_admit_one(w, 2, 1), 1);
    for (i = 0; i < 100; i++)
        assert_int_equal(rl_admit_one(w, 2, 1), 0);
    assert_int_equal(w[0].count, 33);
    assert_int_equal(w[1].count, 33); /* the refusals took nothing */
    memset(&r, 0, sizeof(r));
    rl_admit_result(w, 2, 1, 0, &r);
    assert_int_equal(r.code, RL_CODE_OVER_LIMIT);
    assert_int_equal(r.window_s, 60);
    assert_int_equal(r.limit, 33);
    assert_int_equal(r.used, 33);
    assert_int_equal(r.remaining, 0);
    assert_int_equal(r.retry_after_ms, 20000);
}

/* The hour refuses while the minute has room. */
static void test_hour_refuses(void **state)
{
    rl_admit_win_t w[2] = {{33, 5, 20000, 60}, {2000, 1999, 50000, 3600}};
    rl_result_t r;

    (void)state;
    assert_int_equal(rl_admit_one(w, 2, 1), 1);
    memset(&r, 0, sizeof(r));
    rl_admit_result(w, 2, 1, 1, &r);
    /* allowed: the window with the least remaining is the hour (0 left) */
    assert_int_equal(r.code, RL_CODE_OK);
    assert_int_equal(r.window_s, 3600);
    assert_int_equal(r.used, 2000);
    assert_int_equal(r.remaining, 0);
    assert_int_equal(r.retry_after_ms, 0);
    assert_int_equal(rl_admit_one(w, 2, 1), 0);
    rl_admit_result(w, 2, 1, 0, &r);
    assert_int_equal(r.window_s, 3600);
    assert_int_equal(r.retry_after_ms, 50000);
    assert_int_equal(w[0].count, 6);
}

/* Refused by two windows: the one that frees up last decides. */
static void test_refused_by_both(void **state)
{
    rl_admit_win_t w[2] = {{10, 10, 5000, 60}, {100, 100, 900000, 3600}};
    rl_result_t r;

    (void)state;
    assert_int_equal(rl_admit_one(w, 2, 1), 0);
    memset(&r, 0, sizeof(r));
    rl_admit_result(w, 2, 1, 0, &r);
    assert_int_equal(r.window_s, 3600);
    assert_int_equal(r.retry_after_ms, 900000);
}

/* A costly request is refused; a cheaper one after it may still fit. */
static void test_costs(void **state)
{
    rl_admit_win_t w[1] = {{10, 7, 1000, 1}};

    (void)state;
    assert_int_equal(rl_admit_one(w, 1, 4), 0);
    assert_int_equal(w[0].count, 7);
    assert_int_equal(rl_admit_one(w, 1, 3), 1);
    assert_int_equal(w[0].count, 10);
    /* a count past its limit (the limit was lowered) leaves no room */
    w[0].limit = 5;
    assert_int_equal(rl_admit_one(w, 1, 1), 0);
    assert_int_equal(rl_admit_equal(w, 1, 1, 10), 0);
}

/* The closed form equals deciding one at a time, on random cases. */
static void test_equal_matches_loop(void **state)
{
    unsigned seed = 12345;
    int t;

    (void)state;
    for (t = 0; t < 20000; t++) {
        rl_admit_win_t a[RL_ADMIT_WINDOWS_MAX] = {{0}}, b[RL_ADMIT_WINDOWS_MAX];
        size_t n = 1 + (size_t)rand_r(&seed) % RL_ADMIT_WINDOWS_MAX, i;
        uint64_t cost = 1 + (uint64_t)(rand_r(&seed) % 5);
        uint64_t k = (uint64_t)(rand_r(&seed) % 50), got, want = 0, j;

        for (i = 0; i < n; i++) {
            a[i].limit = 1 + (uint64_t)(rand_r(&seed) % 60);
            a[i].count = (uint64_t)(rand_r(&seed) % 70);
            a[i].reset_after_ms = 1;
            a[i].window_s = (uint32_t)i + 1;
            b[i] = a[i];
        }
        for (j = 0; j < k; j++)
            want += (uint64_t)rl_admit_one(b, n, cost);
        got = rl_admit_equal(a, n, cost, k);
        assert_int_equal(got, want);
        for (i = 0; i < n; i++)
            assert_int_equal(a[i].count, b[i].count);
    }
}

/* Near 2^63: no overflow in the room arithmetic. */
static void test_large(void **state)
{
    rl_admit_win_t w[1] = {{INT64_MAX, INT64_MAX - 3, 1, 1}};

    (void)state;
    assert_int_equal(rl_admit_equal(w, 1, 2, 5), 1);
    assert_int_equal(w[0].count, INT64_MAX - 1);
    assert_int_equal(rl_admit_one(w, 1, UINT32_MAX), 0);
    assert_int_equal(rl_admit_one(w, 1, 1), 1);
}

/* ---- the sliding-window-counter and the gcra ---- */

/* A sliding counter's state d ms after (cur, prev) at e ms into a window
 * of W ms, nothing else arriving: loaded as a store would read it then. */
static void swc_at(rl_admit_win_t *w, uint64_t L, uint32_t S, uint64_t cur,
                   uint64_t prev, uint64_t e, uint64_t d)
{
    uint64_t W = (uint64_t)S * 1000, at = e + d;

    if (at >= W) { /* a later window: this one's counter is its previous */
        prev = at < 2 * W ? cur : 0;
        cur = 0;
        at %= W;
    }
    rl_admit_swc(w, L, S, (int64_t)cur, (int64_t)prev, rl_swc_weight(W - at, S),
                 W - at);
}

/* retry_after is exact: the same request fits after it, not a ms
 * before, over random states of both algorithms. */
static void test_retry_exact(void **state)
{
    unsigned seed = 11;
    int t, checked = 0;

    (void)state;
    for (t = 0; t < 20000; t++) {
        rl_admit_win_t w, x;
        uint64_t cost = 1 + (uint64_t)(rand_r(&seed) % 4), r;

        if (t % 2 == 0) {
            uint32_t S = 1 + (uint32_t)(rand_r(&seed) % 90);
            uint64_t L = 1 + (uint64_t)(rand_r(&seed) % 30);
            uint64_t cur = (uint64_t)(rand_r(&seed) % (L + 2));
            uint64_t prev = (uint64_t)(rand_r(&seed) % (L + 5));
            uint64_t e = (uint64_t)rand_r(&seed) % ((uint64_t)S * 1000);
            swc_at(&w, L, S, cur, prev, e, 0);
            if (rl_admit_fits(&w, 1, cost))
                continue;
            r = rl_admit_retry_ms(&w, cost);
            if (cost > L)
                continue; /* never fits */
            swc_at(&x, L, S, cur, prev, e, r);
            assert_true(rl_admit_fits(&x, 1, cost));
            swc_at(&x, L, S, cur, prev, e, r - 1);
            assert_false(rl_admit_fits(&x, 1, cost));
        } else {
            uint32_t S = 1 + (uint32_t)(rand_r(&seed) % 60);
            uint64_t N = 1 + (uint64_t)(rand_r(&seed) % 50);
            uint64_t B = 1 + (uint64_t)(rand_r(&seed) % 8);
            uint64_t T = rl_gcra_interval_us(N, S), now = 1700000000000;
            int64_t tat =
                (int64_t)(now * 1000 + (uint64_t)rand_r(&seed) % (B * T + 1));
            rl_admit_gcra(&w, B, S, T, tat, now);
            if (rl_admit_fits(&w, 1, cost))
                continue;
            r = rl_admit_retry_ms(&w, cost);
            if (cost > B)
                continue;
            rl_admit_gcra(&x, B, S, T, tat, now + r);
            assert_true(rl_admit_fits(&x, 1, cost));
            rl_admit_gcra(&x, B, S, T, tat, now + r - 1);
            assert_false(rl_admit_fits(&x, 1, cost));
        }
        assert_true(r >= 1);
        checked++;
    }
    assert_true(checked > 5000);
}

/* A sliding window's log, as a store holds it: entries (t, cost), oldest
 * first. */
typedef struct {
    uint64_t t[4096], c[4096];
    size_t n;
} swl_log_t;

/* Cost the log holds in (at - W, at]. */
static uint64_t swl_sum(const swl_log_t *g, uint64_t W, uint64_t at)
{
    uint64_t s = 0;
    size_t i;

    for (i = 0; i < g->n; i++)
        if (g->t[i] <= at && g->t[i] + W > at)
            s += g->c[i];
    return s;
}

/* Loads the log at now as a store reports it (rl_admit.h): its sum after
 * pruning, the newest entry, and the oldest entries covering
 * max(sum - L, 0) + cmax. */
static void swl_load(rl_admit_win_t *w, const swl_log_t *g, uint64_t L,
                     uint32_t S, uint64_t now, uint64_t cmax)
{
    uint64_t W = (uint64_t)S * 1000, sum = 0, ms[RL_SWL_PREFIX],
             cs[RL_SWL_PREFIX], acc = 0, needed, newest = 0;
    uint32_t k = 0;
    size_t i;

    for (i = 0; i < g->n; i++)
        if (g->t[i] + W > now) {
            sum += g->c[i];
            newest = g->t[i] + W - now;
        }
    needed = (sum > L ? sum - L : 0) + cmax;
    for (i = 0; i < g->n && k < RL_SWL_PREFIX && acc < needed; i++)
        if (g->t[i] + W > now) {
            ms[k] = g->t[i] + W - now;
            cs[k++] = g->c[i];
            acc += g->c[i];
        }
    rl_admit_swl(w, L, S, (int64_t)sum, newest, ms, cs, k);
}

/* The exact log against a model: every decision, and every refusal's
 * retry_after exact (the request fits then, not a ms before), over random
 * batches of random costs. */
static void test_swl_model(void **state)
{
    static swl_log_t g;
    unsigned seed = 5;
    int round, checked = 0;

    (void)state;
    for (round = 0; round < 300; round++) {
        uint32_t S = 1 + (uint32_t)(rand_r(&seed) % 5);
        uint64_t L = 1 + (uint64_t)(rand_r(&seed) % 12), now = 1000000;
        uint64_t W = (uint64_t)S * 1000;
        int b;

        g.n = 0;
        for (b = 0; b < 40; b++) {
            uint64_t costs[6], cmax = 0, added = 0;
            int k = 1 + rand_r(&seed) % 6, i;
            rl_admit_win_t w;

            now += (uint64_t)(rand_r(&seed) % (W / 2 + 1));
            for (i = 0; i < k; i++) {
                costs[i] = 1 + (uint64_t)(rand_r(&seed) % 3);
                if (costs[i] > cmax)
                    cmax = costs[i];
            }
            swl_load(&w, &g, L, S, now, cmax);
            assert_int_equal(w.count, swl_sum(&g, W, now));
            for (i = 0; i < k; i++) {
                uint64_t before = swl_sum(&g, W, now) + added, r;
                int ok = rl_admit_one(&w, 1, costs[i]);
                assert_int_equal(ok, before + costs[i] <= L);
                if (ok) {
                    added += costs[i];
                    continue;
                }
                if (costs[i] > L)
                    continue; /* never fits */
                r = rl_admit_retry_ms(&w, costs[i]);
                assert_true(r >= 1);
                /* at now + r what is left of the log and of this batch's
                 * admissions (at now) leaves room; a ms before it does
                 * not */
                assert_true(swl_sum(&g, W, now + r) + (r < W ? added : 0) +
                                costs[i] <=
                            L);
                assert_true(swl_sum(&g, W, now + r - 1) +
                                (r - 1 < W ? added : 0) + costs[i] >
                            L);
                checked++;
            }
            if (added > 0 && g.n < 4096) {
                g.t[g.n] = now;
                g.c[g.n++] = added;
            }
        }
    }
    assert_true(checked > 1000);
}

/* The weights and intervals at their edges. */
static void test_weights_and_intervals(void **state)
{
    rl_admit_win_t w;

    (void)state;
    assert_int_equal(rl_swc_weight(60000, 60), 65536); /* window start */
    assert_int_equal(rl_swc_weight(1, 60), 2);         /* ceil(65536/60000) */
    assert_int_equal(rl_swc_weight(30000, 60), 32768);
    assert_int_equal(rl_gcra_interval_us(3, 1), 333334); /* rounded up */
    assert_int_equal(rl_gcra_interval_us(1000000, 1), 1);
    assert_int_equal(rl_gcra_interval_us(1000001, 1), 0); /* too fast */
    /* prev 5 at weight 59/60: ceil(4.9166) = 5; never below the real
     * formula */
    rl_admit_swc(&w, 5, 60, 0, 5, rl_swc_weight(59000, 60), 59000);
    assert_int_equal(w.count, 5);
    assert_false(rl_admit_fits(&w, 1, 1));
    /* a gcra admits its burst at once, then one per interval */
    rl_admit_gcra(&w, 5, 60, 12000000, 0, 1000);
    assert_int_equal(rl_admit_equal(&w, 1, 1, 9), 5);
    assert_int_equal(rl_admit_added(&w, 1000), 1000 * 1000 + 60000000);
    assert_int_equal(rl_admit_retry_ms(&w, 1), 12000);
}

/* Increment, then compare (envoy-ratelimit's counting): the token budget
 * of 100, checked with a cost of 0 and charged 70 twice; at the limit is
 * within, past it is over, and refused costs are counted. */
static void test_counted(void **state)
{
    rl_admit_win_t w[1];
    rl_result_t r;

    (void)state;
    rl_admit_fixed(w, 100, 60, 0, 30000);
    memset(&r, 0, sizeof(r));
    assert_int_equal(rl_admit_counted(w, 1, 0, 1, &r), 1);
    assert_int_equal(r.remaining, 100);
    assert_int_equal(r.limit, 100);
    assert_int_equal(rl_admit_counted(w, 1, 70, 1, &r), 1);
    assert_int_equal(r.remaining, 30);
    assert_int_equal(rl_admit_counted(w, 1, 0, 1, &r), 1);
    assert_int_equal(r.remaining, 30);
    assert_int_equal(rl_admit_counted(w, 1, 70, 1, &r), 0);
    assert_int_equal(r.code, RL_CODE_OVER_LIMIT);
    assert_int_equal(r.used, 140);      /* counted */
    assert_int_equal(r.remaining, 30);  /* the room it found */
    assert_int_equal(r.retry_after_ms, 30000);
    assert_int_equal(w[0].count, 140);
    assert_int_equal(rl_admit_counted(w, 1, 0, 1, &r), 0); /* a read */
    assert_int_equal(r.remaining, 0);
    assert_int_equal(w[0].count, 140);
    /* Exactly at the limit: within, nothing left; a read of it too. */
    rl_admit_fixed(w, 100, 60, 30, 30000);
    assert_int_equal(rl_admit_counted(w, 1, 70, 1, &r), 1);
    assert_int_equal(r.remaining, 0);
    assert_int_equal(rl_admit_counted(w, 1, 0, 1, &r), 1);
    /* Without add (a look): nothing changes. */
    assert_int_equal(rl_admit_counted(w, 1, 1, 0, &r), 0);
    assert_int_equal(w[0].count, 100);
    assert_int_equal(r.remaining, 0);
    /* Two limits: the one it takes past decides, both are counted. */
    {
        rl_admit_win_t v[2];
        rl_admit_fixed(&v[0], 10, 60, 9, 20000);
        rl_admit_fixed(&v[1], 100, 3600, 50, 900000);
        assert_int_equal(rl_admit_counted(v, 2, 2, 1, &r), 0);
        assert_int_equal(r.window_s, 60);
        assert_int_equal(r.remaining, 1);
        assert_int_equal(v[0].count, 11);
        assert_int_equal(v[1].count, 52);
    }
    /* gcra, 1/s with a burst of 3: the fourth at once is counted, a debt
     * of one interval: a request fits again after 2 s. */
    {
        rl_admit_win_t g[1];
        int i;
        rl_admit_gcra(g, 3, 1, 1000000, 0, 5000);
        for (i = 0; i < 3; i++)
            assert_int_equal(rl_admit_counted(g, 1, 1, 1, &r), 1);
        assert_int_equal(rl_admit_counted(g, 1, 1, 1, &r), 0);
        assert_int_equal(r.used, 4);
        assert_int_equal(r.retry_after_ms, 2000);
        assert_int_equal(r.reset_after_ms, 4000);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_minute_refusal_keeps_hour),
        cmocka_unit_test(test_hour_refuses),
        cmocka_unit_test(test_refused_by_both),
        cmocka_unit_test(test_costs),
        cmocka_unit_test(test_equal_matches_loop),
        cmocka_unit_test(test_large),
        cmocka_unit_test(test_retry_exact),
        cmocka_unit_test(test_weights_and_intervals),
        cmocka_unit_test(test_swl_model),
        cmocka_unit_test(test_counted),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
