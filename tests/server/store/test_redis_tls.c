/* The TLS transport under hiredis (redis_uv.c over redis_tls.c) against
 * peers that fail it: one that closes at once, one that cuts the
 * handshake midway, a plaintext server on a TLS connection, one that
 * answers one of three commands and closes; one that answers one, then
 * streams an endless "$4000000000" reply (dropped at the reply cap,
 * rls_redis_uv_cap, before a MiB of it is read); and one that serves a
 * thousand pipelined commands, sent through hold/release's write-now path,
 * and must answer them all. Each peer is a blocking thread (OpenSSL on a
 * socket BIO, with a certificate made here), the client the store's own
 * adapter on a libuv loop. The assertion is hiredis's contract: every
 * command's callback fires exactly once (with NULL when the connection
 * failed), the connect callback once, the log reason (errstr) names what
 * happened, and the loop closes with nothing left open. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <hiredis/async.h>
#include <hiredis/hiredis.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <uv.h>

#include "rl_error.h"
#include "store/redis_tls.h"
#include "store/redis_uv.h"

#define NCMD_MAX 1000

enum { CLOSE_AT_ONCE, CUT_MIDWAY, PLAINTEXT, ONE_THEN_CLOSE, SERVE, ENDLESS };

/* What ENDLESS streams at most, if the client never stops it. */
#define ENDLESS_MAX ((size_t)256 << 20)

typedef struct peer_s {
    int kind, lfd, port, ncmd;
    size_t sent;  /* ENDLESS: bytes of the endless reply written */
    SSL_CTX *ctx; /* the server's, for ONE_THEN_CLOSE and SERVE */
    pthread_t th;
} peer_t;

typedef struct cli_s {
    uv_loop_t loop;
    redisAsyncContext *ac;
    int closed, connects, connect_status, disconnects;
    int calls[NCMD_MAX], nulls, oks;
    char why[128];
    int ncmd;
} cli_t;

/* ---- the peer -----------------------------------------------------------*/

/* A self-signed certificate for the peer: the client runs insecure here
 * (certificate checks are e2e_redis_tls's), so any will do. */
static SSL_CTX *server_ctx(void)
{
    EVP_PKEY *pk = EVP_EC_gen("P-256");
    X509 *x = X509_new();
    SSL_CTX *ctx = SSL_CTX_new(TLS_server_method());

    assert_non_null(pk);
    assert_non_null(x);
    assert_non_null(ctx);
    X509_set_version(x, 2);
    ASN1_INTEGER_set(X509_get_serialNumber(x), 1);
    X509_gmtime_adj(X509_getm_notBefore(x), 0);
    X509_gmtime_adj(X509_getm_notAfter(x), 3600);
    X509_set_pubkey(x, pk);
    X509_NAME_add_entry_by_txt(X509_get_subject_name(x), "CN", MBSTRING_ASC,
                               (const unsigned char *)"peer", -1, -1, 0);
    X509_set_issuer_name(x, X509_get_subject_name(x));
    assert_true(X509_sign(x, pk, EVP_sha256()) > 0);
    assert_int_equal(SSL_CTX_use_certificate(ctx, x), 1);
    assert_int_equal(SSL_CTX_use_PrivateKey(ctx, pk), 1);
    X509_free(x);
    EVP_PKEY_free(pk);
    return ctx;
}

/* Counts whole PING commands in what the client sent. */
static int count_pings(const char *buf, size_t n)
{
    static const char ping[] = "*1\r\n$4\r\nPING\r\n";
    size_t i;
    int k = 0;

    for (i = 0; i + sizeof(ping) - 1 <= n; i++)
        if (memcmp(buf + i, ping, sizeof(ping) - 1) == 0)
            k++;
    return k;
}

static void *peer_main(void *arg)
{
    peer_t *p = arg;
    int fd = accept(p->lfd, NULL, NULL), seen = 0, answered = 0, n;
    char buf[16384];
    SSL *ssl;

    if (fd < 0)
        return NULL;
    switch (p->kind) {
    case CLOSE_AT_ONCE:
        break;
    case CUT_MIDWAY:
        /* The ClientHello, then the start of a handshake record that
         * announces 1,000 bytes and brings 20. */
        if (recv(fd, buf, sizeof(buf), 0) > 0) {
            static const char part[25] = {0x16, 0x03,       0x03,
                                          0x03, (char)0xe8, 0x02,
                                          0x00, 0x03,       (char)0xe4};
            send(fd, part, sizeof(part), MSG_NOSIGNAL);
        }
        break;
    case PLAINTEXT:
        /* Redis's answer to a line it cannot parse, then waits. */
        if (recv(fd, buf, sizeof(buf), 0) > 0)
            send(fd, "-ERR unknown command\r\n", 22, MSG_NOSIGNAL);
        while (recv(fd, buf, sizeof(buf), 0) > 0)
            ;
        break;
    case ENDLESS: {
        static const char head[] = "+PONG\r\n$4000000000\r\n";

        ssl = SSL_new(p->ctx);
        SSL_set_fd(ssl, fd);
        if (SSL_accept(ssl) == 1 && SSL_read(ssl, buf, sizeof(buf)) > 0 &&
            SSL_write(ssl, head, (int)sizeof(head) - 1) > 0) {
            memset(buf, 'x', sizeof(buf));
            while (p->sent < ENDLESS_MAX &&
                   (n = SSL_write(ssl, buf, sizeof(buf))) > 0)
                p->sent += (size_t)n;
        }
        SSL_free(ssl);
        break;
    }
    case ONE_THEN_CLOSE:
    case SERVE:
        ssl = SSL_new(p->ctx);
        SSL_set_fd(ssl, fd);
        if (SSL_accept(ssl) == 1) {
            while (answered < p->ncmd &&
                   (n = SSL_read(ssl, buf, sizeof(buf))) > 0) {
                /* A command split across reads is not counted; the
                 * client's commands are short and come whole in a
                 * record, as TLS does not split records mid-write. */
                seen += count_pings(buf, (size_t)n);
                while (answered < seen) {
                    SSL_write(ssl, "+PONG\r\n", 7);
                    answered++;
                    if (p->kind == ONE_THEN_CLOSE)
                        goto out;
                }
            }
        }
    out:
        SSL_free(ssl);
        break;
    }
    close(fd);
    return NULL;
}

static void peer_start(peer_t *p, int kind, int ncmd)
{
    struct sockaddr_in a;
    socklen_t len = sizeof(a);

    memset(p, 0, sizeof(*p));
    p->kind = kind;
    p->ncmd = ncmd;
    if (kind == ONE_THEN_CLOSE || kind == SERVE || kind == ENDLESS)
        p->ctx = server_ctx();
    p->lfd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(p->lfd >= 0);
    memset(&a, 0, sizeof(a));
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(bind(p->lfd, (struct sockaddr *)&a, sizeof(a)), 0);
    assert_int_equal(listen(p->lfd, 1), 0);
    assert_int_equal(getsockname(p->lfd, (struct sockaddr *)&a, &len), 0);
    p->port = ntohs(a.sin_port);
    assert_int_equal(pthread_create(&p->th, NULL, peer_main, p), 0);
}

static void peer_join(peer_t *p)
{
    pthread_join(p->th, NULL);
    close(p->lfd);
    SSL_CTX_free(p->ctx);
}

/* ---- the client ---------------------------------------------------------*/

static cli_t *cli_of(const redisAsyncContext *ac)
{
    return ac->data;
}

static void on_closed(void *arg)
{
    ((cli_t *)arg)->closed++;
}

static void on_connect(const redisAsyncContext *ac, int status)
{
    cli_t *c = cli_of(ac);

    c->connects++;
    c->connect_status = status;
    if (status != REDIS_OK)
        snprintf(c->why, sizeof(c->why), "%s", ac->errstr);
}

static void on_disconnect(const redisAsyncContext *ac, int status)
{
    cli_t *c = cli_of(ac);

    (void)status;
    c->disconnects++;
    if (ac->err)
        snprintf(c->why, sizeof(c->why), "%s", ac->errstr);
}

static void on_reply(redisAsyncContext *ac, void *r, void *priv)
{
    cli_t *c = cli_of(ac);
    redisReply *rep = r;
    int i = (int)(intptr_t)priv;

    c->calls[i]++;
    if (rep == NULL)
        c->nulls++;
    else if (rep->type == REDIS_REPLY_STATUS && strcmp(rep->str, "PONG") == 0)
        c->oks++;
}

/* Connects over TLS (not checking the peer's certificate) and queues
 * ncmd PINGs behind the connect, as redis_conn.c queues its handshake. */
static void cli_start(cli_t *c, rls_redis_tls_t **tls, int port, int ncmd)
{
    rls_redis_tls_opts_t o = {NULL, NULL, NULL, NULL, 1};
    char err[256];
    int i;

    memset(c, 0, sizeof(*c));
    c->ncmd = ncmd;
    assert_int_equal(uv_loop_init(&c->loop), 0);
    assert_int_equal(rls_redis_tls_new(&o, tls, err, sizeof(err)), 0);
    c->ac = redisAsyncConnect("127.0.0.1", port);
    assert_non_null(c->ac);
    assert_int_equal(c->ac->err, 0);
    c->ac->data = c;
    assert_int_equal(rls_redis_uv_attach(c->ac, &c->loop, on_closed, c), 0);
    assert_int_equal(rls_redis_uv_use_tls(c->ac, *tls, "127.0.0.1"), 0);
    redisAsyncSetConnectCallback(c->ac, on_connect);
    redisAsyncSetDisconnectCallback(c->ac, on_disconnect);
    for (i = 0; i < ncmd; i++)
        redisAsyncCommand(c->ac, on_reply, (void *)(intptr_t)i, "PING");
}

static void run_until_closed(cli_t *c)
{
    int rounds = 0;

    while (!c->closed && rounds++ < 100000)
        uv_run(&c->loop, UV_RUN_ONCE);
    assert_int_equal(c->closed, 1);
}

static void cli_end(cli_t *c, rls_redis_tls_t *tls)
{
    int i;

    uv_run(&c->loop, UV_RUN_DEFAULT);
    assert_int_equal(uv_loop_close(&c->loop), 0);
    for (i = 0; i < c->ncmd; i++)
        assert_int_equal(c->calls[i], 1);
    rls_redis_tls_free(tls);
}

/* The connection fails before it is up: the connect callback once with
 * REDIS_ERR and the reason, every queued command once with NULL, no
 * disconnect callback (hiredis calls it only for a connection that was
 * up). */
static void fails_in_handshake(int kind, const char *why)
{
    rls_redis_tls_t *tls;
    peer_t p;
    cli_t c;

    peer_start(&p, kind, 0);
    cli_start(&c, &tls, p.port, 3);
    run_until_closed(&c);
    assert_int_equal(c.connects, 1);
    assert_int_equal(c.connect_status, REDIS_ERR);
    assert_int_equal(c.disconnects, 0);
    assert_int_equal(c.nulls, 3);
    print_message("reason: %s\n", c.why);
    if (strstr(c.why, why) == NULL)
        fail_msg("reason '%s' does not say '%s'", c.why, why);
    peer_join(&p);
    cli_end(&c, tls);
}

static void test_closed_at_once(void **state)
{
    (void)state;
    fails_in_handshake(CLOSE_AT_ONCE, "is it serving TLS");
}

static void test_cut_midway(void **state)
{
    (void)state;
    /* Closed, or reset if our next flight was still unread. */
    fails_in_handshake(CUT_MIDWAY, "by the server midway");
}

static void test_plaintext_server(void **state)
{
    (void)state;
    fails_in_handshake(PLAINTEXT, "TLS handshake");
}

/* Up, one reply, then the peer closes: the first command gets its reply,
 * the other two NULL, once each; the disconnect callback once, and the
 * reason says the server closed the connection. */
static void test_one_reply_then_close(void **state)
{
    rls_redis_tls_t *tls;
    peer_t p;
    cli_t c;

    (void)state;
    peer_start(&p, ONE_THEN_CLOSE, 3);
    cli_start(&c, &tls, p.port, 3);
    run_until_closed(&c);
    assert_int_equal(c.connects, 1);
    assert_int_equal(c.connect_status, REDIS_OK);
    assert_int_equal(c.oks, 1);
    assert_int_equal(c.calls[0], 1);
    assert_int_equal(c.nulls, 2);
    assert_int_equal(c.disconnects, 1);
    print_message("reason: %s\n", c.why);
    if (strstr(c.why, "closed by the server") == NULL)
        fail_msg("reason '%s'", c.why);
    peer_join(&p);
    cli_end(&c, tls);
}

/* Up, one reply, then one that never ends, under a 1 MiB cap: the first
 * command gets its reply, the other two NULL once each; the connection
 * is failed as by an I/O error (one disconnect callback), errstr and
 * rls_redis_uv_cap_why say why, the over is counted once, and the peer
 * could write no more than the cap and what the sockets buffer. */
static void test_endless_reply(void **state)
{
    rls_redis_tls_t *tls;
    uint64_t over = 0;
    peer_t p;
    cli_t c;

    (void)state;
    signal(SIGPIPE, SIG_IGN); /* the peer writes on after we close */
    peer_start(&p, ENDLESS, 3);
    cli_start(&c, &tls, p.port, 3);
    rls_redis_uv_cap(c.ac, (size_t)1 << 20, &over);
    run_until_closed(&c);
    assert_int_equal(c.connects, 1);
    assert_int_equal(c.connect_status, REDIS_OK);
    assert_int_equal(c.oks, 1);
    assert_int_equal(c.nulls, 2);
    assert_int_equal(c.disconnects, 1);
    assert_int_equal(over, 1);
    print_message("reason: %s\n", c.why);
    if (strstr(c.why, "a reply went past the cap (1048576 bytes") == NULL)
        fail_msg("reason '%s'", c.why);
    peer_join(&p);
    print_message("the peer wrote %zu bytes of it\n", p.sent);
    assert_true(p.sent < ((size_t)16 << 20));
    cli_end(&c, tls);
}

/* Up, then a thousand commands through hold/release's write-now path
 * (the store's), a big pipelined write that leaves in pieces: all
 * answered, in order, once. Then the client lets go: nothing more fires. */
static void test_serves_pipeline(void **state)
{
    rls_redis_tls_t *tls;
    peer_t p;
    cli_t c;
    int i, rounds = 0;

    (void)state;
    peer_start(&p, SERVE, NCMD_MAX);
    cli_start(&c, &tls, p.port, 1);
    while (c.oks < 1 && rounds++ < 100000 && !c.closed)
        uv_run(&c.loop, UV_RUN_ONCE);
    assert_int_equal(c.oks, 1);
    c.ncmd = NCMD_MAX;
    rls_redis_uv_hold(c.ac);
    for (i = 1; i < NCMD_MAX; i++)
        redisAsyncCommand(c.ac, on_reply, (void *)(intptr_t)i, "PING");
    rls_redis_uv_release(c.ac, 1);
    rounds = 0;
    while (c.oks < NCMD_MAX && rounds++ < 100000 && !c.closed)
        uv_run(&c.loop, UV_RUN_ONCE);
    assert_int_equal(c.oks, NCMD_MAX);
    assert_int_equal(c.nulls, 0);
    redisAsyncFree(c.ac);
    run_until_closed(&c);
    assert_int_equal(c.disconnects, 1); /* redisAsyncFree of a live one */
    peer_join(&p);
    cli_end(&c, tls);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_closed_at_once),
        cmocka_unit_test(test_cut_midway),
        cmocka_unit_test(test_plaintext_server),
        cmocka_unit_test(test_one_reply_then_close),
        cmocka_unit_test(test_endless_reply),
        cmocka_unit_test(test_serves_pipeline),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
