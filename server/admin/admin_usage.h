/* One caller's usage and its reset, for the admin listener
 * (admin_usage.c; admin_api.h). */
#ifndef RLS_ADMIN_USAGE_H
#define RLS_ADMIN_USAGE_H

#include "admin/admin_api_parse.h"
#include "admin/admin_state.h"
#include "net/http_server.h"

/* Starts the usage read or reset q asks for, on behalf of `who` (the
 * token's name and the client's address, for the log): its answer goes
 * to rls_http_answer(c, ...) exactly once, later or before this returns,
 * counted in a (a->jobs while under way). Returns 0 then; otherwise the
 * HTTP status to answer at once (404: no such rule or domain; 503: too
 * many steps under way; 500: no memory) with *why a one-line reason. */
int rls_admin_usage_start(rls_admin_state_t *a, const rls_admin_req_t *q,
                          const char *who, rls_http_conn_t *c,
                          const char **why);

/* The store's name for an answer ("memory", "redis", "redis-cluster",
 * "redis-sentinel") and whether its counts are the fleet's (1) or this
 * instance's alone (0). */
const char *rls_admin_store_name(const rls_admin_view_t *v, int *fleet);

#endif
