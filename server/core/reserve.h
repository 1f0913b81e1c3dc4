/* Reservations and leases (reserve.c): the steps of RESERVE, SETTLE,
 * ACQUIRE, RELEASE and RENEW, for rls_decide alone (decide.c), which has
 * validated and resolved the ask first. Front ends include decide.h.
 *
 * Each answers through respond(owner, r) exactly once when it returns 0
 * (perhaps before it returns); otherwise nothing was started, respond is
 * not called, and *why (where there is one) says why. */
#ifndef RLS_RESERVE_H
#define RLS_RESERVE_H

#include "core/decide.h"

/* 0 when d can sign handles, else RL_EINVAL with *why. */
int rls_reserve_ready(const rls_decider_t *d, const char **why);

/* RESERVE of `cost` under spec (mode enforce or shadow): the batcher
 * decides it as a check; allowed, it answers with a handle. Returns 0 or
 * RL_ENOMEM. */
int rls_reserve(rls_decider_t *d, const rls_ask_t *a, rls_respond_fn respond,
                void *owner, const rls_spec_t *spec, uint32_t cost);

/* RESERVE under the kill switch: r (the mode-off answer) with a handle
 * that charges nothing. Returns 0 or RL_ENOMEM. */
int rls_reserve_off(rls_decider_t *d, const rls_ask_t *a,
                    rls_respond_fn respond, void *owner,
                    const rls_spec_t *spec, rl_result_t *r);

/* SETTLE of a->q.handle with a->q.actual. Returns 0, RL_EINVAL (a bad,
 * foreign or expired handle) or RL_ENOMEM. */
int rls_settle(rls_decider_t *d, const rls_ask_t *a, rls_respond_fn respond,
               void *owner, const char **why);

/* ACQUIRE of a lease of spec's concurrency rule. Returns 0, RL_EINVAL (no
 * handle secret) or RL_ENOMEM. */
int rls_acquire(rls_decider_t *d, const rls_ask_t *a, rls_respond_fn respond,
                void *owner, const rls_spec_t *spec, const char **why);

/* RELEASE or RENEW (a->q.op) of a lease's handle. Returns 0, RL_EINVAL,
 * RL_ENORULE (RENEW of a rule that is gone) or RL_ENOMEM. */
int rls_release_renew(rls_decider_t *d, const rls_ask_t *a,
                      rls_respond_fn respond, void *owner, const char **why);

#endif
