/* TLS for both clients: OpenSSL over the client's own non-blocking socket.
 *
 * The SSL object reads and writes the socket through a BIO of ours that
 * sends with MSG_NOSIGNAL (OpenSSL's socket BIO uses write(), which raises
 * SIGPIPE when the server has gone), so the library's promise never to
 * raise SIGPIPE holds over TLS too. Everything else is OpenSSL's: the
 * handshake, certificate and name verification, records. Both clients wait
 * for what OpenSSL asks for (readable or writable) with their own poll. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include "rl_parse.h"
#include "rlc_int.h"

struct rlc__tls_s {
    SSL_CTX *ctx;
    BIO_METHOD *bio;
    char *server_name; /* NULL: each address's host */
    int insecure;
};

/* ---- the BIO: send(MSG_NOSIGNAL) and recv on the client's fd ------------- */

static int bio_fd(BIO *b)
{
    return (int)(intptr_t)BIO_get_data(b);
}

static long sock_io(int fd, void *p, size_t n, int out);

/* What OpenSSL wants of a BIO: bytes moved, 0 at the end of stream, or -1
 * with errno set and, for "would block", the retry flag. */
static int bio_io(BIO *b, void *p, int n, int out)
{
    long r;

    BIO_clear_retry_flags(b);
    r = sock_io(bio_fd(b), p, (size_t)n, out);
    if (r >= 0)
        return (int)r;
    if (r == RLC_EAGAIN) {
        if (out)
            BIO_set_retry_write(b);
        else
            BIO_set_retry_read(b);
    }
    return -1;
}

static int bio_write(BIO *b, const char *p, int n)
{
    return bio_io(b, (void *)p, n, 1);
}

static int bio_read(BIO *b, char *p, int n)
{
    return bio_io(b, p, n, 0);
}

static long bio_ctrl(BIO *b, int cmd, long num, void *ptr)
{
    (void)b;
    (void)num;
    (void)ptr;
    return cmd == BIO_CTRL_FLUSH ? 1 : 0;
}

static int bio_create(BIO *b)
{
    BIO_set_init(b, 1);
    return 1;
}

/* ---- configuration ----------------------------------------------------- */

/* OpenSSL's reason for its last error, its queue emptied: the system's
 * words when a system call failed (a file that cannot be opened). */
static void ossl_why(char *why, size_t n, const char *what)
{
    const char *r = NULL, *sys = NULL;
    unsigned long e;

    while ((e = ERR_get_error()) != 0) {
        if (ERR_SYSTEM_ERROR(e))
            sys = strerror(ERR_GET_REASON(e));
        else if (ERR_reason_error_string(e) != NULL)
            r = ERR_reason_error_string(e);
    }
    if (sys != NULL)
        r = sys;
    snprintf(why, n, "%s%s%s", what, r != NULL ? ": " : "", r != NULL ? r : "");
}

static int no_passphrase(char *buf, int size, int rw, void *u)
{
    (void)buf;
    (void)size;
    (void)rw;
    (void)u;
    return 0; /* encrypted keys are refused, never prompted for */
}

void rlc__tls_free(rlc__tls_t *t)
{
    if (t == NULL)
        return;
    SSL_CTX_free(t->ctx);
    BIO_meth_free(t->bio);
    free(t->server_name);
    free(t);
}

int rlc__tls_new(const rlc_options_t *o, rlc__tls_t **out, char *why,
                 size_t whylen)
{
    static const unsigned char alpn[] = {3, 'r', 'l', '1'};
    rlc__tls_t *t;

    *out = NULL;
    why[0] = '\0';
    if (!o->tls && o->tls_ca_file == NULL && o->tls_cert_file == NULL &&
        o->tls_key_file == NULL && o->tls_server_name == NULL)
        return RLC_OK;
    if ((o->tls_cert_file == NULL) != (o->tls_key_file == NULL)) {
        snprintf(why, whylen, "tls_cert_file and tls_key_file go together");
        return RLC_EINVAL;
    }
    if ((t = calloc(1, sizeof(*t))) == NULL)
        return RLC_ENOMEM;
    t->insecure = o->tls_insecure != 0;
    if (o->tls_server_name != NULL &&
        (t->server_name = strdup(o->tls_server_name)) == NULL)
        goto nomem;
    ERR_clear_error();
    t->bio =
        BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK, "rlc socket");
    if (t->bio == NULL || !BIO_meth_set_write(t->bio, bio_write) ||
        !BIO_meth_set_read(t->bio, bio_read) ||
        !BIO_meth_set_ctrl(t->bio, bio_ctrl) ||
        !BIO_meth_set_create(t->bio, bio_create))
        goto nomem;
    t->ctx = SSL_CTX_new(TLS_client_method());
    if (t->ctx == NULL)
        goto nomem;
    SSL_CTX_set_min_proto_version(t->ctx, TLS1_2_VERSION);
    SSL_CTX_set_options(t->ctx, SSL_OP_NO_RENEGOTIATION);
    /* A send may stop anywhere; the retry passes what is left, from a
     * buffer that may have moved. */
    SSL_CTX_set_mode(t->ctx, SSL_MODE_ENABLE_PARTIAL_WRITE |
                                 SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
    SSL_CTX_set_default_passwd_cb(t->ctx, no_passphrase);
    if (SSL_CTX_set_alpn_protos(t->ctx, alpn, sizeof(alpn)) != 0)
        goto nomem;
    if (!t->insecure) {
        int ok =
            o->tls_ca_file != NULL
                ? SSL_CTX_load_verify_locations(t->ctx, o->tls_ca_file, NULL)
                : SSL_CTX_set_default_verify_paths(t->ctx);
        if (ok != 1) {
            ossl_why(why, whylen, "cannot load the TLS CA file");
            goto fail;
        }
        SSL_CTX_set_verify(t->ctx, SSL_VERIFY_PEER, NULL);
    }
    if (o->tls_cert_file != NULL) {
        if (SSL_CTX_use_certificate_chain_file(t->ctx, o->tls_cert_file) != 1) {
            ossl_why(why, whylen, "cannot load the TLS client certificate");
            goto fail;
        }
        if (SSL_CTX_use_PrivateKey_file(t->ctx, o->tls_key_file,
                                        SSL_FILETYPE_PEM) != 1 ||
            SSL_CTX_check_private_key(t->ctx) != 1) {
            ossl_why(why, whylen, "cannot load the TLS client key");
            goto fail;
        }
    }
    *out = t;
    return RLC_OK;

nomem:
    rlc__tls_free(t);
    ERR_clear_error();
    return RLC_ENOMEM;
fail:
    rlc__tls_free(t);
    return RLC_ETLS;
}

/* ---- one connection ---------------------------------------------------- */

int rlc__tls_start(const rlc__tls_t *t, const rlc__addr_t *a, int fd, SSL **out)
{
    char host[300];
    const char *name = t->server_name;
    int port, ip;
    BIO *b;
    SSL *ssl;

    *out = NULL;
    if (name == NULL) {
        if (rl_parse_hostport(a->text, host, sizeof(host), &port) != 0)
            return RLC_EADDR;
        name = host;
    }
    if ((ssl = SSL_new(t->ctx)) == NULL) {
        ERR_clear_error();
        return RLC_ENOMEM;
    }
    if ((b = BIO_new(t->bio)) == NULL) {
        SSL_free(ssl);
        ERR_clear_error();
        return RLC_ENOMEM;
    }
    BIO_set_data(b, (void *)(intptr_t)fd);
    SSL_set_bio(ssl, b, b);
    /* An address is checked as an IP SAN and sent without SNI (RFC 6066
     * allows names only); a name is both. */
    ip = X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), name) == 1;
    if (!ip) {
        ERR_clear_error();
        if (SSL_set_tlsext_host_name(ssl, name) != 1 ||
            (!t->insecure && SSL_set1_host(ssl, name) != 1)) {
            SSL_free(ssl);
            ERR_clear_error();
            return RLC_ENOMEM;
        }
    }
    SSL_set_connect_state(ssl);
    *out = ssl;
    return RLC_OK;
}

/* Maps the outcome of an SSL call that returned r <= 0. */
static long io_fail(SSL *ssl, int r, int *want, char *why, size_t whylen)
{
    int e = SSL_get_error(ssl, r);
    int err = errno;

    switch (e) {
    case SSL_ERROR_WANT_READ:
        *want = RLC__WANT_READ;
        return RLC_EAGAIN;
    case SSL_ERROR_WANT_WRITE:
        *want = RLC__WANT_WRITE;
        return RLC_EAGAIN;
    case SSL_ERROR_ZERO_RETURN:
        return 0; /* close_notify: the end of the stream */
    case SSL_ERROR_SYSCALL:
        ERR_clear_error();
        return r == 0 || err == 0 ? 0 : rlc__errno(err);
    default: {
        long v = SSL_get_verify_result(ssl);
        if (why != NULL) {
            if (v != X509_V_OK)
                snprintf(why, whylen, "TLS: certificate verify failed: %s",
                         X509_verify_cert_error_string(v));
            else
                ossl_why(why, whylen, "TLS");
        }
        ERR_clear_error();
        return RLC_ETLS;
    }
    }
}

int rlc__tls_handshake(SSL *ssl, int *want, char *why, size_t whylen)
{
    int r;
    long rc;

    ERR_clear_error();
    r = SSL_do_handshake(ssl);
    if (r == 1)
        return RLC_OK;
    rc = io_fail(ssl, r, want, why, whylen);
    if (rc == 0) {
        /* The server closed during the handshake: most often it refused
         * our certificate (mutual TLS) or our ALPN, and said so in an
         * alert that OpenSSL has queued. */
        if (why != NULL)
            ossl_why(why, whylen, "TLS: the server closed the handshake");
        return RLC_ETLS;
    }
    return (int)rc;
}

/* One send (out) or receive on the socket: bytes moved, 0 for the
 * peer's end of stream, RLC_EAGAIN, or an RLC_E* error (errno kept). */
static long sock_io(int fd, void *p, size_t n, int out)
{
    ssize_t r;

    do
        r = out ? send(fd, p, n, MSG_NOSIGNAL | MSG_DONTWAIT)
                : recv(fd, p, n, MSG_DONTWAIT);
    while (r < 0 && errno == EINTR);
    if (r >= 0)
        return (long)r;
    return errno == EAGAIN || errno == EWOULDBLOCK ? RLC_EAGAIN
                                                   : rlc__errno(errno);
}

/* The same through TLS. */
static long tls_io(SSL *ssl, void *p, size_t n, int out, int *want,
                   char *why)
{
    long rc;
    int r;

    if (n > INT32_MAX)
        n = INT32_MAX;
    ERR_clear_error();
    r = out ? SSL_write(ssl, p, (int)n) : SSL_read(ssl, p, (int)n);
    if (r > 0)
        return r;
    rc = io_fail(ssl, r, want, why, RLC__WHY_MAX);
    return out && rc == 0 ? RLC_ECLOSED : rc;
}

long rlc__io_send(int fd, SSL *ssl, const void *p, size_t n, int *want,
                  char *why)
{
    *want = RLC__WANT_WRITE;
    return ssl == NULL ? sock_io(fd, (void *)p, n, 1)
                       : tls_io(ssl, (void *)p, n, 1, want, why);
}

long rlc__io_recv(int fd, SSL *ssl, void *p, size_t n, int *want, char *why)
{
    *want = RLC__WANT_READ;
    return ssl == NULL ? sock_io(fd, p, n, 0) : tls_io(ssl, p, n, 0, want, why);
}

int rlc__io_pending(SSL *ssl)
{
    return ssl != NULL && SSL_has_pending(ssl);
}

void rlc__io_shutdown(int fd, SSL *ssl)
{
    /* close_notify first, so the server's TLS sees a clean end; errors
     * (the peer is gone) show up as the read's end. */
    if (ssl != NULL) {
        (void)SSL_shutdown(ssl);
        ERR_clear_error();
    }
    (void)shutdown(fd, SHUT_WR);
}

void rlc__tls_end(SSL *ssl)
{
    SSL_free(ssl);
}
