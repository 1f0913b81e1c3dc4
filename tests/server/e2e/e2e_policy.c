/* The policy end to end, through real rl-server processes: the rules file
 * and --check-config, counters namespaced per rule, inline caps, several
 * windows exact across three servers on one Redis (refusals consume
 * nothing), quota-fit counters summed over the fleet, quotas and switches
 * from rl-ctl reaching every server, and reloads under load.
 *
 * Every server and Redis is started on a free loopback port and stopped by
 * pid in the test's teardown, whether it passed or not; every wait polls a
 * condition with a deadline. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "rl_error.h"
#include "rl_msg.h"
#include "rlt.h"
#include "rlt_fx.h"

#ifndef RL_SERVER_BIN
#error "RL_SERVER_BIN must name the rl-server binary"
#endif
#ifndef RL_CTL_BIN
#error "RL_CTL_BIN must name the rl-ctl binary"
#endif

#define NSERVERS RLT_FX_SERVERS

/* Every test has a scratch directory for its rules file (f->rules) and
 * the servers' logs. */
static int setup(void **state)
{
    if (rlt_fx_setup(state) != 0)
        return -1;
    return rlt_fx_mkdir(*state, "policy") == RL_OK ? 0 : -1;
}

#define POLICY_TEST(t)                                                         \
    cmocka_unit_test_setup_teardown(t, setup, rlt_fx_teardown)

/* Starts server i with --metrics and the extra arguments (NULL-ended);
 * with Redis when the fixture has one. */
static void vstart_server(rlt_fx_t *f, int i, va_list ap)
{
    char *redis[] = {"--redis", f->raddr, NULL};

    rlt_fx_vstart(f, i, f->redis_on ? redis : NULL, ap);
    if (f->redis_on) {
        /* These tests count exact decisions: requests that come before
         * the server has connected to Redis get the fail mode, uncounted
         * (and /healthz says 503 until then). */
        char body[256];
        uint64_t t0 = rlt_mono_ms();

        while (rlt_http_get(f->srv[i].mport, "/healthz", body, sizeof(body)) !=
               200) {
            assert_true(rlt_mono_ms() - t0 < 5000);
            rlt_nap_ms(10);
        }
    }
}

static void start_server(rlt_fx_t *f, int i, ...)
{
    va_list ap;

    va_start(ap, i);
    vstart_server(f, i, ap);
    va_end(ap);
}

/* Like start_server, at --log-level info, with the server's log (its
 * stderr) in f->dir/server<i>.log, for tests that read what it says. */
static void start_server_logged(rlt_fx_t *f, int i, ...)
{
    char log[128];
    int saved = dup(2), fd;
    va_list ap;

    snprintf(log, sizeof(log), "%s/server%d.log", f->dir, i);
    fd = open(log, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND, 0600);
    assert_true(saved >= 0 && fd >= 0);
    /* The child inherits stderr: the log file, not the test's. */
    fflush(stderr);
    assert_int_equal(dup2(fd, 2), 2);
    close(fd);
    va_start(ap, i);
    vstart_server(f, i, ap);
    va_end(ap);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
}

/* Lines of server i's log (start_server_logged) that contain all of the
 * given strings (NULL-ended). */
static int log_lines(rlt_fx_t *f, int i, ...)
{
    char path[128], line[2048];
    int n = 0;
    FILE *fp;

    snprintf(path, sizeof(path), "%s/server%d.log", f->dir, i);
    fp = fopen(path, "r");
    assert_non_null(fp);
    while (fgets(line, sizeof(line), fp) != NULL) {
        const char *want;
        int all = 1;
        va_list ap;

        va_start(ap, i);
        while ((want = va_arg(ap, const char *)) != NULL)
            all &= strstr(line, want) != NULL;
        va_end(ap);
        n += all;
    }
    fclose(fp);
    return n;
}

/* Runs a program to its end; returns its exit status, with its stdout and
 * stderr in out. */
static int run(char *out, size_t len, const char *fmt, ...)
{
    char cmd[2048];
    size_t got = 0;
    va_list ap;
    FILE *p;
    int st;

    va_start(ap, fmt);
    vsnprintf(cmd, sizeof(cmd), fmt, ap);
    va_end(ap);
    strncat(cmd, " 2>&1", sizeof(cmd) - strlen(cmd) - 1);
    p = popen(cmd, "r");
    assert_non_null(p);
    while (got + 1 < len && fgets(out + got, (int)(len - got), p) != NULL)
        got += strlen(out + got);
    out[got] = '\0';
    st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static long long metric(const rlt_fx_t *f, int i, const char *name)
{
    return rlt_fx_metric(f->srv[i].mport, name);
}

/* A counter that has not counted yet is absent from the page: 0. */
static long long metric0(rlt_fx_t *f, int i, const char *name)
{
    long long v = metric(f, i, name);

    return v < 0 ? 0 : v;
}

/* Waits until a metric of server i reaches at least v; returns the time it
 * took in ms, or fails the test after timeout_ms. */
static uint64_t await_metric(rlt_fx_t *f, int i, const char *name, long long v,
                             uint64_t timeout_ms)
{
    uint64_t t0 = rlt_mono_ms();

    while (metric(f, i, name) < v) {
        if (rlt_mono_ms() - t0 > timeout_ms)
            fail_msg("server %d: %s stayed below %lld for %llu ms", i, name,
                     v, (unsigned long long)timeout_ms);
        rlt_nap_ms(5);
    }
    return rlt_mono_ms() - t0;
}

static rl_check_t rule_check(uint64_t id, const char *key, const char *rule,
                             uint32_t cost)
{
    rl_check_t q;

    memset(&q, 0, sizeof(q));
    q.id = id;
    q.key = key;
    q.key_len = strlen(key);
    q.rule = rule;
    q.rule_len = strlen(rule);
    q.cost = cost;
    return q;
}

/* One check on a fresh connection. */
static rlt_result_t ask(int port, rl_check_t q)
{
    rlt_result_t r;

    assert_int_equal(rlt_ask(port, &q, &r), RL_OK);
    assert_int_equal(r.r.id, q.id);
    return r;
}

static long long redis_int(rlt_fx_t *f, const char *fmt, ...)
{
    redisContext *c = rlt_redis_connect(&f->redis);
    char cmd[512];
    redisReply *r;
    long long v = -1;
    va_list ap;

    assert_non_null(c);
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof(cmd), fmt, ap);
    va_end(ap);
    r = redisCommand(c, cmd);
    assert_non_null(r);
    if (r->type == REDIS_REPLY_INTEGER)
        v = r->integer;
    else if (r->type == REDIS_REPLY_STRING)
        v = strtoll(r->str, NULL, 10);
    else if (r->type == REDIS_REPLY_NIL)
        v = 0;
    freeReplyObject(r);
    redisFree(c);
    return v;
}

/* ------------------------------------------------------------------------ */

static const char example[] =
    "rules:\n"
    "  login:\n"
    "    limits: [5/60s]\n"
    "  api:\n"
    "    limits: [33/1m, 2000/1h]        # every window must allow\n"
    "    overrides:                       # per-caller quotas, by exact key\n"
    "      \"user:acme\": [1000/1m, 50000/1h]\n"
    "  search:\n"
    "    limits: [10/1s]\n"
    "    mode: shadow                     # enforce (default) | shadow | off\n";

/* --check-config: 0 for a good file, 2 with FILE:LINE for each error. */
static void test_check_config(void **state)
{
    rlt_fx_t *f = *state;
    char out[8192], path[400];
    int fd;

    rlt_fx_write_file(f->rules, example);
    assert_int_equal(run(out, sizeof(out), "%s --check-config %s",
                         RL_SERVER_BIN, f->rules),
                     0);
    assert_non_null(strstr(out, "ok, 3 rules"));

    /* Every error, each with its line; nothing served. */
    rlt_fx_write_file(f->rules,
                      "rules:\n"
                      "  a:\n"
                      "    limits: [5/60x]\n"
                      "  b:\n"
                      "    limits: [0/1m]\n"
                      "    colour: red\n"
                      "  \"c d\":\n"
                      "    limits: [1/1s]\n"
                      "  e:\n"
                      "    limits: [1/1s, 1/2s, 1/3s, 1/4s, 1/5s, 1/6s, "
                      "1/7s, 1/8s, 1/9s]\n"
                      "  f:\n"
                      "    limits: [1/1s]\n"
                      "    overrides:\n"
                      "      \"\": [2/1s]\n"
                      "  a:\n"
                      "    limits: [1/1s]\n");
    assert_int_equal(run(out, sizeof(out), "%s --check-config %s",
                         RL_SERVER_BIN, f->rules),
                     2);
    snprintf(path, sizeof(path), "%s:3: bad limit", f->rules);
    assert_non_null(strstr(out, path));
    snprintf(path, sizeof(path), "%s:5: bad limit", f->rules);
    assert_non_null(strstr(out, path));
    snprintf(path, sizeof(path), "%s:6: unknown key 'colour'", f->rules);
    assert_non_null(strstr(out, path));
    snprintf(path, sizeof(path), "%s:7: bad rule name", f->rules);
    assert_non_null(strstr(out, path));
    snprintf(path, sizeof(path), "%s:10: more than 8 windows", f->rules);
    assert_non_null(strstr(out, path));
    snprintf(path, sizeof(path), "%s:14: override key a client could not",
             f->rules);
    assert_non_null(strstr(out, path));
    snprintf(path, sizeof(path), "%s:15: rule 'a' is defined twice", f->rules);
    assert_non_null(strstr(out, path));

    /* A --rule flag merges with the file; a name in both is an error. */
    rlt_fx_write_file(f->rules, example);
    assert_int_equal(run(out, sizeof(out),
                         "%s --rule extra=3/1s,9/1m --check-config %s",
                         RL_SERVER_BIN, f->rules),
                     0);
    assert_non_null(strstr(out, "ok, 4 rules"));
    assert_int_equal(run(out, sizeof(out), "%s --rule login=3/1s "
                                           "--check-config %s",
                         RL_SERVER_BIN, f->rules),
                     2);
    snprintf(path, sizeof(path), "%s:2: rule 'login' is defined twice",
             f->rules);
    assert_non_null(strstr(out, path));
    /* Serving refuses a bad file the same way, before listening. */
    assert_int_equal(run(out, sizeof(out), "%s --listen 127.0.0.1:%d "
                                           "--rule login=3/1s --config %s",
                         RL_SERVER_BIN, 0, f->rules),
                     2);

    /* 100 MB (sparse): refused before it is read. */
    snprintf(path, sizeof(path), "%s/big.yaml", f->dir);
    fd = open(path, O_CREAT | O_WRONLY, 0600);
    assert_true(fd >= 0);
    assert_int_equal(ftruncate(fd, 100 << 20), 0);
    close(fd);
    assert_int_equal(run(out, sizeof(out), "%s --check-config %s",
                         RL_SERVER_BIN, path),
                     2);
    assert_non_null(strstr(out, "not a regular file of at most 16 MiB"));

    /* Deeply nested: refused at depth 8, memory bounded. */
    {
        static char deep[200016];
        memcpy(deep, "rules: ", 7);
        memset(deep + 7, '[', 200000);
        deep[200007] = '\n';
        deep[200008] = '\0';
        rlt_fx_write_file(f->rules, deep);
        assert_int_equal(run(out, sizeof(out), "%s --check-config %s",
                             RL_SERVER_BIN, f->rules),
                         2);
        assert_non_null(strstr(out, "nested deeper than 8 levels"));
    }
    /* Binary. */
    assert_int_equal(run(out, sizeof(out),
                         "head -c 4096 /dev/urandom > %s/bin.yaml; "
                         "%s --check-config %s/bin.yaml",
                         f->dir, RL_SERVER_BIN, f->dir),
                     2);
    assert_non_null(strstr(out, "bin.yaml:"));
}

/* --check-config and --check-envoy-config refuse a key given twice, with
 * both lines, instead of letting the last one win. */
static void test_check_duplicate_keys(void **state)
{
    rlt_fx_t *f = *state;
    char out[8192], want[512], envoy[128];

    rlt_fx_write_file(f->rules, "rules:\n"
                                "  api:\n"
                                "    limits: [1/1m]\n"
                                "    mode: shadow\n"
                                "    limits: [1000000/1s]\n"
                                "    mode: enforce\n");
    assert_int_equal(run(out, sizeof(out), "%s --check-config %s",
                         RL_SERVER_BIN, f->rules),
                     2);
    snprintf(want, sizeof(want),
             "%s:5: key 'limits' given twice (first at line 3)", f->rules);
    assert_non_null(strstr(out, want));
    snprintf(want, sizeof(want),
             "%s:6: key 'mode' given twice (first at line 4)", f->rules);
    assert_non_null(strstr(out, want));
    /* Serving refuses it the same way. */
    assert_int_equal(run(out, sizeof(out), "%s --listen 127.0.0.1:0 "
                                           "--config %s",
                         RL_SERVER_BIN, f->rules),
                     2);
    assert_non_null(strstr(out, want));

    snprintf(envoy, sizeof(envoy), "%s/envoy.yaml", f->dir);
    rlt_fx_write_file(envoy,
                      "domain: a\n"
                      "descriptors:\n"
                      "  - key: k\n"
                      "    rate_limit: {unit: minute, requests_per_unit: 1}\n"
                      "    rate_limit: {unit: second, requests_per_unit: 9}\n"
                      "domain: b\n");
    assert_int_equal(run(out, sizeof(out), "%s --check-envoy-config %s",
                         RL_SERVER_BIN, envoy),
                     2);
    snprintf(want, sizeof(want),
             "%s:5: key 'rate_limit' given twice (first at line 4)", envoy);
    assert_non_null(strstr(out, want));
    snprintf(want, sizeof(want),
             "%s:6: key 'domain' given twice (first at line 1)", envoy);
    assert_non_null(strstr(out, want));
}

/* A rule's counter cannot be spent through another rule, nor through an
 * inline limit on the same key and window. */
static void test_counters_belong_to_their_rule(void **state)
{
    rlt_fx_t *f = *state;
    int p, i;

    /* Hour windows, and not within 5 s of an hour's end: the counts
     * below must all fall in one window. */
    while (3600 - time(NULL) % 3600 < 5)
        rlt_nap_ms(200);
    rlt_fx_redis(f);
    start_server(f, 0, "--rule", "login=5/1h", "--rule", "api=100/1h", NULL);
    p = f->srv[0].port;
    /* login and api, same caller, same window length. */
    for (i = 0; i < 5; i++)
        assert_int_equal(ask(p, rule_check(1, "user:1", "login", 1)).r.code,
                         RL_CODE_OK);
    assert_int_equal(ask(p, rule_check(2, "user:1", "login", 1)).r.code,
                     RL_CODE_OVER_LIMIT);
    assert_int_equal(ask(p, rule_check(3, "user:1", "api", 1)).r.used, 1);

    /* The reproduction: an inline request with the same key and
     * window, a huge limit and cost 4, then login again. */
    assert_int_equal(ask(p, rule_check(4, "victim", "login", 1)).r.used, 1);
    assert_int_equal(ask(p, rlt_check(5, "victim", 1000000, 3600, 4)).r.code,
                     RL_CODE_OK);
    {
        rlt_result_t r = ask(p, rule_check(6, "victim", "login", 1));
        assert_int_equal(r.r.code, RL_CODE_OK);
        assert_int_equal(r.r.used, 2);
    }
    /* Distinct keys in Redis: the rule's and the inline limit's. */
    assert_int_equal(redis_int(f, "GET rl:{victim}:r:login:3600:%llu",
                               (unsigned long long)(time(NULL) / 3600)),
                     2);
    assert_int_equal(redis_int(f, "GET rl:{victim}:i:3600:%llu",
                               (unsigned long long)(time(NULL) / 3600)),
                     4);
}

static void test_inline_caps(void **state)
{
    rlt_fx_t *f = *state;
    rlt_result_t r;

    start_server(f, 0, "--rule", "r=5/1m", "--inline-limits", "deny", NULL);
    r = ask(f->srv[0].port, rlt_check(1, "k", 10, 60, 1));
    assert_int_equal(r.r.code, RL_CODE_ERROR);
    assert_non_null(strstr(r.err, "--inline-limits deny"));
    assert_int_equal(ask(f->srv[0].port, rule_check(2, "k", "r", 1)).r.code,
                     RL_CODE_OK);
    assert_int_equal(metric(f, 0, "rl_frames_rejected_total{reason=\"inline\"}"),
                     1);
    rlt_server_stop(&f->srv[0]);

    start_server(f, 0, "--max-inline-window", "3600", "--max-inline-limit",
                 "100", NULL);
    r = ask(f->srv[0].port, rlt_check(1, "k", 10, 7200, 1));
    assert_int_equal(r.r.code, RL_CODE_ERROR);
    assert_non_null(strstr(r.err, "--max-inline-window"));
    r = ask(f->srv[0].port, rlt_check(2, "k", 101, 60, 1));
    assert_int_equal(r.r.code, RL_CODE_ERROR);
    assert_non_null(strstr(r.err, "--max-inline-limit"));
    r = ask(f->srv[0].port, rlt_check(3, "k", 100, 3600, 1));
    assert_int_equal(r.r.code, RL_CODE_OK);
}

/* Shadow: counted as enforce would, answered OK, flagged and counted. */
static void test_shadow(void **state)
{
    rlt_fx_t *f = *state;
    rlt_result_t r;
    int i;

    rlt_fx_write_file(f->rules,
                      "rules:\n  s:\n    limits: [2/1h]\n    mode: shadow\n");
    start_server(f, 0, "--config", f->rules, NULL);
    for (i = 0; i < 2; i++) {
        r = ask(f->srv[0].port, rule_check((uint64_t)i + 1, "k", "s", 1));
        assert_int_equal(r.r.code, RL_CODE_OK);
        assert_int_equal(r.r.shadow_refused, 0);
    }
    r = ask(f->srv[0].port, rule_check(3, "k", "s", 1));
    assert_int_equal(r.r.code, RL_CODE_OK);
    assert_int_equal(r.r.shadow_refused, 1);
    assert_int_equal(r.r.used, 2); /* the refusal consumed nothing */
    assert_int_equal(r.r.window_s, 3600);
    assert_int_equal(r.r.retry_after_ms, 0);
    assert_int_equal(
        metric(f, 0, "rl_rule_decisions_total{rule=\"s\",result=\"shadow_refused\"}"),
        1);
    assert_int_equal(
        metric(f, 0, "rl_rule_decisions_total{rule=\"s\",result=\"allowed\"}"),
        2);
}

/* ---- three servers, one Redis ---- */

#define FLEET_KEYS 6
#define FLEET_REQS 400

typedef struct {
    int port;
    int server;
    rl_check_t q[FLEET_REQS];
    rlt_result_t r[FLEET_REQS];
    char keys[FLEET_REQS][16];
    int rc;
} load_t;

static void *load_run(void *arg)
{
    load_t *l = arg;
    int fd = rlt_dial(l->port), i;

    l->rc = RL_EIO;
    if (fd < 0)
        return NULL;
    /* Four pipelined rounds, so batches interleave across servers. */
    for (i = 0; i < 4; i++) {
        int n = FLEET_REQS / 4;
        if ((l->rc = rlt_exchange(fd, l->q + i * n, (size_t)n,
                                  l->r + i * n)) != RL_OK)
            break;
    }
    close(fd);
    return NULL;
}

/* Several windows, exact across the fleet: each window admits no more than
 * its limit, the tightest admits exactly it, refusals consume nothing, and
 * the quota-fit counters summed over the servers match the answers. */
static void test_fleet_exact(void **state)
{
    rlt_fx_t *f = *state;
    static load_t load[NSERVERS];
    pthread_t th[NSERVERS];
    uint64_t admitted_cost[FLEET_KEYS] = {0};
    long long started = 0, reached100 = 0, allowed = 0;
    char name[160];
    int i, j, k;

    /* Windows of an hour and a day, so none rolls over during the test. */
    rlt_fx_write_file(f->rules, "rules:\n"
                                "  hot:\n"
                                "    limits: [40/1h, 25/1d]\n");
    rlt_fx_redis(f);
    for (i = 0; i < NSERVERS; i++)
        start_server(f, i, "--config", f->rules, NULL);
    for (i = 0; i < NSERVERS; i++) {
        load[i].port = f->srv[i].port;
        for (j = 0; j < FLEET_REQS; j++) {
            snprintf(load[i].keys[j], sizeof(load[i].keys[j]), "k%d",
                     j % FLEET_KEYS);
            load[i].q[j] = rule_check((uint64_t)j + 1, load[i].keys[j], "hot",
                                      (uint32_t)(1 + (i + j) % 3));
        }
    }
    for (i = 0; i < NSERVERS; i++)
        assert_int_equal(pthread_create(&th[i], NULL, load_run, &load[i]), 0);
    for (i = 0; i < NSERVERS; i++) {
        pthread_join(th[i], NULL);
        assert_int_equal(load[i].rc, RL_OK);
    }
    for (i = 0; i < NSERVERS; i++)
        for (j = 0; j < FLEET_REQS; j++) {
            const rl_result_t *r = &load[i].r[j].r;
            const rl_check_t *q = &load[i].q[r->id - 1];
            assert_true(r->code == RL_CODE_OK || r->code == RL_CODE_OVER_LIMIT);
            if (r->code == RL_CODE_OK) {
                admitted_cost[q->key[1] - '0'] += q->cost;
                allowed++;
            }
        }
    for (k = 0; k < FLEET_KEYS; k++) {
        /* Never over the tightest limit, and filled up to within one
         * request's cost of it (costs are 1 to 3). */
        assert_true(admitted_cost[k] <= 25);
        assert_true(admitted_cost[k] >= 23);
        /* Redis holds exactly the admitted cost in both windows: the
         * refusals consumed nothing. */
        assert_int_equal(redis_int(f, "GET rl:{k%d}:r:hot:3600:%llu", k,
                                   (unsigned long long)(time(NULL) / 3600)),
                         (long long)admitted_cost[k]);
        assert_int_equal(redis_int(f, "GET rl:{k%d}:r:hot:86400:%llu", k,
                                   (unsigned long long)(time(NULL) / 86400)),
                         (long long)admitted_cost[k]);
    }
    /* The fleet's counters, summed, equal what the answers say: every
     * caller-window started once; reached 100 % of 25 for the day window
     * only where the admitted cost is exactly 25. */
    for (i = 0; i < NSERVERS; i++) {
        snprintf(name, sizeof(name),
                 "rl_rule_windows_started_total{rule=\"hot\",window=\"86400\"}");
        started += metric0(f, i, name);
        snprintf(name, sizeof(name),
                 "rl_rule_windows_reached_total{rule=\"hot\",window=\"86400\","
                 "threshold=\"100\"}");
        reached100 += metric0(f, i, name);
        allowed -= metric0(
            f, i, "rl_rule_decisions_total{rule=\"hot\",result=\"allowed\"}");
    }
    assert_int_equal(started, FLEET_KEYS);
    {
        long long want = 0;
        for (k = 0; k < FLEET_KEYS; k++)
            want += admitted_cost[k] == 25;
        assert_int_equal(reached100, want);
    }
    assert_int_equal(allowed, 0);
}

/* Quotas from rl-ctl reach every server; bad input is refused whole; a
 * garbage stored value falls back to the rule and is counted. */
static void test_quota_rlctl(void **state)
{
    rlt_fx_t *f = *state;
    char out[4096];
    rlt_result_t r;
    int i;

    rlt_fx_redis(f);
    for (i = 0; i < 2; i++)
        start_server(f, i, "--rule", "api=3/1h", NULL);
    assert_int_equal(run(out, sizeof(out),
                         "%s --redis 127.0.0.1:%d quota set api user:acme "
                         "10/1h 12/1d",
                         RL_CTL_BIN, f->redis.port),
                     0);
    /* The first quota of a rule marks it (switch version 1); every server
     * looks quotas of that rule up once it has applied that, within its
     * 500 ms poll (rl-ctl waits for the servers that already report). */
    assert_non_null(strstr(out, "quotas:api = 1 (version 1)"));
    for (i = 0; i < 2; i++)
        print_message("server %d applies the quota mark after %llu ms\n", i,
                      (unsigned long long)await_metric(
                          f, i, "rl_policy_switches_version", 1, 2000));
    for (i = 0; i < 2; i++) {
        r = ask(f->srv[i].port, rule_check(1, "user:acme", "api", 1));
        assert_int_equal(r.r.code, RL_CODE_OK);
        assert_int_equal(r.r.limit, 10);
        assert_int_equal(r.r.used, (uint64_t)i + 1);
    }
    assert_int_equal(run(out, sizeof(out),
                         "%s --redis 127.0.0.1:%d quota get api user:acme",
                         RL_CTL_BIN, f->redis.port),
                     0);
    assert_non_null(strstr(out, "10/1h 12/1d"));
    /* Bad limits: refused, nothing written. */
    assert_int_equal(run(out, sizeof(out),
                         "%s --redis 127.0.0.1:%d quota set api other "
                         "10/1h 0/1d",
                         RL_CTL_BIN, f->redis.port),
                     2);
    assert_int_equal(redis_int(f, "HLEN rl:{other}:q"), 0);
    /* Deleted: back to the rule. */
    assert_int_equal(run(out, sizeof(out),
                         "%s --redis 127.0.0.1:%d quota del api user:acme",
                         RL_CTL_BIN, f->redis.port),
                     0);
    r = ask(f->srv[0].port, rule_check(2, "user:acme", "api", 1));
    assert_int_equal(r.r.limit, 3);
    /* Garbage stored by hand. */
    assert_int_equal(redis_int(f, "HSET rl:{junk}:q api notalimit"), 1);
    r = ask(f->srv[0].port, rule_check(3, "junk", "api", 1));
    assert_int_equal(r.r.code, RL_CODE_OK);
    assert_int_equal(r.r.limit, 3);
    assert_int_equal(metric(f, 0, "rl_quota_unparsable_total"), 1);
}

/* A new server takes work (/healthz 200, which start_server awaits) only
 * once it applies the fleet's switches and has reported so: a switch set
 * before it started is in force from its first decision, and rl-ctl run
 * right after waits for it instead of finding no server. */
static void test_ready_after_switches(void **state)
{
    rlt_fx_t *f = *state;
    char out[4096];
    rlt_result_t r;
    int i;

    rlt_fx_redis(f);
    assert_int_equal(run(out, sizeof(out),
                         "%s --redis 127.0.0.1:%d --wait-ms 0 mode api off",
                         RL_CTL_BIN, f->redis.port),
                     0);
    start_server(f, 0, "--rule", "api=1/1h", "--rule", "b=1/1h", NULL);
    /* Off: nothing refused, nothing counted, from the first decision. */
    for (i = 0; i < 3; i++) {
        r = ask(f->srv[0].port, rule_check((uint64_t)i + 1, "k", "api", 1));
        assert_int_equal(r.r.code, RL_CODE_OK);
    }
    assert_int_equal(redis_int(f, "EXISTS rl:{k}:r:api:3600:%llu",
                               (unsigned long long)(time(NULL) / 3600)),
                     0);

    /* A second server, and a quota (of rule b, which is on) right after
     * it is ready. */
    start_server(f, 1, "--rule", "api=1/1h", "--rule", "b=1/1h", NULL);
    assert_int_equal(run(out, sizeof(out),
                         "%s --redis 127.0.0.1:%d quota set b user:q 2/1h",
                         RL_CTL_BIN, f->redis.port),
                     0);
    assert_non_null(strstr(out, "applied by every live rl-server"));
    assert_null(strstr(out, "no rl-server has reported"));
    r = ask(f->srv[1].port, rule_check(10, "user:q", "b", 1));
    assert_int_equal(r.r.code, RL_CODE_OK);
    assert_int_equal(r.r.limit, 2);

    /* Switches Redis will not give (here the policy key of another type)
     * are not waited for: the server becomes ready, the failure counted. */
    assert_int_equal(redis_int(f, "DEL rl:policy"), 1);
    assert_int_equal(redis_int(f, "SADD rl:policy junk"), 1);
    start_server(f, 2, "--rule", "b=1/1h", NULL);
    assert_true(metric(f, 2, "rl_policy_switch_poll_failures_total") >= 1);
    assert_int_equal(metric(f, 2, "rl_policy_switches_version"), 0);
}

/* A client that keeps 32 requests for rule `rule` in flight on one
 * connection until told to stop, checking that every request is answered
 * exactly once; with check_pairs, that each answer's (limit, window)
 * belongs to one of the reload test's two policies. */
typedef struct {
    int port;
    const char *rule;
    int check_pairs;
    volatile int stop;
    uint64_t sent, answered, bad_pairs, errors;
    int rc;
} rl_load_t;

static void *load_run_rule(void *arg)
{
    rl_load_t *l = arg;
    int fd = rlt_dial(l->port);
    rl_check_t q[32];
    rlt_result_t r[32];
    uint64_t id = 1;
    int i;

    l->rc = RL_EIO;
    if (fd < 0)
        return NULL;
    while (!l->stop) {
        uint8_t seen[32] = {0};
        for (i = 0; i < 32; i++)
            q[i] = rule_check(id + (uint64_t)i, i % 2 ? "a" : "b", l->rule,
                              1);
        if ((l->rc = rlt_exchange(fd, q, 32, r)) != RL_OK)
            break;
        l->sent += 32;
        for (i = 0; i < 32; i++) {
            const rl_result_t *x = &r[i].r;
            uint64_t k = x->id - id;
            /* Exactly once: every id of the round, none twice. */
            if (x->id < id || k >= 32 || seen[k]++) {
                l->rc = RL_EINVAL;
                break;
            }
            l->answered++;
            if (x->code == RL_CODE_ERROR)
                l->errors++;
            /* Each answer's window and limit belong to one policy's rule:
             * A = [7/1h, 11/1d], B = [13/2h, 17/2d]. */
            if (l->check_pairs &&
                !((x->window_s == 3600 && x->limit == 7) ||
                  (x->window_s == 86400 && x->limit == 11) ||
                  (x->window_s == 7200 && x->limit == 13) ||
                  (x->window_s == 172800 && x->limit == 17)))
                l->bad_pairs++;
        }
        if (l->rc != RL_OK)
            break;
        id += 32;
    }
    close(fd);
    return NULL;
}

/* The kill switch and a scale, set with rl-ctl while load runs, reach
 * every server; the time from rl-ctl returning to the last server applying
 * is printed (the bound is 2 s). */
static void test_switches(void **state)
{
    rlt_fx_t *f = *state;
    static rl_load_t sw_load[NSERVERS];
    pthread_t sw_th[NSERVERS];
    char out[4096];
    rlt_result_t r;
    uint64_t worst = 0, t;
    int i;

    rlt_fx_redis(f);
    for (i = 0; i < NSERVERS; i++)
        start_server(f, i, "--rule", "api=4/1h", NULL);
    /* Load on every server throughout. */
    memset(sw_load, 0, sizeof(sw_load));
    for (i = 0; i < NSERVERS; i++) {
        sw_load[i].port = f->srv[i].port;
        sw_load[i].rule = "api";
        assert_int_equal(
            pthread_create(&sw_th[i], NULL, load_run_rule, &sw_load[i]), 0);
    }
    /* Saturate one caller. */
    for (i = 0; i < 5; i++)
        r = ask(f->srv[i % NSERVERS].port, rule_check(1, "sat", "api", 1));
    assert_int_equal(r.r.code, RL_CODE_OVER_LIMIT);

    assert_int_equal(run(out, sizeof(out),
                         "%s --redis 127.0.0.1:%d --wait-ms 0 mode api off",
                         RL_CTL_BIN, f->redis.port),
                     0);
    for (i = 0; i < NSERVERS; i++) {
        t = await_metric(f, i, "rl_policy_switches_version", 1, 5000);
        worst = t > worst ? t : worst;
    }
    print_message("kill switch applied by all %d servers %llu ms after "
                  "rl-ctl returned\n",
                  NSERVERS, (unsigned long long)worst);
    assert_true(worst <= 2000);
    for (i = 0; i < NSERVERS; i++) {
        r = ask(f->srv[i].port, rule_check(2, "sat", "api", 1));
        assert_int_equal(r.r.code, RL_CODE_OK);
    }
    /* Off counts nothing. */
    assert_int_equal(redis_int(f, "GET rl:{sat}:r:api:3600:%llu",
                               (unsigned long long)(time(NULL) / 3600)),
                     4);

    /* Back on, scaled to half: limit 2. rl-ctl itself waits for the
     * fleet this time, and reports each server. */
    assert_int_equal(run(out, sizeof(out),
                         "%s --redis 127.0.0.1:%d mode api default",
                         RL_CTL_BIN, f->redis.port),
                     0);
    assert_int_equal(run(out, sizeof(out),
                         "%s --redis 127.0.0.1:%d scale api 0.5", RL_CTL_BIN,
                         f->redis.port),
                     0);
    assert_non_null(strstr(out, "applied by every live rl-server"));
    for (i = 0; i < NSERVERS; i++) {
        r = ask(f->srv[i].port, rule_check(3, "fresh", "api", 1));
        assert_int_equal(r.r.limit, 2);
    }
    assert_int_equal(ask(f->srv[0].port, rule_check(4, "fresh", "api", 1))
                         .r.code,
                     RL_CODE_OVER_LIMIT);
    /* Global off wins over every rule, inline limits included. */
    assert_int_equal(run(out, sizeof(out),
                         "%s --redis 127.0.0.1:%d global off", RL_CTL_BIN,
                         f->redis.port),
                     0);
    assert_int_equal(ask(f->srv[1].port, rule_check(5, "fresh", "api", 1))
                         .r.code,
                     RL_CODE_OK);
    for (i = 0; i < NSERVERS; i++) {
        sw_load[i].stop = 1;
        pthread_join(sw_th[i], NULL);
        assert_int_equal(sw_load[i].rc, RL_OK);
        assert_true(sw_load[i].answered > 0);
        assert_int_equal(sw_load[i].answered, sw_load[i].sent);
        assert_int_equal(sw_load[i].errors, 0);
    }
}

/* ---- reload under load ---- */

static void test_reload_under_load(void **state)
{
    rlt_fx_t *f = *state;
    static const char good_a[] = "rules:\n  r:\n    limits: [7/1h, 11/1d]\n";
    static const char good_b[] = "rules:\n  r:\n    limits: [13/2h, 17/2d]\n";
    static const char bad[] = "rules:\n  r:\n    limits: [7/1h, 0/1d]\n";
    static rl_load_t load;
    pthread_t th;
    int i, nbad = 0, ngood = 0;

    rlt_fx_write_file(f->rules, good_a);
    /* Files renamed over: no need to wait the default second for each of
     * the 50 to settle. */
    start_server(f, 0, "--config", f->rules, "--reload-settle-ms", "200",
                 NULL);
    memset(&load, 0, sizeof(load));
    load.port = f->srv[0].port;
    load.rule = "r";
    load.check_pairs = 1;
    assert_int_equal(pthread_create(&th, NULL, load_run_rule, &load), 0);
    for (i = 0; i < 50; i++) {
        if (i % 2) {
            rlt_fx_write_file(f->rules, bad);
            nbad++;
            await_metric(f, 0, "rl_config_reload_failures_total", nbad, 5000);
        } else {
            rlt_fx_write_file(f->rules, (i / 2) % 2 ? good_a : good_b);
            ngood++;
            await_metric(f, 0, "rl_config_reloads_total", ngood, 5000);
        }
    }
    load.stop = 1;
    pthread_join(th, NULL);
    assert_int_equal(load.rc, RL_OK);
    assert_true(load.answered > 0);
    assert_int_equal(load.answered, load.sent);
    assert_int_equal(load.errors, 0);
    assert_int_equal(load.bad_pairs, 0);
    assert_int_equal(metric(f, 0, "rl_config_reload_failures_total"), nbad);
    assert_int_equal(metric(f, 0, "rl_config_reloads_total"), ngood);
    print_message("reload under load: %llu requests answered across %d "
                  "rewrites (%d refused)\n",
                  (unsigned long long)load.answered, 50, nbad);
}

/* SIGHUP reloads too; a file that vanishes keeps the rules. */
static void test_sighup(void **state)
{
    rlt_fx_t *f = *state;

    rlt_fx_write_file(f->rules, "rules:\n  r:\n    limits: [7/1h]\n");
    start_server(f, 0, "--config", f->rules, NULL);
    assert_int_equal(ask(f->srv[0].port, rule_check(1, "k", "r", 1)).r.limit,
                     7);
    kill(f->srv[0].pid, SIGHUP);
    await_metric(f, 0, "rl_config_reloads_total", 1, 5000);
    assert_int_equal(unlink(f->rules), 0);
    kill(f->srv[0].pid, SIGHUP);
    await_metric(f, 0, "rl_config_reload_failures_total", 1, 5000);
    assert_int_equal(ask(f->srv[0].port, rule_check(2, "k", "r", 1)).r.limit,
                     7);
}


/* The limit and window rule `rule` has for key now (limit 0: no rule). */
static void rule_now(rlt_fx_t *f, const char *rule, uint64_t *limit,
                     uint32_t *window)
{
    static uint64_t id = 1000;
    rlt_result_t r = ask(f->srv[0].port, rule_check(++id, "k", rule, 0));

    *limit = r.r.code == RL_CODE_ERROR ? 0 : r.r.limit;
    *window = r.r.window_s;
}

#define EXPECT_RULE(f, rule, lim, win)                                         \
    do {                                                                       \
        uint64_t l_;                                                           \
        uint32_t w_;                                                           \
        rule_now(f, rule, &l_, &w_);                                           \
        if (l_ != (lim) || w_ != (win))                                        \
            fail_msg("rule %s: %llu/%us, want %llu/%us", rule,                 \
                     (unsigned long long)l_, w_, (unsigned long long)(lim),    \
                     (unsigned)(win));                                         \
    } while (0)

/* A file written in place by a writer that pauses mid-write is not read
 * half-written: the watch waits until the file has stopped changing
 * (1 s by default), so requests meanwhile see the old rules, and the
 * whole new file is what goes live, in one reload. */
static void test_half_written_file(void **state)
{
    rlt_fx_t *f = *state;
    static const char whole[] = "rules:\n"
                                "  api:\n"
                                "    limits: 20000/1h\n"
                                "  login:\n"
                                "    limits: 5/1m\n";
    /* Cut inside "1h": what was written so far parses, as 20000 a second
     * and without login. */
    size_t cut = (size_t)(strstr(whole, "/1h") - whole) + 2;
    uint64_t t0;
    int fd;

    rlt_fx_write_file(f->rules, "rules:\n"
                                "  api:\n"
                                "    limits: 10000/1h\n"
                                "  login:\n"
                                "    limits: 5/1m\n");
    start_server(f, 0, "--config", f->rules, NULL);
    EXPECT_RULE(f, "api", 10000, 3600);
    fd = open(f->rules, O_WRONLY | O_TRUNC);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, whole, cut), (ssize_t)cut);
    /* The writer's pause: longer than the watch's 50 ms debounce, shorter
     * than its settle time. */
    t0 = rlt_mono_ms();
    while (rlt_mono_ms() - t0 < 400) {
        EXPECT_RULE(f, "api", 10000, 3600);
        EXPECT_RULE(f, "login", 5, 60);
        rlt_nap_ms(20);
    }
    assert_int_equal(write(fd, whole + cut, strlen(whole) - cut),
                     (ssize_t)(strlen(whole) - cut));
    assert_int_equal(close(fd), 0);
    await_metric(f, 0, "rl_config_reloads_total", 1, 10000);
    EXPECT_RULE(f, "api", 20000, 3600);
    EXPECT_RULE(f, "login", 5, 60);
    assert_int_equal(metric(f, 0, "rl_config_reloads_total"), 1);
    assert_int_equal(metric0(f, 0, "rl_config_reload_failures_total"), 0);
}

/* A good file that lacks rules the last one had is loaded, with a
 * warning naming them. */
static void test_lost_rules_warning(void **state)
{
    rlt_fx_t *f = *state;

    rlt_fx_write_file(f->rules, "rules:\n"
                                "  a: {limits: 1/1s}\n"
                                "  b: {limits: 1/1s}\n"
                                "  c: {limits: 1/1s}\n");
    start_server_logged(f, 0, "--config", f->rules, "--log-level", "info",
                        NULL);
    rlt_fx_write_file(f->rules, "rules:\n  a: {limits: 2/1s}\n");
    await_metric(f, 0, "rl_config_reloads_total", 1, 10000);
    EXPECT_RULE(f, "a", 2, 1);
    assert_int_equal(log_lines(f, 0, "level=warn",
                               "rules reloaded without rules the last file "
                               "had",
                               "missing=2", "names=\"b,c\"", NULL),
                     1);
    /* A file with the same rules (or more) says nothing of the kind. */
    rlt_fx_write_file(f->rules,
                      "rules:\n  a: {limits: 3/1s}\n  d: {limits: 1/1s}\n");
    await_metric(f, 0, "rl_config_reloads_total", 2, 10000);
    assert_int_equal(log_lines(f, 0, "without rules", NULL), 1);
}

/* A version of a ConfigMap volume as the kubelet writes it: a new
 * timestamped directory with the files, a ..data_tmp link to it renamed
 * over ..data, the old directory removed. The file's own path is a link
 * through ..data, made once. */
static void configmap_version(const char *cm, int v, const char *text)
{
    char ts[256], file[320], tmp[256], data[256], old[320];

    snprintf(ts, sizeof(ts), "..2026_01_01_00_00_%02d.%09d", v, 100000 + v);
    snprintf(file, sizeof(file), "%s/%s", cm, ts);
    assert_int_equal(mkdir(file, 0755), 0);
    snprintf(file, sizeof(file), "%s/%s/rules.yaml", cm, ts);
    {
        FILE *fp = fopen(file, "w");
        assert_non_null(fp);
        assert_true(fputs(text, fp) >= 0);
        assert_int_equal(fclose(fp), 0);
    }
    snprintf(tmp, sizeof(tmp), "%s/..data_tmp", cm);
    snprintf(data, sizeof(data), "%s/..data", cm);
    assert_int_equal(symlink(ts, tmp), 0);
    assert_int_equal(rename(tmp, data), 0);
    if (v > 1) {
        snprintf(old, sizeof(old), "rm -rf '%s/..2026_01_01_00_00_%02d.%09d'",
                 cm, v - 1, 100000 + v - 1);
        assert_int_equal(system(old), 0);
    } else {
        snprintf(file, sizeof(file), "%s/rules.yaml", cm);
        assert_int_equal(symlink("..data/rules.yaml", file), 0);
    }
}

/* A rules file mounted from a Kubernetes ConfigMap is reloaded when the
 * kubelet switches ..data to a new version. */
static void test_configmap(void **state)
{
    rlt_fx_t *f = *state;
    char cm[128], path[160];

    snprintf(cm, sizeof(cm), "%s/cm", f->dir);
    assert_int_equal(mkdir(cm, 0755), 0);
    configmap_version(cm, 1, "rules:\n  r:\n    limits: [7/1h]\n");
    snprintf(path, sizeof(path), "%s/rules.yaml", cm);
    start_server(f, 0, "--config", path, NULL);
    EXPECT_RULE(f, "r", 7, 3600);
    configmap_version(cm, 2, "rules:\n  r:\n    limits: [13/2h]\n");
    await_metric(f, 0, "rl_config_reloads_total", 1, 10000);
    EXPECT_RULE(f, "r", 13, 7200);
    configmap_version(cm, 3, "rules:\n  r:\n    limits: [17/2d]\n");
    await_metric(f, 0, "rl_config_reloads_total", 2, 10000);
    EXPECT_RULE(f, "r", 17, 172800);
    assert_int_equal(metric0(f, 0, "rl_config_reload_failures_total"), 0);
}

/* A FIFO, a directory and a socket renamed over the rules file: each is
 * refused with one error line, without blocking (a FIFO opened for
 * reading waits for a writer), and the server answers throughout under
 * the rules in force. */
static void test_not_regular_file(void **state)
{
    rlt_fx_t *f = *state;
    struct sockaddr_un sa;
    char tmp[160];
    int s;

    snprintf(tmp, sizeof(tmp), "%s/incoming", f->dir);
    rlt_fx_write_file(f->rules, "rules:\n  r:\n    limits: [7/1h]\n");
    start_server_logged(f, 0, "--config", f->rules, NULL);

    assert_int_equal(mkfifo(tmp, 0600), 0);
    assert_int_equal(rename(tmp, f->rules), 0);
    await_metric(f, 0, "rl_config_reload_failures_total", 1, 10000);
    EXPECT_RULE(f, "r", 7, 3600);

    assert_int_equal(unlink(f->rules), 0);
    assert_int_equal(mkdir(tmp, 0700), 0);
    assert_int_equal(rename(tmp, f->rules), 0);
    await_metric(f, 0, "rl_config_reload_failures_total", 2, 10000);
    EXPECT_RULE(f, "r", 7, 3600);

    assert_int_equal(rmdir(f->rules), 0);
    s = socket(AF_UNIX, SOCK_STREAM, 0);
    assert_true(s >= 0);
    memset(&sa, 0, sizeof(sa));
    sa.sun_family = AF_UNIX;
    assert_true(strlen(tmp) < sizeof(sa.sun_path));
    memcpy(sa.sun_path, tmp, strlen(tmp) + 1);
    assert_int_equal(bind(s, (struct sockaddr *)&sa, sizeof(sa)), 0);
    assert_int_equal(rename(tmp, f->rules), 0);
    await_metric(f, 0, "rl_config_reload_failures_total", 3, 10000);
    EXPECT_RULE(f, "r", 7, 3600);
    close(s);

    assert_int_equal(unlink(f->rules), 0);
    rlt_fx_write_file(f->rules, "rules:\n  r:\n    limits: [13/2h]\n");
    await_metric(f, 0, "rl_config_reloads_total", 1, 10000);
    EXPECT_RULE(f, "r", 13, 7200);
    assert_int_equal(metric(f, 0, "rl_config_reload_failures_total"), 3);
    assert_int_equal(log_lines(f, 0, "rules not reloaded", NULL), 3);
    assert_int_equal(
        log_lines(f, 0, "rules not reloaded", "not a regular file (a FIFO)",
                  NULL),
        1);
    assert_int_equal(log_lines(f, 0, "rules not reloaded",
                               "not a regular file (a directory)", NULL),
                     1);
    assert_int_equal(log_lines(f, 0, "rules not reloaded",
                               "not a regular file (a socket)", NULL),
                     1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        POLICY_TEST(test_check_config),
        POLICY_TEST(test_check_duplicate_keys),
        POLICY_TEST(test_counters_belong_to_their_rule),
        POLICY_TEST(test_inline_caps),
        POLICY_TEST(test_shadow),
        POLICY_TEST(test_fleet_exact),
        POLICY_TEST(test_quota_rlctl),
        POLICY_TEST(test_switches),
        POLICY_TEST(test_ready_after_switches),
        POLICY_TEST(test_reload_under_load),
        POLICY_TEST(test_sighup),
        POLICY_TEST(test_half_written_file),
        POLICY_TEST(test_lost_rules_warning),
        POLICY_TEST(test_configmap),
        POLICY_TEST(test_not_regular_file),
    };
    signal(SIGPIPE, SIG_IGN);
    rlt_fx_use(&(rlt_fx_conf_t){
        .bin = RL_SERVER_BIN, .log_level = "error", .metrics = 1, .gentle = 1});
    return cmocka_run_group_tests(tests, NULL, NULL);
}
