/* The native protocol's front end (conn.c): its listener and the set of
 * client connections, frames in, responses out. The server drives it as
 * every front end, through rls_conns_frontend (net/frontend.h); the
 * connections hand their requests to rls_decide and get the answers back
 * through rls_conn_respond. Nothing here knows the server itself: a
 * stopping set reports that its last connection closed through the front
 * end's on_empty. */
#ifndef RLS_NET_CONN_H
#define RLS_NET_CONN_H

#include <stddef.h>
#include <stdint.h>

#include <uv.h>

#include "core/decide.h"
#include "net/frontend.h"
#include "net/stream.h"
#include "net/tls.h"
#include "rl_msg.h"
#include "base/util.h"

/* Why frames were refused, for metrics. */
enum {
    RLS_REJECT_FLAG,    /* flag byte not 0: connection closed */
    RLS_REJECT_SIZE,    /* over --max-frame: connection closed */
    RLS_REJECT_DECODE,  /* payload not a CheckRequest */
    RLS_REJECT_INVALID, /* decoded, but breaks a request rule */
    RLS_REJECT_RULE,    /* names an unknown rule */
    RLS_REJECT_ID0,     /* id 0, which is the server's (notices) */
    RLS_REJECT_INLINE,  /* an inline limit this server does not take */
    RLS_REJECT_MAX
};

/* Why the server closed a connection that sent nothing useful, for
 * metrics. */
enum {
    RLS_CLOSE_IDLE,          /* no whole frame for --idle-timeout */
    RLS_CLOSE_FRAME_TIMEOUT, /* a frame unfinished after --frame-timeout-ms */
    RLS_CLOSE_PARTIAL,       /* among the largest over --max-partial-bytes */
    RLS_CLOSE_MAX
};

typedef struct rls_conn_stats_s {
    uint64_t decisions[4]; /* by rl_code_t */
    uint64_t rejected[RLS_REJECT_MAX];
    uint64_t conns_accepted;
    uint64_t conns_refused;  /* over --max-connections */
    uint64_t conns_overflow; /* closed for not reading their responses */
    uint64_t conns_open;
    uint64_t inflight; /* requests read and not yet answered */
    uint64_t closed[RLS_CLOSE_MAX];
    uint64_t input_bytes; /* held by input buffers, all connections */
} rls_conn_stats_t;

/* What the native listener is held to: its transport (the set's opts)
 * and its protocol's own limits. */
typedef struct rls_conns_opts_s {
    rls_stream_opts_t stream;
    uint32_t max_frame;    /* largest payload of a frame (--max-frame) */
    uint32_t max_inflight; /* a connection's requests unanswered before it is
                              not read (--max-inflight) */
} rls_conns_opts_t;

typedef struct rls_conns_s {
    rls_frontend_t fe; /* its life, as the server sees it */
    uv_tcp_t listener; /* rls_conns_listen's */
    int listening;
    uv_loop_t *loop;
    uint32_t max_frame;    /* rls_conns_opts_t's; the rest is in set.opts */
    uint32_t max_inflight;
    rls_decider_t *decider;
    uv_idle_t spin;    /* keeps poll from blocking while reads are deferred */
    /* Its connections' transport (net/stream.h): the shared read buffer
     * (connections with no partial frame read here; under TLS, the
     * ciphertext), TLS (rls_conns_set_tls; NULL: plaintext) and its
     * counters, the TLS clients seen on plaintext, and the one timer of
     * its idle, frame and handshake deadlines (set.sweep). */
    rls_streams_t set;
    rls_list_t all;    /* every open connection, least recently active
                          first */
    rls_list_t partial; /* connections in the middle of a frame, the
                           oldest frame first */
    rls_list_t dirty;  /* connections with responses to write */
    rls_list_t resume; /* connections to read again */
    int stopping;      /* refuse new connections... */
    int draining;      /* ...unless still draining (then serve them) */
    uint64_t refusal_logged_ms;  /* loop time of the last refusal warning */
    uint64_t refused_unlogged;   /* refusals since that warning */
    uint64_t shed_logged_ms;     /* the same for --max-partial-bytes */
    uint64_t shed_unlogged;
    rls_conn_stats_t stats;
    uint8_t *pbuf;          /* plaintext out of TLS, READ_CHUNK bytes */
    rls_list_t handshaking; /* connections mid-handshake, oldest first */
} rls_conns_t;

/* Prepares an empty set (and its idle and timer handles) on loop, held
 * to o (copied). */
void rls_conns_init(rls_conns_t *s, uv_loop_t *loop, const rls_conns_opts_t *o,
                    rls_decider_t *decider);

/* Closes the set's own handles (its listener too); every connection must
 * be closed already. */
void rls_conns_free(rls_conns_t *s);

/* Binds host:port (port 0: any) and accepts connections into the set.
 * Returns 0, or RL_EADDR with err (errlen bytes) saying why, nothing left
 * listening. */
int rls_conns_listen(rls_conns_t *s, const char *host, int port, char *err,
                     size_t errlen);

/* TLS from now on (right after listen, before any connection): every
 * connection speaks TLS under tls (which outlives the set's connections'
 * start), ALPN none of its own (the client's list must be empty or name
 * "rl1"); a handshake not done within --tls-handshake-timeout-ms is
 * closed. */
void rls_conns_set_tls(rls_conns_t *s, rls_tls_t *tls);

/* The set as a front end (net/frontend.h). */
rls_frontend_t *rls_conns_frontend(rls_conns_t *s);

/* A listener's connection callback goes here (rls_conns_listen's does;
 * tests that listen on something else call it themselves). */
void rls_conns_accept(rls_conns_t *s, uv_stream_t *listener, int status);

/* The decider's respond callback: owner is the connection. */
void rls_conn_respond(void *owner, const rl_result_t *r);

void rls_conns_flush(rls_conns_t *s);  /* one write per dirty connection */
void rls_conns_resume(rls_conns_t *s); /* read connections under their limit */

/* Sends every open connection the GOAWAY notice (id 0, ERROR, "server is
 * shutting down") and keeps serving it until the client closes. Returns the
 * number of connections told. */
size_t rls_conns_goaway(rls_conns_t *s);

void rls_conns_close(rls_conns_t *s); /* close every connection at once */

#endif
