/* The fixture of tests that start rl-server, on top of rlt.h and cmocka:
 * what a test started (rl-servers, a private redis-server, a scratch
 * directory), released by its teardown whether it passed or not, and one
 * way for a program's tests to start their servers. */
#ifndef RLT_FX_H
#define RLT_FX_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "rlt.h"

#define RLT_FX_SERVERS 3

/* How a program's tests start rl-server, set once by its main before the
 * tests run (rlt_fx_use). */
typedef struct rlt_fx_conf_s {
    const char *bin;       /* the rl-server to run */
    const char *log_level; /* --log-level, unless $RLT_SERVER_LOG says */
    char *const *args;     /* given to every server, NULL-terminated;
                              kept, not copied: it must outlive the tests */
    int metrics;           /* --metrics 127.0.0.1:0 too */
    int gentle; /* the teardown stops servers with SIGTERM (SIGKILL after
                   5 s), to let them exit as they would; 0: SIGKILL */
} rlt_fx_conf_t;

void rlt_fx_use(const rlt_fx_conf_t *conf);

typedef struct rlt_fx_s {
    rlt_server_t srv[RLT_FX_SERVERS]; /* pid -1: not running */
    rlt_redis_t redis;                /* when redis_on (rlt_fx_redis) */
    int redis_on;
    char raddr[32];  /* the Redis's "127.0.0.1:PORT", for --redis */
    char dir[64];    /* a scratch directory (rlt_fx_mkdir); "" for none */
    char rules[128]; /* dir/rules.yaml: where a test writes --config's */
} rlt_fx_t;

/* Nothing started: every pid -1, no Redis, no directory. */
void rlt_fx_init(rlt_fx_t *f);

/* Stops every server (as rlt_fx_conf_t.gentle says) and the Redis (resumed
 * first if paused), each by pid, and removes the directory; then f is as
 * rlt_fx_init leaves it. */
void rlt_fx_release(rlt_fx_t *f);

/* cmocka setup and teardown: *state is a new rlt_fx_t, released and freed
 * by the teardown. */
int rlt_fx_setup(void **state);
int rlt_fx_teardown(void **state);

/* A cmocka test run with them. */
#define RLT_FX_TEST(t)                                                         \
    cmocka_unit_test_setup_teardown(t, rlt_fx_setup, rlt_fx_teardown)

/* Starts the private redis-server (f->redis, f->raddr); fails the test
 * when it does not start. */
void rlt_fx_redis(rlt_fx_t *f);

/* Makes f->dir, /tmp/rlt-<name>-XXXXXX, and names f->rules in it. Returns
 * 0 or RL_EIO. */
int rlt_fx_mkdir(rlt_fx_t *f, const char *name);

/* Starts server i as the program's configuration says, with the given
 * arguments (NULL-terminated) after the configured ones, and waits until
 * it listens; fails the test when it does not start. */
void rlt_fx_start(rlt_fx_t *f, int i, ...);

/* The same with more arguments (NULL-terminated, may be NULL) before
 * those of ap: for a program's own wrapper of rlt_fx_start. */
void rlt_fx_vstart(rlt_fx_t *f, int i, char *const more[], va_list ap);

/* rlt_metric, failing the test when /metrics does not answer 200: the
 * sample, or -1 when the page has none. */
long long rlt_fx_metric(int port, const char *name);

/* Writes text to path aside and renames it over, as editors and config
 * managers do; fails the test when it cannot. */
void rlt_fx_write_file(const char *path, const char *text);

#endif
