/* --envoy-config DIR (server/envoy/dir.c, envoy/reload.c): which
 * files of a directory are read, its signature, and a reload on a real
 * loop when a ConfigMap-style directory is switched (..data swapped, a key
 * added, then one removed), as Kubernetes updates a mounted ConfigMap. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include <errno.h>
#include <sys/stat.h>
#include <unistd.h>

#include "envoy/dir.h"
#include "envoy/reload.h"
#include "rl_error.h"
#include "rlt_fx.h"

static char base[64];

static void domain_file(const char *path, const char *domain)
{
    char text[256];

    snprintf(text, sizeof(text),
             "domain: %s\ndescriptors:\n  - key: k\n"
             "    rate_limit: {unit: second, requests_per_unit: 1}\n",
             domain);
    rlt_fx_write_file(path, text);
}

static int setup(void **state)
{
    (void)state;
    snprintf(base, sizeof(base), "/tmp/rlt-envoy-dir-XXXXXX");
    assert_non_null(mkdtemp(base));
    rls_envoy_dir_set_ignore_dot(0);
    return 0;
}

static int teardown(void **state)
{
    char cmd[128];

    (void)state;
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", base);
    assert_int_equal(system(cmd), 0);
    rls_envoy_dir_set_ignore_dot(0);
    return 0;
}

static void path_of(char *out, size_t len, const char *rel)
{
    snprintf(out, len, "%s/%s", base, rel);
}

/* *.yaml and *.yml, sorted; dot files unless ignored; no other names, no
 * subdirectory, no link to nothing; a link to a file is followed. */
static void test_list(void **state)
{
    char p[256], q[256], why[128], **files;
    size_t n;

    (void)state;
    path_of(p, sizeof(p), "d");
    assert_int_equal(mkdir(p, 0755), 0);
    path_of(p, sizeof(p), "d/b.yml");
    domain_file(p, "b");
    path_of(p, sizeof(p), "d/a.yaml");
    domain_file(p, "a");
    path_of(p, sizeof(p), "d/.h.yaml");
    domain_file(p, "h");
    path_of(p, sizeof(p), "d/notes.txt");
    rlt_fx_write_file(p, "not yaml\n");
    path_of(p, sizeof(p), "d/sub.yaml");
    assert_int_equal(mkdir(p, 0755), 0);
    path_of(p, sizeof(p), "d/gone.yaml");
    assert_int_equal(symlink("/nonexistent/x.yaml", p), 0);
    path_of(q, sizeof(q), "real.yaml");
    domain_file(q, "l");
    path_of(p, sizeof(p), "d/link.yaml");
    assert_int_equal(symlink(q, p), 0);

    path_of(p, sizeof(p), "d");
    assert_int_equal(rls_envoy_dir_list(p, &files, &n, why, sizeof(why)),
                     RL_OK);
    assert_int_equal(n, 4);
    assert_non_null(strstr(files[0], "/d/.h.yaml"));
    assert_non_null(strstr(files[1], "/d/a.yaml"));
    assert_non_null(strstr(files[2], "/d/b.yml"));
    assert_non_null(strstr(files[3], "/d/link.yaml"));
    rls_envoy_dir_free(files, n);

    rls_envoy_dir_set_ignore_dot(1);
    assert_int_equal(rls_envoy_dir_list(p, &files, &n, why, sizeof(why)),
                     RL_OK);
    assert_int_equal(n, 3);
    assert_non_null(strstr(files[0], "/d/a.yaml"));
    rls_envoy_dir_free(files, n);

    path_of(p, sizeof(p), "missing");
    assert_int_equal(rls_envoy_dir_list(p, &files, &n, why, sizeof(why)),
                     RL_EINVAL);
    assert_non_null(strstr(why, "no such directory"));
}

/* A directory among the paths stands for its files; an empty one adds
 * none; a missing one is an error naming it. */
static void test_build(void **state)
{
    char d[256], e[256], f[256], p[256];
    const char *paths[3] = {d, e, f};
    rls_envoy_conf_t *c = NULL;
    rls_diag_t diag;

    (void)state;
    path_of(d, sizeof(d), "d");
    path_of(e, sizeof(e), "empty");
    path_of(f, sizeof(f), "one.yaml");
    assert_int_equal(mkdir(d, 0755), 0);
    assert_int_equal(mkdir(e, 0755), 0);
    path_of(p, sizeof(p), "d/x.yaml");
    domain_file(p, "x");
    path_of(p, sizeof(p), "d/y.yaml");
    domain_file(p, "y");
    domain_file(f, "z");
    assert_int_equal(rls_envoy_conf_build_paths(paths, 3, NULL, &c, &diag), RL_OK);
    assert_int_equal(rls_envoy_conf_domains(c), 3);
    rls_envoy_conf_unref(c);
    assert_int_equal(rls_envoy_conf_build_paths(paths + 1, 1, NULL, &c, &diag),
                     RL_OK);
    assert_int_equal(rls_envoy_conf_domains(c), 0);
    rls_envoy_conf_unref(c);
    /* Two files of one domain: refused, as envoy-ratelimit refuses it. */
    path_of(p, sizeof(p), "d/x2.yaml");
    domain_file(p, "x");
    assert_int_equal(rls_envoy_conf_build_paths(paths, 1, NULL, &c, &diag),
                     RL_EINVAL);
    assert_null(c);
    /* A path that was a file stays one: a directory renamed over it is
     * refused ("not a regular file"), not read as a directory. */
    {
        const unsigned char file[1] = {0};
        const char *one[1] = {f};
        assert_int_equal(unlink(f), 0);
        assert_int_equal(mkdir(f, 0755), 0);
        assert_int_equal(rls_envoy_conf_build_paths(one, 1, file, &c, &diag),
                         RL_EINVAL);
        assert_non_null(strstr(diag.msg[0], "not a regular file"));
    }
    path_of(d, sizeof(d), "nowhere");
    assert_int_equal(rls_envoy_conf_build_paths(paths, 1, NULL, &c, &diag),
                     RL_EINVAL);
    assert_non_null(strstr(diag.msg[0], "nowhere"));
}

/* The signature moves with the set of files and with any of them, not
 * with a file that is not read. */
static void test_signature(void **state)
{
    char d[256], p[256];
    uint64_t s0[4], s1[4];

    (void)state;
    path_of(d, sizeof(d), "d");
    assert_int_equal(mkdir(d, 0755), 0);
    rls_path_signature(d, s0);
    assert_true(s0[0] != 0);
    path_of(p, sizeof(p), "d/a.yaml");
    domain_file(p, "a");
    rls_path_signature(d, s1);
    assert_memory_not_equal(s0, s1, sizeof(s0));
    memcpy(s0, s1, sizeof(s0));
    path_of(p, sizeof(p), "d/readme.txt");
    rlt_fx_write_file(p, "x\n");
    rls_path_signature(d, s1);
    assert_memory_equal(s0, s1, sizeof(s0));
    path_of(p, sizeof(p), "d/a.yaml");
    domain_file(p, "a-longer-name");
    rls_path_signature(d, s1);
    assert_memory_not_equal(s0, s1, sizeof(s0));
    path_of(p, sizeof(p), "d/missing");
    rls_path_signature(p, s1);
    assert_true(s1[0] == 0);
}

/* The reload: a ConfigMap mounted at DIR, switched twice. */
typedef struct {
    uv_loop_t loop;
    rls_envoy_reload_t r;
    uv_timer_t deadline;
    char dir[256];
    int installs;
    size_t domains[8];
} cm_t;

static cm_t cm;

/* Kubernetes' atomic writer: the keys' new versions in a new ..TS
 * directory, ..data switched to it by rename, then the keys' links made
 * (new keys) or removed (keys gone). */
static void cm_write(int version, const char *const *keys, size_t n,
                     const char *gone)
{
    char ts[300], p[400], link[400], tmp[300];
    size_t i;

    snprintf(ts, sizeof(ts), "%s/..2026_12_02_v%d", cm.dir, version);
    assert_int_equal(mkdir(ts, 0755), 0);
    for (i = 0; i < n; i++) {
        snprintf(p, sizeof(p), "%s/%s.yaml", ts, keys[i]);
        domain_file(p, keys[i]);
    }
    snprintf(tmp, sizeof(tmp), "%s/..data_tmp", cm.dir);
    snprintf(link, sizeof(link), "..2026_12_02_v%d", version);
    assert_int_equal(symlink(link, tmp), 0);
    snprintf(p, sizeof(p), "%s/..data", cm.dir);
    assert_int_equal(rename(tmp, p), 0);
    for (i = 0; i < n; i++) {
        snprintf(p, sizeof(p), "%s/%s.yaml", cm.dir, keys[i]);
        snprintf(link, sizeof(link), "..data/%s.yaml", keys[i]);
        if (symlink(link, p) != 0)
            assert_int_equal(errno, EEXIST); /* a key kept */
    }
    if (gone != NULL) {
        snprintf(p, sizeof(p), "%s/%s.yaml", cm.dir, gone);
        assert_int_equal(unlink(p), 0);
    }
}

static void on_deadline(uv_timer_t *t);

static void on_install(void *arg, rls_envoy_conf_t *conf)
{
    static const char *const one[] = {"a"};

    (void)arg;
    cm.domains[cm.installs++] = rls_envoy_conf_domains(conf);
    rls_envoy_conf_unref(conf);
    if (cm.installs == 1) {
        cm_write(3, one, 1, "b"); /* b removed */
    } else if (cm.installs == 2) {
        /* Stopped from the loop, not from inside the reloader's call. */
        uv_timer_start(&cm.deadline, on_deadline, 0, 0);
    }
}

static void on_deadline(uv_timer_t *t)
{
    (void)t;
    rls_envoy_reload_close(&cm.r);
    uv_close((uv_handle_t *)&cm.deadline, NULL);
}

static void on_first(uv_timer_t *t)
{
    static const char *const two[] = {"a", "b"};

    cm_write(2, two, 2, NULL); /* b added */
    uv_timer_start(t, on_deadline, 20000, 0);
}

static void test_configmap_reload(void **state)
{
    static const char *const one[] = {"a"};
    const char *paths[1];

    (void)state;
    memset(&cm, 0, sizeof(cm));
    path_of(cm.dir, sizeof(cm.dir), "config");
    assert_int_equal(mkdir(cm.dir, 0755), 0);
    rls_envoy_dir_set_ignore_dot(1);
    cm_write(1, one, 1, NULL);
    paths[0] = cm.dir;
    assert_int_equal(uv_loop_init(&cm.loop), 0);
    assert_int_equal(rls_envoy_reload_start(&cm.r, &cm.loop, paths, 1, 50,
                                            on_install, NULL),
                     0);
    uv_timer_init(&cm.loop, &cm.deadline);
    uv_timer_start(&cm.deadline, on_first, 100, 0);
    assert_int_equal(uv_run(&cm.loop, UV_RUN_DEFAULT), 0);
    assert_int_equal(uv_loop_close(&cm.loop), 0);
    assert_int_equal(cm.installs, 2);
    assert_int_equal(cm.domains[0], 2); /* the key added */
    assert_int_equal(cm.domains[1], 1); /* the key removed */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_list, setup, teardown),
        cmocka_unit_test_setup_teardown(test_build, setup, teardown),
        cmocka_unit_test_setup_teardown(test_signature, setup, teardown),
        cmocka_unit_test_setup_teardown(test_configmap_reload, setup,
                                        teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
