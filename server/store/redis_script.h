/* The Redis store's batch command as Redis runs it (redis_script.c): the
 * Lua script, its cluster form, and the name and format version of the
 * ratelimit module's command (server/redis_module), which takes the same
 * arguments and gives the same reply, decided in C. The script is
 * redis_script.lua, embedded at build time; that file describes the
 * arguments (written by redis_encode.c) and the reply (read by
 * redis_parse.c). */
#ifndef RLS_REDIS_SCRIPT_H
#define RLS_REDIS_SCRIPT_H

#include <stddef.h>

/* The script's source, NUL-terminated, and its length. */
extern const char rls_redis_script[];
extern const size_t rls_redis_script_len;

/* The script for a Redis Cluster master (redis_cluster_prologue.lua in
 * front of the script): flagged allow-cross-slot-keys, and taking its keys
 * either declared (one slot) or, with numkeys 0, as ARGV[1] = their number
 * followed by the keys. NUL-terminated; *len gets its length. */
const char *rls_redis_cluster_script(size_t *len);

/* The module's command, and the format version (its RL.VERSION) that
 * redis_encode.c and redis_parse.c speak. */
extern const char RLS_REDIS_MODULE_CMD[];
#define RLS_REDIS_MODULE_VERSION 4

#endif
