/* The policy's algorithms: a limit in one word (N/DURATION[:OPTION...]) and
 * as a map in the rules file, --rule flags and overrides, the checks each
 * algorithm's bounds make, and that files without algorithms read as
 * before. */
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

#define NELEM(a) (sizeof(a) / sizeof((a)[0]))

typedef struct want_s {
    uint64_t limit;
    uint32_t window_s;
    uint8_t algo, phase;
    uint64_t burst, t_us;
} want_t;

static void assert_limit(const rls_limit_t *l, const want_t *w)
{
    assert_int_equal(l->limit, w->limit);
    assert_int_equal(l->window_s, w->window_s);
    assert_int_equal(l->algo, w->algo);
    assert_int_equal(l->phase, w->phase);
    assert_int_equal(l->burst, w->burst);
    assert_int_equal(l->t_us, w->t_us);
}

static void test_compact_parse(void **state)
{
    static const struct {
        const char *s;
        want_t w;
    } good[] = {
        {"100/1m", {100, 60, RL_ALGO_FIXED, 0, 0, 0}},
        {"100/1m:fixed-window", {100, 60, RL_ALGO_FIXED, 0, 0, 0}},
        {"100/1m:fixed-window:aligned", {100, 60, RL_ALGO_FIXED, 0, 0, 0}},
        {"100000/1d:per-caller", {100000, 86400, RL_ALGO_FIXED, 1, 0, 0}},
        {"100/1m:sliding-window-counter",
         {100, 60, RL_ALGO_SLIDING_COUNTER, 0, 0, 0}},
        {"100/1m:per-caller:sliding-window-counter",
         {100, 60, RL_ALGO_SLIDING_COUNTER, 1, 0, 0}},
        {"68719476736/1s:sliding-window-counter",
         {UINT64_C(1) << 36, 1, RL_ALGO_SLIDING_COUNTER, 0, 0, 0}},
        /* The exact log, up to --sliding-window-max (10,000 here). */
        {"100/1m:sliding-window", {100, 60, RL_ALGO_SLIDING_LOG, 0, 0, 0}},
        {"10000/1d:sliding-window",
         {10000, 86400, RL_ALGO_SLIDING_LOG, 0, 0, 0}},
        /* gcra: t_us = ceil(window / N), the burst N unless given. */
        {"10/1s:gcra", {10, 1, RL_ALGO_GCRA, 0, 10, 100000}},
        {"10/1s:gcra:burst=20", {10, 1, RL_ALGO_GCRA, 0, 20, 100000}},
        {"10/1s:burst=20:gcra", {10, 1, RL_ALGO_GCRA, 0, 20, 100000}},
        {"10/1s:gcra:aligned", {10, 1, RL_ALGO_GCRA, 0, 10, 100000}},
        {"3/1s:gcra", {3, 1, RL_ALGO_GCRA, 0, 3, 333334}},
        {"1000000/1s:gcra", {1000000, 1, RL_ALGO_GCRA, 0, 1000000, 1}},
        {"1000/1h:gcra:burst=1", {1000, 3600, RL_ALGO_GCRA, 0, 1, 3600000}},
        /* The bucket at its cap exactly: 366 days of microseconds. */
        {"1/366d:gcra", {1, 31622400, RL_ALGO_GCRA, 0, 1, 31622400000000}},
        {"2/366d:gcra", {2, 31622400, RL_ALGO_GCRA, 0, 2, 15811200000000}},
    };
    static const struct {
        const char *s, *why;
    } bad[] = {
        {"100/1m:leaky", "unknown algorithm or option"},
        {"100/1m:GCRA", "unknown algorithm or option"},
        {"100/1m:", "unknown algorithm or option"},
        {"100/1m::gcra", "unknown algorithm or option"},
        {"100/1m:gcra:", "unknown algorithm or option"},
        {"100/1m:burst", "unknown algorithm or option"},
        {"100/1m :gcra", "the duration must be"},
        {"gcra:100/1m", "expected N/DURATION"},
        {"0/1m:gcra", "at least 1"},
        {"10001/1m:sliding-window",
         "a sliding-window limit must be at most 10000 "
         "(--sliding-window-max)"},
        {"100/1m:sliding-window:per-caller", "a sliding window has none"},
        {"100/1m:sliding-window:burst=3", "burst is for gcra only"},
        {"10/1s:gcra:burst=0", "the burst must be at least 1"},
        {"10/1s:gcra:burst=", "whole number"},
        {"10/1s:gcra:burst=x", "whole number"},
        {"10/1s:gcra:burst=-1", "whole number"},
        {"10/1s:gcra:burst=9223372036854775808", "whole number"},
        {"10/1s:burst=5", "burst is for gcra only"},
        {"10/1s:fixed-window:burst=5", "burst is for gcra only"},
        {"10/1s:sliding-window-counter:burst=5", "burst is for gcra only"},
        {"10/1s:gcra:per-caller", "a gcra has none"},
        {"68719476737/1s:sliding-window-counter", "at most 2^36"},
        {"1000001/1s:gcra", "at most 1 per microsecond"},
        {"9223372036854775807/1s:gcra", "at most 1 per microsecond"},
        {"1/366d:gcra:burst=2", "burst x interval"},
        /* 7/366d's interval rounds up, so 7 of them pass the cap. */
        {"7/366d:gcra", "burst x interval"},
        {"1/1s:gcra:burst=9223372036854775807", "burst x interval"},
        {"10/1s:gcra:gcra", "the algorithm is given twice"},
        {"10/1s:gcra:fixed-window", "the algorithm is given twice"},
        {"10/1s:per-caller:aligned", "the phase is given twice"},
        {"10/1s:gcra:burst=1:burst=2", "burst is given twice"},
    };
    rls_limit_t l;
    const char *why;
    size_t i;

    (void)state;
    for (i = 0; i < NELEM(good); i++) {
        /* Every field is set, whatever *out held. */
        memset(&l, 0xa5, sizeof(l));
        why = NULL;
        if (rls_limit_parse(good[i].s, strlen(good[i].s), &l, &why) != RL_OK)
            fail_msg("'%s': %s", good[i].s, why);
        assert_limit(&l, &good[i].w);
    }
    for (i = 0; i < NELEM(bad); i++) {
        why = NULL;
        if (rls_limit_parse(bad[i].s, strlen(bad[i].s), &l, &why) != RL_EINVAL)
            fail_msg("'%s' was taken", bad[i].s);
        assert_non_null(why);
        if (strstr(why, bad[i].why) == NULL)
            fail_msg("'%s': want '%s' in '%s'", bad[i].s, bad[i].why, why);
    }
    /* The cap is the flag's. */
    rls_limit_set_swl_max(20000);
    assert_int_equal(rls_limit_parse("20000/1m:sliding-window", 23, &l, &why),
                     RL_OK);
    assert_int_equal(rls_limit_parse("20001/1m:sliding-window", 23, &l, &why),
                     RL_EINVAL);
    rls_limit_set_swl_max(RLS_SWL_MAX_DEFAULT);
    /* len bounds the parse: what follows is not read. */
    assert_int_equal(rls_limit_parse("10/1s:gcra", 5, &l, &why), RL_OK);
    assert_int_equal(l.algo, RL_ALGO_FIXED);
}

/* Formatting: the canonical word, read back to the same fields. */
static void test_format_round_trip(void **state)
{
    static const struct {
        const char *in, *out;
    } cases[] = {
        {"100/60s", "100/1m"},
        {"100/1m:fixed-window:aligned", "100/1m"},
        {"100000/1d:per-caller", "100000/1d:per-caller"},
        {"100/1m:per-caller:sliding-window-counter",
         "100/1m:sliding-window-counter:per-caller"},
        {"10/1s:gcra", "10/1s:gcra"},
        {"10/1s:gcra:burst=10", "10/1s:gcra"},
        {"10/1s:burst=20:gcra", "10/1s:gcra:burst=20"},
        {"5/90:gcra:burst=1", "5/90s:gcra:burst=1"},
        /* The longest of each kind. */
        {"9223372036854775807/31622399:per-caller",
         "9223372036854775807/31622399s:per-caller"},
        {"68719476736/31622399:sliding-window-counter:per-caller",
         "68719476736/31622399s:sliding-window-counter:per-caller"},
        {"31622399000000/31622399:gcra:burst=1",
         "31622399000000/31622399s:gcra:burst=1"},
    };
    static const char *const algos[] = {"", ":sliding-window-counter", ":gcra"};
    static const char *const extras[] = {"", ":per-caller", ":burst=1",
                                         ":burst=7", ":burst=1000"};
    char buf[RLS_LIMIT_FMT_MAX], in[64];
    rls_limit_t a, b;
    const char *why;
    size_t i, j, k, n;

    (void)state;
    for (i = 0; i < NELEM(cases); i++) {
        assert_int_equal(
            rls_limit_parse(cases[i].in, strlen(cases[i].in), &a, &why), RL_OK);
        n = rls_limit_format(&a, buf, sizeof(buf));
        assert_int_equal(n, strlen(buf));
        assert_string_equal(buf, cases[i].out);
        assert_true(n < (a.algo == RL_ALGO_FIXED ? 48 : RLS_LIMIT_FMT_MAX));
        assert_int_equal(rls_limit_parse(buf, n, &b, &why), RL_OK);
        assert_memory_equal(&a, &b, sizeof(a));
    }
    /* Every algorithm with every option, where they go together. */
    for (i = 0; i < NELEM(algos); i++)
        for (j = 0; j < NELEM(extras); j++)
            for (k = 0; k < 3; k++) {
                static const char *const rates[] = {"7/1s", "100/90",
                                                    "1000/1d"};
                snprintf(in, sizeof(in), "%s%s%s", rates[k], algos[i],
                         extras[j]);
                if (rls_limit_parse(in, strlen(in), &a, &why) != RL_OK)
                    continue;
                n = rls_limit_format(&a, buf, sizeof(buf));
                memset(&b, 0xa5, sizeof(b));
                if (rls_limit_parse(buf, n, &b, &why) != RL_OK)
                    fail_msg("'%s' formatted as '%s': %s", in, buf, why);
                assert_memory_equal(&a, &b, sizeof(a));
            }
    /* A short buffer: cut, NUL-terminated, and the length says so. */
    assert_int_equal(rls_limit_parse("10/1s:gcra:burst=20", 19, &a, &why),
                     RL_OK);
    assert_int_equal(rls_limit_format(&a, buf, 8), 7);
    assert_string_equal(buf, "10/1s:g");
}

static rls_policy_t *build_ok(const char *yaml, const char *const *flags,
                              size_t nflags)
{
    rls_policy_t *p = NULL;
    rls_diag_t d;
    int rc = rls_policy_build_buf(flags, nflags, yaml ? "rules.yaml" : NULL,
                                  yaml, yaml ? strlen(yaml) : 0, 1000, &p, &d);
    size_t i;

    for (i = 0; i < d.n; i++)
        fprintf(stderr, "unexpected: %s\n", d.msg[i]);
    assert_int_equal(rc, RL_OK);
    assert_non_null(p);
    return p;
}

static const rls_rule_t *rule(const rls_policy_t *p, const char *name)
{
    const rls_rule_t *r = rls_policy_find(p, name, strlen(name));

    assert_non_null(r);
    return r;
}

/* The example, whole. */
static const char example[] =
    "rules:\n"
    "  api:\n"
    "    limits:\n"
    "      - {limit: 100/1m, algorithm: sliding-window-counter}\n"
    "      - {limit: 100000/1d, phase: per-caller}          # staggered\n"
    "  burst:\n"
    "    limits:\n"
    "      - {rate: 10/1s, burst: 20, algorithm: gcra}\n"
    "      - 1000/1h\n";

static void test_map_form(void **state)
{
    static const want_t api[] = {{100, 60, RL_ALGO_SLIDING_COUNTER, 0, 0, 0},
                                 {100000, 86400, RL_ALGO_FIXED, 1, 0, 0}};
    static const want_t burst[] = {{10, 1, RL_ALGO_GCRA, 0, 20, 100000},
                                   {1000, 3600, RL_ALGO_FIXED, 0, 0, 0}};
    rls_policy_t *p = build_ok(example, NULL, 0);
    const rls_rule_t *r;
    size_t i;

    (void)state;
    r = rule(p, "api");
    assert_int_equal(r->limits.n, 2);
    for (i = 0; i < 2; i++)
        assert_limit(&r->limits.w[i], &api[i]);
    r = rule(p, "burst");
    assert_int_equal(r->limits.n, 2);
    for (i = 0; i < 2; i++)
        assert_limit(&r->limits.w[i], &burst[i]);
    rls_policy_unref(p);

    /* Block maps, every key, explicit defaults; one map alone; the word
     * form as a YAML value, in a flow list too. */
    p = build_ok("rules:\n"
                 "  a:\n"
                 "    limits:\n"
                 "      - limit: 5/1s\n"
                 "        algorithm: fixed-window\n"
                 "        phase: aligned\n"
                 "      - rate: 60/1m\n"
                 "        algorithm: gcra\n"
                 "        burst: 1\n"
                 "        phase: aligned\n"
                 "  b:\n"
                 "    limits: {rate: 2/1s, algorithm: gcra}\n"
                 "  c:\n"
                 "    limits: [10/1s:gcra:burst=20, "
                 "100/1m:sliding-window-counter:per-caller]\n"
                 "  d:\n"
                 "    limits: 100000/1d:per-caller\n"
                 "  e:\n"
                 "    limits:\n"
                 "      - {limit: 5/1m, phase: per-caller, algorithm: "
                 "sliding-window-counter}\n",
                 NULL, 0);
    r = rule(p, "a");
    assert_int_equal(r->limits.n, 2);
    assert_limit(&r->limits.w[0], &(want_t){5, 1, RL_ALGO_FIXED, 0, 0, 0});
    assert_limit(&r->limits.w[1],
                 &(want_t){60, 60, RL_ALGO_GCRA, 0, 1, 1000000});
    r = rule(p, "b");
    assert_int_equal(r->limits.n, 1);
    assert_limit(&r->limits.w[0], &(want_t){2, 1, RL_ALGO_GCRA, 0, 2, 500000});
    r = rule(p, "c");
    assert_int_equal(r->limits.n, 2);
    assert_limit(&r->limits.w[0],
                 &(want_t){10, 1, RL_ALGO_GCRA, 0, 20, 100000});
    assert_limit(&r->limits.w[1],
                 &(want_t){100, 60, RL_ALGO_SLIDING_COUNTER, 1, 0, 0});
    r = rule(p, "d");
    assert_limit(&r->limits.w[0],
                 &(want_t){100000, 86400, RL_ALGO_FIXED, 1, 0, 0});
    r = rule(p, "e");
    assert_limit(&r->limits.w[0],
                 &(want_t){5, 60, RL_ALGO_SLIDING_COUNTER, 1, 0, 0});
    rls_policy_unref(p);
}

/* One window length under several algorithms is fine; sorted by length,
 * then algorithm. */
static void test_same_window_algorithms(void **state)
{
    rls_policy_t *p = build_ok("rules:\n"
                               "  r:\n"
                               "    limits:\n"
                               "      - 1000/1h\n"
                               "      - 60/1m:gcra\n"
                               "      - 100/1m:sliding-window-counter\n"
                               "      - 50/1m:per-caller\n"
                               "      - 5/1s:gcra\n",
                               NULL, 0);
    const rls_rule_t *r = rule(p, "r");
    static const struct {
        uint32_t window_s;
        uint8_t algo;
    } order[] = {{1, RL_ALGO_GCRA},
                 {60, RL_ALGO_FIXED},
                 {60, RL_ALGO_SLIDING_COUNTER},
                 {60, RL_ALGO_GCRA},
                 {3600, RL_ALGO_FIXED}};
    size_t i;

    (void)state;
    assert_int_equal(r->limits.n, NELEM(order));
    for (i = 0; i < NELEM(order); i++) {
        assert_int_equal(r->limits.w[i].window_s, order[i].window_s);
        assert_int_equal(r->limits.w[i].algo, order[i].algo);
    }
    rls_policy_unref(p);
}

static void test_flags(void **state)
{
    const char *flags[] = {"burst=10/1s:gcra:burst=20,1000/1h",
                           "api=100/1m:sliding-window-counter,100000/1d:"
                           "per-caller",
                           "mixed=5/1m,5/1m:gcra,5/1m:sliding-window-counter"};
    rls_policy_t *p = build_ok(NULL, flags, NELEM(flags));
    const rls_rule_t *r;

    (void)state;
    r = rule(p, "burst");
    assert_int_equal(r->line, 0);
    assert_int_equal(r->limits.n, 2);
    assert_limit(&r->limits.w[0],
                 &(want_t){10, 1, RL_ALGO_GCRA, 0, 20, 100000});
    assert_limit(&r->limits.w[1],
                 &(want_t){1000, 3600, RL_ALGO_FIXED, 0, 0, 0});
    r = rule(p, "api");
    assert_int_equal(r->limits.n, 2);
    assert_limit(&r->limits.w[0],
                 &(want_t){100, 60, RL_ALGO_SLIDING_COUNTER, 0, 0, 0});
    assert_limit(&r->limits.w[1],
                 &(want_t){100000, 86400, RL_ALGO_FIXED, 1, 0, 0});
    r = rule(p, "mixed");
    assert_int_equal(r->limits.n, 3);
    assert_int_equal(r->limits.w[0].algo, RL_ALGO_FIXED);
    assert_int_equal(r->limits.w[1].algo, RL_ALGO_SLIDING_COUNTER);
    assert_int_equal(r->limits.w[2].algo, RL_ALGO_GCRA);
    rls_policy_unref(p);
}

static void test_overrides(void **state)
{
    rls_policy_t *p = build_ok(
        "rules:\n"
        "  api:\n"
        "    limits: [100/1m]\n"
        "    overrides:\n"
        "      \"user:acme\":\n"
        "        - {limit: 1000/1m, algorithm: sliding-window-counter}\n"
        "        - 5/1s:gcra:burst=10\n"
        "      \"user:b\": {rate: 1/1s, algorithm: gcra}\n"
        "      \"user:c\": 100/1m:per-caller\n",
        NULL, 0);
    const rls_rule_t *r = rule(p, "api");
    const rls_limits_t *ls;

    (void)state;
    assert_int_equal(r->noverrides, 3);
    ls = rls_rule_limits(r, "user:acme", 9);
    assert_int_equal(ls->n, 2);
    assert_limit(&ls->w[0], &(want_t){5, 1, RL_ALGO_GCRA, 0, 10, 200000});
    assert_limit(&ls->w[1],
                 &(want_t){1000, 60, RL_ALGO_SLIDING_COUNTER, 0, 0, 0});
    ls = rls_rule_limits(r, "user:b", 6);
    assert_int_equal(ls->n, 1);
    assert_limit(&ls->w[0], &(want_t){1, 1, RL_ALGO_GCRA, 0, 1, 1000000});
    ls = rls_rule_limits(r, "user:c", 6);
    assert_limit(&ls->w[0], &(want_t){100, 60, RL_ALGO_FIXED, 1, 0, 0});
    /* The rule's own limits are untouched. */
    ls = rls_rule_limits(r, "user:d", 6);
    assert_ptr_equal(ls, &r->limits);
    assert_limit(&ls->w[0], &(want_t){100, 60, RL_ALGO_FIXED, 0, 0, 0});
    rls_policy_unref(p);
}

/* Builds and expects failure with exactly the given messages, in order. */
static void expect_errors(const char *yaml, const char *const *flags,
                          size_t nflags, const char *const *want, size_t n)
{
    rls_policy_t *p = NULL;
    rls_diag_t d;
    size_t i;
    int rc = rls_policy_build_buf(flags, nflags, yaml ? "r.yaml" : NULL, yaml,
                                  yaml ? strlen(yaml) : 0, 4, &p, &d);

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
        expect_errors(yaml, NULL, 0, w_, NELEM(w_));                           \
    } while (0)

#define LIM(s) "rules:\n  a:\n    limits:\n      - " s "\n"

/* Every bad input, at its FILE:LINE, in the map form and the word form. */
static void test_bad_files(void **state)
{
    (void)state;
    /* An unknown algorithm; a sliding window past --sliding-window-max
     * (10,000 by default: a caller's log holds up to that many entries),
     * or staggered. */
    ERRS(LIM("{limit: 1/1m, algorithm: leaky}"),
         "r.yaml:4: algorithm 'leaky': unknown algorithm (fixed-window, "
         "sliding-window, sliding-window-counter or gcra)");
    ERRS(LIM("1/1m:leaky"),
         "r.yaml:4: bad limit '1/1m:leaky': unknown algorithm or option");
    ERRS(LIM("{limit: 10001/1m, algorithm: sliding-window}"),
         "r.yaml:4: bad limit '10001/1m' (sliding-window): a sliding-window "
         "limit must be at most 10000 (--sliding-window-max)");
    ERRS(LIM("10001/1m:sliding-window"),
         "r.yaml:4: bad limit '10001/1m:sliding-window': a sliding-window "
         "limit must be at most 10000");
    ERRS(LIM("{limit: 1/1m, algorithm: sliding-window, phase: per-caller}"),
         "r.yaml:4: bad limit '1/1m' (sliding-window): per-caller staggers "
         "windows, and a sliding window has none");
    /* A burst of 0; a burst but not gcra. */
    ERRS(LIM("{rate: 1/1s, algorithm: gcra, burst: 0}"),
         "r.yaml:4: burst '0': the burst must be at least 1");
    ERRS(LIM("1/1s:gcra:burst=0"), "r.yaml:4: bad limit '1/1s:gcra:burst=0'"
                                   ": the burst must be at least 1");
    ERRS(LIM("{limit: 1/1s, burst: 5}"),
         "r.yaml:4: bad limit '1/1s' (fixed-window): burst is for gcra only");
    ERRS(LIM("{limit: 1/1s, burst: 5, algorithm: sliding-window-counter}"),
         "r.yaml:4: bad limit '1/1s' (sliding-window-counter): burst is for "
         "gcra only");
    ERRS(LIM("1/1s:burst=5"), "r.yaml:4: bad limit '1/1s:burst=5': burst is "
                              "for gcra only");
    /* per-caller on a gcra. */
    ERRS(LIM("{rate: 1/1s, algorithm: gcra, phase: per-caller}"),
         "r.yaml:4: bad limit '1/1s' (gcra): per-caller staggers windows, "
         "and a gcra has none");
    ERRS(LIM("1/1s:gcra:per-caller"), "r.yaml:4: bad limit "
                                      "'1/1s:gcra:per-caller': per-caller");
    /* A sliding-window-counter above RL_SWC_LIMIT_MAX. */
    ERRS(LIM("{limit: 68719476737/1s, algorithm: sliding-window-counter}"),
         "r.yaml:4: bad limit '68719476737/1s' (sliding-window-counter): a "
         "sliding-window-counter's limit must be at most 2^36");
    ERRS(LIM("68719476737/1s:sliding-window-counter"),
         "r.yaml:4: bad limit '68719476737/1s:sliding-window-counter': a "
         "sliding-window-counter's limit must be at most 2^36");
    /* A gcra faster than 1 per microsecond; a bucket past its cap. */
    ERRS(LIM("{rate: 1000001/1s, algorithm: gcra}"),
         "r.yaml:4: bad limit '1000001/1s' (gcra): a gcra's rate must be at "
         "most 1 per microsecond");
    ERRS(LIM("1000001/1s:gcra"), "r.yaml:4: bad limit '1000001/1s:gcra': a "
                                 "gcra's rate must be at most 1 per");
    ERRS(LIM("{rate: 1/366d, algorithm: gcra, burst: 2}"),
         "r.yaml:4: bad limit '1/366d' (gcra): a gcra's burst x interval "
         "(DURATION / N) must be at most 366 days");
    ERRS(LIM("1/366d:gcra:burst=2"), "r.yaml:4: bad limit "
                                     "'1/366d:gcra:burst=2': a gcra's burst");
    /* limit and rate: both, or neither. */
    ERRS(LIM("{limit: 1/1s, rate: 1/1s}"),
         "r.yaml:4: a limit takes 'limit' or 'rate', not both");
    ERRS(LIM("{algorithm: gcra, burst: 2}"),
         "r.yaml:4: a limit needs 'limit: N/DURATION' (or 'rate:')");
    ERRS(LIM("{}"), "r.yaml:4: a limit needs 'limit: N/DURATION'");
    /* Unknown keys; a value that is not one. */
    ERRS(LIM("{limit: 1/1m, window: 1m}"),
         "r.yaml:4: unknown key 'window' in a limit (limit, rate, algorithm, "
         "burst, phase)");
    ERRS(LIM("{limit: [1/1m]}"), "r.yaml:4: 'limit' must be a single value");
    ERRS(LIM("{limit: 1/1m, {x: 1}: 2}"),
         "r.yaml:4: a limit's keys are limit, rate, algorithm, burst, phase");
    /* A bad phase, rate or burst; the options once, as keys. */
    ERRS(LIM("{limit: 1/1m, phase: random}"),
         "r.yaml:4: phase must be aligned or per-caller");
    ERRS(LIM("{limit: 0/1m}"),
         "r.yaml:4: bad limit '0/1m': the limit must be at least 1");
    ERRS(LIM("{rate: 1/1x, algorithm: gcra}"),
         "r.yaml:4: bad rate '1/1x': the duration must be");
    ERRS(LIM("{rate: 1/1s, algorithm: gcra, burst: many}"),
         "r.yaml:4: burst 'many': the burst must be a whole number");
    ERRS(LIM("{limit: 1/1m:gcra}"),
         "r.yaml:4: bad limit '1/1m:gcra': in a map, give the algorithm, "
         "burst and phase as keys");
    ERRS(LIM("{limit: 1/1m, algorithm: gcra, algorithm: gcra}"),
         "r.yaml:4: key 'algorithm' given twice (first at line 4)");
    /* The same window length and algorithm twice, in either form. */
    ERRS(LIM("5/1m:gcra\n      - {rate: 10/60s, algorithm: gcra}"),
         "r.yaml:5: two limits with the same window length and algorithm");
    ERRS("rules:\n  a:\n    limits: [1/1m, 2/1m:per-caller]\n",
         "r.yaml:3: two limits with the same window length and algorithm");
    /* Still at most 8, whatever their algorithms. */
    ERRS("rules:\n  a:\n    limits: [1/1s, 1/1s:gcra, 1/2s, 1/2s:gcra, 1/3s,"
         " 1/3s:gcra, 1/4s, 1/4s:gcra, 1/4s:sliding-window-counter]\n",
         "r.yaml:3: more than 8 windows");
    /* Every error of a block map at its own line, all in one run. */
    ERRS("rules:\n"
         "  a:\n"
         "    limits:\n"
         "      - limit: 1/1m\n"
         "        algorithm: leaky\n"
         "        burst: 0\n"
         "        color: red\n"
         "      - rate: 1/1s\n"
         "        phase: per-caller\n"
         "        algorithm: gcra\n",
         "r.yaml:5: algorithm 'leaky'", "r.yaml:6: burst '0'",
         "r.yaml:7: unknown key 'color' in a limit",
         "r.yaml:8: bad limit '1/1s' (gcra): per-caller");
    /* Overrides: the same checks, at their lines. */
    ERRS("rules:\n"
         "  a:\n"
         "    limits: [1/1m]\n"
         "    overrides:\n"
         "      k: [1/1s:gcra:per-caller]\n"
         "      j:\n"
         "        - {rate: 1/1s, burst: 3}\n",
         "r.yaml:5: bad limit '1/1s:gcra:per-caller'",
         "r.yaml:7: bad limit '1/1s' (fixed-window): burst is for gcra only");
}

static void test_bad_flags(void **state)
{
    static const struct {
        const char *flag, *want;
    } cases[] = {
        {"a=10/1s:gcra:per-caller",
         "--rule: bad limit in 'a=10/1s:gcra:per-caller': per-caller"},
        {"a=10001/1s:sliding-window", "at most 10000 (--sliding-window-max)"},
        {"a=10/1s:burst=2", "burst is for gcra only"},
        {"a=10/1s:gcra:burst=0", "the burst must be at least 1"},
        {"a=10/1s:leaky", "unknown algorithm or option"},
        {"a=10/1s:gcra,20/1s:gcra",
         "--rule: 'a=10/1s:gcra,20/1s:gcra': two limits with the same "
         "window length and algorithm"},
    };
    size_t i;

    (void)state;
    for (i = 0; i < NELEM(cases); i++)
        expect_errors(NULL, &cases[i].flag, 1, &cases[i].want, 1);
}

/* Files without algorithms read as before: fixed windows, aligned, no
 * burst or interval, formatted as they always were. */
static void test_today_unchanged(void **state)
{
    static const char today[] = "rules:\n"
                                "  login:\n"
                                "    limits: [5/60s]\n"
                                "  api:\n"
                                "    limits: [33/1m, 2000/1h]\n"
                                "    overrides:\n"
                                "      \"user:acme\": [1000/1m, 50000/1h]\n"
                                "  search:\n"
                                "    limits: 10/1s\n"
                                "    mode: shadow\n";
    static const char *const flags[] = {"old=5/60,7/2d"};
    static const struct {
        const char *rule, *key, *fmt[2];
    } want[] = {
        {"login", NULL, {"5/1m", NULL}},
        {"api", NULL, {"33/1m", "2000/1h"}},
        {"api", "user:acme", {"1000/1m", "50000/1h"}},
        {"search", NULL, {"10/1s", NULL}},
        {"old", NULL, {"5/1m", "7/2d"}},
    };
    rls_policy_t *p = build_ok(today, flags, 1);
    char buf[48];
    size_t i, j;

    (void)state;
    assert_int_equal(rls_policy_count(p), 4);
    for (i = 0; i < NELEM(want); i++) {
        const rls_rule_t *r = rule(p, want[i].rule);
        const rls_limits_t *ls =
            want[i].key ? rls_rule_limits(r, want[i].key, strlen(want[i].key))
                        : &r->limits;
        for (j = 0; j < 2 && want[i].fmt[j] != NULL; j++) {
            assert_int_equal(ls->w[j].algo, RL_ALGO_FIXED);
            assert_int_equal(ls->w[j].phase, 0);
            assert_int_equal(ls->w[j].burst, 0);
            assert_int_equal(ls->w[j].t_us, 0);
            rls_limit_format(&ls->w[j], buf, sizeof(buf));
            assert_string_equal(buf, want[i].fmt[j]);
        }
        assert_int_equal(ls->n, j);
    }
    assert_int_equal(rule(p, "search")->mode, RLS_MODE_SHADOW);
    rls_policy_unref(p);
}

static void test_names(void **state)
{
    const char *why = NULL;
    uint32_t s;

    (void)state;
    assert_string_equal(rls_algo_name(RL_ALGO_FIXED), "fixed-window");
    assert_string_equal(rls_algo_name(RL_ALGO_SLIDING_COUNTER),
                        "sliding-window-counter");
    assert_string_equal(rls_algo_name(RL_ALGO_GCRA), "gcra");
    assert_string_equal(rls_algo_name(RL_ALGO_MAX), "unknown");
    assert_int_equal(rls_algo_parse("gcra", 4, &why), RL_ALGO_GCRA);
    assert_int_equal(rls_algo_parse("gcr", 3, &why), RL_EINVAL);
    assert_non_null(strstr(why, "unknown algorithm"));
    assert_int_equal(rls_phase_parse("per-caller", 10), 1);
    assert_int_equal(rls_phase_parse("aligned", 7), 0);
    assert_int_equal(rls_phase_parse("per", 3), RL_EINVAL);
    assert_int_equal(rls_duration_parse("90s", 3, &s), RL_OK);
    assert_int_equal(s, 90);
    assert_int_equal(rls_duration_parse("366d", 4, &s), RL_OK);
    assert_int_equal(s, 31622400);
    assert_int_equal(rls_duration_parse("367d", 4, &s), RL_EINVAL);
    assert_int_equal(rls_duration_parse("0", 1, &s), RL_EINVAL);
    assert_int_equal(rls_duration_parse("1m:gcra", 7, &s), RL_EINVAL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_compact_parse),
        cmocka_unit_test(test_format_round_trip),
        cmocka_unit_test(test_map_form),
        cmocka_unit_test(test_same_window_algorithms),
        cmocka_unit_test(test_flags),
        cmocka_unit_test(test_overrides),
        cmocka_unit_test(test_bad_files),
        cmocka_unit_test(test_bad_flags),
        cmocka_unit_test(test_today_unchanged),
        cmocka_unit_test(test_names),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
