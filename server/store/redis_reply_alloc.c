/* Reply objects for the store's connections, allocated as few times as
 * can be; see redis_reply_alloc.h. */
#include <stdlib.h>
#include <string.h>

#include "rl_error.h"
#include "store/redis_reply_alloc.h"

/* An array and its elements in one allocation: the reply, the element
 * pointers hiredis and its readers expect, then the elements themselves.
 * A scalar element lives in its slot (a string's bytes are a second
 * allocation); a nested array is a block of its own, and the parent's
 * pointer then points there instead of at the slot. */
typedef struct {
    redisReply r;
    redisReply *ptr[]; /* r.elements pointers, then r.elements slots */
} block_t;

static redisReply *slots_of(block_t *b)
{
    return (redisReply *)(void *)(b->ptr + b->r.elements);
}

static void cap_over(rls_redis_reply_cap_t *cap)
{
    if (cap->over)
        return;
    cap->over = 1;
    if (cap->count != NULL)
        (*cap->count)++;
}

/* Charges n bytes of objects to the reply task belongs to (a reply's
 * first object starts its count). Returns 0, or -1 when they do not fit:
 * nothing may then be allocated. */
static int charge(const redisReadTask *task, size_t n)
{
    rls_redis_reply_cap_t *cap = task->privdata;

    if (cap == NULL)
        return 0;
    if (task->parent == NULL)
        cap->used = 0;
    if (cap->over || n > cap->max - cap->used) {
        cap_over(cap);
        return -1;
    }
    cap->used += n;
    return 0;
}

/* What a scalar costs beyond its bytes: a slot in its parent's block,
 * already paid for with the array, or a reply of its own. */
static size_t scalar_cost(const redisReadTask *task)
{
    return task->parent != NULL ? 0 : sizeof(redisReply);
}

/* The slot a scalar goes into (its parent's), or a reply of its own. */
static redisReply *place(const redisReadTask *task, int type)
{
    redisReply *r;

    if (task->parent != NULL) {
        block_t *p = task->parent->obj;
        r = &slots_of(p)[task->idx];
        p->ptr[task->idx] = r;
    } else if ((r = malloc(sizeof(*r))) == NULL) {
        return NULL;
    }
    memset(r, 0, sizeof(*r));
    r->type = type;
    return r;
}

static void *create_string(const redisReadTask *task, char *str, size_t len)
{
    char *s;
    redisReply *r;

    if (charge(task, len + 1 + scalar_cost(task)) != 0 ||
        (s = malloc(len + 1)) == NULL)
        return NULL;
    if ((r = place(task, task->type)) == NULL) {
        free(s);
        return NULL;
    }
    memcpy(s, str, len);
    s[len] = '\0';
    r->str = s;
    r->len = len;
    return r;
}

static void *create_array(const redisReadTask *task, int elements)
{
    size_t n = elements > 0 ? (size_t)elements : 0;
    block_t *b;
    size_t i;

    /* The header's count comes from outside: checked before memory is
     * reserved. No reply of ours comes near it (a batch is at most a few
     * thousand ops); over it, hiredis fails the connection. */
    if (n > RLS_REDIS_REPLY_MAX_ELEMENTS ||
        charge(task, sizeof(block_t) + n * (sizeof(redisReply *) +
                                            sizeof(redisReply))) != 0 ||
        (b = malloc(sizeof(block_t) +
                    n * (sizeof(redisReply *) + sizeof(redisReply)))) == NULL)
        return NULL;
    memset(&b->r, 0, sizeof(b->r));
    b->r.type = REDIS_REPLY_ARRAY;
    b->r.elements = n;
    b->r.element = n > 0 ? b->ptr : NULL;
    /* Until each element is read, its slot is an empty nil, so that a
     * reply freed halfway (a protocol error) frees only what was made. */
    for (i = 0; i < n; i++) {
        b->ptr[i] = &slots_of(b)[i];
        memset(b->ptr[i], 0, sizeof(redisReply));
        b->ptr[i]->type = REDIS_REPLY_NIL;
    }
    if (task->parent != NULL) {
        block_t *p = task->parent->obj;
        p->ptr[task->idx] = &b->r;
    }
    return &b->r;
}

static void *create_integer(const redisReadTask *task, long long value)
{
    redisReply *r;

    if (charge(task, scalar_cost(task)) != 0)
        return NULL;
    if ((r = place(task, REDIS_REPLY_INTEGER)) != NULL)
        r->integer = value;
    return r;
}

static void *create_nil(const redisReadTask *task)
{
    if (charge(task, scalar_cost(task)) != 0)
        return NULL;
    return place(task, REDIS_REPLY_NIL);
}

static void free_slot(redisReply *r)
{
    if (r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_STATUS ||
        r->type == REDIS_REPLY_ERROR)
        free(r->str);
}

static void free_object(void *obj)
{
    redisReply *r = obj;
    size_t i;

    if (r == NULL)
        return;
    if (r->type != REDIS_REPLY_ARRAY) {
        free_slot(r);
        free(r);
        return;
    }
    {
        block_t *b = (block_t *)(void *)r;
        redisReply *slots = slots_of(b);
        for (i = 0; i < r->elements; i++) {
            if (b->ptr[i] == &slots[i])
                free_slot(b->ptr[i]);
            else
                free_object(b->ptr[i]);
        }
        free(b);
    }
}

redisReplyObjectFunctions rls_redis_reply_fns = {
    create_string, create_array, create_integer, create_nil, free_object};

void rls_redis_reply_cap_attach(redisReader *rd, rls_redis_reply_cap_t *cap,
                                size_t max, uint64_t *count)
{
    memset(cap, 0, sizeof(*cap));
    cap->max = max;
    cap->count = count;
    rd->fn = &rls_redis_reply_fns;
    rd->privdata = cap;
}

/* hiredis's own objects under a cap: each a reply of its own, an array
 * with its pointers. */
static redisReplyObjectFunctions *base_of(const redisReadTask *task)
{
    return ((rls_redis_reply_cap_t *)task->privdata)->base;
}

static void *wrap_string(const redisReadTask *task, char *str, size_t len)
{
    if (charge(task, sizeof(redisReply) + len + 1) != 0)
        return NULL;
    return base_of(task)->createString(task, str, len);
}

static void *wrap_array(const redisReadTask *task, int elements)
{
    size_t n = elements > 0 ? (size_t)elements : 0;

    if (charge(task, sizeof(redisReply) + n * sizeof(redisReply *)) != 0)
        return NULL;
    return base_of(task)->createArray(task, elements);
}

static void *wrap_integer(const redisReadTask *task, long long value)
{
    if (charge(task, sizeof(redisReply)) != 0)
        return NULL;
    return base_of(task)->createInteger(task, value);
}

static void *wrap_nil(const redisReadTask *task)
{
    if (charge(task, sizeof(redisReply)) != 0)
        return NULL;
    return base_of(task)->createNil(task);
}

static redisReplyObjectFunctions wrap_fns = {
    wrap_string, wrap_array, wrap_integer, wrap_nil, freeReplyObject};

void rls_redis_reply_cap_wrap(redisReader *rd, rls_redis_reply_cap_t *cap,
                              size_t max, uint64_t *count)
{
    redisReplyObjectFunctions *base = rd->fn;

    rls_redis_reply_cap_attach(rd, cap, max, count);
    cap->base = base;
    rd->fn = &wrap_fns;
}

/* The length a bulk header announces, from the n bytes at p (its digits,
 * maybe not all of them yet): what is there so far, which the whole
 * length can only exceed; SIZE_MAX past 19 digits. "-1" (nil) and
 * anything that is not a digit give 0: hiredis judges those. */
static size_t announced(const char *p, size_t n)
{
    size_t i, v = 0;

    for (i = 0; i < n && p[i] >= '0' && p[i] <= '9'; i++) {
        if (i == 19)
            return SIZE_MAX;
        v = v * 10 + (size_t)(p[i] - '0');
    }
    return v;
}

int rls_redis_reply_cap_check(rls_redis_reply_cap_t *cap, const redisReader *rd)
{
    size_t unread = rd->len - rd->pos, room, want;
    const char *p;

    if (cap->over)
        return RL_EFULL;
    if (unread > cap->max) {
        cap_over(cap);
        return RL_EFULL;
    }
    if (rd->ridx < 0)
        return 0;
    /* A line being read (a status, an error, an integer, an array's
     * header): everything unread is that line, which hiredis scans whole,
     * byte by byte, after every read until its end comes. */
    if (rd->rstack[rd->ridx].type != REDIS_REPLY_STRING) {
        if (unread <= RLS_REDIS_LINE_MAX)
            return 0;
        cap_over(cap);
        return RL_EFULL;
    }
    /* A bulk string being read: hiredis has taken its '$' and waits at
     * its length line for the whole of it. A length line is at most 22
     * bytes ("-1" or 19 digits, then CR LF). Nothing of a reply that is a
     * string alone (ridx 0) was charged yet; inside an array, what its
     * objects took so far was. */
    p = rd->buf + rd->pos;
    if (unread >= 24 && memchr(p, '\r', 24) == NULL) {
        cap_over(cap);
        return RL_EFULL;
    }
    room = rd->ridx == 0 ? cap->max : cap->max - cap->used;
    want = announced(p, unread < 21 ? unread : 21);
    if (want < room)
        return 0;
    cap_over(cap);
    return RL_EFULL;
}
