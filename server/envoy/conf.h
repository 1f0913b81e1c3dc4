/* Envoy rate limit descriptors (the tree: conf.c; its YAML: conf_yaml.c):
 * the configuration format of envoy-ratelimit
 * (github.com/envoyproxy/ratelimit), so that its users can bring their
 * files unchanged, plus extensions of ours. One file per
 * domain:
 *
 *   domain: mongo_cps
 *   rate_limit_headers: draft      # ours: none (default) | x | draft | all
 *                                  # | envoy (envoy-ratelimit's three)
 *   counting: envoy                # ours: envoy (increment, then compare:
 *                                  # envoy-ratelimit's) | envoy-stop (its
 *                                  # STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT)
 *                                  # | native (check, then increment);
 *                                  # default --envoy-counting
 *   all_or_nothing: true           # ours: a call's limited descriptors
 *                                  # are decided together, all charged
 *                                  # or none (check, then increment);
 *                                  # default false
 *   descriptors:
 *     - key: database
 *       value: users               # optional: without it, any value
 *                                  # matches; '*' anywhere: a wildcard
 *       rate_limit:
 *         unit: second             # second | minute | hour | day | week
 *                                  # | month (30 d) | year (365 d)
 *         requests_per_unit: 500   # default 0: refuses everything
 *         name: users-limit        # optional, echoed in current_limit
 *         replaces:                # limits switched off when this one
 *           - name: other-limit    # applies in the same call
 *         window: 90s              # ours: any length from 1 s to 366 d
 *                                  # instead of unit
 *         algorithm: gcra          # ours: fixed-window (default) |
 *                                  # sliding-window-counter | gcra
 *         burst: 1000              # ours: gcra only, default
 *                                  # requests_per_unit
 *         phase: per-caller        # ours: aligned (default) | per-caller,
 *                                  # windows staggered per caller (not gcra)
 *       shadow_mode: true          # decided and counted, never refused
 *       charge_only: true          # ours: counted even past the limit,
 *                                  # always OK: the charge Envoy sends
 *                                  # with apply_on_stream_done
 *       quota_mode: true           # over, refuses the call only when all
 *                                  # its quota descriptors are over
 *       share_threshold: true      # wildcard: one counter for all values
 *       detailed_metric: true      # statistics per value (stats code)
 *       value_to_metric: true      # the value in the statistic's name
 *       metadata: {...}            # returned in dynamic_metadata when
 *                                  # --envoy-response-metadata
 *       descriptors: [...]         # nested: the request's next entry
 *     - key: remote_address
 *       unlimited: true            # matched, never counted
 *     - key: tenant
 *       rule: api                  # ours: decided under the rules file's
 *                                  # rule "api" (its windows, mode, overrides,
 *                                  # switches and quotas)
 *
 * A key envoy-ratelimit knows but ignores where it is written (it takes
 * any of its keys anywhere) is a warning; a key it does not know, an
 * error.
 *
 * A rate_limit without the extensions is envoy-ratelimit's fixed window.
 * The extensions mean what they mean in the rules file (rules.h), under the
 * same bounds; requests_per_unit is a gcra's rate (per unit or window) and
 * 0, which refuses everything, is refused for a gcra.
 *
 * Matching is envoy-ratelimit's: the request descriptor's entries walk down
 * the tree, at each level a node with the entry's key and value preferred
 * to one with the key alone; the node reached by the last entry decides.
 * No node, or a node without a limit: allowed and not counted.
 *
 * A configuration is built whole from all files, validated completely
 * (every error with FILE:LINE) and never changed: a reload builds a new one
 * and swaps it in; requests hold a reference to the one they started
 * under. */
#ifndef RLS_POLICY_ENVOY_CONF_H
#define RLS_POLICY_ENVOY_CONF_H

#include <stddef.h>
#include <stdint.h>

#include "policy/rules.h"

/* What a matched node does. */
enum {
    RLS_ENVOY_NONE,      /* no rate_limit here: allowed, not counted */
    RLS_ENVOY_LIMIT,     /* requests_per_unit per window */
    RLS_ENVOY_UNLIMITED, /* unlimited: true */
    RLS_ENVOY_RULE       /* rule: NAME of the rules file */
};

typedef struct rls_envoy_node_s {
    const char *key; /* in the configuration's arena, NUL-terminated */
    size_t key_len;
    const char *value; /* NULL: matches any value; else as written, with
                          its '*'s when wildcard */
    size_t value_len;
    int wildcard;      /* value holds '*': a glob, each '*' any run of bytes
                          (tried after an exact value, before the key
                          alone, in file order) */
    const char *name;  /* rate_limit.name, or NULL */
    size_t name_len;
    const char *rule; /* RLS_ENVOY_RULE: the rule's name */
    size_t rule_len;
    int kind;
    int shadow;
    int charge;          /* charge_only (ours): counted, never refused */
    int quota;           /* quota_mode: over, it refuses the call only when
                            every quota descriptor of the call is over */
    int share_threshold; /* wildcard: one counter for every value matching,
                            keyed by the pattern */
    int detailed_metric; /* statistics per request value (read by the
                            statistics code; not by the decision) */
    int value_to_metric; /* the request's value in the statistic's name */
    /* metadata: a google.protobuf.Struct's bytes (NULL: none), returned
     * in dynamic_metadata with --envoy-response-metadata. */
    const uint8_t *metadata;
    size_t metadata_len;
    int unit;          /* Envoy's RateLimit.Unit, 0 for a custom window */
    /* rate_limit.replaces: names of limits this one switches off when both
     * apply to one call: nreplaces names, each NUL-terminated, one after
     * the other (in the arena). */
    const char *replaces;
    uint32_t nreplaces;
    /* RLS_ENVOY_LIMIT: requests_per_unit (lim.limit; 0 refuses
     * everything) per unit or window (lim.window_s), under an algorithm,
     * checked and completed as rules.h's limits are. */
    rls_limit_t lim;
    uint32_t domain;   /* index of its domain */
    uint32_t parent;   /* index + 1 of its parent node; 0: top level */
    uint32_t index;
} rls_envoy_node_t;

/* Which rate-limit headers a domain's responses carry (lib/rl_headers.h's
 * RL_HDR_* bits; 0: none). */
/* rate_limit_headers: envoy, envoy-ratelimit's own three headers
 * (RateLimit-Limit, RateLimit-Remaining, RateLimit-Reset, as its
 * LIMIT_RESPONSE_HEADERS_ENABLED gives them), a bit beside RL_HDR_*. */
#define RLS_ENVOY_HDR_REF 0x100u

/* How a domain's descriptors are counted (the file's top-level
 * `counting:`, ours): DEFAULT, as --envoy-counting says (every xDS
 * domain); ENVOY, envoy-ratelimit's increment then compare; STOP, the
 * same with its STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT (a call with a
 * descriptor going over counts nothing on those that fit); NATIVE, check
 * then increment (a refusal consumes nothing). */
enum {
    RLS_ENVOY_COUNT_DEFAULT = 0,
    RLS_ENVOY_COUNT_ENVOY = 1,
    RLS_ENVOY_COUNT_STOP = 2,
    RLS_ENVOY_COUNT_NATIVE = 3
};

typedef struct rls_envoy_domain_s {
    const char *name;
    size_t name_len;
    unsigned headers;
    int headers_set; /* the file said rate_limit_headers */
    int counting;    /* RLS_ENVOY_COUNT_*, as the file said */
    /* all_or_nothing: true (ours; files only): a call's descriptors with
     * a limit are decided as one group (rls_decide_group), allowed only
     * when all fit, and then charged in all; refused, charged nowhere. */
    int all_or_nothing;
    /* "envoy:<domain>" with bytes outside [A-Za-z0-9_.:-] as '_': the name
     * its decisions are counted under, and the headers' policy name. */
    char stats_name[RL_RULE_MAX + 1];
} rls_envoy_domain_t;

typedef struct rls_envoy_conf_s rls_envoy_conf_t;

/* The counting of domains whose file does not say (--envoy-counting;
 * RLS_ENVOY_COUNT_ENVOY until set): set before building, since a file's
 * sliding-window limit is an error under envoy-ratelimit's counting. */
void rls_envoy_conf_set_counting(int counting);

/* A domain's counting, RLS_ENVOY_COUNT_ENVOY, _STOP or _NATIVE. */
int rls_envoy_conf_counting(const rls_envoy_domain_t *d);

/* Envoy's RateLimit.Unit values, and the window each stands for
 * (envoy-ratelimit's: a month is 30 days, a year 365, windows aligned on
 * the Unix epoch). */
enum {
    RLS_ENVOY_SECOND = 1,
    RLS_ENVOY_MINUTE = 2,
    RLS_ENVOY_HOUR = 3,
    RLS_ENVOY_DAY = 4,
    RLS_ENVOY_MONTH = 5,
    RLS_ENVOY_YEAR = 6,
    RLS_ENVOY_WEEK = 7
};

/* The seconds of an Envoy unit, 0 for UNKNOWN or a value outside the
 * enum. */
uint32_t rls_envoy_unit_seconds(int unit);

/* The unit whose window is window_s seconds, or 0 (UNKNOWN). */
int rls_envoy_unit_of(uint32_t window_s);

/* Whether value matches a wildcard pattern: each '*' any run of bytes,
 * the rest literal. Linear in the value's length for each of the
 * pattern's pieces (no backtracking). */
int rls_envoy_glob(const char *pat, size_t plen, const char *value,
                   size_t vlen);

/* Builds a configuration from n files, each one domain (conf_yaml.c).
 * With bufs NULL, names are paths, each read in turn; else bufs[i] holds
 * the lens[i] bytes of the file names[i] names in messages (what a control
 * plane's configuration becomes once written out as files). Errors go to
 * *diag as "FILE:LINE: what". Returns 0 with *out set, RL_EINVAL with
 * every error in *diag (*out NULL), or RL_ENOMEM. */
int rls_envoy_conf_build(const char *const *names, const char *const *bufs,
                         const size_t *lens, size_t n, rls_envoy_conf_t **out,
                         rls_diag_t *diag);

/* Same from one buffer holding a file's bytes (name used in messages). */
int rls_envoy_conf_build_buf(const char *name, const char *buf, size_t len,
                             rls_envoy_conf_t **out, rls_diag_t *diag);

/* What a configuration loads but does not do in full (e.g. metadata it
 * does not return), one "FILE:LINE: what" each; also logged at warn when
 * it is built. Valid as long as c. */
const rls_diag_t *rls_envoy_conf_warnings(const rls_envoy_conf_t *c);

rls_envoy_conf_t *rls_envoy_conf_ref(rls_envoy_conf_t *c);
void rls_envoy_conf_unref(rls_envoy_conf_t *c); /* NULL is fine */

size_t rls_envoy_conf_domains(const rls_envoy_conf_t *c);

/* Node i (a node's parent is node parent - 1); i must be below
 * rls_envoy_conf_nodes(c). */
const rls_envoy_node_t *rls_envoy_conf_node_at(const rls_envoy_conf_t *c,
                                               uint32_t i);
size_t rls_envoy_conf_nodes(const rls_envoy_conf_t *c);

/* The domain called name, or NULL. */
const rls_envoy_domain_t *rls_envoy_conf_domain(const rls_envoy_conf_t *c,
                                                const char *name, size_t len);
const rls_envoy_domain_t *rls_envoy_conf_domain_at(const rls_envoy_conf_t *c,
                                                   uint32_t i);

/* One step of the walk: the child of parent (NULL: the domain's top level)
 * for the entry (key, value), the node with that exact value first, else
 * the one with the key alone. NULL when neither exists. */
const rls_envoy_node_t *rls_envoy_conf_step(const rls_envoy_conf_t *c,
                                            const rls_envoy_domain_t *d,
                                            const rls_envoy_node_t *parent,
                                            const char *key, size_t klen,
                                            const char *value, size_t vlen);

#endif
