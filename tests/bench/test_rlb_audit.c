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
#include <string.h>
#include <math.h>

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

/* Answers as slow as a third of the window, on a machine that stalls: the
 * server decides anywhere between send and receive. Every answer lands in
 * its own window: the audit finds exactly the (key, window) pairs made
 * here and exactly those given more than the limit, the grid stays as
 * exact as the quick answers made it, and the audit stays reliable. */
static void test_slow_answers_keep_the_grid(void **state)
{
    enum { KEYS = 50, WINDOWS = 16, LIMIT = 12 };
    const double w = 2000, phase = 1234.5; /* windows end at phase + k*w */
    static uint32_t admitted[KEYS + 1][WINDOWS];
    rlb_audit_t a;
    rlb_audit_report_t r;
    uint64_t seed = 88172645463325252ull, pairs = 0, over = 0;
    uint32_t key, n, win;
    double t = 10000;

    (void)state;
    memset(admitted, 0, sizeof(admitted));
    assert_int_equal(rlb_audit_init(&a, 2, 1, 0, 0), 0);
    for (n = 0; n < 4000; n++) {
        double rtt, sent, decided, end;

        seed ^= seed << 13, seed ^= seed >> 7, seed ^= seed << 17;
        rtt = n % 10 == 0 ? 0.2 : (double)(seed % 650) + 0.2;
        sent = t;
        decided = sent + rtt * (double)((seed >> 20) % 1000) / 1000.0;
        end = phase + floor((decided - phase) / w) * w + w;
        win = (uint32_t)((end - phase) / w);
        key = 1 + (uint32_t)((seed >> 40) % KEYS);
        assert_true(win < WINDOWS);
        admitted[key][win]++;
        rlb_audit_add(&a, key, 1, LIMIT, 2, (uint64_t)(end - decided), sent,
                      sent + rtt);
        t += 5;
    }
    for (key = 1; key <= KEYS; key++)
        for (win = 0; win < WINDOWS; win++) {
            pairs += admitted[key][win] > 0;
            over += admitted[key][win] > LIMIT;
        }
    assert_int_equal(rlb_audit_report(&a, 0, 0, &r), 0);
    assert_false(r.unreliable);
    assert_true(r.max_skew_ms < 1.0);
    assert_true(a.ref_hi - a.ref_lo < 2.0);
    assert_int_equal(r.unplaced, 0);
    assert_int_equal(r.windows, pairs);
    assert_true(over > 0);
    assert_int_equal(r.over_limit, over);
    rlb_audit_report_free(&r);
    rlb_audit_free(&a);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_presized_never_grows),
        cmocka_unit_test(test_unsized_grows_and_keeps_all),
        cmocka_unit_test(test_over_limit_reported),
        cmocka_unit_test(test_slow_answers_keep_the_grid),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
