/* What the admin listener's parts (admin_api.c, admin_usage.c,
 * admin_config.c) share: the server's state as the listener sees it,
 * its counts and its store steps under way; nothing outside admin/
 * includes it but admin_api.h. */
#ifndef RLS_ADMIN_STATE_H
#define RLS_ADMIN_STATE_H

#include <stddef.h>
#include <stdint.h>

#include "envoy/conf.h"
#include "policy/runtime.h"
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

/* One loop of --threads, as GET /v1/loops shows it (loops.c fills it). */
typedef struct rls_admin_loop_s {
    unsigned index;
    int up;               /* 1: its store is up; 0: not; -1: it ended */
    int paused;           /* 1: told to take no new connection */
    int counted;          /* connections is known (more than one loop) */
    unsigned connections; /* open now, on the listeners that hand off */
    uint64_t handed;      /* connections the hand-off gave it */
} rls_admin_loop_t;

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
    struct rls_top_s *top; /* the top offenders (core/top.h), NULL: off */
    /* Fills *e and returns 1, or returns 0 without --grpc (no Envoy
     * domains here). */
    int (*envoy)(void *arg, rls_admin_envoy_t *e);
    /* --threads: fills *out with loop i and returns 0, or returns
     * RL_EINVAL past the last loop; and pauses (on 1) or resumes loop i
     * (0, or RL_EINVAL: no such loop; RL_EBUSY: one loop alone, which
     * cannot be paused). */
    int (*loop)(void *arg, unsigned i, rls_admin_loop_t *out);
    int (*loop_pause)(void *arg, unsigned i, int on);
    void *arg;
} rls_admin_view_t;

typedef struct rls_admin_stats_s {
    uint64_t reads;        /* usage reads answered 200 */
    uint64_t top_reads;    /* /v1/top reads answered 200 */
    uint64_t resets;       /* resets done */
    uint64_t cleared;      /* keys those resets cleared */
    uint64_t pauses;       /* loops paused or resumed */
    uint64_t unauthorized; /* writes without a Bearer token: 401 */
    uint64_t forbidden;    /* with a wrong one, or no token file: 403 */
    uint64_t too_large;    /* answers over RLS_ADMIN_OUT_MAX: 413 */
    uint64_t store_errors; /* steps the store failed: 503 */
} rls_admin_stats_t;

typedef struct rls_admin_state_s {
    rls_admin_view_t v;
    rls_admin_stats_t stats;
    unsigned jobs; /* store steps under way */
} rls_admin_state_t;

#endif
