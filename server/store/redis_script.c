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
 * this same atomic script. */
const char rls_redis_script[] =
    "local r = {} "
    "for i = 1, #KEYS do "
    "local a = ARGV[2*i-1] "
    "local n = redis.pcall('INCRBY', KEYS[i], a) "
    "if type(n) == 'number' then "
    "if n == tonumber(a) then "
    "redis.call('PEXPIREAT', KEYS[i], ARGV[2*i]) end "
    "if n >= 1e14 or n <= -1e14 then n = string.format('%.0f', n) end "
    "r[i] = n "
    "else r[i] = 'e' end end "
    "return table.concat(r, ' ')";

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
                        size_t n)
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
    p = put_line(buf->p, '*', 3 + 3 * (uint64_t)n);
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
    return (size_t)(p - buf->p);
}

int rls_redis_parse_counts(const char *p, size_t len, rls_op_t *ops, size_t n)
{
    const char *end = p + len;
    size_t i;

    for (i = 0; i < n; i++) {
        uint64_t v = 0;
        int neg = 0;

        if (i > 0 && (p == end || *p++ != ' '))
            return -1;
        if (p < end && *p == 'e') {
            ops[i].count = 0;
            ops[i].err = RL_ESTORE;
            p++;
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
