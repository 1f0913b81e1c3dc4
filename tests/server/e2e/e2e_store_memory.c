/* The memory store's cap, end to end: a real rl-server with --memory-max
 * 64k, filled over TCP until it refuses new keys, checked through /healthz
 * and /metrics, and seen to recover once the window ends and its counters
 * are freed. (--memory-max's parsing and the store's own behaviour on a
 * scripted clock, both fail modes, are in store/test_store_memory.c.)
 * Every wait has a deadline; the server is stopped by pid, also when an
 * assertion fails. */
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

#include "rl_buf.h"
#include "rl_error.h"
#include "rl_frame.h"
#include "rl_msg.h"
#include "rlt.h"
#include "rlt_fx.h"

#ifndef RL_SERVER_BIN
#error "RL_SERVER_BIN must name the rl-server binary"
#endif

#define CAP 65536
#define WINDOW_S 4
#define NKEYS 1500

/* ---- the server ---- */

/* GET path from the --metrics listener; returns the status, with the body
 * in body. */
static int http_get(const rlt_fx_t *f, const char *path, char *body, size_t len)
{
    int status = rlt_http_get(f->srv[0].mport, path, body, len);

    assert_true(status > 0);
    return status;
}

typedef rlt_result_t res_t;

/* Sends n checks (window WINDOW_S, limit 5) in one write on a fresh
 * connection and reads the n answers, in order. */
static void ask(const rlt_fx_t *f, char keys[][160], size_t n, res_t *out)
{
    static rl_check_t q[NKEYS];
    size_t i;
    int fd = rlt_dial(f->srv[0].port);

    assert_true(fd >= 0);
    assert_true(n <= NKEYS);
    for (i = 0; i < n; i++)
        q[i] = rlt_check(i + 1, keys[i], 5, WINDOW_S, 1);
    assert_int_equal(rlt_exchange(fd, q, n, out), RL_OK);
    for (i = 0; i < n; i++)
        assert_int_equal(out[i].r.id, i + 1);
    close(fd);
}

static res_t ask1(const rlt_fx_t *f, const char *key)
{
    static char k[1][160];
    res_t r;

    snprintf(k[0], sizeof(k[0]), "%s", key);
    ask(f, k, 1, &r);
    return r;
}

/* Fills a 64 KiB store with 100-byte keys until it refuses them, in one
 * window of WINDOW_S: refused keys get the fail mode, an existing key keeps
 * counting, /healthz is 503 "memory store full" and /metrics counts the
 * refusals. When the window ends and the sweep frees it, /healthz is 200
 * again and new keys are counted. */
static void fill_and_recover(rlt_fx_t *f, int fail_open)
{
    static char keys[NKEYS][160];
    static res_t res[NKEYS];
    static char page[1 << 16];
    uint64_t deadline;
    size_t i, refused = 0, counted = 0;
    int status;
    res_t r;

    rlt_fx_start(f, 0, "--memory-max", "64k", "--expiry-grace-ms", "0",
                 fail_open ? "--fail-open" : "--fail-closed", NULL);
    status = http_get(f, "/healthz", page, sizeof(page));
    assert_int_equal(status, 200);
    assert_string_equal(page, "ok\n");

    /* Start early in a window, so that the checks below all fall in it. */
    deadline = rlt_mono_ms() + 3 * WINDOW_S * 1000;
    while ((r = ask1(f, "align")).r.reset_after_ms < (WINDOW_S - 1) * 1000 &&
           rlt_mono_ms() < deadline)
        rlt_nap_ms((int)r.r.reset_after_ms + 5);
    assert_true(r.r.reset_after_ms >= (WINDOW_S - 1) * 1000);

    r = ask1(f, "old");
    assert_int_equal(r.r.code, RL_CODE_OK);
    assert_int_equal(r.r.used, 1);

    for (i = 0; i < NKEYS; i++)
        snprintf(keys[i], sizeof(keys[i]), "new:%05zu:%090d", i, 0);
    ask(f, keys, NKEYS, res);
    for (i = 0; i < NKEYS; i++) {
        if (res[i].err[0] == '\0') {
            assert_int_equal(res[i].r.code, RL_CODE_OK);
            assert_int_equal(res[i].r.used, 1);
            assert_int_equal(refused, 0); /* once full, every new key */
            counted++;
            continue;
        }
        refused++;
        assert_int_equal(res[i].r.code, fail_open ? RL_CODE_OK : RL_CODE_ERROR);
        assert_non_null(strstr(res[i].err, "out of memory"));
        assert_non_null(
            strstr(res[i].err, fail_open ? "fail-open" : "fail-closed"));
    }
    assert_true(counted > 50);
    assert_true(refused > 0);

    r = ask1(f, "old"); /* exists: counted exactly */
    assert_int_equal(r.r.code, RL_CODE_OK);
    assert_int_equal(r.r.used, 2);
    assert_string_equal(r.err, "");

    status = http_get(f, "/healthz", page, sizeof(page));
    assert_int_equal(status, 503);
    assert_string_equal(page, "memory store full\n");
    assert_int_equal(http_get(f, "/metrics", page, sizeof(page)), 200);
    assert_int_equal(rlt_sample(page, "rl_memory_store_full_total"),
                     (long long)refused);
    assert_int_equal(rlt_sample(page, "rl_memory_store_full"), 1);
    assert_int_equal(rlt_sample(page, "rl_memory_store_max_bytes"), CAP);
    assert_true(rlt_sample(page, "rl_memory_store_bytes") <= CAP);
    assert_true(rlt_sample(page, "rl_memory_store_bytes") > CAP - CAP / 8);
    assert_int_equal(rlt_sample(page, "rl_healthy"), 0);

    /* The window ends (no grace): the sweep frees it and the store takes
     * new keys again. */
    deadline = rlt_mono_ms() + 3 * WINDOW_S * 1000;
    while ((status = http_get(f, "/healthz", page, sizeof(page))) != 200 &&
           rlt_mono_ms() < deadline)
        rlt_nap_ms(50);
    assert_int_equal(status, 200);
    assert_string_equal(page, "ok\n");
    assert_int_equal(http_get(f, "/metrics", page, sizeof(page)), 200);
    assert_int_equal(rlt_sample(page, "rl_memory_store_full"), 0);
    assert_true(rlt_sample(page, "rl_memory_store_bytes") < CAP / 2);
    ask(f, keys, 100, res);
    for (i = 0; i < 100; i++) {
        assert_int_equal(res[i].r.code, RL_CODE_OK);
        assert_int_equal(res[i].r.used, 1);
        assert_string_equal(res[i].err, "");
    }

    assert_int_equal(rlt_stop(f->srv[0].pid, SIGTERM, 5000), 0);
    f->srv[0].pid = -1;
}

static void test_full_fail_closed(void **state)
{
    fill_and_recover(*state, 0);
}

static void test_full_fail_open(void **state)
{
    fill_and_recover(*state, 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        RLT_FX_TEST(test_full_fail_closed),
        RLT_FX_TEST(test_full_fail_open),
    };

    rlt_fx_use(&(rlt_fx_conf_t){
        .bin = RL_SERVER_BIN, .log_level = "error", .metrics = 1});
    return cmocka_run_group_tests(tests, NULL, NULL);
}
