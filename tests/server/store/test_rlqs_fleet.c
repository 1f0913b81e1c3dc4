/* RLQS's fleet step (server/rlqs/fleet.c) as store/rlqs.lua runs it in a
 * private redis-server and as the memory store's table runs it, on the
 * same scripted steps at given instants: the window's usage, the live
 * participants and their demands' sum agree after every step (joins,
 * reports, a new window, a leave, participants dropped as stale at the
 * sweep and not before), and the Redis keys expire. */
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

static void run_steps(fx_t *f, rls_store_t *st, const char *key, uint64_t t0,
                      const char *what)
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
        RUN_UNTIL(f, c.calls > 0, 5000);
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
    run_steps(f, f->st, "rl:rlqs{t:agree}", t0, "redis");
    run_steps(f, mem, "rl:rlqs{t:agree}", t0, "memory");
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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_agree, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_down, fx_setup, fx_teardown),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
