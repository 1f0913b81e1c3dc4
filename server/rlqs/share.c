/* RLQS's arithmetic (share.h). */
#include "rlqs/share.h"

#include <math.h>

uint64_t rls_rlqs_share(uint64_t limit, uint64_t floor, uint64_t n,
                        uint64_t sum, uint64_t mine)
{
    uint64_t base, rest;

    if (n == 0)
        n = 1;
    if (mine == 0)
        mine = 1;
    if (sum < mine)
        sum = mine;
    base = limit / n < floor ? limit / n : floor;
    rest = limit - base * n;
    /* rest * mine / sum, without overflow: each participant's part is
     * rounded down, so the parts add up to rest at most. */
    return base + (uint64_t)(((unsigned __int128)rest * mine) / sum);
}

uint32_t rls_rlqs_burst(uint64_t q, double burst)
{
    double b;

    if (q == 0)
        return 0;
    b = ceil((double)q * burst);
    if (!(b >= 1.0))
        b = 1.0;
    if (b > (double)q)
        b = (double)q;
    if (b > 4294967295.0)
        b = 4294967295.0;
    return (uint32_t)b;
}

uint64_t rls_rlqs_demand(uint64_t prev, uint64_t count, uint64_t elapsed_ms,
                         uint32_t unit_s)
{
    double rate, d;

    if (elapsed_ms == 0)
        elapsed_ms = 1000;
    rate = (double)count * (double)unit_s * 1000.0 / (double)elapsed_ms;
    d = prev == 0 ? rate : ((double)prev + rate) / 2.0;
    if (d > 9.0e15)
        d = 9.0e15;
    return d < 1.0 ? 1 : (uint64_t)ceil(d);
}

int rls_rlqs_share_changed(uint64_t old, int have_old, uint64_t q)
{
    if (!have_old)
        return 1;
    if (old > q)
        return old > q + 1 &&
               (unsigned __int128)old * 20 > (unsigned __int128)q * 21;
    return q > old + 1 && (unsigned __int128)(q - old) * 20 > old;
}
