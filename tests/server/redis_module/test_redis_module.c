/* The ratelimit Redis module (ratelimit.so, RL.BATCH) as Redis runs it,
 * against private redis-servers that load it by path ($RLT_MODULE_SO)
 * (module_fx.h): its writes persist in an AOF that a Redis without the
 * module loads, with the same counts and expiries (before and after
 * BGREWRITEAOF); arguments out of range are refused whole and no counter
 * is left without an expiry; on a Redis Cluster it touches no key outside
 * the node's slot. A replica without the module is
 * test_redis_module_replica.c. Every wait has a deadline. */
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

/* ---- AOF -----------------------------------------------------------------*/

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
    rlb_refused(c, "%s 0 9223372036854775807 1000 1 0 0 1 b %lld 10 1 -1 1", q,
                exp);
    rlb_refused(c, "%s 0 9223372036854775000 1000 1 0 0 1 b %lld 10 1 -1 1", q,
                exp);
    rlb_refused(c, "%s 0 %lld 1000 1 0 0 1 b %lld 10 1 -1 1", q, MS_MAX + 1,
                exp);
    rlb_refused(c, "%s 0 %lld 9223372036854775807 1 0 0 1 b %lld 10 1 -1 1", q,
                now, exp);
    rlb_refused(c, "%s 0 %lld %lld 1 0 0 1 b %lld 10 1 -1 1", q, now,
                MS_MAX + 1, exp);
    rlb_refused(c, "%s 0 -1 1000 1 0 0 1 b %lld 10 1 -1 1", q, exp);
    rlb_refused(c, "%s 0 %lld -1 1 0 0 1 b %lld 10 1 -1 1", q, now, exp);
    rlb_refused(c, "%s -1 %lld 1000 1 0 0 1 b %lld 10 1 -1 1", q, now, exp);
    rlb_refused(c, "%s 9223372036854775807 %lld 1000 1 0 0 1 b %lld 10 1 -1 1",
                q, now, exp);
    /* Expiries, of a profile and of an op. */
    rlb_refused(c, "1 rl:{o}:r:a:60:1 0 %lld 1000 1 1 1 -1 5 1", now);
    rlb_refused(c, "1 rl:{o}:r:a:60:1 0 %lld 1000 1 1 1 0 5 1", now);
    rlb_refused(
        c, "1 rl:{o}:r:a:60:1 0 %lld 1000 1 1 1 9223372036854775807 5 1", now);
    rlb_refused(c, "1 rl:{o}:r:a:60:1 0 %lld 1000 1 1 1 %lld 5 1", now,
                MS_MAX + 1);
    rlb_refused(c, "1 rl:{o}:r:a:60:1 0 %lld 1000 1 0 0 1 '' -1 5 -1 1", now);
    rlb_refused(c, "1 rl:{o}:r:a:60:1 0 %lld 1000 1 0 0 1 '' 0 5 -1 1", now);
    rlb_refused(c, "%s 0 %lld 1000 1 0 0 1 b -1 10 1 -1 1", q, now);
    /* The scale. */
    rlb_refused(c, "%s 0 %lld 1000 1 0 0 1 b %lld 10 0 -1 1", q, now, exp);
    rlb_refused(c, "%s 0 %lld 1000 1 0 0 1 b %lld 10 -1 -1 1", q, now, exp);
    rlb_refused(c, "%s 0 %lld 1000 1 0 0 1 b %lld 10 nan -1 1", q, now, exp);
    rlb_refused(c, "%s 0 %lld 1000 1 0 0 1 b %lld 10 inf -1 1", q, now, exp);
    rlb_refused(c, "%s 0 %lld 1000 1 0 0 1 b %lld 10 1e300 -1 1", q, now, exp);
    /* Costs and limits, as before. */
    rlb_refused(c, "1 rl:{o}:r:a:60:1 0 %lld 1000 1 1 1 %lld -1 1", now, exp);
    rlb_refused(c, "1 rl:{o}:r:a:60:1 0 %lld 1000 1 1 1 %lld 5 -1 1 0", now,
                exp);
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
        MODULE_TEST(test_aof_loads_without_module),
        MODULE_TEST(test_out_of_range_refused),
        MODULE_TEST(test_edge_values_leave_no_key_without_ttl),
        MODULE_TEST(test_cluster_keys_stay_in_slot),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
