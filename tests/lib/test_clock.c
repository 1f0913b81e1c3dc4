/* rl_unix_ms, rl_mono_ms and rl_xorshift64. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include <cmocka.h>

#include "rl_clock.h"

static uint64_t ms_of(const struct timespec *ts)
{
    return (uint64_t)ts->tv_sec * 1000 + (uint64_t)ts->tv_nsec / 1000000;
}

/* Reads fn between two readings of clock id: it must lie between them. */
static void agrees(clockid_t id, uint64_t (*fn)(void))
{
    struct timespec a, b;
    uint64_t ms;

    clock_gettime(id, &a);
    ms = fn();
    clock_gettime(id, &b);
    assert_true(ms >= ms_of(&a));
    assert_true(ms <= ms_of(&b));
}

/* Both clocks count milliseconds of their clock; the monotonic one never
 * goes back. */
static void test_clocks(void **state)
{
    uint64_t prev = 0, ms;
    int i;

    (void)state;
    agrees(CLOCK_REALTIME, rl_unix_ms);
    agrees(CLOCK_MONOTONIC, rl_mono_ms);
    for (i = 0; i < 1000; i++) {
        ms = rl_mono_ms();
        assert_true(ms >= prev);
        prev = ms;
    }
}

/* The known xorshift64 (13, 7, 17) sequence from 1, and a state that never
 * becomes 0. */
static void test_xorshift64(void **state)
{
    uint64_t s = 1, x;
    int i;

    (void)state;
    assert_true(rl_xorshift64(&s) == UINT64_C(1082269761));
    assert_true(s == UINT64_C(1082269761));
    assert_true(rl_xorshift64(&s) == UINT64_C(1152992998833853505));
    for (i = 0; i < 100000; i++) {
        x = rl_xorshift64(&s);
        assert_true(x != 0);
        assert_true(x == s);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_clocks),
        cmocka_unit_test(test_xorshift64),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
