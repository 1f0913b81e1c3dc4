/* The Redis store's batch as one RESP command: the script's or the
 * module's arguments (see redis_encode.h; redis_script.lua describes
 * them). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rl_error.h"
#include "rl_window.h"
#include "store/redis_encode.h"
#include "store/redis_script.h"

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
    return op->quota == NULL && op->equal_cost != 0 && rls_op_fixed(op);
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

/* Ops of the other algorithms ("a" ops) with equal costs and no quota
 * share their limits' arguments with the rule's other callers the same
 * way: those go once, as "a" profiles numbered after the others ("a", the
 * number of limits, each limit's letter and arguments), and such an op is
 * "A", its profile, the count and the cost, and a run of them of one
 * request of cost 1 "R", its length and the profile. An "a" op spells out 8 to
 * 10 arguments, and Redis makes an object (a Lua string for the script) of
 * each. */
static int is_asimple(const rls_op_t *op)
{
    return op->quota == NULL && op->equal_cost != 0 && !rls_op_fixed(op);
}

static int is_aunit(const rls_op_t *op)
{
    return is_asimple(op) && op->ncosts == 1 && op->equal_cost == 1;
}

/* 1 when limits a and b are sent with the same arguments. */
static int alim_same(const rls_op_window_t *a, const rls_op_window_t *b)
{
    if (a->algo != b->algo || a->limit != b->limit)
        return 0;
    switch (a->algo) {
    case RL_ALGO_SLIDING_COUNTER:
        return a->expire_at_ms == b->expire_at_ms && a->weight == b->weight &&
               a->index == b->index;
    case RL_ALGO_GCRA:
        return a->t_us == b->t_us;
    case RL_ALGO_SLIDING_LOG:
        return a->expire_at_ms == b->expire_at_ms && a->window_s == b->window_s;
    default:
        return a->expire_at_ms == b->expire_at_ms;
    }
}

/* The "a" profile of an op (is_asimple), made if there is room: the op
 * whose limits define it is kept. 0 if none fits. */
static uint32_t aprofile_of(const rls_op_t *op, const rls_op_t **ap,
                            uint32_t *nap)
{
    uint32_t k, j;

    for (k = 0; k < *nap; k++) {
        if (ap[k]->nwin != op->nwin)
            continue;
        for (j = 0; j < op->nwin; j++)
            if (!alim_same(&ap[k]->win[j], &op->win[j]))
                break;
        if (j == op->nwin)
            return k + 1;
    }
    if (*nap == PROFILES)
        return 0;
    ap[*nap] = op;
    return ++*nap;
}

/* The letter and arguments of each of op's limits, as an "a" op and an
 * "a" profile carry them. */
static char *put_limits(char *p, const rls_op_t *op, size_t *nargs)
{
    uint32_t j;

    for (j = 0; j < op->nwin; j++) {
        const rls_op_window_t *w = &op->win[j];
        switch (w->algo) {
        case RL_ALGO_SLIDING_COUNTER:
            p = put_bulk(p, "s", 1);
            p = put_num(p, w->expire_at_ms);
            p = put_num(p, w->limit);
            p = put_num(p, w->weight);
            p = put_num(p, w->index);
            *nargs += 5;
            break;
        case RL_ALGO_GCRA:
            p = put_bulk(p, "g", 1);
            p = put_num(p, w->limit);
            p = put_num(p, w->t_us);
            *nargs += 3;
            break;
        case RL_ALGO_SLIDING_LOG:
            p = put_bulk(p, "l", 1);
            p = put_num(p, w->expire_at_ms);
            p = put_num(p, w->limit);
            p = put_num(p, (uint64_t)w->window_s * 1000);
            *nargs += 4;
            break;
        default:
            p = put_bulk(p, "f", 1);
            p = put_num(p, w->expire_at_ms);
            p = put_num(p, w->limit);
            *nargs += 3;
        }
    }
    return p;
}

/* sha: EVALSHA with it, NULL: EVAL with the script, RLS_REDIS_MODULE_CMD:
 * the module's command (no script). Returns 0 or RL_ENOMEM. */
/* A stored quota's scale: "1", or the double in full. */
static char *put_scale(char *p, double scale)
{
    char t[40];
    int w;

    if (scale == 1.0 || scale <= 0)
        return put_bulk(p, "1", 1);
    w = snprintf(t, sizeof(t), "%.17g", scale);
    return put_bulk(p, t, (size_t)w);
}

static int encode(rls_cmdbuf_t *buf, const char *sha, const char *script,
                  size_t script_len, int undeclared, const rls_op_t *ops,
                  size_t n, uint64_t now_ms, uint64_t grace_ms,
                  uint64_t deadline_ms)
{
    /* Every argument is a bulk string: at most 16 bytes of header and CRLF
     * around its bytes, and numbers of at most 20 digits. */
    size_t need = 256 + script_len, nkeys = 0, nargs = 5, nhead = 3, i, j;
    profile_t pr[PROFILES];
    const rls_op_t *ap[PROFILES];
    uint32_t np = 0, nap = 0;
    char *p;

    for (i = 0; i < n; i++) {
        const rls_op_t *op = &ops[i];
        size_t a = 3 + 5 * (size_t)op->nwin + (op->quota ? 1 : 0) + 1 +
                   (op->equal_cost ? 1 : (size_t)op->ncosts);
        if (is_simple(op))
            profile_of(op, pr, &np);
        else if (is_asimple(op))
            aprofile_of(op, ap, &nap);
        nkeys += op->nwin + (op->quota ? 1 : 0);
        nargs += a;
        need += (rls_op_key_max(op) + 64) * (2 * (size_t)op->nwin + 1) +
                op->quota_len + 36 * a;
    }
    for (j = 0; j < np; j++) {
        nargs += 1 + 2 * (size_t)pr[j].n;
        need += 36 * (1 + 2 * (size_t)pr[j].n);
    }
    need += 36 * (size_t)nap * (2 + 5 * RL_ADMIT_WINDOWS_MAX);
    if (need > buf->cap) {
        size_t cap = buf->cap ? buf->cap : 4096;
        while (cap < need)
            cap *= 2;
        if ((p = realloc(buf->p, cap)) == NULL)
            return RL_ENOMEM;
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
        char k[RLS_OPKEY_MAX + 36];

        for (j = 0; j < op->nwin; j++) {
            size_t len = rls_op_key_max(op) <= RLS_OPKEY_MAX
                             ? rls_wkey(op, &op->win[j], RLS_WKEY_STATE, k)
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
    p = put_num(p, np + nap);
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
    for (j = 0; j < nap; j++) {
        p = put_bulk(p, "a", 1);
        p = put_num(p, ap[j]->nwin);
        nargs += 2;
        p = put_limits(p, ap[j], &nargs);
    }
    for (i = 0; i < n; i++) {
        const rls_op_t *op = &ops[i];
        uint32_t prof = is_simple(op) ? profile_of(op, pr, &np) : 0;
        uint32_t aprof = is_asimple(op) ? aprofile_of(op, ap, &nap) : 0;
        char neg[24];

        if (aprof != 0 && is_aunit(op)) {
            /* "R", the run's length and the profile. */
            size_t r = 1;
            while (i + r < n && is_aunit(&ops[i + r]) &&
                   aprofile_of(&ops[i + r], ap, &nap) == aprof)
                r++;
            p = put_bulk(p, "R", 1);
            p = put_num(p, r);
            p = put_num(p, np + aprof);
            nargs += 3;
            i += r - 1;
            continue;
        }
        if (aprof != 0) {
            p = put_bulk(p, "A", 1);
            p = put_num(p, np + aprof);
            p = put_num(p, op->ncosts);
            p = put_num(p, op->equal_cost);
            nargs += 4;
            continue;
        }

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
        if (!rls_op_fixed(op)) {
            /* "a": the quota (or ""), its scale, then a letter and its
             * arguments per limit. */
            p = put_bulk(p, "a", 1);
            p = put_num(p, op->nwin);
            p = put_bulk(p, op->quota ? op->quota : "",
                         op->quota ? op->quota_len : 0);
            nargs += 3;
            if (op->quota) {
                p = put_scale(p, op->scale);
                nargs += 1;
            }
            p = put_limits(p, op, &nargs);
        } else {
            p = put_num(p, 0);
            p = put_num(p, op->nwin);
            p = put_bulk(p, op->quota ? op->quota : "",
                         op->quota ? op->quota_len : 0);
            nargs += 3;
            for (j = 0; j < op->nwin; j++) {
                p = put_num(p, op->win[j].expire_at_ms);
                p = put_num(p, op->win[j].limit);
                nargs += 2;
            }
        }
        if (op->quota && rls_op_fixed(op)) {
            p = put_scale(p, op->scale);
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
        size_t hl =
            (size_t)(put_line(head, '*',
                              nhead + nkeys + nargs + (undeclared ? 1 : 0)) -
                     head);
        memcpy(buf->p + 32 - hl, head, hl);
        buf->len = (size_t)(p - buf->p) - (32 - hl);
        memmove(buf->p, buf->p + 32 - hl, buf->len);
        return RL_OK;
    }
}

int rls_redis_encode(rls_cmdbuf_t *buf, const char *sha, const rls_op_t *ops,
                     size_t n, uint64_t now_ms, uint64_t grace_ms,
                     uint64_t deadline_ms)
{
    return encode(buf, sha, rls_redis_script, rls_redis_script_len, 0, ops, n,
                  now_ms, grace_ms, deadline_ms);
}

int rls_redis_encode_ex(rls_cmdbuf_t *buf, const char *sha, const char *script,
                        size_t script_len, int undeclared, const rls_op_t *ops,
                        size_t n, uint64_t now_ms, uint64_t grace_ms,
                        uint64_t deadline_ms)
{
    return encode(buf, sha, script, script_len, undeclared, ops, n, now_ms,
                  grace_ms, deadline_ms);
}

int rls_redis_encode_module(rls_cmdbuf_t *buf, const rls_op_t *ops, size_t n,
                            uint64_t now_ms, uint64_t grace_ms,
                            uint64_t deadline_ms)
{
    return encode(buf, RLS_REDIS_MODULE_CMD, NULL, 0, 0, ops, n, now_ms,
                  grace_ms, deadline_ms);
}
