/* A blocking Redis connection, plain or TLS: see redis_sync.h.
 *
 * Plain connections are hiredis's own blocking context. Over TLS the
 * socket is made non-blocking and each step waits with poll() for at
 * most the timeout: the same session code as the async store
 * (redis_tls.c), so both speak TLS the same way. Either way the reader
 * works under the data nodes' cap (redis_reply_alloc.h), checked after
 * every read, so a reply hiredis 0.14 would buffer without end (a
 * "$4000000000" header, a line that never ends) fails the connection
 * instead; replies keep hiredis's own objects (freeReplyObject). */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

#include <hiredis/sds.h>

#include "rl_error.h"
#include "store/redis_reply_alloc.h"
#include "store/redis_sync.h"

struct rls_redis_sync_s {
    redisContext *rc;
    rls_redis_tls_conn_t *tls; /* NULL: plain */
    rls_redis_reply_cap_t cap;
    int timeout_ms;
    char why[RLS_REDIS_TLS_WHY_MAX];
};

/* Waits until fd is ready for `events`. Returns 0, or RL_ETIMEDOUT /
 * RL_EIO with why set. */
static int wait_fd(rls_redis_sync_t *s, short events)
{
    struct pollfd p = {s->rc->fd, events, 0};
    int n;

    do
        n = poll(&p, 1, s->timeout_ms);
    while (n < 0 && errno == EINTR);
    if (n > 0)
        return 0;
    snprintf(s->why, sizeof(s->why), "%s",
             n == 0 ? "timed out" : strerror(errno));
    return n == 0 ? RL_ETIMEDOUT : RL_EIO;
}

static int tls_failed(rls_redis_sync_t *s)
{
    snprintf(s->why, sizeof(s->why), "%s", rls_redis_tls_conn_why(s->tls));
    return RL_EIO;
}

static int handshake(rls_redis_sync_t *s)
{
    int rc;

    while ((rc = rls_redis_tls_conn_handshake(s->tls, s->rc->fd)) == RL_EAGAIN)
        if (wait_fd(s, (short)(POLLIN |
                               (rls_redis_tls_conn_pending(s->tls) ? POLLOUT
                                                                   : 0))) != 0)
            return RL_EIO;
    return rc == 0 ? 0 : tls_failed(s);
}

rls_redis_sync_t *rls_redis_sync_connect(const char *host, int port,
                                         const rls_redis_tls_t *tls,
                                         int timeout_ms, char *err,
                                         size_t errlen)
{
    struct timeval tv = {timeout_ms / 1000, (timeout_ms % 1000) * 1000};
    rls_redis_sync_t *s = calloc(1, sizeof(*s));
    int fl;

    if (s == NULL) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    s->timeout_ms = timeout_ms;
    s->rc = host[0] == '/' ? redisConnectUnixWithTimeout(host, tv)
                           : redisConnectWithTimeout(host, port, tv);
    if (s->rc == NULL || s->rc->err) {
        snprintf(err, errlen, "%s", s->rc ? s->rc->errstr : "out of memory");
        goto fail;
    }
    redisSetTimeout(s->rc, tv);
    rls_redis_reply_cap_wrap(s->rc->reader, &s->cap, RLS_REDIS_CAP_NODE, NULL);
    if (tls == NULL)
        return s;
    if ((s->tls = rls_redis_tls_conn_new(tls, host)) == NULL) {
        snprintf(err, errlen, "TLS: out of memory");
        goto fail;
    }
    if ((fl = fcntl(s->rc->fd, F_GETFL)) < 0 ||
        fcntl(s->rc->fd, F_SETFL, fl | O_NONBLOCK) < 0 || handshake(s) != 0) {
        snprintf(err, errlen, "%s", s->why[0] ? s->why : strerror(errno));
        goto fail;
    }
    return s;
fail:
    rls_redis_sync_free(s);
    return NULL;
}

int rls_redis_sync_append(rls_redis_sync_t *s, int argc, const char **argv,
                          const size_t *lens)
{
    return redisAppendCommandArgv(s->rc, argc, argv, lens) == REDIS_OK
               ? 0
               : RL_ENOMEM;
}

/* Sends hiredis's output buffer over TLS, waiting as needed. */
static int tls_send(rls_redis_sync_t *s)
{
    redisContext *c = s->rc;
    size_t taken;

    for (;;) {
        if (rls_redis_tls_conn_write(s->tls, c->fd, c->obuf, sdslen(c->obuf),
                                     &taken) != 0)
            return tls_failed(s);
        sdsrange(c->obuf, (int)taken, -1);
        if (sdslen(c->obuf) == 0 && !rls_redis_tls_conn_pending(s->tls))
            return 0;
        if (wait_fd(s, POLLOUT) != 0)
            return RL_EIO;
    }
}

static void feed(void *arg, const char *p, size_t n)
{
    redisReaderFeed(arg, p, n);
}

/* The reader failed the reply, or the cap did: says why. Returns NULL. */
static redisReply *reply_failed(rls_redis_sync_t *s)
{
    if (s->cap.over)
        snprintf(s->why, sizeof(s->why),
                 "a reply went past the cap (%zu bytes, %zu a line)",
                 s->cap.max, (size_t)RLS_REDIS_LINE_MAX);
    else
        snprintf(s->why, sizeof(s->why), "%s",
                 s->rc->errstr[0] ? s->rc->errstr : "no reply");
    return NULL;
}

/* hiredis's redisGetReply for a blocking context, with the cap checked
 * after each read (hiredis reads at most 16 KiB at a time). */
static redisReply *plain_reply(rls_redis_sync_t *s)
{
    redisContext *c = s->rc;
    void *reply = NULL;
    int done = 0;

    if (redisGetReplyFromReader(c, &reply) != REDIS_OK)
        return reply_failed(s);
    if (reply != NULL)
        return reply;
    do
        if (redisBufferWrite(c, &done) != REDIS_OK)
            return reply_failed(s);
    while (!done);
    for (;;) {
        if (redisBufferRead(c) != REDIS_OK ||
            redisGetReplyFromReader(c, &reply) != REDIS_OK)
            return reply_failed(s);
        if (reply != NULL)
            return reply;
        if (rls_redis_reply_cap_check(&s->cap, c->reader) != 0)
            return reply_failed(s);
    }
}

redisReply *rls_redis_sync_reply(rls_redis_sync_t *s)
{
    void *reply = NULL;
    int rc;

    s->why[0] = '\0';
    if (s->tls == NULL)
        return plain_reply(s);
    if (tls_send(s) != 0)
        return NULL;
    for (;;) {
        if (redisGetReplyFromReader(s->rc, &reply) != REDIS_OK)
            return reply_failed(s);
        if (reply != NULL)
            return reply;
        if (rls_redis_reply_cap_check(&s->cap, s->rc->reader) != 0)
            return reply_failed(s);
        if (wait_fd(s, POLLIN) != 0)
            return NULL;
        rc = rls_redis_tls_conn_read(s->tls, s->rc->fd, feed, s->rc->reader);
        if (rc != 0) {
            /* A reply may have come whole before the end. */
            if (redisGetReplyFromReader(s->rc, &reply) == REDIS_OK &&
                reply != NULL)
                return reply;
            tls_failed(s);
            return NULL;
        }
    }
}

redisReply *rls_redis_sync_command(rls_redis_sync_t *s, int argc,
                                   const char **argv, const size_t *lens)
{
    if (rls_redis_sync_append(s, argc, argv, lens) != 0) {
        snprintf(s->why, sizeof(s->why), "out of memory");
        return NULL;
    }
    return rls_redis_sync_reply(s);
}

const char *rls_redis_sync_errstr(const rls_redis_sync_t *s)
{
    return s->why;
}

void rls_redis_sync_free(rls_redis_sync_t *s)
{
    if (s == NULL)
        return;
    rls_redis_tls_conn_free(s->tls);
    if (s->rc != NULL)
        redisFree(s->rc);
    free(s);
}
