/* The Redis store (redis.c): counters shared by every rl-server. */
#ifndef RLS_STORE_REDIS_H
#define RLS_STORE_REDIS_H

#include <stdint.h>

#include <uv.h>

#include "store/store.h"

typedef struct rls_redis_opts_s {
    const char *host;      /* IPv4/IPv6 literal or name */
    int port;
    const char *password;  /* NULL: no AUTH */
    int db;                /* SELECT db when > 0 */
    uint64_t timeout_ms;   /* a batch unanswered this long fails */
    uint64_t grace_ms;     /* keys expire this long after their window */
    int cluster;           /* a Redis Cluster master (redis_cluster.c) */
    int no_module;         /* never RL.BATCH, even where Redis has it */
    int *quiet;            /* cluster: a connect failure logged by one node
                            * goes to debug on the others until one is up */
} rls_redis_opts_t;

/* Redis store: hiredis async on `loop`. Connects in the background and
 * reconnects with backoff; batches submitted while down fail at once.
 * Returns NULL on allocation failure. */
rls_store_t *rls_store_redis_new(uv_loop_t *loop,
                                 const rls_redis_opts_t *opts);

/* For the cluster store (redis_cluster.c), which drives one such store per
 * master. In cluster mode a batch refused whole by a redirection (MOVED,
 * ASK, TRYAGAIN, CLUSTERDOWN: nothing of it ran) fails with RL_ESTORE, is
 * not counted as an error, and rls_redis_redirect gives the reply's text
 * during its callback (NULL for any other failure). */
const char *rls_redis_redirect(const rls_store_t *s, size_t *len);

/* Like submit, with flags: RLS_REDIS_ASKING precedes the script call
 * with ASKING (after an ASK redirection); RLS_REDIS_DECLARED declares the
 * keys (ops of one slot), else a cluster master gets them undeclared (see
 * rls_redis_cluster_script). */
#define RLS_REDIS_ASKING 1
#define RLS_REDIS_DECLARED 2
void rls_redis_submit_ex(rls_store_t *s, rls_op_t *ops, size_t n,
                         rls_store_cb cb, void *data, int flags);

/* Between cork and uncork, submitted calls are buffered and leave in one
 * write at uncork (many calls to one node per batch). */
void rls_redis_cork(rls_store_t *s);
void rls_redis_uncork(rls_store_t *s);

#endif
