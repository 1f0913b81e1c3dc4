/* Internals shared by the files of librlc. Nothing here is exported: the
 * library is built with -fvisibility=hidden and a version script, and these
 * names carry the rlc__ prefix (two underscores, as libuv's uv__ do) so they
 * cannot be mistaken for the public API. */
#ifndef RLC_INT_H
#define RLC_INT_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include <openssl/ssl.h>

#include "rl_buf.h"
#include "rl_clock.h"
#include "rl_msg.h"
#include "rlc.h"

/* Largest frame a valid request can encode to: header, id, key, cost,
 * limit, window, rule, op, handle and actual, each with its tag and
 * length. Sizes output buffers. */
#define RLC__CHECK_FRAME_MAX                                                   \
    (5 + 11 + 3 + RLC_KEY_MAX + 6 + 11 + 6 + 3 + RLC_RULE_MAX + 2 + 3 +        \
     RLC_HANDLE_MAX + 11)

/* Reads of the socket go into this much free space at a time. */
#define RLC__READ_CHUNK 65536

/* One resolved server address. Names that resolve to several addresses
 * become several entries sharing one text. */
typedef struct rlc__addr_s {
    const char *text; /* "HOST:PORT" as given, owned by the conf */
    struct sockaddr_storage sa;
    socklen_t len;
} rlc__addr_t;

typedef struct rlc__tls_s rlc__tls_t;

/* Options after validation, with defaults applied and addresses resolved. */
typedef struct rlc__conf_s {
    rlc_options_t o; /* o.servers and the o.tls_* strings are not kept */
    rlc__addr_t *addrs;
    size_t naddr;
    char *texts;     /* storage of the address texts */
    rlc__tls_t *tls; /* NULL: plaintext */
} rlc__conf_t;

/* Room for a failure's reason in words (rlc_last_error). */
#define RLC__WHY_MAX 192

/* Rewrites why (RLC__WHY_MAX bytes) as "ADDR: reason", the reason being
 * what why held or, when empty, status in words. */
void rlc__why_at(char *why, const char *addr, int status);

/* Validates opts, resolves its addresses (a blocking lookup for names) and
 * loads its TLS files. Returns 0, RLC_EINVAL, RLC_EADDR, RLC_ENOMEM or
 * RLC_ETLS (a file that does not load), with the reason in why when there
 * is more to say; on error cf holds nothing to free. */
int rlc__conf_init(rlc__conf_t *cf, const rlc_options_t *opts, char *why,
                   size_t whylen);
void rlc__conf_free(rlc__conf_t *cf);

/* Validates req and appends its frame, with this id, to out. On success
 * stores the inline window in *window_s. Returns 0, a validation error,
 * RLC_EINVAL (NULL req), RLC_EFULL or RLC_ENOMEM; out is unchanged on
 * error. */
int rlc__encode(rl_buf_t *out, const rlc_check_t *req, uint64_t id,
                uint32_t *window_s);

/* As rlc__encode for any op: a handle op (SETTLE, RELEASE, RENEW) sends
 * its handle (and actual) and no check; the others validate req->check as
 * rlc__encode does. Returns 0, a validation error, RLC_EHANDLE, RLC_EINVAL
 * (NULL req, unknown op), RLC_EFULL or RLC_ENOMEM; out is unchanged on
 * error. */
int rlc__encode_x(rl_buf_t *out, const rlc_xop_t *req, uint64_t id,
                  uint32_t *window_s);

/* 1 for the ops that carry a handle and are never decided by policy. */
int rlc__op_has_handle(int op);

/* Fills x from a server's answer to a request of this op (the handle is
 * copied; one over RLC_HANDLE_MAX turns the answer into ERROR). */
void rlc__xresult_from(rlc_xresult_t *x, int op, const rl_result_t *r,
                       uint32_t window_s, uint64_t unix_ms);

/* As rlc__result_fail for a request of this op: handle ops are never
 * failed open. */
void rlc__xresult_fail(rlc_xresult_t *x, int op, uint64_t id, int status,
                       int fail_mode, uint32_t window_s, uint64_t unix_ms);

/* The loop an async client runs on. */
struct uv_loop_s *rlc__async_loop(const rlc_async_t *c);

/* Fills res from a server's answer. */
void rlc__result_from(rlc_result_t *res, const rl_result_t *r,
                      uint32_t window_s, uint64_t unix_ms);

/* Fills res for a check no server answered: status is the reason, and the
 * code follows fail_mode (except RLC_ECANCELED and validation errors, which
 * are never decisions: code ERROR, no flag). */
void rlc__result_fail(rlc_result_t *res, uint64_t id, int status, int fail_mode,
                      uint32_t window_s, uint64_t unix_ms);

/* The delay after `cur` (0 at first) for a failed round: doubled, within
 * [min, max], plus up to 25% jitter from *seed. */
uint32_t rlc__backoff(uint32_t cur, const rlc_options_t *o, unsigned *seed);

/* Opens a non-blocking TCP socket (TCP_NODELAY, close-on-exec) and starts
 * connecting it to a. Returns 0 with *fd set when connected already,
 * RLC_EAGAIN with *fd set while the connect is in progress (wait for
 * writability, then call rlc__sock_finish), or an error with *fd -1. */
int rlc__sock_connect(const rlc__addr_t *a, int *fd);

/* The outcome of a connect that became writable: 0 or an RLC_E* code. */
int rlc__sock_finish(int fd);

/* Maps an errno value from connect/send/recv to an RLC_E* code. */
int rlc__errno(int err);

/* ---- TLS and the byte stream (tls.c) ------------------------------------ */

/* What a would-block send, receive or handshake step waits for. */
#define RLC__WANT_READ 1
#define RLC__WANT_WRITE 2

/* The client side of TLS from opts (NULL *out when opts ask for none):
 * TLS 1.2+, ALPN "rl1", the server verified against tls_ca_file (or the
 * system's CAs) unless tls_insecure. Returns 0, RLC_EINVAL, RLC_ENOMEM or
 * RLC_ETLS with the reason in why. */
int rlc__tls_new(const rlc_options_t *opts, rlc__tls_t **out, char *why,
                 size_t whylen);
void rlc__tls_free(rlc__tls_t *t); /* NULL is fine */

/* A TLS session over the connected socket fd to a (its host, or the
 * configured name, is what the certificate must carry). Returns 0 with
 * *ssl set, RLC_EADDR or RLC_ENOMEM. */
int rlc__tls_start(const rlc__tls_t *t, const rlc__addr_t *a, int fd,
                   SSL **ssl);

/* One step of the handshake: 0 when done, RLC_EAGAIN with *want set, or
 * RLC_ETLS / a transport error with the reason in why. */
int rlc__tls_handshake(SSL *ssl, int *want, char *why, size_t whylen);

/* Sends or receives on fd, through ssl when it is not NULL, never
 * blocking and never raising SIGPIPE. Return bytes moved (> 0), 0 for the
 * peer's end of stream (receive only), RLC_EAGAIN with *want saying what
 * to wait for, or an RLC_E* error; RLC_ETLS with the reason in why
 * (RLC__WHY_MAX bytes; NULL: not wanted), e.g. the server's alert when it
 * refused our certificate after a TLS 1.3 handshake. */
long rlc__io_send(int fd, SSL *ssl, const void *p, size_t n, int *want,
                  char *why);
long rlc__io_recv(int fd, SSL *ssl, void *p, size_t n, int *want, char *why);

/* 1 when ssl holds received bytes that no poll would announce. */
int rlc__io_pending(SSL *ssl);

/* Ends our side of the stream: TLS's close_notify, then the write side. */
void rlc__io_shutdown(int fd, SSL *ssl);

void rlc__tls_end(SSL *ssl); /* NULL is fine */

#endif
