/* Fuzz target: the --grpc listener's input path, end to end: nghttp2's
 * server session, the stream and message handling of server/envoy/grpc.c,
 * the RateLimitRequest decoding and descriptor mapping of
 * server/envoy/rls.c, the batcher and the memory store, on a real
 * libuv loop with the server's own tick.
 *
 * The input's first byte chooses how it is sent (a valid client preface
 * and SETTINGS first, or not; the size of the pieces it is written in,
 * or all at once)
 * and what the rest is: the bytes a client sends on one connection, or
 * (top bit set) a program of ops that build them (build(), below) with
 * valid framing and HPACK, so that mutations stay on the header path:
 * dynamic-table inserts and indexed references, CONTINUATION frames,
 * header lists around and over the 8 KiB limit, trailers, zero windows,
 * resets. The target steps the loop while writing and reading,
 * half-closes, and steps until the server has closed the connection.
 *
 * How the bytes reach grpc.c: each input is one client connection to a
 * listener of the target's own, a uv_pipe_t on an abstract AF_UNIX
 * socket whose connection callback is rls_grpc_accept, as the --grpc
 * listener's is; uv_accept opens the accepted fd in grpc.c's own uv_tcp_t
 * (uv_tcp_nodelay fails on it, and grpc.c ignores that). From there every
 * byte takes the server's path. Not loopback TCP: a closed TCP connection
 * holds its port in TIME_WAIT, and at a thousand inputs a second the
 * ephemeral ports ran out within a minute (issue 41); a Unix socket holds
 * nothing once closed, and delivers synchronously (no Nagle, no delayed
 * ACK, no autotuned buffers), so an input replays the same way each time.
 *
 * Invariants (abort on violation): the server closes the connection within
 * a bounded number of loop steps once the client has half-closed and every
 * answer is due (nothing hangs), no request is left in the batcher, and at
 * exit every handle closes and nothing leaks (ASan/LSan).
 *
 * Built with libFuzzer (tests/fuzz/run.sh, seeded from
 * tests/fuzz/corpus/grpc, written by gen_grpc_seeds.py) and, with
 * RL_FUZZ_REPLAY, as a plain program that synthesizes well-formed calls
 * (headers by nghttp2's HPACK deflater, tests/support/h2raw.c) and runs
 * them and the seeds whole, cut at every few bytes and with bytes
 * flipped, in every build. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <uv.h>

#include "core/decide.h"
#include "h2raw.h"
#include "base/log.h"
#include "envoy/grpc.h"
#include "flags.h"
#include "server.h"
#include "envoy/stats.h"
#include "envoy/conf.h"
#include "policy/runtime.h"
#include "envoy/service/rate_limit_quota/v3/rlqs.pb-c.h"
#include "rl_error.h"
#include "rlqs/rlqs.h"
#include "store/memory.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond)                                                            \
    do {                                                                       \
        if (!(cond)) {                                                         \
            fprintf(stderr, "fuzz_grpc: %s:%d: %s\n", __FILE__, __LINE__,      \
                    #cond);                                                    \
            abort();                                                           \
        }                                                                      \
    } while (0)

/* RLQS (--rlqs-config) on the same listener: one rule, a 1-s TTL. */
static const char rlqs_yaml[] = "domain: envoy\n"
                                "min_report_ms: 0\n"
                                "buckets:\n"
                                "  - name: api\n"
                                "    match: {name: api, t: \"*\"}\n"
                                "    requests: 100\n"
                                "    ttl_s: 1\n";

static const char conf_yaml[] =
    "domain: d\n"
    "rate_limit_headers: all\n"
    "descriptors:\n"
    "  - key: a\n"
    "    rate_limit: {unit: second, requests_per_unit: 3}\n"
    "  - key: b\n"
    "    value: x\n"
    "    descriptors:\n"
    "      - key: c\n"
    "        rate_limit: {requests_per_unit: 1, window: 90s}\n"
    "        shadow_mode: true\n"
    "  - key: z\n"
    "    rate_limit: {unit: minute, requests_per_unit: 0}\n"
    "  - key: u\n"
    "    unlimited: true\n"
    "  - key: r\n"
    "    rule: api\n";

static struct {
    int up;
    uv_loop_t loop;
    rls_flags_t cfg;
    rls_store_t *store;
    rls_runtime_t rt;
    rls_decider_t decider;
    rls_grpc_t *grpc;
    rls_estats_t estats; /* a small cap: requests' own limits reach it */
    uv_check_t tick;
    uv_pipe_t listener; /* the Unix socket clients connect to */
    struct sockaddr_un addr;
    socklen_t addrlen;
    char err[256];
} S;

/* The status grpc.health.v1 reports flips at every look (each Check
 * looks): a Check after Watch streams pushes them a change. Counted from
 * 0 in every input, so that an input replays alike. */
static unsigned health_looks;

static int health_flip(void *arg)
{
    (void)arg;
    return (health_looks++ & 1) == 0;
}

static void on_tick(uv_check_t *h)
{
    (void)h;
    rls_decider_tick(&S.decider, 0); /* server.c's, without a hold */
    rls_grpc_flush(S.grpc);
}

static void on_connection(uv_stream_t *l, int status)
{
    rls_grpc_accept(S.grpc, l, status);
}

/* The listener: an abstract Unix socket (no file to clean up), named by
 * the pid so that targets run at once do not meet. */
static void listen_unix(void)
{
    int fd, n;

    memset(&S.addr, 0, sizeof(S.addr));
    S.addr.sun_family = AF_UNIX;
    n = snprintf(S.addr.sun_path + 1, sizeof(S.addr.sun_path) - 1,
                 "rl-fuzz-grpc-%ld", (long)getpid());
    S.addrlen =
        (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
    fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    CHECK(fd >= 0);
    CHECK(bind(fd, (struct sockaddr *)&S.addr, S.addrlen) == 0);
    CHECK(uv_pipe_init(&S.loop, &S.listener, 0) == 0);
    CHECK(uv_pipe_open(&S.listener, fd) == 0);
    CHECK(uv_listen((uv_stream_t *)&S.listener, 16, on_connection) == 0);
}

static void setup(void)
{
    const char *rules[] = {"api=2/1m,5/1h"};
    rls_policy_t *p = NULL;
    rls_envoy_conf_t *ec = NULL;
    rls_decider_opts_t o;
    rls_grpc_opts_t go;
    rls_diag_t d;

    if (S.up)
        return;
    S.up = 1;
    signal(SIGPIPE, SIG_IGN);
    rls_log_set_level("error");
    CHECK(uv_loop_init(&S.loop) == 0);
    rls_flags_defaults(&S.cfg);
    S.cfg.grpc_max_streams = 8;
    S.cfg.max_frame = 4096;
    strcpy(S.cfg.grpc_host, "127.0.0.1");
    CHECK(rls_policy_build(rules, 1, NULL, 16, &p, &d) == RL_OK);
    CHECK(rls_runtime_init(&S.rt, p, 16) == RL_OK);
    S.store = rls_store_memory_new(&S.loop);
    CHECK(S.store != NULL);
    rls_decider_opts_init(&o);
    o.store = S.store;
    o.rt = &S.rt;
    o.prefix = "rl:";
    o.prefix_len = 3;
    o.max_reqs = 16;
    CHECK(rls_decider_init(&S.decider, &o, S.err, sizeof(S.err)) == RL_OK);
    /* Port 0: the system picks one. Its own listener stays idle; clients
     * come through the Unix socket. */
    S.cfg.grpc_port = 0;
    rls_server_grpc_opts(&S.cfg, &go);
    CHECK(rls_grpc_start(&S.grpc, &S.loop, &go, &S.decider, S.err,
                         sizeof(S.err)) == 0);
    listen_unix();
    /* Small budgets, so that inputs of a few KiB are deferred, paused in
     * the middle of a header block and resumed from the stash. */
    rls_grpc_set_budget(S.grpc, 2048, 4096);
    CHECK(rls_envoy_conf_build_buf("fuzz", conf_yaml, sizeof(conf_yaml) - 1,
                                   &ec, &d) == RL_OK);
    rls_grpc_set_conf(S.grpc, ec);
    rls_estats_init(&S.estats, 8);
    rls_grpc_set_estats(S.grpc, &S.estats);
    rls_grpc_set_health(S.grpc, health_flip, NULL);
    {
        rls_rlqs_conf_t *rc;
        rls_rlqs_t *q;
        CHECK(rls_rlqs_conf_parse(rlqs_yaml, sizeof(rlqs_yaml) - 1, &rc, S.err,
                                  sizeof(S.err)) == 0);
        CHECK(rls_rlqs_new(&q, &S.loop, S.store, rc, "rl:") == 0);
        rls_grpc_set_rlqs(S.grpc, q);
    }
    uv_check_init(&S.loop, &S.tick);
    uv_check_start(&S.tick, on_tick);
}

static void on_store_closed(void *arg)
{
    (void)arg;
}

static void teardown(void)
{
    if (!S.up)
        return;
    rls_grpc_free(S.grpc);
    uv_close((uv_handle_t *)&S.listener, NULL);
    uv_close((uv_handle_t *)&S.tick, NULL);
    rls_decider_free(&S.decider);
    S.store->v->close(S.store, on_store_closed, NULL);
    uv_run(&S.loop, UV_RUN_DEFAULT);
    CHECK(uv_loop_close(&S.loop) == 0);
    rls_estats_free(&S.estats);
    rls_runtime_free(&S.rt);
    S.up = 0;
}

static void step(void)
{
    uv_run(&S.loop, UV_RUN_NOWAIT);
}

static uint64_t runs, received; /* for the replay's summary */

static void drain(int fd)
{
    char buf[65536];
    ssize_t r;

    while ((r = recv(fd, buf, sizeof(buf), MSG_DONTWAIT)) > 0)
        received += (uint64_t)r;
}

/* Queues into c->out without a socket. */
static void offline(h2r_t *c)
{
    memset(c, 0, sizeof(*c));
    c->fd = -1;
    CHECK(nghttp2_hd_deflate_new(&c->def, 4096) == 0);
    CHECK(nghttp2_hd_inflate_new(&c->inf) == 0);
}

/* A program's cursor: bytes past its end read as 0. */
typedef struct {
    const uint8_t *p;
    size_t n, off;
} prog_t;

static unsigned next(prog_t *r)
{
    return r->off < r->n ? r->p[r->off++] : 0;
}

#define PROG_OUT_MAX (1u << 20) /* bytes one program may build */
#define PIECES_MAX 512          /* pieces of the chosen size, per input */
#define FIELDS_MAX 32

enum {
    OP_CALL,      /* a: descriptor value; b: 1 compressed flag, 2 bad path,
                     4 an RLQS stream instead (rlqs_stream) */
    OP_HEADERS,   /* a: fields (0-31), 0x40 END_STREAM, 0x80 all alike;
                     b: value bytes / 16 */
    OP_BOMB,      /* a: value bytes / 16; b: references / 32; c: per frame /
                     64 + 1; d: 1 END_STREAM, 2 leave the block open */
    OP_BOMB_MORE, /* a: references / 32; b: 1 END_HEADERS */
    OP_DATA,      /* a: bytes; b: 1 END_STREAM */
    OP_SETTINGS,  /* a: initial window / 256 (0: a zero window) */
    OP_PING,
    OP_RST,      /* a: error code */
    OP_WINDOW,   /* a: increment / 256 + 1; b: 1 on the stream, else 0 */
    OP_RAW,      /* a: bytes of the program copied as they are */
    OP_TRAILERS, /* a: fields (0-31); b: value bytes / 16 */
    OP_SPLIT,    /* a request's headers, a: fields; HEADERS with the first
                    b * 4 bytes of the block, CONTINUATION with the rest */
    OP_COUNT
};

/* Fills nv with the request's fields and `k` more of `len` bytes each,
 * named alike (so the deflater inserts the first and refers to it) or
 * not. Returns how many. */
static size_t fields(nghttp2_nv *nv, int request, unsigned k, size_t len,
                     int alike)
{
    static char names[FIELDS_MAX][8];
    static uint8_t value[4096];
    static const char *const req[][2] = {
        {":method", "POST"},
        {":scheme", "http"},
        {":path", H2R_PATH},
        {":authority", "rl"},
        {"content-type", "application/grpc"},
    };
    size_t n = 0, i;

    memset(value, 'v', sizeof(value));
    if (len > sizeof(value))
        len = sizeof(value);
    for (i = 0; request && i < 5; i++, n++) {
        nv[n].name = (uint8_t *)req[i][0];
        nv[n].value = (uint8_t *)req[i][1];
        nv[n].namelen = strlen(req[i][0]);
        nv[n].valuelen = strlen(req[i][1]);
        nv[n].flags = NGHTTP2_NV_FLAG_NONE;
    }
    for (i = 0; i < k && i < FIELDS_MAX; i++, n++) {
        snprintf(names[i], sizeof(names[i]), "x-f%zu", alike ? 0 : i);
        nv[n].name = (uint8_t *)names[i];
        nv[n].namelen = strlen(names[i]);
        nv[n].value = value;
        nv[n].valuelen = len;
        nv[n].flags = NGHTTP2_NV_FLAG_NONE;
    }
    return n;
}

/* A RateLimitQuotaUsageReports of one bucket {name: api, t: <t>} (or,
 * with t NULL, a bucket id with no pairs), packed into a malloc'd buffer
 * (*n bytes). */
static uint8_t *rlqs_report(const char *domain, const char *t, uint64_t a,
                            size_t *n)
{
    Envoy__Service__RateLimitQuota__V3__RateLimitQuotaUsageReports r =
        ENVOY__SERVICE__RATE_LIMIT_QUOTA__V3__RATE_LIMIT_QUOTA_USAGE_REPORTS__INIT;
    Envoy__Service__RateLimitQuota__V3__RateLimitQuotaUsageReports__BucketQuotaUsage
        u = ENVOY__SERVICE__RATE_LIMIT_QUOTA__V3__RATE_LIMIT_QUOTA_USAGE_REPORTS__BUCKET_QUOTA_USAGE__INIT,
        *up = &u;
    Envoy__Service__RateLimitQuota__V3__BucketId b =
        ENVOY__SERVICE__RATE_LIMIT_QUOTA__V3__BUCKET_ID__INIT;
    Envoy__Service__RateLimitQuota__V3__BucketId__BucketEntry e[2] =
        {ENVOY__SERVICE__RATE_LIMIT_QUOTA__V3__BUCKET_ID__BUCKET_ENTRY__INIT,
         ENVOY__SERVICE__RATE_LIMIT_QUOTA__V3__BUCKET_ID__BUCKET_ENTRY__INIT},
                                                              *ep[2] = {&e[0],
                                                                        &e[1]};
    uint8_t *m;

    e[0].key = "name";
    e[0].value = "api";
    e[1].key = "t";
    e[1].value = (char *)(t != NULL ? t : "");
    b.n_bucket = t != NULL ? 2 : 0;
    b.bucket = ep;
    u.bucket_id = &b;
    u.num_requests_allowed = a;
    u.num_requests_denied = a / 2;
    r.domain = (char *)domain;
    r.n_bucket_quota_usages = 1;
    r.bucket_quota_usages = &up;
    *n =
        envoy__service__rate_limit_quota__v3__rate_limit_quota_usage_reports__get_packed_size(
            &r);
    CHECK((m = malloc(*n + 1)) != NULL);
    envoy__service__rate_limit_quota__v3__rate_limit_quota_usage_reports__pack(
        &r, m);
    return m;
}

/* An RLQS stream: headers, then `msgs` reports as DATA frames of one
 * message each (a: the bucket's t value and counts; kind 1: a first
 * report with no domain, 2: a bucket id with no pairs), END_STREAM on the
 * last unless open. */
static void rlqs_stream(h2r_t *c, int32_t sid, unsigned a, unsigned msgs,
                        int kind, int open)
{
    static const nghttp2_nv nv[] = {
        {(uint8_t *)":method", (uint8_t *)"POST", 7, 4, 0},
        {(uint8_t *)":scheme", (uint8_t *)"http", 7, 4, 0},
        {(uint8_t *)":path", (uint8_t *)RLS_RLQS_PATH, 5,
         sizeof(RLS_RLQS_PATH) - 1, 0},
        {(uint8_t *)":authority", (uint8_t *)"rl", 10, 2, 0},
        {(uint8_t *)"content-type", (uint8_t *)"application/grpc", 12, 16, 0},
    };
    char t[8];
    unsigned i;

    snprintf(t, sizeof(t), "%u", a % 4);
    h2r_headers(c, sid, nv, sizeof(nv) / sizeof(nv[0]), msgs == 0 && !open);
    for (i = 0; i < msgs; i++) {
        size_t n;
        uint8_t *m = rlqs_report(kind == 1 && i == 0 ? "" : "envoy",
                                 kind == 2 ? NULL : t, a + i, &n);
        uint8_t *f = malloc(n + 5);
        CHECK(f != NULL);
        f[0] = 0;
        f[1] = (uint8_t)(n >> 24);
        f[2] = (uint8_t)(n >> 16);
        f[3] = (uint8_t)(n >> 8);
        f[4] = (uint8_t)n;
        memcpy(f + 5, m, n);
        h2r_frame(c, NGHTTP2_DATA,
                  i + 1 == msgs && !open ? NGHTTP2_FLAG_END_STREAM : 0, sid, f,
                  n + 5);
        free(f);
        free(m);
    }
}

/* Turns a program into the bytes a client would send (into c->out). */
static void build(const uint8_t *p, size_t n, h2r_t *c)
{
    prog_t r = {p, n, 0};
    nghttp2_nv nv[FIELDS_MAX + 5];
    uint8_t buf[1024];
    int32_t sid = -1; /* the stream the ops go to */

    offline(c);
    while (r.off < r.n && c->out_len < PROG_OUT_MAX) {
        unsigned op = next(&r) % OP_COUNT, a = next(&r), b = next(&r);
        size_t k, i;

        switch (op) {
        case OP_CALL: {
            char v[8];
            if (b & 4) {
                /* An RLQS stream: b's next bits, its messages and kind. */
                sid += 2;
                rlqs_stream(c, sid, a, (b >> 3) & 3, (b >> 5) & 3,
                            (b >> 7) & 1);
                break;
            }
            const char *kv[2] = {"a", v};
            uint8_t *m;
            snprintf(v, sizeof(v), "%u", a);
            m = h2r_rls_request("d", kv, 1, 1, &k);
            CHECK(m != NULL);
            sid += 2;
            h2r_grpc(c, sid, (b & 2) ? "/x/y" : H2R_PATH, m, k, b & 1);
            free(m);
            break;
        }
        case OP_HEADERS:
            sid += 2;
            k = fields(nv, 1, a & 31, (size_t)b * 16, a & 0x80);
            h2r_headers(c, sid, nv, k, a & 0x40);
            break;
        case OP_BOMB: {
            unsigned per = next(&r), flags = next(&r);
            sid += 2;
            h2r_bomb(c, sid, a * 16 > 4000 ? 4000 : a * 16, (size_t)b * 32,
                     (size_t)per * 64 + 1, flags & 1, (flags & 2) != 0);
            break;
        }
        case OP_BOMB_MORE:
            h2r_bomb_more(c, sid > 0 ? sid : 1, (size_t)a * 32, b & 1);
            break;
        case OP_DATA:
            memset(buf, 0, a);
            if (a >= 5)
                buf[4] = (uint8_t)(a - 5); /* a whole gRPC message */
            h2r_frame(c, NGHTTP2_DATA, (b & 1) ? NGHTTP2_FLAG_END_STREAM : 0,
                      sid > 0 ? sid : 1, buf, a);
            break;
        case OP_SETTINGS: {
            nghttp2_settings_entry iv[1] = {
                {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, (uint32_t)a << 8}};
            h2r_settings(c, iv, 1);
            break;
        }
        case OP_PING:
            h2r_ping(c);
            break;
        case OP_RST:
            buf[0] = buf[1] = buf[2] = 0;
            buf[3] = (uint8_t)a;
            h2r_frame(c, NGHTTP2_RST_STREAM, 0, sid > 0 ? sid : 1, buf, 4);
            break;
        case OP_WINDOW: {
            uint32_t inc = ((uint32_t)a << 8) + 1;
            buf[0] = (uint8_t)(inc >> 24);
            buf[1] = (uint8_t)(inc >> 16);
            buf[2] = (uint8_t)(inc >> 8);
            buf[3] = (uint8_t)inc;
            h2r_frame(c, NGHTTP2_WINDOW_UPDATE, 0, (b & 1) && sid > 0 ? sid : 0,
                      buf, 4);
            break;
        }
        case OP_RAW:
            for (i = 0; i < a && r.off < r.n; i++)
                buf[i] = (uint8_t)next(&r);
            h2r_raw(c, buf, i);
            break;
        case OP_TRAILERS:
            k = fields(nv, 0, a & 31, (size_t)b * 16, 0);
            h2r_headers(c, sid > 0 ? sid : 1, nv, k, 1);
            break;
        case OP_SPLIT: {
            size_t bound;
            uint8_t *blk;
            ssize_t len;
            k = fields(nv, 1, a & 31, 64, a & 0x80);
            bound = nghttp2_hd_deflate_bound(c->def, nv, k);
            blk = malloc(bound);
            CHECK(blk != NULL);
            len = nghttp2_hd_deflate_hd(c->def, blk, bound, nv, k);
            CHECK(len >= 0);
            i = (size_t)b * 4 < (size_t)len ? (size_t)b * 4 : (size_t)len;
            sid += 2;
            h2r_frame(c, NGHTTP2_HEADERS, NGHTTP2_FLAG_END_STREAM, sid, blk, i);
            h2r_frame(c, NGHTTP2_CONTINUATION, NGHTTP2_FLAG_END_HEADERS, sid,
                      blk + i, (size_t)len - i);
            free(blk);
            break;
        }
        }
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const uint8_t settings[9] = {0, 0, 0, 4, 0, 0, 0, 0, 0};
    uint8_t mode;
    size_t off = 0, piece, pieces = 0;
    int fd, i, closed = 0;
    h2r_t prog;

    setup();
    if (size == 0)
        return 0;
    runs++;
    health_looks = 0;
    mode = data[0];
    data++;
    size--;
    /* An odd length: envoy-stop's two steps for calls of several
     * descriptors; else envoy-ratelimit's counting (the domain does not
     * say, and every bit of mode is taken). */
    rls_envoy_conf_set_counting((size & 1) ? RLS_ENVOY_COUNT_STOP
                                           : RLS_ENVOY_COUNT_ENVOY);
    /* Pieces of 1 to 241 bytes, stepping the loop after each; 31: all
     * at once (as much as the socket takes), for reads of many KiB. After
     * PIECES_MAX pieces the rest goes all at once: a program can build
     * up to PROG_OUT_MAX bytes, and sending those a byte a step (a send,
     * a loop step, a read, a recv each) took the target's time: 5% of the
     * corpus' inputs made 80% of its steps, and it ran at 200 inputs a
     * second. */
    piece = (mode >> 2) & 31;
    piece = piece == 31 ? SIZE_MAX : piece * 8 + 1;
    if (mode & 0x80) {
        build(data, size, &prog);
        data = prog.out;
        size = prog.out_len;
    }
    fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    CHECK(fd >= 0);
    CHECK(connect(fd, (struct sockaddr *)&S.addr, S.addrlen) == 0);
    fcntl(fd, F_SETFL, O_NONBLOCK);
    if (mode & 1) {
        CHECK(send(fd, "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", 24, 0) == 24);
        CHECK(send(fd, settings, 9, 0) == 9);
    }
    while (off < size) {
        size_t k = size - off < piece ? size - off : piece;
        ssize_t w = send(fd, data + off, k, MSG_NOSIGNAL);
        if (w < 0 && errno != EAGAIN)
            break; /* the server closed it */
        if (w > 0)
            off += (size_t)w;
        if (++pieces == PIECES_MAX)
            piece = SIZE_MAX;
        step();
        drain(fd);
    }
    shutdown(fd, SHUT_WR);
    /* The server answers what it was sent, then closes: bounded. */
    for (i = 0; i < 20000 && !closed; i++) {
        char buf[65536];
        ssize_t r;
        step();
        r = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
        if (r > 0)
            received += (uint64_t)r;
        if (r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK))
            closed = 1;
        else if (r < 0 && (mode & 2))
            uv_sleep(0);
    }
    close(fd);
    for (i = 0; i < 200 && !rls_grpc_idle(S.grpc); i++)
        step();
    /* A client that never completes its preface is closed only by the
     * idle timeout; everything else must be gone by now. */
    CHECK(!closed || rls_grpc_idle(S.grpc));
    for (i = 0; i < 200 && rls_decider_busy(&S.decider); i++)
        step();
    CHECK(!rls_decider_busy(&S.decider));
    /* The statistics the requests' values named render, escaped. */
    {
        rl_buf_t b;
        rl_buf_init(&b, 1 << 20);
        CHECK(rls_estats_metrics(&S.estats, &b) == RL_OK);
        CHECK(S.estats.values <= 8);
        rl_buf_free(&b);
    }
    if (mode & 0x80)
        h2r_close(&prog);
    return 0;
}

#ifdef RL_FUZZ_REPLAY

static void run_variants(const uint8_t *p, size_t n)
{
    uint8_t *b = malloc(n + 1);
    size_t i;

    CHECK(b != NULL);
    b[0] = 1; /* preface first, one piece per 1 byte... */
    memcpy(b + 1, p, n);
    LLVMFuzzerTestOneInput(b, n + 1);
    b[0] = 1 | (31 << 2); /* ...and all at once */
    LLVMFuzzerTestOneInput(b, n + 1);
    for (i = 1; i < n; i += 13)
        LLVMFuzzerTestOneInput(b, i + 1);
    for (i = 1; i < n + 1; i += 7) {
        b[i] ^= 0xa5;
        LLVMFuzzerTestOneInput(b, n + 1);
        b[i] ^= 0xa5;
    }
    free(b);
}

static const char *const calls[][8] = {
    {"a", "1", NULL},
    {"b", "x", "c", "y", NULL},
    {"z", "1", "u", "2", "r", "k", NULL},
    {"", "x", NULL},
};

static void synth(void)
{
    size_t k;

    for (k = 0; k < sizeof(calls) / sizeof(calls[0]); k++) {
        h2r_t c;
        const char *kv[8];
        size_t nkv = 0, len;
        uint8_t *m;
        int32_t id;

        while (calls[k][nkv] != NULL) {
            kv[nkv] = calls[k][nkv];
            nkv++;
        }
        offline(&c);
        for (id = 1; id < 8; id += 2) {
            m = h2r_rls_request(k == 3 ? "" : "d", kv, nkv / 2,
                                (uint32_t)id / 2, &len);
            CHECK(m != NULL);
            h2r_grpc(&c, id, id == 5 ? "/x/y" : H2R_PATH, m, len,
                     id == 7 ? 1 : 0);
            free(m);
        }
        run_variants(c.out, c.out_len);
        h2r_close(&c);
    }
    /* RLQS streams beside unary calls: reports then the client's end; a
     * stream left open; one with no domain; one with an empty bucket. */
    {
        h2r_t c;
        offline(&c);
        rlqs_stream(&c, 1, 1, 3, 0, 0);
        rlqs_stream(&c, 3, 2, 2, 0, 1);
        rlqs_stream(&c, 5, 3, 1, 1, 0);
        rlqs_stream(&c, 7, 4, 2, 2, 0);
        rlqs_stream(&c, 9, 5, 0, 0, 0);
        run_variants(c.out, c.out_len);
        h2r_close(&c);
    }
}

#include "walk.h"

/* A seed as it is, sent all at once and in small pieces, and with a few
 * random edits (byte 0, the mode, is kept: a program stays a program). */
static int run_file(const char *path)
{
    static uint8_t buf[65536], b[65536];
    /* Op codes, small counts, flags, an indexed reference (0xbe). */
    static const char alphabet[] = "\x01\x02\x03\x04\x05\x06\x07\x08\x09"
                                   "\x0a\x0b\x10\x20\x40\x7f\x80\xbe\xff";
    size_t n, m;
    int i;

    if (rlf_read(path, buf, sizeof(buf), &n) != 0)
        return 1;
    if (n == 0)
        return 0;
    LLVMFuzzerTestOneInput(buf, n);
    memcpy(b, buf, n);
    b[0] = (uint8_t)((buf[0] & 0x83) | (2 << 2));
    LLVMFuzzerTestOneInput(b, n);
    for (i = 0; i < 8; i++) {
        memcpy(b, buf, n);
        m = rlf_mutate(b, n, sizeof(b), 1 + (size_t)i % 3, alphabet, rlf_rand);
        LLVMFuzzerTestOneInput(b, m);
    }
    return 0;
}

int main(int argc, char **argv)
{
    rls_grpc_stats_t st;
    rls_rlqs_stats_t rq;
    size_t series;
    int files = 0, i;

    synth();
    for (i = 1; i < argc; i++)
        if (rlf_walk(argv[i], run_file, &files) != 0)
            return 1;
    st = *rls_grpc_stats(S.grpc);
    rq = *rls_rlqs_stats(rls_grpc_rlqs(S.grpc));
    series = S.estats.n;
    teardown();
    printf("fuzz_grpc: ok, %llu runs, %llu bytes answered, %d files; "
           "%llu streams reset over the header limit, %llu connections "
           "ended for it, %llu reads deferred; %zu statistics series\n",
           (unsigned long long)runs, (unsigned long long)received, files,
           (unsigned long long)st.streams_oversized,
           (unsigned long long)st.conns_headers,
           (unsigned long long)st.reads_deferred, series);
    printf("fuzz_grpc: RLQS %llu streams, %llu reports, %llu refused as "
           "bad, %llu assignments\n",
           (unsigned long long)rq.streams_total, (unsigned long long)rq.reports,
           (unsigned long long)rq.bad_reports,
           (unsigned long long)rq.assignments);
    /* The synthesized calls must have been answered, or nothing was
     * tested; and the seeds must have taken the header path. */
    if (received == 0 || rq.reports == 0 || rq.bad_reports == 0 ||
        rq.assignments == 0)
        return 1;
    if (files > 0 && (st.streams_oversized == 0 || st.conns_headers == 0 ||
                      st.reads_deferred == 0))
        return 1;
    return 0;
}
#endif
