/* The batcher: collects the requests of one loop iteration, coalesces those
 * of one (rule, caller) into one store op, sends the batch to the store in
 * one submission and answers every request from what the store reports.
 *
 * Coalescing is exact. The store decides an op's requests r1..rk in arrival
 * order, each against every window of the rule (admitted only when all
 * have room; a refusal consumes nothing), and reports the windows' counts
 * before the batch. Replaying the same decisions from those counts gives
 * every request exactly the answer it would have had, had the k requests
 * gone to the store one at a time (rl_admit.h). Requests counted
 * envoy-ratelimit's way (rls_spec_t.counting) are ops of their own, sent
 * to the store under limits it cannot refuse (or as a read) and replayed
 * against their real limits (rl_admit_counted): exact the same way.
 * Counters are namespaced:
 * "<prefix>{<caller>}:r:<rule>:<window_s>:<index>" for a rule and
 * "<prefix>{<caller>}:i:<window_s>:<index>" for an inline limit, so no rule
 * can spend another's quota. */
#ifndef RLS_BATCH_H
#define RLS_BATCH_H

#include <stddef.h>
#include <stdint.h>

#include "rl_hash.h"
#include "rl_msg.h"
#include "base/prom_hist.h"
#include "policy/runtime.h"
#include "core/fail_local.h"
#include "core/handle.h"
#include "core/refusals.h"
#include "core/top.h"
#include "store/store.h"

/* Receives the one response for a request: whoever asked (a native
 * connection, a gRPC stream, an HTTP check) says with each request where
 * its answer goes. `r` and its strings are valid only during the call. */
typedef void (*rls_respond_fn)(void *owner, const rl_result_t *r);

typedef struct rls_batch_stats_s {
    uint64_t batches;     /* batches submitted */
    uint64_t requests;    /* requests batched */
    uint64_t coalesced;   /* requests that shared a key with an earlier one */
    uint64_t failed_open; /* answered OK because the store could not answer */
    uint64_t store_errors;/* requests whose store op failed */
    uint64_t replay_mismatch; /* store and batcher disagreed: a bug */
    uint64_t decided_local; /* decided on this instance's share (fail-local) */
    uint64_t held;        /* ticks that held the filling batch back */
    uint64_t groups;      /* requests of several levels (add_group) */
    rls_hist_t size;      /* requests per batch */
} rls_batch_stats_t;

typedef struct rls_batch_s rls_batch_t;

/* rls_batcher_t.fail_open's third value: --fail-local (fail_local.h). */
#define RLS_FAIL_LOCAL 2

/* Decisions of the last RLS_SHARE_S seconds, one bucket a second, and how
 * many of them the store failed: what /healthz's error-ratio check reads. */
#define RLS_SHARE_S 10
typedef struct rls_share_s {
    uint64_t sec; /* monotonic second of this bucket */
    uint64_t decided, failed;
} rls_share_t;

typedef struct rls_batcher_s {
    rls_store_t *store;
    rls_runtime_t *rt; /* the policy in force; batches hold a reference */
    const char *prefix;
    size_t prefix_len;
    size_t max_reqs;   /* a batch is submitted when it holds this many */
    uint64_t grace_ms; /* keys expire this long after their window ends */
    /* Up to this much more, drawn per batch and capped at a quarter of the
     * window, so that the keys of one window do not all expire at the same
     * millisecond (see win_set). 0 after init; set it before the first add. */
    uint64_t spread_ms;
    uint64_t rng;      /* xorshift64 state for the spread */
    int fail_open;     /* 1 open, 0 closed, RLS_FAIL_LOCAL */
    /* --fail-local: decides what the store cannot (the owner sets it; NULL
     * for the other modes). */
    rls_local_t *local;
    rl_hash_key_t hash_key;

    rls_batch_t *cur;  /* filling; NULL when empty */
    rls_batch_t *free; /* spare batches, reused */
    size_t nfree;      /* batches on the free list */
    size_t in_flight;  /* batches submitted and not yet answered */
    /* rls_batcher_flush sends the filling batch only while fewer than this
     * many are in flight (0: no bound); requests that arrive meanwhile
     * join it, so under load a batch fills itself while the store works
     * on the previous one, and at low load nothing waits. A full batch
     * goes regardless. */
    size_t max_in_flight;
    /* rls_batcher_tick holds a batch that is not full until its first
     * request is this old (0: never), but only while the arrival rate says
     * at least RLS_HOLD_GAIN more requests will join it meanwhile: under
     * load, fewer and bigger store calls for a bounded wait; at low load,
     * no wait at all. */
    uint64_t hold_ns;
    uint64_t held_since_ns; /* first tick that saw the filling batch */
    size_t held_nreqs;      /* its requests when first held; 0: not held */
    double hold_joined;     /* requests that joined held batches, smoothed */
    unsigned hold_skipped;  /* holds skipped since the last one */
    uint64_t rate_at_ns, rate_reqs; /* start of the rate's current span */
    double rate;                    /* requests per ns, smoothed */
    rls_batch_stats_t stats;
    rls_share_t share[RLS_SHARE_S];
    /* Refusals known without the store (disabled until the owner calls
     * rls_refusals_init on it). */
    rls_refusals_t refusals;
    /* The loop's top-offenders sketches (core/top.h), where every refusal
     * a caller gets is counted; NULL: none (--top-k 0). */
    rls_top_loop_t *top;
} rls_batcher_t;

/* The one place shadow mode applies: every refusal, whoever decided it
 * (the batcher's replay, the refusal cache, a limit of 0, a lease), is
 * answered through here. Under RLS_MODE_SHADOW the refusal r becomes OK,
 * marked shadow_refused, with no time to retry, and counts as a shadow
 * refusal in st; otherwise it stays as it is and counts as refused (st
 * NULL: not counted). Returns 1 when r became OK. */
int rls_refusal_answer(rl_result_t *r, int mode, rls_rule_stats_t *st);

/* Writes the op key "<prefix>{<caller>}:r:<rule>" (rule_len > 0), or
 * "...:i" / "...:e" for a limit without a rule (ns, decide.h), NUL-
 * terminated, at w (prefix_len + key_len + rule_len + 8 bytes) and returns
 * its length; *tag_len gets the length of "<prefix>{<caller>}". The keys of
 * an op's counters, settled sets and leases all start with it (store.h). */
size_t rls_op_key(const char *prefix, size_t prefix_len, const char *key,
                  size_t key_len, const char *rule, size_t rule_len, int ns,
                  uint8_t *w, size_t *tag_len);

/* Prepares a batcher; allocates nothing yet. */
void rls_batcher_init(rls_batcher_t *b, rls_store_t *store,
                      rls_runtime_t *rt,
                      const char *prefix,
                      size_t prefix_len, size_t max_reqs, uint64_t grace_ms,
                      int fail_open);

/* Adds one validated request (cost >= 1, or 0 for a read when
 * spec->counting is ENVOY or PEEK: policy/runtime.h), resolved into *spec (mode
 * enforce or shadow; mode off never reaches the batcher). spec->rule must
 * belong to the policy in force, which the batch holds until answered. Its
 * response goes to respond(owner, ...) exactly once: later, or before this
 * returns if the batch filled up and the store answered at once. Returns
 * 0, or RL_ENOMEM with nothing queued (the caller answers the request
 * itself). */
int rls_batcher_add(rls_batcher_t *b, rls_respond_fn respond, void *owner,
                    uint64_t id,
                    const char *key, size_t key_len, uint32_t cost,
                    const rls_spec_t *spec);

/* Levels of one group (rls_batcher_add_group), and the windows of all its
 * levels together, at most: one store op holds them. */
#define RLS_GROUP_MAX RLS_WINDOWS_MAX

/* One level of a group: whose counters (key, 1 to RL_KEY_MAX bytes) under
 * what (spec: resolved as for rls_batcher_add, counted the native way, no
 * stored quota), and its index in the request (the answer's level is the
 * deciding one's index + 1: a request's levels left out, such as those in
 * mode off, keep the others' numbers). */
typedef struct rls_level_spec_s {
    const char *key;
    size_t key_len;
    const rls_spec_t *spec;
    uint32_t index;
} rls_level_spec_t;

/* Adds one request decided all or nothing across n levels (1 to
 * RLS_GROUP_MAX, their limits RLS_WINDOWS_MAX at most together, no two of
 * one key and rule): admitted only when every limit of every level has
 * room for cost, then cost is added to each; refused, nothing is counted
 * anywhere. Every store decides it in one step, as it decides one rule's
 * limits: the op names each limit's counter under its level's key
 * (rls_op_window_t.base). It is coalesced with nothing. mode is the
 * group's (enforce or shadow). The answer goes to respond(owner, ...)
 * exactly once, its `level` the deciding level's index + 1; the decision
 * counts in each level's rule: allowed in every one, refused in the
 * refusing one. Returns 0, RL_EINVAL (n or the windows out of bounds) or
 * RL_ENOMEM, with nothing queued. */
int rls_batcher_add_group(rls_batcher_t *b, rls_respond_fn respond, void *owner,
                          uint64_t id, const rls_level_spec_t *lv, size_t n,
                          uint32_t cost, int mode);

/* Submits the filling batch, if any and if max_in_flight allows. Called
 * once per loop iteration. */
void rls_batcher_flush(rls_batcher_t *b);

/* A hold makes a batch worth waiting for when this many more requests
 * are expected to join it before the hold ends, and while holds keep
 * paying: when fewer than half that many joined the recent held batches
 * (arrivals come in bursts, not spread), only every RLS_HOLD_PROBE-th
 * batch is held, to find out when they pay again. */
#define RLS_HOLD_GAIN 4
#define RLS_HOLD_PROBE 16

/* rls_batcher_flush with the hold (hold_ns) applied, at now_ns (a
 * monotonic clock; read only when hold_ns is set, else pass 0). Returns 0,
 * or the nanoseconds left before the held batch is due: the caller calls
 * again by then (any loop iteration before also does). */
uint64_t rls_batcher_tick(rls_batcher_t *b, uint64_t now_ns);

/* Submits the filling batch now, whatever is in flight (before a policy
 * change, and when stopping). */
void rls_batcher_flush_now(rls_batcher_t *b);

/* Sums the decisions of the RLS_SHARE_S seconds up to now_s (monotonic
 * seconds) into *decided, and those the store failed into *failed. */
void rls_batcher_share(const rls_batcher_t *b, uint64_t now_s,
                       uint64_t *decided, uint64_t *failed);

/* Frees the spare batches and the refusals. Nothing may be in flight or
 * filling. */
void rls_batcher_free(rls_batcher_t *b);

#endif
