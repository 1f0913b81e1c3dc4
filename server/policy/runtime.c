/* The policy in force; see runtime.h. */
#include "policy/runtime.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "rl_error.h"
#include "rl_parse.h"
#include "base/util.h"

/* A rule's effective settings under the current switches. */
typedef struct rls_rule_rt_s {
    int mode;
    double scale; /* 1: unscaled */
    int quotas;   /* look for stored quotas */
    rls_rule_stats_t *stats;
} rule_rt_t;

uint64_t rls_scale_limit(uint64_t limit, double scale)
{
    double v;

    if (scale == 1.0)
        return limit;
    v = floor((double)limit * scale);
    if (v < 1)
        return 1;
    if (v >= 9223372036854775807.0)
        return INT64_MAX;
    return (uint64_t)v;
}

/* The counters of a rule name, made on first use and kept for the life of
 * the process, so a reload does not reset them. Past max_stats names, new
 * ones share one entry. Found through an open-addressed table of the
 * entries (at most half full), so a reload of many rules stays linear. */
static rls_rule_stats_t *stats_for(rls_runtime_t *rt, const char *name,
                                   size_t len)
{
    rls_rule_stats_t *s;
    uint32_t pos;

    if (rt->stats_cap == 0 || 2 * (rt->nstats + 1) > rt->stats_cap) {
        size_t cap = rt->stats_cap ? 2 * rt->stats_cap : 64, i;
        rls_rule_stats_t **t = calloc(cap, sizeof(*t));
        if (t == NULL)
            return &rt->other_stats;
        for (i = 0; i < rt->stats_cap; i++) {
            if ((s = rt->stats[i]) == NULL)
                continue;
            pos = (uint32_t)rl_hash(&rt->hash_key, s->name, strlen(s->name)) &
                  (uint32_t)(cap - 1);
            while (t[pos] != NULL)
                pos = (pos + 1) & (uint32_t)(cap - 1);
            t[pos] = s;
        }
        free(rt->stats);
        rt->stats = t;
        rt->stats_cap = cap;
    }
    pos = (uint32_t)rl_hash(&rt->hash_key, name, len) &
          (uint32_t)(rt->stats_cap - 1);
    for (; (s = rt->stats[pos]) != NULL;
         pos = (pos + 1) & (uint32_t)(rt->stats_cap - 1))
        if (strlen(s->name) == len && memcmp(s->name, name, len) == 0)
            return s;
    if (rt->nstats == rt->max_stats || (s = calloc(1, sizeof(*s))) == NULL)
        return &rt->other_stats;
    memcpy(s->name, name, len);
    rt->stats[pos] = s;
    rt->nstats++;
    return s;
}

rls_rule_stats_t *rls_runtime_stats(rls_runtime_t *rt, const char *name,
                                    size_t len)
{
    return stats_for(rt, name, len);
}

/* Works out every rule's effective settings into a new array. */
static rule_rt_t *compute(rls_runtime_t *rt, const rls_policy_t *p,
                          const rls_switches_t *sw)
{
    size_t n = rls_policy_count(p), i;
    rule_rt_t *a = calloc(n ? n : 1, sizeof(*a));

    if (a == NULL)
        return NULL;
    /* Switches are few; rules may be many: look each switch's rule up
     * instead of scanning the switches per rule. */
    for (i = 0; i < n; i++) {
        const rls_rule_t *r = rls_policy_rule_at(p, i);
        a[i].mode = r->mode;
        a[i].scale = 1.0;
        a[i].stats = stats_for(rt, r->name, r->name_len);
    }
    for (i = 0; i < sw->n; i++) {
        const rls_rule_t *r =
            rls_policy_find(p, sw->items[i].rule, strlen(sw->items[i].rule));
        if (r == NULL)
            continue;
        if (sw->items[i].mode >= 0)
            a[r->index].mode = sw->items[i].mode;
        if (sw->items[i].scale > 0)
            a[r->index].scale = sw->items[i].scale;
        a[r->index].quotas = sw->items[i].quotas;
    }
    if (sw->global_mode >= 0)
        for (i = 0; i < n; i++)
            a[i].mode = sw->global_mode;
    return a;
}

int rls_runtime_init(rls_runtime_t *rt, rls_policy_t *p, size_t max_rules)
{
    memset(rt, 0, sizeof(*rt));
    rt->sw.global_mode = -1;
    rt->max_stats = 4 * (max_rules ? max_rules : 1);
    strcpy(rt->other_stats.name, "(other)");
    rt->inline_mode = RLS_INLINE_ALLOW;
    rls_random_key(&rt->hash_key);
    if ((rt->rt = compute(rt, p, &rt->sw)) == NULL)
        return RL_ENOMEM;
    rt->policy = p;
    rt->generation = 1;
    return RL_OK;
}

void rls_runtime_free(rls_runtime_t *rt)
{
    size_t i;

    rls_policy_unref(rt->policy);
    free(rt->rt);
    rls_switches_free(&rt->sw);
    for (i = 0; i < rt->stats_cap; i++)
        free(rt->stats[i]);
    free(rt->stats);
    memset(rt, 0, sizeof(*rt));
}

int rls_runtime_set_policy(rls_runtime_t *rt, rls_policy_t *p)
{
    rule_rt_t *a = compute(rt, p, &rt->sw);

    if (a == NULL) {
        rls_policy_unref(p);
        return RL_ENOMEM;
    }
    if (rt->before_change != NULL)
        rt->before_change(rt->arg);
    free(rt->rt);
    rt->rt = a;
    rls_policy_unref(rt->policy);
    rt->policy = p;
    rt->generation++;
    if (rt->after_change != NULL)
        rt->after_change(rt->arg);
    return RL_OK;
}

int rls_runtime_set_switches(rls_runtime_t *rt, rls_switches_t *sw)
{
    rule_rt_t *a = compute(rt, rt->policy, sw);

    if (a == NULL) {
        rls_switches_free(sw);
        return RL_ENOMEM;
    }
    if (rt->before_change != NULL)
        rt->before_change(rt->arg);
    free(rt->rt);
    rt->rt = a;
    rls_switches_free(&rt->sw);
    rt->sw = *sw;
    memset(sw, 0, sizeof(*sw));
    if (rt->after_change != NULL)
        rt->after_change(rt->arg);
    return RL_OK;
}

int rls_switches_copy(rls_switches_t *dst, const rls_switches_t *src)
{
    *dst = *src;
    dst->items = NULL;
    if (src->n == 0)
        return RL_OK;
    if ((dst->items = malloc(src->n * sizeof(*src->items))) == NULL) {
        dst->n = 0;
        return RL_ENOMEM;
    }
    memcpy(dst->items, src->items, src->n * sizeof(*src->items));
    return RL_OK;
}

void rls_switches_free(rls_switches_t *sw)
{
    free(sw->items);
    sw->items = NULL;
    sw->n = 0;
}

static int field_is(const char *f, size_t len, const char *prefix)
{
    size_t n = strlen(prefix);

    return len >= n && memcmp(f, prefix, n) == 0;
}

int rls_switches_version(const char *v, size_t vl, int64_t *out)
{
    uint64_t u;

    *out = 0;
    if (rl_parse_u64n(v, vl, 0, INT64_MAX, &u) != RL_OK)
        return RL_EINVAL;
    *out = (int64_t)u;
    return RL_OK;
}

int rls_switches_parse(rls_switches_t *sw, size_t npairs,
                       const char *const *fields, const size_t *flens,
                       const char *const *values, const size_t *vlens,
                       size_t *bad)
{
    size_t i;

    memset(sw, 0, sizeof(*sw));
    sw->global_mode = -1;
    *bad = 0;
    if (npairs > 0 && (sw->items = calloc(npairs, sizeof(*sw->items))) == NULL)
        return RL_ENOMEM;
    for (i = 0; i < npairs; i++) {
        const char *f = fields[i], *v = values[i];
        size_t fl = flens[i], vl = vlens[i];
        char num[32];

        if (fl == 7 && memcmp(f, "version", 7) == 0) {
            if (rls_switches_version(v, vl, &sw->version) != RL_OK)
                (*bad)++;
        } else if (fl == 6 && memcmp(f, "global", 6) == 0) {
            if ((sw->global_mode = rls_mode_parse(v, vl)) < 0) {
                sw->global_mode = -1;
                (*bad)++;
            }
        } else if (field_is(f, fl, "mode:") || field_is(f, fl, "scale:") ||
                   field_is(f, fl, "quotas:")) {
            int kind = f[0]; /* 'm', 's' or 'q' */
            size_t skip = kind == 'm' ? 5 : kind == 's' ? 6 : 7,
                   rl = fl - skip, j;
            struct rls_switch_s *it = NULL;

            /* Only a name a rule can have: one with a NUL byte would
             * otherwise be stored cut at it, and apply to that rule. */
            if (!rls_rule_name_ok(f + skip, rl)) {
                (*bad)++;
                continue;
            }
            for (j = 0; j < sw->n; j++)
                if (strlen(sw->items[j].rule) == rl &&
                    memcmp(sw->items[j].rule, f + skip, rl) == 0)
                    it = &sw->items[j];
            if (it == NULL) {
                it = &sw->items[sw->n++];
                memcpy(it->rule, f + skip, rl);
                it->rule[rl] = '\0';
                it->mode = -1;
                it->scale = 0;
                it->quotas = 0;
            }
            if (kind == 'q') {
                it->quotas = vl == 1 && v[0] == '1';
                if (!it->quotas)
                    (*bad)++;
            } else if (kind == 'm') {
                if ((it->mode = rls_mode_parse(v, vl)) < 0) {
                    it->mode = -1;
                    (*bad)++;
                }
            } else {
                char *end;
                double d;
                if (vl == 0 || vl >= sizeof(num)) {
                    (*bad)++;
                    continue;
                }
                memcpy(num, v, vl);
                num[vl] = '\0';
                d = strtod(num, &end);
                if (*end != '\0' || !(d > 0 && d <= 1000))
                    (*bad)++;
                else
                    it->scale = d;
            }
        } else {
            (*bad)++;
        }
    }
    return RL_OK;
}

int rls_runtime_resolve(rls_runtime_t *rt, const char *rule, size_t rule_len,
                        const char *key, size_t key_len, rls_spec_t *spec)
{
    const rls_rule_t *r;
    const rule_rt_t *e;
    const rls_limits_t *ls;
    uint32_t i;

    if ((r = rls_policy_find(rt->policy, rule, rule_len)) == NULL)
        return RL_ENORULE;
    e = &rt->rt[r->index];
    ls = rls_rule_limits(r, key, key_len);
    spec->rule = r;
    spec->ns = 0;
    spec->stats = e->stats;
    spec->mode = e->mode;
    spec->limits = *ls;
    for (i = 0; i < spec->limits.n; i++) {
        rls_limit_t *l = &spec->limits.w[i];
        if (e->scale == 1.0)
            break;
        l->limit = rls_scale_limit(l->limit, e->scale);
        if (l->algo == RL_ALGO_GCRA) {
            /* The rate and the burst scale alike: the interval follows. */
            uint64_t t = rl_gcra_interval_us(l->limit, l->window_s);
            l->burst = rls_scale_limit(l->burst, e->scale);
            l->t_us = t ? t : 1;
            if (l->burst > RL_GCRA_CAP_MAX_US / l->t_us)
                l->burst = RL_GCRA_CAP_MAX_US / l->t_us;
        } else if (l->algo == RL_ALGO_SLIDING_COUNTER &&
                   l->limit > RL_SWC_LIMIT_MAX) {
            l->limit = RL_SWC_LIMIT_MAX;
        } else if (l->algo == RL_ALGO_SLIDING_LOG &&
                   l->limit > RL_SWL_LIMIT_MAX) {
            l->limit = RL_SWL_LIMIT_MAX;
        }
    }
    /* A quota stored with rl-ctl, when there is one, wins over the file's
     * override and the rule: it is the operator's latest word. */
    spec->quota = e->quotas;
    spec->scale = e->scale;
    /* A check of the rule's own (the caller marks charges and other
     * countings afterwards). */
    spec->charge = 0;
    spec->counting = RLS_COUNT_NATIVE;
    return RL_OK;
}

void rls_spec_off_result(const rls_spec_t *spec, uint64_t id,
                         rl_result_t *r)
{
    memset(r, 0, sizeof(*r));
    r->id = id;
    r->code = RL_CODE_OK;
    r->limit = r->remaining = spec->limits.w[0].algo == RL_ALGO_GCRA
                                  ? spec->limits.w[0].burst
                                  : spec->limits.w[0].limit;
    r->window_s = spec->limits.w[0].window_s;
    spec->stats->uncounted++;
}
