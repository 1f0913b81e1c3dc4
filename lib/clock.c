#include "rl_clock.h"

#include <time.h>

static uint64_t clock_ms(clockid_t id)
{
    struct timespec ts;

    clock_gettime(id, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

uint64_t rl_unix_ms(void)
{
    return clock_ms(CLOCK_REALTIME);
}

uint64_t rl_mono_ms(void)
{
    return clock_ms(CLOCK_MONOTONIC);
}

uint64_t rl_xorshift64(uint64_t *s)
{
    uint64_t x = *s;

    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    *s = x;
    return x;
}
