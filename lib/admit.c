#include "rl_admit.h"

/* Room left in a window; none when the count is at or past the limit. */
static uint64_t room(const rl_admit_win_t *w)
{
    return w->count < w->limit ? w->limit - w->count : 0;
}

int rl_admit_fits(const rl_admit_win_t *w, size_t n, uint64_t cost)
{
    size_t i;

    for (i = 0; i < n; i++)
        if (room(&w[i]) < cost)
            return 0;
    return 1;
}

int rl_admit_one(rl_admit_win_t *w, size_t n, uint64_t cost)
{
    size_t i;

    if (!rl_admit_fits(w, n, cost))
        return 0;
    for (i = 0; i < n; i++)
        w[i].count += cost;
    return 1;
}

uint64_t rl_admit_equal(rl_admit_win_t *w, size_t n, uint64_t cost,
                        uint64_t k)
{
    uint64_t a = k, fit;
    size_t i;

    if (cost == 0)
        cost = 1;
    for (i = 0; i < n; i++) {
        fit = room(&w[i]) / cost;
        if (fit < a)
            a = fit;
    }
    for (i = 0; i < n; i++)
        w[i].count += a * cost;
    return a;
}

void rl_admit_result(const rl_admit_win_t *w, size_t n, uint64_t cost,
                     int allowed, rl_result_t *r)
{
    const rl_admit_win_t *d = NULL;
    size_t i;

    for (i = 0; i < n; i++) {
        const rl_admit_win_t *c = &w[i];
        if (allowed) {
            if (d == NULL || room(c) < room(d) ||
                (room(c) == room(d) && c->reset_after_ms > d->reset_after_ms))
                d = c;
        } else if (room(c) < cost) {
            if (d == NULL || c->reset_after_ms > d->reset_after_ms)
                d = c;
        }
    }
    if (d == NULL) { /* no windows: nothing limits it */
        r->code = RL_CODE_OK;
        r->limit = r->used = r->remaining = 0;
        r->reset_after_ms = r->retry_after_ms = 0;
        r->window_s = 0;
        return;
    }
    r->code = allowed ? RL_CODE_OK : RL_CODE_OVER_LIMIT;
    r->limit = d->limit;
    r->used = d->count;
    r->remaining = room(d);
    r->reset_after_ms = d->reset_after_ms;
    r->retry_after_ms = allowed ? 0 : d->reset_after_ms;
    r->window_s = d->window_s;
}
