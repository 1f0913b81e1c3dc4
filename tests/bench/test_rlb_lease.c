/* rl-bench's lease audit (tools/bench/lease.c) on scripted answers: a
 * lease counts from its grant to its release (or its end when never
 * released), within the skew; grants are checked only once the horizon has
 * passed them, so a release answered after a later grant still counts;
 * the state kept per caller stays bounded over a long run. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "rlb.h"

#define T0 UINT64_C(1800000000000) /* store ms */

static void test_released_before_grant(void **state)
{
    rlb_lease_audit_t a;
    uint64_t id1, id2, id3;

    (void)state;
    assert_int_equal(rlb_lease_init(&a, 4, 2, 5, 1000), 0);
    id1 = rlb_lease_grant(&a, 0, T0, T0 + 1000, 2);
    id2 = rlb_lease_grant(&a, 0, T0 + 10, T0 + 1010, 2);
    /* Lease 1 was released at +20, but its answer comes after the grant
     * at +30: the audit must not count it there. */
    id3 = rlb_lease_grant(&a, 0, T0 + 30, T0 + 1030, 2);
    rlb_lease_end(&a, 0, id1, T0 + 20);
    /* A release 3 ms before a grant lies within the skew: not counted. */
    rlb_lease_end(&a, 0, id2, T0 + 500);
    rlb_lease_grant(&a, 0, T0 + 497, T0 + 1497, 2);
    rlb_lease_end(&a, 0, id3, 0); /* crashed: ends at +1030 */
    assert_true(id1 && id2 && id3);
    assert_int_equal(a.checked, 0); /* nothing past the horizon yet */
    rlb_lease_flush(&a);
    assert_int_equal(a.checked, 4);
    assert_int_equal(a.over, 0);
    assert_int_equal(a.max_alive, 2);
    rlb_lease_free(&a);
}

static void test_over_found(void **state)
{
    rlb_lease_audit_t a;

    (void)state;
    assert_int_equal(rlb_lease_init(&a, 2, 0, 5, 1000), 0);
    rlb_lease_grant(&a, 1, T0, T0 + 1000, 2);
    rlb_lease_grant(&a, 1, T0 + 1, T0 + 1000, 2);
    rlb_lease_grant(&a, 1, T0 + 2, T0 + 1000, 2); /* a third alive */
    rlb_lease_grant(&a, 0, T0 + 2, T0 + 1000, 2); /* another caller */
    rlb_lease_flush(&a);
    assert_int_equal(a.over, 1);
    assert_int_equal(a.max_alive, 3);
    assert_int_equal(a.first_over_key, 1);
    assert_true(a.first_over_at == T0 + 2);
    assert_int_equal(a.first_over_limit, 2);
    rlb_lease_free(&a);
}

/* An hour of grants every 10 ms, each released 8 ms later (alive 3 ms
 * past the skew), and a crash every 100th: checked as the run goes, and a
 * handful kept. */
static void test_bounded(void **state)
{
    rlb_lease_audit_t a;
    uint64_t t, i = 0;

    (void)state;
    assert_int_equal(rlb_lease_init(&a, 1, 3, 5, 1000), 0);
    for (t = T0; t < T0 + 3600000; t += 10, i++) {
        uint64_t id = rlb_lease_grant(&a, 0, t, t + 1000, 3);
        assert_true(id != 0);
        rlb_lease_end(&a, 0, id, i % 100 == 0 ? 0 : t + 8);
    }
    assert_true(a.checked > i - 300);
    assert_true(a.kept_max < 300);
    assert_int_equal(a.over, 0);
    assert_int_equal(a.late, 0);
    rlb_lease_flush(&a);
    assert_int_equal(a.checked, i);
    assert_int_equal(a.max_alive, 2); /* one crashed lease and one held */
    rlb_lease_free(&a);
}

/* A grant answered past the horizon is checked at once, as late. */
static void test_late(void **state)
{
    rlb_lease_audit_t a;

    (void)state;
    assert_int_equal(rlb_lease_init(&a, 1, 1, 5, 1000), 0);
    rlb_lease_time(&a, T0 + 5000);
    rlb_lease_grant(&a, 0, T0, T0 + 1000, 1);
    assert_int_equal(a.late, 1);
    assert_int_equal(a.checked, 1);
    /* A caller out of range is not kept, and says so. */
    assert_true(rlb_lease_grant(&a, 7, T0, T0 + 1, 1) == 0);
    assert_int_equal(a.nomem, 1);
    rlb_lease_free(&a);
    rlb_lease_free(&a); /* twice, as a teardown may */
}

/* A release stamped after a grant, by another instance, may be applied
 * before it: the grant's round trip says how late it may have been
 * applied. N 1, skew 5: lease 1 released at +60; a grant stamped +40 whose
 * answer took 20 ms may have come after that release (not over), one whose
 * answer took 5 ms did not (over). And a lease granted 2 ms before a
 * grant with a 3 ms round trip may have been applied after it: it does
 * not count there, while one granted well before does. */
static void test_round_trips(void **state)
{
    rlb_lease_audit_t a;
    uint64_t id;

    (void)state;
    assert_int_equal(rlb_lease_init(&a, 2, 1, 5, 1000), 0);
    id = rlb_lease_grant_rtt(&a, 0, T0, T0 + 1000, 1, 1);
    rlb_lease_grant_rtt(&a, 0, T0 + 40, T0 + 1040, 1, 20);
    rlb_lease_end(&a, 0, id, T0 + 60);
    rlb_lease_flush(&a);
    assert_int_equal(a.over, 0);
    rlb_lease_free(&a);

    assert_int_equal(rlb_lease_init(&a, 2, 1, 5, 1000), 0);
    id = rlb_lease_grant_rtt(&a, 0, T0, T0 + 1000, 1, 1);
    rlb_lease_grant_rtt(&a, 0, T0 + 40, T0 + 1040, 1, 5);
    rlb_lease_end(&a, 0, id, T0 + 60);
    rlb_lease_flush(&a);
    assert_int_equal(a.over, 1);
    rlb_lease_free(&a);

    assert_int_equal(rlb_lease_init(&a, 2, 1, 5, 1000), 0);
    rlb_lease_grant_rtt(&a, 0, T0 + 98, T0 + 1000, 1, 3);
    rlb_lease_grant_rtt(&a, 0, T0 + 100, T0 + 1100, 1, 3);
    rlb_lease_grant_rtt(&a, 1, T0 + 90, T0 + 1000, 1, 3);
    rlb_lease_grant_rtt(&a, 1, T0 + 100, T0 + 1100, 1, 3);
    rlb_lease_flush(&a);
    assert_int_equal(a.over, 1);
    assert_int_equal(a.first_over_key, 1);
    rlb_lease_free(&a);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_released_before_grant),
        cmocka_unit_test(test_over_found),
        cmocka_unit_test(test_bounded),
        cmocka_unit_test(test_late),
        cmocka_unit_test(test_round_trips),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
