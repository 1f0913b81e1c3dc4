/* store_commands: which Redis commands should the Redis store send?
 *
 * Each candidate is driven exactly as store/redis.c would drive it: hiredis
 * async on a libuv loop, commands formatted by us into one reused buffer and
 * handed over with redisAsyncFormattedCommand, a fixed number of batches in
 * flight. The candidates:
 *
 *   pipe      INCRBY + PEXPIREAT per op, pipelined (not atomic: a connection
 *             lost between the two leaves a key without a TTL)
 *   multi     MULTI, INCRBY + PEXPIREAT per op, EXEC: one transaction per
 *             batch (atomic)
 *   eval1     one EVALSHA per op (INCRBY, PEXPIREAT when created)
 *   evalb     one EVALSHA per batch, PEXPIREAT always, array reply
 *   evalb_new one EVALSHA per batch, PEXPIREAT only when INCRBY created the
 *             key, array reply
 *   evalb_str as evalb_new, but the counts come back as one string
 *             ("12 7 e 3"), so hiredis builds one reply object per batch
 *             instead of one per op; each count is formatted with
 *             string.format('%.0f'), exact up to 2^53
 *   evalb_cat the production script (rls_redis_script, redis_script.lua),
 *             formatted by rls_redis_encode and read back by
 *             rls_redis_parse_reply, without a deadline: per op one
 *             window with a limit never reached and one request of cost 1,
 *             so MGET, the admission, INCRBY and PEXPIREAT when created
 *   store     server/store/redis.c itself (evalb_cat with a deadline, plus
 *             its bookkeeping), through rls_store_t: what rl-server really
 *             pays
 *
 * For each candidate, batch size (1, 16, 256 ops) and key pattern (distinct:
 * every op a key never seen before, like a crowd of new callers; repeat: the
 * same keys in every batch, like hot callers within one window) it prints
 * the median of a few runs: ops/s, Redis CPU seconds per million ops (INFO
 * cpu before and after), our own CPU seconds per million ops (getrusage)
 * and heap allocations per op in this process (hiredis included; counted
 * only in builds without sanitizers). Redis is private: started on a free
 * loopback port by rl_testsupport and stopped by pid.
 *
 * Usage: store_commands [runs] [ops per run] [batches in flight] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include <hiredis/async.h>
#include <hiredis/hiredis.h>
#include <hiredis/adapters/libuv.h>
#include <uv.h>

#include "store/redis.h"
#include "store/redis_encode.h"
#include "store/redis_parse.h"
#include "store/redis_script.h"
#include "store/store.h"
#include "rlt.h"

#ifdef RL_BENCH_COUNT_MALLOC
/* Counting allocator: glibc exports its allocator under __libc_* names, so
 * these definitions interpose on every malloc in the process, hiredis's
 * included, without dlsym tricks. */
extern void *__libc_malloc(size_t n);
extern void *__libc_calloc(size_t n, size_t m);
extern void *__libc_realloc(void *p, size_t n);
extern void __libc_free(void *p);
static unsigned long long n_alloc;

void *malloc(size_t n)
{
    n_alloc++;
    return __libc_malloc(n);
}

void *calloc(size_t n, size_t m)
{
    n_alloc++;
    return __libc_calloc(n, m);
}

void *realloc(void *p, size_t n)
{
    n_alloc++;
    return __libc_realloc(p, n);
}

void free(void *p)
{
    __libc_free(p);
}
#define ALLOCS() n_alloc
#else
#define ALLOCS() 0ULL
#endif

enum {
    S_PIPE,
    S_MULTI,
    S_EVAL1,
    S_EVALB,
    S_EVALB_NEW,
    S_EVALB_STR,
    S_EVALB_CAT,
    S_STORE,
    S_N
};

static const char *const strat_name[S_N] = {
    "pipe",      "multi",     "eval1",     "evalb",
    "evalb_new", "evalb_str", "evalb_cat", "store"};

static const char lua_eval1[] =
    "local n = redis.call('INCRBY', KEYS[1], ARGV[1]) "
    "if n == tonumber(ARGV[1]) then "
    "redis.call('PEXPIREAT', KEYS[1], ARGV[2]) end "
    "return n";

static const char lua_evalb[] =
    "local r = {} "
    "for i = 1, #KEYS do "
    "local n = redis.pcall('INCRBY', KEYS[i], ARGV[2*i-1]) "
    "if type(n) == 'number' then "
    "redis.call('PEXPIREAT', KEYS[i], ARGV[2*i]) end "
    "r[i] = n end "
    "return r";

static const char lua_evalb_new[] =
    "local r = {} "
    "for i = 1, #KEYS do "
    "local a = ARGV[2*i-1] "
    "local n = redis.pcall('INCRBY', KEYS[i], a) "
    "if type(n) == 'number' and n == tonumber(a) then "
    "redis.call('PEXPIREAT', KEYS[i], ARGV[2*i]) end "
    "r[i] = n end "
    "return r";

static const char lua_evalb_str[] =
    "local r = {} "
    "for i = 1, #KEYS do "
    "local a = ARGV[2*i-1] "
    "local n = redis.pcall('INCRBY', KEYS[i], a) "
    "if type(n) == 'number' then "
    "if n == tonumber(a) then "
    "redis.call('PEXPIREAT', KEYS[i], ARGV[2*i]) end "
    "r[i] = string.format('%.0f', n) "
    "else r[i] = 'e' end end "
    "return table.concat(r, ' ')";

typedef struct {
    char *p;
    size_t len, cap;
} sbuf_t;

typedef struct bench_s {
    uv_loop_t *loop;
    redisAsyncContext *ac;
    int strat;
    size_t batch;
    int distinct;
    uint64_t ops_target, ops_sent, ops_done;
    int inflight, depth;
    unsigned long long key_seq, bad;
    uint64_t expire_at_ms;
    char sha[S_N][41];
    sbuf_t cmd;
    size_t *offs; /* command boundaries inside cmd, for per-op strategies */
    rls_store_t *store;
    struct slot_s *slots; /* one per batch in flight, for the store */
    struct slot_s *cat;   /* evalb_cat's ops; replies read into them */
    rls_cmdbuf_t cat_cmd;
} bench_t;

/* A batch in flight through the store (or the script): its ops, their
 * window and cost, and their keys. */
typedef struct slot_s {
    bench_t *bn;
    rls_op_t ops[256];
    rls_op_window_t win[256];
    char keys[256][48];
} slot_t;

static void sb_grow(sbuf_t *b, size_t more)
{
    if (b->len + more <= b->cap)
        return;
    while (b->cap < b->len + more)
        b->cap = b->cap ? b->cap * 2 : 4096;
    b->p = realloc(b->p, b->cap);
    if (b->p == NULL) {
        fprintf(stderr, "out of memory\n");
        exit(1);
    }
}

static void sb_hdr(sbuf_t *b, size_t argc)
{
    sb_grow(b, 32);
    b->len += (size_t)sprintf(b->p + b->len, "*%zu\r\n", argc);
}

static void sb_arg(sbuf_t *b, const char *s, size_t n)
{
    sb_grow(b, n + 32);
    b->len += (size_t)sprintf(b->p + b->len, "$%zu\r\n", n);
    memcpy(b->p + b->len, s, n);
    b->len += n;
    memcpy(b->p + b->len, "\r\n", 2);
    b->len += 2;
}

static void sb_num(sbuf_t *b, unsigned long long v)
{
    char tmp[24];
    int n = snprintf(tmp, sizeof(tmp), "%llu", v);

    sb_arg(b, tmp, (size_t)n);
}

static size_t key_of(bench_t *bn, size_t i, char *out, size_t cap)
{
    unsigned long long id =
        bn->distinct ? bn->key_seq++ : (unsigned long long)i;
    int n = snprintf(out, cap, "rl:{bench:user:%llu}:60:29390400", id);

    return (size_t)n;
}

/* Fills sl's first batch ops: base key "rl:{bench:user:N}:r:b", one 60 s
 * window (counter "...:60:29390400") whose limit is never reached, one
 * request of cost 1. */
static void fill_ops(bench_t *bn, slot_t *sl)
{
    static const uint32_t one = 1;
    size_t i;

    for (i = 0; i < bn->batch; i++) {
        rls_op_t *op = &sl->ops[i];
        unsigned long long id =
            bn->distinct ? bn->key_seq++ : (unsigned long long)i;

        memset(op, 0, sizeof(*op));
        op->key = sl->keys[i];
        op->key_len = (size_t)snprintf(sl->keys[i], sizeof(sl->keys[i]),
                                       "rl:{bench:user:%llu}:r:b", id);
        op->tag_len = op->key_len - 4;
        op->scale = 1;
        sl->win[i].window_s = 60;
        sl->win[i].limit = UINT64_C(1) << 62;
        sl->win[i].index = 29390400;
        sl->win[i].expire_at_ms = bn->expire_at_ms;
        op->win = &sl->win[i];
        op->nwin = 1;
        op->costs = &one;
        op->ncosts = 1;
        op->equal_cost = 1;
    }
}

static void send_more(bench_t *bn);

static void batch_done(bench_t *bn)
{
    bn->inflight--;
    bn->ops_done += bn->batch;
    if (bn->ops_done >= bn->ops_target && bn->inflight == 0)
        uv_stop(bn->loop);
    else
        send_more(bn);
}

/* Checks one reply of a per-op command; the last command of a batch carries
 * the bench as privdata and completes the batch. */
static void on_op_reply(redisAsyncContext *ac, void *r, void *priv)
{
    redisReply *rep = r;
    bench_t *bn = ac->data;

    if (rep == NULL || rep->type == REDIS_REPLY_ERROR)
        bn->bad++;
    if (priv != NULL)
        batch_done(bn);
}

static void on_batch_reply(redisAsyncContext *ac, void *r, void *priv)
{
    redisReply *rep = r;
    bench_t *bn = ac->data;
    size_t i;

    (void)priv;
    if (rep == NULL || rep->type == REDIS_REPLY_ERROR) {
        bn->bad++;
    } else if (bn->strat == S_EVALB_CAT) {
        /* The production script's reply, read as the store reads it. */
        rls_redis_errs_t errs;
        if (rls_redis_parse_reply(rep, bn->cat->ops, bn->batch, NULL,
                                  &errs) != 0)
            bn->bad++;
        for (i = 0; i < bn->batch; i++)
            if (bn->cat->ops[i].err != 0 || bn->cat->ops[i].admitted != 1)
                bn->bad++;
    } else if (rep->type == REDIS_REPLY_ARRAY) {
        if (rep->elements != (bn->strat == S_MULTI ? 2 : 1) * bn->batch)
            bn->bad++;
        for (i = 0; i < rep->elements; i++)
            if (rep->element[i]->type != REDIS_REPLY_INTEGER)
                bn->bad++;
    } else if (rep->type == REDIS_REPLY_STRING) {
        /* Parse as the store does: one count per op. */
        const char *p = rep->str;
        for (i = 0; i < bn->batch; i++) {
            char *end;
            if (strtoll(p, &end, 10) <= 0 || end == p)
                bn->bad++;
            p = *end ? end + 1 : end;
        }
    } else {
        bn->bad++;
    }
    batch_done(bn);
}

static void format_op(bench_t *bn, const char *cmd, const char *key,
                      size_t klen, unsigned long long num)
{
    sb_hdr(&bn->cmd, 3);
    sb_arg(&bn->cmd, cmd, strlen(cmd));
    sb_arg(&bn->cmd, key, klen);
    sb_num(&bn->cmd, num);
}

static void send_batch(bench_t *bn)
{
    char key[64];
    size_t i, klen, nc = 0, b = bn->batch;
    sbuf_t *c = &bn->cmd;

    c->len = 0;
    switch (bn->strat) {
    case S_PIPE:
    case S_MULTI:
    case S_EVAL1:
        if (bn->strat == S_MULTI) {
            sb_hdr(c, 1);
            sb_arg(c, "MULTI", 5);
            bn->offs[nc++] = c->len;
        }
        for (i = 0; i < b; i++) {
            klen = key_of(bn, i, key, sizeof(key));
            if (bn->strat == S_EVAL1) {
                sb_hdr(c, 6);
                sb_arg(c, "EVALSHA", 7);
                sb_arg(c, bn->sha[S_EVAL1], 40);
                sb_arg(c, "1", 1);
                sb_arg(c, key, klen);
                sb_num(c, 1);
                sb_num(c, bn->expire_at_ms);
                bn->offs[nc++] = c->len;
                continue;
            }
            format_op(bn, "INCRBY", key, klen, 1);
            bn->offs[nc++] = c->len;
            format_op(bn, "PEXPIREAT", key, klen, bn->expire_at_ms);
            bn->offs[nc++] = c->len;
        }
        if (bn->strat == S_MULTI) {
            sb_hdr(c, 1);
            sb_arg(c, "EXEC", 4);
            bn->offs[nc++] = c->len;
        }
        for (i = 0; i < nc; i++) {
            size_t from = i ? bn->offs[i - 1] : 0;
            int last = i + 1 == nc;
            if (bn->strat == S_MULTI)
                redisAsyncFormattedCommand(bn->ac, last ? on_batch_reply : NULL,
                                           NULL, c->p + from,
                                           bn->offs[i] - from);
            else
                redisAsyncFormattedCommand(bn->ac, on_op_reply,
                                           last ? bn : NULL, c->p + from,
                                           bn->offs[i] - from);
        }
        break;
    case S_EVALB_CAT: {
        /* Replies carry no op data we keep: the ops of every batch in
         * flight may share one array. */
        fill_ops(bn, bn->cat);
        if (rls_redis_encode(&bn->cat_cmd, bn->sha[S_EVALB_CAT], bn->cat->ops,
                             b, bn->expire_at_ms - 120000, 0, 0) != 0) {
            fprintf(stderr, "out of memory\n");
            exit(1);
        }
        redisAsyncFormattedCommand(bn->ac, on_batch_reply, NULL, bn->cat_cmd.p,
                                   bn->cat_cmd.len);
        break;
    }
    default:
        sb_hdr(c, 3 + 3 * b);
        sb_arg(c, "EVALSHA", 7);
        sb_arg(c, bn->sha[bn->strat], 40);
        sb_num(c, b);
        for (i = 0; i < b; i++) {
            klen = key_of(bn, i, key, sizeof(key));
            sb_arg(c, key, klen);
        }
        for (i = 0; i < b; i++) {
            sb_num(c, 1);
            sb_num(c, bn->expire_at_ms);
        }
        redisAsyncFormattedCommand(bn->ac, on_batch_reply, NULL, c->p, c->len);
        break;
    }
    bn->inflight++;
    bn->ops_sent += b;
}

static void store_send(bench_t *bn, slot_t *sl);

static void on_store_batch(void *data, rls_op_t *ops, size_t n, int status)
{
    slot_t *sl = data;
    bench_t *bn = sl->bn;
    size_t i;

    if (status != 0)
        bn->bad++;
    for (i = 0; i < n; i++)
        if (ops[i].err != 0 || ops[i].admitted != 1 ||
            ops[i].win[0].before < 0)
            bn->bad++;
    bn->inflight--;
    bn->ops_done += n;
    if (bn->ops_done >= bn->ops_target && bn->inflight == 0)
        uv_stop(bn->loop);
    else if (bn->ops_sent < bn->ops_target)
        store_send(bn, sl);
}

static void store_send(bench_t *bn, slot_t *sl)
{
    fill_ops(bn, sl);
    bn->inflight++;
    bn->ops_sent += bn->batch;
    bn->store->v->submit(bn->store, sl->ops, bn->batch, on_store_batch, sl);
}

static void send_more(bench_t *bn)
{
    int i;

    if (bn->strat == S_STORE) {
        for (i = 0; i < bn->depth && bn->ops_sent < bn->ops_target; i++)
            store_send(bn, &bn->slots[i]);
        return;
    }
    while (bn->inflight < bn->depth && bn->ops_sent < bn->ops_target)
        send_batch(bn);
}

static void on_store_closed(void *arg)
{
    *(int *)arg = 1;
}

static double redis_cpu(redisContext *c)
{
    redisReply *r = redisCommand(c, "INFO cpu");
    double sys = 0, user = 0;
    const char *p;

    if (r == NULL || r->type != REDIS_REPLY_STRING) {
        fprintf(stderr, "INFO cpu failed\n");
        exit(1);
    }
    if ((p = strstr(r->str, "used_cpu_sys:")) != NULL)
        sys = strtod(p + 13, NULL);
    if ((p = strstr(r->str, "used_cpu_user:")) != NULL)
        user = strtod(p + 14, NULL);
    freeReplyObject(r);
    return sys + user;
}

static double self_cpu(void)
{
    struct rusage ru;

    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 +
           (double)ru.ru_stime.tv_sec + ru.ru_stime.tv_usec / 1e6;
}

static void must(redisContext *c, const char *cmd)
{
    redisReply *r = redisCommand(c, cmd);

    if (r == NULL || r->type == REDIS_REPLY_ERROR) {
        fprintf(stderr, "%s failed\n", cmd);
        exit(1);
    }
    freeReplyObject(r);
}

typedef struct {
    double ops_s, redis_cpu, self_cpu, allocs;
} result_t;

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;

    return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof(*v), cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static result_t run_once(bench_t *bn, redisContext *sc)
{
    double r0, s0, t0;
    unsigned long long a0;
    result_t res;

    must(sc, "FLUSHALL");
    bn->ops_sent = bn->ops_done = 0;
    bn->inflight = 0;
    r0 = redis_cpu(sc);
    s0 = self_cpu();
    a0 = ALLOCS();
    t0 = (double)uv_hrtime() / 1e9;
    send_more(bn);
    uv_run(bn->loop, UV_RUN_DEFAULT);
    res.ops_s = (double)bn->ops_done / ((double)uv_hrtime() / 1e9 - t0);
    res.allocs = (double)(ALLOCS() - a0) / (double)bn->ops_done;
    res.self_cpu = (self_cpu() - s0) * 1e6 / (double)bn->ops_done;
    res.redis_cpu = (redis_cpu(sc) - r0) * 1e6 / (double)bn->ops_done;
    return res;
}

static void load_scripts(bench_t *bn, redisContext *sc)
{
    static const char *const src[S_N] = {
        NULL, NULL, lua_eval1, lua_evalb, lua_evalb_new, lua_evalb_str,
        /* evalb_cat is the production script itself, from the store, so
         * that its figures are for what the server runs. */
        rls_redis_script, NULL};
    int s;

    for (s = 0; s < S_N; s++) {
        redisReply *r;
        if (src[s] == NULL)
            continue;
        r = redisCommand(sc, "SCRIPT LOAD %s", src[s]);
        if (r == NULL || r->type != REDIS_REPLY_STRING || r->len != 40) {
            fprintf(stderr, "SCRIPT LOAD failed\n");
            exit(1);
        }
        memcpy(bn->sha[s], r->str, 41);
        freeReplyObject(r);
    }
}

int main(int argc, char **argv)
{
    static const size_t sizes[] = {1, 16, 256};
    int runs = argc > 1 ? atoi(argv[1]) : 3;
    uint64_t ops = argc > 2 ? strtoull(argv[2], NULL, 10) : 100000;
    int depth = argc > 3 ? atoi(argv[3]) : 8;
    bench_t bn;
    rlt_redis_t rs;
    redisContext *sc;
    uv_loop_t loop;
    int s, d, r, status = 0;
    size_t z;

    if (runs < 1 || runs > 15 || ops < 256 || depth < 1) {
        fprintf(stderr, "usage: %s [runs 1-15] [ops>=256] [depth>=1]\n",
                argv[0]);
        return 2;
    }
    if (rlt_redis_start(&rs) != 0 || (sc = rlt_redis_connect(&rs)) == NULL) {
        fprintf(stderr, "cannot start redis-server\n");
        rlt_redis_stop(&rs);
        return 1;
    }
    memset(&bn, 0, sizeof(bn));
    uv_loop_init(&loop);
    bn.loop = &loop;
    bn.depth = depth;
    bn.offs = malloc(sizeof(size_t) * (2 * 256 + 2));
    bn.ac = redisAsyncConnect("127.0.0.1", rs.port);
    if (bn.offs == NULL || bn.ac == NULL || bn.ac->err ||
        redisLibuvAttach(bn.ac, &loop) != REDIS_OK) {
        fprintf(stderr, "cannot connect\n");
        rlt_redis_stop(&rs);
        return 1;
    }
    bn.ac->data = &bn;
    load_scripts(&bn, sc);
    {
        rls_redis_opts_t o;
        int i;

        memset(&o, 0, sizeof(o));
        o.host = "127.0.0.1";
        o.port = rs.port;
        o.timeout_ms = 5000;
        bn.store = rls_store_redis_new(&loop, &o);
        bn.slots = calloc((size_t)depth, sizeof(*bn.slots));
        bn.cat = calloc(1, sizeof(*bn.cat));
        if (bn.store == NULL || bn.slots == NULL || bn.cat == NULL) {
            fprintf(stderr, "out of memory\n");
            return 1;
        }
        for (i = 0; i < depth; i++)
            bn.slots[i].bn = &bn;
        while (!bn.store->v->up(bn.store))
            uv_run(&loop, UV_RUN_ONCE);
    }
    /* Keys expire two minutes from Redis's "now", like a 60 s window plus
     * grace; runs are far shorter, so nothing expires while measured. */
    {
        redisReply *t = redisCommand(sc, "TIME");
        if (t == NULL || t->type != REDIS_REPLY_ARRAY || t->elements != 2) {
            fprintf(stderr, "TIME failed\n");
            return 1;
        }
        bn.expire_at_ms =
            strtoull(t->element[0]->str, NULL, 10) * 1000 + 120000;
        freeReplyObject(t);
    }
    printf("redis-server %d, %d runs (median), %llu ops per run "
           "(1/5 for batch 1), %d batches in flight\n",
           rs.port, runs, (unsigned long long)ops, depth);
    printf("%-10s %5s %-8s %10s %14s %14s %10s\n", "strategy", "batch", "keys",
           "ops/s", "redis_cpu_s/M", "self_cpu_s/M", "allocs/op");
    /* Runs interleave the candidates (run 1 of each, then run 2 of
     * each...), so that a slow spell of a shared machine hits them all
     * alike instead of whichever happened to be measured then. */
    for (z = 0; z < sizeof(sizes) / sizeof(sizes[0]); z++) {
        for (d = 1; d >= 0; d--) {
            static double v[S_N][4][15];
            unsigned long long bad[S_N] = {0};

            bn.batch = sizes[z];
            bn.distinct = d;
            bn.ops_target = sizes[z] == 1 ? ops / 5 : ops;
            for (r = 0; r < runs; r++) {
                for (s = 0; s < S_N; s++) {
                    result_t res;

                    bn.strat = s;
                    bn.bad = 0;
                    res = run_once(&bn, sc);
                    bad[s] += bn.bad;
                    v[s][0][r] = res.ops_s;
                    v[s][1][r] = res.redis_cpu;
                    v[s][2][r] = res.self_cpu;
                    v[s][3][r] = res.allocs;
                }
            }
            for (s = 0; s < S_N; s++) {
                if (bad[s]) {
                    fprintf(stderr, "%s: %llu bad replies\n", strat_name[s],
                            bad[s]);
                    status = 1;
                }
                printf("%-10s %5zu %-8s %10.0f %14.2f %14.2f %10.2f\n",
                       strat_name[s], sizes[z], d ? "distinct" : "repeat",
                       median(v[s][0], runs), median(v[s][1], runs),
                       median(v[s][2], runs), median(v[s][3], runs));
            }
            fflush(stdout);
        }
    }
    {
        int closed = 0;

        bn.store->v->close(bn.store, on_store_closed, &closed);
        redisAsyncFree(bn.ac);
        uv_run(&loop, UV_RUN_DEFAULT);
        if (!closed)
            status = 1;
    }
    free(bn.slots);
    free(bn.cat);
    free(bn.cat_cmd.p);
    uv_loop_close(&loop);
    redisFree(sc);
    free(bn.cmd.p);
    free(bn.offs);
    rlt_redis_stop(&rs);
    return status;
}
