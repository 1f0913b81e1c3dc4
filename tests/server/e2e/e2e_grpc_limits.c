/* rl-server's --grpc listener at its limits (grpc_fx.h): a body that
 * stalls, the cap on input memory, streams reset and connections hung up
 * mid-call, --max-connections (and whom it evicts), zero flow-control
 * windows against the output deadline and --max-output, streams that
 * never end, PINGs that are not activity, the idle timeout, a clean stop,
 * answers that come after their clients went, and HPACK floods beside
 * fair native clients. The well-behaved client on its own connection is
 * answered after every case on the shared server; cases that need other
 * limits start their own server, stopped by pid by their teardown. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "grpc_fx.h"

static void test_stalled_body(void **state)
{
    conn_t *k = dial(0);
    nghttp2_nv nv[] = {
        GRPC_REQUEST_NV,
    };
    static const uint8_t part[] = {0, 0, 0, 0, 40, 1, 2};
    uint64_t t0 = rlt_mono_ms();

    (void)state;
    h2r_headers(&k->c, 1, nv, 5, 0);
    h2r_frame(&k->c, NGHTTP2_DATA, 0, 1, part, sizeof(part));
    assert_true(wait_stream(&k->c, &k->e, 1));
    assert_int_equal(k->e.grpc[1], 4);
    assert_true(rlt_mono_ms() - t0 >= 400);
    hang_up(k);
    good_call();
}

/* Bodies held by all streams together are capped (--max-partial-bytes
 * 150000 here): the stream that would pass it is refused at once, the
 * ones before it are not. */
static void test_input_memory_cap(void **state)
{
    conn_t *k = dial(0);
    nghttp2_nv nv[] = {
        GRPC_REQUEST_NV,
    };
    static uint8_t chunk[16000];
    int32_t id;
    int i;
    uint64_t end;

    (void)state;
    /* Three streams of 48,000 bytes each (within the 65,535-byte stream
     * window and the 64 KiB message cap), none finished: 144,000 held;
     * a fourth's first 16,000 would pass 150,000. */
    for (id = 1; id <= 7; id += 2) {
        h2r_headers(&k->c, id, nv, 5, 0);
        for (i = 0; i < (id == 7 ? 1 : 3); i++)
            h2r_frame(&k->c, NGHTTP2_DATA, 0, id, chunk, sizeof(chunk));
    }
    end = rlt_mono_ms() + 3000;
    while (!k->e.done[7] && rlt_mono_ms() < end && !k->c.eof)
        h2r_pump(&k->c, 50);
    assert_true(k->e.done[7]);
    assert_int_equal(k->e.grpc[7], 8);
    assert_false(k->e.done[1] || k->e.done[3] || k->e.done[5]);
    hang_up(k);
    good_call();
}

static void test_reset_and_hang_up(void **state)
{
    const char *kv[] = {"database", "users"};
    size_t n;
    uint8_t *m = h2r_rls_request("mongo_cps", kv, 1, 0, &n);
    static const uint8_t cancel[4] = {0, 0, 0, 8};
    int i;

    (void)state;
    /* Streams reset right after their request, then connections that go
     * with calls in flight: answers that come later touch nothing. */
    for (i = 0; i < 20; i++) {
        conn_t *k = dial(0);
        int32_t id;
        for (id = 1; id < 16; id += 2) {
            h2r_grpc(&k->c, id, H2R_PATH, m, n, 0);
            if (i % 2 == 0)
                h2r_frame(&k->c, NGHTTP2_RST_STREAM, 0, id, cancel, 4);
        }
        h2r_pump(&k->c, 1);
        hang_up(k);
    }
    free(m);
    good_call();
}

/* Dials six connections and returns a mask of those the server ended
 * (GOAWAY and closed); all are hung up. */
static unsigned dial_six(uint32_t *code)
{
    conn_t *k[6];
    unsigned ended = 0;
    int i;

    for (i = 0; i < 6; i++) {
        k[i] = dial(0);
        /* Accepted (its SETTINGS came) before the next one dials. */
        uint64_t end = rlt_mono_ms() + 1000;
        while (rlt_mono_ms() < end && k[i]->c.settings == 0 && !k[i]->c.eof)
            h2r_pump(&k[i]->c, 50);
    }
    /* What came since: the evicted one's GOAWAY (well before the idle
     * timeout's). */
    for (i = 0; i < 6; i++)
        h2r_pump(&k[i]->c, 50);
    for (i = 0; i < 6; i++)
        if (k[i]->c.goaway > 0 && wait_eof(&k[i]->c)) {
            ended |= 1u << i;
            *code = k[i]->c.goaway_code;
        }
    for (i = 0; i < 6; i++)
        hang_up(k[i]);
    return ended;
}

static void test_connection_cap(void **state)
{
    uint64_t end = rlt_mono_ms() + 5000;
    unsigned ended;
    uint32_t code = 0;

    (void)state;
    /* 1 (the good client) + 6 > --max-connections 6: the seventh
     * connection evicts the one that has done least, the oldest of the
     * six (none has completed a request; the good client has), and none
     * is refused. Earlier tests' connections may still be on their way
     * out (and go first): try again until then. */
    while ((ended = dial_six(&code)) != 1u && rlt_mono_ms() < end)
        h2r_pump(&good, 100);
    assert_int_equal(ended, 1u);
    assert_int_equal(code, NGHTTP2_NO_ERROR);
    good_call();
}

/* Answers a client does not take (it announced a zero flow-control
 * window, so no DATA can go) are owed; past --frame-timeout-ms (500 ms
 * here) the connection is closed, with GOAWAY, and its memory freed. */
static void test_zero_window_deadline(void **state)
{
    conn_t *k = dial(1);
    nghttp2_settings_entry iv[1] = {{NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, 0}};
    int32_t id;

    (void)state;
    h2r_raw(&k->c, NGHTTP2_CLIENT_MAGIC, NGHTTP2_CLIENT_MAGIC_LEN);
    h2r_settings(&k->c, iv, 1);
    for (id = 1; id < 16; id += 2)
        call(k, id);
    assert_true(wait_eof(&k->c));
    assert_true(k->c.goaway >= 1);
    assert_int_equal(k->c.goaway_code, NGHTTP2_ENHANCE_YOUR_CALM);
    hang_up(k);
    assert_true(rlt_metric(mport, "rl_grpc_connections_closed_total"
                                  "{reason=\"output_timeout\"}") >= 1);
    good_call();
}

/* The same, on a server with --max-output 4096 and no deadline: the
 * fourth unsent answer (each counts its message and 1 KiB) passes the
 * cap and the connection is closed at once. */
static void test_zero_window_cap(void **state)
{
    nghttp2_settings_entry iv[1] = {{NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, 0}};
    rlt_fx_t *f = *state;
    rlt_server_t *srv = &f->srv[0];
    conn_t *k, *j;
    int32_t id;
    int st;

    rlt_fx_start(f, 0, "--max-output", "4096", "--frame-timeout-ms", "0",
                 "--idle-timeout", "0", NULL);
    k = calloc(1, sizeof(*k));
    assert_non_null(k);
    assert_int_equal(h2r_connect(&k->c, srv->gport, 1), 0);
    k->c.on_done = on_done;
    k->c.arg = &k->e;
    h2r_raw(&k->c, NGHTTP2_CLIENT_MAGIC, NGHTTP2_CLIENT_MAGIC_LEN);
    h2r_settings(&k->c, iv, 1);
    for (id = 1; id < 16; id += 2)
        call(k, id);
    assert_true(wait_eof(&k->c));
    assert_int_equal(k->c.goaway_code, NGHTTP2_ENHANCE_YOUR_CALM);
    hang_up(k);
    assert_int_equal(rlt_metric(srv->mport, "rl_grpc_connections_closed_total"
                                            "{reason=\"output\"}"),
                     1);
    assert_int_equal(rlt_metric(srv->mport, "rl_grpc_output_bytes"), 0);
    /* A client that reads is answered as before. */
    j = dial_to(srv->gport);
    call(j, 1);
    assert_true(wait_stream(&j->c, &j->e, 1));
    assert_int_equal(j->e.grpc[1], 0);
    hang_up(j);
    st = rlt_server_stop(srv);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0);
}

/* A stream that sends HEADERS and never ends its request is answered
 * (DEADLINE_EXCEEDED after --frame-timeout-ms) and then reset, NO_ERROR:
 * it does not stay open, and its connection goes idle after
 * --idle-timeout (1 s) like any other. */
static void test_headers_only_stream(void **state)
{
    conn_t *k = dial(0);
    nghttp2_nv nv[] = {
        GRPC_REQUEST_NV,
    };

    (void)state;
    h2r_headers(&k->c, 1, nv, 5, 0);
    assert_true(wait_stream(&k->c, &k->e, 1));
    assert_int_equal(k->e.grpc[1], 4);
    assert_true(wait_eof(&k->c));
    assert_true(k->e.reset[1]);
    assert_int_equal(k->e.rst[1], NGHTTP2_NO_ERROR);
    assert_true(k->c.goaway >= 1);
    assert_int_equal(k->c.goaway_code, NGHTTP2_NO_ERROR);
    hang_up(k);
    good_call();
}

/* PINGs are not requests: a connection that only pings (every 200 ms) is
 * closed after --idle-timeout (1 s) all the same. */
static void test_ping_is_not_activity(void **state)
{
    conn_t *k = dial(0);
    uint64_t end = rlt_mono_ms() + 6000;

    (void)state;
    while (!k->c.eof && rlt_mono_ms() < end) {
        uint64_t next = rlt_mono_ms() + 200;
        h2r_ping(&k->c);
        while (!k->c.eof && rlt_mono_ms() < next)
            h2r_pump(&k->c, 50);
    }
    assert_true(k->c.eof);
    assert_true(k->c.goaway >= 1);
    assert_int_equal(k->c.goaway_code, NGHTTP2_NO_ERROR);
    hang_up(k);
    good_call();
}

/* --max-connections (4) full of connections that opened a stream with
 * HEADERS only: a new client is served. It evicts the oldest connection
 * that never completed a request, not an older one that did. */
static void test_cap_evicts_least(void **state)
{
    nghttp2_nv nv[] = {
        GRPC_REQUEST_NV,
    };
    rlt_fx_t *f = *state;
    rlt_server_t *srv = &f->srv[0];
    conn_t *k[5];
    int i, st;

    rlt_fx_start(f, 0, "--max-connections", "4", "--frame-timeout-ms", "60000",
                 "--idle-timeout", "60", NULL);
    /* k[0] completes a call; k[1..3] each open a stream and stall. */
    for (i = 0; i < 4; i++) {
        k[i] = dial_to(srv->gport);
        if (i == 0)
            call(k[i], 1);
        else
            h2r_headers(&k[i]->c, 1, nv, 5, 0);
        ready(k[i]);
        if (i == 0) {
            assert_true(wait_stream(&k[0]->c, &k[0]->e, 1));
            assert_int_equal(k[0]->e.grpc[1], 0);
        }
    }
    /* Full: the new one is served... */
    k[4] = dial_to(srv->gport);
    call(k[4], 1);
    assert_true(wait_stream(&k[4]->c, &k[4]->e, 1));
    assert_int_equal(k[4]->e.grpc[1], 0);
    assert_int_equal(k[4]->c.goaway, 0);
    /* ...in place of k[1]. */
    assert_true(wait_eof(&k[1]->c));
    assert_int_equal(k[1]->c.goaway_code, NGHTTP2_NO_ERROR);
    for (i = 2; i < 4; i++) {
        h2r_pump(&k[i]->c, 50);
        assert_false(k[i]->c.eof);
    }
    call(k[0], 3);
    assert_true(wait_stream(&k[0]->c, &k[0]->e, 3));
    assert_int_equal(k[0]->e.grpc[3], 0);
    assert_int_equal(rlt_metric(srv->mport, "rl_grpc_connections_closed_total"
                                            "{reason=\"evicted\"}"),
                     1);
    assert_int_equal(
        rlt_metric(srv->mport, "rl_grpc_connections_refused_total"), 0);
    for (i = 0; i < 5; i++)
        hang_up(k[i]);
    st = rlt_server_stop(srv);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0);
}

static void test_idle_timeout(void **state)
{
    conn_t *k = dial(0);
    uint64_t t0 = rlt_mono_ms();

    (void)state;
    /* --idle-timeout 1: GOAWAY and close within a sweep or two. */
    assert_true(wait_eof(&k->c));
    assert_true(k->c.goaway >= 1);
    assert_true(rlt_mono_ms() - t0 >= 900);
    hang_up(k);
    good_call();
}

/* Answers that come after their streams and connections went: with
 * Redis paused, calls are read and sent to the store, their clients reset
 * the streams or hang up, and only then does Redis answer. The server must
 * free what it held without touching it after (ASan would abort it, and
 * its exit status would not be 0). */
static void test_late_answers_redis(void **state)
{
    rlt_fx_t *f = *state;
    rlt_redis_t *redis = &f->redis;
    rlt_server_t *srv = &f->srv[0];
    char ra[32], page[65536];
    const char *kv[] = {"database", "users"};
    static const uint8_t cancel[4] = {0, 0, 0, 8};
    conn_t *k[5];
    size_t n;
    uint8_t *m = h2r_rls_request("mongo_cps", kv, 1, 0, &n);
    int gport, i, st;
    uint64_t end;
    long long open = -1;

    if (rlt_redis_start(redis) != 0)
        skip();
    f->redis_on = 1;
    snprintf(ra, sizeof(ra), "127.0.0.1:%d", redis->port);
    rlt_fx_start(f, 0, "--redis", ra, "--redis-timeout-ms", "5000",
                 "--log-level", "error", NULL);
    gport = srv->gport;
    /* Wait for the store: /healthz 200. */
    end = rlt_mono_ms() + 5000;
    while (rlt_mono_ms() < end &&
           rlt_http_get(srv->mport, "/healthz", page, sizeof(page)) != 200)
        ;
    rlt_redis_pause(redis, 1);
    for (i = 0; i < 5; i++) {
        int32_t id;
        k[i] = calloc(1, sizeof(*k[i]));
        assert_non_null(k[i]);
        assert_int_equal(h2r_connect(&k[i]->c, gport, 0), 0);
        for (id = 1; id < 16; id += 2) {
            h2r_grpc(&k[i]->c, id, H2R_PATH, m, n, 0);
            if (i % 2 == 0 && id > 8)
                h2r_frame(&k[i]->c, NGHTTP2_RST_STREAM, 0, id, cancel, 4);
        }
        h2r_pump(&k[i]->c, 50);
    }
    for (i = 0; i < 5; i++)
        hang_up(k[i]);
    /* The server has seen them all go, with their calls still at Redis. */
    end = rlt_mono_ms() + 5000;
    while (rlt_mono_ms() < end && open != 0) {
        if (rlt_http_get(srv->mport, "/metrics", page, sizeof(page)) == 200)
            open = rlt_sample(page, "rl_grpc_connections_open");
    }
    assert_int_equal(open, 0);
    assert_true(rlt_sample(page, "rl_requests_batched_total") >= 40);
    rlt_redis_pause(redis, 0);
    free(m);
    st = rlt_server_stop(srv);
    rlt_redis_stop(redis);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0);
}

/* HPACK amplification on one gRPC connection (a new one whenever the
 * server ends it): blocks that insert a 4,000-byte header and refer to it
 * 124,000 times, one byte each, sent as fast as the server takes them.
 * Meanwhile a native client's checks, on Redis with a 150 ms timeout (a
 * healthy round trip is well under 1 ms; one read of the attack used to
 * stall the loop for about 250 ms, long enough for Redis to time out
 * behind it), must all be answered by the store, none by the fail mode;
 * and the attack must have been taken in (its streams reset, its
 * connections ended). */
static void test_hpack_flood_fairness(void **state)
{
    rlt_fx_t *f = *state;
    rlt_redis_t *redis = &f->redis;
    rlt_server_t *srv = &f->srv[0];
    char ra[32];
    h2r_t atk;
    int up = 0, fd, answers = 0, blocks = 0, i;
    int32_t id = 1;
    uint64_t end;

    if (rlt_redis_start(redis) != 0)
        skip();
    f->redis_on = 1;
    snprintf(ra, sizeof(ra), "127.0.0.1:%d", redis->port);
    rlt_fx_start(f, 0, "--redis", ra, "--redis-timeout-ms", "150", NULL);
    /* The store is up before the attack starts. */
    end = rlt_mono_ms() + 5000;
    while (rlt_mono_ms() < end && rlt_metric(srv->mport, "rl_store_up") != 1)
        ;
    fd = rlt_dial(srv->port);
    assert_true(fd >= 0);
    memset(&atk, 0, sizeof(atk));
    atk.fd = -1;
    end = rlt_mono_ms() + 30000;
    while ((answers < 100 || blocks < 24) && rlt_mono_ms() < end) {
        struct pollfd pf;
        rl_check_t q;
        rlt_result_t r;
        char key[32];

        if (!up) {
            assert_int_equal(h2r_connect(&atk, srv->gport, 0), 0);
            up = 1;
            id = 1;
        }
        if (atk.out_len == 0) {
            assert_int_equal(
                h2r_bomb(&atk, id, 4000, 12000 + 7 * 16000, 16000, 1, 0), 0);
            id += 2;
            blocks++;
        }
        /* As much as the socket takes, without waiting. */
        for (i = 0; i < 8 && up; i++) {
            pf.fd = atk.fd;
            pf.events = POLLIN | POLLOUT;
            pf.revents = 0;
            if (poll(&pf, 1, 0) > 0 && h2r_io(&atk, pf.revents) != 0) {
                h2r_close(&atk);
                up = 0;
            }
        }
        snprintf(key, sizeof(key), "fair:%d", answers);
        q = rlt_check((uint64_t)answers + 1, key, 1000000, 60, 1);
        assert_int_equal(rlt_exchange(fd, &q, 1, &r), 0);
        assert_int_equal(r.r.code, RL_CODE_OK);
        assert_string_equal(r.err, "");
        answers++;
    }
    if (up)
        h2r_close(&atk);
    close(fd);
    assert_true(answers >= 100);
    assert_true(blocks >= 24);
    assert_int_equal(rlt_metric(srv->mport, "rl_failed_open_total"), 0);
    assert_true(rlt_metric(srv->mport, "rl_grpc_streams_oversized_total") >= 1);
    assert_true(rlt_metric(srv->mport, "rl_grpc_connections_closed_total"
                                       "{reason=\"headers\"}") >= 1);
    i = rlt_server_stop(srv);
    rlt_redis_stop(redis);
    assert_true(WIFEXITED(i));
    assert_int_equal(WEXITSTATUS(i), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_stalled_body),
        cmocka_unit_test(test_input_memory_cap),
        cmocka_unit_test(test_reset_and_hang_up),
        cmocka_unit_test(test_connection_cap),
        cmocka_unit_test(test_zero_window_deadline),
        cmocka_unit_test(test_headers_only_stream),
        cmocka_unit_test(test_ping_is_not_activity),
        cmocka_unit_test(test_idle_timeout),
        cmocka_unit_test(test_stop_clean),
        RLT_FX_TEST(test_late_answers_redis),
        RLT_FX_TEST(test_zero_window_cap),
        RLT_FX_TEST(test_cap_evicts_least),
        RLT_FX_TEST(test_hpack_flood_fairness),
    };

    grpc_init();
    return cmocka_run_group_tests(tests, grpc_setup, grpc_teardown);
}
