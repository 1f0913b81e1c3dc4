/* Envoy's ShouldRateLimit, decided like a native request (envoy_rls.c):
 * the RateLimitRequest is decoded (protobuf-c), each descriptor mapped
 * through the --envoy-config tree (envoy/conf.h) to a counter key
 * and a limit, and the counted ones join the batcher's current batch, one
 * request per descriptor. The call completes when every descriptor is
 * answered; the transport (envoy/grpc.c) then encodes the response. No
 * HTTP/2 here. */
#ifndef RLS_NET_ENVOY_RLS_H
#define RLS_NET_ENVOY_RLS_H

#include <stddef.h>
#include <stdint.h>

#include "core/decide.h"
#include "base/grpc_status.h"
#include "envoy/conf.h"
#include "rl_buf.h"

/* Descriptors per request, and entries per descriptor, taken (a request's
 * size is capped by --max-frame first; envoy-ratelimit sets no count). */
#define RLS_ENVOY_DESCRIPTORS_MAX 1024
#define RLS_ENVOY_ENTRIES_MAX 32

typedef struct rls_envoy_stats_s {
    uint64_t descriptors[3]; /* answered, by Envoy code: [1] OK, [2] OVER */
    uint64_t uncounted;      /* no config, unlimited, or mode off */
    uint64_t unknown_domain; /* requests whose domain has no config */
} rls_envoy_stats_t;

/* What the calls share: where to send requests, the configuration in
 * force (NULL: none; every descriptor is allowed and not counted). */
typedef struct rls_envoy_ctx_s {
    rls_decider_t *decider;
    rls_envoy_conf_t *conf;
    rls_envoy_stats_t stats;
    /* envoy-ratelimit's per-descriptor statistics (envoy/stats.h);
     * NULL: not kept. */
    struct rls_estats_s *estats;
    int global_shadow;     /* --envoy-shadow-mode */
    int global_quota;      /* --envoy-quota-mode */
    int ref_headers;       /* --envoy-response-headers */
    int response_metadata; /* --envoy-response-metadata */
} rls_envoy_ctx_t;

typedef struct rls_envoy_status_s rls_envoy_status_t;

/* One call in progress. The transport embeds it and is told through done
 * when the last answer came (never from inside rls_envoy_start). */
typedef struct rls_envoy_call_s {
    rls_envoy_ctx_t *ctx;
    rls_envoy_conf_t *conf; /* held until rls_envoy_call_free */
    const rls_envoy_domain_t *dom;
    rls_envoy_status_t *st;
    uint32_t n;       /* descriptors */
    uint32_t pending; /* answers still to come from the batcher */
    void *req;        /* the decoded request, kept for dynamic_metadata (else
                         NULL) */
    void *held;       /* or kept for envoy-stop's second step (else NULL) */
    int phase;        /* envoy-stop: 1 first step (a look), 2 second */
    /* all_or_nothing: the descriptors decided as one group, in level
     * order (ngroup of them; 0: none). */
    uint32_t group[RLS_GROUP_MAX];
    uint32_t ngroup;
    void (*done)(struct rls_envoy_call_s *call);
    /* The call's traceparent (gRPC metadata), set by the transport before
     * rls_envoy_start: every descriptor's span has it as parent. */
    rls_traceparent_t parent;
} rls_envoy_call_t;

/* Decodes the message p[0, n) and starts deciding it (call->done set by
 * the caller first). Returns RLS_GRPC_OK or a gRPC status with a static
 * reason in *why. Either way, when call->pending is 0 on return nothing
 * is in flight and done will not be called; else done is called once,
 * later, when the last answer came (after an error, only so that the
 * caller can free the call). */
int rls_envoy_start(rls_envoy_call_t *call, rls_envoy_ctx_t *ctx,
                    const uint8_t *p, size_t n, const char **why);

/* Appends the RateLimitResponse, as one gRPC message (the 5-byte prefix,
 * then the bytes), to out. Returns 0 or RL_ENOMEM / RL_EFULL. */
int rls_envoy_encode(const rls_envoy_call_t *call, rl_buf_t *out);

/* Frees what the call holds. Only once pending is 0. */
void rls_envoy_call_free(rls_envoy_call_t *call);

/* The counter key of a descriptor: "<domain>/<key>=<value>/..." with '/',
 * '=', '%', '#' and bytes below 0x21 or above 0x7e written as %XX; past
 * 400 bytes, the first 360 and '#' and a 128-bit hash (fixed SipHash key:
 * every server must agree) of the whole. Returns its length (at most
 * RLS_ENVOY_KEY_MAX). Exposed for tests. */
#define RLS_ENVOY_KEY_MAX 400
size_t rls_envoy_key(char *out, const char *domain, size_t dlen,
                     const char *const *keys, const size_t *klens,
                     const char *const *values, const size_t *vlens, size_t n);

#endif
