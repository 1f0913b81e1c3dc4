/* envoy-ratelimit's per-descriptor statistics (envoy_stats.c), so that the
 * dashboards and alerts teams built on the reference keep working.
 *
 * The reference (github.com/envoyproxy/ratelimit, src/stats/manager_impl.go,
 * src/config/config_impl.go, src/limiter/base_limiter.go) keeps, for each
 * descriptor of its configuration that has a rate_limit, five counters
 * named
 *
 *   ratelimit.service.rate_limit.<domain>.<key>[_<value>][.<key>...].<stat>
 *
 * with <stat> one of total_hits, over_limit, near_limit, within_limit,
 * shadow_mode, incremented by a request's hits (its cost), not by one. The
 * series here are those names without the "ratelimit.service.rate_limit."
 * scope and without the stat ("<domain>.<key>_<value>..."): one series per
 * name, so that a series survives a reload that keeps its descriptor (the
 * reference keeps its counters by name too), and a reload that drops it
 * leaves its totals (counters never go back).
 *
 * Per-value series (a request-supplied limit, named after the request's
 * entries as the reference names it; detailed_metric and value_to_metric
 * once the configuration carries them: rls_estats_slot_as names them
 * already) are created from request values: at
 * most max_values of them exist, and every count that would have needed
 * one more is counted in values_dropped instead.
 *
 * Counting is on the loop thread, on every descriptor: a configuration's
 * node resolves its series once (a hash of its name, the first time it is
 * counted under that configuration), then by its index. Only per-value
 * series hash per request. Nothing here is thread-safe; the loop owns it. */
#ifndef RLS_NET_ENVOY_STATS_H
#define RLS_NET_ENVOY_STATS_H

#include <stddef.h>
#include <stdint.h>

#include "envoy/conf.h"
#include "envoy/prom.h"
#include "envoy/stat_names.h"
#include "base/prom_hist.h"
#include "rl_buf.h"
#include "rl_hash.h"
#include "rl_msg.h"

/* The counters (RLS_ESTAT_*) and their names: envoy/stat_names.h. */

/* A series name is at most RLS_ESTATS_NAME_MAX bytes (envoy/stat_names.h);
 * a longer one is not created (counted in values_dropped when per-value,
 * in names_dropped else). */

/* The reference's NEAR_LIMIT_RATIO default. */
#define RLS_ESTATS_NEAR_RATIO 0.8

typedef struct rls_estats_series_s {
    char *name; /* "<domain>.<key>_<value>...", NUL-terminated, owned */
    uint32_t name_len;
    uint32_t dom_len;   /* the domain's part of name */
    uint32_t per_value; /* 1: created from request values (capped) */
    /* How envoy-ratelimit's Prometheus exporter shows it (envoy_prom.h):
     * its label set (a group's index + 1; 0: not shown) and the family
     * each of its counters is added to (an RLS_ESTAT_*). */
    uint32_t group;
    uint8_t fam[RLS_ESTATS];
    uint64_t c[RLS_ESTATS];
    uint64_t sent[RLS_ESTATS]; /* what the statsd exporter has sent */
} rls_estats_series_t;

/* The node-to-series cache of one configuration. */
typedef struct rls_estats_cache_s {
    rls_envoy_conf_t *conf; /* a reference held; NULL: empty */
    uint32_t *slot;         /* by node index: series + 1, 0: unresolved */
    size_t n;
} rls_estats_cache_t;

typedef struct rls_estats_s {
    rls_estats_series_t *s; /* by series index; never shrinks */
    size_t n, cap;
    uint32_t *table;   /* open addressing by name: series index + 1 */
    size_t table_size; /* a power of two, at least 2 * n */
    rl_hash_key_t hk;
    size_t max_values;       /* per-value series allowed (0: none) */
    size_t values;           /* per-value series created */
    uint64_t values_dropped; /* hits not counted for want of a series */
    uint64_t names_dropped;  /* hits of a node whose name is too long or
                                for which memory ran out */
    double near_ratio;       /* near_limit from floor(limit * ratio) */
    /* The current configuration's cache and the one before it, so that
     * calls still finishing under the old one after a reload do not undo
     * the new one's. */
    rls_estats_cache_t cache[2];
    size_t statsd_next; /* the series the exporter resumes at */
    /* The label sets of the reference's Prometheus names (envoy/prom.h),
     * which each series' group indexes. */
    rls_eprom_t prom;
    /* ShouldRateLimit calls answered, by response time (the reference's
     * ratelimit_server.ShouldRateLimit.response_time: whole milliseconds,
     * held here as microseconds), for envoy_prom.c. */
    rls_hist_t calls;
} rls_estats_t;

/* Empty table, max_values per-value series at most. Returns 0 (nothing is
 * allocated before the first count). */
int rls_estats_init(rls_estats_t *t, size_t max_values);

/* Frees everything, and drops the configurations' references. */
void rls_estats_free(rls_estats_t *t);

/* rls_estats_slot's answers for a descriptor not counted in a series:
 * the per-value cap was reached, or the name is too long (or memory ran
 * out). rls_estats_count adds the hits to values_dropped or names_dropped
 * for them. */
#define RLS_ESTATS_DROP_VALUE UINT32_MAX
#define RLS_ESTATS_DROP_NAME (UINT32_MAX - 1)

/* The series a descriptor is counted under: node x of conf (the node the
 * walk ended on, with a limit, in domain dom), or, with from_request, the
 * request's own limit, named after its n entries (keys, values), as the
 * reference names it. Returns the series index + 1, 0 for nothing to
 * count (x NULL without from_request), or an RLS_ESTATS_DROP_*. The
 * request's strings are copied when a series is created. */
uint32_t rls_estats_slot(rls_estats_t *t, rls_envoy_conf_t *conf,
                         const rls_envoy_domain_t *dom,
                         const rls_envoy_node_t *x, int from_request,
                         const char *const *keys, const size_t *klens,
                         const char *const *values, const size_t *vlens,
                         size_t n);

/* rls_estats_slot for node x with detailed_metric (on the node with the
 * limit) and value_to_metric (bit i: on the node matched by entry i) as
 * given rather than read from the configuration, which does not carry
 * them yet (envoy/conf.h): the names the reference gives them,
 * under the per-value cap. Exposed for tests. */
uint32_t rls_estats_slot_as(rls_estats_t *t, rls_envoy_conf_t *conf,
                            const rls_envoy_domain_t *dom,
                            const rls_envoy_node_t *x, const char *const *keys,
                            const size_t *klens, const char *const *values,
                            const size_t *vlens, size_t n, int detailed,
                            uint64_t v2m);

/* Counts one decided descriptor of `hits` (its cost) into slot (from
 * rls_estats_slot) as the reference's base_limiter.go does:
 * total_hits += hits; for an OK, within_limit += hits and near_limit +=
 * the hits past floor(limit * near_ratio); for a refusal (a shadow one
 * too), over_limit += the hits past the limit and near_limit += those
 * between the near threshold and the limit; for a shadow refusal,
 * shadow_mode += the hits past the limit. A store error counts total_hits
 * only (the reference counts nothing else when its cache fails). The
 * counts before and after are inferred from r's limit and remaining; a
 * refusal consumes nothing here, so "after" is what the reference's
 * counter would have reached. */
void rls_estats_count(rls_estats_t *t, uint32_t slot, uint64_t hits,
                      const rl_result_t *r);

/* Writes the reference's stat name of a node into out (at most
 * RLS_ESTATS_NAME_MAX bytes, NUL-terminated): "<domain>.<k>_<v>..." from
 * the node chain, a wildcard value written with its '*'. Sanitized as the
 * reference sanitizes (':' and '|' as '_', dots of an IPv4 address as
 * '_'), and, so that a name never breaks a statsd line or a label,
 * bytes below 0x21 or above 0x7e as '_'. Returns the length, or 0 when it
 * does not fit. Exposed for tests. */
size_t rls_estats_node_name(char *out, const rls_envoy_domain_t *dom,
                            const rls_envoy_node_t *x);

/* A ShouldRateLimit call answered ms milliseconds after its request came
 * (the gRPC listener, for the reference's total_requests and
 * response_time). t NULL: nothing. */
void rls_estats_call(rls_estats_t *t, uint64_t ms);

struct rls_statsd_s;

/* The statsd exporter's collector (envoy/statsd.h; arg: the table): every
 * counter that moved since it was last sent, as
 * "ratelimit.service.rate_limit.<name>.<stat>:<delta>|c", the reference's
 * statsd names. Resumes where the exporter's bound stopped it. */
void rls_estats_statsd(void *arg, struct rls_statsd_s *sd);

/* Appends the /metrics families: rl_envoy_rate_limit_<stat>_total{domain,
 * key} for every series that counted something, the cap's counters, and
 * the reference's own Prometheus names (envoy_prom.h). Returns 0 or the
 * buffer's error. t NULL: nothing. */
int rls_estats_metrics(const rls_estats_t *t, rl_buf_t *out);

#endif
