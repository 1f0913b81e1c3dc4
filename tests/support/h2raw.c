/* A raw HTTP/2 client for tests and load; see h2raw.h. */
#include "h2raw.h"

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <arpa/inet.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "envoy/service/ratelimit/v3/rls.pb-c.h"

static int grow(uint8_t **b, size_t *cap, size_t need)
{
    uint8_t *p;
    size_t c = *cap ? *cap : 65536;

    if (need <= *cap)
        return 0;
    while (c < need)
        c *= 2;
    if ((p = realloc(*b, c)) == NULL)
        return -1;
    *b = p;
    *cap = c;
    return 0;
}

int h2r_raw(h2r_t *c, const void *p, size_t n)
{
    if (n == 0)
        return 0; /* c->out may still be NULL */
    if (grow(&c->out, &c->out_cap, c->out_len + n) != 0)
        return -1;
    memcpy(c->out + c->out_len, p, n);
    c->out_len += n;
    return 0;
}

int h2r_frame(h2r_t *c, uint8_t type, uint8_t flags, int32_t id, const void *p,
              size_t n)
{
    uint8_t h[9];

    h[0] = (uint8_t)(n >> 16);
    h[1] = (uint8_t)(n >> 8);
    h[2] = (uint8_t)n;
    h[3] = type;
    h[4] = flags;
    h[5] = (uint8_t)((uint32_t)id >> 24) & 0x7f;
    h[6] = (uint8_t)((uint32_t)id >> 16);
    h[7] = (uint8_t)((uint32_t)id >> 8);
    h[8] = (uint8_t)id;
    if (h2r_raw(c, h, 9) != 0)
        return -1;
    return n > 0 ? h2r_raw(c, p, n) : 0;
}

int h2r_connect(h2r_t *c, int port, int raw)
{
    struct sockaddr_in a;
    int one = 1;

    memset(c, 0, sizeof(*c));
    c->fd = socket(AF_INET, SOCK_STREAM, 0);
    if (c->fd < 0)
        return -1;
    memset(&a, 0, sizeof(a));
    a.sin_family = AF_INET;
    a.sin_port = htons((uint16_t)port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(c->fd, (struct sockaddr *)&a, sizeof(a)) != 0) {
        close(c->fd);
        c->fd = -1;
        return -1;
    }
    setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    if (nghttp2_hd_deflate_new(&c->def, 4096) != 0 ||
        nghttp2_hd_inflate_new(&c->inf) != 0)
        return -1;
    if (!raw) {
        h2r_raw(c, NGHTTP2_CLIENT_MAGIC, NGHTTP2_CLIENT_MAGIC_LEN);
        h2r_frame(c, NGHTTP2_SETTINGS, 0, 0, NULL, 0);
    }
    return 0;
}

void h2r_close(h2r_t *c)
{
    if (c->fd >= 0)
        close(c->fd);
    c->fd = -1;
    if (c->def != NULL)
        nghttp2_hd_deflate_del(c->def);
    if (c->inf != NULL)
        nghttp2_hd_inflate_del(c->inf);
    c->def = NULL;
    c->inf = NULL;
    free(c->in);
    free(c->out);
    c->in = c->out = NULL;
}

int h2r_headers(h2r_t *c, int32_t id, const nghttp2_nv *nv, size_t n,
                int end_stream)
{
    size_t bound = nghttp2_hd_deflate_bound(c->def, nv, n);
    uint8_t *blk = malloc(bound);
    ssize_t k;
    int rc;

    if (blk == NULL)
        return -1;
    k = nghttp2_hd_deflate_hd(c->def, blk, bound, nv, n);
    if (k < 0) {
        free(blk);
        return -1;
    }
    rc = h2r_frame(c, NGHTTP2_HEADERS,
                   NGHTTP2_FLAG_END_HEADERS |
                       (end_stream ? NGHTTP2_FLAG_END_STREAM : 0),
                   id, blk, (size_t)k);
    free(blk);
    return rc;
}

#define MKNV(n, v)                                                             \
    {                                                                          \
        (uint8_t *)(n), (uint8_t *)(v), strlen(n), strlen(v),                  \
            NGHTTP2_NV_FLAG_NONE                                               \
    }

int h2r_grpc(h2r_t *c, int32_t id, const char *path, const uint8_t *msg,
             size_t n, uint8_t flag)
{
    nghttp2_nv nv[] = {
        MKNV(":method", "POST"),
        MKNV(":scheme", "http"),
        MKNV(":path", path),
        MKNV(":authority", "rl"),
        MKNV("content-type", "application/grpc"),
        MKNV("te", "trailers"),
    };
    uint8_t *body;
    int rc;

    if (h2r_headers(c, id, nv, sizeof(nv) / sizeof(nv[0]), 0) != 0)
        return -1;
    if ((body = malloc(n + 5)) == NULL)
        return -1;
    body[0] = flag;
    body[1] = (uint8_t)(n >> 24);
    body[2] = (uint8_t)(n >> 16);
    body[3] = (uint8_t)(n >> 8);
    body[4] = (uint8_t)n;
    if (n > 0)
        memcpy(body + 5, msg, n);
    /* DATA frames of at most 16,384 bytes (the default SETTINGS). */
    rc = 0;
    for (size_t off = 0; off < n + 5 && rc == 0;) {
        size_t k = n + 5 - off > 16384 ? 16384 : n + 5 - off;
        rc = h2r_frame(c, NGHTTP2_DATA,
                       off + k == n + 5 ? NGHTTP2_FLAG_END_STREAM : 0, id,
                       body + off, k);
        off += k;
    }
    free(body);
    return rc;
}

int h2r_settings(h2r_t *c, const nghttp2_settings_entry *iv, size_t n)
{
    uint8_t p[6 * 16];
    size_t i;

    if (n > 16)
        return -1;
    for (i = 0; i < n; i++) {
        p[6 * i] = (uint8_t)(iv[i].settings_id >> 8);
        p[6 * i + 1] = (uint8_t)iv[i].settings_id;
        p[6 * i + 2] = (uint8_t)(iv[i].value >> 24);
        p[6 * i + 3] = (uint8_t)(iv[i].value >> 16);
        p[6 * i + 4] = (uint8_t)(iv[i].value >> 8);
        p[6 * i + 5] = (uint8_t)iv[i].value;
    }
    return h2r_frame(c, NGHTTP2_SETTINGS, 0, 0, p, 6 * n);
}

int h2r_ping(h2r_t *c)
{
    static const uint8_t opaque[8];

    return h2r_frame(c, NGHTTP2_PING, 0, 0, opaque, sizeof(opaque));
}

/* An HPACK integer (RFC 7541, 5.1) with an N-bit prefix after `first`'s
 * high bits. Returns its length (at most 6 bytes for a size_t below
 * 2^32). */
static size_t hpack_int(uint8_t *out, uint8_t first, int prefix, size_t v)
{
    size_t max = ((size_t)1 << prefix) - 1, k = 0;

    if (v < max) {
        out[k++] = (uint8_t)(first | v);
        return k;
    }
    out[k++] = (uint8_t)(first | max);
    for (v -= max; v >= 128; v >>= 7)
        out[k++] = (uint8_t)(0x80 | (v & 0x7f));
    out[k++] = (uint8_t)v;
    return k;
}

/* A literal field without indexing whose name is static-table entry
 * `idx`, with a plain (not Huffman) value. */
static size_t hpack_lit(uint8_t *out, size_t idx, const char *v)
{
    size_t k = hpack_int(out, 0x00, 4, idx), n = strlen(v);

    k += hpack_int(out + k, 0x00, 7, n);
    memcpy(out + k, v, n);
    return k + n;
}

/* The most recent dynamic-table entry: index 62, one byte. */
#define BOMB_REF (0x80 | 62)

int h2r_bomb(h2r_t *c, int32_t id, size_t value_len, size_t refs,
             size_t frame_refs, int end_stream, int open)
{
    static const char name[] = "x-bomb";
    uint8_t *blk;
    size_t k = 0, now, cap;
    int rc;

    if (value_len > 4000 || frame_refs == 0 || frame_refs > 16000)
        return -1;
    cap = 256 + sizeof(H2R_PATH) + value_len + frame_refs;
    if ((blk = malloc(cap)) == NULL)
        return -1;
    /* Table size 0, then 4,096 again: an empty table to insert into. */
    blk[k++] = 0x20;
    k += hpack_int(blk + k, 0x20, 5, 4096);
    blk[k++] = 0x83; /* :method POST */
    blk[k++] = 0x86; /* :scheme http */
    k += hpack_lit(blk + k, 4, H2R_PATH);
    k += hpack_lit(blk + k, 1, "rl");                /* :authority */
    k += hpack_lit(blk + k, 31, "application/grpc"); /* content-type */
    /* Literal with incremental indexing, new name: the insert. */
    blk[k++] = 0x40;
    k += hpack_int(blk + k, 0x00, 7, sizeof(name) - 1);
    memcpy(blk + k, name, sizeof(name) - 1);
    k += sizeof(name) - 1;
    k += hpack_int(blk + k, 0x00, 7, value_len);
    memset(blk + k, 'b', value_len);
    k += value_len;
    /* The HEADERS frame too stays within the default 16,384 bytes. */
    now = refs < frame_refs ? refs : frame_refs;
    if (now > 16384 - k)
        now = 16384 - k;
    memset(blk + k, BOMB_REF, now);
    k += now;
    refs -= now;
    rc = h2r_frame(c, NGHTTP2_HEADERS,
                   (end_stream ? NGHTTP2_FLAG_END_STREAM : 0) |
                       (refs == 0 && !open ? NGHTTP2_FLAG_END_HEADERS : 0),
                   id, blk, k);
    while (rc == 0 && refs > 0) {
        now = refs < frame_refs ? refs : frame_refs;
        refs -= now;
        memset(blk, BOMB_REF, now);
        rc = h2r_frame(c, NGHTTP2_CONTINUATION,
                       refs == 0 && !open ? NGHTTP2_FLAG_END_HEADERS : 0, id,
                       blk, now);
    }
    free(blk);
    /* The deflater's next block empties both tables again. */
    if (rc == 0 && (nghttp2_hd_deflate_change_table_size(c->def, 0) != 0 ||
                    nghttp2_hd_deflate_change_table_size(c->def, 4096) != 0))
        rc = -1;
    return rc;
}

int h2r_bomb_more(h2r_t *c, int32_t id, size_t refs, int last)
{
    uint8_t *p = malloc(refs > 0 ? refs : 1);
    int rc;

    if (p == NULL)
        return -1;
    memset(p, BOMB_REF, refs);
    rc = h2r_frame(c, NGHTTP2_CONTINUATION, last ? NGHTTP2_FLAG_END_HEADERS : 0,
                   id, p, refs);
    free(p);
    return rc;
}

static void on_headers(h2r_t *c, int32_t id, uint8_t flags, const uint8_t *p,
                       size_t n)
{
    int grpc_status = -1, http_status = 0;

    for (;;) {
        nghttp2_nv nv;
        int f = 0;
        ssize_t k = nghttp2_hd_inflate_hd2(c->inf, &nv, &f, p, n, 1);
        if (k < 0)
            return;
        p += k;
        n -= (size_t)k;
        if (f & NGHTTP2_HD_INFLATE_EMIT) {
            if (nv.namelen == 11 && memcmp(nv.name, "grpc-status", 11) == 0)
                grpc_status = atoi((const char *)nv.value);
            if (nv.namelen == 7 && memcmp(nv.name, ":status", 7) == 0)
                http_status = atoi((const char *)nv.value);
        }
        if (f & NGHTTP2_HD_INFLATE_FINAL) {
            nghttp2_hd_inflate_end_headers(c->inf);
            break;
        }
        if (k == 0 && n == 0)
            break;
    }
    if (http_status != 0)
        c->last_http_status = http_status;
    if ((flags & NGHTTP2_FLAG_END_STREAM) && c->on_done != NULL)
        c->on_done(c->arg, id, grpc_status,
                   http_status ? http_status : c->last_http_status, 0);
}

static size_t parse(h2r_t *c)
{
    size_t off = 0;
    uint8_t ack[8];

    while (c->in_len - off >= 9) {
        const uint8_t *h = c->in + off;
        size_t len = ((size_t)h[0] << 16) | ((size_t)h[1] << 8) | h[2];
        uint8_t type = h[3], flags = h[4];
        int32_t id =
            (int32_t)((((uint32_t)h[5] & 0x7f) << 24) | ((uint32_t)h[6] << 16) |
                      ((uint32_t)h[7] << 8) | h[8]);
        const uint8_t *p = h + 9;

        if (c->in_len - off < 9 + len)
            break;
        switch (type) {
        case NGHTTP2_SETTINGS:
            if (!(flags & NGHTTP2_FLAG_ACK)) {
                c->settings++;
                h2r_frame(c, NGHTTP2_SETTINGS, NGHTTP2_FLAG_ACK, 0, NULL, 0);
            }
            break;
        case NGHTTP2_PING:
            if (!(flags & NGHTTP2_FLAG_ACK) && len == 8) {
                memcpy(ack, p, 8);
                h2r_frame(c, NGHTTP2_PING, NGHTTP2_FLAG_ACK, 0, ack, 8);
            }
            break;
        case NGHTTP2_GOAWAY:
            c->goaway++;
            if (len >= 8)
                c->goaway_code = ((uint32_t)p[4] << 24) |
                                 ((uint32_t)p[5] << 16) |
                                 ((uint32_t)p[6] << 8) | p[7];
            break;
        case NGHTTP2_RST_STREAM:
            c->rsts++;
            if (len == 4 && c->on_done != NULL)
                c->on_done(c->arg, id, -1, 0,
                           ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) |
                               ((uint32_t)p[2] << 8) | p[3]);
            break;
        case NGHTTP2_HEADERS:
            /* No padding or priority from nghttp2 servers by default. */
            on_headers(c, id, flags, p, len);
            break;
        case NGHTTP2_DATA:
            c->unacked += len;
            if (c->on_data != NULL)
                c->on_data(c->arg, id, p, len);
            break;
        default:
            break;
        }
        off += 9 + len;
    }
    /* Give the connection window back in big steps (streams are short and
     * never need theirs). */
    if (c->unacked >= 16384) {
        uint8_t w[4];
        uint32_t v = (uint32_t)c->unacked;
        w[0] = (uint8_t)(v >> 24);
        w[1] = (uint8_t)(v >> 16);
        w[2] = (uint8_t)(v >> 8);
        w[3] = (uint8_t)v;
        h2r_frame(c, NGHTTP2_WINDOW_UPDATE, 0, 0, w, 4);
        c->unacked = 0;
    }
    return off;
}

/* One round of I/O on what poll reported: send what is queued, read and
 * parse what came. *got says whether anything was read. */
static int io(h2r_t *c, short revents, int *got)
{
    ssize_t n;

    *got = 0;
    if ((revents & POLLOUT) && c->out_len > 0) {
        n = send(c->fd, c->out, c->out_len, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n < 0 && errno != EAGAIN)
            return -1;
        if (n > 0) {
            memmove(c->out, c->out + n, c->out_len - (size_t)n);
            c->out_len -= (size_t)n;
        }
    }
    if (revents & (POLLIN | POLLHUP | POLLERR)) {
        if (grow(&c->in, &c->in_cap, c->in_len + 65536) != 0)
            return -1;
        n = recv(c->fd, c->in + c->in_len, 65536, MSG_DONTWAIT);
        if (n == 0 || (n < 0 && errno != EAGAIN)) {
            c->eof = 1;
            return -1;
        }
        if (n > 0) {
            size_t k;
            c->in_len += (size_t)n;
            k = parse(c);
            memmove(c->in, c->in + k, c->in_len - k);
            c->in_len -= k;
            *got = 1;
        }
    }
    return 0;
}

int h2r_pump(h2r_t *c, int timeout_ms)
{
    struct pollfd pf;
    int got;

    pf.fd = c->fd;
    for (;;) {
        pf.events = POLLIN | (c->out_len > 0 ? POLLOUT : 0);
        pf.revents = 0;
        if (poll(&pf, 1, timeout_ms) <= 0)
            return 0;
        if (io(c, pf.revents, &got) != 0)
            return -1;
        if (got || (!(pf.revents & POLLIN) && c->out_len == 0))
            return 0;
    }
}

int h2r_io(h2r_t *c, short revents)
{
    int got;

    return io(c, revents, &got);
}

uint8_t *h2r_rls_request(const char *domain, const char *const *kv, size_t n,
                         uint32_t hits, size_t *len)
{
    Envoy__Service__Ratelimit__V3__RateLimitRequest q =
        ENVOY__SERVICE__RATELIMIT__V3__RATE_LIMIT_REQUEST__INIT;
    Envoy__Extensions__Common__Ratelimit__V3__RateLimitDescriptor d[16],
        *dp[16];
    Envoy__Extensions__Common__Ratelimit__V3__RateLimitDescriptor__Entry e[16],
        *ep[16];
    uint8_t *out;
    size_t i;

    if (n > 16)
        return NULL;
    for (i = 0; i < n; i++) {
        Envoy__Extensions__Common__Ratelimit__V3__RateLimitDescriptor di =
            ENVOY__EXTENSIONS__COMMON__RATELIMIT__V3__RATE_LIMIT_DESCRIPTOR__INIT;
        Envoy__Extensions__Common__Ratelimit__V3__RateLimitDescriptor__Entry ei =
            ENVOY__EXTENSIONS__COMMON__RATELIMIT__V3__RATE_LIMIT_DESCRIPTOR__ENTRY__INIT;
        e[i] = ei;
        e[i].key = (char *)kv[2 * i];
        e[i].value = (char *)kv[2 * i + 1];
        ep[i] = &e[i];
        d[i] = di;
        d[i].n_entries = 1;
        d[i].entries = &ep[i];
        dp[i] = &d[i];
    }
    q.domain = (char *)domain;
    q.n_descriptors = n;
    q.descriptors = dp;
    q.hits_addend = hits;
    *len =
        envoy__service__ratelimit__v3__rate_limit_request__get_packed_size(&q);
    if ((out = malloc(*len + 1)) == NULL)
        return NULL;
    envoy__service__ratelimit__v3__rate_limit_request__pack(&q, out);
    return out;
}
