/* envoy-ratelimit's per-descriptor statistics; see envoy_stats.h.
 *
 * Series live in one array that only grows (an index stays valid across
 * reloads), found by name through an open-addressing table under a
 * per-process SipHash key (per-value names come from requests). Each of
 * the last two configurations has a cache from node index to series, so
 * that a descriptor's count costs an array read once its node has been
 * counted under that configuration. */
#include "envoy/stats.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "envoy/statsd.h"
#include "base/prom.h"
#include "rl_error.h"
#include "base/util.h"

int rls_estats_init(rls_estats_t *t, size_t max_values)
{
    memset(t, 0, sizeof(*t));
    t->max_values = max_values;
    t->near_ratio = RLS_ESTATS_NEAR_RATIO;
    rls_random_key(&t->hk);
    rls_eprom_init(&t->prom, &t->hk);
    rls_hist_init(&t->calls, rls_estats_call_bounds_us,
                  sizeof(rls_estats_call_bounds_us) /
                      sizeof(rls_estats_call_bounds_us[0]));
    return RL_OK;
}

void rls_estats_free(rls_estats_t *t)
{
    size_t i;

    if (t == NULL)
        return;
    for (i = 0; i < t->n; i++)
        free(t->s[i].name);
    free(t->s);
    free(t->table);
    for (i = 0; i < 2; i++) {
        rls_envoy_conf_unref(t->cache[i].conf);
        free(t->cache[i].slot);
    }
    rls_eprom_free(&t->prom);
    memset(t, 0, sizeof(*t));
}

/* ------------------------------------------------------------------------ */
/* Names */

/* Appends s[0, n) at out[*at], bytes that would break a statsd line or a
 * label as '_', ':' and '|' as '_' (the reference's SanitizeStatName).
 * Returns 0 when it does not fit. */
static int put(char *out, size_t *at, const char *s, size_t n)
{
    size_t i;

    if (n > RLS_ESTATS_NAME_MAX - *at)
        return 0;
    for (i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        out[(*at)++] =
            ch <= 0x20 || ch >= 0x7f || ch == ':' || ch == '|' ? '_' : (char)ch;
    }
    return 1;
}

static int digit(char c)
{
    return c >= '0' && c <= '9';
}

/* The end of an IPv4-looking match of \d{1,3}(\.\d{1,3}){3} at s[p] (as
 * Go's regexp finds it: a group before a dot is the whole digit run before
 * it; the last is up to three digits), or 0. */
static size_t ipv4_at(const char *s, size_t n, size_t p)
{
    size_t g, run;

    for (g = 0; g < 4; g++) {
        for (run = 0; p + run < n && digit(s[p + run]); run++)
            ;
        if (run == 0)
            return 0;
        if (g == 3)
            return p + (run > 3 ? 3 : run);
        if (run > 3 || p + run >= n || s[p + run] != '.')
            return 0;
        p += run + 1;
    }
    return 0;
}

/* The reference writes an IPv4 address's dots as '_' wherever one appears
 * in a stat name (so remote_address_10.0.0.1 is one statsd segment). */
static void sanitize_ipv4(char *s, size_t n)
{
    size_t p = 0, end, k;

    while (p < n) {
        if (digit(s[p]) && (end = ipv4_at(s, n, p)) != 0) {
            for (k = p; k < end; k++)
                if (s[k] == '.')
                    s[k] = '_';
            p = end;
        } else {
            p++;
        }
    }
}

/* Appends ".<key>[_<value>]" (the value, when there is one, followed by
 * '*' for a wildcard). */
static int put_entry(char *out, size_t *at, const char *k, size_t klen,
                     const char *v, size_t vlen, int star)
{
    if (!put(out, at, ".", 1) || !put(out, at, k, klen))
        return 0;
    if (v == NULL || (vlen == 0 && !star))
        return 1;
    return put(out, at, "_", 1) && put(out, at, v, vlen) &&
           (!star || put(out, at, "*", 1));
}

#define CHAIN_MAX 64

/* x's chain of nodes, top first, into chain[CHAIN_MAX]. Nodes are one
 * array in their configuration: the parents are found from x alone.
 * Returns the depth, 0 past CHAIN_MAX. */
static size_t chain_of(const rls_envoy_node_t *x,
                       const rls_envoy_node_t **chain)
{
    const rls_envoy_node_t *base = x - x->index, *up = x;
    size_t depth = 0, i;

    for (; up != NULL; depth++) {
        if (depth == CHAIN_MAX)
            return 0;
        up = up->parent != 0 ? &base[up->parent - 1] : NULL;
    }
    for (i = depth, up = x; i-- > 0;) {
        chain[i] = up;
        up = up->parent != 0 ? &base[up->parent - 1] : NULL;
    }
    return depth;
}

size_t rls_estats_node_name(char *out, const rls_envoy_domain_t *dom,
                            const rls_envoy_node_t *x)
{
    const rls_envoy_node_t *chain[CHAIN_MAX];
    size_t depth = chain_of(x, chain), at = 0, i;

    if (depth == 0 || !put(out, &at, dom->name, dom->name_len))
        return 0;
    for (i = 0; i < depth; i++) {
        const rls_envoy_node_t *c = chain[i];
        /* A wildcard's value is its pattern, '*'s included. */
        if (!put_entry(out, &at, c->key, c->key_len, c->value, c->value_len, 0))
            return 0;
    }
    sanitize_ipv4(out, at);
    out[at] = '\0';
    return at;
}

/* The name of a per-value series (config_impl.go's GetLimit): with
 * detailed_metric, "<k>_<v>" of every entry of the request; else, with
 * value_to_metric on the node matched at level i (bit i of v2m), the
 * request's value where that node has none of its own (key alone) or a
 * wildcard, and the node's own elsewhere. Returns the length or 0. */
static size_t value_name(char *out, const rls_envoy_domain_t *dom,
                         const rls_envoy_node_t *const *chain, size_t depth,
                         const char *const *keys, const size_t *klens,
                         const char *const *values, const size_t *vlens,
                         size_t n, int detailed, uint64_t v2m)
{
    size_t at = 0, i;

    if (!put(out, &at, dom->name, dom->name_len))
        return 0;
    for (i = 0; i < n; i++) {
        const rls_envoy_node_t *c = i < depth ? chain[i] : NULL;
        int mine = i < 64 && (v2m >> i & 1);
        int ok;
        if (detailed)
            ok = put(out, &at, ".", 1) && put(out, &at, keys[i], klens[i]) &&
                 put(out, &at, "_", 1) && put(out, &at, values[i], vlens[i]);
        else if (c == NULL || (c->value == NULL && !mine))
            ok = put_entry(out, &at, keys[i], klens[i], NULL, 0, 0);
        else if (c->value != NULL && c->wildcard && !mine)
            ok = put_entry(out, &at, keys[i], klens[i], c->value, c->value_len,
                           0);
        else
            ok = put_entry(out, &at, keys[i], klens[i], values[i], vlens[i], 0);
        if (!ok)
            return 0;
    }
    sanitize_ipv4(out, at);
    out[at] = '\0';
    return at;
}

/* A request-supplied limit's name, the reference's descriptorKey():
 * "<domain>.<k1>[_<v1>].<k2>...". */
static size_t request_name(char *out, const rls_envoy_domain_t *dom,
                           const char *const *keys, const size_t *klens,
                           const char *const *values, const size_t *vlens,
                           size_t n)
{
    size_t at = 0, i;

    if (!put(out, &at, dom->name, dom->name_len))
        return 0;
    for (i = 0; i < n; i++)
        if (!put_entry(out, &at, keys[i], klens[i], values[i], vlens[i], 0))
            return 0;
    sanitize_ipv4(out, at);
    out[at] = '\0';
    return at;
}

/* ------------------------------------------------------------------------ */
/* The table */

static size_t probe(const rls_estats_t *t, const char *name, size_t len,
                    uint32_t *found)
{
    size_t mask = t->table_size - 1;
    size_t i = (size_t)rl_hash(&t->hk, name, len) & mask;

    for (;; i = (i + 1) & mask) {
        uint32_t v = t->table[i];
        const rls_estats_series_t *s;
        if (v == 0) {
            *found = 0;
            return i;
        }
        s = &t->s[v - 1];
        if (s->name_len == len && memcmp(s->name, name, len) == 0) {
            *found = v;
            return i;
        }
    }
}

static int grow_table(rls_estats_t *t)
{
    size_t size = t->table_size ? t->table_size * 2 : 64, i;
    uint32_t *old = t->table, *nt;
    size_t old_size = t->table_size;

    if ((nt = calloc(size, sizeof(*nt))) == NULL)
        return RL_ENOMEM;
    t->table = nt;
    t->table_size = size;
    for (i = 0; i < old_size; i++)
        if (old[i] != 0) {
            uint32_t f;
            const rls_estats_series_t *s = &t->s[old[i] - 1];
            t->table[probe(t, s->name, s->name_len, &f)] = old[i];
        }
    free(old);
    return RL_OK;
}

/* The series called name (created when missing and, for per_value, under
 * the cap). Returns its index + 1 or an RLS_ESTATS_DROP_*. */
static uint32_t lookup(rls_estats_t *t, const char *name, size_t len,
                       size_t dom_len, int per_value)
{
    rls_estats_series_t *s;
    uint32_t found;
    size_t at;

    if (t->table_size != 0) {
        at = probe(t, name, len, &found);
        if (found != 0)
            return found;
    }
    if (per_value && t->values >= t->max_values)
        return RLS_ESTATS_DROP_VALUE;
    if (t->n >= UINT32_MAX - 2)
        return RLS_ESTATS_DROP_NAME;
    if ((t->n + 1) * 2 > t->table_size && grow_table(t) != RL_OK)
        return RLS_ESTATS_DROP_NAME;
    if (t->n == t->cap) {
        size_t cap = t->cap ? t->cap * 2 : 16;
        rls_estats_series_t *v = realloc(t->s, cap * sizeof(*v));
        if (v == NULL)
            return RLS_ESTATS_DROP_NAME;
        t->s = v;
        t->cap = cap;
    }
    s = &t->s[t->n];
    memset(s, 0, sizeof(*s));
    if ((s->name = malloc(len + 1)) == NULL)
        return RLS_ESTATS_DROP_NAME;
    memcpy(s->name, name, len);
    s->name[len] = '\0';
    s->name_len = (uint32_t)len;
    s->dom_len = (uint32_t)dom_len;
    s->per_value = per_value != 0;
    if (rls_eprom_map(&t->prom, s->name, s->name_len, &s->group, s->fam) !=
        RL_OK) {
        free(s->name);
        return RLS_ESTATS_DROP_NAME;
    }
    t->values += per_value != 0;
    at = probe(t, name, len, &found);
    t->table[at] = (uint32_t)++t->n;
    return (uint32_t)t->n;
}

/* The cache of conf's nodes, made (replacing the older of the two) when
 * conf is new. NULL without memory. */
static rls_estats_cache_t *cache_of(rls_estats_t *t, rls_envoy_conf_t *conf)
{
    rls_estats_cache_t fresh;

    if (t->cache[0].conf == conf)
        return &t->cache[0];
    if (t->cache[1].conf == conf)
        return &t->cache[1];
    fresh.n = rls_envoy_conf_nodes(conf);
    if ((fresh.slot = calloc(fresh.n ? fresh.n : 1, sizeof(uint32_t))) == NULL)
        return NULL;
    fresh.conf = rls_envoy_conf_ref(conf);
    rls_envoy_conf_unref(t->cache[1].conf);
    free(t->cache[1].slot);
    t->cache[1] = t->cache[0];
    t->cache[0] = fresh;
    return &t->cache[0];
}

/* detailed_metric and value_to_metric of a node (envoy/conf.h). */
static int node_detailed(const rls_envoy_node_t *x)
{
    return x->detailed_metric;
}

static int node_value_to_metric(const rls_envoy_node_t *x)
{
    return x->value_to_metric;
}

/* rls_estats_slot and rls_estats_slot_as: detailed and v2m as given, or
 * with from_nodes read from the nodes. */
static uint32_t slot_of(rls_estats_t *t, rls_envoy_conf_t *conf,
                        const rls_envoy_domain_t *dom,
                        const rls_envoy_node_t *x, int from_request,
                        const char *const *keys, const size_t *klens,
                        const char *const *values, const size_t *vlens,
                        size_t n, int detailed, uint64_t v2m, int from_nodes)
{
    char name[RLS_ESTATS_NAME_MAX + 1];
    const rls_envoy_node_t *chain[CHAIN_MAX];
    rls_estats_cache_t *c;
    uint32_t v;
    size_t len, depth, i;

    if (from_request) {
        if ((len = request_name(name, dom, keys, klens, values, vlens, n)) == 0)
            return RLS_ESTATS_DROP_NAME;
        return lookup(t, name, len, dom->name_len, 1);
    }
    if (x == NULL)
        return 0;
    /* A node named after itself is cached; one named after the request
     * never is, so a hit in the cache is the whole answer. */
    c = cache_of(t, conf);
    if (c != NULL && x->index < c->n && c->slot[x->index] != 0)
        return c->slot[x->index];
    if ((depth = chain_of(x, chain)) == 0)
        return RLS_ESTATS_DROP_NAME;
    if (from_nodes) {
        detailed = node_detailed(x);
        for (v2m = 0, i = 0; i < depth && i < 64; i++)
            if (node_value_to_metric(chain[i]))
                v2m |= (uint64_t)1 << i;
    }
    if (detailed || v2m != 0) {
        if ((len = value_name(name, dom, chain, depth, keys, klens, values,
                              vlens, n, detailed, v2m)) == 0)
            return RLS_ESTATS_DROP_NAME;
        return lookup(t, name, len, dom->name_len, 1);
    }
    if ((len = rls_estats_node_name(name, dom, x)) == 0)
        return RLS_ESTATS_DROP_NAME;
    v = lookup(t, name, len, dom->name_len, 0);
    if (c != NULL && x->index < c->n && v != RLS_ESTATS_DROP_NAME)
        c->slot[x->index] = v;
    return v;
}

uint32_t rls_estats_slot(rls_estats_t *t, rls_envoy_conf_t *conf,
                         const rls_envoy_domain_t *dom,
                         const rls_envoy_node_t *x, int from_request,
                         const char *const *keys, const size_t *klens,
                         const char *const *values, const size_t *vlens,
                         size_t n)
{
    return slot_of(t, conf, dom, x, from_request, keys, klens, values, vlens, n,
                   0, 0, 1);
}

uint32_t rls_estats_slot_as(rls_estats_t *t, rls_envoy_conf_t *conf,
                            const rls_envoy_domain_t *dom,
                            const rls_envoy_node_t *x, const char *const *keys,
                            const size_t *klens, const char *const *values,
                            const size_t *vlens, size_t n, int detailed,
                            uint64_t v2m)
{
    return slot_of(t, conf, dom, x, 0, keys, klens, values, vlens, n, detailed,
                   v2m, 0);
}

/* ------------------------------------------------------------------------ */
/* Counting */

void rls_estats_count(rls_estats_t *t, uint32_t slot, uint64_t hits,
                      const rl_result_t *r)
{
    rls_estats_series_t *s;
    uint64_t lim, rem, near, before, after, over;
    float f;

    if (slot == RLS_ESTATS_DROP_VALUE) {
        t->values_dropped += hits;
        return;
    }
    if (slot == RLS_ESTATS_DROP_NAME) {
        t->names_dropped += hits;
        return;
    }
    if (slot == 0 || slot > t->n)
        return;
    s = &t->s[slot - 1];
    s->c[RLS_ESTAT_TOTAL_HITS] += hits;
    if (r->code == RL_CODE_ERROR || r->error_len != 0)
        return;
    lim = r->limit;
    rem = r->remaining < lim ? r->remaining : lim;
    /* As the reference computes it, in float32 then floored. */
    f = (float)lim * (float)t->near_ratio;
    near = (uint64_t)floor((double)f);
    if (r->code == RL_CODE_OK && !r->shadow_refused) {
        after = lim - rem;
        before = after >= hits ? after - hits : 0;
        if (after > near)
            s->c[RLS_ESTAT_NEAR_LIMIT] += before >= near ? hits : after - near;
        s->c[RLS_ESTAT_WITHIN_LIMIT] += hits;
        return;
    }
    before = lim - rem;
    after = before + hits;
    if (before >= lim || after <= lim) {
        /* Already full, or refused for another window or an algorithm's
         * reason with room left: every hit was over. */
        over = hits;
    } else {
        over = after - lim;
        s->c[RLS_ESTAT_NEAR_LIMIT] += lim - (near > before ? near : before);
    }
    s->c[RLS_ESTAT_OVER_LIMIT] += over;
    if (r->shadow_refused)
        s->c[RLS_ESTAT_SHADOW_MODE] += over;
}

/* ------------------------------------------------------------------------ */
/* statsd */

void rls_estats_statsd(void *arg, rls_statsd_t *sd)
{
    static const char prefix[] = "ratelimit.service.rate_limit.";
    rls_estats_t *t = arg;
    rls_estats_series_t *s;
    size_t done, i;
    int k;

    /* Where the last flush stopped, then around once. */
    for (done = 0; done < t->n; done++) {
        i = (t->statsd_next + done) % t->n;
        s = &t->s[i];
        for (k = 0; k < RLS_ESTATS; k++) {
            if (s->c[k] == s->sent[k])
                continue;
            if (rls_statsd_counter(sd, prefix, s->name, s->name_len,
                                   rls_estats_stat_name(k),
                                   s->c[k] - s->sent[k]) != RL_OK) {
                t->statsd_next = i;
                return;
            }
            s->sent[k] = s->c[k];
        }
    }
}

/* ------------------------------------------------------------------------ */
/* /metrics */

/* Appends s[0, n) as a label value (names hold no control bytes; '"' and
 * '\\' are escaped). */
static int put_label(rl_buf_t *b, const char *s, size_t n)
{
    size_t i, from = 0;
    int rc;

    for (i = 0; i < n; i++)
        if (s[i] == '"' || s[i] == '\\') {
            if ((rc = rl_buf_append(b, s + from, i - from)) != RL_OK ||
                (rc = rl_buf_append(b, "\\", 1)) != RL_OK)
                return rc;
            from = i;
        }
    return rl_buf_append(b, s + from, n - from);
}

/* envoy-ratelimit's Prometheus families (envoy/prom.h): the call counter
 * and timer, then every series summed into its label set, one pass. */
static int prom_metrics(const rls_estats_t *t, rl_buf_t *out)
{
    uint64_t *sum;
    size_t i;
    int k, rc;

    if ((rc = rls_eprom_calls(&t->calls, out)) != RL_OK || t->prom.ng == 0)
        return rc;
    if ((sum = calloc(t->prom.ng * RLS_ESTATS, sizeof(*sum))) == NULL)
        return RL_ENOMEM;
    for (i = 0; i < t->n; i++) {
        const rls_estats_series_t *s = &t->s[i];
        if (s->group == 0)
            continue;
        for (k = 0; k < RLS_ESTATS; k++)
            sum[(s->group - 1) * RLS_ESTATS + s->fam[k]] += s->c[k];
    }
    rc = rls_eprom_families(&t->prom, sum, out);
    free(sum);
    return rc;
}

int rls_estats_metrics(const rls_estats_t *t, rl_buf_t *out)
{
    static const char *const help[RLS_ESTATS] = {
        "Hits (request cost) on each envoy-ratelimit descriptor with a "
        "limit: the reference's ratelimit.service.rate_limit.<domain>."
        "<key>.total_hits.",
        "Hits over the limit (the reference's .over_limit).",
        "Hits past the near-limit threshold (0.8 of the limit) and within "
        "it (the reference's .near_limit).",
        "Hits within the limit (the reference's .within_limit).",
        "Hits over the limit answered OK because of shadow_mode (the "
        "reference's .shadow_mode)."};
    char fam[64];
    size_t i;
    int k, rc;

    if (t == NULL)
        return RL_OK;
    for (k = 0; k < RLS_ESTATS; k++) {
        size_t fl = (size_t)snprintf(
            fam, sizeof(fam), "rl_envoy_rate_limit_%s_total", rls_estats_stat_name(k));
        if ((rc = rls_prom_family(out, fam, "counter", help[k])) != RL_OK)
            return rc;
        for (i = 0; i < t->n; i++) {
            const rls_estats_series_t *s = &t->s[i];
            size_t kl =
                s->name_len > s->dom_len ? s->name_len - s->dom_len - 1 : 0;
            /* A series that never counted (a request-supplied name whose
             * decision failed before counting) is not shown. Pieces, not
             * printf: a page may hold many thousands. */
            if (s->c[RLS_ESTAT_TOTAL_HITS] == 0)
                continue;
            if ((rc = rl_buf_append(out, fam, fl)) != RL_OK ||
                (rc = rl_buf_append(out, "{domain=\"", 9)) != RL_OK ||
                (rc = put_label(out, s->name, s->dom_len)) != RL_OK ||
                (rc = rl_buf_append(out, "\",key=\"", 7)) != RL_OK ||
                (rc = put_label(out, s->name + s->name_len - kl, kl)) !=
                    RL_OK ||
                (rc = rl_buf_append(out, "\"} ", 3)) != RL_OK ||
                (rc = rls_prom_u64(out, s->c[k])) != RL_OK ||
                (rc = rl_buf_append(out, "\n", 1)) != RL_OK)
                return rc;
        }
    }
    if ((rc = rls_prom_gauge(out, "rl_envoy_stats_series",
                             "envoy-ratelimit statistics series held (one "
                             "per stat name; never removed).",
                             t->n)) != RL_OK ||
        (rc = rls_prom_gauge(out, "rl_envoy_stats_value_series",
                             "Of those, series named after request values "
                             "(request-supplied limits), at most "
                             "--envoy-stats-max-values.",
                             t->values)) != RL_OK ||
        (rc = rls_prom_counter(out, "rl_envoy_stats_values_dropped_total",
                               "Hits not counted in any series because "
                               "--envoy-stats-max-values was reached.",
                               t->values_dropped)) != RL_OK)
        return rc;
    if ((rc = rls_prom_counter(out, "rl_envoy_stats_names_dropped_total",
                               "Hits not counted because their stat name was "
                               "over 512 bytes or memory ran out.",
                               t->names_dropped)) != RL_OK)
        return rc;
    return prom_metrics(t, out);
}

void rls_estats_call(rls_estats_t *t, uint64_t ms)
{
    if (t != NULL)
        rls_hist_observe(&t->calls, ms * 1000);
}
