/* The algorithms beside the fixed window (sliding-window-counter, gcra,
 * windows staggered per caller) through the batcher, on a scripted clock
 * (batch_fx.h), against every store: the memory store, the Lua script and
 * the Redis module must answer a long mixed script identically, field by
 * field; the reference's boundary case; a refused request's retry_after_ms
 * is exact (waiting that long admits it, a millisecond less does not); a
 * refusal consumes nothing in any limit of a mixed rule; every key the
 * store writes expires when its state stops mattering, plus the grace. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <hiredis/hiredis.h>
#include <uv.h>

#include "batch_fx.h"
#include "rl_error.h"

#define NSTORES 3 /* memory, script, module */

static const char *const store_name[NSTORES] = {"memory", "script",
                                                "module"};

static void assert_same(const h_t *a, const h_t *b, const char *bname)
{
    size_t i;

    assert_int_equal(a->n, b->n);
    for (i = 0; i < a->n; i++) {
        const rl_result_t *x = &a->res[i], *y = &b->res[i];

        if (x->code != y->code || x->limit != y->limit ||
            x->used != y->used || x->remaining != y->remaining ||
            x->reset_after_ms != y->reset_after_ms ||
            x->retry_after_ms != y->retry_after_ms ||
            x->window_s != y->window_s ||
            x->shadow_refused != y->shadow_refused ||
            strcmp(a->err[i], b->err[i]) != 0)
            fail_msg("request %zu: memory code=%d limit=%llu used=%llu "
                     "remaining=%llu reset=%llu retry=%llu window=%u; %s "
                     "code=%d limit=%llu used=%llu remaining=%llu reset=%llu "
                     "retry=%llu window=%u err='%s'",
                     i, x->code, (unsigned long long)x->limit,
                     (unsigned long long)x->used,
                     (unsigned long long)x->remaining,
                     (unsigned long long)x->reset_after_ms,
                     (unsigned long long)x->retry_after_ms, x->window_s, bname,
                     y->code, (unsigned long long)y->limit,
                     (unsigned long long)y->used,
                     (unsigned long long)y->remaining,
                     (unsigned long long)y->reset_after_ms,
                     (unsigned long long)y->retry_after_ms, y->window_s,
                     b->err[i]);
    }
}

/* ---- every store, one long script ---- */

static const char agree_yaml[] =
    "rules:\n"
    "  swc:\n"
    "    limits: [{limit: 6/10s, algorithm: sliding-window-counter}]\n"
    "  gcra:\n"
    "    limits: [{rate: 2/1s, burst: 5, algorithm: gcra}]\n"
    "  staggered:\n"
    "    limits: [{limit: 4/10s, phase: per-caller}, 9/1m]\n"
    "  mixed:\n"
    "    limits:\n"
    "      - {rate: 3/1s, burst: 6, algorithm: gcra}\n"
    "      - {limit: 20/1m, algorithm: sliding-window-counter}\n"
    "      - {limit: 12/30s, algorithm: sliding-window-counter,"
    " phase: per-caller}\n"
    "      - 40/5m\n"
    "  shadow:\n"
    "    limits: [{rate: 1/1s, burst: 2, algorithm: gcra}]\n"
    "    mode: shadow\n"
    "  log:\n"
    "    limits:\n"
    "      - {limit: 6/10s, algorithm: sliding-window}\n"
    "      - {limit: 15/1m, algorithm: sliding-window}\n"
    "      - 3/1s:gcra\n";

static const char *const agree_rules[] = {"swc",   "gcra",   "staggered",
                                          "mixed", "shadow", "log"};
#define NRULES 6

/* 480 steps a quarter second apart plus a few ms (crossing second, 10 s,
 * 30 s and minute boundaries), 1 to 10 requests each from five callers on
 * the five rules, costs 1 to 3 (listed or equal), batches of at most 7. */
static void script_agree(h_t *h, uint64_t B)
{
    uint64_t seed = 20261127;
    size_t step, k;
    char key[16];

    for (step = 0; step < 480; step++) {
        uint64_t t = B + 50000 + step * 250 + step % 7;
        uint32_t nreq = 1 + rnd(&seed) % 10;

        for (k = 0; k < nreq; k++) {
            uint32_t caller = rnd(&seed) % 5, rule = rnd(&seed) % NRULES;
            uint32_t cost = 1 + rnd(&seed) % 3;

            snprintf(key, sizeof(key), "c%u", caller);
            h_rule(h, t, key, agree_rules[rule], cost);
        }
        h_flush(h);
    }
}

static void test_stores_agree(void **state)
{
    h_t *h[NSTORES];
    uint64_t B = base_ms();
    size_t s, k, i;

    (void)state;
    for (s = 0; s < NSTORES; s++) {
        h[s] = calloc(1, sizeof(*h[s]));
        assert_non_null(h[s]);
        h_open(h[s], (int)s, 7, 1);
        h_rules(h[s], agree_yaml);
        script_agree(h[s], B);
    }
    for (s = 1; s < NSTORES; s++)
        assert_same(h[0], h[s], store_name[s]);
    /* Not a trivial script: every rule allowed and refused, requests
     * shared ops, and every algorithm decided some refusals. */
    assert_true(h[0]->b.stats.coalesced > 100);
    for (k = 0; k < NRULES; k++) {
        const rls_rule_stats_t *st = rule_stats(h[0], agree_rules[k]);
        assert_true(st->allowed > 30);
        assert_true(st->refused + st->shadow_refused > 30);
    }
    {
        /* The mixed rule was refused by its gcra, by its sliding
         * windows and by its fixed window, each at some point. */
        size_t by[4] = {0};
        for (i = 0; i < h[0]->n; i++) {
            uint32_t w = h[0]->res[i].window_s;
            if (h[0]->res[i].code != RL_CODE_OVER_LIMIT)
                continue;
            by[w == 1 ? 0 : w == 60 ? 1 : w == 30 ? 2 : 3]++;
        }
        assert_true(by[0] > 0 && by[1] > 0 && by[2] > 0);
    }
    for (s = 0; s < NSTORES; s++) {
        h_close(h[s]);
        free(h[s]);
    }
}

/* ---- the reference's boundary case ---- */

/* 5 per 60 s; five requests at second 59 and five at 61: the fixed window
 * admits 10, the sliding-window-counter 5 (the previous window still
 * weighs 59/60 of its 5), the gcra with a burst of 5 admits 5 plus what
 * dripped back in 2 s (nothing: one drips back every 12 s), the sliding
 * window 5 (all five of second 59 are within the last 60 s). */
static const char edge_yaml[] = "rules:\n"
                                "  fixed:\n"
                                "    limits: [5/60s]\n"
                                "  swc:\n"
                                "    limits: [5/60s:sliding-window-counter]\n"
                                "  gcra:\n"
                                "    limits: [5/60s:gcra:burst=5]\n"
                                "  log:\n"
                                "    limits: [5/60s:sliding-window]\n";

static void test_boundary(void **state)
{
    static const char *const rules[] = {"fixed", "swc", "gcra", "log"};
    static const size_t admitted[] = {10, 5, 5, 5};
    /* The refused one's wait at second 61: the sliding counter's previous
     * window weighs little enough (<= 4) from 12,001 ms into the window,
     * the gcra's TAT (119 s) is 10 s too far, the log's first entry (59 s)
     * leaves the window at 119 s. */
    static const uint64_t retry[] = {0, 11001, 10000, 58000};
    uint64_t B = base_ms();
    size_t s, k, i;

    (void)state;
    for (s = 0; s < NSTORES; s++) {
        h_t *h = calloc(1, sizeof(*h));
        assert_non_null(h);
        h_open(h, (int)s, 64, 1);
        h_rules(h, edge_yaml);
        for (k = 0; k < 4; k++) {
            size_t first = h->n, ok = 0;
            for (i = 0; i < 5; i++) {
                h_rule(h, B + 59000, "edge", rules[k], 1);
                h_flush(h);
            }
            for (i = 0; i < 5; i++) {
                h_rule(h, B + 61000, "edge", rules[k], 1);
                h_flush(h);
            }
            for (i = first; i < h->n; i++)
                ok += h->res[i].code == RL_CODE_OK;
            if (ok != admitted[k])
                fail_msg("%s on %s admitted %zu, not %zu", rules[k],
                         store_name[s], ok, admitted[k]);
            if (retry[k] != 0)
                assert_int_equal(h->res[h->n - 1].retry_after_ms, retry[k]);
        }
        /* Waiting exactly that long admits; a millisecond less does not
         * (separate callers with the same history). */
        for (k = 1; k < 4; k++) {
            size_t a, b2;
            for (i = 0; i < 5; i++)
                h_rule(h, B + 59000, "twin", rules[k], 1);
            h_flush(h);
            h_rule(h, B + 61000, "twin", rules[k], 1);
            h_flush(h);
            a = h_rule(h, B + 61000 + retry[k] - 1, "edge", rules[k], 1);
            h_flush(h);
            b2 = h_rule(h, B + 61000 + retry[k], "twin", rules[k], 1);
            h_flush(h);
            assert_int_equal(h->res[a].code, RL_CODE_OVER_LIMIT);
            assert_int_equal(h->res[a].retry_after_ms, 1);
            assert_int_equal(h->res[b2].code, RL_CODE_OK);
        }
        h_close(h);
        free(h);
    }
}

/* ---- retry_after_ms is exact, for every algorithm ---- */

static const char retry_yaml[] =
    "rules:\n"
    "  swc:\n"
    "    limits: [{limit: 7/10s, algorithm: sliding-window-counter}]\n"
    "  gcra:\n"
    "    limits: [{rate: 3/2s, burst: 4, algorithm: gcra}]\n"
    "  fixed:\n"
    "    limits: [5/10s]\n"
    "  mixed:\n"
    "    limits: [{rate: 5/1s, burst: 3, algorithm: gcra},"
    " 9/10s:sliding-window-counter, 20/1m]\n"
    "  log:\n"
    "    limits: [{limit: 7/10s, algorithm: sliding-window}]\n"
    "  logmix:\n"
    "    limits: [9/10s:sliding-window, 25/1m:sliding-window, 4/1s]\n";

/* Twin callers get the same random history; when the first is refused at
 * t with retry r (and cost c), the twin asks again at t + r - 1 with cost
 * c (refused, unless r is 0) and the first at t + r (admitted). Then both
 * continue alike. */
static void test_retry_is_exact(void **state)
{
    static const char *const rules[] = {"swc",   "gcra", "fixed",
                                        "mixed", "log",  "logmix"};
    uint64_t B = base_ms(), seed = 77;
    size_t k, step, checked[6] = {0};
    h_t *h = calloc(1, sizeof(*h));

    (void)state;
    assert_non_null(h);
    h_open(h, 0, 64, 1);
    h_rules(h, retry_yaml);
    for (k = 0; k < 6; k++) {
        char x[16], y[16];
        uint64_t t = B + 1000 + k * 3600000;
        snprintf(x, sizeof(x), "x%zu", k);
        snprintf(y, sizeof(y), "y%zu", k);
        for (step = 0; step < 300; step++) {
            uint32_t cost = 1 + rnd(&seed) % 3;
            size_t a, b;
            t += rnd(&seed) % 900;
            a = h_rule(h, t, x, rules[k], cost);
            b = h_rule(h, t, y, rules[k], cost);
            h_flush(h);
            assert_int_equal(h->res[a].code, h->res[b].code);
            if (h->res[a].code == RL_CODE_OVER_LIMIT) {
                uint64_t r = h->res[a].retry_after_ms;
                assert_true(r >= 1);
                b = h_rule(h, t + r - 1, y, rules[k], cost);
                h_flush(h);
                a = h_rule(h, t + r, x, rules[k], cost);
                h_flush(h);
                assert_int_equal(h->res[b].code, RL_CODE_OVER_LIMIT);
                assert_int_equal(h->res[a].code, RL_CODE_OK);
                /* the twin catches up: the same request at t + r */
                b = h_rule(h, t + r, y, rules[k], cost);
                h_flush(h);
                assert_int_equal(h->res[b].code, RL_CODE_OK);
                t += r;
                checked[k]++;
            }
        }
        assert_true(checked[k] > 20);
    }
    h_close(h);
    free(h);
}

/* ---- refusals consume nothing; keys expire; staggered windows ---- */

static long long redis_ll(redisContext *c, const char *fmt, const char *key)
{
    redisReply *r = redisCommand(c, fmt, key);
    long long v;

    assert_non_null(r);
    if (r->type == REDIS_REPLY_NIL)
        v = -1000;
    else if (r->type == REDIS_REPLY_STRING)
        v = strtoll(r->str, NULL, 10);
    else {
        assert_int_equal(r->type, REDIS_REPLY_INTEGER);
        v = r->integer;
    }
    freeReplyObject(r);
    return v;
}

/* A gcra 10/s with a burst of 20 beside 10000/1d: a hundred requests at
 * one instant admit 20; the day's counter holds 20 (the 80 refusals added
 * nothing to it), the gcra's TAT is 20 intervals ahead. Every key expires
 * when its state stops mattering plus the grace (1 s here): the day's
 * counter at the day's end, the sliding counter at the end of the window
 * after its own, the TAT at itself. */
static void test_refusal_consumes_nothing_and_ttls(void **state)
{
    static const char yaml[] =
        "rules:\n"
        "  m:\n"
        "    limits: [10/1s:gcra:burst=20, 30/1m:sliding-window-counter,"
        " 10000/1d]\n";
    uint64_t B = base_ms(), t = B + 3723456; /* 01:02:03.456 */
    size_t s, i, ok;

    (void)state;
    for (s = 1; s < NSTORES; s++) {
        h_t *h = calloc(1, sizeof(*h));
        redisContext *c;
        char k[128];

        assert_non_null(h);
        h_open(h, (int)s, 200, 1);
        h_rules(h, yaml);
        for (i = 0, ok = 0; i < 100; i++)
            h_rule(h, t, "u", "m", 1);
        h_flush(h);
        for (i = 0; i < 100; i++)
            ok += h->res[i].code == RL_CODE_OK;
        assert_int_equal(ok, 20);
        assert_int_equal(h->res[99].window_s, 1); /* the gcra refused */
        assert_int_equal(h->res[99].retry_after_ms, 100);
        c = rlt_redis_connect(&h->redis);
        assert_non_null(c);
        snprintf(k, sizeof(k), "rl:{u}:r:m:86400:%llu",
                 (unsigned long long)(t / 86400000));
        assert_int_equal(redis_ll(c, "GET %s", k), 20);
        assert_int_equal(redis_ll(c, "PEXPIRETIME %s", k),
                         (long long)(B + 86400000 + 1000));
        /* A sliding-window-counter's one key: its window, count and the
         * previous window's. */
        snprintf(k, sizeof(k), "rl:{u}:r:m:60:s");
        {
            redisReply *r = redisCommand(c, "GET %s", k);
            char want[64];
            assert_non_null(r);
            assert_int_equal(r->type, REDIS_REPLY_STRING);
            snprintf(want, sizeof(want), "%llu:20:0",
                     (unsigned long long)(t / 60000));
            assert_string_equal(r->str, want);
            freeReplyObject(r);
        }
        assert_int_equal(redis_ll(c, "PEXPIRETIME %s", k),
                         (long long)((t / 60000 + 2) * 60000 + 1000));
        assert_int_equal(redis_ll(c, "GET %s", "rl:{u}:r:m:1:g"),
                         (long long)(t * 1000 + 20 * 100000));
        assert_int_equal(redis_ll(c, "PEXPIRETIME %s", "rl:{u}:r:m:1:g"),
                         (long long)(t + 2000 + 1000));
        /* A request refused by everything writes nothing at all. */
        assert_int_equal(redis_ll(c, "DBSIZE%s", ""), 3);
        redisFree(c);
        h_close(h);
        free(h);
    }
}

/* A sliding window's log in Redis (store.h, RLS_SWL_*): a hundred
 * requests at one instant admit the limit's 50, written as one entry
 * under a header (sum 50, first entry at 32), expiring when that entry
 * leaves the window plus the grace; the refusals wrote nothing. Then a
 * long run of small batches on one caller: the stores agree request for
 * request while the script drops what left the window (the string stays
 * within twice the live entries). */
static void test_log_layout(void **state)
{
    static const char yaml[] = "rules:\n"
                               "  l:\n"
                               "    limits: [50/2s:sliding-window, 10000/1d]\n"
                               "  big:\n"
                               "    limits: [40/2s:sliding-window]\n";
    uint64_t B = base_ms(), t = B + 3723456, seed;
    h_t *h[NSTORES];
    size_t s, i, ok, step;

    (void)state;
    for (s = 0; s < NSTORES; s++) {
        char want[64];
        redisContext *c;
        redisReply *r;

        h[s] = calloc(1, sizeof(*h[s]));
        assert_non_null(h[s]);
        h_open(h[s], (int)s, 200, 1);
        h_rules(h[s], yaml);
        for (i = 0, ok = 0; i < 100; i++)
            h_rule(h[s], t, "u", "l", 1);
        h_flush(h[s]);
        for (i = 0; i < 100; i++)
            ok += h[s]->res[i].code == RL_CODE_OK;
        assert_int_equal(ok, 50);
        assert_int_equal(h[s]->res[99].retry_after_ms, 2000);
        assert_int_equal(h[s]->res[99].algorithm, RL_ALGO_SLIDING_LOG);
        seed = 3;
        for (step = 0; step < 900; step++) {
            uint32_t n = 1 + rnd(&seed) % 3;
            uint64_t at = t + 10000 + step * 9 + step % 5;
            for (i = 0; i < n; i++)
                h_rule(h[s], at, "b", "big", 1 + rnd(&seed) % 2);
            h_flush(h[s]);
        }
        if (s == 0)
            continue;
        c = rlt_redis_connect(&h[s]->redis);
        assert_non_null(c);
        r = redisCommand(c, "GET rl:{u}:r:l:2:l");
        assert_non_null(r);
        assert_int_equal(r->type, REDIS_REPLY_STRING);
        snprintf(want, sizeof(want), "%020d%012d%014llu%010d", 50, 32,
                 (unsigned long long)t, 50);
        assert_string_equal(r->str, want);
        freeReplyObject(r);
        assert_int_equal(redis_ll(c, "PEXPIRETIME %s", "rl:{u}:r:l:2:l"),
                         (long long)(t + 2000 + 1000));
        assert_true(redis_ll(c, "STRLEN %s", "rl:{u}:r:big:2:l") <=
                    32 + 24 * 81);
        /* the log, the day's counter, the big log */
        assert_int_equal(redis_ll(c, "DBSIZE%s", ""), 3);
        redisFree(c);
    }
    for (s = 1; s < NSTORES; s++)
        assert_same(h[0], h[s], store_name[s]);
    /* A log someone else overwrote with something that is not one: that
     * caller's op fails alone (answered by the fail mode, open here, with
     * the store's error), in the same batch as one that is decided, and
     * the key is left as it was. */
    for (s = 1; s < NSTORES; s++) {
        redisContext *c = rlt_redis_connect(&h[s]->redis);
        size_t a, b;
        redisReply *r;

        assert_non_null(c);
        r = redisCommand(c, "SET rl:{bad}:r:big:2:l 0000000000000000000x");
        assert_non_null(r);
        freeReplyObject(r);
        a = h_rule(h[s], t + 20000, "bad", "big", 1);
        b = h_rule(h[s], t + 20000, "fine", "big", 1);
        h_flush(h[s]);
        assert_int_equal(h[s]->res[a].code, RL_CODE_OK);
        assert_non_null(strstr(h[s]->err[a], "store"));
        assert_int_equal(h[s]->res[b].code, RL_CODE_OK);
        assert_string_equal(h[s]->err[b], "");
        r = redisCommand(c, "GET rl:{bad}:r:big:2:l");
        assert_non_null(r);
        assert_string_equal(r->str, "0000000000000000000x");
        freeReplyObject(r);
        redisFree(c);
    }
    {
        const rls_rule_stats_t *st = rule_stats(h[0], "big");
        assert_true(st->allowed > 80 && st->refused > 1000);
    }
    for (s = 0; s < NSTORES; s++) {
        h_close(h[s]);
        free(h[s]);
    }
}

/* Logs longer than the script reads at once: it reads up to 64 entries
 * whole (32 + 24 x 64 bytes, one GETRANGE), a longer log from STRLEN, its
 * newest entry and chunks of 16 entries. Two callers ask every 40 ms for
 * 40 s, costs 1 to 3, one on a sliding window alone, one on a sliding
 * window beside a fixed window: their logs grow through exactly 64
 * entries to about 150 (with what left the window and is not yet
 * rewritten), entries leave the window one by one, the strings are
 * rewritten, and requests are refused all along; every store answers the
 * same, field by field. */
static void test_long_logs(void **state)
{
    static const char yaml[] =
        "rules:\n"
        "  big:\n"
        "    limits: [{limit: 150/10s, algorithm: sliding-window}]\n"
        "  bigmix:\n"
        "    limits: [120/8s:sliding-window, 700/1m]\n";
    static const char *const keys[] = {"rl:{p}:r:big:10:l",
                                       "rl:{q}:r:bigmix:8:l"};
    uint64_t B = base_ms(), t0 = B + 7200000, seed;
    h_t *h[NSTORES];
    size_t s, k, step;

    (void)state;
    for (s = 0; s < NSTORES; s++) {
        redisContext *c = NULL;
        long long most[2] = {0, 0};
        int at64[2] = {0, 0};

        h[s] = calloc(1, sizeof(*h[s]));
        assert_non_null(h[s]);
        h_open(h[s], (int)s, 64, 1);
        h_rules(h[s], yaml);
        if (s == 1) {
            c = rlt_redis_connect(&h[s]->redis);
            assert_non_null(c);
        }
        seed = 11;
        for (step = 0; step < 1000; step++) {
            uint64_t at = t0 + step * 40 + step % 3;
            h_rule(h[s], at, "p", "big", 1 + rnd(&seed) % 3);
            h_rule(h[s], at, "q", "bigmix", 1 + rnd(&seed) % 3);
            h_flush(h[s]);
            for (k = 0; c != NULL && k < 2; k++) {
                long long n = redis_ll(c, "STRLEN %s", keys[k]);
                most[k] = n > most[k] ? n : most[k];
                at64[k] |= n == 32 + 24 * 64;
            }
        }
        if (c != NULL) {
            /* the script's paths: whole, exactly 64, longer */
            for (k = 0; k < 2; k++) {
                assert_true(at64[k]);
                assert_true(most[k] > 32 + 24 * 100);
                /* within twice the live entries */
                assert_true(most[k] <= 32 + 24 * 2 * 150);
            }
            redisFree(c);
        }
    }
    for (s = 1; s < NSTORES; s++)
        assert_same(h[0], h[s], store_name[s]);
    for (k = 0; k < 2; k++) {
        const rls_rule_stats_t *st = rule_stats(h[0], k ? "bigmix" : "big");
        assert_true(st->allowed > 250 && st->refused > 500);
    }
    for (s = 0; s < NSTORES; s++) {
        h_close(h[s]);
        free(h[s]);
    }
}

/* phase: per-caller: each caller's 10 s windows start at its own offset,
 * the same on every store; a caller still gets exactly its limit per
 * window of its own. */
static void test_staggered_windows(void **state)
{
    static const char yaml[] = "rules:\n"
                               "  st:\n"
                               "    limits: [{limit: 3/10s, phase: "
                               "per-caller}]\n";
    uint64_t B = base_ms(), resets[64];
    size_t s, i, j, distinct = 0;

    (void)state;
    for (s = 0; s < NSTORES; s++) {
        h_t *h = calloc(1, sizeof(*h));
        assert_non_null(h);
        h_open(h, (int)s, 64, 1);
        h_rules(h, yaml);
        for (i = 0; i < 64; i++) {
            char key[16];
            size_t a, r;
            uint64_t end;
            snprintf(key, sizeof(key), "p%zu", i);
            a = h_rule(h, B, key, "st", 3);
            h_flush(h);
            assert_int_equal(h->res[a].code, RL_CODE_OK);
            end = B + h->res[a].reset_after_ms;
            if (s == 0)
                resets[i] = h->res[a].reset_after_ms;
            else
                assert_int_equal(h->res[a].reset_after_ms, resets[i]);
            /* refused until its own window ends, admitted then */
            r = h_rule(h, end - 1, key, "st", 1);
            h_flush(h);
            assert_int_equal(h->res[r].code, RL_CODE_OVER_LIMIT);
            assert_int_equal(h->res[r].retry_after_ms, 1);
            r = h_rule(h, end, key, "st", 3);
            h_flush(h);
            assert_int_equal(h->res[r].code, RL_CODE_OK);
            assert_int_equal(h->res[r].reset_after_ms, 10000);
        }
        h_close(h);
        free(h);
    }
    for (i = 0; i < 64; i++) {
        for (j = 0; j < i && resets[j] != resets[i]; j++)
            ;
        distinct += j == i;
    }
    assert_true(distinct > 48); /* spread over the window, not aligned */
}

/* Switches and reloads: a scale switch multiplies a gcra's rate and burst
 * (its interval follows, its TAT stays); mode off allows without counting;
 * a reload that makes the limit a fixed window starts it afresh (its own
 * keys), and one back to the gcra finds the TAT where it was. */
static void switch_set(h_t *h, const char *field, const char *value)
{
    rls_switches_t sw;
    const char *f[1] = {field}, *v[1] = {value};
    size_t fl[1] = {strlen(field)}, vl[1] = {strlen(value)}, bad = 0;

    memset(&sw, 0, sizeof(sw));
    assert_int_equal(rls_switches_parse(&sw, 1, f, fl, v, vl, &bad), RL_OK);
    assert_int_equal(bad, 0);
    assert_int_equal(rls_runtime_set_switches(&h->rt, &sw), RL_OK);
}

static void test_switches_and_reload(void **state)
{
    static const char gcra[] = "rules:\n  g:\n    limits: [2/1s:gcra]\n";
    static const char fixed[] = "rules:\n  g:\n    limits: [2/1s]\n";
    static const char slog[] =
        "rules:\n  g:\n    limits: [3/1s:sliding-window]\n";
    uint64_t t = base_ms() + 1000;
    h_t *h = calloc(1, sizeof(*h));
    size_t i, a;

    (void)state;
    assert_non_null(h);
    h_open(h, 0, 64, 1);
    h_rules(h, gcra);
    for (i = 0; i < 3; i++)
        h_rule(h, t, "k", "g", 1);
    h_flush(h);
    assert_int_equal(h->res[1].code, RL_CODE_OK);
    assert_int_equal(h->res[2].code, RL_CODE_OVER_LIMIT);
    assert_int_equal(h->res[2].retry_after_ms, 500); /* T = 500 ms */

    /* scale 2: 4 per second, burst 4, T = 250 ms; the TAT (t + 1 s) is
     * a full bucket at the new rate too, so the next fits 250 ms on. */
    switch_set(h, "scale:g", "2");
    a = h_rule(h, t + 249, "k", "g", 1);
    h_flush(h);
    assert_int_equal(h->res[a].code, RL_CODE_OVER_LIMIT);
    assert_int_equal(h->res[a].limit, 4);
    assert_int_equal(h->res[a].retry_after_ms, 1);
    a = h_rule(h, t + 250, "k", "g", 1);
    h_flush(h);
    assert_int_equal(h->res[a].code, RL_CODE_OK);
    assert_int_equal(h->res[a].remaining, 0);

    /* off (the switches are replaced whole: scale is 1 again): the front
     * ends answer it without the batcher, with the burst as limit */
    switch_set(h, "mode:g", "off");
    {
        rls_spec_t spec;
        rl_result_t r;
        resolve(h, "k", "g", 1, &spec);
        assert_int_equal(spec.mode, RLS_MODE_OFF);
        rls_spec_off_result(&spec, 9, &r);
        assert_int_equal(r.code, RL_CODE_OK);
        assert_int_equal(r.limit, 2);
        assert_int_equal(r.remaining, 2);
        assert_int_equal(r.used, 0);
    }
    switch_set(h, "mode:g", "enforce"); /* and scale back to 1 */

    /* a fixed window now: afresh, 2 in this second */
    assert_int_equal(rls_runtime_set_policy(&h->rt, policy(fixed)), RL_OK);
    for (i = 0; i < 3; i++)
        a = h_rule(h, t + 300, "k", "g", 1);
    h_flush(h);
    assert_int_equal(h->res[a - 1].code, RL_CODE_OK);
    assert_int_equal(h->res[a].code, RL_CODE_OVER_LIMIT);
    assert_int_equal(h->res[a].algorithm, RL_ALGO_FIXED);

    /* back to the gcra: its TAT (t + 1250 ms) is still there */
    assert_int_equal(rls_runtime_set_policy(&h->rt, policy(gcra)), RL_OK);
    a = h_rule(h, t + 300, "k", "g", 1);
    h_flush(h);
    assert_int_equal(h->res[a].code, RL_CODE_OVER_LIMIT);
    assert_int_equal(h->res[a].algorithm, RL_ALGO_GCRA);
    assert_int_equal(h->res[a].retry_after_ms, 450);

    /* a sliding window (3 per second), afresh: three fit, the fourth
     * waits for them to leave; scale 2 doubles it at once (the log
     * holds 3 of 6); shadow answers a refusal OK and counts it */
    assert_int_equal(rls_runtime_set_policy(&h->rt, policy(slog)), RL_OK);
    for (i = 0; i < 4; i++)
        a = h_rule(h, t + 400 + i, "k", "g", 1);
    h_flush(h);
    assert_int_equal(h->res[a - 1].code, RL_CODE_OK);
    assert_int_equal(h->res[a].code, RL_CODE_OVER_LIMIT);
    assert_int_equal(h->res[a].algorithm, RL_ALGO_SLIDING_LOG);
    /* the batch admitted the three at its one instant: they leave a
     * whole window later */
    assert_int_equal(h->res[a].retry_after_ms, 1000);
    switch_set(h, "scale:g", "2");
    for (i = 0; i < 4; i++)
        a = h_rule(h, t + 500, "k", "g", 1);
    h_flush(h);
    assert_int_equal(h->res[a - 1].code, RL_CODE_OK);
    assert_int_equal(h->res[a - 1].limit, 6);
    assert_int_equal(h->res[a].code, RL_CODE_OVER_LIMIT);
    switch_set(h, "mode:g", "shadow");
    a = h_rule(h, t + 501, "k", "g", 1);
    h_flush(h);
    assert_int_equal(h->res[a].code, RL_CODE_OK);
    assert_int_equal(h->res[a].shadow_refused, 1);
    h_close(h);
    free(h);
}

/* Stored quotas in any algorithm (as rl-ctl writes them), on the script
 * and the module alike: a gcra rule's caller with a quota of a gcra and a
 * sliding window (an "a" op's quota), a fixed rule's caller with a
 * sliding-window-counter and a sliding window (the general op's quota,
 * decided as an "a" op's), and a quota that does not parse on the gcra
 * rule (the rule's own limits, counted as unparsable). */
static void test_quotas_any_algorithm(void **state)
{
    static const char yaml[] = "rules:\n"
                               "  g:\n"
                               "    limits: [10/1s:gcra:burst=20]\n"
                               "  f:\n"
                               "    limits: [5/1m]\n";
    uint64_t t = base_ms() + 7200000 + 1234;
    h_t *h[NSTORES];
    size_t s, i, a, ok;

    (void)state;
    for (s = 1; s < NSTORES; s++) {
        rls_switches_t sw;
        const char *f[2] = {"quotas:g", "quotas:f"}, *v[2] = {"1", "1"};
        size_t fl[2] = {8, 8}, vl[2] = {1, 1}, bad = 0;
        redisContext *c;
        redisReply *r;

        h[s] = calloc(1, sizeof(*h[s]));
        assert_non_null(h[s]);
        h_open(h[s], (int)s, 64, 1);
        h_rules(h[s], yaml);
        memset(&sw, 0, sizeof(sw));
        assert_int_equal(rls_switches_parse(&sw, 2, f, fl, v, vl, &bad), RL_OK);
        assert_int_equal(rls_runtime_set_switches(&h[s]->rt, &sw), RL_OK);
        c = rlt_redis_connect(&h[s]->redis);
        assert_non_null(c);
        r = redisCommand(c, "HSET rl:{vip}:q g %s f %s",
                         "2/1:gcra:burst=3 4/60:sliding-window",
                         "3/60:sliding-window-counter 4/3600:sliding-window");
        assert_non_null(r);
        freeReplyObject(r);
        r = redisCommand(c, "HSET rl:{bad}:q g %s", "2/1:leaky");
        assert_non_null(r);
        freeReplyObject(r);

        /* vip under g: its gcra's burst of 3, then one each 500 ms */
        for (i = 0; i < 5; i++)
            a = h_rule(h[s], t, "vip", "g", 1);
        h_flush(h[s]);
        for (i = a - 4, ok = 0; i <= a; i++)
            ok += h[s]->res[i].code == RL_CODE_OK;
        assert_int_equal(ok, 3);
        assert_int_equal(h[s]->res[a].limit, 3);
        assert_int_equal(h[s]->res[a].algorithm, RL_ALGO_GCRA);
        assert_int_equal(h[s]->res[a].retry_after_ms, 500);
        a = h_rule(h[s], t + 499, "vip", "g", 1);
        h_flush(h[s]);
        assert_int_equal(h[s]->res[a].code, RL_CODE_OVER_LIMIT);
        a = h_rule(h[s], t + 500, "vip", "g", 1);
        h_flush(h[s]);
        assert_int_equal(h[s]->res[a].code, RL_CODE_OK);
        /* its sliding window: 4 in a minute (3 + 1 so far) */
        a = h_rule(h[s], t + 1500, "vip", "g", 1);
        h_flush(h[s]);
        assert_int_equal(h[s]->res[a].code, RL_CODE_OVER_LIMIT);
        assert_int_equal(h[s]->res[a].algorithm, RL_ALGO_SLIDING_LOG);
        assert_int_equal(h[s]->res[a].limit, 4);

        /* vip under f: the sliding-window-counter's 3 */
        for (i = 0; i < 4; i++)
            a = h_rule(h[s], t + 2000, "vip", "f", 1);
        h_flush(h[s]);
        assert_int_equal(h[s]->res[a - 1].code, RL_CODE_OK);
        assert_int_equal(h[s]->res[a].code, RL_CODE_OVER_LIMIT);
        assert_int_equal(h[s]->res[a].algorithm, RL_ALGO_SLIDING_COUNTER);
        assert_int_equal(h[s]->res[a].limit, 3);

        /* bad: the rule's burst of 20, and one unparsable quota counted
         * per op */
        for (i = 0; i < 25; i++)
            a = h_rule(h[s], t + 3000, "bad", "g", 1);
        h_flush(h[s]);
        assert_int_equal(h[s]->res[a - 5].code, RL_CODE_OK);
        assert_int_equal(h[s]->res[a - 4].code, RL_CODE_OVER_LIMIT);
        assert_int_equal(h[s]->res[a].limit, 20);
        assert_true(h[s]->store->inner->stats.bad_quotas >= 1);
        redisFree(c);
    }
    assert_same(h[1], h[2], store_name[2]);
    for (s = 1; s < NSTORES; s++) {
        h_close(h[s]);
        free(h[s]);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_stores_agree, h_teardown),
        cmocka_unit_test_teardown(test_boundary, h_teardown),
        cmocka_unit_test_teardown(test_retry_is_exact, h_teardown),
        cmocka_unit_test_teardown(test_refusal_consumes_nothing_and_ttls,
                                  h_teardown),
        cmocka_unit_test_teardown(test_staggered_windows, h_teardown),
        cmocka_unit_test_teardown(test_log_layout, h_teardown),
        cmocka_unit_test_teardown(test_long_logs, h_teardown),
        cmocka_unit_test_teardown(test_quotas_any_algorithm, h_teardown),
        cmocka_unit_test_teardown(test_switches_and_reload, h_teardown),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
