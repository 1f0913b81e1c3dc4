/* rl-bench --levels (label: integration): hierarchical keys against two
 * rl-servers over one private Redis. Users of three tenants check two
 * levels at once, all or nothing (the tenant's organisation under rule
 * org, 20 a second, and the user under rule user, 8 a second, one key
 * hot), from connections split over both servers (--fleet); the audit
 * replays the answers per level: no window of either level admitted past
 * its limit, and every window a level refused in had admitted exactly its
 * limit, so no level was charged by a refused check. Then the same load
 * audited against wrong limits fails it (exit 1) both ways: an
 * organisation's limit lower than the server's (over), and higher (a
 * level that refused with room the admissions left: what charges by
 * refused checks look like). Nothing here asserts a speed. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <unistd.h>

#include "rl_error.h"
#include "rlt.h"

#ifndef RL_SERVER_BIN
#error "RL_SERVER_BIN must name the rl-server binary"
#endif
#ifndef RL_BENCH_BIN
#error "RL_BENCH_BIN must name the rl-bench binary"
#endif

static char tmpdir[64];
static char json_path[128], out_path[128], err_path[128], rules[128];
static rlt_server_t servers[2] = {{.pid = -1}, {.pid = -1}};
static rlt_redis_t redis;
static int have_redis;
static char two[80];

/* rl-bench with the given arguments (NULL-terminated) after the shared
 * ones: the two servers, the levels, the audit. Returns its exit status,
 * or RL_EIO if it did not exit within a minute. */
static int bench(const char *prefix, const char *org_limit)
{
    char *argv[] = {RL_BENCH_BIN, "--server", two, "--fleet", "--connections",
                    "4", "--inflight", "8", "--levels", "3", "--keys", "12",
                    "--dist", "hot:0.5", "--rule", "user", "--org-rule", "org",
                    "--limit", "8", "--window", "1", "--org-limit",
                    (char *)org_limit, "--duration", "2.5", "--audit",
                    "--key-prefix", (char *)prefix, "--json", json_path,
                    /* Exactness, not latency: a loaded machine must not
                     * turn slow answers into errors. */
                    "--timeout-ms", "10000", NULL};

    return rlt_run(argv, out_path, err_path, 60000, NULL);
}

static int field(const char *json, const char *name, char *out, size_t cap)
{
    char pat[80];
    const char *p;
    size_t n;

    snprintf(pat, sizeof(pat), "\n  \"%s\": ", name);
    p = strstr(json, pat);
    if (p == NULL)
        return RL_EINVAL;
    p += strlen(pat);
    n = strcspn(p, ",\n");
    if (n >= cap)
        n = cap - 1;
    memcpy(out, p, n);
    out[n] = '\0';
    return 0;
}

static double num(const char *json, const char *name)
{
    char v[64];

    if (field(json, name, v, sizeof(v)) != 0)
        fail_msg("JSON has no field %s", name);
    return strtod(v, NULL);
}

static void expect_token(const char *json, const char *name, const char *want)
{
    char v[64];

    if (field(json, name, v, sizeof(v)) != 0)
        fail_msg("JSON has no field %s", name);
    if (strcmp(v, want) != 0)
        fail_msg("%s is %s, expected %s", name, v, want);
}

static int setup(void **state)
{
    char *argv[] = {"--log-level", "error", "--config",           rules,
                    "--redis",     NULL,    "--redis-timeout-ms", "5000",
                    NULL};
    char raddr[64];
    FILE *f;
    int i;

    (void)state;
    snprintf(tmpdir, sizeof(tmpdir), "/tmp/rl-bench-levels.XXXXXX");
    if (mkdtemp(tmpdir) == NULL)
        return RL_EIO;
    snprintf(json_path, sizeof(json_path), "%s/out.json", tmpdir);
    snprintf(out_path, sizeof(out_path), "%s/stdout", tmpdir);
    snprintf(err_path, sizeof(err_path), "%s/stderr", tmpdir);
    snprintf(rules, sizeof(rules), "%s/rules.yaml", tmpdir);
    if ((f = fopen(rules, "w")) == NULL)
        return RL_EIO;
    fputs("rules:\n  org:\n    limits: [20/1s]\n  user:\n"
          "    limits: [8/1s]\n",
          f);
    fclose(f);
    have_redis = rlt_redis_start(&redis) == 0;
    if (!have_redis)
        return 0;
    snprintf(raddr, sizeof(raddr), "127.0.0.1:%d", redis.port);
    argv[5] = raddr;
    for (i = 0; i < 2; i++)
        if (rlt_server_start(&servers[i], RL_SERVER_BIN, 0, argv) != RL_OK)
            return RL_EIO;
    snprintf(two, sizeof(two), "%s,%s", servers[0].addr, servers[1].addr);
    return 0;
}

static int teardown(void **state)
{
    int i;

    (void)state;
    for (i = 0; i < 2; i++)
        if (servers[i].pid > 0)
            rlt_server_stop(&servers[i]);
    if (have_redis)
        rlt_redis_stop(&redis);
    unlink(json_path);
    unlink(out_path);
    unlink(err_path);
    unlink(rules);
    rmdir(tmpdir);
    return 0;
}

/* The servers' own limits: clean at both levels, both levels hammered
 * (each refused, and windows it refused in checked exactly). */
static void test_levels_exact(void **state)
{
    char prefix[64], *json;

    (void)state;
    if (!have_redis)
        skip();
    snprintf(prefix, sizeof(prefix), "lv-%d:", (int)getpid());
    assert_int_equal(bench(prefix, "20"), 0);
    json = rlt_slurp(json_path);
    assert_non_null(json);
    expect_token(json, "errors", "0");
    expect_token(json, "failed_open", "0");
    expect_token(json, "levels_tenants", "3");
    expect_token(json, "audit_over_limit", "0");
    expect_token(json, "audit_org_over_limit", "0");
    expect_token(json, "audit_exact", "true");
    expect_token(json, "audit_org_exact", "true");
    assert_true(num(json, "levels_refused_org") > 0);
    assert_true(num(json, "levels_refused_user") > 0);
    assert_true(num(json, "audit_checked_windows") >= 1);
    assert_true(num(json, "audit_org_checked_windows") >= 1);
    /* Admitted at most the organisations' budgets of the windows seen. */
    assert_true(num(json, "allowed") > 0);
    print_message(
        "levels: %g admitted, %g refused (org %g, user %g); org "
        "windows exact %g of %g, user %g of %g\n",
        num(json, "allowed"), num(json, "denied"),
        num(json, "levels_refused_org"), num(json, "levels_refused_user"),
        num(json, "audit_org_exact_windows"),
        num(json, "audit_org_checked_windows"),
        num(json, "audit_exact_windows"), num(json, "audit_checked_windows"));
    free(json);
}

/* Audited against an organisation's limit below the server's: windows
 * over it (exit 1, listed). */
static void test_levels_expect_lower(void **state)
{
    char prefix[64], *json;

    (void)state;
    if (!have_redis)
        skip();
    snprintf(prefix, sizeof(prefix), "lv-lo-%d:", (int)getpid());
    assert_int_equal(bench(prefix, "15"), 1);
    json = rlt_slurp(json_path);
    assert_non_null(json);
    expect_token(json, "errors", "0");
    assert_true(num(json, "audit_org_over_limit") > 0);
    assert_non_null(strstr(json, "\"audit_org_violations\": [\n    {"));
    free(json);
}

/* Against one above it: nothing over, but the organisation refused in
 * windows whose admissions left it room, which is what a level charged by
 * refused checks looks like (exit 1). */
static void test_levels_expect_higher(void **state)
{
    char prefix[64], *json;

    (void)state;
    if (!have_redis)
        skip();
    snprintf(prefix, sizeof(prefix), "lv-hi-%d:", (int)getpid());
    assert_int_equal(bench(prefix, "25"), 1);
    json = rlt_slurp(json_path);
    assert_non_null(json);
    expect_token(json, "errors", "0");
    expect_token(json, "audit_org_over_limit", "0");
    expect_token(json, "audit_org_exact", "false");
    assert_non_null(strstr(json, "\"audit_org_inexact\": [\n    {"));
    free(json);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_levels_exact),
        cmocka_unit_test(test_levels_expect_lower),
        cmocka_unit_test(test_levels_expect_higher),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
