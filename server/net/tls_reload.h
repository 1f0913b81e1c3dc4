/* Reloading --tls-cert, --tls-key and --tls-client-ca (tls_reload.c) by
 * the reloader the rules and Envoy files use (policy/reloader.h): on
 * SIGHUP, and when one of the files changes and has settled for
 * --reload-settle-ms. The new SSL_CTX is built off the loop and put in
 * force between accepts: connections accepted from then on use it, the
 * established ones keep theirs. Files that do not load (a bad PEM, a key
 * that does not match the certificate, say halfway through a rotation)
 * keep the old configuration with one error line; the watch reads them
 * again when they change. */
#ifndef RLS_NET_TLS_RELOAD_H
#define RLS_NET_TLS_RELOAD_H

#include <stdint.h>

#include <uv.h>

#include "net/tls.h"
#include "policy/reloader.h"

typedef struct rls_tls_reload_s {
    rls_reloader_t rl;
    rls_tls_t *tls; /* the server's; outlives the reload */
    const char *paths[3];
    /* Called once a reload is in force (--threads: the first loop hands
     * it to the others); NULL: nothing. Set after start. */
    void (*installed)(void *arg, rls_tls_t *tls);
    void *arg;
} rls_tls_reload_t;

/* Starts SIGHUP and the watch of tls's files. Returns as
 * rls_reloader_start (errors are logged; the server runs on). */
int rls_tls_reload_start(rls_tls_reload_t *r, uv_loop_t *loop, rls_tls_t *tls,
                         uint64_t settle_ms);

/* Asks for a reload now, as SIGHUP does. Returns as rls_reloader_now (0,
 * RL_ENOMEM or RL_EIO). */
int rls_tls_reload_now(rls_tls_reload_t *r);

/* Closes the handles (idempotent); a reload under way is discarded. */
void rls_tls_reload_close(rls_tls_reload_t *r);

#endif
