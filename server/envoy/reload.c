/* Reloading the --envoy-config files; see envoy_reload.h. */
#include "envoy/reload.h"

#include <string.h>

#include "base/log.h"
#include "envoy/dir.h"
#include "rl_error.h"

static void job_begin(void *arg)
{
    ((rls_envoy_reload_t *)arg)->conf = NULL;
}

/* On the worker: read and parse every file. */
static int job_build(void *arg, rls_diag_t *diag)
{
    rls_envoy_reload_t *r = arg;

    return rls_envoy_conf_build_paths(
        r->paths, r->npaths, r->npaths <= RLS_ENVOY_WATCH_MAX ? r->isdir : NULL,
        &r->conf, diag);
}

static int job_install(void *arg, uint64_t us)
{
    rls_envoy_reload_t *r = arg;
    rls_envoy_conf_t *c = r->conf;

    r->conf = NULL; /* installed: the receiver's reference */
    RLS_INFO("envoy config reloaded", " files=%zu domains=%zu us=%llu",
             r->npaths, rls_envoy_conf_domains(c), (unsigned long long)us);
    r->install(r->arg, c);
    return RL_OK;
}

static void job_end(void *arg)
{
    rls_envoy_reload_t *r = arg;

    rls_envoy_conf_unref(r->conf);
    r->conf = NULL;
}

static const rls_reloader_ops_t envoy_ops = {
    .begin = job_begin,
    .build = job_build,
    .install = job_install,
    .end = job_end,
};

int rls_envoy_reload_now(rls_envoy_reload_t *r)
{
    return rls_reloader_now(&r->rl);
}

int rls_envoy_reload_start(rls_envoy_reload_t *r, uv_loop_t *loop,
                           const char *const *paths, size_t npaths,
                           uint64_t settle_ms, rls_envoy_install_fn install,
                           void *arg)
{
    size_t i, used = 0;

    memset(r, 0, sizeof(*r));
    r->paths = paths;
    r->npaths = npaths;
    r->install = install;
    r->arg = arg;
    if (npaths <= RLS_ENVOY_WATCH_MAX)
        rls_envoy_dir_kinds(paths, npaths, r->isdir);
    /* A directory's own events (watch.h watches a path's parent): through
     * "D/.", whose parent is D. Past the room here, a directory is seen
     * through its parent alone (a switch of it, not a change in it). */
    for (i = 0; i < npaths && r->nwatch < RLS_ENVOY_WATCH_MAX; i++) {
        size_t n = strlen(paths[i]);

        r->watch[r->nwatch++] = paths[i];
        if (!r->isdir[i] || r->nwatch == RLS_ENVOY_WATCH_MAX ||
            used + n + 3 > sizeof(r->wbuf))
            continue;
        memcpy(r->wbuf + used, paths[i], n);
        memcpy(r->wbuf + used + n, "/.", 3);
        r->watch[r->nwatch++] = r->wbuf + used;
        used += n + 3;
    }
    /* The files as they are now stand for what the caller built from:
     * the caller read them just before. */
    return rls_reloader_start(&r->rl, loop, "envoy config", r->watch,
                              r->nwatch, NULL, settle_ms, &envoy_ops, r);
}

void rls_envoy_reload_close(rls_envoy_reload_t *r)
{
    rls_reloader_close(&r->rl);
}
