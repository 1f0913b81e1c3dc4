/* Non-blocking TCP sockets, used by both clients: the blocking one waits
 * with poll(), the async one with a uv_poll_t. Owning the socket (rather
 * than a uv_tcp_t) lets every send carry MSG_NOSIGNAL, so a server that
 * goes away can never kill the caller's process with SIGPIPE. */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include "rlc_int.h"

int rlc__errno(int err)
{
    switch (err) {
    case ETIMEDOUT:
        return RLC_ETIMEDOUT;
    case ECONNREFUSED:
    case ECONNRESET:
    case ECONNABORTED:
    case EPIPE:
    case ENOTCONN:
        return RLC_ECLOSED;
    case ENOMEM:
    case ENOBUFS:
        return RLC_ENOMEM;
    default:
        return RLC_EIO;
    }
}

int rlc__sock_connect(const rlc__addr_t *a, int *fd)
{
    int s, one = 1, flags;

    *fd = -1;
    s = socket(a->sa.ss_family, SOCK_STREAM, 0);
    if (s < 0)
        return rlc__errno(errno);
    flags = fcntl(s, F_GETFL);
    if (flags < 0 || fcntl(s, F_SETFL, flags | O_NONBLOCK) < 0 ||
        fcntl(s, F_SETFD, FD_CLOEXEC) < 0) {
        int err = errno;
        close(s);
        return rlc__errno(err);
    }
    /* Checks are small and latency is the point: never wait for Nagle. */
    setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));

    if (connect(s, (const struct sockaddr *)&a->sa, a->len) == 0) {
        *fd = s;
        return RLC_OK;
    }
    if (errno == EINPROGRESS || errno == EINTR) {
        *fd = s;
        return RLC_EAGAIN;
    }
    int err = errno;
    close(s);
    return rlc__errno(err);
}

int rlc__sock_finish(int fd)
{
    int err = 0;
    socklen_t len = sizeof(err);

    if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) < 0)
        return rlc__errno(errno);
    return err == 0 ? RLC_OK : rlc__errno(err);
}
