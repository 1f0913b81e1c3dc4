/* Top offenders (top.c): per rule, the callers this process refused most
 * over the last minutes, from a bounded heavy-hitter sketch per rule
 * (lib/rl_topk.h: Space-Saving, k entries whatever the callers), for
 * --admin's GET /v1/top, the instance's share of the fleet's in Redis
 * (top_publish.c, read by rl-ctl top) and the opt-in capped metric
 * (--top-metric).
 *
 * The window: time in epochs of --top-window-s seconds on the store's
 * clock, two sketches per rule, the current epoch's and the one before;
 * a refusal counts in the current one, the older is dropped as a new
 * epoch starts, and a read merges both, so it covers between one and two
 * epochs (the answer says since when).
 *
 * The loops: one set of sketches per loop of --threads (rls_top_loop_t),
 * each under its own mutex, which its loop takes for each refusal it
 * counts and a reader (the first loop: the admin listener, the
 * publisher, the metrics) for the moment it copies that loop's sketch
 * out; a read merges every loop's. No loop ever waits for another's: the
 * lock is uncontended but while a reader copies (a few microseconds, every
 * few seconds).
 *
 * What a refusal is kept under: the per-rule counters' name
 * (rls_rule_stats_t.name, as rl_rule_decisions_total labels it): a rule's
 * name; "envoy:<domain>" for an Envoy descriptor without a rule (its
 * caller the descriptor's counter key, "<domain>/<key>=<value>/...",
 * envoy/rls.c); "(inline)" for native requests' own limits; "(other)"
 * past the names the counters remember. Only refusals the caller got:
 * shadow mode's are allowed, and not counted here. */
#ifndef RLS_TOP_H
#define RLS_TOP_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "rl_buf.h"
#include "rl_topk.h"
#include "policy/runtime.h"

/* Loops that may join (loops.h's RLS_LOOPS_MAX). */
#define RLS_TOP_LOOPS_MAX 64
/* Rules a loop keeps sketches for; refusals of more are counted in
 * rl_top_refusals_dropped_total alone. */
#define RLS_TOP_RULES_MAX 1024
/* --top-metric: rules with series at most (those with most refusals). */
#define RLS_TOP_METRIC_RULES 100

typedef struct rls_top_rule_s {
    char name[RL_RULE_MAX + 1];
    uint64_t epoch[2]; /* of sk[0], sk[1] */
    int cur;           /* the current epoch's */
    rl_topk_t sk[2];
} rls_top_rule_t;

typedef struct rls_top_s rls_top_t;

typedef struct rls_top_loop_s {
    pthread_mutex_t mu;
    rls_top_t *all;
    rls_top_rule_t *rules[RLS_TOP_RULES_MAX];
    size_t nrules;
    uint64_t counted; /* refusals counted */
    uint64_t dropped; /* refusals past the rules' cap, or out of memory */
} rls_top_loop_t;

struct rls_top_s {
    uint32_t k;
    uint64_t epoch_ms;
    rl_hash_key_t hk;
    unsigned nloops; /* joined (atomic) */
    rls_top_loop_t loops[RLS_TOP_LOOPS_MAX];
};

/* Sketches of k entries (1 to RL_TOPK_K_MAX) per rule and loop, over
 * epochs of window_s seconds (>= 1). NULL: out of memory. */
rls_top_t *rls_top_new(uint32_t k, uint32_t window_s);

/* Frees t and every loop's sketches; no loop may count any more. NULL is
 * fine. */
void rls_top_free(rls_top_t *t);

/* A loop's share of t, for its decider (NULL: t NULL, or every share
 * taken). Safe from any thread. */
rls_top_loop_t *rls_top_join(rls_top_t *t);

/* Counts one refusal of caller key[0, len) under st's name at now_ms (the
 * store's clock), on loop l's sketches (l NULL: nothing). The rule's
 * sketch is made at its first refusal and found again through st->top. */
void rls_top_refused(rls_top_loop_t *l, rls_rule_stats_t *st, const char *key,
                     size_t len, uint64_t now_ms);

/* The merged top offenders of name[0, len) over every loop at now_ms:
 * at most max entries (sorted) in *out (its entries the caller's to free:
 * rl_topk_sum_free), and since when the counts run in *since_ms. A name
 * with no refusal in the window gives an empty summary. Returns 0 or
 * RL_ENOMEM. */
int rls_top_read(rls_top_t *t, const char *name, size_t len, uint64_t now_ms,
                 size_t max, rl_topk_sum_t *out, uint64_t *since_ms);

/* The names with a refusal in the window at now_ms, over every loop,
 * sorted, each once: *names (n of them, RL_RULE_MAX + 1 bytes each, NUL-
 * terminated), the caller's to free. Returns 0 or RL_ENOMEM. */
int rls_top_names(rls_top_t *t, uint64_t now_ms,
                  char (**names)[RL_RULE_MAX + 1], size_t *n);

/* The families of /metrics (the first loop's page): refusals counted and
 * dropped, and with per_rule > 0 (--top-metric) rl_top_refused{rule,key},
 * the per_rule top callers of each of at most RLS_TOP_METRIC_RULES rules
 * (those with most refusals), as counts over the window. Returns 0 or the
 * buffer's error. */
int rls_top_metrics(rls_top_t *t, uint64_t now_ms, uint32_t per_rule,
                    rl_buf_t *out);

#endif
