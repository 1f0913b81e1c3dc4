/* RLQS's fleet step (server/rlqs/fleet.c) as store/rlqs.lua runs it in a
 * private redis-server and as the memory store's table runs it, on the
 * same scripted steps at given instants: the window's usage, the live
 * participants and their demands' sum agree after every step (joins,
 * reports, a new window, a leave, participants dropped as stale at the
 * sweep and not before), and the Redis keys expire. With RLT_RLQS_CLUSTER
 * naming a node ("host:port", tests/cluster's rcluster_rlqs), the same
 * steps through the Redis Cluster store, on budgets of every master. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rl_error.h"
#include "rlqs/fleet.h"
#include "store/memory.h"
#include "store/redis_cluster.h"
#include "store_redis_fx.h"

typedef struct {
    const char *member;
    uint64_t demand, allowed, t; /* t: ms after the script's start */
    int leave;
    uint64_t used, n, sum; /* what both stores must answer */
} step_t;

/* stale_ms 1000 (sweeps every 500 ms), windows of 1 s. */
static const step_t steps[] = {
    {"a", 10, 5, 0, 0, 5, 1, 10},
    {"b", 30, 7, 100, 0, 12, 2, 40},
    {"a", 20, 1, 200, 0, 13, 2, 50},
    /* Past the sweep (at 500): nobody is stale yet. */
    {"c", 5, 0, 600, 0, 13, 3, 55},
    /* A new window: its usage starts again. */
    {"a", 20, 2, 1050, 0, 2, 3, 55},
    /* The sweep of 1150 (due at 1100) drops b, silent since 100. */
    {"c", 5, 0, 1150, 0, 2, 2, 25},
    {"a", 40, 0, 1300, 0, 2, 2, 45},
    /* a leaves; b comes back as new. */
    {"a", 0, 0, 1400, 1, 0, 1, 5},
    {"b", 8, 3, 1500, 0, 5, 2, 13},
    {"d", 1, 0, 1600, 0, 5, 3, 14},
    /* The sweep of 1700: nobody stale; the next is due at 2200. */
    {"b", 8, 0, 1700, 0, 5, 3, 14},
    /* A new window; c (last at 1150) is stale, but still counted until
     * the sweep... */
    {"b", 8, 0, 2190, 0, 0, 3, 14},
    /* ...which drops it. */
    {"b", 8, 0, 2250, 0, 0, 2, 9},
};

typedef struct {
    int calls;
    rls_rlqs_fleet_op_t got;
} cb_t;

static void on_op(void *data, rls_rlqs_fleet_op_t *op)
{
    cb_t *c = data;

    c->calls++;
    c->got = *op;
}

static void on_wake(uv_timer_t *t)
{
    (void)t;
}

static void run_steps(uv_loop_t *loop, rls_store_t *st, const char *key,
                      uint64_t t0, const char *what)
{
    size_t i;

    for (i = 0; i < sizeof(steps) / sizeof(steps[0]); i++) {
        const step_t *s = &steps[i];
        rls_rlqs_fleet_op_t op;
        cb_t c = {0};

        memset(&op, 0, sizeof(op));
        op.key = key;
        op.key_len = strlen(key);
        op.member = s->member;
        op.member_len = strlen(s->member);
        op.demand = s->demand;
        op.allowed = s->allowed;
        op.now_ms = t0 + s->t;
        op.window_ms = 1000;
        op.stale_ms = 1000;
        op.leave = s->leave;
        rls_rlqs_fleet_submit(st, &op, on_op, &c);
        {
            uint64_t dl = rlt_mono_ms() + 5000;
            uv_timer_t t;
            uv_timer_init(loop, &t);
            uv_timer_start(&t, on_wake, 5, 5);
            while (c.calls == 0 && rlt_mono_ms() < dl)
                uv_run(loop, UV_RUN_ONCE);
            uv_close((uv_handle_t *)&t, NULL);
            uv_run(loop, UV_RUN_NOWAIT);
        }
        assert_int_equal(c.calls, 1);
        if (c.got.err != 0)
            fail_msg("%s step %zu: err %d", what, i, c.got.err);
        if (!s->leave && c.got.used != s->used)
            fail_msg("%s step %zu: used %llu, not %llu", what, i,
                     (unsigned long long)c.got.used,
                     (unsigned long long)s->used);
        if (c.got.n != s->n || c.got.sum != s->sum)
            fail_msg("%s step %zu: n %llu sum %llu, not %llu %llu", what, i,
                     (unsigned long long)c.got.n, (unsigned long long)c.got.sum,
                     (unsigned long long)s->n, (unsigned long long)s->sum);
    }
}

static void test_agree(void **state)
{
    fx_t *f = *state;
    rls_store_t *mem = rls_store_memory_new(&f->loop);
    /* A window's start, so that the steps' windows are the ones named. */
    uint64_t t0 = (redis_now_ms(f) / 1000 + 1) * 1000;
    int done = 0;

    assert_non_null(mem);
    open_store(f, f->redis.port, 2000, 0);
    wait_up(f, 5000);
    run_steps(&f->loop, f->st, "rl:rlqs{t:agree}", t0, "redis");
    run_steps(&f->loop, mem, "rl:rlqs{t:agree}", t0, "memory");
    /* Every key the script made expires (4 stale_ms; the counters two
     * windows and a second). */
    assert_true(assert_all_keys_expire(f, 4000) >= 3);
    mem->v->close(mem, on_done, &done);
    RUN_UNTIL(f, done > 0, 5000);
}

/* A step on a store that cannot answer: RL_ESTORE, once. */
static void test_down(void **state)
{
    fx_t *f = *state;
    rls_rlqs_fleet_op_t op;
    cb_t c = {0};

    open_store(f, f->redis.port, 300, 0);
    wait_up(f, 5000);
    rlt_redis_pause(&f->redis, 1);
    memset(&op, 0, sizeof(op));
    op.key = "rl:rlqs{t:down}";
    op.key_len = strlen(op.key);
    op.member = "a";
    op.member_len = 1;
    op.demand = 1;
    op.now_ms = f->st->v->now_ms(f->st);
    op.window_ms = 1000;
    op.stale_ms = 1000;
    rls_rlqs_fleet_submit(f->st, &op, on_op, &c);
    RUN_UNTIL(f, c.calls > 0, 5000);
    assert_int_equal(c.calls, 1);
    assert_int_equal(c.got.err, RL_ESTORE);
    rlt_redis_pause(&f->redis, 0);
    /* Bad arguments never reach a store. */
    op.window_ms = 0;
    c.calls = 0;
    rls_rlqs_fleet_submit(f->st, &op, on_op, &c);
    assert_int_equal(c.calls, 1);
    assert_int_equal(c.got.err, RL_EINVAL);
}

static void on_closed(void *arg)
{
    (*(int *)arg)++;
}

/* The steps through the cluster store, on 12 budgets (their hash tags
 * spread over the masters). */
static void test_cluster(void **state)
{
    const char *spec = getenv("RLT_RLQS_CLUSTER");
    rls_cluster_opts_t o;
    uv_loop_t loop;
    uv_timer_t t;
    rls_store_t *st;
    char host[64], key[64], what[32];
    int port, done = 0, i;
    uint64_t dl, t0;

    (void)state;
    if (spec == NULL || sscanf(spec, "%63[^:]:%d", host, &port) != 2) {
        print_message("RLT_RLQS_CLUSTER not set: no cluster run\n");
        skip();
    }
    uv_loop_init(&loop);
    memset(&o, 0, sizeof(o));
    o.hosts[0] = host;
    o.ports[0] = port;
    o.nseeds = 1;
    o.timeout_ms = 2000;
    o.grace_ms = 1000;
    st = rls_store_cluster_new(&loop, &o);
    assert_non_null(st);
    uv_timer_init(&loop, &t);
    uv_timer_start(&t, on_wake, 10, 10);
    dl = rlt_mono_ms() + 10000;
    while (!st->v->up(st) && rlt_mono_ms() < dl)
        uv_run(&loop, UV_RUN_ONCE);
    assert_true(st->v->up(st));
    t0 = (st->v->now_ms(st) / 1000 + 1) * 1000;
    for (i = 0; i < 12; i++) {
        snprintf(key, sizeof(key), "rl:rlqs{t:c%d}", i);
        snprintf(what, sizeof(what), "cluster %d", i);
        run_steps(&loop, st, key, t0, what);
    }
    uv_close((uv_handle_t *)&t, NULL);
    st->v->close(st, on_closed, &done);
    while (done == 0)
        uv_run(&loop, UV_RUN_ONCE);
    uv_run(&loop, UV_RUN_DEFAULT);
    assert_int_equal(uv_loop_close(&loop), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_agree, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_down, fx_setup, fx_teardown),
    };
    const struct CMUnitTest cluster[] = {
        cmocka_unit_test(test_cluster),
    };

    /* With a cluster given, that run alone (tests/cluster's
     * rcluster_rlqs). */
    if (getenv("RLT_RLQS_CLUSTER") != NULL)
        return cmocka_run_group_tests(cluster, NULL, NULL);
    return cmocka_run_group_tests(tests, NULL, NULL);
}
