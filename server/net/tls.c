/* TLS on our own listeners: see tls.h.
 *
 * The SSL object reads from one memory BIO (what the caller fed) and
 * writes to another (what the caller takes), so the layer does no I/O
 * and never blocks. Every SSL call starts from an empty error queue, as
 * SSL_get_error requires, and leaves it empty. */
#include <arpa/inet.h>
#include <limits.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include "base/log.h"
#include "net/tls.h"
#include "base/ossl.h"
#include "base/prom.h"
#include "rl_error.h"

struct rls_tls_s {
    SSL_CTX *ctx;  /* in force for new connections */
    SSL_CTX *next; /* prepared by a reload, not yet in force */
    /* Their certificates' notAfter, in seconds since the epoch (0: not
     * known), for /metrics. */
    int64_t not_after, next_not_after;
    char *cert_file, *key_file, *ca_file;
    uint32_t max_handshakes, handshake_rate; /* per listener; 0: none */
    int recheck;                             /* --tls-client-ca-recheck */
    uint64_t ca_gen; /* reloads committed: a connection made under an
                        older one is verified again (recheck) */
};

struct rls_tls_conn_s {
    /* NULL until the client's first record is whole (see start_ssl);
     * meanwhile ctx holds a reference to the SSL_CTX in force at accept
     * and we own both BIOs, after that the SSL object does. */
    SSL *ssl;
    SSL_CTX *ctx;
    BIO *in;  /* ciphertext fed */
    BIO *out; /* ciphertext to send */
    const char *alpn;
    uint64_t fed;   /* bytes fed so far */
    uint8_t hdr[5]; /* the first record's header, as it comes */
    /* rls_tls_accept's: counts it in progress until its handshake is
     * done or it is freed; NULL then, or when made by conn_new. */
    rls_tls_stats_t *gate;
    const rls_tls_t *t;     /* its listener's, for the recheck */
    rls_tls_stats_t *stats; /* its listener's counts (rls_tls_accept) */
    uint64_t ca_gen;        /* t->ca_gen its certificate was verified under */
    unsigned ready : 1;
    unsigned no_alpn : 1; /* our ALPN callback refused the client's list */
    unsigned client : 1;  /* rls_tls_conn_client's: we are the client */
    rls_tls_reason_t reason;
    char why[RLS_TLS_WHY_MAX];
};

static const char *const labels[RLS_TLS_NREASONS] = {
    "ok",
    "not_tls",
    "protocol_version",
    "no_client_certificate",
    "bad_certificate",
    "no_alpn",
    "peer_alert",
    "closed",
    "handshake_timeout",
    "refused_max_handshakes",
    "refused_handshake_rate",
    "other",
};

const char *rls_tls_reason_label(rls_tls_reason_t r)
{
    return (unsigned)r < RLS_TLS_NREASONS ? labels[r] : "other";
}

/* ---- configuration ------------------------------------------------------*/

/* The ALPN selection: the connection's one protocol, if the client
 * offers it; a client that offers others only is refused with the
 * no_application_protocol alert rather than served a protocol it did
 * not ask for. */
static int on_alpn(SSL *ssl, const unsigned char **out, unsigned char *outlen,
                   const unsigned char *in, unsigned int inlen, void *arg)
{
    rls_tls_conn_t *c = SSL_get_app_data(ssl);
    size_t want = strlen(c->alpn);
    unsigned int i = 0;

    (void)arg;
    while (i < inlen) {
        unsigned int n = in[i];
        if (n > inlen - i - 1)
            break;
        if (n == want && memcmp(in + i + 1, c->alpn, n) == 0) {
            *out = in + i + 1;
            *outlen = (unsigned char)n;
            return SSL_TLSEXT_ERR_OK;
        }
        i += 1 + n;
    }
    c->no_alpn = 1;
    return SSL_TLSEXT_ERR_ALERT_FATAL;
}

/* Days from 1970-01-01 to the civil date y-m-d (m 1 to 12), of the
 * proleptic Gregorian calendar (H. Hinnant's days_from_civil). */
static int64_t days_from_civil(int64_t y, unsigned m, unsigned d)
{
    int64_t era, yoe, doy;

    y -= m <= 2;
    era = (y >= 0 ? y : y - 399) / 400;
    yoe = y - era * 400;
    doy = (153 * (m > 2 ? m - 3 : m + 9) + 2) / 5 + d - 1;
    return era * 146097 + yoe * 365 + yoe / 4 - yoe / 100 + doy - 719468;
}

/* The notAfter of ctx's certificate in seconds since the epoch, or 0
 * when it has none or its time does not parse. Computed from the fields
 * OpenSSL parses (UTC), so neither the local time zone nor the C
 * library's timegm comes in. */
static int64_t cert_not_after(SSL_CTX *ctx)
{
    X509 *x = SSL_CTX_get0_certificate(ctx);
    struct tm tm;

    if (x == NULL || ASN1_TIME_to_tm(X509_get0_notAfter(x), &tm) != 1) {
        ERR_clear_error();
        return 0;
    }
    return days_from_civil((int64_t)tm.tm_year + 1900, (unsigned)tm.tm_mon + 1,
                           (unsigned)tm.tm_mday) *
               86400 +
           tm.tm_hour * 3600 + tm.tm_min * 60 + tm.tm_sec;
}

/* A new SSL_CTX from t's files. Returns 0 with *out, or RL_EINVAL /
 * RL_ENOMEM with err. */
static int build_ctx(const rls_tls_t *t, SSL_CTX **out, char *err,
                     size_t errlen)
{
    static const unsigned char sid[] = "rl-server";
    SSL_CTX *ctx;
    STACK_OF(X509_NAME) * names;
    int rc = RL_EINVAL;

    *out = NULL;
    ERR_clear_error();
    if ((ctx = SSL_CTX_new(TLS_server_method())) == NULL) {
        snprintf(err, errlen, "TLS: out of memory");
        return RL_ENOMEM;
    }
    SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
    /* An idle connection gives its record buffers back. */
    SSL_CTX_set_mode(ctx, SSL_MODE_RELEASE_BUFFERS);
    SSL_CTX_set_options(ctx, SSL_OP_NO_RENEGOTIATION |
                                 SSL_OP_CIPHER_SERVER_PREFERENCE);
    SSL_CTX_set_default_passwd_cb(ctx, rls_ossl_no_passphrase);
    SSL_CTX_set_alpn_select_cb(ctx, on_alpn, NULL);
    /* Resumed sessions must be of this server (and, with a client CA,
     * were verified by it). */
    SSL_CTX_set_session_id_context(ctx, sid, sizeof(sid) - 1);
    if (rls_ossl_readable("--tls-cert", t->cert_file, err, errlen) != 0 ||
        rls_ossl_readable("--tls-key", t->key_file, err, errlen) != 0)
        goto fail;
    /* The key first: a certificate loaded after a key it does not match
     * drops the key, which the check below then reports. The reason
     * only: never anything of the key itself. */
    if (SSL_CTX_use_PrivateKey_file(ctx, t->key_file, SSL_FILETYPE_PEM) != 1) {
        snprintf(err, errlen,
                 "--tls-key: no usable private key in '%s' (PEM, without a "
                 "passphrase): %s",
                 t->key_file, rls_ossl_reason("not PEM"));
        goto fail;
    }
    if (SSL_CTX_use_certificate_chain_file(ctx, t->cert_file) != 1) {
        snprintf(err, errlen, "--tls-cert: no certificate in '%s': %s",
                 t->cert_file, rls_ossl_reason("not PEM"));
        goto fail;
    }
    if (SSL_CTX_check_private_key(ctx) != 1) {
        snprintf(err, errlen,
                 "--tls-key: '%s' does not match the certificate in '%s'",
                 t->key_file, t->cert_file);
        goto fail;
    }
    if (t->ca_file != NULL) {
        if (rls_ossl_readable("--tls-client-ca", t->ca_file, err, errlen) != 0)
            goto fail;
        if (SSL_CTX_load_verify_locations(ctx, t->ca_file, NULL) != 1 ||
            (names = SSL_load_client_CA_file(t->ca_file)) == NULL) {
            snprintf(err, errlen,
                     "--tls-client-ca: no certificate loaded from '%s': %s",
                     t->ca_file, rls_ossl_reason("not PEM"));
            goto fail;
        }
        SSL_CTX_set_client_CA_list(ctx, names);
        SSL_CTX_set_verify(
            ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, NULL);
    }
    ERR_clear_error();
    *out = ctx;
    return 0;
fail:
    ERR_clear_error();
    SSL_CTX_free(ctx);
    return rc;
}

int rls_tls_new(const rls_tls_opts_t *o, rls_tls_t **out, char *err,
                size_t errlen)
{
    rls_tls_t *t = calloc(1, sizeof(*t));
    int rc;

    *out = NULL;
    if (o->cert_file == NULL || o->key_file == NULL) {
        free(t);
        snprintf(err, errlen, "--tls-cert and --tls-key go together");
        return RL_EINVAL;
    }
    if (t == NULL || (t->cert_file = strdup(o->cert_file)) == NULL ||
        (t->key_file = strdup(o->key_file)) == NULL ||
        (o->ca_file != NULL && (t->ca_file = strdup(o->ca_file)) == NULL)) {
        rls_tls_free(t);
        snprintf(err, errlen, "TLS: out of memory");
        return RL_ENOMEM;
    }
    t->max_handshakes = o->max_handshakes;
    t->handshake_rate = o->handshake_rate;
    t->recheck = o->recheck && o->ca_file != NULL;
    if ((rc = build_ctx(t, &t->ctx, err, errlen)) != 0) {
        rls_tls_free(t);
        return rc;
    }
    t->not_after = cert_not_after(t->ctx);
    *out = t;
    return 0;
}

rls_tls_t *rls_tls_new_like(const rls_tls_t *from)
{
    rls_tls_t *t = calloc(1, sizeof(*t));

    if (t == NULL || (t->cert_file = strdup(from->cert_file)) == NULL ||
        (t->key_file = strdup(from->key_file)) == NULL ||
        (from->ca_file != NULL &&
         (t->ca_file = strdup(from->ca_file)) == NULL)) {
        rls_tls_free(t);
        return NULL;
    }
    t->max_handshakes = from->max_handshakes;
    t->handshake_rate = from->handshake_rate;
    t->recheck = from->recheck;
    SSL_CTX_up_ref(from->ctx);
    t->ctx = from->ctx;
    t->not_after = from->not_after;
    return t;
}

struct ssl_ctx_st *rls_tls_ctx_ref(const rls_tls_t *t, int64_t *not_after)
{
    SSL_CTX_up_ref(t->ctx);
    *not_after = t->not_after;
    return t->ctx;
}

void rls_tls_ctx_unref(struct ssl_ctx_st *ctx)
{
    SSL_CTX_free(ctx);
}

void rls_tls_install(rls_tls_t *t, struct ssl_ctx_st *ctx, int64_t not_after)
{
    rls_tls_discard(t);
    t->next = ctx;
    t->next_not_after = not_after;
    rls_tls_commit(t);
}

int rls_tls_prepare(rls_tls_t *t, char *err, size_t errlen)
{
    int rc;

    rls_tls_discard(t);
    if ((rc = build_ctx(t, &t->next, err, errlen)) == 0)
        t->next_not_after = cert_not_after(t->next);
    return rc;
}

void rls_tls_commit(rls_tls_t *t)
{
    if (t->next == NULL)
        return;
    /* Connections made under the old one hold references of their own:
     * it goes with the last of them. */
    SSL_CTX_free(t->ctx);
    t->ctx = t->next;
    t->next = NULL;
    t->not_after = t->next_not_after;
    t->ca_gen++;
}

void rls_tls_discard(rls_tls_t *t)
{
    SSL_CTX_free(t->next);
    t->next = NULL;
}

int rls_tls_reload(rls_tls_t *t, char *err, size_t errlen)
{
    int rc;

    if ((rc = rls_tls_prepare(t, err, errlen)) != 0)
        return rc;
    rls_tls_commit(t);
    return 0;
}

const char *rls_tls_file(const rls_tls_t *t, int which)
{
    return which == 0 ? t->cert_file : which == 1 ? t->key_file : t->ca_file;
}

void rls_tls_describe(const rls_tls_t *t, char *out, size_t outlen)
{
    X509 *x = SSL_CTX_get0_certificate(t->ctx);
    char subject[128] = "?", until[64] = "?";
    BIO *m;
    int n;

    if (x != NULL) {
        X509_NAME_oneline(X509_get_subject_name(x), subject,
                          (int)sizeof(subject));
        if ((m = BIO_new(BIO_s_mem())) != NULL) {
            if (ASN1_TIME_print(m, X509_get0_notAfter(x)) == 1 &&
                (n = BIO_read(m, until, (int)sizeof(until) - 1)) > 0)
                until[n] = '\0';
            BIO_free(m);
        }
    }
    ERR_clear_error();
    snprintf(out, outlen, "subject=\"%s\" not_after=\"%s\"", subject, until);
}

void rls_tls_free(rls_tls_t *t)
{
    if (t == NULL)
        return;
    SSL_CTX_free(t->ctx);
    SSL_CTX_free(t->next);
    free(t->cert_file);
    free(t->key_file);
    free(t->ca_file);
    free(t);
}

/* ---- connections --------------------------------------------------------*/

/* A connection holds no SSL object until its first record is whole:
 * OpenSSL, given part of a ClientHello, sets up its record and handshake
 * buffers (BENCHMARKS.md, "Figures behind the code's choices") and keeps
 * them while it waits, so a client that sends half a hello and stalls
 * would pin them for the handshake timeout. Until then the connection holds two memory BIOs,
 * what was fed, and a reference to the SSL_CTX in force at accept (so a
 * reload between accept and hello changes nothing). */
rls_tls_conn_t *rls_tls_conn_new(rls_tls_t *t, const char *alpn)
{
    rls_tls_conn_t *c = calloc(1, sizeof(*c));

    if (c == NULL)
        return NULL;
    c->alpn = alpn;
    if ((c->in = BIO_new(BIO_s_mem())) == NULL ||
        (c->out = BIO_new(BIO_s_mem())) == NULL ||
        SSL_CTX_up_ref(t->ctx) != 1) {
        BIO_free(c->in);
        BIO_free(c->out);
        free(c);
        ERR_clear_error();
        return NULL;
    }
    c->ctx = t->ctx;
    /* Only with the recheck does the connection look at t again, which
     * then must outlive it (the server frees its front ends first). */
    c->t = t->recheck ? t : NULL;
    c->ca_gen = t->ca_gen;
    /* An empty input is "more to come", not end of file. */
    BIO_set_mem_eof_return(c->in, -1);
    BIO_set_mem_eof_return(c->out, -1);
    return c;
}

rls_tls_conn_t *rls_tls_conn_client(struct ssl_ctx_st *ctx, const char *name)
{
    rls_tls_conn_t *c = calloc(1, sizeof(*c));
    X509_VERIFY_PARAM *vp;
    unsigned char tmp[16];
    int is_ip;

    if (c == NULL)
        return NULL;
    c->client = 1;
    if ((c->in = BIO_new(BIO_s_mem())) == NULL ||
        (c->out = BIO_new(BIO_s_mem())) == NULL ||
        (c->ssl = SSL_new(ctx)) == NULL) {
        BIO_free(c->in);
        BIO_free(c->out);
        free(c);
        ERR_clear_error();
        return NULL;
    }
    BIO_set_mem_eof_return(c->in, -1);
    BIO_set_mem_eof_return(c->out, -1);
    SSL_set_bio(c->ssl, c->in, c->out); /* the SSL object owns them now */
    SSL_set_connect_state(c->ssl);
    is_ip = inet_pton(AF_INET, name, tmp) == 1 ||
            inet_pton(AF_INET6, name, tmp) == 1;
    vp = SSL_get0_param(c->ssl);
    if (is_ip ? X509_VERIFY_PARAM_set1_ip_asc(vp, name) != 1
              : (SSL_set_tlsext_host_name(c->ssl, name) != 1 ||
                 X509_VERIFY_PARAM_set1_host(vp, name, 0) != 1)) {
        rls_tls_conn_free(c);
        ERR_clear_error();
        return NULL;
    }
    ERR_clear_error();
    (void)SSL_do_handshake(c->ssl); /* the ClientHello, into out */
    ERR_clear_error();
    return c;
}

/* Whether the first record is still partial and worth waiting for: a
 * handshake record of TLS's versions, of a length a record may have
 * (2^14), not all fed yet. Anything else goes to OpenSSL at once, which
 * refuses it with its own alert. */
static int first_record_pending(const rls_tls_conn_t *c)
{
    size_t len;

    if (c->fed < sizeof(c->hdr))
        return 1;
    len = (size_t)c->hdr[3] << 8 | c->hdr[4];
    return c->hdr[1] == 0x03 && len <= 16384 && c->fed < sizeof(c->hdr) + len;
}

/* The SSL object, over the BIOs that hold what was fed. Returns 0 or
 * RL_ENOMEM. */
static int start_ssl(rls_tls_conn_t *c)
{
    if ((c->ssl = SSL_new(c->ctx)) == NULL) {
        ERR_clear_error();
        return RL_ENOMEM;
    }
    SSL_set_bio(c->ssl, c->in, c->out);
    SSL_set_app_data(c->ssl, c);
    SSL_set_accept_state(c->ssl);
    /* The SSL object holds a reference of its own. */
    SSL_CTX_free(c->ctx);
    c->ctx = NULL;
    return 0;
}

/* A burst of at least this many handshakes at once, once none is left
 * in progress, has its memory given back to the system. */
#define TRIM_BURST 64

/* The handshake is over (done, or the connection gone): no longer in
 * progress under its listener's cap. Returns 1 when that ended a burst:
 * none left in progress after at least TRIM_BURST at once. A stalled
 * handshake holds OpenSSL's buffers, and glibc keeps what a burst of
 * them freed until malloc_trim (BENCHMARKS.md, "Figures behind the
 * code's choices"); a burst can end at most once per TRIM_BURST
 * handshakes admitted. */
static int ungate(rls_tls_conn_t *c)
{
    rls_tls_stats_t *st = c->gate;
    uint64_t peak;

    if (st == NULL)
        return 0;
    c->gate = NULL;
    st->in_progress--;
    if (st->in_progress > 0)
        return 0;
    peak = st->peak;
    st->peak = 0;
    return peak >= TRIM_BURST;
}

void rls_tls_conn_free(rls_tls_conn_t *c)
{
    int trim;

    if (c == NULL)
        return;
    trim = ungate(c);
    if (c->ssl != NULL) {
        SSL_free(c->ssl); /* and both BIOs, and its SSL_CTX reference */
    } else {
        BIO_free(c->in);
        BIO_free(c->out);
        SSL_CTX_free(c->ctx);
    }
    free(c);
    if (trim)
        malloc_trim(0);
}

void rls_tls_conn_fail(rls_tls_conn_t *c, rls_tls_reason_t r, const char *why)
{
    if (c->reason != RLS_TLS_OK)
        return;
    c->reason = r;
    snprintf(c->why, sizeof(c->why), "%s", why);
}

/* Records why the SSL call that returned ret failed, with a label for
 * the metrics. The verification result comes first during a handshake:
 * it says what the error queue only calls "certificate verify failed". */
static int ssl_failed(rls_tls_conn_t *c, int ret, const char *during)
{
    unsigned long e = ERR_peek_last_error();
    int lib = ERR_GET_LIB(e), r = ERR_GET_REASON(e);
    int kind = SSL_get_error(c->ssl, ret);
    long v = SSL_get_verify_result(c->ssl);
    rls_tls_reason_t reason = RLS_TLS_OTHER;

    if (c->no_alpn) {
        reason = RLS_TLS_NO_ALPN;
        snprintf(c->why, sizeof(c->why),
                 "TLS %s: the client's ALPN list lacks \"%s\"", during,
                 c->alpn);
    } else if (!c->ready && v != X509_V_OK) {
        reason = RLS_TLS_BAD_CERT;
        snprintf(c->why, sizeof(c->why), "TLS %s: %s certificate refused: %s",
                 during, c->client ? "server" : "client",
                 X509_verify_cert_error_string(v));
    } else {
        if (lib == ERR_LIB_SSL) {
            if (r == SSL_R_PEER_DID_NOT_RETURN_A_CERTIFICATE)
                reason = RLS_TLS_NO_CLIENT_CERT;
            else if (r == SSL_R_CERTIFICATE_VERIFY_FAILED)
                reason = RLS_TLS_BAD_CERT;
            else if (r == SSL_R_UNSUPPORTED_PROTOCOL ||
                     r == SSL_R_VERSION_TOO_LOW ||
                     r == SSL_R_NO_PROTOCOLS_AVAILABLE)
                reason = RLS_TLS_PROTOCOL_VERSION;
            else if (r == SSL_R_HTTP_REQUEST || r == SSL_R_HTTPS_PROXY_REQUEST)
                reason = RLS_TLS_NOT_TLS;
            else if (r == SSL_R_NO_APPLICATION_PROTOCOL)
                reason = RLS_TLS_NO_ALPN;
            else if (r >= SSL_AD_REASON_OFFSET &&
                     r < SSL_AD_REASON_OFFSET + 256)
                reason = RLS_TLS_PEER_ALERT;
        }
        if (kind == SSL_ERROR_SSL || e != 0)
            snprintf(c->why, sizeof(c->why), "TLS %s: %s", during,
                     rls_ossl_reason("protocol error"));
        else
            snprintf(c->why, sizeof(c->why), "TLS %s: error %d", during, kind);
    }
    if (c->ready && reason != RLS_TLS_PEER_ALERT)
        reason = RLS_TLS_OTHER;
    if (c->reason == RLS_TLS_OK)
        c->reason = reason;
    ERR_clear_error();
    return RL_EIO;
}

/* A TLS connection begins with a handshake record (22) from the client;
 * anything else in the first byte is another protocol: an HTTP request,
 * an h2c preface, the native protocol's frames. Said plainly rather than
 * as OpenSSL's "wrong version number". */
static int not_tls(rls_tls_conn_t *c, uint8_t first)
{
    c->reason = RLS_TLS_NOT_TLS;
    snprintf(c->why, sizeof(c->why),
             "TLS handshake: the client does not speak TLS (first byte "
             "0x%02x%s)",
             first, first >= 'A' && first <= 'Z' ? ": plaintext HTTP?" : "");
    return RL_EIO;
}

/* 1 while c's client certificate (and the chain it sent) verifies
 * against the CAs now in force for its listener, as a client's purpose. */
static int still_trusted(rls_tls_conn_t *c)
{
    X509 *cert = SSL_get0_peer_certificate(c->ssl);
    X509_STORE_CTX *x;
    int ok = 0;

    if (cert == NULL)
        return 0;
    if ((x = X509_STORE_CTX_new()) != NULL &&
        X509_STORE_CTX_init(x, SSL_CTX_get_cert_store(c->t->ctx), cert,
                            SSL_get_peer_cert_chain(c->ssl)) == 1 &&
        X509_STORE_CTX_set_purpose(x, X509_PURPOSE_SSL_CLIENT) == 1)
        ok = X509_verify_cert(x) == 1;
    X509_STORE_CTX_free(x);
    ERR_clear_error();
    return ok;
}

int rls_tls_conn_feed(rls_tls_conn_t *c, const uint8_t *p, size_t n)
{
    size_t k;
    int r;

    if (c->reason != RLS_TLS_OK)
        return RL_EIO;
    if (n == 0)
        return 0;
    if (c->fed == 0 && p[0] != 0x16 && !c->client)
        return not_tls(c, p[0]);
    if (n > INT_MAX || BIO_write(c->in, p, (int)n) != (int)n) {
        ERR_clear_error();
        return RL_ENOMEM;
    }
    for (k = 0; c->fed + k < sizeof(c->hdr) && k < n; k++)
        c->hdr[c->fed + k] = p[k];
    c->fed += n;
    if (c->ready) {
        /* A reload since its handshake, with --tls-client-ca-recheck: a
         * client whose CA was removed goes at its next read. */
        if (c->t != NULL && c->ca_gen != c->t->ca_gen) {
            c->ca_gen = c->t->ca_gen;
            if (!still_trusted(c)) {
                /* Counted as a bad certificate of its listener, and
                 * logged by the front end that closes it. */
                if (c->stats != NULL)
                    c->stats->failed[RLS_TLS_BAD_CERT]++;
                rls_tls_conn_fail(c, RLS_TLS_BAD_CERT,
                                  "client certificate no longer verifies "
                                  "after a reload of --tls-client-ca");
                return RL_EIO;
            }
        }
        return 0;
    }
    if (c->ssl == NULL) {
        if (first_record_pending(c))
            return 0;
        if (start_ssl(c) != 0)
            return RL_ENOMEM;
    }
    ERR_clear_error();
    r = SSL_do_handshake(c->ssl);
    if (r == 1) {
        c->ready = 1;
        if (ungate(c))
            malloc_trim(0);
        return 0;
    }
    if (SSL_get_error(c->ssl, r) == SSL_ERROR_WANT_READ) {
        ERR_clear_error();
        return 0;
    }
    return ssl_failed(c, r, "handshake");
}

int rls_tls_conn_read(rls_tls_conn_t *c, uint8_t *buf, size_t cap)
{
    int r, e;

    if (!c->ready || c->reason != RLS_TLS_OK)
        return c->reason != RLS_TLS_OK ? RL_EIO : 0;
    ERR_clear_error();
    r = SSL_read(c->ssl, buf, cap > INT_MAX ? INT_MAX : (int)cap);
    if (r > 0)
        return r;
    e = SSL_get_error(c->ssl, r);
    if (e == SSL_ERROR_WANT_READ) {
        ERR_clear_error();
        return 0;
    }
    if (e == SSL_ERROR_ZERO_RETURN) {
        ERR_clear_error();
        return RL_ECLOSED;
    }
    return ssl_failed(c, r, "read");
}

int rls_tls_conn_write(rls_tls_conn_t *c, const uint8_t *p, size_t n)
{
    size_t off = 0;
    int r;

    if (!c->ready || c->reason != RLS_TLS_OK)
        return RL_EIO;
    while (off < n) {
        ERR_clear_error();
        r = SSL_write(c->ssl, p + off,
                      n - off > INT_MAX ? INT_MAX : (int)(n - off));
        if (r <= 0) {
            /* A memory BIO takes everything unless memory runs out. */
            ERR_clear_error();
            return RL_ENOMEM;
        }
        off += (size_t)r;
    }
    return 0;
}

void rls_tls_conn_shutdown(rls_tls_conn_t *c)
{
    if (c->ready && c->reason == RLS_TLS_OK) {
        ERR_clear_error();
        SSL_shutdown(c->ssl);
        ERR_clear_error();
    }
}

size_t rls_tls_conn_pending(const rls_tls_conn_t *c)
{
    return BIO_ctrl_pending(c->out);
}

int rls_tls_conn_take(rls_tls_conn_t *c, rl_buf_t *out)
{
    size_t n = BIO_ctrl_pending(c->out);
    uint8_t *p;
    int rc;

    if (n == 0)
        return 0;
    if ((rc = rl_buf_reserve(out, n, &p)) != RL_OK)
        return rc;
    if (BIO_read(c->out, p, (int)n) != (int)n) {
        ERR_clear_error();
        return RL_EIO;
    }
    rl_buf_commit(out, n);
    return 0;
}

int rls_tls_conn_ready(const rls_tls_conn_t *c)
{
    return c->ready;
}

const char *rls_tls_conn_alpn(const rls_tls_conn_t *c)
{
    static char none[] = "";
    const unsigned char *p = NULL;
    unsigned int n = 0;

    if (c->ssl != NULL)
        SSL_get0_alpn_selected(c->ssl, &p, &n);
    /* Only ever the connection's own protocol: a static string. */
    return n > 0 ? c->alpn : none;
}

rls_tls_reason_t rls_tls_conn_reason(const rls_tls_conn_t *c)
{
    return c->reason;
}

const char *rls_tls_conn_why(const rls_tls_conn_t *c)
{
    return c->why;
}

/* ---- counting -----------------------------------------------------------*/

/* Counts a failure of reason r and logs it within the rate cap. */
static void count_reason(rls_tls_stats_t *st, const char *listener,
                         rls_tls_reason_t r, const char *why, const char *peer,
                         uint64_t now_ms)
{
    if ((unsigned)r >= RLS_TLS_NREASONS || r == RLS_TLS_OK)
        r = RLS_TLS_OTHER;
    st->failed[r]++;
    if (now_ms < st->log_next_ms[r]) {
        st->not_logged[r]++;
        return;
    }
    RLS_WARN("TLS handshake failed",
             " listener=%s peer=%s reason=%s detail=\"%s\" not_logged=%llu",
             listener, peer, labels[r], why,
             (unsigned long long)st->not_logged[r]);
    st->log_next_ms[r] = now_ms + 1000;
    st->not_logged[r] = 0;
}

void rls_tls_count_failure(rls_tls_stats_t *st, const char *listener,
                           const rls_tls_conn_t *c, const char *peer,
                           uint64_t now_ms)
{
    count_reason(st, listener, c->reason, c->why, peer, now_ms);
}

/* ---- the caps on handshakes ---------------------------------------------*/

/* Fills the rate's bucket for the time since it was last filled: rate
 * handshakes a second, in thousandths (rate of them a millisecond), up
 * to one second's worth. A new bucket starts full. */
static void rate_fill(rls_tls_stats_t *st, uint32_t rate, uint64_t now_ms)
{
    uint64_t full = (uint64_t)rate * 1000, dt;

    if (!st->rate_started ||
        (now_ms > st->rate_ms && now_ms - st->rate_ms >= 1000)) {
        st->rate_started = 1;
        st->rate_milli = full;
        st->rate_ms = now_ms;
        return;
    }
    if (now_ms <= st->rate_ms)
        return;
    dt = now_ms - st->rate_ms;
    st->rate_milli =
        st->rate_milli + dt * rate >= full ? full : st->rate_milli + dt * rate;
    st->rate_ms = now_ms;
}

/* Why a connection would be refused now (RLS_TLS_OK: it would not). */
static rls_tls_reason_t gate_reason(const rls_tls_t *t,
                                    const rls_tls_stats_t *st, uint64_t now_ms)
{
    rls_tls_stats_t probe;

    if (t->max_handshakes > 0 && st->in_progress >= t->max_handshakes)
        return RLS_TLS_REFUSED_MAX;
    if (t->handshake_rate == 0)
        return RLS_TLS_OK;
    probe = *st;
    rate_fill(&probe, t->handshake_rate, now_ms);
    return probe.rate_milli >= 1000 ? RLS_TLS_OK : RLS_TLS_REFUSED_RATE;
}

int rls_tls_busy(const rls_tls_t *t, const rls_tls_stats_t *st, uint64_t now_ms)
{
    return gate_reason(t, st, now_ms) != RLS_TLS_OK;
}

int rls_tls_accept(rls_tls_t *t, rls_tls_stats_t *st, const char *listener,
                   const char *alpn, const char *peer, uint64_t now_ms,
                   rls_tls_conn_t **out)
{
    rls_tls_reason_t r = gate_reason(t, st, now_ms);
    char why[RLS_TLS_WHY_MAX];

    *out = NULL;
    if (r != RLS_TLS_OK) {
        if (r == RLS_TLS_REFUSED_MAX)
            snprintf(why, sizeof(why),
                     "TLS handshake refused: %llu in progress on this "
                     "listener (--tls-max-handshakes)",
                     (unsigned long long)st->in_progress);
        else
            snprintf(why, sizeof(why),
                     "TLS handshake refused: over %u new a second on this "
                     "listener (--tls-handshake-rate)",
                     t->handshake_rate);
        count_reason(st, listener, r, why, peer, now_ms);
        return RL_EBUSY;
    }
    if (t->handshake_rate > 0) {
        rate_fill(st, t->handshake_rate, now_ms);
        st->rate_milli -= 1000;
    }
    if ((*out = rls_tls_conn_new(t, alpn)) == NULL)
        return RL_ENOMEM;
    (*out)->gate = st;
    (*out)->stats = st;
    if (++st->in_progress > st->peak)
        st->peak = st->in_progress;
    return 0;
}

int rls_tls_metrics(rl_buf_t *out, const char *const *names,
                    const rls_tls_stats_t *const *stats, size_t n)
{
    static const char fam[] = "rl_tls_handshakes_total";
    size_t i;
    int r, rc, any = 0;

    for (i = 0; i < n; i++)
        any |= stats[i] != NULL;
    if (!any)
        return 0;
    if ((rc = rls_prom_family(out, fam, "counter",
                              "TLS handshakes on our listeners, by "
                              "listener and result (ok, or why they "
                              "failed)")) != 0)
        return rc;
    for (i = 0; i < n; i++) {
        if (stats[i] == NULL)
            continue;
        for (r = 0; r < RLS_TLS_NREASONS; r++)
            if ((rc = rl_buf_printf(
                     out, "%s{listener=\"%s\",result=\"%s\"} %llu\n", fam,
                     names[i], labels[r],
                     (unsigned long long)(r == RLS_TLS_OK
                                              ? stats[i]->ok
                                              : stats[i]->failed[r]))) != 0)
                return rc;
    }
    if ((rc = rls_prom_family(out, "rl_tls_handshakes_in_progress", "gauge",
                              "TLS connections admitted whose handshake "
                              "is not done yet, by listener (capped by "
                              "--tls-max-handshakes)")) != 0)
        return rc;
    for (i = 0; i < n; i++)
        if (stats[i] != NULL &&
            (rc = rl_buf_printf(
                 out, "rl_tls_handshakes_in_progress{listener=\"%s\"} %llu\n",
                 names[i], (unsigned long long)stats[i]->in_progress)) != 0)
            return rc;
    return 0;
}

int rls_tls_cert_metrics(rl_buf_t *out, const rls_tls_t *t,
                         const char *const *names,
                         const rls_tls_stats_t *const *stats, size_t n)
{
    static const char fam[] = "rl_tls_certificate_expiry_seconds";
    size_t i;
    int rc;

    if (t == NULL || t->not_after <= 0)
        return 0;
    for (i = 0; i < n && stats[i] == NULL; i++)
        ;
    if (i == n)
        return 0;
    if ((rc = rls_prom_family(out, fam, "gauge",
                              "The notAfter of the certificate a TLS "
                              "listener serves (--tls-cert, as last "
                              "loaded), in seconds since the epoch")) != 0)
        return rc;
    for (i = 0; i < n; i++)
        if (stats[i] != NULL &&
            (rc = rl_buf_printf(out, "%s{listener=\"%s\"} %lld\n", fam,
                                names[i], (long long)t->not_after)) != 0)
            return rc;
    return 0;
}

/* ---- TLS on a plaintext listener ----------------------------------------*/

const uint8_t rls_tls_plain_alert[7] = {0x15, 0x03, 0x03, 0x00,
                                        0x02, 0x02, 0x28};

int rls_tls_is_hello(const uint8_t *p, size_t n)
{
    return n >= 3 && p[0] == 0x16 && p[1] == 0x03 && p[2] <= 0x04;
}

void rls_tls_count_plain(rls_tls_plain_t *st, const char *listener,
                         const char *peer, uint64_t now_ms)
{
    st->count++;
    if (now_ms < st->log_next_ms) {
        st->not_logged++;
        return;
    }
    RLS_WARN("TLS sent to a plaintext port; closed",
             " listener=%s peer=%s not_logged=%llu", listener, peer,
             (unsigned long long)st->not_logged);
    st->log_next_ms = now_ms + 1000;
    st->not_logged = 0;
}

int rls_tls_plain_metrics(rl_buf_t *out, const char *const *names,
                          const rls_tls_plain_t *const *st, size_t n)
{
    static const char fam[] = "rl_tls_on_plaintext_port_total";
    size_t i;
    int rc, any = 0;

    for (i = 0; i < n; i++)
        any |= st[i] != NULL;
    if (!any)
        return 0;
    if ((rc = rls_prom_family(out, fam, "counter",
                              "Connections that opened with a TLS "
                              "handshake on a plaintext listener "
                              "(answered with an alert and closed)")) != 0)
        return rc;
    for (i = 0; i < n; i++)
        if (st[i] != NULL &&
            (rc = rl_buf_printf(out, "%s{listener=\"%s\"} %llu\n", fam,
                                names[i], (unsigned long long)st[i]->count)) !=
                0)
            return rc;
    return 0;
}
