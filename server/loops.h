/* --threads N (loops.c): N event loops in one process, each a server as
 * server.h starts it (its own batcher, store connections, HTTP/2
 * sessions and TLS connections), each on a thread of its own.
 *
 * The first loop is the process's: it binds every listener, handles the
 * signals, reads the policy (the rules file, the Envoy files or xDS, the
 * runtime switches) and serves /metrics and /healthz. Each new
 * connection on its native, gRPC and --http listeners goes to the loop
 * with the fewest open connections (the first included), which then
 * serves it for its life: the kernel's SO_REUSEPORT hashing balances few
 * long-lived clients badly (an Envoy worker keeps one HTTP/2 connection).
 * The other listeners (--metrics, --envoy-http, --debug-http) are served
 * by the first loop alone.
 *
 * Whatever the first loop installs (a policy, switches, an Envoy tree)
 * it hands to every other loop by reference, through each loop's queue
 * and wake-up (uv_async); each installs it between its batches, as the
 * first did. The request path takes no lock: a loop touches only its
 * own state, and the shared objects (policies, Envoy trees) are
 * immutable and reference-counted atomically. The memory store is one
 * table for the process (store/memory.h), so every loop counts on the
 * same counters.
 *
 * A stop (SIGTERM) on the first loop stops every loop the same way
 * (drain, GOAWAY on every connection, answers owed, then exit); the
 * process exits once every loop has finished. */
#ifndef RLS_LOOPS_H
#define RLS_LOOPS_H

#include <stddef.h>

#include <uv.h>

#include "server.h"
#include "store/store.h"

/* Loops a process may run (--threads). */
#define RLS_LOOPS_MAX 64

typedef struct rls_loops_s rls_loops_t;

/* Makes the store of a loop (main.c's): a Redis store connects from that
 * loop, the memory store is a front over the process's table. NULL: out
 * of memory. */
typedef rls_store_t *(*rls_loops_store_fn)(uv_loop_t *loop, void *arg);

/* Starts loops 1 to n - 1 beside first, which rls_server_start started
 * and whose loop has not run yet: each is a server of first's flags with
 * a store from new_store(loop, arg) and the policy first holds, on a
 * thread of its own. Returns 0, or an RL_E* code with a one-line reason
 * in err (then nothing is left of them; first is unchanged). */
int rls_loops_start(rls_loops_t **out, rls_server_t *first, unsigned n,
                    rls_loops_store_fn new_store, void *arg, char *err,
                    size_t errlen);

/* After the first loop's uv_run returned (its stop told the others):
 * waits until every other loop has finished and frees them. */
void rls_loops_join(rls_loops_t *l);

/* The /metrics page of the process: every loop's own page (the first
 * loop's first), merged (base/prom_merge.h): counters and histograms
 * summed, and so the per-loop gauges (connections, requests in flight),
 * the others the first loop's; then one sample per loop of
 * rl_loop_connections{loop="i"}. A loop that does not answer within
 * a second is left out (its count in rl_loop_render_timeouts_total). */
int rls_loops_metrics(rls_loops_t *l, rl_buf_t *out);

/* Loop i's state (rls_admin_loop_t, admin/admin_state.h), for --admin's GET
 * /v1/loops; on the first loop's thread. RL_EINVAL: no loop i. */
int rls_loops_info(rls_loops_t *l, unsigned i, rls_admin_loop_t *out);

/* Tells loop i to take no new connection (on 1) or to take them again
 * (on 0); the connections it serves stay. The hand-off then gives each
 * new one to a loop not paused (every loop paused: as if none were, for
 * a connection is always served). On the first loop's thread. RL_EINVAL:
 * no loop i. */
int rls_loops_pause(rls_loops_t *l, unsigned i, int on);

#endif
