/* The rate limit configuration from a control plane (xds_client.c):
 * rl-server's counterpart of envoy-ratelimit's CONFIG_TYPE=GRPC_XDS_SOTW,
 * which Envoy Gateway uses. One gRPC stream, the aggregated discovery
 * service (StreamAggregatedResources, as go-control-plane's sotw client
 * that envoy-ratelimit uses opens), in the state of the world: each
 * DiscoveryResponse carries every RateLimitConfig resource, one domain
 * each, and replaces the configuration whole.
 *
 * The loop keeps a response's bytes only (bounded by RLS_XDS_MSG_MAX,
 * checked on the frame's length before anything is kept); it is decoded,
 * turned into YAML (envoy/xds_conf.h) and built off the loop, on the
 * same thread as an --envoy-config reload (policy/rebuild.h), and
 * installed by the caller's install callback, as a reload installs. A
 * configuration that builds is ACKed (version_info and response_nonce); one
 * that does not is NACKed with the loader's FILE:LINE messages in error_detail,
 * and the one in force stays. Builds start at least 250 ms apart (at most 4
 * installs a second); responses that come while one is built or before the next
 * may start wait, the newest replacing older ones (the state of the world makes
 * them obsolete: they are neither ACKed nor NACKed, and counted).
 *
 * Transport: HTTP/2 by nghttp2 as a client over a libuv TCP connection on
 * the server's loop, in cleartext or over TLS (OpenSSL over two memory
 * BIOs: the control plane's certificate verified against a CA and a
 * name, ALPN h2, and a client certificate for mutual TLS, as Envoy
 * Gateway requires); the address is resolved by uv_getaddrinfo each time.
 * A connection that fails, closes, does not connect within 5 s, or does
 * not answer a PING within 330 s (above the 5 minutes gRPC servers enforce
 * between a client's PINGs; TCP keepalive probes beneath from 30 s idle)
 * is dropped and made again after a capped exponential backoff with
 * jitter (half to all of the current step); the step starts again from
 * the minimum once a response arrives. The
 * configuration in force stays while the control plane is away.
 *
 * What the control plane may make the loop decode is bounded: a header
 * block at 16 KiB as decoded (HPACK references counted by what they
 * expand to; advertised as SETTINGS_MAX_HEADER_LIST_SIZE), 4 blocks a
 * stream (1xx answers included), 4 CONTINUATIONs a block. Past a bound the
 * connection is dropped (counted) and made again after the backoff. */
#ifndef RLS_NET_XDS_CLIENT_H
#define RLS_NET_XDS_CLIENT_H

#include <stddef.h>
#include <stdint.h>

#include <uv.h>

#include "envoy/conf.h"
#include "policy/rebuild.h"
#include "envoy/xds_conf.h"
#include "rl_buf.h"

/* Receives each configuration that built (and its reference). */
typedef void (*rls_xds_install_fn)(void *arg, rls_envoy_conf_t *conf);

typedef struct rls_xds_opts_s {
    const char *host; /* the control plane: a name or an address */
    int port;
    const char *node_id;     /* Node.id (envoy-ratelimit: "default") */
    uint64_t backoff_min_ms; /* first wait before a reconnection */
    uint64_t backoff_max_ms; /* its cap */
    /* TLS to the control plane (NULL: cleartext): the CA that signs its
     * certificate (turns TLS on), the name it must hold (NULL: host),
     * and our certificate and key for mutual TLS (NULL: none). */
    const char *tls_ca;
    const char *tls_server_name;
    const char *tls_cert;
    const char *tls_key;
} rls_xds_opts_t;

typedef struct rls_xds_stats_s {
    uint64_t accepted; /* configurations installed (and ACKed) */
    uint64_t rejected; /* refused (NACKed), the one in force kept */
    /* Replaced by a newer version before their build (neither ACKed nor
     * NACKed): builds are paced, at most 4 a second. */
    uint64_t superseded;
    uint64_t connects;    /* connections made (HTTP/2 up) */
    uint64_t disconnects; /* connections lost or dropped */
    /* Connections dropped because a header block passed HEADERS_MAX as
     * decoded or a stream carried too many blocks (an HPACK bomb). */
    uint64_t header_drops;
    int connected; /* a connection is up now */
} rls_xds_stats_t;

typedef struct rls_xds_conn_s rls_xds_conn_t;

/* Embedded in its owner, which outlives the loop's run. */
typedef struct rls_xds_s {
    uv_loop_t *loop;
    rls_xds_opts_t o;
    rls_xds_install_fn install;
    void *arg;
    uv_timer_t timer; /* the backoff, then the connect deadline, then PINGs */
    int timer_state;
    uv_timer_t pace; /* the next build, when versions come too fast */
    int pacing;      /* pace is started */
    int built_once;  /* last_build_ms holds when the last build started */
    uint64_t last_build_ms;
    uv_getaddrinfo_t gai;
    int resolving;
    rls_xds_conn_t *c; /* the connection, NULL between them */
    uint64_t gen;      /* connections made so far: whose ACK is whose */
    uint64_t backoff_ms;
    uint64_t rng;  /* the backoff's jitter */
    char *version; /* the version in force, for requests; NULL before */
    rls_rebuild_t rb;
    /* The newest response not built yet and the one being built, each one
     * gRPC message as received (the 5-byte prefix, then the
     * DiscoveryResponse): all the loop keeps of them. Decoding, the YAML
     * and the build happen on the rebuild's thread, which touches the
     * building fields (building, bversion to build_rc) only while it
     * runs. */
    rl_buf_t pending, building;
    int has_pending, has_building;
    uint64_t pending_gen, building_gen;
    char *bversion, *bnonce; /* the built one's, owned */
    int decode_rc;
    char decode_err[256];
    rls_envoy_conf_t *built;
    int build_rc;
    rls_diag_t diag;
    rls_xds_stats_t stats;
    struct ssl_ctx_st *tls; /* from o's tls_*, NULL: cleartext */
    int started, closing;
    int adopt_fd; /* rls_xds_start_fd's socket, until taken; else -1 */
} rls_xds_t;

/* Starts connecting (at once). x is the caller's and must stay valid until
 * the loop ends; o's strings too. Returns 0; RL_EINVAL when the TLS files
 * do not load (err says which and why); RL_ENOMEM; or RL_EIO when the
 * loop gives no handle (err says why). Nothing is started unless 0. */
int rls_xds_start(rls_xds_t *x, uv_loop_t *loop, const rls_xds_opts_t *o,
                  rls_xds_install_fn install, void *arg, char *err,
                  size_t errlen);

/* As rls_xds_start, but the first connection is the connected socket fd
 * (tests and fuzzing: a socketpair's end), taken as if a connect to
 * host:port had just succeeded; later ones connect to host:port. fd is
 * x's from the call on (closed on failure too). */
int rls_xds_start_fd(rls_xds_t *x, uv_loop_t *loop, const rls_xds_opts_t *o,
                     int fd, rls_xds_install_fn install, void *arg, char *err,
                     size_t errlen);

/* Closes the connection and the handles (idempotent; fine if never
 * started); a build under way is discarded when it ends. */
void rls_xds_close(rls_xds_t *x);

/* Appends the client's counters to a /metrics page. Returns 0 or the
 * buffer's error. */
int rls_xds_metrics(const rls_xds_t *x, rl_buf_t *out);

#endif
