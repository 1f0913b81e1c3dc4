/* The policy's reloads end to end (policy_fx.h): a rules file rewritten
 * under load, SIGHUP, a file caught half written, a reload that loses
 * rules, a ConfigMap's switched symlinks, and what is not a regular file.
 * The reload's own workings, in process, are in policy/test_reload.c.
 *
 * Every server is started on a free loopback port and stopped by pid in
 * the test's teardown, whether it passed or not; every wait polls a
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
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "rl_error.h"
#include "policy_fx.h"

/* ---- reload under load ---- */

static void test_reload_under_load(void **state)
{
    rlt_fx_t *f = *state;
    static const char good_a[] = "rules:\n  r:\n    limits: [7/1h, 11/1d]\n";
    static const char good_b[] = "rules:\n  r:\n    limits: [13/2h, 17/2d]\n";
    static const char bad[] = "rules:\n  r:\n    limits: [7/1h, 0/1d]\n";
    static rl_load_t load;
    pthread_t th;
    int i, nbad = 0, ngood = 0;

    rlt_fx_write_file(f->rules, good_a);
    /* Files renamed over: no need to wait the default second for each of
     * the 50 to settle. */
    start_server(f, 0, "--config", f->rules, "--reload-settle-ms", "200", NULL);
    memset(&load, 0, sizeof(load));
    load.port = f->srv[0].port;
    load.rule = "r";
    load.check_pairs = 1;
    assert_int_equal(pthread_create(&th, NULL, load_run_rule, &load), 0);
    for (i = 0; i < 50; i++) {
        if (i % 2) {
            rlt_fx_write_file(f->rules, bad);
            nbad++;
            await_metric(f, 0, "rl_config_reload_failures_total", nbad, 5000);
        } else {
            rlt_fx_write_file(f->rules, (i / 2) % 2 ? good_a : good_b);
            ngood++;
            await_metric(f, 0, "rl_config_reloads_total", ngood, 5000);
        }
    }
    load.stop = 1;
    pthread_join(th, NULL);
    assert_int_equal(load.rc, RL_OK);
    assert_true(load.answered > 0);
    assert_int_equal(load.answered, load.sent);
    assert_int_equal(load.errors, 0);
    assert_int_equal(load.bad_pairs, 0);
    assert_int_equal(metric(f, 0, "rl_config_reload_failures_total"), nbad);
    assert_int_equal(metric(f, 0, "rl_config_reloads_total"), ngood);
    print_message("reload under load: %llu requests answered across %d "
                  "rewrites (%d refused)\n",
                  (unsigned long long)load.answered, 50, nbad);
}

/* SIGHUP reloads too; a file that vanishes keeps the rules. */
static void test_sighup(void **state)
{
    rlt_fx_t *f = *state;

    rlt_fx_write_file(f->rules, "rules:\n  r:\n    limits: [7/1h]\n");
    start_server(f, 0, "--config", f->rules, NULL);
    assert_int_equal(ask(f->srv[0].port, rule_check(1, "k", "r", 1)).r.limit,
                     7);
    kill(f->srv[0].pid, SIGHUP);
    await_metric(f, 0, "rl_config_reloads_total", 1, 5000);
    assert_int_equal(unlink(f->rules), 0);
    kill(f->srv[0].pid, SIGHUP);
    await_metric(f, 0, "rl_config_reload_failures_total", 1, 5000);
    assert_int_equal(ask(f->srv[0].port, rule_check(2, "k", "r", 1)).r.limit,
                     7);
}

/* The limit and window rule `rule` has for key now (limit 0: no rule). */
static void rule_now(rlt_fx_t *f, const char *rule, uint64_t *limit,
                     uint32_t *window)
{
    static uint64_t id = 1000;
    rlt_result_t r = ask(f->srv[0].port, rule_check(++id, "k", rule, 0));

    *limit = r.r.code == RL_CODE_ERROR ? 0 : r.r.limit;
    *window = r.r.window_s;
}

#define EXPECT_RULE(f, rule, lim, win)                                         \
    do {                                                                       \
        uint64_t l_;                                                           \
        uint32_t w_;                                                           \
        rule_now(f, rule, &l_, &w_);                                           \
        if (l_ != (lim) || w_ != (win))                                        \
            fail_msg("rule %s: %llu/%us, want %llu/%us", rule,                 \
                     (unsigned long long)l_, w_, (unsigned long long)(lim),    \
                     (unsigned)(win));                                         \
    } while (0)

/* A file written in place by a writer that pauses mid-write is not read
 * half-written: the watch waits until the file has stopped changing
 * (1 s by default), so requests meanwhile see the old rules, and the
 * whole new file is what goes live, in one reload. */
static void test_half_written_file(void **state)
{
    rlt_fx_t *f = *state;
    static const char whole[] = "rules:\n"
                                "  api:\n"
                                "    limits: 20000/1h\n"
                                "  login:\n"
                                "    limits: 5/1m\n";
    /* Cut inside "1h": what was written so far parses, as 20000 a second
     * and without login. */
    size_t cut = (size_t)(strstr(whole, "/1h") - whole) + 2;
    uint64_t t0;
    int fd;

    rlt_fx_write_file(f->rules, "rules:\n"
                                "  api:\n"
                                "    limits: 10000/1h\n"
                                "  login:\n"
                                "    limits: 5/1m\n");
    start_server(f, 0, "--config", f->rules, NULL);
    EXPECT_RULE(f, "api", 10000, 3600);
    fd = open(f->rules, O_WRONLY | O_TRUNC);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, whole, cut), (ssize_t)cut);
    /* The writer's pause: longer than the watch's 50 ms debounce, shorter
     * than its settle time. */
    t0 = rlt_mono_ms();
    while (rlt_mono_ms() - t0 < 400) {
        EXPECT_RULE(f, "api", 10000, 3600);
        EXPECT_RULE(f, "login", 5, 60);
        rlt_nap_ms(20);
    }
    assert_int_equal(write(fd, whole + cut, strlen(whole) - cut),
                     (ssize_t)(strlen(whole) - cut));
    assert_int_equal(close(fd), 0);
    await_metric(f, 0, "rl_config_reloads_total", 1, 10000);
    EXPECT_RULE(f, "api", 20000, 3600);
    EXPECT_RULE(f, "login", 5, 60);
    assert_int_equal(metric(f, 0, "rl_config_reloads_total"), 1);
    assert_int_equal(metric0(f, 0, "rl_config_reload_failures_total"), 0);
}

/* A good file that lacks rules the last one had is loaded, with a
 * warning naming them. */
static void test_lost_rules_warning(void **state)
{
    rlt_fx_t *f = *state;

    rlt_fx_write_file(f->rules, "rules:\n"
                                "  a: {limits: 1/1s}\n"
                                "  b: {limits: 1/1s}\n"
                                "  c: {limits: 1/1s}\n");
    start_server_logged(f, 0, "--config", f->rules, "--log-level", "info",
                        NULL);
    rlt_fx_write_file(f->rules, "rules:\n  a: {limits: 2/1s}\n");
    await_metric(f, 0, "rl_config_reloads_total", 1, 10000);
    EXPECT_RULE(f, "a", 2, 1);
    assert_int_equal(log_lines(f, 0, "level=warn",
                               "rules reloaded without rules the last file "
                               "had",
                               "missing=2", "names=\"b,c\"", NULL),
                     1);
    /* A file with the same rules (or more) says nothing of the kind. */
    rlt_fx_write_file(f->rules,
                      "rules:\n  a: {limits: 3/1s}\n  d: {limits: 1/1s}\n");
    await_metric(f, 0, "rl_config_reloads_total", 2, 10000);
    assert_int_equal(log_lines(f, 0, "without rules", NULL), 1);
}

/* A version of a ConfigMap volume as the kubelet writes it: a new
 * timestamped directory with the files, a ..data_tmp link to it renamed
 * over ..data, the old directory removed. The file's own path is a link
 * through ..data, made once. */
static void configmap_version(const char *cm, int v, const char *text)
{
    char ts[256], file[320], tmp[256], data[256], old[320];

    snprintf(ts, sizeof(ts), "..2026_01_01_00_00_%02d.%09d", v, 100000 + v);
    snprintf(file, sizeof(file), "%s/%s", cm, ts);
    assert_int_equal(mkdir(file, 0755), 0);
    snprintf(file, sizeof(file), "%s/%s/rules.yaml", cm, ts);
    {
        FILE *fp = fopen(file, "w");
        assert_non_null(fp);
        assert_true(fputs(text, fp) >= 0);
        assert_int_equal(fclose(fp), 0);
    }
    snprintf(tmp, sizeof(tmp), "%s/..data_tmp", cm);
    snprintf(data, sizeof(data), "%s/..data", cm);
    assert_int_equal(symlink(ts, tmp), 0);
    assert_int_equal(rename(tmp, data), 0);
    if (v > 1) {
        snprintf(old, sizeof(old), "rm -rf '%s/..2026_01_01_00_00_%02d.%09d'",
                 cm, v - 1, 100000 + v - 1);
        assert_int_equal(system(old), 0);
    } else {
        snprintf(file, sizeof(file), "%s/rules.yaml", cm);
        assert_int_equal(symlink("..data/rules.yaml", file), 0);
    }
}

/* A rules file mounted from a Kubernetes ConfigMap is reloaded when the
 * kubelet switches ..data to a new version. */
static void test_configmap(void **state)
{
    rlt_fx_t *f = *state;
    char cm[128], path[160];

    snprintf(cm, sizeof(cm), "%s/cm", f->dir);
    assert_int_equal(mkdir(cm, 0755), 0);
    configmap_version(cm, 1, "rules:\n  r:\n    limits: [7/1h]\n");
    snprintf(path, sizeof(path), "%s/rules.yaml", cm);
    start_server(f, 0, "--config", path, NULL);
    EXPECT_RULE(f, "r", 7, 3600);
    configmap_version(cm, 2, "rules:\n  r:\n    limits: [13/2h]\n");
    await_metric(f, 0, "rl_config_reloads_total", 1, 10000);
    EXPECT_RULE(f, "r", 13, 7200);
    configmap_version(cm, 3, "rules:\n  r:\n    limits: [17/2d]\n");
    await_metric(f, 0, "rl_config_reloads_total", 2, 10000);
    EXPECT_RULE(f, "r", 17, 172800);
    assert_int_equal(metric0(f, 0, "rl_config_reload_failures_total"), 0);
}

/* A FIFO, a directory and a socket renamed over the rules file: each is
 * refused with one error line, without blocking (a FIFO opened for
 * reading waits for a writer), and the server answers throughout under
 * the rules in force. */
static void test_not_regular_file(void **state)
{
    rlt_fx_t *f = *state;
    struct sockaddr_un sa;
    char tmp[160];
    int s;

    snprintf(tmp, sizeof(tmp), "%s/incoming", f->dir);
    rlt_fx_write_file(f->rules, "rules:\n  r:\n    limits: [7/1h]\n");
    start_server_logged(f, 0, "--config", f->rules, NULL);

    assert_int_equal(mkfifo(tmp, 0600), 0);
    assert_int_equal(rename(tmp, f->rules), 0);
    await_metric(f, 0, "rl_config_reload_failures_total", 1, 10000);
    EXPECT_RULE(f, "r", 7, 3600);

    assert_int_equal(unlink(f->rules), 0);
    assert_int_equal(mkdir(tmp, 0700), 0);
    assert_int_equal(rename(tmp, f->rules), 0);
    await_metric(f, 0, "rl_config_reload_failures_total", 2, 10000);
    EXPECT_RULE(f, "r", 7, 3600);

    assert_int_equal(rmdir(f->rules), 0);
    s = socket(AF_UNIX, SOCK_STREAM, 0);
    assert_true(s >= 0);
    memset(&sa, 0, sizeof(sa));
    sa.sun_family = AF_UNIX;
    assert_true(strlen(tmp) < sizeof(sa.sun_path));
    memcpy(sa.sun_path, tmp, strlen(tmp) + 1);
    assert_int_equal(bind(s, (struct sockaddr *)&sa, sizeof(sa)), 0);
    assert_int_equal(rename(tmp, f->rules), 0);
    await_metric(f, 0, "rl_config_reload_failures_total", 3, 10000);
    EXPECT_RULE(f, "r", 7, 3600);
    close(s);

    assert_int_equal(unlink(f->rules), 0);
    rlt_fx_write_file(f->rules, "rules:\n  r:\n    limits: [13/2h]\n");
    await_metric(f, 0, "rl_config_reloads_total", 1, 10000);
    EXPECT_RULE(f, "r", 13, 7200);
    assert_int_equal(metric(f, 0, "rl_config_reload_failures_total"), 3);
    assert_int_equal(log_lines(f, 0, "rules not reloaded", NULL), 3);
    assert_int_equal(log_lines(f, 0, "rules not reloaded",
                               "not a regular file (a FIFO)", NULL),
                     1);
    assert_int_equal(log_lines(f, 0, "rules not reloaded",
                               "not a regular file (a directory)", NULL),
                     1);
    assert_int_equal(log_lines(f, 0, "rules not reloaded",
                               "not a regular file (a socket)", NULL),
                     1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        POLICY_TEST(test_reload_under_load),
        POLICY_TEST(test_sighup),
        POLICY_TEST(test_half_written_file),
        POLICY_TEST(test_lost_rules_warning),
        POLICY_TEST(test_configmap),
        POLICY_TEST(test_not_regular_file),
    };

    policy_init();
    return cmocka_run_group_tests(tests, NULL, NULL);
}
