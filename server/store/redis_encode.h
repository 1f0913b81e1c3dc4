/* The Redis store's batch as one RESP command (redis_encode.c): EVALSHA
 * or EVAL of the script, or the module's RL.BATCH, with the batch's keys
 * and arguments as redis_script.lua describes them. Pure code, no I/O: the
 * store (redis.c) hands what this writes to hiredis. */
#ifndef RLS_REDIS_ENCODE_H
#define RLS_REDIS_ENCODE_H

#include <stddef.h>
#include <stdint.h>

#include "store/store.h"

/* A command buffer that grows to the largest command and then stays, so
 * steady traffic formats without allocating. Zero-initialise; free p. */
typedef struct rls_cmdbuf_s {
    char *p;
    size_t cap;
    size_t len; /* the command last written: p[0, len) */
} rls_cmdbuf_t;

/* Writes ops[0..n) as one RESP command into buf: EVALSHA with `sha` (40
 * hex digits), or, when sha is NULL, EVAL carrying the script (after
 * NOSCRIPT; it also puts the script back in Redis's cache). now_ms and
 * grace_ms place a stored quota's windows; deadline_ms is the last moment,
 * on Redis's clock, at which the script may still count. Returns 0, or
 * RL_ENOMEM if the buffer could not grow (buf is then unchanged). */
int rls_redis_encode(rls_cmdbuf_t *buf, const char *sha, const rls_op_t *ops,
                     size_t n, uint64_t now_ms, uint64_t grace_ms,
                     uint64_t deadline_ms);

/* The same with another script's text for EVAL (the cluster script), and,
 * with undeclared, the keys in ARGV behind a numkeys of 0 (see
 * rls_redis_cluster_script). */
int rls_redis_encode_ex(rls_cmdbuf_t *buf, const char *sha, const char *script,
                        size_t script_len, int undeclared, const rls_op_t *ops,
                        size_t n, uint64_t now_ms, uint64_t grace_ms,
                        uint64_t deadline_ms);

/* The same for the ratelimit Redis module (server/redis_module):
 * "RL.BATCH numkeys key... arg...", the script's keys and arguments. */
int rls_redis_encode_module(rls_cmdbuf_t *buf, const rls_op_t *ops, size_t n,
                            uint64_t now_ms, uint64_t grace_ms,
                            uint64_t deadline_ms);

#endif
