/* Fuzz target: merging the loops' /metrics pages into one
 * (server/base/prom_merge.c, rls_prom_merge).
 *
 * The input is one to three pages, split at the first two form feeds
 * ('\f'; later ones belong to the third page). Each page sits in a heap
 * block of exactly its size, so a read past one is caught under ASan.
 * Gauges whose name has an odd length are summed.
 *
 * Beyond "does not crash", it checks the contract:
 *   - the merge returns 0 or RL_EINVAL, and 0 exactly when each page
 *     merges alone (whether a line is the format does not depend on the
 *     other pages); after RL_EINVAL out is as it was;
 *   - sum_gauge is asked about a metric name, within the pages;
 *   - the output is at most about twice the input (linear memory), every
 *     line of it ends in '\n', and merging it alone gives it back byte for
 *     byte (it is canonical);
 *   - merging the output with itself gives the same lines, the same keys,
 *     each value either the same or, for an integer, doubled (saturating);
 *     exactly doubled under its own counter's TYPE or a summed gauge's,
 *     exactly the same under an untyped family's, a kept gauge's or
 *     nobody's header.
 *
 * Built two ways (tests/fuzz/CMakeLists.txt, tests/fuzz/run.sh): with
 * clang's libFuzzer, and with RL_FUZZ_REPLAY as a plain program that runs
 * the seed corpus (corpus/prom_merge), every prefix of each seed and
 * mutations of it, in every build. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/prom_merge.h"
#include "rl_buf.h"
#include "rl_error.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond)                                                            \
    do {                                                                       \
        if (!(cond)) {                                                         \
            fprintf(stderr, "fuzz_prom_merge: %s:%d: %s\n", __FILE__,          \
                    __LINE__, #cond);                                          \
            abort();                                                           \
        }                                                                      \
    } while (0)

#define OUT_MAX (64u << 20)

/* The pages of the current input, for sum_gauge's bounds check. */
static const char *cur_pages[4];
static size_t cur_lens[4], cur_n;

static int is_name_char(char c, int first)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' ||
           c == ':' || (!first && c >= '0' && c <= '9');
}

static int sum_odd(const char *name, size_t len)
{
    size_t i;
    int inside = 0;

    CHECK(len > 0);
    for (i = 0; i < len; i++)
        CHECK(is_name_char(name[i], i == 0));
    for (i = 0; i < cur_n; i++)
        if (name >= cur_pages[i] && name + len <= cur_pages[i] + cur_lens[i])
            inside = 1;
    CHECK(inside);
    return (int)(len & 1);
}

static int merge(const char *const *p, const size_t *len, size_t n,
                 rl_buf_t *out)
{
    size_t i;

    for (i = 0; i < n; i++) {
        cur_pages[i] = p[i];
        cur_lens[i] = len[i];
    }
    cur_n = n;
    rl_buf_init(out, OUT_MAX);
    return rls_prom_merge(p, len, n, sum_odd, out);
}

/* The line at s[*at, n) (without its '\n', which must be there); moves
 * *at past it. */
static const char *next_line(const char *s, size_t n, size_t *at, size_t *len)
{
    const char *l = s + *at, *e = memchr(l, '\n', n - *at);

    CHECK(e != NULL && e > l);
    *len = (size_t)(e - l);
    *at += *len + 1;
    return l;
}

/* v[0, n) as an integer below 10^14 (a double that holds its double
 * exactly and prints it in digits), or -1. */
static int64_t small_int(const char *v, size_t n)
{
    int64_t x = 0;
    size_t i;

    if (n == 0 || n > 14)
        return -1;
    for (i = 0; i < n; i++) {
        if (v[i] < '0' || v[i] > '9')
            return -1;
        x = x * 10 + (v[i] - '0');
    }
    return x;
}

/* 1 when w[0, wn) is twice the integer v[0, n), 0 when it is not, -1
 * when v is not an integer small_int() reads. */
static int doubled(const char *v, size_t n, const char *w, size_t wn)
{
    char buf[32];
    int64_t x = small_int(v, n);
    int k;

    if (x < 0)
        return -1;
    k = snprintf(buf, sizeof(buf), "%lld", (long long)(2 * x));
    return (size_t)k == wn && memcmp(buf, w, wn) == 0;
}

/* What a header line "# TYPE name type" (a[0, n), the name cur_len bytes
 * at a + 7) says of a sample called just name: 1 it is summed, 0 it is
 * kept. A "# HELP" line says kept until its TYPE line follows. */
static int exact_sums(const char *a, size_t n, size_t cur_len)
{
    static const char *const summed[] = {" counter", " histogram"};
    const char *t = a + 7 + cur_len;
    size_t tn = n - 7 - cur_len, i;

    if (a[2] != 'T')
        return 0;
    for (i = 0; i < 2; i++)
        if (tn == strlen(summed[i]) && memcmp(t, summed[i], tn) == 0)
            return 1;
    /* A gauge sum_odd sums; a summary's quantiles are kept. */
    return tn == 6 && memcmp(t, " gauge", 6) == 0 && (cur_len & 1);
}

/* Q merged with itself, R, against Q line by line. */
static void check_doubled(const char *q, size_t qn, const char *r, size_t rn)
{
    size_t qa = 0, ra = 0, ql, rl, cur_len = 0;
    const char *cur = NULL;
    int cur_sums = 0;

    while (qa < qn) {
        const char *a = next_line(q, qn, &qa, &ql);
        const char *b = next_line(r, rn, &ra, &rl);
        const char *sp;
        size_t key, name;
        int d;

        if (a[0] == '#') {
            CHECK(ql == rl && memcmp(a, b, ql) == 0);
            CHECK(ql > 7 && (memcmp(a, "# HELP ", 7) == 0 ||
                             memcmp(a, "# TYPE ", 7) == 0));
            cur = a + 7;
            for (cur_len = 0; 7 + cur_len < ql && a[7 + cur_len] != ' ';)
                cur_len++;
            cur_sums = exact_sums(a, ql, cur_len);
            continue;
        }
        /* "key value": values have no blank, so the last one splits them
         * (a key may have blanks inside its label set). */
        sp = a + ql;
        while (sp > a && sp[-1] != ' ')
            sp--;
        CHECK(sp > a);
        key = (size_t)(sp - a);
        CHECK(rl > key && memcmp(a, b, key) == 0);
        CHECK(memchr(b + key, ' ', rl - key) == NULL);
        for (name = 0; name < key && is_name_char(a[name], name == 0);)
            name++;
        d = doubled(a + key, ql - key, b + key, rl - key);
        if (cur != NULL && name == cur_len && memcmp(a, cur, name) == 0) {
            /* A sample of the family whose header is above it. */
            if (cur_sums)
                CHECK(d != 0);
            else
                CHECK(ql == rl && memcmp(a, b, ql) == 0);
        } else if (d == 0) {
            CHECK(ql == rl && memcmp(a, b, ql) == 0);
        }
    }
    CHECK(ra == rn);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *pages[3] = {NULL, NULL, NULL};
    const char *p[3], *q[2];
    size_t len[3], qlen[2], n = 0, at = 0, i, total = 0;
    rl_buf_t out, again, alone;
    int rc, rc_alone, all_ok = 1;

    /* Up to three pages, each in a block of exactly its size. */
    while (n < 3) {
        const uint8_t *e = n < 2 ? memchr(data + at, '\f', size - at) : NULL;
        size_t l = e != NULL ? (size_t)(e - (data + at)) : size - at;
        pages[n] = malloc(l > 0 ? l : 1);
        CHECK(pages[n] != NULL);
        if (l > 0)
            memcpy(pages[n], data + at, l);
        p[n] = pages[n];
        len[n] = l;
        total += l;
        n++;
        if (e == NULL)
            break;
        at += l + 1;
    }
    for (i = 0; i < n; i++) {
        rc_alone = merge(&p[i], &len[i], 1, &alone);
        CHECK(rc_alone == RL_OK || rc_alone == RL_EINVAL);
        all_ok &= rc_alone == RL_OK;
        rl_buf_free(&alone);
    }
    rc = merge(p, len, n, &out);
    CHECK(rc == RL_OK || rc == RL_EINVAL);
    CHECK((rc == RL_OK) == all_ok);
    if (rc != RL_OK) {
        CHECK(rl_buf_len(&out) == 0);
        goto done;
    }
    CHECK(rl_buf_len(&out) <= 2 * total + 16);
    CHECK(rl_buf_len(&out) == 0 ||
          rl_buf_rptr(&out)[rl_buf_len(&out) - 1] == '\n');
    /* Canonical: alone, it comes back. */
    q[0] = q[1] = (const char *)rl_buf_rptr(&out);
    qlen[0] = qlen[1] = rl_buf_len(&out);
    CHECK(merge(q, qlen, 1, &again) == RL_OK);
    CHECK(rl_buf_len(&again) == qlen[0] &&
          (qlen[0] == 0 || memcmp(rl_buf_rptr(&again), q[0], qlen[0]) == 0));
    rl_buf_free(&again);
    /* With itself: the same lines, values doubled or kept. */
    CHECK(merge(q, qlen, 2, &again) == RL_OK);
    check_doubled(q[0], qlen[0], (const char *)rl_buf_rptr(&again),
                  rl_buf_len(&again));
    rl_buf_free(&again);
done:
    rl_buf_free(&out);
    for (i = 0; i < n; i++)
        free(pages[i]);
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
    size_t n, i;

    if (rlf_read(path, buf, sizeof(buf), &n) != 0)
        return 1;
    LLVMFuzzerTestOneInput(buf, n);
    /* Every prefix: a page cut anywhere. */
    for (i = 0; i < n; i++)
        LLVMFuzzerTestOneInput(buf, i);
    if (nseeds < 64 && n <= sizeof(seeds[0])) {
        memcpy(seeds[nseeds], buf, n);
        seed_len[nseeds++] = n;
    }
    return 0;
}

int main(int argc, char **argv)
{
    static const char alphabet[] = "\f\n\t {}=,\"\\#_:.+-eE0123456789"
                                   "abcxyzInfNaHELPTYPEcountergaugehistogram"
                                   "summaryuntyped_bucket_sum_count";
    static uint8_t buf[4096 + 8];
    int i, files = 0, iters = 30000;

    for (i = 1; i < argc; i++)
        if (rlf_walk(argv[i], run_file, &files) != 0)
            return 1;
    if (files == 0) {
        fprintf(stderr, "fuzz_prom_merge: no seed files\n");
        return 1;
    }
    for (i = 0; i < iters && nseeds > 0; i++) {
        int s = (int)(rlf_rand() % (unsigned)nseeds);
        size_t n = seed_len[s], edits = 1 + rlf_rand() % 4;

        memcpy(buf, seeds[s], n);
        n = rlf_mutate(buf, n, sizeof(buf) - 1, edits, alphabet, rlf_rand);
        LLVMFuzzerTestOneInput(buf, n);
    }
    printf("fuzz_prom_merge replay: %d files, %d mutations, invariants "
           "held\n",
           files, iters);
    return 0;
}
#endif
