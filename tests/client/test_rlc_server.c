/* librlc against the real rl-server (label: integration): decisions with
 * the memory store and with Redis, both APIs, reconnect after the server
 * restarts, timeouts while the server is frozen, two servers sharing one
 * Redis, and a drained server (GOAWAY) that fails no check. rl-server is
 * started on a free port and stopped by its pid. */
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
#include <uv.h>

#include "rlc.h"
#include "rlt.h"
#include "rlt_fx.h"

#ifndef RL_SERVER_BIN
#error "RL_SERVER_BIN must name the rl-server binary"
#endif
#ifndef RL_CHECK_BIN
#error "RL_CHECK_BIN must name the rl-check binary"
#endif

typedef rlt_server_t server_t;

static rlt_redis_t redis;
static int have_redis;

/* Starts rl-server on s->port (0: a free one), with --drain-ms drain_ms
 * unless it is NULL. Returns 0 or an RL_E* code. */
static int server_start_drain(server_t *s, int port, const char *redis_addr,
                              const char *drain_ms)
{
    char *argv[12];
    int k = 0;

    argv[k++] = "--log-level";
    argv[k++] = "warn";
    argv[k++] = "--rule";
    argv[k++] = "search=3/60";
    if (redis_addr) {
        argv[k++] = "--redis";
        argv[k++] = (char *)redis_addr;
    }
    if (drain_ms) {
        argv[k++] = "--drain-ms";
        argv[k++] = (char *)drain_ms;
    }
    argv[k] = NULL;
    return rlt_server_start(s, RL_SERVER_BIN, port, argv);
}

/* Starts rl-server on s->port (0: a free one). Returns 0 or an RL_E*
 * code. */
static int server_start(server_t *s, int port, const char *redis_addr)
{
    return server_start_drain(s, port, redis_addr, NULL);
}

static void server_stop(server_t *s)
{
    assert_true(rlt_server_stop(s) >= 0);
}

static rlc_client_t *connect_to(const char *servers, uint32_t timeout_ms)
{
    rlc_options_t o;
    rlc_client_t *c = NULL;

    rlc_options_init(&o);
    o.servers = servers;
    o.request_timeout_ms = timeout_ms;
    o.reconnect_min_ms = 10;
    assert_int_equal(rlc_connect(&c, &o), RLC_OK);
    return c;
}

/* rl-server connects to Redis in the background: wait (bounded) until a
 * probe is counted rather than failed open (the server's error text says
 * when the store was bypassed). */
static void await_store_up(rlc_client_t *c)
{
    rlc_check_t req = {.key = "probe:store-up", .limit = 1000000,
                       .window_s = 60};
    uint64_t deadline = rlt_mono_ms() + 10000;
    rlc_result_t res;

    do {
        assert_int_equal(rlc_check(c, &req, &res), RLC_OK);
    } while (res.error[0] != '\0' && rlt_mono_ms() < deadline);
    assert_string_equal(res.error, "");
}

/* A key no other test or run uses. */
static void fresh_key(char *dst, size_t cap, const char *what)
{
    static int n;

    snprintf(dst, cap, "it:%s:%d:%d:%llu", what, (int)getpid(), n++,
             (unsigned long long)rlt_mono_ms());
}

/* A 60 s window that is about to end would split the test's hits in two:
 * wait for the next one instead. 15 s covers the slowest user, which stops
 * a server that idle blocking clients hold for its 5 s GOAWAY grace. */
static void avoid_window_edge(rlc_client_t *c)
{
    char key[128];
    rlc_result_t res;

    fresh_key(key, sizeof(key), "edge");
    rlc_check_t req = {.key = key, .limit = 1000, .window_s = 60};
    assert_int_equal(rlc_check(c, &req, &res), RLC_OK);
    if (res.reset_after_ms < 15000)
        nanosleep(
            &(struct timespec){(time_t)(res.reset_after_ms / 1000 + 1), 0},
            NULL);
}

/* 5 per 60 s: five allowed, the sixth over the limit, every field right. */
static void check_five_then_over(rlc_client_t *c)
{
    char key[128];
    rlc_result_t res;
    int i;

    avoid_window_edge(c);
    fresh_key(key, sizeof(key), "five");
    rlc_check_t req = {.key = key, .limit = 5, .window_s = 60};
    for (i = 1; i <= 6; i++) {
        assert_int_equal(rlc_check(c, &req, &res), RLC_OK);
        assert_int_equal(res.status, RLC_OK);
        assert_int_equal(res.limit, 5);
        /* A refusal consumes nothing: used stays at the limit. */
        assert_int_equal(res.used, i <= 5 ? (uint64_t)i : 5);
        assert_int_equal(res.remaining, i <= 5 ? (uint64_t)(5 - i) : 0);
        assert_true(res.reset_after_ms > 0 && res.reset_after_ms <= 60000);
        if (i <= 5) {
            assert_int_equal(res.code, RLC_CODE_OK);
            assert_int_equal(res.retry_after_ms, 0);
        } else {
            assert_int_equal(res.code, RLC_CODE_OVER_LIMIT);
            assert_true(res.retry_after_ms > 0);
            assert_int_equal(rlc_http_status(&res), 429);
        }
    }

    /* The batch call against the real server: one round trip, answers in
     * their places. */
    rlc_check_t reqs[3] = {
        {.key = key, .limit = 5, .window_s = 60},
        {.key = "it:batch:other", .limit = 9, .window_s = 60},
        {.key = key, .rule = NULL, .limit = 5, .window_s = 60, .cost = 2}};
    rlc_result_t out[3];
    assert_int_equal(rlc_check_batch(c, reqs, 3, out), RLC_OK);
    assert_int_equal(out[0].used, 5);
    assert_int_equal(out[0].code, RLC_CODE_OVER_LIMIT);
    assert_int_equal(out[1].limit, 9);
    assert_int_equal(out[1].code, RLC_CODE_OK);
    assert_int_equal(out[2].used, 5);
    assert_int_equal(out[2].code, RLC_CODE_OVER_LIMIT);

    /* Named rules: known, and unknown (an ERROR answer, not a failure). */
    fresh_key(key, sizeof(key), "rule");
    rlc_check_t rule = {.key = key, .rule = "search"};
    for (i = 1; i <= 4; i++) {
        assert_int_equal(rlc_check(c, &rule, &res), RLC_OK);
        assert_int_equal(res.limit, 3);
        assert_int_equal(res.code, i <= 3 ? RLC_CODE_OK : RLC_CODE_OVER_LIMIT);
    }
    rule.rule = "no-such-rule";
    assert_int_equal(rlc_check(c, &rule, &res), RLC_OK);
    assert_int_equal(res.code, RLC_CODE_ERROR);
    assert_true(strlen(res.error) > 0);
}

static void test_memory_decisions(void **state)
{
    server_t s;
    rlc_client_t *c;

    (void)state;
    assert_int_equal(server_start(&s, 0, NULL), 0);
    c = connect_to(s.addr, 2000);
    check_five_then_over(c);
    rlc_free(c);
    server_stop(&s);
}

static void test_redis_decisions(void **state)
{
    server_t s;
    rlc_client_t *c;
    char ra[64];

    (void)state;
    if (!have_redis)
        skip();
    snprintf(ra, sizeof(ra), "127.0.0.1:%d", redis.port);
    assert_int_equal(server_start(&s, 0, ra), 0);
    c = connect_to(s.addr, 2000);
    await_store_up(c);
    check_five_then_over(c);
    rlc_free(c);
    server_stop(&s);
}

/* Two rl-servers on one Redis share one count per caller; the client's
 * address list reaches the second when the first is stopped. */
static void test_redis_two_servers(void **state)
{
    server_t a, b;
    rlc_client_t *ca, *cb, *both;
    rlc_result_t res;
    char ra[64], key[128], list[160];
    int i;

    (void)state;
    if (!have_redis)
        skip();
    snprintf(ra, sizeof(ra), "127.0.0.1:%d", redis.port);
    assert_int_equal(server_start(&a, 0, ra), 0);
    assert_int_equal(server_start(&b, 0, ra), 0);
    ca = connect_to(a.addr, 2000);
    cb = connect_to(b.addr, 2000);
    await_store_up(ca);
    await_store_up(cb);
    avoid_window_edge(ca);
    fresh_key(key, sizeof(key), "shared");
    rlc_check_t req = {.key = key, .limit = 5, .window_s = 60};
    for (i = 1; i <= 6; i++) {
        assert_int_equal(rlc_check(i % 2 ? ca : cb, &req, &res), RLC_OK);
        /* A refusal consumes nothing. */
        assert_int_equal(res.used, i <= 5 ? (uint64_t)i : 5);
        assert_int_equal(res.code, i <= 5 ? RLC_CODE_OK : RLC_CODE_OVER_LIMIT);
    }
    snprintf(list, sizeof(list), "%s,%s", a.addr, b.addr);
    both = connect_to(list, 2000);
    assert_string_equal(rlc_server(both), a.addr);
    server_stop(&a);
    assert_int_equal(rlc_check(both, &req, &res), RLC_OK);
    assert_int_equal(res.used, 5);
    assert_int_equal(res.code, RLC_CODE_OVER_LIMIT);
    assert_string_equal(rlc_server(both), b.addr);
    rlc_free(both);
    rlc_free(ca);
    rlc_free(cb);
    server_stop(&b);
}

/* Blocking client: the server restarts between two checks. */
static void test_reconnect_blocking(void **state)
{
    server_t s;
    rlc_client_t *c;
    rlc_result_t res;
    char key[128];

    (void)state;
    /* A reserved port: nothing else can take it while the server is
     * down. */
    assert_int_equal(server_start(&s, rlt_port_reserve(), NULL), 0);
    c = connect_to(s.addr, 2000);
    fresh_key(key, sizeof(key), "restart");
    rlc_check_t req = {.key = key, .limit = 5, .window_s = 60};
    assert_int_equal(rlc_check(c, &req, &res), RLC_OK);
    assert_int_equal(res.used, 1);
    server_stop(&s);
    assert_int_equal(rlc_check(c, &req, &res), RLC_ECLOSED);
    assert_int_equal(res.flags, RLC_RESULT_FAILED_CLOSED);
    assert_int_equal(server_start(&s, s.port, NULL), 0);
    nanosleep(&(struct timespec){0, 50 * 1000000L}, NULL); /* backoff */
    assert_int_equal(rlc_check(c, &req, &res), RLC_OK);
    assert_int_equal(res.used, 1); /* a new memory store */
    rlc_free(c);
    server_stop(&s);
}

/* A frozen server (SIGSTOP) accepts bytes but answers nothing: the request
 * timeout is honoured, and the server answers again once thawed. */
static void test_timeout_frozen_server(void **state)
{
    server_t s;
    rlc_client_t *c;
    rlc_result_t res;
    uint64_t t0, dt;

    (void)state;
    assert_int_equal(server_start(&s, 0, NULL), 0);
    c = connect_to(s.addr, 200);
    rlc_check_t req = {.key = "it:frozen", .limit = 5, .window_s = 60};
    assert_int_equal(rlc_check(c, &req, &res), RLC_OK);
    kill(s.pid, SIGSTOP);
    t0 = rlt_mono_ms();
    assert_int_equal(rlc_check(c, &req, &res), RLC_ETIMEDOUT);
    dt = rlt_mono_ms() - t0;
    assert_true(dt >= 199 && dt < 10000);
    kill(s.pid, SIGCONT);
    assert_int_equal(rlc_check(c, &req, &res), RLC_OK);
    assert_int_equal(res.used, 3); /* the timed-out check counted too */
    rlc_free(c);
    server_stop(&s);
}

/* Async client: 100 checks in flight, 50 allowed; the server restarts and
 * the client reconnects by itself; a frozen server times checks out. */
typedef struct actx_s {
    server_t s;
    rlc_async_t *c;
    char key[128];
    int phase, calls, ok, over, errors, timeouts, connects, disconnects;
    uint64_t t0;
} actx_t;

static actx_t A;

static void a_on_result(rlc_async_t *c, const rlc_result_t *res, void *arg);

static void a_submit(int n, int limit)
{
    rlc_check_t req = {.key = A.key, .limit = (uint64_t)limit, .window_s = 60};
    int i;

    for (i = 0; i < n; i++)
        assert_int_equal(rlc_async_check(A.c, &req, a_on_result, NULL), RLC_OK);
}

static void a_on_state(rlc_async_t *c, int connected, int status, void *arg)
{
    (void)c;
    (void)arg;
    (void)status;
    if (connected) {
        A.connects++;
        if (A.phase == 1) {
            /* Back after the restart: a fresh store. */
            A.phase = 2;
            a_submit(1, 5);
        }
        return;
    }
    A.disconnects++;
    if (A.phase == 1 && A.disconnects == 1) {
        int port = A.s.port;
        server_stop(&A.s);
        assert_int_equal(server_start(&A.s, port, NULL), 0);
    }
}

static void a_on_result(rlc_async_t *c, const rlc_result_t *res, void *arg)
{
    (void)arg;
    A.calls++;
    if (res->status == RLC_ETIMEDOUT)
        A.timeouts++;
    else if (res->status != RLC_OK)
        A.errors++;
    else if (res->code == RLC_CODE_OK)
        A.ok++;
    else if (res->code == RLC_CODE_OVER_LIMIT)
        A.over++;

    if (A.phase == 0 && A.calls == 100) {
        assert_int_equal(A.ok, 50);
        assert_int_equal(A.over, 50);
        assert_int_equal(rlc_async_inflight(c), 0);
        A.phase = 1;
        /* Restart the server: the state callback sees it go. */
        kill(A.s.pid, SIGTERM);
    } else if (A.phase == 2) {
        assert_int_equal(res->status, RLC_OK);
        assert_int_equal(res->used, 1);
        A.phase = 3;
        kill(A.s.pid, SIGSTOP);
        A.t0 = rlt_mono_ms();
        a_submit(3, 5);
    } else if (A.phase == 3 && A.timeouts == 3) {
        uint64_t dt = rlt_mono_ms() - A.t0;
        assert_true(dt >= 295 && dt < 10000);
        kill(A.s.pid, SIGCONT);
        rlc_async_free(c);
    }
}

static void test_async_against_server(void **state)
{
    uv_loop_t loop;
    rlc_options_t o;

    (void)state;
    memset(&A, 0, sizeof(A));
    /* Restarted on the same port: a reserved one. */
    assert_int_equal(server_start(&A.s, rlt_port_reserve(), NULL), 0);
    fresh_key(A.key, sizeof(A.key), "async");
    uv_loop_init(&loop);
    rlc_options_init(&o);
    o.servers = A.s.addr;
    o.request_timeout_ms = 300;
    o.reconnect_min_ms = 20;
    assert_int_equal(rlc_async_new(&A.c, &loop, &o), RLC_OK);
    rlc_async_on_state(A.c, a_on_state, NULL);
    a_submit(100, 50);
    uv_run(&loop, UV_RUN_DEFAULT);
    assert_int_equal(uv_loop_close(&loop), 0);
    assert_int_equal(A.phase, 3);
    assert_int_equal(A.calls, 104);
    assert_int_equal(A.connects, 2);
    assert_int_equal(A.timeouts, 3);
    assert_int_equal(A.errors, 0);
    server_stop(&A.s);
}

/* A drained server fails no check (DESIGN.md, "Stopping: drain and
 * GOAWAY"). Servers A (--drain-ms 300) and B are both in `servers`; an
 * async client keeps 100 checks in flight on A, in a closed loop, when A
 * gets SIGTERM. A serves through its drain, then says GOAWAY: the client
 * sends what it had buffered, closes its side, reads the last answers, and
 * moves to B with the checks submitted meanwhile. Not one check may fail or
 * time out, and A, left by its only client, exits long before its 5 s
 * grace is up. */
#define DRAIN_INFLIGHT 100
#define DRAIN_AFTER 500 /* answers to collect from B before stopping */

typedef struct dctx_s {
    server_t a, b;
    rlc_async_t *c;
    char key[128];
    int calls, failed, first_failure, on_b, connects, disconnects;
    int down_status;
    size_t down_inflight;
    int stopping;
    uint64_t t_term, t_down;
} dctx_t;

static dctx_t D;

static void d_on_result(rlc_async_t *c, const rlc_result_t *res, void *arg);

static void d_submit(void)
{
    rlc_check_t req = {.key = D.key, .limit = 1000000000, .window_s = 60};

    assert_int_equal(rlc_async_check(D.c, &req, d_on_result, NULL), RLC_OK);
}

static void d_on_state(rlc_async_t *c, int connected, int status, void *arg)
{
    (void)arg;
    if (connected) {
        D.connects++;
        return;
    }
    D.disconnects++;
    D.down_status = status;
    /* The report names the server that went away. */
    assert_string_equal(rlc_async_server(c), D.a.addr);
    D.down_inflight = rlc_async_inflight(c);
    D.t_down = rlt_mono_ms();
}

static void d_on_result(rlc_async_t *c, const rlc_result_t *res, void *arg)
{
    (void)arg;
    D.calls++;
    if (res->status != RLC_OK || res->code != RLC_CODE_OK) {
        if (D.failed++ == 0)
            D.first_failure = res->status;
    }
    if (D.disconnects > 0 && strcmp(rlc_async_server(c), D.b.addr) == 0)
        D.on_b++;
    if (D.on_b >= DRAIN_AFTER)
        D.stopping = 1;
    if (!D.stopping)
        d_submit();
    else if (rlc_async_inflight(c) == 0)
        rlc_async_free(c);
}

static void d_on_term(uv_timer_t *t)
{
    D.t_term = rlt_mono_ms();
    assert_int_equal(kill(D.a.pid, SIGTERM), 0);
    uv_close((uv_handle_t *)t, NULL);
}

static void test_async_drain_loses_nothing(void **state)
{
    uv_loop_t loop;
    uv_timer_t term;
    rlc_options_t o;
    char list[160];
    int i, st;

    (void)state;
    memset(&D, 0, sizeof(D));
    assert_int_equal(server_start_drain(&D.a, 0, NULL, "300"), 0);
    assert_int_equal(server_start(&D.b, 0, NULL), 0);
    snprintf(list, sizeof(list), "%s,%s", D.a.addr, D.b.addr);
    fresh_key(D.key, sizeof(D.key), "drain");
    uv_loop_init(&loop);
    rlc_options_init(&o);
    o.servers = list;
    o.request_timeout_ms = 3000;
    o.reconnect_min_ms = 20;
    assert_int_equal(rlc_async_new(&D.c, &loop, &o), RLC_OK);
    rlc_async_on_state(D.c, d_on_state, NULL);
    for (i = 0; i < DRAIN_INFLIGHT; i++)
        d_submit();
    uv_timer_init(&loop, &term);
    uv_timer_start(&term, d_on_term, 200, 0);
    uv_run(&loop, UV_RUN_DEFAULT);
    assert_int_equal(uv_loop_close(&loop), 0);

    if (D.failed)
        fprintf(stderr, "first failure: %s\n", rlc_strerror(D.first_failure));
    assert_int_equal(D.failed, 0);
    assert_true(D.on_b >= DRAIN_AFTER);
    /* A served through its drain, then its end came from the GOAWAY, with
     * checks waiting for the next server; then B took over. */
    assert_true(D.t_down - D.t_term >= 300);
    assert_int_equal(D.disconnects, 1);
    assert_int_equal(D.down_status, RLC_ESHUTDOWN);
    assert_true(D.down_inflight > 0);
    assert_int_equal(D.connects, 2);
    st = rlt_stop(D.a.pid, 0, 10000);
    D.a.pid = -1;
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0);
    assert_true(rlt_mono_ms() - D.t_term < 4000); /* not by the grace */
    server_stop(&D.b);
}

/* The same with the blocking client, one check at a time: every call is
 * answered, by A through its drain and by B after A's GOAWAY. */
static void test_blocking_drain_loses_nothing(void **state)
{
    server_t a, b;
    rlc_client_t *c;
    rlc_result_t res;
    char key[128], list[160];
    uint64_t t_term;
    int on_b = 0, calls = 0, st;

    (void)state;
    assert_int_equal(server_start_drain(&a, 0, NULL, "300"), 0);
    assert_int_equal(server_start(&b, 0, NULL), 0);
    snprintf(list, sizeof(list), "%s,%s", a.addr, b.addr);
    c = connect_to(list, 3000);
    fresh_key(key, sizeof(key), "drain-blocking");
    rlc_check_t req = {.key = key, .limit = 1000000000, .window_s = 60};
    assert_int_equal(rlc_check(c, &req, &res), RLC_OK);
    t_term = rlt_mono_ms();
    assert_int_equal(kill(a.pid, SIGTERM), 0);
    while (on_b < 200) {
        assert_int_equal(rlc_check(c, &req, &res), RLC_OK);
        assert_int_equal(res.code, RLC_CODE_OK);
        calls++;
        if (strcmp(rlc_server(c), b.addr) == 0)
            on_b++;
        else
            assert_true(rlt_mono_ms() - t_term < 3000);
    }
    assert_true(calls > on_b); /* A answered through its drain */
    st = rlt_stop(a.pid, 0, 10000);
    a.pid = -1;
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0);
    assert_true(rlt_mono_ms() - t_term < 4000); /* not by the grace */
    rlc_free(c);
    server_stop(&b);
}

/* ---- shadow mode, through librlc and rl-check ----------------------- */

/* Runs rl-check with args (NULL-terminated), its stdout into out (NUL-
 * terminated, at most cap - 1 bytes). Returns its exit status, or -1 when
 * it did not exit by itself within 10 s (then it is killed). */
static int run_check(const rlt_fx_t *f, char *const args[], char *out,
                     size_t cap)
{
    char path[128], *argv[16];
    int k = 0, fd, st;
    pid_t pid;
    ssize_t n;
    uint64_t deadline = rlt_mono_ms() + 10000;

    argv[k++] = RL_CHECK_BIN;
    while (*args != NULL && k < 15)
        argv[k++] = *args++;
    argv[k] = NULL;
    snprintf(path, sizeof(path), "%s/out", f->dir);
    fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    assert_true(fd >= 0);
    pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        dup2(fd, STDOUT_FILENO);
        execv(argv[0], argv);
        _exit(127);
    }
    while (waitpid(pid, &st, WNOHANG) == 0) {
        if (rlt_mono_ms() > deadline) {
            rlt_stop(pid, SIGKILL, 1000);
            close(fd);
            return -1;
        }
        nanosleep(&(struct timespec){0, 5000000}, NULL);
    }
    n = pread(fd, out, cap - 1, 0);
    close(fd);
    out[n > 0 ? n : 0] = '\0';
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* Starts rl-server with an enforced rule from a flag (s: 2 per second)
 * and, from a rules file, "sh": 2 per hour in shadow mode; over Redis when
 * redis_addr is set. */
static void shadow_server_start(rlt_fx_t *f, const char *redis_addr)
{
    if (f->dir[0] == '\0')
        assert_int_equal(rlt_fx_mkdir(f, "rlc-shadow"), 0);
    rlt_fx_write_file(f->rules, "rules:\n"
                                "  sh:\n"
                                "    limits: [2/1h]\n"
                                "    mode: shadow\n");
    rlt_fx_start(f, 0, "--rule", "s=2/1s", "--config", f->rules,
                 redis_addr ? "--redis" : NULL, redis_addr, NULL);
}

/* A rule in shadow mode, from the real server: the third check of a
 * 2-per-hour rule is allowed and marked shadow_refused, through the
 * blocking API, the async API and rl-check, which prints the mark and the
 * deciding window at the end of its line and exits 0. */
static void on_shadow(rlc_async_t *c, const rlc_result_t *res, void *arg)
{
    *(rlc_result_t *)arg = *res;
    rlc_async_free(c);
}

static void shadow_checks(rlt_fx_t *f, const char *redis_addr)
{
    char key[128], out[512], want[256];
    rlc_client_t *c;
    rlc_result_t res, ares;
    int i, attempt;

    shadow_server_start(f, redis_addr);
    c = connect_to(f->srv[0].addr, 2000);
    if (redis_addr)
        await_store_up(c);
    /* An hour's window ending during the test would split its checks:
     * take a fresh key past the edge then. */
    for (attempt = 0; attempt < 2; attempt++) {
        fresh_key(key, sizeof(key), "shadow");
        rlc_check_t req = {.key = key, .rule = "sh"};
        for (i = 1; i <= 2; i++) {
            assert_int_equal(rlc_check(c, &req, &res), RLC_OK);
            assert_int_equal(res.code, RLC_CODE_OK);
            assert_int_equal(res.shadow_refused, 0);
            assert_int_equal(res.window_s, 3600);
            assert_int_equal(res.used, (uint64_t)i);
        }
        if (res.reset_after_ms > 15000)
            break;
        nanosleep(
            &(struct timespec){(time_t)(res.reset_after_ms / 1000 + 1), 0},
            NULL);
    }
    rlc_check_t req = {.key = key, .rule = "sh"};
    assert_int_equal(rlc_check(c, &req, &res), RLC_OK);
    assert_int_equal(res.code, RLC_CODE_OK);
    assert_int_equal(rlc_result_allowed(&res), 1);
    assert_int_equal(res.shadow_refused, 1);
    assert_int_equal(res.window_s, 3600);
    assert_int_equal(res.limit, 2);
    assert_int_equal(res.used, 2); /* the refusal consumed nothing */
    assert_int_equal(res.retry_after_ms, 0);
    /* The enforced rule names its window too, and has no mark. */
    char key2[128];
    fresh_key(key2, sizeof(key2), "enforced");
    rlc_check_t req2 = {.key = key2, .rule = "s"};
    assert_int_equal(rlc_check(c, &req2, &res), RLC_OK);
    assert_int_equal(res.code, RLC_CODE_OK);
    assert_int_equal(res.shadow_refused, 0);
    assert_int_equal(res.window_s, 1);
    rlc_free(c);

    /* The async API, on the same key. */
    uv_loop_t loop;
    rlc_async_t *ac;
    rlc_options_t o;
    assert_int_equal(uv_loop_init(&loop), 0);
    rlc_options_init(&o);
    o.servers = f->srv[0].addr;
    o.request_timeout_ms = 2000;
    assert_int_equal(rlc_async_new(&ac, &loop, &o), RLC_OK);
    memset(&ares, 0, sizeof(ares));
    ares.status = -1000;
    assert_int_equal(rlc_async_check(ac, &req, on_shadow, &ares), RLC_OK);
    uv_run(&loop, UV_RUN_DEFAULT);
    assert_int_equal(uv_loop_close(&loop), 0);
    assert_int_equal(ares.status, RLC_OK);
    assert_int_equal(ares.code, RLC_CODE_OK);
    assert_int_equal(ares.shadow_refused, 1);
    assert_int_equal(ares.window_s, 3600);

    /* rl-check: the existing fields first, in their order, then the new
     * ones; exit 0 for a shadow refusal. */
    char *args[] = {"--server", f->srv[0].addr, "--key", key,
                    "--rule",   "sh",           NULL};
    assert_int_equal(run_check(f, args, out, sizeof(out)), 0);
    assert_true(
        strncmp(out, "OK used=2 remaining=0 limit=2 reset_after_ms=", 45) == 0);
    assert_non_null(strstr(out, " window=3600s shadow_refused\n"));
    assert_int_equal(strchr(out, '\n')[1], '\0'); /* one line */

    /* An inline check past its limit: OVER_LIMIT, exit 1, its window at
     * the end and no mark. */
    fresh_key(key, sizeof(key), "inline");
    char *args2[] = {"--server", f->srv[0].addr, "--key", key,        "--limit",
                     "1",        "--window",     "86400", "--repeat", "2",
                     NULL};
    assert_int_equal(run_check(f, args2, out, sizeof(out)), 1);
    snprintf(want, sizeof(want), "OK used=1 remaining=0 limit=1 ");
    assert_true(strncmp(out, want, strlen(want)) == 0);
    assert_non_null(strstr(out, " window=86400s\nOVER_LIMIT used=1 "
                                "remaining=0 limit=1 retry_after_ms="));
    assert_true(strlen(out) > 15 &&
                strcmp(out + strlen(out) - 15, " window=86400s\n") == 0);
    assert_null(strstr(out, "shadow"));

    assert_true(rlt_server_stop(&f->srv[0]) >= 0);
}

static void test_shadow_memory(void **state)
{
    shadow_checks(*state, NULL);
}

static void test_shadow_redis(void **state)
{
    char ra[64];

    if (!have_redis)
        skip();
    snprintf(ra, sizeof(ra), "127.0.0.1:%d", redis.port);
    shadow_checks(*state, ra);
}

/* Reservations and leases through librlc against the real server, on
 * store (the memory store, or Redis): blocking, batch and async calls, and
 * the lease keeper holding a slot past its lease until done releases it. */
static void on_xop_answer(rlc_async_t *c, const rlc_xresult_t *res, void *arg)
{
    *(rlc_xresult_t *)arg = *res;
    rlc_async_free(c);
}

static void xop_calls(rlt_fx_t *f, const char *redis_addr)
{
    char key[128], lkey[128];
    rlc_client_t *c;
    rlc_xresult_t res, got[4], kept;
    rlc_lease_t *k = NULL;
    rlc_options_t o;
    int i;

    if (f->dir[0] == '\0')
        assert_int_equal(rlt_fx_mkdir(f, "rlc-xop"), 0);
    rlt_fx_write_file(f->rules, "rules:\n"
                                "  tok:\n"
                                "    limits: [100/30d]\n"
                                "  two:\n"
                                "    concurrency: 2\n"
                                "    lease: 1s\n"
                                "  one:\n"
                                "    concurrency: 1\n"
                                "    lease: 1s\n");
    rlt_fx_start(f, 0, "--config", f->rules, redis_addr ? "--redis" : NULL,
                 redis_addr, NULL);
    c = connect_to(f->srv[0].addr, 2000);
    if (redis_addr)
        await_store_up(c);
    fresh_key(key, sizeof(key), "xop");
    rlc_check_t rq = {.key = key, .rule = "tok", .cost = 60};
    /* Until the first reservation is granted (the store may still be
     * connecting). */
    for (i = 0; i < 200; i++) {
        assert_int_equal(rlc_reserve(c, &rq, &res), RLC_OK);
        if (res.r.code == RLC_CODE_OK)
            break;
        nanosleep(&(struct timespec){0, 20000000}, NULL);
    }
    assert_int_equal(res.r.code, RLC_CODE_OK);
    assert_int_equal(res.r.used, 60);
    assert_true(res.handle_len > 0 && res.expires_at_ms > res.r.decided_at_ms);
    rlc_xresult_t h = res;
    assert_int_equal(rlc_settle(c, h.handle, h.handle_len, 10, &res), RLC_OK);
    assert_int_equal(res.r.code, RLC_CODE_OK);
    rlc_check_t one = {.key = key, .rule = "tok"};
    rlc_result_t cr;
    assert_int_equal(rlc_check(c, &one, &cr), RLC_OK);
    assert_int_equal(cr.used, 11); /* 60 reserved, 10 used, then 1 */
    assert_int_equal(rlc_settle(c, h.handle, h.handle_len, 0, &res), RLC_OK);
    assert_int_equal(res.r.code, RLC_CODE_ERROR); /* settled already */
    assert_non_null(strstr(res.r.error, "already settled"));

    /* A batch of ops: a reservation and three leases of two. */
    fresh_key(lkey, sizeof(lkey), "lease");
    rlc_xop_t ops[4];
    memset(ops, 0, sizeof(ops));
    ops[0].op = RLC_OP_RESERVE;
    ops[0].check = (rlc_check_t){.key = key, .rule = "tok", .cost = 5};
    for (i = 1; i < 4; i++) {
        ops[i].op = RLC_OP_ACQUIRE;
        ops[i].check = (rlc_check_t){.key = lkey, .rule = "two"};
    }
    assert_int_equal(rlc_xop_batch(c, ops, 4, got), RLC_OK);
    assert_int_equal(got[0].r.code, RLC_CODE_OK);
    assert_int_equal(got[0].r.used, 16);
    assert_int_equal(got[1].r.code, RLC_CODE_OK);
    assert_int_equal(got[2].r.code, RLC_CODE_OK);
    assert_int_equal(got[3].r.code, RLC_CODE_OVER_LIMIT);
    assert_true(got[3].r.retry_after_ms > 0 && got[3].r.retry_after_ms <= 1000);
    assert_int_equal(rlc_renew(c, got[1].handle, got[1].handle_len, &res),
                     RLC_OK);
    assert_int_equal(res.r.code, RLC_CODE_OK);
    assert_true(res.expires_at_ms >= got[1].expires_at_ms);
    assert_int_equal(rlc_release(c, got[1].handle, got[1].handle_len, &res),
                     RLC_OK);
    assert_int_equal(res.r.code, RLC_CODE_OK);
    assert_int_equal(rlc_release(c, got[1].handle, got[1].handle_len, &res),
                     RLC_OK);
    assert_int_equal(res.r.code, RLC_CODE_ERROR); /* not held any more */

    /* The keeper holds a 1 s lease of one for longer than a second. */
    fresh_key(lkey, sizeof(lkey), "keep");
    rlc_check_t aq = {.key = lkey, .rule = "one"};
    assert_int_equal(rlc_acquire(c, &aq, &kept), RLC_OK);
    assert_int_equal(kept.r.code, RLC_CODE_OK);
    rlc_options_init(&o);
    o.servers = f->srv[0].addr;
    o.request_timeout_ms = 2000;
    assert_int_equal(rlc_lease_keep(&k, &o, &kept, 0, NULL, NULL), RLC_OK);
    for (i = 0; i < 500 && rlc_lease_renewals(k) < 4; i++)
        nanosleep(&(struct timespec){0, 10000000}, NULL);
    assert_true(rlc_lease_renewals(k) >= 4); /* > 1 s of lease kept */
    assert_int_equal(rlc_lease_lost(k), 0);
    assert_int_equal(rlc_acquire(c, &aq, &res), RLC_OK);
    assert_int_equal(res.r.code, RLC_CODE_OVER_LIMIT); /* still held */
    assert_int_equal(rlc_lease_done(k, &res), RLC_OK);
    assert_int_equal(res.r.code, RLC_CODE_OK); /* released */
    assert_int_equal(rlc_acquire(c, &aq, &res), RLC_OK);
    assert_int_equal(res.r.code, RLC_CODE_OK); /* the slot is free */
    rlc_free(c);

    /* The async API: a reservation. */
    uv_loop_t loop;
    rlc_async_t *ac;
    assert_int_equal(uv_loop_init(&loop), 0);
    assert_int_equal(rlc_async_new(&ac, &loop, &o), RLC_OK);
    memset(&res, 0, sizeof(res));
    res.r.status = -1000;
    rlc_check_t rq2 = {.key = key, .rule = "tok", .cost = 4};
    assert_int_equal(rlc_async_reserve(ac, &rq2, on_xop_answer, &res), RLC_OK);
    uv_run(&loop, UV_RUN_DEFAULT);
    assert_int_equal(uv_loop_close(&loop), 0);
    assert_int_equal(res.r.status, RLC_OK);
    assert_int_equal(res.r.code, RLC_CODE_OK);
    assert_int_equal(res.r.used, 20);
    assert_true(res.handle_len > 0);

    assert_true(rlt_server_stop(&f->srv[0]) >= 0);
}

static void test_xop_memory(void **state)
{
    xop_calls(*state, NULL);
}

static void test_xop_redis(void **state)
{
    char ra[64];

    if (!have_redis)
        skip();
    snprintf(ra, sizeof(ra), "127.0.0.1:%d", redis.port);
    xop_calls(*state, ra);
}

static int group_setup(void **state)
{
    (void)state;
    signal(SIGPIPE, SIG_IGN);
    have_redis = rlt_redis_start(&redis) == 0;
    if (!have_redis)
        fprintf(stderr, "redis-server did not start: Redis tests skip\n");
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    if (have_redis)
        rlt_redis_stop(&redis);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_memory_decisions),
        cmocka_unit_test(test_redis_decisions),
        cmocka_unit_test(test_redis_two_servers),
        cmocka_unit_test(test_reconnect_blocking),
        cmocka_unit_test(test_timeout_frozen_server),
        cmocka_unit_test(test_async_against_server),
        cmocka_unit_test(test_async_drain_loses_nothing),
        cmocka_unit_test(test_blocking_drain_loses_nothing),
        RLT_FX_TEST(test_shadow_memory),
        RLT_FX_TEST(test_shadow_redis),
        RLT_FX_TEST(test_xop_memory),
        RLT_FX_TEST(test_xop_redis),
    };

    /* The shadow tests' server, in their fixture. */
    rlt_fx_use(&(rlt_fx_conf_t){
        .bin = RL_SERVER_BIN, .log_level = "warn", .gentle = 1});
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
