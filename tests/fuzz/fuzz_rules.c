/* Fuzz target: the rules file loader (server/policy/rules.c over the YAML
 * walk of yaml_in.c).
 *
 * Any bytes as a file; the first byte's low bit adds a --rule flag (so the
 * merge of flags and file is fuzzed too). Beyond "does not crash or leak":
 *   - the result is RL_OK, RL_EINVAL or RL_ENOMEM; RL_EINVAL comes with at
 *     least one message, each naming the file or --rule;
 *   - on RL_OK every rule is found by its name, its windows are 1 to 8,
 *     sorted, none twice, its mode is one of the three, and every override
 *     is found by its key (and a key one byte longer is not).
 *
 * Built two ways: with libFuzzer (tests/fuzz/run.sh), and with
 * RL_FUZZ_REPLAY as a plain program that runs the corpus (corpus/rules)
 * and every prefix and a byte flip of each file, in every build. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "policy/rules.h"
#include "rl_error.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond)                                                            \
    do {                                                                       \
        if (!(cond)) {                                                         \
            fprintf(stderr, "fuzz_rules: %s:%d: %s\n", __FILE__, __LINE__,     \
                    #cond);                                                    \
            abort();                                                           \
        }                                                                      \
    } while (0)

static void check_limits(const rls_limits_t *ls)
{
    uint32_t i;

    CHECK(ls->n >= 1 && ls->n <= RLS_WINDOWS_MAX);
    for (i = 0; i < ls->n; i++) {
        CHECK(ls->w[i].limit >= 1);
        CHECK(ls->w[i].window_s >= 1);
        if (i > 0)
            CHECK(ls->w[i - 1].window_s < ls->w[i].window_s ||
                  (ls->w[i - 1].window_s == ls->w[i].window_s &&
                   ls->w[i - 1].algo < ls->w[i].algo));
    }
}

static void check_policy(const rls_policy_t *p)
{
    size_t n = rls_policy_count(p), i;
    uint32_t k;
    char longer[RL_KEY_MAX + 2];

    for (i = 0; i < n; i++) {
        const rls_rule_t *r = rls_policy_rule_at(p, i);
        CHECK(rls_policy_find(p, r->name, r->name_len) == r);
        CHECK(r->mode >= 0 && r->mode < RLS_MODE_MAX);
        check_limits(&r->limits);
        for (k = 0; k < r->noverrides; k++) {
            const rls_override_t *o = &r->overrides[k];
            CHECK(rls_rule_limits(r, o->key, o->key_len) == &o->limits);
            check_limits(&o->limits);
            if (o->key_len <= RL_KEY_MAX) {
                memcpy(longer, o->key, o->key_len);
                longer[o->key_len] = '\x01';
                CHECK(rls_rule_limits(r, longer, o->key_len + 1) !=
                      &o->limits);
            }
        }
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const char *const flags[] = {"fuzzflag=3/1s,7/1m"};
    rls_policy_t *p = NULL;
    rls_diag_t d;
    size_t nflags = size > 0 && (data[0] & 1) ? 1 : 0, i;
    int rc;

    rc = rls_policy_build_buf(flags, nflags, "fuzz.yaml", (const char *)data,
                              size, 64, &p, &d);
    CHECK(rc == RL_OK || rc == RL_EINVAL || rc == RL_ENOMEM);
    if (rc == RL_EINVAL) {
        CHECK(p == NULL);
        CHECK(d.n > 0);
        for (i = 0; i < d.n; i++)
            CHECK(strncmp(d.msg[i], "fuzz.yaml:", 10) == 0 ||
                  strncmp(d.msg[i], "--rule:", 7) == 0);
        return 0;
    }
    if (rc != RL_OK)
        return 0;
    CHECK(p != NULL);
    check_policy(p);
    if (nflags)
        CHECK(rls_policy_find(p, "fuzzflag", 8) != NULL);
    rls_policy_unref(p);
    return 0;
}

#ifdef RL_FUZZ_REPLAY
#include "walk.h"

static int run_file(const char *path)
{
    static unsigned char buf[1 << 16];
    size_t n, i;

    if (rlf_read(path, buf, sizeof(buf), &n) != 0)
        return 1;
    LLVMFuzzerTestOneInput(buf, n);
    /* Every prefix (a file cut anywhere, as a half-written file is), and
     * one flipped byte each. */
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
    printf("fuzz_rules: %d files\n", files);
    return files > 0 ? 0 : 1;
}
#endif
