/* Fuzz target: rl-fit's access-log line parsers (tools/fit/fit_log.c):
 * combined format and JSON lines, with the key expression and times.
 *
 * Byte 0 picks the mode: bit 0 the format (combined, JSON), bits 1-2 the
 * key expression, bit 3 whether JSON lines carry a cost field. The rest
 * is one line. Beyond "does not crash", it checks the parser's contract:
 *   - it never reads past the line (which sits in a heap block of exactly
 *     its length);
 *   - it returns 0, RLF_NOKEY or RL_EINVAL, and a line over RLF_LINE_MAX
 *     is RL_EINVAL;
 *   - on 0: the key is non-empty and lies inside the line, its term is one
 *     of the expression's, the cost is at most RLF_COST_MAX, and parsing
 *     again gives the same answer.
 *
 * Built two ways (tests/fuzz/CMakeLists.txt, tests/fuzz/run.sh): with
 * clang's libFuzzer, and with RL_FUZZ_REPLAY as a plain program that runs
 * the seed corpus (corpus/fitlog: ok-* must parse, nokey-* must have no
 * key, bad-* must be malformed) and mutations of well-formed lines. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fit_log.h"
#include "rl_error.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond)                                                            \
    do {                                                                       \
        if (!(cond)) {                                                         \
            fprintf(stderr, "fuzz_fitlog: %s:%d: %s\n", __FILE__, __LINE__,    \
                    #cond);                                                    \
            abort();                                                           \
        }                                                                      \
    } while (0)

static const char *const KEYS[4] = {"user|addr", "addr", "user_id|ip",
                                    "ident|user|addr|ip"};

static void conf_for(uint8_t mode, rlf_conf_t *c)
{
    const char *why;

    memset(c, 0, sizeof(*c));
    c->fmt = mode & 1 ? RLF_FMT_JSON : RLF_FMT_COMBINED;
    rlf_name_set(&c->time, "time", 4);
    if (mode & 8)
        rlf_name_set(&c->cost, "cost", 4);
    CHECK(rlf_key_parse(c, KEYS[(mode >> 1) & 3], &why) == 0);
}

/* The parse, with the contract checked; returns its code. */
static int parse_checked(uint8_t mode, const uint8_t *data, size_t n)
{
    rlf_conf_t c;
    rlf_line_t ln, again;
    char *p = malloc(n ? n : 1);
    int rc;

    CHECK(p != NULL);
    memcpy(p, data, n);
    conf_for(mode, &c);
    rc = rlf_parse_line(&c, p, n, &ln);
    CHECK(rc == 0 || rc == RLF_NOKEY || rc == RL_EINVAL);
    if (n > RLF_LINE_MAX)
        CHECK(rc == RL_EINVAL);
    if (rc == 0) {
        CHECK(ln.key_len > 0);
        CHECK(ln.key >= p && ln.key + ln.key_len <= p + n);
        CHECK(ln.term < c.nkey);
        CHECK(ln.cost <= RLF_COST_MAX);
        CHECK(rlf_parse_line(&c, p, n, &again) == 0);
        CHECK(again.ms == ln.ms && again.cost == ln.cost &&
              again.key == ln.key && again.key_len == ln.key_len);
    }
    free(p);
    return rc;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    parse_checked(data[0], data + 1, size - 1);
    return 0;
}

#ifdef RL_FUZZ_REPLAY
#include "walk.h"

static int run_file(const char *path)
{
    static uint8_t buf[RLF_LINE_MAX + 64];
    const char *base = strrchr(path, '/');
    size_t n;
    int rc;

    if (rlf_read(path, buf, sizeof(buf), &n) != 0)
        return 1;
    if (n > 1 && buf[n - 1] == '\n')
        n--; /* seeds are files of one line */
    LLVMFuzzerTestOneInput(buf, n);
    base = base != NULL ? base + 1 : path;
    rc = n ? parse_checked(buf[0], buf + 1, n - 1) : RL_EINVAL;
    if ((strncmp(base, "ok-", 3) == 0 && rc != 0) ||
        (strncmp(base, "nokey-", 6) == 0 && rc != RLF_NOKEY) ||
        (strncmp(base, "bad-", 4) == 0 && rc != RL_EINVAL)) {
        fprintf(stderr, "fuzz_fitlog: %s: rc=%d\n", path, rc);
        return 1;
    }
    return 0;
}

/* A well-formed line for the mode in buf[0]. */
static size_t well_formed(uint8_t *buf, size_t cap)
{
    static const char *const months[] = {"Jan", "Feb", "Mar", "Apr",
                                         "May", "Jun", "Jul", "Aug",
                                         "Sep", "Oct", "Nov", "Dec"};
    unsigned mode = rlf_rand() % 16, r = rlf_rand();
    int n;

    if (!(mode & 1) && ((mode >> 1) & 3) == 2)
        mode ^= 4; /* combined lines have no user_id or ip: user|addr */
    buf[0] = (uint8_t)mode;
    if (mode & 1)
        n = snprintf(
            (char *)buf + 1, cap - 1,
            "{\"time\":\"20%02u-%02u-%02uT%02u:%02u:%02u.%03uZ\","
            "\"user_id\":\"u%u\",\"user\":\"v\",\"addr\":\"a\","
            "\"ip\":\"10.0.0.%u\",\"cost\":%u,\"n\":{\"a\":[1,\"]\"]}}",
            r % 100, 1 + r % 12, 1 + r % 28, r % 24, r % 60, r % 61, r % 1000,
            r % 1000, r % 256, r % 100);
    else
        n = snprintf((char *)buf + 1, cap - 1,
                     "10.0.%u.%u id u%u [%02u/%s/20%02u:%02u:%02u:%02u "
                     "%c%02u%02u] \"GET /x HTTP/1.1\" 200 %u \"-\" \"ua\"",
                     r % 256, (r >> 8) % 256, r % 7, 1 + r % 28, months[r % 12],
                     r % 100, r % 24, r % 60, r % 60, r % 2 ? '+' : '-', r % 12,
                     r % 60, r % 9999);
    return 1 + (size_t)n;
}

int main(int argc, char **argv)
{
    static const char alphabet[] =
        " \"{}[],:\\-/+.0123456789TZabcdeflnrstu\x7f\x01";
    static uint8_t buf[2048];
    int i, iters = 100000, files = 0, ok = 0;

    for (i = 1; i < argc; i++)
        if (rlf_walk(argv[i], run_file, &files) != 0)
            return 1;
    for (i = 0; i < iters; i++) {
        size_t n = well_formed(buf, sizeof(buf) - 8), edits = rlf_rand() % 4;

        if (edits == 0) {
            CHECK(parse_checked(buf[0], buf + 1, n - 1) == 0);
            ok++;
        }
        n = rlf_mutate(buf, n, sizeof(buf), edits, alphabet, rlf_rand);
        if (rlf_rand() % 4 == 0 && n > 0)
            n = rlf_rand() % n;
        LLVMFuzzerTestOneInput(buf, n);
    }
    printf("fuzz_fitlog replay: %d files, %d lines (%d unmutated parsed), "
           "invariants held\n",
           files, iters, ok);
    return 0;
}
#endif
