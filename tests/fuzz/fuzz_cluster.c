/* Fuzz target: the Redis Cluster store's parsers
 * (server/store/redis_cluster_map.c). Both read what a cluster node sent:
 *   'S' + RESP bytes: the reply to CLUSTER SHARDS or CLUSTER SLOTS, read by
 *       hiredis's reader as the store gets it, then rls_cluster_parse_map;
 *   'R' + text: an error reply, rls_cluster_parse_redirect;
 *   anything else: rls_key_slot of the bytes.
 * Beyond "does not crash": every range has first <= last < 16384, a port
 * from 1 to 65535 and a non-empty NUL-terminated host; a redirection has a
 * known kind and, for MOVED/ASK, a slot, port and host in range; the same
 * bytes give the same answer again.
 *
 * Built two ways (tests/fuzz/CMakeLists.txt, tests/fuzz/run.sh): with
 * clang's libFuzzer, and with RL_FUZZ_REPLAY as a plain program that runs
 * the seed corpus (corpus/cluster: "ok-" files must parse, "bad-" files
 * must be refused), checks known key slots, and replays deterministic
 * mutations of the seeds in every build. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hiredis/hiredis.h>

#include "rl_error.h"
#include "store/redis_cluster_map.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond)                                                            \
    do {                                                                       \
        if (!(cond)) {                                                         \
            fprintf(stderr, "fuzz_cluster: %s:%d: %s\n", __FILE__, __LINE__,   \
                    #cond);                                                    \
            abort();                                                           \
        }                                                                      \
    } while (0)

#define CAP 64
static rls_slot_range_t ranges[CAP];

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

/* Returns the parser's result for a map input, or for a redirect input. */
static int run_one(const uint8_t *data, size_t size)
{
    rls_redirect_t rd, rd2;
    redisReply *rep;
    char *copy;
    int rc, i;

    if (size == 0)
        return RL_EINVAL;
    if (data[0] == 'S') {
        if ((rep = read_reply(data + 1, size - 1)) == NULL)
            return RL_EINVAL;
        rc = rls_cluster_parse_map(rep, ranges, CAP);
        CHECK(rc == RL_EINVAL || rc == RL_EFULL || (rc >= 0 && rc <= CAP));
        for (i = 0; i < rc; i++) {
            CHECK(ranges[i].first <= ranges[i].last);
            CHECK(ranges[i].last < RLS_SLOTS);
            CHECK(ranges[i].port >= 1 && ranges[i].port <= 65535);
            CHECK(memchr(ranges[i].host, '\0', sizeof(ranges[i].host)) !=
                  NULL);
            CHECK(ranges[i].host[0] != '\0');
        }
        CHECK(rls_cluster_parse_map(rep, ranges, CAP) == rc);
        freeReplyObject(rep);
        return rc;
    }
    if (data[0] == 'R') {
        /* An exact-size copy: ASan sees any read past the text. */
        if ((copy = malloc(size - 1 > 0 ? size - 1 : 1)) == NULL)
            return RL_ENOMEM;
        memcpy(copy, data + 1, size - 1);
        rc = rls_cluster_parse_redirect(copy, size - 1, "127.0.0.1", &rd);
        CHECK(rc == 0 || rc == RL_EINVAL);
        if (rc == 0) {
            CHECK(rd.kind >= RLS_REDIR_MOVED &&
                  rd.kind <= RLS_REDIR_CLUSTERDOWN);
            if (rd.kind == RLS_REDIR_MOVED || rd.kind == RLS_REDIR_ASK) {
                CHECK(rd.slot >= 0 && rd.slot < RLS_SLOTS);
                CHECK(rd.port >= 1 && rd.port <= 65535);
                CHECK(rd.host[0] != '\0' &&
                      strlen(rd.host) <= RLS_NODE_HOST_MAX);
            }
            CHECK(rls_cluster_parse_redirect(copy, size - 1, "127.0.0.1",
                                             &rd2) == 0);
            CHECK(memcmp(&rd, &rd2, sizeof(rd)) == 0);
        }
        free(copy);
        return rc;
    }
    CHECK(rls_key_slot((const char *)data, size) < RLS_SLOTS);
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
        fprintf(stderr, "fuzz_cluster: %s: got %d\n", path, rc);
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
    static const char alphabet[] = "*:$+-\r\n0123456789 MOVEDASK[]:.";
    static uint8_t buf[4096 + 8];
    int i, files = 0, iters = 50000;

    /* Redis's own examples: crc16("123456789") = 0x31c3; a hash tag. */
    CHECK(rls_key_slot("123456789", 9) == 12739);
    CHECK(rls_key_slot("a", 1) == 15495);
    CHECK(rls_key_slot("{user1000}.following", 20) ==
          rls_key_slot("user1000", 8));
    CHECK(rls_key_slot("foo{}{bar}", 10) != rls_key_slot("bar", 3));
    CHECK(rls_key_slot("rl:{a}b}:r:x:60:1", 17) == rls_key_slot("a", 1));
    for (i = 1; i < argc; i++)
        if (rlf_walk(argv[i], run_file, &files) != 0)
            return 1;
    for (i = 0; i < iters && nseeds > 0; i++) {
        int s = (int)(rlf_rand() % (unsigned)nseeds);
        size_t n = seed_len[s], edits = 1 + rlf_rand() % 4;

        memcpy(buf, seeds[s], n);
        n = rlf_mutate(buf, n, sizeof(buf) - 1, edits, alphabet, rlf_rand);
        LLVMFuzzerTestOneInput(buf, n);
    }
    printf("fuzz_cluster replay: %d files, %d mutations, invariants held\n",
           files, iters);
    return 0;
}
#endif
