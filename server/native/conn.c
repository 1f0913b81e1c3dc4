/* Client connections: frames in, responses out.
 *
 * Reads land in a per-connection buffer and every whole frame in it is
 * decoded in place. Valid requests go to the decider; anything invalid is
 * answered at once. Responses are appended to the connection's output
 * buffer and written once per loop iteration (rls_conns_flush, from the
 * server's check handle): straight to the socket when it takes them all,
 * else what remains with uv_write; while that write is in flight, new
 * responses collect in a second buffer.
 *
 * Backpressure: a connection with --max-inflight requests unanswered is not
 * read until answers drain; one whose unsent output passes --max-output is
 * closed (it is not reading its responses). A connection's memory is freed
 * only when its handle is closed and no request of it is in flight, so a
 * late answer never touches freed memory.
 *
 * Input memory: a connection with no partial frame has no input buffer of
 * its own. It reads into the set's shared buffer (one read's worth), whole
 * frames are decoded there, and only a trailing partial frame is copied to
 * the connection's buffer. While a frame is partial the connection reads
 * into its own buffer, growing it at most by what it already holds (4 KiB
 * at least) and never past the frame's declared end, so a header alone does
 * not reserve the length it declares and a connection holds about what it
 * was actually sent. The buffer is freed when it drains. The memory all
 * input buffers hold is capped by --max-partial-bytes: past it the
 * connections holding the most are closed, largest first.
 *
 * Deadlines: a connection that completes no frame for --idle-timeout
 * (counted from its last request or, if later, its last answer; never
 * while it has requests in flight or output to write) is closed, and so
 * is one whose frame is not whole --frame-timeout-ms after its first byte.
 * One timer serves the whole set rather than one per connection: the set
 * keeps `all` ordered by last activity (a connection moves to the tail
 * when it completes a frame) and `partial` ordered by when the current
 * frame began (appended when it begins), so each sweep looks only at the
 * heads of two lists and stops at the first connection not yet due: O(1)
 * per frame, O(expired) per sweep, and no timer start/stop per read as a
 * per-connection uv_timer would cost. The price is precision: a deadline
 * fires up to one sweep period (a quarter of the shorter timeout, 10 to
 * 250 ms) late. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rl_validate.h"
#include "rl_error.h"
#include "rl_frame.h"
#include "rl_msg.h"
#include "core/decide.h"
#include "base/log.h"
#include "native/conn.h"
#include "net/listen.h"
#include "net/stream.h"

#define READ_CHUNK 65536

/* A partial frame's buffer grows by at least this much per read. */
#define IN_STEP 4096

typedef struct rls_conn_s {
    /* The socket (net/stream.h). Under TLS (s.tls): frames come out of
     * it, responses go through it (out is sealed in place just before it
     * is written). s.owed: its requests in the batcher (in flight); it
     * is freed when rls_stream_done says so. */
    rls_stream_t s;
    uv_write_t wreq;
    rls_conns_t *srv;
    rls_list_t node;    /* in srv->all */
    rls_list_t dirty;   /* in srv->dirty while it has output to write */
    rls_list_t resume;  /* in srv->resume while it should read again */
    rls_list_t partial; /* in srv->partial while a frame is incomplete */
    uint64_t active_ms; /* last whole frame or last answer (or last seen
                           busy by the sweep) */
    uint64_t frame_ms;  /* when the incomplete frame's first byte came */
    size_t in_held;     /* in.cap as counted in stats.input_bytes */
    rl_buf_t in;        /* partial frame, or frames a pause left unread */
    rl_buf_t out;       /* responses not yet handed to uv_write */
    rl_buf_t wbuf;      /* the bytes of the write in flight */
    rls_list_t hs;      /* in srv->handshaking until its handshake ends */
    unsigned writing : 1;
    unsigned eof : 1;    /* no more requests will be read */
} rls_conn_t;

static void conn_close(rls_conn_t *c);
static size_t process(rls_conn_t *c);

static void maybe_free(rls_conn_t *c)
{
    if (!rls_stream_done(&c->s))
        return;
    rl_buf_free(&c->in);
    rl_buf_free(&c->out);
    rl_buf_free(&c->wbuf);
    free(c);
}

static void on_closed(uv_handle_t *h)
{
    rls_conn_t *c = h->data;
    rls_conns_t *s = c->srv;

    /* Nothing reads the input any more; it was uncounted at conn_close. */
    rl_buf_free(&c->in);
    c->s.handles--;
    maybe_free(c);
    /* The last connection of a stopping server lets it finish. */
    if (s->stopping && rls_list_empty(&s->all) && s->fe.on_empty != NULL)
        s->fe.on_empty(s->fe.arg);
}

static void conn_close(rls_conn_t *c)
{
    rls_conns_t *s = c->srv;

    if (c->s.closing)
        return;
    /* The handle's callback comes later, in the loop's close phase; the
     * TLS state goes now. */
    rls_stream_close(&c->s, on_closed);
    c->eof = 1;
    rls_list_remove(&c->node);
    rls_list_remove(&c->dirty);
    rls_list_remove(&c->resume);
    rls_list_remove(&c->partial);
    rls_list_remove(&c->hs);
    /* The input buffer is freed in on_closed; counting it out now lets a
     * memory shed stop as soon as it has closed enough. */
    s->stats.input_bytes -= c->in_held;
    c->in_held = 0;
    s->stats.conns_open--;
    RLS_DEBUG("connection closed", " inflight=%u", c->s.owed);
}

/* Closes a connection that will read no more once it has nothing left to
 * answer or to write. Whole frames still buffered (a paused connection) are
 * owed answers too; a trailing partial frame never will be. */
static void maybe_finish(rls_conn_t *c)
{
    rl_frame_t f;

    if (c->eof && !c->s.closing && c->s.owed == 0 && !c->writing &&
        rl_buf_len(&c->out) == 0 &&
        rl_frame_decode(rl_buf_rptr(&c->in), rl_buf_len(&c->in),
                        c->srv->max_frame, &f) != RL_OK)
        conn_close(c);
}

/* Keeps the loop from blocking in poll while connections wait to be read
 * again; rls_conn_resume() stops it. */
static void on_spin(uv_idle_t *h)
{
    (void)h;
}

static void mark_dirty(rls_conn_t *c)
{
    if (!rls_list_linked(&c->dirty))
        rls_list_push(&c->srv->dirty, &c->dirty);
}

/* Appends one response; `decision` says whether it answers a request (and
 * counts in the decisions metric) or is a connection-level notice. Returns
 * 0, or RL_EFULL if the connection was closed because its unsent output
 * passed the cap. */
static int put_result(rls_conn_t *c, const rl_result_t *r, int decision)
{
    rls_conns_t *s = c->srv;

    if (decision && r->code >= 0 && r->code <= RL_CODE_ERROR)
        s->stats.decisions[r->code]++;
    if (rl_result_put(&c->out, r) != RL_OK) {
        s->stats.conns_overflow++;
        RLS_WARN("closing connection: unsent output over --max-output",
                 " bytes=%zu", rl_buf_len(&c->out) + rl_buf_len(&c->wbuf));
        conn_close(c);
        return RL_EFULL;
    }
    mark_dirty(c);
    return 0;
}

static void put_error(rls_conn_t *c, uint64_t id, const char *msg,
                      int decision)
{
    rl_result_t r;

    memset(&r, 0, sizeof(r));
    r.id = id;
    r.code = RL_CODE_ERROR;
    r.error = msg;
    r.error_len = strlen(msg);
    put_result(c, &r, decision);
}

/* Answers a request that will not be decided (invalid, unknown rule). */
static void reply_error(rls_conn_t *c, uint64_t id, const char *msg)
{
    put_error(c, id, msg, 1);
}

/* A notice about the connection, with id 0: a payload that does not decode,
 * a broken frame, GOAWAY. Counted as rejected frames, not as decisions. */
static void reply_notice(rls_conn_t *c, const char *msg)
{
    put_error(c, 0, msg, 0);
}

void rls_conn_respond(void *owner, const rl_result_t *r)
{
    rls_conn_t *c = owner;
    rls_conns_t *s = c->srv;

    c->s.owed--;
    s->stats.inflight--;
    if (c->s.closing) {
        maybe_free(c);
        return;
    }
    if (c->s.owed == 0) {
        /* Its last answer: the idle time starts now, not at the last
         * request (`all` stays in order: now is the latest time). */
        c->active_ms = uv_now(s->loop);
        rls_list_remove(&c->node);
        rls_list_push(&s->all, &c->node);
    }
    if (put_result(c, r, 1) != 0)
        return;
    /* A paused connection reads again once it is under half its limit;
     * the read resumes from the check handle, not from inside a store
     * callback. */
    if (!c->s.reading && c->s.owed <= s->max_inflight / 2 &&
        (!c->eof || rl_buf_len(&c->in) > 0) &&
        !rls_list_linked(&c->resume)) {
        rls_list_push(&s->resume, &c->resume);
        uv_idle_start(&s->spin, on_spin);
    }
}

/* Brings stats.input_bytes in line with the input buffer's allocation. */
static void in_sync(rls_conn_t *c)
{
    rls_conns_t *s = c->srv;

    if (c->s.closing)
        return; /* uncounted already */
    s->stats.input_bytes = s->stats.input_bytes - c->in_held + c->in.cap;
    c->in_held = c->in.cap;
}

/* With no partial frame a read goes to the shared buffer; libuv calls
 * on_read right after on_alloc, so one buffer serves every connection.
 * With one, the connection's own buffer grows towards the frame's end, by
 * at most what it holds already (IN_STEP at least). */
static void on_alloc(uv_handle_t *h, size_t hint, uv_buf_t *buf)
{
    rls_conn_t *c = h->data;
    rls_conns_t *s = c->srv;
    size_t len = rl_buf_len(&c->in), want = IN_STEP;
    rl_frame_t f;
    uint8_t *w;

    (void)hint;
    buf->base = NULL;
    buf->len = 0; /* unless set below: libuv reports UV_ENOBUFS */
    /* Under TLS, ciphertext: the plaintext is taken out and framed in
     * on_read. */
    if (len == 0 || c->s.tls != NULL) {
        if ((w = rls_streams_rbuf(&s->set)) == NULL)
            return;
        buf->base = (char *)w;
        buf->len = READ_CHUNK;
        return;
    }
    if (rl_frame_decode(rl_buf_rptr(&c->in), len, s->max_frame, &f) ==
        RL_EAGAIN)
        want = f.size > 0 ? f.size - len : RL_FRAME_HEADER - len;
    if (want > (len > IN_STEP ? len : IN_STEP))
        want = len > IN_STEP ? len : IN_STEP;
    if (rl_buf_reserve(&c->in, want, &w) != RL_OK)
        return;
    in_sync(c);
    buf->base = (char *)w;
    buf->len = rl_buf_avail(&c->in);
}

/* Handles one decoded frame payload. */
static void handle_request(rls_conn_t *c, const uint8_t *p, size_t n)
{
    rls_conns_t *s = c->srv;
    const char *why = NULL;
    rls_ask_t a;
    int rc;

    memset(&a, 0, sizeof(a));
    if (rl_check_decode(p, n, &a.q) != RL_OK) {
        s->stats.rejected[RLS_REJECT_DECODE]++;
        reply_notice(c, "payload is not a valid CheckRequest");
        return;
    }
    if (a.q.id == 0) {
        /* Id 0 is the server's: an answer carrying it would read as a
         * notice about the connection, and no client could match it. */
        s->stats.rejected[RLS_REJECT_ID0]++;
        reply_notice(c, "request id 0 is reserved for server notices");
        return;
    }
    a.from_request = 1;
    a.ns = RLS_NS_INLINE;
    /* In flight from here: the answer may come before rls_decide returns
     * (a kill switch, a refusal known without the store). */
    c->s.owed++;
    s->stats.inflight++;
    if ((rc = rls_decide(s->decider, &a, rls_conn_respond, c, &why)) != RL_OK) {
        c->s.owed--;
        s->stats.inflight--;
        if (rc != RL_ENOMEM)
            s->stats.rejected[rc == RL_ENORULE   ? RLS_REJECT_RULE
                              : rc == RL_EINLINE ? RLS_REJECT_INLINE
                                                 : RLS_REJECT_INVALID]++;
        reply_error(c, a.q.id, why);
    }
}

/* Not reading: no frame deadline runs (a pause is the server's doing). */
static void stop_reading(rls_conn_t *c)
{
    rls_stream_read_stop(&c->s);
    rls_list_remove(&c->partial);
}

/* Decodes the whole frames at p[0..n), up to the connection's in-flight
 * limit, and counts them in *frames. Returns the bytes consumed: up to the
 * first frame left undecoded, or all of them when the framing is lost. */
static size_t decode(rls_conn_t *c, const uint8_t *p, size_t n,
                     size_t *frames)
{
    rls_conns_t *s = c->srv;
    size_t off = 0;
    rl_frame_t f;
    int rc;

    while (!c->s.closing && c->s.owed < s->max_inflight) {
        /* p is NULL when the connection holds no input buffer, and
         * NULL + 0 is undefined: add off only once a frame was taken. */
        rc = rl_frame_decode(off > 0 ? p + off : p, n - off,
                             s->max_frame, &f);
        if (rc == RL_EAGAIN)
            break;
        if (rc != RL_OK) {
            /* The framing is lost: say why once, then close after the
             * answers already owed. */
            s->stats.rejected[rc == RL_EFRAMEFLAG ? RLS_REJECT_FLAG
                                                  : RLS_REJECT_SIZE]++;
            RLS_DEBUG("broken frame", " err=\"%s\"", rl_strerror(rc));
            reply_notice(c, rl_strerror(rc));
            stop_reading(c);
            c->eof = 1;
            return n;
        }
        handle_request(c, f.payload, f.len);
        off += f.size;
        (*frames)++;
    }
    if (c->s.owed >= s->max_inflight)
        stop_reading(c);
    return off;
}

/* Decodes the whole frames in the connection's own buffer. Returns how
 * many. */
static size_t process(rls_conn_t *c)
{
    size_t frames = 0;

    rl_buf_consume(&c->in, decode(c, rl_buf_rptr(&c->in),
                                  rl_buf_len(&c->in), &frames));
    return frames;
}

/* After input was decoded: a whole frame is activity (the connection moves
 * to the tail of `all`); a drained buffer is freed; a frame left partial
 * is on `partial` from the time its first byte came, which is now if it
 * began after the last whole frame, and is not moved on by more of its
 * bytes, so trickling does not extend its deadline. */
static void input_done(rls_conn_t *c, size_t frames)
{
    rls_conns_t *s = c->srv;
    uint64_t now = uv_now(s->loop);

    if (c->s.closing)
        return;
    if (frames > 0) {
        c->active_ms = now;
        rls_list_remove(&c->node);
        rls_list_push(&s->all, &c->node);
    }
    if (rl_buf_len(&c->in) == 0) {
        rls_list_remove(&c->partial);
        if (c->in.data != NULL) {
            rl_buf_free(&c->in);
            in_sync(c);
        }
        return;
    }
    if (!c->s.reading)
        return; /* stop_reading took it off `partial` */
    if (frames > 0 || !rls_list_linked(&c->partial)) {
        c->frame_ms = now;
        rls_list_remove(&c->partial);
        rls_list_push(&s->partial, &c->partial);
    }
}

/* Writes one id-0 notice straight to the socket if nothing else is being
 * written (it would cut into that), without queuing: for a connection
 * about to be closed, so the client can tell why. */
/* The id-0 ERROR frame saying msg, in frame[NOTICE_MAX]; returns its
 * length. */
#define NOTICE_MAX 256
static size_t notice_frame(uint8_t frame[NOTICE_MAX], const char *msg,
                           int notice)
{
    rl_result_t r;
    size_t n;

    memset(&r, 0, sizeof(r));
    r.code = RL_CODE_ERROR;
    r.error = msg;
    r.error_len = strlen(msg);
    r.notice = notice;
    n = rl_result_encode(&r, frame + RL_FRAME_HEADER);
    rl_frame_header(frame, (uint32_t)n);
    return n + RL_FRAME_HEADER;
}

static void try_notice(rls_stream_t *st, const char *msg, int notice)
{
    uint8_t frame[NOTICE_MAX];

    rls_stream_try_write(st, frame, notice_frame(frame, msg, notice));
}

/* Closes a connection for one of the RLS_CLOSE_* reasons, telling it why
 * when that cannot interleave with a write. */
static void drop(rls_conn_t *c, int reason, const char *msg)
{
    c->srv->stats.closed[reason]++;
    if (!c->writing && rl_buf_len(&c->out) == 0 && c->s.tls == NULL)
        try_notice(&c->s, msg, RL_NOTICE_NONE);
    RLS_DEBUG("closing connection", " reason=\"%s\" held=%zu", msg,
              c->in_held);
    conn_close(c);
    /* Nothing is decoding this buffer (drop runs from the sweep and after
     * a read, never inside decode), so it goes now rather than in
     * on_closed: a flood closes connections faster than close callbacks
     * run, and memory counted out must really be out. */
    rl_buf_free(&c->in);
}

static int by_held_desc(const void *a, const void *b)
{
    size_t x = (*(rls_conn_t *const *)a)->in_held;
    size_t y = (*(rls_conn_t *const *)b)->in_held;

    return x < y ? 1 : x > y ? -1 : 0;
}

/* Over --max-partial-bytes: closes the connections holding the most input
 * memory, largest first, until the total is down to three quarters of the
 * cap, so that under a flood one O(n log n) pass serves for a quarter of
 * the cap's worth of reads rather than one pass per read. */
static void shed(rls_conns_t *s)
{
    static const char msg[] = "server input memory full (--max-partial-bytes)";
    uint64_t cap = s->set.opts.max_input, target = cap - cap / 4;
    uint64_t before = s->stats.input_bytes, closed0;
    rls_conn_t **v = NULL;
    size_t n = 0, i;
    rls_list_t *q;

    if (cap == 0 || s->stats.input_bytes <= cap)
        return;
    closed0 = s->stats.closed[RLS_CLOSE_PARTIAL];
    v = malloc((size_t)s->stats.conns_open * sizeof(*v));
    if (v != NULL) {
        for (q = s->all.next; q != &s->all; q = q->next) {
            rls_conn_t *c = RLS_CONTAINER_OF(q, rls_conn_t, node);
            if (c->in_held > 0 && n < s->stats.conns_open)
                v[n++] = c;
        }
        qsort(v, n, sizeof(*v), by_held_desc);
        for (i = 0; i < n && s->stats.input_bytes > target; i++)
            drop(v[i], RLS_CLOSE_PARTIAL, msg);
        free(v);
    } else {
        /* Out of memory for the list: the slow way, one scan per close. */
        while (s->stats.input_bytes > target) {
            rls_conn_t *max = NULL;
            for (q = s->all.next; q != &s->all; q = q->next) {
                rls_conn_t *c = RLS_CONTAINER_OF(q, rls_conn_t, node);
                if (max == NULL || c->in_held > max->in_held)
                    max = c;
            }
            if (max == NULL || max->in_held == 0)
                break;
            drop(max, RLS_CLOSE_PARTIAL, msg);
        }
    }
    /* At most one warning a second, however hard the flood. */
    uint64_t now = uv_now(s->loop);
    s->shed_unlogged += s->stats.closed[RLS_CLOSE_PARTIAL] - closed0;
    if (s->shed_logged_ms == 0 || now - s->shed_logged_ms >= 1000) {
        RLS_WARN("closing connections over --max-partial-bytes",
                 " closed=%llu held_before=%llu held=%llu cap=%llu",
                 (unsigned long long)s->shed_unlogged,
                 (unsigned long long)before,
                 (unsigned long long)s->stats.input_bytes,
                 (unsigned long long)cap);
        s->shed_logged_ms = now ? now : 1;
        s->shed_unlogged = 0;
    }
}

/* ---- TLS ---------------------------------------------------------------*/

/* Seals the responses in out in place (they are plaintext until the
 * write: flush always sends out whole or swaps it away), after whatever
 * the TLS layer has to say itself (its handshake, tickets). Returns 0 or
 * an error: the connection must close. */
static int tls_seal(rls_conn_t *c)
{
    int rc = 0;

    if (rls_tls_conn_ready(c->s.tls) && rl_buf_len(&c->out) > 0)
        rc = rls_tls_conn_write(c->s.tls, rl_buf_rptr(&c->out),
                                rl_buf_len(&c->out));
    if (rc != 0)
        return rc;
    rl_buf_reset(&c->out);
    return rls_tls_conn_take(c->s.tls, &c->out);
}

/* The handshake failed (or `why` ends it: the client went, its deadline
 * passed): counted, logged within the rate cap, the client told what
 * can be told (TLS's alert; a native client that sent plaintext frames,
 * an ERROR notice it can read, alone) and closed. */
static void tls_failed(rls_conn_t *c, rls_tls_reason_t reason,
                       const char *why)
{
    uint8_t frame[NOTICE_MAX];
    size_t n = notice_frame(frame, "this port speaks TLS", RL_NOTICE_NONE);

    rls_stream_tls_failed(&c->s, reason, why, frame, n,
                          RLS_STREAM_NOTICE_ONLY);
    conn_close(c);
}

/* A read under TLS: the ciphertext goes to the TLS layer, and all the
 * plaintext it gives (at most about one read's worth, as a plaintext
 * read would bring) is framed as a plaintext read is: whole frames
 * decoded where they are, the rest kept in the connection's buffer. */
static void tls_read(rls_conn_t *c, const uint8_t *p, size_t n)
{
    rls_conns_t *s = c->srv;
    int rc = rls_stream_tls_feed(&c->s, p, n), m;
    size_t frames = 0, k;

    if (rc < 0) {
        tls_failed(c, RLS_TLS_OK, NULL);
        return;
    }
    if (rc == 1)
        rls_list_remove(&c->hs);
    if (rls_tls_conn_pending(c->s.tls) > 0)
        mark_dirty(c);
    if (s->pbuf == NULL && (s->pbuf = malloc(READ_CHUNK)) == NULL) {
        conn_close(c);
        return;
    }
    while (!c->s.closing && !c->eof &&
           (m = rls_tls_conn_read(c->s.tls, s->pbuf, READ_CHUNK)) != 0) {
        if (m < 0) {
            /* close_notify is the client's end of file; anything else a
             * broken record, after which nothing can be read. */
            if (m != RL_ECLOSED) {
                conn_close(c);
                return;
            }
            stop_reading(c);
            c->eof = 1;
            break;
        }
        if (rl_buf_len(&c->in) == 0) {
            k = decode(c, s->pbuf, (size_t)m, &frames);
            if (c->s.closing || k == (size_t)m)
                continue;
            if (rl_buf_append(&c->in, s->pbuf + k, (size_t)m - k) != RL_OK) {
                RLS_ERROR("out of memory buffering a frame", NULL);
                conn_close(c);
                return;
            }
        } else {
            if (rl_buf_append(&c->in, s->pbuf, (size_t)m) != RL_OK) {
                RLS_ERROR("out of memory buffering a frame", NULL);
                conn_close(c);
                return;
            }
            frames += process(c);
        }
        in_sync(c);
    }
    input_done(c, frames);
    maybe_finish(c);
    shed(s);
}

static void on_read(uv_stream_t *stream, ssize_t nread, const uv_buf_t *buf)
{
    rls_conn_t *c = stream->data;
    rls_conns_t *s = c->srv;
    size_t frames = 0, k;

    if (c->s.tls != NULL && nread > 0) {
        tls_read(c, (const uint8_t *)buf->base, (size_t)nread);
        return;
    }
    if (nread < 0 && rls_stream_handshaking(&c->s)) {
        tls_failed(c, RLS_TLS_CLOSED,
                   "TLS handshake: the client closed the connection midway");
        return;
    }
    /* A TLS client on the plaintext port: told in TLS, and said (the
     * frame flag byte would be refused as 0x16). */
    if (nread > 0 && !c->s.heard &&
        rls_stream_plain_hello(&c->s, (const uint8_t *)buf->base,
                               (size_t)nread)) {
        conn_close(c);
        return;
    }
    if (nread > 0) {
        if (buf->base == (char *)s->set.rbuf) {
            /* Whole frames are decoded where they landed; only the rest
             * (a partial frame, or frames a pause left) is kept. */
            k = decode(c, s->set.rbuf, (size_t)nread, &frames);
            if (!c->s.closing && k < (size_t)nread) {
                if (rl_buf_append(&c->in, s->set.rbuf + k,
                                  (size_t)nread - k) !=
                    RL_OK) {
                    RLS_ERROR("out of memory buffering a frame", NULL);
                    conn_close(c);
                    return;
                }
                in_sync(c);
            }
        } else {
            rl_buf_commit(&c->in, (size_t)nread);
            frames = process(c);
        }
        input_done(c, frames);
        maybe_finish(c);
        shed(s);
        return;
    }
    if (nread == 0) {
        shed(s); /* on_alloc may have grown the buffer */
        return;  /* EAGAIN: nothing to do */
    }
    /* End of input or a read error: answer what was received, then close.
     * An error other than EOF means nobody will read the answers. */
    stop_reading(c);
    c->eof = 1;
    if (nread != UV_EOF) {
        RLS_DEBUG("read error", " err=\"%s\"", uv_strerror((int)nread));
        conn_close(c);
        return;
    }
    maybe_finish(c);
}

static void start_reading(rls_conn_t *c)
{
    if (!c->eof && rls_stream_read_start(&c->s, on_alloc, on_read) != 0)
        conn_close(c);
}

void rls_conns_resume(rls_conns_t *s)
{
    while (!rls_list_empty(&s->resume)) {
        rls_list_t *n = s->resume.next;
        rls_conn_t *c = RLS_CONTAINER_OF(n, rls_conn_t, resume);
        size_t frames;
        rls_list_remove(n);
        /* Frames already buffered come first; read more only if there is
         * still room. */
        frames = process(c);
        /* Reading goes on while stopping too: a client told to go away
         * (rls_conns_goaway) is still answered until it closes. */
        if (!c->s.closing && c->s.owed < s->max_inflight)
            start_reading(c);
        input_done(c, frames);
        maybe_finish(c);
    }
    uv_idle_stop(&s->spin);
}

static void on_write(uv_write_t *req, int status)
{
    rls_conn_t *c = req->data;

    c->writing = 0;
    rl_buf_reset(&c->wbuf);
    if (status < 0) {
        if (status != UV_ECANCELED)
            RLS_DEBUG("write error", " err=\"%s\"", uv_strerror(status));
        conn_close(c);
        return;
    }
    if (rl_buf_len(&c->out) > 0)
        mark_dirty(c);
    maybe_finish(c);
}

void rls_conns_flush(rls_conns_t *s)
{
    rls_list_t *n, *next;

    for (n = s->dirty.next; n != &s->dirty; n = next) {
        rls_conn_t *c = RLS_CONTAINER_OF(n, rls_conn_t, dirty);
        rl_buf_t tmp;
        int rc;

        next = n->next;
        if (c->writing)
            continue; /* stays dirty; written when this write completes */
        rls_list_remove(n);
        if (c->s.tls != NULL && tls_seal(c) != 0) {
            conn_close(c);
            continue;
        }
        if (rl_buf_len(&c->out) == 0)
            continue;
        /* Most writes go out whole at once (try-write first). */
        if ((rc = rls_stream_write_now(&c->s, &c->out)) != 0) {
            RLS_DEBUG("write error", " err=\"%s\"", uv_strerror(rc));
            conn_close(c);
            continue;
        }
        if (rl_buf_len(&c->out) == 0) {
            maybe_finish(c);
            continue;
        }
        /* The rest waits for the socket: swap buffers, the full one goes
         * out, the empty one collects. */
        tmp = c->wbuf;
        c->wbuf = c->out;
        c->out = tmp;
        c->writing = 1;
        if (rls_stream_write_queued(&c->s, &c->wreq, &c->wbuf, on_write) !=
            0) {
            c->writing = 0;
            conn_close(c);
        }
    }
}

void rls_conns_accept(rls_conns_t *s, uv_stream_t *listener, int status)
{
    rls_conn_t *c;

    if (status < 0) {
        RLS_WARN("accept failed", " err=\"%s\"", uv_strerror(status));
        return;
    }
    if (rls_streams_handoff(&s->set, listener))
        return; /* another loop serves it */
    c = calloc(1, sizeof(*c));
    if (c == NULL || rls_stream_init(&c->s, &s->set, c) != 0) {
        free(c);
        RLS_ERROR("out of memory accepting a connection", NULL);
        return;
    }
    c->wreq.data = c;
    c->srv = s;
    rls_list_init(&c->node);
    rls_list_init(&c->dirty);
    rls_list_init(&c->resume);
    rls_list_init(&c->partial);
    c->active_ms = uv_now(s->loop);
    rls_list_push(&s->all, &c->node); /* the most recently active */
    s->stats.conns_open++;
    /* A frame plus a read's worth of the next must fit. */
    rl_buf_init(&c->in, (size_t)s->max_frame + RL_FRAME_HEADER +
                            READ_CHUNK);
    rls_list_init(&c->hs);
    /* Under TLS out holds the responses sealed: room for TLS's overhead
     * (a few dozen bytes per 16 KiB record) and its own messages. */
    rl_buf_init(&c->out, s->set.opts.max_output +
                             (s->set.tls != NULL
                                  ? s->set.opts.max_output / 256 + 16384
                                  : 0));
    rl_buf_init(&c->wbuf, c->out.max);

    if (rls_stream_accept(&c->s, listener) != 0) {
        conn_close(c);
        return;
    }
    if ((s->stopping && !s->draining) ||
        s->stats.conns_open > s->set.opts.max_conns) {
        /* Refuse cleanly: one ERROR frame, written without queuing, then
         * close. The client learns why instead of seeing a bare reset.
         * Not under TLS: it could not read it. */
        if (s->set.tls == NULL)
            try_notice(&c->s,
                       s->stopping ? "server is shutting down"
                                   : "server at --max-connections",
                       s->stopping ? RL_NOTICE_GOAWAY : RL_NOTICE_NONE);
        s->stats.conns_refused++;
        /* An operator must hear of refusals, but a flood of them must not
         * flood the log: one warning a second at most, with the count. */
        if (!s->stopping) {
            uint64_t now = uv_now(s->loop);
            s->refused_unlogged++;
            if (s->refusal_logged_ms == 0 ||
                now - s->refusal_logged_ms >= 1000) {
                RLS_WARN("refusing connections at --max-connections",
                         " refused=%llu open=%llu max=%u",
                         (unsigned long long)s->refused_unlogged,
                         (unsigned long long)s->stats.conns_open - 1,
                         s->set.opts.max_conns_all != 0
                             ? s->set.opts.max_conns_all
                             : s->set.opts.max_conns);
                s->refusal_logged_ms = now ? now : 1;
                s->refused_unlogged = 0;
            }
        }
        conn_close(c);
        return;
    }
    /* Under TLS, past the listener's caps on handshakes: closed before
     * anything is read (counted and logged by the TLS layer), after the
     * alert its TLS stack can read. */
    if (rls_stream_tls_begin(&c->s) != 0) {
        conn_close(c);
        return;
    }
    if (c->s.tls != NULL)
        rls_list_push(&s->handshaking, &c->hs);
    s->stats.conns_accepted++;
    start_reading(c);
}

size_t rls_conns_goaway(rls_conns_t *s)
{
    rls_list_t *n, *next;
    size_t count = 0;

    for (n = s->all.next; n != &s->all; n = next) {
        rls_conn_t *c = RLS_CONTAINER_OF(n, rls_conn_t, node);
        next = n->next;
        if (c->eof || c->s.closing)
            continue; /* the client is already leaving */
        /* GOAWAY: id 0 is about the connection, not a request. The client
         * stops sending here and closes once it has its answers; until it
         * does, everything it sent is read and answered, so a request in
         * flight when the stop began is not lost. */
        put_result(c, &rl_goaway_notice, 0);
        count++;
    }
    return count;
}

void rls_conns_close(rls_conns_t *s)
{
    while (!rls_list_empty(&s->all))
        conn_close(RLS_CONTAINER_OF(s->all.next, rls_conn_t, node));
}

/* Is the connection waiting on the server (answers to come, output to
 * write, a pause to lift) rather than on its client? Then it is not idle. */
static int busy(const rls_conn_t *c)
{
    return c->s.owed > 0 || c->writing || rl_buf_len(&c->out) > 0 ||
           rls_list_linked(&c->resume) || (!c->s.reading && !c->eof);
}

/* The set's one timer: closes connections past their deadlines. Both lists
 * are in deadline order, so each loop stops at the first one not due. */
static void on_sweep(rls_streams_t *set, uint64_t now)
{
    rls_conns_t *s = RLS_CONTAINER_OF(set, rls_conns_t, set);
    uint64_t idle_ms = s->set.opts.idle_ms;
    uint64_t frame_ms = s->set.opts.frame_ms;
    uint64_t hs_ms = s->set.opts.handshake_ms;
    rls_conn_t *c;

    /* Handshakes not done in time: in order of accept. */
    while (hs_ms > 0 && !rls_list_empty(&s->handshaking)) {
        c = RLS_CONTAINER_OF(s->handshaking.next, rls_conn_t, hs);
        if (!rls_stream_handshake_late(&c->s, now, hs_ms))
            break;
        tls_failed(c, RLS_TLS_TIMEOUT,
                   "TLS handshake: not done within "
                   "--tls-handshake-timeout-ms");
    }
    while (frame_ms > 0 && !rls_list_empty(&s->partial)) {
        c = RLS_CONTAINER_OF(s->partial.next, rls_conn_t, partial);
        if (now - c->frame_ms < frame_ms)
            break;
        drop(c, RLS_CLOSE_FRAME_TIMEOUT,
             "frame not completed within --frame-timeout-ms");
    }
    while (idle_ms > 0 && !rls_list_empty(&s->all)) {
        c = RLS_CONTAINER_OF(s->all.next, rls_conn_t, node);
        if (now - c->active_ms < idle_ms)
            break;
        if (busy(c)) {
            /* Not idle: its idle time starts over, at the tail. */
            c->active_ms = now;
            rls_list_remove(&c->node);
            rls_list_push(&s->all, &c->node);
            continue;
        }
        drop(c, RLS_CLOSE_IDLE, "connection idle longer than --idle-timeout");
    }
}

void rls_conns_init(rls_conns_t *s, uv_loop_t *loop, const rls_conns_opts_t *o,
                    rls_decider_t *decider)
{
    uint64_t shortest;

    memset(s, 0, sizeof(*s));
    rls_streams_init(&s->set, loop, "listen", "rl1", READ_CHUNK);
    s->set.opts = o->stream;
    s->loop = loop;
    s->max_frame = o->max_frame;
    s->max_inflight = o->max_inflight;
    s->decider = decider;
    rls_list_init(&s->all);
    rls_list_init(&s->dirty);
    rls_list_init(&s->resume);
    rls_list_init(&s->partial);
    rls_list_init(&s->handshaking);
    uv_idle_init(loop, &s->spin);
    s->spin.data = s;
    rls_streams_sweep_init(&s->set, s, on_sweep);
    /* A deadline fires up to one period late: a quarter of the shorter
     * timeout, between 10 and 250 ms. The timer does not keep the loop
     * alive by itself. */
    shortest = o->stream.idle_ms;
    if (o->stream.frame_ms > 0 &&
        (shortest == 0 || o->stream.frame_ms < shortest))
        shortest = o->stream.frame_ms;
    if (shortest > 0)
        rls_streams_sweep_every(&s->set, rls_streams_sweep_period(shortest));
}

void rls_conns_free(rls_conns_t *s)
{
    if (s->listening) {
        s->listening = 0;
        uv_close((uv_handle_t *)&s->listener, NULL);
    }
    uv_close((uv_handle_t *)&s->spin, NULL);
    uv_close((uv_handle_t *)&s->set.sweep, NULL);
    rls_streams_free(&s->set);
    free(s->pbuf);
    s->pbuf = NULL;
}

void rls_conns_set_tls(rls_conns_t *s, rls_tls_t *tls)
{
    uint64_t hs = s->set.opts.handshake_ms;
    uint64_t period = rls_streams_sweep_period(hs);

    s->set.tls = tls;
    s->fe.tls = tls != NULL ? &s->set.tls_stats : NULL;
    s->fe.plain = tls != NULL ? NULL : &s->set.plain;
    /* The sweep keeps the handshake deadline too, as often as it needs. */
    if (tls != NULL && hs > 0 &&
        (s->set.sweep_ms == 0 || period < s->set.sweep_ms))
        rls_streams_sweep_every(&s->set, period);
}

/* ---- the front end -------------------------------------------------- */

static rls_conns_t *set_of(const rls_frontend_t *fe)
{
    return RLS_CONTAINER_OF(fe, rls_conns_t, fe);
}

static void fe_resume(rls_frontend_t *fe)
{
    rls_conns_resume(set_of(fe));
}

static void fe_flush(rls_frontend_t *fe)
{
    rls_conns_flush(set_of(fe));
}

static void fe_drain(rls_frontend_t *fe)
{
    rls_conns_t *s = set_of(fe);

    s->stopping = 1;
    s->draining = 1;
}

static size_t fe_goaway(rls_frontend_t *fe)
{
    rls_conns_t *s = set_of(fe);

    s->stopping = 1;
    s->draining = 0;
    if (s->listening) {
        s->listening = 0;
        uv_close((uv_handle_t *)&s->listener, NULL);
    }
    return rls_conns_goaway(s);
}

static int fe_busy(const rls_frontend_t *fe)
{
    return !rls_list_empty(&set_of(fe)->all);
}

static void fe_close_all(rls_frontend_t *fe)
{
    rls_conns_close(set_of(fe));
}

static void fe_free(rls_frontend_t *fe)
{
    rls_conns_free(set_of(fe));
}

/* The native protocol's part of the /metrics page. */
static int fe_metrics(const rls_frontend_t *fe, rl_buf_t *out)
{
    static const char *const codes[] = {"unknown", "ok", "over_limit",
                                        "error"};
    static const char *const reasons[RLS_REJECT_MAX] = {
        "flag", "size", "decode", "invalid", "rule", "id0", "inline"};
    static const char *const closes[RLS_CLOSE_MAX] = {
        "idle", "frame_timeout", "partial_memory"};
    const rls_conn_stats_t *cs = &set_of(fe)->stats;
    const rls_stream_metric_t m[] = {
        {"rl_decisions_total", "counter",
         "Responses sent, by code (error includes refused requests).",
         cs->decisions, "code", codes, 1, 4},
        {"rl_frames_rejected_total", "counter",
         "Frames or requests refused before reaching the store, by reason.",
         cs->rejected, "reason", reasons, 0, RLS_REJECT_MAX},
        RLS_METRIC_ONE("rl_requests_inflight", "gauge",
                       "Requests read and not yet answered.", cs->inflight),
        RLS_METRIC_ONE("rl_connections_open", "gauge",
                       "Client connections open.", cs->conns_open),
        RLS_METRIC_ONE("rl_connections_accepted_total", "counter",
                       "Client connections accepted.", cs->conns_accepted),
        RLS_METRIC_ONE("rl_connections_refused_total", "counter",
                       "Client connections refused at --max-connections "
                       "or while stopping.",
                       cs->conns_refused),
        RLS_METRIC_ONE("rl_connections_overflow_total", "counter",
                       "Client connections closed for not reading their "
                       "responses (--max-output).",
                       cs->conns_overflow),
        {"rl_connections_closed_total", "counter",
         "Client connections the server closed for sending nothing useful: "
         "no whole request for --idle-timeout (idle), a frame unfinished "
         "after --frame-timeout-ms (frame_timeout), among the largest input "
         "buffers over --max-partial-bytes (partial_memory).",
         cs->closed, "reason", closes, 0, RLS_CLOSE_MAX},
        RLS_METRIC_ONE("rl_connections_input_bytes", "gauge",
                       "Memory held by client connections' input buffers "
                       "(partial frames); capped by --max-partial-bytes.",
                       cs->input_bytes),
    };

    return rls_stream_metrics(out, m, sizeof(m) / sizeof(m[0]));
}

static void adopt_accept(void *arg)
{
    rls_conns_accept(arg, NULL, 0);
}

static void fe_adopt(rls_frontend_t *fe, int fd)
{
    rls_conns_t *s = set_of(fe);

    rls_streams_adopt(&s->set, fd, adopt_accept, s);
}

static rls_streams_t *fe_streams(rls_frontend_t *fe)
{
    return &set_of(fe)->set;
}

static const rls_frontend_ops_t conns_ops = {
    .flag = "listen",
    .resume = fe_resume,
    .flush = fe_flush,
    .drain = fe_drain,
    .goaway = fe_goaway,
    .busy = fe_busy,
    .close_all = fe_close_all,
    .free = fe_free,
    .metrics = fe_metrics,
    .adopt = fe_adopt,
    .streams = fe_streams,
};

rls_frontend_t *rls_conns_frontend(rls_conns_t *s)
{
    s->fe.ops = &conns_ops;
    return &s->fe;
}

static void on_connection(uv_stream_t *listener, int status)
{
    rls_conns_accept(listener->data, listener, status);
}

int rls_conns_listen(rls_conns_t *s, const char *host, int port, char *err,
                     size_t errlen)
{
    int rc;

    s->fe.ops = &conns_ops;
    uv_tcp_init(s->loop, &s->listener);
    s->listener.data = s;
    if ((rc = rls_listen(&s->listener, host, port, 511, on_connection)) !=
        0) {
        snprintf(err, errlen, "--listen: cannot listen on %s:%d: %s", host,
                 port, uv_strerror(rc));
        uv_close((uv_handle_t *)&s->listener, NULL);
        return RL_EADDR;
    }
    s->listening = 1;
    s->fe.host = host;
    s->fe.plain = &s->set.plain;
    s->fe.port = rls_listen_port(&s->listener);
    return RL_OK;
}
