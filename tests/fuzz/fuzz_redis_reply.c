/* Fuzz target: the Redis store's script reply, as the store's connection
 * reads it (a hiredis reader making the objects of redis_reply_alloc.c)
 * and hands it to rls_redis_parse_reply (server/store/redis_parse.c). A reply
 * comes from the network and from a Redis anyone with access may have
 * tampered with (a stored quota, a counter's value), so it is input like
 * any other.
 *
 * Input: byte 0 gives the number of ops (1 + b % 4); the next byte per op
 * its shape (nwin = 1 + b % 8, ncosts = 1 + b / 8 % 32); the rest is RESP,
 * the reply. Beyond "does not crash or leak", it checks the contract:
 *   - the reader's objects hold what the RESP said, and free whole, also
 *     when the RESP is cut or malformed halfway through an array;
 *   - the parser returns RL_OK, RLS_REDIS_LATE or RL_EINVAL, and the same
 *     again on the same bytes;
 *   - on RLS_REDIS_LATE the ops are untouched;
 *   - on RL_OK every op has err, or admitted <= ncosts and nquota_win <= 8 with
 *     quota_win inside that op's own slot of the array; errs.failed counts the
 *     ops with err RL_ESTORE, by kind too, and errs.elsewhere those with
 *     RLS_REDIS_ENOTHERE; errs.text is the reply's last element;
 *   - under a cap (rls_redis_reply_cap_attach, its size and a split of
 *     the bytes taken from the input), fed in two reads with the check
 *     after each as redis_uv.c does: the check says 0 or RL_EFULL, and
 *     RL_EFULL again once it said so; the objects never take more than
 *     the cap; an over is counted exactly once; and a reply that never
 *     went over reads exactly as without the cap.
 *
 * Built two ways (tests/fuzz/CMakeLists.txt, tests/fuzz/run.sh): with
 * clang's libFuzzer, and with RL_FUZZ_REPLAY as a plain program that runs
 * the seed corpus (corpus/redis_reply) and deterministic mutations of
 * well-formed replies in every build. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hiredis/hiredis.h>

#include "rl_error.h"
#include "store/redis_parse.h"
#include "store/redis_reply_alloc.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond)                                                            \
    do {                                                                       \
        if (!(cond)) {                                                         \
            fprintf(stderr, "fuzz_redis_reply: %s:%d: %s\n", __FILE__,         \
                    __LINE__, #cond);                                          \
            abort();                                                           \
        }                                                                      \
    } while (0)

#define MAX_OPS 4
#define SENTINEL UINT64_C(0xdeadbeef)

static rls_op_t ops[MAX_OPS];
static rls_op_window_t win[MAX_OPS][RL_ADMIT_WINDOWS_MAX];
static rls_op_window_t quota_win[MAX_OPS * RL_ADMIT_WINDOWS_MAX];

/* Shapes the ops from the header; returns the header's length, or 0 when
 * the input is too short. */
static size_t shape(const uint8_t *data, size_t size, size_t *n)
{
    size_t i;

    if (size < 1)
        return 0;
    *n = 1 + data[0] % MAX_OPS;
    if (size < 1 + *n)
        return 0;
    memset(ops, 0, sizeof(ops));
    for (i = 0; i < *n; i++) {
        ops[i].nwin = 1 + data[1 + i] % 8;
        ops[i].ncosts = 1 + data[1 + i] / 8 % 32;
        ops[i].win = win[i];
        ops[i].admitted = SENTINEL;
        ops[i].err = 12345;
    }
    return 1 + *n;
}

/* Reads the RESP at p as the store's connection does and parses the
 * reply; -100 when the bytes hold no complete reply (hiredis waits for
 * more, or refuses them). *rep gets the reply to free, or NULL. */
static int parse(const uint8_t *p, size_t len, size_t n, rls_redis_errs_t *e,
                 void **rep)
{
    redisReader *rd = redisReaderCreateWithFunctions(&rls_redis_reply_fns);
    int ok;

    CHECK(rd != NULL);
    *rep = NULL;
    ok = redisReaderFeed(rd, (const char *)p, len) == REDIS_OK &&
         redisReaderGetReply(rd, rep) == REDIS_OK && *rep != NULL;
    redisReaderFree(rd);
    if (!ok)
        return -100;
    return rls_redis_parse_reply(*rep, ops, n, quota_win, e);
}

/* The same bytes under a cap of max bytes, in two reads split at cut.
 * Returns 1 when a reply came whole, 0 when none did, -1 when hiredis
 * failed the bytes; *over whether the cap refused them. */
static int capped(const uint8_t *p, size_t len, size_t max, size_t cut,
                  int *over)
{
    redisReader *rd = redisReaderCreate();
    rls_redis_reply_cap_t cap;
    uint64_t count = 0;
    void *rep = NULL;
    size_t part[2] = {cut, len - cut}, at = 0;
    int i, got = 0, rc, was = 0;

    CHECK(rd != NULL);
    rls_redis_reply_cap_attach(rd, &cap, max, &count);
    for (i = 0; i < 2 && got == 0; i++) {
        CHECK(redisReaderFeed(rd, (const char *)p + at, part[i]) == REDIS_OK);
        at += part[i];
        if (redisReaderGetReply(rd, &rep) != REDIS_OK)
            got = -1;
        else if (rep != NULL)
            got = 1;
        CHECK(cap.used <= max);
        rc = rls_redis_reply_cap_check(&cap, rd);
        CHECK(rc == 0 || rc == RL_EFULL);
        CHECK(!was || rc == RL_EFULL);
        was = rc == RL_EFULL;
        CHECK(count == (uint64_t)(cap.over != 0));
        if (was)
            break;
    }
    /* Over stays over, and is not counted twice. */
    if (was)
        CHECK(rls_redis_reply_cap_check(&cap, rd) == RL_EFULL && count == 1);
    *over = cap.over;
    rls_redis_reply_fns.freeObject(rep);
    redisReaderFree(rd);
    return got;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    rls_redis_errs_t e, e2;
    size_t n, h, i, failed = 0, elsewhere = 0, kinds = 0;
    void *rep, *rep2;
    int rc, rc2, k;

    if ((h = shape(data, size, &n)) == 0)
        return 0;
    rc = parse(data + h, size - h, n, &e, &rep);
    CHECK(rc == RL_OK || rc == RLS_REDIS_LATE || rc == RL_EINVAL || rc == -100);
    if (rc == RLS_REDIS_LATE) {
        for (i = 0; i < n; i++)
            CHECK(ops[i].admitted == SENTINEL && ops[i].err == 12345);
    } else if (rc == RL_OK) {
        for (i = 0; i < n; i++) {
            const rls_op_t *op = &ops[i];

            if (op->err == RLS_REDIS_ENOTHERE) {
                elsewhere++;
                continue;
            }
            if (op->err != 0) {
                CHECK(op->err == RL_ESTORE);
                failed++;
                continue;
            }
            CHECK(op->admitted <= op->ncosts);
            CHECK(op->nquota_win <= RL_ADMIT_WINDOWS_MAX);
            CHECK((op->nquota_win == 0) == (op->quota_win == NULL));
            if (op->nquota_win > 0) {
                CHECK(op->quota_win == &quota_win[i * RL_ADMIT_WINDOWS_MAX]);
                for (k = 0; k < (int)op->nquota_win; k++)
                    CHECK(op->quota_win[k].window_s >= 1 &&
                          op->quota_win[k].limit >= 1);
            }
        }
        CHECK(e.failed == failed && e.elsewhere == elsewhere);
        for (k = 0; k < RLS_SERR_MAX; k++)
            kinds += e.by_kind[k];
        CHECK(kinds == failed);
        CHECK(e.bad_quotas <= n);
        if (e.text != NULL) {
            const redisReply *r = rep;
            const redisReply *last = r->element[r->elements - 1];
            CHECK(last->type == REDIS_REPLY_STRING && e.text == last->str &&
                  e.text_len == last->len);
        }
    }
    /* The same bytes, the same answer. */
    shape(data, size, &n);
    rc2 = parse(data + h, size - h, n, &e2, &rep2);
    CHECK(rc2 == rc);
    /* Under a cap of 64 to 16,384 bytes, split where the input says. */
    {
        size_t max = 64 * (1 + (size_t)data[0] / 4 % 256);
        size_t cut = (size - h) > 0 ? (size_t)data[size - 1] % (size - h) : 0;
        int over, got = capped(data + h, size - h, max, cut, &over);

        if (!over)
            CHECK((got == 1) == (rc != -100));
    }
    rls_redis_reply_fns.freeObject(rep);
    rls_redis_reply_fns.freeObject(rep2);
    return 0;
}

#ifdef RL_FUZZ_REPLAY
#include "walk.h"
/* Without libFuzzer: runs each file named (a directory is read with the
 * names listed in it), then deterministic mutations of well-formed
 * replies. A seed named ok-* must parse (RL_OK or RLS_REDIS_LATE), bad-*
 * must be RL_EINVAL or no reply at all (hiredis refused the RESP). */

static int run_file(const char *path)
{
    static uint8_t buf[1 << 16];
    const char *base = strrchr(path, '/');
    rls_redis_errs_t e;
    size_t n, h, nops;
    void *rep;
    int rc;

    if (rlf_read(path, buf, sizeof(buf), &n) != 0)
        return 1;
    LLVMFuzzerTestOneInput(buf, n);
    base = base != NULL ? base + 1 : path;
    if ((h = shape(buf, n, &nops)) == 0) {
        fprintf(stderr, "fuzz_redis_reply: %s: no header\n", path);
        return 1;
    }
    rc = parse(buf + h, n - h, nops, &e, &rep);
    rls_redis_reply_fns.freeObject(rep);
    if ((strncmp(base, "ok-", 3) == 0 && rc != RL_OK && rc != RLS_REDIS_LATE) ||
        (strncmp(base, "bad-", 4) == 0 && rc != RL_EINVAL && rc != -100)) {
        fprintf(stderr, "fuzz_redis_reply: %s: rc=%d\n", path, rc);
        return 1;
    }
    return 0;
}

static size_t put_str(uint8_t *buf, size_t cap, const char *t)
{
    return (size_t)snprintf((char *)buf, cap, "$%zu\r\n%s\r\n", strlen(t), t);
}

/* A well-formed input: header, then a reply the script could send. */
static size_t well_formed(uint8_t *buf, size_t cap)
{
    static const char *const kinds[] = {"OOM", "OVERFLOW", "WRONGTYPE", "ERR",
                                        ""};
    size_t n = 1 + rlf_rand() % MAX_OPS, i, len, j, elems = 0, at;
    int any_err = 0;
    char t[512];

    if (rlf_rand() % 50 == 0) {
        buf[0] = 0;
        buf[1] = 0;
        return 2 + put_str(buf + 2, cap - 2, "late");
    }
    buf[0] = (uint8_t)(n - 1);
    len = 1 + n;
    /* The array's header is written last, into room kept for it. */
    at = len;
    len += 16;
    for (i = 0; i < n; i++) {
        uint32_t nwin = 1 + rlf_rand() % 8, nc = 1 + rlf_rand() % 32;
        size_t tl;
        buf[1 + i] = (uint8_t)((nwin - 1) + 8 * (nc - 1));
        switch (rlf_rand() % 4) {
        case 0:
            snprintf(t, sizeof(t), "e%s", kinds[rlf_rand() % 5]);
            len += put_str(buf + len, cap - len, t);
            elems++;
            any_err = 1;
            break;
        case 1: {
            uint32_t q = 1 + rlf_rand() % 8;
            tl = (size_t)snprintf(t, sizeof(t), "%u q", rlf_rand() % (nc + 1));
            for (j = 0; j < q; j++)
                tl += (size_t)snprintf(t + tl, sizeof(t) - tl, " %u %u %d",
                                       1 + rlf_rand() % 86400, 1 + rlf_rand(),
                                       (int)(rlf_rand() % 100) - 1);
            len += put_str(buf + len, cap - len, t);
            elems++;
            break;
        }
        case 2:
            tl = (size_t)snprintf(t, sizeof(t), "%u Q", rlf_rand() % (nc + 1));
            for (j = 0; j < nwin; j++)
                tl += (size_t)snprintf(t + tl, sizeof(t) - tl, " %d",
                                       (int)(rlf_rand() % 1000) - 1);
            len += put_str(buf + len, cap - len, t);
            elems++;
            break;
        default:
            len += (size_t)snprintf((char *)buf + len, cap - len, ":%u\r\n",
                                    rlf_rand() % (nc + 1));
            for (j = 0; j < nwin; j++)
                len += (size_t)snprintf((char *)buf + len, cap - len, ":%d\r\n",
                                        (int)(rlf_rand() % 1000) - 1);
            elems += 1 + nwin;
        }
    }
    if (any_err) {
        len += put_str(buf + len, cap - len, "OOM command not allowed");
        elems++;
    }
    {
        char hd[16];
        size_t hl = (size_t)snprintf(hd, sizeof(hd), "*%zu\r\n", elems);
        memmove(buf + at + hl, buf + at + 16, len - at - 16);
        memcpy(buf + at, hd, hl);
        len -= 16 - hl;
    }
    return len;
}

int main(int argc, char **argv)
{
    static const char alphabet[] = " \r\n*$:+-~0123456789eqQlate\x7f";
    static uint8_t buf[8192];
    int i, iters = 100000, files = 0, ok = 0;

    for (i = 1; i < argc; i++)
        if (rlf_walk(argv[i], run_file, &files) != 0)
            return 1;
    for (i = 0; i < iters; i++) {
        size_t n = well_formed(buf, sizeof(buf) - 8), edits = rlf_rand() % 4;

        if (edits == 0) {
            rls_redis_errs_t e;
            size_t h, nops;
            void *rep;
            int rc;
            h = shape(buf, n, &nops);
            CHECK(h > 0);
            rc = parse(buf + h, n - h, nops, &e, &rep);
            CHECK(rc == RL_OK || (rc == RLS_REDIS_LATE && nops == 1));
            rls_redis_reply_fns.freeObject(rep);
            ok++;
        }
        n = rlf_mutate(buf, n, sizeof(buf), edits, alphabet, rlf_rand);
        if (rlf_rand() % 4 == 0 && n > 0)
            n = rlf_rand() % n;
        LLVMFuzzerTestOneInput(buf, n);
    }
    printf("fuzz_redis_reply replay: %d files, %d replies (%d unmutated "
           "parsed), invariants held\n",
           files, iters, ok);
    return 0;
}
#endif
