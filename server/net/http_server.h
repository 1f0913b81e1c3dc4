/* A small HTTP/1.1 server on a libuv loop (http_server.c): keep-alive, one
 * request at a time per connection, no request bodies unless the owner
 * takes them (up to its cap, with a Content-Length), bounded
 * connections and deadlines. What each request gets is the owner's route,
 * answered at once or later (rls_http_answer). */
#ifndef RLS_NET_HTTP_SERVER_H
#define RLS_NET_HTTP_SERVER_H

#include <stddef.h>
#include <stdint.h>

#include <uv.h>

#include "net/http.h"
#include "net/tls.h"

/* Idle limit of a kept-alive connection: the next request must start
 * within this long of the previous response, and a response must be taken
 * within this long of its request. */
#define RLS_HTTP_IDLE_MS 10000
/* Header deadline: a request head must arrive whole within this long of the
 * connection opening (the first request) or of its first byte (later ones);
 * never more than the idle limit. One deadline per head rather than per
 * byte, so a client that trickles bytes (slowloris) is closed as fast as an
 * idle one. */
#define RLS_HTTP_HEAD_MS 2000
/* Connections open at once. A new connection over the cap takes the place
 * of the one that has done least: first one that is closing, then the
 * oldest that has not completed a request (idle or slow), then the longest
 * idle kept-alive one, then the oldest one in the middle of a request; one
 * writing a response never gives way. Only when none can (or closed ones
 * still hold memory) is the new one answered 503 and closed. So a flood of
 * connections that send nothing useful cannot keep /healthz from being
 * answered. */
#define RLS_HTTP_CONNS_MAX 64
/* Largest response: the /metrics page is a few KiB, plus about 250 bytes
 * per rule that has seen traffic. */
#define RLS_HTTP_OUT_MAX (16u << 20)

typedef struct rls_http_server_s rls_http_server_t;
/* One connection, as a route sees it (opaque). */
typedef struct rls_http_conn_s rls_http_conn_t;

/* The statuses counted one by one in rls_http_stats_t.status; any other
 * is counted in the last slot. */
#define RLS_HTTP_STATUSES(X)                                                   \
    X(200) X(400) X(403) X(404) X(405) X(414) X(429) X(431) X(500) X(503)
#define RLS_HTTP_NSTATUS 11

/* Index of a status in rls_http_stats_t.status; RLS_HTTP_NSTATUS - 1 for
 * any status not listed. */
unsigned rls_http_status_slot(int status);
/* The status of a slot, 0 for the last ("other"). */
int rls_http_slot_status(unsigned slot);

/* What the listener has done with connections, since it started. */
typedef struct rls_http_stats_s {
    uint64_t accepted;  /* given a connection struct */
    uint64_t evicted;   /* closed to make room for a newer connection */
    uint64_t refused;   /* answered 503 and closed: full, none could go */
    uint64_t timed_out; /* closed at the header deadline or idle limit */
    /* Responses by status (rls_http_status_slot), those the listener gives
     * itself (400, 414, 431) included; not the 503 of `refused`. */
    uint64_t status[RLS_HTTP_NSTATUS];
} rls_http_stats_t;

/* What a route answers. body is the route's and must stay valid until the
 * route is called again or the server closes (the response is copied out
 * before the route returns to the loop). */
typedef struct rls_http_reply_s {
    int status;
    const char *reason;
    const char *ctype;  /* NULL: text/plain; charset=utf-8 */
    const void *body;
    size_t body_len;
    const char *extra;  /* more header lines, each ending in CRLF, or NULL */
    int close;          /* close the connection after this response */
    /* Set by the server before the route runs: the connection asking. */
    rls_http_conn_t *conn;
    /* Set by a route that answers later: it has arranged for exactly one
     * rls_http_answer(conn, ...) call (which may even have happened before
     * the route returned), and the rest of *r is ignored. */
    int pending;
} rls_http_reply_t;

/* Answers one request: *r arrives as a 404 and the route overwrites it, or
 * sets r->pending. A HEAD request gets the headers only. */
typedef void (*rls_http_route_fn)(void *arg, const rls_http_req_t *q,
                                  rls_http_reply_t *r);

/* Fills *r with a plain-text reply; returns 0. */
int rls_http_reply_text(rls_http_reply_t *r, int status, const char *reason,
                        const char *body);

/* Binds host:port and serves on loop (a port below 0: binds nothing and
 * serves the connections it adopts). Returns 0 with *out set, or a
 * negative libuv error with nothing left open. */
int rls_http_server_start(rls_http_server_t **out, uv_loop_t *loop,
                          const char *host, int port, rls_http_route_fn route,
                          void *arg);

/* Serves the connected socket fd as if the listener had just accepted it
 * (tests and fuzzing: a socketpair's end), under the same cap, deadlines
 * and TLS. fd is the server's from the call on (closed when refused, or
 * when the listener is closing). */
void rls_http_server_adopt(rls_http_server_t *h, int fd);

/* Its connections' set (net/stream.h), for --threads' hand-off. */
struct rls_streams_s *rls_http_server_streams(rls_http_server_t *h);

/* The port the listener is bound to, or a negative libuv error. */
int rls_http_server_port(const rls_http_server_t *h);

/* Answers the request a route left pending on c. *r is copied before this
 * returns. If c was closed meanwhile (client gone, evicted, deadline,
 * stop), the answer is dropped and c freed: a connection's memory is kept
 * while an answer is owed, so c is always valid here, exactly once per
 * pending request. */
void rls_http_answer(rls_http_conn_t *c, const rls_http_reply_t *r);

/* Per-connection memory for the route: `size` bytes, zeroed when the
 * connection opens, valid until its pending answer (if any) is given. Set
 * before the first connection is accepted (right after start). */
void rls_http_server_set_ctx_size(rls_http_server_t *h, size_t size);
void *rls_http_conn_ctx(rls_http_conn_t *c);

/* The client's address ("10.0.0.7", "?" when gone), for a log line about
 * what it asked (the admin listener's resets). */
void rls_http_conn_peer(const rls_http_conn_t *c, char *out, size_t len);

/* Stops taking work, as a server does when it stops: the listener closes,
 * connections between requests close, and a request under way (a head
 * being read, an answer pending or being written) is answered with
 * "Connection: close", after which its connection closes. NULL is
 * ignored. */
void rls_http_server_stop(rls_http_server_t *h);

/* fn(arg) is called when the last connection of a stopped listener has
 * closed (from its close callback). */
void rls_http_server_on_empty(rls_http_server_t *h, void (*fn)(void *arg),
                              void *arg);

/* Connections still allocated (closing ones and ones owed an answer
 * included); 0 once a stopped listener has nothing left to answer. */
unsigned rls_http_server_live(const rls_http_server_t *h);

/* Overrides the limits above (tests use a short idle limit), right after
 * start, before any connection: each deadline list is in order by its one
 * length. The deadlines' sweep period follows (a quarter of the shortest
 * deadline, 10 to 250 ms: a deadline fires up to that late). NULL is
 * ignored. */
void rls_http_server_set_limits(rls_http_server_t *h, uint64_t idle_ms,
                                unsigned max_conns);

/* Request bodies from now on (right after start): a request may carry
 * up to max_body bytes with a Content-Length, read whole before the
 * route runs (rls_http_req_t.body), within a header deadline of its own
 * after the head's. Over it: 413 and the connection closed; a
 * Transfer-Encoding: 411. 0 (the default): a request with a body gets
 * 400 and the connection closed. A client that sends "Expect:
 * 100-continue" is told to go on. NULL is ignored. */
void rls_http_server_set_max_body(rls_http_server_t *h, size_t max_body);

/* Overrides RLS_HTTP_HEAD_MS (tests), as rls_http_server_set_limits:
 * before any connection, the sweep period following. NULL is ignored. */
void rls_http_server_set_head_ms(rls_http_server_t *h, uint64_t head_ms);

/* HTTPS from now on (set right after start, before any connection):
 * every connection speaks TLS under tls (NULL: plaintext; it outlives
 * the listener's connections' start) with ALPN http/1.1; name ("http",
 * "metrics", a static string) labels its log lines either way. The handshake
 * must be done within the header deadline. */
void rls_http_server_set_tls(rls_http_server_t *h, rls_tls_t *tls,
                             const char *name);

/* Its TLS clients while it speaks no TLS, or NULL when it does. */
const rls_tls_plain_t *rls_http_server_plain_stats(const rls_http_server_t *h);

/* Its handshakes, or NULL when it speaks no TLS. */
const rls_tls_stats_t *rls_http_server_tls_stats(const rls_http_server_t *h);

/* The listener's counters, owned by h and valid until it is closed. */
const rls_http_stats_t *rls_http_server_stats(const rls_http_server_t *h);

/* Closes the listener and every connection; the state is freed by the last
 * close callback (or the last answer owed to a closed connection). NULL is
 * ignored. */
void rls_http_server_close(rls_http_server_t *h);

#endif
