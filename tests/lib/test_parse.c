/* rl_parse_u64(n) and rl_parse_hostport: the one parser of numbers and
 * addresses that rl-server, rl-check, rl-bench and librlc share. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "rl_error.h"
#include "rl_parse.h"

static void test_u64(void **state)
{
    uint64_t v = 77;

    (void)state;
    assert_int_equal(rl_parse_u64("0", 0, 10, &v), RL_OK);
    assert_int_equal(v, 0);
    assert_int_equal(rl_parse_u64("10", 0, 10, &v), RL_OK);
    assert_int_equal(v, 10);
    assert_int_equal(rl_parse_u64("18446744073709551615", 0, UINT64_MAX, &v),
                     RL_OK);
    assert_true(v == UINT64_MAX);

    v = 77;
    assert_int_equal(rl_parse_u64("11", 0, 10, &v), RL_EINVAL);
    assert_int_equal(rl_parse_u64("4", 5, 10, &v), RL_EINVAL);
    assert_int_equal(rl_parse_u64("18446744073709551616", 0, UINT64_MAX, &v),
                     RL_EINVAL);
    assert_int_equal(rl_parse_u64("", 0, 10, &v), RL_EINVAL);
    assert_int_equal(rl_parse_u64(NULL, 0, 10, &v), RL_EINVAL);
    assert_int_equal(rl_parse_u64("-1", 0, UINT64_MAX, &v), RL_EINVAL);
    assert_int_equal(rl_parse_u64("+1", 0, 10, &v), RL_EINVAL);
    assert_int_equal(rl_parse_u64(" 1", 0, 10, &v), RL_EINVAL);
    assert_int_equal(rl_parse_u64("1 ", 0, 10, &v), RL_EINVAL);
    assert_int_equal(rl_parse_u64("1x", 0, 10, &v), RL_EINVAL);
    assert_int_equal(rl_parse_u64("0x1", 0, 10, &v), RL_EINVAL);
    assert_int_equal(v, 77);
}

/* The length-taking form reads exactly len bytes: what follows them (no
 * NUL, more digits) is not part of the number. */
static void test_u64n(void **state)
{
    static const char q[] = "cost=12&deny=403";
    char big[64];
    uint64_t v = 77;

    (void)state;
    assert_int_equal(rl_parse_u64n(q + 5, 2, 1, 100, &v), RL_OK);
    assert_int_equal(v, 12);
    assert_int_equal(rl_parse_u64n("123", 1, 0, 100, &v), RL_OK);
    assert_int_equal(v, 1);
    assert_int_equal(rl_parse_u64n("00042", 5, 0, 100, &v), RL_OK);
    assert_int_equal(v, 42);
    assert_int_equal(rl_parse_u64n("18446744073709551615", 20, 0,
                                   UINT64_MAX, &v),
                     RL_OK);
    assert_true(v == UINT64_MAX);

    v = 77;
    /* One past 2^64 - 1, and far past it: refused, not wrapped. */
    assert_int_equal(rl_parse_u64n("18446744073709551616", 20, 0,
                                   UINT64_MAX, &v),
                     RL_EINVAL);
    memset(big, '9', sizeof(big));
    assert_int_equal(rl_parse_u64n(big, sizeof(big), 0, UINT64_MAX, &v),
                     RL_EINVAL);
    assert_int_equal(rl_parse_u64n(q + 5, 3, 0, 100, &v), RL_EINVAL);
    assert_int_equal(rl_parse_u64n(q, 0, 0, 100, &v), RL_EINVAL);
    assert_int_equal(rl_parse_u64n(NULL, 3, 0, 100, &v), RL_EINVAL);
    assert_int_equal(rl_parse_u64n("0", 1, 1, 100, &v), RL_EINVAL);
    assert_int_equal(rl_parse_u64n("-1", 2, 0, 100, &v), RL_EINVAL);
    assert_int_equal(v, 77);
}

static void ok(const char *s, const char *host, int port)
{
    char h[64];
    int p = 0;

    assert_int_equal(rl_parse_hostport(s, h, sizeof(h), &p), RL_OK);
    assert_string_equal(h, host);
    assert_int_equal(p, port);
}

static void bad(const char *s)
{
    char h[64] = "untouched";
    int p = 5;

    assert_int_equal(rl_parse_hostport(s, h, sizeof(h), &p), RL_EADDR);
    assert_string_equal(h, "untouched");
    assert_int_equal(p, 5);
}

static void test_hostport(void **state)
{
    (void)state;
    ok("127.0.0.1:7390", "127.0.0.1", 7390);
    ok("localhost:1", "localhost", 1);
    ok("redis.internal:65535", "redis.internal", 65535);
    ok("[::1]:7390", "::1", 7390);
    ok("[fe80::1%eth0]:80", "fe80::1%eth0", 80);
    ok("[::ffff:10.0.0.1]:443", "::ffff:10.0.0.1", 443);

    /* A bare IPv6 address: where its port begins cannot be told. */
    bad("::1:7390");
    bad("fe80::1:80");
    bad("a:b:80");
    /* Brackets half there, or with no port after them. */
    bad("[::1:80");
    bad("[::1]");
    bad("[::1]7390");
    bad("[::1]:");
    bad("[]:80");
    /* Host or port missing or wrong. */
    bad("");
    bad("localhost");
    bad(":7390");
    bad("host:");
    bad("host:0");
    bad("host:65536");
    bad("host:-1");
    bad("host:+80");
    bad("host: 80");
    bad("host:80x");
    bad(NULL);
}

/* The host must fit with its NUL; nothing is written when it does not. */
static void test_hostport_length(void **state)
{
    char h[6] = "xxxxx";
    int p = 0;

    (void)state;
    assert_int_equal(rl_parse_hostport("abcde:1", h, sizeof(h), &p), RL_OK);
    assert_string_equal(h, "abcde");
    assert_int_equal(rl_parse_hostport("abcdef:1", h, sizeof(h), &p), RL_EADDR);
    assert_int_equal(rl_parse_hostport("[abcdef]:1", h, sizeof(h), &p),
                     RL_EADDR);
    assert_string_equal(h, "abcde");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_u64),
        cmocka_unit_test(test_u64n),
        cmocka_unit_test(test_hostport),
        cmocka_unit_test(test_hostport_length),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
