/* baseline_hiredis: the fixed-window limiter users write today, as the
 * common Redis tutorials describe it, measured the way rl-bench measures
 * rl-server.
 *
 * Each of --threads threads owns one synchronous hiredis connection and
 * makes decisions back to back: INCR the window's key, and when the count
 * is 1 (the key was just created) EXPIRE it for the window's length; the
 * request is allowed when the count is within the limit. One round trip per
 * decision (two on a window's first hit), no pipelining, no batching: the
 * usual INCR-then-EXPIRE recipe, which is what rl-server is compared with.
 *
 * Keys are "<store-prefix>{<key-prefix><n>}:<window>:<index>", the layout
 * of rl-server's Redis store, with the index from the local clock and n
 * chosen uniformly among --keys or always 0 (--dist hot), like rl-bench's.
 * With --store-prefix rl: the baseline counts on the very keys rl-server's
 * runs created, so its INCRs find them and skip the EXPIRE round trip: the
 * baseline at its best. Prints decisions/s and latency percentiles, and with --json
 * the same field names as rl-bench.
 *
 *   baseline_hiredis --redis HOST:PORT [--threads 8] [--duration 10]
 *                    [--keys 100000] [--dist uniform|hot] [--limit 100]
 *                    [--window 60] [--key-prefix bench:]
 *                    [--store-prefix bl:] [--json FILE] */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <hiredis/hiredis.h>

#include "rl_hist.h"

#define MAX_THREADS 256

typedef struct opts_s {
    char host[256];
    int port;
    unsigned threads;
    double duration;
    uint32_t keys;
    int hot;
    uint64_t limit;
    uint32_t window;
    const char *prefix;
    const char *store_prefix;
    const char *json;
} opts_t;

typedef struct worker_s {
    pthread_t tid;
    const opts_t *o;
    unsigned idx;
    uint64_t allowed, denied, errors;
    rl_hist_t lat;
    int failed; /* could not connect */
} worker_t;

static uint64_t mono_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static uint64_t real_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* xorshift64*: ample for picking keys. */
static uint64_t next_rand(uint64_t *s)
{
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * UINT64_C(2685821657736338717);
}

static void *work(void *arg)
{
    worker_t *w = arg;
    const opts_t *o = w->o;
    struct timeval tv = {2, 0};
    redisContext *c = redisConnectWithTimeout(o->host, o->port, tv);
    uint64_t seed = mono_ns() ^ ((uint64_t)(w->idx + 1) << 40), end;
    char key[600];

    if (c == NULL || c->err) {
        fprintf(stderr, "baseline: cannot connect to %s:%d: %s\n", o->host,
                o->port, c ? c->errstr : "out of memory");
        w->failed = 1;
        redisFree(c);
        return NULL;
    }
    redisSetTimeout(c, tv);
    end = mono_ns() + (uint64_t)(o->duration * 1e9);
    for (;;) {
        uint64_t t0 = mono_ns(), k, win;
        redisReply *r;
        long long count;

        if (t0 >= end)
            break;
        k = o->hot ? 0 : ((next_rand(&seed) >> 32) * o->keys) >> 32;
        win = real_ms() / ((uint64_t)o->window * 1000);
        snprintf(key, sizeof(key), "%s{%s%" PRIu64 "}:%" PRIu32 ":%" PRIu64,
                 o->store_prefix, o->prefix, k, o->window, win);
        r = redisCommand(c, "INCR %s", key);
        if (r == NULL || r->type != REDIS_REPLY_INTEGER) {
            w->errors++;
            if (r == NULL)
                break; /* the connection is gone */
            freeReplyObject(r);
            continue;
        }
        count = r->integer;
        freeReplyObject(r);
        if (count == 1) {
            /* The usual recipe: a TTL on the first hit only. */
            r = redisCommand(c, "EXPIRE %s %u", key, (unsigned)o->window);
            if (r == NULL) {
                w->errors++;
                break;
            }
            freeReplyObject(r);
        }
        if ((uint64_t)count <= o->limit)
            w->allowed++;
        else
            w->denied++;
        rl_hist_record(&w->lat, mono_ns() - t0);
    }
    redisFree(c);
    return NULL;
}

static int parse_args(int argc, char **argv, opts_t *o)
{
    int i;

    memset(o, 0, sizeof(*o));
    snprintf(o->host, sizeof(o->host), "127.0.0.1");
    o->port = 6379;
    o->threads = 8;
    o->duration = 10;
    o->keys = 100000;
    o->limit = 100;
    o->window = 60;
    o->prefix = "bench:";
    o->store_prefix = "bl:";
    for (i = 1; i + 1 < argc; i += 2) {
        const char *n = argv[i], *v = argv[i + 1];
        char *end = NULL;

        errno = 0;
        if (strcmp(n, "--redis") == 0) {
            const char *colon = strrchr(v, ':');
            if (colon == NULL || (size_t)(colon - v) >= sizeof(o->host))
                return -1;
            memcpy(o->host, v, (size_t)(colon - v));
            o->host[colon - v] = '\0';
            o->port = (int)strtol(colon + 1, &end, 10);
            if (*end != '\0' || o->port <= 0 || o->port > 65535)
                return -1;
        } else if (strcmp(n, "--threads") == 0) {
            o->threads = (unsigned)strtoul(v, &end, 10);
            if (*end != '\0' || o->threads == 0 || o->threads > MAX_THREADS)
                return -1;
        } else if (strcmp(n, "--duration") == 0) {
            o->duration = strtod(v, &end);
            if (*end != '\0' || !(o->duration > 0) || o->duration > 86400)
                return -1;
        } else if (strcmp(n, "--keys") == 0) {
            unsigned long k = strtoul(v, &end, 10);
            if (*end != '\0' || k == 0 || k > UINT32_MAX)
                return -1;
            o->keys = (uint32_t)k;
        } else if (strcmp(n, "--dist") == 0) {
            if (strcmp(v, "hot") == 0)
                o->hot = 1;
            else if (strcmp(v, "uniform") != 0)
                return -1;
        } else if (strcmp(n, "--limit") == 0) {
            o->limit = strtoull(v, &end, 10);
            if (*end != '\0' || o->limit == 0)
                return -1;
        } else if (strcmp(n, "--window") == 0) {
            unsigned long w = strtoul(v, &end, 10);
            if (*end != '\0' || w == 0 || w > 31622400)
                return -1;
            o->window = (uint32_t)w;
        } else if (strcmp(n, "--key-prefix") == 0) {
            if (strlen(v) > 500)
                return -1;
            o->prefix = v;
        } else if (strcmp(n, "--store-prefix") == 0) {
            if (strlen(v) > 32)
                return -1;
            o->store_prefix = v;
        } else if (strcmp(n, "--json") == 0) {
            o->json = v;
        } else {
            return -1;
        }
        if (errno != 0)
            return -1;
    }
    return i == argc ? 0 : -1;
}

int main(int argc, char **argv)
{
    static worker_t w[MAX_THREADS];
    opts_t o;
    rl_hist_t lat;
    uint64_t allowed = 0, denied = 0, errors = 0, t0, t1;
    double secs, rate;
    unsigned i, started = 0;
    int failed = 0;

    if (parse_args(argc, argv, &o) != 0) {
        fprintf(stderr,
                "usage: baseline_hiredis --redis HOST:PORT [--threads N] "
                "[--duration S]\n"
                "         [--keys N] [--dist uniform|hot] [--limit N] "
                "[--window S]\n"
                "         [--key-prefix STR] [--store-prefix STR] "
                "[--json FILE]\n");
        return 2;
    }
    if (rl_hist_init(&lat, 8, UINT64_C(1) << 40) != 0) {
        fprintf(stderr, "baseline: out of memory\n");
        return 1;
    }
    t0 = mono_ns();
    for (i = 0; i < o.threads; i++) {
        w[i].o = &o;
        w[i].idx = i;
        if (rl_hist_init(&w[i].lat, 8, UINT64_C(1) << 40) != 0 ||
            pthread_create(&w[i].tid, NULL, work, &w[i]) != 0) {
            fprintf(stderr, "baseline: cannot start thread %u\n", i);
            failed = 1;
            break;
        }
        started++;
    }
    for (i = 0; i < started; i++) {
        pthread_join(w[i].tid, NULL);
        failed |= w[i].failed;
        allowed += w[i].allowed;
        denied += w[i].denied;
        errors += w[i].errors;
        rl_hist_merge(&lat, &w[i].lat);
    }
    t1 = mono_ns();
    for (i = 0; i < o.threads; i++)
        rl_hist_free(&w[i].lat);
    secs = (double)(t1 - t0) / 1e9;
    rate = (double)(allowed + denied) / secs;
    printf("baseline   %s:%d, %u threads, synchronous hiredis INCR (+EXPIRE "
           "on the first hit), %.2f s\n",
           o.host, o.port, o.threads, secs);
    printf("keys       %" PRIu32 " %s; limit %" PRIu64 " per %" PRIu32 " s\n",
           o.hot ? 1 : o.keys, o.hot ? "hot" : "uniform", o.limit, o.window);
    printf("decisions  %" PRIu64 " (%.0f/s): allowed %" PRIu64
           ", denied %" PRIu64 "; errors %" PRIu64 "\n",
           allowed + denied, rate, allowed, denied, errors);
    printf("latency    p50 %.1f us, p90 %.1f us, p99 %.1f us, p99.9 %.1f us, "
           "max %.1f us\n",
           rl_hist_percentile(&lat, 50) / 1e3,
           rl_hist_percentile(&lat, 90) / 1e3,
           rl_hist_percentile(&lat, 99) / 1e3,
           rl_hist_percentile(&lat, 99.9) / 1e3, (double)lat.max / 1e3);
    if (o.json != NULL) {
        FILE *f = fopen(o.json, "w");
        if (f == NULL) {
            fprintf(stderr, "baseline: cannot write %s: %s\n", o.json,
                    strerror(errno));
            failed = 1;
        } else {
            fprintf(f,
                    "{\n  \"threads\": %u,\n  \"keys\": %" PRIu32
                    ",\n  \"dist\": \"%s\",\n  \"decisions\": %" PRIu64
                    ",\n  \"seconds\": %.6f,\n  \"decisions_per_sec\": %.1f,"
                    "\n  \"allowed\": %" PRIu64 ",\n  \"denied\": %" PRIu64
                    ",\n  \"errors\": %" PRIu64 ",\n  \"p50_us\": %.1f,\n"
                    "  \"p90_us\": %.1f,\n  \"p99_us\": %.1f,\n"
                    "  \"p999_us\": %.1f,\n  \"max_us\": %.1f\n}\n",
                    o.threads, o.hot ? 1 : o.keys, o.hot ? "hot" : "uniform",
                    allowed + denied, secs, rate, allowed, denied, errors,
                    rl_hist_percentile(&lat, 50) / 1e3,
                    rl_hist_percentile(&lat, 90) / 1e3,
                    rl_hist_percentile(&lat, 99) / 1e3,
                    rl_hist_percentile(&lat, 99.9) / 1e3,
                    (double)lat.max / 1e3);
            if (fclose(f) != 0)
                failed = 1;
        }
    }
    rl_hist_free(&lat);
    return failed ? 1 : 0;
}
