/* The async client on a libuv loop against the scripted fake server. Every
 * test counts its callbacks, asserts the counts after uv_run, and ends with
 * uv_loop_close() == 0: a handle left open or a callback fired twice fails
 * the test. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>
#include <uv.h>

#include "fake_server.h"
#include "rlc.h"
#include "rlt.h"

#define MAXN 16384

typedef struct ctx_s {
    uv_loop_t loop;
    rlc_async_t *c;
    fake_t fake;
    char addr[64];
    int expect; /* callbacks after which the client is freed */
    int calls, ok, over, errors;
    int status[MAXN]; /* per check index: status seen, -1000 = none yet */
    int fired[MAXN];
    int order[MAXN];
    int connects, disconnects, last_state_status, down_status;
    int in_submit; /* a callback inside rlc_async_check would be a bug */
    int resubmit;  /* closed loop: checks still to submit from callbacks */
    uint64_t t0;
} ctx_t;

static ctx_t ctx;

static void setup_ctx(void)
{
    memset(&ctx, 0, sizeof(ctx));
    assert_int_equal(uv_loop_init(&ctx.loop), 0);
}

static void finish_loop(void)
{
    uv_run(&ctx.loop, UV_RUN_DEFAULT);
    assert_int_equal(uv_loop_close(&ctx.loop), 0);
}

static void new_client(const char *servers, uint32_t timeout_ms, int fail_mode);

static void on_state(rlc_async_t *c, int connected, int status, void *arg)
{
    (void)c;
    (void)arg;
    assert_int_equal(ctx.in_submit, 0);
    if (connected) {
        ctx.connects++;
        assert_int_equal(status, RLC_OK);
    } else {
        ctx.disconnects++;
        assert_true(status < 0);
        ctx.down_status = status;
    }
    ctx.last_state_status = status;
}

static void on_result(rlc_async_t *c, const rlc_result_t *res, void *arg)
{
    int i = (int)(intptr_t)arg;

    assert_int_equal(ctx.in_submit, 0);
    assert_true(i >= 0 && i < MAXN);
    assert_int_equal(ctx.fired[i], 0); /* exactly once */
    ctx.fired[i] = 1;
    ctx.status[i] = res->status;
    ctx.order[ctx.calls++] = i;
    if (res->status != RLC_OK)
        ctx.errors++;
    else if (res->code == RLC_CODE_OK)
        ctx.ok++;
    else if (res->code == RLC_CODE_OVER_LIMIT)
        ctx.over++;
    if (ctx.calls == ctx.expect)
        rlc_async_free(c);
}

static int submit(const rlc_check_t *req, int i)
{
    int rc;

    ctx.in_submit = 1;
    rc = rlc_async_check(ctx.c, req, on_result, (void *)(intptr_t)i);
    ctx.in_submit = 0;
    return rc;
}

static void new_client(const char *servers, uint32_t timeout_ms, int fail_mode)
{
    rlc_options_t o;

    rlc_options_init(&o);
    o.servers = servers;
    o.request_timeout_ms = timeout_ms;
    o.fail_mode = fail_mode;
    o.reconnect_min_ms = 10;
    o.reconnect_max_ms = 50;
    assert_int_equal(rlc_async_new(&ctx.c, &ctx.loop, &o), RLC_OK);
    rlc_async_on_state(ctx.c, on_state, NULL);
}

static void start_fake(fake_mode_t mode, int param)
{
    assert_int_equal(fake_start(&ctx.fake, 0, mode, param), 0);
    snprintf(ctx.addr, sizeof(ctx.addr), "127.0.0.1:%d", ctx.fake.port);
}

/* 200 checks submitted before the connection is up leave in one send and
 * are all answered: 100 allowed, 100 over the limit. */
static void test_many_in_flight(void **state)
{
    rlc_check_t req = {.key = "k", .limit = 100, .window_s = 60};
    int i;

    (void)state;
    setup_ctx();
    start_fake(FAKE_ANSWER, 0);
    new_client(ctx.addr, 2000, RLC_FAIL_CLOSED);
    ctx.expect = 200;
    for (i = 0; i < 200; i++)
        assert_int_equal(submit(&req, i), RLC_OK);
    assert_int_equal(rlc_async_inflight(ctx.c), 200);
    assert_int_equal(rlc_async_connected(ctx.c), 0);
    assert_int_equal(ctx.calls, 0);
    finish_loop();
    assert_int_equal(ctx.calls, 200);
    assert_int_equal(ctx.ok, 100);
    assert_int_equal(ctx.over, 100);
    assert_int_equal(ctx.connects, 1);
    fake_stop(&ctx.fake);
    assert_int_equal(atomic_load(&ctx.fake.max_burst), 200);
    assert_int_equal(atomic_load(&ctx.fake.reads), 1);
    /* id 0 is the server's (notices): no request carries it */
    assert_int_equal(atomic_load(&ctx.fake.requests), 200);
    assert_int_equal(atomic_load(&ctx.fake.id0), 0);
}

/* The shadow mark and the server's window reach the async callback: the
 * rule "shadow" allows 2, then answers OK with shadow_refused; an inline
 * check beside it keeps its own window and no mark. */
static int shadow_seen[4];
static uint32_t window_seen[4];

static void on_result_shadow(rlc_async_t *c, const rlc_result_t *res, void *arg)
{
    int i = (int)(intptr_t)arg;

    assert_true(i >= 0 && i < 4);
    assert_int_equal(res->status, RLC_OK);
    assert_int_equal(res->code, RLC_CODE_OK);
    assert_int_equal(res->retry_after_ms, 0);
    shadow_seen[i] = res->shadow_refused;
    window_seen[i] = res->window_s;
    on_result(c, res, arg);
}

static void test_shadow_refused(void **state)
{
    rlc_check_t req = {.key = "s", .rule = "shadow"};
    rlc_check_t inl = {.key = "t", .limit = 5, .window_s = 60};
    int i;

    (void)state;
    setup_ctx();
    start_fake(FAKE_ANSWER, 0);
    new_client(ctx.addr, 2000, RLC_FAIL_CLOSED);
    ctx.expect = 4;
    memset(shadow_seen, 0xff, sizeof(shadow_seen));
    for (i = 0; i < 4; i++)
        assert_int_equal(rlc_async_check(ctx.c, i == 2 ? &inl : &req,
                                         on_result_shadow, (void *)(intptr_t)i),
                         RLC_OK);
    finish_loop();
    fake_stop(&ctx.fake);
    assert_int_equal(ctx.calls, 4);
    assert_int_equal(ctx.ok, 4);
    /* Sent in order on one connection: two allowed, the inline check,
     * then a refusal in shadow. */
    assert_int_equal(shadow_seen[0], 0);
    assert_int_equal(shadow_seen[1], 0);
    assert_int_equal(shadow_seen[2], 0);
    assert_int_equal(shadow_seen[3], 1);
    assert_int_equal(window_seen[0], 7);
    assert_int_equal(window_seen[1], 7);
    assert_int_equal(window_seen[2], 60);
    assert_int_equal(window_seen[3], 7);
}

/* Answers in reverse order still reach their own callbacks. */
static void on_result_rev(rlc_async_t *c, const rlc_result_t *res, void *arg)
{
    int i = (int)(intptr_t)arg;

    assert_int_equal(res->status, RLC_OK);
    assert_int_equal(res->limit, 1000 + (uint64_t)i);
    on_result(c, res, arg);
}

static void test_out_of_order(void **state)
{
    char keys[10][8];
    int i;

    (void)state;
    setup_ctx();
    start_fake(FAKE_REVERSE, 10);
    new_client(ctx.addr, 2000, RLC_FAIL_CLOSED);
    ctx.expect = 10;
    for (i = 0; i < 10; i++) {
        snprintf(keys[i], sizeof(keys[i]), "k%d", i);
        rlc_check_t req = {
            .key = keys[i], .limit = 1000 + (uint64_t)i, .window_s = 60};
        assert_int_equal(
            rlc_async_check(ctx.c, &req, on_result_rev, (void *)(intptr_t)i),
            RLC_OK);
    }
    finish_loop();
    assert_int_equal(ctx.calls, 10);
    for (i = 0; i < 10; i++)
        assert_int_equal(ctx.order[i], 9 - i);
    fake_stop(&ctx.fake);
}

static void test_partial_frames(void **state)
{
    rlc_check_t req = {.key = "k", .limit = 3, .window_s = 60};
    int i;

    (void)state;
    setup_ctx();
    start_fake(FAKE_BYTEWISE, 0);
    new_client(ctx.addr, 5000, RLC_FAIL_CLOSED);
    ctx.expect = 5;
    for (i = 0; i < 5; i++)
        assert_int_equal(submit(&req, i), RLC_OK);
    finish_loop();
    assert_int_equal(ctx.calls, 5);
    assert_int_equal(ctx.ok, 3);
    assert_int_equal(ctx.over, 2);
    for (i = 0; i < 5; i++)
        assert_int_equal(ctx.order[i], i);
    fake_stop(&ctx.fake);
}

static void test_closes_mid_flight(void **state)
{
    rlc_check_t req = {.key = "k", .limit = 3, .window_s = 60};
    int i;

    (void)state;
    setup_ctx();
    start_fake(FAKE_CLOSE_AFTER, 3);
    new_client(ctx.addr, 5000, RLC_FAIL_CLOSED);
    ctx.expect = 10;
    ctx.t0 = rlt_mono_ms();
    for (i = 0; i < 10; i++)
        assert_int_equal(submit(&req, i), RLC_OK);
    finish_loop();
    assert_true(rlt_mono_ms() - ctx.t0 < 2000); /* not by timeout */
    assert_int_equal(ctx.calls, 10);
    assert_int_equal(ctx.errors, 10);
    for (i = 0; i < 10; i++)
        assert_int_equal(ctx.status[i], RLC_ECLOSED);
    assert_int_equal(ctx.connects, 1);
    assert_int_equal(ctx.disconnects, 1);
    fake_stop(&ctx.fake);
}

static void on_result_timeout(rlc_async_t *c, const rlc_result_t *res,
                              void *arg)
{
    uint64_t dt = rlt_mono_ms() - ctx.t0;

    assert_int_equal(res->status, RLC_ETIMEDOUT);
    assert_true(dt >= 145 && dt < 10000);
    if (res->flags == RLC_RESULT_FAILED_OPEN)
        assert_int_equal(res->code, RLC_CODE_OK);
    else {
        assert_int_equal(res->flags, RLC_RESULT_FAILED_CLOSED);
        assert_int_equal(res->code, RLC_CODE_ERROR);
    }
    on_result(c, res, arg);
}

static void test_never_answers(void **state)
{
    rlc_check_t req = {.key = "k", .limit = 3, .window_s = 60};
    int i, mode;

    (void)state;
    for (mode = RLC_FAIL_CLOSED; mode <= RLC_FAIL_OPEN; mode++) {
        setup_ctx();
        start_fake(FAKE_SILENT, 0);
        new_client(ctx.addr, 150, mode);
        ctx.expect = 5;
        /* The loop has not run for 100 ms: its cached time is stale, and
         * the timeouts must still count from submission. */
        nanosleep(&(struct timespec){0, 100 * 1000000L}, NULL);
        ctx.t0 = rlt_mono_ms();
        for (i = 0; i < 5; i++)
            assert_int_equal(rlc_async_check(ctx.c, &req, on_result_timeout,
                                             (void *)(intptr_t)i),
                             RLC_OK);
        finish_loop();
        assert_int_equal(ctx.calls, 5);
        assert_int_equal(ctx.errors, 5);
        fake_stop(&ctx.fake);
        assert_int_equal(atomic_load(&ctx.fake.requests), 5);
    }
}

/* The server goes away after the first answer and comes back on the same
 * port: the client reconnects by itself and the next check is answered. */
static void on_result_restart(rlc_async_t *c, const rlc_result_t *res,
                              void *arg)
{
    assert_int_equal(res->status, RLC_OK);
    assert_int_equal(res->used, 1); /* each fake counts from zero */
    on_result(c, res, arg);
    if (ctx.calls == 1) {
        /* Close the server's side; the thread joins within 5 ms. */
        atomic_store(&ctx.fake.stop, 1);
    }
}

static void on_state_restart(rlc_async_t *c, int connected, int status,
                             void *arg)
{
    rlc_check_t req = {.key = "k", .limit = 5, .window_s = 60};
    int port = ctx.fake.port;

    on_state(c, connected, status, arg);
    if (connected) {
        assert_int_equal(rlc_async_check(c, &req, on_result_restart,
                                         (void *)(intptr_t)(ctx.connects - 1)),
                         RLC_OK);
    } else if (ctx.disconnects == 1) {
        fake_stop(&ctx.fake);
        assert_int_equal(fake_start(&ctx.fake, port, FAKE_ANSWER, 0), 0);
    }
}

static void test_reconnect_after_restart(void **state)
{
    (void)state;
    setup_ctx();
    start_fake(FAKE_ANSWER, 0);
    new_client(ctx.addr, 2000, RLC_FAIL_CLOSED);
    rlc_async_on_state(ctx.c, on_state_restart, NULL);
    ctx.expect = 2;
    finish_loop();
    assert_int_equal(ctx.calls, 2);
    assert_int_equal(ctx.ok, 2);
    assert_int_equal(ctx.connects, 2);
    assert_true(ctx.disconnects >= 1);
    fake_stop(&ctx.fake);
    assert_int_equal(atomic_load(&ctx.fake.accepted), 1);
}

/* The client is freed with checks in flight: each callback fires, with
 * ECANCELED, before rlc_async_free returns. */
static void on_free_timer(uv_timer_t *t)
{
    int before = ctx.calls;
    rlc_check_t req = {.key = "k", .limit = 3, .window_s = 60};

    assert_int_equal(before, 0);
    assert_int_equal(rlc_async_inflight(ctx.c), 10);
    rlc_async_free(ctx.c);
    assert_int_equal(ctx.calls, 10);
    for (int i = 0; i < 10; i++)
        assert_int_equal(ctx.status[i], RLC_ECANCELED);
    (void)req;
    uv_close((uv_handle_t *)t, NULL);
}

static void test_free_with_inflight(void **state)
{
    rlc_check_t req = {.key = "k", .limit = 3, .window_s = 60};
    uv_timer_t t;
    int i;

    (void)state;
    setup_ctx();
    start_fake(FAKE_SILENT, 0);
    new_client(ctx.addr, 5000, RLC_FAIL_OPEN);
    ctx.expect = -1;
    for (i = 0; i < 10; i++)
        assert_int_equal(submit(&req, i), RLC_OK);
    uv_timer_init(&ctx.loop, &t);
    uv_timer_start(&t, on_free_timer, 50, 0);
    finish_loop();
    assert_int_equal(ctx.calls, 10);
    assert_int_equal(ctx.errors, 10);
    fake_stop(&ctx.fake);
    assert_int_equal(atomic_load(&ctx.fake.requests), 10);
}

/* Freed from inside the first answer's callback: the rest are cancelled,
 * and a check submitted from a cancellation callback is refused. */
static void on_result_free_early(rlc_async_t *c, const rlc_result_t *res,
                                 void *arg)
{
    rlc_check_t req = {.key = "k", .limit = 3, .window_s = 60};

    on_result(c, res, arg);
    if (ctx.calls == 1) {
        assert_int_equal(res->status, RLC_OK);
        rlc_async_free(c);
        rlc_async_free(c); /* twice is harmless */
    } else {
        assert_int_equal(res->status, RLC_ECANCELED);
        assert_int_equal(res->code, RLC_CODE_ERROR);
        assert_int_equal(res->flags, 0);
        assert_int_equal(rlc_async_check(c, &req, on_result, NULL),
                         RLC_ECANCELED);
    }
}

static void test_free_inside_callback(void **state)
{
    rlc_check_t req = {.key = "k", .limit = 3, .window_s = 60};
    int i;

    (void)state;
    setup_ctx();
    start_fake(FAKE_ANSWER, 0);
    new_client(ctx.addr, 5000, RLC_FAIL_CLOSED);
    ctx.expect = -1;
    for (i = 0; i < 10; i++)
        assert_int_equal(rlc_async_check(ctx.c, &req, on_result_free_early,
                                         (void *)(intptr_t)i),
                         RLC_OK);
    finish_loop();
    assert_int_equal(ctx.calls, 10);
    assert_int_equal(ctx.ok, 1);
    assert_int_equal(ctx.errors, 9);
    fake_stop(&ctx.fake);
}

/* Nobody listens: the checks fail with ECLOSED once a round of connect
 * attempts has failed, long before their timeout. */
static void test_no_server(void **state)
{
    rlc_check_t req = {.key = "k", .limit = 3, .window_s = 60};
    int i;

    (void)state;
    setup_ctx();
    /* Reserved: nothing listens there. */
    snprintf(ctx.addr, sizeof(ctx.addr), "127.0.0.1:%d", rlt_port_reserve());
    new_client(ctx.addr, 5000, RLC_FAIL_OPEN);
    ctx.expect = 3;
    ctx.t0 = rlt_mono_ms();
    for (i = 0; i < 3; i++)
        assert_int_equal(submit(&req, i), RLC_OK);
    finish_loop();
    assert_true(rlt_mono_ms() - ctx.t0 < 2500); /* at once, not at the 5 s timeout */
    assert_int_equal(ctx.calls, 3);
    assert_int_equal(ctx.errors, 3);
    assert_int_equal(ctx.status[0], RLC_ECLOSED);
    assert_int_equal(ctx.connects, 0);
    assert_true(ctx.disconnects >= 1);
    assert_int_equal(ctx.last_state_status, RLC_ECLOSED);
}

/* The first address is dead, the second answers. */
static void test_address_list(void **state)
{
    rlc_check_t req = {.key = "k", .limit = 3, .window_s = 60};
    char list[128];

    (void)state;
    setup_ctx();
    start_fake(FAKE_ANSWER, 0);
    snprintf(list, sizeof(list), "127.0.0.1:%d,%s", rlt_port_reserve(),
             ctx.addr);
    new_client(list, 2000, RLC_FAIL_CLOSED);
    ctx.expect = 1;
    assert_int_equal(submit(&req, 0), RLC_OK);
    finish_loop();
    assert_int_equal(ctx.calls, 1);
    assert_int_equal(ctx.ok, 1);
    assert_int_equal(ctx.connects, 1);
    fake_stop(&ctx.fake);
}

/* Closed loop, as rl-bench drives it: each answer submits the next check.
 * Submissions made while answers are being dispatched are packed: far
 * fewer reads on the server than checks. */
static void on_result_loop(rlc_async_t *c, const rlc_result_t *res, void *arg)
{
    rlc_check_t req = {.key = "k", .limit = 1000000, .window_s = 60};

    assert_int_equal(res->status, RLC_OK);
    ctx.calls++;
    if (ctx.resubmit > 0) {
        ctx.resubmit--;
        ctx.in_submit = 1;
        assert_int_equal(rlc_async_check(c, &req, on_result_loop, arg), RLC_OK);
        ctx.in_submit = 0;
    } else if (rlc_async_inflight(c) == 0) {
        rlc_async_free(c);
    }
}

static void test_closed_loop(void **state)
{
    rlc_check_t req = {.key = "k", .limit = 1000000, .window_s = 60};
    int i;

    (void)state;
    setup_ctx();
    start_fake(FAKE_ANSWER, 0);
    new_client(ctx.addr, 5000, RLC_FAIL_CLOSED);
    ctx.resubmit = 20000 - 64;
    for (i = 0; i < 64; i++)
        assert_int_equal(rlc_async_check(ctx.c, &req, on_result_loop, NULL),
                         RLC_OK);
    finish_loop();
    assert_int_equal(ctx.calls, 20000);
    fake_stop(&ctx.fake);
    assert_int_equal(atomic_load(&ctx.fake.requests), 20000);
    assert_true(atomic_load(&ctx.fake.reads) < 20000 / 4);
}

static void test_misuse(void **state)
{
    rlc_options_t o;
    rlc_async_t *c = (rlc_async_t *)&o;
    rlc_check_t req = {.key = "k", .limit = 3, .window_s = 60};
    char big[RLC_KEY_MAX + 2];
    int i;

    (void)state;
    setup_ctx();
    rlc_options_init(&o);
    assert_int_equal(rlc_async_new(NULL, &ctx.loop, &o), RLC_EINVAL);
    assert_int_equal(rlc_async_new(&c, &ctx.loop, &o), RLC_EINVAL);
    assert_null(c);
    o.servers = "127.0.0.1:80";
    assert_int_equal(rlc_async_new(&c, NULL, &o), RLC_EINVAL);
    o.servers = "127.0.0.1";
    assert_int_equal(rlc_async_new(&c, &ctx.loop, &o), RLC_EADDR);
    o.servers = "no-such-host.invalid:7390";
    assert_int_equal(rlc_async_new(&c, &ctx.loop, &o), RLC_EADDR);
    o.servers = "127.0.0.1:7390";
    o.max_inflight = 0;
    assert_int_equal(rlc_async_new(&c, &ctx.loop, &o), RLC_EINVAL);

    start_fake(FAKE_ANSWER, 0);
    rlc_options_init(&o);
    o.servers = ctx.addr;
    o.max_inflight = 2;
    assert_int_equal(rlc_async_new(&ctx.c, &ctx.loop, &o), RLC_OK);
    memset(big, 'k', sizeof(big));
    big[RLC_KEY_MAX + 1] = '\0';
    rlc_check_t bad = {.key = big, .limit = 3, .window_s = 60};
    assert_int_equal(submit(&bad, 0), RLC_EKEYLONG);
    bad.key = "";
    assert_int_equal(submit(&bad, 0), RLC_EKEYEMPTY);
    bad.key = "k";
    bad.rule = "r";
    assert_int_equal(submit(&bad, 0), RLC_EBOTH);
    assert_int_equal(rlc_async_check(ctx.c, &req, NULL, NULL), RLC_EINVAL);
    assert_int_equal(rlc_async_check(ctx.c, NULL, on_result, NULL), RLC_EINVAL);
    assert_int_equal(rlc_async_check(NULL, &req, on_result, NULL), RLC_EINVAL);
    assert_int_equal(rlc_async_inflight(ctx.c), 0);
    ctx.expect = 2;
    for (i = 0; i < 2; i++)
        assert_int_equal(submit(&req, i), RLC_OK);
    assert_int_equal(submit(&req, 2), RLC_EBUSY);
    assert_int_equal(rlc_async_inflight(ctx.c), 2);
    finish_loop();
    assert_int_equal(ctx.calls, 2); /* refused ones never call back */
    assert_int_equal(ctx.ok, 2);
    rlc_async_free(NULL);
    assert_int_equal(rlc_async_inflight(NULL), 0);
    assert_int_equal(rlc_async_connected(NULL), 0);
    fake_stop(&ctx.fake);
    assert_int_equal(atomic_load(&ctx.fake.requests), 2);
}

/* GOAWAY with checks in flight: the fake sends the notice as the first
 * request arrives and the 100 answers 20 ms later. The first 50 answers
 * each submit a check, after the notice: those must not go to the leaving
 * server but to a new connection, as must one submitted from the state
 * callback that reports the end. Nothing fails, nothing times out. */
static void on_result_goaway(rlc_async_t *c, const rlc_result_t *res, void *arg)
{
    rlc_check_t req = {.key = "k", .limit = 1000, .window_s = 60};
    int i = (int)(intptr_t)arg;

    assert_int_equal(res->status, RLC_OK);
    assert_int_equal(res->code, RLC_CODE_OK);
    if (i < 100 && ctx.resubmit > 0) {
        int next = 100 + 50 - ctx.resubmit--;
        ctx.in_submit = 1;
        assert_int_equal(
            rlc_async_check(c, &req, on_result_goaway, (void *)(intptr_t)next),
            RLC_OK);
        ctx.in_submit = 0;
    }
    on_result(c, res, arg);
}

static void on_state_goaway(rlc_async_t *c, int connected, int status,
                            void *arg)
{
    rlc_check_t req = {.key = "k", .limit = 1000, .window_s = 60};

    on_state(c, connected, status, arg);
    if (!connected) {
        assert_int_equal(status, RLC_ESHUTDOWN);
        /* The 50 submitted after the notice wait for the next server. */
        assert_int_equal(rlc_async_inflight(c), 50);
        assert_int_equal(
            rlc_async_check(c, &req, on_result_goaway, (void *)(intptr_t)150),
            RLC_OK);
    }
}

static void test_goaway_in_flight(void **state)
{
    rlc_check_t req = {.key = "k", .limit = 1000, .window_s = 60};
    int i;

    (void)state;
    setup_ctx();
    start_fake(FAKE_GOAWAY, 1);
    new_client(ctx.addr, 5000, RLC_FAIL_CLOSED);
    rlc_async_on_state(ctx.c, on_state_goaway, NULL);
    ctx.expect = 151;
    ctx.resubmit = 50;
    ctx.t0 = rlt_mono_ms();
    for (i = 0; i < 100; i++)
        assert_int_equal(
            rlc_async_check(ctx.c, &req, on_result_goaway, (void *)(intptr_t)i),
            RLC_OK);
    finish_loop();
    assert_true(rlt_mono_ms() - ctx.t0 < 2000); /* nothing waited a timeout */
    assert_int_equal(ctx.calls, 151);
    assert_int_equal(ctx.ok, 151);
    assert_int_equal(ctx.errors, 0);
    for (i = 0; i < 151; i++)
        assert_int_equal(ctx.fired[i], 1);
    /* The state callback saw the server go, then the new connection. */
    assert_int_equal(ctx.connects, 2);
    assert_int_equal(ctx.disconnects, 1);
    assert_int_equal(ctx.down_status, RLC_ESHUTDOWN);
    fake_stop(&ctx.fake);
    assert_int_equal(atomic_load(&ctx.fake.notices), 1);
    assert_int_equal(atomic_load(&ctx.fake.accepted), 2);
    /* The first connection carried the 100 and nothing after the notice;
     * the client then closed its side after a whole frame. */
    assert_int_equal(atomic_load(&ctx.fake.conn_requests[0]), 100);
    assert_int_equal(atomic_load(&ctx.fake.after_notice), 0);
    assert_int_equal(atomic_load(&ctx.fake.left), 1);
    assert_int_equal(atomic_load(&ctx.fake.partial), 0);
    /* The 51 submitted after the notice were answered on the new one. */
    assert_int_equal(atomic_load(&ctx.fake.conn_requests[1]), 51);
    assert_int_equal(atomic_load(&ctx.fake.requests), 151);
}

/* GOAWAY while the client still has bytes to write: the fake sends the
 * notice as it accepts, then reads nothing for 300 ms through a small
 * window, while the client has some 6 MB of checks to send, more than the
 * kernel's buffers take (at most 4 MB of send buffer by default): megabytes
 * are still in the client's output buffer when the notice is read. Every
 * byte already buffered still goes to that connection, up to the end of a
 * whole frame, before the client closes its side; the checks submitted
 * after the notice go to the next connection. */
#define BIG_N 12000

static char big_key[500];

static void on_result_goaway_big(rlc_async_t *c, const rlc_result_t *res,
                                 void *arg)
{
    rlc_check_t req = {.key = big_key, .limit = 1000000, .window_s = 60};
    int i = (int)(intptr_t)arg;

    assert_int_equal(res->status, RLC_OK);
    if (ctx.calls == 0) {
        for (int k = 0; k < 10; k++) {
            ctx.in_submit = 1;
            assert_int_equal(rlc_async_check(c, &req, on_result_goaway_big,
                                             (void *)(intptr_t)(BIG_N + k)),
                             RLC_OK);
            ctx.in_submit = 0;
        }
    }
    (void)i;
    on_result(c, res, arg);
}

static void test_goaway_while_writing(void **state)
{
    rlc_check_t req = {.key = big_key, .limit = 1000000, .window_s = 60};
    int i;

    (void)state;
    memset(big_key, 'b', sizeof(big_key) - 1);
    big_key[sizeof(big_key) - 1] = '\0';
    setup_ctx();
    start_fake(FAKE_GOAWAY_STALL, 300);
    new_client(ctx.addr, 20000, RLC_FAIL_CLOSED);
    ctx.expect = BIG_N + 10;
    ctx.t0 = rlt_mono_ms();
    for (i = 0; i < BIG_N; i++)
        assert_int_equal(rlc_async_check(ctx.c, &req, on_result_goaway_big,
                                         (void *)(intptr_t)i),
                         RLC_OK);
    finish_loop();
    assert_int_equal(ctx.calls, BIG_N + 10);
    assert_int_equal(ctx.ok, BIG_N + 10);
    assert_int_equal(ctx.errors, 0);
    assert_int_equal(ctx.connects, 2);
    assert_int_equal(ctx.disconnects, 1);
    assert_int_equal(ctx.down_status, RLC_ESHUTDOWN);
    fake_stop(&ctx.fake);
    assert_int_equal(atomic_load(&ctx.fake.accepted), 2);
    assert_int_equal(atomic_load(&ctx.fake.conn_requests[0]), BIG_N);
    assert_int_equal(atomic_load(&ctx.fake.after_notice), BIG_N);
    assert_int_equal(atomic_load(&ctx.fake.left), 1);
    assert_int_equal(atomic_load(&ctx.fake.partial), 0);
    assert_int_equal(atomic_load(&ctx.fake.conn_requests[1]), 10);
}

/* A server that breaks its word: it says GOAWAY, answers nothing, and
 * closes 300 ms after the client's FIN. The 5 checks it was sent fail with
 * ECLOSED at its close (not by timeout); 3 submitted after the client left
 * go to the next connection and are answered. */
static void on_poll_left(uv_timer_t *t)
{
    rlc_check_t req = {.key = "k", .limit = 1000, .window_s = 60};

    /* The fake saw the client's FIN: the notice was acted on, and the
     * connection is not closed yet. A client that never sends it fails
     * here rather than hanging the test. */
    if (atomic_load(&ctx.fake.left) < 1) {
        assert_true(rlt_mono_ms() - ctx.t0 < 3000);
        return;
    }
    for (int i = 5; i < 8; i++)
        assert_int_equal(submit(&req, i), RLC_OK);
    uv_close((uv_handle_t *)t, NULL);
}

static void test_goaway_unanswered(void **state)
{
    rlc_check_t req = {.key = "k", .limit = 1000, .window_s = 60};
    uv_timer_t t;
    int i;

    (void)state;
    setup_ctx();
    start_fake(FAKE_GOAWAY_DROP, 300);
    new_client(ctx.addr, 5000, RLC_FAIL_CLOSED);
    ctx.expect = 8;
    ctx.t0 = rlt_mono_ms();
    for (i = 0; i < 5; i++)
        assert_int_equal(submit(&req, i), RLC_OK);
    uv_timer_init(&ctx.loop, &t);
    uv_timer_start(&t, on_poll_left, 1, 1);
    finish_loop();
    assert_true(rlt_mono_ms() - ctx.t0 < 3000);
    assert_int_equal(ctx.calls, 8);
    for (i = 0; i < 5; i++)
        assert_int_equal(ctx.status[i], RLC_ECLOSED);
    for (i = 5; i < 8; i++)
        assert_int_equal(ctx.status[i], RLC_OK);
    assert_int_equal(ctx.connects, 2);
    assert_int_equal(ctx.disconnects, 1);
    fake_stop(&ctx.fake);
    assert_int_equal(atomic_load(&ctx.fake.conn_requests[0]), 5);
    assert_int_equal(atomic_load(&ctx.fake.conn_requests[1]), 3);
    assert_int_equal(atomic_load(&ctx.fake.partial), 0);
}

/* Freed while leaving a server (its write side closed, checks both on it
 * and waiting for the next connection): every check is cancelled once. */
static void on_free_leaving(uv_timer_t *t)
{
    rlc_check_t req = {.key = "k", .limit = 3, .window_s = 60};

    if (ctx.calls == 0 && rlc_async_inflight(ctx.c) == 10) {
        for (int i = 10; i < 15; i++)
            assert_int_equal(submit(&req, i), RLC_OK);
        return;
    }
    assert_int_equal(rlc_async_inflight(ctx.c), 15);
    rlc_async_free(ctx.c);
    assert_int_equal(ctx.calls, 15);
    for (int i = 0; i < 15; i++)
        assert_int_equal(ctx.status[i], RLC_ECANCELED);
    uv_close((uv_handle_t *)t, NULL);
}

static void test_goaway_free(void **state)
{
    rlc_check_t req = {.key = "k", .limit = 3, .window_s = 60};
    uv_timer_t t;
    int i;

    (void)state;
    setup_ctx();
    start_fake(FAKE_GOAWAY_STALL, 5000);
    new_client(ctx.addr, 5000, RLC_FAIL_CLOSED);
    ctx.expect = -1;
    for (i = 0; i < 10; i++)
        assert_int_equal(submit(&req, i), RLC_OK);
    uv_timer_init(&ctx.loop, &t);
    uv_timer_start(&t, on_free_leaving, 100, 50);
    finish_loop();
    assert_int_equal(ctx.calls, 15);
    assert_int_equal(ctx.errors, 15);
    assert_int_equal(ctx.connects, 1);
    assert_int_equal(ctx.disconnects, 0); /* freed: no state callback */
    fake_stop(&ctx.fake);
    assert_int_equal(atomic_load(&ctx.fake.notices), 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_many_in_flight),
        cmocka_unit_test(test_shadow_refused),
        cmocka_unit_test(test_out_of_order),
        cmocka_unit_test(test_partial_frames),
        cmocka_unit_test(test_closes_mid_flight),
        cmocka_unit_test(test_never_answers),
        cmocka_unit_test(test_reconnect_after_restart),
        cmocka_unit_test(test_free_with_inflight),
        cmocka_unit_test(test_free_inside_callback),
        cmocka_unit_test(test_no_server),
        cmocka_unit_test(test_address_list),
        cmocka_unit_test(test_closed_loop),
        cmocka_unit_test(test_misuse),
        cmocka_unit_test(test_goaway_in_flight),
        cmocka_unit_test(test_goaway_while_writing),
        cmocka_unit_test(test_goaway_unanswered),
        cmocka_unit_test(test_goaway_free),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
