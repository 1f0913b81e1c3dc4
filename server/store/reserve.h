/* Reservations and leases on a store (store/reserve.c): the operations
 * that run one at a time, outside the batches of store.h.
 *
 * "xop" in the names below is one such operation (a reservation's
 * settlement, or a lease's acquire, release or renewal): rls_reserve_op_t is
 * its request and answer, RLS_XOP_* its kinds, rls_store_reserve runs it, and a
 * store's vtable entry xop (store.h) is the memory store's own way of
 * running it. */
#ifndef RLS_STORE_RESERVE_H
#define RLS_STORE_RESERVE_H

#include <stddef.h>
#include <stdint.h>

typedef struct rls_store_s rls_store_t;
typedef struct rls_op_window_s rls_op_window_t;

/* The most settled ids a caller's set keeps (RLS_XOP_SETTLE): its
 * rule's largest limit, within these bounds; RLS_SETTLED_DEFAULT when the
 * rule is not known at the settlement (inline limits, a rule removed). */
#define RLS_SETTLED_MIN 64
#define RLS_SETTLED_MAX 10000
#define RLS_SETTLED_DEFAULT 1024

/* Reservations and leases (DESIGN.md, "Reservations and leases"): one
 * operation at a time, outside batches, on keys of the same slot as the
 * op key's counters.
 *
 *   RLS_XOP_SETTLE   Once per reservation: refused (result 0) when id is
 *                    in the caller's settled set "<key>:x" (score: the
 *                    reservation's end), or until_ms is at or before now
 *                    or at or before the set's floor "<key>:xf" (the
 *                    latest end it dropped: such an id may have been
 *                    settled); else adds id (dropping the earliest ends
 *                    past settled_max, the floor rising to the latest
 *                    dropped) and adjusts every window in win by delta
 *                    (the actual cost minus the estimate; negative is a
 *                    refund): fixed and swc windows add delta to the
 *                    counter of the window they name (`index`), only if it
 *                    still exists, never below 0; a gcra moves its TAT by
 *                    delta x t_us (an excess from max(TAT, now), so the
 *                    bucket may go past its burst; a refund only while the
 *                    TAT exists), its key then expiring at the TAT plus
 *                    expire_at_ms (the grace, as in batches); a sliding
 *                    window's log gets an entry (now_ms, delta) for an
 *                    excess, and for a refund takes min(refund, cost) off
 *                    its entries of decided_at_ms, newest first (entries
 *                    that left the window are not refunded). result: 1
 *                    applied, 0 settled already, or it may have been.
 *   RLS_XOP_ACQUIRE  The lease set "<key>:c" (member: id as 16 lowercase
 *                    hex digits; score: its end in ms): drops the leases
 *                    that ended (end <= now_ms), then adds id with end
 *                    until_ms when fewer than limit are alive. result: 1
 *                    acquired, 0 full; count: leases alive afterwards;
 *                    earliest_ms: when refused, the end of the earliest
 *                    alive lease. The set expires at its latest end.
 *   RLS_XOP_RELEASE  Removes lease id. result: 1 removed, 0 no such lease
 *                    alive (unknown, released, or ended).
 *   RLS_XOP_RENEW    Moves the end of lease id to until_ms, if it is still
 *                    alive (end > now_ms). result: 1 renewed, 0 not alive;
 *                    count: leases alive.
 *
 * Every store gives the same answers: the memory store on its own
 * structures, the Redis stores (plain, Sentinel, with the module, Cluster)
 * through one Lua script (store/reserve.lua), sent with the store's
 * command(). */
enum {
    RLS_XOP_SETTLE = 1,
    RLS_XOP_ACQUIRE = 2,
    RLS_XOP_RELEASE = 3,
    RLS_XOP_RENEW = 4
};

typedef struct rls_reserve_op_s {
    /* Set by the caller; untouched by the store. */
    int kind;        /* RLS_XOP_* */
    const char *key; /* the op key, as rls_op_t's; NUL-terminated */
    size_t key_len;
    size_t tag_len;
    uint64_t now_ms;   /* the store's clock (rls_store_vtbl_t.now_ms) */
    uint64_t id;       /* the reservation's or lease's */
    uint64_t until_ms; /* settle: the reservation's end; acquire, renew: the
                          lease's end */
    uint64_t limit;    /* acquire: leases allowed alive */
    const char *quota; /* acquire: the rule whose stored quota
                          (rl-ctl's "<tag>:q") may set the limit
                          instead, its one "N/S" scaled; or NULL
                          (the memory store has no quotas) */
    size_t quota_len;
    double scale;
    int64_t delta;          /* settle */
    uint64_t decided_at_ms; /* settle: when the reservation was decided */
    const rls_op_window_t *win; /* settle: the windows charged (algo, phased, */
    uint32_t nwin;          /* window_s, index, t_us, expire_at_ms) */
    uint64_t settled_max;   /* settle: the settled ids the caller's set
                               keeps at most (RLS_SETTLED_*); 0 is 1 */
    int marker;             /* settle: also refused when the marker
                               "<key>:x<id>" of an instance before the
                               settled set exists (a version 1 handle's);
                               the memory store never had one there */
    /* Set by the store before the callback. */
    int result;
    uint64_t count;
    uint64_t earliest_ms;
    uint64_t qlimit; /* acquire: the stored quota's limit that applied, or
                        0 (the caller's limit did) */
    int err;         /* 0, or RL_ESTORE / RL_ETIMEDOUT / RL_ESHUTDOWN
                        / RL_ENOMEM: nothing is known to have
                        changed */
} rls_reserve_op_t;

/* Fires exactly once per rls_store_reserve, later or before it returns. */
typedef void (*rls_reserve_op_cb)(void *data, rls_reserve_op_t *x);

/* Runs x on store s (store/reserve.c). x must stay valid until cb fires. */
void rls_store_reserve(rls_store_t *s, rls_reserve_op_t *x,
                       rls_reserve_op_cb cb, void *data);

#endif
