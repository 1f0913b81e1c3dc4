/* Prometheus text exposition (format 0.0.4) of the server's counters, for
 * GET /metrics. Everything runs on the loop thread, so the page reads the
 * counters directly, with no locks and no copies. */
#include "metrics.h"

#include <stdio.h>
#include <string.h>

#include "net/check.h"
#include "rl_error.h"
#include "version.h"

/* Microseconds as decimal seconds, exactly: 50 -> "0.00005", 2500000 ->
 * "2.5". Prometheus wants base units, and printing through a double would
 * turn bucket bounds into "5e-05". */
static const char *fmt_us(char *s, size_t n, uint64_t us)
{
    size_t len;

    snprintf(s, n, "%llu.%06llu", (unsigned long long)(us / 1000000),
             (unsigned long long)(us % 1000000));
    len = strlen(s);
    while (s[len - 1] == '0')
        s[--len] = '\0';
    if (s[len - 1] == '.')
        s[--len] = '\0';
    return s;
}

static int family(rl_buf_t *b, const char *name, const char *type,
                  const char *help)
{
    return rl_buf_printf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* A family of one sample, without labels. */
static int single(rl_buf_t *b, const char *name, const char *type,
                  const char *help, uint64_t v)
{
    int rc = family(b, name, type, help);

    return rc != RL_OK ? rc : rl_buf_printf(b, "%s %llu\n", name, (unsigned long long)v);
}

static int counter(rl_buf_t *b, const char *name, const char *help, uint64_t v)
{
    return single(b, name, "counter", help, v);
}

static int gauge(rl_buf_t *b, const char *name, const char *help, uint64_t v)
{
    return single(b, name, "gauge", help, v);
}

/* A counter family with one label: the sample name{label="names[i]"} v[i]
 * for each i from `from` up to, not including, `to`. */
static int labelled(rl_buf_t *b, const char *name, const char *help,
                    const char *label, const char *const *names,
                    const uint64_t *v, size_t from, size_t to)
{
    int rc = family(b, name, "counter", help);
    size_t i;

    for (i = from; i < to && rc == RL_OK; i++)
        rc = rl_buf_printf(b, "%s{%s=\"%s\"} %llu\n", name, label, names[i],
                           (unsigned long long)v[i]);
    return rc;
}

/* A histogram; with `us` the observations are microseconds and are shown
 * in seconds. Buckets are cumulative, and +Inf equals _count. */
static int histogram(rl_buf_t *b, const char *name, const char *help,
                     const rls_hist_t *h, int us)
{
    char le[32], sum[32];
    uint64_t cum = 0;
    size_t i;
    int rc;

    if ((rc = family(b, name, "histogram", help)) != RL_OK)
        return rc;
    for (i = 0; i < h->n && h->bounds != NULL; i++) {
        cum += h->counts[i];
        if (us)
            fmt_us(le, sizeof(le), h->bounds[i]);
        else
            snprintf(le, sizeof(le), "%llu", (unsigned long long)h->bounds[i]);
        if ((rc = rl_buf_printf(b, "%s_bucket{le=\"%s\"} %llu\n", name, le,
                       (unsigned long long)cum)) != RL_OK)
            return rc;
    }
    cum += h->counts[i < RLS_HIST_MAX ? i : RLS_HIST_MAX];
    if (us)
        fmt_us(sum, sizeof(sum), h->sum);
    else
        snprintf(sum, sizeof(sum), "%llu", (unsigned long long)h->sum);
    return rl_buf_printf(b, "%s_bucket{le=\"+Inf\"} %llu\n%s_sum %s\n%s_count %llu\n",
                name, (unsigned long long)cum, name, sum, name,
                (unsigned long long)cum);
}

/* Store failures by kind: a batch failed whole counts once, an op Redis
 * refused on its own counts once. */
static int store_errors(rl_buf_t *b, const rls_store_stats_t *ss)
{
    uint64_t sum = 0;
    int k, rc;

    rc = family(b, "rl_store_errors_total", "counter",
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
            if ((rc = rl_buf_printf(
                     out,
                     "rl_rule_windows_started_total{rule=\"%s\","
                     "window=\"%s\"} %llu\n",
                     name, wl, (unsigned long long)w->started)) != RL_OK)
                return rc;
            continue;
        }
        for (k = 0; k < 3; k++)
            if (w->reached[k] > 0 &&
                (rc = rl_buf_printf(
                     out,
                     "rl_rule_windows_reached_total{rule=\"%s\",window=\"%s\","
                     "threshold=\"%s\"} %llu\n",
                     name, wl, pct[k],
                     (unsigned long long)w->reached[k])) != RL_OK)
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
    TRY(gauge(out, "rl_rules", "Rules in force.",
              rls_policy_count(rt->policy)));
    TRY(gauge(out, "rl_config_generation",
              "Policies installed since start (1 + good reloads).",
              rt->generation));
    TRY(gauge(out, "rl_policy_switches_version",
              "Version of the runtime switches (rl-ctl) applied.",
              (uint64_t)(rt->sw.version > 0 ? rt->sw.version : 0)));
    if (v->reload != NULL) {
        TRY(counter(out, "rl_config_reloads_total",
                    "Rules files reloaded and swapped in.",
                    v->reload->reloads));
        TRY(counter(out, "rl_config_reload_failures_total",
                    "Rules files refused on reload (the old rules stayed).",
                    v->reload->failures));
        TRY(gauge(out, "rl_config_reload_last_microseconds",
                  "How long the last good reload took, parse to swap.",
                  v->reload->last_us));
    }
    if (v->switches != NULL && v->cfg->use_redis) {
        TRY(counter(out, "rl_policy_switch_polls_total",
                    "Polls of the runtime switches in Redis answered.",
                    v->switches->polls));
        TRY(counter(out, "rl_policy_switch_poll_failures_total",
                    "Polls of the runtime switches that got no usable "
                    "reply.",
                    v->switches->failures));
        TRY(counter(out, "rl_policy_switch_bad_fields_total",
                    "Switch fields skipped because they did not parse.",
                    v->switches->bad_fields));
    }
    if (v->store != NULL)
        TRY(counter(out, "rl_quota_unparsable_total",
                    "Stored quotas (rl-ctl) that did not parse; the rule's "
                    "limits applied.",
                    v->store->stats.bad_quotas));
    for (part = 0; part < 3; part++) {
        static const char *const fam[3][2] = {
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
             "the limit; each counted once across the fleet."}};

        TRY(family(out, fam[part][0], "counter", fam[part][1]));
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

/* The --http check endpoint: responses by status, the 400s by reason,
 * and its connections. */
static int render_check(const rls_http_stats_t *h, const uint64_t *rejected,
                        rl_buf_t *out)
{
    const char *name = "rl_check_requests_total";
    unsigned i;
    int rc;

    rc = family(out, name, "counter",
                "--http responses by status: 200 allowed, 429 or 403 "
                "refused, 400/404/405/414/431 bad requests, 503 store "
                "failed with --fail-closed; code=\"other\" for the rest.");
    for (i = 0; i < RLS_HTTP_NSTATUS && rc == RL_OK; i++) {
        int st = rls_http_slot_status(i);
        if (st != 0)
            rc = rl_buf_printf(out, "%s{code=\"%d\"} %llu\n", name, st,
                               (unsigned long long)h->status[i]);
        else
            rc = rl_buf_printf(out, "%s{code=\"other\"} %llu\n", name,
                               (unsigned long long)h->status[i]);
    }
    if (rc == RL_OK)
        rc = family(out, "rl_check_rejected_total", "counter",
                    "--http checks answered 400 before a decision, by "
                    "reason: bad_query, no_rule, no_key (no key= and no "
                    "usable key header), bad_key, unknown_rule. Most are "
                    "the proxy's configuration; the log has the detail.");
    for (i = 0; i < RLS_CHECK_REASONS && rc == RL_OK; i++)
        rc = rl_buf_printf(out, "rl_check_rejected_total{reason=\"%s\"} "
                                "%llu\n",
                           rls_check_reason_name((int)i),
                           (unsigned long long)rejected[i]);
    if (rc == RL_OK)
        rc = counter(out, "rl_check_connections_accepted_total",
                     "--http connections accepted.", h->accepted);
    if (rc == RL_OK)
        rc = counter(out, "rl_check_connections_evicted_total",
                     "--http connections closed to make room for a new one "
                     "while the listener was full.",
                     h->evicted);
    if (rc == RL_OK)
        rc = counter(out, "rl_check_connections_refused_total",
                     "--http connections answered 503: the listener was "
                     "full and none could give way.",
                     h->refused);
    if (rc == RL_OK)
        rc = counter(out, "rl_check_connections_timed_out_total",
                     "--http connections closed at the header deadline or "
                     "the idle limit.",
                     h->timed_out);
    return rc;
}

int rls_metrics_render(const rls_metrics_view_t *v, rl_buf_t *out)
{
    static const char *const codes[] = {"unknown", "ok", "over_limit", "error"};
    static const char *const reasons[RLS_REJECT_MAX] = {
        "flag", "size", "decode", "invalid", "rule", "id0", "inline"};
    static const char *const closes[RLS_CLOSE_MAX] = {
        "idle", "frame_timeout", "partial_memory"};
    const rls_batch_stats_t *bs = v->batch;
    const rls_conn_stats_t *cs = v->conns;
    const rls_store_t *st = v->store;
    const rls_store_stats_t *ss = st ? &st->stats : NULL;
    int rc;

#define TRY(x)                                                                 \
    do {                                                                       \
        if ((rc = (x)) != RL_OK)                                               \
            return rc;                                                         \
    } while (0)

    TRY(family(out, "rl_build_info", "gauge",
               "Build and configuration of this rl-server; always 1."));
    TRY(rl_buf_printf(out,
             "rl_build_info{version=\"%s\",store=\"%s\",fail_mode=\"%s\"} "
             "1\n",
             RLS_VERSION, v->cfg->use_redis ? "redis" : "memory",
             v->cfg->fail_open ? "open" : "closed"));
    TRY(gauge(out, "rl_start_time_seconds",
              "When this rl-server started, seconds since the epoch.",
              v->start_unix_ms / 1000));
    TRY(gauge(out, "rl_healthy",
              "1 while /healthz answers 200 (taking work, store up)",
              (uint64_t)(v->healthy != 0)));
    TRY(gauge(out, "rl_draining", "1 between SIGTERM and the end of --drain-ms",
              (uint64_t)(v->draining != 0)));

    TRY(labelled(out, "rl_decisions_total",
                 "Responses sent, by code (error includes refused requests).",
                 "code", codes, cs->decisions, 1, 4));
    TRY(counter(out, "rl_failed_open_total",
                "Requests answered OK because the store could not answer "
                "(--fail-open).",
                bs->failed_open));
    TRY(counter(out, "rl_store_failed_requests_total",
                "Requests whose store operation failed (either fail mode).",
                bs->store_errors));
    TRY(labelled(out, "rl_frames_rejected_total",
                 "Frames or requests refused before reaching the store, by "
                 "reason.",
                 "reason", reasons, cs->rejected, 0, RLS_REJECT_MAX));
    TRY(counter(out, "rl_requests_coalesced_total",
                "Requests that shared a store key with an earlier one of "
                "their batch.",
                bs->coalesced));
    TRY(counter(out, "rl_requests_batched_total",
                "Valid requests handed to the store.", bs->requests));
    TRY(histogram(out, "rl_batch_size", "Requests per store batch.", &bs->size,
                  0));
    TRY(counter(out, "rl_batch_holds_total",
                "Loop iterations that held a batch back to let it grow "
                "(--batch-hold-us).",
                bs->held));
    if (v->refusals != NULL) {
        TRY(counter(out, "rl_refusals_local_total",
                    "Requests refused without a store call: the store had "
                    "shown their windows could not fit them.",
                    v->refusals->hits));
        TRY(gauge(out, "rl_refusal_cache_entries",
                  "Entries of the refusal cache (dead ones until reused).",
                  v->refusals->entries));
        TRY(counter(out, "rl_refusal_cache_full_total",
                    "Refusal cache entries not made: the table was full "
                    "(--refusal-cache).",
                    v->refusals->full));
    }
    TRY(gauge(out, "rl_requests_inflight",
              "Requests read and not yet answered.", cs->inflight));
    if (v->grpc != NULL)
        TRY(rls_grpc_metrics(v->grpc, out));
    if (v->envoy_reload != NULL) {
        TRY(counter(out, "rl_envoy_config_reloads_total",
                    "--envoy-config reloads that put a new configuration "
                    "in force.",
                    v->envoy_reload->reloads));
        TRY(counter(out, "rl_envoy_config_reload_failures_total",
                    "--envoy-config reloads refused (the old configuration "
                    "stayed).",
                    v->envoy_reload->failures));
    }

    TRY(gauge(out, "rl_connections_open", "Client connections open.",
              cs->conns_open));
    TRY(counter(out, "rl_connections_accepted_total",
                "Client connections accepted.", cs->conns_accepted));
    TRY(counter(out, "rl_connections_refused_total",
                "Client connections refused at --max-connections or while "
                "stopping.",
                cs->conns_refused));
    TRY(counter(out, "rl_connections_overflow_total",
                "Client connections closed for not reading their responses "
                "(--max-output).",
                cs->conns_overflow));
    TRY(labelled(out, "rl_connections_closed_total",
                 "Client connections the server closed for sending nothing "
                 "useful: no whole request for --idle-timeout (idle), a frame "
                 "unfinished after --frame-timeout-ms (frame_timeout), among "
                 "the largest input buffers over --max-partial-bytes "
                 "(partial_memory).",
                 "reason", closes, cs->closed, 0, RLS_CLOSE_MAX));
    TRY(gauge(out, "rl_connections_input_bytes",
              "Memory held by client connections' input buffers (partial "
              "frames); capped by --max-partial-bytes.",
              cs->input_bytes));

    if (ss != NULL) {
        TRY(gauge(out, "rl_store_up", "1 while the store is believed up.",
                  (uint64_t)(st->v->up((rls_store_t *)st) != 0)));
        TRY(counter(out, "rl_store_batches_total",
                    "Batches submitted to the store.", ss->batches));
        TRY(counter(out, "rl_store_ops_total",
                    "Store operations (distinct keys) submitted.", ss->ops));
        TRY(store_errors(out, ss));
        TRY(counter(out, "rl_store_timeouts_total",
                    "Store batches that failed by --redis-timeout-ms.",
                    ss->timeouts));
        TRY(counter(out, "rl_store_reconnects_total",
                    "Successful reconnections to the store after the "
                    "first connection.",
                    ss->reconnects));
        if (!v->cfg->use_redis) {
            TRY(gauge(out, "rl_memory_store_bytes",
                      "Bytes the memory store holds for its counters.",
                      ss->mem_bytes));
            TRY(gauge(out, "rl_memory_store_max_bytes",
                      "Cap on rl_memory_store_bytes (--memory-max).",
                      ss->mem_max));
            TRY(gauge(out, "rl_memory_store_full",
                      "1 while the memory store refuses new counters.",
                      (uint64_t)(ss->mem_full != 0)));
            TRY(counter(out, "rl_memory_store_full_total",
                        "New counters refused because the memory store was "
                        "full (answered by the fail mode).",
                        ss->mem_refused));
        }
        if (v->cfg->use_redis && !v->cfg->redis_cluster)
            TRY(gauge(out, "rl_store_redis_module",
                      "1 while Redis batches go to the ratelimit module "
                      "(RL.BATCH), 0 while they go to the Lua script.",
                      (uint64_t)(ss->redis_module != 0)));
        if (v->cfg->use_redis)
            TRY(counter(out, "rl_store_redis_restarts_total",
                        "Redis restarts noticed on reconnection (its run_id "
                        "changed): the current windows' counts were lost "
                        "unless Redis persisted them.",
                        ss->restarts));
        /* The memory store has no round trip to measure. */
        if (v->cfg->use_redis)
            TRY(histogram(out, "rl_redis_rtt_seconds",
                          "Round trip of answered Redis batches.", &ss->rtt_us,
                          1));
        if (v->store->v->metrics != NULL)
            TRY(v->store->v->metrics(v->store, out));
    }
    if (v->http != NULL) {
        TRY(counter(out, "rl_http_connections_evicted_total",
                    "--metrics connections closed to make room for a new "
                    "one while the listener was full.",
                    v->http->evicted));
        TRY(counter(out, "rl_http_connections_refused_total",
                    "--metrics connections answered 503: the listener was "
                    "full and none could give way.",
                    v->http->refused));
        TRY(counter(out, "rl_http_connections_timed_out_total",
                    "--metrics connections closed at the header deadline "
                    "or the idle limit.",
                    v->http->timed_out));
    }
    if (v->check != NULL)
        TRY(render_check(v->check, v->check_rejected, out));
    if (v->rt != NULL)
        TRY(render_policy(v, out));
#undef TRY
    return RL_OK;
}
