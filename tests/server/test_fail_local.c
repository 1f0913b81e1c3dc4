/* --fail-local (fail_local.c) through the batcher, on the scripted-clock
 * wrapper over the memory store (batch_fx.h), whose `fail` makes batches
 * fail as a store that cannot answer fails them: the share each instance
 * decides on, the answer's words, the charges that reach the store once it
 * answers (so its counter holds every admission), a failed charge batch
 * kept for the next, and charges for ended windows dropped. The fleet
 * end to end: tests/server/e2e/e2e_fail_local.py. */
#include "batch_fx.h"

#include <string.h>

#include "core/fail_local.h"
#include "rl_error.h"

#define LOCAL_WORDS "decided by this instance alone"

static size_t allowed(const h_t *h, size_t from, size_t to)
{
    size_t i, n = 0;

    for (i = from; i < to; i++)
        n += h->res[i].code == RL_CODE_OK;
    return n;
}

static void open_local(h_t *h, rls_local_t *l, uint32_t live)
{
    h_open(h, 0, 256, RLS_FAIL_LOCAL);
    assert_int_equal(rls_local_init(l, &h->loop, &h->store->base), RL_OK);
    h->b.local = l;
    l->live = live;
}

static void close_local(h_t *h, rls_local_t *l)
{
    rls_local_close(l, NULL, NULL);
    h->b.local = NULL;
    h_close(h);
}

/* Four live instances: a limit of 100 is 25 here while the store is away,
 * answered OK or OVER_LIMIT (not ERROR) with the words; then the store
 * answers: the 25 reach it before anything else, decisions stay local
 * (on the spent share) for RLS_LOCAL_SETTLE_MS while the fleet's charges
 * come in, and the first batch after is decided by the store with them
 * counted (it used to go before the charges and see 0 used): the window
 * has 100 - 26 left. */
static void test_share_and_charge(void **state)
{
    uint64_t t0 = base_ms();
    rls_local_t l;
    h_t h;
    size_t i, a;

    (void)state;
    open_local(&h, &l, 4);
    h.store->fail = -1;
    for (i = 0; i < 40; i++)
        h_add(&h, t0 + 1000, "k", 100, 60, 1);
    h_flush(&h);
    assert_int_equal(allowed(&h, 0, 40), 25);
    for (i = 0; i < 40; i++) {
        assert_int_not_equal(h.res[i].code, RL_CODE_ERROR);
        assert_non_null(strstr(h.err[i], LOCAL_WORDS));
    }
    assert_int_equal(h.res[39].code, RL_CODE_OVER_LIMIT);
    assert_int_equal(h.res[39].limit, 25);
    assert_int_equal(h.b.stats.decided_local, 40);
    assert_int_equal(l.n, 1);

    /* The store answers: the charge goes first, the batch is still
     * decided here (settling), then the store decides with the 25. */
    h.store->fail = 0;
    i = h_add(&h, t0 + 2000, "k", 100, 60, 1);
    h_flush(&h);
    assert_int_equal(l.n, 0);
    assert_int_equal(l.stats.charged, 1);
    assert_int_equal(h.res[i].code, RL_CODE_OVER_LIMIT);
    assert_non_null(strstr(h.err[i], LOCAL_WORDS));
    i = h_add(&h, t0 + 2000 + RLS_LOCAL_SETTLE_MS - 1, "k", 100, 60, 1);
    h_flush(&h);
    assert_int_equal(h.res[i].code, RL_CODE_OVER_LIMIT);
    assert_non_null(strstr(h.err[i], LOCAL_WORDS));
    i = h_add(&h, t0 + 2000 + RLS_LOCAL_SETTLE_MS, "k", 100, 60, 1);
    h_flush(&h);
    assert_int_equal(h.res[i].code, RL_CODE_OK);
    assert_int_equal(h.res[i].used, 26);
    assert_int_equal(h.err[i][0], '\0');
    for (a = h.n, i = 0; i < 100; i++)
        h_add(&h, t0 + 5000, "k", 100, 60, 1);
    h_flush(&h);
    assert_int_equal(allowed(&h, a, a + 100), 100 - 26);
    close_local(&h, &l);
}

/* A charge batch that fails keeps its charges, merged with what is
 * admitted meanwhile; a charge whose window ended is dropped. */
static void test_charge_kept_and_ended(void **state)
{
    uint64_t t0 = base_ms();
    rls_local_t l;
    h_t h;
    size_t i, a;

    (void)state;
    open_local(&h, &l, 2);
    h.store->fail = -1;
    for (i = 0; i < 4; i++)
        h_add(&h, t0 + 1000, "k", 10, 60, 1);
    for (i = 0; i < 10; i++)
        h_add(&h, t0 + 1000, "old", 10, 1, 1);
    h_flush(&h);
    assert_int_equal(allowed(&h, 0, 4), 4);
    assert_int_equal(allowed(&h, 4, 14), 5);
    assert_int_equal(l.n, 2);

    rls_local_flush(&l, &h.store->base); /* fails: the store is away */
    assert_int_equal(l.stats.charge_errors, 1);
    assert_int_equal(l.n, 2);
    assert_int_equal(l.stats.charged, 0);

    /* One more admission meanwhile, to the same counter (the last of its
     * share of 5). */
    i = h_add(&h, t0 + 1500, "k", 10, 60, 1);
    h_flush(&h);
    assert_int_equal(h.res[i].code, RL_CODE_OK);
    assert_int_equal(l.n, 2);

    /* Later: the 1 s window has ended, the minute has not. The store is
     * looked at (as the timer does): the charges go, and the store decides
     * again once the fleet's have had RLS_LOCAL_SETTLE_MS to come in. */
    h.store->fail = 0;
    h.store->now = t0 + 5000;
    rls_local_poll(&l);
    assert_int_equal(l.n, 0);
    assert_int_equal(l.stats.charged, 1);
    assert_int_equal(l.stats.ended, 1);
    assert_true(rls_local_holds(&l, t0 + 5000 + RLS_LOCAL_SETTLE_MS - 1));
    assert_false(rls_local_holds(&l, t0 + 5000 + RLS_LOCAL_SETTLE_MS));
    for (a = h.n, i = 0; i < 10; i++)
        h_add(&h, t0 + 5000 + RLS_LOCAL_SETTLE_MS, "k", 10, 60, 1);
    h_flush(&h);
    assert_int_equal(allowed(&h, a, a + 10), 10 - 5);
    close_local(&h, &l);
}

/* A gcra on a share: its burst divided, its rate too. */
static void test_gcra_share(void **state)
{
    uint64_t t0 = base_ms();
    rls_local_t l;
    h_t h;
    size_t i;

    (void)state;
    open_local(&h, &l, 2);
    h_rules(&h, "rules:\n"
                "  g:\n"
                "    limits:\n"
                "      - {rate: 10/1s, burst: 8, algorithm: gcra}\n");
    h.store->fail = -1;
    for (i = 0; i < 10; i++)
        h_rule(&h, t0 + 1000, "c", "g", 1);
    h_flush(&h);
    /* Burst 4 here at once; the next one after 2 x 100 ms. */
    assert_int_equal(allowed(&h, 0, 10), 4);
    assert_int_equal(h.res[9].retry_after_ms, 200);
    close_local(&h, &l);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_share_and_charge, h_teardown),
        cmocka_unit_test_teardown(test_charge_kept_and_ended, h_teardown),
        cmocka_unit_test_teardown(test_gcra_share, h_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
