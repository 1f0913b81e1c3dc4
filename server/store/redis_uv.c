/* hiredis on libuv, reporting poll errors; see redis_uv.h. */
#include <stdlib.h>

#include "rl_error.h"
#include "store/redis_uv.h"

typedef struct uvev_s {
    uv_poll_t poll;
    redisAsyncContext *ac; /* NULL once hiredis let go of it */
    int events;            /* what hiredis wants watched */
    int active;            /* what the poll handle watches */
    int held;              /* > 0: changes wait for commit() */
    void (*closed)(void *arg);
    void *arg;
} uvev_t;

/* Hands the wanted events to libuv, if they changed. Every uv_poll_start
 * costs epoll_ctl calls at the next poll (libuv 1.44 stops the watcher
 * first, so even an unchanged set is re-added: EEXIST, then MOD), and
 * hiredis asks for write interest and drops it again around every
 * command; so changes made while hiredis is driven from our own code are
 * held and only the net change is applied, usually none. */
static void commit(uvev_t *e);

static void on_poll(uv_poll_t *h, int status, int events)
{
    uvev_t *e = h->data;

    /* On POLLERR libuv stops the handle and reports an error with no
     * events; hiredis finds the socket error itself when it tries what it
     * was waiting for, and fails the connection. */
    if (status < 0) {
        events = e->active;
        e->active = 0; /* libuv stopped the handle */
    }
    e->held++;
    if (e->ac != NULL && (events & UV_READABLE))
        redisAsyncHandleRead(e->ac);
    if (e->ac != NULL && (events & UV_WRITABLE))
        redisAsyncHandleWrite(e->ac);
    e->held--;
    commit(e);
}

static void commit(uvev_t *e)
{
    if (e->ac == NULL || e->held > 0 || e->events == e->active)
        return;
    e->active = e->events;
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
    if (write_now && e->ac != NULL && (e->events & UV_WRITABLE))
        redisAsyncHandleWrite(ac);
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
