/* Reservations and leases on a stripe of the memory store (memory_tab.h;
 * store.h, RLS_XOP_*).
 *
 * The same answers as store/reserve.lua, on entries of their own: a caller's
 * settled set "<key>:x" (its floor in the same entry) and a lease set
 * "<key>:c". Both expire and are swept as counters are, and count against
 * the stripe's share of the cap: an operation that would need memory past
 * it fails with RL_ENOMEM and changes nothing. Their keys start with the
 * op's tag, as its counters' do, so they are in the stripe of the
 * counters a settlement adjusts; the caller holds its lock.
 *
 * Also the admin listener's step on a caller's keys (store/usage.h,
 * rls_mem_usage): its leases alive, and a reset that empties its
 * counters, logs and lease set in place. */
#include <stdlib.h>
#include <string.h>

#include "rl_admit.h"
#include "rl_error.h"
#include "rl_hash.h"
#include "store/memory_tab.h"
#include "store/reserve.h"
#include "store/store.h"

#define XOP_MAXN INT64_C(9007199254740991) /* as the script's doubles */
#define XOP_DELTA_MAX INT64_C(9999999999)

/* The key "<op key><suffix>" into dst, its hash into *h; its length. */
static size_t reserve_key(const rls_mem_stripe_t *m, const rls_reserve_op_t *x,
                          const char *sfx, size_t sl, char *dst, uint64_t *h)
{
    memcpy(dst, x->key, x->key_len);
    memcpy(dst + x->key_len, sfx, sl);
    dst[x->key_len + sl] = '\0';
    *h = rl_hash(&m->hk, dst, x->key_len + sl);
    return x->key_len + sl;
}

/* What a settle does to one window, decided before anything is written. */
typedef struct {
    rls_mem_ent_t *e;
    char key[RLS_MEM_OPKEY_MAX + 36];
    size_t klen;
    uint64_t h;
    int what;     /* 0 nothing, 1 set count, 2 append to a log, 3 refund a
                     log */
    int64_t val;  /* 1: the new count or TAT; 2: the entry's time */
    uint64_t exp; /* 1 (gcra), 2: the expiry, a group's time */
} xplan_t;

/* Id's index in lease or settled set g, or -1. */
static int64_t lease_find(const rls_mem_lease_t *g, uint64_t id)
{
    uint32_t i;

    for (i = 0; g != NULL && i < g->n; i++)
        if (g->e[2 * i] == id)
            return i;
    return -1;
}

/* Whether a settle of x may apply on the settled set g with floor (the
 * script's test): its end is after now and after the floor, and its id is
 * not in g. */
static int settled_fresh(const rls_mem_lease_t *g, uint64_t floor,
                         const rls_reserve_op_t *x)
{
    return x->until_ms > x->now_ms && x->until_ms > floor &&
           lease_find(g, x->id) < 0;
}

/* Drops from g the pairs whose end is at or before now. */
static void pairs_prune(rls_mem_lease_t *g, uint64_t now)
{
    uint32_t i;

    for (i = 0; g != NULL && i < g->n;) {
        if (g->e[2 * i + 1] <= now) {
            g->n--;
            g->e[2 * i] = g->e[2 * g->n];
            g->e[2 * i + 1] = g->e[2 * g->n + 1];
        } else {
            i++;
        }
    }
}

/* The most pairs a settled set of bound cap holds: past it, the script
 * trims down to cap (a sixteenth more, so that it trims once per cap / 16
 * settlements). */
static uint64_t settled_hi(uint64_t cap)
{
    return cap + cap / 16;
}

/* Adds (id, until) to settled set e, then, past settled_hi(cap), keeps
 * the cap latest ends (the script's ZADD, then ZREMRANGEBYRANK): the
 * earliest go, the new pair too if it is among them, and the floor
 * (e->count) rises to the latest end dropped. The set has room for one
 * more pair, or holds settled_hi(cap) (and then loses some before the new
 * pair goes in). */
static void settled_add(rls_mem_ent_t *e, const rls_reserve_op_t *x,
                        uint64_t cap)
{
    rls_mem_lease_t *g = e->leases;
    uint64_t gone;
    uint32_t i, lo;
    int in = 1; /* the new pair is still to go in */
    int trim = g->n + 1 > settled_hi(cap);

    while (trim && g->n + (uint32_t)in > cap && g->n > 0) {
        for (lo = 0, i = 1; i < g->n; i++)
            if (g->e[2 * i + 1] < g->e[2 * lo + 1])
                lo = i;
        if (in && x->until_ms < g->e[2 * lo + 1]) {
            gone = x->until_ms;
            in = 0;
        } else {
            gone = g->e[2 * lo + 1];
            g->n--;
            g->e[2 * lo] = g->e[2 * g->n];
            g->e[2 * lo + 1] = g->e[2 * g->n + 1];
        }
        if ((int64_t)gone > e->count)
            e->count = (int64_t)gone;
    }
    if (in) {
        g->e[2 * g->n] = x->id;
        g->e[2 * g->n + 1] = x->until_ms;
        g->n++;
    }
    rls_mem_ent_extend(e, rls_mem_group_time(x->until_ms));
}

static int settle_reservation(rls_mem_stripe_t *m, rls_reserve_op_t *x)
{
    char mk[RLS_MEM_OPKEY_MAX + 4];
    xplan_t p[RL_ADMIT_WINDOWS_MAX];
    uint64_t now = x->now_ms, nowus = now * 1000, mh, W;
    uint64_t cap = x->settled_max > 0 ? x->settled_max : 1;
    size_t mlen, need = 0, fresh = 0;
    int64_t d = x->delta;
    rls_mem_ent_t *me;
    rls_mem_lease_t *sg;
    uint32_t j, i, gcap = 0;
    rls_op_t op = {0};

    if (cap > UINT32_MAX / 4)
        cap = UINT32_MAX / 4;
    mlen = reserve_key(m, x, ":x", 2, mk, &mh);
    me = rls_mem_find(m, mk, mlen, mh);
    if (me != NULL && me->kind != RLS_MEM_SETTLED)
        return RL_ESTORE; /* cannot be: no other key ends in ":x" */
    sg = me != NULL ? me->leases : NULL;
    if (!settled_fresh(
            sg, me != NULL && me->count > 0 ? (uint64_t)me->count : 0, x))
        return 0; /* settled, or it may have been */
    /* Room for one more pair: a new set, or one grown (never past what
     * cap needs), unless it is full and trims. */
    if (sg == NULL)
        gcap = RLS_MEM_LEASE_CAP_MIN;
    else if (sg->n == sg->cap && sg->n < settled_hi(cap))
        gcap = 2 * sg->cap < settled_hi(cap) ? 2 * sg->cap
                                             : (uint32_t)settled_hi(cap);

    op.key = x->key;
    op.key_len = x->key_len;
    op.tag_len = x->tag_len;
    for (j = 0; j < x->nwin; j++) {
        const rls_op_window_t *w = &x->win[j];
        xplan_t *q = &p[j];
        rls_mem_ent_t *e;
        q->klen = rls_wkey(&op, w, RLS_WKEY_CUR, q->key);
        q->h = rl_hash(&m->hk, q->key, q->klen);
        q->e = e = rls_mem_find(m, q->key, q->klen, q->h);
        q->what = 0;
        W = (uint64_t)w->window_s * 1000;
        if (w->algo == RL_ALGO_GCRA) {
            int64_t v = e != NULL ? e->count : 0;
            double nt = -1;
            if (d > 0) {
                nt = (double)(e != NULL && v > (int64_t)nowus ? (uint64_t)v
                                                              : nowus) +
                     (double)d * (double)w->t_us;
                if (nt > (double)XOP_MAXN)
                    return RL_ESTORE;
            } else if (d < 0 && e != NULL && v > (int64_t)nowus) {
                nt = (double)v + (double)d * (double)w->t_us;
                if (nt < (double)nowus)
                    nt = (double)nowus;
            }
            if (nt >= 0) {
                q->what = 1;
                q->val = (int64_t)nt;
                q->exp = rls_mem_group_time(((uint64_t)q->val + 999) / 1000 +
                                            w->expire_at_ms);
                if (e == NULL)
                    need += rls_mem_ent_cost(q->klen), fresh++;
            }
        } else if (w->algo == RL_ALGO_SLIDING_LOG) {
            const rls_mem_log_t *g = e != NULL ? e->log : NULL;
            if (d > 0) {
                uint64_t t = now;
                if (g != NULL && g->n && rls_mem_log_at(g, g->n - 1)[0] > t)
                    t = rls_mem_log_at(g, g->n - 1)[0];
                q->what = 2;
                q->val = (int64_t)t;
                q->exp = w->expire_at_ms +
                         (now > x->decided_at_ms ? now - x->decided_at_ms : 0);
                q->exp = rls_mem_group_time(q->exp);
                need += rls_mem_log_growth(e, t);
                if (e == NULL)
                    need += rls_mem_ent_cost(q->klen), fresh++;
            } else if (d < 0 && g != NULL && g->n &&
                       x->decided_at_ms + W > now) {
                q->what = 3;
            }
        } else if (e != NULL && e->count > 0 && d != 0) {
            /* A counter at 0 is none (the script's batches may remove
             * it), so it takes no excess. */
            int64_t v = e->count, nv = v + d;
            if (nv < 0)
                nv = 0;
            if (nv > XOP_MAXN)
                return RL_ESTORE;
            q->what = 1;
            q->val = nv;
            q->exp = 0;
        }
    }
    if (me == NULL)
        need += rls_mem_ent_cost(mlen) + rls_mem_lease_cost(gcap), fresh++;
    else if (gcap > 0)
        need += rls_mem_lease_cost(gcap) - rls_mem_lease_cost(sg->cap);
    if (!rls_mem_fits(m, need, fresh))
        return RL_ENOMEM;
    /* New entries first (a counter at 0, an empty log, decide as none),
     * then the settled set's room: a failure before the windows change
     * leaves the settle undone. */
    for (j = 0; j < x->nwin; j++) {
        xplan_t *q = &p[j];
        if ((q->what == 1 || q->what == 2) && q->e == NULL &&
            rls_mem_create(m, q->key, q->klen, q->h, q->exp, &q->e) != 0)
            return RL_ENOMEM;
        if (q->what == 2 && rls_mem_log_reserve(m, q->e) != 0)
            return RL_ENOMEM;
    }
    if (gcap > 0) {
        uint32_t old = sg != NULL ? sg->cap : 0;
        rls_mem_lease_t *ng = realloc(sg, sizeof(*ng) + (size_t)gcap * 16);
        if (ng == NULL)
            return RL_ENOMEM;
        if (sg == NULL)
            ng->n = 0;
        ng->cap = gcap;
        sg = ng;
        if (me != NULL) {
            m->bytes += rls_mem_lease_cost(gcap) - rls_mem_lease_cost(old);
            me->leases = sg;
        }
    }
    if (me == NULL) {
        if (rls_mem_create(m, mk, mlen, mh, rls_mem_group_time(x->until_ms),
                           &me) != 0) {
            free(sg);
            return RL_ENOMEM;
        }
        m->bytes += rls_mem_lease_cost(sg->cap);
        me->kind = RLS_MEM_SETTLED;
        me->leases = sg;
    }
    settled_add(me, x, cap);
    for (j = 0; j < x->nwin; j++) {
        xplan_t *q = &p[j];
        if (q->what == 1) {
            q->e->count = q->val;
            if (q->exp)
                rls_mem_ent_extend(q->e, q->exp);
        } else if (q->what == 2) {
            rls_mem_log_append(q->e, (uint64_t)q->val, (uint64_t)d);
            rls_mem_ent_extend(q->e, q->exp);
        } else if (q->what == 3) {
            rls_mem_log_t *g = q->e->log;
            uint64_t want = (uint64_t)-d, taken = 0;
            for (i = g->n; i-- > 0 && want > 0;) {
                uint64_t *en = rls_mem_log_at(g, i), tk;
                if (en[0] < x->decided_at_ms)
                    break;
                if (en[0] > x->decided_at_ms)
                    continue;
                tk = en[1] < want ? en[1] : want;
                en[1] -= tk;
                want -= tk;
                taken += tk;
            }
            q->e->count -= (int64_t)taken;
            if (q->e->count < 0)
                q->e->count = 0;
        }
    }
    x->result = 1;
    return 0;
}

static int lease_op(rls_mem_stripe_t *m, rls_reserve_op_t *x)
{
    char key[RLS_MEM_OPKEY_MAX + 4];
    uint64_t h, now = x->now_ms, latest = 0;
    size_t klen = reserve_key(m, x, ":c", 2, key, &h);
    rls_mem_ent_t *e = rls_mem_find(m, key, klen, h);
    rls_mem_lease_t *g = e != NULL ? e->leases : NULL;
    int64_t at;
    uint32_t i;

    if (e != NULL && e->kind != RLS_MEM_LEASES)
        return RL_ESTORE; /* cannot be: no other key ends in ":c" */
    /* Leases that ended are gone. */
    pairs_prune(g, now);
    at = lease_find(g, x->id);
    if (x->kind == RLS_XOP_ACQUIRE) {
        uint64_t n = g != NULL ? g->n : 0;
        if (at < 0 && n >= x->limit) {
            x->earliest_ms = UINT64_MAX;
            for (i = 0; i < n; i++)
                if (g->e[2 * i + 1] < x->earliest_ms)
                    x->earliest_ms = g->e[2 * i + 1];
            if (n == 0)
                x->earliest_ms = 0;
        } else if (at < 0) {
            /* A new lease: room for it, and for the set when new. */
            size_t need = 0;
            uint32_t cap = g == NULL       ? RLS_MEM_LEASE_CAP_MIN
                           : g->n < g->cap ? g->cap
                                           : 2 * g->cap;
            if (g == NULL)
                need = rls_mem_ent_cost(klen) + rls_mem_lease_cost(cap);
            else if (cap != g->cap)
                need = rls_mem_lease_cost(cap) - rls_mem_lease_cost(g->cap);
            if (!rls_mem_fits(m, need, g == NULL))
                return RL_ENOMEM;
            if (g == NULL || cap != g->cap) {
                uint32_t old = g != NULL ? g->cap : 0;
                rls_mem_lease_t *ng =
                    realloc(g, sizeof(*ng) + (size_t)cap * 16);
                if (ng == NULL)
                    return RL_ENOMEM;
                if (g == NULL)
                    ng->n = 0;
                ng->cap = cap;
                g = ng;
                if (e != NULL) {
                    m->bytes +=
                        rls_mem_lease_cost(cap) - rls_mem_lease_cost(old);
                    e->leases = g;
                }
            }
            if (e == NULL) {
                if (rls_mem_create(m, key, klen, h,
                                   rls_mem_group_time(x->until_ms), &e) != 0) {
                    free(g);
                    return RL_ENOMEM;
                }
                m->bytes += rls_mem_lease_cost(cap);
                e->kind = RLS_MEM_LEASES;
                e->leases = g;
            }
            g->e[2 * g->n] = x->id;
            g->e[2 * g->n + 1] = x->until_ms;
            g->n++;
            x->result = 1;
        } else {
            g->e[2 * at + 1] = x->until_ms;
            x->result = 1;
        }
    } else if (x->kind == RLS_XOP_RELEASE && at >= 0) {
        g->n--;
        g->e[2 * at] = g->e[2 * g->n];
        g->e[2 * at + 1] = g->e[2 * g->n + 1];
        x->result = 1;
    } else if (x->kind == RLS_XOP_RENEW && at >= 0) {
        g->e[2 * at + 1] = x->until_ms;
        x->result = 1;
    }
    x->count = g != NULL ? g->n : 0;
    for (i = 0; g != NULL && i < g->n; i++)
        if (g->e[2 * i + 1] > latest)
            latest = g->e[2 * i + 1];
    if (e != NULL && latest > 0)
        rls_mem_ent_extend(e, rls_mem_group_time(latest));
    return 0;
}

int rls_mem_xop(rls_mem_stripe_t *m, rls_reserve_op_t *x)
{
    if (x->key_len > RLS_MEM_OPKEY_MAX || x->nwin > RL_ADMIT_WINDOWS_MAX ||
        x->delta > XOP_DELTA_MAX || x->delta < -XOP_DELTA_MAX)
        return RL_ESTORE;
    if (x->kind == RLS_XOP_SETTLE)
        return settle_reservation(m, x);
    return lease_op(m, x);
}

/* Leases of g alive at now (end after now). */
static uint64_t leases_alive(const rls_mem_lease_t *g, uint64_t now)
{
    uint64_t n = 0;
    uint32_t i;

    for (i = 0; i < g->n; i++)
        n += g->e[2 * i + 1] > now;
    return n;
}

/* Clears entry e: 1 when it held something. */
static int ent_clear(rls_mem_ent_t *e)
{
    int held;

    if (e->kind == RLS_MEM_LEASES) {
        held = e->leases->n > 0;
        e->leases->n = 0;
        return held;
    }
    if (e->kind != RLS_MEM_COUNTER)
        return 0; /* a settled set is no one's usage */
    held = e->count != 0 || (e->log != NULL && e->log->n > 0);
    e->count = 0;
    if (e->log != NULL) {
        e->log->n = 0;
        e->log->head = 0;
    }
    return held;
}

void rls_mem_usage(rls_mem_stripe_t *m, rls_usage_op_t *u)
{
    rls_mem_ent_t *e, *l = NULL;
    uint32_t i;

    u->leases = 0;
    u->cleared = 0;
    u->has_quota = 0;
    if (u->lkey != NULL &&
        (l = rls_mem_find(m, u->lkey, u->lkey_len,
                          rl_hash(&m->hk, u->lkey, u->lkey_len))) != NULL &&
        l->kind == RLS_MEM_LEASES)
        u->leases = leases_alive(l->leases, u->now_ms);
    if (!u->reset)
        return;
    for (i = 0; i < u->nkeys; i++)
        if ((e = rls_mem_find(m, u->keys[i], u->lens[i],
                              rl_hash(&m->hk, u->keys[i], u->lens[i]))) != NULL)
            u->cleared += (uint64_t)ent_clear(e);
    if (l != NULL)
        u->cleared += (uint64_t)ent_clear(l);
}
