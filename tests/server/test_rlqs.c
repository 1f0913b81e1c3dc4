/* RLQS's arithmetic (server/rlqs/share.c) and its bucket configuration
 * (server/rlqs/conf.c): the division of a limit (shares add up to it at
 * most, each at least its floor, the rest by demand), the token bucket's
 * size, demand, which changes are sent (and that a share kept within 5%
 * still keeps the fleet within the limit), TTL renewal and expiry,
 * abandon; the configuration's defaults, errors and matching. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "rl_error.h"
#include "rlqs/conf.h"
#include "rlqs/share.h"
#include "rlqs/wire.h"

static uint64_t rnd_state = 88172645463325252ULL;

static uint64_t rnd(void)
{
    rnd_state ^= rnd_state << 13;
    rnd_state ^= rnd_state >> 7;
    rnd_state ^= rnd_state << 17;
    return rnd_state;
}

/* Shares of one view add up to the limit at most, each is at least
 * min(floor, limit / n), and none is over the limit; with demands that
 * leave something to divide, the sum is within n of the limit. */
static void test_share_sum(void **state)
{
    int trial;

    (void)state;
    for (trial = 0; trial < 20000; trial++) {
        uint64_t limit = 1 + rnd() % (trial % 2 ? 1000 : 1000000000);
        uint64_t floor = rnd() % 50, n = 1 + rnd() % 40, d[40], sum = 0;
        uint64_t total = 0, least = limit / n < floor ? limit / n : floor;
        uint64_t i;

        for (i = 0; i < n; i++) {
            d[i] = 1 + rnd() % (trial % 3 ? 1000 : 1000000);
            sum += d[i];
        }
        for (i = 0; i < n; i++) {
            uint64_t q = rls_rlqs_share(limit, floor, n, sum, d[i]);
            assert_true(q >= least);
            assert_true(q <= limit);
            total += q;
        }
        assert_true(total <= limit);
        assert_true(total + n >= limit);
    }
}

static void test_share_examples(void **state)
{
    (void)state;
    /* Alone: all of it. */
    assert_int_equal(rls_rlqs_share(285, 5, 1, 400, 400), 285);
    /* Two, 3:1 demand, floor 5: 5 each, then 275 by 3:1. */
    assert_int_equal(rls_rlqs_share(285, 5, 2, 400, 300), 5 + 206);
    assert_int_equal(rls_rlqs_share(285, 5, 2, 400, 100), 5 + 68);
    /* A new Envoy (demand 1) among big ones still gets its floor. */
    assert_true(rls_rlqs_share(285, 5, 6, 100001, 1) >= 5);
    /* More participants than requests: limit / n each (0 here). */
    assert_int_equal(rls_rlqs_share(3, 5, 4, 4, 1), 0);
    assert_int_equal(rls_rlqs_share(8, 5, 4, 4, 1), 2);
    /* Nothing to divide. */
    assert_int_equal(rls_rlqs_share(0, 5, 3, 3, 1), 0);
    /* Degenerate views are read as the participant alone. */
    assert_int_equal(rls_rlqs_share(100, 1, 0, 0, 0), 100);
    /* Large limits do not overflow. */
    assert_int_equal(rls_rlqs_share((uint64_t)1 << 53, 0, 2, 2, 1),
                     (uint64_t)1 << 52);
}

static void test_divided(void **state)
{
    (void)state;
    assert_int_equal(rls_rlqs_divided(300), 285);
    assert_int_equal(rls_rlqs_divided(21), 20);
    assert_int_equal(rls_rlqs_divided(1), 0);
    /* Shares kept above the newest (5% or 1 request: what share_changed
     * keeps) add up to the limit and 1 per participant at most. */
    for (int trial = 0; trial < 20000; trial++) {
        uint64_t limit = 1 + rnd() % 100000, n = 1 + rnd() % 30, sum = 0;
        uint64_t d[30], kept = 0, i;

        for (i = 0; i < n; i++) {
            d[i] = 1 + rnd() % 5000;
            sum += d[i];
        }
        for (i = 0; i < n; i++) {
            uint64_t q =
                rls_rlqs_share(rls_rlqs_divided(limit), 1, n, sum, d[i]);
            /* The largest old share that is kept. */
            uint64_t old = q * 21 / 20 > q + 1 ? q * 21 / 20 : q + 1;
            assert_false(rls_rlqs_share_changed(old, 1, q));
            kept += old;
        }
        assert_true(kept <= limit + n);
    }
}

static void test_changed(void **state)
{
    (void)state;
    assert_true(rls_rlqs_share_changed(0, 0, 10));
    /* Down: more than 5% below is sent. */
    assert_false(rls_rlqs_share_changed(105, 1, 100));
    assert_true(rls_rlqs_share_changed(106, 1, 100));
    /* Up: more than 5% and 1 request above is sent. */
    assert_false(rls_rlqs_share_changed(100, 1, 105));
    assert_true(rls_rlqs_share_changed(100, 1, 106));
    assert_false(rls_rlqs_share_changed(5, 1, 6));
    assert_true(rls_rlqs_share_changed(5, 1, 7));
    /* Down by 1 request is kept too (small shares would flip). */
    assert_false(rls_rlqs_share_changed(20, 1, 19));
    assert_false(rls_rlqs_share_changed(6, 1, 5));
    assert_true(rls_rlqs_share_changed(7, 1, 5));
    assert_false(rls_rlqs_share_changed(100, 1, 100));
}

static void test_burst(void **state)
{
    (void)state;
    assert_int_equal(rls_rlqs_burst(0, 0.1), 0);
    assert_int_equal(rls_rlqs_burst(1, 0.1), 1);
    assert_int_equal(rls_rlqs_burst(285, 0.1), 29);
    assert_int_equal(rls_rlqs_burst(100, 1.0), 100);
    assert_int_equal(rls_rlqs_burst(10, 0.0001), 1);
    assert_int_equal(rls_rlqs_burst((uint64_t)1 << 40, 1.0), UINT32_MAX);
}

static void test_demand(void **state)
{
    (void)state;
    /* A first report: its count as one second's. */
    assert_int_equal(rls_rlqs_demand(0, 1, 0, 1), 1);
    assert_int_equal(rls_rlqs_demand(0, 0, 0, 1), 1);
    /* 100 requests in 250 ms: 400 a second; 24000 a minute. */
    assert_int_equal(rls_rlqs_demand(0, 100, 250, 1), 400);
    assert_int_equal(rls_rlqs_demand(0, 100, 250, 60), 24000);
    /* The mean of the previous demand and this rate. */
    assert_int_equal(rls_rlqs_demand(400, 0, 250, 1), 200);
    assert_int_equal(rls_rlqs_demand(200, 200, 1000, 1), 200);
    /* Never 0, never past 2^53. */
    assert_int_equal(rls_rlqs_demand(1, 0, 1000, 1), 1);
    assert_true(rls_rlqs_demand(0, (uint64_t)1 << 53, 1, 86400) <
                ((uint64_t)1 << 54));
}

static void test_ttl_abandon(void **state)
{
    (void)state;
    /* Sent at 1000 for 2 s: renewed from 2000, expired from 3000. */
    assert_false(rls_rlqs_renew_due(1000, 2000, 1999));
    assert_true(rls_rlqs_renew_due(1000, 2000, 2000));
    assert_false(rls_rlqs_expired(1, 1000, 2000, 2999));
    assert_true(rls_rlqs_expired(1, 1000, 2000, 3000));
    assert_true(rls_rlqs_expired(0, 0, 0, 0)); /* none sent: nothing held */
    /* Abandoned abandon_s after the last report with requests. */
    assert_false(rls_rlqs_abandon_due(5000, 3, 7999));
    assert_true(rls_rlqs_abandon_due(5000, 3, 8000));
    assert_false(rls_rlqs_abandon_due(0, 0, UINT64_MAX / 2));
}

static int parse(const char *text, rls_rlqs_conf_t **c, char *err)
{
    return rls_rlqs_conf_parse(text, strlen(text), c, err, 256);
}

static void test_conf(void **state)
{
    rls_rlqs_conf_t *c;
    char err[256];
    const char *k[] = {"name", "tenant"}, *v[] = {"api", "t1"};
    const char *k2[] = {"name"}, *v2[] = {"web"};

    (void)state;
    assert_int_equal(parse("domain: envoy\n"
                           "buckets:\n"
                           "  - name: api\n"
                           "    match: {name: api, tenant: \"*\"}\n"
                           "    requests: 300\n"
                           "  - name: any\n"
                           "    match: {name: \"*\"}\n"
                           "    requests: 10\n"
                           "    unit: minute\n"
                           "    fallback: deny_all\n",
                           &c, err),
                     0);
    assert_string_equal(c->domain, "envoy");
    assert_int_equal(c->nrules, 2);
    assert_int_equal(c->min_report_ms, 100);
    assert_int_equal(c->unmatched, RLS_RLQS_ALLOW_ALL);
    /* The defaults. */
    assert_int_equal(c->rules[0].unit_s, 1);
    assert_int_equal(c->rules[0].floor, 1);
    assert_int_equal(c->rules[0].ttl_s, 10);
    assert_int_equal(c->rules[0].abandon_s, 60);
    assert_int_equal(c->rules[0].stale_ms, 5000);
    assert_int_equal(c->rules[0].fallback, RLS_RLQS_ALLOW_ALL);
    assert_int_equal(c->rules[1].unit_s, 60);
    assert_int_equal(c->rules[1].fallback, RLS_RLQS_DENY_ALL);
    /* First match wins; a key missing falls to the next rule. */
    assert_ptr_equal(rls_rlqs_conf_match(c, k, v, 2), &c->rules[0]);
    assert_ptr_equal(rls_rlqs_conf_match(c, k, v, 1), &c->rules[1]);
    assert_ptr_equal(rls_rlqs_conf_match(c, k2, v2, 1), &c->rules[1]);
    assert_null(rls_rlqs_conf_match(c, k + 1, v + 1, 1));
    rls_rlqs_conf_free(c);

    /* Errors say where. */
    assert_int_equal(
        parse("buckets:\n  - name: a\n    match: {k: v}\n", &c, err),
        RL_EINVAL);
    assert_null(c);
    assert_non_null(strstr(err, "line 2"));
    assert_int_equal(parse("buckets:\n  - name: a\n    match: {k: v}\n"
                           "    requests: 1\n    unit: week\n",
                           &c, err),
                     RL_EINVAL);
    assert_non_null(strstr(err, "line 5"));
    assert_int_equal(parse("bucket: []\n", &c, err), RL_EINVAL);
    assert_non_null(strstr(err, "unknown key"));
    assert_int_equal(parse("buckets:\n  - {name: a, match: {k: v}, "
                           "requests: 1}\n  - {name: a, match: {k: w}, "
                           "requests: 1}\n",
                           &c, err),
                     RL_EINVAL);
    assert_non_null(strstr(err, "twice"));
    assert_int_equal(parse("buckets:\n  - {name: a, match: {k: v}, "
                           "requests: 1, burst: 2}\n",
                           &c, err),
                     RL_EINVAL);
    assert_int_equal(parse("buckets:\n  - {name: a, match: {k: v}, "
                           "requests: 0}\n",
                           &c, err),
                     RL_EINVAL);
    assert_int_equal(parse("buckets: [\n", &c, err), RL_EINVAL);
    assert_non_null(strstr(err, "bad YAML"));
    assert_int_equal(parse("- 1\n", &c, err), RL_EINVAL);
    /* An empty list of rules is a configuration (everything unmatched). */
    assert_int_equal(parse("unmatched: deny_all\nbuckets: []\n", &c, err), 0);
    assert_int_equal(c->nrules, 0);
    assert_int_equal(c->unmatched, RLS_RLQS_DENY_ALL);
    rls_rlqs_conf_free(c);
    rls_rlqs_conf_free(NULL);
}

/* A bucket id of n pairs from kv (key, value, ...). */
typedef struct {
    rls_rlqs_entry_t ents[RLS_RLQS_PAIRS_MAX + 1];
    rls_rlqs_entry_t *entp[RLS_RLQS_PAIRS_MAX + 1];
    rls_rlqs_bid_t bid;
} bid_fx_t;

static rls_rlqs_bid_t *bid_of(bid_fx_t *f, const char *const *kv, size_t n)
{
    static const rls_rlqs_entry_t e0 =
        ENVOY__SERVICE__RATE_LIMIT_QUOTA__V3__BUCKET_ID__BUCKET_ENTRY__INIT;
    static const rls_rlqs_bid_t b0 =
        ENVOY__SERVICE__RATE_LIMIT_QUOTA__V3__BUCKET_ID__INIT;
    size_t i;

    f->bid = b0;
    for (i = 0; i < n; i++) {
        f->ents[i] = e0;
        f->ents[i].key = (char *)kv[2 * i];
        f->ents[i].value = (char *)kv[2 * i + 1];
        f->entp[i] = &f->ents[i];
    }
    f->bid.n_bucket = n;
    f->bid.bucket = f->entp;
    return &f->bid;
}

static void test_bucket_id(void **state)
{
    const char *ab[] = {"b", "2", "a", "1"}, *ba[] = {"a", "1", "b", "2"};
    const char *odd[] = {"k y", "v=1,x"}, *dup[] = {"a", "1", "a", "2"};
    const char *empty[] = {"a", ""}, *sev[] = {"a", "1", "b", "2"};
    char id1[RLS_RLQS_ID_MAX], id2[RLS_RLQS_ID_MAX], big[300], tiny[8];
    rls_rlqs_entry_t *e[RLS_RLQS_PAIRS_MAX];
    const char *many[2 * (RLS_RLQS_PAIRS_MAX + 1)];
    char names[RLS_RLQS_PAIRS_MAX + 1][4];
    bid_fx_t f;
    size_t i;

    (void)state;
    /* Order does not matter (Envoy: {a, b} and {b, a} are one bucket). */
    assert_null(rls_rlqs_bucket_check(bid_of(&f, ab, 2), e, id1, sizeof(id1)));
    assert_string_equal(e[0]->key, "a");
    assert_null(rls_rlqs_bucket_check(bid_of(&f, ba, 2), e, id2, sizeof(id2)));
    assert_string_equal(id1, id2);
    assert_string_equal(id1, "a=1,b=2,");
    /* Escaped, so that no pair reads as two. */
    assert_null(rls_rlqs_bucket_check(bid_of(&f, odd, 1), e, id1, sizeof(id1)));
    assert_string_equal(id1, "k%20y=v%3D1%2Cx,");
    /* Refused. */
    assert_non_null(rls_rlqs_bucket_check(NULL, e, id1, sizeof(id1)));
    assert_non_null(
        rls_rlqs_bucket_check(bid_of(&f, ab, 0), e, id1, sizeof(id1)));
    assert_non_null(
        rls_rlqs_bucket_check(bid_of(&f, dup, 2), e, id1, sizeof(id1)));
    assert_non_null(
        rls_rlqs_bucket_check(bid_of(&f, empty, 1), e, id1, sizeof(id1)));
    memset(big, 'v', sizeof(big));
    big[RLS_RLQS_VALUE_MAX + 1] = '\0';
    sev[1] = big;
    assert_non_null(
        rls_rlqs_bucket_check(bid_of(&f, sev, 1), e, id1, sizeof(id1)));
    big[RLS_RLQS_VALUE_MAX] = '\0';
    assert_null(rls_rlqs_bucket_check(bid_of(&f, sev, 1), e, id1, sizeof(id1)));
    assert_non_null(
        rls_rlqs_bucket_check(bid_of(&f, ab, 2), e, tiny, sizeof(tiny)));
    for (i = 0; i <= RLS_RLQS_PAIRS_MAX; i++) {
        snprintf(names[i], sizeof(names[i]), "k%zu", i);
        many[2 * i] = names[i];
        many[2 * i + 1] = "v";
    }
    assert_null(rls_rlqs_bucket_check(bid_of(&f, many, RLS_RLQS_PAIRS_MAX), e,
                                      id1, sizeof(id1)));
    assert_non_null(rls_rlqs_bucket_check(
        bid_of(&f, many, RLS_RLQS_PAIRS_MAX + 1), e, id1, sizeof(id1)));
}

static void test_budget_key(void **state)
{
    rls_rlqs_rule_t r;
    rls_rlqs_entry_t *e[RLS_RLQS_PAIRS_MAX];
    const char *kv[] = {"tenant", "a b", "name", "api", "extra", "x"};
    char id[RLS_RLQS_ID_MAX];
    bid_fx_t f;
    char *k;

    (void)state;
    memset(&r, 0, sizeof(r));
    strcpy(r.name, "per-tenant");
    r.nmatch = 2;
    strcpy(r.keys[0], "name");
    strcpy(r.vals[0], "api");
    strcpy(r.keys[1], "tenant");
    strcpy(r.vals[1], "*");
    assert_null(rls_rlqs_bucket_check(bid_of(&f, kv, 3), e, id, sizeof(id)));
    /* The rule's keys in its order; a key beyond them does not split. */
    k = rls_rlqs_budget_key("rl:", &r, e, 3);
    assert_non_null(k);
    assert_string_equal(k, "rl:rlqs{per-tenant:api|a%20b}");
    free(k);
    /* A key of the rule missing: no budget. */
    assert_null(rls_rlqs_budget_key("rl:", &r, e + 1, 1));
}

static void test_action(void **state)
{
    const char *keys[] = {"name", "tenant"}, *vals[] = {"api", "t1"};
    rls_rlqs_action_t a = {keys, vals, 2, RLS_RLQS_BUCKET, 0, 285, 29, 1, 10};
    Envoy__Service__RateLimitQuota__V3__RateLimitQuotaResponse *r;
    uint8_t buf[512];
    size_t n;
    int what;

    (void)state;
    for (what = RLS_RLQS_ABANDON; what <= RLS_RLQS_BUCKET; what++) {
        a.what = what;
        a.blanket = RLS_RLQS_DENY_ALL;
        n = rls_rlqs_action_size(&a);
        assert_true(n > 0 && n <= sizeof(buf));
        rls_rlqs_action_pack(&a, buf);
        r = envoy__service__rate_limit_quota__v3__rate_limit_quota_response__unpack(
            NULL, n, buf);
        assert_non_null(r);
        assert_int_equal(r->n_bucket_action, 1);
        assert_int_equal(r->bucket_action[0]->bucket_id->n_bucket, 2);
        assert_string_equal(r->bucket_action[0]->bucket_id->bucket[1]->value,
                            "t1");
        if (what == RLS_RLQS_ABANDON) {
            assert_int_equal(
                r->bucket_action[0]->bucket_action_case,
                ENVOY__SERVICE__RATE_LIMIT_QUOTA__V3__RATE_LIMIT_QUOTA_RESPONSE__BUCKET_ACTION__BUCKET_ACTION_ABANDON_ACTION);
        } else {
            const Envoy__Service__RateLimitQuota__V3__RateLimitQuotaResponse__BucketAction__QuotaAssignmentAction
                *q = r->bucket_action[0]->quota_assignment_action;
            assert_non_null(q);
            assert_int_equal(q->assignment_time_to_live->seconds, 10);
            if (what == RLS_RLQS_BLANKET) {
                assert_int_equal(
                    q->rate_limit_strategy->strategy_case,
                    ENVOY__TYPE__V3__RATE_LIMIT_STRATEGY__STRATEGY_BLANKET_RULE);
                assert_int_equal(
                    q->rate_limit_strategy->blanket_rule,
                    ENVOY__TYPE__V3__RATE_LIMIT_STRATEGY__BLANKET_RULE__DENY_ALL);
            } else {
                const Envoy__Type__V3__TokenBucket *tb =
                    q->rate_limit_strategy->token_bucket;
                assert_non_null(tb);
                assert_int_equal(tb->max_tokens, 29);
                assert_int_equal(tb->tokens_per_fill->value, 285);
                assert_int_equal(tb->fill_interval->seconds, 1);
            }
        }
        envoy__service__rate_limit_quota__v3__rate_limit_quota_response__free_unpacked(
            r, NULL);
    }
    /* ALLOW_ALL is 0, and still sent: the oneof says which. */
    a.what = RLS_RLQS_BLANKET;
    a.blanket = RLS_RLQS_ALLOW_ALL;
    n = rls_rlqs_action_size(&a);
    rls_rlqs_action_pack(&a, buf);
    r = envoy__service__rate_limit_quota__v3__rate_limit_quota_response__unpack(
        NULL, n, buf);
    assert_non_null(r);
    assert_int_equal(
        r->bucket_action[0]
            ->quota_assignment_action->rate_limit_strategy->strategy_case,
        ENVOY__TYPE__V3__RATE_LIMIT_STRATEGY__STRATEGY_BLANKET_RULE);
    envoy__service__rate_limit_quota__v3__rate_limit_quota_response__free_unpacked(
        r, NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_share_sum),
        cmocka_unit_test(test_share_examples),
        cmocka_unit_test(test_divided),
        cmocka_unit_test(test_changed),
        cmocka_unit_test(test_burst),
        cmocka_unit_test(test_demand),
        cmocka_unit_test(test_ttl_abandon),
        cmocka_unit_test(test_conf),
        cmocka_unit_test(test_bucket_id),
        cmocka_unit_test(test_budget_key),
        cmocka_unit_test(test_action),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
