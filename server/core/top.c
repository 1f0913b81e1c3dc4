/* Top offenders: see top.h. */
#include "core/top.h"

#include <stdlib.h>
#include <string.h>

#include <openssl/rand.h>

#include "base/prom.h"
#include "rl_error.h"

rls_top_t *rls_top_new(uint32_t k, uint32_t window_s)
{
    rls_top_t *t;
    unsigned i;

    if (k < 1 || k > RL_TOPK_K_MAX || window_s < 1 ||
        (t = calloc(1, sizeof(*t))) == NULL)
        return NULL;
    t->k = k;
    t->epoch_ms = (uint64_t)window_s * 1000;
    /* Callers choose the keys: the sketches' tables are hashed under a
     * key of the process's own. */
    if (RAND_bytes((unsigned char *)&t->hk, sizeof(t->hk)) != 1) {
        free(t);
        return NULL;
    }
    for (i = 0; i < RLS_TOP_LOOPS_MAX; i++) {
        pthread_mutex_init(&t->loops[i].mu, NULL);
        t->loops[i].all = t;
    }
    return t;
}

void rls_top_free(rls_top_t *t)
{
    unsigned i;
    size_t j;

    if (t == NULL)
        return;
    for (i = 0; i < RLS_TOP_LOOPS_MAX; i++) {
        rls_top_loop_t *l = &t->loops[i];
        for (j = 0; j < l->nrules; j++) {
            rl_topk_free(&l->rules[j]->sk[0]);
            rl_topk_free(&l->rules[j]->sk[1]);
            free(l->rules[j]);
        }
        pthread_mutex_destroy(&l->mu);
    }
    free(t);
}

rls_top_loop_t *rls_top_join(rls_top_t *t)
{
    unsigned i;

    if (t == NULL)
        return NULL;
    i = __atomic_fetch_add(&t->nloops, 1, __ATOMIC_ACQ_REL);
    return i < RLS_TOP_LOOPS_MAX ? &t->loops[i] : NULL;
}

static const char *name_of(const rls_rule_stats_t *st)
{
    return st->name[0] != '\0' ? st->name : "(inline)";
}

/* The loop's sketches of name (under l->mu), NULL: none. */
static rls_top_rule_t *find(const rls_top_loop_t *l, const char *name,
                            size_t len)
{
    size_t i;

    for (i = 0; i < l->nrules; i++)
        if (strlen(l->rules[i]->name) == len &&
            memcmp(l->rules[i]->name, name, len) == 0)
            return l->rules[i];
    return NULL;
}

/* A rule's first refusal on this loop: its two sketches (under l->mu). */
static rls_top_rule_t *rule_new(rls_top_loop_t *l, const char *name)
{
    rls_top_rule_t *r;

    if (l->nrules == RLS_TOP_RULES_MAX || (r = calloc(1, sizeof(*r))) == NULL)
        return NULL;
    if (rl_topk_init(&r->sk[0], l->all->k, &l->all->hk) != RL_OK ||
        rl_topk_init(&r->sk[1], l->all->k, &l->all->hk) != RL_OK) {
        rl_topk_free(&r->sk[0]);
        free(r);
        return NULL;
    }
    snprintf(r->name, sizeof(r->name), "%s", name);
    l->rules[l->nrules++] = r;
    return r;
}

/* Moves r on to epoch e: the current sketch becomes the previous one, or
 * both empty when more than one epoch went by. */
static void advance(rls_top_rule_t *r, uint64_t e)
{
    if (r->epoch[r->cur] == e)
        return;
    if (r->epoch[r->cur] + 1 == e) {
        r->cur ^= 1;
    } else {
        rl_topk_clear(&r->sk[r->cur ^ 1]);
        r->epoch[r->cur ^ 1] = e - 1;
    }
    rl_topk_clear(&r->sk[r->cur]);
    r->epoch[r->cur] = e;
}

void rls_top_refused(rls_top_loop_t *l, rls_rule_stats_t *st, const char *key,
                     size_t len, uint64_t now_ms)
{
    rls_top_rule_t *r;

    if (l == NULL || st == NULL || len == 0)
        return;
    pthread_mutex_lock(&l->mu);
    if ((r = st->top) == NULL) {
        const char *name = name_of(st);
        if ((r = find(l, name, strlen(name))) == NULL &&
            (r = rule_new(l, name)) == NULL) {
            l->dropped++;
            pthread_mutex_unlock(&l->mu);
            return;
        }
        st->top = r;
    }
    advance(r, now_ms / l->all->epoch_ms);
    rl_topk_add(&r->sk[r->cur], key, len, 1);
    l->counted++;
    pthread_mutex_unlock(&l->mu);
}

/* The live epochs of r at epoch e read out into s (*ns more), under the
 * loop's lock. */
static int read_rule(const rls_top_rule_t *r, uint64_t e, rl_topk_sum_t *s,
                     size_t *ns)
{
    int i, rc;

    for (i = 0; i < 2; i++) {
        if (r->sk[i].total == 0 || r->epoch[i] + 1 < e || r->epoch[i] > e)
            continue;
        if ((rc = rl_topk_read(&r->sk[i], &s[*ns])) != RL_OK)
            return rc;
        (*ns)++;
    }
    return RL_OK;
}

int rls_top_read(rls_top_t *t, const char *name, size_t len, uint64_t now_ms,
                 size_t max, rl_topk_sum_t *out, uint64_t *since_ms)
{
    rl_topk_sum_t s[2 * RLS_TOP_LOOPS_MAX] = {{0}};
    uint64_t e = now_ms / t->epoch_ms;
    unsigned nl = __atomic_load_n(&t->nloops, __ATOMIC_ACQUIRE), i;
    size_t ns = 0, j;
    int rc = RL_OK;

    memset(out, 0, sizeof(*out));
    *since_ms = (e > 0 ? e - 1 : 0) * t->epoch_ms;
    if (nl > RLS_TOP_LOOPS_MAX)
        nl = RLS_TOP_LOOPS_MAX;
    for (i = 0; i < nl && rc == RL_OK; i++) {
        rls_top_loop_t *l = &t->loops[i];
        const rls_top_rule_t *r;
        pthread_mutex_lock(&l->mu);
        if ((r = find(l, name, len)) != NULL)
            rc = read_rule(r, e, s, &ns);
        pthread_mutex_unlock(&l->mu);
    }
    if (rc == RL_OK)
        rc = rl_topk_merge(s, ns, max, out);
    for (j = 0; j < ns; j++)
        rl_topk_sum_free(&s[j]);
    return rc;
}

static int name_cmp(const void *a, const void *b)
{
    return strcmp(a, b);
}

int rls_top_names(rls_top_t *t, uint64_t now_ms,
                  char (**names)[RL_RULE_MAX + 1], size_t *n)
{
    unsigned nl = __atomic_load_n(&t->nloops, __ATOMIC_ACQUIRE), i;
    uint64_t e = now_ms / t->epoch_ms;
    char(*v)[RL_RULE_MAX + 1];
    size_t cap = 0, k = 0, j;

    *names = NULL;
    *n = 0;
    if (nl > RLS_TOP_LOOPS_MAX)
        nl = RLS_TOP_LOOPS_MAX;
    for (i = 0; i < nl; i++) {
        pthread_mutex_lock(&t->loops[i].mu);
        cap += t->loops[i].nrules;
        pthread_mutex_unlock(&t->loops[i].mu);
    }
    /* A loop may add rules meanwhile: counted again under its lock. */
    cap += RLS_TOP_RULES_MAX;
    if ((v = malloc(cap * sizeof(*v))) == NULL)
        return RL_ENOMEM;
    for (i = 0; i < nl; i++) {
        rls_top_loop_t *l = &t->loops[i];
        pthread_mutex_lock(&l->mu);
        for (j = 0; j < l->nrules && k < cap; j++) {
            const rls_top_rule_t *r = l->rules[j];
            int live = 0, x;
            for (x = 0; x < 2; x++)
                live |= r->sk[x].total > 0 && r->epoch[x] + 1 >= e &&
                        r->epoch[x] <= e;
            if (live)
                memcpy(v[k++], r->name, sizeof(r->name));
        }
        pthread_mutex_unlock(&l->mu);
    }
    qsort(v, k, sizeof(*v), name_cmp);
    for (i = 0, j = 0; j < k; j++)
        if (i == 0 || strcmp(v[i - 1], v[j]) != 0)
            memmove(v[i++], v[j], sizeof(*v));
    *names = v;
    *n = i;
    return RL_OK;
}

/* A label value as Prometheus' text format escapes it: backslash, quote
 * and newline; a byte outside printable ASCII, and '%', as %XX (the
 * format is UTF-8 and a caller's key may not be; one key, one value, so
 * two keys never make one series). */
static int label_value(rl_buf_t *out, const char *s, size_t n)
{
    size_t i;
    int rc = RL_OK;

    for (i = 0; i < n && rc == RL_OK; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '\\')
            rc = rl_buf_append(out, "\\\\", 2);
        else if (c == '"')
            rc = rl_buf_append(out, "\\\"", 2);
        else if (c == '\n')
            rc = rl_buf_append(out, "\\n", 2);
        else if (c < 0x20 || c >= 0x7f || c == '%')
            rc = rl_buf_printf(out, "%%%02X", c);
        else
            rc = rl_buf_append(out, s + i, 1);
    }
    return rc;
}

typedef struct {
    const char *name;
    rl_topk_sum_t s;
} ranked_t;

static int ranked_cmp(const void *pa, const void *pb)
{
    const ranked_t *a = pa, *b = pb;

    if (a->s.total != b->s.total)
        return a->s.total > b->s.total ? -1 : 1;
    return strcmp(a->name, b->name);
}

int rls_top_metrics(rls_top_t *t, uint64_t now_ms, uint32_t per_rule,
                    rl_buf_t *out)
{
    uint64_t counted = 0, dropped = 0, since;
    char(*names)[RL_RULE_MAX + 1] = NULL;
    ranked_t *rk = NULL;
    size_t n = 0, i, j;
    unsigned l;
    int rc;

    if (t == NULL)
        return RL_OK;
    for (l = 0; l < RLS_TOP_LOOPS_MAX; l++) {
        pthread_mutex_lock(&t->loops[l].mu);
        counted += t->loops[l].counted;
        dropped += t->loops[l].dropped;
        pthread_mutex_unlock(&t->loops[l].mu);
    }
    if ((rc = rls_prom_counter(out, "rl_top_refusals_total",
                               "Refusals counted in the top-offenders "
                               "sketches (--top-k).",
                               counted)) != RL_OK ||
        (rc = rls_prom_counter(out, "rl_top_refusals_dropped_total",
                               "Refusals of rules past the sketches' cap "
                               "(1024 a loop), or out of memory.",
                               dropped)) != RL_OK)
        return rc;
    if (per_rule == 0)
        return RL_OK;
    if ((rc = rls_top_names(t, now_ms, &names, &n)) != RL_OK)
        return rc;
    if (n > 0 && (rk = calloc(n, sizeof(*rk))) == NULL) {
        free(names);
        return RL_ENOMEM;
    }
    for (i = 0; i < n && rc == RL_OK; i++) {
        rk[i].name = names[i];
        rc = rls_top_read(t, names[i], strlen(names[i]), now_ms, per_rule,
                          &rk[i].s, &since);
    }
    if (rc == RL_OK) {
        if (n > 0) /* rk is NULL without names */
            qsort(rk, n, sizeof(*rk), ranked_cmp);
        rc = rls_prom_family(out, "rl_top_refused", "gauge",
                             "--top-metric: the callers refused most per "
                             "rule over the top-offenders window (an upper "
                             "bound, within N/k: docs/server.md).");
    }
    for (i = 0; i < n && i < RLS_TOP_METRIC_RULES && rc == RL_OK; i++)
        for (j = 0; j < rk[i].s.n && rc == RL_OK; j++) {
            const rl_topk_entry_t *e = &rk[i].s.e[j];
            if ((rc = rl_buf_printf(out, "rl_top_refused{rule=\"")) == RL_OK &&
                (rc = label_value(out, rk[i].name, strlen(rk[i].name))) ==
                    RL_OK &&
                (rc = rl_buf_printf(out, "\",key=\"")) == RL_OK &&
                (rc = label_value(out, e->key, e->len)) == RL_OK)
                rc = rl_buf_printf(out, "\"} %llu\n",
                                   (unsigned long long)e->count);
        }
    for (i = 0; i < n; i++)
        rl_topk_sum_free(&rk[i].s);
    free(rk);
    free(names);
    return rc;
}
