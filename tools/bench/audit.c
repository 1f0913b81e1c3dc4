/* The audit: a correctness check run under load, from the answers alone.
 * See rlb.h for what is checked. This file places each answer, counts the
 * fixed windows and writes the report; audit_algo.c checks a gcra and a
 * sliding-window-counter. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "rl_error.h"
#include "rlb.h"

/* The window half of a fixed window's id (rlb.h). */
#define WIN_STAMPED (UINT32_C(1) << 31)
#define WIN_MID (UINT32_C(1) << 30)

/* Stamps are kept as stamp - stamp_base in 32 bits, stamp_base 2^31 ms (24
 * days) before the first stamp: they span 49 days from there. */
#define STAMP_BACK (UINT64_C(1) << 31)

void rlb_audit_conf_init(rlb_audit_conf_t *c)
{
    memset(c, 0, sizeof(*c));
    c->algo = RL_ALGO_FIXED;
    c->window_s = 60;
    c->key_prefix = "bench:";
    c->cost = 1;
    c->margin_ms = RLB_AUDIT_MARGIN_MS;
}

int rlb_audit_init(rlb_audit_t *a, const rlb_audit_conf_t *c)
{
    memset(a, 0, sizeof(*a));
    a->c = *c;
    if (a->c.cost == 0)
        a->c.cost = 1;
    if (a->c.key_prefix == NULL)
        a->c.key_prefix = "";
    if (a->c.window_s == 0 || a->c.algo < 0 || a->c.algo >= RL_ALGO_MAX ||
        (a->c.algo != RL_ALGO_FIXED && a->c.limit == 0) ||
        strlen(a->c.key_prefix) > RLB_AUDIT_PREFIX_MAX)
        return RL_EINVAL;
    a->window_ms = (double)a->c.window_s * 1000;
    if (a->c.algo == RL_ALGO_GCRA) {
        a->t_us = rl_gcra_interval_us(a->c.limit, a->c.window_s);
        if (a->t_us == 0)
            return RL_EINVAL;
        if (a->c.burst == 0)
            a->c.burst = a->c.limit;
    }
    if (a->c.algo != RL_ALGO_FIXED)
        return rlb_audit_keys_init(a);
    a->tab = rlb_audit_table(sizeof(*a->tab), a->c.expect, &a->mask);
    return a->tab != NULL ? 0 : RL_ENOMEM;
}

void rlb_audit_free(rlb_audit_t *a)
{
    size_t p;

    if (a == NULL)
        return;
    for (p = 0;
         a->keys != NULL && a->c.algo == RL_ALGO_SLIDING_LOG && p <= a->kmask;
         p++) {
        free(a->keys[p].u.l.t);
        free(a->keys[p].u.l.n);
    }
    free(a->tab);
    free(a->keys);
    free(a->viol);
    a->tab = NULL;
    a->keys = NULL;
    a->viol = NULL;
}

static int grow(rlb_audit_t *a)
{
    size_t n = 2 * (a->mask + 1), i;
    rlb_audit_ent_t *t = calloc(n, sizeof(*t));

    if (t == NULL)
        return RL_ENOMEM;
    for (i = 0; i <= a->mask; i++) {
        rlb_audit_ent_t *e = &a->tab[i];
        size_t p;
        if (e->id == 0)
            continue;
        for (p = rlb_mix64(e->id) & (n - 1); t[p].id != 0;
             p = (p + 1) & (n - 1))
            ;
        t[p] = *e;
    }
    free(a->tab);
    a->tab = t;
    a->mask = n - 1;
    return 0;
}

/* Places an answer whose window ends within [lo, hi] on the grid and
 * narrows the grid's phase to what it allows. Returns the window number. */
static double place(rlb_audit_t *a, double lo, double hi)
{
    double w = a->window_ms, k, glo, ghi, skew = 0;

    if (!a->have_ref) {
        a->have_ref = 1;
        a->ref_lo = lo;
        a->ref_hi = hi;
        a->ref_ms = (lo + hi) / 2;
    }
    k = floor(((lo + hi) / 2 - a->ref_ms) / w + 0.5);
    glo = a->ref_lo + k * w;
    ghi = a->ref_hi + k * w;
    if (hi < glo) {
        skew = glo - hi;
    } else if (lo > ghi) {
        skew = lo - ghi;
    } else {
        if (lo - k * w > a->ref_lo)
            a->ref_lo = lo - k * w;
        if (hi - k * w < a->ref_hi)
            a->ref_hi = hi - k * w;
        a->ref_ms = (a->ref_lo + a->ref_hi) / 2;
    }
    if (skew > a->max_skew_ms)
        a->max_skew_ms = skew;
    return k;
}

/* Was x decided by a limit other than the audited one? A server that
 * stamps its answers names the algorithm too; an older one had only fixed
 * windows, and a window's length to tell them apart. */
static int other_limit(const rlb_audit_t *a, const rlb_answer_t *x)
{
    if (x->window_s != 0 && x->window_s != a->c.window_s)
        return 1;
    return x->decided_at_ms != 0 && x->algorithm != (uint32_t)a->c.algo;
}

/* The first stamp fixes the bases (rlb.h); every stamp may lower the
 * earliest one, and a slower answer raise the slowest. */
static void note_stamp(rlb_audit_t *a, const rlb_answer_t *x)
{
    uint64_t t = x->decided_at_ms;
    double rtt = x->recv_ms - x->sent_ms;

    if (!a->have_stamp) {
        a->have_stamp = 1;
        a->stamp_base = t > STAMP_BACK ? t - STAMP_BACK : 0;
        a->stamp_min = t;
        a->base_index = t / ((uint64_t)a->c.window_s * 1000);
        a->stamp_to_local = (x->sent_ms + x->recv_ms) / 2 - (double)t;
    }
    if (t < a->stamp_min)
        a->stamp_min = t;
    if (rtt > a->max_rtt_ms)
        a->max_rtt_ms = rtt;
}

/* The window half of the id of the fixed window holding stamp t for key,
 * or 0 when it is too far from the first (an answer no real store gave). */
static uint32_t stamped_window(const rlb_audit_t *a, uint32_t key, uint64_t t)
{
    uint64_t off = rlb_audit_offset(a, key), idx;
    int64_t rel;

    if (t < off)
        return 0;
    idx = (t - off) / ((uint64_t)a->c.window_s * 1000);
    rel = (int64_t)(idx - a->base_index);
    if (rel <= -(int64_t)WIN_MID || rel >= (int64_t)WIN_MID)
        return 0;
    return WIN_STAMPED | (uint32_t)(rel + (int64_t)WIN_MID);
}

/* The window half of the id of the fixed window an unstamped answer
 * belongs to, found on the grid (rlb.h), or 0 when it cannot be placed. */
static uint32_t grid_window(rlb_audit_t *a, const rlb_answer_t *x, int other)
{
    /* The window ends reset_after_ms after the decision, which the server
     * made between send and receive (+1: reset_after_ms is whole ms). */
    double lo = x->sent_ms + (double)x->reset_after_ms;
    double hi = x->recv_ms + (double)x->reset_after_ms + 1;
    double mid = (x->sent_ms + x->recv_ms) / 2, k, end;

    if (other) {
        /* Another window of the rule decided: its reset_after_ms says
         * nothing of the audited window's end. An admission counts in it,
         * placed by the time of the decision on the grid, when that is
         * clear of an edge by more than the grid's and the round trip's
         * uncertainty. */
        double margin = 2 * a->max_skew_ms + (a->ref_hi - a->ref_lo) +
                        (x->recv_ms - x->sent_ms) / 2 + 10;
        if (!a->have_ref)
            return 0;
        k = ceil((mid - a->ref_ms) / a->window_ms);
        end = a->ref_ms + k * a->window_ms;
        if (end - mid < margin || mid - (end - a->window_ms) < margin)
            return 0;
    } else if (hi - lo >= a->window_ms / 2) {
        return 0; /* too slow to tell which window decided */
    } else {
        k = place(a, lo, hi);
    }
    if (k <= -(double)WIN_MID || k >= (double)WIN_MID)
        return 0;
    return (uint32_t)((int64_t)k + (int64_t)WIN_MID);
}

/* Counts an answer in the fixed window (key, win). */
static void count(rlb_audit_t *a, uint32_t key, uint32_t win, uint64_t limit,
                  int admitted)
{
    uint64_t id = (uint64_t)key << 32 | win;
    size_t p;

    if (2 * (a->used + 1) > a->mask + 1 && grow(a) != 0) {
        a->nomem = 1;
        return;
    }
    for (p = rlb_mix64(id) & a->mask; a->tab[p].id != 0 && a->tab[p].id != id;
         p = (p + 1) & a->mask)
        ;
    if (a->tab[p].id == 0) {
        a->tab[p].id = id;
        a->tab[p].limit = limit;
        a->used++;
    } else if (a->tab[p].limit != limit) {
        /* One window, one limit: a change means another client shares the
         * key with other settings; the smaller limit is the strict one. */
        a->limit_mismatch++;
        if (limit < a->tab[p].limit)
            a->tab[p].limit = limit;
    }
    if (admitted)
        a->tab[p].allowed++;
    else
        a->tab[p].denied++;
}

void rlb_audit_add(rlb_audit_t *a, const rlb_answer_t *x)
{
    int other = other_limit(a, x);
    uint32_t win;

    if (x->decided_at_ms != 0)
        note_stamp(a, x);
    /* A refusal by another limit is no news about the audited one. */
    if (!x->admitted && other) {
        a->other_refused++;
        return;
    }
    if (a->c.algo != RL_ALGO_FIXED) {
        /* Refusals consume nothing: only admissions are checked. */
        if (!x->admitted)
            return;
        if (x->decided_at_ms == 0)
            a->unstamped++;
        else
            rlb_audit_keys_add(a, x->key, x->decided_at_ms);
        return;
    }
    if (x->decided_at_ms != 0) {
        win = stamped_window(a, x->key, x->decided_at_ms);
    } else if (a->c.per_caller) {
        /* Staggered windows have no common grid to infer. */
        a->unstamped += x->admitted != 0;
        return;
    } else {
        win = grid_window(a, x, other);
    }
    if (win == 0) {
        a->unplaced++;
        return;
    }
    count(a, x->key, win, a->c.limit ? a->c.limit : x->limit, x->admitted);
}

static int by_end(const void *x, const void *y)
{
    const rlb_audit_window_t *a = x, *b = y;

    if (a->end_ms != b->end_ms)
        return a->end_ms < b->end_ms ? -1 : 1;
    return a->key < b->key ? -1 : a->key > b->key;
}

/* gcra, swc: the failed checks, their stamps turned into ms after the
 * run's start. */
static void report_checks(rlb_audit_t *a, double run_start_ms,
                          rlb_audit_report_t *r)
{
    double d = a->stamp_to_local - run_start_ms;
    size_t i;

    rlb_audit_keys_flush(a);
    r->windows = a->awindows;
    r->over_limit = a->over;
    for (i = 0; i < a->nviol; i++) {
        rlb_audit_window_t w = a->viol[i];
        w.from_ms += d;
        w.end_ms += d;
        w.at_ms += d;
        r->over[r->nover++] = w;
    }
    /* The sliding window's check counts on the store having applied what
     * was stamped margin_ms before; an answer slower than that says a
     * batch may have taken longer to get there. */
    if ((a->c.algo == RL_ALGO_SLIDING_COUNTER ||
         a->c.algo == RL_ALGO_SLIDING_LOG) &&
        a->max_rtt_ms > (double)a->c.margin_ms)
        r->unreliable = 1;
}

int rlb_audit_report(rlb_audit_t *a, double run_start_ms, double first_send_ms,
                     rlb_audit_report_t *r)
{
    /* A window counts as begun inside the run only if it did so by more
     * than the grid's uncertainty. */
    double margin = 2 * a->max_skew_ms + (a->ref_hi - a->ref_lo) + 10;
    double W = a->window_ms;
    size_t i;

    memset(r, 0, sizeof(*r));
    r->algo = a->c.algo;
    r->max_skew_ms = a->max_skew_ms;
    r->max_rtt_ms = a->max_rtt_ms;
    r->margin_ms = a->c.margin_ms;
    r->unplaced = a->unplaced;
    r->other_refused = a->other_refused;
    r->unstamped = a->unstamped;
    r->late = a->late;
    r->unreliable =
        a->max_skew_ms > W / 4 || a->ref_hi - a->ref_lo > W / 4 || a->nomem;
    r->over = calloc(RLB_AUDIT_LIST_MAX, sizeof(*r->over));
    r->inexact = calloc(RLB_AUDIT_LIST_MAX, sizeof(*r->inexact));
    if (r->over == NULL || r->inexact == NULL) {
        rlb_audit_report_free(r);
        return RL_ENOMEM;
    }
    if (a->c.algo != RL_ALGO_FIXED) {
        report_checks(a, run_start_ms, r);
        r->admissions = a->admissions;
        r->late = a->late;
        r->unplaced = a->unplaced; /* the flush may have found some */
        qsort(r->over, r->nover, sizeof(*r->over), by_end);
        return 0;
    }
    for (i = 0; i <= a->mask; i++) {
        const rlb_audit_ent_t *e = &a->tab[i];
        uint32_t win = (uint32_t)e->id;
        double begin;
        int ours;
        rlb_audit_window_t w;

        if (e->id == 0)
            continue;
        memset(&w, 0, sizeof(w));
        w.key = (uint32_t)(e->id >> 32);
        if (win & WIN_STAMPED) {
            /* Every hit it holds is ours if it began after the first
             * decision the run saw. */
            uint64_t idx = a->base_index + (win & ~WIN_STAMPED) - WIN_MID;
            uint64_t b = idx * ((uint64_t)a->c.window_s * 1000) +
                         rlb_audit_offset(a, w.key);
            begin = (double)b + a->stamp_to_local;
            ours = b > a->stamp_min;
        } else {
            double k = (double)((int64_t)win - (int64_t)WIN_MID);
            begin = a->ref_ms + (k - 1) * W;
            ours = begin >= first_send_ms + margin;
        }
        w.from_ms = begin - run_start_ms;
        w.end_ms = w.at_ms = begin + W - run_start_ms;
        w.allowed = e->allowed;
        w.denied = e->denied;
        w.limit = e->limit;
        r->windows++;
        if ((uint64_t)e->allowed * a->c.cost > e->limit) {
            r->over_limit++;
            if (r->nover < RLB_AUDIT_LIST_MAX)
                r->over[r->nover++] = w;
        }
        if (e->denied > 0 && ours) {
            r->checked++;
            if (e->allowed == e->limit / a->c.cost)
                r->exact++;
            else if (r->ninexact < RLB_AUDIT_LIST_MAX)
                r->inexact[r->ninexact++] = w;
        }
    }
    qsort(r->over, r->nover, sizeof(*r->over), by_end);
    qsort(r->inexact, r->ninexact, sizeof(*r->inexact), by_end);
    return 0;
}

void rlb_audit_report_free(rlb_audit_report_t *r)
{
    if (r == NULL)
        return;
    free(r->over);
    free(r->inexact);
    r->over = r->inexact = NULL;
}
