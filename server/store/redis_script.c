/* The Redis store's script and the formatting of its command; see
 * redis_script.h, and redis.c for why this script. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rl_error.h"
#include "rl_window.h"
#include "store/redis_script.h"

/* The script decides every op of a batch as store.h says: per op, the
 * windows' counts (MGET), the admissions in arrival order (with equal costs
 * in closed form, else one by one; refusals consume nothing), then the
 * admitted cost added to every window (INCRBY, and PEXPIREAT when that
 * created the counter). A refusal creates no key.
 *
 * KEYS[i] is op i's key "<prefix>{<caller>}:r:<rule>" (or ":i"); counter
 * keys are built from it, and the quota hash "<prefix>{<caller>}:q" too, so
 * everything an op touches shares its hash slot. ARGV: the batch's
 * deadline and clock (ms, Redis clock) and the counters' grace, then per op:
 * nwin; per window its length, index, expiry and limit; the quota field
 * ('' for none) and scale; the costs: -k and one cost for k equal costs,
 * else k and the k costs.
 *
 * The reply is one string, the ops separated by commas: "<admitted>
 * <before>..." per op; "<admitted> q <window> <limit> <before>..." when the
 * caller's stored quota replaced the rule's windows; "<admitted> Q
 * <before>..." when a stored quota did not parse (the rule's windows
 * applied); "e<KIND>" when Redis refused the op (the first refusal's text
 * follows the reply after a newline); or "late" for the whole batch when
 * Redis ran it after its deadline, having counted nothing.
 *
 * A stored quota parses when it is 1 to 8 space-separated "N/S", N >= 1,
 * S from 1 to 366 days, no S twice (as rl-ctl writes it); anything else
 * ("1.5/60", "-5/60", a window twice, which would count twice in one
 * counter) is ignored whole. Its limits, scaled, are kept below 2^63 so
 * that the reply stays within what the parser reads.
 *
 * Counts reach Lua as doubles: exact to 2^53. The before-counts are
 * returned as Redis stored them, so they are exact; admissions against
 * limits above 2^53 may round. The deadline check calls TIME before any
 * write, which needs script effects replication (Redis 5 and later). */
const char rls_redis_script[] =
    "local t = redis.call('TIME') "
    "local dl = tonumber(ARGV[1]) "
    "if dl > 0 and t[1] * 1000 + math.floor(t[2] / 1000) > dl then return 'late' end "
    "local now, grace = tonumber(ARGV[2]), tonumber(ARGV[3]) "
    "local out, e, p = {}, nil, 4 "
    "local function fmt(n) "
    "if n >= 1e14 or n <= -1e14 then return string.format('%.0f', n) end "
    "return n "
    "end "
    "for i = 1, #KEYS do "
    "local base = KEYS[i] "
    "local nw = tonumber(ARGV[p]) "
    "local ws, ks, ex, ls = {}, {}, {}, {} "
    "for j = 1, nw do "
    "ws[j] = ARGV[p + 1] "
    "ks[j] = base .. ':' .. ARGV[p + 1] .. ':' .. ARGV[p + 2] "
    "ex[j] = ARGV[p + 3] "
    "ls[j] = tonumber(ARGV[p + 4]) "
    "p = p + 4 "
    "end "
    "local qf, sc, nc = ARGV[p + 1], tonumber(ARGV[p + 2]), tonumber(ARGV[p + 3]) "
    "p = p + 4 "
    "local costs, k, c = nil, nc, 0 "
    "if nc < 0 then "
    "k, c = -nc, tonumber(ARGV[p]); p = p + 1 "
    "else "
    "costs = {} "
    "for j = 1, nc do costs[j] = tonumber(ARGV[p + j - 1]) end "
    "p = p + nc "
    "end "
    "local tag = '' "
    "if qf ~= '' then "
    "local q = redis.call('HGET', string.sub(base, 1, #base - #qf - 3) .. ':q', qf) "
    "if q then "
    "local qw, ql, n, ok, seen = {}, {}, 0, true, {} "
    "for tok in string.gmatch(q, '%S+') do "
    "local l, s = string.match(tok, '^(%d+)/(%d+)$') "
    "n = n + 1 "
    "l, s = tonumber(l), tonumber(s) "
    "if n > 8 or not l or l < 1 or s < 1 or s > 31622400 or seen[s] then "
    "ok = false; break "
    "end "
    "seen[s] = true "
    "qw[n], ql[n] = s, l "
    "end "
    "if ok and n > 0 then "
    "ws, ks, ex, ls = {}, {}, {}, {} "
    "for j = 1, n do "
    "local idx = math.floor(now / (qw[j] * 1000)) "
    "ws[j] = qw[j] "
    "ks[j] = base .. ':' .. qw[j] .. ':' .. idx "
    "ex[j] = (idx + 1) * qw[j] * 1000 + grace "
    "local lim = math.floor(ql[j] * sc) "
    "if lim < 1 then lim = 1 end "
    "if lim > 9223372036854774784 then lim = 9223372036854774784 end "
    "ls[j] = lim "
    "end "
    "nw, tag = n, 'q' "
    "else "
    "tag = 'Q' "
    "end "
    "end "
    "end "
    "local cur = redis.call('MGET', unpack(ks)) "
    "local room = nil "
    "for j = 1, nw do "
    "local n = tonumber(cur[j]) or 0 "
    "if n < 0 then n = 0 end "
    "local r = ls[j] - n "
    "if r < 0 then r = 0 end "
    "if room == nil or r < room then room = r end "
    "end "
    "local adm, sum = 0, 0 "
    "if costs == nil then "
    "adm = math.floor(room / c) "
    "if adm > k then adm = k end "
    "sum = adm * c "
    "else "
    "for j = 1, k do "
    "if costs[j] <= room then "
    "adm, sum, room = adm + 1, sum + costs[j], room - costs[j] "
    "end "
    "end "
    "end "
    "local r = {adm} "
    "local err = nil "
    "if sum > 0 then "
    "for j = 1, nw do "
    "local n = redis.pcall('INCRBY', ks[j], sum) "
    "if type(n) == 'number' then "
    "if n == sum then redis.call('PEXPIREAT', ks[j], ex[j]) end "
    "else "
    "err = type(n) == 'table' and tostring(n.err) or '?' "
    "break "
    "end "
    "end "
    "end "
    "if err then "
    "e = e or err "
    "out[i] = 'e' .. (string.find(err, 'overflow', 1, true) and 'OVERFLOW' or string.match(err, '^%u+') or '') "
    "else "
    "if tag ~= '' then r[#r + 1] = tag end "
    "for j = 1, nw do "
    "if tag == 'q' then r[#r + 1] = ws[j]; r[#r + 1] = fmt(ls[j]) end "
    "r[#r + 1] = cur[j] or 0 "
    "end "
    "out[i] = table.concat(r, ' ') "
    "end "
    "end "
    "if e then return table.concat(out, ',') .. '\\n' .. e end "
    "return table.concat(out, ',') ";

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
                        size_t n, uint64_t now_ms, uint64_t grace_ms,
                        uint64_t deadline_ms)
{
    /* Every argument is a bulk string: at most 16 bytes of header and CRLF
     * around its bytes, and numbers of at most 20 digits. */
    size_t need = 256 + sizeof(rls_redis_script), nargs = 3, i, j;
    char *p, scale[40];

    for (i = 0; i < n; i++) {
        const rls_op_t *op = &ops[i];
        size_t a = 1 + 4 * (size_t)op->nwin + 3 +
                   (op->equal_cost ? 1 : (size_t)op->ncosts);
        nargs += 1 + a;
        need += op->key_len + op->quota_len + 36 * (1 + a);
    }
    if (need > buf->cap) {
        size_t cap = buf->cap ? buf->cap : 4096;
        while (cap < need)
            cap *= 2;
        if ((p = realloc(buf->p, cap)) == NULL)
            return 0;
        buf->p = p;
        buf->cap = cap;
    }
    p = put_line(buf->p, '*', 3 + nargs);
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
    p = put_num(p, deadline_ms);
    p = put_num(p, now_ms);
    p = put_num(p, grace_ms);
    for (i = 0; i < n; i++) {
        const rls_op_t *op = &ops[i];

        p = put_num(p, op->nwin);
        for (j = 0; j < op->nwin; j++) {
            p = put_num(p, op->win[j].window_s);
            p = put_num(p, op->win[j].index);
            p = put_num(p, op->win[j].expire_at_ms);
            p = put_num(p, op->win[j].limit);
        }
        p = put_bulk(p, op->quota ? op->quota : "", op->quota ? op->quota_len
                                                              : 0);
        if (op->scale == 1.0 || op->scale <= 0) {
            p = put_bulk(p, "1", 1);
        } else {
            int k = snprintf(scale, sizeof(scale), "%.17g", op->scale);
            p = put_bulk(p, scale, (size_t)k);
        }
        if (op->equal_cost) {
            char neg[24];
            neg[0] = '-';
            p = put_bulk(p, neg, 1 + rl_put_u64(neg + 1, op->ncosts));
            p = put_num(p, op->equal_cost);
        } else {
            p = put_num(p, op->ncosts);
            for (j = 0; j < op->ncosts; j++)
                p = put_num(p, op->costs[j]);
        }
    }
    return (size_t)(p - buf->p);
}

/* Reads a decimal integer (an optional '-'); RL_EINVAL if malformed. */
static int get_i64(const char **pp, const char *end, int64_t *out)
{
    const char *p = *pp;
    uint64_t v = 0;
    int neg = 0;

    if (p < end && *p == '-') {
        neg = 1;
        p++;
    }
    if (p == end || *p < '0' || *p > '9')
        return RL_EINVAL;
    while (p < end && *p >= '0' && *p <= '9') {
        if (v > (UINT64_C(1) << 62))
            return RL_EINVAL;
        v = v * 10 + (uint64_t)(*p++ - '0');
    }
    if (v > INT64_MAX)
        return RL_EINVAL;
    *out = neg ? -(int64_t)v : (int64_t)v;
    *pp = p;
    return RL_OK;
}

static int get_sp_i64(const char **pp, const char *end, int64_t *out)
{
    if (*pp == end || **pp != ' ')
        return RL_EINVAL;
    (*pp)++;
    return get_i64(pp, end, out);
}

int rls_redis_parse_counts(const char *p, size_t len, rls_op_t *ops, size_t n,
                           rls_wop_t *qwin, rls_redis_errs_t *errs)
{
    const char *end = p + len, *nl;
    size_t i, j;
    int64_t v;

    memset(errs, 0, sizeof(*errs));
    if (len == 4 && memcmp(p, "late", 4) == 0)
        return RLS_REDIS_LATE;
    /* The first refusal's text, if any, follows the ops. */
    if ((nl = memchr(p, '\n', len)) != NULL) {
        errs->text = nl + 1;
        errs->text_len = (size_t)(end - nl - 1);
        end = nl;
    }
    for (i = 0; i < n; i++) {
        rls_op_t *op = &ops[i];

        op->qwin = NULL;
        op->nqwin = 0;
        if (i > 0 && (p == end || *p++ != ','))
            return RL_EINVAL;
        if (p < end && *p == 'e') {
            const char *w = ++p;

            while (p < end && *p != ',')
                p++;
            op->err = RL_ESTORE;
            errs->by_kind[rls_redis_err_kind(w, (size_t)(p - w))]++;
            errs->failed++;
            continue;
        }
        if (get_i64(&p, end, &v) != RL_OK || v < 0 || v > op->ncosts)
            return RL_EINVAL;
        op->admitted = (uint64_t)v;
        op->err = 0;
        if (end - p >= 2 && p[0] == ' ' && p[1] == 'Q') {
            p += 2;
            errs->bad_quotas++;
        } else if (end - p >= 2 && p[0] == ' ' && p[1] == 'q') {
            /* The caller's quota: its own windows. */
            rls_wop_t *q;
            if (qwin == NULL)
                return RL_EINVAL;
            q = qwin + i * RLS_WINDOWS_MAX;
            p += 2;
            for (j = 0; p < end && *p == ' '; j++) {
                int64_t ws, lim, b;
                if (j == RLS_WINDOWS_MAX ||
                    get_sp_i64(&p, end, &ws) != RL_OK ||
                    get_sp_i64(&p, end, &lim) != RL_OK ||
                    get_sp_i64(&p, end, &b) != RL_OK || ws < 1 ||
                    ws > RL_WINDOW_MAX_S || lim < 1)
                    return RL_EINVAL;
                q[j].window_s = (uint32_t)ws;
                q[j].limit = (uint64_t)lim;
                q[j].before = b;
                q[j].index = 0;
                q[j].expire_at_ms = 0;
            }
            if (j == 0)
                return RL_EINVAL;
            op->qwin = q;
            op->nqwin = (uint32_t)j;
            continue;
        }
        for (j = 0; j < op->nwin; j++)
            if (get_sp_i64(&p, end, &op->win[j].before) != RL_OK)
                return RL_EINVAL;
    }
    return p == end ? RL_OK : RL_EINVAL;
}
