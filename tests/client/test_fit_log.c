/* rl-fit's line parsers (tools/fit/fit_log.c): combined and JSON lines,
 * times, and the key expression, on well-formed and malformed lines. Each
 * line sits in a heap block of exactly its length, so ASan catches any
 * read past it. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "fit_log.h"
#include "rl_error.h"

/* 2000-10-10T20:55:36Z */
#define T_2000 UINT64_C(971211336000)

static int parse(const rlf_conf_t *c, const char *s, rlf_line_t *ln)
{
    size_t n = strlen(s);
    char *p = malloc(n ? n : 1);
    int rc;

    memcpy(p, s, n);
    memset(ln, 0, sizeof(*ln));
    rc = rlf_parse_line(c, p, n, ln);
    if (rc == 0) { /* the key lies inside the line: the same place in s */
        size_t off = (size_t)(ln->key - p);
        assert_true(off + ln->key_len <= n);
        ln->key = s + off;
    }
    free(p);
    return rc;
}

static rlf_conf_t conf(int fmt, const char *key)
{
    rlf_conf_t c;
    const char *why = NULL;

    memset(&c, 0, sizeof(c));
    c.fmt = fmt;
    rlf_name_set(&c.time, "time", 4);
    assert_int_equal(rlf_key_parse(&c, key, &why), 0);
    return c;
}

static void key_is(const rlf_line_t *ln, const char *key, unsigned term)
{
    assert_int_equal(ln->key_len, strlen(key));
    assert_memory_equal(ln->key, key, ln->key_len);
    assert_int_equal(ln->term, term);
}

static void test_combined(void **state)
{
    rlf_conf_t c = conf(RLF_FMT_COMBINED, "user|addr");
    rlf_line_t ln;

    (void)state;
    assert_int_equal(
        parse(&c,
              "127.0.0.1 - frank [10/Oct/2000:13:55:36 -0700] \"GET "
              "/apache_pb.gif HTTP/1.0\" 200 2326 \"http://x/\" \"Mozilla\"",
              &ln),
        0);
    assert_int_equal(ln.ms, T_2000);
    assert_int_equal(ln.cost, 1);
    key_is(&ln, "frank", 0);
    /* no user: the address; a CR before the newline is ignored */
    assert_int_equal(
        parse(&c, "::1 - - [10/Oct/2000:20:55:36 +0000] \"GET /\" 200 1\r",
              &ln),
        0);
    assert_int_equal(ln.ms, T_2000);
    key_is(&ln, "::1", 1);
    /* common log format (no referer/agent) is fine too */
    assert_int_equal(
        parse(&c, "h - u [10/Oct/2000:20:55:36 +0000] \"GET /\" 200 1", &ln),
        0);
    /* only the user asked for, and absent */
    c = conf(RLF_FMT_COMBINED, "user");
    assert_int_equal(
        parse(&c, "h - - [10/Oct/2000:20:55:36 +0000] \"GET /\" 200 1", &ln),
        RLF_NOKEY);
    c = conf(RLF_FMT_COMBINED, "ident|addr");
    assert_int_equal(
        parse(&c, "h id u [10/Oct/2000:20:55:36 +0000] \"GET /\" 200 1", &ln),
        0);
    key_is(&ln, "id", 0);
}

static void test_combined_malformed(void **state)
{
    static const char *const bad[] = {
        "",
        "h",
        "h - u",
        "h - u ",
        "h - u [",
        "h - u [10/Oct/2000:20:55:36 +0000",
        "h - u 10/Oct/2000:20:55:36 +0000] x",
        "h  u [10/Oct/2000:20:55:36 +0000] x",
        "h - u [10/Oct/2000:20:55:36] x",
        "h - u [10/Foo/2000:20:55:36 +0000] x",
        "h - u [31/Feb/2000:20:55:36 +0000] x",
        "h - u [10/Oct/2000:24:55:36 +0000] x",
        "h - u [10/Oct/1969:20:55:36 +0000] x",
        "h - u [10/Oct/2000:20:55:36 +2400] x",
        "h - u [10/Oct/2000:20:55:36 +0000x] x",
        "h - u [1/Oct/2000:20:55:36 +0000] x",
    };
    rlf_conf_t c = conf(RLF_FMT_COMBINED, "user|addr");
    rlf_line_t ln;
    size_t i;

    (void)state;
    for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        print_message("%s\n", bad[i]);
        assert_int_equal(parse(&c, bad[i], &ln), RL_EINVAL);
    }
}

static void test_json(void **state)
{
    rlf_conf_t c = conf(RLF_FMT_JSON, "user_id|ip");
    rlf_line_t ln;

    (void)state;
    rlf_name_set(&c.cost, "tokens", 6);
    assert_int_equal(parse(&c,
                           " { \"time\" : \"2000-10-10T13:55:36.5-07:00\", "
                           "\"user_id\":\"a\\\"b\", \"ip\":\"1.2.3.4\", "
                           "\"tokens\": 250 } ",
                           &ln),
                     0);
    assert_int_equal(ln.ms, T_2000 + 500);
    assert_int_equal(ln.cost, 250);
    key_is(&ln, "a\\\"b", 0); /* the key as written, escapes and all */
    /* null, empty, object and missing keys fall through to the next term;
     * a number is a key; nested values are skipped whole */
    assert_int_equal(parse(&c,
                           "{\"user_id\":null,\"n\":{\"user_id\":\"x\","
                           "\"ip\":[\"}\",{}]},\"ip\":42,\"time\":971211336}",
                           &ln),
                     0);
    key_is(&ln, "42", 1);
    assert_int_equal(ln.ms, T_2000);
    assert_int_equal(ln.cost, 1); /* no cost field */
    assert_int_equal(parse(&c, "{\"user_id\":\"\",\"ip\":{},\"time\":1}", &ln),
                     RLF_NOKEY);
    /* the first of a repeated name counts */
    assert_int_equal(
        parse(&c, "{\"ip\":\"a\",\"ip\":\"b\",\"time\":\"971211336123\"}", &ln),
        0);
    key_is(&ln, "a", 1);
    assert_int_equal(ln.ms, T_2000 + 123); /* 12 digits: milliseconds */
    /* nginx's $time_local inside JSON */
    assert_int_equal(
        parse(&c, "{\"time\":\"10/Oct/2000:20:55:36 +0000\",\"ip\":\"a\"}",
              &ln),
        0);
    assert_int_equal(ln.ms, T_2000);
    assert_int_equal(parse(&c, "{\"time\":971211336.25,\"ip\":\"a\"}", &ln), 0);
    assert_int_equal(ln.ms, T_2000 + 250);
}

static void test_json_malformed(void **state)
{
    static const char *const bad[] = {
        "",
        "{",
        "[]",
        "{\"ip\":\"a\"}", /* no time */
        "{\"time\":1,\"ip\":\"a\"",
        "{\"time\":1,\"ip\":\"a\",}",
        "{\"time\":1 \"ip\":\"a\"}",
        "{\"time\":1,\"ip\":\"a\"} x",
        "{\"time\":1,\"ip\":\"a\\\"}",
        "{\"time\":1,\"ip\":\"a\",\"tokens\":-1}",
        "{\"time\":1,\"ip\":\"a\",\"tokens\":1.5}",
        "{\"time\":1,\"ip\":\"a\",\"tokens\":10000000000}",
        "{\"time\":\"yesterday\",\"ip\":\"a\"}",
        "{\"time\":{},\"ip\":\"a\"}",
        "{\"time\":1,\"ip\":[}",
        "{\"time\":1,\"ip\":[1,2}",
        "{\"time\":1,\"ip\":\"a\nb\"}",
        "{\"time\":1,\"ip\":}",
        "{time:1}",
        "{\"time\":1,\"ip\":[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]"
        "]"
        "]]]]]]]]]]]]]]]]]]]]]]]}",
    };
    rlf_conf_t c = conf(RLF_FMT_JSON, "user_id|ip");
    rlf_line_t ln;
    size_t i;

    (void)state;
    rlf_name_set(&c.cost, "tokens", 6);
    for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        print_message("%s\n", bad[i]);
        assert_int_equal(parse(&c, bad[i], &ln), RL_EINVAL);
    }
}

static void test_key_expr(void **state)
{
    rlf_conf_t c;
    const char *why = NULL;
    char long_name[RLF_NAME_MAX + 2];

    (void)state;
    memset(&c, 0, sizeof(c));
    assert_int_equal(rlf_key_parse(&c, "a|b|c|d", &why), 0);
    assert_int_equal(c.nkey, 4);
    assert_string_equal(c.key[3].s, "d");
    assert_int_equal(rlf_key_parse(&c, "a|b|c|d|e", &why), RL_EINVAL);
    assert_non_null(why);
    assert_int_equal(rlf_key_parse(&c, "", &why), RL_EINVAL);
    assert_int_equal(rlf_key_parse(&c, "a||b", &why), RL_EINVAL);
    assert_int_equal(rlf_key_parse(&c, "a|", &why), RL_EINVAL);
    memset(long_name, 'x', sizeof(long_name) - 1);
    long_name[sizeof(long_name) - 1] = '\0';
    assert_int_equal(rlf_key_parse(&c, long_name, &why), RL_EINVAL);
    long_name[RLF_NAME_MAX] = '\0';
    assert_int_equal(rlf_key_parse(&c, long_name, &why), 0);
}

static void test_times(void **state)
{
    uint64_t ms;

    (void)state;
    assert_int_equal(rlf_parse_time("2000-10-10 20:55:36", 19, &ms), 0);
    assert_int_equal(ms, T_2000);
    assert_int_equal(rlf_parse_time("2000-10-10T21:55:36+0100", 24, &ms), 0);
    assert_int_equal(ms, T_2000);
    assert_int_equal(rlf_parse_time("2000-02-29T00:00:00Z", 20, &ms), 0);
    assert_int_equal(ms, UINT64_C(951782400000));
    assert_int_equal(rlf_parse_time("1970-01-01T00:00:00Z", 20, &ms), 0);
    assert_int_equal(ms, 0);
    assert_int_equal(rlf_parse_time("1970-01-01T00:00:00+01:00", 25, &ms),
                     RL_EINVAL); /* before the epoch */
    assert_int_equal(rlf_parse_time("2000-10-10T20:55:36.", 20, &ms),
                     RL_EINVAL);
    assert_int_equal(rlf_parse_time("1.", 2, &ms), RL_EINVAL);
    assert_int_equal(rlf_parse_time("", 0, &ms), RL_EINVAL);
    assert_int_equal(rlf_parse_time("1234567890123456", 16, &ms), RL_EINVAL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_combined),
        cmocka_unit_test(test_combined_malformed),
        cmocka_unit_test(test_json),
        cmocka_unit_test(test_json_malformed),
        cmocka_unit_test(test_key_expr),
        cmocka_unit_test(test_times),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
