/* The policy end to end, through real rl-server processes
 * (policy_fx.h): the rules file and --check-config, counters namespaced
 * per rule, inline caps, shadow mode. Several windows across a fleet and
 * rl-ctl are in e2e_policy_fleet.c, reloads in e2e_policy_reload.c.
 *
 * Every server and Redis is started on a free loopback port and stopped by
 * pid in the test's teardown, whether it passed or not; every wait polls a
 * condition with a deadline. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include <fcntl.h>
#include <time.h>
#include <unistd.h>

#include "rl_error.h"
#include "policy_fx.h"

#ifndef RL_SERVER_BIN
#error "RL_SERVER_BIN must name the rl-server binary"
#endif
#ifndef RL_CTL_BIN
#error "RL_CTL_BIN must name the rl-ctl binary"
#endif

static const char example[] =
    "rules:\n"
    "  login:\n"
    "    limits: [5/60s]\n"
    "  api:\n"
    "    limits: [33/1m, 2000/1h]        # every window must allow\n"
    "    overrides:                       # per-caller quotas, by exact key\n"
    "      \"user:acme\": [1000/1m, 50000/1h]\n"
    "  search:\n"
    "    limits: [10/1s]\n"
    "    mode: shadow                     # enforce (default) | shadow | off\n";

/* --check-config: 0 for a good file, 2 with FILE:LINE for each error. */
static void test_check_config(void **state)
{
    rlt_fx_t *f = *state;
    char out[8192], path[400];
    int fd;

    rlt_fx_write_file(f->rules, example);
    assert_int_equal(
        run(out, sizeof(out), "%s --check-config %s", RL_SERVER_BIN, f->rules),
        0);
    assert_non_null(strstr(out, "ok, 3 rules"));

    /* Every error, each with its line; nothing served. */
    rlt_fx_write_file(f->rules,
                      "rules:\n"
                      "  a:\n"
                      "    limits: [5/60x]\n"
                      "  b:\n"
                      "    limits: [0/1m]\n"
                      "    colour: red\n"
                      "  \"c d\":\n"
                      "    limits: [1/1s]\n"
                      "  e:\n"
                      "    limits: [1/1s, 1/2s, 1/3s, 1/4s, 1/5s, 1/6s, "
                      "1/7s, 1/8s, 1/9s]\n"
                      "  f:\n"
                      "    limits: [1/1s]\n"
                      "    overrides:\n"
                      "      \"\": [2/1s]\n"
                      "  a:\n"
                      "    limits: [1/1s]\n");
    assert_int_equal(
        run(out, sizeof(out), "%s --check-config %s", RL_SERVER_BIN, f->rules),
        2);
    snprintf(path, sizeof(path), "%s:3: bad limit", f->rules);
    assert_non_null(strstr(out, path));
    snprintf(path, sizeof(path), "%s:5: bad limit", f->rules);
    assert_non_null(strstr(out, path));
    snprintf(path, sizeof(path), "%s:6: unknown key 'colour'", f->rules);
    assert_non_null(strstr(out, path));
    snprintf(path, sizeof(path), "%s:7: bad rule name", f->rules);
    assert_non_null(strstr(out, path));
    snprintf(path, sizeof(path), "%s:10: more than 8 windows", f->rules);
    assert_non_null(strstr(out, path));
    snprintf(path, sizeof(path), "%s:14: override key a client could not",
             f->rules);
    assert_non_null(strstr(out, path));
    snprintf(path, sizeof(path), "%s:15: rule 'a' is defined twice", f->rules);
    assert_non_null(strstr(out, path));

    /* A --rule flag merges with the file; a name in both is an error. */
    rlt_fx_write_file(f->rules, example);
    assert_int_equal(run(out, sizeof(out),
                         "%s --rule extra=3/1s,9/1m --check-config %s",
                         RL_SERVER_BIN, f->rules),
                     0);
    assert_non_null(strstr(out, "ok, 4 rules"));
    assert_int_equal(run(out, sizeof(out),
                         "%s --rule login=3/1s "
                         "--check-config %s",
                         RL_SERVER_BIN, f->rules),
                     2);
    snprintf(path, sizeof(path), "%s:2: rule 'login' is defined twice",
             f->rules);
    assert_non_null(strstr(out, path));
    /* Serving refuses a bad file the same way, before listening. */
    assert_int_equal(run(out, sizeof(out),
                         "%s --listen 127.0.0.1:%d "
                         "--rule login=3/1s --config %s",
                         RL_SERVER_BIN, 0, f->rules),
                     2);

    /* 100 MB (sparse): refused before it is read. */
    snprintf(path, sizeof(path), "%s/big.yaml", f->dir);
    fd = open(path, O_CREAT | O_WRONLY, 0600);
    assert_true(fd >= 0);
    assert_int_equal(ftruncate(fd, 100 << 20), 0);
    close(fd);
    assert_int_equal(
        run(out, sizeof(out), "%s --check-config %s", RL_SERVER_BIN, path), 2);
    assert_non_null(strstr(out, "not a regular file of at most 16 MiB"));

    /* Deeply nested: refused at depth 8, memory bounded. */
    {
        static char deep[200016];
        memcpy(deep, "rules: ", 7);
        memset(deep + 7, '[', 200000);
        deep[200007] = '\n';
        deep[200008] = '\0';
        rlt_fx_write_file(f->rules, deep);
        assert_int_equal(run(out, sizeof(out), "%s --check-config %s",
                             RL_SERVER_BIN, f->rules),
                         2);
        assert_non_null(strstr(out, "nested deeper than 8 levels"));
    }
    /* Binary. */
    assert_int_equal(run(out, sizeof(out),
                         "head -c 4096 /dev/urandom > %s/bin.yaml; "
                         "%s --check-config %s/bin.yaml",
                         f->dir, RL_SERVER_BIN, f->dir),
                     2);
    assert_non_null(strstr(out, "bin.yaml:"));
}

/* --check-config and --check-envoy-config refuse a key given twice, with
 * both lines, instead of letting the last one win. */
static void test_check_duplicate_keys(void **state)
{
    rlt_fx_t *f = *state;
    char out[8192], want[512], envoy[128];

    rlt_fx_write_file(f->rules, "rules:\n"
                                "  api:\n"
                                "    limits: [1/1m]\n"
                                "    mode: shadow\n"
                                "    limits: [1000000/1s]\n"
                                "    mode: enforce\n");
    assert_int_equal(
        run(out, sizeof(out), "%s --check-config %s", RL_SERVER_BIN, f->rules),
        2);
    snprintf(want, sizeof(want),
             "%s:5: key 'limits' given twice (first at line 3)", f->rules);
    assert_non_null(strstr(out, want));
    snprintf(want, sizeof(want),
             "%s:6: key 'mode' given twice (first at line 4)", f->rules);
    assert_non_null(strstr(out, want));
    /* Serving refuses it the same way. */
    assert_int_equal(run(out, sizeof(out),
                         "%s --listen 127.0.0.1:0 "
                         "--config %s",
                         RL_SERVER_BIN, f->rules),
                     2);
    assert_non_null(strstr(out, want));

    snprintf(envoy, sizeof(envoy), "%s/envoy.yaml", f->dir);
    rlt_fx_write_file(envoy,
                      "domain: a\n"
                      "descriptors:\n"
                      "  - key: k\n"
                      "    rate_limit: {unit: minute, requests_per_unit: 1}\n"
                      "    rate_limit: {unit: second, requests_per_unit: 9}\n"
                      "domain: b\n");
    assert_int_equal(run(out, sizeof(out), "%s --check-envoy-config %s",
                         RL_SERVER_BIN, envoy),
                     2);
    snprintf(want, sizeof(want),
             "%s:5: key 'rate_limit' given twice (first at line 4)", envoy);
    assert_non_null(strstr(out, want));
    snprintf(want, sizeof(want),
             "%s:6: key 'domain' given twice (first at line 1)", envoy);
    assert_non_null(strstr(out, want));
}

/* A rule's counter cannot be spent through another rule, nor through an
 * inline limit on the same key and window. */
static void test_counters_belong_to_their_rule(void **state)
{
    rlt_fx_t *f = *state;
    int p, i;

    /* Hour windows, and not within 5 s of an hour's end: the counts
     * below must all fall in one window. */
    while (3600 - time(NULL) % 3600 < 5)
        rlt_nap_ms(200);
    rlt_fx_redis(f);
    start_server(f, 0, "--rule", "login=5/1h", "--rule", "api=100/1h", NULL);
    p = f->srv[0].port;
    /* login and api, same caller, same window length. */
    for (i = 0; i < 5; i++)
        assert_int_equal(ask(p, rule_check(1, "user:1", "login", 1)).r.code,
                         RL_CODE_OK);
    assert_int_equal(ask(p, rule_check(2, "user:1", "login", 1)).r.code,
                     RL_CODE_OVER_LIMIT);
    assert_int_equal(ask(p, rule_check(3, "user:1", "api", 1)).r.used, 1);

    /* The reproduction: an inline request with the same key and
     * window, a huge limit and cost 4, then login again. */
    assert_int_equal(ask(p, rule_check(4, "victim", "login", 1)).r.used, 1);
    assert_int_equal(ask(p, rlt_check(5, "victim", 1000000, 3600, 4)).r.code,
                     RL_CODE_OK);
    {
        rlt_result_t r = ask(p, rule_check(6, "victim", "login", 1));
        assert_int_equal(r.r.code, RL_CODE_OK);
        assert_int_equal(r.r.used, 2);
    }
    /* Distinct keys in Redis: the rule's and the inline limit's. */
    assert_int_equal(redis_int(f, "GET rl:{victim}:r:login:3600:%llu",
                               (unsigned long long)(time(NULL) / 3600)),
                     2);
    assert_int_equal(redis_int(f, "GET rl:{victim}:i:3600:%llu",
                               (unsigned long long)(time(NULL) / 3600)),
                     4);
}

static void test_inline_caps(void **state)
{
    rlt_fx_t *f = *state;
    rlt_result_t r;

    start_server(f, 0, "--rule", "r=5/1m", "--inline-limits", "deny", NULL);
    r = ask(f->srv[0].port, rlt_check(1, "k", 10, 60, 1));
    assert_int_equal(r.r.code, RL_CODE_ERROR);
    assert_non_null(strstr(r.err, "--inline-limits deny"));
    assert_int_equal(ask(f->srv[0].port, rule_check(2, "k", "r", 1)).r.code,
                     RL_CODE_OK);
    assert_int_equal(
        metric(f, 0, "rl_frames_rejected_total{reason=\"inline\"}"), 1);
    rlt_server_stop(&f->srv[0]);

    start_server(f, 0, "--max-inline-window", "3600", "--max-inline-limit",
                 "100", NULL);
    r = ask(f->srv[0].port, rlt_check(1, "k", 10, 7200, 1));
    assert_int_equal(r.r.code, RL_CODE_ERROR);
    assert_non_null(strstr(r.err, "--max-inline-window"));
    r = ask(f->srv[0].port, rlt_check(2, "k", 101, 60, 1));
    assert_int_equal(r.r.code, RL_CODE_ERROR);
    assert_non_null(strstr(r.err, "--max-inline-limit"));
    r = ask(f->srv[0].port, rlt_check(3, "k", 100, 3600, 1));
    assert_int_equal(r.r.code, RL_CODE_OK);
}

/* Shadow: counted as enforce would, answered OK, flagged and counted. */
static void test_shadow(void **state)
{
    rlt_fx_t *f = *state;
    rlt_result_t r;
    int i;

    rlt_fx_write_file(f->rules,
                      "rules:\n  s:\n    limits: [2/1h]\n    mode: shadow\n");
    start_server(f, 0, "--config", f->rules, NULL);
    for (i = 0; i < 2; i++) {
        r = ask(f->srv[0].port, rule_check((uint64_t)i + 1, "k", "s", 1));
        assert_int_equal(r.r.code, RL_CODE_OK);
        assert_int_equal(r.r.shadow_refused, 0);
    }
    r = ask(f->srv[0].port, rule_check(3, "k", "s", 1));
    assert_int_equal(r.r.code, RL_CODE_OK);
    assert_int_equal(r.r.shadow_refused, 1);
    assert_int_equal(r.r.used, 2); /* the refusal consumed nothing */
    assert_int_equal(r.r.window_s, 3600);
    assert_int_equal(r.r.retry_after_ms, 0);
    assert_int_equal(
        metric(f, 0,
               "rl_rule_decisions_total{rule=\"s\",result=\"shadow_refused\"}"),
        1);
    assert_int_equal(
        metric(f, 0, "rl_rule_decisions_total{rule=\"s\",result=\"allowed\"}"),
        2);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        POLICY_TEST(test_check_config),
        POLICY_TEST(test_check_duplicate_keys),
        POLICY_TEST(test_counters_belong_to_their_rule),
        POLICY_TEST(test_inline_caps),
        POLICY_TEST(test_shadow),
    };

    policy_init();
    return cmocka_run_group_tests(tests, NULL, NULL);
}
