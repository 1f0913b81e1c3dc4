/* Access-log lines (fit_log.h): combined format, JSON lines, times, and
 * the key expression. Every read is checked against n first. */
#include "fit_log.h"

#include <string.h>

#include "rl_error.h"

int rlf_name_set(rlf_name_t *nm, const char *s, size_t n)
{
    if (n == 0 || n > RLF_NAME_MAX)
        return RL_EINVAL;
    memcpy(nm->s, s, n);
    nm->s[n] = '\0';
    nm->len = n;
    return 0;
}

int rlf_key_parse(rlf_conf_t *c, const char *expr, const char **why)
{
    const char *p = expr, *bar;

    c->nkey = 0;
    for (;;) {
        bar = strchr(p, '|');
        size_t n = bar ? (size_t)(bar - p) : strlen(p);
        if (c->nkey == RLF_KEY_TERMS) {
            *why = "a key expression has at most 4 terms";
            return RL_EINVAL;
        }
        if (rlf_name_set(&c->key[c->nkey], p, n) != 0) {
            *why = "a key term is a field name of 1 to 64 bytes";
            return RL_EINVAL;
        }
        c->nkey++;
        if (bar == NULL)
            return 0;
        p = bar + 1;
    }
}

static int name_is(const rlf_name_t *nm, const char *s, size_t n)
{
    return nm->len == n && memcmp(nm->s, s, n) == 0;
}

/* ---- times ---- */

/* Days from 1970-01-01 to y-m-d (proleptic Gregorian), y >= 1970. */
static int64_t days_from_civil(int64_t y, unsigned m, unsigned d)
{
    int64_t era;
    unsigned yoe, doy, doe;

    y -= m <= 2;
    era = y / 400;
    yoe = (unsigned)(y - era * 400);
    doy = (153 * (m > 2 ? m - 3 : m + 9) + 2) / 5 + d - 1;
    doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + (int64_t)doe - 719468;
}

/* Exactly k digits at p[*i]; advances *i. */
static int digits(const char *p, size_t n, size_t *i, int k, unsigned *v)
{
    unsigned x = 0;
    int j;

    if (n - *i < (size_t)k)
        return RL_EINVAL;
    for (j = 0; j < k; j++) {
        unsigned char ch = (unsigned char)p[*i + (size_t)j];
        if (ch < '0' || ch > '9')
            return RL_EINVAL;
        x = x * 10 + (ch - '0');
    }
    *i += (size_t)k;
    *v = x;
    return 0;
}

static int lit(const char *p, size_t n, size_t *i, char ch)
{
    if (*i >= n || p[*i] != ch)
        return RL_EINVAL;
    (*i)++;
    return 0;
}

static const char MONTHS[] = "JanFebMarAprMayJunJulAugSepOctNovDec";

/* Checks the fields and makes ms since the epoch, minus the zone offset
 * (in minutes east). */
static int civil_ms(unsigned y, unsigned mo, unsigned d, unsigned h,
                    unsigned mi, unsigned s, unsigned frac_ms, int off_min,
                    uint64_t *ms)
{
    static const unsigned char mdays[] = {31, 29, 31, 30, 31, 30,
                                          31, 31, 30, 31, 30, 31};
    int64_t t;

    if (y < 1970 || y > 9999 || mo < 1 || mo > 12 || d < 1 ||
        d > mdays[mo - 1] || h > 23 || mi > 59 || s > 60)
        return RL_EINVAL;
    t = days_from_civil(y, mo, d) * 86400 + h * 3600 + mi * 60 + s;
    t -= (int64_t)off_min * 60;
    if (t < 0)
        return RL_EINVAL;
    *ms = (uint64_t)t * 1000 + frac_ms;
    return 0;
}

/* "+hhmm", "+hh:mm", "Z" or nothing (UTC) from p[*i] to n. */
static int zone(const char *p, size_t n, size_t *i, int *off_min)
{
    unsigned hh, mm;
    int sign;

    *off_min = 0;
    if (*i == n)
        return 0;
    if (p[*i] == 'Z' || p[*i] == 'z') {
        (*i)++;
        return 0;
    }
    if (p[*i] != '+' && p[*i] != '-')
        return RL_EINVAL;
    sign = p[*i] == '-' ? -1 : 1;
    (*i)++;
    if (digits(p, n, i, 2, &hh) != 0)
        return RL_EINVAL;
    if (*i < n && p[*i] == ':')
        (*i)++;
    if (digits(p, n, i, 2, &mm) != 0 || hh > 23 || mm > 59)
        return RL_EINVAL;
    *off_min = sign * (int)(hh * 60 + mm);
    return 0;
}

/* "10/Oct/2000:13:55:36 -0700" */
static int time_clf(const char *p, size_t n, uint64_t *ms)
{
    unsigned d, y, h, mi, s, mo;
    size_t i = 0;
    int off;

    if (digits(p, n, &i, 2, &d) || lit(p, n, &i, '/') || n - i < 3)
        return RL_EINVAL;
    for (mo = 0; mo < 12; mo++)
        if (memcmp(p + i, MONTHS + 3 * mo, 3) == 0)
            break;
    if (mo == 12)
        return RL_EINVAL;
    i += 3;
    if (lit(p, n, &i, '/') || digits(p, n, &i, 4, &y) || lit(p, n, &i, ':') ||
        digits(p, n, &i, 2, &h) || lit(p, n, &i, ':') ||
        digits(p, n, &i, 2, &mi) || lit(p, n, &i, ':') ||
        digits(p, n, &i, 2, &s) || lit(p, n, &i, ' ') || zone(p, n, &i, &off) ||
        i != n)
        return RL_EINVAL;
    return civil_ms(y, mo + 1, d, h, mi, s, 0, off, ms);
}

/* "2000-10-10T13:55:36[.fff][zone]" */
static int time_iso(const char *p, size_t n, uint64_t *ms)
{
    unsigned y, mo, d, h, mi, s, frac = 0, scale = 100;
    size_t i = 0;
    int off;

    if (digits(p, n, &i, 4, &y) || lit(p, n, &i, '-') ||
        digits(p, n, &i, 2, &mo) || lit(p, n, &i, '-') ||
        digits(p, n, &i, 2, &d) || i >= n ||
        (p[i] != 'T' && p[i] != 't' && p[i] != ' '))
        return RL_EINVAL;
    i++;
    if (digits(p, n, &i, 2, &h) || lit(p, n, &i, ':') ||
        digits(p, n, &i, 2, &mi) || lit(p, n, &i, ':') ||
        digits(p, n, &i, 2, &s))
        return RL_EINVAL;
    if (i < n && (p[i] == '.' || p[i] == ',')) {
        size_t k = ++i;
        while (i < n && p[i] >= '0' && p[i] <= '9' && i - k < 9) {
            frac += (unsigned)(p[i] - '0') * scale;
            scale /= 10;
            i++;
        }
        if (i == k)
            return RL_EINVAL;
    }
    if (zone(p, n, &i, &off) || i != n)
        return RL_EINVAL;
    return civil_ms(y, mo, d, h, mi, s, frac, off, ms);
}

/* Decimal Unix seconds with an optional fraction; 11+ integer digits are
 * milliseconds. */
static int time_num(const char *p, size_t n, uint64_t *ms)
{
    uint64_t v = 0, frac = 0, scale = 100;
    size_t i = 0, k;

    while (i < n && p[i] >= '0' && p[i] <= '9' && i < 15)
        v = v * 10 + (uint64_t)(p[i++] - '0');
    if (i == 0)
        return RL_EINVAL;
    k = i;
    if (i < n && p[i] == '.') {
        size_t f = ++i;
        while (i < n && p[i] >= '0' && p[i] <= '9' && i - f < 9) {
            frac += (uint64_t)(p[i] - '0') * scale;
            scale /= 10;
            i++;
        }
        if (i == f)
            return RL_EINVAL;
    }
    if (i != n)
        return RL_EINVAL;
    *ms = k >= 11 ? v : v * 1000 + frac;
    return 0;
}

int rlf_parse_time(const char *p, size_t n, uint64_t *ms)
{
    if (n >= 3 && p[2] == '/')
        return time_clf(p, n, ms);
    if (n >= 5 && p[4] == '-')
        return time_iso(p, n, ms);
    return time_num(p, n, ms);
}

/* ---- combined ---- */

/* A space-delimited token at p[*i]: non-empty, followed by one space. */
static int token(const char *p, size_t n, size_t *i, const char **t, size_t *tl)
{
    const char *sp;

    if (*i >= n)
        return RL_EINVAL;
    sp = memchr(p + *i, ' ', n - *i);
    if (sp == NULL || sp == p + *i)
        return RL_EINVAL;
    *t = p + *i;
    *tl = (size_t)(sp - *t);
    *i += *tl + 1;
    return 0;
}

int rlf_parse_combined(const rlf_conf_t *c, const char *p, size_t n,
                       rlf_line_t *out)
{
    const char *f[3], *rb; /* addr, ident, user */
    size_t fl[3], i = 0, k, j;
    static const char *const names[3] = {"addr", "ident", "user"};

    if (n > 0 && p[n - 1] == '\r')
        n--;
    for (k = 0; k < 3; k++)
        if (token(p, n, &i, &f[k], &fl[k]) != 0)
            return RL_EINVAL;
    if (i >= n || p[i] != '[')
        return RL_EINVAL;
    i++;
    rb = memchr(p + i, ']', n - i);
    if (rb == NULL ||
        rlf_parse_time(p + i, (size_t)(rb - (p + i)), &out->ms) != 0)
        return RL_EINVAL;
    out->cost = 1;
    for (j = 0; j < c->nkey; j++)
        for (k = 0; k < 3; k++)
            if (name_is(&c->key[j], names[k], strlen(names[k])) &&
                !(fl[k] == 1 && f[k][0] == '-')) {
                out->key = f[k];
                out->key_len = fl[k];
                out->term = (unsigned)j;
                return 0;
            }
    return RLF_NOKEY;
}

/* ---- JSON lines ---- */

static size_t ws(const char *p, size_t n, size_t i)
{
    while (i < n &&
           (p[i] == ' ' || p[i] == '\t' || p[i] == '\r' || p[i] == '\n'))
        i++;
    return i;
}

/* A string at p[i] == '"': *end is the index after its closing quote. */
static int jstring(const char *p, size_t n, size_t i, size_t *end)
{
    for (i++; i < n; i++) {
        unsigned char ch = (unsigned char)p[i];
        if (ch == '"') {
            *end = i + 1;
            return 0;
        }
        if (ch < 0x20)
            return RL_EINVAL;
        if (ch == '\\' && ++i >= n)
            return RL_EINVAL;
    }
    return RL_EINVAL;
}

static int is_scalar(char ch)
{
    return (ch >= '0' && ch <= '9') || (ch >= 'a' && ch <= 'z') ||
           (ch >= 'A' && ch <= 'Z') || ch == '-' || ch == '+' || ch == '.';
}

/* Any value at p[i]: *end is the index after it. Objects and arrays are
 * skipped with a stack of their openers, at most RLF_JSON_DEPTH deep. */
static int jvalue(const char *p, size_t n, size_t i, size_t *end)
{
    char stack[RLF_JSON_DEPTH];
    size_t depth = 0;

    if (i >= n)
        return RL_EINVAL;
    if (p[i] == '"')
        return jstring(p, n, i, end);
    if (p[i] != '{' && p[i] != '[') {
        size_t s = i;
        while (i < n && is_scalar(p[i]))
            i++;
        if (i == s)
            return RL_EINVAL;
        *end = i;
        return 0;
    }
    while (i < n) {
        char ch = p[i];
        if (ch == '{' || ch == '[') {
            if (depth == RLF_JSON_DEPTH)
                return RL_EINVAL;
            stack[depth++] = ch == '{' ? '}' : ']';
            i++;
        } else if (ch == '}' || ch == ']') {
            if (depth == 0 || stack[depth - 1] != ch)
                return RL_EINVAL;
            i++;
            if (--depth == 0) {
                *end = i;
                return 0;
            }
        } else if (ch == '"') {
            if (jstring(p, n, i, &i) != 0)
                return RL_EINVAL;
        } else {
            i++;
        }
    }
    return RL_EINVAL;
}

/* A value's span [s, e): a string's content without its quotes (kind
 * 's'), a scalar token ('t'), or anything else ('o'). */
typedef struct span_s {
    size_t s, e;
    char kind; /* 0: absent */
} span_t;

static span_t span_of(const char *p, size_t s, size_t e)
{
    span_t v = {s, e, 't'};

    if (p[s] == '"') {
        v.s = s + 1;
        v.e = e - 1;
        v.kind = 's';
    } else if (p[s] == '{' || p[s] == '[') {
        v.kind = 'o';
    }
    return v;
}

static int cost_of(const char *p, span_t v, uint64_t *cost)
{
    uint64_t x = 0;
    size_t i;

    if (v.kind == 0 ||
        (v.kind == 't' && v.e - v.s == 4 && memcmp(p + v.s, "null", 4) == 0)) {
        *cost = 1;
        return 0;
    }
    if (v.kind == 'o' || v.e == v.s)
        return RL_EINVAL;
    for (i = v.s; i < v.e; i++) {
        if (p[i] < '0' || p[i] > '9')
            return RL_EINVAL;
        x = x * 10 + (uint64_t)(p[i] - '0');
        if (x > RLF_COST_MAX)
            return RL_EINVAL;
    }
    *cost = x;
    return 0;
}

int rlf_parse_json(const rlf_conf_t *c, const char *p, size_t n,
                   rlf_line_t *out)
{
    span_t tv = {0, 0, 0}, cv = {0, 0, 0}, kv[RLF_KEY_TERMS];
    size_t i, ks, ke, ve, j;

    memset(kv, 0, sizeof(kv));
    i = ws(p, n, 0);
    if (i >= n || p[i] != '{')
        return RL_EINVAL;
    i = ws(p, n, i + 1);
    if (i < n && p[i] == '}') {
        i++;
    } else {
        for (;;) {
            if (i >= n || p[i] != '"' || jstring(p, n, i, &ke) != 0)
                return RL_EINVAL;
            ks = i + 1;
            i = ws(p, n, ke);
            if (i >= n || p[i] != ':')
                return RL_EINVAL;
            i = ws(p, n, i + 1);
            if (jvalue(p, n, i, &ve) != 0)
                return RL_EINVAL;
            /* the first occurrence of a name counts */
            size_t kl = ke - 1 - ks;
            if (tv.kind == 0 && name_is(&c->time, p + ks, kl))
                tv = span_of(p, i, ve);
            if (cv.kind == 0 && c->cost.len && name_is(&c->cost, p + ks, kl))
                cv = span_of(p, i, ve);
            for (j = 0; j < c->nkey; j++)
                if (kv[j].kind == 0 && name_is(&c->key[j], p + ks, kl))
                    kv[j] = span_of(p, i, ve);
            i = ws(p, n, ve);
            if (i < n && p[i] == ',') {
                i = ws(p, n, i + 1);
                continue;
            }
            if (i < n && p[i] == '}') {
                i++;
                break;
            }
            return RL_EINVAL;
        }
    }
    if (ws(p, n, i) != n)
        return RL_EINVAL;
    if (tv.kind == 0 || tv.kind == 'o' ||
        rlf_parse_time(p + tv.s, tv.e - tv.s, &out->ms) != 0)
        return RL_EINVAL;
    if (cost_of(p, cv, &out->cost) != 0)
        return RL_EINVAL;
    for (j = 0; j < c->nkey; j++) {
        span_t v = kv[j];
        if (v.kind == 0 || v.kind == 'o' || v.e == v.s ||
            (v.kind == 't' && v.e - v.s == 4 &&
             memcmp(p + v.s, "null", 4) == 0))
            continue;
        out->key = p + v.s;
        out->key_len = v.e - v.s;
        out->term = (unsigned)j;
        return 0;
    }
    return RLF_NOKEY;
}

int rlf_parse_line(const rlf_conf_t *c, const char *p, size_t n,
                   rlf_line_t *out)
{
    if (n > RLF_LINE_MAX)
        return RL_EINVAL;
    if (c->fmt == RLF_FMT_JSON)
        return rlf_parse_json(c, p, n, out);
    return rlf_parse_combined(c, p, n, out);
}
