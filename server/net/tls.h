/* TLS on our own listeners (tls.c): OpenSSL under our own transport, as
 * store/redis_tls.c does for the client side, but with no socket: a
 * front end reads ciphertext off its libuv stream, feeds it here and
 * gets plaintext back; it hands plaintext here and writes the ciphertext
 * that comes out with uv_write. The layer does no I/O, so its tests drive
 * it with an OpenSSL client in the same process.
 *
 * Two layers. A configuration (rls_tls_t) holds the server's SSL_CTX,
 * built from --tls-cert, --tls-key and --tls-client-ca: TLS 1.2 at least,
 * ALPN chosen per connection, the client's certificate required and
 * verified when a CA is given. Reloading builds a new SSL_CTX and swaps
 * it in for new connections; a connection's SSL object holds a reference
 * to the SSL_CTX it began with, so established ones keep theirs, and a
 * reload that fails keeps the old one.
 *
 * A connection (rls_tls_conn_t) is one SSL object over two memory BIOs,
 * made once the client's first record (its ClientHello) is whole: until
 * then it holds only what was fed, so a client that sends part of a hello
 * and stalls costs about that much rather than OpenSSL's buffers. Nothing
 * in it is bounded by the peer but what the caller feeds: the caller
 * feeds what one read brought and takes the plaintext out before reading
 * again. */
#ifndef RLS_NET_TLS_H
#define RLS_NET_TLS_H

#include <stddef.h>
#include <stdint.h>

#include "rl_buf.h"

#define RLS_TLS_WHY_MAX 192

typedef struct rls_tls_opts_s {
    const char *cert_file; /* PEM chain, the server's certificate first */
    const char *key_file;  /* PEM, without a passphrase */
    const char *ca_file;   /* NULL: no client certificate asked for */
    /* Each listener's caps on handshakes (rls_tls_accept): in progress
     * at once (--tls-max-handshakes) and begun per second
     * (--tls-handshake-rate); 0: no cap. */
    uint32_t max_handshakes;
    uint32_t handshake_rate;
    /* --tls-client-ca-recheck: after a reload, a connection's client
     * certificate is verified again against the new CAs at its next
     * feed, and the connection fails (RLS_TLS_BAD_CERT) if it no longer
     * verifies. */
    int recheck;
} rls_tls_opts_t;

/* Why a handshake failed, as /metrics counts it: a bounded label. */
typedef enum rls_tls_reason_e {
    RLS_TLS_OK = 0,
    RLS_TLS_NOT_TLS,          /* plaintext (HTTP, an h2c preface...) */
    RLS_TLS_PROTOCOL_VERSION, /* below TLS 1.2, or no common version */
    RLS_TLS_NO_CLIENT_CERT,   /* --tls-client-ca and none was sent */
    RLS_TLS_BAD_CERT,         /* the client's: unknown CA, expired... */
    RLS_TLS_NO_ALPN,          /* offered ALPN without our protocol */
    RLS_TLS_PEER_ALERT,       /* the client refused ours (an alert) */
    RLS_TLS_CLOSED,           /* the client went during the handshake */
    RLS_TLS_TIMEOUT,          /* not done within the deadline */
    RLS_TLS_REFUSED_MAX,      /* at accept: --tls-max-handshakes */
    RLS_TLS_REFUSED_RATE,     /* at accept: --tls-handshake-rate */
    RLS_TLS_OTHER,
    RLS_TLS_NREASONS
} rls_tls_reason_t;

typedef struct rls_tls_s rls_tls_t;
typedef struct rls_tls_conn_s rls_tls_conn_t;

/* Builds a configuration from o, checking that the files are readable,
 * the key matches the certificate and the CA file holds certificates.
 * Returns 0 and *out (release it with rls_tls_free), or RL_EINVAL /
 * RL_ENOMEM with err naming the flag and file (never anything of the
 * key). */
int rls_tls_new(const rls_tls_opts_t *o, rls_tls_t **out, char *err,
                size_t errlen);

/* Reads the same files again into a new SSL_CTX for the connections
 * accepted from now on. Returns 0, or the error of rls_tls_new with err
 * set, and then the configuration in force is unchanged. */
int rls_tls_reload(rls_tls_t *t, char *err, size_t errlen);

/* The same in two steps, for a reload built off the loop: prepare reads
 * the files into a new SSL_CTX (on any thread; nothing in force changes;
 * returns as rls_tls_new), commit puts it in force (on the loop, between
 * accepts), discard drops a prepared one. */
int rls_tls_prepare(rls_tls_t *t, char *err, size_t errlen);
void rls_tls_commit(rls_tls_t *t);
void rls_tls_discard(rls_tls_t *t);

/* Its files: 0 the certificate, 1 the key, 2 the client CA (or NULL). */
const char *rls_tls_file(const rls_tls_t *t, int which);

/* The subject and expiry of the certificate in force, for the log line
 * of a reload ("CN=..., expires ..."). */
void rls_tls_describe(const rls_tls_t *t, char *out, size_t outlen);

/* NULL is fine. Connections already made keep their SSL_CTX alive. */
void rls_tls_free(rls_tls_t *t);

/* A server-side connection under t's SSL_CTX in force (it keeps that
 * one, also when a reload comes before the client's hello). alpn is the one
 * protocol it speaks ("h2", "http/1.1"; a static string): a client that
 * offers ALPN without it is refused at the handshake (a client offering
 * none is served). Returns NULL when out of memory. */
rls_tls_conn_t *rls_tls_conn_new(rls_tls_t *t, const char *alpn);

/* The client side of the same (the xDS client's connection to its
 * control plane): an SSL object under ctx (the caller's client SSL_CTX,
 * which must outlive the call; the connection keeps a reference), the
 * server's name `name` sent as SNI and checked against its certificate
 * (an IP address is checked as one), its ClientHello waiting in
 * rls_tls_conn_take. Then feed, read, write, take, ready and why work
 * as for a server's connection (a failed handshake: why names the
 * server's certificate or OpenSSL's reason). Returns NULL when out of
 * memory. */
struct ssl_ctx_st;
rls_tls_conn_t *rls_tls_conn_client(struct ssl_ctx_st *ctx, const char *name);

/* --threads: the certificates are read once, by the first loop, and every
 * loop holds its own rls_tls_t (its caps and counters) over the same
 * SSL_CTX. new_like makes another loop's from the first's (sharing its
 * SSL_CTX; NULL: out of memory); ctx_ref hands the one in force, a
 * reference taken (with its certificate's notAfter), and install puts
 * such a reference in force in t, as a reload's commit does, on t's loop. */
rls_tls_t *rls_tls_new_like(const rls_tls_t *from);
struct ssl_ctx_st *rls_tls_ctx_ref(const rls_tls_t *t, int64_t *not_after);
void rls_tls_install(rls_tls_t *t, struct ssl_ctx_st *ctx, int64_t not_after);
/* Drops a reference ctx_ref took (NULL is fine). */
void rls_tls_ctx_unref(struct ssl_ctx_st *ctx);
/* NULL is fine. */
void rls_tls_conn_free(rls_tls_conn_t *c);

/* Feeds n bytes of ciphertext read from the socket, and drives the
 * handshake on. Returns 0, or RL_EIO when the handshake failed (reason
 * and why set, and an alert to the client may be waiting in
 * rls_tls_conn_take). Ciphertext after the handshake is decrypted only
 * by rls_tls_conn_read. */
int rls_tls_conn_feed(rls_tls_conn_t *c, const uint8_t *p, size_t n);

/* Decrypts into buf (cap bytes). Returns the bytes put there (> 0), 0
 * when no whole record is buffered (feed more) or the handshake is not
 * done, RL_ECLOSED when the client sent close_notify, or RL_EIO (why
 * set). */
int rls_tls_conn_read(rls_tls_conn_t *c, uint8_t *buf, size_t cap);

/* Encrypts n bytes of plaintext; the ciphertext waits for
 * rls_tls_conn_take. Only once the handshake is done. Returns 0,
 * RL_ENOMEM or RL_EIO. */
int rls_tls_conn_write(rls_tls_conn_t *c, const uint8_t *p, size_t n);

/* Sends a close_notify alert (its ciphertext waits for take). */
void rls_tls_conn_shutdown(rls_tls_conn_t *c);

/* Bytes of ciphertext waiting to be sent. */
size_t rls_tls_conn_pending(const rls_tls_conn_t *c);

/* Moves all the ciphertext waiting to out. Returns 0 or out's error
 * (then it stays). */
int rls_tls_conn_take(rls_tls_conn_t *c, rl_buf_t *out);

/* 1 once the handshake is done. */
int rls_tls_conn_ready(const rls_tls_conn_t *c);

/* The protocol ALPN settled on ("h2"), or "" when the client offered
 * none. */
const char *rls_tls_conn_alpn(const rls_tls_conn_t *c);

/* Records a failure found by the caller (RLS_TLS_CLOSED,
 * RLS_TLS_TIMEOUT) with its text, unless one is recorded already. */
void rls_tls_conn_fail(rls_tls_conn_t *c, rls_tls_reason_t r, const char *why);

/* Why the handshake failed: the label (RLS_TLS_OK while none did) and
 * a line for the log ("TLS handshake: certificate verify failed:
 * certificate has expired"). */
rls_tls_reason_t rls_tls_conn_reason(const rls_tls_conn_t *c);
const char *rls_tls_conn_why(const rls_tls_conn_t *c);

/* The label of r, as in /metrics ("not_tls"). */
const char *rls_tls_reason_label(rls_tls_reason_t r);

/* 1 when p[0, n) begins as a TLS client's first record does (a
 * handshake record, TLS 1.0 to 1.3): TLS sent to a plaintext listener. */
int rls_tls_is_hello(const uint8_t *p, size_t n);

/* What a plaintext listener answers such a client: a TLS alert record
 * (fatal handshake_failure), the one thing its TLS stack can read. */
extern const uint8_t rls_tls_plain_alert[7];

/* A plaintext listener's TLS clients, for /metrics, and its log's rate
 * cap. */
typedef struct rls_tls_plain_s {
    uint64_t count;
    uint64_t log_next_ms;
    uint64_t not_logged;
} rls_tls_plain_t;

/* Counts a TLS client on a plaintext listener and logs it (a warning
 * naming the listener and the client's address) at most once a second;
 * the next line says how many were not. */
void rls_tls_count_plain(rls_tls_plain_t *st, const char *listener,
                         const char *peer, uint64_t now_ms);

/* Appends rl_tls_on_plaintext_port_total{listener} for the n listeners
 * (names[i], st[i]; a NULL st is skipped). Returns 0 or the buffer's
 * error. */
int rls_tls_plain_metrics(rl_buf_t *out, const char *const *names,
                          const rls_tls_plain_t *const *st, size_t n);

/* A listener's handshakes, for /metrics, and its log's rate cap; and
 * the state of its caps (rls_tls_accept). Zeroed before use. */
typedef struct rls_tls_stats_s {
    uint64_t ok;                       /* handshakes done */
    uint64_t failed[RLS_TLS_NREASONS]; /* by reason ([RLS_TLS_OK]: 0) */
    uint64_t log_next_ms[RLS_TLS_NREASONS];
    uint64_t not_logged[RLS_TLS_NREASONS];
    uint64_t in_progress; /* admitted, handshake neither done nor gone */
    uint64_t peak;        /* most in progress since it was last 0 */
    uint64_t rate_milli;  /* the rate's bucket, in thousandths */
    uint64_t rate_ms;     /* when it was last filled (loop time) */
    int rate_started;
} rls_tls_stats_t;

/* A new connection of the listener whose handshakes st counts (st
 * outlives the connection), if the listener's caps let one more begin:
 * (When the last of a burst of at least 64 ends, by its handshake or its
 * connection's end, malloc_trim gives back what the burst's SSL objects
 * held, which glibc would otherwise keep.)
 * fewer than max_handshakes in progress and a handshake left of
 * handshake_rate this second (the bucket holds one second's worth, so a
 * burst of that many passes at once). Refusing costs nothing but this
 * call: a refused client is to be closed at once, before anything of it
 * is read, so a flood of ClientHellos cannot keep the loop signing
 * (issue 40). The connection counts in st->in_progress until its
 * handshake is done or it is freed.
 *
 * Returns 0 and *out (rls_tls_conn_new's), RL_ENOMEM, or RL_EBUSY when
 * refused: then counted in st (refused_max_handshakes or
 * refused_handshake_rate), logged as count_failure does, naming
 * listener and peer, and the caller closes the connection (after
 * rls_tls_plain_alert, the one thing the client's TLS stack can read).
 * now_ms: the loop's time. */
int rls_tls_accept(rls_tls_t *t, rls_tls_stats_t *st, const char *listener,
                   const char *alpn, const char *peer, uint64_t now_ms,
                   rls_tls_conn_t **out);

/* 1 when rls_tls_accept would refuse a connection now (nothing is taken
 * or counted): for a front end that must not make room for one it would
 * refuse. */
int rls_tls_busy(const rls_tls_t *t, const rls_tls_stats_t *st,
                 uint64_t now_ms);

/* Counts c's failed handshake and logs it (a warning naming the
 * listener, the client's address `peer` and why) unless a line of the
 * same reason was logged in the last second; the next line says how
 * many were not. now_ms: the loop's time. */
void rls_tls_count_failure(rls_tls_stats_t *st, const char *listener,
                           const rls_tls_conn_t *c, const char *peer,
                           uint64_t now_ms);

/* Appends rl_tls_handshakes_total{listener,result} and
 * rl_tls_handshakes_in_progress{listener} for n listeners (names[i],
 * stats[i]; a NULL stats is skipped), nothing when none has TLS. Returns
 * 0 or the buffer's error. */
int rls_tls_metrics(rl_buf_t *out, const char *const *names,
                    const rls_tls_stats_t *const *stats, size_t n);

/* Appends rl_tls_certificate_expiry_seconds{listener}: the notAfter of
 * t's certificate in force (the one the last good load or reload put
 * there), in seconds since the epoch, once for each of the n listeners
 * that speaks TLS (stats[i] not NULL, named names[i]); nothing when t is
 * NULL or no listener speaks TLS. Returns 0 or the buffer's error. */
int rls_tls_cert_metrics(rl_buf_t *out, const rls_tls_t *t,
                         const char *const *names,
                         const rls_tls_stats_t *const *stats, size_t n);

#endif
