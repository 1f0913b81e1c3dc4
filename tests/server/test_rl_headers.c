/* The rate-limit response headers of one decision (net/rl_headers.c). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "net/rl_headers.h"
#include "rl_error.h"

static char got[1024];

static int collect(void *arg, const char *name, const char *value)
{
    size_t n = strlen(got);

    (void)arg;
    snprintf(got + n, sizeof(got) - n, "%s: %s\n", name, value);
    return 0;
}

static int stop_at_second(void *arg, const char *name, const char *value)
{
    int *calls = arg;

    (void)name;
    (void)value;
    return ++*calls == 2 ? RL_ENOMEM : 0;
}

static void test_refused(void **state)
{
    rl_result_t r = {.code = RL_CODE_OVER_LIMIT, .limit = 5, .used = 5,
                     .remaining = 0, .reset_after_ms = 41001,
                     .retry_after_ms = 41001, .window_s = 60};

    (void)state;
    got[0] = '\0';
    assert_int_equal(rls_rl_headers(&r, "login", 5,
                                    RLS_HDR_X | RLS_HDR_DRAFT | RLS_HDR_RETRY,
                                    collect, NULL),
                     0);
    /* Seconds round up: a client that waits them is never early. */
    assert_string_equal(got, "X-RateLimit-Limit: 5\n"
                             "X-RateLimit-Remaining: 0\n"
                             "X-RateLimit-Reset: 42\n"
                             "RateLimit-Policy: \"login\";q=5;w=60\n"
                             "RateLimit: \"login\";r=0;t=42\n"
                             "Retry-After: 42\n");
}

static void test_allowed_and_subsets(void **state)
{
    rl_result_t r = {.code = RL_CODE_OK, .limit = 100, .used = 63,
                     .remaining = 37, .reset_after_ms = 21000,
                     .window_s = 3600};
    int calls = 0;

    (void)state;
    got[0] = '\0';
    /* No Retry-After when allowed, even when asked for. */
    assert_int_equal(rls_rl_headers(&r, NULL, 0,
                                    RLS_HDR_DRAFT | RLS_HDR_RETRY, collect,
                                    NULL),
                     0);
    assert_string_equal(got, "RateLimit-Policy: \"default\";q=100;w=3600\n"
                             "RateLimit: \"default\";r=37;t=21\n");
    got[0] = '\0';
    r.window_s = 0; /* no window known: no policy to name */
    assert_int_equal(rls_rl_headers(&r, "a", 1, RLS_HDR_DRAFT, collect, NULL),
                     0);
    assert_string_equal(got, "RateLimit: \"a\";r=37;t=21\n");
    /* The emitter's error stops the walk and comes back. */
    assert_int_equal(rls_rl_headers(&r, "a", 1, RLS_HDR_X, stop_at_second,
                                    &calls),
                     RL_ENOMEM);
    assert_int_equal(calls, 2);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_refused),
        cmocka_unit_test(test_allowed_and_subsets),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
