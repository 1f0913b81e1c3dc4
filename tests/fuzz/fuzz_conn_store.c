/* fuzz_conn's scripted store (fuzz_conn.h). */
#include <stdint.h>
#include <stdlib.h>

#include "rl_admit.h"
#include "rl_error.h"
#include "rl_window.h"
#include "policy/rules.h"
#include "fuzz_conn.h"

/* One store byte: mode, count style, twists. */
void fs_modes(unsigned m, int *mode, int *style, int *twist)
{
    *mode = (int)((m & 7) % ST_MODES);
    *style = (int)(((m >> 3) & 7) % CT_STYLES);
    *twist = (int)(m >> 6);
}

static uint32_t fnv(uint32_t h, const void *p, size_t n)
{
    const uint8_t *s = p;

    while (n--)
        h = (h ^ *s++) * 16777619u;
    return h;
}

/* A stored quota's windows, as the script would report them. */
static uint32_t fs_quota(unsigned k, rls_op_window_t *q)
{
    static const uint32_t ws[4] = {1, 60, 3600, RL_WINDOW_MAX_S};
    static const uint64_t lim[4] = {1, 2, 10, INT64_MAX};
    uint32_t n = 1 + (k >> 1) % 3, j;

    for (j = 0; j < n; j++) {
        q[j].window_s = ws[(k >> (3 + j)) & 3];
        q[j].limit = lim[(k >> (5 + j)) & 3];
        q[j].index = 0;
        q[j].expire_at_ms = 0;
    }
    return n;
}

/* Decides one op as store.h says (admit in order against every window; a
 * refusal consumes nothing), from counts the style makes up. */
static void fs_op(fstore_t *fs, rls_op_t *op, rls_op_window_t *qw, int style,
                  int twist)
{
    rl_admit_win_t a[RLS_WINDOWS_MAX] = {{0}};
    int64_t *ctr[RLS_WINDOWS_MAX];
    rls_op_window_t *w = op->win;
    uint32_t nw = op->nwin, j;
    uint64_t adm = 0, sum = 0;
    unsigned k = fs->salt++;

    if (qw != NULL && op->quota != NULL && k % 2 == 0) {
        nw = fs_quota(k, qw);
        w = qw;
        op->quota_win = qw;
        op->nquota_win = nw;
    }
    for (j = 0; j < nw; j++) {
        int64_t c;
        unsigned v = k + j;

        ctr[j] = NULL;
        switch (style) {
        case CT_REAL: {
            uint32_t h = fnv(2166136261u, op->key, op->key_len);
            h = fnv(h, &w[j].window_s, sizeof(w[j].window_s));
            h = fnv(h, &w[j].index, sizeof(w[j].index));
            ctr[j] = &fs->ctr[h & 255];
            c = *ctr[j];
            break;
        }
        case CT_NEAR_MAX:
            c = INT64_MAX - (int64_t)(v % 4);
            break;
        case CT_ZERO: /* someone else reset the counter */
            c = 0;
            break;
        case CT_NEG: /* someone else decremented it below zero */
            c = -(int64_t)(v % 1000) - 1;
            break;
        case CT_MIN: /* the lowest a Redis reply parses to */
            c = -INT64_MAX + (int64_t)(v % 4);
            break;
        default:
            c = (int64_t)(v % 16);
            break;
        }
        w[j].before = c;
        a[j].limit = w[j].limit;
        a[j].count = c > 0 ? (uint64_t)c : 0;
        a[j].reset_after_ms = 1;
        a[j].window_s = w[j].window_s;
    }
    if (op->equal_cost) {
        adm = rl_admit_equal(a, nw, op->equal_cost, op->ncosts);
        sum = adm * op->equal_cost;
    } else {
        for (j = 0; j < op->ncosts; j++)
            if (rl_admit_one(a, nw, op->costs[j])) {
                adm++;
                sum += op->costs[j];
            }
    }
    if (style == CT_REAL && sum > 0) {
        /* As Redis INCRBY: refuses to pass INT64_MAX. */
        for (j = 0; j < nw; j++)
            if (*ctr[j] > INT64_MAX - (int64_t)sum) {
                op->err = RL_ESTORE;
                return;
            }
        for (j = 0; j < nw; j++)
            *ctr[j] += (int64_t)sum;
    }
    op->admitted = adm;
    if (twist & TW_LIE) {
        /* Any other count from 0 to ncosts, which is all the Redis reply
         * parser lets through. */
        op->admitted = (adm + 1 + k % op->ncosts) % (op->ncosts + 1);
        fs->lied = 1;
    }
}

static void fs_answer(fstore_t *fs, rls_op_t *ops, size_t n, rls_store_cb cb,
                      void *data, int mode, int style, int twist)
{
    rls_op_window_t *qw = NULL;
    int status = 0;
    size_t i;

    fs->base.stats.batches++;
    fs->base.stats.ops += n;
    if (mode == ST_ESTORE || mode == ST_ETIMEDOUT) {
        status = mode == ST_ESTORE ? RL_ESTORE : RL_ETIMEDOUT;
        for (i = 0; i < n; i++)
            ops[i].err = status; /* the contract: every op's err set too */
        fs->base.stats.errors++;
        cb(data, ops, n, status);
        return;
    }
    /* Quota windows are valid during the callback only. */
    if ((twist & TW_QUOTA) &&
        (qw = calloc(n * RLS_WINDOWS_MAX, sizeof(*qw))) == NULL)
        abort();
    for (i = 0; i < n; i++) {
        rls_op_t *op = &ops[i];

        if (op->nwin < 1 || op->nwin > RLS_WINDOWS_MAX || op->ncosts < 1)
            FAIL("op with %u windows, %u costs", op->nwin, op->ncosts);
        op->err = 0;
        op->admitted = 0;
        op->quota_win = NULL;
        op->nquota_win = 0;
        if (mode == ST_PEROP && fs->salt % 3 == 0) {
            op->err = fs->salt++ % 2 ? RL_ESTORE : RL_ETIMEDOUT;
            continue;
        }
        fs_op(fs, op, qw != NULL ? qw + i * RLS_WINDOWS_MAX : NULL, style,
              twist);
    }
    cb(data, ops, n, status);
    free(qw);
}

static void fs_submit(rls_store_t *s, rls_op_t *ops, size_t n, rls_store_cb cb,
                      void *data)
{
    fstore_t *fs = (fstore_t *)s;
    pend_t *p, **tail;

    if (n == 0)
        FAIL("batcher submitted an empty batch");
    if (fs->mode != ST_LATER) {
        fs_answer(fs, ops, n, cb, data, fs->mode, fs->style, fs->twist);
        return;
    }
    if ((p = calloc(1, sizeof(*p))) == NULL)
        abort();
    p->ops = ops;
    p->n = n;
    p->cb = cb;
    p->data = data;
    for (tail = &fs->pend; *tail != NULL; tail = &(*tail)->next)
        ;
    *tail = p;
    fs->npend++;
}

/* Answers the deferred batch at position i. */
void fs_release(fstore_t *fs, size_t i, int mode, int style, int twist)
{
    pend_t **pp = &fs->pend, *p;

    while (i-- > 0 && (*pp)->next != NULL)
        pp = &(*pp)->next;
    p = *pp;
    *pp = p->next;
    fs->npend--;
    if (mode == ST_LATER)
        mode = ST_NOW;
    fs_answer(fs, p->ops, p->n, p->cb, p->data, mode, style, twist);
    free(p);
}

static uint64_t fs_now(rls_store_t *s)
{
    return ((fstore_t *)s)->now;
}

static int fs_up(rls_store_t *s)
{
    return ((fstore_t *)s)->mode != ST_ESTORE;
}

/* The harness owns the store's memory; close fails what is in flight. */
static void fs_close(rls_store_t *s, void (*done)(void *), void *arg)
{
    fstore_t *fs = (fstore_t *)s;
    while (fs->pend != NULL)
        fs_release(fs, 0, ST_ESTORE, CT_REAL, 0);
    if (done != NULL)
        done(arg);
}

const rls_store_vtbl_t fs_vtbl = {fs_submit, fs_now, fs_up, fs_close};
