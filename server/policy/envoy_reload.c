/* Reloading the --envoy-config files; see envoy_reload.h. */
#include "policy/envoy_reload.h"

#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "rl_error.h"

#define DEBOUNCE_MS 50

struct rls_envoy_watch_s {
    uv_fs_event_t ev;
    rls_envoy_reload_t *r;
    const char *base; /* the file's name in its directory */
    char dir[4096];
    int started;
};

int rls_envoy_reload_now(rls_envoy_reload_t *r)
{
    rls_envoy_conf_t *c = NULL;
    rls_diag_t d;
    uint64_t t0 = uv_hrtime();
    size_t i;
    int rc;

    for (i = 0; i < r->npaths; i++)
        rls_file_signature(r->paths[i], r->sigs[i]);
    rc = rls_envoy_conf_build(r->paths, r->npaths, &c, &d);
    if (rc != RL_OK) {
        r->stats.failures++;
        RLS_ERROR("envoy config not reloaded; the old one stays",
                  " error=\"%s\" errors=%zu",
                  rc == RL_EINVAL ? d.msg[0] : "out of memory",
                  d.n + d.dropped);
        return rc;
    }
    r->install(r->arg, c);
    r->stats.reloads++;
    r->stats.last_us = (uv_hrtime() - t0) / 1000;
    RLS_INFO("envoy config reloaded", " files=%zu domains=%zu us=%llu",
             r->npaths, rls_envoy_conf_domains(c),
             (unsigned long long)r->stats.last_us);
    return RL_OK;
}

static void on_sighup(uv_signal_t *h, int signum)
{
    (void)signum;
    rls_envoy_reload_now(h->data);
}

static void on_debounce(uv_timer_t *t)
{
    rls_envoy_reload_t *r = t->data;
    uint64_t sig[4];
    size_t i;
    int changed = 0;

    for (i = 0; i < r->npaths; i++) {
        rls_file_signature(r->paths[i], sig);
        /* A file gone (mid-rename) keeps the configuration in force. */
        if (sig[0] == 0)
            return;
        changed |= memcmp(sig, r->sigs[i], sizeof(sig)) != 0;
    }
    if (changed)
        rls_envoy_reload_now(r);
}

static void on_change(uv_fs_event_t *h, const char *name, int events,
                      int status)
{
    rls_envoy_watch_t *w = h->data;

    (void)events;
    if (status < 0 || (name != NULL && strcmp(name, w->base) != 0))
        return;
    uv_timer_start(&w->r->debounce, on_debounce, DEBOUNCE_MS, 0);
}

int rls_envoy_reload_start(rls_envoy_reload_t *r, uv_loop_t *loop,
                           const char *const *paths, size_t npaths,
                           rls_envoy_install_fn install, void *arg)
{
    size_t i;

    memset(r, 0, sizeof(*r));
    r->loop = loop;
    r->paths = paths;
    r->npaths = npaths;
    r->install = install;
    r->arg = arg;
    uv_signal_init(loop, &r->sighup);
    r->sighup.data = r;
    uv_signal_start(&r->sighup, on_sighup, SIGHUP);
    uv_timer_init(loop, &r->debounce);
    r->debounce.data = r;
    r->started = 1;
    r->watches = calloc(npaths ? npaths : 1, sizeof(*r->watches));
    r->sigs = calloc(npaths ? npaths : 1, sizeof(*r->sigs));
    if (r->watches == NULL || r->sigs == NULL)
        return RL_ENOMEM;
    for (i = 0; i < npaths; i++) {
        rls_envoy_watch_t *w = &r->watches[i];
        const char *slash = strrchr(paths[i], '/');
        size_t dl;

        rls_file_signature(paths[i], r->sigs[i]);
        w->r = r;
        if (slash == NULL) {
            strcpy(w->dir, ".");
            w->base = paths[i];
        } else {
            dl = slash == paths[i] ? 1 : (size_t)(slash - paths[i]);
            if (dl >= sizeof(w->dir))
                continue;
            memcpy(w->dir, paths[i], dl);
            w->dir[dl] = '\0';
            w->base = slash + 1;
        }
        uv_fs_event_init(loop, &w->ev);
        w->ev.data = w;
        w->started = 1;
        if (uv_fs_event_start(&w->ev, on_change, w->dir, 0) != 0)
            RLS_WARN("cannot watch an envoy config file; SIGHUP still "
                     "reloads",
                     " file=%s", paths[i]);
    }
    return RL_OK;
}

/* The watches go with the last close callback. */
static void on_watch_closed(uv_handle_t *h)
{
    rls_envoy_watch_t *w = h->data;
    rls_envoy_reload_t *r = w->r;
    size_t i;

    w->started = 0;
    for (i = 0; i < r->npaths; i++)
        if (r->watches[i].started)
            return;
    free(r->watches);
    r->watches = NULL;
    free(r->sigs);
    r->sigs = NULL;
}

void rls_envoy_reload_close(rls_envoy_reload_t *r)
{
    size_t i;
    int any = 0;

    if (!r->started)
        return;
    r->started = 0;
    uv_close((uv_handle_t *)&r->sighup, NULL);
    uv_close((uv_handle_t *)&r->debounce, NULL);
    for (i = 0; r->watches != NULL && i < r->npaths; i++)
        if (r->watches[i].started) {
            uv_close((uv_handle_t *)&r->watches[i].ev, on_watch_closed);
            any = 1;
        }
    if (!any) {
        free(r->watches);
        r->watches = NULL;
        free(r->sigs);
        r->sigs = NULL;
    }
}
