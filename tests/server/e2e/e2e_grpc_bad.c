/* rl-server's --grpc listener under bad input (grpc_fx.h): a preface
 * that is not HTTP/2, frames where they may not be, stream floods,
 * oversized and amplified headers, messages too big, compressed or
 * malformed, unknown methods, bad framing; each case with the gRPC status
 * or GOAWAY it must get, and the well-behaved client on its own
 * connection answered after every one. Frames are written raw so that a
 * case can send what no HTTP/2 library would; the server is a real
 * process, stopped by pid. The connection's limits and deadlines are
 * e2e_grpc_limits.c. */
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
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "grpc_fx.h"

/* A call on a fresh connection; returns its grpc-status (-1: none), with
 * the HTTP status in *http. */
static int one_call(const char *path, const uint8_t *msg, size_t n,
                    uint8_t flag, int *http)
{
    conn_t *k = dial(0);
    int g;

    assert_int_equal(h2r_grpc(&k->c, 1, path, msg, n, flag), 0);
    assert_true(wait_stream(&k->c, &k->e, 1));
    g = k->e.grpc[1];
    if (http != NULL)
        *http = k->e.http[1];
    hang_up(k);
    return g;
}

static void test_not_http2(void **state)
{
    static const char req[] = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
    conn_t *k = dial(1);

    (void)state;
    h2r_raw(&k->c, req, sizeof(req) - 1);
    /* The preface is wrong: GOAWAY (maybe) and the connection ends. */
    assert_true(wait_eof(&k->c));
    hang_up(k);
    good_call();
}

static void test_data_on_stream_0(void **state)
{
    conn_t *k = dial(0);

    (void)state;
    h2r_frame(&k->c, NGHTTP2_DATA, 0, 0, "xxxx", 4);
    assert_true(wait_eof(&k->c));
    assert_true(k->c.goaway >= 1);
    assert_int_equal(k->c.goaway_code, NGHTTP2_PROTOCOL_ERROR);
    hang_up(k);
    good_call();
}

static void test_stream_flood(void **state)
{
    conn_t *k = dial(0);
    nghttp2_nv nv[] = {
        GRPC_REQUEST_NV,
    };
    int32_t id;
    int refused = 0;
    uint64_t end;

    (void)state;
    /* 200 streams opened at once, none finished: over the 8 allowed. */
    for (id = 1; id < 400; id += 2)
        h2r_headers(&k->c, id, nv, 5, 0);
    end = rlt_mono_ms() + 3000;
    while (rlt_mono_ms() < end && !k->c.eof && k->c.goaway == 0 &&
           k->e.ndone < 150)
        h2r_pump(&k->c, 50);
    for (id = 1; id < 400; id += 2)
        refused += k->e.rst[id] == NGHTTP2_REFUSED_STREAM;
    /* Refused stream by stream, or the connection ended with GOAWAY. */
    assert_true(refused >= 150 || k->c.goaway > 0);
    hang_up(k);
    good_call();
}

/* A header list over 8 KiB resets its stream at once: here it comes from
 * HPACK references to one 4,000-byte header, and the server resets the
 * stream while the block is still open (it has not seen END_HEADERS),
 * rather than decode all of it and answer. The connection goes on; the
 * second such stream ends it (GOAWAY ENHANCE_YOUR_CALM). */
static void test_huge_headers(void **state)
{
    conn_t *k = dial(0);

    (void)state;
    ready(k);
    assert_int_equal(h2r_bomb(&k->c, 1, 4000, 3, 16000, 0, 1), 0);
    assert_true(wait_stream(&k->c, &k->e, 1));
    assert_true(k->e.reset[1]);
    assert_int_equal(k->e.rst[1], NGHTTP2_INTERNAL_ERROR);
    assert_int_equal(k->e.grpc[1], -1);
    assert_int_equal(k->c.goaway, 0);
    /* The block ends (HPACK stays in step); a call on the connection is
     * answered. */
    assert_int_equal(h2r_bomb_more(&k->c, 1, 1000, 1), 0);
    call(k, 3);
    assert_true(wait_stream(&k->c, &k->e, 3));
    assert_int_equal(k->e.grpc[3], 0);
    /* Again: the connection ends. */
    assert_int_equal(h2r_bomb(&k->c, 5, 4000, 12000 + 7 * 16000, 16000, 1, 0),
                     0);
    assert_true(wait_eof(&k->c));
    assert_true(k->c.goaway >= 1);
    assert_int_equal(k->c.goaway_code, NGHTTP2_ENHANCE_YOUR_CALM);
    assert_false(k->e.done[5] && k->e.grpc[5] != -1);
    hang_up(k);
    assert_true(rlt_metric(mport, "rl_grpc_streams_oversized_total") >= 2);
    assert_true(rlt_metric(mport, "rl_grpc_connections_closed_total"
                                  "{reason=\"headers\"}") >= 1);
    good_call();
}

/* Header lists that fill a round's decode budget (64 KiB) exactly: eight
 * streams of 8,192 bytes each (RFC 9113's size, the limit), sent in one
 * write. The server pauses nghttp2 at the last header of the eighth,
 * which ends the read; that stream must still be answered, without the
 * client sending anything more. */
static void test_decode_budget_edge(void **state)
{
    conn_t *k = dial(0);
    static char pad[8192];
    /* 287 bytes of request fields, the pad field the rest of 8,192. */
    size_t padlen = 8192 - 287 - (5 + 32);
    nghttp2_nv nv[] = {
        GRPC_REQUEST_NV,
        {(uint8_t *)"x-pad", (uint8_t *)pad, 5, padlen, 0},
    };
    int32_t id;

    (void)state;
    memset(pad, 'p', sizeof(pad));
    ready(k);
    for (id = 1; id <= 15; id += 2)
        h2r_headers(&k->c, id, nv, 6, 1);
    for (id = 1; id <= 15; id += 2) {
        assert_true(wait_stream(&k->c, &k->e, id));
        /* No message: INTERNAL, but answered. */
        assert_int_equal(k->e.grpc[id], 13);
    }
    hang_up(k);
    good_call();
}

static void test_big_message(void **state)
{
    uint8_t *m = calloc(1, 70000);

    (void)state;
    assert_non_null(m);
    assert_int_equal(one_call(H2R_PATH, m, 70000, 0, NULL), 8);
    free(m);
    good_call();
}

static void test_compressed(void **state)
{
    const char *kv[] = {"database", "users"};
    size_t n;
    uint8_t *m = h2r_rls_request("mongo_cps", kv, 1, 0, &n);

    (void)state;
    /* Compressed flag without grpc-encoding: INTERNAL (gRPC's rule). */
    assert_int_equal(one_call(H2R_PATH, m, n, 1, NULL), 13);
    /* A flag byte that is neither 0 nor 1. */
    assert_int_equal(one_call(H2R_PATH, m, n, 7, NULL), 13);
    free(m);
    good_call();
}

static void test_unknown_method(void **state)
{
    const char *kv[] = {"database", "users"};
    size_t n;
    uint8_t *m = h2r_rls_request("mongo_cps", kv, 1, 0, &n);

    (void)state;
    assert_int_equal(
        one_call("/envoy.service.ratelimit.v3.RateLimitService/Nope", m, n, 0,
                 NULL),
        12);
    assert_int_equal(one_call("/other.Service/ShouldRateLimit", m, n, 0, NULL),
                     12);
    free(m);
    good_call();
}

static void test_invalid_argument(void **state)
{
    const char *kv[] = {"database", "users"};
    const char *empty_key[] = {"", "x"};
    size_t n;
    uint8_t *m;

    (void)state;
    /* envoy-ratelimit's statuses: UNKNOWN (its Go error) for an empty
     * domain or descriptor list; an empty key matches nothing and is
     * answered. */
    m = h2r_rls_request("", kv, 1, 0, &n);
    assert_int_equal(one_call(H2R_PATH, m, n, 0, NULL), 2);
    free(m);
    m = h2r_rls_request("mongo_cps", kv, 0, 0, &n);
    assert_int_equal(one_call(H2R_PATH, m, n, 0, NULL), 2);
    free(m);
    m = h2r_rls_request("mongo_cps", empty_key, 1, 0, &n);
    assert_int_equal(one_call(H2R_PATH, m, n, 0, NULL), 0);
    free(m);
    /* Not a RateLimitRequest at all: INTERNAL, as gRPC does for a
     * message that does not parse. */
    assert_int_equal(
        one_call(H2R_PATH, (const uint8_t *)"\xff\xff\xff", 3, 0, NULL), 13);
    good_call();
}

static void test_bad_framing(void **state)
{
    conn_t *k = dial(0);
    nghttp2_nv nv[] = {
        GRPC_REQUEST_NV,
    };
    static const uint8_t truncated[] = {0, 0, 0, 0, 50, 1, 2, 3};
    int http = 0;

    (void)state;
    /* Declares 50 bytes, sends 3, ends the stream: INTERNAL. */
    h2r_headers(&k->c, 1, nv, 5, 0);
    h2r_frame(&k->c, NGHTTP2_DATA, NGHTTP2_FLAG_END_STREAM, 1, truncated,
              sizeof(truncated));
    /* No body at all. */
    h2r_headers(&k->c, 3, nv, 5, 1);
    assert_true(wait_stream(&k->c, &k->e, 1));
    assert_true(wait_stream(&k->c, &k->e, 3));
    assert_int_equal(k->e.grpc[1], 13);
    assert_int_equal(k->e.grpc[3], 13);
    hang_up(k);
    /* Not gRPC: HTTP 415. */
    {
        conn_t *j = dial(0);
        nghttp2_nv nv2[] = {
            {(uint8_t *)":method", (uint8_t *)"POST", 7, 4, 0},
            {(uint8_t *)":scheme", (uint8_t *)"http", 7, 4, 0},
            {(uint8_t *)":path", (uint8_t *)H2R_PATH, 5, strlen(H2R_PATH), 0},
            {(uint8_t *)":authority", (uint8_t *)"rl", 10, 2, 0},
            {(uint8_t *)"content-type", (uint8_t *)"text/plain", 12, 10, 0},
        };
        h2r_headers(&j->c, 1, nv2, 5, 1);
        assert_true(wait_stream(&j->c, &j->e, 1));
        http = j->e.http[1];
        hang_up(j);
    }
    assert_int_equal(http, 415);
    good_call();
}

/* The sum of the statsd counter `name`'s deltas read from statsd_fd until
 * it reaches want or 5 s pass. */
static long long statsd_sum(const char *name, long long want)
{
    uint64_t end = rlt_mono_ms() + 5000;
    size_t n = strlen(name);
    long long sum = 0;
    char buf[2048];

    while (sum < want && rlt_mono_ms() < end) {
        struct pollfd p = {statsd_fd, POLLIN, 0};
        ssize_t got;
        char *line, *save = NULL;
        if (poll(&p, 1, 100) <= 0)
            continue;
        if ((got = recv(statsd_fd, buf, sizeof(buf) - 1, 0)) <= 0)
            continue;
        buf[got] = '\0';
        for (line = strtok_r(buf, "\n", &save); line != NULL;
             line = strtok_r(NULL, "\n", &save))
            if (strncmp(line, name, n) == 0 && line[n] == ':' &&
                strstr(line + n, "|c") != NULL)
                sum += strtoll(line + n + 1, NULL, 10);
    }
    return sum;
}

/* envoy-ratelimit's statistics on /metrics after three calls of 200 hits
 * on database=users (500 a second), sent together: total_hits counts them
 * all; the third is refused with 100 hits over and 100 near, unless the
 * second turned between the calls (then all within). */
static void test_descriptor_stats(void **state)
{
    static const char pre[] = "rl_envoy_rate_limit_";
    static const char lab[] =
        "_total{domain=\"mongo_cps\",key=\"database_users\"}";
    const char *kv[] = {"database", "users"};
    conn_t *k = dial(0);
    char name[160], page[1 << 16];
    long long v[3];
    size_t n;
    uint8_t *m = h2r_rls_request("mongo_cps", kv, 1, 200, &n);
    int32_t id;
    int i;

    (void)state;
    for (id = 1; id <= 5; id += 2)
        assert_int_equal(h2r_grpc(&k->c, id, H2R_PATH, m, n, 0), 0);
    for (id = 1; id <= 5; id += 2)
        assert_true(wait_stream(&k->c, &k->e, id));
    free(m);
    hang_up(k);
    assert_int_equal(rlt_http_get(mport, "/metrics", page, sizeof(page)), 200);
    for (i = 0; i < 3; i++) {
        static const char *const stat[] = {"total_hits", "within_limit",
                                           "over_limit"};
        snprintf(name, sizeof(name), "%s%s%s", pre, stat[i], lab);
        v[i] = rlt_sample(page, name);
    }
    assert_int_equal(v[0], 600);
    assert_true((v[1] == 400 && v[2] == 100) || (v[1] == 600 && v[2] == 0));
    /* The same through --statsd, under the reference's own name. */
    assert_int_equal(statsd_sum("ratelimit.service.rate_limit.mongo_cps."
                                "database_users.total_hits",
                                600),
                     600);
    good_call();
}

/* Request bodies that stall: each answered DEADLINE_EXCEEDED after
 * --frame-timeout-ms, its buffer freed. */

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_not_http2),
        cmocka_unit_test(test_data_on_stream_0),
        cmocka_unit_test(test_stream_flood),
        cmocka_unit_test(test_huge_headers),
        cmocka_unit_test(test_decode_budget_edge),
        cmocka_unit_test(test_big_message),
        cmocka_unit_test(test_compressed),
        cmocka_unit_test(test_unknown_method),
        cmocka_unit_test(test_invalid_argument),
        cmocka_unit_test(test_bad_framing),
        cmocka_unit_test(test_descriptor_stats),
        cmocka_unit_test(test_stop_clean),
    };

    grpc_init();
    return cmocka_run_group_tests(tests, grpc_setup, grpc_teardown);
}
