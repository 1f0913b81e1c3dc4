/* The policy end to end across a fleet (policy_fx.h): several windows
 * exact across three servers on one Redis (refusals consume nothing),
 * quota-fit counters summed over the fleet, quotas and switches from
 * rl-ctl reaching every server, and a new server taking work only once
 * it has read the switches.
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

#include <pthread.h>
#include <unistd.h>

#include "rl_admit.h"
#include "rl_error.h"
#include "policy_fx.h"

#ifndef RL_SERVER_BIN
#error "RL_SERVER_BIN must name the rl-server binary"
#endif
#ifndef RL_CTL_BIN
#error "RL_CTL_BIN must name the rl-ctl binary"
#endif

/* ---- three servers, one Redis ---- */

#define FLEET_KEYS 6
#define FLEET_REQS 400

typedef struct {
    int port;
    int server;
    rl_check_t q[FLEET_REQS];
    rlt_result_t r[FLEET_REQS];
    char keys[FLEET_REQS][16];
    int rc;
} load_t;

static void *load_run(void *arg)
{
    load_t *l = arg;
    int fd = rlt_dial(l->port), i;

    l->rc = RL_EIO;
    if (fd < 0)
        return NULL;
    /* Four pipelined rounds, so batches interleave across servers. */
    for (i = 0; i < 4; i++) {
        int n = FLEET_REQS / 4;
        if ((l->rc = rlt_exchange(fd, l->q + i * n, (size_t)n, l->r + i * n)) !=
            RL_OK)
            break;
    }
    close(fd);
    return NULL;
}

/* Several windows, exact across the fleet: each window admits no more than
 * its limit, the tightest admits exactly it, refusals consume nothing, and
 * the quota-fit counters summed over the servers match the answers. */
static void test_fleet_exact(void **state)
{
    rlt_fx_t *f = *state;
    static load_t load[NSERVERS];
    pthread_t th[NSERVERS];
    uint64_t admitted_cost[FLEET_KEYS] = {0};
    long long started = 0, reached100 = 0, allowed = 0;
    char name[160];
    int i, j, k;

    /* Windows of an hour and a day, so none rolls over during the test. */
    rlt_fx_write_file(f->rules, "rules:\n"
                                "  hot:\n"
                                "    limits: [40/1h, 25/1d]\n");
    rlt_fx_redis(f);
    for (i = 0; i < NSERVERS; i++)
        start_server(f, i, "--config", f->rules, NULL);
    for (i = 0; i < NSERVERS; i++) {
        load[i].port = f->srv[i].port;
        for (j = 0; j < FLEET_REQS; j++) {
            snprintf(load[i].keys[j], sizeof(load[i].keys[j]), "k%d",
                     j % FLEET_KEYS);
            load[i].q[j] = rule_check((uint64_t)j + 1, load[i].keys[j], "hot",
                                      (uint32_t)(1 + (i + j) % 3));
        }
    }
    for (i = 0; i < NSERVERS; i++)
        assert_int_equal(pthread_create(&th[i], NULL, load_run, &load[i]), 0);
    for (i = 0; i < NSERVERS; i++) {
        pthread_join(th[i], NULL);
        assert_int_equal(load[i].rc, RL_OK);
    }
    for (i = 0; i < NSERVERS; i++)
        for (j = 0; j < FLEET_REQS; j++) {
            const rl_result_t *r = &load[i].r[j].r;
            const rl_check_t *q = &load[i].q[r->id - 1];
            assert_true(r->code == RL_CODE_OK || r->code == RL_CODE_OVER_LIMIT);
            if (r->code == RL_CODE_OK) {
                admitted_cost[q->key[1] - '0'] += q->cost;
                allowed++;
            }
        }
    for (k = 0; k < FLEET_KEYS; k++) {
        /* Never over the tightest limit, and filled up to within one
         * request's cost of it (costs are 1 to 3). */
        assert_true(admitted_cost[k] <= 25);
        assert_true(admitted_cost[k] >= 23);
        /* Redis holds exactly the admitted cost in both windows: the
         * refusals consumed nothing. */
        assert_int_equal(redis_int(f, "GET rl:{k%d}:r:hot:3600:%llu", k,
                                   (unsigned long long)(time(NULL) / 3600)),
                         (long long)admitted_cost[k]);
        assert_int_equal(redis_int(f, "GET rl:{k%d}:r:hot:86400:%llu", k,
                                   (unsigned long long)(time(NULL) / 86400)),
                         (long long)admitted_cost[k]);
    }
    /* The fleet's counters, summed, equal what the answers say: every
     * caller-window started once; reached 100 % of 25 for the day window
     * only where the admitted cost is exactly 25. */
    for (i = 0; i < NSERVERS; i++) {
        snprintf(
            name, sizeof(name),
            "rl_rule_windows_started_total{rule=\"hot\",window=\"86400\"}");
        started += metric0(f, i, name);
        snprintf(name, sizeof(name),
                 "rl_rule_windows_reached_total{rule=\"hot\",window=\"86400\","
                 "threshold=\"100\"}");
        reached100 += metric0(f, i, name);
        allowed -= metric0(
            f, i, "rl_rule_decisions_total{rule=\"hot\",result=\"allowed\"}");
    }
    assert_int_equal(started, FLEET_KEYS);
    {
        long long want = 0;
        for (k = 0; k < FLEET_KEYS; k++)
            want += admitted_cost[k] == 25;
        assert_int_equal(reached100, want);
    }
    assert_int_equal(allowed, 0);
}

/* Quotas from rl-ctl reach every server; bad input is refused whole; a
 * garbage stored value falls back to the rule and is counted. */
static void test_quota_rlctl(void **state)
{
    rlt_fx_t *f = *state;
    char out[4096];
    rlt_result_t r;
    int i;

    rlt_fx_redis(f);
    for (i = 0; i < 2; i++)
        start_server(f, i, "--rule", "api=3/1h", NULL);
    assert_int_equal(run(out, sizeof(out),
                         "%s --redis 127.0.0.1:%d quota set api user:acme "
                         "10/1h 12/1d",
                         RL_CTL_BIN, f->redis.port),
                     0);
    /* The first quota of a rule marks it (switch version 1); every server
     * looks quotas of that rule up once it has applied that, within its
     * 500 ms poll (rl-ctl waits for the servers that already report). */
    assert_non_null(strstr(out, "quotas:api = 1 (version 1)"));
    for (i = 0; i < 2; i++)
        print_message("server %d applies the quota mark after %llu ms\n", i,
                      (unsigned long long)await_metric(
                          f, i, "rl_policy_switches_version", 1, 2000));
    for (i = 0; i < 2; i++) {
        r = ask(f->srv[i].port, rule_check(1, "user:acme", "api", 1));
        assert_int_equal(r.r.code, RL_CODE_OK);
        assert_int_equal(r.r.limit, 10);
        assert_int_equal(r.r.used, (uint64_t)i + 1);
    }
    assert_int_equal(run(out, sizeof(out),
                         "%s --redis 127.0.0.1:%d quota get api user:acme",
                         RL_CTL_BIN, f->redis.port),
                     0);
    assert_non_null(strstr(out, "10/1h 12/1d"));
    /* Bad limits: refused, nothing written. */
    assert_int_equal(run(out, sizeof(out),
                         "%s --redis 127.0.0.1:%d quota set api other "
                         "10/1h 0/1d",
                         RL_CTL_BIN, f->redis.port),
                     2);
    assert_int_equal(redis_int(f, "HLEN rl:{other}:q"), 0);
    /* Deleted: back to the rule. */
    assert_int_equal(run(out, sizeof(out),
                         "%s --redis 127.0.0.1:%d quota del api user:acme",
                         RL_CTL_BIN, f->redis.port),
                     0);
    r = ask(f->srv[0].port, rule_check(2, "user:acme", "api", 1));
    assert_int_equal(r.r.limit, 3);
    /* Any algorithm: a gcra's burst of 2 and a sliding window, read back
     * in the form given; per-caller (a rule's phase) refused. */
    assert_int_equal(run(out, sizeof(out),
                         "%s --redis 127.0.0.1:%d quota set api user:g "
                         "1/1h:gcra:burst=2 4/1m:sliding-window",
                         RL_CTL_BIN, f->redis.port),
                     0);
    assert_int_equal(run(out, sizeof(out),
                         "%s --redis 127.0.0.1:%d quota get api user:g",
                         RL_CTL_BIN, f->redis.port),
                     0);
    assert_non_null(strstr(out, "1/1h:gcra:burst=2 4/1m:sliding-window"));
    /* Two from one server (a gcra's full burst is exact on one clock:
     * two servers' readings of Redis's clock may differ by a few ms, and
     * a second at the very top of the bucket read a ms earlier does not
     * fit), the third from the other: refused there, the quota shared. */
    for (i = 0; i < 3; i++) {
        r = ask(f->srv[i / 2].port,
                rule_check(10 + (uint64_t)i, "user:g", "api", 1));
        assert_int_equal(r.r.code, i < 2 ? RL_CODE_OK : RL_CODE_OVER_LIMIT);
        assert_int_equal(r.r.algorithm, RL_ALGO_GCRA);
        assert_int_equal(r.r.limit, 2);
    }
    assert_int_equal(run(out, sizeof(out),
                         "%s --redis 127.0.0.1:%d quota set api user:p "
                         "10/1h:per-caller",
                         RL_CTL_BIN, f->redis.port),
                     2);
    /* Garbage stored by hand. */
    assert_int_equal(redis_int(f, "HSET rl:{junk}:q api notalimit"), 1);
    r = ask(f->srv[0].port, rule_check(3, "junk", "api", 1));
    assert_int_equal(r.r.code, RL_CODE_OK);
    assert_int_equal(r.r.limit, 3);
    assert_int_equal(metric(f, 0, "rl_quota_unparsable_total"), 1);
}

/* A new server takes work (/healthz 200, which start_server awaits) only
 * once it applies the fleet's switches and has reported so: a switch set
 * before it started is in force from its first decision, and rl-ctl run
 * right after waits for it instead of finding no server. */
static void test_ready_after_switches(void **state)
{
    rlt_fx_t *f = *state;
    char out[4096];
    rlt_result_t r;
    int i;

    rlt_fx_redis(f);
    assert_int_equal(run(out, sizeof(out),
                         "%s --redis 127.0.0.1:%d --wait-ms 0 mode api off",
                         RL_CTL_BIN, f->redis.port),
                     0);
    start_server(f, 0, "--rule", "api=1/1h", "--rule", "b=1/1h", NULL);
    /* Off: nothing refused, nothing counted, from the first decision. */
    for (i = 0; i < 3; i++) {
        r = ask(f->srv[0].port, rule_check((uint64_t)i + 1, "k", "api", 1));
        assert_int_equal(r.r.code, RL_CODE_OK);
    }
    assert_int_equal(redis_int(f, "EXISTS rl:{k}:r:api:3600:%llu",
                               (unsigned long long)(time(NULL) / 3600)),
                     0);

    /* A second server, and a quota (of rule b, which is on) right after
     * it is ready. */
    start_server(f, 1, "--rule", "api=1/1h", "--rule", "b=1/1h", NULL);
    assert_int_equal(run(out, sizeof(out),
                         "%s --redis 127.0.0.1:%d quota set b user:q 2/1h",
                         RL_CTL_BIN, f->redis.port),
                     0);
    assert_non_null(strstr(out, "applied by every live rl-server"));
    assert_null(strstr(out, "no rl-server has reported"));
    r = ask(f->srv[1].port, rule_check(10, "user:q", "b", 1));
    assert_int_equal(r.r.code, RL_CODE_OK);
    assert_int_equal(r.r.limit, 2);

    /* Switches Redis will not give (here the policy key of another type)
     * are not waited for: the server becomes ready, the failure counted. */
    assert_int_equal(redis_int(f, "DEL rl:policy"), 1);
    assert_int_equal(redis_int(f, "SADD rl:policy junk"), 1);
    start_server(f, 2, "--rule", "b=1/1h", NULL);
    assert_true(metric(f, 2, "rl_policy_switch_poll_failures_total") >= 1);
    assert_int_equal(metric(f, 2, "rl_policy_switches_version"), 0);
}

/* The kill switch and a scale, set with rl-ctl while load runs, reach
 * every server; the time from rl-ctl returning to the last server applying
 * is printed (the bound is 2 s). */
static void test_switches(void **state)
{
    rlt_fx_t *f = *state;
    static rl_load_t sw_load[NSERVERS];
    pthread_t sw_th[NSERVERS];
    char out[4096];
    rlt_result_t r;
    uint64_t worst = 0, t;
    int i;

    rlt_fx_redis(f);
    for (i = 0; i < NSERVERS; i++)
        start_server(f, i, "--rule", "api=4/1h", NULL);
    /* Load on every server throughout. */
    memset(sw_load, 0, sizeof(sw_load));
    for (i = 0; i < NSERVERS; i++) {
        sw_load[i].port = f->srv[i].port;
        sw_load[i].rule = "api";
        assert_int_equal(
            pthread_create(&sw_th[i], NULL, load_run_rule, &sw_load[i]), 0);
    }
    /* Saturate one caller. */
    for (i = 0; i < 5; i++)
        r = ask(f->srv[i % NSERVERS].port, rule_check(1, "sat", "api", 1));
    assert_int_equal(r.r.code, RL_CODE_OVER_LIMIT);

    assert_int_equal(run(out, sizeof(out),
                         "%s --redis 127.0.0.1:%d --wait-ms 0 mode api off",
                         RL_CTL_BIN, f->redis.port),
                     0);
    for (i = 0; i < NSERVERS; i++) {
        t = await_metric(f, i, "rl_policy_switches_version", 1, 5000);
        worst = t > worst ? t : worst;
    }
    print_message("kill switch applied by all %d servers %llu ms after "
                  "rl-ctl returned\n",
                  NSERVERS, (unsigned long long)worst);
    assert_true(worst <= 2000);
    for (i = 0; i < NSERVERS; i++) {
        r = ask(f->srv[i].port, rule_check(2, "sat", "api", 1));
        assert_int_equal(r.r.code, RL_CODE_OK);
    }
    /* Off counts nothing. */
    assert_int_equal(redis_int(f, "GET rl:{sat}:r:api:3600:%llu",
                               (unsigned long long)(time(NULL) / 3600)),
                     4);

    /* Back on, scaled to half: limit 2. rl-ctl itself waits for the
     * fleet this time, and reports each server. */
    assert_int_equal(run(out, sizeof(out),
                         "%s --redis 127.0.0.1:%d mode api default", RL_CTL_BIN,
                         f->redis.port),
                     0);
    assert_int_equal(run(out, sizeof(out),
                         "%s --redis 127.0.0.1:%d scale api 0.5", RL_CTL_BIN,
                         f->redis.port),
                     0);
    assert_non_null(strstr(out, "applied by every live rl-server"));
    for (i = 0; i < NSERVERS; i++) {
        r = ask(f->srv[i].port, rule_check(3, "fresh", "api", 1));
        assert_int_equal(r.r.limit, 2);
    }
    assert_int_equal(
        ask(f->srv[0].port, rule_check(4, "fresh", "api", 1)).r.code,
        RL_CODE_OVER_LIMIT);
    /* Global off wins over every rule, inline limits included. */
    assert_int_equal(run(out, sizeof(out), "%s --redis 127.0.0.1:%d global off",
                         RL_CTL_BIN, f->redis.port),
                     0);
    assert_int_equal(
        ask(f->srv[1].port, rule_check(5, "fresh", "api", 1)).r.code,
        RL_CODE_OK);
    for (i = 0; i < NSERVERS; i++) {
        sw_load[i].stop = 1;
        pthread_join(sw_th[i], NULL);
        assert_int_equal(sw_load[i].rc, RL_OK);
        assert_true(sw_load[i].answered > 0);
        assert_int_equal(sw_load[i].answered, sw_load[i].sent);
        assert_int_equal(sw_load[i].errors, 0);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        POLICY_TEST(test_fleet_exact),
        POLICY_TEST(test_quota_rlctl),
        POLICY_TEST(test_switches),
        POLICY_TEST(test_ready_after_switches),
    };

    policy_init();
    return cmocka_run_group_tests(tests, NULL, NULL);
}
