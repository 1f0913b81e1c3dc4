/* One memory store table shared by several loops (server/store/memory.c,
 * rls_memtab_new, rls_store_memory_new_shared): NTHREADS threads, each
 * with its own uv loop and its own front over the one table, hammer the
 * same keys at once, and the counts stay exact, as if one loop had sent
 * every op: a fixed window, a sliding window's log, a sliding-window
 * counter and a gcra each admit exactly their limit when over-asked (the
 * fixed window's counts before each op tile [0, limit) with no gap and no
 * overlap: the ops were decided one after the other), a lease set holds
 * exactly its limit, a reservation settles once whoever settles it, new
 * keys made by every thread at once are all counted, and the table's bytes
 * go back to what they were once everything expired, whatever sweeps ran
 * meanwhile on other threads. The same program runs under ThreadSanitizer
 * (test_store_memory_mt_tsan), which fails on any unlocked access the
 * counts did not catch. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <uv.h>

#include "rl_admit.h"
#include "rl_clock.h"
#include "rl_error.h"
#include "store/memory.h"
#include "store/reserve.h"
#include "store/store.h"

#define NTHREADS 4
#define NCALLERS 8    /* callers whose keys every thread hammers */
#define LIMIT 20000   /* each caller's limit, per algorithm */
#define ASKS 7000     /* requests per thread per caller: 4 x 7000 > 20000 */
#define NEW_KEYS 5000 /* keys of its own each thread makes */

/* What a thread did; checked by the main thread after it joined (cmocka's
 * assertions are for the main thread only). */
typedef struct worker_s worker_t;
typedef void (*work_fn)(worker_t *w);

typedef struct {
    int64_t before;
    uint64_t admitted;
} seen_t;

struct worker_s {
    int id;
    rls_memtab_t *tab;
    pthread_barrier_t *go;
    work_fn fn;
    uint64_t now;   /* the scenario's clock */
    rls_store_t *s; /* this thread's front */
    uint64_t admitted[NCALLERS];
    seen_t *seen; /* fixed: each admitting op's count before */
    size_t nseen;
    uint64_t batches, ops;
    int bad;         /* a check of the thread's own failed */
    int loop_closed; /* uv_loop_close returned 0 */
};

static void on_ops(void *data, rls_op_t *ops, size_t n, int status)
{
    worker_t *w = data;
    size_t i;

    if (status != 0)
        w->bad = 1;
    for (i = 0; i < n; i++)
        if (ops[i].err != 0)
            w->bad = 1;
}

static void on_xop(void *data, rls_reserve_op_t *x)
{
    worker_t *w = data;

    if (x->err != 0)
        w->bad = 1;
}

/* A limit of one window of algo (ws seconds, limit lim) at now. */
static void set_win(rls_op_window_t *w, int algo, uint32_t ws, uint64_t lim,
                    uint64_t now)
{
    uint64_t W = (uint64_t)ws * 1000, idx = now / W;

    memset(w, 0, sizeof(*w));
    w->window_s = ws;
    w->limit = lim;
    w->algo = (uint8_t)algo;
    w->before = -1;
    w->index = idx;
    w->reset_ms = (idx + 1) * W - now;
    switch (algo) {
    case RL_ALGO_SLIDING_COUNTER:
        w->weight = rl_swc_weight(w->reset_ms, ws);
        w->expire_at_ms = (idx + 2) * W + 1000;
        break;
    case RL_ALGO_GCRA:
        w->t_us = rl_gcra_interval_us(lim, ws);
        w->expire_at_ms = 1000;
        break;
    case RL_ALGO_SLIDING_LOG:
        w->expire_at_ms = now + W + 1000;
        break;
    default:
        w->expire_at_ms = (idx + 1) * W + 1000;
    }
}

/* One op of ncosts requests of cost 1 on key, one window. */
static void set_op(rls_op_t *op, const char *key, rls_op_window_t *win,
                   uint64_t now, uint32_t ncosts)
{
    static const uint32_t ones[4] = {1, 1, 1, 1};

    memset(op, 0, sizeof(*op));
    op->key = key;
    op->key_len = strlen(key);
    op->tag_len = (size_t)(strchr(key, '}') + 1 - key);
    op->scale = 1.0;
    op->now_ms = now;
    op->win = win;
    op->nwin = 1;
    op->costs = ones;
    op->ncosts = ncosts;
    op->equal_cost = 1;
}

static void caller_key(char *dst, size_t n, int c, const char *rule)
{
    snprintf(dst, n, "rl:{caller%d}:r:%s", c, rule);
}

static void *worker_main(void *arg)
{
    worker_t *w = arg;
    uv_loop_t loop;

    if (uv_loop_init(&loop) != 0) {
        w->bad = 1;
        pthread_barrier_wait(w->go);
        return NULL;
    }
    w->s = rls_store_memory_new_shared(&loop, w->tab);
    pthread_barrier_wait(w->go); /* every front made: start together */
    if (w->s == NULL) {
        w->bad = 1;
    } else {
        w->fn(w);
        w->batches = w->s->stats.batches;
        w->ops = w->s->stats.ops;
        w->s->v->close(w->s, NULL, NULL);
    }
    uv_run(&loop, UV_RUN_DEFAULT);
    w->loop_closed = uv_loop_close(&loop) == 0;
    return NULL;
}

/* Runs fn on NTHREADS threads, each with its loop and front over tab,
 * and checks what every thread checked itself. */
static void run_workers(worker_t *ws, rls_memtab_t *tab, work_fn fn,
                        uint64_t now)
{
    pthread_t th[NTHREADS];
    pthread_barrier_t go;
    int i;

    assert_int_equal(pthread_barrier_init(&go, NULL, NTHREADS), 0);
    for (i = 0; i < NTHREADS; i++) {
        memset(&ws[i], 0, sizeof(ws[i]));
        ws[i].id = i;
        ws[i].tab = tab;
        ws[i].go = &go;
        ws[i].fn = fn;
        ws[i].now = now;
        ws[i].seen = calloc((size_t)NCALLERS * ASKS, sizeof(seen_t));
        assert_non_null(ws[i].seen);
    }
    for (i = 0; i < NTHREADS; i++)
        assert_int_equal(pthread_create(&th[i], NULL, worker_main, &ws[i]), 0);
    for (i = 0; i < NTHREADS; i++)
        assert_int_equal(pthread_join(th[i], NULL), 0);
    pthread_barrier_destroy(&go);
    for (i = 0; i < NTHREADS; i++) {
        assert_int_equal(ws[i].bad, 0);
        assert_true(ws[i].loop_closed);
    }
}

static void free_workers(worker_t *ws)
{
    int i;

    for (i = 0; i < NTHREADS; i++)
        free(ws[i].seen);
}

/* The main thread's own front, for reading the table back. */
typedef struct {
    uv_loop_t loop;
    rls_store_t *s;
    int status;
} reader_t;

static void on_read(void *data, rls_op_t *ops, size_t n, int status)
{
    reader_t *r = data;

    (void)ops;
    (void)n;
    r->status = status;
}

static void reader_open(reader_t *r, rls_memtab_t *tab)
{
    assert_int_equal(uv_loop_init(&r->loop), 0);
    r->s = rls_store_memory_new_shared(&r->loop, tab);
    assert_non_null(r->s);
}

static void reader_close(reader_t *r)
{
    r->s->v->close(r->s, NULL, NULL);
    uv_run(&r->loop, UV_RUN_DEFAULT);
    assert_int_equal(uv_loop_close(&r->loop), 0);
}

/* The count of window win of key before a request that cannot fit (a cost
 * past the limit: it consumes nothing). */
static int64_t read_count(reader_t *r, const char *key,
                          const rls_op_window_t *win, uint64_t now)
{
    static const uint32_t huge[1] = {UINT32_MAX};
    rls_op_window_t w = *win;
    rls_op_t op;

    set_op(&op, key, &w, now, 1);
    op.costs = huge;
    op.equal_cost = UINT32_MAX;
    r->status = -1;
    r->s->v->submit(r->s, &op, 1, on_read, r);
    assert_int_equal(r->status, 0);
    assert_int_equal(op.err, 0);
    assert_int_equal(op.admitted, 0);
    return w.before;
}

/* ---- the counting algorithms ---- */

static int algo_of_run;

/* ASKS requests per caller, in ops of 1 to 3 requests, the callers
 * interleaved; the fixed window records each admitting op's count
 * before. */
static void work_counting(worker_t *w)
{
    char key[NCALLERS][64];
    uint32_t asked[NCALLERS] = {0}, k = 0;
    rls_op_window_t win[NCALLERS];
    rls_op_t ops[NCALLERS];
    int who[NCALLERS], c;
    size_t n, j;

    for (c = 0; c < NCALLERS; c++)
        caller_key(key[c], sizeof(key[c]), c, "t");
    do {
        n = 0;
        for (c = 0; c < NCALLERS; c++) {
            uint32_t m = 1 + (k++ + (uint32_t)w->id) % 3;
            uint64_t at = w->now;
            if (asked[c] >= ASKS)
                continue;
            if (m > ASKS - asked[c])
                m = ASKS - asked[c];
            asked[c] += m;
            /* The log's entries at instants of each thread's own, in one
             * window; the others decide at one instant (a gcra then has
             * no refill between threads). */
            if (algo_of_run == RL_ALGO_SLIDING_LOG)
                at += (uint64_t)w->id * 7 + asked[c] % 5;
            set_win(&win[n], algo_of_run, 3600, LIMIT, at);
            /* a fixed window on the table's own clock, shared */
            set_op(&ops[n], key[c], &win[n],
                   algo_of_run == RL_ALGO_FIXED ? 0 : at, m);
            who[n++] = c;
        }
        if (n == 0)
            break;
        w->s->v->submit(w->s, ops, n, on_ops, w);
        for (j = 0; j < n; j++) {
            w->admitted[who[j]] += ops[j].admitted;
            if (algo_of_run == RL_ALGO_FIXED && ops[j].admitted > 0) {
                /* the caller in the top bits, to sort by caller first */
                w->seen[w->nseen].before =
                    win[j].before + ((int64_t)who[j] << 40);
                w->seen[w->nseen++].admitted = ops[j].admitted;
            }
        }
    } while (n > 0);
}

static int cmp_seen(const void *a, const void *b)
{
    const seen_t *x = a, *y = b;

    return x->before < y->before ? -1 : x->before > y->before;
}

static void check_counting(int algo)
{
    rls_memtab_t *tab = rls_memtab_new(RLS_MEMORY_MAX_DEFAULT, 0);
    uint64_t now = rl_unix_ms();
    worker_t ws[NTHREADS];
    uint64_t batches = 0;
    reader_t r;
    int c, i;

    assert_non_null(tab);
    algo_of_run = algo;
    run_workers(ws, tab, work_counting, now);
    for (c = 0; c < NCALLERS; c++) {
        uint64_t sum = 0;
        for (i = 0; i < NTHREADS; i++)
            sum += ws[i].admitted[c];
        /* 4 x 7000 asked of a limit of 20000: exactly the limit */
        assert_int_equal(sum, LIMIT);
    }
    for (i = 0; i < NTHREADS; i++)
        batches += ws[i].batches;
    assert_true(batches >= (uint64_t)NTHREADS * ASKS / 3);

    if (algo == RL_ALGO_FIXED) {
        /* The counts before the admitting ops, every thread's together,
         * tile [0, LIMIT) for each caller: no op saw a count another op
         * had not finished with. */
        seen_t *all = calloc((size_t)NTHREADS * NCALLERS * ASKS, sizeof(*all));
        size_t n = 0, j;
        int64_t next[NCALLERS] = {0};
        assert_non_null(all);
        for (i = 0; i < NTHREADS; i++) {
            memcpy(all + n, ws[i].seen, ws[i].nseen * sizeof(*all));
            n += ws[i].nseen;
        }
        qsort(all, n, sizeof(*all), cmp_seen);
        for (j = 0; j < n; j++) {
            int caller = (int)(all[j].before >> 40);
            int64_t before = all[j].before & (((int64_t)1 << 40) - 1);
            assert_int_equal(before, next[caller]);
            next[caller] += (int64_t)all[j].admitted;
        }
        for (c = 0; c < NCALLERS; c++)
            assert_int_equal(next[c], LIMIT);
        free(all);
    }

    /* Read back through a fifth front: the limit, no more (a gcra's
     * TAT: a burst's worth of intervals past now). */
    reader_open(&r, tab);
    if (algo == RL_ALGO_SLIDING_LOG)
        now += 100; /* after every entry, all still in the window */
    for (c = 0; c < NCALLERS; c++) {
        char key[64];
        rls_op_window_t w;
        caller_key(key, sizeof(key), c, "t");
        set_win(&w, algo, 3600, LIMIT, now);
        assert_int_equal(read_count(&r, key, &w, now),
                         algo == RL_ALGO_GCRA
                             ? (int64_t)(now * 1000 + LIMIT * w.t_us)
                             : LIMIT);
    }
    reader_close(&r);
    rls_memtab_release(tab);
    free_workers(ws);
}

static void test_fixed(void **state)
{
    (void)state;
    check_counting(RL_ALGO_FIXED);
}

static void test_sliding_log(void **state)
{
    (void)state;
    check_counting(RL_ALGO_SLIDING_LOG);
}

static void test_sliding_counter(void **state)
{
    (void)state;
    check_counting(RL_ALGO_SLIDING_COUNTER);
}

static void test_gcra(void **state)
{
    (void)state;
    check_counting(RL_ALGO_GCRA);
}

/* ---- leases and reservations ---- */

#define LEASES 50
#define LEASE_TRIES 200 /* per thread, each with its own id */
#define SETTLES 300     /* reservation ids every thread settles */

/* Acquires: each thread tries LEASE_TRIES leases of its own on one set of
 * limit LEASES. Settles: each thread settles the same SETTLES ids, each
 * adding 1 to caller 0's window, interleaved with releases of its
 * leases. */
static void work_xops(worker_t *w)
{
    static const char key[] = "rl:{leaser}:r:l";
    static const char rkey[] = "rl:{caller0}:r:t";
    rls_op_window_t win;
    uint32_t i;

    set_win(&win, RL_ALGO_FIXED, 3600, LIMIT, w->now);
    for (i = 0; i < LEASE_TRIES || i < SETTLES; i++) {
        rls_reserve_op_t x;
        if (i < LEASE_TRIES) {
            memset(&x, 0, sizeof(x));
            x.kind = RLS_XOP_ACQUIRE;
            x.key = key;
            x.key_len = sizeof(key) - 1;
            x.tag_len = strchr(key, '}') + 1 - key;
            x.now_ms = w->now;
            x.id = ((uint64_t)w->id << 32) | i;
            x.until_ms = w->now + 600000;
            x.limit = LEASES;
            rls_store_reserve(w->s, &x, on_xop, w);
            w->admitted[0] += (uint64_t)x.result;
            if (x.count > LEASES)
                w->bad = 1;
        }
        if (i < SETTLES) {
            memset(&x, 0, sizeof(x));
            x.kind = RLS_XOP_SETTLE;
            x.key = rkey;
            x.key_len = sizeof(rkey) - 1;
            x.tag_len = strchr(rkey, '}') + 1 - rkey;
            x.now_ms = w->now;
            x.id = 1000 + (i * 7 + (uint32_t)w->id * 13) % SETTLES;
            x.until_ms = w->now + 600000;
            x.delta = 1;
            x.decided_at_ms = w->now;
            x.win = &win;
            x.nwin = 1;
            x.settled_max = RLS_SETTLED_DEFAULT;
            rls_store_reserve(w->s, &x, on_xop, w);
            w->admitted[1] += (uint64_t)x.result;
        }
    }
}

static void test_xops(void **state)
{
    static const uint32_t c1[1] = {1};
    rls_memtab_t *tab = rls_memtab_new(RLS_MEMORY_MAX_DEFAULT, 0);
    uint64_t now = rl_unix_ms(), leased = 0, settled = 0;
    worker_t ws[NTHREADS];
    rls_op_window_t w;
    rls_op_t op;
    reader_t r;
    int i;

    (void)state;
    assert_non_null(tab);
    /* caller 0's window at 1, so that settles find a counter to adjust */
    reader_open(&r, tab);
    set_win(&w, RL_ALGO_FIXED, 3600, LIMIT, now);
    set_op(&op, "rl:{caller0}:r:t", &w, now, 1);
    op.costs = c1;
    r.s->v->submit(r.s, &op, 1, on_read, &r);
    assert_int_equal(op.admitted, 1);

    run_workers(ws, tab, work_xops, now);
    for (i = 0; i < NTHREADS; i++) {
        leased += ws[i].admitted[0];
        settled += ws[i].admitted[1];
    }
    assert_int_equal(leased, LEASES);   /* of 4 x 200 tries */
    assert_int_equal(settled, SETTLES); /* each id once, of 4 x 300 */
    set_win(&w, RL_ALGO_FIXED, 3600, LIMIT, now);
    assert_int_equal(read_count(&r, "rl:{caller0}:r:t", &w, now), 1 + SETTLES);
    reader_close(&r);
    rls_memtab_release(tab);
    free_workers(ws);
}

/* ---- new keys, sweeps and the table's bytes ---- */

/* NEW_KEYS keys of its own (callers no other thread has: new entries in
 * every stripe at once, tables growing) and the shared callers' too;
 * thread 0 sweeps meanwhile, freeing the earlier run's keys. */
static void work_new_keys(worker_t *w)
{
    char key[64];
    rls_op_window_t win;
    rls_op_t op;
    uint32_t i;

    for (i = 0; i < NEW_KEYS; i++) {
        snprintf(key, sizeof(key), "rl:{t%d-%u}:r:n", w->id, i);
        set_win(&win, RL_ALGO_FIXED, 60, 5, w->now);
        set_op(&op, key, &win, w->now, 2);
        w->s->v->submit(w->s, &op, 1, on_ops, w);
        if (op.admitted != 2 || win.before != 0)
            w->bad = 1;
        caller_key(key, sizeof(key), (int)(i % NCALLERS), "n");
        set_win(&win, RL_ALGO_FIXED, 60, UINT32_MAX, w->now);
        set_op(&op, key, &win, w->now, 1);
        w->s->v->submit(w->s, &op, 1, on_ops, w);
        w->admitted[i % NCALLERS] += op.admitted;
        if (w->id == 0 && i % 64 == 0)
            rls_store_memory_sweep(w->s, w->now);
    }
}

static void test_new_keys_and_bytes(void **state)
{
    rls_memtab_t *tab = rls_memtab_new(RLS_MEMORY_MAX_DEFAULT, 0);
    uint64_t now = rl_unix_ms(), later = now + 3600000, bytes0, empty;
    worker_t ws[NTHREADS];
    reader_t r;
    int c, i;

    (void)state;
    assert_non_null(tab);
    reader_open(&r, tab);
    bytes0 = r.s->stats.mem_bytes;
    assert_int_equal(r.s->stats.mem_max, RLS_MEMORY_MAX_DEFAULT);
    assert_int_equal(r.s->stats.mem_full, 0);

    /* A first run two minutes ago, all swept: the table empty again, with
     * what stays allocated once used (each stripe's group array). */
    run_workers(ws, tab, work_new_keys, now - 120000);
    free_workers(ws);
    rls_store_memory_sweep(r.s, now - 120000);
    assert_true(r.s->stats.mem_bytes > bytes0);
    while (rls_store_memory_sweep(r.s, later) > 0)
        ;
    empty = r.s->stats.mem_bytes;
    assert_true(empty >= bytes0);
    /* The same again, then a run now whose sweeps (thread 0's) free those
     * keys while the other threads make theirs. */
    run_workers(ws, tab, work_new_keys, now - 120000);
    free_workers(ws);
    run_workers(ws, tab, work_new_keys, now);
    for (c = 0; c < NCALLERS; c++) {
        char key[64];
        rls_op_window_t w;
        uint64_t sum = 0;
        for (i = 0; i < NTHREADS; i++)
            sum += ws[i].admitted[c];
        assert_int_equal(sum, (uint64_t)NTHREADS * NEW_KEYS / NCALLERS);
        caller_key(key, sizeof(key), c, "n");
        set_win(&w, RL_ALGO_FIXED, 60, UINT32_MAX, now);
        assert_int_equal(read_count(&r, key, &w, now), (int64_t)sum);
    }
    rls_store_memory_sweep(r.s, now);
    assert_true(r.s->stats.mem_bytes > empty);
    assert_int_equal(r.s->stats.mem_refused, 0);

    /* Everything expired: the bytes are what they were when it was empty
     * before, to the byte, whichever threads made and freed the keys. */
    while (rls_store_memory_sweep(r.s, later) > 0)
        ;
    assert_int_equal(r.s->stats.mem_bytes, empty);
    reader_close(&r);
    rls_memtab_release(tab);
    free_workers(ws);
}

/* A full table: its state is the table's, in every front, and each stripe
 * refuses past its share only. */
static void test_full_shared(void **state)
{
    rls_memtab_t *tab = rls_memtab_new(65536, 0);
    uint64_t now = rl_unix_ms();
    reader_t a, b;
    rls_op_window_t w;
    rls_op_t op;
    char key[64];
    int i, refused = 0;

    (void)state;
    assert_non_null(tab);
    reader_open(&a, tab);
    reader_open(&b, tab);
    /* 64 KiB leaves 4 stripes of 16 KiB */
    assert_int_equal(a.s->stats.mem_max, 65536);
    assert_true(a.s->stats.mem_bytes < 65536 / 2);
    for (i = 0; i < 2000 && !refused; i++) {
        snprintf(key, sizeof(key), "rl:{f%d}:r:x", i);
        set_win(&w, RL_ALGO_FIXED, 60, 5, now);
        set_op(&op, key, &w, now, 1);
        a.s->v->submit(a.s, &op, 1, on_read, &a);
        refused = op.err == RL_ENOMEM;
    }
    assert_true(refused);
    assert_true(i > 100);
    assert_int_equal(a.s->stats.mem_full, 1);
    assert_int_equal(a.s->stats.mem_refused, 1);
    assert_true(a.s->stats.mem_bytes <= 65536);
    /* the other front learns it with its next call */
    rls_store_memory_set_max(b.s, 65536);
    assert_int_equal(b.s->stats.mem_full, 1);
    assert_int_equal(b.s->stats.mem_refused, 1);
    assert_int_equal(b.s->stats.mem_bytes, a.s->stats.mem_bytes);
    /* expiry empties every stripe: not full any more */
    while (rls_store_memory_sweep(b.s, now + 3600000) > 0)
        ;
    assert_int_equal(b.s->stats.mem_full, 0);
    reader_close(&a);
    reader_close(&b);
    rls_memtab_release(tab);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fixed),
        cmocka_unit_test(test_sliding_log),
        cmocka_unit_test(test_sliding_counter),
        cmocka_unit_test(test_gcra),
        cmocka_unit_test(test_xops),
        cmocka_unit_test(test_new_keys_and_bytes),
        cmocka_unit_test(test_full_shared),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
