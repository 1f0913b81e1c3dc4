/* The module's tests' fixture (module_fx.h). */
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

#include "module_fx.h"

static const char *module_so(void)
{
    const char *so = getenv("RLT_MODULE_SO");

    assert_non_null(so);
    return so;
}

int fx_setup(void **state)
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

int fx_teardown(void **state)
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
void node_start(fx_t *f, int i, int module, char *const extra[])
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
void node_restart(fx_t *f, int i, int module, char *const extra[])
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

void node_kill(fx_t *f, int i)
{
    redisFree(f->c[i]);
    f->c[i] = NULL;
    rlt_redis_kill(&f->r[i]);
}

/* A command whose reply must not be an error; freed here. */
void ok(redisContext *c, const char *fmt, ...)
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

long long int_of(redisContext *c, const char *fmt, const char *arg)
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

const char *str_of(redisContext *c, const char *key, char *buf, size_t n)
{
    redisReply *r = redisCommand(c, "GET %s", key);
    const char *v = NULL;

    assert_non_null(r);
    if (r->type == REDIS_REPLY_STRING) {
        assert_true(r->len < n);
        memcpy(buf, r->str, r->len);
        buf[r->len] = '\0';
        v = buf;
    } else if (r->type != REDIS_REPLY_NIL) {
        fail_msg("GET %s: reply type %d %s", key, r->type,
                 r->type == REDIS_REPLY_ERROR ? r->str : "");
    }
    freeReplyObject(r);
    return v;
}

void str_is(redisContext *c, const char *key, const char *want)
{
    char buf[256];
    const char *v = str_of(c, key, buf, sizeof(buf));

    if (want == NULL && v != NULL)
        fail_msg("%s holds \"%s\", want it missing", key, v);
    if (want != NULL && (v == NULL || strcmp(v, want) != 0))
        fail_msg("%s holds %s%s%s, want \"%s\"", key, v ? "\"" : "",
                 v ? v : "nothing", v ? "\"" : "", want);
}

long long dbsize(redisContext *c)
{
    redisReply *r = redisCommand(c, "DBSIZE");
    long long v;

    assert_non_null(r);
    assert_int_equal(r->type, REDIS_REPLY_INTEGER);
    v = r->integer;
    freeReplyObject(r);
    return v;
}

long long redis_ms(redisContext *c)
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
redisReply *rlb(redisContext *c, const char *fmt, ...)
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
/* RL.BATCH of buf, which must be decided: its array reply. */
static redisReply *must_decide(redisContext *c, const char *buf)
{
    redisReply *r = rlb(c, "%s", buf);

    if (r->type != REDIS_REPLY_ARRAY)
        fail_msg("RL.BATCH %s: reply type %d %s", buf, r->type,
                 r->type == REDIS_REPLY_ERROR ? r->str : "");
    return r;
}

redisReply *rlb_arr(redisContext *c, const char *fmt, ...)
{
    char buf[4096];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    return must_decide(c, buf);
}

void rlb_ok(redisContext *c, const char *fmt, ...)
{
    char buf[4096];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    freeReplyObject(must_decide(c, buf));
}

/* ---- the keyspace, as a sorted list --------------------------------------*/

static int by_key(const void *a, const void *b)
{
    return strcmp(((const entry_t *)a)->key, ((const entry_t *)b)->key);
}

/* The keys matching pattern, sorted, with their types, values and
 * expiries. */
void snap(redisContext *c, const char *pattern, snap_t *s)
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

void same_snap(const snap_t *a, const snap_t *b, const char *what)
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

void rlb_refused(redisContext *c, const char *fmt, ...)
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

/* Every counter (every key but the ":q" quota hashes) has an expiry (or
 * had: -2, gone since it was listed). Returns how many there are. */
size_t all_expire(const snap_t *s)
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

/* Batches of every kind under tag t: runs of one profile, listed and
 * equal costs, refusals, a stored quota (its counters named by the
 * module), a counter at 0 that a refusal removes, and ops of other
 * algorithms (a fixed window, a sliding-window-counter's one key whose
 * state was of the previous window, a gcra's TAT). Every expiry is
 * minutes away (a grace of 10 min for the stored quota's windows and the
 * TAT), so that none passes while a test compares. */
void mix(redisContext *c, const char *t)
{
    long long now = redis_ms(c), exp = now + 600000, exp2 = now + 900000;
    long long idx = now / 60000;
    char zero[64];
    int i;

    ok(c, "HSET rl:{%s}:q b %s", t, "3/60 5/3600");
    ok(c, "SET rl:{%s}:r:z:60:1 0 PX 600000", t);
    /* The previous window's count 2: the first op moves it on. */
    ok(c, "SET rl:{%s}:r:g:60:s %lld:2:0 PX 600000", t, idx - 1);
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
        /* Both admitted the first time, the gcra full after. */
        rlb_ok(c,
               "3 rl:{%s}:r:f:60:5 rl:{%s}:r:g:60:s rl:{%s}:r:h:1:g 0 %lld "
               "600000 1 0 a 3 '' f %lld 3 s %lld 4 32768 %lld g 2 1000000 "
               "2 1 1",
               t, t, t, now, exp, exp, idx);
    }
    rlb_ok(c, "1 rl:{%s}:r:z:60:1 0 %lld 600000 1 0 0 1 '' %lld 4 -1 5", t, now,
           exp);
    snprintf(zero, sizeof(zero), "rl:{%s}:r:z:60:1", t);
    assert_int_equal(int_of(c, "EXISTS %s", zero), 0);
}
