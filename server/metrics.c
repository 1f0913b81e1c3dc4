/* Prometheus text exposition (format 0.0.4) of the server's counters, for
 * GET /metrics. Everything runs on the loop thread, so the page reads the
 * counters directly, with no locks and no copies. */
#include "metrics.h"

#include <stdio.h>
#include <string.h>

#include "envoy/stats.h"
#include "envoy/grpc.h"
#include "envoy/statsd.h"
#include "trace/tracer.h"
#include "envoy/xds_client.h"
#include "process_metrics.h"
#include "base/prom.h"
#include "rl_error.h"
#include "version.h"

/* Store failures by kind: a batch failed whole counts once, an op Redis
 * refused on its own counts once. */
static int store_errors(rl_buf_t *b, const rls_store_stats_t *ss)
{
    uint64_t sum = 0;
    int k, rc;

    rc = rls_prom_family(
        b, "rl_store_errors_total", "counter",
        "Store failures by kind: a batch failed whole (timeout, "
        "unavailable, or a Redis error refusing the script) counts "
        "once, a key Redis refused (oom, readonly, overflow...) "
        "counts once.");
    for (k = 0; k < RLS_SERR_MAX; k++)
        sum += ss->errors_kind[k];
    for (k = 0; k < RLS_SERR_MAX && rc == RL_OK; k++) {
        uint64_t v = ss->errors_kind[k];

        /* A store that does not classify its failures. */
        if (sum == 0 && k == RLS_SERR_OTHER)
            v = ss->errors;
        rc = rl_buf_printf(b, "rl_store_errors_total{kind=\"%s\"} %llu\n",
                           rls_store_err_name(k), (unsigned long long)v);
    }
    return rc;
}

/* Redis connections dropped because a reply went past its cap: a data
 * node's (peer="node"), and with Sentinel a sentinel's. */
static int over_cap(rl_buf_t *b, const rls_store_stats_t *ss, int sentinel)
{
    static const char name[] = "rl_store_redis_reply_over_cap_total";
    int rc;

    rc = rls_prom_family(b, name, "counter",
                         "Redis connections dropped because one reply went "
                         "past what rl-server buffers for it (16 MiB from a "
                         "data node, 64 KiB from a sentinel).");
    if (rc == RL_OK)
        rc = rls_prom_sample(b, name, "peer", "node", ss->reply_over_cap);
    if (rc == RL_OK && sentinel)
        rc = rls_prom_sample(b, name, "peer", "sentinel",
                             ss->sentinel_reply_over_cap);
    return rc;
}

/* One rule's samples of one family (0: decisions, 1: windows started,
 * 2: windows reached): the text format wants each family's samples
 * together, after its TYPE line. Only series that have counted something
 * are written: a policy may hold thousands of rules, most of them quiet,
 * and a scrape should cost what the traffic is, not what the rules file
 * is. */
static int render_rule(rl_buf_t *out, const rls_rule_stats_t *st, int part)
{
    static const char *const pct[3] = {"50", "80", "100"};
    const char *name = st->name[0] ? st->name : "(inline)";
    const struct {
        const char *result;
        uint64_t v;
    } d[4] = {{"allowed", st->allowed},
              {"refused", st->refused},
              {"shadow_refused", st->shadow_refused},
              {"uncounted", st->uncounted}};
    uint32_t i, k;
    int rc;

    if (part == 3 || part == 4) {
        const struct {
            const char *label;
            uint64_t v;
        } x[4] = {{"settled", st->settled},
                  {"released", st->released},
                  {"renewed", st->renewed},
                  {"refused", st->xop_errors}},
          c[2] = {{"refunded", st->refunded}, {"excess", st->excess}};
        uint32_t n = part == 3 ? 4 : 2;
        for (i = 0; i < n; i++) {
            uint64_t v = part == 3 ? x[i].v : c[i].v;
            if (v > 0 &&
                (rc = rl_buf_printf(out, "%s{rule=\"%s\",%s=\"%s\"} %llu\n",
                                    part == 3 ? "rl_rule_handle_ops_total"
                                              : "rl_rule_settled_cost_total",
                                    name, part == 3 ? "result" : "kind",
                                    part == 3 ? x[i].label : c[i].label,
                                    (unsigned long long)v)) != RL_OK)
                return rc;
        }
        return RL_OK;
    }
    if (part == 0) {
        for (i = 0; i < 4; i++)
            if (d[i].v > 0 &&
                (rc = rl_buf_printf(out,
                                    "rl_rule_decisions_total{rule=\"%s\","
                                    "result=\"%s\"} %llu\n",
                                    name, d[i].result,
                                    (unsigned long long)d[i].v)) != RL_OK)
                return rc;
        return RL_OK;
    }
    for (i = 0; i <= RLS_STATS_WINDOWS; i++) {
        const rls_win_stats_t *w = &st->win[i];
        char wl[16];

        if (w->started == 0 && w->reached[0] == 0 && w->reached[1] == 0 &&
            w->reached[2] == 0)
            continue;
        if (i == RLS_STATS_WINDOWS)
            strcpy(wl, "other");
        else
            snprintf(wl, sizeof(wl), "%u", w->window_s);
        if (part == 1) {
            if ((rc = rl_buf_printf(out,
                                    "rl_rule_windows_started_total{rule=\"%s\","
                                    "window=\"%s\"} %llu\n",
                                    name, wl,
                                    (unsigned long long)w->started)) != RL_OK)
                return rc;
            continue;
        }
        for (k = 0; k < 3; k++)
            if (w->reached[k] > 0 &&
                (rc = rl_buf_printf(
                     out,
                     "rl_rule_windows_reached_total{rule=\"%s\",window=\"%s\","
                     "threshold=\"%s\"} %llu\n",
                     name, wl, pct[k], (unsigned long long)w->reached[k])) !=
                    RL_OK)
                return rc;
    }
    return RL_OK;
}

/* The policy: its version, reloads, and every rule's counters. Labels
 * carry rule names and window lengths, never a caller's key. */
static int render_policy(const rls_metrics_view_t *v, rl_buf_t *out)
{
    const rls_runtime_t *rt = v->rt;
    size_t i;
    int rc, part;

#define TRY(x)                                                                 \
    do {                                                                       \
        if ((rc = (x)) != RL_OK)                                               \
            return rc;                                                         \
    } while (0)
    TRY(rls_prom_gauge(out, "rl_rules", "Rules in force.",
                       rls_policy_count(rt->policy)));
    TRY(rls_prom_gauge(out, "rl_config_generation",
                       "Policies installed since start (1 + good reloads).",
                       rt->generation));
    TRY(rls_prom_gauge(out, "rl_policy_switches_version",
                       "Version of the runtime switches (rl-ctl) applied.",
                       (uint64_t)(rt->sw.version > 0 ? rt->sw.version : 0)));
    if (v->reload != NULL) {
        TRY(rls_prom_counter(out, "rl_config_reloads_total",
                             "Rules files reloaded and swapped in.",
                             v->reload->reloads));
        TRY(rls_prom_counter(
            out, "rl_config_reload_failures_total",
            "Rules files refused on reload (the old rules stayed).",
            v->reload->failures));
        /* Seconds, Prometheus's base unit, exactly: the reloader counts
         * microseconds. */
        TRY(rls_prom_family(out, "rl_config_reload_last_seconds", "gauge",
                            "How long the last good reload took, parse to "
                            "swap."));
        TRY(rl_buf_printf(out, "rl_config_reload_last_seconds %llu.%06llu\n",
                          (unsigned long long)(v->reload->last_us / 1000000),
                          (unsigned long long)(v->reload->last_us % 1000000)));
    }
    if (v->switches != NULL && v->cfg->use_redis) {
        TRY(rls_prom_counter(out, "rl_policy_switch_polls_total",
                             "Polls of the runtime switches in Redis answered.",
                             v->switches->polls));
        TRY(rls_prom_counter(out, "rl_policy_switch_poll_failures_total",
                             "Polls of the runtime switches that got no usable "
                             "reply.",
                             v->switches->failures));
        TRY(rls_prom_counter(
            out, "rl_policy_switch_bad_fields_total",
            "Switch fields skipped because they did not parse.",
            v->switches->bad_fields));
    }
    if (v->store != NULL)
        TRY(rls_prom_counter(
            out, "rl_quota_unparsable_total",
            "Stored quotas (rl-ctl) that did not parse; the rule's "
            "limits applied.",
            v->store->stats.bad_quotas));
    for (part = 0; part < 5; part++) {
        static const char *const fam[5][2] = {
            {"rl_rule_decisions_total",
             "Decisions per rule: allowed, refused, allowed only by "
             "shadow mode (would have been refused), allowed uncounted "
             "(mode off). rule=\"(inline)\" is inline limits. A series "
             "appears once it counts."},
            {"rl_rule_windows_started_total",
             "Caller-windows started (first consumption), per rule and "
             "window length; each counted once across the fleet."},
            {"rl_rule_windows_reached_total",
             "Caller-windows whose consumption reached 50, 80 or 100 % of "
             "the limit; each counted once across the fleet."},
            {"rl_rule_handle_ops_total",
             "Reservations settled, leases released and renewed, and "
             "those refused (settled twice, expired, not held), per "
             "rule."},
            {"rl_rule_settled_cost_total",
             "Cost settlements gave back (refunded) or charged past the "
             "estimates (excess), per rule."}};

        TRY(rls_prom_family(out, fam[part][0], "counter", fam[part][1]));
        for (i = 0; i < rt->stats_cap; i++)
            if (rt->stats[i] != NULL)
                TRY(render_rule(out, rt->stats[i], part));
        TRY(render_rule(out, &rt->inline_stats, part));
        if (rt->nstats == rt->max_stats)
            TRY(render_rule(out, &rt->other_stats, part));
    }
#undef TRY
    return RL_OK;
}

/* envoy-ratelimit's service counters under its exporter's names
 * (default_mapper.yaml: counters, no _total): config_load_success and
 * config_load_error, one per configuration it took or refused, the first
 * included, from files (the one read at start, then reloads) and from
 * xDS; should_rate_limit errors. As the reference's gostats flushes no
 * counter that is 0, each appears once it counts. */
static int ref_service(const rls_metrics_view_t *v, rl_buf_t *out)
{
    static const char help[] = "Metric autogenerated by statsd_exporter.";
    uint64_t ok = 0, bad = 0;
    int rc = RL_OK;

    if (v->envoy_reload != NULL) {
        ok += 1 + v->envoy_reload->reloads;
        bad += v->envoy_reload->failures;
    }
    if (v->xds != NULL) {
        ok += v->xds->accepted;
        bad += v->xds->rejected;
    }
    if (ok != 0)
        rc = rl_buf_printf(out,
                           "# HELP ratelimit_service_config_load_success %s\n"
                           "# TYPE ratelimit_service_config_load_success "
                           "counter\n"
                           "ratelimit_service_config_load_success %llu\n",
                           help, (unsigned long long)ok);
    /* The reference's serviceError (its calls refused with a Go error,
     * UNKNOWN: an empty domain or descriptor list) is this listener's
     * UNKNOWN; its redis_error counts calls failed by Redis, which
     * rl-server answers by its fail mode instead (see
     * rl_store_failed_requests_total). */
    if (rc == RL_OK && v->grpc != NULL && v->grpc->calls[RLS_GRPC_UNKNOWN] != 0)
        rc = rl_buf_printf(
            out,
            "# HELP ratelimit_service_should_rate_limit_error %s\n"
            "# TYPE ratelimit_service_should_rate_limit_error counter\n"
            "ratelimit_service_should_rate_limit_error{err_type="
            "\"service_error\"} %llu\n",
            help, (unsigned long long)v->grpc->calls[RLS_GRPC_UNKNOWN]);
    if (rc == RL_OK && bad != 0)
        rc = rl_buf_printf(out,
                           "# HELP ratelimit_service_config_load_error %s\n"
                           "# TYPE ratelimit_service_config_load_error "
                           "counter\n"
                           "ratelimit_service_config_load_error %llu\n",
                           help, (unsigned long long)bad);
    return rc;
}

int rls_metrics_render(const rls_metrics_view_t *v, rl_buf_t *out)
{
    const rls_batch_stats_t *bs = v->batch;
    const rls_store_t *st = v->store;
    const rls_store_stats_t *ss = st ? &st->stats : NULL;
    int rc;

#define TRY(x)                                                                 \
    do {                                                                       \
        if ((rc = (x)) != RL_OK)                                               \
            return rc;                                                         \
    } while (0)

    TRY(rls_prom_family(
        out, "rl_build_info", "gauge",
        "Build and configuration of this rl-server; always 1."));
    TRY(rl_buf_printf(
        out,
        "rl_build_info{version=\"%s\",store=\"%s\",fail_mode=\"%s\"} "
        "1\n",
        RLS_VERSION, v->cfg->use_redis ? "redis" : "memory",
        rls_fail_mode_name(v->cfg->fail_open)));
    TRY(rls_prom_gauge(out, "rl_start_time_seconds",
                       "When this rl-server started, seconds since the epoch.",
                       v->start_unix_ms / 1000));
    TRY(rls_prom_gauge(out, "rl_healthy",
                       "1 while /healthz answers 200 (taking work, store up)",
                       (uint64_t)(v->healthy != 0)));
    TRY(rls_prom_gauge(out, "rl_draining",
                       "1 between SIGTERM and the end of --drain-ms",
                       (uint64_t)(v->draining != 0)));
    TRY(rls_prom_gauge(out, "rl_handle_secret_file",
                       "1 when handles are signed with --handle-secret-file; "
                       "0: with this instance's own secret",
                       (uint64_t)(v->cfg->handle_secret_file != NULL)));

    TRY(rls_prom_counter(
        out, "rl_failed_open_total",
        "Requests answered OK because the store could not answer "
        "(--fail-open).",
        bs->failed_open));
    if (v->local != NULL) {
        const rls_local_stats_t *ls = &v->local->stats;
        TRY(rls_prom_counter(
            out, "rl_decided_local_total",
            "Requests decided by this instance alone, on its share "
            "of the limit, because the store could not answer "
            "(--fail-local).",
            bs->decided_local));
        TRY(rls_prom_gauge(out, "rl_fleet_instances_seen",
                           "Live instances last seen in <prefix>instances: "
                           "--fail-local's share is the limit over this.",
                           v->local->live));
        TRY(rls_prom_gauge(
            out, "rl_fail_local_deciding",
            "1 while batches are decided on this instance's share: the "
            "store is away, or back with this instance's charges not all "
            "in, or settling (the fleet's charges coming in).",
            (uint64_t)rls_local_holds(v->local,
                                      st->v->now_ms((rls_store_t *)st))));
        TRY(rls_prom_gauge(
            out, "rl_fail_local_charges_pending",
            "Counters admitted locally that the store has not been "
            "told of yet.",
            v->local->n + v->local->sending));
        TRY(rls_prom_family(
            out, "rl_fail_local_charges_total", "counter",
            "Local admissions per counter: charged (added to the "
            "store), ended (their window ended first), dropped "
            "(over the cap of pending charges), rejected (the store "
            "refused that one charge)."));
        TRY(rl_buf_printf(
            out,
            "rl_fail_local_charges_total{result=\"charged\"} %llu\n"
            "rl_fail_local_charges_total{result=\"ended\"} %llu\n"
            "rl_fail_local_charges_total{result=\"dropped\"} %llu\n"
            "rl_fail_local_charges_total{result=\"rejected\"} %llu\n",
            (unsigned long long)ls->charged, (unsigned long long)ls->ended,
            (unsigned long long)ls->dropped, (unsigned long long)ls->rejected));
    }
    TRY(rls_prom_counter(
        out, "rl_store_failed_requests_total",
        "Requests whose store operation failed (either fail mode).",
        bs->store_errors));
    TRY(rls_prom_counter(
        out, "rl_requests_coalesced_total",
        "Requests that shared a store key with an earlier one of "
        "their batch.",
        bs->coalesced));
    TRY(rls_prom_counter(out, "rl_requests_batched_total",
                         "Valid requests handed to the store.", bs->requests));
    TRY(rls_prom_histogram(out, "rl_batch_size", "Requests per store batch.",
                           &bs->size, 0));
    TRY(rls_prom_counter(
        out, "rl_batch_holds_total",
        "Loop iterations that held a batch back to let it grow "
        "(--batch-hold-us).",
        bs->held));
    if (v->refusals != NULL) {
        TRY(rls_prom_counter(
            out, "rl_refusals_local_total",
            "Requests refused without a store call: the store had "
            "shown their windows could not fit them.",
            v->refusals->hits));
        TRY(rls_prom_gauge(
            out, "rl_refusal_cache_entries",
            "Entries of the refusal cache (dead ones until reused).",
            v->refusals->entries));
        TRY(rls_prom_counter(
            out, "rl_refusal_cache_full_total",
            "Refusal cache entries not made: the table was full "
            "(--refusal-cache).",
            v->refusals->full));
    }
    if (v->envoy_reload != NULL) {
        TRY(rls_prom_counter(
            out, "rl_envoy_config_reloads_total",
            "--envoy-config reloads that put a new configuration "
            "in force.",
            v->envoy_reload->reloads));
        TRY(rls_prom_counter(
            out, "rl_envoy_config_reload_failures_total",
            "--envoy-config reloads refused (the old configuration "
            "stayed).",
            v->envoy_reload->failures));
    }
    TRY(rls_estats_metrics(v->envoy_stats, out));
    TRY(ref_service(v, out));
    if (!v->other_loop)
        TRY(rls_process_metrics(out));
    TRY(rls_statsd_metrics(v->statsd, out));
    TRY(rls_tracer_metrics(v->tracer, out));

    if (ss != NULL) {
        TRY(rls_prom_gauge(out, "rl_store_up",
                           "1 while the store is believed up.",
                           (uint64_t)(st->v->up((rls_store_t *)st) != 0)));
        TRY(rls_prom_counter(out, "rl_store_batches_total",
                             "Batches submitted to the store.", ss->batches));
        TRY(rls_prom_counter(out, "rl_store_ops_total",
                             "Store operations (distinct keys) submitted.",
                             ss->ops));
        TRY(store_errors(out, ss));
        TRY(rls_prom_counter(out, "rl_store_timeouts_total",
                             "Store batches that failed by --redis-timeout-ms.",
                             ss->timeouts));
        TRY(rls_prom_counter(out, "rl_store_reconnects_total",
                             "Successful reconnections to the store after the "
                             "first connection.",
                             ss->reconnects));
        if (!v->cfg->use_redis) {
            TRY(rls_prom_gauge(out, "rl_memory_store_bytes",
                               "Bytes the memory store holds for its counters.",
                               ss->mem_bytes));
            TRY(rls_prom_gauge(out, "rl_memory_store_max_bytes",
                               "Cap on rl_memory_store_bytes (--memory-max).",
                               ss->mem_max));
            TRY(rls_prom_gauge(out, "rl_memory_store_full",
                               "1 while the memory store refuses new counters.",
                               (uint64_t)(ss->mem_full != 0)));
            TRY(rls_prom_counter(
                out, "rl_memory_store_full_total",
                "New counters refused because the memory store was "
                "full (answered by the fail mode).",
                ss->mem_refused));
        }
        if (v->cfg->use_redis && !v->cfg->redis_cluster)
            TRY(rls_prom_gauge(
                out, "rl_store_redis_module",
                "1 while Redis batches go to the ratelimit module "
                "(RL.BATCH), 0 while they go to the Lua script.",
                (uint64_t)(ss->redis_module != 0)));
        if (v->cfg->use_redis)
            TRY(rls_prom_counter(
                out, "rl_store_redis_restarts_total",
                "Redis restarts noticed on reconnection (its run_id "
                "changed): the current windows' counts were lost "
                "unless Redis persisted them.",
                ss->restarts));
        if (v->cfg->use_redis)
            TRY(over_cap(out, ss, v->cfg->redis_sentinels > 0));
        if (v->cfg->redis_sentinels > 0)
            TRY(rls_prom_counter(
                out, "rl_store_master_switches_total",
                "Times Redis Sentinel moved the master (a failover "
                "or a switch), as rl-server heard of it.",
                ss->master_switches));
        /* The memory store has no round trip to measure. */
        if (v->cfg->use_redis)
            TRY(rls_prom_histogram(out, "rl_redis_rtt_seconds",
                                   "Round trip of answered Redis batches.",
                                   &ss->rtt_us, 1));
        if (v->store->v->metrics != NULL)
            TRY(v->store->v->metrics(v->store, out));
    }
    if (v->rt != NULL)
        TRY(render_policy(v, out));
#undef TRY
    return RL_OK;
}
