/* The policy: limits, --rule flags, the YAML rules file and its errors. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "policy/rules.h"
#include "rl_error.h"

static void test_limit_parse(void **state)
{
    static const struct {
        const char *s;
        uint64_t limit;
        uint32_t window_s;
    } good[] = {
        {"5/60s", 5, 60},
        {"33/1m", 33, 60},
        {"2000/1h", 2000, 3600},
        {"7/2d", 7, 172800},
        {"1/1", 1, 1},
        {"10/366d", 10, 31622400},
        {"9223372036854775807/1s", INT64_MAX, 1},
    };
    static const char *const bad[] = {
        "",
        "5",
        "5/",
        "/60",
        "0/60",
        "5/0",
        "5/0s",
        "5/367d",
        "5/31622401",
        "-1/60",
        "5/60x",
        "5/1.5m",
        "5 /60",
        "9223372036854775808/1s",
        "5/m",
        "5/60ss",
        "99999999999999999999/1",
    };
    rls_limit_t l;
    const char *why;
    size_t i;

    (void)state;
    for (i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
        why = NULL;
        assert_int_equal(
            rls_limit_parse(good[i].s, strlen(good[i].s), &l, &why), RL_OK);
        assert_int_equal(l.limit, good[i].limit);
        assert_int_equal(l.window_s, good[i].window_s);
    }
    for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        why = NULL;
        assert_int_equal(rls_limit_parse(bad[i], strlen(bad[i]), &l, &why),
                         RL_EINVAL);
        assert_non_null(why);
    }
}

static void test_limit_format(void **state)
{
    char buf[48];
    rls_limit_t l;

    (void)state;
    memset(&l, 0, sizeof(l));
    l.limit = 33;
    l.window_s = 60;
    rls_limit_format(&l, buf, sizeof(buf));
    assert_string_equal(buf, "33/1m");
    l.window_s = 90;
    rls_limit_format(&l, buf, sizeof(buf));
    assert_string_equal(buf, "33/90s");
    l.window_s = 172800;
    rls_limit_format(&l, buf, sizeof(buf));
    assert_string_equal(buf, "33/2d");
}

static rls_policy_t *build_ok(const char *yaml, const char *const *flags,
                              size_t nflags)
{
    rls_policy_t *p = NULL;
    rls_diag_t d;
    int rc = rls_policy_build_buf(flags, nflags, "rules.yaml", yaml,
                                  strlen(yaml), 1000, &p, &d);
    size_t i;

    for (i = 0; i < d.n; i++)
        fprintf(stderr, "unexpected: %s\n", d.msg[i]);
    assert_int_equal(rc, RL_OK);
    assert_non_null(p);
    return p;
}

/* The README's example, whole. */
static const char example[] =
    "rules:\n"
    "  login:\n"
    "    limits: [5/60s]\n"
    "  api:\n"
    "    limits: [33/1m, 2000/1h]        # every window must allow\n"
    "    overrides:                       # per-caller quotas, by exact key\n"
    "      \"user:acme\": [1000/1m, 50000/1h]\n"
    "  search:\n"
    "    limits: [10/1s]\n"
    "    mode: shadow                     # enforce (default) | shadow | off\n";

static void test_example_file(void **state)
{
    rls_policy_t *p = build_ok(example, NULL, 0);
    const rls_rule_t *r;
    const rls_limits_t *ls;

    (void)state;
    assert_int_equal(rls_policy_count(p), 3);

    r = rls_policy_find(p, "login", 5);
    assert_non_null(r);
    assert_int_equal(r->limits.n, 1);
    assert_int_equal(r->limits.w[0].limit, 5);
    assert_int_equal(r->limits.w[0].window_s, 60);
    assert_int_equal(r->mode, RLS_MODE_ENFORCE);
    assert_int_equal(r->line, 2);

    r = rls_policy_find(p, "api", 3);
    assert_non_null(r);
    assert_int_equal(r->limits.n, 2);
    assert_int_equal(r->limits.w[0].window_s, 60);
    assert_int_equal(r->limits.w[0].limit, 33);
    assert_int_equal(r->limits.w[1].window_s, 3600);
    assert_int_equal(r->limits.w[1].limit, 2000);
    assert_int_equal(r->noverrides, 1);
    ls = rls_rule_limits(r, "user:acme", 9);
    assert_int_equal(ls->n, 2);
    assert_int_equal(ls->w[0].limit, 1000);
    assert_int_equal(ls->w[1].limit, 50000);
    /* Exact keys only. */
    assert_ptr_equal(rls_rule_limits(r, "user:acm", 8), &r->limits);
    assert_ptr_equal(rls_rule_limits(r, "user:acme ", 10), &r->limits);

    r = rls_policy_find(p, "search", 6);
    assert_non_null(r);
    assert_int_equal(r->mode, RLS_MODE_SHADOW);
    assert_null(rls_policy_find(p, "searc", 5));
    assert_null(rls_policy_find(p, "nope", 4));
    rls_policy_unref(p);
}

static void test_windows_sorted(void **state)
{
    rls_policy_t *p = build_ok("rules:\n"
                               "  r:\n"
                               "    limits:\n"
                               "      - 2000/1h\n"
                               "      - 10/1s\n"
                               "      - 33/1m\n",
                               NULL, 0);
    const rls_rule_t *r = rls_policy_find(p, "r", 1);

    (void)state;
    assert_int_equal(r->limits.n, 3);
    assert_int_equal(r->limits.w[0].window_s, 1);
    assert_int_equal(r->limits.w[1].window_s, 60);
    assert_int_equal(r->limits.w[2].window_s, 3600);
    rls_policy_unref(p);
}

static void test_flags_merge(void **state)
{
    const char *flags[] = {"old=5/60", "multi=10/1s,100/1m"};
    rls_policy_t *p = build_ok(example, flags, 2);
    const rls_rule_t *r;

    (void)state;
    assert_int_equal(rls_policy_count(p), 5);
    r = rls_policy_find(p, "old", 3);
    assert_non_null(r);
    assert_int_equal(r->limits.w[0].window_s, 60);
    assert_int_equal(r->line, 0);
    r = rls_policy_find(p, "multi", 5);
    assert_int_equal(r->limits.n, 2);
    assert_non_null(rls_policy_find(p, "api", 3));
    rls_policy_unref(p);
}

/* Builds and expects failure with exactly the given messages, in order. */
static void expect_errors(const char *yaml, const char *const *flags,
                          size_t nflags, const char *const *want, size_t n)
{
    rls_policy_t *p = NULL;
    rls_diag_t d;
    size_t i;
    int rc = rls_policy_build_buf(flags, nflags, "r.yaml", yaml, strlen(yaml),
                                  4, &p, &d);

    assert_int_equal(rc, RL_EINVAL);
    assert_null(p);
    for (i = 0; i < d.n; i++)
        fprintf(stderr, "  got: %s\n", d.msg[i]);
    assert_int_equal(d.n, n);
    for (i = 0; i < n; i++)
        if (strstr(d.msg[i], want[i]) == NULL)
            fail_msg("error %zu: want '%s' in '%s'", i, want[i], d.msg[i]);
}

#define ERRS(yaml, ...)                                                        \
    do {                                                                       \
        const char *const w_[] = {__VA_ARGS__};                                \
        expect_errors(yaml, NULL, 0, w_, sizeof(w_) / sizeof(w_[0]));          \
    } while (0)

static void test_bad_files(void **state)
{
    (void)state;
    ERRS("rules:\n  a:\n    limits: [5/60s]\n    burst: 3\n",
         "r.yaml:4: unknown key 'burst'");
    ERRS("rules:\n  a:\n    limits: [5/60x]\n", "r.yaml:3: bad limit '5/60x'");
    ERRS("rules:\n  a:\n    limits: [5/400d]\n", "r.yaml:3: bad limit");
    ERRS("rules:\n  a:\n    limits: [0/1m]\n",
         "r.yaml:3: bad limit '0/1m': the limit must be at least 1");
    ERRS("rules:\n  a:\n    limits: [1/1m]\n  a:\n    limits: [2/1m]\n",
         "r.yaml:4: rule 'a' is defined twice");
    ERRS("rules:\n  a:\n    limits: [1/1s, 1/2s, 1/3s, 1/4s, 1/5s, 1/6s,"
         " 1/7s, 1/8s, 1/9s]\n",
         "r.yaml:3: more than 8 windows");
    ERRS("rules:\n  a:\n    limits: [1/1m, 2/60s]\n",
         "r.yaml:3: two limits with the same window length");
    ERRS("rules:\n  \"bad name\":\n    limits: [1/1m]\n",
         "r.yaml:2: bad rule name 'bad name'");
    ERRS("rules:\n  a:\n    limits: [1/1m]\n    overrides:\n"
         "      \"\": [5/1m]\n",
         "r.yaml:5: override key a client could not send");
    ERRS("rules:\n  a:\n    limits: [1/1m]\n    overrides:\n"
         "      \"x\\0y\": [5/1m]\n",
         "r.yaml:5: override key a client could not send");
    ERRS("rules:\n  a:\n    limits: [1/1m]\n    mode: loud\n",
         "r.yaml:4: mode must be enforce, shadow or off");
    ERRS("rules:\n  a:\n    mode: off\n", "r.yaml:2: rule 'a' has no limits");
    ERRS("rulez:\n  a:\n    limits: [1/1m]\n", "r.yaml:1: unknown key 'rulez'",
         "no 'rules' map");
    ERRS("", "r.yaml:1: empty file");
    ERRS("rules: [\n", "r.yaml:1: rules must map", "r.yaml:2: not valid YAML");
    ERRS("a: &x [1]\nb: *x\n", "r.yaml:1: unknown key 'a'",
         "r.yaml:2: unknown key 'b'", "r.yaml:2: aliases");
    ERRS("rules:\n  a:\n    limits: [[[[[[[[1/1m]]]]]]]]\n",
         "r.yaml:3: a limit must be N/DURATION",
         "r.yaml:3: nested deeper than 8 levels");
    ERRS("rules:\n  a:\n    limits: [1/1m]\n---\nrules: {}\n",
         "more than one YAML document");
    /* Several errors in one file are all reported, each with its line. */
    ERRS("rules:\n  a:\n    limits: [0/1m]\n  b:\n    limits: [1/1m]\n"
         "    color: red\n",
         "r.yaml:3: bad limit", "r.yaml:6: unknown key 'color'");
    /* --max-rules is 4 here. */
    ERRS("rules:\n  a: {limits: 1/1s}\n  b: {limits: 1/1s}\n"
         "  c: {limits: 1/1s}\n  d: {limits: 1/1s}\n  e: {limits: 1/1s}\n",
         "r.yaml:6: more than 4 rules");
}

/* A key given twice anywhere is an error naming both lines: the last one
 * no longer wins silently. */
static void test_duplicate_keys(void **state)
{
    (void)state;
    ERRS("rules:\n  a:\n    limits: [1/1m]\n    limits: [1000000/1s]\n",
         "r.yaml:4: key 'limits' given twice (first at line 3)");
    ERRS("rules:\n  a:\n    limits: [1/1m]\n    mode: enforce\n"
         "    mode: off\n",
         "r.yaml:5: key 'mode' given twice (first at line 4)");
    ERRS("rules:\n  a:\n    limits: [1/1m]\n    overrides: {k: [2/1m]}\n"
         "    overrides: {j: [3/1m]}\n",
         "r.yaml:5: key 'overrides' given twice (first at line 4)");
    ERRS("rules:\n  a:\n    limits: [1/1m]\n    description: x\n"
         "    description: y\n",
         "r.yaml:5: key 'description' given twice (first at line 4)");
    ERRS("rules:\n  a: {limits: 1/1m}\nrules:\n  b: {limits: 1/1m}\n",
         "r.yaml:3: key 'rules' given twice (first at line 1)");
    /* Flow style too; and an unknown key twice is both unknown and
     * twice. */
    ERRS("rules: {a: {limits: [1/1m], limits: [2/1m]}}\n",
         "r.yaml:1: key 'limits' given twice (first at line 1)");
    ERRS("rules:\n  a:\n    limits: [1/1m]\n    burst: 1\n    burst: 2\n",
         "r.yaml:4: unknown key 'burst'", "r.yaml:5: key 'burst' given twice",
         "r.yaml:5: unknown key 'burst'");
    /* Rule names and override keys keep their own messages, once. */
    ERRS("rules:\n  a:\n    limits: [1/1m]\n  a:\n    limits: [2/1m]\n",
         "r.yaml:4: rule 'a' is defined twice (first at line 2)");
    ERRS("rules:\n  a:\n    limits: [1/1m]\n    overrides:\n"
         "      k: [2/1m]\n      k: [3/1m]\n",
         "r.yaml:6: override for 'k' given twice (first at line 5)");
    /* The same key in two mappings is no duplicate. */
    rls_policy_unref(build_ok("rules:\n  a: {limits: 1/1m, mode: off}\n"
                              "  b: {limits: 1/1m, mode: off}\n",
                              NULL, 0));
}

static void test_binary_file(void **state)
{
    char buf[256];
    rls_policy_t *p = NULL;
    rls_diag_t d;
    size_t i;

    (void)state;
    for (i = 0; i < sizeof(buf); i++)
        buf[i] = (char)(i * 37 + 11);
    assert_int_equal(
        rls_policy_build_buf(NULL, 0, "bin", buf, sizeof(buf), 10, &p, &d),
        RL_EINVAL);
    assert_null(p);
    assert_true(d.n >= 1);
    assert_non_null(strstr(d.msg[0], "bin:"));
}

static void test_flag_duplicate_with_file(void **state)
{
    const char *flags[] = {"login=1/1s"};
    const char *const want[] = {"r.yaml:2: rule 'login' is defined twice"};
    const char *flags2[] = {"x=1/1s", "x=2/1s"};
    const char *const want2[] = {"--rule: rule 'x' is defined twice"};
    const char *flags3[] = {"y"};
    const char *const want3[] = {"--rule: expected NAME=LIMIT/DURATION"};

    (void)state;
    expect_errors("rules:\n  login:\n    limits: [5/60s]\n", flags, 1, want, 1);
    expect_errors("rules: {}\n", flags2, 2, want2, 1);
    expect_errors("rules:\n", flags3, 1, want3, 1);
}

/* Many rules and overrides: every one is found through the index. */
static void test_many_rules(void **state)
{
    size_t n = 3000, i, cap = n * 80 + 64, len = 0;
    char *yaml = malloc(cap), name[32];
    rls_policy_t *p = NULL;
    rls_diag_t d;

    (void)state;
    len += (size_t)snprintf(yaml + len, cap - len, "rules:\n");
    for (i = 0; i < n; i++)
        len += (size_t)snprintf(yaml + len, cap - len,
                                "  r%zu:\n    limits: [%zu/1m]\n"
                                "    overrides: {\"k%zu\": [1/1s]}\n",
                                i, i + 1, i);
    assert_int_equal(rls_policy_build_buf(NULL, 0, "big", yaml, len, n, &p, &d),
                     RL_OK);
    assert_int_equal(rls_policy_count(p), n);
    for (i = 0; i < n; i++) {
        const rls_rule_t *r;
        char key[32];
        int k = snprintf(name, sizeof(name), "r%zu", i);
        int kl = snprintf(key, sizeof(key), "k%zu", i);
        r = rls_policy_find(p, name, (size_t)k);
        assert_non_null(r);
        assert_int_equal(r->limits.w[0].limit, i + 1);
        assert_int_equal(rls_rule_limits(r, key, (size_t)kl)->w[0].window_s, 1);
    }
    rls_policy_unref(p);
    free(yaml);
}

/* Overrides load in linear time: checking each key against those before
 * it takes a few comparisons, not one per earlier key. Counted through
 * the builder's hook, so the test does not depend on the machine's
 * speed: 20,000 overrides in one rule, and 2,000 rules with one each. */
static void test_overrides_linear(void **state)
{
    size_t n = 20000, i, cap = n * 48 + 64, len = 0;
    char *yaml = malloc(cap);
    rls_policy_t *p = NULL;
    rls_diag_t d;
    uint64_t before;
    const rls_rule_t *r;

    (void)state;
    assert_non_null(yaml);
    len += (size_t)snprintf(yaml + len, cap - len,
                            "rules:\n  api:\n    limits: [100/1m]\n"
                            "    overrides:\n");
    for (i = 0; i < n; i++)
        len += (size_t)snprintf(yaml + len, cap - len,
                                "      \"user:%zu\": [%zu/1m]\n", i, i + 1);
    before = rls_rules_key_probes();
    assert_int_equal(
        rls_policy_build_buf(NULL, 0, "big", yaml, len, 10, &p, &d), RL_OK);
    /* A hash set at most half full: about 1.5 probes a key on average.
     * The earlier scan of every key before it made n^2/2 (2e8). */
    print_message("%zu overrides: %llu key comparisons\n", n,
                  (unsigned long long)(rls_rules_key_probes() - before));
    assert_true(rls_rules_key_probes() - before <= 4 * n);
    r = rls_policy_find(p, "api", 3);
    assert_non_null(r);
    assert_int_equal(r->noverrides, n);
    assert_int_equal(rls_rule_limits(r, "user:19999", 10)->w[0].limit, n);
    rls_policy_unref(p);

    /* A key given twice is still found, among many. */
    len +=
        (size_t)snprintf(yaml + len, cap - len, "      \"user:7\": [1/1s]\n");
    assert_int_equal(
        rls_policy_build_buf(NULL, 0, "big", yaml, len, 10, &p, &d), RL_EINVAL);
    assert_int_equal(d.n, 1);
    assert_non_null(strstr(d.msg[0], "big:20005: override for 'user:7' "
                                     "given twice (first at line 12)"));
    free(yaml);
}

static void test_missing_file(void **state)
{
    rls_policy_t *p = NULL;
    rls_diag_t d;

    (void)state;
    assert_int_equal(
        rls_policy_build(NULL, 0, "/nonexistent/rules.yaml", 10, &p, &d),
        RL_EINVAL);
    assert_int_equal(d.n, 1);
    assert_non_null(strstr(d.msg[0], "/nonexistent/rules.yaml"));
    assert_int_equal(rls_policy_build(NULL, 0, "/", 10, &p, &d), RL_EINVAL);
    assert_non_null(strstr(d.msg[0], "regular file"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_limit_parse),
        cmocka_unit_test(test_limit_format),
        cmocka_unit_test(test_example_file),
        cmocka_unit_test(test_windows_sorted),
        cmocka_unit_test(test_flags_merge),
        cmocka_unit_test(test_bad_files),
        cmocka_unit_test(test_duplicate_keys),
        cmocka_unit_test(test_binary_file),
        cmocka_unit_test(test_flag_duplicate_with_file),
        cmocka_unit_test(test_many_rules),
        cmocka_unit_test(test_overrides_linear),
        cmocka_unit_test(test_missing_file),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
