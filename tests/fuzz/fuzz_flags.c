/* Fuzz target: rl-server's command line (server/flags.c, rls_flags_parse
 * over rls_flags_defaults): the option names, --name=value and --name
 * value, the numbers and byte counts, the Redis URLs (redis://,
 * rediss://, unix://, user and password %-escapes), the cluster and
 * Sentinel seed lists, --tls-listeners, and the checks across options.
 *
 * The input is argv after "rl-server": its arguments separated by NUL
 * bytes (at most ARGS_MAX of them). stdin is /dev/null (a password file
 * named /dev/stdin reads nothing) and --help and --version print to
 * /dev/null. RL_REDIS_URL is unset: the environment is fuzz_envenv's.
 *
 * Beyond "does not crash": the result is 0 or RL_EINVAL; a refusal says
 * why (a non-empty message within the buffer); an accepted command line
 * leaves every string NUL-terminated within its field, ports in 0..65535,
 * the prefix's length as stored, counts within their caps, and the fail
 * mode one of three; a password in the URL given to --redis never appears
 * in the message of a refusal (it is a secret); and the same argv parses to
 * the same configuration again.
 *
 * Built two ways (tests/fuzz/CMakeLists.txt, tests/fuzz/run.sh): with
 * clang's libFuzzer, and with RL_FUZZ_REPLAY as a plain program that runs
 * the seed corpus (corpus/flags: "ok-" files must parse, "bad-" files
 * must be refused) and deterministic mutations of it in every build. */
#define _GNU_SOURCE /* memmem */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "flags.h"
#include "rl_error.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond)                                                            \
    do {                                                                       \
        if (!(cond)) {                                                         \
            fprintf(stderr, "fuzz_flags: %s:%d: %s\n", __FILE__, __LINE__,     \
                    #cond);                                                    \
            abort();                                                           \
        }                                                                      \
    } while (0)

#define ARGS_MAX 64

static FILE *devnull;

static void setup(void)
{
    if (devnull != NULL)
        return;
    CHECK((devnull = fopen("/dev/null", "w")) != NULL);
    CHECK(freopen("/dev/null", "r", stdin) != NULL);
    unsetenv("RL_REDIS_URL");
}

#define TERMINATED(field) CHECK(memchr((field), '\0', sizeof(field)) != NULL)

static void check_accepted(const rls_flags_t *c)
{
    int i;

    TERMINATED(c->listen_host);
    TERMINATED(c->metrics_host);
    TERMINATED(c->redis_host);
    TERMINATED(c->redis_user);
    TERMINATED(c->redis_password);
    TERMINATED(c->redis_sentinel_master);
    TERMINATED(c->redis_sentinel_user);
    TERMINATED(c->redis_sentinel_password);
    TERMINATED(c->prefix);
    TERMINATED(c->log_level);
    TERMINATED(c->grpc_host);
    TERMINATED(c->statsd_host);
    TERMINATED(c->envoy_xds_host);
    TERMINATED(c->http_host);
    CHECK(c->prefix_len == strlen(c->prefix) &&
          c->prefix_len <= RLS_PREFIX_MAX);
    CHECK(c->listen_port >= 0 && c->listen_port <= 65535);
    CHECK(c->metrics_port >= 0 && c->metrics_port <= 65535);
    CHECK(c->redis_port >= 0 && c->redis_port <= 65535);
    CHECK(c->grpc_port >= 0 && c->grpc_port <= 65535);
    CHECK(c->http_port >= 0 && c->http_port <= 65535);
    CHECK(c->statsd_port >= 0 && c->statsd_port <= 65535);
    CHECK(c->envoy_xds_port >= 0 && c->envoy_xds_port <= 65535);
    CHECK(c->redis_cluster >= 0 && c->redis_cluster <= 16);
    CHECK(c->redis_sentinels >= 0 && c->redis_sentinels <= 16);
    CHECK(c->redis_cluster == 0 || c->redis_sentinels == 0);
    for (i = 0; i < c->redis_cluster + c->redis_sentinels; i++) {
        TERMINATED(c->redis_seed_host[i]);
        CHECK(c->redis_seed_host[i][0] != '\0');
        CHECK(c->redis_seed_port[i] >= 1 && c->redis_seed_port[i] <= 65535);
    }
    CHECK(c->redis_sentinel_agree >= 0 &&
          c->redis_sentinel_agree <= c->redis_sentinels);
    CHECK(c->nrules <= RLS_RULES_MAX);
    CHECK(c->nenvoy_configs <= RLS_ENVOY_CONFIGS_MAX);
    CHECK(c->fail_open >= 0 && c->fail_open <= 2);
    CHECK((c->tls_listeners & ~RLS_TLS_ON_ABLE) == 0);
    CHECK((c->tls_cert == NULL) == (c->tls_key == NULL));
    CHECK(c->envoy_xds_backoff_max_ms >= c->envoy_xds_backoff_ms);
    CHECK(c->use_redis || (c->redis_cluster == 0 && c->redis_sentinels == 0));
}

/* The password of the URL given to --redis first (scheme://USER:PASS@),
 * those of 8 bytes or more that the input holds only once: a message
 * that quotes one can only have taken it from the URL. */
static void check_secret(char **argv, int argc, const uint8_t *data,
                         size_t size, const char *err)
{
    int i;

    for (i = 1; i < argc; i++) {
        const char *s = strstr(argv[i], "://"), *colon, *at;
        char pw[256];
        size_t n;
        /* The URL --redis takes, when it is the first option (later, the
         * same bytes may be another option's value, or an argument the
         * parser cannot place, which is quoted whole as typed). */
        if (s == NULL ||
            !((i == 1 && strncmp(argv[i], "--redis=", 8) == 0) ||
              (i == 2 && strcmp(argv[1], "--redis") == 0)))
            continue;
        s += 3;
        at = strchr(s, '@');
        colon = strchr(s, ':');
        if (at == NULL || colon == NULL || colon > at)
            continue;
        n = (size_t)(at - colon - 1);
        if (n < 8 || n >= sizeof(pw))
            continue;
        memcpy(pw, colon + 1, n);
        pw[n] = '\0';
        {
            const uint8_t *first = memmem(data, size, pw, n);
            if (first == NULL ||
                memmem(first + 1, size - (size_t)(first + 1 - data), pw, n) !=
                    NULL)
                continue;
        }
        CHECK(strstr(err, pw) == NULL);
    }
}

/* Returns the parser's result. */
static int run_one(const uint8_t *data, size_t size)
{
    static rls_flags_t c, c2;
    char *copy, *argv[ARGS_MAX + 2];
    char err[512], err2[512];
    int argc = 0, rc, rc2;
    size_t i, start = 0;

    setup();
    /* One block the size of the input and a NUL: ASan sees a read past
     * the last argument. */
    if ((copy = malloc(size + 1)) == NULL)
        return RL_ENOMEM;
    memcpy(copy, data, size);
    copy[size] = '\0';
    argv[argc++] = (char *)"rl-server";
    for (i = 0; i <= size && argc <= ARGS_MAX; i++) {
        if (i == size || copy[i] == '\0') {
            if (i < size || i > start)
                argv[argc++] = copy + start;
            start = i + 1;
        }
    }
    if (size == 0)
        argc = 1;
    argv[argc] = NULL;
    rls_flags_defaults(&c);
    memset(err, 0x5a, sizeof(err));
    rc = rls_flags_parse(&c, argc, argv, devnull, err, sizeof(err));
    CHECK(rc == 0 || rc == RL_EINVAL);
    if (rc == 0) {
        if (!c.info_only)
            check_accepted(&c);
    } else {
        CHECK(memchr(err, '\0', sizeof(err)) != NULL && err[0] != '\0');
        check_secret(argv, argc, data, size, err);
    }
    /* Again, from fresh defaults: the same answer. */
    rls_flags_defaults(&c2);
    memset(err2, 0x5a, sizeof(err2));
    rc2 = rls_flags_parse(&c2, argc, argv, devnull, err2, sizeof(err2));
    CHECK(rc2 == rc);
    if (rc == 0)
        CHECK(memcmp(&c, &c2, sizeof(c)) == 0);
    else
        CHECK(strcmp(err, err2) == 0);
    free(copy);
    return rc;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    run_one(data, size);
    return 0;
}

#ifdef RL_FUZZ_REPLAY
#include "walk.h"

static uint8_t seeds[128][2048];
static size_t seed_len[128];
static int nseeds;

static int run_file(const char *path)
{
    static uint8_t buf[1 << 16];
    const char *base = strrchr(path, '/');
    size_t n;
    int rc;

    if (rlf_read(path, buf, sizeof(buf), &n) != 0)
        return 1;
    base = base != NULL ? base + 1 : path;
    rc = run_one(buf, n);
    if ((strncmp(base, "ok-", 3) == 0 && rc != 0) ||
        (strncmp(base, "bad-", 4) == 0 && rc == 0)) {
        fprintf(stderr, "fuzz_flags: %s: got %d\n", path, rc);
        return 1;
    }
    if (nseeds < 128 && n <= sizeof(seeds[0])) {
        memcpy(seeds[nseeds], buf, n);
        seed_len[nseeds++] = n;
    }
    return 0;
}

int main(int argc, char **argv)
{
    static const char alphabet[] = "-=:/@%,.[]0123456789abcdefkmgKMG"
                                   "redis://unix:sentinelcluster";
    static uint8_t buf[2048 + 8];
    int i, files = 0, iters = 30000;

    for (i = 1; i < argc; i++)
        if (rlf_walk(argv[i], run_file, &files) != 0)
            return 1;
    if (files == 0) {
        fprintf(stderr, "fuzz_flags: no seed files\n");
        return 1;
    }
    for (i = 0; i < iters && nseeds > 0; i++) {
        int s = (int)(rlf_rand() % (unsigned)nseeds);
        size_t n = seed_len[s], edits = 1 + rlf_rand() % 4;

        memcpy(buf, seeds[s], n);
        n = rlf_mutate(buf, n, sizeof(buf) - 1, edits, alphabet, rlf_rand);
        if (n > 0 && rlf_rand() % 4 == 0)
            buf[rlf_rand() % n] = '\0'; /* splits an argument */
        LLVMFuzzerTestOneInput(buf, n);
    }
    printf("fuzz_flags replay: %d files, %d mutations, invariants held\n",
           files, iters);
    return 0;
}
#endif
