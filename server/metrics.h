/* The /metrics page's core (metrics.c): the batcher, the store, the policy.
 * Each front end appends its own part (net/frontend.h). */
#ifndef RLS_METRICS_H
#define RLS_METRICS_H

#include <stdint.h>

#include "core/batch.h"
#include "flags.h"
#include "policy/rules_reload.h"
#include "policy/runtime.h"
#include "policy/switches.h"
#include "rl_buf.h"
#include "store/store.h"

/* The counters a page is rendered from; the server fills it per scrape. */
typedef struct rls_metrics_view_s {
    const rls_flags_t *cfg;
    const rls_batch_stats_t *batch;
    const rls_store_t *store; /* NULL once the store is closed */
    const rls_runtime_t *rt;  /* the policy in force; or NULL */
    const rls_reload_stats_t *reload;
    const rls_switch_poll_stats_t *switches;
    const rls_refusal_stats_t *refusals;
    const rls_local_t *local;               /* --fail-local; or NULL */
    const rls_reload_stats_t *envoy_reload; /* --envoy-config; or NULL */
    const struct rls_estats_s *envoy_stats; /* per descriptor; or NULL */
    const struct rls_statsd_s *statsd;      /* --statsd; or NULL */
    const struct rls_xds_stats_s *xds;      /* --envoy-xds; or NULL */
    const struct rls_grpc_stats_s *grpc;    /* --grpc; or NULL */
    const struct rls_tracer_s *tracer;      /* --trace-otlp; or NULL */
    uint64_t start_unix_ms;
    /* Another loop of --threads: its page leaves out the process's
     * families (process_*), which the first loop's page has. */
    int other_loop;
    int healthy;  /* what /healthz answers now */
    int draining;
} rls_metrics_view_t;

/* Appends the page to out. Returns 0, or RL_EFULL / RL_ENOMEM from the
 * buffer, in which case out holds a truncated page that must not be sent. */
int rls_metrics_render(const rls_metrics_view_t *v, rl_buf_t *out);

#endif
