#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "rl_validate.h"
#include "rl_error.h"
#include "rl_window.h"

static rl_check_t inline_check(void)
{
    rl_check_t c;

    memset(&c, 0, sizeof(c));
    c.id = 1;
    c.key = "user:1";
    c.key_len = 6;
    c.limit = 5;
    c.window_s = 60;
    return c;
}

static void test_valid_inline_and_cost(void **state)
{
    rl_check_t c = inline_check();

    (void)state;
    assert_int_equal(rl_check_validate(&c), RL_OK);
    assert_int_equal(c.cost, 1); /* 0 is read as 1 */
    c.cost = 7;
    assert_int_equal(rl_check_validate(&c), RL_OK);
    assert_int_equal(c.cost, 7);
}

static void test_key_rules(void **state)
{
    char big[RL_KEY_MAX + 1];
    rl_check_t c = inline_check();

    (void)state;
    memset(big, 'k', sizeof(big));
    c.key_len = 0;
    assert_int_equal(rl_check_validate(&c), RL_EKEYEMPTY);
    c.key = big;
    c.key_len = RL_KEY_MAX;
    assert_int_equal(rl_check_validate(&c), RL_OK);
    c.key_len = RL_KEY_MAX + 1;
    assert_int_equal(rl_check_validate(&c), RL_EKEYLONG);
    c.key = "a\0b";
    c.key_len = 3;
    assert_int_equal(rl_check_validate(&c), RL_EKEYNUL);
    c.key = "\xc3\xa9{}:";
    c.key_len = 5;
    assert_int_equal(rl_check_validate(&c), RL_OK);
}

static void test_limit_and_window_rules(void **state)
{
    rl_check_t c = inline_check();

    (void)state;
    c.limit = 0;
    c.window_s = 0;
    assert_int_equal(rl_check_validate(&c), RL_ENOLIMIT);
    c.limit = 0;
    c.window_s = 60;
    assert_int_equal(rl_check_validate(&c), RL_ELIMIT);
    c.limit = 5;
    c.window_s = 0;
    assert_int_equal(rl_check_validate(&c), RL_EWINDOW);
    c.window_s = RL_WINDOW_MAX_S;
    assert_int_equal(rl_check_validate(&c), RL_OK);
    c.window_s = RL_WINDOW_MAX_S + 1;
    assert_int_equal(rl_check_validate(&c), RL_EWINDOWMAX);
    c.window_s = 1;
    c.limit = INT64_MAX;
    assert_int_equal(rl_check_validate(&c), RL_OK);
    c.limit = (uint64_t)INT64_MAX + 1;
    assert_int_equal(rl_check_validate(&c), RL_ELIMITMAX);
}

static void test_rule_rules(void **state)
{
    char big[RL_RULE_MAX + 1];
    rl_check_t c = inline_check();

    (void)state;
    c.limit = 0;
    c.window_s = 0;
    c.rule = "search.per_ip:v2-a";
    c.rule_len = strlen(c.rule);
    assert_int_equal(rl_check_validate(&c), RL_OK);
    memset(big, 'r', sizeof(big));
    c.rule = big;
    c.rule_len = RL_RULE_MAX;
    assert_int_equal(rl_check_validate(&c), RL_OK);
    c.rule_len = RL_RULE_MAX + 1;
    assert_int_equal(rl_check_validate(&c), RL_ERULELONG);
    c.rule = "bad rule";
    c.rule_len = 8;
    assert_int_equal(rl_check_validate(&c), RL_ERULEBAD);
    c.rule = "r";
    c.rule_len = 1;
    c.limit = 5;
    assert_int_equal(rl_check_validate(&c), RL_EBOTH);
    c.limit = 0;
    c.window_s = 60;
    assert_int_equal(rl_check_validate(&c), RL_EBOTH);
}

/* Every code has its own text; unknown codes do not crash. */
/* A request of levels: 1 to 8 of them, each a key and a rule, no key and
 * rule twice, a CHECK with nothing of its own beside; cost 0 reads 1. */
static void test_levels_rules(void **state)
{
    rl_check_t c;
    uint32_t i;

    (void)state;
    memset(&c, 0, sizeof(c));
    c.nlevels = 2;
    c.levels[0] = (rl_level_t){"org:a", 5, "org", 3};
    c.levels[1] = (rl_level_t){"user:b", 6, "user", 4};
    assert_int_equal(rl_check_validate(&c), RL_OK);
    assert_int_equal(c.cost, 1);
    /* The same rule under two keys is two levels; the same key twice too. */
    c.levels[1] = (rl_level_t){"user:b", 6, "org", 3};
    assert_int_equal(rl_check_validate(&c), RL_OK);
    c.levels[1] = (rl_level_t){"org:a", 5, "user", 4};
    assert_int_equal(rl_check_validate(&c), RL_OK);
    c.levels[1] = (rl_level_t){"org:a", 5, "org", 3};
    assert_int_equal(rl_check_validate(&c), RL_ELEVELTWICE);
    c.levels[1] = (rl_level_t){"user:b", 6, NULL, 0};
    assert_int_equal(rl_check_validate(&c), RL_ELEVELS);
    c.levels[1] = (rl_level_t){NULL, 0, "user", 4};
    assert_int_equal(rl_check_validate(&c), RL_EKEYEMPTY);
    c.levels[1] = (rl_level_t){"user:b", 6, "us er", 5};
    assert_int_equal(rl_check_validate(&c), RL_ERULEBAD);
    c.levels[1] = (rl_level_t){"u\0b", 3, "user", 4};
    assert_int_equal(rl_check_validate(&c), RL_EKEYNUL);
    c.levels[1] = (rl_level_t){"user:b", 6, "user", 4};
    c.key = "x";
    c.key_len = 1;
    assert_int_equal(rl_check_validate(&c), RL_ELEVELS);
    c.key = NULL;
    c.key_len = 0;
    c.limit = 5;
    assert_int_equal(rl_check_validate(&c), RL_ELEVELS);
    c.limit = 0;
    c.op = RL_OP_RESERVE;
    assert_int_equal(rl_check_validate(&c), RL_ELEVELS);
    c.op = RL_OP_CHECK;
    for (i = 0; i < RL_LEVELS_MAX; i++)
        c.levels[i] = (rl_level_t){"k", 1, "r", 1};
    for (i = 0; i < RL_LEVELS_MAX; i++)
        c.levels[i].key = i % 2 ? "a" : "b"; /* (a, r) and (b, r) recur */
    c.nlevels = RL_LEVELS_MAX;
    assert_int_equal(rl_check_validate(&c), RL_ELEVELTWICE);
    {
        static const char *const k[RL_LEVELS_MAX] = {"0", "1", "2", "3",
                                                     "4", "5", "6", "7"};
        for (i = 0; i < RL_LEVELS_MAX; i++)
            c.levels[i].key = k[i];
    }
    assert_int_equal(rl_check_validate(&c), RL_OK);
    c.nlevels = RL_LEVELS_MAX + 1;
    assert_int_equal(rl_check_validate(&c), RL_ELEVELS);
}

static void test_strerror(void **state)
{
    int code;

    (void)state;
    for (code = 0; code >= RL_ELIMIT; code--) {
        const char *s = rl_strerror(code);
        assert_non_null(s);
        assert_string_not_equal(s, "unknown error");
        if (code < 0)
            assert_string_not_equal(s, rl_strerror(code + 1));
    }
    assert_string_equal(rl_strerror(-9999), "unknown error");
    assert_string_equal(rl_strerror(RL_EKEYLONG),
                        "key is longer than 512 bytes");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_valid_inline_and_cost),
        cmocka_unit_test(test_key_rules),
        cmocka_unit_test(test_limit_and_window_rules),
        cmocka_unit_test(test_rule_rules),
        cmocka_unit_test(test_levels_rules),
        cmocka_unit_test(test_strerror),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
