/* Redis Sentinel's pure parts: what a sentinel answers
 * (store/redis_sentinel_parse.c: get-master-addr-by-name through hiredis's
 * own reader, as the Sentinel layer gets it; +switch-master messages, fed
 * at every length so any read past the text trips ASan), and the
 * --redis-sentinel flags (flags.c). The Sentinel layer itself runs against
 * a scripted sentinel (tests/server/e2e/e2e_sentinel_stale.py) and real
 * ones (e2e_sentinel_failover.py). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include <hiredis/hiredis.h>

#include "flags.h"
#include "rl_error.h"
#include "store/redis_sentinel_parse.h"

/* One whole reply from RESP text, or NULL. */
static redisReply *reply_of(const char *resp)
{
    redisReader *r = redisReaderCreate();
    void *rep = NULL;

    assert_non_null(r);
    if (redisReaderFeed(r, resp, strlen(resp)) != REDIS_OK ||
        redisReaderGetReply(r, &rep) != REDIS_OK)
        rep = NULL;
    redisReaderFree(r);
    return rep;
}

static int addr_of(const char *resp, rls_sentinel_addr_t *a)
{
    redisReply *rep = reply_of(resp);
    int rc;

    assert_non_null(rep);
    rc = rls_sentinel_parse_addr(rep, a);
    freeReplyObject(rep);
    return rc;
}

static void test_addr(void **state)
{
    static const char *const bad[] = {
        "-ERR No such master with that name\r\n",
        "*1\r\n$9\r\n127.0.0.1\r\n",
        "*3\r\n$9\r\n127.0.0.1\r\n$4\r\n6379\r\n$1\r\nx\r\n",
        "*2\r\n$9\r\n127.0.0.1\r\n:6379\r\n",
        "*2\r\n$0\r\n\r\n$4\r\n6379\r\n",
        "*2\r\n$9\r\n127.0.0.1\r\n$1\r\n0\r\n",
        "*2\r\n$9\r\n127.0.0.1\r\n$5\r\n65536\r\n",
        "*2\r\n$9\r\n127.0.0.1\r\n$6\r\n006379\r\n",
        "*2\r\n$9\r\n127.0.0.1\r\n$5\r\n+6379\r\n",
        "*2\r\n$9\r\n127.0.0.1\r\n$0\r\n\r\n",
        "*2\r\n$9\r\n127.0 0.1\r\n$4\r\n6379\r\n",
        "*2\r\n$9\r\n127.0\n0.1\r\n$4\r\n6379\r\n",
        "*2\r\n$10\r\n/tmp/redis\r\n$4\r\n6379\r\n",
        "+OK\r\n",
        ":1\r\n",
    };
    rls_sentinel_addr_t a;
    char resp[600], host[300];
    size_t i;

    (void)state;
    assert_int_equal(addr_of("*2\r\n$9\r\n127.0.0.1\r\n$4\r\n6380\r\n", &a), 0);
    assert_string_equal(a.host, "127.0.0.1");
    assert_int_equal(a.port, 6380);
    assert_int_equal(addr_of("*2\r\n$3\r\n::1\r\n$5\r\n65535\r\n", &a), 0);
    assert_string_equal(a.host, "::1");
    assert_int_equal(a.port, 65535);
    /* resolve-hostnames: a name. */
    assert_int_equal(addr_of("*2\r\n$13\r\nredis-0.redis\r\n$1\r\n1\r\n", &a),
                     0);
    assert_string_equal(a.host, "redis-0.redis");
    assert_int_equal(a.port, 1);
    /* The sentinel does not know the master (yet). */
    assert_int_equal(addr_of("*-1\r\n", &a), RL_EAGAIN);
    assert_int_equal(addr_of("$-1\r\n", &a), RL_EAGAIN);
    /* Refused, *out untouched. */
    for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        memset(&a, 'z', sizeof(a));
        assert_int_equal(addr_of(bad[i], &a), RL_EINVAL);
        assert_int_equal(a.host[0], 'z');
    }
    assert_int_equal(rls_sentinel_parse_addr(NULL, &a), RL_EINVAL);
    /* A host of the maximum length, and one byte over. */
    memset(host, 'h', sizeof(host));
    snprintf(resp, sizeof(resp), "*2\r\n$%d\r\n%.*s\r\n$2\r\n10\r\n",
             RLS_SENTINEL_HOST_MAX, RLS_SENTINEL_HOST_MAX, host);
    assert_int_equal(addr_of(resp, &a), 0);
    assert_int_equal(strlen(a.host), RLS_SENTINEL_HOST_MAX);
    snprintf(resp, sizeof(resp), "*2\r\n$%d\r\n%.*s\r\n$2\r\n10\r\n",
             RLS_SENTINEL_HOST_MAX + 1, RLS_SENTINEL_HOST_MAX + 1, host);
    assert_int_equal(addr_of(resp, &a), RL_EINVAL);
}

/* The message at exactly its length, in a buffer of that size. */
static int sw(const char *msg, size_t len, rls_sentinel_addr_t *from,
              rls_sentinel_addr_t *to)
{
    char *copy = malloc(len > 0 ? len : 1);
    int rc;

    assert_non_null(copy);
    memcpy(copy, msg, len);
    rc = rls_sentinel_parse_switch(copy, len, "mymaster", from, to);
    free(copy);
    return rc;
}

static void test_switch(void **state)
{
    static const char ok[] = "mymaster 127.0.0.1 6379 127.0.0.2 6380";
    static const char *const bad[] = {
        "",
        "mymaster",
        "mymaster 127.0.0.1 6379 127.0.0.2",
        "mymaster 127.0.0.1 6379 127.0.0.2 6380 extra",
        "mymaster 127.0.0.1 6379 127.0.0.2 6380 ",
        " mymaster 127.0.0.1 6379 127.0.0.2 6380",
        "mymaster  127.0.0.1 6379 127.0.0.2 6380",
        "mymaster 127.0.0.1 6379 127.0.0.2 0",
        "mymaster 127.0.0.1 6379 127.0.0.2 70000",
        "mymaster 127.0.0.1 x 127.0.0.2 6380",
        "mymaster 127.0.0.1 6379 127.0.0.2 -1",
        "my\nmaster 127.0.0.1 6379 127.0.0.2 6380",
    };
    rls_sentinel_addr_t from, to;
    size_t i, n = strlen(ok);

    (void)state;
    assert_int_equal(sw(ok, n, &from, &to), 0);
    assert_string_equal(from.host, "127.0.0.1");
    assert_int_equal(from.port, 6379);
    assert_string_equal(to.host, "127.0.0.2");
    assert_int_equal(to.port, 6380);
    /* Another master's switch: well-formed, not ours. */
    assert_int_equal(sw("other 127.0.0.1 1 ::1 2", 23, &from, &to), 1);
    assert_int_equal(sw("mymaster2 127.0.0.1 1 ::1 2", 27, &from, &to), 1);
    assert_int_equal(sw("mymaste 127.0.0.1 1 ::1 2", 25, &from, &to), 1);
    /* Every prefix of a good message is refused, but those cut inside
     * the last port, which read as a shorter port ("6", "63", "638"):
     * never a read past the end. */
    for (i = 0; i + 3 < n; i++)
        assert_int_equal(sw(ok, i, &from, &to), RL_EINVAL);
    assert_int_equal(sw(ok, n - 3, &from, &to), 0);
    assert_int_equal(to.port, 6);
    assert_int_equal(sw(ok, n - 1, &from, &to), 0);
    assert_int_equal(to.port, 638);
    for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        assert_int_equal(sw(bad[i], strlen(bad[i]), &from, &to), RL_EINVAL);
    assert_int_equal(rls_sentinel_parse_switch(NULL, 0, "m", &from, &to),
                     RL_EINVAL);
}

static int parse(rls_flags_t *c, char *err, size_t errlen, int argc,
                 char **argv)
{
    rls_flags_defaults(c);
    return rls_flags_parse(c, argc, argv, stdout, err, errlen);
}

static void test_flags(void **state)
{
    static rls_flags_t c;
    char err[512], path[] = "/tmp/rl-sentinel-pw-XXXXXX";
    char *ok[] = {"rl-server",
                  "--redis-sentinel",
                  "redis://rl:data%40pw@127.0.0.1:26379,[::1]:26380",
                  "--redis-sentinel-master",
                  "mymaster",
                  "--redis-sentinel-user",
                  "sent",
                  "--redis-sentinel-password-file",
                  path};
    char *no_master[] = {"rl-server", "--redis-sentinel", "127.0.0.1:26379"};
    char *master_alone[] = {"rl-server", "--redis-sentinel-master", "m"};
    char *name[] = {"rl-server", "--redis-sentinel", "sentinel-0:26379",
                    "--redis-sentinel-master", "m"};
    char *both[] = {"rl-server", "--redis", "127.0.0.1:6379",
                    "--redis-sentinel", "127.0.0.1:26379"};
    char *both2[] = {"rl-server", "--redis-sentinel", "127.0.0.1:26379",
                     "--redis-cluster", "127.0.0.1:7000"};
    char *bad_master[] = {"rl-server", "--redis-sentinel", "127.0.0.1:26379",
                          "--redis-sentinel-master", "my master"};
    char *agree[] = {"rl-server",
                     "--redis-sentinel",
                     "127.0.0.1:1,127.0.0.1:2,127.0.0.1:3",
                     "--redis-sentinel-master",
                     "m",
                     "--redis-sentinel-agree",
                     "3"};
    char *agree_alone[] = {"rl-server", "--redis-sentinel-agree", "1"};
    int fd;

    (void)state;
    assert_true((fd = mkstemp(path)) >= 0);
    assert_int_equal(write(fd, "sent-pw\n", 8), 8);
    close(fd);
    assert_int_equal(parse(&c, err, sizeof(err), 9, ok), 0);
    assert_true(c.use_redis);
    assert_int_equal(c.redis_sentinels, 2);
    assert_int_equal(c.redis_cluster, 0);
    assert_string_equal(c.redis_seed_host[0], "127.0.0.1");
    assert_int_equal(c.redis_seed_port[0], 26379);
    assert_string_equal(c.redis_seed_host[1], "::1");
    assert_int_equal(c.redis_seed_port[1], 26380);
    assert_string_equal(c.redis_sentinel_master, "mymaster");
    assert_string_equal(c.redis_sentinel_user, "sent");
    assert_string_equal(c.redis_sentinel_password, "sent-pw");
    /* The URL's credentials are the data nodes'. */
    assert_string_equal(c.redis_user, "rl");
    assert_string_equal(c.redis_password, "data@pw");
    unlink(path);
    assert_int_equal(parse(&c, err, sizeof(err), 9, ok), RL_EINVAL);
    assert_non_null(strstr(err, "cannot read"));
    assert_int_equal(parse(&c, err, sizeof(err), 3, no_master), RL_EINVAL);
    assert_non_null(strstr(err, "--redis-sentinel-master"));
    assert_int_equal(parse(&c, err, sizeof(err), 3, master_alone), RL_EINVAL);
    assert_non_null(strstr(err, "need --redis-sentinel"));
    assert_int_equal(parse(&c, err, sizeof(err), 5, name), RL_EINVAL);
    assert_non_null(strstr(err, "not an IP address"));
    assert_int_equal(parse(&c, err, sizeof(err), 5, both), RL_EINVAL);
    assert_non_null(strstr(err, "exclusive"));
    assert_int_equal(parse(&c, err, sizeof(err), 5, both2), RL_EINVAL);
    assert_non_null(strstr(err, "exclusive"));
    assert_int_equal(parse(&c, err, sizeof(err), 5, bad_master), RL_EINVAL);
    assert_non_null(strstr(err, "no spaces"));
    /* --redis-sentinel-agree: 1 to the number of sentinels; unset (0),
     * the sentinel layer takes a majority. */
    assert_int_equal(parse(&c, err, sizeof(err), 5, agree), 0);
    assert_int_equal(c.redis_sentinel_agree, 0);
    assert_int_equal(parse(&c, err, sizeof(err), 7, agree), 0);
    assert_int_equal(c.redis_sentinel_agree, 3);
    agree[6] = "4";
    assert_int_equal(parse(&c, err, sizeof(err), 7, agree), RL_EINVAL);
    assert_non_null(strstr(err, "more sentinels than"));
    agree[6] = "0";
    assert_int_equal(parse(&c, err, sizeof(err), 7, agree), RL_EINVAL);
    assert_int_equal(parse(&c, err, sizeof(err), 3, agree_alone), RL_EINVAL);
    assert_non_null(strstr(err, "need --redis-sentinel"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_addr),
        cmocka_unit_test(test_switch),
        cmocka_unit_test(test_flags),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
