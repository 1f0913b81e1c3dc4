/* The memory store's own errors and its cap (server/store/memory.c):
 * --memory-max as parsed, an op applied whole or not at all, a failed
 * allocation that changes no count, and a store filled with keys through
 * the batcher on a scripted clock (../batch_fx.h), refusing new keys per
 * the fail mode until its windows end. The cap end to end, through a real
 * rl-server, is e2e/e2e_store_memory.c. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <uv.h>

#include "rl_error.h"
#include "flags.h"
#include "store/memory.h"
#include "batch_fx.h"

/* ---- --memory-max ---- */

static int parse_max(const char *val, uint64_t *out)
{
    static rls_flags_t c;
    char *argv[] = {"rl-server", "--memory-max", (char *)val, NULL};
    char err[256];
    int rc;

    rls_flags_defaults(&c);
    rc = rls_flags_parse(&c, 3, argv, stdout, err, sizeof(err));
    *out = c.memory_max;
    if (rc != 0)
        assert_non_null(strstr(err, "--memory-max"));
    return rc;
}

static void test_flag(void **state)
{
    static const char *const bad[] = {
        "",    "k",  "0",     "65535", "63k", "-1",
        "12x", "1t", "2048g", "1 m",   "m1",  "99999999999999999999g"};
    static rls_flags_t c;
    uint64_t v;
    size_t i;

    (void)state;
    rls_flags_defaults(&c);
    assert_int_equal(c.memory_max, (uint64_t)256 << 20);
    assert_int_equal(parse_max("65536", &v), 0);
    assert_int_equal(v, 65536);
    assert_int_equal(parse_max("64k", &v), 0);
    assert_int_equal(v, 65536);
    assert_int_equal(parse_max("64m", &v), 0);
    assert_int_equal(v, (uint64_t)64 << 20);
    assert_int_equal(parse_max("1G", &v), 0);
    assert_int_equal(v, (uint64_t)1 << 30);
    assert_int_equal(parse_max("1024g", &v), 0);
    assert_int_equal(v, (uint64_t)1 << 40);
    for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        assert_int_equal(parse_max(bad[i], &v), RL_EINVAL);
}

static int cb_status;
static size_t cb_calls;

static void on_ops(void *data, rls_op_t *ops, size_t n, int status)
{
    (void)data;
    (void)ops;
    (void)n;
    cb_calls++;
    cb_status = status;
}

/* A raw op on key (tag up to its '}'): windows 60 s (limit 10) and, when
 * nwin is 2, 3600 s (limit 100), at now; the given costs. */
static void set_op(rls_op_t *op, rls_op_window_t *w, const char *key,
                   uint32_t nwin, uint64_t now, const uint32_t *costs,
                   uint32_t ncosts)
{
    static const uint32_t len[2] = {60, 3600};
    static const uint64_t lim[2] = {10, 100};
    uint32_t j;

    memset(op, 0, sizeof(*op));
    op->key = key;
    op->key_len = strlen(key);
    op->tag_len = (size_t)(strchr(key, '}') + 1 - key);
    op->scale = 1.0;
    op->win = w;
    op->nwin = nwin;
    for (j = 0; j < nwin; j++) {
        uint64_t ms = (uint64_t)len[j] * 1000;
        w[j] = (rls_op_window_t){len[j], lim[j], now / ms,
                                 (now / ms + 1) * ms + 1000, -1};
    }
    op->costs = costs;
    op->ncosts = ncosts;
    op->equal_cost = costs[0];
    for (j = 1; j < ncosts; j++)
        if (costs[j] != costs[0])
            op->equal_cost = 0;
}

/* An op is applied whole or not at all, and one that fails fails alone,
 * with batch status 0: the others of the batch were counted, as with
 * Redis. What can fail now: a new counter in a full store (RL_ENOMEM) and
 * a malformed op (RL_EINVAL). An op that needs a new counter for one
 * window of two is refused whole, the other window untouched; an op whose
 * requests are all refused creates nothing and so cannot fail for memory.
 * (A counter overflow is no longer reachable: admitted counts stay at or
 * below a limit, and limits are at most 2^63-1.) */
static void test_memory_op_errors(void **state)
{
    static const uint32_t c3[4] = {3, 3, 3, 3}, c1[1] = {1}, c12[2] = {1, 2},
                          c11[1] = {11};
    uint64_t now = base_ms() + 5000, bytes;
    rls_op_window_t w[5][2];
    rls_op_t ops[5];
    uv_loop_t loop;
    rls_store_t *s;

    (void)state;
    assert_int_equal(uv_loop_init(&loop), 0);
    s = rls_store_memory_new(&loop);
    assert_non_null(s);

    set_op(&ops[0], w[0], "rl:{a}:i", 1, now, c3, 4);
    set_op(&ops[1], w[1], "rl:{d}:r:x", 1, now, c1, 1);
    cb_calls = 0;
    s->v->submit(s, ops, 2, on_ops, NULL);
    assert_int_equal(cb_calls, 1);
    assert_int_equal(cb_status, 0);
    assert_int_equal(ops[0].err, 0);
    assert_int_equal(ops[0].admitted, 3);
    assert_int_equal(w[0][0].before, 0);
    assert_int_equal(ops[1].err, 0);
    assert_int_equal(ops[1].admitted, 1);

    /* Full: no new counter fits any more. */
    bytes = s->stats.mem_bytes;
    rls_store_memory_set_max(s, bytes);
    set_op(&ops[0], w[0], "rl:{a}:i", 1, now, c12, 2);
    set_op(&ops[1], w[1], "rl:{b}:i", 1, now, c1, 1);
    set_op(&ops[2], w[2], "rl:{c}:i", 1, now, c1, 1);
    ops[2].nwin = 0;
    set_op(&ops[3], w[3], "rl:{d}:r:x", 2, now, c1, 1);
    set_op(&ops[4], w[4], "rl:{e}:i", 1, now, c11, 1);
    s->v->submit(s, ops, 5, on_ops, NULL);
    assert_int_equal(cb_calls, 2);
    assert_int_equal(cb_status, 0);
    assert_int_equal(ops[0].err, 0); /* an existing counter: counted */
    assert_int_equal(w[0][0].before, 9);
    assert_int_equal(ops[0].admitted, 1); /* 10; the 2 does not fit */
    assert_int_equal(ops[1].err, RL_ENOMEM);
    assert_int_equal(ops[2].err, RL_EINVAL);
    assert_int_equal(ops[3].err, RL_ENOMEM);
    assert_int_equal(ops[4].err, 0);
    assert_int_equal(ops[4].admitted, 0);
    assert_int_equal(s->stats.mem_refused, 2);
    assert_int_equal(s->stats.mem_full, 1);
    assert_int_equal(s->stats.mem_bytes, bytes);
    assert_int_equal(s->stats.errors, 0); /* no batch failed */

    /* Room again: the refused op left its existing window at 1, the
     * refused request created no counter, the full window stays full. */
    rls_store_memory_set_max(s, RLS_MEMORY_MAX_DEFAULT);
    assert_int_equal(s->stats.mem_full, 0);
    set_op(&ops[0], w[0], "rl:{d}:r:x", 2, now, c1, 1);
    set_op(&ops[1], w[1], "rl:{e}:i", 1, now, c1, 1);
    set_op(&ops[2], w[2], "rl:{a}:i", 1, now, c1, 1);
    s->v->submit(s, ops, 3, on_ops, NULL);
    assert_int_equal(cb_calls, 3);
    assert_int_equal(cb_status, 0);
    assert_int_equal(ops[0].err, 0);
    assert_int_equal(w[0][0].before, 1);
    assert_int_equal(w[0][1].before, 0);
    assert_int_equal(ops[0].admitted, 1);
    assert_int_equal(ops[1].err, 0);
    assert_int_equal(w[1][0].before, 0);
    assert_int_equal(ops[2].err, 0);
    assert_int_equal(w[2][0].before, 10);
    assert_int_equal(ops[2].admitted, 0);

    s->v->close(s, NULL, NULL);
    uv_run(&loop, UV_RUN_DEFAULT);
    assert_int_equal(uv_loop_close(&loop), 0);
}

/* An op whose second new counter cannot be allocated changes no count:
 * the first window's counter used to keep the op's cost although the op
 * failed (and was answered by the fail mode). Needs the counting
 * allocator, so not under ASan. */
static void test_memory_op_alloc_failure(void **state)
{
#ifdef COUNT_ALLOCS
    static const uint32_t c1[1] = {1};
    uint64_t now = base_ms() + 5000;
    rls_op_window_t w[2];
    rls_op_t op;
    uv_loop_t loop;
    rls_store_t *s;

    (void)state;
    assert_int_equal(uv_loop_init(&loop), 0);
    s = rls_store_memory_new(&loop);
    assert_non_null(s);
    /* another caller makes both windows' expiry groups */
    set_op(&op, w, "rl:{warm}:r:x", 2, now, c1, 1);
    s->v->submit(s, &op, 1, on_ops, NULL);
    assert_int_equal(op.err, 0);

    /* two new counters: the second allocation fails */
    set_op(&op, w, "rl:{u}:r:x", 2, now, c1, 1);
    fail_alloc = n_allocs + 2;
    s->v->submit(s, &op, 1, on_ops, NULL);
    fail_alloc = 0;
    assert_int_equal(op.err, RL_ENOMEM);

    set_op(&op, w, "rl:{u}:r:x", 2, now, c1, 1);
    s->v->submit(s, &op, 1, on_ops, NULL);
    assert_int_equal(op.err, 0);
    assert_int_equal(w[0].before, 0);
    assert_int_equal(w[1].before, 0);
    assert_int_equal(op.admitted, 1);

    s->v->close(s, NULL, NULL);
    uv_run(&loop, UV_RUN_DEFAULT);
    assert_int_equal(uv_loop_close(&loop), 0);
#else
    (void)state;
    skip();
#endif
}

/* A request for a key refused by a full store, answered by the fail mode. */
static void assert_refused(const h_t *h, size_t i, int fail_open)
{
    assert_int_equal(h->res[i].code, fail_open ? RL_CODE_OK : RL_CODE_ERROR);
    assert_non_null(strstr(h->err[i], "store unavailable (out of memory)"));
    assert_non_null(strstr(h->err[i], fail_open ? "allowed by fail-open"
                                                : "refused by fail-closed"));
    if (fail_open)
        assert_int_equal(h->res[i].remaining, h->res[i].limit);
}

static void assert_counted(const h_t *h, size_t i, int code, uint64_t used)
{
    assert_int_equal(h->res[i].code, code);
    assert_int_equal(h->res[i].used, used);
    assert_string_equal(h->err[i], "");
}

/* A tiny cap and many keys: the store fills, new keys are refused per the
 * fail mode (and only they: the keys it holds, in the same batches, are
 * still decided exactly), it says it is full until the windows end, and
 * then takes new keys again. */
static void test_memory_full(void **state)
{
    int mode;

    (void)state;
    for (mode = 0; mode <= 1; mode++) {
        h_t *h = calloc(1, sizeof(*h));
        uint64_t B = base_ms(), T, after;
        rls_store_t *ms;
        size_t i, j, first_new, first_refused, late;
        char key[32];

        h_open(h, 0, 1024, mode);
        ms = h->store->inner;
        rls_store_memory_set_max(ms, 65536);
        assert_int_equal(ms->stats.mem_max, 65536);
        assert_true(ms->stats.mem_bytes > 0 && ms->stats.mem_bytes < 65536 / 2);

        /* Eight keys counted once each, then 2,000 new ones. */
        for (i = 0; i < 8; i++) {
            snprintf(key, sizeof(key), "old:%zu", i);
            h_add(h, B + 10, key, 5, 60, 1);
        }
        h_flush(h);
        for (i = 0; i < 8; i++)
            assert_counted(h, i, RL_CODE_OK, 1);
        first_new = h->n;
        for (i = 0; i < 2000; i++) {
            snprintf(key, sizeof(key), "new:%zu", i);
            h_add(h, B + 10, key, 5, 60, 1);
            if (i % 100 == 99)
                h_flush(h);
        }
        /* The first keys fit, then every later one is refused. */
        for (i = first_new; i < h->n && h->err[i][0] == '\0'; i++)
            assert_counted(h, i, RL_CODE_OK, 1);
        first_refused = i;
        assert_true(first_refused > first_new + 100);
        assert_true(first_refused < h->n);
        for (; i < h->n; i++)
            assert_refused(h, i, mode);
        assert_int_equal(ms->stats.mem_refused, h->n - first_refused);
        assert_int_equal(ms->stats.mem_full, 1);
        assert_true(ms->stats.mem_bytes <= 65536);
        assert_true(ms->stats.mem_bytes > 65536 - 65536 / 8);

        /* One batch: the old keys up to and past their limit, a new key
         * that fit, and a new one. Only the new one is refused. */
        T = h->n;
        for (i = 0; i < 8; i++) {
            snprintf(key, sizeof(key), "old:%zu", i);
            for (j = 0; j < 5; j++)
                h_add(h, B + 20, key, 5, 60, 1);
        }
        h_add(h, B + 20, "new:0", 5, 60, 1);
        late = h_add(h, B + 20, "late", 5, 60, 1);
        h_flush(h);
        for (i = 0; i < 8; i++) {
            for (j = 0; j < 4; j++)
                assert_counted(h, T + 5 * i + j, RL_CODE_OK, 2 + j);
            /* refused: it consumes nothing */
            assert_counted(h, T + 5 * i + 4, RL_CODE_OVER_LIMIT, 5);
        }
        assert_counted(h, late - 1, RL_CODE_OK, 2);
        assert_refused(h, late, mode);

        /* Not before the windows end (+ 1 s grace)... */
        after = B + 60000 + 1000;
        assert_int_equal(rls_store_memory_sweep(ms, after - 1), 0);
        assert_int_equal(ms->stats.mem_full, 1);
        /* ...then every counter is freed, and new keys are taken again. */
        while (rls_store_memory_sweep(ms, after) > 0)
            ;
        assert_int_equal(ms->stats.mem_full, 0);
        assert_true(ms->stats.mem_bytes < 65536 / 2);
        T = h->n;
        for (i = 0; i < 100; i++) {
            snprintf(key, sizeof(key), "again:%zu", i);
            h_add(h, after + 10, key, 5, 60, 1);
        }
        h_add(h, after + 10, "late", 5, 60, 1);
        h_flush(h);
        for (i = T; i < h->n; i++)
            assert_counted(h, i, RL_CODE_OK, 1);
        h_close(h);
        free(h);
    }
}

/* A gcra's key expires at its TAT plus the grace, a time that moves on
 * with every admission: the sweep files a key whose TAT moved on again
 * instead of freeing it, and frees it once that time passes. */
static void test_memory_gcra_expiry_moves(void **state)
{
    static const uint32_t c1[1] = {1};
    uint64_t now = base_ms() + 5000, bytes0;
    rls_op_window_t w[1];
    rls_op_t op;
    uv_loop_t loop;
    rls_store_t *s;
    size_t i;

    (void)state;
    assert_int_equal(uv_loop_init(&loop), 0);
    s = rls_store_memory_new(&loop);
    assert_non_null(s);
    bytes0 = s->stats.mem_bytes;
    /* 1 per 10 s, burst 1; a grace of 1 s */
    for (i = 0; i < 3; i++) {
        set_op(&op, w, "rl:{g}:r:g", 1, now + i * 10000, c1, 1);
        w[0] = (rls_op_window_t){10, 1, 0, 1000, -1};
        w[0].algo = RL_ALGO_GCRA;
        w[0].t_us = 10000000;
        op.now_ms = now + i * 10000;
        s->v->submit(s, &op, 1, on_ops, NULL);
        assert_int_equal(op.err, 0);
        assert_int_equal(op.admitted, 1);
        assert_int_equal(w[0].before,
                         i == 0 ? 0 : (int64_t)(now + i * 10000) * 1000);
        /* past the first TAT + grace, within the latest: kept */
        rls_store_memory_sweep(s, now + i * 10000 + 3000);
        assert_true(s->stats.mem_bytes > bytes0);
    }
    /* refused at once: the TAT is there */
    set_op(&op, w, "rl:{g}:r:g", 1, now + 20000, c1, 1);
    w[0] = (rls_op_window_t){10, 1, 0, 1000, -1};
    w[0].algo = RL_ALGO_GCRA;
    w[0].t_us = 10000000;
    op.now_ms = now + 20000;
    s->v->submit(s, &op, 1, on_ops, NULL);
    assert_int_equal(op.admitted, 0);
    /* past the last TAT (now + 30 s) plus the grace and the rounding */
    rls_store_memory_sweep(s, now + 30000 + 1000 + 1024);
    /* the key is gone: the same op at the same instant finds nothing (a
     * group array may stay allocated: up to GROUPS_MIN entries) */
    op.now_ms = now + 20000;
    s->v->submit(s, &op, 1, on_ops, NULL);
    assert_int_equal(w[0].before, 0);
    assert_int_equal(op.admitted, 1);
    s->v->close(s, NULL, NULL);
    uv_run(&loop, UV_RUN_DEFAULT);
    assert_int_equal(uv_loop_close(&loop), 0);
}

/* A sliding window's log (100 per 1 s; a grace of 1 s) in the memory
 * store: it grows past its first allocation and counts it; what left the
 * window drops out of its sum; it reports its oldest entries; and the
 * sweep frees it, log and all, a grace after its newest entry left. */
static void test_memory_log(void **state)
{
    static const uint32_t c1[1] = {1};
    uint64_t now = base_ms() + 5000, bytes0, grown;
    rls_op_window_t w[1];
    rls_op_t op;
    uv_loop_t loop;
    rls_store_t *s;
    size_t i;

    (void)state;
    assert_int_equal(uv_loop_init(&loop), 0);
    s = rls_store_memory_new(&loop);
    assert_non_null(s);
    bytes0 = s->stats.mem_bytes;
    for (i = 0; i <= 40; i++) {
        uint64_t at = i < 40 ? now + i * 10 : now + 1005;
        set_op(&op, w, "rl:{l}:r:l", 1, at, c1, 1);
        w[0] = (rls_op_window_t){1, 100, 0, at + 1000 + 1000, -1};
        w[0].algo = RL_ALGO_SLIDING_LOG;
        op.now_ms = at;
        s->v->submit(s, &op, 1, on_ops, NULL);
        assert_int_equal(op.err, 0);
        assert_int_equal(op.admitted, 1);
        if (i < 40) {
            assert_int_equal(w[0].before, (int64_t)i);
            continue;
        }
        /* at now + 1005 the entry of now has left: 39 remain, the oldest
         * (now + 10) covers a request of cost 1 */
        assert_int_equal(w[0].before, 39);
        assert_int_equal(w[0].before2, (int64_t)(now + 390));
        assert_int_equal(w[0].nold, 1);
        assert_int_equal(w[0].old_t[0], now + 10);
        assert_int_equal(w[0].old_c[0], 1);
    }
    /* 41 entries (16 bytes each) in a log that doubled from 4 to 64 */
    grown = s->stats.mem_bytes;
    assert_true(grown >= bytes0 + 64 * 16);
    /* its newest entry (now + 1005) leaves at now + 2005; with the grace
     * and the group's rounding it is kept until then */
    rls_store_memory_sweep(s, now + 2005);
    assert_int_equal(s->stats.mem_bytes, grown);
    rls_store_memory_sweep(s, now + 2005 + 1000 + 1024);
    assert_true(s->stats.mem_bytes + 64 * 16 <= grown);
    set_op(&op, w, "rl:{l}:r:l", 1, now + 1010, c1, 1);
    w[0] = (rls_op_window_t){1, 100, 0, now + 3010, -1};
    w[0].algo = RL_ALGO_SLIDING_LOG;
    op.now_ms = now + 1010;
    s->v->submit(s, &op, 1, on_ops, NULL);
    assert_int_equal(w[0].before, 0); /* gone */
    s->v->close(s, NULL, NULL);
    uv_run(&loop, UV_RUN_DEFAULT);
    assert_int_equal(uv_loop_close(&loop), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_flag),
        cmocka_unit_test_teardown(test_memory_op_errors, h_teardown),
        cmocka_unit_test_teardown(test_memory_op_alloc_failure, h_teardown),
        cmocka_unit_test_teardown(test_memory_full, h_teardown),
        cmocka_unit_test(test_memory_gcra_expiry_moves),
        cmocka_unit_test(test_memory_log),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
