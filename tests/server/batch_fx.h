/* What the batcher's tests share (batch_fx.c): the batcher over the
 * memory store or a private redis-server, on a scripted clock.
 *
 * A wrapper store passes batches to the real store but answers now_ms()
 * from the script, so a test can stand exactly on a window boundary; it
 * can also hold batches back, so a test can keep some in flight. Requests
 * are inline limits (an rls_spec_t built here) or named rules resolved
 * through a runtime whose policy comes from rls_policy_build_buf; each
 * answer is kept by its request's slot. Used by test_batch.c,
 * test_batch_flow.c and store/test_store_memory.c. */
#ifndef RLT_BATCH_FX_H
#define RLT_BATCH_FX_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <uv.h>

#include "core/batch.h"
#include "policy/rules.h"
#include "policy/runtime.h"
#include "store/store.h"
#include "rlt.h"

/* A counting allocator (not under ASan or TSan, which own malloc): n_allocs
 * counts every allocation of the program, and the fail_alloc-th one fails
 * (0: none). */
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__) &&         \
    !defined(__has_feature)
#define COUNT_ALLOCS 1
#elif defined(__has_feature)
#if !__has_feature(address_sanitizer) && !__has_feature(thread_sanitizer)
#define COUNT_ALLOCS 1
#endif
#endif

#ifdef COUNT_ALLOCS
extern uint64_t n_allocs;
extern uint64_t fail_alloc;
#endif

/* ---- the scripted-clock wrapper ---- */

/* A batch the wrapper holds back instead of passing on. */
typedef struct {
    rls_op_t *ops;
    size_t n;
    rls_store_cb cb;
    void *data;
} held_t;

#define HELD_MAX 64

typedef struct {
    rls_store_t base;
    rls_store_t *inner;
    uint64_t now;
    void (*done)(void *);
    void *done_arg;
    uint64_t expiry[64]; /* expire_at_ms of the first ops' first window */
    size_t nexpiry;
    int hold; /* 1: keep submitted batches in held[] */
    /* The next `fail` batches fail whole with RL_ESTORE, as a store that
     * cannot answer fails them (-1: every batch). */
    int fail;
    held_t held[HELD_MAX];
    size_t nheld;
} clock_store_t;

/* ---- the harness ---- */

#define MAXR 16384

typedef struct {
    uv_loop_t loop;
    rlt_redis_t redis;
    int use_redis;
    clock_store_t *store;
    rls_batcher_t b;
    rls_runtime_t rt; /* named rules; set up by h_rules */
    int have_rt;
    rls_rule_stats_t istats; /* inline limits without a runtime */
    rl_result_t res[MAXR];
    char err[MAXR][160];
    int answers[MAXR];  /* responses per request slot */
    size_t order[MAXR]; /* request slots in the order answered */
    size_t n;           /* requests added */
    size_t answered;
} h_t;

/* The teardown of every test: stops the redis-servers its harnesses
 * started, even when an assertion failed mid-test. */
int h_teardown(void **state);

/* Opens a harness over the memory store (use_redis 0; 3: a table of 64
 * stripes, as --threads makes) or a private redis-server (1: the script;
 * 2: the module, which $RLT_MODULE_SO names), batches of at most
 * max_reqs, in the given fail mode. */
void h_open(h_t *h, int use_redis, size_t max_reqs, int fail_open);

/* The policy of a rules file's text; fails the test when it does not
 * build. */
rls_policy_t *policy(const char *yaml);

/* Puts the rules of `yaml` in force, through a runtime the batcher holds
 * (before the first request). */
void h_rules(h_t *h, const char *yaml);

/* Adds an inline-limit request at the scripted time `now`; its id is its
 * slot. */
size_t h_add(h_t *h, uint64_t now, const char *key, uint64_t limit,
             uint32_t window, uint32_t cost);

/* Resolves a request naming `rule` through the runtime. */
void resolve(h_t *h, const char *key, const char *rule, uint32_t cost,
             rls_spec_t *spec);

/* Adds a request naming `rule` at the scripted time `now`. */
size_t h_rule(h_t *h, uint64_t now, const char *key, const char *rule,
              uint32_t cost);

/* Adds one request of n levels (keys[i] under rules[i]) decided all or
 * nothing (rls_batcher_add_group) at the scripted time `now`; its id is
 * its slot. */
size_t h_group(h_t *h, uint64_t now, size_t n, const char *const *keys,
               const char *const *rules, uint32_t cost);

/* The counters of a rule ("" for inline limits). */
const rls_rule_stats_t *rule_stats(h_t *h, const char *rule);

/* The quota-fit counters of one window length of a rule, or NULL. */
const rls_win_stats_t *win_stats(const rls_rule_stats_t *st, uint32_t window_s);

/* Runs the loop until every request so far is answered. */
void h_wait(h_t *h);

/* Submits and waits until every request so far is answered. */
void h_flush(h_t *h);

/* Passes the batches held so far to the store, in the order submitted, and
 * stops holding. */
void h_release(h_t *h);

/* Checks that every request got exactly one answer and nothing is held,
 * then closes the harness (and stops its redis-server). */
void h_close(h_t *h);

/* A day from now, on a day boundary: every window size used divides it.
 * In the future, so Redis never sees an expiry already past. */
uint64_t base_ms(void);

/* The decision fields of request i. */
void assert_result(const h_t *h, size_t i, int code, uint64_t limit,
                   uint64_t used, uint64_t remaining, uint64_t reset_after_ms,
                   uint32_t window_s);

/* A deterministic sequence (a 64-bit LCG), the same on every run. */
uint32_t rnd(uint64_t *s);

#endif
