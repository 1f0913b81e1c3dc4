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

#include <stddef.h>
#include <stdint.h>

/* Arrays announcing more elements fail the reply (hiredis: "Out of
 * memory", the connection is dropped) before anything is reserved. */
#define RLS_REDIS_REPLY_MAX_ELEMENTS (1u << 20)

extern redisReplyObjectFunctions rls_redis_reply_fns;

/* A cap on what one reply may make rl-server hold (hiredis 0.14 has
 * none: a "$4000000000" header is buffered for as long as the bytes keep
 * coming). Two budgets of max bytes each, per reply being read:
 *   - the reader's unread bytes (a bulk string is buffered whole before
 *     it becomes an object): rls_redis_reply_cap_check, after each read;
 *   - the objects built so far (an array's elements, strings' copies):
 *     counted by rls_redis_reply_fns as it allocates, and an allocation
 *     past the cap is refused before it is made (hiredis then fails the
 *     reply with "Out of memory", which drops the connection).
 * A "$N" header for a string that cannot fit is refused as soon as the
 * header is read, before its bytes arrive; a line is refused past
 * RLS_REDIS_LINE_MAX. With the reader's privdata
 * NULL (tests, fuzzing) only RLS_REDIS_REPLY_MAX_ELEMENTS applies. */
typedef struct rls_redis_reply_cap_s {
    size_t max;      /* bytes, for each of the two budgets */
    size_t used;     /* objects of the reply being read, in bytes */
    int over;        /* a reply went past max: the connection is failed */
    uint64_t *count; /* incremented once, when over is set; may be NULL */
    /* rls_redis_reply_cap_wrap: hiredis's own functions, which make the
     * objects; NULL with rls_redis_reply_fns. */
    redisReplyObjectFunctions *base;
} rls_redis_reply_cap_t;

/* The data nodes' cap. The largest reply rl-server asks a data node for
 * is a batch's (RLS_BATCH_MAX ops of up to RL_ADMIT_WINDOWS_MAX limits,
 * each sliding-window log's state 3 + 2 x RL_SWL_PREFIX integers: 91,136
 * integers, 5.1 MB of objects, 2.1 MB on the wire;
 * test_redis_cap builds it); CLUSTER SHARDS of any slot map is smaller.
 * 16 MiB leaves three times that. */
#define RLS_REDIS_CAP_NODE ((size_t)16 << 20)
/* The sentinels': their replies are an address, a confirmation and
 * +switch-master messages, well under 1 KiB. */
#define RLS_REDIS_CAP_SENTINEL ((size_t)64 << 10)

/* The longest line (a status, an error, an integer, an array's header) a
 * reply may have; Redis's longest are error texts of a few hundred bytes.
 * hiredis looks for a line's end from its start after every read, so a
 * line that never ends costs time as the square of its length. */
#define RLS_REDIS_LINE_MAX ((size_t)64 << 10)

/* Makes rd build replies with rls_redis_reply_fns under cap (max bytes;
 * count NULL or where a reply over it is counted). cap must outlive rd's
 * use; install before the first reply. */
void rls_redis_reply_cap_attach(redisReader *rd, rls_redis_reply_cap_t *cap,
                                size_t max, uint64_t *count);

/* The same cap, but rd keeps hiredis's own reply objects (freed with
 * freeReplyObject, as the blocking connection's callers do), charged at
 * what hiredis allocates for them. rd must still have hiredis's default
 * functions. */
void rls_redis_reply_cap_wrap(redisReader *rd, rls_redis_reply_cap_t *cap,
                              size_t max, uint64_t *count);

/* After bytes were fed to rd and its replies taken: 0, or RL_EFULL when
 * the reply being read went past the cap (its unread bytes, or the
 * length its "$N" header announces, does not fit; a line is longer than
 * RLS_REDIS_LINE_MAX or a length line than 22 bytes; or an allocation
 * was refused), in which case the connection must be failed. O(1): looks
 * at the header of the string being read (at most 24 bytes), never the
 * rest of the buffer. */
int rls_redis_reply_cap_check(rls_redis_reply_cap_t *cap,
                              const redisReader *rd);

#endif
