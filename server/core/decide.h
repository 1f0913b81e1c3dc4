/* The decider: the one object that turns a request into a decision
 * (decide.c), for every front end. The native protocol, HTTP checks and
 * Envoy's rate limit service each parse their protocol into an rls_ask_t,
 * call rls_decide, and encode the answer that comes back through their
 * respond callback; this header is all of the core they include.
 *
 * The decider owns the batcher (core/batch.h), the handle secret and the
 * reservation options (reserve.c), and holds the store and the policy
 * runtime it was given; it is set up from one options struct.
 *
 * rls_decide validates the ask, resolves it under the policy in force
 * (rule or overrides, stored quotas, modes and switches, the caps on
 * limits a request brings itself), answers at once what needs no store (a
 * kill switch, a limit of 0), hands reservations and leases to reserve.c
 * and the rest to the batcher. So a new front end, or a new way to count,
 * changes this one place. */
#ifndef RLS_DECIDE_H
#define RLS_DECIDE_H

#include <stddef.h>
#include <stdint.h>

#include <uv.h>

#include "rl_msg.h"
#include "core/batch.h"
#include "core/handle.h"
#include "trace/tracer.h"

/* Whose counters a limit without a rule spends. Each front end family
 * has its own, so that no request can reach a counter another family's
 * configuration owns (the store keys differ, see batch.h). */
enum {
    RLS_NS_INLINE = 'i', /* native requests' own limits */
    RLS_NS_ENVOY = 'e'   /* Envoy descriptors: the files' and requests' */
};

/* What a front end asks, its protocol parsed: the check itself (q) and how
 * to take it. rls_decide validates q in place (a cost of 0 may become 1,
 * as rl_check_validate has it). */
typedef struct rls_ask_s {
    /* q.id is echoed in the answer's id; q.key is the caller (1 to
     * RL_KEY_MAX bytes, no NUL); q.cost 0 is read as 1. Either a rule of
     * the policy (q.rule_len > 0), decided under its windows, the
     * caller's override or stored quota, its mode and switches, or, with
     * q.rule_len 0, one window of its own: q.limit per q.window_s, a fixed
     * window unless `algo` (a file the operator owns, such as Envoy's
     * descriptors, may name an algorithm; then it is valid:
     * rls_limit_parse's checks) says otherwise. q.op is what is asked
     * (RL_OP_*: rl_msg.h; 0 is CHECK): RESERVE is a check of cost (the
     * estimate) that returns a handle; ACQUIRE takes a lease of a
     * concurrency rule; SETTLE (q.actual: the cost really used), RELEASE
     * and RENEW take q.handle and no key or rule. */
    rl_check_t q;
    const rls_limit_t *algo;
    /* That window comes from the request itself (--inline-limits and its
     * caps apply), or from a file the operator owns. */
    int from_request;
    /* RLS_NS_*: whose counters (limits without a rule). A limit of 0 is
     * invalid in the native protocol, and refuses everything in Envoy's,
     * as envoy-ratelimit has it. */
    int ns;
    /* Counted under this name in the per-rule metrics (limits without a
     * rule; NULL: the inline counters). */
    const char *stats_name;
    size_t stats_name_len;
    int shadow; /* decide in shadow mode at least (unless a switch says) */
    /* A charge, not a question: the cost is counted in every window even
     * past its limit, and the answer is OK (Envoy's apply_on_stream_done
     * descriptors, charge_only in its configuration). */
    int charge;
    /* How it is counted (RLS_COUNT_*, policy/runtime.h): NATIVE (check
     * then increment; 0), ENVOY (increment then compare) or PEEK (compare
     * alone). With ENVOY or PEEK a cost of 0 is a read, not 1; stored
     * quotas (rl-ctl) are not looked up, and ENVOY refuses a rule with a
     * sliding-window limit (its log is bounded by the limit it would be
     * counted past). */
    int counting;
    /* The caller's W3C traceparent (trace/traceparent.h; NULL or not
     * valid: none), the parent of this decision's span when tracing is on
     * (rls_decider_t.tracer) and sampled. */
    const rls_traceparent_t *parent;
} rls_ask_t;

/* How a decider is set up (rls_decider_opts_init gives the defaults). */
typedef struct rls_decider_opts_s {
    rls_store_t *store; /* required; not owned */
    rls_runtime_t *rt;  /* the policy in force; not owned */
    uv_loop_t *loop;    /* reservations' and leases' store deadlines run
                           on it (NULL: unbounded, as in tests) */
    const char *prefix; /* the store keys' prefix, kept by pointer */
    size_t prefix_len;
    size_t max_reqs;      /* requests per batch */
    uint64_t grace_ms;    /* keys expire this long after their window */
    uint64_t spread_ms;   /* up to this much more (batch.h) */
    int fail_open;        /* 1 open, 0 closed, RLS_FAIL_LOCAL */
    rls_local_t *local;   /* --fail-local's, NULL for the other modes */
    size_t max_in_flight; /* batches in flight (0: no bound) */
    uint64_t hold_ns;     /* --batch-hold-us, in ns (0: no hold) */
    size_t refusal_cache; /* entries of the refusal cache (0: none) */
    /* Reservations and leases: handles are signed with the secret in this
     * file (NULL: a random one of this process's own), a reservation
     * waits this long for its settlement, and their store steps fail
     * after xop_timeout_ms (0: unbounded). */
    const char *handle_secret_file;
    /* Else this secret, copied (--threads: the first loop's, so that a
     * handle made on one loop is honoured on every other). */
    const rls_hkey_t *handle_secret;
    uint64_t reserve_ttl_ms;
    uint64_t xop_timeout_ms;
    /* The store is a Redis Cluster: a group's levels must share a hash
     * slot, since one script call decides them (rls_decide_group). */
    int one_slot;
    /* The loop's top-offenders sketches (core/top.h; NULL: none). */
    rls_top_loop_t *top;
} rls_decider_opts_t;

/* The reservation options, kept by the decider for reserve.c. */
typedef struct rls_reserve_opts_s {
    uv_loop_t *loop;
    uint64_t ttl_ms;
    uint64_t xop_timeout_ms;
} rls_reserve_opts_t;

typedef struct rls_decider_s {
    rls_store_t *store;
    rls_runtime_t *rt;
    rls_batcher_t batcher; /* owned */
    rls_hkey_t hkey;       /* owned: reservation and lease handles */
    rls_reserve_opts_t reserve;
    int one_slot; /* the opts' */
    /* --trace-otlp: this loop's spans (not owned; NULL: no tracing). Set
     * by the owner after init. */
    rls_tracer_t *tracer;
} rls_decider_t;

/* Fills o with the defaults: everything 0 or NULL, 1024 requests a batch,
 * fail open, a 1 s grace and a 300 s reservation (the flags' defaults). */
void rls_decider_opts_init(rls_decider_opts_t *o);

/* Sets d up from o. Returns 0, or RL_ENOMEM, or an RL_E* code of
 * rls_hkey_from_file (with a one-line reason in err, errlen bytes); then
 * d holds nothing. The refusal cache is best effort: without memory for
 * it every refusal comes from the store, and a warning is logged. */
int rls_decider_init(rls_decider_t *d, const rls_decider_opts_t *o, char *err,
                     size_t errlen);

/* Frees what d owns (the batcher's spares, the refusals, the secret).
 * Nothing may be in flight or filling. After it d holds no --fail-local
 * (rls_decider_local is NULL: the caller closes it) and its counters
 * (rls_decider_stats) still read. */
void rls_decider_free(rls_decider_t *d);

/* Decides a (its q validated in place): the answer goes to respond(owner,
 * r) exactly once, later or before this returns (a kill switch, a limit
 * of 0, a refusal known without the store, a batch the memory store
 * answered at once), with r->id = a->q.id. Returns 0 then. Otherwise
 * nothing was queued, respond is not called, and *why says why in a
 * sentence valid until the next call: a validation error (RL_EKEYEMPTY...
 * as rl_check_validate returns), RL_ENORULE (an unknown rule), RL_EINLINE
 * (a limit the request brings is refused by this server's settings) or
 * RL_ENOMEM. */
int rls_decide(rls_decider_t *d, rls_ask_t *a, rls_respond_fn respond,
               void *owner, const char **why);

/* Decides n asks (1 to RLS_GROUP_MAX, each validated and resolved as
 * rls_decide does: a rule of rate limits, or a window of its own, counted
 * the native way whatever a->counting says, no stored quota; CHECKs, not
 * charges) all or nothing, as one request of a[0].q.id and a[0].q.cost:
 * allowed only when every limit of every level has room, then charged in
 * every one; refused, charged nowhere. A level whose mode is off is left
 * out; one in shadow puts the group in shadow. The answer (one, through
 * respond, as rls_decide's) carries `level`, the deciding ask's index + 1,
 * and, when the group was decided (not failed, not every level off),
 * `per_level`: each level's own answer, in the asks' order (rl_msg.h; a
 * level left out, or not looked at when another's limit of 0 refused the
 * group without the store, has code 0). Envoy's all_or_nothing domains
 * answer each descriptor from it.
 * A native request of levels (a->q.nlevels > 0) given to rls_decide comes
 * here. Returns 0, or as rls_decide: a validation error, RL_ENORULE,
 * RL_EINLINE, RL_EINVAL (a concurrency rule, more than RLS_WINDOWS_MAX
 * limits together, levels in different slots of a Redis Cluster), RL_ELEVELS
 * or RL_ENOMEM, with *why set and nothing queued. */
int rls_decide_group(rls_decider_t *d, rls_ask_t *a, size_t n,
                     rls_respond_fn respond, void *owner, const char **why);

/* The loop's side of the decider: what the program (server.c) calls once
 * per loop iteration, before a policy change, while stopping and for its
 * pages, so that it never reaches into the batcher. */

/* The hold set up (--batch-hold-us, in ns; 0: batches are not held). A
 * caller reads its monotonic clock for rls_decider_tick only when this is
 * not 0. */
uint64_t rls_decider_hold_ns(const rls_decider_t *d);

/* Sets the hold (0: batches are no longer held; as when the loop has no
 * timer to wake it for a held batch). */
void rls_decider_set_hold_ns(rls_decider_t *d, uint64_t hold_ns);

/* Submits the filling batch unless it is held or behind the batches in
 * flight (rls_batcher_tick, at now_ns: 0 without a hold). Returns 0, or
 * the nanoseconds before the held batch is due: the caller calls again
 * by then. */
uint64_t rls_decider_tick(rls_decider_t *d, uint64_t now_ns);

/* Submits the filling batch now, whatever is in flight (when stopping). */
void rls_decider_flush_now(rls_decider_t *d);

/* Sets the requests per batch (the opts' max_reqs, > 0), before the first
 * request: batches are made to that size (tests: 1 submits each request
 * by itself). */
void rls_decider_set_max_reqs(rls_decider_t *d, size_t max_reqs);

/* Before the policy or the switches change: the filling batch goes out,
 * so that no batch mixes two versions, and the refusals known without the
 * store are forgotten (a limit may have gone up). */
void rls_decider_before_change(rls_decider_t *d);

/* 1 while the store owes answers to batches in flight, else 0. */
int rls_decider_busy(const rls_decider_t *d);

/* --fail-local's decisions (the opts' local; NULL for the other modes,
 * and after rls_decider_free). */
rls_local_t *rls_decider_local(const rls_decider_t *d);

/* The batcher's and the refusal cache's counters, for the pages; valid
 * while d is. */
const rls_batch_stats_t *rls_decider_stats(const rls_decider_t *d);
const rls_refusal_stats_t *rls_decider_refusal_stats(const rls_decider_t *d);

/* Sums the decisions of the RLS_SHARE_S seconds up to now_s (monotonic
 * seconds) into *decided, and those the store failed into *failed. */
void rls_decider_share(const rls_decider_t *d, uint64_t now_s,
                       uint64_t *decided, uint64_t *failed);

#endif
