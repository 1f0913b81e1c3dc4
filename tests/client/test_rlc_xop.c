/* Reservations and leases in librlc against the scripted fake server: every
 * call in every form (blocking, batch, async), the request bytes the server
 * decoded (op, handle, actual, and no key where a handle is all there is),
 * the response fields surfaced (handle, expires_at_ms, failed_open), the
 * errors (a handle refused before sending, the server's ERROR, no answer),
 * and the lease keeper: its cadence, its release, and a lost lease. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>

#include <cmocka.h>
#include <uv.h>

#include "fake_server.h"
#include "rl_clock.h"
#include "rlc.h"
#include "rlt.h"

static char addr[64];

static void options(rlc_options_t *o, uint32_t timeout_ms, int fail_mode)
{
    rlc_options_init(o);
    o->servers = addr;
    o->request_timeout_ms = timeout_ms;
    o->fail_mode = fail_mode;
    o->reconnect_min_ms = 10;
}

static rlc_client_t *open_client(fake_t *f, fake_mode_t mode,
                                 uint32_t timeout_ms, int fail_mode)
{
    rlc_options_t o;
    rlc_client_t *c = NULL;

    assert_int_equal(fake_start(f, 0, mode, 0), 0);
    snprintf(addr, sizeof(addr), "127.0.0.1:%d", f->port);
    options(&o, timeout_ms, fail_mode);
    assert_int_equal(rlc_connect(&c, &o), RLC_OK);
    return c;
}

static fake_xop_t logged(fake_t *f, int i)
{
    fake_xop_t x;

    assert_true(fake_wait(&f->nxop, i + 1, 2000));
    assert_int_equal(fake_xop_get(f, i, &x), 1);
    return x;
}

static void assert_handle(const fake_xop_t *x, const void *h, size_t n)
{
    assert_int_equal(x->handle_len, n);
    assert_memory_equal(x->handle, h, n);
}

/* ---- blocking ------------------------------------------------------------ */

static void test_reserve_settle(void **state)
{
    rlc_check_t req = {
        .key = "job:1", .limit = 100, .window_s = 60, .cost = 30};
    rlc_xresult_t res, set;
    fake_t f;
    rlc_client_t *c = open_client(&f, FAKE_ANSWER, 1000, RLC_FAIL_CLOSED);
    uint64_t before = rl_unix_ms();

    (void)state;
    assert_int_equal(rlc_reserve(c, &req, &res), RLC_OK);
    assert_int_equal(res.r.status, RLC_OK);
    assert_int_equal(res.r.code, RLC_CODE_OK);
    assert_int_equal(res.op, RLC_OP_RESERVE);
    assert_int_equal(res.r.used, 30);
    assert_int_equal(res.failed_open, 0);
    assert_true(res.expires_at_ms >= before + 60000);
    assert_true(res.expires_at_ms == res.r.decided_at_ms + 60000);
    /* The handle is the server's bytes, whole. */
    char want[64];
    int n = snprintf(want, sizeof(want), "R:job:1:%llu",
                     (unsigned long long)res.r.id);
    assert_int_equal(res.handle_len, (size_t)n);
    assert_memory_equal(res.handle, want, (size_t)n);

    fake_xop_t x = logged(&f, 0);
    assert_int_equal(x.op, RLC_OP_RESERVE);
    assert_string_equal(x.key, "job:1");
    assert_int_equal(x.cost, 30);
    assert_int_equal(x.handle_len, 0);
    assert_int_equal(x.actual, 0);

    /* SETTLE sends the handle and the actual cost, and nothing of a
     * check. */
    assert_int_equal(rlc_settle(c, res.handle, res.handle_len, 12, &set),
                     RLC_OK);
    assert_int_equal(set.r.code, RLC_CODE_OK);
    assert_int_equal(set.op, RLC_OP_SETTLE);
    assert_int_equal(set.r.used, 12);
    assert_int_equal(set.handle_len, 0);
    x = logged(&f, 1);
    assert_int_equal(x.op, RLC_OP_SETTLE);
    assert_int_equal(x.actual, 12);
    assert_int_equal(x.key_len, 0);
    assert_int_equal(x.rule_len, 0);
    assert_handle(&x, res.handle, res.handle_len);

    /* Settling 0 refunds: the 0 is the default, and the op still says
     * SETTLE. */
    assert_int_equal(rlc_settle(c, res.handle, res.handle_len, 0, &set),
                     RLC_OK);
    x = logged(&f, 2);
    assert_int_equal(x.op, RLC_OP_SETTLE);
    assert_int_equal(x.actual, 0);

    /* The server's ERROR for a handle it does not know is an answer. */
    assert_int_equal(rlc_settle(c, "X:forged", 8, 5, &set), RLC_OK);
    assert_int_equal(set.r.status, RLC_OK);
    assert_int_equal(set.r.code, RLC_CODE_ERROR);
    assert_string_equal(set.r.error, "unknown or settled reservation");
    assert_int_equal(rlc_result_allowed(&set.r), 0);

    /* A refused reservation has no handle. */
    req.cost = 200;
    assert_int_equal(rlc_reserve(c, &req, &res), RLC_OK);
    assert_int_equal(res.r.code, RLC_CODE_OVER_LIMIT);
    assert_int_equal(res.handle_len, 0);
    assert_int_equal(res.expires_at_ms, 0);

    /* failed_open is the server's word, not the client's policy. */
    rlc_check_t fo = {.key = "fo", .limit = 5, .window_s = 60};
    assert_int_equal(rlc_reserve(c, &fo, &res), RLC_OK);
    assert_int_equal(res.r.code, RLC_CODE_OK);
    assert_int_equal(res.failed_open, 1);
    assert_int_equal(res.r.flags, 0);
    rlc_free(c);
    fake_stop(&f);
}

static void test_acquire_release_renew(void **state)
{
    rlc_check_t req = {.key = "db", .rule = "conc"};
    rlc_xresult_t got, res;
    fake_t f;
    rlc_client_t *c = open_client(&f, FAKE_ANSWER, 1000, RLC_FAIL_CLOSED);

    (void)state;
    assert_int_equal(rlc_acquire(c, &req, &got), RLC_OK);
    assert_int_equal(got.r.code, RLC_CODE_OK);
    assert_int_equal(got.op, RLC_OP_ACQUIRE);
    assert_int_equal(got.handle_len, 4);
    assert_memory_equal(got.handle, "L:db", 4);
    assert_int_equal(got.expires_at_ms, got.r.decided_at_ms + 600);
    fake_xop_t x = logged(&f, 0);
    assert_int_equal(x.op, RLC_OP_ACQUIRE);
    assert_string_equal(x.key, "db");
    assert_int_equal(x.rule_len, 4);

    assert_int_equal(rlc_renew(c, got.handle, got.handle_len, &res), RLC_OK);
    assert_int_equal(res.r.code, RLC_CODE_OK);
    assert_int_equal(res.op, RLC_OP_RENEW);
    assert_true(res.expires_at_ms >= got.expires_at_ms);
    x = logged(&f, 1);
    assert_int_equal(x.op, RLC_OP_RENEW);
    assert_int_equal(x.key_len, 0);
    assert_handle(&x, "L:db", 4);

    assert_int_equal(rlc_release(c, got.handle, got.handle_len, &res), RLC_OK);
    assert_int_equal(res.r.code, RLC_CODE_OK);
    x = logged(&f, 2);
    assert_int_equal(x.op, RLC_OP_RELEASE);
    assert_int_equal(x.actual, 0);
    assert_handle(&x, "L:db", 4);

    /* Over the limit: retry_after_ms until the earliest lease ends. */
    rlc_check_t busy = {.key = "busy", .rule = "conc"};
    assert_int_equal(rlc_acquire(c, &busy, &res), RLC_OK);
    assert_int_equal(res.r.code, RLC_CODE_OVER_LIMIT);
    assert_int_equal(res.r.retry_after_ms, 777);
    assert_int_equal(res.handle_len, 0);

    /* The server's ERROR for a lease that is gone. */
    assert_int_equal(rlc_renew(c, "Z", 1, &res), RLC_OK);
    assert_int_equal(res.r.code, RLC_CODE_ERROR);
    assert_string_equal(res.r.error, "no such lease alive");
    assert_int_equal(res.expires_at_ms, 0);
    assert_int_equal(rlc_release(c, "Z", 1, &res), RLC_OK);
    assert_int_equal(res.r.code, RLC_CODE_ERROR);
    assert_string_equal(res.r.error, "no such lease alive");
    rlc_free(c);
    fake_stop(&f);
}

static void test_handles_bounded(void **state)
{
    uint8_t big[RLC_HANDLE_MAX + 1];
    rlc_xresult_t res;
    fake_t f;
    rlc_client_t *c = open_client(&f, FAKE_ANSWER, 1000, RLC_FAIL_CLOSED);
    int sent;

    (void)state;
    memset(big, 'x', sizeof(big));
    /* One byte over, or none: refused before sending, with a clear
     * reason. */
    assert_int_equal(rlc_settle(c, big, sizeof(big), 1, &res), RLC_EHANDLE);
    assert_int_equal(res.r.status, RLC_EHANDLE);
    assert_int_equal(res.r.code, RLC_CODE_ERROR);
    assert_int_equal(res.r.flags, 0);
    assert_non_null(strstr(res.r.error, "longer than 512 bytes"));
    assert_non_null(strstr(rlc_strerror(RLC_EHANDLE), "512"));
    assert_int_equal(rlc_release(c, big, 0, &res), RLC_EHANDLE);
    assert_int_equal(rlc_renew(c, NULL, 3, &res), RLC_EINVAL);
    rlc_xop_t bad = {.op = 9};
    assert_int_equal(rlc_xop(c, &bad, &res), RLC_EINVAL);
    assert_int_equal(rlc_reserve(c, NULL, &res), RLC_EINVAL);
    assert_int_equal(rlc_reserve(NULL, &(rlc_check_t){.key = "k"}, &res),
                     RLC_EINVAL);
    /* A reserve is validated as a check. */
    assert_int_equal(rlc_reserve(c, &(rlc_check_t){.key = "k"}, &res),
                     RLC_ENOLIMIT);
    sent = atomic_load(&f.requests);

    /* Exactly the maximum goes out, whole. */
    assert_int_equal(rlc_renew(c, big, RLC_HANDLE_MAX, &res), RLC_OK);
    assert_int_equal(res.r.code, RLC_CODE_ERROR); /* not an "L:" handle */
    fake_xop_t x = logged(&f, 0);
    assert_int_equal(sent, 0);
    assert_handle(&x, big, RLC_HANDLE_MAX);

    /* From the server: 512 bytes are kept, 513 are refused. */
    rlc_check_t req = {.key = "big512", .limit = 5, .window_s = 60};
    assert_int_equal(rlc_reserve(c, &req, &res), RLC_OK);
    assert_int_equal(res.r.code, RLC_CODE_OK);
    assert_int_equal(res.handle_len, RLC_HANDLE_MAX);
    assert_int_equal(res.handle[0], 'h');
    assert_int_equal(res.handle[RLC_HANDLE_MAX - 1], 'h');
    req.key = "big513";
    assert_int_equal(rlc_reserve(c, &req, &res), RLC_OK);
    assert_int_equal(res.r.code, RLC_CODE_ERROR);
    assert_int_equal(res.handle_len, 0);
    assert_non_null(strstr(res.r.error, "513"));
    rlc_free(c);
    fake_stop(&f);
}

static void test_batch(void **state)
{
    rlc_check_t chk = {.key = "b", .limit = 10, .window_s = 60};
    rlc_check_t conc = {.key = "bl", .rule = "conc"};
    rlc_xop_t reqs[7];
    rlc_xresult_t res[7];
    fake_t f;
    rlc_client_t *c = open_client(&f, FAKE_ANSWER, 1000, RLC_FAIL_CLOSED);
    uint8_t big[RLC_HANDLE_MAX + 1];
    int i;

    (void)state;
    memset(big, 'x', sizeof(big));
    memset(reqs, 0, sizeof(reqs));
    reqs[0] = (rlc_xop_t){.op = RLC_OP_CHECK, .check = chk};
    reqs[1] = (rlc_xop_t){.op = RLC_OP_RESERVE, .check = chk};
    reqs[1].check.cost = 4;
    reqs[2] = (rlc_xop_t){
        .op = RLC_OP_SETTLE, .handle = "R:x", .handle_len = 3, .actual = 2};
    reqs[3] = (rlc_xop_t){.op = RLC_OP_ACQUIRE, .check = conc};
    reqs[4] =
        (rlc_xop_t){.op = RLC_OP_RENEW, .handle = "L:bl", .handle_len = 4};
    reqs[5] = (rlc_xop_t){
        .op = RLC_OP_SETTLE, .handle = big, .handle_len = sizeof(big)};
    reqs[6] =
        (rlc_xop_t){.op = RLC_OP_RELEASE, .handle = "L:bl", .handle_len = 4};
    /* The first failing status is returned: the one refused handle. */
    assert_int_equal(rlc_xop_batch(c, reqs, 7, res), RLC_EHANDLE);
    assert_int_equal(atomic_load(&f.reads), 1); /* one round trip */
    assert_int_equal(atomic_load(&f.requests), 6);
    for (i = 0; i < 7; i++) {
        assert_int_equal(res[i].op, reqs[i].op);
        if (i == 5) {
            assert_int_equal(res[i].r.status, RLC_EHANDLE);
            continue;
        }
        assert_int_equal(res[i].r.status, RLC_OK);
        assert_int_equal(res[i].r.code, RLC_CODE_OK);
    }
    assert_int_equal(res[0].r.used, 1);
    assert_int_equal(res[0].handle_len, 0);
    assert_int_equal(res[1].r.used, 5);
    assert_true(res[1].handle_len > 2);
    assert_memory_equal(res[1].handle, "R:b:", 4);
    assert_int_equal(res[2].r.used, 2);
    assert_memory_equal(res[3].handle, "L:bl", 4);
    assert_true(res[4].expires_at_ms > 0);
    /* The plain check is logged by nothing: the log holds the five ops,
     * in order. */
    int ops[] = {RLC_OP_RESERVE, RLC_OP_SETTLE, RLC_OP_ACQUIRE, RLC_OP_RENEW,
                 RLC_OP_RELEASE};
    for (i = 0; i < 5; i++)
        assert_int_equal(logged(&f, i).op, (uint32_t)ops[i]);
    assert_int_equal(atomic_load(&f.nxop), 5);
    rlc_free(c);
    fake_stop(&f);
}

/* No answer: the admissions follow fail_mode, the handle ops never fail
 * open. */
static void test_no_answer(void **state)
{
    rlc_check_t req = {.key = "k", .limit = 5, .window_s = 60};
    rlc_xresult_t res;
    fake_t f;
    rlc_client_t *c = open_client(&f, FAKE_SILENT, 50, RLC_FAIL_OPEN);

    (void)state;
    assert_int_equal(rlc_reserve(c, &req, &res), RLC_ETIMEDOUT);
    assert_int_equal(res.r.code, RLC_CODE_OK);
    assert_int_equal(res.r.flags, RLC_RESULT_FAILED_OPEN);
    assert_int_equal(res.handle_len, 0);
    assert_int_equal(res.failed_open, 0);
    assert_int_equal(rlc_acquire(c, &req, &res), RLC_ETIMEDOUT);
    assert_int_equal(res.r.code, RLC_CODE_OK);
    assert_int_equal(res.handle_len, 0);
    assert_int_equal(rlc_settle(c, "R:a", 3, 1, &res), RLC_ETIMEDOUT);
    assert_int_equal(res.r.code, RLC_CODE_ERROR);
    assert_int_equal(res.r.flags, RLC_RESULT_FAILED_CLOSED);
    assert_int_equal(res.op, RLC_OP_SETTLE);
    assert_int_equal(rlc_renew(c, "L:a", 3, &res), RLC_ETIMEDOUT);
    assert_int_equal(res.r.code, RLC_CODE_ERROR);
    assert_int_equal(rlc_release(c, "L:a", 3, &res), RLC_ETIMEDOUT);
    assert_int_equal(res.r.code, RLC_CODE_ERROR);
    rlc_free(c);
    fake_stop(&f);
}

/* ---- async --------------------------------------------------------------- */

typedef struct actx_s {
    uv_loop_t loop;
    rlc_async_t *c;
    int calls, expect;
    rlc_xresult_t res[8];
} actx_t;

static actx_t A;

static void on_x(rlc_async_t *c, const rlc_xresult_t *res, void *arg)
{
    int i = (int)(intptr_t)arg;

    assert_true(i >= 0 && i < 8);
    A.res[i] = *res;
    if (++A.calls == A.expect)
        rlc_async_free(c);
}

static void new_async(uint32_t timeout_ms, int fail_mode)
{
    rlc_options_t o;

    memset(&A, 0, sizeof(A));
    assert_int_equal(uv_loop_init(&A.loop), 0);
    options(&o, timeout_ms, fail_mode);
    assert_int_equal(rlc_async_new(&A.c, &A.loop, &o), RLC_OK);
}

static void run_async(int expect)
{
    A.expect = expect;
    uv_run(&A.loop, UV_RUN_DEFAULT);
    assert_int_equal(A.calls, expect);
    assert_int_equal(uv_loop_close(&A.loop), 0);
}

static void test_async_all(void **state)
{
    rlc_check_t chk = {.key = "a", .limit = 10, .window_s = 60, .cost = 3};
    rlc_check_t conc = {.key = "al", .rule = "conc"};
    uint8_t big[RLC_HANDLE_MAX + 1];
    fake_t f;

    (void)state;
    memset(big, 'x', sizeof(big));
    assert_int_equal(fake_start(&f, 0, FAKE_ANSWER, 0), 0);
    snprintf(addr, sizeof(addr), "127.0.0.1:%d", f.port);
    new_async(1000, RLC_FAIL_CLOSED);

    assert_int_equal(rlc_async_reserve(A.c, &chk, on_x, (void *)0), RLC_OK);
    assert_int_equal(rlc_async_settle(A.c, "R:q", 3, 7, on_x, (void *)1),
                     RLC_OK);
    assert_int_equal(rlc_async_acquire(A.c, &conc, on_x, (void *)2), RLC_OK);
    assert_int_equal(rlc_async_renew(A.c, "L:al", 4, on_x, (void *)3), RLC_OK);
    assert_int_equal(rlc_async_release(A.c, "L:al", 4, on_x, (void *)4),
                     RLC_OK);
    assert_int_equal(rlc_async_settle(A.c, "nope", 4, 1, on_x, (void *)5),
                     RLC_OK);
    /* Refused at submission: no callback. */
    assert_int_equal(rlc_async_settle(A.c, big, sizeof(big), 1, on_x, NULL),
                     RLC_EHANDLE);
    assert_int_equal(rlc_async_release(A.c, big, 0, on_x, NULL), RLC_EHANDLE);
    assert_int_equal(rlc_async_renew(A.c, NULL, 2, on_x, NULL), RLC_EINVAL);
    assert_int_equal(rlc_async_acquire(A.c, NULL, on_x, NULL), RLC_EINVAL);
    assert_int_equal(rlc_async_xop(A.c, &(rlc_xop_t){.op = 6}, on_x, NULL),
                     RLC_EINVAL);
    assert_int_equal(rlc_async_reserve(A.c, &chk, NULL, NULL), RLC_EINVAL);
    assert_int_equal(rlc_async_inflight(A.c), 6);
    run_async(6);

    assert_int_equal(A.res[0].op, RLC_OP_RESERVE);
    assert_int_equal(A.res[0].r.code, RLC_CODE_OK);
    assert_int_equal(A.res[0].r.used, 3);
    assert_memory_equal(A.res[0].handle, "R:a:", 4);
    assert_true(A.res[0].expires_at_ms > 0);
    assert_int_equal(A.res[1].op, RLC_OP_SETTLE);
    assert_int_equal(A.res[1].r.code, RLC_CODE_OK);
    assert_int_equal(A.res[1].r.used, 7);
    assert_int_equal(A.res[2].op, RLC_OP_ACQUIRE);
    assert_int_equal(A.res[2].handle_len, 4);
    assert_memory_equal(A.res[2].handle, "L:al", 4);
    assert_int_equal(A.res[2].expires_at_ms, A.res[2].r.decided_at_ms + 600);
    assert_int_equal(A.res[3].op, RLC_OP_RENEW);
    assert_int_equal(A.res[3].r.code, RLC_CODE_OK);
    assert_true(A.res[3].expires_at_ms > 0);
    assert_int_equal(A.res[4].op, RLC_OP_RELEASE);
    assert_int_equal(A.res[4].r.code, RLC_CODE_OK);
    assert_int_equal(A.res[5].r.code, RLC_CODE_ERROR);
    assert_string_equal(A.res[5].r.error, "unknown or settled reservation");

    /* What went out: op, handle, actual; no key for the handle ops. */
    fake_xop_t x = logged(&f, 0);
    assert_int_equal(x.op, RLC_OP_RESERVE);
    assert_int_equal(x.cost, 3);
    assert_string_equal(x.key, "a");
    x = logged(&f, 1);
    assert_int_equal(x.op, RLC_OP_SETTLE);
    assert_int_equal(x.actual, 7);
    assert_int_equal(x.key_len, 0);
    assert_handle(&x, "R:q", 3);
    x = logged(&f, 2);
    assert_int_equal(x.op, RLC_OP_ACQUIRE);
    assert_string_equal(x.key, "al");
    x = logged(&f, 3);
    assert_int_equal(x.op, RLC_OP_RENEW);
    assert_handle(&x, "L:al", 4);
    x = logged(&f, 4);
    assert_int_equal(x.op, RLC_OP_RELEASE);
    assert_handle(&x, "L:al", 4);
    assert_int_equal(atomic_load(&f.nxop), 6);
    fake_stop(&f);
}

static void test_async_no_answer(void **state)
{
    rlc_check_t chk = {.key = "a", .limit = 10, .window_s = 60};
    fake_t f;

    (void)state;
    assert_int_equal(fake_start(&f, 0, FAKE_SILENT, 0), 0);
    snprintf(addr, sizeof(addr), "127.0.0.1:%d", f.port);
    new_async(50, RLC_FAIL_OPEN);
    assert_int_equal(rlc_async_acquire(A.c, &chk, on_x, (void *)0), RLC_OK);
    assert_int_equal(rlc_async_renew(A.c, "L:a", 3, on_x, (void *)1), RLC_OK);
    run_async(2);
    assert_int_equal(A.res[0].r.status, RLC_ETIMEDOUT);
    assert_int_equal(A.res[0].r.code, RLC_CODE_OK);
    assert_int_equal(A.res[0].r.flags, RLC_RESULT_FAILED_OPEN);
    assert_int_equal(A.res[0].handle_len, 0);
    assert_int_equal(A.res[1].r.status, RLC_ETIMEDOUT);
    assert_int_equal(A.res[1].r.code, RLC_CODE_ERROR);
    assert_int_equal(A.res[1].r.flags, RLC_RESULT_FAILED_CLOSED);
    assert_int_equal(A.res[1].op, RLC_OP_RENEW);
    fake_stop(&f);
}

/* ---- the lease keeper ---------------------------------------------------- */

static atomic_int lost_calls;
static rlc_xresult_t lost_res;

static void on_lost(rlc_lease_t *k, const rlc_xresult_t *res, void *arg)
{
    (void)arg;
    assert_true(rlc_lease_lost(k) != 0);
    lost_res = *res;
    atomic_fetch_add(&lost_calls, 1);
}

/* Waits up to ms for the lease to be lost. */
static int await_lost(rlc_lease_t *k, int ms)
{
    uint64_t end = rl_mono_ms() + (uint64_t)ms;
    struct timespec ts = {0, 1000000};

    while (rlc_lease_lost(k) == 0) {
        if (rl_mono_ms() >= end)
            return 0;
        nanosleep(&ts, NULL);
    }
    return 1;
}

static void test_keeper(void **state)
{
    rlc_check_t req = {.key = "w", .rule = "conc"};
    rlc_options_t o;
    rlc_xresult_t got, rel;
    rlc_lease_t *k = NULL;
    fake_t f;
    rlc_client_t *c = open_client(&f, FAKE_ANSWER, 1000, RLC_FAIL_CLOSED);
    int i, n;

    (void)state;
    atomic_store(&lost_calls, 0);
    assert_int_equal(rlc_acquire(c, &req, &got), RLC_OK);
    assert_int_equal(got.r.code, RLC_CODE_OK);
    options(&o, 1000, RLC_FAIL_CLOSED);

    /* Not a lease: refused. */
    rlc_xresult_t bad = got;
    bad.op = RLC_OP_RESERVE;
    assert_int_equal(rlc_lease_keep(&k, &o, &bad, 0, NULL, NULL), RLC_EINVAL);
    assert_null(k);
    bad = got;
    bad.expires_at_ms = bad.r.decided_at_ms;
    assert_int_equal(rlc_lease_keep(&k, &o, &bad, 0, NULL, NULL), RLC_EINVAL);

    /* A 600 ms lease is renewed every 200 ms. */
    assert_int_equal(rlc_lease_keep(&k, &o, &got, 0, on_lost, NULL), RLC_OK);
    assert_int_equal(rlc_lease_expires_at(k), got.expires_at_ms);
    assert_true(fake_wait(&f.renews, 3, 5000));
    assert_true(rlc_lease_renewals(k) >= 2);
    assert_int_equal(rlc_lease_lost(k), 0);
    assert_true(rlc_lease_expires_at(k) > got.expires_at_ms);
    n = atomic_load(&f.nxop);
    fake_xop_t acq = logged(&f, 0);
    fake_xop_t prev = logged(&f, 1);
    assert_int_equal(prev.op, RLC_OP_RENEW);
    assert_handle(&prev, got.handle, got.handle_len);
    assert_true(prev.mono_ms - acq.mono_ms >= 150);
    for (i = 2; i < n; i++) {
        fake_xop_t x = logged(&f, i);
        assert_int_equal(x.op, RLC_OP_RENEW);
        assert_handle(&x, got.handle, got.handle_len);
        /* Not early: the keeper sends renewal i at least i periods
         * (200 ms) after the lease was granted, so the fake, however late
         * its thread logs it, sees it no sooner (150 ms a period: the
         * clocks' rounding). A gap between two logs is no such bound: a
         * fake descheduled at one log shortens the next gap. And well
         * before the lease would end. */
        assert_true(x.mono_ms - acq.mono_ms >= 150 * (uint64_t)i);
        assert_true(x.mono_ms - prev.mono_ms < 550);
        prev = x;
    }

    /* Done: renewals stop and the lease goes back. */
    assert_int_equal(rlc_lease_done(k, &rel), RLC_OK);
    assert_int_equal(rel.op, RLC_OP_RELEASE);
    assert_int_equal(rel.r.code, RLC_CODE_OK);
    assert_int_equal(atomic_load(&f.releases), 1);
    n = atomic_load(&f.nxop);
    fake_xop_t x = logged(&f, n - 1);
    assert_int_equal(x.op, RLC_OP_RELEASE);
    assert_handle(&x, got.handle, got.handle_len);
    assert_int_equal(atomic_load(&lost_calls), 0);
    assert_int_equal(rlc_lease_done(NULL, NULL), RLC_EINVAL);
    rlc_free(c);
    fake_stop(&f);
}

static void test_keeper_lost(void **state)
{
    rlc_check_t req = {.key = "w", .rule = "conc"};
    rlc_options_t o;
    rlc_xresult_t got, rel;
    rlc_lease_t *k = NULL;
    fake_t f;
    rlc_client_t *c = open_client(&f, FAKE_ANSWER, 1000, RLC_FAIL_CLOSED);

    (void)state;
    atomic_store(&lost_calls, 0);
    atomic_store(&f.lease_ms, 150);
    atomic_store(&f.renew_fail_from, 2); /* the store lets the lease go */
    assert_int_equal(rlc_acquire(c, &req, &got), RLC_OK);
    options(&o, 1000, RLC_FAIL_CLOSED);
    assert_int_equal(rlc_lease_keep(&k, &o, &got, 0, on_lost, NULL), RLC_OK);
    assert_true(await_lost(k, 5000));
    assert_int_equal(rlc_lease_lost(k), RLC_ECANCELED);
    assert_int_equal(rlc_lease_renewals(k), 1);
    assert_int_equal(atomic_load(&lost_calls), 1);
    assert_int_equal(lost_res.r.code, RLC_CODE_ERROR);
    assert_string_equal(lost_res.r.error, "no such lease alive");
    /* Lost: nothing is sent; the failing renewal is what done reports. */
    assert_int_equal(rlc_lease_done(k, &rel), RLC_ECANCELED);
    assert_string_equal(rel.r.error, "no such lease alive");
    assert_int_equal(atomic_load(&f.releases), 0);
    assert_int_equal(atomic_load(&f.renews), 2);
    assert_int_equal(atomic_load(&lost_calls), 1);
    rlc_free(c);
    fake_stop(&f);
}

/* Keeping that starts after the ACQUIRE's answer came in renews as early
 * as the lease's age says: the term began at the grant. */
static void test_keeper_late_start(void **state)
{
    rlc_check_t req = {.key = "w", .rule = "conc"};
    rlc_options_t o;
    rlc_xresult_t got;
    rlc_lease_t *k = NULL;
    fake_t f;
    rlc_client_t *c = open_client(&f, FAKE_ANSWER, 1000, RLC_FAIL_CLOSED);
    uint64_t t0;

    (void)state;
    assert_int_equal(rlc_acquire(c, &req, &got), RLC_OK);
    /* As if the answer had come 190 ms ago: the 600 ms lease's first
     * renewal (due 200 ms after the grant) is 10 ms away. */
    got.r.unix_ms -= 190;
    options(&o, 1000, RLC_FAIL_CLOSED);
    t0 = rl_mono_ms();
    assert_int_equal(rlc_lease_keep(&k, &o, &got, 0, NULL, NULL), RLC_OK);
    assert_true(fake_wait(&f.renews, 1, 5000));
    fake_xop_t x = logged(&f, 1);
    assert_int_equal(x.op, RLC_OP_RENEW);
    assert_true(x.mono_ms - t0 < 150);
    assert_int_equal(rlc_lease_done(k, NULL), RLC_OK);
    rlc_free(c);
    fake_stop(&f);
}

/* A keeper whose server stops answering loses the lease once it would
 * have ended, not at the first missed renewal. */
static void test_keeper_silent(void **state)
{
    rlc_check_t req = {.key = "w", .rule = "conc"};
    rlc_options_t o;
    rlc_xresult_t got;
    rlc_lease_t *k = NULL;
    fake_t f, g;
    rlc_client_t *c = open_client(&f, FAKE_ANSWER, 1000, RLC_FAIL_CLOSED);
    uint64_t t0;

    (void)state;
    atomic_store(&lost_calls, 0);
    atomic_store(&f.lease_ms, 300);
    assert_int_equal(rlc_acquire(c, &req, &got), RLC_OK);
    rlc_free(c);
    fake_stop(&f);
    /* The keeper's server: reads, never answers. */
    assert_int_equal(fake_start(&g, 0, FAKE_SILENT, 0), 0);
    snprintf(addr, sizeof(addr), "127.0.0.1:%d", g.port);
    options(&o, 40, RLC_FAIL_CLOSED);
    t0 = rl_mono_ms();
    assert_int_equal(rlc_lease_keep(&k, &o, &got, 0, on_lost, NULL), RLC_OK);
    assert_true(await_lost(k, 5000));
    assert_true(rl_mono_ms() - t0 >= 300);
    assert_int_equal(rlc_lease_lost(k), RLC_ETIMEDOUT);
    assert_true(atomic_load(&g.requests) >= 2); /* retried meanwhile */
    assert_int_equal(lost_res.r.status, RLC_ETIMEDOUT);
    assert_int_equal(rlc_lease_done(k, NULL), RLC_ETIMEDOUT);
    assert_int_equal(atomic_load(&lost_calls), 1);
    fake_stop(&g);
}

/* ---- the async keeper ------------------------------------------------------
 */

typedef struct akctx_s {
    fake_t *f;
    rlc_async_lease_t *k;
    uv_timer_t poll;
    int acquired, lost, done, in_done, renews_wanted, done_from_lost;
    int lost_status;
    unsigned renewals_at_done;
    rlc_xresult_t lost_res, done_res;
} akctx_t;

static akctx_t K;

static void on_adone(rlc_async_lease_t *k, const rlc_xresult_t *res, void *arg)
{
    (void)arg;
    assert_int_equal(K.in_done, 0); /* never inside rlc_async_lease_done */
    assert_ptr_equal(k, K.k);
    K.done++;
    K.done_res = *res;
    K.renewals_at_done = rlc_async_lease_renewals(k);
    rlc_async_free(A.c);
}

static void call_done(void)
{
    K.in_done = 1;
    assert_int_equal(rlc_async_lease_done(K.k, on_adone, NULL), RLC_OK);
    assert_int_equal(rlc_async_lease_done(K.k, on_adone, NULL), RLC_EINVAL);
    K.in_done = 0;
}

static void on_alost(rlc_async_lease_t *k, const rlc_xresult_t *res, void *arg)
{
    (void)arg;
    K.lost++;
    K.lost_res = *res;
    K.lost_status = rlc_async_lease_lost(k);
    if (K.done_from_lost)
        call_done();
}

/* Awaits the wanted renewals, then ends the keeper. */
static void on_poll(uv_timer_t *t)
{
    if (atomic_load(&K.f->renews) < K.renews_wanted)
        return;
    uv_close((uv_handle_t *)t, NULL);
    call_done();
}

static void on_acquired(rlc_async_t *c, const rlc_xresult_t *res, void *arg)
{
    (void)arg;
    K.acquired++;
    assert_int_equal(res->r.code, RLC_CODE_OK);
    assert_int_equal(rlc_async_lease_keep(&K.k, c, res, 0, on_alost, NULL),
                     RLC_OK);
    assert_int_equal(rlc_async_lease_expires_at(K.k), res->expires_at_ms);
    if (K.renews_wanted > 0) {
        uv_timer_init(&A.loop, &K.poll);
        uv_timer_start(&K.poll, on_poll, 5, 5);
    }
}

static void start_async_keeper(fake_t *f, int lease_ms, int fail_from)
{
    rlc_check_t req = {.key = "aw", .rule = "conc"};

    memset(&K, 0, sizeof(K));
    K.f = f;
    assert_int_equal(fake_start(f, 0, FAKE_ANSWER, 0), 0);
    atomic_store(&f->lease_ms, lease_ms);
    atomic_store(&f->renew_fail_from, fail_from);
    snprintf(addr, sizeof(addr), "127.0.0.1:%d", f->port);
    new_async(1000, RLC_FAIL_CLOSED);
    assert_int_equal(rlc_async_acquire(A.c, &req, on_acquired, NULL), RLC_OK);
}

static void test_async_keeper(void **state)
{
    fake_t f;
    int i, n;

    (void)state;
    start_async_keeper(&f, 600, 0);
    K.renews_wanted = 3;
    uv_run(&A.loop, UV_RUN_DEFAULT);
    assert_int_equal(uv_loop_close(&A.loop), 0);
    assert_int_equal(K.acquired, 1);
    assert_int_equal(K.lost, 0);
    assert_int_equal(K.done, 1);
    assert_true(K.renewals_at_done >= 3);
    assert_int_equal(K.done_res.op, RLC_OP_RELEASE);
    assert_int_equal(K.done_res.r.code, RLC_CODE_OK);
    assert_int_equal(atomic_load(&f.releases), 1);
    n = atomic_load(&f.nxop);
    fake_xop_t acq = logged(&f, 0);
    fake_xop_t prev = logged(&f, 1);
    assert_true(prev.mono_ms - acq.mono_ms >= 150);
    for (i = 2; i < n - 1; i++) {
        fake_xop_t x = logged(&f, i);
        assert_int_equal(x.op, RLC_OP_RENEW);
        assert_handle(&x, "L:aw", 4);
        /* Not early (counted from the grant, as above), and well before
         * the lease would end. */
        assert_true(x.mono_ms - acq.mono_ms >= 150 * (uint64_t)i);
        assert_true(x.mono_ms - prev.mono_ms < 550);
        prev = x;
    }
    fake_xop_t x = logged(&f, n - 1);
    assert_int_equal(x.op, RLC_OP_RELEASE);
    assert_handle(&x, "L:aw", 4);
    fake_stop(&f);
}

static void test_async_keeper_lost(void **state)
{
    fake_t f;

    (void)state;
    start_async_keeper(&f, 150, 2);
    K.done_from_lost = 1;
    uv_run(&A.loop, UV_RUN_DEFAULT);
    assert_int_equal(uv_loop_close(&A.loop), 0);
    assert_int_equal(K.lost, 1);
    assert_int_equal(K.lost_status, RLC_ECANCELED);
    assert_string_equal(K.lost_res.r.error, "no such lease alive");
    assert_int_equal(K.done, 1);
    assert_int_equal(K.renewals_at_done, 1);
    assert_string_equal(K.done_res.r.error, "no such lease alive");
    assert_int_equal(atomic_load(&f.releases), 0); /* nothing sent */
    assert_int_equal(atomic_load(&f.renews), 2);
    fake_stop(&f);
}

/* Done while a renewal is in flight: its answer comes first, then the
 * release. */
static void test_async_keeper_done_in_flight(void **state)
{
    fake_t f;

    (void)state;
    start_async_keeper(&f, 150, 0);
    atomic_store(&f.renew_delay_ms, 100);
    K.renews_wanted = 1; /* the fake has it and sits on its answer */
    uv_run(&A.loop, UV_RUN_DEFAULT);
    assert_int_equal(uv_loop_close(&A.loop), 0);
    assert_int_equal(K.done, 1);
    assert_int_equal(K.lost, 0);
    assert_int_equal(K.renewals_at_done, 1);
    assert_int_equal(K.done_res.op, RLC_OP_RELEASE);
    assert_int_equal(K.done_res.r.code, RLC_CODE_OK);
    assert_int_equal(atomic_load(&f.renews), 1);
    assert_int_equal(atomic_load(&f.releases), 1);
    assert_int_equal(logged(&f, 1).op, RLC_OP_RENEW);
    assert_int_equal(logged(&f, 2).op, RLC_OP_RELEASE);
    fake_stop(&f);
}

/* ---- rl-check ------------------------------------------------------------ */

/* Runs rl-check with args (a shell fragment) against addr; its stdout and
 * stderr go into out. Returns its exit status. */
static int rl_check(const char *args, char *out, size_t cap)
{
    char cmd[2048];
    size_t n = 0;
    FILE *p;
    int st;

    snprintf(cmd, sizeof(cmd), "%s --server %s %s 2>&1", RL_CHECK_BIN, addr,
             args);
    p = popen(cmd, "r");
    assert_non_null(p);
    while (n + 1 < cap && fgets(out + n, (int)(cap - n), p) != NULL)
        n += strlen(out + n);
    out[n] = '\0';
    st = pclose(p);
    assert_true(WIFEXITED(st));
    return WEXITSTATUS(st);
}

static void test_rl_check(void **state)
{
    char out[4096], args[1400], hex[2 * RLC_HANDLE_MAX + 1];
    const char *h, *e;
    fake_t f;
    size_t i;

    (void)state;
    assert_int_equal(fake_start(&f, 0, FAKE_ANSWER, 0), 0);
    snprintf(addr, sizeof(addr), "127.0.0.1:%d", f.port);

    /* --reserve prints the handle in hex; --settle takes it back. */
    assert_int_equal(rl_check("--key job --limit 10 --window 60 --cost 3 "
                              "--reserve",
                              out, sizeof(out)),
                     0);
    assert_true(strncmp(out, "OK used=3 ", 10) == 0);
    h = strstr(out, " handle=");
    assert_non_null(h);
    h += 8;
    e = strchr(h, ' ');
    assert_non_null(e);
    assert_true((size_t)(e - h) < sizeof(hex));
    memcpy(hex, h, (size_t)(e - h));
    hex[e - h] = '\0';
    assert_non_null(strstr(out, " expires_at_ms="));
    fake_xop_t x = logged(&f, 0);
    assert_int_equal(x.op, RLC_OP_RESERVE);
    assert_int_equal(x.cost, 3);
    snprintf(args, sizeof(args), "--settle %s --actual 2", hex);
    assert_int_equal(rl_check(args, out, sizeof(out)), 0);
    assert_string_equal(out, "OK settled actual=2\n");
    x = logged(&f, 1);
    assert_int_equal(x.op, RLC_OP_SETTLE);
    assert_int_equal(x.actual, 2);
    assert_int_equal(x.key_len, 0);
    /* The hex printed is the handle's bytes. */
    assert_int_equal(x.handle_len * 2, strlen(hex));
    for (i = 0; i < x.handle_len; i++) {
        char two[3];
        snprintf(two, sizeof(two), "%02x", x.handle[i]);
        assert_memory_equal(two, hex + 2 * i, 2);
    }

    /* Leases: acquire, renew, release; busy is over the limit (exit 1),
     * an unknown handle the server's error (exit 2). */
    assert_int_equal(
        rl_check("--key w --rule conc --acquire", out, sizeof(out)), 0);
    assert_non_null(strstr(out, " handle=4c3a77 ")); /* "L:w" */
    assert_int_equal(rl_check("--renew 4c3a77", out, sizeof(out)), 0);
    assert_true(strncmp(out, "OK renewed expires_at_ms=", 25) == 0);
    assert_int_equal(rl_check("--release 4C3A77", out, sizeof(out)), 0);
    assert_string_equal(out, "OK released\n");
    x = logged(&f, 4);
    assert_int_equal(x.op, RLC_OP_RELEASE);
    assert_handle(&x, "L:w", 3);
    assert_int_equal(
        rl_check("--key busy --rule conc --acquire", out, sizeof(out)), 1);
    assert_true(strncmp(out, "OVER_LIMIT ", 11) == 0);
    assert_non_null(strstr(out, "retry_after_ms=777"));
    assert_int_equal(rl_check("--release 00", out, sizeof(out)), 2);
    assert_non_null(strstr(out, "no such lease alive"));
    int before = atomic_load(&f.nxop);

    /* Refused before anything is sent. */
    assert_int_equal(rl_check("--release 0g", out, sizeof(out)), 2);
    assert_non_null(strstr(out, "not hex"));
    assert_int_equal(rl_check("--settle 00", out, sizeof(out)), 2);
    assert_non_null(strstr(out, "go together"));
    assert_int_equal(rl_check("--release 00 --key k", out, sizeof(out)), 2);
    assert_int_equal(
        rl_check("--reserve --acquire --key k --rule r", out, sizeof(out)), 2);
    memset(args, 0, sizeof(args));
    memcpy(args, "--renew ", 8);
    memset(args + 8, 'a', 2 * (RLC_HANDLE_MAX + 1));
    assert_int_equal(rl_check(args, out, sizeof(out)), 2);
    assert_non_null(strstr(out, "longer than 512 bytes"));
    assert_int_equal(atomic_load(&f.nxop), before);
    fake_stop(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reserve_settle),
        cmocka_unit_test(test_acquire_release_renew),
        cmocka_unit_test(test_handles_bounded),
        cmocka_unit_test(test_batch),
        cmocka_unit_test(test_no_answer),
        cmocka_unit_test(test_async_all),
        cmocka_unit_test(test_async_no_answer),
        cmocka_unit_test(test_keeper),
        cmocka_unit_test(test_keeper_lost),
        cmocka_unit_test(test_keeper_silent),
        cmocka_unit_test(test_keeper_late_start),
        cmocka_unit_test(test_async_keeper),
        cmocka_unit_test(test_async_keeper_lost),
        cmocka_unit_test(test_async_keeper_done_in_flight),
        cmocka_unit_test(test_rl_check),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
