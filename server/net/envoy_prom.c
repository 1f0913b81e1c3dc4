/* envoy-ratelimit's Prometheus names of its per-descriptor counters; see
 * envoy_prom.h.
 *
 * Each series is mapped once, when it is made: its label set is found (or
 * made) in a table by its text, and the family of each of its counters is
 * fixed. A scrape then sums the series into their label sets, one pass
 * over each, and hashes nothing. */
#include "net/envoy_prom.h"

#include <stdlib.h>
#include <string.h>

#include "rl_error.h"

/* The exporter's families, in the order of default_mapper.yaml's regex
 * rules (the order they are tried in). */
static const int regex_order[RLS_ESTATS] = {
    RLS_ESTAT_NEAR_LIMIT, RLS_ESTAT_OVER_LIMIT, RLS_ESTAT_TOTAL_HITS,
    RLS_ESTAT_WITHIN_LIMIT, RLS_ESTAT_SHADOW_MODE};

/* ...and in the order client_golang writes them (by name). */
static const int page_order[RLS_ESTATS] = {
    RLS_ESTAT_NEAR_LIMIT, RLS_ESTAT_OVER_LIMIT, RLS_ESTAT_SHADOW_MODE,
    RLS_ESTAT_TOTAL_HITS, RLS_ESTAT_WITHIN_LIMIT};

/* A label set's text is at most a name's three components, escaped (each
 * byte at most two), and the label names. */
#define LABELS_MAX (2 * RLS_ESTATS_NAME_MAX + 64)

/* Appends label="s[0, n)" (after a ',' unless first), '\\', '"' and a
 * newline escaped as the text format wants. */
static void put_label(char *out, size_t *at, const char *label, const char *s,
                      size_t n, int first)
{
    size_t i;

    if (!first)
        out[(*at)++] = ',';
    memcpy(out + *at, label, strlen(label));
    *at += strlen(label);
    out[(*at)++] = '=';
    out[(*at)++] = '"';
    for (i = 0; i < n; i++) {
        char c = s[i];
        if (c == '\\' || c == '"' || c == '\n') {
            out[(*at)++] = '\\';
            c = c == '\n' ? 'n' : c;
        }
        out[(*at)++] = c;
    }
    out[(*at)++] = '"';
}

/* Whether ".<stat>" occurs in s[0, n). */
static int has_stat(const char *s, size_t n, const char *stat)
{
    size_t sl = strlen(stat), i;

    for (i = 0; i + sl < n; i++)
        if (s[i] == '.' && memcmp(s + i + 1, stat, sl) == 0)
            return 1;
    return 0;
}

static size_t gprobe(const rls_estats_t *t, const char *text, size_t len,
                     uint32_t *found)
{
    size_t mask = t->gtable_size - 1;
    size_t i = (size_t)rl_hash(&t->hk, text, len) & mask;

    for (;; i = (i + 1) & mask) {
        uint32_t v = t->gtable[i];
        const rls_estats_group_t *g;
        if (v == 0) {
            *found = 0;
            return i;
        }
        g = &t->g[v - 1];
        if (g->len == len && memcmp(g->labels, text, len) == 0) {
            *found = v;
            return i;
        }
    }
}

static int grow_gtable(rls_estats_t *t)
{
    size_t size = t->gtable_size ? t->gtable_size * 2 : 64, i;
    uint32_t *old = t->gtable, *nt;
    size_t old_size = t->gtable_size;

    if ((nt = calloc(size, sizeof(*nt))) == NULL)
        return RL_ENOMEM;
    t->gtable = nt;
    t->gtable_size = size;
    for (i = 0; i < old_size; i++)
        if (old[i] != 0) {
            uint32_t f;
            const rls_estats_group_t *g = &t->g[old[i] - 1];
            t->gtable[gprobe(t, g->labels, g->len, &f)] = old[i];
        }
    free(old);
    return RL_OK;
}

/* The label set called text, made when missing. Returns its index + 1, 0
 * without memory. */
static uint32_t group_of(rls_estats_t *t, const char *text, size_t len)
{
    rls_estats_group_t *g;
    uint32_t found;

    if (t->gtable_size != 0) {
        gprobe(t, text, len, &found);
        if (found != 0)
            return found;
    }
    if (t->ng >= UINT32_MAX - 1)
        return 0;
    if ((t->ng + 1) * 2 > t->gtable_size && grow_gtable(t) != RL_OK)
        return 0;
    if (t->ng == t->gcap) {
        size_t cap = t->gcap ? t->gcap * 2 : 16;
        rls_estats_group_t *v = realloc(t->g, cap * sizeof(*v));
        if (v == NULL)
            return 0;
        t->g = v;
        t->gcap = cap;
    }
    g = &t->g[t->ng];
    if ((g->labels = malloc(len + 1)) == NULL)
        return 0;
    memcpy(g->labels, text, len);
    g->labels[len] = '\0';
    g->len = (uint32_t)len;
    t->gtable[gprobe(t, text, len, &found)] = (uint32_t)++t->ng;
    return (uint32_t)t->ng;
}

int rls_estats_prom_map(rls_estats_t *t, rls_estats_series_t *s)
{
    static const char *const label[3] = {"domain", "key1", "key2"};
    char text[LABELS_MAX];
    const char *name = s->name, *rest;
    size_t from[3], to[3], n = s->name_len, m = 0, at = 0, i, restlen;
    int k, j;

    s->group = 0;
    /* The first three components and where the rest begins. */
    for (i = 0; m < 3; i++) {
        if (i == n || name[i] == '.') {
            from[m] = m == 0 ? 0 : to[m - 1] + 1;
            to[m] = i;
            m++;
            if (i == n)
                break;
        }
    }
    rest = name + (m == 3 ? to[2] : n);
    restlen = (size_t)(name + n - rest);
    /* The glob wants exactly two components, the regexes three or more;
     * a name of one matches neither (it has a domain and one entry at
     * least, so none is). */
    if (m < 2)
        return RL_OK;
    for (j = 0; j < (int)m; j++)
        put_label(text, &at, label[j], name + from[j], to[j] - from[j], j == 0);
    for (k = 0; k < RLS_ESTATS; k++) {
        s->fam[k] = (uint8_t)k;
        if (m < 3)
            continue;
        for (j = 0; j < RLS_ESTATS; j++) {
            int f = regex_order[j];
            if (f == k || has_stat(rest, restlen, rls_estats_stat_name(f))) {
                s->fam[k] = (uint8_t)f;
                break;
            }
        }
    }
    if ((s->group = group_of(t, text, at)) == 0)
        return RL_ENOMEM;
    return RL_OK;
}

int rls_estats_prom_metrics(const rls_estats_t *t, rl_buf_t *out)
{
    static const char help[] = "Metric autogenerated by statsd_exporter.";
    uint64_t *sum;
    size_t i;
    int k, j, rc = RL_OK;

    if (t->ng == 0)
        return RL_OK;
    if ((sum = calloc(t->ng * RLS_ESTATS, sizeof(*sum))) == NULL)
        return RL_ENOMEM;
    for (i = 0; i < t->n; i++) {
        const rls_estats_series_t *s = &t->s[i];
        if (s->group == 0)
            continue;
        for (k = 0; k < RLS_ESTATS; k++)
            sum[(s->group - 1) * RLS_ESTATS + s->fam[k]] += s->c[k];
    }
    for (j = 0; j < RLS_ESTATS && rc == RL_OK; j++) {
        int f = page_order[j], head = 0;
        const char *stat = rls_estats_stat_name(f);
        for (i = 0; i < t->ng && rc == RL_OK; i++) {
            uint64_t v = sum[i * RLS_ESTATS + f];
            if (v == 0)
                continue;
            if (!head) {
                rc = rl_buf_printf(out,
                                   "# HELP ratelimit_service_rate_limit_%s %s\n"
                                   "# TYPE ratelimit_service_rate_limit_%s "
                                   "counter\n",
                                   stat, help, stat);
                head = 1;
            }
            if (rc == RL_OK)
                rc = rl_buf_printf(out,
                                   "ratelimit_service_rate_limit_%s{%s} %llu\n",
                                   stat, t->g[i].labels, (unsigned long long)v);
        }
    }
    free(sum);
    return rc;
}

void rls_estats_prom_free(rls_estats_t *t)
{
    size_t i;

    for (i = 0; i < t->ng; i++)
        free(t->g[i].labels);
    free(t->g);
    free(t->gtable);
    t->g = NULL;
    t->gtable = NULL;
    t->ng = t->gcap = t->gtable_size = 0;
}
