/* redis_floor: what Redis itself spends per counter update, measured on the
 * keys rl-server uses, so that rl-server's Redis CPU per decision can be
 * read against it (tests/bench/redis_floor.sh runs both on one Redis).
 *
 *   redis_floor [--tls-ca FILE] PORT MODE OPS [BATCH] [KEYS]
 *
 * MODE incr:   pipelined INCR, one command per op: Redis's least work per
 *              counter update (no TTL set, no decision);
 * MODE script: one EVALSHA per BATCH ops of a script doing one INCRBY per
 *              key and PEXPIREAT when it created it, counts back as an
 *              array: the least a script that keeps every key with its TTL
 *              can do per op.
 * MODE getset: the same with a GET, then a SET ... PXAT of the value read
 *              plus one, per key: the least a script that must read a
 *              caller's state before it writes it (a gcra's TAT, a
 *              sliding-window-counter's counts) can do per op (Redis 7).
 * MODE log:    per key, GETRANGE of a 32-byte header, APPEND of a 24-byte
 *              entry, SETRANGE of the header, PEXPIREAT: the least a script
 *              that keeps a sliding window's log (store.h, RLS_SWL_*) can
 *              do per op that admits, with nothing dropped or parsed.
 * Keys: "rl:{floor:<n>}:r:b:60:1", n uniform over KEYS (default 100000)
 * from a fixed seed; 8 batches in flight (incr: 8 x BATCH commands).
 * Prints ops/s and Redis CPU seconds per million ops (INFO cpu, before and
 * after, on a second connection). Loopback only; OPS bounds the run.
 * --tls-ca: over TLS (Redis's tls-port), the certificate checked against
 * FILE and 127.0.0.1: the floor of the TLS runs (redis_tls.sh). The
 * connection is rl-ctl's (store/redis_sync.h): the same transport as every
 * program here that talks to Redis. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <hiredis/hiredis.h>

#include "store/redis_sync.h"
#include "store/redis_tls.h"

#define DEPTH 8
#define MAX_BATCH 4096

static const char script[] =
    "local r = {} "
    "for i = 1, #KEYS do "
    "local n = redis.call('INCRBY', KEYS[i], 1) "
    "if n == 1 then redis.call('PEXPIREAT', KEYS[i], ARGV[1]) end "
    "r[i] = n "
    "end "
    "return r";

static const char script_log[] =
    "local r = {} "
    "for i = 1, #KEYS do "
    "local h = redis.call('GETRANGE', KEYS[i], 0, 31) "
    "redis.call('APPEND', KEYS[i], '000000000000000000000001') "
    "redis.call('SETRANGE', KEYS[i], 0, "
    "'00000000000000000001000000000032') "
    "redis.call('PEXPIREAT', KEYS[i], ARGV[1]) "
    "r[i] = #h "
    "end "
    "return r";

static const char script_getset[] =
    "local r = {} "
    "for i = 1, #KEYS do "
    "local n = tonumber(redis.call('GET', KEYS[i]) or 0) + 1 "
    "redis.call('SET', KEYS[i], string.format('%d', n), 'PXAT', ARGV[1]) "
    "r[i] = n "
    "end "
    "return r";

static double redis_cpu(rls_redis_sync_t *c)
{
    const char *argv[2] = {"INFO", "cpu"};
    redisReply *r = rls_redis_sync_command(c, 2, argv, NULL);
    double v = -1;
    const char *u, *s;

    if (r != NULL && r->type == REDIS_REPLY_STRING &&
        (u = strstr(r->str, "used_cpu_user:")) != NULL &&
        (s = strstr(r->str, "used_cpu_sys:")) != NULL)
        v = atof(u + 14) + atof(s + 13);
    freeReplyObject(r);
    return v;
}

static uint64_t rng = 88172645463325252ull;

static unsigned next_key(unsigned keys)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (unsigned)(rng % keys);
}

int main(int argc, char **argv)
{
    static char keybuf[MAX_BATCH][48];
    static const char *av[MAX_BATCH + 4];
    static size_t al[MAX_BATCH + 4];
    char sha[41], nk[16], exp[24];
    int port, incr, getset, logs, k;
    unsigned long long ops, done = 0, bad = 0;
    unsigned batch, keys, i;
    rls_redis_sync_t *c, *m;
    rls_redis_tls_t *tls = NULL;
    redisReply *r;
    struct timespec t0, t1;
    double c0, c1, el;
    char err[256];

    if (argc > 2 && strcmp(argv[1], "--tls-ca") == 0) {
        rls_redis_tls_opts_t o = {.ca_file = argv[2]};
        if (rls_redis_tls_new(&o, &tls, err, sizeof(err)) != 0) {
            fprintf(stderr, "redis_floor: --tls-ca: %s\n", err);
            return 1;
        }
        argv += 2;
        argc -= 2;
    }
    if (argc < 4) {
        fprintf(stderr,
                "usage: %s [--tls-ca FILE] PORT incr|script|getset|log "
                "OPS [BATCH] [KEYS]\n",
                argv[0]);
        return 2;
    }
    port = atoi(argv[1]);
    incr = strcmp(argv[2], "incr") == 0;
    ops = strtoull(argv[3], NULL, 10);
    batch = argc > 4 ? (unsigned)atoi(argv[4]) : 256;
    keys = argc > 5 ? (unsigned)atoi(argv[5]) : 100000;
    getset = strcmp(argv[2], "getset") == 0;
    logs = strcmp(argv[2], "log") == 0;
    if ((!incr && !getset && !logs && strcmp(argv[2], "script") != 0) ||
        port <= 0 || port > 65535 || batch < 1 || batch > MAX_BATCH ||
        keys < 1 || ops < batch) {
        fprintf(stderr, "redis_floor: bad arguments\n");
        return 2;
    }
    c = rls_redis_sync_connect("127.0.0.1", port, tls, 10000, err, sizeof(err));
    m = c == NULL ? NULL
                  : rls_redis_sync_connect("127.0.0.1", port, tls, 10000, err,
                                           sizeof(err));
    if (c == NULL || m == NULL) {
        fprintf(stderr, "redis_floor: cannot connect to 127.0.0.1:%d: %s\n",
                port, err);
        return 1;
    }
    {
        const char *sl[3] = {"SCRIPT", "LOAD",
                             getset ? script_getset
                             : logs ? script_log
                                    : script};
        r = rls_redis_sync_command(m, 3, sl, NULL);
    }
    if (r == NULL || r->type != REDIS_REPLY_STRING || r->len != 40) {
        fprintf(stderr, "redis_floor: SCRIPT LOAD failed\n");
        return 1;
    }
    memcpy(sha, r->str, 41);
    freeReplyObject(r);
    snprintf(exp, sizeof(exp), "%lld", (long long)time(NULL) * 1000 + 600000);
    snprintf(nk, sizeof(nk), "%u", batch);
    c0 = redis_cpu(m);
    clock_gettime(CLOCK_MONOTONIC, &t0);
    while (done < ops) {
        for (k = 0; k < DEPTH; k++) {
            size_t a = 0;
            for (i = 0; i < batch; i++)
                snprintf(keybuf[i], sizeof(keybuf[i]), "rl:{floor:%u}:r:b:60:1",
                         next_key(keys));
            if (incr) {
                for (i = 0; i < batch; i++) {
                    const char *ia[2] = {"INCR", keybuf[i]};
                    if (rls_redis_sync_append(c, 2, ia, NULL) != 0) {
                        fprintf(stderr, "redis_floor: out of memory\n");
                        return 1;
                    }
                }
                continue;
            }
            av[a] = "EVALSHA", al[a++] = 7;
            av[a] = sha, al[a++] = 40;
            av[a] = nk, al[a++] = strlen(nk);
            for (i = 0; i < batch; i++)
                av[a] = keybuf[i], al[a++] = strlen(keybuf[i]);
            av[a] = exp, al[a++] = strlen(exp);
            if (rls_redis_sync_append(c, (int)a, av, al) != 0) {
                fprintf(stderr, "redis_floor: out of memory\n");
                return 1;
            }
        }
        for (k = 0; k < DEPTH; k++) {
            unsigned n = incr ? batch : 1;
            while (n-- > 0) {
                if ((r = rls_redis_sync_reply(c)) == NULL) {
                    fprintf(stderr, "redis_floor: %s\n",
                            rls_redis_sync_errstr(c));
                    return 1;
                }
                if (r->type != (incr ? REDIS_REPLY_INTEGER : REDIS_REPLY_ARRAY) ||
                    (!incr && r->elements != batch))
                    bad++;
                freeReplyObject(r);
            }
        }
        done += (unsigned long long)DEPTH * batch;
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    c1 = redis_cpu(m);
    el = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
    printf("%s ops=%llu batch=%u keys=%u ops_per_s=%.0f redis_s_per_M=%.3f "
           "bad=%llu\n",
           argv[2], done, batch, keys, (double)done / el,
           (c1 - c0) * 1e6 / (double)done, bad);
    rls_redis_sync_free(c);
    rls_redis_sync_free(m);
    rls_redis_tls_free(tls);
    return bad != 0 || c0 < 0 || c1 < 0;
}
