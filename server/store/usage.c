/* The admin endpoint's step on one caller's keys (usage.h): the memory
 * store runs it itself (its vtable's usage); a Redis store gets the
 * script store/usage.lua through its command(), as EVAL: an operator's
 * step is rare, and the script is a few hundred bytes. The cluster
 * store's command() routes EVAL by its first key (argv[3]), which is of
 * the caller's slot as every other key here. */
#include "store/usage.h"

#include <hiredis/hiredis.h>
#include <stdlib.h>
#include <string.h>

#include "rl_error.h"
#include "rl_window.h"
#include "store/store.h"
#include "store/usage.lua.h"

static const char usage_script[] = RLS_LUA_USAGE;

/* EVAL, the script, numkeys, the keys, the lease set, the quota hash,
 * then five arguments. */
#define USAGE_ARGC_MAX (3 + RLS_USAGE_KEYS_MAX + 2 + 5)

typedef struct {
    rls_usage_op_t *u;
    rls_usage_cb cb;
    void *data;
} usage_req_t;

static void finish(rls_usage_op_t *u, rls_usage_cb cb, void *data, int err)
{
    u->err = err;
    if (err != 0) {
        u->has_quota = 0;
        u->quota_len = 0;
        u->quota[0] = '\0';
        u->leases = 0;
        u->cleared = 0;
    }
    cb(data, u);
}

static void on_reply(void *data, void *reply)
{
    usage_req_t *q = data;
    const redisReply *r = reply;
    rls_usage_op_t *u = q->u;
    int err = RL_ESTORE;

    /* {quota or nil, leases alive, keys cleared}; anything else is the
     * store's trouble (an error reply, a lost connection). */
    if (r != NULL && r->type == REDIS_REPLY_ARRAY && r->elements == 3 &&
        (r->element[0]->type == REDIS_REPLY_NIL ||
         r->element[0]->type == REDIS_REPLY_STRING) &&
        r->element[1]->type == REDIS_REPLY_INTEGER &&
        r->element[1]->integer >= 0 &&
        r->element[2]->type == REDIS_REPLY_INTEGER &&
        r->element[2]->integer >= 0) {
        const redisReply *qr = r->element[0];
        err = 0;
        if (qr->type == REDIS_REPLY_STRING) {
            if (qr->len > RLS_USAGE_QUOTA_MAX) {
                err = RL_EFULL;
            } else {
                memcpy(u->quota, qr->str, qr->len);
                u->quota[qr->len] = '\0';
                u->quota_len = qr->len;
                u->has_quota = 1;
            }
        }
        u->leases = (uint64_t)r->element[1]->integer;
        u->cleared = (uint64_t)r->element[2]->integer;
    }
    finish(u, q->cb, q->data, err);
    free(q);
}

static int usage_check(const rls_usage_op_t *u)
{
    uint32_t i;

    if (u->nkeys > RLS_USAGE_KEYS_MAX || (u->nkeys > 0 && u->keys == NULL))
        return RL_EINVAL;
    for (i = 0; i < u->nkeys; i++)
        if (u->lens[i] == 0 || u->lens[i] > RLS_OPKEY_MAX + 40)
            return RL_EINVAL;
    if (u->qkey != NULL && u->qfield == NULL)
        return RL_EINVAL;
    /* Something to route by: a cluster sends the call to the master of
     * its first key's slot. */
    return u->nkeys > 0 || u->qkey != NULL || u->lkey != NULL ? 0 : RL_EINVAL;
}

void rls_store_usage(rls_store_t *s, rls_usage_op_t *u, rls_usage_cb cb,
                     void *data)
{
    const char *argv[USAGE_ARGC_MAX];
    size_t lens[USAGE_ARGC_MAX];
    char nk[24], now[24];
    usage_req_t *q;
    int argc = 0, rc;
    uint32_t i;

    u->has_quota = 0;
    u->quota_len = 0;
    u->quota[0] = '\0';
    u->leases = 0;
    u->cleared = 0;
    u->err = 0;
    if ((rc = usage_check(u)) != 0) {
        finish(u, cb, data, rc);
        return;
    }
    if (s->v->usage != NULL) {
        s->v->usage(s, u);
        cb(data, u);
        return;
    }
    if (s->v->command == NULL || (q = malloc(sizeof(*q))) == NULL) {
        finish(u, cb, data, s->v->command == NULL ? RL_EINVAL : RL_ENOMEM);
        return;
    }
    q->u = u;
    q->cb = cb;
    q->data = data;
#define ARG(p, l) (argv[argc] = (p), lens[argc] = (l), argc++)
    ARG("EVAL", 4);
    ARG(usage_script, sizeof(usage_script) - 1);
    ARG(nk, rl_put_u64(nk, u->nkeys + (u->lkey != NULL) + (u->qkey != NULL)));
    for (i = 0; i < u->nkeys; i++)
        ARG(u->keys[i], u->lens[i]);
    if (u->lkey != NULL)
        ARG(u->lkey, u->lkey_len);
    if (u->qkey != NULL)
        ARG(u->qkey, u->qkey_len);
    ARG(u->reset ? "1" : "0", 1);
    ARG(now, rl_put_u64(now, u->now_ms));
    ARG(u->qfield != NULL ? u->qfield : "", u->qfield_len);
    ARG(u->lkey != NULL ? "1" : "0", 1);
    ARG(u->qkey != NULL ? "1" : "0", 1);
#undef ARG
    if (s->v->command(s, argc, argv, lens, on_reply, q) != 0) {
        free(q);
        finish(u, cb, data, RL_ESTORE);
    }
}
