/* hiredis on libuv, reporting poll errors; see redis_uv.h. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include <hiredis/hiredis.h>
#include <hiredis/sds.h>

#include "rl_error.h"
#include "store/redis_reply_alloc.h"
#include "store/redis_uv.h"

/* Exported by libhiredis 0.14 but not declared in its headers: parses
 * what the reader holds and runs the replies' callbacks, which is what
 * redisAsyncHandleRead does after its own read. The TLS path feeds the
 * reader itself and then calls this. */
void redisProcessCallbacks(redisAsyncContext *ac);

/* A TLS context's phases: the TCP connect (hiredis's), the handshake
 * (ours), then RESP over TLS records. */
enum { TLS_TCP, TLS_HANDSHAKE, TLS_READY };

typedef struct uvev_s {
    uv_poll_t poll;
    redisAsyncContext *ac; /* NULL once hiredis let go of it */
    int events;            /* what hiredis wants watched */
    int active;            /* what the poll handle watches */
    int held;              /* > 0: changes wait for commit() */
    void (*closed)(void *arg);
    void *arg;
    rls_redis_tls_conn_t *tls; /* NULL: plain */
    int phase;                 /* with tls */
    int capped;                /* cap below is in force */
    rls_redis_reply_cap_t cap; /* what one reply may hold */
    char cap_why[80];          /* why, once a reply went past the cap */
} uvev_t;

/* Hands the wanted events to libuv, if they changed. Every uv_poll_start
 * costs epoll_ctl calls at the next poll (libuv 1.44 stops the watcher
 * first, so even an unchanged set is re-added: EEXIST, then MOD), and
 * hiredis asks for write interest and drops it again around every
 * command; so changes made while hiredis is driven from our own code are
 * held and only the net change is applied, usually none. */
static void commit(uvev_t *e);

/* ---- failing a context; TLS --------------------------------------------*/

/* Fails the context (over TLS, or a reply past the cap on either
 * transport) as hiredis fails one after an I/O error, with `why`
 * as its error: a connect not yet reported fires the connect callback
 * with REDIS_ERR (hiredis's failed connect), then every pending reply
 * fires with NULL and, if it was connected, the disconnect callback. From
 * inside a hiredis callback the free waits until that callback returns
 * (REDIS_FREEING). */
static void ctx_fail(uvev_t *e, const char *why)
{
    redisAsyncContext *ac = e->ac;
    redisContext *c = &ac->c;

    c->err = REDIS_ERR_IO;
    snprintf(c->errstr, sizeof(c->errstr), "%s", why);
    ac->err = c->err;
    ac->errstr = c->errstr;
    if (!(c->flags & REDIS_CONNECTED) && ac->onConnect != NULL)
        ac->onConnect(ac, REDIS_ERR);
    redisAsyncFree(ac);
}

/* Gone, or going as soon as the callback we are in returns. */
static int tls_done(const uvev_t *e)
{
    return e->ac == NULL || (e->ac->c.flags & REDIS_FREEING);
}

/* Encrypts hiredis's output buffer in place (no copy of the commands)
 * and sends it; what the socket did not take waits for writability. */
static void tls_write(uvev_t *e)
{
    redisContext *c = &e->ac->c;
    size_t taken = 0;
    int rc;

    rc = rls_redis_tls_conn_write(e->tls, c->fd, c->obuf, sdslen(c->obuf),
                                  &taken);
    if (taken == sdslen(c->obuf))
        sdsclear(c->obuf); /* keeps its allocation for the next batch */
    else if (taken > 0)
        sdsrange(c->obuf, (int)taken, -1);
    if (rc != 0)
        ctx_fail(e, rls_redis_tls_conn_why(e->tls));
}

/* After a read: a reply past the cap fails the connection (the
 * reconnect path of whoever owns it). Returns nonzero if it did. */
static int cap_failed(uvev_t *e)
{
    if (!e->capped || rls_redis_reply_cap_check(&e->cap, e->ac->c.reader) == 0)
        return 0;
    ctx_fail(e, e->cap_why);
    return 1;
}

static void feed(void *arg, const char *p, size_t n)
{
    redisAsyncContext *ac = arg;

    /* On failure (out of memory) the reader keeps its error, and
     * redisProcessCallbacks fails the connection with it. */
    redisReaderFeed(ac->c.reader, p, n);
}

static void tls_read(uvev_t *e)
{
    redisAsyncContext *ac = e->ac;
    int rc = rls_redis_tls_conn_read(e->tls, ac->c.fd, feed, ac);

    /* Replies that came before an end of file are answered first. The
     * callbacks may free the context. */
    redisProcessCallbacks(ac);
    if (!tls_done(e) && cap_failed(e))
        return;
    if (rc != 0 && !tls_done(e))
        ctx_fail(e, rls_redis_tls_conn_why(e->tls));
}

/* The TLS context's poll events, by phase. */
static void tls_poll(uvev_t *e, int events)
{
    redisAsyncContext *ac = e->ac;
    int rc, err = 0;
    socklen_t len = sizeof(err);

    if (e->phase == TLS_TCP) {
        /* A failed connect, reported as hiredis reports one (reading
         * SO_ERROR clears it, so hiredis could no longer see it). */
        if (getsockopt(ac->c.fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0)
            err = errno;
        if (err != 0) {
            ctx_fail(e, strerror(err));
            return;
        }
        if (!(events & UV_WRITABLE))
            return;
        e->phase = TLS_HANDSHAKE;
    }
    if (e->phase == TLS_HANDSHAKE) {
        rc = rls_redis_tls_conn_handshake(e->tls, ac->c.fd);
        if (rc == RL_EAGAIN)
            return;
        if (rc != 0) {
            ctx_fail(e, rls_redis_tls_conn_why(e->tls));
            return;
        }
        /* Connected, as hiredis would say on its first writable event;
         * then the commands queued behind the connect leave. */
        e->phase = TLS_READY;
        ac->c.flags |= REDIS_CONNECTED;
        if (ac->onConnect != NULL)
            ac->onConnect(ac, REDIS_OK);
        if (!tls_done(e))
            tls_write(e);
        return;
    }
    if (events & UV_READABLE)
        tls_read(e);
    if (!tls_done(e) && (events & UV_WRITABLE))
        tls_write(e);
}

/* What the poll handle should watch: hiredis's wishes, or over TLS what
 * the phase needs (writable while anything waits to be sent; readable
 * from the handshake on, as hiredis reads after every write). */
static int wanted(const uvev_t *e)
{
    if (e->tls == NULL)
        return e->events;
    if (e->phase == TLS_TCP)
        return UV_WRITABLE;
    if (rls_redis_tls_conn_pending(e->tls) ||
        (e->phase == TLS_READY && sdslen(e->ac->c.obuf) > 0))
        return UV_READABLE | UV_WRITABLE;
    return UV_READABLE;
}

/* ---- the poll handle ----------------------------------------------------*/

static void on_poll(uv_poll_t *h, int status, int events)
{
    uvev_t *e = h->data;

    /* On POLLERR libuv stops the handle and reports an error with no
     * events; hiredis finds the socket error itself when it tries what it
     * was waiting for, and fails the connection. (Over TLS, the send or
     * recv we try finds it.) */
    if (status < 0) {
        events = e->active;
        e->active = 0; /* libuv stopped the handle */
    }
    e->held++;
    if (e->ac != NULL && e->tls != NULL) {
        tls_poll(e, events);
    } else {
        /* hiredis reads at most 16 KiB a call: past the cap by that much
         * at most when the check fails the connection. */
        if (e->ac != NULL && (events & UV_READABLE)) {
            redisAsyncHandleRead(e->ac);
            if (!tls_done(e))
                cap_failed(e);
        }
        if (!tls_done(e) && (events & UV_WRITABLE))
            redisAsyncHandleWrite(e->ac);
    }
    e->held--;
    commit(e);
}

static void commit(uvev_t *e)
{
    int want;

    if (e->ac == NULL || e->held > 0 || (want = wanted(e)) == e->active)
        return;
    e->active = want;
    if (e->active)
        uv_poll_start(&e->poll, e->active, on_poll);
    else
        uv_poll_stop(&e->poll);
}

static void update(uvev_t *e, int add, int del)
{
    if (e->ac == NULL)
        return;
    e->events = (e->events | add) & ~del;
    commit(e);
}

static void add_read(void *p)
{
    update(p, UV_READABLE, 0);
}

static void del_read(void *p)
{
    update(p, 0, UV_READABLE);
}

static void add_write(void *p)
{
    update(p, UV_WRITABLE, 0);
}

static void del_write(void *p)
{
    update(p, 0, UV_WRITABLE);
}

static void on_closed(uv_handle_t *h)
{
    uvev_t *e = h->data;

    e->closed(e->arg);
    rls_redis_tls_conn_free(e->tls);
    free(e);
}

/* hiredis is letting go of the context; it may say so twice. */
static void cleanup(void *p)
{
    uvev_t *e = p;

    if (e->ac == NULL)
        return;
    e->ac = NULL;
    uv_close((uv_handle_t *)&e->poll, on_closed);
}

void rls_redis_uv_hold(redisAsyncContext *ac)
{
    uvev_t *e = ac->ev.data;

    e->held++;
}

void rls_redis_uv_release(redisAsyncContext *ac, int write_now)
{
    uvev_t *e = ac->ev.data;

    /* hiredis may free the context inside the write (a write error), and
     * then it has already called cleanup: e outlives the context until
     * the poll handle's close callback, so it is still safe to touch. */
    if (write_now && e->ac != NULL && e->tls == NULL &&
        (e->events & UV_WRITABLE))
        redisAsyncHandleWrite(ac);
    else if (write_now && !tls_done(e) && e->tls != NULL &&
             e->phase == TLS_READY && sdslen(ac->c.obuf) > 0)
        tls_write(e);
    e->held--;
    commit(e);
}

int rls_redis_uv_attach(redisAsyncContext *ac, uv_loop_t *loop,
                        void (*closed)(void *arg), void *arg)
{
    uvev_t *e;

    if (ac->ev.data != NULL)
        return RL_EIO;
    if ((e = calloc(1, sizeof(*e))) == NULL)
        return RL_ENOMEM;
    if (uv_poll_init(loop, &e->poll, ac->c.fd) != 0) {
        free(e);
        return RL_EIO;
    }
    e->poll.data = e;
    e->ac = ac;
    e->closed = closed;
    e->arg = arg;
    ac->ev.data = e;
    ac->ev.addRead = add_read;
    ac->ev.delRead = del_read;
    ac->ev.addWrite = add_write;
    ac->ev.delWrite = del_write;
    ac->ev.cleanup = cleanup;
    return 0;
}

int rls_redis_uv_use_tls(redisAsyncContext *ac, const rls_redis_tls_t *tls,
                         const char *host)
{
    uvev_t *e = ac->ev.data;

    if ((e->tls = rls_redis_tls_conn_new(tls, host)) == NULL)
        return RL_ENOMEM;
    e->phase = TLS_TCP;
    commit(e);
    return 0;
}

void rls_redis_uv_cap(redisAsyncContext *ac, size_t max, uint64_t *count)
{
    uvev_t *e = ac->ev.data;

    rls_redis_reply_cap_attach(ac->c.reader, &e->cap, max, count);
    snprintf(e->cap_why, sizeof(e->cap_why),
             "a reply went past the cap (%zu bytes, %zu a line)", max,
             max < RLS_REDIS_LINE_MAX ? max : RLS_REDIS_LINE_MAX);
    e->capped = 1;
}

const char *rls_redis_uv_cap_why(const redisAsyncContext *ac)
{
    const uvev_t *e = ac->ev.data;

    return e != NULL && e->capped && e->cap.over ? e->cap_why : NULL;
}

const char *rls_redis_uv_timeout_why(const redisAsyncContext *ac)
{
    const uvev_t *e = ac->ev.data;

    if (e != NULL && e->tls != NULL && e->phase == TLS_HANDSHAKE)
        return "TLS handshake timed out (is that port serving TLS?)";
    return "connect timed out";
}
