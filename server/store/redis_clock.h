/* The Redis store's clock (redis_clock.c): Redis's TIME, sampled now
 * and then, applied as an offset to the local monotonic clock, so that every
 * rl-server instance agrees on window edges whatever its own clock says.
 * Pure arithmetic: the caller passes every "now", so tests can stand on any
 * instant. */
#ifndef RLS_REDIS_CLOCK_H
#define RLS_REDIS_CLOCK_H

#include <stdint.h>

typedef struct rls_redis_clock_s {
    int64_t offset_us;    /* Redis time minus monotonic time */
    uint64_t sampled_us;  /* monotonic time of the sample in use; 0: none */
    uint64_t last_ms;     /* the latest time handed out */
    uint64_t best_rtt_us; /* best TIME round trip since the last reset */
} rls_redis_clock_t;

/* No sample yet: now() follows the local realtime clock. */
void rls_redis_clock_init(rls_redis_clock_t *c);

/* Forgets the best round trip, for a new connection: its path to Redis
 * may differ. Keeps the offset in use. */
void rls_redis_clock_new_path(rls_redis_clock_t *c);

/* Returns ms since the Unix epoch on Redis's clock: mono_us plus the
 * offset, or realtime_ms before the first sample. Never less than a
 * previous result: time stands still until it catches up. */
uint64_t rls_redis_clock_now(rls_redis_clock_t *c, uint64_t mono_us,
                             uint64_t realtime_ms);

/* Offers a TIME sample: sent_us and recv_us are the monotonic times around
 * the command, redis_us its answer (seconds * 1e6 + microseconds). Redis
 * read its clock about halfway through. A sample whose round trip is over
 * twice the best plus 1 ms (the reply waited behind big batches) is
 * dropped unless the offset in use is over 10 s old. Returns 1 if used. */
int rls_redis_clock_sample(rls_redis_clock_t *c, uint64_t sent_us,
                           uint64_t recv_us, uint64_t redis_us);

#endif
