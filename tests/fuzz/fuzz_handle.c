/* Fuzz target: reservation and lease handles (server/core/handle.c), which
 * come back from clients in SETTLE, RELEASE and RENEW. Beyond "does not
 * crash or leak", it checks the contract:
 *   - rls_handle_decode returns RL_OK or RL_EINVAL with a reason, and
 *     reads nothing outside the input;
 *   - under the secret that signed it, a decoded handle's fields are in
 *     bounds (windows, key and rule lengths) and its strings lie inside
 *     the input; re-encoding it gives the same bytes;
 *   - under another secret, nothing decodes: every input here is either
 *     refused or was signed (the input's first byte picks whether the
 *     rest is signed first, so mutations of signed handles are tried);
 *   - a handle built from the input and encoded decodes to the same
 *     fields.
 *
 * Built two ways (tests/fuzz/CMakeLists.txt, tests/fuzz/run.sh): with
 * clang's libFuzzer, and with RL_FUZZ_REPLAY as a plain program that runs
 * corpus/handle and mutations of well-formed handles in every build. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/handle.h"
#include "rl_error.h"
#include "rl_validate.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond)                                                            \
    do {                                                                       \
        if (!(cond)) {                                                         \
            fprintf(stderr, "fuzz_handle: %s:%d: %s\n", __FILE__, __LINE__,    \
                    #cond);                                                    \
            abort();                                                           \
        }                                                                      \
    } while (0)

static rls_hkey_t key_a, key_b;

static void keys(void)
{
    if (!key_a.set) {
        rls_hkey_from_text(&key_a, "fuzz secret a", 13);
        rls_hkey_from_text(&key_b, "fuzz secret b", 13);
    }
}

/* Decodes p[0..n) under k and checks what a decoded handle promises. */
static int decode_checked(const uint8_t *p, size_t n, const rls_hkey_t *k)
{
    rls_handle_t h;
    const char *why = NULL;
    uint8_t again[RL_HANDLE_MAX];
    size_t m;
    uint32_t i;
    int rc = rls_handle_decode(p, n, k, &h, &why);

    CHECK(rc == RL_OK || rc == RL_EINVAL);
    if (rc != RL_OK) {
        CHECK(why != NULL && why[0] != '\0');
        return rc;
    }
    CHECK(h.kind == RLS_HANDLE_RESERVATION || h.kind == RLS_HANDLE_LEASE);
    CHECK(h.nwin <= RL_ADMIT_WINDOWS_MAX);
    for (i = 0; i < h.nwin; i++)
        CHECK(h.win[i].algo < RL_ALGO_MAX && h.win[i].window_s > 0);
    CHECK(h.key_len >= 1 && h.key_len <= RL_KEY_MAX);
    CHECK(h.rule_len <= RL_RULE_MAX);
    CHECK((const uint8_t *)h.key >= p &&
          (const uint8_t *)h.key + h.key_len <= p + n);
    CHECK((const uint8_t *)h.rule >= p &&
          (const uint8_t *)h.rule + h.rule_len <= p + n);
    m = rls_handle_encode(&h, k, again);
    CHECK(m == n && memcmp(again, p, n) == 0);
    return rc;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint8_t buf[RL_HANDLE_MAX + 64];
    rls_handle_t h;
    size_t n, i;

    keys();
    if (size == 0)
        return 0;
    /* As it came. */
    if (decode_checked(data + 1, size - 1, &key_a) == RL_OK)
        CHECK(decode_checked(data + 1, size - 1, &key_b) == RL_EINVAL);
    /* Fields built from the input, encoded, decoded back. */
    memset(&h, 0, sizeof(h));
    h.kind = data[0] & 1 ? RLS_HANDLE_LEASE : RLS_HANDLE_RESERVATION;
    h.flags = data[0] >> 1 & 1;
    h.ns = data[0] >> 2 & 1 ? 'i' : 0;
    h.nwin = (uint32_t)(data[0] >> 3) % (RL_ADMIT_WINDOWS_MAX + 1);
    for (i = 0; i < h.nwin; i++) {
        h.win[i].algo = (uint8_t)(i % RL_ALGO_MAX);
        h.win[i].window_s = (uint32_t)(1 + i * 7 + size);
        h.win[i].index = (uint64_t)size * 31 + i;
        h.win[i].t_us = i;
    }
    h.id = size;
    h.expires_at_ms = size * 1000;
    h.estimate = (uint32_t)size;
    n = size - 1;
    h.key = (const char *)data + 1;
    h.key_len = n > 200 ? 200 : n;
    h.rule = (const char *)data + 1;
    h.rule_len = n > 64 ? 64 : n;
    if (h.key_len == 0)
        return 0;
    n = rls_handle_encode(&h, &key_a, buf);
    CHECK(n > 0 && n <= RL_HANDLE_MAX && buf[0] == 2);
    CHECK(decode_checked(buf, n, &key_a) == RL_OK);
    CHECK(decode_checked(buf, n, &key_b) == RL_EINVAL);
    /* A version 1 handle (an instance's before the settled set) decodes
     * and says so, for its settlement to look for its marker. */
    {
        rls_handle_t d;
        const char *why;
        h.version = 1;
        n = rls_handle_encode(&h, &key_a, buf);
        CHECK(n > 0 && buf[0] == 1);
        CHECK(rls_handle_decode(buf, n, &key_a, &d, &why) == RL_OK &&
              d.version == 1);
        buf[0] = 3;
        CHECK(rls_handle_decode(buf, n, &key_a, &d, &why) == RL_EINVAL);
        buf[0] = 1;
        h.version = 0;
    }
    /* One byte changed anywhere: refused. */
    buf[size % n] ^= (uint8_t)(1u << (data[0] % 8));
    CHECK(decode_checked(buf, n, &key_a) == RL_EINVAL);
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
    static uint8_t buf[RL_HANDLE_MAX + 64];
    int i, iters = 50000, files = 0;

    keys();
    for (i = 1; i < argc; i++)
        if (rlf_walk(argv[i], run_file, &files) != 0)
            return 1;
    for (i = 0; i < iters; i++) {
        size_t n = 1 + rlf_rand() % (sizeof(buf) - 1), j;
        for (j = 0; j < n; j++)
            buf[j] = (uint8_t)rlf_rand();
        LLVMFuzzerTestOneInput(buf, n);
        /* A signed handle, mutated: never accepted unless unchanged. */
        {
            rls_handle_t h;
            uint8_t out[RL_HANDLE_MAX];
            size_t m, edits = rlf_rand() % 4;

            memset(&h, 0, sizeof(h));
            h.kind = RLS_HANDLE_RESERVATION;
            h.nwin = 1;
            h.win[0].window_s = 60;
            h.key = "user:1";
            h.key_len = 6;
            h.rule = "api";
            h.rule_len = 3;
            h.id = (uint64_t)i;
            m = rls_handle_encode(&h, &key_a, out);
            CHECK(m > 0);
            memcpy(buf, out, m);
            n = rlf_mutate(buf, m, sizeof(buf), edits,
                           "\x01\x7f\x80\xfe"
                           "aR0",
                           rlf_rand);
            if (decode_checked(buf, n, &key_a) == RL_OK)
                CHECK(n == m && memcmp(buf, out, m) == 0);
        }
    }
    printf("fuzz_handle replay: %d files, %d inputs, invariants held\n", files,
           iters);
    return 0;
}
#endif
