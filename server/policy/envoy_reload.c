/* Reloading the --envoy-config files; see envoy_reload.h. */
#include "policy/envoy_reload.h"

#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "rl_error.h"

static void job_start(rls_rebuild_t *rb)
{
    rls_envoy_reload_t *r = rb->arg;
    struct rls_envoy_job_s *j = &r->job;

    j->expect = !r->hup && r->watch.seen != NULL;
    if (j->expect)
        memcpy(j->sigs, r->watch.seen, r->npaths * sizeof(*j->sigs));
    r->hup = 0;
    j->conf = NULL;
    j->rc = RL_OK;
    j->t0 = uv_hrtime();
}

static void job_work(rls_rebuild_t *rb)
{
    rls_envoy_reload_t *r = rb->arg;
    struct rls_envoy_job_s *j = &r->job;
    size_t i;

    j->rc = rls_envoy_conf_build(r->paths, r->npaths, &j->conf, &j->diag);
    for (i = 0; i < r->npaths; i++)
        rls_file_signature(r->paths[i], j->after[i]);
}

/* The job's arrays go once no rebuild can use them: after the watch's
 * handles closed and the rebuild under way (if any) was discarded. */
static void maybe_free(rls_envoy_reload_t *r)
{
    if (r->started || r->rebuild.running || r->watch.open > 0)
        return;
    free(r->job.sigs);
    free(r->job.after);
    r->job.sigs = r->job.after = NULL;
}

static void job_done(rls_rebuild_t *rb, int closing)
{
    rls_envoy_reload_t *r = rb->arg;
    struct rls_envoy_job_s *j = &r->job;
    rls_envoy_conf_t *c = j->conf;

    j->conf = NULL;
    if (closing) {
        rls_envoy_conf_unref(c);
        maybe_free(r);
        return;
    }
    if (j->expect &&
        memcmp(j->after, j->sigs, r->npaths * sizeof(*j->sigs)) != 0) {
        RLS_DEBUG("envoy config changed while it was read; waiting for it "
                  "to settle",
                  NULL);
        goto out;
    }
    rls_watch_seen(&r->watch, (const uint64_t(*)[4])j->after);
    if (j->rc != RL_OK) {
        r->stats.failures++;
        RLS_ERROR("envoy config not reloaded; the old one stays",
                  " error=\"%s\" errors=%zu",
                  j->rc == RL_EINVAL ? j->diag.msg[0] : "out of memory",
                  j->rc == RL_EINVAL ? j->diag.n + j->diag.dropped : 1);
        goto out;
    }
    r->install(r->arg, c);
    r->stats.reloads++;
    r->stats.last_us = (uv_hrtime() - j->t0) / 1000;
    RLS_INFO("envoy config reloaded", " files=%zu domains=%zu us=%llu",
             r->npaths, rls_envoy_conf_domains(c),
             (unsigned long long)r->stats.last_us);
    c = NULL; /* installed: the receiver's reference */
out:
    rls_envoy_conf_unref(c);
}

int rls_envoy_reload_now(rls_envoy_reload_t *r)
{
    r->hup = 1;
    return rls_rebuild_request(&r->rebuild);
}

static void on_sighup(uv_signal_t *h, int signum)
{
    (void)signum;
    rls_envoy_reload_now(h->data);
}

static void on_change(void *arg, const uint64_t (*sigs)[4])
{
    rls_envoy_reload_t *r = arg;

    (void)sigs;
    rls_rebuild_request(&r->rebuild);
}

int rls_envoy_reload_start(rls_envoy_reload_t *r, uv_loop_t *loop,
                           const char *const *paths, size_t npaths,
                           uint64_t settle_ms, rls_envoy_install_fn install,
                           void *arg)
{
    size_t i, k = npaths ? npaths : 1;
    int rc;

    memset(r, 0, sizeof(*r));
    r->loop = loop;
    r->paths = paths;
    r->npaths = npaths;
    r->install = install;
    r->arg = arg;
    r->job.sigs = calloc(k, sizeof(*r->job.sigs));
    r->job.after = calloc(k, sizeof(*r->job.after));
    if (r->job.sigs == NULL || r->job.after == NULL) {
        free(r->job.sigs);
        free(r->job.after);
        r->job.sigs = r->job.after = NULL;
        return RL_ENOMEM;
    }
    uv_signal_init(loop, &r->sighup);
    r->sighup.data = r;
    uv_signal_start(&r->sighup, on_sighup, SIGHUP);
    rls_rebuild_init(&r->rebuild, loop, job_start, job_work, job_done, r);
    r->started = 1;
    /* The files as they are now stand for what the caller built from:
     * the caller read them just before. */
    for (i = 0; i < npaths; i++)
        rls_file_signature(paths[i], r->job.sigs[i]);
    rc = rls_watch_start(&r->watch, loop, paths, npaths,
                         (const uint64_t(*)[4])r->job.sigs, settle_ms,
                         on_change, r);
    if (rc != RL_OK)
        RLS_WARN("cannot watch the envoy config files; SIGHUP still reloads",
                 " err=\"%s\"", rl_strerror(rc));
    return rc;
}

static void watch_closed(void *arg)
{
    maybe_free(arg);
}

void rls_envoy_reload_close(rls_envoy_reload_t *r)
{
    if (!r->started)
        return;
    r->started = 0;
    uv_close((uv_handle_t *)&r->sighup, NULL);
    rls_rebuild_close(&r->rebuild);
    rls_watch_close(&r->watch, watch_closed, r);
    maybe_free(r);
}
