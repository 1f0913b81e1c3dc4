/* The memory store: counters in this process, for a single server (of one
 * loop or several) or for tests.
 *
 * The counters are in a table (rls_memtab_t) of S stripes, each a hash
 * table with its expiry groups, its share of the cap and its own lock
 * (memory_stripe.c). An op's stripe is picked by a keyed hash of its tag
 * ("<prefix>{<caller>}"), so every key of the op (its windows, a
 * reservation's settled set, a lease set) is in that one stripe: an op
 * takes one lock, and is decided under it whole, as the Redis script
 * decides a batch. That is what keeps the counts exact whichever loop an
 * op comes from.
 *
 * Each loop calls the table through a front of its own (rls_store_t): the
 * front counts its batches, answers on its own loop at once, and has the
 * timer that sweeps; the table is freed with its last reference. The
 * table's clock, byte total, full state and warnings are atomics, read by
 * any loop without a lock.
 *
 * The sweep runs once per 250 ms tick for the table, not once per front: a
 * front's timer that fires when the sweep is due claims it (the sweep
 * lock, tried, never waited for, and the next due time), so N loops do not
 * sweep N times, and whichever fronts are alive keep it going. It takes
 * each stripe's lock in turn, for at most its slice of the tick's budget,
 * so that a loop waiting on that stripe waits for a slice, not a tick. */
#include <malloc.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "base/util.h"
#include "rl_error.h"
#include "rl_hash.h"
#include "store/memory.h"
#include "store/memory_tab.h"
#include "store/store.h"

#define SWEEP_EVERY_MS 250
#define SWEEP_SLACK_MS 25 /* sweeps at least 225 ms apart */
#define SWEEP_BUDGET 20000 /* entries looked at per sweep, at most */
#define TRIM_AFTER 100000  /* entries freed before malloc_trim */
#define STRIPE_TABLE_MIN 64 /* buckets of a stripe of several, at least */

typedef struct {
    rls_store_t base;
    uv_timer_t sweep;
    rls_memtab_t *t;
    void (*done)(void *);
    void *done_arg;
} mfront_t;

/* Monotonic ms, the same clock on every thread. */
static uint64_t mono_ms(void)
{
    return uv_hrtime() / 1000000;
}

static void stripe_lock(rls_memtab_t *t, rls_mem_stripe_t *sp)
{
    if (t->locked)
        pthread_mutex_lock(&sp->mu);
}

/* Tells the table's total what sp's bytes did under the lock (one atomic
 * add, only when they moved), then unlocks. */
static void stripe_unlock(rls_memtab_t *t, rls_mem_stripe_t *sp)
{
    if (sp->bytes != sp->told) {
        /* Unsigned: a decrease wraps, and adds as one. */
        atomic_fetch_add_explicit(&t->bytes, sp->bytes - sp->told,
                                  memory_order_relaxed);
        sp->told = sp->bytes;
    }
    if (t->locked)
        pthread_mutex_unlock(&sp->mu);
}

/* The stripe of an op's keys: by its tag, key[0, tag_len), or by the whole
 * key when it has none. */
static rls_mem_stripe_t *stripe_of(rls_memtab_t *t, const char *key,
                                   size_t key_len, size_t tag_len)
{
    size_t n = tag_len > 0 && tag_len <= key_len ? tag_len : key_len;

    if (t->nstripes == 1)
        return &t->stripes[0];
    return &t->stripes[rl_hash(&t->sk, key, n) & (t->nstripes - 1)];
}

/* The table's clock: the wall clock, which may step back (NTP), never
 * going back itself, for every loop alike: the latest reading any loop
 * made is the floor of the next. */
static uint64_t tab_now(rls_memtab_t *t)
{
    uint64_t now = rl_unix_ms();
    uint64_t last = atomic_load_explicit(&t->last_now, memory_order_relaxed);

    while (now > last)
        if (atomic_compare_exchange_weak_explicit(&t->last_now, &last, now,
                                                  memory_order_relaxed,
                                                  memory_order_relaxed))
            return now;
    return last;
}

/* Sets the cap and every stripe's share of it. */
static void tab_set_max(rls_memtab_t *t, uint64_t max)
{
    uint64_t share = max > t->fixed ? (max - t->fixed) / t->nstripes : 0;
    uint32_t i;

    atomic_store_explicit(&t->max, max, memory_order_relaxed);
    for (i = 0; i < t->nstripes; i++) {
        stripe_lock(t, &t->stripes[i]);
        rls_mem_stripe_set_share(&t->stripes[i], share);
        stripe_unlock(t, &t->stripes[i]);
    }
}

static void tab_free(rls_memtab_t *t, uint32_t n)
{
    uint32_t i;

    for (i = 0; i < n; i++) {
        rls_mem_stripe_free(&t->stripes[i]);
        pthread_mutex_destroy(&t->stripes[i].mu);
    }
    pthread_mutex_destroy(&t->sweep_mu);
    free(t);
}

/* A table of up to `stripes` stripes (see rls_memtab_new); locked 0: for
 * one loop only, its stripe's lock never taken. */
static rls_memtab_t *tab_new(uint64_t max, unsigned stripes, int locked)
{
    uint32_t s = 1, i;
    size_t size, table_min;
    rls_memtab_t *t;

    while (s * 2 <= stripes && s * 2 <= (1u << 16))
        s *= 2;
    while (s > 1 && max / s < RLS_MEMTAB_STRIPE_MIN_BYTES)
        s /= 2;
    /* Every part is a multiple of the stripes' alignment, as aligned_alloc
     * wants. */
    size = sizeof(*t) + s * sizeof(t->stripes[0]);
    if ((t = aligned_alloc(_Alignof(rls_mem_stripe_t), size)) == NULL)
        return NULL;
    memset(t, 0, size);
    if (pthread_mutex_init(&t->sweep_mu, NULL) != 0) {
        free(t);
        return NULL;
    }
    atomic_init(&t->refs, 1);
    t->nstripes = s;
    t->locked = locked;
    t->fixed = size;
    rls_random_key(&t->sk);
    table_min = s == 1 ? RLS_MEM_TABLE_MIN : RLS_MEM_TABLE_MIN / s;
    if (table_min < STRIPE_TABLE_MIN)
        table_min = STRIPE_TABLE_MIN;
    atomic_init(&t->bytes, size);
    for (i = 0; i < s; i++) {
        rls_mem_stripe_t *sp = &t->stripes[i];
        if (pthread_mutex_init(&sp->mu, NULL) != 0) {
            tab_free(t, i);
            return NULL;
        }
        if (rls_mem_stripe_init(sp, t, table_min) != 0) {
            pthread_mutex_destroy(&sp->mu);
            tab_free(t, i);
            return NULL;
        }
        sp->told = sp->bytes;
        atomic_fetch_add_explicit(&t->bytes, sp->bytes, memory_order_relaxed);
    }
    tab_set_max(t, max);
    return t;
}

rls_memtab_t *rls_memtab_new(uint64_t max_bytes, unsigned stripes)
{
    return tab_new(max_bytes, stripes ? stripes : RLS_MEMTAB_STRIPES_DEFAULT,
                   1);
}

void rls_memtab_release(rls_memtab_t *t)
{
    /* The last reference sees every other thread's writes to the table
     * (acq_rel), and only then frees it. */
    if (t != NULL && atomic_fetch_sub(&t->refs, 1) == 1)
        tab_free(t, t->nstripes);
}

/* Sweeps the table at now (the caller holds sweep_mu): every stripe, each
 * for at most its slice of SWEEP_BUDGET; *more is set when one used its
 * whole slice (come back at once). Returns how many entries it looked
 * at. */
static size_t tab_sweep(rls_memtab_t *t, uint64_t now, int *more)
{
    size_t slice = SWEEP_BUDGET / t->nstripes, looked = 0, n;
    uint32_t i;

    if (slice == 0)
        slice = 1;
    *more = 0;
    for (i = 0; i < t->nstripes; i++) {
        rls_mem_stripe_t *sp = &t->stripes[i];
        stripe_lock(t, sp);
        n = rls_mem_stripe_sweep(sp, now, slice);
        t->freed += sp->freed;
        sp->freed = 0;
        stripe_unlock(t, sp);
        looked += n;
        if (n == slice)
            *more = 1;
    }
    /* Ask malloc to return freed pages once a lot was freed. */
    if (t->freed > TRIM_AFTER && !*more) {
        malloc_trim(0);
        t->freed = 0;
    }
    rls_memtab_warn_full(t);
    return looked;
}

/* The table's figures into the front's stats (memory.h). */
static void front_refresh(mfront_t *f)
{
    rls_store_stats_t *st = &f->base.stats;
    rls_memtab_t *t = f->t;

    st->mem_bytes = atomic_load_explicit(&t->bytes, memory_order_relaxed);
    st->mem_max = atomic_load_explicit(&t->max, memory_order_relaxed);
    st->mem_full = atomic_load_explicit(&t->nfull, memory_order_relaxed) != 0;
    st->mem_refused = atomic_load_explicit(&t->refused, memory_order_relaxed);
}

static uint64_t m_now(rls_store_t *s)
{
    return tab_now(((mfront_t *)s)->t);
}

static int m_up(rls_store_t *s)
{
    (void)s;
    return 1;
}

/* A group's op (store.h): its levels' counters may live in several
 * stripes, each found by its level's tag. Their locks are taken in the
 * order of their addresses, the one order every group keeps (an op of
 * one caller holds one lock at a time), so two loops never wait on each
 * other; then the op is decided as one, all or nothing. */
static int group_apply(rls_memtab_t *t, rls_op_t *op, uint64_t now)
{
    rls_mem_stripe_t *ms[RL_ADMIT_WINDOWS_MAX], *lk[RL_ADMIT_WINDOWS_MAX];
    uint32_t j, k, nlk = 0;
    int rc;

    if (op->nwin == 0 || op->nwin > RL_ADMIT_WINDOWS_MAX)
        return RL_EINVAL;
    for (j = 0; j < op->nwin; j++) {
        const rls_op_window_t *w = &op->win[j];
        ms[j] = w->base != NULL
                    ? stripe_of(t, w->base, w->base_len, w->base_tag_len)
                    : stripe_of(t, op->key, op->key_len, op->tag_len);
        for (k = 0; k < nlk && lk[k] != ms[j]; k++)
            ;
        if (k == nlk) {
            /* Kept sorted by address: insert in place. */
            for (k = nlk++; k > 0 && lk[k - 1] > ms[j]; k--)
                lk[k] = lk[k - 1];
            lk[k] = ms[j];
        }
    }
    for (k = 0; k < nlk; k++)
        stripe_lock(t, lk[k]);
    rc = rls_mem_stripes_apply(ms, op, now);
    for (k = nlk; k > 0; k--)
        stripe_unlock(t, lk[k - 1]);
    return rc;
}

static void m_submit(rls_store_t *s, rls_op_t *ops, size_t n,
                     rls_store_cb cb, void *data)
{
    mfront_t *f = (mfront_t *)s;
    rls_memtab_t *t = f->t;
    size_t i;

    s->stats.batches++;
    s->stats.ops += n;
    /* An op that fails (overflow, full) fails alone, with its own err, as
     * in the Redis store: the others were counted and must be decided. */
    for (i = 0; i < n; i++) {
        rls_op_t *op = &ops[i];
        uint64_t now = op->now_ms ? op->now_ms : tab_now(t);
        rls_mem_stripe_t *sp = stripe_of(t, op->key, op->key_len, op->tag_len);
        if (rls_op_group(op)) {
            op->err = group_apply(t, op, now);
            continue;
        }
        stripe_lock(t, sp);
        op->err = rls_mem_stripe_apply(sp, op, now);
        stripe_unlock(t, sp);
    }
    front_refresh(f);
    cb(data, ops, n, 0);
}

/* Runs x at once (store.h, rls_store_reserve; x was checked there). */
static void m_reserve_op(rls_store_t *s, rls_reserve_op_t *x,
                         rls_reserve_op_cb cb, void *data)
{
    mfront_t *f = (mfront_t *)s;
    rls_memtab_t *t = f->t;
    rls_mem_stripe_t *sp = stripe_of(t, x->key, x->key_len, x->tag_len);

    x->result = 0;
    x->count = 0;
    x->earliest_ms = 0;
    stripe_lock(t, sp);
    x->err = rls_mem_xop(sp, x);
    stripe_unlock(t, sp);
    if (x->err != 0) {
        x->result = 0;
        x->count = 0;
        x->earliest_ms = 0;
    }
    front_refresh(f);
    cb(data, x);
}

/* The admin endpoint's step (usage.h), at once under the tag's stripe
 * lock: one atomic view, and a reset no batch sees half done. */
static void m_usage(rls_store_t *s, rls_usage_op_t *u)
{
    mfront_t *f = (mfront_t *)s;
    rls_memtab_t *t = f->t;
    const char *k = u->nkeys > 0 ? u->keys[0] : u->lkey;
    size_t kl = u->nkeys > 0 ? u->lens[0] : u->lkey_len;
    rls_mem_stripe_t *sp = stripe_of(t, k, kl, u->tag_len);

    stripe_lock(t, sp);
    rls_mem_usage(sp, u);
    stripe_unlock(t, sp);
}

static void on_sweep(uv_timer_t *timer)
{
    mfront_t *f = timer->data;
    rls_memtab_t *t = f->t;
    uint64_t mono = mono_ms();
    int more = 0;

    /* Due, and no other front sweeping: this one sweeps, for the table. */
    if (mono >= atomic_load_explicit(&t->sweep_due, memory_order_relaxed) &&
        pthread_mutex_trylock(&t->sweep_mu) == 0) {
        if (mono >= atomic_load_explicit(&t->sweep_due, memory_order_relaxed)) {
            tab_sweep(t, tab_now(t), &more);
            /* Due again a tick on, less a slack: a timer's callback runs a
             * little after its loop's time, and the next tick must not
             * find the sweep a millisecond short of due. More expired than
             * one sweep may free: due again at once. */
            atomic_store_explicit(&t->sweep_due,
                                  more ? mono
                                       : mono + SWEEP_EVERY_MS - SWEEP_SLACK_MS,
                                  memory_order_relaxed);
        }
        pthread_mutex_unlock(&t->sweep_mu);
    }
    front_refresh(f);
    if (more)
        uv_timer_start(&f->sweep, on_sweep, 1, SWEEP_EVERY_MS);
}

size_t rls_store_memory_sweep(rls_store_t *s, uint64_t now_ms)
{
    mfront_t *f = (mfront_t *)s;
    size_t looked;
    int more;

    pthread_mutex_lock(&f->t->sweep_mu);
    looked = tab_sweep(f->t, now_ms, &more);
    pthread_mutex_unlock(&f->t->sweep_mu);
    front_refresh(f);
    return looked;
}

void rls_store_memory_set_max(rls_store_t *s, uint64_t max_bytes)
{
    mfront_t *f = (mfront_t *)s;

    tab_set_max(f->t, max_bytes);
    front_refresh(f);
}

static void on_timer_closed(uv_handle_t *h)
{
    mfront_t *f = h->data;
    void (*done)(void *) = f->done;
    void *arg = f->done_arg;

    rls_memtab_release(f->t);
    free(f);
    if (done)
        done(arg);
}

static void m_close(rls_store_t *s, void (*done)(void *), void *arg)
{
    mfront_t *f = (mfront_t *)s;

    /* Nothing is ever in flight: submit answers before it returns. */
    f->done = done;
    f->done_arg = arg;
    uv_close((uv_handle_t *)&f->sweep, on_timer_closed);
}

static const rls_store_vtbl_t memory_vtbl = {
    m_submit, m_now, m_up, m_close, NULL, NULL, m_reserve_op, NULL, m_usage};

/* A front on loop over t, taking a reference to it. */
static rls_store_t *front_new(uv_loop_t *loop, rls_memtab_t *t)
{
    mfront_t *f = calloc(1, sizeof(*f));

    if (f == NULL)
        return NULL;
    atomic_fetch_add_explicit(&t->refs, 1, memory_order_relaxed);
    f->t = t;
    f->base.v = &memory_vtbl;
    front_refresh(f);
    uv_timer_init(loop, &f->sweep);
    f->sweep.data = f;
    uv_timer_start(&f->sweep, on_sweep, SWEEP_EVERY_MS, SWEEP_EVERY_MS);
    /* The sweep timer must not keep a loop alive on its own. */
    uv_unref((uv_handle_t *)&f->sweep);
    return &f->base;
}

rls_store_t *rls_store_memory_new(uv_loop_t *loop)
{
    /* One loop only, so no lock: callgrind counted the uncontended mutex
     * at 53 of the 75 instructions per decision a locked stripe added
     * (docs/store.md). */
    rls_memtab_t *t = tab_new(RLS_MEMORY_MAX_DEFAULT, 1, 0);
    rls_store_t *s;

    if (t == NULL)
        return NULL;
    s = front_new(loop, t);
    rls_memtab_release(t); /* the front's reference remains, or none */
    return s;
}

rls_store_t *rls_store_memory_new_shared(uv_loop_t *loop, rls_memtab_t *t)
{
    return front_new(loop, t);
}
