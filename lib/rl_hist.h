/* A log-linear histogram in the manner of HdrHistogram, for latencies.
 *
 * Values are unsigned integers (rl-bench records nanoseconds). Below
 * 2^sub_bits every value has a bucket of its own; above, each power of two
 * [2^e, 2^(e+1)) is split into 2^(sub_bits-1) equal buckets, so a bucket is
 * never wider than 1/2^(sub_bits-1) of the values it holds: with sub_bits 8,
 * any value read back is within 0.8% of one recorded, at every scale, in a
 * few thousand counters. Recording is a shift, a count-leading-zeros and an
 * increment: cheap enough for every response of a load test.
 *
 * Values above `highest` are recorded as `highest` and counted in
 * `saturated`, so a run with a wild outlier still reports it (as the cap)
 * instead of losing it. min, max and sum are kept exactly. */
#ifndef RL_HIST_H
#define RL_HIST_H

#include <stddef.h>
#include <stdint.h>

#define RL_HIST_SUB_BITS_MIN 2
#define RL_HIST_SUB_BITS_MAX 16

typedef struct rl_hist_s {
    uint64_t *counts; /* nbuckets counters */
    size_t nbuckets;
    unsigned sub_bits;
    uint64_t highest;   /* largest value recorded as itself */
    uint64_t total;     /* values recorded */
    uint64_t saturated; /* values above highest, recorded as highest */
    uint64_t min, max;  /* exact; min is UINT64_MAX while empty */
    double sum;         /* for the mean; a double cannot overflow here */
} rl_hist_t;

/* Prepares an empty histogram for values 0..highest with sub_bits of
 * precision (RL_HIST_SUB_BITS_MIN..MAX). Allocates its counters once.
 * Returns 0, RL_EINVAL (sub_bits out of range, highest 0) or RL_ENOMEM,
 * after which h holds nothing to free. */
int rl_hist_init(rl_hist_t *h, unsigned sub_bits, uint64_t highest);

/* Releases the counters; h may be initialised again. Accepts NULL. */
void rl_hist_free(rl_hist_t *h);

/* Forgets every value; keeps the counters' memory. */
void rl_hist_reset(rl_hist_t *h);

/* Records value v n times. Never fails. */
void rl_hist_record_n(rl_hist_t *h, uint64_t v, uint64_t n);

static inline void rl_hist_record(rl_hist_t *h, uint64_t v)
{
    rl_hist_record_n(h, v, 1);
}

/* Adds every value of src to dst. Returns 0, or RL_EINVAL when the two were
 * not initialised with the same sub_bits and highest. */
int rl_hist_merge(rl_hist_t *dst, const rl_hist_t *src);

/* The value at percentile p (0..100): the smallest value v such that at
 * least p% of the recorded values are <= v, read back as the top of its
 * bucket and clamped to [min, max]. So p = 100 gives max exactly and p = 0
 * gives min. Returns 0 for an empty histogram. */
uint64_t rl_hist_percentile(const rl_hist_t *h, double p);

/* Mean of the recorded values, 0 when empty. */
double rl_hist_mean(const rl_hist_t *h);

/* Bucket arithmetic, exposed for iteration and for tests: the bucket that
 * holds v (v <= highest), and the lowest and highest value bucket i holds. */
size_t rl_hist_index(const rl_hist_t *h, uint64_t v);
uint64_t rl_hist_bucket_low(const rl_hist_t *h, size_t i);
uint64_t rl_hist_bucket_high(const rl_hist_t *h, size_t i);

/* Walks the non-empty buckets in ascending order. Start with *i = 0; each
 * call returns 1 with the bucket's bounds and count and advances *i, or 0
 * when none is left. */
int rl_hist_next(const rl_hist_t *h, size_t *i, uint64_t *low, uint64_t *high,
                 uint64_t *count);

#endif
