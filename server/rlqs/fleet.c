/* RLQS's fleet view (fleet.h): store/rlqs.lua through a Redis store's
 * command() (EVALSHA, EVAL once when Redis does not know the script), or
 * the same step on a table in this process when the store has no
 * command() (the memory store). */
#include "rlqs/fleet.h"

#include <hiredis/hiredis.h>
#include <openssl/sha.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rl_error.h"
#include "rl_window.h"
#include "store/rlqs.lua.h"

static const char fleet_script[] = RLS_LUA_RLQS;
static char fleet_sha[41];
static pthread_once_t sha_once = PTHREAD_ONCE_INIT;
static atomic_uint_fast64_t fleet_calls;

/* The memory store's table: budgets by key, each with its participants.
 * Bounded: past MEM_MEMBERS_MAX participants in all a new one is refused
 * (RL_ENOMEM), as the memory store refuses counters past --memory-max. */
#define MEM_SLOTS 4096
#define MEM_MEMBERS_MAX (1u << 20)

typedef struct member_s {
    char *id;
    uint64_t demand, last_ms;
} member_t;

typedef struct budget_s {
    struct budget_s *next;
    char *key;
    uint64_t window, used;
    /* As the script's summary: the members' count and demands' sum,
     * moved by each step, counted again at `sweep`. */
    uint64_t n, sum, sweep;
    member_t *m;
    size_t nm, cap;
} budget_t;

static pthread_mutex_t mem_lock = PTHREAD_MUTEX_INITIALIZER;
static budget_t *mem_slots[MEM_SLOTS];
static size_t mem_members;

static void sha_init(void)
{
    unsigned char d[SHA_DIGEST_LENGTH];
    int i;

    SHA1((const unsigned char *)fleet_script, sizeof(fleet_script) - 1, d);
    for (i = 0; i < SHA_DIGEST_LENGTH; i++)
        snprintf(fleet_sha + 2 * i, 3, "%02x", d[i]);
}

uint64_t rls_rlqs_fleet_calls(void)
{
    return atomic_load(&fleet_calls);
}

static uint64_t fnv(const char *p, size_t n)
{
    uint64_t h = 1469598103934665603ULL;

    while (n-- > 0)
        h = (h ^ (uint8_t)*p++) * 1099511628211ULL;
    return h;
}

static void member_drop(budget_t *b, size_t k)
{
    free(b->m[k].id);
    b->m[k] = b->m[--b->nm];
    mem_members--;
}

/* store/rlqs.lua's step on the process's table, the same arithmetic (its
 * tests: tests/server/store/test_rlqs_fleet.c); a budget left with no
 * participant is freed. Under mem_lock. */
static int mem_step(rls_rlqs_fleet_op_t *op)
{
    budget_t **pp = &mem_slots[fnv(op->key, op->key_len) % MEM_SLOTS], *b;
    uint64_t window = op->now_ms / op->window_ms;
    int64_t n, sum;
    size_t i, k;

    for (; (b = *pp) != NULL; pp = &b->next)
        if (strlen(b->key) == op->key_len &&
            memcmp(b->key, op->key, op->key_len) == 0)
            break;
    if (b == NULL) {
        if (op->leave)
            return 0;
        if ((b = calloc(1, sizeof(*b))) == NULL ||
            (b->key = strndup(op->key, op->key_len)) == NULL) {
            free(b);
            return RL_ENOMEM;
        }
        b->next = *pp;
        *pp = b;
    }
    n = (int64_t)b->n;
    sum = (int64_t)b->sum;
    for (k = 0; k < b->nm; k++)
        if (strlen(b->m[k].id) == op->member_len &&
            memcmp(b->m[k].id, op->member, op->member_len) == 0)
            break;
    if (k < b->nm) {
        n--;
        sum -= (int64_t)b->m[k].demand;
    }
    if (op->leave) {
        if (k < b->nm)
            member_drop(b, k);
    } else {
        if (b->window != window) {
            b->window = window;
            b->used = 0;
        }
        b->used += op->allowed;
        op->used = b->used;
        if (k == b->nm) {
            if (mem_members >= MEM_MEMBERS_MAX)
                return RL_ENOMEM;
            if (b->nm == b->cap) {
                size_t cap = b->cap ? b->cap * 2 : 8;
                member_t *m = realloc(b->m, cap * sizeof(*m));
                if (m == NULL)
                    return RL_ENOMEM;
                b->m = m;
                b->cap = cap;
            }
            if ((b->m[k].id = strndup(op->member, op->member_len)) == NULL)
                return RL_ENOMEM;
            b->nm++;
            mem_members++;
        }
        b->m[k].demand = op->demand;
        b->m[k].last_ms = op->now_ms;
        n++;
        sum += (int64_t)op->demand;
    }
    if (op->now_ms >= b->sweep || n < 0 || sum < 0) {
        n = sum = 0;
        for (i = 0; i < b->nm;) {
            if (op->now_ms > b->m[i].last_ms + op->stale_ms) {
                member_drop(b, i);
                continue;
            }
            n++;
            sum += (int64_t)b->m[i].demand;
            i++;
        }
        b->sweep = op->now_ms + op->stale_ms / 2;
    }
    b->n = (uint64_t)n;
    b->sum = (uint64_t)sum;
    op->n = b->n;
    op->sum = b->sum;
    if (b->nm == 0) {
        *pp = b->next;
        free(b->m);
        free(b->key);
        free(b);
    }
    return 0;
}

typedef struct {
    rls_store_t *s;
    rls_rlqs_fleet_op_t *op;
    rls_rlqs_fleet_cb cb;
    void *data;
    int retried; /* EVAL sent after NOSCRIPT */
} fleet_req_t;

static int send_req(fleet_req_t *q, int eval);

static int reply_u64(const redisReply *r, uint64_t *out)
{
    if (r->type != REDIS_REPLY_INTEGER || r->integer < 0)
        return -1;
    *out = (uint64_t)r->integer;
    return 0;
}

static void on_reply(void *data, void *reply)
{
    fleet_req_t *q = data;
    const redisReply *r = reply;
    rls_rlqs_fleet_op_t *op = q->op;

    if (r != NULL && r->type == REDIS_REPLY_ERROR && !q->retried &&
        strncmp(r->str, "NOSCRIPT", 8) == 0) {
        q->retried = 1;
        if (send_req(q, 1) == 0)
            return;
        r = NULL;
    }
    op->err = RL_ESTORE;
    if (r != NULL && r->type == REDIS_REPLY_ARRAY && r->elements == 3 &&
        reply_u64(r->element[0], &op->used) == 0 &&
        reply_u64(r->element[1], &op->n) == 0 &&
        reply_u64(r->element[2], &op->sum) == 0)
        op->err = 0;
    q->cb(q->data, op);
    free(q);
}

static int send_req(fleet_req_t *q, int eval)
{
    rls_rlqs_fleet_op_t *op = q->op;
    const char *argv[13];
    size_t lens[13];
    char demand[24], allowed[24], now[24], stale[24], ttl[24];
    int argc = 0;

#define ARG(p, l) (argv[argc] = (p), lens[argc] = (l), argc++)
    if (eval) {
        ARG("EVAL", 4);
        ARG(fleet_script, sizeof(fleet_script) - 1);
    } else {
        ARG("EVALSHA", 7);
        ARG(fleet_sha, 40);
    }
    ARG("3", 1);
    ARG(op->key, op->key_len);
    /* The window's counter: "<key>:u<index>", of the budget's slot. */
    {
        static __thread char ukey[1024 + 32];
        int n =
            snprintf(ukey, sizeof(ukey), "%.*s:u%llu", (int)op->key_len,
                     op->key, (unsigned long long)(op->now_ms / op->window_ms));
        if (n < 0 || (size_t)n >= sizeof(ukey))
            return RL_EINVAL;
        ARG(ukey, (size_t)n);
    }
    /* Its summary: "<key>:s". */
    {
        static __thread char skey[1024 + 4];
        int n =
            snprintf(skey, sizeof(skey), "%.*s:s", (int)op->key_len, op->key);
        if (n < 0 || (size_t)n >= sizeof(skey))
            return RL_EINVAL;
        ARG(skey, (size_t)n);
    }
    ARG(op->member, op->member_len);
    ARG(demand, rl_put_u64(demand, op->demand));
    ARG(allowed, rl_put_u64(allowed, op->allowed));
    ARG(now, rl_put_u64(now, op->now_ms));
    ARG(stale, rl_put_u64(stale, op->stale_ms));
    ARG(ttl, rl_put_u64(ttl, op->window_ms * 2 + 1000));
    ARG(op->leave ? "1" : "0", 1);
#undef ARG
    atomic_fetch_add(&fleet_calls, 1);
    return q->s->v->command(q->s, argc, argv, lens, on_reply, q);
}

void rls_rlqs_fleet_submit(rls_store_t *s, rls_rlqs_fleet_op_t *op,
                           rls_rlqs_fleet_cb cb, void *data)
{
    fleet_req_t *q;
    int rc;

    op->used = op->n = op->sum = 0;
    op->err = 0;
    if (op->key_len == 0 || op->key_len > 1024 || op->member_len == 0 ||
        op->window_ms == 0) {
        op->err = RL_EINVAL;
        cb(data, op);
        return;
    }
    if (s->v->command == NULL) {
        atomic_fetch_add(&fleet_calls, 1);
        pthread_mutex_lock(&mem_lock);
        op->err = mem_step(op);
        pthread_mutex_unlock(&mem_lock);
        cb(data, op);
        return;
    }
    pthread_once(&sha_once, sha_init);
    if ((q = calloc(1, sizeof(*q))) == NULL) {
        op->err = RL_ENOMEM;
        cb(data, op);
        return;
    }
    q->s = s;
    q->op = op;
    q->cb = cb;
    q->data = data;
    if ((rc = send_req(q, 0)) != 0) {
        free(q);
        op->err = rc == RL_EINVAL ? RL_EINVAL : RL_ESTORE;
        cb(data, op);
    }
}
