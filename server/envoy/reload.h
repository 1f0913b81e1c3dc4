/* Reloading the --envoy-config files (envoy_reload.c), by the reloader the
 * rules file uses too (reloader.h: SIGHUP, and a change of any of the
 * files once settled, built off the loop). A path may be a directory
 * (envoy_dir.h): it is watched itself (a file added, removed, changed, or
 * a ConfigMap's ..data switched) and through its parent (the directory
 * itself a link that is switched), and its files are listed again at each
 * rebuild. All files are rebuilt together;
 * a bad one (or anything but a regular file) keeps the old configuration
 * whole, logs one error line with the first FILE:LINE and the error
 * count, and counts a failure. */
#ifndef RLS_POLICY_ENVOY_RELOAD_H
#define RLS_POLICY_ENVOY_RELOAD_H

#include <stddef.h>
#include <stdint.h>

#include <uv.h>

#include "envoy/conf.h"
#include "policy/reloader.h"

/* Receives each new configuration (and its reference). */
typedef void (*rls_envoy_install_fn)(void *arg, rls_envoy_conf_t *conf);

/* Paths the reloader watches, at most: each directory counts twice. */
#define RLS_ENVOY_WATCH_MAX 128

typedef struct rls_envoy_reload_s {
    rls_reloader_t rl;
    const char *const *paths;
    size_t npaths;
    /* What the reloader watches: each path, and for a directory D also
     * "D/." (the directory's own events); the "D/." strings in wbuf. */
    const char *watch[RLS_ENVOY_WATCH_MAX];
    size_t nwatch;
    char wbuf[8192];
    /* Which paths were directories at start (rls_envoy_dir_kinds): they
     * stay directories, the others files. */
    unsigned char isdir[RLS_ENVOY_WATCH_MAX];
    rls_envoy_install_fn install;
    void *arg;
    rls_envoy_conf_t *conf; /* built by the rebuild under way, or NULL */
} rls_envoy_reload_t;

/* Starts SIGHUP and the watch; the configuration in force was built by
 * the caller from the same paths (a change since is loaded once settled).
 * Returns 0; RL_ENOMEM with nothing started (no reloads; close is still
 * fine); or the watch's error, logged (SIGHUP still reloads). */
int rls_envoy_reload_start(rls_envoy_reload_t *r, uv_loop_t *loop,
                           const char *const *paths, size_t npaths,
                           uint64_t settle_ms, rls_envoy_install_fn install,
                           void *arg);

/* Asks for a rebuild now, as SIGHUP does. Returns as rls_reloader_now (0,
 * RL_ENOMEM or RL_EIO). */
int rls_envoy_reload_now(rls_envoy_reload_t *r);

/* Closes the handles (idempotent); memory goes with their callbacks, and
 * a rebuild under way is discarded when it ends. */
void rls_envoy_reload_close(rls_envoy_reload_t *r);

#endif
