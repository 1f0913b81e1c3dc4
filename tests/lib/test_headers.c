/* The rate-limit headers of one decision (lib/headers.c), which librlc,
 * /check and Envoy answers all use. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "rl_error.h"
#include "rl_headers.h"

static char got[2048];

/* The n headers as "Name: value\n" lines in got. */
static const char *lines(const rl_hdr_t *h, int n)
{
    size_t k = 0;
    int i;

    got[0] = '\0';
    for (i = 0; i < n; i++)
        k += (size_t)snprintf(got + k, sizeof(got) - k, "%s: %s\n",
                              h[i].name, h[i].value);
    return got;
}

static void test_refused(void **state)
{
    rl_result_t r = {.code = RL_CODE_OVER_LIMIT, .limit = 5, .used = 5,
                     .remaining = 0, .reset_after_ms = 41001,
                     .retry_after_ms = 41001, .window_s = 60};
    rl_hdr_t h[RL_HDR_MAX];
    int n;

    (void)state;
    /* Decided at 1,700,000,018.999 s: the window ends at ...060. */
    n = rl_headers(&r, 1700000018999u, "login", 5, RL_HDR_ALL, h, RL_HDR_MAX);
    assert_int_equal(n, 7);
    /* Reset is the window's end in Unix seconds; deltas round up, so a
     * client that waits them is never early. */
    assert_string_equal(lines(h, n), "X-RateLimit-Limit: 5\n"
                                     "X-RateLimit-Used: 5\n"
                                     "X-RateLimit-Remaining: 0\n"
                                     "X-RateLimit-Reset: 1700000060\n"
                                     "RateLimit-Policy: \"login\";q=5;w=60\n"
                                     "RateLimit: \"login\";r=0;t=42\n"
                                     "Retry-After: 42\n");
}

static void test_allowed_and_subsets(void **state)
{
    rl_result_t r = {.code = RL_CODE_OK, .limit = 100, .used = 63,
                     .remaining = 37, .reset_after_ms = 21000,
                     .window_s = 3600};
    rl_hdr_t h[RL_HDR_MAX];
    int n;

    (void)state;
    /* No Retry-After when allowed, even when asked for. */
    n = rl_headers(&r, 0, NULL, 0, RL_HDR_IETF | RL_HDR_RETRY, h, RL_HDR_MAX);
    assert_string_equal(lines(h, n),
                        "RateLimit-Policy: \"default\";q=100;w=3600\n"
                        "RateLimit: \"default\";r=37;t=21\n");
    r.window_s = 0; /* no window known: a policy without w */
    n = rl_headers(&r, 0, "a", 1, RL_HDR_IETF, h, RL_HDR_MAX);
    assert_string_equal(lines(h, n), "RateLimit-Policy: \"a\";q=100\n"
                                     "RateLimit: \"a\";r=37;t=21\n");
    /* Too small an array: nothing written, RL_EFULL. */
    assert_int_equal(rl_headers(&r, 0, "a", 1, RL_HDR_ALL, h, 5), RL_EFULL);
    /* No counters (an error, a fail-open answer): no headers. */
    r.limit = 0;
    assert_int_equal(rl_headers(&r, 0, "a", 1, RL_HDR_ALL, h, RL_HDR_MAX), 0);
}

/* Policy names: quoted and escaped as structured-field strings; a name
 * too long or with a byte a header cannot carry is refused. */
static void test_policy_names(void **state)
{
    rl_result_t r = {.code = RL_CODE_OK, .limit = 2, .used = 1,
                     .remaining = 1, .reset_after_ms = 1000, .window_s = 1};
    char longname[RL_HDR_POLICY_MAX + 2];
    rl_hdr_t h[RL_HDR_MAX];
    int n;

    (void)state;
    n = rl_headers(&r, 0, "a\"b\\c", 5, RL_HDR_IETF, h, RL_HDR_MAX);
    assert_int_equal(n, 2);
    assert_string_equal(h[0].value, "\"a\\\"b\\\\c\";q=2;w=1");
    assert_int_equal(rl_headers(&r, 0, "a\nb", 3, RL_HDR_IETF, h, RL_HDR_MAX),
                     RL_EINVAL);
    memset(longname, 'x', sizeof(longname));
    assert_int_equal(rl_headers(&r, 0, longname, RL_HDR_POLICY_MAX + 1,
                                RL_HDR_IETF, h, RL_HDR_MAX),
                     RL_EINVAL);
    /* The longest name, fully escaped, still fits a value. */
    memset(longname, '"', RL_HDR_POLICY_MAX);
    n = rl_headers(&r, 0, longname, RL_HDR_POLICY_MAX, RL_HDR_IETF, h,
                   RL_HDR_MAX);
    assert_int_equal(n, 2);
    assert_int_equal(strlen(h[1].value), 2 * RL_HDR_POLICY_MAX + 2 +
                                             strlen(";r=1;t=1"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_refused),
        cmocka_unit_test(test_allowed_and_subsets),
        cmocka_unit_test(test_policy_names),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
