/* Reloading the --envoy-config files (envoy_reload.c), as reload.c
 * reloads the rules file and with the same parts: on SIGHUP, and when one
 * of the files changes and has settled (watch.h: each file's directory is
 * watched, so renames over a file and a ConfigMap's ..data switch are
 * seen), built off the loop and installed on it (rebuild.h). All files
 * are rebuilt together; a bad one (or anything but a regular file) keeps
 * the old configuration whole, logs one error line with the first
 * FILE:LINE and the error count, and counts a failure. */
#ifndef RLS_POLICY_ENVOY_RELOAD_H
#define RLS_POLICY_ENVOY_RELOAD_H

#include <stddef.h>
#include <stdint.h>

#include <uv.h>

#include "policy/envoy_conf.h"
#include "policy/reload.h"

/* Receives each new configuration (and its reference). */
typedef void (*rls_envoy_install_fn)(void *arg, rls_envoy_conf_t *conf);

typedef struct rls_envoy_reload_s {
    uv_loop_t *loop;
    const char *const *paths;
    size_t npaths;
    rls_envoy_install_fn install;
    void *arg;
    uv_signal_t sighup;
    rls_watch_t watch;
    rls_rebuild_t rebuild;
    int started;
    int hup; /* a SIGHUP asked for the rebuild not started yet */
    /* The rebuild under way (see reload.h's job). */
    struct rls_envoy_job_s {
        int expect;
        uint64_t (*sigs)[4];  /* per file: expected, then as built */
        uint64_t (*after)[4];
        rls_envoy_conf_t *conf;
        int rc;
        rls_diag_t diag;
        uint64_t t0;
    } job;
    rls_reload_stats_t stats;
} rls_envoy_reload_t;

/* Starts SIGHUP and the watch; the configuration in force was built by
 * the caller from the same paths (a change since is loaded once settled).
 * Returns 0; RL_ENOMEM with nothing started (no reloads; close is still
 * fine); or RL_ENOMEM from the watch, logged (SIGHUP still reloads). */
int rls_envoy_reload_start(rls_envoy_reload_t *r, uv_loop_t *loop,
                           const char *const *paths, size_t npaths,
                           uint64_t settle_ms, rls_envoy_install_fn install,
                           void *arg);

/* Asks for a rebuild now, as SIGHUP does. Returns 0 or a libuv error. */
int rls_envoy_reload_now(rls_envoy_reload_t *r);

/* Closes the handles (idempotent); memory goes with their callbacks, and
 * a rebuild under way is discarded when it ends. */
void rls_envoy_reload_close(rls_envoy_reload_t *r);

#endif
