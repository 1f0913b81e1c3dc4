/* Building a new policy off the loop (rebuild.c), for the rules file
 * (rules_reload.c) and the --envoy-config files (envoy/reload.c) alike.
 *
 * Parsing a 16 MiB file takes the better part of a second: done on the
 * loop, every listener would stand still meanwhile. So a rebuild is
 * prepared on the loop (start: what to read, what is in force), built on
 * a thread of its own (work: read and parse; nothing there touches the
 * loop's state), and finished on the loop (done: swap it in, or log why
 * not). The thread runs at a lower priority than the loop (nice 10): on
 * a machine short of CPU the parse waits, requests do not. One rebuild
 * runs at a time; asking for one while one runs gets one more after it,
 * however many times it was asked (the files are read again then, so the
 * last version wins).
 *
 * Closing while a rebuild runs lets it finish on its thread (nothing can
 * stop it), and done is told to discard what it built: nothing leaks, and
 * the loop's uv_run returns only after that. */
#ifndef RLS_POLICY_REBUILD_H
#define RLS_POLICY_REBUILD_H

#include <uv.h>

typedef struct rls_rebuild_s rls_rebuild_t;

struct rls_rebuild_s {
    uv_loop_t *loop;
    uv_thread_t thread;
    uv_async_t async; /* the thread's "done"; referenced while running */
    void (*start)(rls_rebuild_t *rb); /* on the loop, before work */
    void (*work)(rls_rebuild_t *rb);  /* on the rebuild's thread */
    /* On the loop, after work: install (closing 0) or discard (1). */
    void (*done)(rls_rebuild_t *rb, int closing);
    void *arg;
    /* Test hook: called on the rebuild's thread before work (NULL:
     * none). */
    void (*hook)(rls_rebuild_t *rb);
    int inited;
    int running; /* a thread under way */
    int again;   /* asked for while running */
    int closing;
};

/* Sets rb up (a handle on loop; nothing runs until rls_rebuild_request).
 * Returns 0, or RL_ENOMEM / RL_EIO when the loop gives no handle (then
 * requests do nothing). */
int rls_rebuild_init(rls_rebuild_t *rb, uv_loop_t *loop,
                     void (*start)(rls_rebuild_t *rb),
                     void (*work)(rls_rebuild_t *rb),
                     void (*done)(rls_rebuild_t *rb, int closing),
                     void *arg);

/* Asks for a rebuild: starts one now, or once more after the one running.
 * Returns 0, or RL_ENOMEM (the system's threads or memory are used up)
 * or RL_EIO when the thread could not be made (done is then called at
 * once to discard what start prepared). Does nothing once closing. */
int rls_rebuild_request(rls_rebuild_t *rb);

/* No more rebuilds; one running is discarded when it ends, and the handle
 * closes then (the loop runs until it has). Idempotent. */
void rls_rebuild_close(rls_rebuild_t *rb);

#endif
