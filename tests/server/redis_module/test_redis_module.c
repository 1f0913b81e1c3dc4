/* The ratelimit Redis module (ratelimit.so, RL.BATCH) as Redis runs it,
 * against private redis-servers that load it by path ($RLT_MODULE_SO):
 * its writes persist in an AOF that a Redis without the module loads, with
 * the same counts and expiries (before and after BGREWRITEAOF); arguments
 * out of range are refused whole and no counter is left without an
 * expiry; a replica without the module holds what the master holds
 * after batches of every kind and edge (one EVAL a call; one SET or DEL a
 * write where the master has no EVAL); on a Redis Cluster it touches no
 * key outside the node's slot. (test_module_replicates in
 * test_store_redis.c replicates through the store too.) Every wait has a
 * deadline. */
#include <dirent.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <hiredis/hiredis.h>

#include "rlt.h"

#define NODES 3
#define SNAP_MAX 4096
/* 2^53 - 1: the module's largest time (RLM_MS_MAX). */
#define MS_MAX 9007199254740991LL

typedef struct fx_s {
    rlt_redis_t r[NODES];
    redisContext *c[NODES];
} fx_t;

static const char *module_so(void)
{
    const char *so = getenv("RLT_MODULE_SO");

    assert_non_null(so);
    return so;
}

static int fx_setup(void **state)
{
    fx_t *f = calloc(1, sizeof(*f));
    int i;

    if (f == NULL)
        return -1;
    for (i = 0; i < NODES; i++)
        f->r[i].pid = -1;
    *state = f;
    return 0;
}

/* Removes what a redis-server may leave in its directory beyond what
 * rlt_redis_stop removes (the AOF directory, nodes.conf). */
static void clean_dir(const char *dir)
{
    char path[512];
    int pass;

    for (pass = 0; pass < 2; pass++) {
        char sub[256];
        DIR *d;
        struct dirent *e;

        snprintf(sub, sizeof(sub), "%s%s", dir,
                 pass == 0 ? "/appendonlydir" : "");
        if ((d = opendir(sub)) == NULL)
            continue;
        while ((e = readdir(d)) != NULL) {
            if (e->d_name[0] == '.' || strcmp(e->d_name, "appendonlydir") == 0)
                continue;
            snprintf(path, sizeof(path), "%s/%s", sub, e->d_name);
            unlink(path);
        }
        closedir(d);
        if (pass == 0)
            rmdir(sub);
    }
}

static void node_stop(fx_t *f, int i)
{
    if (f->c[i] != NULL)
        redisFree(f->c[i]);
    f->c[i] = NULL;
    rlt_redis_kill(&f->r[i]);
    if (f->r[i].dir[0] != '\0')
        clean_dir(f->r[i].dir);
    rlt_redis_stop(&f->r[i]);
}

static int fx_teardown(void **state)
{
    fx_t *f = *state;
    int i;

    for (i = 0; i < NODES; i++)
        node_stop(f, i);
    free(f);
    return 0;
}

/* Starts node i with extra arguments, the module loaded when module is
 * set, and connects to it. */
static void node_start(fx_t *f, int i, int module, char *const extra[])
{
    char *argv[32];
    size_t n = 0, k;

    if (module) {
        argv[n++] = "--loadmodule";
        argv[n++] = (char *)module_so();
    }
    for (k = 0; extra != NULL && extra[k] != NULL; k++) {
        assert_true(n + 1 < sizeof(argv) / sizeof(argv[0]));
        argv[n++] = extra[k];
    }
    argv[n] = NULL;
    assert_int_equal(rlt_redis_start_with(&f->r[i], argv), 0);
    f->c[i] = rlt_redis_connect(&f->r[i]);
    assert_non_null(f->c[i]);
}

/* 1 while the server loads its data, 0 once it has, -1 when it is gone
 * (it answers INFO while it loads, and may exit on what it reads). */
static int loading(redisContext *c)
{
    redisReply *r = redisCommand(c, "INFO persistence");
    int busy;

    if (r == NULL || r->type != REDIS_REPLY_STRING) {
        if (r != NULL)
            freeReplyObject(r);
        return -1;
    }
    busy = strstr(r->str, "\nloading:0") == NULL; /* not async_ */
    freeReplyObject(r);
    return busy;
}

/* Node i again on its port and directory (after node_kill), once it has
 * loaded its data. */
static void node_restart(fx_t *f, int i, int module, char *const extra[])
{
    char *argv[32];
    size_t n = 0, k;
    uint64_t deadline = rlt_mono_ms() + 20000;
    int busy = -1;

    if (module) {
        argv[n++] = "--loadmodule";
        argv[n++] = (char *)module_so();
    }
    for (k = 0; extra != NULL && extra[k] != NULL; k++)
        argv[n++] = extra[k];
    argv[n] = NULL;
    if (rlt_redis_restart_with(&f->r[i], argv) == 0 &&
        (f->c[i] = rlt_redis_connect(&f->r[i])) != NULL)
        while ((busy = loading(f->c[i])) == 1 && rlt_mono_ms() < deadline)
            rlt_nap_ms(10);
    if (busy != 0) {
        char log[192];
        snprintf(log, sizeof(log), "%s/redis.log", f->r[i].dir);
        rlt_tail(log, 3);
        fail_msg("redis-server %s the module did not load its data",
                 module ? "with" : "without");
    }
}

static void node_kill(fx_t *f, int i)
{
    redisFree(f->c[i]);
    f->c[i] = NULL;
    rlt_redis_kill(&f->r[i]);
}

/* A command whose reply must not be an error; freed here. */
static void ok(redisContext *c, const char *fmt, ...)
{
    redisReply *r;
    va_list ap;

    va_start(ap, fmt);
    r = redisvCommand(c, fmt, ap);
    va_end(ap);
    assert_non_null(r);
    if (r->type == REDIS_REPLY_ERROR)
        fail_msg("%s: %s", fmt, r->str);
    freeReplyObject(r);
}

static long long int_of(redisContext *c, const char *fmt, const char *arg)
{
    redisReply *r = redisCommand(c, fmt, arg);
    long long v;

    assert_non_null(r);
    if (r->type != REDIS_REPLY_INTEGER)
        fail_msg("%s %s: reply type %d", fmt, arg, r->type);
    v = r->integer;
    freeReplyObject(r);
    return v;
}

static long long dbsize(redisContext *c)
{
    redisReply *r = redisCommand(c, "DBSIZE");
    long long v;

    assert_non_null(r);
    assert_int_equal(r->type, REDIS_REPLY_INTEGER);
    v = r->integer;
    freeReplyObject(r);
    return v;
}

static long long redis_ms(redisContext *c)
{
    redisReply *r = redisCommand(c, "TIME");
    long long ms;

    assert_non_null(r);
    assert_int_equal(r->elements, 2);
    ms = atoll(r->element[0]->str) * 1000 + atoll(r->element[1]->str) / 1000;
    freeReplyObject(r);
    return ms;
}

/* RL.BATCH with the arguments of fmt (printf-like) split at spaces, ''
 * standing for an empty one. Returns the reply (the caller frees it). */
static redisReply *rlb(redisContext *c, const char *fmt, ...)
{
    char buf[4096], *tok, *save = NULL;
    const char *argv[256];
    size_t lens[256];
    int n = 1;
    redisReply *r;
    va_list ap;

    va_start(ap, fmt);
    assert_true(vsnprintf(buf, sizeof(buf), fmt, ap) < (int)sizeof(buf));
    va_end(ap);
    argv[0] = "RL.BATCH";
    lens[0] = 8;
    for (tok = strtok_r(buf, " ", &save); tok != NULL;
         tok = strtok_r(NULL, " ", &save)) {
        assert_true(n < 256);
        if (strcmp(tok, "''") == 0)
            tok[0] = '\0';
        argv[n] = tok;
        lens[n++] = strlen(tok);
    }
    r = redisCommandArgv(c, n, argv, lens);
    assert_non_null(r);
    return r;
}

/* RL.BATCH that must be decided (an array reply). */
static void rlb_ok(redisContext *c, const char *fmt, ...)
{
    char buf[4096];
    redisReply *r;
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    r = rlb(c, "%s", buf);
    if (r->type != REDIS_REPLY_ARRAY)
        fail_msg("RL.BATCH %s: reply type %d %s", buf, r->type,
                 r->type == REDIS_REPLY_ERROR ? r->str : "");
    freeReplyObject(r);
}

/* ---- the keyspace, as a sorted list --------------------------------------*/

typedef struct {
    char key[128], type[16], val[96];
    long long pexp; /* PEXPIRETIME: -1 none */
} entry_t;

typedef struct {
    entry_t e[SNAP_MAX];
    size_t n;
} snap_t;

static int by_key(const void *a, const void *b)
{
    return strcmp(((const entry_t *)a)->key, ((const entry_t *)b)->key);
}

/* The keys matching pattern, sorted, with their types, values and
 * expiries. */
static void snap(redisContext *c, const char *pattern, snap_t *s)
{
    redisReply *keys = redisCommand(c, "KEYS %s", pattern), *r;
    size_t i;

    assert_non_null(keys);
    if (keys->type != REDIS_REPLY_ARRAY)
        fail_msg("KEYS %s: %s", pattern,
                 keys->type == REDIS_REPLY_ERROR ? keys->str : "?");
    assert_true(keys->elements <= SNAP_MAX);
    s->n = keys->elements;
    for (i = 0; i < s->n; i++) {
        entry_t *e = &s->e[i];
        const char *k = keys->element[i]->str;

        snprintf(e->key, sizeof(e->key), "%s", k);
        r = redisCommand(c, "TYPE %s", k);
        snprintf(e->type, sizeof(e->type), "%s", r->str);
        freeReplyObject(r);
        r = strcmp(e->type, "string") == 0 ? redisCommand(c, "GET %s", k)
                                           : redisCommand(c, "HGETALL %s", k);
        e->val[0] = '\0';
        if (r->type == REDIS_REPLY_STRING) {
            snprintf(e->val, sizeof(e->val), "%s", r->str);
        } else if (r->type == REDIS_REPLY_ARRAY) {
            size_t j, at = 0;
            for (j = 0; j < r->elements && at < sizeof(e->val); j++)
                at += (size_t)snprintf(e->val + at, sizeof(e->val) - at, "%s;",
                                       r->element[j]->str);
        }
        freeReplyObject(r);
        e->pexp = int_of(c, "PEXPIRETIME %s", k);
    }
    freeReplyObject(keys);
    qsort(s->e, s->n, sizeof(s->e[0]), by_key);
}

static void same_snap(const snap_t *a, const snap_t *b, const char *what)
{
    size_t i;

    if (a->n != b->n)
        fail_msg("%s: %zu keys, then %zu", what, a->n, b->n);
    for (i = 0; i < a->n; i++) {
        const entry_t *x = &a->e[i], *y = &b->e[i];
        if (strcmp(x->key, y->key) != 0 || strcmp(x->type, y->type) != 0 ||
            strcmp(x->val, y->val) != 0 || x->pexp != y->pexp)
            fail_msg("%s: %s %s \"%s\" expiring %lld, then %s %s \"%s\" "
                     "expiring %lld",
                     what, x->key, x->type, x->val, x->pexp, y->key, y->type,
                     y->val, y->pexp);
    }
}

/* Every counter (every key but the ":q" quota hashes) has an expiry (or
 * had: -2, gone since it was listed). Returns how many there are. */
static size_t all_expire(const snap_t *s)
{
    size_t i, n = 0;

    for (i = 0; i < s->n; i++) {
        size_t kl = strlen(s->e[i].key);
        if (kl >= 2 && strcmp(s->e[i].key + kl - 2, ":q") == 0)
            continue;
        if (s->e[i].pexp == -1)
            fail_msg("%s (%s) has no expiry", s->e[i].key, s->e[i].val);
        n++;
    }
    return n;
}

/* ---- AOF -----------------------------------------------------------------*/

/* Batches of every kind under tag t: runs of one profile, listed and
 * equal costs, refusals, a stored quota (its counters named by the
 * module), and a counter at 0 that a refusal removes. Every expiry is
 * minutes away (a grace of 10 min for the stored quota's windows), so
 * that none passes while a test compares. */
static void mix(redisContext *c, const char *t)
{
    long long now = redis_ms(c), exp = now + 600000, exp2 = now + 900000;
    char zero[64];
    int i;

    ok(c, "HSET rl:{%s}:q b %s", t, "3/60 5/3600");
    ok(c, "SET rl:{%s}:r:z:60:1 0 PX 600000", t);
    for (i = 0; i < 4; i++) {
        rlb_ok(c,
               "4 rl:{%s}:r:a:60:1 rl:{%s}:r:a:3600:1 rl:{%s}:r:c:60:1 "
               "rl:{%s}:r:c:3600:1 0 %lld 600000 2 1 2 %lld 5 %lld 7 r 2 1",
               t, t, t, t, now, exp, exp2);
        rlb_ok(c,
               "2 rl:{%s}:r:b:60:1 rl:{%s}:q 0 %lld 600000 1 0 0 1 b %lld "
               "10 1 3 1 2 1",
               t, t, now, exp);
        rlb_ok(c, "1 rl:{%s}:r:d:60:1 0 %lld 600000 1 0 0 1 '' %lld 4 -2 2", t,
               now, exp);
    }
    rlb_ok(c, "1 rl:{%s}:r:z:60:1 0 %lld 600000 1 0 0 1 '' %lld 4 -1 5", t, now,
           exp);
    snprintf(zero, sizeof(zero), "rl:{%s}:r:z:60:1", t);
    assert_int_equal(int_of(c, "EXISTS %s", zero), 0);
}

static int rewrite_done(redisContext *c)
{
    redisReply *r = redisCommand(c, "INFO persistence");
    int done;

    assert_non_null(r);
    if (strstr(r->str, "aof_last_bgrewrite_status:ok") == NULL)
        fail_msg("AOF rewrite failed: %s", r->str);
    done = strstr(r->str, "aof_rewrite_in_progress:0") != NULL &&
           strstr(r->str, "aof_rewrite_scheduled:0") != NULL;
    freeReplyObject(r);
    return done;
}

/* An AOF written by a Redis with the module loads into a Redis without
 * it, with the same counters, counts and expiries: from the AOF's first
 * file, and again after BGREWRITEAOF with batches on both sides of it. */
static void test_aof_loads_without_module(void **state)
{
    fx_t *f = *state;
    static char *const aof[] = {"--appendonly", "yes", "--appendfsync",
                                "always", NULL};
    static snap_t before, after;
    uint64_t deadline;
    size_t n;

    node_start(f, 0, 1, aof);
    mix(f->c[0], "a1");
    mix(f->c[0], "a2");
    snap(f->c[0], "*", &before);
    n = all_expire(&before);
    assert_true(n >= 10);
    /* appendfsync always: every reply came after its write. */
    node_kill(f, 0);
    node_restart(f, 0, 0, aof);
    snap(f->c[0], "*", &after);
    same_snap(&before, &after, "AOF loaded without the module");

    node_kill(f, 0);
    node_restart(f, 0, 1, aof);
    mix(f->c[0], "b1");
    ok(f->c[0], "BGREWRITEAOF");
    deadline = rlt_mono_ms() + 20000;
    while (!rewrite_done(f->c[0])) {
        assert_true(rlt_mono_ms() < deadline);
        rlt_nap_ms(10);
    }
    mix(f->c[0], "b2");
    mix(f->c[0], "a1"); /* counters from before the rewrite */
    snap(f->c[0], "*", &before);
    assert_true(all_expire(&before) > n);
    node_kill(f, 0);
    node_restart(f, 0, 0, aof);
    snap(f->c[0], "*", &after);
    same_snap(&before, &after, "rewritten AOF loaded without the module");
}

/* ---- arguments out of range ----------------------------------------------*/

/* RL.BATCH that must be refused with an error and change nothing. */
static void refused(redisContext *c, const char *fmt, ...)
{
    static snap_t before, after;
    char buf[4096];
    redisReply *r;
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    snap(c, "*", &before);
    r = rlb(c, "%s", buf);
    if (r->type != REDIS_REPLY_ERROR)
        fail_msg("RL.BATCH %s: accepted (reply type %d)", buf, r->type);
    freeReplyObject(r);
    snap(c, "*", &after);
    same_snap(&before, &after, buf);
}

/* A stored quota's counters are named from the clock and given the
 * window's end plus the grace: near 2^63 those overflowed. Every time
 * past 2^53 - 1, below 0, an expiry of 0, a scale out of (0, 1e6] is
 * refused whole; the edges themselves are decided, with expiries. */
static void test_out_of_range_refused(void **state)
{
    fx_t *f = *state;
    static snap_t s;
    redisContext *c;
    long long now, exp;
    const char *q = "2 rl:{o}:r:b:60:1 rl:{o}:q";

    node_start(f, 0, 1, NULL);
    c = f->c[0];
    now = redis_ms(c);
    exp = now + 600000;
    ok(c, "HSET rl:{o}:q b %s", "3/60 5/3600");
    /* The clock and the grace of a stored quota. */
    refused(c, "%s 0 9223372036854775807 1000 1 0 0 1 b %lld 10 1 -1 1", q,
            exp);
    refused(c, "%s 0 9223372036854775000 1000 1 0 0 1 b %lld 10 1 -1 1", q,
            exp);
    refused(c, "%s 0 %lld 1000 1 0 0 1 b %lld 10 1 -1 1", q, MS_MAX + 1, exp);
    refused(c, "%s 0 %lld 9223372036854775807 1 0 0 1 b %lld 10 1 -1 1", q, now,
            exp);
    refused(c, "%s 0 %lld %lld 1 0 0 1 b %lld 10 1 -1 1", q, now, MS_MAX + 1,
            exp);
    refused(c, "%s 0 -1 1000 1 0 0 1 b %lld 10 1 -1 1", q, exp);
    refused(c, "%s 0 %lld -1 1 0 0 1 b %lld 10 1 -1 1", q, now, exp);
    refused(c, "%s -1 %lld 1000 1 0 0 1 b %lld 10 1 -1 1", q, now, exp);
    refused(c, "%s 9223372036854775807 %lld 1000 1 0 0 1 b %lld 10 1 -1 1", q,
            now, exp);
    /* Expiries, of a profile and of an op. */
    refused(c, "1 rl:{o}:r:a:60:1 0 %lld 1000 1 1 1 -1 5 1", now);
    refused(c, "1 rl:{o}:r:a:60:1 0 %lld 1000 1 1 1 0 5 1", now);
    refused(c, "1 rl:{o}:r:a:60:1 0 %lld 1000 1 1 1 9223372036854775807 5 1",
            now);
    refused(c, "1 rl:{o}:r:a:60:1 0 %lld 1000 1 1 1 %lld 5 1", now, MS_MAX + 1);
    refused(c, "1 rl:{o}:r:a:60:1 0 %lld 1000 1 0 0 1 '' -1 5 -1 1", now);
    refused(c, "1 rl:{o}:r:a:60:1 0 %lld 1000 1 0 0 1 '' 0 5 -1 1", now);
    refused(c, "%s 0 %lld 1000 1 0 0 1 b -1 10 1 -1 1", q, now);
    /* The scale. */
    refused(c, "%s 0 %lld 1000 1 0 0 1 b %lld 10 0 -1 1", q, now, exp);
    refused(c, "%s 0 %lld 1000 1 0 0 1 b %lld 10 -1 -1 1", q, now, exp);
    refused(c, "%s 0 %lld 1000 1 0 0 1 b %lld 10 nan -1 1", q, now, exp);
    refused(c, "%s 0 %lld 1000 1 0 0 1 b %lld 10 inf -1 1", q, now, exp);
    refused(c, "%s 0 %lld 1000 1 0 0 1 b %lld 10 1e300 -1 1", q, now, exp);
    /* Costs and limits, as before. */
    refused(c, "1 rl:{o}:r:a:60:1 0 %lld 1000 1 1 1 %lld -1 1", now, exp);
    refused(c, "1 rl:{o}:r:a:60:1 0 %lld 1000 1 1 1 %lld 5 -1 1 0", now, exp);
    snap(c, "*", &s);
    assert_int_equal(s.n, 1); /* the quota alone */

    /* The edges are decided, and every counter gets its expiry. */
    rlb_ok(c, "%s 0 %lld %lld 1 0 0 1 b %lld 10 1000000 -1 1", q, MS_MAX,
           MS_MAX, MS_MAX);
    rlb_ok(c, "%s %lld 0 0 1 0 0 1 b 1 10 0.001 -1 1", q, MS_MAX);
    rlb_ok(c, "1 rl:{o}:r:a:60:1 0 %lld 1000 1 1 1 %lld 5 1", now, MS_MAX);
    snap(c, "*", &s);
    assert_true(all_expire(&s) >= 3);
}

/* Batches of edge values in every time, expiry, scale, limit and cost
 * (most out of range, some at the edge, some ordinary), on counters
 * absent, at 0 or counting: a batch is refused exactly when one is out of
 * range, a refused one changes nothing, and no counter is ever left
 * without an expiry. */
static void test_edge_values_leave_no_key_without_ttl(void **state)
{
    enum { ROUNDS = 300 };
    fx_t *f = *state;
    static snap_t before, after;
    static const long long times[] = {
        -1,         0,         1,         MS_MAX,
        MS_MAX + 1, INT64_MAX, INT64_MIN, 4611686018427387904LL};
    static const char *const scales[] = {"1",   "0.5",   "0",       "-1", "nan",
                                         "inf", "1e300", "1000000", "1e7"};
    static const char *const limits[] = {"5", "0", "9223372036854775807", "-1"};
    static const char *const costs[] = {"1", "3", "0", "-1"};
    redisContext *c;
    long long now;
    uint64_t lcg = 20261125;
    size_t round, nbad = 0, nok = 0;

    node_start(f, 0, 1, NULL);
    c = f->c[0];
    now = redis_ms(c);
    for (round = 0; round < ROUNDS; round++) {
        long long t[5];
        const char *sc, *li, *co;
        char tag[32], pat[48];
        redisReply *r;
        int bad, k, pick[8];

        for (k = 0; k < 8; k++) {
            lcg = lcg * 6364136223846793005ULL + 1442695040888963407ULL;
            pick[k] = (int)((lcg >> 33) % 64);
        }
        /* Each ordinary 7 times in 8: about half the batches have
         * nothing out of range. */
        t[0] = pick[0] < 56 ? 0 : times[pick[0] % 8];            /* deadline */
        t[1] = pick[1] < 56 ? now : times[pick[1] % 8];          /* clock */
        t[2] = pick[2] < 56 ? 600000 : times[pick[2] % 8];       /* grace */
        t[3] = pick[3] < 56 ? now + 600000 : times[pick[3] % 8]; /* expiries */
        t[4] = pick[4] < 56 ? now + 600000 : times[pick[4] % 8];
        sc = pick[5] < 56 ? "1" : scales[pick[5] % 9];
        li = pick[6] < 56 ? "5" : limits[pick[6] % 4];
        co = pick[7] < 56 ? "1" : costs[pick[7] % 4];
        bad = t[0] < 0 || t[0] > MS_MAX || t[1] < 0 || t[1] > MS_MAX ||
              t[2] < 0 || t[2] > MS_MAX || t[3] < 1 || t[3] > MS_MAX ||
              t[4] < 1 || t[4] > MS_MAX || strcmp(li, "-1") == 0 ||
              (strcmp(co, "1") != 0 && strcmp(co, "3") != 0) ||
              !(strcmp(sc, "1") == 0 || strcmp(sc, "0.5") == 0 ||
                strcmp(sc, "1000000") == 0);
        snprintf(tag, sizeof(tag), "e%zu", round);
        ok(c, "HSET rl:{%s}:q b %s", tag, "3/60 5/3600");
        if (round % 3 == 0)
            ok(c, "SET rl:{%s}:r:a:60:1 0 PX 600000", tag);
        else if (round % 3 == 1)
            ok(c, "SET rl:{%s}:r:b:60:1 2 PX 600000", tag);
        snprintf(pat, sizeof(pat), "rl:{%s}:*", tag);
        snap(c, pat, &before);
        /* A profile op (-P, k requests of the cost) and an op with the
         * stored quota. */
        r = rlb(c,
                "3 rl:{%s}:r:a:60:1 rl:{%s}:r:b:60:1 rl:{%s}:q %lld %lld "
                "%lld 2 1 1 %lld %s -1 2 %s 0 1 b %lld %s %s -1 %s",
                tag, tag, tag, t[0], t[1], t[2], t[3], li, co, t[4], li, sc,
                co);
        if (bad != (r->type == REDIS_REPLY_ERROR))
            fail_msg("round %zu (%lld %lld %lld %lld %lld scale %s limit %s "
                     "cost %s): %s",
                     round, t[0], t[1], t[2], t[3], t[4], sc, li, co,
                     r->type == REDIS_REPLY_ERROR ? r->str : "accepted");
        freeReplyObject(r);
        snap(c, pat, &after);
        if (bad)
            same_snap(&before, &after, "a refused batch");
        all_expire(&after);
        nbad += bad;
        nok += !bad;
    }
    /* Both kinds, often. */
    if (nbad < 50 || nok < 50)
        fail_msg("%zu refused, %zu decided", nbad, nok);
}

/* ---- a replica without the module ---------------------------------------*/

/* A growing RL.BATCH, for batches too long for rlb's buffer. */
typedef struct {
    char **v;
    size_t *l, n, cap;
} args_t;

static void arg(args_t *a, const char *fmt, ...)
{
    char t[256];
    va_list ap;
    int n;

    va_start(ap, fmt);
    n = vsnprintf(t, sizeof(t), fmt, ap);
    va_end(ap);
    assert_true(n >= 0 && n < (int)sizeof(t));
    if (a->n == a->cap) {
        a->cap = a->cap == 0 ? 256 : 2 * a->cap;
        a->v = realloc(a->v, a->cap * sizeof(*a->v));
        a->l = realloc(a->l, a->cap * sizeof(*a->l));
        assert_non_null(a->v);
        assert_non_null(a->l);
    }
    a->v[a->n] = strdup(t);
    assert_non_null(a->v[a->n]);
    a->l[a->n++] = (size_t)n;
}

/* Sends RL.BATCH nkeys keys... args..., which must be decided; frees a. */
static void args_send(redisContext *c, args_t *a)
{
    redisReply *r = redisCommandArgv(c, (int)a->n, (const char **)a->v, a->l);
    size_t i;

    assert_non_null(r);
    if (r->type != REDIS_REPLY_ARRAY)
        fail_msg("RL.BATCH of %zu arguments: reply type %d %s", a->n, r->type,
                 r->type == REDIS_REPLY_ERROR ? r->str : "");
    freeReplyObject(r);
    for (i = 0; i < a->n; i++)
        free(a->v[i]);
    free(a->v);
    free(a->l);
    memset(a, 0, sizeof(*a));
}

/* The calls of cmd counted in INFO commandstats (0 if none). */
static long long calls_of(redisContext *c, const char *cmd)
{
    redisReply *r = redisCommand(c, "INFO commandstats");
    char want[64];
    const char *at;
    long long n = 0;

    assert_non_null(r);
    assert_int_equal(r->type, REDIS_REPLY_STRING);
    snprintf(want, sizeof(want), "cmdstat_%s:calls=", cmd);
    if ((at = strstr(r->str, want)) != NULL)
        n = atoll(at + strlen(want));
    freeReplyObject(r);
    return n;
}

/* Node 1, without the module, a replica of node 0, once it has synced. */
static void replica_start(fx_t *f)
{
    char port[16];
    char *extra[] = {"--replicaof", "127.0.0.1", port, NULL};
    uint64_t deadline = rlt_mono_ms() + 20000;

    snprintf(port, sizeof(port), "%d", f->r[0].port);
    node_start(f, 1, 0, extra);
    for (;;) {
        redisReply *r = redisCommand(f->c[1], "INFO replication");
        int up;
        assert_non_null(r);
        up = strstr(r->str, "master_link_status:up") != NULL;
        freeReplyObject(r);
        if (up)
            break;
        assert_true(rlt_mono_ms() < deadline);
        rlt_nap_ms(10);
    }
}

/* Node 1 has applied everything node 0 replicated so far. */
static void synced(fx_t *f)
{
    assert_int_equal(int_of(f->c[0], "WAIT 1 %s", "10000"), 1);
}

/* The replica holds what the master holds: the same keys (those expired
 * and not deleted counted too), values and absolute expiries. */
static void same_on_replica(fx_t *f, const char *what)
{
    static snap_t m, r;

    synced(f);
    if (dbsize(f->c[0]) != dbsize(f->c[1]))
        fail_msg("%s: %lld keys on the master, %lld on the replica", what,
                 dbsize(f->c[0]), dbsize(f->c[1]));
    snap(f->c[0], "*", &m);
    synced(f); /* KEYS deletes the master's expired keys, and says so */
    snap(f->c[1], "*", &r);
    same_snap(&m, &r, what);
}

/* Node i's log has no line with bad in it. */
static void log_clean(fx_t *f, int i, const char *bad)
{
    char log[192], line[1024];
    FILE *lf;

    snprintf(log, sizeof(log), "%s/redis.log", f->r[i].dir);
    lf = fopen(log, "r");
    assert_non_null(lf);
    while (fgets(line, sizeof(line), lf) != NULL)
        if (strstr(line, bad) != NULL)
            fail_msg("node %d's log: %s", i, line);
    fclose(lf);
}

/* Neither node complained: the replica writes a CRITICAL line when a
 * command of its master's fails, the module a warning when Redis refuses
 * to replicate. */
static void logs_clean(fx_t *f)
{
    log_clean(f, 1, "CRITICAL");
    log_clean(f, 0, "ratelimit:");
}

/* One batch of new and existing counters, one at 0 that a refusal
 * removes, one removed and then created again, one written twice. With
 * one_eval it must reach the replica as one EVAL, no MULTI. */
static void edges(fx_t *f, const char *t, int one_eval)
{
    redisContext *c = f->c[0];
    long long now = redis_ms(c), exp = now + 600000, eval, multi, pexp;
    char k[64];
    redisReply *r;

    ok(c, "SET rl:{%s}:e:60:1 3 PX 900000", t);
    ok(c, "SET rl:{%s}:z:60:1 0 PX 600000", t);
    ok(c, "SET rl:{%s}:y:60:1 0 PX 600000", t);
    snprintf(k, sizeof(k), "rl:{%s}:e:60:1", t);
    pexp = int_of(c, "PEXPIRETIME %s", k);
    synced(f);
    eval = calls_of(f->c[1], "eval");
    multi = calls_of(f->c[1], "multi");
    rlb_ok(c,
           "7 rl:{%s}:n:60:1 rl:{%s}:e:60:1 rl:{%s}:z:60:1 rl:{%s}:y:60:1 "
           "rl:{%s}:y:60:1 rl:{%s}:w:60:1 rl:{%s}:w:60:1 0 %lld 600000 7 1 "
           "1 %lld 5 1 1 -1 1 9 -1 1 9 1 1 -1 2 1",
           t, t, t, t, t, t, t, now, exp);
    /* What the master holds, as the script would leave it. */
    r = redisCommand(c,
                     "MGET rl:{%s}:n:60:1 rl:{%s}:e:60:1 rl:{%s}:z:60:1 "
                     "rl:{%s}:y:60:1 rl:{%s}:w:60:1",
                     t, t, t, t, t);
    assert_non_null(r);
    assert_int_equal(r->elements, 5);
    assert_string_equal(r->element[0]->str, "1");
    assert_string_equal(r->element[1]->str, "4");
    assert_int_equal(r->element[2]->type, REDIS_REPLY_NIL);
    assert_string_equal(r->element[3]->str, "1");
    assert_string_equal(r->element[4]->str, "3");
    freeReplyObject(r);
    assert_int_equal(int_of(c, "PEXPIRETIME %s", k), pexp);
    snprintf(k, sizeof(k), "rl:{%s}:y:60:1", t);
    assert_int_equal(int_of(c, "PEXPIRETIME %s", k), exp);
    snprintf(k, sizeof(k), "rl:{%s}:w:60:1", t);
    assert_int_equal(int_of(c, "PEXPIRETIME %s", k), exp);
    synced(f);
    if (one_eval) {
        assert_int_equal(calls_of(f->c[1], "eval"), eval + 1);
        assert_int_equal(calls_of(f->c[1], "multi"), multi);
    }
}

/* A batch that writes one counter replicates that SET (or DEL) itself. */
static void single(fx_t *f, const char *t)
{
    static const char *const cmds[] = {"eval", "set", "del", "multi"};
    static const long long more[][4] = {{0, 1, 0, 0}, {0, 0, 1, 0}};
    redisContext *c = f->c[0];
    long long now = redis_ms(c), exp = now + 600000, n[4];
    size_t i, round;

    ok(c, "SET rl:{%s}:z:60:1 0 PX 600000", t);
    for (round = 0; round < 2; round++) {
        synced(f);
        for (i = 0; i < 4; i++)
            n[i] = calls_of(f->c[1], cmds[i]);
        /* A new counter; then the one at 0, refused (removed). */
        rlb_ok(c, "1 rl:{%s}:%s:60:1 0 %lld 600000 1 1 1 %lld 5 %s", t,
               round == 0 ? "a" : "z", now, exp, round == 0 ? "1" : "-1 1 9");
        synced(f);
        for (i = 0; i < 4; i++)
            if (calls_of(f->c[1], cmds[i]) != n[i] + more[round][i])
                fail_msg("round %zu: the replica ran %s %lld times", round,
                         cmds[i], calls_of(f->c[1], cmds[i]) - n[i]);
    }
}

/* Batches that write nothing replicate nothing: refusals on counters
 * that do not exist, a batch after its deadline, a malformed one. */
static void writes_nothing(fx_t *f, const char *t)
{
    static const char *const cmds[] = {"eval", "set", "del", "multi",
                                       "rl.batch"};
    redisContext *c = f->c[0];
    long long now = redis_ms(c), exp = now + 600000, n[5];
    redisReply *r;
    char k[64];
    size_t i;

    synced(f);
    for (i = 0; i < 5; i++)
        n[i] = calls_of(f->c[1], cmds[i]);
    rlb_ok(c,
           "2 rl:{%s}:a:60:1 rl:{%s}:b:60:1 0 %lld 600000 2 1 1 %lld 5 "
           "-1 1 9 -1 1 6",
           t, t, now, exp);
    r = rlb(c, "1 rl:{%s}:a:60:1 1 %lld 600000 1 1 1 %lld 5 1", t, now, exp);
    assert_int_equal(r->type, REDIS_REPLY_STRING);
    assert_string_equal(r->str, "late");
    freeReplyObject(r);
    r = rlb(c, "1 rl:{%s}:a:60:1 0 %lld 600000 1 1 1 %lld 5 1 1", t, now, exp);
    assert_int_equal(r->type, REDIS_REPLY_ERROR);
    freeReplyObject(r);
    /* Something the replica does count, after them. */
    ok(c, "HSET rl:{%s}:mark a 1", t);
    synced(f);
    assert_int_equal(calls_of(f->c[1], "hset") > 0, 1);
    for (i = 0; i < 5; i++)
        if (calls_of(f->c[1], cmds[i]) != n[i])
            fail_msg("the replica ran %s", cmds[i]);
    snprintf(k, sizeof(k), "rl:{%s}:a:60:1", t);
    assert_int_equal(int_of(c, "EXISTS %s", k), 0);
}

/* A counter given an expiry already past (a caller's clock far behind),
 * then opened again by the same batch: Redis deletes it on that open and
 * replicates the DEL at once; the write went out before it, so the
 * replica deletes it too. */
static void expired_in_batch(fx_t *f, const char *t)
{
    long long now = redis_ms(f->c[0]);
    char k[64];

    rlb_ok(f->c[0],
           "2 rl:{%s}:p:60:1 rl:{%s}:p:60:1 0 %lld 600000 2 1 1 1 5 "
           "1 -1 1 9",
           t, t, now);
    snprintf(k, sizeof(k), "rl:{%s}:p:60:1", t);
    assert_int_equal(int_of(f->c[0], "EXISTS %s", k), 0);
    same_on_replica(f, "a counter expired within its batch");
}

/* The largest batch rl-server sends (RLS_BATCH_MAX ops, here of two
 * windows each), and stored quotas of 8 windows, whose counters' names
 * the module makes: thousands of counters in one call. */
static void largest(fx_t *f, const char *t)
{
    enum { OPS = 1024, QOPS = 128 };
    redisContext *c = f->c[0];
    long long now = redis_ms(c), exp = now + 600000, exp2 = now + 900000;
    args_t a;
    int i;

    memset(&a, 0, sizeof(a));
    ok(c, "HSET rl:{%s}:q b %s", t,
       "100/1 100/2 100/3 100/4 100/5 100/6 100/7 100/8");
    arg(&a, "RL.BATCH");
    arg(&a, "%d", 2 * OPS + 2 * QOPS);
    for (i = 0; i < OPS; i++) {
        arg(&a, "rl:{%s}:r:m%d:60:1", t, i);
        arg(&a, "rl:{%s}:r:m%d:3600:1", t, i);
    }
    for (i = 0; i < QOPS; i++) {
        arg(&a, "rl:{%s}:r:s%d:60:1", t, i);
        arg(&a, "rl:{%s}:q", t);
    }
    arg(&a, "0");
    arg(&a, "%lld", now);
    arg(&a, "600000");
    arg(&a, "%d", OPS + QOPS);
    arg(&a, "1");
    arg(&a, "2");
    arg(&a, "%lld", exp);
    arg(&a, "5");
    arg(&a, "%lld", exp2);
    arg(&a, "7");
    arg(&a, "r");
    arg(&a, "%d", OPS);
    arg(&a, "1");
    for (i = 0; i < QOPS; i++) {
        arg(&a, "0");
        arg(&a, "1");
        arg(&a, "b");
        arg(&a, "%lld", exp);
        arg(&a, "10");
        arg(&a, "1");
        arg(&a, "-1");
        arg(&a, "1");
    }
    args_send(c, &a);
    assert_int_equal(dbsize(c), 2 * OPS + 8 * QOPS + 1);
    same_on_replica(f, "the largest batch");
}

/* A replica without the module holds what the master holds after
 * batches of every kind, and ran no command that failed. */
static void test_replica_without_module(void **state)
{
    fx_t *f = *state;

    node_start(f, 0, 1, NULL);
    replica_start(f);
    mix(f->c[0], "m1");
    mix(f->c[0], "m2");
    same_on_replica(f, "batches of every kind");
    edges(f, "e1", 1);
    same_on_replica(f, "new and existing counters, removed, written twice");
    single(f, "s1");
    writes_nothing(f, "wn");
    expired_in_batch(f, "x1");
    ok(f->c[0], "FLUSHALL");
    largest(f, "big");
    ok(f->c[0], "FLUSHALL");
    mix(f->c[0], "m3");
    same_on_replica(f, "batches after the largest");
    logs_clean(f);
}

/* A master that does not know EVAL (renamed away) replicates each write
 * as its own SET or DEL, with the same result on the replica. */
static void test_replica_without_eval(void **state)
{
    static char *const no_eval[] = {"--rename-command", "EVAL", "", NULL};
    fx_t *f = *state;

    node_start(f, 0, 1, no_eval);
    replica_start(f);
    mix(f->c[0], "m1");
    edges(f, "e1", 0);
    expired_in_batch(f, "x1");
    same_on_replica(f, "without EVAL on the master");
    assert_int_equal(calls_of(f->c[1], "eval"), 0);
    assert_true(calls_of(f->c[1], "multi") > 0);
    logs_clean(f);
}

/* ---- Redis Cluster -------------------------------------------------------*/

static int cluster_ok(redisContext *c)
{
    redisReply *r = redisCommand(c, "CLUSTER INFO");
    int up;

    assert_non_null(r);
    up = r->type == REDIS_REPLY_STRING &&
         strstr(r->str, "cluster_state:ok") != NULL &&
         strstr(r->str, "cluster_known_nodes:3") != NULL;
    freeReplyObject(r);
    return up;
}

static int slot_of(redisContext *c, const char *key)
{
    return (int)int_of(c, "CLUSTER KEYSLOT %s", key);
}

static long long keys_on(fx_t *f)
{
    long long n = 0;
    int i;

    for (i = 0; i < NODES; i++)
        n += dbsize(f->c[i]);
    return n;
}

/* RL.BATCH on node 0 that must fail with an error starting with want and
 * write nothing on any node. */
static void cluster_refused(fx_t *f, const char *want, const char *fmt, ...)
{
    char buf[4096];
    long long n = keys_on(f);
    redisReply *r;
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    r = rlb(f->c[0], "%s", buf);
    if (r->type != REDIS_REPLY_ERROR || strncmp(r->str, want, strlen(want)))
        fail_msg("RL.BATCH %s: want %s, got type %d %s", buf, want, r->type,
                 r->type == REDIS_REPLY_ERROR ? r->str : "");
    freeReplyObject(r);
    assert_int_equal(keys_on(f), n);
}

/* Three masters with the module (slots 0-5460, 5461-10922, 10923-16383),
 * cluster bus on reserved ports. On node 0: a key of another node's slot
 * gets MOVED, keys of two slots CROSSSLOT, and a stored quota whose
 * counters would hash elsewhere (keys with no hash tag, made to share a
 * slot) CROSSSLOT, all writing nothing; with a hash tag the module
 * decides, and every key it wrote is in that tag's slot. */
static void test_cluster_keys_stay_in_slot(void **state)
{
    fx_t *f = *state;
    static const int first[NODES] = {0, 5461, 10923},
                     last[NODES] = {5460, 10922, 16383};
    char bus[NODES][16], base[64], key[96], qkey[128];
    int i, n, slot;
    uint64_t deadline;
    long long now, exp;
    redisReply *r;

    for (i = 0; i < NODES; i++) {
        int port = rlt_port_reserve();
        char *extra[] = {"--cluster-enabled",
                         "yes",
                         "--cluster-config-file",
                         "nodes.conf",
                         "--cluster-port",
                         bus[i],
                         "--cluster-node-timeout",
                         "5000",
                         NULL};
        assert_true(port > 0);
        snprintf(bus[i], sizeof(bus[i]), "%d", port);
        node_start(f, i, 1, extra);
        ok(f->c[i], "CLUSTER ADDSLOTSRANGE %d %d", first[i], last[i]);
    }
    for (i = 1; i < NODES; i++)
        ok(f->c[0], "CLUSTER MEET 127.0.0.1 %d %s", f->r[i].port, bus[i]);
    deadline = rlt_mono_ms() + 20000;
    for (i = 0; i < NODES; i++)
        while (!cluster_ok(f->c[i])) {
            assert_true(rlt_mono_ms() < deadline);
            rlt_nap_ms(20);
        }
    now = redis_ms(f->c[0]);
    exp = now + 600000;

    /* A tag of node 0 and one of node 1. */
    for (n = 0;; n++) {
        snprintf(key, sizeof(key), "{h%d}", n);
        if (slot_of(f->c[0], key) <= last[0])
            break;
    }
    for (i = 0;; i++) {
        snprintf(qkey, sizeof(qkey), "{h%d}", i);
        slot = slot_of(f->c[0], qkey);
        if (slot >= first[1] && slot <= last[1])
            break;
    }
    cluster_refused(f, "MOVED",
                    "1 rl:{h%d}:r:a:60:1 0 %lld 1000 1 1 1 %lld 5 1", i, now,
                    exp);
    cluster_refused(f, "CROSSSLOT",
                    "2 rl:{h%d}:r:a:60:1 rl:{h%d}:r:a:60:1 0 %lld 1000 2 1 1 "
                    "%lld 5 r 2 1",
                    n, i, now, exp);

    /* No hash tag: the first window's key hashes whole, and the quota
     * hash shares its slot by taking it as its tag; the counters the
     * stored quota names (base:3600:<index>) would not. */
    for (n = 0;; n++) {
        snprintf(base, sizeof(base), "rl:p%d:r:b", n);
        snprintf(key, sizeof(key), "%s:60:1", base);
        if (slot_of(f->c[0], key) <= last[0])
            break;
    }
    snprintf(qkey, sizeof(qkey), "q{%s}", key);
    assert_int_equal(slot_of(f->c[0], qkey), slot_of(f->c[0], key));
    ok(f->c[0], "HSET %s b %s", qkey, "3/60 5/3600");
    cluster_refused(f, "CROSSSLOT",
                    "2 %s %s 0 %lld 1000 1 0 0 1 b %lld 10 1 -1 1", key, qkey,
                    now, exp);
    /* The same batch without the stored quota touches its keys alone. */
    rlb_ok(f->c[0], "1 %s 0 %lld 1000 1 0 0 1 '' %lld 10 -1 1", key, now, exp);
    assert_int_equal(int_of(f->c[0], "EXISTS %s", key), 1);

    /* With a hash tag: decided, every key in the tag's slot. */
    for (n = 0;; n++) {
        snprintf(qkey, sizeof(qkey), "rl:{g%d}:q", n);
        if (slot_of(f->c[0], qkey) <= last[0])
            break;
    }
    slot = slot_of(f->c[0], qkey);
    ok(f->c[0], "HSET %s b %s", qkey, "3/60 5/3600");
    rlb_ok(f->c[0],
           "2 rl:{g%d}:r:b:60:1 %s 0 %lld 1000 1 0 0 1 b %lld 10 1 "
           "-1 1",
           n, qkey, now, exp);
    r = redisCommand(f->c[0], "KEYS rl:{g%d}:*", n);
    assert_non_null(r);
    assert_int_equal(r->elements, 3); /* the quota, 2 windows' counters */
    for (i = 0; i < (int)r->elements; i++)
        assert_int_equal(slot_of(f->c[0], r->element[i]->str), slot);
    freeReplyObject(r);
    assert_int_equal(dbsize(f->c[1]) + dbsize(f->c[2]), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_aof_loads_without_module, fx_setup,
                                        fx_teardown),
        cmocka_unit_test_setup_teardown(test_out_of_range_refused, fx_setup,
                                        fx_teardown),
        cmocka_unit_test_setup_teardown(
            test_edge_values_leave_no_key_without_ttl, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_replica_without_module, fx_setup,
                                        fx_teardown),
        cmocka_unit_test_setup_teardown(test_replica_without_eval, fx_setup,
                                        fx_teardown),
        cmocka_unit_test_setup_teardown(test_cluster_keys_stay_in_slot,
                                        fx_setup, fx_teardown),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
