/* Fuzz target: the --grpc listener's input path, end to end: nghttp2's
 * server session, the stream and message handling of server/net/grpc.c,
 * the RateLimitRequest decoding and descriptor mapping of
 * server/net/envoy_rls.c, the batcher and the memory store, on a real
 * libuv loop with the server's own tick.
 *
 * The input's first byte chooses how it is sent (a valid client preface
 * and SETTINGS first, or not; the size of the pieces it is written in);
 * the rest are the bytes a client sends on one connection. The target
 * steps the loop while writing and reading, half-closes, and steps until
 * the server has closed the connection.
 *
 * Invariants (abort on violation): the server closes the connection within
 * a bounded number of loop steps once the client has half-closed and every
 * answer is due (nothing hangs), no request is left in the batcher, and at
 * exit every handle closes and nothing leaks (ASan/LSan).
 *
 * Built with libFuzzer (tests/fuzz/run.sh) and, with RL_FUZZ_REPLAY, as a
 * plain program that synthesizes well-formed calls (headers by nghttp2's
 * HPACK deflater, tests/support/h2raw.c) and runs them whole, cut at
 * every few bytes and with bytes flipped, in every build. */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <uv.h>

#include "batch.h"
#include "log.h"
#include "net/grpc.h"
#include "policy/config.h"
#include "policy/envoy_conf.h"
#include "policy/runtime.h"
#include "rl_error.h"
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
    rls_config_t cfg;
    rls_store_t *store;
    rls_runtime_t rt;
    rls_batcher_t batcher;
    rls_grpc_t *grpc;
    uv_check_t tick;
} S;

static void on_tick(uv_check_t *h)
{
    (void)h;
    rls_batcher_flush(&S.batcher);
    rls_grpc_flush(S.grpc);
}

static void setup(void)
{
    const char *rules[] = {"api=2/1m,5/1h"};
    rls_policy_t *p = NULL;
    rls_envoy_conf_t *ec = NULL;
    rls_diag_t d;

    if (S.up)
        return;
    S.up = 1;
    signal(SIGPIPE, SIG_IGN);
    rls_log_set_level("error");
    CHECK(uv_loop_init(&S.loop) == 0);
    rls_config_defaults(&S.cfg);
    S.cfg.grpc_max_streams = 8;
    S.cfg.max_frame = 4096;
    strcpy(S.cfg.grpc_host, "127.0.0.1");
    CHECK(rls_policy_build(rules, 1, NULL, 16, &p, &d) == RL_OK);
    CHECK(rls_runtime_init(&S.rt, p, 16) == RL_OK);
    S.store = rls_store_memory_new(&S.loop);
    CHECK(S.store != NULL);
    rls_batcher_init(&S.batcher, S.store, &S.rt, "rl:", 3, 16, 1000, 1);
    /* Port 0: the system picks one, and the listener says which. */
    S.cfg.grpc_port = 0;
    CHECK(rls_grpc_start(&S.grpc, &S.loop, &S.cfg, &S.batcher) == 0);
    S.cfg.grpc_port = rls_grpc_port(S.grpc);
    CHECK(S.cfg.grpc_port > 0);
    CHECK(rls_envoy_conf_build_buf("fuzz", conf_yaml, sizeof(conf_yaml) - 1,
                                   &ec, &d) == RL_OK);
    rls_grpc_set_conf(S.grpc, ec);
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
    uv_close((uv_handle_t *)&S.tick, NULL);
    rls_batcher_free(&S.batcher);
    S.store->v->close(S.store, on_store_closed, NULL);
    uv_run(&S.loop, UV_RUN_DEFAULT);
    CHECK(uv_loop_close(&S.loop) == 0);
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

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const uint8_t settings[9] = {0, 0, 0, 4, 0, 0, 0, 0, 0};
    struct sockaddr_in a;
    uint8_t mode;
    size_t off = 0, piece;
    int fd, i, closed = 0;

    setup();
    if (size == 0)
        return 0;
    runs++;
    mode = data[0];
    data++;
    size--;
    piece = (size_t)(mode >> 2) * 8 + 1;
    fd = socket(AF_INET, SOCK_STREAM, 0);
    CHECK(fd >= 0);
    memset(&a, 0, sizeof(a));
    a.sin_family = AF_INET;
    a.sin_port = htons((uint16_t)S.cfg.grpc_port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    CHECK(connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0);
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
    for (i = 0; i < 200 && S.batcher.in_flight > 0; i++)
        step();
    CHECK(S.batcher.in_flight == 0);
    return 0;
}

#ifdef RL_FUZZ_REPLAY
#include "h2raw.h"

/* Queues into c->out without a socket. */
static void offline(h2r_t *c)
{
    memset(c, 0, sizeof(*c));
    c->fd = -1;
    CHECK(nghttp2_hd_deflate_new(&c->def, 4096) == 0);
    CHECK(nghttp2_hd_inflate_new(&c->inf) == 0);
}

static void run_variants(const uint8_t *p, size_t n)
{
    uint8_t *b = malloc(n + 1);
    size_t i;

    CHECK(b != NULL);
    b[0] = 1; /* preface first, one piece per 1 byte... */
    memcpy(b + 1, p, n);
    LLVMFuzzerTestOneInput(b, n + 1);
    b[0] = 1 | (63 << 2); /* ...and in big pieces */
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
}

#include "walk.h"

static int run_file(const char *path)
{
    static uint8_t buf[65536];
    size_t n;

    if (rlf_read(path, buf, sizeof(buf), &n) != 0)
        return 1;
    LLVMFuzzerTestOneInput(buf, n);
    return 0;
}

int main(int argc, char **argv)
{
    int files = 0, i;

    synth();
    for (i = 1; i < argc; i++)
        if (rlf_walk(argv[i], run_file, &files) != 0)
            return 1;
    teardown();
    printf("fuzz_grpc: ok, %llu runs, %llu bytes answered, %d files\n",
           (unsigned long long)runs, (unsigned long long)received, files);
    /* The synthesized calls must have been answered, or nothing was
     * tested. */
    return received > 0 ? 0 : 1;
}
#endif
