/* The Redis store's one command per batch (store_redis_script.c): a Lua
 * script that adds each op's increment to its counter, gives a counter it
 * created its absolute expiry, and answers with every count. Pure code, no
 * I/O: the store (redis.c) sends what this formats and hands back the
 * reply. */
#ifndef RLS_REDIS_SCRIPT_H
#define RLS_REDIS_SCRIPT_H

#include <stddef.h>
#include <stdint.h>

#include <hiredis/hiredis.h>

#include "rl_error.h"
#include "store/store.h"

/* The script's source, NUL-terminated; its arguments and reply are
 * described in redis_script.c. */
extern const char rls_redis_script[];

/* The script for a Redis Cluster master: flagged allow-cross-slot-keys,
 * and taking its keys either declared (one slot) or, with numkeys 0, as
 * ARGV[1] = their number followed by the keys. *len gets its length. */
const char *rls_redis_cluster_script(size_t *len);

/* op->err of an op whose keys this master does not serve (reply entry
 * eNONLOCAL or eCLUSTERDOWN): nothing of it ran; the cluster store sends it
 * again on its own. */
#define RLS_REDIS_ENOTHERE RL_EAGAIN

/* Classifies a Redis error text (len bytes at s) by its leading
 * upper-case word: RLS_SERR_OOM, _BUSY, _READONLY, _NOSCRIPT, _LOADING,
 * _OVERFLOW (also any text mentioning "overflow"), else _OTHER. */
int rls_redis_err_kind(const char *s, size_t len);

/* What the refused ops of one reply were. */
typedef struct rls_redis_errs_s {
    uint64_t by_kind[RLS_SERR_MAX]; /* refused ops by kind */
    size_t failed;                  /* refused ops */
    const char *text;               /* first refusal's text, in the reply */
    size_t text_len;
    size_t bad_quotas; /* stored quotas that did not parse */
    size_t elsewhere;  /* ops with RLS_REDIS_ENOTHERE (not failed) */
} rls_redis_errs_t;

/* rls_redis_parse_reply: the script ran after the batch's deadline. */
#define RLS_REDIS_LATE 1

/* A command buffer that grows to the largest command and then stays, so
 * steady traffic formats without allocating. Zero-initialise; free p. */
typedef struct rls_cmdbuf_s {
    char *p;
    size_t cap;
} rls_cmdbuf_t;

/* Formats ops[0..n) as one RESP command into buf->p: EVALSHA with `sha` (40
 * hex digits), or, when sha is NULL, EVAL carrying the script (after
 * NOSCRIPT; it also puts the script back in Redis's cache). now_ms and
 * grace_ms place a stored quota's windows; deadline_ms is the last moment,
 * on Redis's clock, at which the script may still count. Returns the
 * command's length, or 0 if the buffer could not grow (buf is unchanged). */
size_t rls_redis_encode(rls_cmdbuf_t *buf, const char *sha, const rls_op_t *ops,
                        size_t n, uint64_t now_ms, uint64_t grace_ms,
                        uint64_t deadline_ms);

/* The same, for a Redis Cluster master: the script text for EVAL (sha
 * NULL), and with undeclared the keys go in ARGV behind a numkeys of 0
 * (see rls_redis_cluster_script). */
size_t rls_redis_encode_ex(rls_cmdbuf_t *buf, const char *sha,
                           const char *script, size_t script_len,
                           int undeclared, const rls_op_t *ops, size_t n,
                           uint64_t now_ms, uint64_t grace_ms,
                           uint64_t deadline_ms);

/* The same for the ratelimit Redis module (server/redis_module):
 * "RL.BATCH numkeys key... arg...", the script's keys and arguments and
 * the same reply, decided in C without Lua. */
size_t rls_redis_encode_module(rls_cmdbuf_t *buf, const rls_op_t *ops,
                               size_t n, uint64_t now_ms, uint64_t grace_ms,
                               uint64_t deadline_ms);

/* The module's command name, and the format version (its RL.VERSION)
 * this encoder and rls_redis_parse_reply speak. */
extern const char RLS_REDIS_MODULE_CMD[];
#define RLS_REDIS_MODULE_VERSION 1

/* Reads the script's reply into each op's admitted, window counts
 * (win[].before) and err (0, or RL_ESTORE for an "e" entry), and what was
 * refused into *errs (its text points into rep). An op decided under the
 * caller's stored quota gets qwin/nqwin pointing into qwin
 * (RL_ADMIT_WINDOWS_MAX entries per op, the caller's). Returns 0;
 * RLS_REDIS_LATE for "late" (ops untouched); or RL_EINVAL unless the reply
 * holds exactly n well-formed entries, in which case ops may be partly written.
 */
int rls_redis_parse_reply(const redisReply *rep, rls_op_t *ops, size_t n,
                          rls_wop_t *qwin, rls_redis_errs_t *errs);

#endif
