/* The metrics listener's HTTP request-head parser, fed valid heads whole,
 * in every prefix and pipelined, and every kind of malformed input. Input is
 * placed right before a PROT_NONE page, so a read one byte past the end
 * faults at once instead of passing by luck. */
#define _DEFAULT_SOURCE /* MAP_ANONYMOUS */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cmocka.h>

#include "rl_error.h"
#include "net/http.h"

/* A buffer whose last byte is followed by an inaccessible page. */
static char *g_area;
static size_t g_area_len, g_page;

static int guard_setup(void **state)
{
    (void)state;
    g_page = (size_t)sysconf(_SC_PAGESIZE);
    /* Room for the largest input used here (over the head limit) plus the
     * guard page. */
    g_area_len = (2 * RLS_HTTP_HEAD_MAX / g_page + 2) * g_page;
    g_area = mmap(NULL, g_area_len + g_page, PROT_READ | PROT_WRITE,
                  MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (g_area == MAP_FAILED)
        return -1;
    return mprotect(g_area + g_area_len, g_page, PROT_NONE);
}

static int guard_teardown(void **state)
{
    (void)state;
    munmap(g_area, g_area_len + g_page);
    return 0;
}

/* Copies n bytes so that they end right at the guard page. */
static const char *at_guard(const void *p, size_t n)
{
    char *dst;

    assert_true(n <= g_area_len);
    dst = g_area + g_area_len - n;
    if (n > 0)
        memcpy(dst, p, n);
    return dst;
}

static int parse_n(const void *p, size_t n, rls_http_req_t *q)
{
    return rls_http_parse(at_guard(p, n), n, q);
}

static int parse_s(const char *s, rls_http_req_t *q)
{
    return parse_n(s, strlen(s), q);
}

static void assert_mem(const char *p, size_t n, const char *want)
{
    assert_int_equal(n, strlen(want));
    assert_memory_equal(p, want, n);
}

static const char *const valid[] = {
    "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1:9090\r\n"
    "User-Agent: Prometheus/2.45\r\nAccept: text/plain;version=0.0.4\r\n"
    "Accept-Encoding: gzip\r\nX-Prometheus-Scrape-Timeout-Seconds: 10\r\n"
    "\r\n",
    "GET /healthz HTTP/1.0\r\n\r\n",
    "HEAD /healthz?probe=1 HTTP/1.1\nHost: x\n\n",
    "OPTIONS * HTTP/1.1\r\nConnection: keep-alive\r\n\r\n",
    "\r\nGET / HTTP/1.1\r\nX-Empty:\r\nX-Tab:\tv\t\r\n\r\n",
};

static void test_valid(void **state)
{
    static const char req[] =
        "GET /metrics?x=1 HTTP/1.1\r\nHost: a\r\nAccept: */*\r\n\r\n";
    rls_http_req_t q;

    (void)state;
    assert_int_equal(parse_s(req, &q), RL_OK);
    assert_mem(q.method, q.method_len, "GET");
    assert_mem(q.target, q.target_len, "/metrics?x=1");
    assert_int_equal(rls_http_path_len(&q), strlen("/metrics"));
    assert_int_equal(q.minor, 1);
    assert_int_equal(q.keep_alive, 1);
    assert_int_equal(q.nheaders, 2);
    assert_int_equal(q.head_len, strlen(req));

    /* Bare LF line ends and a stray leading CRLF are accepted. */
    assert_int_equal(parse_s(valid[2], &q), RL_OK);
    assert_mem(q.method, q.method_len, "HEAD");
    assert_int_equal(q.head_len, strlen(valid[2]));
    assert_int_equal(parse_s(valid[4], &q), RL_OK);
    assert_mem(q.target, q.target_len, "/");
    assert_int_equal(q.nheaders, 2);
}

/* Every proper prefix of a valid head is "need more", never an error and
 * never a success; the whole head parses to its full length. */
static void test_every_prefix(void **state)
{
    rls_http_req_t q;
    size_t i, k, n;

    (void)state;
    for (i = 0; i < sizeof(valid) / sizeof(valid[0]); i++) {
        n = strlen(valid[i]);
        for (k = 0; k < n; k++)
            assert_int_equal(parse_n(valid[i], k, &q), RL_EAGAIN);
        assert_int_equal(parse_n(valid[i], n, &q), RL_OK);
        assert_int_equal(q.head_len, n);
    }
}

/* Two or three requests in one buffer: each parse consumes exactly one
 * head, and what follows it is the next request untouched. */
static void test_pipelined(void **state)
{
    char buf[1024];
    const char *p;
    rls_http_req_t q;
    size_t n = 0, off = 0, i;
    int count = 0;

    (void)state;
    for (i = 0; i < 3; i++) {
        size_t l = strlen(valid[i]);
        memcpy(buf + n, valid[i], l);
        n += l;
    }
    p = at_guard(buf, n);
    while (off < n) {
        assert_int_equal(rls_http_parse(p + off, n - off, &q), RL_OK);
        assert_int_equal(q.head_len, strlen(valid[count]));
        off += q.head_len;
        count++;
    }
    assert_int_equal(count, 3);
    assert_int_equal(off, n);

    /* A whole head followed by half of the next: the first parses, the
     * rest is "need more". */
    assert_int_equal(rls_http_parse(p, strlen(valid[0]) + 5, &q), RL_OK);
    assert_int_equal(rls_http_parse(p + q.head_len, 5, &q), RL_EAGAIN);
}

static void test_keep_alive(void **state)
{
    static const struct {
        const char *req;
        int ka;
    } cases[] = {
        {"GET / HTTP/1.1\r\n\r\n", 1},
        {"GET / HTTP/1.1\r\nConnection: close\r\n\r\n", 0},
        {"GET / HTTP/1.1\r\nconnection: Upgrade, CLOSE \r\n\r\n", 0},
        {"GET / HTTP/1.0\r\n\r\n", 0},
        {"GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n", 1},
        {"GET / HTTP/1.0\r\nConnection: keep-alive\r\n"
         "Connection: close\r\n\r\n",
         0},
        {"GET / HTTP/1.1\r\nConnection: closed\r\n\r\n", 1},
    };
    rls_http_req_t q;
    size_t i;

    (void)state;
    for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        assert_int_equal(parse_s(cases[i].req, &q), RL_OK);
        assert_int_equal(q.keep_alive, cases[i].ka);
    }
}

/* Inputs that can never become a valid head are refused as soon as the
 * offending byte is seen, whatever follows. */
static void test_malformed(void **state)
{
    static const char *const bad[] = {
        /* method */
        " GET / HTTP/1.1\r\n\r\n",
        "G@T / HTTP/1.1\r\n\r\n",
        "GET\t/ HTTP/1.1\r\n\r\n",
        "ABCDEFGHIJKLMNOPQ / HTTP/1.1\r\n\r\n",         /* 17 bytes: too long */
        "\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03", /* TLS hello */
        "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",             /* h2 preface */
        /* target */
        "GET  / HTTP/1.1\r\n\r\n",
        "GET /a\x7f HTTP/1.1\r\n\r\n",
        "GET /\xc3\xa9 HTTP/1.1\r\n\r\n",
        /* version */
        "GET /\r\n\r\n",
        "GET / HTTP/1.2\r\n\r\n",
        "GET / HTTP/2.0\r\n\r\n",
        "GET / http/1.1\r\n\r\n",
        "GET / HTTP/1.1 \r\n\r\n",
        "GET / HTTP/1.1\rX\n\r\n",
        /* header lines */
        "GET / HTTP/1.1\r\nHost\r\n\r\n",
        "GET / HTTP/1.1\r\nHost a\r\n\r\n",
        "GET / HTTP/1.1\r\nHost : a\r\n\r\n",
        "GET / HTTP/1.1\r\n: a\r\n\r\n",
        "GET / HTTP/1.1\r\nHost: a\r\n folded\r\n\r\n",
        "GET / HTTP/1.1\r\nHost: a\rb\r\n\r\n",
        "GET / HTTP/1.1\r\nHost: a\r\n\r\r\n",
        "GET / HTTP/1.1\r\nX: \x01\r\n\r\n",
        "GET / HTTP/1.1\r\nX: a\x7f\r\n\r\n",
        /* a length that is not digits, twice, or no length at all */
        "GET / HTTP/1.1\r\nContent-Length: -0\r\n\r\n",
        "GET / HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\n",
        "GET / HTTP/1.1\r\nContent-Length: 0x5\r\n\r\n",
        "GET / HTTP/1.1\r\nContent-Length:\r\n\r\n",
        "GET / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
        /* more than four leading empty lines */
        "\r\n\r\n\r\n\r\n\r\nGET / HTTP/1.1\r\n\r\n",
    };
    rls_http_req_t q;
    size_t i;

    (void)state;
    for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        int rc = parse_s(bad[i], &q);
        if (rc != RL_EINVAL)
            fail_msg("case %zu parsed as %d: %s", i, rc, bad[i]);
    }
}

/* A NUL anywhere in a head makes it invalid: in the method, the target,
 * the version, a header name or value. */
static void test_nul_bytes(void **state)
{
    static const char req[] = "GET /metrics HTTP/1.1\r\nHost: a\r\n\r\n";
    char buf[sizeof(req)];
    rls_http_req_t q;
    size_t i, n = sizeof(req) - 1;

    (void)state;
    for (i = 0; i < n; i++) {
        memcpy(buf, req, n);
        buf[i] = '\0';
        if (parse_n(buf, n, &q) != RL_EINVAL)
            fail_msg("NUL at offset %zu accepted", i);
    }
}

/* The head limit: exactly RLS_HTTP_HEAD_MAX bytes is fine, one more is
 * "too big" whether or not more input follows, and an endless header line
 * is refused at the limit instead of waiting. */
static void test_oversize(void **state)
{
    static const char pre[] = "GET / HTTP/1.1\r\nX-Pad: ";
    static char buf[2 * RLS_HTTP_HEAD_MAX];
    rls_http_req_t q;
    size_t fill;

    (void)state;
    /* head = pre + fill x 'a' + "\r\n\r\n" */
    fill = RLS_HTTP_HEAD_MAX - (sizeof(pre) - 1) - 4;
    memcpy(buf, pre, sizeof(pre) - 1);
    memset(buf + sizeof(pre) - 1, 'a', fill);
    memcpy(buf + sizeof(pre) - 1 + fill, "\r\n\r\n", 4);
    assert_int_equal(parse_n(buf, RLS_HTTP_HEAD_MAX, &q), RL_OK);
    assert_int_equal(q.head_len, RLS_HTTP_HEAD_MAX);
    /* With more bytes after it, still exactly one head. */
    memcpy(buf + RLS_HTTP_HEAD_MAX, "GET", 3);
    assert_int_equal(parse_n(buf, RLS_HTTP_HEAD_MAX + 3, &q), RL_OK);
    assert_int_equal(q.head_len, RLS_HTTP_HEAD_MAX);

    /* One byte longer. */
    memcpy(buf, pre, sizeof(pre) - 1);
    memset(buf + sizeof(pre) - 1, 'a', fill + 1);
    memcpy(buf + sizeof(pre) - 1 + fill + 1, "\r\n\r\n", 4);
    assert_int_equal(parse_n(buf, RLS_HTTP_HEAD_MAX + 1, &q), RL_EFULL);
    assert_int_equal(parse_n(buf, RLS_HTTP_HEAD_MAX + 4, &q), RL_EFULL);
    assert_int_equal(parse_n(buf, RLS_HTTP_HEAD_MAX, &q), RL_EFULL);
    assert_int_equal(parse_n(buf, RLS_HTTP_HEAD_MAX - 1, &q), RL_EAGAIN);

    /* A header line that never ends. */
    memset(buf + sizeof(pre) - 1, 'b', sizeof(buf) - sizeof(pre) + 1);
    assert_int_equal(parse_n(buf, sizeof(buf), &q), RL_EFULL);
}

static void test_header_count(void **state)
{
    static char buf[RLS_HTTP_HEAD_MAX];
    rls_http_req_t q;
    size_t n;
    int i;

    (void)state;
    n = (size_t)sprintf(buf, "GET / HTTP/1.1\r\n");
    for (i = 0; i < RLS_HTTP_HEADERS_MAX; i++)
        n += (size_t)sprintf(buf + n, "X-%d: v\r\n", i);
    memcpy(buf + n, "\r\n", 2);
    assert_int_equal(parse_n(buf, n + 2, &q), RL_OK);
    assert_int_equal(q.nheaders, RLS_HTTP_HEADERS_MAX);
    n += (size_t)sprintf(buf + n, "X-last: v\r\n\r\n");
    assert_int_equal(parse_n(buf, n, &q), RL_EINVAL);
}

static void test_content_length_zero(void **state)
{
    rls_http_req_t q;

    (void)state;
    assert_int_equal(parse_s("GET / HTTP/1.1\r\nContent-Length: 0\r\n\r\n", &q),
                     RL_OK);
    assert_int_equal(
        parse_s("POST /metrics HTTP/1.1\r\ncontent-length:000\r\n\r\n", &q),
        RL_OK);
    assert_mem(q.method, q.method_len, "POST");
    assert_int_equal(q.content_length, 0);
}

/* A body's length is reported for the listener to read or refuse; the
 * body itself is not part of the head. A Transfer-Encoding is refused and
 * said so (te), a length past 2^64 saturates. */
static void test_content_length(void **state)
{
    rls_http_req_t q;

    (void)state;
    assert_int_equal(
        parse_s("POST /json HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello", &q),
        RL_OK);
    assert_int_equal(q.content_length, 5);
    assert_int_equal(q.head_len, strlen("POST /json HTTP/1.1\r\n"
                                        "Content-Length: 5\r\n\r\n"));
    assert_null(q.body);
    assert_int_equal(
        parse_s("POST / HTTP/1.1\r\nContent-Length: 01\r\n\r\n", &q), RL_OK);
    assert_int_equal(q.content_length, 1);
    assert_int_equal(parse_s("POST / HTTP/1.1\r\nContent-Length: "
                             "99999999999999999999999\r\n\r\n",
                             &q),
                     RL_OK);
    assert_true(q.content_length == UINT64_MAX);
    assert_int_equal(parse_s("POST / HTTP/1.1\r\nTransfer-Encoding: "
                             "chunked\r\n\r\n",
                             &q),
                     RL_EINVAL);
    assert_int_equal(q.te, 1);
    assert_int_equal(parse_s("POST / HTTP/1.1\r\nX: \x01\r\n\r\n", &q),
                     RL_EINVAL);
    assert_int_equal(q.te, 0);
}

/* Pseudo-random garbage never parses as a request and never reads past its
 * end; printable garbage with line ends mixed in neither. */
static void test_garbage(void **state)
{
    static const char alphabet[] = "GET /HTP1.:\r\n \t\0\x7f\xff";
    static char buf[512];
    rls_http_req_t q;
    uint32_t x = 12345;
    int round, rc;
    size_t i, n;

    (void)state;
    for (round = 0; round < 20000; round++) {
        n = 1 + round % sizeof(buf);
        for (i = 0; i < n; i++) {
            x = x * 1103515245u + 12345u;
            buf[i] = round % 2 ? (char)(x >> 16)
                               : alphabet[(x >> 16) % (sizeof(alphabet) - 1)];
        }
        rc = parse_n(buf, n, &q);
        if (rc == RL_OK) {
            /* Only possible if the garbage happens to be a valid head: then
             * the parse must have been self-consistent. */
            assert_true(q.head_len <= n);
            assert_true(q.method_len > 0 && q.target_len > 0);
        } else {
            assert_true(rc == RL_EAGAIN || rc == RL_EINVAL);
        }
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_valid),
        cmocka_unit_test(test_every_prefix),
        cmocka_unit_test(test_pipelined),
        cmocka_unit_test(test_keep_alive),
        cmocka_unit_test(test_malformed),
        cmocka_unit_test(test_nul_bytes),
        cmocka_unit_test(test_oversize),
        cmocka_unit_test(test_header_count),
        cmocka_unit_test(test_content_length_zero),
        cmocka_unit_test(test_content_length),
        cmocka_unit_test(test_garbage),
    };

    return cmocka_run_group_tests(tests, guard_setup, guard_teardown);
}
