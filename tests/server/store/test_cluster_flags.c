/* Redis flags (flags.c): --redis-cluster seeds and the URLs' credentials;
 * and the cluster store's pure parts (store/redis_cluster_map.c): key slots
 * and redirections as Redis 7 sends them. The store itself is tested
 * against real clusters in tests/cluster/redis_cluster.sh. */
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
#include "store/redis_cluster_map.h"

static int parse(rls_flags_t *c, char *err, size_t errlen, int argc,
                 char **argv)
{
    rls_flags_defaults(c);
    return rls_flags_parse(c, argc, argv, stdout, err, errlen);
}

static void test_flag(void **state)
{
    static rls_flags_t c;
    char err[512];
    char *ok[] = {"rl-server", "--redis-cluster",
                  "redis://:pw@127.0.0.1:7000,10.0.0.2:7001,[::1]:7002"};
    char *both[] = {"rl-server", "--redis", "127.0.0.1:6379", "--redis-cluster",
                    "127.0.0.1:7000"};
    char *both2[] = {"rl-server", "--redis-cluster", "127.0.0.1:7000",
                     "--redis", "127.0.0.1:6379"};
    char *bad[] = {"rl-server", "--redis-cluster", "127.0.0.1:7000,nope"};
    char *empty[] = {"rl-server", "--redis-cluster", ","};

    (void)state;
    assert_int_equal(parse(&c, err, sizeof(err), 3, ok), 0);
    assert_int_equal(c.redis_cluster, 3);
    assert_true(c.use_redis);
    assert_string_equal(c.redis_password, "pw");
    assert_string_equal(c.redis_seed_host[0], "127.0.0.1");
    assert_int_equal(c.redis_seed_port[0], 7000);
    assert_string_equal(c.redis_seed_host[1], "10.0.0.2");
    assert_int_equal(c.redis_seed_port[2], 7002);
    assert_int_equal(parse(&c, err, sizeof(err), 5, both), RL_EINVAL);
    assert_non_null(strstr(err, "exclusive"));
    assert_int_equal(parse(&c, err, sizeof(err), 5, both2), RL_EINVAL);
    assert_non_null(strstr(err, "exclusive"));
    assert_int_equal(parse(&c, err, sizeof(err), 3, bad), RL_EINVAL);
    assert_non_null(strstr(err, "nope"));
    assert_int_equal(parse(&c, err, sizeof(err), 3, empty), RL_EINVAL);
}

/* A Redis URL's credentials: USER:PASSWORD, :PASSWORD and USER alone,
 * percent-decoded; a password file; and errors that never repeat them. */
static void test_redis_credentials(void **state)
{
    static rls_flags_t c;
    char err[512], path[] = "/tmp/rl-pwfile-XXXXXX";
    char *user_pw[] = {"rl-server", "--redis",
                       "redis://rl%3Aa:P%40ss%3Aw%2Frd%25@127.0.0.1:6379/2"};
    char *pw_only[] = {"rl-server", "--redis-cluster",
                       "redis://:s%20t@127.0.0.1:7000"};
    char *user_only[] = {"rl-server", "--redis", "redis://rl@[::1]:6380"};
    char *unix_sock[] = {"rl-server", "--redis",
                         "unix://rl:p%40w@/run/redis/redis.sock?db=3"};
    char *unix_rel[] = {"rl-server", "--redis", "unix://redis.sock"};
    char *bad_escape[] = {"rl-server", "--redis",
                          "redis://rl:sec%zzret@127.0.0.1:6379"};
    char *nul_escape[] = {"rl-server", "--redis",
                          "redis://rl:sec%00ret@127.0.0.1:6379"};
    char *no_url[] = {"rl-server", "--redis", "rl:secret@127.0.0.1:6379"};
    char *bad_host[] = {"rl-server", "--redis", "redis://rl:secret@nohost"};
    char *with_file[] = {"rl-server", "--redis", "redis://rl@127.0.0.1:1",
                         "--redis-password-file", path};
    char *both[] = {"rl-server", "--redis", "redis://rl:x@127.0.0.1:1",
                    "--redis-password-file", path};
    int fd;

    (void)state;
    assert_int_equal(parse(&c, err, sizeof(err), 3, user_pw), 0);
    assert_string_equal(c.redis_user, "rl:a");
    assert_string_equal(c.redis_password, "P@ss:w/rd%");
    assert_int_equal(c.redis_db, 2);
    assert_int_equal(parse(&c, err, sizeof(err), 3, pw_only), 0);
    assert_string_equal(c.redis_user, "");
    assert_string_equal(c.redis_password, "s t");
    assert_int_equal(parse(&c, err, sizeof(err), 3, user_only), 0);
    assert_string_equal(c.redis_user, "rl");
    assert_string_equal(c.redis_password, "");
    assert_int_equal(c.redis_port, 6380);
    assert_int_equal(parse(&c, err, sizeof(err), 3, unix_sock), 0);
    assert_string_equal(c.redis_host, "/run/redis/redis.sock");
    assert_int_equal(c.redis_port, 0);
    assert_int_equal(c.redis_db, 3);
    assert_string_equal(c.redis_user, "rl");
    assert_string_equal(c.redis_password, "p@w");
    assert_int_equal(parse(&c, err, sizeof(err), 3, unix_rel), RL_EINVAL);
    assert_non_null(strstr(err, "absolute path"));
    /* Errors: said, but never with what was given. */
    assert_int_equal(parse(&c, err, sizeof(err), 3, bad_escape), RL_EINVAL);
    assert_null(strstr(err, "sec"));
    assert_int_equal(parse(&c, err, sizeof(err), 3, nul_escape), RL_EINVAL);
    assert_int_equal(parse(&c, err, sizeof(err), 3, no_url), RL_EINVAL);
    assert_null(strstr(err, "secret"));
    assert_int_equal(parse(&c, err, sizeof(err), 3, bad_host), RL_EINVAL);
    assert_null(strstr(err, "secret"));
    assert_non_null(strstr(err, "nohost"));
    /* The password file: its first line, without the line end. */
    assert_true((fd = mkstemp(path)) >= 0);
    assert_int_equal(write(fd, "from-file\r\nsecond\n", 18), 18);
    close(fd);
    assert_int_equal(parse(&c, err, sizeof(err), 5, with_file), 0);
    assert_string_equal(c.redis_user, "rl");
    assert_string_equal(c.redis_password, "from-file");
    assert_int_equal(parse(&c, err, sizeof(err), 5, both), RL_EINVAL);
    assert_non_null(strstr(err, "has a password already"));
    unlink(path);
    assert_int_equal(parse(&c, err, sizeof(err), 5, with_file), RL_EINVAL);
    assert_non_null(strstr(err, "cannot read"));
}

/* TLS to Redis: rediss:// (port 6379 when not given; redis:// still
 * wants one), the --redis-tls-* flags (each turns TLS on), and the
 * refusals. */
static void test_tls_flags(void **state)
{
    static rls_flags_t c;
    char err[512];
    char *url[] = {"rl-server", "--redis", "rediss://rl:pw@localhost/2"};
    char *plain[] = {"rl-server", "--redis", "redis://10.0.0.5"};
    char *plain_port[] = {"rl-server", "--redis", "redis://10.0.0.5:6380"};
    char *v6[] = {"rl-server", "--redis", "rediss://[::1]:6380"};
    char *flags[] = {"rl-server",
                     "--redis",
                     "127.0.0.1:6379",
                     "--redis-tls-ca=/ca.pem",
                     "--redis-tls-cert",
                     "/c.pem",
                     "--redis-tls-key",
                     "/k.pem",
                     "--redis-tls-server-name",
                     "redis.internal"};
    char *insecure[] = {"rl-server", "--redis", "127.0.0.1:6379",
                        "--redis-tls-insecure"};
    char *insecure_val[] = {"rl-server", "--redis", "127.0.0.1:6379",
                            "--redis-tls-insecure=1"};
    char *no_redis[] = {"rl-server", "--redis-tls-ca", "/ca.pem"};
    char *unix_tls[] = {"rl-server", "--redis", "unix:///run/redis.sock",
                        "--redis-tls-insecure"};
    char *cluster[] = {"rl-server", "--redis-cluster",
                       "rediss://:pw@10.0.0.1:7000,10.0.0.2:7001"};
    char *empty[] = {"rl-server", "--redis", "127.0.0.1:6379",
                     "--redis-tls-server-name", ""};

    (void)state;
    assert_int_equal(parse(&c, err, sizeof(err), 3, url), 0);
    assert_true(c.redis_tls);
    assert_false(c.redis_tls_insecure);
    assert_string_equal(c.redis_host, "localhost");
    assert_int_equal(c.redis_port, 6379);
    assert_int_equal(c.redis_db, 2);
    assert_string_equal(c.redis_user, "rl");
    assert_string_equal(c.redis_password, "pw");
    assert_int_equal(parse(&c, err, sizeof(err), 3, plain), RL_EINVAL);
    assert_int_equal(parse(&c, err, sizeof(err), 3, plain_port), 0);
    assert_false(c.redis_tls);
    assert_int_equal(c.redis_port, 6380);
    assert_int_equal(parse(&c, err, sizeof(err), 3, v6), 0);
    assert_true(c.redis_tls);
    assert_string_equal(c.redis_host, "::1");
    assert_int_equal(c.redis_port, 6380);
    assert_int_equal(parse(&c, err, sizeof(err), 10, flags), 0);
    assert_true(c.redis_tls);
    assert_string_equal(c.redis_tls_ca, "/ca.pem");
    assert_string_equal(c.redis_tls_cert, "/c.pem");
    assert_string_equal(c.redis_tls_key, "/k.pem");
    assert_string_equal(c.redis_tls_server_name, "redis.internal");
    assert_int_equal(parse(&c, err, sizeof(err), 4, insecure), 0);
    assert_true(c.redis_tls && c.redis_tls_insecure);
    assert_int_equal(parse(&c, err, sizeof(err), 4, insecure_val), RL_EINVAL);
    assert_non_null(strstr(err, "takes no value"));
    assert_int_equal(parse(&c, err, sizeof(err), 3, no_redis), RL_EINVAL);
    assert_non_null(strstr(err, "no --redis"));
    assert_int_equal(parse(&c, err, sizeof(err), 4, unix_tls), RL_EINVAL);
    assert_non_null(strstr(err, "Unix socket"));
    assert_int_equal(parse(&c, err, sizeof(err), 3, cluster), 0);
    assert_true(c.redis_tls);
    assert_int_equal(c.redis_cluster, 2);
    assert_int_equal(c.redis_seed_port[1], 7001);
    assert_string_equal(c.redis_password, "pw");
    assert_int_equal(parse(&c, err, sizeof(err), 5, empty), RL_EINVAL);
    assert_non_null(strstr(err, "empty"));
}

/* A CLUSTER SHARDS reply (RESP, through hiredis's reader) into ranges. */
static int shards(const char *resp, rls_slot_range_t *out, int tls)
{
    redisReader *rd = redisReaderCreate();
    void *r = NULL;
    int n;

    assert_non_null(rd);
    assert_int_equal(redisReaderFeed(rd, resp, strlen(resp)), REDIS_OK);
    assert_int_equal(redisReaderGetReply(rd, &r), REDIS_OK);
    assert_non_null(r);
    n = rls_cluster_parse_map_tls(r, out, 4, tls);
    freeReplyObject(r);
    redisReaderFree(rd);
    return n;
}

/* A node with tls-cluster yes gives "port" (plaintext) and "tls-port"; a
 * TLS-only one (port 0) only "tls-port". A TLS client takes tls-port. */
static void test_shards_tls_port(void **state)
{
    static const char both[] =
        "*1\r\n*4\r\n$5\r\nslots\r\n*2\r\n:0\r\n:16383\r\n"
        "$5\r\nnodes\r\n*1\r\n*8\r\n$2\r\nip\r\n$9\r\n127.0.0.1\r\n"
        "$4\r\nport\r\n:7000\r\n$8\r\ntls-port\r\n:7100\r\n"
        "$4\r\nrole\r\n$6\r\nmaster\r\n";
    static const char tls_only[] =
        "*1\r\n*4\r\n$5\r\nslots\r\n*2\r\n:0\r\n:16383\r\n"
        "$5\r\nnodes\r\n*1\r\n*6\r\n$2\r\nip\r\n$9\r\n127.0.0.1\r\n"
        "$8\r\ntls-port\r\n:7100\r\n$4\r\nrole\r\n$6\r\nmaster\r\n";
    rls_slot_range_t m[4];

    (void)state;
    assert_int_equal(shards(both, m, 0), 1);
    assert_int_equal(m[0].port, 7000);
    assert_int_equal(shards(both, m, 1), 1);
    assert_int_equal(m[0].port, 7100);
    assert_int_equal(m[0].last, 16383);
    assert_int_equal(shards(tls_only, m, 1), 1);
    assert_int_equal(m[0].port, 7100);
    /* Without TLS such a node has no port to reach: its slots stay
     * uncovered. */
    assert_int_equal(shards(tls_only, m, 0), 0);
}

static void test_slots(void **state)
{
    (void)state;
    /* Values from `redis-cli cluster keyslot` on Redis 7.0.15. */
    assert_int_equal(rls_key_slot("a", 1), 15495);
    assert_int_equal(rls_key_slot("b", 1), 3300);
    assert_int_equal(rls_key_slot("123456789", 9), 12739);
    /* Our keys: the caller's hash tag decides, whatever follows. */
    assert_int_equal(rls_key_slot("rl:{user:1}:r:api:60:1", 22),
                     rls_key_slot("rl:{user:1}:q", 13));
    assert_int_equal(rls_key_slot("rl:{user:1}:r:api:60:1", 22),
                     rls_key_slot("user:1", 6));
}

static void test_redirects(void **state)
{
    rls_redirect_t r;
    const char *m = "MOVED 3999 127.0.0.1:6381";

    (void)state;
    assert_int_equal(rls_cluster_parse_redirect(m, strlen(m), "x", &r), 0);
    assert_int_equal(r.kind, RLS_REDIR_MOVED);
    assert_int_equal(r.slot, 3999);
    assert_string_equal(r.host, "127.0.0.1");
    assert_int_equal(r.port, 6381);
    m = "ASK 1 [::1]:7000";
    assert_int_equal(rls_cluster_parse_redirect(m, strlen(m), "x", &r), 0);
    assert_int_equal(r.kind, RLS_REDIR_ASK);
    assert_string_equal(r.host, "::1");
    m = "MOVED 5 :7001"; /* an unknown endpoint: the node that sent it */
    assert_int_equal(rls_cluster_parse_redirect(m, strlen(m), "10.1.1.1", &r),
                     0);
    assert_string_equal(r.host, "10.1.1.1");
    m = "TRYAGAIN Multiple keys request during rehashing of slot";
    assert_int_equal(rls_cluster_parse_redirect(m, strlen(m), "x", &r), 0);
    assert_int_equal(r.kind, RLS_REDIR_TRYAGAIN);
    m = "MOVED 16384 127.0.0.1:1";
    assert_int_equal(rls_cluster_parse_redirect(m, strlen(m), "x", &r),
                     RL_EINVAL);
    m = "MOVED 1 127.0.0.1:0";
    assert_int_equal(rls_cluster_parse_redirect(m, strlen(m), "x", &r),
                     RL_EINVAL);
    m = "ERR wrong";
    assert_int_equal(rls_cluster_parse_redirect(m, strlen(m), "x", &r),
                     RL_EINVAL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_flag),
        cmocka_unit_test(test_redis_credentials),
        cmocka_unit_test(test_tls_flags),
        cmocka_unit_test(test_shards_tls_port),
        cmocka_unit_test(test_slots),
        cmocka_unit_test(test_redirects),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
