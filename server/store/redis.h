/* The Redis store (redis.c): counters shared by every rl-server. */
#ifndef RLS_STORE_REDIS_H
#define RLS_STORE_REDIS_H

#include <stddef.h>
#include <stdint.h>

#include <uv.h>

#include "store/redis_sentinel.h"
#include "store/store.h"

typedef struct rls_redis_opts_s {
    const char *host; /* IPv4/IPv6 literal, name, or a Unix socket's
                       * path (starting with '/'; port unused) */
    int port;
    const char *user;      /* NULL: the default user */
    const char *password;  /* NULL: no AUTH */
    int db;                /* SELECT db when > 0 */
    /* NULL: plain TCP or Unix socket; else TLS (redis_tls.h). Must
     * outlive the store. */
    const struct rls_redis_tls_s *tls;
    uint64_t timeout_ms;   /* a batch unanswered this long fails */
    uint64_t grace_ms;     /* keys expire this long after their window */
    int no_module;         /* never RL.BATCH, even where Redis has it */
    int *quiet;            /* shared by stores (the cluster's): a connect
                            * failure logged by one goes to debug on the
                            * others until one is up */
    /* The script, NULL for rls_redis_script: the cluster store gives its
     * own (rls_redis_cluster_script). Must outlive the store. */
    const char *script;
    size_t script_len;
    /* Optional: nonzero for an error reply meaning that Redis ran nothing
     * of the call and that it belongs on another node (the cluster store's
     * redirections). A batch refused whole so fails with RL_ESTORE, is not
     * counted or logged as an error, and rls_redis_redirect gives the
     * reply's text during its callback. */
    int (*is_redirect)(const char *err, size_t len);
    /* Optional: the master is wherever these sentinels say
     * (redis_sentinel.h; host and port above are then unused). The store
     * counts master switches in its stats, asks ROLE at every connect,
     * and treats a READONLY reply as a sign that the master moved. Copied
     * at creation (stats are the store's own). */
    const rls_redis_sentinel_opts_t *sentinel;
    /* Where a connection dropped for a reply past its cap is counted
     * (the cluster store's own stats, for its nodes); NULL: this store's
     * stats.reply_over_cap. */
    uint64_t *over_cap;
} rls_redis_opts_t;

/* Redis store: hiredis async on `loop`. Connects in the background and
 * reconnects with backoff; batches submitted while down fail at once.
 * Returns NULL on allocation failure. */
rls_store_t *rls_store_redis_new(uv_loop_t *loop,
                                 const rls_redis_opts_t *opts);

/* During the callback of a batch refused by a redirection (see
 * opts.is_redirect): the reply's text and its length; NULL for any other
 * failure. */
const char *rls_redis_redirect(const rls_store_t *s, size_t *len);

/* Like submit, with flags. RLS_REDIS_ASKING: every send of the call,
 * including the EVAL this store resends after NOSCRIPT, is preceded by
 * ASKING (after an ASK redirection). RLS_REDIS_UNDECLARED: the keys go in
 * ARGV behind a numkeys of 0, for a script that reads them from there
 * (rls_redis_cluster_script); never with the module. */
#define RLS_REDIS_ASKING 1
#define RLS_REDIS_UNDECLARED 2
void rls_redis_submit_ex(rls_store_t *s, rls_op_t *ops, size_t n,
                         rls_store_cb cb, void *data, int flags);

/* Between cork and uncork, submitted calls are buffered and leave in one
 * write at uncork (many calls to one node per batch). */
void rls_redis_cork(rls_store_t *s);
void rls_redis_uncork(rls_store_t *s);

#endif
