/* The memory store's insides, shared by its files and by nothing else:
 * memory.c (the table of stripes, its locks, clock and sweep, and the
 * per-loop fronts the batcher calls), memory_stripe.c (one stripe's
 * counters: the hash table, expiry groups, logs, its share of the cap, a
 * batch op, the sweep) and memory_xop.c (reservations and leases on a
 * stripe).
 *
 * A stripe is what the whole store was before it had several: a hash table
 * of entries, grouped by expiry time, with a byte budget. Every function
 * declared here that takes a stripe runs with the stripe's lock held (or
 * on a table no other thread sees); none of them takes a lock itself. */
#ifndef RLS_STORE_MEMORY_TAB_H
#define RLS_STORE_MEMORY_TAB_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "rl_hash.h"
#include "store/memory.h"
#include "store/store.h"

#define RLS_MEM_TABLE_MIN 1024 /* buckets of a table's one stripe, at least */
#define RLS_MEM_GROUPS_MIN 16
/* Keys longer than this are refused (RL_EINVAL, RL_ESTORE). */
#define RLS_MEM_OPKEY_MAX RLS_OPKEY_MAX
/* A gcra's key lives until its TAT plus the grace, a time of its own for
 * every caller: its group's time is rounded up to this many ms, so that
 * they share a few groups, as windows do. */
#define RLS_MEM_GROUP_MS 1024

typedef struct rls_mem_ent_s {
    struct rls_mem_ent_s *hnext;  /* hash chain */
    struct rls_mem_ent_s **hprev; /* what points at us in the chain */
    struct rls_mem_ent_s *enext;  /* expiry group */
    uint64_t hash;
    int64_t count;
    uint64_t until; /* expires then: later than its group's time when a
                       gcra's TAT or a log moved on; the sweep files it
                       again */
    union {
        struct rls_mem_log_s *log;      /* RLS_MEM_COUNTER: a sliding
                                           window's log (count is its
                                           sum), or NULL */
        struct rls_mem_lease_s *leases; /* RLS_MEM_LEASES, RLS_MEM_SETTLED:
                                           never NULL */
    };
    uint32_t klen;
    uint32_t kind; /* RLS_MEM_COUNTER, ... */
    char key[];
} rls_mem_ent_t;

/* What an entry holds: a counter (a TAT, a log), a caller's settled set
 * (leases: its (id, end ms) pairs; count: its floor, the latest end it
 * dropped) or a lease set (store/reserve.c, reserve.h's RLS_XOP_*). */
enum { RLS_MEM_COUNTER = 0, RLS_MEM_SETTLED = 1, RLS_MEM_LEASES = 2 };

/* A lease set or a settled set: n (id, end ms) pairs in no order. */
typedef struct rls_mem_lease_s {
    uint32_t n, cap;
    uint64_t e[]; /* lease i: id at e[2 * i], end at e[2 * i + 1] */
} rls_mem_lease_t;

#define RLS_MEM_LEASE_CAP_MIN 4

/* A sliding window's log: a ring of (time ms, cost) entries, oldest
 * first. */
typedef struct rls_mem_log_s {
    uint32_t head, n, cap;
    uint64_t e[]; /* entry i at e[2 * ((head + i) % cap)], its cost after */
} rls_mem_log_t;

typedef struct {
    uint64_t expire_at_ms;
    rls_mem_ent_t *head;
} rls_mem_group_t;

/* One stripe: its own lock, counters and budget. Aligned to a cache line
 * so that two loops working on neighbouring stripes do not share one. */
typedef struct rls_mem_stripe_s {
    _Alignas(64) pthread_mutex_t mu;
    struct rls_memtab_s *t;
    rl_hash_key_t hk; /* entries' hashes */
    rls_mem_ent_t **table;
    size_t mask, count;
    size_t table_min;        /* buckets it never shrinks below */
    rls_mem_group_t *groups; /* sorted by expire_at_ms */
    size_t ngroups, groups_cap;
    uint64_t bytes; /* held by its entries, their data, table and groups */
    uint64_t told;  /* of bytes, what the table's total has been told */
    uint64_t share; /* the cap on bytes: its share of the table's */
    size_t freed;   /* entries freed, for the table's malloc_trim */
    int full;       /* refusing new entries, until below 7/8 of share */
} rls_mem_stripe_t;

/* The table (memory.h's rls_memtab_t): S stripes, a key's stripe chosen by
 * a keyed hash of its op's tag. The atomics are read without a lock by any
 * loop; the rest is set once before the table is shared, or under the
 * lock its comment names. */
struct rls_memtab_s {
    atomic_uint refs;
    uint32_t nstripes; /* a power of two */
    int locked;        /* 0: one loop only (rls_store_memory_new) */
    rl_hash_key_t sk;  /* picks a tag's stripe */
    uint64_t fixed;    /* bytes of this struct, counted in bytes */
    /* Written by any loop: on lines of their own, apart from the fields
     * above that every op reads. */
    _Alignas(64) _Atomic uint64_t last_now; /* the clock's latest reading */
    _Atomic uint64_t sweep_due; /* monotonic ms the next sweep is due */
    _Alignas(64) _Atomic uint64_t bytes; /* fixed + every stripe's told */
    _Atomic uint64_t max;                /* the cap (--memory-max) */
    _Atomic uint64_t refused;            /* new entries refused, ever */
    atomic_uint nfull;                   /* stripes refusing new entries */
    _Atomic uint64_t unwarned;           /* refusals not yet in a warning */
    _Atomic uint64_t warned_at; /* monotonic ms of the last warning, or 0 */
    pthread_mutex_t sweep_mu;   /* one sweeper at a time; guards: */
    size_t freed;               /* entries freed since malloc_trim */
    rls_mem_stripe_t stripes[];
};

/* ---- a stripe (memory_stripe.c) ---- */

/* Makes sp an empty stripe of t with table_min buckets and a share of 0.
 * Returns 0 or RL_ENOMEM. */
int rls_mem_stripe_init(rls_mem_stripe_t *sp, rls_memtab_t *t,
                        size_t table_min);

/* Frees every entry of sp and its arrays (not sp, nor its lock). */
void rls_mem_stripe_free(rls_mem_stripe_t *sp);

/* Decides op at now on sp (store.h's semantics); returns its err: 0,
 * RL_EINVAL, RL_ESTORE (an overflow), RL_ENOMEM (full, or malloc). */
int rls_mem_stripe_apply(rls_mem_stripe_t *sp, rls_op_t *op, uint64_t now);

/* The same with limit j's counters in ms[j] (a group's levels may live in
 * several stripes; the caller holds each one's lock). */
int rls_mem_stripes_apply(rls_mem_stripe_t *const *ms, rls_op_t *op,
                          uint64_t now);

/* Frees up to budget entries of sp that expired by now (files again those
 * whose expiry moved on) and shrinks its arrays; returns how many entries
 * it looked at. */
size_t rls_mem_stripe_sweep(rls_mem_stripe_t *sp, uint64_t now, size_t budget);

/* Sets sp's share and leaves the full state if it is below 7/8 of it. */
void rls_mem_stripe_set_share(rls_mem_stripe_t *sp, uint64_t share);

/* What follows is for memory_xop.c. */

/* The entry of key (hash h) in sp, or NULL. */
rls_mem_ent_t *rls_mem_find(rls_mem_stripe_t *sp, const char *key, size_t len,
                            uint64_t h);

/* Makes a counter holding 0, expiring at `at`, into *out. The caller
 * checked that it fits under the share (rls_mem_fits). Returns 0 or
 * RL_ENOMEM. */
int rls_mem_create(rls_mem_stripe_t *sp, const char *key, size_t len,
                   uint64_t h, uint64_t at, rls_mem_ent_t **out);

/* need bytes more for `fresh` new entries (which may grow the group
 * array) fit in sp: 1; else 0, and the refusal is counted. */
int rls_mem_fits(rls_mem_stripe_t *sp, size_t need, size_t fresh);

/* What malloc holds for an entry with a key of klen bytes, a lease set of
 * cap pairs, a log of cap entries (glibc: the request plus an 8-byte
 * header, rounded up to 16, at least 32). */
size_t rls_mem_ent_cost(size_t klen);
size_t rls_mem_lease_cost(uint32_t cap);

/* Log entry i of g (0: the oldest): its time, then its cost. */
static inline uint64_t *rls_mem_log_at(const rls_mem_log_t *g, uint32_t i)
{
    return (uint64_t *)&g->e[2 * ((g->head + i) % g->cap)];
}

/* Bytes appending to e's log (NULL: a new entry) at now may take. */
size_t rls_mem_log_growth(const rls_mem_ent_t *e, uint64_t now);
/* Room in e's log for one more entry (its budget checked). Returns 0 or
 * RL_ENOMEM. */
int rls_mem_log_reserve(rls_mem_stripe_t *sp, rls_mem_ent_t *e);
/* Appends (now, cost) to e's log (room reserved), or adds cost to its
 * newest entry when that is at now. */
void rls_mem_log_append(rls_mem_ent_t *e, uint64_t now, uint64_t cost);

/* t rounded up to the next RLS_MEM_GROUP_MS, as a group's time. */
static inline uint64_t rls_mem_group_time(uint64_t t)
{
    return t + RLS_MEM_GROUP_MS - t % RLS_MEM_GROUP_MS;
}

/* Moves e's expiry on to at (the sweep files it again), never back. */
static inline void rls_mem_ent_extend(rls_mem_ent_t *e, uint64_t at)
{
    if (at > e->until)
        e->until = at;
}

/* ---- reservations and leases on a stripe (memory_xop.c) ---- */

/* Runs x (reserve.h; checked by the caller) on sp; returns its err. */
int rls_mem_xop(rls_mem_stripe_t *sp, rls_reserve_op_t *x);

/* The admin endpoint's step (usage.h; checked by the caller) on sp, the
 * stripe of u's tag: counts u->lkey's leases alive at u->now_ms and, with
 * u->reset, clears every key named: a counter, TAT or log to nothing, a
 * lease set emptied (each entry stays until the sweep frees it at its
 * expiry, as an empty one decides as a missing one). Sets u's answer;
 * the memory store has no quotas. */
void rls_mem_usage(rls_mem_stripe_t *sp, rls_usage_op_t *u);

/* ---- the table (memory.c) ---- */

/* Warns that new counters are being refused, with how many since the
 * last warning, at most once a second for the table (memory_full.c). */
void rls_memtab_warn_full(rls_memtab_t *t);
/* Counts a refusal by sp, which is now full; warns at most once a second
 * for the table. */
void rls_memtab_refused(rls_memtab_t *t, rls_mem_stripe_t *sp);

/* sp left its full state. */
void rls_memtab_recovered(rls_memtab_t *t, rls_mem_stripe_t *sp);

#endif
