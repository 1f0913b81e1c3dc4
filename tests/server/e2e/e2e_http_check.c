/* The HTTP check endpoint (--http, server/check/http_check.c) end to end: an
 * rl-server process, raw HTTP/1.1 over loopback.
 *
 *   - 200 up to the limit, then 429 with Retry-After; every decision with
 *     the rate-limit headers; 403 with deny_status=403;
 *   - the key from --check-key-header (X-Forwarded-For: first address),
 *     key= in the query winning; the rule from --check-rule-header;
 *   - bad input: 400 with a reason, 404, 405, 414, 431, and the listener
 *     still serving afterwards;
 *   - 1,000 requests on one kept-alive connection, pipelined, answered in
 *     order;
 *   - 503 when the store is down under --fail-closed;
 *   - SIGTERM: an idle connection is closed, a request half sent is still
 *     answered (Connection: close), and the server exits 0;
 *   - late answers (Redis stopped): a client gone before its answer (its
 *     connection's memory must outlive it), SIGTERM with answers pending;
 *   - shadow and off modes as for native requests;
 *   - rl_check_requests_total{code} on /metrics. */
#define _GNU_SOURCE
#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "rl_error.h"
#include "rlt.h"
#include "rlt_fx.h"

/* ---- a minimal HTTP/1.1 client ---- */

typedef struct resp_s {
    int status;
    char head[4096]; /* NUL-terminated */
    char body[1024]; /* NUL-terminated, cut */
    int closes;      /* Connection: close */
} resp_t;

typedef struct rd_s {
    char buf[1 << 16];
    size_t len;
} rd_t;

static void *find(const void *h, size_t hn, const char *n)
{
    return memmem(h, hn, n, strlen(n));
}

/* Reads one response (head, then Content-Length bytes of body unless
 * head_only) from fd, keeping bytes after it in rd. Returns 0, or -1 on
 * end of file, error or timeout (the socket has 5 s timeouts). */
static int read_resp_h(int fd, rd_t *rd, resp_t *r, int head_only)
{
    char *end, *cl;
    size_t hlen, blen = 0, total;
    ssize_t got;

    memset(r, 0, sizeof(*r));
    for (;;) {
        end = find(rd->buf, rd->len, "\r\n\r\n");
        if (end != NULL) {
            hlen = (size_t)(end - rd->buf) + 4;
            if (hlen >= sizeof(r->head))
                return -1;
            memcpy(r->head, rd->buf, hlen);
            r->head[hlen] = '\0';
            cl = strstr(r->head, "Content-Length: ");
            if (cl != NULL && !head_only)
                blen = strtoul(cl + 16, NULL, 10);
            total = hlen + blen;
            if (rd->len >= total)
                break;
        }
        if (rd->len == sizeof(rd->buf))
            return -1;
        got = recv(fd, rd->buf + rd->len, sizeof(rd->buf) - rd->len, 0);
        if (got <= 0)
            return -1;
        rd->len += (size_t)got;
    }
    r->status = atoi(r->head + 9);
    memcpy(r->body, rd->buf + hlen,
           blen < sizeof(r->body) ? blen : sizeof(r->body) - 1);
    r->closes = strstr(r->head, "Connection: close") != NULL;
    memmove(rd->buf, rd->buf + total, rd->len - total);
    rd->len -= total;
    return 0;
}

static int read_resp(int fd, rd_t *rd, resp_t *r)
{
    return read_resp_h(fd, rd, r, 0);
}

/* One request on a fresh connection. */
static void fetch(int port, const char *req, size_t len, resp_t *r)
{
    static rd_t rd;
    int fd = rlt_dial(port);

    assert_true(fd >= 0);
    rd.len = 0;
    assert_int_equal(rlt_send_all(fd, req, len), RL_OK);
    assert_int_equal(read_resp(fd, &rd, r), 0);
    close(fd);
}

/* GET target with extra header lines (each ending in CRLF, or ""). */
static void get(int port, const char *target, const char *hdrs, resp_t *r)
{
    char req[16384];
    int n = snprintf(req, sizeof(req), "GET %s HTTP/1.1\r\nHost: t\r\n%s\r\n",
                     target, hdrs);

    assert_true(n > 0 && (size_t)n < sizeof(req));
    fetch(port, req, (size_t)n, r);
}

/* The value of header `name` in r, copied to v; 0 if absent. */
static int header(const resp_t *r, const char *name, char *v, size_t vn)
{
    char pat[64];
    const char *p, *e;

    snprintf(pat, sizeof(pat), "\r\n%s: ", name);
    if ((p = strstr(r->head, pat)) == NULL)
        return 0;
    p += strlen(pat);
    e = strstr(p, "\r\n");
    snprintf(v, vn, "%.*s", (int)(e - p), p);
    return 1;
}

static long hnum(const resp_t *r, const char *name)
{
    char v[64];

    if (!header(r, name, v, sizeof(v)))
        return -1;
    return atol(v);
}

static void assert_decision_headers(const resp_t *r, long limit, long remaining)
{
    char v[128];

    assert_int_equal(hnum(r, "X-RateLimit-Limit"), limit);
    assert_int_equal(hnum(r, "X-RateLimit-Remaining"), remaining);
    assert_true(hnum(r, "X-RateLimit-Reset") >= 1);
    assert_true(header(r, "RateLimit-Policy", v, sizeof(v)));
    assert_non_null(strstr(v, "\"api\";q="));
    assert_true(header(r, "RateLimit", v, sizeof(v)));
    assert_non_null(strstr(v, "\"api\";r="));
}

/* 200 up to the limit on one kept-alive connection, then 429 with
 * Retry-After; deny_status=403; another key is independent; HEAD. */
static void test_limit(void **state)
{
    static rd_t rd;
    rlt_fx_t *f = *state;
    char req[256];
    resp_t r;
    int fd, i;

    rlt_fx_start(f, 0, "--rule", "api=5/3600s", NULL, NULL, NULL, NULL);
    fd = rlt_dial(f->srv[0].hport);
    assert_true(fd >= 0);
    rd.len = 0;
    for (i = 0; i < 7; i++) {
        snprintf(req, sizeof(req),
                 "GET /check?rule=api&key=user%%3A1 HTTP/1.1\r\nHost: t\r\n"
                 "\r\n");
        assert_int_equal(rlt_send_all(fd, req, strlen(req)), RL_OK);
        assert_int_equal(read_resp(fd, &rd, &r), 0);
        if (i < 5) {
            assert_int_equal(r.status, 200);
            assert_decision_headers(&r, 5, 4 - i);
            assert_int_equal(hnum(&r, "Retry-After"), -1);
        } else {
            assert_int_equal(r.status, 429);
            assert_decision_headers(&r, 5, 0);
            assert_true(hnum(&r, "Retry-After") >= 1);
            assert_string_equal(r.body, "over limit\n");
        }
        assert_false(r.closes);
    }
    close(fd);

    get(f->srv[0].hport, "/check?rule=api&key=user%3A1&deny_status=403", "",
        &r);
    assert_int_equal(r.status, 403);
    assert_true(hnum(&r, "Retry-After") >= 1);
    /* "user:1" percent-encoded or not is one key; "user 1" another. */
    get(f->srv[0].hport, "/check?rule=api&key=user:1", "", &r);
    assert_int_equal(r.status, 429);
    get(f->srv[0].hport, "/check?rule=api&key=user+1", "", &r);
    assert_int_equal(r.status, 200);
    assert_decision_headers(&r, 5, 4);
    /* HEAD: the same decision, headers only. */
    fd = rlt_dial(f->srv[0].hport);
    rd.len = 0;
    snprintf(req, sizeof(req),
             "HEAD /check?rule=api&key=user%%201 HTTP/1.1"
             "\r\n\r\n");
    assert_int_equal(rlt_send_all(fd, req, strlen(req)), RL_OK);
    assert_int_equal(read_resp_h(fd, &rd, &r, 1), 0);
    assert_int_equal(r.status, 200);
    assert_int_equal(hnum(&r, "X-RateLimit-Remaining"), 3);
    close(fd);

    /* /metrics counts the responses by status. */
    {
        static char page[1 << 17];
        assert_int_equal(
            rlt_http_get(f->srv[0].mport, "/metrics", page, sizeof(page)), 200);
        assert_int_equal(
            rlt_sample(page, "rl_check_requests_total{code=\"200\"}"), 7);
        assert_int_equal(
            rlt_sample(page, "rl_check_requests_total{code=\"429\"}"), 3);
        assert_int_equal(
            rlt_sample(page, "rl_check_requests_total{code=\"403\"}"), 1);
    }
    assert_int_equal(rlt_server_stop(&f->srv[0]), 0);
}

/* A sample of the server's /metrics page; -1 when absent. */
static long long metric(const rlt_fx_t *f, const char *name)
{
    return rlt_fx_metric(f->srv[0].mport, name);
}

/* The key from a header: from X-Forwarded-For, the address the trusted
 * proxy appended (the last entry, of every line together), whatever the
 * client wrote before it; key= wins. The rule from a header when
 * configured; rule= wins. */
static void test_key_header(void **state)
{
    rlt_fx_t *f = *state;
    resp_t r;

    rlt_fx_start(f, 0, "--rule", "api=2/3600s", "--check-key-header",
                 "x-forwarded-for", "--check-rule-header", "X-RateLimit-Rule",
                 NULL);
    get(f->srv[0].hport, "/check?rule=api", "X-Forwarded-For: 10.0.0.1\r\n",
        &r);
    assert_int_equal(r.status, 200);
    assert_int_equal(hnum(&r, "X-RateLimit-Remaining"), 1);
    /* A client that writes its own X-Forwarded-For still spends the
     * counter of the address its proxy appended. */
    get(f->srv[0].hport, "/check?rule=api",
        "X-Forwarded-For:  192.168.0.9 , 10.0.0.1 \r\n", &r);
    assert_int_equal(r.status, 200);
    assert_int_equal(hnum(&r, "X-RateLimit-Remaining"), 0);
    /* Lines add up in order: the last line's last entry counts. */
    get(f->srv[0].hport, "/check?rule=api",
        "X-Forwarded-For: 10.0.0.2\r\nX-Forwarded-For: 10.0.0.1\r\n", &r);
    assert_int_equal(r.status, 429);
    /* key= wins over the header. */
    get(f->srv[0].hport, "/check?rule=api&key=10.0.0.2",
        "X-Forwarded-For: 10.0.0.1\r\n", &r);
    assert_int_equal(r.status, 200);
    assert_int_equal(hnum(&r, "X-RateLimit-Remaining"), 1);
    /* The rule from its header (Traefik forwardAuth style: a fixed URL). */
    get(f->srv[0].hport, "/check",
        "X-RateLimit-Rule: api\r\nX-Forwarded-For: 10.0.0.3\r\n", &r);
    assert_int_equal(r.status, 200);
    assert_int_equal(hnum(&r, "X-RateLimit-Remaining"), 1);
    get(f->srv[0].hport, "/check?rule=nope",
        "X-RateLimit-Rule: api\r\nX-Forwarded-For: 10.0.0.3\r\n", &r);
    assert_int_equal(r.status, 400);
    assert_string_equal(r.body, "bad request\n");
    /* No key anywhere; an empty last entry. The client sees a plain 400;
     * the reason is counted. */
    get(f->srv[0].hport, "/check?rule=api", "", &r);
    assert_int_equal(r.status, 400);
    assert_string_equal(r.body, "bad request\n");
    get(f->srv[0].hport, "/check?rule=api", "X-Forwarded-For: 1.2.3.4,\r\n",
        &r);
    assert_int_equal(r.status, 400);
    assert_int_equal(metric(f, "rl_check_rejected_total{reason=\"no_key\"}"),
                     2);
    assert_int_equal(
        metric(f, "rl_check_rejected_total{reason=\"unknown_rule\"}"), 1);
    assert_int_equal(rlt_server_stop(&f->srv[0]), 0);

    /* Two trusted proxies: the entry before the last. */
    rlt_fx_start(f, 0, "--rule", "api=1/3600s", "--check-key-header",
                 "X-Forwarded-For", "--check-xff-hops", "2",
                 "--check-error-details", NULL);
    get(f->srv[0].hport, "/check?rule=api",
        "X-Forwarded-For: 6.6.6.6, 10.0.0.7, 172.16.0.1\r\n", &r);
    assert_int_equal(r.status, 200);
    get(f->srv[0].hport, "/check?rule=api",
        "X-Forwarded-For: 7.7.7.7\r\nX-Forwarded-For: 10.0.0.7, 172.16.0.2"
        "\r\n",
        &r);
    assert_int_equal(r.status, 429);
    get(f->srv[0].hport, "/check?rule=api", "X-Forwarded-For: 172.16.0.1\r\n",
        &r);
    assert_int_equal(r.status, 400);
    assert_non_null(strstr(r.body, "fewer addresses"));
    assert_int_equal(rlt_server_stop(&f->srv[0]), 0);

    /* --check-xff-hops 0 takes the leftmost: what the client wrote. */
    rlt_fx_start(f, 0, "--rule", "api=1/3600s", "--check-key-header",
                 "X-Forwarded-For", "--check-xff-hops", "0", NULL, NULL);
    get(f->srv[0].hport, "/check?rule=api",
        "X-Forwarded-For: 9.9.9.9, 10.0.0.1\r\n", &r);
    assert_int_equal(r.status, 200);
    get(f->srv[0].hport, "/check?rule=api",
        "X-Forwarded-For: 9.9.9.9, 10.0.0.2\r\n", &r);
    assert_int_equal(r.status, 429);
    assert_int_equal(rlt_server_stop(&f->srv[0]), 0);
}

/* Bad input gets a clear 4xx, and the listener keeps serving. */
static void test_bad_input(void **state)
{
    static const struct {
        const char *target;
        int status;
        const char *body; /* a substring, or NULL */
    } cases[] = {
        {"/check?key=a", 400, "no rule"},
        {"/check?rule=api", 400, "no key"},
        {"/check?rule=nope&key=a", 400, "unknown rule 'nope'"},
        {"/check?rule=a%20b&key=a", 400, "rule name contains"},
        {"/check?rule=api&key=", 400, "key= is empty"},
        {"/check?rule=api&key=a%00b", 400, "NUL"},
        {"/check?rule=api&key=a%4", 400, "percent-escape"},
        {"/check?rule=api&key=a%zz", 400, "percent-escape"},
        {"/check?rule=api&key=a&key=b", 400, "twice"},
        {"/check?rule=api&key=a&cost=0", 400, "cost"},
        {"/check?rule=api&key=a&cost=-1", 400, "cost"},
        {"/check?rule=api&key=a&cost=4294967296", 400, "cost"},
        {"/check?rule=api&key=a&deny_status=500", 400, "deny_status"},
        {"/check?rule=api&key=a&deny_status=", 400, "deny_status"},
        {"/checks?rule=api&key=a", 404, NULL},
        {"/", 404, NULL},
    };
    static char target[16384], req[16384];
    rlt_fx_t *f = *state;
    resp_t r;
    size_t i;
    int n;

    /* The reasons in the body, as --check-error-details asks. */
    rlt_fx_start(f, 0, "--rule", "api=100/3600s", "--check-error-details", NULL,
                 NULL, NULL);
    for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        get(f->srv[0].hport, cases[i].target, "", &r);
        if (r.status != cases[i].status ||
            (cases[i].body != NULL && strstr(r.body, cases[i].body) == NULL))
            fail_msg("%s: %d '%s'", cases[i].target, r.status, r.body);
    }

    /* A key of 512 bytes, percent-encoded, is fine; 513 is not. */
    n = snprintf(target, sizeof(target), "/check?rule=api&key=");
    for (i = 0; i < 512; i++)
        n += snprintf(target + n, sizeof(target) - (size_t)n, "%%41");
    get(f->srv[0].hport, target, "", &r);
    assert_int_equal(r.status, 200);
    snprintf(target + n, sizeof(target) - (size_t)n, "B");
    get(f->srv[0].hport, target, "", &r);
    assert_int_equal(r.status, 400);
    assert_non_null(strstr(r.body, "longer than 512"));
    /* A rule name of 129 bytes. */
    n = snprintf(target, sizeof(target), "/check?key=a&rule=");
    for (i = 0; i < 129; i++)
        target[n++] = 'r';
    target[n] = '\0';
    get(f->srv[0].hport, target, "", &r);
    assert_int_equal(r.status, 400);
    assert_non_null(strstr(r.body, "longer than 128"));

    /* A target over 4 KiB: 414; a request line over 8 KiB: 414 and close;
     * headers over 8 KiB: 431 and close; 65 header lines: 431. */
    n = snprintf(target, sizeof(target), "/check?rule=api&key=a&pad=");
    memset(target + n, 'x', 4200);
    target[n + 4200] = '\0';
    get(f->srv[0].hport, target, "", &r);
    assert_int_equal(r.status, 414);
    memset(target + n, 'x', 9000);
    target[n + 9000] = '\0';
    n = snprintf(req, sizeof(req), "GET %s HTTP/1.1\r\n\r\n", target);
    fetch(f->srv[0].hport, req, (size_t)n, &r);
    assert_int_equal(r.status, 414);
    assert_true(r.closes);
    n = snprintf(req, sizeof(req),
                 "GET /check?rule=api&key=a HTTP/1.1\r\n"
                 "X-Pad: ");
    memset(req + n, 'p', 9000);
    n += 9000;
    n += snprintf(req + n, sizeof(req) - (size_t)n, "\r\n\r\n");
    fetch(f->srv[0].hport, req, (size_t)n, &r);
    assert_int_equal(r.status, 431);
    assert_true(r.closes);
    n = snprintf(req, sizeof(req), "GET /check?rule=api&key=a HTTP/1.1\r\n");
    for (i = 0; i < 65; i++)
        n += snprintf(req + n, sizeof(req) - (size_t)n, "X-H%zu: v\r\n", i);
    n += snprintf(req + n, sizeof(req) - (size_t)n, "\r\n");
    fetch(f->srv[0].hport, req, (size_t)n, &r);
    assert_int_equal(r.status, 431);

    /* Methods: POST, DELETE 405 with Allow; garbage 400 and close. */
    n = snprintf(req, sizeof(req),
                 "POST /check?rule=api&key=a HTTP/1.1\r\n"
                 "Content-Length: 0\r\n\r\n");
    fetch(f->srv[0].hport, req, (size_t)n, &r);
    assert_int_equal(r.status, 405);
    assert_non_null(strstr(r.head, "Allow: GET, HEAD"));
    n = snprintf(req, sizeof(req),
                 "DELETE /check?rule=api&key=a HTTP/1.1"
                 "\r\n\r\n");
    fetch(f->srv[0].hport, req, (size_t)n, &r);
    assert_int_equal(r.status, 405);
    fetch(f->srv[0].hport, "GARBAGE\r\n\r\n", 11, &r);
    assert_int_equal(r.status, 400);
    assert_true(r.closes);
    n = snprintf(req, sizeof(req),
                 "GET /check?rule=api&key=a HTTP/1.1\r\n"
                 "Content-Length: 5\r\n\r\nhello");
    fetch(f->srv[0].hport, req, (size_t)n, &r);
    assert_int_equal(r.status, 400);

    /* Still serving, and key "A"*512 was counted once. */
    get(f->srv[0].hport, "/check?rule=api&key=a", "", &r);
    assert_int_equal(r.status, 200);
    assert_int_equal(hnum(&r, "X-RateLimit-Remaining"), 99);
    assert_int_equal(rlt_server_stop(&f->srv[0]), 0);
}

/* 1,000 requests on one connection, written 50 at a time without waiting:
 * every one answered, in order (remaining counts down by one). */
static void test_keepalive_pipelined(void **state)
{
    static rd_t rd;
    static char batch[50 * 80];
    rlt_fx_t *f = *state;
    resp_t r;
    int fd, i, j, n;
    long expect = 99999;

    rlt_fx_start(f, 0, "--rule", "api=100000/3600s", NULL, NULL, NULL, NULL);
    fd = rlt_dial(f->srv[0].hport);
    assert_true(fd >= 0);
    rd.len = 0;
    for (i = 0; i < 20; i++) {
        n = 0;
        for (j = 0; j < 50; j++)
            n += snprintf(batch + n, sizeof(batch) - (size_t)n,
                          "GET /check?rule=api&key=k HTTP/1.1\r\n\r\n");
        assert_int_equal(rlt_send_all(fd, batch, (size_t)n), RL_OK);
        for (j = 0; j < 50; j++) {
            assert_int_equal(read_resp(fd, &rd, &r), 0);
            assert_int_equal(r.status, 200);
            assert_int_equal(hnum(&r, "X-RateLimit-Remaining"), expect);
            expect--;
        }
    }
    assert_int_equal(rd.len, 0);
    close(fd);
    assert_int_equal(rlt_server_stop(&f->srv[0]), 0);
}

/* The store is down and the fail mode closed: 503; open: 200. */
static void test_store_down(void **state)
{
    rlt_fx_t *f = *state;
    char redis[32];
    resp_t r;
    int dead = rlt_port_reserve(); /* reserved: nothing listens there */

    snprintf(redis, sizeof(redis), "127.0.0.1:%d", dead);
    rlt_fx_start(f, 0, "--rule", "api=5/3600s", "--redis", redis,
                 "--fail-closed", NULL);
    get(f->srv[0].hport, "/check?rule=api&key=a", "", &r);
    assert_int_equal(r.status, 503);
    assert_non_null(strstr(r.body, "fail-closed"));
    assert_int_equal(hnum(&r, "X-RateLimit-Limit"), 5);
    assert_int_equal(rlt_server_stop(&f->srv[0]), 0);

    rlt_fx_start(f, 0, "--rule", "api=5/3600s", "--redis", redis, NULL, NULL);
    get(f->srv[0].hport, "/check?rule=api&key=a", "", &r);
    assert_int_equal(r.status, 200);
    assert_int_equal(rlt_server_stop(&f->srv[0]), 0);
}

/* Returns 1 once the peer closes fd (end of file or reset) within ms. */
static int closed_within(int fd, int ms)
{
    uint64_t end = rlt_mono_ms() + (uint64_t)ms;
    char b[256];
    ssize_t n;

    while (rlt_mono_ms() < end) {
        n = recv(fd, b, sizeof(b), 0);
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK))
            return 1;
    }
    return 0;
}

/* SIGTERM: the idle connection closes, the half-sent request is answered
 * with Connection: close, then the server exits 0. */
static void test_stop(void **state)
{
    static const char first[] = "GET /check?rule=api&key=a HTTP/1.1\r\n";
    static rd_t rd;
    rlt_fx_t *f = *state;
    int idle, half, status;
    resp_t r;

    rlt_fx_start(f, 0, "--rule", "api=5/3600s", NULL, NULL, NULL, NULL);
    idle = rlt_dial(f->srv[0].hport);
    half = rlt_dial(f->srv[0].hport);
    assert_true(idle >= 0 && half >= 0);
    /* The idle one has been served once (a kept-alive connection). */
    assert_int_equal(rlt_send_all(idle, first, sizeof(first) - 1), RL_OK);
    assert_int_equal(rlt_send_all(idle, "\r\n", 2), RL_OK);
    rd.len = 0;
    assert_int_equal(read_resp(idle, &rd, &r), 0);
    assert_int_equal(r.status, 200);
    assert_int_equal(rlt_send_all(half, first, sizeof(first) - 1), RL_OK);
    /* Both connections are in the server before the signal. */
    get(f->srv[0].hport, "/check?rule=api&key=b", "", &r);
    assert_int_equal(r.status, 200);

    assert_int_equal(kill(f->srv[0].pid, SIGTERM), 0);
    assert_true(closed_within(idle, 3000));
    assert_int_equal(rlt_send_all(half, "\r\n", 2), RL_OK);
    rd.len = 0;
    assert_int_equal(read_resp(half, &rd, &r), 0);
    assert_int_equal(r.status, 200);
    assert_true(r.closes);
    assert_int_equal(hnum(&r, "X-RateLimit-Remaining"), 3);
    assert_true(closed_within(half, 3000));
    close(idle);
    close(half);
    status = rlt_server_stop(&f->srv[0]);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

/* Modes as for native requests: shadow allows what enforce would refuse
 * (counted as shadow_refused), off allows without counting. */
static void test_modes(void **state)
{
    static char page[1 << 17];
    char path[64];
    rlt_fx_t *f = *state;
    resp_t r;
    FILE *fp;

    snprintf(path, sizeof(path), "/tmp/rl-check-rules.%d.yaml", (int)getpid());
    fp = fopen(path, "w");
    assert_non_null(fp);
    fputs("rules:\n"
          "  sh:\n    limits: [1/1h]\n    mode: shadow\n"
          "  offr:\n    limits: [1/1h]\n    mode: off\n",
          fp);
    fclose(fp);
    rlt_fx_start(f, 0, "--config", path, NULL, NULL, NULL, NULL);
    get(f->srv[0].hport, "/check?rule=sh&key=a", "", &r);
    assert_int_equal(r.status, 200);
    assert_string_equal(r.body, "allowed\n");
    get(f->srv[0].hport, "/check?rule=sh&key=a", "", &r);
    assert_int_equal(r.status, 200);
    assert_non_null(strstr(r.body, "shadow"));
    assert_int_equal(hnum(&r, "Retry-After"), -1);
    get(f->srv[0].hport, "/check?rule=offr&key=a", "", &r);
    assert_int_equal(r.status, 200);
    get(f->srv[0].hport, "/check?rule=offr&key=a", "", &r);
    assert_int_equal(r.status, 200);
    assert_int_equal(hnum(&r, "X-RateLimit-Remaining"), 1);
    assert_int_equal(
        rlt_http_get(f->srv[0].mport, "/metrics", page, sizeof(page)), 200);
    assert_int_equal(rlt_sample(page, "rl_rule_decisions_total{rule=\"sh\","
                                      "result=\"shadow_refused\"}"),
                     1);
    assert_int_equal(rlt_sample(page, "rl_rule_decisions_total{rule=\"sh\","
                                      "result=\"allowed\"}"),
                     1);
    assert_int_equal(rlt_sample(page, "rl_rule_decisions_total{rule="
                                      "\"offr\",result=\"uncounted\"}"),
                     2);
    unlink(path);
    assert_int_equal(rlt_server_stop(&f->srv[0]), 0);
}

/* rl_requests_batched_total: checks handed to the batcher. */
static long long batched(const rlt_fx_t *f)
{
    return metric(f, "rl_requests_batched_total");
}

/* Answers that come late, with Redis stopped (SIGSTOP) so a batch waits
 * for --redis-timeout-ms: a client that closes before its answer comes
 * (the connection's memory must outlive it: ASan would catch a use after
 * free, and the server must go on), and a SIGTERM while an answer is
 * pending (answered, with Connection: close, then exit 0). */
static void test_late_answers(void **state)
{
    static const char req[] = "GET /check?rule=api&key=a HTTP/1.1\r\n\r\n";
    static rd_t rd;
    rlt_fx_t *f = *state;
    rlt_redis_t *redis = &f->redis;
    char raddr[32];
    int gone, kept, status, i;
    long long base;
    uint64_t deadline;
    resp_t r;

    if (rlt_redis_start(redis) != 0) {
        skip();
        return;
    }
    f->redis_on = 1;
    snprintf(raddr, sizeof(raddr), "127.0.0.1:%d", redis->port);
    rlt_fx_start(f, 0, "--rule", "api=100/3600s", "--redis", raddr,
                 "--redis-timeout-ms", "2000", NULL);
    /* Up: a decision from Redis. */
    for (i = 0; i < 100; i++) {
        get(f->srv[0].hport, "/check?rule=api&key=a", "", &r);
        /* A fail-open answer (Redis not up yet) consumes nothing. */
        if (r.status == 200 && hnum(&r, "X-RateLimit-Remaining") < 100)
            break;
        usleep(20000);
    }
    assert_true(i < 100);
    base = batched(f);
    rlt_redis_pause(redis, 1);
    gone = rlt_dial(f->srv[0].hport);
    kept = rlt_dial(f->srv[0].hport);
    assert_true(gone >= 0 && kept >= 0);
    assert_int_equal(rlt_send_all(gone, req, sizeof(req) - 1), RL_OK);
    assert_int_equal(rlt_send_all(kept, req, sizeof(req) - 1), RL_OK);
    /* Both are with the batcher (and Redis, stopped, holds the batch until
     * --redis-timeout-ms). */
    deadline = rlt_mono_ms() + 1500;
    while (batched(f) < base + 2 && rlt_mono_ms() < deadline)
        usleep(2000);
    assert_int_equal(batched(f), base + 2);
    close(gone); /* before its answer */
    assert_int_equal(kill(f->srv[0].pid, SIGTERM), 0);
    rd.len = 0;
    assert_int_equal(read_resp(kept, &rd, &r), 0); /* after the timeout */
    assert_int_equal(r.status, 200);               /* fail-open */
    assert_non_null(strstr(r.body, "allowed"));
    assert_true(r.closes);
    assert_true(closed_within(kept, 3000));
    close(kept);
    rlt_redis_pause(redis, 0);
    /* A second SIGTERM, while it finishes its stop: still exit 0. */
    status = rlt_server_stop(&f->srv[0]);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        fail_msg("rl-server %s %d", WIFEXITED(status) ? "exited" : "killed by",
                 WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        RLT_FX_TEST(test_limit),        RLT_FX_TEST(test_key_header),
        RLT_FX_TEST(test_bad_input),    RLT_FX_TEST(test_keepalive_pipelined),
        RLT_FX_TEST(test_store_down),   RLT_FX_TEST(test_stop),
        RLT_FX_TEST(test_late_answers), RLT_FX_TEST(test_modes),
    };

    signal(SIGPIPE, SIG_IGN);
    rlt_fx_use(
        &(rlt_fx_conf_t){.bin = RL_SERVER_BIN,
                         .log_level = "warn",
                         .args = (char *[]){"--http", "127.0.0.1:0", NULL},
                         .metrics = 1});
    return cmocka_run_group_tests(tests, NULL, NULL);
}
