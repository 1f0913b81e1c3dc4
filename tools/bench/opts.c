/* rl-bench's command line. Every mistake gets one line that names the
 * option and what it wants, then exit status 2: scripts and CI read the
 * status, people read the line. */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "rl_validate.h"
#include "rl_error.h"
#include "rl_parse.h"
#include "rlb.h"
#include "rlc.h"

static void usage(FILE *f)
{
    fprintf(
        f,
        "usage: rl-bench [options]\n"
        "\n"
        "Load generator for rl-server, on librlc's async API: measures\n"
        "decisions per second and latency, and with --audit checks that the\n"
        "server admitted nothing past its limit.\n"
        "\n"
        "  --server HOST:PORT[,HOST:PORT...]  rl-server to load\n"
        "                          (default 127.0.0.1:7390); with several,\n"
        "                          each connection fails over along the list\n"
        "  --tls                   connect over TLS (rl-server --tls-cert "
        "with\n"
        "                          native in --tls-listeners); --tls-ca FILE,\n"
        "                          --tls-cert FILE --tls-key FILE (mutual "
        "TLS),\n"
        "                          --tls-server-name NAME, --tls-insecure as\n"
        "                          rl-check's; any of them implies --tls\n"
        "  --fleet                 spread the connections over every server\n"
        "                          of --server instead: connection i talks to\n"
        "                          server i mod N only (no failover), the\n"
        "                          audit counts all their answers together\n"
        "                          (a key's window over its limit summed\n"
        "                          across servers fails it), and the results\n"
        "                          give each server's decisions; needs at\n"
        "                          least N connections\n"
        "  --connections N         connections, one client each (default 4)\n"
        "  --duration SECONDS      measured time, fractions allowed "
        "(default 10)\n"
        "  --warmup SECONDS        load before measuring (default 0)\n"
        "  --inflight N            closed loop: requests outstanding per\n"
        "                          connection (default 64)\n"
        "  --rate R                open loop instead: R requests per second\n"
        "                          on a fixed schedule; latency counts from\n"
        "                          the scheduled send time\n"
        "  --arrivals MODE         open loop: each (default: every request\n"
        "                          written at its own scheduled time, evenly\n"
        "                          spaced, as from independent clients),\n"
        "                          poisson (the same, exponential gaps) or\n"
        "                          grouped (what fell due, once per tick)\n"
        "  --tick-us N             open loop, grouped: send what has fallen\n"
        "                          due every N us (default: 20 intervals,\n"
        "                          within 100..1000); implies grouped\n"
        "  --replay LOG            replay an access log's requests instead:\n"
        "                          each line's caller (--key-prefix, then\n"
        "                          the caller) and cost, sent at the line's\n"
        "                          time after the first line's, divided by\n"
        "                          --replay-speed; open loop, one request per\n"
        "                          write, whatever the answers. LOG is gzip\n"
        "                          or plain, - for stdin, streamed (never "
        "held\n"
        "                          whole). Lines the parser rejects are\n"
        "                          counted, not sent. Runs to the log's end\n"
        "                          unless --duration or --requests cuts it\n"
        "                          short. Not with --rate, --keys, --dist,\n"
        "                          --cost or --audit\n"
        "  --replay-speed X        1 real time (default), 10 ten times\n"
        "                          faster, 0 as fast as answers come (closed\n"
        "                          loop, --inflight per connection). Open\n"
        "                          loop: --inflight N is the bound on checks\n"
        "                          in flight per connection (default 1024);\n"
        "                          a check due when every slot is taken waits\n"
        "                          for one, is counted (slot waits) and its\n"
        "                          lateness reported\n"
        "  --format F, --key EXPR, --json-key EXPR, --json-time NAME,\n"
        "  --json-cost NAME        --replay: the log's format and fields, as\n"
        "                          rl-fit takes them (auto|combined|json;\n"
        "                          default key user|addr, time field time,\n"
        "                          cost 1)\n"
        "  --requests N            stop after sending N (default: no cap)\n"
        "  --keys N                distinct keys (default 100000)\n"
        "  --dist D                uniform, zipf:S (S > 0, e.g. zipf:1.1), or\n"
        "                          hot[:F] (share F of requests, default 1,\n"
        "                          for one key, the rest uniform) "
        "(default uniform)\n"
        "  --key-prefix STR        keys are STR0, STR1, ... (default "
        "bench:)\n"
        "  --limit N               hits allowed per window (default 100)\n"
        "  --window SECONDS        window length (default 60)\n"
        "  --rule NAME             name a rule configured on the server\n"
        "                          instead of the inline --limit/--window;\n"
        "                          then --limit N --window S, given together,\n"
        "                          only say which of the rule's limits\n"
        "                          --audit checks (--algorithm, --burst and\n"
        "                          --phase: how it counts; without --limit\n"
        "                          and --window there is nothing to audit\n"
        "                          against: --audit is skipped, with a\n"
        "                          note)\n"
        "  --levels T              hierarchical keys: key i is a user of\n"
        "                          tenant i mod T, and each check names two\n"
        "                          levels, decided all or nothing: the\n"
        "                          tenant's {PREFIXtJ}org under --org-rule\n"
        "                          and the user's {PREFIXtJ}uI under --rule;\n"
        "                          --audit checks both levels' windows\n"
        "                          (--limit: the user's, --org-limit: the\n"
        "                          organisation's, both of --window, fixed)\n"
        "                          and that no level was charged by a\n"
        "                          refused check: a window its level refused\n"
        "                          in admitted exactly its limit\n"
        "  --org-rule NAME         --levels: the organisation level's rule\n"
        "  --org-limit N           --levels: its limit per --window\n"
        "  --algorithm A           the audited limit's algorithm, as the\n"
        "                          server's rule names it: fixed-window\n"
        "                          (default), sliding-window,\n"
        "                          sliding-window-counter or gcra (--limit\n"
        "                          N --window S is then the\n"
        "                          rate, N per S). Not fixed-window: --rule\n"
        "                          only, as inline requests are fixed windows\n"
        "  --burst B               gcra: the burst (default: --limit)\n"
        "  --phase P               aligned (default) or per-caller: the\n"
        "                          audited windows start at each caller's\n"
        "                          offset, as the rule's phase: per-caller\n"
        "                          (--rule only; not for gcra)\n"
        "  --audit-margin-ms MS    sliding-window-counter: admissions stamped\n"
        "                          at least MS before a window ended are\n"
        "                          taken as counted when the next window's\n"
        "                          were decided; sliding-window: the\n"
        "                          windows checked are MS shorter (default\n"
        "                          250); the audit is\n"
        "                          flagged unreliable if an answer took\n"
        "                          longer\n"
        "  --op check|reserve|acquire  what each request is (default check):\n"
        "                          reserve: a RESERVE of --cost, each allowed\n"
        "                          one SETTLEd after --hold-ms with an actual\n"
        "                          uniform in [0, 2 x cost] (--settle-actual\n"
        "                          N: always N); acquire: an ACQUIRE on\n"
        "                          --rule (a concurrency rule), each lease\n"
        "                          held a uniform [0, --hold-ms] ms, then\n"
        "                          RELEASEd, unless the client crashes\n"
        "                          (--crash P: never releases). A settle or\n"
        "                          release keeps its request slot and is\n"
        "                          counted apart. --audit with acquire: at\n"
        "                          every grant, the caller's leases alive\n"
        "                          (start <= t < end - 5 ms, store times)\n"
        "                          are at most N (--limit N, or each\n"
        "                          answer's limit); with reserve: every key\n"
        "                          is checked before and after the run, and\n"
        "                          its counter must have moved by what the\n"
        "                          answers charged (at most 100000 --keys)\n"
        "  --hold-ms MS            see --op (default 0)\n"
        "  --crash P               see --op (default 0, in [0, 1])\n"
        "  --settle-actual N       see --op\n"
        "  --cost N                hits each request consumes (default 1)\n"
        "  --timeout-ms N          per request (default 1000)\n"
        "  --give-up SECONDS       end the run when no server has been\n"
        "                          connected this long (default 3)\n"
        "  --seed N                key sequence seed (default: from the "
        "clock)\n"
        "  --audit                 check every admission against the audited\n"
        "                          limit, placed by when the store decided it\n"
        "                          (decided_at_ms: one clock for every\n"
        "                          server; from a server without it, fixed\n"
        "                          windows are inferred from reset_after_ms):\n"
        "                          fixed-window, admitted cost per window <=\n"
        "                          N; gcra, admitted cost decided in any\n"
        "                          [a, b] <= B + (b - a) / T (T: S / N,\n"
        "                          in whole us); sliding-window-counter, each\n"
        "                          admission fit with the previous window's\n"
        "                          count as the store must have seen it;\n"
        "                          sliding-window, admitted cost decided in\n"
        "                          any (t - S + margin, t] <= N.\n"
        "                          Exit 1 if any check failed. An OK answer\n"
        "                          marked shadow_refused (a rule in shadow\n"
        "                          mode that would have refused) counts as\n"
        "                          not admitted: the\n"
        "                          server counts in shadow mode exactly as\n"
        "                          it enforces, and a refusal consumes "
        "nothing\n"
        "  --keep-awake            run an idle-priority spinning thread per "
        "CPU,\n"
        "                          so that idle vCPUs do not halt (see "
        "awake.c)\n"
        "  --progress, --no-progress  a live line every second (default: "
        "when\n"
        "                          stderr is a terminal)\n"
        "  --json FILE             write the results as JSON\n"
        "  --hist-csv FILE         write the latency distribution as CSV\n"
        "  --timeline-csv FILE     write latency over time as CSV, a row per\n"
        "                          100 ms of the measured run (answers\n"
        "                          received, their p50/p99/max): where in the\n"
        "                          run a tail came from\n"
        "  --plot FILE.png         draw the latency percentile curve "
        "(gnuplot)\n"
        "  --help                  print this and exit\n"
        "\n"
        "Exit status: 0 done, 1 the audit found admissions past the limit,\n"
        "2 bad arguments (or a --replay log not readable to its end), 3 no\n"
        "server reachable or it went away (a summary is still printed), 4 a\n"
        "report could not be written.\n");
}

/* Prints "rl-bench: <message>" and a pointer to --help; returns the usage
 * exit status so that callers can `return bad(...)`. */
static int bad(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static int bad(const char *fmt, ...)
{
    va_list ap;

    fprintf(stderr, "rl-bench: ");
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\n(rl-bench --help lists the options)\n");
    return RLB_EXIT_USAGE;
}

/* Parses a finite number in (min, max] (min excluded when open_min).
 * Returns 0 or RL_EINVAL. */
static int parse_num(const char *s, double min, double max, int open_min,
                     double *v)
{
    char *end;
    double x;

    if (s == NULL || *s == '\0')
        return RL_EINVAL;
    errno = 0;
    x = strtod(s, &end);
    if (errno != 0 || *end != '\0' || !isfinite(x) || x < min ||
        (open_min && x == min) || x > max)
        return RL_EINVAL;
    *v = x;
    return RL_OK;
}

/* Returns 0 or RL_EINVAL. */
static int parse_dist(const char *s, rlb_opts_t *o)
{
    if (strcmp(s, "uniform") == 0) {
        o->dist = RLB_DIST_UNIFORM;
        return RL_OK;
    }
    if (strncmp(s, "zipf:", 5) == 0) {
        o->dist = RLB_DIST_ZIPF;
        return parse_num(s + 5, 0, 100, 1, &o->zipf_s);
    }
    if (strcmp(s, "hot") == 0) {
        o->dist = RLB_DIST_HOT;
        o->hot_frac = 1;
        return RL_OK;
    }
    if (strncmp(s, "hot:", 4) == 0) {
        o->dist = RLB_DIST_HOT;
        return parse_num(s + 4, 0, 1, 1, &o->hot_frac);
    }
    return RL_EINVAL;
}

static int takes_value(const char *name)
{
    static const char *const names[] = {"--server",
                                        "--key-prefix",
                                        "--json",
                                        "--hist-csv",
                                        "--plot",
                                        "--timeline-csv",
                                        "--connections",
                                        "--duration",
                                        "--warmup",
                                        "--inflight",
                                        "--rate",
                                        "--requests",
                                        "--keys",
                                        "--tick-us",
                                        "--limit",
                                        "--window",
                                        "--cost",
                                        "--timeout-ms",
                                        "--give-up",
                                        "--seed",
                                        "--dist",
                                        "--rule",
                                        "--arrivals",
                                        "--algorithm",
                                        "--burst",
                                        "--phase",
                                        "--audit-margin-ms",
                                        "--tls-ca",
                                        "--tls-cert",
                                        "--tls-key",
                                        "--tls-server-name",
                                        "--op",
                                        "--hold-ms",
                                        "--crash",
                                        "--settle-actual",
                                        "--levels",
                                        "--org-rule",
                                        "--org-limit"};
    /* --replay's, the log flags named as rl-fit names them. */
    static const char *const replay_names[] = {
        "--replay",   "--replay-speed", "--format",   "--key",
        "--json-key", "--json-time",    "--json-cost"};
    size_t i;

    for (i = 0; i < sizeof(names) / sizeof(names[0]); i++)
        if (strcmp(name, names[i]) == 0)
            return 1;
    for (i = 0; i < sizeof(replay_names) / sizeof(replay_names[0]); i++)
        if (strcmp(name, replay_names[i]) == 0)
            return 1;
    return 0;
}

/* Counts the entries of a comma-separated server list. Returns 0, or RL_EINVAL
 * when an entry is empty or blank ("a,,b", a trailing comma): librlc
 * would refuse the list anyway, and --fleet must know N before anything
 * connects. */
static int count_servers(const char *list, uint32_t *n)
{
    const char *p = list;

    *n = 0;
    for (;;) {
        size_t len = strcspn(p, ",");
        if (strspn(p, " ") >= len)
            return RL_EINVAL;
        ++*n;
        if (p[len] == '\0')
            return 0;
        p += len + 1;
    }
}

/* The audited limit's algorithm, burst and phase against the rest.
 * Returns 0, or RLB_EXIT_USAGE after saying why. */
static int check_algo(const rlb_opts_t *o)
{
    /* The native protocol's inline limit has no algorithm or phase: the
     * server counts it in aligned fixed windows, so only a rule can be
     * audited as anything else. */
    if (o->rule == NULL && o->algo != RL_ALGO_FIXED)
        return bad("--algorithm %s needs --rule: inline requests are fixed "
                   "windows",
                   o->algo == RL_ALGO_GCRA          ? "gcra"
                   : o->algo == RL_ALGO_SLIDING_LOG ? "sliding-window"
                                                    : "sliding-window-counter");
    if (o->rule == NULL && o->per_caller)
        return bad("--phase per-caller needs --rule: inline requests are "
                   "aligned windows");
    if (o->burst != 0 && o->algo != RL_ALGO_GCRA)
        return bad("--burst is for --algorithm gcra");
    if (o->algo == RL_ALGO_GCRA && o->per_caller)
        return bad("--phase per-caller is for windows; a gcra has none");
    if (o->algo == RL_ALGO_SLIDING_LOG && o->per_caller)
        return bad("--phase per-caller is for windows; a sliding window has "
                   "none");
    if (o->algo == RL_ALGO_GCRA &&
        rl_gcra_interval_us(o->limit, o->window_s) == 0)
        return bad("--algorithm gcra: %" PRIu64 " per %" PRIu32
                   " s is faster than one per microsecond",
                   o->limit, o->window_s);
    if (o->algo == RL_ALGO_SLIDING_COUNTER && o->limit > RL_SWC_LIMIT_MAX)
        return bad("--algorithm sliding-window-counter takes a --limit of at "
                   "most %" PRIu64,
                   (uint64_t)RL_SWC_LIMIT_MAX);
    return 0;
}

static FILE *open_out(const char *opt, const char *path)
{
    FILE *f = fopen(path, "w");

    if (f == NULL)
        bad("%s: cannot write '%s': %s", opt, path, strerror(errno));
    return f;
}

int rlb_opts_parse(int argc, char **argv, rlb_opts_t *o)
{
    int i, have_inflight = 0, have_limit = 0, have_arrivals = 0;
    int have_speed = 0, have_keys = 0, have_dist = 0, have_cost = 0;
    const char *why = NULL;

    memset(o, 0, sizeof(*o));
    o->server = "127.0.0.1:7390";
    o->connections = 4;
    o->duration_s = 10;
    o->inflight = 64;
    o->keys = 100000;
    o->dist = RLB_DIST_UNIFORM;
    o->key_prefix = "bench:";
    o->limit = 100;
    o->window_s = 60;
    o->cost = 1;
    o->algo = RL_ALGO_FIXED;
    o->margin_ms = RLB_AUDIT_MARGIN_MS;
    o->timeout_ms = 1000;
    o->down_s = 3;
    o->progress = -1;
    o->seed = 0;
    o->replay_speed = 1;

    for (i = 1; i < argc; i++) {
        char *name = argv[i], *val = NULL, *eq;
        uint64_t v;
        double d;

        if (strcmp(name, "--help") == 0 || strcmp(name, "-h") == 0) {
            usage(stdout);
            exit(RLB_EXIT_OK);
        }
        if (strncmp(name, "--", 2) != 0)
            return bad("unexpected argument '%s'", name);
        if (strcmp(name, "--audit") == 0) {
            o->audit = 1;
            continue;
        }
        if (strcmp(name, "--fleet") == 0) {
            o->fleet = 1;
            continue;
        }
        if (strcmp(name, "--tls") == 0) {
            o->tls = 1;
            continue;
        }
        if (strcmp(name, "--tls-insecure") == 0) {
            o->tls = o->tls_insecure = 1;
            continue;
        }
        if (strcmp(name, "--keep-awake") == 0) {
            o->keep_awake = 1;
            continue;
        }
        if (strcmp(name, "--progress") == 0) {
            o->progress = 1;
            continue;
        }
        if (strcmp(name, "--no-progress") == 0) {
            o->progress = 0;
            continue;
        }
        eq = strchr(name, '=');
        if (eq != NULL)
            *eq = '\0';
        if (!takes_value(name))
            return bad("unknown option '%s'", name);
        if (eq != NULL) {
            val = eq + 1;
        } else if (i + 1 < argc) {
            val = argv[++i];
        } else {
            return bad("%s needs a value", name);
        }

#define STR(opt, dst)                                                          \
    if (strcmp(name, opt) == 0) {                                              \
        if (*val == '\0')                                                      \
            return bad("%s needs a value", opt);                               \
        dst = val;                                                             \
        continue;                                                              \
    }
#define INT(opt, lo, hi, dst)                                                  \
    if (strcmp(name, opt) == 0) {                                              \
        if (rl_parse_u64(val, lo, hi, &v) != RL_OK) {                          \
            fprintf(stderr,                                                    \
                    "rl-bench: %s wants a whole number in [%" PRIu64           \
                    ", %" PRIu64 "], not '%s'\n",                              \
                    opt, (uint64_t)(lo), (uint64_t)(hi), val);                 \
            return RLB_EXIT_USAGE;                                             \
        }                                                                      \
        dst = v;                                                               \
        continue;                                                              \
    }
#define NUM(opt, lo, hi, dst)                                                  \
    if (strcmp(name, opt) == 0) {                                              \
        if (parse_num(val, lo, hi, 1, &d) != 0) {                              \
            fprintf(stderr,                                                    \
                    "rl-bench: %s wants a number above %g, up to %g, not "     \
                    "'%s'\n",                                                  \
                    opt, (double)(lo), (double)(hi), val);                     \
            return RLB_EXIT_USAGE;                                             \
        }                                                                      \
        dst = d;                                                               \
        continue;                                                              \
    }
        STR("--server", o->server)
        STR("--tls-ca", o->tls_ca)
        STR("--tls-cert", o->tls_cert)
        STR("--tls-key", o->tls_key)
        STR("--tls-server-name", o->tls_name)
        STR("--key-prefix", o->key_prefix)
        STR("--rule", o->rule)
        STR("--org-rule", o->org_rule)
        STR("--json", o->json_path)
        STR("--hist-csv", o->csv_path)
        STR("--timeline-csv", o->timeline_path)
        STR("--plot", o->plot_path)
        STR("--replay", o->replay_path)
        STR("--format", o->log_format)
        STR("--key", o->log_key)
        STR("--json-key", o->log_key)
        STR("--json-time", o->log_time)
        STR("--json-cost", o->log_cost)
        if (strcmp(name, "--replay-speed") == 0) {
            if (parse_num(val, 0, 1e6, 0, &d) != 0)
                return bad("--replay-speed wants a number in [0, 1e6] (0: as "
                           "fast as possible), not '%s'",
                           val);
            o->replay_speed = d;
            have_speed = 1;
            continue;
        }
        if (strcmp(name, "--duration") == 0)
            o->have_duration = 1;
        if (strcmp(name, "--keys") == 0)
            have_keys = 1;
        if (strcmp(name, "--dist") == 0)
            have_dist = 1;
        if (strcmp(name, "--cost") == 0)
            have_cost = 1;
        INT("--connections", 1, 1024, o->connections)
        INT("--hold-ms", 0, 3600000, o->hold_ms)
        if (strcmp(name, "--settle-actual") == 0) {
            if (rl_parse_u64(val, 0, UINT32_MAX, &v) != RL_OK)
                return bad("--settle-actual wants a whole number in [0, "
                           "%" PRIu32 "], not '%s'",
                           UINT32_MAX, val);
            o->settle_fixed = 1;
            o->settle_actual = v;
            continue;
        }
        if (strcmp(name, "--crash") == 0) {
            if (parse_num(val, 0, 1, 0, &o->crash) != 0)
                return bad("--crash wants a probability in [0, 1], not '%s'",
                           val);
            continue;
        }
        if (strcmp(name, "--op") == 0) {
            if (strcmp(val, "check") == 0)
                o->op = RLB_OP_CHECK;
            else if (strcmp(val, "reserve") == 0)
                o->op = RLB_OP_RESERVE;
            else if (strcmp(val, "acquire") == 0)
                o->op = RLB_OP_ACQUIRE;
            else
                return bad("--op wants check, reserve or acquire, not '%s'",
                           val);
            continue;
        }
        NUM("--duration", 0, 86400, o->duration_s)
        if (strcmp(name, "--warmup") == 0) {
            if (parse_num(val, 0, 3600, 0, &d) != 0)
                return bad("--warmup wants seconds in [0, 3600], not '%s'",
                           val);
            o->warmup_s = d;
            continue;
        }
        if (strcmp(name, "--inflight") == 0)
            have_inflight = 1;
        INT("--inflight", 1, 65536, o->inflight)
        NUM("--rate", 0, 1e8, o->rate)
        NUM("--tick-us", 0, 999999, o->tick_us)
        INT("--requests", 1, UINT64_MAX, o->requests)
        INT("--keys", 1, UINT32_MAX, o->keys)
        if (strcmp(name, "--limit") == 0)
            have_limit = 1;
        if (strcmp(name, "--window") == 0)
            o->have_window = 1;
        INT("--limit", 1, INT64_MAX, o->limit)
        INT("--window", 1, RLC_WINDOW_MAX_S, o->window_s)
        INT("--cost", 1, UINT32_MAX, o->cost)
        INT("--levels", 1, 1000000, o->tenants)
        INT("--org-limit", 1, INT64_MAX, o->org_limit)
        INT("--timeout-ms", 1, 3600000, o->timeout_ms)
        NUM("--give-up", 0, 3600, o->down_s)
        INT("--seed", 0, UINT64_MAX, o->seed)
        if (strcmp(name, "--algorithm") == 0) {
            if (strcmp(val, "fixed-window") == 0)
                o->algo = RL_ALGO_FIXED;
            else if (strcmp(val, "sliding-window-counter") == 0)
                o->algo = RL_ALGO_SLIDING_COUNTER;
            else if (strcmp(val, "gcra") == 0)
                o->algo = RL_ALGO_GCRA;
            else if (strcmp(val, "sliding-window") == 0)
                o->algo = RL_ALGO_SLIDING_LOG;
            else
                return bad("--algorithm wants fixed-window, sliding-window, "
                           "sliding-window-counter or gcra, not '%s'",
                           val);
            continue;
        }
        if (strcmp(name, "--phase") == 0) {
            if (strcmp(val, "aligned") == 0)
                o->per_caller = 0;
            else if (strcmp(val, "per-caller") == 0)
                o->per_caller = 1;
            else
                return bad("--phase wants aligned or per-caller, not '%s'",
                           val);
            continue;
        }
        INT("--burst", 1, INT64_MAX, o->burst)
        INT("--audit-margin-ms", 0, 3600000, o->margin_ms)
        if (strcmp(name, "--arrivals") == 0) {
            have_arrivals = 1;
            if (strcmp(val, "each") == 0)
                o->arrivals = RLB_ARRIVE_EACH;
            else if (strcmp(val, "poisson") == 0)
                o->arrivals = RLB_ARRIVE_POISSON;
            else if (strcmp(val, "grouped") == 0)
                o->arrivals = RLB_ARRIVE_GROUPED;
            else
                return bad("--arrivals wants each, poisson or grouped, not "
                           "'%s'",
                           val);
            continue;
        }
        if (strcmp(name, "--dist") == 0) {
            if (parse_dist(val, o) != 0)
                return bad("--dist wants uniform, zipf:S (S > 0) or hot[:F] "
                           "(0 < F <= 1), not '%s'",
                           val);
            continue;
        }
#undef STR
#undef INT
#undef NUM
        return bad("unknown option '%s'", name);
    }

    if (count_servers(o->server, &o->nservers) != 0)
        return bad("--server wants HOST:PORT[,HOST:PORT...] with no empty "
                   "entry, not '%s'",
                   o->server);
    if (o->fleet && o->connections < o->nservers)
        return bad("--fleet over %" PRIu32 " servers needs at least as many "
                   "--connections, not %" PRIu32,
                   o->nservers, o->connections);
    if (o->op == RLB_OP_ACQUIRE) {
        /* A lease is of a concurrency rule; its audit is the leases alive
         * at each grant, no window. */
        if (o->rule == NULL)
            return bad("--op acquire needs --rule (a rule with concurrency)");
        if (o->have_window || o->algo != RL_ALGO_FIXED || o->per_caller ||
            o->burst != 0)
            return bad("--op acquire audits leases: not with --window, "
                       "--algorithm, --phase or --burst");
        o->lease_limit = have_limit ? o->limit : 0;
    } else if (o->crash > 0) {
        return bad("--crash is for --op acquire");
    }
    if (o->op == RLB_OP_CHECK && (o->hold_ms > 0 || o->settle_fixed))
        return bad("--hold-ms and --settle-actual are for --op reserve or "
                   "acquire");
    if (o->op == RLB_OP_RESERVE && o->audit && o->keys > RLB_LEDGER_KEYS_MAX)
        return bad("--op reserve --audit checks every key before and after: "
                   "at most %d --keys",
                   RLB_LEDGER_KEYS_MAX);
    if (o->op != RLB_OP_CHECK && o->replay_path != NULL)
        return bad("--replay sends checks: not with --op");
    if (o->rule != NULL && o->op == RLB_OP_ACQUIRE) {
        rl_check_t c = {.key = "k",
                        .key_len = 1,
                        .rule = o->rule,
                        .rule_len = strlen(o->rule)};
        if (rl_check_validate(&c) != RL_OK)
            return bad("--rule wants a name of at most %d bytes of "
                       "[A-Za-z0-9_.:-], not '%s'",
                       RLC_RULE_MAX, o->rule);
    } else if (o->rule != NULL) {
        /* The server would refuse a bad name on every request: say so
         * once, before anything is sent. */
        rl_check_t c = {.key = "k",
                        .key_len = 1,
                        .rule = o->rule,
                        .rule_len = strlen(o->rule)};
        if (rl_check_validate(&c) != RL_OK)
            return bad("--rule wants a name of at most %d bytes of "
                       "[A-Za-z0-9_.:-], not '%s'",
                       RLC_RULE_MAX, o->rule);
        if (have_limit != o->have_window && o->op == RLB_OP_CHECK)
            return bad("with --rule, give --limit N and --window S together "
                       "(the rule's window to audit), or neither");
        if (o->audit && !o->have_window && o->op == RLB_OP_CHECK) {
            o->audit = 0;
            o->audit_skipped = "--rule without --limit/--window: the rule's "
                               "window to audit against is not known";
            fprintf(stderr, "rl-bench: not auditing: %s\n", o->audit_skipped);
        }
    }
    if (check_algo(o) != 0)
        return RLB_EXIT_USAGE;
    if ((o->org_rule != NULL || o->org_limit != 0) && o->tenants == 0)
        return bad("--org-rule and --org-limit are for --levels");
    if (o->tenants > 0) {
        rl_check_t c = {.key = "k", .key_len = 1};
        if (o->rule == NULL || o->org_rule == NULL)
            return bad("--levels needs --rule (the users' level) and "
                       "--org-rule (the organisation's)");
        c.rule = o->org_rule;
        c.rule_len = strlen(o->org_rule);
        if (rl_check_validate(&c) != RL_OK)
            return bad("--org-rule wants a name of at most %d bytes of "
                       "[A-Za-z0-9_.:-], not '%s'",
                       RLC_RULE_MAX, o->org_rule);
        if (strcmp(o->rule, o->org_rule) == 0)
            return bad("--levels: --rule and --org-rule must differ");
        if (o->op != RLB_OP_CHECK || o->replay_path != NULL)
            return bad("--levels sends checks of rl-bench's keys: not with "
                       "--op or --replay");
        if (o->algo != RL_ALGO_FIXED || o->per_caller)
            return bad("--levels audits aligned fixed windows: not with "
                       "--algorithm or --phase");
        if (o->tenants > o->keys)
            return bad("--levels: more tenants than --keys");
        if (o->audit && o->org_limit == 0)
            return bad("--levels --audit needs --org-limit (the "
                       "organisation's limit per --window)");
    }
    if (o->rate > 0 && have_inflight)
        return bad("give --inflight (closed loop) or --rate (open loop), "
                   "not both");
    if (o->replay_path == NULL) {
        if (have_speed || o->log_format || o->log_key || o->log_time ||
            o->log_cost)
            return bad("--replay-speed, --format, --key, --json-key, "
                       "--json-time and --json-cost are for --replay");
    } else {
        /* The log says who asks, how much and when. */
        if (o->rate > 0)
            return bad("--replay takes its times from the log: not with "
                       "--rate (--replay-speed scales them)");
        if (have_keys || have_dist)
            return bad("--replay takes its callers from the log: not with "
                       "--keys or --dist");
        if (have_cost)
            return bad("--replay takes each request's cost from the log "
                       "(--json-cost): not with --cost");
        if (have_arrivals || o->tick_us > 0)
            return bad("--replay sends each request at the log's time: not "
                       "with --arrivals or --tick-us");
        if (o->audit)
            return bad("--audit is not for --replay: its callers are not "
                       "rl-bench's numbered keys");
        /* Open loop: the request slots per connection, the bound on
         * checks in flight. */
        if (o->replay_speed > 0 && !have_inflight)
            o->inflight = 1024;
        if (!o->have_duration)
            o->duration_s = 0; /* no cap: to the log's end */
    }
    if (o->tick_us > 0) {
        if (have_arrivals && o->arrivals != RLB_ARRIVE_GROUPED)
            return bad("--tick-us is for --arrivals grouped");
        o->arrivals = RLB_ARRIVE_GROUPED;
    }
    /* The longest key is the prefix plus ten digits; a level's, the
     * prefix, the tenant's and the user's and 5 more. */
    if (strlen(o->key_prefix) + 25 > RLC_KEY_MAX)
        return bad("--key-prefix is longer than %d bytes", RLC_KEY_MAX - 25);
    if (o->dist == RLB_DIST_ZIPF && o->keys > 50000000)
        return bad("--dist zipf takes at most 50000000 keys");
    if (o->plot_path != NULL && !rlb_have_program("gnuplot"))
        return bad("--plot needs gnuplot on PATH (Debian: apt-get install "
                   "gnuplot-nox)");
    if (o->json_path != NULL &&
        (o->json = open_out("--json", o->json_path)) == NULL)
        return RLB_EXIT_USAGE;
    if (o->csv_path != NULL &&
        (o->csv = open_out("--hist-csv", o->csv_path)) == NULL)
        return RLB_EXIT_USAGE;
    if (o->timeline_path != NULL &&
        (o->timeline = open_out("--timeline-csv", o->timeline_path)) == NULL)
        return RLB_EXIT_USAGE;
    if (o->replay_path != NULL) {
        int rc = rlb_replay_open(&o->replay, o, &why);
        if (rc == RL_EIO)
            return bad("--replay: cannot read '%s': %s", o->replay_path, why);
        if (rc != 0)
            return bad("--replay: %s", why);
    }
    if (o->progress < 0)
        o->progress = isatty(STDERR_FILENO);
    return 0;
}

void rlb_opts_tls(const rlb_opts_t *o, rlc_options_t *ro)
{
    ro->tls = o->tls;
    ro->tls_insecure = o->tls_insecure;
    ro->tls_ca_file = o->tls_ca;
    ro->tls_cert_file = o->tls_cert;
    ro->tls_key_file = o->tls_key;
    ro->tls_server_name = o->tls_name;
}
