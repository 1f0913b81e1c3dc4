/* Envoy's ShouldRateLimit in protobuf's JSON mapping; see envoy_json.h.
 *
 * The reader is a recursive descent over the message's own schema (so
 * its depth is the schema's), with a cursor over the caller's bytes: no
 * token is looked at twice, no value skipped unread. What it builds is
 * protobuf-c's generated structs, allocated from an arena whose whole
 * size is capped before each chunk is reserved; protobuf-c packs them,
 * and the arena goes at once. The writer unpacks the response with
 * protobuf-c and prints it field by field. */
#include "envoy/json.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "envoy/service/ratelimit/v3/rls.pb-c.h"
#include "google/protobuf/struct.pb-c.h"
#include "envoy/rls.h"
#include "rl_error.h"
#include "rl_parse.h"

typedef Envoy__Service__Ratelimit__V3__RateLimitRequest req_t;
typedef Envoy__Extensions__Common__Ratelimit__V3__RateLimitDescriptor desc_t;
typedef Envoy__Extensions__Common__Ratelimit__V3__RateLimitDescriptor__Entry
    entry_t;
typedef Envoy__Extensions__Common__Ratelimit__V3__RateLimitDescriptor__RateLimitOverride
    override_t;
typedef Google__Protobuf__UInt64Value u64v_t;
typedef Envoy__Service__Ratelimit__V3__RateLimitResponse resp_t;
typedef Envoy__Service__Ratelimit__V3__RateLimitResponse__DescriptorStatus
    dstatus_t;
typedef Google__Protobuf__Struct gstruct_t;
typedef Google__Protobuf__Value gvalue_t;

/* ------------------------------------------------------------------------ */
/* The arena */

#define CHUNK 16384

typedef struct chunk_s {
    struct chunk_s *next;
    size_t used, cap;
    _Alignas(max_align_t) unsigned char b[];
} chunk_t;

typedef struct jp_s {
    const unsigned char *b;
    size_t n, i;
    char *err;
    size_t errlen;
    chunk_t *chunks;
    size_t mem; /* reserved by the arena so far */
    int nomem;
} jp_t;

/* size zeroed bytes from the arena, or NULL (out of memory, or over the
 * cap: said in err). */
static void *jalloc(jp_t *j, size_t size)
{
    chunk_t *c = j->chunks;
    size_t cap;
    void *p;

    size = (size + 15) & ~(size_t)15;
    if (c == NULL || c->cap - c->used < size) {
        cap = size > CHUNK ? size : CHUNK;
        if (j->mem + cap > RLS_ENVOY_JSON_MEM_MAX) {
            snprintf(j->err, j->errlen,
                     "the request needs more than %u MiB decoded",
                     RLS_ENVOY_JSON_MEM_MAX >> 20);
            return NULL;
        }
        if ((c = malloc(sizeof(*c) + cap)) == NULL) {
            j->nomem = 1;
            snprintf(j->err, j->errlen, "out of memory");
            return NULL;
        }
        c->used = 0;
        c->cap = cap;
        c->next = j->chunks;
        j->chunks = c;
        j->mem += cap;
    }
    p = c->b + c->used;
    c->used += size;
    memset(p, 0, size);
    return p;
}

static void arena_free(jp_t *j)
{
    chunk_t *c, *next;

    for (c = j->chunks; c != NULL; c = next) {
        next = c->next;
        free(c);
    }
    j->chunks = NULL;
}

/* ------------------------------------------------------------------------ */
/* Tokens */

static int fail(jp_t *j, const char *what)
{
    snprintf(j->err, j->errlen, "%s at byte %zu", what, j->i);
    return RL_EINVAL;
}

static int peek(jp_t *j)
{
    while (j->i < j->n && (j->b[j->i] == ' ' || j->b[j->i] == '\t' ||
                           j->b[j->i] == '\n' || j->b[j->i] == '\r'))
        j->i++;
    return j->i < j->n ? j->b[j->i] : -1;
}

static int expect(jp_t *j, int c, const char *what)
{
    if (peek(j) != c)
        return fail(j, what);
    j->i++;
    return RL_OK;
}

/* A literal (true, false, null) at the cursor: 1 and consumed, else 0. */
static int literal(jp_t *j, const char *word)
{
    size_t n = strlen(word);

    if (peek(j) < 0 || j->n - j->i < n || memcmp(j->b + j->i, word, n) != 0)
        return 0;
    j->i += n;
    return 1;
}

/* Four hex digits at b[i]: the code unit, or -1. */
static long hex4(const jp_t *j, size_t i)
{
    long v = 0;
    int k, h;

    if (j->n - i < 4)
        return -1;
    for (k = 0; k < 4; k++) {
        if ((h = rl_hex_digit(j->b[i + k])) < 0)
            return -1;
        v = v * 16 + h;
    }
    return v;
}

/* The length of the valid UTF-8 sequence at p[0, n) (RFC 3629: no
 * overlong form, no surrogate, nothing past U+10FFFF), or 0. */
static size_t utf8_len(const unsigned char *p, size_t n)
{
    unsigned c = p[0];

    if (c < 0x80)
        return 1;
    if (c >= 0xc2 && c <= 0xdf)
        return n >= 2 && (p[1] & 0xc0) == 0x80 ? 2 : 0;
    if (c >= 0xe0 && c <= 0xef) {
        if (n < 3 || (p[1] & 0xc0) != 0x80 || (p[2] & 0xc0) != 0x80)
            return 0;
        if ((c == 0xe0 && p[1] < 0xa0) || (c == 0xed && p[1] >= 0xa0))
            return 0;
        return 3;
    }
    if (c >= 0xf0 && c <= 0xf4) {
        if (n < 4 || (p[1] & 0xc0) != 0x80 || (p[2] & 0xc0) != 0x80 ||
            (p[3] & 0xc0) != 0x80)
            return 0;
        if ((c == 0xf0 && p[1] < 0x90) || (c == 0xf4 && p[1] >= 0x90))
            return 0;
        return 4;
    }
    return 0;
}

static size_t put_utf8(char *o, unsigned long cp)
{
    if (cp < 0x80) {
        o[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (char)(0xc0 | (cp >> 6));
        o[1] = (char)(0x80 | (cp & 0x3f));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (char)(0xe0 | (cp >> 12));
        o[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
        o[2] = (char)(0x80 | (cp & 0x3f));
        return 3;
    }
    o[0] = (char)(0xf0 | (cp >> 18));
    o[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
    o[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
    o[3] = (char)(0x80 | (cp & 0x3f));
    return 4;
}

/* A JSON string at the cursor, decoded into the arena (NUL-terminated,
 * *len bytes). The closing quote is found first, so the copy is sized by
 * the input; escapes only shrink it. */
static int string(jp_t *j, char **out, size_t *len)
{
    size_t start, end, k, o = 0, u;
    char *s;

    if (peek(j) != '"')
        return fail(j, "expected a string");
    start = ++j->i;
    for (end = start; end < j->n && j->b[end] != '"'; end++) {
        if (j->b[end] < 0x20) {
            j->i = end;
            return fail(j, "control character in a string");
        }
        if (j->b[end] == '\\')
            end++;
    }
    if (end >= j->n) {
        j->i = end;
        return fail(j, "unterminated string");
    }
    if ((s = jalloc(j, end - start + 1)) == NULL)
        return j->nomem ? RL_ENOMEM : RL_EINVAL;
    for (k = start; k < end;) {
        unsigned c = j->b[k];
        if (c == '\\') {
            long cp, lo;
            j->i = k;
            switch (j->b[k + 1]) {
            case '"':
            case '\\':
            case '/':
                s[o++] = (char)j->b[k + 1];
                break;
            case 'b':
                s[o++] = '\b';
                break;
            case 'f':
                s[o++] = '\f';
                break;
            case 'n':
                s[o++] = '\n';
                break;
            case 'r':
                s[o++] = '\r';
                break;
            case 't':
                s[o++] = '\t';
                break;
            case 'u':
                if ((cp = hex4(j, k + 2)) < 0)
                    return fail(j, "bad \\u escape");
                if (cp >= 0xdc00 && cp <= 0xdfff)
                    return fail(j, "lone surrogate in a string");
                if (cp >= 0xd800 && cp <= 0xdbff) {
                    if (end - k < 12 || j->b[k + 6] != '\\' ||
                        j->b[k + 7] != 'u' || (lo = hex4(j, k + 8)) < 0 ||
                        lo < 0xdc00 || lo > 0xdfff)
                        return fail(j, "lone surrogate in a string");
                    cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
                    k += 6;
                }
                if (cp == 0)
                    return fail(j, "NUL in a string");
                o += put_utf8(s + o, (unsigned long)cp);
                k += 4;
                break;
            default:
                return fail(j, "bad escape in a string");
            }
            k += 2;
            continue;
        }
        if ((u = utf8_len(j->b + k, end - k)) == 0) {
            j->i = k;
            return fail(j, "invalid UTF-8 in a string");
        }
        memcpy(s + o, j->b + k, u);
        o += u;
        k += u;
    }
    s[o] = '\0';
    *out = s;
    *len = o;
    j->i = end + 1;
    return RL_OK;
}

/* A JSON number token at b[*i, n): its digits checked against the grammar
 * and read as an integer, as protojson reads one for an integer field
 * (1e3 and 5.0 are integers; 1.5 is not). Sets *neg and *mag (saturated
 * past UINT64_MAX: *over). Returns 0 or RL_EINVAL. */
static int number_at(const unsigned char *b, size_t n, size_t *i, int *neg,
                     uint64_t *mag, int *over)
{
    size_t p = *i, ds, de, fs = 0, fe = 0, k;
    long exp = 0, scale;
    int eneg = 0;
    uint64_t v = 0;

    *neg = 0;
    *over = 0;
    if (p < n && b[p] == '-') {
        *neg = 1;
        p++;
    }
    ds = p;
    if (p < n && b[p] == '0')
        p++;
    else if (p < n && b[p] >= '1' && b[p] <= '9')
        while (p < n && b[p] >= '0' && b[p] <= '9')
            p++;
    else
        return RL_EINVAL;
    de = p;
    if (p < n && b[p] == '.') {
        fs = ++p;
        while (p < n && b[p] >= '0' && b[p] <= '9')
            p++;
        fe = p;
        if (fe == fs)
            return RL_EINVAL;
    }
    if (p < n && (b[p] == 'e' || b[p] == 'E')) {
        p++;
        if (p < n && (b[p] == '+' || b[p] == '-'))
            eneg = b[p++] == '-';
        if (p >= n || b[p] < '0' || b[p] > '9')
            return RL_EINVAL;
        while (p < n && b[p] >= '0' && b[p] <= '9') {
            if (exp < 100000)
                exp = exp * 10 + (b[p] - '0');
            p++;
        }
    }
    *i = p;
    {
        /* The digits D, the integer's then the fraction's, times
         * 10^scale; D's trailing zeros raise the scale. */
        size_t il = de - ds, L = il + (fe - fs);
#define DIGIT(k) ((k) < il ? b[ds + (k)] : b[fs + (k)-il])
        scale = (eneg ? -exp : exp) - (long)(fe - fs);
        while (L > 0 && DIGIT(L - 1) == '0') {
            L--;
            scale++;
        }
        for (k = 0; k < L; k++) {
            uint64_t d = (uint64_t)(DIGIT(k) - '0');
            if (v > (UINT64_MAX - d) / 10) {
                *over = 1;
                break;
            }
            v = v * 10 + d;
        }
#undef DIGIT
    }
    if (v == 0 && !*over) {
        *mag = 0;
        return RL_OK;
    }
    if (scale < 0)
        return RL_EINVAL; /* a fraction */
    for (; scale > 0 && !*over; scale--) {
        if (v > UINT64_MAX / 10)
            *over = 1;
        else
            v *= 10;
    }
    *mag = v;
    return RL_OK;
}

/* An integer field: a number, or a string holding exactly one. Sets
 * *neg, *mag. */
static int integer(jp_t *j, int *neg, uint64_t *mag)
{
    int over, c = peek(j);

    if (c == '"') {
        char *s;
        size_t len, k = 0;
        int rc;
        if ((rc = string(j, &s, &len)) != RL_OK)
            return rc;
        if (number_at((const unsigned char *)s, len, &k, neg, mag, &over) !=
                RL_OK ||
            k != len)
            return fail(j, "expected an integer in the string");
    } else {
        if (number_at(j->b, j->n, &j->i, neg, mag, &over) != RL_OK)
            return fail(j, "expected an integer");
    }
    if (over)
        return fail(j, "integer out of range");
    return RL_OK;
}

static int uint_field(jp_t *j, uint64_t max, uint64_t *v)
{
    int neg, rc;

    if ((rc = integer(j, &neg, v)) != RL_OK)
        return rc;
    if (neg || *v > max)
        return fail(j, "integer out of range");
    return RL_OK;
}

/* An object's next field name: 1 with its name (from the arena) and the
 * colon read, 0 at the closing brace, or an RL_E* code. *first is set to
 * 0 after the first field. */
static int next_field(jp_t *j, int *first, char **name, size_t *nlen)
{
    int rc, c = peek(j);

    if (c == '}') {
        j->i++;
        return 0;
    }
    if (!*first) {
        if (c != ',')
            return fail(j, "expected ',' or '}'");
        j->i++;
    }
    *first = 0;
    if ((rc = string(j, name, nlen)) != RL_OK)
        return rc;
    if ((rc = expect(j, ':', "expected ':'")) != RL_OK)
        return rc;
    return 1;
}

/* Which of the names (JSON name, then proto name, per field) name is:
 * the field's index, or -1. */
static int field_of(const char *name, const char *const *names, int n)
{
    int k;

    for (k = 0; k < 2 * n; k++)
        if (names[k] != NULL && strcmp(name, names[k]) == 0)
            return k / 2;
    return -1;
}

/* Marks field f seen; a second time is an error, as in protojson. */
static int seen(jp_t *j, unsigned *mask, int f, const char *name)
{
    char msg[96];

    if (f < 0) {
        snprintf(msg, sizeof(msg), "unknown field \"%.40s\"", name);
        return fail(j, msg);
    }
    if (*mask & (1u << f)) {
        snprintf(msg, sizeof(msg), "duplicate field \"%.40s\"", name);
        return fail(j, msg);
    }
    *mask |= 1u << f;
    return RL_OK;
}

/* Grows a pointer array of the arena to hold one more (doubling). */
static int push(jp_t *j, void ***arr, size_t *n, size_t *cap, void *p)
{
    if (*n == *cap) {
        size_t nc = *cap ? *cap * 2 : 4;
        void **na = jalloc(j, nc * sizeof(*na));
        if (na == NULL)
            return j->nomem ? RL_ENOMEM : RL_EINVAL;
        if (*n > 0)
            memcpy(na, *arr, *n * sizeof(*na));
        *arr = na;
        *cap = nc;
    }
    (*arr)[(*n)++] = p;
    return RL_OK;
}

/* An array's next element: 1 when one follows, 0 at the closing bracket,
 * or an RL_E* code. */
static int next_elem(jp_t *j, int *first)
{
    int c = peek(j);

    if (c == ']') {
        j->i++;
        return 0;
    }
    if (!*first) {
        if (c != ',')
            return fail(j, "expected ',' or ']'");
        j->i++;
    }
    *first = 0;
    return 1;
}

/* ------------------------------------------------------------------------ */
/* The request's messages */

static const char *const unit_names[] = {"UNKNOWN", "SECOND", "MINUTE",
                                         "HOUR",    "DAY",    "MONTH",
                                         "YEAR",    "WEEK"};

static int entry(jp_t *j, entry_t **out)
{
    static const char *const names[] = {"key", NULL, "value", NULL};
    entry_t *e = jalloc(j, sizeof(*e));
    unsigned mask = 0;
    int first = 1, rc, f;
    char *name;
    size_t nl, sl;

    if (e == NULL)
        return j->nomem ? RL_ENOMEM : RL_EINVAL;
    envoy__extensions__common__ratelimit__v3__rate_limit_descriptor__entry__init(
        e);
    if ((rc = expect(j, '{', "expected an entry object")) != RL_OK)
        return rc;
    while ((rc = next_field(j, &first, &name, &nl)) == 1) {
        f = field_of(name, names, 2);
        if ((rc = seen(j, &mask, f, name)) != RL_OK)
            return rc;
        if (literal(j, "null"))
            continue;
        if ((rc = string(j, f == 0 ? &e->key : &e->value, &sl)) != RL_OK)
            return rc;
    }
    *out = e;
    return rc;
}

static int override(jp_t *j, override_t **out)
{
    static const char *const names[] = {"requestsPerUnit", "requests_per_unit",
                                        "unit", NULL};
    override_t *o = jalloc(j, sizeof(*o));
    unsigned mask = 0;
    int first = 1, rc, f, neg;
    char *name, *s;
    size_t nl, sl, k;
    uint64_t v;

    if (o == NULL)
        return j->nomem ? RL_ENOMEM : RL_EINVAL;
    envoy__extensions__common__ratelimit__v3__rate_limit_descriptor__rate_limit_override__init(
        o);
    if ((rc = expect(j, '{', "expected a limit object")) != RL_OK)
        return rc;
    while ((rc = next_field(j, &first, &name, &nl)) == 1) {
        f = field_of(name, names, 2);
        if ((rc = seen(j, &mask, f, name)) != RL_OK)
            return rc;
        if (literal(j, "null"))
            continue;
        if (f == 0) {
            if ((rc = uint_field(j, UINT32_MAX, &v)) != RL_OK)
                return rc;
            o->requests_per_unit = (uint32_t)v;
        } else if (peek(j) == '"') {
            /* An enum by name, or by number. */
            if ((rc = string(j, &s, &sl)) != RL_OK)
                return rc;
            for (k = 0; k < 8 && strcmp(s, unit_names[k]) != 0; k++)
                ;
            if (k == 8)
                return fail(j, "unknown unit");
            o->unit = (Envoy__Type__V3__RateLimitUnit)k;
        } else {
            if ((rc = integer(j, &neg, &v)) != RL_OK)
                return rc;
            if (v > (neg ? (uint64_t)INT32_MAX + 1 : (uint64_t)INT32_MAX))
                return fail(j, "enum number out of range");
            o->unit = (Envoy__Type__V3__RateLimitUnit)(
                neg ? -(int64_t)v : (int64_t)v);
        }
    }
    *out = o;
    return rc;
}

static int descriptor(jp_t *j, desc_t **out)
{
    static const char *const names[] = {"entries", NULL, "limit", NULL,
                                        "hitsAddend", "hits_addend"};
    desc_t *d = jalloc(j, sizeof(*d));
    unsigned mask = 0;
    int first = 1, rc, f, efirst;
    char *name;
    size_t nl, cap = 0;
    uint64_t v;

    if (d == NULL)
        return j->nomem ? RL_ENOMEM : RL_EINVAL;
    envoy__extensions__common__ratelimit__v3__rate_limit_descriptor__init(d);
    if ((rc = expect(j, '{', "expected a descriptor object")) != RL_OK)
        return rc;
    while ((rc = next_field(j, &first, &name, &nl)) == 1) {
        f = field_of(name, names, 3);
        if ((rc = seen(j, &mask, f, name)) != RL_OK)
            return rc;
        if (literal(j, "null"))
            continue;
        if (f == 0) {
            if ((rc = expect(j, '[', "expected an array of entries")) != RL_OK)
                return rc;
            efirst = 1;
            while ((rc = next_elem(j, &efirst)) == 1) {
                entry_t *e;
                if (d->n_entries == RLS_ENVOY_ENTRIES_MAX)
                    return fail(j, "a descriptor has more than 32 entries");
                if ((rc = entry(j, &e)) != RL_OK ||
                    (rc = push(j, (void ***)&d->entries, &d->n_entries, &cap,
                               e)) != RL_OK)
                    return rc;
            }
            if (rc != 0)
                return rc;
        } else if (f == 1) {
            if ((rc = override(j, &d->limit)) != RL_OK)
                return rc;
        } else {
            if ((rc = uint_field(j, UINT64_MAX, &v)) != RL_OK)
                return rc;
            if ((d->hits_addend = jalloc(j, sizeof(*d->hits_addend))) == NULL)
                return j->nomem ? RL_ENOMEM : RL_EINVAL;
            google__protobuf__uint64_value__init(d->hits_addend);
            d->hits_addend->value = v;
        }
    }
    *out = d;
    return rc;
}

static int request(jp_t *j, req_t *q)
{
    static const char *const names[] = {"domain", NULL, "descriptors", NULL,
                                        "hitsAddend", "hits_addend"};
    unsigned mask = 0;
    int first = 1, rc, f, dfirst;
    char *name;
    size_t nl, sl, cap = 0;
    uint64_t v;

    if (peek(j) < 0)
        return fail(j, "empty body: expected a RateLimitRequest object");
    if ((rc = expect(j, '{', "expected a RateLimitRequest object")) != RL_OK)
        return rc;
    while ((rc = next_field(j, &first, &name, &nl)) == 1) {
        f = field_of(name, names, 3);
        if ((rc = seen(j, &mask, f, name)) != RL_OK)
            return rc;
        if (literal(j, "null"))
            continue;
        if (f == 0) {
            if ((rc = string(j, &q->domain, &sl)) != RL_OK)
                return rc;
        } else if (f == 1) {
            if ((rc = expect(j, '[', "expected an array of descriptors")) !=
                RL_OK)
                return rc;
            dfirst = 1;
            while ((rc = next_elem(j, &dfirst)) == 1) {
                desc_t *d;
                if (q->n_descriptors == RLS_ENVOY_DESCRIPTORS_MAX)
                    return fail(j, "more than 1024 descriptors");
                if ((rc = descriptor(j, &d)) != RL_OK ||
                    (rc = push(j, (void ***)&q->descriptors,
                               &q->n_descriptors, &cap, d)) != RL_OK)
                    return rc;
            }
            if (rc != 0)
                return rc;
        } else {
            if ((rc = uint_field(j, UINT32_MAX, &v)) != RL_OK)
                return rc;
            q->hits_addend = (uint32_t)v;
        }
    }
    if (rc != 0)
        return rc;
    if (peek(j) >= 0)
        return fail(j, "data after the object");
    return RL_OK;
}

int rls_envoy_json_request(const char *p, size_t n, rl_buf_t *out, char *err,
                           size_t errlen)
{
    req_t q = ENVOY__SERVICE__RATELIMIT__V3__RATE_LIMIT_REQUEST__INIT;
    jp_t j;
    uint8_t *w;
    size_t len;
    int rc;

    memset(&j, 0, sizeof(j));
    j.b = (const unsigned char *)p;
    j.n = n;
    j.err = err;
    j.errlen = errlen;
    err[0] = '\0';
    rc = request(&j, &q);
    if (rc == RL_OK) {
        len = envoy__service__ratelimit__v3__rate_limit_request__get_packed_size(
            &q);
        /* At least a byte, so that an empty message (every field at its
         * default) still leaves out with memory to point at. */
        if ((rc = rl_buf_reserve(out, len > 0 ? len : 1, &w)) == RL_OK) {
            envoy__service__ratelimit__v3__rate_limit_request__pack(&q, w);
            rl_buf_commit(out, len);
        } else {
            snprintf(err, errlen, "%s", rl_strerror(rc));
        }
    }
    arena_free(&j);
    return rc;
}

/* ------------------------------------------------------------------------ */
/* The response */

/* A string as protojson writes one: quotes, backslashes and control
 * characters escaped, the rest as is; a byte that is not UTF-8 (nothing
 * this server encodes has one) as U+FFFD. */
static int put_str(rl_buf_t *o, const char *s)
{
    static const char hex[] = "0123456789abcdef";
    const unsigned char *p = (const unsigned char *)(s != NULL ? s : "");
    size_t n = strlen((const char *)p), k = 0, u;
    int rc = rl_buf_append(o, "\"", 1);

    while (rc == RL_OK && k < n) {
        unsigned c = p[k];
        char e[6];
        if (c == '"' || c == '\\') {
            e[0] = '\\';
            e[1] = (char)c;
            rc = rl_buf_append(o, e, 2);
            k++;
        } else if (c < 0x20) {
            const char *short_ = c == '\n'   ? "\\n"
                                 : c == '\r' ? "\\r"
                                 : c == '\t' ? "\\t"
                                 : c == '\b' ? "\\b"
                                 : c == '\f' ? "\\f"
                                             : NULL;
            if (short_ != NULL) {
                rc = rl_buf_append(o, short_, 2);
            } else {
                memcpy(e, "\\u00", 4);
                e[4] = hex[c >> 4];
                e[5] = hex[c & 15];
                rc = rl_buf_append(o, e, 6);
            }
            k++;
        } else if ((u = utf8_len(p + k, n - k)) == 0) {
            rc = rl_buf_append(o, "\xef\xbf\xbd", 3);
            k++;
        } else {
            rc = rl_buf_append(o, p + k, u);
            k += u;
        }
    }
    return rc == RL_OK ? rl_buf_append(o, "\"", 1) : rc;
}

/* A double as protojson writes one: an integer without a fraction, else
 * the shortest form that reads back the same. */
static int put_double(rl_buf_t *o, double d)
{
    char b[40];
    int prec;

    if (isnan(d) || isinf(d))
        return RL_EINVAL;
    if (d == floor(d) && fabs(d) < 1e21)
        return rl_buf_printf(o, "%.0f", d);
    for (prec = 15; prec < 17; prec++) {
        snprintf(b, sizeof(b), "%.*g", prec, d);
        if (strtod(b, NULL) == d)
            break;
    }
    snprintf(b, sizeof(b), "%.*g", prec, d);
    return rl_buf_printf(o, "%s", b);
}

static int key_cmp(const void *a, const void *b)
{
    const Google__Protobuf__Struct__FieldsEntry *x =
        *(const Google__Protobuf__Struct__FieldsEntry *const *)a;
    const Google__Protobuf__Struct__FieldsEntry *y =
        *(const Google__Protobuf__Struct__FieldsEntry *const *)b;

    return strcmp(x->key ? x->key : "", y->key ? y->key : "");
}

static int put_value(rl_buf_t *o, const gvalue_t *v, int depth);

/* A Struct: an object with its keys in order, as Go's protojson sorts a
 * map's. */
static int put_struct(rl_buf_t *o, const gstruct_t *s, int depth)
{
    Google__Protobuf__Struct__FieldsEntry **e;
    size_t i;
    int rc;

    if (depth > 100)
        return RL_EINVAL;
    if (s->n_fields == 0)
        return rl_buf_append(o, "{}", 2);
    if ((e = malloc(s->n_fields * sizeof(*e))) == NULL)
        return RL_ENOMEM;
    memcpy(e, s->fields, s->n_fields * sizeof(*e));
    qsort(e, s->n_fields, sizeof(*e), key_cmp);
    rc = rl_buf_append(o, "{", 1);
    for (i = 0; rc == RL_OK && i < s->n_fields; i++) {
        if (i > 0)
            rc = rl_buf_append(o, ",", 1);
        if (rc == RL_OK)
            rc = put_str(o, e[i]->key);
        if (rc == RL_OK)
            rc = rl_buf_append(o, ":", 1);
        if (rc == RL_OK)
            rc = put_value(o, e[i]->value, depth + 1);
    }
    free(e);
    return rc == RL_OK ? rl_buf_append(o, "}", 1) : rc;
}

static int put_value(rl_buf_t *o, const gvalue_t *v, int depth)
{
    size_t i;
    int rc;

    if (v == NULL || depth > 100)
        return RL_EINVAL;
    switch (v->kind_case) {
    case GOOGLE__PROTOBUF__VALUE__KIND_NULL_VALUE:
        return rl_buf_append(o, "null", 4);
    case GOOGLE__PROTOBUF__VALUE__KIND_NUMBER_VALUE:
        return put_double(o, v->number_value);
    case GOOGLE__PROTOBUF__VALUE__KIND_STRING_VALUE:
        return put_str(o, v->string_value);
    case GOOGLE__PROTOBUF__VALUE__KIND_BOOL_VALUE:
        return v->bool_value ? rl_buf_append(o, "true", 4)
                             : rl_buf_append(o, "false", 5);
    case GOOGLE__PROTOBUF__VALUE__KIND_STRUCT_VALUE:
        if (v->struct_value == NULL)
            return rl_buf_append(o, "{}", 2);
        return put_struct(o, v->struct_value, depth + 1);
    case GOOGLE__PROTOBUF__VALUE__KIND_LIST_VALUE:
        rc = rl_buf_append(o, "[", 1);
        for (i = 0; rc == RL_OK && v->list_value != NULL &&
                    i < v->list_value->n_values;
             i++) {
            if (i > 0)
                rc = rl_buf_append(o, ",", 1);
            if (rc == RL_OK)
                rc = put_value(o, v->list_value->values[i], depth + 1);
        }
        return rc == RL_OK ? rl_buf_append(o, "]", 1) : rc;
    default:
        /* No kind: protobuf-c drops a oneof's string that is the field's
         * default (empty), so an empty string can come back so. protojson
         * would refuse the Value; null says least and breaks nothing. */
        return rl_buf_append(o, "null", 4);
    }
}

static int put_code(rl_buf_t *o, int code)
{
    static const char *const names[] = {"UNKNOWN", "OK", "OVER_LIMIT"};

    if (code >= 0 && code < 3)
        return rl_buf_printf(o, "\"%s\"", names[code]);
    return rl_buf_printf(o, "%d", code);
}

/* A Duration: seconds, then 0, 3, 6 or 9 digits of fraction, then "s". */
static int put_duration(rl_buf_t *o, const Google__Protobuf__Duration *d)
{
    int64_t s = d->seconds;
    int32_t ns = d->nanos;
    int neg = s < 0 || ns < 0;
    uint64_t us = s < 0 ? (uint64_t)0 - (uint64_t)s : (uint64_t)s;
    uint32_t uns = ns < 0 ? (uint32_t)(-(int64_t)ns) : (uint32_t)ns;

    if (uns == 0)
        return rl_buf_printf(o, "\"%s%llus\"", neg ? "-" : "",
                             (unsigned long long)us);
    if (uns % 1000000 == 0)
        return rl_buf_printf(o, "\"%s%llu.%03us\"", neg ? "-" : "",
                             (unsigned long long)us, uns / 1000000);
    if (uns % 1000 == 0)
        return rl_buf_printf(o, "\"%s%llu.%06us\"", neg ? "-" : "",
                             (unsigned long long)us, uns / 1000);
    return rl_buf_printf(o, "\"%s%llu.%09us\"", neg ? "-" : "",
                         (unsigned long long)us, uns);
}

static int put_status(rl_buf_t *o, const dstatus_t *s)
{
    int rc = rl_buf_append(o, "{", 1), any = 0;

#define SEP() (any++ ? rl_buf_append(o, ",", 1) : RL_OK)
    if (rc == RL_OK && s->code != 0 &&
        (rc = SEP()) == RL_OK && (rc = rl_buf_append(o, "\"code\":", 7)) == RL_OK)
        rc = put_code(o, (int)s->code);
    if (rc == RL_OK && s->current_limit != NULL) {
        const Envoy__Service__Ratelimit__V3__RateLimitResponse__RateLimit *l =
            s->current_limit;
        int lany = 0;
        if ((rc = SEP()) == RL_OK)
            rc = rl_buf_append(o, "\"currentLimit\":{", 16);
        /* Declaration order: name (3) comes first in rls.proto. */
        if (rc == RL_OK && l->name != NULL && l->name[0] != '\0' &&
            (rc = rl_buf_append(o, "\"name\":", 7)) == RL_OK) {
            rc = put_str(o, l->name);
            lany = 1;
        }
        if (rc == RL_OK && l->requests_per_unit != 0)
            rc = rl_buf_printf(o, "%s\"requestsPerUnit\":%u", lany++ ? "," : "",
                               l->requests_per_unit);
        if (rc == RL_OK && l->unit != 0) {
            if ((int)l->unit > 0 && (int)l->unit < 8)
                rc = rl_buf_printf(o, "%s\"unit\":\"%s\"", lany ? "," : "",
                                   unit_names[l->unit]);
            else
                rc = rl_buf_printf(o, "%s\"unit\":%d", lany ? "," : "",
                                   (int)l->unit);
        }
        if (rc == RL_OK)
            rc = rl_buf_append(o, "}", 1);
    }
    if (rc == RL_OK && s->limit_remaining != 0 && (rc = SEP()) == RL_OK)
        rc = rl_buf_printf(o, "\"limitRemaining\":%u", s->limit_remaining);
    if (rc == RL_OK && s->duration_until_reset != NULL &&
        (rc = SEP()) == RL_OK &&
        (rc = rl_buf_append(o, "\"durationUntilReset\":", 21)) == RL_OK)
        rc = put_duration(o, s->duration_until_reset);
#undef SEP
    return rc == RL_OK ? rl_buf_append(o, "}", 1) : rc;
}

static int put_headers(rl_buf_t *o, const char *name,
                       Envoy__Config__Core__V3__HeaderValue *const *h,
                       size_t n)
{
    size_t i;
    int rc = rl_buf_printf(o, "\"%s\":[", name);

    for (i = 0; rc == RL_OK && i < n; i++) {
        int any = 0;
        if (i > 0)
            rc = rl_buf_append(o, ",", 1);
        if (rc == RL_OK)
            rc = rl_buf_append(o, "{", 1);
        if (rc == RL_OK && h[i]->key != NULL && h[i]->key[0] != '\0' &&
            (rc = rl_buf_append(o, "\"key\":", 6)) == RL_OK) {
            rc = put_str(o, h[i]->key);
            any = 1;
        }
        if (rc == RL_OK && h[i]->value != NULL && h[i]->value[0] != '\0' &&
            (rc = rl_buf_append(o, any ? ",\"value\":" : "\"value\":",
                                any ? 9 : 8)) == RL_OK)
            rc = put_str(o, h[i]->value);
        if (rc == RL_OK)
            rc = rl_buf_append(o, "}", 1);
    }
    return rc == RL_OK ? rl_buf_append(o, "]", 1) : rc;
}

int rls_envoy_json_response(const uint8_t *m, size_t n, rl_buf_t *out,
                            int *code)
{
    resp_t *r = envoy__service__ratelimit__v3__rate_limit_response__unpack(
        NULL, n, m);
    size_t i;
    int rc, any = 0;

    *code = 0;
    if (r == NULL)
        return RL_EINVAL;
    *code = (int)r->overall_code;
    rc = rl_buf_append(out, "{", 1);
#define SEP() (any++ ? rl_buf_append(out, ",", 1) : RL_OK)
    if (rc == RL_OK && r->overall_code != 0 && (rc = SEP()) == RL_OK &&
        (rc = rl_buf_append(out, "\"overallCode\":", 14)) == RL_OK)
        rc = put_code(out, (int)r->overall_code);
    if (rc == RL_OK && r->n_statuses > 0 && (rc = SEP()) == RL_OK) {
        rc = rl_buf_append(out, "\"statuses\":[", 12);
        for (i = 0; rc == RL_OK && i < r->n_statuses; i++) {
            if (i > 0)
                rc = rl_buf_append(out, ",", 1);
            if (rc == RL_OK)
                rc = put_status(out, r->statuses[i]);
        }
        if (rc == RL_OK)
            rc = rl_buf_append(out, "]", 1);
    }
    if (rc == RL_OK && r->n_response_headers_to_add > 0 &&
        (rc = SEP()) == RL_OK)
        rc = put_headers(out, "responseHeadersToAdd",
                         r->response_headers_to_add,
                         r->n_response_headers_to_add);
    if (rc == RL_OK && r->n_request_headers_to_add > 0 &&
        (rc = SEP()) == RL_OK)
        rc = put_headers(out, "requestHeadersToAdd", r->request_headers_to_add,
                         r->n_request_headers_to_add);
    if (rc == RL_OK && r->dynamic_metadata != NULL && (rc = SEP()) == RL_OK &&
        (rc = rl_buf_append(out, "\"dynamicMetadata\":", 18)) == RL_OK)
        rc = put_struct(out, r->dynamic_metadata, 0);
#undef SEP
    if (rc == RL_OK)
        rc = rl_buf_append(out, "}", 1);
    envoy__service__ratelimit__v3__rate_limit_response__free_unpacked(r, NULL);
    return rc;
}
