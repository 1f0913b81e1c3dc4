/* The /check request's parameters (see check_query.h for the rules). */
#include "check/http_check_query.h"

#include <string.h>

#include "rl_error.h"
#include "rl_parse.h"

static int is_tchar(unsigned char c)
{
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
        (c >= '0' && c <= '9'))
        return 1;
    return c != '\0' && strchr("!#$%&'*+-.^_`|~", c) != NULL;
}

static int lower_copy(char *dst, const char *src)
{
    size_t i, n = src != NULL ? strlen(src) : 0;

    if (n > RLS_CHECK_HEADER_MAX)
        return RL_EINVAL;
    for (i = 0; i < n; i++) {
        unsigned char c = (unsigned char)src[i];
        if (!is_tchar(c))
            return RL_EINVAL;
        dst[i] = (char)(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
    }
    dst[n] = '\0';
    return RL_OK;
}

int rls_check_opts_init(rls_check_opts_t *o, const char *key_header,
                        const char *rule_header)
{
    memset(o, 0, sizeof(*o));
    if (lower_copy(o->key_header, key_header) != RL_OK ||
        lower_copy(o->rule_header, rule_header) != RL_OK)
        return RL_EINVAL;
    o->key_xff = strcmp(o->key_header, "x-forwarded-for") == 0;
    o->xff_hops = 1;
    return RL_OK;
}

/* Percent-decodes v[0, n) into dst (cap bytes), its length into *len.
 * Returns 0, RL_EINVAL for a bad escape, or RL_EFULL when it would pass
 * cap. */
static int decode(const char *v, size_t n, char *dst, size_t cap,
                  size_t *len)
{
    size_t i, o = 0;
    int hi, lo;

    for (i = 0; i < n; i++) {
        unsigned char c = (unsigned char)v[i];
        if (o == cap)
            return RL_EFULL;
        if (c == '%') {
            if (n - i < 3 || (hi = rl_hex_digit((unsigned char)v[i + 1])) < 0 ||
                (lo = rl_hex_digit((unsigned char)v[i + 2])) < 0)
                return RL_EINVAL;
            dst[o++] = (char)(hi * 16 + lo);
            i += 2;
        } else {
            dst[o++] = c == '+' ? ' ' : (char)c;
        }
    }
    *len = o;
    return RL_OK;
}

static int name_is(const char *n, size_t len, const char *lit)
{
    return len == strlen(lit) && memcmp(n, lit, len) == 0;
}

enum {
    SEEN_RULE = 1,
    SEEN_KEY = 2,
    SEEN_COST = 4,
    SEEN_DENY = 8,
    SEEN_OP = 16,
    SEEN_HANDLE = 32,
    SEEN_ACTUAL = 64
};

/* level=KEY=RULE: one more level of c, its bytes decoded into out->levels
 * after the others'. */
static int level_param(const char *v, size_t vlen, rl_check_t *c,
                       rls_check_query_t *out, const char **why)
{
    char *at = out->levels + out->levels_len;
    rl_level_t *l;
    size_t d, k;

    if (c->nlevels == RL_LEVELS_MAX) {
        *why = "more than 8 levels";
        return RL_EINVAL;
    }
    switch (decode(v, vlen, at, sizeof(out->levels) - out->levels_len, &d)) {
    case RL_OK:
        break;
    case RL_EFULL:
        *why = "the levels are longer than the query can be";
        return RL_EINVAL;
    default:
        *why = "bad percent-escape in the query (expected %XX)";
        return RL_EINVAL;
    }
    for (k = d; k > 0 && at[k - 1] != '='; k--)
        ;
    if (k == 0 || k == d) {
        *why = "level must be KEY=RULE";
        return RL_EINVAL;
    }
    if (k - 1 == 0) {
        *why = "a level's key is empty";
        return RL_EINVAL;
    }
    if (k - 1 > RL_KEY_MAX) {
        *why = rl_strerror(RL_EKEYLONG);
        return RL_EINVAL;
    }
    if (d - k > RL_RULE_MAX) {
        *why = rl_strerror(RL_ERULELONG);
        return RL_EINVAL;
    }
    if (memchr(at, '\0', k - 1) != NULL) {
        out->reason = RLS_CHECK_BAD_KEY;
        *why = rl_strerror(RL_EKEYNUL);
        return RL_EINVAL;
    }
    l = &c->levels[c->nlevels++];
    l->key = at;
    l->key_len = k - 1;
    l->rule = at + k;
    l->rule_len = d - k;
    out->levels_len += d;
    return RL_OK;
}

/* op= values, by RL_OP_* number. */
static const char *const op_names[RL_OP_MAX] = {"check",   "reserve", "settle",
                                                "acquire", "release", "renew"};

/* One name=value pair of the query, into c (and the bytes out holds for
 * it). */
static int param(const char *p, size_t n, rl_check_t *c, rls_check_query_t *out,
                 unsigned *seen, const char **why)
{
    const char *eq = memchr(p, '=', n);
    const char *v = eq != NULL ? eq + 1 : p + n;
    size_t nlen = eq != NULL ? (size_t)(eq - p) : n;
    size_t vlen = (size_t)(p + n - v);
    char num[24];
    uint64_t x;
    size_t d;
    int rc;

    if (name_is(p, nlen, "rule")) {
        if (*seen & SEEN_RULE)
            goto twice;
        *seen |= SEEN_RULE;
        rc = decode(v, vlen, out->rule, sizeof(out->rule), &d);
        if (rc == RL_EFULL) {
            *why = rl_strerror(RL_ERULELONG);
            return RL_EINVAL;
        }
        if (rc != RL_OK)
            goto escape;
        c->rule_len = d;
        return RL_OK;
    }
    if (name_is(p, nlen, "key")) {
        if (*seen & SEEN_KEY)
            goto twice;
        *seen |= SEEN_KEY;
        rc = decode(v, vlen, out->key, sizeof(out->key), &d);
        if (rc == RL_EFULL) {
            *why = rl_strerror(RL_EKEYLONG);
            return RL_EINVAL;
        }
        if (rc != RL_OK)
            goto escape;
        c->key_len = d;
        if (c->key_len == 0) {
            *why = "key= is empty";
            return RL_EINVAL;
        }
        return RL_OK;
    }
    if (name_is(p, nlen, "cost")) {
        if (*seen & SEEN_COST)
            goto twice;
        *seen |= SEEN_COST;
        if (decode(v, vlen, num, sizeof(num), &d) != RL_OK ||
            rl_parse_u64n(num, d, 1, UINT32_MAX, &x) != RL_OK) {
            *why = "cost must be a whole number from 1 to 4294967295";
            return RL_EINVAL;
        }
        c->cost = (uint32_t)x;
        return RL_OK;
    }
    if (name_is(p, nlen, "deny_status")) {
        if (*seen & SEEN_DENY)
            goto twice;
        *seen |= SEEN_DENY;
        if (decode(v, vlen, num, sizeof(num), &d) != RL_OK ||
            rl_parse_u64n(num, d, 1, 999, &x) != RL_OK ||
            (x != 403 && x != 429)) {
            *why = "deny_status must be 403 or 429";
            return RL_EINVAL;
        }
        out->deny_status = (int)x;
        return RL_OK;
    }
    if (name_is(p, nlen, "op")) {
        uint32_t k;
        if (*seen & SEEN_OP)
            goto twice;
        *seen |= SEEN_OP;
        for (k = 0; k < RL_OP_MAX; k++)
            if (name_is(v, vlen, op_names[k]))
                break;
        if (k == RL_OP_MAX) {
            *why = "op must be check, reserve, settle, acquire, release or "
                   "renew";
            return RL_EINVAL;
        }
        c->op = k;
        return RL_OK;
    }
    if (name_is(p, nlen, "handle")) {
        size_t i;
        int hi, lo;
        if (*seen & SEEN_HANDLE)
            goto twice;
        *seen |= SEEN_HANDLE;
        if (vlen % 2 != 0 || vlen / 2 > RL_HANDLE_MAX || vlen == 0) {
            *why = "handle must be the hex digits an answer gave";
            return RL_EINVAL;
        }
        for (i = 0; i < vlen / 2; i++) {
            if ((hi = rl_hex_digit((unsigned char)v[2 * i])) < 0 ||
                (lo = rl_hex_digit((unsigned char)v[2 * i + 1])) < 0) {
                *why = "handle must be the hex digits an answer gave";
                return RL_EINVAL;
            }
            out->handle[i] = (uint8_t)(hi * 16 + lo);
        }
        c->handle_len = vlen / 2;
        return RL_OK;
    }
    if (name_is(p, nlen, "actual")) {
        if (*seen & SEEN_ACTUAL)
            goto twice;
        *seen |= SEEN_ACTUAL;
        if (decode(v, vlen, num, sizeof(num), &d) != RL_OK ||
            rl_parse_u64n(num, d, 0, UINT32_MAX, &x) != RL_OK) {
            *why = "actual must be a whole number from 0 to 4294967295";
            return RL_EINVAL;
        }
        c->actual = x;
        return RL_OK;
    }
    if (name_is(p, nlen, "level"))
        return level_param(v, vlen, c, out, why);
    return RL_OK; /* not ours */
twice:
    *why = "a parameter is given twice";
    return RL_EINVAL;
escape:
    *why = "bad percent-escape in the query (expected %XX)";
    return RL_EINVAL;
}

/* The key: n bytes at v, trimmed. */
static int key_set(const char *v, size_t n, rl_check_t *c,
                   rls_check_query_t *out, const char **why)
{
    while (n > 0 && (*v == ' ' || *v == '\t')) {
        v++;
        n--;
    }
    while (n > 0 && (v[n - 1] == ' ' || v[n - 1] == '\t'))
        n--;
    if (n == 0) {
        *why = "the key header is empty";
        return RL_EINVAL;
    }
    if (n > RL_KEY_MAX) {
        *why = rl_strerror(RL_EKEYLONG);
        return RL_EINVAL;
    }
    memcpy(out->key, v, n);
    c->key_len = n;
    return RL_OK;
}

/* The key from X-Forwarded-For: the entry o->xff_hops from the right of
 * every line's entries taken in order (the last RLS_CHECK_XFF_HOPS_MAX
 * kept as they go by), or the leftmost for 0. Returns 0, or RL_EINVAL
 * when there is no such entry. */
static int key_from_xff(const rls_http_req_t *q, const rls_check_opts_t *o,
                        rl_check_t *c, rls_check_query_t *out, const char **why)
{
    const char *from[RLS_CHECK_XFF_HOPS_MAX], *to[RLS_CHECK_XFF_HOPS_MAX];
    const char *pos = NULL, *v, *p, *e, *comma;
    size_t vlen, seen = 0, k;

    while (rls_http_header_next(q, o->key_header, &pos, &v, &vlen)) {
        for (p = v, e = v + vlen; p <= e; p = comma + 1) {
            comma = memchr(p, ',', (size_t)(e - p));
            if (comma == NULL)
                comma = e;
            if (o->xff_hops == 0)
                return key_set(p, (size_t)(comma - p), c, out, why);
            from[seen % RLS_CHECK_XFF_HOPS_MAX] = p;
            to[seen % RLS_CHECK_XFF_HOPS_MAX] = comma;
            seen++;
        }
    }
    if (seen == 0 || seen < o->xff_hops) {
        *why = "X-Forwarded-For has fewer addresses than the trusted hops "
               "(--check-xff-hops)";
        return RL_EINVAL;
    }
    k = (seen - o->xff_hops) % RLS_CHECK_XFF_HOPS_MAX;
    return key_set(from[k], (size_t)(to[k] - from[k]), c, out, why);
}

int rls_check_query(const rls_http_req_t *q, const rls_check_opts_t *o,
                    uint32_t path_op, rl_check_t *c, rls_check_query_t *out,
                    const char **why)
{
    const char *t = q->target, *end = q->target + q->target_len, *p, *amp;
    const char *v;
    size_t vlen;
    unsigned seen = 0;
    int rc;

    c->rule = out->rule;
    c->key = out->key;
    c->handle = out->handle;
    c->rule_len = c->key_len = c->handle_len = 0;
    c->cost = 1;
    c->op = RL_OP_CHECK;
    c->actual = 0;
    c->nlevels = 0;
    out->levels_len = 0;
    out->deny_status = 429;
    out->reason = RLS_CHECK_BAD_QUERY;
    p = memchr(t, '?', q->target_len);
    for (p = p != NULL ? p + 1 : end; p < end; p = amp + 1) {
        amp = memchr(p, '&', (size_t)(end - p));
        if (amp == NULL)
            amp = end;
        if (amp > p &&
            (rc = param(p, (size_t)(amp - p), c, out, &seen, why)) != RL_OK)
            return rc;
    }
    if (path_op != RL_OP_CHECK) {
        /* The path says what is done; op= may only agree. */
        if ((seen & SEEN_OP) && c->op != path_op) {
            *why = "op= disagrees with the path";
            return RL_EINVAL;
        }
        c->op = path_op;
    } else if (c->op == RL_OP_SETTLE || c->op == RL_OP_RELEASE ||
               c->op == RL_OP_RENEW) {
        *why = "settle, release and renew are POST /settle, /release, "
               "/renew";
        return RL_EINVAL;
    }
    if (c->nlevels > 0) {
        /* The levels name every caller and rule: nothing else does. */
        if (seen & (SEEN_RULE | SEEN_KEY)) {
            *why = "level= stands instead of rule= and key=";
            return RL_EINVAL;
        }
        if (c->op != RL_OP_CHECK) {
            *why = "levels are checks: no op= but check";
            return RL_EINVAL;
        }
        return RL_OK;
    }
    if (c->op == RL_OP_SETTLE || c->op == RL_OP_RELEASE ||
        c->op == RL_OP_RENEW) {
        /* The handle names the caller and the rule. */
        if (!(seen & SEEN_HANDLE)) {
            *why = "no handle: give handle=HEX, as the reservation's or "
                   "lease's answer carried it";
            return RL_EINVAL;
        }
        if (c->op == RL_OP_SETTLE && !(seen & SEEN_ACTUAL)) {
            *why = "no actual: give actual=N, the cost really used";
            return RL_EINVAL;
        }
        return RL_OK;
    }
    if (!(seen & SEEN_RULE) && o->rule_header[0] != '\0' &&
        rls_http_header(q, o->rule_header, &v, &vlen)) {
        if (vlen > RL_RULE_MAX) {
            *why = rl_strerror(RL_ERULELONG);
            return RL_EINVAL;
        }
        memcpy(out->rule, v, vlen);
        c->rule_len = vlen;
    }
    if (c->rule_len == 0) {
        out->reason = RLS_CHECK_NO_RULE;
        *why = o->rule_header[0] != '\0'
                   ? "no rule: give rule=NAME in the query or the rule "
                     "header (--check-rule-header)"
                   : "no rule: give rule=NAME in the query";
        return RL_EINVAL;
    }
    if (!(seen & SEEN_KEY)) {
        out->reason = RLS_CHECK_NO_KEY;
        if (o->key_header[0] == '\0' ||
            !rls_http_header(q, o->key_header, &v, &vlen)) {
            *why = o->key_header[0] != '\0'
                       ? "no key: give key=VALUE in the query or the key "
                         "header (--check-key-header)"
                       : "no key: give key=VALUE in the query";
            return RL_EINVAL;
        }
        rc = o->key_xff ? key_from_xff(q, o, c, out, why)
                        : key_set(v, vlen, c, out, why);
        if (rc != RL_OK)
            return rc;
    }
    if (memchr(out->key, '\0', c->key_len) != NULL) {
        out->reason = RLS_CHECK_BAD_KEY;
        *why = rl_strerror(RL_EKEYNUL);
        return RL_EINVAL;
    }
    return RL_OK;
}
