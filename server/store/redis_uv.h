/* Drives a hiredis 0.14 async context from a libuv loop
 * (redis_uv.c). It replaces hiredis's own adapter
 * (<hiredis/adapters/libuv.h>), which ignores an error status from
 * uv_poll: libuv reports a refused non-blocking connect and a reset
 * connection exactly that way (POLLERR), so with it such a connection is
 * never noticed as failed and its callbacks never fire.
 *
 * Over TLS (rls_redis_uv_use_tls) the adapter moves the bytes itself:
 * hiredis still formats commands into its output buffer and parses
 * replies with its reader, but the socket carries TLS records
 * (redis_tls.h), so hiredis's own read and write, which would put RESP on
 * the socket, are never called once the TCP connect is done. */
#ifndef RLS_REDIS_UV_H
#define RLS_REDIS_UV_H

#include <hiredis/async.h>
#include <uv.h>

#include "store/redis_tls.h"

/* Attaches ac to loop: from now on hiredis reads and writes whenever the
 * socket is ready. When hiredis lets go of the context (redisAsyncFree, or
 * a disconnect), the poll handle is closed and closed(arg) is called from
 * its close callback, after the context is gone. Returns 0, or RL_ENOMEM /
 * RL_EIO, in which case nothing is attached and closed is never called. */
int rls_redis_uv_attach(redisAsyncContext *ac, uv_loop_t *loop,
                        void (*closed)(void *arg), void *arg);

/* Makes an attached context, whose connect has not completed yet, speak
 * TLS to `host` (the name or address connected to; it is what the
 * server's certificate must match, unless tls says otherwise). Once the
 * TCP connect completes (a failure there is hiredis's, as without TLS) the
 * handshake runs; when it is done the context counts as connected,
 * hiredis's connect callback fires with REDIS_OK, and the commands queued
 * meanwhile leave. A failed handshake fires the connect callback with
 * REDIS_ERR; a failure later (a TLS alert, the server closing, a socket
 * error) fails the connection as hiredis does: every pending reply
 * callback fires once with NULL, then the disconnect callback. Either
 * way ac->errstr says why ("TLS handshake: certificate verify failed:
 * hostname mismatch"). tls must outlive the context. Returns 0, or
 * RL_ENOMEM (the context is left as it was: plain). */
int rls_redis_uv_use_tls(redisAsyncContext *ac, const rls_redis_tls_t *tls,
                         const char *host);

/* Caps what one reply on an attached context may make us hold at max
 * bytes of unread input and as much of reply objects (redis_reply_alloc.h:
 * replies are then built by rls_redis_reply_fns). A reply past it, or a
 * string header announcing more, fails the connection as an I/O error
 * does (every pending reply with NULL, then the disconnect callback) and
 * counts one in *count (may be NULL); rls_redis_uv_cap_why then says so.
 * Call before the first reply. */
void rls_redis_uv_cap(redisAsyncContext *ac, size_t max, uint64_t *count);

/* "a reply went past the cap (N bytes, L a line)" once the cap failed ac's
 * connection (hiredis's own error text then says "Out of memory"), else NULL.
 * Valid in ac's callbacks, the disconnect callback included. */
const char *rls_redis_uv_cap_why(const redisAsyncContext *ac);

/* Why a connection whose handshake ran out of time failed, for the log:
 * "connect timed out", or over TLS, while the TLS handshake was still
 * running (a plaintext Redis waits for a line that never comes), says
 * so. */
const char *rls_redis_uv_timeout_why(const redisAsyncContext *ac);

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
