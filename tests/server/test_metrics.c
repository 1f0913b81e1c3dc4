/* The --metrics listener, in process: a real rl-server (memory store, or
 * Redis for the health test) runs on its loop in a second thread while this
 * thread talks HTTP to it over loopback with plain blocking sockets, the way
 * Prometheus or HAProxy would. The loop thread is stopped through a
 * uv_async handle (rls_server_stop runs on the loop's own thread), and each
 * test ends by checking that uv_loop_close() succeeds: every handle the
 * listener opened was closed. Every wait has a deadline. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <uv.h>

#include "rl_error.h"
#include "rl_frame.h"
#include "rl_msg.h"
#include "net/http.h"
#include "server.h"
#include "store/memory.h"
#include "store/redis.h"
#include "rlt.h"
#include "inproc.h"

#define IDLE_MS 300
#define MAX_CONNS 4

/* Starts rl-server with --metrics on free loopback ports, its loop in a
 * thread. redis: use the fixture's Redis. The listener gets the given idle
 * limit, cap and header deadline. */
static void start_limits(inproc_t *f, int redis, uint64_t drain_ms,
                         uint64_t idle_ms, unsigned max_conns, uint64_t head_ms)
{
    rls_store_t *st;

    rls_flags_defaults(&f->cfg);
    /* Port 0: the system picks; the server says which it bound. */
    f->cfg.listen_port = 0;
    strcpy(f->cfg.metrics_host, "127.0.0.1");
    f->cfg.metrics_port = 0;
    f->cfg.drain_ms = drain_ms;
    assert_int_equal(uv_loop_init(&f->loop), 0);
    if (redis) {
        rls_redis_opts_t ro;
        memset(&ro, 0, sizeof(ro));
        ro.host = "127.0.0.1";
        ro.port = f->redis.port;
        ro.timeout_ms = 200;
        ro.grace_ms = 1000;
        f->cfg.use_redis = 1;
        strcpy(f->cfg.redis_host, "127.0.0.1");
        f->cfg.redis_port = f->redis.port;
        st = rls_store_redis_new(&f->loop, &ro);
    } else {
        st = rls_store_memory_new(&f->loop);
    }
    assert_non_null(st);
    assert_int_equal(rls_server_start(&f->srv, &f->loop, &f->cfg, st, NULL,
                                      f->err, sizeof(f->err)),
                     0);
    f->port = rls_server_port(&f->srv, RLS_LISTENER_NATIVE);
    f->mport = rls_server_port(&f->srv, RLS_LISTENER_METRICS);
    assert_true(f->port > 0 && f->mport > 0 && f->port != f->mport);
    /* Before the loop thread starts: the limits belong to the loop. */
    rls_http_server_set_limits(f->srv.admin.http, idle_ms, max_conns);
    rls_http_server_set_head_ms(f->srv.admin.http, head_ms);
    inproc_run(f);
}

static void start_idle(inproc_t *f, int redis, uint64_t drain_ms,
                       uint64_t idle_ms)
{
    start_limits(f, redis, drain_ms, idle_ms, MAX_CONNS, RLS_HTTP_HEAD_MS);
}

static void start(inproc_t *f, int redis, uint64_t drain_ms)
{
    start_idle(f, redis, drain_ms, IDLE_MS);
}

/* ------------------------------------------------------------------------ */
/* A tiny blocking HTTP client */

static int dial(int port)
{
    int fd = rlt_dial(port); /* reads time out: a hung server fails */

    assert_true(fd >= 0);
    return fd;
}

typedef struct resp_s {
    int status;
    int closes; /* Connection: close */
    char head[1024];
    char body[16384];
    size_t body_len;
} resp_t;

/* Bytes read from one connection and not yet taken as a response. */
typedef struct rd_s {
    char buf[65536];
    size_t len;
} rd_t;

/* Reads one response from fd; bytes of a following (pipelined) response
 * stay in rd. Returns 0, or -1 when the connection ended or timed out
 * before a whole response. */
static int read_resp(int fd, rd_t *rd, resp_t *r)
{
    char *end;
    size_t hlen, need;
    long clen = -1;
    char *cl;

    memset(r, 0, sizeof(*r));
    for (;;) {
        end = NULL;
        if (rd->len > 0) {
            rd->buf[rd->len] = '\0';
            end = strstr(rd->buf, "\r\n\r\n");
        }
        if (end != NULL) {
            hlen = (size_t)(end - rd->buf) + 4;
            cl = strstr(rd->buf, "Content-Length: ");
            if (cl != NULL && cl < end)
                clen = strtol(cl + 16, NULL, 10);
            assert_true(clen >= 0);
            need = hlen + (size_t)clen;
            if (rd->len >= need) {
                assert_true(hlen < sizeof(r->head));
                memcpy(r->head, rd->buf, hlen);
                r->head[hlen] = '\0';
                assert_true((size_t)clen < sizeof(r->body));
                memcpy(r->body, rd->buf + hlen, (size_t)clen);
                r->body[clen] = '\0';
                r->body_len = (size_t)clen;
                r->status = atoi(r->head + 9);
                r->closes = strstr(r->head, "Connection: close") != NULL;
                memmove(rd->buf, rd->buf + need, rd->len - need);
                rd->len -= need;
                return 0;
            }
        }
        if (rd->len + 1 >= sizeof(rd->buf))
            return -1;
        ssize_t k =
            recv(fd, rd->buf + rd->len, sizeof(rd->buf) - rd->len - 1, 0);
        if (k <= 0)
            return -1;
        rd->len += (size_t)k;
    }
}

/* HEAD responses carry Content-Length but no body: read the head only. */
static int read_head_only(int fd, rd_t *rd, resp_t *r)
{
    char *end;
    size_t hlen;

    memset(r, 0, sizeof(*r));
    for (;;) {
        rd->buf[rd->len] = '\0';
        end = strstr(rd->buf, "\r\n\r\n");
        if (end != NULL) {
            hlen = (size_t)(end - rd->buf) + 4;
            memcpy(r->head, rd->buf, hlen);
            r->status = atoi(r->head + 9);
            memmove(rd->buf, rd->buf + hlen, rd->len - hlen);
            rd->len -= hlen;
            return 0;
        }
        ssize_t k =
            recv(fd, rd->buf + rd->len, sizeof(rd->buf) - rd->len - 1, 0);
        if (k <= 0)
            return -1;
        rd->len += (size_t)k;
    }
}

/* 1 when the peer closes (EOF or reset) within ms, 0 if it stays open or
 * sends more. */
static int closed_within(int fd, int ms)
{
    struct timeval tv = {ms / 1000, (ms % 1000) * 1000};
    char c;
    ssize_t k;

    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    k = recv(fd, &c, 1, 0);
    if (k == 0)
        return 1;
    if (k < 0 && errno == ECONNRESET)
        return 1;
    return 0;
}

/* One request on a fresh connection. */
static void fetch(int port, const char *req, resp_t *r)
{
    static rd_t rd;
    int fd = dial(port);

    rd.len = 0;
    assert_int_equal(rlt_send_all(fd, req, strlen(req)), RL_OK);
    assert_int_equal(read_resp(fd, &rd, r), 0);
    close(fd);
}

static void get(int port, const char *path, resp_t *r)
{
    char req[256];

    snprintf(req, sizeof(req), "GET %s HTTP/1.1\r\nHost: t\r\n\r\n", path);
    fetch(port, req, r);
}

/* One check over the wire protocol, on a fresh connection. */
static int check_once(int port, const char *key, uint64_t limit)
{
    rl_check_t q = rlt_check(7, key, limit, 60, 1);
    rlt_result_t r;

    assert_int_equal(rlt_ask(port, &q, &r), RL_OK);
    return r.r.code;
}

/* ------------------------------------------------------------------------ */
/* The page itself */

/* Every line is a HELP or TYPE comment or a "name[{labels}] value" sample
 * whose name belongs to the last TYPE; every histogram's buckets are
 * cumulative and its +Inf bucket equals its _count. */
static void assert_exposition(const char *page)
{
    char family[128] = "", type[32] = "", name[160];
    const char *line = page, *nl;
    long long last_bucket = -1, inf = -1;
    int samples = 0;

    assert_true(strlen(page) > 0 && page[strlen(page) - 1] == '\n');
    for (; *line != '\0'; line = nl + 1) {
        nl = strchr(line, '\n');
        assert_non_null(nl);
        if (strncmp(line, "# HELP ", 7) == 0)
            continue;
        if (strncmp(line, "# TYPE ", 7) == 0) {
            assert_int_equal(sscanf(line, "# TYPE %127s %31s", family, type),
                             2);
            last_bucket = -1;
            inf = -1;
            continue;
        }
        assert_true(line[0] != '#');
        /* name: [a-zA-Z_:][a-zA-Z0-9_:]* */
        size_t i = 0;
        while (line + i < nl && line[i] != '{' && line[i] != ' ')
            i++;
        assert_true(i > 0 && i < sizeof(name));
        memcpy(name, line, i);
        name[i] = '\0';
        for (size_t k = 0; k < i; k++)
            assert_true(strchr("abcdefghijklmnopqrstuvwxyz"
                               "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_:",
                               name[k]) != NULL);
        assert_int_equal(strncmp(name, family, strlen(family)), 0);
        const char *sp = memchr(line, ' ', (size_t)(nl - line));
        assert_non_null(sp);
        if (line[i] == '{')
            assert_true(sp[-1] == '}');
        char *end;
        double v = strtod(sp + 1, &end);
        assert_true(end == nl);
        assert_true(v >= 0);
        if (strcmp(type, "histogram") == 0) {
            if (strstr(name, "_bucket") != NULL) {
                assert_true((long long)v >= last_bucket);
                last_bucket = (long long)v;
                if (strstr(line, "le=\"+Inf\"") != NULL)
                    inf = (long long)v;
            } else if (strstr(name, "_count") != NULL) {
                assert_true(inf >= 0);
                assert_int_equal((long long)v, inf);
            }
        }
        samples++;
    }
    assert_true(samples > 20);
}

static void test_metrics_page(void **state)
{
    inproc_t *f = *state;
    resp_t r;
    int i;

    start(f, 0, 0);
    /* Three allowed, two over the limit of 3, one invalid (limit 0 with a
     * window: refused before the store). */
    for (i = 0; i < 5; i++)
        assert_int_equal(check_once(f->port, "k", 3),
                         i < 3 ? RL_CODE_OK : RL_CODE_OVER_LIMIT);
    assert_int_equal(check_once(f->port, "k", 0), RL_CODE_ERROR);

    get(f->mport, "/metrics", &r);
    assert_int_equal(r.status, 200);
    assert_non_null(strstr(r.head, "Content-Type: text/plain; version=0.0.4"));
    assert_exposition(r.body);
    assert_int_equal(rlt_sample(r.body, "rl_decisions_total{code=\"ok\"}"), 3);
    assert_int_equal(
        rlt_sample(r.body, "rl_decisions_total{code=\"over_limit\"}"), 2);
    assert_int_equal(rlt_sample(r.body, "rl_decisions_total{code=\"error\"}"),
                     1);
    assert_int_equal(
        rlt_sample(r.body, "rl_frames_rejected_total{reason=\"invalid\"}"), 1);
    assert_int_equal(rlt_sample(r.body, "rl_connections_accepted_total"), 6);
    assert_int_equal(rlt_sample(r.body, "rl_requests_inflight"), 0);
    assert_int_equal(rlt_sample(r.body, "rl_healthy"), 1);
    /* The third answer left no room: the store showed the window full, so
     * the two refusals were answered without a batch. */
    assert_int_equal(rlt_sample(r.body, "rl_batch_size_count"), 3);
    assert_int_equal(rlt_sample(r.body, "rl_refusals_local_total"), 2);
    assert_non_null(strstr(r.body, "rl_build_info{version=\""));

    /* HEAD: the headers, with the page's length, and no body. */
    {
        static rd_t rd;
        int fd = dial(f->mport);

        rd.len = 0;
        assert_int_equal(rlt_send_all(fd, "HEAD /metrics HTTP/1.1\r\n\r\n", 26),
                         RL_OK);
        assert_int_equal(read_head_only(fd, &rd, &r), 0);
        assert_int_equal(r.status, 200);
        assert_non_null(strstr(r.head, "Content-Length: "));
        /* Nothing follows the head: the next bytes are the next answer. */
        assert_int_equal(rlt_send_all(fd, "GET /healthz HTTP/1.1\r\n\r\n", 25),
                         RL_OK);
        assert_int_equal(read_resp(fd, &rd, &r), 0);
        assert_int_equal(r.status, 200);
        assert_string_equal(r.body, "ok\n");
        close(fd);
    }
    inproc_stop(f);
}

static void test_routes(void **state)
{
    inproc_t *f = *state;
    resp_t r;

    start(f, 0, 0);
    get(f->mport, "/healthz", &r);
    assert_int_equal(r.status, 200);
    assert_string_equal(r.body, "ok\n");
    get(f->mport, "/healthz?verbose=1", &r);
    assert_int_equal(r.status, 200);
    get(f->mport, "/", &r);
    assert_int_equal(r.status, 404);
    get(f->mport, "/metricsx", &r);
    assert_int_equal(r.status, 404);
    get(f->mport, "/healthz/", &r);
    assert_int_equal(r.status, 404);
    fetch(f->mport, "POST /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n", &r);
    assert_int_equal(r.status, 405);
    assert_non_null(strstr(r.head, "Allow: GET, HEAD"));
    fetch(f->mport, "get /metrics HTTP/1.1\r\n\r\n", &r); /* case matters */
    assert_int_equal(r.status, 405);
    inproc_stop(f);
}

/* Malformed and oversized requests get 400 and the connection closes. */
static void test_bad_requests(void **state)
{
#define BAD(s)                                                                 \
    {                                                                          \
        s, sizeof(s) - 1                                                       \
    }
    static const struct {
        const char *req;
        size_t len; /* some hold NUL bytes */
    } bad[] = {
        BAD("GARBAGE\r\n\r\n"),
        BAD("GET /metrics HTTP/1.1\r\nno colon here\r\n\r\n"),
        BAD("GET /metrics HTTP/1.1\r\nHost: a\0b\r\n\r\n"),
        BAD("GET /metrics HTTP/3.0\r\n\r\n"),
        BAD("GET /metrics HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"),
        BAD("GET /metrics HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc"),
    };
#undef BAD
    static char big[RLS_HTTP_HEAD_MAX + 100];
    static rd_t rd;
    inproc_t *f = *state;
    resp_t r;
    size_t i;
    int fd;

    start(f, 0, 0);
    for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        fd = dial(f->mport);
        rd.len = 0;
        assert_int_equal(rlt_send_all(fd, bad[i].req, bad[i].len), RL_OK);
        assert_int_equal(read_resp(fd, &rd, &r), 0);
        if (r.status != 400)
            fail_msg("case %zu answered %d", i, r.status);
        assert_true(r.closes);
        assert_true(closed_within(fd, 2000));
        close(fd);
    }

    /* A head over 8 KiB: 431 (its header lines are too large) and close,
     * even though the client goes on sending (the server drains it rather
     * than resetting). */
    memcpy(big, "GET /metrics HTTP/1.1\r\nX-Pad: ", 30);
    memset(big + 30, 'a', sizeof(big) - 30);
    fd = dial(f->mport);
    rd.len = 0;
    assert_int_equal(rlt_send_all(fd, big, sizeof(big)), RL_OK);
    assert_int_equal(read_resp(fd, &rd, &r), 0);
    assert_int_equal(r.status, 431);
    assert_true(closed_within(fd, 3000));
    close(fd);

    /* A TLS ClientHello on this plaintext port: a TLS alert record
     * (fatal handshake_failure), which its TLS stack can read, and close;
     * counted apart. */
    {
        static const char hello[] = "\x16\x03\x01\x00\xa5\x01\x00\x00"
                                    "\xa1\x03\x03";
        char got[64];
        size_t n = 0;
        ssize_t k;
        struct timeval tv = {3, 0};

        fd = dial(f->mport);
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
        assert_int_equal(rlt_send_all(fd, hello, sizeof(hello) - 1), RL_OK);
        while (n < sizeof(got) &&
               (k = recv(fd, got + n, sizeof(got) - n, 0)) > 0)
            n += (size_t)k;
        assert_int_equal(n, 7);
        assert_memory_equal(got, "\x15\x03\x03\x00\x02\x02\x28", 7);
        close(fd);
    }

    /* The listener is still fine. */
    get(f->mport, "/healthz", &r);
    assert_int_equal(r.status, 200);
    get(f->mport, "/metrics", &r);
    assert_int_equal(r.status, 200);
    assert_non_null(
        strstr(r.body, "rl_tls_on_plaintext_port_total{listener=\"metrics\"} "
                       "1\n"));
    inproc_stop(f);
}

/* Three requests in one write: three answers in order; the last asks to
 * close, and the connection closes after it. Then the same request sent
 * one byte per write still gets its answer. */
static void test_pipelined_and_split(void **state)
{
    static const char reqs[] = "GET /healthz HTTP/1.1\r\n\r\n"
                               "GET /nope HTTP/1.1\r\n\r\n"
                               "GET /metrics HTTP/1.1\r\n"
                               "Connection: close\r\n\r\n";
    static const char one[] = "GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n";
    static rd_t rd;
    inproc_t *f = *state;
    resp_t r;
    size_t i;
    int fd;

    start(f, 0, 0);
    fd = dial(f->mport);
    rd.len = 0;
    assert_int_equal(rlt_send_all(fd, reqs, sizeof(reqs) - 1), RL_OK);
    assert_int_equal(read_resp(fd, &rd, &r), 0);
    assert_int_equal(r.status, 200);
    assert_string_equal(r.body, "ok\n");
    assert_false(r.closes);
    assert_int_equal(read_resp(fd, &rd, &r), 0);
    assert_int_equal(r.status, 404);
    assert_int_equal(read_resp(fd, &rd, &r), 0);
    assert_int_equal(r.status, 200);
    assert_true(r.closes);
    assert_true(rlt_sample(r.body, "rl_healthy") == 1);
    assert_true(closed_within(fd, 2000));
    close(fd);

    fd = dial(f->mport);
    rd.len = 0;
    for (i = 0; i < sizeof(one) - 1; i++) {
        assert_int_equal(rlt_send_all(fd, one + i, 1), RL_OK);
        rlt_nap_ms(1);
    }
    assert_int_equal(read_resp(fd, &rd, &r), 0);
    assert_int_equal(r.status, 200);
    /* Keep-alive: a second request on the same connection. */
    assert_int_equal(rlt_send_all(fd, one, sizeof(one) - 1), RL_OK);
    assert_int_equal(read_resp(fd, &rd, &r), 0);
    assert_int_equal(r.status, 200);
    close(fd);
    inproc_stop(f);
}

/* Slowloris: a head trickled byte by byte is cut off at the idle limit,
 * counted from the connection's start, not from its last byte; an idle
 * keep-alive connection is closed too. */
static void test_idle_limit(void **state)
{
    static const char head[] = "GET /metrics HTTP/1.1\r\nX-Slow: "
                               "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
    static rd_t rd;
    inproc_t *f = *state;
    uint64_t t0;
    resp_t r;
    size_t i;
    int fd, closed = 0, tries;
    char c;

    start(f, 0, 0);
    /* A byte every 20 ms, so never IDLE_MS apart: a deadline that each
     * byte moved would never pass, and the head (75 bytes) would end. It
     * must be closed first. A machine so loaded that two bytes went
     * IDLE_MS apart proves nothing: the trickle is tried again. */
    for (tries = 0; tries < 5; tries++) {
        uint64_t last, gap = 0;

        fd = dial(f->mport);
        t0 = last = rlt_mono_ms();
        closed = 0;
        for (i = 0; i < sizeof(head) - 1 && !closed; i++) {
            uint64_t now = rlt_mono_ms();
            if (now - last > gap)
                gap = now - last;
            last = now;
            if (send(fd, head + i, 1, MSG_NOSIGNAL) != 1) {
                closed = 1;
                break;
            }
            rlt_nap_ms(20);
            /* Closed yet? (MSG_DONTWAIT: look without waiting.) */
            ssize_t k = recv(fd, &c, 1, MSG_DONTWAIT);
            if (k == 0 || (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK))
                closed = 1;
        }
        close(fd);
        if (gap < IDLE_MS)
            break;
    }
    assert_true(tries < 5);
    assert_true(closed);
    assert_true(i < sizeof(head) - 1);

    fd = dial(f->mport);
    rd.len = 0;
    assert_int_equal(rlt_send_all(fd, "GET /healthz HTTP/1.1\r\n\r\n", 25),
                     RL_OK);
    assert_int_equal(read_resp(fd, &rd, &r), 0);
    t0 = rlt_mono_ms();
    assert_true(closed_within(fd, 3000));
    assert_true(rlt_mono_ms() - t0 >= IDLE_MS / 2);
    close(fd);
    inproc_stop(f);
}

/* One keep-alive GET on fd; returns the status. */
static int roundtrip(int fd, const char *path, resp_t *r)
{
    static rd_t rd;
    char req[256];

    rd.len = 0;
    snprintf(req, sizeof(req), "GET %s HTTP/1.1\r\nHost: t\r\n\r\n", path);
    assert_int_equal(rlt_send_all(fd, req, strlen(req)), RL_OK);
    assert_int_equal(read_resp(fd, &rd, r), 0);
    return r->status;
}

/* The first half of a request head: the scraper is mid-request. */
static const char half_head[] = "GET /metrics HTTP/1.1\r\n";
static const char rest_head[] = "Host: t\r\n\r\n";

/* The tail of a request begun with half_head; returns the status. */
static int finish(int fd, resp_t *r)
{
    static rd_t rd;

    rd.len = 0;
    assert_int_equal(rlt_send_all(fd, rest_head, sizeof(rest_head) - 1), RL_OK);
    assert_int_equal(read_resp(fd, &rd, r), 0);
    return r->status;
}

/* A full listener makes room for a new connection: the longest idle
 * kept-alive one gives way, not a scraper in the middle of a request nor a
 * more recently active one. Before, the new connection got 503. */
static void test_cap_evicts_idle_first(void **state)
{
    inproc_t *f = *state;
    int a, b, c, d, e;
    resp_t r;

    start_limits(f, 0, 0, 5000, MAX_CONNS, 5000); /* no deadline cuts */
    a = dial(f->mport);
    b = dial(f->mport);
    c = dial(f->mport);
    d = dial(f->mport);
    /* Round trips make sure the server holds each and has served it. */
    assert_int_equal(roundtrip(a, "/healthz", &r), 200);
    assert_int_equal(roundtrip(b, "/healthz", &r), 200);
    assert_int_equal(roundtrip(c, "/healthz", &r), 200);
    assert_int_equal(rlt_send_all(a, half_head, sizeof(half_head) - 1), RL_OK);
    assert_int_equal(rlt_send_all(b, half_head, sizeof(half_head) - 1), RL_OK);
    /* d's answer comes after the server has read a's and b's halves. */
    assert_int_equal(roundtrip(d, "/healthz", &r), 200);

    e = dial(f->mport);
    assert_int_equal(roundtrip(e, "/healthz", &r), 200);
    assert_true(closed_within(c, 2000)); /* idle longest: gave way */
    assert_int_equal(finish(a, &r), 200);
    assert_true(rlt_sample(r.body, "rl_http_connections_evicted_total") == 1);
    assert_true(rlt_sample(r.body, "rl_http_connections_refused_total") == 0);
    assert_int_equal(finish(b, &r), 200);
    assert_int_equal(roundtrip(d, "/healthz", &r), 200);
    close(a);
    close(b);
    close(c);
    close(d);
    close(e);
    inproc_stop(f);
}

#define FLOOD 500

/* Health cannot be knocked down through the metrics port: 500 connections
 * that send one byte each, then /healthz on a new connection answers 200
 * at once (before, 503 "too many connections" until the idle limit cut the
 * flood, 10 s), and again while the flood goes on. Scrapers kept alive
 * across the flood, in the middle of a request or between requests, are
 * not evicted while flood connections remain to give way. */
static void test_flood_keeps_health(void **state)
{
    static int fds[FLOOD];
    inproc_t *f = *state;
    int keep[3], i, round;
    uint64_t t0;
    resp_t r;

    /* The default cap; the deadlines are long, so only eviction can make
     * room within the test. */
    start_limits(f, 0, 0, 30000, RLS_HTTP_CONNS_MAX, 30000);
    for (i = 0; i < 3; i++) {
        keep[i] = dial(f->mport);
        assert_int_equal(roundtrip(keep[i], "/healthz", &r), 200);
    }
    assert_int_equal(rlt_send_all(keep[0], half_head, sizeof(half_head) - 1),
                     RL_OK);
    assert_int_equal(rlt_send_all(keep[1], half_head, sizeof(half_head) - 1),
                     RL_OK);
    /* keep[2] stays idle between requests. */

    for (i = 0; i < FLOOD; i++) {
        fds[i] = dial(f->mport);
        /* No assertion: a refused or evicted socket may be reset. */
        (void)send(fds[i], "G", 1, MSG_NOSIGNAL);
    }
    for (round = 0; round < 5; round++) {
        t0 = rlt_mono_ms();
        get(f->mport, "/healthz", &r);
        assert_int_equal(r.status, 200);
        assert_string_equal(r.body, "ok\n");
        /* A liveness bound, far below the old 10 s; the answer is
         * awaited (get() reads with a 3 s timeout), not slept for. */
        assert_true(rlt_mono_ms() - t0 < 2000);
        /* The flood reconnects: a hundred fresh one-byte connections. */
        for (i = round * 100; i < round * 100 + 100; i++) {
            close(fds[i]);
            fds[i] = dial(f->mport);
            (void)send(fds[i], "G", 1, MSG_NOSIGNAL);
        }
    }
    get(f->mport, "/healthz", &r);
    assert_int_equal(r.status, 200);

    assert_int_equal(finish(keep[0], &r), 200);
    assert_int_equal(finish(keep[1], &r), 200);
    assert_int_equal(roundtrip(keep[2], "/metrics", &r), 200);
    /* The first flood alone overfills the 64 slots by 439 (some of the
     * flood may have been refused instead, if evicted connections still
     * held their memory); reconnecting frees slots by closing. */
    assert_true(rlt_sample(r.body, "rl_http_connections_evicted_total") +
                    rlt_sample(r.body, "rl_http_connections_refused_total") >=
                FLOOD + 3 - RLS_HTTP_CONNS_MAX);
    for (i = 0; i < FLOOD; i++)
        close(fds[i]);
    for (i = 0; i < 3; i++)
        close(keep[i]);
    inproc_stop(f);
}

/* The header deadline: a head must arrive whole within head_ms of the
 * connection opening, or of its first byte on a kept-alive connection,
 * while a kept-alive connection may wait the (longer) idle limit between
 * requests. */
static void test_header_deadline(void **state)
{
    inproc_t *f = *state;
    uint64_t t0;
    resp_t r;
    int fd;

    start_limits(f, 0, 0, 10000, MAX_CONNS, 300);
    fd = dial(f->mport);
    t0 = rlt_mono_ms();
    assert_int_equal(rlt_send_all(fd, "G", 1), RL_OK);
    assert_true(closed_within(fd, 3000));
    assert_true(rlt_mono_ms() - t0 < 5000); /* the idle limit is 10 s */
    close(fd);

    fd = dial(f->mport);
    assert_int_equal(roundtrip(fd, "/healthz", &r), 200);
    /* Idle between requests: more than the header deadline is fine. */
    assert_false(closed_within(fd, 900));
    t0 = rlt_mono_ms();
    assert_int_equal(rlt_send_all(fd, "G", 1), RL_OK);
    assert_true(closed_within(fd, 3000));
    assert_true(rlt_mono_ms() - t0 < 5000);
    close(fd);

    get(f->mport, "/metrics", &r);
    assert_int_equal(rlt_sample(r.body, "rl_http_connections_timed_out_total"),
                     2);
    assert_int_equal(rlt_sample(r.body, "rl_http_connections_evicted_total"),
                     0);
    inproc_stop(f);
}

/* --drain-ms: after the stop signal /healthz is 503 "draining" at once,
 * while the server still answers checks; then the server exits cleanly. */
static void test_drain(void **state)
{
    inproc_t *f = *state;
    uint64_t deadline;
    resp_t r;

    start(f, 0, 1500);
    get(f->mport, "/healthz", &r);
    assert_int_equal(r.status, 200);
    uv_async_send(&f->stop);
    deadline = rlt_mono_ms() + 1000;
    for (;;) {
        get(f->mport, "/healthz", &r);
        if (r.status == 503)
            break;
        assert_true(rlt_mono_ms() < deadline);
        rlt_nap_ms(5);
    }
    assert_string_equal(r.body, "draining\n");
    get(f->mport, "/metrics", &r);
    assert_int_equal(rlt_sample(r.body, "rl_draining"), 1);
    assert_int_equal(rlt_sample(r.body, "rl_healthy"), 0);
    /* Still serving during the drain. */
    assert_int_equal(check_once(f->port, "d", 5), RL_CODE_OK);
    f->running = 0;
    pthread_join(f->thread, NULL);
    rls_server_free(&f->srv);
    assert_int_equal(uv_loop_close(&f->loop), 0);
}

/* /healthz follows the store: 503 "store unavailable" while Redis is down,
 * 200 again once it is back (the server reconnects by itself). Redis has
 * the ratelimit module: the store finds it again after the restart. */
static void test_health_follows_redis(void **state)
{
    static char *const module[] = {"--loadmodule", RL_TEST_REDIS_MODULE, NULL};
    inproc_t *f = *state;
    uint64_t deadline;
    resp_t r;

    assert_int_equal(rlt_redis_start_with(&f->redis, module), 0);
    start(f, 1, 0);
    deadline = rlt_mono_ms() + 5000;
    for (get(f->mport, "/healthz", &r); r.status != 200;
         get(f->mport, "/healthz", &r)) {
        assert_true(rlt_mono_ms() < deadline);
        rlt_nap_ms(10);
    }
    assert_int_equal(check_once(f->port, "h", 5), RL_CODE_OK);
    get(f->mport, "/metrics", &r);
    assert_int_equal(rlt_sample(r.body, "rl_store_redis_module"), 1);

    rlt_redis_kill(&f->redis);
    deadline = rlt_mono_ms() + 5000;
    for (get(f->mport, "/healthz", &r); r.status != 503;
         get(f->mport, "/healthz", &r)) {
        /* A request makes the store notice sooner, as traffic would. */
        check_once(f->port, "h", 5);
        assert_true(rlt_mono_ms() < deadline);
        rlt_nap_ms(10);
    }
    assert_string_equal(r.body, "store unavailable\n");
    get(f->mport, "/metrics", &r);
    assert_int_equal(rlt_sample(r.body, "rl_store_up"), 0);

    assert_int_equal(rlt_redis_restart_with(&f->redis, module), 0);
    deadline = rlt_mono_ms() + 15000;
    for (get(f->mport, "/healthz", &r); r.status != 200;
         get(f->mport, "/healthz", &r)) {
        assert_true(rlt_mono_ms() < deadline);
        rlt_nap_ms(20);
    }
    get(f->mport, "/metrics", &r);
    assert_int_equal(rlt_sample(r.body, "rl_store_up"), 1);
    assert_int_equal(rlt_sample(r.body, "rl_store_redis_module"), 1);
    assert_true(rlt_sample(r.body, "rl_store_reconnects_total") >= 1);
    assert_true(rlt_sample(r.body, "rl_redis_rtt_seconds_count") >= 1);
    assert_exposition(r.body);
    inproc_stop(f);
}

/* A --metrics port already in use: start fails with the error, and
 * nothing is left open. */
/* A listener that cannot bind fails the start with its flag, address and
 * reason, and the ones opened before it close again: the loop ends with
 * nothing open. Each of --metrics, --grpc and --http in turn, on a port
 * already taken; the native listener and the ones before always opened. */
static void test_port_in_use(void **state)
{
    static const char *const flags[] = {"--metrics", "--grpc", "--http"};
    inproc_t *f = *state;
    rls_store_t *st;
    int fd, one = 1, which, port;
    struct sockaddr_in sa;
    char err[256], want[128];

    fd = socket(AF_INET, SOCK_STREAM, 0);
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    memset(&sa, 0, sizeof(sa));
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    assert_int_equal(listen(fd, 1), 0);
    socklen_t len = sizeof(sa);
    getsockname(fd, (struct sockaddr *)&sa, &len);
    port = ntohs(sa.sin_port);

    for (which = 0; which < 3; which++) {
        rls_flags_defaults(&f->cfg);
        f->cfg.listen_port = 0;
        /* The ones before `which` open on any port; `which` collides. */
        strcpy(f->cfg.metrics_host, "127.0.0.1");
        f->cfg.metrics_port = which == 0 ? port : 0;
        if (which >= 1) {
            strcpy(f->cfg.grpc_host, "127.0.0.1");
            f->cfg.grpc_port = which == 1 ? port : 0;
        }
        if (which >= 2) {
            strcpy(f->cfg.http_host, "127.0.0.1");
            f->cfg.http_port = port;
        }
        assert_int_equal(uv_loop_init(&f->loop), 0);
        st = rls_store_memory_new(&f->loop);
        assert_non_null(st);
        err[0] = '\0';
        assert_int_equal(rls_server_start(&f->srv, &f->loop, &f->cfg, st, NULL,
                                          err, sizeof(err)),
                         RL_EADDR);
        snprintf(want, sizeof(want),
                 "%s: cannot listen on 127.0.0.1:%d: address already in use",
                 flags[which], port);
        assert_string_equal(err, want);
        st->v->close(st, NULL, NULL);
        uv_run(&f->loop, UV_RUN_DEFAULT);
        assert_int_equal(uv_loop_close(&f->loop), 0);
    }
    close(fd);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        INPROC_TEST(test_metrics_page),
        INPROC_TEST(test_routes),
        INPROC_TEST(test_bad_requests),
        INPROC_TEST(test_pipelined_and_split),
        INPROC_TEST(test_idle_limit),
        INPROC_TEST(test_cap_evicts_idle_first),
        INPROC_TEST(test_flood_keeps_health),
        INPROC_TEST(test_header_deadline),
        INPROC_TEST(test_drain),
        INPROC_TEST(test_health_follows_redis),
        INPROC_TEST(test_port_in_use),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
