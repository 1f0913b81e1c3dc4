/* Binding a TCP listener. */
#ifndef RLS_NET_LISTEN_H
#define RLS_NET_LISTEN_H

#include <uv.h>

/* Resolves host (a name or a literal; a blocking lookup, for startup only),
 * binds tcp to host:port and listens. Returns 0 or a negative libuv error
 * (EADDRINUSE, EADDRNOTAVAIL, EAI_NONAME...). */
/* --reuseport: every listener bound from then on has SO_REUSEPORT, so
 * that several processes can bind one port (the kernel spreads new
 * connections among them). */
void rls_listen_set_reuseport(int on);

int rls_listen(uv_tcp_t *tcp, const char *host, int port, int backlog,
               uv_connection_cb cb);

/* The local port tcp is bound to (the one the system picked when it was
 * asked for port 0), or a negative libuv error. */
int rls_listen_port(const uv_tcp_t *tcp);

/* The address of tcp's peer ("10.0.0.7"), or "?" when it has none any
 * more, for a log line about an accepted connection. */
void rls_peer_name(const uv_tcp_t *tcp, char *out, size_t outlen);

#endif
