/* Rate limit configuration from a control plane (xds_conf.c): the pure
 * half of the --envoy-xds client (envoy/xds_client.c has the I/O). A
 * state-of-the-world DiscoveryResponse carries every RateLimitConfig
 * resource (go-control-plane ratelimit/config/ratelimit/v3/rls_conf.proto);
 * each becomes one envoy-ratelimit YAML document, one domain, as
 * envoy-ratelimit's own client does (its src/config/config_xds.go), and
 * the documents are built by rls_envoy_conf_build: validated and
 * swapped exactly as --envoy-config files are.
 *
 * Every string from the control plane is written double-quoted and
 * escaped, so no value can add YAML of its own; every field the message
 * carries is written (a false bool, an empty string and the unit UNKNOWN
 * are left out, as in a file that does not mention them), so a key the
 * configuration loader does not know yet is refused with FILE:LINE as in a
 * file, never dropped silently.
 *
 * Bounds, checked before memory is reserved: the message (RLS_XDS_MSG_MAX),
 * the nesting of descriptors and metadata (RLS_XDS_DEPTH_MAX, checked on
 * the wire before protobuf-c recurses), the memory the decoder may take
 * (RLS_XDS_DECODE_MEM_MAX) and each YAML document (RLS_RULES_FILE_MAX). */
#ifndef RLS_POLICY_XDS_CONF_H
#define RLS_POLICY_XDS_CONF_H

#include <stddef.h>
#include <stdint.h>

#include "envoy/conf.h"

#define RLS_XDS_TYPE_URL                                                       \
    "type.googleapis.com/ratelimit.config.ratelimit.v3.RateLimitConfig"
#define RLS_XDS_MSG_MAX (4u << 20)
#define RLS_XDS_DEPTH_MAX 32
#define RLS_XDS_DECODE_MEM_MAX (64u << 20)
#define RLS_XDS_RESOURCES_MAX 1024

/* One DiscoveryResponse, decoded. Strings are NUL-terminated and owned. */
typedef struct rls_xds_update_s {
    char *version;  /* version_info */
    char *nonce;    /* nonce */
    char *type_url; /* the response's type_url */
    size_t n;       /* resources, one YAML document (one domain) each */
    char **names;   /* "xds:<resource name>", the documents' FILE */
    char **bufs;    /* the YAML */
    size_t *lens;
} rls_xds_update_t;

/* Decodes a DiscoveryResponse (msg, len: one gRPC message's body) into u
 * and turns its resources into YAML. Returns 0; RL_EDECODE when msg is
 * not a DiscoveryResponse (or is larger than RLS_XDS_MSG_MAX): nothing to
 * ACK or NACK, u empty; RL_EINVAL when it is one but its resources cannot
 * be converted (a type other than RateLimitConfig, a resource that does
 * not decode, too deep, too large): u has version and nonce (to NACK) and
 * err says why; RL_ENOMEM. Free u with rls_xds_update_free in every case. */
int rls_xds_update_decode(const uint8_t *msg, size_t len, rls_xds_update_t *u,
                          char *err, size_t errlen);

/* Frees what u holds (u itself is the caller's); u is empty after. */
void rls_xds_update_free(rls_xds_update_t *u);

/* Builds the configuration from u's documents: rls_envoy_conf_build,
 * same returns and diagnostics (FILE being "xds:<resource name>"). */
int rls_xds_update_build(const rls_xds_update_t *u, rls_envoy_conf_t **out,
                         rls_diag_t *diag);

/* Writes one RateLimitConfig (msg, len: its serialized bytes, an Any's
 * value) as YAML into out (appended; out's cap bounds the size). Returns
 * 0, RL_EDECODE (not a RateLimitConfig, or nested deeper than
 * RLS_XDS_DEPTH_MAX), RL_EFULL or RL_ENOMEM. name, when not NULL, receives
 * the resource's name (owned by the caller, free()). */
struct rl_buf_s;
int rls_xds_conf_yaml(const uint8_t *msg, size_t len, struct rl_buf_s *out,
                      char **name);

#endif
