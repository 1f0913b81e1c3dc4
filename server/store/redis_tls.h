/* TLS to Redis (redis_tls.c): OpenSSL under our own transport, because
 * Debian 12's hiredis 0.14 has none.
 *
 * Two layers. A configuration (rls_redis_tls_t) is built once from the
 * flags: the SSL_CTX with its trust anchors, the optional client
 * certificate, TLS 1.2 at least, and whether and against which name the
 * server's certificate is checked. A connection (rls_redis_tls_conn_t) is
 * one SSL session over a socket the caller owns and polls; it does no
 * waiting of its own. Ciphertext passes through an OpenSSL BIO pair: the
 * socket is read straight into the pair's buffer and written straight
 * from it (BIO_nwrite0 / BIO_nread0), so a batch is copied only where TLS
 * itself must: encrypted into the record buffer and the pair.
 *
 * This layer knows nothing of hiredis: redis_uv.c (async) and
 * redis_sync.c (blocking) put RESP on it. */
#ifndef RLS_REDIS_TLS_H
#define RLS_REDIS_TLS_H

#include <stddef.h>

/* What the flags say (--redis-tls-*). Every field may be NULL or 0. */
typedef struct rls_redis_tls_opts_s {
    const char *ca_file;     /* PEM trust anchors; NULL: the system's */
    const char *cert_file;   /* PEM client certificate (chain), or NULL */
    const char *key_file;    /* its private key; with cert_file */
    const char *server_name; /* SNI and the name checked; NULL: the host */
    int insecure;            /* 1: no certificate check at all */
} rls_redis_tls_opts_t;

typedef struct rls_redis_tls_s rls_redis_tls_t;
typedef struct rls_redis_tls_conn_s rls_redis_tls_conn_t;

/* The longest reason a connection gives for failing, with its NUL. */
#define RLS_REDIS_TLS_WHY_MAX 160

/* Builds the configuration. Checks what can be checked before any
 * connection: the files are readable PEM and the key matches the
 * certificate. Returns 0 and *out (free it with rls_redis_tls_free), or
 * RL_EINVAL / RL_ENOMEM with one line in err naming the flag and the file
 * (never a key's contents). */
int rls_redis_tls_new(const rls_redis_tls_opts_t *o, rls_redis_tls_t **out,
                      char *err, size_t errlen);

/* Frees the configuration. Connections made from it keep what they need
 * (the SSL_CTX is reference counted), but new ones cannot be made.
 * Accepts NULL. */
void rls_redis_tls_free(rls_redis_tls_t *t);

/* A client session for `host` (a name or an IP literal, as connected to):
 * SNI is the server name, or the host when it is a name; the certificate
 * must match it (an IP literal against the certificate's IP addresses),
 * unless insecure. Returns NULL on allocation failure. */
rls_redis_tls_conn_t *rls_redis_tls_conn_new(const rls_redis_tls_t *t,
                                             const char *host);

/* Frees a session; accepts NULL. Sends nothing (no close_notify): the
 * caller is closing the socket anyway. */
void rls_redis_tls_conn_free(rls_redis_tls_conn_t *s);

/* One step of the handshake on the non-blocking socket fd. Returns 0 once
 * it is complete, RL_EAGAIN while it waits for the socket (poll it for
 * reading, and for writing too while rls_redis_tls_conn_pending), or
 * RL_EIO with the reason in rls_redis_tls_conn_why (e.g. "certificate
 * verify failed: hostname mismatch"). */
int rls_redis_tls_conn_handshake(rls_redis_tls_conn_t *s, int fd);

/* Encrypts from buf[0, len) and sends on fd, as much as the socket takes.
 * *taken is how many plaintext bytes were consumed (they must not be
 * offered again; what is not taken must be offered again, unchanged, at
 * the same or a moved address). Returns 0 (ciphertext may remain: see
 * rls_redis_tls_conn_pending) or RL_EIO. */
int rls_redis_tls_conn_write(rls_redis_tls_conn_t *s, int fd, const char *buf,
                             size_t len, size_t *taken);

/* Reads what the socket has (one recv) and decrypts it, calling
 * feed(arg, data, n) for each piece of plaintext, in order. Returns 0,
 * RL_ECLOSED when the server closed the connection (after feeding what
 * came before), or RL_EIO. */
int rls_redis_tls_conn_read(rls_redis_tls_conn_t *s, int fd,
                            void (*feed)(void *arg, const char *p, size_t n),
                            void *arg);

/* 1 while ciphertext waits for the socket to be writable. */
int rls_redis_tls_conn_pending(const rls_redis_tls_conn_t *s);

/* Why the last call failed, in one line; "" if none did. */
const char *rls_redis_tls_conn_why(const rls_redis_tls_conn_t *s);

#endif
