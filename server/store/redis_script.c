/* The Redis store's script and the formatting of its command; see
 * redis_script.h, and redis.c for why this script. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "rl_error.h"
#include "rl_window.h"
#include "store/redis_script.h"

/* Counts reach us through Lua numbers (doubles). table.concat prints them
 * with "%.14g", exact below 1e14; beyond, string.format('%.0f') keeps every
 * digit a double holds (exact to 2^53). PEXPIREAT runs only when INCRBY
 * created the key: an existing key got its expiry when it was created, by
 * this same atomic script.
 *
 * The last ARGV is the batch's deadline on Redis's clock: a batch that
 * Redis runs after it was already answered by timeout (Redis was stuck,
 * and read it afterwards) changes nothing. Calling TIME before writing
 * needs script effects replication, the default since Redis 5.
 *
 * A refused op answers 'e' and a word naming why: the error's prefix
 * ("OOM", "READONLY"), or "OVERFLOW" for a counter past 2^63, whose
 * prefix is the generic "ERR". The first refusal's text follows the
 * counts after a newline, for the log. Errors cost nothing until they
 * happen. */
const char rls_redis_script[] =
    "local t = redis.call('TIME') "
    "if t[1] * 1000 + math.floor(t[2] / 1000) > tonumber(ARGV[#ARGV]) then "
    "return 'late' end "
    "local r, e = {}, nil "
    "for i = 1, #KEYS do "
    "local a = ARGV[2*i-1] "
    "local n = redis.pcall('INCRBY', KEYS[i], a) "
    "if type(n) == 'number' then "
    "if n == tonumber(a) then "
    "redis.call('PEXPIREAT', KEYS[i], ARGV[2*i]) end "
    "if n >= 1e14 or n <= -1e14 then n = string.format('%.0f', n) end "
    "r[i] = n "
    "else "
    "local m = type(n) == 'table' and tostring(n.err) or '?' "
    "e = e or m "
    "r[i] = 'e' .. (string.find(m, 'overflow', 1, true) and 'OVERFLOW' "
    "or string.match(m, '^%u+') or '') end end "
    "if e then return table.concat(r, ' ') .. '\\n' .. e end "
    "return table.concat(r, ' ')";

int rls_redis_err_kind(const char *s, size_t len)
{
    static const struct {
        const char *word;
        int kind;
    } words[] = {
        {"OOM", RLS_SERR_OOM},           {"BUSY", RLS_SERR_BUSY},
        {"READONLY", RLS_SERR_READONLY}, {"NOSCRIPT", RLS_SERR_NOSCRIPT},
        {"LOADING", RLS_SERR_LOADING},   {"OVERFLOW", RLS_SERR_OVERFLOW}};
    size_t i, w = 0, k;

    while (w < len && s[w] >= 'A' && s[w] <= 'Z')
        w++;
    for (k = 0; k < sizeof(words) / sizeof(words[0]); k++)
        if (strlen(words[k].word) == w && memcmp(s, words[k].word, w) == 0)
            return words[k].kind;
    /* "ERR increment or decrement would overflow" */
    for (i = 0; i + 8 <= len; i++)
        if (memcmp(s + i, "overflow", 8) == 0)
            return RLS_SERR_OVERFLOW;
    return RLS_SERR_OTHER;
}

static char *put_line(char *p, char type, uint64_t v)
{
    *p++ = type;
    /* Lengths are mostly one or two digits: skip the general loop. */
    if (v < 10) {
        *p++ = (char)('0' + v);
    } else if (v < 100) {
        *p++ = (char)('0' + v / 10);
        *p++ = (char)('0' + v % 10);
    } else {
        p += rl_put_u64(p, v);
    }
    *p++ = '\r';
    *p++ = '\n';
    return p;
}

static char *put_bulk(char *p, const char *s, size_t len)
{
    p = put_line(p, '$', len);
    memcpy(p, s, len);
    p += len;
    *p++ = '\r';
    *p++ = '\n';
    return p;
}

static char *put_num(char *p, uint64_t v)
{
    char tmp[20];

    return put_bulk(p, tmp, rl_put_u64(tmp, v));
}

size_t rls_redis_encode(rls_cmdbuf_t *buf, const char *sha, const rls_op_t *ops,
                        size_t n, uint64_t deadline_ms)
{
    /* Per op: the key and three length lines, two numbers of at most 20
     * digits; plus the header, the command and the script or its SHA. */
    size_t need = 128 + sizeof(rls_redis_script), i, exp_len = 0;
    uint64_t last_exp = 0;
    char *p, exp[32];

    for (i = 0; i < n; i++)
        need += ops[i].key_len + 96;
    if (need > buf->cap) {
        size_t cap = buf->cap ? buf->cap : 4096;
        while (cap < need)
            cap *= 2;
        if ((p = realloc(buf->p, cap)) == NULL)
            return 0;
        buf->p = p;
        buf->cap = cap;
    }
    p = put_line(buf->p, '*', 4 + 3 * (uint64_t)n);
    if (sha == NULL) {
        p = put_bulk(p, "EVAL", 4);
        p = put_bulk(p, rls_redis_script, sizeof(rls_redis_script) - 1);
    } else {
        p = put_bulk(p, "EVALSHA", 7);
        p = put_bulk(p, sha, 40);
    }
    p = put_num(p, n);
    for (i = 0; i < n; i++)
        p = put_bulk(p, ops[i].key, ops[i].key_len);
    /* The ops of a batch nearly all share one expiry (one window size) and
     * most add a one-digit cost: the expiry's bulk string is formatted
     * once and copied, and a small increment is written directly. */
    for (i = 0; i < n; i++) {
        if (ops[i].incr < 10) {
            memcpy(p, "$1\r\n", 4);
            p[4] = (char)('0' + ops[i].incr);
            p[5] = '\r';
            p[6] = '\n';
            p += 7;
        } else {
            p = put_num(p, ops[i].incr);
        }
        if (i == 0 || ops[i].expire_at_ms != last_exp) {
            last_exp = ops[i].expire_at_ms;
            exp_len = (size_t)(put_num(exp, last_exp) - exp);
        }
        memcpy(p, exp, exp_len);
        p += exp_len;
    }
    p = put_num(p, deadline_ms);
    return (size_t)(p - buf->p);
}

int rls_redis_parse_counts(const char *p, size_t len, rls_op_t *ops, size_t n,
                           rls_redis_errs_t *errs)
{
    const char *end = p + len, *nl;
    size_t i;

    memset(errs, 0, sizeof(*errs));
    errs->text = NULL;
    errs->text_len = 0;
    if (len == 4 && memcmp(p, "late", 4) == 0)
        return RLS_REDIS_LATE;
    /* The first refusal's text, if any, follows the counts. */
    if ((nl = memchr(p, '\n', len)) != NULL) {
        errs->text = nl + 1;
        errs->text_len = (size_t)(end - nl - 1);
        end = nl;
    }
    for (i = 0; i < n; i++) {
        uint64_t v = 0;
        int neg = 0;

        if (i > 0 && (p == end || *p++ != ' '))
            return -1;
        if (p < end && *p == 'e') {
            const char *w = ++p;

            while (p < end && *p != ' ')
                p++;
            ops[i].count = 0;
            ops[i].err = RL_ESTORE;
            errs->by_kind[rls_redis_err_kind(w, (size_t)(p - w))]++;
            errs->failed++;
            continue;
        }
        if (p < end && *p == '-') {
            neg = 1;
            p++;
        }
        if (p == end || *p < '0' || *p > '9')
            return -1;
        while (p < end && *p >= '0' && *p <= '9') {
            if (v > (UINT64_C(1) << 62))
                return -1;
            v = v * 10 + (uint64_t)(*p++ - '0');
        }
        if (v > INT64_MAX)
            return -1;
        ops[i].count = neg ? -(int64_t)v : (int64_t)v;
        ops[i].err = 0;
    }
    return p == end ? 0 : -1;
}
