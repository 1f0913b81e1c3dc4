/* Fuzz target: HTTP request heads, as the --metrics listener reads them
 * (server/net/http.c, rls_http_parse).
 *
 * Beyond "does not crash", it checks the parser's contract:
 *   - it never reads buf[len] or beyond (the input sits in a heap block of
 *     exactly len bytes), nor past RLS_HTTP_HEAD_MAX (under ASan the bytes
 *     after it are poisoned);
 *   - it returns RL_OK, RL_EAGAIN, RL_EFULL or RL_EINVAL, and RL_EFULL only
 *     when len >= RLS_HTTP_HEAD_MAX;
 *   - on RL_OK: 0 < head_len <= min(len, RLS_HTTP_HEAD_MAX), the head ends
 *     in LF, method and target lie inside the head and hold only the bytes
 *     their grammar allows, minor is 0 or 1, nheaders is within its cap,
 *     the path is within the target; parsing buf[0, head_len) alone gives
 *     the same request (a head delimits itself);
 *   - every strict prefix of a valid head, and every prefix of an
 *     incomplete one, is RL_EAGAIN (the listener waits for more bytes
 *     rather than refusing a request split across reads).
 *
 * Built two ways (tests/fuzz/CMakeLists.txt, tests/fuzz/run.sh): with
 * clang's libFuzzer, and with RL_FUZZ_REPLAY as a plain program that runs
 * corpus files and deterministic mutations of valid heads in every build. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "net/http.h"
#include "rl_error.h"

#if defined(__SANITIZE_ADDRESS__)
#define FUZZ_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define FUZZ_ASAN 1
#endif
#endif
#ifdef FUZZ_ASAN
#include <sanitizer/asan_interface.h>
#endif

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond)                                                            \
    do {                                                                       \
        if (!(cond)) {                                                         \
            fprintf(stderr, "fuzz_http: %s:%d: %s\n", __FILE__, __LINE__,     \
                    #cond);                                                    \
            abort();                                                           \
        }                                                                      \
    } while (0)

/* Prefixes checked per input: all of a short one, a spread of a long one
 * (all of them would cost O(len^2) per input). */
#define PREFIXES_ALL 512
#define PREFIXES_SAMPLED 128

static int is_tchar(unsigned char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
           (c >= '0' && c <= '9') ||
           (c != '\0' && strchr("!#$%&'*+-.^_`|~", c) != NULL);
}

/* Parses p[0, n) from a heap block of exactly n bytes (bytes beyond the
 * head limit poisoned under ASan), so any over-read is caught. */
static int parse_exact(const uint8_t *p, size_t n, rls_http_req_t *q,
                       char **keep)
{
    char *b = malloc(n ? n : 1);
    int rc;

    CHECK(b != NULL);
    if (n > 0)
        memcpy(b, p, n);
#ifdef FUZZ_ASAN
    if (n > RLS_HTTP_HEAD_MAX)
        ASAN_POISON_MEMORY_REGION(b + RLS_HTTP_HEAD_MAX,
                                  n - RLS_HTTP_HEAD_MAX);
#endif
    rc = rls_http_parse(b, n, q);
#ifdef FUZZ_ASAN
    if (n > RLS_HTTP_HEAD_MAX)
        ASAN_UNPOISON_MEMORY_REGION(b + RLS_HTTP_HEAD_MAX,
                                    n - RLS_HTTP_HEAD_MAX);
#endif
    *keep = b;
    return rc;
}

static void check_ok(const char *b, size_t n, const rls_http_req_t *q)
{
    size_t i;

    CHECK(q->head_len > 0 && q->head_len <= n &&
          q->head_len <= RLS_HTTP_HEAD_MAX);
    CHECK(b[q->head_len - 1] == '\n');
    CHECK(q->method >= b && q->method_len >= 1 &&
          q->method_len <= RLS_HTTP_METHOD_MAX &&
          q->method + q->method_len <= b + q->head_len);
    CHECK(q->target > q->method + q->method_len && q->target_len >= 1 &&
          q->target + q->target_len < b + q->head_len);
    CHECK(q->method[q->method_len] == ' ' && q->target[-1] == ' ' &&
          q->target[q->target_len] == ' ');
    for (i = 0; i < q->method_len; i++)
        CHECK(is_tchar((unsigned char)q->method[i]));
    for (i = 0; i < q->target_len; i++)
        CHECK((unsigned char)q->target[i] > 0x20 &&
              (unsigned char)q->target[i] < 0x7f);
    CHECK(q->minor == 0 || q->minor == 1);
    CHECK(q->keep_alive == 0 || q->keep_alive == 1);
    CHECK(q->nheaders <= RLS_HTTP_HEADERS_MAX);
    CHECK(rls_http_path_len(q) <= q->target_len);
}

/* Every prefix of data[0, upto) must be RL_EAGAIN. */
static void check_prefixes(const uint8_t *data, size_t upto)
{
    size_t k, step = 1;
    rls_http_req_t q;
    char *b;

    if (upto > PREFIXES_ALL)
        step = upto / PREFIXES_SAMPLED;
    for (k = 0; k < upto; k += step) {
        int rc = parse_exact(data, k, &q, &b);
        if (rc != RL_EAGAIN) {
            fprintf(stderr, "fuzz_http: prefix %zu of %zu: rc=%d\n", k, upto,
                    rc);
            abort();
        }
        free(b);
    }
    if (upto > 0) {
        CHECK(parse_exact(data, upto - 1, &q, &b) == RL_EAGAIN);
        free(b);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    rls_http_req_t q, again;
    char *b, *b2;
    int rc;

    rc = parse_exact(data, size, &q, &b);
    CHECK(rc == RL_OK || rc == RL_EAGAIN || rc == RL_EFULL ||
          rc == RL_EINVAL);
    if (rc == RL_EFULL)
        CHECK(size >= RLS_HTTP_HEAD_MAX);
    if (rc == RL_EAGAIN) {
        CHECK(size < RLS_HTTP_HEAD_MAX);
        check_prefixes(data, size);
    }
    if (rc == RL_OK) {
        check_ok(b, size, &q);
        /* The head alone parses to the same request. */
        CHECK(parse_exact(data, q.head_len, &again, &b2) == RL_OK);
        CHECK(again.head_len == q.head_len &&
              again.method_len == q.method_len &&
              (size_t)(again.method - b2) == (size_t)(q.method - b) &&
              again.target_len == q.target_len &&
              (size_t)(again.target - b2) == (size_t)(q.target - b) &&
              again.minor == q.minor && again.keep_alive == q.keep_alive &&
              again.nheaders == q.nheaders);
        free(b2);
        check_prefixes(data, q.head_len);
    }
    free(b);
    return 0;
}

#ifdef RL_FUZZ_REPLAY
#include "walk.h"
/* Without libFuzzer: runs each file named (a directory is read with the
 * names listed in it, so ctest can pass the seed corpus), then a fixed
 * number of deterministic mutations of valid heads. */

/* A seed's name says what it is: ok-*, partial-*, full-* or bad-* must
 * parse to RL_OK, RL_EAGAIN, RL_EFULL or RL_EINVAL. */
static int expect(const char *path, const uint8_t *p, size_t n)
{
    static const struct {
        const char *prefix;
        int rc;
    } kinds[] = {{"ok-", RL_OK},
                 {"partial-", RL_EAGAIN},
                 {"full-", RL_EFULL},
                 {"bad-", RL_EINVAL}};
    const char *base = strrchr(path, '/');
    rls_http_req_t q;
    size_t i;
    int rc;

    base = base != NULL ? base + 1 : path;
    for (i = 0; i < sizeof(kinds) / sizeof(kinds[0]); i++) {
        if (strncmp(base, kinds[i].prefix, strlen(kinds[i].prefix)) != 0)
            continue;
        rc = rls_http_parse((const char *)p, n, &q);
        if (rc != kinds[i].rc) {
            fprintf(stderr, "fuzz_http: %s: rc=%d, expected %d\n", path, rc,
                    kinds[i].rc);
            return 1;
        }
    }
    return 0;
}

static int run_file(const char *path)
{
    static uint8_t buf[1 << 16];
    size_t n;

    if (rlf_read(path, buf, sizeof(buf), &n) != 0)
        return 1;
    LLVMFuzzerTestOneInput(buf, n);
    return expect(path, buf, n);
}

int main(int argc, char **argv)
{
    static const char *heads[] = {
        "GET /metrics HTTP/1.1\r\nHost: t\r\n\r\n",
        "HEAD /healthz HTTP/1.0\r\nConnection: keep-alive\r\n\r\n",
        "\r\n\nGET /healthz?x=1 HTTP/1.1\nConnection: close, x\n\n",
        "GET / HTTP/1.1\r\nContent-Length: 000\r\nA: \t b \t\r\n\r\nGET /",
        "POST /metrics HTTP/1.1\r\nUser-Agent: Prometheus/2.45\r\n"
        "Accept: text/plain;version=0.0.4;q=1,*/*;q=0.1\r\n\r\n",
    };
    static const char alphabet[] = " \r\n\t:/?,01GHTP\x7f\x80";
    static uint8_t buf[1024];
    int i, iters = 50000, files = 0;

    for (i = 1; i < argc; i++)
        if (rlf_walk(argv[i], run_file, &files) != 0)
            return 1;
    for (i = 0; i < iters; i++) {
        const char *h = heads[rlf_rand() % (sizeof(heads) / sizeof(heads[0]))];
        size_t n = strlen(h), k, edits = rlf_rand() % 4;

        memcpy(buf, h, n);
        for (k = 0; k < edits && n > 0; k++) {
            size_t at = rlf_rand() % n;
            switch (rlf_rand() % 4) {
            case 0: /* flip a bit */
                buf[at] ^= (uint8_t)(1u << (rlf_rand() % 8));
                break;
            case 1: /* an interesting byte */
                buf[at] =
                    (uint8_t)alphabet[rlf_rand() % (sizeof(alphabet) - 1)];
                break;
            case 2: /* delete a byte */
                memmove(buf + at, buf + at + 1, n - at - 1);
                n--;
                break;
            default: /* duplicate a byte */
                if (n < sizeof(buf)) {
                    memmove(buf + at + 1, buf + at, n - at);
                    n++;
                }
            }
        }
        if (rlf_rand() % 4 == 0 && n > 0)
            n = rlf_rand() % n; /* truncated */
        LLVMFuzzerTestOneInput(buf, n);
    }
    printf("fuzz_http replay: %d files, %d mutated heads, invariants held\n",
           files, iters);
    return 0;
}
#endif
