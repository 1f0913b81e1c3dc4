/* The batcher's flow on a scripted clock (batch_fx.h): batches held
 * under load (--batch-hold-us), a policy swap with batches in flight,
 * spare batches kept after a stall, a batch answered in parts, every
 * request answered by the fail mode when Redis is gone, no allocation per
 * request in steady state, and the spread of key expiries. */
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
#include "batch_fx.h"

/* A rule of two windows: an answer in the fail mode names the smaller. */
static const char api_yaml[] = "rules:\n"
                               "  api:\n"
                               "    limits: [33/1m, 2000/1h]\n";

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
    h->b.hold_ns = 300000;  /* 300 us */
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
    rls_batcher_flush(&h->b);    /* batch 1, in flight */
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
            assert_non_null(
                strstr(h->err[i], mode ? "fail-open" : "fail-closed"));
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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_store_down_fail_modes, h_teardown),
        cmocka_unit_test_teardown(test_no_alloc_per_request, h_teardown),
        cmocka_unit_test_teardown(test_expiry_spread, h_teardown),
        cmocka_unit_test_teardown(test_hold, h_teardown),
        cmocka_unit_test_teardown(test_policy_swap_in_flight, h_teardown),
        cmocka_unit_test_teardown(test_spare_batches, h_teardown),
        cmocka_unit_test_teardown(test_part_answers, h_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
