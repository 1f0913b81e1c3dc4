/* The Redis store's connection, its life and every kind of trouble,
 * against a private redis-server: never started, killed mid-batch,
 * restarted, stuck (paused) with batches in flight, closed with batches in
 * flight or mid-connect; and its clock, which follows Redis's. Callbacks
 * are counted and the counts asserted after the loop ran; every wait has
 * a deadline. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rl_error.h"
#include "store/redis.h"
#include "store_redis_fx.h"

/* Counts a callback for a batch whose ops array is shared. */
static int counted;

static void on_count(void *data, rls_op_t *ops, size_t n, int status)
{
    small_t *s = data;

    (void)ops;
    (void)n;
    counted++;
    s->calls++;
    s->status = status;
}

static void test_never_started(void **state)
{
    fx_t *f = *state;
    static job_t j;
    int port = rlt_port_reserve(); /* reserved: nothing listens there */

    open_store(f, port, 500, 0);
    run_for(f, 100);
    assert_false(f->st->v->up(f->st));
    job_init(&j, f, 3, "nobody", 1);
    submit(f, &j);
    /* Fails inside submit: nothing to wait for. */
    assert_int_equal(j.calls, 1);
    assert_int_equal(j.status, RL_ESTORE);
    assert_int_equal(j.ops[0].err, RL_ESTORE);
    assert_int_equal(j.ops[2].err, RL_ESTORE);
    run_for(f, 50);
    assert_int_equal(j.calls, 1);
    assert_int_equal(f->st->stats.errors, 1);
    assert_int_equal(f->st->stats.reconnects, 0);
}

static void test_killed_mid_batch_then_restarted(void **state)
{
    fx_t *f = *state;
    static job_t a, b, c;
    uint64_t t0;

    open_store(f, f->redis.port, 5000, 0);
    wait_up(f, 5000);
    run_new_job(f, &a, 2, "kill", 1);
    assert_int_equal(a.status, 0);
    /* Paused, the server accepts our write but never answers; killed, it
     * takes the batch down with it. */
    rlt_redis_pause(&f->redis, 1);
    job_init(&b, f, MAX_OPS, "kill", 1);
    submit(f, &b);
    run_for(f, 50);
    assert_int_equal(b.calls, 0);
    t0 = rlt_mono_ms();
    rlt_redis_kill(&f->redis);
    RUN_UNTIL(f, b.calls > 0, 3000);
    assert_int_equal(b.calls, 1);
    assert_int_equal(b.status, RL_ESTORE);
    assert_int_equal(b.ops[0].err, RL_ESTORE);
    assert_int_equal(b.ops[MAX_OPS - 1].err, RL_ESTORE);
    assert_true(b.fired_ms - t0 < 2500); /* promptly, not at the 5 s timeout */
    assert_false(f->st->v->up(f->st));
    /* While down, batches fail inside submit. */
    job_init(&c, f, 1, "kill", 1);
    submit(f, &c);
    assert_int_equal(c.calls, 1);
    assert_int_equal(c.status, RL_ESTORE);
    run_for(f, 100);
    assert_int_equal(b.calls, 1);
    /* Back with no data (persistence is off): the store reconnects by
     * itself, and recreated keys get their TTL. */
    assert_int_equal(rlt_redis_restart(&f->redis), 0);
    redisFree(f->rc);
    f->rc = rlt_redis_connect(&f->redis);
    assert_non_null(f->rc);
    wait_up(f, 5000);
    assert_int_equal(f->st->stats.reconnects, 1);
    run_new_job(f, &c, 2, "kill", 4);
    assert_int_equal(c.status, 0);
    assert_int_equal(after(&c.ops[0]), 4);
    assert_int_equal(after(&c.ops[1]), 4);
    assert_int_equal(assert_all_keys_expire(f, 60050), 2);
}

static void test_timeout_then_recovery(void **state)
{
    fx_t *f = *state;
    enum { NB = 1100 };
    static job_t a, b;
    small_t *small;
    uint64_t t0;
    int i, at_once = 0, fired = 0, timedout = 0;

    open_store(f, f->redis.port, 200, 0);
    wait_up(f, 5000);
    rlt_redis_pause(&f->redis, 1);
    t0 = rlt_mono_ms();
    job_init(&a, f, 3, "slow", 1);
    job_init(&b, f, 3, "slow", 1);
    submit(f, &a);
    run_for(f, 20);
    submit(f, &b);
    RUN_UNTIL(f, a.calls > 0 && b.calls > 0, 2000);
    assert_int_equal(a.calls, 1);
    assert_int_equal(b.calls, 1);
    assert_int_equal(a.status, RL_ETIMEDOUT);
    assert_int_equal(b.status, RL_ETIMEDOUT);
    assert_int_equal(a.ops[2].err, RL_ETIMEDOUT);
    assert_true(a.fired_ms - t0 >= 195);
    assert_true(a.fired_ms - t0 <= 200 + 300);
    assert_false(f->st->v->up(f->st));
    assert_int_equal(f->st->stats.timeouts, 2);

    /* Still stuck once reconnected at TCP level: batches beyond the
     * in-flight cap fail at once, the rest at their timeout; memory stays
     * bounded and each callback fires once. */
    rlt_redis_pause(&f->redis, 0);
    wait_up(f, 5000);
    rlt_redis_pause(&f->redis, 1);
    small = calloc(NB, sizeof(*small));
    assert_non_null(small);
    for (i = 0; i < NB; i++) {
        small_init(&small[i], "rl:{flood}:r:t",
                   f->st->v->now_ms(f->st) + 60000);
        f->st->v->submit(f->st, &small[i].op, 1, on_small, &small[i]);
        at_once += small[i].calls;
    }
    assert_true(at_once > 0);
    assert_true(at_once < NB);
    RUN_UNTIL(f, f->st->stats.timeouts >= 2 + (uint64_t)(NB - at_once), 3000);
    for (i = 0; i < NB; i++) {
        fired += small[i].calls;
        timedout += small[i].status == RL_ETIMEDOUT;
        assert_int_equal(small[i].calls, 1);
    }
    assert_int_equal(fired, NB);
    assert_int_equal(timedout, NB - at_once);
    free(small);

    /* The same with big batches: the cap on ops in flight holds. */
    rlt_redis_pause(&f->redis, 0);
    wait_up(f, 5000);
    rlt_redis_pause(&f->redis, 1);
    {
        enum { NBIG = 300 };
        static job_t big;
        static small_t seen[NBIG];

        job_init(&big, f, 256, "bigflood", 1);
        memset(seen, 0, sizeof(seen));
        at_once = fired = counted = 0;
        for (i = 0; i < NBIG; i++) {
            /* One ops array shared by every batch: only callbacks are
             * counted here. */
            f->st->v->submit(f->st, big.ops, 256, on_count, &seen[i]);
            at_once += seen[i].calls;
        }
        assert_true(at_once > 0);
        assert_true(at_once < NBIG);
        RUN_UNTIL(f, counted >= NBIG, 3000);
        for (i = 0; i < NBIG; i++) {
            fired += seen[i].calls;
            assert_int_equal(seen[i].calls, 1);
            assert_true(seen[i].status == RL_ESTORE ||
                        seen[i].status == RL_ETIMEDOUT);
        }
        assert_int_equal(fired, NBIG);
    }

    rlt_redis_pause(&f->redis, 0);
    wait_up(f, 5000);
    run_new_job(f, &a, 3, "slow", 1);
    assert_int_equal(a.status, 0);
    assert_true(after(&a.ops[0]) >= 1);
    assert_true(f->st->stats.reconnects >= 1);
}

static void test_now_ms_follows_redis(void **state)
{
    fx_t *f = *state;
    uint64_t prev, now, redis_ms;
    redisReply *r;
    int i;

    open_store(f, rlt_port_reserve(), 500, 0); /* nothing listens */
    /* Before any sample: the local clock, still never decreasing. */
    prev = f->st->v->now_ms(f->st);
    for (i = 0; i < 1000; i++) {
        now = f->st->v->now_ms(f->st);
        assert_true(now >= prev);
        prev = now;
    }
    close_store(f);
    open_store(f, f->redis.port, 500, 0);
    wait_up(f, 5000);
    r = redisCommand(f->rc, "TIME");
    assert_non_null(r);
    assert_int_equal(r->elements, 2);
    redis_ms = strtoull(r->element[0]->str, NULL, 10) * 1000 +
               strtoull(r->element[1]->str, NULL, 10) / 1000;
    freeReplyObject(r);
    now = f->st->v->now_ms(f->st);
    assert_true(now + 20 >= redis_ms && now <= redis_ms + 20);
    /* Across periodic re-samples it never goes backwards. */
    prev = f->st->v->now_ms(f->st);
    {
        uint64_t dl = rlt_mono_ms() + 2200;
        while (rlt_mono_ms() < dl) {
            uv_run(&f->loop, UV_RUN_NOWAIT);
            now = f->st->v->now_ms(f->st);
            assert_true(now >= prev);
            prev = now;
        }
    }
}

static void test_close_with_batches_in_flight(void **state)
{
    fx_t *f = *state;
    static job_t j[3];
    int done = 0, i;

    open_store(f, f->redis.port, 5000, 0);
    wait_up(f, 5000);
    rlt_redis_pause(&f->redis, 1);
    for (i = 0; i < 3; i++) {
        job_init(&j[i], f, 2, "close", 1);
        j[i].resubmit = f;
        submit(f, &j[i]);
    }
    run_for(f, 30);
    f->st->v->close(f->st, on_done, &done);
    f->closed = 1;
    RUN_UNTIL(f, done > 0, 5000);
    assert_int_equal(done, 1);
    for (i = 0; i < 3; i++) {
        assert_int_equal(j[i].calls, 1);
        assert_int_equal(j[i].status, RL_ESHUTDOWN);
        assert_int_equal(j[i].ops[1].err, RL_ESHUTDOWN);
        /* a submit from the callback is answered at once */
        assert_int_equal(j[i].resubmit_calls, 1);
        assert_int_equal(j[i].resubmit_status, RL_ESHUTDOWN);
    }
    f->st = NULL;
    rlt_redis_pause(&f->redis, 0);
    /* teardown checks uv_loop_close() == 0 */
}

static void test_close_while_down_and_connecting(void **state)
{
    fx_t *f = *state;
    int done = 0;

    open_store(f, rlt_port_reserve(), 500, 0); /* nothing listens */
    run_for(f, 30);
    close_store(f);
    /* Closed right after new, mid-connect. */
    open_store(f, f->redis.port, 500, 0);
    f->st->v->close(f->st, on_done, &done);
    f->closed = 1;
    f->st = NULL;
    RUN_UNTIL(f, done > 0, 5000);
    assert_int_equal(done, 1);
}

typedef struct tick_s {
    fx_t *f;
    small_t *s;
    int n, max;
} tick_t;

static void on_feed(uv_timer_t *t)
{
    tick_t *k = t->data;
    small_t *s;

    if (k->n >= k->max)
        return;
    s = &k->s[k->n++];
    small_init(s, "rl:{paused}:r:t", k->f->st->v->now_ms(k->f->st) + 600000);
    k->f->st->v->submit(k->f->st, &s->op, 1, on_small, s);
}

/* A steady stream of batches while Redis is paused for 1.5 s: batches
 * answered by timeout must not be counted when Redis wakes up and runs
 * what it had read (some 500 of them). The counter ends equal to the ops
 * answered with a count, give or take the few Redis may have run but not
 * yet answered when the pause hit (a reply is written after its command
 * runs): such a batch is answered by the fail mode because it may have
 * run, and did. */
static void test_timeout_consumes_nothing_later(void **state)
{
    fx_t *f = *state;
    enum { MAX = 1200 };
    static tick_t k;
    static uv_timer_t feed;
    redisReply *rep;
    long long total, clients = 0;
    int i, ok = 0, timedout = 0;
    uint64_t dl;

    open_store(f, f->redis.port, 200, 0);
    wait_up(f, 5000);
    k.f = f;
    k.n = 0;
    k.max = MAX;
    k.s = calloc(MAX, sizeof(*k.s));
    assert_non_null(k.s);
    uv_timer_init(&f->loop, &feed);
    feed.data = &k;
    uv_timer_start(&feed, on_feed, 3, 3);
    run_for(f, 300);
    rlt_redis_pause(&f->redis, 1);
    run_for(f, 1500);
    rlt_redis_pause(&f->redis, 0);
    run_for(f, 300);
    uv_timer_stop(&feed);
    uv_close((uv_handle_t *)&feed, NULL);
    RUN_UNTIL(f, k.n > 0 && k.s[k.n - 1].calls > 0, 3000);
    wait_up(f, 5000);
    for (i = 0; i < k.n; i++) {
        assert_int_equal(k.s[i].calls, 1);
        if (k.s[i].status == 0 && k.s[i].op.err == 0) {
            assert_int_equal(k.s[i].op.admitted, 1);
            ok++;
        }
        timedout += k.s[i].status == RL_ETIMEDOUT;
    }
    assert_true(timedout > 0);
    assert_true(ok > 0);
    /* The old connection is gone once Redis has read all it held (it
     * closes a client at the end of its input): then nothing more can
     * be run. */
    dl = rlt_mono_ms() + 5000;
    do {
        rep = redisCommand(f->rc, "INFO clients");
        assert_non_null(rep);
        clients =
            strtoll(strstr(rep->str, "connected_clients:") + 18, NULL, 10);
        freeReplyObject(rep);
        if (clients > 2)
            run_for(f, 10);
    } while (clients > 2 && rlt_mono_ms() < dl);
    assert_int_equal(clients, 2);
    total = redis_int(f, "GET %s", "rl:{paused}:r:t:60:1");
    assert_true(total >= ok);
    assert_true(total <= ok + 5);
    free(k.s);
}

/* A restarted Redis (new run_id) is counted and logged; a reconnection to
 * the same instance is not. */
static void test_restart_noticed(void **state)
{
    fx_t *f = *state;
    redisReply *rep;
    logcap_t lc;
    uint64_t rc0;

    open_store(f, f->redis.port, 200, 0);
    wait_up(f, 5000);
    assert_int_equal(f->st->stats.restarts, 0);
    log_begin(&lc);
    rc0 = f->st->stats.reconnects;
    rep = redisCommand(f->rc, "CLIENT KILL TYPE normal SKIPME yes");
    assert_non_null(rep);
    freeReplyObject(rep);
    RUN_UNTIL(f, f->st->stats.reconnects > rc0 && f->st->v->up(f->st), 5000);
    assert_true(f->st->stats.reconnects > rc0);
    assert_int_equal(f->st->stats.restarts, 0);

    redisFree(f->rc);
    f->rc = NULL;
    rlt_redis_kill(&f->redis);
    RUN_UNTIL(f, !f->st->v->up(f->st), 5000);
    assert_int_equal(rlt_redis_restart(&f->redis), 0);
    f->rc = rlt_redis_connect(&f->redis);
    rc0 = f->st->stats.reconnects;
    RUN_UNTIL(f, f->st->stats.reconnects > rc0 && f->st->v->up(f->st), 5000);
    assert_int_equal(f->st->stats.restarts, 1);
    assert_true(
        log_end(&lc, "level=warn", "msg=\"redis restarted", "run_id=", NULL));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_never_started, fx_setup,
                                        fx_teardown),
        cmocka_unit_test_setup_teardown(test_killed_mid_batch_then_restarted,
                                        fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_timeout_then_recovery, fx_setup,
                                        fx_teardown),
        cmocka_unit_test_setup_teardown(test_now_ms_follows_redis, fx_setup,
                                        fx_teardown),
        cmocka_unit_test_setup_teardown(test_close_with_batches_in_flight,
                                        fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_close_while_down_and_connecting,
                                        fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_timeout_consumes_nothing_later,
                                        fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_restart_noticed, fx_setup,
                                        fx_teardown),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
