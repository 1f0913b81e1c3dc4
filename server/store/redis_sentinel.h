/* Redis Sentinel for the Redis store (redis_sentinel.c): where the master
 * named --redis-sentinel-master is, according to the sentinels, kept
 * current.
 *
 * It asks one sentinel at a time, in the order given, SENTINEL
 * get-master-addr-by-name (at start, every 2 s, and at once whenever the
 * store's connection says the address failed), and holds a subscription
 * to +switch-master on one sentinel, so that a failover is heard of as
 * soon as the sentinels announce it. An address is taken only once
 * opts->agree sentinels (a majority by default) name it, since the data
 * nodes' password is sent there before the node can be asked anything.
 * It tells its owner through a callback when the address changes; the owner (redis.c) passes
 * rls_redis_sentinel_addr and rls_redis_sentinel_stale to its connection
 * (redis_conn.h's opts->addr and addr_stale), which reads the address
 * before every connect. It knows nothing of batches.
 *
 * Sentinels are reached by IP literal (the flag checks it): hiredis would
 * resolve a name with a blocking getaddrinfo on the loop. The master's
 * address, as the sentinels give it, may be a name: the connection
 * resolves it on libuv's thread pool. */
#ifndef RLS_REDIS_SENTINEL_H
#define RLS_REDIS_SENTINEL_H

#include <stddef.h>
#include <stdint.h>

#include <uv.h>

#include "store/redis_tls.h"
#include "store/store.h"

#define RLS_SENTINELS_MAX 16

typedef struct rls_redis_sentinel_s rls_redis_sentinel_t;

typedef struct rls_redis_sentinel_opts_s {
    const char *hosts[RLS_SENTINELS_MAX]; /* IP literals */
    int ports[RLS_SENTINELS_MAX];
    int n;                /* 1 to RLS_SENTINELS_MAX */
    const char *master;   /* the name the sentinels monitor */
    const char *user;     /* the sentinels' own AUTH; NULL: default user */
    const char *password; /* NULL: no AUTH */
    /* TLS to the sentinels (the data nodes' too, in redis.c): the same
     * CA, client certificate and name check; NULL: plain. Must outlive
     * the object. */
    const rls_redis_tls_t *tls;
    /* A sentinel that does not answer within this (at least 250 ms) is
     * left for the next. */
    uint64_t timeout_ms;
    /* Where master switches are counted (the owner's store stats). */
    rls_store_stats_t *stats;
    /* How many sentinels' last answers must name an address before it is
     * taken (and the data nodes' password sent there): 1 to n; 0 (or out
     * of range) means a majority, n / 2 + 1. */
    int agree;
} rls_redis_sentinel_opts_t;

typedef struct rls_redis_sentinel_cbs_s {
    /* The master's address became known or changed (logged, and counted
     * as a switch in stats->master_switches when it changed): connect
     * there now. */
    void (*moved)(void *data);
    /* After rls_redis_sentinel_close: every handle has closed and the
     * object is freed. Fires once, from a close callback. */
    void (*closed)(void *data);
} rls_redis_sentinel_cbs_t;

/* Starts asking the sentinels on loop. opts' strings are copied. Returns
 * NULL on allocation failure (nothing started). */
rls_redis_sentinel_t *
rls_redis_sentinel_new(uv_loop_t *loop, const rls_redis_sentinel_opts_t *opts,
                       const rls_redis_sentinel_cbs_t *cbs, void *data);

/* The master's address as last heard (arg is the rls_redis_sentinel_t;
 * the signature is redis_conn.h's opts->addr): fills host (hostlen bytes
 * at most, the NUL included) and *port and returns 0, or RL_EAGAIN while
 * none is known (or it does not fit). */
int rls_redis_sentinel_addr(void *arg, char *host, size_t hostlen, int *port);

/* The address failed (redis_conn.h's opts->addr_stale): asks a sentinel
 * now, or once the question in flight is answered. */
void rls_redis_sentinel_stale(void *arg);

/* Stops asking: frees the sentinels' connections (their replies are
 * ignored), closes every handle, frees the object, then calls
 * cbs->closed. */
void rls_redis_sentinel_close(rls_redis_sentinel_t *s);

#endif
