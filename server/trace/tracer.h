/* Spans of decisions (tracer.c): one span per decision, sampled, kept in
 * a bounded pool and exported in batches over OTLP/HTTP (otlp.c encodes,
 * otlp_http.c posts), all on the loop that decided, never waiting on it.
 *
 * Each loop of --threads has its own tracer (pool, timer, exporter): no
 * lock, and N loops export to the collector on N connections.
 *
 * A span is one decision (rls_decide's answer, or its refusal of the ask):
 * name "ratelimit.decision", kind SERVER, the caller's traceparent as its
 * parent when it sent one, attributes ratelimit.rule, ratelimit.outcome,
 * ratelimit.store and ratelimit.latency_us, its start and end the ask's
 * arrival at the decider and its answer. Not one per batch: a batch mixes
 * the requests of many callers, so of many traces, and a batch span would
 * belong to none of them (its requests as links would cost as much as
 * spans, and say less).
 *
 * Sampling is parent-based, as envoy-ratelimit's (ParentBased of
 * TraceIDRatioBased): a valid traceparent's sampled flag decides; a
 * request without one is a root, sampled when its new trace id falls
 * under the ratio (the same test as OpenTelemetry's SDKs, so that every
 * instance agrees on a trace id).
 *
 * Bounded: a pool of max_spans spans per loop holds the spans in progress
 * and those waiting for export; a span that finds it empty is not taken
 * (dropped, counted). One export at a time, of up to `batch` spans, with a
 * deadline; its spans leave the pool when it is encoded. A failed export
 * (collector down, refused, timed out) drops its spans, counted; nothing
 * is retried. */
#ifndef RLS_TRACER_H
#define RLS_TRACER_H

#include <stddef.h>
#include <stdint.h>

#include <uv.h>

#include "rl_buf.h"
#include "rl_msg.h"
#include "trace/otlp_http.h"
#include "trace/span.h"
#include "trace/traceparent.h"

typedef struct rls_trace_stats_s {
    uint64_t sampled;         /* spans begun */
    uint64_t exported;        /* spans the collector took (2xx) */
    uint64_t dropped_full;    /* sampled, but the pool was empty */
    uint64_t dropped_export;  /* in an export that failed */
    uint64_t dropped_stopped; /* waiting when the tracer closed */
    uint64_t exports_ok;      /* exports answered 2xx */
    uint64_t exports_failed;  /* refused, unreachable, timed out */
} rls_trace_stats_t;

typedef struct rls_tracer_s {
    uv_loop_t *loop;
    rls_trace_opts_t o;
    uint64_t ratio_bound; /* roots: sampled when id's low 63 bits < this */
    uint64_t rng[2];      /* xorshift128+: ids */
    int64_t epoch_off_ns; /* unix ns = uv_hrtime() + this */
    rls_span_t *spans;    /* the pool, max_spans */
    rls_span_t *free;
    rls_span_t *head, *tail; /* ended, waiting for export */
    size_t queued;
    uv_timer_t timer;
    rls_otlp_http_t http;
    rl_buf_t body;    /* the export in flight's request */
    size_t in_flight; /* its spans */
    int started, closing;
    rls_trace_stats_t stats;
} rls_tracer_t;

/* Sets t up on loop: the pool, the flush timer, the exporter (o's
 * endpoint parsed; nothing is connected until the first export). Returns
 * 0, RL_EINVAL (a bad endpoint, with a reason in err) or RL_ENOMEM. */
int rls_tracer_start(rls_tracer_t *t, uv_loop_t *loop,
                     const rls_trace_opts_t *o, char *err, size_t errlen);

/* Whether an ask with this parent (NULL or invalid: none) is sampled,
 * and if so a span begun for it, with its start time, its ids and the
 * rule's name (name, len: cut to RLS_SPAN_NAME_MAX); the caller sets
 * respond and owner. NULL: not sampled, or sampled and dropped (the pool
 * empty, counted). Cheap when it says no: no clock, no id. */
rls_span_t *rls_trace_begin(rls_tracer_t *t, const rls_traceparent_t *parent,
                            const char *name, size_t len);

/* An rls_respond_fn for owner a span of rls_trace_begin: ends the span with
 * r's outcome, queues it for export, then passes r to the span's own
 * respond and owner. */
void rls_trace_respond(void *span, const rl_result_t *r);

/* Ends a span whose ask rls_decide refused (err: its RL_E* code): no
 * answer came, none will. */
void rls_trace_refused(rls_tracer_t *t, rls_span_t *sp, int err);

/* Exports what waits now (when no export is in flight). */
void rls_tracer_flush(rls_tracer_t *t);

/* Appends the rl_trace_* families to out (t NULL: nothing). Returns 0 or
 * RL_EFULL / RL_ENOMEM. */
int rls_tracer_metrics(const rls_tracer_t *t, rl_buf_t *out);

/* Stops the timer and the exporter (an export in flight is abandoned and
 * its spans counted as dropped, as are those waiting) and frees the pool
 * once no span is in progress: call it after the decider has answered
 * everything. Safe on a tracer never started (zeroed). The handles finish
 * closing with the loop's run. */
void rls_tracer_close(rls_tracer_t *t);

#endif
