/* The store interface: where counters live.
 *
 * The batcher hands a store one batch at a time: an array of operations,
 * one per (rule, caller) of the batch; requests that share one were already
 * coalesced into it, in arrival order. An op names up to
 * RL_ADMIT_WINDOWS_MAX fixed windows, each a counter
 * "<key>:<window_s>:<index>" with its limit, and lists the costs of its
 * requests. The store decides them atomically: in arrival order, a request
 * is admitted only when every window has room for its cost, and a refused
 * request consumes nothing (see rl_admit.h). It adds the admitted costs to
 * every window, makes sure each counter expires at its expire_at_ms (an
 * absolute time on the store's clock), and reports each window's count
 * before the batch. The batcher replays the same decisions from those
 * counts to answer every request.
 *
 * A rule's op may name a quota: the Redis store then reads the caller's
 * stored limits ("<tag>:q", field = the rule) in the same atomic step and,
 * when there are some, decides against those windows instead, reporting
 * them in quota_win.
 *
 * Three stores implement it: memory (store/memory.c, the embedded
 * default), Redis (store/redis.c) and Redis Cluster (store/redis_cluster.c).
 * All run on the server's libuv loop and never block. */
#ifndef RLS_STORE_H
#define RLS_STORE_H

#include <stddef.h>
#include <stdint.h>

#include <uv.h>

#include "base/prom_hist.h"
#include "rl_admit.h"
#include "rl_buf.h"
#include "rl_validate.h"
#include "store/reserve.h"
#include "store/usage.h"

typedef struct rls_store_s rls_store_t;

/* One limit of an op (an op window): a fixed window
 * (RL_ALGO_FIXED, one counter "<key>:<window_s>:<index>", or ":p<index>"
 * for windows staggered per caller), a sliding-window-counter
 * (RL_ALGO_SLIDING_COUNTER: in the Redis stores one key "<key>:<window_s>:s",
 * ":sp" when staggered, holding
 * "<index>:<count>:<previous>", the window index the counts are of, its
 * count and the previous window's; in the memory store a counter per
 * window, ":s<index>" and ":sp<index>"), a gcra (RL_ALGO_GCRA, one TAT in
 * microseconds,
 * "<key>:<window_s>:g") or a sliding window (RL_ALGO_SLIDING_LOG, one log,
 * "<key>:<window_s>:l", whose layout the Redis stores share: RLS_SWL_*
 * below). Each algorithm has its own keys, so a reload that
 * changes a limit's algorithm starts it afresh and never misreads another's
 * state. */
typedef struct rls_op_window_s {
    /* Set by the batcher. */
    uint32_t window_s;     /* fixed, swc: the window; gcra: the period */
    uint64_t limit;        /* > 0; gcra: the burst */
    uint64_t index;        /* fixed, swc: window index at the batch's clock */
    uint64_t expire_at_ms; /* fixed: window end + grace (+ spread); swc:
                              the next window's end + grace (+ spread);
                              gcra: the grace alone, the store adds the new
                              TAT */
    /* Set by the store. */
    int64_t before;        /* the counter before this batch (gcra: TAT) */
    int64_t before2;       /* swc: the previous window's counter */
    /* Set by the batcher; 0 for a plain fixed window. */
    uint8_t algo;          /* RL_ALGO_* */
    uint8_t phased;        /* windows staggered per caller */
    uint32_t weight;       /* swc: the previous window's share now */
    uint64_t t_us;         /* gcra: the emission interval */
    uint64_t reset_ms;     /* fixed, swc: until that window ends, >= 1 */
    /* swl, set by the store: before is the log's sum in (now - W, now],
     * before2 its newest entry's time (ms, 0 when empty), and old_t/old_c
     * its oldest entries (times in ms, oldest first), as many as cover
     * max(sum - limit, 0) + the op's largest cost, at most RL_SWL_PREFIX
     * (rl_admit.h). */
    uint64_t old_t[RL_SWL_PREFIX];
    uint64_t old_c[RL_SWL_PREFIX];
    uint32_t nold;
    /* Set by the batcher, never read by a store: the limit (gcra: the
     * burst) the answers compare with when it is not `limit`, which the
     * store decides with (rls_spec_t.counting: ENVOY raises `limit` out
     * of reach, PEEK makes it 1 with a cost of 2); 0: `limit`. */
    uint64_t answer_limit;
    /* A group's limit (an op of several levels, rls_batcher_add_group:
     * every level's limits in one op, so that every store decides them
     * all or nothing as it decides one rule's): the op key of this
     * limit's level when it is not the op's own (NULL: op->key), whose
     * counters are named after it as rls_wkey says, the length of its tag
     * "<prefix>{<caller>}" (the memory store's stripe), and the level's
     * index in the group. Set by the batcher; a store reads base and
     * base_len through rls_wkey and rls_op_key_max. */
    const char *base;
    size_t base_len;
    size_t base_tag_len;
    uint32_t level;
} rls_op_window_t;

typedef struct rls_op_s {
    /* Set by the batcher; untouched by the store. */
    const char *key;       /* counter keys are "<key>:<window_s>:<index>" */
    size_t key_len;        /* NUL-terminated */
    size_t tag_len;        /* key[0, tag_len) is "<prefix>{<caller>}" */
    const char *quota;     /* the rule whose stored quota applies, or NULL */
    size_t quota_len;
    double scale;          /* multiplies a stored quota's limits */
    uint64_t now_ms;       /* the batch's clock reading, the same for every
                              op: the store decides at this instant (its
                              script's "now"), so the batcher's replay of
                              a gcra or a sliding-window-counter sees what
                              the store saw */
    rls_op_window_t *win;
    uint32_t nwin;
    const uint32_t *costs; /* the requests' costs, in arrival order */
    uint32_t ncosts;       /* >= 1 */
    uint32_t equal_cost;   /* every cost equals this, or 0 */
    /* Set by the store before the callback. */
    uint64_t admitted;     /* requests admitted */
    const rls_op_window_t
        *quota_win;        /* a stored quota's windows, decided instead of */
    uint32_t nquota_win;   /* win; valid during the callback only */
    int err;               /* 0, or an RL_E* code for this op */
} rls_op_t;

/* Fires exactly once per submitted batch. status is 0 when every op has its
 * counts or its own err (that op alone failed: a counter that would
 * overflow, a memory store that is full), or RL_ESTORE / RL_ETIMEDOUT /
 * RL_ESHUTDOWN when the store could not answer, in which case every op's
 * err is set too. The ops array is the caller's again once the callback
 * returns. */
typedef void (*rls_store_cb)(void *data, rls_op_t *ops, size_t n, int status);
/* What a store failure was, for rl_store_errors_total{kind}. The Redis
 * kinds come from the prefix of Redis's error reply; a bounded set, so
 * anything else is "other". */
enum {
    RLS_SERR_TIMEOUT,     /* no answer within the timeout */
    RLS_SERR_UNAVAILABLE, /* not connected, or too much in flight */
    RLS_SERR_OOM,         /* OOM: Redis at maxmemory with noeviction */
    RLS_SERR_BUSY,        /* BUSY: another script runs too long */
    RLS_SERR_READONLY,    /* READONLY: connected to a replica */
    RLS_SERR_NOSCRIPT,    /* NOSCRIPT even after resending the script */
    RLS_SERR_LOADING,     /* LOADING: Redis is loading its dataset */
    RLS_SERR_OVERFLOW,    /* a counter would pass 2^63 */
    RLS_SERR_OTHER,
    RLS_SERR_MAX
};

/* The kind's label value, e.g. "oom". */
static inline const char *rls_store_err_name(int kind)
{
    static const char *const names[RLS_SERR_MAX] = {
        "timeout",  "unavailable", "oom",      "busy", "readonly",
        "noscript", "loading",     "overflow", "other"};

    return kind >= 0 && kind < RLS_SERR_MAX ? names[kind] : "other";
}

/* Longest op key: prefix, braces, caller, ":r:" and a rule name. */
#define RLS_OPKEY_MAX (64 + RL_KEY_MAX + RL_RULE_MAX + 8)

/* A sliding window's log in Redis, one string the script and the module
 * both read and write: a header of RLS_SWL_HDR bytes, the sum of the live
 * entries in 20 decimal digits then the offset of the first live entry in
 * 12, then entries of RLS_SWL_ENT bytes each, oldest first, a time (ms)
 * in 14 digits and a cost in 10, all zero-padded. Entries before the
 * offset have left the window; the writer drops them when they are half
 * the string. Decimal so that the script reads it with tonumber and
 * redis-cli shows it. */
#define RLS_SWL_HDR 32
#define RLS_SWL_ENT 24

/* Which key of a sliding-window-counter rls_wkey names: the Redis stores'
 * one key (RLS_WKEY_STATE), or the memory store's counter of the current
 * or the previous window. The other algorithms have one key whatever
 * this says. */
#define RLS_WKEY_STATE 0
#define RLS_WKEY_CUR 1
#define RLS_WKEY_PREV 2

/* Formats the key of limit w of op into dst (RLS_WKEY_SIZE(op) bytes),
 * NUL-terminated; returns its length. It is named after w->base when set
 * (a group's level), else after op->key. */
#define RLS_WKEY_SIZE(op) (rls_op_key_max(op) + 36)
size_t rls_wkey(const rls_op_t *op, const rls_op_window_t *w, int which,
                char *dst);

/* The longest op key among op's limits (its own, and a group's levels'):
 * what a store sizes its key buffers by. */
static inline size_t rls_op_key_max(const rls_op_t *op)
{
    size_t m = op->key_len;
    uint32_t j;

    for (j = 0; j < op->nwin; j++)
        if (op->win[j].base != NULL && op->win[j].base_len > m)
            m = op->win[j].base_len;
    return m;
}

/* 1 when op is a group's (some limit names its own level's key). */
static inline int rls_op_group(const rls_op_t *op)
{
    uint32_t j;

    for (j = 0; j < op->nwin; j++)
        if (op->win[j].base != NULL)
            return 1;
    return 0;
}

/* The key of op's plain fixed window of window_s at index. */
static inline size_t rls_wkey_fixed(const rls_op_t *op, uint32_t window_s,
                                    uint64_t index, char *dst)
{
    rls_op_window_t w = {0};

    w.window_s = window_s;
    w.index = index;
    return rls_wkey(op, &w, RLS_WKEY_STATE, dst);
}

/* How many counts a Redis store reports for limit w before an op (2 for a
 * sliding-window-counter: the current and previous windows', else 1; a
 * sliding window's log reports its own way). */
static inline uint32_t rls_op_window_counts(const rls_op_window_t *w)
{
    return w->algo == RL_ALGO_SLIDING_COUNTER ? 2 : 1;
}

/* Loads limit w of an op from what the store reported (before, before2)
 * at now_ms (the op's): what the batcher replays and the memory store
 * decides on. A stored quota's windows (quota_win) need reset_ms set first. */
void rls_op_window_load(const rls_op_window_t *w, uint64_t now_ms,
                        rl_admit_win_t *a);

/* The largest cost among op's requests (a sliding window's log reports
 * the entries that cover it). */
uint64_t rls_op_max_cost(const rls_op_t *op);

/* 1 when every limit of op is a plain fixed window (any phase): the ops
 * the script's fast path, its INCRBY path for stored quotas and the
 * refusal cache take. */
int rls_op_fixed(const rls_op_t *op);

typedef struct rls_store_stats_s {
    uint64_t batches;      /* batches submitted */
    uint64_t ops;          /* ops submitted */
    uint64_t errors;       /* batches failed (any reason) */
    /* Failures by kind: a batch failed whole counts once, an op failed on
     * its own (a key Redis refused) counts once. A store that leaves this
     * all zero has its `errors` shown as "other". */
    uint64_t errors_kind[RLS_SERR_MAX];
    uint64_t restarts;     /* Redis restarts seen (run_id changed) */
    uint64_t bad_quotas;   /* stored quotas that did not parse (ignored) */
    uint64_t timeouts;     /* batches failed by timeout */
    uint64_t reconnects;   /* successful (re)connections after the first */
    uint64_t master_switches; /* Sentinel: the master moved (redis.c) */
    /* Connections dropped because a reply went past its cap
     * (redis_reply_alloc.h): a data node's, a sentinel's. */
    uint64_t reply_over_cap;
    uint64_t sentinel_reply_over_cap;
    uint64_t rtt_us_last;  /* round trip of the last answered batch */
    rls_hist_t rtt_us;     /* round trips of answered batches */
    /* The memory store's budget (--memory-max); all 0 in the Redis store. */
    uint64_t mem_bytes;    /* held by counters, their table and groups */
    uint64_t mem_max;      /* the cap on mem_bytes */
    uint64_t mem_refused;  /* ops refused: a new counter would not fit */
    int mem_full;          /* 1 while new counters are refused */
    /* Why up() is 0, for /healthz, when the store can say more than
     * "store unavailable" (the cluster store: which share of slots has no
     * reachable master); "" otherwise. */
    char down_text[96];
    /* The Redis store: 1 while its batches go to the ratelimit module
     * (RL.BATCH) rather than the Lua script. */
    int redis_module;
} rls_store_stats_t;

typedef struct rls_store_vtbl_s {
    /* Submits a batch of n >= 1 ops. ops must stay valid until cb fires.
     * The callback may fire before submit returns (the memory store does,
     * and so does a Redis store that is down). Never fails: trouble is
     * reported through the callback. */
    void (*submit)(rls_store_t *s, rls_op_t *ops, size_t n, rls_store_cb cb,
                   void *data);
    /* The store's clock, ms since the Unix epoch. Cheap: called once per
     * batch. Never goes backwards. */
    uint64_t (*now_ms)(rls_store_t *s);
    /* 1 while the store is believed able to answer, else 0. */
    int (*up)(rls_store_t *s);
    /* Fails whatever is in flight (its callbacks fire with RL_ESHUTDOWN),
     * closes every handle, frees the store, then calls done(arg) from a close
     * callback. The store must not be used afterwards. */
    void (*close)(rls_store_t *s, void (*done)(void *arg), void *arg);
    /* Optional (NULL in the memory store): sends one command, argv with
     * lengths, on the store's connection, beside the batches. cb gets the
     * reply (a hiredis redisReply, valid during the call) or NULL when the
     * connection failed first; exactly once, unless this returns an error
     * (RL_ESTORE: not connected). */
    int (*command)(rls_store_t *s, int argc, const char **argv,
                   const size_t *lens, void (*cb)(void *data, void *reply),
                   void *data);
    /* Optional: appends the store's own /metrics series (the cluster
     * store's per-node ones) to out. Returns 0 or RL_EFULL / RL_ENOMEM. */
    int (*metrics)(const rls_store_t *s, rl_buf_t *out);
    /* Optional: runs a reservation or lease operation itself (the memory
     * store); NULL: rls_store_reserve sends store/reserve.lua through
     * command(). */
    void (*xop)(rls_store_t *s, rls_reserve_op_t *x, rls_reserve_op_cb cb,
                void *data);
    /* Optional: command(), written with the loop's next write instead of
     * at once, so that the commands of one loop iteration (many xops)
     * leave in one write and reach Redis in one read. What is unwritten
     * when the store closes is failed, not sent: not for goodbyes. */
    int (*command_later)(rls_store_t *s, int argc, const char **argv,
                         const size_t *lens,
                         void (*cb)(void *data, void *reply), void *data);
    /* Optional: runs the admin endpoint's step on one caller's keys
     * (store/usage.h, checked there) at once, setting u's answer (the
     * memory store, under the lock of their tag's stripe); NULL:
     * rls_store_usage sends store/usage.lua through command(). */
    void (*usage)(rls_store_t *s, rls_usage_op_t *u);
} rls_store_vtbl_t;

/* A store that decides a batch in parts (the cluster store: one part per
 * master) may report a part early, before the batch's callback: ops[idx[0
 * .. k)] then have their counts or their err, and their requests are
 * answered at once; the batch's callback answers the rest. Set by the
 * batcher (rls_batcher_init); NULL: the store reports whole batches only.
 * data is the batch's, as passed to submit. */
typedef void (*rls_store_part_cb)(void *data, rls_op_t *ops,
                                  const uint32_t *idx, size_t k);

struct rls_store_s {
    const rls_store_vtbl_t *v;
    rls_store_stats_t stats;
    rls_store_part_cb part;
};

#endif
