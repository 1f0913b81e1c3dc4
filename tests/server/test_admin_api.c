/* The admin listener's pure parts (server/admin/admin_api_parse.c): routes and
 * methods, the query (percent-decoding, entries split before decoding,
 * every bad request a 4xx), a stored quota read exactly as the Redis
 * script's qparse reads it (scale, clamps, what it ignores whole), the
 * token file and the Bearer check, the loopback test of --admin, and the
 * JSON strings. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "admin/admin_api_parse.h"
#include "rl_admit.h"
#include "rl_error.h"

static rls_admin_req_t req;

static int parse(const char *method, const char *target, const char **why,
                 const char **allow)
{
    return rls_admin_parse(method, strlen(method), target, strlen(target), &req,
                           why, allow);
}

static int status_of(const char *method, const char *target)
{
    const char *why = NULL, *allow = NULL;
    int st = parse(method, target, &why, &allow);

    if (st != 0)
        assert_non_null(why);
    assert_true((st == 405) == (allow != NULL));
    return st;
}

static void test_routes(void **state)
{
    (void)state;
    assert_int_equal(status_of("GET", "/"), 0);
    assert_int_equal(req.route, RLS_ADMIN_INDEX);
    assert_int_equal(status_of("GET", "/v1/usage?rule=api&key=alice"), 0);
    assert_int_equal(req.route, RLS_ADMIN_USAGE);
    assert_false(req.write);
    assert_int_equal(status_of("HEAD", "/v1/usage?rule=api&key=alice"), 0);
    assert_true(req.head);
    assert_int_equal(status_of("POST", "/v1/usage/reset?rule=api&key=a"), 0);
    assert_int_equal(req.route, RLS_ADMIN_RESET);
    assert_true(req.write);
    assert_int_equal(status_of("GET", "/v1/config"), 0);
    assert_int_equal(req.route, RLS_ADMIN_CONFIG);
    assert_int_equal(req.parts, 0);
    assert_int_equal(status_of("GET", "/v1/config?part=rules,envoy"), 0);
    assert_int_equal(req.parts, RLS_ADMIN_PART_RULES | RLS_ADMIN_PART_ENVOY);
    /* The top offenders: a rule's name, envoy:DOMAIN, (inline), or none;
     * no caller; format=summary with a rule alone, and on /v1/top alone. */
    assert_int_equal(status_of("GET", "/v1/top"), 0);
    assert_int_equal(req.route, RLS_ADMIN_TOP);
    assert_null(req.rule);
    assert_int_equal(status_of("GET", "/v1/top?rule=envoy:shop"), 0);
    assert_int_equal(req.rule_len, 10);
    assert_int_equal(status_of("GET", "/v1/top?rule=(inline)&format=text"), 0);
    assert_true(req.text);
    assert_int_equal(status_of("GET", "/v1/top?rule=api&format=summary"), 0);
    assert_true(req.summary);
    assert_int_equal(status_of("GET", "/v1/top?format=summary"), 400);
    assert_int_equal(status_of("GET", "/v1/top?rule=api&key=a"), 400);
    assert_int_equal(status_of("GET", "/v1/top?rule=a%20b"), 400);
    assert_int_equal(status_of("GET", "/v1/top?rule=(nope)"), 400);
    assert_int_equal(status_of("GET", "/v1/top?part=rules"), 400);
    assert_int_equal(status_of("POST", "/v1/top?rule=api"), 405);
    assert_int_equal(status_of("GET", "/v1/usage?rule=a&key=b&format=summary"),
                     400);

    /* Reads and writes apart. */
    assert_int_equal(status_of("POST", "/v1/usage?rule=api&key=a"), 405);
    assert_int_equal(status_of("GET", "/v1/usage/reset?rule=api&key=a"), 405);
    assert_int_equal(status_of("DELETE", "/v1/config"), 405);
    assert_int_equal(status_of("GET", "/v1/usagex"), 404);
    assert_int_equal(status_of("GET", "/metrics"), 404);
}

static void test_query(void **state)
{
    const char *why, *allow;

    (void)state;
    assert_int_equal(
        status_of("GET", "/v1/usage?rule=api&key=a%20b%2Fc+d&format=text"), 0);
    assert_int_equal(req.key_len, 7);
    assert_memory_equal(req.key, "a b/c+d", 7);
    assert_true(req.text);
    /* Entries: split at the first raw '=', then decoded. */
    assert_int_equal(status_of("GET", "/v1/usage?domain=shop&entry=user=ann"
                                      "&entry=k%3Dx=v%3Dy&entry=e="),
                     0);
    assert_int_equal(req.nentries, 3);
    assert_memory_equal(req.ekey[0], "user", 4);
    assert_memory_equal(req.evalue[0], "ann", 3);
    assert_int_equal(req.eklen[1], 3);
    assert_memory_equal(req.ekey[1], "k=x", 3);
    assert_memory_equal(req.evalue[1], "v=y", 3);
    assert_int_equal(req.evlen[2], 0);
    assert_int_equal(status_of("POST", "/v1/usage/reset?rule=r&key=k&leases=1"),
                     0);
    assert_true(req.leases);

    /* Every bad request a 400 with a reason. */
    assert_int_equal(status_of("GET", "/v1/usage?rule=api"), 400);
    assert_int_equal(status_of("GET", "/v1/usage?key=a"), 400);
    assert_int_equal(status_of("GET", "/v1/usage"), 400);
    assert_int_equal(status_of("GET", "/v1/usage?rule=a&rule=b&key=k"), 400);
    assert_int_equal(status_of("GET", "/v1/usage?rule=a&key=%zz"), 400);
    assert_int_equal(status_of("GET", "/v1/usage?rule=a&key=%4"), 400);
    assert_int_equal(status_of("GET", "/v1/usage?rule=a&key=%00"), 400);
    assert_int_equal(status_of("GET", "/v1/usage?rule=a&key="), 400);
    assert_int_equal(status_of("GET", "/v1/usage?rule=bad%20name&key=k"), 400);
    assert_int_equal(status_of("GET", "/v1/usage?rule=a&key=k&nope=1"), 400);
    assert_int_equal(status_of("GET", "/v1/usage?rule=a&key=k&flag"), 400);
    assert_int_equal(status_of("GET", "/v1/usage?rule=a&key=k&leases=1"), 400);
    assert_int_equal(status_of("GET", "/v1/usage?rule=a&key=k&domain=d"), 400);
    assert_int_equal(status_of("GET", "/v1/usage?domain=d"), 400);
    assert_int_equal(status_of("GET", "/v1/usage?domain=d&entry=nokey"), 400);
    assert_int_equal(status_of("GET", "/v1/usage?domain=d&entry==v"), 400);
    assert_int_equal(status_of("GET", "/v1/usage?rule=a&key=k&format=xml"),
                     400);
    assert_int_equal(status_of("GET", "/v1/config?part=all"), 400);
    assert_int_equal(status_of("GET", "/v1/config?rule=a"), 400);
    assert_int_equal(status_of("GET", "/?format=text"), 400);
    {
        char t[600];
        int n = snprintf(t, sizeof(t), "/v1/usage?rule=a&key=");
        memset(t + n, 'k', 513);
        t[n + 513] = '\0';
        assert_int_equal(status_of("GET", t), 400);
        t[n + 512] = '\0';
        assert_int_equal(status_of("GET", t), 0);
    }
    {
        /* 33 entries: one too many. */
        char t[2048] = "/v1/usage?domain=d";
        int i;
        for (i = 0; i < 32; i++)
            strcat(t, "&entry=k=v");
        assert_int_equal(status_of("GET", t), 0);
        strcat(t, "&entry=k=v");
        assert_int_equal(status_of("GET", t), 400);
    }
    assert_int_equal(parse("POST", "/v1/usage", &why, &allow), 405);
    assert_string_equal(allow, "Allow: GET, HEAD\r\n");
    assert_int_equal(parse("GET", "/v1/usage/reset", &why, &allow), 405);
    assert_string_equal(allow, "Allow: POST\r\n");
}

static uint32_t quota(const char *q, double sc, rls_limit_t *l)
{
    uint32_t n = 0;

    if (rls_admin_quota_parse(q, strlen(q), sc, l, &n) != RL_OK)
        return 0;
    return n;
}

static void test_quota(void **state)
{
    rls_limit_t l[RLS_ADMIN_QUOTA_LIMITS];

    (void)state;
    /* rl-ctl's form, each algorithm. */
    assert_int_equal(quota("100/60 5000/3600", 1, l), 2);
    assert_int_equal(l[0].algo, RL_ALGO_FIXED);
    assert_int_equal(l[0].limit, 100);
    assert_int_equal(l[0].window_s, 60);
    assert_int_equal(l[1].limit, 5000);
    assert_int_equal(quota(" 10/60:sliding-window-counter\t10/60:sliding-"
                           "window 10/60:fixed-window ",
                           1, l),
                     3);
    assert_int_equal(l[0].algo, RL_ALGO_SLIDING_COUNTER);
    assert_int_equal(l[1].algo, RL_ALGO_SLIDING_LOG);
    assert_int_equal(l[2].algo, RL_ALGO_FIXED);
    assert_int_equal(quota("7/60:gcra:burst=3", 1, l), 1);
    assert_int_equal(l[0].algo, RL_ALGO_GCRA);
    assert_int_equal(l[0].limit, 7);
    assert_int_equal(l[0].burst, 3);
    assert_int_equal(l[0].t_us, 8571429); /* ceil(60e6 / 7) */
    assert_int_equal(quota("7/60:gcra", 1, l), 1);
    assert_int_equal(l[0].burst, 7);

    /* Scaled as the script scales: floor, at least 1; burst too. */
    assert_int_equal(quota("100/60 7/60:gcra:burst=3", 0.5, l), 2);
    assert_int_equal(l[0].limit, 50);
    assert_int_equal(l[1].limit, 3);
    assert_int_equal(l[1].burst, 1);
    assert_int_equal(quota("3/60", 0.1, l), 1);
    assert_int_equal(l[0].limit, 1);
    /* Clamps: a sliding window's 10^6, a counter's 2^36, any 2^63-1024. */
    assert_int_equal(quota("5000000/60:sliding-window", 1, l), 1);
    assert_int_equal(l[0].limit, 1000000);
    assert_int_equal(quota("99999999999/60:sliding-window-counter", 1, l), 1);
    assert_int_equal(l[0].limit, UINT64_C(68719476736));
    assert_int_equal(quota("99999999999999999999999/60", 1, l), 1);
    assert_int_equal(l[0].limit, UINT64_C(9223372036854774784));
    /* A gcra's bucket within 366 days. */
    assert_int_equal(quota("1/31622400:gcra:burst=5", 1, l), 1);
    assert_int_equal(l[0].burst, 1);

    /* What the script ignores whole (the rule's limits apply). */
    assert_int_equal(quota("", 1, l), 0);
    assert_int_equal(quota("   ", 1, l), 0);
    assert_int_equal(quota("0/60", 1, l), 0);
    assert_int_equal(quota("1.5/60", 1, l), 0);
    assert_int_equal(quota("-5/60", 1, l), 0);
    assert_int_equal(quota("5/0", 1, l), 0);
    assert_int_equal(quota("5/31622401", 1, l), 0);
    assert_int_equal(quota("5/1m", 1, l), 0);
    assert_int_equal(quota("5/60:gcra:burst=0", 1, l), 0);
    assert_int_equal(quota("5/60:fixed", 1, l), 0);
    assert_int_equal(quota("5/60 6/60", 1, l), 0);
    assert_int_equal(quota("5/60 6/60:gcra", 1, l), 2); /* two algorithms */
    assert_int_equal(quota("1/1 1/2 1/3 1/4 1/5 1/6 1/7 1/8", 1, l), 8);
    assert_int_equal(quota("1/1 1/2 1/3 1/4 1/5 1/6 1/7 1/8 1/9", 1, l), 0);
}

static void test_tokens(void **state)
{
    static const char file[] = "# operators\n"
                               "\n"
                               "alice  aaaaaaaaaaaaaaaa-1\r\n"
                               "  bbbbbbbbbbbbbbbbbbbb  \n"
                               "ci@x cccccccccccccccccccc";
    rls_admin_tokens_t t;
    const char *why = NULL;

    (void)state;
    assert_int_equal(rls_admin_tokens_parse(file, sizeof(file) - 1, &t, &why),
                     RL_OK);
    assert_int_equal(t.n, 3);
    assert_string_equal(t.t[0].name, "alice");
    assert_string_equal(t.t[1].name, "token");
    assert_string_equal(t.t[2].name, "ci@x");
    assert_int_equal(
        rls_admin_tokens_check(&t, "Bearer aaaaaaaaaaaaaaaa-1", 25), 0);
    assert_int_equal(
        rls_admin_tokens_check(&t, "bearer bbbbbbbbbbbbbbbbbbbb", 27), 1);
    assert_int_equal(
        rls_admin_tokens_check(&t, "Bearer cccccccccccccccccccc", 27), 2);
    assert_int_equal(
        rls_admin_tokens_check(&t, "Bearer aaaaaaaaaaaaaaaa-2", 25), -1);
    assert_int_equal(rls_admin_tokens_check(&t, "Bearer aaaaaaaaaaaaaaaa-", 24),
                     -1);
    assert_int_equal(rls_admin_tokens_check(&t, "Basic YWxhZGRpbjpvcGVu", 22),
                     -2);
    assert_int_equal(rls_admin_tokens_check(&t, "Bearer ", 7), -2);
    assert_int_equal(rls_admin_tokens_check(&t, NULL, 0), -2);
    /* Nothing of a token is kept but its digest. */
    assert_null(memmem(&t, sizeof(t), "aaaaaaaaaaaaaaaa", 16));

    assert_int_equal(rls_admin_tokens_parse("", 0, &t, &why), RL_EINVAL);
    assert_int_equal(rls_admin_tokens_parse("# none\n", 7, &t, &why),
                     RL_EINVAL);
    assert_int_equal(rls_admin_tokens_parse("short\n", 6, &t, &why), RL_EINVAL);
    assert_int_equal(
        rls_admin_tokens_parse("a b cccccccccccccccccccc\n", 25, &t, &why),
        RL_EINVAL);
    assert_int_equal(
        rls_admin_tokens_parse("b%d cccccccccccccccccccc\n", 25, &t, &why),
        RL_EINVAL);
    assert_null(strstr(why, "cccc"));
}

static void test_loopback(void **state)
{
    (void)state;
    assert_true(rls_admin_loopback("127.0.0.1"));
    assert_true(rls_admin_loopback("127.5.6.7"));
    assert_true(rls_admin_loopback("localhost"));
    assert_true(rls_admin_loopback("::1"));
    assert_true(rls_admin_loopback("::ffff:127.0.0.1"));
    assert_false(rls_admin_loopback("0.0.0.0"));
    assert_false(rls_admin_loopback("::"));
    assert_false(rls_admin_loopback("10.0.0.1"));
    assert_false(rls_admin_loopback("admin.example"));
    assert_false(rls_admin_loopback("128.0.0.1"));
}

static void json(const char *in, size_t n, const char *want)
{
    rl_buf_t b;

    rl_buf_init(&b, 1 << 16);
    assert_int_equal(rls_admin_json_str(&b, in, n), RL_OK);
    assert_int_equal(rl_buf_len(&b), strlen(want));
    assert_memory_equal(rl_buf_rptr(&b), want, strlen(want));
    rl_buf_free(&b);
}

static void test_json(void **state)
{
    rl_buf_t b;

    (void)state;
    json("alice", 5, "\"alice\"");
    json("a\"b\\c", 5, "\"a\\\"b\\\\c\"");
    json("\n\t\x01", 3, "\"\\n\\t\\u0001\"");
    json("caf\xc3\xa9", 5, "\"caf\xc3\xa9\"");
    json("\xe2\x82\xac", 3, "\"\xe2\x82\xac\"");
    /* Not UTF-8: each byte escaped alone. */
    json("\xff", 1, "\"\\u00ff\"");
    json("\xc3", 1, "\"\\u00c3\"");
    json("\xed\xa0\x80", 3, "\"\\u00ed\\u00a0\\u0080\"");
    json("\xc0\xaf", 2, "\"\\u00c0\\u00af\"");
    json("", 0, "\"\"");
    /* Over the buffer's cap: its error, never a partial answer sent. */
    rl_buf_init(&b, 4);
    assert_int_equal(rls_admin_json_str(&b, "abcdef", 6), RL_EFULL);
    rl_buf_free(&b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_routes),   cmocka_unit_test(test_query),
        cmocka_unit_test(test_quota),    cmocka_unit_test(test_tokens),
        cmocka_unit_test(test_loopback), cmocka_unit_test(test_json),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
