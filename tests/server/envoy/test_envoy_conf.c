/* The --envoy-config loader and matcher (server/envoy/conf.c) and
 * the counter keys of Envoy descriptors (server/envoy/rls.c). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "google/protobuf/struct.pb-c.h"
#include "envoy/rls.h"
#include "envoy/conf.h"
#include "rl_error.h"

static rls_envoy_conf_t *build(const char *yaml, rls_diag_t *d, int *rc)
{
    rls_envoy_conf_t *c = NULL;

    *rc = rls_envoy_conf_build_buf("t.yaml", yaml, strlen(yaml), &c, d);
    return c;
}

/* Walks pairs (k1, v1, k2, v2, ..., NULL) from the top. */
static const rls_envoy_node_t *walk(const rls_envoy_conf_t *c,
                                    const char *domain, ...)
{
    const rls_envoy_domain_t *d =
        rls_envoy_conf_domain(c, domain, strlen(domain));
    const rls_envoy_node_t *x = NULL;
    const char *k, *v;
    va_list ap;

    assert_non_null(d);
    va_start(ap, domain);
    while ((k = va_arg(ap, const char *)) != NULL) {
        v = va_arg(ap, const char *);
        x = rls_envoy_conf_step(c, d, x, k, strlen(k), v, strlen(v));
        if (x == NULL)
            break;
    }
    va_end(ap);
    return x;
}

static const char example[] =
    "domain: edge\n"
    "descriptors:\n"
    "  - key: remote_address\n"
    "    rate_limit: {unit: second, requests_per_unit: 10}\n"
    "  - key: remote_address\n"
    "    value: 50.0.0.5\n"
    "    rate_limit: {unit: second, requests_per_unit: 0}\n"
    "  - key: path\n"
    "    value: /api/*\n"
    "    rate_limit: {unit: minute, requests_per_unit: 7}\n"
    "  - key: path\n"
    "    value: /api/v1\n"
    "    rate_limit: {unit: hour, requests_per_unit: 8}\n"
    "  - key: path\n"
    "    rate_limit: {window: 90s, requests_per_unit: 9, name: all}\n"
    "  - key: tenant\n"
    "    value: acme\n"
    "    descriptors:\n"
    "      - key: user\n"
    "        rule: api\n"
    "        shadow_mode: true\n"
    "      - key: ldap\n"
    "        unlimited: true\n";

static void test_matching(void **state)
{
    rls_diag_t d;
    int rc;
    rls_envoy_conf_t *c = build(example, &d, &rc);
    const rls_envoy_node_t *x;

    (void)state;
    assert_int_equal(rc, RL_OK);
    assert_int_equal(rls_envoy_conf_domains(c), 1);
    /* key + value before key alone */
    x = walk(c, "edge", "remote_address", "50.0.0.5", NULL);
    assert_non_null(x);
    assert_int_equal(x->kind, RLS_ENVOY_LIMIT);
    assert_int_equal(x->lim.limit, 0);
    x = walk(c, "edge", "remote_address", "1.2.3.4", NULL);
    assert_int_equal(x->lim.limit, 10);
    assert_int_equal(x->lim.window_s, 1);
    assert_int_equal(x->unit, 1);
    /* exact, then wildcard, then key alone */
    assert_int_equal(walk(c, "edge", "path", "/api/v1", NULL)->lim.limit, 8);
    assert_int_equal(walk(c, "edge", "path", "/api/v2", NULL)->lim.limit, 7);
    x = walk(c, "edge", "path", "/other", NULL);
    assert_int_equal(x->lim.limit, 9);
    assert_int_equal(x->lim.window_s, 90);
    assert_int_equal(x->unit, 0);
    assert_string_equal(x->name, "all");
    /* nested: a placeholder, then its children */
    x = walk(c, "edge", "tenant", "acme", NULL);
    assert_int_equal(x->kind, RLS_ENVOY_NONE);
    x = walk(c, "edge", "tenant", "acme", "user", "u1", NULL);
    assert_int_equal(x->kind, RLS_ENVOY_RULE);
    assert_string_equal(x->rule, "api");
    assert_int_equal(x->shadow, 1);
    x = walk(c, "edge", "tenant", "acme", "ldap", "x", NULL);
    assert_int_equal(x->kind, RLS_ENVOY_UNLIMITED);
    /* no match */
    assert_null(walk(c, "edge", "tenant", "other", "user", "u1", NULL));
    assert_null(walk(c, "edge", "nope", "x", NULL));
    assert_null(rls_envoy_conf_domain(c, "other", 5));
    rls_envoy_conf_unref(c);
}

/* Every error, each with its line, in one run. */
static void test_errors(void **state)
{
    static const char bad[] =
        "domain: x\n"                                               /* 1 */
        "descriptors:\n"                                            /* 2 */
        "  - key: a\n"                                              /* 3 */
        "    rate_limit: {unit: fortnight, requests_per_unit: 5}\n" /* 4 */
        "  - value: b\n"                                            /* 5 */
        "  - key: c\n"                                              /* 6 */
        "    rate_limit: {requests_per_unit: 1}\n"                  /* 7 */
        "  - key: d\n"                                              /* 8 */
        "    bogus: 1\n"                                            /* 9 */
        "  - key: e\n"                                              /* 10 */
        "    rate_limit: {unit: second, requests_per_unit: 1,\n"    /* 11 */
        "                 name: q, replaces: [{name: q}]}\n"        /* 12 */
        "  - key: a\n"                                              /* 13 */
        "    rate_limit: {unit: second, requests_per_unit: 1}\n"    /* 14 */
        "  - key: f\n"                                              /* 15 */
        "    value: plain\n"                                        /* 16 */
        "    share_threshold: true\n"                               /* 17 */
        "  - key: g\n"                                              /* 18 */
        "    rate_limit: {unit: second, replaces: [{name: ''}]}\n"  /* 19 */
        "  - key: h\n"                                              /* 20 */
        "    rate_limit: {unit: second, replaces: [{nom: z}]}\n"    /* 21 */
        "  - key: i\n"                                              /* 22 */
        "    value: w*\n"                                           /* 23 */
        "  - key: i\n"                                              /* 24 */
        "    value: w*\n"                                           /* 25 */
        "  - key: j\n"                                              /* 26 */
        "    metadata: [1, 2]\n"                                    /* 27 */
        "    quota_mode: maybe\n";                                  /* 28 */
    static const char *const want[] = {
        "t.yaml:4: unit 'fortnight'",
        "t.yaml:5: descriptor without 'key'",
        "t.yaml:7: rate_limit needs 'unit'",
        "t.yaml:9: unknown key 'bogus' in a descriptor",
        "t.yaml:11: rate_limit: replaces names this limit itself",
        "t.yaml:13: duplicate descriptor key 'a'",
        "t.yaml:15: share_threshold needs a wildcard value",
        "t.yaml:19: a 'replaces' name must not be empty",
        "t.yaml:21: unknown key 'nom' in replaces",
        "t.yaml:21: a 'replaces' entry needs 'name'",
        "t.yaml:24: duplicate descriptor key 'i' value 'w*'",
        "t.yaml:27: 'metadata' must be a mapping",
        "t.yaml:28: 'quota_mode' must be true or false",
    };
    rls_diag_t d;
    int rc;
    size_t i, j;

    (void)state;
    assert_null(build(bad, &d, &rc));
    assert_int_equal(rc, RL_EINVAL);
    for (j = 0; j < d.n; j++)
        printf("  got: %s\n", d.msg[j]);
    for (i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
        int found = 0;
        for (j = 0; j < d.n; j++)
            found |= strncmp(d.msg[j], want[i], strlen(want[i])) == 0;
        if (!found)
            fail_msg("missing: %s", want[i]);
    }
    assert_int_equal(d.n, sizeof(want) / sizeof(want[0]));
}

/* `unlimited` at the descriptor beside a rate_limit: envoy-ratelimit
 * reads it inside rate_limit only, so the file loads and the limit holds,
 * with a warning naming the line; alone it is unlimited, as before. */
static void test_unlimited_beside(void **state)
{
    static const char yaml[] = "domain: u\n"
                               "descriptors:\n"
                               "  - key: a\n" /* 3 */
                               "    unlimited: true\n"
                               "    rate_limit: {unit: second, "
                               "requests_per_unit: 5}\n"
                               "  - key: b\n"
                               "    unlimited: true\n";
    rls_diag_t d;
    int rc;
    rls_envoy_conf_t *c = build(yaml, &d, &rc);
    const rls_diag_t *w;
    const rls_envoy_node_t *x;

    (void)state;
    assert_int_equal(rc, RL_OK);
    x = walk(c, "u", "a", "v", NULL);
    assert_non_null(x);
    assert_int_equal(x->kind, RLS_ENVOY_LIMIT);
    assert_int_equal(x->lim.limit, 5);
    x = walk(c, "u", "b", "v", NULL);
    assert_int_equal(x->kind, RLS_ENVOY_UNLIMITED);
    w = rls_envoy_conf_warnings(c);
    assert_int_equal(w->n, 1);
    assert_non_null(strstr(w->msg[0], ":3: 'unlimited' beside 'rate_limit'"));
    rls_envoy_conf_unref(c);
}

/* What today's envoy-ratelimit files use: the keys it added since, read
 * as it reads them. */
static void test_reference_keys(void **state)
{
    static const char yaml[] =
        "domain: ref\n"               /* 1 */
        "descriptors:\n"              /* 2 */
        "  - key: path\n"             /* 3 */
        "    value: /api/*/action\n"  /* 4 */
        "    share_threshold: true\n" /* 5 */
        "    quota_mode: true\n"      /* 6 */
        "    rate_limit: {unit: Month, requests_per_unit: 5, name: m,\n"
        "                 replaces: [{name: a}, {name: bb}]}\n" /* 8 */
        "  - key: path\n"                                       /* 9 */
        "    value: /x*y*z\n"                                   /* 10 */
        "    value_to_metric: true\n"                           /* 11 */
        "    detailed_metric: true\n"                           /* 12 */
        "    metadata: {team: {name: a, n: [1, 2]}}\n"          /* 13 */
        "    rate_limit: {unit: YEAR}\n"                        /* 14 */
        "  - key: w\n"                                          /* 15 */
        "    rate_limit: {unit: week, requests_per_unit: 3,\n"  /* 16 */
        "                 shadow_mode: true}\n";                /* 17 */
    rls_diag_t d;
    int rc;
    rls_envoy_conf_t *c = build(yaml, &d, &rc);
    const rls_diag_t *w;
    const rls_envoy_node_t *x;
    size_t i;

    (void)state;
    for (i = 0; i < d.n; i++)
        printf("  got: %s\n", d.msg[i]);
    assert_int_equal(rc, RL_OK);
    x = walk(c, "ref", "path", "/api/v1/action", NULL);
    assert_non_null(x);
    assert_true(x->wildcard);
    assert_true(x->share_threshold);
    assert_true(x->quota);
    assert_int_equal(x->unit, RLS_ENVOY_MONTH);
    assert_int_equal(x->lim.window_s, 30 * 86400);
    assert_int_equal(x->lim.limit, 5);
    assert_int_equal(x->nreplaces, 2);
    assert_string_equal(x->replaces, "a");
    assert_string_equal(x->replaces + 2, "bb");
    /* several '*', each any run (an empty one too) */
    x = walk(c, "ref", "path", "/xyz", NULL);
    assert_non_null(x);
    assert_true(x->value_to_metric);
    assert_true(x->detailed_metric);
    assert_int_equal(x->unit, RLS_ENVOY_YEAR);
    assert_int_equal(x->lim.window_s, 365 * 86400);
    assert_int_equal(x->lim.limit, 0); /* no requests_per_unit: 0 */
    assert_non_null(walk(c, "ref", "path", "/x-a-y-b-z", NULL));
    assert_null(walk(c, "ref", "path", "/x-a-z", NULL));
    assert_null(walk(c, "ref", "path", "/api/v1/actions", NULL));
    x = walk(c, "ref", "w", "any", NULL);
    assert_int_equal(x->unit, RLS_ENVOY_WEEK);
    assert_int_equal(x->lim.window_s, 7 * 86400);
    assert_false(x->shadow); /* misplaced: ignored, as the reference does */
    /* per-value metrics are kept on the node (the statistics name
     * series by them); the misplaced key is warned about */
    x = walk(c, "ref", "path", "/x-a-y-b-z", NULL);
    assert_true(x->value_to_metric && x->detailed_metric);
    w = rls_envoy_conf_warnings(c);
    for (i = 0; i < w->n; i++)
        printf("  warn: %s\n", w->msg[i]);
    assert_int_equal(w->n, 1);
    assert_non_null(strstr(w->msg[0], "t.yaml:17: 'shadow_mode' has no"));
    /* metadata: a Struct, typed as YAML types it */
    x = walk(c, "ref", "path", "/xyz", NULL);
    assert_non_null(x->metadata);
    {
        Google__Protobuf__Struct *m = google__protobuf__struct__unpack(
            NULL, x->metadata_len, x->metadata);
        Google__Protobuf__Struct *team;
        Google__Protobuf__ListValue *l;
        assert_non_null(m);
        assert_int_equal(m->n_fields, 1);
        assert_string_equal(m->fields[0]->key, "team");
        team = m->fields[0]->value->struct_value;
        assert_int_equal(team->n_fields, 2);
        assert_string_equal(team->fields[0]->value->string_value, "a");
        l = team->fields[1]->value->list_value;
        assert_int_equal(l->n_values, 2);
        assert_int_equal(l->values[1]->kind_case,
                         GOOGLE__PROTOBUF__VALUE__KIND_NUMBER_VALUE);
        assert_true(l->values[1]->number_value == 2.0);
        google__protobuf__struct__free_unpacked(m, NULL);
    }
    rls_envoy_conf_unref(c);
}

/* The glob: envoy-ratelimit's reading of '*', and bounded work on values
 * built to make a backtracking matcher explode. */
static void test_glob(void **state)
{
    static char pat[4096], val[65536];
    size_t i, n;

    (void)state;
    assert_true(rls_envoy_glob("*", 1, "", 0));
    assert_true(rls_envoy_glob("a*", 2, "a", 1));
    assert_true(rls_envoy_glob("a*b", 3, "ab", 2));
    assert_false(rls_envoy_glob("a*a", 3, "a", 1));
    assert_true(rls_envoy_glob("a*b*c", 5, "aXbYbZc", 7));
    assert_false(rls_envoy_glob("a*b*c", 5, "aXcYb", 5));
    assert_true(rls_envoy_glob("*/v1/*", 6, "/api/v1/x", 9));
    assert_true(rls_envoy_glob("**", 2, "zz", 2));
    assert_false(rls_envoy_glob("abc", 3, "abd", 3));
    /* a*a*a*...*b against aaaa...a: no match, found without retrying */
    for (n = 0, i = 0; i < 1000; i++) {
        pat[n++] = 'a';
        pat[n++] = '*';
    }
    pat[n++] = 'b';
    memset(val, 'a', sizeof(val));
    assert_false(rls_envoy_glob(pat, n, val, sizeof(val)));
    val[sizeof(val) - 1] = 'b';
    assert_true(rls_envoy_glob(pat, n, val, sizeof(val)));
}

/* The extensions algorithm, burst and phase: a descriptor's limit is an
 * rls_limit_t as the rules file's are; without them, envoy-ratelimit's
 * fixed window as before. */
static void test_algorithms(void **state)
{
    static const char yaml[] =
        "domain: alg\n"
        "descriptors:\n"
        "  - key: plain\n"
        "    rate_limit: {unit: minute, requests_per_unit: 100}\n"
        "  - key: swc\n"
        "    rate_limit: {unit: minute, requests_per_unit: 100,\n"
        "                 algorithm: sliding-window-counter}\n"
        "  - key: staggered\n"
        "    rate_limit: {window: 1d, requests_per_unit: 100000,\n"
        "                 phase: per-caller}\n"
        "  - key: gcra\n"
        "    rate_limit:\n"
        "      unit: second\n"
        "      requests_per_unit: 10\n"
        "      algorithm: gcra\n"
        "      burst: 20\n"
        "      phase: aligned\n"
        "  - key: gcra_default\n"
        "    rate_limit: {window: 90s, requests_per_unit: 3, "
        "algorithm: gcra}\n"
        "  - key: explicit\n"
        "    rate_limit: {unit: hour, requests_per_unit: 5,\n"
        "                 algorithm: fixed-window, phase: aligned}\n"
        "  - key: zero\n"
        "    rate_limit: {unit: second, requests_per_unit: 0,\n"
        "                 algorithm: sliding-window-counter}\n";
    static const struct {
        const char *key;
        uint64_t limit;
        uint32_t window_s;
        uint8_t algo, phase;
        uint64_t burst, t_us;
        int unit;
    } want[] = {
        {"plain", 100, 60, RL_ALGO_FIXED, 0, 0, 0, 2},
        {"swc", 100, 60, RL_ALGO_SLIDING_COUNTER, 0, 0, 0, 2},
        {"staggered", 100000, 86400, RL_ALGO_FIXED, 1, 0, 0, 4},
        {"gcra", 10, 1, RL_ALGO_GCRA, 0, 20, 100000, 1},
        {"gcra_default", 3, 90, RL_ALGO_GCRA, 0, 3, 30000000, 0},
        {"explicit", 5, 3600, RL_ALGO_FIXED, 0, 0, 0, 3},
        {"zero", 0, 1, RL_ALGO_SLIDING_COUNTER, 0, 0, 0, 1},
    };
    rls_diag_t d;
    int rc;
    rls_envoy_conf_t *c = build(yaml, &d, &rc);
    size_t i;

    (void)state;
    for (i = 0; i < d.n; i++)
        fprintf(stderr, "unexpected: %s\n", d.msg[i]);
    assert_int_equal(rc, RL_OK);
    for (i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
        const rls_envoy_node_t *x = walk(c, "alg", want[i].key, "v", NULL);
        assert_non_null(x);
        assert_int_equal(x->kind, RLS_ENVOY_LIMIT);
        assert_int_equal(x->lim.limit, want[i].limit);
        assert_int_equal(x->lim.window_s, want[i].window_s);
        assert_int_equal(x->lim.algo, want[i].algo);
        assert_int_equal(x->lim.phase, want[i].phase);
        assert_int_equal(x->lim.burst, want[i].burst);
        assert_int_equal(x->lim.t_us, want[i].t_us);
        assert_int_equal(x->unit, want[i].unit);
    }
    rls_envoy_conf_unref(c);
}

/* Each bad extension at its FILE:LINE, all in one run. */
static void test_algorithm_errors(void **state)
{
    static const char bad[] =
        "domain: x\n"                                                  /* 1 */
        "descriptors:\n"                                               /* 2 */
        "  - key: a\n"                                                 /* 3 */
        "    rate_limit: {unit: second, requests_per_unit: 1,\n"       /* 4 */
        "                 algorithm: leaky}\n"                         /* 5 */
        "  - key: b\n"                                                 /* 6 */
        "    rate_limit: {unit: second, requests_per_unit: 10001,\n"   /* 7 */
        "                 algorithm: sliding-window}\n"                /* 8 */
        "  - key: c\n"                                                 /* 9 */
        "    rate_limit: {unit: second, requests_per_unit: 1,\n"       /* 10 */
        "                 algorithm: gcra, burst: 0}\n"                /* 11 */
        "  - key: d\n"                                                 /* 12 */
        "    rate_limit: {unit: second, requests_per_unit: 5,\n"       /* 13 */
        "                 burst: 5}\n"                                 /* 14 */
        "  - key: e\n"                                                 /* 15 */
        "    rate_limit: {unit: second, requests_per_unit: 5,\n"       /* 16 */
        "                 algorithm: gcra, phase: per-caller}\n"       /* 17 */
        "  - key: f\n"                                                 /* 18 */
        "    rate_limit: {unit: second, requests_per_unit: 2000000,\n" /* 19 */
        "                 algorithm: gcra}\n"                          /* 20 */
        "  - key: g\n"                                                 /* 21 */
        "    rate_limit: {window: 366d, requests_per_unit: 1,\n"       /* 22 */
        "                 algorithm: gcra, burst: 2}\n"                /* 23 */
        "  - key: h\n"                                                 /* 24 */
        "    rate_limit: {unit: second, requests_per_unit: 0,\n"       /* 25 */
        "                 algorithm: gcra}\n"                          /* 26 */
        "  - key: i\n"                                                 /* 27 */
        "    rate_limit: {unit: second, requests_per_unit: 1,\n"       /* 28 */
        "                 phase: sometimes}\n"                         /* 29 */
        "  - key: j\n"                                                 /* 30 */
        "    rate_limit: {unit: second, requests_per_unit: 1,\n"       /* 31 */
        "                 algorithm: [gcra]}\n"                        /* 32 */
        "  - key: k\n"                                                 /* 33 */
        "    rate_limit: {window: 90s:gcra, requests_per_unit: 1}\n"   /* 34 */
        "  - key: l\n"                                                 /* 35 */
        "    rate_limit: {unit: second, requests_per_unit: 1,\n"       /* 36 */
        "                 algorithm: gcra, algorithm: gcra}\n";        /* 37 */
    static const char *const want[] = {
        "t.yaml:5: algorithm 'leaky': unknown algorithm (fixed-window, "
        "sliding-window, sliding-window-counter or gcra)",
        "t.yaml:7: rate_limit (sliding-window): a sliding-window limit must "
        "be at most 10000 (--sliding-window-max)",
        "t.yaml:11: burst '0': the burst must be at least 1",
        "t.yaml:13: rate_limit (fixed-window): burst is for gcra only",
        "t.yaml:16: rate_limit (gcra): per-caller staggers windows, and a "
        "gcra has none",
        "t.yaml:19: rate_limit (gcra): a gcra's rate must be at most 1 per "
        "microsecond",
        "t.yaml:22: rate_limit (gcra): a gcra's burst x interval",
        "t.yaml:25: rate_limit (gcra): requests_per_unit must be at least 1",
        "t.yaml:29: phase must be aligned or per-caller",
        "t.yaml:32: 'algorithm' must be a single value",
        "t.yaml:34: window '90s:gcra'",
        "t.yaml:34: rate_limit needs 'unit' (or 'window')",
        "t.yaml:37: key 'algorithm' given twice (first at line 37)",
        /* said once the file's counting is known (the default here) */
        "t.yaml:8: algorithm sliding-window cannot be counted "
        "envoy-ratelimit's way",
    };
    rls_diag_t d;
    int rc;
    size_t i;

    (void)state;
    assert_null(build(bad, &d, &rc));
    assert_int_equal(rc, RL_EINVAL);
    for (i = 0; i < d.n; i++)
        fprintf(stderr, "  got: %s\n", d.msg[i]);
    assert_int_equal(d.n, sizeof(want) / sizeof(want[0]));
    for (i = 0; i < d.n; i++)
        if (strncmp(d.msg[i], want[i], strlen(want[i])) != 0)
            fail_msg("error %zu: want '%s', got '%s'", i, want[i], d.msg[i]);
}

/* A key given twice is an error naming both lines, at every level. */
static void test_duplicate_keys(void **state)
{
    static const struct {
        const char *yaml, *want;
    } cases[] = {
        {"domain: a\ndomain: b\ndescriptors: []\n",
         "t.yaml:2: key 'domain' given twice (first at line 1)"},
        {"domain: a\ndescriptors:\n  - key: k\n"
         "    rate_limit: {unit: minute, requests_per_unit: 1}\n"
         "    rate_limit: {unit: second, requests_per_unit: 1000000}\n",
         "t.yaml:5: key 'rate_limit' given twice (first at line 4)"},
        {"domain: a\ndescriptors:\n  - key: k\n    rate_limit:\n"
         "      unit: minute\n      requests_per_unit: 1\n"
         "      requests_per_unit: 9\n",
         "t.yaml:7: key 'requests_per_unit' given twice (first at line 6)"},
        {"domain: a\ndescriptors:\n  - key: k\n    key: j\n",
         "t.yaml:4: key 'key' given twice (first at line 3)"},
        {"domain: a\ndescriptors:\n  - key: k\n    value: v\n"
         "    value: w\n",
         "t.yaml:5: key 'value' given twice (first at line 4)"},
        {"domain: a\ndescriptors: []\nrate_limit_headers: x\n"
         "rate_limit_headers: all\n",
         "t.yaml:4: key 'rate_limit_headers' given twice (first at line 3)"},
        {"domain: a\ndescriptors: []\ndescriptors: []\n",
         "t.yaml:3: key 'descriptors' given twice (first at line 2)"},
        {"domain: a\ndescriptors:\n  - key: k\n    value: v\n"
         "  - key: k\n    value: v\n",
         "t.yaml:5: duplicate descriptor key 'k' value 'v' (first at line 3)"},
    };
    rls_envoy_conf_t *c;
    rls_diag_t d;
    size_t i;
    int rc;

    (void)state;
    for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        assert_null(build(cases[i].yaml, &d, &rc));
        assert_int_equal(rc, RL_EINVAL);
        if (d.n != 1 || strstr(d.msg[0], cases[i].want) == NULL)
            fail_msg("case %zu: want '%s', got %zu errors, first '%s'", i,
                     cases[i].want, d.n, d.n ? d.msg[0] : "");
    }
    /* Sibling descriptors are separate mappings: the same key names in
     * each are fine. */
    c = build("domain: a\ndescriptors:\n"
              "  - {key: k, value: v}\n  - {key: k, value: w}\n",
              &d, &rc);
    assert_int_equal(rc, RL_OK);
    assert_non_null(c);
    rls_envoy_conf_unref(c);
}

static void test_hostile(void **state)
{
    static const char alias[] = "domain: d\ndescriptors: &a\n"
                                "  - key: k\n    descriptors: *a\n";
    char deep[4096];
    size_t n = 0;
    rls_diag_t d;
    int rc, i;

    (void)state;
    assert_null(build(alias, &d, &rc));
    assert_int_equal(rc, RL_EINVAL);
    assert_non_null(strstr(d.msg[0], "aliases"));
    n += (size_t)snprintf(deep + n, sizeof(deep) - n,
                          "domain: d\n"
                          "descriptors: ");
    for (i = 0; i < 40; i++)
        n += (size_t)snprintf(deep + n, sizeof(deep) - n,
                              "[{key: k, descriptors: ");
    n += (size_t)snprintf(deep + n, sizeof(deep) - n, "[]");
    for (i = 0; i < 40; i++)
        n += (size_t)snprintf(deep + n, sizeof(deep) - n, "}]");
    assert_null(build(deep, &d, &rc));
    assert_int_equal(rc, RL_EINVAL);
    assert_non_null(strstr(d.msg[0], "nested deeper"));
    assert_null(build("domain: a\n---\ndomain: b\n", &d, &rc));
    assert_int_equal(rc, RL_EINVAL);
    assert_null(build("", &d, &rc));
    assert_int_equal(rc, RL_EINVAL);
}

static void test_keys(void **state)
{
    const char *k[2] = {"database", "a/b=c d"};
    size_t kl[2] = {8, 7};
    const char *v[2] = {"users", "%#"};
    size_t vl[2] = {5, 2};
    char out[RLS_ENVOY_KEY_MAX + 1], out2[RLS_ENVOY_KEY_MAX + 1];
    char big[600];
    size_t n, n2;

    (void)state;
    n = rls_envoy_key(out, "mongo_cps", 9, k, kl, v, vl, 1);
    assert_int_equal(n, strlen("mongo_cps/database=users"));
    assert_memory_equal(out, "mongo_cps/database=users", n);
    /* Separators inside keys and values are escaped: no two chains
     * share a key. */
    n = rls_envoy_key(out, "d", 1, k + 1, kl + 1, v + 1, vl + 1, 1);
    out[n] = '\0';
    assert_string_equal(out, "d/a%2Fb%3Dc%20d=%25%23");
    /* Long keys are cut and hashed, and still differ. */
    memset(big, 'x', sizeof(big));
    k[0] = big;
    kl[0] = sizeof(big);
    n = rls_envoy_key(out, "d", 1, k, kl, v, vl, 1);
    big[599] = 'y';
    n2 = rls_envoy_key(out2, "d", 1, k, kl, v, vl, 1);
    assert_true(n <= RLS_ENVOY_KEY_MAX && n2 <= RLS_ENVOY_KEY_MAX);
    assert_int_equal(n, n2);
    assert_true(memcmp(out, out2, n) != 0);
    assert_memory_equal(out, out2, 360);
}

/* counting: a domain's own, or --envoy-counting's; a sliding window only
 * under native counting. */
static void test_counting(void **state)
{
    static const char swl[] = "domain: s\n"
                              "descriptors:\n"
                              "  - key: k\n"
                              "    rate_limit: {unit: minute, "
                              "requests_per_unit: 5,\n"
                              "                 algorithm: sliding-window}\n";
    static const char nat[] = "domain: n\n"
                              "counting: native\n"
                              "descriptors:\n"
                              "  - key: k\n"
                              "    rate_limit: {unit: minute, "
                              "requests_per_unit: 5,\n"
                              "                 algorithm: sliding-window}\n";
    static const char stop[] = "domain: p\ncounting: envoy-stop\n"
                               "descriptors: []\n";
    static const char bad[] = "domain: b\ncounting: sometimes\n"
                              "descriptors: []\n";
    rls_envoy_conf_t *c;
    rls_diag_t d;
    int rc;

    (void)state;
    assert_null(build(swl, &d, &rc));
    assert_int_equal(d.n, 1);
    assert_non_null(strstr(d.msg[0], "t.yaml:5: algorithm sliding-window"));
    assert_non_null(strstr(d.msg[0], "--envoy-counting"));
    assert_non_null(c = build(nat, &d, &rc));
    assert_int_equal(rls_envoy_conf_counting(rls_envoy_conf_domain_at(c, 0)),
                     RLS_ENVOY_COUNT_NATIVE);
    rls_envoy_conf_unref(c);
    assert_non_null(c = build(stop, &d, &rc));
    assert_int_equal(rls_envoy_conf_counting(rls_envoy_conf_domain_at(c, 0)),
                     RLS_ENVOY_COUNT_STOP);
    rls_envoy_conf_unref(c);
    assert_null(build(bad, &d, &rc));
    assert_non_null(strstr(d.msg[0], "t.yaml:2: counting: envoy, envoy-stop"));
    /* --envoy-counting native: a file that does not say counts natively,
     * and may have a sliding window. */
    rls_envoy_conf_set_counting(RLS_ENVOY_COUNT_NATIVE);
    assert_non_null(c = build(swl, &d, &rc));
    assert_int_equal(rls_envoy_conf_counting(rls_envoy_conf_domain_at(c, 0)),
                     RLS_ENVOY_COUNT_NATIVE);
    rls_envoy_conf_unref(c);
    rls_envoy_conf_set_counting(RLS_ENVOY_COUNT_ENVOY);
}

/* all_or_nothing: a domain's option, off unless the file says (so
 * envoy-ratelimit's files mean what they meant); a word that is not a
 * bool is an error at its line. */
static void test_all_or_nothing(void **state)
{
    static const char on[] = "domain: g\nall_or_nothing: yes\n"
                             "descriptors: []\n";
    static const char off[] = "domain: g\nall_or_nothing: false\n"
                              "descriptors: []\n";
    static const char none[] = "domain: g\ndescriptors: []\n";
    static const char bad[] = "domain: g\nall_or_nothing: mostly\n"
                              "descriptors: []\n";
    rls_envoy_conf_t *c;
    rls_diag_t d;
    int rc;

    (void)state;
    assert_non_null(c = build(on, &d, &rc));
    assert_int_equal(rls_envoy_conf_domain_at(c, 0)->all_or_nothing, 1);
    rls_envoy_conf_unref(c);
    assert_non_null(c = build(off, &d, &rc));
    assert_int_equal(rls_envoy_conf_domain_at(c, 0)->all_or_nothing, 0);
    rls_envoy_conf_unref(c);
    assert_non_null(c = build(none, &d, &rc));
    assert_int_equal(rls_envoy_conf_domain_at(c, 0)->all_or_nothing, 0);
    rls_envoy_conf_unref(c);
    assert_null(build(bad, &d, &rc));
    assert_non_null(strstr(d.msg[0], "t.yaml:2: all_or_nothing: true or"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_matching),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_reference_keys),
        cmocka_unit_test(test_unlimited_beside),
        cmocka_unit_test(test_glob),
        cmocka_unit_test(test_duplicate_keys),
        cmocka_unit_test(test_hostile),
        cmocka_unit_test(test_keys),
        cmocka_unit_test(test_algorithms),
        cmocka_unit_test(test_algorithm_errors),
        cmocka_unit_test(test_counting),
        cmocka_unit_test(test_all_or_nothing),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
