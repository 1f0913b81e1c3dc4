/* The server-side TLS layer (net/tls.c) against an OpenSSL client in
 * this process, the two joined by memory BIOs: certificates are made
 * here (a CA, the server's for 127.0.0.1, a client's, an expired one,
 * one from another CA) and written to a temporary directory, as the
 * flags name files. Each test asserts what the layer says: ready or not,
 * the ALPN chosen, the reason label and its text, plaintext through in
 * both directions; and the client's view (the certificate it was shown,
 * before and after a reload). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include "net/tls.h"
#include "rl_error.h"

/* OpenSSL's memory, counted (main installs these before anything of
 * OpenSSL runs): what a connection holds. */
static size_t ossl_live;

static void *count_malloc(size_t n, const char *file, int line)
{
    size_t *p = malloc(n + sizeof(max_align_t));

    (void)file;
    (void)line;
    if (p == NULL)
        return NULL;
    *p = n;
    ossl_live += n;
    return (char *)p + sizeof(max_align_t);
}

static void count_free(void *q, const char *file, int line)
{
    size_t *p;

    (void)file;
    (void)line;
    if (q == NULL)
        return;
    p = (size_t *)(void *)((char *)q - sizeof(max_align_t));
    ossl_live -= *p;
    free(p);
}

static void *count_realloc(void *q, size_t n, const char *file, int line)
{
    size_t *p, old;

    if (q == NULL)
        return count_malloc(n, file, line);
    if (n == 0) {
        count_free(q, file, line);
        return NULL;
    }
    p = (size_t *)(void *)((char *)q - sizeof(max_align_t));
    old = *p;
    if ((p = realloc(p, n + sizeof(max_align_t))) == NULL)
        return NULL;
    *p = n;
    ossl_live += n - old;
    return (char *)p + sizeof(max_align_t);
}

typedef struct pki_s {
    EVP_PKEY *key;
    X509 *x;
} pki_t;

static char dir[64];
static pki_t ca, other_ca;

static char *path(const char *name)
{
    static char p[8][128];
    static int i;
    char *out = p[i++ % 8];

    snprintf(out, 128, "%s/%s", dir, name);
    return out;
}

static void add_ext(X509 *x, X509 *issuer, int nid, const char *value)
{
    X509V3_CTX v3;
    X509_EXTENSION *e;

    X509V3_set_ctx(&v3, issuer, x, NULL, NULL, 0);
    e = X509V3_EXT_conf_nid(NULL, &v3, nid, value);
    assert_non_null(e);
    X509_add_ext(x, e, -1);
    X509_EXTENSION_free(e);
}

/* A certificate for cn signed by issuer (NULL: by itself), valid from
 * `from` to `until` seconds from now. */
static pki_t make(const char *cn, const pki_t *issuer, const char *san,
                  long from, long until, int is_ca)
{
    static long serial = 1;
    pki_t p;

    p.key = EVP_EC_gen("P-256");
    p.x = X509_new();
    assert_non_null(p.key);
    assert_non_null(p.x);
    X509_set_version(p.x, 2);
    ASN1_INTEGER_set(X509_get_serialNumber(p.x), serial++);
    X509_gmtime_adj(X509_getm_notBefore(p.x), from);
    X509_gmtime_adj(X509_getm_notAfter(p.x), until);
    X509_set_pubkey(p.x, p.key);
    X509_NAME_add_entry_by_txt(X509_get_subject_name(p.x), "CN", MBSTRING_ASC,
                               (const unsigned char *)cn, -1, -1, 0);
    X509_set_issuer_name(
        p.x, X509_get_subject_name(issuer != NULL ? issuer->x : p.x));
    if (is_ca)
        add_ext(p.x, p.x, NID_basic_constraints, "critical,CA:TRUE");
    if (san != NULL)
        add_ext(p.x, issuer != NULL ? issuer->x : p.x, NID_subject_alt_name,
                san);
    assert_true(
        X509_sign(p.x, issuer != NULL ? issuer->key : p.key, EVP_sha256()) > 0);
    return p;
}

static void pki_free(pki_t *p)
{
    X509_free(p->x);
    EVP_PKEY_free(p->key);
}

static void write_pem(const char *name, const pki_t *p)
{
    FILE *f;
    char crt[64], key[64];

    snprintf(crt, sizeof(crt), "%s.crt", name);
    snprintf(key, sizeof(key), "%s.key", name);
    f = fopen(path(crt), "w");
    assert_non_null(f);
    assert_int_equal(PEM_write_X509(f, p->x), 1);
    fclose(f);
    f = fopen(path(key), "w");
    assert_non_null(f);
    assert_int_equal(PEM_write_PrivateKey(f, p->key, NULL, NULL, 0, NULL, NULL),
                     1);
    fclose(f);
}

static int setup(void **state)
{
    pki_t p;

    (void)state;
    snprintf(dir, sizeof(dir), "/tmp/test_tls.XXXXXX");
    assert_non_null(mkdtemp(dir));
    ca = make("test CA", NULL, NULL, 0, 3600, 1);
    other_ca = make("other CA", NULL, NULL, 0, 3600, 1);
    write_pem("ca", &ca);
    p = make("server one", &ca, "IP:127.0.0.1,DNS:localhost", 0, 3600, 0);
    write_pem("server", &p);
    pki_free(&p);
    p = make("server two", &ca, "IP:127.0.0.1,DNS:localhost", 0, 3600, 0);
    write_pem("server2", &p);
    pki_free(&p);
    p = make("client", &ca, NULL, 0, 3600, 0);
    write_pem("client", &p);
    pki_free(&p);
    p = make("expired", &ca, NULL, -7200, -3600, 0);
    write_pem("expired", &p);
    pki_free(&p);
    p = make("stranger", &other_ca, NULL, 0, 3600, 0);
    write_pem("stranger", &p);
    pki_free(&p);
    return 0;
}

static int teardown(void **state)
{
    char cmd[128];

    (void)state;
    pki_free(&ca);
    pki_free(&other_ca);
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
    return 0;
}

/* ---- the client ---------------------------------------------------------*/

typedef struct cli_s {
    SSL_CTX *ctx;
    SSL *ssl;
    BIO *in, *out;
    int failed;
} cli_t;

/* A client trusting ca_name's certificate, checking the name 127.0.0.1,
 * offering alpn (wire format; NULL: none), with cert_name's certificate
 * (NULL: none). */
static void cli_init(cli_t *k, const char *ca_name, const char *alpn,
                     size_t alpn_len, const char *cert_name)
{
    char f[64];

    memset(k, 0, sizeof(*k));
    k->ctx = SSL_CTX_new(TLS_client_method());
    assert_non_null(k->ctx);
    snprintf(f, sizeof(f), "%s.crt", ca_name);
    assert_int_equal(SSL_CTX_load_verify_locations(k->ctx, path(f), NULL), 1);
    SSL_CTX_set_verify(k->ctx, SSL_VERIFY_PEER, NULL);
    if (cert_name != NULL) {
        snprintf(f, sizeof(f), "%s.crt", cert_name);
        assert_int_equal(
            SSL_CTX_use_certificate_file(k->ctx, path(f), SSL_FILETYPE_PEM), 1);
        snprintf(f, sizeof(f), "%s.key", cert_name);
        assert_int_equal(
            SSL_CTX_use_PrivateKey_file(k->ctx, path(f), SSL_FILETYPE_PEM), 1);
    }
    k->ssl = SSL_new(k->ctx);
    k->in = BIO_new(BIO_s_mem());
    k->out = BIO_new(BIO_s_mem());
    BIO_set_mem_eof_return(k->in, -1);
    BIO_set_mem_eof_return(k->out, -1);
    SSL_set_bio(k->ssl, k->in, k->out);
    SSL_set_connect_state(k->ssl);
    X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(k->ssl), "127.0.0.1");
    if (alpn != NULL)
        assert_int_equal(SSL_set_alpn_protos(k->ssl,
                                             (const unsigned char *)alpn,
                                             (unsigned)alpn_len),
                         0);
}

static void cli_free(cli_t *k)
{
    SSL_free(k->ssl);
    SSL_CTX_free(k->ctx);
    ERR_clear_error();
}

/* Moves the client's ciphertext to the server `step` bytes at a time and
 * the server's back, driving both, until neither has anything to say.
 * Returns the last result of the server's feed. */
static int pump(cli_t *k, rls_tls_conn_t *s, size_t step)
{
    uint8_t buf[65536];
    rl_buf_t back;
    int moved = 1, rc = 0, n, r;

    rl_buf_init(&back, 1 << 20);
    while (moved) {
        moved = 0;
        if (!k->failed && !SSL_is_init_finished(k->ssl)) {
            r = SSL_do_handshake(k->ssl);
            if (r <= 0 && SSL_get_error(k->ssl, r) != SSL_ERROR_WANT_READ)
                k->failed = 1;
        }
        while ((n = BIO_read(k->out, buf, (int)sizeof(buf))) > 0) {
            size_t off;
            for (off = 0; off < (size_t)n && rc == 0; off += step)
                rc = rls_tls_conn_feed(s, buf + off,
                                       (size_t)n - off < step ? (size_t)n - off
                                                              : step);
            moved = 1;
        }
        rl_buf_reset(&back);
        assert_int_equal(rls_tls_conn_take(s, &back), 0);
        assert_int_equal(rls_tls_conn_pending(s), 0);
        if (rl_buf_len(&back) > 0) {
            BIO_write(k->in, rl_buf_rptr(&back), (int)rl_buf_len(&back));
            moved = 1;
        }
    }
    rl_buf_free(&back);
    ERR_clear_error();
    return rc;
}

static rls_tls_t *config(const char *ca_file)
{
    rls_tls_opts_t o = {path("server.crt"), path("server.key"), ca_file};
    rls_tls_t *t = NULL;
    char err[256];

    assert_int_equal(rls_tls_new(&o, &t, err, sizeof(err)), 0);
    return t;
}

/* Plaintext both ways once the handshake is done. */
static void roundtrip(cli_t *k, rls_tls_conn_t *s)
{
    uint8_t buf[64];
    rl_buf_t out;
    int n;

    assert_int_equal(SSL_write(k->ssl, "hello", 5), 5);
    assert_int_equal(pump(k, s, 1 << 20), 0);
    assert_int_equal(rls_tls_conn_read(s, buf, sizeof(buf)), 5);
    assert_memory_equal(buf, "hello", 5);
    assert_int_equal(rls_tls_conn_read(s, buf, sizeof(buf)), 0);
    assert_int_equal(rls_tls_conn_write(s, (const uint8_t *)"world", 5), 0);
    rl_buf_init(&out, 1 << 20);
    assert_int_equal(rls_tls_conn_take(s, &out), 0);
    BIO_write(k->in, rl_buf_rptr(&out), (int)rl_buf_len(&out));
    rl_buf_free(&out);
    n = SSL_read(k->ssl, buf, sizeof(buf));
    assert_int_equal(n, 5);
    assert_memory_equal(buf, "world", 5);
}

static const char h2[] = "\x02h2";
static const char h2_h1[] = "\x02h2\x08http/1.1";
static const char h1[] = "\x08http/1.1";

/* ---- tests --------------------------------------------------------------*/

/* The handshake fed whole and fed a byte at a time: the layer takes
 * partial records as "more to come". */
static void test_handshake_alpn(void **state)
{
    size_t steps[] = {1 << 20, 1, 7};
    size_t i;

    (void)state;
    for (i = 0; i < sizeof(steps) / sizeof(steps[0]); i++) {
        rls_tls_t *t = config(NULL);
        rls_tls_conn_t *s = rls_tls_conn_new(t, "h2");
        cli_t k;

        cli_init(&k, "ca", h2_h1, sizeof(h2_h1) - 1, NULL);
        assert_int_equal(pump(&k, s, steps[i]), 0);
        assert_true(rls_tls_conn_ready(s));
        assert_true(SSL_is_init_finished(k.ssl));
        assert_false(k.failed);
        assert_string_equal(rls_tls_conn_alpn(s), "h2");
        assert_int_equal(rls_tls_conn_reason(s), RLS_TLS_OK);
        assert_true(SSL_version(k.ssl) >= TLS1_2_VERSION);
        roundtrip(&k, s);
        /* The client's close_notify is the end of the stream. */
        SSL_shutdown(k.ssl);
        pump(&k, s, 1 << 20);
        {
            uint8_t b[16];
            assert_int_equal(rls_tls_conn_read(s, b, sizeof(b)), RL_ECLOSED);
        }
        cli_free(&k);
        rls_tls_conn_free(s);
        rls_tls_free(t);
    }
}

/* ALPN: a client offering none is served; one offering only another
 * protocol is refused, labelled no_alpn; http/1.1 is chosen for the
 * HTTP listener from a list that has h2 first. */
static void test_alpn_choices(void **state)
{
    rls_tls_t *t = config(NULL);
    rls_tls_conn_t *s;
    cli_t k;

    (void)state;
    s = rls_tls_conn_new(t, "h2");
    cli_init(&k, "ca", NULL, 0, NULL);
    assert_int_equal(pump(&k, s, 1 << 20), 0);
    assert_true(rls_tls_conn_ready(s));
    assert_string_equal(rls_tls_conn_alpn(s), "");
    cli_free(&k);
    rls_tls_conn_free(s);

    s = rls_tls_conn_new(t, "h2");
    cli_init(&k, "ca", h1, sizeof(h1) - 1, NULL);
    assert_int_equal(pump(&k, s, 1 << 20), RL_EIO);
    assert_false(rls_tls_conn_ready(s));
    assert_true(k.failed);
    assert_int_equal(rls_tls_conn_reason(s), RLS_TLS_NO_ALPN);
    assert_string_equal(rls_tls_reason_label(rls_tls_conn_reason(s)),
                        "no_alpn");
    assert_non_null(strstr(rls_tls_conn_why(s), "\"h2\""));
    cli_free(&k);
    rls_tls_conn_free(s);

    s = rls_tls_conn_new(t, "http/1.1");
    cli_init(&k, "ca", h2_h1, sizeof(h2_h1) - 1, NULL);
    assert_int_equal(pump(&k, s, 1 << 20), 0);
    assert_string_equal(rls_tls_conn_alpn(s), "http/1.1");
    roundtrip(&k, s);
    cli_free(&k);
    rls_tls_conn_free(s);
    rls_tls_free(t);
}

/* Mutual TLS: only a certificate of the CA given, still valid, is let
 * in; each refusal has its label and says why. */
static void test_client_certificates(void **state)
{
    static const struct {
        const char *cert;
        rls_tls_reason_t reason;
        const char *why;
    } cases[] = {
        {"client", RLS_TLS_OK, ""},
        {NULL, RLS_TLS_NO_CLIENT_CERT, "certificate"},
        {"expired", RLS_TLS_BAD_CERT, "expired"},
        {"stranger", RLS_TLS_BAD_CERT, "local issuer"},
    };
    rls_tls_t *t = config(path("ca.crt"));
    size_t i;

    (void)state;
    for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        rls_tls_conn_t *s = rls_tls_conn_new(t, "h2");
        cli_t k;

        cli_init(&k, "ca", h2, sizeof(h2) - 1, cases[i].cert);
        pump(&k, s, 1 << 20);
        assert_int_equal(rls_tls_conn_reason(s), cases[i].reason);
        assert_non_null(strstr(rls_tls_conn_why(s), cases[i].why));
        if (cases[i].reason == RLS_TLS_OK)
            roundtrip(&k, s);
        else
            assert_false(rls_tls_conn_ready(s));
        cli_free(&k);
        rls_tls_conn_free(s);
    }
    rls_tls_free(t);
}

/* Not TLS at all, TLS below 1.2, and a client that refuses our
 * certificate: labelled apart. */
static void test_bad_clients(void **state)
{
    static const char *plain[] = {"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
                                  "GET /check HTTP/1.1\r\n",
                                  "\x00\x00\x00\x10"};
    rls_tls_t *t = config(NULL);
    rls_tls_conn_t *s;
    cli_t k;
    size_t i;

    (void)state;
    for (i = 0; i < 3; i++) {
        s = rls_tls_conn_new(t, "h2");
        assert_int_equal(rls_tls_conn_feed(s, (const uint8_t *)plain[i],
                                           i < 2 ? strlen(plain[i]) : 4),
                         RL_EIO);
        assert_int_equal(rls_tls_conn_reason(s), RLS_TLS_NOT_TLS);
        assert_non_null(strstr(rls_tls_conn_why(s), "does not speak TLS"));
        assert_int_equal(rls_tls_conn_feed(s, (const uint8_t *)"x", 1), RL_EIO);
        rls_tls_conn_free(s);
    }

    s = rls_tls_conn_new(t, "h2");
    cli_init(&k, "ca", h2, sizeof(h2) - 1, NULL);
    SSL_set_security_level(k.ssl, 0);
    SSL_set_cipher_list(k.ssl, "DEFAULT:@SECLEVEL=0");
    SSL_set_min_proto_version(k.ssl, TLS1_VERSION);
    SSL_set_max_proto_version(k.ssl, TLS1_1_VERSION);
    assert_int_equal(pump(&k, s, 1 << 20), RL_EIO);
    assert_int_equal(rls_tls_conn_reason(s), RLS_TLS_PROTOCOL_VERSION);
    cli_free(&k);
    rls_tls_conn_free(s);

    /* The client trusts another CA: it refuses us with an alert. */
    s = rls_tls_conn_new(t, "h2");
    cli_init(&k, "stranger", h2, sizeof(h2) - 1, NULL);
    assert_int_equal(pump(&k, s, 1 << 20), RL_EIO);
    assert_int_equal(rls_tls_conn_reason(s), RLS_TLS_PEER_ALERT);
    assert_non_null(strstr(rls_tls_conn_why(s), "alert"));
    cli_free(&k);
    rls_tls_conn_free(s);

    /* A failure found by the front end is recorded once. */
    s = rls_tls_conn_new(t, "h2");
    rls_tls_conn_fail(s, RLS_TLS_TIMEOUT, "TLS handshake: timed out");
    rls_tls_conn_fail(s, RLS_TLS_CLOSED, "closed");
    assert_string_equal(rls_tls_reason_label(rls_tls_conn_reason(s)),
                        "handshake_timeout");
    assert_string_equal(rls_tls_conn_why(s), "TLS handshake: timed out");
    rls_tls_conn_free(s);
    rls_tls_free(t);
}

static void copy_file(const char *from, const char *to)
{
    char cmd[512];

    snprintf(cmd, sizeof(cmd), "cp '%s' '%s'", path(from), path(to));
    assert_int_equal(system(cmd), 0);
}

static char *peer_cn(cli_t *k)
{
    static char cn[64];
    X509 *x = SSL_get1_peer_certificate(k->ssl);

    assert_non_null(x);
    X509_NAME_get_text_by_NID(X509_get_subject_name(x), NID_commonName, cn,
                              sizeof(cn));
    X509_free(x);
    return cn;
}

/* A reload swaps the certificate for new connections; one made before
 * goes on under the old; a reload from bad files changes nothing. */
static void test_reload(void **state)
{
    rls_tls_opts_t o = {path("live.crt"), path("live.key"), NULL};
    rls_tls_t *t = NULL;
    rls_tls_conn_t *old, *s;
    cli_t kold, k;
    char err[256], desc[256];
    FILE *f;

    (void)state;
    copy_file("server.crt", "live.crt");
    copy_file("server.key", "live.key");
    assert_int_equal(rls_tls_new(&o, &t, err, sizeof(err)), 0);
    rls_tls_describe(t, desc, sizeof(desc));
    assert_non_null(strstr(desc, "server one"));
    old = rls_tls_conn_new(t, "h2");
    cli_init(&kold, "ca", h2, sizeof(h2) - 1, NULL);
    assert_int_equal(pump(&kold, old, 1 << 20), 0);
    assert_string_equal(peer_cn(&kold), "server one");

    copy_file("server2.crt", "live.crt");
    copy_file("server2.key", "live.key");
    assert_int_equal(rls_tls_reload(t, err, sizeof(err)), 0);
    rls_tls_describe(t, desc, sizeof(desc));
    assert_non_null(strstr(desc, "server two"));
    roundtrip(&kold, old);

    s = rls_tls_conn_new(t, "h2");
    cli_init(&k, "ca", h2, sizeof(h2) - 1, NULL);
    assert_int_equal(pump(&k, s, 1 << 20), 0);
    assert_string_equal(peer_cn(&k), "server two");
    cli_free(&k);
    rls_tls_conn_free(s);

    /* Accepted before a reload, its hello after: the certificate in
     * force at accept (the SSL object is made only at the hello). */
    s = rls_tls_conn_new(t, "h2");
    copy_file("server.crt", "live.crt");
    copy_file("server.key", "live.key");
    assert_int_equal(rls_tls_reload(t, err, sizeof(err)), 0);
    cli_init(&k, "ca", h2, sizeof(h2) - 1, NULL);
    assert_int_equal(pump(&k, s, 1 << 20), 0);
    assert_string_equal(peer_cn(&k), "server two");
    cli_free(&k);
    rls_tls_conn_free(s);
    copy_file("server2.crt", "live.crt");
    copy_file("server2.key", "live.key");
    assert_int_equal(rls_tls_reload(t, err, sizeof(err)), 0);

    /* Half-written files: the key of one, the certificate of another. */
    copy_file("server.crt", "live.crt");
    assert_int_equal(rls_tls_reload(t, err, sizeof(err)), RL_EINVAL);
    assert_non_null(strstr(err, "--tls-key"));
    assert_non_null(strstr(err, "does not match"));
    f = fopen(path("live.crt"), "w");
    assert_non_null(f);
    fputs("not a certificate\n", f);
    fclose(f);
    assert_int_equal(rls_tls_reload(t, err, sizeof(err)), RL_EINVAL);
    assert_non_null(strstr(err, "--tls-cert"));
    s = rls_tls_conn_new(t, "h2");
    cli_init(&k, "ca", h2, sizeof(h2) - 1, NULL);
    assert_int_equal(pump(&k, s, 1 << 20), 0);
    assert_string_equal(peer_cn(&k), "server two");
    cli_free(&k);
    rls_tls_conn_free(s);

    /* Prepared and discarded (a reload under way at the stop): what is
     * in force stays. */
    copy_file("server.crt", "live.crt");
    copy_file("server.key", "live.key");
    assert_int_equal(rls_tls_prepare(t, err, sizeof(err)), 0);
    rls_tls_discard(t);
    rls_tls_commit(t);
    rls_tls_describe(t, desc, sizeof(desc));
    assert_non_null(strstr(desc, "server two"));

    /* The old connection outlives the configuration itself. */
    rls_tls_free(t);
    roundtrip(&kold, old);
    cli_free(&kold);
    rls_tls_conn_free(old);
}

/* Bad files at start name their flag; the key's contents never show. */
static void test_bad_files(void **state)
{
    rls_tls_opts_t o = {path("server.crt"), path("client.key"), NULL};
    rls_tls_t *t = NULL;
    char err[256];

    (void)state;
    assert_int_equal(rls_tls_new(&o, &t, err, sizeof(err)), RL_EINVAL);
    assert_null(t);
    assert_non_null(strstr(err, "--tls-key"));
    assert_null(strstr(err, "PRIVATE"));
    o.key_file = path("missing.key");
    assert_int_equal(rls_tls_new(&o, &t, err, sizeof(err)), RL_EINVAL);
    assert_non_null(strstr(err, "--tls-key: cannot read"));
    o.key_file = path("server.key");
    o.ca_file = path("server.key");
    assert_int_equal(rls_tls_new(&o, &t, err, sizeof(err)), RL_EINVAL);
    assert_non_null(strstr(err, "--tls-client-ca"));
    o.ca_file = NULL;
    o.cert_file = NULL;
    assert_int_equal(rls_tls_new(&o, &t, err, sizeof(err)), RL_EINVAL);
    assert_non_null(strstr(err, "go together"));
}

/* Counting: by reason, logged at most once a second per reason (time is
 * a parameter), and the /metrics family for the listeners with TLS. */
static void test_counting(void **state)
{
    rls_tls_t *t = config(NULL);
    rls_tls_conn_t *a = rls_tls_conn_new(t, "h2");
    rls_tls_conn_t *b = rls_tls_conn_new(t, "h2");
    rls_tls_stats_t st, other;
    const char *names[3] = {"listen", "grpc", "http"};
    const rls_tls_stats_t *stats[3] = {NULL, &st, &other};
    rl_buf_t out;
    char *page;

    (void)state;
    memset(&st, 0, sizeof(st));
    memset(&other, 0, sizeof(other));
    rls_tls_conn_fail(a, RLS_TLS_TIMEOUT, "TLS handshake: timed out");
    rls_tls_conn_fail(b, RLS_TLS_CLOSED, "TLS handshake: closed");
    rls_tls_count_failure(&st, "grpc", a, "127.0.0.1", 5000);
    assert_int_equal(st.not_logged[RLS_TLS_TIMEOUT], 0);
    rls_tls_count_failure(&st, "grpc", a, "127.0.0.1", 5999);
    rls_tls_count_failure(&st, "grpc", a, "127.0.0.1", 5999);
    assert_int_equal(st.not_logged[RLS_TLS_TIMEOUT], 2);
    /* Another reason has a cap of its own. */
    rls_tls_count_failure(&st, "grpc", b, "127.0.0.1", 5999);
    assert_int_equal(st.not_logged[RLS_TLS_CLOSED], 0);
    /* A second on, the next line goes out (and says 2 were not). */
    rls_tls_count_failure(&st, "grpc", a, "127.0.0.1", 6000);
    assert_int_equal(st.not_logged[RLS_TLS_TIMEOUT], 0);
    assert_int_equal(st.failed[RLS_TLS_TIMEOUT], 4);
    assert_int_equal(st.failed[RLS_TLS_CLOSED], 1);
    st.ok = 7;
    other.failed[RLS_TLS_NOT_TLS] = 3;

    rl_buf_init(&out, 1 << 20);
    assert_int_equal(rls_tls_metrics(&out, names, stats, 3), 0);
    assert_int_equal(rl_buf_append(&out, "", 1), 0);
    page = (char *)rl_buf_rptr(&out);
    assert_non_null(strstr(page, "# TYPE rl_tls_handshakes_total counter\n"));
    assert_non_null(strstr(page, "rl_tls_handshakes_total{listener=\"grpc\","
                                 "result=\"ok\"} 7\n"));
    assert_non_null(strstr(page, "rl_tls_handshakes_total{listener=\"grpc\","
                                 "result=\"handshake_timeout\"} 4\n"));
    assert_non_null(strstr(page, "rl_tls_handshakes_total{listener=\"http\","
                                 "result=\"not_tls\"} 3\n"));
    assert_null(strstr(page, "listener=\"listen\""));
    rl_buf_free(&out);
    /* No listener with TLS: no family at all. */
    stats[1] = stats[2] = NULL;
    rl_buf_init(&out, 1 << 20);
    assert_int_equal(rls_tls_metrics(&out, names, stats, 3), 0);
    assert_int_equal(rl_buf_len(&out), 0);
    rl_buf_free(&out);
    rls_tls_conn_free(a);
    rls_tls_conn_free(b);
    rls_tls_free(t);
}

/* A client that sends half its ClientHello and stalls holds no SSL
 * object (OpenSSL's would hold about 64 KB of buffers meanwhile: issue
 * 40, finding 6); the rest of the hello starts the handshake as usual. */
static void test_half_hello_memory(void **state)
{
    enum { N = 50 };
    rls_tls_t *t = config(NULL);
    rls_tls_conn_t *s[N];
    uint8_t hello[4096];
    size_t before, each;
    cli_t k;
    int n, i;

    (void)state;
    cli_init(&k, "ca", h2, sizeof(h2) - 1, NULL);
    assert_true(SSL_do_handshake(k.ssl) <= 0);
    n = BIO_read(k.out, hello, (int)sizeof(hello));
    assert_true(n > 100);
    before = ossl_live;
    for (i = 0; i < N; i++) {
        s[i] = rls_tls_conn_new(t, "h2");
        assert_non_null(s[i]);
        assert_int_equal(rls_tls_conn_feed(s[i], hello, (size_t)n / 2), 0);
        assert_false(rls_tls_conn_ready(s[i]));
        assert_int_equal(rls_tls_conn_pending(s[i]), 0);
    }
    each = (ossl_live - before) / N;
    print_message("a half-sent ClientHello (%d of %d bytes): %zu bytes of "
                  "OpenSSL's memory each\n",
                  n / 2, n, each);
    assert_true(each < 2048);
    /* The rest of the hello: the server answers, and the handshake ends
     * as any other. */
    assert_int_equal(
        rls_tls_conn_feed(s[0], hello + n / 2, (size_t)(n - n / 2)), 0);
    assert_true(rls_tls_conn_pending(s[0]) > 0);
    assert_int_equal(pump(&k, s[0], 1 << 20), 0);
    assert_true(rls_tls_conn_ready(s[0]));
    roundtrip(&k, s[0]);
    cli_free(&k);
    for (i = 0; i < N; i++)
        rls_tls_conn_free(s[i]);
    rls_tls_free(t);
}

static rls_tls_t *capped(uint32_t max_handshakes, uint32_t rate)
{
    rls_tls_opts_t o = {path("server.crt"), path("server.key"), NULL,
                        max_handshakes, rate};
    rls_tls_t *t = NULL;
    char err[256];

    assert_int_equal(rls_tls_new(&o, &t, err, sizeof(err)), 0);
    return t;
}

/* --tls-max-handshakes: a listener admits that many handshakes in
 * progress; the next is refused (counted, nothing made) until one ends,
 * by being done or by its connection going. Another listener has its
 * own count. */
static void test_max_handshakes(void **state)
{
    rls_tls_t *t = capped(3, 0);
    rls_tls_stats_t st, other;
    rls_tls_conn_t *s[3], *x = NULL, *y = NULL;
    const char *names[1] = {"grpc"};
    const rls_tls_stats_t *stats[1] = {&st};
    rl_buf_t out;
    cli_t k;
    int i;

    (void)state;
    memset(&st, 0, sizeof(st));
    memset(&other, 0, sizeof(other));
    for (i = 0; i < 3; i++)
        assert_int_equal(
            rls_tls_accept(t, &st, "grpc", "h2", "127.0.0.1", 1000, &s[i]), 0);
    assert_int_equal(st.in_progress, 3);
    assert_int_equal(st.peak, 3);
    assert_true(rls_tls_busy(t, &st, 1000));
    x = (rls_tls_conn_t *)&x; /* refused: set to NULL */
    assert_int_equal(
        rls_tls_accept(t, &st, "grpc", "h2", "127.0.0.1", 1000, &x), RL_EBUSY);
    assert_null(x);
    assert_int_equal(st.failed[RLS_TLS_REFUSED_MAX], 1);
    assert_string_equal(rls_tls_reason_label(RLS_TLS_REFUSED_MAX),
                        "refused_max_handshakes");
    /* Another listener is not full. */
    assert_int_equal(
        rls_tls_accept(t, &other, "http", "h2", "127.0.0.1", 1000, &y), 0);
    rls_tls_conn_free(y);
    assert_int_equal(other.in_progress, 0);
    /* A handshake done leaves the count... */
    cli_init(&k, "ca", h2, sizeof(h2) - 1, NULL);
    assert_int_equal(pump(&k, s[0], 1 << 20), 0);
    assert_true(rls_tls_conn_ready(s[0]));
    assert_int_equal(st.in_progress, 2);
    roundtrip(&k, s[0]);
    cli_free(&k);
    assert_int_equal(
        rls_tls_accept(t, &st, "grpc", "h2", "127.0.0.1", 1000, &x), 0);
    assert_int_equal(st.in_progress, 3);
    /* ...and so does a connection freed midway, once only; an
     * established one freed does not count again. */
    rls_tls_conn_free(s[1]);
    rls_tls_conn_free(s[0]);
    assert_int_equal(st.in_progress, 2);
    assert_false(rls_tls_busy(t, &st, 1000));
    rl_buf_init(&out, 1 << 20);
    assert_int_equal(rls_tls_metrics(&out, names, stats, 1), 0);
    assert_int_equal(rl_buf_append(&out, "", 1), 0);
    assert_non_null(strstr((char *)rl_buf_rptr(&out),
                           "rl_tls_handshakes_total{listener=\"grpc\","
                           "result=\"refused_max_handshakes\"} 1\n"));
    assert_non_null(strstr((char *)rl_buf_rptr(&out),
                           "# TYPE rl_tls_handshakes_in_progress gauge\n"
                           "rl_tls_handshakes_in_progress{listener=\"grpc\"} "
                           "2\n"));
    rl_buf_free(&out);
    rls_tls_conn_free(s[2]);
    assert_int_equal(st.peak, 3);
    rls_tls_conn_free(x);
    /* None left: the burst is over (the peak starts again). */
    assert_int_equal(st.in_progress, 0);
    assert_int_equal(st.peak, 0);
    rls_tls_free(t);
}

/* --tls-handshake-rate: a burst of one second's worth at once, then that
 * many a second (time is a parameter); a refusal takes nothing. */
static void test_handshake_rate(void **state)
{
    rls_tls_t *t = capped(0, 4);
    rls_tls_stats_t st;
    rls_tls_conn_t *c;
    int i, got;

    (void)state;
    memset(&st, 0, sizeof(st));
    for (i = 0; i < 4; i++) {
        assert_int_equal(
            rls_tls_accept(t, &st, "listen", "rl1", "127.0.0.1", 10000, &c), 0);
        rls_tls_conn_free(c);
    }
    assert_true(rls_tls_busy(t, &st, 10000));
    assert_int_equal(
        rls_tls_accept(t, &st, "listen", "rl1", "127.0.0.1", 10000, &c),
        RL_EBUSY);
    assert_int_equal(
        rls_tls_accept(t, &st, "listen", "rl1", "127.0.0.1", 10249, &c),
        RL_EBUSY);
    assert_int_equal(st.failed[RLS_TLS_REFUSED_RATE], 2);
    assert_string_equal(rls_tls_reason_label(RLS_TLS_REFUSED_RATE),
                        "refused_handshake_rate");
    /* One every 250 ms. */
    assert_false(rls_tls_busy(t, &st, 10250));
    assert_int_equal(
        rls_tls_accept(t, &st, "listen", "rl1", "127.0.0.1", 10250, &c), 0);
    rls_tls_conn_free(c);
    assert_int_equal(
        rls_tls_accept(t, &st, "listen", "rl1", "127.0.0.1", 10400, &c),
        RL_EBUSY);
    assert_int_equal(
        rls_tls_accept(t, &st, "listen", "rl1", "127.0.0.1", 10500, &c), 0);
    rls_tls_conn_free(c);
    /* A long quiet fills the bucket to one second's worth, no more. */
    for (got = 0, i = 0; i < 10; i++)
        if (rls_tls_accept(t, &st, "listen", "rl1", "127.0.0.1", 60000, &c) ==
            0) {
            got++;
            rls_tls_conn_free(c);
        }
    assert_int_equal(got, 4);
    assert_int_equal(st.in_progress, 0);
    rls_tls_free(t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_handshake_alpn),
        cmocka_unit_test(test_alpn_choices),
        cmocka_unit_test(test_client_certificates),
        cmocka_unit_test(test_bad_clients),
        cmocka_unit_test(test_reload),
        cmocka_unit_test(test_bad_files),
        cmocka_unit_test(test_counting),
        cmocka_unit_test(test_half_hello_memory),
        cmocka_unit_test(test_max_handshakes),
        cmocka_unit_test(test_handshake_rate),
    };

    /* Before anything of OpenSSL allocates. */
    if (CRYPTO_set_mem_functions(count_malloc, count_realloc, count_free) !=
        1) {
        fprintf(stderr, "CRYPTO_set_mem_functions: too late\n");
        return 1;
    }

    return cmocka_run_group_tests(tests, setup, teardown);
}
