/* Merging Prometheus text pages into one; see prom_merge.h.
 *
 * One pass over the pages, line by line. Every family and every sample
 * (name and label set) is an entry of an array that only grows, found by
 * its text through an open-addressing table of indexes; an entry points
 * into the pages rather than copying them, and its families' samples are
 * chained in the order first seen. Nothing is written until every line
 * has been read, so a page that is not the format leaves out as it was. */
#include "base/prom_merge.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "rl_error.h"
#include "rl_hash.h"

enum { T_NONE, T_COUNTER, T_GAUGE, T_HISTOGRAM, T_SUMMARY, T_UNTYPED };

static const char *const type_names[] = {"",          "counter", "gauge",
                                         "histogram", "summary", "untyped"};

/* A value: exactly m / 10^scale, or (exact 0) the double d. Exact values
 * are kept without trailing zeros in the fraction, so that one prints and
 * reads back the same. */
typedef struct num_s {
    uint64_t m;
    double d;
    uint8_t scale;
    uint8_t exact;
} num_t;

typedef struct fam_s {
    const char *name, *help;
    uint32_t name_len, help_len;
    uint32_t first, last; /* its samples: index + 1, 0 when none */
    uint32_t to;          /* adopted by this family: index + 1 (see adopt) */
    uint32_t h;
    uint8_t type;      /* T_*: the first TYPE line's, T_NONE before one */
    uint8_t has_help;  /* a HELP line was seen */
    uint8_t gauge_sum; /* 0: not asked yet, 1: keep, 2: sum */
} fam_t;

typedef struct smp_s {
    const char *key, *text; /* name and labels; the first value as written */
    uint32_t key_len, name_len, text_len;
    uint32_t fam;  /* index into families */
    uint32_t next; /* the family's next sample: index + 1, 0 at the end */
    uint32_t h;
    uint8_t summed; /* v has had a value added: print it, not text */
    num_t v;
} smp_t;

/* Open addressing, linear probing: entry index + 1, 0 empty. */
typedef struct tab_s {
    uint32_t *slot;
    size_t mask, n;
} tab_t;

typedef struct merge_s {
    rl_hash_key_t hk;
    fam_t *f;
    smp_t *s;
    size_t nf, fcap, ns, scap;
    tab_t ft, st;
    char *tmp; /* a value NUL-terminated for strtod; a name for adopt */
    size_t tmpcap;
    rls_prom_sum_gauge_fn sum_gauge;
} merge_t;

/* ---- the tables ---- */

/* Grows *a (of *cap elements of size el) to hold at least need. */
static int grow(void **a, size_t *cap, size_t need, size_t el)
{
    size_t c = *cap ? *cap : 64;
    void *na;

    while (c < need)
        c *= 2;
    if (c == *cap)
        return RL_OK;
    if (c > SIZE_MAX / el || (na = realloc(*a, c * el)) == NULL)
        return RL_ENOMEM;
    *a = na;
    *cap = c;
    return RL_OK;
}

static int same_fam(const merge_t *m, uint32_t v, const char *s, size_t len,
                    uint32_t h)
{
    const fam_t *f = &m->f[v - 1];

    return f->h == h && f->name_len == len && memcmp(f->name, s, len) == 0;
}

static int same_smp(const merge_t *m, uint32_t v, const char *s, size_t len,
                    uint32_t h)
{
    const smp_t *x = &m->s[v - 1];

    return x->h == h && x->key_len == len && memcmp(x->key, s, len) == 0;
}

/* The slot holding s[0, len), or the empty one where it would go. */
static uint32_t *probe(const merge_t *m, const tab_t *t, int fams,
                       const char *s, size_t len, uint32_t h)
{
    size_t i = h & t->mask;

    for (;; i = (i + 1) & t->mask) {
        uint32_t v = t->slot[i];
        if (v == 0 ||
            (fams ? same_fam(m, v, s, len, h) : same_smp(m, v, s, len, h)))
            return &t->slot[i];
    }
}

/* Makes room for one more entry in t, keeping it at most half full. */
static int tab_room(merge_t *m, tab_t *t, int fams)
{
    size_t size = t->slot ? t->mask + 1 : 0, nsize, i;
    uint32_t *old = t->slot;

    if ((t->n + 1) * 2 <= size)
        return RL_OK;
    nsize = size ? size * 2 : 128;
    if ((t->slot = calloc(nsize, sizeof(*t->slot))) == NULL) {
        t->slot = old;
        return RL_ENOMEM;
    }
    t->mask = nsize - 1;
    for (i = 0; i < size; i++) {
        uint32_t v = old[i], h;
        size_t j;
        if (v == 0)
            continue;
        h = fams ? m->f[v - 1].h : m->s[v - 1].h;
        for (j = h & t->mask; t->slot[j] != 0; j = (j + 1) & t->mask)
            ;
        t->slot[j] = v;
    }
    free(old);
    return RL_OK;
}

static uint32_t hash(const merge_t *m, const char *s, size_t len)
{
    return (uint32_t)rl_hash(&m->hk, s, len);
}

/* The family called name[0, len), or 0; its index + 1. */
static uint32_t fam_find(const merge_t *m, const char *name, size_t len)
{
    return *probe(m, &m->ft, 1, name, len, hash(m, name, len));
}

/* The family called name[0, len), made (untyped, nothing seen) if new:
 * its index in *fi. */
static int fam_get(merge_t *m, const char *name, size_t len, uint32_t *fi)
{
    uint32_t h = hash(m, name, len), *slot;
    fam_t *f;
    int rc;

    if ((rc = tab_room(m, &m->ft, 1)) != RL_OK ||
        (rc = grow((void **)&m->f, &m->fcap, m->nf + 1, sizeof(*m->f))) !=
            RL_OK)
        return rc;
    slot = probe(m, &m->ft, 1, name, len, h);
    if (*slot != 0) {
        *fi = *slot - 1;
        return RL_OK;
    }
    f = &m->f[m->nf];
    memset(f, 0, sizeof(*f));
    f->name = name;
    f->name_len = (uint32_t)len;
    f->h = h;
    *slot = (uint32_t)++m->nf;
    m->ft.n++;
    *fi = *slot - 1;
    return RL_OK;
}

/* ---- values ---- */

static int ci_eq(const char *s, size_t n, const char *lit)
{
    size_t i;

    if (strlen(lit) != n)
        return 0;
    for (i = 0; i < n; i++)
        if ((s[i] | 0x20) != lit[i])
            return 0;
    return 1;
}

/* Prints an exact value into buf (32 bytes); returns its length. */
static size_t put_exact(char *buf, uint64_t m, unsigned scale)
{
    char d[20];
    size_t nd = 0, at = 0, i;

    do {
        d[nd++] = (char)('0' + m % 10);
        m /= 10;
    } while (m != 0);
    if (nd <= scale) {
        buf[at++] = '0';
        buf[at++] = '.';
        for (i = nd; i < scale; i++)
            buf[at++] = '0';
    }
    for (i = nd; i-- > 0;) {
        buf[at++] = d[i];
        if (i == scale && scale != 0 && nd > scale)
            buf[at++] = '.';
    }
    return at;
}

static double to_double(const num_t *v)
{
    char buf[32];

    if (!v->exact)
        return v->d;
    if (v->scale == 0)
        return (double)v->m;
    /* Through the text, so that strtod rounds it once, correctly. */
    buf[put_exact(buf, v->m, v->scale)] = '\0';
    return strtod(buf, NULL);
}

/* Prints v into buf (32 bytes); returns its length. */
static size_t put_num(char *buf, const num_t *v)
{
    int p, k = 0;

    if (v->exact)
        return put_exact(buf, v->m, v->scale);
    if (isnan(v->d))
        return (size_t)snprintf(buf, 32, "NaN");
    if (isinf(v->d))
        return (size_t)snprintf(buf, 32, v->d > 0 ? "+Inf" : "-Inf");
    for (p = 15; p <= 17; p++) {
        k = snprintf(buf, 32, "%.*g", p, v->d);
        if (strtod(buf, NULL) == v->d)
            break;
    }
    return (size_t)k;
}

/* Whether s[0, n) is [eE][+-]?digits, the rest of a value after its
 * mantissa. */
static int exponent(const char *s, size_t n)
{
    size_t i = 1;

    if (n < 2 || (s[0] != 'e' && s[0] != 'E'))
        return 0;
    if (s[1] == '+' || s[1] == '-')
        i++;
    if (i == n)
        return 0;
    for (; i < n; i++)
        if (s[i] < '0' || s[i] > '9')
            return 0;
    return 1;
}

/* Reads the value s[0, n) into *v: the Go parser's float syntax without
 * hexadecimal (what every Prometheus client writes). */
static int parse_num(merge_t *m, const char *s, size_t n, num_t *v)
{
    size_t i = 0, digits = 0, frac = 0;
    uint64_t mant = 0;
    int signed_ = 0, point = 0, fits = 1, rc;

    if (n > 0 && (s[0] == '+' || s[0] == '-'))
        signed_ = 1, i = 1;
    memset(v, 0, sizeof(*v));
    if (ci_eq(s + i, n - i, "inf") || ci_eq(s + i, n - i, "infinity")) {
        v->d = s[0] == '-' ? -INFINITY : INFINITY;
        return RL_OK;
    }
    if (ci_eq(s, n, "nan")) {
        v->d = NAN;
        return RL_OK;
    }
    for (; i < n; i++) {
        if (s[i] >= '0' && s[i] <= '9') {
            unsigned dg = (unsigned)(s[i] - '0');
            digits++;
            frac += point;
            if (mant > (UINT64_MAX - dg) / 10)
                fits = 0;
            else
                mant = mant * 10 + dg;
        } else if (s[i] == '.' && !point) {
            point = 1;
        } else {
            break;
        }
    }
    if (digits == 0 || (i < n && !exponent(s + i, n - i)))
        return RL_EINVAL;
    if (!signed_ && i == n && fits && frac < 20) {
        while (frac > 0 && mant % 10 == 0)
            mant /= 10, frac--;
        v->exact = 1;
        v->m = mant;
        v->scale = (uint8_t)frac;
        return RL_OK;
    }
    if (n + 1 > m->tmpcap &&
        (rc = grow((void **)&m->tmp, &m->tmpcap, n + 1, 1)) != RL_OK)
        return rc;
    memcpy(m->tmp, s, n);
    m->tmp[n] = '\0';
    v->d = strtod(m->tmp, NULL);
    return RL_OK;
}

/* *x *= 10^k, or 0 when that would not fit. */
static int scale_up(uint64_t *x, unsigned k)
{
    for (; k > 0; k--) {
        if (*x > UINT64_MAX / 10)
            return 0;
        *x *= 10;
    }
    return 1;
}

/* a += b: integers saturate; decimals stay exact while they fit, then
 * become doubles, as does anything added to a double. */
static void add(num_t *a, const num_t *b)
{
    if (a->exact && b->exact) {
        uint64_t x = a->m, y = b->m;
        unsigned s = a->scale > b->scale ? a->scale : b->scale;
        if (s == 0) {
            a->m = x > UINT64_MAX - y ? UINT64_MAX : x + y;
            return;
        }
        if (scale_up(&x, s - a->scale) && scale_up(&y, s - b->scale) &&
            x <= UINT64_MAX - y) {
            a->m = x + y;
            while (s > 0 && a->m % 10 == 0)
                a->m /= 10, s--;
            a->scale = (uint8_t)s;
            return;
        }
    }
    a->d = to_double(a) + to_double(b);
    a->exact = 0;
}

/* ---- lines ---- */

static int blank(char c)
{
    return c == ' ' || c == '\t';
}

static size_t skip_blanks(const char *s, size_t i, size_t n)
{
    while (i < n && blank(s[i]))
        i++;
    return i;
}

/* The length of the name at s[0, n): [a-zA-Z_:][a-zA-Z0-9_:]* for a
 * metric, without ':' for a label. 0 when there is none. */
static size_t name_at(const char *s, size_t n, int metric)
{
    size_t i;

    for (i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' ||
              (metric && c == ':') || (i > 0 && c >= '0' && c <= '9')))
            break;
    }
    return i;
}

/* A label set at s[*i] ('{'): label="value" pairs, blanks between
 * tokens, an optional trailing comma; values escape only \\, \" and \n.
 * Leaves *i after the '}'. */
static int labels(const char *s, size_t *i, size_t n)
{
    size_t k = *i + 1, ln;

    for (;;) {
        k = skip_blanks(s, k, n);
        if (k < n && s[k] == '}')
            break;
        if ((ln = name_at(s + k, n - k, 0)) == 0)
            return RL_EINVAL;
        k = skip_blanks(s, k + ln, n);
        if (k >= n || s[k] != '=')
            return RL_EINVAL;
        k = skip_blanks(s, k + 1, n);
        if (k >= n || s[k] != '"')
            return RL_EINVAL;
        for (k++; k < n && s[k] != '"'; k++)
            if (s[k] == '\\' &&
                (++k >= n || (s[k] != '\\' && s[k] != '"' && s[k] != 'n')))
                return RL_EINVAL;
        if (k >= n)
            return RL_EINVAL;
        k = skip_blanks(s, k + 1, n);
        if (k < n && s[k] == ',')
            k++;
        else if (k >= n || s[k] != '}')
            return RL_EINVAL;
    }
    *i = k + 1;
    return RL_OK;
}

static const struct {
    const char *s;
    size_t n;
    int summary; /* a summary's too, not only a histogram's */
} suffixes[3] = {{"_bucket", 7, 0}, {"_sum", 4, 1}, {"_count", 6, 1}};

static int headless(const fam_t *f)
{
    return !f->has_help && f->type == T_NONE;
}

/* The family a new sample called name[0, len) joins: its own name's if
 * that is a family, else a histogram's or summary's whose samples it is
 * (name_bucket, name_sum, name_count), else a new one of its name. */
static int sample_family(merge_t *m, const char *name, size_t len, uint32_t *fi)
{
    uint32_t v;
    int k;

    if ((v = fam_find(m, name, len)) != 0) {
        const fam_t *f = &m->f[v - 1];
        *fi = f->to != 0 && headless(f) ? f->to - 1 : v - 1;
        return RL_OK;
    }
    for (k = 0; k < 3; k++) {
        const fam_t *f;
        if (len <= suffixes[k].n ||
            memcmp(name + len - suffixes[k].n, suffixes[k].s, suffixes[k].n) !=
                0 ||
            (v = fam_find(m, name, len - suffixes[k].n)) == 0)
            continue;
        f = &m->f[v - 1];
        if (f->type == T_HISTOGRAM ||
            (suffixes[k].summary && f->type == T_SUMMARY)) {
            *fi = v - 1;
            return RL_OK;
        }
    }
    return fam_get(m, name, len, fi);
}

/* Family fi has just been typed a histogram or summary. A family of its
 * name_bucket (name_sum, name_count) made after it, with no HELP or TYPE
 * of its own, holds samples read before the TYPE line: they are fi's, and
 * move to the end of its samples, as they would sit when the page written
 * reads again; later ones go straight to fi (to). Each family moves at
 * most once, so the work stays linear. */
static int adopt(merge_t *m, uint32_t fi)
{
    fam_t *b = &m->f[fi];
    uint32_t got[3], v, x;
    size_t n = b->name_len + 7;
    int k, ng = 0, rc;

    if (n > m->tmpcap &&
        (rc = grow((void **)&m->tmp, &m->tmpcap, n, 1)) != RL_OK)
        return rc;
    memcpy(m->tmp, b->name, b->name_len);
    for (k = 0; k < 3; k++) {
        if (b->type == T_SUMMARY && !suffixes[k].summary)
            continue;
        memcpy(m->tmp + b->name_len, suffixes[k].s, suffixes[k].n);
        v = fam_find(m, m->tmp, b->name_len + suffixes[k].n);
        if (v != 0 && v - 1 > fi && headless(&m->f[v - 1])) {
            /* In the order the families were made (first seen). */
            for (x = (uint32_t)ng++; x > 0 && got[x - 1] > v; x--)
                got[x] = got[x - 1];
            got[x] = v;
        }
    }
    for (k = 0; k < ng; k++) {
        fam_t *a = &m->f[got[k] - 1];
        a->to = fi + 1;
        for (x = a->first; x != 0; x = m->s[x - 1].next)
            m->s[x - 1].fam = fi;
        if (a->first != 0) {
            if (b->last != 0)
                m->s[b->last - 1].next = a->first;
            else
                b->first = a->first;
            b->last = a->last;
        }
        a->first = a->last = 0;
    }
    return RL_OK;
}

/* Whether a sample of family f called name[0, len) adds up. */
static int sums(merge_t *m, fam_t *f, size_t name_len)
{
    switch (f->type) {
    case T_COUNTER:
    case T_HISTOGRAM:
        return 1;
    case T_SUMMARY:
        return name_len != f->name_len; /* _sum and _count, not quantiles */
    case T_GAUGE:
        if (f->gauge_sum == 0) {
            int yes =
                m->sum_gauge != NULL && m->sum_gauge(f->name, f->name_len) == 1;
            f->gauge_sum = yes ? 2 : 1;
        }
        return f->gauge_sum == 2;
    default:
        return 0;
    }
}

/* A sample line s[0, n) (trimmed, not blank). */
static int sample(merge_t *m, const char *s, size_t n)
{
    size_t nl = name_at(s, n, 1), i = nl, v0, v1, k;
    uint32_t h, *slot, fi;
    num_t v;
    smp_t *x;
    int rc;

    if (nl == 0)
        return RL_EINVAL;
    if (i < n && s[i] == '{' && (rc = labels(s, &i, n)) != RL_OK)
        return rc;
    if (i == nl && (i >= n || !blank(s[i])))
        return RL_EINVAL;
    /* The value, then an optional timestamp (dropped). */
    v0 = skip_blanks(s, i, n);
    for (v1 = v0; v1 < n && !blank(s[v1]); v1++)
        ;
    if ((rc = parse_num(m, s + v0, v1 - v0, &v)) != RL_OK)
        return rc;
    if ((k = skip_blanks(s, v1, n)) < n) {
        if (s[k] == '-')
            k++;
        if (k == n)
            return RL_EINVAL;
        for (; k < n; k++)
            if (s[k] < '0' || s[k] > '9')
                return RL_EINVAL;
    }
    h = hash(m, s, i);
    slot = probe(m, &m->st, 0, s, i, h);
    if (*slot != 0) {
        x = &m->s[*slot - 1];
        if (sums(m, &m->f[x->fam], x->name_len)) {
            add(&x->v, &v);
            x->summed = 1;
        }
        return RL_OK;
    }
    if ((rc = sample_family(m, s, nl, &fi)) != RL_OK ||
        (rc = tab_room(m, &m->st, 0)) != RL_OK ||
        (rc = grow((void **)&m->s, &m->scap, m->ns + 1, sizeof(*m->s))) !=
            RL_OK)
        return rc;
    slot = probe(m, &m->st, 0, s, i, h);
    x = &m->s[m->ns];
    x->key = s;
    x->key_len = (uint32_t)i;
    x->name_len = (uint32_t)nl;
    x->text = s + v0;
    x->text_len = (uint32_t)(v1 - v0);
    x->fam = fi;
    x->next = 0;
    x->h = h;
    x->summed = 0;
    x->v = v;
    *slot = (uint32_t)++m->ns;
    m->st.n++;
    if (m->f[fi].last != 0)
        m->s[m->f[fi].last - 1].next = *slot;
    else
        m->f[fi].first = *slot;
    m->f[fi].last = *slot;
    return RL_OK;
}

/* A comment line s[0, n) (trimmed, s[0] is '#'): HELP and TYPE are kept
 * (the first of each per family), others dropped. */
static int comment(merge_t *m, const char *s, size_t n)
{
    size_t i = skip_blanks(s, 1, n), w = i, nl, k;
    int help, t;
    uint32_t fi;
    fam_t *f;
    int rc;

    while (i < n && !blank(s[i]))
        i++;
    help = i - w == 4 && memcmp(s + w, "HELP", 4) == 0;
    if (!help && !(i - w == 4 && memcmp(s + w, "TYPE", 4) == 0))
        return RL_OK;
    /* "# HELP" alone is a comment, as the Go parser reads it. */
    if ((i = skip_blanks(s, i, n)) == n)
        return RL_OK;
    if ((nl = name_at(s + i, n - i, 1)) == 0 ||
        (i + nl < n && !blank(s[i + nl])))
        return RL_EINVAL;
    w = i;
    i = skip_blanks(s, i + nl, n);
    if (help) {
        for (k = i; k < n; k++)
            if (s[k] == '\\' && (++k >= n || (s[k] != '\\' && s[k] != 'n')))
                return RL_EINVAL;
        if ((rc = fam_get(m, s + w, nl, &fi)) != RL_OK)
            return rc;
        f = &m->f[fi];
        if (!f->has_help) {
            f->has_help = 1;
            f->help = s + i;
            f->help_len = (uint32_t)(n - i);
        }
        return RL_OK;
    }
    for (t = T_COUNTER; t <= T_UNTYPED; t++)
        if (ci_eq(s + i, n - i, type_names[t]))
            break;
    if (t > T_UNTYPED)
        return RL_EINVAL;
    if ((rc = fam_get(m, s + w, nl, &fi)) != RL_OK)
        return rc;
    if (m->f[fi].type == T_NONE) {
        m->f[fi].type = (uint8_t)t;
        if (t == T_HISTOGRAM || t == T_SUMMARY)
            return adopt(m, fi);
    }
    return RL_OK;
}

static int page(merge_t *m, const char *p, size_t len)
{
    size_t at = 0;
    int rc;

    while (at < len) {
        const char *s = p + at, *e = memchr(s, '\n', len - at);
        size_t n = e != NULL ? (size_t)(e - s) : len - at, b;
        at += n + (e != NULL);
        while (n > 0 && blank(s[n - 1]))
            n--;
        b = skip_blanks(s, 0, n);
        if (b == n)
            continue;
        rc = s[b] == '#' ? comment(m, s + b, n - b) : sample(m, s + b, n - b);
        if (rc != RL_OK)
            return rc;
    }
    return RL_OK;
}

/* ---- the page out ---- */

static int put(rl_buf_t *out, const char *a, size_t an, const char *b,
               size_t bn, const char *c, size_t cn)
{
    uint8_t *w;
    int rc;

    if ((rc = rl_buf_reserve(out, an + bn + cn, &w)) != RL_OK)
        return rc;
    memcpy(w, a, an);
    memcpy(w + an, b, bn);
    memcpy(w + an + bn, c, cn);
    rl_buf_commit(out, an + bn + cn);
    return RL_OK;
}

static int render(const merge_t *m, rl_buf_t *out)
{
    char num[32];
    size_t i;
    int rc = RL_OK;

    for (i = 0; i < m->nf && rc == RL_OK; i++) {
        const fam_t *f = &m->f[i];
        uint32_t v;
        if (f->has_help)
            rc = put(out, "# HELP ", 7, f->name, f->name_len, " ",
                     f->help_len != 0);
        if (rc == RL_OK && f->has_help)
            rc = put(out, f->help, f->help_len, "\n", 1, "", 0);
        if (rc == RL_OK && f->type != T_NONE)
            rc = put(out, "# TYPE ", 7, f->name, f->name_len, " ", 1);
        if (rc == RL_OK && f->type != T_NONE)
            rc = put(out, type_names[f->type], strlen(type_names[f->type]),
                     "\n", 1, "", 0);
        for (v = f->first; v != 0 && rc == RL_OK; v = m->s[v - 1].next) {
            const smp_t *x = &m->s[v - 1];
            if (x->summed)
                rc = put(out, x->key, x->key_len, " ", 1, num,
                         put_num(num, &x->v));
            else
                rc = put(out, x->key, x->key_len, " ", 1, x->text, x->text_len);
            if (rc == RL_OK)
                rc = rl_buf_append(out, "\n", 1);
        }
    }
    return rc;
}

int rls_prom_merge(const char *const *p, const size_t *len, size_t n,
                   rls_prom_sum_gauge_fn sum_gauge, rl_buf_t *out)
{
    merge_t m;
    size_t i, total = 0;
    int rc = RL_OK;

    for (i = 0; i < n; i++) {
        if (len[i] > RLS_PROM_MERGE_MAX - total)
            return RL_EFULL;
        total += len[i];
    }
    memset(&m, 0, sizeof(m));
    m.sum_gauge = sum_gauge;
    rls_random_key(&m.hk);
    if ((rc = tab_room(&m, &m.ft, 1)) != RL_OK ||
        (rc = tab_room(&m, &m.st, 0)) != RL_OK)
        goto done;
    for (i = 0; i < n && rc == RL_OK; i++)
        if (len[i] > 0)
            rc = page(&m, p[i], len[i]);
    if (rc == RL_OK)
        rc = render(&m, out);
done:
    free(m.f);
    free(m.s);
    free(m.ft.slot);
    free(m.st.slot);
    free(m.tmp);
    return rc;
}
