/* Fuzz target: a control plane's DiscoveryResponse, decoded and turned
 * into YAML (server/envoy/xds_conf.c), then built as a configuration
 * (envoy_conf.c), as the --envoy-xds client does with every message.
 *
 * Any bytes as the message. Beyond "does not crash or leak":
 *   - the result is RL_OK, RL_EDECODE, RL_EINVAL or RL_ENOMEM; RL_EINVAL
 *     keeps the version and nonce (to NACK) and says why; RL_EDECODE
 *     leaves nothing;
 *   - on RL_OK every document is named "xds:..." and builds to RL_OK or
 *     RL_EINVAL with every message naming an "xds:" document;
 *   - the input's bytes as one RateLimitConfig too (the Any's value).
 *
 * Built two ways: with libFuzzer (tests/fuzz/run.sh), and with
 * RL_FUZZ_REPLAY as a plain program that runs the corpus
 * (corpus/xds_conf: seeds written by gen_xds_seeds.py) and every prefix
 * and a byte flip of each file, in every build. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "envoy/xds_conf.h"
#include "rl_buf.h"
#include "rl_error.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond)                                                            \
    do {                                                                       \
        if (!(cond)) {                                                         \
            fprintf(stderr, "fuzz_xds_conf: %s:%d: %s\n", __FILE__, __LINE__,  \
                    #cond);                                                    \
            abort();                                                           \
        }                                                                      \
    } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    rls_xds_update_t u;
    rls_envoy_conf_t *c = NULL;
    rls_diag_t d;
    rl_buf_t o;
    char err[256], *name = NULL;
    size_t i;
    int rc;

    rc = rls_xds_update_decode(data, size, &u, err, sizeof(err));
    CHECK(rc == RL_OK || rc == RL_EDECODE || rc == RL_EINVAL ||
          rc == RL_ENOMEM);
    if (rc == RL_EDECODE)
        CHECK(u.version == NULL && u.nonce == NULL && u.n == 0);
    if (rc == RL_EINVAL)
        CHECK(u.version != NULL && u.nonce != NULL && err[0] != 0);
    if (rc == RL_OK) {
        for (i = 0; i < u.n; i++)
            CHECK(strncmp(u.names[i], "xds:", 4) == 0);
        rc = rls_xds_update_build(&u, &c, &d);
        CHECK(rc == RL_OK || rc == RL_EINVAL || rc == RL_ENOMEM);
        if (rc == RL_EINVAL) {
            CHECK(c == NULL && d.n > 0);
            for (i = 0; i < d.n; i++)
                CHECK(strncmp(d.msg[i], "xds:", 4) == 0);
        }
        if (rc == RL_OK)
            CHECK(rls_envoy_conf_domains(c) <= u.n);
        rls_envoy_conf_unref(c);
    }
    rls_xds_update_free(&u);

    rl_buf_init(&o, RLS_RULES_FILE_MAX);
    rc = rls_xds_conf_yaml(data, size, &o, &name);
    CHECK(rc == RL_OK || rc == RL_EDECODE || rc == RL_EFULL || rc == RL_ENOMEM);
    CHECK(rc == RL_OK ? name != NULL : name == NULL);
    if (rc == RL_OK) {
        c = NULL;
        rc = rls_envoy_conf_build_buf("xds:f", (const char *)rl_buf_rptr(&o),
                                      rl_buf_len(&o), &c, &d);
        CHECK(rc == RL_OK || rc == RL_EINVAL || rc == RL_ENOMEM);
        /* Whatever the strings hold, the YAML is one mapping with one
         * domain. */
        if (rc == RL_OK)
            CHECK(rls_envoy_conf_domains(c) == 1);
        rls_envoy_conf_unref(c);
    }
    free(name);
    rl_buf_free(&o);
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
    /* Every prefix (a message cut anywhere), and one flipped byte each. */
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
    printf("fuzz_xds_conf: %d files\n", files);
    return files > 0 ? 0 : 1;
}
#endif
