/* The third fail mode (--fail-local, fail_local.c): while the store cannot
 * answer, this instance decides in its own memory with its share of every
 * limit, and when the store answers again it adds what it admitted to the
 * store's counters.
 *
 * The share: a limit divided by the number of live instances this one
 * last saw in "<prefix>instances" (policy/switches.h; at least 1), at
 * least 1. A gcra's burst is divided and its emission interval
 * multiplied by that number (its rate divided). Local decisions are made
 * by a memory store (store/memory.c) with every algorithm's arithmetic,
 * on the failed op's own windows, so the batcher replays and answers
 * them as it answers the store's.
 *
 * The bound: during an outage each instance admits at most its share in
 * each window, so the fleet admits at most about the limit (N shares)
 * in each window during the outage; what was admitted before the outage
 * in the same window is not known locally and comes on top, so a window
 * cut by an outage admits at most about twice its limit in the worst
 * case. Exact again once the store answers and the charges are in.
 *
 * The charges: what each window admitted locally, summed per counter
 * (at most RLS_LOCAL_CHARGES_MAX counters; beyond, counted as dropped).
 * They are sent before the first batch submitted once the store is up
 * again (and after any batch the store answers), all of them, each as an
 * op of one request whose cost is the sum against a limit no count
 * reaches, so the store adds it whatever the count; the batch that
 * follows them on the same connection is decided with them counted (the
 * first batch used to go first, and was decided against counters that
 * did not hold the local admissions: 2.33x a window's limit when Redis
 * came back empty). A fixed or
 * sliding-window-counter window still open gets its admitted cost added
 * to its counter; a gcra's TAT moves on by that cost; a sliding window's
 * log gets one entry of that cost at the time of the charge (later than
 * the decisions: it refuses for a little longer than they would).
 * Once the store is up again, decisions stay local until this instance's
 * charges are in and RLS_LOCAL_SETTLE_MS after, long enough for every
 * other instance to reconnect and send its own: a store decision made
 * earlier would not count a peer's local admissions (with Redis back
 * empty, three servers admitted 2.04-2.23x a window's limit that way).
 * An instance that decided nothing locally settles too, as it cannot
 * know its peers' charges are in. While decisions are local the share's
 * count of live instances never falls (a Redis back empty lost the
 * instances' hash too: the first to report again would count 1).
 * Charges for windows that ended are dropped (nothing reads them). A
 * charge batch that fails keeps its charges for the next try, no sooner
 * than RLS_LOCAL_RETRY_MS later; a charge the store refuses alone (its
 * key holds something else) is dropped and counted. */
#ifndef RLS_FAIL_LOCAL_H
#define RLS_FAIL_LOCAL_H

#include <stddef.h>
#include <stdint.h>

#include <uv.h>

#include "rl_hash.h"
#include "store/store.h"

#define RLS_LOCAL_CHARGES_MAX 65536
/* Charges sent to the store per batch. */
#define RLS_LOCAL_CHARGE_BATCH 256
/* How often the store's state is looked at while nothing else asks: an
 * idle instance too sees an outage, and sends its charges once the store
 * is back without waiting for a request. */
#define RLS_LOCAL_POLL_MS 50
/* Once the store is back and this instance's charges are in, decisions
 * stay local this long: the other instances reconnect within the store's
 * reconnect backoff (at most 1 s, plus half of it as jitter:
 * store/redis_conn.c) and send their charges at once, so a store decision
 * made after it sees every instance's local admissions. */
#define RLS_LOCAL_SETTLE_MS 2000
/* After a charge batch failed, charges wait this long before the next try
 * (a store that is up but refuses everything is not sent every pending
 * charge with every batch). */
#define RLS_LOCAL_RETRY_MS 100

typedef struct rls_local_stats_s {
    uint64_t ops;           /* ops decided locally */
    uint64_t failed;        /* ops the local store could not decide */
    uint64_t charged;       /* charges the store took */
    uint64_t charge_errors; /* charge batches that failed (kept) */
    uint64_t ended;         /* charges dropped: their window had ended */
    uint64_t dropped;       /* charges dropped: over RLS_LOCAL_CHARGES_MAX */
    uint64_t rejected;      /* charges dropped: the store refused them */
} rls_local_stats_t;

typedef struct rls_charge_s rls_charge_t;

typedef struct rls_local_s {
    rls_store_t *mem;   /* the local decisions */
    rls_store_t *store; /* the fleet's, where the charges go */
    uv_timer_t poll;    /* every RLS_LOCAL_POLL_MS (rls_local_poll) */
    int poll_on;        /* poll initialized (closed by rls_local_close) */
    /* Live instances last seen, written by the switches poller; 0 until
     * the first reading, then taken as 1. */
    uint32_t live;
    rls_charge_t **table; /* chained hashing by counter key */
    rl_hash_key_t hash_key;
    size_t mask;
    size_t n;                 /* charges pending, not in flight */
    size_t sending;           /* charges in flight */
    uint64_t retry_at_ms;     /* no charge sent before (store clock) */
    int was_down;             /* the store failed or was down since it was
                                 last seen up with every charge in */
    uint64_t settle_until_ms; /* decisions stay local until then */
    uint32_t hold_live;       /* the most live instances seen since
                                 decisions went local: the share's count */
    void (*closed)(void *);
    void *closed_arg;
    rls_local_stats_t stats;
} rls_local_t;

/* Makes the local memory store, and starts looking at store's state every
 * RLS_LOCAL_POLL_MS (an unreferenced timer: it keeps no loop alive).
 * Returns 0 or RL_ENOMEM. */
int rls_local_init(rls_local_t *l, uv_loop_t *loop, rls_store_t *store);

/* Looks at the store: seen down, it is marked so; seen up, pending charges
 * are sent, and once every one is in after it was down, decisions stay
 * local for RLS_LOCAL_SETTLE_MS more. The timer calls it; so does the
 * batcher before each batch. */
void rls_local_poll(rls_local_t *l);

/* 1 while batches are to be decided here rather than by the store: it
 * was down and this instance's charges are not all in, or they are and
 * the other instances' may not be yet (RLS_LOCAL_SETTLE_MS). */
int rls_local_holds(const rls_local_t *l, uint64_t now_ms);

/* The store failed a batch (it cannot answer). */
void rls_local_store_failed(rls_local_t *l);

/* Decides op, which the store failed, locally: its limits become this
 * instance's share (in place: the batcher's replay decides on them too),
 * and the memory store counts it. Returns 0 with op's counts set, or the
 * local store's error (op->err). */
int rls_local_decide(rls_local_t *l, rls_op_t *op);

/* Records that `cost` was admitted locally against every limit of op
 * (decided by rls_local_decide) at now_ms. */
void rls_local_charge(rls_local_t *l, const rls_op_t *op, uint64_t cost,
                      uint64_t now_ms);

/* Sends every pending charge to store, when it is up and no charge batch
 * failed in the last RLS_LOCAL_RETRY_MS. Call before submitting a batch
 * (it then follows the charges) and when the store has just answered. */
void rls_local_flush(rls_local_t *l, rls_store_t *store);

/* Frees the charges (none may be in flight) and closes the memory store;
 * done(arg) fires once it is closed. */
void rls_local_close(rls_local_t *l, void (*done)(void *), void *arg);

#endif
