/* Drives a hiredis 0.14 async context from a libuv loop
 * (store_redis_uv.c). It replaces hiredis's own adapter
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

#endif
