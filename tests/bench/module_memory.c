/* module_memory: Redis memory per counter as the Lua script writes it and
 * as the ratelimit module (RL.BATCH) writes it, in one run on one Redis
 * that has the module loaded (tests/bench/module_memory.sh starts one,
 * and a replica without the module).
 *
 *   module_memory PORT [KEYS] [ROUNDS] [REPLICA_PORT]
 *
 * Per round, each path writes KEYS counters (default 100000) of one
 * request each, keys as rl-server names them ("rl:{c<n>}:r:t:60:<index>",
 * one 60 s window, its expiry 10 min away), in batches of 512 ops as
 * rl-server encodes them (EVAL of the script; RL.BATCH), each path into
 * a database of its own (so that both grow the same dictionaries from
 * empty), the order swapped every round; then every counter once more
 * (a count of 2). Prints, per path: used_memory growth per key (INFO
 * memory, before and after, also on the replica when given), MEMORY USAGE
 * averaged over 1,000 keys, and OBJECT ENCODING. Loopback only. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hiredis/hiredis.h>

#include "store/redis_encode.h"
#include "store/store.h"

#define BATCH 512

static long long used_memory(redisContext *c)
{
    redisReply *r = redisCommand(c, "INFO memory");
    const char *p;
    long long v = -1;

    if (r != NULL && r->type == REDIS_REPLY_STRING &&
        (p = strstr(r->str, "used_memory:")) != NULL)
        v = atoll(p + 12);
    freeReplyObject(r);
    return v;
}

static int must(redisContext *c, redisReply *r, const char *what)
{
    int bad = r == NULL || r->type == REDIS_REPLY_ERROR;

    if (bad)
        fprintf(stderr, "module_memory: %s: %s\n", what,
                r != NULL ? r->str : c->errstr);
    freeReplyObject(r);
    return bad ? -1 : 0;
}

static long long redis_ms(redisContext *c)
{
    redisReply *r = redisCommand(c, "TIME");
    long long ms = -1;

    if (r != NULL && r->type == REDIS_REPLY_ARRAY && r->elements == 2)
        ms = atoll(r->element[0]->str) * 1000 +
             atoll(r->element[1]->str) / 1000;
    freeReplyObject(r);
    return ms;
}

/* Writes counters 0..keys once through the script (module 0) or the
 * module, in the selected database. Returns 0 or -1. */
static int write_all(redisContext *c, int module, long keys, long long now)
{
    static char names[BATCH][32];
    static rls_op_t ops[BATCH];
    static rls_op_window_t win[BATCH];
    static const uint32_t one = 1;
    static rls_cmdbuf_t buf;
    long at = 0;

    while (at < keys) {
        size_t n = 0;
        redisReply *r;
        int rc;

        for (; n < BATCH && at < keys; n++, at++) {
            rls_op_t *op = &ops[n];
            snprintf(names[n], sizeof(names[n]), "rl:{c%ld}:r:t", at);
            memset(op, 0, sizeof(*op));
            op->key = names[n];
            op->key_len = strlen(names[n]);
            op->tag_len = (size_t)(strchr(names[n], '}') + 1 - names[n]);
            op->scale = 1;
            op->win = &win[n];
            op->nwin = 1;
            op->costs = &one;
            op->ncosts = 1;
            op->equal_cost = 1;
            win[n].window_s = 60;
            win[n].limit = 1000000000;
            win[n].index = (uint64_t)now / 60000;
            win[n].expire_at_ms = (uint64_t)now + 600000;
        }
        rc = module
                 ? rls_redis_encode_module(&buf, ops, n, (uint64_t)now, 1000, 0)
                 : rls_redis_encode(&buf, NULL, ops, n, (uint64_t)now, 1000, 0);
        if (rc != 0 ||
            redisAppendFormattedCommand(c, buf.p, buf.len) != REDIS_OK ||
            redisGetReply(c, (void **)&r) != REDIS_OK)
            return -1;
        if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 * n) {
            fprintf(stderr, "module_memory: %s: reply type %d %s\n",
                    module ? "RL.BATCH" : "EVAL", r->type,
                    r->type == REDIS_REPLY_ERROR ? r->str : "");
            freeReplyObject(r);
            return -1;
        }
        freeReplyObject(r);
    }
    return 0;
}

/* MEMORY USAGE averaged over 1,000 keys spread over 0..keys, and the
 * encoding of the first. */
static double usage(redisContext *c, long keys, long long now, char *enc,
                    size_t enc_len)
{
    long long sum = 0;
    long i, n = 0;

    enc[0] = '\0';
    for (i = 0; i < keys; i += keys / 1000 > 0 ? keys / 1000 : 1) {
        redisReply *r;
        char k[64];
        snprintf(k, sizeof(k), "rl:{c%ld}:r:t:60:%lld", i, now / 60000);
        r = redisCommand(c, "MEMORY USAGE %s SAMPLES 0", k);
        if (r != NULL && r->type == REDIS_REPLY_INTEGER) {
            sum += r->integer;
            n++;
        }
        freeReplyObject(r);
        if (i == 0) {
            r = redisCommand(c, "OBJECT ENCODING %s", k);
            if (r != NULL && r->type == REDIS_REPLY_STRING)
                snprintf(enc, enc_len, "%s", r->str);
            freeReplyObject(r);
        }
    }
    return n > 0 ? (double)sum / (double)n : -1;
}

int main(int argc, char **argv)
{
    static const char *const path[] = {"script", "module"};
    int port = argc > 1 ? atoi(argv[1]) : 0;
    long keys = argc > 2 ? atol(argv[2]) : 100000;
    int rounds = argc > 3 ? atoi(argv[3]) : 2;
    int rport = argc > 4 ? atoi(argv[4]) : 0;
    redisContext *c, *rc = NULL;
    int round, k, pass;

    if (port <= 0 || keys <= 0 || rounds <= 0 || rounds > 7) {
        fprintf(stderr, "usage: module_memory PORT [KEYS] [ROUNDS (1-7)] "
                        "[REPLICA_PORT]\n");
        return 2;
    }
    c = redisConnect("127.0.0.1", port);
    if (c == NULL || c->err)
        return 1;
    if (rport > 0 && ((rc = redisConnect("127.0.0.1", rport)) == NULL ||
                      rc->err))
        return 1;
    for (round = 0; round < rounds; round++) {
        for (k = 0; k < 2; k++) {
            /* script first in even rounds, module first in odd ones */
            int m = (k + round) % 2, db = 2 * round + k;
            long long now = redis_ms(c), u[3], ru[3] = {0, 0, 0};
            char enc[32];
            double mu;

            if (must(c, redisCommand(c, "SELECT %d", db), "SELECT") != 0 ||
                must(c, redisCommand(c, "FLUSHDB"), "FLUSHDB") != 0)
                return 1;
            if (rc != NULL &&
                (must(c, redisCommand(c, "WAIT 1 5000"), "WAIT") != 0 ||
                 must(rc, redisCommand(rc, "SELECT %d", db), "SELECT") != 0))
                return 1;
            for (pass = 0; pass < 3; pass++) {
                if (pass > 0 && write_all(c, m, keys, now) != 0)
                    return 1;
                if (rc != NULL) {
                    redisReply *w = redisCommand(c, "WAIT 1 10000");
                    if (w == NULL || w->type != REDIS_REPLY_INTEGER ||
                        w->integer != 1) {
                        fprintf(stderr, "module_memory: replica behind\n");
                        return 1;
                    }
                    freeReplyObject(w);
                    ru[pass] = used_memory(rc);
                }
                u[pass] = used_memory(c);
            }
            mu = usage(c, keys, now, enc, sizeof(enc));
            printf("round %d %s (db %d): %.1f B/key written once, %+.1f "
                   "after a second write; MEMORY USAGE %.1f B; encoding %s",
                   round + 1, path[m], db,
                   (double)(u[1] - u[0]) / (double)keys,
                   (double)(u[2] - u[1]) / (double)keys, mu, enc);
            if (rc != NULL) {
                mu = usage(rc, keys, now, enc, sizeof(enc));
                printf("; replica %.1f B/key, %+.1f, MEMORY USAGE %.1f B, "
                       "encoding %s",
                       (double)(ru[1] - ru[0]) / (double)keys,
                       (double)(ru[2] - ru[1]) / (double)keys, mu, enc);
            }
            printf("\n");
            fflush(stdout);
        }
    }
    redisFree(c);
    if (rc != NULL)
        redisFree(rc);
    return 0;
}
