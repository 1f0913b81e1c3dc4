/* The ratelimit Redis module's keys of other shapes, against a private
 * redis-server that loads it by path ($RLT_MODULE_SO) (module_fx.h): a
 * stored quota named on a window staggered per caller (":<w>:p<index>")
 * finds its counters' base as the script's pattern does. */
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

/* RL.BATCH that must be decided: its array reply (the caller frees it). */
static redisReply *rlb_arr(redisContext *c, const char *fmt, ...)
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
    return r;
}

/* RL.BATCH that must be refused whole: an error, and the keyspace as it
 * was. */
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

/* ---- a stored quota's base -----------------------------------------------*/

/* A stored quota replaces windows whose first key is staggered per caller
 * (":60:p7"): its counters are "<base>:<w>:<index>", the base being the
 * key without ":60:p7", as the script's '^(.*):%d+:p?%d+$' takes it. A
 * 'p' anywhere else, or with no index, is no base: refused whole. */
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

    refused(c,
            "2 rl:{p}:r:b:p60:7 rl:{p}:q 0 %lld 600000 1 0 0 1 b %lld 10 "
            "1 -1 1",
            now, exp);
    refused(c,
            "2 rl:{p}:r:b:60:pp7 rl:{p}:q 0 %lld 600000 1 0 0 1 b %lld 10 "
            "1 -1 1",
            now, exp);
    refused(c,
            "2 rl:{p}:r:b:60:p rl:{p}:q 0 %lld 600000 1 0 0 1 b %lld 10 "
            "1 -1 1",
            now, exp);
    refused(c,
            "2 rl:{p}:r:b:60:7p rl:{p}:q 0 %lld 600000 1 0 0 1 b %lld 10 "
            "1 -1 1",
            now, exp);
    refused(c, "2 p60:p7 rl:{p}:q 0 %lld 600000 1 0 0 1 b %lld 10 1 -1 1", now,
            exp);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        MODULE_TEST(test_quota_base_of_staggered_key),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
