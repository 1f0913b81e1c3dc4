/* Reservations and leases (reserve.h, RLS_XOP_*; store/reserve.c,
 * store/reserve.lua and the memory store's own): a long scripted run of
 * batches that charge reservations, settles, and lease operations on a
 * clock the test moves, checked field by field against a model written here (the batches'
 * admissions by lib/admit.c), on the memory store, on a private Redis and,
 * when RLT_XOP_CLUSTER names a node ("host:port", tests/cluster's
 * rcluster_xop), on a Redis Cluster. Then the edge cases one by one: a
 * double settle, a refund past 0, an unknown lease, a lease that is not
 * renewed, the memory store's sweep and budget, Redis's expiries. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <hiredis/hiredis.h>
#include <uv.h>

#include "rl_admit.h"
#include "rl_error.h"
#include "store/memory.h"
#include "store/redis_cluster.h"
#include "store/store.h"
#include "store_redis_fx.h"
#include "base/util.h"

/* ---- a store under test ------------------------------------------------*/

typedef struct be_s {
    uv_loop_t *loop;
    rls_store_t *st;
    fx_t *f; /* Redis: the fixture (its blocking connection); else NULL */
    uv_loop_t own;
} be_t;

typedef struct {
    int calls, status;
} done_t;

static void on_batch(void *data, rls_op_t *ops, size_t n, int status)
{
    done_t *d = data;

    (void)ops;
    (void)n;
    d->calls++;
    d->status = status;
}

static void on_xop(void *data, rls_reserve_op_t *x)
{
    done_t *d = data;

    (void)x;
    d->calls++;
}

static void run_until(be_t *b, const int *flag)
{
    uint64_t dl = rlt_mono_ms() + 5000;

    while (*flag == 0 && rlt_mono_ms() < dl)
        uv_run(b->loop, UV_RUN_ONCE);
    assert_int_not_equal(*flag, 0);
}

static void do_submit(be_t *b, rls_op_t *op)
{
    done_t d = {0, -1};

    b->st->v->submit(b->st, op, 1, on_batch, &d);
    run_until(b, &d.calls);
    assert_int_equal(d.calls, 1);
    assert_int_equal(d.status, 0);
    assert_int_equal(op->err, 0);
}

static void do_xop(be_t *b, rls_reserve_op_t *x)
{
    done_t d = {0, 0};

    x->err = 12345;
    rls_store_reserve(b->st, x, on_xop, &d);
    run_until(b, &d.calls);
    assert_int_equal(d.calls, 1);
}

/* ---- the model -----------------------------------------------------------*/

#define NCALLERS 5
#define NRES 256
#define NLEASE 6
#define LEASE_LIMIT 3
#define GRACE 1000
#define HT 65536

typedef struct {
    uint8_t algo;
    uint32_t ws;
    uint64_t lim;
} wcfg_t;

/* Each caller's limits: every algorithm, alone and together. */
static const wcfg_t cfg[NCALLERS][4] = {
    {{RL_ALGO_FIXED, 1, 20}, {RL_ALGO_SLIDING_COUNTER, 2, 30}},
    {{RL_ALGO_GCRA, 1, 10}, {RL_ALGO_SLIDING_LOG, 2, 25}},
    {{RL_ALGO_FIXED, 2, 40},
     {RL_ALGO_SLIDING_COUNTER, 1, 15},
     {RL_ALGO_GCRA, 2, 20},
     {RL_ALGO_SLIDING_LOG, 1, 12}},
    {{RL_ALGO_SLIDING_LOG, 5, 50}, {RL_ALGO_FIXED, 5, 60}},
    {{RL_ALGO_FIXED, 1, 12}, {RL_ALGO_FIXED, 3, 25}}};
static const uint32_t ncfg[NCALLERS] = {2, 2, 4, 2, 2};

typedef struct {
    char key[128];
    int64_t v;
    int used;
} kv_t;

typedef struct {
    uint64_t t, c;
} lent_t;

typedef struct {
    lent_t *e;
    size_t n, cap;
} mlogm_t;

typedef struct {
    int caller;
    uint64_t id, decided_at;
    rls_op_window_t win[4];
    uint32_t nwin;
    uint64_t est;
    int settled;
} res_t;

/* A caller's settled set, as store.h's RLS_XOP_SETTLE keeps it, with a
 * bound small enough that the run trims it often. */
#define SET_CAP 16
#define SET_HI (SET_CAP + SET_CAP / 16)

typedef struct {
    uint64_t id[SET_HI + 1], until[SET_HI + 1], floor;
    size_t n;
} mset_t;

/* Whether a settle of id (ending at until) applies now; records it. */
static int mset_settle(mset_t *s, uint64_t id, uint64_t until, uint64_t now)
{
    size_t i, lo;

    if (until <= now || until <= s->floor)
        return 0;
    for (i = 0; i < s->n; i++)
        if (s->id[i] == id)
            return 0;
    s->id[s->n] = id;
    s->until[s->n++] = until;
    if (s->n <= SET_HI)
        return 1;
    while (s->n > SET_CAP) {
        for (lo = 0, i = 1; i < s->n; i++)
            if (s->until[i] < s->until[lo])
                lo = i;
        if (s->until[lo] > s->floor)
            s->floor = s->until[lo];
        s->n--;
        s->id[lo] = s->id[s->n];
        s->until[lo] = s->until[s->n];
    }
    return 1;
}

typedef struct {
    mset_t set[NCALLERS];     /* the settled sets */
    kv_t *kv;                 /* counters and TATs, by key */
    mlogm_t log[NCALLERS][4]; /* the sliding windows' logs */
    uint64_t lid[NCALLERS][NLEASE], lend[NCALLERS][NLEASE];
    int lalive[NCALLERS][NLEASE];
    res_t res[NRES];
    size_t nres;
    uint64_t next_id;
    char keys[NCALLERS][32];
    uint64_t now;
    uint64_t seed;
    /* what the run did, to check it did */
    unsigned settles, applied, refunds, excesses, admits, refusals;
    unsigned forgotten; /* refused past the settled set's bound */
    unsigned acquired, full, released, renewed;
} model_t;

static uint64_t rnd(model_t *m)
{
    m->seed ^= m->seed << 13;
    m->seed ^= m->seed >> 7;
    m->seed ^= m->seed << 17;
    return m->seed;
}

static kv_t *kv_at(model_t *m, const char *key)
{
    uint64_t h = 1469598103934665603ULL;
    const char *p;

    for (p = key; *p; p++)
        h = (h ^ (uint8_t)*p) * 1099511628211ULL;
    for (;; h++) {
        kv_t *k = &m->kv[h & (HT - 1)];
        if (!k->used || strcmp(k->key, key) == 0)
            return k;
    }
}

/* A counter or TAT, 0 when none. */
static int64_t kv_get(model_t *m, const char *key)
{
    kv_t *k = kv_at(m, key);

    return k->used ? k->v : 0;
}

static void kv_set(model_t *m, const char *key, int64_t v)
{
    kv_t *k = kv_at(m, key);

    if (!k->used) {
        snprintf(k->key, sizeof(k->key), "%s", key);
        k->used = 1;
    }
    k->v = v;
}

static void op_for(const model_t *m, int c, rls_op_t *op)
{
    memset(op, 0, sizeof(*op));
    op->key = m->keys[c];
    op->key_len = strlen(m->keys[c]);
    op->tag_len = (size_t)(strchr(m->keys[c], '}') + 1 - m->keys[c]);
    op->scale = 1;
    op->now_ms = m->now;
}

/* Caller c's limit j at now, as the batcher sets it. */
static void win_now(const model_t *m, int c, uint32_t j, rls_op_window_t *w)
{
    const wcfg_t *k = &cfg[c][j];
    uint64_t W = (uint64_t)k->ws * 1000, idx = m->now / W;

    memset(w, 0, sizeof(*w));
    w->algo = k->algo;
    w->window_s = k->ws;
    w->limit = k->lim;
    w->index = idx;
    w->reset_ms = (idx + 1) * W - m->now;
    switch (k->algo) {
    case RL_ALGO_SLIDING_COUNTER:
        w->weight = rl_swc_weight(w->reset_ms, k->ws);
        w->expire_at_ms = (idx + 2) * W + GRACE;
        break;
    case RL_ALGO_GCRA:
        w->t_us = rl_gcra_interval_us(k->lim, k->ws);
        w->expire_at_ms = GRACE;
        break;
    case RL_ALGO_SLIDING_LOG:
        w->expire_at_ms = m->now + W + GRACE;
        break;
    default:
        w->expire_at_ms = (idx + 1) * W + GRACE;
    }
}

static mlogm_t *mlog_of(model_t *m, int c, const rls_op_window_t *w)
{
    uint32_t j;

    for (j = 0; j < ncfg[c]; j++)
        if (cfg[c][j].algo == RL_ALGO_SLIDING_LOG &&
            cfg[c][j].ws == w->window_s)
            return &m->log[c][j];
    fail();
    return NULL;
}

/* Drops what left the window by now; the live sum and newest time. */
static void mlog_state(model_t *m, mlogm_t *g, uint64_t W, int64_t *sum,
                       int64_t *newest)
{
    size_t i, k = 0;

    for (i = 0; i < g->n && g->e[i].t + W <= m->now; i++)
        ;
    if (i > 0) {
        memmove(g->e, g->e + i, (g->n - i) * sizeof(*g->e));
        g->n -= i;
    }
    *sum = 0;
    for (k = 0; k < g->n; k++)
        *sum += (int64_t)g->e[k].c;
    *newest = g->n ? (int64_t)g->e[g->n - 1].t : 0;
}

static void mlog_add(mlogm_t *g, uint64_t t, uint64_t c)
{
    if (g->n && g->e[g->n - 1].t == t) {
        g->e[g->n - 1].c += c;
        return;
    }
    if (g->n == g->cap) {
        g->cap = g->cap ? 2 * g->cap : 16;
        g->e = realloc(g->e, g->cap * sizeof(*g->e));
        assert_non_null(g->e);
    }
    g->e[g->n].t = t;
    g->e[g->n++].c = c;
}

/* What the store should report for limit w of caller c now. */
static void expect_win(model_t *m, int c, const rls_op_window_t *w, int64_t *b1,
                       int64_t *b2)
{
    char k[128];
    rls_op_t op;

    op_for(m, c, &op);
    *b2 = 0;
    if (w->algo == RL_ALGO_SLIDING_LOG) {
        mlog_state(m, mlog_of(m, c, w), (uint64_t)w->window_s * 1000, b1, b2);
        return;
    }
    rls_wkey(&op, w, RLS_WKEY_CUR, k);
    *b1 = kv_get(m, k);
    if (w->algo == RL_ALGO_SLIDING_COUNTER) {
        rls_wkey(&op, w, RLS_WKEY_PREV, k);
        *b2 = kv_get(m, k);
    }
}

/* Reads limits win of caller c back through a batch that nothing fits
 * (it changes nothing) and compares them with the model. */
static void check_wins(be_t *b, model_t *m, int c, const rls_op_window_t *win,
                       uint32_t nwin)
{
    rls_op_window_t w[4];
    rls_op_t op;
    uint32_t cost = 1000000000, j;

    op_for(m, c, &op);
    memcpy(w, win, nwin * sizeof(*w));
    for (j = 0; j < nwin; j++) {
        if (w[j].reset_ms == 0)
            w[j].reset_ms = 1;
        if (w[j].algo == RL_ALGO_SLIDING_COUNTER && w[j].weight == 0)
            w[j].weight = RL_SWC_ONE;
        if (w[j].limit == 0)
            w[j].limit = 1;
        w[j].before = w[j].before2 = -77;
    }
    op.win = w;
    op.nwin = nwin;
    op.costs = &cost;
    op.ncosts = 1;
    do_submit(b, &op);
    assert_int_equal(op.admitted, 0);
    for (j = 0; j < nwin; j++) {
        int64_t b1, b2;
        expect_win(m, c, &w[j], &b1, &b2);
        if (w[j].before != b1 || w[j].before2 != b2)
            fail_msg("caller %d limit %u (algo %u, %us, index %llu) at %llu: "
                     "store %lld/%lld, model %lld/%lld",
                     c, j, w[j].algo, w[j].window_s,
                     (unsigned long long)w[j].index, (unsigned long long)m->now,
                     (long long)w[j].before, (long long)w[j].before2,
                     (long long)b1, (long long)b2);
    }
}

/* A batch of 1 to 4 requests of caller c: the store's counts and
 * admissions must be the model's; what it admitted becomes a
 * reservation. */
static void step_charge(be_t *b, model_t *m, int c)
{
    rls_op_window_t w[4], mw[4];
    rl_admit_win_t aw[4];
    uint32_t costs[4], k = 1 + (uint32_t)(rnd(m) % 4), j, i;
    uint64_t adm = 0, sum = 0;
    rls_op_t op;

    op_for(m, c, &op);
    for (j = 0; j < ncfg[c]; j++)
        win_now(m, c, j, &w[j]);
    for (i = 0; i < k; i++)
        costs[i] = 1 + (uint32_t)(rnd(m) % 5);
    op.win = w;
    op.nwin = ncfg[c];
    op.costs = costs;
    op.ncosts = k;
    memcpy(mw, w, sizeof(w));
    do_submit(b, &op);
    for (j = 0; j < ncfg[c]; j++) {
        expect_win(m, c, &mw[j], &mw[j].before, &mw[j].before2);
        assert_int_equal(w[j].before, mw[j].before);
        assert_int_equal(w[j].before2, mw[j].before2);
        mw[j].nold = 0;
        rls_op_window_load(&mw[j], m->now, &aw[j]);
    }
    for (i = 0; i < k; i++)
        if (rl_admit_one(aw, ncfg[c], costs[i])) {
            adm++;
            sum += costs[i];
        }
    assert_int_equal(op.admitted, adm);
    m->admits += (unsigned)adm;
    m->refusals += (unsigned)(k - adm);
    if (sum == 0)
        return;
    for (j = 0; j < ncfg[c]; j++) {
        uint64_t v = rl_admit_added(&aw[j], m->now);
        char key[128];
        if (mw[j].algo == RL_ALGO_SLIDING_LOG) {
            mlog_add(mlog_of(m, c, &mw[j]), m->now, v);
            continue;
        }
        rls_wkey(&op, &mw[j], RLS_WKEY_CUR, key);
        kv_set(m, key,
               mw[j].algo == RL_ALGO_GCRA ? (int64_t)v
                                          : kv_get(m, key) + (int64_t)v);
    }
    {
        res_t *r = &m->res[m->nres % NRES];
        memset(r, 0, sizeof(*r));
        r->caller = c;
        r->id = ++m->next_id * 0x9e3779b97f4a7c15ULL;
        r->decided_at = m->now;
        memcpy(r->win, w, sizeof(w));
        r->nwin = ncfg[c];
        r->est = sum;
        m->nres++;
    }
}

/* Settles reservation r with delta at now, in the model. */
static void model_settle(model_t *m, res_t *r, int64_t d)
{
    rls_op_t op;
    uint32_t j;

    op_for(m, r->caller, &op);
    for (j = 0; j < r->nwin; j++) {
        const rls_op_window_t *w = &r->win[j];
        char key[128];
        uint64_t W = (uint64_t)w->window_s * 1000, nowus = m->now * 1000;
        if (w->algo == RL_ALGO_SLIDING_LOG) {
            mlogm_t *g = mlog_of(m, r->caller, w);
            int64_t s, nw;
            mlog_state(m, g, W, &s, &nw);
            if (d > 0) {
                mlog_add(g, (uint64_t)nw > m->now ? (uint64_t)nw : m->now,
                         (uint64_t)d);
            } else if (d < 0 && r->decided_at + W > m->now) {
                uint64_t want = (uint64_t)-d;
                size_t i;
                for (i = g->n; i-- > 0 && want > 0;) {
                    uint64_t tk;
                    if (g->e[i].t < r->decided_at)
                        break;
                    if (g->e[i].t > r->decided_at)
                        continue;
                    tk = g->e[i].c < want ? g->e[i].c : want;
                    g->e[i].c -= tk;
                    want -= tk;
                }
            }
            continue;
        }
        rls_wkey(&op, w, RLS_WKEY_CUR, key);
        if (w->algo == RL_ALGO_GCRA) {
            kv_t *k = kv_at(m, key);
            if (d > 0) {
                uint64_t base =
                    k->used && (uint64_t)k->v > nowus ? (uint64_t)k->v : nowus;
                kv_set(m, key, (int64_t)(base + (uint64_t)d * w->t_us));
            } else if (d < 0 && k->used && (uint64_t)k->v > nowus) {
                int64_t nt = k->v + d * (int64_t)w->t_us;
                kv_set(m, key, nt < (int64_t)nowus ? (int64_t)nowus : nt);
            }
        } else {
            int64_t v = kv_get(m, key);
            if (v > 0 && d != 0)
                kv_set(m, key, v + d < 0 ? 0 : v + d);
        }
    }
}

static void step_settle(be_t *b, model_t *m)
{
    size_t n = m->nres < NRES ? m->nres : NRES;
    res_t *r;
    rls_reserve_op_t x;
    int64_t d;
    int ok;

    if (n == 0)
        return;
    r = &m->res[rnd(m) % n];
    d = (int64_t)(rnd(m) % (r->est + 8)) - (int64_t)r->est - 2;
    memset(&x, 0, sizeof(x));
    x.kind = RLS_XOP_SETTLE;
    x.key = m->keys[r->caller];
    x.key_len = strlen(x.key);
    x.tag_len = (size_t)(strchr(x.key, '}') + 1 - x.key);
    x.now_ms = m->now;
    x.id = r->id;
    x.until_ms = r->decided_at + 36000000;
    x.delta = d;
    x.decided_at_ms = r->decided_at;
    x.win = r->win;
    x.nwin = r->nwin;
    x.settled_max = SET_CAP;
    do_xop(b, &x);
    assert_int_equal(x.err, 0);
    ok = mset_settle(&m->set[r->caller], r->id, x.until_ms, m->now);
    assert_int_equal(x.result, ok);
    /* Never applied twice: refused past the set's bound, or settled. */
    assert_true(!ok || !r->settled);
    m->settles++;
    m->forgotten += !ok && !r->settled;
    if (ok) {
        model_settle(m, r, d);
        r->settled = 1;
        m->applied++;
        m->refunds += d < 0;
        m->excesses += d > 0;
    }
    /* Read back as a decision now would read them (a window index from
     * another time is no question any instance asks). */
    {
        rls_op_window_t w[4];
        uint32_t j;
        for (j = 0; j < r->nwin; j++)
            win_now(m, r->caller, j, &w[j]);
        check_wins(b, m, r->caller, w, r->nwin);
    }
}

static void step_lease(be_t *b, model_t *m, int c)
{
    uint64_t pick = rnd(m) % 3, id = rnd(m) % NLEASE, n = 0, earliest = 0;
    int kind = pick == 0   ? RLS_XOP_ACQUIRE
               : pick == 1 ? RLS_XOP_RELEASE
                           : RLS_XOP_RENEW;
    int result = 0;
    uint64_t until = m->now + 100 + rnd(m) % 30000, i;
    rls_reserve_op_t x;

    for (i = 0; i < NLEASE; i++)
        if (m->lalive[c][i] && m->lend[c][i] <= m->now)
            m->lalive[c][i] = 0;
    for (i = 0; i < NLEASE; i++)
        n += (uint64_t)m->lalive[c][i];
    if (kind == RLS_XOP_ACQUIRE) {
        if (m->lalive[c][id] || n < LEASE_LIMIT) {
            n += (uint64_t)!m->lalive[c][id];
            m->lalive[c][id] = 1;
            m->lend[c][id] = until;
            result = 1;
            m->acquired++;
        } else {
            earliest = UINT64_MAX;
            for (i = 0; i < NLEASE; i++)
                if (m->lalive[c][i] && m->lend[c][i] < earliest)
                    earliest = m->lend[c][i];
            m->full++;
        }
    } else if (m->lalive[c][id]) {
        result = 1;
        if (kind == RLS_XOP_RELEASE) {
            m->lalive[c][id] = 0;
            n--;
            m->released++;
        } else {
            m->lend[c][id] = until;
            m->renewed++;
        }
    }
    memset(&x, 0, sizeof(x));
    x.kind = kind;
    x.key = m->keys[c];
    x.key_len = strlen(x.key);
    x.tag_len = (size_t)(strchr(x.key, '}') + 1 - x.key);
    x.now_ms = m->now;
    x.id = 0x5100000000000000ULL + id * 0x10001ULL;
    x.until_ms = until;
    x.limit = LEASE_LIMIT;
    do_xop(b, &x);
    assert_int_equal(x.err, 0);
    if (x.result != result || x.count != n || x.earliest_ms != earliest)
        fail_msg("lease kind %d id %llu caller %d at %llu: store %d/%llu/%llu,"
                 " model %d/%llu/%llu",
                 kind, (unsigned long long)id, c, (unsigned long long)m->now,
                 x.result, (unsigned long long)x.count,
                 (unsigned long long)x.earliest_ms, result,
                 (unsigned long long)n, (unsigned long long)earliest);
}

/* The scripted run: steps random operations from a fixed seed, checking
 * each against the model. */
static void scripted_run(be_t *b, const char *prefix, unsigned steps)
{
    model_t *m = calloc(1, sizeof(*m));
    unsigned s;
    int c;

    assert_non_null(m);
    m->kv = calloc(HT, sizeof(*m->kv));
    assert_non_null(m->kv);
    m->seed = 0x2545F4914F6CDD1DULL;
    /* On the store's clock, so that Redis's expiries (on its own) are all
     * ahead: the run's clock only moves on faster. */
    m->now = b->st->v->now_ms(b->st) + 1000;
    for (c = 0; c < NCALLERS; c++)
        snprintf(m->keys[c], sizeof(m->keys[c]), "%s{c%d}:r:x", prefix, c);
    for (s = 0; s < steps; s++) {
        uint64_t p = rnd(m) % 100;
        c = (int)(rnd(m) % NCALLERS);
        if (p < 30)
            step_charge(b, m, c);
        else if (p < 55)
            step_settle(b, m);
        else if (p < 80)
            step_lease(b, m, c);
        else
            m->now += rnd(m) % 1500;
        if (s % 50 == 0) {
            rls_op_window_t w[4];
            uint32_t j;
            for (j = 0; j < ncfg[c]; j++)
                win_now(m, c, j, &w[j]);
            check_wins(b, m, c, w, ncfg[c]);
        }
    }
    print_message("%u settles (%u applied: %u refunds, %u excesses; %u "
                  "refused past the bound), %u "
                  "admitted, %u refused, leases %u acquired, %u full, %u "
                  "released, %u renewed\n",
                  m->settles, m->applied, m->refunds, m->excesses, m->forgotten,
                  m->admits, m->refusals, m->acquired, m->full, m->released,
                  m->renewed);
    /* The run did what it is meant to test. */
    assert_true(m->applied > 200 && m->settles > m->applied);
    assert_true(m->forgotten > 10);
    assert_true(m->refunds > 50 && m->excesses > 50);
    assert_true(m->admits > 200 && m->refusals > 20);
    assert_true(m->acquired > 100 && m->full > 10 && m->released > 20 &&
                m->renewed > 20);
    for (c = 0; c < NCALLERS; c++) {
        uint32_t j;
        for (j = 0; j < 4; j++)
            free(m->log[c][j].e);
    }
    free(m->kv);
    free(m);
}

/* ---- the stores -----------------------------------------------------------*/

static void mem_open(be_t *b)
{
    memset(b, 0, sizeof(*b));
    uv_loop_init(&b->own);
    b->loop = &b->own;
    b->st = rls_store_memory_new(b->loop);
    assert_non_null(b->st);
    assert_non_null(b->st->v->xop);
}

static void be_close(be_t *b)
{
    int done = 0;

    b->st->v->close(b->st, on_done, &done);
    uv_run(b->loop, UV_RUN_DEFAULT);
    assert_int_equal(done, 1);
    assert_int_equal(uv_loop_close(b->loop), 0);
}

static void redis_be(be_t *b, void **state)
{
    fx_t *f = *state;

    memset(b, 0, sizeof(*b));
    b->f = f;
    b->loop = &f->loop;
    open_store(f, f->redis.port, 2000, 0);
    wait_up(f, 5000);
    b->st = f->st;
    assert_null(b->st->v->xop);
}

static void test_model_memory(void **state)
{
    be_t b;

    (void)state;
    mem_open(&b);
    scripted_run(&b, "m:", 4000);
    be_close(&b);
}

static void test_model_redis(void **state)
{
    be_t b;

    redis_be(&b, state);
    scripted_run(&b, "r:", 4000);
    /* Every key the run made expires: counters, TATs, logs, settled sets (10
     * hours at most: the run's clock ran ahead of Redis's), lease sets. */
    assert_true(assert_all_keys_expire(b.f, 36000000 + 10 * 3600 * 1000) > 20);
}

static void on_wake(uv_timer_t *t)
{
    (void)t;
}

/* The same run through the cluster store, when a cluster is given. */
static void test_model_cluster(void **state)
{
    const char *spec = getenv("RLT_XOP_CLUSTER");
    rls_cluster_opts_t o;
    char host[64];
    int port, done = 0;
    be_t b;
    uint64_t dl;

    (void)state;
    if (spec == NULL || sscanf(spec, "%63[^:]:%d", host, &port) != 2) {
        print_message("RLT_XOP_CLUSTER not set: no cluster run\n");
        skip();
    }
    memset(&b, 0, sizeof(b));
    uv_loop_init(&b.own);
    b.loop = &b.own;
    memset(&o, 0, sizeof(o));
    o.hosts[0] = host;
    o.ports[0] = port;
    o.nseeds = 1;
    o.timeout_ms = 2000;
    o.grace_ms = 1000;
    b.st = rls_store_cluster_new(b.loop, &o);
    assert_non_null(b.st);
    dl = rlt_mono_ms() + 10000;
    while (!b.st->v->up(b.st) && rlt_mono_ms() < dl) {
        uv_timer_t t;
        uv_timer_init(b.loop, &t);
        uv_timer_start(&t, on_wake, 10, 0);
        uv_run(b.loop, UV_RUN_ONCE);
        uv_close((uv_handle_t *)&t, NULL);
        uv_run(b.loop, UV_RUN_NOWAIT);
    }
    assert_true(b.st->v->up(b.st));
    scripted_run(&b, "k:", 4000);
    b.st->v->close(b.st, on_done, &done);
    uv_run(b.loop, UV_RUN_DEFAULT);
    assert_int_equal(done, 1);
    assert_int_equal(uv_loop_close(b.loop), 0);
}

/* ---- one at a time
 * ---------------------------------------------------------*/

static void xop_init(rls_reserve_op_t *x, int kind, const char *key,
                     uint64_t now)
{
    memset(x, 0, sizeof(*x));
    x->kind = kind;
    x->key = key;
    x->key_len = strlen(key);
    x->tag_len = (size_t)(strchr(key, '}') + 1 - key);
    x->now_ms = now;
    x->settled_max = 1000;
}

/* Charges one request of cost on every limit of w for key at now. */
static void charge(be_t *b, const char *key, rls_op_window_t *w, uint32_t n,
                   uint32_t cost, uint64_t now)
{
    rls_op_t op;

    memset(&op, 0, sizeof(op));
    op.key = key;
    op.key_len = strlen(key);
    op.tag_len = (size_t)(strchr(key, '}') + 1 - key);
    op.scale = 1;
    op.now_ms = now;
    op.win = w;
    op.nwin = n;
    op.costs = &cost;
    op.ncosts = 1;
    do_submit(b, &op);
    assert_int_equal(op.admitted, 1);
}

/* What limits w of key hold at now (a batch nothing fits). */
static void read_wins(be_t *b, const char *key, const rls_op_window_t *w,
                      uint32_t n, uint64_t now, int64_t *b1, int64_t *b2)
{
    rls_op_window_t c[4];
    uint32_t cost = 1000000000, j;
    rls_op_t op;

    memcpy(c, w, n * sizeof(*c));
    memset(&op, 0, sizeof(op));
    op.key = key;
    op.key_len = strlen(key);
    op.tag_len = (size_t)(strchr(key, '}') + 1 - key);
    op.scale = 1;
    op.now_ms = now;
    op.win = c;
    op.nwin = n;
    op.costs = &cost;
    op.ncosts = 1;
    do_submit(b, &op);
    assert_int_equal(op.admitted, 0);
    for (j = 0; j < n; j++) {
        b1[j] = c[j].before;
        b2[j] = c[j].before2;
    }
}

/* The four algorithms, one limit each, for key at now. */
static void four(rls_op_window_t *w, uint64_t now)
{
    memset(w, 0, 4 * sizeof(*w));
    w[0].algo = RL_ALGO_FIXED;
    w[0].window_s = 60;
    w[0].limit = 100;
    w[0].index = now / 60000;
    w[0].reset_ms = 60000 - now % 60000;
    w[0].expire_at_ms = (w[0].index + 1) * 60000 + GRACE;
    w[1].algo = RL_ALGO_SLIDING_COUNTER;
    w[1].window_s = 60;
    w[1].limit = 100;
    w[1].index = now / 60000;
    w[1].reset_ms = 60000 - now % 60000;
    w[1].weight = rl_swc_weight(w[1].reset_ms, 60);
    w[1].expire_at_ms = (w[1].index + 2) * 60000 + GRACE;
    w[2].algo = RL_ALGO_GCRA;
    w[2].window_s = 60;
    w[2].limit = 100;
    w[2].t_us = rl_gcra_interval_us(100, 60);
    w[2].expire_at_ms = GRACE;
    w[3].algo = RL_ALGO_SLIDING_LOG;
    w[3].window_s = 60;
    w[3].limit = 100;
    w[3].expire_at_ms = now + 60000 + GRACE;
}

static void edge_cases(be_t *b)
{
    const char *key = "e:{edge}:r:x";
    uint64_t now = b->st->v->now_ms(b->st) + 1000, t = 600000, nowus;
    int64_t b1[4], b2[4], a1[4], a2[4];
    rls_op_window_t w[4];
    rls_reserve_op_t x;
    uint32_t j;

    four(w, now);
    nowus = now * 1000;
    charge(b, key, w, 4, 3, now);
    read_wins(b, key, w, 4, now, b1, b2);
    assert_int_equal(b1[0], 3);
    assert_int_equal(b1[1], 3);
    assert_int_equal(b1[2], (int64_t)(nowus + 3 * w[2].t_us));
    assert_int_equal(b1[3], 3);
    assert_int_equal(b2[3], (int64_t)now);

    /* A refund past 0: every limit stops at 0 (a gcra at now). */
    xop_init(&x, RLS_XOP_SETTLE, key, now);
    x.id = 1;
    x.until_ms = now + t;
    x.delta = -10;
    x.decided_at_ms = now;
    x.win = w;
    x.nwin = 4;
    do_xop(b, &x);
    assert_int_equal(x.err, 0);
    assert_int_equal(x.result, 1);
    read_wins(b, key, w, 4, now, a1, a2);
    assert_int_equal(a1[0], 0);
    assert_int_equal(a1[1], 0);
    assert_int_equal(a1[2], (int64_t)nowus);
    assert_int_equal(a1[3], 0);

    /* Settled again (another delta): 0, and nothing moves. */
    x.delta = 7;
    do_xop(b, &x);
    assert_int_equal(x.err, 0);
    assert_int_equal(x.result, 0);
    read_wins(b, key, w, 4, now, b1, b2);
    for (j = 0; j < 4; j++)
        assert_int_equal(b1[j], a1[j]);

    /* An excess on a counter at 0 (none) is dropped; a gcra's and a
     * log's are not. */
    x.id = 2;
    x.delta = 4;
    x.now_ms = now + 10;
    do_xop(b, &x);
    assert_int_equal(x.result, 1);
    read_wins(b, key, w, 4, now + 10, b1, b2);
    assert_int_equal(b1[0], 0);
    assert_int_equal(b1[1], 0);
    assert_int_equal(b1[2], (int64_t)((now + 10) * 1000 + 4 * w[2].t_us));
    assert_int_equal(b1[3], 4);
    assert_int_equal(b2[3], (int64_t)now + 10);

    /* A reservation decided when the log has nothing refunds nothing. */
    x.id = 3;
    x.delta = -4;
    x.decided_at_ms = now + 5;
    do_xop(b, &x);
    assert_int_equal(x.result, 1);
    read_wins(b, key, w, 4, now + 10, a1, a2);
    assert_int_equal(a1[3], 4);
    assert_int_equal(a1[2], (int64_t)((now + 10) * 1000));

    /* A lease: unknown ones are not released or renewed; one not renewed
     * ends at its end; a full set says when its first lease ends. */
    xop_init(&x, RLS_XOP_RELEASE, key, now);
    x.id = 42;
    do_xop(b, &x);
    assert_int_equal(x.err, 0);
    assert_int_equal(x.result, 0);
    assert_int_equal(x.count, 0);
    x.kind = RLS_XOP_RENEW;
    x.until_ms = now + 500;
    do_xop(b, &x);
    assert_int_equal(x.result, 0);
    x.kind = RLS_XOP_ACQUIRE;
    x.limit = 1;
    x.until_ms = now + 100;
    do_xop(b, &x);
    assert_int_equal(x.result, 1);
    assert_int_equal(x.count, 1);
    x.now_ms = now + 99;
    x.kind = RLS_XOP_RENEW;
    x.until_ms = now + 200;
    do_xop(b, &x);
    assert_int_equal(x.result, 1);
    assert_int_equal(x.count, 1);
    x.id = 43;
    x.kind = RLS_XOP_ACQUIRE;
    x.until_ms = now + 300;
    do_xop(b, &x);
    assert_int_equal(x.result, 0);
    assert_int_equal(x.count, 1);
    assert_int_equal(x.earliest_ms, now + 200);
    if (b->f != NULL) {
        /* The set expires at its latest end, on Redis's clock. */
        long long ttl = redis_int(b->f, "PTTL %s", "e:{edge}:r:x:c");
        assert_true(ttl > 0);
        assert_true((uint64_t)ttl <= now + 200 - redis_now_ms(b->f) + 50);
        ttl = redis_int(b->f, "PTTL %s", "e:{edge}:r:x:x");
        assert_true(ttl > 0 && ttl <= (long long)t + 1000 + 50);
    }
    x.now_ms = now + 200; /* lease 42 ended */
    x.id = 42;
    x.kind = RLS_XOP_RENEW;
    x.until_ms = now + 900;
    do_xop(b, &x);
    assert_int_equal(x.result, 0);
    assert_int_equal(x.count, 0);
    x.kind = RLS_XOP_RELEASE;
    do_xop(b, &x);
    assert_int_equal(x.result, 0);
    x.id = 43;
    x.kind = RLS_XOP_ACQUIRE;
    do_xop(b, &x);
    assert_int_equal(x.result, 1);
    assert_int_equal(x.count, 1);
    assert_int_equal(x.earliest_ms, 0);
    x.kind = RLS_XOP_RELEASE;
    do_xop(b, &x);
    assert_int_equal(x.result, 1);
    assert_int_equal(x.count, 0);
    do_xop(b, &x);
    assert_int_equal(x.result, 0);

    /* Bad input fails without reaching the store. */
    xop_init(&x, 9, key, now);
    do_xop(b, &x);
    assert_int_equal(x.err, RL_ESTORE);
    xop_init(&x, RLS_XOP_SETTLE, key, now);
    x.nwin = RL_ADMIT_WINDOWS_MAX + 1;
    x.win = w;
    do_xop(b, &x);
    assert_int_equal(x.err, RL_ESTORE);
}

static void test_edges_memory(void **state)
{
    be_t b;

    (void)state;
    mem_open(&b);
    edge_cases(&b);
    be_close(&b);
}

static void test_edges_redis(void **state)
{
    be_t b;
    redisReply *r;
    rls_reserve_op_t x;
    int i;

    redis_be(&b, state);
    edge_cases(&b);
    /* Redis forgets its scripts: the xop is sent again with the script,
     * which Redis then keeps (the next EVALSHA finds it). */
    r = redisCommand(b.f->rc, "CONFIG RESETSTAT");
    assert_non_null(r);
    freeReplyObject(r);
    for (i = 0; i < 2; i++) {
        r = redisCommand(b.f->rc, "SCRIPT FLUSH");
        assert_non_null(r);
        freeReplyObject(r);
        xop_init(&x, RLS_XOP_ACQUIRE, "e:{ns}:r:x", 1000);
        x.id = (uint64_t)i;
        x.limit = 5;
        x.until_ms = redis_now_ms(b.f) + 60000;
        do_xop(&b, &x);
        assert_int_equal(x.err, 0);
        assert_int_equal(x.result, 1);
        assert_int_equal(x.count, 2 * (uint64_t)i + 1);
        x.id = 10 + (uint64_t)i;
        do_xop(&b, &x);
        assert_int_equal(x.err, 0);
        assert_int_equal(x.count, 2 * (uint64_t)i + 2);
    }
    r = redisCommand(b.f->rc, "INFO commandstats");
    assert_non_null(r);
    assert_int_equal(r->type, REDIS_REPLY_STRING);
    /* EVALSHA failed twice (NOSCRIPT), EVAL ran twice. */
    assert_non_null(strstr(r->str, "cmdstat_eval:calls=2,"));
    assert_non_null(strstr(r->str, "cmdstat_evalsha:calls=4,"));
    assert_non_null(
        strstr(strstr(r->str, "cmdstat_evalsha:"), "failed_calls=2"));
    freeReplyObject(r);
}

/* A settled set ends at its latest end, its bytes given back. */
static void test_marker_ends_memory(void **state)
{
    const char *key = "e:{m}:r:x";
    uint64_t now = 5000000, base;
    rls_reserve_op_t x;
    be_t b;

    (void)state;
    mem_open(&b);
    /* The baseline once the group array exists (the sweep keeps it). */
    xop_init(&x, RLS_XOP_SETTLE, key, now - 10000);
    x.until_ms = now - 9000;
    do_xop(&b, &x);
    assert_int_equal(x.result, 1);
    rls_store_memory_sweep(b.st, now);
    base = b.st->stats.mem_bytes;
    xop_init(&x, RLS_XOP_SETTLE, key, now);
    x.id = 7;
    x.until_ms = now + 100;
    do_xop(&b, &x);
    assert_int_equal(x.result, 1);
    assert_true(b.st->stats.mem_bytes > base);
    x.now_ms = now + 99;
    do_xop(&b, &x);
    assert_int_equal(x.result, 0);
    /* Past its end the id stays in the set until trimmed or the set
     * ends: never applied twice; another id is. */
    x.now_ms = now + 100;
    x.until_ms = now + 200;
    do_xop(&b, &x);
    assert_int_equal(x.result, 0);
    x.id = 8;
    do_xop(&b, &x);
    assert_int_equal(x.result, 1);
    /* A lease set, then the sweep: both gone, their bytes given back. */
    xop_init(&x, RLS_XOP_ACQUIRE, key, now);
    x.id = 1;
    x.limit = 5;
    x.until_ms = now + 3000;
    do_xop(&b, &x);
    assert_int_equal(x.result, 1);
    assert_true(rls_store_memory_sweep(b.st, now + 2000) >= 1);
    assert_true(b.st->stats.mem_bytes > base);
    x.now_ms = now + 2500;
    x.kind = RLS_XOP_RENEW;
    x.until_ms = now + 9000;
    do_xop(&b, &x);
    assert_int_equal(x.result, 1);
    rls_store_memory_sweep(b.st, now + 8000);
    assert_true(b.st->stats.mem_bytes > base);
    rls_store_memory_sweep(b.st, now + 20000);
    assert_int_equal(b.st->stats.mem_bytes, base);
    x.now_ms = now + 8500;
    x.kind = RLS_XOP_RELEASE;
    do_xop(&b, &x);
    assert_int_equal(x.result, 0);
    be_close(&b);
}

/* A full memory store fails an xop that needs memory, changing nothing. */
static void test_full_memory(void **state)
{
    const char *key = "e:{f}:r:x";
    uint64_t now = 5000000;
    rls_reserve_op_t x;
    be_t b;
    int i;

    (void)state;
    mem_open(&b);
    /* Room for a settled set and the first group array, not for two
     * (another caller's). */
    rls_store_memory_set_max(b.st, b.st->stats.mem_bytes + 500);
    xop_init(&x, RLS_XOP_SETTLE, key, now);
    x.id = 1;
    x.until_ms = now + 1000;
    do_xop(&b, &x);
    assert_int_equal(x.err, 0);
    assert_int_equal(x.result, 1);
    xop_init(&x, RLS_XOP_SETTLE, "e:{f2}:r:x", now);
    x.id = 2;
    x.until_ms = now + 1000;
    do_xop(&b, &x);
    assert_int_equal(x.err, RL_ENOMEM);
    assert_true(b.st->stats.mem_full);
    xop_init(&x, RLS_XOP_ACQUIRE, key, now);
    x.id = 1;
    x.limit = 100;
    x.until_ms = now + 1000;
    do_xop(&b, &x);
    assert_int_equal(x.err, RL_ENOMEM);
    assert_int_equal(x.result, 0);
    /* Room again: the settle that failed was not recorded, so it applies
     * now. */
    rls_store_memory_sweep(b.st, now + 5000);
    rls_store_memory_set_max(b.st, UINT64_C(1) << 30);
    assert_false(b.st->stats.mem_full);
    xop_init(&x, RLS_XOP_SETTLE, "e:{f2}:r:x", now + 5000);
    x.id = 2;
    x.until_ms = now + 9000;
    do_xop(&b, &x);
    assert_int_equal(x.err, 0);
    assert_int_equal(x.result, 1);
    /* Leases past the set's first allocation grow it within the cap. */
    for (i = 0; i < 50; i++) {
        xop_init(&x, RLS_XOP_ACQUIRE, key, now + 5000);
        x.id = (uint64_t)i;
        x.limit = 40;
        x.until_ms = now + 6000 + (uint64_t)i;
        do_xop(&b, &x);
        assert_int_equal(x.err, 0);
        assert_int_equal(x.result, i < 40);
        assert_int_equal(x.count, i < 40 ? (uint64_t)i + 1 : 40);
        assert_int_equal(x.earliest_ms, i < 40 ? 0 : now + 6000);
    }
    be_close(&b);
}

/* On Redis, a settled set expires on Redis's clock; then it settles again. */
static void test_marker_ends_redis(void **state)
{
    const char *key = "e:{mr}:r:x";
    be_t b;
    rls_reserve_op_t x;
    uint64_t dl;

    redis_be(&b, state);
    xop_init(&x, RLS_XOP_SETTLE, key, redis_now_ms(b.f));
    x.id = 0xabcdef;
    x.until_ms = x.now_ms + 150;
    do_xop(&b, &x);
    assert_int_equal(x.result, 1);
    assert_int_equal(redis_int(b.f, "EXISTS %s", "e:{mr}:r:x:x"), 1);
    do_xop(&b, &x);
    assert_int_equal(x.result, 0);
    dl = rlt_mono_ms() + 3000;
    while (redis_int(b.f, "EXISTS %s", "e:{mr}:r:x:x") != 0 &&
           rlt_mono_ms() < dl)
        run_for(b.f, 20);
    x.now_ms = redis_now_ms(b.f);
    x.until_ms = x.now_ms + 60000;
    do_xop(&b, &x);
    assert_int_equal(x.result, 1);
}

/* The reserve-1, settle-0 loop (issue 40, finding 3): a refund gives back
 * what the reservation took, so a caller may reserve and settle without
 * end; what the store keeps for it must stay within its set's bound, and
 * a settle the bound no longer proves unsettled is refused, never applied
 * twice. */
#define PROBE_N 3000
/* The bound, and what a set holds at most: a sixteenth more between its
 * trims. */
#define PROBE_CAP 100
#define PROBE_HI (PROBE_CAP + PROBE_CAP / 16)

static void settled_probe(be_t *b, const char *key, uint64_t now)
{
    rls_reserve_op_t x;
    uint64_t i;

    for (i = 1; i <= PROBE_N; i++) {
        xop_init(&x, RLS_XOP_SETTLE, key, now);
        x.id = i;
        x.until_ms = now + 300000 + i;
        x.delta = -1;
        x.settled_max = PROBE_CAP;
        do_xop(b, &x);
        assert_int_equal(x.err, 0);
        assert_int_equal(x.result, 1);
    }
}

/* After settled_probe: what the bound means for replays. */
static void settled_replays(be_t *b, const char *key, uint64_t now)
{
    rls_reserve_op_t x;

    xop_init(&x, RLS_XOP_SETTLE, key, now);
    x.delta = -1;
    x.settled_max = PROBE_CAP;
    /* Replays: the newest is still held, the oldest went past the
     * bound: both refused. */
    x.id = PROBE_N;
    x.until_ms = now + 300000 + PROBE_N;
    do_xop(b, &x);
    assert_int_equal(x.result, 0);
    x.id = 1;
    x.until_ms = now + 300001;
    do_xop(b, &x);
    assert_int_equal(x.result, 0);
    /* An id never settled but older than what the set can prove: refused
     * too (its estimate stays charged); a newer one applies. */
    x.id = PROBE_N + 1;
    x.until_ms = now + 300000 + PROBE_N / 2;
    do_xop(b, &x);
    assert_int_equal(x.result, 0);
    x.id = PROBE_N + 2;
    x.until_ms = now + 300000 + PROBE_N + 2;
    do_xop(b, &x);
    assert_int_equal(x.result, 1);
}

static void test_settled_bound_memory(void **state)
{
    const char *key = "e:{b}:r:x";
    uint64_t now = 5000000, base;
    rls_reserve_op_t x;
    be_t b;

    (void)state;
    mem_open(&b);
    /* The baseline once the group array exists (the sweep keeps it). */
    xop_init(&x, RLS_XOP_SETTLE, "e:{b0}:r:x", now - 10000);
    x.until_ms = now - 9000;
    x.settled_max = PROBE_CAP;
    do_xop(&b, &x);
    rls_store_memory_sweep(b.st, now);
    base = b.st->stats.mem_bytes;
    settled_probe(&b, key, now);
    print_message("memory store: %u settles held %llu bytes\n", PROBE_N + 1,
                  (unsigned long long)(b.st->stats.mem_bytes - base));
    /* PROBE_HI (id, end) pairs of 16 bytes at most, and an entry. */
    assert_true(b.st->stats.mem_bytes - base <= PROBE_HI * 16 + 512);
    settled_replays(&b, key, now);
    rls_store_memory_sweep(b.st, now + 400000);
    assert_int_equal(b.st->stats.mem_bytes, base);
    be_close(&b);
}

static void test_settled_bound_redis(void **state)
{
    be_t b;
    redisReply *r;
    long long mem = 0;
    size_t i;
    uint64_t now;

    redis_be(&b, state);
    now = redis_now_ms(b.f);
    settled_probe(&b, "e:{rb}:r:x", now);
    r = redisCommand(b.f->rc, "KEYS %s", "e:{rb}*");
    assert_non_null(r);
    assert_int_equal(r->type, REDIS_REPLY_ARRAY);
    for (i = 0; i < r->elements; i++)
        mem += redis_int(b.f, "MEMORY USAGE %s", r->element[i]->str);
    print_message("Redis: %u settles left %zu keys, %lld bytes\n", PROBE_N + 1,
                  r->elements, mem);
    /* The set and its floor; each member 16 bytes of id and a score. */
    assert_true(r->elements <= 2);
    assert_true(mem <= PROBE_HI * 64 + 1024);
    freeReplyObject(r);
    assert_true(redis_int(b.f, "ZCARD %s", "e:{rb}:r:x:x") <= PROBE_HI);
    settled_replays(&b, "e:{rb}:r:x", now);
}

/* A version 1 handle's reservation may have been settled by a server
 * before the settled set, through its marker "<key>:x<id>": on Redis its
 * settlement is refused while that marker exists; the memory store never
 * had one (x.marker changes nothing there). */
static void marker_case(be_t *b, const char *key, uint64_t now)
{
    rls_reserve_op_t x;

    xop_init(&x, RLS_XOP_SETTLE, key, now);
    x.id = 0xaa;
    x.until_ms = now + 60000;
    x.delta = -1;
    x.marker = 1;
    do_xop(b, &x);
    assert_int_equal(x.err, 0);
    assert_int_equal(x.result, b->f != NULL ? 0 : 1);
    x.id = 0xab; /* no marker: settles, once */
    do_xop(b, &x);
    assert_int_equal(x.result, 1);
    do_xop(b, &x);
    assert_int_equal(x.result, 0);
}

static void test_marker_v1_memory(void **state)
{
    be_t b;

    (void)state;
    mem_open(&b);
    marker_case(&b, "e:{v1}:r:x", 5000000);
    be_close(&b);
}

static void test_marker_v1_redis(void **state)
{
    be_t b;
    redisReply *r;

    redis_be(&b, state);
    r = redisCommand(b.f->rc, "SET %s 1 PX 60000",
                     "e:{v1}:r:x:x00000000000000aa");
    assert_non_null(r);
    freeReplyObject(r);
    marker_case(&b, "e:{v1}:r:x", redis_now_ms(b.f));
    assert_int_equal(redis_int(b.f, "ZCARD %s", "e:{v1}:r:x:x"), 1);
}

/* A store that cannot answer: the callback still fires once, with
 * RL_ESTORE, also when command() fails at once. */
static void test_redis_down(void **state)
{
    fx_t *f = *state;
    be_t b;
    rls_reserve_op_t x;

    redis_be(&b, state);
    rlt_redis_kill(&f->redis);
    RUN_UNTIL(f, !f->st->v->up(f->st), 5000);
    xop_init(&x, RLS_XOP_ACQUIRE, "e:{d}:r:x", 1000);
    x.limit = 1;
    x.until_ms = 2000;
    do_xop(&b, &x);
    assert_int_equal(x.err, RL_ESTORE);
    assert_int_equal(x.result, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_model_memory),
        cmocka_unit_test(test_edges_memory),
        cmocka_unit_test(test_marker_ends_memory),
        cmocka_unit_test(test_full_memory),
        cmocka_unit_test(test_settled_bound_memory),
        cmocka_unit_test(test_marker_v1_memory),
        cmocka_unit_test_setup_teardown(test_model_redis, fx_setup,
                                        fx_teardown),
        cmocka_unit_test_setup_teardown(test_edges_redis, fx_setup,
                                        fx_teardown),
        cmocka_unit_test_setup_teardown(test_marker_ends_redis, fx_setup,
                                        fx_teardown),
        cmocka_unit_test_setup_teardown(test_settled_bound_redis, fx_setup,
                                        fx_teardown),
        cmocka_unit_test_setup_teardown(test_marker_v1_redis, fx_setup,
                                        fx_teardown),
        cmocka_unit_test_setup_teardown(test_redis_down, fx_setup, fx_teardown),
        cmocka_unit_test(test_model_cluster),
    };

    const struct CMUnitTest cluster[] = {
        cmocka_unit_test(test_model_cluster),
    };

    /* With a cluster given, that run alone (tests/cluster's rcluster_xop). */
    if (getenv("RLT_XOP_CLUSTER") != NULL)
        return cmocka_run_group_tests(cluster, NULL, NULL);
    return cmocka_run_group_tests(tests, NULL, NULL);
}
