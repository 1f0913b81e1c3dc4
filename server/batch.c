#include "batch.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rl_check.h"
#include "rl_error.h"
#include "rl_window.h"
#include "util.h"

/* Spare batches kept for reuse. Steady load keeps a few in flight; more
 * are made during a store stall and freed as they come back. */
#define SPARE_MAX 8

/* One queued request. */
typedef struct {
    void *owner;
    uint64_t id;
    uint64_t limit;
    uint32_t cost;
    uint32_t window_s;
    uint32_t op; /* index of its store op */
} req_t;

/* A slot of the per-batch key index: which op holds a key. Slots from an
 * earlier batch are told apart by their generation, so the index is never
 * cleared between batches. */
typedef struct {
    uint32_t gen;
    uint32_t op;
} slot_t;

/* What one window size works out to for a batch's clock reading. A
 * batch nearly always holds one window size, so this is computed once per
 * batch instead of two 64-bit divisions and two decimal conversions per
 * request. */
typedef struct {
    uint32_t window_s;     /* 0: not computed yet */
    uint64_t index;        /* window index at the batch's now_ms */
    uint64_t expire_at_ms; /* window end + grace */
    uint64_t mix;          /* folded into key hashes: index and size */
    size_t suffix_len;
    char suffix[40]; /* ":<window_s>:<index>", as rl_key_format writes it */
} win_t;

struct rls_batch_s {
    rls_batcher_t *owner;
    rls_batch_t *next; /* in the free list */
    uint64_t now_ms;   /* one clock reading for the whole batch */
    win_t win;         /* the last window size seen */

    req_t *reqs;
    size_t nreqs;
    rls_op_t *ops;
    size_t nops;
    uint64_t *hash;  /* per op */
    size_t *key_off; /* per op: offset of its key in `keys` */
    int64_t *run;    /* per op: running count while deciding */
    rl_buf_t keys;   /* formatted store keys, NUL-terminated */

    slot_t *index;
    uint32_t mask;
    uint32_t gen;
};

void rls_batcher_init(rls_batcher_t *b, rls_store_t *store,
                      rls_respond_fn respond, const char *prefix,
                      size_t prefix_len, size_t max_reqs, uint64_t grace_ms,
                      int fail_open)
{
    memset(b, 0, sizeof(*b));
    b->store = store;
    b->respond = respond;
    b->prefix = prefix;
    b->prefix_len = prefix_len;
    b->max_reqs = max_reqs;
    b->grace_ms = grace_ms;
    b->fail_open = fail_open;
    rls_random_key(&b->hash_key);
    b->rng = b->hash_key.k0 | 1;
    rls_hist_init(&b->stats.size, rls_batch_bounds,
                  sizeof(rls_batch_bounds) / sizeof(rls_batch_bounds[0]));
}

static void batch_destroy(rls_batch_t *t)
{
    free(t->reqs);
    free(t->ops);
    free(t->hash);
    free(t->key_off);
    free(t->run);
    free(t->index);
    rl_buf_free(&t->keys);
    free(t);
}

static rls_batch_t *batch_new(rls_batcher_t *b)
{
    rls_batch_t *t = calloc(1, sizeof(*t));
    size_t n = b->max_reqs, slots = 1;

    if (t == NULL)
        return NULL;
    /* A table at most half full keeps probe chains short. */
    while (slots < 2 * n)
        slots <<= 1;
    t->owner = b;
    t->reqs = malloc(n * sizeof(*t->reqs));
    t->ops = malloc(n * sizeof(*t->ops));
    t->hash = malloc(n * sizeof(*t->hash));
    t->key_off = malloc(n * sizeof(*t->key_off));
    t->run = malloc(n * sizeof(*t->run));
    t->index = calloc(slots, sizeof(*t->index));
    t->mask = (uint32_t)(slots - 1);
    rl_buf_init(&t->keys, n * RL_KEY_SIZE(b->prefix_len, RL_KEY_MAX));
    if (!t->reqs || !t->ops || !t->hash || !t->key_off || !t->run ||
        !t->index) {
        batch_destroy(t);
        return NULL;
    }
    return t;
}

/* Takes a spare batch, or makes one, and starts it. */
static rls_batch_t *batch_start(rls_batcher_t *b)
{
    rls_batch_t *t = b->free;

    if (t != NULL) {
        b->free = t->next;
        b->nfree--;
    } else if ((t = batch_new(b)) == NULL) {
        return NULL;
    }
    t->nreqs = 0;
    t->nops = 0;
    t->win.window_s = 0;
    rl_buf_reset(&t->keys);
    /* Generation 0 marks never-used slots; skip it on wrap-around. */
    if (++t->gen == 0) {
        memset(t->index, 0, ((size_t)t->mask + 1) * sizeof(*t->index));
        t->gen = 1;
    }
    t->now_ms = b->store->v->now_ms(b->store);
    return t;
}

/* Why a request was not counted, as sent back in `error`. */
static const char *failure_text(int err, int fail_open, char *buf, size_t len)
{
    const char *verdict =
        fail_open ? "allowed by fail-open" : "refused by fail-closed";

    if (err == RL_ESTORE)
        snprintf(buf, len, "store unavailable; %s", verdict);
    else
        snprintf(buf, len, "store unavailable (%s); %s", rl_strerror(err),
                 verdict);
    return buf;
}

static void on_store_done(void *data, rls_op_t *ops, size_t nops, int status)
{
    rls_batch_t *t = data;
    rls_batcher_t *b = t->owner;
    char text[160];
    uint32_t reset_w = 0;
    uint64_t reset_ms = 0;
    size_t i;

    assert(ops == t->ops && nops == t->nops);
    for (i = 0; i < nops; i++) {
        if (status != 0 && ops[i].err == 0)
            ops[i].err = status;
        /* The count before the batch. A store reply can claim any count
         * (Redis's parses to as low as -INT64_MAX); one below what the
         * increment allows saturates instead of overflowing, and decides
         * as 0 like any negative counter. */
        if (ops[i].count < INT64_MIN + (int64_t)ops[i].incr)
            t->run[i] = INT64_MIN;
        else
            t->run[i] = ops[i].count - (int64_t)ops[i].incr;
    }

    for (i = 0; i < t->nreqs; i++) {
        const req_t *q = &t->reqs[i];
        rls_op_t *op = &ops[q->op];
        rl_result_t r;

        /* One division per window size and batch, not per request. */
        if (q->window_s != reset_w) {
            reset_w = q->window_s;
            reset_ms = rl_window_reset_after_ms(t->now_ms, reset_w);
        }
        memset(&r, 0, sizeof(r));
        r.id = q->id;
        if (op->err != 0) {
            r.error = failure_text(op->err, b->fail_open, text, sizeof(text));
            r.error_len = strlen(r.error);
            r.limit = q->limit;
            b->stats.store_errors++;
            if (b->fail_open) {
                /* Allowed, and nothing was counted. */
                r.code = RL_CODE_OK;
                r.remaining = q->limit;
                r.reset_after_ms = reset_ms;
                b->stats.failed_open++;
            } else {
                r.code = RL_CODE_ERROR;
            }
        } else {
            t->run[q->op] += q->cost;
            /* A counter someone else decremented below zero counts as 0. */
            rl_decide_reset(t->run[q->op] > 0 ? (uint64_t)t->run[q->op] : 0,
                            q->limit, reset_ms, &r);
        }
        b->respond(q->owner, &r);
    }

    b->in_flight--;
    /* Spares are kept for reuse, but only so many: a Redis stall piles up
     * batches in flight, and a pool that kept them all would hold its
     * high-water mark (up to ~130 KB a batch) for the process's life, so
     * RSS would creep up with every spike. */
    if (b->nfree >= SPARE_MAX) {
        batch_destroy(t);
        return;
    }
    t->next = b->free;
    b->free = t;
    b->nfree++;
}

static void submit(rls_batcher_t *b)
{
    rls_batch_t *t = b->cur;
    size_t i;

    b->cur = NULL;
    /* The key arena may have moved while it grew: point ops at it now. */
    for (i = 0; i < t->nops; i++) {
        t->ops[i].key = (const char *)t->keys.data + t->key_off[i];
        t->ops[i].count = 0;
        t->ops[i].err = 0;
    }
    b->stats.batches++;
    rls_hist_observe(&b->stats.size, t->nreqs);
    b->in_flight++;
    /* May call on_store_done before returning. */
    b->store->v->submit(b->store, t->ops, t->nops, on_store_done, t);
}

/* Works out window_s for the batch's clock reading (see win_t). */
static void win_set(rls_batch_t *t, rls_batcher_t *b, uint32_t window_s)
{
    win_t *w = &t->win;
    char tmp[48];
    int n;

    w->window_s = window_s;
    w->index = rl_window_index(t->now_ms, window_s);
    w->expire_at_ms = rl_window_end_ms(w->index, window_s) + b->grace_ms;
    /* Every key of a window would otherwise carry the same expiry, and
     * Redis would delete a whole window's keys at once: its expire cycle
     * then holds the event loop for up to 25 ms at a time, and every
     * decision waits. A random extra per batch spreads the expiries, since
     * a window's keys are created in many batches. */
    if (b->spread_ms > 0) {
        uint64_t cap = (uint64_t)window_s * 250, span;
        span = b->spread_ms < cap ? b->spread_ms : cap;
        b->rng ^= b->rng << 13;
        b->rng ^= b->rng >> 7;
        b->rng ^= b->rng << 17;
        w->expire_at_ms += b->rng % (span + 1);
    }
    w->mix = (w->index * UINT64_C(0x9e3779b97f4a7c15)) ^
             ((uint64_t)window_s * UINT64_C(0xc2b2ae3d27d4eb4f));
    /* rl_key_format itself writes the suffix, so the keys built from it
     * are byte for byte the ones it would build. */
    n = rl_key_format(tmp, sizeof(tmp), "", 0, "", 0, window_s, w->index);
    assert(n > 2 && (size_t)n - 2 < sizeof(w->suffix));
    w->suffix_len = (size_t)n - 2; /* drop the empty "{}" */
    memcpy(w->suffix, tmp + 2, w->suffix_len);
}

int rls_batcher_add(rls_batcher_t *b, void *owner, uint64_t id, const char *key,
                    size_t key_len, uint32_t cost, uint64_t limit,
                    uint32_t window_s)
{
    rls_batch_t *t = b->cur;
    uint8_t *w, *p;
    uint64_t h;
    uint32_t pos, op;
    size_t n;

    if (t == NULL && (t = b->cur = batch_start(b)) == NULL)
        return RL_ENOMEM;
    if (window_s != t->win.window_s)
        win_set(t, b, window_s);

    /* The store key "<prefix>{<key>}:<window_s>:<index>", NUL-terminated,
     * as rl_key_format would write it (RL_KEY_SIZE bounds it). */
    if (rl_buf_reserve(&t->keys, RL_KEY_SIZE(b->prefix_len, key_len), &w) !=
        RL_OK)
        return RL_ENOMEM;
    p = w;
    memcpy(p, b->prefix, b->prefix_len);
    p += b->prefix_len;
    *p++ = '{';
    memcpy(p, key, key_len);
    p += key_len;
    *p++ = '}';
    memcpy(p, t->win.suffix, t->win.suffix_len);
    p += t->win.suffix_len;
    *p = '\0';
    n = (size_t)(p - w);
    /* Keys of one batch differ only in the caller's key and the window:
     * hash those, not the constant prefix and the digits. Keyed SipHash
     * still decides the slot, so clients cannot aim keys at one chain. */
    h = rl_hash(&b->hash_key, key, key_len) ^ t->win.mix;

    /* Find the op for this key, or make one. */
    for (pos = (uint32_t)h & t->mask;; pos = (pos + 1) & t->mask) {
        slot_t *s = &t->index[pos];
        if (s->gen != t->gen) {
            op = (uint32_t)t->nops++;
            s->gen = t->gen;
            s->op = op;
            t->hash[op] = h;
            t->key_off[op] = (size_t)(w - t->keys.data);
            t->ops[op].key_len = n;
            t->ops[op].incr = 0;
            t->ops[op].expire_at_ms = t->win.expire_at_ms;
            rl_buf_commit(&t->keys, n + 1);
            break;
        }
        op = s->op;
        if (t->hash[op] == h && t->ops[op].key_len == n &&
            memcmp(t->keys.data + t->key_off[op], w, n) == 0) {
            b->stats.coalesced++;
            break;
        }
    }
    t->ops[op].incr += cost;

    t->reqs[t->nreqs++] = (req_t){owner, id, limit, cost, window_s, op};
    b->stats.requests++;
    if (t->nreqs == b->max_reqs)
        submit(b);
    return RL_OK;
}

void rls_batcher_flush(rls_batcher_t *b)
{
    if (b->cur != NULL && b->cur->nreqs > 0)
        submit(b);
}

void rls_batcher_free(rls_batcher_t *b)
{
    rls_batch_t *t;

    assert(b->in_flight == 0);
    if (b->cur != NULL) {
        assert(b->cur->nreqs == 0);
        b->cur->next = b->free;
        b->free = b->cur;
        b->cur = NULL;
    }
    while ((t = b->free) != NULL) {
        b->free = t->next;
        b->nfree = 0;
        batch_destroy(t);
    }
}
