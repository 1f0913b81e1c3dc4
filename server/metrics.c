/* The --metrics listener: HTTP/1.1 on the server's own libuv loop.
 *
 *   GET /metrics  Prometheus text exposition (format 0.0.4)
 *   GET /healthz  200 "ok", or 503 with the reason (draining, store down)
 *   anything else 404 (405 for a known path with a method other than
 *                 GET or HEAD); a malformed or oversized request gets 400
 *                 and the connection is closed
 *
 * Everything runs on the loop thread, so the page reads the server's
 * counters directly, with no locks and no copies.
 *
 * A metrics connection costs a fixed struct (its 8 KiB input buffer
 * inline) plus the response it is writing. Requests are served one at a
 * time: while a response is being written the connection is not read, so a
 * client that pipelines and never reads holds one response, not many.
 * Connections are capped (RLS_METRICS_CONNS_MAX; extras get 503 and are
 * closed) and each must complete a request within the idle limit, counted
 * per request, not per byte. The listener therefore can neither grow the
 * server's memory nor be held open by a slow client.
 *
 * Lifetime: rls_metrics_close closes the listener and every connection;
 * the state is freed by the last close callback. */
#include <netdb.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rl_error.h"
#include "rls_http.h"
#include "rls_log.h"
#include "rls_server.h"
#include "rls_version.h"

/* After a response that closes the connection, input is drained for at most
 * this long so that the client reads the response rather than a reset. */
#define LINGER_MS 2000

typedef struct metrics_s {
    rls_server_t *srv;
    uv_tcp_t listener;
    uv_tcp_t spare;   /* accepts connections that get no struct */
    rls_list_t conns; /* open connections */
    unsigned nconns;  /* on the list */
    unsigned live;    /* allocated, closing ones included */
    uint64_t idle_ms;
    unsigned max_conns;
    uint64_t start_unix_ms;
    rl_buf_t page; /* scratch for the body being built */
    unsigned listener_closed : 1;
    unsigned spare_busy : 1;     /* spare is accepted and closing */
    unsigned accept_pending : 1; /* a connection waits for the spare */
    unsigned closing : 1;
} metrics_t;

typedef struct mconn_s {
    uv_tcp_t tcp;
    uv_timer_t timer; /* the per-request deadline */
    uv_write_t wreq;
    uv_shutdown_t sreq;
    metrics_t *m;
    rls_list_t node;
    rl_buf_t out; /* the response being written */
    size_t in_len;
    int handles; /* open handles; the struct is freed at 0 */
    unsigned reading : 1;
    unsigned writing : 1;
    unsigned closing : 1;
    unsigned lingering : 1;   /* response sent; draining input to close */
    unsigned close_after : 1; /* close once the response is written */
    char in[RLS_HTTP_HEAD_MAX];
} mconn_t;

static void conn_serve(mconn_t *c, int parse);

/* Frees the listener's state once nothing refers to it any more. */
static void maybe_free(metrics_t *m)
{
    if (!m->closing || !m->listener_closed || m->spare_busy || m->live > 0)
        return;
    rl_buf_free(&m->page);
    free(m);
}

/* ------------------------------------------------------------------------ */
/* Text helpers */

#if defined(__GNUC__)
__attribute__((format(printf, 2, 3)))
#endif
static int
putf(rl_buf_t *b, const char *fmt, ...)
{
    size_t room = 256;
    uint8_t *w;
    va_list ap;
    int k, rc;

    for (;;) {
        if ((rc = rl_buf_reserve(b, room, &w)) != RL_OK)
            return rc;
        va_start(ap, fmt);
        k = vsnprintf((char *)w, rl_buf_avail(b), fmt, ap);
        va_end(ap);
        if (k < 0)
            return RL_EINVAL;
        if ((size_t)k < rl_buf_avail(b)) {
            rl_buf_commit(b, (size_t)k);
            return RL_OK;
        }
        room = (size_t)k + 1;
    }
}

/* Microseconds as decimal seconds, exactly: 50 -> "0.00005", 2500000 ->
 * "2.5". Prometheus wants base units, and printing through a double would
 * turn bucket bounds into "5e-05". */
static const char *fmt_us(char *s, size_t n, uint64_t us)
{
    size_t len;

    snprintf(s, n, "%llu.%06llu", (unsigned long long)(us / 1000000),
             (unsigned long long)(us % 1000000));
    len = strlen(s);
    while (s[len - 1] == '0')
        s[--len] = '\0';
    if (s[len - 1] == '.')
        s[--len] = '\0';
    return s;
}

static int family(rl_buf_t *b, const char *name, const char *type,
                  const char *help)
{
    return putf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static int counter(rl_buf_t *b, const char *name, const char *help, uint64_t v)
{
    int rc = family(b, name, "counter", help);

    return rc != RL_OK ? rc : putf(b, "%s %llu\n", name, (unsigned long long)v);
}

static int gauge(rl_buf_t *b, const char *name, const char *help, uint64_t v)
{
    int rc = family(b, name, "gauge", help);

    return rc != RL_OK ? rc : putf(b, "%s %llu\n", name, (unsigned long long)v);
}

/* A histogram; with `us` the observations are microseconds and are shown
 * in seconds. Buckets are cumulative, and +Inf equals _count. */
static int histogram(rl_buf_t *b, const char *name, const char *help,
                     const rls_hist_t *h, int us)
{
    char le[32], sum[32];
    uint64_t cum = 0;
    size_t i;
    int rc;

    if ((rc = family(b, name, "histogram", help)) != RL_OK)
        return rc;
    for (i = 0; i < h->n && h->bounds != NULL; i++) {
        cum += h->counts[i];
        if (us)
            fmt_us(le, sizeof(le), h->bounds[i]);
        else
            snprintf(le, sizeof(le), "%llu", (unsigned long long)h->bounds[i]);
        if ((rc = putf(b, "%s_bucket{le=\"%s\"} %llu\n", name, le,
                       (unsigned long long)cum)) != RL_OK)
            return rc;
    }
    cum += h->counts[i < RLS_HIST_MAX ? i : RLS_HIST_MAX];
    if (us)
        fmt_us(sum, sizeof(sum), h->sum);
    else
        snprintf(sum, sizeof(sum), "%llu", (unsigned long long)h->sum);
    return putf(b, "%s_bucket{le=\"+Inf\"} %llu\n%s_sum %s\n%s_count %llu\n",
                name, (unsigned long long)cum, name, sum, name,
                (unsigned long long)cum);
}

int rls_metrics_render(const rls_server_t *s, rl_buf_t *out)
{
    static const char *const codes[] = {"unknown", "ok", "over_limit", "error"};
    static const char *const reasons[RLS_REJECT_MAX] = {
        "flag", "size", "decode", "invalid", "rule"};
    const rls_batch_stats_t *bs = &s->batcher.stats;
    const rls_store_stats_t *ss = s->store ? &s->store->stats : NULL;
    const metrics_t *m = s->metrics;
    const char *why = "stopped";
    int healthy = 0, rc;
    size_t i;

    if (s->store != NULL)
        healthy = rls_server_healthy(s, &why);

#define TRY(x)                                                                 \
    do {                                                                       \
        if ((rc = (x)) != RL_OK)                                               \
            return rc;                                                         \
    } while (0)

    TRY(family(out, "rl_build_info", "gauge",
               "Build and configuration of this rl-server; always 1."));
    TRY(putf(out,
             "rl_build_info{version=\"%s\",store=\"%s\",fail_mode=\"%s\"} "
             "1\n",
             RLS_VERSION, s->cfg->use_redis ? "redis" : "memory",
             s->cfg->fail_open ? "open" : "closed"));
    if (m != NULL)
        TRY(gauge(out, "rl_start_time_seconds",
                  "When this rl-server started, seconds since the epoch.",
                  m->start_unix_ms / 1000));
    TRY(gauge(out, "rl_healthy",
              "1 while /healthz answers 200 (taking work, store up)",
              (uint64_t)healthy));
    TRY(gauge(out, "rl_draining", "1 between SIGTERM and the end of --drain-ms",
              (uint64_t)(s->draining != 0)));

    TRY(family(out, "rl_decisions_total", "counter",
               "Responses sent, by code (error includes refused requests)."));
    for (i = 1; i < 4; i++)
        TRY(putf(out, "rl_decisions_total{code=\"%s\"} %llu\n", codes[i],
                 (unsigned long long)s->stats.decisions[i]));
    TRY(counter(out, "rl_failed_open_total",
                "Requests answered OK because the store could not answer "
                "(--fail-open).",
                bs->failed_open));
    TRY(counter(out, "rl_store_failed_requests_total",
                "Requests whose store operation failed (either fail mode).",
                bs->store_errors));
    TRY(family(out, "rl_frames_rejected_total", "counter",
               "Frames or requests refused before reaching the store, by "
               "reason."));
    for (i = 0; i < RLS_REJECT_MAX; i++)
        TRY(putf(out, "rl_frames_rejected_total{reason=\"%s\"} %llu\n",
                 reasons[i], (unsigned long long)s->stats.rejected[i]));
    TRY(counter(out, "rl_requests_coalesced_total",
                "Requests that shared a store key with an earlier one of "
                "their batch.",
                bs->coalesced));
    TRY(counter(out, "rl_requests_batched_total",
                "Valid requests handed to the store.", bs->requests));
    TRY(histogram(out, "rl_batch_size", "Requests per store batch.", &bs->size,
                  0));
    TRY(gauge(out, "rl_requests_inflight",
              "Requests read and not yet answered.", s->stats.inflight));

    TRY(gauge(out, "rl_connections_open", "Client connections open.",
              s->stats.conns_open));
    TRY(counter(out, "rl_connections_accepted_total",
                "Client connections accepted.", s->stats.conns_accepted));
    TRY(counter(out, "rl_connections_refused_total",
                "Client connections refused at --max-connections or while "
                "stopping.",
                s->stats.conns_refused));
    TRY(counter(out, "rl_connections_overflow_total",
                "Client connections closed for not reading their responses "
                "(--max-output).",
                s->stats.conns_overflow));

    if (ss != NULL) {
        TRY(gauge(out, "rl_store_up", "1 while the store is believed up.",
                  (uint64_t)(s->store->v->up(s->store) != 0)));
        TRY(counter(out, "rl_store_batches_total",
                    "Batches submitted to the store.", ss->batches));
        TRY(counter(out, "rl_store_ops_total",
                    "Store operations (distinct keys) submitted.", ss->ops));
        TRY(counter(out, "rl_store_errors_total",
                    "Store batches that failed, for any reason.", ss->errors));
        TRY(counter(out, "rl_store_timeouts_total",
                    "Store batches that failed by --redis-timeout-ms.",
                    ss->timeouts));
        TRY(counter(out, "rl_store_reconnects_total",
                    "Successful reconnections to the store after the "
                    "first connection.",
                    ss->reconnects));
        /* The memory store has no round trip to measure. */
        if (s->cfg->use_redis)
            TRY(histogram(out, "rl_redis_rtt_seconds",
                          "Round trip of answered Redis batches.", &ss->rtt_us,
                          1));
    }
#undef TRY
    return RL_OK;
}

/* ------------------------------------------------------------------------ */
/* Connections */

static void on_handle_closed(uv_handle_t *h)
{
    mconn_t *c = h->data;
    metrics_t *m = c->m;

    if (--c->handles > 0)
        return;
    rl_buf_free(&c->out);
    free(c);
    m->live--;
    maybe_free(m);
}

static void conn_close(mconn_t *c)
{
    if (c->closing)
        return;
    c->closing = 1;
    rls_list_remove(&c->node);
    c->m->nconns--;
    uv_close((uv_handle_t *)&c->tcp, on_handle_closed);
    uv_close((uv_handle_t *)&c->timer, on_handle_closed);
}

static void on_timeout(uv_timer_t *t)
{
    mconn_t *c = t->data;

    if (!c->lingering)
        RLS_DEBUG("metrics connection idle past its limit; closing",
                  " idle_ms=%llu", (unsigned long long)c->m->idle_ms);
    conn_close(c);
}

static void on_alloc(uv_handle_t *h, size_t hint, uv_buf_t *buf)
{
    mconn_t *c = h->data;

    (void)hint;
    if (c->lingering)
        c->in_len = 0; /* input after the last response is discarded */
    /* A full buffer holds an oversized head, which was answered 400 before
     * reading resumed; zero length makes libuv report UV_ENOBUFS. */
    buf->base = c->in + c->in_len;
    buf->len = sizeof(c->in) - c->in_len;
}

static void on_read(uv_stream_t *st, ssize_t nread, const uv_buf_t *buf)
{
    mconn_t *c = st->data;
    int parse;

    (void)buf;
    if (nread == 0)
        return; /* EAGAIN */
    if (nread < 0) {
        /* The client is gone or done; nothing more can be answered. */
        conn_close(c);
        return;
    }
    if (c->lingering)
        return;
    /* Parse when a line has ended (a head ends in a blank line), when the
     * buffer is full, or on the first bytes of a request (to refuse garbage
     * at once). Re-parsing on every byte of a trickled head would cost
     * O(head^2). */
    parse = c->in_len == 0 ||
            memchr(c->in + c->in_len, '\n', (size_t)nread) != NULL;
    c->in_len += (size_t)nread;
    conn_serve(c, parse || c->in_len == sizeof(c->in));
}

static void start_reading(mconn_t *c)
{
    if (c->reading || c->closing)
        return;
    if (uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read) != 0) {
        conn_close(c);
        return;
    }
    c->reading = 1;
}

static void stop_reading(mconn_t *c)
{
    if (c->reading) {
        uv_read_stop((uv_stream_t *)&c->tcp);
        c->reading = 0;
    }
}

static void on_shutdown(uv_shutdown_t *req, int status)
{
    mconn_t *c = req->data;

    if (status < 0)
        conn_close(c);
}

static void on_write(uv_write_t *req, int status)
{
    mconn_t *c = req->data;
    metrics_t *m = c->m;

    c->writing = 0;
    rl_buf_reset(&c->out);
    if (status < 0 || m->closing) {
        conn_close(c);
        return;
    }
    if (c->close_after) {
        /* Half-close, then drain what the client still sends until it
         * closes too: closing with unread input would send a reset, which
         * can destroy the response before the client reads it. */
        c->lingering = 1;
        c->in_len = 0;
        if (uv_shutdown(&c->sreq, (uv_stream_t *)&c->tcp, on_shutdown) != 0) {
            conn_close(c);
            return;
        }
        uv_timer_start(&c->timer, on_timeout,
                       m->idle_ms < LINGER_MS ? m->idle_ms : LINGER_MS, 0);
        start_reading(c);
        return;
    }
    /* The next request has a fresh deadline; it may already be buffered
     * (pipelined). */
    uv_timer_start(&c->timer, on_timeout, m->idle_ms, 0);
    conn_serve(c, c->in_len > 0);
}

/* Builds the status line and headers in c->out, then the body unless the
 * request was HEAD. Returns 0 or an RL_E* code from the buffer. */
static int build(mconn_t *c, int status, const char *reason, const char *ctype,
                 const void *body, size_t body_len, int head_only,
                 const char *extra)
{
    int rc;

    rc = putf(&c->out,
              "HTTP/1.1 %d %s\r\n"
              "Content-Type: %s\r\n"
              "Content-Length: %zu\r\n"
              "Cache-Control: no-store\r\n"
              "%s"
              "Connection: %s\r\n"
              "\r\n",
              status, reason, ctype, body_len, extra ? extra : "",
              c->close_after ? "close" : "keep-alive");
    if (rc == RL_OK && !head_only && body_len > 0)
        rc = rl_buf_append(&c->out, body, body_len);
    return rc;
}

static int path_is(const rls_http_req_t *q, size_t plen, const char *p)
{
    return plen == strlen(p) && memcmp(q->target, p, plen) == 0;
}

static int method_is(const rls_http_req_t *q, const char *name)
{
    return q->method_len == strlen(name) &&
           memcmp(q->method, name, q->method_len) == 0;
}

/* Answers one parsed request into c->out. */
static int route(mconn_t *c, const rls_http_req_t *q)
{
    static const char text[] = "text/plain; charset=utf-8";
    metrics_t *m = c->m;
    rls_server_t *s = m->srv;
    size_t plen = rls_http_path_len(q);
    int head = method_is(q, "HEAD");
    int get = head || method_is(q, "GET");
    int known = path_is(q, plen, "/metrics") || path_is(q, plen, "/healthz");
    char body[128];
    int rc, n;

    c->close_after = !q->keep_alive;
    if (!known)
        return build(c, 404, "Not Found", text, "not found\n", 10, head, NULL);
    if (!get)
        return build(c, 405, "Method Not Allowed", text, "method not allowed\n",
                     19, 0, "Allow: GET, HEAD\r\n");
    if (path_is(q, plen, "/healthz")) {
        const char *why = "stopped";
        int ok = s->store != NULL && rls_server_healthy(s, &why);

        n = snprintf(body, sizeof(body), "%s\n", why);
        return build(c, ok ? 200 : 503, ok ? "OK" : "Service Unavailable", text,
                     body, (size_t)n, head, NULL);
    }
    rl_buf_reset(&m->page);
    if ((rc = rls_metrics_render(s, &m->page)) != RL_OK) {
        RLS_ERROR("cannot render /metrics", " err=\"%s\"", rl_strerror(rc));
        c->close_after = 1;
        return build(c, 500, "Internal Server Error", text, "internal error\n",
                     15, head, NULL);
    }
    return build(c, 200, "OK", "text/plain; version=0.0.4; charset=utf-8",
                 rl_buf_rptr(&m->page), rl_buf_len(&m->page), head, NULL);
}

/* Serves the request at the front of c->in if it is whole. `parse` is 0
 * when the bytes that just arrived cannot have completed a head. */
static void conn_serve(mconn_t *c, int parse)
{
    rls_http_req_t q;
    uv_buf_t b;
    int rc;

    if (c->writing || c->closing || c->lingering)
        return;
    rc = parse ? rls_http_parse(c->in, c->in_len, &q) : RL_EAGAIN;
    if (rc == RL_EAGAIN) {
        start_reading(c);
        return;
    }
    stop_reading(c);
    rl_buf_reset(&c->out);
    if (rc != RL_OK) {
        RLS_DEBUG("metrics: bad HTTP request", " err=\"%s\" bytes=%zu",
                  rc == RL_EFULL ? "head over 8 KiB" : "malformed", c->in_len);
        c->close_after = 1;
        c->in_len = 0;
        rc = build(c, 400, "Bad Request", "text/plain; charset=utf-8",
                   "bad request\n", 12, 0, NULL);
    } else {
        rc = route(c, &q);
        RLS_DEBUG("metrics request", " method=%.*s path=%.*s",
                  (int)q.method_len, q.method, (int)rls_http_path_len(&q),
                  q.target);
        /* The request is done with: keep only what follows it. */
        memmove(c->in, c->in + q.head_len, c->in_len - q.head_len);
        c->in_len -= q.head_len;
    }
    if (rc != RL_OK) {
        conn_close(c);
        return;
    }
    b = uv_buf_init((char *)rl_buf_rptr(&c->out),
                    (unsigned)rl_buf_len(&c->out));
    c->writing = 1;
    if (uv_write(&c->wreq, (uv_stream_t *)&c->tcp, &b, 1, on_write) != 0) {
        c->writing = 0;
        conn_close(c);
    }
}

/* ------------------------------------------------------------------------ */
/* Listener */

static void accept_one(metrics_t *m);

static void on_spare_closed(uv_handle_t *h)
{
    metrics_t *m = h->data;

    m->spare_busy = 0;
    /* libuv stopped watching the listener while a connection waited to be
     * accepted; accepting it now resumes the listener. */
    if (m->accept_pending && !m->closing) {
        m->accept_pending = 0;
        accept_one(m);
    }
    maybe_free(m);
}

/* Takes the next connection off the listener: into its own struct when
 * under the cap and memory allows, else into the spare handle, which
 * answers 503 and closes. With the spare busy the connection waits in the
 * kernel's backlog until the spare is free again. */
static void accept_one(metrics_t *m)
{
    static const char busy[] = "HTTP/1.1 503 Service Unavailable\r\n"
                               "Content-Type: text/plain; charset=utf-8\r\n"
                               "Content-Length: 21\r\n"
                               "Connection: close\r\n"
                               "\r\n"
                               "too many connections\n";
    mconn_t *c = NULL;
    uv_buf_t b;

    if (m->nconns < m->max_conns && (c = calloc(1, sizeof(*c))) != NULL) {
        c->m = m;
        c->tcp.data = c;
        c->timer.data = c;
        c->wreq.data = c;
        c->sreq.data = c;
        rl_buf_init(&c->out, RLS_METRICS_OUT_MAX);
        uv_tcp_init(m->srv->loop, &c->tcp);
        uv_timer_init(m->srv->loop, &c->timer);
        c->handles = 2;
        m->live++;
        m->nconns++;
        rls_list_push(&m->conns, &c->node);
        if (uv_accept((uv_stream_t *)&m->listener, (uv_stream_t *)&c->tcp) !=
            0) {
            conn_close(c);
            return;
        }
        uv_tcp_nodelay(&c->tcp, 1);
        uv_timer_start(&c->timer, on_timeout, m->idle_ms, 0);
        start_reading(c);
        return;
    }
    if (c == NULL && m->nconns < m->max_conns)
        RLS_ERROR("out of memory accepting a metrics connection", NULL);
    if (m->spare_busy) {
        m->accept_pending = 1;
        return;
    }
    uv_tcp_init(m->srv->loop, &m->spare);
    m->spare.data = m;
    m->spare_busy = 1;
    if (uv_accept((uv_stream_t *)&m->listener, (uv_stream_t *)&m->spare) == 0) {
        RLS_DEBUG("metrics connection refused", " open=%u max=%u", m->nconns,
                  m->max_conns);
        b = uv_buf_init((char *)busy, sizeof(busy) - 1);
        uv_try_write((uv_stream_t *)&m->spare, &b, 1);
    }
    uv_close((uv_handle_t *)&m->spare, on_spare_closed);
}

static void on_connection(uv_stream_t *listener, int status)
{
    metrics_t *m = listener->data;

    if (status < 0) {
        RLS_WARN("metrics accept failed", " err=\"%s\"", uv_strerror(status));
        return;
    }
    accept_one(m);
}

static void on_listener_closed(uv_handle_t *h)
{
    metrics_t *m = h->data;

    m->listener_closed = 1;
    maybe_free(m);
}

int rls_metrics_start(rls_server_t *s)
{
    metrics_t *m;
    int rc;

    m = calloc(1, sizeof(*m));
    if (m == NULL)
        return UV_ENOMEM;
    m->srv = s;
    m->idle_ms = RLS_METRICS_IDLE_MS;
    m->max_conns = RLS_METRICS_CONNS_MAX;
    m->start_unix_ms = rls_realtime_ms();
    rls_list_init(&m->conns);
    rl_buf_init(&m->page, RLS_METRICS_OUT_MAX);
    uv_tcp_init(s->loop, &m->listener);
    m->listener.data = m;
    if ((rc = rls_listen(&m->listener, s->cfg->metrics_host,
                         s->cfg->metrics_port, 64, on_connection)) != 0) {
        RLS_ERROR("cannot listen for metrics", " addr=%s:%d err=\"%s\"",
                  s->cfg->metrics_host, s->cfg->metrics_port, uv_strerror(rc));
        m->closing = 1;
        uv_close((uv_handle_t *)&m->listener, on_listener_closed);
        return rc;
    }
    s->metrics = m;
    RLS_INFO("metrics listening", " addr=%s:%d", s->cfg->metrics_host,
             s->cfg->metrics_port);
    return 0;
}

void rls_metrics_set_limits(rls_server_t *s, uint64_t idle_ms,
                            unsigned max_conns)
{
    metrics_t *m = s->metrics;

    if (m == NULL)
        return;
    m->idle_ms = idle_ms;
    m->max_conns = max_conns;
}

void rls_metrics_close(rls_server_t *s)
{
    metrics_t *m = s->metrics;

    if (m == NULL)
        return;
    /* The last scrape misses whatever happened after it, which during a
     * stop is exactly what an operator wants to see: whether everything
     * read was answered. */
    RLS_INFO("final counters",
             " ok=%llu over_limit=%llu error=%llu failed_open=%llu"
             " inflight=%llu",
             (unsigned long long)s->stats.decisions[RL_CODE_OK],
             (unsigned long long)s->stats.decisions[RL_CODE_OVER_LIMIT],
             (unsigned long long)s->stats.decisions[RL_CODE_ERROR],
             (unsigned long long)s->batcher.stats.failed_open,
             (unsigned long long)s->stats.inflight);
    s->metrics = NULL;
    m->closing = 1;
    while (!rls_list_empty(&m->conns))
        conn_close(RLS_CONTAINER_OF(m->conns.next, mconn_t, node));
    uv_close((uv_handle_t *)&m->listener, on_listener_closed);
}
