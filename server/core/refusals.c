/* What this instance knows cannot be admitted; see refusals.h.
 *
 * The table holds pointers to entries, linear probing over at most PROBES
 * slots: a lookup looks no further, and an insert takes the first slot in
 * that run that is empty, holds the same key, or holds an entry that has
 * expired or belongs to an older epoch. Nothing is ever deleted; dead
 * entries are reused in place. So a lookup costs at most PROBES key
 * comparisons, memory is the table plus at most `max` entries, and a full
 * run drops the new entry (counted). */
#include "core/refusals.h"

#include <stdlib.h>
#include <string.h>

#include "rl_error.h"
#include "base/util.h"

#define PROBES 8

struct rls_refusal_s {
    uint64_t hash;
    uint64_t limit0;  /* with window0: an inline limit's, or 0 */
    uint32_t window0;
    uint64_t epoch;
    uint64_t expires_ms; /* the earliest window end, or the TTL */
    uint32_t n;
    uint32_t klen;
    uint32_t kcap;
    struct {
        uint64_t limit, count, end_ms;
        uint32_t window_s;
    } w[RLS_WINDOWS_MAX];
    char *key;
};

/* The table is of pointers; the slots array holds them. */
#define SLOT(c, i) (((rls_refusal_t **)(void *)(c)->slots)[i])

/* The table starts small and doubles as entries come, up to 2*max slots:
 * every request looks it up, and a table of 2*max slots read at random
 * misses the CPU's caches on every request, refusals or not (measured:
 * the first user-space symbol of rl-server at 50k/s open loop, with no
 * refusal at all). */
#define SLOTS_MIN 64

int rls_refusals_init(rls_refusals_t *c, size_t max)
{
    memset(c, 0, sizeof(*c));
    if (max == 0)
        return RL_OK;
    c->slots = calloc(SLOTS_MIN, sizeof(rls_refusal_t *));
    if (c->slots == NULL)
        return RL_ENOMEM;
    c->mask = SLOTS_MIN - 1;
    c->max = max;
    c->epoch = 1;
    return RL_OK;
}

/* Doubles the table when it is half full and may still grow. An entry
 * that finds no slot within PROBES of its place is dropped (it is only a
 * shortcut: its next refusal by the store learns it again). */
static void grow(rls_refusals_t *c)
{
    size_t slots = (size_t)c->mask + 1, i, j;
    rls_refusal_t **old = (rls_refusal_t **)(void *)c->slots, **nt;
    uint32_t mask;

    if (c->stats.entries * 2 < slots || slots >= 2 * c->max ||
        (nt = calloc(2 * slots, sizeof(*nt))) == NULL)
        return;
    mask = (uint32_t)(2 * slots - 1);
    for (i = 0; i < slots; i++) {
        rls_refusal_t *e = old[i];
        size_t pos;
        if (e == NULL)
            continue;
        for (j = 0, pos = (size_t)e->hash & mask; j < PROBES;
             j++, pos = (pos + 1) & mask)
            if (nt[pos] == NULL)
                break;
        if (j < PROBES) {
            nt[pos] = e;
        } else {
            free(e->key);
            free(e);
            c->stats.entries--;
        }
    }
    free(old);
    c->slots = (rls_refusal_t *)(void *)nt;
    c->mask = mask;
}

void rls_refusals_free(rls_refusals_t *c)
{
    uint32_t i;

    if (c->slots == NULL)
        return;
    for (i = 0; i <= c->mask; i++) {
        rls_refusal_t *e = SLOT(c, i);
        if (e != NULL) {
            free(e->key);
            free(e);
        }
    }
    free(c->slots);
    memset(c, 0, sizeof(*c));
}

void rls_refusals_invalidate(rls_refusals_t *c)
{
    c->epoch++;
}

static int live(const rls_refusals_t *c, const rls_refusal_t *e,
                uint64_t now_ms)
{
    return e->epoch == c->epoch && now_ms < e->expires_ms;
}

static uint64_t key_hash(uint64_t h, uint64_t limit)
{
    return h ^ (limit * UINT64_C(0xc2b2ae3d27d4eb4f));
}

static int same(const rls_refusal_t *e, uint64_t h, const char *key,
                size_t len, uint32_t window_s, uint64_t limit)
{
    return e->hash == h && e->klen == len && e->window0 == window_s &&
           e->limit0 == limit && memcmp(e->key, key, len) == 0;
}

const rls_refusal_t *rls_refusals_find(const rls_refusals_t *c, uint64_t h,
                                       const char *key, size_t len,
                                       uint32_t window_s, uint64_t limit)
{
    uint32_t i, pos;

    if (c->slots == NULL || c->stats.entries == 0)
        return NULL;
    h = key_hash(h, limit);
    for (i = 0, pos = (uint32_t)h & c->mask; i < PROBES;
         i++, pos = (pos + 1) & c->mask) {
        const rls_refusal_t *e = SLOT(c, pos);

        if (e == NULL)
            return NULL;
        if (same(e, h, key, len, window_s, limit))
            return e->epoch == c->epoch ? e : NULL;
    }
    return NULL;
}

int rls_refusals_refuse(rls_refusals_t *c, const rls_refusal_t *e,
                        uint64_t now_ms, uint64_t cost, rl_admit_win_t *w,
                        uint32_t *n)
{
    uint32_t j;

    if (!live(c, e, now_ms))
        return 0;
    for (j = 0; j < e->n; j++)
        rl_admit_fixed(&w[j], e->w[j].limit, e->w[j].window_s,
                       e->w[j].count > INT64_MAX ? INT64_MAX
                                                 : (int64_t)e->w[j].count,
                       e->w[j].end_ms - now_ms);
    *n = e->n;
    if (rl_admit_fits(w, e->n, cost))
        return 0; /* may fit: only the store can say */
    c->stats.hits++;
    return 1;
}

void rls_refusals_learn(rls_refusals_t *c, uint64_t h, const char *key,
                        size_t len, uint32_t window_s, uint64_t limit,
                        uint64_t now_ms, const rl_admit_win_t *w,
                        const uint64_t *end_ms, uint32_t n)
{
    rls_refusal_t *e = NULL;
    uint64_t exp = now_ms + RLS_REFUSAL_TTL_MS;
    uint32_t i, pos, take = UINT32_MAX;

    if (c->slots == NULL || n == 0 || n > RLS_WINDOWS_MAX || len > UINT32_MAX)
        return;
    grow(c);
    h = key_hash(h, limit);
    for (i = 0, pos = (uint32_t)h & c->mask; i < PROBES;
         i++, pos = (pos + 1) & c->mask) {
        rls_refusal_t *x = SLOT(c, pos);
        if (x == NULL || same(x, h, key, len, window_s, limit)) {
            take = pos;
            break;
        }
        if (take == UINT32_MAX && !live(c, x, now_ms))
            take = pos; /* reusable, unless the key is further on */
    }
    if (take == UINT32_MAX) {
        c->stats.full++;
        return;
    }
    e = SLOT(c, take);
    if (e == NULL) {
        if (c->stats.entries >= c->max) {
            c->stats.full++;
            return;
        }
        if ((e = calloc(1, sizeof(*e))) == NULL)
            return;
        SLOT(c, take) = e;
        c->stats.entries++;
    }
    if (e->kcap < len) {
        char *k = realloc(e->key, len);
        if (k == NULL) {
            e->epoch = 0; /* dead */
            return;
        }
        e->key = k;
        e->kcap = (uint32_t)len;
    }
    memcpy(e->key, key, len);
    e->klen = (uint32_t)len;
    e->hash = h;
    e->window0 = window_s;
    e->limit0 = limit;
    e->epoch = c->epoch;
    e->n = n;
    for (i = 0; i < n; i++) {
        e->w[i].limit = w[i].limit;
        e->w[i].count = w[i].count;
        e->w[i].window_s = w[i].window_s;
        e->w[i].end_ms = end_ms[i];
        if (end_ms[i] < exp)
            exp = end_ms[i];
    }
    e->expires_ms = exp;
    c->stats.inserts++;
}
