/* The lease audit: at every grant, no more than N of the caller's leases
 * alive, from the store's times alone (see rlb.h). Per caller, a short
 * array of the leases that can still overlap a grant to check; each add
 * checks and trims that caller only, so time per answer is bounded by
 * the leases a caller holds within the horizon. */
#include <stdlib.h>
#include <string.h>

#include "rl_error.h"
#include "rlb.h"

int rlb_lease_init(rlb_lease_audit_t *a, uint32_t ncallers, uint64_t limit,
                   uint64_t skew_ms, uint64_t horizon_ms)
{
    memset(a, 0, sizeof(*a));
    a->callers = calloc(ncallers ? ncallers : 1, sizeof(*a->callers));
    if (a->callers == NULL)
        return RL_ENOMEM;
    a->ncallers = ncallers;
    a->limit = limit;
    a->skew_ms = skew_ms;
    a->horizon_ms = horizon_ms;
    a->next_id = 1;
    return 0;
}

void rlb_lease_free(rlb_lease_audit_t *a)
{
    uint32_t i;

    if (a == NULL || a->callers == NULL)
        return;
    for (i = 0; i < a->ncallers; i++)
        free(a->callers[i].v);
    free(a->callers);
    a->callers = NULL;
}

void rlb_lease_time(rlb_lease_audit_t *a, uint64_t stamp_ms)
{
    if (stamp_ms > a->high)
        a->high = stamp_ms;
}

/* The leases of c surely alive when grant g was applied (rlb.h): g
 * itself, and each other applied before g's stamp and not ended before
 * it was applied. */
static uint64_t alive_at(const rlb_lease_audit_t *a,
                         const rlb_lease_caller_t *c, const rlb_lease_t *g)
{
    uint64_t n = 0, t = g->start;
    uint32_t j;

    for (j = 0; j < c->n; j++) {
        const rlb_lease_t *l = &c->v[j];
        if (l == g) {
            n++;
            continue;
        }
        n += l->start + l->rtt_ms <= t &&
             t + a->skew_ms + (l->released ? g->rtt_ms : 0) < l->end;
    }
    return n;
}

static void check_one(rlb_lease_audit_t *a, rlb_lease_caller_t *c,
                      rlb_lease_t *l, uint32_t key)
{
    uint64_t alive = alive_at(a, c, l);
    uint64_t limit = a->limit ? a->limit : l->limit;

    l->checked = 1;
    a->checked++;
    a->limit_seen = limit;
    if (alive > a->max_alive)
        a->max_alive = alive;
    if (alive > limit) {
        if (a->over++ == 0) {
            a->first_over_at = l->start;
            a->first_over_alive = alive;
            a->first_over_limit = limit;
            a->first_over_key = key;
        }
    }
}

/* Checks c's grants that are horizon_ms behind the latest time seen (all
 * of them when all), then forgets the leases no grant to come can see. */
static void settle_caller(rlb_lease_audit_t *a, uint32_t key, int all)
{
    rlb_lease_caller_t *c = &a->callers[key];
    uint64_t edge = a->high > a->horizon_ms ? a->high - a->horizon_ms : 0;
    uint32_t i, k;

    for (i = 0; i < c->n; i++)
        if (!c->v[i].checked && (all || c->v[i].start < edge))
            check_one(a, c, &c->v[i], key);
    for (i = k = 0; i < c->n; i++) {
        const rlb_lease_t *l = &c->v[i];
        if (l->checked && l->final && l->end <= edge)
            continue;
        c->v[k++] = *l;
    }
    c->n = k;
}

uint64_t rlb_lease_grant(rlb_lease_audit_t *a, uint32_t key, uint64_t start,
                         uint64_t end, uint64_t limit)
{
    return rlb_lease_grant_rtt(a, key, start, end, limit, 0);
}

uint64_t rlb_lease_grant_rtt(rlb_lease_audit_t *a, uint32_t key, uint64_t start,
                             uint64_t end, uint64_t limit, uint64_t rtt_ms)
{
    rlb_lease_caller_t *c;
    rlb_lease_t *l;
    uint64_t edge;

    if (key >= a->ncallers) {
        a->nomem = 1;
        return 0;
    }
    c = &a->callers[key];
    rlb_lease_time(a, start);
    settle_caller(a, key, 0);
    if (c->n == c->cap) {
        uint32_t cap = c->cap ? c->cap * 2 : 8;
        rlb_lease_t *v = cap > c->cap ? realloc(c->v, cap * sizeof(*v)) : NULL;
        if (v == NULL) {
            a->nomem = 1;
            return 0;
        }
        c->v = v;
        c->cap = cap;
    }
    l = &c->v[c->n++];
    memset(l, 0, sizeof(*l));
    l->id = a->next_id++;
    l->start = start;
    l->end = end > start ? end : start;
    l->limit = limit;
    l->rtt_ms = rtt_ms;
    if (c->n > a->kept_max)
        a->kept_max = c->n;
    /* Later than the horizon: the leases it would have been counted
     * against may be gone; checked now with what is kept. */
    edge = a->high > a->horizon_ms ? a->high - a->horizon_ms : 0;
    if (start < edge) {
        a->late++;
        check_one(a, c, l, key);
    }
    return l->id;
}

void rlb_lease_end(rlb_lease_audit_t *a, uint32_t key, uint64_t id,
                   uint64_t end_ms)
{
    rlb_lease_caller_t *c;
    uint32_t i;

    if (key >= a->ncallers || id == 0)
        return;
    c = &a->callers[key];
    rlb_lease_time(a, end_ms);
    for (i = 0; i < c->n; i++) {
        rlb_lease_t *l = &c->v[i];
        if (l->id != id)
            continue;
        /* A release after the lease had expired ends nothing: the end
         * stays the earlier. */
        if (end_ms != 0 && end_ms < l->end) {
            l->end = end_ms > l->start ? end_ms : l->start;
            l->released = 1;
        }
        l->final = 1;
        settle_caller(a, key, 0);
        return;
    }
    a->unknown++;
}

void rlb_lease_flush(rlb_lease_audit_t *a)
{
    uint32_t i;

    for (i = 0; i < a->ncallers; i++)
        if (a->callers[i].n > 0)
            settle_caller(a, i, 1);
}
