/* Fuzz target: the fleet-wide runtime switches as the server reads them
 * (server/policy/switches.c over rls_switches_parse and
 * rls_runtime_set_switches, server/policy/runtime.c): what rl-ctl writes
 * in the hash "<prefix>policy", or anything else a Redis server (or
 * whoever holds that key) may answer to HGETALL.
 *
 * The input's first byte chooses the version the runtime holds before
 * (0, or the switches "version 7, global shadow") and whether the reply
 * is lost (NULL: the connection failed first); the rest is RESP bytes,
 * read by hiredis's reader into the reply the poller gets. The poller runs
 * as the server runs it: rls_switch_poll_start on a real loop, its timer
 * sends HGETALL through a store whose command() the target answers, the
 * reply goes to the poller's callback, and the report it sends back
 * (HSET <prefix>instances) is answered too.
 *
 * Beyond "does not crash": every switch applied names a rule of 1 to
 * RL_RULE_MAX bytes, no rule twice, a mode that is -1 or a known one, a
 * scale that is 0 (not set) or in (0, 1000]; the runtime's version is the
 * reply's when it was applied, the old one otherwise; resolving every rule
 * of the policy afterwards gives a known mode and limits of at least 1 (a
 * scale never turns a limit into "refuse everything"), a GCRA interval
 * above 0; the same reply again (the next poll) changes nothing; the
 * poller is ready once Redis answered (a reply, even an error); at the
 * end every handle closes and nothing leaks (ASan/LSan).
 *
 * Built two ways (tests/fuzz/CMakeLists.txt, tests/fuzz/run.sh): with
 * clang's libFuzzer, and with RL_FUZZ_REPLAY as a plain program that runs
 * the seed corpus (corpus/switches) and deterministic mutations of it in
 * every build. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hiredis/hiredis.h>
#include <uv.h>

#include "base/log.h"
#include "policy/rules.h"
#include "policy/runtime.h"
#include "policy/switches.h"
#include "rl_error.h"
#include "store/store.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond)                                                            \
    do {                                                                       \
        if (!(cond)) {                                                         \
            fprintf(stderr, "fuzz_switches: %s:%d: %s\n", __FILE__, __LINE__, \
                    #cond);                                                    \
            abort();                                                           \
        }                                                                      \
    } while (0)

/* Rules of every algorithm, two windows, modes off and shadow: what the
 * switches scale and override. */
static const char policy_text[] =
    "rules:\n"
    "  api:\n"
    "    limits: [2/1s, 100/1m]\n"
    "  gcra:\n"
    "    limits: [\"10/1s:gcra:burst=4\"]\n"
    "  swc:\n"
    "    limits: [\"5/1m:sliding-window-counter\", \"9/1h:sliding-window\"]\n"
    "  dark:\n"
    "    limits: [5/1m]\n"
    "    mode: off\n"
    "  quiet:\n"
    "    limits: [1/1s]\n"
    "    mode: shadow\n";

/* The store: only command() is called; the target answers. */
typedef struct fstore_s {
    rls_store_t base;
    void (*cb)(void *data, void *reply); /* the command awaiting a reply */
    void *data;
    int ncmds;
    int hgetall; /* the last was HGETALL <prefix>policy */
} fstore_t;

static int fs_command(rls_store_t *s, int argc, const char **argv,
                      const size_t *lens, void (*cb)(void *data, void *reply),
                      void *data)
{
    fstore_t *f = (fstore_t *)s;

    CHECK(argc >= 2 && f->cb == NULL);
    f->hgetall = argc == 2 && lens[0] == 7 &&
                 memcmp(argv[0], "HGETALL", 7) == 0 && lens[1] == 9 &&
                 memcmp(argv[1], "rl:policy", 9) == 0;
    CHECK(f->hgetall ||
          (argc == 4 && memcmp(argv[0], "HSET", 4) == 0 &&
           strcmp(argv[1], "rl:instances") == 0 &&
           strcmp(argv[2], "fuzz-1") == 0));
    f->cb = cb;
    f->data = data;
    f->ncmds++;
    return RL_OK;
}

static const rls_store_vtbl_t fs_vtbl = {.command = fs_command};

static struct {
    int up;
    uv_loop_t loop;
    rls_policy_t *policy;
    fstore_t store;
} S;

static void setup(void)
{
    rls_diag_t d;

    if (S.up)
        return;
    S.up = 1;
    rls_log_set_level("error");
    CHECK(uv_loop_init(&S.loop) == 0);
    CHECK(rls_policy_build_buf(NULL, 0, "fuzz.yaml", policy_text,
                               strlen(policy_text), 16, &S.policy,
                               &d) == RL_OK);
    S.store.base.v = &fs_vtbl;
}

/* Answers the command awaited (reply may be NULL: the connection
 * failed). */
static void answer(void *reply)
{
    void (*cb)(void *, void *) = S.store.cb;
    void *data = S.store.data;

    CHECK(cb != NULL);
    S.store.cb = NULL;
    cb(data, reply);
}

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

/* What the runtime holds is well formed, and every rule resolves to a
 * known mode and limits of at least 1. */
static void check_runtime(rls_runtime_t *rt)
{
    size_t i, j, k;

    CHECK(rt->sw.global_mode >= -1 && rt->sw.global_mode < RLS_MODE_MAX);
    for (i = 0; i < rt->sw.n; i++) {
        const struct rls_switch_s *it = &rt->sw.items[i];
        size_t n = strnlen(it->rule, sizeof(it->rule));
        CHECK(n >= 1 && n <= RL_RULE_MAX);
        CHECK(it->mode >= -1 && it->mode < RLS_MODE_MAX);
        CHECK(it->scale == 0 || (it->scale > 0 && it->scale <= 1000));
        CHECK(it->quotas == 0 || it->quotas == 1);
        for (j = 0; j < i; j++)
            CHECK(strcmp(rt->sw.items[j].rule, it->rule) != 0);
    }
    for (i = 0; rls_policy_rule_at(rt->policy, i) != NULL; i++) {
        const rls_rule_t *r = rls_policy_rule_at(rt->policy, i);
        rls_spec_t spec;
        CHECK(rls_runtime_resolve(rt, r->name, strlen(r->name), "k", 1,
                                  &spec) == RL_OK);
        CHECK(spec.mode >= 0 && spec.mode < RLS_MODE_MAX);
        CHECK(spec.limits.n >= 1);
        for (k = 0; k < spec.limits.n; k++) {
            CHECK(spec.limits.w[k].limit >= 1);
            if (spec.limits.w[k].algo == RL_ALGO_GCRA)
                CHECK(spec.limits.w[k].t_us >= 1 &&
                      spec.limits.w[k].burst >= 1);
        }
    }
}

static void run_one(const uint8_t *data, size_t size)
{
    rls_switch_poll_t p;
    rls_runtime_t rt;
    redisReply *rep = NULL;
    void (*first_cb)(void *, void *);
    void *first_data;
    int64_t before;
    int lost;

    setup();
    if (size == 0)
        return;
    lost = (data[0] & 3) == 3;
    if (!lost && (rep = read_reply(data + 1, size - 1)) == NULL)
        return;
    CHECK(rls_runtime_init(&rt, rls_policy_ref(S.policy), 16) == RL_OK);
    if (data[0] & 4) {
        /* A version in force already: "version 7, global shadow". */
        const char *f[2] = {"version", "global"}, *v[2] = {"7", "shadow"};
        size_t fl[2] = {7, 6}, vl[2] = {1, 6}, bad;
        rls_switches_t sw;
        CHECK(rls_switches_parse(&sw, 2, f, fl, v, vl, &bad) == RL_OK &&
              bad == 0);
        CHECK(rls_runtime_set_switches(&rt, &sw) == RL_OK);
        CHECK(rt.sw.version == 7 && rt.sw.global_mode == RLS_MODE_SHADOW);
    }
    before = rt.sw.version;
    S.store.ncmds = 0;
    CHECK(rls_switch_poll_start(&p, &S.loop, &S.store.base, &rt, "rl:",
                                "fuzz-1") == 0);
    CHECK(!rls_switch_poll_ready(&p));
    /* The first poll is due at once. */
    uv_run(&S.loop, UV_RUN_NOWAIT);
    CHECK(S.store.ncmds == 1 && S.store.hgetall);
    first_cb = S.store.cb;
    first_data = S.store.data;
    answer(rep);
    if (rep == NULL) {
        /* Nothing from Redis: not ready yet, nothing changed, no report. */
        CHECK(!rls_switch_poll_ready(&p) && S.store.cb == NULL);
        CHECK(rt.sw.version == before);
    } else {
        if (S.store.cb != NULL) {
            /* The report of the version applied. */
            CHECK(!S.store.hgetall);
            answer(NULL);
        }
        CHECK(rls_switch_poll_ready(&p));
        CHECK(p.stats.polls + p.stats.failures == 1);
        CHECK(p.stats.applied <= p.stats.polls);
        if (p.stats.applied == 0)
            CHECK(rt.sw.version == before);
        check_runtime(&rt);
        /* The next poll gets the same hash: nothing new to apply, nothing
         * allocated (the poller's own callback again, as the timer's next
         * HGETALL would get it). */
        if (p.stats.polls == 1) {
            int64_t v = rt.sw.version;
            uint64_t applied = p.stats.applied;
            size_t n_after = rt.sw.n;
            S.store.cb = first_cb;
            S.store.data = first_data;
            answer(rep);
            if (S.store.cb != NULL)
                answer(NULL);
            CHECK(rt.sw.version == v && rt.sw.n == n_after);
            CHECK(p.stats.applied == applied && p.stats.polls == 2);
            check_runtime(&rt);
        }
    }
    rls_switch_poll_close(&p);
    uv_run(&S.loop, UV_RUN_NOWAIT);
    CHECK(S.store.cb == NULL);
    rls_runtime_free(&rt);
    if (rep != NULL)
        freeReplyObject(rep);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    run_one(data, size);
    return 0;
}

#ifdef RL_FUZZ_REPLAY
#include "walk.h"

static uint8_t seeds[64][4096];
static size_t seed_len[64];
static int nseeds;

static int run_file(const char *path)
{
    static uint8_t buf[1 << 16];
    size_t n;

    if (rlf_read(path, buf, sizeof(buf), &n) != 0)
        return 1;
    run_one(buf, n);
    if (nseeds < 64 && n <= sizeof(seeds[0])) {
        memcpy(seeds[nseeds], buf, n);
        seed_len[nseeds++] = n;
    }
    return 0;
}

int main(int argc, char **argv)
{
    static const char alphabet[] = "*$:-+\r\n0123456789 .eversionglobalmode"
                                   "scalequotasapigcraswcdarkoffshadow";
    static uint8_t buf[4096 + 8];
    int i, files = 0, iters = 50000;

    for (i = 1; i < argc; i++)
        if (rlf_walk(argv[i], run_file, &files) != 0)
            return 1;
    if (files == 0) {
        fprintf(stderr, "fuzz_switches: no seed files\n");
        return 1;
    }
    for (i = 0; i < iters && nseeds > 0; i++) {
        int s = (int)(rlf_rand() % (unsigned)nseeds);
        size_t n = seed_len[s], edits = 1 + rlf_rand() % 4;

        memcpy(buf, seeds[s], n);
        n = rlf_mutate(buf, n, sizeof(buf) - 1, edits, alphabet, rlf_rand);
        if (n > 0 && rlf_rand() % 8 == 0)
            buf[0] ^= (uint8_t)(rlf_rand() & 7);
        LLVMFuzzerTestOneInput(buf, n);
    }
    uv_loop_close(&S.loop);
    printf("fuzz_switches replay: %d files, %d mutations, invariants held\n",
           files, iters);
    return 0;
}
#endif
