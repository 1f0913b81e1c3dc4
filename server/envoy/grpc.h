/* The --grpc listener (grpc.c): Envoy's rate limit service over HTTP/2
 * cleartext (h2c with prior knowledge, as Envoy's gRPC client speaks it),
 * with nghttp2 for HTTP/2 and envoy/rls.c for the calls; or, with
 * --tls-cert, over TLS (net/tls.h, ALPN h2) as Envoy's envoy_grpc
 * cluster with a TLS transport_socket speaks it. It runs on
 * the server's loop and decides its descriptors through rls_decide; the
 * server drives it as every front end (net/frontend.h, rls_grpc_frontend):
 * flushed once per loop iteration, told when to say GOAWAY and close.
 *
 * Limits: --max-connections gRPC connections (apart from native ones; at
 * the cap a new one evicts the one that has done least, see grpc.c),
 * --grpc-max-streams concurrent streams per connection (SETTINGS; streams
 * over it are refused with RST_STREAM REFUSED_STREAM), a header list of
 * RLS_GRPC_HEADERS_MAX bytes (past it the stream is reset at once; the
 * second such stream ends the connection), a message of --max-frame bytes
 * (past it RESOURCE_EXHAUSTED), a request whole within --frame-timeout-ms
 * (past it DEADLINE_EXCEEDED), answers taken by the client within
 * --frame-timeout-ms and unsent answers within --max-output per
 * connection (past either the connection is closed), the bodies of all
 * streams together within --max-partial-bytes (past it RESOURCE_EXHAUSTED
 * for the stream that would pass it), --idle-timeout counted from the
 * last request or answer (an open grpc.health.v1 Watch is neither), and
 * RLS_GRPC_WATCHES_PER_CONN / RLS_GRPC_WATCHES_MAX Watch streams. Per round
 * (flush to flush) a connection is read for at most a fixed budget of bytes and
 * of decoded header bytes. A connection holds no input buffer but what nghttp2
 * left of a read when its budget ran out, and at most its streams' messages. */
#ifndef RLS_NET_GRPC_H
#define RLS_NET_GRPC_H

#include <stddef.h>
#include <stdint.h>

#include <uv.h>

#include "core/decide.h"
#include "envoy/rls.h"
#include "net/frontend.h"
#include "envoy/health.h"
#include "net/tls.h"
#include "net/stream.h"
#include "rl_buf.h"

#define RLS_GRPC_HEADERS_MAX 8192
/* grpc.health.v1 Watch streams open at once, per connection and in all
 * (past either a Watch is answered RESOURCE_EXHAUSTED): each holds a
 * stream (about 1 KB with nghttp2's) and no more, whatever its client
 * reads. */
#define RLS_GRPC_WATCHES_PER_CONN 16
#define RLS_GRPC_WATCHES_MAX 4096

typedef struct rls_grpc_stats_s {
    uint64_t calls[RLS_GRPC_CODES]; /* calls answered, by grpc-status */
    uint64_t http_errors;           /* answered with an HTTP error (415) */
    uint64_t conns_accepted;
    uint64_t conns_refused; /* over --max-connections, or stopping */
    uint64_t conns_open;
    uint64_t conns_idle;           /* closed after --idle-timeout */
    uint64_t conns_protocol;       /* ended by an HTTP/2 protocol error */
    uint64_t conns_headers;        /* ended for header lists over the limit */
    uint64_t conns_output;         /* unsent answers over --max-output */
    uint64_t conns_output_timeout; /* answers not taken in time */
    uint64_t conns_evicted;        /* closed to make room for a new one */
    uint64_t conns_memory;         /* deferred input over --max-partial-bytes */
    uint64_t streams_refused;      /* over --grpc-max-streams */
    uint64_t streams_reset;        /* reset by the client before the answer */
    uint64_t streams_timeout;      /* not whole within --frame-timeout-ms */
    uint64_t streams_shed;         /* refused at --max-partial-bytes */
    uint64_t streams_oversized;    /* reset: header list over the limit */
    uint64_t reads_deferred;       /* a connection over its round's budget */
    uint64_t health_checks;        /* grpc.health.v1 Check calls answered */
    uint64_t health_watches;       /* Watch streams started */
    uint64_t watches_open;         /* Watch streams open now */
    uint64_t watches_refused;      /* over RLS_GRPC_WATCHES_* */
} rls_grpc_stats_t;

typedef struct rls_grpc_s rls_grpc_t;

/* What the listener is held to: its transport (net/stream.h) and its
 * protocol's and Envoy service's own settings. */
typedef struct rls_grpc_opts_s {
    rls_stream_opts_t stream;
    const char *host;      /* --grpc's; outlives the listener */
    int port;              /* 0: any; < 0: no listener (--threads: the
                              connections are handed over, adopt) */
    uint32_t max_frame;    /* largest message (--max-frame) */
    uint32_t max_streams;  /* concurrent streams per connection
                              (--grpc-max-streams) */
    int shadow_mode;       /* --envoy-shadow-mode */
    int quota_mode;        /* --envoy-quota-mode */
    int response_headers;  /* --envoy-response-headers */
    int response_metadata; /* --envoy-response-metadata */
} rls_grpc_opts_t;

/* Listens on o's host:port, held to o (copied). Returns 0 with *out
 * set, or RL_EADDR (cannot listen) or RL_ENOMEM with err (errlen bytes)
 * saying why and nothing left open. */
int rls_grpc_start(rls_grpc_t **out, uv_loop_t *loop, const rls_grpc_opts_t *o,
                   rls_decider_t *decider, char *err, size_t errlen);

/* Accepts the connection waiting on listener (status: its connection
 * callback's) as one of g's, served and closed like those of g's own
 * listener. g's listener's callback goes here; the fuzz target calls it
 * from a listener of its own on a Unix socket, which cannot run out of
 * ports as loopback TCP does. */
void rls_grpc_accept(rls_grpc_t *g, uv_stream_t *listener, int status);

/* The listener as a front end (net/frontend.h); its on_empty is called
 * when the last connection closed after goaway. */
rls_frontend_t *rls_grpc_frontend(rls_grpc_t *g);

/* The Envoy configuration in force from now on (the listener takes the
 * reference; NULL: none). Calls already started keep theirs. */
void rls_grpc_set_conf(rls_grpc_t *g, rls_envoy_conf_t *conf);

/* Where calls count envoy-ratelimit's statistics (envoy/stats.h;
 * NULL: nowhere). The table must outlive the listener's calls. */
void rls_grpc_set_estats(rls_grpc_t *g, struct rls_estats_s *t);

/* Ends a round: connections deferred over their budget go on, and what
 * the connections have to send is sent. At least once per loop
 * iteration. */
void rls_grpc_flush(rls_grpc_t *g);

/* TLS from now on (before any connection: right after start): every
 * connection speaks TLS under tls (NULL: h2c), which outlives the
 * listener's connections' start, with ALPN h2. Its handshakes are counted
 * in the front end's tls stats. */
void rls_grpc_set_tls(rls_grpc_t *g, rls_tls_t *tls);

/* How the listener's grpc.health.v1 learns the server's status: fn(arg)
 * is 1 while the server takes work (rls_server_takes_work), 0 when not;
 * it is called for each Check and, while Watch streams are open, every
 * 100 ms (a change is pushed to them). Without one (NULL, the default)
 * the status is SERVING until the listener drains. */
void rls_grpc_set_health(rls_grpc_t *g, rls_health_fn fn, void *arg);

/* Serves Envoy's RLQS (StreamRateLimitQuotas) with q from now on (before
 * any connection: right after start); the listener takes it and frees it
 * with itself. NULL (the default): the method is UNIMPLEMENTED. */
struct rls_rlqs_s;
void rls_grpc_set_rlqs(rls_grpc_t *g, struct rls_rlqs_s *q);
struct rls_rlqs_s *rls_grpc_rlqs(const rls_grpc_t *g);

/* While the server drains, connections are still accepted and served. */
void rls_grpc_set_draining(rls_grpc_t *g, int draining);

/* Stops accepting and sends every connection GOAWAY; each is closed once
 * its streams are answered and written. Returns the connections told. */
size_t rls_grpc_goaway(rls_grpc_t *g);

/* 1 when no connection is open. */
int rls_grpc_idle(const rls_grpc_t *g);

/* Overrides the per-round budget of a connection (bytes fed to nghttp2,
 * header-list bytes decoded; 64 KiB each): the fuzz target uses small
 * ones. */
void rls_grpc_set_budget(rls_grpc_t *g, size_t feed, size_t decode);

/* Closes every connection at once (the stop's grace ran out). */
void rls_grpc_close_all(rls_grpc_t *g);

/* Closes the handles; memory goes when the last one is closed and no
 * stream waits for an answer. NULL is fine. */
void rls_grpc_free(rls_grpc_t *g);

/* What its calls share (the configuration in force, the statistics):
 * the other front ends of Envoy's service (envoy/http.h) start their
 * calls under it. Valid until the listener is freed. */
rls_envoy_ctx_t *rls_grpc_envoy_ctx(rls_grpc_t *g);

const rls_grpc_stats_t *rls_grpc_stats(const rls_grpc_t *g);
const rls_envoy_stats_t *rls_grpc_envoy_stats(const rls_grpc_t *g);

/* Appends the gRPC part of the /metrics page. Returns 0 or the buffer's
 * error. */
int rls_grpc_metrics(const rls_grpc_t *g, rl_buf_t *out);

#endif
