#include "rlt_fx.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rl_error.h"

static rlt_fx_conf_t conf;

void rlt_fx_use(const rlt_fx_conf_t *c)
{
    conf = *c;
}

void rlt_fx_init(rlt_fx_t *f)
{
    int i;

    memset(f, 0, sizeof(*f));
    for (i = 0; i < RLT_FX_SERVERS; i++)
        f->srv[i].pid = -1;
    f->redis.pid = -1;
}

void rlt_fx_release(rlt_fx_t *f)
{
    int i;

    for (i = 0; i < RLT_FX_SERVERS; i++) {
        if (conf.gentle && f->srv[i].pid > 0)
            rlt_server_stop(&f->srv[i]);
        rlt_server_kill(&f->srv[i]);
    }
    if (f->redis_on) {
        /* A paused Redis would take SIGTERM only once resumed. */
        rlt_redis_pause(&f->redis, 0);
        rlt_redis_stop(&f->redis);
    }
    if (f->dir[0] != '\0')
        rlt_rmtree(f->dir);
    rlt_fx_init(f);
}

int rlt_fx_setup(void **state)
{
    rlt_fx_t *f = malloc(sizeof(*f));

    if (f == NULL)
        return -1;
    rlt_fx_init(f);
    *state = f;
    return 0;
}

int rlt_fx_teardown(void **state)
{
    rlt_fx_t *f = *state;

    rlt_fx_release(f);
    free(f);
    return 0;
}

void rlt_fx_redis(rlt_fx_t *f)
{
    assert_int_equal(rlt_redis_start(&f->redis), RL_OK);
    f->redis_on = 1;
    snprintf(f->raddr, sizeof(f->raddr), "127.0.0.1:%d", f->redis.port);
}

int rlt_fx_mkdir(rlt_fx_t *f, const char *name)
{
    snprintf(f->dir, sizeof(f->dir), "/tmp/rlt-%s-XXXXXX", name);
    if (mkdtemp(f->dir) == NULL) {
        f->dir[0] = '\0';
        return RL_EIO;
    }
    snprintf(f->rules, sizeof(f->rules), "%s/rules.yaml", f->dir);
    return RL_OK;
}

void rlt_fx_vstart(rlt_fx_t *f, int i, char *const more[], va_list ap)
{
    char *argv[48];
    const char *a;
    size_t n = 0, k;
    int rc;

    assert_non_null(conf.bin);
    assert_true(i >= 0 && i < RLT_FX_SERVERS);
    argv[n++] = "--log-level";
    argv[n++] = (char *)rlt_log_level(conf.log_level);
    for (k = 0; conf.args != NULL && conf.args[k] != NULL; k++)
        argv[n++] = conf.args[k];
    for (k = 0; more != NULL && more[k] != NULL; k++)
        argv[n++] = more[k];
    while ((a = va_arg(ap, const char *)) != NULL) {
        if (n + 1 >= sizeof(argv) / sizeof(argv[0]))
            fail_msg("rl-server: too many arguments");
        argv[n++] = (char *)a;
    }
    argv[n] = NULL;
    rc = conf.metrics ? rlt_server_start_metrics(&f->srv[i], conf.bin, argv)
                      : rlt_server_start(&f->srv[i], conf.bin, 0, argv);
    if (rc != RL_OK)
        fail_msg("rl-server did not start");
}

void rlt_fx_start(rlt_fx_t *f, int i, ...)
{
    va_list ap;

    va_start(ap, i);
    rlt_fx_vstart(f, i, NULL, ap);
    va_end(ap);
}

long long rlt_fx_metric(int port, const char *name)
{
    static char page[1 << 18];

    assert_int_equal(rlt_http_get(port, "/metrics", page, sizeof(page)), 200);
    return rlt_sample(page, name);
}

void rlt_fx_write_file(const char *path, const char *text)
{
    char tmp[256];
    FILE *fp;

    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    fp = fopen(tmp, "w");
    assert_non_null(fp);
    assert_true(fputs(text, fp) >= 0);
    assert_int_equal(fclose(fp), 0);
    assert_int_equal(rename(tmp, path), 0);
}
