/* rl-bench --op reserve and --op acquire (label: integration): short runs
 * against spawned rl-servers with a rules file of a concurrency rule (N 3,
 * lease 1 s) and a rate rule. The lease audit must pass with crashed
 * clients on one server (memory store) and on three servers over one
 * Redis, and must fail (exit 1) when told a smaller N than the rule's; a
 * reserve run's settles must add up, and with --audit every counter must
 * have moved by what the answers charged. Nothing here asserts a speed. */
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
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "rl_error.h"
#include "rlt.h"

#ifndef RL_SERVER_BIN
#error "RL_SERVER_BIN must name the rl-server binary"
#endif
#ifndef RL_BENCH_BIN
#error "RL_BENCH_BIN must name the rl-bench binary"
#endif

#define NSERVERS 3

static char tmpdir[64];
static char json_path[128], out_path[128], err_path[128], rules_path[128];
static char secret_path[128];
static rlt_server_t servers[NSERVERS] = {{.pid = -1}, {.pid = -1}, {.pid = -1}};
static char server_list[NSERVERS * 32];
static rlt_redis_t redis;
static int have_redis;

static const char rules[] = "rules:\n"
                            "  churn:\n"
                            "    concurrency: 3\n"
                            "    lease: 1s\n"
                            "  tokens:\n"
                            "    limits: [100000000/30d]\n";

/* Starts n rl-servers on the rules file, over the test's Redis when
 * redis_port > 0 with the fleet's --handle-secret-file (else each on its
 * own memory store); server_list is their addresses. Returns 0 or -1. */
static int servers_start(int n, int redis_port)
{
    char raddr[64];
    size_t len = 0;
    int i;
    /* A loaded CI machine may stretch a Redis round trip past the default
     * timeout; a server would then fail open, which the audit leaves out.
     * Without Redis the NULL ends the list before those flags. */
    char *argv[] = {"--log-level",
                    "error",
                    "--config",
                    rules_path,
                    redis_port > 0 ? "--redis" : NULL,
                    raddr,
                    "--redis-timeout-ms",
                    "5000",
                    "--handle-secret-file",
                    secret_path,
                    NULL};

    snprintf(raddr, sizeof(raddr), "127.0.0.1:%d", redis_port);
    for (i = 0; i < n; i++) {
        if (rlt_server_start(&servers[i], RL_SERVER_BIN, 0, argv) != RL_OK)
            return -1;
        len += (size_t)snprintf(server_list + len, sizeof(server_list) - len,
                                "%s%s", i ? "," : "", servers[i].addr);
    }
    return 0;
}

/* Every test's teardown: a failed assertion skips the test's own stop,
 * and its rl-servers must not outlive it. */
static int servers_teardown(void **state)
{
    int i;

    (void)state;
    for (i = 0; i < NSERVERS; i++) {
        if (servers[i].pid > 0)
            rlt_server_stop(&servers[i]);
        servers[i].pid = -1;
    }
    return 0;
}

/* Runs rl-bench with the given arguments (NULL-terminated), stdout and
 * stderr to files. Returns its exit status, or RL_EIO if it did not exit
 * normally within a minute. */
static int bench(const char *first, ...)
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
    return rlt_run(argv, out_path, err_path, 60000, NULL);
}


/* A top-level JSON number field, or fails the test. */
static double num(const char *json, const char *name)
{
    char pat[80];
    const char *p;

    snprintf(pat, sizeof(pat), "\n  \"%s\": ", name);
    p = strstr(json, pat);
    if (p == NULL)
        fail_msg("JSON has no field %s", name);
    return strtod(p + strlen(pat), NULL);
}

/* Waits (up to 15 s) until every server of server_list grants a
 * reservation. Returns 0, or -1 when one never did. */
static int servers_ready(int n)
{
    char nreq[16];
    uint64_t end = rlt_mono_ms() + 15000;

    snprintf(nreq, sizeof(nreq), "%d", n);
    while (rlt_mono_ms() < end) {
        char *json;
        int ok;
        /* --fleet, one connection per server, one request each. */
        if (bench("--server", server_list, "--fleet", "--connections", nreq,
                  "--inflight", "1", "--requests", nreq, "--op", "reserve",
                  "--rule", "tokens", "--json", json_path, NULL) != 0)
            return -1;
        json = rlt_slurp(json_path);
        if (json == NULL)
            return -1;
        ok = num(json, "allowed") == n;
        free(json);
        if (ok)
            return 0;
        rlt_nap_ms(50);
    }
    return -1;
}

/* An acquire run with crashes on the servers of server_list, audited
 * against N = limit ("" : from the answers). Returns rl-bench's status;
 * *json is its JSON (free it). */
static int acquire_run(const char *limit, int fleet, char **json)
{
    int rc;

    if (*limit != '\0')
        rc = bench("--server", server_list, "--op", "acquire", "--rule",
                   "churn", "--keys", "2", "--crash", "0.3", "--hold-ms", "30",
                   "--connections", "3", "--inflight", "4", "--duration", "2",
                   "--audit", "--limit", limit, "--json", json_path,
                   fleet ? "--fleet" : NULL, NULL);
    else
        rc = bench("--server", server_list, "--op", "acquire", "--rule",
                   "churn", "--keys", "2", "--crash", "0.3", "--hold-ms", "30",
                   "--connections", "3", "--inflight", "4", "--duration", "2",
                   "--audit", "--json", json_path, fleet ? "--fleet" : NULL,
                   NULL);
    rlt_tail(out_path, 12); /* the summary, for whoever reads the log */
    *json = rlt_slurp(json_path);
    assert_non_null(*json);
    return rc;
}

/* What every correct acquire run shows: leases granted and checked, some
 * clients crashed, refusals (3 connections x 4 in flight on 2 callers of
 * N 3 cannot all hold), and at most 3 alive at any grant. How many are
 * granted is chance: a crashed lease holds its slot for the whole second
 * of its lease, so each of the 6 slots sees a run of released leases
 * (geometric, mean 2.3) before each crash, and two crashes use up 2 s;
 * a run of 12 crashes and 7 releases happened 3 times in 16. What cannot
 * be chance is the floor: each slot granted at the start and granted
 * again once its first lease, crashed or not, has ended, under 1 s later
 * (a lease that never expired would leave 6). */
static void expect_leases_ok(const char *json)
{
    assert_true(num(json, "allowed") >= 12);
    assert_true(num(json, "denied") > 0);
    assert_true(num(json, "crashed") > 0);
    assert_true(num(json, "follow_ok") > 0);
    assert_true(num(json, "follow_errors") == 0);
    assert_true(num(json, "server_errors") == 0);
    assert_true(num(json, "lease_audit_checked") >= num(json, "allowed"));
    assert_true(num(json, "lease_audit_over") == 0);
    assert_true(num(json, "lease_audit_max_alive") >= 1);
    assert_true(num(json, "lease_audit_max_alive") <= 3);
}

static void test_acquire_memory(void **state)
{
    char *json;

    (void)state;
    assert_int_equal(servers_start(1, 0), 0);
    assert_int_equal(acquire_run("", 0, &json), 0);
    expect_leases_ok(json);
    /* Hammered, the caller's three slots fill. */
    assert_true(num(json, "lease_audit_max_alive") == 3);
    free(json);
    /* Told N is 2, the audit must see the third lease and fail. */
    assert_int_equal(acquire_run("2", 0, &json), 1);
    assert_true(num(json, "lease_audit_over") > 0);
    free(json);
}

/* Three instances on one Redis: the leases of a caller are counted in the
 * store whichever instance takes them, and the audit puts every answer on
 * the store's one clock. */
static void test_acquire_redis_fleet(void **state)
{
    char *json;

    (void)state;
    if (!have_redis)
        skip();
    assert_int_equal(servers_start(NSERVERS, redis.port), 0);
    assert_int_equal(servers_ready(NSERVERS), 0);
    assert_int_equal(acquire_run("3", 1, &json), 0);
    expect_leases_ok(json);
    free(json);
}

static void test_reserve(void **state)
{
    char *json;

    (void)state;
    assert_int_equal(servers_start(1, 0), 0);
    /* Every reservation of 5 settled at 0: refunded 5 each. */
    assert_int_equal(bench("--server", server_list, "--op", "reserve", "--rule",
                           "tokens", "--keys", "50", "--cost", "5",
                           "--settle-actual", "0", "--connections", "2",
                           "--inflight", "8", "--duration", "1", "--json",
                           json_path, NULL),
                     0);
    json = rlt_slurp(json_path);
    assert_non_null(json);
    assert_true(num(json, "allowed") > 0);
    assert_true(num(json, "follow_sent") == num(json, "allowed"));
    assert_true(num(json, "follow_ok") == num(json, "follow_sent"));
    assert_true(num(json, "follow_errors") == 0);
    assert_true(num(json, "refunded") == 5 * num(json, "follow_ok"));
    assert_true(num(json, "excess") == 0);
    free(json);
    /* Actuals drawn in [0, 10], held 2 ms: both sides occur. */
    assert_int_equal(bench("--server", server_list, "--op", "reserve", "--rule",
                           "tokens", "--keys", "50", "--cost", "5", "--hold-ms",
                           "2", "--connections", "2", "--inflight", "8",
                           "--duration", "1", "--json", json_path, NULL),
                     0);
    json = rlt_slurp(json_path);
    assert_non_null(json);
    assert_true(num(json, "follow_ok") == num(json, "allowed"));
    assert_true(num(json, "follow_ok") > 20);
    assert_true(num(json, "refunded") > 0);
    assert_true(num(json, "excess") > 0);
    free(json);
}

/* A reserve run with --audit over the servers of server_list (--fleet,
 * one connection each): settles at random actuals, every key checked
 * before and after. Returns rl-bench's status; *json its JSON. */
static int ledger_run(int n, char **json)
{
    char conns[16];
    int rc;

    snprintf(conns, sizeof(conns), "%d", n);
    rc = bench("--server", server_list, "--fleet", "--connections", conns,
               "--op", "reserve", "--rule", "tokens", "--keys", "40", "--cost",
               "5", "--hold-ms", "2", "--inflight", "8", "--duration", "1",
               "--audit", "--json", json_path, NULL);
    rlt_tail(out_path, 3);
    *json = rlt_slurp(json_path);
    assert_non_null(*json);
    return rc;
}

/* The counters moved by exactly what the answers charged: on one server,
 * and on three over one Redis; two servers on their own memory stores
 * keep two ledgers, and the checks (on the first) find the other's
 * charges missing. */
static void test_reserve_audit(void **state)
{
    char *json;

    (void)state;
    assert_int_equal(servers_start(1, 0), 0);
    assert_int_equal(ledger_run(1, &json), 0);
    assert_true(num(json, "ledger_checked") == 40);
    assert_true(num(json, "ledger_mismatched") == 0);
    free(json);
    servers_teardown(state);
    assert_int_equal(servers_start(2, 0), 0);
    assert_int_equal(ledger_run(2, &json), 1);
    assert_true(num(json, "ledger_mismatched") > 0);
    free(json);
    servers_teardown(state);
    if (!have_redis)
        skip();
    assert_int_equal(servers_start(NSERVERS, redis.port), 0);
    assert_int_equal(servers_ready(NSERVERS), 0);
    assert_int_equal(ledger_run(NSERVERS, &json), 0);
    assert_true(num(json, "ledger_checked") == 40);
    assert_true(num(json, "ledger_mismatched") == 0);
    free(json);
}

static void test_bad_arguments(void **state)
{
    (void)state;
    assert_int_equal(bench("--op", "acquire", NULL), 2);
    assert_int_equal(bench("--op", "lease", NULL), 2);
    assert_int_equal(bench("--crash", "0.5", NULL), 2);
    assert_int_equal(
        bench("--op", "acquire", "--rule", "churn", "--crash", "2", NULL), 2);
    assert_int_equal(bench("--hold-ms", "5", NULL), 2);
    assert_int_equal(
        bench("--op", "reserve", "--audit", "--keys", "100001", NULL), 2);
}

static int setup(void **state)
{
    FILE *f;

    (void)state;
    snprintf(tmpdir, sizeof(tmpdir), "/tmp/rl-bench-xop.XXXXXX");
    if (mkdtemp(tmpdir) == NULL)
        return RL_EIO;
    snprintf(json_path, sizeof(json_path), "%s/out.json", tmpdir);
    snprintf(out_path, sizeof(out_path), "%s/stdout", tmpdir);
    snprintf(err_path, sizeof(err_path), "%s/stderr", tmpdir);
    snprintf(rules_path, sizeof(rules_path), "%s/rules.yaml", tmpdir);
    f = fopen(rules_path, "w");
    if (f == NULL || fputs(rules, f) < 0 || fclose(f) != 0)
        return RL_EIO;
    snprintf(secret_path, sizeof(secret_path), "%s/handle-secret", tmpdir);
    f = fopen(secret_path, "w");
    if (f == NULL || fputs("rl-bench-xop's fleet secret, 32 bytes+", f) < 0 ||
        fclose(f) != 0)
        return RL_EIO;
    have_redis = rlt_redis_start(&redis) == 0;
    return 0;
}

static int teardown(void **state)
{
    servers_teardown(state);
    if (have_redis)
        rlt_redis_stop(&redis);
    rlt_rmtree(tmpdir);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_acquire_memory, servers_teardown),
        cmocka_unit_test_teardown(test_acquire_redis_fleet, servers_teardown),
        cmocka_unit_test_teardown(test_reserve, servers_teardown),
        cmocka_unit_test_teardown(test_reserve_audit, servers_teardown),
        cmocka_unit_test_teardown(test_bad_arguments, servers_teardown),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
