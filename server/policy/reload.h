/* Reloading the rules file (reload.c): on SIGHUP, and when the file
 * changes and has settled (watch.h: the directory is watched, so renames
 * over the file and a Kubernetes ConfigMap's ..data switch are seen; a
 * file written in place is read once it has stopped changing).
 *
 * A reload reads and parses the whole file off the loop (rebuild.h), then
 * swaps the new policy in on the loop, between batches: requests are
 * answered meanwhile under the policy in force. A bad file keeps the old
 * rules, logs one error line with FILE:LINE, and counts a failure; so does
 * anything but a regular file (file_in.h). A good file that lacks rules
 * the policy in force has is still loaded, with a warning naming them: a
 * file cut short loses its last rules, and an operator should hear it. */
#ifndef RLS_POLICY_RELOAD_H
#define RLS_POLICY_RELOAD_H

#include <stddef.h>
#include <stdint.h>

#include <uv.h>

#include "policy/file_in.h"
#include "policy/rebuild.h"
#include "policy/runtime.h"
#include "policy/watch.h"

typedef struct rls_reload_stats_s {
    uint64_t reloads;   /* policies swapped in after the first */
    uint64_t failures;  /* files refused */
    uint64_t last_us;   /* how long the last good reload took */
} rls_reload_stats_t;

/* The missing rules named in the warning, at most. */
#define RLS_RELOAD_MISSING_NAMED 10

typedef struct rls_reload_s {
    uv_loop_t *loop;
    rls_runtime_t *rt;
    const char *path; /* NULL: flags only (SIGHUP still rebuilds) */
    const char *const *flags;
    size_t nflags;
    size_t max_rules;
    uv_signal_t sighup;
    rls_watch_t watch;
    rls_rebuild_t rebuild;
    int started;
    int hup; /* a SIGHUP asked for the rebuild not started yet */
    /* The rebuild under way: set on the loop by its start, then the
     * worker's until its done runs on the loop. */
    struct rls_reload_job_s {
        int expect;         /* for the watch: the file must be sig */
        uint64_t sig[4];
        uint64_t after[4];  /* the file once built */
        rls_policy_t *old;  /* in force when it started (a reference) */
        rls_policy_t *p;    /* built, or NULL */
        int rc;
        rls_diag_t diag;
        uint64_t t0;        /* uv_hrtime at start */
        size_t nmissing;    /* rules of old not in p */
        char missing[RLS_RELOAD_MISSING_NAMED * (RL_RULE_MAX + 1) + 8];
    } job;
    rls_reload_stats_t stats;
} rls_reload_t;

/* Starts SIGHUP and, with a path, the watch (the policy in force was built
 * by the caller from the same path and flags; a change since then is
 * loaded once settled). settle_ms: how long the file must stay unchanged
 * before a change is read. Returns 0, or a negative libuv error / RL_ENOMEM
 * from the watch (logged; a reload on SIGHUP still works then). */
int rls_reload_start(rls_reload_t *r, uv_loop_t *loop, rls_runtime_t *rt,
                     const char *path, const char *const *flags,
                     size_t nflags, size_t max_rules, uint64_t settle_ms);

/* Asks for a rebuild from the file now, as SIGHUP does (no settling). It
 * runs off the loop and is logged and counted when done. Returns 0 or a
 * libuv error. */
int rls_reload_now(rls_reload_t *r);

/* Closes the handles (idempotent); a rebuild under way is discarded when
 * it ends, before the loop's uv_run returns. */
void rls_reload_close(rls_reload_t *r);

#endif
