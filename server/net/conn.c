/* Client connections: frames in, responses out.
 *
 * Reads land in a per-connection buffer and every whole frame in it is
 * decoded in place. Valid requests go to the batcher; anything invalid is
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
 * late answer never touches freed memory. */
#include <stdlib.h>
#include <string.h>

#include "rl_check.h"
#include "rl_error.h"
#include "rl_frame.h"
#include "rl_msg.h"
#include "log.h"
#include "net/conn.h"

#define READ_CHUNK 65536

typedef struct rls_conn_s {
    uv_tcp_t tcp;
    uv_write_t wreq;
    rls_conns_t *srv;
    rls_list_t node;    /* in srv->all */
    rls_list_t dirty;   /* in srv->dirty while it has output to write */
    rls_list_t resume;  /* in srv->resume while it should read again */
    rl_buf_t in;
    rl_buf_t out;       /* responses not yet handed to uv_write */
    rl_buf_t wbuf;      /* the bytes of the write in flight */
    uint32_t inflight;  /* requests in the batcher */
    unsigned writing : 1;
    unsigned reading : 1;
    unsigned eof : 1;     /* no more requests will be read */
    unsigned closing : 1; /* uv_close called */
    unsigned closed : 1;  /* close callback ran */
} rls_conn_t;

static void conn_close(rls_conn_t *c);
static void process(rls_conn_t *c);

static void maybe_free(rls_conn_t *c)
{
    if (!c->closed || c->inflight > 0)
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

    c->closed = 1;
    maybe_free(c);
    /* The last connection of a stopping server lets it finish. */
    if (s->stopping && rls_list_empty(&s->all) && s->on_empty != NULL)
        s->on_empty(s->arg);
}

static void conn_close(rls_conn_t *c)
{
    rls_conns_t *s = c->srv;

    if (c->closing)
        return;
    c->closing = 1;
    c->eof = 1;
    rls_list_remove(&c->node);
    rls_list_remove(&c->dirty);
    rls_list_remove(&c->resume);
    s->stats.conns_open--;
    RLS_DEBUG("connection closed", " inflight=%u", c->inflight);
    uv_close((uv_handle_t *)&c->tcp, on_closed);
}

/* Closes a connection that will read no more once it has nothing left to
 * answer or to write. Whole frames still buffered (a paused connection) are
 * owed answers too; a trailing partial frame never will be. */
static void maybe_finish(rls_conn_t *c)
{
    rl_frame_t f;

    if (c->eof && !c->closing && c->inflight == 0 && !c->writing &&
        rl_buf_len(&c->out) == 0 &&
        rl_frame_decode(rl_buf_rptr(&c->in), rl_buf_len(&c->in),
                        c->srv->cfg->max_frame, &f) != RL_OK)
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
 * 0, or -1 if the connection was closed because its unsent output passed
 * the cap. */
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
        return -1;
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

    c->inflight--;
    s->stats.inflight--;
    if (c->closing) {
        maybe_free(c);
        return;
    }
    if (put_result(c, r, 1) != 0)
        return;
    /* A paused connection reads again once it is under half its limit;
     * the read resumes from the check handle, not from inside a store
     * callback. */
    if (!c->reading && c->inflight <= s->cfg->max_inflight / 2 &&
        (!c->eof || rl_buf_len(&c->in) > 0) &&
        !rls_list_linked(&c->resume)) {
        rls_list_push(&s->resume, &c->resume);
        uv_idle_start(&s->spin, on_spin);
    }
}

static void on_alloc(uv_handle_t *h, size_t hint, uv_buf_t *buf)
{
    rls_conn_t *c = h->data;
    uint8_t *w;

    (void)hint;
    if (rl_buf_reserve(&c->in, READ_CHUNK, &w) != RL_OK) {
        buf->base = NULL;
        buf->len = 0; /* libuv reports UV_ENOBUFS */
        return;
    }
    buf->base = (char *)w;
    buf->len = rl_buf_avail(&c->in);
}

/* Handles one decoded frame payload. */
static void handle_request(rls_conn_t *c, const uint8_t *p, size_t n)
{
    rls_conns_t *s = c->srv;
    const rls_flag_rule_t *rule;
    rl_check_t q;
    char msg[RL_RULE_MAX + 32];
    int rc;

    if (rl_check_decode(p, n, &q) != RL_OK) {
        s->stats.rejected[RLS_REJECT_DECODE]++;
        reply_notice(c, "payload is not a valid CheckRequest");
        return;
    }
    if ((rc = rl_check_validate(&q)) != RL_OK) {
        s->stats.rejected[RLS_REJECT_INVALID]++;
        reply_error(c, q.id, rl_strerror(rc));
        return;
    }
    if (q.rule_len > 0) {
        rule = rls_config_rule(s->cfg, q.rule, q.rule_len);
        if (rule == NULL) {
            s->stats.rejected[RLS_REJECT_RULE]++;
            snprintf(msg, sizeof(msg), "unknown rule '%.*s'",
                     (int)q.rule_len, q.rule);
            reply_error(c, q.id, msg);
            return;
        }
        q.limit = rule->limit;
        q.window_s = rule->window_s;
    }
    c->inflight++;
    s->stats.inflight++;
    if (rls_batcher_add(s->batcher, c, q.id, q.key, q.key_len, q.cost,
                        q.limit, q.window_s) != RL_OK) {
        c->inflight--;
        s->stats.inflight--;
        reply_error(c, q.id, rl_strerror(RL_ENOMEM));
    }
}

static void stop_reading(rls_conn_t *c)
{
    if (c->reading) {
        uv_read_stop((uv_stream_t *)&c->tcp);
        c->reading = 0;
    }
}

/* Decodes every whole frame in the input buffer, up to the connection's
 * in-flight limit. */
static void process(rls_conn_t *c)
{
    rls_conns_t *s = c->srv;
    rl_frame_t f;
    int rc;

    while (!c->closing && c->inflight < s->cfg->max_inflight) {
        rc = rl_frame_take(&c->in, s->cfg->max_frame, &f);
        if (rc == RL_EAGAIN)
            break;
        if (rc != RL_OK) {
            /* The framing is lost: say why once, then close after the
             * answers already owed. */
            s->stats.rejected[rc == RL_EFRAMEFLAG ? RLS_REJECT_FLAG
                                                  : RLS_REJECT_SIZE]++;
            RLS_DEBUG("broken frame", " err=\"%s\"", rl_strerror(rc));
            reply_notice(c, rl_strerror(rc));
            rl_buf_reset(&c->in);
            stop_reading(c);
            c->eof = 1;
            return;
        }
        handle_request(c, f.payload, f.len);
    }
    if (c->inflight >= s->cfg->max_inflight)
        stop_reading(c);
}

static void on_read(uv_stream_t *stream, ssize_t nread, const uv_buf_t *buf)
{
    rls_conn_t *c = stream->data;

    (void)buf;
    if (nread > 0) {
        rl_buf_commit(&c->in, (size_t)nread);
        process(c);
        maybe_finish(c);
        return;
    }
    if (nread == 0)
        return; /* EAGAIN: nothing to do */
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
    if (!c->reading && !c->eof && !c->closing) {
        if (uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read) == 0)
            c->reading = 1;
        else
            conn_close(c);
    }
}

void rls_conns_resume(rls_conns_t *s)
{
    while (!rls_list_empty(&s->resume)) {
        rls_list_t *n = s->resume.next;
        rls_conn_t *c = RLS_CONTAINER_OF(n, rls_conn_t, resume);
        rls_list_remove(n);
        /* Frames already buffered come first; read more only if there is
         * still room. */
        process(c);
        /* Reading goes on while stopping too: a client told to go away
         * (rls_conns_goaway) is still answered until it closes. */
        if (!c->closing && c->inflight < s->cfg->max_inflight)
            start_reading(c);
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
        uv_buf_t b;
        int wrote;

        next = n->next;
        if (c->writing)
            continue; /* stays dirty; written when this write completes */
        rls_list_remove(n);
        if (rl_buf_len(&c->out) == 0)
            continue;
        /* Most writes go out whole at once: uv_try_write sends them with no
         * request and no callback. A uv_write would also cost an epoll_ctl
         * per write (libuv 1.44 re-registers the socket when its write
         * queue empties, even though nothing changed). */
        b = uv_buf_init((char *)rl_buf_rptr(&c->out),
                        (unsigned)rl_buf_len(&c->out));
        wrote = uv_try_write((uv_stream_t *)&c->tcp, &b, 1);
        if (wrote < 0 && wrote != UV_EAGAIN) {
            RLS_DEBUG("write error", " err=\"%s\"", uv_strerror(wrote));
            conn_close(c);
            continue;
        }
        if (wrote > 0)
            rl_buf_consume(&c->out, (size_t)wrote);
        if (rl_buf_len(&c->out) == 0) {
            maybe_finish(c);
            continue;
        }
        /* The rest waits for the socket: swap buffers, the full one goes
         * out, the empty one collects. */
        tmp = c->wbuf;
        c->wbuf = c->out;
        c->out = tmp;
        b = uv_buf_init((char *)rl_buf_rptr(&c->wbuf),
                        (unsigned)rl_buf_len(&c->wbuf));
        c->writing = 1;
        if (uv_write(&c->wreq, (uv_stream_t *)&c->tcp, &b, 1, on_write) !=
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
    c = calloc(1, sizeof(*c));
    if (c == NULL || uv_tcp_init(s->loop, &c->tcp) != 0) {
        free(c);
        RLS_ERROR("out of memory accepting a connection", NULL);
        return;
    }
    c->tcp.data = c;
    c->wreq.data = c;
    c->srv = s;
    rls_list_init(&c->node);
    rls_list_init(&c->dirty);
    rls_list_init(&c->resume);
    rls_list_push(&s->all, &c->node);
    s->stats.conns_open++;
    /* A frame plus a read's worth of the next must fit. */
    rl_buf_init(&c->in, (size_t)s->cfg->max_frame + RL_FRAME_HEADER +
                            READ_CHUNK);
    rl_buf_init(&c->out, s->cfg->max_output);
    rl_buf_init(&c->wbuf, s->cfg->max_output);

    if (uv_accept(listener, (uv_stream_t *)&c->tcp) != 0) {
        conn_close(c);
        return;
    }
    if ((s->stopping && !s->draining) ||
        s->stats.conns_open > s->cfg->max_connections) {
        /* Refuse cleanly: one ERROR frame, written without queuing, then
         * close. The client learns why instead of seeing a bare reset. */
        static const char msg[] = "server at --max-connections";
        uint8_t frame[64];
        rl_result_t r;
        size_t n;

        memset(&r, 0, sizeof(r));
        r.code = RL_CODE_ERROR;
        r.error = s->stopping ? "server is shutting down" : msg;
        r.error_len = strlen(r.error);
        r.notice = s->stopping ? RL_NOTICE_GOAWAY : RL_NOTICE_NONE;
        n = rl_result_encode(&r, frame + RL_FRAME_HEADER);
        rl_frame_header(frame, (uint32_t)n);
        uv_buf_t b = uv_buf_init((char *)frame, (unsigned)(n + 5));
        uv_try_write((uv_stream_t *)&c->tcp, &b, 1);
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
                         s->cfg->max_connections);
                s->refusal_logged_ms = now ? now : 1;
                s->refused_unlogged = 0;
            }
        }
        conn_close(c);
        return;
    }
    s->stats.conns_accepted++;
    uv_tcp_nodelay(&c->tcp, 1);
    start_reading(c);
}

size_t rls_conns_goaway(rls_conns_t *s)
{
    rls_list_t *n, *next;
    size_t count = 0;

    for (n = s->all.next; n != &s->all; n = next) {
        rls_conn_t *c = RLS_CONTAINER_OF(n, rls_conn_t, node);
        next = n->next;
        if (c->eof || c->closing)
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

void rls_conns_init(rls_conns_t *s, uv_loop_t *loop, const rls_config_t *cfg,
                    rls_batcher_t *batcher)
{
    memset(s, 0, sizeof(*s));
    s->loop = loop;
    s->cfg = cfg;
    s->batcher = batcher;
    rls_list_init(&s->all);
    rls_list_init(&s->dirty);
    rls_list_init(&s->resume);
    uv_idle_init(loop, &s->spin);
    s->spin.data = s;
}

void rls_conns_free(rls_conns_t *s)
{
    uv_close((uv_handle_t *)&s->spin, NULL);
}
