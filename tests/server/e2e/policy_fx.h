/* What the policy's end-to-end tests share (policy_fx.c): rl-servers
 * started on free loopback ports through rlt_fx, over the fixture's Redis
 * when it has one, their logs and /metrics read back; checks by rule;
 * load that keeps requests in flight; programs run to their end. Used by
 * e2e_policy.c, e2e_policy_fleet.c and e2e_policy_reload.c. */
#ifndef RLT_POLICY_FX_H
#define RLT_POLICY_FX_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "rl_msg.h"
#include "rlt.h"
#include "rlt_fx.h"

#define NSERVERS RLT_FX_SERVERS

/* Every test gets a fixture with a scratch directory for its rules file
 * (f->rules) and the servers' logs; its teardown stops every server by
 * pid (SIGTERM first), and the Redis, whether the test passed or not. */
int policy_setup(void **state);
#define POLICY_TEST(t)                                                         \
    cmocka_unit_test_setup_teardown(t, policy_setup, rlt_fx_teardown)

/* How the programs start rl-server: --metrics, --log-level error; and
 * SIGPIPE ignored. Called first by each main. */
void policy_init(void);

/* Starts server i with --metrics and the extra arguments (NULL-ended);
 * with Redis when the fixture has one, and then only once /healthz says
 * the server has connected to it. */
void start_server(rlt_fx_t *f, int i, ...);

/* Like start_server, at --log-level info, with the server's log (its
 * stderr) in f->dir/server<i>.log, for tests that read what it says. */
void start_server_logged(rlt_fx_t *f, int i, ...);

/* Lines of server i's log (start_server_logged) that contain all of the
 * given strings (NULL-ended). */
int log_lines(rlt_fx_t *f, int i, ...);

/* Runs a program to its end; returns its exit status, with its stdout and
 * stderr in out. */
int run(char *out, size_t len, const char *fmt, ...);

/* A sample of server i's /metrics page; -1 when absent. */
long long metric(const rlt_fx_t *f, int i, const char *name);

/* A counter that has not counted yet is absent from the page: 0. */
long long metric0(rlt_fx_t *f, int i, const char *name);

/* Waits until a metric of server i reaches at least v; returns the time it
 * took in ms, or fails the test after timeout_ms. */
uint64_t await_metric(rlt_fx_t *f, int i, const char *name, long long v,
                      uint64_t timeout_ms);

/* A check of `rule` for key, of the given cost. */
rl_check_t rule_check(uint64_t id, const char *key, const char *rule,
                      uint32_t cost);

/* One check on a fresh connection. */
rlt_result_t ask(int port, rl_check_t q);

/* An integer Redis answers to a command of the fixture's Redis (a string
 * read as one, nil as 0). */
long long redis_int(rlt_fx_t *f, const char *fmt, ...);

/* A client that keeps 32 requests for rule `rule` in flight on one
 * connection until told to stop, checking that every request is answered
 * exactly once; with check_pairs, that each answer's (limit, window)
 * belongs to one of the reload test's two policies. */
typedef struct {
    int port;
    const char *rule;
    int check_pairs;
    volatile int stop;
    uint64_t sent, answered, bad_pairs, errors;
    int rc;
} rl_load_t;

/* The client's thread: arg is its rl_load_t. */
void *load_run_rule(void *arg);

#endif
