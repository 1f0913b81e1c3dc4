/* What rl-bench prints and writes: the live progress line, the summary, the
 * JSON results, the latency CSV and the percentile plot. */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "rl_error.h"
#include "rlb.h"

static double us(uint64_t ns)
{
    return (double)ns / 1000.0;
}

static double pct_us(const rl_hist_t *h, double p)
{
    return us(rl_hist_percentile(h, p));
}

static const char *arrivals_name(const rlb_opts_t *o)
{
    return o->arrivals == RLB_ARRIVE_POISSON   ? "poisson"
           : o->arrivals == RLB_ARRIVE_GROUPED ? "grouped"
                                               : "each";
}

void rlb_progress_line(char *buf, size_t cap, double t, double rate,
                       const rlb_stats_t *s)
{
    snprintf(buf, cap,
             "%6.1fs %9.0f/s  allowed %" PRIu64 "  denied %" PRIu64
             "  errors %" PRIu64 "  p50 %.0fus  p99 %.0fus",
             t, rate, s->allowed, s->denied, rlb_errors(s) + s->unsent,
             pct_us(&s->lat_ns, 50), pct_us(&s->lat_ns, 99));
}

static const char *dist_name(const rlb_opts_t *o, char *buf, size_t cap)
{
    if (o->dist == RLB_DIST_ZIPF)
        snprintf(buf, cap, "zipf:%g", o->zipf_s);
    else if (o->dist == RLB_DIST_HOT && o->hot_frac < 1)
        snprintf(buf, cap, "hot:%g", o->hot_frac);
    else
        snprintf(buf, cap, "%s", o->dist == RLB_DIST_HOT ? "hot" : "uniform");
    return buf;
}

static double per_sec(const rlb_result_t *r)
{
    return r->seconds > 0 ? (double)(r->st.allowed + r->st.denied) / r->seconds
                          : 0;
}

static const char *algo_name(int algo)
{
    return algo == RL_ALGO_GCRA              ? "gcra"
           : algo == RL_ALGO_SLIDING_COUNTER ? "sliding-window-counter"
           : algo == RL_ALGO_SLIDING_LOG     ? "sliding-window"
                                             : "fixed-window";
}

static void print_windows(FILE *f, const char *what, const rlb_opts_t *o,
                          const rlb_audit_window_t *w, size_t n, uint64_t total)
{
    size_t i, shown = n < 20 ? n : 20;

    for (i = 0; i < shown; i++) {
        if (o->algo == RL_ALGO_GCRA)
            fprintf(f,
                    "  %s: key %s%" PRIu32 ": %" PRIu64
                    " admitted (x cost %" PRIu32 ") decided from %+.3f s to "
                    "%+.3f s, at most %" PRIu64
                    " (burst + elapsed / interval)\n",
                    what, o->key_prefix, w[i].key, w[i].allowed, o->cost,
                    w[i].from_ms / 1000, w[i].end_ms / 1000, w[i].limit);
        else if (o->algo == RL_ALGO_SLIDING_COUNTER)
            fprintf(f,
                    "  %s: key %s%" PRIu32 ", window from %+.3f s to %+.3f "
                    "s: at %+.3f s, %" PRIu64 " admitted (x cost %" PRIu32
                    ") + the previous window's share %" PRIu64
                    " > limit %" PRIu64 "\n",
                    what, o->key_prefix, w[i].key, w[i].from_ms / 1000,
                    w[i].end_ms / 1000, w[i].at_ms / 1000, w[i].allowed,
                    o->cost, w[i].share, w[i].limit);
        else
            fprintf(f,
                    "  %s: key %s%" PRIu32
                    ", window ending at %+.1f s: %" PRIu64
                    " allowed (x cost %" PRIu32 "), limit %" PRIu64 ", %" PRIu64
                    " refused\n",
                    what, o->key_prefix, w[i].key, w[i].end_ms / 1000,
                    w[i].allowed, o->cost, w[i].limit, w[i].denied);
    }
    if (total > n)
        fprintf(f, "  ... and %" PRIu64 " more (the first %d in --json)\n",
                total - shown, RLB_AUDIT_LIST_MAX);
    else if (total > shown)
        fprintf(f, "  ... and %" PRIu64 " more (all in --json)\n",
                total - shown);
}

/* --replay: the log's time span, and how long its replay was due to
 * take at --replay-speed (0 at speed 0: as fast as answers came). */
static double replay_span_s(const rlb_result_t *r)
{
    return r->replay.requests > 0
               ? (double)(r->replay.last_ms - r->replay.first_ms) / 1000
               : 0;
}

static double replay_sched_s(const rlb_opts_t *o, const rlb_result_t *r)
{
    return o->replay_speed > 0 ? replay_span_s(r) / o->replay_speed : 0;
}

static double sent_per_sec(const rlb_result_t *r)
{
    return r->seconds > 0 ? (double)r->st.sent / r->seconds : 0;
}

/* --replay's lines of the summary: what the log held, how much of it was
 * sent, how fast, and how late against its schedule. */
static void print_replay(FILE *f, const rlb_opts_t *o, const rlb_result_t *r)
{
    const rlb_replay_stats_t *p = &r->replay;
    const rl_hist_t *l = &r->st.late_ns;

    fprintf(f,
            "log        %" PRIu64 " lines: %" PRIu64 " requests, %" PRIu64
            " malformed, %" PRIu64 " without a key, %" PRIu64
            " with a key too long or holding NUL (those three not sent); "
            "%" PRIu64 " out of order (sent at the latest time before)\n",
            p->lines, p->requests, p->malformed, p->nokey, p->bad_key,
            p->out_of_order);
    fprintf(f,
            "replay     sent %" PRIu64 " of the %" PRIu64
            " requests read (%.0f/s achieved",
            r->st.sent, p->requests, sent_per_sec(r));
    if (replay_sched_s(o, r) > 0)
        fprintf(f, ", %.0f/s scheduled",
                (double)p->requests / replay_sched_s(o, r));
    fprintf(f, "); log span %.3f s", replay_span_s(r));
    if (o->replay_speed > 0)
        fprintf(f, ", due to take %.3f s at %gx, took %.3f s\n",
                replay_sched_s(o, r), o->replay_speed, r->seconds);
    else
        fprintf(f, ", replayed as fast as answers came in %.3f s\n",
                r->seconds);
    if (!r->replay_complete)
        fprintf(f, "           NOT COMPLETE: %s\n",
                p->read_error ? "the log could not be read to its end"
                              : "the run ended before the log did");
    if (rlb_open_loop(o))
        fprintf(f,
                "lateness   p50 %.1f us, p99 %.1f us, max %.1f us after the "
                "scheduled time; %" PRIu64
                " waited for a free slot (--inflight %" PRIu32
                " per connection)\n",
                pct_us(l, 50), pct_us(l, 99), us(l->max), r->st.slot_waits,
                o->inflight);
}

/* How the audited limit counts, for the summary: "", or e.g. ", gcra,
 * burst 20". */
static const char *audited_as(const rlb_opts_t *o, char *buf, size_t cap)
{
    if (o->algo == RL_ALGO_GCRA)
        snprintf(buf, cap, ", gcra, burst %" PRIu64,
                 o->burst ? o->burst : o->limit);
    else if (o->algo == RL_ALGO_SLIDING_COUNTER)
        snprintf(buf, cap, ", sliding-window-counter%s",
                 o->per_caller ? ", per-caller" : "");
    else
        snprintf(buf, cap, "%s", o->per_caller ? ", per-caller" : "");
    return buf;
}

/* --levels: the organisation level's audit line, and each level's
 * refusals. */
static void print_org_audit(FILE *f, const rlb_result_t *r)
{
    const rlb_audit_report_t *a = &r->org_audit;

    fprintf(f, "audit org  %" PRIu64 " windows, %" PRIu64 " over the limit%s",
            a->windows, a->over_limit, a->over_limit ? " (FAILED)" : "");
    if (a->checked)
        fprintf(f,
                "; windows it refused in with exactly the limit admitted: "
                "%" PRIu64 " of %" PRIu64 "%s",
                a->exact, a->checked,
                a->exact == a->checked ? "" : " (NOT EXACT: FAILED)");
    fprintf(f,
            "\n           refused by the organisation level %" PRIu64
            ", by the user level %" PRIu64 ", by neither named %" PRIu64 "\n",
            r->level_refused[1], r->level_refused[2], r->level_refused[0]);
}

/* The audit's lines of the summary. */
static void print_audit(FILE *f, const rlb_opts_t *o, const rlb_result_t *r)
{
    const rlb_audit_report_t *a = &r->audit;

    if (o->tenants > 0)
        print_org_audit(f, r);
    if (o->algo == RL_ALGO_FIXED) {
        fprintf(f, "audit%s  %" PRIu64 " windows, %" PRIu64 " over the limit%s",
                o->tenants > 0 ? " user" : "     ", a->windows, a->over_limit,
                a->over_limit ? " (FAILED)" : "");
        if (a->checked)
            fprintf(f,
                    "; hammered windows with exactly the limit allowed: "
                    "%" PRIu64 " of %" PRIu64 "%s",
                    a->exact, a->checked,
                    a->exact == a->checked ? ""
                    : o->tenants > 0       ? " (NOT EXACT: FAILED)"
                                           : " (NOT EXACT)");
        fprintf(f, "\n");
    } else {
        fprintf(f,
                "audit      %s: %" PRIu64 " %s, %" PRIu64
                " admissions checked, %" PRIu64 " over the limit%s\n",
                algo_name(o->algo), a->windows,
                o->algo == RL_ALGO_GCRA ? "keys" : "windows", a->admissions,
                a->over_limit, a->over_limit ? " (FAILED)" : "");
    }
    if (a->unplaced || a->other_refused)
        fprintf(f,
                "           decided by another window of the rule: %" PRIu64
                " refusals (not counted), %" PRIu64
                " admissions too near an edge to place (not counted)\n",
                a->other_refused, a->unplaced);
    if (a->late)
        fprintf(f,
                "           %" PRIu64 " admissions answered after later-"
                "stamped ones of their key had been checked (not counted)\n",
                a->late);
    if (a->unstamped)
        fprintf(f,
                "           %" PRIu64 " admissions without decided_at_ms (a "
                "server older than the field): not audited\n",
                a->unstamped);
    if (a->unreliable && o->algo == RL_ALGO_SLIDING_COUNTER)
        fprintf(f,
                "  warning: answers took up to %.0f ms, longer than "
                "--audit-margin-ms %" PRIu64 "; the previous windows' counts "
                "may be overstated\n",
                a->max_rtt_ms, a->margin_ms);
    else if (a->unreliable)
        fprintf(f,
                "  warning: window estimates strayed %.0f ms from the grid; "
                "the grouping may be wrong\n",
                a->max_skew_ms);
    print_windows(f, "over", o, a->over, a->nover,
                  o->algo == RL_ALGO_FIXED ? a->over_limit : a->nover);
    print_windows(f, "not exact", o, a->inexact, a->ninexact,
                  a->checked - a->exact);
}

/* --op reserve and acquire: the follow-ups, and the lease audit. */
static void print_xop(FILE *f, const rlb_opts_t *o, const rlb_result_t *r)
{
    const rlb_stats_t *s = &r->st;
    const rlb_lease_audit_t *a = &r->lease;

    if (o->op == RLB_OP_RESERVE)
        fprintf(f,
                "reserve    %" PRIu64 " reserved, %" PRIu64
                " refused; settles %" PRIu64 " sent (%.0f/s), %" PRIu64
                " ok, %" PRIu64 " errors; refunded %" PRIu64 ", excess %" PRIu64
                "\n",
                s->allowed, s->denied, s->follow_sent,
                r->seconds > 0 ? (double)s->follow_sent / r->seconds : 0.0,
                s->follow_ok, s->follow_errors, s->refunded, s->excess);
    if (o->op == RLB_OP_ACQUIRE)
        fprintf(f,
                "acquire    %" PRIu64 " acquired, %" PRIu64
                " refused; released %" PRIu64 " (%.0f/s), crashed %" PRIu64
                ", release errors %" PRIu64 "\n",
                s->allowed, s->denied, s->follow_ok,
                r->seconds > 0 ? (double)s->follow_sent / r->seconds : 0.0,
                s->crashed, s->follow_errors);
    if (r->ledger_audited) {
        const rlb_ledger_t *l = &r->ledger;
        if (!l->done)
            fprintf(f, "audit      counters: not done (%s)\n", l->why);
        else
            fprintf(f,
                    "audit      counters: %" PRIu64
                    " keys checked against their first check + what the "
                    "answers charged; %" PRIu64 " unknown, %" PRIu64
                    " over the limit, %" PRIu64 " in a new window: %s\n",
                    l->checked, l->unknown, l->full, l->rolled,
                    l->mismatched ? "FAIL" : "ok");
        if (l->mismatched)
            fprintf(f,
                    "           %" PRIu64 " keys off; the first: key %" PRIu32
                    " used %" PRId64 ", expected %" PRId64 "\n",
                    l->mismatched, l->first_key, l->first_got, l->first_want);
    }
    if (!r->lease_audited)
        return;
    fprintf(f,
            "audit      leases: %" PRIu64 " grants checked, at most %" PRIu64
            " alive at a grant (N %s%" PRIu64 ", skew %" PRIu64 " ms); %" PRIu64
            " late, %" PRIu64 " unstamped%s: %s\n",
            a->checked, a->max_alive, a->limit ? "" : "from the answers, ",
            a->limit ? a->limit : a->limit_seen, a->skew_ms, a->late,
            a->unstamped, a->nomem ? ", INCOMPLETE (out of memory)" : "",
            a->over ? "FAIL" : "ok");
    if (a->over)
        fprintf(f,
                "           %" PRIu64 " grants over N; the first: key %" PRIu32
                " at %" PRIu64 " ms (store clock), %" PRIu64
                " alive, N %" PRIu64 "\n",
                a->over, a->first_over_key, a->first_over_at,
                a->first_over_alive, a->first_over_limit);
}

void rlb_print_summary(FILE *f, const rlb_opts_t *o, const rlb_result_t *r)
{
    const rlb_stats_t *s = &r->st;
    const rl_hist_t *h = &s->lat_ns;
    char dist[32], how[64];
    uint32_t i;

    if (o->fleet)
        fprintf(f, "rl-bench   fleet of %" PRIu32 " server%s (%s), ",
                o->nservers, o->nservers == 1 ? "" : "s", o->server);
    else
        fprintf(f, "rl-bench   %s, ", o->server);
    fprintf(f, "%" PRIu32 " connection%s, ", o->connections,
            o->connections == 1 ? "" : "s");
    if (o->replay_path != NULL && o->replay_speed > 0)
        fprintf(f,
                "replay of %s at %gx, open loop, %" PRIu32 " in flight at "
                "most each",
                o->replay_path, o->replay_speed, o->inflight);
    else if (o->replay_path != NULL)
        fprintf(f,
                "replay of %s as fast as possible, closed loop, %" PRIu32
                " in flight each",
                o->replay_path, o->inflight);
    else if (o->rate > 0)
        fprintf(f, "open loop at %.0f/s, %s arrivals", o->rate,
                arrivals_name(o));
    else
        fprintf(f, "closed loop, %" PRIu32 " in flight each", o->inflight);
    fprintf(f, ", %.2f s measured%s\n", r->seconds,
            o->keep_awake ? ", vCPUs kept awake" : "");
    if (o->replay_path != NULL && o->rule == NULL)
        fprintf(f,
                "keys       the log's callers, prefix \"%s\"; limit %" PRIu64
                " per %" PRIu32 " s, cost from the log\n",
                o->key_prefix, o->limit, o->window_s);
    else if (o->replay_path != NULL)
        fprintf(f,
                "keys       the log's callers, prefix \"%s\"; rule \"%s\", "
                "cost from the log\n",
                o->key_prefix, o->rule);
    else if (o->rule == NULL)
        fprintf(f,
                "keys       %" PRIu32 " %s, prefix \"%s\"; limit %" PRIu64
                " per %" PRIu32 " s, cost %" PRIu32 "\n",
                o->keys, dist_name(o, dist, sizeof(dist)), o->key_prefix,
                o->limit, o->window_s, o->cost);
    else if (o->have_window)
        fprintf(
            f,
            "keys       %" PRIu32 " %s, prefix \"%s\"; rule \"%s\" "
            "(audited as %" PRIu64 " per %" PRIu32 " s%s), cost %" PRIu32 "\n",
            o->keys, dist_name(o, dist, sizeof(dist)), o->key_prefix, o->rule,
            o->limit, o->window_s, audited_as(o, how, sizeof(how)), o->cost);
    else
        fprintf(f,
                "keys       %" PRIu32 " %s, prefix \"%s\"; rule \"%s\", "
                "cost %" PRIu32 "\n",
                o->keys, dist_name(o, dist, sizeof(dist)), o->key_prefix,
                o->rule, o->cost);
    if (r->ended_early)
        fprintf(f, "ENDED EARLY: %s\n", r->end_reason);
    if (o->replay_path != NULL)
        print_replay(f, o, r);
    fprintf(f,
            "decisions  %" PRIu64 " (%.0f/s): allowed %" PRIu64
            ", denied %" PRIu64 "\n",
            s->allowed + s->denied, per_sec(r), s->allowed, s->denied);
    if (s->failed_open)
        fprintf(f,
                "           %" PRIu64 " allowed by the server's fail-open "
                "policy (store unavailable)\n",
                s->failed_open);
    if (s->shadow_refused)
        fprintf(f,
                "           %" PRIu64 " allowed by a rule in shadow mode "
                "that would have refused (shadow_refused; nothing "
                "consumed)\n",
                s->shadow_refused);
    fprintf(f,
            "errors     %" PRIu64 " (server %" PRIu64 ", timeouts %" PRIu64
            ", connection lost %" PRIu64 ", other %" PRIu64 ", unsent %" PRIu64
            "); disconnects %" PRIu64 "\n",
            rlb_errors(s) + s->unsent, s->server_errors, s->timeouts, s->closed,
            s->other_errors, s->unsent, s->disconnects);
    for (i = 0; i < r->nservers; i++) {
        const rlb_server_stats_t *sv = &r->servers[i];
        fprintf(f,
                "server     %s (%" PRIu32 " connection%s): %" PRIu64
                " decisions, allowed %" PRIu64 ", denied %" PRIu64
                ", errors %" PRIu64 "\n",
                sv->addr, sv->connections, sv->connections == 1 ? "" : "s",
                sv->allowed + sv->denied, sv->allowed, sv->denied, sv->errors);
    }
    fprintf(f,
            "latency    p50 %.1f us, p90 %.1f us, p99 %.1f us, p99.9 %.1f us, "
            "max %.1f us (mean %.1f us)%s\n",
            pct_us(h, 50), pct_us(h, 90), pct_us(h, 99), pct_us(h, 99.9),
            us(h->max), rl_hist_mean(h) / 1000,
            rlb_open_loop(o) ? ", from the scheduled send" : "");
    print_xop(f, o, r);
    if (o->audit_skipped != NULL)
        fprintf(f, "audit      skipped: %s\n", o->audit_skipped);
    if (!r->audited)
        return;
    print_audit(f, o, r);
}

/* Writes s as a JSON string. */
static void json_str(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\')
            fprintf(f, "\\%c", ch);
        else if (ch < 0x20)
            fprintf(f, "\\u%04x", ch);
        else
            fputc(ch, f);
    }
    fputc('"', f);
}

static void json_windows(FILE *f, const char *name, const rlb_opts_t *o,
                         const rlb_audit_window_t *w, size_t n)
{
    size_t i;
    char key[600];

    fprintf(f, ",\n  \"%s\": [", name);
    for (i = 0; i < n; i++) {
        snprintf(key, sizeof(key), "%s%" PRIu32, o->key_prefix, w[i].key);
        fprintf(f, "%s\n    {\"key\": ", i ? "," : "");
        json_str(f, key);
        fprintf(f,
                ", \"window_end_s\": %.3f, \"allowed\": %" PRIu64
                ", \"denied\": %" PRIu64 ", \"limit\": %" PRIu64
                ", \"from_s\": %.3f",
                w[i].end_ms / 1000, w[i].allowed, w[i].denied, w[i].limit,
                w[i].from_ms / 1000);
        /* A sliding window's check failed at one admission, against the
         * previous window's share. */
        if (o->algo == RL_ALGO_SLIDING_COUNTER)
            fprintf(f, ", \"at_s\": %.3f, \"prev_share\": %" PRIu64,
                    w[i].at_ms / 1000, w[i].share);
        fputc('}', f);
    }
    fprintf(f, "%s]", n ? "\n  " : "");
}

/* --fleet: "servers", an array with one line per server, in --server's
 * order; null otherwise (which server a failing-over connection was on is
 * not known). */
static void json_servers(FILE *f, const rlb_result_t *r)
{
    uint32_t i;

    if (r->servers == NULL) {
        fprintf(f, "  \"servers\": null,\n");
        return;
    }
    fprintf(f, "  \"servers\": [");
    for (i = 0; i < r->nservers; i++) {
        const rlb_server_stats_t *sv = &r->servers[i];
        fprintf(f, "%s\n    {\"server\": ", i ? "," : "");
        json_str(f, sv->addr);
        fprintf(f,
                ", \"connections\": %" PRIu32 ", \"decisions\": %" PRIu64
                ", \"allowed\": %" PRIu64 ", \"denied\": %" PRIu64
                ", \"errors\": %" PRIu64 "}",
                sv->connections, sv->allowed + sv->denied, sv->allowed,
                sv->denied, sv->errors);
    }
    fprintf(f, "\n  ],\n");
}

/* --replay's fields: "replay_log" null without it. */
static void json_replay(FILE *f, const rlb_opts_t *o, const rlb_result_t *r)
{
    const rlb_replay_stats_t *p = &r->replay;
    const rl_hist_t *l = &r->st.late_ns;

    fprintf(f, "  \"replay_log\": ");
    if (o->replay_path == NULL) {
        fprintf(f, "null,\n");
        return;
    }
    json_str(f, o->replay_path);
    fprintf(f,
            ",\n  \"replay_speed\": %g,\n  \"replay_lines\": %" PRIu64
            ",\n  \"replay_requests\": %" PRIu64
            ",\n  \"replay_malformed\": %" PRIu64
            ",\n  \"replay_no_key\": %" PRIu64
            ",\n  \"replay_bad_key\": %" PRIu64
            ",\n  \"replay_out_of_order\": %" PRIu64
            ",\n  \"replay_read_error\": %s"
            ",\n  \"replay_complete\": %s"
            ",\n  \"replay_span_s\": %.3f"
            ",\n  \"replay_scheduled_s\": %.3f"
            ",\n  \"sent_per_sec\": %.1f"
            ",\n  \"slot_waits\": %" PRIu64 ",\n",
            o->replay_speed, p->lines, p->requests, p->malformed, p->nokey,
            p->bad_key, p->out_of_order, p->read_error ? "true" : "false",
            r->replay_complete ? "true" : "false", replay_span_s(r),
            replay_sched_s(o, r), sent_per_sec(r), r->st.slot_waits);
    if (rlb_open_loop(o))
        fprintf(f,
                "  \"late_p50_us\": %.1f,\n  \"late_p99_us\": %.1f,\n"
                "  \"late_max_us\": %.1f,\n",
                pct_us(l, 50), pct_us(l, 99), us(l->max));
    else
        fprintf(f, "  \"late_p50_us\": null,\n  \"late_p99_us\": null,\n"
                   "  \"late_max_us\": null,\n");
}

int rlb_write_json(FILE *f, const rlb_opts_t *o, const rlb_result_t *r)
{
    const rlb_stats_t *s = &r->st;
    const rl_hist_t *h = &s->lat_ns;
    char dist[32];

    fprintf(f, "{\n  \"server\": ");
    json_str(f, o->server);
    fprintf(f, ",\n  \"fleet\": %s", o->fleet ? "true" : "false");
    fprintf(f, ",\n  \"mode\": \"%s\",\n",
            rlb_open_loop(o) ? "open" : "closed");
    fprintf(f, "  \"connections\": %" PRIu32 ",\n", o->connections);
    fprintf(f, "  \"keep_awake\": %s,\n", o->keep_awake ? "true" : "false");
    if (o->rate > 0)
        fprintf(f,
                "  \"rate\": %.3f,\n  \"arrivals\": \"%s\",\n"
                "  \"inflight\": null,\n",
                o->rate, arrivals_name(o));
    else
        fprintf(f, "  \"rate\": null,\n  \"inflight\": %" PRIu32 ",\n",
                o->inflight);
    /* A replay's keys and costs are the log's. */
    if (o->replay_path != NULL)
        fprintf(f, "  \"keys\": null,\n  \"dist\": null,\n  \"key_prefix\": ");
    else
        fprintf(f,
                "  \"keys\": %" PRIu32
                ",\n  \"dist\": \"%s\",\n  \"key_prefix\": ",
                o->keys, dist_name(o, dist, sizeof(dist)));
    json_str(f, o->key_prefix);
    fprintf(f, ",\n  \"rule\": ");
    if (o->rule != NULL)
        json_str(f, o->rule);
    else
        fprintf(f, "null");
    /* With --rule, limit and window are the audited window, if given. */
    if (o->rule != NULL && !o->have_window)
        fprintf(f, ",\n  \"limit\": null,\n  \"window\": null");
    else
        fprintf(f, ",\n  \"limit\": %" PRIu64 ",\n  \"window\": %" PRIu32,
                o->limit, o->window_s);
    fprintf(f,
            ",\n  \"algorithm\": \"%s\",\n  \"burst\": ", algo_name(o->algo));
    if (o->algo == RL_ALGO_GCRA)
        fprintf(f, "%" PRIu64, o->burst ? o->burst : o->limit);
    else
        fprintf(f, "null");
    fprintf(f, ",\n  \"phase\": \"%s\"",
            o->per_caller ? "per-caller" : "aligned");
    if (o->replay_path != NULL)
        fprintf(f, ",\n  \"cost\": null,\n");
    else
        fprintf(f, ",\n  \"cost\": %" PRIu32 ",\n", o->cost);
    fprintf(f,
            "  \"decisions\": %" PRIu64 ",\n  \"seconds\": %.6f,\n"
            "  \"decisions_per_sec\": %.1f,\n",
            s->allowed + s->denied, r->seconds, per_sec(r));
    fprintf(f, "  \"sent_total\": %" PRIu64 ",\n", r->sent_total);
    fprintf(f,
            "  \"sent\": %" PRIu64 ",\n  \"allowed\": %" PRIu64
            ",\n  \"denied\": %" PRIu64 ",\n  \"shadow_refused\": %" PRIu64
            ",\n  \"errors\": %" PRIu64 ",\n",
            s->sent, s->allowed, s->denied, s->shadow_refused,
            rlb_errors(s) + s->unsent);
    fprintf(f,
            "  \"server_errors\": %" PRIu64 ",\n  \"timeouts\": %" PRIu64
            ",\n  \"connection_lost\": %" PRIu64
            ",\n  \"other_errors\": %" PRIu64 ",\n  \"unsent\": %" PRIu64
            ",\n  \"failed_open\": %" PRIu64 ",\n  \"disconnects\": %" PRIu64
            ",\n",
            s->server_errors, s->timeouts, s->closed, s->other_errors,
            s->unsent, s->failed_open, s->disconnects);
    json_servers(f, r);
    json_replay(f, o, r);
    fprintf(f,
            "  \"p50_us\": %.1f,\n  \"p90_us\": %.1f,\n  \"p99_us\": %.1f,\n"
            "  \"p999_us\": %.1f,\n  \"max_us\": %.1f,\n  \"min_us\": %.1f,\n"
            "  \"mean_us\": %.1f,\n",
            pct_us(h, 50), pct_us(h, 90), pct_us(h, 99), pct_us(h, 99.9),
            us(h->max), h->total ? us(h->min) : 0.0, rl_hist_mean(h) / 1000);
    fprintf(f, "  \"ended_early\": %s,\n  \"end_reason\": ",
            r->ended_early ? "true" : "false");
    if (r->ended_early)
        json_str(f, r->end_reason);
    else
        fprintf(f, "null");
    fprintf(f, ",\n  \"op\": \"%s\"",
            o->op == RLB_OP_RESERVE   ? "reserve"
            : o->op == RLB_OP_ACQUIRE ? "acquire"
                                      : "check");
    if (o->op != RLB_OP_CHECK)
        fprintf(f,
                ",\n  \"follow_sent\": %" PRIu64 ",\n  \"follow_ok\": %" PRIu64
                ",\n  \"follow_errors\": %" PRIu64 ",\n  \"crashed\": %" PRIu64
                ",\n  \"refunded\": %" PRIu64 ",\n  \"excess\": %" PRIu64,
                r->st.follow_sent, r->st.follow_ok, r->st.follow_errors,
                r->st.crashed, r->st.refunded, r->st.excess);
    if (r->ledger_audited)
        fprintf(f,
                ",\n  \"ledger_done\": %s"
                ",\n  \"ledger_checked\": %" PRIu64
                ",\n  \"ledger_mismatched\": %" PRIu64
                ",\n  \"ledger_unknown\": %" PRIu64,
                r->ledger.done ? "true" : "false", r->ledger.checked,
                r->ledger.mismatched, r->ledger.unknown);
    if (r->lease_audited)
        fprintf(f,
                ",\n  \"lease_audit_checked\": %" PRIu64
                ",\n  \"lease_audit_max_alive\": %" PRIu64
                ",\n  \"lease_audit_over\": %" PRIu64
                ",\n  \"lease_audit_late\": %" PRIu64,
                r->lease.checked, r->lease.max_alive, r->lease.over,
                r->lease.late);
    fprintf(f, ",\n  \"audit\": %s", r->audited ? "true" : "false");
    fprintf(f, ",\n  \"audit_skipped\": ");
    if (o->audit_skipped != NULL)
        json_str(f, o->audit_skipped);
    else
        fprintf(f, "null");
    if (r->audited) {
        const rlb_audit_report_t *a = &r->audit;
        fprintf(f,
                ",\n  \"audit_windows\": %" PRIu64
                ",\n  \"audit_over_limit\": %" PRIu64
                ",\n  \"audit_checked_windows\": %" PRIu64
                ",\n  \"audit_exact_windows\": %" PRIu64
                ",\n  \"audit_exact\": %s,\n  \"audit_max_skew_ms\": %.1f"
                ",\n  \"audit_unreliable\": %s"
                ",\n  \"audit_other_window_refused\": %" PRIu64
                ",\n  \"audit_unplaced\": %" PRIu64,
                a->windows, a->over_limit, a->checked, a->exact,
                a->checked == 0          ? "null"
                : a->exact == a->checked ? "true"
                                         : "false",
                a->max_skew_ms, a->unreliable ? "true" : "false",
                a->other_refused, a->unplaced);
        fprintf(
            f,
            ",\n  \"audit_admissions_checked\": %" PRIu64
            ",\n  \"audit_late\": %" PRIu64 ",\n  \"audit_unstamped\": %" PRIu64
            ",\n  \"audit_margin_ms\": %" PRIu64
            ",\n  \"audit_max_rtt_ms\": %.1f",
            a->admissions, a->late, a->unstamped, a->margin_ms, a->max_rtt_ms);
        json_windows(f, "audit_violations", o, a->over, a->nover);
        json_windows(f, "audit_inexact", o, a->inexact, a->ninexact);
    }
    if (r->audited && o->tenants > 0) {
        /* --levels: the organisation level's audit (the fields above are
         * the users'), and each level's refusals. */
        const rlb_audit_report_t *g = &r->org_audit;
        fprintf(f,
                ",\n  \"levels_tenants\": %" PRIu32
                ",\n  \"levels_refused_org\": %" PRIu64
                ",\n  \"levels_refused_user\": %" PRIu64
                ",\n  \"audit_org_windows\": %" PRIu64
                ",\n  \"audit_org_over_limit\": %" PRIu64
                ",\n  \"audit_org_checked_windows\": %" PRIu64
                ",\n  \"audit_org_exact_windows\": %" PRIu64
                ",\n  \"audit_org_exact\": %s",
                o->tenants, r->level_refused[1], r->level_refused[2],
                g->windows, g->over_limit, g->checked, g->exact,
                g->checked == 0          ? "null"
                : g->exact == g->checked ? "true"
                                         : "false");
        json_windows(f, "audit_org_violations", o, g->over, g->nover);
        json_windows(f, "audit_org_inexact", o, g->inexact, g->ninexact);
    }
    fprintf(f, "\n}\n");
    if (fflush(f) != 0 || ferror(f)) {
        fprintf(stderr, "rl-bench: writing --json: %s\n", strerror(errno));
        return RL_EIO;
    }
    return 0;
}

int rlb_write_csv(FILE *f, const rl_hist_t *h)
{
    uint64_t lo, hi, n, cum = 0;
    size_t i = 0;

    fprintf(f, "latency_us_low,latency_us_high,count,cumulative_count,"
               "percentile\n");
    while (rl_hist_next(h, &i, &lo, &hi, &n)) {
        cum += n;
        fprintf(f, "%.3f,%.3f,%" PRIu64 ",%" PRIu64 ",%.6f\n", us(lo), us(hi),
                n, cum, 100.0 * (double)cum / (double)h->total);
    }
    if (fflush(f) != 0 || ferror(f)) {
        fprintf(stderr, "rl-bench: writing --hist-csv: %s\n", strerror(errno));
        return RL_EIO;
    }
    return 0;
}

int rlb_have_program(const char *name)
{
    const char *path = getenv("PATH");
    char buf[4096];

    if (path == NULL)
        return 0;
    while (*path) {
        size_t n = strcspn(path, ":");
        if (n > 0 && n + strlen(name) + 2 <= sizeof(buf)) {
            memcpy(buf, path, n);
            buf[n] = '/';
            strcpy(buf + n + 1, name);
            if (access(buf, X_OK) == 0)
                return 1;
        }
        path += n;
        if (*path == ':')
            path++;
    }
    return 0;
}

/* Writes s inside a gnuplot single-quoted string, where '' is a quote. */
static void gp_str(FILE *f, const char *s)
{
    fputc('\'', f);
    for (; *s; s++) {
        if (*s == '\'')
            fputc('\'', f);
        fputc(*s, f);
    }
    fputc('\'', f);
}

int rlb_plot(const char *path, const rlb_opts_t *o, const rl_hist_t *h)
{
    FILE *gp;
    char dist[32], title[256];
    int i, rc;

    if (h->total == 0) {
        fprintf(stderr, "rl-bench: --plot: no latencies to draw\n");
        return RL_EIO;
    }
    gp = popen("gnuplot", "w");
    if (gp == NULL) {
        fprintf(stderr, "rl-bench: --plot: cannot run gnuplot: %s\n",
                strerror(errno));
        return RL_EIO;
    }
    if (o->replay_path != NULL)
        snprintf(title, sizeof(title),
                 "rl-bench latency, replay of %s at %gx%s", o->replay_path,
                 o->replay_speed,
                 o->replay_speed > 0 ? "" : " (as fast as possible)");
    else if (o->rate > 0)
        snprintf(title, sizeof(title),
                 "rl-bench latency, open loop %.0f/s, %s over %" PRIu32
                 " keys%s",
                 o->rate, dist_name(o, dist, sizeof(dist)), o->keys,
                 o->keep_awake ? ", vCPUs kept awake" : "");
    else
        snprintf(title, sizeof(title),
                 "rl-bench latency, closed loop %" PRIu32 " x %" PRIu32
                 ", %s over %" PRIu32 " keys",
                 o->connections, o->inflight, dist_name(o, dist, sizeof(dist)),
                 o->keys);
    fprintf(gp, "set terminal pngcairo size 960,600 font ',10'\n"
                "set output ");
    gp_str(gp, path);
    fprintf(gp, "\nset title ");
    gp_str(gp, title);
    /* The x axis is 1/(1-p), on a log scale: each decade is one more nine,
     * so the tail, where the story usually is, gets as much room as the
     * median. Tic labels are gnuplot formats, hence %%%% for a '%'. */
    fprintf(gp,
            "\nset logscale x\nset xrange [1:*]\nset yrange [0:*]\n"
            "set xlabel 'percentile'\nset ylabel 'latency (us)'\n"
            "set xtics ('0%%%%' 1, '90%%%%' 10, '99%%%%' 100, '99.9%%%%' 1000, "
            "'99.99%%%%' 10000, '99.999%%%%' 100000, "
            "'99.9999%%%%' 1000000)\n"
            "set grid\nset key top left\n$lat << EOD\n");
    for (i = 0; i <= 240; i++) {
        double q = 1 - pow(10, -(double)i / 40);
        if (i > 0 && 1 - q < 1.0 / (double)h->total)
            break;
        fprintf(gp, "%.6g %.3f\n", 1 / (1 - q), pct_us(h, q * 100));
    }
    fprintf(gp, "%.6g %.3f\n", (double)h->total, us(h->max));
    fprintf(gp, "EOD\nplot $lat using 1:2 with lines lw 2 title "
                "'latency at percentile'\n");
    rc = pclose(gp);
    if (rc != 0) {
        fprintf(stderr, "rl-bench: --plot: gnuplot failed (status %d)\n", rc);
        return RL_EIO;
    }
    return 0;
}
