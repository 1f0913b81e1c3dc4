/* --fail-local: decisions in our own memory while the store is away, and
 * the charges that bring the store up to date after; see fail_local.h. */
#include "core/fail_local.h"

#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "rl_error.h"
#include "rl_hash.h"
#include "store/memory.h"
#include "base/util.h"

/* A limit no count reaches (2^62): a charge is always admitted. */
#define NO_LIMIT ((uint64_t)1 << 62)

struct rls_charge_s {
    rls_charge_t *next; /* in its table chain, or in a batch */
    rls_op_window_t w;  /* the limit as the op had it (index, expiry...) */
    uint64_t cost;      /* admitted locally, summed */
    uint64_t until_ms;  /* after this nothing reads the counter */
    size_t tag_len;
    size_t key_len;
    size_t wkey_len; /* key[] holds the op key, then the counter key */
    char key[];
};

/* One charge batch in flight: its ops and what they point to. */
typedef struct {
    rls_local_t *l;
    rls_store_t *store;
    rls_charge_t *list;
    size_t n;
    rls_op_t ops[RLS_LOCAL_CHARGE_BATCH];
    rls_op_window_t wins[RLS_LOCAL_CHARGE_BATCH];
    uint32_t costs[RLS_LOCAL_CHARGE_BATCH];
} charge_batch_t;

static void on_poll(uv_timer_t *t)
{
    rls_local_poll(t->data);
}

int rls_local_init(rls_local_t *l, uv_loop_t *loop, rls_store_t *store)
{
    memset(l, 0, sizeof(*l));
    l->store = store;
    uv_timer_init(loop, &l->poll);
    l->poll.data = l;
    l->poll_on = 1;
    uv_timer_start(&l->poll, on_poll, RLS_LOCAL_POLL_MS, RLS_LOCAL_POLL_MS);
    uv_unref((uv_handle_t *)&l->poll);
    /* Keys come from clients: a random key, so no client can aim its keys
     * at one chain. */
    rls_random_key(&l->hash_key);
    l->mem = rls_store_memory_new(loop);
    if (l->mem == NULL)
        return RL_ENOMEM;
    l->mask = 1023;
    l->table = calloc(l->mask + 1, sizeof(*l->table));
    if (l->table == NULL)
        return RL_ENOMEM;
    return RL_OK;
}

static void on_local_done(void *data, rls_op_t *ops, size_t n, int status)
{
    (void)data;
    (void)ops;
    (void)n;
    (void)status;
}

int rls_local_decide(rls_local_t *l, rls_op_t *op)
{
    uint64_t n;
    uint32_t j;

    /* The share's count never falls while decisions are local: a Redis
     * back empty has lost "<prefix>instances" too, and counts only those
     * that reported since (a share of the whole limit to the first). */
    if (l->hold_live < (l->live > 0 ? l->live : 1))
        l->hold_live = l->live > 0 ? l->live : 1;
    n = l->hold_live;

    for (j = 0; j < op->nwin; j++) {
        rls_op_window_t *w = &op->win[j];
        w->limit = w->limit / n > 0 ? w->limit / n : 1;
        /* Envoy's counting: the answers' limit is shared alike. */
        if (w->answer_limit != 0)
            w->answer_limit =
                w->answer_limit / n > 0 ? w->answer_limit / n : 1;
        if (w->algo == RL_ALGO_GCRA)
            w->t_us = w->t_us <= UINT64_MAX / n ? w->t_us * n : UINT64_MAX;
    }
    /* Stored quotas live in the store that is away. */
    op->quota = NULL;
    op->quota_win = NULL;
    op->nquota_win = 0;
    op->err = 0;
    op->admitted = 0;
    /* The memory store answers before it returns. */
    l->mem->v->submit(l->mem, op, 1, on_local_done, NULL);
    if (op->err != 0)
        l->stats.failed++;
    else
        l->stats.ops++;
    return op->err;
}

/* Until when a charge to limit w, decided at now_ms, still matters. */
static uint64_t until_of(const rls_op_window_t *w, uint64_t now_ms)
{
    uint64_t W = (uint64_t)w->window_s * 1000;

    switch (w->algo) {
    case RL_ALGO_FIXED:
        return now_ms + w->reset_ms;
    case RL_ALGO_SLIDING_COUNTER: /* the previous window's counter, one window
                                     more */
        return now_ms + w->reset_ms + W;
    case RL_ALGO_SLIDING_LOG:
        return now_ms + W;
    default: /* gcra: its TAT may lie well ahead; always charged */
        return UINT64_MAX;
    }
}

static int grow(rls_local_t *l)
{
    size_t nb = (l->mask + 1) * 2, i;
    rls_charge_t **t = calloc(nb, sizeof(*t));

    if (t == NULL)
        return RL_ENOMEM;
    for (i = 0; i <= l->mask; i++) {
        rls_charge_t *c = l->table[i], *next;
        for (; c != NULL; c = next) {
            next = c->next;
            uint64_t h =
                rl_hash(&l->hash_key, c->key + c->key_len + 1, c->wkey_len);
            c->next = t[h & (nb - 1)];
            t[h & (nb - 1)] = c;
        }
    }
    free(l->table);
    l->table = t;
    l->mask = nb - 1;
    return RL_OK;
}

/* Adds a charge (or its cost to the same counter's). */
static void add(rls_local_t *l, const rls_op_t *op, const rls_op_window_t *w,
                uint64_t cost, uint64_t until_ms)
{
    char wkey[RLS_OPKEY_MAX + 40];
    size_t wl = rls_wkey(op, w, RLS_WKEY_CUR, wkey);
    uint64_t h = rl_hash(&l->hash_key, wkey, wl);
    rls_charge_t *c;

    for (c = l->table[h & l->mask]; c != NULL; c = c->next)
        if (c->wkey_len == wl && memcmp(c->key + c->key_len + 1, wkey, wl) == 0)
            break;
    if (c != NULL) {
        c->cost = c->cost + cost < c->cost ? UINT64_MAX : c->cost + cost;
        if (until_ms > c->until_ms)
            c->until_ms = until_ms;
        /* The latest window's expiry, as the store would set it. */
        if (w->expire_at_ms > c->w.expire_at_ms)
            c->w.expire_at_ms = w->expire_at_ms;
        return;
    }
    if (l->n >= RLS_LOCAL_CHARGES_MAX ||
        (l->n >= l->mask + 1 && grow(l) != RL_OK) ||
        (c = malloc(sizeof(*c) + op->key_len + 1 + wl + 1)) == NULL) {
        if (l->stats.dropped++ == 0)
            RLS_WARN("fail-local: charges over the cap are dropped (their "
                     "windows will under-count what was admitted locally)",
                     " cap=%d", RLS_LOCAL_CHARGES_MAX);
        return;
    }
    c->w = *w;
    c->cost = cost;
    c->until_ms = until_ms;
    c->tag_len = op->tag_len;
    c->key_len = op->key_len;
    c->wkey_len = wl;
    memcpy(c->key, op->key, op->key_len + 1);
    memcpy(c->key + op->key_len + 1, wkey, wl + 1);
    h &= l->mask;
    c->next = l->table[h];
    l->table[h] = c;
    l->n++;
}

void rls_local_charge(rls_local_t *l, const rls_op_t *op, uint64_t cost,
                      uint64_t now_ms)
{
    uint32_t j;

    if (cost == 0)
        return;
    for (j = 0; j < op->nwin; j++)
        add(l, op, &op->win[j], cost, until_of(&op->win[j], now_ms));
}

static void on_charged(void *data, rls_op_t *ops, size_t n, int status)
{
    charge_batch_t *b = data;
    rls_local_t *l = b->l;
    rls_charge_t *c = b->list, *next;
    size_t i = 0;

    (void)n;
    l->sending -= b->n;
    if (status != 0) {
        l->stats.charge_errors++;
        l->retry_at_ms = b->store->v->now_ms(b->store) + RLS_LOCAL_RETRY_MS;
    }
    for (; c != NULL; c = next, i++) {
        next = c->next;
        if (status == 0 && ops[i].err == 0) {
            l->stats.charged++;
            free(c);
            continue;
        }
        if (status == 0) {
            /* The store answered and refused this one charge (a key that
             * holds something else): kept, it would be refused forever
             * and hold the batcher in local mode; dropped, counted. */
            if (l->stats.rejected++ == 0)
                RLS_WARN("fail-local: the store refused a charge (dropped)",
                         " key=\"%s\"", c->key);
            free(c);
            continue;
        }
        /* Kept for the next try, merged with any charge made since. */
        rls_op_t op = ops[i];
        op.key = c->key;
        add(l, &op, &c->w, c->cost, c->until_ms);
        free(c);
    }
    if (l->n == 0 && l->sending == 0 && status == 0 && l->stats.charged > 0)
        RLS_INFO("fail-local: the store has every local admission",
                 " charged=%llu", (unsigned long long)l->stats.charged);
    free(b);
}

/* Takes up to one batch of charges whose windows still matter out of the
 * table, scanning from *at; NULL when none is left (or out of memory). */
static charge_batch_t *take_batch(rls_local_t *l, rls_store_t *store,
                                  uint64_t now, size_t *at)
{
    charge_batch_t *b = calloc(1, sizeof(*b));
    size_t i;

    if (b == NULL)
        return NULL;
    b->l = l;
    b->store = store;
    while (*at <= l->mask && b->n < RLS_LOCAL_CHARGE_BATCH) {
        rls_charge_t *c = l->table[*at];
        if (c == NULL) {
            (*at)++;
            continue;
        }
        l->table[*at] = c->next;
        l->n--;
        if (c->until_ms <= now) {
            l->stats.ended++;
            free(c);
            continue;
        }
        rls_op_t *op = &b->ops[b->n];
        rls_op_window_t *w = &b->wins[b->n];
        *w = c->w;
        w->limit = NO_LIMIT;
        if (w->algo == RL_ALGO_GCRA)
            w->limit = NO_LIMIT / (w->t_us > 0 ? w->t_us : 1);
        b->costs[b->n] = c->cost > UINT32_MAX ? UINT32_MAX : (uint32_t)c->cost;
        op->key = c->key;
        op->key_len = c->key_len;
        op->tag_len = c->tag_len;
        op->now_ms = now;
        op->win = w;
        op->nwin = 1;
        op->costs = &b->costs[b->n];
        op->ncosts = 1;
        op->equal_cost = b->costs[b->n];
        c->next = b->list;
        b->list = c;
        b->n++;
    }
    if (b->n == 0) {
        free(b);
        return NULL;
    }
    /* The list is newest first: put the ops in the same order. */
    for (i = 0; i < b->n / 2; i++) {
        rls_op_t t = b->ops[i];
        b->ops[i] = b->ops[b->n - 1 - i];
        b->ops[b->n - 1 - i] = t;
    }
    return b;
}

void rls_local_flush(rls_local_t *l, rls_store_t *store)
{
    uint64_t now = store->v->now_ms(store), errors = l->stats.charge_errors;
    size_t at = 0;
    charge_batch_t *b;

    if (l->n == 0 || now < l->retry_at_ms || !store->v->up(store))
        return;
    /* Every pending charge, in as many batches as it takes: a batch
     * submitted after them goes to the store after them (one connection
     * per node, answered in order), so the store decides it with every
     * local admission counted. A batch that fails at once ends the pass
     * (its charges are back in the table, to be retried later). */
    while (l->stats.charge_errors == errors &&
           (b = take_batch(l, store, now, &at)) != NULL) {
        l->sending += b->n;
        store->v->submit(store, b->ops, b->n, on_charged, b);
    }
}

void rls_local_poll(rls_local_t *l)
{
    rls_store_t *st = l->store;

    if (st == NULL)
        return;
    if (!st->v->up(st)) {
        l->was_down = 1;
        return;
    }
    if (!rls_local_holds(l, st->v->now_ms(st)))
        l->hold_live = 0;
    if (l->n > 0)
        rls_local_flush(l, st);
    if (l->was_down && l->n == 0 && l->sending == 0) {
        l->was_down = 0;
        l->settle_until_ms = st->v->now_ms(st) + RLS_LOCAL_SETTLE_MS;
        RLS_INFO("fail-local: the store is back with this instance's "
                 "charges; deciding locally a little longer while the "
                 "fleet's come in",
                 " settle_ms=%d", RLS_LOCAL_SETTLE_MS);
    }
}

int rls_local_holds(const rls_local_t *l, uint64_t now_ms)
{
    return l->was_down || l->n > 0 || l->sending > 0 ||
           now_ms < l->settle_until_ms;
}

void rls_local_store_failed(rls_local_t *l)
{
    l->was_down = 1;
}

static void close_mem(rls_local_t *l)
{
    void (*done)(void *) = l->closed;
    void *arg = l->closed_arg;

    if (l->mem != NULL) {
        rls_store_t *mem = l->mem;
        l->mem = NULL;
        mem->v->close(mem, done, arg);
    } else if (done != NULL) {
        done(arg);
    }
}

static void on_poll_closed(uv_handle_t *h)
{
    close_mem(h->data);
}

void rls_local_close(rls_local_t *l, void (*done)(void *), void *arg)
{
    size_t i;

    for (i = 0; l->table != NULL && i <= l->mask; i++) {
        rls_charge_t *c = l->table[i], *next;
        for (; c != NULL; c = next) {
            next = c->next;
            free(c);
        }
    }
    free(l->table);
    l->table = NULL;
    l->n = 0;
    l->closed = done;
    l->closed_arg = arg;
    if (l->poll_on) {
        l->poll_on = 0;
        uv_close((uv_handle_t *)&l->poll, on_poll_closed);
    } else {
        close_mem(l);
    }
}
