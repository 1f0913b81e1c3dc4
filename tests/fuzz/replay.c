/* Runs a fuzz target without libFuzzer, so every build exercises it (under
 * ASan/UBSan in CI): given files, it runs each once; without, it runs a
 * fixed number of deterministic mutations of well-formed frame streams.
 * Real coverage-guided fuzzing: tests/fuzz/run.sh (clang, libFuzzer). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rl_buf.h"
#include "rl_msg.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static unsigned seed = 20261122;

static unsigned rnd(void)
{
    seed = seed * 1103515245u + 12345u;
    return seed >> 8;
}

/* A stream of a few valid request and response frames. */
static void well_formed(rl_buf_t *b)
{
    static const char *keys[] = {"user:1", "", "a\0b", "{x}:y", "\xc3\xa9"};
    int n = 1 + (int)(rnd() % 4), i;

    for (i = 0; i < n; i++) {
        if (rnd() % 2) {
            rl_check_t c = {0};
            c.id = rnd();
            c.key = keys[rnd() % 5];
            c.key_len = c.key[0] == 'a' ? 3 : strlen(c.key);
            c.cost = rnd() % 3;
            c.limit = rnd() % 2 ? rnd() : 0;
            c.window_s = rnd() % 2 ? rnd() % 100000 : 0;
            if (rnd() % 3 == 0) {
                c.rule = "api";
                c.rule_len = 3;
            }
            rl_check_put(b, &c);
        } else {
            rl_result_t r = {0};
            r.id = rnd();
            r.code = (int32_t)(rnd() % 5) - 1;
            r.used = rnd();
            r.error = "why";
            r.error_len = rnd() % 4;
            rl_result_put(b, &r);
        }
    }
}

int main(int argc, char **argv)
{
    int i, iters = 200000;

    if (argc > 1) {
        for (i = 1; i < argc; i++) {
            FILE *f = fopen(argv[i], "rb");
            static uint8_t buf[1 << 20];
            size_t n;
            if (f == NULL) {
                perror(argv[i]);
                return 1;
            }
            n = fread(buf, 1, sizeof(buf), f);
            fclose(f);
            LLVMFuzzerTestOneInput(buf, n);
        }
        return 0;
    }
    for (i = 0; i < iters; i++) {
        rl_buf_t b;
        size_t k, flips;
        rl_buf_init(&b, 1 << 20);
        well_formed(&b);
        uint8_t *p = rl_buf_rptr(&b);
        size_t n = rl_buf_len(&b);
        flips = rnd() % 4;
        for (k = 0; k < flips && n > 0; k++)
            p[rnd() % n] ^= (uint8_t)(1u << (rnd() % 8));
        if (rnd() % 4 == 0 && n > 0)
            n = rnd() % n; /* truncated */
        LLVMFuzzerTestOneInput(p, n);
        rl_buf_free(&b);
    }
    printf("fuzz_request replay: %d mutated streams, no crash, round trips "
           "held\n",
           iters);
    return 0;
}
