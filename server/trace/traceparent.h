/* W3C Trace Context's traceparent header (traceparent.c): parsed into the
 * caller's trace id, parent span id and flags, with no I/O and no
 * allocation, so that a front end can read it from gRPC metadata or an
 * HTTP header and the fuzzer can feed it anything.
 *
 * The header is "VERSION-TRACEID-PARENTID-FLAGS": two, 32, 16 and two
 * lowercase hex digits. Version ff is invalid; version 00 is exactly those
 * 55 bytes; a higher version may carry more after a '-' at byte 55, which
 * is ignored (the specification's rule for versions it does not know).
 * All-zero trace or parent ids are invalid. */
#ifndef RLS_TRACEPARENT_H
#define RLS_TRACEPARENT_H

#include <stddef.h>
#include <stdint.h>

#define RLS_TRACEPARENT_LEN 55

/* The sampled bit of the flags (W3C: trace-flags, bit 0). */
#define RLS_TRACE_FLAG_SAMPLED 0x01

typedef struct rls_traceparent_s {
    uint8_t trace_id[16];
    uint8_t span_id[8]; /* the caller's span: our span's parent */
    uint8_t flags;
    uint8_t valid; /* 1 once parsed; 0 none or invalid */
} rls_traceparent_t;

/* Parses the n bytes at s (no NUL needed; spaces and tabs around it, as an
 * HTTP field value may carry, are skipped) into *out. Returns 0 with
 * out->valid 1, or RL_EINVAL with *out cleared (valid 0). */
int rls_traceparent_parse(const char *s, size_t n, rls_traceparent_t *out);

/* Takes one more traceparent field of a request into *tp: the first one
 * parsed; a second one makes it invalid (a request with two is treated as
 * having none, as the specification asks of a header it cannot trust).
 * *seen counts the fields (starts at 0). */
void rls_traceparent_take(rls_traceparent_t *tp, unsigned *seen, const char *s,
                          size_t n);

#endif
