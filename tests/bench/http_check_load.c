/* A small load client for rl-server's HTTP check endpoint (--http): N
 * kept-alive connections, one thread each, each sending GET /check and
 * waiting for the answer (closed loop, --pipeline requests outstanding),
 * for a duration or a number of requests. Prints one line:
 *
 *   http_check requests=N allowed=A refused=R other=O seconds=S rate=X
 *   p50_us=P p99_us=Q
 *
 * allowed counts 200s, refused 429s and 403s, other everything else (and
 * a connection that fails ends its thread, exit status 1). Used for the
 * figures next to rl-bench and by the mixed-load test (http_check_mixed.sh),
 * which checks that allowed + rl-bench's allowed is exactly the limit.
 *
 *   http_check_load --addr 127.0.0.1:PORT --rule R [--key-prefix P]
 *                   [--keys N] [--connections N] [--duration S]
 *                   [--requests N] [--pipeline D] */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

typedef struct opts_s {
    char host[64];
    int port;
    const char *rule, *prefix;
    unsigned long keys, requests;
    int conns, pipeline;
    double duration;
} opts_t;

typedef struct worker_s {
    pthread_t th;
    const opts_t *o;
    unsigned long quota; /* requests to send; 0: until the deadline */
    uint64_t deadline_ns;
    uint64_t allowed, refused, other;
    uint32_t *lat; /* microseconds, per answer */
    size_t nlat, cap;
    uint64_t rng;
    int failed;
} worker_t;

static uint64_t now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static int dial(const opts_t *o)
{
    struct sockaddr_in a;
    struct timeval tv = {5, 0};
    int fd = socket(AF_INET, SOCK_STREAM, 0), one = 1;

    if (fd < 0)
        return -1;
    memset(&a, 0, sizeof(a));
    a.sin_family = AF_INET;
    a.sin_port = htons((uint16_t)o->port);
    if (inet_pton(AF_INET, o->host, &a.sin_addr) != 1 ||
        connect(fd, (struct sockaddr *)&a, sizeof(a)) != 0) {
        close(fd);
        return -1;
    }
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    return fd;
}

/* Parses whole responses at the front of buf; returns bytes consumed and
 * counts them, 0 if none is whole yet. */
static size_t take(worker_t *w, const char *buf, size_t len, int *status)
{
    const char *end = memmem(buf, len, "\r\n\r\n", 4), *cl;
    size_t hlen, blen = 0;

    if (end == NULL || len < 12)
        return 0;
    hlen = (size_t)(end - buf) + 4;
    cl = memmem(buf, hlen, "Content-Length: ", 16);
    if (cl != NULL)
        blen = strtoul(cl + 16, NULL, 10);
    if (len < hlen + blen)
        return 0;
    *status = atoi(buf + 9);
    (void)w;
    return hlen + blen;
}

static void *run(void *arg)
{
    worker_t *w = arg;
    const opts_t *o = w->o;
    static __thread char in[1 << 16];
    char req[512];
    size_t inlen = 0;
    uint64_t sent_at[64];
    unsigned long sent = 0, done = 0;
    int fd = dial(o), status, n;

    if (fd < 0) {
        w->failed = 1;
        return NULL;
    }
    for (;;) {
        int more = w->quota ? sent < w->quota : now_ns() < w->deadline_ns;
        while (more && sent - done < (unsigned long)o->pipeline) {
            w->rng ^= w->rng << 13;
            w->rng ^= w->rng >> 7;
            w->rng ^= w->rng << 17;
            n = snprintf(req, sizeof(req),
                         "GET /check?rule=%s&key=%s%lu HTTP/1.1\r\n"
                         "Host: rl\r\n\r\n",
                         o->rule, o->prefix, (unsigned long)(w->rng % o->keys));
            sent_at[sent % 64] = now_ns();
            if (send(fd, req, (size_t)n, MSG_NOSIGNAL) != n) {
                w->failed = 1;
                goto out;
            }
            sent++;
            more = w->quota ? sent < w->quota : 1;
        }
        if (done == sent)
            break;
        ssize_t got = recv(fd, in + inlen, sizeof(in) - inlen, 0);
        if (got <= 0) {
            w->failed = 1;
            goto out;
        }
        inlen += (size_t)got;
        size_t used;
        while ((used = take(w, in, inlen, &status)) > 0) {
            uint64_t lat = (now_ns() - sent_at[done % 64]) / 1000;
            if (status == 200)
                w->allowed++;
            else if (status == 429 || status == 403)
                w->refused++;
            else
                w->other++;
            if (w->nlat < w->cap)
                w->lat[w->nlat++] =
                    lat > UINT32_MAX ? UINT32_MAX : (uint32_t)lat;
            done++;
            memmove(in, in + used, inlen - used);
            inlen -= used;
        }
    }
out:
    close(fd);
    return NULL;
}

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;

    return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
    opts_t o = {"127.0.0.1", 0, "api", "k:", 1000, 0, 4, 1, 5.0};
    worker_t *w;
    uint64_t t0, t1, allowed = 0, refused = 0, other = 0;
    uint32_t *all;
    size_t nall = 0;
    int i, failed = 0;

    for (i = 1; i + 1 < argc; i += 2) {
        const char *f = argv[i], *v = argv[i + 1];
        if (!strcmp(f, "--addr")) {
            const char *c = strrchr(v, ':');
            if (c == NULL || (size_t)(c - v) >= sizeof(o.host))
                return 2;
            memcpy(o.host, v, (size_t)(c - v));
            o.host[c - v] = '\0';
            o.port = atoi(c + 1);
        } else if (!strcmp(f, "--rule")) {
            o.rule = v;
        } else if (!strcmp(f, "--key-prefix")) {
            o.prefix = v;
        } else if (!strcmp(f, "--keys")) {
            o.keys = strtoul(v, NULL, 10);
        } else if (!strcmp(f, "--requests")) {
            o.requests = strtoul(v, NULL, 10);
        } else if (!strcmp(f, "--connections")) {
            o.conns = atoi(v);
        } else if (!strcmp(f, "--pipeline")) {
            o.pipeline = atoi(v);
        } else if (!strcmp(f, "--duration")) {
            o.duration = atof(v);
        } else {
            fprintf(stderr, "http_check_load: unknown option %s\n", f);
            return 2;
        }
    }
    if (i != argc || o.port <= 0 || o.keys == 0 || o.conns < 1 ||
        o.conns > 256 || o.pipeline < 1 || o.pipeline > 64) {
        fprintf(stderr, "usage: http_check_load --addr HOST:PORT [--rule R] "
                        "[--key-prefix P] [--keys N] [--connections N] "
                        "[--duration S] [--requests N] [--pipeline D]\n");
        return 2;
    }
    w = calloc((size_t)o.conns, sizeof(*w));
    if (w == NULL)
        return 1;
    t0 = now_ns();
    for (i = 0; i < o.conns; i++) {
        w[i].o = &o;
        w[i].quota =
            o.requests
                ? o.requests / (unsigned long)o.conns +
                      ((unsigned long)i < o.requests % (unsigned long)o.conns)
                : 0;
        w[i].deadline_ns = t0 + (uint64_t)(o.duration * 1e9);
        w[i].cap = 4u << 20;
        w[i].lat = malloc(w[i].cap * sizeof(uint32_t));
        w[i].rng = 0x9e3779b97f4a7c15ull * (uint64_t)(i + 1) ^ t0;
        if (w[i].lat == NULL || pthread_create(&w[i].th, NULL, run, &w[i]) != 0)
            return 1;
    }
    for (i = 0; i < o.conns; i++) {
        pthread_join(w[i].th, NULL);
        allowed += w[i].allowed;
        refused += w[i].refused;
        other += w[i].other;
        nall += w[i].nlat;
        failed |= w[i].failed;
    }
    t1 = now_ns();
    all = malloc((nall ? nall : 1) * sizeof(uint32_t));
    if (all == NULL)
        return 1;
    nall = 0;
    for (i = 0; i < o.conns; i++) {
        memcpy(all + nall, w[i].lat, w[i].nlat * sizeof(uint32_t));
        nall += w[i].nlat;
        free(w[i].lat);
    }
    qsort(all, nall, sizeof(uint32_t), cmp_u32);
    double secs = (double)(t1 - t0) / 1e9;
    printf("http_check requests=%llu allowed=%llu refused=%llu other=%llu "
           "seconds=%.2f rate=%.0f p50_us=%u p99_us=%u\n",
           (unsigned long long)(allowed + refused + other),
           (unsigned long long)allowed, (unsigned long long)refused,
           (unsigned long long)other, secs,
           (double)(allowed + refused + other) / secs, nall ? all[nall / 2] : 0,
           nall ? all[nall * 99 / 100] : 0);
    free(all);
    free(w);
    return failed ? 1 : 0;
}
