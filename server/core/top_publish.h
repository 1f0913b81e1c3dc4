/* The instance's top offenders in Redis (top_publish.c), for rl-ctl top:
 * every RLS_TOP_PUBLISH_MS the first loop writes, for each rule with a
 * refusal in the window, its merged top --top-k (core/top.h) as one
 * string, rl_topk_encode's text, under
 *
 *   <prefix>top:<rule>:<instance>      SET ... PX RLS_TOP_TTL_MS
 *
 * (<instance> as in <prefix>instances: rl-ctl reads the live ones' keys
 * and merges them). Bounded: k entries of at most 128-byte keys a rule,
 * at most the rules the sketches hold; each key expires unless written
 * again, so an instance that stops leaves nothing after RLS_TOP_TTL_MS.
 * Only on the Redis stores (a store with command()). */
#ifndef RLS_TOP_PUBLISH_H
#define RLS_TOP_PUBLISH_H

#include <stdint.h>

#include <uv.h>

#include "core/top.h"
#include "store/store.h"

#define RLS_TOP_PUBLISH_MS 5000
#define RLS_TOP_TTL_MS 15000

typedef struct rls_top_pub_s {
    uv_timer_t timer;
    rls_store_t *store;
    rls_top_t *top;
    char prefix[256];
    char instance[160];
    unsigned pending; /* writes not answered yet */
    int started, closed;
    uint64_t written;  /* keys written */
    uint64_t failures; /* writes Redis failed or refused */
    uint64_t skipped;  /* rounds skipped: the last not answered yet */
    rl_buf_t buf;
} rls_top_pub_t;

/* Starts publishing top's rules on loop through store, under prefix and
 * instance (copied). Does nothing with top NULL or a store without
 * command(); a timer libuv will not start is logged, and nothing is
 * published (nothing else depends on it). */
void rls_top_pub_start(rls_top_pub_t *p, uv_loop_t *loop, rls_store_t *store,
                       rls_top_t *top, const char *prefix,
                       const char *instance);

/* Stops publishing (its timer closes with the loop); writes under way are
 * answered by the store, which p outlives. Idempotent. */
void rls_top_pub_close(rls_top_pub_t *p);

#endif
