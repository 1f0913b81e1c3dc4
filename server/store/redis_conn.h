/* The Redis store's connection (redis_conn.c): one Redis server over
 * hiredis's async API on a libuv loop, kept connected. It connects
 * (resolving a name on libuv's thread pool), pipelines the handshake
 * (AUTH and SELECT when configured, ROLE with want_master, SCRIPT LOAD,
 * RL.VERSION, INFO server, TIME) on every connect, is up once TIME answers,
 * samples Redis's clock every second, and reconnects with backoff when the
 * connection is lost.
 *
 * It knows nothing of what its owner sends: the owner (redis.c) sends
 * commands on the context rls_redis_conn_ctx gives it and hears of the
 * connection only through the callbacks it passed at creation, as
 * hiredis's async.c reports through its connect and disconnect callbacks.
 * A callback may call any function here, close included. */
#ifndef RLS_REDIS_CONN_H
#define RLS_REDIS_CONN_H

#include <stddef.h>
#include <stdint.h>

#include <hiredis/async.h>
#include <uv.h>

#include "store/redis_tls.h"
#include "store/store.h"

typedef struct rls_redis_conn_s rls_redis_conn_t;

/* "host:port" or "unix:PATH", as log lines name a Redis. */
#define RLS_REDIS_ADDR_MAX 272

typedef struct rls_redis_conn_opts_s {
    const char *host; /* IPv4/IPv6 literal, name, or a Unix socket's path
                       * (starting with '/'; port unused) */
    int port;
    const char *user;           /* NULL: AUTH PASSWORD as the default user */
    const char *password;       /* NULL: no AUTH */
    int db;                     /* SELECT db when > 0 */
    const rls_redis_tls_t *tls; /* NULL: plain; else outlives the conn */
    /* The handshake must finish within this (and at least 250 ms), and a
     * TIME left unanswered this long means Redis hangs. */
    uint64_t timeout_ms;
    const char *script; /* loaded at every connect; outlives the conn */
    size_t script_len;
    int use_module; /* ask RL.VERSION at every connect */
    /* Shared by connections (the cluster store's): a connect failure
     * logged by one goes to debug on the others until one is up. NULL:
     * this connection's own. */
    int *quiet;
    /* Where the connection counts Redis restarts and reconnects, and says
     * whether Redis has the module (the owner's store stats). */
    rls_store_stats_t *stats;
    /* Where a connection dropped for a reply past RLS_REDIS_CAP_NODE
     * (redis_reply_alloc.h) is counted; NULL: stats->reply_over_cap. */
    uint64_t *over_cap;
    /* Optional (Sentinel, redis_sentinel.h): where to connect. When set,
     * host and port above are ignored and addr is called before every
     * connect; it fills host (hostlen bytes at most, the NUL included)
     * and *port and returns 0, or RL_EAGAIN while no address is known
     * (the attempt is retried after the backoff, logged at debug). */
    int (*addr)(void *arg, char *host, size_t hostlen, int *port);
    /* Optional, with addr: the address failed (a connect refused, a
     * connection lost or dropped, ROLE not master): ask where the master
     * is now. Never called by rls_redis_conn_retarget's own drop. */
    void (*addr_stale)(void *arg);
    void *addr_arg;
    /* The handshake asks ROLE and accepts only "master": after a failover
     * the old address may answer "slave", and writes there would fail.
     * ROLE is then one more command the Redis ACL must allow. */
    int want_master;
} rls_redis_conn_opts_t;

/* How the connection reports to its owner; data is the owner's. */
typedef struct rls_redis_conn_cbs_s {
    /* The connection that was up is lost (or dropped). Fires before the
     * replies pending on it fail (with NULL, from hiredis); a reconnect
     * is scheduled. */
    void (*down)(void *data);
    /* A TIME sample went unanswered past timeout_ms while up: Redis
     * hangs. Fires once a second until it answers or the connection is
     * dropped; the owner decides when to drop it. */
    void (*stuck)(void *data);
    /* After rls_redis_conn_close: every handle and request has finished
     * and the connection is freed. Fires once, from a close callback. */
    void (*closed)(void *data);
} rls_redis_conn_cbs_t;

/* Starts connecting to opts->host on loop; from then on the connection
 * reconnects by itself until it is closed. opts' strings are copied, but
 * for the script. Returns NULL on allocation failure (nothing started). */
rls_redis_conn_t *rls_redis_conn_new(uv_loop_t *loop,
                                     const rls_redis_conn_opts_t *opts,
                                     const rls_redis_conn_cbs_t *cbs,
                                     void *data);

/* Fails what is pending on the connection (its replies fire with NULL and
 * rls_redis_conn_gone gives RL_ESHUTDOWN; now, or as soon as the hiredis
 * callback we may be inside returns), stops reconnecting, closes every
 * handle, frees the connection, then calls cbs->closed. */
void rls_redis_conn_close(rls_redis_conn_t *c);

/* The hiredis context to send on while the connection is up (the
 * handshake done), else NULL. Sending through rls_redis_uv_hold/release
 * (redis_uv.h) writes at once. */
redisAsyncContext *rls_redis_conn_ctx(const rls_redis_conn_t *c);

/* For a reply callback that got NULL (the context is being freed): marks
 * its connection lost, if that was not known yet, and returns the status
 * the commands pending on it fail with: RL_ESTORE (an I/O error, or
 * dropped so), RL_ETIMEDOUT or RL_ESHUTDOWN, as given to
 * rls_redis_conn_drop or rls_redis_conn_close. */
int rls_redis_conn_gone(const redisAsyncContext *ac);

/* Drops the current context, if any: pending commands fail with `status`
 * (through rls_redis_conn_gone); logs `why`, fires cbs->down if it was up,
 * and reconnects after the backoff. Inside a hiredis callback the free
 * (and the replies' callbacks) happen as soon as that callback returns. */
void rls_redis_conn_drop(rls_redis_conn_t *c, int status, const char *why);

/* The address opts->addr gives may have changed (the master moved, or
 * became known): when it differs from the one in use, drops the current
 * context (pending commands fail with RL_ESTORE, cbs->down fires if it
 * was up); unless connected or connecting there already, connects now,
 * without waiting for the backoff. */
void rls_redis_conn_retarget(rls_redis_conn_t *c);

/* Redis's clock, ms since the Unix epoch (redis_clock.h); the local clock
 * until Redis's is known. Never goes backwards. */
uint64_t rls_redis_conn_now_ms(rls_redis_conn_t *c);

/* The best TIME round trip on this connection, in microseconds: how far
 * the clock above may be off. */
uint64_t rls_redis_conn_rtt_us(const rls_redis_conn_t *c);

/* The loaded script's SHA1, 40 hex digits, once the handshake has passed
 * SCRIPT LOAD ("" before). */
const char *rls_redis_conn_sha(const rls_redis_conn_t *c);

/* 1 while batches may go to the ratelimit module (RL.BATCH): RL.VERSION
 * answered RLS_REDIS_MODULE_VERSION at this connect; else 0. */
int rls_redis_conn_module(const rls_redis_conn_t *c);

/* Redis no longer knows RL.BATCH (the module was unloaded): batches go to
 * the script until the next connect looks for the module again. Logs it
 * once. */
void rls_redis_conn_module_gone(rls_redis_conn_t *c);

#endif
