/* Envoy's rate limit quota service (RLQS) on the --grpc listener
 * (rlqs.c): StreamRateLimitQuotas, a bidirectional stream per Envoy. Each
 * usage report is matched to a bucket rule (conf.h), summed fleet-wide
 * through the store (fleet.h), and answered, when the assignment changes
 * or is due for renewal, with a token bucket holding the Envoy's share of
 * the rule's limit (share.h); buckets unused for abandon_s are abandoned.
 * docs/rlqs.md has the design and the bound it keeps.
 *
 * The transport (envoy/grpc.c) owns the HTTP/2 stream: it hands each whole
 * message to rls_rlqs_message as it arrives and tells rls_rlqs_close when
 * the stream went; the service writes through the sink it was given. It
 * runs on one loop; with --threads each loop has its own. */
#ifndef RLS_RLQS_H
#define RLS_RLQS_H

#include <stddef.h>
#include <stdint.h>

#include <uv.h>

#include "rl_buf.h"
#include "rlqs/conf.h"
#include "store/store.h"

#define RLS_RLQS_PATH                                                          \
    "/envoy.service.rate_limit_quota.v3.RateLimitQuotaService/"                \
    "StreamRateLimitQuotas"
/* Bounds on one stream: buckets tracked (a report naming more ends the
 * stream RESOURCE_EXHAUSTED), and messages per second (a token bucket of
 * this size refilled at this rate; past it RESOURCE_EXHAUSTED). Envoy
 * sends one report per reporting_interval and one per new bucket. */
#define RLS_RLQS_BUCKETS_PER_STREAM 1024
#define RLS_RLQS_MSGS_PER_S 50
/* Streams open on one loop (past it a new one is RESOURCE_EXHAUSTED). */
#define RLS_RLQS_STREAMS_MAX 65536

typedef struct rls_rlqs_s rls_rlqs_t;
typedef struct rls_rlqs_stream_s rls_rlqs_stream_t;

/* How the service writes to one stream; arg is the transport's. */
typedef struct rls_rlqs_sink_s {
    /* Queues one RateLimitQuotaResponse (its bytes, unframed; copied). A
     * stream that cannot take it (its client does not read) is the
     * transport's to reset. */
    void (*send)(void *arg, const uint8_t *msg, size_t len);
    /* Ends the stream with a gRPC status (code, a static text). No call
     * on the sink follows. */
    void (*end)(void *arg, int code, const char *why);
    void *arg;
} rls_rlqs_sink_t;

typedef struct rls_rlqs_stats_s {
    uint64_t streams_total;
    uint64_t streams_open;
    uint64_t streams_refused;  /* over RLS_RLQS_STREAMS_MAX */
    uint64_t reports;          /* messages taken */
    uint64_t bad_reports;      /* ended INVALID_ARGUMENT */
    uint64_t too_often;        /* ended: over RLS_RLQS_MSGS_PER_S */
    uint64_t too_many_buckets; /* ended: over RLS_RLQS_BUCKETS_PER_STREAM */
    uint64_t buckets_open;     /* participants tracked now */
    uint64_t coalesced;        /* reports added to a pending store call */
    uint64_t store_calls;
    uint64_t store_errors;
    uint64_t assignments; /* token buckets and blanket rules sent */
    uint64_t renewals;    /* of those, the same one again (TTL) */
    uint64_t fallbacks;   /* the rule's fallback, the store down */
    uint64_t unmatched;   /* buckets no rule takes */
    uint64_t abandons;
} rls_rlqs_stats_t;

/* A service on loop over store (both outlive it), under conf (taken:
 * freed with the service), its store keys under prefix. Returns 0 with
 * *out set, or RL_ENOMEM (conf freed). */
int rls_rlqs_new(rls_rlqs_t **out, uv_loop_t *loop, rls_store_t *store,
                 rls_rlqs_conf_t *conf, const char *prefix);

/* A stream begins (its request headers came). Returns it, or NULL (too
 * many streams, or no memory: the transport answers RESOURCE_EXHAUSTED).
 * *sink is copied. */
rls_rlqs_stream_t *rls_rlqs_open(rls_rlqs_t *q, const rls_rlqs_sink_t *sink);

/* One whole message of the stream, p[0, n) (valid during the call).
 * Answers through the sink, now or later; a message that breaks the
 * protocol ends the stream (sink->end). */
void rls_rlqs_message(rls_rlqs_stream_t *st, const uint8_t *p, size_t n);

/* The stream went (closed by either side, or its connection). The sink
 * is not called again; the stream's buckets leave the fleet (the store
 * told), and its memory goes once its store calls are back. */
void rls_rlqs_close(rls_rlqs_stream_t *st);

/* Stops the timer; memory goes when the last stream and store call are
 * done. Every stream must be closed (or be closed later). NULL is fine. */
void rls_rlqs_free(rls_rlqs_t *q);

const rls_rlqs_stats_t *rls_rlqs_stats(const rls_rlqs_t *q);

/* Appends the rl_rlqs_* series of /metrics. Returns 0 or the buffer's
 * error. */
int rls_rlqs_metrics(const rls_rlqs_t *q, rl_buf_t *out);

#endif
