/* The audit: a correctness check run under load, from the responses alone.
 * See rlb.h for how a response is placed in its window. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "rl_error.h"
#include "rlb.h"

#define TAB_MIN 4096
#define TAB_PRESIZE_MAX (1u << 22) /* entries reserved up front, at most */

static uint64_t mix(uint64_t z)
{
    z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
    return z ^ (z >> 31);
}

int rlb_audit_init(rlb_audit_t *a, uint32_t window_s, uint32_t cost,
                   uint64_t fixed_limit, uint64_t expect)
{
    size_t n = TAB_MIN, i;

    memset(a, 0, sizeof(*a));
    /* Room for the windows the run is expected to see, at most half full,
     * so that no grow() (a rehash of everything, tens of ms with a large
     * table) stalls the loop mid-run and shows in the latencies it
     * measures; the pages are touched now, before anything is timed. */
    while (n < TAB_PRESIZE_MAX && n < 2 * expect)
        n *= 2;
    a->tab = calloc(n, sizeof(*a->tab));
    if (a->tab == NULL)
        return RL_ENOMEM;
    for (i = 0; i < n * sizeof(*a->tab); i += 4096)
        ((volatile char *)a->tab)[i] = 0;
    a->mask = n - 1;
    a->window_ms = (double)window_s * 1000;
    a->window_s = window_s;
    a->cost = cost;
    a->fixed_limit = fixed_limit;
    return 0;
}

void rlb_audit_free(rlb_audit_t *a)
{
    if (a == NULL)
        return;
    free(a->tab);
    a->tab = NULL;
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
        for (p = mix(e->id) & (n - 1); t[p].id != 0; p = (p + 1) & (n - 1))
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

void rlb_audit_add(rlb_audit_t *a, uint32_t key, int admitted, uint64_t limit,
                   uint32_t window_s, uint64_t reset_after_ms, double sent_ms,
                   double recv_ms)
{
    /* The window ends reset_after_ms after the decision, which the server
     * made between send and receive (+1: reset_after_ms is whole ms). */
    double lo = sent_ms + (double)reset_after_ms;
    double hi = recv_ms + (double)reset_after_ms + 1;
    double mid = (sent_ms + recv_ms) / 2, k, end;
    uint64_t id;
    size_t p;

    if (a->fixed_limit)
        limit = a->fixed_limit;
    if (window_s != 0 && window_s != a->window_s) {
        /* Another window of the rule decided: its reset_after_ms says
         * nothing of the audited window's end. A refusal then is no news
         * about the audited window; an admission counts in it, placed by
         * the time of the decision on the grid, when that is clear of an
         * edge by more than the grid's and the round trip's uncertainty. */
        double margin = 2 * a->max_skew_ms + (a->ref_hi - a->ref_lo) +
                        (recv_ms - sent_ms) / 2 + 10;
        if (!admitted) {
            a->other_refused++;
            return;
        }
        if (!a->have_ref) {
            a->unplaced++;
            return;
        }
        k = ceil((mid - a->ref_ms) / a->window_ms);
        end = a->ref_ms + k * a->window_ms;
        if (end - mid < margin || mid - (end - a->window_ms) < margin) {
            a->unplaced++;
            return;
        }
    } else if (hi - lo >= a->window_ms / 2) {
        /* Too slow to tell which window decided. */
        a->unplaced++;
        return;
    } else {
        k = place(a, lo, hi);
    }
    if (k < -2147483647.0 || k > 2147483647.0)
        k = k < 0 ? -2147483647.0 : 2147483647.0;
    id = (uint64_t)key << 32 | (uint32_t)((int64_t)k + 2147483648LL);

    if (2 * (a->used + 1) > a->mask + 1 && grow(a) != 0) {
        a->nomem = 1;
        return;
    }
    for (p = mix(id) & a->mask; a->tab[p].id != 0 && a->tab[p].id != id;
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

static int by_end(const void *x, const void *y)
{
    const rlb_audit_window_t *a = x, *b = y;

    if (a->end_ms != b->end_ms)
        return a->end_ms < b->end_ms ? -1 : 1;
    return a->key < b->key ? -1 : a->key > b->key;
}

int rlb_audit_report(const rlb_audit_t *a, double run_start_ms,
                     double first_send_ms, rlb_audit_report_t *r)
{
    /* A window counts as begun inside the run only if it did so by more
     * than the grid's uncertainty. */
    double margin = 2 * a->max_skew_ms + (a->ref_hi - a->ref_lo) + 10;
    size_t i;

    memset(r, 0, sizeof(*r));
    r->max_skew_ms = a->max_skew_ms;
    r->unplaced = a->unplaced;
    r->other_refused = a->other_refused;
    r->unreliable = a->max_skew_ms > a->window_ms / 4 ||
                    a->ref_hi - a->ref_lo > a->window_ms / 4 || a->nomem;
    r->over = calloc(RLB_AUDIT_LIST_MAX, sizeof(*r->over));
    r->inexact = calloc(RLB_AUDIT_LIST_MAX, sizeof(*r->inexact));
    if (r->over == NULL || r->inexact == NULL) {
        rlb_audit_report_free(r);
        return RL_ENOMEM;
    }
    for (i = 0; i <= a->mask; i++) {
        const rlb_audit_ent_t *e = &a->tab[i];
        double k, end;
        rlb_audit_window_t w;

        if (e->id == 0)
            continue;
        k = (double)((int64_t)(e->id & 0xffffffffu) - 2147483648LL);
        end = a->ref_ms + k * a->window_ms;
        w.key = (uint32_t)(e->id >> 32);
        w.end_ms = end - run_start_ms;
        w.allowed = e->allowed;
        w.denied = e->denied;
        w.limit = e->limit;
        r->windows++;
        if ((uint64_t)e->allowed * a->cost > e->limit) {
            r->over_limit++;
            if (r->nover < RLB_AUDIT_LIST_MAX)
                r->over[r->nover++] = w;
        }
        if (e->denied > 0 && end - a->window_ms >= first_send_ms + margin) {
            r->checked++;
            if (e->allowed == e->limit / a->cost)
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
