/* The policy in force (runtime.c): the current rules, the operators'
 * runtime switches on top of them, the caps on inline limits, and the
 * per-rule counters. Every request is resolved here into what the batcher
 * needs: which counters, which limits, which mode.
 *
 *   effective mode  = the global switch if set, else the rule's switch if
 *                     set, else the rule's mode from the file
 *   effective limit = the rule's (or the caller's override's) limit times
 *                     the rule's scale switch, at least 1 (a scale never
 *                     turns a limit into "refuse everything")
 *
 * A policy is swapped whole (a reload) and switches are applied whole
 * (a poll that saw a new version); both happen between batches, through
 * the before_change hook, so no batch mixes two versions. */
#ifndef RLS_POLICY_RUNTIME_H
#define RLS_POLICY_RUNTIME_H

#include <stddef.h>
#include <stdint.h>

#include "policy/rules.h"
#include "rl_validate.h"
#include "rl_hash.h"
#include "rl_msg.h"

/* Windows per rule the quota-fit counters tell apart; a rule whose callers
 * have more distinct window lengths (through quotas) counts the rest under
 * window="other". */
#define RLS_STATS_WINDOWS 16

typedef struct rls_win_stats_s {
    uint32_t window_s; /* 0: the "other" slot */
    uint64_t started;  /* caller-windows whose first consumption we made */
    uint64_t reached[3]; /* ...that reached 50 %, 80 %, 100 % of the limit */
} rls_win_stats_t;

typedef struct rls_rule_stats_s {
    char name[RL_RULE_MAX + 1]; /* "" for inline limits */
    uint64_t allowed;
    uint64_t refused;
    uint64_t shadow_refused; /* allowed only because of shadow mode */
    uint64_t uncounted;      /* allowed by mode off */
    uint64_t quota_errors;   /* stored quotas that did not parse */
    /* Reservations and leases (RESERVE and ACQUIRE count as allowed or
     * refused above). */
    uint64_t reserves;   /* RESERVEs decided here: such a rule's
                            refusals are not cached (batch.c), since a
                            refund frees room the cache cannot see */
    uint64_t settled;    /* settlements applied */
    uint64_t refunded;   /* cost given back by settlements */
    uint64_t excess;     /* cost charged past the estimates */
    uint64_t released;   /* leases given back */
    uint64_t renewed;    /* leases extended */
    uint64_t xop_errors; /* settle, release, renew refused: a handle
                            settled twice, expired, unknown */
    uint32_t nwin;
    rls_win_stats_t win[RLS_STATS_WINDOWS + 1];
    /* This name's top-offenders sketches on the loop (core/top.c), made
     * at its first refusal; NULL: none yet. */
    struct rls_top_rule_s *top;
} rls_rule_stats_t;

/* What one request is decided under. */
typedef struct rls_spec_s {
    const rls_rule_t *rule;   /* NULL: an inline limit */
    rls_rule_stats_t *stats;
    int mode;                 /* RLS_MODE_ENFORCE, _SHADOW or _OFF */
    rls_limits_t limits;      /* effective: override, scale */
    /* Redis store: look for the caller's stored quota, which replaces the
     * limits when present (scaled by `scale`): only for a rule rl-ctl has
     * stored quotas for (the switch "quotas:<rule>"), since the look-up is
     * a Redis call per op; 0 for inline limits. */
    int quota;
    double scale;
    /* Limits without a rule: whose counters (decide.h's RLS_NS_*), a
     * letter in the store key. */
    int ns;
    /* A charge (decide.h): the limits were raised out of reach; never
     * refused from the refusal cache, never coalesced with checks. */
    int charge;
    /* How the batcher counts it (RLS_COUNT_*): check then increment (the
     * native rule), increment then compare (envoy-ratelimit's), or
     * compare alone (a read). */
    int counting;
} rls_spec_t;

/* rls_spec_t.counting. NATIVE: admitted only when every limit has room
 * for the cost, and a refusal consumes nothing. ENVOY: the cost is
 * counted in every limit whatever its room, then the request is within
 * when no limit is past its cap (rl_admit_counted). PEEK: the same
 * comparison without counting anything (a cost of 0 reads the counters).
 * The store sees ENVOY's limits raised out of reach and PEEK's as a
 * request no limit can hold, so every store counts them as it counts
 * native requests (batch.c). */
enum { RLS_COUNT_NATIVE = 0, RLS_COUNT_ENVOY = 1, RLS_COUNT_PEEK = 2 };

enum { RLS_INLINE_ALLOW, RLS_INLINE_DENY };

typedef struct rls_switches_s {
    int64_t version;
    int global_mode; /* RLS_MODE_* or -1 */
    size_t n;
    struct rls_switch_s {
        char rule[RL_RULE_MAX + 1];
        int mode;     /* -1: not set */
        double scale; /* 0: not set */
        int quotas;   /* rl-ctl has stored quotas for this rule */
    } *items;
} rls_switches_t;

typedef struct rls_runtime_s {
    rls_policy_t *policy;
    struct rls_rule_rt_s *rt; /* per rule of policy: effective settings */
    rls_switches_t sw;
    uint64_t generation; /* policies installed so far */
    /* inline limits */
    int inline_mode;
    uint32_t max_inline_window; /* 0: no cap beyond the protocol's */
    uint64_t max_inline_limit;  /* 0: no cap */
    /* counters by rule name, kept across reloads: a hash table */
    rl_hash_key_t hash_key;
    rls_rule_stats_t **stats;
    size_t nstats, stats_cap, max_stats;
    rls_rule_stats_t inline_stats;
    rls_rule_stats_t other_stats; /* names past max_stats */
    /* Called before the policy or the switches change (the server flushes
     * the batch it is filling). */
    void (*before_change)(void *arg);
    /* Called once a new policy or new switches are in force (--threads:
     * the first loop hands them to every other). NULL: nothing. */
    void (*after_change)(void *arg);
    void *arg;
} rls_runtime_t;

/* Starts with policy p (the runtime takes the reference). max_rules also
 * bounds the names the counters remember across reloads (4x). */
int rls_runtime_init(rls_runtime_t *rt, rls_policy_t *p, size_t max_rules);
void rls_runtime_free(rls_runtime_t *rt);

/* Installs a new policy (taking the reference), between batches. Returns
 * 0 or RL_ENOMEM (the old policy stays). */
int rls_runtime_set_policy(rls_runtime_t *rt, rls_policy_t *p);

/* Applies switches (taking ownership of sw->items). Returns 0, or RL_ENOMEM
 * (the old switches stay, sw->items freed). */
int rls_runtime_set_switches(rls_runtime_t *rt, rls_switches_t *sw);

/* Parses the switches hash as HGETALL returns it: field/value pairs. Bad
 * fields are skipped (counted in *bad). Returns 0 or RL_ENOMEM. */
int rls_switches_parse(rls_switches_t *sw, size_t npairs,
                       const char *const *fields, const size_t *flens,
                       const char *const *values, const size_t *vlens,
                       size_t *bad);
void rls_switches_free(rls_switches_t *sw);
/* dst becomes a copy of src, items of its own. Returns 0 or RL_ENOMEM
 * (then dst holds none). */
int rls_switches_copy(rls_switches_t *dst, const rls_switches_t *src);

/* The switches hash's version field as rls_switches_parse reads it, for
 * the poller's look at whether anything changed: digits only (rl-ctl's
 * HINCRBY), up to 2^63-1. Returns 0, or RL_EINVAL with *out 0 (the version
 * of a hash without one). */
int rls_switches_version(const char *v, size_t vl, int64_t *out);

/* Resolves a request of caller key naming rule into *spec: the rule's
 * windows, or the caller's override, scaled; its mode and switches; whether
 * to look for a stored quota. Returns 0 or RL_ENORULE (no such rule). */
int rls_runtime_resolve(rls_runtime_t *rt, const char *rule, size_t rule_len,
                        const char *key, size_t key_len, rls_spec_t *spec);

/* The counters kept under name (made on first use, kept for the life of
 * the runtime; past the cap, the shared "(other)" entry): for decisions
 * made without a rule of the policy, such as Envoy's descriptors. */
rls_rule_stats_t *rls_runtime_stats(rls_runtime_t *rt, const char *name,
                                    size_t len);

/* The answer to a request resolved into mode off (a kill switch), for
 * every front end alike: allowed, nothing counted, the first window's
 * limit as limit and remaining. Counts it in spec->stats->uncounted. */
void rls_spec_off_result(const rls_spec_t *spec, uint64_t id,
                         rl_result_t *r);

/* Effective limit of l under scale (at least 1). */
uint64_t rls_scale_limit(uint64_t limit, double scale);

#endif
