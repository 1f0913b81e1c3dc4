/* envoy-ratelimit's descriptor configuration, the tree; see conf.h.
 *
 * Nodes live in one array; one open-addressed table, keyed by (domain,
 * parent, key, value), finds a node's child in O(1) whatever the fan-out.
 * The files are read into it by conf_yaml.c, which builds through
 * rls_envoy_conf_new and rls_envoy_conf_finish (conf_int.h). */
#include "envoy/conf.h"

#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "envoy/conf_int.h"
#include "rl_error.h"
#include "rl_hash.h"
#include "base/util.h"

/* How a domain that does not say counts (--envoy-counting). */
static int default_counting = RLS_ENVOY_COUNT_ENVOY;

void rls_envoy_conf_set_counting(int counting)
{
    default_counting = counting;
}

int rls_envoy_conf_counting(const rls_envoy_domain_t *d)
{
    return d->counting != RLS_ENVOY_COUNT_DEFAULT ? d->counting
                                                  : default_counting;
}

static uint64_t node_hash(const rls_envoy_conf_t *c, uint32_t domain,
                          uint32_t parent, const char *key, size_t klen,
                          const char *value, size_t vlen, int has_value)
{
    uint64_t h[4];

    h[0] = rl_hash(&c->hash_key, key, klen);
    h[1] = has_value ? rl_hash(&c->hash_key, value, vlen) : 0x9e3779b97f4a7c15u;
    h[2] = domain;
    h[3] = ((uint64_t)parent << 1) | (uint64_t)(has_value != 0);
    return rl_hash(&c->hash_key, h, sizeof(h));
}

static int node_is(const rls_envoy_node_t *x, uint32_t domain, uint32_t parent,
                   const char *key, size_t klen, const char *value, size_t vlen,
                   int has_value)
{
    if (x->domain != domain || x->parent != parent || x->key_len != klen ||
        memcmp(x->key, key, klen) != 0)
        return 0;
    if ((x->value != NULL) != (has_value != 0))
        return 0;
    return !has_value ||
           (x->value_len == vlen && memcmp(x->value, value, vlen) == 0);
}

static const rls_envoy_node_t *find(const rls_envoy_conf_t *c, uint32_t domain,
                                    uint32_t parent, const char *key,
                                    size_t klen, const char *value, size_t vlen,
                                    int has_value)
{
    uint32_t i;

    if (c->index == NULL)
        return NULL;
    i = (uint32_t)node_hash(c, domain, parent, key, klen, value, vlen,
                            has_value) &
        c->mask;
    for (; c->index[i] != 0; i = (i + 1) & c->mask) {
        const rls_envoy_node_t *x = &c->nodes[c->index[i] - 1];
        if (node_is(x, domain, parent, key, klen, value, vlen, has_value))
            return x;
    }
    return NULL;
}

/* Indexes every node; duplicates (same key and value under one parent)
 * are errors, as in envoy-ratelimit. */
static int build_index(rls_envoy_builder_t *b, const int *lines)
{
    rls_envoy_conf_t *c = b->c;
    size_t size = 16, k;

    while (size < c->n * 2)
        size <<= 1;
    c->index = calloc(size, sizeof(*c->index));
    if (c->index == NULL) {
        b->nomem = 1;
        return RL_ENOMEM;
    }
    c->mask = (uint32_t)(size - 1);
    if ((c->wild = calloc(c->n ? c->n : 1, sizeof(*c->wild))) == NULL) {
        b->nomem = 1;
        return RL_ENOMEM;
    }
    for (k = 0; k < c->n; k++) {
        rls_envoy_node_t *x = &c->nodes[k];
        const rls_envoy_node_t *first;
        uint32_t i;
        /* A wildcard is indexed too, by its pattern: a second one with the
         * same pattern is a duplicate, and a value spelling the pattern
         * finds it (as the glob would). */
        if (x->wildcard)
            c->wild[c->nwild++] = (uint32_t)k;
        if ((first = find(c, x->domain, x->parent, x->key, x->key_len,
                          x->value, x->value_len, x->value != NULL)) !=
            NULL) {
            rls_diag_add(b->d, b->file, lines[k],
                         "duplicate descriptor key '%s'%s%s%s (first at line "
                         "%d)",
                         x->key, x->value ? " value '" : "",
                         x->value ? x->value : "", x->value ? "'" : "",
                         lines[first->index]);
            continue;
        }
        i = (uint32_t)node_hash(c, x->domain, x->parent, x->key, x->key_len,
                                x->value, x->value_len, x->value != NULL) &
            c->mask;
        while (c->index[i] != 0)
            i = (i + 1) & c->mask;
        c->index[i] = (uint32_t)k + 1;
    }
    return RL_OK;
}

static void conf_free(rls_envoy_conf_t *c)
{
    if (c == NULL)
        return;
    rls_arena_free(&c->arena);
    free(c->nodes);
    free(c->domains);
    free(c->index);
    free(c->wild);
    free(c);
}

int rls_envoy_conf_finish(rls_envoy_builder_t *b, int *lines,
                          rls_envoy_conf_t **out)
{
    size_t i;

    /* Duplicates are found while indexing, once every node is in. */
    if (!b->nomem)
        build_index(b, lines);
    free(lines);
    if (b->nomem) {
        conf_free(b->c);
        return RL_ENOMEM;
    }
    if (b->d->n > 0 || b->d->dropped > 0) {
        conf_free(b->c);
        return RL_EINVAL;
    }
    for (i = 0; i < b->c->warnings.n; i++)
        RLS_WARN("envoy config: loaded with a warning", " what=\"%s\"",
                 b->c->warnings.msg[i]);
    *out = b->c;
    return RL_OK;
}

rls_envoy_conf_t *rls_envoy_conf_new(void)
{
    rls_envoy_conf_t *c = calloc(1, sizeof(*c));

    if (c == NULL)
        return NULL;
    c->refs = 1;
    /* Lookups hash what clients send: a random key, so that no client can
     * aim its entries at one chain. */
    rls_random_key(&c->hash_key);
    return c;
}

/* Atomic: with --threads every loop's gRPC service holds the one tree
 * the first loop built, and drops it on its own thread. */
rls_envoy_conf_t *rls_envoy_conf_ref(rls_envoy_conf_t *c)
{
    __atomic_add_fetch(&c->refs, 1, __ATOMIC_RELAXED);
    return c;
}

void rls_envoy_conf_unref(rls_envoy_conf_t *c)
{
    if (c != NULL && __atomic_sub_fetch(&c->refs, 1, __ATOMIC_ACQ_REL) == 0)
        conf_free(c);
}

size_t rls_envoy_conf_domains(const rls_envoy_conf_t *c)
{
    return c->nd;
}

size_t rls_envoy_conf_nodes(const rls_envoy_conf_t *c)
{
    return c->n;
}

const rls_envoy_domain_t *rls_envoy_conf_domain(const rls_envoy_conf_t *c,
                                                const char *name, size_t len)
{
    size_t i;

    /* Few domains (one per file): a scan. */
    for (i = 0; i < c->nd; i++)
        if (c->domains[i].name != NULL && c->domains[i].name_len == len &&
            memcmp(c->domains[i].name, name, len) == 0)
            return &c->domains[i];
    return NULL;
}

const rls_envoy_domain_t *rls_envoy_conf_domain_at(const rls_envoy_conf_t *c,
                                                   uint32_t i)
{
    return i < c->nd ? &c->domains[i] : NULL;
}

const rls_envoy_node_t *rls_envoy_conf_step(const rls_envoy_conf_t *c,
                                            const rls_envoy_domain_t *d,
                                            const rls_envoy_node_t *parent,
                                            const char *key, size_t klen,
                                            const char *value, size_t vlen)
{
    uint32_t di = (uint32_t)(d - c->domains);
    uint32_t pi = parent != NULL ? parent->index + 1 : 0;
    const rls_envoy_node_t *x;

    size_t i;

    if ((x = find(c, di, pi, key, klen, value, vlen, 1)) != NULL)
        return x;
    /* Wildcards: few, scanned in file order (envoy-ratelimit's). */
    for (i = 0; i < c->nwild; i++) {
        x = &c->nodes[c->wild[i]];
        if (x->domain == di && x->parent == pi && x->key_len == klen &&
            memcmp(x->key, key, klen) == 0 &&
            rls_envoy_glob(x->value, x->value_len, value, vlen))
            return x;
    }
    return find(c, di, pi, key, klen, NULL, 0, 0);
}

const rls_diag_t *rls_envoy_conf_warnings(const rls_envoy_conf_t *c)
{
    return &c->warnings;
}

uint32_t rls_envoy_unit_seconds(int unit)
{
    switch (unit) {
    case RLS_ENVOY_SECOND:
        return 1;
    case RLS_ENVOY_MINUTE:
        return 60;
    case RLS_ENVOY_HOUR:
        return 3600;
    case RLS_ENVOY_DAY:
        return 86400;
    case RLS_ENVOY_WEEK:
        return 7 * 86400;
    case RLS_ENVOY_MONTH:
        return 30 * 86400;
    case RLS_ENVOY_YEAR:
        return 365 * 86400;
    default:
        return 0;
    }
}

int rls_envoy_unit_of(uint32_t window_s)
{
    int u;

    for (u = RLS_ENVOY_SECOND; u <= RLS_ENVOY_WEEK; u++)
        if (rls_envoy_unit_seconds(u) == window_s)
            return u;
    return 0;
}

/* The first place needle occurs in hay, or NULL. */
static const char *find_in(const char *hay, size_t hlen, const char *needle,
                           size_t nlen)
{
    size_t i;

    if (nlen == 0)
        return hay;
    if (nlen > hlen)
        return NULL;
    /* memchr for the first byte, then a compare: linear for the values
     * requests bring in practice, and at worst hlen * nlen, both bounded
     * (a value by the request's size, a piece by the file's). */
    for (i = 0; i + nlen <= hlen;) {
        const char *p = memchr(hay + i, needle[0], hlen - nlen + 1 - i);
        if (p == NULL)
            return NULL;
        if (memcmp(p, needle, nlen) == 0)
            return p;
        i = (size_t)(p - hay) + 1;
    }
    return NULL;
}

int rls_envoy_glob(const char *pat, size_t plen, const char *value, size_t vlen)
{
    const char *first = memchr(pat, '*', plen), *last, *p, *end;
    size_t pre, suf;

    if (first == NULL)
        return plen == vlen && memcmp(pat, value, vlen) == 0;
    /* The literal head and tail must match where they stand; each middle
     * piece is then taken at its first place after the one before: for
     * '*' alone that leftmost choice never loses a match, so nothing is
     * tried twice. */
    last = pat + plen - 1;
    while (*last != '*')
        last--;
    pre = (size_t)(first - pat);
    suf = (size_t)(pat + plen - last - 1);
    if (vlen < pre + suf || memcmp(value, pat, pre) != 0 ||
        memcmp(value + vlen - suf, last + 1, suf) != 0)
        return 0;
    p = value + pre;
    end = value + vlen - suf;
    while (first < last) {
        const char *next = memchr(first + 1, '*', (size_t)(last - first));
        size_t n = (size_t)(next - first - 1);
        const char *at = find_in(p, (size_t)(end - p), first + 1, n);
        if (at == NULL)
            return 0;
        p = at + n;
        first = next;
    }
    return 1;
}

const rls_envoy_node_t *rls_envoy_conf_node_at(const rls_envoy_conf_t *c,
                                               uint32_t i)
{
    return &c->nodes[i];
}
