/* The Redis store's one command per batch (store_redis_script.c): a Lua
 * script that adds each op's increment to its counter, gives a counter it
 * created its absolute expiry, and answers with every count. Pure code, no
 * I/O: the store (redis.c) sends what this formats and hands back the
 * reply. */
#ifndef RLS_REDIS_SCRIPT_H
#define RLS_REDIS_SCRIPT_H

#include <stddef.h>

#include "store/store.h"

/* The script's source, NUL-terminated. KEYS[i] is op i's key, ARGV[2i-1] its
 * increment and ARGV[2i] its expiry (ms since the epoch, Redis clock). The
 * reply is one string: op i's count, or "e" if Redis refused that op (the
 * key holds a non-integer or the sum overflows), separated by one space. */
extern const char rls_redis_script[];

/* A command buffer that grows to the largest command and then stays, so
 * steady traffic formats without allocating. Zero-initialise; free p. */
typedef struct rls_cmdbuf_s {
    char *p;
    size_t cap;
} rls_cmdbuf_t;

/* Formats ops[0..n) as one RESP command into buf->p: EVALSHA with `sha` (40
 * hex digits), or, when sha is NULL, EVAL carrying the script (after
 * NOSCRIPT; it also puts the script back in Redis's cache). Returns the
 * command's length, or 0 if the buffer could not grow (buf is unchanged). */
size_t rls_redis_encode(rls_cmdbuf_t *buf, const char *sha, const rls_op_t *ops,
                        size_t n);

/* Reads the script's reply (len bytes at p, not NUL-terminated) into
 * ops[i].count and ops[i].err (0, or RL_ESTORE for an "e"). Returns 0, or
 * -1 unless the reply holds exactly n well-formed entries; ops may then be
 * partly written. */
int rls_redis_parse_counts(const char *p, size_t len, rls_op_t *ops, size_t n);

#endif
