/* A small HTTP/1.1 server on a libuv loop (http_server.c): keep-alive, one
 * request at a time per connection, no request bodies, bounded
 * connections and deadlines. What each request gets is the owner's route. */
#ifndef RLS_NET_HTTP_SERVER_H
#define RLS_NET_HTTP_SERVER_H

#include <stddef.h>
#include <stdint.h>

#include <uv.h>

#include "net/http.h"

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

/* What the listener has done with connections, since it started. */
typedef struct rls_http_stats_s {
    uint64_t accepted;  /* given a connection struct */
    uint64_t evicted;   /* closed to make room for a newer connection */
    uint64_t refused;   /* answered 503 and closed: full, none could go */
    uint64_t timed_out; /* closed at the header deadline or idle limit */
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
} rls_http_reply_t;

/* Answers one request: *r arrives as a 404 and the route overwrites it. A
 * HEAD request gets the headers only. */
typedef void (*rls_http_route_fn)(void *arg, const rls_http_req_t *q,
                                  rls_http_reply_t *r);

/* Fills *r with a plain-text reply; returns 0. */
int rls_http_reply_text(rls_http_reply_t *r, int status, const char *reason,
                        const char *body);

/* Binds host:port and serves on loop. Returns 0 with *out set, or a
 * negative libuv error with nothing left open. */
int rls_http_server_start(rls_http_server_t **out, uv_loop_t *loop,
                          const char *host, int port, rls_http_route_fn route,
                          void *arg);

/* Overrides the limits above (tests use a short idle limit). NULL is
 * ignored. */
void rls_http_server_set_limits(rls_http_server_t *h, uint64_t idle_ms,
                                unsigned max_conns);

/* Overrides RLS_HTTP_HEAD_MS (tests). NULL is ignored. */
void rls_http_server_set_head_ms(rls_http_server_t *h, uint64_t head_ms);

/* The listener's counters, owned by h and valid until it is closed. */
const rls_http_stats_t *rls_http_server_stats(const rls_http_server_t *h);

/* Closes the listener and every connection; the state is freed by the last
 * close callback. NULL is ignored. */
void rls_http_server_close(rls_http_server_t *h);

#endif
