/* The fleet-wide runtime switches, polled from Redis (switches.c).
 *
 * rl-ctl writes the switches into the hash "<prefix>policy" and bumps its
 * `version` field in the same transaction. Every rl-server reads the hash
 * every RLS_SWITCH_POLL_MS through its store's connection; when the version
 * changed it applies the whole hash at once, between batches. After each
 * poll it records "<version> <unix ms>" under its instance name in the hash
 * "<prefix>instances", which is how rl-ctl knows when the fleet has a
 * change and how long it took. With the memory store there is nothing to
 * poll: switches are a Redis feature. */
#ifndef RLS_POLICY_SWITCHES_H
#define RLS_POLICY_SWITCHES_H

#include <stdint.h>

#include <uv.h>

#include "policy/runtime.h"
#include "store/store.h"

#define RLS_SWITCH_POLL_MS 500
/* An instance whose last report in <prefix>instances is older than this
 * is not counted as live (rl-ctl's view too). */
#define RLS_INSTANCE_STALE_MS 10000
/* The period until the first poll is done (Redis answered, report sent). */
#define RLS_SWITCH_FIRST_MS 10
/* The longest admin address published ("HOST:PORT", a NUL). */
#define RLS_SWITCH_ADMIN_MAX 300

typedef struct rls_switch_poll_stats_s {
    uint64_t polls;        /* replies read */
    uint64_t applied;      /* versions applied */
    uint64_t bad_fields;   /* fields that did not parse (skipped) */
    uint64_t failures;     /* polls that got no usable reply */
} rls_switch_poll_stats_t;

typedef struct rls_switch_poll_s {
    uv_timer_t timer;
    rls_store_t *store;
    rls_runtime_t *rt;
    char key[96];      /* <prefix>policy */
    char ikey[96];     /* <prefix>instances */
    char instance[160];
    /* Its admin listener's address (--admin), published after the
     * version in its report as " admin=HOST:PORT" so that rl-ctl finds
     * every live instance's; "" for none. Bounded, and as fresh as the
     * report: an instance that stops reporting is not live. */
    char admin[RLS_SWITCH_ADMIN_MAX];
    int busy;          /* a poll is waiting for its reply */
    int first;         /* polling, and no poll done yet (settle) */
    int closed;
    int bad_logged;    /* the version whose bad fields were logged */
    /* When set (--fail-local), each poll also counts the live instances
     * in <prefix>instances (this one included, at least 1) into it. */
    uint32_t *live_out;
    int live_busy; /* that count's reply is awaited */
    rls_switch_poll_stats_t stats;
} rls_switch_poll_t;

/* Starts polling when the store can carry commands (the Redis store);
 * otherwise does nothing. instance names this server in <prefix>instances.
 * Returns 0. */
int rls_switch_poll_start(rls_switch_poll_t *p, uv_loop_t *loop,
                          rls_store_t *store, rls_runtime_t *rt,
                          const char *prefix, const char *instance);

/* Publishes host:port as this instance's admin address in its reports
 * (a wildcard host, 0.0.0.0 or ::, as this host's name, which the
 * others can reach). Call after rls_switch_poll_start. */
void rls_switch_poll_set_admin(rls_switch_poll_t *p, const char *host,
                               int port);

/* 0 from the start of polling until Redis has answered a poll and this
 * server's report of the version it applies is sent (an error reply ends
 * it too: switches Redis will not give are not waited for); else 1, and
 * 1 with nothing to poll. Until then /healthz answers 503, so a new
 * server takes work only once it applies the fleet's switches and rl-ctl
 * knows of it. */
int rls_switch_poll_ready(const rls_switch_poll_t *p);

/* Says goodbye: removes this instance from <prefix>instances (so rl-ctl
 * stops waiting for it) and stops polling. Called when a stop begins, while
 * the store can still send it. */
void rls_switch_poll_leave(rls_switch_poll_t *p);

/* Stops polling (idempotent). Replies still in flight are ignored. */
void rls_switch_poll_close(rls_switch_poll_t *p);

#endif
