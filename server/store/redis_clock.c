/* Redis time as an offset to the monotonic clock; see redis_clock.h. */
#include "store/redis_clock.h"

/* Slack for the round-trip filter, and how long a filtered clock may go
 * without a fresh offset. */
#define RTT_SLACK_US 1000
#define MAX_AGE_US 10000000

void rls_redis_clock_init(rls_redis_clock_t *c)
{
    c->offset_us = 0;
    c->sampled_us = 0;
    c->last_ms = 0;
    rls_redis_clock_new_path(c);
}

void rls_redis_clock_new_path(rls_redis_clock_t *c)
{
    c->best_rtt_us = UINT64_MAX / 4;
}

uint64_t rls_redis_clock_now(rls_redis_clock_t *c, uint64_t mono_us,
                             uint64_t realtime_ms)
{
    uint64_t ms = realtime_ms;

    if (c->sampled_us != 0)
        ms = (uint64_t)((int64_t)mono_us + c->offset_us) / 1000;
    /* A new sample, or the switch from the local clock, may step back;
     * windows must not. */
    if (ms < c->last_ms)
        ms = c->last_ms;
    c->last_ms = ms;
    return ms;
}

int rls_redis_clock_sample(rls_redis_clock_t *c, uint64_t sent_us,
                           uint64_t recv_us, uint64_t redis_us)
{
    uint64_t rtt;

    if (recv_us < sent_us)
        return 0;
    rtt = recv_us - sent_us;
    if (rtt < c->best_rtt_us)
        c->best_rtt_us = rtt;
    if (c->sampled_us != 0 && rtt > 2 * c->best_rtt_us + RTT_SLACK_US &&
        recv_us - c->sampled_us < MAX_AGE_US)
        return 0;
    c->offset_us = (int64_t)redis_us - (int64_t)(sent_us + rtt / 2);
    c->sampled_us = recv_us;
    return 1;
}
