/* Watching policy files for changes; see watch.h. */
#include "policy/watch.h"

#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "policy/conf_dir.h"
#include "policy/file_in.h"
#include "rl_error.h"

/* Frees what the handles needed, once the last one is closed. */
static void one_closed(rls_watch_t *w)
{
    size_t i;

    if (--w->open > 0)
        return;
    for (i = 0; i < w->n; i++)
        free(w->dirs[i].dir);
    free(w->dirs);
    free(w->seen);
    free(w->cand);
    w->dirs = NULL;
    w->seen = w->cand = NULL;
    if (w->on_closed != NULL)
        w->on_closed(w->closed_arg);
}

static void timer_closed(uv_handle_t *h)
{
    one_closed(h->data);
}

static void dir_closed(uv_handle_t *h)
{
    one_closed(((rls_watch_dir_t *)h->data)->w);
}

/* The files as they are now, into sigs. Returns 0 when one of them is
 * missing (mid-rename), else 1. */
static int look(const rls_watch_t *w, uint64_t (*sigs)[4])
{
    size_t i;

    for (i = 0; i < w->n; i++) {
        rls_path_signature(w->paths[i], sigs[i]);
        if (sigs[i][0] == 0)
            return 0;
    }
    return 1;
}

static void on_timer(uv_timer_t *t)
{
    rls_watch_t *w = t->data;
    uint64_t (*now_sigs)[4] = w->cand + w->n; /* scratch, after cand */
    uint64_t now = uv_now(w->loop), quiet;
    size_t bytes = w->n * sizeof(*w->seen);

    if (!look(w, now_sigs) || memcmp(now_sigs, w->seen, bytes) == 0) {
        w->settling = 0;
        return;
    }
    if (!w->settling || memcmp(now_sigs, w->cand, bytes) != 0) {
        /* Changed again (or first seen): it settles from now. */
        memcpy(w->cand, now_sigs, bytes);
        w->cand_since = now;
        w->settling = 1;
        uv_timer_start(&w->timer, on_timer, w->settle_ms, 0);
        return;
    }
    quiet = now - w->cand_since;
    if (quiet < w->settle_ms) {
        uv_timer_start(&w->timer, on_timer, w->settle_ms - quiet, 0);
        return;
    }
    w->settling = 0;
    memcpy(w->seen, w->cand, bytes);
    w->on_change(w->arg, (const uint64_t(*)[4])w->seen);
}

static void on_event(uv_fs_event_t *h, const char *name, int events,
                     int status)
{
    rls_watch_dir_t *d = h->data;
    rls_watch_t *w = d->w;

    /* Any name: a rename over the file, a ConfigMap's ..data switched, or
     * another file of the directory (the signatures tell them apart). */
    (void)name;
    (void)events;
    if (w->closed)
        return;
    if (status < 0) {
        RLS_WARN("watching a policy file's directory failed; SIGHUP still "
                 "reloads",
                 " file=%s err=\"%s\"", w->paths[d->i], uv_strerror(status));
        return;
    }
    uv_timer_start(&w->timer, on_timer, RLS_WATCH_DEBOUNCE_MS, 0);
}

/* The directory part of path, malloc'd; NULL when out of memory. */
static char *dir_of(const char *path)
{
    const char *slash = strrchr(path, '/');
    size_t len;
    char *d;

    if (slash == NULL)
        return strdup(".");
    len = slash == path ? 1 : (size_t)(slash - path);
    if ((d = malloc(len + 1)) == NULL)
        return NULL;
    memcpy(d, path, len);
    d[len] = '\0';
    return d;
}

int rls_watch_start(rls_watch_t *w, uv_loop_t *loop,
                    const char *const *paths, size_t n,
                    const uint64_t (*seen)[4], uint64_t settle_ms,
                    rls_watch_fn on_change, void *arg)
{
    size_t i, k = n ? n : 1;
    int rc;

    memset(w, 0, sizeof(*w));
    w->loop = loop;
    w->paths = paths;
    w->n = n;
    w->settle_ms = settle_ms;
    w->on_change = on_change;
    w->arg = arg;
    w->dirs = calloc(k, sizeof(*w->dirs));
    w->seen = calloc(k, sizeof(*w->seen));
    w->cand = calloc(2 * k, sizeof(*w->cand)); /* and the scratch */
    for (i = 0; w->dirs != NULL && i < n; i++)
        if ((w->dirs[i].dir = dir_of(paths[i])) == NULL)
            break;
    if (w->dirs == NULL || w->seen == NULL || w->cand == NULL || i < n) {
        for (i = 0; w->dirs != NULL && i < n; i++)
            free(w->dirs[i].dir);
        free(w->dirs);
        free(w->seen);
        free(w->cand);
        memset(w, 0, sizeof(*w));
        w->closed = 1;
        return RL_ENOMEM;
    }
    if (seen != NULL)
        memcpy(w->seen, seen, n * sizeof(*w->seen));
    uv_timer_init(loop, &w->timer);
    w->timer.data = w;
    w->open = 1;
    for (i = 0; i < n; i++) {
        rls_watch_dir_t *d = &w->dirs[i];

        d->w = w;
        d->i = i;
        uv_fs_event_init(loop, &d->ev);
        d->ev.data = d;
        d->started = 1;
        w->open++;
        if ((rc = uv_fs_event_start(&d->ev, on_event, d->dir, 0)) != 0)
            RLS_WARN("cannot watch a policy file's directory; SIGHUP still "
                     "reloads",
                     " file=%s dir=%s err=\"%s\"", paths[i], d->dir,
                     uv_strerror(rc));
    }
    /* Once now: what changed while the server was starting. */
    uv_timer_start(&w->timer, on_timer, 0, 0);
    return RL_OK;
}

void rls_watch_seen(rls_watch_t *w, const uint64_t (*sigs)[4])
{
    if (w->seen != NULL)
        memcpy(w->seen, sigs, w->n * sizeof(*w->seen));
}

void rls_watch_close(rls_watch_t *w, void (*on_closed)(void *arg),
                     void *arg)
{
    size_t i;

    if (w->closed || w->open == 0)
        return;
    w->closed = 1;
    w->on_closed = on_closed;
    w->closed_arg = arg;
    uv_close((uv_handle_t *)&w->timer, timer_closed);
    for (i = 0; i < w->n; i++)
        if (w->dirs[i].started)
            uv_close((uv_handle_t *)&w->dirs[i].ev, dir_closed);
}
