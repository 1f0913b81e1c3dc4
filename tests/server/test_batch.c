/* The batcher's decisions against both stores, on a scripted clock
 * (batch_fx.h): the same script run through the memory store and a
 * private redis-server must give identical decisions, field by field;
 * several windows per rule, shadow mode against a model, inline limits
 * that disagree in one batch. The batcher's flow (holds, batches in
 * flight, parts, failures, allocations) is in test_batch_flow.c. */
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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_memory_store, h_teardown),
        cmocka_unit_test_teardown(test_redis_store, h_teardown),
        cmocka_unit_test_teardown(test_stores_agree, h_teardown),
        cmocka_unit_test_teardown(test_stores_agree_rules, h_teardown),
        cmocka_unit_test_teardown(test_refusal_cache_changes_nothing,
                                  h_teardown),
        cmocka_unit_test_teardown(test_minute_hour_memory, h_teardown),
        cmocka_unit_test_teardown(test_minute_hour_redis, h_teardown),
        cmocka_unit_test_teardown(test_shadow, h_teardown),
        cmocka_unit_test_teardown(test_inline_order, h_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
