/* Spans as OTLP (otlp.c): an ExportTraceServiceRequest encoded with
 * protobuf-c from OpenTelemetry's own messages (proto/opentelemetry/,
 * rl_otel_proto), one resource (the service) and one scope (rl-server). */
#ifndef RLS_OTLP_H
#define RLS_OTLP_H

#include <stddef.h>

#include "rl_buf.h"
#include "trace/span.h"

/* Encodes the n spans from first (along ->next) as one request, the
 * resource and ratelimit.store from o, into out (appended). Returns 0,
 * RL_ENOMEM or RL_EFULL (out's cap). */
int rls_otlp_encode(const rls_trace_opts_t *o, const rls_span_t *first,
                    size_t n, rl_buf_t *out);

#endif
