/* What Redis Sentinel answers (redis_sentinel_parse.c): the reply to
 * SENTINEL get-master-addr-by-name and the +switch-master message. Pure
 * code, no I/O: the Sentinel layer (redis_sentinel.c) hands in what a
 * sentinel sent, and the fuzz target (tests/fuzz/fuzz_sentinel.c)
 * anything at all. A sentinel is a peer on the network, so nothing it
 * sends is trusted to fit: a host longer than RLS_SENTINEL_HOST_MAX, one
 * starting with '/' (a Unix socket's path to the connection) or a port
 * out of range is refused, not cut. */
#ifndef RLS_REDIS_SENTINEL_PARSE_H
#define RLS_REDIS_SENTINEL_PARSE_H

#include <stddef.h>

#include <hiredis/hiredis.h>

/* Longest host taken from a sentinel (an IPv6 literal is 45; a name, with
 * resolve-hostnames, may be longer). */
#define RLS_SENTINEL_HOST_MAX 255

typedef struct rls_sentinel_addr_s {
    char host[RLS_SENTINEL_HOST_MAX + 1]; /* NUL-terminated, not empty */
    int port;                             /* 1 to 65535 */
} rls_sentinel_addr_t;

/* Reads the reply to SENTINEL get-master-addr-by-name: an array of two
 * strings, host and port. Returns 0 with *out filled; RL_EAGAIN for a nil
 * reply (this sentinel knows no master by that name, yet); RL_EINVAL for
 * anything else (an error reply, another shape, a bad host or port), with
 * *out untouched. */
int rls_sentinel_parse_addr(const redisReply *r, rls_sentinel_addr_t *out);

/* Reads a +switch-master message's text (len bytes at s, not
 * NUL-terminated): "<name> <old host> <old port> <new host> <new port>",
 * one space apart. Returns 0 when it is about master `name` (the old
 * address in *from, the new in *to); 1 when it is well-formed but about
 * another master (*from and *to unspecified); RL_EINVAL for anything
 * else. */
int rls_sentinel_parse_switch(const char *s, size_t len, const char *name,
                              rls_sentinel_addr_t *from,
                              rls_sentinel_addr_t *to);

#endif
