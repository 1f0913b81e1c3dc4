/* A span of a decision and what its encoders need (span.c): the span
 * itself, its outcomes and the tracer's options; tracer.h keeps and
 * exports spans, otlp.h encodes them, and both stand on this. */
#ifndef RLS_SPAN_H
#define RLS_SPAN_H

#include <stddef.h>
#include <stdint.h>

#include "rl_msg.h"

/* The rule's name a span keeps (rule names are at most 128 bytes; an
 * Envoy domain's stats name may be longer: cut). */
#define RLS_SPAN_NAME_MAX 128

typedef struct rls_span_s rls_span_t;

/* What the decider calls back with, as rls_respond_fn (core/batch.h). */
typedef void (*rls_trace_respond_fn)(void *owner, const rl_result_t *r);

struct rls_span_s {
    rls_span_t *next; /* free list, or the export queue */
    struct rls_tracer_s *t;
    rls_trace_respond_fn respond; /* the front end's, while in progress */
    void *owner;
    uint64_t start_ns, end_ns; /* ns since the Unix epoch */
    uint8_t trace_id[16];
    uint8_t span_id[8];
    uint8_t parent_id[8];
    uint8_t has_parent;
    uint8_t outcome; /* RLS_TRACE_OUT_* */
    uint8_t name_len;
    int8_t err; /* the RL_E* code rls_decide refused the ask with */
    char name[RLS_SPAN_NAME_MAX + 1]; /* NUL-terminated */
};

/* A span's ratelimit.outcome. */
enum {
    RLS_TRACE_OUT_OK = 0,
    RLS_TRACE_OUT_OVER_LIMIT,
    RLS_TRACE_OUT_SHADOW_REFUSED, /* allowed: the rule is in shadow mode */
    RLS_TRACE_OUT_FAILED_OPEN,    /* allowed: the store could not answer */
    RLS_TRACE_OUT_ERROR,          /* answered ERROR */
    RLS_TRACE_OUT_REFUSED,        /* rls_decide refused the ask itself */
    RLS_TRACE_OUTS
};

/* The outcome's attribute value ("ok", "over_limit", ...). */
const char *rls_trace_outcome_name(int outcome);

typedef struct rls_trace_opts_s {
    const char *endpoint; /* http://HOST[:PORT][/PATH]; kept by pointer */
    double sample;        /* the ratio of roots sampled, in [0, 1] */
    size_t max_spans;     /* the pool, per loop (> 0) */
    size_t batch;         /* spans per export at most (> 0) */
    uint64_t flush_ms;    /* export at least this often while spans wait */
    uint64_t timeout_ms;  /* one export's deadline */
    /* The resource: service.name, service.namespace (""/NULL: none),
     * service.instance.id, and ratelimit.store of every span; kept by
     * pointer. */
    const char *service, *service_ns, *instance, *store;
} rls_trace_opts_t;

#endif
