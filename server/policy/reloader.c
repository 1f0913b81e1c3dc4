/* Reloading a policy from its files; see reloader.h. */
#include "policy/reloader.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "policy/conf_dir.h"
#include "policy/file_in.h"
#include "rl_error.h"

static void job_start(rls_rebuild_t *rb)
{
    rls_reloader_t *r = rb->arg;

    /* For the watch, the files must still be the versions that settled;
     * SIGHUP reads whatever is there. */
    r->expect = r->npaths > 0 && !r->hup && r->watch.seen != NULL;
    if (r->expect)
        memcpy(r->sigs, r->watch.seen, r->npaths * sizeof(*r->sigs));
    r->hup = 0;
    r->rc = RL_OK;
    r->t0 = uv_hrtime();
    r->ops->begin(r->arg);
}

static void job_work(rls_rebuild_t *rb)
{
    rls_reloader_t *r = rb->arg;
    size_t i;

    memset(&r->diag, 0, sizeof(r->diag));
    r->rc = r->ops->build(r->arg, &r->diag);
    for (i = 0; i < r->npaths; i++)
        rls_path_signature(r->paths[i], r->after[i]);
}

/* The signatures go once no rebuild can use them: after the watch's
 * handles closed and the rebuild under way (if any) was discarded. */
static void maybe_free(rls_reloader_t *r)
{
    if (r->started || r->rebuild.running || r->watch.open > 0)
        return;
    free(r->sigs);
    free(r->after);
    r->sigs = r->after = NULL;
}

static void refused(rls_reloader_t *r, const char *error, size_t errors)
{
    char msg[64];

    r->stats.failures++;
    snprintf(msg, sizeof(msg), "%s not reloaded; what is in force stays",
             r->what);
    RLS_ERROR(msg, " error=\"%s\" errors=%zu", error, errors);
}

static void job_done(rls_rebuild_t *rb, int closing)
{
    rls_reloader_t *r = rb->arg;

    if (closing)
        goto out;
    if (r->expect &&
        memcmp(r->after, r->sigs, r->npaths * sizeof(*r->sigs)) != 0) {
        /* Changed again since it settled (or gone): what was read may be
         * part of a write; the watch reads it once it settles again. */
        RLS_DEBUG("a policy file changed while it was read; waiting for "
                  "it to settle",
                  " of=\"%s\"", r->what);
        goto out;
    }
    if (r->npaths > 0)
        rls_watch_seen(&r->watch, (const uint64_t(*)[4])r->after);
    if (r->rc != RL_OK) {
        if (r->rc == RL_EINVAL)
            refused(r, r->diag.msg[0], r->diag.n + r->diag.dropped);
        else
            refused(r, "out of memory", 1);
        goto out;
    }
    if (r->ops->install(r->arg, (uv_hrtime() - r->t0) / 1000) != RL_OK) {
        refused(r, "out of memory", 1);
        goto out;
    }
    r->stats.reloads++;
    r->stats.last_us = (uv_hrtime() - r->t0) / 1000;
out:
    r->ops->end(r->arg);
    if (closing)
        maybe_free(r);
}

int rls_reloader_now(rls_reloader_t *r)
{
    r->hup = 1;
    return rls_rebuild_request(&r->rebuild);
}

static void on_sighup(uv_signal_t *h, int signum)
{
    rls_reloader_t *r = h->data;
    char msg[64];

    (void)signum;
    snprintf(msg, sizeof(msg), "SIGHUP: reloading %s", r->what);
    RLS_INFO(msg, NULL);
    rls_reloader_now(r);
}

static void on_change(void *arg, const uint64_t (*sigs)[4])
{
    rls_reloader_t *r = arg;

    (void)sigs; /* the rebuild takes them from the watch when it starts */
    rls_rebuild_request(&r->rebuild);
}

int rls_reloader_start(rls_reloader_t *r, uv_loop_t *loop, const char *what,
                       const char *const *paths, size_t npaths,
                       const uint64_t (*sigs)[4], uint64_t settle_ms,
                       const rls_reloader_ops_t *ops, void *arg)
{
    size_t i, k = npaths ? npaths : 1;
    int rc;

    memset(r, 0, sizeof(*r));
    r->loop = loop;
    r->what = what;
    r->paths = paths;
    r->npaths = npaths;
    r->ops = ops;
    r->arg = arg;
    r->sigs = calloc(k, sizeof(*r->sigs));
    r->after = calloc(k, sizeof(*r->after));
    if (r->sigs == NULL || r->after == NULL) {
        free(r->sigs);
        free(r->after);
        r->sigs = r->after = NULL;
        RLS_ERROR("no memory to reload policy files; a change needs a "
                  "restart",
                  " of=\"%s\"", what);
        return RL_ENOMEM;
    }
    uv_signal_init(loop, &r->sighup);
    r->sighup.data = r;
    uv_signal_start(&r->sighup, on_sighup, SIGHUP);
    rls_rebuild_init(&r->rebuild, loop, job_start, job_work, job_done, r);
    r->started = 1;
    if (npaths == 0)
        return 0;
    /* What is in force was built from these versions, not from what is
     * there now: a change between the caller's read and the watch would
     * otherwise never be loaded. The watch compares the two at once. */
    for (i = 0; i < npaths; i++) {
        if (sigs != NULL)
            memcpy(r->sigs[i], sigs[i], sizeof(r->sigs[i]));
        else
            rls_path_signature(paths[i], r->sigs[i]);
    }
    rc =
        rls_watch_start(&r->watch, loop, paths, npaths,
                        (const uint64_t(*)[4])r->sigs, settle_ms, on_change, r);
    if (rc != RL_OK)
        RLS_WARN("cannot watch a policy file; SIGHUP still reloads",
                 " of=\"%s\" err=\"%s\"", what, rl_strerror(rc));
    return rc;
}

static void watch_closed(void *arg)
{
    maybe_free(arg);
}

void rls_reloader_close(rls_reloader_t *r)
{
    if (!r->started)
        return;
    r->started = 0;
    uv_close((uv_handle_t *)&r->sighup, NULL);
    rls_rebuild_close(&r->rebuild);
    rls_watch_close(&r->watch, watch_closed, r);
    maybe_free(r);
}
