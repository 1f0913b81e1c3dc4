/* Reservations and leases on a store (reserve.h, rls_store_reserve): the
 * memory store runs them itself (its vtable's xop); a Redis store gets the
 * one script store/reserve.lua, which does every kind, through its
 * command().
 *
 * Sent as EVALSHA, and again as EVAL when Redis answers NOSCRIPT (after a
 * restart, a failover, SCRIPT FLUSH, or on a master that never saw it):
 * the script is some 5 kB, and a lease taken and given back per request
 * would otherwise send it twice per request. EVAL caches it under its
 * SHA, so the next EVALSHA finds it. The cluster store's command() routes
 * both by their first key (argv[3]). */
#include <hiredis/hiredis.h>
#include <openssl/evp.h>
#include <stdlib.h>
#include <string.h>

#include "rl_error.h"
#include "rl_window.h"
#include "store/reserve.h"
#include "store/store.h"
#include "store/reserve.lua.h"

static const char reserve_script[] = RLS_LUA_RESERVE;

/* A log entry's cost has 10 digits (RLS_SWL_ENT), and every store bounds
 * delta the same way, so a settle past it fails everywhere alike. */
#define RESERVE_DELTA_MAX INT64_C(9999999999)
/* Lua's numbers are doubles: a lease limit past 2^53 is no limit. */
#define RESERVE_LIMIT_MAX (UINT64_C(1) << 53)

/* EVAL, script, numkeys, keys (the settled set, its floor, up to
 * RL_ADMIT_WINDOWS_MAX windows and a version 1 handle's marker), then
 * kind, now, until, delta, decided_at, nwin, three per window, the id and
 * the set's bound. */
#define RESERVE_KEYS_MAX (3 + RL_ADMIT_WINDOWS_MAX)
#define RESERVE_ARGC_MAX (3 + RESERVE_KEYS_MAX + 8 + 3 * RL_ADMIT_WINDOWS_MAX)

typedef struct {
    rls_store_t *s;
    rls_reserve_op_t *x;
    rls_reserve_op_cb cb;
    void *data;
    int eval; /* sent as EVAL (after NOSCRIPT) */
} reserve_req_t;

static int send_req(reserve_req_t *q);

/* The script's SHA1 in 40 lowercase hex digits, computed once (the loop's
 * thread is the only caller). NULL if it could not be: then EVAL. */
static const char *script_sha(void)
{
    static _Thread_local char hex[41];
    static _Thread_local int state; /* 0 not yet, 1 done, -1 failed */
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int n = 0, i;

    if (state == 0) {
        state = -1;
        if (EVP_Digest(reserve_script, sizeof(reserve_script) - 1, md, &n,
                       EVP_sha1(), NULL) == 1 &&
            n == 20) {
            for (i = 0; i < 20; i++) {
                hex[2 * i] = "0123456789abcdef"[md[i] >> 4];
                hex[2 * i + 1] = "0123456789abcdef"[md[i] & 15];
            }
            hex[40] = '\0';
            state = 1;
        }
    }
    return state == 1 ? hex : NULL;
}

static void finish(rls_reserve_op_t *x, rls_reserve_op_cb cb, void *data,
                   int err)
{
    x->err = err;
    if (err != 0) {
        x->result = 0;
        x->count = 0;
        x->earliest_ms = 0;
    }
    cb(data, x);
}

/* An integer element of the reply, >= 0. Returns 0, or RL_ESTORE when it
 * is not one. */
static int reply_u64(const redisReply *r, uint64_t *v)
{
    if (r == NULL || r->type != REDIS_REPLY_INTEGER || r->integer < 0)
        return RL_ESTORE;
    *v = (uint64_t)r->integer;
    return 0;
}

static void on_reply(void *data, void *reply)
{
    reserve_req_t *q = data;
    const redisReply *r = reply;
    rls_reserve_op_t *x = q->x;
    uint64_t res, count, earliest, qlimit;
    int err = RL_ESTORE;

    /* {result, count, earliest_ms, quota}; anything else is the store's
     * trouble (an error reply, a lost connection). */
    if (r != NULL && r->type == REDIS_REPLY_ERROR && !q->eval && r->len >= 8 &&
        memcmp(r->str, "NOSCRIPT", 8) == 0) {
        /* Not in this Redis's cache: once more with the script. */
        q->eval = 1;
        if (send_req(q) == 0)
            return;
        err = RL_ESTORE;
    } else if (r != NULL && r->type == REDIS_REPLY_ARRAY && r->elements == 4 &&
               reply_u64(r->element[0], &res) == 0 && res <= 1 &&
               reply_u64(r->element[1], &count) == 0 &&
               reply_u64(r->element[2], &earliest) == 0 &&
               reply_u64(r->element[3], &qlimit) == 0) {
        x->result = (int)res;
        x->count = count;
        x->earliest_ms = earliest;
        x->qlimit = qlimit;
        err = 0;
    }
    finish(x, q->cb, q->data, err);
    free(q);
}

/* Checks what every store refuses alike. Returns 0 or RL_EINVAL. */
static int reserve_check(const rls_reserve_op_t *x)
{
    uint32_t j;

    if (x->key == NULL || x->key_len == 0 || x->key_len > RLS_OPKEY_MAX)
        return RL_EINVAL;
    if (x->kind == RLS_XOP_SETTLE) {
        if (x->nwin > RL_ADMIT_WINDOWS_MAX || (x->nwin > 0 && x->win == NULL) ||
            x->delta > RESERVE_DELTA_MAX || x->delta < -RESERVE_DELTA_MAX)
            return RL_EINVAL;
        for (j = 0; j < x->nwin; j++)
            if (x->win[j].algo >= RL_ALGO_MAX)
                return RL_EINVAL;
        return 0;
    }
    return x->kind >= RLS_XOP_ACQUIRE && x->kind <= RLS_XOP_RENEW ? 0
                                                                  : RL_EINVAL;
}

/* The id as 16 lowercase hex digits into dst (17 bytes). */
static void put_hex(char *dst, uint64_t id)
{
    static const char hex[] = "0123456789abcdef";
    int i;

    for (i = 15; i >= 0; i--, id >>= 4)
        dst[i] = hex[id & 15];
    dst[16] = '\0';
}

static size_t put_i64(char *dst, int64_t v)
{
    if (v < 0) {
        dst[0] = '-';
        return 1 + rl_put_u64(dst + 1, (uint64_t)0 - (uint64_t)v);
    }
    return rl_put_u64(dst, (uint64_t)v);
}

/* Sends q's operation (EVALSHA, or EVAL once q->eval) through the store's
 * command(). Returns 0 (on_reply will fire) or RL_ESTORE (it will not). */
static int send_req(reserve_req_t *q)
{
    const rls_reserve_op_t *x = q->x;
    char keys[RESERVE_KEYS_MAX][RLS_OPKEY_MAX + 40];
    char nums[RESERVE_ARGC_MAX][24];
    const char *argv[RESERVE_ARGC_MAX], *sha = q->eval ? NULL : script_sha();
    size_t lens[RESERVE_ARGC_MAX];
    int argc = 0, nk = 0, nn = 0;
    uint32_t j;

#define ARG(p, l) (argv[argc] = (p), lens[argc] = (l), argc++)
#define NUM(v)                                                                 \
    (lens[argc] = rl_put_u64(nums[nn], (v)), argv[argc++] = nums[nn++])
#define INUM(v) (lens[argc] = put_i64(nums[nn], (v)), argv[argc++] = nums[nn++])

    /* The keys: the settled set, its floor and the windows, or the lease
     * set. */
    memcpy(keys[0], x->key, x->key_len);
    if (x->kind == RLS_XOP_SETTLE) {
        rls_op_t op = {0};
        op.key = x->key;
        op.key_len = x->key_len;
        op.tag_len = x->tag_len;
        memcpy(keys[0] + x->key_len, ":x", 3);
        memcpy(keys[1], x->key, x->key_len);
        memcpy(keys[1] + x->key_len, ":xf", 4);
        nk = 2 + (int)x->nwin;
        for (j = 0; j < x->nwin; j++)
            rls_wkey(&op, &x->win[j], RLS_WKEY_STATE, keys[2 + j]);
        if (x->marker) {
            memcpy(keys[nk], x->key, x->key_len);
            memcpy(keys[nk] + x->key_len, ":x", 2);
            put_hex(keys[nk] + x->key_len + 2, x->id);
            nk++;
        }
    } else {
        memcpy(keys[0] + x->key_len, ":c", 3);
        nk = 1;
        if (x->kind == RLS_XOP_ACQUIRE && x->quota != NULL) {
            /* The caller's stored quotas: "<prefix>{<caller>}:q". */
            memcpy(keys[1], x->key, x->tag_len);
            memcpy(keys[1] + x->tag_len, ":q", 3);
            nk = 2;
        }
    }

    if (sha != NULL) {
        q->eval = 0;
        ARG("EVALSHA", 7);
        ARG(sha, 40);
    } else {
        q->eval = 1;
        ARG("EVAL", 4);
        ARG(reserve_script, sizeof(reserve_script) - 1);
    }
    NUM((uint64_t)nk);
    for (j = 0; j < (uint32_t)nk; j++)
        ARG(keys[j], strlen(keys[j]));
    NUM((uint64_t)x->kind);
    NUM(x->now_ms);
    if (x->kind == RLS_XOP_SETTLE) {
        NUM(x->until_ms);
        INUM(x->delta);
        NUM(x->decided_at_ms);
        NUM(x->nwin);
        for (j = 0; j < x->nwin; j++) {
            const rls_op_window_t *w = &x->win[j];
            uint64_t W = (uint64_t)w->window_s * 1000, ex;
            if (w->algo == RL_ALGO_GCRA) {
                ARG("g", 1);
                NUM(w->t_us);
                NUM(w->expire_at_ms);
            } else if (w->algo == RL_ALGO_SLIDING_LOG) {
                /* The log lives W + grace past its newest entry: the
                 * decision's expiry moved on to now. */
                ex = w->expire_at_ms;
                if (x->now_ms > x->decided_at_ms)
                    ex += x->now_ms - x->decided_at_ms;
                ARG("l", 1);
                NUM(W);
                NUM(ex);
            } else if (w->algo == RL_ALGO_SLIDING_COUNTER) {
                ARG("s", 1);
                NUM(w->index);
                ARG("0", 1);
            } else {
                ARG("f", 1);
                ARG("0", 1);
                ARG("0", 1);
            }
        }
        {
            char *id = nums[nn++];
            put_hex(id, x->id);
            ARG(id, 16);
        }
        NUM(x->settled_max > 0 ? x->settled_max : 1);
    } else {
        char *id = nums[nn++];
        put_hex(id, x->id);
        ARG(id, 16);
        NUM(x->until_ms);
        NUM(x->limit < RESERVE_LIMIT_MAX ? x->limit : RESERVE_LIMIT_MAX);
        if (nk == 2) {
            ARG(x->quota, x->quota_len);
            lens[argc] = (size_t)snprintf(nums[nn], sizeof(nums[nn]), "%.6f",
                                          x->scale > 0 ? x->scale : 1.0);
            argv[argc++] = nums[nn++];
        }
    }
#undef ARG
#undef NUM
#undef INUM

    /* Beside the other operations of this loop iteration, in one write. */
    return (q->s->v->command_later != NULL ? q->s->v->command_later
                                           : q->s->v->command)(
               q->s, argc, argv, lens, on_reply, q) == RL_OK
               ? 0
               : RL_ESTORE;
}

void rls_store_reserve(rls_store_t *s, rls_reserve_op_t *x,
                       rls_reserve_op_cb cb, void *data)
{
    reserve_req_t *q;

    x->result = 0;
    x->count = 0;
    x->earliest_ms = 0;
    if (reserve_check(x) != 0) {
        finish(x, cb, data, RL_ESTORE);
        return;
    }
    if (s->v->xop != NULL) {
        s->v->xop(s, x, cb, data);
        return;
    }
    if (s->v->command == NULL) {
        finish(x, cb, data, RL_ESTORE);
        return;
    }
    if ((q = malloc(sizeof(*q))) == NULL) {
        finish(x, cb, data, RL_ENOMEM);
        return;
    }
    q->s = s;
    q->x = x;
    q->cb = cb;
    q->data = data;
    q->eval = 0;
    if (send_req(q) != 0) {
        free(q);
        finish(x, cb, data, RL_ESTORE);
    }
}
