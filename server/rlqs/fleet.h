/* RLQS's view of the fleet (fleet.c): per budget, the participants that
 * report it (an Envoy's stream of one bucket, on any rl-server instance)
 * with their recent demand, and the requests they admitted in the current
 * window. A participant silent past stale_ms is dropped at the next sweep
 * (every stale_ms / 2): it counts for stale_ms to 1.5 stale_ms. Through a Redis
 * store (one script call, store/rlqs.lua, through the store's command():
 * several instances behind a load balancer divide one budget); with the memory
 * store, a table in this process (every loop of --threads shares it; instances
 * do not). */
#ifndef RLS_RLQS_FLEET_H
#define RLS_RLQS_FLEET_H

#include <stddef.h>
#include <stdint.h>

#include "store/store.h"

typedef struct rls_rlqs_fleet_op_s {
    /* Set by the caller. */
    const char *key; /* the budget: "<prefix>rlqs{<rule>:<values>}" */
    size_t key_len;
    const char *member; /* the participant */
    size_t member_len;
    uint64_t demand;    /* requests per unit, >= 1 */
    uint64_t allowed;   /* admitted since its last step */
    uint64_t now_ms;    /* the store's clock */
    uint64_t window_ms; /* the rule's unit, ms: the usage counter's window */
    uint32_t stale_ms;
    int leave; /* 1: the participant goes (nothing else is done) */
    /* Set before the callback. */
    uint64_t used; /* the window's usage after this step */
    uint64_t n;    /* live participants, this one included */
    uint64_t sum;  /* their demands */
    int err;       /* 0, or RL_ESTORE / RL_ENOMEM / RL_EINVAL */
} rls_rlqs_fleet_op_t;

typedef void (*rls_rlqs_fleet_cb)(void *data, rls_rlqs_fleet_op_t *op);

/* Runs op on s; cb fires exactly once, before this returns (the memory
 * store, a Redis store not connected) or later. op must stay valid until
 * then. */
void rls_rlqs_fleet_submit(rls_store_t *s, rls_rlqs_fleet_op_t *op,
                           rls_rlqs_fleet_cb cb, void *data);

/* Store calls made (what a report costs: one each). */
uint64_t rls_rlqs_fleet_calls(void);

#endif
