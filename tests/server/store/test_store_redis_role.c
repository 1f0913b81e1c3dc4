/* The Redis store's connection with an address provider, as Sentinel
 * drives it (store/redis_conn.c: opts->addr, addr_stale, want_master,
 * rls_redis_conn_retarget), against a real master and its replica:
 *   - a replica named as the master (a stale address after a failover)
 *     answers ROLE "slave": the connection never comes up there, and
 *     every refusal tells the provider (addr_stale);
 *   - once the provider names the master, retarget connects at once,
 *     without waiting for the backoff the refusals built up;
 *   - retarget to the address in use changes nothing; to another address
 *     it drops the connection (down fires once) without telling the
 *     provider its own move failed;
 *   - closing frees everything (the fixture checks uv_loop_close).
 * The Sentinel layer on top runs in tests/server/e2e/e2e_sentinel_*.py. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "rl_error.h"
#include "store/redis_conn.h"
#include "store/redis_script.h"
#include "store_redis_fx.h"

typedef struct prov_s {
    int port;  /* the address it names: 127.0.0.1:port; 0: none yet */
    int asked; /* addr calls */
    int stale; /* addr_stale calls */
    int down, stuck, closed;
} prov_t;

static int prov_addr(void *arg, char *host, size_t hostlen, int *port)
{
    prov_t *p = arg;

    p->asked++;
    if (p->port == 0)
        return RL_EAGAIN;
    snprintf(host, hostlen, "127.0.0.1");
    *port = p->port;
    return 0;
}

static void prov_stale(void *arg)
{
    ((prov_t *)arg)->stale++;
}

static void on_down(void *data)
{
    ((prov_t *)data)->down++;
}

static void on_stuck(void *data)
{
    ((prov_t *)data)->stuck++;
}

static void on_closed(void *data)
{
    ((prov_t *)data)->closed++;
}

static void test_stale_master_refused(void **state)
{
    static const rls_redis_conn_cbs_t cbs = {on_down, on_stuck, on_closed};
    fx_t *f = *state;
    char port[16];
    char *extra[] = {"--replicaof", "127.0.0.1", port, NULL};
    rls_store_stats_t stats;
    rls_redis_conn_opts_t o;
    rls_redis_conn_t *c;
    redisAsyncContext *ac;
    prov_t p;
    uint64_t t0;
    int stale;

    snprintf(port, sizeof(port), "%d", f->redis.port);
    assert_int_equal(rlt_redis_start_with(&f->replica, extra), 0);
    memset(&p, 0, sizeof(p));
    memset(&stats, 0, sizeof(stats));
    memset(&o, 0, sizeof(o));
    o.host = "127.0.0.1";
    o.port = 1; /* unused: the provider names the address */
    o.timeout_ms = 1000;
    o.script = rls_redis_script;
    o.script_len = rls_redis_script_len;
    o.stats = &stats;
    o.addr = prov_addr;
    o.addr_stale = prov_stale;
    o.addr_arg = &p;
    o.want_master = 1;
    c = rls_redis_conn_new(&f->loop, &o, &cbs, &p);
    assert_non_null(c);

    /* No address yet: asked, nothing connected, not a failure to report
     * beyond the provider's own knowledge. */
    RUN_UNTIL(f, p.asked >= 2, 2000);
    assert_true(p.asked >= 2);
    assert_null(rls_redis_conn_ctx(c));

    /* The replica: refused by ROLE, again and again, each time told. */
    p.port = f->replica.port;
    rls_redis_conn_retarget(c);
    RUN_UNTIL(f, p.stale >= 6, 10000);
    assert_true(p.stale >= 6);
    assert_null(rls_redis_conn_ctx(c));
    assert_int_equal(p.down, 0); /* never up, so never down */
    assert_int_equal(stats.reconnects, 0);

    /* The master: connected at once, though the backoff is at 640 ms or
     * more by now. */
    p.port = f->redis.port;
    t0 = rlt_mono_ms();
    rls_redis_conn_retarget(c);
    RUN_UNTIL(f, rls_redis_conn_ctx(c) != NULL, 5000);
    assert_non_null(ac = rls_redis_conn_ctx(c));
    assert_true(rlt_mono_ms() - t0 < 300);
    assert_int_equal(strlen(rls_redis_conn_sha(c)), 40);

    /* The same address again: nothing changes. */
    stale = p.stale;
    rls_redis_conn_retarget(c);
    run_for(f, 100);
    assert_ptr_equal(rls_redis_conn_ctx(c), ac);
    assert_int_equal(p.down, 0);

    /* Moved to the replica: the connection drops (down once), the move
     * itself is not reported stale, the replica is refused by ROLE. */
    p.port = f->replica.port;
    rls_redis_conn_retarget(c);
    assert_int_equal(p.down, 1);
    assert_null(rls_redis_conn_ctx(c));
    assert_int_equal(p.stale, stale);
    RUN_UNTIL(f, p.stale > stale, 5000);
    assert_true(p.stale > stale);
    assert_null(rls_redis_conn_ctx(c));

    rls_redis_conn_close(c);
    RUN_UNTIL(f, p.closed == 1, 5000);
    assert_int_equal(p.closed, 1);
    assert_int_equal(p.down, 1);
    assert_int_equal(p.stuck, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_stale_master_refused, fx_setup,
                                        fx_teardown),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
