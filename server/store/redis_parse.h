/* The Redis store's batch reply, read back into the ops (redis_parse.c):
 * the script's reply, which the module gives too (redis_script.lua
 * describes it). Pure code, no I/O: the store (redis.c) hands in what
 * Redis sent, and the fuzz target (tests/fuzz/fuzz_redis_reply.c) anything
 * at all. */
#ifndef RLS_REDIS_PARSE_H
#define RLS_REDIS_PARSE_H

#include <stddef.h>
#include <stdint.h>

#include <hiredis/hiredis.h>

#include "rl_error.h"
#include "store/store.h"

/* op->err of an op whose keys this master does not serve (reply entry
 * eNONLOCAL or eCLUSTERDOWN): nothing of it ran; the cluster store sends it
 * again on its own. */
#define RLS_REDIS_ENOTHERE RL_EAGAIN

/* rls_redis_parse_reply: the script ran after the batch's deadline and
 * counted nothing. */
#define RLS_REDIS_LATE RL_ETIMEDOUT

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

/* Reads the script's reply into each op's admitted, window counts
 * (win[].before) and err (0, or RL_ESTORE for an "e" entry), and what was
 * refused into *errs (its text points into rep). An op decided under the
 * caller's stored quota gets quota_win/nquota_win pointing into quota_win
 * (RL_ADMIT_WINDOWS_MAX entries per op, the caller's; NULL when the
 * caller made no room, and then such an op does not parse). Returns 0;
 * RLS_REDIS_LATE for "late" (ops untouched); or RL_EINVAL unless the reply
 * holds exactly n well-formed entries, in which case ops may be partly
 * written. */
int rls_redis_parse_reply(const redisReply *rep, rls_op_t *ops, size_t n,
                          rls_op_window_t *quota_win, rls_redis_errs_t *errs);

#endif
