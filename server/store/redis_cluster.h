/* The Redis Cluster store (redis_cluster.c): counters spread over the
 * masters of a Redis Cluster by the caller's hash slot. */
#ifndef RLS_STORE_REDIS_CLUSTER_H
#define RLS_STORE_REDIS_CLUSTER_H

#include <stdint.h>

#include <uv.h>

#include "store/store.h"

#define RLS_CLUSTER_SEEDS_MAX 16

typedef struct rls_cluster_opts_s {
    const char *hosts[RLS_CLUSTER_SEEDS_MAX]; /* seed nodes */
    int ports[RLS_CLUSTER_SEEDS_MAX];
    int nseeds;            /* 1 to RLS_CLUSTER_SEEDS_MAX */
    const char *user;      /* NULL: the default user */
    const char *password;  /* NULL: no AUTH; else sent to every node */
    /* NULL: plain; else every node over TLS (redis_tls.h). Must outlive
     * the store. */
    const struct rls_redis_tls_s *tls;
    uint64_t timeout_ms;   /* a call unanswered this long fails */
    uint64_t grace_ms;
} rls_cluster_opts_t;

/* Loads the slot map from the first seed that answers, then keeps one
 * Redis store (redis.c) per master. Returns NULL on allocation failure. */
rls_store_t *rls_store_cluster_new(uv_loop_t *loop,
                                   const rls_cluster_opts_t *opts);

#endif
