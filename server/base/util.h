/* Small helpers shared by the server's modules. */
#ifndef RLS_UTIL_H
#define RLS_UTIL_H

#include <stddef.h>
#include <stdint.h>

#include "rl_clock.h"
#include "rl_hash.h"

/* A fresh hash key from /dev/urandom (or, failing that, from the clock and
 * pid: still per process, just less secret). */
void rls_random_key(rl_hash_key_t *k);

/* Intrusive doubly-linked list, as libuv's QUEUE: a node embedded in each
 * element, a sentinel node as the head. */
typedef struct rls_list_s {
    struct rls_list_s *prev, *next;
} rls_list_t;

static inline void rls_list_init(rls_list_t *h)
{
    h->prev = h->next = h;
}

static inline int rls_list_empty(const rls_list_t *h)
{
    return h->next == h;
}

static inline void rls_list_push(rls_list_t *h, rls_list_t *n)
{
    n->prev = h->prev;
    n->next = h;
    h->prev->next = n;
    h->prev = n;
}

/* Unlinks n and leaves it pointing at itself, so removing twice is safe and
 * rls_list_linked() tells whether it is on a list. */
static inline void rls_list_remove(rls_list_t *n)
{
    n->prev->next = n->next;
    n->next->prev = n->prev;
    n->prev = n->next = n;
}

static inline int rls_list_linked(const rls_list_t *n)
{
    return n->next != n;
}

#define RLS_CONTAINER_OF(ptr, type, field)                                    \
    ((type *)((char *)(ptr)-offsetof(type, field)))

#endif
