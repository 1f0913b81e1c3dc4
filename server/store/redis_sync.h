/* One blocking Redis connection over plain TCP, a Unix socket or TLS
 * (redis_sync.c), for the programs that wait for each reply: rl-ctl, and
 * the tests' and benchmarks' helpers. hiredis formats the commands and
 * parses the replies either way; over TLS the bytes go through
 * redis_tls.h instead of hiredis's read and write, which 0.14 cannot
 * hook. */
#ifndef RLS_REDIS_SYNC_H
#define RLS_REDIS_SYNC_H

#include <stddef.h>

#include <hiredis/hiredis.h>

#include "store/redis_tls.h"

typedef struct rls_redis_sync_s rls_redis_sync_t;

/* Connects to host:port, or to the Unix socket at host when it starts
 * with '/', over TLS when tls is not NULL (tls must outlive the
 * connection). Connecting, the handshake and each reply get timeout_ms.
 * Returns the connection, or NULL with one line in err (hiredis's or
 * OpenSSL's reason, e.g. "TLS handshake: certificate verify failed:
 * ..."). */
rls_redis_sync_t *rls_redis_sync_connect(const char *host, int port,
                                         const rls_redis_tls_t *tls,
                                         int timeout_ms, char *err,
                                         size_t errlen);

/* Queues a command (hiredis's redisAppendCommandArgv: lens NULL means
 * C strings). Nothing is sent until a reply is asked for, so commands
 * queued together leave in one write. Returns 0 or RL_ENOMEM. */
int rls_redis_sync_append(rls_redis_sync_t *s, int argc, const char **argv,
                          const size_t *lens);

/* Sends what is queued and waits for the next reply. Returns the reply
 * (the caller frees it with freeReplyObject; an error reply is a reply),
 * or NULL when the connection failed or timed out, or the reply went past
 * RLS_REDIS_CAP_NODE (redis_reply_alloc.h): rls_redis_sync_errstr says
 * why and the connection is of no further use. */
redisReply *rls_redis_sync_reply(rls_redis_sync_t *s);

/* append then reply. */
redisReply *rls_redis_sync_command(rls_redis_sync_t *s, int argc,
                                   const char **argv, const size_t *lens);

/* Why the last call failed; "" if none did. */
const char *rls_redis_sync_errstr(const rls_redis_sync_t *s);

/* Closes and frees; accepts NULL. */
void rls_redis_sync_free(rls_redis_sync_t *s);

#endif
