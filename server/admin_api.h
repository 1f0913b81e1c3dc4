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
 * listener and waits for the store steps it started. */
#ifndef RLS_ADMIN_API_H
#define RLS_ADMIN_API_H

#include <stddef.h>
#include <stdint.h>

#include <uv.h>

#include "admin_api_parse.h"
#include "envoy/conf.h"
#include "net/frontend.h"
#include "net/http_server.h"
#include "policy/runtime.h"
#include "rl_buf.h"
#include "store/store.h"

/* The largest answer. */
#define RLS_ADMIN_OUT_MAX (4u << 20)
/* Store steps (usage reads, resets) under way at once; more: 503. */
#define RLS_ADMIN_JOBS_MAX 64
/* The longest host name and key prefix the view names (server.c checks
 * that the flags' fit). */
#define RLS_ADMIN_NAME_MAX 255

/* The Envoy tree in force and the xDS client's state, as they are at
 * one request (borrowed for that request alone). */
typedef struct rls_admin_envoy_s {
    const rls_envoy_conf_t *conf; /* NULL: none yet */
    const char *xds_version;      /* the one in force, NULL: none yet */
    int xds_connected;            /* a connection to it is up now */
} rls_admin_envoy_t;

/* What the listener shows and acts on, and all it knows of the server
 * (which fills it when it starts the listener; every pointer outlives
 * the listener). */
typedef struct rls_admin_view_s {
    /* The flags it names. */
    const char *prefix; /* --prefix, of every store key */
    size_t prefix_len;
    uint64_t grace_ms;                /* --grace-ms */
    int use_redis;                    /* 0: the memory store */
    int redis_cluster;                /* seeds, 0: not a cluster */
    int redis_sentinels;              /* sentinels, 0: no Sentinel */
    const char *config_path;          /* --config, or NULL */
    size_t nrules;                    /* --rule flags */
    const char *const *envoy_configs; /* --envoy-config files */
    size_t nenvoy_configs;
    const char *xds_host; /* --envoy-xds's, "": none */
    int xds_port;
    const char *xds_node_id; /* NULL: "default" */
    uint64_t start_unix_ms;
    /* Its state. */
    rls_store_t *store;
    rls_runtime_t *rt; /* the policy and switches in force */
    /* Fills *e and returns 1, or returns 0 without --grpc (no Envoy
     * domains here). */
    int (*envoy)(void *arg, rls_admin_envoy_t *e);
    void *arg;
} rls_admin_view_t;

typedef struct rls_admin_stats_s {
    uint64_t reads;        /* usage reads answered 200 */
    uint64_t resets;       /* resets done */
    uint64_t cleared;      /* keys those resets cleared */
    uint64_t unauthorized; /* writes without a Bearer token: 401 */
    uint64_t forbidden;    /* with a wrong one, or no token file: 403 */
    uint64_t too_large;    /* answers over RLS_ADMIN_OUT_MAX: 413 */
    uint64_t store_errors; /* steps the store failed: 503 */
} rls_admin_stats_t;

typedef struct rls_admin_api_s {
    rls_frontend_t fe;
    rls_http_server_t *http;
    rls_admin_view_t v; /* whose state it shows (the first loop's) */
    rls_admin_tokens_t tokens;
    int has_tokens;       /* --admin-token-file given */
    int reads_need_token; /* not on a loopback address */
    rl_buf_t buf;         /* the answer being sent */
    unsigned jobs;        /* store steps under way */
    int stopping;
    rls_admin_stats_t stats;
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
