/* The Redis store's decisions, as the script and the ratelimit module
 * make them in a private redis-server: several windows, costs in order,
 * refusals that create nothing, stored quotas (replacing the rule's
 * windows, scaled, or ignored when they do not parse); each checked
 * against lib's admission model (rl_admit.h). The module, where Redis has
 * it: used, given up when unloaded, deciding exactly as the script, and
 * replicated as it ran. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rl_admit.h"
#include "rl_error.h"
#include "store/redis.h"
#include "store/redis_encode.h"
#include "store/redis_parse.h"
#include "store/redis_script.h"
#include "store_redis_fx.h"

/* ---- the script's decisions: several windows, costs, quotas --------------*/

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
        assert_int_equal(j.nquota_win[0], 0);                                  \
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
static redisReply *raw_run(fx_t *f, const rls_op_t *ops, size_t n, uint64_t now,
                           int module)
{
    rls_cmdbuf_t buf = {NULL, 0, 0};
    redisReply *rep = NULL;
    int rc = module ? rls_redis_encode_module(&buf, ops, n, now, 1000, 0)
                    : rls_redis_encode(&buf, NULL, ops, n, now, 1000, 0);
    size_t len = buf.len;

    assert_int_equal(rc, 0);
    assert_true(len > 0);
    assert_int_equal(redisAppendFormattedCommand(f->rc, buf.p, len), REDIS_OK);
    assert_int_equal(redisGetReply(f->rc, (void **)&rep), REDIS_OK);
    assert_non_null(rep);
    free(buf.p);
    return rep;
}

/* Runs ops through the script on the blocking connection (EVAL, no
 * deadline; RL.BATCH with the module) and parses the reply. */
static int script_run(fx_t *f, rls_op_t *ops, size_t n, uint64_t now,
                      rls_op_window_t *quota_win, rls_redis_errs_t *errs)
{
    redisReply *rep = raw_run(f, ops, n, now, with_module());
    int rc;

    if (rep->type != REDIS_REPLY_ARRAY && rep->type != REDIS_REPLY_STRING)
        fail_msg("script reply type %d: %s", rep->type,
                 rep->type == REDIS_REPLY_ERROR ? rep->str : "");
    rc = rls_redis_parse_reply(rep, ops, n, quota_win, errs);
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
    static rls_op_window_t quota_win[PER * RL_ADMIT_WINDOWS_MAX];
    static long long preset[PER][4];
    static int set[PER][4];
    static uint64_t sum[PER], want[PER];
    rls_redis_errs_t errs;
    uint64_t now = redis_now_ms(f), nequal = 0, nrefused = 0, nruns = 0;
    size_t round, i, k;

    for (round = 0; round < ROUNDS; round++) {
        memset(&j, 0, sizeof(j));
        for (i = 0; i < PER; i++) {
            rl_admit_win_t w[4] = {{0}}, w2[4] = {{0}};
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
                    rls_wkey_fixed(&j.ops[i], lens[order[k]], 7, wk);
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
        assert_int_equal(script_run(f, j.ops, PER, now, quota_win, &errs), 0);
        assert_int_equal(errs.failed, 0);
        for (i = 0; i < PER; i++) {
            rls_op_t *op = &j.ops[i];

            assert_int_equal(op->err, 0);
            assert_int_equal(op->nquota_win, 0);
            if (op->admitted != want[i])
                fail_msg("round %zu op %zu: script admitted %llu, model %llu",
                         round, i, (unsigned long long)op->admitted,
                         (unsigned long long)want[i]);
            for (k = 0; k < op->nwin; k++) {
                rls_op_window_t *w = &op->win[k];
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

/* A refusal on a window nobody used yet creates no key; with the list
 * form too. Checked per created key: the keys that exist are exactly those
 * the model says received an admission or were preset. */
static void test_refusal_creates_no_key(void **state)
{
    fx_t *f = *state;
    static job_t j;
    static const uint32_t big[] = {9, 9}, mixed[] = {9, 4, 9};
    static rls_op_window_t quota_win[2 * RL_ADMIT_WINDOWS_MAX];
    rls_redis_errs_t errs;
    uint64_t now = redis_now_ms(f);

    job_costs(&j, 0, "rl:{nk:0}:r:t", 2, big, 2, 1);
    win_at(&j.win[0][0], 60, 5, now / 60000, 1000);
    win_at(&j.win[0][1], 3600, 50, now / 3600000, 1000);
    job_costs(&j, 1, "rl:{nk:1}:r:t", 2, mixed, 3, 0);
    win_at(&j.win[1][0], 60, 5, now / 60000, 1000);
    win_at(&j.win[1][1], 3600, 3, now / 3600000, 1000);
    assert_int_equal(script_run(f, j.ops, 2, now, quota_win, &errs), 0);
    assert_int_equal(j.ops[0].admitted, 0);
    assert_int_equal(j.ops[1].admitted, 0);
    assert_int_equal(redis_int(f, "DBSIZE%s", ""), 0);
}

/* A stored quota ("N/S N/S" under the rule's field of "<tag>:q") replaces
 * the rule's windows: decided on them, keys made for them, reported in
 * quota_win. One that does not parse is ignored and counted. */
static void test_quota_replaces_windows(void **state)
{
    logcap_t lc;
    static const char *const garbage[] = {
        "abc",         "0/60",
        "5/0",         "",
        " ",           "1/1 1/2 1/3 1/4 1/5 1/6 1/7 1/8 1/9", /* nine windows */
        "5/60 3/60", /* a window twice */
        "1.5/60",      "-5/60",
        "5/60,6/3600", "5/60 abc",
        "5/31622401",  "5/99999999999999999999",
        "5 / 60",      "5/60/60"};
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
    assert_int_equal(j.nquota_win[0], 2);
    assert_int_equal(j.quota_win[0][0].window_s, 60);
    assert_int_equal(j.quota_win[0][0].limit, 2);
    assert_int_equal(j.quota_win[0][0].before, 0);
    assert_int_equal(j.quota_win[0][1].window_s, 3600);
    assert_int_equal(j.quota_win[0][1].limit, 4);
    assert_int_equal(j.quota_win[0][1].before, 0);
    assert_int_equal(assert_counters_expire(f, "rl:{qa}:r:api:60:*", 1000, 50),
                     1);
    assert_int_equal(
        assert_counters_expire(f, "rl:{qa}:r:api:3600:*", 1000, 50), 1);
    /* Again: the quota's hour has 2 left, its minute none. */
    job_costs(&j, 0, "rl:{qa}:r:api", 1, ones, 3, 1);
    win_at(&j.win[0][0], 60, 10, now / 60000, 1000);
    job_quota(&j, 0, 1);
    run_job(f, &j, 1);
    assert_int_equal(j.ops[0].admitted, 0);
    assert_int_equal(j.quota_win[0][0].before, 2);
    assert_int_equal(j.quota_win[0][1].before, 2);
    /* The same op without a quota named: the rule's windows. */
    job_costs(&j, 0, "rl:{qa}:r:other", 1, ones, 3, 1);
    win_at(&j.win[0][0], 60, 10, now / 60000, 1000);
    run_job(f, &j, 1);
    assert_int_equal(j.ops[0].admitted, 3);
    assert_int_equal(j.nquota_win[0], 0);
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
    assert_int_equal(j.nquota_win[0], 2);
    assert_true(j.quota_win[0][0].limit >= (UINT64_C(1) << 62));
    assert_true(j.quota_win[0][0].limit <= INT64_MAX);
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
        if (j.ops[0].err != 0 || j.ops[0].admitted != 3 || j.nquota_win[0] != 0)
            fail_msg("quota \"%s\": err %d admitted %llu nquota_win %u",
                     garbage[g], j.ops[0].err,
                     (unsigned long long)j.ops[0].admitted, j.nquota_win[0]);
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
    } cases[] = {
        {0.5, 5, 1}, {0.05, 1, 1}, {2.5, 25, 7}, {1, 10, 3}, {0.999, 9, 2}};
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
        assert_int_equal(j.nquota_win[0], 2);
        assert_int_equal(j.quota_win[0][0].limit, cases[c].l60);
        assert_int_equal(j.quota_win[0][1].limit, cases[c].l3600);
        assert_int_equal(j.ops[0].admitted, cases[c].l60 < cases[c].l3600
                                                ? cases[c].l60
                                                : cases[c].l3600);
    }
    assert_int_equal(f->st->stats.bad_quotas, 0);
}

/* ---- the module ---------------------------------------------------------*/

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
        assert_int_equal(redis_int(f, "GET %s", "rl:{use}:r:t:60:1"), pass + 1);
        assert_int_equal(f->st->stats.redis_module, module);
        r = redisCommand(f->rc, "INFO commandstats");
        assert_non_null(r);
        assert_int_equal(r->type, REDIS_REPLY_STRING);
        if ((strstr(r->str, "cmdstat_rl.batch:calls=1,") != NULL) != module ||
            (strstr(r->str, "cmdstat_evalsha:calls=1,") != NULL) == module)
            fail_msg("pass %d, module expected %d: %s", pass, module, r->str);
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
    static const char *const text[] = {NULL, NULL, "abc", "9223372036854775807",
                                       NULL, "0"};
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
        fail_msg("round %zu: script reply type %d, module %d (%s / %s)", round,
                 a->type, b->type, a->type == REDIS_REPLY_ERROR ? a->str : "",
                 b->type == REDIS_REPLY_ERROR ? b->str : "");
    switch (a->type) {
    case REDIS_REPLY_INTEGER:
        if (a->integer != b->integer)
            fail_msg("round %zu: script %lld, module %lld", round, a->integer,
                     b->integer);
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
            fail_msg("round %zu: script \"%s\", module \"%s\"", round, a->str,
                     b->str);
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
    static const char *const quotas[] = {"2/60 4/3600",
                                         "3/60",
                                         "abc",
                                         "0/60",
                                         "5/60 3/60",
                                         "1.5/60",
                                         "9223372036854775807/60 3/3600",
                                         "5"};
    enum { NQ = sizeof(quotas) / sizeof(quotas[0]) };
    fx_t *f = *state;
    static job_t ja, jb;
    static rls_op_window_t quota_win[PER * RL_ADMIT_WINDOWS_MAX];
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
                snprintf(qk, sizeof(qk), "rl:{d%c%zu:%zu}:q", "AB"[k], round,
                         c);
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
                uint64_t lim = unit          ? 3 + 2 * rnd(2)
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
                    rls_wkey_fixed(h == 0 ? &ja.ops[i] : &jb.ops[i],
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
        assert_int_equal(
            rls_redis_parse_reply(ra, ja.ops, PER, quota_win, &errs), 0);
        for (i = 0; i < PER; i++)
            nrefused +=
                ja.ops[i].err == 0 && ja.ops[i].admitted < ja.ops[i].ncosts;
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
    /* WAIT in steps the client's 1 s timeout allows, until the replica
     * has it all (a loaded machine may take longer). */
    for (deadline = rlt_mono_ms() + 20000;;) {
        long long acked;
        r = redisCommand(f->rc, "WAIT 1 500");
        assert_non_null(r);
        acked = r->integer;
        freeReplyObject(r);
        if (acked == 1)
            break;
        assert_true(rlt_mono_ms() < deadline);
    }
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

/* Stores v as the state of limit w of caller base (key base + suffix,
 * kept 10 minutes), then asks one request of cost 1 against it through the
 * script or the module: 1 when Redis refused the op (its entry "eERR"),
 * and then the key must be left as it was; else 0. */
static int refused_on(fx_t *f, const char *base, const char *suffix,
                      const char *v, rls_op_window_t *w, uint64_t now,
                      int module)
{
    rls_op_t op = {0};
    uint32_t cost = 1;
    redisReply *r;
    int bad;

    r = redisCommand(f->rc, "SET %s%s %s PX 600000", base, suffix, v);
    assert_non_null(r);
    freeReplyObject(r);
    op.key = base;
    op.key_len = strlen(base);
    op.tag_len = 7;
    op.now_ms = now;
    op.win = w;
    op.nwin = 1;
    op.costs = &cost;
    op.ncosts = 1;
    r = raw_run(f, &op, 1, now, module);
    assert_int_equal(r->type, REDIS_REPLY_ARRAY);
    bad = r->element[0]->type == REDIS_REPLY_STRING &&
          strcmp(r->element[0]->str, "eERR") == 0;
    freeReplyObject(r);
    if (bad) {
        r = redisCommand(f->rc, "GET %s%s", base, suffix);
        assert_non_null(r);
        assert_int_equal(r->type, REDIS_REPLY_STRING);
        assert_string_equal(r->str, v);
        freeReplyObject(r);
    }
    return bad;
}

/* A sliding-window-counter's key holding what is no state (another
 * writer's): the script and the module refuse the same values, that op
 * alone ("eERR", nothing written), and read the same ones. */
static void test_swc_state_parsing(void **state)
{
    static const char *const bad[] = {"abc",
                                      "",
                                      "7",
                                      "1:2",
                                      "1:2:3:4",
                                      "-1:2:3",
                                      "x:1:2",
                                      "1::2",
                                      "1:2:",
                                      ":1:2",
                                      "1:a:2",
                                      "1:2:3 ",
                                      " 1:2:3",
                                      "1:2.5:3",
                                      "+1:2:3",
                                      "1:+2:3",
                                      "01:2:3",
                                      "1:00:3",
                                      "1:-0:3",
                                      "1:2:99999999999999999999",
                                      "1:2:9223372036854775808",
                                      "99999999999999999999:1:1",
                                      "1:-9223372036854775809:0"};
    static const char *const good[] = {"0:0:0", "1:-9223372036854775808:0",
                                       "1:9223372036854775807:0", "1:-2:3"};
    fx_t *f = *state;
    uint64_t now = redis_now_ms(f);
    size_t i, m;

    for (m = 0; m < (with_module() ? 2u : 1u); m++)
        for (i = 0; i < sizeof(bad) / sizeof(bad[0]) + 4; i++) {
            int is_bad = i < sizeof(bad) / sizeof(bad[0]);
            const char *v =
                is_bad ? bad[i] : good[i - sizeof(bad) / sizeof(bad[0])];
            rls_op_window_t w = {0};

            w.algo = RL_ALGO_SLIDING_COUNTER;
            w.window_s = 60;
            w.limit = 5;
            w.index = 1;
            w.reset_ms = 1000;
            w.expire_at_ms = now + 600000;
            w.weight = 100;
            if (is_bad !=
                refused_on(f, "rl:{sp}:r:x", ":60:s", v, &w, now, (int)m))
                fail_msg("%s: '%s' read as %s", m ? "module" : "script", v,
                         is_bad ? "a state" : "no state");
        }
}

/* One sliding-window-counter op of n requests of cost 1 (limit 60 per
 * 60 s) stamped t, through the script or the module: what it admitted. */
static uint64_t swc_at(fx_t *f, uint64_t t, uint32_t n, int module)
{
    rls_op_window_t w = {0};
    rls_op_t op = {0};
    redisReply *rep;
    rls_redis_errs_t errs;
    uint32_t one = 1;

    w.algo = RL_ALGO_SLIDING_COUNTER;
    w.window_s = 60;
    w.limit = 60;
    w.index = t / 60000;
    w.reset_ms = (w.index + 1) * 60000 - t;
    w.expire_at_ms = (w.index + 2) * 60000 + 1000;
    w.weight = rl_swc_weight(w.reset_ms, 60);
    op.key = "rl:{late}:r:x";
    op.key_len = strlen(op.key);
    op.tag_len = 9;
    op.now_ms = t;
    op.win = &w;
    op.nwin = 1;
    op.costs = &one;
    op.ncosts = n;
    op.equal_cost = 1;
    rep = raw_run(f, &op, 1, t, module);
    assert_int_equal(rep->type, REDIS_REPLY_ARRAY);
    assert_int_equal(rls_redis_parse_reply(rep, &op, 1, NULL, &errs), 0);
    freeReplyObject(rep);
    return op.admitted;
}

/* Two instances' batches reaching Redis out of stamp order across a
 * window's end: window I - 1 admitted 30, window I 59 (its share of I - 1
 * being 1 near its end), then a batch stamped in I + 1 moves the key on
 * (it keeps I's count, no longer I - 1's), and only then comes a batch
 * stamped 1 ms before I ends. I's 59 plus I - 1's share (1) leave no room:
 * the store must refuse it, deciding the count the key no longer holds as
 * full rather than as 0 (which admitted the 60th: the cluster_algorithms
 * audit's "60 admitted + the previous window's share 1 > limit 60" at a
 * window's last millisecond). */
static void test_swc_late_batch(void **state)
{
    fx_t *f = *state;
    uint64_t now = redis_now_ms(f), W = 60000, I = now / W + 2;
    size_t m;

    for (m = 0; m < (with_module() ? 2u : 1u); m++, I += 3) {
        redisReply *r = redisCommand(f->rc, "DEL rl:{late}:r:x:60:s");
        assert_non_null(r);
        freeReplyObject(r);
        assert_int_equal(swc_at(f, (I - 1) * W + 1000, 30, (int)m), 30);
        assert_int_equal(swc_at(f, I * W + W - 1000, 60, (int)m), 59);
        assert_int_equal(swc_at(f, (I + 1) * W + 1, 1, (int)m), 1);
        if (swc_at(f, (I + 1) * W - 1, 1, (int)m) != 0)
            fail_msg("%s: a late batch of window I admitted over I's 59 and "
                     "I - 1's share",
                     m ? "module" : "script");
    }
}

/* ---- Redis before 7 ------------------------------------------------------*/

/* A sliding window's log that is not one, or only partly: the script and
 * the module read the same bytes of it and refuse the same logs (the op
 * fails alone with eERR, the key left as it was). Both check the header,
 * the newest entry's time and every entry they read: those that left the
 * window and the first live one, and when the op's whole cost does not
 * fit, the live ones up to what a refusal needs. So a bad second live
 * entry passes both while the op fits (limit 10) and fails both when it
 * does not (limit 2). */
static void test_log_state_parsing(void **state)
{
    fx_t *f = *state;
    uint64_t now = redis_now_ms(f);
    char e_old[32], e_live[32], e_new[32], v[512];
    size_t i, m;

    snprintf(e_old, sizeof(e_old), "%014llu%010d",
             (unsigned long long)(now - 70000), 1);
    snprintf(e_live, sizeof(e_live), "%014llu%010d",
             (unsigned long long)(now - 5000), 1);
    snprintf(e_new, sizeof(e_new), "%014llu%010d",
             (unsigned long long)(now - 10), 1);
    /* the header (NULL: sum 3, the first entry at 32), then the entries,
     * e_old having left the window, e_new the newest */
    struct {
        const char *hdr, *e[3];
        uint64_t limit;
        int bad;
    } cases[] = {
        {NULL, {e_old, e_live, e_new}, 10, 0},
        {NULL, {e_live, e_new, ""}, 10, 0},
        {NULL, {"XX", "", ""}, 10, 1}, /* not 32 + 24 n bytes */
        {"0000000000000000000x000000000032", {e_old, e_live, e_new}, 10, 1},
        {NULL, {e_old, e_live, " 00000000000010000000001"}, 10, 1},
        {NULL, {e_old, e_live, "00000000001e050000000001"}, 10, 1},
        {NULL, {"00000000000x000000000001", e_live, e_new}, 10, 1},
        {NULL, {"0000000000000x0000000001", e_new, ""}, 10, 1},
        /* the second live entry: read only when the op does not fit */
        {NULL, {e_live, "00000000000000000000000x", e_new}, 10, 0},
        {NULL, {e_live, "00000000000000000000000x", e_new}, 2, 1},
    };
    for (m = 0; m < (with_module() ? 2u : 1u); m++)
        for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
            rls_op_window_t w = {0};
            int got_bad;

            if (cases[i].hdr != NULL)
                snprintf(v, sizeof(v), "%s%s%s%s", cases[i].hdr, cases[i].e[0],
                         cases[i].e[1], cases[i].e[2]);
            else
                snprintf(v, sizeof(v), "%020d%012d%s%s%s", 3, 32, cases[i].e[0],
                         cases[i].e[1], cases[i].e[2]);
            w.algo = RL_ALGO_SLIDING_LOG;
            w.window_s = 60;
            w.limit = cases[i].limit;
            w.expire_at_ms = now + 61000;
            got_bad = refused_on(f, "rl:{lp}:r:x", ":60:l", v, &w, now, (int)m);
            if (got_bad != cases[i].bad)
                fail_msg("%s: case %zu '%s' read as %s",
                         m ? "module" : "script", i, v,
                         got_bad ? "no log" : "a log");
        }
}

/* The script sets a sliding-window-counter's state and a gcra's TAT with
 * one SET ... PXAT (or KEEPTTL) where Redis names its version (7 and
 * later), and with SET then PEXPIREAT (or PTTL, SET, PEXPIRE) before.
 * Here the older path is forced (the script's text with the version test
 * made false): the same batches, over window changes and a clock that
 * sometimes reads behind, give the same replies, values and expiries. */
static void test_script_before_redis7(void **state)
{
    enum { CALLERS = 4, STEPS = 80 };
    static const char probe[] = "redis.REDIS_VERSION_NUM ~= nil";
    static const char *const suffix[] = {":60:s", ":10:s", ":1:g"};
    fx_t *f = *state;
    char *old = malloc(rls_redis_script_len + 1), *at, name[2][64];
    uint64_t now = redis_now_ms(f), t;
    size_t step, c, k, i, nstate = 0;

    assert_non_null(old);
    memcpy(old, rls_redis_script, rls_redis_script_len + 1);
    at = strstr(old, probe);
    assert_non_null(at);
    /* "false" and spaces: the same length, so the rest stays put. */
    memset(at, ' ', sizeof(probe) - 1);
    memcpy(at, "false", 5);
    for (step = 0; step < STEPS; step++) {
        rls_op_t ops[2][CALLERS];
        rls_op_window_t w[2][CALLERS][2];
        uint32_t costs[CALLERS][4];
        redisReply *rep[2];

        now += rnd(4) == 0 ? rnd(25000) : rnd(2000);
        /* A clock behind the one before, as another instance's may be. */
        t = rnd(4) == 0 ? now - rnd(5000) : now;
        for (k = 0; k < 2; k++)
            for (c = 0; c < CALLERS; c++) {
                rls_op_t *op = &ops[k][c];
                uint32_t nc = 1 + rnd(4);
                static char keys[2][CALLERS][32];
                snprintf(keys[k][c], sizeof(keys[k][c]), "rl:{o%c%zu}:r:x",
                         "AB"[k], c);
                memset(op, 0, sizeof(*op));
                op->key = keys[k][c];
                op->key_len = strlen(op->key);
                op->tag_len = (size_t)(strchr(op->key, '}') + 1 - op->key);
                op->now_ms = t;
                op->win = w[k][c];
                op->nwin = 1 + (c % 2);
                memset(w[k][c], 0, sizeof(w[k][c]));
                for (i = 0; i < op->nwin; i++) {
                    rls_op_window_t *wo = &w[k][c][i];
                    uint32_t ws = i == 1 ? 1 : c < 2 ? 60 : 10;
                    uint64_t W = (uint64_t)ws * 1000;
                    wo->window_s = ws;
                    if (i == 1) {
                        wo->algo = RL_ALGO_GCRA;
                        wo->limit = 3;
                        wo->t_us = 333334;
                        wo->expire_at_ms = 1000;
                        continue;
                    }
                    wo->algo = RL_ALGO_SLIDING_COUNTER;
                    wo->limit = 6;
                    wo->index = t / W;
                    wo->reset_ms = (wo->index + 1) * W - t;
                    wo->expire_at_ms = (wo->index + 2) * W + 1000;
                    wo->weight = rl_swc_weight(wo->reset_ms, ws);
                }
                if (k == 1) {
                    op->costs = ops[0][c].costs;
                    op->ncosts = ops[0][c].ncosts;
                    op->equal_cost = ops[0][c].equal_cost;
                    continue;
                }
                for (i = 0; i < nc; i++)
                    costs[c][i] = 1 + rnd(2);
                op->costs = costs[c];
                op->ncosts = nc;
            }
        for (k = 0; k < 2; k++) {
            rls_cmdbuf_t buf = {NULL, 0, 0};
            int rc =
                k == 0
                    ? rls_redis_encode(&buf, NULL, ops[k], CALLERS, t, 1000, 0)
                    : rls_redis_encode_ex(&buf, NULL, old, strlen(old), 0,
                                          ops[k], CALLERS, t, 1000, 0);
            assert_int_equal(rc, 0);
            assert_int_equal(redisAppendFormattedCommand(f->rc, buf.p, buf.len),
                             REDIS_OK);
            assert_int_equal(redisGetReply(f->rc, (void **)&rep[k]), REDIS_OK);
            assert_non_null(rep[k]);
            free(buf.p);
        }
        if (rep[0]->type != REDIS_REPLY_ARRAY)
            fail_msg("step %zu: reply type %d %s", step, rep[0]->type,
                     rep[0]->type == REDIS_REPLY_ERROR ? rep[0]->str : "");
        assert_int_equal(rep[1]->type, REDIS_REPLY_ARRAY);
        assert_int_equal(rep[0]->elements, rep[1]->elements);
        for (i = 0; i < rep[0]->elements; i++) {
            assert_int_equal(rep[0]->element[i]->type,
                             rep[1]->element[i]->type);
            if (rep[0]->element[i]->type == REDIS_REPLY_INTEGER)
                assert_int_equal(rep[0]->element[i]->integer,
                                 rep[1]->element[i]->integer);
        }
        freeReplyObject(rep[0]);
        freeReplyObject(rep[1]);
        for (c = 0; c < CALLERS; c++)
            for (i = 0; i < 3; i++) {
                redisReply *v[2], *x[2];
                for (k = 0; k < 2; k++) {
                    snprintf(name[k], sizeof(name[k]), "rl:{o%c%zu}:r:x%s",
                             "AB"[k], c, suffix[i]);
                    v[k] = redisCommand(f->rc, "GET %s", name[k]);
                    x[k] = redisCommand(f->rc, "PEXPIRETIME %s", name[k]);
                    assert_non_null(v[k]);
                    assert_non_null(x[k]);
                }
                assert_int_equal(v[0]->type, v[1]->type);
                if (v[0]->type == REDIS_REPLY_STRING) {
                    assert_string_equal(v[0]->str, v[1]->str);
                    nstate += i < 2;
                }
                /* Where the older path keeps an expiry (PTTL, then
                 * PEXPIRE of what it read) the key's end moves later by
                 * the time between the two calls (Redis reads its clock
                 * at each): never earlier, and within the grace. */
                if (x[1]->integer < x[0]->integer ||
                    x[1]->integer > x[0]->integer + 1000)
                    fail_msg("step %zu %s: expiry %lld, %lld on the older "
                             "path",
                             step, name[0], x[0]->integer, x[1]->integer);
                for (k = 0; k < 2; k++) {
                    freeReplyObject(v[k]);
                    freeReplyObject(x[k]);
                }
            }
    }
    assert_true(nstate > STEPS);
    free(old);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_two_windows, fx_setup,
                                        fx_teardown),
        cmocka_unit_test_setup_teardown(test_script_matches_model, fx_setup,
                                        fx_teardown),
        cmocka_unit_test_setup_teardown(test_refusal_creates_no_key, fx_setup,
                                        fx_teardown),
        cmocka_unit_test_setup_teardown(test_quota_replaces_windows, fx_setup,
                                        fx_teardown),
        cmocka_unit_test_setup_teardown(test_quota_scaled, fx_setup,
                                        fx_teardown),
        cmocka_unit_test_setup_teardown(test_module_in_use, fx_setup,
                                        fx_teardown),
        cmocka_unit_test_setup_teardown(test_module_matches_script, fx_setup,
                                        fx_teardown),
        cmocka_unit_test_setup_teardown(test_module_replicates, fx_setup,
                                        fx_teardown),
        cmocka_unit_test_setup_teardown(test_script_before_redis7, fx_setup,
                                        fx_teardown),
        cmocka_unit_test_setup_teardown(test_swc_state_parsing, fx_setup,
                                        fx_teardown),
        cmocka_unit_test_setup_teardown(test_log_state_parsing, fx_setup,
                                        fx_teardown),
        cmocka_unit_test_setup_teardown(test_swc_late_batch, fx_setup,
                                        fx_teardown),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
