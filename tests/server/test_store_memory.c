/* The memory store's cap, end to end: --memory-max as parsed, then a real
 * rl-server with a tiny cap, filled over TCP until it refuses new keys,
 * checked through /healthz and /metrics, and seen to recover once the
 * window ends and its counters are freed. (The store's own behaviour on a
 * scripted clock, both fail modes, is in test_batch.c.) Every wait has a
 * deadline; the server is stopped by pid, also when an assertion fails. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "policy/config.h"
#include "rl_buf.h"
#include "rl_error.h"
#include "rl_frame.h"
#include "rl_msg.h"
#include "rlt.h"

#ifndef RL_SERVER_BIN
#error "RL_SERVER_BIN must name the rl-server binary"
#endif

#define CAP 65536
#define WINDOW_S 4
#define NKEYS 1500

/* ---- --memory-max ---- */

static int parse_max(const char *val, uint64_t *out)
{
    static rls_config_t c;
    char *argv[] = {"rl-server", "--memory-max", (char *)val, NULL};
    char err[256];
    int rc;

    rls_config_defaults(&c);
    rc = rls_config_parse(&c, 3, argv, stdout, err, sizeof(err));
    *out = c.memory_max;
    if (rc != RLS_CONFIG_RUN)
        assert_non_null(strstr(err, "--memory-max"));
    return rc;
}

static void test_flag(void **state)
{
    static const char *const bad[] = {"",   "k",     "0",  "65535", "63k",
                                      "-1", "12x",   "1t", "2048g", "1 m",
                                      "m1", "99999999999999999999g"};
    static rls_config_t c;
    uint64_t v;
    size_t i;

    (void)state;
    rls_config_defaults(&c);
    assert_int_equal(c.memory_max, (uint64_t)256 << 20);
    assert_int_equal(parse_max("65536", &v), RLS_CONFIG_RUN);
    assert_int_equal(v, 65536);
    assert_int_equal(parse_max("64k", &v), RLS_CONFIG_RUN);
    assert_int_equal(v, 65536);
    assert_int_equal(parse_max("64m", &v), RLS_CONFIG_RUN);
    assert_int_equal(v, (uint64_t)64 << 20);
    assert_int_equal(parse_max("1G", &v), RLS_CONFIG_RUN);
    assert_int_equal(v, (uint64_t)1 << 30);
    assert_int_equal(parse_max("1024g", &v), RLS_CONFIG_RUN);
    assert_int_equal(v, (uint64_t)1 << 40);
    for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        assert_int_equal(parse_max(bad[i], &v), RLS_CONFIG_ERROR);
}

/* ---- the server ---- */

static pid_t server_pid = -1;
static int port, mport;

static int teardown(void **state)
{
    (void)state;
    if (server_pid > 0)
        rlt_stop(server_pid, SIGKILL, 5000);
    server_pid = -1;
    return 0;
}

static void start_server(const char *fail_mode)
{
    char addr[32], maddr[32];
    char *argv[16];
    int attempt, k;

    for (attempt = 0; attempt < 5; attempt++) {
        port = rlt_free_port();
        mport = rlt_free_port();
        if (port <= 0 || mport <= 0 || port == mport)
            continue;
        snprintf(addr, sizeof(addr), "127.0.0.1:%d", port);
        snprintf(maddr, sizeof(maddr), "127.0.0.1:%d", mport);
        k = 0;
        argv[k++] = RL_SERVER_BIN;
        argv[k++] = "--listen";
        argv[k++] = addr;
        argv[k++] = "--metrics";
        argv[k++] = maddr;
        argv[k++] = "--memory-max";
        argv[k++] = "64k";
        argv[k++] = "--expiry-grace-ms";
        argv[k++] = "0";
        argv[k++] = (char *)fail_mode;
        argv[k++] = "--log-level";
        argv[k++] = getenv("RLT_SERVER_LOG") ? getenv("RLT_SERVER_LOG")
                                             : "error";
        argv[k] = NULL;
        server_pid = rlt_spawn(argv);
        assert_true(server_pid > 0);
        if (rlt_wait_port(port, 5000) && rlt_wait_port(mport, 5000))
            return;
        rlt_stop(server_pid, SIGKILL, 1000);
        server_pid = -1;
    }
    fail_msg("rl-server did not start");
}

static int dial(int p)
{
    struct sockaddr_in sa;
    struct timeval tv = {5, 0};
    int fd = socket(AF_INET, SOCK_STREAM, 0);

    assert_true(fd >= 0);
    memset(&sa, 0, sizeof(sa));
    sa.sin_family = AF_INET;
    sa.sin_port = htons((uint16_t)p);
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    return fd;
}

static void send_all(int fd, const void *p, size_t n)
{
    const char *s = p;

    while (n > 0) {
        ssize_t k = send(fd, s, n, MSG_NOSIGNAL);
        if (k < 0 && errno == EINTR)
            continue;
        assert_true(k > 0);
        s += k;
        n -= (size_t)k;
    }
}

/* GET path over HTTP/1.0 (the server closes after the response); returns
 * the status, with the body in body. */
static int http_get(const char *path, char *body, size_t len)
{
    static char buf[1 << 16];
    char req[128];
    size_t got = 0;
    int fd = dial(mport);
    char *sep;

    snprintf(req, sizeof(req), "GET %s HTTP/1.0\r\n\r\n", path);
    send_all(fd, req, strlen(req));
    for (;;) {
        ssize_t k = recv(fd, buf + got, sizeof(buf) - 1 - got, 0);
        if (k <= 0)
            break;
        got += (size_t)k;
    }
    close(fd);
    buf[got] = '\0';
    sep = strstr(buf, "\r\n\r\n");
    assert_non_null(sep);
    snprintf(body, len, "%s", sep + 4);
    return atoi(buf + 9);
}

/* The value of a sample line "name value" in a page; -1 if missing. */
static long long sample(const char *page, const char *name)
{
    size_t n = strlen(name);
    const char *p = page;

    while ((p = strstr(p, name)) != NULL) {
        if ((p == page || p[-1] == '\n') && p[n] == ' ')
            return strtoll(p + n + 1, NULL, 10);
        p += n;
    }
    return -1;
}

typedef struct {
    rl_result_t r;
    char err[200];
} res_t;

/* Sends n checks (window WINDOW_S, limit 5) in one write on a fresh
 * connection and reads the n answers, in order. */
static void ask(char keys[][160], size_t n, res_t *out)
{
    rl_buf_t b, in;
    size_t i, got = 0;
    int fd = dial(port);

    rl_buf_init(&b, 1 << 24);
    rl_buf_init(&in, 1 << 24);
    for (i = 0; i < n; i++) {
        rl_check_t q;
        memset(&q, 0, sizeof(q));
        q.id = i + 1;
        q.key = keys[i];
        q.key_len = strlen(keys[i]);
        q.limit = 5;
        q.window_s = WINDOW_S;
        q.cost = 1;
        assert_int_equal(rl_check_put(&b, &q), RL_OK);
    }
    send_all(fd, rl_buf_rptr(&b), rl_buf_len(&b));
    while (got < n) {
        rl_frame_t f;
        uint8_t *w;
        int rc = rl_frame_decode(rl_buf_rptr(&in), rl_buf_len(&in), 1 << 20,
                                 &f);
        if (rc == RL_OK) {
            res_t *r = &out[got++];
            assert_int_equal(rl_result_decode(f.payload, f.len, &r->r), RL_OK);
            assert_int_equal(r->r.id, got);
            snprintf(r->err, sizeof(r->err), "%.*s", (int)r->r.error_len,
                     r->r.error ? r->r.error : "");
            r->r.error = NULL;
            rl_buf_consume(&in, f.size);
            continue;
        }
        assert_int_equal(rc, RL_EAGAIN);
        assert_int_equal(rl_buf_reserve(&in, 65536, &w), RL_OK);
        ssize_t k = recv(fd, w, 65536, 0);
        assert_true(k > 0);
        rl_buf_commit(&in, (size_t)k);
    }
    close(fd);
    rl_buf_free(&b);
    rl_buf_free(&in);
}

static res_t ask1(const char *key)
{
    static char k[1][160];
    res_t r;

    snprintf(k[0], sizeof(k[0]), "%s", key);
    ask(k, 1, &r);
    return r;
}

static void nap_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};

    nanosleep(&ts, NULL);
}

/* Fills a 64 KiB store with 100-byte keys until it refuses them, in one
 * window of WINDOW_S: refused keys get the fail mode, an existing key keeps
 * counting, /healthz is 503 "memory store full" and /metrics counts the
 * refusals. When the window ends and the sweep frees it, /healthz is 200
 * again and new keys are counted. */
static void fill_and_recover(int fail_open)
{
    static char keys[NKEYS][160];
    static res_t res[NKEYS];
    static char page[1 << 16];
    uint64_t deadline;
    size_t i, refused = 0, counted = 0;
    int status;
    res_t r;

    start_server(fail_open ? "--fail-open" : "--fail-closed");
    status = http_get("/healthz", page, sizeof(page));
    assert_int_equal(status, 200);
    assert_string_equal(page, "ok\n");

    /* Start early in a window, so that the checks below all fall in it. */
    deadline = rlt_mono_ms() + 3 * WINDOW_S * 1000;
    while ((r = ask1("align")).r.reset_after_ms < (WINDOW_S - 1) * 1000 &&
           rlt_mono_ms() < deadline)
        nap_ms((int)r.r.reset_after_ms + 5);
    assert_true(r.r.reset_after_ms >= (WINDOW_S - 1) * 1000);

    r = ask1("old");
    assert_int_equal(r.r.code, RL_CODE_OK);
    assert_int_equal(r.r.used, 1);

    for (i = 0; i < NKEYS; i++)
        snprintf(keys[i], sizeof(keys[i]), "new:%05zu:%090d", i, 0);
    ask(keys, NKEYS, res);
    for (i = 0; i < NKEYS; i++) {
        if (res[i].err[0] == '\0') {
            assert_int_equal(res[i].r.code, RL_CODE_OK);
            assert_int_equal(res[i].r.used, 1);
            assert_int_equal(refused, 0); /* once full, every new key */
            counted++;
            continue;
        }
        refused++;
        assert_int_equal(res[i].r.code,
                         fail_open ? RL_CODE_OK : RL_CODE_ERROR);
        assert_non_null(strstr(res[i].err, "out of memory"));
        assert_non_null(strstr(res[i].err, fail_open ? "fail-open"
                                                     : "fail-closed"));
    }
    assert_true(counted > 50);
    assert_true(refused > 0);

    r = ask1("old"); /* exists: counted exactly */
    assert_int_equal(r.r.code, RL_CODE_OK);
    assert_int_equal(r.r.used, 2);
    assert_string_equal(r.err, "");

    status = http_get("/healthz", page, sizeof(page));
    assert_int_equal(status, 503);
    assert_string_equal(page, "memory store full\n");
    assert_int_equal(http_get("/metrics", page, sizeof(page)), 200);
    assert_int_equal(sample(page, "rl_memory_store_full_total"),
                     (long long)refused);
    assert_int_equal(sample(page, "rl_memory_store_full"), 1);
    assert_int_equal(sample(page, "rl_memory_store_max_bytes"), CAP);
    assert_true(sample(page, "rl_memory_store_bytes") <= CAP);
    assert_true(sample(page, "rl_memory_store_bytes") > CAP - CAP / 8);
    assert_int_equal(sample(page, "rl_healthy"), 0);

    /* The window ends (no grace): the sweep frees it and the store takes
     * new keys again. */
    deadline = rlt_mono_ms() + 3 * WINDOW_S * 1000;
    while ((status = http_get("/healthz", page, sizeof(page))) != 200 &&
           rlt_mono_ms() < deadline)
        nap_ms(50);
    assert_int_equal(status, 200);
    assert_string_equal(page, "ok\n");
    assert_int_equal(http_get("/metrics", page, sizeof(page)), 200);
    assert_int_equal(sample(page, "rl_memory_store_full"), 0);
    assert_true(sample(page, "rl_memory_store_bytes") < CAP / 2);
    ask(keys, 100, res);
    for (i = 0; i < 100; i++) {
        assert_int_equal(res[i].r.code, RL_CODE_OK);
        assert_int_equal(res[i].r.used, 1);
        assert_string_equal(res[i].err, "");
    }

    assert_int_equal(rlt_stop(server_pid, SIGTERM, 5000), 0);
    server_pid = -1;
}

static void test_full_fail_closed(void **state)
{
    (void)state;
    fill_and_recover(0);
}

static void test_full_fail_open(void **state)
{
    (void)state;
    fill_and_recover(1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_flag),
        cmocka_unit_test_teardown(test_full_fail_closed, teardown),
        cmocka_unit_test_teardown(test_full_fail_open, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
