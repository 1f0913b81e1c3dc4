/* The allocator of reply objects for the store's hiredis connections
 * (redis_reply_alloc.c): the same redisReply trees hiredis makes, but an
 * array and its elements are one allocation (a string element's bytes are
 * a second one). The script answers a batch with one integer per count
 * (redis_script.lua), and hiredis's own objects would cost a malloc and a
 * free per count.
 *
 * Install with `ac->c.reader->fn = &rls_redis_reply_fns` before the first
 * reply; replies are then freed by hiredis through it, never with
 * freeReplyObject. */
#ifndef RLS_REDIS_REPLY_ALLOC_H
#define RLS_REDIS_REPLY_ALLOC_H

#include <hiredis/hiredis.h>

/* Arrays announcing more elements fail the reply (hiredis: "Out of
 * memory", the connection is dropped) before anything is reserved. */
#define RLS_REDIS_REPLY_MAX_ELEMENTS (1u << 20)

extern redisReplyObjectFunctions rls_redis_reply_fns;

#endif
