/* --threads (server/loops.c) end to end: rl-server with two loops as a
 * process, its connections handed from the first loop's listener to the
 * one with the most room; the memory store exact across the loops; a
 * reload reaching every loop; a reservation's handle made on one loop and
 * settled on the other; and --reuseport, two processes on one port. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "rl_error.h"
#include "rl_msg.h"
#include "rlt.h"
#include "rlt_fx.h"

#ifndef RL_SERVER_BIN
#error "RL_SERVER_BIN must name the rl-server binary"
#endif
#ifndef RL_CHECK_BIN
#error "RL_CHECK_BIN must name the rl-check binary"
#endif

#define CONNS 8

/* loop's sample of a per-loop family on server i's /metrics. */
static long long loop_metric(rlt_fx_t *f, int i, const char *family,
                             unsigned loop)
{
    char name[128];

    snprintf(name, sizeof(name), "%s{loop=\"%u\"}", family, loop);
    return rlt_fx_metric(f->srv[i].mport, name);
}

/* A check of rule `rule` for key. */
static rl_check_t rule_check(uint64_t id, const char *key, const char *rule)
{
    rl_check_t q = rlt_check(id, key, 1, 1, 1);

    q.limit = 0;
    q.window_s = 0;
    q.rule = rule;
    q.rule_len = strlen(rule);
    return q;
}

/* Opens CONNS connections, each asked once (so each is served by its
 * loop), into fd[]. */
static void open_conns(int port, int *fd)
{
    rlt_result_t r;
    rl_check_t q;
    int i;

    for (i = 0; i < CONNS; i++) {
        fd[i] = rlt_dial(port);
        assert_true(fd[i] >= 0);
        q = rlt_check((uint64_t)i + 1, "warm", 1000000, 3600, 1);
        assert_int_equal(rlt_exchange(fd[i], &q, 1, &r), RL_OK);
        assert_int_equal(r.r.code, RL_CODE_OK);
    }
}

static void close_conns(int *fd)
{
    int i;

    for (i = 0; i < CONNS; i++)
        close(fd[i]);
}

/* New connections go to the loop with the most room: eight one after
 * another are four and four, whichever loop each lands on. */
static void test_handoff_balances(void **state)
{
    rlt_fx_t *f = *state;
    long long a, b;
    int fd[CONNS];

    rlt_fx_start(f, 0, "--threads", "2", NULL);
    open_conns(f->srv[0].port, fd);
    a = loop_metric(f, 0, "rl_loop_connections", 0);
    b = loop_metric(f, 0, "rl_loop_connections", 1);
    assert_int_equal(a + b, CONNS);
    assert_true(a - b <= 1 && b - a <= 1);
    assert_int_equal(
        loop_metric(f, 0, "rl_loop_connections_handed_total", 0) +
            loop_metric(f, 0, "rl_loop_connections_handed_total", 1),
        CONNS);
    /* Closed, they leave the counts (each loop sees its own close). */
    close_conns(fd);
    {
        uint64_t end = rlt_mono_ms() + 5000;
        while ((a = loop_metric(f, 0, "rl_loop_connections", 0)) +
                       (b = loop_metric(f, 0, "rl_loop_connections", 1)) >
                   0 &&
               rlt_mono_ms() < end)
            rlt_nap_ms(10);
    }
    assert_int_equal(a + b, 0);
}

/* The admin listener's token file (in a new f->dir) and address. */
static void admin_files(rlt_fx_t *f, char *tokens, size_t tlen, char *aaddr,
                        size_t alen, int aport)
{
    FILE *t;

    assert_int_equal(rlt_fx_mkdir(f, "threads"), 0);
    snprintf(tokens, tlen, "%s/tokens", f->dir);
    t = fopen(tokens, "w");
    assert_non_null(t);
    fputs("ops s3cr3t-token-of-the-operators\n", t);
    fclose(t);
    snprintf(aaddr, alen, "127.0.0.1:%d", aport);
}

/* An operator tells a loop to take no new connection (--admin's POST
 * /v1/loops/pause): every new one goes to the other loop while those it
 * serves stay; resumed, it takes them again. Writes need the token; a
 * loop that does not exist is a 404, and so is one past the last. */
static void test_loop_pause(void **state)
{
    rlt_fx_t *f = *state;
    char tokens[160], aaddr[32], body[4096];
    int fd[CONNS], fd2[CONNS], aport = rlt_port_reserve();

    admin_files(f, tokens, sizeof(tokens), aaddr, sizeof(aaddr), aport);
    rlt_fx_start(f, 0, "--threads", "2", "--admin", aaddr, "--admin-token-file",
                 tokens, NULL);
    assert_int_equal(rlt_http_request(aport, "POST", "/v1/loops/pause?loop=1",
                                      NULL, body, sizeof(body)),
                     401);
    assert_int_equal(rlt_http_request(aport, "GET", "/v1/loops/pause?loop=1",
                                      "s3cr3t-token-of-the-operators", body,
                                      sizeof(body)),
                     405);
    assert_int_equal(rlt_http_request(aport, "POST", "/v1/loops/pause?loop=2",
                                      "s3cr3t-token-of-the-operators", body,
                                      sizeof(body)),
                     404);
    assert_int_equal(rlt_http_request(aport, "POST", "/v1/loops/pause?loop=1",
                                      "s3cr3t-token-of-the-operators", body,
                                      sizeof(body)),
                     200);
    assert_non_null(strstr(body, "{\"loop\":1,"));
    assert_non_null(strstr(body, "\"paused\":true"));
    assert_non_null(strstr(body, "\"threads\":2}"));
    assert_int_equal(loop_metric(f, 0, "rl_loop_paused", 1), 1);
    assert_int_equal(loop_metric(f, 0, "rl_loop_paused", 0), 0);
    /* Paused, loop 1 gets none of eight new connections. */
    open_conns(f->srv[0].port, fd);
    assert_int_equal(loop_metric(f, 0, "rl_loop_connections", 0), CONNS);
    assert_int_equal(loop_metric(f, 0, "rl_loop_connections", 1), 0);
    /* Resumed, it has the most room: the next eight are all its own. */
    assert_int_equal(rlt_http_request(aport, "POST", "/v1/loops/resume?loop=1",
                                      "s3cr3t-token-of-the-operators", body,
                                      sizeof(body)),
                     200);
    assert_null(strstr(body, "\"paused\":true"));
    open_conns(f->srv[0].port, fd2);
    assert_int_equal(loop_metric(f, 0, "rl_loop_connections", 0), CONNS);
    assert_int_equal(loop_metric(f, 0, "rl_loop_connections", 1), CONNS);
    assert_int_equal(
        rlt_http_request(aport, "GET", "/v1/loops", NULL, body, sizeof(body)),
        200);
    assert_non_null(strstr(body, "\"connections\":8,"));
    assert_int_equal(
        rlt_fx_metric(f->srv[0].mport, "rl_admin_loop_pauses_total"), 2);
    close_conns(fd);
    close_conns(fd2);
}

/* One loop cannot be paused: there is no other for its connections. */
static void test_loop_pause_one(void **state)
{
    rlt_fx_t *f = *state;
    char tokens[160], aaddr[32], body[4096];
    int aport = rlt_port_reserve();

    admin_files(f, tokens, sizeof(tokens), aaddr, sizeof(aaddr), aport);
    rlt_fx_start(f, 0, "--admin", aaddr, "--admin-token-file", tokens, NULL);
    assert_int_equal(rlt_http_request(aport, "POST", "/v1/loops/pause?loop=0",
                                      "s3cr3t-token-of-the-operators", body,
                                      sizeof(body)),
                     409);
    assert_non_null(strstr(body, "--threads 1"));
    assert_int_equal(
        rlt_http_request(aport, "GET", "/v1/loops", NULL, body, sizeof(body)),
        200);
    assert_non_null(strstr(body, "\"threads\":1}"));
    assert_non_null(strstr(body, "\"paused\":false"));
}

/* Every connection asks for the same key, over its limit: the two loops
 * count on one memory store, so exactly the limit is admitted, for every
 * algorithm. (rl-bench's audit hammers it concurrently: tests/bench.) */
static void test_memory_exact(void **state)
{
    static const char *const rules[] = {"fixed", "sliding", "counter", "gcra"};
    enum { PER = 40, LIMIT = 100 };
    rlt_fx_t *f = *state;
    static rl_check_t q[CONNS][PER];
    static rlt_result_t r[PER];
    int fd[CONNS], i, j, k;
    long long allowed;

    assert_int_equal(rlt_fx_mkdir(f, "threads"), RL_OK);
    rlt_fx_write_file(
        f->rules,
        "rules:\n"
        "  fixed: {limits: [100/1h]}\n"
        "  sliding:\n"
        "    limits: [{limit: 100/1h, algorithm: sliding-window}]\n"
        "  counter:\n"
        "    limits: [{limit: 100/1h, algorithm: sliding-window-counter}]\n"
        "  gcra:\n"
        "    limits: [{rate: 100/1h, burst: 100, algorithm: gcra}]\n");
    rlt_fx_start(f, 0, "--threads", "2", "--config", f->rules, NULL);
    open_conns(f->srv[0].port, fd);
    assert_true(loop_metric(f, 0, "rl_loop_connections", 1) > 0);
    for (k = 0; k < 4; k++) {
        allowed = 0;
        for (i = 0; i < CONNS; i++) {
            for (j = 0; j < PER; j++)
                q[i][j] =
                    rule_check((uint64_t)(i * PER + j + 1), "hot", rules[k]);
            assert_int_equal(rlt_exchange(fd[i], q[i], PER, r), RL_OK);
            for (j = 0; j < PER; j++) {
                assert_true(r[j].r.code == RL_CODE_OK ||
                            r[j].r.code == RL_CODE_OVER_LIMIT);
                assert_string_equal(r[j].err, "");
                allowed += r[j].r.code == RL_CODE_OK;
            }
        }
        /* CONNS * PER = 320 asked of a limit of 100. */
        assert_int_equal(allowed, LIMIT);
    }
    close_conns(fd);
}

/* A new rules file reaches both loops: connections served by either see
 * the new limit. */
static void test_reload_every_loop(void **state)
{
    rlt_fx_t *f = *state;
    rlt_result_t r;
    rl_check_t q;
    int fd[CONNS], i, j;
    char key[16];
    uint64_t end;

    assert_int_equal(rlt_fx_mkdir(f, "threads"), RL_OK);
    rlt_fx_write_file(f->rules, "rules:\n  api: {limits: [2/1h]}\n");
    rlt_fx_start(f, 0, "--threads", "2", "--config", f->rules,
                 "--reload-settle-ms", "50", NULL);
    open_conns(f->srv[0].port, fd);
    rlt_fx_write_file(f->rules, "rules:\n  api: {limits: [5/1h]}\n");
    end = rlt_mono_ms() + 10000;
    while (rlt_fx_metric(f->srv[0].mport, "rl_config_generation") < 2 &&
           rlt_mono_ms() < end)
        rlt_nap_ms(20);
    assert_int_equal(rlt_fx_metric(f->srv[0].mport, "rl_config_generation"), 2);
    /* The other loop installs it when its wake-up runs: asked again
     * until it answers with the new limit, bounded. */
    for (i = 0; i < CONNS; i++) {
        snprintf(key, sizeof(key), "c%d", i);
        do {
            q = rule_check(1, key, "api");
            assert_int_equal(rlt_exchange(fd[i], &q, 1, &r), RL_OK);
        } while (r.r.limit != 5 && rlt_mono_ms() < end);
        assert_int_equal(r.r.limit, 5);
        for (j = 1; j < 5; j++) {
            q = rule_check((uint64_t)j + 1, key, "api");
            assert_int_equal(rlt_exchange(fd[i], &q, 1, &r), RL_OK);
        }
        /* used counts what the loop that answered saw at the new limit */
        q = rule_check(9, key, "api");
        assert_int_equal(rlt_exchange(fd[i], &q, 1, &r), RL_OK);
        assert_int_equal(r.r.code, RL_CODE_OVER_LIMIT);
    }
    close_conns(fd);
}

/* Runs rl-check with args, its stdout into out. Returns its exit status. */
static int run_check(rlt_fx_t *f, char *const args[], char *out, size_t len)
{
    char path[160], *text;
    int status;

    snprintf(path, sizeof(path), "%s/check.out", f->dir);
    status = rlt_run(args, path, "/dev/null", 10000, NULL);
    text = rlt_slurp(path);
    assert_non_null(text);
    snprintf(out, len, "%s", text);
    free(text);
    return status;
}

/* A reservation made on one loop is settled on the other: every loop
 * signs handles with the first loop's secret. */
static void test_handle_across_loops(void **state)
{
    rlt_fx_t *f = *state;
    char out[1024], handle[600], *h;
    long long before0, before1, after0, after1;
    size_t n;

    assert_int_equal(rlt_fx_mkdir(f, "threads"), RL_OK);
    rlt_fx_start(f, 0, "--threads", "2", "--rule", "api=100/1h", NULL);
    before0 = loop_metric(f, 0, "rl_loop_connections_handed_total", 0);
    before1 = loop_metric(f, 0, "rl_loop_connections_handed_total", 1);
    {
        char *args[] = {RL_CHECK_BIN, "--server", f->srv[0].addr,
                        "--key",      "k",        "--rule",
                        "api",        "--cost",   "5",
                        "--reserve",  NULL};
        assert_int_equal(run_check(f, args, out, sizeof(out)), 0);
    }
    h = strstr(out, "handle=");
    assert_non_null(h);
    h += 7;
    n = strcspn(h, " \n");
    assert_true(n > 0 && n < sizeof(handle));
    memcpy(handle, h, n);
    handle[n] = '\0';
    {
        char *args[] = {RL_CHECK_BIN, "--server", f->srv[0].addr,
                        "--settle",   handle,     "--actual",
                        "2",          NULL};
        assert_int_equal(run_check(f, args, out, sizeof(out)), 0);
        assert_non_null(strstr(out, "settled"));
    }
    after0 = loop_metric(f, 0, "rl_loop_connections_handed_total", 0);
    after1 = loop_metric(f, 0, "rl_loop_connections_handed_total", 1);
    /* One connection each: ties go to the loops in turn. */
    assert_int_equal(after0 - before0, 1);
    assert_int_equal(after1 - before1, 1);
}

/* --reuseport: two processes bind one port, and the kernel gives each
 * some of the connections; without it the second cannot bind. */
static void test_reuseport(void **state)
{
    rlt_fx_t *f = *state;
    char port[8], listen[32];
    long long a, b;
    rlt_result_t r;
    rl_check_t q;
    int i, fd;

    rlt_fx_redis(f);
    snprintf(port, sizeof(port), "%d", rlt_port_reserve());
    snprintf(listen, sizeof(listen), "127.0.0.1:%s", port);
    rlt_fx_start(f, 0, "--listen", listen, "--reuseport", "--redis", f->raddr,
                 NULL);
    {
        /* Without --reuseport the port is taken. */
        char *args[] = {RL_SERVER_BIN, "--listen", listen,
                        "--redis",     f->raddr,   NULL};
        assert_int_equal(rlt_run(args, "/dev/null", "/dev/null", 10000, NULL),
                         1);
    }
    rlt_fx_start(f, 1, "--listen", listen, "--reuseport", "--redis", f->raddr,
                 NULL);
    for (i = 0; i < 64; i++) {
        fd = rlt_dial(atoi(port));
        assert_true(fd >= 0);
        q = rlt_check((uint64_t)i + 1, "shared", 1000000, 3600, 1);
        assert_int_equal(rlt_exchange(fd, &q, 1, &r), RL_OK);
        assert_int_equal(r.r.code, RL_CODE_OK);
        /* One Redis: the count is the fleet's, whichever answered. */
        assert_int_equal(r.r.used, (uint64_t)i + 1);
        close(fd);
    }
    a = rlt_fx_metric(f->srv[0].mport, "rl_connections_accepted_total");
    b = rlt_fx_metric(f->srv[1].mport, "rl_connections_accepted_total");
    assert_true(a > 0 && b > 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        RLT_FX_TEST(test_handoff_balances),
        RLT_FX_TEST(test_memory_exact),
        RLT_FX_TEST(test_reload_every_loop),
        RLT_FX_TEST(test_handle_across_loops),
        RLT_FX_TEST(test_reuseport),
        RLT_FX_TEST(test_loop_pause),
        RLT_FX_TEST(test_loop_pause_one),
    };
    rlt_fx_use(&(rlt_fx_conf_t){
        .bin = RL_SERVER_BIN, .log_level = "warn", .metrics = 1});
    if (getenv("RLT_FILTER") != NULL)
        cmocka_set_test_filter(getenv("RLT_FILTER"));
    return cmocka_run_group_tests(tests, NULL, NULL);
}
