/* The batching flags (flags.c): --batch-hold-us and
 * --batches-in-flight, their defaults, bounds and refusals. The hold itself
 * is tested in test_batch_flow.c (test_hold) and end to end in
 * test_rl_bench. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "flags.h"
#include "rl_error.h"

static int parse(rls_flags_t *c, char *err, size_t errlen, int argc,
                 char **argv)
{
    rls_flags_defaults(c);
    return rls_flags_parse(c, argc, argv, stdout, err, errlen);
}

static void test_hold_flag(void **state)
{
    static rls_flags_t c;
    char err[512];
    char *none[] = {"rl-server"};
    char *ok[] = {"rl-server", "--batch-hold-us", "300"};
    char *max[] = {"rl-server", "--batch-hold-us", "10000"};
    char *bad[][3] = {{"rl-server", "--batch-hold-us", "10001"},
                      {"rl-server", "--batch-hold-us", "-1"},
                      {"rl-server", "--batch-hold-us", "3ms"},
                      {"rl-server", "--batch-hold-us", ""}};
    char *missing[] = {"rl-server", "--batch-hold-us"};
    size_t i;

    (void)state;
    assert_int_equal(parse(&c, err, sizeof(err), 1, none), RL_OK);
    assert_int_equal(c.batch_hold_us, 0); /* off unless asked */
    assert_int_equal(c.batches_in_flight, 1);
    assert_int_equal(parse(&c, err, sizeof(err), 3, ok), RL_OK);
    assert_int_equal(c.batch_hold_us, 300);
    assert_int_equal(parse(&c, err, sizeof(err), 3, max), RL_OK);
    assert_int_equal(c.batch_hold_us, 10000);
    for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        err[0] = '\0';
        if (parse(&c, err, sizeof(err), 3, bad[i]) == RL_OK)
            fail_msg("accepted --batch-hold-us \"%s\"", bad[i][2]);
        if (strstr(err, "--batch-hold-us") == NULL)
            fail_msg("error does not name the flag: %s", err);
    }
    err[0] = '\0';
    assert_int_not_equal(parse(&c, err, sizeof(err), 2, missing), RL_OK);
    assert_non_null(strstr(err, "--batch-hold-us"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hold_flag),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
