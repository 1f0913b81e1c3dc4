/* The --grpc listener: HTTP/2 cleartext with nghttp2, gRPC unary calls of
 * Envoy's RateLimitService and grpc.health.v1's Check and Watch (the
 * messages in grpc_health.c); see grpc.h.
 *
 * nghttp2 does all of HTTP/2 (framing, HPACK, flow control, SETTINGS,
 * GOAWAY, flood protection); this file moves bytes between it and the
 * socket, turns streams into calls and bounds what one connection can
 * cost.
 *
 * Input. Reads go to one buffer shared by every connection and are handed
 * to nghttp2_session_mem_recv at once. What one connection may make
 * nghttp2 do is budgeted per round (a round ends at each flush: the
 * server flushes at its tick and right before polling): FEED_BUDGET
 * bytes fed and DECODE_BUDGET bytes of header lists decoded, counted as
 * RFC 9113 sizes a header list, so that an indexed reference costs what
 * it expands to and HPACK cannot amplify past the budget. A connection
 * over either stops reading until the next flush; a header over the
 * decode budget pauses nghttp2 in the middle of a read
 * (NGHTTP2_ERR_PAUSE), and the rest of that read waits in the
 * connection's stash (counted against --max-partial-bytes with the
 * request bodies). So however a client shapes its input, a round gives
 * it a bounded slice of the loop and every other connection is read in
 * between, as native/conn.c's --max-inflight pause does for the native
 * protocol.
 *
 * Header lists. A stream whose headers pass RLS_GRPC_HEADERS_MAX is reset
 * at once: the header callback refuses (NGHTTP2_ERR_TEMPORAL_CALLBACK_
 * FAILURE), nghttp2 sends RST_STREAM INTERNAL_ERROR and decodes the rest
 * of the block only to keep its HPACK table, without validating or
 * calling back (a small cost per byte, which the decode budget cannot
 * see: the connection is fed STRUCK_FEED_BUDGET bytes a round from then
 * on). The
 * HEADER_STRIKES-th such stream of a connection ends it: GOAWAY
 * ENHANCE_YOUR_CALM, after which nghttp2 ignores everything it sends.
 *
 * Output. Frames are drawn with nghttp2_session_mem_send into the
 * connection's output buffer at the flush, never while a write is in
 * flight. An answer is owed from its submission until its last frame is
 * drawn; owed answers are listed oldest first with their memory counted
 * (the message plus ANSWER_COST). A connection whose owed answers and
 * output together pass --max-output is closed, and so is one whose oldest
 * owed answer, or whose write in flight, is older than --frame-timeout-ms:
 * its client shut its flow-control window or does not read. A stream
 * answered before its client finished it is reset (NO_ERROR, as RFC 9113
 * 8.1 allows) once the answer is out, so it does not stay open.
 *
 * Connections. Idle time counts from the last request completed or
 * answer given, not from bytes: PINGs, SETTINGS and unfinished requests
 * do not keep a connection. Connections that never completed a request
 * are listed in the order they came (`fresh`), the others by last
 * activity (`proven`); at --max-connections a new connection evicts the
 * oldest fresh one, else the least recently active proven one without a
 * call at the store, and is refused only when none can go.
 *
 * Lifetimes. A stream object lives until nghttp2 closed the stream (or
 * the connection went) *and* no answer of its call is still due from the
 * batcher; a connection lives until its handle is closed and none of its
 * stream objects remains. So an answer that arrives after the client went
 * away finds its stream and connection still allocated and only frees
 * them, as native/conn.c does with inflight.
 *
 * Health. A Watch stream is answered at once (response headers) and then
 * drawn from a data source that defers until the status changes; it is
 * on g->watches, holds one message at a time, and is neither at the
 * server nor owed (see health_watch). The status is looked at on a
 * 100-ms timer that runs only while a Watch is open, at each Check, and
 * at the drain and the stop. */
#include "envoy/grpc.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <nghttp2/nghttp2.h>

#include "base/log.h"
#include "base/prom.h"
#include "envoy/health.h"
#include "envoy/stats.h"
#include "net/listen.h"
#include "net/stream.h"
#include "net/tls.h"
#include "rl_error.h"
#include "rl_frame.h"
#include "base/util.h"
#include "rlqs/rlqs.h"

#define READ_CHUNK 65536
/* Output drawn from nghttp2 per write, at most (it may overshoot by one
 * frame). */
#define OUT_BATCH 65536
/* What one connection may have nghttp2 do per round, by default: bytes
 * fed, and header-list bytes decoded. A call from Envoy is a few hundred
 * bytes of each, so a connection's 100 streams fit in one round; an
 * attack's amplified header blocks are cut to this. */
#define FEED_BUDGET READ_CHUNK
#define DECODE_BUDGET 65536
/* The feed budget of a connection that sent a header list over the limit:
 * nghttp2 decodes the rest of such a block only to keep its HPACK table,
 * without calling back, so the decode budget cannot cut it. Slices this
 * small keep each short, so that other clients barely wait behind them
 * (what one costs: BENCHMARKS.md, "Figures behind the code's choices"). */
#define STRUCK_FEED_BUDGET 2048
/* What an answer holds besides its message until it is drawn: our stream
 * object, nghttp2's stream and its queued frames (BENCHMARKS.md, "Figures
 * behind the code's choices"). */
#define ANSWER_COST 1024
/* Header lists over the limit that end a connection. */
#define HEADER_STRIKES 2
#define RLS_GRPC_PATH                                                          \
    "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"
/* How often the status Watch streams follow is looked at while any is
 * open (it is pushed only when it changed). */
#define HEALTH_POLL_MS 100
/* An RLQS stream's responses not yet drawn, at most: past it its client
 * is not reading them, and the stream is reset (CANCEL). */
#define RLQS_OUT_MAX (256 * 1024)

typedef struct gconn_s gconn_t;

typedef struct gstream_s {
    gconn_t *c;
    int32_t id;
    rls_list_t node; /* in c->streams */
    rls_list_t owed; /* in c->owed while its answer is owed */
    rl_buf_t msg;    /* the request body so far */
    uint8_t *resp;   /* the response message, until drawn whole */
    size_t resp_len;
    size_t resp_off;
    size_t owed_bytes; /* counted in c->owed_bytes while owed */
    rls_envoy_call_t call;
    int err; /* a gRPC status decided before the request ended; or 0 */
    const char *why;
    size_t hdr_bytes;
    unsigned tp_seen;     /* traceparent fields seen (--trace-otlp) */
    size_t held;          /* msg bytes counted in g->held */
    uint64_t begin_ms;    /* when its HEADERS came */
    uint64_t answered_ms; /* when its answer was submitted */
    unsigned post : 1;
    unsigned path_ok : 1;
    unsigned path_seen : 1;
    unsigned ctype_ok : 1;
    unsigned encoding : 1; /* grpc-encoding other than identity */
    unsigned complete : 1; /* the client ended the request (END_STREAM) */
    unsigned started : 1;  /* the call was started */
    unsigned answered : 1; /* a response was submitted, or it was reset */
    unsigned closed : 1;   /* nghttp2 is done with it */
    /* grpc.health.v1 (its :path): 1 Check, 2 Watch. A Watch stream, once
     * started, is on g->watches and holds one message at a time: wmsg,
     * drawn from woff, the latest status replacing an older one that has
     * not started to go (so a client that does not read its window costs
     * no more than one that does). */
    unsigned health : 2;
    unsigned wknown : 1; /* its service is one of ours */
    unsigned wend : 1;   /* ends (trailers) once its message is drawn */
    int8_t wsent;        /* the status of wmsg; -1: none yet */
    uint8_t wlen;
    uint8_t woff;
    uint8_t wmsg[RLS_HEALTH_MSG_MAX];
    rls_list_t wnode; /* in g->watches */
    /* RLQS (StreamRateLimitQuotas, with --rlqs-config): a stream of
     * messages both ways; see "RLQS streams" below. */
    unsigned rlqs : 1;
    unsigned rend : 1; /* ends (trailers rcode) once rout is drawn */
    int rcode;
    const char *rwhy;
    rls_rlqs_stream_t *rq; /* the service's, from the first message */
    rl_buf_t rout;         /* framed responses not yet drawn */
    rls_list_t rnode;      /* in g->rlqs_streams while rq is open */
} gstream_t;

struct gconn_s {
    /* The socket (net/stream.h). s.tls NULL: h2c; else HTTP/2 goes
     * through it: nothing of nghttp2 is drawn before its handshake is
     * done. s.owed: its stream objects alive (on `streams`); it is freed
     * when rls_stream_done says so. */
    rls_stream_t s;
    uv_write_t wreq;
    rls_grpc_t *g;
    nghttp2_session *h2; /* under TLS, NULL until the handshake is done */
    rls_list_t node;    /* in g->fresh or g->proven */
    rls_list_t dirty;   /* in g->dirty */
    rls_list_t resume;  /* in g->resume while paused by its budget */
    rls_list_t streams; /* stream objects alive */
    rls_list_t owed;    /* streams whose answers are owed, oldest first */
    rl_buf_t out;       /* bytes drawn from nghttp2, being written */
    uint8_t *stash;     /* input left when nghttp2 paused, from stash_off */
    size_t stash_len;
    size_t stash_off;
    size_t owed_bytes; /* memory of the owed answers */
    uint64_t gen;      /* the round fed and decoded count for */
    size_t fed;
    size_t decoded;
    uint64_t active_ms;    /* accepted, last request completed, last answer */
    uint64_t write_ms;     /* when the write in flight began */
    uint32_t open_streams; /* streams nghttp2 has open with us */
    uint32_t at_server;    /* calls started and not yet answered */
    uint32_t strikes;      /* header lists over the limit */
    uint32_t watches;      /* Watch streams open */
    size_t rlqs_out;       /* RLQS responses queued, not yet drawn */
    unsigned writing : 1;
    unsigned goaway : 1;
    unsigned proven : 1;   /* completed a request: on g->proven */
    unsigned ended : 1;    /* nghttp2 takes no more input from it */
    unsigned overflow : 1; /* owed answers over --max-output */
    /* nghttp2 paused (NGHTTP2_ERR_PAUSE): it must be called again, with
     * the stash or nothing, before the connection is read. Even when it
     * took the whole read: the end of a header block that was in it is
     * handled only by the next call. */
    unsigned paused : 1;
};

struct rls_grpc_s {
    rls_frontend_t fe; /* its life, as the server sees it */
    uv_loop_t *loop;
    uint32_t max_frame;   /* rls_grpc_opts_t's; the transport's are in */
    uint32_t max_streams; /* set.opts */
    uv_tcp_t listener;
    uv_idle_t spin; /* keeps poll from blocking while reads are deferred */
    uv_timer_t health; /* HEALTH_POLL_MS, while a Watch stream is open */
    int listening;
    int draining;
    int stopping;
    int freeing;
    unsigned handles;   /* of listener, set.sweep, spin and health, open */
    size_t nalloc;      /* connections allocated (open or closing) */
    uint64_t held;      /* request bytes buffered by all streams and stashes */
    uint64_t owed;      /* memory of all owed answers */
    uint64_t gen;       /* rounds so far */
    size_t feed_budget; /* FEED_BUDGET unless a test set it */
    size_t decode_budget; /* DECODE_BUDGET likewise */
    rls_list_t fresh;     /* connections with no request completed, oldest
                             first */
    rls_list_t proven;    /* the others, least recently active first */
    rls_list_t dirty;
    rls_list_t resume;
    /* Its connections' transport: the read buffer (READ_CHUNK) they
     * share, TLS (NULL: h2c; else the server's, outliving us) and its
     * counters, the TLS clients seen on h2c, and the one timer of its
     * deadlines (set.sweep, every second). */
    rls_streams_t set;
    rl_buf_t scratch; /* where responses are encoded */
    nghttp2_session_callbacks *cbs;
    nghttp2_option *opt;
    rls_envoy_ctx_t ctx;
    rls_grpc_stats_t stats;
    uint8_t *pbuf;  /* plaintext out of TLS, READ_CHUNK bytes */
    rl_buf_t plain; /* frames drawn from nghttp2, before TLS */
    rls_health_fn health_fn;   /* whether the server takes work; NULL: yes */
    void *health_arg;
    int hstatus;        /* the status last looked at; -1: never */
    rls_list_t watches; /* Watch streams open */
    rls_rlqs_t *rlqs;   /* --rlqs-config's service, or NULL */
    rls_list_t rlqs_streams; /* RLQS streams open */
    uint64_t rlqs_reset;     /* RLQS streams reset: output not taken */
};

static void conn_close(gconn_t *c);
static void maybe_free_grpc(rls_grpc_t *g);
static int h2_start(gconn_t *c);

static void on_handle_closed(uv_handle_t *h)
{
    rls_grpc_t *g = h->data;

    g->handles--;
    maybe_free_grpc(g);
}

static void mark_dirty(gconn_t *c)
{
    if (!c->s.closing && !rls_list_linked(&c->dirty))
        rls_list_push(&c->g->dirty, &c->dirty);
}

/* Activity: a request completed or an answer given or taken. */
static void touch(gconn_t *c)
{
    c->active_ms = uv_now(c->g->loop);
    if (c->s.closing)
        return;
    /* From `fresh` at its first whole request: it has shown it is a
     * client. */
    c->proven = 1;
    rls_list_remove(&c->node);
    rls_list_push(&c->g->proven, &c->node);
}

static void maybe_free_conn(gconn_t *c)
{
    rls_grpc_t *g = c->g;

    if (!rls_stream_done(&c->s))
        return;
    rl_buf_free(&c->out);
    free(c);
    g->nalloc--;
    maybe_free_grpc(g);
}

/* Frees a stream's request buffer and uncounts it. */
static void msg_release(gstream_t *st)
{
    st->c->g->held -= st->held;
    st->held = 0;
    rl_buf_free(&st->msg);
}

/* The answer is no longer owed: drawn whole, or the stream went. */
static void unowe(gstream_t *st)
{
    gconn_t *c = st->c;

    if (!rls_list_linked(&st->owed))
        return;
    rls_list_remove(&st->owed);
    c->owed_bytes -= st->owed_bytes;
    c->g->owed -= st->owed_bytes;
    st->owed_bytes = 0;
}

/* An answer was submitted: it is owed until drawn. Past --max-output the
 * connection is marked, and closed at its next flush (never here: this
 * runs inside nghttp2's callbacks too). */
static void owe(gstream_t *st, size_t msg_len)
{
    gconn_t *c = st->c;

    st->answered_ms = uv_now(c->g->loop);
    st->owed_bytes = msg_len + ANSWER_COST;
    c->owed_bytes += st->owed_bytes;
    c->g->owed += st->owed_bytes;
    rls_list_push(&c->owed, &st->owed);
    if (c->owed_bytes + rl_buf_len(&c->out) > c->g->set.opts.max_output)
        c->overflow = 1;
    mark_dirty(c);
}

/* A Watch stream is no longer followed (it closed, or its connection
 * did). */
static void unwatch(gstream_t *st)
{
    rls_grpc_t *g = st->c->g;

    if (!rls_list_linked(&st->wnode))
        return;
    rls_list_remove(&st->wnode);
    st->c->watches--;
    g->stats.watches_open--;
    if (rls_list_empty(&g->watches))
        uv_timer_stop(&g->health);
}

static void rlqs_gone(gstream_t *st);

static void stream_free_maybe(gstream_t *st)
{
    gconn_t *c = st->c;

    if (!st->closed || st->call.pending > 0)
        return;
    unwatch(st);
    rlqs_gone(st);
    c->rlqs_out -= rl_buf_len(&st->rout);
    c->g->owed -= rl_buf_len(&st->rout);
    rl_buf_free(&st->rout);
    if (st->started)
        rls_envoy_call_free(&st->call);
    msg_release(st);
    unowe(st);
    free(st->resp);
    rls_list_remove(&st->node);
    c->s.owed--;
    free(st);
    maybe_free_conn(c);
}

/* The stream has its answer (or was reset): its call is no longer at the
 * server. */
static void mark_answered(gstream_t *st)
{
    if (st->answered)
        return;
    st->answered = 1;
    if (st->started)
        st->c->at_server--;
    if (st->path_ok)
        rls_estats_call(st->c->g->ctx.estats,
                        uv_now(st->c->g->loop) - st->begin_ms);
}

/* ------------------------------------------------------------------------ */
/* Answers */

static const char *status_text(int code)
{
    switch (code) {
    case RLS_GRPC_UNKNOWN:
        return "2";
    case RLS_GRPC_INVALID_ARGUMENT:
        return "3";
    case RLS_GRPC_DEADLINE_EXCEEDED:
        return "4";
    case RLS_GRPC_NOT_FOUND:
        return "5";
    case RLS_GRPC_RESOURCE_EXHAUSTED:
        return "8";
    case RLS_GRPC_UNIMPLEMENTED:
        return "12";
    case RLS_GRPC_INTERNAL:
        return "13";
    case RLS_GRPC_UNAVAILABLE:
        return "14";
    default:
        return "0";
    }
}

#define NV(n, v)                                                               \
    {                                                                          \
        (uint8_t *)(n), (uint8_t *)(v), sizeof(n) - 1, strlen(v),              \
            NGHTTP2_NV_FLAG_NO_COPY_NAME                                       \
    }

/* grpc-message is percent-encoded (gRPC over HTTP/2): our texts are
 * printable ASCII, so only '%' itself needs it. */
static void grpc_message(char *out, size_t cap, const char *why)
{
    size_t k = 0;

    for (; *why != '\0' && k + 4 < cap; why++) {
        if (*why == '%' || (unsigned char)*why < 0x20 ||
            (unsigned char)*why > 0x7e) {
            k += (size_t)snprintf(out + k, cap - k, "%%%02X",
                                  (unsigned char)*why);
        } else {
            out[k++] = *why;
        }
    }
    out[k] = '\0';
}

/* A trailers-only response: the status in the one HEADERS frame. */
static void reply_status(gstream_t *st, int code, const char *why)
{
    gconn_t *c = st->c;
    char msg[256];
    nghttp2_nv nva[4] = {
        NV(":status", "200"),
        NV("content-type", "application/grpc"),
        NV("grpc-status", status_text(code)),
        NV("grpc-message", ""),
    };

    if (st->answered)
        return;
    mark_answered(st);
    if (st->health)
        c->g->stats.health_checks += st->health == 1;
    else
        c->g->stats.calls[code < RLS_GRPC_CODES ? code : RLS_GRPC_INTERNAL]++;
    if (st->closed || c->s.closing)
        return;
    grpc_message(msg, sizeof(msg), why != NULL ? why : "");
    nva[3].value = (uint8_t *)msg;
    nva[3].valuelen = strlen(msg);
    if (nghttp2_submit_response(c->h2, st->id, nva, 4, NULL) != 0)
        nghttp2_submit_rst_stream(c->h2, NGHTTP2_FLAG_NONE, st->id,
                                  NGHTTP2_INTERNAL_ERROR);
    owe(st, 0);
    if (st->complete)
        touch(c);
}

/* Not a gRPC request at all (content-type): HTTP 415, as gRPC says. */
static void reply_http(gstream_t *st, const char *status)
{
    gconn_t *c = st->c;
    nghttp2_nv nva[1] = {NV(":status", status)};

    if (st->answered)
        return;
    mark_answered(st);
    c->g->stats.http_errors++;
    if (st->closed || c->s.closing)
        return;
    if (nghttp2_submit_response(c->h2, st->id, nva, 1, NULL) != 0)
        nghttp2_submit_rst_stream(c->h2, NGHTTP2_FLAG_NONE, st->id,
                                  NGHTTP2_INTERNAL_ERROR);
    owe(st, 0);
    if (st->complete)
        touch(c);
}

/* nghttp2 draws the response message; it is freed as soon as the last of
 * it is drawn (an answer waiting for a window holds nothing more). */
static ssize_t read_body(nghttp2_session *s, int32_t id, uint8_t *buf,
                         size_t length, uint32_t *flags,
                         nghttp2_data_source *src, void *ud)
{
    gstream_t *st = src->ptr;
    size_t left = st->resp_len - st->resp_off;
    size_t n = left < length ? left : length;
    nghttp2_nv trailers[1] = {NV("grpc-status", "0")};

    (void)ud;
    if (n > 0)
        memcpy(buf, st->resp + st->resp_off, n);
    st->resp_off += n;
    if (st->resp_off == st->resp_len) {
        free(st->resp);
        st->resp = NULL;
        *flags |= NGHTTP2_DATA_FLAG_EOF;
        if (nghttp2_submit_trailer(s, id, trailers, 1) == 0)
            *flags |= NGHTTP2_DATA_FLAG_NO_END_STREAM;
    }
    return (ssize_t)n;
}

static void reply_ok(gstream_t *st)
{
    gconn_t *c = st->c;
    rls_grpc_t *g = c->g;
    nghttp2_nv nva[2] = {
        NV(":status", "200"),
        NV("content-type", "application/grpc"),
    };
    nghttp2_data_provider prd;
    size_t len;

    if (st->answered)
        return;
    if (st->closed || c->s.closing) {
        mark_answered(st);
        g->stats.calls[RLS_GRPC_OK]++;
        return;
    }
    /* Encoded into the listener's buffer, then copied to one of its own
     * size: an answer that waits for its client holds only that. */
    rl_buf_reset(&g->scratch);
    if (rls_envoy_encode(&st->call, &g->scratch) != RL_OK ||
        (st->resp = malloc((len = rl_buf_len(&g->scratch)) + 1)) == NULL) {
        reply_status(st, RLS_GRPC_RESOURCE_EXHAUSTED,
                     "out of memory encoding the response");
        return;
    }
    memcpy(st->resp, rl_buf_rptr(&g->scratch), len);
    st->resp_len = len;
    mark_answered(st);
    g->stats.calls[RLS_GRPC_OK]++;
    prd.source.ptr = st;
    prd.read_callback = read_body;
    if (nghttp2_submit_response(c->h2, st->id, nva, 2, &prd) != 0)
        nghttp2_submit_rst_stream(c->h2, NGHTTP2_FLAG_NONE, st->id,
                                  NGHTTP2_INTERNAL_ERROR);
    owe(st, len);
    if (st->complete)
        touch(c);
}

/* ------------------------------------------------------------------------ */
/* grpc.health.v1 */

/* The status now: NOT_SERVING from the drain on, else what the server
 * says (SERVING when nothing does). */
static int health_now(rls_grpc_t *g)
{
    if (g->stopping)
        return RLS_HEALTH_NOT_SERVING;
    if (g->health_fn == NULL)
        return RLS_HEALTH_SERVING;
    return g->health_fn(g->health_arg) ? RLS_HEALTH_SERVING
                                       : RLS_HEALTH_NOT_SERVING;
}

/* What a Watch stream is to say now. */
static int watch_status(const gstream_t *st)
{
    return st->wknown ? st->c->g->hstatus : RLS_HEALTH_SERVICE_UNKNOWN;
}

/* A Watch stream has something to draw (a new status, or its end):
 * nghttp2 asks its data source again at the flush. */
static void watch_kick(gstream_t *st)
{
    gconn_t *c = st->c;

    if (c->s.closing || c->h2 == NULL)
        return;
    nghttp2_session_resume_data(c->h2, st->id);
    mark_dirty(c);
}

/* Looks at the status once; a change goes to every Watch stream of a
 * known service. */
static void health_refresh(rls_grpc_t *g)
{
    int now = health_now(g);
    rls_list_t *n;

    if (now == g->hstatus)
        return;
    g->hstatus = now;
    for (n = g->watches.next; n != &g->watches; n = n->next) {
        gstream_t *st = RLS_CONTAINER_OF(n, gstream_t, wnode);
        if (st->wknown)
            watch_kick(st);
    }
}

static void on_health_timer(uv_timer_t *t)
{
    rls_grpc_t *g = t->data;

    health_refresh(g);
    rls_grpc_flush(g);
}

/* nghttp2 draws a Watch stream: the message in progress, else the
 * status if it differs from the last one sent, else its end (trailers:
 * UNAVAILABLE, the server is going away, as gRPC clients see a Watch end
 * when grpc-go's server stops), else nothing until watch_kick. */
static ssize_t watch_body(nghttp2_session *s, int32_t id, uint8_t *buf,
                          size_t length, uint32_t *flags,
                          nghttp2_data_source *src, void *ud)
{
    gstream_t *st = src->ptr;
    nghttp2_nv trailers[2] = {
        NV("grpc-status", "14"),
        NV("grpc-message", "server stopping"),
    };
    size_t n;
    int want;

    (void)ud;
    if (st->woff == st->wlen) {
        want = watch_status(st);
        if (want != st->wsent) {
            st->wlen = (uint8_t)rls_health_encode(want, st->wmsg);
            st->woff = 0;
            st->wsent = (int8_t)want;
        } else if (st->wend) {
            *flags |= NGHTTP2_DATA_FLAG_EOF;
            if (nghttp2_submit_trailer(s, id, trailers, 2) == 0)
                *flags |= NGHTTP2_DATA_FLAG_NO_END_STREAM;
            return 0;
        } else {
            return NGHTTP2_ERR_DEFERRED;
        }
    }
    n = (size_t)(st->wlen - st->woff);
    if (n > length)
        n = length; /* a message may span frames; the rest goes next */
    memcpy(buf, st->wmsg + st->woff, n);
    st->woff = (uint8_t)(st->woff + n);
    return (ssize_t)n;
}

/* Ends a Watch stream as the server goes: its last status (NOT_SERVING)
 * and trailers, when its client's window can take them; else it is reset
 * (CANCEL), so that a client that does not read cannot hold the stop. */
static void watch_end(gstream_t *st)
{
    gconn_t *c = st->c;
    int32_t room;

    if (st->wend || c->s.closing || c->h2 == NULL)
        return;
    st->wend = 1;
    room = nghttp2_session_get_stream_remote_window_size(c->h2, st->id);
    if (st->woff != st->wlen || room < RLS_HEALTH_MSG_MAX ||
        nghttp2_session_get_remote_window_size(c->h2) < RLS_HEALTH_MSG_MAX)
        nghttp2_submit_rst_stream(c->h2, NGHTTP2_FLAG_NONE, st->id,
                                  NGHTTP2_CANCEL);
    else
        nghttp2_session_resume_data(c->h2, st->id);
    mark_dirty(c);
}

/* A Check (unary): the status now, or NOT_FOUND. */
static void health_check(gstream_t *st, int known)
{
    gconn_t *c = st->c;
    rls_grpc_t *g = c->g;
    nghttp2_nv nva[2] = {
        NV(":status", "200"),
        NV("content-type", "application/grpc"),
    };
    nghttp2_data_provider prd;
    uint8_t m[RLS_HEALTH_MSG_MAX];
    size_t len;

    if (!known) {
        reply_status(st, RLS_GRPC_NOT_FOUND, "unknown service");
        return;
    }
    health_refresh(g);
    len = rls_health_encode(g->hstatus, m);
    if ((st->resp = malloc(len)) == NULL) {
        reply_status(st, RLS_GRPC_RESOURCE_EXHAUSTED, "out of memory");
        return;
    }
    memcpy(st->resp, m, len);
    st->resp_len = len;
    mark_answered(st);
    g->stats.health_checks++;
    prd.source.ptr = st;
    prd.read_callback = read_body;
    if (nghttp2_submit_response(c->h2, st->id, nva, 2, &prd) != 0)
        nghttp2_submit_rst_stream(c->h2, NGHTTP2_FLAG_NONE, st->id,
                                  NGHTTP2_INTERNAL_ERROR);
    owe(st, len);
    touch(c);
}

/* A Watch (server-streaming): response headers now, the status at once
 * and each change after, until the client cancels or the server goes.
 * Its stream is answered as far as the connection's rules go: it is not
 * a call at the server nor an owed answer, so it neither keeps the
 * connection from --idle-timeout nor falls under --frame-timeout-ms's
 * rule on answers not taken (its one message does not grow). */
static void health_watch(gstream_t *st, int known)
{
    gconn_t *c = st->c;
    rls_grpc_t *g = c->g;
    nghttp2_nv nva[2] = {
        NV(":status", "200"),
        NV("content-type", "application/grpc"),
    };
    nghttp2_data_provider prd;

    if (c->watches >= RLS_GRPC_WATCHES_PER_CONN ||
        g->stats.watches_open >= RLS_GRPC_WATCHES_MAX) {
        g->stats.watches_refused++;
        reply_status(st, RLS_GRPC_RESOURCE_EXHAUSTED,
                     "too many Watch streams open");
        return;
    }
    health_refresh(g);
    mark_answered(st);
    g->stats.health_watches++;
    touch(c);
    if (st->closed || c->s.closing)
        return;
    st->wknown = (unsigned)known;
    st->wsent = -1;
    prd.source.ptr = st;
    prd.read_callback = watch_body;
    if (nghttp2_submit_response(c->h2, st->id, nva, 2, &prd) != 0) {
        nghttp2_submit_rst_stream(c->h2, NGHTTP2_FLAG_NONE, st->id,
                                  NGHTTP2_INTERNAL_ERROR);
        mark_dirty(c);
        return;
    }
    if (rls_list_empty(&g->watches))
        uv_timer_start(&g->health, on_health_timer, HEALTH_POLL_MS,
                       HEALTH_POLL_MS);
    rls_list_push(&g->watches, &st->wnode);
    c->watches++;
    g->stats.watches_open++;
    mark_dirty(c);
    /* After the GOAWAY of the stop (a stream the client opened before
     * it): its status, then its end. */
    if (c->goaway)
        watch_end(st);
}

/* A grpc.health.v1 call whose message p[0, n) is whole. */
static void health_call(gstream_t *st, const uint8_t *p, size_t n)
{
    int known = rls_health_service(p, n);

    if (known < 0)
        reply_status(st, RLS_GRPC_INTERNAL, "bad HealthCheckRequest");
    else if (st->health == 1)
        health_check(st, known);
    else
        health_watch(st, known);
}

/* The last answer of a call came. */
static void on_call_done(rls_envoy_call_t *call)
{
    gstream_t *st = RLS_CONTAINER_OF(call, gstream_t, call);

    reply_ok(st); /* nothing when an error was answered already */
    stream_free_maybe(st);
}

/* ------------------------------------------------------------------------ */
/* RLQS streams
 *
 * StreamRateLimitQuotas is bidirectional: each whole message is handed to
 * the service (rlqs/rlqs.h) as its DATA arrives, and the service writes
 * responses when it decides, through the sink below: each is framed into
 * the stream's rout and drawn by rlqs_body, which defers while rout is
 * empty. Like a Watch, the stream is answered (response headers) at its
 * first message and is then neither at the server nor owed: it does not
 * hold the connection from --idle-timeout, but each message it sends
 * counts as activity. Its input is held to --max-frame per message and
 * --max-partial-bytes with every other stream's; its output to
 * RLQS_OUT_MAX, and with the connection's owed answers to --max-output
 * (past either the stream is reset). It ends when the client
 * ends it (OK), the service ends it (its status), or the server stops
 * (UNAVAILABLE). */

/* The service is done with the stream (or the stream with it). */
static void rlqs_gone(gstream_t *st)
{
    rls_rlqs_stream_t *rq = st->rq;

    if (rq == NULL)
        return;
    st->rq = NULL;
    rls_list_remove(&st->rnode);
    rls_rlqs_close(rq);
}

static ssize_t rlqs_body(nghttp2_session *s, int32_t id, uint8_t *buf,
                         size_t length, uint32_t *flags,
                         nghttp2_data_source *src, void *ud)
{
    gstream_t *st = src->ptr;
    size_t n = rl_buf_len(&st->rout);
    char msg[256];
    nghttp2_nv trailers[2] = {
        NV("grpc-status", status_text(st->rcode)),
        NV("grpc-message", ""),
    };

    (void)ud;
    if (n > 0) {
        if (n > length)
            n = length;
        memcpy(buf, rl_buf_rptr(&st->rout), n);
        rl_buf_consume(&st->rout, n);
        st->c->rlqs_out -= n;
        st->c->g->owed -= n;
        return (ssize_t)n;
    }
    if (!st->rend)
        return NGHTTP2_ERR_DEFERRED;
    grpc_message(msg, sizeof(msg), st->rwhy != NULL ? st->rwhy : "");
    trailers[1].value = (uint8_t *)msg;
    trailers[1].valuelen = strlen(msg);
    *flags |= NGHTTP2_DATA_FLAG_EOF;
    if (nghttp2_submit_trailer(s, id, trailers, st->rwhy != NULL ? 2 : 1) == 0)
        *flags |= NGHTTP2_DATA_FLAG_NO_END_STREAM;
    return 0;
}

static void rlqs_kick(gstream_t *st)
{
    gconn_t *c = st->c;

    if (c->s.closing || c->h2 == NULL || st->closed)
        return;
    nghttp2_session_resume_data(c->h2, st->id);
    mark_dirty(c);
}

/* Ends the stream once what it has queued is drawn: trailers with code. */
static void rlqs_end(gstream_t *st, int code, const char *why)
{
    if (st->rend)
        return;
    st->rend = 1;
    st->rcode = code;
    st->rwhy = why;
    rlqs_kick(st);
}

static void sink_send(void *arg, const uint8_t *msg, size_t len)
{
    gstream_t *st = arg;
    gconn_t *c = st->c;
    uint8_t *payload;

    if (st->rend || st->closed || c->s.closing || c->h2 == NULL)
        return;
    /* The connection's answers and RLQS responses together are held to
     * --max-output, as owed answers are; one stream to RLQS_OUT_MAX. */
    if (c->owed_bytes + c->rlqs_out + len + RL_FRAME_HEADER >
            c->g->set.opts.max_output ||
        rl_frame_reserve(&st->rout, len, &payload) != RL_OK) {
        /* Its client does not take what it is sent. */
        c->g->rlqs_reset++;
        st->rend = 1;
        nghttp2_submit_rst_stream(c->h2, NGHTTP2_FLAG_NONE, st->id,
                                  NGHTTP2_CANCEL);
        mark_dirty(c);
        return;
    }
    memcpy(payload, msg, len);
    rl_frame_commit(&st->rout, len);
    c->rlqs_out += len + RL_FRAME_HEADER;
    c->g->owed += len + RL_FRAME_HEADER;
    rlqs_kick(st);
}

static void sink_end(void *arg, int code, const char *why)
{
    rlqs_end(arg, code, why);
}

/* The first message: the response begins (headers now, messages as the
 * service sends them). Returns 0, or -1 with the stream answered. */
static int rlqs_start(gstream_t *st)
{
    gconn_t *c = st->c;
    nghttp2_nv nva[2] = {
        NV(":status", "200"),
        NV("content-type", "application/grpc"),
    };
    nghttp2_data_provider prd;
    rls_rlqs_sink_t sink = {sink_send, sink_end, st};

    if ((st->rq = rls_rlqs_open(c->g->rlqs, &sink)) == NULL) {
        reply_status(st, RLS_GRPC_RESOURCE_EXHAUSTED,
                     "too many RLQS streams open");
        return -1;
    }
    rls_list_push(&c->g->rlqs_streams, &st->rnode);
    mark_answered(st);
    prd.source.ptr = st;
    prd.read_callback = rlqs_body;
    if (nghttp2_submit_response(c->h2, st->id, nva, 2, &prd) != 0) {
        nghttp2_submit_rst_stream(c->h2, NGHTTP2_FLAG_NONE, st->id,
                                  NGHTTP2_INTERNAL_ERROR);
        st->rend = 1;
        rlqs_gone(st);
        mark_dirty(c);
        return -1;
    }
    mark_dirty(c);
    return 0;
}

/* A transport-level error on an RLQS stream: trailers-only before its
 * response began, else its trailers; the service is done with it. */
static void rlqs_fail(gstream_t *st, int code, const char *why)
{
    msg_release(st);
    if (st->rq == NULL && !st->answered) {
        st->rend = 1;
        reply_status(st, code, why);
        return;
    }
    rlqs_end(st, code, why);
    rlqs_gone(st);
}

static int rlqs_data(gstream_t *st, const uint8_t *data, size_t len)
{
    gconn_t *c = st->c;
    rls_grpc_t *g = c->g;
    rl_frame_t f;
    size_t max = (size_t)g->max_frame + 5;
    int rc;

    if (st->rend || st->closed || (st->answered && st->rq == NULL))
        return 0;
    if (!st->post || !st->ctype_ok || st->encoding) {
        rlqs_fail(st, st->encoding ? RLS_GRPC_UNIMPLEMENTED : RLS_GRPC_INTERNAL,
                  st->encoding ? "compression is not supported; send "
                                 "uncompressed messages"
                               : "a gRPC POST with content-type "
                                 "application/grpc");
        return 0;
    }
    if (rl_buf_len(&st->msg) + len > max) {
        rlqs_fail(st, RLS_GRPC_RESOURCE_EXHAUSTED,
                  "message larger than --max-frame");
        return 0;
    }
    if (g->set.opts.max_input > 0 && g->held + len > g->set.opts.max_input) {
        g->stats.streams_shed++;
        rlqs_fail(st, RLS_GRPC_RESOURCE_EXHAUSTED,
                  "server input memory full (--max-partial-bytes)");
        return 0;
    }
    if (rl_buf_append(&st->msg, data, len) != RL_OK) {
        rlqs_fail(st, RLS_GRPC_RESOURCE_EXHAUSTED, "out of memory");
        return 0;
    }
    st->held += len;
    g->held += len;
    while (!st->rend) {
        rc = rl_frame_decode(rl_buf_rptr(&st->msg), rl_buf_len(&st->msg),
                             g->max_frame, &f);
        if (rc == RL_EAGAIN)
            break;
        if (rc != RL_OK) {
            rlqs_fail(st,
                      rc == RL_EFRAMESIZE ? RLS_GRPC_RESOURCE_EXHAUSTED
                                          : RLS_GRPC_INTERNAL,
                      rc == RL_EFRAMESIZE ? "message larger than --max-frame"
                                          : "compressed flag set without "
                                            "grpc-encoding");
            return 0;
        }
        if (st->rq == NULL && rlqs_start(st) != 0) {
            msg_release(st);
            return 0;
        }
        touch(c);
        rls_rlqs_message(st->rq, f.payload, f.len);
        rl_buf_consume(&st->msg, f.size);
        st->held -= f.size;
        g->held -= f.size;
        if (st->rq == NULL)
            break;
    }
    return 0;
}

/* The client ended its side: a partial message is an error; else the
 * server ends too (OK), and its buckets leave the fleet. */
static void rlqs_done(gstream_t *st)
{
    st->complete = 1;
    touch(st->c);
    if (st->rend || (st->answered && st->rq == NULL))
        return;
    if (rl_buf_len(&st->msg) > 0) {
        rlqs_fail(st, RLS_GRPC_INTERNAL, "message truncated");
        return;
    }
    if (st->rq == NULL) {
        st->rend = 1;
        reply_status(st, RLS_GRPC_OK, NULL);
        return;
    }
    rlqs_end(st, RLS_GRPC_OK, NULL);
    rlqs_gone(st);
}

/* ------------------------------------------------------------------------ */
/* Requests */

static void rlqs_done(gstream_t *st);

/* The request ended (END_STREAM): check the framing, start the call. */
static void request_done(gstream_t *st)
{
    const uint8_t *p = rl_buf_rptr(&st->msg);
    size_t n = rl_buf_len(&st->msg);
    const char *why = NULL;
    rl_frame_t f;
    int rc;

    if (st->rlqs) {
        rlqs_done(st);
        return;
    }
    if (st->answered)
        return;
    st->complete = 1;
    touch(st->c);
    if (st->err != 0) {
        reply_status(st, st->err, st->why);
        return;
    }
    if (!st->ctype_ok) {
        reply_http(st, "415");
        return;
    }
    if (!st->post || !(st->path_ok || st->health)) {
        reply_status(st, RLS_GRPC_UNIMPLEMENTED,
                     st->post ? "unknown service or method; this server "
                                "serves " RLS_GRPC_PATH
                              : "method must be POST");
        return;
    }
    if (n < RL_FRAME_HEADER) {
        reply_status(st, RLS_GRPC_INTERNAL,
                     "expected one length-prefixed message");
        return;
    }
    rc = rl_frame_decode(p, n, st->c->g->max_frame, &f);
    if (rc == RL_EFRAMEFLAG && p[0] == RL_FRAME_COMPRESSED) {
        /* gRPC: a compressed message needs a grpc-encoding; one we do not
         * support is UNIMPLEMENTED, none at all INTERNAL. */
        reply_status(st,
                     st->encoding ? RLS_GRPC_UNIMPLEMENTED : RLS_GRPC_INTERNAL,
                     st->encoding ? "compression is not supported; send "
                                    "uncompressed messages"
                                  : "compressed flag set without "
                                    "grpc-encoding");
        return;
    }
    if (rc == RL_EFRAMEFLAG) {
        reply_status(st, RLS_GRPC_INTERNAL, "bad message flag");
        return;
    }
    if (rc == RL_EFRAMESIZE) {
        reply_status(st, RLS_GRPC_RESOURCE_EXHAUSTED,
                     "message larger than --max-frame");
        return;
    }
    if (rc != RL_OK || f.size != n) {
        reply_status(st, RLS_GRPC_INTERNAL,
                     rc != RL_OK ? "message truncated"
                                 : "more than one message in a unary call");
        return;
    }
    if (st->health) {
        health_call(st, f.payload, f.len);
        msg_release(st);
        return;
    }
    st->started = 1;
    st->c->at_server++;
    st->call.done = on_call_done;
    rc = rls_envoy_start(&st->call, &st->c->g->ctx, f.payload, f.len, &why);
    msg_release(st);
    if (rc != RLS_GRPC_OK)
        reply_status(st, rc, why);
    else if (st->call.pending == 0)
        reply_ok(st);
}

static gstream_t *stream_of(nghttp2_session *s, int32_t id)
{
    return nghttp2_session_get_stream_user_data(s, id);
}

static int on_begin_headers(nghttp2_session *s, const nghttp2_frame *f,
                            void *ud)
{
    gconn_t *c = ud;
    gstream_t *st;

    if (f->hd.type != NGHTTP2_HEADERS || f->headers.cat != NGHTTP2_HCAT_REQUEST)
        return 0;
    /* nghttp2 refuses streams over the SETTINGS limit before this is
     * called, from the moment the SETTINGS are submitted; this is a
     * backstop. Refusing here (as for no memory) resets the stream and
     * has nghttp2 skip its header block. */
    if (c->open_streams >= c->g->max_streams) {
        c->g->stats.streams_refused++;
        return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
    }
    if ((st = calloc(1, sizeof(*st))) == NULL)
        return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
    st->c = c;
    st->id = f->hd.stream_id;
    st->begin_ms = uv_now(c->g->loop);
    rl_buf_init(&st->msg, (size_t)c->g->max_frame + 5);
    rls_list_init(&st->owed);
    rls_list_init(&st->wnode);
    rls_list_init(&st->rnode);
    rl_buf_init(&st->rout, RLQS_OUT_MAX);
    rls_list_push(&c->streams, &st->node);
    c->s.owed++;
    c->open_streams++;
    nghttp2_session_set_stream_user_data(s, st->id, st);
    return 0;
}

static int hv_is(const uint8_t *v, size_t n, const char *w)
{
    return n == strlen(w) && memcmp(v, w, n) == 0;
}

/* A stream's header list passed the limit: it is reset now (nghttp2 skips
 * the rest of its block), and a connection that keeps doing it is
 * ended. */
static int headers_too_large(gconn_t *c, gstream_t *st)
{
    c->g->stats.streams_oversized++;
    mark_answered(st); /* the reset is its answer */
    msg_release(st);
    if (++c->strikes >= HEADER_STRIKES && !c->ended) {
        /* GOAWAY, and nghttp2 ignores all further input (it stops
         * decoding this block too): no more CPU for this client. */
        RLS_DEBUG("grpc: closing connection: header lists over the limit",
                  " streams=%u", (unsigned)c->strikes);
        c->g->stats.conns_headers++;
        c->ended = 1;
        c->goaway = 1;
        nghttp2_session_terminate_session(c->h2, NGHTTP2_ENHANCE_YOUR_CALM);
    }
    return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
}

static int on_header(nghttp2_session *s, const nghttp2_frame *f,
                     const uint8_t *name, size_t namelen, const uint8_t *value,
                     size_t valuelen, uint8_t flags, void *ud)
{
    gconn_t *c = ud;
    gstream_t *st = stream_of(s, f->hd.stream_id);
    /* RFC 9113's size of a header field: name, value and 32. An indexed
     * reference counts what it expands to. */
    size_t size = namelen + valuelen + 32;

    (void)flags;
    c->decoded += size;
    if (st == NULL)
        return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE; /* nothing wanted */
    /* Trailers count with the headers: a client has no use for them. */
    st->hdr_bytes += size;
    if (st->hdr_bytes > RLS_GRPC_HEADERS_MAX)
        return headers_too_large(c, st);
    if (f->hd.type == NGHTTP2_HEADERS &&
        f->headers.cat == NGHTTP2_HCAT_REQUEST) {
        if (hv_is(name, namelen, ":method")) {
            st->post = hv_is(value, valuelen, "POST");
        } else if (hv_is(name, namelen, ":path")) {
            st->path_seen = 1;
            st->path_ok = hv_is(value, valuelen, RLS_GRPC_PATH);
            st->rlqs =
                c->g->rlqs != NULL && hv_is(value, valuelen, RLS_RLQS_PATH);
            st->health = hv_is(value, valuelen, RLS_HEALTH_CHECK_PATH)   ? 1
                         : hv_is(value, valuelen, RLS_HEALTH_WATCH_PATH) ? 2
                                                                         : 0;
        } else if (hv_is(name, namelen, "content-type")) {
            st->ctype_ok =
                valuelen >= 16 && memcmp(value, "application/grpc", 16) == 0 &&
                (valuelen == 16 || value[16] == '+' || value[16] == ';');
        } else if (hv_is(name, namelen, "grpc-encoding")) {
            st->encoding = !hv_is(value, valuelen, "identity");
        } else if (c->g->ctx.decider->tracer != NULL &&
                   hv_is(name, namelen, "traceparent")) {
            rls_traceparent_take(&st->call.parent, &st->tp_seen,
                                 (const char *)value, valuelen);
        }
    }
    /* Over the round's budget: nghttp2 returns from mem_recv now, and the
     * rest of the input waits for the next round. */
    if (c->decoded < c->g->decode_budget)
        return 0;
    c->paused = 1;
    return NGHTTP2_ERR_PAUSE;
}

static int rlqs_data(gstream_t *st, const uint8_t *data, size_t len);

static int on_data(nghttp2_session *s, uint8_t flags, int32_t id,
                   const uint8_t *data, size_t len, void *ud)
{
    gstream_t *st = stream_of(s, id);
    size_t max;

    (void)flags;
    (void)ud;
    if (st != NULL && st->rlqs)
        return rlqs_data(st, data, len);
    if (st == NULL || st->answered || st->err != 0 || st->started)
        return 0; /* dropped: the stream has its answer or will */
    max = (size_t)st->c->g->max_frame + 5;
    if (rl_buf_len(&st->msg) + len > max) {
        st->err = RLS_GRPC_RESOURCE_EXHAUSTED;
        st->why = "message larger than --max-frame";
    } else if (st->c->g->set.opts.max_input > 0 &&
               st->c->g->held + len > st->c->g->set.opts.max_input) {
        /* The bodies of all streams together, like the native side's
         * partial frames, are capped by --max-partial-bytes: the stream
         * that would pass it is refused, the others go on. */
        st->c->g->stats.streams_shed++;
        st->err = RLS_GRPC_RESOURCE_EXHAUSTED;
        st->why = "server input memory full (--max-partial-bytes)";
    } else if (rl_buf_append(&st->msg, data, len) != RL_OK) {
        st->err = RLS_GRPC_RESOURCE_EXHAUSTED;
        st->why = "out of memory";
    } else {
        st->held += len;
        st->c->g->held += len;
        return 0;
    }
    msg_release(st);
    /* Answer now: no need to wait for the rest of the body. */
    reply_status(st, st->err, st->why);
    return 0;
}

static int on_frame(nghttp2_session *s, const nghttp2_frame *f, void *ud)
{
    gstream_t *st;

    (void)ud;
    if (f->hd.type != NGHTTP2_HEADERS && f->hd.type != NGHTTP2_DATA)
        return 0;
    if ((st = stream_of(s, f->hd.stream_id)) == NULL)
        return 0;
    if (f->hd.flags & NGHTTP2_FLAG_END_STREAM)
        request_done(st);
    return 0;
}

/* A frame went out. The last of an answer: it is no longer owed, and a
 * stream the client has not finished is reset, NO_ERROR (RFC 9113 8.1:
 * the response is complete, the rest of the request is not wanted), so
 * that it does not stay open waiting for the client. */
static int on_frame_sent(nghttp2_session *s, const nghttp2_frame *f, void *ud)
{
    gconn_t *c = ud;
    gstream_t *st;

    if ((f->hd.type != NGHTTP2_HEADERS && f->hd.type != NGHTTP2_DATA) ||
        !(f->hd.flags & NGHTTP2_FLAG_END_STREAM))
        return 0;
    if ((st = stream_of(s, f->hd.stream_id)) != NULL) {
        unowe(st);
        if (st->complete)
            touch(c);
    }
    if (!nghttp2_session_get_stream_remote_close(s, f->hd.stream_id))
        nghttp2_submit_rst_stream(s, NGHTTP2_FLAG_NONE, f->hd.stream_id,
                                  NGHTTP2_NO_ERROR);
    return 0;
}

static int on_stream_close(nghttp2_session *s, int32_t id, uint32_t code,
                           void *ud)
{
    gconn_t *c = ud;
    gstream_t *st = stream_of(s, id);

    (void)code;
    if (st == NULL)
        return 0;
    if (!st->answered)
        c->g->stats.streams_reset++;
    nghttp2_session_set_stream_user_data(s, id, NULL);
    st->closed = 1;
    c->open_streams--;
    unowe(st);
    unwatch(st);
    rlqs_gone(st);
    stream_free_maybe(st);
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Connections */

static void on_closed(uv_handle_t *h)
{
    gconn_t *c = h->data;
    rls_grpc_t *g = c->g;
    rls_list_t *n, *next;

    /* Streams still waiting for the batcher free themselves when their
     * answers come; the others go now. The connection counts as closed
     * only after this walk, so that freeing its last stream here does not
     * free it under the loop. */
    for (n = c->streams.next; n != &c->streams; n = next) {
        gstream_t *st = RLS_CONTAINER_OF(n, gstream_t, node);
        next = n->next;
        st->closed = 1;
        stream_free_maybe(st);
    }
    c->s.handles--;
    if (g->stopping && rls_grpc_idle(g) && g->fe.on_empty != NULL)
        g->fe.on_empty(g->fe.arg);
    maybe_free_conn(c);
}

/* Drops the input nghttp2 paused on. */
static void unstash(gconn_t *c)
{
    if (c->stash == NULL)
        return;
    c->g->held -= c->stash_len;
    free(c->stash);
    c->stash = NULL;
    c->stash_len = c->stash_off = 0;
}

static void conn_close(gconn_t *c)
{
    rls_list_t *n;

    if (c->s.closing)
        return;
    /* The handle's callback comes later, in the loop's close phase; the
     * TLS state goes now. */
    rls_stream_close(&c->s, on_closed);
    rls_list_remove(&c->node);
    rls_list_remove(&c->dirty);
    rls_list_remove(&c->resume);
    unstash(c);
    /* Owed answers will never go: their memory is counted out now; and
     * Watch streams are followed no more (their session goes). */
    for (n = c->owed.next; n != &c->owed;) {
        gstream_t *st = RLS_CONTAINER_OF(n, gstream_t, owed);
        n = n->next;
        unowe(st);
    }
    for (n = c->streams.next; n != &c->streams; n = n->next) {
        unwatch(RLS_CONTAINER_OF(n, gstream_t, node));
        rlqs_gone(RLS_CONTAINER_OF(n, gstream_t, node));
    }
    c->g->stats.conns_open--;
    if (c->h2 != NULL) {
        nghttp2_session_del(c->h2);
        c->h2 = NULL;
    }
}

static int tls_ready(const gconn_t *c)
{
    return c->s.tls == NULL || rls_tls_conn_ready(c->s.tls);
}

/* Appends what nghttp2 has to send (up to about OUT_BATCH) to c->out;
 * under TLS encrypted, after whatever the TLS layer has to say itself
 * (its handshake, an alert), and nothing of nghttp2's before the
 * handshake is done. Returns 0, or a negative code when the connection
 * must close. */
static int draw(gconn_t *c)
{
    rl_buf_t *to = c->s.tls != NULL ? &c->g->plain : &c->out;
    const uint8_t *data;
    ssize_t n;
    int rc = 0;

    while (c->h2 != NULL && tls_ready(c) && rl_buf_len(to) < OUT_BATCH) {
        n = nghttp2_session_mem_send(c->h2, &data);
        if (n < 0) {
            rc = (int)n;
            break;
        }
        if (n == 0)
            break;
        if ((rc = rl_buf_append(to, data, (size_t)n)) != RL_OK)
            break;
    }
    if (c->s.tls == NULL)
        return rc;
    if (rc == 0 && rl_buf_len(to) > 0)
        rc = rls_tls_conn_write(c->s.tls, rl_buf_rptr(to), rl_buf_len(to));
    rl_buf_reset(to);
    if (rc == 0)
        rc = rls_tls_conn_take(c->s.tls, &c->out);
    return rc;
}

/* Ends a connection now: GOAWAY with `code` when it can go out without
 * waiting (no write in flight), then close. */
static void conn_drop(gconn_t *c, uint32_t code)
{
    if (c->s.closing)
        return;
    if (c->h2 != NULL && !c->writing) {
        if (tls_ready(c))
            nghttp2_session_terminate_session(c->h2, code);
        draw(c);
        rls_stream_try_write(&c->s, rl_buf_rptr(&c->out),
                             rl_buf_len(&c->out));
    }
    conn_close(c);
}

/* Closes a connection nghttp2 is done with (GOAWAY both ways, or after a
 * fatal error) once everything is written. */
static void maybe_finish(gconn_t *c)
{
    /* No session yet: mid-handshake. */
    if (c->s.closing || c->writing || rl_buf_len(&c->out) > 0 || c->h2 == NULL)
        return;
    if (!nghttp2_session_want_read(c->h2) && !nghttp2_session_want_write(c->h2))
        conn_close(c);
}

static void conn_send(gconn_t *c);

static void on_write(uv_write_t *req, int status)
{
    gconn_t *c = req->data;

    c->writing = 0;
    rl_buf_reset(&c->out);
    if (status < 0) {
        conn_close(c);
        return;
    }
    conn_send(c);
}

static void conn_send(gconn_t *c)
{
    if (c->s.closing)
        return;
    if (c->overflow) {
        /* Its answers pile up unsent: it is not reading them. */
        RLS_DEBUG("grpc: closing connection: unsent answers over "
                  "--max-output",
                  " bytes=%zu", c->owed_bytes + rl_buf_len(&c->out));
        c->g->stats.conns_output++;
        conn_drop(c, NGHTTP2_ENHANCE_YOUR_CALM);
        return;
    }
    if (c->writing)
        return;
    if (draw(c) != 0) {
        conn_close(c);
        return;
    }
    if (rl_buf_len(&c->out) == 0) {
        maybe_finish(c);
        return;
    }
    if (rls_stream_write_now(&c->s, &c->out) != 0) {
        conn_close(c);
        return;
    }
    if (rl_buf_len(&c->out) == 0) {
        /* More may wait inside nghttp2 (past OUT_BATCH); under TLS it
         * waits for the handshake, which input moves on. */
        if (c->h2 != NULL && tls_ready(c) && nghttp2_session_want_write(c->h2))
            mark_dirty(c);
        else
            maybe_finish(c);
        return;
    }
    c->writing = 1;
    c->write_ms = uv_now(c->g->loop);
    if (rls_stream_write_queued(&c->s, &c->wreq, &c->out, on_write) != 0) {
        c->writing = 0;
        conn_close(c);
    }
}

/* ------------------------------------------------------------------------ */
/* Input, within each connection's budget */

static void on_alloc(uv_handle_t *h, size_t hint, uv_buf_t *buf)
{
    gconn_t *c = h->data;
    uint8_t *p = rls_streams_rbuf(&c->g->set);

    (void)hint;
    buf->base = (char *)p;
    buf->len = p != NULL ? READ_CHUNK : 0;
}

static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf);

/* Keeps the loop from blocking in poll while connections wait to be read
 * again; resume() stops it. */
static void on_spin(uv_idle_t *h)
{
    (void)h;
}

static void start_reading(gconn_t *c)
{
    if (c->ended)
        return;
    if (rls_stream_read_start(&c->s, on_alloc, on_read) != 0)
        conn_close(c);
}

static void stop_reading(gconn_t *c)
{
    rls_stream_read_stop(&c->s);
}

/* A new round starts the connection's budget afresh. */
static void budget_start(gconn_t *c)
{
    if (c->gen != c->g->gen) {
        c->gen = c->g->gen;
        c->fed = 0;
        c->decoded = 0;
    }
}

static size_t feed_budget(const gconn_t *c)
{
    return c->strikes > 0 && c->g->feed_budget > STRUCK_FEED_BUDGET
               ? STRUCK_FEED_BUDGET
               : c->g->feed_budget;
}

static int over_budget(const gconn_t *c)
{
    return c->fed >= feed_budget(c) || c->decoded >= c->g->decode_budget;
}

/* Not read again before the next round. */
static void defer(gconn_t *c)
{
    rls_grpc_t *g = c->g;

    stop_reading(c);
    if (!rls_list_linked(&c->resume)) {
        rls_list_push(&g->resume, &c->resume);
        g->stats.reads_deferred++;
    }
    uv_idle_start(&g->spin, on_spin);
}

/* Hands p[0, n) to nghttp2 (p may be NULL when n is 0), as much as the
 * round's feed budget allows. Returns the bytes it took: all of them, or
 * fewer when a header callback paused it over the decode budget or the
 * feed budget ran out (c->paused either way: the rest waits for the next
 * round). After a connection error (nghttp2's, or one of ours that ended
 * the connection) it has taken everything, and the connection reads no
 * more. */
static size_t feed(gconn_t *c, const uint8_t *p, size_t n)
{
    size_t budget = feed_budget(c), m = n;
    ssize_t rc;

    c->paused = 0;
    if (c->fed >= budget)
        m = 0;
    else if (n > budget - c->fed)
        m = budget - c->fed;
    rc = nghttp2_session_mem_recv(c->h2, p, m);
    mark_dirty(c);
    if (rc < 0) {
        /* A connection error nghttp2 could not answer itself (bad client
         * preface, a flood): GOAWAY and close once it is written. */
        RLS_DEBUG("grpc: connection error", " err=\"%s\"",
                  nghttp2_strerror((int)rc));
        c->g->stats.conns_protocol++;
        nghttp2_session_terminate_session(c->h2, NGHTTP2_PROTOCOL_ERROR);
        c->ended = 1;
    }
    if (c->ended) {
        c->paused = 0;
        stop_reading(c);
        return n;
    }
    c->fed += (size_t)rc;
    if ((size_t)rc < n)
        c->paused = 1;
    return (size_t)rc;
}

/* nghttp2 paused: what it did not take of a read (maybe nothing) waits
 * for the next round; counted with the request bodies, and the
 * connection is closed rather than pass --max-partial-bytes. */
static void stash(gconn_t *c, const uint8_t *p, size_t n)
{
    rls_grpc_t *g = c->g;
    uint64_t cap = g->set.opts.max_input;

    if (n == 0) {
        defer(c);
        return;
    }
    if ((cap > 0 && g->held + n > cap) || (c->stash = malloc(n)) == NULL) {
        RLS_DEBUG("grpc: closing connection: input memory full", " held=%llu",
                  (unsigned long long)g->held);
        g->stats.conns_memory++;
        conn_drop(c, NGHTTP2_ENHANCE_YOUR_CALM);
        return;
    }
    memcpy(c->stash, p, n);
    c->stash_len = n;
    c->stash_off = 0;
    g->held += n;
    defer(c);
}

/* A plaintext client on the TLS port is told so in its own protocol,
 * as far as it can be: an h2c client (its preface) gets a GOAWAY whose
 * debug data says it (alone, not after SETTINGS: then gRPC clients fail
 * the call at once rather than retry the connection until the deadline),
 * an HTTP/1 one a 400. Returns the notice for p[0, n), its first read
 * (built in goaway[NOTICE_GOAWAY]), with *len, or NULL for none. */
#define NOT_TLS_WHY "this port speaks TLS (gRPC over h2)"
#define NOTICE_GOAWAY (9 + 8 + sizeof(NOT_TLS_WHY) - 1)
static const void *not_tls_notice(const uint8_t *p, size_t n,
                                  uint8_t goaway[NOTICE_GOAWAY], size_t *len)
{
    static const char h1[] = "HTTP/1.1 400 Bad Request\r\nConnection: close\r\n"
                             "Content-Type: text/plain\r\nContent-Length: 36"
                             "\r\n\r\n" NOT_TLS_WHY "\n";
    size_t plen = 8 + sizeof(NOT_TLS_WHY) - 1;

    if (n >= 4 && memcmp(p, "PRI ", 4) == 0) {
        memset(goaway, 0, NOTICE_GOAWAY);
        goaway[0] = (uint8_t)(plen >> 16);
        goaway[1] = (uint8_t)(plen >> 8);
        goaway[2] = (uint8_t)plen;
        goaway[3] = NGHTTP2_GOAWAY;
        goaway[9 + 7] = NGHTTP2_PROTOCOL_ERROR;
        memcpy(goaway + 17, NOT_TLS_WHY, sizeof(NOT_TLS_WHY) - 1);
        *len = NOTICE_GOAWAY;
        return goaway;
    }
    if (n >= 1 && p[0] >= 'A' && p[0] <= 'Z') {
        *len = sizeof(h1) - 1;
        return h1;
    }
    return NULL;
}

/* The handshake failed (or `why` ends it: the client went, its deadline
 * passed): counted, logged within the rate cap, the client told what can
 * be told unless a write is in flight (TLS's alert; for plaintext, p[0,
 * n) its first read) and closed. */
static void tls_failed(gconn_t *c, rls_tls_reason_t reason, const char *why,
                       const uint8_t *p, size_t n)
{
    uint8_t goaway[NOTICE_GOAWAY];
    size_t len = 0;
    const void *notice = not_tls_notice(p, n, goaway, &len);

    rls_stream_tls_failed(&c->s, reason, why, notice, len,
                          c->writing ? RLS_STREAM_QUIET : 0);
    conn_close(c);
}

/* Feeds nghttp2 the plaintext the TLS layer holds, as reads would be:
 * within the round's budget (past it the connection is deferred, and
 * resume() comes back here before reading again), what nghttp2 paused
 * on stashed. */
static void tls_drain(gconn_t *c)
{
    rls_grpc_t *g = c->g;
    size_t took;
    int n;

    while (!c->s.closing && !c->ended && rls_tls_conn_ready(c->s.tls)) {
        if (over_budget(c)) {
            defer(c);
            return;
        }
        if (g->pbuf == NULL && (g->pbuf = malloc(READ_CHUNK)) == NULL) {
            conn_close(c);
            return;
        }
        n = rls_tls_conn_read(c->s.tls, g->pbuf, READ_CHUNK);
        if (n == 0)
            return;
        if (n < 0) {
            /* close_notify is the client's end of file; anything else a
             * broken record, which no request can follow. */
            if (n != RL_ECLOSED)
                RLS_DEBUG("grpc: TLS connection failed", " err=\"%s\"",
                          rls_tls_conn_why(c->s.tls));
            conn_close(c);
            return;
        }
        took = feed(c, g->pbuf, (size_t)n);
        if (c->s.closing || c->ended)
            return;
        if (c->paused) {
            stash(c, g->pbuf + took, (size_t)n - took);
            return;
        }
    }
}

/* TLS: what was read is ciphertext for the TLS layer, which may answer
 * (its handshake) and give plaintext for nghttp2. */
static void tls_in(gconn_t *c, const uint8_t *p, size_t n)
{
    rls_grpc_t *g = c->g;
    int rc = rls_stream_tls_feed(&c->s, p, n);

    if (rc < 0) {
        tls_failed(c, RLS_TLS_OK, NULL, p, n);
        return;
    }
    if (rc == 1) {
        c->active_ms = uv_now(g->loop);
        if (h2_start(c) != 0) {
            conn_close(c);
            return;
        }
    }
    mark_dirty(c);
    tls_drain(c);
}

static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
    gconn_t *c = s->data;
    size_t took;

    if (nread == 0)
        return;
    if (nread < 0) {
        if (rls_stream_handshaking(&c->s)) {
            tls_failed(c, RLS_TLS_CLOSED,
                       "TLS handshake: the client closed the connection "
                       "midway",
                       NULL, 0);
            return;
        }
        /* The client went: answers still due are dropped when they
         * come. */
        conn_close(c);
        return;
    }
    budget_start(c);
    if (c->s.tls != NULL) {
        tls_in(c, (const uint8_t *)buf->base, (size_t)nread);
        return;
    }
    if (rls_stream_plain_hello(&c->s, (const uint8_t *)buf->base,
                               (size_t)nread)) {
        conn_close(c);
        return;
    }
    took = feed(c, (const uint8_t *)buf->base, (size_t)nread);
    if (c->s.closing || c->ended)
        return;
    if (c->paused)
        stash(c, (const uint8_t *)buf->base + took, (size_t)nread - took);
    else if (over_budget(c))
        defer(c);
}

/* A new round: connections deferred in the last one go on, nghttp2
 * first if it paused, and read again unless that took their budget
 * again. */
static void resume(rls_grpc_t *g)
{
    rls_list_t todo;

    rls_list_init(&todo);
    while (!rls_list_empty(&g->resume)) {
        rls_list_t *n = g->resume.next;
        rls_list_remove(n);
        rls_list_push(&todo, n);
    }
    while (!rls_list_empty(&todo)) {
        gconn_t *c = RLS_CONTAINER_OF(todo.next, gconn_t, resume);
        rls_list_remove(&c->resume);
        budget_start(c);
        if (c->paused) {
            size_t left = c->stash_len - c->stash_off;
            c->stash_off += feed(
                c, c->stash != NULL ? c->stash + c->stash_off : NULL, left);
            if (!c->ended && c->paused) {
                defer(c);
                continue;
            }
            unstash(c);
        }
        if (c->ended)
            continue;
        /* Plaintext may wait inside TLS, with no read to bring it. */
        if (c->s.tls != NULL) {
            tls_drain(c);
            if (c->s.closing || c->ended || rls_list_linked(&c->resume))
                continue;
        }
        if (over_budget(c))
            defer(c);
        else
            start_reading(c);
    }
    if (rls_list_empty(&g->resume))
        uv_idle_stop(&g->spin);
}

void rls_grpc_flush(rls_grpc_t *g)
{
    g->gen++;
    resume(g);
    while (!rls_list_empty(&g->dirty)) {
        gconn_t *c = RLS_CONTAINER_OF(g->dirty.next, gconn_t, dirty);
        rls_list_remove(&c->dirty);
        conn_send(c);
    }
}

/* ------------------------------------------------------------------------ */
/* Accepting */

/* Closes the connection that has done least, to make room for a new one
 * (not `keep`): the oldest that never completed a request, else the
 * least recently active one with no call at the store. Returns 1 if one
 * was closed. */
static int evict_one(rls_grpc_t *g, const gconn_t *keep)
{
    gconn_t *v = NULL;
    rls_list_t *n;

    for (n = g->fresh.next; v == NULL && n != &g->fresh; n = n->next)
        if (n != &keep->node)
            v = RLS_CONTAINER_OF(n, gconn_t, node);
    for (n = g->proven.next; v == NULL && n != &g->proven; n = n->next) {
        gconn_t *c = RLS_CONTAINER_OF(n, gconn_t, node);
        if (c->at_server == 0)
            v = c;
    }
    if (v == NULL)
        return 0;
    RLS_DEBUG("grpc: connection evicted for a new one", " proven=%u",
              (unsigned)v->proven);
    g->stats.conns_evicted++;
    conn_drop(v, NGHTTP2_NO_ERROR);
    return 1;
}

/* The connection's HTTP/2 session and our SETTINGS, queued to go first.
 * Under TLS only once the handshake is done: a client that never
 * finishes its handshake should not hold a session's memory (issue 40).
 * Returns 0 or nghttp2's error. */
static int h2_start(gconn_t *c)
{
    rls_grpc_t *g = c->g;
    nghttp2_settings_entry iv[3];
    int rc;

    if ((rc = nghttp2_session_server_new2(&c->h2, g->cbs, c, g->opt)) != 0)
        return rc;
    iv[0].settings_id = NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS;
    iv[0].value = g->max_streams;
    iv[1].settings_id = NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE;
    iv[1].value = RLS_GRPC_HEADERS_MAX;
    iv[2].settings_id = NGHTTP2_SETTINGS_ENABLE_PUSH;
    iv[2].value = 0;
    nghttp2_submit_settings(c->h2, NGHTTP2_FLAG_NONE, iv, 3);
    /* The connection's window: room for many streams' messages at once
     * (each stream keeps the default 64 KiB); memory is bounded by the
     * stream cap and --max-partial-bytes, not by flow control. */
    nghttp2_session_set_local_window_size(c->h2, NGHTTP2_FLAG_NONE, 0, 1 << 20);
    return 0;
}

void rls_grpc_accept(rls_grpc_t *g, uv_stream_t *l, int status)
{
    gconn_t *c;

    if (status < 0)
        return;
    if (rls_streams_handoff(&g->set, l))
        return; /* another loop serves it */
    if ((c = calloc(1, sizeof(*c))) == NULL ||
        rls_stream_init(&c->s, &g->set, c) != 0) {
        free(c);
        return;
    }
    c->wreq.data = c;
    c->g = g;
    g->nalloc++;
    rls_list_init(&c->node);
    rls_list_init(&c->dirty);
    rls_list_init(&c->resume);
    rls_list_init(&c->streams);
    rls_list_init(&c->owed);
    rl_buf_init(&c->out, 4 * OUT_BATCH);
    rls_list_push(&g->fresh, &c->node);
    g->stats.conns_open++;
    c->active_ms = c->s.accepted_ms;
    /* Under TLS, past the listener's caps on handshakes: closed before
     * anything is read (counted and logged by the TLS layer), after the
     * alert its TLS stack can read, and before it can evict anyone. */
    if (rls_stream_accept(&c->s, l) != 0 || rls_stream_tls_begin(&c->s) != 0) {
        conn_close(c);
        return;
    }
    if (c->s.tls == NULL && h2_start(c) != 0) {
        conn_close(c);
        return;
    }
    /* Full: the connection that has done least makes room, unless closed
     * ones still hold too much memory (their streams wait for the store):
     * a burst of evictions is bounded. */
    if (!g->stopping && g->stats.conns_open > g->set.opts.max_conns &&
        g->nalloc <= 2 * (size_t)g->set.opts.max_conns)
        evict_one(g, c);
    if ((g->stopping && !g->draining) ||
        g->stats.conns_open > g->set.opts.max_conns) {
        /* Refused: GOAWAY at once (REFUSED_STREAM's connection-level
         * cousin), then close once written. */
        g->stats.conns_refused++;
        if (c->s.tls != NULL) {
            /* No GOAWAY can go before a handshake: closed at once. */
            conn_close(c);
            return;
        }
        nghttp2_session_terminate_session(
            c->h2, g->stopping ? NGHTTP2_NO_ERROR : NGHTTP2_REFUSED_STREAM);
        c->goaway = 1;
        conn_send(c);
        if (!c->s.closing && !c->writing)
            conn_close(c);
        return;
    }
    g->stats.conns_accepted++;
    uv_tcp_nodelay(&c->s.tcp, 1);
    start_reading(c);
    if (!c->s.closing)
        mark_dirty(c);
}

static void on_connection(uv_stream_t *l, int status)
{
    rls_grpc_accept(l->data, l, status);
}

/* Waiting on the server (a call at the store, an answer to draw or
 * write, input deferred) rather than on its client: not idle. */
static int busy(const gconn_t *c)
{
    return c->at_server > 0 || !rls_list_empty(&c->owed) || c->writing ||
           rl_buf_len(&c->out) > 0 || c->paused;
}

/* The deadlines of one connection; it may be closed. */
static void sweep_conn(gconn_t *c, uint64_t now)
{
    rls_grpc_t *g = c->g;
    uint64_t idle = g->set.opts.idle_ms;
    uint64_t frame_ms = g->set.opts.frame_ms;
    rls_list_t *m;

    /* A TLS handshake not done in time: the connection holds memory (and
     * a place under --max-connections) for nothing. */
    if (rls_stream_handshaking(&c->s)) {
        if (rls_stream_handshake_late(&c->s, now,
                                      g->set.opts.handshake_ms))
            tls_failed(c, RLS_TLS_TIMEOUT,
                       "TLS handshake: not done within "
                       "--tls-handshake-timeout-ms",
                       NULL, 0);
        return;
    }
    /* A request not whole --frame-timeout-ms after its HEADERS (a client
     * trickling or stalling its body) is answered DEADLINE_EXCEEDED and
     * its buffer freed. */
    for (m = c->streams.next; frame_ms > 0 && m != &c->streams; m = m->next) {
        gstream_t *st = RLS_CONTAINER_OF(m, gstream_t, node);
        if (!st->started && !st->answered && !st->closed &&
            now - st->begin_ms >= frame_ms) {
            g->stats.streams_timeout++;
            msg_release(st);
            reply_status(st, RLS_GRPC_DEADLINE_EXCEEDED,
                         "request not completed within "
                         "--frame-timeout-ms");
        }
    }
    /* Answers its client has not taken in --frame-timeout-ms (a shut
     * window, or no reading): the connection goes, and its memory. */
    if (frame_ms > 0 &&
        ((!rls_list_empty(&c->owed) &&
          now - RLS_CONTAINER_OF(c->owed.next, gstream_t, owed)->answered_ms >=
              frame_ms) ||
         (c->writing && now - c->write_ms >= frame_ms))) {
        RLS_DEBUG("grpc: closing connection: answers not taken within "
                  "--frame-timeout-ms",
                  " bytes=%zu", c->owed_bytes + rl_buf_len(&c->out));
        g->stats.conns_output_timeout++;
        conn_drop(c, NGHTTP2_ENHANCE_YOUR_CALM);
        return;
    }
    if (idle == 0 || c->goaway || busy(c) || now - c->active_ms < idle)
        return;
    g->stats.conns_idle++;
    c->goaway = 1;
    nghttp2_session_terminate_session(c->h2, NGHTTP2_NO_ERROR);
    mark_dirty(c);
}

/* Once a second (connections and their streams are capped): requests
 * past --frame-timeout-ms, answers not taken within it, and idle
 * connections. */
static void on_sweep(rls_streams_t *set, uint64_t now)
{
    rls_grpc_t *g = RLS_CONTAINER_OF(set, rls_grpc_t, set);
    rls_list_t *lists[2] = {&g->fresh, &g->proven}, *n, *next;
    size_t i;

    for (i = 0; i < 2; i++)
        for (n = lists[i]->next; n != lists[i]; n = next) {
            /* Only the connection at hand may move (an answer drawn as
             * it is dropped: then it is closed), and next is taken
             * first. The requests the sweep answers are unfinished, which
             * is not activity. */
            gconn_t *c = RLS_CONTAINER_OF(n, gconn_t, node);
            next = n->next;
            sweep_conn(c, now);
        }
    rls_grpc_flush(g);
}

static const rls_frontend_ops_t grpc_ops;

int rls_grpc_start(rls_grpc_t **out, uv_loop_t *loop, const rls_grpc_opts_t *o,
                   rls_decider_t *decider, char *err, size_t errlen)
{
    rls_grpc_t *g;
    int rc;

    *out = NULL;
    if ((g = calloc(1, sizeof(*g))) == NULL) {
        snprintf(err, errlen, "--grpc: out of memory");
        return RL_ENOMEM;
    }
    g->fe.ops = &grpc_ops;
    g->fe.host = o->host;
    rls_streams_init(&g->set, loop, "grpc", "h2", READ_CHUNK);
    g->set.opts = o->stream;
    g->fe.plain = &g->set.plain;
    g->loop = loop;
    g->max_frame = o->max_frame;
    g->max_streams = o->max_streams;
    g->ctx.decider = decider;
    g->ctx.global_shadow = o->shadow_mode;
    g->ctx.global_quota = o->quota_mode;
    g->ctx.ref_headers = o->response_headers;
    g->ctx.response_metadata = o->response_metadata;
    g->feed_budget = FEED_BUDGET;
    g->decode_budget = DECODE_BUDGET;
    rls_list_init(&g->fresh);
    rls_list_init(&g->proven);
    rls_list_init(&g->dirty);
    rls_list_init(&g->resume);
    rls_list_init(&g->watches);
    rls_list_init(&g->rlqs_streams);
    g->hstatus = -1;
    rl_buf_init(&g->scratch, (size_t)o->max_frame * 4 + 65536);
    rl_buf_init(&g->plain, 4 * OUT_BATCH);
    if (nghttp2_session_callbacks_new(&g->cbs) != 0 ||
        nghttp2_option_new(&g->opt) != 0) {
        nghttp2_session_callbacks_del(g->cbs);
        rl_buf_free(&g->scratch);
        free(g);
        snprintf(err, errlen, "--grpc: out of memory");
        return RL_ENOMEM;
    }
    nghttp2_session_callbacks_set_on_begin_headers_callback(g->cbs,
                                                            on_begin_headers);
    nghttp2_session_callbacks_set_on_header_callback(g->cbs, on_header);
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(g->cbs, on_data);
    nghttp2_session_callbacks_set_on_frame_recv_callback(g->cbs, on_frame);
    nghttp2_session_callbacks_set_on_frame_send_callback(g->cbs, on_frame_sent);
    nghttp2_session_callbacks_set_on_stream_close_callback(g->cbs,
                                                           on_stream_close);
    uv_tcp_init(loop, &g->listener);
    g->listener.data = g;
    rls_streams_sweep_init(&g->set, g, on_sweep);
    uv_idle_init(loop, &g->spin);
    g->spin.data = g;
    uv_timer_init(loop, &g->health);
    g->health.data = g;
    /* A port below 0: no listener of its own (--threads: the first
     * loop's hands it connections, rls_frontend_ops_t.adopt). */
    rc = o->port < 0
             ? 0
             : rls_listen(&g->listener, o->host, o->port, 511, on_connection);
    if (rc != 0) {
        /* g goes when the three close callbacks have run. */
        g->freeing = 1;
        g->handles = 4;
        uv_close((uv_handle_t *)&g->listener, on_handle_closed);
        uv_close((uv_handle_t *)&g->set.sweep, on_handle_closed);
        uv_close((uv_handle_t *)&g->spin, on_handle_closed);
        uv_close((uv_handle_t *)&g->health, on_handle_closed);
        snprintf(err, errlen, "--grpc: cannot listen on %s:%d: %s",
                 o->host, o->port, uv_strerror(rc));
        return RL_EADDR;
    }
    if (o->port >= 0) {
        g->listening = 1;
        g->fe.port = rls_listen_port(&g->listener);
    }
    rls_streams_sweep_every(&g->set, 1000);
    uv_unref((uv_handle_t *)&g->health);
    *out = g;
    return 0;
}

void rls_grpc_set_conf(rls_grpc_t *g, rls_envoy_conf_t *conf)
{
    rls_envoy_conf_unref(g->ctx.conf);
    g->ctx.conf = conf;
}

void rls_grpc_set_estats(rls_grpc_t *g, struct rls_estats_s *t)
{
    g->ctx.estats = t;
}

void rls_grpc_set_tls(rls_grpc_t *g, rls_tls_t *tls)
{
    g->set.tls = tls;
    g->fe.tls = tls != NULL ? &g->set.tls_stats : NULL;
    g->fe.plain = tls != NULL ? NULL : &g->set.plain;
}

void rls_grpc_set_health(rls_grpc_t *g, rls_health_fn fn, void *arg)
{
    g->health_fn = fn;
    g->health_arg = arg;
}

void rls_grpc_set_rlqs(rls_grpc_t *g, rls_rlqs_t *q)
{
    g->rlqs = q;
}

rls_rlqs_t *rls_grpc_rlqs(const rls_grpc_t *g)
{
    return g->rlqs;
}

void rls_grpc_set_draining(rls_grpc_t *g, int draining)
{
    g->draining = draining;
    if (draining) {
        g->stopping = 1;
        /* Watch streams hear NOT_SERVING now, not at the next poll. */
        health_refresh(g);
    }
}

size_t rls_grpc_goaway(rls_grpc_t *g)
{
    rls_list_t *lists[2] = {&g->fresh, &g->proven}, *n;
    size_t count = 0, i;

    g->stopping = 1;
    g->draining = 0;
    if (g->listening) {
        g->listening = 0;
        uv_close((uv_handle_t *)&g->listener, NULL);
    }
    rls_list_t *next;

    for (i = 0; i < 2; i++)
        for (n = lists[i]->next; n != lists[i]; n = next) {
            gconn_t *c = RLS_CONTAINER_OF(n, gconn_t, node);
            next = n->next;
            if (c->goaway)
                continue;
            if (!tls_ready(c)) {
                /* Mid-handshake: nothing asked, nothing to answer. */
                conn_close(c);
                count++;
                continue;
            }
            c->goaway = 1;
            /* Graceful: the streams the client already opened are
             * answered; nghttp2 refuses new ones and stops reading once
             * they are done. */
            nghttp2_submit_goaway(
                c->h2, NGHTTP2_FLAG_NONE,
                nghttp2_session_get_last_proc_stream_id(c->h2),
                NGHTTP2_NO_ERROR, NULL, 0);
            mark_dirty(c);
            count++;
        }
    /* Watch streams would keep their connections open: each says
     * NOT_SERVING (if it has not yet) and ends. */
    health_refresh(g);
    for (n = g->watches.next; n != &g->watches; n = n->next)
        watch_end(RLS_CONTAINER_OF(n, gstream_t, wnode));
    /* So would RLQS streams: each ends UNAVAILABLE, and its Envoy
     * reconnects to another instance (its buckets leave the fleet now). */
    for (n = g->rlqs_streams.next; n != &g->rlqs_streams; n = next) {
        gstream_t *st = RLS_CONTAINER_OF(n, gstream_t, rnode);
        next = n->next;
        rlqs_end(st, RLS_GRPC_UNAVAILABLE, "server stopping");
        rlqs_gone(st);
    }
    rls_grpc_flush(g);
    return count;
}

int rls_grpc_idle(const rls_grpc_t *g)
{
    return g == NULL ||
           (rls_list_empty(&g->fresh) && rls_list_empty(&g->proven));
}

void rls_grpc_set_budget(rls_grpc_t *g, size_t feed, size_t decode)
{
    g->feed_budget = feed > 0 ? feed : 1;
    g->decode_budget = decode > 0 ? decode : 1;
}

void rls_grpc_close_all(rls_grpc_t *g)
{
    while (!rls_list_empty(&g->fresh))
        conn_close(RLS_CONTAINER_OF(g->fresh.next, gconn_t, node));
    while (!rls_list_empty(&g->proven))
        conn_close(RLS_CONTAINER_OF(g->proven.next, gconn_t, node));
}

static void maybe_free_grpc(rls_grpc_t *g)
{
    /* Connections closed but not yet freed still point here. */
    if (!g->freeing || g->handles > 0 || g->nalloc > 0)
        return;
    nghttp2_session_callbacks_del(g->cbs);
    nghttp2_option_del(g->opt);
    rls_envoy_conf_unref(g->ctx.conf);
    rl_buf_free(&g->scratch);
    rl_buf_free(&g->plain);
    rls_streams_free(&g->set);
    free(g->pbuf);
    free(g);
}

void rls_grpc_free(rls_grpc_t *g)
{
    uv_handle_t *hs[4];
    size_t i;

    if (g == NULL)
        return;
    rls_grpc_close_all(g);
    rls_rlqs_free(g->rlqs);
    g->rlqs = NULL;
    g->freeing = 1;
    g->handles = 0;
    hs[0] = (uv_handle_t *)&g->listener;
    hs[1] = (uv_handle_t *)&g->set.sweep;
    hs[2] = (uv_handle_t *)&g->spin;
    hs[3] = (uv_handle_t *)&g->health;
    for (i = 0; i < 4; i++)
        if (!uv_is_closing(hs[i])) {
            g->handles++;
            uv_close(hs[i], on_handle_closed);
        }
    if (g->handles == 0)
        maybe_free_grpc(g);
}

const rls_grpc_stats_t *rls_grpc_stats(const rls_grpc_t *g)
{
    return &g->stats;
}

rls_envoy_ctx_t *rls_grpc_envoy_ctx(rls_grpc_t *g)
{
    return &g->ctx;
}

const rls_envoy_stats_t *rls_grpc_envoy_stats(const rls_grpc_t *g)
{
    return &g->ctx.stats;
}

int rls_grpc_metrics(const rls_grpc_t *g, rl_buf_t *out)
{
    /* By grpc-status; the statuses never given are left out. */
    static const char *const codes[RLS_GRPC_CODES] = {
        [0] = "OK",
        [2] = "UNKNOWN",
        [3] = "INVALID_ARGUMENT",
        [4] = "DEADLINE_EXCEEDED",
        [8] = "RESOURCE_EXHAUSTED",
        [12] = "UNIMPLEMENTED",
        [13] = "INTERNAL",
        [14] = "UNAVAILABLE",
    };
    static const char *const descriptor_codes[] = {"unknown", "ok",
                                                   "over_limit"};
    static const char *const closes[] = {
        "idle",           "protocol", "headers",       "output",
        "output_timeout", "evicted",  "partial_memory"};
    const rls_grpc_stats_t *s = &g->stats;
    const rls_envoy_stats_t *e = &g->ctx.stats;
    const uint64_t closed[] = {s->conns_idle,           s->conns_protocol,
                               s->conns_headers,        s->conns_output,
                               s->conns_output_timeout, s->conns_evicted,
                               s->conns_memory};
    const rls_stream_metric_t m[] = {
        {"rl_grpc_calls_total", "counter",
         "gRPC calls of Envoy's ShouldRateLimit answered, by grpc-status.",
         s->calls, "status", codes, 0, RLS_GRPC_CODES},
        RLS_METRIC_ONE(
            "rl_grpc_http_errors_total", "counter",
            "gRPC-listener requests answered with an HTTP error (not gRPC: "
            "415).",
            s->http_errors),
        {"rl_grpc_descriptors_total", "counter",
         "Envoy descriptors answered, by code.", e->descriptors, "code",
         descriptor_codes, 1, 3},
        RLS_METRIC_ONE(
            "rl_grpc_descriptors_uncounted_total", "counter",
            "Envoy descriptors allowed without counting (no matching config, "
            "unlimited, mode off).",
            e->uncounted),
        RLS_METRIC_ONE("rl_grpc_unknown_domain_total", "counter",
                       "Calls whose domain has no --envoy-config.",
                       e->unknown_domain),
        RLS_METRIC_ONE("rl_grpc_connections_open", "gauge",
                       "gRPC connections open.", s->conns_open),
        RLS_METRIC_ONE("rl_grpc_connections_accepted_total", "counter",
                       "gRPC connections accepted.", s->conns_accepted),
        RLS_METRIC_ONE(
            "rl_grpc_connections_refused_total", "counter",
            "gRPC connections refused (over --max-connections with none to "
            "evict, or stopping).",
            s->conns_refused),
        {"rl_grpc_connections_closed_total", "counter",
         "gRPC connections the server ended, by reason.", closed, "reason",
         closes, 0, sizeof(closed) / sizeof(closed[0])},
        RLS_METRIC_ONE("rl_grpc_streams_refused_total", "counter",
                       "Streams refused over --grpc-max-streams.",
                       s->streams_refused),
        RLS_METRIC_ONE("rl_grpc_streams_reset_total", "counter",
                       "Streams the client reset before their answer.",
                       s->streams_reset),
        RLS_METRIC_ONE("rl_grpc_streams_timeout_total", "counter",
                       "Requests not whole within --frame-timeout-ms "
                       "(DEADLINE_EXCEEDED).",
                       s->streams_timeout),
        RLS_METRIC_ONE(
            "rl_grpc_streams_shed_total", "counter",
            "Requests refused because the bodies buffered by all streams "
            "reached --max-partial-bytes.",
            s->streams_shed),
        RLS_METRIC_ONE("rl_grpc_streams_oversized_total", "counter",
                       "Streams reset because their header list passed 8 KiB.",
                       s->streams_oversized),
        RLS_METRIC_ONE(
            "rl_grpc_reads_deferred_total", "counter",
            "Times a connection was not read again until the next round, "
            "over its per-round budget.",
            s->reads_deferred),
        RLS_METRIC_ONE("rl_grpc_health_checks_total", "counter",
                       "grpc.health.v1 Check calls answered.",
                       s->health_checks),
        RLS_METRIC_ONE("rl_grpc_health_watches_total", "counter",
                       "grpc.health.v1 Watch streams started.",
                       s->health_watches),
        RLS_METRIC_ONE("rl_grpc_health_watches_open", "gauge",
                       "grpc.health.v1 Watch streams open.", s->watches_open),
        RLS_METRIC_ONE(
            "rl_grpc_health_watches_refused_total", "counter",
            "Watch streams refused: 16 open on the connection or 4096 in "
            "all.",
            s->watches_refused),
        RLS_METRIC_ONE(
            "rl_grpc_input_bytes", "gauge",
            "Request bytes buffered by gRPC streams, and input deferred to "
            "the next round.",
            g->held),
        RLS_METRIC_ONE("rl_grpc_output_bytes", "gauge",
                       "Memory held by gRPC answers not yet sent.", g->owed),
    };
    int rc = rls_stream_metrics(out, m, sizeof(m) / sizeof(m[0]));

    if (rc == 0 && g->rlqs != NULL) {
        rc = rls_prom_counter(out, "rl_rlqs_streams_reset_total",
                              "RLQS streams reset: their client did not "
                              "take 256 KiB of responses.",
                              g->rlqs_reset);
        if (rc == 0)
            rc = rls_rlqs_metrics(g->rlqs, out);
    }
    return rc;
}

/* ---- the front end -------------------------------------------------- */

static rls_grpc_t *grpc_of(const rls_frontend_t *fe)
{
    return RLS_CONTAINER_OF(fe, rls_grpc_t, fe);
}

static void fe_flush(rls_frontend_t *fe)
{
    rls_grpc_flush(grpc_of(fe));
}

static void fe_drain(rls_frontend_t *fe)
{
    rls_grpc_set_draining(grpc_of(fe), 1);
}

static size_t fe_goaway(rls_frontend_t *fe)
{
    return rls_grpc_goaway(grpc_of(fe));
}

static int fe_busy(const rls_frontend_t *fe)
{
    return !rls_grpc_idle(grpc_of(fe));
}

static void fe_close_all(rls_frontend_t *fe)
{
    rls_grpc_close_all(grpc_of(fe));
}

static void fe_free(rls_frontend_t *fe)
{
    rls_grpc_free(grpc_of(fe));
}

static int fe_metrics(const rls_frontend_t *fe, rl_buf_t *out)
{
    return rls_grpc_metrics(grpc_of(fe), out);
}

static void adopt_accept(void *arg)
{
    rls_grpc_accept(arg, NULL, 0);
}

static void fe_adopt(rls_frontend_t *fe, int fd)
{
    rls_grpc_t *g = grpc_of(fe);

    rls_streams_adopt(&g->set, fd, adopt_accept, g);
}

static rls_streams_t *fe_streams(rls_frontend_t *fe)
{
    return &grpc_of(fe)->set;
}

/* No resume: a round's flush lets deferred connections go on. */
static const rls_frontend_ops_t grpc_ops = {
    .flag = "grpc",
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

rls_frontend_t *rls_grpc_frontend(rls_grpc_t *g)
{
    return &g->fe;
}
