/* Loads the fleet's handle secret (handle.h) from the store: every
 * instance sharing a Redis (or Cluster) signs and checks reservation and
 * lease handles with the same secret, which the first instance to start
 * creates ("<prefix>handle-secret": SET NX of 32 random bytes in hex,
 * then GET). Retries once a second until the store answers; handles are
 * refused meanwhile. Then checks again every second (SET NX of the secret
 * in force, then GET), so that a store that lost its data (a restart
 * without persistence, a FLUSHALL) gets the fleet's secret back from the
 * first instance to ask, and every instance converges on one secret
 * within a second or two, never one per instance. --handle-secret-file
 * and the memory store need none of this (server.c). */
#ifndef RLS_HSECRET_H
#define RLS_HSECRET_H

#include <uv.h>

#include "handle.h"
#include "store/store.h"

typedef struct rls_hsecret_s {
    uv_timer_t timer;
    rls_store_t *store;
    rls_hkey_t *out;
    char key[80];
    char cur[257]; /* the secret in force (at first: a fresh proposal) */
    size_t cur_len;
    int loaded; /* cur came from the store */
    int started, closed, waiting;
} rls_hsecret_t;

/* Starts loading into *out (which stays unset until loaded). Returns 0 or
 * RL_EINVAL (no random bytes). */
int rls_hsecret_start(rls_hsecret_t *h, uv_loop_t *loop, rls_store_t *store,
                      const char *prefix, size_t prefix_len, rls_hkey_t *out);

/* Stops retrying; an answer still in flight is dropped. Before the store
 * closes. */
void rls_hsecret_close(rls_hsecret_t *h);

#endif
