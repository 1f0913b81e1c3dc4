/* rl-server's --grpc listener under bad input: each case with the gRPC
 * status or GOAWAY it must get, and a well-behaved client on its own
 * connection answered after every one. Frames are written raw
 * (tests/support/h2raw.c) so that a case can send what no HTTP/2 library
 * would; the server is a real process, stopped by pid. */
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

#include "h2raw.h"
#include "rlt.h"
#include "rlt_fx.h"

#ifndef RL_SERVER_BIN
#error "RL_SERVER_BIN must name the rl-server binary"
#endif
#ifndef RL_FIXTURES
#error "RL_FIXTURES must name tests/server/e2e/envoy"
#endif


/* The five header fields of a gRPC call to the rate limit service, as
 * Envoy sends them: the start of every hand-made request below. */
#define GRPC_REQUEST_NV                                                        \
    {(uint8_t *)":method", (uint8_t *)"POST", 7, 4, 0},                        \
    {(uint8_t *)":scheme", (uint8_t *)"http", 7, 4, 0},                        \
    {(uint8_t *)":path", (uint8_t *)H2R_PATH, 5, sizeof(H2R_PATH) - 1, 0},     \
    {(uint8_t *)":authority", (uint8_t *)"rl", 10, 2, 0},                      \
    {(uint8_t *)"content-type", (uint8_t *)"application/grpc", 12, 16, 0}

/* The server every test shares, and its well-behaved client. */
static rlt_fx_t group;
static int port, mport;
static h2r_t good;
static int32_t good_id = 1;

/* What the streams of one connection ended with, by stream id: the
 * answer (grpc -1 and http 0: none), and whether and how the server
 * reset the stream, before its answer or after it. */
#define MAXS 4096
typedef struct {
    int grpc[MAXS];
    int http[MAXS];
    uint32_t rst[MAXS];
    int reset[MAXS];
    int done[MAXS];
    int ndone;
} ends_t;

static void on_done(void *arg, int32_t id, int grpc, int http, uint32_t rst)
{
    ends_t *e = arg;

    if (id <= 0 || id >= MAXS)
        return;
    if (grpc == -1 && http == 0) {
        /* RST_STREAM; after an answer (a stream the client had not
         * finished) it keeps the answer. */
        e->reset[id] = 1;
        e->rst[id] = rst;
        if (e->done[id])
            return;
    }
    e->grpc[id] = grpc;
    e->http[id] = http;
    if (!e->done[id]) {
        e->done[id] = 1;
        e->ndone++;
    }
}

/* Pumps c until stream id ended, the connection ended, or 5 s. */
static int wait_stream(h2r_t *c, ends_t *e, int32_t id)
{
    uint64_t end = rlt_mono_ms() + 5000;

    while (!e->done[id] && rlt_mono_ms() < end)
        if (h2r_pump(c, 50) != 0)
            break;
    return e->done[id];
}

/* Pumps c until the server closed it (end of file) or 5 s. */
static int wait_eof(h2r_t *c)
{
    uint64_t end = rlt_mono_ms() + 5000;

    while (!c->eof && rlt_mono_ms() < end)
        h2r_pump(c, 50);
    return c->eof;
}

static ends_t good_ends;

/* Connects the good client afresh. */
static void good_connect(void)
{
    if (good.def != NULL)
        h2r_close(&good);
    memset(&good_ends, 0, sizeof(good_ends));
    assert_int_equal(h2r_connect(&good, port, 0), 0);
    good.on_done = on_done;
    good.arg = &good_ends;
    good_id = 1;
}

/* The well-behaved client: one call on its long-lived connection. */
static void good_call(void)
{
    const char *kv[] = {"database", "unlisted"};
    size_t n;
    uint8_t *m = h2r_rls_request("mongo_cps", kv, 1, 0, &n);
    int32_t id;
    int tries;

    assert_non_null(m);
    h2r_pump(&good, 0);
    for (tries = 0; tries < 2; tries++) {
        if (good.goaway > 0 || good.eof) {
            /* Only --idle-timeout may end the good client's connection,
             * and it does so with NO_ERROR: reconnect. */
            assert_int_equal(good.goaway_code, NGHTTP2_NO_ERROR);
            good_connect();
        }
        id = good_id;
        good_id += 2;
        assert_int_equal(h2r_grpc(&good, id, H2R_PATH, m, n, 0), 0);
        if (wait_stream(&good, &good_ends, id))
            break;
        /* The idle timeout's GOAWAY crossed the call (the server ignores
         * what comes after it): once more, on a new connection. */
        assert_true(good.goaway > 0 || good.eof);
    }
    free(m);
    assert_true(good_ends.done[id]);
    assert_int_equal(good_ends.grpc[id], 0);
}

static int setup(void **state)
{
    (void)state;
    rlt_fx_init(&group);
    rlt_fx_start(&group, 0, "--grpc-max-streams", "8", "--idle-timeout", "1",
                 "--max-connections", "6", "--frame-timeout-ms", "500",
                 "--max-partial-bytes", "150000", NULL);
    port = group.srv[0].gport;
    mport = group.srv[0].mport;
    memset(&good_ends, 0, sizeof(good_ends));
    if (h2r_connect(&good, port, 0) != 0)
        return -1;
    good.on_done = on_done;
    good.arg = &good_ends;
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    if (good.def != NULL)
        h2r_close(&good);
    rlt_fx_release(&group);
    return 0;
}

/* One raw connection with its stream results. */
typedef struct {
    h2r_t c;
    ends_t e;
} conn_t;

static conn_t *dial(int raw)
{
    conn_t *k = calloc(1, sizeof(*k));

    assert_non_null(k);
    assert_int_equal(h2r_connect(&k->c, port, raw), 0);
    k->c.on_done = on_done;
    k->c.arg = &k->e;
    return k;
}

static void hang_up(conn_t *k)
{
    h2r_close(&k->c);
    free(k);
}

/* Pumps k until the server's SETTINGS came and our ACK went out: after
 * this nothing the client queues on its own can cut into a header block
 * the test leaves open. */
static void ready(conn_t *k)
{
    uint64_t end = rlt_mono_ms() + 5000;

    while ((k->c.settings == 0 || k->c.out_len > 0) && !k->c.eof &&
           rlt_mono_ms() < end)
        h2r_pump(&k->c, 50);
    assert_true(k->c.settings > 0);
    assert_int_equal(k->c.out_len, 0);
}

/* Queues a valid call (answered OK by the store) on stream id. */
static void call(conn_t *k, int32_t id)
{
    const char *kv[] = {"database", "unlisted"};
    size_t n;
    uint8_t *m = h2r_rls_request("mongo_cps", kv, 1, 0, &n);

    assert_non_null(m);
    assert_int_equal(h2r_grpc(&k->c, id, H2R_PATH, m, n, 0), 0);
    free(m);
}

/* Opens a connection to the port of another server. */
static conn_t *dial_to(int p)
{
    conn_t *k = calloc(1, sizeof(*k));

    assert_non_null(k);
    assert_int_equal(h2r_connect(&k->c, p, 0), 0);
    k->c.on_done = on_done;
    k->c.arg = &k->e;
    return k;
}

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
    m = h2r_rls_request("", kv, 1, 0, &n);
    assert_int_equal(one_call(H2R_PATH, m, n, 0, NULL), 3);
    free(m);
    m = h2r_rls_request("mongo_cps", kv, 0, 0, &n);
    assert_int_equal(one_call(H2R_PATH, m, n, 0, NULL), 3);
    free(m);
    m = h2r_rls_request("mongo_cps", empty_key, 1, 0, &n);
    assert_int_equal(one_call(H2R_PATH, m, n, 0, NULL), 3);
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

/* Request bodies that stall: each answered DEADLINE_EXCEEDED after
 * --frame-timeout-ms, its buffer freed. */
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

static void test_stop_clean(void **state)
{
    int st;

    (void)state;
    good_call();
    st = rlt_stop(group.srv[0].pid, SIGTERM, 10000);
    group.srv[0].pid = -1;
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0);
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
    static char fix[512];
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

    signal(SIGPIPE, SIG_IGN);
    /* Every server: --grpc with the mongo_cps descriptors, --metrics. */
    snprintf(fix, sizeof(fix), "%s/mongo_cps.yaml", RL_FIXTURES);
    rlt_fx_use(&(rlt_fx_conf_t){.bin = RL_SERVER_BIN,
                                .log_level = "warn",
                                .args = (char *[]){"--grpc", "127.0.0.1:0",
                                                   "--envoy-config", fix, NULL},
                                .metrics = 1});
    /* RLT_FILTER=test_name (a glob) runs only matching tests. */
    if (getenv("RLT_FILTER") != NULL)
        cmocka_set_test_filter(getenv("RLT_FILTER"));
    return cmocka_run_group_tests(tests, setup, teardown);
}
