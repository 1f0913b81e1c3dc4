/* Binding a TCP listener, shared by every listener of the server. */
#define _GNU_SOURCE /* SO_REUSEPORT */
#include "net/listen.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* --reuseport: set once at start, before any listener binds. */
static int reuseport;

void rls_listen_set_reuseport(int on)
{
    reuseport = on;
}

/* Binds a socket of its own with SO_REUSEPORT (libuv's bind cannot set
 * it before 1.49) and gives it to tcp. Returns 0 or a libuv error. */
static int bind_reuseport(uv_tcp_t *tcp, const struct addrinfo *ai)
{
    int fd, on = 1, rc;

    fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0)
        return uv_translate_sys_error(errno);
    if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on)) != 0 ||
        setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &on, sizeof(on)) != 0 ||
        bind(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
        rc = uv_translate_sys_error(errno);
        close(fd);
        return rc;
    }
    if ((rc = uv_tcp_open(tcp, fd)) != 0)
        close(fd);
    return rc;
}

int rls_listen(uv_tcp_t *tcp, const char *host, int port, int backlog,
               uv_connection_cb cb)
{
    struct addrinfo hints, *ai;
    char service[8];
    int rc;

    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    snprintf(service, sizeof(service), "%d", port);
    if (getaddrinfo(host, service, &hints, &ai) != 0)
        return UV_EAI_NONAME;
    rc = reuseport ? bind_reuseport(tcp, ai) : uv_tcp_bind(tcp, ai->ai_addr, 0);
    freeaddrinfo(ai);
    if (rc != 0)
        return rc;
    /* Errors such as EADDRINUSE surface at listen on Linux. */
    return uv_listen((uv_stream_t *)tcp, backlog, cb);
}

int rls_listen_port(const uv_tcp_t *tcp)
{
    struct sockaddr_storage ss;
    int len = (int)sizeof(ss), rc;

    rc = uv_tcp_getsockname(tcp, (struct sockaddr *)&ss, &len);
    if (rc != 0)
        return rc;
    if (ss.ss_family == AF_INET)
        return ntohs(((struct sockaddr_in *)&ss)->sin_port);
    if (ss.ss_family == AF_INET6)
        return ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
    return UV_EAFNOSUPPORT;
}

void rls_peer_name(const uv_tcp_t *tcp, char *out, size_t outlen)
{
    struct sockaddr_storage ss;
    int len = sizeof(ss);
    char ip[64] = "?";

    if (uv_tcp_getpeername(tcp, (struct sockaddr *)&ss, &len) == 0) {
        if (ss.ss_family == AF_INET6)
            uv_ip6_name((struct sockaddr_in6 *)&ss, ip, sizeof(ip));
        else
            uv_ip4_name((struct sockaddr_in *)&ss, ip, sizeof(ip));
    }
    snprintf(out, outlen, "%s", ip);
}
