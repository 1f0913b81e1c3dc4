/* The ratelimit Redis module's ops of other algorithms ("a": fixed
 * windows, sliding-window-counters and gcras in one op) and its keys of
 * other shapes, against a private redis-server that loads it by path
 * ($RLT_MODULE_SO) (module_fx.h). The expected decisions are worked out
 * here from the script's formulas (redis_script.lua), not from lib/'s
 * code the module runs: a fixed window uses its count of its limit; a
 * sliding window its current count plus ceil(min(prev, limit) x weight /
 * 65536), both read from its one key's state "<index>:<count>:<previous>"
 * at the op's window index; a gcra max(TAT - now, 0) us of burst x
 * interval, a request using cost x interval. And a stored quota named on
 * a window staggered per caller (":<w>:p<index>") finds its counters'
 * base as the script's pattern does. */
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

/* The value of a string key, which must exist. */
static long long val(redisContext *c, const char *key)
{
    redisReply *r = redisCommand(c, "GET %s", key);
    long long v;

    assert_non_null(r);
    if (r->type != REDIS_REPLY_STRING)
        fail_msg("GET %s: reply type %d", key, r->type);
    v = strtoll(r->str, NULL, 10);
    freeReplyObject(r);
    return v;
}

/* Its PEXPIRETIME (-2 missing, -1 none). */
static long long pexp(redisContext *c, const char *key)
{
    return int_of(c, "PEXPIRETIME %s", key);
}

/* r, the reply to what, is an array of n integers, want's. */
static void ints(const redisReply *r, size_t n, const long long *want,
                 const char *what)
{
    const redisReply *last =
        r->elements > 0 ? r->element[r->elements - 1] : NULL;
    size_t i;

    if (r->elements != n)
        fail_msg("%s: %zu elements, want %zu (%s)", what, r->elements, n,
                 last != NULL && last->type == REDIS_REPLY_STRING ? last->str
                                                                  : "");
    for (i = 0; i < n; i++) {
        if (r->element[i]->type != REDIS_REPLY_INTEGER)
            fail_msg("%s: element %zu: type %d, want an integer", what, i,
                     r->element[i]->type);
        if (r->element[i]->integer != want[i])
            fail_msg("%s: element %zu: %lld, want %lld", what, i,
                     r->element[i]->integer, want[i]);
    }
}

/* RL.BATCH that must be decided into n integers, want's. */
static void rlb_ints(redisContext *c, size_t n, const long long *want,
                     const char *fmt, ...)
{
    char buf[4096];
    redisReply *r;
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    r = rlb_arr(c, "%s", buf);
    ints(r, n, want, buf);
    freeReplyObject(r);
}

/* ceil(us / 1000): a TAT's expiry before the grace. */
static long long ms_ceil(long long us)
{
    return us / 1000 + (us % 1000 != 0);
}

/* ---- one op of every algorithm -------------------------------------------*/

/* The keys of tag t: a fixed window's counter F, a sliding window's
 * state S, a gcra's TAT G. */
#define F "rl:{%s}:r:a:60:5"
#define S "rl:{%s}:r:b:60:s"
#define G "rl:{%s}:r:c:1:g"

typedef struct {
    char f[64], s[64], g[64];
    char all[256]; /* the three, in that order, as KEYS */
} keys_t;

static void keys_of(keys_t *k, const char *t)
{
    snprintf(k->f, sizeof(k->f), F, t);
    snprintf(k->s, sizeof(k->s), S, t);
    snprintf(k->g, sizeof(k->g), G, t);
    snprintf(k->all, sizeof(k->all), "%s %s %s", k->f, k->s, k->g);
}

/* A sliding window's state: "<at>:<count>:<previous>". */
static const char *state_text(char *buf, size_t n, long long at,
                              long long count, long long prev)
{
    snprintf(buf, n, "%lld:%lld:%lld", at, count, prev);
    return buf;
}

/* The sliding window's key holds that state. */
static void state_is(redisContext *c, const char *key, long long at,
                     long long count, long long prev)
{
    char want[72];

    str_is(c, key, state_text(want, sizeof(want), at, count, prev));
}

/* One op of a fixed window (limit 5), a sliding window (limit 8, weight
 * 1/2) and a gcra (burst 3, one a second): each key as the script's
 * formulas say, and the reply the count admitted then each key's value
 * before (the sliding window's current and previous counts, the TAT 0
 * when missing). Decided again later by the clock, with listed costs,
 * then refused: a refusal changes nothing. */
static void test_alg_fixed_swc_gcra_in_one_op(void **state)
{
    fx_t *f = *state;
    static snap_t before, after;
    redisContext *c;
    long long now, exp, fexp, tat, I;
    keys_t k;

    node_start(f, 0, 1, NULL);
    c = f->c[0];
    now = redis_ms(c);
    exp = now + 600000;
    I = now / 60000;
    keys_of(&k, "m");
    ok(c, "SET %s 2 PX 500000", k.f);
    /* The previous window's count 10, that window's state. */
    ok(c, "SET %s %lld:10:3 PX 700000", k.s, I - 1);
    fexp = pexp(c, k.f);

    /* Room: fixed 5 - 2 = 3; sliding 8 - (0 + ceil(min(10, 8) / 2)) = 4;
     * gcra 3e6 - 0 us, 3 requests. 4 requests of 1: 3 admitted. */
    {
        const long long want[] = {3, 2, 0, 10, 0};
        rlb_ints(c, 5, want,
                 "3 %s 0 %lld 600000 1 0 a 3 '' f %lld 5 s %lld 8 32768 %lld "
                 "g 3 1000000 -4 1",
                 k.all, now, exp, exp, I);
    }
    tat = now * 1000 + 3000000;
    assert_int_equal(val(c, k.f), 5);
    assert_int_equal(pexp(c, k.f), fexp); /* it had one: kept */
    state_is(c, k.s, I, 3, 10);           /* moved on to window I */
    assert_int_equal(pexp(c, k.s), exp);  /* a new window: given */
    assert_int_equal(val(c, k.g), tat);
    assert_int_equal(pexp(c, k.g), ms_ceil(tat) + 600000);

    /* 1.5 s later, listed costs: the gcra has 1.5e6 us of room, one
     * request; the sliding window 8 - (3 + 4) = 1; the fixed one (now
     * limit 9) 4. Of 3 requests, the first is admitted. */
    {
        const long long want[] = {1, 5, 3, 10, tat};
        rlb_ints(c, 5, want,
                 "3 %s 0 %lld 600000 1 0 a 3 '' f %lld 9 s %lld 8 32768 %lld "
                 "g 3 1000000 3 1 1 1",
                 k.all, now + 1500, exp + 1500, exp + 1500, I);
    }
    assert_int_equal(val(c, k.f), 6);
    assert_int_equal(pexp(c, k.f), fexp);
    state_is(c, k.s, I, 4, 10);
    assert_int_equal(pexp(c, k.s), exp); /* the same window: kept */
    assert_int_equal(val(c, k.g), tat + 1000000);
    assert_int_equal(pexp(c, k.g), ms_ceil(tat + 1000000) + 600000);

    /* The sliding window is full: refused, nothing written. */
    snap(c, "*", &before);
    {
        const long long want[] = {0, 6, 4, 10, tat + 1000000};
        rlb_ints(c, 5, want,
                 "3 %s 0 %lld 600000 1 0 a 3 '' f %lld 9 s %lld 8 32768 %lld "
                 "g 3 1000000 -1 1",
                 k.all, now + 1500, exp, exp, I);
    }
    snap(c, "*", &after);
    same_snap(&before, &after, "a refused op");
}

/* ---- refusals -----------------------------------------------------------*/

/* An op refused whole leaves every key as it was, whichever limit has no
 * room: nothing created, nothing incremented, no expiry set, a counter
 * found at 0 stays (where a plain op removes it), and a sliding window's
 * state of the previous window is not moved on. */
static void test_alg_refusal_writes_nothing(void **state)
{
    fx_t *f = *state;
    static snap_t before, after;
    redisContext *c;
    long long now, exp, tat, I;
    keys_t k;
    int i;

    node_start(f, 0, 1, NULL);
    c = f->c[0];
    now = redis_ms(c);
    exp = now + 600000;
    tat = now * 1000 + 3000000;
    I = now / 60000;
    for (i = 0; i < 5; i++) {
        char t[8];
        /* What has no room: the fixed window; the sliding one, from its
         * previous count alone (a state of the previous window); the
         * gcra; none for the cost 6 (room 5, 8, 3 requests); none for
         * the cost 4 (the gcra's burst 3). */
        static const char *const costs[] = {"-1 1", "-1 1", "-1 1", "-1 6",
                                            "2 4 6"};
        snprintf(t, sizeof(t), "z%d", i);
        keys_of(&k, t);
        ok(c, "SET %s %d PX 500000", k.f, i == 0 ? 5 : 0);
        if (i == 1)
            ok(c, "SET %s %lld:8:5 PX 500000", k.s, I - 1);
        else
            ok(c, "SET %s %lld:0:0 PX 500000", k.s, I);
        if (i == 2)
            ok(c, "SET %s %lld PX 500000", k.g, tat);
        snap(c, "*", &before);
        {
            const long long want[] = {0, i == 0 ? 5 : 0, 0, i == 1 ? 8 : 0,
                                      i == 2 ? tat : 0};
            rlb_ints(c, 5, want,
                     "3 %s 0 %lld 600000 1 0 a 3 '' f %lld 5 s %lld 8 65536 "
                     "%lld g 3 1000000 %s",
                     k.all, now, exp, exp, I, costs[i]);
        }
        snap(c, "*", &after);
        same_snap(&before, &after, costs[i]);
    }
    /* Listed costs: 4 is refused (room 3), then 2 and 1 are admitted:
     * a refusal consumes nothing. */
    keys_of(&k, "y");
    {
        const long long want[] = {2, 0, 0, 0, 0};
        rlb_ints(c, 5, want,
                 "3 %s 0 %lld 600000 1 0 a 3 '' f %lld 3 s %lld 8 65536 %lld "
                 "g 5 1000000 3 4 2 1",
                 k.all, now, exp, exp, I);
    }
    assert_int_equal(val(c, k.f), 3);
    state_is(c, k.s, I, 3, 0);
    assert_int_equal(pexp(c, k.s), exp);
    assert_int_equal(val(c, k.g), now * 1000 + 3000000);
}

/* ---- equal costs and listed ones -----------------------------------------*/

/* A limit as the script's formulas see it (us for a gcra). */
typedef struct {
    long long used, cap, unit;
} lim_t;

/* How many of k requests of cost c are admitted: the first a with
 * a = min(k, min over limits floor(room / (c x unit))). */
static long long admit_equal(const lim_t *l, int n, long long k, long long c)
{
    long long a = k, room;
    int i;

    for (i = 0; i < n; i++) {
        room = l[i].used >= l[i].cap ? 0 : l[i].cap - l[i].used;
        if (room / (c * l[i].unit) < a)
            a = room / (c * l[i].unit);
    }
    return a;
}

/* One value of a key as a test sets it, expiring at `at`: -1 missing,
 * else the value. */
static void set_or_not(redisContext *c, const char *key, long long v,
                       long long at)
{
    if (v >= 0)
        ok(c, "SET %s %lld PXAT %lld", key, v, at);
}

/* The same keys in tags e<i> and l<i>, decided by "-k c" in the one and by
 * k costs c listed in the other, over counts, states and TATs of every
 * kind: the same replies, the same keys and expiries, and the count the
 * formulas give, each key as they say. Limits: fixed 8; sliding 10,
 * weight 40000 / 65536; gcra burst 4, 500 ms apart (2e6 us). The sliding
 * window's state: missing; of the op's window I (counts 2 and 9, its
 * expiry kept when written); of window I - 1 (its count 3 the previous
 * one, its expiry given when written). */
static void test_alg_equal_and_listed_costs_agree(void **state)
{
    static const long long fs[] = {-1, 0, 3, 7};
    /* the state's window from I (-9: missing), count, previous */
    static const long long scs[][3] = {{-9, 0, 0}, {0, 2, 9}, {-1, 3, 5}};
    static const long long gs[] = {-1, -2000000, 1500001, 4000000};
    static const long long ks[] = {1, 3, 6};
    fx_t *f = *state;
    redisContext *c;
    long long now, exp, kept, I;
    size_t fi, si, gi, ki, ci;
    int i = 0, some = 0, none = 0;

    node_start(f, 0, 1, NULL);
    c = f->c[0];
    now = redis_ms(c);
    exp = now + 600000;
    kept = now + 500000;
    I = now / 60000;
    for (fi = 0; fi < 4; fi++)
        for (si = 0; si < 3; si++)
            for (gi = 0; gi < 4; gi++)
                for (ki = 0; ki < 3; ki++)
                    for (ci = 1; ci <= 2; ci++, i++) {
                        long long k = ks[ki], cost = (long long)ci, a, g0 = -1,
                                  p, want[5];
                        int has = scs[si][0] != -9, same = scs[si][0] == 0;
                        /* what the op reads from the state */
                        long long cur = same ? scs[si][1] : 0,
                                  prev = same ? scs[si][2] : scs[si][1];
                        char te[16], tl[16], listed[64], sv[2][72];
                        lim_t l[3];
                        keys_t ke, kl;
                        int j, n = 0;
                        redisReply *r[2];

                        snprintf(te, sizeof(te), "e%d", i);
                        snprintf(tl, sizeof(tl), "l%d", i);
                        keys_of(&ke, te);
                        keys_of(&kl, tl);
                        if (gs[gi] != -1)
                            g0 = now * 1000 + gs[gi];
                        for (j = 0; j < 2; j++) {
                            const keys_t *kk = j == 0 ? &ke : &kl;
                            set_or_not(c, kk->f, fs[fi], kept);
                            if (has)
                                ok(c, "SET %s %lld:%lld:%lld PXAT %lld", kk->s,
                                   I + scs[si][0], scs[si][1], scs[si][2],
                                   kept);
                            set_or_not(c, kk->g, g0, kept);
                        }
                        n = snprintf(listed, sizeof(listed), "%lld", k);
                        for (j = 0; j < k; j++)
                            n +=
                                snprintf(listed + n, sizeof(listed) - (size_t)n,
                                         " %lld", cost);
                        r[0] = rlb_arr(c,
                                       "3 %s 0 %lld 600000 1 0 a 3 '' f %lld 8 "
                                       "s %lld 10 40000 %lld "
                                       "g 4 500000 -%lld %lld",
                                       ke.all, now, exp, exp, I, k, cost);
                        r[1] = rlb_arr(c,
                                       "3 %s 0 %lld 600000 1 0 a 3 '' f %lld 8 "
                                       "s %lld 10 40000 %lld "
                                       "g 4 500000 %s",
                                       kl.all, now, exp, exp, I, listed);

                        /* The formulas. */
                        p = prev > 10 ? 10 : prev > 0 ? prev : 0;
                        l[0] = (lim_t){fs[fi] > 0 ? fs[fi] : 0, 8, 1};
                        l[1] = (lim_t){(cur > 0 ? cur : 0) +
                                           (p * 40000 + 65535) / 65536,
                                       10, 1};
                        l[2] = (lim_t){g0 > now * 1000 ? g0 - now * 1000 : 0,
                                       2000000, 500000};
                        a = admit_equal(l, 3, k, cost);
                        want[0] = a;
                        want[1] = fs[fi] > 0 ? fs[fi] : 0;
                        want[2] = cur;
                        want[3] = prev;
                        want[4] = g0 > 0 ? g0 : 0;
                        ints(r[0], 5, want, "equal costs");
                        ints(r[1], 5, want, listed);
                        freeReplyObject(r[0]);
                        freeReplyObject(r[1]);
                        some += a > 0;
                        none += a == 0;
                        for (j = 0; j < 2; j++) {
                            const keys_t *kk = j == 0 ? &ke : &kl;
                            if (a == 0) {
                                assert_int_equal(pexp(c, kk->f),
                                                 fs[fi] >= 0 ? kept : -2);
                                assert_int_equal(pexp(c, kk->s),
                                                 has ? kept : -2);
                                if (has)
                                    state_is(c, kk->s, I + scs[si][0],
                                             scs[si][1], scs[si][2]);
                                assert_int_equal(pexp(c, kk->g),
                                                 g0 >= 0 ? kept : -2);
                                continue;
                            }
                            assert_int_equal(val(c, kk->f), want[1] + a * cost);
                            assert_int_equal(pexp(c, kk->f),
                                             fs[fi] > 0 ? kept : exp);
                            state_is(c, kk->s, I, cur + a * cost, prev);
                            assert_int_equal(pexp(c, kk->s), same ? kept : exp);
                            assert_int_equal(val(c, kk->g),
                                             now * 1000 + l[2].used +
                                                 a * cost * 500000);
                            assert_int_equal(pexp(c, kk->g),
                                             ms_ceil(val(c, kk->g)) + 600000);
                        }
                        /* Both tags hold the same. */
                        assert_int_equal(pexp(c, ke.f), pexp(c, kl.f));
                        assert_int_equal(pexp(c, ke.s), pexp(c, kl.s));
                        assert_int_equal(pexp(c, ke.g), pexp(c, kl.g));
                        for (j = 0; j < 3; j++) {
                            const char *x = j == 0   ? ke.f
                                            : j == 1 ? ke.s
                                                     : ke.g;
                            const char *y = j == 0   ? kl.f
                                            : j == 1 ? kl.s
                                                     : kl.g;
                            const char *vx = str_of(c, x, sv[0], sizeof(sv[0]));
                            const char *vy = str_of(c, y, sv[1], sizeof(sv[1]));
                            assert_true((vx == NULL) == (vy == NULL));
                            if (vx != NULL)
                                assert_string_equal(vx, vy);
                        }
                    }
    /* Both outcomes, often. */
    assert_true(some > 50 && none > 50);
}

/* ---- the gcra ------------------------------------------------------------*/

/* A gcra alone (burst 3, one a second, grace 250 s): a TAT in the future
 * leaves room for what it has not used; one admitted moves the TAT by cost
 * x interval from max(TAT, now), and the key expires at ceil(TAT / 1000)
 * + the grace; a TAT in the past or below 0 is no use; a cost past the
 * burst never fits; a refusal leaves the TAT and its expiry. */
static void test_alg_gcra_tat_and_expiry(void **state)
{
    fx_t *f = *state;
    redisContext *c;
    long long now, tat, kept;
    const char *g = "rl:{g}:r:c:1:g";

    node_start(f, 0, 1, NULL);
    c = f->c[0];
    now = redis_ms(c);
    kept = now + 500000;
    tat = now * 1000 + 2500001;
    ok(c, "SET %s %lld PXAT %lld", g, tat, kept);
#define GCRA(at, costs)                                                        \
    "1 %s 0 %lld 250000 1 0 a 1 '' g 3 1000000 " costs, g, (long long)(at)

    /* 2500001 us used of 3e6: less than one interval left. */
    {
        const long long want[] = {0, tat};
        rlb_ints(c, 2, want, GCRA(now, "-1 1"));
    }
    assert_int_equal(val(c, g), tat);
    assert_int_equal(pexp(c, g), kept);
    /* 600 ms later 1900001 are used: one fits, the TAT moves by 1 s. */
    {
        const long long want[] = {1, tat};
        rlb_ints(c, 2, want, GCRA(now + 600, "-3 1"));
    }
    assert_int_equal(val(c, g), tat + 1000000);
    assert_int_equal(pexp(c, g), now + 3501 + 250000);

    /* A TAT in the past: none used; a cost of 2 uses 2 s. */
    tat = now * 1000 - 5000000;
    ok(c, "SET %s %lld PXAT %lld", g, tat, kept);
    {
        const long long want[] = {1, tat};
        rlb_ints(c, 2, want, GCRA(now, "-1 2"));
    }
    assert_int_equal(val(c, g), now * 1000 + 2000000);
    assert_int_equal(pexp(c, g), now + 2000 + 250000);
    /* Below 0: the same. */
    ok(c, "SET %s -7 PXAT %lld", g, kept);
    {
        const long long want[] = {3, -7};
        rlb_ints(c, 2, want, GCRA(now, "-5 1"));
    }
    assert_int_equal(val(c, g), now * 1000 + 3000000);
    assert_int_equal(pexp(c, g), now + 3000 + 250000);

    /* A cost of 4 never fits a burst of 3: nothing written, even on an
     * empty key; listed costs after it are decided on their own. */
    ok(c, "DEL %s", g);
    {
        const long long want[] = {0, 0};
        rlb_ints(c, 2, want, GCRA(now, "-1 4"));
    }
    assert_int_equal(int_of(c, "EXISTS %s", g), 0);
    {
        const long long want[] = {2, 0};
        rlb_ints(c, 2, want, GCRA(now, "4 4 1 3 2"));
    }
    assert_int_equal(val(c, g), now * 1000 + 3000000);
#undef GCRA
}

/* ---- "a" profiles ---------------------------------------------------------*/

/* Ops of other algorithms whose limits are an "a" profile (numbered with
 * the fixed windows' profiles): a run "R k A" of one request of cost 1
 * each and "A A k c", decided as the same ops spelled out; a reference of
 * the wrong kind, past the profiles or past the ops, and a profile out of
 * range, refuse the batch whole. */
static void test_alg_profiles(void **state)
{
    fx_t *f = *state;
    static snap_t s;
    redisContext *c;
    long long now, exp, g;
    int i;

    node_start(f, 0, 1, NULL);
    c = f->c[0];
    now = redis_ms(c);
    exp = now + 600000;
    g = now * 1000;
    /* gcra burst 2, 1 s apart; a sliding-window-counter of 3 in 60 s with
     * it in the second profile. Ops: a run of two on profile 2 (g1, g2),
     * 3 requests on g3 (2 fit), then one on profile 3 (s4, g4). */
    {
        const long long want[] = {1, 0, 1, 0, 2, 0, 1, 0, 0, 0};
        rlb_ints(c, 10, want,
                 "5 rl:{p}:g1 rl:{p}:g2 rl:{p}:g3 rl:{p}:s4 rl:{p}:g4 0 %lld "
                 "600000 4 3 1 %lld 5 a 1 g 2 1000000 a 2 s %lld 3 65536 %lld "
                 "g 2 1000000 R 2 2 A 2 3 1 R 1 3",
                 now, exp, exp, now / 60000);
    }
    assert_int_equal(val(c, "rl:{p}:g1"), g + 1000000);
    assert_int_equal(val(c, "rl:{p}:g2"), g + 1000000);
    assert_int_equal(val(c, "rl:{p}:g3"), g + 2000000);
    assert_int_equal(val(c, "rl:{p}:g4"), g + 1000000);
    state_is(c, "rl:{p}:s4", now / 60000, 1, 0);
    assert_int_equal(pexp(c, "rl:{p}:s4"), exp);
    /* The same again on g3 through "A": full, nothing written. */
    {
        const long long want[] = {0, g + 2000000};
        rlb_ints(c, 2, want,
                 "1 rl:{p}:g3 0 %lld 600000 1 1 a 1 g 2 1000000 A 1 1 1", now);
    }
    assert_int_equal(val(c, "rl:{p}:g3"), g + 2000000);

    ok(c, "FLUSHALL");
    ok(c, "SET rl:{x}:k 1 PX 500000");
    /* A fixed op on an "a" profile, and the other way round. */
    rlb_refused(c, "1 rl:{x}:a 0 %lld 600000 1 1 a 1 g 2 1000 1", now);
    rlb_refused(c, "1 rl:{x}:a 0 %lld 600000 1 1 a 1 g 2 1000 -1 2 1", now);
    rlb_refused(c, "1 rl:{x}:a 0 %lld 600000 2 1 a 1 g 2 1000 r 2 1", now);
    rlb_refused(c, "1 rl:{x}:a 0 %lld 600000 1 1 %lld 5 R 1 1", now, exp);
    rlb_refused(c, "1 rl:{x}:a 0 %lld 600000 1 1 %lld 5 A 1 1 1", now, exp);
    /* Past the profiles, past the ops, a key too few or too many. */
    rlb_refused(c, "1 rl:{x}:a 0 %lld 600000 1 1 a 1 g 2 1000 A 2 1 1", now);
    rlb_refused(c, "1 rl:{x}:a 0 %lld 600000 1 1 a 1 g 2 1000 A 0 1 1", now);
    rlb_refused(c, "2 rl:{x}:a rl:{x}:b 0 %lld 600000 1 1 a 1 g 2 1000 R 2 1",
                now);
    rlb_refused(c, "1 rl:{x}:a 0 %lld 600000 2 1 a 1 g 2 1000 R 2 1", now);
    rlb_refused(c, "2 rl:{x}:a rl:{x}:b 0 %lld 600000 1 1 a 1 g 2 1000 R 1 1",
                now);
    /* Costs, and one key twice in an op. */
    rlb_refused(c, "1 rl:{x}:a 0 %lld 600000 1 1 a 1 g 2 1000 A 1 0 1", now);
    rlb_refused(c, "1 rl:{x}:a 0 %lld 600000 1 1 a 1 g 2 1000 A 1 1 0", now);
    rlb_refused(c, "1 rl:{x}:a 0 %lld 600000 1 1 a 1 g 2 1000 A 1 1", now);
    rlb_refused(c,
                "2 rl:{x}:a rl:{x}:a 0 %lld 600000 1 1 a 2 g 2 1000 g 3 1000 "
                "R 1 1",
                now);
    /* Profiles out of range. */
    rlb_refused(c, "1 rl:{x}:a 0 %lld 600000 1 1 a 1 g 0 1000 R 1 1", now);
    rlb_refused(c, "1 rl:{x}:a 0 %lld 600000 1 1 a 0 R 1 1", now);
    rlb_refused(c, "1 rl:{x}:a 0 %lld 600000 1 1 a 9 g 2 1000 R 1 1", now);
    rlb_refused(c, "1 rl:{x}:a 0 %lld 600000 1 1 a 1 s %lld 3 65536 -1 R 1 1",
                now, exp);
    {
        /* 17 "a" profiles: one too many. */
        char t[2048];
        int n = 0;
        for (i = 0; i < 17; i++)
            n += snprintf(t + n, sizeof(t) - (size_t)n, " a 1 g 2 1000");
        rlb_refused(c, "1 rl:{x}:a 0 %lld 600000 1 17%s R 1 1", now, t);
        rlb_ok(c, "1 rl:{x}:a 0 %lld 600000 1 16%s R 1 16", now,
               t + strlen(" a 1 g 2 1000"));
    }
    snap(c, "*", &s);
    assert_int_equal(s.n, 2); /* rl:{x}:k, and the last batch's key */
}

/* ---- the sliding-window-counter ------------------------------------------*/

/* A sliding window alone (limit 8), its one key's state "I:cur:prev" at
 * the op's window index I: the previous count weighs ceil(min(prev, 8) x
 * weight / 65536); the admitted cost is added to the current count and
 * the state written back whole, keeping the key's expiry in its window
 * and given the op's when the window moved on (the count then the
 * previous one). A WATCH on the key does not survive a batch that writes
 * it. */
static void test_alg_swc_weight_and_expiry(void **state)
{
    fx_t *f = *state;
    redisContext *c, *w;
    redisReply *r;
    long long now, exp, kept, I;
    const char *s = "rl:{s}:r:b:60:s";

    node_start(f, 0, 1, NULL);
    c = f->c[0];
    now = redis_ms(c);
    exp = now + 600000;
    kept = now + 500000;
    I = now / 60000;
#define SWC(weight, costs)                                                     \
    "1 %s 0 %lld 600000 1 0 a 1 '' s %lld 8 " weight " %lld " costs, s, now,   \
        exp, I

    /* The previous window's 100 counts as 8, half of it as 4: room 4 of 6
     * requests; moved on to I, its expiry given. */
    ok(c, "SET %s %lld:100:0 PXAT %lld", s, I - 1, kept);
    {
        const long long want[] = {4, 0, 100};
        rlb_ints(c, 3, want, SWC("32768", "-6 1"));
    }
    state_is(c, s, I, 4, 100);
    assert_int_equal(pexp(c, s), exp);
    /* All of it weighs 8: no room, nothing written. */
    ok(c, "SET %s %lld:0:100 PXAT %lld", s, I, kept);
    {
        const long long want[] = {0, 0, 100};
        rlb_ints(c, 3, want, SWC("65536", "-1 1"));
    }
    state_is(c, s, I, 0, 100);
    assert_int_equal(pexp(c, s), kept);
    /* The least weight: ceil(8 / 65536) = 1, room 7; in its window the
     * key keeps its expiry, even with a count of 0. */
    {
        const long long want[] = {7, 0, 100};
        rlb_ints(c, 3, want, SWC("1", "-9 1"));
    }
    state_is(c, s, I, 7, 100);
    assert_int_equal(pexp(c, s), kept);
    /* A previous count below 0 weighs 0; listed costs. */
    ok(c, "SET %s %lld:2:-4 PXAT %lld", s, I, kept);
    {
        const long long want[] = {3, 2, -4};
        rlb_ints(c, 3, want, SWC("65536", "3 1 2 3"));
    }
    state_is(c, s, I, 8, -4);
    assert_int_equal(pexp(c, s), kept);
    /* A current count below 0 counts as 0, and is added to. */
    ok(c, "SET %s %lld:-3:0 PXAT %lld", s, I, kept);
    {
        const long long want[] = {1, -3, 0};
        rlb_ints(c, 3, want, SWC("65536", "-1 8"));
    }
    state_is(c, s, I, 5, 0);
    assert_int_equal(pexp(c, s), kept);

    /* A WATCH on the key does not survive a batch that writes it. */
    w = redisConnect("127.0.0.1", f->r[0].port);
    assert_non_null(w);
    assert_int_equal(w->err, 0);
    ok(c, "SET %s %lld:0:3 PXAT %lld", s, I, kept);
    ok(w, "WATCH %s", s);
    rlb_ok(c, SWC("65536", "-1 1"));
    ok(w, "MULTI");
    ok(w, "PING");
    r = redisCommand(w, "EXEC");
    assert_non_null(r);
    assert_int_equal(r->type, REDIS_REPLY_NIL);
    freeReplyObject(r);
    redisFree(w);
    state_is(c, s, I, 1, 3);
    assert_int_equal(pexp(c, s), kept);
#undef SWC
}

/* A sliding window's state read at the op's index I (limit 10, weight
 * 1/2), each case of the script's sread, with the reply's current and
 * previous counts, the state written and its expiry: missing (cur 0, prev
 * 0: "I:add:0", the op's expiry); of I (its counts, the expiry kept); of
 * I - 1 (cur 0, prev its count: "I:add:count", the op's expiry); of I + 1
 * (another instance's batch ahead: cur its previous count, prev the limit,
 * as I - 1's count is gone and its share must not be dropped, the cost
 * added to that previous count, the expiry kept); past I + 1 (cur the
 * limit, I's count being gone: nothing admitted, nothing written); before
 * I - 1 (0 and 0, "I:add:0", the op's expiry); not such
 * a state ("ERR value is not an integer or out of range", eERR, nothing
 * written, the rest of the batch decided). */
static void test_alg_swc_state_transitions(void **state)
{
    static const struct {
        int di; /* the stored window from I; -99: missing */
        long long c1, c2;
        long long cur, prev, adm; /* the reply, for 3 of cost 1 */
        int at;                   /* the window written, from I; 99: none */
        long long w1, w2;
        int kept; /* the key's expiry kept (else the op's) */
    } rows[] = {
        {-99, 0, 0, 0, 0, 3, 0, 3, 0, 0}, /* missing */
        {0, 2, 6, 2, 6, 3, 0, 5, 6, 1},   /* S == I: room 10 - 5 */
        {0, 4, 8, 4, 8, 2, 0, 6, 8, 1},   /* S == I: room 10 - 8 */
        {-1, 4, 9, 0, 4, 3, -1, 0, 0, 0}, /* S == I - 1 (shown below) */
        {1, 5, 2, 2, 10, 3, 1, 5, 5, 1},  /* S == I + 1: room 10 - 2 - 5 */
        {1, 5, 6, 6, 10, 0, 99, 5, 6, 1}, /* room 10 - 6 - 5 */
        {2, 5, 2, 10, 0, 0, 99, 5, 2, 1}, /* S > I + 1 */
        {9, 5, 2, 10, 0, 0, 99, 5, 2, 1},
        {-2, 5, 7, 0, 0, 3, 0, 3, 0, 0}, /* S < I - 1 */
        {-9, 5, 7, 0, 0, 3, 0, 3, 0, 0},
    };
    static const char *const bad[] = {
        "abc",    "",       "7",      "1:2",     "1:2:3:4",
        "-1:2:3", "x:1:2",  "1::2",   "1:2:",    ":1:2",
        "1:a:2",  "1:2:3 ", " 1:2:3", "1:2.5:3", "1:2:99999999999999999999",
        "+1:2:3", "1:+2:3",
    };
    fx_t *f = *state;
    static snap_t before, after;
    redisContext *c;
    redisReply *r;
    long long now, exp, kept, I;
    const char *s = "rl:{t}:r:b:60:s", *fk = "rl:{t}:r:a:60:1";
    size_t i;

    node_start(f, 0, 1, NULL);
    c = f->c[0];
    now = redis_ms(c);
    exp = now + 600000;
    kept = now + 500000;
    I = now / 60000;
    for (i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        char what[32];

        snprintf(what, sizeof(what), "row %zu", i);
        ok(c, "DEL %s", s);
        if (rows[i].di != -99)
            ok(c, "SET %s %lld:%lld:%lld PXAT %lld", s, I + rows[i].di,
               rows[i].c1, rows[i].c2, kept);
        r = rlb_arr(c,
                    "1 %s 0 %lld 600000 1 0 a 1 '' s %lld 10 32768 %lld -3 1",
                    s, now, exp, I);
        {
            const long long w[] = {rows[i].adm, rows[i].cur, rows[i].prev};
            ints(r, 3, w, what);
        }
        freeReplyObject(r);
        if (rows[i].at == 99)
            state_is(c, s, I + rows[i].di, rows[i].c1, rows[i].c2);
        else if (rows[i].at == -1) /* "I:add:<stored count>" */
            state_is(c, s, I, rows[i].adm, rows[i].c1);
        else
            state_is(c, s, I + rows[i].at, rows[i].w1, rows[i].w2);
        if (pexp(c, s) != (rows[i].kept ? kept : exp))
            fail_msg("%s: expiry %lld, want %s", what, pexp(c, s),
                     rows[i].kept ? "kept" : "given");
    }

    /* Not a state: that op fails, nothing written; the fixed window
     * after it in the batch is decided. */
    for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        ok(c, "DEL %s %s", s, fk);
        ok(c, "SET %s %b PXAT %lld", s, bad[i], strlen(bad[i]), kept);
        snap(c, "*", &before);
        r = rlb_arr(c,
                    "2 %s %s 0 %lld 600000 2 0 a 1 '' s %lld 10 32768 %lld "
                    "-1 1 a 1 '' f %lld 5 -1 1",
                    s, fk, now, exp, I, exp);
        if (r->elements != 4 || r->element[0]->type != REDIS_REPLY_STRING ||
            strcmp(r->element[0]->str, "eERR") != 0)
            fail_msg("\"%s\": not refused as eERR", bad[i]);
        assert_int_equal(r->element[1]->integer, 1);
        assert_int_equal(r->element[2]->integer, 0);
        assert_string_equal(r->element[3]->str,
                            "ERR value is not an integer or out of range");
        freeReplyObject(r);
        assert_int_equal(val(c, fk), 1);
        ok(c, "DEL %s", fk);
        snap(c, "*", &after);
        same_snap(&before, &after, bad[i]);
    }
    /* Nor is a list: eWRONGTYPE. */
    ok(c, "DEL %s", s);
    ok(c, "RPUSH %s x", s);
    r = rlb_arr(c, "1 %s 0 %lld 600000 1 0 a 1 '' s %lld 10 32768 %lld -1 1", s,
                now, exp, I);
    assert_int_equal(r->elements, 2);
    assert_string_equal(r->element[0]->str, "eWRONGTYPE");
    freeReplyObject(r);
}

/* ---- the reply, and keys that are no counters ----------------------------*/

/* One batch of a plain op and "a" ops, two of them on a key that is no
 * counter (a list, a string of letters): those two alone fail, as
 * "e<KIND>" (and write none of their keys), the others are decided, and
 * the first failure's text ends the reply. */
static void test_alg_reply_entries(void **state)
{
    fx_t *f = *state;
    redisContext *c;
    redisReply *r;
    long long now, exp, I;
    size_t i;

    node_start(f, 0, 1, NULL);
    c = f->c[0];
    now = redis_ms(c);
    exp = now + 600000;
    I = now / 60000;
    ok(c, "RPUSH rl:{r}:list x");
    ok(c, "SET rl:{r}:bad abc");
    ok(c, "SET rl:{r}:s %lld:6:1", I - 1);
    r = rlb_arr(
        c,
        "8 rl:{r}:p rl:{r}:f1 rl:{r}:g1 rl:{r}:list rl:{r}:g2 "
        "rl:{r}:f3 rl:{r}:bad rl:{r}:s 0 %lld 600000 5 "
        "1 1 %lld 5 1 a 2 '' f %lld 5 g 2 1000 -1 1 a 2 '' f %lld 5 g 2 "
        "1000 -1 1 a 2 '' f %lld 5 g 2 1000 -1 1 a 1 '' s %lld 9 32768 %lld "
        "3 2 3 4",
        now, exp, exp, exp, exp, exp, I);
    {
        static const struct {
            int type;
            long long i;
            const char *s;
        } want[] = {
            {REDIS_REPLY_INTEGER, 1, NULL}, /* the plain op */
            {REDIS_REPLY_INTEGER, 0, NULL},
            {REDIS_REPLY_INTEGER, 1, NULL}, /* f1, g1 */
            {REDIS_REPLY_INTEGER, 0, NULL},
            {REDIS_REPLY_INTEGER, 0, NULL},
            {REDIS_REPLY_STRING, 0, "eWRONGTYPE"}, /* the list */
            {REDIS_REPLY_STRING, 0, "eERR"},       /* "abc" */
            {REDIS_REPLY_INTEGER, 2, NULL},        /* 3 + 2 + 3 + 4 > 9 */
            {REDIS_REPLY_INTEGER, 0, NULL},
            {REDIS_REPLY_INTEGER, 6, NULL},
            {REDIS_REPLY_STRING, 0,
             "WRONGTYPE Operation against a key holding the wrong kind of "
             "value"},
        };
        assert_int_equal(r->elements, sizeof(want) / sizeof(want[0]));
        for (i = 0; i < r->elements; i++) {
            const redisReply *e = r->element[i];
            if (e->type != want[i].type)
                fail_msg("element %zu: type %d, want %d", i, e->type,
                         want[i].type);
            if (e->type == REDIS_REPLY_INTEGER)
                assert_int_equal(e->integer, want[i].i);
            else
                assert_string_equal(e->str, want[i].s);
        }
    }
    freeReplyObject(r);
    assert_int_equal(val(c, "rl:{r}:p"), 1);
    assert_int_equal(val(c, "rl:{r}:f1"), 1);
    assert_int_equal(val(c, "rl:{r}:g1"), now * 1000 + 1000);
    assert_int_equal(int_of(c, "EXISTS %s", "rl:{r}:g2"), 0);
    assert_int_equal(int_of(c, "EXISTS %s", "rl:{r}:f3"), 0);
    state_is(c, "rl:{r}:s", I, 5, 6);
}

/* ---- arguments out of range ----------------------------------------------*/

static long long x_now, x_exp;

/* A batch of a plain op on rl:{x}:p, then an "a" op on n keys with the
 * arguments of fmt: decided when good, else refused whole. */
static void __attribute__((format(printf, 5, 6)))
x_batch(redisContext *c, int good, int n, const char *keys, const char *fmt,
        ...)
{
    char a[1024];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(a, sizeof(a), fmt, ap);
    va_end(ap);
    if (good)
        rlb_ok(c, "%d rl:{x}:p %s 0 %lld 600000 2 1 1 %lld 5 1 %s", n + 1, keys,
               x_now, x_exp, a);
    else
        rlb_refused(c, "%d rl:{x}:p %s 0 %lld 600000 2 1 1 %lld 5 1 %s", n + 1,
                    keys, x_now, x_exp, a);
}

#define BAD(...) x_batch(c, 0, __VA_ARGS__)
#define GOOD(...) x_batch(c, 1, __VA_ARGS__)

/* A batch whose "a" op has an argument out of range, a key too few or
 * too many, or one key twice, is refused whole: the plain op before it
 * writes nothing either. The edges of each range are decided. */
static void test_alg_malformed_refused_whole(void **state)
{
    fx_t *f = *state;
    static snap_t s;
    redisContext *c;
    long long exp, I;

    node_start(f, 0, 1, NULL);
    c = f->c[0];
    x_now = redis_ms(c);
    x_exp = exp = x_now + 600000;
    I = x_now / 60000;
    ok(c, "SET rl:{x}:k 1 PX 500000");

    /* nwin, the letters. */
    BAD(1, "rl:{x}:f", "a 0 -1 1");
    BAD(9,
        "rl:{x}:1 rl:{x}:2 rl:{x}:3 rl:{x}:4 rl:{x}:5 rl:{x}:6 rl:{x}:7 "
        "rl:{x}:8 rl:{x}:9",
        "a 9 '' f %lld 5 f 1 5 f 1 5 f 1 5 f 1 5 f 1 5 f 1 5 f 1 5 f 1 5 -1 1",
        exp);
    BAD(1, "rl:{x}:f", "a -1 f %lld 5 -1 1", exp);
    BAD(1, "rl:{x}:f", "a x f %lld 5 -1 1", exp);
    BAD(1, "rl:{x}:f", "a 1 x %lld 5 -1 1", exp);
    BAD(1, "rl:{x}:f", "a 1 F %lld 5 -1 1", exp);
    BAD(1, "rl:{x}:f", "a 1 ff %lld 5 -1 1", exp);
    BAD(1, "rl:{x}:f", "a 1 '' %lld 5 -1 1", exp);
    BAD(1, "rl:{x}:f", "A 1 f %lld 5 -1 1", exp);
    /* Limits and expiries. */
    BAD(1, "rl:{x}:f", "a 1 '' f %lld 0 -1 1", exp);
    BAD(1, "rl:{x}:f", "a 1 '' f %lld -1 -1 1", exp);
    BAD(1, "rl:{x}:f", "a 1 '' f %lld 5.5 -1 1", exp);
    BAD(1, "rl:{x}:f", "a 1 '' f %lld 9223372036854775808 -1 1", exp);
    BAD(1, "rl:{x}:f", "a 1 '' f 0 5 -1 1");
    BAD(1, "rl:{x}:f", "a 1 '' f -1 5 -1 1");
    BAD(1, "rl:{x}:f", "a 1 '' f 9007199254740992 5 -1 1");
    BAD(1, "rl:{x}:s", "a 1 '' s 0 5 100 %lld -1 1", I);
    BAD(1, "rl:{x}:s", "a 1 '' s %lld 0 100 %lld -1 1", exp, I);
    /* Weights. */
    BAD(1, "rl:{x}:s", "a 1 '' s %lld 5 0 %lld -1 1", exp, I);
    BAD(1, "rl:{x}:s", "a 1 '' s %lld 5 65537 %lld -1 1", exp, I);
    BAD(1, "rl:{x}:s", "a 1 '' s %lld 5 -1 %lld -1 1", exp, I);
    /* Window indexes: within [0, 2^53 - 1], and there (the old form,
     * without one, is refused: its costs' -1 is no index). */
    BAD(1, "rl:{x}:s", "a 1 '' s %lld 5 100 -1 -1 1", exp);
    BAD(1, "rl:{x}:s", "a 1 '' s %lld 5 100 9007199254740992 -1 1", exp);
    BAD(1, "rl:{x}:s", "a 1 '' s %lld 5 100 1.5 -1 1", exp);
    BAD(1, "rl:{x}:s", "a 1 '' s %lld 5 100 x -1 1", exp);
    BAD(1, "rl:{x}:s", "a 1 '' s %lld 5 100 -1 1", exp);
    BAD(2, "rl:{x}:sc rl:{x}:sp", "a 1 '' s %lld 5 100 -1 1", exp);
    /* Bursts and intervals: burst x interval within 366 days of us. */
    BAD(1, "rl:{x}:g", "a 1 '' g 0 1000 -1 1");
    BAD(1, "rl:{x}:g", "a 1 '' g 3 0 -1 1");
    BAD(1, "rl:{x}:g", "a 1 '' g 3 -1000 -1 1");
    BAD(1, "rl:{x}:g", "a 1 '' g 31622400 1000001 -1 1");
    BAD(1, "rl:{x}:g", "a 1 '' g 1 31622400000001 -1 1");
    BAD(1, "rl:{x}:g", "a 1 '' g 9223372036854775807 2 -1 1");
    /* Costs. */
    BAD(1, "rl:{x}:f", "a 1 '' f %lld 5 -1 0", exp);
    BAD(1, "rl:{x}:f", "a 1 '' f %lld 5 0", exp);
    BAD(1, "rl:{x}:f", "a 1 '' f %lld 5 2 1", exp);
    BAD(1, "rl:{x}:f", "a 1 '' f %lld 5 -1", exp);
    BAD(1, "rl:{x}:f", "a 1 '' f %lld 5 1 -1", exp);
    BAD(1, "rl:{x}:f", "a 1 '' f %lld 5 -1 1 1", exp);
    BAD(1, "rl:{x}:f", "a 1 '' f %lld 5 -2 9223372036854775807", exp);
    BAD(1, "rl:{x}:f", "a 1 '' f %lld 5", exp);
    /* Keys: too few, too many (a sliding window has one: not its current
     * and previous counters), one twice (KEYS of two limits). */
    BAD(1, "rl:{x}:s", "a 2 '' f %lld 5 s %lld 5 100 %lld -1 1", exp, exp, I);
    BAD(2, "rl:{x}:f rl:{x}:g", "a 1 '' f %lld 5 -1 1", exp);
    BAD(2, "rl:{x}:s rl:{x}:s4", "a 1 '' s %lld 5 100 %lld -1 1", exp, I);
    BAD(2, "rl:{x}:k rl:{x}:k", "a 2 '' f %lld 5 g 3 1000 -1 1", exp);
    BAD(2, "rl:{x}:k rl:{x}:k", "a 2 '' f %lld 5 s %lld 5 100 %lld -1 1", exp,
        exp, I);
    BAD(3, "rl:{x}:g rl:{x}:s rl:{x}:g",
        "a 3 '' g 3 1000 s %lld 5 100 %lld g 3 1000 -1 1", exp, I);
    snap(c, "*", &s);
    assert_int_equal(s.n, 1); /* rl:{x}:k alone */

    /* The edges are decided. */
    GOOD(8,
         "rl:{x}:1 rl:{x}:2 rl:{x}:3 rl:{x}:4 rl:{x}:5 rl:{x}:6 rl:{x}:7 "
         "rl:{x}:8",
         "a 8 '' f %lld 5 f 1 5 f 1 5 f 1 5 f 1 5 f 1 5 f 1 5 f 1 5 -1 1", exp);
    GOOD(1, "rl:{x}:s", "a 1 '' s %lld 1 1 %lld -1 1", exp, I);
    GOOD(1, "rl:{x}:s", "a 1 '' s %lld 9223372036854775807 65536 %lld -1 1",
         exp, I);
    GOOD(1, "rl:{x}:s0", "a 1 '' s %lld 5 100 0 -1 1", exp);
    GOOD(1, "rl:{x}:smax", "a 1 '' s %lld 5 100 9007199254740991 -1 1", exp);
    GOOD(1, "rl:{x}:g", "a 1 '' g 1 1 -1 1");
    GOOD(1, "rl:{x}:g", "a 1 '' g 31622400 1000000 -1 1");
    GOOD(1, "rl:{x}:g", "a 1 '' g 1 31622400000000 -1 1");
    GOOD(1, "rl:{x}:f", "a 1 '' f %lld 9223372036854775807 -1 1", exp);
    GOOD(1, "rl:{x}:f", "a 1 '' f 9007199254740991 5 -1 1");
    snap(c, "*", &s);
    assert_true(all_expire(&s) >= 7);
    str_is(c, "rl:{x}:s0", "0:1:0");
    str_is(c, "rl:{x}:smax", "9007199254740991:1:0");
#undef BAD
#undef GOOD
}

/* ---- a stored quota's base -----------------------------------------------*/

/* A stored quota replaces windows whose first key is staggered per caller
 * (":60:p7"): its counters are "<base>:<w>:<index>", the base being the
 * key without ":60:p7", as the script's '^(.*):%d+:%a?%a?%d*$' takes it
 * (up to two letters, then digits or none: ":60:g", ":60:l", a
 * sliding-window-counter's ":60:s" and, staggered, ":60:sp" too, and
 * ":60:pp7"). Three letters, a letter after the digits or before the
 * window, no window's digits: no base, refused whole. */
static void test_quota_base_of_staggered_key(void **state)
{
    fx_t *f = *state;
    redisContext *c;
    redisReply *r;
    long long now, exp;
    char key[64];

    node_start(f, 0, 1, NULL);
    c = f->c[0];
    now = redis_ms(c);
    exp = now + 600000;
    ok(c, "HSET rl:{p}:q b %s", "3/60 5/3600");
    r = rlb_arr(c,
                "2 rl:{p}:r:b:60:p7 rl:{p}:q 0 %lld 600000 1 0 0 1 b %lld 10 "
                "1 -2 1",
                now, exp);
    assert_int_equal(r->elements, 1);
    assert_int_equal(r->element[0]->type, REDIS_REPLY_STRING);
    assert_string_equal(r->element[0]->str, "2 q 60 3 0 3600 5 0");
    freeReplyObject(r);
    snprintf(key, sizeof(key), "rl:{p}:r:b:60:%lld", now / 60000);
    assert_int_equal(val(c, key), 2);
    snprintf(key, sizeof(key), "rl:{p}:r:b:3600:%lld", now / 3600000);
    assert_int_equal(val(c, key), 2);
    assert_int_equal(int_of(c, "EXISTS %s", "rl:{p}:r:b:60:p7"), 0);
    /* The unstaggered key names the same counters. */
    r = rlb_arr(c,
                "2 rl:{p}:r:b:60:7 rl:{p}:q 0 %lld 600000 1 0 0 1 b %lld 10 "
                "1 -1 1",
                now, exp);
    assert_string_equal(r->element[0]->str, "1 q 60 3 2 3600 5 2");
    freeReplyObject(r);

    rlb_refused(c,
                "2 rl:{p}:r:b:p60:7 rl:{p}:q 0 %lld 600000 1 0 0 1 b %lld 10 "
                "1 -1 1",
                now, exp);
    rlb_refused(c,
                "2 rl:{p}:r:b:60:ppp7 rl:{p}:q 0 %lld 600000 1 0 0 1 b %lld "
                "10 1 -1 1",
                now, exp);
    rlb_refused(c,
                "2 rl:{p}:r:b:60:spp rl:{p}:q 0 %lld 600000 1 0 0 1 b %lld "
                "10 1 -1 1",
                now, exp);
    /* Letters without an index (a gcra's ":60:g", a log's ":60:l", a
     * sliding-window-counter's ":60:s" and ":60:sp") or two before one
     * end a base too: the same counters, now full. */
    {
        static const char *const ends[] = {"g", "l", "s", "sp", "pp7"};
        size_t i;
        for (i = 0; i < sizeof(ends) / sizeof(ends[0]); i++) {
            r = rlb_arr(c,
                        "2 rl:{p}:r:b:60:%s rl:{p}:q 0 %lld 600000 1 0 0 1 b "
                        "%lld 10 1 -1 1",
                        ends[i], now, exp);
            assert_int_equal(r->elements, 1);
            if (r->element[0]->type != REDIS_REPLY_STRING ||
                strcmp(r->element[0]->str, "0 q 60 3 3 3600 5 3") != 0)
                fail_msg(":60:%s: not the stored quota's counters", ends[i]);
            freeReplyObject(r);
        }
    }
    rlb_refused(c,
                "2 rl:{p}:r:b:60:7p rl:{p}:q 0 %lld 600000 1 0 0 1 b %lld 10 "
                "1 -1 1",
                now, exp);
    rlb_refused(c,
                "2 rl:{p}:r:b:60:s7p rl:{p}:q 0 %lld 600000 1 0 0 1 b %lld 10 "
                "1 -1 1",
                now, exp);
    rlb_refused(c, "2 p60:p7 rl:{p}:q 0 %lld 600000 1 0 0 1 b %lld 10 1 -1 1",
                now, exp);
    rlb_refused(c,
                "2 rl:{p}:r:b:sp rl:{p}:q 0 %lld 600000 1 0 0 1 b %lld 10 1 "
                "-1 1",
                now, exp);
    rlb_refused(c, "2 60:sp rl:{p}:q 0 %lld 600000 1 0 0 1 b %lld 10 1 -1 1",
                now, exp);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        MODULE_TEST(test_alg_fixed_swc_gcra_in_one_op),
        MODULE_TEST(test_alg_refusal_writes_nothing),
        MODULE_TEST(test_alg_equal_and_listed_costs_agree),
        MODULE_TEST(test_alg_gcra_tat_and_expiry),
        MODULE_TEST(test_alg_swc_weight_and_expiry),
        MODULE_TEST(test_alg_swc_state_transitions),
        MODULE_TEST(test_alg_reply_entries),
        MODULE_TEST(test_alg_malformed_refused_whole),
        MODULE_TEST(test_alg_profiles),
        MODULE_TEST(test_quota_base_of_staggered_key),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
