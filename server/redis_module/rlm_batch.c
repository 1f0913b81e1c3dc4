/* The module's batch over an abstract keyspace; see rlm_batch.h, and
 * store/redis_script.c for the arguments and the reply, which are the
 * script's.
 *
 * Where the script adds first and takes back what it refused (INCRBY, then
 * DECRBY or DEL), this reads each window's counter once, decides, and
 * writes the final count: the same keys, counts and expiries in the end,
 * one lookup per counter. Counts are 64-bit integers where the script's
 * are doubles, so the two agree wherever the script is exact (below
 * 2^53). The arguments are all checked before anything is read: a batch
 * with a malformed one fails whole, where the script could stop halfway.
 * Times (the clock, the grace, expiries) are refused past 2^53 - 1 ms,
 * which rl-server never nears, so that no sum of them overflows and every
 * counter it creates gets a real expiry.
 *
 * An op of other algorithms ("a": fixed windows, sliding-window-counters
 * and gcras, any mix) is decided by lib/admit.c's functions as they stand:
 * loaded from what its keys hold, decided, and written back from
 * rl_admit_added. It never has a stored quota, and a refusal writes
 * nothing. */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rl_admit.h"
#include "rlm_batch.h"

_Static_assert(RLM_WIN_MAX <= RL_ADMIT_WINDOWS_MAX,
               "the module's windows fit lib/'s admission");

typedef struct {
    uint32_t n; /* 0: an "a" profile, apr[ap] */
    uint32_t ap;
    int64_t exp[RLM_WIN_MAX], lim[RLM_WIN_MAX];
} profile_t;

typedef struct {
    void *h;
    size_t key;     /* KEYS index, unless the op has a base */
    int64_t qw;     /* a stored quota's window (s), with a base */
    int64_t before; /* the counter before the op */
    int64_t exp, lim;
    int exists;
} win_t;

/* One op, as the arguments give it (and a stored quota replaces). */
typedef struct {
    uint32_t nw;
    win_t w[RLM_WIN_MAX];
    int64_t k, c;     /* k requests of cost c, unless costs */
    size_t costs;     /* ARGV index of the first of k costs, or 0 */
    int64_t total;    /* the sum of the costs */
    const char *base; /* a stored quota's counters are base:<qw>:<idx> */
    size_t base_len;
    char tag;         /* 0, 'q' (a stored quota), 'Q' (one unparsable)
                         or 'A' (one with other algorithms: batch_t's
                         qa holds its limits) */
    const char *qerr; /* reading the stored quota failed */
} op_t;

/* A sliding window's log as read (store.h, RLS_SWL_*; the script's
 * lread): its string, the sum and the first live entry once what left
 * the window is dropped, and its oldest live entries (at most
 * RL_SWL_PREFIX) covering max(sum - limit, 0) + the op's largest cost. */
typedef struct {
    const char *s; /* NULL: no log */
    size_t len, pos;
    int64_t sum, newest;
    uint32_t nold;
    int64_t ot[RL_SWL_PREFIX], oc[RL_SWL_PREFIX];
} log_t;

/* A sliding-window-counter's state as read at window index I (the
 * script's sread): written back as "at:c1:c2" with the cost added to c1
 * (to c2 when at is I + 1: another instance's batch moved the key on, and
 * I's count is its previous one), keeping its expiry when keep, and not
 * at all unless write (the key is two windows or more ahead). A count the
 * key no longer holds is decided as full, as the script does. */
typedef struct {
    int64_t at, c1, c2;
    int keep, write;
} sliding_counter_t;

/* One limit of an "a" op, and its key in KEYS: a fixed window's counter;
 * a sliding-window-counter's state "<index>:<count>:<previous>" (the
 * script's sread); a gcra's TAT (us); a sliding window's log. */
typedef struct {
    char algo;    /* 'f', 's', 'g' or 'l' */
    size_t key;   /* the KEYS index of its first key, unless qw */
    int64_t qw;   /* a stored quota's window (s): its keys are named after
                     the op's base (qname) */
    int64_t exp;  /* f, s, l: when a counter (a log) it writes expires */
    int64_t lim;  /* f, s, l: the limit; g: the burst */
    int64_t arg;  /* s: the previous window's weight; g: the interval, us;
                     l: the window, ms */
    int64_t idx;  /* s: the window index of the op */
    void *h;      /* its key, open while the op is decided */
    int64_t v[2]; /* its state before the op (0 when missing): a count;
                     the current and previous counts; a TAT; a log's sum
                     and newest entry's time */
    log_t log;    /* l: the log as read */
    sliding_counter_t sw; /* s: the state as read, and where the cost goes */
} alim_t;

typedef struct {
    uint32_t n;
    alim_t l[RLM_WIN_MAX];
    const char *base; /* a stored quota's: its keys are base:<qw>:... */
    size_t base_len;
} aop_t;

/* An "a" profile: the limits of "a" ops sent once for many (the fields
 * parse_limits sets). */
typedef struct {
    uint32_t n;
    struct {
        char algo;
        int64_t exp, lim, arg, idx;
    } l[RLM_WIN_MAX];
} aprof_t;

typedef struct {
    const rlm_io_t *io;
    void *env;
    const rlm_args_t *a;
    int dry;
    unsigned flags;
    int cross; /* the check failed on a stored quota's slot */
    const char *refuse;
    int64_t now, grace;
    uint32_t np, nap; /* profiles, of them "a" profiles */
    const char *err1; /* the first refusal's text */
    size_t nput;
    profile_t pr[RLM_PROFILES_MAX]; /* only np of them are set */
    aprof_t apr[RLM_APROFILES_MAX]; /* only nap */
    aop_t qa; /* the limits of a stored quota with other algorithms, for
                 the op being decided */
} batch_t;

int rlm_parse_i64(const char *s, size_t len, int64_t *v)
{
    uint64_t u = 0, max = INT64_MAX;
    size_t i = 0;
    int neg = 0;

    if (len == 0 || len > 20)
        return -1;
    if (s[0] == '-') {
        neg = 1;
        max = (uint64_t)INT64_MAX + 1;
        if (++i == len)
            return -1;
    }
    if (s[i] == '0' && len - i > 1)
        return -1;
    if (s[i] == '0' && neg)
        return -1;
    for (; i < len; i++) {
        unsigned d = (unsigned char)s[i] - '0';
        if (d > 9 || u > (max - d) / 10)
            return -1;
        u = u * 10 + d;
    }
    *v = neg ? (int64_t)(0 - u) : (int64_t)u;
    return 0;
}

char *rlm_i64_text(int64_t v, char *end)
{
    uint64_t u = v < 0 ? 0 - (uint64_t)v : (uint64_t)v;

    do {
        *--end = (char)('0' + u % 10);
        u /= 10;
    } while (u > 0);
    if (v < 0)
        *--end = '-';
    return end;
}

static int num(const batch_t *b, size_t i, int64_t *v)
{
    return i < b->a->nargs ? rlm_parse_i64(b->a->av[i], b->a->al[i], v) : -1;
}

/* ARGV[i] as a time within [lo, RLM_MS_MAX]; 0, or -1 if it is not one. */
static int ms_arg(const batch_t *b, size_t i, int64_t lo, int64_t *v)
{
    return num(b, i, v) == 0 && *v >= lo && *v <= RLM_MS_MAX ? 0 : -1;
}

/* ---- a stored quota ----------------------------------------------------*/

static int is_space(char c)
{
    return c == ' ' || (c >= '\t' && c <= '\r');
}

static size_t digits(const char *s, size_t len)
{
    size_t i = 0;

    while (i < len && s[i] >= '0' && s[i] <= '9')
        i++;
    return i;
}

static int is_alpha(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

/* The script's base: KEYS of the op's first limit without its last two
 * parts, as its pattern '^(.*):%d+:%a?%a?%d*$' takes it: ":<w>:<index>",
 * ":<w>:p<index>" (staggered), ":<w>:s" or ":<w>:sp" (a
 * sliding-window-counter), ":<w>:g" (a gcra) or ":<w>:l" (a log)
 * (rls_wkey). Returns its length, or 0 when that key has no such end. */
static size_t base_of(const char *k, size_t len)
{
    size_t e = len, d = 0, a;

    while (e > 0 && k[e - 1] >= '0' && k[e - 1] <= '9')
        e--;
    for (a = 0; a < 2 && e > 0 && is_alpha(k[e - 1]); a++)
        e--;
    if (e == 0 || k[e - 1] != ':')
        return 0;
    e--;
    while (e > 0 && k[e - 1] >= '0' && k[e - 1] <= '9') {
        e--;
        d++;
    }
    if (d == 0 || e == 0 || k[e - 1] != ':')
        return 0;
    return e - 1;
}

/* 1 when a key starting with len bytes at s has its hash tag in them (a
 * '{' and, after at least one byte, a '}'): then every counter named
 * after s hashes to the same Redis Cluster slot as s's key, whatever
 * follows. Without one, Redis hashes the whole name. */
static int has_tag(const char *s, size_t len)
{
    const char *open = memchr(s, '{', len), *close;

    if (open == NULL)
        return 0;
    close = memchr(open + 1, '}', len - (size_t)(open + 1 - s));
    return close != NULL && close > open + 1;
}

/* ---- one op ------------------------------------------------------------*/

static void put_str(batch_t *b, const char *s, size_t len)
{
    b->io->put_str(b->env, s, len);
    b->nput++;
}

static void put_int(batch_t *b, int64_t v)
{
    b->io->put_int(b->env, v);
    b->nput++;
}

/* A count (or a TAT) of an op's reply entry, within +-9e18 as the
 * script gives its doubles. */
static void put_count(batch_t *b, int64_t v)
{
    if (v > 9000000000000000000)
        v = 9000000000000000000;
    else if (v < -9000000000000000000)
        v = -9000000000000000000;
    put_int(b, v);
}

/* The kind word the store reads from an op's error ("e<KIND>"). */
static void put_err(batch_t *b, const char *err)
{
    char t[40] = "e";
    size_t n = 1;

    if (strstr(err, "overflow") != NULL) {
        memcpy(t + 1, "OVERFLOW", 8);
        n = 9;
    } else if (strstr(err, "non local key") != NULL) {
        memcpy(t + 1, "NONLOCAL", 8);
        n = 9;
    } else if (strstr(err, "cluster is down") != NULL) {
        memcpy(t + 1, "CLUSTERDOWN", 11);
        n = 12;
    } else {
        while (n < sizeof(t) && err[n - 1] >= 'A' && err[n - 1] <= 'Z') {
            t[n] = err[n - 1];
            n++;
        }
    }
    put_str(b, t, n);
    if (b->err1 == NULL)
        b->err1 = err;
}

static void *open_win(batch_t *b, const op_t *o, const win_t *w)
{
    char name[RLM_BASE_MAX + 48];
    size_t n;

    if (o->base == NULL)
        return b->io->open(b->env, w->key, NULL, 0);
    memcpy(name, o->base, o->base_len);
    n = o->base_len;
    n += (size_t)snprintf(name + n, sizeof(name) - n, ":%lld:%lld",
                          (long long)w->qw,
                          (long long)(b->now / (w->qw * 1000)));
    return b->io->open(b->env, 0, name, n);
}

/* Reads the op's counters, decides its requests in arrival order against
 * every window (refusals consume nothing), writes each counter's final
 * count (with its expiry when it starts), and puts its reply entry. */
static void decide(batch_t *b, op_t *o)
{
    const char *err = b->refuse != NULL ? b->refuse : o->qerr;
    int64_t adm = 0, sum = 0;
    uint32_t j, opened = 0, got = 0;

    for (j = 0; err == NULL && j < o->nw; j++) {
        win_t *w = &o->w[j];
        int rc;

        if ((w->h = open_win(b, o, w)) == NULL) {
            err = "ERR out of memory";
            break;
        }
        opened = j + 1;
        rc = b->io->get(b->env, w->h, &w->before, &w->exists);
        if (rc != RLM_VAL_OK) {
            err = rc == RLM_VAL_WRONGTYPE ? RLM_ERR_WRONGTYPE : RLM_ERR_NOTINT;
            break;
        }
        if (w->before > 0 && o->total > INT64_MAX - w->before) {
            err = RLM_ERR_OVERFLOW;
            break;
        }
        got = j + 1;
    }
    if (err == NULL) {
        /* The arithmetic is lib/'s, the server's and the memory store's:
         * one implementation. A counter below 0 (only another writer could
         * make one) counts as empty, as the script's comparison does. */
        rl_admit_win_t aw[RLM_WIN_MAX];
        int64_t i, c;

        for (j = 0; j < o->nw; j++) {
            memset(&aw[j], 0, sizeof(aw[j]));
            aw[j].limit = (uint64_t)o->w[j].lim;
            aw[j].count = o->w[j].before > 0 ? (uint64_t)o->w[j].before : 0;
        }
        if (o->costs == 0) {
            adm = (int64_t)rl_admit_equal(aw, o->nw, (uint64_t)o->c,
                                          (uint64_t)o->k);
            sum = adm * o->c;
        } else {
            for (i = 0; i < o->k; i++) {
                num(b, o->costs + (size_t)i, &c);
                if (rl_admit_one(aw, o->nw, (uint64_t)c)) {
                    adm++;
                    sum += c;
                }
            }
        }
    }
    for (j = 0; j < got; j++) {
        win_t *w = &o->w[j];
        if (sum > 0) {
            /* A counter found at 0 gets its expiry as a new one would. */
            b->io->write(b->env, w->h, w->before + sum,
                         w->before == 0 ? w->exp : 0);
        } else if (w->before == 0 && w->exists) {
            /* The script's INCRBY then DEL: 0 counts as no counter. */
            b->io->del(b->env, w->h);
        }
    }
    for (j = 0; j < opened; j++)
        b->io->close(b->env, o->w[j].h);
    if (err != NULL) {
        put_err(b, err);
    } else if (o->tag == 0) {
        put_int(b, adm);
        for (j = 0; j < o->nw; j++)
            put_count(b, o->w[j].before);
    } else {
        char t[32 + RLM_WIN_MAX * 66];
        int n = snprintf(t, sizeof(t), "%lld %c", (long long)adm, o->tag);
        for (j = 0; j < o->nw; j++) {
            if (o->tag == 'q')
                n += snprintf(t + n, sizeof(t) - (size_t)n, " %lld %lld",
                              (long long)o->w[j].qw, (long long)o->w[j].lim);
            n += snprintf(t + n, sizeof(t) - (size_t)n, " %lld",
                          (long long)o->w[j].before);
        }
        put_str(b, t, (size_t)n);
    }
}

/* ---- an op of other algorithms ("a") ----------------------------------*/

#define LOG_BAD "ERR not a sliding-window log"

/* Where fixed_digits saturates: a log's 20-digit sum may be written past
 * int64 by another writer; the script reads it as a double far above any
 * limit, and so refuses, as the module does with this value, which leaves
 * room for the arithmetic on it (sum - limit + cost) without overflow. */
#define DIGITS_SAT ((int64_t)1 << 62)

/* n digits at s (all digits) into *v, at most DIGITS_SAT; 0, or -1. The
 * bound is checked before the step: *v * 10 of a value below DIGITS_SAT
 * may pass int64 (1.8e18 * 10). */
static int fixed_digits(const char *s, size_t n, int64_t *v)
{
    size_t i;

    *v = 0;
    for (i = 0; i < n; i++) {
        int d = s[i] - '0';
        if (s[i] < '0' || s[i] > '9')
            return -1;
        if (*v > (DIGITS_SAT - d) / 10)
            *v = DIGITS_SAT;
        else
            *v = *v * 10 + d;
    }
    return 0;
}

/* Reads the log at now as the script does; NULL, or the error text. No
 * oldest entries when tot, the op's whole cost, fits: then none of its
 * requests is refused, nor waits for this log when another limit refuses
 * it; the entries read, and so checked, are the script's. */
static const char *log_read(batch_t *b, void *h, int64_t W, int64_t L,
                            int64_t cmax, int64_t tot, log_t *g)
{
    int64_t t, c, need = -1, acc = 0, pos;
    size_t at;

    memset(g, 0, sizeof(*g));
    g->pos = RLM_LOG_HDR;
    if (b->io->sget(b->env, h, &g->s, &g->len) != RLM_VAL_OK)
        return RLM_ERR_WRONGTYPE;
    if (g->s == NULL || g->len == 0) {
        g->s = NULL;
        g->len = 0;
        return NULL;
    }
    if (g->len < RLM_LOG_HDR || fixed_digits(g->s, 20, &g->sum) != 0 ||
        fixed_digits(g->s + 20, 12, &pos) != 0 || pos < RLM_LOG_HDR ||
        (uint64_t)pos > g->len || (g->len - (size_t)pos) % RLM_LOG_ENT != 0)
        return LOG_BAD;
    g->pos = (size_t)pos;
    if (g->len > g->pos &&
        fixed_digits(g->s + g->len - RLM_LOG_ENT, 14, &g->newest) != 0)
        return LOG_BAD;
    for (at = g->pos; at < g->len; at += RLM_LOG_ENT) {
        if (fixed_digits(g->s + at, 14, &t) != 0 ||
            fixed_digits(g->s + at + 14, 10, &c) != 0)
            return LOG_BAD;
        if (need < 0 && t + W <= b->now) {
            g->sum -= c;
            g->pos += RLM_LOG_ENT;
            continue;
        }
        if (need < 0) {
            if (g->sum <= L && tot <= L - g->sum)
                break;
            need = (g->sum > L ? g->sum - L : 0) + cmax;
        }
        if (acc >= need || g->nold == RL_SWL_PREFIX)
            break;
        g->ot[g->nold] = t;
        g->oc[g->nold++] = c;
        acc += c;
    }
    if (g->pos >= g->len)
        g->newest = 0;
    if (g->sum < 0)
        g->sum = 0;
    return NULL;
}

/* The largest cost among op o's requests. */
static int64_t op_max_cost(const batch_t *b, const op_t *o)
{
    int64_t m = 1, c;
    int64_t k;

    if (o->costs == 0)
        return o->c;
    for (k = 0; k < o->k; k++)
        if (num(b, o->costs + (size_t)k, &c) == 0 && c > m)
            m = c;
    return m;
}

/* Appends (now, add) to a log read by log_read, its sum now sum: in place,
 * or the live entries rewritten when what left the window is half the
 * string (or all of it), as the script does. */
static void log_write(batch_t *b, void *h, const log_t *g, int64_t sum,
                      int64_t add, int64_t exp)
{
    /* Wide enough for any int64: the digits written are exactly
     * RLM_LOG_HDR and RLM_LOG_ENT, as a log's numbers fit them (a sum
     * within its limit, a time below 2^53 ms, an offset within Redis's
     * 512 MB strings). */
    char hdr[48], ent[48];

    snprintf(ent, sizeof(ent), "%014lld%010lld", (long long)b->now,
             (long long)add);
    if (g->s == NULL || g->pos >= g->len ||
        g->pos - RLM_LOG_HDR >= (g->len - RLM_LOG_HDR) / 2) {
        snprintf(hdr, sizeof(hdr), "%020lld%012d", (long long)sum, RLM_LOG_HDR);
        b->io->sset(b->env, h, hdr, g->s ? g->s + g->pos : "",
                    g->s ? g->len - g->pos : 0, ent, exp);
    } else {
        snprintf(hdr, sizeof(hdr), "%020lld%012zu", (long long)sum, g->pos);
        b->io->sappend(b->env, h, hdr, ent, exp);
    }
}

/* Opens limit l's key: KEYS[l->key], or, for a stored quota's limit, the
 * key named after the op's base as the script names it. */
static void *alim_open(batch_t *b, const aop_t *ao, const alim_t *l)
{
    char name[RLM_BASE_MAX + 64];
    size_t n;

    if (l->qw == 0)
        return b->io->open(b->env, l->key, NULL, 0);
    memcpy(name, ao->base, ao->base_len);
    n = ao->base_len;
    if (l->algo == 'f')
        n += (size_t)snprintf(name + n, sizeof(name) - n, ":%lld:%lld",
                              (long long)l->qw,
                              (long long)(b->now / (l->qw * 1000)));
    else
        n += (size_t)snprintf(name + n, sizeof(name) - n, ":%lld:%c",
                              (long long)l->qw, l->algo);
    return b->io->open(b->env, 0, name, n);
}

/* The decimal int64 in s up to the first ':' (or end); advances *s past
 * that ':'. 0, or -1. */
static int counter_field(const char **s, const char *end, int64_t *v)
{
    const char *c = memchr(*s, ':', (size_t)(end - *s));
    const char *e = c != NULL ? c : end;

    if (rlm_parse_i64(*s, (size_t)(e - *s), v) != 0)
        return -1;
    *s = c != NULL ? c + 1 : end;
    return 0;
}

/* Reads a sliding-window-counter's state (s NULL: missing) at window index
 * I into l->v (the current and previous counts) and l->sw; 0, or -1 when
 * s is not such a state (the script's sread). A count the key no longer
 * holds is the limit: I - 1's at I + 1 (its share is never dropped), I's
 * own further ahead (nothing admitted goes uncounted). */
static int sliding_counter_read(alim_t *l, const char *s, size_t len)
{
    sliding_counter_t *w = &l->sw;
    const char *p = s, *end;
    int64_t I = l->idx, S, c1, c2;

    memset(w, 0, sizeof(*w));
    w->at = I;
    w->write = 1;
    l->v[0] = l->v[1] = 0;
    if (s == NULL)
        return 0;
    end = s + len; /* not before: NULL + 0 is undefined */
    if (len == 0 || p[0] == '-' || counter_field(&p, end, &S) != 0 ||
        p == end || counter_field(&p, end, &c1) != 0 || p == end ||
        memchr(p, ':', (size_t)(end - p)) != NULL ||
        counter_field(&p, end, &c2) != 0)
        return -1;
    if (S == I) {
        w->c1 = l->v[0] = c1;
        w->c2 = l->v[1] = c2;
        w->keep = 1;
    } else if (S == I - 1) {
        w->c2 = l->v[1] = c1;
    } else if (S > I) {
        w->at = S;
        w->c1 = c1;
        w->c2 = c2;
        w->keep = 1;
        w->write = S == I + 1;
        if (S == I + 1) {
            l->v[0] = c2;
            l->v[1] = l->lim;
        } else {
            l->v[0] = l->lim;
        }
    }
    return 0;
}

/* A stored quota whose tokens may name algorithms ("N/S[:ALGO]
 * [:burst=B]", as rl-ctl writes them) into ao's limits, named after base,
 * at scale: exactly what the script's qparse accepts and computes, in the
 * same doubles. Returns 0, or -1 when it does not parse (ao untouched);
 * *any is 1 when some limit is not a fixed window. */
static int parse_quota_alg(const batch_t *b, const char *s, size_t len,
                           double scale, const char *base, size_t base_len,
                           aop_t *ao, int *any)
{
    static const struct {
        const char *text;
        char algo;
    } names[] = {{"", 'f'},
                 {":fixed-window", 'f'},
                 {":sliding-window-counter", 's'},
                 {":sliding-window", 'l'},
                 {":gcra", 'g'}};
    aop_t q;
    size_t at = 0;
    uint32_t n = 0, i;

    memset(&q, 0, sizeof(q));
    *any = 0;
    while (at < len) {
        size_t t, dl, ds, rl, k;
        const char *rest;
        double ql, qs, lim, burst = 0;
        char algo = 0;
        alim_t *l;

        while (at < len && is_space(s[at]))
            at++;
        if (at == len)
            break;
        for (t = at; t < len && !is_space(s[t]); t++)
            ;
        dl = digits(s + at, t - at);
        if (dl == 0 || at + dl == t || s[at + dl] != '/')
            return -1;
        ds = digits(s + at + dl + 1, t - at - dl - 1);
        if (ds == 0 || n == RLM_WIN_MAX)
            return -1;
        rest = s + at + dl + 1 + ds;
        rl = (size_t)(s + t - rest);
        for (k = 0; k < sizeof(names) / sizeof(names[0]); k++)
            if (strlen(names[k].text) == rl &&
                memcmp(names[k].text, rest, rl) == 0)
                algo = names[k].algo;
        if (algo == 0) {
            size_t bd;
            if (rl <= 12 || memcmp(rest, ":gcra:burst=", 12) != 0)
                return -1;
            bd = digits(rest + 12, rl - 12);
            if (bd != rl - 12)
                return -1;
            burst = strtod(rest + 12, NULL);
            if (burst < 1)
                return -1;
            algo = 'g';
        }
        ql = strtod(s + at, NULL);
        qs = strtod(s + at + dl + 1, NULL);
        if (ql < 1 || qs < 1 || qs > 31622400)
            return -1;
        for (i = 0; i < n; i++)
            if (q.l[i].algo == algo && q.l[i].qw == (int64_t)qs)
                return -1;
        l = &q.l[n++];
        l->algo = algo;
        l->qw = (int64_t)qs;
        lim = floor(ql * scale);
        if (lim < 1)
            lim = 1;
        if (lim > 9223372036854774784.0)
            lim = 9223372036854774784.0;
        l->lim = (int64_t)lim;
        {
            int64_t W = l->qw * 1000, idx = b->now / W;
            if (algo == 'f') {
                l->exp = (idx + 1) * W + b->grace;
            } else if (algo == 's') {
                if (l->lim > (int64_t)RL_SWC_LIMIT_MAX)
                    l->lim = (int64_t)RL_SWC_LIMIT_MAX;
                l->exp = (idx + 2) * W + b->grace;
                l->idx = idx;
                l->arg = (int64_t)ceil((double)((idx + 1) * W - b->now) *
                                       65536 / (double)W);
            } else if (algo == 'l') {
                if (l->lim > (int64_t)RL_SWL_LIMIT_MAX)
                    l->lim = (int64_t)RL_SWL_LIMIT_MAX;
                l->exp = b->now + W + b->grace;
                l->arg = W;
            } else {
                double T = ceil(qs * 1000000 / lim);
                double B = burst > 0 ? floor(burst * scale) : lim;
                if (B < 1)
                    B = 1;
                if (B * T > 31622400000000.0)
                    B = floor(31622400000000.0 / T);
                l->lim = (int64_t)B;
                l->arg = (int64_t)T;
            }
        }
        if (algo != 'f')
            *any = 1;
        at = t;
    }
    if (n == 0)
        return -1;
    q.n = n;
    q.base = base;
    q.base_len = base_len;
    *ao = q;
    return 0;
}

/* A stored quota of fixed windows alone (parse_quota_alg's) as op o's
 * windows, named after its base: decided as the script's INCRBY path
 * decides it, and reported as 'q'. */
static void quota_windows(const aop_t *q, op_t *o)
{
    uint32_t j;

    for (j = 0; j < q->n; j++) {
        o->w[j].qw = q->l[j].qw;
        o->w[j].lim = q->l[j].lim;
        o->w[j].exp = q->l[j].exp;
    }
    o->nw = q->n;
    o->tag = 'q';
}

/* An "a" op's reply entry as text, as the script's atext: tag 'A' (a
 * stored quota's limits: per limit its letter, window, limit and unit,
 * then its state) or 'Q' (one that did not parse: per limit its state). */
static void put_alg_text(batch_t *b, const aop_t *ao, char tag, uint64_t adm)
{
    char t[64 + RLM_WIN_MAX * (8 + 21 * (7 + 2 * RL_SWL_PREFIX))];
    int n = snprintf(t, sizeof(t), "%llu %c", (unsigned long long)adm, tag);
    uint32_t j, i;

    for (j = 0; j < ao->n; j++) {
        const alim_t *l = &ao->l[j];
        if (tag == 'A')
            n += snprintf(t + n, sizeof(t) - (size_t)n, " %c %lld %lld %lld",
                          l->algo, (long long)l->qw, (long long)l->lim,
                          (long long)(l->algo == 'g' ? l->arg : 1));
        n +=
            snprintf(t + n, sizeof(t) - (size_t)n, " %lld", (long long)l->v[0]);
        if (l->algo == 's' || l->algo == 'l')
            n += snprintf(t + n, sizeof(t) - (size_t)n, " %lld",
                          (long long)l->v[1]);
        if (l->algo == 'l') {
            n += snprintf(t + n, sizeof(t) - (size_t)n, " %u", l->log.nold);
            for (i = 0; i < l->log.nold; i++)
                n += snprintf(t + n, sizeof(t) - (size_t)n, " %lld %lld",
                              (long long)l->log.ot[i], (long long)l->log.oc[i]);
        }
    }
    put_str(b, t, (size_t)n);
}

/* Writes a sliding-window-counter's state back with add admitted. */
static void sliding_counter_write(batch_t *b, const alim_t *l, int64_t add)
{
    const sliding_counter_t *w = &l->sw;
    char t[3 * 24], *p = t + sizeof(t);

    if (!w->write)
        return;
    p = rlm_i64_text(w->at > l->idx ? w->c2 + add : w->c2, p);
    *--p = ':';
    p = rlm_i64_text(w->at > l->idx ? w->c1 : w->c1 + add, p);
    *--p = ':';
    p = rlm_i64_text(w->at, p);
    b->io->wtext(b->env, l->h, p, (size_t)(t + sizeof(t) - p),
                 w->keep ? 0 : l->exp);
}

/* n limits of an "a" op or profile from ARGV[p] on, each a letter and its
 * arguments, into ls (algo, exp, lim, arg, idx). Returns the ARGV index
 * after them, or 0 when malformed (alg_op says how). */
static size_t parse_limits(const batch_t *b, size_t p, alim_t *ls, uint32_t n)
{
    const rlm_args_t *a = b->a;
    uint32_t j;

    for (j = 0; j < n; j++) {
        alim_t *l = &ls[j];

        if (p >= a->nargs || a->al[p] != 1)
            return 0;
        l->algo = a->av[p][0];
        if (l->algo == 'f' || l->algo == 's') {
            if (ms_arg(b, p + 1, 1, &l->exp) != 0 ||
                num(b, p + 2, &l->lim) != 0 || l->lim < 1)
                return 0;
            p += 3;
            if (l->algo == 's') {
                if (num(b, p, &l->arg) != 0 || l->arg < 1 ||
                    l->arg > (int64_t)RL_SWC_ONE ||
                    ms_arg(b, p + 1, 0, &l->idx) != 0)
                    return 0;
                p += 2;
            }
        } else if (l->algo == 'l') {
            if (ms_arg(b, p + 1, 1, &l->exp) != 0 ||
                num(b, p + 2, &l->lim) != 0 || l->lim < 1 ||
                l->lim > (int64_t)RL_SWL_LIMIT_MAX ||
                num(b, p + 3, &l->arg) != 0 || l->arg < 1 ||
                l->arg > RLM_LOG_WINDOW_MAX)
                return 0;
            p += 4;
        } else if (l->algo == 'g') {
            if (num(b, p + 1, &l->lim) != 0 || l->lim < 1 ||
                num(b, p + 2, &l->arg) != 0 || l->arg < 1 ||
                (uint64_t)l->lim > RL_GCRA_CAP_MAX_US / (uint64_t)l->arg)
                return 0;
            p += 3;
        } else {
            return 0;
        }
    }
    return p;
}

/* Reads the op's keys, loads its limits as lib/ does (rl_admit_fixed,
 * _swc, _gcra, _swl; only the server's report of a decision needs a
 * window's length or its reset, so those are 0), decides its requests in
 * arrival order (refusals consume nothing), and when it admitted some
 * writes what rl_admit_added says: the cost admitted, added to a fixed
 * window's counter (its expiry set when it was missing or 0) or a
 * sliding-window-counter's count (sliding_counter_write) or appended to a log,
 * or the new TAT, expiring a grace after it. A refusal writes nothing: unlike
 * the plain op, which removes a counter found at 0 (the script's INCRBY then
 * DEL), an "a" op leaves every key as it was. Then puts the op's reply entry:
 * the count admitted and what each key held (a log: its sum, newest entry, and
 * oldest entries). */
static void decide_alg(batch_t *b, aop_t *ao, const op_t *o, char tag)
{
    const char *err = b->refuse;
    rl_admit_win_t aw[RLM_WIN_MAX];
    uint64_t adm = 0, add[RLM_WIN_MAX], now = (uint64_t)b->now;
    uint32_t j, i;

    for (j = 0; err == NULL && j < ao->n; j++) {
        alim_t *l = &ao->l[j];
        int rc, exists;
        const char *s;
        size_t len;

        l->h = alim_open(b, ao, l);
        if (l->h == NULL) {
            err = "ERR out of memory";
        } else if (l->algo == 'l') {
            err = log_read(b, l->h, l->arg, l->lim, op_max_cost(b, o), o->total,
                           &l->log);
            l->v[0] = l->log.sum;
            l->v[1] = l->log.newest;
        } else if (l->algo == 's') {
            if (b->io->sget(b->env, l->h, &s, &len) != RLM_VAL_OK)
                err = RLM_ERR_WRONGTYPE;
            else if (sliding_counter_read(l, s, len) != 0)
                err = RLM_ERR_NOTINT;
        } else if ((rc = b->io->get(b->env, l->h, &l->v[0], &exists)) !=
                   RLM_VAL_OK) {
            err = rc == RLM_VAL_WRONGTYPE ? RLM_ERR_WRONGTYPE : RLM_ERR_NOTINT;
        }
    }
    if (err == NULL) {
        int64_t k, c;

        for (j = 0; j < ao->n; j++) {
            const alim_t *l = &ao->l[j];
            if (l->algo == 'f')
                rl_admit_fixed(&aw[j], (uint64_t)l->lim, 0, l->v[0], 0);
            else if (l->algo == 's')
                rl_admit_swc(&aw[j], (uint64_t)l->lim, 0, l->v[0], l->v[1],
                             (uint32_t)l->arg, 0);
            else if (l->algo == 'l')
                rl_admit_swl(&aw[j], (uint64_t)l->lim, 0, l->v[0], 0, NULL,
                             NULL, 0);
            else
                rl_admit_gcra(&aw[j], (uint64_t)l->lim, 0, (uint64_t)l->arg,
                              l->v[0], now);
        }
        if (o->costs == 0) {
            adm = rl_admit_equal(aw, ao->n, (uint64_t)o->c, (uint64_t)o->k);
        } else {
            for (k = 0; k < o->k; k++) {
                num(b, o->costs + (size_t)k, &c);
                adm += (uint64_t)rl_admit_one(aw, ao->n, (uint64_t)c);
            }
        }
        /* Within the arguments' bounds nothing passes 2^63 - 1 (a counter
         * ends at most at its limit, a TAT below 2^53 x 1000 +
         * RL_GCRA_CAP_MAX_US), but what is written must be an int64
         * whatever the keys held: else the op fails whole, as the
         * script's INCRBY would. */
        for (j = 0; adm > 0 && j < ao->n; j++) {
            const alim_t *l = &ao->l[j];
            int64_t at = l->algo != 's'      ? l->v[0]
                         : l->sw.at > l->idx ? l->sw.c2
                                             : l->sw.c1;
            uint64_t held = l->algo != 'g' && at > 0 ? (uint64_t)at : 0;
            /* (a log's sum stays within its limit, far below) */
            add[j] = rl_admit_added(&aw[j], now);
            if (add[j] > (uint64_t)INT64_MAX - held)
                err = RLM_ERR_OVERFLOW;
        }
    }
    for (j = 0; err == NULL && adm > 0 && j < ao->n; j++) {
        const alim_t *l = &ao->l[j];
        if (l->algo == 'l')
            log_write(b, l->h, &l->log, l->v[0] + (int64_t)add[j],
                      (int64_t)add[j], l->exp);
        else if (l->algo == 'g')
            b->io->write(b->env, l->h, (int64_t)add[j],
                         (int64_t)(add[j] / 1000 + (add[j] % 1000 != 0)) +
                             b->grace);
        else if (l->algo == 's')
            sliding_counter_write(b, l, (int64_t)add[j]);
        else
            b->io->write(b->env, l->h, l->v[0] + (int64_t)add[j],
                         l->v[0] == 0 ? l->exp : 0);
    }
    for (j = 0; j < ao->n; j++) {
        if (ao->l[j].h != NULL)
            b->io->close(b->env, ao->l[j].h);
        ao->l[j].h = NULL;
    }
    if (err != NULL) {
        put_err(b, err);
        return;
    }
    if (tag != 0) {
        put_alg_text(b, ao, tag, adm);
        return;
    }
    put_int(b, (int64_t)adm);
    for (j = 0; j < ao->n; j++) {
        const alim_t *l = &ao->l[j];
        if (l->algo == 'l') {
            /* the sum, the newest entry, m, then m times and costs */
            put_int(b, l->v[0]);
            put_int(b, l->v[1]);
            put_int(b, (int64_t)l->log.nold);
            for (i = 0; i < l->log.nold; i++) {
                put_int(b, l->log.ot[i]);
                put_int(b, l->log.oc[i]);
            }
            continue;
        }
        put_count(b, l->v[0]);
        if (l->algo == 's')
            put_count(b, l->v[1]);
    }
}

/* ---- the batch ---------------------------------------------------------*/

/* Profiles: ARGV[5] of them from ARGV[6], each a number of windows and an
 * expiry and a limit per window. Returns the ARGV index after them, or 0
 * when malformed. */
static size_t read_profiles(batch_t *b)
{
    int64_t np, n, e, l;
    size_t p = 5, j, w;

    if (num(b, 4, &np) != 0 || np < 0 || np > RLM_PROFILES_MAX)
        return 0;
    for (j = 0; j < (size_t)np; j++) {
        if (p < b->a->nargs && b->a->al[p] == 1 && b->a->av[p][0] == 'a') {
            /* An "a" profile: "a", a number of limits, their letters and
             * arguments. */
            alim_t ls[RLM_WIN_MAX];
            aprof_t *ap = &b->apr[b->nap];
            if (b->nap == RLM_APROFILES_MAX || num(b, p + 1, &n) != 0 ||
                n < 1 || n > RLM_WIN_MAX ||
                (p = parse_limits(b, p + 2, ls, (uint32_t)n)) == 0)
                return 0;
            ap->n = (uint32_t)n;
            for (w = 0; w < (size_t)n; w++) {
                ap->l[w].algo = ls[w].algo;
                ap->l[w].exp = ls[w].exp;
                ap->l[w].lim = ls[w].lim;
                ap->l[w].arg = ls[w].arg;
                ap->l[w].idx = ls[w].idx;
            }
            b->pr[j].n = 0;
            b->pr[j].ap = b->nap++;
            continue;
        }
        if (num(b, p, &n) != 0 || n < 1 || n > RLM_WIN_MAX)
            return 0;
        b->pr[j].n = (uint32_t)n;
        for (w = 0; w < (size_t)n; w++) {
            if (ms_arg(b, p + 1 + 2 * w, 1, &e) != 0 ||
                num(b, p + 2 + 2 * w, &l) != 0 || l < 0)
                return 0;
            b->pr[j].exp[w] = e;
            b->pr[j].lim[w] = l;
        }
        p += 1 + 2 * (size_t)n;
    }
    b->np = (uint32_t)np;
    return p;
}

/* k requests of equal cost c, or k costs from ARGV index at: their sum
 * into o; -1 if malformed or over 2^63. */
static int costs(const batch_t *b, op_t *o, int64_t k, int64_t c, size_t at)
{
    int64_t i, x;

    o->k = k;
    o->c = c;
    o->costs = at;
    if (k < 1)
        return -1;
    if (at == 0) {
        if (c < 1 || k > INT64_MAX / c)
            return -1;
        o->total = k * c;
        return 0;
    }
    o->total = 0;
    for (i = 0; i < k; i++) {
        if (num(b, at + (size_t)i, &x) != 0 || x < 1 ||
            x > INT64_MAX - o->total)
            return -1;
        o->total += x;
    }
    return 0;
}

/* An op's costs from ARGV[p]: -k and one cost, or k and each cost, into
 * o. Returns the ARGV index after them, or 0 when malformed. */
static size_t op_costs(const batch_t *b, op_t *o, size_t p)
{
    int64_t nc, c;

    if (num(b, p, &nc) != 0)
        return 0;
    if (nc < 0) {
        if (nc == INT64_MIN || num(b, p + 1, &c) != 0 ||
            costs(b, o, -nc, c, 0) != 0)
            return 0;
        return p + 2;
    }
    if ((uint64_t)nc > b->a->nargs - p - 1 || costs(b, o, nc, 0, p + 1) != 0)
        return 0;
    return p + (size_t)nc + 1;
}

/* An op out of the ordinary (ARGV[p] is 0): its windows, stored quota and
 * costs. Returns the ARGV index after it, or 0 when malformed. */
static size_t general_op(batch_t *b, op_t *o, size_t p, size_t *kp)
{
    const rlm_args_t *a = b->a;
    size_t qf, qk = 0, j;
    int64_t nw;
    double scale = 1;

    if (num(b, p + 1, &nw) != 0 || nw < 0 || nw > RLM_WIN_MAX ||
        p + 2 >= a->nargs)
        return 0;
    qf = p + 2;
    p += 3;
    o->nw = (uint32_t)nw;
    for (j = 0; j < o->nw; j++) {
        win_t *w = &o->w[j];
        if (*kp >= a->nkeys || ms_arg(b, p, 1, &w->exp) != 0 ||
            num(b, p + 1, &w->lim) != 0 || w->lim < 0)
            return 0;
        w->key = (*kp)++;
        p += 2;
    }
    if (a->al[qf] > 0) {
        char t[64];
        char *end;
        if (p >= a->nargs || a->al[p] == 0 || a->al[p] >= sizeof(t) ||
            *kp >= a->nkeys || o->nw == 0)
            return 0;
        memcpy(t, a->av[p], a->al[p]);
        t[a->al[p]] = '\0';
        scale = strtod(t, &end);
        if (end != t + a->al[p] || !(scale > 0 && scale <= RLM_SCALE_MAX))
            return 0;
        o->base = a->kv[o->w[0].key];
        o->base_len = base_of(o->base, a->kl[o->w[0].key]);
        if (o->base_len == 0 || o->base_len > RLM_BASE_MAX)
            return 0;
        /* The stored quota's counters are not among KEYS: Redis checked
         * that KEYS hash to one slot this node serves, and only a hash
         * tag keeps the counters in it too. */
        if ((b->flags & RLM_CLUSTER) && !has_tag(o->base, o->base_len)) {
            b->cross = 1;
            return 0;
        }
        qk = (*kp)++;
        p++;
    }
    if ((p = op_costs(b, o, p)) == 0)
        return 0;
    if (a->al[qf] > 0 && !b->dry) {
        const char *s;
        size_t len;
        int any;
        if (b->io->quota(b->env, qk, qf, &s, &len) != RLM_VAL_OK)
            o->qerr = RLM_ERR_WRONGTYPE;
        else if (s == NULL)
            ;
        else if (parse_quota_alg(b, s, len, scale, o->base, o->base_len, &b->qa,
                                 &any) != 0)
            o->tag = 'Q';
        else if (any)
            o->tag = 'A'; /* other algorithms: decide_alg's */
        else
            quota_windows(&b->qa, o); /* fixed windows: decide's */
    }
    if (o->tag != 'q')
        o->base = NULL;
    return p;
}

/* 1 when KEYS[i] and KEYS[j] are one key. */
static int same_key(const batch_t *b, size_t i, size_t j)
{
    return b->a->kl[i] == b->a->kl[j] &&
           memcmp(b->a->kv[i], b->a->kv[j], b->a->kl[i]) == 0;
}

/* 1 when the op's windows are distinct keys. The same key twice would be
 * read twice before either write, where the script adds twice; rl-server
 * never sends it (its windows differ in length). */
static int distinct(const batch_t *b, const op_t *o)
{
    uint32_t i, j;

    for (i = 1; i < o->nw; i++)
        for (j = 0; j < i; j++)
            if (same_key(b, o->w[i].key, o->w[j].key))
                return 0;
    return 1;
}

/* An op of other algorithms (ARGV[p] is "a"): nwin; per limit its letter
 * and arguments ("f" expiry limit, "s" expiry limit weight index, "g" burst
 * interval_us, "l" expiry limit window_ms); then its costs. Its keys, one a
 * limit, are KEYS from *kp on, all distinct (as distinct()
 * says why). Checks it (dry) or decides it (decide_alg). Returns the ARGV
 * index after it, or 0 when malformed: nwin outside 1..RLM_WIN_MAX, a
 * letter unknown, a limit or burst below 1, a weight outside
 * 1..RL_SWC_ONE, an interval below 1 or a cap (burst x interval) past
 * RL_GCRA_CAP_MAX_US, a log's limit past RL_SWL_LIMIT_MAX or its window
 * outside 1..RLM_LOG_WINDOW_MAX ms, an expiry outside [1, RLM_MS_MAX] (as
 * every op's), a key too few, one twice. */
/* ARGV[p] as a stored quota's scale, in (0, RLM_SCALE_MAX]; 0, or -1. */
static int scale_arg(const batch_t *b, size_t p, double *scale)
{
    const rlm_args_t *a = b->a;
    char t[64], *end;

    if (p >= a->nargs || a->al[p] == 0 || a->al[p] >= sizeof(t))
        return -1;
    memcpy(t, a->av[p], a->al[p]);
    t[a->al[p]] = '\0';
    *scale = strtod(t, &end);
    return end == t + a->al[p] && *scale > 0 && *scale <= RLM_SCALE_MAX ? 0
                                                                        : -1;
}

static size_t alg_op(batch_t *b, op_t *o, size_t p, size_t *kp)
{
    const rlm_args_t *a = b->a;
    size_t k0 = *kp, i, j, qf, qk = 0, base_len = 0;
    const char *base = NULL;
    double scale = 1;
    int64_t n;
    aop_t ao;

    if (num(b, p + 1, &n) != 0 || n < 1 || n > RLM_WIN_MAX || p + 2 >= a->nargs)
        return 0;
    memset(&ao, 0, sizeof(ao));
    ao.n = (uint32_t)n;
    qf = p + 2;
    p += 3;
    if (a->al[qf] > 0) {
        if (scale_arg(b, p, &scale) != 0)
            return 0;
        p++;
    }
    if ((p = parse_limits(b, p, ao.l, ao.n)) == 0 || a->nkeys - *kp < ao.n)
        return 0;
    for (j = 0; j < ao.n; j++)
        ao.l[j].key = (*kp)++;
    if (a->al[qf] > 0) {
        /* A stored quota's keys are named after the first limit's, and
         * only a hash tag keeps them in its slot (as general_op's). */
        base = a->kv[k0];
        base_len = base_of(base, a->kl[k0]);
        if (base_len == 0 || base_len > RLM_BASE_MAX || *kp >= a->nkeys)
            return 0;
        if ((b->flags & RLM_CLUSTER) && !has_tag(base, base_len)) {
            b->cross = 1;
            return 0;
        }
        qk = (*kp)++;
    }
    if ((p = op_costs(b, o, p)) == 0)
        return 0;
    if (b->dry) {
        size_t kend = a->al[qf] > 0 ? qk : *kp; /* the limits' keys */
        for (i = k0 + 1; i < kend; i++)
            for (j = k0; j < i; j++)
                if (same_key(b, i, j))
                    return 0;
        return p;
    }
    if (a->al[qf] > 0) {
        /* The caller's stored quota, when it parses, replaces the rule's
         * limits: decided and reported as 'A'; one that does not, 'Q'. */
        const char *q;
        size_t len;
        int any;
        if (b->io->quota(b->env, qk, qf, &q, &len) != RLM_VAL_OK) {
            put_err(b, RLM_ERR_WRONGTYPE);
            return p;
        }
        if (q != NULL) {
            if (parse_quota_alg(b, q, len, scale, base, base_len, &b->qa,
                                &any) == 0) {
                decide_alg(b, &b->qa, o, 'A');
                return p;
            }
            decide_alg(b, &ao, o, 'Q');
            return p;
        }
    }
    decide_alg(b, &ao, o, 0);
    return p;
}

/* Every op: checks them (dry) or decides them. Returns 0, or -1 when the
 * arguments are malformed (never once they have been checked). */
static int walk(batch_t *b, size_t p)
{
    const rlm_args_t *a = b->a;
    int64_t nops, i, run = 0, P = 0, rP = 0, A = 0, rA = 0, ak, ac;
    size_t kp = 0, j;

    if (num(b, 3, &nops) != 0 || nops < 0)
        return -1;
    for (i = 0; i < nops; i++) {
        op_t o;
        size_t adv = 0;
        int amark = 0; /* the op is "A", A, k, c */

        memset(&o, 0, sizeof(o));
        if (run > 0) {
            run--;
            P = rP;
            A = rA;
        } else {
            adv = 1;
            A = 0;
            if (p >= a->nargs)
                return -1;
            if (a->al[p] == 1 && a->av[p][0] == 'r') {
                if (num(b, p + 1, &run) != 0 || run < 1 || run > nops - i ||
                    num(b, p + 2, &rP) != 0 || rP < 1 || rP > b->np ||
                    b->pr[rP - 1].n == 0)
                    return -1;
                run--;
                P = rP;
                rA = 0;
                p += 2;
            } else if (a->al[p] == 1 && a->av[p][0] == 'R') {
                if (num(b, p + 1, &run) != 0 || run < 1 || run > nops - i ||
                    num(b, p + 2, &rA) != 0 || rA < 1 || rA > b->np ||
                    b->pr[rA - 1].n != 0)
                    return -1;
                run--;
                A = rA;
                p += 2;
            } else if (a->al[p] == 1 && a->av[p][0] == 'A') {
                if (num(b, p + 1, &A) != 0 || A < 1 || A > b->np ||
                    b->pr[A - 1].n != 0)
                    return -1;
                amark = 1;
            } else if (a->al[p] == 1 && a->av[p][0] == 'a') {
                if ((p = alg_op(b, &o, p, &kp)) == 0)
                    return -1;
                continue;
            } else if (num(b, p, &P) != 0 || P > b->np || P < -(int64_t)b->np ||
                       (P != 0 && b->pr[(P < 0 ? -P : P) - 1].n == 0)) {
                return -1;
            }
        }
        if (A != 0) {
            /* An "a" op of profile A: "A", A, k and c; or, in a run,
             * one request of cost 1. */
            const aprof_t *ap = &b->apr[b->pr[A - 1].ap];
            aop_t ao;
            ak = 1;
            ac = 1;
            if (amark) {
                if (num(b, p + 2, &ak) != 0 || num(b, p + 3, &ac) != 0)
                    return -1;
                p += 3;
            }
            if (costs(b, &o, ak, ac, 0) != 0 || a->nkeys - kp < ap->n)
                return -1;
            memset(&ao, 0, sizeof(ao));
            ao.n = ap->n;
            for (j = 0; j < ap->n; j++) {
                alim_t *l = &ao.l[j];
                l->algo = ap->l[j].algo;
                l->exp = ap->l[j].exp;
                l->lim = ap->l[j].lim;
                l->arg = ap->l[j].arg;
                l->idx = ap->l[j].idx;
                l->key = kp++;
            }
            p += adv;
            if (b->dry) {
                size_t x, y;
                for (x = 1; x < ao.n; x++)
                    for (y = 0; y < x; y++)
                        if (same_key(b, ao.l[x].key, ao.l[y].key))
                            return -1;
            } else {
                decide_alg(b, &ao, &o, 0);
            }
            continue;
        }
        if (P == 0) {
            if ((p = general_op(b, &o, p, &kp)) == 0)
                return -1;
        } else {
            const profile_t *pr;
            int64_t k = 1, c = 1;
            if (P < 0) {
                if (num(b, p + 1, &k) != 0 || num(b, p + 2, &c) != 0)
                    return -1;
                P = -P;
                p += 2;
            }
            pr = &b->pr[P - 1];
            if (costs(b, &o, k, c, 0) != 0 || a->nkeys - kp < pr->n)
                return -1;
            o.nw = pr->n;
            for (j = 0; j < pr->n; j++) {
                o.w[j].key = kp++;
                o.w[j].exp = pr->exp[j];
                o.w[j].lim = pr->lim[j];
            }
            p += adv;
        }
        if (b->dry && !distinct(b, &o))
            return -1;
        if (!b->dry && o.tag == 'A')
            decide_alg(b, &b->qa, &o, 'A');
        else if (!b->dry)
            decide(b, &o);
    }
    return p == a->nargs && kp == a->nkeys ? 0 : -1;
}

int rlm_batch(const rlm_io_t *io, void *env, const rlm_args_t *a,
              int64_t clock_ms, unsigned flags, const char *refuse,
              size_t *nput)
{
    batch_t batch, *b = &batch;
    int64_t dl;
    size_t p;
    int rc = RLM_EARGS;

    memset(b, 0, offsetof(batch_t, pr));
    b->io = io;
    b->env = env;
    b->a = a;
    b->flags = flags;
    b->refuse = refuse;
    b->dry = 1;
    if (ms_arg(b, 0, 0, &dl) != 0 || ms_arg(b, 1, 0, &b->now) != 0 ||
        ms_arg(b, 2, 0, &b->grace) != 0 || (p = read_profiles(b)) == 0 ||
        walk(b, p) != 0) {
        if (b->cross)
            rc = RLM_ECROSSSLOT;
        goto done;
    }
    rc = RLM_LATE;
    if (clock_ms >= 0 && dl > 0 && clock_ms > dl)
        goto done;
    b->dry = 0;
    io->begin(env);
    walk(b, p);
    if (b->err1 != NULL)
        put_str(b, b->err1, strlen(b->err1));
    rc = RLM_OK;
done:
    *nput = b->nput;
    return rc;
}
