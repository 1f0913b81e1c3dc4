/* Smoke test of run.sh's floor servers (label: integration): floor_echo
 * answers 3 pipelined frames with 3 OK answers carrying their ids;
 * floor_redis does the same after a round trip to its Redis, seen in
 * Redis's INFO commandstats, and with --incr counts each frame's key there.
 * Nothing here asserts a speed. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <unistd.h>

#include "rl_error.h"
#include "rlt.h"

#ifndef FLOOR_ECHO_BIN
#error "FLOOR_ECHO_BIN must name the floor_echo binary"
#endif
#ifndef FLOOR_REDIS_BIN
#error "FLOOR_REDIS_BIN must name the floor_redis binary"
#endif

/* Stopped by pid in the teardown, whether the test passed or not. */
static rlt_server_t srv = {.pid = -1};
static rlt_redis_t redis = {.pid = -1};
static redisContext *rc;

static int teardown(void **state)
{
    (void)state;
    if (srv.pid > 0)
        rlt_server_stop(&srv);
    srv.pid = -1;
    if (rc != NULL)
        redisFree(rc);
    rc = NULL;
    if (redis.pid > 0)
        rlt_redis_stop(&redis);
    redis.pid = -1;
    return 0;
}

/* Sends 3 checks with ids 11, 12, 13 in one write to the floor server s
 * and asserts 3 OK answers with those ids, in order. */
static void exchange_three(const rlt_server_t *s)
{
    rl_check_t checks[3];
    rlt_result_t res[3];
    int fd, i;

    memset(checks, 0, sizeof(checks));
    for (i = 0; i < 3; i++) {
        checks[i].id = 11 + (uint64_t)i;
        checks[i].key = "floor:k";
        checks[i].key_len = 7;
        checks[i].limit = 100;
        checks[i].window_s = 60;
    }
    fd = rlt_dial(s->port);
    assert_true(fd >= 0);
    assert_int_equal(rlt_exchange(fd, checks, 3, res), RL_OK);
    for (i = 0; i < 3; i++) {
        assert_int_equal(res[i].r.id, 11 + i);
        assert_int_equal(res[i].r.code, RL_CODE_OK);
        assert_int_equal(res[i].r.limit, 100);
    }
    close(fd);
}

static void test_floor_echo(void **state)
{
    (void)state;
    assert_int_equal(rlt_server_start(&srv, FLOOR_ECHO_BIN, 0, NULL), 0);
    exchange_three(&srv);
}

/* Calls of a command in Redis's INFO commandstats, or -1. */
static long long calls_of(redisContext *c, const char *cmd)
{
    redisReply *r = redisCommand(c, "INFO commandstats");
    char needle[64];
    const char *p;
    long long n = -1;

    if (r == NULL)
        return -1;
    snprintf(needle, sizeof(needle), "cmdstat_%s:calls=", cmd);
    if (r->type == REDIS_REPLY_STRING && (p = strstr(r->str, needle)) != NULL)
        n = strtoll(p + strlen(needle), NULL, 10);
    freeReplyObject(r);
    return n;
}

/* Starts a Redis and floor_redis on it, with --incr if incr. */
static void start_floor_redis(int incr)
{
    static char raddr[64];
    char *argv[] = {"--redis", raddr, incr ? "--incr" : NULL, NULL};

    if (rlt_redis_start(&redis) != 0) {
        redis.pid = -1;
        skip(); /* no redis-server on this machine */
    }
    snprintf(raddr, sizeof(raddr), "127.0.0.1:%d", redis.port);
    rc = rlt_redis_connect(&redis);
    assert_non_null(rc);
    assert_int_equal(rlt_server_start(&srv, FLOOR_REDIS_BIN, 0, argv), 0);
}

static void test_floor_redis(void **state)
{
    long long before, after;

    (void)state;
    start_floor_redis(0);
    before = calls_of(rc, "ping"); /* its connect-time PING at least */
    assert_true(before >= 1);
    exchange_three(&srv);
    after = calls_of(rc, "ping");
    /* One PING per read that held a frame: 1 to 3 for the 3 frames. */
    assert_true(after >= before + 1 && after <= before + 3);
    assert_int_equal(calls_of(rc, "incr"), -1);
}

/* --incr: each frame's key counted once, in place of the PINGs. */
static void test_floor_incr(void **state)
{
    long long pings;
    redisReply *r;

    (void)state;
    start_floor_redis(1);
    pings = calls_of(rc, "ping");
    exchange_three(&srv);
    assert_int_equal(calls_of(rc, "incr"), 3);
    assert_int_equal(calls_of(rc, "ping"), pings);
    r = redisCommand(rc, "GET floor:floor:k");
    assert_non_null(r);
    assert_int_equal(r->type, REDIS_REPLY_STRING);
    assert_string_equal(r->str, "3");
    freeReplyObject(r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_floor_echo, teardown),
        cmocka_unit_test_teardown(test_floor_redis, teardown),
        cmocka_unit_test_teardown(test_floor_incr, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
