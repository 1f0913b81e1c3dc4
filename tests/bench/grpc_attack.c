/* grpc_attack: the attacks on rl-server's --grpc listener that
 * bench/grpc_attack.sh measures the server under. Frames by
 * tests/support/h2raw.c. Each mode runs for a bounded time and prints one
 * line of figures.
 *
 *   grpc_attack hpack PORT SECONDS [BYTES_PER_SEC]
 *     HPACK amplification: on one connection (a new one whenever the
 *     server closes it), header blocks that insert one 4,000-byte header
 *     into the dynamic table and then refer to it in CONTINUATION frames
 *     of 16,000 one-byte references (7 of them a block, within
 *     nghttp2's cap on CONTINUATION frames), at BYTES_PER_SEC (default
 *     800,000).
 *   grpc_attack zerowin PORT CONNS CALLS SECONDS
 *     CONNS connections that announce a zero flow-control window
 *     (SETTINGS_INITIAL_WINDOW_SIZE 0: the server may send no DATA) and
 *     make CALLS calls each, then keep reading; counts the connections
 *     the server ends within SECONDS.
 *   grpc_attack headers-only PORT CONNS SECONDS
 *     CONNS connections that each open one stream with HEADERS only and
 *     never finish it; counts the connections the server ends.
 *
 * Calls go to domain "bench" with the descriptor ("k", "<n>"), as
 * grpc_load's do (the server needs that --envoy-config). */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "h2raw.h"

static uint64_t now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static void usage(void)
{
    fprintf(stderr, "usage: grpc_attack hpack PORT SECONDS [BYTES_PER_SEC]\n"
                    "       grpc_attack zerowin PORT CONNS CALLS SECONDS\n"
                    "       grpc_attack headers-only PORT CONNS SECONDS\n");
    exit(2);
}

/* Sends what is queued on c without blocking; reads and parses what
 * came. Returns -1 once the server has closed the connection. */
static int step(h2r_t *c, int timeout_ms)
{
    struct pollfd pf;

    pf.fd = c->fd;
    pf.events = POLLIN | (c->out_len > 0 ? POLLOUT : 0);
    pf.revents = 0;
    if (poll(&pf, 1, timeout_ms) <= 0)
        return 0;
    return h2r_io(c, pf.revents);
}

static int hpack(int port, double secs, double rate)
{
    uint64_t t0 = now_ms(), end = t0 + (uint64_t)(secs * 1000);
    uint64_t sent = 0, conns = 0, blocks = 0, rsts = 0, goaways = 0;
    h2r_t c;
    int32_t id = 1;
    int up = 0;

    memset(&c, 0, sizeof(c));
    c.fd = -1;
    while (now_ms() < end) {
        size_t before;
        if (!up) {
            if (h2r_connect(&c, port, 0) != 0) {
                h2r_close(&c);
                poll(NULL, 0, 10);
                continue;
            }
            up = 1;
            conns++;
            id = 1;
        }
        /* Pace: bytes handed to the socket so far against the rate. */
        if ((double)sent > rate * (double)(now_ms() - t0) / 1000.0) {
            if (step(&c, 5) != 0)
                goto lost;
            continue;
        }
        if (c.out_len == 0) {
            before = c.out_len;
            /* One block: HEADERS with the insert and about 12,000
             * references, then 7 CONTINUATION frames of up to 16,000
             * (nghttp2 allows 8, but may count a frame twice when its
             * header comes in two reads). */
            if (h2r_bomb(&c, id, 4000, 12000 + 7 * 16000, 16000, 1, 0) != 0)
                goto lost;
            sent += c.out_len - before;
            blocks++;
            id += 2;
        }
        if (step(&c, 1) != 0)
            goto lost;
        continue;
    lost:
        rsts += (uint64_t)c.rsts;
        goaways += (uint64_t)c.goaway;
        h2r_close(&c);
        up = 0;
    }
    if (up) {
        rsts += (uint64_t)c.rsts;
        goaways += (uint64_t)c.goaway;
        h2r_close(&c);
    }
    printf("hpack: %.1f s, %llu bytes queued (%.0f B/s), %llu blocks, "
           "%llu connections, %llu RST_STREAM, %llu GOAWAY\n",
           (double)(now_ms() - t0) / 1000.0, (unsigned long long)sent,
           (double)sent * 1000.0 / (double)(now_ms() - t0 + 1),
           (unsigned long long)blocks, (unsigned long long)conns,
           (unsigned long long)rsts, (unsigned long long)goaways);
    return 0;
}

typedef struct {
    h2r_t h;
    int up;
    uint64_t ended_ms; /* when the server ended it (EOF), 0: not */
} conn_t;

/* Opens n connections, lets `queue` fill each one's output, and pumps
 * them all for secs; prints how many the server ended and when. */
static int many(const char *mode, int port, int n, int calls, double secs)
{
    conn_t *v = calloc((size_t)n, sizeof(*v));
    struct pollfd *pf = calloc((size_t)n, sizeof(*pf));
    uint64_t t0, end, first = 0, last = 0;
    int i, open = 0, ended = 0, goaways = 0;
    struct rlimit rl;

    if (v == NULL || pf == NULL)
        return 1;
    /* One descriptor per connection, and a few more. */
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < (rlim_t)n + 64) {
        rl.rlim_cur =
            rl.rlim_max < (rlim_t)n + 64 ? rl.rlim_max : (rlim_t)n + 64;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    for (i = 0; i < n; i++) {
        h2r_t *c = &v[i].h;
        int k;
        if (h2r_connect(c, port, 1) != 0) {
            h2r_close(c);
            continue;
        }
        v[i].up = 1;
        open++;
        h2r_raw(c, NGHTTP2_CLIENT_MAGIC, NGHTTP2_CLIENT_MAGIC_LEN);
        if (strcmp(mode, "zerowin") == 0) {
            nghttp2_settings_entry iv[1] = {
                {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, 0}};
            h2r_settings(c, iv, 1);
            for (k = 0; k < calls; k++) {
                char val[16];
                const char *kv[2] = {"k", val};
                size_t len;
                uint8_t *m;
                snprintf(val, sizeof(val), "%d", i * calls + k);
                m = h2r_rls_request("bench", kv, 1, 1, &len);
                if (m == NULL)
                    break;
                h2r_grpc(c, 2 * k + 1, H2R_PATH, m, len, 0);
                free(m);
            }
        } else {
            nghttp2_nv nv[] = {
                {(uint8_t *)":method", (uint8_t *)"POST", 7, 4, 0},
                {(uint8_t *)":scheme", (uint8_t *)"http", 7, 4, 0},
                {(uint8_t *)":path", (uint8_t *)H2R_PATH, 5,
                 sizeof(H2R_PATH) - 1, 0},
                {(uint8_t *)":authority", (uint8_t *)"rl", 10, 2, 0},
                {(uint8_t *)"content-type", (uint8_t *)"application/grpc", 12,
                 16, 0},
            };
            h2r_frame(c, NGHTTP2_SETTINGS, 0, 0, NULL, 0);
            h2r_headers(c, 1, nv, 5, 0);
        }
        /* Write it now: a connection the server accepted and read. */
        step(c, 0);
    }
    t0 = now_ms();
    end = t0 + (uint64_t)(secs * 1000);
    while (now_ms() < end && ended < open) {
        int k = 0;
        for (i = 0; i < n; i++) {
            if (!v[i].up || v[i].ended_ms != 0)
                continue;
            pf[k].fd = v[i].h.fd;
            pf[k].events = POLLIN | (v[i].h.out_len > 0 ? POLLOUT : 0);
            pf[k].revents = 0;
            k++;
        }
        if (poll(pf, (nfds_t)k, 100) <= 0)
            continue;
        k = 0;
        for (i = 0; i < n; i++) {
            if (!v[i].up || v[i].ended_ms != 0)
                continue;
            if (pf[k].revents != 0 && h2r_io(&v[i].h, pf[k].revents) != 0) {
                v[i].ended_ms = now_ms();
                if (first == 0)
                    first = v[i].ended_ms;
                last = v[i].ended_ms;
                ended++;
            }
            k++;
        }
    }
    for (i = 0; i < n; i++) {
        goaways += v[i].h.goaway > 0;
        if (v[i].up)
            h2r_close(&v[i].h);
    }
    printf("%s: %d connections open, %d ended by the server within %.1f s "
           "(%d with GOAWAY); first after %.1f s, last after %.1f s\n",
           mode, open, ended, secs, goaways,
           first ? (double)(first - t0) / 1000.0 : 0.0,
           last ? (double)(last - t0) / 1000.0 : 0.0);
    free(v);
    free(pf);
    return 0;
}

int main(int argc, char **argv)
{
    int port;

    if (argc < 4)
        usage();
    port = atoi(argv[2]);
    if (strcmp(argv[1], "hpack") == 0)
        return hpack(port, atof(argv[3]), argc > 4 ? atof(argv[4]) : 800000);
    if (strcmp(argv[1], "zerowin") == 0 && argc == 6)
        return many("zerowin", port, atoi(argv[3]), atoi(argv[4]),
                    atof(argv[5]));
    if (strcmp(argv[1], "headers-only") == 0 && argc == 5)
        return many("headers-only", port, atoi(argv[3]), 0, atof(argv[4]));
    usage();
    return 2;
}
