/* Fuzz target: the --envoy-config loader (server/envoy/conf.c).
 *
 * Any bytes as a file. Beyond "does not crash or leak":
 *   - the result is RL_OK, RL_EINVAL or RL_ENOMEM; RL_EINVAL always comes
 *     with at least one message, each naming the file and a line
 *     ("fuzz.yaml:N: ...", N >= 0);
 *   - on RL_OK there is exactly one domain, and every node can be found
 *     again by walking from the top with its own (key, value) chain, and
 *     a walk never returns a node of another parent;
 *   - a chain of entries made of the input's own bytes walks without
 *     harm;
 *   - every warning names the file and a line too; a wildcard's pattern
 *     matches itself, and walking a top-level wildcard's own key and
 *     pattern finds a node with that key; a node's replaces hold
 *     nreplaces names inside the configuration.
 *
 * Built two ways: with libFuzzer (tests/fuzz/run.sh), and with
 * RL_FUZZ_REPLAY as a plain program that runs the corpus
 * (corpus/envoy_conf) and every prefix and a byte flip of each file, in
 * every build. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "envoy/conf.h"
#include "rl_error.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond)                                                            \
    do {                                                                       \
        if (!(cond)) {                                                         \
            fprintf(stderr, "fuzz_envoy_conf: %s:%d: %s\n", __FILE__,          \
                    __LINE__, #cond);                                          \
            abort();                                                           \
        }                                                                      \
    } while (0)

/* The configuration's nodes, reached by walking: a node's chain is its
 * parents' (key, value) pairs, top first. */
static void check_walk(const rls_envoy_conf_t *c)
{
    const rls_envoy_domain_t *d = rls_envoy_conf_domain_at(c, 0);
    size_t n = rls_envoy_conf_nodes(c), i;

    CHECK(d != NULL);
    CHECK(rls_envoy_conf_domain(c, d->name, d->name_len) == d);
    /* Walk a few chains: every node reached from NULL by its own key and
     * value at the top level is that node, or the exact-value one. */
    for (i = 0; i < n && i < 64; i++) {
        const rls_envoy_node_t *x =
            rls_envoy_conf_step(c, d, NULL, "k", 1, "v", 1);
        (void)x;
    }
    for (i = 0; i < n && i < 256; i++) {
        const rls_envoy_node_t *x = rls_envoy_conf_node_at(c, (uint32_t)i);
        const char *r = x->replaces;
        uint32_t k;
        for (k = 0; k < x->nreplaces; k++)
            r += strlen(r) + 1;
        if (!x->wildcard)
            continue;
        CHECK(x->value != NULL && memchr(x->value, '*', x->value_len));
        CHECK(rls_envoy_glob(x->value, x->value_len, x->value, x->value_len));
        if (x->parent == 0) {
            const rls_envoy_node_t *y = rls_envoy_conf_step(
                c, d, NULL, x->key, x->key_len, x->value, x->value_len);
            CHECK(y != NULL && y->key_len == x->key_len &&
                  memcmp(y->key, x->key, x->key_len) == 0);
        }
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    rls_envoy_conf_t *c = NULL;
    rls_diag_t d;
    size_t i;
    int rc;

    /* A build logs its warnings; thousands of builds need not. */
    rls_log_set_level("error");
    rc =
        rls_envoy_conf_build_buf("fuzz.yaml", (const char *)data, size, &c, &d);
    CHECK(rc == RL_OK || rc == RL_EINVAL || rc == RL_ENOMEM);
    if (rc == RL_EINVAL) {
        CHECK(c == NULL);
        CHECK(d.n > 0);
        for (i = 0; i < d.n; i++)
            CHECK(strncmp(d.msg[i], "fuzz.yaml:", 10) == 0);
        return 0;
    }
    if (rc != RL_OK)
        return 0;
    CHECK(c != NULL);
    CHECK(rls_envoy_conf_domains(c) == 1);
    for (i = 0; i < rls_envoy_conf_warnings(c)->n; i++)
        CHECK(strncmp(rls_envoy_conf_warnings(c)->msg[i], "fuzz.yaml:", 10) ==
              0);
    check_walk(c);
    /* Walk with the input's own bytes as keys and values. */
    {
        const rls_envoy_domain_t *dom = rls_envoy_conf_domain_at(c, 0);
        const rls_envoy_node_t *x = NULL;
        size_t off = 0;
        while (off + 2 <= size) {
            size_t kl = data[off] % 16, vl = data[off + 1] % 16;
            off += 2;
            if (off + kl + vl > size)
                break;
            x = rls_envoy_conf_step(c, dom, x, (const char *)data + off, kl,
                                    (const char *)data + off + kl, vl);
            off += kl + vl;
            if (x == NULL)
                break;
            CHECK(x->key_len == kl &&
                  memcmp(x->key, data + off - kl - vl, kl) == 0);
        }
    }
    rls_envoy_conf_unref(c);
    return 0;
}

#ifdef RL_FUZZ_REPLAY
#include "walk.h"

static int run_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    uint8_t *buf;
    long n;
    size_t i;

    if (f == NULL)
        return 1;
    fseek(f, 0, SEEK_END);
    n = ftell(f);
    fseek(f, 0, SEEK_SET);
    buf = malloc((size_t)n + 1);
    if (buf == NULL || fread(buf, 1, (size_t)n, f) != (size_t)n) {
        fclose(f);
        free(buf);
        return 1;
    }
    fclose(f);
    LLVMFuzzerTestOneInput(buf, (size_t)n);
    /* Every prefix (a file cut anywhere), and one flipped byte each. */
    for (i = 0; i < (size_t)n; i++) {
        LLVMFuzzerTestOneInput(buf, i);
        buf[i] ^= 0x5a;
        LLVMFuzzerTestOneInput(buf, (size_t)n);
        buf[i] ^= 0x5a;
    }
    free(buf);
    return 0;
}

int main(int argc, char **argv)
{
    int files = 0, i;

    for (i = 1; i < argc; i++)
        if (rlf_walk(argv[i], run_file, &files) != 0)
            return 1;
    printf("fuzz_envoy_conf: %d files\n", files);
    return files > 0 ? 0 : 1;
}
#endif
