/* Envoy's ShouldRateLimit in protobuf's JSON mapping (envoy_json.c), for
 * the reference's HTTP form of the call (POST /json, envoy/http.c).
 *
 * No I/O and no decision here: a RateLimitRequest in JSON becomes the
 * protobuf wire form the gRPC front end hands envoy/rls.c, and the
 * RateLimitResponse envoy_rls.c encodes becomes JSON as Go's protojson
 * marshals it for envoy-ratelimit (lowerCamelCase names, fields in
 * declaration order, zero values left out, enums by name, a Duration as
 * "60s", a Struct as an object). So a call over /json is decided by
 * exactly the path a gRPC call is.
 *
 * The reader takes what protojson.Unmarshal takes for the message: both
 * the JSON names and the proto names ("hitsAddend", "hits_addend"),
 * integers as numbers (an exponent or a fraction of zeros allowed) or
 * strings, enums by name or number, null for a field not set; and refuses
 * what it refuses: an unknown or repeated field, a wrong type, invalid
 * UTF-8, a lone surrogate, anything after the object. Ours besides: a NUL
 * in a string (protobuf-c would cut the string there), more than
 * RLS_ENVOY_DESCRIPTORS_MAX descriptors or RLS_ENVOY_ENTRIES_MAX entries
 * (what envoy_rls.c refuses anyway), more than RLS_ENVOY_JSON_MEM_MAX
 * bytes of decoded structures. The schema fixes the nesting (5 levels),
 * and nothing is skipped without being read, so the work is linear in
 * the input. */
#ifndef RLS_NET_ENVOY_JSON_H
#define RLS_NET_ENVOY_JSON_H

#include <stddef.h>
#include <stdint.h>

#include "rl_buf.h"

/* What the decoded request may take in memory, whatever the input. */
#define RLS_ENVOY_JSON_MEM_MAX (8u << 20)

/* Decodes the RateLimitRequest p[0, n) (JSON; need not be terminated) and
 * appends its protobuf wire form (no gRPC prefix) to out. Returns 0;
 * RL_EINVAL with a one-line reason in err (errlen bytes) naming the byte
 * offset; RL_ENOMEM; or the buffer's RL_EFULL. Nothing is kept. */
int rls_envoy_json_request(const char *p, size_t n, rl_buf_t *out, char *err,
                           size_t errlen);

/* Appends the RateLimitResponse m[0, n) (protobuf wire form, no prefix)
 * as JSON to out, and sets *code to its overall_code (0 UNKNOWN, 1 OK, 2
 * OVER_LIMIT). Returns 0; RL_EINVAL when m does not decode or holds what
 * JSON cannot carry (a metadata number that is NaN or infinite, as
 * protojson refuses it); RL_ENOMEM or RL_EFULL. A metadata Value with no
 * kind (protobuf-c drops an empty string from a oneof) is written null. */
int rls_envoy_json_response(const uint8_t *m, size_t n, rl_buf_t *out,
                            int *code);

#endif
