/* rl-server's configuration, from the command line. */
#ifndef RLS_FLAGS_H
#define RLS_FLAGS_H

#include <stddef.h>
#include <stdint.h>

#include "rl_validate.h"

#define RLS_HOST_MAX 255
#define RLS_PREFIX_MAX 64
#define RLS_RULES_MAX 256
#define RLS_ENVOY_CONFIGS_MAX 64

/* The listeners --tls-listeners may name; those that speak TLS in this
 * build are in RLS_TLS_ON_ABLE. */
#define RLS_TLS_ON_GRPC 1u
#define RLS_TLS_ON_HTTP 2u
#define RLS_TLS_ON_METRICS 4u
#define RLS_TLS_ON_LISTEN 8u
#define RLS_TLS_ON_ABLE                                                        \
    (RLS_TLS_ON_GRPC | RLS_TLS_ON_HTTP | RLS_TLS_ON_METRICS | RLS_TLS_ON_LISTEN)

typedef struct rls_flags_s {
    char listen_host[RLS_HOST_MAX + 1];
    int listen_port;
    char metrics_host[RLS_HOST_MAX + 1]; /* empty: no metrics listener */
    int metrics_port;

    int use_redis; /* 0: the embedded memory store */
    char redis_host[RLS_HOST_MAX + 1];
    int redis_port;
    char redis_user[RLS_HOST_MAX + 1];     /* empty: the default user */
    char redis_password[RLS_HOST_MAX + 1]; /* empty: no AUTH */
    const char *redis_password_file;       /* --redis-password-file */
    int redis_db;
    /* TLS to Redis (every node of a cluster): a rediss:// URL or any
     * --redis-tls-* flag. NULL files: the system's CAs, no client
     * certificate; NULL name: the host as given. */
    int redis_tls;
    int redis_tls_insecure; /* --redis-tls-insecure: no certificate check */
    const char *redis_tls_ca, *redis_tls_cert, *redis_tls_key;
    const char *redis_tls_server_name;
    /* --redis-cluster: seed nodes (redis_password applies to every node);
     * use_redis is set too. */
    int redis_cluster; /* number of seeds, 0: not a cluster */
    char redis_seed_host[16][64];
    int redis_seed_port[16];
    /* --redis-sentinel: the sentinels, in redis_seed_host/port (IP
     * literals); redis_user and redis_password are the data nodes';
     * use_redis is set too. */
    int redis_sentinels; /* number of sentinels, 0: no Sentinel */
    char redis_sentinel_master[RLS_HOST_MAX + 1];
    char redis_sentinel_user[RLS_HOST_MAX + 1];     /* empty: default */
    char redis_sentinel_password[RLS_HOST_MAX + 1]; /* empty: no AUTH */
    const char *redis_sentinel_password_file;
    /* --redis-sentinel-agree: sentinels that must name an address before
     * it is taken; 0: a majority of those given. */
    int redis_sentinel_agree;
    uint64_t redis_timeout_ms;
    uint64_t grace_ms;
    uint64_t reserve_ttl_ms;        /* --reserve-ttl-ms */
    const char *handle_secret_file; /* --handle-secret-file, or NULL */
    uint64_t spread_ms;  /* Redis store: expiries spread over up to this */
    uint64_t swl_max;    /* --sliding-window-max */
    uint64_t memory_max; /* memory store: bytes of counters, at most */

    char prefix[RLS_PREFIX_MAX + 1];
    size_t prefix_len;
    uint32_t max_frame;
    int fail_open; /* 1 open, 0 closed, 2 local (RLS_FAIL_LOCAL) */
    uint32_t max_connections; /* per loop */
    uint32_t threads;         /* --threads; 0: one per core */
    int reuseport;            /* --reuseport */
    uint32_t max_inflight;
    size_t max_output;
    uint64_t idle_timeout_s;    /* 0: idle connections are kept */
    uint64_t frame_timeout_ms;  /* 0: a frame may take forever */
    uint64_t max_partial_bytes; /* 0: input buffers are not capped */
    uint64_t drain_ms;
    /* /healthz fails while more than this share of the decisions of the
     * last 10 s failed in the store, once there were at least
     * unhealthy_min_decisions of them; 1 never fails. */
    double unhealthy_error_ratio;
    uint64_t unhealthy_min_decisions;
    char log_level[8];
    const char *port_file; /* --port-file: where the bound ports go */

    /* The policy: --rule flags (as given; validated when the policy is
     * built) and the rules file, merged. */
    const char *rules[RLS_RULES_MAX];
    size_t nrules;
    const char *config_path;   /* --config, or NULL */
    const char *check_config;  /* --check-config: validate this and exit */
    uint64_t reload_settle_ms; /* a changed policy file, unchanged this
                                  long, is reloaded */
    uint64_t max_rules;
    int inline_deny;            /* --inline-limits deny */
    int redis_module_off;       /* --redis-module off */
    uint64_t max_inline_window; /* 0: up to the protocol's 366 days */
    uint64_t max_inline_limit;  /* 0: up to 2^63-1 */
    uint64_t refusal_cache;     /* entries of the refusal cache; 0: off */
    uint64_t batches_in_flight; /* batches a tick may leave in flight */
    uint64_t batch_hold_us;     /* --batch-hold-us; 0: off */

    /* Envoy's rate limit service (--grpc; empty host: off) and its
     * descriptor files (--envoy-config, repeatable). */
    char grpc_host[RLS_HOST_MAX + 1];
    int grpc_port;
    uint32_t grpc_max_streams;
    const char *envoy_configs[RLS_ENVOY_CONFIGS_MAX];
    size_t nenvoy_configs;
    const char *check_envoy_config; /* validate this Envoy file and exit */
    const char *rlqs_config;        /* --rlqs-config: RLQS buckets; NULL: off */
    /* envoy-ratelimit's per-descriptor statistics (envoy/stats.h) and
     * their statsd exporter (envoy/statsd.h; empty host: off). */
    uint64_t envoy_stats;            /* --envoy-stats 0|1 */
    uint64_t envoy_stats_max_values; /* per-value series at most */
    double envoy_near_ratio;         /* --envoy-near-limit-ratio */
    char statsd_host[RLS_HOST_MAX + 1];
    int statsd_port;
    uint64_t statsd_flush_ms;
    /* --trace-otlp: spans of decisions to this OTLP/HTTP endpoint (NULL:
     * no tracing; trace/tracer.h), sampled and bounded so. */
    const char *trace_otlp;
    double trace_sample;
    const char *trace_service, *trace_service_ns, *trace_instance;
    uint64_t trace_max_spans;
    uint64_t trace_flush_ms;
    uint64_t trace_timeout_ms;
    /* Or the descriptors from a control plane over xDS (--envoy-xds; empty
     * host: off; envoy/xds_client.h), instead of --envoy-config. */
    char envoy_xds_host[RLS_HOST_MAX + 1];
    int envoy_xds_port;
    const char *envoy_xds_node_id;     /* --envoy-xds-node-id */
    uint64_t envoy_xds_backoff_ms;     /* first reconnection wait */
    uint64_t envoy_xds_backoff_max_ms; /* its cap */
    const char *envoy_xds_tls_ca;      /* TLS to it: the CA (turns TLS on) */
    const char *envoy_xds_tls_cert;    /* our certificate (mutual TLS) */
    const char *envoy_xds_tls_key;
    const char *envoy_xds_tls_server_name; /* NULL: the host */
    /* envoy-ratelimit's SHADOW_MODE (a refusal's overall code is OK) and
     * LIMIT_RESPONSE_HEADERS_ENABLED (its three headers, for domains whose
     * file does not say rate_limit_headers). */
    int envoy_shadow_mode;
    int envoy_response_headers;
    int envoy_response_metadata; /* RESPONSE_DYNAMIC_METADATA */
    int envoy_quota_mode;        /* QUOTA_MODE */
    int envoy_counting; /* --envoy-counting: RLS_ENVOY_COUNT_* (envoy) */
    /* The HTTP check endpoint (check/http_check.h). */
    char http_host[RLS_HOST_MAX + 1]; /* empty: no --http listener */
    int http_port;
    const char *check_key_header;  /* --check-key-header, or NULL */
    const char *check_rule_header; /* --check-rule-header, or NULL */
    uint64_t check_xff_hops;       /* --check-xff-hops */
    int check_error_details;       /* --check-error-details */
    /* TLS on our own listeners (net/tls.h): the server's certificate
     * chain and key, and the CA whose certificates clients must show
     * (NULL: none asked for). tls_listeners: RLS_TLS_ON_* bits, the
     * listeners that speak TLS (by default every one that can). */
    const char *tls_cert, *tls_key, *tls_client_ca;
    int tls_client_ca_recheck; /* --tls-client-ca-recheck */
    unsigned tls_listeners;
    uint64_t tls_handshake_timeout_ms; /* 0: no deadline */
    /* Per TLS listener: handshakes in progress at once, and begun per
     * second; past either a new connection is closed at accept (0: no
     * cap). */
    uint64_t tls_max_handshakes;
    uint64_t tls_handshake_rate;
    /* envoy-ratelimit's HTTP listener (HOST:PORT there: /healthcheck,
     * POST /json; envoy/http.h) and its debug listener
     * (DEBUG_HOST:DEBUG_PORT: /rlconfig; envoy/debug_http.h); empty: not
     * opened. Both need --grpc. */
    char envoy_http_host[RLS_HOST_MAX + 1];
    int envoy_http_port;
    char debug_http_host[RLS_HOST_MAX + 1];
    int debug_http_port;
    /* The admin listener (admin/admin_api.h): empty, not opened; and the file
     * of its write tokens, NULL: no writes. A non-loopback --admin needs
     * the file. */
    char admin_host[RLS_HOST_MAX + 1];
    int admin_port;
    const char *admin_token_file;
    /* Top offenders (core/top.h): entries per rule's sketch (0: none),
     * the window's epoch in seconds, and --top-metric's callers per rule
     * (0: no rl_top_refused series). */
    uint32_t top_k;
    uint32_t top_window_s;
    uint32_t top_metric;
    int info_only; /* --help or --version was printed */
    /* envoy-ratelimit's environment (envoy_env.h): --envoy-env (or the
     * program called `ratelimit`, or no arguments and one of its settings
     * set); --envoy-env-print: print the flags it gave, and exit. */
    int envoy_env;
    int envoy_env_print;
    int envoy_config_ignore_dot; /* --envoy-config-ignore-dotfiles */
} rls_flags_t;

/* Fills *c with the defaults shown by --help. */
void rls_flags_defaults(rls_flags_t *c);

/* Parses argv over the defaults already in *c. Returns 0, with
 * c->info_only set when --help or --version printed to `out` (the program
 * then exits 0), or RL_EINVAL with one line describing the problem in
 * err. */
int rls_flags_parse(rls_flags_t *c, int argc, char **argv, void *out, char *err,
                    size_t errlen);

/* The flags' table (flags.c), for the tests that walk it. */
typedef enum {
    RLS_FLAG_SET,    /* takes no value: the int at off becomes min */
    RLS_FLAG_NUM,    /* an integer in [min, max]: the field at off */
    RLS_FLAG_BYTES,  /* the same, with a k, m or g suffix */
    RLS_FLAG_RATIO,  /* a double at off in [0, 1], or (0, 1] if min is 1 */
    RLS_FLAG_CHOICE, /* one of choices: the int at off becomes min + index */
    RLS_FLAG_OTHER,  /* --help, --version, strings, addresses, lists */
} rls_flag_kind_t;

typedef struct rls_flag_info_s {
    const char *name; /* "--name" */
    int takes_value;
    rls_flag_kind_t kind;
    size_t off, size; /* the field in rls_flags_t */
    uint64_t min, max;
    const char *choices; /* RLS_FLAG_CHOICE: "a|b|c" */
    const char *help;    /* its lines in --help; NULL: the flag before's */
} rls_flag_info_t;

/* The i-th flag (from 0) into *info. Returns 1, or 0 past the last. */
int rls_flags_info(size_t i, rls_flag_info_t *info);

/* The fail mode's name: "open", "closed" or "local". */
static inline const char *rls_fail_mode_name(int fail_open)
{
    return fail_open == 2 ? "local" : fail_open ? "open" : "closed";
}

#endif
