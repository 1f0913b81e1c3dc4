/* Space-Saving and its summaries: see rl_topk.h. */
#include "rl_topk.h"

#include <stdlib.h>
#include <string.h>

#include "rl_error.h"

/* The fixed key a cut key's hash is under: every instance cuts alike. */
static const rl_hash_key_t cut_key = {0x726c746f706b6375u, 0x746b657973697068u};

size_t rl_topk_key(const char *key, size_t len, char *out, uint8_t *cut)
{
    static const char hex[] = "0123456789abcdef";
    uint64_t h;
    int i;

    if (len <= RL_TOPK_KEY_MAX) {
        memcpy(out, key, len);
        *cut = 0;
        return len;
    }
    memcpy(out, key, RL_TOPK_CUT);
    out[RL_TOPK_CUT] = '~';
    h = rl_siphash24(&cut_key, key, len);
    for (i = 0; i < 16; i++)
        out[RL_TOPK_CUT + 1 + i] = hex[(h >> (60 - 4 * i)) & 15];
    *cut = 1;
    return RL_TOPK_KEY_MAX;
}

static uint32_t buckets_for(uint32_t k)
{
    uint32_t nb = 1;

    while (nb < 2 * k)
        nb <<= 1;
    return nb;
}

size_t rl_topk_bytes(uint32_t k)
{
    return (size_t)k * (sizeof(rl_topk_entry_t) + sizeof(uint64_t) +
                        3 * sizeof(uint32_t)) +
           (size_t)buckets_for(k) * sizeof(uint32_t);
}

int rl_topk_init(rl_topk_t *t, uint32_t k, const rl_hash_key_t *hk)
{
    uint8_t *m;

    memset(t, 0, sizeof(*t));
    if (k < 1 || k > RL_TOPK_K_MAX)
        return RL_EINVAL;
    if ((m = malloc(rl_topk_bytes(k))) == NULL)
        return RL_ENOMEM;
    t->k = k;
    t->nb = buckets_for(k);
    t->hk = *hk;
    /* One block: the entries (the most aligned) first. */
    t->e = (rl_topk_entry_t *)(void *)m;
    t->hash = (uint64_t *)(void *)(t->e + k);
    t->heap = (uint32_t *)(void *)(t->hash + k);
    t->pos = t->heap + k;
    t->next = t->pos + k;
    t->bucket = t->next + k;
    rl_topk_clear(t);
    return RL_OK;
}

void rl_topk_free(rl_topk_t *t)
{
    if (t == NULL)
        return;
    free(t->e);
    memset(t, 0, sizeof(*t));
}

void rl_topk_clear(rl_topk_t *t)
{
    t->n = 0;
    t->total = 0;
    if (t->bucket != NULL)
        memset(t->bucket, 0, t->nb * sizeof(*t->bucket));
}

static void heap_swap(rl_topk_t *t, uint32_t a, uint32_t b)
{
    uint32_t x = t->heap[a];

    t->heap[a] = t->heap[b];
    t->heap[b] = x;
    t->pos[t->heap[a]] = a;
    t->pos[t->heap[b]] = b;
}

static void sift_up(rl_topk_t *t, uint32_t i)
{
    while (i > 0) {
        uint32_t p = (i - 1) / 2;
        if (t->e[t->heap[p]].count <= t->e[t->heap[i]].count)
            break;
        heap_swap(t, p, i);
        i = p;
    }
}

static void sift_down(rl_topk_t *t, uint32_t i)
{
    for (;;) {
        uint32_t l = 2 * i + 1, r = l + 1, m = i;
        if (l < t->n && t->e[t->heap[l]].count < t->e[t->heap[m]].count)
            m = l;
        if (r < t->n && t->e[t->heap[r]].count < t->e[t->heap[m]].count)
            m = r;
        if (m == i)
            return;
        heap_swap(t, i, m);
        i = m;
    }
}

static void unlink_entry(rl_topk_t *t, uint32_t x)
{
    uint32_t *p = &t->bucket[t->hash[x] & (t->nb - 1)];

    while (*p != x + 1)
        p = &t->next[*p - 1];
    *p = t->next[x];
}

static void link_entry(rl_topk_t *t, uint32_t x, uint64_t h)
{
    uint32_t *b = &t->bucket[h & (t->nb - 1)];

    t->hash[x] = h;
    t->next[x] = *b;
    *b = x + 1;
}

void rl_topk_add(rl_topk_t *t, const char *key, size_t len, uint64_t w)
{
    char k[RL_TOPK_KEY_MAX];
    uint8_t cut;
    size_t n = rl_topk_key(key, len, k, &cut);
    uint64_t h = rl_hash(&t->hk, k, n) ^ cut;
    uint32_t x, i;
    rl_topk_entry_t *e;

    t->total += w;
    for (i = t->bucket[h & (t->nb - 1)]; i != 0; i = t->next[i - 1]) {
        e = &t->e[i - 1];
        if (t->hash[i - 1] == h && e->len == n && e->cut == cut &&
            memcmp(e->key, k, n) == 0) {
            e->count += w;
            sift_down(t, t->pos[i - 1]);
            return;
        }
    }
    if (t->n < t->k) {
        x = t->n++;
        e = &t->e[x];
        e->count = w;
        e->err = 0;
        t->heap[x] = x;
        t->pos[x] = x;
        sift_up(t, x);
    } else {
        /* Space-Saving: the smallest entry gives its place, and its count
         * stays as the newcomer's error. */
        x = t->heap[0];
        e = &t->e[x];
        unlink_entry(t, x);
        e->err = e->count;
        e->count += w;
        sift_down(t, 0);
    }
    e->len = (uint16_t)n;
    e->cut = cut;
    memcpy(e->key, k, n);
    link_entry(t, x, h);
}

int rl_topk_read(const rl_topk_t *t, rl_topk_sum_t *s)
{
    memset(s, 0, sizeof(*s));
    s->total = t->total;
    s->floor = t->n == t->k && t->n > 0 ? t->e[t->heap[0]].count : 0;
    if (t->n == 0)
        return RL_OK;
    if ((s->e = malloc(t->n * sizeof(*s->e))) == NULL)
        return RL_ENOMEM;
    memcpy(s->e, t->e, t->n * sizeof(*s->e));
    s->n = t->n;
    return RL_OK;
}

void rl_topk_sum_free(rl_topk_sum_t *s)
{
    if (s == NULL)
        return;
    free(s->e);
    s->e = NULL;
    s->n = 0;
}

/* ---- merging -------------------------------------------------------- */

typedef struct {
    const rl_topk_entry_t *e;
    uint64_t floor; /* its summary's */
} ref_t;

static int key_cmp(const rl_topk_entry_t *a, const rl_topk_entry_t *b)
{
    if (a->cut != b->cut)
        return a->cut < b->cut ? -1 : 1;
    if (a->len != b->len)
        return a->len < b->len ? -1 : 1;
    return memcmp(a->key, b->key, a->len);
}

static int ref_cmp(const void *pa, const void *pb)
{
    return key_cmp(((const ref_t *)pa)->e, ((const ref_t *)pb)->e);
}

static int rank_cmp(const void *pa, const void *pb)
{
    const rl_topk_entry_t *a = pa, *b = pb;

    if (a->count != b->count)
        return a->count > b->count ? -1 : 1;
    if (a->err != b->err)
        return a->err < b->err ? -1 : 1;
    return key_cmp(a, b);
}

/* a + b, saturated (counts from the network: rl_topk_decode). */
static uint64_t add_sat(uint64_t a, uint64_t b)
{
    return a + b < a ? UINT64_MAX : a + b;
}

int rl_topk_merge(const rl_topk_sum_t *in, size_t nin, size_t max,
                  rl_topk_sum_t *out)
{
    uint64_t floors = 0, total = 0, dropped = 0;
    size_t nref = 0, i, j, ng = 0;
    ref_t *refs = NULL;
    rl_topk_entry_t *g = NULL;

    memset(out, 0, sizeof(*out));
    if (nin > RL_TOPK_MERGE_MAX || max < 1)
        return RL_EINVAL;
    for (i = 0; i < nin; i++) {
        if (in[i].n > RL_TOPK_K_MAX)
            return RL_EINVAL;
        nref += in[i].n;
        floors = add_sat(floors, in[i].floor);
        total = add_sat(total, in[i].total);
    }
    out->total = total;
    out->floor = floors;
    if (nref == 0)
        return RL_OK;
    if ((refs = malloc(nref * sizeof(*refs))) == NULL ||
        (g = malloc(nref * sizeof(*g))) == NULL) {
        free(refs);
        return RL_ENOMEM;
    }
    for (i = 0, nref = 0; i < nin; i++)
        for (j = 0; j < in[i].n; j++) {
            refs[nref].e = &in[i].e[j];
            refs[nref++].floor = in[i].floor;
        }
    qsort(refs, nref, sizeof(*refs), ref_cmp);
    /* One group per key: its entries' counts and errors, and for every
     * summary that does not hold it, that summary's floor (the floors'
     * sum less those of the summaries that do). */
    for (i = 0; i < nref; i = j) {
        uint64_t c = 0, err = 0, held = 0;
        for (j = i; j < nref && key_cmp(refs[i].e, refs[j].e) == 0; j++) {
            c = add_sat(c, refs[j].e->count);
            err = add_sat(err, refs[j].e->err);
            held = add_sat(held, refs[j].floor);
        }
        g[ng] = *refs[i].e;
        g[ng].count = add_sat(c, floors - (held < floors ? held : floors));
        g[ng].err = add_sat(err, floors - (held < floors ? held : floors));
        ng++;
    }
    free(refs);
    qsort(g, ng, sizeof(*g), rank_cmp);
    if (ng > max) {
        dropped = g[max].count;
        ng = max;
    }
    out->floor = floors > dropped ? floors : dropped;
    out->e = g;
    out->n = ng;
    return RL_OK;
}

/* ---- as text -------------------------------------------------------- */

int rl_topk_encode(const rl_topk_sum_t *s, uint64_t since_ms, uint64_t now_ms,
                   rl_buf_t *out)
{
    size_t i;
    int rc;

    if ((rc = rl_buf_printf(out, "rltop1 %llu %llu %llu %llu %zu\n",
                            (unsigned long long)since_ms,
                            (unsigned long long)now_ms,
                            (unsigned long long)s->total,
                            (unsigned long long)s->floor, s->n)) != RL_OK)
        return rc;
    for (i = 0; i < s->n; i++) {
        const rl_topk_entry_t *e = &s->e[i];
        if ((rc = rl_buf_printf(
                 out, "%llu %llu %u %u ", (unsigned long long)e->count,
                 (unsigned long long)e->err, e->cut, e->len)) != RL_OK ||
            (rc = rl_buf_append(out, e->key, e->len)) != RL_OK ||
            (rc = rl_buf_append(out, "\n", 1)) != RL_OK)
            return rc;
    }
    return RL_OK;
}

/* A decimal number of 1 to 20 digits up to UINT64_MAX at p[*at], then the
 * byte `end`. */
static int num(const char *p, size_t n, size_t *at, char end, uint64_t *v)
{
    size_t i = *at, d = 0;
    uint64_t x = 0;

    for (; i < n && p[i] >= '0' && p[i] <= '9'; i++, d++) {
        unsigned c = (unsigned)(p[i] - '0');
        if (x > (UINT64_MAX - c) / 10)
            return RL_EINVAL;
        x = x * 10 + c;
    }
    if (d == 0 || d > 20 || i >= n || p[i] != end)
        return RL_EINVAL;
    *at = i + 1;
    *v = x;
    return RL_OK;
}

int rl_topk_decode(const char *p, size_t n, rl_topk_sum_t *s,
                   uint64_t *since_ms, uint64_t *now_ms)
{
    uint64_t cnt, v[5];
    size_t at = 7, i;

    memset(s, 0, sizeof(*s));
    if (n < 7 || memcmp(p, "rltop1 ", 7) != 0 ||
        num(p, n, &at, ' ', since_ms) != RL_OK ||
        num(p, n, &at, ' ', now_ms) != RL_OK ||
        num(p, n, &at, ' ', &s->total) != RL_OK ||
        num(p, n, &at, ' ', &s->floor) != RL_OK ||
        num(p, n, &at, '\n', &cnt) != RL_OK || cnt > RL_TOPK_K_MAX)
        return RL_EINVAL;
    if (cnt > 0 && (s->e = malloc(cnt * sizeof(*s->e))) == NULL)
        return RL_ENOMEM;
    for (i = 0; i < cnt; i++) {
        rl_topk_entry_t *e = &s->e[i];
        if (num(p, n, &at, ' ', &v[0]) != RL_OK ||
            num(p, n, &at, ' ', &v[1]) != RL_OK ||
            num(p, n, &at, ' ', &v[2]) != RL_OK ||
            num(p, n, &at, ' ', &v[3]) != RL_OK || v[1] > v[0] || v[2] > 1 ||
            v[3] < 1 || v[3] > RL_TOPK_KEY_MAX || n - at < v[3] + 1 ||
            p[at + v[3]] != '\n')
            goto bad;
        e->count = v[0];
        e->err = v[1];
        e->cut = (uint8_t)v[2];
        e->len = (uint16_t)v[3];
        memcpy(e->key, p + at, e->len);
        at += e->len + 1;
    }
    if (at != n)
        goto bad;
    s->n = cnt;
    return RL_OK;
bad:
    free(s->e);
    memset(s, 0, sizeof(*s));
    return RL_EINVAL;
}
