/* A small HTTP/1.1 server on the server's own libuv loop, for the --metrics,
 * --http (/check) and Envoy /json listeners: requests are parsed by http.c
 * and answered by the route the owner gives; a malformed or oversized
 * request gets 400 and the connection is closed.
 *
 * A connection costs a fixed struct (its 8 KiB input buffer inline) plus
 * the response it is writing. Requests are served one at a time: while a
 * response is being written the connection is not read, so a client that
 * pipelines and never reads holds one response, not many. Connections are
 * capped (RLS_HTTP_CONNS_MAX): over the cap a new connection evicts the one
 * that has done least (see evict_rank), so connections that never complete
 * a request cannot lock out a load balancer's /healthz; 503 is left for
 * when nothing can give way. Each head must arrive whole by the header
 * deadline, counted per head, not per byte, and a kept-alive connection
 * may wait the idle limit between requests. The listener therefore can
 * neither grow the server's memory nor be held by slow clients.
 *
 * Deadlines: one timer serves the whole listener, its set's sweep
 * (net/stream.h), rather than one per connection, as in native/conn.c. A
 * connection with a deadline is on one of three lists, one per length:
 * the header deadline (a head, a body, and from the accept the TLS
 * handshake with the first head), the idle limit (between requests, and
 * while a response is being written) and the linger (after a closing
 * response, min(idle limit, LINGER_MS)). It goes to the tail of its list
 * when its state changes, so each list is in deadline order and a sweep
 * stops at the first connection not yet due: O(1) per request, O(expired)
 * per sweep, and no timer start or stop per request. A connection
 * awaiting its answer is on none (the batcher always answers, by the
 * store's timeout at the latest). The price is precision: a deadline
 * fires up to one sweep period late, a quarter of the shorter of the
 * header deadline and the linger, 10 to 250 ms (250 ms on every listener
 * of the server, whose header deadline is 2 s).
 *
 * A route may answer later (the /check endpoint answers when the batcher
 * does): the connection then stays unread and unanswered until
 * rls_http_answer; with one request at a time, pipelined requests are
 * answered in order. An answer given later that went out whole resumes
 * reading at once; a pipelined request already buffered is served from
 * the loop (the answer comes from inside the decider, which must not be
 * asked again from there), by the listener's one zero timer (`next`) and
 * its list of connections so due. A connection that closes meanwhile
 * keeps its memory until the answer it is owed arrives (`owed`, as
 * native/conn.c keeps `inflight`), so a late answer never touches freed
 * memory.
 *
 * Lifetime: rls_http_server_close closes the listener, the two timers and
 * every connection; the state is freed by the last close callback, or by
 * the last answer owed to a closed connection. */
#include "net/http_server.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/log.h"
#include "net/listen.h"
#include "net/stream.h"
#include "rl_buf.h"
#include "rl_error.h"
#include "base/util.h"

/* After a response that closes the connection, input is drained for at most
 * this long so that the client reads the response rather than a reset. */
#define LINGER_MS 2000
/* HTTPS: ciphertext is read here (one TLS record and then some), shared
 * by every connection of the listener. */
#define CBUF 17408

/* The lengths a connection's deadline can have, one list each. */
enum {
    DL_HEAD,   /* the header deadline (never more than the idle limit) */
    DL_IDLE,   /* the idle limit */
    DL_LINGER, /* draining after a closing response */
    DL_N
};

struct rls_http_server_s {
    uv_loop_t *loop;
    rls_http_route_fn route;
    void *arg;
    uv_tcp_t listener;
    uv_tcp_t spare; /* accepts connections that get no struct */
    /* Its connections' transport (net/stream.h): open ones on set.all,
     * set.open of them; TLS, its counters, the ciphertext buffer. */
    rls_streams_t set;
    /* Its limits are set.opts': max_conns, idle_ms and frame_ms (the
     * header deadline, which the TLS handshake is held to as well). The
     * deadlines set.sweep keeps: the connections that have one, on the
     * list of its length, each list in deadline order; the lengths (DL_*,
     * from set.opts by limits_changed). */
    rls_list_t deadlines[DL_N];
    uint64_t dl_ms[DL_N];
    /* Connections whose next request, buffered already, is served from
     * the loop by the zero timer `next` (after an answer given later). */
    rls_list_t next_due;
    uv_timer_t next;
    unsigned timers; /* set.sweep and next, until their close callbacks */
    unsigned live; /* allocated, closing ones included */
    size_t ctx_size; /* route's bytes after each connection */
    size_t max_body; /* rls_http_server_set_max_body; 0: no bodies */
    rls_http_stats_t stats;
    void (*on_empty)(void *arg); /* rls_http_server_on_empty */
    void *empty_arg;
    unsigned listener_closing : 1;
    unsigned listener_closed : 1;
    unsigned stopping : 1; /* rls_http_server_stop: every answer closes */
    unsigned spare_busy : 1;     /* spare is accepted and closing */
    unsigned accept_pending : 1; /* a connection waits for the spare */
    unsigned closing : 1;
};

typedef struct rls_http_conn_s mconn_t;
struct rls_http_conn_s {
    /* The socket (its one handle), the answers owed, `since` (when the
     * connection's current state began, loop time: opening, first byte
     * of a request, or the last response; orders evictions). HTTPS:
     * requests come out of s.tls into in[], responses go through it (out
     * then holds the ciphertext). */
    rls_stream_t s;
    rls_list_t dl;   /* on m->deadlines[] while a deadline runs */
    uint64_t due;    /* ... which passes then (loop time) */
    rls_list_t next; /* on m->next_due while its next request waits */
    uv_write_t wreq;
    uv_shutdown_t sreq;
    rls_http_server_t *m;
    rl_buf_t out; /* the response being written */
    /* A request with a body: its head, then its body as it comes, whole
     * before the route sees it (at most the head and max_body bytes;
     * grown as bytes arrive, freed once served). */
    rl_buf_t req;
    size_t req_len; /* what it will hold whole */
    size_t in_len;
    unsigned served : 1; /* a response has been written */
    unsigned awaiting : 1;  /* the route answers later */
    unsigned in_route : 1;  /* the route is running */
    unsigned answered : 1;  /* ... and has answered already */
    int answered_rc;        /* what building that answer returned */
    unsigned head_only : 1; /* the request is HEAD */
    unsigned writing : 1;
    unsigned lingering : 1;   /* response sent; draining input to close */
    unsigned close_after : 1; /* close once the response is written */
    unsigned in_body : 1;     /* reading a body into req */
    unsigned in_own : 1;      /* in was allocated on its own (TLS) */
    /* The head buffer, RLS_HTTP_HEAD_MAX bytes: after ctx (plaintext),
     * or under TLS allocated once the handshake is done, so a client
     * that never finishes one does not hold it (issue 40). */
    char *in;
    _Alignas(max_align_t) unsigned char ctx[]; /* the route's ctx_size */
};

static void conn_serve(mconn_t *c, int parse);
static void on_write(uv_write_t *req, int status);
static void close_listener(rls_http_server_t *m);

/* Frees the listener's state once nothing refers to it any more. */
static void maybe_free(rls_http_server_t *m)
{
    if (!m->closing || !m->listener_closed || m->spare_busy || m->live > 0 ||
        m->timers > 0)
        return;
    rls_streams_free(&m->set);
    free(m);
}

/* ------------------------------------------------------------------------ */
/* Deadlines */

/* The deadlines' lengths from set.opts, and the sweep's period from the
 * shortest (the idle limit is never shorter than the other two). */
static void limits_changed(rls_http_server_t *m)
{
    uint64_t idle = m->set.opts.idle_ms, head = m->set.opts.frame_ms;

    m->dl_ms[DL_HEAD] = head < idle ? head : idle;
    m->dl_ms[DL_IDLE] = idle;
    m->dl_ms[DL_LINGER] = idle < LINGER_MS ? idle : LINGER_MS;
    rls_streams_sweep_every(&m->set, rls_streams_sweep_period(
                                         m->dl_ms[DL_HEAD] < m->dl_ms[DL_LINGER]
                                             ? m->dl_ms[DL_HEAD]
                                             : m->dl_ms[DL_LINGER]));
}

/* c's deadline is now list `which`'s length from now: c goes to that
 * list's tail, which keeps the list in deadline order. A closing
 * connection has none. */
static void deadline_set(mconn_t *c, int which)
{
    rls_http_server_t *m = c->m;

    if (c->s.closing)
        return;
    c->due = uv_now(m->loop) + m->dl_ms[which];
    rls_list_remove(&c->dl);
    rls_list_push(&m->deadlines[which], &c->dl);
}

/* The deadline of c's next request once a response is out: the header
 * deadline when its first bytes are buffered already (pipelined), else
 * the idle limit. */
static void deadline_next(mconn_t *c)
{
    deadline_set(c, c->in_len > 0 ? DL_HEAD : DL_IDLE);
}

/* ------------------------------------------------------------------------ */
/* Connections */

/* Frees a closed connection once no handle and no owed answer refers to
 * it. */
static void conn_free(mconn_t *c)
{
    rls_http_server_t *m = c->m;

    if (!rls_stream_done(&c->s))
        return;
    rl_buf_free(&c->out);
    rl_buf_free(&c->req);
    if (c->in_own)
        free(c->in);
    free(c);
    m->live--;
    maybe_free(m);
}

static void on_handle_closed(uv_handle_t *h)
{
    mconn_t *c = h->data;
    rls_http_server_t *m = c->m;
    int closing = m->closing;

    c->s.handles--;
    conn_free(c); /* frees m only when it is closing */
    /* From a close callback only: an answer given to a closed connection
     * frees it inside the batcher's callback, where the owner must not be
     * told (it would stop the server under the batcher), and the loop's
     * next check looks anyway. */
    if (!closing && m->stopping && m->live == 0 && m->on_empty != NULL)
        m->on_empty(m->empty_arg);
}

static void conn_close(mconn_t *c)
{
    if (c->s.closing)
        return;
    rls_list_remove(&c->s.node);
    rls_list_remove(&c->dl);
    rls_list_remove(&c->next);
    c->m->set.open--;
    rls_stream_close(&c->s, on_handle_closed);
}

/* ------------------------------------------------------------------------ */
/* HTTPS */

/* Sends what the TLS layer has to say. Returns 0, or an RL_E* code when
 * the connection must close. */
static int tls_flush(mconn_t *c)
{
    return rls_stream_tls_flush(&c->s);
}

/* The handshake failed (or the client went, or its deadline passed, with
 * `why`): counted, logged within the rate cap, the client told what it
 * can be told (TLS's alert; a plaintext HTTP request, a 400 saying this
 * port speaks HTTPS), and closed. */
static void tls_failed(mconn_t *c, rls_tls_reason_t reason, const char *why,
                       const uint8_t *p, size_t n)
{
    static const char plain[] = "HTTP/1.1 400 Bad Request\r\n"
                                "Content-Type: text/plain; charset=utf-8\r\n"
                                "Content-Length: 23\r\n"
                                "Connection: close\r\n"
                                "\r\n"
                                "this port speaks HTTPS\n";
    int http = n > 0 && p[0] >= 'A' && p[0] <= 'Z';

    rls_stream_tls_failed(&c->s, reason, why, http ? plain : NULL,
                          sizeof(plain) - 1, 0);
    conn_close(c);
}

/* Moves the plaintext the TLS layer holds into in[], as much as fits.
 * Returns the bytes moved, or RL_ECLOSED when the connection was closed
 * (the client's close_notify, a broken record). */
static ssize_t tls_pull(mconn_t *c)
{
    size_t got = 0;
    int n;

    while (c->in != NULL && c->in_len + got < RLS_HTTP_HEAD_MAX) {
        n = rls_tls_conn_read(c->s.tls, (uint8_t *)c->in + c->in_len + got,
                              RLS_HTTP_HEAD_MAX - c->in_len - got);
        if (n == 0)
            break;
        if (n < 0) {
            conn_close(c);
            return RL_ECLOSED;
        }
        got += (size_t)n;
    }
    if (tls_flush(c) != 0) {
        conn_close(c);
        return RL_ECLOSED;
    }
    return (ssize_t)got;
}

/* Feeds what was read to the TLS layer and answers its handshake.
 * Returns the plaintext put at in + in_len (not yet counted in in_len),
 * or RL_ECLOSED when the connection was closed. */
static ssize_t tls_in(mconn_t *c, const uint8_t *p, size_t n)
{
    int rc = rls_stream_tls_feed(&c->s, p, n);

    if (rc < 0) {
        tls_failed(c, RLS_TLS_OK, NULL, p, n);
        return RL_ECLOSED;
    }
    if (rc == 1) {
        if ((c->in = malloc(RLS_HTTP_HEAD_MAX)) == NULL) {
            RLS_ERROR("out of memory accepting an http connection", NULL);
            conn_close(c);
            return RL_ECLOSED;
        }
        c->in_own = 1;
    }
    return tls_pull(c);
}

/* c's deadline passed: closed (a handshake under way, counted and told
 * as failed). */
static void expire(mconn_t *c)
{
    rls_list_remove(&c->dl);
    if (rls_stream_handshaking(&c->s) && !c->s.closing) {
        c->m->stats.timed_out++;
        tls_failed(c, RLS_TLS_TIMEOUT,
                   "TLS handshake: not done within the header deadline", NULL,
                   0);
        return;
    }
    if (!c->lingering) {
        c->m->stats.timed_out++;
        RLS_DEBUG("http connection past its deadline; closing",
                  " bytes=%zu served=%u", c->in_len, (unsigned)c->served);
    }
    conn_close(c);
}

/* The set's one timer: closes the connections past their deadlines. Each
 * list is in deadline order, so each loop stops at the first not due. */
static void on_sweep(rls_streams_t *set, uint64_t now)
{
    rls_http_server_t *m = RLS_CONTAINER_OF(set, rls_http_server_t, set);
    mconn_t *c;
    int i;

    for (i = 0; i < DL_N; i++)
        while (!rls_list_empty(&m->deadlines[i])) {
            c = RLS_CONTAINER_OF(m->deadlines[i].next, mconn_t, dl);
            if (now < c->due)
                break;
            expire(c);
        }
}

static void on_alloc(uv_handle_t *h, size_t hint, uv_buf_t *buf)
{
    mconn_t *c = h->data;

    (void)hint;
    if (c->s.tls != NULL) {
        uint8_t *p = rls_streams_rbuf(&c->m->set);
        buf->base = (char *)p;
        buf->len = p != NULL ? c->m->set.rbuf_cap : 0;
        return;
    }
    if (c->lingering)
        c->in_len = 0; /* input after the last response is discarded */
    /* A full buffer holds an oversized head, which was answered 400 before
     * reading resumed; zero length makes libuv report UV_ENOBUFS. */
    buf->base = c->in + c->in_len;
    buf->len = RLS_HTTP_HEAD_MAX - c->in_len;
}

static void on_read(uv_stream_t *st, ssize_t nread, const uv_buf_t *buf)
{
    mconn_t *c = st->data;
    int parse;

    if (nread == 0)
        return; /* EAGAIN */
    if (nread < 0) {
        if (rls_stream_handshaking(&c->s) && !c->s.closing) {
            tls_failed(c, RLS_TLS_CLOSED,
                       "TLS handshake: the client closed the connection "
                       "midway",
                       NULL, 0);
            return;
        }
        /* The client is gone or done; nothing more can be answered. */
        conn_close(c);
        return;
    }
    if (c->lingering)
        return;
    if (c->s.tls != NULL &&
        ((nread = tls_in(c, (const uint8_t *)buf->base, (size_t)nread)) <= 0))
        return; /* closed, or no plaintext yet */
    if (c->s.tls == NULL && c->in_len == 0 && !c->served &&
        rls_stream_plain_hello(&c->s, (const uint8_t *)c->in,
                               (size_t)nread)) {
        conn_close(c);
        return;
    }
    if (c->in_len == 0 && c->served && !c->in_body) {
        /* The first byte of a kept-alive connection's next request: its
         * head now has the header deadline rather than the idle limit. */
        c->s.since = uv_now(c->m->loop);
        deadline_set(c, DL_HEAD);
    }
    /* Parse when a line has ended (a head ends in a blank line), when the
     * buffer is full, or on the first bytes of a request (to refuse garbage
     * at once). Re-parsing on every byte of a trickled head would cost
     * O(head^2). */
    parse = c->in_len == 0 ||
            memchr(c->in + c->in_len, '\n', (size_t)nread) != NULL;
    c->in_len += (size_t)nread;
    conn_serve(c, parse || c->in_len == RLS_HTTP_HEAD_MAX);
}

static void start_reading(mconn_t *c)
{
    if (rls_stream_read_start(&c->s, on_alloc, on_read) != 0)
        conn_close(c);
}

static void stop_reading(mconn_t *c)
{
    rls_stream_read_stop(&c->s);
}

static void on_shutdown(uv_shutdown_t *req, int status)
{
    mconn_t *c = req->data;

    if (status < 0)
        conn_close(c);
}

/* The response is out (written whole at once, or its write's callback
 * came): the connection closes after it, lingers, or waits for its next
 * request. Returns 1 when the caller serves that request (conn_serve),
 * 0 when not. */
static int after_write(mconn_t *c)
{
    rls_http_server_t *m = c->m;

    c->writing = 0;
    rl_buf_reset(&c->out);
    if (m->closing) {
        conn_close(c);
        return 0;
    }
    if (c->close_after) {
        /* Half-close, then drain what the client still sends until it
         * closes too: closing with unread input would send a reset, which
         * can destroy the response before the client reads it. Under TLS
         * the close_notify goes first. */
        c->lingering = 1;
        c->in_len = 0;
        if (c->s.tls != NULL) {
            rls_tls_conn_shutdown(c->s.tls);
            if (tls_flush(c) != 0) {
                conn_close(c);
                return 0;
            }
        }
        if (uv_shutdown(&c->sreq, (uv_stream_t *)&c->s.tcp, on_shutdown) !=
            0) {
            conn_close(c);
            return 0;
        }
        deadline_set(c, DL_LINGER);
        start_reading(c);
        return 0;
    }
    /* The next request has a fresh deadline: the idle limit to start, or
     * the header deadline if it has (pipelined bytes are buffered). */
    c->served = 1;
    c->s.since = uv_now(m->loop);
    /* Under TLS, pipelined requests may wait in the TLS layer, with no
     * read to come and bring them. */
    if (c->s.tls != NULL) {
        ssize_t got = tls_pull(c);
        if (got < 0)
            return 0;
        c->in_len += (size_t)got;
    }
    deadline_next(c);
    return 1;
}

/* The listener's zero timer: serves the next request of each connection
 * whose answer went out whole from rls_http_answer with a request
 * buffered behind it, its deadline as after_write set it. Connections
 * that join meanwhile (answers the decider gives inside a route) start
 * the timer again and wait for its next run. */
static void on_next(uv_timer_t *t)
{
    rls_http_server_t *m = t->data;
    rls_list_t end;
    mconn_t *c;

    rls_list_push(&m->next_due, &end);
    while (m->next_due.next != &end) {
        c = RLS_CONTAINER_OF(m->next_due.next, mconn_t, next);
        rls_list_remove(&c->next);
        conn_serve(c, c->in_len > 0);
    }
    rls_list_remove(&end);
}

static void on_write(uv_write_t *req, int status)
{
    mconn_t *c = req->data;

    if (status < 0) {
        c->writing = 0;
        rl_buf_reset(&c->out);
        conn_close(c);
        return;
    }
    if (after_write(c))
        conn_serve(c, c->in_len > 0);
}

/* Builds the status line and headers in c->out, then the body unless the
 * request was HEAD. Returns 0 or an RL_E* code from the buffer. */
static int build(mconn_t *c, const rls_http_reply_t *r, int head_only)
{
    int rc;

    if (c->m->stopping)
        c->close_after = 1;
    c->m->stats.status[rls_http_status_slot(r->status)]++;
    rc = rl_buf_printf(&c->out,
                       "HTTP/1.1 %d %s\r\n"
                       "Content-Type: %s\r\n"
                       "Content-Length: %zu\r\n"
                       "Cache-Control: no-store\r\n"
                       "%s"
                       "Connection: %s\r\n"
                       "\r\n",
                       r->status, r->reason,
                       r->ctype ? r->ctype : "text/plain; charset=utf-8",
                       r->body_len, r->extra ? r->extra : "",
                       c->close_after ? "close" : "keep-alive");
    if (rc == RL_OK && !head_only && r->body_len > 0)
        rc = rl_buf_append(&c->out, r->body, r->body_len);
    return rc;
}

int rls_http_reply_text(rls_http_reply_t *r, int status, const char *reason,
                        const char *body)
{
    memset(r, 0, sizeof(*r));
    r->status = status;
    r->reason = reason;
    r->body = body;
    r->body_len = strlen(body);
    return 0;
}

static int method_is(const rls_http_req_t *q, const char *name)
{
    return q->method_len == strlen(name) &&
           memcmp(q->method, name, q->method_len) == 0;
}

/* Builds a route's reply into c->out. */
static int build_reply(mconn_t *c, const rls_http_reply_t *r)
{
    if (r->close)
        c->close_after = 1;
    return build(c, r, c->head_only && r->status != 405);
}

/* Answers one parsed request into c->out through the route. Returns 0,
 * RL_EAGAIN when the route answers later, or an RL_E* code from the
 * buffer. */
static int serve_one(mconn_t *c, const rls_http_req_t *q)
{
    rls_http_reply_t r;

    c->close_after = !q->keep_alive;
    c->head_only = method_is(q, "HEAD");
    rls_http_reply_text(&r, 404, "Not Found", "not found\n");
    r.conn = c;
    c->in_route = 1;
    c->answered = 0;
    c->m->route(c->m->arg, q, &r);
    c->in_route = 0;
    if (!r.pending)
        return build_reply(c, &r);
    if (c->answered)
        return c->answered_rc;
    c->s.owed++;
    c->awaiting = 1;
    return RL_EAGAIN;
}

/* Hands c->out to the socket: what it takes at once goes without a
 * write request (most responses, whole), the rest is queued and the
 * client has the idle limit to take it. Returns 1 when the response went
 * whole (the caller finishes it with after_write), 0 when it is queued
 * or the connection closed. */
static int start_write(mconn_t *c)
{
    /* Under TLS the response is sealed in place: once written to the TLS
     * layer the plaintext is no longer needed. */
    if (c->s.tls != NULL) {
        int rc = rls_tls_conn_write(c->s.tls, rl_buf_rptr(&c->out),
                                    rl_buf_len(&c->out));
        rl_buf_reset(&c->out);
        if (rc != 0 || rls_tls_conn_take(c->s.tls, &c->out) != 0) {
            conn_close(c);
            return 0;
        }
    }
    if (rls_stream_write_now(&c->s, &c->out) != 0) {
        conn_close(c);
        return 0;
    }
    if (rl_buf_len(&c->out) == 0)
        return 1;
    deadline_set(c, DL_IDLE);
    c->writing = 1;
    if (rls_stream_write_queued(&c->s, &c->wreq, &c->out, on_write) != 0) {
        c->writing = 0;
        conn_close(c);
    }
    return 0;
}

void rls_http_answer(rls_http_conn_t *c, const rls_http_reply_t *r)
{
    int rc;

    if (c->in_route) {
        /* Answered before the route returned: serve_one writes it. */
        c->answered = 1;
        c->answered_rc = build_reply(c, r);
        return;
    }
    c->s.owed--;
    c->awaiting = 0;
    if (c->s.closing) {
        conn_free(c);
        return;
    }
    if ((rc = build_reply(c, r)) != RL_OK) {
        conn_close(c);
        return;
    }
    /* Written whole: the next request, as it would be from the write's
     * callback. With nothing buffered that is reading on, at once; a
     * pipelined request is served from the loop (the answer comes from
     * inside the decider, which must not be asked again from there). */
    if (!start_write(c) || !after_write(c))
        return;
    if (c->in_len == 0) {
        start_reading(c);
        return;
    }
    rls_list_push(&c->m->next_due, &c->next);
    if (!uv_is_active((uv_handle_t *)&c->m->next))
        uv_timer_start(&c->m->next, on_next, 0, 0);
}

/* A request the listener refuses before the route sees it (a body it
 * does not take), answered and closed: what follows the head cannot be
 * told from the next request. */
static int refuse(mconn_t *c, int status, const char *reason,
                  const char *body)
{
    rls_http_reply_t r;

    rls_http_reply_text(&r, status, reason, body);
    c->close_after = 1;
    c->in_len = 0;
    return build(c, &r, 0);
}

/* The head q (parsed at the front of c->in) announces a body the
 * listener takes: the head is copied to c->req, where the body will
 * follow; c->in keeps what comes after the head. Returns 0, or an RL_E*
 * code when out of memory. */
static int body_begin(mconn_t *c, const rls_http_req_t *q)
{
    const char *v;
    size_t vlen;

    c->req_len = q->head_len + (size_t)q->content_length;
    rl_buf_init(&c->req, c->req_len);
    if (rl_buf_append(&c->req, c->in, q->head_len) != RL_OK)
        return RL_ENOMEM;
    memmove(c->in, c->in + q->head_len, c->in_len - q->head_len);
    c->in_len -= q->head_len;
    c->in_body = 1;
    /* The body has a deadline of its own, the header deadline again. */
    deadline_set(c, DL_HEAD);
    /* A client that waits to be told to send the body (curl does, for
     * bodies over 1 KiB) is told at once; if the write cannot go now it
     * sends the body after its own wait anyway. */
    if (rls_http_header(q, "expect", &v, &vlen) && vlen == 12 &&
        strncasecmp(v, "100-continue", 12) == 0) {
        static const char go[] = "HTTP/1.1 100 Continue\r\n\r\n";
        if (c->s.tls != NULL) {
            if (rls_tls_conn_write(c->s.tls, (const uint8_t *)go,
                                   sizeof(go) - 1) != 0 ||
                tls_flush(c) != 0)
                return RL_EIO;
        } else {
            rls_stream_try_write(&c->s, go, sizeof(go) - 1);
        }
    }
    return RL_OK;
}

/* Moves what c->in holds of the body into c->req. Returns 1 when the
 * request is whole, else 0. */
static int body_take(mconn_t *c)
{
    size_t want = c->req_len - rl_buf_len(&c->req);
    size_t n = c->in_len < want ? c->in_len : want;

    if (n > 0 && rl_buf_append(&c->req, c->in, n) == RL_OK) {
        memmove(c->in, c->in + n, c->in_len - n);
        c->in_len -= n;
    }
    return rl_buf_len(&c->req) == c->req_len;
}

/* Serves the request at the front of c->in if it is whole. `parse` is 0
 * when the bytes that just arrived cannot have completed a head. */
static void conn_serve(mconn_t *c, int parse)
{
    rls_http_req_t q;
    int rc;

again:
    if (c->writing || c->awaiting || c->s.closing || c->lingering)
        return;
    if (c->in_body) {
        /* The head was parsed already; it is parsed again where it now
         * is, in front of its body. */
        int whole;
        ssize_t got;

        /* Under TLS, the rest may wait in the TLS layer already (a
         * record holds up to 16 KiB, in[] takes 8). */
        while (!(whole = body_take(c)) && c->s.tls != NULL &&
               (got = tls_pull(c)) > 0)
            c->in_len += (size_t)got;
        if (c->s.closing)
            return;
        if (!whole) {
            start_reading(c);
            return;
        }
        c->in_body = 0;
        stop_reading(c);
        rl_buf_reset(&c->out);
        rc = rls_http_parse((const char *)rl_buf_rptr(&c->req),
                            rl_buf_len(&c->req), &q);
        if (rc == RL_OK) {
            q.body = q.head + q.head_len;
            q.body_len = (size_t)q.content_length;
            rc = serve_one(c, &q);
        }
        rl_buf_free(&c->req);
        goto served;
    }
    rc = parse ? rls_http_parse(c->in, c->in_len, &q) : RL_EAGAIN;
    if (rc == RL_EAGAIN) {
        start_reading(c);
        return;
    }
    stop_reading(c);
    rl_buf_reset(&c->out);
    if (rc != RL_OK) {
        rls_http_reply_t r;

        RLS_DEBUG("http: bad request", " err=\"%s\" bytes=%zu",
                  rc == RL_EFULL ? "head over 8 KiB" : "malformed", c->in_len);
        c->close_after = 1;
        c->in_len = 0;
        if (rc == RL_EFULL && q.line_len == 0)
            rls_http_reply_text(&r, 414, "URI Too Long",
                                "request line over 8 KiB\n");
        else if (rc == RL_EFULL || q.nheaders == RLS_HTTP_HEADERS_MAX)
            rls_http_reply_text(&r, 431, "Request Header Fields Too Large",
                                "request head over 8 KiB or 64 header "
                                "lines\n");
        else if (q.te && c->m->max_body > 0)
            rls_http_reply_text(&r, 411, "Length Required",
                                "send the body with a Content-Length, not "
                                "a Transfer-Encoding\n");
        else
            rls_http_reply_text(&r, 400, "Bad Request", "bad request\n");
        rc = build(c, &r, 0);
    } else if (q.content_length > 0 && c->m->max_body == 0) {
        rc = refuse(c, 400, "Bad Request",
                    "this listener takes no request body\n");
    } else if (q.content_length > c->m->max_body) {
        rc = refuse(c, 413, "Content Too Large",
                    "request body over this listener's limit\n");
    } else if (q.content_length > 0) {
        if ((rc = body_begin(c, &q)) != RL_OK) {
            conn_close(c);
            return;
        }
        conn_serve(c, 0);
        return;
    } else {
        rc = serve_one(c, &q);
        RLS_DEBUG("http request", " method=%.*s path=%.*s",
                  (int)q.method_len, q.method, (int)rls_http_path_len(&q),
                  q.target);
        /* The request is done with: keep only what follows it. */
        memmove(c->in, c->in + q.head_len, c->in_len - q.head_len);
        c->in_len -= q.head_len;
    }
served:
    if (rc == RL_EAGAIN) {
        /* The answer comes later; no deadline runs meanwhile (the batcher
         * always answers, by the store's timeout at the latest). */
        rls_list_remove(&c->dl);
        return;
    }
    if (rc != RL_OK) {
        conn_close(c);
        return;
    }
    /* Written whole: the next pipelined request, in this loop rather
     * than by recursion. */
    if (start_write(c) && after_write(c)) {
        parse = c->in_len > 0;
        goto again;
    }
}

void rls_http_server_set_max_body(rls_http_server_t *m, size_t max_body)
{
    if (m != NULL)
        m->max_body = max_body;
}

/* ------------------------------------------------------------------------ */
/* Listener */

static void accept_one(rls_http_server_t *m, int fd);

/* How readily a connection gives way to a new one when the listener is
 * full: lower ranks go first, the oldest `since` first within a rank; -1
 * never. A client that has completed a request has shown it is one, so it
 * goes after every connection that has not, whatever their age; among
 * those, one waiting between requests goes before one in the middle of a
 * request. One writing a response keeps it (the idle limit bounds that). */
/* A rank below every other: never evicted. */
#define RANK_KEEP (-1)

static int evict_rank(const rls_stream_t *s)
{
    const mconn_t *c = RLS_CONTAINER_OF(s, mconn_t, s);

    if (c->lingering)
        return 0; /* answered; only draining before it closes */
    if (c->writing || c->awaiting)
        return RANK_KEEP;
    if (!c->served)
        return 1; /* no request completed: new, idle or slow */
    if (c->in_len == 0 && !c->in_body)
        return 2; /* kept alive, between requests */
    return 3;     /* a proven client, mid-request */
}

/* Closes the connection that gives way most readily, to make room for a
 * new one. Returns 1 if one was closed, 0 if none can go. */
static int evict_one(rls_http_server_t *m)
{
    rls_stream_t *s = rls_streams_victim(&m->set, evict_rank);
    mconn_t *victim;

    if (s == NULL)
        return 0;
    victim = RLS_CONTAINER_OF(s, mconn_t, s);
    RLS_DEBUG("http connection evicted for a new one", " rank=%d bytes=%zu",
              evict_rank(s), victim->in_len);
    m->stats.evicted++;
    conn_close(victim);
    return 1;
}

static void on_spare_closed(uv_handle_t *h)
{
    rls_http_server_t *m = h->data;

    m->spare_busy = 0;
    /* libuv stopped watching the listener while a connection waited to be
     * accepted; accepting it now resumes the listener. */
    if (m->accept_pending && !m->closing) {
        m->accept_pending = 0;
        accept_one(m, -1);
    }
    maybe_free(m);
}

/* Takes the next connection off the listener (fd < 0) or the connected
 * socket fd: into its own struct when under the cap and memory allows,
 * else into the spare handle, which answers 503 and closes. With the
 * spare busy the connection waits in the kernel's backlog until the spare
 * is free again (an fd is closed, counted refused). */
static void accept_one(rls_http_server_t *m, int fd)
{
    static const char busy[] = "HTTP/1.1 503 Service Unavailable\r\n"
                               "Content-Type: text/plain; charset=utf-8\r\n"
                               "Content-Length: 21\r\n"
                               "Connection: close\r\n"
                               "\r\n"
                               "too many connections\n";
    rls_streams_t *set = &m->set;
    mconn_t *c = NULL;
    uv_buf_t b;
    int rc;

    /* Evicted connections hold their memory until their close callbacks
     * run, later in this loop iteration: a burst of accepts is bounded. */
    /* Nor for one the TLS layer would refuse at once. */
    if (set->open >= m->set.opts.max_conns &&
        m->live < 4 * (uint64_t)m->set.opts.max_conns &&
        (set->tls == NULL ||
         !rls_tls_busy(set->tls, &set->tls_stats, uv_now(m->loop))))
        evict_one(m);
    if (set->open < m->set.opts.max_conns &&
        (c = calloc(1, sizeof(*c) + m->ctx_size +
                           (set->tls == NULL ? RLS_HTTP_HEAD_MAX : 0))) !=
            NULL) {
        if (rls_stream_init(&c->s, set, c) != 0) {
            free(c);
            if (fd >= 0)
                close(fd);
            return;
        }
        c->m = m;
        if (set->tls == NULL)
            c->in = (char *)c->ctx + m->ctx_size;
        rls_list_init(&c->dl);
        rls_list_init(&c->next);
        c->wreq.data = c;
        c->sreq.data = c;
        rl_buf_init(&c->out, RLS_HTTP_OUT_MAX);
        m->live++;
        set->open++;
        rls_list_push(&set->all, &c->s.node);
        if (fd >= 0) {
            /* Adopted: opened as the accept would have (TCP_NODELAY
             * refused by a socket that is not TCP: no matter). */
            if ((rc = uv_tcp_open(&c->s.tcp, fd)) != 0)
                close(fd);
            else
                uv_tcp_nodelay(&c->s.tcp, 1);
        } else {
            rc = rls_stream_accept(&c->s, (uv_stream_t *)&m->listener);
        }
        if (rc != 0 || rls_stream_tls_begin(&c->s) != 0) {
            conn_close(c);
            return;
        }
        m->stats.accepted++;
        deadline_set(c, DL_HEAD);
        start_reading(c);
        return;
    }
    if (c == NULL && set->open < m->set.opts.max_conns)
        RLS_ERROR("out of memory accepting an http connection", NULL);
    if (m->spare_busy && fd >= 0) {
        m->stats.refused++;
        close(fd);
        return;
    }
    if (m->spare_busy) {
        m->accept_pending = 1;
        return;
    }
    uv_tcp_init(m->loop, &m->spare);
    m->spare.data = m;
    m->spare_busy = 1;
    if (fd >= 0 && uv_tcp_open(&m->spare, fd) != 0)
        close(fd);
    else if (fd >= 0 || uv_accept((uv_stream_t *)&m->listener,
                                  (uv_stream_t *)&m->spare) == 0) {
        RLS_DEBUG("http connection refused", " open=%u max=%u", set->open,
                  m->set.opts.max_conns);
        m->stats.refused++;
        /* Under TLS no plaintext answer can be read: closed at once. */
        b = uv_buf_init((char *)busy, sizeof(busy) - 1);
        if (set->tls == NULL)
            uv_try_write((uv_stream_t *)&m->spare, &b, 1);
    }
    uv_close((uv_handle_t *)&m->spare, on_spare_closed);
}

static void on_connection(uv_stream_t *listener, int status)
{
    rls_http_server_t *m = listener->data;

    if (status < 0) {
        RLS_WARN("http accept failed", " err=\"%s\"", uv_strerror(status));
        return;
    }
    if (rls_streams_handoff(&m->set, listener))
        return; /* another loop serves it */
    accept_one(m, -1);
}

void rls_http_server_adopt(rls_http_server_t *m, int fd)
{
    if (m->closing || m->stopping) {
        close(fd);
        return;
    }
    accept_one(m, fd);
}

static void on_listener_closed(uv_handle_t *h)
{
    rls_http_server_t *m = h->data;

    m->listener_closed = 1;
    maybe_free(m);
}

static void on_timer_closed(uv_handle_t *h)
{
    rls_http_server_t *m = h->data;

    m->timers--;
    maybe_free(m);
}

int rls_http_server_start(rls_http_server_t **out, uv_loop_t *loop,
                          const char *host, int port, rls_http_route_fn route,
                          void *arg)
{
    rls_http_server_t *m;
    int i, rc;

    *out = NULL;
    m = calloc(1, sizeof(*m));
    if (m == NULL)
        return UV_ENOMEM;
    m->loop = loop;
    m->route = route;
    m->arg = arg;
    for (i = 0; i < DL_N; i++)
        rls_list_init(&m->deadlines[i]);
    rls_list_init(&m->next_due);
    rls_streams_init(&m->set, loop, "http", "http/1.1", CBUF);
    m->set.opts.idle_ms = RLS_HTTP_IDLE_MS;
    m->set.opts.frame_ms = RLS_HTTP_HEAD_MS;
    m->set.opts.max_conns = RLS_HTTP_CONNS_MAX;
    uv_tcp_init(loop, &m->listener);
    m->listener.data = m;
    /* A port below 0: no listener of its own (--threads: connections are
     * handed over, rls_http_server_adopt). */
    if (port >= 0 &&
        (rc = rls_listen(&m->listener, host, port, 511, on_connection)) != 0) {
        m->closing = 1;
        close_listener(m);
        return rc;
    }
    /* The deadlines' timers: the sweep (it does not keep the loop alive)
     * and the zero timer of the next requests. */
    rls_streams_sweep_init(&m->set, m, on_sweep);
    uv_timer_init(loop, &m->next);
    m->next.data = m;
    m->timers = 2;
    limits_changed(m);
    *out = m;
    return 0;
}

rls_streams_t *rls_http_server_streams(rls_http_server_t *m)
{
    return m != NULL ? &m->set : NULL;
}

int rls_http_server_port(const rls_http_server_t *m)
{
    return rls_listen_port(&m->listener);
}

void rls_http_server_set_limits(rls_http_server_t *m, uint64_t idle_ms,
                                unsigned max_conns)
{
    if (m == NULL)
        return;
    m->set.opts.idle_ms = idle_ms;
    m->set.opts.max_conns = max_conns;
    limits_changed(m);
}

void rls_http_server_set_head_ms(rls_http_server_t *m, uint64_t head_ms)
{
    if (m == NULL)
        return;
    m->set.opts.frame_ms = head_ms;
    limits_changed(m);
}

const rls_http_stats_t *rls_http_server_stats(const rls_http_server_t *m)
{
    return &m->stats;
}

static void close_listener(rls_http_server_t *m)
{
    if (m->listener_closing)
        return;
    m->listener_closing = 1;
    uv_close((uv_handle_t *)&m->listener, on_listener_closed);
}

void rls_http_server_close(rls_http_server_t *m)
{
    if (m == NULL)
        return;
    m->closing = 1;
    while (!rls_list_empty(&m->set.all))
        conn_close(RLS_CONTAINER_OF(m->set.all.next, mconn_t, s.node));
    close_listener(m);
    if (!uv_is_closing((uv_handle_t *)&m->next)) {
        uv_close((uv_handle_t *)&m->set.sweep, on_timer_closed);
        uv_close((uv_handle_t *)&m->next, on_timer_closed);
    }
    maybe_free(m); /* a stop may have closed the listener already */
}

/* 1 when the client has sent bytes not read yet (a peek, nothing read). */
static int input_waits(mconn_t *c)
{
    uv_os_fd_t fd;
    char b;

    return !c->s.closing && uv_fileno((uv_handle_t *)&c->s.tcp, &fd) == 0 &&
           recv(fd, &b, 1, MSG_PEEK | MSG_DONTWAIT) == 1;
}

void rls_http_server_stop(rls_http_server_t *m)
{
    rls_list_t *n, *next;
    mconn_t *c;

    if (m == NULL || m->stopping)
        return;
    m->stopping = 1;
    close_listener(m);
    for (n = m->set.all.next; n != &m->set.all; n = next) {
        next = n->next;
        c = RLS_CONTAINER_OF(n, mconn_t, s.node);
        /* Between requests, or only draining: nothing is owed; unless
         * the client's next request waits unread in the socket (it came
         * in the iteration of the stop, or the connection was handed from
         * another loop of --threads just before it): that one is read and
         * answered with Connection: close, under the header deadline. */
        if (c->lingering ||
            (!c->writing && !c->awaiting && c->in_len == 0 && !c->in_body &&
             !input_waits(c)))
            conn_close(c);
    }
}

void rls_http_server_on_empty(rls_http_server_t *m, void (*fn)(void *arg),
                              void *arg)
{
    m->on_empty = fn;
    m->empty_arg = arg;
}

unsigned rls_http_server_live(const rls_http_server_t *m)
{
    return m != NULL ? m->live : 0;
}

void rls_http_server_set_ctx_size(rls_http_server_t *m, size_t size)
{
    if (m != NULL)
        m->ctx_size = size;
}

void *rls_http_conn_ctx(rls_http_conn_t *c)
{
    return c->ctx;
}

void rls_http_conn_peer(const rls_http_conn_t *c, char *out, size_t len)
{
    rls_peer_name(&c->s.tcp, out, len);
}

static const int statuses[] = {
#define RLS_HTTP_STATUS_ITEM(code) code,
    RLS_HTTP_STATUSES(RLS_HTTP_STATUS_ITEM)
#undef RLS_HTTP_STATUS_ITEM
};

_Static_assert(sizeof(statuses) / sizeof(statuses[0]) + 1 == RLS_HTTP_NSTATUS,
               "RLS_HTTP_NSTATUS is the statuses listed plus one");

unsigned rls_http_status_slot(int status)
{
    unsigned i;

    for (i = 0; i < sizeof(statuses) / sizeof(statuses[0]); i++)
        if (statuses[i] == status)
            return i;
    return RLS_HTTP_NSTATUS - 1;
}

int rls_http_slot_status(unsigned slot)
{
    return slot < sizeof(statuses) / sizeof(statuses[0]) ? statuses[slot]
                                                          : 0;
}

void rls_http_server_set_tls(rls_http_server_t *h, rls_tls_t *tls,
                             const char *name)
{
    h->set.tls = tls;
    h->set.name = name != NULL ? name : "http";
}

const rls_tls_stats_t *rls_http_server_tls_stats(const rls_http_server_t *h)
{
    return h->set.tls != NULL ? &h->set.tls_stats : NULL;
}

const rls_tls_plain_t *rls_http_server_plain_stats(const rls_http_server_t *h)
{
    return h->set.tls == NULL ? &h->set.plain : NULL;
}
