#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "rl_clock.h"
#include "rl_error.h"
#include "rl_hist.h"

/* Buckets tile the value range: each starts one past the end of the one
 * before, every value maps into the bucket whose bounds hold it, and no
 * bucket above the exact range is wider than 1/2^(sub_bits-1) of its low
 * end. Checked for every bucket of a small histogram and a realistic one. */
static void check_tiling(unsigned sub_bits, uint64_t highest)
{
    rl_hist_t h;
    size_t i;

    assert_int_equal(rl_hist_init(&h, sub_bits, highest), RL_OK);
    assert_int_equal(rl_hist_bucket_low(&h, 0), 0);
    for (i = 0; i < h.nbuckets; i++) {
        uint64_t lo = rl_hist_bucket_low(&h, i);
        uint64_t hi = rl_hist_bucket_high(&h, i);

        assert_true(lo <= hi);
        if (i + 1 < h.nbuckets)
            assert_int_equal(hi + 1, rl_hist_bucket_low(&h, i + 1));
        assert_int_equal(rl_hist_index(&h, lo), i);
        assert_int_equal(rl_hist_index(&h, hi), i);
        assert_int_equal(rl_hist_index(&h, lo + (hi - lo) / 2), i);
        if (lo >= (UINT64_C(1) << sub_bits))
            assert_true((hi - lo + 1) * (UINT64_C(1) << (sub_bits - 1)) <= lo);
    }
    /* The last bucket holds highest. */
    assert_true(rl_hist_bucket_low(&h, h.nbuckets - 1) <= highest);
    assert_true(rl_hist_bucket_high(&h, h.nbuckets - 1) >= highest);
    rl_hist_free(&h);
}

static void test_tiling(void **state)
{
    (void)state;
    check_tiling(2, 1000);
    check_tiling(4, 1u << 20);
    check_tiling(8, (UINT64_C(1) << 40) - 1);
}

static void test_extremes(void **state)
{
    rl_hist_t h;

    (void)state;
    assert_int_equal(rl_hist_init(&h, 16, UINT64_MAX), RL_OK);
    assert_int_equal(rl_hist_index(&h, UINT64_MAX), h.nbuckets - 1);
    assert_int_equal(rl_hist_bucket_high(&h, h.nbuckets - 1), UINT64_MAX);
    rl_hist_record(&h, UINT64_MAX);
    rl_hist_record(&h, 0);
    assert_int_equal(rl_hist_percentile(&h, 100), UINT64_MAX);
    assert_int_equal(rl_hist_percentile(&h, 0), 0);
    assert_int_equal(rl_hist_percentile(&h, 50), 0);
    rl_hist_free(&h);
}

static void test_init_errors(void **state)
{
    rl_hist_t h;

    (void)state;
    assert_int_equal(rl_hist_init(&h, 1, 1000), RL_EINVAL);
    assert_null(h.counts);
    assert_int_equal(rl_hist_init(&h, 17, 1000), RL_EINVAL);
    assert_int_equal(rl_hist_init(&h, 8, 0), RL_EINVAL);
    rl_hist_free(&h); /* nothing to free: must not crash */
    rl_hist_free(NULL);
}

static void test_empty(void **state)
{
    rl_hist_t h;
    size_t i = 0;
    uint64_t lo, hi, n;

    (void)state;
    assert_int_equal(rl_hist_init(&h, 8, 1000000), RL_OK);
    assert_int_equal(rl_hist_percentile(&h, 50), 0);
    assert_int_equal(rl_hist_percentile(&h, 100), 0);
    assert_true(rl_hist_mean(&h) == 0);
    assert_int_equal(rl_hist_next(&h, &i, &lo, &hi, &n), 0);
    rl_hist_free(&h);
}

/* Small values are exact: 1..100 once each. */
static void test_exact_small_values(void **state)
{
    rl_hist_t h;
    uint64_t v;

    (void)state;
    assert_int_equal(rl_hist_init(&h, 8, 1000000), RL_OK);
    for (v = 1; v <= 100; v++)
        rl_hist_record(&h, v);
    assert_int_equal(h.total, 100);
    assert_int_equal(h.min, 1);
    assert_int_equal(h.max, 100);
    assert_int_equal(rl_hist_percentile(&h, 50), 50);
    assert_int_equal(rl_hist_percentile(&h, 90), 90);
    assert_int_equal(rl_hist_percentile(&h, 99), 99);
    assert_int_equal(rl_hist_percentile(&h, 99.5), 100);
    assert_int_equal(rl_hist_percentile(&h, 0), 1);
    assert_int_equal(rl_hist_percentile(&h, 100), 100);
    assert_true(rl_hist_mean(&h) == 50.5);
    rl_hist_free(&h);
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

    return x < y ? -1 : x > y;
}

/* Against the exact answer: a skewed spread of values over six decades,
 * every percentile read back within the bucket precision of the true one
 * (and never below it: the top of the bucket is reported). */
static void test_percentiles_match_sorted(void **state)
{
    enum { N = 20000 };
    static const double ps[] = {1, 10, 25, 50, 75, 90, 99, 99.9, 99.99};
    uint64_t *vals = malloc(N * sizeof(*vals));
    uint64_t x = 88172645463325252ull;
    rl_hist_t h;
    size_t i, k;

    (void)state;
    assert_non_null(vals);
    assert_int_equal(rl_hist_init(&h, 8, UINT64_C(1) << 40), RL_OK);
    for (i = 0; i < N; i++) {
        rl_xorshift64(&x);
        /* 10^3 .. 10^9, log-uniform-ish: a shift picks the decade. */
        vals[i] = 1000 + ((x >> 20) % 1000) * (UINT64_C(1) << (x % 20));
        rl_hist_record(&h, vals[i]);
    }
    qsort(vals, N, sizeof(*vals), cmp_u64);
    for (k = 0; k < sizeof(ps) / sizeof(ps[0]); k++) {
        double want = ps[k] / 100.0 * N;
        size_t rank = (size_t)want;
        uint64_t exact, got;

        if ((double)rank < want)
            rank++;
        exact = vals[rank - 1];
        got = rl_hist_percentile(&h, ps[k]);
        assert_true(got >= exact);
        assert_true((double)(got - exact) <= (double)exact / 128.0 + 1);
    }
    assert_int_equal(rl_hist_percentile(&h, 100), vals[N - 1]);
    assert_int_equal(rl_hist_percentile(&h, 0), vals[0]);
    free(vals);
    rl_hist_free(&h);
}

static void test_saturation(void **state)
{
    rl_hist_t h;

    (void)state;
    assert_int_equal(rl_hist_init(&h, 8, 10000), RL_OK);
    rl_hist_record(&h, 5);
    rl_hist_record_n(&h, 50000, 3);
    assert_int_equal(h.total, 4);
    assert_int_equal(h.saturated, 3);
    assert_int_equal(h.max, 50000);
    /* Saturated values sit in the top bucket; the max is still exact. */
    assert_int_equal(h.counts[h.nbuckets - 1], 3);
    assert_int_equal(rl_hist_percentile(&h, 100), 50000);
    assert_true(rl_hist_percentile(&h, 50) >= 10000);
    assert_int_equal(rl_hist_percentile(&h, 25), 5);
    rl_hist_record_n(&h, 7, 0); /* n = 0 records nothing */
    assert_int_equal(h.total, 4);
    assert_int_equal(h.min, 5);
    rl_hist_free(&h);
}

static void test_merge_and_reset(void **state)
{
    rl_hist_t a, b, c;

    (void)state;
    assert_int_equal(rl_hist_init(&a, 8, 1u << 30), RL_OK);
    assert_int_equal(rl_hist_init(&b, 8, 1u << 30), RL_OK);
    assert_int_equal(rl_hist_init(&c, 7, 1u << 30), RL_OK);
    rl_hist_record_n(&a, 100, 10);
    rl_hist_record_n(&b, 1000000, 10);
    assert_int_equal(rl_hist_merge(&a, &b), RL_OK);
    assert_int_equal(a.total, 20);
    assert_int_equal(a.min, 100);
    assert_int_equal(a.max, 1000000);
    assert_int_equal(rl_hist_percentile(&a, 50), 100);
    assert_int_equal(rl_hist_percentile(&a, 51), 1000000);
    assert_true(rl_hist_mean(&a) == (100.0 * 10 + 1e6 * 10) / 20);
    assert_int_equal(rl_hist_merge(&a, &c), RL_EINVAL);
    assert_int_equal(a.total, 20);

    rl_hist_reset(&a);
    assert_int_equal(a.total, 0);
    assert_int_equal(rl_hist_percentile(&a, 99), 0);
    rl_hist_record(&a, 42);
    assert_int_equal(rl_hist_percentile(&a, 50), 42);
    assert_int_equal(a.min, 42);
    rl_hist_free(&a);
    rl_hist_free(&b);
    rl_hist_free(&c);
}

static void test_iterate(void **state)
{
    rl_hist_t h;
    size_t i = 0, buckets = 0;
    uint64_t lo, hi, n, sum = 0, last = 0;

    (void)state;
    assert_int_equal(rl_hist_init(&h, 8, 1u << 30), RL_OK);
    rl_hist_record_n(&h, 3, 2);
    rl_hist_record_n(&h, 70000, 5);
    rl_hist_record(&h, 70001); /* same bucket as 70000 */
    rl_hist_record(&h, 900);
    while (rl_hist_next(&h, &i, &lo, &hi, &n)) {
        assert_true(lo <= hi);
        assert_true(buckets == 0 || lo > last);
        last = hi;
        sum += n;
        buckets++;
    }
    assert_int_equal(buckets, 3);
    assert_int_equal(sum, h.total);
    assert_int_equal(rl_hist_next(&h, &i, &lo, &hi, &n), 0);
    rl_hist_free(&h);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tiling),
        cmocka_unit_test(test_extremes),
        cmocka_unit_test(test_init_errors),
        cmocka_unit_test(test_empty),
        cmocka_unit_test(test_exact_small_values),
        cmocka_unit_test(test_percentiles_match_sorted),
        cmocka_unit_test(test_saturation),
        cmocka_unit_test(test_merge_and_reset),
        cmocka_unit_test(test_iterate),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
