/* The memory store: counters in this process, for a single server or for
 * tests. Same semantics as Redis: add, then report; every counter expires at
 * the time it was given.
 *
 * Counters live in a chained hash table (keyed SipHash). They are also
 * grouped by expiry time: all counters of one window of one size expire
 * together, so there are only a few groups, kept sorted in an array. A
 * timer frees whole groups as their time passes, a bounded number of
 * counters per tick so a million expiring keys never stall the loop; the
 * table shrinks again when it empties, so memory tracks the live windows. */
#include <malloc.h>
#include <stdlib.h>
#include <string.h>

#include "rl_error.h"
#include "rl_hash.h"
#include "store/memory.h"
#include "store/store.h"
#include "util.h"

#define SWEEP_EVERY_MS 250
#define SWEEP_BUDGET 20000 /* counters freed per timer tick, at most */
#define TABLE_MIN 1024

typedef struct ent_s {
    struct ent_s *hnext;   /* hash chain */
    struct ent_s **hprev;  /* what points at us in the chain */
    struct ent_s *enext;   /* expiry group */
    uint64_t hash;
    int64_t count;
    size_t klen;
    char key[];
} ent_t;

typedef struct {
    uint64_t expire_at_ms;
    ent_t *head;
} group_t;

typedef struct {
    rls_store_t base;
    uv_timer_t sweep;
    rl_hash_key_t hk;
    ent_t **table;
    size_t mask;
    size_t count;
    group_t *groups; /* sorted by expire_at_ms */
    size_t ngroups, groups_cap;
    size_t freed_since_trim;
    uint64_t last_now;
    void (*done)(void *);
    void *done_arg;
} mstore_t;

static uint64_t m_now(rls_store_t *s)
{
    mstore_t *m = (mstore_t *)s;
    uint64_t now = rls_realtime_ms();

    /* The wall clock may step back (NTP); decisions must not. */
    if (now < m->last_now)
        return m->last_now;
    m->last_now = now;
    return now;
}

static int m_up(rls_store_t *s)
{
    (void)s;
    return 1;
}

static int resize(mstore_t *m, size_t nbuckets)
{
    ent_t **nt = calloc(nbuckets, sizeof(*nt));
    size_t i;

    if (nt == NULL)
        return -1;
    for (i = 0; i <= m->mask; i++) {
        ent_t *e = m->table[i], *next;
        for (; e != NULL; e = next) {
            ent_t **head = &nt[e->hash & (nbuckets - 1)];
            next = e->hnext;
            e->hnext = *head;
            if (*head)
                (*head)->hprev = &e->hnext;
            e->hprev = head;
            *head = e;
        }
    }
    free(m->table);
    m->table = nt;
    m->mask = nbuckets - 1;
    return 0;
}

/* The group for an expiry time, created in order if new; NULL on OOM. */
static group_t *group_for(mstore_t *m, uint64_t at)
{
    size_t lo = 0, hi = m->ngroups;

    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (m->groups[mid].expire_at_ms < at)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo < m->ngroups && m->groups[lo].expire_at_ms == at)
        return &m->groups[lo];
    if (m->ngroups == m->groups_cap) {
        size_t ncap = m->groups_cap ? 2 * m->groups_cap : 16;
        group_t *ng = realloc(m->groups, ncap * sizeof(*ng));
        if (ng == NULL)
            return NULL;
        m->groups = ng;
        m->groups_cap = ncap;
    }
    memmove(&m->groups[lo + 1], &m->groups[lo],
            (m->ngroups - lo) * sizeof(*m->groups));
    m->ngroups++;
    m->groups[lo].expire_at_ms = at;
    m->groups[lo].head = NULL;
    return &m->groups[lo];
}

static int incr(mstore_t *m, rls_op_t *op)
{
    uint64_t h = rl_hash(&m->hk, op->key, op->key_len);
    ent_t **head = &m->table[h & m->mask], *e;
    group_t *g;

    for (e = *head; e != NULL; e = e->hnext) {
        if (e->hash == h && e->klen == op->key_len &&
            memcmp(e->key, op->key, op->key_len) == 0) {
            /* Redis refuses to overflow a counter; so do we. */
            if (e->count > INT64_MAX - (int64_t)op->incr)
                return RL_ESTORE;
            e->count += (int64_t)op->incr;
            op->count = e->count;
            return 0;
        }
    }

    if ((g = group_for(m, op->expire_at_ms)) == NULL)
        return RL_ENOMEM;
    if ((e = malloc(sizeof(*e) + op->key_len)) == NULL)
        return RL_ENOMEM;
    e->hash = h;
    e->count = (int64_t)op->incr;
    e->klen = op->key_len;
    memcpy(e->key, op->key, op->key_len);
    e->hnext = *head;
    if (*head)
        (*head)->hprev = &e->hnext;
    e->hprev = head;
    *head = e;
    e->enext = g->head;
    g->head = e;
    op->count = e->count;

    if (++m->count > m->mask + 1)
        resize(m, 2 * (m->mask + 1)); /* on failure, chains just grow */
    return 0;
}

static void m_submit(rls_store_t *s, rls_op_t *ops, size_t n,
                     rls_store_cb cb, void *data)
{
    mstore_t *m = (mstore_t *)s;
    size_t i;
    int status = 0;

    s->stats.batches++;
    s->stats.ops += n;
    for (i = 0; i < n; i++) {
        ops[i].err = incr(m, &ops[i]);
        if (ops[i].err != 0)
            status = RL_ESTORE;
    }
    if (status != 0)
        s->stats.errors++;
    cb(data, ops, n, status);
}

static void free_ent(mstore_t *m, ent_t *e)
{
    *e->hprev = e->hnext;
    if (e->hnext)
        e->hnext->hprev = e->hprev;
    free(e);
    m->count--;
    m->freed_since_trim++;
}

static void on_sweep(uv_timer_t *timer)
{
    mstore_t *m = timer->data;
    uint64_t now = m_now(&m->base);
    size_t budget = SWEEP_BUDGET;

    while (m->ngroups > 0 && m->groups[0].expire_at_ms <= now && budget) {
        group_t *g = &m->groups[0];
        while (g->head != NULL && budget) {
            ent_t *e = g->head;
            g->head = e->enext;
            free_ent(m, e);
            budget--;
        }
        if (g->head == NULL) {
            m->ngroups--;
            memmove(&m->groups[0], &m->groups[1],
                    m->ngroups * sizeof(*m->groups));
        }
    }

    /* Give memory back as windows end: shrink a sparse table, and ask
     * malloc to return freed pages once a lot was freed. */
    if (m->mask + 1 > TABLE_MIN && m->count < (m->mask + 1) / 8) {
        size_t nb = m->mask + 1;
        while (nb > TABLE_MIN && m->count < nb / 4)
            nb /= 2;
        resize(m, nb);
    }
    if (m->freed_since_trim > 100000 && budget) {
        malloc_trim(0);
        m->freed_since_trim = 0;
    }
    /* More expired than one tick may free: come back at once. */
    if (budget == 0)
        uv_timer_start(&m->sweep, on_sweep, 1, SWEEP_EVERY_MS);
}

static void on_timer_closed(uv_handle_t *h)
{
    mstore_t *m = h->data;
    void (*done)(void *) = m->done;
    void *arg = m->done_arg;
    size_t i;

    for (i = 0; i < m->ngroups; i++) {
        ent_t *e = m->groups[i].head, *next;
        for (; e != NULL; e = next) {
            next = e->enext;
            free(e);
        }
    }
    free(m->groups);
    free(m->table);
    free(m);
    if (done)
        done(arg);
}

static void m_close(rls_store_t *s, void (*done)(void *), void *arg)
{
    mstore_t *m = (mstore_t *)s;

    /* Nothing is ever in flight: submit answers before it returns. */
    m->done = done;
    m->done_arg = arg;
    uv_close((uv_handle_t *)&m->sweep, on_timer_closed);
}

static const rls_store_vtbl_t memory_vtbl = {m_submit, m_now, m_up, m_close};

rls_store_t *rls_store_memory_new(uv_loop_t *loop)
{
    mstore_t *m = calloc(1, sizeof(*m));

    if (m == NULL)
        return NULL;
    m->table = calloc(TABLE_MIN, sizeof(*m->table));
    if (m->table == NULL) {
        free(m);
        return NULL;
    }
    m->mask = TABLE_MIN - 1;
    m->base.v = &memory_vtbl;
    rls_random_key(&m->hk);
    uv_timer_init(loop, &m->sweep);
    m->sweep.data = m;
    uv_timer_start(&m->sweep, on_sweep, SWEEP_EVERY_MS, SWEEP_EVERY_MS);
    /* The sweep timer must not keep a loop alive on its own. */
    uv_unref((uv_handle_t *)&m->sweep);
    return &m->base;
}
