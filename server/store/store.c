/* Helpers every store shares (store.h). */
#include "store/store.h"

#include <string.h>

#include "rl_window.h"

size_t rls_wkey(const rls_op_t *op, const rls_op_window_t *w, int which,
                char *dst)
{
    size_t n = w->base != NULL ? w->base_len : op->key_len;

    memcpy(dst, w->base != NULL ? w->base : op->key, n);
    dst[n++] = ':';
    n += rl_put_u64(dst + n, w->window_s);
    dst[n++] = ':';
    if (w->algo == RL_ALGO_GCRA) {
        dst[n++] = 'g';
    } else if (w->algo == RL_ALGO_SLIDING_LOG) {
        dst[n++] = 'l';
    } else {
        if (w->algo == RL_ALGO_SLIDING_COUNTER)
            dst[n++] = 's';
        if (w->phased)
            dst[n++] = 'p';
        if (w->algo != RL_ALGO_SLIDING_COUNTER || which != RLS_WKEY_STATE)
            n += rl_put_u64(dst + n, which == RLS_WKEY_PREV && w->index
                                         ? w->index - 1
                                         : w->index);
    }
    dst[n] = '\0';
    return n;
}

uint64_t rls_op_max_cost(const rls_op_t *op)
{
    uint64_t m = 1;
    uint32_t i;

    if (op->equal_cost)
        return op->equal_cost;
    for (i = 0; i < op->ncosts; i++)
        if (op->costs[i] > m)
            m = op->costs[i];
    return m;
}

int rls_op_fixed(const rls_op_t *op)
{
    uint32_t j;

    for (j = 0; j < op->nwin; j++)
        if (op->win[j].algo != RL_ALGO_FIXED)
            return 0;
    return 1;
}

void rls_op_window_load(const rls_op_window_t *w, uint64_t now_ms,
                        rl_admit_win_t *a)
{
    switch (w->algo) {
    case RL_ALGO_SLIDING_COUNTER:
        rl_admit_swc(a, w->limit, w->window_s, w->before, w->before2,
                     w->weight, w->reset_ms);
        break;
    case RL_ALGO_GCRA:
        rl_admit_gcra(a, w->limit, w->window_s, w->t_us, w->before, now_ms);
        break;
    case RL_ALGO_SLIDING_LOG: {
        uint64_t W = (uint64_t)w->window_s * 1000, ms[RL_SWL_PREFIX];
        uint32_t i, n = w->nold < RL_SWL_PREFIX ? w->nold : RL_SWL_PREFIX;
        /* Times become how long until each leaves the window. */
        for (i = 0; i < n; i++)
            ms[i] = w->old_t[i] + W > now_ms ? w->old_t[i] + W - now_ms : 1;
        rl_admit_swl(a, w->limit, w->window_s, w->before,
                     w->before2 > 0 && (uint64_t)w->before2 + W > now_ms
                         ? (uint64_t)w->before2 + W - now_ms
                         : 0,
                     ms, w->old_c, n);
        break;
    }
    default:
        rl_admit_fixed(a, w->limit, w->window_s, w->before, w->reset_ms);
    }
}
