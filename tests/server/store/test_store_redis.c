/* The Redis store, driven directly on a libuv loop against a private
 * redis-server: counts and expiries, pipelined batches, keys Redis
 * refuses, a flushed script cache, what a session needs (a name to
 * resolve, AUTH, SELECT), and Redis out of memory as the server's health
 * sees it. Callbacks are counted and the counts asserted after the loop
 * ran; every wait has a deadline. Connection life and failures are in
 * test_store_redis_fail.c, the script's and the module's decisions in
 * test_store_redis_script.c, the pure parts in test_store_redis_pure.c. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rl_error.h"
#include "core/decide.h"
#include "flags.h"
#include "policy/rules.h"
#include "policy/runtime.h"
#include "server.h"
#include "store/redis.h"
#include "store/redis_script.h"
#include "store_redis_fx.h"

/* ---- the store against a private redis-server ---------------------------*/

/* The layout of redis_script.lua and redis_cluster_prologue.lua
 * (comments, indentation, line breaks) is no part of the script: what
 * Redis runs, and so the SHA it knows it by, changes only with the code.
 * A deliberate change to the script changes these. */
static void test_script_sha(void **state)
{
    fx_t *f = *state;
    const char *cluster;
    redisReply *r;
    size_t len;

    assert_int_equal(strlen(rls_redis_script), rls_redis_script_len);
    r = redisCommand(f->rc, "SCRIPT LOAD %b", rls_redis_script,
                     rls_redis_script_len);
    assert_non_null(r);
    assert_int_equal(r->type, REDIS_REPLY_STRING);
    assert_string_equal(r->str, "a1371057ddddaf4b1bf104c203d756dcaf364266");
    freeReplyObject(r);
    cluster = rls_redis_cluster_script(&len);
    assert_int_equal(strlen(cluster), len);
    r = redisCommand(f->rc, "SCRIPT LOAD %b", cluster, len);
    assert_non_null(r);
    assert_int_equal(r->type, REDIS_REPLY_STRING);
    assert_string_equal(r->str, "b684278811edc3da0ab7cbaa65740a0b05f8f72c");
    freeReplyObject(r);
}

static void test_counts_and_ttl(void **state)
{
    fx_t *f = *state;
    static const char *const names[] = {"rl:{user:1}:r:t",
                                        "rl:{a:b:c}:r:t",
                                        "rl:{{x}}:r:t",
                                        "rl:{ip:203.0.113.7:/search}:i",
                                        "rl:{us\xc3\xa9r:\xe6\x97\xa5}:r:t",
                                        "rl:{}:r:t",
                                        "rl:{ sp ace }:r:t"};
    enum { NK = sizeof(names) / sizeof(names[0]) };
    static job_t j[3];
    uint64_t now;
    size_t i, b;

    open_store(f, f->redis.port, 2000, 0);
    wait_up(f, 5000);
    now = f->st->v->now_ms(f->st);
    /* Three batches in one loop iteration: one pipelined write. */
    for (b = 0; b < 3; b++) {
        memset(&j[b], 0, sizeof(j[b]));
        j[b].n = NK;
        for (i = 0; i < NK; i++)
            job_op(&j[b], i, names[i], i + 1 + b * 10, now + 30000);
        submit(f, &j[b]);
    }
    RUN_UNTIL(f, j[2].calls > 0, 5000);
    for (b = 0; b < 3; b++) {
        assert_int_equal(j[b].calls, 1);
        assert_int_equal(j[b].status, 0);
        for (i = 0; i < NK; i++) {
            /* running sum of incr over batches 0..b */
            int64_t want = (int64_t)((b + 1) * (i + 1) + 10 * b * (b + 1) / 2);
            assert_int_equal(j[b].ops[i].err, 0);
            assert_int_equal(j[b].ops[i].admitted, 1);
            assert_int_equal(after(&j[b].ops[i]), want);
        }
    }
    for (i = 0; i < NK; i++) {
        long long pttl = redis_int(f, "PTTL %s", j[0].wkeys[i]);
        assert_int_equal(redis_int(f, "GET %s", j[0].wkeys[i]),
                         3 * (i + 1) + 30);
        assert_true(pttl > 25000);
        assert_true(pttl <= 30000 + 50);
    }
    assert_int_equal(assert_all_keys_expire(f, 30050), NK);
    assert_int_equal(f->st->stats.batches, 3);
    assert_int_equal(f->st->stats.ops, 3 * NK);
    assert_int_equal(f->st->stats.errors, 0);
    assert_true(f->st->stats.rtt_us_last > 0);
    assert_true(f->st->stats.rtt_us_last < 2000000);
}

static void test_big_batch_and_resubmit_from_callback(void **state)
{
    fx_t *f = *state;
    static job_t a, b;
    size_t i;

    open_store(f, f->redis.port, 2000, 0);
    wait_up(f, 5000);
    run_new_job(f, &a, MAX_OPS, "big", 3);
    assert_int_equal(a.status, 0);
    run_new_job(f, &b, MAX_OPS, "big", 4);
    assert_int_equal(b.calls, 1);
    assert_int_equal(b.status, 0);
    for (i = 0; i < MAX_OPS; i++)
        assert_int_equal(after(&b.ops[i]), 7);
    assert_int_equal(assert_all_keys_expire(f, 60050), MAX_OPS);
}

static void test_ttl_after_delete_and_flush(void **state)
{
    fx_t *f = *state;
    static job_t j;
    redisReply *r;

    open_store(f, f->redis.port, 2000, 0);
    wait_up(f, 5000);
    run_new_job(f, &j, 4, "del", 2);
    assert_int_equal(after(&j.ops[3]), 2);
    /* Mid-run: one key deleted, then everything flushed; both come back
     * with a TTL when the next batch recreates them. */
    assert_int_equal(redis_int(f, "DEL %s", j.wkeys[1]), 1);
    run_new_job(f, &j, 4, "del", 2);
    assert_int_equal(j.status, 0);
    assert_int_equal(after(&j.ops[0]), 4);
    assert_int_equal(after(&j.ops[1]), 2);
    assert_int_equal(assert_all_keys_expire(f, 60050), 4);
    r = redisCommand(f->rc, "FLUSHALL");
    assert_non_null(r);
    freeReplyObject(r);
    run_new_job(f, &j, 4, "del", 5);
    assert_int_equal(j.status, 0);
    assert_int_equal(after(&j.ops[0]), 5);
    assert_int_equal(j.ops[0].win[0].before, 0);
    assert_int_equal(assert_all_keys_expire(f, 60050), 4);
}

static void test_bad_key_fails_only_its_op(void **state)
{
    fx_t *f = *state;
    static job_t j;
    redisReply *r;

    open_store(f, f->redis.port, 2000, 0);
    wait_up(f, 5000);
    job_init(&j, f, 5, "bad", 1);
    r = redisCommand(f->rc, "SET %s notanumber", j.wkeys[1]);
    freeReplyObject(r);
    r = redisCommand(f->rc, "RPUSH %s x", j.wkeys[3]);
    freeReplyObject(r);
    /* A counter that would pass 2^63-1 fails its op too: near 2^63 Lua's
     * doubles see room (2^63 - 9223372036854774784) that Redis's integer
     * has not. */
    r = redisCommand(f->rc, "SET %s 9223372036854775000", j.wkeys[4]);
    freeReplyObject(r);
    j.cost[4][0] = j.ops[4].equal_cost = 1000;
    submit(f, &j);
    RUN_UNTIL(f, j.calls > 0, 5000);
    assert_int_equal(j.calls, 1);
    assert_int_equal(j.status, 0);
    assert_int_equal(j.ops[0].err, 0);
    assert_int_equal(after(&j.ops[0]), 1);
    assert_int_equal(j.ops[1].err, RL_ESTORE);
    assert_int_equal(j.ops[2].err, 0);
    assert_int_equal(after(&j.ops[2]), 1);
    assert_int_equal(j.ops[3].err, RL_ESTORE);
    assert_int_equal(j.ops[4].err, RL_ESTORE);
    assert_true(redis_int(f, "PTTL %s", j.wkeys[0]) > 0);
    assert_true(redis_int(f, "PTTL %s", j.wkeys[2]) > 0);
    r = redisCommand(f->rc, "GET %s", j.wkeys[4]);
    assert_non_null(r);
    assert_string_equal(r->str, "9223372036854775000");
    freeReplyObject(r);
    assert_int_equal(f->st->stats.errors, 0);
    assert_int_equal(f->st->stats.errors_kind[RLS_SERR_OVERFLOW], 1);
    assert_int_equal(f->st->stats.errors_kind[RLS_SERR_OTHER], 2);
}

static void test_noscript_after_script_flush(void **state)
{
    fx_t *f = *state;
    static job_t j;
    redisReply *r;

    open_store(f, f->redis.port, 2000, 0);
    wait_up(f, 5000);
    r = redisCommand(f->rc, "SCRIPT FLUSH");
    assert_non_null(r);
    freeReplyObject(r);
    run_new_job(f, &j, 3, "ns", 2);
    assert_int_equal(j.calls, 1);
    assert_int_equal(j.status, 0);
    assert_int_equal(after(&j.ops[2]), 2);
    run_new_job(f, &j, 3, "ns", 2);
    assert_int_equal(j.status, 0);
    assert_int_equal(after(&j.ops[2]), 4);
    assert_int_equal(assert_all_keys_expire(f, 60050), 3);
}

static void test_hostname_is_resolved(void **state)
{
    fx_t *f = *state;
    static job_t j;
    rls_redis_opts_t o;

    memset(&o, 0, sizeof(o));
    o.host = "localhost";
    o.port = f->redis.port;
    o.timeout_ms = 2000;
    f->st = rls_store_redis_new(&f->loop, &o);
    assert_non_null(f->st);
    wait_up(f, 5000);
    run_new_job(f, &j, 1, "host", 1);
    assert_int_equal(j.status, 0);
    assert_int_equal(after(&j.ops[0]), 1);
}

static void test_auth_and_select(void **state)
{
    fx_t *f = *state;
    static job_t j;
    redisReply *r;

    open_store(f, f->redis.port, 2000, 3);
    wait_up(f, 5000);
    run_new_job(f, &j, 2, "auth", 6);
    assert_int_equal(j.status, 0);
    assert_int_equal(after(&j.ops[1]), 6);
    assert_int_equal(redis_int(f, "EXISTS %s", j.wkeys[0]), 0); /* db 0 */
    r = redisCommand(f->rc, "SELECT 3");
    assert_non_null(r);
    freeReplyObject(r);
    assert_int_equal(redis_int(f, "GET %s", j.wkeys[0]), 6);
    assert_int_equal(assert_all_keys_expire(f, 60050), 2);
    close_store(f);

    /* A wrong password never comes up, and says so at once. */
    f->password = "wrong";
    open_store(f, f->redis.port, 2000, 0);
    run_for(f, 200);
    assert_false(f->st->v->up(f->st));
    job_init(&j, f, 1, "auth", 1);
    submit(f, &j);
    assert_int_equal(j.calls, 1);
    assert_int_equal(j.status, RL_ESTORE);
}

/* ---- Redis out of memory ------------------------------------------------*/

static int fx_setup_oom(void **state)
{
    static char *const extra[] = {"--maxmemory", "1mb", "--maxmemory-policy",
                                  "noeviction", NULL};

    return fx_setup_with(state, extra, NULL);
}

static int responded, resp_errors;

static void on_respond(void *owner, const rl_result_t *r)
{
    (void)owner;
    responded++;
    resp_errors += r->error_len > 0;
}

/* Sends n checks for distinct keys through the decider, each its own
 * window (100 per 10 minutes), and waits for every answer. */
static void decide(fx_t *f, rls_decider_t *d, int n, const char *tag)
{
    static unsigned seq;
    char key[64];
    int i, want = responded + n;
    const char *why = NULL;
    rls_ask_t a;

    for (i = 0; i < n; i++) {
        int len = snprintf(key, sizeof(key), "%s-%u", tag, seq++);
        memset(&a, 0, sizeof(a));
        a.q.id = (uint64_t)i;
        a.q.key = key;
        a.q.key_len = (size_t)len;
        a.q.cost = 1;
        a.q.limit = 100;
        a.q.window_s = 600;
        a.ns = RLS_NS_INLINE;
        assert_int_equal(rls_decide(d, &a, on_respond, NULL, &why), 0);
    }
    rls_decider_flush_now(d);
    RUN_UNTIL(f, responded >= want, 3000);
    assert_int_equal(responded, want);
}

/* Redis at maxmemory with noeviction refuses every new key: the refusals
 * are counted by kind, logged at warn, and turn /healthz unhealthy with a
 * reason; once Redis has room again, and the errors have left the 10 s
 * window, it is healthy again. */
static void test_oom_counted_logged_unhealthy(void **state)
{
    fx_t *f = *state;
    static rls_server_t srv;
    static rls_flags_t cfg;
    static rls_runtime_t rt;
    static job_t a;
    rls_decider_opts_t o;
    rls_policy_t *p = NULL;
    rls_diag_t diag;
    char err[256];
    redisReply *rep;
    const char *why = NULL;
    logcap_t lc;
    uint64_t dl;
    int i, oom = 0;

    /* Fill Redis until it refuses writes. */
    for (i = 0; i < 100000 && !oom; i++) {
        rep = redisCommand(f->rc, "SET fill:%d %s", i,
                           "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx");
        assert_non_null(rep);
        oom =
            rep->type == REDIS_REPLY_ERROR && strncmp(rep->str, "OOM", 3) == 0;
        freeReplyObject(rep);
    }
    assert_true(oom);

    log_begin(&lc);
    open_store(f, f->redis.port, 1000, 0);
    wait_up(f, 5000);
    job_init(&a, f, 3, "oom", 1);
    submit(f, &a);
    RUN_UNTIL(f, a.calls > 0, 3000);
    assert_int_equal(a.calls, 1);
    assert_int_equal(a.status, 0);
    for (i = 0; i < 3; i++)
        assert_int_equal(a.ops[i].err, RL_ESTORE);
    assert_int_equal(f->st->stats.errors_kind[RLS_SERR_OOM], 3);

    /* The server's health, on the same store. */
    rls_flags_defaults(&cfg);
    memset(&srv, 0, sizeof(srv));
    srv.cfg = &cfg;
    srv.store = f->st;
    assert_int_equal(rls_policy_build(NULL, 0, NULL, 16, &p, &diag), RL_OK);
    assert_int_equal(rls_runtime_init(&rt, p, 16), RL_OK);
    rls_decider_opts_init(&o);
    o.store = f->st;
    o.rt = &rt;
    o.prefix = "rl:";
    o.prefix_len = 3;
    assert_int_equal(rls_decider_init(&srv.decider, &o, err, sizeof(err)),
                     RL_OK);
    assert_true(rls_server_healthy(&srv, &why));
    decide(f, &srv.decider, 50, "oom");
    assert_int_equal(resp_errors, 50);
    assert_false(rls_server_healthy(&srv, &why));
    assert_non_null(strstr(why, "store errors: 50 of 50 decisions failed"));
    assert_true(log_end(&lc, "level=warn", "msg=\"redis errors\"", "kind=oom",
                        "OOM command not allowed", NULL));

    /* Room again: decisions succeed at once; health returns once the
     * failures are older than the window. */
    rep = redisCommand(f->rc, "CONFIG SET maxmemory 0");
    assert_non_null(rep);
    freeReplyObject(rep);
    resp_errors = 0;
    dl = rlt_mono_ms() + 15000;
    while (!rls_server_healthy(&srv, &why) && rlt_mono_ms() < dl) {
        decide(f, &srv.decider, 5, "ok");
        run_for(f, 100);
    }
    assert_true(rls_server_healthy(&srv, &why));
    assert_string_equal(why, "ok");
    assert_int_equal(resp_errors, 0);
    rls_decider_free(&srv.decider);
    rls_runtime_free(&rt);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_script_sha, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_counts_and_ttl, fx_setup,
                                        fx_teardown),
        cmocka_unit_test_setup_teardown(
            test_big_batch_and_resubmit_from_callback, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_ttl_after_delete_and_flush,
                                        fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_bad_key_fails_only_its_op,
                                        fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_noscript_after_script_flush,
                                        fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_hostname_is_resolved, fx_setup,
                                        fx_teardown),
        cmocka_unit_test_setup_teardown(test_auth_and_select, fx_setup_auth,
                                        fx_teardown),
        cmocka_unit_test_setup_teardown(test_oom_counted_logged_unhealthy,
                                        fx_setup_oom, fx_teardown),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
