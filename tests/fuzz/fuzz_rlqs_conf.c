/* Fuzz target: the --rlqs-config reader (server/rlqs/conf.c).
 *
 * Any bytes as a file. Beyond "does not crash or leak":
 *   - the result is 0, RL_EINVAL or RL_ENOMEM; RL_EINVAL always says why
 *     (a non-empty message);
 *   - on 0, every rule holds what the reader promises: a name, 1 to
 *     RLS_RLQS_MATCH_MAX keys with non-empty values, a limit >= 1, a unit
 *     of 1, 60, 3600 or 86400 s, a burst in (0, 1], a TTL >= 1, a blanket
 *     fallback; and a bucket id made of a rule's own pairs matches a rule
 *     (that one or one before it).
 *
 * Built two ways: with libFuzzer (tests/fuzz/run.sh), and with
 * RL_FUZZ_REPLAY as a plain program that runs the corpus
 * (corpus/rlqs_conf) and every prefix and a byte flip of each file, in
 * every build. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rl_error.h"
#include "rlqs/conf.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond)                                                            \
    do {                                                                       \
        if (!(cond)) {                                                         \
            fprintf(stderr, "fuzz_rlqs_conf: %s:%d: %s\n", __FILE__, __LINE__, \
                    #cond);                                                    \
            abort();                                                           \
        }                                                                      \
    } while (0)

static void check_rule(const rls_rlqs_conf_t *c, uint32_t i)
{
    const rls_rlqs_rule_t *r = &c->rules[i];
    const char *keys[RLS_RLQS_MATCH_MAX], *vals[RLS_RLQS_MATCH_MAX];
    const rls_rlqs_rule_t *m;
    uint32_t j;

    CHECK(r->name[0] != '\0');
    CHECK(r->nmatch >= 1 && r->nmatch <= RLS_RLQS_MATCH_MAX);
    CHECK(r->limit >= 1);
    CHECK(r->unit_s == 1 || r->unit_s == 60 || r->unit_s == 3600 ||
          r->unit_s == 86400);
    CHECK(r->burst > 0.0 && r->burst <= 1.0);
    CHECK(r->ttl_s >= 1);
    CHECK(r->fallback == RLS_RLQS_ALLOW_ALL ||
          r->fallback == RLS_RLQS_DENY_ALL);
    for (j = 0; j < r->nmatch; j++) {
        CHECK(r->keys[j][0] != '\0' && r->vals[j][0] != '\0');
        keys[j] = r->keys[j];
        vals[j] = r->vals[j];
    }
    m = rls_rlqs_conf_match(c, keys, vals, r->nmatch);
    CHECK(m != NULL && m <= r);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    rls_rlqs_conf_t *c = NULL;
    char err[256] = "";
    uint32_t i;
    int rc =
        rls_rlqs_conf_parse((const char *)data, size, &c, err, sizeof(err));

    CHECK(rc == 0 || rc == RL_EINVAL || rc == RL_ENOMEM);
    if (rc != 0) {
        CHECK(c == NULL);
        CHECK(rc != RL_EINVAL || err[0] != '\0');
        return 0;
    }
    CHECK(c != NULL && c->nrules <= RLS_RLQS_RULES_MAX);
    CHECK(c->unmatched == RLS_RLQS_ALLOW_ALL ||
          c->unmatched == RLS_RLQS_DENY_ALL);
    for (i = 0; i < c->nrules; i++)
        check_rule(c, i);
    rls_rlqs_conf_free(c);
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
    printf("fuzz_rlqs_conf: %d files\n", files);
    return files > 0 ? 0 : 1;
}
#endif
