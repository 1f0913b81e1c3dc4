/* The HTTP helpers: exact headers for allowed and refused results, the
 * status to send, and misuse. Pure functions, so the expected text is
 * written out in full. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "rlc.h"

/* 5 per 60 s, 3 used, 41234 ms to go; the clock stands at
 * 1700000018.766 s, so the window ends at exactly 1700000060 s. */
static rlc_result_t allowed(void)
{
    rlc_result_t r;

    memset(&r, 0, sizeof(r));
    r.code = RLC_CODE_OK;
    r.window_s = 60;
    r.id = 7;
    r.limit = 5;
    r.used = 3;
    r.remaining = 2;
    r.reset_after_ms = 41234;
    r.unix_ms = UINT64_C(1700000018766);
    return r;
}

static rlc_result_t refused(void)
{
    rlc_result_t r = allowed();

    r.code = RLC_CODE_OVER_LIMIT;
    r.used = 6;
    r.remaining = 0;
    r.retry_after_ms = 41234;
    return r;
}

static void test_allowed_headers(void **state)
{
    rlc_result_t r = allowed();
    rlc_http_header_t h[RLC_HTTP_HEADERS_MAX];
    char buf[1024];
    int n;

    (void)state;
    assert_int_equal(rlc_http_status(&r), 200);
    assert_string_equal(rlc_http_reason(200), "OK");
    assert_int_equal(rlc_result_allowed(&r), 1);

    n = rlc_http_headers(&r, NULL, h, RLC_HTTP_HEADERS_MAX);
    assert_int_equal(n, 6);
    assert_string_equal(h[0].name, "X-RateLimit-Limit");
    assert_string_equal(h[0].value, "5");
    assert_string_equal(h[3].name, "X-RateLimit-Reset");
    assert_string_equal(h[3].value, "1700000060");

    n = rlc_http_format(&r, NULL, buf, sizeof(buf));
    assert_string_equal(buf, "X-RateLimit-Limit: 5\r\n"
                             "X-RateLimit-Used: 3\r\n"
                             "X-RateLimit-Remaining: 2\r\n"
                             "X-RateLimit-Reset: 1700000060\r\n"
                             "RateLimit-Policy: \"default\";q=5;w=60\r\n"
                             "RateLimit: \"default\";r=2;t=42\r\n");
    assert_int_equal(n, (int)strlen(buf));
}

static void test_refused_headers(void **state)
{
    rlc_result_t r = refused();
    char buf[1024];

    (void)state;
    assert_int_equal(rlc_http_status(&r), 429);
    assert_string_equal(rlc_http_reason(429), "Too Many Requests");
    assert_int_equal(rlc_result_allowed(&r), 0);
    assert_true(rlc_http_format(&r, "per-user", buf, sizeof(buf)) > 0);
    assert_string_equal(buf, "X-RateLimit-Limit: 5\r\n"
                             "X-RateLimit-Used: 6\r\n"
                             "X-RateLimit-Remaining: 0\r\n"
                             "X-RateLimit-Reset: 1700000060\r\n"
                             "RateLimit-Policy: \"per-user\";q=5;w=60\r\n"
                             "RateLimit: \"per-user\";r=0;t=42\r\n"
                             "Retry-After: 42\r\n");
}

/* Seconds round up for t and Retry-After (early retries are refused), and
 * the reset time rounds to the nearest second (a small clock skew must not
 * move it by one). */
static void test_rounding(void **state)
{
    rlc_result_t r = refused();
    rlc_http_header_t h[RLC_HTTP_HEADERS_MAX];

    (void)state;
    r.reset_after_ms = 60000;
    r.retry_after_ms = 1;
    r.unix_ms = UINT64_C(1700000000003); /* 3 ms ahead of the server */
    assert_int_equal(rlc_http_headers(&r, "p", h, 7), 7);
    assert_string_equal(h[3].value, "1700000060");
    assert_string_equal(h[5].value, "\"p\";r=0;t=60");
    assert_string_equal(h[6].value, "1");
    r.unix_ms = UINT64_C(1699999999997); /* 3 ms behind */
    assert_int_equal(rlc_http_headers(&r, "p", h, 7), 7);
    assert_string_equal(h[3].value, "1700000060");
    r.reset_after_ms = 0;
    r.retry_after_ms = 0;
    assert_int_equal(rlc_http_headers(&r, "p", h, 7), 7);
    assert_string_equal(h[5].value, "\"p\";r=0;t=0");
    assert_string_equal(h[6].value, "0");
}

/* A rule's window is not in the answer: w is left out. */
static void test_rule_has_no_window(void **state)
{
    rlc_result_t r = allowed();
    rlc_http_header_t h[RLC_HTTP_HEADERS_MAX];

    (void)state;
    r.window_s = 0;
    assert_int_equal(rlc_http_headers(&r, "search", h, 7), 6);
    assert_string_equal(h[4].name, "RateLimit-Policy");
    assert_string_equal(h[4].value, "\"search\";q=5");
}

static void test_policy_escaping(void **state)
{
    rlc_result_t r = allowed();
    rlc_http_header_t h[RLC_HTTP_HEADERS_MAX];
    char longname[RLC_POLICY_MAX + 2];

    (void)state;
    assert_int_equal(rlc_http_headers(&r, "a\"b\\c", h, 7), 6);
    assert_string_equal(h[4].value, "\"a\\\"b\\\\c\";q=5;w=60");
    assert_int_equal(rlc_http_headers(&r, "bad\r\nX-Evil: 1", h, 7),
                     RLC_EINVAL);
    assert_int_equal(rlc_http_headers(&r, "", h, 7), RLC_EINVAL);
    assert_int_equal(rlc_http_headers(&r, "caf\xc3\xa9", h, 7), RLC_EINVAL);
    memset(longname, 'x', sizeof(longname) - 1);
    longname[sizeof(longname) - 1] = '\0';
    assert_int_equal(rlc_http_headers(&r, longname, h, 7), RLC_EINVAL);
    longname[RLC_POLICY_MAX] = '\0';
    assert_int_equal(rlc_http_headers(&r, longname, h, 7), 6);
}

/* Decisions made by the client's fail_mode, and errors, say nothing about
 * usage: no rate-limit headers, and the status follows the decision. */
static void test_policy_and_error_results(void **state)
{
    rlc_result_t r = allowed();
    rlc_http_header_t h[RLC_HTTP_HEADERS_MAX];
    char buf[64];

    (void)state;
    memset(&r, 0, sizeof(r));
    r.code = RLC_CODE_OK;
    r.status = RLC_ETIMEDOUT;
    r.flags = RLC_RESULT_FAILED_OPEN;
    assert_int_equal(rlc_http_status(&r), 200);
    assert_int_equal(rlc_http_headers(&r, NULL, h, 7), 0);
    assert_int_equal(rlc_http_format(&r, NULL, buf, sizeof(buf)), 0);
    assert_string_equal(buf, "");

    r.code = RLC_CODE_ERROR;
    r.flags = RLC_RESULT_FAILED_CLOSED;
    assert_int_equal(rlc_http_status(&r), 503);
    assert_string_equal(rlc_http_reason(503), "Service Unavailable");
    assert_int_equal(rlc_http_headers(&r, NULL, h, 7), 0);

    r.status = 0;
    r.flags = 0;
    assert_int_equal(rlc_http_status(&r), 503);
    assert_int_equal(rlc_http_headers(&r, NULL, h, 7), 0);
    assert_int_equal(rlc_http_status(NULL), 503);
    assert_int_equal(rlc_result_allowed(NULL), 0);
    assert_string_equal(rlc_http_reason(418), "");
}

static void test_misuse(void **state)
{
    rlc_result_t r = refused();
    rlc_http_header_t h[RLC_HTTP_HEADERS_MAX];
    char buf[300];

    (void)state;
    assert_int_equal(rlc_http_headers(NULL, NULL, h, 7), RLC_EINVAL);
    assert_int_equal(rlc_http_headers(&r, NULL, NULL, 7), RLC_EINVAL);
    assert_int_equal(rlc_http_headers(&r, NULL, h, 6), RLC_EFULL);
    assert_int_equal(rlc_http_format(&r, NULL, NULL, 10), RLC_EINVAL);
    assert_int_equal(rlc_http_format(&r, NULL, buf, 0), RLC_EINVAL);
    /* One byte short of the whole block. */
    int need = rlc_http_format(&r, NULL, buf, sizeof(buf));
    assert_true(need > 0);
    assert_int_equal(rlc_http_format(&r, NULL, buf, (size_t)need), RLC_EFULL);
    assert_string_equal(buf, "");
    assert_int_equal(rlc_http_format(&r, NULL, buf, (size_t)need + 1), need);
}

static void test_strerror_and_codes(void **state)
{
    (void)state;
    assert_string_equal(rlc_strerror(RLC_ETIMEDOUT), "timed out");
    assert_string_equal(rlc_strerror(RLC_EKEYLONG),
                        "key is longer than 512 bytes");
    assert_string_equal(rlc_strerror(-9999), "unknown error");
    assert_string_equal(rlc_code_name(RLC_CODE_OVER_LIMIT), "OVER_LIMIT");
    assert_string_equal(rlc_code_name(42), "UNKNOWN");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_allowed_headers),
        cmocka_unit_test(test_refused_headers),
        cmocka_unit_test(test_rounding),
        cmocka_unit_test(test_rule_has_no_window),
        cmocka_unit_test(test_policy_escaping),
        cmocka_unit_test(test_policy_and_error_results),
        cmocka_unit_test(test_misuse),
        cmocka_unit_test(test_strerror_and_codes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
