/* rl-bench --replay (label: integration): small access logs the test
 * writes (JSON lines, the same gzip'd, a combined log; a few callers over
 * about 2 s, and lines the parser must reject), replayed at ten times
 * their speed against an rl-server on the memory store that the test
 * starts on a free loopback port. It checks that every request line was
 * sent exactly once, that the server counted each caller's requests and
 * costs as the log has them (asked afterwards, key by key), that the
 * rejected lines were counted apart, that a truncated gzip log is
 * reported, and that a replay was never faster than its schedule allows.
 * How much slower it was is printed, not asserted: a loaded CI machine
 * must pass too. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>

#include "rl_error.h"
#include "rl_window.h"
#include "rlt.h"

#ifndef RL_SERVER_BIN
#error "RL_SERVER_BIN must name the rl-server binary"
#endif
#ifndef RL_BENCH_BIN
#error "RL_BENCH_BIN must name the rl-bench binary"
#endif

#define T0_MS UINT64_C(1700000000000) /* the log's first request */
#define SPAN_MS 2000                  /* the callers' requests spread over */
#define SPEED "10"
#define BIG_LIMIT "1000000000"
#define NCALLERS 3

static const char *const callers[NCALLERS] = {"alice", "bob", "carol"};
static const int counts[NCALLERS] = {40, 90, 170};

static char tmpdir[64];
static char json_path[128], out_path[128], err_path[128];
static char log_json[128], log_gz[128], log_trunc[128], log_clf[128];
static rlt_server_t server = {.pid = -1};

/* What the JSON log holds, as the test wrote it. */
static struct {
    uint64_t lines, requests, malformed, span_ms;
    uint64_t n[NCALLERS];    /* requests per caller */
    uint64_t cost[NCALLERS]; /* their costs summed */
} lj;

/* The combined log: callers by address. */
#define NADDRS 2
static const char *const addrs[NADDRS] = {"10.0.0.1", "10.0.0.2"};
static const int addr_counts[NADDRS] = {30, 60};
static uint64_t clf_span_ms;

/* ---- the logs ---------------------------------------------------------- */

typedef struct ev_s {
    uint64_t ms;
    int who, cost;
} ev_t;

static int ev_cmp(const void *a, const void *b)
{
    const ev_t *x = a, *y = b;

    if (x->ms != y->ms)
        return x->ms < y->ms ? -1 : 1;
    return x->who - y->who;
}

/* "2023-11-14T22:13:20.123Z" */
static void iso(uint64_t ms, char *buf, size_t cap)
{
    time_t s = (time_t)(ms / 1000);
    struct tm tm;

    size_t n;

    gmtime_r(&s, &tm);
    n = strftime(buf, cap, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(buf + n, cap - n, ".%03uZ", (unsigned)(ms % 1000));
}

/* Each caller's requests evenly over SPAN_MS, costs 1, 2, 3 in turn,
 * merged in time order; a garbage line every 50 requests, one line with
 * no user, one whose user makes a key over 512 bytes, and one of alice's
 * stamped at the log's start in the middle of it (out of order: sent at
 * the latest time before it). Returns the whole text (caller frees). */
static char *make_json_log(void)
{
    ev_t ev[512];
    size_t nev = 0, i, len = 0, cap = 1 << 20;
    char *out = malloc(cap), t[40], longuser[601];
    int c, k;

    assert_non_null(out);
    memset(&lj, 0, sizeof(lj));
    for (c = 0; c < NCALLERS; c++)
        for (k = 0; k < counts[c]; k++) {
            ev[nev].ms = T0_MS + (uint64_t)(SPAN_MS * k / counts[c]);
            ev[nev].who = c;
            ev[nev].cost = 1 + k % 3;
            if (ev[nev].ms - T0_MS > lj.span_ms)
                lj.span_ms = ev[nev].ms - T0_MS;
            nev++;
        }
    qsort(ev, nev, sizeof(ev[0]), ev_cmp);
    memset(longuser, 'x', 600);
    longuser[600] = '\0';
#define PUT(...)                                                               \
    (len += (size_t)snprintf(out + len, cap - len, __VA_ARGS__), lj.lines++)
    for (i = 0; i < nev; i++) {
        iso(ev[i].ms, t, sizeof(t));
        PUT("{\"time\": \"%s\", \"user\": \"%s\", \"cost\": %d, "
            "\"path\": \"/a\"}\n",
            t, callers[ev[i].who], ev[i].cost);
        lj.requests++;
        lj.n[ev[i].who]++;
        lj.cost[ev[i].who] += (uint64_t)ev[i].cost;
        if (i % 50 == 0) {
            PUT("this is not a log line\n");
            lj.malformed++;
        }
        if (i == nev / 2) {
            iso(T0_MS, t, sizeof(t));
            PUT("{\"time\": \"%s\", \"user\": \"alice\", \"cost\": 1}\n", t);
            lj.requests++;
            lj.n[0]++;
            lj.cost[0]++;
            PUT("{\"time\": \"%s\", \"path\": \"/no-user\"}\n", t);
            PUT("{\"time\": \"%s\", \"user\": \"%s\"}\n", t, longuser);
        }
    }
#undef PUT
    assert_true(len < cap);
    return out;
}

static void write_file(const char *path, const char *text, size_t n)
{
    FILE *f = fopen(path, "wb");

    assert_non_null(f);
    assert_int_equal(fwrite(text, 1, n, f), n);
    assert_int_equal(fclose(f), 0);
}

static void write_gz(const char *path, const char *text, size_t n)
{
    gzFile gz = gzopen(path, "wb");

    assert_non_null(gz);
    assert_int_equal(gzwrite(gz, text, (unsigned)n), (int)n);
    assert_int_equal(gzclose(gz), Z_OK);
}

/* The combined log: each address's requests evenly over SPAN_MS, whole
 * seconds as the format writes them, user "-". */
static void make_clf_log(void)
{
    char *out = malloc(1 << 16), t[40];
    size_t len = 0;
    int a, k;

    assert_non_null(out);
    clf_span_ms = 0;
    for (k = 0; k < 60; k++)
        for (a = 0; a < NADDRS; a++) {
            uint64_t ms;
            time_t s;
            struct tm tm;
            if (k >= addr_counts[a])
                continue;
            ms = T0_MS + (uint64_t)(SPAN_MS * k / addr_counts[a]);
            s = (time_t)(ms / 1000);
            gmtime_r(&s, &tm);
            strftime(t, sizeof(t), "%d/%b/%Y:%H:%M:%S +0000", &tm);
            if ((uint64_t)s * 1000 - T0_MS > clf_span_ms)
                clf_span_ms = (uint64_t)s * 1000 - T0_MS;
            len += (size_t)snprintf(out + len, (1 << 16) - len,
                                    "%s - - [%s] \"GET /x HTTP/1.1\" 200 12 "
                                    "\"-\" \"test\"\n",
                                    addrs[a], t);
        }
    assert_true(len < (1 << 16));
    write_file(log_clf, out, len);
    free(out);
}

/* ---- running rl-bench -------------------------------------------------- */

/* Runs rl-bench with the given arguments (NULL-terminated, after argv[0]),
 * stdout and stderr to files; *ms: how long it ran. Returns its exit
 * status, or RL_EIO if it did not exit normally within a minute. */
static int bench(uint64_t *ms, const char *first, ...)
{
    char *argv[64];
    va_list ap;
    int n = 0;

    argv[n++] = RL_BENCH_BIN;
    va_start(ap, first);
    for (const char *a = first; a != NULL && n < 63;
         a = va_arg(ap, const char *))
        argv[n++] = (char *)a;
    va_end(ap);
    argv[n] = NULL;
    return rlt_run(argv, out_path, err_path, 60000, ms);
}


/* The raw value token of a top-level JSON field, or fails the test. */
static void field(const char *json, const char *name, char *out, size_t cap)
{
    char pat[80];
    const char *p;
    size_t n;

    snprintf(pat, sizeof(pat), "\n  \"%s\": ", name);
    p = strstr(json, pat);
    if (p == NULL)
        fail_msg("JSON has no field %s", name);
    p += strlen(pat);
    n = strcspn(p, ",\n");
    if (n >= cap)
        n = cap - 1;
    memcpy(out, p, n);
    out[n] = '\0';
}

static double num(const char *json, const char *name)
{
    char v[64];

    field(json, name, v, sizeof(v));
    return strtod(v, NULL);
}

static void expect_num(const char *json, const char *name, uint64_t want)
{
    double v = num(json, name);

    if (v != (double)want)
        fail_msg("%s is %.0f, expected %llu", name, v,
                 (unsigned long long)want);
}

static void expect_token(const char *json, const char *name, const char *want)
{
    char v[64];

    field(json, name, v, sizeof(v));
    if (strcmp(v, want) != 0)
        fail_msg("%s is %s, expected %s", name, v, want);
}

static char *result_json(void)
{
    char *json = rlt_slurp(json_path);

    if (json == NULL || json[0] == '\0') {
        rlt_tail(err_path, 20);
        fail_msg("rl-bench wrote no JSON");
    }
    return json;
}

/* What the server has counted for key in the current window of limit per
 * RL_WINDOW_MAX_S: one more check of cost 1, its `used` (this one
 * included) and code. */
static uint64_t used_of(const char *key, uint64_t limit, int *code)
{
    rl_check_t q = rlt_check(7, key, limit, RL_WINDOW_MAX_S, 1);
    rlt_result_t res;

    assert_int_equal(rlt_ask(server.port, &q, &res), 0);
    *code = res.r.code;
    return res.r.used;
}

/* The counts a replay's JSON gives for the whole log. */
static void expect_log_counts(const char *json)
{
    expect_num(json, "replay_lines", lj.lines);
    expect_num(json, "replay_requests", lj.requests);
    expect_num(json, "replay_malformed", lj.malformed);
    expect_num(json, "replay_no_key", 1);
    expect_num(json, "replay_bad_key", 1);
    expect_num(json, "replay_out_of_order", 1);
    expect_token(json, "replay_read_error", "false");
    expect_token(json, "replay_complete", "true");
    /* every request line sent exactly once: no more, none lost */
    expect_num(json, "sent_total", lj.requests);
    expect_num(json, "sent", lj.requests);
    expect_num(json, "errors", 0);
    expect_num(json, "unsent", 0);
}

/* Open loop: never faster than the schedule allows (the last request is
 * due span / speed after the start, and is not sent before); how much
 * slower is printed. */
static void expect_schedule(const char *json, uint64_t span_ms,
                            uint64_t wall_ms)
{
    double sched = num(json, "replay_scheduled_s");
    double took = num(json, "seconds");

    assert_true(sched > (double)span_ms / 10000 - 0.0015 &&
                sched < (double)span_ms / 10000 + 0.0015);
    if (took + 0.001 < sched || (double)wall_ms + 1 < sched * 1000)
        fail_msg("replay took %.3f s (%llu ms wall), faster than its "
                 "schedule of %.3f s",
                 took, (unsigned long long)wall_ms, sched);
    print_message("replay: scheduled %.3f s, took %.3f s (%llu ms with "
                  "start-up); lateness p50 %.0f us, p99 %.0f us, "
                  "slot waits %.0f\n",
                  sched, took, (unsigned long long)wall_ms,
                  num(json, "late_p50_us"), num(json, "late_p99_us"),
                  num(json, "slot_waits"));
}

/* ---- tests ------------------------------------------------------------- */

static int setup(void **state)
{
    char *text;
    size_t n;
    char *argv[] = {"--log-level", (char *)rlt_log_level("error"), NULL};

    (void)state;
    snprintf(tmpdir, sizeof(tmpdir), "/tmp/rl-bench-replay.XXXXXX");
    if (mkdtemp(tmpdir) == NULL)
        return RL_EIO;
    snprintf(json_path, sizeof(json_path), "%s/out.json", tmpdir);
    snprintf(out_path, sizeof(out_path), "%s/stdout", tmpdir);
    snprintf(err_path, sizeof(err_path), "%s/stderr", tmpdir);
    snprintf(log_json, sizeof(log_json), "%s/access.json", tmpdir);
    snprintf(log_gz, sizeof(log_gz), "%s/access.json.gz", tmpdir);
    snprintf(log_trunc, sizeof(log_trunc), "%s/truncated.json.gz", tmpdir);
    snprintf(log_clf, sizeof(log_clf), "%s/access.log", tmpdir);
    text = make_json_log();
    n = strlen(text);
    write_file(log_json, text, n);
    write_gz(log_gz, text, n);
    write_gz(log_trunc, text, n);
    free(text);
    make_clf_log();
    /* One server for every test: each test's keys have a prefix of their
     * own. */
    return rlt_server_start(&server, RL_SERVER_BIN, 0, argv) == RL_OK ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    if (server.pid > 0)
        rlt_server_stop(&server);
    rlt_rmtree(tmpdir);
    return 0;
}

/* The JSON log at 10x, each line's cost from its cost field, under a limit
 * nothing reaches: every request allowed, and each caller's costs summed
 * at the server exactly as the log has them. */
static void test_json_costs(void **state)
{
    char key[64], *json;
    uint64_t wall_ms = 0;
    int c, code;

    (void)state;
    assert_int_equal(bench(&wall_ms, "--server", server.addr, "--replay",
                           log_json, "--replay-speed", SPEED, "--json-cost",
                           "cost", "--key-prefix", "r1:", "--limit", BIG_LIMIT,
                           "--window", "31622400", "--connections", "4",
                           "--timeout-ms", "10000", "--json", json_path, NULL),
                     0);
    json = result_json();
    expect_log_counts(json);
    expect_token(json, "mode", "\"open\"");
    expect_num(json, "allowed", lj.requests);
    expect_num(json, "denied", 0);
    expect_schedule(json, lj.span_ms, wall_ms);
    free(json);
    for (c = 0; c < NCALLERS; c++) {
        snprintf(key, sizeof(key), "r1:%s", callers[c]);
        assert_int_equal(used_of(key, 1000000000, &code), lj.cost[c] + 1);
        assert_int_equal(code, 1);
    }
}

/* The same log gzip'd, cost 1 each (no --json-cost), under 60 per window:
 * a caller with fewer requests is allowed them all, the others exactly 60,
 * whatever order the connections delivered them in. */
static void test_gzip_limit(void **state)
{
    char key[64], *json;
    uint64_t wall_ms = 0, allowed = 0;
    int c, code;

    (void)state;
    assert_int_equal(bench(&wall_ms, "--server", server.addr, "--replay",
                           log_gz, "--replay-speed", SPEED, "--key-prefix",
                           "r2:", "--limit", "60", "--window", "31622400",
                           "--timeout-ms", "10000", "--json", json_path, NULL),
                     0);
    json = result_json();
    expect_log_counts(json);
    for (c = 0; c < NCALLERS; c++)
        allowed += lj.n[c] < 60 ? lj.n[c] : 60;
    expect_num(json, "allowed", allowed);
    expect_num(json, "denied", lj.requests - allowed);
    expect_schedule(json, lj.span_ms, wall_ms);
    free(json);
    for (c = 0; c < NCALLERS; c++) {
        uint64_t used;
        snprintf(key, sizeof(key), "r2:%s", callers[c]);
        used = used_of(key, 60, &code);
        if (lj.n[c] < 60) {
            assert_int_equal(code, 1);
            assert_int_equal(used, lj.n[c] + 1);
        } else {
            assert_int_equal(code, 2);
        }
    }
}

/* A combined log, callers by address (--format combined --key addr). */
static void test_combined(void **state)
{
    char key[64], *json;
    uint64_t wall_ms = 0, total = 0;
    int a, code;

    (void)state;
    for (a = 0; a < NADDRS; a++)
        total += (uint64_t)addr_counts[a];
    assert_int_equal(bench(&wall_ms, "--server", server.addr, "--replay",
                           log_clf, "--replay-speed", SPEED, "--format",
                           "combined", "--key", "addr", "--key-prefix",
                           "r3:", "--limit", BIG_LIMIT, "--window", "31622400",
                           "--timeout-ms", "10000", "--json", json_path, NULL),
                     0);
    json = result_json();
    expect_num(json, "replay_lines", total);
    expect_num(json, "replay_requests", total);
    expect_num(json, "replay_malformed", 0);
    expect_num(json, "sent_total", total);
    expect_num(json, "allowed", total);
    expect_token(json, "replay_complete", "true");
    expect_schedule(json, clf_span_ms, wall_ms);
    free(json);
    for (a = 0; a < NADDRS; a++) {
        snprintf(key, sizeof(key), "r3:%s", addrs[a]);
        assert_int_equal(used_of(key, 1000000000, &code),
                         (uint64_t)addr_counts[a] + 1);
    }
}

/* Speed 0: as fast as answers come, closed loop; every line still sent
 * once, and no lateness (there is no schedule). */
static void test_fastest(void **state)
{
    char key[64], *json;
    int c, code;

    (void)state;
    assert_int_equal(bench(NULL, "--server", server.addr, "--replay", log_json,
                           "--replay-speed", "0", "--json-cost", "cost",
                           "--inflight", "8", "--key-prefix", "r4:", "--limit",
                           BIG_LIMIT, "--window", "31622400", "--timeout-ms",
                           "10000", "--json", json_path, NULL),
                     0);
    json = result_json();
    expect_log_counts(json);
    expect_token(json, "mode", "\"closed\"");
    expect_token(json, "late_p99_us", "null");
    free(json);
    for (c = 0; c < NCALLERS; c++) {
        snprintf(key, sizeof(key), "r4:%s", callers[c]);
        assert_int_equal(used_of(key, 1000000000, &code), lj.cost[c] + 1);
    }
}

/* A gzip log cut short: what was read is replayed, and the run says the
 * log was not read to its end (exit 2, as for a log that cannot open). */
static void test_truncated(void **state)
{
    struct stat st;
    char *json;
    double req;

    (void)state;
    assert_int_equal(stat(log_trunc, &st), 0);
    assert_int_equal(truncate(log_trunc, st.st_size * 6 / 10), 0);
    assert_int_equal(bench(NULL, "--server", server.addr, "--replay", log_trunc,
                           "--replay-speed", "0", "--key-prefix",
                           "r5:", "--json", json_path, NULL),
                     2);
    json = result_json();
    expect_token(json, "replay_read_error", "true");
    expect_token(json, "replay_complete", "false");
    req = num(json, "replay_requests");
    assert_true(req > 0 && req < (double)lj.requests);
    assert_true(num(json, "sent_total") == req);
    free(json);
}

/* Replay flags that contradict the rest are refused before anything is
 * sent. */
static void test_bad_arguments(void **state)
{
    char missing[160];

    (void)state;
    snprintf(missing, sizeof(missing), "%s/no-such-log", tmpdir);
    assert_int_equal(
        bench(NULL, "--server", server.addr, "--replay", missing, NULL), 2);
    assert_int_equal(bench(NULL, "--server", server.addr, "--replay", log_json,
                           "--rate", "100", NULL),
                     2);
    assert_int_equal(bench(NULL, "--server", server.addr, "--replay", log_json,
                           "--audit", NULL),
                     2);
    assert_int_equal(bench(NULL, "--server", server.addr, "--replay", log_json,
                           "--replay-speed", "-1", NULL),
                     2);
    assert_int_equal(
        bench(NULL, "--server", server.addr, "--format", "json", NULL), 2);
    assert_int_equal(bench(NULL, "--server", server.addr, "--replay", log_clf,
                           "--format", "combined", "--key", "path", NULL),
                     2);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_json_costs), cmocka_unit_test(test_gzip_limit),
        cmocka_unit_test(test_combined),   cmocka_unit_test(test_fastest),
        cmocka_unit_test(test_truncated),  cmocka_unit_test(test_bad_arguments),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
