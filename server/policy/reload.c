/* Reloading the rules file; see reload.h. */
#include "policy/reload.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "rl_error.h"

/* On the loop: what the rebuild reads and compares against. */
static void job_start(rls_rebuild_t *rb)
{
    rls_reload_t *r = rb->arg;
    struct rls_reload_job_s *j = &r->job;

    /* For the watch, the file must still be the version that settled;
     * SIGHUP reads whatever is there. */
    j->expect = r->path != NULL && !r->hup && r->watch.seen != NULL;
    if (j->expect)
        memcpy(j->sig, r->watch.seen[0], sizeof(j->sig));
    r->hup = 0;
    memset(j->after, 0, sizeof(j->after));
    j->old = rls_policy_ref(r->rt->policy);
    j->p = NULL;
    j->rc = RL_OK;
    j->nmissing = 0;
    j->missing[0] = '\0';
    j->t0 = uv_hrtime();
}

/* On the worker: the rules of the policy in force that p lacks, the first
 * few named. Both policies are immutable; the loop holds both alive. */
static void find_missing(struct rls_reload_job_s *j)
{
    size_t i, n = rls_policy_count(j->old), used = 0;

    for (i = 0; i < n; i++) {
        const rls_rule_t *x = rls_policy_rule_at(j->old, i);
        if (rls_policy_find(j->p, x->name, x->name_len) != NULL)
            continue;
        if (++j->nmissing <= RLS_RELOAD_MISSING_NAMED) {
            int k = snprintf(j->missing + used, sizeof(j->missing) - used,
                             "%s%s", used ? "," : "", x->name);
            if (k > 0 && (size_t)k < sizeof(j->missing) - used)
                used += (size_t)k;
        }
    }
    if (j->nmissing > RLS_RELOAD_MISSING_NAMED && used + 4 < sizeof(j->missing))
        memcpy(j->missing + used, ",...", 5);
}

/* On the worker: read, parse, validate. Touches nothing of the loop's. */
static void job_work(rls_rebuild_t *rb)
{
    rls_reload_t *r = rb->arg;
    struct rls_reload_job_s *j = &r->job;

    j->rc = rls_policy_build(r->flags, r->nflags, r->path, r->max_rules,
                             &j->p, &j->diag);
    if (r->path != NULL)
        rls_file_signature(r->path, j->after);
    if (j->rc == RL_OK)
        find_missing(j);
}

/* An old policy freed off the loop: a big one is tens of MB to unmap. */
typedef struct drop_s {
    uv_work_t req;
    rls_policy_t *p;
} drop_t;

static void drop_work(uv_work_t *req)
{
    rls_policy_unref(((drop_t *)req->data)->p);
}

static void drop_done(uv_work_t *req, int status)
{
    (void)status;
    free(req->data);
}

/* Drops the loop's reference to p; the last one frees it on a worker
 * thread (or here, if that cannot be arranged). */
static void drop_policy(uv_loop_t *loop, rls_policy_t *p)
{
    drop_t *d;

    if ((p = rls_policy_release(p)) == NULL)
        return;
    if ((d = malloc(sizeof(*d))) == NULL) {
        rls_policy_unref(p);
        return;
    }
    d->p = p;
    d->req.data = d;
    if (uv_queue_work(loop, &d->req, drop_work, drop_done) != 0) {
        rls_policy_unref(p);
        free(d);
    }
}

/* On the loop: swap the new policy in, or say why not. */
static void job_done(rls_rebuild_t *rb, int closing)
{
    rls_reload_t *r = rb->arg;
    struct rls_reload_job_s *j = &r->job;
    rls_policy_t *p = j->p;
    uint64_t t_loop = uv_hrtime();
    int rc;

    j->p = NULL;
    if (closing)
        goto out;
    if (j->expect && memcmp(j->after, j->sig, sizeof(j->sig)) != 0) {
        /* Changed again since it settled (or gone): what was read may be
         * part of a write; the watch reads it once it settles again. */
        RLS_DEBUG("rules file changed while it was read; waiting for it to "
                  "settle",
                  " file=%s", r->path);
        goto out;
    }
    if (r->path != NULL)
        rls_watch_seen(&r->watch, (const uint64_t(*)[4]) & j->after);
    if (j->rc != RL_OK) {
        r->stats.failures++;
        RLS_ERROR("rules not reloaded; the old rules stay",
                  " error=\"%s\" errors=%zu",
                  j->rc == RL_EINVAL ? j->diag.msg[0] : "out of memory",
                  j->rc == RL_EINVAL ? j->diag.n + j->diag.dropped : 1);
        goto out;
    }
    rc = rls_runtime_set_policy(r->rt, p);
    p = NULL; /* the runtime's now, or freed */
    if (rc != RL_OK) {
        r->stats.failures++;
        RLS_ERROR("rules not reloaded; the old rules stay",
                  " error=\"out of memory\"");
        goto out;
    }
    /* The old policy goes now, off the loop (unless a batch still holds
     * it: then the batch frees it when answered). */
    drop_policy(r->loop, j->old);
    j->old = NULL;
    r->stats.reloads++;
    r->stats.last_us = (uv_hrtime() - j->t0) / 1000;
    if (j->nmissing > 0)
        RLS_WARN("rules reloaded without rules the last file had",
                 " file=%s missing=%zu names=\"%s\"",
                 r->path ? r->path : "(flags)", j->nmissing, j->missing);
    /* us: from the start to the swap, mostly on the worker; loop_us: how
     * long the swap held the loop. */
    RLS_INFO("rules reloaded",
             " file=%s rules=%zu generation=%llu us=%llu loop_us=%llu",
             r->path ? r->path : "(flags)", rls_policy_count(r->rt->policy),
             (unsigned long long)r->rt->generation,
             (unsigned long long)r->stats.last_us,
             (unsigned long long)((uv_hrtime() - t_loop) / 1000));
out:
    rls_policy_unref(p);
    rls_policy_unref(j->old);
    j->old = NULL;
}

int rls_reload_now(rls_reload_t *r)
{
    r->hup = 1;
    return rls_rebuild_request(&r->rebuild);
}

static void on_sighup(uv_signal_t *h, int signum)
{
    (void)signum;
    RLS_INFO("SIGHUP: reloading rules", NULL);
    rls_reload_now(h->data);
}

static void on_change(void *arg, const uint64_t (*sigs)[4])
{
    rls_reload_t *r = arg;

    (void)sigs; /* the job takes them from the watch when it starts */
    rls_rebuild_request(&r->rebuild);
}

int rls_reload_start(rls_reload_t *r, uv_loop_t *loop, rls_runtime_t *rt,
                     const char *path, const char *const *flags,
                     size_t nflags, size_t max_rules, uint64_t settle_ms)
{
    uint64_t seen[1][4];
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
    rls_rebuild_init(&r->rebuild, loop, job_start, job_work, job_done, r);
    r->started = 1;
    if (path == NULL)
        return 0;
    /* What the policy in force read, not what is there now: a change
     * between the first read and the watch would otherwise never be
     * loaded. The watch compares the two at once. */
    rls_policy_file_signature(rt->policy, seen[0]);
    rc = rls_watch_start(&r->watch, loop, &r->path, 1,
                         (const uint64_t(*)[4])seen, settle_ms, on_change, r);
    if (rc != RL_OK)
        RLS_WARN("cannot watch the rules file; SIGHUP still reloads",
                 " file=%s err=\"%s\"", path, rl_strerror(rc));
    return rc;
}

void rls_reload_close(rls_reload_t *r)
{
    if (!r->started)
        return;
    r->started = 0;
    uv_close((uv_handle_t *)&r->sighup, NULL);
    rls_watch_close(&r->watch, NULL, NULL);
    rls_rebuild_close(&r->rebuild);
}
