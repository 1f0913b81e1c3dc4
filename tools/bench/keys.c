/* Which key each request names: uniform over --keys, Zipf-skewed (a few
 * keys take most requests, as real callers do), or one hot key. */
#include <math.h>
#include <stdlib.h>

#include "rl_error.h"
#include "rlb.h"

static uint64_t rotl(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}

/* splitmix64 spreads one seed over the four words of state. */
void rlb_rng_seed(rlb_rng_t *r, uint64_t seed)
{
    int i;

    for (i = 0; i < 4; i++) {
        uint64_t z = (seed += UINT64_C(0x9e3779b97f4a7c15));
        z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
        z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
        r->s[i] = z ^ (z >> 31);
    }
}

uint64_t rlb_rng_next(rlb_rng_t *r)
{
    uint64_t *s = r->s;
    uint64_t out = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;

    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return out;
}

/* A uniform index in [0, n): the high 32 bits scaled by n (Lemire's
 * multiply-shift, without the rejection step: the bias, under n / 2^32,
 * is far below what a benchmark can see). */
static uint32_t below(rlb_rng_t *r, uint32_t n)
{
    return (uint32_t)(((rlb_rng_next(r) >> 32) * (uint64_t)n) >> 32);
}

/* A double in [0, 1) from the top 53 bits. */
static double unit(rlb_rng_t *r)
{
    return (double)(rlb_rng_next(r) >> 11) * 0x1.0p-53;
}

int rlb_keys_init(rlb_keys_t *k, const rlb_opts_t *o)
{
    uint32_t i;
    double sum = 0;

    k->dist = o->dist;
    k->n = o->keys;
    k->hot_frac = o->hot_frac;
    k->cdf = NULL;
    rlb_rng_seed(&k->rng, o->seed);
    if (o->dist != RLB_DIST_ZIPF)
        return 0;
    /* P(rank i) is proportional to 1 / (i + 1)^s. The table is built once;
     * a pick is then one binary search, exact for any s. */
    k->cdf = malloc((size_t)k->n * sizeof(*k->cdf));
    if (k->cdf == NULL)
        return RL_ENOMEM;
    for (i = 0; i < k->n; i++) {
        sum += pow((double)i + 1, -o->zipf_s);
        k->cdf[i] = sum;
    }
    for (i = 0; i < k->n; i++)
        k->cdf[i] /= sum;
    k->cdf[k->n - 1] = 1.0;
    return 0;
}

void rlb_keys_free(rlb_keys_t *k)
{
    if (k == NULL)
        return;
    free(k->cdf);
    k->cdf = NULL;
}

uint32_t rlb_keys_pick(rlb_keys_t *k)
{
    switch (k->dist) {
    case RLB_DIST_ZIPF: {
        double u = unit(&k->rng);
        uint32_t lo = 0, hi = k->n - 1;
        /* The first rank whose cumulative probability passes u. */
        while (lo < hi) {
            uint32_t mid = lo + (hi - lo) / 2;
            if (k->cdf[mid] <= u)
                lo = mid + 1;
            else
                hi = mid;
        }
        return lo;
    }
    case RLB_DIST_HOT:
        if (k->hot_frac >= 1 || k->n == 1 || unit(&k->rng) < k->hot_frac)
            return 0;
        return 1 + below(&k->rng, k->n - 1);
    default:
        return below(&k->rng, k->n);
    }
}
