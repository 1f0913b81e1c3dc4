/* The policy's end-to-end fixture (policy_fx.h). */
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "rl_error.h"
#include "policy_fx.h"

#ifndef RL_SERVER_BIN
#error "RL_SERVER_BIN must name the rl-server binary"
#endif

int policy_setup(void **state)
{
    if (rlt_fx_setup(state) != 0)
        return -1;
    return rlt_fx_mkdir(*state, "policy") == RL_OK ? 0 : -1;
}

void policy_init(void)
{
    signal(SIGPIPE, SIG_IGN);
    rlt_fx_use(&(rlt_fx_conf_t){
        .bin = RL_SERVER_BIN, .log_level = "error", .metrics = 1, .gentle = 1});
}

/* Starts server i with --metrics and the extra arguments (NULL-ended);
 * with Redis when the fixture has one. */
static void vstart_server(rlt_fx_t *f, int i, va_list ap)
{
    char *redis[] = {"--redis", f->raddr, NULL};

    rlt_fx_vstart(f, i, f->redis_on ? redis : NULL, ap);
    if (f->redis_on) {
        /* These tests count exact decisions: requests that come before
         * the server has connected to Redis get the fail mode, uncounted
         * (and /healthz says 503 until then). */
        char body[256];
        uint64_t t0 = rlt_mono_ms();

        while (rlt_http_get(f->srv[i].mport, "/healthz", body, sizeof(body)) !=
               200) {
            assert_true(rlt_mono_ms() - t0 < 5000);
            rlt_nap_ms(10);
        }
    }
}

void start_server(rlt_fx_t *f, int i, ...)
{
    va_list ap;

    va_start(ap, i);
    vstart_server(f, i, ap);
    va_end(ap);
}

/* Like start_server, at --log-level info, with the server's log (its
 * stderr) in f->dir/server<i>.log, for tests that read what it says. */
void start_server_logged(rlt_fx_t *f, int i, ...)
{
    char log[128];
    int saved = dup(2), fd;
    va_list ap;

    snprintf(log, sizeof(log), "%s/server%d.log", f->dir, i);
    fd = open(log, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND, 0600);
    assert_true(saved >= 0 && fd >= 0);
    /* The child inherits stderr: the log file, not the test's. */
    fflush(stderr);
    assert_int_equal(dup2(fd, 2), 2);
    close(fd);
    va_start(ap, i);
    vstart_server(f, i, ap);
    va_end(ap);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
}

/* Lines of server i's log (start_server_logged) that contain all of the
 * given strings (NULL-ended). */
int log_lines(rlt_fx_t *f, int i, ...)
{
    char path[128], line[2048];
    int n = 0;
    FILE *fp;

    snprintf(path, sizeof(path), "%s/server%d.log", f->dir, i);
    fp = fopen(path, "r");
    assert_non_null(fp);
    while (fgets(line, sizeof(line), fp) != NULL) {
        const char *want;
        int all = 1;
        va_list ap;

        va_start(ap, i);
        while ((want = va_arg(ap, const char *)) != NULL)
            all &= strstr(line, want) != NULL;
        va_end(ap);
        n += all;
    }
    fclose(fp);
    return n;
}

/* Runs a program to its end; returns its exit status, with its stdout and
 * stderr in out. */
int run(char *out, size_t len, const char *fmt, ...)
{
    char cmd[2048];
    size_t got = 0;
    va_list ap;
    FILE *p;
    int st;

    va_start(ap, fmt);
    vsnprintf(cmd, sizeof(cmd), fmt, ap);
    va_end(ap);
    strncat(cmd, " 2>&1", sizeof(cmd) - strlen(cmd) - 1);
    p = popen(cmd, "r");
    assert_non_null(p);
    while (got + 1 < len && fgets(out + got, (int)(len - got), p) != NULL)
        got += strlen(out + got);
    out[got] = '\0';
    st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

long long metric(const rlt_fx_t *f, int i, const char *name)
{
    return rlt_fx_metric(f->srv[i].mport, name);
}

/* A counter that has not counted yet is absent from the page: 0. */
long long metric0(rlt_fx_t *f, int i, const char *name)
{
    long long v = metric(f, i, name);

    return v < 0 ? 0 : v;
}

/* Waits until a metric of server i reaches at least v; returns the time it
 * took in ms, or fails the test after timeout_ms. */
uint64_t await_metric(rlt_fx_t *f, int i, const char *name, long long v,
                      uint64_t timeout_ms)
{
    uint64_t t0 = rlt_mono_ms();

    while (metric(f, i, name) < v) {
        if (rlt_mono_ms() - t0 > timeout_ms)
            fail_msg("server %d: %s stayed below %lld for %llu ms", i, name, v,
                     (unsigned long long)timeout_ms);
        rlt_nap_ms(5);
    }
    return rlt_mono_ms() - t0;
}

rl_check_t rule_check(uint64_t id, const char *key, const char *rule,
                      uint32_t cost)
{
    rl_check_t q;

    memset(&q, 0, sizeof(q));
    q.id = id;
    q.key = key;
    q.key_len = strlen(key);
    q.rule = rule;
    q.rule_len = strlen(rule);
    q.cost = cost;
    return q;
}

/* One check on a fresh connection. */
rlt_result_t ask(int port, rl_check_t q)
{
    rlt_result_t r;

    assert_int_equal(rlt_ask(port, &q, &r), RL_OK);
    assert_int_equal(r.r.id, q.id);
    return r;
}

long long redis_int(rlt_fx_t *f, const char *fmt, ...)
{
    redisContext *c = rlt_redis_connect(&f->redis);
    char cmd[512];
    redisReply *r;
    long long v = -1;
    va_list ap;

    assert_non_null(c);
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof(cmd), fmt, ap);
    va_end(ap);
    r = redisCommand(c, cmd);
    assert_non_null(r);
    if (r->type == REDIS_REPLY_INTEGER)
        v = r->integer;
    else if (r->type == REDIS_REPLY_STRING)
        v = strtoll(r->str, NULL, 10);
    else if (r->type == REDIS_REPLY_NIL)
        v = 0;
    freeReplyObject(r);
    redisFree(c);
    return v;
}

void *load_run_rule(void *arg)
{
    rl_load_t *l = arg;
    int fd = rlt_dial(l->port);
    rl_check_t q[32];
    rlt_result_t r[32];
    uint64_t id = 1;
    int i;

    l->rc = RL_EIO;
    if (fd < 0)
        return NULL;
    while (!l->stop) {
        uint8_t seen[32] = {0};
        for (i = 0; i < 32; i++)
            q[i] = rule_check(id + (uint64_t)i, i % 2 ? "a" : "b", l->rule, 1);
        if ((l->rc = rlt_exchange(fd, q, 32, r)) != RL_OK)
            break;
        l->sent += 32;
        for (i = 0; i < 32; i++) {
            const rl_result_t *x = &r[i].r;
            uint64_t k = x->id - id;
            /* Exactly once: every id of the round, none twice. */
            if (x->id < id || k >= 32 || seen[k]++) {
                l->rc = RL_EINVAL;
                break;
            }
            l->answered++;
            if (x->code == RL_CODE_ERROR)
                l->errors++;
            /* Each answer's window and limit belong to one policy's rule:
             * A = [7/1h, 11/1d], B = [13/2h, 17/2d]. */
            if (l->check_pairs && !((x->window_s == 3600 && x->limit == 7) ||
                                    (x->window_s == 86400 && x->limit == 11) ||
                                    (x->window_s == 7200 && x->limit == 13) ||
                                    (x->window_s == 172800 && x->limit == 17)))
                l->bad_pairs++;
        }
        if (l->rc != RL_OK)
            break;
        id += 32;
    }
    close(fd);
    return NULL;
}
