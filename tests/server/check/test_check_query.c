/* The /check query's levels (check/http_check_query.c): level=KEY=RULE
 * read into the check's levels, split at the last '=', bounded, and
 * refused beside rule= or key= or with an op other than check. The rest
 * of the grammar is fuzzed (tests/fuzz/fuzz_check.c) and exercised end to
 * end (e2e_http_check). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "check/http_check_query.h"
#include "net/http.h"
#include "rl_error.h"

/* Parses GET <target> through rls_check_query (no headers read). Returns
 * its code; *why its reason. */
static int query(const char *target, rl_check_t *c, rls_check_query_t *cq,
                 const char **why)
{
    static char head[8192];
    rls_check_opts_t o;
    rls_http_req_t q;
    int n = snprintf(head, sizeof(head), "GET %s HTTP/1.1\r\n\r\n", target);

    assert_true(n > 0 && (size_t)n < sizeof(head));
    assert_int_equal(rls_http_parse(head, (size_t)n, &q), RL_OK);
    assert_int_equal(rls_check_opts_init(&o, "X-User-Id", "X-Rule"), RL_OK);
    memset(c, 0, sizeof(*c));
    *why = NULL;
    return rls_check_query(&q, &o, RL_OP_CHECK, c, cq, why);
}

static void level_is(const rl_check_t *c, uint32_t i, const char *key,
                     const char *rule)
{
    assert_true(i < c->nlevels);
    assert_int_equal(c->levels[i].key_len, strlen(key));
    assert_memory_equal(c->levels[i].key, key, strlen(key));
    assert_int_equal(c->levels[i].rule_len, strlen(rule));
    assert_memory_equal(c->levels[i].rule, rule, strlen(rule));
}

static void test_levels(void **state)
{
    rls_check_query_t cq;
    rl_check_t c;
    const char *why;

    (void)state;
    assert_int_equal(query("/check?level=org%3Aacme=org&level=user:b%3D1=user"
                           "&cost=2&deny_status=403",
                           &c, &cq, &why),
                     RL_OK);
    assert_int_equal(c.nlevels, 2);
    level_is(&c, 0, "org:acme", "org");
    /* The last '=' splits: a key may hold '='s, a rule none. */
    level_is(&c, 1, "user:b=1", "user");
    assert_int_equal(c.rule_len, 0);
    assert_int_equal(c.key_len, 0);
    assert_int_equal(c.cost, 2);
    assert_int_equal(cq.deny_status, 403);
    /* Eight is the most. */
    assert_int_equal(query("/check?level=1=r&level=2=r&level=3=r&level=4=r&"
                           "level=5=r&level=6=r&level=7=r&level=8=r",
                           &c, &cq, &why),
                     RL_OK);
    assert_int_equal(c.nlevels, 8);
    level_is(&c, 7, "8", "r");
    assert_int_equal(query("/check?level=1=r&level=2=r&level=3=r&level=4=r&"
                           "level=5=r&level=6=r&level=7=r&level=8=r&"
                           "level=9=r",
                           &c, &cq, &why),
                     RL_EINVAL);
    assert_string_equal(why, "more than 8 levels");
}

static void test_bad_levels(void **state)
{
    static const struct {
        const char *target, *why;
    } bad[] = {
        {"/check?level=k", "level must be KEY=RULE"},
        {"/check?level=k=", "level must be KEY=RULE"},
        {"/check?level==r", "a level's key is empty"},
        {"/check?level=k%zz=r", "bad percent-escape"},
        {"/check?level=k%00=r", "NUL"},
        {"/check?level=k=r&rule=r", "instead of rule= and key="},
        {"/check?key=k&level=k=r", "instead of rule= and key="},
        {"/check?level=k=r&op=reserve", "levels are checks"},
    };
    rls_check_query_t cq;
    rl_check_t c;
    const char *why;
    size_t i;

    (void)state;
    for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        assert_int_equal(query(bad[i].target, &c, &cq, &why), RL_EINVAL);
        assert_non_null(why);
        if (strstr(why, bad[i].why) == NULL)
            fail_msg("%s: %s, expected %s", bad[i].target, why, bad[i].why);
    }
}

/* Keys and rules at their bounds, and one past. */
static void test_level_bounds(void **state)
{
    static char target[4096];
    rls_check_query_t cq;
    rl_check_t c;
    const char *why;
    int n;

    (void)state;
    n = snprintf(target, sizeof(target), "/check?level=");
    memset(target + n, 'k', RL_KEY_MAX);
    n += RL_KEY_MAX;
    n += snprintf(target + n, sizeof(target) - (size_t)n, "=");
    memset(target + n, 'r', RL_RULE_MAX);
    target[n + RL_RULE_MAX] = '\0';
    assert_int_equal(query(target, &c, &cq, &why), RL_OK);
    assert_int_equal(c.levels[0].key_len, RL_KEY_MAX);
    assert_int_equal(c.levels[0].rule_len, RL_RULE_MAX);
    target[n + RL_RULE_MAX] = 'r';
    target[n + RL_RULE_MAX + 1] = '\0';
    assert_int_equal(query(target, &c, &cq, &why), RL_EINVAL);
    assert_string_equal(why, rl_strerror(RL_ERULELONG));
    memmove(target + n, target + n - 1, RL_RULE_MAX + 2);
    target[n - 1] = 'k';
    target[n + RL_RULE_MAX] = '\0';
    assert_int_equal(query(target, &c, &cq, &why), RL_EINVAL);
    assert_string_equal(why, rl_strerror(RL_EKEYLONG));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_levels),
        cmocka_unit_test(test_bad_levels),
        cmocka_unit_test(test_level_bounds),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
