/* The refusal cache's table (server/core/refusals.c): it starts small and grows
 * with its entries, keeps every entry it can place, never holds more than
 * its cap, and an empty cache answers without reading its table. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "core/refusals.h"

static void learn(rls_refusals_t *c, uint32_t i, uint64_t now)
{
    char key[32];
    rl_admit_win_t w = {0};
    uint64_t end = now + 60000;
    int n = snprintf(key, sizeof(key), "rl:{u%u}:r:api", i);

    w.limit = 10;
    w.count = 10;
    w.window_s = 60;
    /* A poor hash on purpose for some keys: many share a place, so the
     * probes and the growth meet collisions. */
    rls_refusals_learn(c, i % 7 == 0 ? 12345 : (uint64_t)i * 0x9e3779b97f4a7c15u,
                       key, (size_t)n, 0, 0, now, &w, &end, 1);
}

static const rls_refusal_t *find(rls_refusals_t *c, uint32_t i)
{
    char key[32];
    int n = snprintf(key, sizeof(key), "rl:{u%u}:r:api", i);

    return rls_refusals_find(c, i % 7 == 0 ? 12345
                                           : (uint64_t)i * 0x9e3779b97f4a7c15u,
                             key, (size_t)n, 0, 0);
}

static void test_grows_and_keeps(void **state)
{
    enum { MAX = 600, N = 1000 };
    rls_refusals_t c;
    uint64_t now = 1000000;
    size_t found = 0;
    uint32_t i, n, slots0;

    (void)state;
    assert_int_equal(rls_refusals_init(&c, MAX), 0);
    slots0 = c.mask + 1;
    assert_true(slots0 < 2 * MAX);
    assert_null(find(&c, 1));
    for (i = 0; i < N; i++)
        learn(&c, i, now);
    /* Never more than the cap; the table grew, but not past 2*max. */
    assert_true(c.stats.entries <= MAX);
    assert_true(c.stats.entries >= MAX / 2);
    assert_true(c.mask + 1 > slots0);
    assert_true(c.mask + 1 <= 2 * 1024);
    assert_true(c.stats.full > 0);
    /* Every entry still held is found, and refuses what does not fit. */
    for (i = 0; i < N; i++) {
        const rls_refusal_t *e = find(&c, i);
        rl_admit_win_t w[RLS_WINDOWS_MAX];
        if (e == NULL)
            continue;
        found++;
        assert_int_equal(rls_refusals_refuse(&c, e, now + 1, 1, w, &n), 1);
        assert_int_equal(n, 1);
        assert_int_equal(w[0].count, 10);
    }
    assert_int_equal(found, c.stats.entries);
    /* An invalidated cache finds nothing. */
    rls_refusals_invalidate(&c);
    for (i = 0; i < N; i++)
        assert_null(find(&c, i));
    rls_refusals_free(&c);
}

static void test_empty_and_disabled(void **state)
{
    rls_refusals_t c;

    (void)state;
    assert_int_equal(rls_refusals_init(&c, 0), 0);
    assert_null(find(&c, 3));
    learn(&c, 3, 1000);
    assert_null(find(&c, 3));
    rls_refusals_free(&c);
    /* A cache of one entry keeps one. */
    assert_int_equal(rls_refusals_init(&c, 1), 0);
    learn(&c, 1, 1000);
    learn(&c, 2, 1000);
    assert_int_equal(c.stats.entries, 1);
    assert_non_null(find(&c, 1));
    assert_null(find(&c, 2));
    rls_refusals_free(&c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_grows_and_keeps),
        cmocka_unit_test(test_empty_and_disabled),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
