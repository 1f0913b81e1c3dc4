/* The admin listener (--admin HOST:PORT; admin_api.c): what an operator
 * asks of one instance and of the fleet through it. One caller's usage
 * under a rule or an Envoy descriptor, read from the store as the
 * decisions read it (admin_usage.c), its reset, and the configuration in
 * force (admin_config.c), as JSON (or text for rl-ctl). The routes and
 * their parameters: admin_api_parse.h.
 *
 * Safe by default: off unless --admin is given (no fixed port: several
 * instances on one host would collide on it); a non-loopback address
 * only with --admin-token-file (flags.c refuses the start otherwise);
 * reads are GET, writes POST, and a write needs "Authorization: Bearer
 * TOKEN" naming a token of that file (401 without one, 403 with a
 * wrong one; no file, no writes), as does a read on a non-loopback
 * address (the network reaches it: a caller's usage is no one else's
 * business); answers carry no secret (no handle
 * secret, no Redis password, no token) and at most RLS_ADMIN_OUT_MAX
 * bytes (413 past it: ask for a part); every bad request is a 4xx with
 * a one-line reason. Every reset is logged with the token's name and the
 * client's address, and counted (rl_admin_resets_total).
 *
 * As a front end (net/frontend.h) it runs on the first loop of
 * --threads alone (no adopt), like --metrics; its stop closes the
 * listener and waits for the store steps it started. Like the other
 * front ends it knows nothing of rls_server_t: it sees the server
 * through the view server.c gives it (rls_admin_view_t,
 * admin_state.h). */
#ifndef RLS_ADMIN_API_H
#define RLS_ADMIN_API_H

#include <stddef.h>
#include <stdint.h>

#include <uv.h>

#include "admin/admin_api_parse.h"
#include "admin/admin_state.h"
#include "net/frontend.h"
#include "net/http_server.h"

typedef struct rls_admin_api_s {
    rls_frontend_t fe;
    rls_http_server_t *http;
    rls_admin_state_t st; /* what it shows (the first loop's), its counts */
    rls_admin_tokens_t tokens;
    int has_tokens;       /* --admin-token-file given */
    int reads_need_token; /* not on a loopback address */
    rl_buf_t buf;         /* the answer being sent */
    int stopping;
} rls_admin_api_t;

/* Listens on host:port, showing what v says (copied; tokens from
 * token_file, NULL: none, so no writes). Returns 0, or RL_EADDR, RL_EINVAL /
 * RL_EIO (the token file) or RL_ENOMEM with err (errlen bytes) saying why and
 * nothing left open. */
int rls_admin_api_start(rls_admin_api_t *a, const rls_admin_view_t *v,
                        uv_loop_t *loop, const char *host, int port,
                        const char *token_file, char *err, size_t errlen);

rls_frontend_t *rls_admin_api_frontend(rls_admin_api_t *a);

#endif
