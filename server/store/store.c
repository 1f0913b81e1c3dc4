/* Helpers every store shares (store.h). */
#include "store/store.h"

#include <string.h>

#include "rl_window.h"

size_t rls_wkey(const rls_op_t *op, const rls_wop_t *w, int prev, char *dst)
{
    size_t n = op->key_len;

    memcpy(dst, op->key, n);
    dst[n++] = ':';
    n += rl_put_u64(dst + n, w->window_s);
    dst[n++] = ':';
    if (w->algo == RL_ALGO_GCRA) {
        dst[n++] = 'g';
    } else {
        if (w->algo == RL_ALGO_SWC)
            dst[n++] = 's';
        if (w->phased)
            dst[n++] = 'p';
        n += rl_put_u64(dst + n, prev && w->index ? w->index - 1 : w->index);
    }
    dst[n] = '\0';
    return n;
}

int rls_op_fixed(const rls_op_t *op)
{
    uint32_t j;

    for (j = 0; j < op->nwin; j++)
        if (op->win[j].algo != RL_ALGO_FIXED)
            return 0;
    return 1;
}

void rls_wop_load(const rls_wop_t *w, uint64_t now_ms, rl_admit_win_t *a)
{
    switch (w->algo) {
    case RL_ALGO_SWC:
        rl_admit_swc(a, w->limit, w->window_s, w->before, w->before2,
                     w->weight, w->reset_ms);
        break;
    case RL_ALGO_GCRA:
        rl_admit_gcra(a, w->limit, w->window_s, w->t_us, w->before, now_ms);
        break;
    default:
        rl_admit_fixed(a, w->limit, w->window_s, w->before, w->reset_ms);
    }
}
