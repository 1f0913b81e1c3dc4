/* What the decider's tests share (decider_fx.c): the decider (core/
 * decide.h) over the memory store on a scripted clock, under the rules of
 * a rules file's text. A wrapper store passes every batch, reservation
 * and lease to the memory store but answers now_ms() from the script
 * (store->now), so a test can stand exactly on a window boundary. Used by
 * test_decide.c and test_envoy_rls.c, each embedding a dfx_t in its own
 * harness. */
#ifndef RLT_DECIDER_FX_H
#define RLT_DECIDER_FX_H

#include <stdint.h>

#include <uv.h>

#include "core/decide.h"
#include "policy/runtime.h"
#include "store/store.h"

/* The scripted-clock wrapper around the memory store. */
typedef struct {
    rls_store_t base;
    rls_store_t *inner;
    uint64_t now; /* what now_ms() answers */
} dfx_store_t;

typedef struct {
    uv_loop_t loop;
    dfx_store_t *store;
    rls_runtime_t rt; /* the rules in force */
    rls_decider_t d;
} dfx_t;

/* Opens x: a loop, the store at now_ms, the runtime of rules_yaml and a
 * decider set up from o (NULL: rls_decider_opts_init's defaults) with the
 * store, the runtime and the key prefix "rl:" filled in. Fails the test
 * when any step does. */
void dfx_open(dfx_t *x, const char *rules_yaml, uint64_t now_ms,
              const rls_decider_opts_t *o);

/* Checks that nothing is in flight and the batcher's replay never
 * disagreed with the store, then frees the decider, the runtime and the
 * store and closes the loop (every handle closed). */
void dfx_close(dfx_t *x);

#endif
