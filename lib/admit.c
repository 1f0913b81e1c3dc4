#include "rl_admit.h"


static uint64_t sat_mul(uint64_t a, uint64_t b)
{
    uint64_t p;

    return __builtin_mul_overflow(a, b, &p) ? UINT64_MAX : p;
}

static uint64_t unit_of(const rl_admit_win_t *w)
{
    return w->unit ? w->unit : 1;
}

static uint64_t cap_of(const rl_admit_win_t *w)
{
    return w->unit <= 1 ? w->limit : sat_mul(w->limit, w->unit);
}

/* Room left in a limit, in its units; none at or past its cap. */
static uint64_t room(const rl_admit_win_t *w)
{
    uint64_t cap = cap_of(w);

    return w->count < cap ? cap - w->count : 0;
}

static uint64_t need(const rl_admit_win_t *w, uint64_t cost)
{
    if (w->unit <= 1) /* every algorithm but the gcra */
        return cost ? cost : 1;
    return sat_mul(cost ? cost : 1, w->unit);
}

static uint64_t ceil_div(uint64_t a, uint64_t b)
{
    return a / b + (a % b != 0);
}

void rl_admit_fixed(rl_admit_win_t *w, uint64_t limit, uint32_t window_s,
                    int64_t count, uint64_t reset_after_ms)
{
    *w = (rl_admit_win_t){0};
    w->algo = RL_ALGO_FIXED;
    w->limit = limit;
    w->window_s = window_s;
    w->count = w->count0 = count > 0 ? (uint64_t)count : 0;
    w->reset_after_ms = reset_after_ms;
}

/* The previous window's share: ceil(prev x weight / 65536). */
static uint64_t swc_share(uint64_t prev, uint32_t weight)
{
    unsigned __int128 p = (unsigned __int128)prev * weight;

    return (uint64_t)((p + RL_SWC_ONE - 1) / RL_SWC_ONE);
}

void rl_admit_swc(rl_admit_win_t *w, uint64_t limit, uint32_t window_s,
                  int64_t cur, int64_t prev, uint32_t weight,
                  uint64_t reset_after_ms)
{
    uint64_t c = cur > 0 ? (uint64_t)cur : 0, p = prev > 0 ? (uint64_t)prev : 0;

    *w = (rl_admit_win_t){0};
    w->algo = RL_ALGO_SLIDING_COUNTER;
    w->limit = limit;
    w->window_s = window_s;
    w->weight = weight;
    w->prev = p < limit ? p : limit;
    w->count = c + swc_share(w->prev, weight);
    if (w->count < c)
        w->count = UINT64_MAX;
    w->count0 = w->count;
    w->reset_after_ms = reset_after_ms;
}

void rl_admit_gcra(rl_admit_win_t *w, uint64_t burst, uint32_t period_s,
                   uint64_t t_us, int64_t tat_us, uint64_t now_ms)
{
    uint64_t now_us = sat_mul(now_ms, 1000);

    *w = (rl_admit_win_t){0};
    w->algo = RL_ALGO_GCRA;
    w->limit = burst;
    w->window_s = period_s;
    w->unit = t_us ? t_us : 1;
    w->count = tat_us > 0 && (uint64_t)tat_us > now_us
                   ? (uint64_t)tat_us - now_us
                   : 0;
    w->count0 = w->count;
}

void rl_admit_swl(rl_admit_win_t *w, uint64_t limit, uint32_t window_s,
                  int64_t sum, uint64_t newest_ms, const uint64_t *old_ms,
                  const uint64_t *old_cost, uint32_t n)
{
    uint32_t i;

    *w = (rl_admit_win_t){0};
    w->algo = RL_ALGO_SLIDING_LOG;
    w->limit = limit;
    w->window_s = window_s;
    w->count = w->count0 = sum > 0 ? (uint64_t)sum : 0;
    w->reset_after_ms = newest_ms;
    if (n > RL_SWL_PREFIX)
        n = RL_SWL_PREFIX;
    for (i = 0; i < n; i++) {
        w->old_ms[i] = old_ms[i] ? old_ms[i] : 1;
        w->old_cost[i] = old_cost[i];
    }
    w->nold = n;
}

uint32_t rl_swc_weight(uint64_t reset_after_ms, uint32_t window_s)
{
    uint64_t W = (uint64_t)window_s * 1000;

    if (W == 0)
        return RL_SWC_ONE;
    if (reset_after_ms > W)
        reset_after_ms = W;
    if (reset_after_ms == 0)
        reset_after_ms = 1;
    return (uint32_t)ceil_div(reset_after_ms * RL_SWC_ONE, W);
}

uint64_t rl_gcra_interval_us(uint64_t n, uint32_t period_s)
{
    uint64_t p = (uint64_t)period_s * 1000000;

    if (n == 0 || n > p)
        return 0;
    return ceil_div(p, n);
}

uint64_t rl_admit_added(const rl_admit_win_t *w, uint64_t now_ms)
{
    if (w->algo == RL_ALGO_GCRA)
        return sat_mul(now_ms, 1000) + w->count;
    return w->count - w->count0;
}

int rl_admit_fits(const rl_admit_win_t *w, size_t n, uint64_t cost)
{
    size_t i;

    for (i = 0; i < n; i++)
        if (room(&w[i]) < need(&w[i], cost))
            return 0;
    return 1;
}

int rl_admit_one(rl_admit_win_t *w, size_t n, uint64_t cost)
{
    size_t i;

    if (!rl_admit_fits(w, n, cost))
        return 0;
    for (i = 0; i < n; i++)
        w[i].count += need(&w[i], cost);
    return 1;
}

uint64_t rl_admit_equal(rl_admit_win_t *w, size_t n, uint64_t cost,
                        uint64_t k)
{
    uint64_t a = k, fit;
    size_t i;

    for (i = 0; i < n; i++) {
        fit = room(&w[i]) / need(&w[i], cost);
        if (fit < a)
            a = fit;
    }
    for (i = 0; i < n; i++)
        w[i].count += a * need(&w[i], cost);
    return a;
}

/* Until the caller is back to a full allowance. */
static uint64_t reset_ms(const rl_admit_win_t *w)
{
    if (w->algo == RL_ALGO_GCRA)
        return ceil_div(w->count, 1000);
    if (w->algo == RL_ALGO_SLIDING_LOG)
        /* the newest entry leaves last: admitted now, a whole window */
        return w->count > w->count0 ? (uint64_t)w->window_s * 1000
                                    : w->reset_after_ms;
    if (w->algo == RL_ALGO_SLIDING_COUNTER &&
        w->count > swc_share(w->prev, w->weight))
        /* the current counter weighs on the next window too */
        return w->reset_after_ms + (uint64_t)w->window_s * 1000;
    return w->reset_after_ms;
}

/* First ms into a window at which a previous counter p weighs at most r:
 * the weight must be at most floor(r x 65536 / p), and
 * ceil((W - e) x 65536 / W) <= m  <=>  e >= W - floor(m x W / 65536). */
static uint64_t swc_first_ms(uint64_t p, uint64_t r, uint64_t W)
{
    unsigned __int128 m;

    if (p == 0)
        return 0;
    m = (unsigned __int128)r * RL_SWC_ONE / p;
    if (m >= RL_SWC_ONE)
        return 0;
    return W - (uint64_t)(m * W / RL_SWC_ONE);
}

/* When enough of the log has left the window for cost to fit: the oldest
 * entries leave first, then what this batch admitted (now: a whole window
 * from now). */
static uint64_t swl_retry_ms(const rl_admit_win_t *w, uint64_t cost)
{
    uint64_t n, acc = 0;
    uint32_t i;

    if (cost > w->limit)
        return reset_ms(w);         /* never fits: report the full reset */
    n = w->count + cost - w->limit; /* > 0: it does not fit now */
    for (i = 0; i < w->nold; i++) {
        acc += w->old_cost[i];
        if (acc >= n)
            return w->old_ms[i];
    }
    if (acc >= w->count0) /* the whole stored log: the rest is this batch's */
        return (uint64_t)w->window_s * 1000;
    return reset_ms(w); /* beyond the entries reported: an upper bound */
}

uint64_t rl_admit_retry_ms(const rl_admit_win_t *w, uint64_t cost)
{
    uint64_t W = (uint64_t)w->window_s * 1000, e, cur, first;

    if (room(w) >= need(w, cost))
        return 0;
    switch (w->algo) {
    case RL_ALGO_SLIDING_LOG:
        return swl_retry_ms(w, cost);
    case RL_ALGO_GCRA:
        if (need(w, cost) > cap_of(w))
            return reset_ms(w); /* never fits: report the full reset */
        return ceil_div(w->count + need(w, cost) - cap_of(w), 1000);
    case RL_ALGO_SLIDING_COUNTER:
        if (cost > w->limit || W == 0)
            return reset_ms(w);
        e = W - (w->reset_after_ms < W ? w->reset_after_ms : W);
        cur = w->count - swc_share(w->prev, w->weight);
        if (cur + cost <= w->limit) {
            /* in this window, once the previous one weighs little enough */
            first = swc_first_ms(w->prev, w->limit - cur - cost, W);
            if (first < W && first > e)
                return first - e;
        }
        /* in the next window, where this window's counter is the
         * previous one and nothing is current yet */
        return w->reset_after_ms +
               swc_first_ms(cur < w->limit ? cur : w->limit, w->limit - cost,
                            W);
    default:
        return w->reset_after_ms;
    }
}

size_t rl_admit_result(const rl_admit_win_t *w, size_t n, uint64_t cost,
                       int allowed, rl_result_t *r)
{
    const rl_admit_win_t *d = NULL;
    uint64_t drem = 0, dkey = 0, rem, key;
    size_t i;

    for (i = 0; i < n; i++) {
        const rl_admit_win_t *c = &w[i];
        if (c->algo == RL_ALGO_FIXED) {
            /* the common case, without the algorithms' arithmetic */
            rem = c->count < c->limit ? c->limit - c->count : 0;
            key = c->reset_after_ms;
            if (allowed
                    ? d == NULL || rem < drem || (rem == drem && key > dkey)
                    : rem < (cost ? cost : 1) && (d == NULL || key > dkey)) {
                d = c;
                drem = rem;
                dkey = key;
            }
            continue;
        }
        rem = room(c) / unit_of(c);
        if (allowed) {
            key = reset_ms(c);
            if (d == NULL || rem < drem || (rem == drem && key > dkey)) {
                d = c;
                drem = rem;
                dkey = key;
            }
        } else if (room(c) < need(c, cost)) {
            key = rl_admit_retry_ms(c, cost);
            if (d == NULL || key > dkey) {
                d = c;
                drem = rem;
                dkey = key;
            }
        }
    }
    if (d == NULL) { /* no limits: nothing limits it */
        r->code = RL_CODE_OK;
        r->limit = r->used = r->remaining = 0;
        r->reset_after_ms = r->retry_after_ms = 0;
        r->window_s = 0;
        r->algorithm = 0;
        return n;
    }
    r->code = allowed ? RL_CODE_OK : RL_CODE_OVER_LIMIT;
    r->limit = d->limit;
    r->used = d->algo == RL_ALGO_GCRA ? ceil_div(d->count, unit_of(d))
                                      : d->count;
    r->remaining = drem;
    r->reset_after_ms = reset_ms(d);
    r->retry_after_ms = allowed ? 0 : dkey;
    r->window_s = d->window_s;
    r->algorithm = d->algo;
    return (size_t)(d - w);
}

int rl_admit_counted(rl_admit_win_t *w, size_t n, uint64_t cost, int add,
                     rl_result_t *r)
{
    uint64_t before[RL_ADMIT_WINDOWS_MAX], key, dkey = 0;
    uint8_t over[RL_ADMIT_WINDOWS_MAX];
    const rl_admit_win_t *d = NULL;
    size_t i, dn = 0;
    int within = 1;

    if (n > RL_ADMIT_WINDOWS_MAX)
        n = RL_ADMIT_WINDOWS_MAX;
    for (i = 0; i < n; i++) {
        uint64_t nd = cost ? need(&w[i], cost) : 0, after;
        before[i] = room(&w[i]);
        after = w[i].count + nd < w[i].count ? UINT64_MAX : w[i].count + nd;
        over[i] = after > cap_of(&w[i]);
        within &= !over[i];
        if (add)
            w[i].count = after;
    }
    if (within) {
        rl_admit_result(w, n, cost, 1, r);
        return 1;
    }
    /* The limits it is past: the one a request of this cost waits for
     * longest decides. */
    for (i = 0; i < n; i++) {
        if (!over[i])
            continue;
        key = rl_admit_retry_ms(&w[i], cost);
        if (key == 0)
            key = 1;
        if (d == NULL || key > dkey) {
            d = &w[i];
            dn = i;
            dkey = key;
        }
    }
    r->code = RL_CODE_OVER_LIMIT;
    r->limit = d->limit;
    r->used = d->algo == RL_ALGO_GCRA ? ceil_div(d->count, unit_of(d))
                                      : d->count;
    r->remaining = before[dn] / unit_of(d);
    r->reset_after_ms = reset_ms(d);
    r->retry_after_ms = dkey;
    r->window_s = d->window_s;
    r->algorithm = d->algo;
    return 0;
}
