/* The one step that turns a request into a decision (decide.c), for every
 * front end: the native protocol, HTTP checks and Envoy's rate limit
 * service each parse their protocol into an rls_ask_t, call rls_decide,
 * and encode the answer that comes back through their respond callback.
 *
 * rls_decide validates the ask, resolves it under the policy in force
 * (rule or overrides, stored quotas, modes and switches, the caps on
 * limits a request brings itself), answers at once what needs no store (a
 * kill switch, a limit of 0) and hands the rest to the batcher. So a new
 * front end, or a new way to count, changes this one place. */
#ifndef RLS_DECIDE_H
#define RLS_DECIDE_H

#include <stddef.h>
#include <stdint.h>

#include "core/batch.h"

/* Whose counters a limit without a rule spends. Each front end family
 * has its own, so that no request can reach a counter another family's
 * configuration owns (the store keys differ, see batch.h). */
enum {
    RLS_NS_INLINE = 'i', /* native requests' own limits */
    RLS_NS_ENVOY = 'e'   /* Envoy descriptors: the files' and requests' */
};

/* What a front end asks, its protocol parsed. */
typedef struct rls_ask_s {
    uint64_t id;      /* echoed in the answer's id */
    const char *key;  /* the caller: 1 to RL_KEY_MAX bytes, no NUL */
    size_t key_len;
    uint32_t cost;    /* 0 is read as 1 */
    /* A rule of the policy (rule_len > 0), decided under its windows,
     * the caller's override or stored quota, its mode and switches... */
    const char *rule;
    size_t rule_len;
    /* ...or, with rule_len 0, one window of its own: limit per window_s,
     * a fixed window unless `algo` (a file the operator owns, such as
     * Envoy's descriptors, may name an algorithm; then it is valid:
     * rls_limit_parse's checks) says otherwise. */
    uint64_t limit;
    uint32_t window_s;
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
    /* What is asked (RL_OP_*: rl_msg.h); RL_OP_CHECK when 0. RESERVE is a
     * check of cost (the estimate) that returns a handle; ACQUIRE takes a
     * lease of a concurrency rule; SETTLE, RELEASE and RENEW take a
     * handle and no key or rule. */
    uint32_t op;
    const uint8_t *handle;
    size_t handle_len;
    uint64_t actual; /* SETTLE: the cost really used */
} rls_ask_t;

/* Decides a: the answer goes to respond(owner, r) exactly once, later or
 * before this returns (a kill switch, a limit of 0, a refusal known
 * without the store, a batch the memory store answered at once), with
 * r->id = a->id. Returns 0 then. Otherwise nothing was queued, respond is
 * not called, and *why says why in a sentence valid until the next call:
 * a validation error (RL_EKEYEMPTY... as rl_check_validate returns),
 * RL_ENORULE (an unknown rule), RL_EINLINE (a limit the request brings is
 * refused by this server's settings) or RL_ENOMEM. */
int rls_decide(rls_batcher_t *b, const rls_ask_t *a, rls_respond_fn respond,
               void *owner, const char **why);

#endif
