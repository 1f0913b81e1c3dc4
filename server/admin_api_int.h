/* What admin_api.c, admin_usage.c and admin_config.c share, and nothing
 * else includes. */
#ifndef RLS_ADMIN_API_INT_H
#define RLS_ADMIN_API_INT_H

#include "admin_api.h"

/* Starts the usage read or reset q asks for, on behalf of `who` (the
 * token's name and the client's address, for the log): its answer goes
 * to rls_http_answer(c, ...) exactly once, later or before this returns.
 * Returns 0 then; otherwise the HTTP status to answer at once (404: no
 * such rule or domain; 503: too many steps under way; 500: no memory)
 * with *why a one-line reason. */
int rls_admin_usage_start(rls_admin_api_t *a, const rls_admin_req_t *q,
                          const char *who, rls_http_conn_t *c,
                          const char **why);

/* Appends the configuration in force (the parts of `parts`, 0: all) to
 * out as JSON. Returns 0 or the buffer's error (RL_EFULL: over its cap). */
int rls_admin_config(const rls_admin_api_t *a, unsigned parts, rl_buf_t *out);

/* The store's name for an answer ("memory", "redis", "redis-cluster",
 * "redis-sentinel") and whether its counts are the fleet's (1) or this
 * instance's alone (0). */
const char *rls_admin_store_name(const rls_admin_api_t *a, int *fleet);

#endif
