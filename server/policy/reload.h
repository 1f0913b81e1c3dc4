/* Reloading the rules file (reload.c): on SIGHUP, and when the file
 * changes. A reload parses and validates the whole file first and swaps the
 * new policy in between batches; a bad file keeps the old rules, logs one
 * error line with FILE:LINE, and counts a failure.
 *
 * The change watch is on the file's directory, not the file: editors and
 * config managers replace a file by renaming a new one over it, and a watch
 * on the old inode would see nothing after the first such save. Events are
 * debounced (a save is often several events) and a reload happens only when
 * the file's identity or contents changed (inode, size, mtime). */
#ifndef RLS_POLICY_RELOAD_H
#define RLS_POLICY_RELOAD_H

#include <stddef.h>
#include <stdint.h>

#include <uv.h>

#include "policy/file_in.h"
#include "policy/runtime.h"

typedef struct rls_reload_stats_s {
    uint64_t reloads;   /* policies swapped in after the first */
    uint64_t failures;  /* files refused */
    uint64_t last_us;   /* how long the last good reload took */
} rls_reload_stats_t;

typedef struct rls_reload_s {
    uv_loop_t *loop;
    rls_runtime_t *rt;
    const char *path; /* NULL: flags only (SIGHUP still rebuilds) */
    const char *const *flags;
    size_t nflags;
    size_t max_rules;
    uv_signal_t sighup;
    uv_fs_event_t watch;
    uv_timer_t debounce;
    char dir[4096];
    const char *base; /* the file's name within dir */
    uint64_t sig[4];  /* inode, size, mtime s, mtime ns of the last read */
    int watching;
    rls_reload_stats_t stats;
} rls_reload_t;

/* Starts watching (the policy in force was built by the caller from the
 * same path and flags). Returns 0 or a negative libuv error from the watch
 * (a reload on SIGHUP still works then). */
int rls_reload_start(rls_reload_t *r, uv_loop_t *loop, rls_runtime_t *rt,
                     const char *path, const char *const *flags,
                     size_t nflags, size_t max_rules);

/* Rebuilds from the file now. Returns 0 when a new policy is in force,
 * RL_EINVAL when the file was refused (logged), RL_ENOMEM. */
int rls_reload_now(rls_reload_t *r);

/* Closes the handles (idempotent). */
void rls_reload_close(rls_reload_t *r);

#endif
