/* The batch command of the ratelimit Redis module (module.c), over an
 * abstract keyspace: the same decisions, keys and reply as the store's Lua
 * script (store/redis_script.c, which describes the arguments and the
 * reply), in C. Pure code: module.c binds it to Redis's module API, and a
 * fuzz target and the tests drive it with a keyspace of their own. */
#ifndef RLM_BATCH_H
#define RLM_BATCH_H

#include <stddef.h>
#include <stdint.h>

/* Windows per op and profiles per batch it accepts; rl-server sends at
 * most 8 windows (RL_ADMIT_WINDOWS_MAX, lib/rl_admit.h) and 16 profiles. */
#define RLM_WIN_MAX 8
#define RLM_PROFILES_MAX 64
#define RLM_APROFILES_MAX 16 /* of them "a" profiles (rl-server: 16) */
/* Keys it holds open at once: an op's, one per limit. */
#define RLM_OPEN_MAX RLM_WIN_MAX
/* The longest key it derives a stored quota's counter names from. */
#define RLM_BASE_MAX 4096
/* The largest time it takes (ms since the epoch: the clock, every expiry;
 * and the grace, a span): 2^53 - 1, below which the script's doubles are
 * exact, so that the two decide alike wherever they are given the same
 * arguments, and a stored quota's expiries (a window end plus the grace)
 * stay far from overflowing. */
#define RLM_MS_MAX INT64_C(9007199254740991)
/* A stored quota's scale lies in (0, RLM_SCALE_MAX]; rl-server sends at
 * most 1000. */
#define RLM_SCALE_MAX 1e6

/* A sliding window's log, the string the script and the module share
 * (server/store/store.h, RLS_SWL_*): a header of RLM_LOG_HDR digits (the
 * sum, 20; the offset of the first live entry, 12), then entries of
 * RLM_LOG_ENT digits (a time in ms, 14; a cost, 10). Its window is at most
 * 366 days. */
#define RLM_LOG_HDR 32
#define RLM_LOG_ENT 24
#define RLM_LOG_WINDOW_MAX INT64_C(31622400000)

/* rlm_batch's flags. */
#define RLM_CLUSTER 1 /* Redis Cluster: keys beyond KEYS stay in their slot */

/* rlm_batch's results. */
#define RLM_OK 0
#define RLM_LATE 1   /* after the deadline: nothing read, written or put */
#define RLM_EARGS -1 /* malformed arguments: nothing read, written or put */
/* With RLM_CLUSTER, an op with a stored quota whose counters could hash to
 * another slot than its KEYS (no hash tag): nothing read, written or put. */
#define RLM_ECROSSSLOT -2

/* What the keyspace says of a value. */
#define RLM_VAL_OK 0
#define RLM_VAL_WRONGTYPE 1 /* not a string (a counter) / not a hash */
#define RLM_VAL_NOTINT 2    /* a string that is not a 64-bit integer */

/* Redis's error texts for those, as a script's redis.pcall reports them. */
#define RLM_ERR_WRONGTYPE                                                      \
    "WRONGTYPE Operation against a key holding the wrong kind of value"
#define RLM_ERR_NOTINT "ERR value is not an integer or out of range"
#define RLM_ERR_OVERFLOW "ERR increment or decrement would overflow"

typedef struct rlm_io_s {
    /* Opens the counter KEYS[key] (0-based), or, when name is not NULL,
     * the counter named by len bytes at name, for reading and writing;
     * NULL if it cannot. At most RLM_OPEN_MAX are open at once. */
    void *(*open)(void *env, size_t key, const char *name, size_t len);
    /* The counter's value into *v and whether it exists (a missing one
     * reads 0); RLM_VAL_OK, _WRONGTYPE or _NOTINT. */
    int (*get)(void *env, void *h, int64_t *v, int *exists);
    /* The counter's value becomes v; with expire_ms > 0 (absolute, ms,
     * below 2^55: a time of at most RLM_MS_MAX plus a grace or a span of
     * at most that) its expiry becomes that, else it keeps its own. Every
     * counter it creates gets an expiry. */
    void (*write)(void *env, void *h, int64_t v, int64_t expire_ms);
    /* The same with the value n bytes of text at s (a
     * sliding-window-counter's state: digits and ':', at most 72). */
    void (*wtext)(void *env, void *h, const char *s, size_t n,
                  int64_t expire_ms);
    void (*del)(void *env, void *h);
    void (*close)(void *env, void *h);
    /* Field ARGV[field] of the hash KEYS[key]: RLM_VAL_OK with the value
     * in *s and *len (*s NULL when there is none; else NUL after len
     * bytes), or RLM_VAL_WRONGTYPE. *s stays valid until the next call. */
    int (*quota)(void *env, size_t key, size_t field, const char **s,
                 size_t *len);
    /* The reply: begin, then its elements. */
    void (*begin)(void *env);
    void (*put_int)(void *env, int64_t v);
    void (*put_str)(void *env, const char *s, size_t len);
    /* A sliding window's log, on a key open for writing: sget gives its
     * string (*s NULL when missing), valid until the next sset, sappend or
     * close, or RLM_VAL_WRONGTYPE when it is not a string. sset makes it
     * hdr (RLM_LOG_HDR bytes), then blen bytes at body (which may lie in
     * the string sget gave), then ent (RLM_LOG_ENT bytes); sappend appends
     * ent and overwrites the first RLM_LOG_HDR bytes with hdr. Both set
     * its expiry to expire_ms (> 0, absolute). */
    int (*sget)(void *env, void *h, const char **s, size_t *len);
    void (*sset)(void *env, void *h, const char *hdr, const char *body,
                 size_t blen, const char *ent, int64_t expire_ms);
    void (*sappend)(void *env, void *h, const char *hdr, const char *ent,
                    int64_t expire_ms);
} rlm_io_t;

typedef struct rlm_args_s {
    const char *const *kv; /* KEYS */
    const size_t *kl;
    size_t nkeys;
    const char *const *av; /* ARGV */
    const size_t *al;
    size_t nargs;
} rlm_args_t;

/* Runs one batch: checks every argument first (RLM_EARGS or
 * RLM_ECROSSSLOT, having done nothing), then the deadline ARGV[1] against
 * clock_ms (skipped when clock_ms < 0: a replica or a reload replays what
 * its master decided), then decides op after op through io. Arguments out
 * of range are malformed: a deadline, clock or grace below 0 or above
 * RLM_MS_MAX, an expiry below 1 or above it, a negative limit, a cost
 * below 1, costs summing past 2^63 - 1, a scale outside (0,
 * RLM_SCALE_MAX]; in an op of other algorithms ("a"), besides, a limit
 * or a burst below 1, a weight outside 1..65536, an interval below 1 us
 * or a burst x interval past RL_GCRA_CAP_MAX_US (lib/rl_admit.h), a
 * sliding window's limit past RL_SWL_LIMIT_MAX or its window outside 1 ms
 * to RLM_LOG_WINDOW_MAX, the same key twice. flags: RLM_CLUSTER or 0. With
 * refuse not NULL every op fails with that error text (Redis out of memory) and
 * no key is touched. *nput gets the number of elements put. */
int rlm_batch(const rlm_io_t *io, void *env, const rlm_args_t *a,
              int64_t clock_ms, unsigned flags, const char *refuse,
              size_t *nput);

/* Reads a whole decimal int64 (an optional '-', no leading zeros, no
 * sign or space elsewhere), as Redis reads a counter; 0 on success. */
int rlm_parse_i64(const char *s, size_t len, int64_t *v);

/* Writes v's decimal digits (and '-') to end there; returns where they
 * start (at most 20 bytes before end). Not snprintf: the module writes
 * a number or three per decision. */
char *rlm_i64_text(int64_t v, char *end);

#endif
