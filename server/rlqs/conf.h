/* The RLQS bucket configuration (conf.c): which of Envoy's bucket ids a
 * rule takes, its limit, how it is divided, and what is assigned when
 * rl-server cannot decide. The model knows no YAML; conf.c's reader
 * builds it from the --rlqs-config file (the format: docs/rlqs.md). */
#ifndef RLS_RLQS_CONF_H
#define RLS_RLQS_CONF_H

#include <stddef.h>
#include <stdint.h>

#define RLS_RLQS_RULES_MAX 256
#define RLS_RLQS_MATCH_MAX 8   /* keys a rule matches on */
#define RLS_RLQS_NAME_MAX 64   /* a rule's name, a bucket-id key */
#define RLS_RLQS_VALUE_MAX 256 /* a bucket-id value */
#define RLS_RLQS_FILE_MAX (1u << 20)

/* Blanket rules, Envoy's numbers (RateLimitStrategy.BlanketRule). */
#define RLS_RLQS_ALLOW_ALL 0
#define RLS_RLQS_DENY_ALL 1

typedef struct rls_rlqs_rule_s {
    char name[RLS_RLQS_NAME_MAX + 1];
    uint32_t nmatch;
    /* The bucket id must hold each key with its value; "*" takes any
     * value, and each value its own budget. */
    char keys[RLS_RLQS_MATCH_MAX][RLS_RLQS_NAME_MAX + 1];
    char vals[RLS_RLQS_MATCH_MAX][RLS_RLQS_VALUE_MAX + 1];
    uint64_t limit;     /* requests per unit, fleet-wide, >= 1 */
    uint32_t unit_s;    /* 1, 60, 3600 or 86400 */
    uint64_t floor;     /* each participant's least share (default 1) */
    double burst;       /* bucket size: share * burst (default 0.1) */
    uint32_t ttl_s;     /* assignments' time to live (default 10) */
    int fallback;       /* RLS_RLQS_*: assigned when the store cannot
                           answer and the last assignment ran out */
    uint32_t abandon_s; /* a bucket reported with no requests this long is
                           abandoned (default 60; 0: never) */
    uint32_t stale_ms;  /* a participant silent this long leaves the
                           fleet's division (default 5000) */
} rls_rlqs_rule_t;

typedef struct rls_rlqs_conf_s {
    char domain[RLS_RLQS_NAME_MAX + 1]; /* "": any domain */
    int unmatched;            /* RLS_RLQS_*: for buckets no rule takes */
    uint32_t unmatched_ttl_s; /* its time to live (default 60) */
    uint32_t min_report_ms;   /* one participant's store calls at most this
                                 often; reports between are added up
                                 (default 100) */
    uint32_t nrules;
    rls_rlqs_rule_t *rules;
} rls_rlqs_conf_t;

/* Reads a configuration from buf[0, len). Returns 0 with *out set (free
 * it with rls_rlqs_conf_free), RL_EINVAL with err (errlen bytes) saying
 * where and why, or RL_ENOMEM. */
int rls_rlqs_conf_parse(const char *buf, size_t len, rls_rlqs_conf_t **out,
                        char *err, size_t errlen);

/* rls_rlqs_conf_parse of a file (RLS_RLQS_FILE_MAX bytes at most). */
int rls_rlqs_conf_load(const char *path, rls_rlqs_conf_t **out, char *err,
                       size_t errlen);

void rls_rlqs_conf_free(rls_rlqs_conf_t *c);

/* The first rule whose every key is in the bucket id (n pairs keys[i],
 * vals[i]) with its value, or NULL. */
const rls_rlqs_rule_t *rls_rlqs_conf_match(const rls_rlqs_conf_t *c,
                                           const char *const *keys,
                                           const char *const *vals, size_t n);

#endif
