#include "core/batch.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "rl_admit.h"
#include "rl_validate.h"
#include "rl_error.h"
#include "rl_window.h"
#include "base/util.h"

/* Spare batches kept for reuse. Steady load keeps a few in flight; more
 * are made during a store stall and freed as they come back. */
#define SPARE_MAX 8

/* Window sizes whose index and expiry a batch keeps worked out. */
#define WCACHE 16

/* One queued request. */
typedef struct {
    rls_respond_fn respond;
    void *owner;
    uint64_t id;
    rls_rule_stats_t *stats;
    uint32_t cost;
    uint32_t op; /* index of its store op */
    uint8_t mode;
    uint8_t rule; /* a rule's, not an inline limit */
} req_t;

/* A slot of the per-batch key index: which op holds a key. Slots from an
 * earlier batch are told apart by their generation, so the index is never
 * cleared between batches. */
typedef struct {
    uint32_t gen;
    uint32_t op;
} slot_t;

/* What one window size works out to for a batch's clock reading, computed
 * once per batch and size instead of per request. */
typedef struct {
    uint32_t window_s;
    uint64_t index;        /* window index at the batch's now_ms */
    uint64_t expire_at_ms; /* window end + grace (+ spread) */
    uint64_t reset_ms;     /* until the window ends */
} win_t;

/* Per op, beside rls_op_t: what coalescing compares. */
typedef struct {
    uint64_t hash;
    size_t key_off; /* of its key in `keys` */
    size_t win_off; /* of its windows in `wins` */
    uint32_t first; /* its first request, to compare specs */
    uint32_t nreqs;
    uint64_t limit0; /* inline: the limit, which must match, */
    uint64_t burst0; /* and its burst */
    uint8_t algo0;   /* and algorithm */
    uint8_t charge0; /* a charge's op (decide.h) takes no checks */
    uint8_t counting0; /* RLS_COUNT_*: one way of counting per op */
    int32_t group;     /* a group's op: its index in `groups`; else -1 */
} op_match_t;

/* A group's op (rls_batcher_add_group), beside its op_match_t: where each
 * level's op key is in `keys` (the stores' window bases are pointed at
 * them at submit), its windows [first[l], first[l + 1]) in the op, and
 * whose counters count its decisions. */
typedef struct {
    uint32_t n;
    size_t key_off[RLS_GROUP_MAX];
    size_t tag_len[RLS_GROUP_MAX]; /* its op key's "<prefix>{<caller>}" */
    uint8_t first[RLS_GROUP_MAX + 1];
    rls_rule_stats_t *stats[RLS_GROUP_MAX];
    uint32_t index[RLS_GROUP_MAX]; /* the answer's level is this + 1 */
} group_t;

struct rls_batch_s {
    rls_batcher_t *owner;
    rls_batch_t *next;    /* in the free list */
    rls_policy_t *policy; /* held while the batch is in flight */
    uint64_t now_ms;      /* one clock reading for the whole batch */
    win_t wc[WCACHE];
    uint32_t nwc;

    req_t *reqs;
    size_t nreqs;
    rls_op_t *ops;
    op_match_t *match;
    size_t nops;
    rl_buf_t keys;   /* op keys, NUL-terminated */
    rl_buf_t wins;   /* rls_op_window_t, per op */
    rl_buf_t groups; /* group_t, per group op */
    uint32_t *costs; /* per request, grouped by op at submit */

    slot_t *index;
    uint32_t mask;
    uint32_t gen;

    /* Replay scratch, per op: its windows as they advance, their counts
     * before the batch, how many windows, how many admitted. Grown to the
     * largest batch seen, then reused. */
    rl_admit_win_t *run;
    int64_t *before;
    uint32_t *nrun, *admitted;
    size_t scratch_ops;
    uint8_t *done;   /* per op: an op_state_t */
    uint64_t *lcost; /* per op decided locally: the cost it admitted */
};

/* Where an op of a batch stands (rls_batch_t.done). */
typedef enum {
    OP_WAITING = 0, /* not decided yet */
    OP_ANSWERING,   /* being answered now (replay) */
    OP_ANSWERED,    /* answered (perhaps by a part the store reported
                       early, see rls_store_part_cb) */
    OP_LOCAL        /* being answered now, decided locally (--fail-local) */
} op_state_t;

/* 1 while the op's requests are being answered now. */
static inline int answering(uint8_t d)
{
    return d == OP_ANSWERING || d == OP_LOCAL;
}

static void on_store_part(void *data, rls_op_t *ops, const uint32_t *idx,
                          size_t k);

int rls_refusal_answer(rl_result_t *r, int mode, rls_rule_stats_t *st)
{
    if (mode == RLS_MODE_SHADOW) {
        r->code = RL_CODE_OK;
        r->retry_after_ms = 0;
        r->shadow_refused = 1;
        if (st != NULL)
            st->shadow_refused++;
        return 1;
    }
    if (st != NULL)
        st->refused++;
    return 0;
}

void rls_batcher_init(rls_batcher_t *b, rls_store_t *store, rls_runtime_t *rt,
                      const char *prefix, size_t prefix_len, size_t max_reqs,
                      uint64_t grace_ms, int fail_open)
{
    memset(b, 0, sizeof(*b));
    b->hold_joined = RLS_HOLD_GAIN; /* holds pay until seen otherwise */
    b->store = store;
    store->part = on_store_part;
    b->rt = rt;
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
    free(t->match);
    free(t->costs);
    free(t->index);
    free(t->run);
    free(t->before);
    free(t->nrun);
    free(t->admitted);
    free(t->done);
    free(t->lcost);
    rl_buf_free(&t->keys);
    rl_buf_free(&t->wins);
    rl_buf_free(&t->groups);
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
    t->match = malloc(n * sizeof(*t->match));
    t->costs = malloc(n * sizeof(*t->costs));
    t->done = malloc(n);
    t->lcost = malloc(n * sizeof(*t->lcost));
    t->index = calloc(slots, sizeof(*t->index));
    t->mask = (uint32_t)(slots - 1);
    /* Keys: prefix, braces, caller, ":r:" and a rule name at most. */
    rl_buf_init(&t->keys, n * (b->prefix_len + RL_KEY_MAX + RL_RULE_MAX + 8));
    rl_buf_init(&t->wins, n * RLS_WINDOWS_MAX * sizeof(rls_op_window_t));
    rl_buf_init(&t->groups, n * sizeof(group_t));
    if (!t->reqs || !t->ops || !t->match || !t->costs || !t->index ||
        !t->done || !t->lcost) {
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
    t->nwc = 0;
    rl_buf_reset(&t->keys);
    rl_buf_reset(&t->wins);
    rl_buf_reset(&t->groups);
    /* Generation 0 marks never-used slots; skip it on wrap-around. */
    if (++t->gen == 0) {
        memset(t->index, 0, ((size_t)t->mask + 1) * sizeof(*t->index));
        t->gen = 1;
    }
    t->now_ms = b->store->v->now_ms(b->store);
    t->policy = b->rt != NULL ? rls_policy_ref(b->rt->policy) : NULL;
    return t;
}

static void batch_recycle(rls_batcher_t *b, rls_batch_t *t)
{
    rls_policy_unref(t->policy);
    t->policy = NULL;
    /* Spares are kept for reuse, but only so many: a Redis stall piles up
     * batches in flight, and a pool that kept them all would hold its
     * high-water mark for the process's life, so RSS would creep up with
     * every spike. */
    if (b->nfree >= SPARE_MAX) {
        batch_destroy(t);
        return;
    }
    t->next = b->free;
    b->free = t;
    b->nfree++;
}

/* Why a request was not counted, as sent back in `error`. */
static const char *failure_text(int err, int fail_open, char *buf, size_t len)
{
    if (fail_open == RLS_FAIL_LOCAL) {
        /* Not a failure to the client: a decision, on a share. */
        snprintf(buf, len,
                 "store unavailable; decided by this instance "
                 "alone, on its share of the limit");
        return buf;
    }
    const char *verdict =
        fail_open ? "allowed by fail-open" : "refused by fail-closed";

    if (err == RL_ESTORE)
        snprintf(buf, len, "store unavailable; %s", verdict);
    else
        snprintf(buf, len, "store unavailable (%s); %s", rl_strerror(err),
                 verdict);
    return buf;
}

static void share_add(rls_batcher_t *b, uint64_t decided, uint64_t failed)
{
    uint64_t sec = uv_hrtime() / 1000000000;
    rls_share_t *sh = &b->share[sec % RLS_SHARE_S];

    if (sh->sec != sec) {
        sh->sec = sec;
        sh->decided = sh->failed = 0;
    }
    sh->decided += decided;
    sh->failed += failed;
}

void rls_batcher_share(const rls_batcher_t *b, uint64_t now_s,
                       uint64_t *decided, uint64_t *failed)
{
    size_t i;

    *decided = *failed = 0;
    for (i = 0; i < RLS_SHARE_S; i++) {
        const rls_share_t *sh = &b->share[i];

        if (sh->sec + RLS_SHARE_S > now_s && sh->sec <= now_s) {
            *decided += sh->decided;
            *failed += sh->failed;
        }
    }
}

/* Quota fit: the windows this op started (first consumption) and those
 * whose consumption crossed 50 %, 80 % or 100 % of the limit in this batch.
 * One atomic store step moved each counter from `before` to `after`, so
 * across the fleet exactly one batch sees each start and each crossing. */
static void fit_count(rls_rule_stats_t *st, const rl_admit_win_t *w,
                      const int64_t *before, uint32_t n)
{
    static const uint64_t pct[3] = {50, 80, 100};
    uint32_t i, j, k;

    for (i = 0; i < n; i++) {
        uint64_t b0 = before[i] > 0 ? (uint64_t)before[i] : 0, a = w[i].count;
        rls_win_stats_t *ws = NULL;

        /* Crossings are counted for fixed windows: a sliding or gcra
         * allowance has no start to count. */
        if (a == b0 || w[i].algo != RL_ALGO_FIXED)
            continue;
        for (j = 0; j < st->nwin; j++)
            if (st->win[j].window_s == w[i].window_s)
                ws = &st->win[j];
        if (ws == NULL) {
            if (st->nwin < RLS_STATS_WINDOWS) {
                ws = &st->win[st->nwin++];
                ws->window_s = w[i].window_s;
            } else {
                ws = &st->win[RLS_STATS_WINDOWS]; /* "other" */
            }
        }
        if (b0 == 0)
            ws->started++;
        for (k = 0; k < 3; k++) {
            /* threshold t = ceil(limit * pct / 100), at least 1 */
            uint64_t L = w[i].limit;
            uint64_t t = L / 100 * pct[k] + (L % 100 * pct[k] + 99) / 100;
            if (t == 0)
                t = 1;
            if (b0 < t && a >= t)
                ws->reached[k]++;
        }
    }
}

/* The limit a window's answers compare with (rls_op_window_t.answer_limit). */
static uint64_t window_limit(const rls_op_window_t *w)
{
    return w->answer_limit != 0 ? w->answer_limit : w->limit;
}

/* Answers an op whose store step failed, per the fail mode. */
static void answer_failed(rls_batcher_t *b, rls_batch_t *t, rls_op_t *op,
                          const req_t *q, char *text, size_t tlen)
{
    const rls_op_window_t *w = &op->win[0];
    rl_result_t r;
    uint32_t i;

    for (i = 1; i < op->nwin; i++)
        if (window_limit(&op->win[i]) < window_limit(w))
            w = &op->win[i];
    memset(&r, 0, sizeof(r));
    r.id = q->id;
    /* --fail-local answers what it could not decide locally as closed. */
    int open = b->fail_open == 1;

    r.error = failure_text(op->err, open, text, tlen);
    r.error_len = strlen(r.error);
    r.limit = window_limit(w);
    r.window_s = w->window_s;
    b->stats.store_errors++;
    if (open) {
        /* Allowed, and nothing was counted. */
        r.code = RL_CODE_OK;
        r.failed_open = 1;
        r.remaining = window_limit(w);
        r.reset_after_ms = rl_window_reset_after_ms(t->now_ms, w->window_s);
        b->stats.failed_open++;
    } else {
        r.code = RL_CODE_ERROR;
    }
    q->respond(q->owner, &r);
}

static const group_t *group_at(const rls_batch_t *t, int32_t i)
{
    return (const group_t *)(const void *)(t->groups.data +
                                           (size_t)i * sizeof(group_t));
}

/* The replay: answers the requests of the ops OP_ANSWERING or OP_LOCAL in
 * t->done from the counts the store reported (the stats, the refusal
 * cache), then marks those ops OP_ANSWERED. */
static void replay(rls_batch_t *t, rls_op_t *ops, size_t nops, int status)
{
    rls_batcher_t *b = t->owner;
    rl_admit_win_t *run;
    int64_t *before;
    uint32_t *nrun, *admitted;
    uint64_t failed = 0, decided = 0;
    char text[160];
    size_t i, j;

    if (nops > t->scratch_ops) {
        free(t->run);
        free(t->before);
        free(t->nrun);
        free(t->admitted);
        t->run = malloc(nops * RLS_WINDOWS_MAX * sizeof(*t->run));
        t->before = malloc(nops * RLS_WINDOWS_MAX * sizeof(*t->before));
        t->nrun = malloc(nops * sizeof(*t->nrun));
        t->admitted = malloc(nops * sizeof(*t->admitted));
        t->scratch_ops = nops;
        if (!t->run || !t->before || !t->nrun || !t->admitted) {
            t->scratch_ops = 0;
            /* Answered per the fail mode, as a store error would be. */
            status = RL_ENOMEM;
        }
    }
    run = t->run;
    before = t->before;
    nrun = t->nrun;
    admitted = t->admitted;
    for (i = 0; i < nops; i++) {
        rls_op_t *op = &ops[i];
        const rls_op_window_t *w = op->nquota_win ? op->quota_win : op->win;
        uint32_t n = op->nquota_win ? op->nquota_win : op->nwin;

        if (!answering(t->done[i]))
            continue;
        t->lcost[i] = 0;
        if (status != 0 && op->err == 0)
            op->err = status;
        if (op->err != 0)
            continue;
        nrun[i] = n;
        admitted[i] = 0;
        for (j = 0; j < n; j++) {
            rl_admit_win_t *a = &run[i * RLS_WINDOWS_MAX + j];
            rls_op_window_t q;
            /* A counter someone else decremented below zero counts as 0
             * (rl_admit_*). A stored quota's windows are placed by the
             * clock alone. */
            if (op->nquota_win) {
                q = w[j];
                q.reset_ms = rl_window_reset_after_ms(t->now_ms, q.window_s);
                if (q.algo == RL_ALGO_SLIDING_COUNTER)
                    q.weight = rl_swc_weight(q.reset_ms, q.window_s);
                rls_op_window_load(&q, t->now_ms, a);
            } else if (w[j].answer_limit != 0) {
                /* The store decided under another limit (ENVOY, PEEK):
                 * the answers compare with this one. */
                q = w[j];
                q.limit = q.answer_limit;
                rls_op_window_load(&q, t->now_ms, a);
            } else {
                rls_op_window_load(&w[j], t->now_ms, a);
            }
            before[i * RLS_WINDOWS_MAX + j] = w[j].before;
        }
    }

    for (i = 0; i < t->nreqs; i++) {
        const req_t *q = &t->reqs[i];
        rls_op_t *op = &ops[q->op];
        rl_admit_win_t *w;
        rl_result_t r;
        uint64_t counted;
        int ok, counting;

        if (!answering(t->done[q->op]))
            continue;
        decided++;
        if (op->err != 0) {
            failed++;
            answer_failed(b, t, op, q, text, sizeof(text));
            continue;
        }
        w = &run[(size_t)q->op * RLS_WINDOWS_MAX];
        memset(&r, 0, sizeof(r));
        counting = t->match[q->op].counting0;
        if (t->match[q->op].group >= 0) {
            /* A group: one request against every level's limits, all or
             * nothing; the answer names the deciding level. */
            const group_t *g = group_at(t, t->match[q->op].group);
            rl_result_t lr[RLS_GROUP_MAX];
            size_t d;
            uint32_t l, m;
            ok = rl_admit_one(w, nrun[q->op], q->cost);
            admitted[q->op] += (uint32_t)ok;
            d = rl_admit_result(w, nrun[q->op], q->cost, ok, &r);
            /* Each level as it stands (rl_result_t.per_level): admitted,
             * its counts include the request; refused, a level with room
             * answers as allowed from its counts as they were (the room
             * it has), one without as refused. */
            memset(lr, 0, sizeof(lr));
            for (m = 0; m < g->n; m++) {
                const rl_admit_win_t *lw = w + g->first[m];
                size_t ln = (size_t)(g->first[m + 1] - g->first[m]);
                rl_result_t *o = &lr[g->index[m]];
                int fits = ok || rl_admit_fits(lw, ln, q->cost);
                rl_admit_result(lw, ln, q->cost, fits, o);
                o->id = q->id;
                o->decided_at_ms = t->now_ms;
                o->level = g->index[m] + 1;
                if (!fits)
                    rls_refusal_answer(o, q->mode, NULL);
                if (g->index[m] + 1 > r.nper_level)
                    r.nper_level = g->index[m] + 1;
            }
            r.per_level = lr;
            l = d < op->nwin ? op->win[d].level : 0;
            r.level = g->index[l] + 1;
            r.id = q->id;
            r.decided_at_ms = t->now_ms;
            if (ok)
                for (l = 0; l < g->n; l++)
                    g->stats[l]->allowed++;
            else if (!rls_refusal_answer(&r, q->mode, g->stats[l]))
                /* The refusing level's caller, as a lone request's. */
                rls_top_refused(b->top, g->stats[l],
                                (const char *)t->keys.data + g->key_off[l] +
                                    b->prefix_len + 1,
                                g->tag_len[l] - b->prefix_len - 2, t->now_ms);
            q->respond(q->owner, &r);
            continue;
        }
        if (counting == RLS_COUNT_NATIVE) {
            ok = rl_admit_one(w, nrun[q->op], q->cost);
            admitted[q->op] += (uint32_t)ok;
            counted = ok ? q->cost : 0;
            rl_admit_result(w, nrun[q->op], q->cost, ok, &r);
        } else {
            /* Counted whatever the answer (ENVOY), or not at all (PEEK):
             * the store was sent the costs above 0 (submit). */
            int add = counting == RLS_COUNT_ENVOY;
            ok = rl_admit_counted(w, nrun[q->op], q->cost, add, &r);
            admitted[q->op] += (uint32_t)(add && q->cost > 0);
            counted = add ? q->cost : 0;
        }
        r.id = q->id;
        r.decided_at_ms = t->now_ms;
        if (t->done[q->op] == OP_LOCAL) {
            /* Decided on this instance's share, and said so; not a failed
             * decision (/healthz's error ratio). */
            b->stats.decided_local++;
            t->lcost[q->op] += counted;
            r.error =
                failure_text(RL_ESTORE, RLS_FAIL_LOCAL, text, sizeof(text));
            r.error_len = strlen(r.error);
        }
        if (ok)
            q->stats->allowed++;
        else if (!rls_refusal_answer(&r, q->mode, q->stats))
            /* The caller's key sits in the op key's braces. */
            rls_top_refused(b->top, q->stats, op->key + b->prefix_len + 1,
                            op->tag_len - b->prefix_len - 2, t->now_ms);
        q->respond(q->owner, &r);
    }

    for (i = 0; i < nops; i++) {
        rls_op_t *op = &ops[i];
        if (!answering(t->done[i]))
            continue;
        if (op->err != 0) {
            t->done[i] = OP_ANSWERED;
            continue;
        }
        if (admitted[i] != op->admitted && b->stats.replay_mismatch++ == 0)
            RLS_ERROR("store and batcher disagree on admissions (a bug)",
                      " store=%llu batcher=%u key=\"%s\"",
                      (unsigned long long)op->admitted, admitted[i], op->key);
        if (t->done[i] == OP_LOCAL) {
            /* A share's counts are neither the fleet's quota fit nor
             * refusals the store would make. */
            t->done[i] = OP_ANSWERED;
            rls_local_charge(b->local, op, t->lcost[i], t->now_ms);
            continue;
        }
        t->done[i] = OP_ANSWERED;
        if (t->match[i].group >= 0) {
            /* Each level's windows count for its own rule; a group's
             * refusals say nothing of one rule's room alone (another
             * level may have refused): not learnt. */
            const group_t *g = group_at(t, t->match[i].group);
            uint32_t l;
            for (l = 0; l < g->n; l++)
                fit_count(g->stats[l], &run[i * RLS_WINDOWS_MAX + g->first[l]],
                          &before[i * RLS_WINDOWS_MAX + g->first[l]],
                          (uint32_t)(g->first[l + 1] - g->first[l]));
            continue;
        }
        fit_count(t->reqs[t->match[i].first].stats, &run[i * RLS_WINDOWS_MAX],
                  &before[i * RLS_WINDOWS_MAX], nrun[i]);
        /* A refusal, or no room left for even the cheapest request: what
         * the windows hold now stays true until they end. */
        if (b->refusals.slots != NULL && rls_op_fixed(op) &&
            t->match[i].counting0 == RLS_COUNT_NATIVE &&
            t->reqs[t->match[i].first].stats->reserves == 0 &&
            (admitted[i] < op->ncosts ||
             !rl_admit_fits(&run[i * RLS_WINDOWS_MAX], nrun[i], 1))) {
            int rule = t->reqs[t->match[i].first].rule;
            uint64_t end[RLS_WINDOWS_MAX];
            for (j = 0; j < nrun[i]; j++)
                end[j] =
                    t->now_ms + run[i * RLS_WINDOWS_MAX + j].reset_after_ms;
            rls_refusals_learn(&b->refusals, t->match[i].hash, op->key,
                               op->key_len, rule ? 0 : op->win[0].window_s,
                               rule ? 0 : t->match[i].limit0, t->now_ms,
                               &run[i * RLS_WINDOWS_MAX], end, nrun[i]);
        }
    }
    share_add(b, decided, failed);
}

/* The store's own failure, which --fail-local decides locally (not an
 * op's: an overflow, a log that does not parse). */
static int store_failure(int err)
{
    return err == RL_ESTORE || err == RL_ETIMEDOUT || err == RL_ESHUTDOWN ||
           err == RL_ENOMEM;
}

/* --fail-local: the ops being answered now that the store could not
 * decide are decided locally (marked OP_LOCAL) on this instance's share.
 * Returns the status replay() is to apply to the rest: none once every failed
 * op has its own err or a local decision. */
static int localize(rls_batch_t *t, rls_op_t *ops, size_t nops, int status)
{
    rls_batcher_t *b = t->owner;
    size_t i;

    if (b->local == NULL)
        return status;
    for (i = 0; i < nops; i++) {
        rls_op_t *op = &ops[i];
        int err = op->err != 0 ? op->err : status;
        if (t->done[i] != OP_ANSWERING || err == 0)
            continue;
        /* The store's own failures, not an op's: those stay errors. A
         * group's levels are not decided on a share (fail_local.c keeps
         * one caller's counters an op): answered as failed, closed. */
        if (!store_failure(err) || t->match[i].group >= 0)
            continue;
        if (rls_local_decide(b->local, op) == RL_OK)
            t->done[i] = OP_LOCAL;
        else if (op->err == 0)
            op->err = err;
    }
    if (status != 0)
        for (i = 0; i < nops; i++)
            if (t->done[i] == OP_ANSWERING && ops[i].err == 0)
                ops[i].err = status;
    return 0;
}

/* A part of the batch decided early (the cluster store: one master's
 * ops): its requests are answered now. */
static void on_store_part(void *data, rls_op_t *ops, const uint32_t *idx,
                          size_t k)
{
    rls_batch_t *t = data;
    size_t i;

    for (i = 0; i < k; i++)
        if (idx[i] < t->nops && t->done[idx[i]] == OP_WAITING)
            t->done[idx[i]] = OP_ANSWERING;
    replay(t, ops, t->nops, localize(t, ops, t->nops, 0));
}

static void on_store_done(void *data, rls_op_t *ops, size_t nops, int status)
{
    rls_batch_t *t = data;
    rls_batcher_t *b = t->owner;
    size_t i;

    assert(ops == t->ops && nops == t->nops);
    for (i = 0; i < nops; i++) {
        if (t->done[i] == OP_WAITING)
            t->done[i] = OP_ANSWERING;
        if (b->local != NULL && store_failure(ops[i].err ? ops[i].err : status))
            rls_local_store_failed(b->local);
    }
    replay(t, ops, nops, localize(t, ops, nops, status));
    b->in_flight--;
    /* The store answers again: what was admitted locally goes to it. */
    if (status == 0 && b->local != NULL && b->local->n > 0)
        rls_local_flush(b->local, b->store);
    batch_recycle(b, t);
}

/* --fail-local: batch t decided on this instance's share without asking
 * the store, as if the store had failed it. */
static void replay_here(rls_batcher_t *b, rls_batch_t *t)
{
    size_t i;

    for (i = 0; i < t->nops; i++) {
        t->done[i] = OP_ANSWERING;
        t->ops[i].err = RL_ESTORE;
    }
    replay(t, t->ops, t->nops, localize(t, t->ops, t->nops, RL_ESTORE));
    batch_recycle(b, t);
}

static void submit(rls_batcher_t *b)
{
    rls_batch_t *t = b->cur;
    size_t i, off = 0;

    /* A held batch goes: what joined it while held tells whether holding
     * pays (rls_batcher_tick). */
    if (b->held_nreqs != 0 && t != NULL) {
        b->hold_joined =
            0.75 * b->hold_joined + 0.25 * (double)(t->nreqs - b->held_nreqs);
        b->held_nreqs = 0;
    }
    b->held_since_ns = 0;

    b->cur = NULL;
    /* Costs grouped by op, in arrival order within each (a counting sort
     * by op; the ops' request counts are known). */
    for (i = 0; i < t->nops; i++) {
        rls_op_t *op = &t->ops[i];
        op->costs = t->costs + off;
        op->ncosts = 0;
        off += t->match[i].nreqs;
    }
    for (i = 0; i < t->nreqs; i++) {
        const req_t *q = &t->reqs[i];
        rls_op_t *op = &t->ops[q->op];
        uint8_t counting = t->match[q->op].counting0;
        /* ENVOY: the store counts the costs above 0 (a read adds
         * nothing); PEEK: none. */
        if (counting == RLS_COUNT_PEEK ||
            (counting == RLS_COUNT_ENVOY && q->cost == 0))
            continue;
        ((uint32_t *)op->costs)[op->ncosts++] = q->cost;
        if (op->ncosts == 1)
            op->equal_cost = q->cost;
        else if (op->equal_cost != q->cost)
            op->equal_cost = 0;
    }
    for (i = 0; i < t->nops; i++) {
        rls_op_t *op = &t->ops[i];
        rls_op_window_t *wo =
            (rls_op_window_t *)(void *)(t->wins.data + t->match[i].win_off);
        uint32_t j;
        if (op->ncosts > 0)
            continue;
        /* Nothing to count: the store reads the counters with a request
         * no limit holds (a cost of 2 under limits of 1), which every
         * store refuses, writing nothing, and reports the counts of. */
        ((uint32_t *)op->costs)[0] = 2;
        op->ncosts = 1;
        op->equal_cost = 2;
        for (j = 0; j < op->nwin; j++) {
            if (wo[j].answer_limit == 0)
                wo[j].answer_limit = wo[j].limit;
            wo[j].limit = 1;
        }
    }
    /* The arenas may have moved while they grew: point ops at them now. */
    for (i = 0; i < t->nops; i++) {
        rls_op_t *op = &t->ops[i];
        op->key = (const char *)t->keys.data + t->match[i].key_off;
        op->win =
            (rls_op_window_t *)(void *)(t->wins.data + t->match[i].win_off);
        if (op->quota != NULL)
            op->quota = op->key + op->tag_len + 3; /* after ":r:" */
        if (t->match[i].group >= 0) {
            const group_t *g = group_at(t, t->match[i].group);
            uint32_t j;
            for (j = 0; j < op->nwin; j++)
                if (op->win[j].level > 0)
                    op->win[j].base = (const char *)t->keys.data +
                                      g->key_off[op->win[j].level];
        }
        op->admitted = 0;
        op->now_ms = t->now_ms;
        op->quota_win = NULL;
        op->nquota_win = 0;
        op->err = 0;
    }
    memset(t->done, 0, t->nops);
    /* --fail-local: what this instance admitted while the store was away
     * goes first, and until the fleet's charges are in, this batch is
     * decided here (fail_local.h). */
    if (b->local != NULL) {
        rls_local_poll(b->local);
        if (rls_local_holds(b->local, t->now_ms)) {
            replay_here(b, t);
            return;
        }
    }
    b->stats.batches++;
    rls_hist_observe(&b->stats.size, t->nreqs);
    b->in_flight++;
    /* May call on_store_done before returning. */
    b->store->v->submit(b->store, t->ops, t->nops, on_store_done, t);
}

/* The window of size window_s at the batch's clock reading. */
static const win_t *win_get(rls_batch_t *t, rls_batcher_t *b, uint32_t window_s)
{
    win_t *w;
    uint32_t i;

    for (i = 0; i < t->nwc; i++)
        if (t->wc[i].window_s == window_s)
            return &t->wc[i];
    w = &t->wc[t->nwc < WCACHE ? t->nwc++ : WCACHE - 1];
    w->window_s = window_s;
    w->index = rl_window_index(t->now_ms, window_s);
    w->reset_ms = rl_window_end_ms(w->index, window_s) - t->now_ms;
    w->expire_at_ms = rl_window_end_ms(w->index, window_s) + b->grace_ms;
    /* Every key of a window would otherwise carry the same expiry, and
     * Redis would delete a whole window's keys at once: its expire cycle
     * then holds the event loop for up to 25 ms at a time, and every
     * decision waits. A random extra per batch spreads the expiries, since
     * a window's keys are created in many batches. */
    if (b->spread_ms > 0) {
        uint64_t cap = (uint64_t)window_s * 250, span;
        span = b->spread_ms < cap ? b->spread_ms : cap;
        w->expire_at_ms += rl_xorshift64(&b->rng) % (span + 1);
    }
    return w;
}

/* Limit l of an op for caller key at the batch's clock: its window (with
 * the caller's offset when staggered), the store's expiry, and what the
 * algorithm needs at this instant. */
static void window_set(rls_batch_t *t, rls_batcher_t *b, rls_op_window_t *wo,
                       const rls_limit_t *l, const char *key, size_t key_len)
{
    uint64_t W = (uint64_t)l->window_s * 1000, off;

    memset(wo, 0, sizeof(*wo));
    wo->window_s = l->window_s;
    wo->algo = l->algo;
    wo->limit = l->limit;
    if (l->algo == RL_ALGO_GCRA) {
        /* The key lives until its TAT, which the store sets, plus this. */
        wo->limit = l->burst;
        wo->t_us = l->t_us;
        wo->expire_at_ms = b->grace_ms;
        return;
    }
    if (l->algo == RL_ALGO_SLIDING_LOG) {
        /* The log lives until what this batch adds leaves the window. */
        wo->expire_at_ms = t->now_ms + W + b->grace_ms;
        return;
    }
    off = l->phase ? rl_phase_offset_ms(key, key_len, l->window_s) : 0;
    if (off == 0) {
        const win_t *c = win_get(t, b, l->window_s);
        wo->index = c->index;
        wo->reset_ms = c->reset_ms;
        wo->expire_at_ms = c->expire_at_ms;
    } else {
        uint64_t end;
        wo->index = (t->now_ms - off) / W;
        end = (wo->index + 1) * W + off;
        wo->reset_ms = end - t->now_ms;
        /* Staggered windows spread their expiries by themselves. */
        wo->expire_at_ms = end + b->grace_ms;
    }
    wo->phased = l->phase != 0;
    if (l->algo == RL_ALGO_SLIDING_COUNTER) {
        /* The current counter is the previous one through the next
         * window. */
        wo->expire_at_ms += W;
        wo->weight = rl_swc_weight(wo->reset_ms, l->window_s);
    }
}

/* A limit's ENVOY counting is the store's check under a limit out of its
 * reach (so every store counts the cost whatever the room, as a charge),
 * the answers comparing with the real one (answer_limit); PEEK's is made
 * a read at submit, once it is known nothing of the op is counted. */
#define RLS_RAISED_LIMIT ((uint64_t)1 << 62)

static void window_count(rls_op_window_t *wo, int counting)
{
    if (counting == RLS_COUNT_NATIVE)
        return;
    wo->answer_limit = wo->limit;
    /* A gcra's state is a time: its cap (burst x interval) stays within
     * the 366 days every store allows, debt enough for any charge. */
    if (counting == RLS_COUNT_ENVOY)
        wo->limit = wo->algo == RL_ALGO_GCRA
                        ? RL_GCRA_CAP_MAX_US / (wo->t_us > 0 ? wo->t_us : 1)
                        : RLS_RAISED_LIMIT;
}

/* Answers a request the refusal cache knows the store would refuse, as
 * the store's answer would have: same deciding window, used and
 * retry_after_ms; nothing is queued. Returns 1 when it did. */
static int local_refusal(rls_batcher_t *b, rls_respond_fn respond, void *owner,
                         uint64_t id, uint64_t h, const char *key, size_t len,
                         const char *caller, size_t caller_len, uint32_t cost,
                         const rls_spec_t *spec)
{
    int rule = spec->rule != NULL;
    const rls_refusal_t *e = rls_refusals_find(
        &b->refusals, h, key, len, rule ? 0 : spec->limits.w[0].window_s,
        rule ? 0 : spec->limits.w[0].limit);
    rl_admit_win_t w[RLS_WINDOWS_MAX];
    uint32_t n;
    rl_result_t r;

    /* Most requests have no entry: the clock is read only for those that
     * do. It is the clock now, not the batch's: a batch may wait while
     * another is in flight, and a window that ended meanwhile must not
     * refuse. */
    uint64_t now;

    if (e == NULL ||
        !rls_refusals_refuse(&b->refusals, e,
                             now = b->store->v->now_ms(b->store), cost, w, &n))
        return 0;
    memset(&r, 0, sizeof(r));
    r.id = id;
    rl_admit_result(w, n, cost, 0, &r);
    r.decided_at_ms = now;
    if (!rls_refusal_answer(&r, spec->mode, spec->stats))
        rls_top_refused(b->top, spec->stats, caller, caller_len, now);
    b->stats.requests++;
    respond(owner, &r);
    return 1;
}

size_t rls_op_key(const char *prefix, size_t prefix_len, const char *key,
                  size_t key_len, const char *rule, size_t rule_len, int ns,
                  uint8_t *w, size_t *tag_len)
{
    uint8_t *p = w;

    memcpy(p, prefix, prefix_len);
    p += prefix_len;
    *p++ = '{';
    memcpy(p, key, key_len);
    p += key_len;
    *p++ = '}';
    *tag_len = (size_t)(p - w);
    *p++ = ':';
    if (rule_len > 0) {
        *p++ = 'r';
        *p++ = ':';
        memcpy(p, rule, rule_len);
        p += rule_len;
    } else {
        /* Whose counters (decide.h): no request of one family can reach
         * another's. */
        *p++ = ns != 0 ? (uint8_t)ns : 'i';
    }
    *p = '\0';
    return (size_t)(p - w);
}

static size_t op_key(const rls_batcher_t *b, uint8_t *w, const char *key,
                     size_t key_len, const rls_spec_t *spec, size_t *tag_len)
{
    return rls_op_key(b->prefix, b->prefix_len, key, key_len,
                      spec->rule != NULL ? spec->rule->name : NULL,
                      spec->rule != NULL ? spec->rule->name_len : 0, spec->ns,
                      w, tag_len);
}

int rls_batcher_add(rls_batcher_t *b, rls_respond_fn respond, void *owner,
                    uint64_t id, const char *key, size_t key_len, uint32_t cost,
                    const rls_spec_t *spec)
{
    rls_batch_t *t = b->cur;
    uint8_t *w;
    uint64_t h;
    uint32_t pos, op, i;
    size_t n, tag_len;
    rls_op_t *o;
    op_match_t *x;

    if (t == NULL && (t = b->cur = batch_start(b)) == NULL)
        return RL_ENOMEM;
    if (t->nreqs == 0 && t->nops == 0) {
        /* A batch that only saw local refusals so far is still empty:
         * its clock reading must not go stale. */
        t->now_ms = b->store->v->now_ms(b->store);
        t->nwc = 0;
    }
    if (rl_buf_reserve(&t->keys, b->prefix_len + key_len + RL_RULE_MAX + 8,
                       &w) != RL_OK)
        return RL_ENOMEM;
    n = op_key(b, w, key, key_len, spec, &tag_len);
    /* Hash the caller's key, the rule and (inline) the window: not the
     * constant prefix. Keyed SipHash still decides the slot, so clients
     * cannot aim keys at one chain. The refusal cache places its entries
     * by the same hash. */
    h = rl_hash(&b->hash_key, key, key_len) ^
        (spec->rule != NULL ? (uint64_t)(uintptr_t)spec->rule
                            : (uint64_t)spec->limits.w[0].window_s *
                                  UINT64_C(0x9e3779b97f4a7c15));
    if (b->refusals.slots != NULL && !spec->charge &&
        spec->counting == RLS_COUNT_NATIVE && spec->stats->reserves == 0 &&
        local_refusal(b, respond, owner, id, h, (char *)w, n, key, key_len,
                      cost, spec))
        return RL_OK;

    /* Find the op for this (rule, caller), or make one. */
    for (pos = (uint32_t)h & t->mask;; pos = (pos + 1) & t->mask) {
        slot_t *s = &t->index[pos];
        if (s->gen != t->gen)
            break;
        op = s->op;
        x = &t->match[op];
        o = &t->ops[op];
        if (x->hash != h || o->key_len != n ||
            memcmp(t->keys.data + x->key_off, w, n) != 0)
            continue;
        if (spec->rule == NULL && o->nwin != 0 &&
            ((rls_op_window_t *)(void *)(t->wins.data + x->win_off))
                    ->window_s != spec->limits.w[0].window_s)
            continue; /* another inline window of this caller */
        if (x->charge0 != (uint8_t)spec->charge ||
            x->counting0 != (uint8_t)spec->counting ||
            (spec->rule == NULL && (x->limit0 != spec->limits.w[0].limit ||
                                    x->algo0 != spec->limits.w[0].algo ||
                                    x->burst0 != spec->limits.w[0].burst))) {
            /* One counter, two inline limits: decided in arrival order
             * only if the earlier requests go first, in their own batch. */
            submit(b);
            return rls_batcher_add(b, respond, owner, id, key, key_len, cost,
                                   spec);
        }
        b->stats.coalesced++;
        goto found;
    }
    {
        rls_op_window_t *wo;

        if (rl_buf_reserve(&t->wins, spec->limits.n * sizeof(rls_op_window_t),
                           (uint8_t **)(void *)&wo) != RL_OK)
            return RL_ENOMEM;
        op = (uint32_t)t->nops++;
        t->index[pos].gen = t->gen;
        t->index[pos].op = op;
        x = &t->match[op];
        o = &t->ops[op];
        memset(o, 0, sizeof(*o));
        x->hash = h;
        x->key_off = (size_t)(w - t->keys.data);
        x->win_off = rl_buf_len(&t->wins);
        x->first = (uint32_t)t->nreqs;
        x->nreqs = 0;
        x->limit0 = spec->limits.w[0].limit;
        x->algo0 = spec->limits.w[0].algo;
        x->burst0 = spec->limits.w[0].burst;
        x->charge0 = (uint8_t)spec->charge;
        x->counting0 = (uint8_t)spec->counting;
        x->group = -1;
        o->key_len = n;
        o->tag_len = tag_len;
        if (spec->rule != NULL && spec->quota) {
            o->quota = (const char *)w; /* fixed up at submit */
            o->quota_len = spec->rule->name_len;
        }
        o->scale = spec->scale;
        o->nwin = spec->limits.n;
        for (i = 0; i < spec->limits.n; i++) {
            window_set(t, b, &wo[i], &spec->limits.w[i], key, key_len);
            window_count(&wo[i], spec->counting);
        }
        rl_buf_commit(&t->wins, spec->limits.n * sizeof(rls_op_window_t));
        rl_buf_commit(&t->keys, n + 1);
    }
found:
    t->match[op].nreqs++;
    t->reqs[t->nreqs++] = (req_t){respond,
                                  owner,
                                  id,
                                  spec->stats,
                                  cost,
                                  op,
                                  (uint8_t)spec->mode,
                                  (uint8_t)(spec->rule != NULL)};
    b->stats.requests++;
    if (t->nreqs == b->max_reqs)
        submit(b);
    return RL_OK;
}

int rls_batcher_add_group(rls_batcher_t *b, rls_respond_fn respond, void *owner,
                          uint64_t id, const rls_level_spec_t *lv, size_t n,
                          uint32_t cost, int mode)
{
    rls_batch_t *t = b->cur;
    size_t need = 0, off, nwin = 0, i, k;
    uint8_t *w, *gp;
    rls_op_window_t *wo;
    group_t *g;
    uint32_t op, j;
    rls_op_t *o;
    op_match_t *x;
    int rc;

    if (n == 0 || n > RLS_GROUP_MAX)
        return RL_EINVAL;
    for (i = 0; i < n; i++) {
        nwin += lv[i].spec->limits.n;
        need += b->prefix_len + lv[i].key_len + RL_RULE_MAX + 8;
    }
    if (nwin == 0 || nwin > RLS_WINDOWS_MAX)
        return RL_EINVAL;
    if (t == NULL && (t = b->cur = batch_start(b)) == NULL)
        return RL_ENOMEM;
    if (t->nreqs == 0 && t->nops == 0) {
        t->now_ms = b->store->v->now_ms(b->store);
        t->nwc = 0;
    }
    /* A group's keys take up to RLS_GROUP_MAX a request's room: a batch
     * whose arena is at its cap goes first. */
    rc = rl_buf_reserve(&t->keys, need, &w);
    if (rc == RL_EFULL && t->nreqs > 0) {
        submit(b);
        return rls_batcher_add_group(b, respond, owner, id, lv, n, cost, mode);
    }
    if (rc != RL_OK ||
        rl_buf_reserve(&t->wins, nwin * sizeof(rls_op_window_t),
                       (uint8_t **)(void *)&wo) != RL_OK ||
        rl_buf_reserve(&t->groups, sizeof(group_t), &gp) != RL_OK)
        return RL_ENOMEM;
    g = (group_t *)(void *)gp;
    op = (uint32_t)t->nops++;
    x = &t->match[op];
    o = &t->ops[op];
    memset(o, 0, sizeof(*o));
    memset(x, 0, sizeof(*x));
    memset(g, 0, sizeof(*g));
    /* Never in the key index: a group is coalesced with nothing, and the
     * ops that share its counters (a level's rule asked alone, another
     * group of the same organisation) are decided after or before it in
     * the store's one pass, each from the counts the one before left. */
    x->key_off = (size_t)(w - t->keys.data);
    x->win_off = rl_buf_len(&t->wins);
    x->first = (uint32_t)t->nreqs;
    x->counting0 = RLS_COUNT_NATIVE;
    x->group = (int32_t)(rl_buf_len(&t->groups) / sizeof(group_t));
    g->n = (uint32_t)n;
    o->scale = 1.0;
    o->nwin = (uint32_t)nwin;
    for (i = 0, k = 0, off = 0; i < n; i++) {
        const rls_spec_t *sp = lv[i].spec;
        size_t len, tag;
        len = op_key(b, w + off, lv[i].key, lv[i].key_len, sp, &tag);
        g->key_off[i] = x->key_off + off;
        g->tag_len[i] = tag;
        g->first[i] = (uint8_t)k;
        g->stats[i] = sp->stats;
        g->index[i] = lv[i].index;
        if (i == 0) {
            o->key_len = len;
            o->tag_len = tag;
        }
        for (j = 0; j < sp->limits.n; j++, k++) {
            window_set(t, b, &wo[k], &sp->limits.w[j], lv[i].key,
                       lv[i].key_len);
            wo[k].level = (uint32_t)i;
            if (i > 0) {
                wo[k].base_len = len;
                wo[k].base_tag_len = tag;
            }
        }
        off += len + 1;
    }
    g->first[n] = (uint8_t)k;
    rl_buf_commit(&t->keys, off);
    rl_buf_commit(&t->wins, nwin * sizeof(rls_op_window_t));
    rl_buf_commit(&t->groups, sizeof(group_t));
    x->nreqs = 1;
    t->reqs[t->nreqs++] = (req_t){
        respond, owner, id, lv[0].spec->stats, cost, op, (uint8_t)mode, 1};
    b->stats.requests++;
    b->stats.groups++;
    if (t->nreqs == b->max_reqs)
        submit(b);
    return RL_OK;
}

void rls_batcher_flush(rls_batcher_t *b)
{
    if (b->cur != NULL && b->cur->nreqs > 0 &&
        (b->max_in_flight == 0 || b->in_flight < b->max_in_flight))
        submit(b);
}

/* The arrival rate, smoothed over spans of at least 1 ms. */
static void rate_update(rls_batcher_t *b, uint64_t now_ns)
{
    uint64_t span = now_ns - b->rate_at_ns;

    if (b->rate_at_ns == 0 || now_ns < b->rate_at_ns) {
        b->rate_at_ns = now_ns;
        b->rate_reqs = b->stats.requests;
        return;
    }
    if (span < 1000000)
        return;
    b->rate = 0.75 * b->rate +
              0.25 * (double)(b->stats.requests - b->rate_reqs) / (double)span;
    b->rate_at_ns = now_ns;
    b->rate_reqs = b->stats.requests;
}

uint64_t rls_batcher_tick(rls_batcher_t *b, uint64_t now_ns)
{
    uint64_t age;

    if (b->hold_ns == 0) {
        rls_batcher_flush(b);
        return 0;
    }
    rate_update(b, now_ns);
    if (b->cur == NULL || b->cur->nreqs == 0) {
        b->held_since_ns = 0;
        return 0;
    }
    if (b->max_in_flight != 0 && b->in_flight >= b->max_in_flight)
        return 0; /* it fills while the store works */
    if (b->held_since_ns == 0 || now_ns < b->held_since_ns)
        b->held_since_ns = now_ns;
    age = now_ns - b->held_since_ns;
    if (age < b->hold_ns &&
        b->rate * (double)(b->hold_ns - age) >= RLS_HOLD_GAIN &&
        (b->held_nreqs != 0 || b->hold_joined >= RLS_HOLD_GAIN / 2.0 ||
         ++b->hold_skipped >= RLS_HOLD_PROBE)) {
        if (b->held_nreqs == 0) {
            b->held_nreqs = b->cur->nreqs;
            b->hold_skipped = 0;
        }
        b->stats.held++;
        return b->hold_ns - age;
    }
    submit(b);
    return 0;
}

void rls_batcher_flush_now(rls_batcher_t *b)
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
        rls_policy_unref(b->cur->policy);
        b->cur->policy = NULL;
        b->cur->next = b->free;
        b->free = b->cur;
        b->cur = NULL;
    }
    while ((t = b->free) != NULL) {
        b->free = t->next;
        b->nfree = 0;
        batch_destroy(t);
    }
    rls_refusals_free(&b->refusals);
}
