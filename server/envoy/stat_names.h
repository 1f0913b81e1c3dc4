/* The reference's five per-descriptor stat names, which both its statsd
 * names (envoy/stats.h, envoy/statsd.h) and its Prometheus families
 * (envoy/prom.h) are made of. */
#ifndef RLS_ENVOY_STAT_NAMES_H
#define RLS_ENVOY_STAT_NAMES_H

/* The counters, in the reference's order of its stat names. */
enum {
    RLS_ESTAT_TOTAL_HITS,
    RLS_ESTAT_OVER_LIMIT,
    RLS_ESTAT_NEAR_LIMIT,
    RLS_ESTAT_WITHIN_LIMIT,
    RLS_ESTAT_SHADOW_MODE,
    RLS_ESTATS
};

/* A series name ("<domain>.<key>_<value>...") is at most this many
 * bytes. */
#define RLS_ESTATS_NAME_MAX 512

/* The reference's stat name of counter i ("total_hits"...). */
static inline const char *rls_estats_stat_name(int i)
{
    static const char *const names[RLS_ESTATS] = {
        "total_hits", "over_limit", "near_limit", "within_limit",
        "shadow_mode"};

    return i >= 0 && i < RLS_ESTATS ? names[i] : "";
}

#endif
