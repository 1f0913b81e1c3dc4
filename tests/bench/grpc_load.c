/* grpc_load: closed-loop load on rl-server's --grpc listener, as rl-bench
 * loads the native protocol: C connections, each keeping S calls of
 * Envoy's ShouldRateLimit in flight on its own HTTP/2 streams, for a
 * duration; prints calls/s, descriptor decisions/s and the latency
 * percentiles of the calls.
 *
 *   grpc_load PORT [CONNECTIONS [STREAMS [SECONDS [KEYS [DESCRIPTORS]]]]]
 *
 * Calls go to domain "bench", descriptors ("k", "<n>") with n uniform in
 * [0, KEYS); the server needs a descriptor file for it (bench/run_grpc.sh
 * writes one). Frames by tests/support/h2raw.c (HPACK by nghttp2). */
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "h2raw.h"

#define MAXC 64

typedef struct {
    h2r_t h;
    int32_t next_id;
    uint64_t *sent_ns; /* by (id - 1) / 2, for the ids of this run */
    size_t cap;
    int inflight;
} conn_t;

static uint64_t now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static uint32_t *lat; /* microseconds, one per call answered */
static size_t nlat, latcap;
static uint64_t ok_calls, bad_calls, measuring_from, stop_at;
static uint64_t rng = 88172645463325252u;
static int keys = 100000, ndesc = 1;

static void on_done(void *arg, int32_t id, int grpc, int http, uint32_t rst)
{
    conn_t *c = arg;
    uint64_t t = now_ns(), s;

    (void)http;
    c->inflight--;
    if ((size_t)(id - 1) / 2 >= c->cap)
        return;
    s = c->sent_ns[(id - 1) / 2];
    if (s < measuring_from)
        return;
    if (grpc == 0 && rst == 0)
        ok_calls++;
    else
        bad_calls++;
    if (nlat == latcap) {
        latcap = latcap ? latcap * 2 : 1 << 20;
        lat = realloc(lat, latcap * sizeof(*lat));
    }
    lat[nlat++] = (uint32_t)((t - s) / 1000);
}

static void send_one(conn_t *c)
{
    char vals[16][16];
    const char *kv[32];
    uint8_t *m;
    size_t n;
    int i;

    for (i = 0; i < ndesc; i++) {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        snprintf(vals[i], sizeof(vals[i]), "%d", (int)(rng % (uint64_t)keys));
        kv[2 * i] = "k";
        kv[2 * i + 1] = vals[i];
    }
    m = h2r_rls_request("bench", kv, (size_t)ndesc, 0, &n);
    if ((size_t)(c->next_id - 1) / 2 < c->cap)
        c->sent_ns[(c->next_id - 1) / 2] = now_ns();
    h2r_grpc(&c->h, c->next_id, H2R_PATH, m, n, 0);
    free(m);
    c->next_id += 2;
    c->inflight++;
}

static int cmp32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
    int port, nc = 4, streams = 64, i;
    double secs = 5, warm = 1;
    conn_t *cs;
    struct pollfd pf[MAXC];
    uint64_t t0;

    if (argc < 2) {
        fprintf(stderr, "usage: grpc_load PORT [CONNECTIONS [STREAMS "
                        "[SECONDS [KEYS [DESCRIPTORS]]]]]\n");
        return 2;
    }
    port = atoi(argv[1]);
    if (argc > 2)
        nc = atoi(argv[2]);
    if (argc > 3)
        streams = atoi(argv[3]);
    if (argc > 4)
        secs = atof(argv[4]);
    if (argc > 5)
        keys = atoi(argv[5]);
    if (argc > 6)
        ndesc = atoi(argv[6]);
    if (nc < 1 || nc > MAXC || streams < 1 || ndesc < 1 || ndesc > 16 ||
        keys < 1)
        return 2;
    cs = calloc((size_t)nc, sizeof(*cs));
    for (i = 0; i < nc; i++) {
        if (h2r_connect(&cs[i].h, port, 0) != 0) {
            fprintf(stderr, "grpc_load: cannot connect to %d\n", port);
            return 1;
        }
        cs[i].h.on_done = on_done;
        cs[i].h.arg = &cs[i];
        cs[i].next_id = 1;
        cs[i].cap = 1u << 22;
        cs[i].sent_ns = calloc(cs[i].cap, sizeof(uint64_t));
    }
    t0 = now_ns();
    measuring_from = t0 + (uint64_t)(warm * 1e9);
    stop_at = measuring_from + (uint64_t)(secs * 1e9);
    for (;;) {
        uint64_t t = now_ns();
        int busy = 0;
        for (i = 0; i < nc; i++) {
            /* The server's SETTINGS caps streams; keep within it. */
            while (t < stop_at && cs[i].inflight < streams &&
                   (size_t)(cs[i].next_id - 1) / 2 < cs[i].cap)
                send_one(&cs[i]);
            busy |= cs[i].inflight > 0;
            pf[i].fd = cs[i].h.fd;
            pf[i].events = POLLIN | (cs[i].h.out_len ? POLLOUT : 0);
            pf[i].revents = 0;
        }
        if (t >= stop_at && !busy)
            break;
        if (t >= stop_at + 5000000000u)
            break; /* answers lost: give up */
        if (poll(pf, (nfds_t)nc, 100) < 0)
            break;
        for (i = 0; i < nc; i++)
            if (pf[i].revents && h2r_io(&cs[i].h, pf[i].revents) != 0) {
                fprintf(stderr, "grpc_load: connection %d ended\n", i);
                return 1;
            }
    }
    qsort(lat, nlat, sizeof(*lat), cmp32);
    printf("grpc: connections=%d streams=%d descriptors=%d seconds=%.1f "
           "calls/s=%.0f decisions/s=%.0f p50_us=%u p99_us=%u errors=%llu\n",
           nc, streams, ndesc, secs, (double)ok_calls / secs,
           (double)ok_calls * ndesc / secs, nlat ? lat[nlat / 2] : 0,
           nlat ? lat[nlat * 99 / 100] : 0, (unsigned long long)bad_calls);
    for (i = 0; i < nc; i++) {
        h2r_close(&cs[i].h);
        free(cs[i].sent_ns);
    }
    free(cs);
    free(lat);
    return bad_calls > 0;
}
