/* Reloading the --envoy-config files (envoy_reload.c), as reload.c
 * reloads the rules file: on SIGHUP, and when one of the files changes
 * (a watch on each file's directory, debounced 50 ms, acting only when a
 * file's inode, size or mtime changed). All files are rebuilt together; a
 * bad one keeps the old configuration whole, logs one error line with the
 * first FILE:LINE and the error count, and counts a failure. */
#ifndef RLS_POLICY_ENVOY_RELOAD_H
#define RLS_POLICY_ENVOY_RELOAD_H

#include <stddef.h>
#include <stdint.h>

#include <uv.h>

#include "policy/envoy_conf.h"
#include "policy/reload.h"

/* Receives each new configuration (and its reference). */
typedef void (*rls_envoy_install_fn)(void *arg, rls_envoy_conf_t *conf);

typedef struct rls_envoy_watch_s rls_envoy_watch_t;

typedef struct rls_envoy_reload_s {
    uv_loop_t *loop;
    const char *const *paths;
    size_t npaths;
    rls_envoy_install_fn install;
    void *arg;
    uv_signal_t sighup;
    uv_timer_t debounce;
    rls_envoy_watch_t *watches; /* one per file */
    uint64_t (*sigs)[4];        /* per file: inode, size, mtime s, ns */
    int started;
    rls_reload_stats_t stats;
} rls_envoy_reload_t;

/* Starts watching; the configuration in force was built by the caller
 * from the same paths. Returns 0 or RL_ENOMEM (nothing is watched then;
 * SIGHUP still reloads if the signal handle started). */
int rls_envoy_reload_start(rls_envoy_reload_t *r, uv_loop_t *loop,
                           const char *const *paths, size_t npaths,
                           rls_envoy_install_fn install, void *arg);

/* Rebuilds now. Returns 0 when the new configuration is installed,
 * RL_EINVAL when refused (logged), RL_ENOMEM. */
int rls_envoy_reload_now(rls_envoy_reload_t *r);

/* Closes the handles (idempotent); memory goes with their callbacks. */
void rls_envoy_reload_close(rls_envoy_reload_t *r);

#endif
