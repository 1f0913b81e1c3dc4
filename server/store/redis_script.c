/* The Redis store's script, embedded from redis_script.lua and
 * redis_cluster_prologue.lua at build time (lua_embed.cmake). The top of
 * redis_script.lua describes the script's arguments and its reply, which
 * the module's RL.BATCH shares; redis.c says why a script. */
#include "store/redis_script.h"

#include "store/redis_cluster_prologue.lua.h"
#include "store/redis_script.lua.h"

const char rls_redis_script[] = RLS_LUA_REDIS_SCRIPT;
const size_t rls_redis_script_len = sizeof(rls_redis_script) - 1;

static const char cluster_script[] =
    RLS_LUA_REDIS_CLUSTER_PROLOGUE RLS_LUA_REDIS_SCRIPT;

const char *rls_redis_cluster_script(size_t *len)
{
    *len = sizeof(cluster_script) - 1;
    return cluster_script;
}

const char RLS_REDIS_MODULE_CMD[] = "RL.BATCH";
