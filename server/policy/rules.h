/* The policy: named rules, each with up to RLS_WINDOWS_MAX limits, a mode,
 * and per-caller overrides (rules.c). A policy is built whole (from --rule
 * flags and a YAML rules file), validated completely, and then never
 * changed: a reload builds a new one and swaps it in between batches, and a
 * request holds the rule it was decided under until it is answered.
 *
 * The file (libyaml's event parser; no hand-written YAML):
 *
 *   rules:
 *     login:
 *       limits: [5/60s]
 *     api:
 *       limits: [33/1m, 2000/1h]        # every limit must allow
 *       overrides:                       # per-caller quotas, by exact key
 *         "user:acme": [1000/1m, 50000/1h]
 *     search:
 *       limits: [10/1s]
 *       mode: shadow                     # enforce (default) | shadow | off
 *     smooth:
 *       limits:
 *         - {limit: 100/1m, algorithm: sliding-window-counter}
 *         - {limit: 100000/1d, phase: per-caller}
 *     burst:
 *       limits:
 *         - {rate: 10/1s, burst: 20, algorithm: gcra}
 *         - 1000/1h
 *
 * A limit is N/DURATION: N from 1 to 2^63-1, a duration in s, m, h, d or
 * bare seconds, from 1 s to 366 d; a fixed window, aligned on the clock.
 * Or a map of
 *
 *   limit: N/DURATION    (or rate:, which reads better for a gcra; one of
 *                         the two)
 *   algorithm:           fixed-window (default) | sliding-window-counter |
 *                        gcra (N per DURATION is the rate)
 *   phase:               aligned (default) | per-caller: each caller's
 *                        windows start at an offset of its own (windows
 *                        only; a gcra has none)
 *   burst: B             gcra only: the bucket, from 1; default N
 *
 * Or the same in one word, as --rule flags take it (and a plain YAML value
 * too): N/DURATION followed by ':'-separated options, an algorithm's name,
 * per-caller (or aligned) and burst=B, e.g. 100/1m:sliding-window-counter,
 * 100000/1d:per-caller, 10/1s:gcra:burst=20. Overrides take limits in
 * either form. Bounds: a sliding-window-counter's N at most
 * RL_SWC_LIMIT_MAX; a gcra at most 1 per microsecond, and its burst x
 * interval at most RL_GCRA_CAP_MAX_US (366 days); a sliding-window's N at
 * most --sliding-window-max. A rule's limits differ in window length or
 * algorithm. */
#ifndef RLS_POLICY_RULES_H
#define RLS_POLICY_RULES_H

#include <stddef.h>
#include <stdint.h>

#include "rl_admit.h"
#include "rl_validate.h"
#include "rl_hash.h"
#include "policy/limit.h"
#include "policy/loader.h"

/* A rule's windows: as many as admission decides across (lib/). */
#define RLS_WINDOWS_MAX RL_ADMIT_WINDOWS_MAX
/* Largest rules file read; a bigger one is refused before it is parsed. */
#define RLS_RULES_FILE_MAX (16u << 20)
/* Nesting deeper than this is refused (the format needs 5 levels). */
#define RLS_RULES_DEPTH_MAX 8

/* A concurrency rule's bounds: leases alive per caller, and the lease
 * length when the rule gives none. */
#define RLS_CONCURRENCY_MAX 1000000u
#define RLS_LEASE_DEFAULT_S 60

enum { RLS_MODE_ENFORCE, RLS_MODE_SHADOW, RLS_MODE_OFF, RLS_MODE_MAX };

/* A rule's limits, sorted by window length then algorithm, no pair twice. */
typedef struct rls_limits_s {
    rls_limit_t w[RLS_WINDOWS_MAX];
    uint32_t n;
} rls_limits_t;

typedef struct rls_override_s {
    const char *key; /* in the policy's arena; not NUL-terminated */
    size_t key_len;
    uint64_t hash;
    rls_limits_t limits;
} rls_override_t;

typedef struct rls_rule_s {
    const char *name; /* in the policy's arena, NUL-terminated */
    size_t name_len;
    rls_limits_t limits;
    int mode;
    int line; /* where it was defined (0: a --rule flag) */
    rls_override_t *overrides; /* in the file's order, or NULL */
    /* Open-addressed by key hash, at most half full: each slot the
     * override's index + 1 in its low half and the high half of its
     * hash above (compared before the override is touched); 0: empty. */
    uint64_t *override_index;
    const rl_hash_key_t *hash_key; /* the policy's, for overrides */
    uint32_t overrides_mask;   /* index size - 1 */
    uint32_t noverrides;
    uint32_t index; /* position in the policy, 0-based */
    /* A concurrency rule ("concurrency: N", "lease: DURATION"): limits.w[0]
     * is N leases alive per caller (limit) of lease_s seconds each
     * (window_s), taken with ACQUIRE, never decided as a rate. 0: a rate
     * rule. */
    int concurrency;
} rls_rule_t;

typedef struct rls_policy_s rls_policy_t;

/* The signature (rls_file_signature) of the rules file as this policy
 * read it; all 0 when built without a file. */
void rls_policy_file_signature(const rls_policy_t *p, uint64_t sig[4]);

/* Builds a policy from --rule flags (each "NAME=LIMIT[,LIMIT...]", a
 * LIMIT in one word as rls_limit_parse reads it, e.g.
 * "api=100/1m:sliding-window-counter,100000/1d:per-caller") and, when path
 * is not NULL, a rules file. A name defined twice, in either or across
 * both, is an error. max_rules bounds the number of rules.
 * Returns 0 with *out set, or RL_EINVAL with every error in *diag (and
 * *out NULL), or RL_ENOMEM. */
int rls_policy_build(const char *const *flags, size_t nflags,
                     const char *path, size_t max_rules, rls_policy_t **out,
                     rls_diag_t *diag);

/* Same, from a buffer holding a file's bytes (name is used in messages). */
int rls_policy_build_buf(const char *const *flags, size_t nflags,
                         const char *name, const char *buf, size_t len,
                         size_t max_rules, rls_policy_t **out,
                         rls_diag_t *diag);

/* A reference: the policy lives until its last reference is dropped. */
rls_policy_t *rls_policy_ref(rls_policy_t *p);
void rls_policy_unref(rls_policy_t *p);

/* Drops a reference unless it is the last: returns NULL, or p when the
 * caller held the last one (nothing else can reach p then, so the caller
 * may free it with rls_policy_unref on another thread). NULL is fine. */
rls_policy_t *rls_policy_release(rls_policy_t *p);

size_t rls_policy_count(const rls_policy_t *p);
const rls_rule_t *rls_policy_rule_at(const rls_policy_t *p, size_t i);

/* The rule called name, or NULL. */
const rls_rule_t *rls_policy_find(const rls_policy_t *p, const char *name,
                                  size_t len);

/* The limits for key under rule: its override, or the rule's own. */
const rls_limits_t *rls_rule_limits(const rls_rule_t *r, const char *key,
                                    size_t key_len);

/* 1 when s[0, len) is a rule name a client could send: 1 to 128 bytes of
 * [A-Za-z0-9_.:-] (the same check rl_check_validate makes). */
int rls_rule_name_ok(const char *s, size_t len);

/* Test hook: the key comparisons made so far, in this process, by builds
 * checking rule names and override keys for duplicates (summed when each
 * build ends). A test builds N keys and checks that this grew by O(N). */
uint64_t rls_rules_key_probes(void);

const char *rls_mode_name(int mode);
/* Returns RLS_MODE_* or -1 for an unknown name. */
int rls_mode_parse(const char *s, size_t len);

#endif
