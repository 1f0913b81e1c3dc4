/* floor_echo and floor_redis: the least a rate-limit server could do, as
 * the floor that run.sh reads rl-server's latency against.
 *
 *   floor_echo  --listen HOST:PORT
 *   floor_redis --listen HOST:PORT --redis HOST:PORT [--incr]
 *
 * One thread, epoll, any number of connections, pipelining. Per read from a
 * client connection, every whole CheckRequest frame is answered OK with the
 * request's id (and its limit and window echoed, so the answers weigh about
 * what rl-server's do), and the answers of one read go out in one write.
 * floor_redis (built with FLOOR_REDIS) first makes ONE blocking round trip
 * to Redis (PING, on a connection of its own) per read that held a frame:
 * one hop to Redis per batch, as rl-server makes, and nothing else.
 * With --incr that round trip is instead one pipelined INCR per frame, of
 * "floor:" and the frame's key: the least Redis work that counts every
 * decision (no expiry, no limit), the floor of Redis's CPU per decision at
 * that load.
 *
 * Uses only lib/ (frames, message codec, buffers) and hiredis; none of
 * rl-server's or librlc's code. Not a service: a broken frame closes its
 * connection, a failed Redis round trip ends the process (the benchmark
 * then reports the run as failed). */
#define _GNU_SOURCE /* accept4 */
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#ifdef FLOOR_REDIS
#include <hiredis/hiredis.h>
#endif

#include "rl_buf.h"
#include "rl_error.h"
#include "rl_frame.h"
#include "rl_msg.h"
#include "rl_parse.h"

#define READ_CHUNK 65536
#define IN_MAX (4 * 1024 * 1024)  /* unread input held per connection */
#define OUT_MAX (16 * 1024 * 1024) /* unsent answers: a client not reading */
#define MAX_EVENTS 64

typedef struct fconn_s {
    int fd;
    int want_out; /* EPOLLOUT registered: out has bytes the socket refused */
    rl_buf_t in, out;
} fconn_t;

static int ep;
#ifdef FLOOR_REDIS
static redisContext *redis;
static int incr; /* --incr: one INCR per frame instead of one PING */
#endif

static void conn_close(fconn_t *c)
{
    close(c->fd); /* also removes it from the epoll set */
    rl_buf_free(&c->in);
    rl_buf_free(&c->out);
    free(c);
}

/* Sends what out holds; registers EPOLLOUT for the rest, if any. Returns 0
 * or RL_EIO (the connection is broken). */
static int conn_flush(fconn_t *c)
{
    struct epoll_event ev;
    int want;

    while (rl_buf_len(&c->out) > 0) {
        ssize_t n = send(c->fd, rl_buf_rptr(&c->out), rl_buf_len(&c->out),
                         MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            break;
        if (n <= 0)
            return RL_EIO;
        rl_buf_consume(&c->out, (size_t)n);
    }
    want = rl_buf_len(&c->out) > 0;
    if (want != c->want_out) {
        ev.events = EPOLLIN | (want ? EPOLLOUT : 0);
        ev.data.ptr = c;
        if (epoll_ctl(ep, EPOLL_CTL_MOD, c->fd, &ev) != 0)
            return RL_EIO;
        c->want_out = want;
    }
    return 0;
}

#ifdef FLOOR_REDIS
/* The one Redis round trip of a read. Ends the process when Redis fails:
 * a floor measured without its hop would be no floor. */
static void redis_hop(void)
{
    redisReply *r = redisCommand(redis, "PING");

    if (r == NULL || r->type != REDIS_REPLY_STATUS) {
        fprintf(stderr, "floor_redis: PING failed: %s\n",
                r == NULL ? redis->errstr : "unexpected reply");
        exit(1);
    }
    freeReplyObject(r);
}

/* --incr: appends INCR floor:KEY for one frame's key (sent by incr_hop). */
static void incr_add(const rl_check_t *chk)
{
    if (redisAppendCommand(redis, "INCR floor:%b", chk->key, chk->key_len) !=
        REDIS_OK) {
        fprintf(stderr, "floor_redis: out of memory\n");
        exit(1);
    }
}

/* --incr: the round trip of a read's n appended INCRs: one write, then
 * their n replies. */
static void incr_hop(int n)
{
    redisReply *r;

    while (n-- > 0) {
        if (redisGetReply(redis, (void **)&r) != REDIS_OK ||
            r->type != REDIS_REPLY_INTEGER) {
            fprintf(stderr, "floor_redis: INCR failed: %s\n",
                    redis->err ? redis->errstr : "unexpected reply");
            exit(1);
        }
        freeReplyObject(r);
    }
}
#endif

/* One read, then an answer for every whole frame buffered. Returns 0, or a
 * negative RL_E* when the connection should be closed (end of stream, a
 * broken frame, a buffer over its cap). */
static int conn_read(fconn_t *c)
{
    rl_frame_t f;
    rl_check_t chk;
    rl_result_t res;
    uint8_t *p;
    ssize_t n;
    int rc, frames = 0;

    if ((rc = rl_buf_reserve(&c->in, READ_CHUNK, &p)) != 0)
        return rc;
    do
        n = recv(c->fd, p, READ_CHUNK, 0);
    while (n < 0 && errno == EINTR);
    if (n < 0)
        return errno == EAGAIN || errno == EWOULDBLOCK ? 0 : RL_EIO;
    if (n == 0)
        return RL_EIO;
    rl_buf_commit(&c->in, (size_t)n);

    while ((rc = rl_frame_take(&c->in, RL_FRAME_MAX_DEFAULT, &f)) == RL_OK) {
        if (rl_check_decode(f.payload, f.len, &chk) != 0)
            return RL_EDECODE;
        memset(&res, 0, sizeof(res));
        res.id = chk.id;
        res.code = RL_CODE_OK;
        res.limit = chk.limit;
        res.used = 1;
        res.remaining = chk.limit > 0 ? chk.limit - 1 : 0;
        res.window_s = chk.window_s;
        if ((rc = rl_result_put(&c->out, &res)) != 0)
            return rc;
#ifdef FLOOR_REDIS
        if (incr)
            incr_add(&chk);
#endif
        frames++;
    }
    if (rc != RL_EAGAIN)
        return rc;
    if (frames == 0)
        return 0;
#ifdef FLOOR_REDIS
    if (incr)
        incr_hop(frames);
    else
        redis_hop();
#endif
    return conn_flush(c);
}

static int listen_on(const char *host, int port)
{
    struct sockaddr_in sa;
    int fd, one = 1;

    memset(&sa, 0, sizeof(sa));
    sa.sin_family = AF_INET;
    sa.sin_port = htons((uint16_t)port);
    if (inet_pton(AF_INET, host, &sa.sin_addr) != 1) {
        fprintf(stderr, "floor: --listen wants an IPv4 address, got '%s'\n",
                host);
        return -1;
    }
    fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0 ||
        listen(fd, 512) != 0) {
        fprintf(stderr, "floor: listen on %s:%d: %s\n", host, port,
                strerror(errno));
        close(fd);
        return -1;
    }
    return fd;
}

/* --port-file: "listen HOST:PORT" with the port bound, written whole
 * (renamed into place) as rl-server writes its own. */
static int write_port_file(const char *path, const char *host, int lfd)
{
    struct sockaddr_in sa;
    socklen_t len = sizeof(sa);
    char tmp[4096];
    FILE *f;
    int ok;

    if (getsockname(lfd, (struct sockaddr *)&sa, &len) != 0 ||
        snprintf(tmp, sizeof(tmp), "%s.tmp", path) >= (int)sizeof(tmp) ||
        (f = fopen(tmp, "w")) == NULL)
        return -1;
    fprintf(f, "listen %s:%d\n", host, ntohs(sa.sin_port));
    ok = fclose(f) == 0;
    return ok && rename(tmp, path) == 0 ? 0 : -1;
}

static void accept_all(int lfd)
{
    struct epoll_event ev;
    fconn_t *c;
    int fd, one = 1;

    for (;;) {
        fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0)
            return; /* EAGAIN, or a transient error: next wakeup retries */
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        c = calloc(1, sizeof(*c));
        if (c == NULL) {
            close(fd);
            continue;
        }
        c->fd = fd;
        rl_buf_init(&c->in, IN_MAX);
        rl_buf_init(&c->out, OUT_MAX);
        ev.events = EPOLLIN;
        ev.data.ptr = c;
        if (epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev) != 0)
            conn_close(c);
    }
}

static void usage(void)
{
#ifdef FLOOR_REDIS
    fprintf(stderr, "usage: floor_redis --listen HOST:PORT --redis HOST:PORT "
                    "[--incr] [--port-file FILE]\n");
#else
    fprintf(stderr, "usage: floor_echo --listen HOST:PORT [--port-file FILE]\n");
#endif
    exit(2);
}

int main(int argc, char **argv)
{
    struct epoll_event evs[MAX_EVENTS], ev;
    char host[256];
    const char *listen_arg = NULL, *redis_arg = NULL, *port_file = NULL;
    int port, lfd, i, n;

    for (i = 1; i < argc; i++) {
#ifdef FLOOR_REDIS
        if (strcmp(argv[i], "--incr") == 0) {
            incr = 1;
            continue;
        }
#endif
        if (i + 1 == argc)
            usage();
        if (strcmp(argv[i], "--listen") == 0)
            listen_arg = argv[++i];
        else if (strcmp(argv[i], "--redis") == 0)
            redis_arg = argv[++i];
        else if (strcmp(argv[i], "--port-file") == 0)
            port_file = argv[++i];
        else
            usage();
    }
    if (listen_arg == NULL)
        usage();
#ifdef FLOOR_REDIS
    if (redis_arg == NULL ||
        rl_parse_hostport(redis_arg, host, sizeof(host), &port) != RL_OK)
        usage();
    redis = redisConnect(host, port);
    if (redis == NULL || redis->err) {
        fprintf(stderr, "floor_redis: cannot connect to %s: %s\n", redis_arg,
                redis != NULL ? redis->errstr : "out of memory");
        return 1;
    }
    redis_hop();
#else
    if (redis_arg != NULL)
        usage();
#endif
    if (rl_parse_listen(listen_arg, host, sizeof(host), &port) != RL_OK)
        usage();
    if ((lfd = listen_on(host, port)) < 0)
        return 1;
    if (port_file != NULL && write_port_file(port_file, host, lfd) != 0) {
        fprintf(stderr, "floor: cannot write %s\n", port_file);
        return 1;
    }
    if ((ep = epoll_create1(EPOLL_CLOEXEC)) < 0)
        return 1;
    ev.events = EPOLLIN;
    ev.data.ptr = NULL;
    if (epoll_ctl(ep, EPOLL_CTL_ADD, lfd, &ev) != 0)
        return 1;

    for (;;) {
        n = epoll_wait(ep, evs, MAX_EVENTS, -1);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return 1;
        for (i = 0; i < n; i++) {
            fconn_t *c = evs[i].data.ptr;
            int rc = 0;
            if (c == NULL) {
                accept_all(lfd);
                continue;
            }
            if (evs[i].events & EPOLLOUT)
                rc = conn_flush(c);
            if (rc == 0 && (evs[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR)))
                rc = conn_read(c);
            if (rc != 0)
                conn_close(c);
        }
    }
}
