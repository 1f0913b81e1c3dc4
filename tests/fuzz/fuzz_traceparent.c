/* Fuzz target: W3C traceparent values, as the --grpc listener reads them
 * from gRPC metadata and the --http listener from its request's header
 * (server/trace/traceparent.c, rls_traceparent_parse).
 *
 * Beyond "does not crash", it checks the parser's contract:
 *   - it never reads data[size] or beyond (the input sits in a heap block
 *     of exactly size bytes: ASan sees an over-read);
 *   - it returns 0 with valid 1, or RL_EINVAL with the result all zero;
 *   - on 0: the trimmed input is at least 55 bytes, its version is not ff,
 *     its ids are not zero, and the ids and flags written back as
 *     lowercase hex are the input's bytes at their places (nothing is
 *     accepted that does not say exactly what was parsed); version 00 is
 *     exactly 55 bytes;
 *   - a second traceparent makes the pair invalid (rls_traceparent_take).
 *
 * Built two ways (tests/fuzz/CMakeLists.txt, tests/fuzz/run.sh): with
 * clang's libFuzzer, and with RL_FUZZ_REPLAY as a plain program that runs
 * corpus files and deterministic mutations of valid values. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rl_error.h"
#include "trace/traceparent.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond)                                                            \
    do {                                                                       \
        if (!(cond)) {                                                         \
            fprintf(stderr, "fuzz_traceparent: %s:%d: %s\n", __FILE__,         \
                    __LINE__, #cond);                                          \
            abort();                                                           \
        }                                                                      \
    } while (0)

static void hex(const uint8_t *p, size_t n, char *out)
{
    static const char d[] = "0123456789abcdef";
    size_t i;

    for (i = 0; i < n; i++) {
        out[2 * i] = d[p[i] >> 4];
        out[2 * i + 1] = d[p[i] & 15];
    }
}

static int zero(const uint8_t *p, size_t n)
{
    while (n-- > 0)
        if (*p++ != 0)
            return 0;
    return 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *s = malloc(size > 0 ? size : 1);
    rls_traceparent_t tp, two;
    const char *t;
    size_t n;
    unsigned seen = 0;
    char w[32];
    int rc;

    CHECK(s != NULL);
    if (size > 0)
        memcpy(s, data, size);
    rc = rls_traceparent_parse(s, size, &tp);
    CHECK(rc == RL_OK || rc == RL_EINVAL);
    if (rc != RL_OK) {
        CHECK(tp.valid == 0 && tp.flags == 0 && zero(tp.trace_id, 16) &&
              zero(tp.span_id, 8));
    } else {
        CHECK(tp.valid == 1);
        t = s;
        n = size;
        while (n > 0 && (*t == ' ' || *t == '\t')) {
            t++;
            n--;
        }
        while (n > 0 && (t[n - 1] == ' ' || t[n - 1] == '\t'))
            n--;
        CHECK(n >= RLS_TRACEPARENT_LEN);
        CHECK(!(t[0] == 'f' && t[1] == 'f'));
        CHECK(!(t[0] == '0' && t[1] == '0') || n == RLS_TRACEPARENT_LEN);
        CHECK(t[2] == '-' && t[35] == '-' && t[52] == '-');
        CHECK(!zero(tp.trace_id, 16) && !zero(tp.span_id, 8));
        hex(tp.trace_id, 16, w);
        CHECK(memcmp(w, t + 3, 32) == 0);
        hex(tp.span_id, 8, w);
        CHECK(memcmp(w, t + 36, 16) == 0);
        hex(&tp.flags, 1, w);
        CHECK(memcmp(w, t + 53, 2) == 0);
    }
    rls_traceparent_take(&two, &seen, s, size);
    CHECK(two.valid == (rc == RL_OK));
    rls_traceparent_take(&two, &seen, s, size);
    CHECK(two.valid == 0 && seen == 2);
    free(s);
    return 0;
}

#ifdef RL_FUZZ_REPLAY
#include "walk.h"

static int run_file(const char *path)
{
    static unsigned char buf[4096];
    size_t n;

    if (rlf_read(path, buf, sizeof(buf), &n) != 0)
        return 1;
    LLVMFuzzerTestOneInput(buf, n);
    return 0;
}

int main(int argc, char **argv)
{
    static const char *seeds[] = {
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00",
        "01-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-03-xyz",
    };
    static const char alphabet[] = "0123456789abcdefABF- \t\xff";
    static unsigned char buf[256];
    int i, files = 0, ok = 0;

    for (i = 1; i < argc; i++)
        if (rlf_walk(argv[i], run_file, &files) != 0)
            return 1;
    for (i = 0; i < 100000; i++) {
        const char *h = seeds[rlf_rand() % 3];
        size_t n = strlen(h);
        rls_traceparent_t tp;

        /* byte 0 is left alone by rlf_mutate: a space in front lets the
         * version be mutated too */
        buf[0] = ' ';
        memcpy(buf + 1, h, n);
        n = rlf_mutate(buf, n + 1, sizeof(buf), rlf_rand() % 3, alphabet,
                       rlf_rand);
        LLVMFuzzerTestOneInput(buf, n);
        ok += rls_traceparent_parse((const char *)buf, n, &tp) == RL_OK;
    }
    printf("fuzz_traceparent: %d files, 100000 mutations (%d valid)\n", files,
           ok);
    CHECK(ok > 0 && ok < 100000);
    return 0;
}
#endif
