/* Drives a hiredis 0.14 async context from a libuv loop
 * (redis_uv.c). It replaces hiredis's own adapter
 * (<hiredis/adapters/libuv.h>), which ignores an error status from
 * uv_poll: libuv reports a refused non-blocking connect and a reset
 * connection exactly that way (POLLERR), so with it such a connection is
 * never noticed as failed and its callbacks never fire. */
#ifndef RLS_REDIS_UV_H
#define RLS_REDIS_UV_H

#include <hiredis/async.h>
#include <uv.h>

/* Attaches ac to loop: from now on hiredis reads and writes whenever the
 * socket is ready. When hiredis lets go of the context (redisAsyncFree, or
 * a disconnect), the poll handle is closed and closed(arg) is called from
 * its close callback, after the context is gone. Returns 0, or RL_ENOMEM /
 * RL_EIO, in which case nothing is attached and closed is never called. */
int rls_redis_uv_attach(redisAsyncContext *ac, uv_loop_t *loop,
                        void (*closed)(void *arg), void *arg);

/* Driving hiredis from our own code (not from a poll callback): between
 * hold and release, poll changes that hiredis asks for are held, and
 * release applies only the net change. With write_now, release first
 * writes what hiredis has buffered, instead of waiting for the loop to
 * poll for writability: a command submitted in one iteration then leaves
 * in that iteration, and the usual round of "watch for writable, write,
 * stop watching" costs no epoll_ctl at all. The write may fail the
 * connection, which fires hiredis's callbacks (every pending reply with
 * NULL) and frees ac before release returns: callers must not touch ac
 * afterwards. Calls nest. */
void rls_redis_uv_hold(redisAsyncContext *ac);
void rls_redis_uv_release(redisAsyncContext *ac, int write_now);

#endif
