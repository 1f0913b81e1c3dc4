/* librlc: the C client of the ratelimit service.
 *
 * One question per incoming request, "may this caller do this now?", asked
 * of rl-server over TCP (DESIGN.md, "Wire protocol"). Two APIs share one
 * options struct and one result struct:
 *
 *   blocking   rlc_connect, rlc_check, rlc_check_batch, rlc_free
 *   async      rlc_async_new, rlc_async_check, rlc_async_free, on a libuv
 *              loop that the caller owns and runs
 *
 * reservations (rlc_reserve, rlc_settle) and leases (rlc_acquire,
 * rlc_release, rlc_renew) in both APIs and in batches (rlc_xop_batch), and
 * a lease keeper that renews a lease while the work runs, on a thread of
 * its own (rlc_lease_keep, rlc_lease_done) or on an async client's loop
 * (rlc_async_lease_keep, rlc_async_lease_done),
 *
 * and pure helpers turn a result into HTTP status and headers.
 *
 * Errors: functions that can fail return 0 or a negative RLC_E* code;
 * rlc_strerror() describes it. Types are opaque; free functions accept NULL.
 *
 * Threads: the library has no global state. A client, blocking or async, is
 * used by one thread at a time: a blocking client by whichever thread calls
 * it (give each thread its own, or guard a shared one with a mutex); an
 * async client only by the thread that runs its loop, and its callbacks run
 * on that thread. The HTTP helpers and rlc_strerror are safe anywhere.
 * rlc_lease_keep starts the one thread the library ever starts, with a
 * client of its own.
 *
 * Signals: the library never raises SIGPIPE (it sends with MSG_NOSIGNAL) and
 * never changes signal dispositions.
 *
 * Server shutdown (GOAWAY): a response with id 0 is about the connection,
 * never an answer to a check. When rl-server stops (on SIGTERM, after its
 * --drain-ms if set), it writes on every connection one notice: id 0, code
 * ERROR, notice NOTICE_GOAWAY (field 9; error "server is shutting down",
 * rlc_strerror(RLC_ESHUTDOWN), is for people); then
 * it keeps reading and answering everything until the client closes its
 * side (for at least 5 s). Both APIs honour it, so a stopping server fails no
 * check that reached it:
 *   async     nothing new is put on that connection: the requests already
 *             buffered still go out, whole, then the client shuts down its
 *             write side and reads the remaining answers until the server's
 *             end of file; checks submitted after the notice wait, and go
 *             out on a new connection made at once (no backoff), starting
 *             at the next address. The state callback reports the end with
 *             status RLC_ESHUTDOWN and the new connection as usual.
 *   blocking  a call that is waiting gets its answers and returns normally;
 *             the connection is then closed. A notice found on an idle
 *             connection closes it before anything is sent. Either way the
 *             next call connects again, at once and without an error,
 *             starting at the next address.
 * Behind a load balancer (one address), the new connection reaches another
 * server. */
#ifndef RLC_H
#define RLC_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__) || defined(__clang__)
#define RLC_EXPORT __attribute__((visibility("default")))
#else
#define RLC_EXPORT
#endif

#define RLC_VERSION_MAJOR 0
#define RLC_VERSION_MINOR 1
#define RLC_VERSION_PATCH 0

/* libuv's loop, declared here so that this header does not include uv.h.
 * It is the same type as uv_loop_t: pass a uv_loop_t * where it is asked
 * for. */
struct uv_loop_s;

/* ------------------------------------------------------------------------ */
/* Error codes. The values are those of the service's own error table, so a
 * code is the same number in the client, the server and their logs. */

#define RLC_OK 0
#define RLC_EAGAIN (-1)      /* need more bytes (internal; never returned) */
#define RLC_ENOMEM (-2)      /* out of memory */
#define RLC_EFULL (-3)       /* a buffer or array is too small */
#define RLC_EFRAMEFLAG (-4)  /* the server sent a compressed/broken frame */
#define RLC_EFRAMESIZE (-5)  /* the server sent a frame over max_frame */
#define RLC_EDECODE (-6)     /* the server sent an undecodable message */
#define RLC_EKEYEMPTY (-7)   /* key is empty */
#define RLC_EKEYLONG (-8)    /* key is longer than RLC_KEY_MAX bytes */
#define RLC_EKEYNUL (-9)     /* key contains a NUL byte */
#define RLC_ENOLIMIT (-10)   /* neither limit and window_s nor rule */
#define RLC_EWINDOW (-11)    /* window_s is 0 while limit is set */
#define RLC_EWINDOWMAX (-12) /* window_s over RLC_WINDOW_MAX_S */
#define RLC_ELIMITMAX (-13)  /* limit over 2^63-1 */
#define RLC_ERULELONG (-14)  /* rule name longer than RLC_RULE_MAX */
#define RLC_ERULEBAD (-15)   /* rule name outside [A-Za-z0-9_.:-] */
#define RLC_EBOTH (-16)      /* both a rule and an inline limit */
#define RLC_ENORULE (-17)    /* unknown rule (from the server) */
#define RLC_EINVAL (-18)     /* invalid argument (NULL, bad option) */
#define RLC_ETIMEDOUT (-19)  /* no answer within the timeout */
#define RLC_ECLOSED (-20)    /* no connection, or it closed in flight */
#define RLC_ECANCELED (-21)  /* the client was freed with this in flight */
#define RLC_ESTORE (-22)     /* the server's store is unavailable */
#define RLC_EADDR (-23)      /* an address is malformed or does not resolve */
#define RLC_EIO (-24)        /* a socket error */
#define RLC_EBUSY (-25)      /* every request slot is in use (async) */
#define RLC_ESHUTDOWN (-26)  /* the server is shutting down */
#define RLC_ELIMIT (-27)     /* limit is 0 while window_s is set */
#define RLC_EINLINE (-28)    /* the server refuses inline limits */
#define RLC_ETLS (-29)       /* TLS: files, certificate, name or handshake */
#define RLC_ELEVELS                                                            \
    (-30)                     /* levels: 1 to RLC_LEVELS_MAX, each a key and a \
                                 rule, with no key, limit or rule beside */
#define RLC_ELEVELTWICE (-31) /* levels: the same key and rule twice */

/* Returns a static description of an RLC_E* code; never NULL. Unknown codes
 * give "unknown error". Thread-safe. */
RLC_EXPORT const char *rlc_strerror(int code);

/* ------------------------------------------------------------------------ */
/* Limits checked before anything is sent (the server checks them too). */

#define RLC_KEY_MAX 512
#define RLC_RULE_MAX 128
#define RLC_WINDOW_MAX_S 31622400u
#define RLC_ERROR_MAX 128 /* bytes kept of a server's error text, NUL incl. */

/* ------------------------------------------------------------------------ */
/* Options, shared by both APIs. Always start from rlc_options_init() so that
 * fields added later get their defaults. The library copies what it needs:
 * the struct and its strings may be freed once the constructor returns. */

#define RLC_FAIL_CLOSED 0
#define RLC_FAIL_OPEN 1

typedef struct rlc_options_s {
    /* "HOST:PORT" or a comma-separated list "HOST:PORT,HOST:PORT". Tried in
     * turn: the client connects to one at a time and moves to the next when
     * it cannot connect, loses the connection or is told the server is
     * shutting down (GOAWAY, above). HOST is an IPv4 address,
     * [IPv6] in brackets, or a name resolved once, when the client is
     * created (a blocking lookup). Required. */
    const char *servers;
    /* Per address tried. Default 1000. */
    uint32_t connect_timeout_ms;
    /* From submission to answer. Default 1000. */
    uint32_t request_timeout_ms;
    /* What a check decides when no server answers in time (timeout, no
     * connection, connection lost): RLC_FAIL_CLOSED (default) gives code
     * RLC_CODE_ERROR with flag RLC_RESULT_FAILED_CLOSED; RLC_FAIL_OPEN gives
     * RLC_CODE_OK with flag RLC_RESULT_FAILED_OPEN. Either way the result's
     * status holds the reason. */
    int fail_mode;
    /* Delay before reconnecting: starts at min, doubles after each failed
     * round through the address list (with up to 25% random jitter) up to
     * max, and returns to min after a successful connect. Defaults 100 and
     * 5000. */
    uint32_t reconnect_min_ms;
    uint32_t reconnect_max_ms;
    /* Async only: request slots, allocated once. A check submitted while all
     * are in use is refused with RLC_EBUSY. Default 16384. */
    uint32_t max_inflight;
    /* Largest response payload accepted; a bigger frame is a protocol error
     * and closes the connection. Default 65536. */
    uint32_t max_frame;
    /* TLS (rl-server --tls-cert with "native" in --tls-listeners): 1 to
     * connect over TLS 1.2 or later, with ALPN "rl1". Setting any tls_*
     * file implies it. Default 0 (plaintext). */
    int tls;
    /* The CAs (PEM) the server's certificate must chain to; NULL: the
     * system's trust store. */
    const char *tls_ca_file;
    /* Mutual TLS (--tls-client-ca): this certificate chain (PEM) and its
     * key (PEM, no passphrase). Both or neither. */
    const char *tls_cert_file;
    const char *tls_key_file;
    /* The name sent as SNI and checked against the certificate; NULL: each
     * address's HOST (an IP address is then checked as an IP SAN). */
    const char *tls_server_name;
    /* 1: do not verify the server's certificate at all. For tests only: a
     * man in the middle then sees every check. Default 0. */
    int tls_insecure;
} rlc_options_t;

/* Fills *o with the defaults above (servers NULL). */
RLC_EXPORT void rlc_options_init(rlc_options_t *o);

/* ------------------------------------------------------------------------ */
/* A check: which caller, how much, and the limit to apply: either inline
 * (limit hits per window_s seconds) or a rule configured on the server. The
 * library reads it during the call that takes it and keeps no pointer. */

/* One level of a check across levels: whose counters under which rule. */
typedef struct rlc_level_s {
    const char *key;  /* e.g. "org:acme"; required */
    size_t key_len;   /* bytes of key; 0 means strlen(key) */
    const char *rule; /* the server-side rule (NUL-terminated); required */
} rlc_level_t;

#define RLC_LEVELS_MAX 8

typedef struct rlc_check_s {
    const char *key;   /* who is limited, e.g. "user:u123"; required */
    size_t key_len;    /* bytes of key; 0 means strlen(key) */
    uint32_t cost;     /* hits this request consumes; 0 is read as 1 */
    uint64_t limit;    /* inline limit: hits allowed per window */
    uint32_t window_s; /* inline limit: window length in seconds */
    const char *rule;  /* or a named server-side rule (NUL-terminated) */
    /* Or levels, decided all or nothing (key, limit, window_s and rule
     * unset): the check is allowed only when every level's rule has room
     * for cost under that level's key, and is then charged in every one;
     * refused, it is charged nowhere, and the result's `level` names the
     * level that refused. 1 to RLC_LEVELS_MAX, no key and rule twice; the
     * rules' limits at most 8 together (the server checks that). A server
     * older than levels answers ERROR (no rule), never a partial
     * decision. */
    const rlc_level_t *levels;
    size_t nlevels;
} rlc_check_t;

/* ------------------------------------------------------------------------ */
/* A result: every CheckResponse field, plus how it was obtained. A result
 * is a plain value with no pointers: copy it freely. */

#define RLC_CODE_UNKNOWN 0
#define RLC_CODE_OK 1         /* allowed */
#define RLC_CODE_OVER_LIMIT 2 /* refused: over the limit */
#define RLC_CODE_ERROR 3      /* no decision: see status and error */

/* flags */
#define RLC_RESULT_FAILED_OPEN 1u   /* no server answered; allowed by policy */
#define RLC_RESULT_FAILED_CLOSED 2u /* no server answered; refused by policy   \
                                     */

/* algorithm: how the deciding limit counts (rl-server's rules). */
#define RLC_ALGO_FIXED_WINDOW 0
#define RLC_ALGO_SLIDING_WINDOW_COUNTER 1
#define RLC_ALGO_GCRA 2

typedef struct rlc_result_s {
    /* The decision: RLC_CODE_*. Other values may come from newer servers. */
    int code;
    /* 0 when a server answered (code and the counters are its own); else
     * the RLC_E* reason no server answered: RLC_ETIMEDOUT, RLC_ECLOSED,
     * RLC_EIO, RLC_ECANCELED, or a validation error for a check that was
     * never sent. */
    int status;
    /* RLC_RESULT_* bits: set when code came from the fail_mode policy. */
    unsigned flags;
    /* 1 when code is RLC_CODE_OK only because the deciding rule is in shadow
     * mode: enforced, it would have been OVER_LIMIT (CheckResponse field
     * shadow_refused). The request is allowed, and, as a refusal would,
     * it consumed nothing; limit, used, remaining and the times describe
     * the refusing window, retry_after_ms is 0. Log it, do not refuse:
     * shadow mode is for seeing what a rule would do before enforcing it.
     * Else 0. */
    int shadow_refused;
    /* The deciding window's length in seconds, the one limit, used,
     * remaining and reset_after_ms describe: the server's own
     * (CheckResponse field window_seconds), so a rule's window is known
     * too, and with several windows it is the one that decided. From a
     * server older than that field, or when no server answered, the
     * check's inline window (0 for a rule). The headers use it. */
    uint32_t window_s;
    /* The request id the client chose (unique per client). */
    uint64_t id;
    uint64_t limit;          /* the limit that decided */
    uint64_t used;           /* hits counted in this window, this included */
    uint64_t remaining;      /* max(0, limit - used) */
    uint64_t reset_after_ms; /* until the current window ends */
    uint64_t retry_after_ms; /* 0 when allowed; else until the window ends */
    /* Wall clock (ms since the Unix epoch) when the result was made; the
     * HTTP helpers turn reset_after_ms into an absolute time with it. */
    uint64_t unix_ms;
    /* The deciding limit's algorithm, RLC_ALGO_* (CheckResponse field
     * algorithm; other values may come from newer servers). An inline
     * limit is a fixed window; so is every answer of a server older than
     * the field, and a result no server gave. */
    uint32_t algorithm;
    /* When the store decided, in ms since the Unix epoch on the store's
     * clock, the one every rl-server sharing the store reads (CheckResponse
     * field decided_at_ms): answers from several servers can be put in
     * order by it, as an audit does. 0 when nothing was decided (an error,
     * no server answered) and from a server older than the field. */
    uint64_t decided_at_ms;
    /* A check across levels: the deciding level, 1-based in the check's
     * order (refused: the one that refused, whose window limit, used and
     * the times describe; allowed: the one with the least room left). 0
     * for other checks, and when no server decided. */
    uint32_t level;
    /* Why, when code is ERROR, or when the server bypassed its store
     * (fail-open on its side): NUL-terminated, possibly truncated. Empty
     * otherwise. */
    char error[RLC_ERROR_MAX];
} rlc_result_t;

/* Returns 1 when r allows the request (code RLC_CODE_OK, whether a server
 * said so or the fail-open policy did), else 0. NULL gives 0. */
RLC_EXPORT int rlc_result_allowed(const rlc_result_t *r);

/* Returns a static name for a code: "OK", "OVER_LIMIT", "ERROR",
 * "UNKNOWN". */
RLC_EXPORT const char *rlc_code_name(int code);

/* ------------------------------------------------------------------------ */
/* Blocking API. Each call sends, then waits for its answers up to
 * request_timeout_ms. Not for use on an event loop's thread. */

typedef struct rlc_client_s rlc_client_t;

/* Creates a client and connects to the first server of opts->servers that
 * accepts within connect_timeout_ms, trying them in turn.
 *
 * Returns 0 with *out set (free it with rlc_free), or RLC_EINVAL (NULL, bad
 * option), RLC_EADDR (malformed or unresolvable address), RLC_ENOMEM, or
 * the connect error of the last address tried (RLC_ETIMEDOUT, RLC_ECLOSED
 * for refused, RLC_EIO); then *out is NULL. */
RLC_EXPORT int rlc_connect(rlc_client_t **out, const rlc_options_t *opts);

/* rlc_connect that, when it fails, also writes the reason in words into
 * why (at most whylen bytes, NUL-terminated; "" when the code says it
 * all), e.g. "127.0.0.1:7000: TLS: certificate verify failed: self-signed
 * certificate" or "cannot load the CA file: no such file". */
RLC_EXPORT int rlc_connect_why(rlc_client_t **out, const rlc_options_t *opts,
                               char *why, size_t whylen);

/* Asks one question. *res is always filled.
 *
 * Returns 0 when a server answered (res->code is its decision, which may be
 * RLC_CODE_ERROR with res->error saying why, e.g. an unknown rule); a
 * validation error (RLC_EKEYLONG, ...) when req is invalid, with nothing
 * sent and res->code RLC_CODE_ERROR; RLC_EINVAL for NULL arguments (res
 * filled if non-NULL); or the transport reason (RLC_ETIMEDOUT, RLC_ECLOSED,
 * RLC_EIO) with res decided by the fail_mode policy.
 *
 * A lost connection is re-established on the next call: at once when it
 * was found closed (a restarted server) or its server said GOAWAY, or
 * after the reconnect backoff when the last attempt failed. A late answer
 * to a timed-out check is recognised by its id and dropped. */
RLC_EXPORT int rlc_check(rlc_client_t *c, const rlc_check_t *req,
                         rlc_result_t *res);

/* Asks n questions in one round trip: all n requests go out in one write,
 * then the call waits until all n answers are in or request_timeout_ms has
 * passed. res[i] answers reqs[i] and is always filled. An invalid reqs[i]
 * is not sent; res[i] gets its validation error as status and code ERROR.
 *
 * Returns 0 when every check was sent and answered, else the first nonzero
 * res[i].status in order; RLC_EINVAL for NULL arguments with n > 0. n = 0
 * does nothing and returns 0. */
RLC_EXPORT int rlc_check_batch(rlc_client_t *c, const rlc_check_t *reqs,
                               size_t n, rlc_result_t *res);

/* Returns the "HOST:PORT" of the server in use or last tried, as given in
 * the options; valid until rlc_free. */
RLC_EXPORT const char *rlc_server(const rlc_client_t *c);

/* The reason in words for the connection's last failure: a connect
 * attempt (as rlc_connect_why says it), a TLS error on an open connection
 * (e.g. "TLS: tlsv13 alert certificate required"), or a notice the server
 * sent about the connection ("server said: this port speaks TLS"); "" after
 * a successful connect. Valid until the next call. */
RLC_EXPORT const char *rlc_last_error(const rlc_client_t *c);

/* Closes the connection and frees the client. Accepts NULL. */
RLC_EXPORT void rlc_free(rlc_client_t *c);

/* ------------------------------------------------------------------------ */
/* Async API on a libuv loop that the caller owns and runs. Everything here,
 * callbacks included, happens on the thread that runs the loop.
 *
 * Many checks are in flight on one connection; answers are matched by id in
 * whatever order they come. Requests submitted during one loop iteration go
 * out together in one write when the iteration is about to poll (or at once
 * when 64 KiB are waiting). Submitting allocates nothing: request slots are
 * allocated when the client is created. */

typedef struct rlc_async_s rlc_async_t;

/* Called exactly once for every check that rlc_async_check accepted: with
 * the server's answer (res->status 0), or with res->status RLC_ETIMEDOUT
 * (no answer within request_timeout_ms), RLC_ECLOSED (the connection was
 * lost, or no server could be reached, before the answer came; a server
 * that said GOAWAY answers what it was sent, so this is not a shutdown's
 * doing unless the server broke its word) or
 * RLC_ECANCELED (the client was freed), res->code then following the
 * fail_mode policy (ECANCELED: always RLC_CODE_ERROR). Never called from
 * inside rlc_async_check. *res is valid only during the call; copy it to
 * keep it. The callback may submit new checks, and may free the client. */
typedef void (*rlc_check_cb)(rlc_async_t *c, const rlc_result_t *res,
                             void *arg);

/* Called when a connection comes up (connected 1, status 0) and when it is
 * lost or an attempt fails (connected 0, status the reason; RLC_ESHUTDOWN
 * when it ended after the server's GOAWAY, and the client then reconnects
 * at once). May submit checks and may free the client. */
typedef void (*rlc_state_cb)(rlc_async_t *c, int connected, int status,
                             void *arg);

/* Creates a client on loop and starts connecting to the first server. The
 * loop must outlive the client. Checks may be submitted at once; they go
 * out when the connection is up.
 *
 * Returns 0 with *out set, or RLC_EINVAL, RLC_EADDR, RLC_ENOMEM (then
 * *out is NULL). While it is connected or reconnecting, the client
 * keeps uv_run() from returning, as any open handle does. */
RLC_EXPORT int rlc_async_new(rlc_async_t **out, struct uv_loop_s *loop,
                             const rlc_options_t *opts);

/* Submits one check; cb(c, res, arg) will fire exactly once, later, on the
 * loop's thread. req is copied (into the output buffer) before returning.
 *
 * Returns 0, or without queueing anything (cb never fires): a validation
 * error (RLC_EKEYLONG, ...), RLC_EINVAL (NULL c, req or cb), RLC_EBUSY (all
 * max_inflight slots in use), RLC_ECANCELED (the client is being freed),
 * RLC_ENOMEM. */
RLC_EXPORT int rlc_async_check(rlc_async_t *c, const rlc_check_t *req,
                               rlc_check_cb cb, void *arg);

/* Number of accepted checks whose callback has not fired yet. */
RLC_EXPORT size_t rlc_async_inflight(const rlc_async_t *c);

/* Returns 1 when a connection is up, else 0. */
RLC_EXPORT int rlc_async_connected(const rlc_async_t *c);

/* The reason the last connect attempt failed, in words (as
 * rlc_last_error), or ""; for the state callback to log. */
RLC_EXPORT const char *rlc_async_last_error(const rlc_async_t *c);

/* Sets (or clears, with NULL) the connection state callback. */
RLC_EXPORT void rlc_async_on_state(rlc_async_t *c, rlc_state_cb cb, void *arg);

/* Returns the "HOST:PORT" in use or being tried; valid until the client is
 * freed. */
RLC_EXPORT const char *rlc_async_server(const rlc_async_t *c);

/* Frees the client. Every check still in flight gets its callback, with
 * RLC_ECANCELED, before this returns (or, when called from inside one of
 * this client's callbacks, before that callback's caller returns to the
 * loop). The client's handles then close; their memory is released by the
 * loop, so run it (uv_run) once more before uv_loop_close(). Accepts
 * NULL. */
RLC_EXPORT void rlc_async_free(rlc_async_t *c);

/* ------------------------------------------------------------------------ */
/* Reservations and leases (CheckRequest.op). Beside the plain check, a
 * request can
 *
 *   RESERVE  check an estimated cost (rlc_check_t as for rlc_check: key,
 *            inline limit or rule, cost = the estimate) and, when allowed,
 *            get a handle to settle once the real cost is known;
 *   SETTLE   charge a reservation's actual cost (0 refunds it all);
 *   ACQUIRE  take a slot of a rule of kind concurrency (key and rule) and,
 *            when allowed, get a lease handle and when the lease ends;
 *            OVER_LIMIT with retry_after_ms until the earliest lease ends;
 *   RELEASE  give a lease back;
 *   RENEW    extend a lease by the rule's lease length: expires_at_ms is
 *            the new end.
 *
 * SETTLE, RELEASE and RENEW send the handle only (and SETTLE its actual
 * cost): no key, no limit. A handle is opaque bytes, 1 to RLC_HANDLE_MAX of
 * them; one that is empty or longer is refused before anything is sent
 * (RLC_EHANDLE). The server answers a handle it does not know, that was
 * forged, that expired or that was settled already with code ERROR and the
 * reason in error.
 *
 * No answer (timeout, connection lost): RESERVE and ACQUIRE are admissions
 * and follow fail_mode as a check does (failed open: code OK, flag
 * RLC_RESULT_FAILED_OPEN and no handle, so there is nothing to settle or
 * release); SETTLE, RELEASE and RENEW never fail open: code ERROR, flag
 * RLC_RESULT_FAILED_CLOSED, status the reason. */

#define RLC_OP_CHECK 0
#define RLC_OP_RESERVE 1
#define RLC_OP_SETTLE 2
#define RLC_OP_ACQUIRE 3
#define RLC_OP_RELEASE 4
#define RLC_OP_RENEW 5

#define RLC_HANDLE_MAX 512

/* A handle that is empty or longer than RLC_HANDLE_MAX bytes. The client's
 * own code, outside the service's table (the server says why in words). */
#define RLC_EHANDLE (-100)

/* One request of any op. The library reads it during the call that takes
 * it and keeps no pointer. */
typedef struct rlc_xop_s {
    int op;             /* RLC_OP_* */
    rlc_check_t check;  /* CHECK, RESERVE, ACQUIRE: as for rlc_check */
    const void *handle; /* SETTLE, RELEASE, RENEW: what RESERVE or ACQUIRE
                           returned */
    size_t handle_len;
    uint64_t actual; /* SETTLE: the cost really used */
} rlc_xop_t;

/* The answer to an rlc_xop_t: the check's result plus what the new ops
 * return. A plain value, as rlc_result_t is: the handle is copied into it,
 * so it lives as long as the struct (copy the struct, or the handle_len
 * bytes of handle, to keep it past an async callback). */
typedef struct rlc_xresult_s {
    rlc_result_t r; /* code, status, error, counters: as for a check */
    int op;         /* the request's RLC_OP_* */
    /* 1 when the server allowed only because its store could not answer
     * and it fails open (CheckResponse field failed_open): nothing was
     * counted, and a handle from such an answer charges nothing. Not the
     * client's own fail-open (that is r.flags RLC_RESULT_FAILED_OPEN). */
    int failed_open;
    /* RESERVE, ACQUIRE when allowed, RENEW: when the reservation or lease
     * ends, ms since the Unix epoch on the store's clock (r.decided_at_ms
     * is on the same clock; RENEW: the new end). 0 otherwise. */
    uint64_t expires_at_ms;
    /* RESERVE, ACQUIRE when allowed: the handle (handle_len bytes, not
     * NUL-terminated). A server answer with a longer handle is turned into
     * code ERROR with a note in r.error, and handle_len 0. */
    size_t handle_len;
    uint8_t handle[RLC_HANDLE_MAX];
} rlc_xresult_t;

/* Blocking, one request: as rlc_check (same returns; a handle error is
 * RLC_EHANDLE, an op outside RLC_OP_* RLC_EINVAL, both with nothing sent).
 * *res is always filled when res is not NULL. */
RLC_EXPORT int rlc_xop(rlc_client_t *c, const rlc_xop_t *req,
                       rlc_xresult_t *res);

/* Blocking, n requests of any ops in one round trip: as rlc_check_batch.
 * res[i] answers reqs[i]. */
RLC_EXPORT int rlc_xop_batch(rlc_client_t *c, const rlc_xop_t *reqs, size_t n,
                             rlc_xresult_t *res);

/* Blocking shorthands of rlc_xop. */
RLC_EXPORT int rlc_reserve(rlc_client_t *c, const rlc_check_t *req,
                           rlc_xresult_t *res);
RLC_EXPORT int rlc_settle(rlc_client_t *c, const void *handle,
                          size_t handle_len, uint64_t actual,
                          rlc_xresult_t *res);
RLC_EXPORT int rlc_acquire(rlc_client_t *c, const rlc_check_t *req,
                           rlc_xresult_t *res);
RLC_EXPORT int rlc_release(rlc_client_t *c, const void *handle,
                           size_t handle_len, rlc_xresult_t *res);
RLC_EXPORT int rlc_renew(rlc_client_t *c, const void *handle, size_t handle_len,
                         rlc_xresult_t *res);

/* Async: as rlc_check_cb, with the extended result (valid only during the
 * call; the handle is inside it, so copy what you keep). */
typedef void (*rlc_xop_cb)(rlc_async_t *c, const rlc_xresult_t *res, void *arg);

/* Async, one request: as rlc_async_check (same returns, plus RLC_EHANDLE);
 * req and its handle are copied before returning. */
RLC_EXPORT int rlc_async_xop(rlc_async_t *c, const rlc_xop_t *req,
                             rlc_xop_cb cb, void *arg);

/* Async shorthands of rlc_async_xop. */
RLC_EXPORT int rlc_async_reserve(rlc_async_t *c, const rlc_check_t *req,
                                 rlc_xop_cb cb, void *arg);
RLC_EXPORT int rlc_async_settle(rlc_async_t *c, const void *handle,
                                size_t handle_len, uint64_t actual,
                                rlc_xop_cb cb, void *arg);
RLC_EXPORT int rlc_async_acquire(rlc_async_t *c, const rlc_check_t *req,
                                 rlc_xop_cb cb, void *arg);
RLC_EXPORT int rlc_async_release(rlc_async_t *c, const void *handle,
                                 size_t handle_len, rlc_xop_cb cb, void *arg);
RLC_EXPORT int rlc_async_renew(rlc_async_t *c, const void *handle,
                               size_t handle_len, rlc_xop_cb cb, void *arg);

/* ------------------------------------------------------------------------ */
/* The lease keeper: renews an acquired lease while the work runs, on a
 * thread of its own with a connection of its own, and releases it when the
 * work is done.
 *
 *   rlc_acquire(c, &req, &got);            (got.r.code RLC_CODE_OK)
 *   rlc_lease_keep(&k, &opts, &got, 0, on_lost, arg);
 *   ... work, checking rlc_lease_lost(k) now and then ...
 *   rlc_lease_done(k, &rel);               (renewals stop, RELEASE sent)
 *
 * Cadence: every every_ms, or with 0 a third of the lease's length (its
 * expires_at_ms less its decided_at_ms, both on the store's clock; from a
 * server that leaves decided_at_ms 0, less the local clock), worked out
 * again after each renewal.
 *
 * A renewal that fails loses the lease when the server answers anything
 * but OK (the lease ended: the store expired it, or it was released), or
 * when no renewal has succeeded by the time the lease would end, counted
 * on the local clock from when the last successful renewal was sent (a
 * timeout or lost connection alone is retried at the next tick, after a
 * reconnect if needed). The keeper then stops renewing, rlc_lease_lost()
 * turns nonzero, and on_lost (when set) fires once, on the keeper's
 * thread, with the failing result: the work should stop, since another
 * holder may now have the slot. */

typedef struct rlc_lease_s rlc_lease_t;

/* Fires at most once, on the keeper's thread, when the lease is lost. It
 * must not call rlc_lease_done (that waits for this thread); it may call
 * rlc_lease_lost and rlc_lease_expires_at. */
typedef void (*rlc_lease_cb)(rlc_lease_t *k, const rlc_xresult_t *res,
                             void *arg);

/* Starts keeping the lease that acquired (an ACQUIRE's result with code OK
 * and a handle) holds: connects with opts (a blocking connect, as
 * rlc_connect), then starts the thread. The keeper copies what it needs
 * from both.
 *
 * Returns 0 with *out set (end it with rlc_lease_done), RLC_EINVAL (NULL,
 * not an allowed ACQUIRE, no handle, a lease that cannot be timed: every_ms
 * 0 and expires_at_ms not after decided_at_ms), RLC_ENOMEM, or a connect
 * error (then *out is NULL). */
RLC_EXPORT int rlc_lease_keep(rlc_lease_t **out, const rlc_options_t *opts,
                              const rlc_xresult_t *acquired, uint32_t every_ms,
                              rlc_lease_cb on_lost, void *arg);

/* 0 while the lease is held; once it is lost, RLC_ECANCELED when the
 * server answered a renewal with anything but OK (the lease had ended), or
 * RLC_ETIMEDOUT when no renewal succeeded before the lease would end (no
 * server answered in time). Safe from any thread. */
RLC_EXPORT int rlc_lease_lost(const rlc_lease_t *k);

/* The lease's end as last granted (expires_at_ms of the ACQUIRE or of the
 * latest successful RENEW). Safe from any thread. */
RLC_EXPORT uint64_t rlc_lease_expires_at(const rlc_lease_t *k);

/* Successful renewals so far. Safe from any thread. */
RLC_EXPORT unsigned rlc_lease_renewals(const rlc_lease_t *k);

/* Stops the keeper (waiting for its thread, which may be in a renewal: up
 * to request_timeout_ms), releases the lease unless it was lost (up to
 * request_timeout_ms more), closes the connection and frees the keeper. res
 * (may be NULL) gets the RELEASE's result, or, when the lease was lost, the
 * failing renewal's result and nothing is sent.
 *
 * Returns 0 when the server answered the RELEASE (res->r.code says whether
 * it released: ERROR when the lease had ended meanwhile), the transport
 * error of the RELEASE, or, when the lease was lost before (nothing sent),
 * what rlc_lease_lost says. Accepts NULL (returns RLC_EINVAL). Never from
 * on_lost. */
RLC_EXPORT int rlc_lease_done(rlc_lease_t *k, rlc_xresult_t *res);

/* The same keeper on an async client's loop: a timer renews the lease
 * through that client (no thread, no connection of its own), with the
 * cadence and the loss rules above (the local clock being the loop's).
 * Everything, callbacks included, happens on the loop's thread.
 *
 *   rlc_async_acquire(a, &req, on_acquired, arg);
 *   ... in on_acquired, with res->r.code RLC_CODE_OK:
 *   rlc_async_lease_keep(&k, a, res, 0, on_lost, arg);
 *   ... when the work is done:
 *   rlc_async_lease_done(k, on_done, arg);
 *
 * End every keeper with rlc_async_lease_done before freeing its client
 * (the keeper uses the client until then; the client may be freed from the
 * done callback), and run the loop until the done callback has fired: the
 * keeper's timer keeps the loop alive until then, and its memory is
 * released by the loop after that callback returns. */

typedef struct rlc_async_lease_s rlc_async_lease_t;

/* on_lost: fires at most once, when the lease is lost (not after
 * rlc_async_lease_done), with the failing renewal's result; it may call
 * rlc_async_lease_done. done: fires exactly once, never inside
 * rlc_async_lease_done, with the RELEASE's result, or, when the lease was
 * lost, the failing renewal's (nothing is sent then), or a failed result
 * whose status says why the RELEASE could not be submitted. *res is valid
 * only during the call; k is valid until done returns. */
typedef void (*rlc_async_lease_cb)(rlc_async_lease_t *k,
                                   const rlc_xresult_t *res, void *arg);

/* Starts keeping the lease acquired (an ACQUIRE's result with code OK and
 * a handle; copied) on c's loop. The first renewal comes a period from
 * now. Returns 0 with *out set, RLC_EINVAL (as rlc_lease_keep) or
 * RLC_ENOMEM (then *out is NULL). */
RLC_EXPORT int rlc_async_lease_keep(rlc_async_lease_t **out, rlc_async_t *c,
                                    const rlc_xresult_t *acquired,
                                    uint32_t every_ms,
                                    rlc_async_lease_cb on_lost, void *arg);

/* As rlc_lease_lost, rlc_lease_expires_at and rlc_lease_renewals; on the
 * loop's thread only. */
RLC_EXPORT int rlc_async_lease_lost(const rlc_async_lease_t *k);
RLC_EXPORT uint64_t rlc_async_lease_expires_at(const rlc_async_lease_t *k);
RLC_EXPORT unsigned rlc_async_lease_renewals(const rlc_async_lease_t *k);

/* Stops renewing and releases the lease unless it was lost; a renewal in
 * flight is answered first. done (may be NULL) fires exactly once, later.
 * Returns 0, or RLC_EINVAL (NULL k, or called twice; then nothing
 * changes). */
RLC_EXPORT int rlc_async_lease_done(rlc_async_lease_t *k,
                                    rlc_async_lease_cb done, void *arg);

/* ------------------------------------------------------------------------ */
/* HTTP helpers: pure functions of a result, safe from any thread.
 *
 * Headers (in this order, each only when it applies):
 *   X-RateLimit-Limit      limit
 *   X-RateLimit-Used       used
 *   X-RateLimit-Remaining  remaining
 *   X-RateLimit-Reset      when the window resets, in UTC, as seconds since
 *                          the Unix epoch (unix_ms + reset_after_ms,
 *                          rounded to the nearest second: windows end on
 *                          whole seconds)
 *   RateLimit-Policy       "POLICY";q=LIMIT;w=WINDOW_S  (w only when known)
 *   RateLimit              "POLICY";r=REMAINING;t=SECONDS  (t rounded up)
 *   Retry-After            SECONDS (rounded up), only when over the limit
 * The rate-limit headers are emitted when a server decided (code OK or
 * OVER_LIMIT with a nonzero limit); a result decided by the fail_mode
 * policy, or an error, gets none. */

#define RLC_HTTP_HEADERS_MAX 7
#define RLC_HTTP_VALUE_MAX 256
#define RLC_POLICY_MAX 100

typedef struct rlc_http_header_s {
    const char *name;               /* static string */
    char value[RLC_HTTP_VALUE_MAX]; /* NUL-terminated */
} rlc_http_header_t;

/* The status to answer with: 200 (allowed: go on with the request), 429
 * (over the limit) or 503 (no decision: an error, or refused by the
 * fail-closed policy). NULL gives 503. */
RLC_EXPORT int rlc_http_status(const rlc_result_t *r);

/* The reason phrase of 200, 429 or 503 ("OK", "Too Many Requests",
 * "Service Unavailable"); "" for others. */
RLC_EXPORT const char *rlc_http_reason(int status);

/* Fills out[0..cap) with the headers for r. policy names the limit in the
 * IETF fields (NULL: "default"); it is at most RLC_POLICY_MAX printable
 * ASCII bytes and is quoted and escaped as a structured-field string.
 *
 * Returns the number of headers written (0 to RLC_HTTP_HEADERS_MAX), or
 * RLC_EINVAL (NULL r or out, bad policy), RLC_EFULL (cap too small). */
RLC_EXPORT int rlc_http_headers(const rlc_result_t *r, const char *policy,
                                rlc_http_header_t *out, size_t cap);

/* Writes the same headers as "Name: value\r\n" lines, NUL-terminated, to
 * buf. Returns the length written (without the NUL), or RLC_EINVAL,
 * RLC_EFULL (cap too small; buf then holds ""). */
RLC_EXPORT int rlc_http_format(const rlc_result_t *r, const char *policy,
                               char *buf, size_t cap);

#ifdef __cplusplus
}
#endif

#endif
