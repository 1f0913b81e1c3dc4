/* All or nothing across levels (rls_batcher_add_group) through the
 * batcher, on a scripted clock (batch_fx.h), against every store: the
 * memory store (one stripe, and a table of 64 stripes, where a group's
 * levels fall in several), the Lua script and the Redis module. A group is
 * admitted only when every level's every limit has room, then charged in
 * each; refused, it charges nothing anywhere; the answer names the
 * deciding level. Groups share counters with single-rule requests and
 * with other groups in one batch, and stay exact: every store answers a
 * long mixed script identically, no level's count passes its limit, and
 * each level's count is exactly what its admitted requests cost. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <uv.h>

#include "batch_fx.h"
#include "core/top.h"
#include "rl_error.h"

#define NSTORES 4 /* memory, script, module, memory of 64 stripes */

static const int store_kind[NSTORES] = {0, 1, 2, 3};
static const char *const store_name[NSTORES] = {"memory", "script", "module",
                                                "memory-striped"};

static const char rules_yaml[] =
    "rules:\n"
    "  org:\n"
    "    limits: [3/1m]\n"
    "  user:\n"
    "    limits: [2/1m]\n"
    "  gorg:\n"
    "    limits: [{rate: 2/1m, burst: 2, algorithm: gcra}]\n"
    "  user5:\n"
    "    limits: [5/1m]\n"
    "  swc:\n"
    "    limits: [{limit: 4/1m, algorithm: sliding-window-counter}]\n"
    "  org10:\n"
    "    limits: [20/10s]\n"
    "  user10:\n"
    "    limits: [6/10s, 15/1m]\n";

static h_t *open_store(int kind, size_t max_reqs)
{
    h_t *h = calloc(1, sizeof(*h));

    assert_non_null(h);
    h_open(h, kind, max_reqs, 1);
    h_rules(h, rules_yaml);
    return h;
}

static void close_store(h_t *h)
{
    h_close(h);
    free(h);
}

static size_t group2(h_t *h, uint64_t t, const char *k1, const char *r1,
                     const char *k2, const char *r2, uint32_t cost)
{
    const char *keys[2] = {k1, k2}, *rules[2] = {r1, r2};

    return h_group(h, t, 2, keys, rules, cost);
}

static void expect(const h_t *h, size_t i, int code, uint32_t level,
                   uint64_t limit, uint64_t used)
{
    const rl_result_t *r = &h->res[i];

    if (r->code != code || r->level != level || r->limit != limit ||
        r->used != used)
        fail_msg("request %zu: code=%d level=%u limit=%llu used=%llu; "
                 "expected code=%d level=%u limit=%llu used=%llu",
                 i, r->code, r->level, (unsigned long long)r->limit,
                 (unsigned long long)r->used, code, level,
                 (unsigned long long)limit, (unsigned long long)used);
}

/* The organisation allows 3 a minute, each user 2: a user's third
 * request is refused by the user level and spends nothing of the
 * organisation's, which another user then gets; the organisation's
 * refusal spends nothing of that user's. Each request in a batch of its
 * own (together 0), or all in one batch (together 1), where each op is
 * decided from the counts the one before it left. */
static void scenario(h_t *h, uint64_t t, int together)
{
    size_t g[5], p[2];

#define STEP(x)                                                                \
    do {                                                                       \
        x;                                                                     \
        if (!together)                                                         \
            h_flush(h);                                                        \
    } while (0)
    STEP(g[0] = group2(h, t, "org:acme", "org", "user:a", "user", 1));
    STEP(g[1] = group2(h, t, "org:acme", "org", "user:a", "user", 1));
    STEP(g[2] = group2(h, t, "org:acme", "org", "user:a", "user", 1));
    STEP(g[3] = group2(h, t, "org:acme", "org", "user:b", "user", 1));
    STEP(g[4] = group2(h, t, "org:acme", "org", "user:c", "user", 1));
    /* Probes that no limit holds: refused, they show the counts. */
    STEP(p[0] = h_rule(h, t, "user:c", "user", 3));
    STEP(p[1] = h_rule(h, t, "org:acme", "org", 4));
#undef STEP
    h_flush(h);
    expect(h, g[0], RL_CODE_OK, 2, 2, 1);
    expect(h, g[1], RL_CODE_OK, 2, 2, 2);
    expect(h, g[2], RL_CODE_OVER_LIMIT, 2, 2, 2);
    expect(h, g[3], RL_CODE_OK, 1, 3, 3); /* g[2] spent no org */
    expect(h, g[4], RL_CODE_OVER_LIMIT, 1, 3, 3);
    expect(h, p[0], RL_CODE_OVER_LIMIT, 0, 2, 0); /* g[4] spent no user */
    expect(h, p[1], RL_CODE_OVER_LIMIT, 0, 3, 3);
    assert_true(h->res[g[2]].retry_after_ms > 0);
    /* Allowed in every level's rule; refused in the refusing one's. */
    assert_int_equal(rule_stats(h, "org")->allowed, 3);
    assert_int_equal(rule_stats(h, "org")->refused, 2); /* g[4], p[1] */
    assert_int_equal(rule_stats(h, "user")->allowed, 3);
    assert_int_equal(rule_stats(h, "user")->refused, 2); /* g[2], p[0] */
    assert_int_equal(h->b.stats.groups, 5);
}

static void test_all_or_nothing(void **state)
{
    uint64_t B = base_ms();
    size_t s;
    int together;

    (void)state;
    for (s = 0; s < NSTORES; s++)
        for (together = 0; together < 2; together++) {
            h_t *h = open_store(store_kind[s], 64);
            print_message("%s, %s\n", store_name[s],
                          together ? "one batch" : "a batch each");
            scenario(h, B + 1000, together);
            close_store(h);
        }
}

/* The caller key's refusals in top's sketch of rule (0: none). */
static uint64_t top_count(rls_top_t *top, const char *rule, const char *key,
                          uint64_t now_ms)
{
    rl_topk_sum_t s;
    uint64_t since, n = 0;
    size_t i;

    assert_int_equal(
        rls_top_read(top, rule, strlen(rule), now_ms, 32, &s, &since), RL_OK);
    for (i = 0; i < s.n; i++)
        if (s.e[i].len == strlen(key) &&
            memcmp(s.e[i].key, key, s.e[i].len) == 0)
            n = s.e[i].count;
    rl_topk_sum_free(&s);
    return n;
}

/* A group's refusal counts among the top offenders of the level that
 * refused, for that level's caller, as a lone request's refusal does: in
 * the scenario, user:a's third group (by user) and user:c's (by org, for
 * org:acme), beside the two probes (user:c by user, org:acme by org). */
static void test_top_offenders(void **state)
{
    uint64_t B = base_ms(), t = B + 1000;
    rls_top_t *top = rls_top_new(8, 300);
    h_t *h;

    (void)state;
    assert_non_null(top);
    h = open_store(0, 64);
    h->b.top = rls_top_join(top);
    assert_non_null(h->b.top);
    scenario(h, t, 1);
    assert_int_equal(top_count(top, "user", "user:a", t), 1);
    assert_int_equal(top_count(top, "user", "user:c", t), 1);
    assert_int_equal(top_count(top, "org", "org:acme", t), 2);
    assert_int_equal(top_count(top, "org", "user:c", t), 0);
    close_store(h);
    rls_top_free(top);
}

/* Levels of other algorithms: a gcra organisation refuses the third
 * request, which spends nothing of the user's fixed window nor of
 * another user's sliding-window-counter. */
static void test_algorithms(void **state)
{
    uint64_t B = base_ms(), t = B + 5000;
    size_t s;

    (void)state;
    for (s = 0; s < NSTORES; s++) {
        h_t *h = open_store(store_kind[s], 64);
        size_t g0, g1, g2, g3, p0, p1;
        g0 = group2(h, t, "org:x", "gorg", "user:a", "user5", 1);
        g1 = group2(h, t, "org:x", "gorg", "user:b", "swc", 1);
        g2 = group2(h, t, "org:x", "gorg", "user:a", "user5", 1);
        g3 = group2(h, t, "org:x", "gorg", "user:b", "swc", 1);
        p0 = h_rule(h, t, "user:a", "user5", 6);
        p1 = h_rule(h, t, "user:b", "swc", 5);
        h_flush(h);
        print_message("%s\n", store_name[s]);
        assert_int_equal(h->res[g0].code, RL_CODE_OK);
        assert_int_equal(h->res[g1].code, RL_CODE_OK);
        expect(h, g2, RL_CODE_OVER_LIMIT, 1, 2, 2);
        assert_int_equal(h->res[g2].algorithm, RL_ALGO_GCRA);
        expect(h, g3, RL_CODE_OVER_LIMIT, 1, 2, 2);
        expect(h, p0, RL_CODE_OVER_LIMIT, 0, 5, 1);
        expect(h, p1, RL_CODE_OVER_LIMIT, 0, 4, 1);
        close_store(h);
    }
}

/* ---- every store, one long script of groups and single requests ---- */

#define NORG 3
#define NUSER 6

typedef struct {
    uint64_t org[NORG][8];  /* admitted per org and 10 s window */
    uint64_t u10[NUSER][8]; /* per user and 10 s window */
    uint64_t u60[NUSER][2]; /* per user and minute */
} tally_t;

/* 120 steps a quarter second apart (three 10 s windows, a minute's
 * edge), 1 to 8 requests each: groups of a user and its organisation, or
 * one of them alone, costs 1 or 2, batches of at most 7. Returns the
 * requests' kinds so that the tally can be made from the answers. */
typedef struct {
    int kind; /* 0 group, 1 org alone, 2 user alone */
    int org, user;
    uint32_t cost;
    uint64_t t;
} req_t;

static size_t script_mixed(h_t *h, uint64_t B, req_t *rq)
{
    uint64_t seed = 46461;
    size_t step, k, n = 0;
    char ok[16], uk[16];

    for (step = 0; step < 120; step++) {
        uint64_t t = B + 55000 + step * 250 + step % 5;
        uint32_t nreq = 1 + rnd(&seed) % 8;

        for (k = 0; k < nreq; k++) {
            req_t *q = &rq[n++];
            q->user = (int)(rnd(&seed) % NUSER);
            q->org = q->user % NORG;
            q->kind = rnd(&seed) % 4 == 0 ? (int)(1 + rnd(&seed) % 2) : 0;
            q->cost = 1 + rnd(&seed) % 2;
            q->t = t;
            snprintf(ok, sizeof(ok), "org:%d", q->org);
            snprintf(uk, sizeof(uk), "user:%d", q->user);
            if (q->kind == 0)
                group2(h, t, ok, "org10", uk, "user10", q->cost);
            else if (q->kind == 1)
                h_rule(h, t, ok, "org10", q->cost);
            else
                h_rule(h, t, uk, "user10", q->cost);
        }
        h_flush(h);
    }
    return n;
}

static void test_stores_agree(void **state)
{
    static req_t rq[1200];
    static tally_t ty;
    h_t *h[NSTORES];
    uint64_t B = base_ms(), tend = B + 55000 + 120 * 250;
    size_t s, n = 0, i, nref = 0, nok = 0, byl[2] = {0, 0};
    int o, u;

    (void)state;
    for (s = 0; s < NSTORES; s++) {
        h[s] = open_store(store_kind[s], 7);
        n = script_mixed(h[s], B, rq);
    }
    for (s = 1; s < NSTORES; s++) {
        for (i = 0; i < n; i++) {
            const rl_result_t *x = &h[0]->res[i], *y = &h[s]->res[i];
            if (x->code != y->code || x->level != y->level ||
                x->limit != y->limit || x->used != y->used ||
                x->remaining != y->remaining ||
                x->retry_after_ms != y->retry_after_ms)
                fail_msg("request %zu: memory code=%d level=%u used=%llu, "
                         "%s code=%d level=%u used=%llu",
                         i, x->code, x->level, (unsigned long long)x->used,
                         store_name[s], y->code, y->level,
                         (unsigned long long)y->used);
        }
    }
    /* The tally of what was admitted, level by level, from the answers:
     * never past a limit. */
    memset(&ty, 0, sizeof(ty));
    for (i = 0; i < n; i++) {
        const req_t *q = &rq[i];
        size_t w10 = (size_t)((q->t - B) / 10000) - 5,
               w60 = (size_t)((q->t - B) / 60000);
        if (h[0]->res[i].code != RL_CODE_OK) {
            nref += q->kind == 0;
            if (q->kind == 0)
                byl[h[0]->res[i].level == 1 ? 0 : 1]++;
            continue;
        }
        nok += q->kind == 0;
        if (q->kind != 2)
            ty.org[q->org][w10] += q->cost;
        if (q->kind != 1) {
            ty.u10[q->user][w10] += q->cost;
            ty.u60[q->user][w60] += q->cost;
        }
        assert_true(ty.org[q->org][w10] <= 20);
        assert_true(ty.u10[q->user][w10] <= 6);
        assert_true(ty.u60[q->user][w60] <= 15);
    }
    /* Not a trivial script: groups were allowed, and refused at either
     * level. */
    print_message("groups allowed %zu, refused %zu (by the org %zu, by the "
                  "user %zu)\n",
                  nok, nref, byl[0], byl[1]);
    assert_true(nok > 50 && byl[0] > 20 && byl[1] > 20);
    for (s = 0; s < NSTORES; s++) {
        size_t wend10 = (size_t)((tend - B) / 10000) - 5,
               wend60 = (size_t)((tend - B) / 60000);
        size_t po[NORG], pu[NUSER];
        char key[16];
        /* Probes no limit holds show each level's counts at the end:
         * exactly what its admitted requests cost. */
        for (o = 0; o < NORG; o++) {
            snprintf(key, sizeof(key), "org:%d", o);
            po[o] = h_rule(h[s], tend, key, "org10", 100);
        }
        for (u = 0; u < NUSER; u++) {
            snprintf(key, sizeof(key), "user:%d", u);
            pu[u] = h_rule(h[s], tend, key, "user10", 100);
        }
        h_flush(h[s]);
        for (o = 0; o < NORG; o++)
            assert_int_equal(h[s]->res[po[o]].used, ty.org[o][wend10]);
        for (u = 0; u < NUSER; u++) {
            /* The minute, which frees up last, decides the refusal. */
            assert_int_equal(h[s]->res[pu[u]].window_s, 60);
            assert_int_equal(h[s]->res[pu[u]].used, ty.u60[u][wend60]);
        }
        close_store(h[s]);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_all_or_nothing, h_teardown),
        cmocka_unit_test_teardown(test_top_offenders, h_teardown),
        cmocka_unit_test_teardown(test_algorithms, h_teardown),
        cmocka_unit_test_teardown(test_stores_agree, h_teardown),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
