/* Reloading the TLS files of our listeners; see tls_reload.h. */
#include "net/tls_reload.h"

#include <string.h>

#include "base/log.h"
#include "rl_error.h"

static void job_begin(void *arg)
{
    (void)arg;
}

/* On the worker: the files into a new SSL_CTX, not yet in force. Its
 * error names the flag and file (never anything of the key). */
static int job_build(void *arg, rls_diag_t *diag)
{
    rls_tls_reload_t *r = arg;
    char err[256];
    int rc = rls_tls_prepare(r->tls, err, sizeof(err));

    if (rc == RL_EINVAL)
        rls_diag_add(diag, "tls", 0, "%s", err);
    return rc;
}

static int job_install(void *arg, uint64_t us)
{
    rls_tls_reload_t *r = arg;
    char desc[256];

    rls_tls_commit(r->tls);
    rls_tls_describe(r->tls, desc, sizeof(desc));
    RLS_INFO("tls certificates reloaded", " %s us=%llu", desc,
             (unsigned long long)us);
    if (r->installed != NULL)
        r->installed(r->arg, r->tls);
    return RL_OK;
}

static void job_end(void *arg)
{
    rls_tls_reload_t *r = arg;

    rls_tls_discard(r->tls);
}

static const rls_reloader_ops_t tls_ops = {
    .begin = job_begin,
    .build = job_build,
    .install = job_install,
    .end = job_end,
};

int rls_tls_reload_start(rls_tls_reload_t *r, uv_loop_t *loop, rls_tls_t *tls,
                         uint64_t settle_ms)
{
    size_t n = 0;
    int i;

    memset(r, 0, sizeof(*r));
    r->tls = tls;
    for (i = 0; i < 3; i++)
        if (rls_tls_file(tls, i) != NULL)
            r->paths[n++] = rls_tls_file(tls, i);
    return rls_reloader_start(&r->rl, loop, "tls certificates", r->paths, n,
                              NULL, settle_ms, &tls_ops, r);
}

int rls_tls_reload_now(rls_tls_reload_t *r)
{
    return rls_reloader_now(&r->rl);
}

void rls_tls_reload_close(rls_tls_reload_t *r)
{
    rls_reloader_close(&r->rl);
}
