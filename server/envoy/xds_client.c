/* rl-server's xDS client for its Envoy rate limit configuration; see
 * xds_client.h. */
#include "envoy/xds_client.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <nghttp2/nghttp2.h>
#include <openssl/err.h>
#include <openssl/ssl.h>

#include "envoy/service/discovery/v3/discovery.pb-c.h"
#include "base/log.h"
#include "base/ossl.h"
#include "net/tls.h"
#include "rl_error.h"
#include "rl_frame.h"

#define ADS_PATH                                                               \
    "/envoy.service.discovery.v3.AggregatedDiscoveryService/"                  \
    "StreamAggregatedResources"
#define CONNECT_MS 5000
/* Above the 5 minutes gRPC servers (grpc-go, C-core) enforce between a
 * client's PINGs by default: more often, they close the connection. */
#define PING_MS 330000
#define KEEPALIVE_S 30
#define READ_CHUNK 65536
/* A NACK's error_detail: the loader's first messages, cut here. */
#define NACK_MAX 4096
/* Requests queued for nghttp2, and bytes drawn from it per write. Both
 * small: the client sends a request per response and PINGs. */
#define REQS_MAX (64u << 10)
#define OUT_MAX (1u << 20)
/* A header block from the control plane, measured as decoded (RFC 9113:
 * name, value and 32 a field, so an HPACK reference counts what it
 * expands to), and advertised as SETTINGS_MAX_HEADER_LIST_SIZE. A gRPC
 * response's headers and trailers are a few hundred bytes; 16 KiB leaves
 * room for a grpc-status-details-bin. */
#define HEADERS_MAX (16u << 10)
/* Header blocks a stream may carry: the response's headers, its trailers
 * and room for two informational (1xx) answers before them. */
#define HEADER_BLOCKS_MAX 4
/* CONTINUATION frames after a HEADERS frame (nghttp2's default: 8): a
 * block of HEADERS_MAX fits in two frames of the default size. */
#define CONTINUATIONS_MAX 4
/* Builds start at least this far apart: at most 4 configurations go in
 * force a second, however fast the control plane sends them (each
 * install drops what the old configuration had learnt, the refusal cache
 * among it). A version that comes sooner waits, a newer one replacing it:
 * the last one wins. */
#define BUILD_GAP_MS 250

enum { T_IDLE, T_BACKOFF, T_CONNECT, T_PING };

struct rls_xds_conn_s {
    rls_xds_t *x; /* NULL once dropped */
    uv_tcp_t tcp;
    uv_connect_t creq;
    uv_write_t wreq;
    nghttp2_session *h2;
    int32_t sid;
    rl_buf_t in;   /* the gRPC message being received */
    rl_buf_t reqs; /* framed DiscoveryRequests nghttp2 has not taken */
    rl_buf_t out;  /* bytes being written */
    uint64_t gen;
    int up; /* connected and HTTP/2 set up */
    int writing;
    int deferred; /* the stream's data source waits for reqs */
    int failed;   /* a callback found the connection unusable */
    int ping_out; /* a PING not answered yet */
    int grpc_status;
    size_t hdr_bytes;     /* of the header block being received */
    unsigned hdr_blocks;  /* header blocks received on the stream */
    const char *fail_why; /* why failed was set, for the log */
    rls_tls_conn_t *tls; /* with TLS (net/tls.h's client side) */
};

static void retry_later(rls_xds_t *x);
static void build_soon(rls_xds_t *x);
static void conn_send(rls_xds_conn_t *c);
static void on_timer(uv_timer_t *t);

/* ---- The connection's life ---- */

static void on_tcp_closed(uv_handle_t *h)
{
    rls_xds_conn_t *c = h->data;

    rl_buf_free(&c->in);
    rl_buf_free(&c->reqs);
    rl_buf_free(&c->out);
    rls_tls_conn_free(c->tls);
    free(c);
}

/* Drops x's connection (logged with why) and schedules the next one. */
static void conn_drop(rls_xds_t *x, const char *why)
{
    rls_xds_conn_t *c = x->c;

    if (c == NULL)
        return;
    x->c = NULL;
    c->x = NULL;
    if (c->up) {
        x->stats.disconnects++;
        RLS_WARN("xds: connection lost", " server=%s:%d why=\"%s\"", x->o.host,
                 x->o.port, why);
    } else {
        RLS_WARN("xds: cannot connect", " server=%s:%d why=\"%s\"", x->o.host,
                 x->o.port, why);
    }
    x->stats.connected = 0;
    if (c->h2 != NULL) {
        nghttp2_session_del(c->h2);
        c->h2 = NULL;
    }
    uv_timer_stop(&x->timer);
    x->timer_state = T_IDLE;
    uv_close((uv_handle_t *)&c->tcp, on_tcp_closed);
    retry_later(x);
}

/* ---- Requests ---- */

/* Queues one DiscoveryRequest: version (NULL: none in force), nonce (NULL
 * on a stream's first), and err for a NACK. Returns 0 or an RL_E* code. */
static int queue_request(rls_xds_conn_t *c, const char *version,
                         const char *nonce, const char *err)
{
    rls_xds_t *x = c->x;
    Envoy__Service__Discovery__V3__DiscoveryRequest r;
    Envoy__Config__Core__V3__Node node;
    Google__Rpc__Status st;
    uint8_t *p;
    size_t n;
    int rc;

    envoy__service__discovery__v3__discovery_request__init(&r);
    envoy__config__core__v3__node__init(&node);
    node.id = (char *)x->o.node_id;
    node.user_agent_name = (char *)"rl-server";
    r.node = &node;
    r.version_info = (char *)(version != NULL ? version : "");
    r.response_nonce = (char *)(nonce != NULL ? nonce : "");
    r.type_url = (char *)RLS_XDS_TYPE_URL;
    if (err != NULL) {
        google__rpc__status__init(&st);
        st.code = 3; /* INVALID_ARGUMENT */
        st.message = (char *)err;
        r.error_detail = &st;
    }
    n = envoy__service__discovery__v3__discovery_request__get_packed_size(&r);
    if ((rc = rl_frame_reserve(&c->reqs, n, &p)) != RL_OK)
        return rc;
    envoy__service__discovery__v3__discovery_request__pack(&r, p);
    rl_frame_commit(&c->reqs, n);
    if (c->deferred && c->h2 != NULL) {
        c->deferred = 0;
        nghttp2_session_resume_data(c->h2, c->sid);
    }
    return RL_OK;
}

/* The stream's body: the queued requests, never its end. */
static ssize_t read_reqs(nghttp2_session *s, int32_t sid, uint8_t *buf,
                         size_t len, uint32_t *flags, nghttp2_data_source *src,
                         void *ud)
{
    rls_xds_conn_t *c = ud;
    size_t n = rl_buf_len(&c->reqs);

    (void)s;
    (void)sid;
    (void)flags;
    (void)src;
    if (n == 0) {
        c->deferred = 1;
        return NGHTTP2_ERR_DEFERRED;
    }
    if (n > len)
        n = len;
    memcpy(buf, rl_buf_rptr(&c->reqs), n);
    rl_buf_consume(&c->reqs, n);
    return (ssize_t)n;
}

/* Sends the answer to a response built (ok) or refused, when it came on
 * the connection still up. */
static void answer(rls_xds_t *x, uint64_t gen, const char *version,
                   const char *nonce, const char *err)
{
    rls_xds_conn_t *c = x->c;

    if (c == NULL || c->gen != gen || !c->up)
        return;
    if (queue_request(c, version, nonce, err) != RL_OK) {
        conn_drop(x, "requests pile up unsent");
        return;
    }
    conn_send(c);
}

/* ---- Responses ---- */

/* The first messages of d, one per line, cut to NACK_MAX. */
static void diag_text(const rls_diag_t *d, char *buf, size_t len)
{
    size_t i, n = 0;

    buf[0] = 0;
    for (i = 0; i < d->n && n + 1 < len; i++) {
        int k = snprintf(buf + n, len - n, "%s%s", i ? "\n" : "", d->msg[i]);
        if (k < 0)
            break;
        n += (size_t)k < len - n ? (size_t)k : len - n - 1;
    }
    if (d->dropped > 0 && n + 1 < len)
        snprintf(buf + n, len - n, "\n(%zu more)", d->dropped);
}

static void rb_start(rls_rebuild_t *rb)
{
    rls_xds_t *x = rb->arg;

    x->last_build_ms = uv_now(x->loop);
    x->built_once = 1;
    x->has_building = x->has_pending;
    if (x->has_pending) {
        x->building = x->pending; /* the bytes move, no copy */
        x->building_gen = x->pending_gen;
        rl_buf_init(&x->pending, RLS_XDS_MSG_MAX + 5);
        x->has_pending = 0;
    }
    x->bversion = NULL;
    x->bnonce = NULL;
    x->built = NULL;
    x->decode_rc = RL_OK;
    x->decode_err[0] = 0;
    x->build_rc = RL_OK;
}

/* On the rebuild's thread: the message decoded and turned into YAML, the
 * YAML built, and everything but the version, the nonce and what was
 * built freed here too. */
static void rb_work(rls_rebuild_t *rb)
{
    rls_xds_t *x = rb->arg;
    rls_xds_update_t u;
    rl_frame_t f;

    if (!x->has_building)
        return;
    /* on_data kept exactly one whole frame, its header checked */
    (void)rl_frame_decode(rl_buf_rptr(&x->building), rl_buf_len(&x->building),
                          RLS_XDS_MSG_MAX, &f);
    x->decode_rc = rls_xds_update_decode(f.payload, f.len, &u, x->decode_err,
                                         sizeof(x->decode_err));
    rl_buf_free(&x->building);
    if (x->decode_rc == RL_OK)
        x->build_rc = rls_xds_update_build(&u, &x->built, &x->diag);
    x->bversion = u.version;
    x->bnonce = u.nonce;
    u.version = NULL;
    u.nonce = NULL;
    rls_xds_update_free(&u);
}

/* On the loop: what the message built into (or why it did not) goes in
 * force and is answered, on the connection it came on if still up. */
static void rb_done(rls_rebuild_t *rb, int closing)
{
    rls_xds_t *x = rb->arg;
    const char *ver;
    char *why;

    if (!x->has_building)
        return;
    x->has_building = 0;
    rl_buf_free(&x->building); /* when work did not run */
    ver = x->bversion != NULL ? x->bversion : "";
    if (closing)
        goto done;
    if (x->decode_rc == RL_EDECODE || x->decode_rc == RL_ENOMEM) {
        /* Nothing to ACK or NACK: the connection goes, as for a
         * compressed or oversized message. */
        RLS_ERROR("xds: response is not a DiscoveryResponse", NULL);
        if (x->c != NULL && x->c->gen == x->building_gen)
            conn_drop(x, "response is not a DiscoveryResponse");
        goto done;
    }
    x->backoff_ms = x->o.backoff_min_ms; /* the control plane is fine */
    if (x->decode_rc == RL_EINVAL) {
        x->stats.rejected++;
        RLS_ERROR("xds: configuration refused, the one in force kept",
                  " version=\"%s\" why=\"%s\"", ver, x->decode_err);
        answer(x, x->building_gen, x->version, x->bnonce, x->decode_err);
        goto done;
    }
    if (x->build_rc == RL_OK) {
        char *v = strdup(ver);
        if (v == NULL) {
            x->build_rc = RL_ENOMEM;
        } else {
            free(x->version);
            x->version = v;
            x->stats.accepted++;
            RLS_INFO("xds: configuration in force",
                     " version=\"%s\" domains=%zu nodes=%zu", x->version,
                     rls_envoy_conf_domains(x->built),
                     rls_envoy_conf_nodes(x->built));
            x->install(x->arg, x->built);
            x->built = NULL;
            answer(x, x->building_gen, x->version, x->bnonce, NULL);
        }
    }
    if (x->build_rc != RL_OK) {
        x->stats.rejected++;
        if ((why = malloc(NACK_MAX)) != NULL) {
            if (x->build_rc == RL_EINVAL)
                diag_text(&x->diag, why, NACK_MAX);
            else
                snprintf(why, NACK_MAX, "%s", rl_strerror(x->build_rc));
            RLS_ERROR("xds: configuration refused, the one in force kept",
                      " version=\"%s\" errors=%zu first=\"%s\"", ver,
                      x->diag.n + x->diag.dropped,
                      x->build_rc == RL_EINVAL && x->diag.n > 0 ? x->diag.msg[0]
                                                                : why);
            answer(x, x->building_gen, x->version, x->bnonce, why);
            free(why);
        }
    }
done:
    rls_envoy_conf_unref(x->built);
    x->built = NULL;
    free(x->bversion);
    free(x->bnonce);
    x->bversion = NULL;
    x->bnonce = NULL;
}

static void on_pace(uv_timer_t *t)
{
    rls_xds_t *x = t->data;

    x->pacing = 0;
    build_soon(x);
}

/* Asks for the build of the pending version: now, or BUILD_GAP_MS after
 * the last build started (the pace timer asks again then). A build still
 * running when it is asked for is followed by this one. */
static void build_soon(rls_xds_t *x)
{
    uint64_t now = uv_now(x->loop), due = x->last_build_ms + BUILD_GAP_MS;

    if (x->pacing || x->closing || !x->has_pending)
        return;
    if (x->built_once && now < due) {
        x->pacing = 1;
        uv_timer_start(&x->pace, on_pace, due - now, 0);
        return;
    }
    if (rls_rebuild_request(&x->rb) != 0)
        RLS_ERROR("xds: cannot start a build thread", NULL);
}

/* One whole message of the stream, in c->in: its bytes are all the loop
 * keeps (decoded, converted and built on the rebuild's thread). A newer
 * one replaces one still waiting, which is then neither ACKed nor NACKed
 * (the answer to the newer names its nonce: xDS answers the newest
 * response), nor even decoded. */
static void on_message(rls_xds_conn_t *c)
{
    rls_xds_t *x = c->x;

    if (x->has_pending) {
        x->stats.superseded++;
        rl_buf_free(&x->pending);
    }
    x->pending = c->in; /* the buffer moves; c->in starts a new one */
    rl_buf_init(&c->in, RLS_XDS_MSG_MAX + 5);
    x->has_pending = 1;
    x->pending_gen = c->gen;
    build_soon(x);
}

static int on_data(nghttp2_session *s, uint8_t flags, int32_t sid,
                   const uint8_t *data, size_t len, void *ud)
{
    rls_xds_conn_t *c = ud;

    (void)s;
    (void)flags;
    if (sid != c->sid || c->x == NULL)
        return 0;
    while (len > 0) {
        rl_frame_t f;
        size_t have = rl_buf_len(&c->in), take, need;
        int rc;
        /* The 5-byte prefix first, then exactly the message it announces:
         * the length is checked before anything is kept for it. */
        if (have < RL_FRAME_HEADER)
            need = RL_FRAME_HEADER - have;
        else
            need = RL_FRAME_HEADER +
                   (size_t)rl_frame_length(rl_buf_rptr(&c->in)) - have;
        take = need < len ? need : len;
        if (rl_buf_append(&c->in, data, take) != RL_OK) {
            c->failed = 1;
            return NGHTTP2_ERR_CALLBACK_FAILURE;
        }
        data += take;
        len -= take;
        have = rl_buf_len(&c->in);
        if (have < RL_FRAME_HEADER)
            continue;
        rc = rl_frame_decode(rl_buf_rptr(&c->in), have, RLS_XDS_MSG_MAX, &f);
        if (rc == RL_EFRAMEFLAG || rc == RL_EFRAMESIZE) {
            RLS_ERROR("xds: response refused", " why=\"%s\" bytes=%" PRIu32,
                      rc == RL_EFRAMEFLAG ? "compressed" : "larger than 4 MiB",
                      rl_frame_length(rl_buf_rptr(&c->in)));
            c->failed = 1;
            return NGHTTP2_ERR_CALLBACK_FAILURE;
        }
        if (rc != RL_OK)
            continue;
        on_message(c);
    }
    return 0;
}

/* A header block that will not end: the control plane sends more than a
 * response needs (a block over HEADERS_MAX as decoded, or more than
 * HEADER_BLOCKS_MAX blocks on the stream). Failing the callback makes
 * nghttp2_session_mem_recv return at once, before it decodes one more
 * reference, and the connection is dropped and made again after the
 * backoff. */
static int headers_refused(rls_xds_conn_t *c, const char *why)
{
    if (c->x != NULL && !c->failed)
        c->x->stats.header_drops++;
    c->failed = 1;
    c->fail_why = why;
    return NGHTTP2_ERR_CALLBACK_FAILURE;
}

static int on_begin_headers(nghttp2_session *s, const nghttp2_frame *f,
                            void *ud)
{
    rls_xds_conn_t *c = ud;

    (void)s;
    c->hdr_bytes = 0;
    if (f->hd.stream_id == c->sid && ++c->hdr_blocks > HEADER_BLOCKS_MAX)
        return headers_refused(c, "too many header blocks on the stream");
    return 0;
}

static int on_header(nghttp2_session *s, const nghttp2_frame *f,
                     const uint8_t *name, size_t namelen, const uint8_t *value,
                     size_t valuelen, uint8_t flags, void *ud)
{
    rls_xds_conn_t *c = ud;

    (void)s;
    (void)flags;
    /* Every stream's fields count: only ours has any use for them. */
    c->hdr_bytes += namelen + valuelen + 32;
    if (c->hdr_bytes > HEADERS_MAX)
        return headers_refused(c, "header block larger than 16 KiB");
    if (f->hd.stream_id != c->sid)
        return 0;
    if (namelen == 7 && memcmp(name, ":status", 7) == 0 &&
        !(valuelen == 3 && memcmp(value, "200", 3) == 0) &&
        !(valuelen == 3 && value[0] == '1'))
        c->grpc_status = 14; /* UNAVAILABLE, as gRPC maps it */
    if (namelen == 11 && memcmp(name, "grpc-status", 11) == 0) {
        char v[12];
        size_t k = valuelen < sizeof(v) - 1 ? valuelen : sizeof(v) - 1;
        memcpy(v, value, k);
        v[k] = 0;
        c->grpc_status = atoi(v);
    }
    return 0;
}

static int on_frame(nghttp2_session *s, const nghttp2_frame *f, void *ud)
{
    rls_xds_conn_t *c = ud;

    (void)s;
    if (f->hd.type == NGHTTP2_PING && (f->hd.flags & NGHTTP2_FLAG_ACK))
        c->ping_out = 0;
    return 0;
}

static int on_stream_close(nghttp2_session *s, int32_t sid, uint32_t code,
                           void *ud)
{
    rls_xds_conn_t *c = ud;

    (void)s;
    if (sid == c->sid && c->x != NULL) {
        RLS_WARN("xds: stream ended", " grpc_status=%d h2_error=%" PRIu32,
                 c->grpc_status, code);
        c->failed = 1;
    }
    return 0;
}

/* ---- Bytes ---- */

static void on_write(uv_write_t *req, int status)
{
    rls_xds_conn_t *c = req->data;

    c->writing = 0;
    rl_buf_reset(&c->out);
    if (c->x == NULL)
        return; /* dropped: its close callback frees it */
    if (status < 0) {
        conn_drop(c->x, uv_strerror(status));
        return;
    }
    conn_send(c);
}

/* With TLS: moves the ciphertext waiting to out. */
static int tls_take(rls_xds_conn_t *c)
{
    return rls_tls_conn_take(c->tls, &c->out);
}

/* n bytes for the control plane, encrypted first with TLS. */
static int put_out(rls_xds_conn_t *c, const uint8_t *p, size_t n)
{
    int rc;

    if (c->tls == NULL)
        return rl_buf_append(&c->out, p, n);
    if ((rc = rls_tls_conn_write(c->tls, p, n)) != RL_OK)
        return rc;
    return tls_take(c);
}

/* Draws what nghttp2 has to send (and, during a TLS handshake, what the
 * handshake has) and writes it. */
static void conn_send(rls_xds_conn_t *c)
{
    uv_buf_t b;

    if (c->x == NULL || c->writing)
        return;
    if (c->tls != NULL && tls_take(c) != RL_OK) {
        conn_drop(c->x, "out of memory");
        return;
    }
    while (c->h2 != NULL && nghttp2_session_want_write(c->h2) &&
           rl_buf_len(&c->out) < OUT_MAX) {
        const uint8_t *data;
        ssize_t n = nghttp2_session_mem_send(c->h2, &data);
        if (n < 0) {
            conn_drop(c->x, nghttp2_strerror((int)n));
            return;
        }
        if (n == 0)
            break;
        if (put_out(c, data, (size_t)n) != RL_OK) {
            conn_drop(c->x, "out of memory");
            return;
        }
    }
    if (rl_buf_len(&c->out) == 0) {
        if (c->h2 != NULL && !nghttp2_session_want_read(c->h2) &&
            !nghttp2_session_want_write(c->h2))
            conn_drop(c->x, "the control plane ended the connection");
        return;
    }
    b = uv_buf_init((char *)rl_buf_rptr(&c->out),
                    (unsigned)rl_buf_len(&c->out));
    c->wreq.data = c;
    if (uv_write(&c->wreq, (uv_stream_t *)&c->tcp, &b, 1, on_write) != 0) {
        conn_drop(c->x, "write failed");
        return;
    }
    c->writing = 1;
}

static void on_alloc(uv_handle_t *h, size_t hint, uv_buf_t *b)
{
    static char buf[READ_CHUNK];

    (void)h;
    (void)hint;
    *b = uv_buf_init(buf, sizeof(buf));
}

static int conn_up(rls_xds_conn_t *c);

/* Plaintext from the control plane, to nghttp2. Returns 0, or RL_ECLOSED
 * with the connection dropped. */
static int h2_feed(rls_xds_conn_t *c, const uint8_t *p, size_t n)
{
    ssize_t rv = nghttp2_session_mem_recv(c->h2, p, n);

    if (rv < 0 || c->failed) {
        conn_drop(c->x, c->fail_why != NULL ? c->fail_why
                        : c->failed         ? "stream ended or response refused"
                                            : nghttp2_strerror((int)rv));
        return RL_ECLOSED;
    }
    return 0;
}

/* Ciphertext read: the handshake on, then the records' plaintext to
 * nghttp2. Returns 0, or RL_ECLOSED with the connection dropped. */
static int tls_feed(rls_xds_conn_t *c, const uint8_t *p, size_t n)
{
    static uint8_t plain[READ_CHUNK];
    int was = rls_tls_conn_ready(c->tls);
    int k;

    if ((k = rls_tls_conn_feed(c->tls, p, n)) != 0) {
        if (k == RL_ENOMEM) {
            conn_drop(c->x, "out of memory");
        } else if (!was) {
            RLS_WARN("xds: TLS handshake failed", " server=%s:%d why=\"%s\"",
                     c->x->o.host, c->x->o.port, rls_tls_conn_why(c->tls));
            conn_drop(c->x, "TLS handshake failed");
        } else {
            conn_drop(c->x, rls_tls_conn_why(c->tls));
        }
        return RL_ECLOSED;
    }
    if (!rls_tls_conn_ready(c->tls))
        return 0; /* the handshake goes on */
    if (!was && conn_up(c) != 0)
        return RL_ECLOSED;
    while ((k = rls_tls_conn_read(c->tls, plain, sizeof(plain))) > 0)
        if (h2_feed(c, plain, (size_t)k) != 0)
            return RL_ECLOSED;
    if (k == 0)
        return 0;
    conn_drop(c->x, k == RL_ECLOSED ? "closed by the control plane"
                                    : rls_tls_conn_why(c->tls));
    return RL_ECLOSED;
}

static void on_read(uv_stream_t *st, ssize_t n, const uv_buf_t *b)
{
    rls_xds_conn_t *c = st->data;

    if (c->x == NULL || n == 0)
        return;
    if (n < 0) {
        conn_drop(c->x, n == UV_EOF ? "closed by the control plane"
                                    : uv_strerror((int)n));
        return;
    }
    if (c->tls != NULL ? tls_feed(c, (const uint8_t *)b->base, (size_t)n)
                       : h2_feed(c, (const uint8_t *)b->base, (size_t)n))
        return;
    conn_send(c);
}

static int h2_setup(rls_xds_conn_t *c)
{
    rls_xds_t *x = c->x;
    nghttp2_session_callbacks *cbs;
    nghttp2_option *opt;
    nghttp2_data_provider dp;
    char authority[300];
    int rc;

    if (nghttp2_session_callbacks_new(&cbs) != 0)
        return RL_ENOMEM;
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cbs, on_data);
    nghttp2_session_callbacks_set_on_begin_headers_callback(cbs,
                                                            on_begin_headers);
    nghttp2_session_callbacks_set_on_header_callback(cbs, on_header);
    nghttp2_session_callbacks_set_on_frame_recv_callback(cbs, on_frame);
    nghttp2_session_callbacks_set_on_stream_close_callback(cbs,
                                                           on_stream_close);
    if (nghttp2_option_new(&opt) != 0) {
        nghttp2_session_callbacks_del(cbs);
        return RL_ENOMEM;
    }
#ifdef RL_HAVE_NGHTTP2_MAX_CONTINUATIONS
    nghttp2_option_set_max_continuations(opt, CONTINUATIONS_MAX);
#endif
    rc = nghttp2_session_client_new2(&c->h2, cbs, c, opt);
    nghttp2_option_del(opt);
    nghttp2_session_callbacks_del(cbs);
    if (rc != 0)
        return RL_ENOMEM;
    {
        /* Windows (the stream's and the connection's) as large as the
         * largest message: one response never waits for a
         * WINDOW_UPDATE. The header list size is what on_header
         * enforces. */
        nghttp2_settings_entry iv[] = {
            {NGHTTP2_SETTINGS_ENABLE_PUSH, 0},
            {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, RLS_XDS_MSG_MAX + 5},
            {NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE, HEADERS_MAX},
        };
        if (nghttp2_submit_settings(c->h2, NGHTTP2_FLAG_NONE, iv, 3) != 0 ||
            nghttp2_session_set_local_window_size(c->h2, NGHTTP2_FLAG_NONE, 0,
                                                  RLS_XDS_MSG_MAX + 5) != 0)
            return RL_ENOMEM;
    }
    snprintf(authority, sizeof(authority), "%s:%d", x->o.host, x->o.port);
    {
        nghttp2_nv hdrs[] = {
            {(uint8_t *)":method", (uint8_t *)"POST", 7, 4, 0},
            {(uint8_t *)":scheme",
             (uint8_t *)(c->tls != NULL ? "https" : "http"), 7,
             c->tls != NULL ? 5 : 4, 0},
            {(uint8_t *)":path", (uint8_t *)ADS_PATH, 5, sizeof(ADS_PATH) - 1,
             0},
            {(uint8_t *)":authority", (uint8_t *)authority, 10,
             strlen(authority), 0},
            {(uint8_t *)"content-type", (uint8_t *)"application/grpc", 12, 16,
             0},
            {(uint8_t *)"te", (uint8_t *)"trailers", 2, 8, 0},
            {(uint8_t *)"user-agent", (uint8_t *)"rl-server", 10, 9, 0},
        };
        dp.source.ptr = NULL;
        dp.read_callback = read_reqs;
        c->sid = nghttp2_submit_request(c->h2, NULL, hdrs,
                                        sizeof(hdrs) / sizeof(hdrs[0]), &dp, c);
    }
    if (c->sid < 0)
        return RL_ENOMEM;
    /* The first request names what is in force (nothing at the start). */
    return queue_request(c, x->version, NULL, NULL);
}

/* The transport is up (TCP, or the TLS handshake done): HTTP/2 and the
 * stream. Returns 0, or RL_ECLOSED with the connection dropped. */
static int conn_up(rls_xds_conn_t *c)
{
    rls_xds_t *x = c->x;

    if (h2_setup(c) != RL_OK) {
        conn_drop(x, "out of memory");
        return RL_ECLOSED;
    }
    c->up = 1;
    x->stats.connects++;
    x->stats.connected = 1;
    RLS_INFO("xds: connected", " server=%s:%d node=%s tls=%s", x->o.host,
             x->o.port, x->o.node_id, c->tls != NULL ? "on" : "off");
    uv_timer_stop(&x->timer);
    x->timer_state = T_PING;
    uv_timer_start(&x->timer, on_timer, PING_MS, PING_MS);
    return 0;
}

/* The TLS client for c (net/tls.c): SNI and the name checked are the
 * server name (an address is checked as one). Returns 0 or RL_ENOMEM. */
static int tls_begin(rls_xds_conn_t *c)
{
    rls_xds_t *x = c->x;
    const char *name =
        x->o.tls_server_name != NULL ? x->o.tls_server_name : x->o.host;

    c->tls = rls_tls_conn_client(x->tls, name);
    return c->tls != NULL ? RL_OK : RL_ENOMEM;
}

static void on_connect(uv_connect_t *req, int status)
{
    rls_xds_conn_t *c = req->data;
    rls_xds_t *x = c->x;

    if (x == NULL)
        return;
    if (status < 0) {
        conn_drop(x, uv_strerror(status));
        return;
    }
    if (uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read) != 0) {
        conn_drop(x, "cannot read");
        return;
    }
    if (x->tls != NULL) {
        /* The connect deadline runs on through the handshake. */
        if (tls_begin(c) != RL_OK) {
            conn_drop(x, "out of memory");
            return;
        }
    } else if (conn_up(c) != 0) {
        return;
    }
    conn_send(c);
}

/* A new connection struct, its handle initialized, as x's; NULL when out
 * of memory. */
static rls_xds_conn_t *conn_new(rls_xds_t *x)
{
    rls_xds_conn_t *c;

    if ((c = calloc(1, sizeof(*c))) == NULL)
        return NULL;
    c->x = x;
    c->gen = ++x->gen;
    c->sid = -1;
    rl_buf_init(&c->in, RLS_XDS_MSG_MAX + 5);
    rl_buf_init(&c->reqs, REQS_MAX);
    rl_buf_init(&c->out, OUT_MAX + 65536);
    uv_tcp_init(x->loop, &c->tcp);
    c->tcp.data = c;
    x->c = c;
    c->creq.data = c;
    return c;
}

static void on_resolved(uv_getaddrinfo_t *g, int status, struct addrinfo *ai)
{
    rls_xds_t *x = g->data;
    rls_xds_conn_t *c;

    x->resolving = 0;
    if (x->closing) {
        uv_freeaddrinfo(ai);
        return;
    }
    if (status < 0) {
        RLS_WARN("xds: cannot resolve", " server=%s why=\"%s\"", x->o.host,
                 uv_strerror(status));
        uv_freeaddrinfo(ai);
        retry_later(x);
        return;
    }
    if ((c = conn_new(x)) == NULL) {
        uv_freeaddrinfo(ai);
        retry_later(x);
        return;
    }
    uv_tcp_nodelay(&c->tcp, 1);
    uv_tcp_keepalive(&c->tcp, 1, KEEPALIVE_S);
    status = uv_tcp_connect(&c->creq, &c->tcp, ai->ai_addr, on_connect);
    uv_freeaddrinfo(ai);
    if (status != 0) {
        conn_drop(x, uv_strerror(status));
        return;
    }
    x->timer_state = T_CONNECT;
    uv_timer_start(&x->timer, on_timer, CONNECT_MS, 0);
}

/* The first connection over the socket given to rls_xds_start_fd: from
 * there on as if a connect had just succeeded. */
static void adopt(rls_xds_t *x)
{
    rls_xds_conn_t *c;
    int fd = x->adopt_fd, rc;

    x->adopt_fd = -1;
    if ((c = conn_new(x)) == NULL) {
        close(fd);
        retry_later(x);
        return;
    }
    if ((rc = uv_tcp_open(&c->tcp, fd)) != 0) {
        close(fd);
        conn_drop(x, uv_strerror(rc));
        return;
    }
    /* Refused by a socket that is not TCP (a socketpair's end): no
     * matter. */
    uv_tcp_nodelay(&c->tcp, 1);
    uv_tcp_keepalive(&c->tcp, 1, KEEPALIVE_S);
    x->timer_state = T_CONNECT;
    uv_timer_start(&x->timer, on_timer, CONNECT_MS, 0);
    on_connect(&c->creq, 0);
}

static void resolve(rls_xds_t *x)
{
    struct addrinfo hints;
    char port[16];
    int rc;

    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    if (x->adopt_fd >= 0) {
        adopt(x);
        return;
    }
    snprintf(port, sizeof(port), "%d", x->o.port);
    x->gai.data = x;
    rc = uv_getaddrinfo(x->loop, &x->gai, on_resolved, x->o.host, port, &hints);
    if (rc != 0) {
        RLS_WARN("xds: cannot resolve", " server=%s why=\"%s\"", x->o.host,
                 uv_strerror(rc));
        retry_later(x);
        return;
    }
    x->resolving = 1;
}

static void on_timer(uv_timer_t *t)
{
    rls_xds_t *x = t->data;

    switch (x->timer_state) {
    case T_BACKOFF:
        x->timer_state = T_IDLE;
        resolve(x);
        break;
    case T_CONNECT:
        conn_drop(x, "connect timed out");
        break;
    case T_PING:
        if (x->c == NULL)
            break;
        if (x->c->ping_out) {
            conn_drop(x, "no answer to PING");
            break;
        }
        if (nghttp2_submit_ping(x->c->h2, NGHTTP2_FLAG_NONE, NULL) != 0) {
            conn_drop(x, "out of memory");
            break;
        }
        x->c->ping_out = 1;
        conn_send(x->c);
        break;
    default:
        break;
    }
}

/* The next connection after the current step, jittered to half to all of
 * it; the step doubles up to its cap. */
static void retry_later(rls_xds_t *x)
{
    uint64_t d = x->backoff_ms, wait;

    if (x->closing)
        return;
    /* xorshift64: each process its own sequence, so that a fleet does not
     * come back in step. */
    x->rng ^= x->rng << 13;
    x->rng ^= x->rng >> 7;
    x->rng ^= x->rng << 17;
    wait = d / 2 + x->rng % (d / 2 + 1);
    x->backoff_ms = d * 2 > x->o.backoff_max_ms ? x->o.backoff_max_ms : d * 2;
    x->timer_state = T_BACKOFF;
    uv_timer_start(&x->timer, on_timer, wait, 0);
}

/* The client's SSL_CTX from o's files. Returns it, or NULL with err set. */
static SSL_CTX *tls_ctx(const rls_xds_opts_t *o, char *err, size_t errlen)
{
    static const unsigned char alpn[] = {2, 'h', '2'};
    SSL_CTX *t;

    if (rls_ossl_readable("--envoy-xds-tls-ca", o->tls_ca, err, errlen) ||
        (o->tls_cert != NULL &&
         (rls_ossl_readable("--envoy-xds-tls-cert", o->tls_cert, err, errlen) ||
          rls_ossl_readable("--envoy-xds-tls-key", o->tls_key, err, errlen))))
        return NULL;
    ERR_clear_error();
    if ((t = SSL_CTX_new(TLS_client_method())) == NULL) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    SSL_CTX_set_min_proto_version(t, TLS1_2_VERSION);
    SSL_CTX_set_default_passwd_cb(t, rls_ossl_no_passphrase);
    SSL_CTX_set_verify(t, SSL_VERIFY_PEER, NULL);
    if (SSL_CTX_load_verify_locations(t, o->tls_ca, NULL) != 1) {
        snprintf(err, errlen, "--envoy-xds-tls-ca: '%s': %s", o->tls_ca,
                 rls_ossl_reason("no certificate"));
        goto fail;
    }
    if (o->tls_cert != NULL &&
        (SSL_CTX_use_certificate_chain_file(t, o->tls_cert) != 1 ||
         SSL_CTX_use_PrivateKey_file(t, o->tls_key, SSL_FILETYPE_PEM) != 1 ||
         SSL_CTX_check_private_key(t) != 1)) {
        snprintf(err, errlen,
                 "--envoy-xds-tls-cert/--envoy-xds-tls-key: '%s': %s",
                 o->tls_cert, rls_ossl_reason("does not load"));
        goto fail;
    }
    if (SSL_CTX_set_alpn_protos(t, alpn, sizeof(alpn)) != 0) {
        snprintf(err, errlen, "out of memory");
        goto fail;
    }
    return t;
fail:
    SSL_CTX_free(t);
    return NULL;
}

int rls_xds_start(rls_xds_t *x, uv_loop_t *loop, const rls_xds_opts_t *o,
                  rls_xds_install_fn install, void *arg, char *err,
                  size_t errlen)
{
    int rc;

    memset(x, 0, sizeof(*x));
    x->adopt_fd = -1;
    x->loop = loop;
    x->o = *o;
    if (x->o.backoff_min_ms == 0)
        x->o.backoff_min_ms = 1;
    if (x->o.backoff_max_ms < x->o.backoff_min_ms)
        x->o.backoff_max_ms = x->o.backoff_min_ms;
    x->backoff_ms = x->o.backoff_min_ms;
    x->rng = (uv_hrtime() ^ ((uint64_t)uv_os_getpid() << 32)) | 1;
    rl_buf_init(&x->pending, RLS_XDS_MSG_MAX + 5);
    rl_buf_init(&x->building, RLS_XDS_MSG_MAX + 5);
    x->install = install;
    x->arg = arg;
    if (o->tls_ca != NULL && (x->tls = tls_ctx(o, err, errlen)) == NULL)
        return RL_EINVAL;
    if ((rc = uv_timer_init(loop, &x->timer)) != 0) {
        SSL_CTX_free(x->tls);
        x->tls = NULL;
        snprintf(err, errlen, "%s", uv_strerror(rc));
        return RL_EIO;
    }
    x->timer.data = x;
    if ((rc = uv_timer_init(loop, &x->pace)) != 0) {
        uv_close((uv_handle_t *)&x->timer, NULL);
        SSL_CTX_free(x->tls);
        x->tls = NULL;
        snprintf(err, errlen, "%s", uv_strerror(rc));
        return RL_EIO;
    }
    x->pace.data = x;
    if ((rc = rls_rebuild_init(&x->rb, loop, rb_start, rb_work, rb_done, x)) !=
        0) {
        uv_close((uv_handle_t *)&x->timer, NULL);
        uv_close((uv_handle_t *)&x->pace, NULL);
        SSL_CTX_free(x->tls);
        x->tls = NULL;
        snprintf(err, errlen, "%s", rl_strerror(rc));
        return rc;
    }
    x->started = 1;
    RLS_INFO("xds: configuration from a control plane",
             " server=%s:%d node=%s tls=%s", x->o.host, x->o.port, x->o.node_id,
             x->tls != NULL ? "on" : "off");
    x->timer_state = T_BACKOFF;
    uv_timer_start(&x->timer, on_timer, 0, 0);
    return 0;
}

int rls_xds_start_fd(rls_xds_t *x, uv_loop_t *loop, const rls_xds_opts_t *o,
                     int fd, rls_xds_install_fn install, void *arg, char *err,
                     size_t errlen)
{
    int rc = rls_xds_start(x, loop, o, install, arg, err, errlen);

    if (rc != 0)
        close(fd);
    else
        x->adopt_fd = fd; /* taken when the first connection is due */
    return rc;
}

void rls_xds_close(rls_xds_t *x)
{
    if (!x->started || x->closing)
        return;
    x->closing = 1;
    if (x->adopt_fd >= 0) {
        close(x->adopt_fd);
        x->adopt_fd = -1;
    }
    if (x->c != NULL) {
        rls_xds_conn_t *c = x->c;
        x->c = NULL;
        c->x = NULL;
        if (c->h2 != NULL)
            nghttp2_session_del(c->h2);
        c->h2 = NULL;
        uv_close((uv_handle_t *)&c->tcp, on_tcp_closed);
    }
    if (x->resolving)
        uv_cancel((uv_req_t *)&x->gai);
    uv_close((uv_handle_t *)&x->timer, NULL);
    uv_close((uv_handle_t *)&x->pace, NULL);
    x->pacing = 0;
    rls_rebuild_close(&x->rb);
    rl_buf_free(&x->pending);
    x->has_pending = 0;
    free(x->version);
    x->version = NULL;
    SSL_CTX_free(x->tls); /* connections' SSL objects hold their own */
    x->tls = NULL;
}

int rls_xds_metrics(const rls_xds_t *x, rl_buf_t *out)
{
    return rl_buf_printf(
        out,
        "# HELP rl_xds_updates_total Configurations from the control plane "
        "(--envoy-xds), by result: accepted (in force, ACKed), rejected "
        "(NACKed, the one in force kept) or superseded (replaced by a newer "
        "one before its build: at most 4 builds a second).\n"
        "# TYPE rl_xds_updates_total counter\n"
        "rl_xds_updates_total{result=\"accepted\"} %" PRIu64 "\n"
        "rl_xds_updates_total{result=\"rejected\"} %" PRIu64 "\n"
        "rl_xds_updates_total{result=\"superseded\"} %" PRIu64 "\n"
        "# HELP rl_xds_connected 1 while the connection to the control "
        "plane is up.\n"
        "# TYPE rl_xds_connected gauge\n"
        "rl_xds_connected %d\n"
        "# HELP rl_xds_connections_total Connections to the control plane, "
        "made and lost.\n"
        "# TYPE rl_xds_connections_total counter\n"
        "rl_xds_connections_total{event=\"connected\"} %" PRIu64 "\n"
        "rl_xds_connections_total{event=\"lost\"} %" PRIu64 "\n"
        "# HELP rl_xds_header_drops_total Connections to the control plane "
        "dropped because a header block passed 16 KiB as decoded or a "
        "stream carried more than 4 blocks (HPACK amplification).\n"
        "# TYPE rl_xds_header_drops_total counter\n"
        "rl_xds_header_drops_total %" PRIu64 "\n",
        x->stats.accepted, x->stats.rejected, x->stats.superseded,
        x->stats.connected, x->stats.connects, x->stats.disconnects,
        x->stats.header_drops);
}
