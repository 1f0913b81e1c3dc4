/* Reloading a policy from its files (reloader.c): the part the rules file
 * (rules_reload.c) and the --envoy-config files (envoy/reload.c) share. A
 * reload starts on SIGHUP, or when one of the files changes and has
 * settled (watch.h: each file's directory is watched, so a rename over a
 * file and a Kubernetes ConfigMap's ..data switch are seen; a file written
 * in place is read once it has stopped changing). It is built off the
 * loop and installed on it (rebuild.h), between batches: requests are
 * answered meanwhile under what is in force.
 *
 * What is built and how it goes in force is the user's (ops below): the
 * reloader owns the signal, the watch, the rebuild and the files'
 * signatures, refuses a build whose files changed while they were read (the
 * watch reads them again once they settle), and logs and counts a
 * refused build in the same words for every kind of file.
 *
 * The family: each kind of file has its <kind>_reload.c (the rules file's
 * policy/rules_reload.c, envoy/reload.c, net/tls_reload.c: what is built
 * and how it goes in force), all on this reloader (the when), which builds
 * on rebuild.c's thread (the where: off the loop; the xDS client's builds
 * use that thread too). */
#ifndef RLS_POLICY_RELOADER_H
#define RLS_POLICY_RELOADER_H

#include <stddef.h>
#include <stdint.h>

#include <uv.h>

#include "policy/loader.h"
#include "policy/rebuild.h"
#include "policy/watch.h"

typedef struct rls_reload_stats_s {
    uint64_t reloads;  /* builds put in force after the first */
    uint64_t failures; /* builds refused */
    uint64_t last_us;  /* how long the last good reload took */
} rls_reload_stats_t;

/* What a reloader builds, all called with the reloader's arg. begin,
 * install and end run on the loop; build on the rebuild's thread, where it
 * must touch nothing of the loop's but what begin handed it. */
typedef struct rls_reloader_ops_s {
    /* A rebuild starts: take what the build compares against. */
    void (*begin)(void *arg);
    /* Reads and builds. Returns 0, RL_EINVAL (diag says why) or
     * RL_ENOMEM. */
    int (*build)(void *arg, rls_diag_t *diag);
    /* Puts what build made in force and logs it; us: the time from the
     * rebuild's start. Returns 0, or RL_ENOMEM when it could not (the
     * reloader logs and counts that; what is in force stays). */
    int (*install)(void *arg, uint64_t us);
    /* The rebuild is over (installed, refused or discarded at close):
     * drop whatever begin and build still hold. */
    void (*end)(void *arg);
} rls_reloader_ops_t;

typedef struct rls_reloader_s {
    uv_loop_t *loop;
    const char *what; /* "rules", "envoy config": the log lines' subject */
    const char *const *paths;
    size_t npaths; /* 0: built from flags alone (SIGHUP still rebuilds) */
    const rls_reloader_ops_t *ops;
    void *arg;
    uv_signal_t sighup;
    rls_watch_t watch;
    rls_rebuild_t rebuild;
    int started;
    int hup;    /* a SIGHUP asked for the rebuild not started yet */
    int expect; /* the rebuild under way must read sigs (for the watch) */
    uint64_t (*sigs)[4];  /* per file: expected, or as the caller built */
    uint64_t (*after)[4]; /* per file: as the rebuild read it */
    int rc;               /* the build's */
    rls_diag_t diag;
    uint64_t t0; /* uv_hrtime at the rebuild's start */
    rls_reload_stats_t stats;
} rls_reloader_t;

/* Starts SIGHUP and, with files, the watch. sigs (per file; NULL: the
 * files as they are now) is what the caller built what is in force from;
 * a change since is loaded once settled for settle_ms. Returns 0; RL_ENOMEM
 * with nothing started (logged, and close is still fine; no SIGHUP
 * handler is installed, so rls_server_start stops there); or the watch's error,
 * logged (SIGHUP still reloads then). */
int rls_reloader_start(rls_reloader_t *r, uv_loop_t *loop, const char *what,
                       const char *const *paths, size_t npaths,
                       const uint64_t (*sigs)[4], uint64_t settle_ms,
                       const rls_reloader_ops_t *ops, void *arg);

/* Asks for a rebuild now, as SIGHUP does (no settling). Returns 0, or
 * RL_ENOMEM / RL_EIO when no thread could be made for it
 * (rls_rebuild_request). */
int rls_reloader_now(rls_reloader_t *r);

/* Closes the handles (idempotent); memory goes with their callbacks, and
 * a rebuild under way is discarded (ops->end) when it ends, before the
 * loop's uv_run returns. */
void rls_reloader_close(rls_reloader_t *r);

#endif
