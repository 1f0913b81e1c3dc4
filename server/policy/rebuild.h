/* Building a new policy off the loop (rebuild.c), for the rules file
 * (reload.c) and the --envoy-config files (envoy_reload.c) alike.
 *
 * Parsing a 16 MiB file takes a good part of a second: done on the loop,
 * every listener would stand still meanwhile. So a rebuild is prepared on
 * the loop (start: what to read, what is in force), built on a libuv
 * worker thread (work: read and parse; nothing there touches the loop's
 * state), and finished on the loop (done: swap it in, or log why not).
 * One rebuild runs at a time; asking for one while one runs gets one more
 * after it, however many times it was asked (the files are read again
 * then, so the last version wins).
 *
 * Closing while a rebuild runs lets it finish on its thread (libuv cannot
 * stop it), and done is told to discard what it built: nothing leaks, and
 * the loop's uv_run returns only after that. */
#ifndef RLS_POLICY_REBUILD_H
#define RLS_POLICY_REBUILD_H

#include <uv.h>

typedef struct rls_rebuild_s rls_rebuild_t;

struct rls_rebuild_s {
    uv_loop_t *loop;
    uv_work_t req;
    void (*start)(rls_rebuild_t *rb); /* on the loop, before work */
    void (*work)(rls_rebuild_t *rb);  /* on a worker thread */
    /* On the loop, after work: install (closing 0) or discard (1). */
    void (*done)(rls_rebuild_t *rb, int closing);
    void *arg;
    /* Test hook: called on the worker thread before work (NULL: none). */
    void (*hook)(rls_rebuild_t *rb);
    int running; /* work queued or under way */
    int again;   /* asked for while running */
    int closing;
};

/* Sets rb up; nothing runs until rls_rebuild_request. */
void rls_rebuild_init(rls_rebuild_t *rb, uv_loop_t *loop,
                      void (*start)(rls_rebuild_t *rb),
                      void (*work)(rls_rebuild_t *rb),
                      void (*done)(rls_rebuild_t *rb, int closing),
                      void *arg);

/* Asks for a rebuild: starts one now, or once more after the one running.
 * Returns 0, or a libuv error when the work could not be queued (done is
 * then called at once to discard what start prepared). Does nothing once
 * closing. */
int rls_rebuild_request(rls_rebuild_t *rb);

/* No more rebuilds; one running is discarded when it ends. */
void rls_rebuild_close(rls_rebuild_t *rb);

#endif
