/* The runtime switches hash as rls_switches_parse reads it (policy/
 * runtime.c): cases fuzz_switches found. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "policy/runtime.h"
#include "rl_error.h"

static size_t parse1(rls_switches_t *sw, const char *f, size_t fl,
                     const char *v, size_t vl)
{
    const char *fs[1] = {f}, *vs[1] = {v};
    size_t fls[1] = {fl}, vls[1] = {vl}, bad = 99;

    assert_int_equal(rls_switches_parse(sw, 1, fs, fls, vs, vls, &bad), RL_OK);
    return bad;
}

/* "mode:api\0x" was stored as the rule "api" (cut at the NUL) and
 * applied to it; a name no rule can have is a bad field now. */
static void test_rule_name_with_nul(void **state)
{
    static const char f[] = "mode:api\0x";
    rls_switches_t sw;

    (void)state;
    assert_int_equal(parse1(&sw, f, sizeof(f) - 1, "off", 3), 1);
    assert_int_equal(sw.n, 0);
    rls_switches_free(&sw);
    assert_int_equal(parse1(&sw, "scale:a b", 9, "2", 1), 1);
    assert_int_equal(sw.n, 0);
    rls_switches_free(&sw);
    assert_int_equal(parse1(&sw, "mode:api", 8, "off", 3), 0);
    assert_int_equal(sw.n, 1);
    assert_string_equal(sw.items[0].rule, "api");
    rls_switches_free(&sw);
}

/* The poller's look at the version and the parse read it alike: a
 * version of 40 digits was 5 to the one and 0 (too long) to the other,
 * and the switches were applied again every poll. */
static void test_version_read_alike(void **state)
{
    static const char *const vs[] = {
        "5", "0000000000000000000000000000000000000005", " 7", "7x", "",
        "-1", "9223372036854775807", "9223372036854775808", "1e3", "+3"};
    static const int64_t want[] = {5, 5, 0, 0, 0, 0, INT64_MAX, 0, 0, 0};
    size_t i;

    (void)state;
    for (i = 0; i < sizeof(vs) / sizeof(vs[0]); i++) {
        rls_switches_t sw;
        int64_t v = -1;
        size_t bad = parse1(&sw, "version", 7, vs[i], strlen(vs[i]));
        int rc = rls_switches_version(vs[i], strlen(vs[i]), &v);
        assert_int_equal(v, want[i]);
        assert_int_equal(sw.version, v);
        assert_int_equal(bad, rc == RL_OK ? 0 : 1);
        rls_switches_free(&sw);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rule_name_with_nul),
        cmocka_unit_test(test_version_read_alike),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
