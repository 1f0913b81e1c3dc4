/* Reply objects for the store's connections, allocated as few times as
 * can be; see redis_reply_alloc.h. */
#include <stdlib.h>
#include <string.h>

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
    char *s = malloc(len + 1);
    redisReply *r;

    if (s == NULL)
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
    redisReply *r = place(task, REDIS_REPLY_INTEGER);

    if (r != NULL)
        r->integer = value;
    return r;
}

static void *create_nil(const redisReadTask *task)
{
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
