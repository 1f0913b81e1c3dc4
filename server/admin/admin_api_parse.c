/* The admin endpoint's pure parts: see admin_api_parse.h. */
#include "admin/admin_api_parse.h"

#include <arpa/inet.h>
#include <math.h>
#include <netinet/in.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "policy/rules.h"
#include "rl_error.h"
#include "rl_parse.h"
#include "rl_validate.h"

/* ---- the request ---------------------------------------------------- */

static int eq(const char *p, size_t n, const char *s)
{
    return n == strlen(s) && memcmp(p, s, n) == 0;
}

/* Percent-decodes s[0, n) into r->buf; *out points at the result.
 * Returns 0, or 400 with *why (a bad escape, a NUL). */
static int decode(rls_admin_req_t *r, const char *s, size_t n, const char **out,
                  size_t *olen, const char **why)
{
    char *d = r->buf + r->used;
    size_t i, k = 0;

    /* Decoding never lengthens: the target fits the head, and so does
     * everything decoded from it. */
    if (n > sizeof(r->buf) - r->used) {
        *why = "query too long";
        return 400;
    }
    for (i = 0; i < n; i++) {
        char c = s[i];
        if (c == '%') {
            int hi, lo;
            if (i + 2 >= n ||
                (hi = rl_hex_digit((unsigned char)s[i + 1])) < 0 ||
                (lo = rl_hex_digit((unsigned char)s[i + 2])) < 0) {
                *why = "a '%' without two hex digits after it";
                return 400;
            }
            c = (char)(hi * 16 + lo);
            i += 2;
        }
        if (c == '\0') {
            *why = "a NUL byte in the query";
            return 400;
        }
        d[k++] = c;
    }
    *out = d;
    *olen = k;
    r->used += k;
    return 0;
}

/* One parameter name=value (value raw, not decoded yet). */
static int param(rls_admin_req_t *r, const char *name, size_t nl,
                 const char *val, size_t vl, unsigned *seen, const char **why)
{
    static const char *const once[] = {"rule",   "key",  "domain", "format",
                                       "leases", "part", "loop"};
    const char *v;
    size_t n, i;
    int rc;

    for (i = 0; i < sizeof(once) / sizeof(once[0]); i++)
        if (eq(name, nl, once[i])) {
            if (*seen & (1u << i)) {
                snprintf(r->buf + sizeof(r->buf) - 64, 64,
                         "parameter '%s' given twice", once[i]);
                *why = r->buf + sizeof(r->buf) - 64;
                return 400;
            }
            *seen |= 1u << i;
            break;
        }
    if (eq(name, nl, "entry")) {
        const char *eqs = memchr(val, '=', vl);
        uint32_t e = r->nentries;
        if (e == RLS_ADMIN_ENTRIES_MAX) {
            *why = "more than 32 entries";
            return 400;
        }
        if (eqs == NULL || eqs == val) {
            *why = "an entry is KEY=VALUE, with a key";
            return 400;
        }
        if ((rc = decode(r, val, (size_t)(eqs - val), &r->ekey[e], &r->eklen[e],
                         why)) != 0 ||
            (rc = decode(r, eqs + 1, vl - (size_t)(eqs - val) - 1,
                         &r->evalue[e], &r->evlen[e], why)) != 0)
            return rc;
        r->nentries++;
        return 0;
    }
    if ((rc = decode(r, val, vl, &v, &n, why)) != 0)
        return rc;
    if (eq(name, nl, "rule")) {
        r->rule = v;
        r->rule_len = n;
    } else if (eq(name, nl, "key")) {
        r->key = v;
        r->key_len = n;
    } else if (eq(name, nl, "domain")) {
        r->domain = v;
        r->domain_len = n;
    } else if (eq(name, nl, "format")) {
        if (eq(v, n, "text"))
            r->text = 1;
        else if (eq(v, n, "summary"))
            r->summary = 1;
        else if (!eq(v, n, "json")) {
            *why = "format is json, text or summary";
            return 400;
        }
    } else if (eq(name, nl, "leases")) {
        if (eq(v, n, "1") || eq(v, n, "true"))
            r->leases = 1;
        else if (!eq(v, n, "0") && !eq(v, n, "false")) {
            *why = "leases is 1 or 0";
            return 400;
        }
    } else if (eq(name, nl, "part")) {
        size_t a = 0, b;
        while (a <= n) {
            for (b = a; b < n && v[b] != ','; b++)
                ;
            if (eq(v + a, b - a, "rules"))
                r->parts |= RLS_ADMIN_PART_RULES;
            else if (eq(v + a, b - a, "switches"))
                r->parts |= RLS_ADMIN_PART_SWITCHES;
            else if (eq(v + a, b - a, "envoy"))
                r->parts |= RLS_ADMIN_PART_ENVOY;
            else {
                *why = "part is a comma-separated list of rules, "
                       "switches, envoy";
                return 400;
            }
            a = b + 1;
        }
    } else if (eq(name, nl, "loop")) {
        unsigned x = 0;
        if (n == 0 || n > 3) {
            *why = "loop is a loop's number, 0 to 999";
            return 400;
        }
        for (i = 0; i < n; i++) {
            if (v[i] < '0' || v[i] > '9') {
                *why = "loop is a loop's number, 0 to 999";
                return 400;
            }
            x = x * 10 + (unsigned)(v[i] - '0');
        }
        r->loop = (int)x;
    } else {
        *why = "unknown parameter (rule, key, domain, entry, format, "
               "leases, part, loop)";
        return 400;
    }
    return 0;
}

/* The caller of a usage route: rule and key, or domain and entries. */
static int caller_ok(const rls_admin_req_t *r, const char **why)
{
    uint32_t i;

    if (r->rule != NULL || r->key != NULL) {
        if (r->domain != NULL || r->nentries > 0) {
            *why = "give rule and key, or domain and entries, not both";
            return 400;
        }
        if (r->rule == NULL || r->key == NULL) {
            *why = "give both rule and key";
            return 400;
        }
        if (!rls_rule_name_ok(r->rule, r->rule_len)) {
            *why = "bad rule name (1 to 128 bytes of [A-Za-z0-9_.:-])";
            return 400;
        }
        if (r->key_len == 0 || r->key_len > RL_KEY_MAX) {
            *why = "key is 1 to 512 bytes";
            return 400;
        }
        return 0;
    }
    if (r->domain == NULL || r->domain_len == 0 || r->nentries == 0) {
        *why = "give rule and key, or domain and at least one entry";
        return 400;
    }
    for (i = 0; i < r->nentries; i++)
        if (r->eklen[i] == 0) {
            *why = "an entry's key is empty";
            return 400;
        }
    return 0;
}

int rls_admin_parse(const char *method, size_t mlen, const char *target,
                    size_t tlen, rls_admin_req_t *r, const char **why,
                    const char **allow)
{
    const char *q = memchr(target, '?', tlen);
    size_t plen = q != NULL ? (size_t)(q - target) : tlen, at;
    int get = eq(method, mlen, "GET"), head = eq(method, mlen, "HEAD"),
        post = eq(method, mlen, "POST");
    unsigned seen = 0;
    int rc, writes;

    memset(r, 0, offsetof(rls_admin_req_t, buf));
    r->used = 0;
    r->loop = -1;
    *allow = NULL;
    if (eq(target, plen, "/"))
        r->route = RLS_ADMIN_INDEX;
    else if (eq(target, plen, "/v1/usage"))
        r->route = RLS_ADMIN_USAGE;
    else if (eq(target, plen, "/v1/usage/reset"))
        r->route = RLS_ADMIN_RESET;
    else if (eq(target, plen, "/v1/config"))
        r->route = RLS_ADMIN_CONFIG;
    else if (eq(target, plen, "/v1/top"))
        r->route = RLS_ADMIN_TOP;
    else if (eq(target, plen, "/v1/loops"))
        r->route = RLS_ADMIN_LOOPS;
    else if (eq(target, plen, "/v1/loops/pause"))
        r->route = RLS_ADMIN_LOOP_PAUSE;
    else if (eq(target, plen, "/v1/loops/resume"))
        r->route = RLS_ADMIN_LOOP_RESUME;
    else {
        *why = "no such path (GET / lists them)";
        return 404;
    }
    /* Reads and writes apart: a read is GET (or HEAD), a write POST. */
    writes = r->route == RLS_ADMIN_RESET || r->route == RLS_ADMIN_LOOP_PAUSE ||
             r->route == RLS_ADMIN_LOOP_RESUME;
    if (writes ? !post : !(get || head)) {
        *why =
            writes ? "a write (a reset, a pause) is a POST" : "a read is a GET";
        *allow = writes ? "Allow: POST\r\n" : "Allow: GET, HEAD\r\n";
        return 405;
    }
    r->write = post;
    r->head = head;
    for (at = plen + 1; q != NULL && at <= tlen;) {
        const char *p = target + at, *amp, *e;
        size_t n;
        amp = memchr(p, '&', tlen - at);
        n = amp != NULL ? (size_t)(amp - p) : tlen - at;
        if (n > 0) {
            e = memchr(p, '=', n);
            if (e == NULL) {
                *why = "a parameter without '='";
                return 400;
            }
            if ((rc = param(r, p, (size_t)(e - p), e + 1,
                            n - (size_t)(e - p) - 1, &seen, why)) != 0)
                return rc;
        }
        at += n + 1;
    }
    if (r->summary && r->route != RLS_ADMIN_TOP) {
        *why = "format=summary is for /v1/top";
        return 400;
    }
    switch (r->route) {
    case RLS_ADMIN_TOP:
        /* The per-rule counters' names: a rule's, envoy:DOMAIN, and the
         * two that are no rule's. */
        if (r->key != NULL || r->domain != NULL || r->nentries > 0 ||
            r->leases || r->parts || r->loop >= 0) {
            *why = "/v1/top takes rule and format alone";
            return 400;
        }
        if (r->rule != NULL && !rls_rule_name_ok(r->rule, r->rule_len) &&
            !eq(r->rule, r->rule_len, "(inline)") &&
            !eq(r->rule, r->rule_len, "(other)")) {
            *why = "bad rule name (1 to 128 bytes of [A-Za-z0-9_.:-], or "
                   "(inline), (other))";
            return 400;
        }
        if (r->summary && (r->rule == NULL || r->text)) {
            *why = "format=summary needs a rule";
            return 400;
        }
        return 0;
    case RLS_ADMIN_USAGE:
    case RLS_ADMIN_RESET:
        if (r->parts) {
            *why = "part is for /v1/config";
            return 400;
        }
        if (r->leases && r->route != RLS_ADMIN_RESET) {
            *why = "leases=1 is for a reset (a read shows them)";
            return 400;
        }
        if (r->loop >= 0) {
            *why = "loop is for /v1/loops/pause and /v1/loops/resume";
            return 400;
        }
        return caller_ok(r, why);
    case RLS_ADMIN_LOOP_PAUSE:
    case RLS_ADMIN_LOOP_RESUME:
        if (r->rule != NULL || r->key != NULL || r->domain != NULL ||
            r->nentries > 0 || r->leases || r->text || r->parts) {
            *why = "this path takes loop=N alone";
            return 400;
        }
        if (r->loop < 0) {
            *why = "give loop=N (GET /v1/loops lists them)";
            return 400;
        }
        return 0;
    default:
        if (r->rule != NULL || r->key != NULL || r->domain != NULL ||
            r->nentries > 0 || r->leases || r->text || r->loop >= 0 ||
            (r->route != RLS_ADMIN_CONFIG && r->parts)) {
            *why = "this path takes no such parameter";
            return 400;
        }
        return 0;
    }
}

/* ---- a stored quota ------------------------------------------------- */

/* The script's bounds (redis_script.lua, qparse). */
#define Q_WINDOW_MAX 31622400.0
#define Q_LIMIT_MAX 9223372036854774784.0
#define Q_SWC_MAX 68719476736.0
#define Q_SWL_MAX 1000000.0
#define Q_GCRA_CAP_US 31622400000000.0

/* Lua's %s: the bytes isspace() takes in the C locale. */
static int lua_space(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' ||
           c == '\r';
}

/* A run of digits at p[0, n) as Lua's tonumber reads it (a double). */
static double digits(const char *p, size_t n)
{
    char tmp[400];

    if (n >= sizeof(tmp))
        return HUGE_VAL;
    memcpy(tmp, p, n);
    tmp[n] = '\0';
    return strtod(tmp, NULL);
}

static size_t span_digits(const char *p, size_t n)
{
    size_t i = 0;

    while (i < n && p[i] >= '0' && p[i] <= '9')
        i++;
    return i;
}

int rls_admin_quota_parse(const char *q, size_t len, double sc,
                          rls_limit_t *out, uint32_t *nout)
{
    size_t at = 0;
    uint32_t n = 0, j;

    while (at < len) {
        const char *t, *rest;
        size_t tl, d1, d2, rl;
        double l, s, lim, burst = 0;
        int algo;
        rls_limit_t *o;

        while (at < len && lua_space(q[at]))
            at++;
        if (at == len)
            break;
        t = q + at;
        for (tl = 0; at + tl < len && !lua_space(t[tl]); tl++)
            ;
        at += tl;
        /* ^(%d+)/(%d+)(.*)$ */
        d1 = span_digits(t, tl);
        if (d1 == 0 || d1 == tl || t[d1] != '/')
            return RL_EINVAL;
        d2 = span_digits(t + d1 + 1, tl - d1 - 1);
        if (d2 == 0)
            return RL_EINVAL;
        if (++n > RLS_ADMIN_QUOTA_LIMITS)
            return RL_EINVAL;
        l = digits(t, d1);
        s = digits(t + d1 + 1, d2);
        rest = t + d1 + 1 + d2;
        rl = tl - d1 - 1 - d2;
        if (l < 1 || s < 1 || s > Q_WINDOW_MAX)
            return RL_EINVAL;
        if (rl == 0 || eq(rest, rl, ":fixed-window"))
            algo = RL_ALGO_FIXED;
        else if (eq(rest, rl, ":sliding-window-counter"))
            algo = RL_ALGO_SLIDING_COUNTER;
        else if (eq(rest, rl, ":sliding-window"))
            algo = RL_ALGO_SLIDING_LOG;
        else if (eq(rest, rl, ":gcra"))
            algo = RL_ALGO_GCRA;
        else if (rl > 12 && memcmp(rest, ":gcra:burst=", 12) == 0 &&
                 span_digits(rest + 12, rl - 12) == rl - 12) {
            /* tonumber of the digits: "0" or none is no burst */
            burst = digits(rest + 12, rl - 12);
            if (!(burst >= 1))
                return RL_EINVAL;
            algo = RL_ALGO_GCRA;
        } else {
            return RL_EINVAL;
        }
        for (j = 0; j + 1 < n; j++)
            if (out[j].algo == algo && out[j].window_s == (uint32_t)s)
                return RL_EINVAL;
        o = &out[n - 1];
        memset(o, 0, sizeof(*o));
        o->algo = (uint8_t)algo;
        o->window_s = (uint32_t)s;
        lim = floor(l * sc);
        if (lim < 1)
            lim = 1;
        if (lim > Q_LIMIT_MAX)
            lim = Q_LIMIT_MAX;
        if (algo == RL_ALGO_SLIDING_COUNTER && lim > Q_SWC_MAX)
            lim = Q_SWC_MAX;
        if (algo == RL_ALGO_SLIDING_LOG && lim > Q_SWL_MAX)
            lim = Q_SWL_MAX;
        o->limit = (uint64_t)lim;
        if (algo == RL_ALGO_GCRA) {
            double T = ceil(s * 1000000.0 / lim);
            double B = burst > 0 ? floor(burst * sc) : lim;
            if (B < 1)
                B = 1;
            if (B * T > Q_GCRA_CAP_US)
                B = floor(Q_GCRA_CAP_US / T);
            o->t_us = (uint64_t)T;
            o->burst = (uint64_t)B;
        }
    }
    if (n == 0)
        return RL_EINVAL;
    *nout = n;
    return RL_OK;
}

/* ---- tokens --------------------------------------------------------- */

static int name_char(char c)
{
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
           (c >= '0' && c <= '9') || c == '_' || c == '.' || c == '@' ||
           c == '-';
}

static int sha256(const void *p, size_t n, uint8_t out[32])
{
    unsigned int len = 0;

    return EVP_Digest(p, n, out, &len, EVP_sha256(), NULL) == 1 && len == 32
               ? 0
               : RL_ENOMEM;
}

int rls_admin_tokens_parse(const char *text, size_t len,
                           rls_admin_tokens_t *out, const char **why)
{
    size_t at = 0;

    memset(out, 0, sizeof(*out));
    if (len > RLS_ADMIN_TOKEN_FILE_MAX) {
        *why = "the token file is over 64 KiB";
        return RL_EINVAL;
    }
    while (at < len) {
        const char *l = text + at, *nl = memchr(l, '\n', len - at);
        size_t n = nl != NULL ? (size_t)(nl - l) : len - at, a = 0, b, c, d;
        const char *name = "token", *tok;
        size_t name_len = 5, tok_len, i;

        at += n + 1;
        if (n > 0 && l[n - 1] == '\r')
            n--;
        while (a < n && (l[a] == ' ' || l[a] == '\t'))
            a++;
        if (a == n || l[a] == '#')
            continue;
        for (b = a; b < n && l[b] != ' ' && l[b] != '\t'; b++)
            ;
        for (c = b; c < n && (l[c] == ' ' || l[c] == '\t'); c++)
            ;
        for (d = c; d < n && l[d] != ' ' && l[d] != '\t'; d++)
            ;
        for (i = d; i < n && (l[i] == ' ' || l[i] == '\t'); i++)
            ;
        if (i != n) {
            *why = "a token file line is NAME TOKEN, or TOKEN alone";
            return RL_EINVAL;
        }
        if (c < n) {
            name = l + a;
            name_len = b - a;
            tok = l + c;
            tok_len = d - c;
            if (name_len > 63) {
                *why = "a token's name is over 63 bytes";
                return RL_EINVAL;
            }
            for (i = 0; i < name_len; i++)
                if (!name_char(name[i])) {
                    *why = "a token's name is of [A-Za-z0-9_.@-]";
                    return RL_EINVAL;
                }
        } else {
            tok = l + a;
            tok_len = b - a;
        }
        if (tok_len < RLS_ADMIN_TOKEN_MIN || tok_len > RLS_ADMIN_TOKEN_MAX) {
            *why = "a token is 16 to 512 bytes";
            return RL_EINVAL;
        }
        for (i = 0; i < tok_len; i++)
            if (tok[i] < 0x21 || tok[i] > 0x7e) {
                *why = "a token is printable ASCII";
                return RL_EINVAL;
            }
        if (out->n == RLS_ADMIN_TOKENS_MAX) {
            *why = "more than 16 tokens";
            return RL_EINVAL;
        }
        memcpy(out->t[out->n].name, name, name_len);
        out->t[out->n].name[name_len] = '\0';
        if (sha256(tok, tok_len, out->t[out->n].sha) != 0) {
            *why = "no SHA-256 from OpenSSL";
            return RL_EINVAL;
        }
        out->n++;
    }
    if (out->n == 0) {
        *why = "the token file holds no token";
        return RL_EINVAL;
    }
    return RL_OK;
}

int rls_admin_tokens_load(const char *path, rls_admin_tokens_t *out, char *err,
                          size_t errlen)
{
    char *buf = malloc(RLS_ADMIN_TOKEN_FILE_MAX + 1);
    const char *why = NULL;
    size_t n;
    FILE *f;
    int rc;

    if (buf == NULL) {
        snprintf(err, errlen, "--admin-token-file: out of memory");
        return RL_ENOMEM;
    }
    if ((f = fopen(path, "rb")) == NULL) {
        snprintf(err, errlen, "--admin-token-file: cannot open %s", path);
        free(buf);
        return RL_EIO;
    }
    n = fread(buf, 1, RLS_ADMIN_TOKEN_FILE_MAX + 1, f);
    rc = ferror(f) ? RL_EIO : RL_OK;
    fclose(f);
    if (rc == RL_OK)
        rc = rls_admin_tokens_parse(buf, n, out, &why);
    /* The file's bytes are secrets: gone before the buffer is. */
    OPENSSL_cleanse(buf, RLS_ADMIN_TOKEN_FILE_MAX + 1);
    free(buf);
    if (rc == RL_EIO)
        snprintf(err, errlen, "--admin-token-file: cannot read %s", path);
    else if (rc != RL_OK)
        snprintf(err, errlen, "--admin-token-file %s: %s", path, why);
    return rc;
}

int rls_admin_tokens_check(const rls_admin_tokens_t *t, const char *v,
                           size_t vlen)
{
    uint8_t sha[32];
    int found = -1;
    uint32_t i;

    if (v == NULL || vlen < 7 || strncasecmp(v, "Bearer ", 7) != 0)
        return -2;
    v += 7;
    vlen -= 7;
    while (vlen > 0 && *v == ' ') {
        v++;
        vlen--;
    }
    if (vlen == 0)
        return -2;
    if (sha256(v, vlen, sha) != 0)
        return -1;
    /* Digests of equal length, every one compared: the time says
     * nothing of which token, if any, matched, nor of its length. */
    for (i = 0; i < t->n; i++) {
        int same = CRYPTO_memcmp(sha, t->t[i].sha, 32) == 0;
        found = same && found < 0 ? (int)i : found;
    }
    return found;
}

int rls_admin_loopback(const char *host)
{
    struct in6_addr a6;
    struct in_addr a4;

    if (strcasecmp(host, "localhost") == 0)
        return 1;
    if (inet_pton(AF_INET, host, &a4) == 1)
        return (ntohl(a4.s_addr) >> 24) == 127;
    if (inet_pton(AF_INET6, host, &a6) == 1)
        return IN6_IS_ADDR_LOOPBACK(&a6) ||
               (IN6_IS_ADDR_V4MAPPED(&a6) && a6.s6_addr[12] == 127);
    return 0;
}

/* ---- JSON ----------------------------------------------------------- */

/* The length of the valid UTF-8 sequence at p[0, n), or 0. */
static size_t utf8_len(const unsigned char *p, size_t n)
{
    size_t k, i;
    uint32_t cp;

    if (p[0] < 0x80)
        return 1;
    if (p[0] >= 0xc2 && p[0] <= 0xdf)
        k = 2, cp = p[0] & 0x1f;
    else if (p[0] >= 0xe0 && p[0] <= 0xef)
        k = 3, cp = p[0] & 0x0f;
    else if (p[0] >= 0xf0 && p[0] <= 0xf4)
        k = 4, cp = p[0] & 0x07;
    else
        return 0;
    if (n < k)
        return 0;
    for (i = 1; i < k; i++) {
        if ((p[i] & 0xc0) != 0x80)
            return 0;
        cp = (cp << 6) | (p[i] & 0x3f);
    }
    if ((k == 3 && (cp < 0x800 || (cp >= 0xd800 && cp <= 0xdfff))) ||
        (k == 4 && (cp < 0x10000 || cp > 0x10ffff)))
        return 0;
    return k;
}

int rls_admin_json_str(rl_buf_t *out, const char *s, size_t n)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0, run;
    int rc;

    if ((rc = rl_buf_append(out, "\"", 1)) != RL_OK)
        return rc;
    while (i < n) {
        char esc[8];
        size_t k;
        /* A run of bytes that need no escape goes in one append. */
        for (run = 0; i + run < n; run += k) {
            k = utf8_len(p + i + run, n - i - run);
            if (k == 0 || (k == 1 && (p[i + run] < 0x20 || p[i + run] == '"' ||
                                      p[i + run] == '\\')))
                break;
        }
        if (run > 0) {
            if ((rc = rl_buf_append(out, p + i, run)) != RL_OK)
                return rc;
            i += run;
            continue;
        }
        if (p[i] == '"' || p[i] == '\\') {
            esc[0] = '\\';
            esc[1] = (char)p[i];
            rc = rl_buf_append(out, esc, 2);
        } else if (p[i] == '\n') {
            rc = rl_buf_append(out, "\\n", 2);
        } else if (p[i] == '\t') {
            rc = rl_buf_append(out, "\\t", 2);
        } else {
            snprintf(esc, sizeof(esc), "\\u%04x", p[i]);
            rc = rl_buf_append(out, esc, 6);
        }
        if (rc != RL_OK)
            return rc;
        i++;
    }
    return rl_buf_append(out, "\"", 1);
}
