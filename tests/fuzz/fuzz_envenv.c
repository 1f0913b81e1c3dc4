/* Fuzz target: envoy-ratelimit's environment as flags (server/envoy_env.c)
 * and the merge with a command line, then rl-server's flag parser over
 * the result.
 *
 * The input: byte 0 picks the command line (its low two bits), the rest
 * is the environment, one NAME=VALUE a line. Beyond "does not crash or
 * leak":
 *   - the result is RL_OK, RL_EINVAL or RL_ENOMEM; RL_EINVAL comes with one
 *     line starting with a variable's name and ':';
 *   - on RL_OK the flags are "--name" (each with the variable it came
 *     from) and values, the warning is a comma-separated list of names,
 *     and the merge keeps argv[0] first, the command line's arguments
 *     last and in order, and ends with NULL.
 *
 * Built two ways: with libFuzzer (tests/fuzz/run.sh), and with
 * RL_FUZZ_REPLAY as a plain program that runs the corpus (corpus/envenv)
 * and every prefix and a byte flip of each file, in every build. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "envoy_env.h"
#include "flags.h"
#include "rl_error.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond)                                                            \
    do {                                                                       \
        if (!(cond)) {                                                         \
            fprintf(stderr, "fuzz_envenv: %s:%d: %s\n", __FILE__, __LINE__,   \
                    #cond);                                                    \
            abort();                                                           \
        }                                                                      \
    } while (0)

#define LINES_MAX 256

static int is_name_char(char c)
{
    return (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

static void check_ok(const rls_envoy_env_t *e, int argc, char **argv)
{
    static rls_flags_t cfg;
    char **out = NULL, err[512];
    const char *p;
    int n = 0, i, rc;
    size_t k;

    CHECK(e->nargs <= RLS_ENV_ARGS_MAX);
    CHECK(e->nargs == 0 || e->is_flag[0]);
    for (k = 0; k < e->nargs; k++) {
        CHECK(e->args[k] != NULL && e->from[k] != NULL);
        if (e->is_flag[k])
            CHECK(strncmp(e->args[k], "--", 2) == 0);
    }
    for (p = e->warn; *p != '\0'; p++)
        CHECK(is_name_char(*p) || (*p == ',' && p > e->warn && p[1] != '\0'));
    rc = rls_envoy_env_merge(e, argc, argv, &n, &out);
    if (rc == RL_ENOMEM)
        return;
    CHECK(rc == RL_OK);
    CHECK(n >= argc && (size_t)n <= e->nargs + (size_t)argc);
    CHECK(out[0] == argv[0] && out[n] == NULL);
    for (i = 1; i < argc; i++)
        CHECK(out[n - argc + i] == argv[i]);
    rls_flags_defaults(&cfg);
    rc = rls_flags_parse(&cfg, n, out, stdout, err, sizeof(err));
    CHECK(rc == 0 || rc == RL_EINVAL);
    free(out);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static char *argv_sets[4][6] = {
        {"ratelimit", NULL},
        {"rl-server", "--envoy-env", "--grpc", "127.0.0.1:0", NULL},
        {"ratelimit", "--redis-cluster=127.0.0.1:7000", "--log-level", "error",
         NULL},
        {"ratelimit", "--envoy-config", "/nonexistent", "--envoy-env", NULL},
    };
    static const int argcs[4] = {1, 4, 4, 4};
    char *lines[LINES_MAX + 1];
    rls_envoy_env_t e;
    size_t i = 1, n = 0;
    int rc, set;

    if (size == 0)
        return 0;
    set = data[0] & 3;
    while (i < size && n < LINES_MAX) {
        const uint8_t *nl = memchr(data + i, '\n', size - i);
        size_t len = nl != NULL ? (size_t)(nl - (data + i)) : size - i;

        if ((lines[n] = malloc(len + 1)) == NULL)
            break;
        memcpy(lines[n], data + i, len);
        lines[n][len] = '\0';
        n++;
        i += len + 1;
    }
    lines[n] = NULL;
    rc = rls_envoy_env_translate(&e, (const char *const *)lines);
    CHECK(rc == RL_OK || rc == RL_EINVAL || rc == RL_ENOMEM);
    (void)rls_envoy_env_present((const char *const *)lines);
    if (rc == RL_EINVAL) {
        const char *p = e.err;
        CHECK(is_name_char(*p));
        while (is_name_char(*p))
            p++;
        CHECK(*p == ':');
        CHECK(strchr(e.err, '\n') == NULL);
    } else if (rc == RL_OK) {
        check_ok(&e, argcs[set], argv_sets[set]);
    }
    rls_envoy_env_free(&e);
    for (i = 0; i < n; i++)
        free(lines[i]);
    return 0;
}

#ifdef RL_FUZZ_REPLAY
#include "walk.h"

static int run_file(const char *path)
{
    static unsigned char buf[1 << 14];
    size_t n, i;

    if (rlf_read(path, buf, sizeof(buf), &n) != 0)
        return 1;
    LLVMFuzzerTestOneInput(buf, n);
    for (i = 0; i < n; i++) {
        LLVMFuzzerTestOneInput(buf, i);
        buf[i] ^= 0x5a;
        LLVMFuzzerTestOneInput(buf, n);
        buf[i] ^= 0x5a;
    }
    return 0;
}

int main(int argc, char **argv)
{
    int files = 0, i;

    for (i = 1; i < argc; i++)
        if (rlf_walk(argv[i], run_file, &files) != 0)
            return 1;
    printf("fuzz_envenv: %d files\n", files);
    return files > 0 ? 0 : 1;
}
#endif
