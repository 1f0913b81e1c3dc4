/* rl-bench's audit table (client/bench/audit.c): sized up front for the
 * windows a run expects, it takes them all without growing (a grow is a
 * rehash of everything that stalls rl-bench's loop mid-run, inside the
 * latencies it measures); unsized, it grows and still holds every window;
 * either way a window over its limit is reported. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <cmocka.h>

#include "rlb.h"

/* Adds one admitted check for each of keys 1..n, all in the window that
 * ends 60 s after t=0 (sent and answered at 1 s, reset 59 s later). */
static void add_keys(rlb_audit_t *a, uint32_t n)
{
    uint32_t k;

    for (k = 1; k <= n; k++)
        rlb_audit_add(a, k, 1, 100, 60, 59000, 1000, 1000);
}

static uint64_t windows_of(const rlb_audit_t *a, uint64_t *over)
{
    rlb_audit_report_t r;
    uint64_t n;

    assert_int_equal(rlb_audit_report(a, 0, 0, &r), 0);
    n = r.windows;
    *over = r.over_limit;
    rlb_audit_report_free(&r);
    return n;
}

static void test_presized_never_grows(void **state)
{
    rlb_audit_t a;
    size_t mask;
    uint64_t over;

    (void)state;
    assert_int_equal(rlb_audit_init(&a, 60, 1, 0, 50000), 0);
    mask = a.mask;
    assert_true(mask + 1 >= 2 * 50000);
    add_keys(&a, 50000);
    assert_int_equal(a.mask, mask);
    assert_int_equal(a.used, 50000);
    assert_int_equal(windows_of(&a, &over), 50000);
    assert_int_equal(over, 0);
    rlb_audit_free(&a);
}

static void test_unsized_grows_and_keeps_all(void **state)
{
    rlb_audit_t a;
    size_t mask;
    uint64_t over;

    (void)state;
    assert_int_equal(rlb_audit_init(&a, 60, 1, 0, 0), 0);
    mask = a.mask;
    add_keys(&a, 50000);
    assert_true(a.mask > mask);
    assert_int_equal(windows_of(&a, &over), 50000);
    assert_int_equal(over, 0);
    rlb_audit_free(&a);
}

/* A key admitted 3 times in a window of limit 2 is one window over, in a
 * presized table as in a grown one. */
static void test_over_limit_reported(void **state)
{
    rlb_audit_t a;
    uint64_t expect, over;
    int i;

    (void)state;
    for (expect = 0; expect <= 100000; expect += 100000) {
        assert_int_equal(rlb_audit_init(&a, 60, 1, 0, expect), 0);
        add_keys(&a, 10000);
        for (i = 0; i < 3; i++)
            rlb_audit_add(&a, 20000, 1, 2, 60, 59000, 1000, 1000);
        assert_int_equal(windows_of(&a, &over), 10001);
        assert_int_equal(over, 1);
        rlb_audit_free(&a);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_presized_never_grows),
        cmocka_unit_test(test_unsized_grows_and_keeps_all),
        cmocka_unit_test(test_over_limit_reported),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
