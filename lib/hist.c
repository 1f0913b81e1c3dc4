#include "rl_hist.h"

#include <stdlib.h>
#include <string.h>

#include "rl_error.h"

/* Position of the highest set bit of v (v > 0). */
static unsigned top_bit(uint64_t v)
{
    return 63u - (unsigned)__builtin_clzll(v);
}

size_t rl_hist_index(const rl_hist_t *h, uint64_t v)
{
    uint64_t full = UINT64_C(1) << h->sub_bits;
    uint64_t half = full >> 1;
    unsigned shift;

    if (v < full)
        return (size_t)v;
    /* v lies in [2^e, 2^(e+1)), e >= sub_bits; dropping `shift` low bits
     * leaves a value in [half, full) that picks one of `half` buckets. */
    shift = top_bit(v) - h->sub_bits + 1;
    return (size_t)(full + (uint64_t)(shift - 1) * half + (v >> shift) - half);
}

uint64_t rl_hist_bucket_low(const rl_hist_t *h, size_t i)
{
    uint64_t full = UINT64_C(1) << h->sub_bits;
    uint64_t half = full >> 1, k, top;
    unsigned shift;

    if (i < full)
        return i;
    k = i - full;
    shift = (unsigned)(k / half) + 1;
    top = k % half + half;
    return top << shift;
}

uint64_t rl_hist_bucket_high(const rl_hist_t *h, size_t i)
{
    uint64_t full = UINT64_C(1) << h->sub_bits;
    uint64_t half = full >> 1;
    unsigned shift;

    if (i < full)
        return i;
    shift = (unsigned)((i - full) / half) + 1;
    return rl_hist_bucket_low(h, i) + ((UINT64_C(1) << shift) - 1);
}

int rl_hist_init(rl_hist_t *h, unsigned sub_bits, uint64_t highest)
{
    memset(h, 0, sizeof(*h));
    if (sub_bits < RL_HIST_SUB_BITS_MIN || sub_bits > RL_HIST_SUB_BITS_MAX ||
        highest == 0)
        return RL_EINVAL;
    h->sub_bits = sub_bits;
    h->highest = highest;
    h->nbuckets = rl_hist_index(h, highest) + 1;
    h->counts = calloc(h->nbuckets, sizeof(*h->counts));
    if (h->counts == NULL) {
        memset(h, 0, sizeof(*h));
        return RL_ENOMEM;
    }
    h->min = UINT64_MAX;
    return RL_OK;
}

void rl_hist_free(rl_hist_t *h)
{
    if (h == NULL)
        return;
    free(h->counts);
    memset(h, 0, sizeof(*h));
}

void rl_hist_reset(rl_hist_t *h)
{
    memset(h->counts, 0, h->nbuckets * sizeof(*h->counts));
    h->total = h->saturated = 0;
    h->min = UINT64_MAX;
    h->max = 0;
    h->sum = 0;
}

void rl_hist_record_n(rl_hist_t *h, uint64_t v, uint64_t n)
{
    if (n == 0)
        return;
    if (v < h->min)
        h->min = v;
    if (v > h->max)
        h->max = v;
    h->sum += (double)v * (double)n;
    h->total += n;
    if (v > h->highest) {
        h->saturated += n;
        v = h->highest;
    }
    h->counts[rl_hist_index(h, v)] += n;
}

int rl_hist_merge(rl_hist_t *dst, const rl_hist_t *src)
{
    size_t i;

    if (dst->sub_bits != src->sub_bits || dst->highest != src->highest)
        return RL_EINVAL;
    for (i = 0; i < src->nbuckets; i++)
        dst->counts[i] += src->counts[i];
    dst->total += src->total;
    dst->saturated += src->saturated;
    dst->sum += src->sum;
    if (src->min < dst->min)
        dst->min = src->min;
    if (src->max > dst->max)
        dst->max = src->max;
    return RL_OK;
}

uint64_t rl_hist_percentile(const rl_hist_t *h, double p)
{
    uint64_t rank, seen = 0, v;
    double want;
    size_t i;

    if (h->total == 0)
        return 0;
    if (p <= 0)
        return h->min;
    if (p >= 100)
        return h->max;
    /* The rank of the value that has p% of all values at or below it. */
    want = p / 100.0 * (double)h->total;
    rank = (uint64_t)want;
    if ((double)rank < want)
        rank++;
    if (rank == 0)
        rank = 1;
    for (i = 0; i < h->nbuckets; i++) {
        seen += h->counts[i];
        if (seen >= rank)
            break;
    }
    if (i == h->nbuckets)
        return h->max;
    v = rl_hist_bucket_high(h, i);
    if (v > h->max)
        v = h->max;
    if (v < h->min)
        v = h->min;
    return v;
}

double rl_hist_mean(const rl_hist_t *h)
{
    return h->total ? h->sum / (double)h->total : 0;
}

int rl_hist_next(const rl_hist_t *h, size_t *i, uint64_t *low, uint64_t *high,
                 uint64_t *count)
{
    for (; *i < h->nbuckets; (*i)++) {
        if (h->counts[*i] == 0)
            continue;
        *low = rl_hist_bucket_low(h, *i);
        *high = rl_hist_bucket_high(h, *i);
        *count = h->counts[*i];
        (*i)++;
        return 1;
    }
    return 0;
}
