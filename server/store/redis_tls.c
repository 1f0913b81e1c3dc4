/* TLS to Redis over a socket the caller polls: see redis_tls.h.
 *
 * The SSL object writes its records into one end of a BIO pair; the
 * other end (net) is ours. Sending takes the ciphertext where it lies
 * (BIO_nread0), and receiving recv()s straight into the pair's free space
 * (BIO_nwrite0), so ciphertext is never copied between the socket and
 * OpenSSL. Every SSL call starts from an empty error queue, as
 * SSL_get_error requires. */
#include <arpa/inet.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include "base/ossl.h"
#include "rl_error.h"
#include "store/redis_tls.h"

/* Each direction of the pair: four full records. */
#define PAIR_BYTES 65536

struct rls_redis_tls_s {
    SSL_CTX *ctx;
    char *server_name; /* NULL: the host connected to */
    int insecure;
};

struct rls_redis_tls_conn_s {
    SSL *ssl;
    BIO *net;  /* our end of the pair; the SSL object owns the other */
    int heard; /* the server sent something */
    char why[RLS_REDIS_TLS_WHY_MAX];
};

/* ---- configuration ------------------------------------------------------*/

int rls_redis_tls_new(const rls_redis_tls_opts_t *o, rls_redis_tls_t **out,
                      char *err, size_t errlen)
{
    rls_redis_tls_t *t = calloc(1, sizeof(*t));
    int rc = RL_EINVAL;

    *out = NULL;
    ERR_clear_error();
    if (t == NULL || (t->ctx = SSL_CTX_new(TLS_client_method())) == NULL ||
        (o->server_name != NULL &&
         (t->server_name = strdup(o->server_name)) == NULL)) {
        snprintf(err, errlen, "TLS: out of memory");
        rc = RL_ENOMEM;
        goto fail;
    }
    t->insecure = o->insecure;
    SSL_CTX_set_min_proto_version(t->ctx, TLS1_2_VERSION);
    /* Partial writes: a big batch leaves record by record as the socket
     * takes it. Moving buffer: hiredis's output buffer may be reallocated
     * (a command appended) between a refused write and its retry. */
    SSL_CTX_set_mode(t->ctx, SSL_MODE_ENABLE_PARTIAL_WRITE |
                                 SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
    SSL_CTX_set_options(t->ctx, SSL_OP_NO_RENEGOTIATION);
    SSL_CTX_set_default_passwd_cb(t->ctx, rls_ossl_no_passphrase);
    SSL_CTX_set_verify(t->ctx, t->insecure ? SSL_VERIFY_NONE : SSL_VERIFY_PEER,
                       NULL);
    if (o->ca_file != NULL) {
        if (rls_ossl_readable("--redis-tls-ca", o->ca_file, err, errlen) != 0)
            goto fail;
        if (SSL_CTX_load_verify_locations(t->ctx, o->ca_file, NULL) != 1) {
            snprintf(err, errlen,
                     "--redis-tls-ca: no certificate loaded from '%s': %s",
                     o->ca_file, rls_ossl_reason("not PEM"));
            goto fail;
        }
    } else if (SSL_CTX_set_default_verify_paths(t->ctx) != 1) {
        snprintf(err, errlen,
                 "TLS: cannot load the system's CA "
                 "certificates; give --redis-tls-ca");
        goto fail;
    }
    if ((o->cert_file == NULL) != (o->key_file == NULL)) {
        snprintf(err, errlen,
                 "--redis-tls-cert and --redis-tls-key go "
                 "together");
        goto fail;
    }
    if (o->cert_file != NULL) {
        if (rls_ossl_readable("--redis-tls-cert", o->cert_file, err, errlen) !=
                0 ||
            rls_ossl_readable("--redis-tls-key", o->key_file, err, errlen) != 0)
            goto fail;
        /* The key first: a certificate loaded after a key it does not
         * match drops the key, which the check below then reports as a
         * mismatch (the other order fails as "key values mismatch"). The
         * reason only: never anything of the key itself. */
        if (SSL_CTX_use_PrivateKey_file(t->ctx, o->key_file,
                                        SSL_FILETYPE_PEM) != 1) {
            snprintf(err, errlen,
                     "--redis-tls-key: no usable private key in '%s' (PEM, "
                     "without a passphrase): %s",
                     o->key_file, rls_ossl_reason("not PEM"));
            goto fail;
        }
        if (SSL_CTX_use_certificate_chain_file(t->ctx, o->cert_file) != 1) {
            snprintf(err, errlen,
                     "--redis-tls-cert: no certificate in '%s': %s",
                     o->cert_file, rls_ossl_reason("not PEM"));
            goto fail;
        }
        if (SSL_CTX_check_private_key(t->ctx) != 1) {
            snprintf(err, errlen,
                     "--redis-tls-key: '%s' does not match the certificate "
                     "in '%s'",
                     o->key_file, o->cert_file);
            goto fail;
        }
    }
    ERR_clear_error();
    *out = t;
    return 0;
fail:
    ERR_clear_error();
    rls_redis_tls_free(t);
    return rc;
}

void rls_redis_tls_free(rls_redis_tls_t *t)
{
    if (t == NULL)
        return;
    SSL_CTX_free(t->ctx);
    free(t->server_name);
    free(t);
}

/* ---- sessions -----------------------------------------------------------*/

static int is_ip(const char *s)
{
    unsigned char a[16];

    return inet_pton(AF_INET, s, a) == 1 || inet_pton(AF_INET6, s, a) == 1;
}

rls_redis_tls_conn_t *rls_redis_tls_conn_new(const rls_redis_tls_t *t,
                                             const char *host)
{
    rls_redis_tls_conn_t *s = calloc(1, sizeof(*s));
    const char *name = t->server_name != NULL ? t->server_name : host;
    BIO *inner = NULL;

    if (s == NULL || (s->ssl = SSL_new(t->ctx)) == NULL ||
        BIO_new_bio_pair(&inner, PAIR_BYTES, &s->net, PAIR_BYTES) != 1)
        goto fail;
    SSL_set_bio(s->ssl, inner, inner);
    SSL_set_connect_state(s->ssl);
    /* SNI carries names only (RFC 6066); an IP literal is checked against
     * the certificate's IP addresses instead of its DNS names. */
    if (!is_ip(name) && SSL_set_tlsext_host_name(s->ssl, name) != 1)
        goto fail;
    if (!t->insecure && (is_ip(name) ? X509_VERIFY_PARAM_set1_ip_asc(
                                           SSL_get0_param(s->ssl), name)
                                     : SSL_set1_host(s->ssl, name)) != 1)
        goto fail;
    ERR_clear_error();
    return s;
fail:
    ERR_clear_error();
    rls_redis_tls_conn_free(s);
    return NULL;
}

void rls_redis_tls_conn_free(rls_redis_tls_conn_t *s)
{
    if (s == NULL)
        return;
    SSL_free(s->ssl); /* and the inner end of the pair */
    BIO_free(s->net);
    free(s);
}

const char *rls_redis_tls_conn_why(const rls_redis_tls_conn_t *s)
{
    return s->why;
}

int rls_redis_tls_conn_pending(const rls_redis_tls_conn_t *s)
{
    return BIO_ctrl_pending(s->net) > 0;
}

/* Records why an SSL call that returned ret failed. During a checked
 * handshake the verification result comes first: it says what the error
 * queue only calls "certificate verify failed". (Unchecked, as with
 * --redis-tls-insecure, the result still records what a check would have
 * found, which is not why anything failed.) */
static int ssl_failed(rls_redis_tls_conn_t *s, int ret, const char *during)
{
    long v = SSL_get_verify_result(s->ssl);
    int e = SSL_get_error(s->ssl, ret);

    if (v != X509_V_OK && !SSL_is_init_finished(s->ssl) &&
        (SSL_get_verify_mode(s->ssl) & SSL_VERIFY_PEER))
        snprintf(s->why, sizeof(s->why),
                 "TLS %s: certificate verify failed: %s", during,
                 X509_verify_cert_error_string(v));
    else if (e == SSL_ERROR_SSL || ERR_peek_error() != 0)
        snprintf(s->why, sizeof(s->why), "TLS %s: %s", during,
                 rls_ossl_reason("protocol error"));
    else if (e == SSL_ERROR_ZERO_RETURN || e == SSL_ERROR_SYSCALL)
        snprintf(s->why, sizeof(s->why),
                 "TLS %s: connection closed by the "
                 "server",
                 during);
    else
        snprintf(s->why, sizeof(s->why), "TLS %s: error %d", during, e);
    ERR_clear_error();
    return RL_EIO;
}

/* Records a socket error; errno stays err, for the caller to look at. */
static int sys_failed(rls_redis_tls_conn_t *s, const char *during, int err)
{
    snprintf(s->why, sizeof(s->why), "TLS %s: %s", during, strerror(err));
    errno = err;
    return RL_EIO;
}

static int fill(rls_redis_tls_conn_t *s, int fd);

/* A send refused because the server closed the connection: the server
 * may have said why first, in a TLS alert that is still readable (Redis
 * requiring a client certificate sends "certificate required" and closes
 * while our first commands are on their way, so the kernel answers them
 * with a reset). If it did, why becomes the alert. */
static void peer_reason(rls_redis_tls_conn_t *s, int fd)
{
    char why[sizeof(s->why)], buf[1024];
    int r;

    memcpy(why, s->why, sizeof(why));
    if (fill(s, fd) != 1) {
        memcpy(s->why, why, sizeof(why));
        return;
    }
    ERR_clear_error();
    while ((r = SSL_read(s->ssl, buf, sizeof(buf))) > 0)
        ;
    if (SSL_get_error(s->ssl, r) == SSL_ERROR_SSL)
        ssl_failed(s, r, SSL_is_init_finished(s->ssl) ? "read" : "handshake");
    else
        memcpy(s->why, why, sizeof(why));
    ERR_clear_error();
}

/* Sends the ciphertext waiting in the pair. Returns 0 when all of it
 * left, RL_EAGAIN when the socket took only part, or RL_EIO. */
static int flush(rls_redis_tls_conn_t *s, int fd)
{
    char *p;
    int n;
    ssize_t w;

    while ((n = BIO_nread0(s->net, &p)) > 0) {
        w = send(fd, p, (size_t)n, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return RL_EAGAIN;
        if (w < 0 && (errno == ECONNRESET || errno == EPIPE)) {
            sys_failed(s, "send", errno);
            peer_reason(s, fd);
            return RL_EIO;
        }
        if (w < 0)
            return sys_failed(s, "send", errno);
        BIO_nread(s->net, &p, (int)w);
    }
    return 0;
}

/* One recv into the pair's free space. Returns 1 when bytes came, 0 when
 * none did (nothing yet, or no room until SSL reads), RL_ECLOSED at end
 * of file, or RL_EIO. */
static int fill(rls_redis_tls_conn_t *s, int fd)
{
    char *p;
    int room = BIO_nwrite0(s->net, &p);
    ssize_t r;

    if (room <= 0)
        return 0;
    do
        r = recv(fd, p, (size_t)room, 0);
    while (r < 0 && errno == EINTR);
    if (r > 0) {
        BIO_nwrite(s->net, &p, (int)r);
        s->heard = 1;
        return 1;
    }
    if (r == 0)
        return RL_ECLOSED;
    if (errno == EAGAIN || errno == EWOULDBLOCK)
        return 0;
    return sys_failed(s, "recv", errno);
}

int rls_redis_tls_conn_handshake(rls_redis_tls_conn_t *s, int fd)
{
    int r, e, rc;

    for (;;) {
        if ((rc = flush(s, fd)) == RL_EIO)
            return RL_EIO;
        ERR_clear_error();
        if ((r = SSL_do_handshake(s->ssl)) == 1)
            return flush(s, fd) == RL_EIO ? RL_EIO : 0;
        e = SSL_get_error(s->ssl, r);
        if (e == SSL_ERROR_WANT_WRITE) {
            if (rc == RL_EAGAIN)
                return RL_EAGAIN;
            continue;
        }
        if (e != SSL_ERROR_WANT_READ)
            return ssl_failed(s, r, "handshake");
        /* Our flight must be out before the answer can come. */
        if ((rc = flush(s, fd)) == RL_EIO)
            return RL_EIO;
        if ((rc = fill(s, fd)) == RL_EIO && errno != ECONNRESET)
            return RL_EIO;
        if (rc == RL_EIO || rc == RL_ECLOSED) {
            /* Closed (or reset: our hello was still unread) without a
             * word: maybe no TLS server at all. */
            snprintf(s->why, sizeof(s->why),
                     "TLS handshake: connection %s by the server%s",
                     rc == RL_EIO ? "reset" : "closed",
                     s->heard ? " midway"
                              : " (is it serving TLS on this port?)");
            return RL_EIO;
        }
        if (rc == 0)
            return RL_EAGAIN;
    }
}

int rls_redis_tls_conn_write(rls_redis_tls_conn_t *s, int fd, const char *buf,
                             size_t len, size_t *taken)
{
    size_t off = 0;
    int r, e, rc;

    for (;;) {
        if ((rc = flush(s, fd)) == RL_EIO)
            goto done;
        if (off == len)
            break;
        ERR_clear_error();
        r = SSL_write(s->ssl, buf + off,
                      len - off > INT_MAX ? INT_MAX : (int)(len - off));
        if (r > 0) {
            off += (size_t)r;
            continue;
        }
        e = SSL_get_error(s->ssl, r);
        /* The pair is full: go on while the socket drains it. */
        if (e == SSL_ERROR_WANT_WRITE && rc == 0)
            continue;
        if (e == SSL_ERROR_WANT_WRITE || e == SSL_ERROR_WANT_READ)
            break;
        rc = ssl_failed(s, r, "write");
        goto done;
    }
    rc = 0;
done:
    *taken = off;
    return rc;
}

int rls_redis_tls_conn_read(rls_redis_tls_conn_t *s, int fd,
                            void (*feed)(void *arg, const char *p, size_t n),
                            void *arg)
{
    char buf[16384];
    int got, r, e, closed = 0;

    if ((got = fill(s, fd)) == RL_EIO)
        return RL_EIO;
    for (;;) {
        ERR_clear_error();
        r = SSL_read(s->ssl, buf, sizeof(buf));
        if (r > 0) {
            feed(arg, buf, (size_t)r);
            continue;
        }
        e = SSL_get_error(s->ssl, r);
        if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE)
            break;
        if (e == SSL_ERROR_ZERO_RETURN) { /* close_notify */
            closed = 1;
            break;
        }
        return ssl_failed(s, r, "read");
    }
    if (closed || got == RL_ECLOSED) {
        snprintf(s->why, sizeof(s->why),
                 "TLS: connection closed by the "
                 "server");
        return RL_ECLOSED;
    }
    /* A post-handshake message (a key update) may want an answer. */
    return flush(s, fd) == RL_EIO ? RL_EIO : 0;
}
