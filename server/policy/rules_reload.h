/* Reloading the rules file (rules_reload.c), by the reloader the Envoy files
 * use too (reloader.h: SIGHUP, and a change once settled, built off the loop).
 *
 * The new policy is swapped in on the loop, between batches. A bad file
 * keeps the old rules, logs one error line with FILE:LINE, and counts a
 * failure; so does anything but a regular file (file_in.h). A good file
 * that lacks rules the policy in force has is still loaded, with a warning
 * naming them: a file cut short loses its last rules, and an operator
 * should hear it. */
#ifndef RLS_POLICY_RULES_RELOAD_H
#define RLS_POLICY_RULES_RELOAD_H

#include <stddef.h>
#include <stdint.h>

#include <uv.h>

#include "policy/reloader.h"
#include "policy/runtime.h"

/* The missing rules named in the warning, at most. */
#define RLS_RULES_RELOAD_MISSING_NAMED 10

typedef struct rls_rules_reload_s {
    rls_reloader_t rl;
    rls_runtime_t *rt;
    const char *path; /* NULL: flags only (SIGHUP still rebuilds) */
    const char *const *flags;
    size_t nflags;
    size_t max_rules;
    /* The rebuild under way: set on the loop as it begins, then the
     * worker's until it ends on the loop. */
    struct rls_rules_reload_job_s {
        rls_policy_t *old; /* in force when it started (a reference) */
        rls_policy_t *p;   /* built, or NULL */
        size_t nmissing;   /* rules of old not in p */
        char missing[RLS_RULES_RELOAD_MISSING_NAMED * (RL_RULE_MAX + 1) + 8];
    } job;
} rls_rules_reload_t;

/* Starts SIGHUP and, with a path, the watch (the policy in force was built
 * by the caller from the same path and flags; a change since then is
 * loaded once settled). settle_ms: how long the file must stay unchanged
 * before a change is read. Returns 0, or RL_ENOMEM / the watch's error
 * (logged; with the latter a reload on SIGHUP still works). */
int rls_rules_reload_start(rls_rules_reload_t *r, uv_loop_t *loop,
                           rls_runtime_t *rt, const char *path,
                           const char *const *flags, size_t nflags,
                           size_t max_rules, uint64_t settle_ms);

/* Asks for a rebuild from the file now, as SIGHUP does (no settling). It
 * runs off the loop and is logged and counted when done. Returns as
 * rls_reloader_now (0, RL_ENOMEM or RL_EIO). */
int rls_rules_reload_now(rls_rules_reload_t *r);

/* Closes the handles (idempotent); a rebuild under way is discarded when
 * it ends, before the loop's uv_run returns. */
void rls_rules_reload_close(rls_rules_reload_t *r);

#endif
