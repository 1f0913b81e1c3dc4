/* The top offenders' window and loops (server/core/top.c): a refusal is
 * read in its epoch and the next, gone after; the loops' sketches merge;
 * each rule apart, and its name (inline limits as "(inline)"); the names
 * with refusals in the window; the opt-in metric's cap. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "core/top.h"
#include "rl_error.h"

static uint64_t read_count(rls_top_t *t, const char *rule, const char *key,
                           uint64_t now, uint64_t *total)
{
    rl_topk_sum_t s;
    uint64_t since, c = 0;
    size_t i;

    assert_int_equal(rls_top_read(t, rule, strlen(rule), now, 16, &s, &since),
                     RL_OK);
    for (i = 0; i < s.n; i++)
        if (s.e[i].len == strlen(key) &&
            memcmp(s.e[i].key, key, s.e[i].len) == 0)
            c = s.e[i].count;
    if (total != NULL)
        *total = s.total;
    rl_topk_sum_free(&s);
    return c;
}

/* Epochs of 60 s: a refusal at 10 s is read at 119 s (the next epoch)
 * and not at 120 s; one at 130 s starts afresh. */
static void test_window(void **state)
{
    rls_top_t *t = rls_top_new(4, 60);
    rls_top_loop_t *l = rls_top_join(t);
    rls_rule_stats_t st;
    uint64_t total = 0;

    (void)state;
    assert_non_null(l);
    memset(&st, 0, sizeof(st));
    strcpy(st.name, "api");
    rls_top_refused(l, &st, "alice", 5, 10000);
    rls_top_refused(l, &st, "alice", 5, 59999);
    rls_top_refused(l, &st, "bob", 3, 60000);
    assert_int_equal(read_count(t, "api", "alice", 60000, &total), 2);
    assert_int_equal(total, 3);
    assert_int_equal(read_count(t, "api", "alice", 119999, NULL), 2);
    assert_int_equal(read_count(t, "api", "alice", 120000, NULL), 0);
    assert_int_equal(read_count(t, "api", "bob", 179999, NULL), 1);
    /* Two epochs later both are gone, and a new refusal counts alone. */
    rls_top_refused(l, &st, "alice", 5, 250000);
    assert_int_equal(read_count(t, "api", "alice", 250000, &total), 1);
    assert_int_equal(total, 1);
    assert_int_equal(read_count(t, "api", "bob", 250000, NULL), 0);
    rls_top_free(t);
}

/* Two loops' refusals of one caller are summed; rules apart; an inline
 * limit's are "(inline)"; the names list each rule once. */
static void test_loops(void **state)
{
    rls_top_t *t = rls_top_new(8, 300);
    rls_top_loop_t *a = rls_top_join(t), *b = rls_top_join(t);
    rls_rule_stats_t sa, sb, inl;
    char(*names)[RL_RULE_MAX + 1] = NULL;
    size_t n = 0;
    rl_buf_t out;
    int i;

    (void)state;
    memset(&sa, 0, sizeof(sa));
    memset(&sb, 0, sizeof(sb));
    memset(&inl, 0, sizeof(inl));
    strcpy(sa.name, "api");
    strcpy(sb.name, "api");
    /* No refusal yet: the metric's families, and no series (nothing to
     * sort: UBSan once saw qsort given NULL here). */
    rl_buf_init(&out, 1 << 20);
    assert_int_equal(rls_top_metrics(t, 1000, 3, &out), RL_OK);
    assert_null(
        memmem(rl_buf_rptr(&out), rl_buf_len(&out), "rl_top_refused{", 15));
    rl_buf_free(&out);
    for (i = 0; i < 5; i++)
        rls_top_refused(a, &sa, "mallory", 7, 1000);
    for (i = 0; i < 3; i++)
        rls_top_refused(b, &sb, "mallory", 7, 1000);
    rls_top_refused(b, &inl, "x", 1, 1000);
    assert_int_equal(read_count(t, "api", "mallory", 2000, NULL), 8);
    assert_int_equal(read_count(t, "(inline)", "x", 2000, NULL), 1);
    assert_int_equal(read_count(t, "other", "x", 2000, NULL), 0);
    assert_int_equal(rls_top_names(t, 2000, &names, &n), RL_OK);
    assert_int_equal(n, 2);
    assert_string_equal(names[0], "(inline)");
    assert_string_equal(names[1], "api");
    free(names);
    /* The metric: off, the two counters alone; on, one series per
     * caller of each rule up to the cap asked. */
    rl_buf_init(&out, 1 << 20);
    assert_int_equal(rls_top_metrics(t, 2000, 0, &out), RL_OK);
    assert_null(
        memmem(rl_buf_rptr(&out), rl_buf_len(&out), "rl_top_refused{", 15));
    rl_buf_reset(&out);
    assert_int_equal(rls_top_metrics(t, 2000, 1, &out), RL_OK);
    assert_non_null(memmem(rl_buf_rptr(&out), rl_buf_len(&out),
                           "rl_top_refused{rule=\"api\",key=\"mallory\"} 8\n",
                           42));
    assert_non_null(memmem(rl_buf_rptr(&out), rl_buf_len(&out),
                           "rl_top_refusals_total 9\n", 24));
    rl_buf_free(&out);
    rls_top_free(t);
}

/* A label value escapes what Prometheus' text format needs, and bytes
 * outside printable ASCII as %XX, so two keys never make one series. */
static void test_metric_escapes(void **state)
{
    rls_top_t *t = rls_top_new(4, 300);
    rls_top_loop_t *l = rls_top_join(t);
    rls_rule_stats_t st;
    rl_buf_t out;

    (void)state;
    memset(&st, 0, sizeof(st));
    strcpy(st.name, "api");
    rls_top_refused(l, &st, "a\"b\\\n\xff%", 7, 1000);
    rl_buf_init(&out, 1 << 20);
    assert_int_equal(rls_top_metrics(t, 1000, 4, &out), RL_OK);
    assert_non_null(memmem(rl_buf_rptr(&out), rl_buf_len(&out),
                           "key=\"a\\\"b\\\\\\n%FF%25\"", 20));
    rl_buf_free(&out);
    rls_top_free(t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_window),
        cmocka_unit_test(test_loops),
        cmocka_unit_test(test_metric_escapes),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
