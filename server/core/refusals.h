/* What this instance knows cannot be admitted (refusals.c).
 *
 * A refused request consumes nothing, and counters only grow until their
 * window ends (every instance only adds). So once a store answer shows that
 * a (rule, caller)'s windows hold counts c_w against limits L_w, any later
 * request whose cost does not fit one of those windows, cost > L_w - c_w,
 * would be refused by the store too, until that window ends: it can be
 * refused here, with the same deciding window, retry_after_ms and used,
 * without a store call. That is exact in one direction only, which is the
 * one that matters: a request that fits the remembered room still goes to
 * the store (other instances may have spent the room meanwhile).
 *
 * What could raise a limit makes entries stale: a reload or a switch
 * (entries of an older epoch are ignored) and a quota set with rl-ctl,
 * which no instance hears of; so an entry also lives at most
 * RLS_REFUSAL_TTL_MS, the bound on how late a raised quota is honoured.
 *
 * Memory is bounded: at most `max` entries in an open-addressed table of
 * up to 2*max slots (it starts at 64 and doubles when half full); when
 * full, the new entry is dropped and counted. */
#ifndef RLS_REFUSALS_H
#define RLS_REFUSALS_H

#include <stddef.h>
#include <stdint.h>

#include "policy/rules.h"
#include "rl_admit.h"
#include "rl_hash.h"

#define RLS_REFUSAL_TTL_MS 1000

typedef struct rls_refusal_stats_s {
    uint64_t hits;    /* requests refused here, without the store */
    uint64_t inserts; /* entries made or refreshed */
    uint64_t full;    /* entries dropped: the table was full */
    uint64_t entries; /* live entries now (expired ones until reused) */
} rls_refusal_stats_t;

typedef struct rls_refusal_s rls_refusal_t;

typedef struct rls_refusals_s {
    rls_refusal_t *slots;
    uint32_t mask;       /* slots - 1; 0 with no table (disabled) */
    size_t max;          /* entries at most */
    uint64_t epoch;      /* bumped when limits may have changed */
    rls_refusal_stats_t stats;
} rls_refusals_t;

/* max 0 disables the cache (every request goes to the store). Returns 0
 * or RL_ENOMEM. */
int rls_refusals_init(rls_refusals_t *c, size_t max);
void rls_refusals_free(rls_refusals_t *c);

/* Forgets everything (a reload or a switch may have raised a limit). */
void rls_refusals_invalidate(rls_refusals_t *c);

/* A cache key is an op's key and, for an inline limit, its window length
 * and limit (one caller may use several; 0 and 0 for a rule), so nothing
 * is copied to form it. `h` is the caller's keyed hash of the op (the
 * batcher's, which it computes for its own index anyway: SipHash of the
 * caller's key with the rule or the inline window mixed in); the cache
 * mixes in the limit. Entries are told apart by their whole key, so h
 * only places them. */

/* The entry for a key, or NULL. Cheap: no clock is read. */
const rls_refusal_t *rls_refusals_find(const rls_refusals_t *c, uint64_t h,
                                       const char *key, size_t len,
                                       uint32_t window_s, uint64_t limit);

/* Whether entry e, read at now_ms (the store's clock), says a request of
 * `cost` cannot be admitted. If so, fills w[0..*n) with the remembered
 * windows (reset_after_ms from now_ms), counts a hit and returns 1; else
 * 0. */
int rls_refusals_refuse(rls_refusals_t *c, const rls_refusal_t *e,
                        uint64_t now_ms, uint64_t cost, rl_admit_win_t *w,
                        uint32_t *n);

/* Remembers key's windows as a store answer left them (counts after the
 * batch; end_ms[i] when window i ends, on the store's clock). */
void rls_refusals_learn(rls_refusals_t *c, uint64_t h, const char *key,
                        size_t len,
                        uint32_t window_s, uint64_t limit, uint64_t now_ms,
                        const rl_admit_win_t *w, const uint64_t *end_ms,
                        uint32_t n);

#endif
