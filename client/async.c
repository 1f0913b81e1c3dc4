/* The async client: one connection on the caller's libuv loop, many checks
 * in flight on it.
 *
 * Hot path, per check: a request slot is popped from a free list (slots are
 * allocated once), the frame is encoded straight into the output buffer,
 * and the slot is appended to the pending list. Once per loop iteration,
 * just before the loop polls (uv_prepare) and right after it did (uv_check,
 * which catches checks submitted from answer callbacks), the whole output
 * buffer leaves in one send(). Answers are decoded in place from the input
 * buffer and matched to their slot by id: the low 32 bits are the slot
 * index + 1, the high 32 bits the slot's generation, so an answer that
 * arrives after its check timed out (and the slot was reused) is dropped.
 *
 * Timeouts: every check waits the same request_timeout_ms, so the pending
 * list, kept in submission order, is also in deadline order; one timer
 * watches its head.
 *
 * GOAWAY: a server that stops sends a notice (id 0, ERROR, notice
 * NOTICE_GOAWAY; rl_result_is_goaway) and then answers everything it still reads until the
 * client closes its side. On the notice the client stops adding to the
 * connection: what is already in the output buffer (whole frames) still
 * goes out, checks submitted from then on are encoded into a second buffer
 * (`next`), and once the first is empty the write side is shut down. The
 * answers keep coming until the server's end of file; then the connection
 * is closed, `next` becomes the output buffer, and the client reconnects at
 * once, to the next address, without failing the checks that were waiting.
 *
 * Re-entrancy: user callbacks may submit checks and may free the client.
 * Every entry from libuv goes through enter()/leave(); a free requested
 * while inside is carried out by the outermost leave(), and loops that call
 * user callbacks stop as soon as the client is closing. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <uv.h>

#include "rl_error.h"
#include "rl_frame.h"
#include "rlc_int.h"

#define NIL UINT32_MAX
#define FLUSH_NOW (64 * 1024) /* send at once when this much is waiting */

enum { ST_IDLE, ST_CONNECTING, ST_HANDSHAKING, ST_CONNECTED };

typedef struct slot_s {
    rlc_check_cb cb; /* NULL when free; a placeholder when xcb is set */
    rlc_xop_cb xcb;  /* set for rlc_async_xop: the extended result */
    void *arg;
    uint64_t deadline; /* loop time, ms */
    uint32_t gen;
    uint32_t window_s : 31; /* at most RLC_WINDOW_MAX_S */
    uint32_t later : 1;  /* submitted after a GOAWAY: its frame is in `next` */
    uint32_t prev, next; /* pending list, or free list (next only) */
    int op;              /* RLC_OP_*, for an rlc_async_xop */
} slot_t;

typedef struct conn_s {
    uv_poll_t poll;
    rlc_async_t *c;
    int fd;
    SSL *ssl;   /* over fd, with TLS */
    int events; /* what poll currently watches */
} conn_t;

struct rlc_async_s {
    uv_loop_t *loop;
    rlc__conf_t cf;

    slot_t *slots;
    uint32_t nslots;
    uint32_t free_head;
    uint32_t head, tail; /* pending, oldest first */
    size_t inflight;

    rl_buf_t in, out;
    rl_buf_t next; /* frames for the next connection, after a GOAWAY */

    conn_t *conn; /* NULL while idle */
    int state;
    size_t cur;   /* address in use or being tried */
    size_t tried; /* addresses tried in the current round */
    uint32_t backoff_ms;
    unsigned seed;
    int goaway;  /* the server said it is shutting down: stop sending */
    int wr_shut; /* ... and the rest of `out` went out: FIN sent */

    uv_timer_t req_timer;  /* request deadlines */
    uv_timer_t conn_timer; /* connect timeout, then reconnect delay */
    uv_prepare_t prepare;  /* flush before the loop polls */
    uv_check_t check;      /* flush what the poll's callbacks submitted */
    int handles;           /* open handles, conns included */

    int depth;   /* nesting of our callbacks from libuv */
    int closing; /* rlc_async_free was called */
    int torn_down;

    rlc_state_cb state_cb;
    void *state_arg;
    char why[RLC__WHY_MAX]; /* the last connect failure, in words */
};

static void attempt(rlc_async_t *c);
static void lost(rlc_async_t *c, int status);
static void on_conn_timer(uv_timer_t *t);

/* ---- entering and leaving callbacks ------------------------------------ */

static void teardown(rlc_async_t *c);

static void enter(rlc_async_t *c)
{
    c->depth++;
}

static void leave(rlc_async_t *c)
{
    if (--c->depth == 0 && c->closing && !c->torn_down)
        teardown(c);
}

static void release(rlc_async_t *c)
{
    rl_buf_free(&c->in);
    rl_buf_free(&c->out);
    rl_buf_free(&c->next);
    rlc__conf_free(&c->cf);
    free(c->slots);
    free(c);
}

static void on_handle_closed(uv_handle_t *h)
{
    rlc_async_t *c = h->data;

    if (--c->handles == 0)
        release(c);
}

/* ---- slots --------------------------------------------------------------- */

static void unlink_slot(rlc_async_t *c, uint32_t i)
{
    slot_t *s = &c->slots[i];

    if (s->prev != NIL)
        c->slots[s->prev].next = s->next;
    else
        c->head = s->next;
    if (s->next != NIL)
        c->slots[s->next].prev = s->prev;
    else
        c->tail = s->prev;
}

/* Returns slot i to the free list; its generation moves on so that a late
 * answer to its last check no longer matches. */
static void free_slot(rlc_async_t *c, uint32_t i)
{
    slot_t *s = &c->slots[i];

    s->cb = NULL;
    s->xcb = NULL;
    s->arg = NULL;
    s->later = 0;
    s->gen++;
    s->next = c->free_head;
    c->free_head = i;
    c->inflight--;
}

static void fire_fail(rlc_async_t *c, uint32_t i, int status, uint64_t now)
{
    slot_t *s = &c->slots[i];
    rlc_check_cb cb = s->cb;
    rlc_xop_cb xcb = s->xcb;
    void *arg = s->arg;
    uint64_t id = (uint64_t)s->gen << 32 | (uint64_t)(i + 1);

    if (xcb != NULL) {
        rlc_xresult_t x;
        rlc__xresult_fail(&x, s->op, id, status, c->cf.o.fail_mode, s->window_s,
                          now);
        free_slot(c, i);
        xcb(c, &x, arg);
        return;
    }
    rlc_result_t res;
    rlc__result_fail(&res, id, status, c->cf.o.fail_mode, s->window_s, now);
    free_slot(c, i);
    cb(c, &res, arg);
}

/* Appends slot i to the pending list (the newest check). */
static void link_slot(rlc_async_t *c, uint32_t i)
{
    slot_t *s = &c->slots[i];

    s->next = NIL;
    s->prev = c->tail;
    if (c->tail != NIL)
        c->slots[c->tail].next = i;
    else
        c->head = i;
    c->tail = i;
}

/* Fires the failure callback of every slot on the detached chain from i
 * (linked by next). It runs to the end even if a callback frees the client:
 * each of these checks is off the pending list, so only this loop can
 * complete it. */
static void fail_chain(rlc_async_t *c, uint32_t i, int status)
{
    uint64_t now = rl_unix_ms();

    while (i != NIL) {
        uint32_t next = c->slots[i].next;
        fire_fail(c, i, status, now);
        i = next;
    }
}

/* Detaches the whole pending list and returns its head, to be failed with
 * fail_chain. Detached before any callback runs (the state callback
 * included), checks that callbacks submit stay queued for the next
 * connection. */
static uint32_t take_all(rlc_async_t *c)
{
    uint32_t i = c->head;

    c->head = c->tail = NIL;
    return i;
}

/* Fails every pending check with status. */
static void fail_all(rlc_async_t *c, int status)
{
    fail_chain(c, take_all(c), status);
}

/* After a GOAWAY, detaches the checks that went to the connection which is
 * now gone, and returns their chain, to be failed with fail_chain: a server
 * that keeps its word has answered them all, so these are only what a
 * misbehaving one left unanswered. The checks submitted after the notice
 * (`later`) never went there: they stay pending, in order, for the next
 * connection, and checks submitted from then on queue behind them, so the
 * list stays in deadline order. */
static uint32_t take_sent(rlc_async_t *c)
{
    uint32_t i = c->head, gone = NIL, gone_tail = NIL;

    c->head = c->tail = NIL;
    while (i != NIL) {
        slot_t *s = &c->slots[i];
        uint32_t next = s->next;

        if (s->later) {
            s->later = 0;
            link_slot(c, i);
        } else {
            s->next = NIL;
            if (gone_tail != NIL)
                c->slots[gone_tail].next = i;
            else
                gone = i;
            gone_tail = i;
        }
        i = next;
    }
    return gone;
}

/* ---- connection ---------------------------------------------------------- */

static void notify(rlc_async_t *c, int connected, int status)
{
    if (c->state_cb != NULL && !c->closing)
        c->state_cb(c, connected, status, c->state_arg);
}

static void on_conn_closed(uv_handle_t *h)
{
    conn_t *conn = h->data;
    rlc_async_t *c = conn->c;

    rlc__tls_end(conn->ssl);
    close(conn->fd);
    free(conn);
    if (--c->handles == 0)
        release(c);
}

static void close_conn(rlc_async_t *c)
{
    conn_t *conn = c->conn;

    if (conn == NULL)
        return;
    c->conn = NULL;
    uv_timer_stop(&c->conn_timer);
    uv_close((uv_handle_t *)&conn->poll, on_conn_closed);
}

static void watch(rlc_async_t *c, int events);

/* After a send, or on a GOAWAY: once the server has said it is going away
 * and the last byte of `out` has left, the write side is shut down. The
 * buffer only ever holds whole frames, so this end of the stream falls on
 * a frame boundary; the server answers everything up to it and closes. */
static void wrote(rlc_async_t *c)
{
    if (c->goaway && !c->wr_shut && rl_buf_len(&c->out) == 0) {
        c->wr_shut = 1;
        /* An error here (the peer is gone) shows up as the read's end. */
        rlc__io_shutdown(c->conn->fd, c->conn->ssl);
    }
    watch(c, UV_READABLE | (rl_buf_len(&c->out) > 0 ? UV_WRITABLE : 0));
}

/* Sends what is waiting, with one send(). Errors other than "would block"
 * are left for the poll callback to find (the socket reports writable),
 * so that this may be called where user callbacks must not fire. */
static void do_write(rlc_async_t *c)
{
    long n;
    int want;

    if (c->state != ST_CONNECTED || rl_buf_len(&c->out) == 0)
        return;
    n = rlc__io_send(c->conn->fd, c->conn->ssl, rl_buf_rptr(&c->out),
                     rl_buf_len(&c->out), &want, c->why);
    if (n > 0)
        rl_buf_consume(&c->out, (size_t)n);
    wrote(c);
}

/* The server is shutting down: nothing new goes to this connection. What
 * is in `out` still leaves (the server reads until our FIN), then the write
 * side closes; answers are read until the server's end of file. */
static void go_away(rlc_async_t *c)
{
    if (c->goaway)
        return;
    c->goaway = 1;
    wrote(c);
}

static void dispatch(rlc_async_t *c)
{
    uint64_t now = rl_unix_ms();

    while (!c->closing && c->state == ST_CONNECTED) {
        rl_result_t r;
        rlc_result_t res;
        int rc = rl_result_take(&c->in, c->cf.o.max_frame, &r);
        if (rc == RL_EAGAIN)
            return;
        if (rc != RL_OK) {
            lost(c, rc);
            return;
        }

        uint64_t low = r.id & 0xffffffffu;
        if (low == 0 || low > c->nslots) {
            /* id 0: about the connection, not a check of ours. */
            if (rl_result_is_goaway(&r))
                go_away(c);
            continue;
        }
        uint32_t i = (uint32_t)(low - 1);
        slot_t *s = &c->slots[i];
        if (s->cb == NULL || s->gen != (uint32_t)(r.id >> 32))
            continue; /* timed out already */
        rlc_check_cb cb = s->cb;
        rlc_xop_cb xcb = s->xcb;
        void *arg = s->arg;
        if (xcb != NULL) {
            rlc_xresult_t x;
            rlc__xresult_from(&x, s->op, &r, s->window_s, now);
            unlink_slot(c, i);
            free_slot(c, i);
            xcb(c, &x, arg);
            continue;
        }
        rlc__result_from(&res, &r, s->window_s, now);
        unlink_slot(c, i);
        free_slot(c, i);
        cb(c, &res, arg);
    }
}

/* Reads what the socket has; over TLS, also what TLS holds already (no
 * poll would announce it). */
static void do_read(rlc_async_t *c)
{
    conn_t *conn = c->conn;

    do {
        uint8_t *w;
        long n;
        int want;
        int rc = rl_buf_reserve(&c->in, RLC__READ_CHUNK, &w);

        if (rc != RL_OK) {
            lost(c, rc);
            return;
        }
        n = rlc__io_recv(conn->fd, conn->ssl, w, RLC__READ_CHUNK, &want,
                         c->why);
        if (n > 0) {
            rl_buf_commit(&c->in, (size_t)n);
            dispatch(c);
        } else if (n == 0) {
            lost(c, RLC_ECLOSED);
            return;
        } else if (n != RLC_EAGAIN) {
            lost(c, (int)n);
            return;
        } else
            return;
    } while (c->conn == conn && !c->closing && c->state == ST_CONNECTED &&
             rlc__io_pending(conn->ssl));
}

static void on_connected(rlc_async_t *c)
{
    c->state = ST_CONNECTED;
    c->tried = 0;
    c->backoff_ms = 0;
    uv_timer_stop(&c->conn_timer);
    watch(c, UV_READABLE);
    notify(c, 1, RLC_OK);
    do_write(c);
}

/* The current attempt failed: try the next address, or, after a whole
 * round, give up on the queued checks and wait out the backoff. */
static void attempt_failed(rlc_async_t *c, int status)
{
    uint32_t gone;

    rlc__why_at(c->why, c->cf.addrs[c->cur].text, status);

    close_conn(c);
    c->state = ST_IDLE;
    c->cur = (c->cur + 1) % c->cf.naddr;
    if (++c->tried < c->cf.naddr) {
        attempt(c);
        return;
    }
    c->tried = 0;
    c->backoff_ms = rlc__backoff(c->backoff_ms, &c->cf.o, &c->seed);
    uv_timer_start(&c->conn_timer, on_conn_timer, c->backoff_ms, 0);
    rl_buf_reset(&c->out);
    gone = take_all(c);
    notify(c, 0, status);
    fail_chain(c, gone, RLC_ECLOSED);
}

/* The end of a connection whose server said GOAWAY: normally its end of
 * file after our FIN, once every answer is in; or its close at the end of
 * its grace. The frames in `next` never went anywhere: they become the
 * output buffer, and the client reconnects at once (no backoff), starting
 * at the next address, since this one is shutting down; behind a load
 * balancer the one address leads to another server. Checks sent here that
 * are still unanswered can no longer be, and fail. */
static void gone_away(rlc_async_t *c, int status)
{
    rl_buf_t t = c->out;
    uint32_t gone;

    c->out = c->next; /* swapped, not copied: both allocations are kept */
    c->next = t;
    c->goaway = 0;
    c->wr_shut = 0;
    c->tried = 0;
    c->backoff_ms = 0;
    uv_timer_start(&c->conn_timer, on_conn_timer, 0, 0);
    gone = take_sent(c);
    notify(c, 0, status == RLC_ECLOSED ? RLC_ESHUTDOWN : status);
    fail_chain(c, gone, RLC_ECLOSED);
    /* Only now: the callbacks above still see the server that left. */
    c->cur = (c->cur + 1) % c->cf.naddr;
}

/* A working connection is gone: every check on it fails, and the client
 * reconnects after the shortest backoff, to the same address first (most
 * often the server was restarted). After a GOAWAY, see gone_away. */
static void lost(rlc_async_t *c, int status)
{
    uint32_t gone;

    close_conn(c);
    c->state = ST_IDLE;
    rl_buf_reset(&c->in);
    rl_buf_reset(&c->out);
    if (c->goaway) {
        gone_away(c, status);
        return;
    }
    c->backoff_ms = rlc__backoff(0, &c->cf.o, &c->seed);
    uv_timer_start(&c->conn_timer, on_conn_timer, c->backoff_ms, 0);
    gone = take_all(c);
    notify(c, 0, status);
    fail_chain(c, gone, RLC_ECLOSED);
}

/* One step of the TLS handshake, under the connect timer. */
static void handshake(rlc_async_t *c)
{
    int want = 0;
    int rc = rlc__tls_handshake(c->conn->ssl, &want, c->why, sizeof(c->why));

    if (rc == RLC_OK) {
        c->why[0] = '\0';
        on_connected(c);
    } else if (rc == RLC_EAGAIN)
        watch(c, want == RLC__WANT_WRITE ? UV_WRITABLE : UV_READABLE);
    else
        attempt_failed(c, rc);
}

static void start_tls(rlc_async_t *c)
{
    int rc = rlc__tls_start(c->cf.tls, &c->cf.addrs[c->cur], c->conn->fd,
                            &c->conn->ssl);

    if (rc != RLC_OK) {
        attempt_failed(c, rc);
        return;
    }
    c->state = ST_HANDSHAKING;
    handshake(c);
}

static void on_poll(uv_poll_t *h, int status, int events)
{
    conn_t *conn = h->data;
    rlc_async_t *c = conn->c;

    enter(c);
    if (c->conn != conn || c->closing) {
        leave(c);
        return;
    }
    /* libuv reports a socket error (POLLERR) as UV_EBADF and stops the
     * handle; the socket itself knows what went wrong. */
    int err = status < 0 ? rlc__sock_finish(conn->fd) : RLC_OK;
    if (status < 0 && err == RLC_OK)
        err = RLC_EIO;
    if (c->state == ST_CONNECTING) {
        int rc = err != RLC_OK ? err : rlc__sock_finish(conn->fd);
        if (rc == RLC_OK && c->cf.tls != NULL)
            start_tls(c);
        else if (rc == RLC_OK)
            on_connected(c);
        else
            attempt_failed(c, rc);
    } else if (c->state == ST_HANDSHAKING) {
        if (err != RLC_OK)
            attempt_failed(c, err);
        else
            handshake(c);
    } else if (err != RLC_OK) {
        lost(c, err);
    } else {
        if (events & UV_READABLE)
            do_read(c);
        if ((events & UV_WRITABLE) && c->conn == conn && !c->closing) {
            int want;
            long n = rlc__io_send(conn->fd, conn->ssl, rl_buf_rptr(&c->out),
                                  rl_buf_len(&c->out), &want, c->why);
            if (n < 0 && n != RLC_EAGAIN)
                lost(c, (int)n);
            else if (n == 0 && rl_buf_len(&c->out) > 0)
                lost(c, RLC_ECLOSED);
            else {
                if (n > 0)
                    rl_buf_consume(&c->out, (size_t)n);
                wrote(c);
            }
        }
    }
    leave(c);
}

static void watch(rlc_async_t *c, int events)
{
    if (c->conn == NULL || c->conn->events == events)
        return;
    c->conn->events = events;
    uv_poll_start(&c->conn->poll, events, on_poll);
}

static void on_conn_timer(uv_timer_t *t)
{
    rlc_async_t *c = t->data;

    enter(c);
    if (!c->closing) {
        if (c->state == ST_CONNECTING || c->state == ST_HANDSHAKING)
            attempt_failed(c, RLC_ETIMEDOUT);
        else if (c->state == ST_IDLE)
            attempt(c);
    }
    leave(c);
}

/* Starts connecting to the current address. Called from the loop only
 * (the connect timer, or a failed attempt), never from the API. */
static void attempt(rlc_async_t *c)
{
    conn_t *conn;
    int fd, rc;

    if (c->closing)
        return;
    c->why[0] = '\0';
    rc = rlc__sock_connect(&c->cf.addrs[c->cur], &fd);
    if (rc != RLC_OK && rc != RLC_EAGAIN) {
        attempt_failed(c, rc);
        return;
    }
    conn = calloc(1, sizeof(*conn));
    if (conn == NULL) {
        close(fd);
        attempt_failed(c, RLC_ENOMEM);
        return;
    }
    conn->c = c;
    conn->fd = fd;
    if (uv_poll_init_socket(c->loop, &conn->poll, fd) != 0) {
        close(fd);
        free(conn);
        attempt_failed(c, RLC_EIO);
        return;
    }
    conn->poll.data = conn;
    c->handles++;
    c->conn = conn;
    c->state = ST_CONNECTING;
    if (rc == RLC_OK) {
        on_connected(c);
        return;
    }
    watch(c, UV_WRITABLE);
    uv_timer_start(&c->conn_timer, on_conn_timer, c->cf.o.connect_timeout_ms,
                   0);
}

/* ---- timeouts and flushing ----------------------------------------------- */

static void on_req_timer(uv_timer_t *t)
{
    rlc_async_t *c = t->data;
    uint64_t now = uv_now(c->loop), unix_now = 0;

    enter(c);
    while (!c->closing && c->head != NIL && c->slots[c->head].deadline <= now) {
        uint32_t i = c->head;
        if (unix_now == 0)
            unix_now = rl_unix_ms();
        unlink_slot(c, i);
        fire_fail(c, i, RLC_ETIMEDOUT, unix_now);
    }
    /* Frames of checks that all timed out while no server was there would
     * otherwise wait in the buffer to be sent to the next one. */
    if (c->head == NIL && c->state != ST_CONNECTED)
        rl_buf_reset(&c->out);
    if (c->head == NIL)
        rl_buf_reset(&c->next);
    if (!c->closing && c->head != NIL)
        uv_timer_start(&c->req_timer, on_req_timer,
                       c->slots[c->head].deadline - now, 0);
    leave(c);
}

static void flush(rlc_async_t *c)
{
    if (c->state != ST_CONNECTED || rl_buf_len(&c->out) == 0 ||
        (c->conn->events & UV_WRITABLE))
        return;
    enter(c);
    do_write(c);
    leave(c);
}

static void on_prepare(uv_prepare_t *h)
{
    flush(h->data);
}

static void on_check(uv_check_t *h)
{
    flush(h->data);
}

/* ---- API ----------------------------------------------------------------- */

int rlc_async_new(rlc_async_t **out, uv_loop_t *loop, const rlc_options_t *opts)
{
    rlc_async_t *c;
    uint32_t i;
    int rc;

    if (out == NULL)
        return RLC_EINVAL;
    *out = NULL;
    if (loop == NULL)
        return RLC_EINVAL;
    c = calloc(1, sizeof(*c));
    if (c == NULL)
        return RLC_ENOMEM;
    rc = rlc__conf_init(&c->cf, opts, c->why, sizeof(c->why));
    if (rc != RLC_OK) {
        free(c);
        return rc;
    }
    c->nslots = c->cf.o.max_inflight;
    c->slots = calloc(c->nslots, sizeof(*c->slots));
    if (c->slots == NULL) {
        rlc__conf_free(&c->cf);
        free(c);
        return RLC_ENOMEM;
    }
    for (i = 0; i < c->nslots; i++) {
        c->slots[i].next = i + 1 < c->nslots ? i + 1 : NIL;
        c->slots[i].prev = NIL;
    }
    c->free_head = 0;
    c->head = c->tail = NIL;
    c->loop = loop;
    c->seed = (unsigned)rl_mono_ms() ^ (unsigned)(uintptr_t)c;
    rl_buf_init(&c->in, c->cf.o.max_frame + RL_FRAME_HEADER + RLC__READ_CHUNK);
    /* Room for every slot's frame twice over: enough for a full window of
     * checks plus the frames of timed-out ones still waiting to go. */
    rl_buf_init(&c->out, (size_t)c->nslots * RLC__CHECK_FRAME_MAX * 2);
    /* Allocated at the first GOAWAY only; then kept, as `out` is. */
    rl_buf_init(&c->next, (size_t)c->nslots * RLC__CHECK_FRAME_MAX * 2);

    /* These four cannot fail on a valid loop. */
    uv_timer_init(loop, &c->req_timer);
    uv_timer_init(loop, &c->conn_timer);
    uv_prepare_init(loop, &c->prepare);
    uv_check_init(loop, &c->check);
    c->req_timer.data = c->conn_timer.data = c;
    c->prepare.data = c->check.data = c;
    c->handles = 4;
    /* Flushing alone must not keep the loop alive. */
    uv_prepare_start(&c->prepare, on_prepare);
    uv_check_start(&c->check, on_check);
    uv_unref((uv_handle_t *)&c->prepare);
    uv_unref((uv_handle_t *)&c->check);

    /* The first attempt runs from the loop, so no callback of the client
     * ever fires inside this call. */
    uv_timer_start(&c->conn_timer, on_conn_timer, 0, 0);
    *out = c;
    return RLC_OK;
}

/* Stands in the slot of an rlc_async_xop as its (unused) cb, so that "cb
 * is NULL" keeps meaning "free" everywhere. */
static void no_check_cb(rlc_async_t *c, const rlc_result_t *res, void *arg)
{
    (void)c;
    (void)res;
    (void)arg;
}

/* Submits a plain check (x NULL, cb) or a request of any op (x, xcb). */
static int submit(rlc_async_t *c, const rlc_check_t *req, const rlc_xop_t *x,
                  rlc_check_cb cb, rlc_xop_cb xcb, void *arg)
{
    uint32_t i, window_s = 0;
    slot_t *s;
    uint64_t id;
    int rc;

    if (c->closing)
        return RLC_ECANCELED;
    if (c->free_head == NIL)
        return RLC_EBUSY;
    i = c->free_head;
    s = &c->slots[i];
    id = (uint64_t)s->gen << 32 | (uint64_t)(i + 1);
    /* After a GOAWAY the frame waits for the next connection. */
    if (x != NULL)
        rc = rlc__encode_x(c->goaway ? &c->next : &c->out, x, id, &window_s);
    else
        rc = rlc__encode(c->goaway ? &c->next : &c->out, req, id, &window_s);
    if (rc != RLC_OK)
        return rc == RLC_EFULL ? RLC_EBUSY : rc;

    /* Outside our callbacks the loop's cached time may be old (the caller
     * may have been busy since the loop last polled): a deadline from it
     * would be early. Inside them it was taken microseconds ago. */
    if (c->depth == 0)
        uv_update_time(c->loop);
    c->free_head = s->next;
    s->cb = x != NULL ? no_check_cb : cb;
    s->xcb = x != NULL ? xcb : NULL;
    s->op = x != NULL ? x->op : RLC_OP_CHECK;
    s->arg = arg;
    s->deadline = uv_now(c->loop) + c->cf.o.request_timeout_ms;
    s->window_s = window_s;
    s->later = c->goaway != 0;
    link_slot(c, i);
    c->inflight++;

    if (!uv_is_active((uv_handle_t *)&c->req_timer))
        uv_timer_start(&c->req_timer, on_req_timer, c->cf.o.request_timeout_ms,
                       0);
    /* A big burst goes out now rather than at the end of the iteration;
     * inside our own callbacks the check handle will do it. */
    if (c->depth == 0 && rl_buf_len(&c->out) >= FLUSH_NOW)
        flush(c);
    return RLC_OK;
}

int rlc_async_check(rlc_async_t *c, const rlc_check_t *req, rlc_check_cb cb,
                    void *arg)
{
    if (c == NULL || req == NULL || cb == NULL)
        return RLC_EINVAL;
    return submit(c, req, NULL, cb, NULL, arg);
}

int rlc_async_xop(rlc_async_t *c, const rlc_xop_t *req, rlc_xop_cb cb,
                  void *arg)
{
    if (c == NULL || req == NULL || cb == NULL)
        return RLC_EINVAL;
    return submit(c, NULL, req, NULL, cb, arg);
}

static int async_check_op(rlc_async_t *c, int op, const rlc_check_t *req,
                          rlc_xop_cb cb, void *arg)
{
    rlc_xop_t x;

    if (req == NULL)
        return RLC_EINVAL;
    memset(&x, 0, sizeof(x));
    x.op = op;
    x.check = *req;
    return rlc_async_xop(c, &x, cb, arg);
}

static int async_handle_op(rlc_async_t *c, int op, const void *handle,
                           size_t handle_len, uint64_t actual, rlc_xop_cb cb,
                           void *arg)
{
    rlc_xop_t x;

    memset(&x, 0, sizeof(x));
    x.op = op;
    x.handle = handle;
    x.handle_len = handle_len;
    x.actual = actual;
    return rlc_async_xop(c, &x, cb, arg);
}

int rlc_async_reserve(rlc_async_t *c, const rlc_check_t *req, rlc_xop_cb cb,
                      void *arg)
{
    return async_check_op(c, RLC_OP_RESERVE, req, cb, arg);
}

int rlc_async_acquire(rlc_async_t *c, const rlc_check_t *req, rlc_xop_cb cb,
                      void *arg)
{
    return async_check_op(c, RLC_OP_ACQUIRE, req, cb, arg);
}

int rlc_async_settle(rlc_async_t *c, const void *handle, size_t handle_len,
                     uint64_t actual, rlc_xop_cb cb, void *arg)
{
    return async_handle_op(c, RLC_OP_SETTLE, handle, handle_len, actual, cb,
                           arg);
}

int rlc_async_release(rlc_async_t *c, const void *handle, size_t handle_len,
                      rlc_xop_cb cb, void *arg)
{
    return async_handle_op(c, RLC_OP_RELEASE, handle, handle_len, 0, cb, arg);
}

int rlc_async_renew(rlc_async_t *c, const void *handle, size_t handle_len,
                    rlc_xop_cb cb, void *arg)
{
    return async_handle_op(c, RLC_OP_RENEW, handle, handle_len, 0, cb, arg);
}

uv_loop_t *rlc__async_loop(const rlc_async_t *c)
{
    return c->loop;
}

size_t rlc_async_inflight(const rlc_async_t *c)
{
    return c == NULL ? 0 : c->inflight;
}

const char *rlc_async_last_error(const rlc_async_t *c)
{
    return c == NULL ? "" : c->why;
}

int rlc_async_connected(const rlc_async_t *c)
{
    return c != NULL && c->state == ST_CONNECTED && !c->closing;
}

void rlc_async_on_state(rlc_async_t *c, rlc_state_cb cb, void *arg)
{
    if (c == NULL)
        return;
    c->state_cb = cb;
    c->state_arg = arg;
}

const char *rlc_async_server(const rlc_async_t *c)
{
    return c == NULL ? "" : c->cf.addrs[c->cur].text;
}

static void teardown(rlc_async_t *c)
{
    c->torn_down = 1;
    close_conn(c);
    c->state = ST_IDLE;
    uv_timer_stop(&c->req_timer);
    uv_timer_stop(&c->conn_timer);
    fail_all(c, RLC_ECANCELED);
    uv_close((uv_handle_t *)&c->req_timer, on_handle_closed);
    uv_close((uv_handle_t *)&c->conn_timer, on_handle_closed);
    uv_close((uv_handle_t *)&c->prepare, on_handle_closed);
    uv_close((uv_handle_t *)&c->check, on_handle_closed);
}

void rlc_async_free(rlc_async_t *c)
{
    if (c == NULL || c->closing)
        return;
    c->closing = 1;
    if (c->depth == 0)
        teardown(c);
}
