/* Reloading the rules file; see rules_reload.h. */
#include "policy/rules_reload.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "rl_error.h"

/* On the loop: what the rebuild compares against. */
static void job_begin(void *arg)
{
    rls_rules_reload_t *r = arg;
    struct rls_rules_reload_job_s *j = &r->job;

    j->old = rls_policy_ref(r->rt->policy);
    j->p = NULL;
    j->nmissing = 0;
    j->missing[0] = '\0';
}

/* On the worker: the rules of the policy in force that p lacks, the first
 * few named. Both policies are immutable; the loop holds both alive. */
static void find_missing(struct rls_rules_reload_job_s *j)
{
    size_t i, n = rls_policy_count(j->old), used = 0;

    for (i = 0; i < n; i++) {
        const rls_rule_t *x = rls_policy_rule_at(j->old, i);
        if (rls_policy_find(j->p, x->name, x->name_len) != NULL)
            continue;
        if (++j->nmissing <= RLS_RULES_RELOAD_MISSING_NAMED) {
            int k = snprintf(j->missing + used, sizeof(j->missing) - used,
                             "%s%s", used ? "," : "", x->name);
            if (k > 0 && (size_t)k < sizeof(j->missing) - used)
                used += (size_t)k;
        }
    }
    if (j->nmissing > RLS_RULES_RELOAD_MISSING_NAMED &&
        used + 4 < sizeof(j->missing))
        memcpy(j->missing + used, ",...", 5);
}

/* On the worker: read, parse, validate. Touches nothing of the loop's. */
static int job_build(void *arg, rls_diag_t *diag)
{
    rls_rules_reload_t *r = arg;
    struct rls_rules_reload_job_s *j = &r->job;
    int rc = rls_policy_build(r->flags, r->nflags, r->path, r->max_rules, &j->p,
                              diag);

    if (rc == RL_OK)
        find_missing(j);
    return rc;
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

/* On the loop: swap the new policy in. */
static int job_install(void *arg, uint64_t us)
{
    rls_rules_reload_t *r = arg;
    struct rls_rules_reload_job_s *j = &r->job;
    uint64_t t_loop = uv_hrtime();
    int rc = rls_runtime_set_policy(r->rt, j->p);

    j->p = NULL; /* the runtime's now, or freed */
    if (rc != RL_OK)
        return rc;
    /* The old policy goes now, off the loop (unless a batch still holds
     * it: then the batch frees it when answered). */
    drop_policy(r->rl.loop, j->old);
    j->old = NULL;
    if (j->nmissing > 0)
        RLS_WARN("rules reloaded without rules the last file had",
                 " file=%s missing=%zu names=\"%s\"",
                 r->path ? r->path : "(flags)", j->nmissing, j->missing);
    /* us: from the start to the swap, mostly on the worker; loop_us: how
     * long the swap held the loop. */
    RLS_INFO("rules reloaded",
             " file=%s rules=%zu generation=%llu us=%llu loop_us=%llu",
             r->path ? r->path : "(flags)", rls_policy_count(r->rt->policy),
             (unsigned long long)r->rt->generation, (unsigned long long)us,
             (unsigned long long)((uv_hrtime() - t_loop) / 1000));
    return RL_OK;
}

static void job_end(void *arg)
{
    rls_rules_reload_t *r = arg;

    rls_policy_unref(r->job.p);
    rls_policy_unref(r->job.old);
    r->job.p = r->job.old = NULL;
}

static const rls_reloader_ops_t rules_ops = {
    .begin = job_begin,
    .build = job_build,
    .install = job_install,
    .end = job_end,
};

int rls_rules_reload_now(rls_rules_reload_t *r)
{
    return rls_reloader_now(&r->rl);
}

int rls_rules_reload_start(rls_rules_reload_t *r, uv_loop_t *loop,
                           rls_runtime_t *rt, const char *path,
                           const char *const *flags, size_t nflags,
                           size_t max_rules, uint64_t settle_ms)
{
    uint64_t seen[1][4];

    memset(r, 0, sizeof(*r));
    r->rt = rt;
    r->path = path;
    r->flags = flags;
    r->nflags = nflags;
    r->max_rules = max_rules;
    /* What the policy in force read, not what is there now. */
    rls_policy_file_signature(rt->policy, seen[0]);
    return rls_reloader_start(&r->rl, loop, "rules", &r->path,
                              path != NULL ? 1 : 0, (const uint64_t(*)[4])seen,
                              settle_ms, &rules_ops, r);
}

void rls_rules_reload_close(rls_rules_reload_t *r)
{
    rls_reloader_close(&r->rl);
}
