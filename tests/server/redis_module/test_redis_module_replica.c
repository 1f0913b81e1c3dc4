/* The ratelimit Redis module and a replica without it (module_fx.h): the
 * replica holds what the master holds after batches of every kind and
 * edge (one EVAL a call; one SET or DEL a write where the master has no
 * EVAL). (test_module_replicates in store/test_store_redis_script.c
 * replicates through the store too.) Every wait has a deadline. */
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

/* Node 1 has applied everything node 0 replicated so far. WAIT blocks
 * up to its own 10 s, so the reply is read with a longer deadline than the
 * fixture's 1 s: on a loaded machine the replica may take more than a
 * second to acknowledge, and hiredis then gave up with no reply. */
static void synced(fx_t *f)
{
    struct timeval wait = {15, 0}, usual = {1, 0};

    assert_int_equal(redisSetTimeout(f->c[0], wait), REDIS_OK);
    assert_int_equal(int_of(f->c[0], "WAIT 1 %s", "10000"), 1);
    assert_int_equal(redisSetTimeout(f->c[0], usual), REDIS_OK);
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
 * that do not exist (and of an op of other algorithms, whose
 * sliding-window-counter's state exists), an admission on a
 * sliding-window-counter whose state is two windows ahead (another
 * instance's batch: refused, as the op's window's count is gone, and left
 * as it is), a batch after its deadline, a
 * malformed one. */
static void writes_nothing(fx_t *f, const char *t)
{
    static const char *const cmds[] = {"eval", "set", "del", "multi",
                                       "rl.batch"};
    redisContext *c = f->c[0];
    long long now = redis_ms(c), exp = now + 600000, n[5], idx = now / 60000;
    redisReply *r;
    char k[64], ahead[64];
    size_t i;

    ok(c, "SET rl:{%s}:c:60:s %lld:3:0 PX 600000", t, idx - 1);
    ok(c, "SET rl:{%s}:d:60:s %lld:1:1 PX 600000", t, idx + 2);
    synced(f);
    for (i = 0; i < 5; i++)
        n[i] = calls_of(f->c[1], cmds[i]);
    rlb_ok(c,
           "2 rl:{%s}:a:60:1 rl:{%s}:b:60:1 0 %lld 600000 2 1 1 %lld 5 "
           "-1 1 9 -1 1 6",
           t, t, now, exp);
    /* An op of other algorithms refused: no key written, none removed. */
    rlb_ok(c,
           "3 rl:{%s}:c:60:1 rl:{%s}:c:60:s rl:{%s}:c:1:g 0 %lld 600000 1 0 "
           "a 3 '' f %lld 5 s %lld 5 65536 %lld g 9 1000 -1 6",
           t, t, t, now, exp, exp, idx);
    /* Refused (its window's count is gone), and nothing to write. */
    r = rlb_arr(c,
                "1 rl:{%s}:d:60:s 0 %lld 600000 1 0 a 1 '' s %lld 5 65536 "
                "%lld -2 1",
                t, now, exp, idx);
    assert_int_equal(r->element[0]->integer, 0);
    freeReplyObject(r);
    snprintf(k, sizeof(k), "rl:{%s}:d:60:s", t);
    snprintf(ahead, sizeof(ahead), "%lld:1:1", idx + 2);
    str_is(c, k, ahead);
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

/* A sliding window's log (5 per 2 s) through each of its writes: made
 * (SET), appended to (EVAL of APPEND, SETRANGE, PEXPIREAT), made again
 * when everything in it left the window, rewritten without what left it
 * when that is half of it, and untouched by a refusal. The replica holds
 * the same string and expiry after each. */
static void logs(fx_t *f, const char *t)
{
    static const struct {
        long long at;
        const char *costs, *want;
    } steps[] = {
        {0, "-3 1", "3"},    /* a new log */
        {1, "-1 1", "1"},    /* appended */
        {2500, "-1 1", "1"}, /* both entries left: a new log */
        {2600, "-1 2", "1"}, /* appended */
        {4550, "-1 1", "1"}, /* the first left: rewritten */
        {4551, "-1 5", "0"}, /* refused: nothing written */
    };
    redisContext *c = f->c[0];
    long long now = redis_ms(c), exp;
    redisReply *r;
    char k[64], what[64];
    size_t i;

    snprintf(k, sizeof(k), "rl:{%s}:l:2:l", t);
    for (i = 0; i < sizeof(steps) / sizeof(steps[0]); i++) {
        exp = now + steps[i].at + 600000;
        r = rlb(c, "1 %s 0 %lld 600000 1 0 a 1 '' l %lld 5 2000 %s", k,
                now + steps[i].at, exp, steps[i].costs);
        assert_int_equal(r->type, REDIS_REPLY_ARRAY);
        assert_int_equal(r->element[0]->type, REDIS_REPLY_INTEGER);
        if (r->element[0]->integer != atoll(steps[i].want))
            fail_msg("step %zu admitted %lld", i, r->element[0]->integer);
        freeReplyObject(r);
        snprintf(what, sizeof(what), "a log, step %zu", i);
        same_on_replica(f, what);
    }
    /* header: sum 3 (the entries of 2600 and 4550), first entry at 32 */
    r = redisCommand(c, "GET %s", k);
    assert_non_null(r);
    assert_int_equal(r->type, REDIS_REPLY_STRING);
    assert_int_equal(r->len, 32 + 2 * 24);
    assert_memory_equal(r->str, "00000000000000000003000000000032", 32);
    freeReplyObject(r);
}

/* A sliding-window-counter's one key through each of its writes: made
 * ("I:c:0", its expiry given), added to in its window (the expiry kept),
 * moved on to the next window (the count becoming the previous one, the
 * expiry given), added to by an instance whose batch is a window behind
 * (the previous count, the expiry kept; decided with I - 1's count as
 * full, 9 x 1/2), moved on past two windows,
 * untouched by a refusal and by an instance two windows behind. The replica
 * holds the same string and expiry after each. */
static void swcs(fx_t *f, const char *t)
{
    static const struct {
        int di;                /* the op's window index, from I */
        long long at;          /* ms after the first op */
        const char *costs, *v; /* its costs, and the state after */
        int given;             /* the expiry given (else kept) */
    } steps[] = {
        {0, 0, "-1 1", "I:1:0", 1},  {0, 10, "-1 1", "I:2:0", 0},
        {1, 20, "-2 1", "J:2:2", 1}, {0, 30, "-1 1", "J:2:3", 0},
        {3, 40, "-4 1", "L:4:0", 1}, {3, 50, "-1 6", "L:4:0", 0},
        {0, 60, "-1 1", "L:4:0", 0},
    };
    redisContext *c = f->c[0];
    long long now = redis_ms(c), I = 1000, exp = 0, was = -2;
    char k[64], want[64], what[64];
    size_t i;

    snprintf(k, sizeof(k), "rl:{%s}:r:w:60:s", t);
    for (i = 0; i < sizeof(steps) / sizeof(steps[0]); i++) {
        long long at = I + steps[i].di, S;
        exp = now + steps[i].at + 600000;
        rlb_ok(c, "1 %s 0 %lld 600000 1 0 a 1 '' s %lld 9 32768 %lld %s", k,
               now + steps[i].at, exp, at, steps[i].costs);
        S = I + (steps[i].v[0] - 'I');
        snprintf(want, sizeof(want), "%lld%s", S, steps[i].v + 1);
        str_is(c, k, want);
        assert_int_equal(int_of(c, "PEXPIRETIME %s", k),
                         steps[i].given ? exp : was);
        was = int_of(c, "PEXPIRETIME %s", k);
        snprintf(what, sizeof(what), "a sliding-window-counter, step %zu", i);
        same_on_replica(f, what);
    }
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
    logs(f, "l1");
    swcs(f, "w1");
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
    logs(f, "l1");
    swcs(f, "w1");
    same_on_replica(f, "without EVAL on the master");
    assert_int_equal(calls_of(f->c[1], "eval"), 0);
    assert_true(calls_of(f->c[1], "multi") > 0);
    logs_clean(f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        MODULE_TEST(test_replica_without_module),
        MODULE_TEST(test_replica_without_eval),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
