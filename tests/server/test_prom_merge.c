/* Merging /metrics pages (server/base/prom_merge.c): what each family's
 * samples add up to across pages (counters, histograms bucket by bucket,
 * gauges summed or kept), the order families and samples come out in, the
 * values (big integers, decimals, doubles, +Inf), label sets with escapes,
 * malformed lines refused, and pages written by prom.c's own writers
 * merging into the page those writers give for the summed counts. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "base/prom.h"
#include "base/prom_merge.h"
#include "process_metrics.h"
#include "rl_error.h"

/* Sums the gauges whose name ends in "_connections". */
static int sum_conns(const char *name, size_t len)
{
    return len >= 12 && memcmp(name + len - 12, "_connections", 12) == 0;
}

/* Merges the n NUL-terminated pages; the result NUL-terminated in out
 * (freed by the caller with rl_buf_free). */
static int merge(rl_buf_t *out, const char *const *pages, size_t n,
                 rls_prom_sum_gauge_fn sg)
{
    size_t len[8], i;
    int rc;

    assert_true(n <= 8);
    for (i = 0; i < n; i++)
        len[i] = strlen(pages[i]);
    rl_buf_init(out, 64 << 20);
    rc = rls_prom_merge(pages, len, n, sg, out);
    if (rc == RL_OK)
        assert_int_equal(rl_buf_append(out, "", 1), RL_OK);
    return rc;
}

/* Asserts that merging the pages gives want. */
static void expect(const char *const *pages, size_t n, rls_prom_sum_gauge_fn sg,
                   const char *want)
{
    rl_buf_t out;

    assert_int_equal(merge(&out, pages, n, sg), RL_OK);
    assert_string_equal((const char *)rl_buf_rptr(&out), want);
    rl_buf_free(&out);
}

static void counters_two_pages(void **state)
{
    const char *p[2] = {"# HELP a_total Things done.\n"
                        "# TYPE a_total counter\n"
                        "a_total 1\n"
                        "a_total{k=\"x\"} 2\n",
                        "# HELP a_total Another text.\n"
                        "# TYPE a_total counter\n"
                        "a_total{k=\"x\"} 5\n"
                        "a_total 3\n"
                        "a_total{k=\"y\"} 7\n"};

    (void)state;
    /* The first page's HELP; its samples in its order, then the second
     * page's new one. */
    expect(p, 2, NULL,
           "# HELP a_total Things done.\n"
           "# TYPE a_total counter\n"
           "a_total 4\n"
           "a_total{k=\"x\"} 7\n"
           "a_total{k=\"y\"} 7\n");
}

static void three_pages_and_late_families(void **state)
{
    const char *p[3] = {"# TYPE a counter\na 1\n# TYPE b counter\nb 10\n",
                        "# TYPE c counter\nc 100\n# TYPE a counter\na 2\n"
                        "# TYPE b counter\nb{x=\"1\"} 5",
                        "# TYPE b counter\nb 20\n# TYPE d counter\nd 1\n"
                        "# TYPE a counter\na 3\nc 1\n"};

    (void)state;
    /* c appears only from page 1, d only in page 2: appended in that
     * order; b's labelled sample joins b's group, not the end. Page 1's
     * last line has no '\n'. */
    expect(p, 3, NULL,
           "# TYPE a counter\na 6\n"
           "# TYPE b counter\nb 30\nb{x=\"1\"} 5\n"
           "# TYPE c counter\nc 101\n"
           "# TYPE d counter\nd 1\n");
}

static void gauges_kept_or_summed(void **state)
{
    const char *p[2] = {"# TYPE rl_open_connections gauge\n"
                        "rl_open_connections{fe=\"native\"} 3\n"
                        "# TYPE rl_policy_version gauge\n"
                        "rl_policy_version 7\n"
                        "untyped_thing 1\n",
                        "# TYPE rl_open_connections gauge\n"
                        "rl_open_connections{fe=\"native\"} 4\n"
                        "# TYPE rl_policy_version gauge\n"
                        "rl_policy_version 8\n"
                        "untyped_thing 2\n"};

    (void)state;
    expect(p, 2, sum_conns,
           "# TYPE rl_open_connections gauge\n"
           "rl_open_connections{fe=\"native\"} 7\n"
           "# TYPE rl_policy_version gauge\n"
           "rl_policy_version 7\n"
           "untyped_thing 1\n");
    /* Without sum_gauge every gauge keeps the first page's value. */
    expect(p, 2, NULL,
           "# TYPE rl_open_connections gauge\n"
           "rl_open_connections{fe=\"native\"} 3\n"
           "# TYPE rl_policy_version gauge\n"
           "rl_policy_version 7\n"
           "untyped_thing 1\n");
}

static void histograms_bucket_by_bucket(void **state)
{
    const char *p[2] = {"# HELP rtt_seconds Round trips.\n"
                        "# TYPE rtt_seconds histogram\n"
                        "rtt_seconds_bucket{le=\"0.00005\"} 1\n"
                        "rtt_seconds_bucket{le=\"0.0001\"} 3\n"
                        "rtt_seconds_bucket{le=\"+Inf\"} 4\n"
                        "rtt_seconds_sum 0.00035\n"
                        "rtt_seconds_count 4\n"
                        "# TYPE next_total counter\n"
                        "next_total 1\n",
                        "# HELP rtt_seconds Round trips.\n"
                        "# TYPE rtt_seconds histogram\n"
                        "rtt_seconds_bucket{le=\"0.00005\"} 0\n"
                        "rtt_seconds_bucket{le=\"0.0001\"} 2\n"
                        "rtt_seconds_bucket{le=\"+Inf\"} 5\n"
                        "rtt_seconds_sum 2.50015\n"
                        "rtt_seconds_count 5\n"
                        "rtt_seconds_bucket{node=\"b\",le=\"+Inf\"} 1\n"
                        "rtt_seconds_sum{node=\"b\"} 1\n"
                        "rtt_seconds_count{node=\"b\"} 1\n"
                        "# TYPE next_total counter\n"
                        "next_total 1\n"};

    (void)state;
    /* The sum is exact ("2.5005", not 2.5004999999999997); the second
     * page's new series stays in its family, before next_total. */
    expect(p, 2, NULL,
           "# HELP rtt_seconds Round trips.\n"
           "# TYPE rtt_seconds histogram\n"
           "rtt_seconds_bucket{le=\"0.00005\"} 1\n"
           "rtt_seconds_bucket{le=\"0.0001\"} 5\n"
           "rtt_seconds_bucket{le=\"+Inf\"} 9\n"
           "rtt_seconds_sum 2.5005\n"
           "rtt_seconds_count 9\n"
           "rtt_seconds_bucket{node=\"b\",le=\"+Inf\"} 1\n"
           "rtt_seconds_sum{node=\"b\"} 1\n"
           "rtt_seconds_count{node=\"b\"} 1\n"
           "# TYPE next_total counter\n"
           "next_total 2\n");
}

static void summaries(void **state)
{
    const char *p[2] = {"# TYPE s summary\ns{quantile=\"0.5\"} 0.25\n"
                        "s_sum 1.5\ns_count 6\n",
                        "# TYPE s summary\ns{quantile=\"0.5\"} 0.75\n"
                        "s_sum 2\ns_count 2\n"};

    (void)state;
    /* _sum and _count add up; a quantile is the first page's. */
    expect(p, 2, NULL,
           "# TYPE s summary\ns{quantile=\"0.5\"} 0.25\ns_sum 3.5\n"
           "s_count 8\n");
}

static void labels_with_escapes(void **state)
{
    const char *p[2] = {"# TYPE req_total counter\n"
                        "req_total{path=\"/a,b\",q=\"x\\\"y\"} 1\n"
                        "req_total{path=\"/a\",q=\"b,q=\\\"x\"} 10\n"
                        "req_total{path=\"\\\\\",q=\"line\\nnext\"} 100\n"
                        "req_total{a=\"1\",b=\"2\"} 1\n",
                        "# TYPE req_total counter\n"
                        "req_total{path=\"/a,b\",q=\"x\\\"y\"} 2\n"
                        "req_total{path=\"/a\",q=\"b,q=\\\"x\"} 20\n"
                        "req_total{path=\"\\\\\",q=\"line\\nnext\"} 200\n"
                        "req_total{b=\"2\",a=\"1\"} 1\n"};

    (void)state;
    /* A comma or an escaped quote inside a value is the value's; label
     * sets are compared as written, so the reordered one is its own. */
    expect(p, 2, NULL,
           "# TYPE req_total counter\n"
           "req_total{path=\"/a,b\",q=\"x\\\"y\"} 3\n"
           "req_total{path=\"/a\",q=\"b,q=\\\"x\"} 30\n"
           "req_total{path=\"\\\\\",q=\"line\\nnext\"} 300\n"
           "req_total{a=\"1\",b=\"2\"} 1\n"
           "req_total{b=\"2\",a=\"1\"} 1\n");
}

static void big_integers(void **state)
{
    const char *p2[2] = {"# TYPE c counter\nc 9223372036854775808\n"
                         "d 18446744073709551616\n",
                         "# TYPE c counter\nc 9223372036854775807\n"};
    const char *p3[3] = {"# TYPE c counter\nc 9223372036854775808\n"
                         "# TYPE big counter\nbig 18446744073709551616\n",
                         "# TYPE c counter\nc 9223372036854775807\n"
                         "# TYPE big counter\nbig 1\n",
                         "# TYPE c counter\nc 1\n"};

    (void)state;
    /* 2^63 + 2^63-1 is exactly 2^64-1 (a double would say 2^64). */
    expect(p2, 2, NULL,
           "# TYPE c counter\nc 18446744073709551615\n"
           "d 18446744073709551616\n");
    /* One more saturates; a literal past 2^64-1 adds as a double. */
    expect(p3, 3, NULL,
           "# TYPE c counter\nc 18446744073709551615\n"
           "# TYPE big counter\nbig 1.8446744073709552e+19\n");
}

static void decimals_and_doubles(void **state)
{
    const char *p[2] = {"# TYPE a counter\na 1.5\n"
                        "# TYPE b counter\nb 0.1\n"
                        "# TYPE c counter\nc 1e3\n"
                        "# TYPE d counter\nd -1\n"
                        "# TYPE e counter\ne 0.1e0\n"
                        "# TYPE f counter\nf 12.50\n"
                        "# TYPE g counter\ng 0.30\n"
                        "# TYPE h counter\nh 1.\n"
                        "# TYPE i counter\ni 0.0000000000000000001\n",
                        "# TYPE a counter\na 2.25\n"
                        "# TYPE b counter\nb 0.2\n"
                        "# TYPE c counter\nc 1\n"
                        "# TYPE d counter\nd 0.5\n"
                        "# TYPE e counter\ne 0.2\n"
                        "# TYPE f counter\nf 0.5\n"
                        "# TYPE g counter\ng 0.70\n"
                        "# TYPE h counter\nh .5\n"
                        "# TYPE i counter\ni 1\n"};

    (void)state;
    /* Decimals add exactly (0.1 + 0.2 is 0.3) and print as prom.c does,
     * without trailing zeros; a sign or exponent makes a double, printed
     * in the shortest form that reads back (0.30000000000000004 is the
     * double 0.1 + 0.2). */
    expect(p, 2, NULL,
           "# TYPE a counter\na 3.75\n"
           "# TYPE b counter\nb 0.3\n"
           "# TYPE c counter\nc 1001\n"
           "# TYPE d counter\nd -0.5\n"
           "# TYPE e counter\ne 0.30000000000000004\n"
           "# TYPE f counter\nf 13\n"
           "# TYPE g counter\ng 1\n"
           "# TYPE h counter\nh 1.5\n"
           "# TYPE i counter\ni 1.0000000000000000001\n");
}

static void infinities_and_nan(void **state)
{
    const char *p[2] = {"# TYPE a gauge\na +Inf\n"
                        "# TYPE b counter\nb +Inf\n"
                        "# TYPE c counter\nc Inf\n"
                        "# TYPE d counter\nd NaN\n"
                        "# TYPE e counter\ne -Inf\n"
                        "# TYPE f counter\nf 1\n"
                        "# TYPE g counter\ng inf\n",
                        "# TYPE a gauge\na 1\n"
                        "# TYPE b counter\nb 1\n"
                        "# TYPE c counter\nc 2\n"
                        "# TYPE d counter\nd 1\n"
                        "# TYPE e counter\ne +Inf\n"
                        "# TYPE f counter\nf -Inf\n"};

    (void)state;
    /* Values kept as written ("inf" alone, a's +Inf); sums printed the
     * way Prometheus spells them. */
    expect(p, 2, NULL,
           "# TYPE a gauge\na +Inf\n"
           "# TYPE b counter\nb +Inf\n"
           "# TYPE c counter\nc +Inf\n"
           "# TYPE d counter\nd NaN\n"
           "# TYPE e counter\ne NaN\n"
           "# TYPE f counter\nf -Inf\n"
           "# TYPE g counter\ng inf\n");
}

static void lenient_spellings(void **state)
{
    const char *p[2] = {"\n  # a comment, dropped\n"
                        "#HELP  x   Text \\\\ with \\n escapes.  \n"
                        "#  TYPE x\tCOUNTER\n"
                        "# HELP\n"
                        "\t x  1  1700000000000\n"
                        "x{ a = \"b\" , } 2\n"
                        "x{} 3\n"
                        "x{a=\"b\"}4\n"
                        "x:y_z 5 -3\n"
                        "\n\n",
                        "# HELP empty\n"
                        "x 10\n"
                        "x{} 10"};

    (void)state;
    /* Blanks, comments and timestamps go; HELP text stays as written;
     * "# HELP" alone is a comment; a label set as written is the key. */
    expect(p, 2, NULL,
           "# HELP x Text \\\\ with \\n escapes.\n"
           "# TYPE x counter\n"
           "x 11\n"
           "x{ a = \"b\" , } 2\n"
           "x{} 13\n"
           "x{a=\"b\"} 4\n"
           "x:y_z 5\n"
           "# HELP empty\n");
}

static void malformed_refused(void **state)
{
    static const char *const bad[] = {
        "x",
        "x ",
        "x{",
        "x{a=\"b\"",
        "x{a=\"b\"} ",
        "x{a=b} 1",
        "x{a=\"b} 1",
        "x{a=\"\\q\"} 1",
        "x{a=\"b\"\"c\"} 1",
        "x{a=\"b\",,} 1",
        "x{,} 1",
        "x{1a=\"b\"} 1",
        "x{a:b=\"c\"} 1",
        "x{a=\"b\"}} 1",
        "1x 1",
        "x-y 1",
        "x 1 2 3",
        "x 1 abc",
        "x 1 -",
        "x 1 1.5",
        "x abc",
        "x 0x10",
        "x 1.2.3",
        "x 1e",
        "x 1e+",
        "x --1",
        "x +-1",
        "x .",
        "x +",
        "x +NaN",
        "x 1_000",
        "x 1\r",
        "# TYPE x",
        "# TYPE x bogus",
        "# TYPE x counter extra",
        "# TYPE 1x counter",
        "# TYPE x{} counter",
        "# HELP x bad \\escape",
        "# HELP x trailing \\",
        "# HELP x{a=\"b\"} text",
    };
    size_t i;

    (void)state;
    for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        /* The bad line after a good one, in the second page: nothing is
         * appended to out, which keeps what it held. */
        const char *p[2] = {"# TYPE ok counter\nok 1\n", NULL};
        char page[128];
        size_t len[2];
        rl_buf_t out;

        snprintf(page, sizeof(page), "ok 2\n%s\nok 3\n", bad[i]);
        p[1] = page;
        len[0] = strlen(p[0]);
        len[1] = strlen(page);
        rl_buf_init(&out, 1 << 20);
        assert_int_equal(rl_buf_append(&out, "kept", 4), RL_OK);
        if (rls_prom_merge(p, len, 2, NULL, &out) != RL_EINVAL)
            fail_msg("accepted: \"%s\"", bad[i]);
        assert_int_equal(rl_buf_len(&out), 4);
        /* Last in its page, without its '\n', the same. */
        len[1] = strlen(page) - strlen("\nok 3\n");
        assert_int_equal(rls_prom_merge(p, len, 2, NULL, &out), RL_EINVAL);
        assert_int_equal(rl_buf_len(&out), 4);
        rl_buf_free(&out);
    }
}

static void sizes(void **state)
{
    const char *p[2] = {"# TYPE a counter\na 1\n", "a 2\n"};
    size_t len[2] = {RLS_PROM_MERGE_MAX, 1};
    rl_buf_t out;

    (void)state;
    rl_buf_init(&out, 1 << 20);
    /* Too much input is refused before anything is read or reserved (the
     * lengths are larger than the strings: they must not be touched). */
    assert_int_equal(rls_prom_merge(p, len, 2, NULL, &out), RL_EFULL);
    len[0] = SIZE_MAX;
    assert_int_equal(rls_prom_merge(p, len, 2, NULL, &out), RL_EFULL);
    assert_int_equal(rl_buf_len(&out), 0);
    /* No pages, and empty ones, give an empty page. */
    assert_int_equal(rls_prom_merge(NULL, NULL, 0, NULL, &out), RL_OK);
    len[0] = len[1] = 0;
    assert_int_equal(rls_prom_merge(p, len, 2, NULL, &out), RL_OK);
    assert_int_equal(rl_buf_len(&out), 0);
    rl_buf_free(&out);
    /* A result past out's cap. */
    len[0] = strlen(p[0]);
    len[1] = strlen(p[1]);
    rl_buf_init(&out, 8);
    assert_int_equal(rls_prom_merge(p, len, 2, NULL, &out), RL_EFULL);
    rl_buf_free(&out);
}

/* Many series, so both tables grow many times; every one is summed once
 * per page, and the output keeps their order. */
static void many_series(void **state)
{
    enum { N = 50000 };
    rl_buf_t a, out;
    const char *p[3];
    size_t len[3], i;
    char *s, *line;

    (void)state;
    rl_buf_init(&a, 64 << 20);
    for (i = 0; i < N; i++) {
        if (i % 100 == 0)
            assert_int_equal(rl_buf_printf(&a, "# TYPE f%zu counter\n", i),
                             RL_OK);
        assert_int_equal(
            rl_buf_printf(&a, "f%zu{i=\"%zu\"} %zu\n", i - i % 100, i, i),
            RL_OK);
    }
    p[0] = p[1] = p[2] = (const char *)rl_buf_rptr(&a);
    len[0] = len[1] = len[2] = rl_buf_len(&a);
    rl_buf_init(&out, 64 << 20);
    assert_int_equal(rls_prom_merge(p, len, 3, NULL, &out), RL_OK);
    assert_int_equal(rl_buf_append(&out, "", 1), RL_OK);
    s = (char *)rl_buf_rptr(&out);
    for (i = 0, line = strtok(s, "\n"); line != NULL;
         line = strtok(NULL, "\n")) {
        char want[64];
        if (line[0] == '#')
            continue;
        snprintf(want, sizeof(want), "f%zu{i=\"%zu\"} %zu", i - i % 100, i,
                 3 * i);
        assert_string_equal(line, want);
        i++;
    }
    assert_int_equal(i, N);
    rl_buf_free(&a);
    rl_buf_free(&out);
}

/* A TYPE line after samples of its histogram (its HELP before them):
 * they were read as families of their own, and join it then, in the order
 * first seen, so the page written reads back the same. */
static void late_type(void **state)
{
    const char *p[2] = {"# HELP h H.\nt 0\nh_count 1\nh_sum 2\n"
                        "# TYPE h histogram\nh_count 2\n"
                        "h_bucket{le=\"+Inf\"} 3\nh_count{x=\"1\"} 1\n",
                        "h_sum 1\n"};

    (void)state;
    /* h_count's first value was kept (an untyped family's), the next one
     * summed (the histogram's). */
    expect(p, 2, NULL,
           "# HELP h H.\n# TYPE h histogram\nh_count 3\nh_sum 3\n"
           "h_bucket{le=\"+Inf\"} 3\nh_count{x=\"1\"} 1\nt 0\n");
}

/* Merging the output alone gives it back. */
static void canonical(void **state)
{
    const char *p[3] = {"# HELP h H.\n# TYPE h histogram\n"
                        "h_bucket{le=\"1\"} 1\nh_bucket{le=\"+Inf\"} 2\n"
                        "h_sum 0.5\nh_count 2\nu 1.50\n# TYPE g gauge\n"
                        "g 3\n",
                        "# TYPE h histogram\nh_bucket{le=\"1\"} 1\n"
                        "h_bucket{le=\"+Inf\"} 2\nh_sum 1e-1\nh_count 2\n"
                        "# TYPE g gauge\ng 4 123\n",
                        "z{a=\"\\\\\"} +Inf\n# HELP h other\n"};
    rl_buf_t once, twice;
    const char *q[1];
    size_t len[1];

    (void)state;
    assert_int_equal(merge(&once, p, 3, NULL), RL_OK);
    q[0] = (const char *)rl_buf_rptr(&once);
    len[0] = rl_buf_len(&once) - 1;
    rl_buf_init(&twice, 1 << 20);
    assert_int_equal(rls_prom_merge(q, len, 1, NULL, &twice), RL_OK);
    assert_int_equal(rl_buf_len(&twice), len[0]);
    assert_memory_equal(rl_buf_rptr(&twice), q[0], len[0]);
    assert_string_equal(q[0], "# HELP h H.\n# TYPE h histogram\n"
                              "h_bucket{le=\"1\"} 2\n"
                              "h_bucket{le=\"+Inf\"} 4\nh_sum 0.6\n"
                              "h_count 4\nu 1.50\n# TYPE g gauge\ng 3\n"
                              "z{a=\"\\\\\"} +Inf\n");
    rl_buf_free(&once);
    rl_buf_free(&twice);
}

/* ---- pages as the server writes them ---- */

typedef struct counts_s {
    uint64_t requests, conns, version;
    uint64_t kinds[3];
    rls_hist_t rtt, batch, node;
} counts_t;

static int sum_rl_conns(const char *name, size_t len)
{
    return len == 14 && memcmp(name, "rl_connections", 14) == 0;
}

static void render(rl_buf_t *b, const counts_t *c)
{
    static const char *const kinds[3] = {"timeout", "unavailable", "other"};

    rl_buf_init(b, 1 << 20);
    assert_int_equal(
        rls_prom_counter(b, "rl_requests_total", "Requests.", c->requests),
        RL_OK);
    assert_int_equal(rls_prom_gauge(b, "rl_connections", "Open.", c->conns),
                     RL_OK);
    assert_int_equal(
        rls_prom_gauge(b, "rl_policy_version", "Version.", c->version), RL_OK);
    assert_int_equal(rls_prom_labelled(b, "rl_store_errors_total", "Errors.",
                                       "kind", kinds, c->kinds, 0, 3),
                     RL_OK);
    assert_int_equal(
        rls_prom_histogram(b, "rl_store_rtt_seconds", "RTT.", &c->rtt, 1),
        RL_OK);
    assert_int_equal(
        rls_prom_histogram(b, "rl_batch_size", "Size.", &c->batch, 0), RL_OK);
    assert_int_equal(
        rls_prom_family(b, "rl_node_rtt_seconds", "histogram", "Per node."),
        RL_OK);
    assert_int_equal(rls_prom_histogram_series(b, "rl_node_rtt_seconds", "node",
                                               "a:6379", &c->node, 1),
                     RL_OK);
}

static void counts_init(counts_t *c, uint64_t seed)
{
    static const uint64_t rtt[] = {7,    50,   51,    99,     240,    777,
                                   1000, 2501, 33333, 250000, 999999, 1234567};
    size_t i;

    memset(c, 0, sizeof(*c));
    rls_hist_init(&c->rtt, rls_rtt_bounds_us, 12);
    rls_hist_init(&c->batch, rls_batch_bounds, 11);
    rls_hist_init(&c->node, rls_rtt_bounds_us, 12);
    c->requests = 1000 * seed + 1;
    c->conns = seed + 2;
    c->version = seed;
    for (i = 0; i < 3; i++)
        c->kinds[i] = seed * i;
    for (i = 0; i < 12; i++)
        if ((seed >> (i % 4)) & 1) {
            rls_hist_observe(&c->rtt, rtt[i] * seed);
            rls_hist_observe(&c->batch, i * seed);
            rls_hist_observe(&c->node, rtt[11 - i] + seed);
        }
}

static void hist_add(rls_hist_t *a, const rls_hist_t *b)
{
    size_t i;

    for (i = 0; i <= RLS_HIST_MAX; i++)
        a->counts[i] += b->counts[i];
    a->sum += b->sum;
    a->count += b->count;
}

static void server_pages(void **state)
{
    counts_t c[3], total;
    rl_buf_t page[3], want, got;
    const char *p[3];
    size_t len[3], i;

    (void)state;
    for (i = 0; i < 3; i++) {
        counts_init(&c[i], 3 + 4 * i);
        render(&page[i], &c[i]);
        p[i] = (const char *)rl_buf_rptr(&page[i]);
        len[i] = rl_buf_len(&page[i]);
    }
    /* What one loop that counted everything would have written: every
     * counter and histogram summed, the connections gauge summed, the
     * policy version the first loop's. */
    total = c[0];
    for (i = 1; i < 3; i++) {
        size_t k;
        total.requests += c[i].requests;
        total.conns += c[i].conns;
        for (k = 0; k < 3; k++)
            total.kinds[k] += c[i].kinds[k];
        hist_add(&total.rtt, &c[i].rtt);
        hist_add(&total.batch, &c[i].batch);
        hist_add(&total.node, &c[i].node);
    }
    render(&want, &total);
    rl_buf_init(&got, 1 << 20);
    assert_int_equal(rls_prom_merge(p, len, 3, sum_rl_conns, &got), RL_OK);
    assert_int_equal(rl_buf_append(&got, "", 1), RL_OK);
    assert_int_equal(rl_buf_append(&want, "", 1), RL_OK);
    assert_string_equal((const char *)rl_buf_rptr(&got),
                        (const char *)rl_buf_rptr(&want));
    /* One page alone comes back as it was written. */
    rl_buf_reset(&got);
    assert_int_equal(rls_prom_merge(p, len, 1, sum_rl_conns, &got), RL_OK);
    assert_int_equal(rl_buf_len(&got), len[0]);
    assert_memory_equal(rl_buf_rptr(&got), p[0], len[0]);
    for (i = 0; i < 3; i++)
        rl_buf_free(&page[i]);
    rl_buf_free(&want);
    rl_buf_free(&got);
}

/* The value of the sample line "name v" in the page s. */
static double value_of(const char *s, const char *name)
{
    char key[64];
    const char *at;

    snprintf(key, sizeof(key), "\n%s ", name);
    at = strstr(s, key);
    assert_non_null(at);
    return strtod(at + strlen(key), NULL);
}

static void process_page(void **state)
{
    rl_buf_t page, got;
    const char *p[2];
    size_t len[2];
    const char *s;

    (void)state;
    rl_buf_init(&page, 1 << 20);
    assert_int_equal(rls_process_metrics(&page), RL_OK);
    assert_int_equal(rl_buf_append(&page, "", 1), RL_OK);
    p[0] = p[1] = (const char *)rl_buf_rptr(&page);
    len[0] = len[1] = rl_buf_len(&page) - 1;
    rl_buf_init(&got, 1 << 20);
    assert_int_equal(rls_prom_merge(p, len, 2, NULL, &got), RL_OK);
    assert_int_equal(rl_buf_append(&got, "", 1), RL_OK);
    s = (const char *)rl_buf_rptr(&got);
    /* The CPU seconds (a counter, "%.2f") doubled exactly; gauges kept. */
    assert_true(value_of(s, "process_cpu_seconds_total") ==
                2 * value_of(p[0], "process_cpu_seconds_total"));
    assert_true(value_of(s, "process_max_fds") ==
                value_of(p[0], "process_max_fds"));
    assert_true(value_of(s, "process_resident_memory_bytes") ==
                value_of(p[0], "process_resident_memory_bytes"));
    rl_buf_free(&page);
    rl_buf_free(&got);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(counters_two_pages),
        cmocka_unit_test(three_pages_and_late_families),
        cmocka_unit_test(gauges_kept_or_summed),
        cmocka_unit_test(histograms_bucket_by_bucket),
        cmocka_unit_test(summaries),
        cmocka_unit_test(labels_with_escapes),
        cmocka_unit_test(big_integers),
        cmocka_unit_test(decimals_and_doubles),
        cmocka_unit_test(infinities_and_nan),
        cmocka_unit_test(lenient_spellings),
        cmocka_unit_test(malformed_refused),
        cmocka_unit_test(sizes),
        cmocka_unit_test(many_series),
        cmocka_unit_test(late_type),
        cmocka_unit_test(canonical),
        cmocka_unit_test(server_pages),
        cmocka_unit_test(process_page),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
