/* Redis Cluster's slot map and redirections (redis_cluster_map.c): hash
 * slots of keys, the CLUSTER SHARDS / CLUSTER SLOTS reply parser and the
 * MOVED / ASK error parser. Pure code, no I/O: the cluster store
 * (redis_cluster.c) hands in what Redis sent, and the fuzz target
 * (tests/fuzz/fuzz_cluster.c) anything at all. */
#ifndef RLS_REDIS_CLUSTER_MAP_H
#define RLS_REDIS_CLUSTER_MAP_H

#include <stddef.h>
#include <stdint.h>

#include <hiredis/hiredis.h>

#define RLS_SLOTS 16384
/* Longest node host taken from a reply (an IPv6 literal is 45). */
#define RLS_NODE_HOST_MAX 63

/* Redis's hash slot of a key: CRC16 (XMODEM) of its hash tag (the bytes
 * between the first '{' and the first '}' after it, when not empty), else
 * of the whole key, modulo 16384. */
unsigned rls_key_slot(const char *key, size_t len);

/* One range of slots and the master that serves it. */
typedef struct rls_slot_range_s {
    uint16_t first, last; /* inclusive, first <= last < RLS_SLOTS */
    int port;             /* 1 to 65535 */
    char host[RLS_NODE_HOST_MAX + 1];
} rls_slot_range_t;

/* Reads a CLUSTER SHARDS reply (Redis 7: per shard "slots" as pairs of
 * bounds and "nodes", each with "ip"/"endpoint", "port" or "tls-port",
 * "role") or a CLUSTER SLOTS reply (per range: first, last, then the
 * master [host, port, ...] and its replicas) into up to cap ranges, each
 * with its master. A shard whose master is unknown (no node with role
 * master, or one whose address does not fit) contributes nothing: its
 * slots stay uncovered. Returns the number of ranges (0 to cap), or
 * RL_EINVAL when the reply has neither shape, or RL_EFULL past cap. */
int rls_cluster_parse_map(const redisReply *r, rls_slot_range_t *out,
                          size_t cap);

/* The same for a client speaking TLS to the cluster: a SHARDS node's
 * "tls-port" instead of its "port" (CLUSTER SLOTS already answers with
 * the port of the asking connection's kind). */
int rls_cluster_parse_map_tls(const redisReply *r, rls_slot_range_t *out,
                              size_t cap, int tls);

enum { RLS_REDIR_MOVED = 1, RLS_REDIR_ASK, RLS_REDIR_TRYAGAIN,
       RLS_REDIR_CLUSTERDOWN };

typedef struct rls_redirect_s {
    int kind;   /* RLS_REDIR_* */
    int slot;   /* MOVED / ASK: 0 to 16383 */
    int port;   /* MOVED / ASK: 1 to 65535 */
    char host[RLS_NODE_HOST_MAX + 1]; /* MOVED / ASK */
} rls_redirect_t;

/* The redirection an error reply's text (len bytes at s) announces by its
 * first word: RLS_REDIR_MOVED for "MOVED ", _ASK for "ASK ", _TRYAGAIN,
 * _CLUSTERDOWN; 0 for any other error. Each means Redis ran nothing of
 * the call. */
int rls_cluster_redirect_kind(const char *s, size_t len);

/* Reads an error reply's text (len bytes at s, not NUL-terminated):
 * "MOVED <slot> <host>:<port>", "ASK <slot> <host>:<port>" (an empty host
 * means the node that sent it, for which the caller passes self_host;
 * a host in brackets or with colons is IPv6), "TRYAGAIN ..." or
 * "CLUSTERDOWN ...". Returns 0, or RL_EINVAL for anything else. */
int rls_cluster_parse_redirect(const char *s, size_t len, const char *self_host,
                               rls_redirect_t *out);

#endif
