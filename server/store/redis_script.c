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
 * admissions in arrival order against every window (with equal costs in
 * closed form, else one by one; refusals consume nothing), the admitted
 * cost added to every window, PEXPIREAT on a counter it created. A refusal
 * leaves no key behind.
 *
 * It adds first and corrects after: INCRBY of the op's whole cost gives
 * each window's count before the batch in one call, and only when some
 * request is refused does a DECRBY take the refused cost back (or a DEL
 * remove a counter that admitted nothing). The script is atomic, so nobody
 * sees the intermediate value (a counter found at 0, which this script
 * never leaves, may be removed: 0 counts as no counter), and with the
 * refusal cache (refusals.c)
 * most refusals never reach Redis: the common op is one INCRBY, the same
 * call as a plain counter. An op that fails halfway (Redis refused one
 * window's INCRBY) has the windows it did increment put back, so it fails
 * whole.
 *
 * KEYS are the ops' counter keys "<prefix>{<caller>}:r:<rule>:<w>:<index>"
 * (":i:" for an inline limit), built by the server, window after window
 * and op after op, each op's followed by its caller's quota hash
 * "<prefix>{<caller>}:q" when it names a quota: one hash slot per op.
 * ARGV: the batch's deadline and clock (ms, Redis clock), the counters'
 * grace, the number of ops, the number of profiles and the profiles (a
 * number of windows, then an expiry and a limit per window); then per op:
 * its profile P when it has equal costs and no quota (P alone for one
 * request of cost 1, and for k >= 2 such ops in a row on one profile "r",
 * k and P once, which stands for all k; -P, the count and the cost
 * otherwise); or 0, nwin,
 * the quota field ('' for none), per window its expiry and limit, the
 * scale only with a quota, and the costs: -k and one cost for k equal
 * costs, else k and the costs.
 *
 * The reply is an array, op after op: the admitted count and the count
 * before of each window, as integers (the common op); or one string for an
 * op out of the ordinary: "<admitted> q <window> <limit> <before>..." when
 * the caller's stored quota replaced the rule's windows, "<admitted> Q
 * <before>..." when a stored quota did not parse (the rule's windows
 * applied), "e<KIND>" when Redis refused the op. When some op was refused,
 * one more string, the first refusal's text, ends the array. The whole
 * reply is the string "late" when Redis ran the batch after its deadline,
 * having counted nothing. Integers and not one string of digits because
 * Lua turns a number into text with sprintf, the costliest step of an op
 * after its INCRBY (BENCHMARKS.md, "Redis command strategy"); the store
 * reads the array without one allocation per integer (redis_reply.c).
 *
 * A stored quota parses when it is 1 to 8 space-separated "N/S", N >= 1,
 * S from 1 to 366 days, no S twice (as rl-ctl writes it); anything else
 * ("1.5/60", "-5/60", a window twice, which would count twice in one
 * counter) is ignored whole and reported as Q. Quota limits are capped
 * below 2^63 (scaled in Lua's doubles). Counts reach Lua as doubles: exact
 * to 2^53, so are the before-counts it returns. The deadline check calls
 * TIME before any write, which needs script effects replication (Redis 5
 * and later). */
const char rls_redis_script[] =
    "local rcall, rpcall, type, floor, tonumber = redis.call, redis.pcall, type, math.floor, tonumber "
    "local t = rcall('TIME') "
    "local dl = tonumber(ARGV[1]) "
    "if dl > 0 and t[1] * 1000 + floor(t[2] / 1000) > dl then return 'late' end "
    "local now, grace = tonumber(ARGV[2]), tonumber(ARGV[3]) "
    "local pn, pe, pl, pid, np, q = {}, {}, {}, {}, tonumber(ARGV[5]), 6 "
    "for j = 1, np do "
    "pid[tostring(j)] = j "
    "local n = tonumber(ARGV[q]) "
    "local E, L = {}, {} "
    "for w = 1, n do E[w], L[w] = ARGV[q + 2 * w - 1], tonumber(ARGV[q + 2 * w]) end "
    "pn[j], pe[j], pl[j] = n, E, L "
    "q = q + 1 + 2 * n "
    "end "
    "local o, no, e, p, kp, bef, run, rP = {}, 0, nil, q, 1, {}, 0, 0 "
    "for i = 1, tonumber(ARGV[4]) do "
    "local P, adv = rP, 0 "
    "if run > 0 then run = run - 1 "
    "else "
    "local a = ARGV[p] "
    "adv = 1 "
    "if a == 'r' then "
    "run, P = tonumber(ARGV[p + 1]) - 1, pid[ARGV[p + 2]] "
    "rP, p = P, p + 2 "
    "else P = pid[a] or tonumber(a) end "
    "end "
    "if P ~= 0 then "
    "local k, c, ts = 1, 1, '1' "
    "if P < 0 then "
    "P, k, c = -P, tonumber(ARGV[p + 1]), tonumber(ARGV[p + 2]) "
    "p = p + 2 "
    "ts = nil "
    "end "
    "local nw, E, L = pn[P], pe[P], pl[P] "
    "local total = k * c "
    "local got, err = 0, nil "
    "for j = 1, nw do "
    "local n = rpcall('INCRBY', KEYS[kp + j - 1], ts or total) "
    "if type(n) ~= 'number' then "
    "err = type(n) == 'table' and tostring(n.err) or '?' "
    "break "
    "end "
    "bef[j], got = n - total, j "
    "end "
    "local a, s = 0, 0 "
    "if not err then "
    "local room = nil "
    "for j = 1, nw do "
    "local b = bef[j] "
    "local r = L[j] - (b > 0 and b or 0) "
    "if room == nil or r < room then room = r end "
    "end "
    "if room > 0 then "
    "a = floor(room / c) "
    "if a > k then a = k end "
    "end "
    "s = a * c "
    "end "
    "for j = 1, got do "
    "local key = KEYS[kp + j - 1] "
    "if s < total then "
    "if bef[j] == 0 and s == 0 then rcall('DEL', key) "
    "else rcall('DECRBY', key, total - s) end "
    "end "
    "if bef[j] == 0 and s > 0 then rcall('PEXPIREAT', key, E[j]) end "
    "end "
    "if err then "
    "e = e or err "
    "no = no + 1 "
    "o[no] = 'e' .. (string.find(err, 'overflow', 1, true) and 'OVERFLOW' or string.find(err, 'non local key', 1, true) and 'NONLOCAL' or string.find(err, 'cluster is down', 1, true) and 'CLUSTERDOWN' or string.match(err, '^%u+') or '') "
    "else "
    "no = no + 1; o[no] = a "
    "for j = 1, nw do "
    "local b = bef[j] "
    "if b > 9e18 then b = 9e18 elseif b < -9e18 then b = -9e18 end "
    "no = no + 1; o[no] = b "
    "end "
    "end "
    "p, kp = p + adv, kp + nw "
    "else "
    "local nw, qf = tonumber(ARGV[p + 1]), ARGV[p + 2] "
    "p = p + 3 "
    "local ks, ex, ls, ws = {}, {}, {}, nil "
    "for j = 1, nw do "
    "ks[j], ex[j], ls[j] = KEYS[kp], ARGV[p], tonumber(ARGV[p + 1]) "
    "kp, p = kp + 1, p + 2 "
    "end "
    "local tag, qerr = '', nil "
    "if qf ~= '' then "
    "local sc = tonumber(ARGV[p]) "
    "local qk = KEYS[kp] "
    "p, kp = p + 1, kp + 1 "
    "local q = rpcall('HGET', qk, qf) "
    "if type(q) == 'table' then qerr = tostring(q.err); q = nil end "
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
    "local base = string.match(ks[1], '^(.*):%d+:%d+$') "
    "ws, ks, ex, ls = {}, {}, {}, {} "
    "for j = 1, n do "
    "local idx = floor(now / (qw[j] * 1000)) "
    "ws[j] = qw[j] "
    "ks[j] = base .. ':' .. qw[j] .. ':' .. idx "
    "ex[j] = (idx + 1) * qw[j] * 1000 + grace "
    "local lim = floor(ql[j] * sc) "
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
    "local nc = tonumber(ARGV[p]) "
    "local costs, k, c, total = nil, nc, 0, 0 "
    "if nc < 0 then "
    "k, c = -nc, tonumber(ARGV[p + 1]); p = p + 2 "
    "total = k * c "
    "else "
    "costs = {} "
    "for j = 1, nc do "
    "costs[j] = tonumber(ARGV[p + j]); total = total + costs[j] "
    "end "
    "p = p + nc + 1 "
    "end "
    "local bef, err, got = {}, qerr, 0 "
    "for j = 1, (qerr and 0 or nw) do "
    "local n = rpcall('INCRBY', ks[j], total) "
    "if type(n) ~= 'number' then "
    "err = type(n) == 'table' and tostring(n.err) or '?' "
    "break "
    "end "
    "bef[j], got = n - total, j "
    "end "
    "local adm, sum = 0, 0 "
    "if not err then "
    "local room = nil "
    "for j = 1, nw do "
    "local b = bef[j] "
    "if b < 0 then b = 0 end "
    "local r = ls[j] - b "
    "if r < 0 then r = 0 end "
    "if room == nil or r < room then room = r end "
    "end "
    "if costs == nil then "
    "adm = floor(room / c) "
    "if adm > k then adm = k end "
    "sum = adm * c "
    "else "
    "for j = 1, k do "
    "if costs[j] <= room then "
    "adm, sum, room = adm + 1, sum + costs[j], room - costs[j] "
    "end "
    "end "
    "end "
    "end "
    "for j = 1, got do "
    "if sum < total then "
    "if bef[j] == 0 and sum == 0 then rcall('DEL', ks[j]) "
    "else rcall('DECRBY', ks[j], total - sum) end "
    "end "
    "if bef[j] == 0 and sum > 0 then rcall('PEXPIREAT', ks[j], ex[j]) end "
    "end "
    "if err then "
    "e = e or err "
    "no = no + 1 "
    "o[no] = 'e' .. (string.find(err, 'overflow', 1, true) and 'OVERFLOW' or string.find(err, 'non local key', 1, true) and 'NONLOCAL' or string.find(err, 'cluster is down', 1, true) and 'CLUSTERDOWN' or string.match(err, '^%u+') or '') "
    "else "
    "if tag == '' then "
    "no = no + 1; o[no] = adm "
    "for j = 1, nw do "
    "local b = bef[j] "
    "if b > 9e18 then b = 9e18 elseif b < -9e18 then b = -9e18 end "
    "no = no + 1; o[no] = b "
    "end "
    "else "
    "local t, m = {adm, ' ', tag}, 3 "
    "for j = 1, nw do "
    "if tag == 'q' then "
    "local l = ls[j] "
    "if l >= 1e14 then l = string.format('%.0f', l) end "
    "t[m + 1], t[m + 2], t[m + 3], t[m + 4] = ' ', ws[j], ' ', l "
    "m = m + 4 "
    "end "
    "local b = bef[j] "
    "if b >= 1e14 or b <= -1e14 then b = string.format('%.0f', b) end "
    "t[m + 1], t[m + 2] = ' ', b "
    "m = m + 2 "
    "end "
    "no = no + 1; o[no] = table.concat(t) "
    "end "
    "end "
    "end "
    "end "
    "if e then o[no + 1] = e end "
    "return o ";

/* Redis Cluster (redis_cluster.c): the same script, flagged to touch keys
 * of several slots, so that one call can carry every op a master serves.
 * Redis refuses a call whose declared KEYS span slots (CROSSSLOT), flag or
 * not, so such a call declares none: numkeys is 0, ARGV[1] is the number
 * of keys and the keys follow; the prologue puts them back into KEYS and
 * the rest into ARGV. A call that declares its keys (one slot, after a
 * redirection) runs as is. A key this master does not serve (the map was
 * stale, or its slot is migrating) fails its op alone with eNONLOCAL,
 * before that op wrote anything (all of an op's keys share a slot). */
#define CLUSTER_PROLOGUE                                                       \
    "#!lua flags=allow-cross-slot-keys\n"                                     \
    "local KEYS, ARGV = KEYS, ARGV "                                           \
    "if #KEYS == 0 then "                                                      \
    "local K, A, nk = {}, {}, tonumber(ARGV[1]) "                              \
    "for i = 1, nk do K[i] = ARGV[i + 1] end "                                 \
    "for i = nk + 2, #ARGV do A[i - nk - 1] = ARGV[i] end "                    \
    "KEYS, ARGV = K, A "                                                       \
    "end "

const char *rls_redis_cluster_script(size_t *len)
{
    static char text[sizeof(CLUSTER_PROLOGUE) + sizeof(rls_redis_script)];

    if (text[0] == '\0') {
        memcpy(text, CLUSTER_PROLOGUE, sizeof(CLUSTER_PROLOGUE) - 1);
        memcpy(text + sizeof(CLUSTER_PROLOGUE) - 1, rls_redis_script,
               sizeof(rls_redis_script));
    }
    *len = sizeof(CLUSTER_PROLOGUE) - 1 + sizeof(rls_redis_script) - 1;
    return text;
}

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

/* Most ops of a batch have equal costs and no quota, and share their
 * windows' expiries and limits with many others: those go once, as
 * numbered profiles, and such an op is one argument (its profile, or minus
 * it followed by the count and cost when that is not one request of cost
 * 1), and a run of ops of one request of cost 1 on one profile is three
 * arguments in all. Redis makes a Lua string of every argument, so
 * arguments per op are what the script's cost per op is made of. */
#define PROFILES 16

static int is_simple(const rls_op_t *op)
{
    return op->quota == NULL && op->equal_cost != 0;
}

/* A simple op of one request of cost 1: the most common op. */
static int is_unit(const rls_op_t *op)
{
    return is_simple(op) && op->ncosts == 1 && op->equal_cost == 1;
}

typedef struct {
    uint32_t n;
    uint64_t exp[RL_ADMIT_WINDOWS_MAX], lim[RL_ADMIT_WINDOWS_MAX];
} profile_t;

/* The profile of a simple op, made if there is room; 0 if none fits. */
static uint32_t profile_of(const rls_op_t *op, profile_t *pr, uint32_t *np)
{
    uint32_t k, j;

    for (k = 0; k < *np; k++) {
        if (pr[k].n != op->nwin)
            continue;
        for (j = 0; j < op->nwin; j++)
            if (pr[k].exp[j] != op->win[j].expire_at_ms ||
                pr[k].lim[j] != op->win[j].limit)
                break;
        if (j == op->nwin)
            return k + 1;
    }
    if (*np == PROFILES)
        return 0;
    pr[*np].n = op->nwin;
    for (j = 0; j < op->nwin; j++) {
        pr[*np].exp[j] = op->win[j].expire_at_ms;
        pr[*np].lim[j] = op->win[j].limit;
    }
    return ++*np;
}

const char RLS_REDIS_MODULE_CMD[] = "RL.BATCH";

static size_t encode(rls_cmdbuf_t *buf, const char *sha, const char *script,
                     size_t script_len, int undeclared, const rls_op_t *ops,
                     size_t n, uint64_t now_ms, uint64_t grace_ms,
                     uint64_t deadline_ms);

size_t rls_redis_encode(rls_cmdbuf_t *buf, const char *sha, const rls_op_t *ops,
                        size_t n, uint64_t now_ms, uint64_t grace_ms,
                        uint64_t deadline_ms)
{
    return rls_redis_encode_ex(buf, sha, rls_redis_script,
                               sizeof(rls_redis_script) - 1, 0, ops, n, now_ms,
                               grace_ms, deadline_ms);
}

size_t rls_redis_encode_ex(rls_cmdbuf_t *buf, const char *sha,
                           const char *script, size_t script_len,
                           int undeclared, const rls_op_t *ops, size_t n,
                           uint64_t now_ms, uint64_t grace_ms,
                           uint64_t deadline_ms)
{
    return encode(buf, sha, script, script_len, undeclared, ops, n, now_ms,
                  grace_ms, deadline_ms);
}

size_t rls_redis_encode_module(rls_cmdbuf_t *buf, const rls_op_t *ops,
                               size_t n, uint64_t now_ms, uint64_t grace_ms,
                               uint64_t deadline_ms)
{
    return encode(buf, RLS_REDIS_MODULE_CMD, NULL, 0, 0, ops, n, now_ms,
                  grace_ms, deadline_ms);
}

/* sha: EVALSHA with it, NULL: EVAL with the script, RLS_REDIS_MODULE_CMD:
 * the module's command (no script). */
static size_t encode(rls_cmdbuf_t *buf, const char *sha, const char *script,
                     size_t script_len, int undeclared, const rls_op_t *ops,
                     size_t n, uint64_t now_ms, uint64_t grace_ms,
                     uint64_t deadline_ms)
{
    /* Every argument is a bulk string: at most 16 bytes of header and CRLF
     * around its bytes, and numbers of at most 20 digits. */
    size_t need = 256 + script_len, nkeys = 0, nargs = 5, nhead = 3, i, j;
    profile_t pr[PROFILES];
    uint32_t np = 0;
    char *p, scale[40];

    for (i = 0; i < n; i++) {
        const rls_op_t *op = &ops[i];
        size_t a = 3 + 2 * (size_t)op->nwin + (op->quota ? 1 : 0) + 1 +
                   (op->equal_cost ? 1 : (size_t)op->ncosts);
        if (is_simple(op))
            profile_of(op, pr, &np);
        nkeys += op->nwin + (op->quota ? 1 : 0);
        nargs += a;
        need += (op->key_len + 64) * (op->nwin + 1) + op->quota_len + 36 * a;
    }
    for (j = 0; j < np; j++) {
        nargs += 1 + 2 * (size_t)pr[j].n;
        need += 36 * (1 + 2 * (size_t)pr[j].n);
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
    /* The argument count goes first but depends on how each op is sent:
     * written last, into room left for it. */
    p = buf->p + 32;
    if (sha == RLS_REDIS_MODULE_CMD) {
        p = put_bulk(p, sha, strlen(sha));
        nhead = 2;
    } else if (sha == NULL) {
        p = put_bulk(p, "EVAL", 4);
        p = put_bulk(p, script, script_len);
    } else {
        p = put_bulk(p, "EVALSHA", 7);
        p = put_bulk(p, sha, 40);
    }
    if (undeclared)
        p = put_num(p, 0);
    p = put_num(p, nkeys);
    for (i = 0; i < n; i++) {
        const rls_op_t *op = &ops[i];
        char k[RLS_OPKEY_MAX + 34];

        for (j = 0; j < op->nwin; j++) {
            size_t len = op->key_len <= RLS_OPKEY_MAX
                             ? rls_wkey(op, op->win[j].window_s,
                                        op->win[j].index, k)
                             : 0;
            p = put_bulk(p, k, len);
        }
        if (op->quota) {
            memcpy(k, op->key, op->tag_len);
            memcpy(k + op->tag_len, ":q", 2);
            p = put_bulk(p, k, op->tag_len + 2);
        }
    }
    p = put_num(p, deadline_ms);
    p = put_num(p, now_ms);
    p = put_num(p, grace_ms);
    p = put_num(p, n);
    p = put_num(p, np);
    nargs = 5;
    for (j = 0; j < np; j++) {
        uint32_t w;
        p = put_num(p, pr[j].n);
        for (w = 0; w < pr[j].n; w++) {
            p = put_num(p, pr[j].exp[w]);
            p = put_num(p, pr[j].lim[w]);
        }
        nargs += 1 + 2 * (size_t)pr[j].n;
    }
    for (i = 0; i < n; i++) {
        const rls_op_t *op = &ops[i];
        uint32_t prof = is_simple(op) ? profile_of(op, pr, &np) : 0;
        char neg[24];

        if (prof != 0 && op->ncosts == 1 && op->equal_cost == 1) {
            /* A run of such ops with one profile is "r", its length and
             * the profile: no argument per op at all. */
            size_t r = 1;
            while (i + r < n && is_unit(&ops[i + r]) &&
                   profile_of(&ops[i + r], pr, &np) == prof)
                r++;
            if (r >= 2) {
                p = put_bulk(p, "r", 1);
                p = put_num(p, r);
                p = put_num(p, prof);
                nargs += 3;
                i += r - 1;
                continue;
            }
            p = put_num(p, prof);
            nargs += 1;
            continue;
        }
        if (prof != 0) {
            neg[0] = '-';
            p = put_bulk(p, neg, 1 + rl_put_u64(neg + 1, prof));
            p = put_num(p, op->ncosts);
            p = put_num(p, op->equal_cost);
            nargs += 3;
            continue;
        }
        p = put_num(p, 0);
        p = put_num(p, op->nwin);
        p = put_bulk(p, op->quota ? op->quota : "", op->quota ? op->quota_len
                                                              : 0);
        nargs += 3;
        for (j = 0; j < op->nwin; j++) {
            p = put_num(p, op->win[j].expire_at_ms);
            p = put_num(p, op->win[j].limit);
            nargs += 2;
        }
        if (op->quota) {
            if (op->scale == 1.0 || op->scale <= 0) {
                p = put_bulk(p, "1", 1);
            } else {
                int w = snprintf(scale, sizeof(scale), "%.17g", op->scale);
                p = put_bulk(p, scale, (size_t)w);
            }
            nargs += 1;
        }
        if (op->equal_cost) {
            neg[0] = '-';
            p = put_bulk(p, neg, 1 + rl_put_u64(neg + 1, op->ncosts));
            p = put_num(p, op->equal_cost);
            nargs += 2;
        } else {
            p = put_num(p, op->ncosts);
            for (j = 0; j < op->ncosts; j++)
                p = put_num(p, op->costs[j]);
            nargs += 1 + op->ncosts;
        }
    }
    {
        /* "*<count>\r\n" right before the first argument. */
        char head[32];
        size_t hl = (size_t)(put_line(head, '*', nhead + nkeys + nargs +
                                               (undeclared ? 1 : 0)) -
                             head);
        memcpy(buf->p + 32 - hl, head, hl);
        memmove(buf->p, buf->p + 32 - hl, (size_t)(p - buf->p) - (32 - hl));
        return (size_t)(p - buf->p) - (32 - hl);
    }
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

/* Reads one op's text entry, [p, end): "e<KIND>", or "<admitted>" then
 * " Q" and the window counts, or " q" and a window, limit and count per
 * window of the caller's quota (into q, RL_ADMIT_WINDOWS_MAX entries). */
static int parse_op_text(const char *p, const char *end, rls_op_t *op,
                         rls_wop_t *q, rls_redis_errs_t *errs)
{
    int64_t v;
    size_t j;

    if (p < end && *p == 'e') {
        const char *w = ++p;
        size_t wl = (size_t)(end - w);

        /* Redis Cluster: a key of another master (or none now). */
        if ((wl == 8 && memcmp(w, "NONLOCAL", 8) == 0) ||
            (wl == 11 && memcmp(w, "CLUSTERDOWN", 11) == 0)) {
            op->err = RLS_REDIS_ENOTHERE;
            errs->elsewhere++;
            return RL_OK;
        }
        op->err = RL_ESTORE;
        errs->by_kind[rls_redis_err_kind(w, wl)]++;
        errs->failed++;
        return RL_OK;
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
        if (q == NULL)
            return RL_EINVAL;
        p += 2;
        for (j = 0; p < end && *p == ' '; j++) {
            int64_t ws, lim, b;
            if (j == RL_ADMIT_WINDOWS_MAX ||
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
        return p == end ? RL_OK : RL_EINVAL;
    }
    for (j = 0; j < op->nwin; j++)
        if (get_sp_i64(&p, end, &op->win[j].before) != RL_OK)
            return RL_EINVAL;
    return p == end ? RL_OK : RL_EINVAL;
}

int rls_redis_parse_reply(const redisReply *rep, rls_op_t *ops, size_t n,
                          rls_wop_t *qwin, rls_redis_errs_t *errs)
{
    size_t i, j, e = 0;

    memset(errs, 0, sizeof(*errs));
    if (rep->type == REDIS_REPLY_STRING && rep->len == 4 &&
        memcmp(rep->str, "late", 4) == 0)
        return RLS_REDIS_LATE;
    if (rep->type != REDIS_REPLY_ARRAY)
        return RL_EINVAL;
    for (i = 0; i < n; i++) {
        rls_op_t *op = &ops[i];
        const redisReply *x;

        op->qwin = NULL;
        op->nqwin = 0;
        if (e == rep->elements)
            return RL_EINVAL;
        x = rep->element[e++];
        if (x->type == REDIS_REPLY_STRING) {
            if (parse_op_text(x->str, x->str + x->len, op,
                              qwin ? qwin + i * RL_ADMIT_WINDOWS_MAX : NULL,
                              errs) != RL_OK)
                return RL_EINVAL;
            continue;
        }
        if (x->type != REDIS_REPLY_INTEGER || x->integer < 0 ||
            (uint64_t)x->integer > op->ncosts ||
            rep->elements - e < op->nwin)
            return RL_EINVAL;
        op->admitted = (uint64_t)x->integer;
        op->err = 0;
        for (j = 0; j < op->nwin; j++) {
            x = rep->element[e++];
            if (x->type != REDIS_REPLY_INTEGER)
                return RL_EINVAL;
            op->win[j].before = x->integer;
        }
    }
    /* The first refusal's text, if any, follows the ops. */
    if (e + 1 == rep->elements &&
        rep->element[e]->type == REDIS_REPLY_STRING) {
        errs->text = rep->element[e]->str;
        errs->text_len = rep->element[e]->len;
        e++;
    }
    return e == rep->elements ? RL_OK : RL_EINVAL;
}
