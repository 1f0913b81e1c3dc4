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
} rls_redis_opts_t;

/* Redis store: hiredis async on `loop`. Connects in the background and
 * reconnects with backoff; batches submitted while down fail at once.
 * Returns NULL on allocation failure. */
rls_store_t *rls_store_redis_new(uv_loop_t *loop,
                                 const rls_redis_opts_t *opts);

#endif
