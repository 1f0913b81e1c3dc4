/* Fuzz target: what a control plane sends rl-server's xDS client
 * (server/envoy/xds_client.c) on its stream: nghttp2's client session
 * (SETTINGS, HEADERS and HPACK, CONTINUATION, DATA, flow control, PING,
 * RST_STREAM, GOAWAY), the client's header bounds, the gRPC message
 * framing (the 5-byte prefix, compressed and oversized messages, a
 * message split across DATA frames, several in one), the DiscoveryResponse
 * built on the rebuild's thread and installed, and the ACK or NACK sent
 * back; on a real loop, over loopback TCP.
 *
 * Each input is one connection: rls_xds_start to a listener of the
 * target's own on 127.0.0.1, which accepts the client, reads and drops
 * what it sends (its preface, SETTINGS, the DiscoveryRequests), and
 * writes the input. The first byte chooses what the rest is and how it is
 * written:
 *   bit 0: the server's preface (an empty SETTINGS) first, or not;
 *   bit 1: framed: the rest is the DATA of stream 1's response, after the
 *          target's HEADERS (:status 200, content-type application/grpc),
 *          in DATA frames of up to 16 KiB (the DiscoveryResponse path);
 *          else the rest is raw HTTP/2 frames;
 *   bit 2: framed: the rest is one DiscoveryResponse, and the target adds
 *          the gRPC prefix (so mutations stay on the decoder's path);
 *   bits 3-4: written at once, or in up to 32 pieces of 1, 9 or 100
 *          bytes, the loop stepped between them.
 * The target steps the loop until the client is quiet and no build runs,
 * then resets the connection (SO_LINGER 0: no TIME_WAIT on either side,
 * so ports do not run out) and closes the client.
 *
 * Beyond "does not crash": at most one configuration is installed per
 * gRPC message, each counted as accepted; a build is never left running;
 * the client closes every handle, and nothing leaks (ASan/LSan).
 *
 * Built two ways (tests/fuzz/CMakeLists.txt, tests/fuzz/run.sh): with
 * clang's libFuzzer, and with RL_FUZZ_REPLAY as a plain program that runs
 * the seed corpus (corpus/xds_client, gen_xds_client_seeds.py) and
 * deterministic mutations of it in every build. */
#define _GNU_SOURCE /* accept4 */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <uv.h>

#include "base/log.h"
#include "envoy/xds_client.h"
#include "envoy/conf.h"
#include "rl_error.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond)                                                            \
    do {                                                                       \
        if (!(cond)) {                                                         \
            int e_ = errno; /* the last system call's, if it was one */    \
            fprintf(stderr, "fuzz_xds_client: %s:%d: %s (errno %d: %s)\n",   \
                    __FILE__, __LINE__, #cond, e_, strerror(e_));              \
            abort();                                                           \
        }                                                                      \
    } while (0)

#define QUIET_STEPS 4
#define PIECES_MAX 32
#define STEPS_MAX 200000

static struct {
    int up;
    uv_loop_t loop;
    int lfd; /* the listener */
    int port;
    uint64_t installed;
    uint8_t out[1 << 17]; /* what the target writes */
} S;

static void install(void *arg, rls_envoy_conf_t *conf)
{
    (void)arg;
    CHECK(conf != NULL);
    S.installed++;
    rls_envoy_conf_unref(conf);
}

static void setup(void)
{
    struct sockaddr_in sa;
    socklen_t len = sizeof(sa);

    if (S.up)
        return;
    S.up = 1;
    rls_log_set_level("error");
    CHECK(uv_loop_init(&S.loop) == 0);
    CHECK((S.lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC,
                          0)) >= 0);
    memset(&sa, 0, sizeof(sa));
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    CHECK(bind(S.lfd, (struct sockaddr *)&sa, sizeof(sa)) == 0);
    CHECK(listen(S.lfd, 16) == 0);
    CHECK(getsockname(S.lfd, (struct sockaddr *)&sa, &len) == 0);
    S.port = ntohs(sa.sin_port);
}

/* A frame header and payload at S.out + *n. */
static void frame(size_t *n, uint8_t type, uint8_t flags, uint32_t sid,
                  const uint8_t *p, size_t len)
{
    uint8_t *o = S.out + *n;

    CHECK(*n + 9 + len <= sizeof(S.out));
    o[0] = (uint8_t)(len >> 16);
    o[1] = (uint8_t)(len >> 8);
    o[2] = (uint8_t)len;
    o[3] = type;
    o[4] = flags;
    o[5] = (uint8_t)(sid >> 24 & 0x7f);
    o[6] = (uint8_t)(sid >> 16);
    o[7] = (uint8_t)(sid >> 8);
    o[8] = (uint8_t)sid;
    if (len > 0)
        memcpy(o + 9, p, len);
    *n += 9 + len;
}

/* What the target writes for this input, in S.out; its length. */
static size_t compose(const uint8_t *data, size_t size)
{
    /* :status 200 (static index 8); content-type (static name 31)
     * application/grpc, without indexing. */
    static const uint8_t hdrs[] = {0x88, 0x0f, 0x10, 0x10, 'a', 'p', 'p',
                                   'l',  'i',  'c',  'a',  't', 'i', 'o',
                                   'n',  '/',  'g',  'r',  'p', 'c'};
    const uint8_t *body = data + 1;
    size_t n = 0, blen = size - 1, off;

    if (data[0] & 1)
        frame(&n, 4 /* SETTINGS */, 0, 0, NULL, 0);
    if (!(data[0] & 2)) {
        CHECK(n + blen <= sizeof(S.out));
        memcpy(S.out + n, body, blen);
        return n + blen;
    }
    frame(&n, 1 /* HEADERS */, 4 /* END_HEADERS */, 1, hdrs, sizeof(hdrs));
    if (data[0] & 4) {
        /* One message: the gRPC prefix, then the DiscoveryResponse. */
        uint8_t msg[5 + 4096];
        size_t m = blen < 4096 ? blen : 4096;
        msg[0] = 0;
        msg[1] = (uint8_t)(m >> 24);
        msg[2] = (uint8_t)(m >> 16);
        msg[3] = (uint8_t)(m >> 8);
        msg[4] = (uint8_t)m;
        memcpy(msg + 5, body, m);
        frame(&n, 0 /* DATA */, 0, 1, msg, 5 + m);
        return n;
    }
    for (off = 0; off < blen; off += 16384) {
        size_t k = blen - off < 16384 ? blen - off : 16384;
        frame(&n, 0 /* DATA */, 0, 1, body + off, k);
    }
    return n;
}

/* Drops what the client sent; returns bytes read, -1 at its end. */
static ssize_t drop_input(int fd)
{
    static uint8_t buf[65536];
    ssize_t got = 0, k;

    for (;;) {
        k = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
        if (k > 0) {
            got += k;
            continue;
        }
        if (k == 0)
            return got > 0 ? got : -1;
        if (errno == EINTR)
            continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK)
            return got;
        return got > 0 ? got : -1;
    }
}

static void run_one(const uint8_t *data, size_t size)
{
    static const size_t pieces[4] = {0, 1, 9, 100};
    rls_xds_t x;
    rls_xds_opts_t o;
    struct linger lg = {1, 0};
    char err[256];
    size_t n, off = 0, piece, steps, nmsg_max;
    int fd = -1, quiet = 0, gone = 0, one = 1;

    setup();
    if (size == 0)
        return;
    n = compose(data, size);
    piece = pieces[(data[0] >> 3) & 3];
    /* Messages the bytes could hold: each takes 5 bytes at least. */
    nmsg_max = n / 5 + 1;
    S.installed = 0;

    memset(&o, 0, sizeof(o));
    o.host = "127.0.0.1";
    o.port = S.port;
    o.node_id = "fuzz";
    o.backoff_min_ms = 60000; /* no second connection within an input */
    o.backoff_max_ms = 60000;
    CHECK(rls_xds_start(&x, &S.loop, &o, install, NULL, err, sizeof(err)) ==
          0);
    /* The client resolves (on the thread pool) and connects. */
    for (steps = 0; fd < 0; steps++) {
        CHECK(steps < STEPS_MAX);
        uv_run(&S.loop, UV_RUN_NOWAIT);
        fd = accept4(S.lfd, NULL, NULL, SOCK_CLOEXEC);
        CHECK(fd >= 0 || errno == EAGAIN || errno == EWOULDBLOCK ||
              errno == EINTR);
    }
    CHECK(setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg)) == 0);
    CHECK(setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) == 0);
    for (steps = 0; quiet < QUIET_STEPS || x.rb.running; steps++) {
        int moved = 0;
        CHECK(steps < STEPS_MAX);
        if (off < n && !gone) {
            size_t want = piece == 0 || steps >= PIECES_MAX ? n - off
                          : piece < n - off                 ? piece
                                                            : n - off;
            ssize_t k = send(fd, S.out + off, want,
                             MSG_DONTWAIT | MSG_NOSIGNAL);
            if (k > 0) {
                off += (size_t)k;
                moved = 1;
            } else if (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK) {
                gone = 1; /* the client dropped the connection */
            }
        }
        /* A build on its thread: wait for its end rather than spin. */
        uv_run(&S.loop, x.rb.running ? UV_RUN_ONCE : UV_RUN_NOWAIT);
        if (!gone) {
            ssize_t k = drop_input(fd);
            if (k < 0)
                gone = 1;
            moved |= k > 0;
        }
        quiet = moved || (off < n && !gone) ? 0 : quiet + 1;
    }
    CHECK(S.installed == x.stats.accepted);
    CHECK(x.stats.accepted + x.stats.rejected + x.stats.superseded <=
          nmsg_max);
    close(fd);
    rls_xds_close(&x);
    /* Every handle closes (a build still running would hold the loop). */
    uv_run(&S.loop, UV_RUN_DEFAULT);
    CHECK(!uv_loop_alive(&S.loop));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    run_one(data, size);
    return 0;
}

#ifdef RL_FUZZ_REPLAY
#include "walk.h"

static uint8_t seeds[64][4096];
static size_t seed_len[64];
static int nseeds;

static int run_file(const char *path)
{
    static uint8_t buf[1 << 16];
    size_t n;

    if (rlf_read(path, buf, sizeof(buf), &n) != 0)
        return 1;
    if (n > 4096)
        n = 4096;
    run_one(buf, n);
    if (nseeds < 64) {
        memcpy(seeds[nseeds], buf, n);
        seed_len[nseeds++] = n;
    }
    return 0;
}

int main(int argc, char **argv)
{
    static const char alphabet[] = "\x00\x01\x04\x05\x08\x80\xff\x7f"
                                   "abcdomainkeyvalue";
    static uint8_t buf[4096 + 8];
    int i, files = 0, iters = 1000;

    for (i = 1; i < argc; i++)
        if (rlf_walk(argv[i], run_file, &files) != 0)
            return 1;
    if (files == 0) {
        fprintf(stderr, "fuzz_xds_client: no seed files\n");
        return 1;
    }
    for (i = 0; i < iters && nseeds > 0; i++) {
        int s = (int)(rlf_rand() % (unsigned)nseeds);
        size_t n = seed_len[s], edits = 1 + rlf_rand() % 4;

        memcpy(buf, seeds[s], n);
        n = rlf_mutate(buf, n, sizeof(buf) - 1, edits, alphabet + 1,
                       rlf_rand);
        if (n > 0 && rlf_rand() % 8 == 0)
            buf[0] ^= (uint8_t)(1u << (rlf_rand() % 5));
        LLVMFuzzerTestOneInput(buf, n);
    }
    printf("fuzz_xds_client replay: %d files, %d mutations, invariants "
           "held\n",
           files, iters);
    return 0;
}
#endif
