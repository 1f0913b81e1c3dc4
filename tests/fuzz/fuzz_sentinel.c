/* Fuzz target: what Redis Sentinel answers, as the Sentinel layer
 * (server/store/redis_sentinel.c) reads it (server/store/
 * redis_sentinel_parse.c):
 *   'A' + RESP bytes: the reply to SENTINEL get-master-addr-by-name, read
 *       by hiredis's reader as the layer gets it, then
 *       rls_sentinel_parse_addr;
 *   'S' + text: a +switch-master message, rls_sentinel_parse_switch for
 *       the master "mymaster";
 *   anything else: ignored.
 * Beyond "does not crash": an address has a non-empty NUL-terminated host
 * of printable bytes without spaces, at most RLS_SENTINEL_HOST_MAX, and a
 * port from 1 to 65535; a refused reply leaves *out untouched; the same
 * bytes give the same answer again.
 *
 * Built two ways (tests/fuzz/CMakeLists.txt, tests/fuzz/run.sh): with
 * clang's libFuzzer, and with RL_FUZZ_REPLAY as a plain program that runs
 * the seed corpus (corpus/sentinel: "ok-" files must parse, "bad-" files
 * must be refused) and deterministic mutations of the seeds in every
 * build. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hiredis/hiredis.h>

#include "rl_error.h"
#include "store/redis_sentinel_parse.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond)                                                            \
    do {                                                                       \
        if (!(cond)) {                                                         \
            fprintf(stderr, "fuzz_sentinel: %s:%d: %s\n", __FILE__, __LINE__,  \
                    #cond);                                                    \
            abort();                                                           \
        }                                                                      \
    } while (0)

/* Parses RESP bytes into one reply; NULL when they are not one whole,
 * valid reply. */
static redisReply *read_reply(const uint8_t *p, size_t n)
{
    redisReader *r;
    void *reply = NULL;
    size_t i, v;

    /* hiredis 0.14's reader allocates an array for the count an array
     * header declares before its elements arrive: not this code's to
     * test, so a count larger than the input is skipped. */
    for (i = 0; i < n; i++) {
        if (p[i] != '*')
            continue;
        for (v = 0, i++; i < n && p[i] >= '0' && p[i] <= '9'; i++)
            if ((v = v * 10 + (p[i] - '0')) > n)
                return NULL;
    }
    if ((r = redisReaderCreate()) == NULL)
        return NULL;
    if (redisReaderFeed(r, (const char *)p, n) != REDIS_OK ||
        redisReaderGetReply(r, &reply) != REDIS_OK)
        reply = NULL;
    redisReaderFree(r);
    return reply;
}

static void check_addr(const rls_sentinel_addr_t *a)
{
    size_t i, n;

    CHECK(memchr(a->host, '\0', sizeof(a->host)) != NULL);
    n = strlen(a->host);
    CHECK(n >= 1 && n <= RLS_SENTINEL_HOST_MAX && a->host[0] != '/');
    for (i = 0; i < n; i++)
        CHECK((unsigned char)a->host[i] > ' ' &&
              (unsigned char)a->host[i] < 127);
    CHECK(a->port >= 1 && a->port <= 65535);
}

/* Returns the parser's result (0 or 1: parsed), or a negative code. */
static int run_one(const uint8_t *data, size_t size)
{
    rls_sentinel_addr_t a, a2, from, to, from2, to2;
    redisReply *rep;
    char *copy;
    int rc;

    if (size == 0)
        return RL_EINVAL;
    if (data[0] == 'A') {
        if ((rep = read_reply(data + 1, size - 1)) == NULL)
            return RL_EINVAL;
        memset(&a, 0x5a, sizeof(a));
        rc = rls_sentinel_parse_addr(rep, &a);
        CHECK(rc == 0 || rc == RL_EAGAIN || rc == RL_EINVAL);
        if (rc == 0) {
            check_addr(&a);
            CHECK(rls_sentinel_parse_addr(rep, &a2) == 0);
            CHECK(strcmp(a.host, a2.host) == 0 && a.port == a2.port);
        } else {
            CHECK(a.host[0] == 0x5a && a.host[sizeof(a.host) - 1] == 0x5a);
            CHECK((rc == RL_EAGAIN) == (rep->type == REDIS_REPLY_NIL));
        }
        freeReplyObject(rep);
        return rc;
    }
    if (data[0] == 'S') {
        /* An exact-size copy: ASan sees any read past the text. */
        if ((copy = malloc(size - 1 > 0 ? size - 1 : 1)) == NULL)
            return RL_ENOMEM;
        memcpy(copy, data + 1, size - 1);
        rc = rls_sentinel_parse_switch(copy, size - 1, "mymaster", &from, &to);
        CHECK(rc == 0 || rc == 1 || rc == RL_EINVAL);
        if (rc >= 0) {
            check_addr(&from);
            check_addr(&to);
            CHECK(rls_sentinel_parse_switch(copy, size - 1, "mymaster", &from2,
                                            &to2) == rc);
            CHECK(strcmp(to.host, to2.host) == 0 && to.port == to2.port);
            /* Ours only if it starts with the name and a space. */
            CHECK((rc == 0) ==
                  (size - 1 > 9 && memcmp(copy, "mymaster ", 9) == 0));
        }
        free(copy);
        return rc;
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    run_one(data, size);
    return 0;
}

#ifdef RL_FUZZ_REPLAY
#include "walk.h"

static uint8_t seeds[32][4096];
static size_t seed_len[32];
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
    if ((strncmp(base, "ok-", 3) == 0 && rc < 0) ||
        (strncmp(base, "bad-", 4) == 0 && rc >= 0)) {
        fprintf(stderr, "fuzz_sentinel: %s: got %d\n", path, rc);
        return 1;
    }
    if (nseeds < 32 && n <= sizeof(seeds[0])) {
        memcpy(seeds[nseeds], buf, n);
        seed_len[nseeds++] = n;
    }
    return 0;
}

int main(int argc, char **argv)
{
    static const char alphabet[] = "*$-\r\n0123456789 .:abcmyster";
    static uint8_t buf[4096 + 8];
    int i, files = 0, iters = 50000;

    for (i = 1; i < argc; i++)
        if (rlf_walk(argv[i], run_file, &files) != 0)
            return 1;
    if (files == 0) {
        fprintf(stderr, "fuzz_sentinel: no seed files\n");
        return 1;
    }
    for (i = 0; i < iters && nseeds > 0; i++) {
        int s = (int)(rlf_rand() % (unsigned)nseeds);
        size_t n = seed_len[s], edits = 1 + rlf_rand() % 4;

        memcpy(buf, seeds[s], n);
        n = rlf_mutate(buf, n, sizeof(buf) - 1, edits, alphabet, rlf_rand);
        LLVMFuzzerTestOneInput(buf, n);
    }
    printf("fuzz_sentinel replay: %d files, %d mutations, invariants held\n",
           files, iters);
    return 0;
}
#endif
