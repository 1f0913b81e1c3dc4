/* Reloading the rules file; see reload.h. */
#include "policy/reload.h"

#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "log.h"
#include "rl_error.h"

/* A save is often a burst of events (write, chmod, rename); the file is
 * read once the burst has been quiet this long. */
#define DEBOUNCE_MS 50

int rls_reload_now(rls_reload_t *r)
{
    rls_policy_t *p = NULL;
    rls_diag_t d;
    uint64_t t0 = uv_hrtime();
    int rc;

    rls_file_signature(r->path ? r->path : "", r->sig);
    rc = rls_policy_build(r->flags, r->nflags, r->path, r->max_rules, &p, &d);
    if (rc == RL_EINVAL) {
        r->stats.failures++;
        RLS_ERROR("rules not reloaded; the old rules stay", " error=\"%s\""
                  " errors=%zu",
                  d.msg[0], d.n + d.dropped);
        return rc;
    }
    if (rc != RL_OK) {
        r->stats.failures++;
        RLS_ERROR("rules not reloaded; the old rules stay",
                  " error=\"out of memory\"");
        return rc;
    }
    if ((rc = rls_runtime_set_policy(r->rt, p)) != RL_OK) {
        r->stats.failures++;
        RLS_ERROR("rules not reloaded; the old rules stay",
                  " error=\"out of memory\"");
        return rc;
    }
    r->stats.reloads++;
    r->stats.last_us = (uv_hrtime() - t0) / 1000;
    RLS_INFO("rules reloaded", " file=%s rules=%zu generation=%llu us=%llu",
             r->path ? r->path : "(flags)", rls_policy_count(p),
             (unsigned long long)r->rt->generation,
             (unsigned long long)r->stats.last_us);
    return RL_OK;
}

static void on_sighup(uv_signal_t *h, int signum)
{
    rls_reload_t *r = h->data;

    (void)signum;
    RLS_INFO("SIGHUP: reloading rules", NULL);
    rls_reload_now(r);
}

static void on_debounce(uv_timer_t *t)
{
    rls_reload_t *r = t->data;
    uint64_t sig[4];

    rls_file_signature(r->path, sig);
    /* Gone (mid-rename) or unchanged: nothing to do. A file that
     * disappears keeps the rules in force. */
    if (sig[0] == 0 || memcmp(sig, r->sig, sizeof(sig)) == 0)
        return;
    rls_reload_now(r);
}

static void on_change(uv_fs_event_t *h, const char *name, int events,
                      int status)
{
    rls_reload_t *r = h->data;

    (void)events;
    if (status < 0) {
        RLS_WARN("watching the rules file failed; SIGHUP still reloads",
                 " err=\"%s\"", uv_strerror(status));
        return;
    }
    if (name != NULL && strcmp(name, r->base) != 0)
        return; /* another file in the directory */
    uv_timer_start(&r->debounce, on_debounce, DEBOUNCE_MS, 0);
}

int rls_reload_start(rls_reload_t *r, uv_loop_t *loop, rls_runtime_t *rt,
                     const char *path, const char *const *flags,
                     size_t nflags, size_t max_rules)
{
    const char *slash;
    size_t dl;
    int rc;

    memset(r, 0, sizeof(*r));
    r->loop = loop;
    r->rt = rt;
    r->path = path;
    r->flags = flags;
    r->nflags = nflags;
    r->max_rules = max_rules;
    uv_signal_init(loop, &r->sighup);
    r->sighup.data = r;
    uv_signal_start(&r->sighup, on_sighup, SIGHUP);
    uv_timer_init(loop, &r->debounce);
    r->debounce.data = r;
    uv_fs_event_init(loop, &r->watch);
    r->watch.data = r;
    if (path == NULL)
        return 0;
    /* What the policy in force read, not what is there now: a change
     * between the first read and the watch below would otherwise never
     * be loaded. The check after the watch starts compares the two. */
    if (rt->policy != NULL)
        rls_policy_file_signature(rt->policy, r->sig);
    else
        rls_file_signature(path, r->sig);
    slash = strrchr(path, '/');
    if (slash == NULL) {
        strcpy(r->dir, ".");
        r->base = path;
    } else {
        dl = slash == path ? 1 : (size_t)(slash - path);
        if (dl >= sizeof(r->dir))
            return UV_ENAMETOOLONG;
        memcpy(r->dir, path, dl);
        r->dir[dl] = '\0';
        r->base = slash + 1;
    }
    rc = uv_fs_event_start(&r->watch, on_change, r->dir, 0);
    if (rc != 0) {
        RLS_WARN("cannot watch the rules file; SIGHUP still reloads",
                 " dir=%s err=\"%s\"", r->dir, uv_strerror(rc));
        return rc;
    }
    r->watching = 1;
    uv_timer_start(&r->debounce, on_debounce, 0, 0);
    return 0;
}

void rls_reload_close(rls_reload_t *r)
{
    if (r->loop == NULL)
        return;
    if (!uv_is_closing((uv_handle_t *)&r->sighup)) {
        uv_close((uv_handle_t *)&r->sighup, NULL);
        uv_close((uv_handle_t *)&r->debounce, NULL);
        uv_close((uv_handle_t *)&r->watch, NULL);
    }
}
