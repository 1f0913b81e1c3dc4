/* A fixed-bucket histogram in the Prometheus style: counts per upper bound,
 * plus the sum and count of every observation. Cheap enough to observe on
 * every batch. */
#ifndef RLS_PROM_HIST_H
#define RLS_PROM_HIST_H

#include <stddef.h>
#include <stdint.h>

#define RLS_HIST_MAX 16

typedef struct rls_hist_s {
    const uint64_t *bounds; /* ascending upper bounds (inclusive) */
    size_t n;               /* number of bounds, <= RLS_HIST_MAX */
    uint64_t counts[RLS_HIST_MAX + 1]; /* per bucket; the last is +Inf */
    uint64_t sum;
    uint64_t count;
} rls_hist_t;

static inline void rls_hist_init(rls_hist_t *h, const uint64_t *bounds,
                                 size_t n)
{
    size_t i;

    h->bounds = bounds;
    h->n = n;
    for (i = 0; i <= RLS_HIST_MAX; i++)
        h->counts[i] = 0;
    h->sum = 0;
    h->count = 0;
}

static inline void rls_hist_observe(rls_hist_t *h, uint64_t v)
{
    size_t i = 0;

    while (i < h->n && v > h->bounds[i])
        i++;
    h->counts[i]++;
    h->sum += v;
    h->count++;
}

/* Redis round trip of a batch, microseconds. */
extern const uint64_t rls_rtt_bounds_us[12];
/* Requests per batch. */
extern const uint64_t rls_batch_bounds[11];

#endif
