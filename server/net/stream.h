/* One stream under every front end (stream.c): the connection a front end
 * reads its protocol from and writes its answers to, plaintext or under
 * TLS, and the pieces of a listener every front end has the same way.
 *
 * Two objects, as tls.h has: a set (rls_streams_t), one per listener,
 * embedded in the front end's server struct, holding what its
 * connections share (the loop, the listener's label and ALPN, its TLS
 * configuration and counters, the read buffer, the open connections for
 * the connection cap); and a stream (rls_stream_t), embedded in the
 * front end's connection struct, holding the socket and its TLS state.
 * The front end keeps its protocol: it reads with its own callbacks
 * (rls_stream_read_start), decides what to write and when to close; the
 * stream does the transport around it the one way: accepting (and the
 * TLS handshake caps), TLS in and out, a TLS client on a plaintext port
 * told and counted, a failed handshake counted, logged and told, and
 * the life of the connection's memory.
 *
 * A stream's life: rls_stream_init (the socket handle, counted in
 * `handles`), rls_stream_accept (the client, and under TLS its
 * handshake admitted), reads and writes, rls_stream_close (the socket
 * closes, its TLS state goes). The front end frees its connection when
 * rls_stream_done says so: every handle closed (the socket and any
 * timer of its own it counted) and no answer owed (rls_stream_owe, for
 * an answer that will arrive after the client may have gone). So a late
 * answer never touches freed memory. */
#ifndef RLS_NET_STREAM_H
#define RLS_NET_STREAM_H

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <uv.h>

#include "base/util.h"
#include "net/tls.h"
#include "rl_buf.h"

/* What a listener's connections are held to, the transport's part: one
 * struct for every front end, filled by the program (server.c, from its
 * flags) and kept in the set (rls_streams_t.opts). A front end's
 * protocol settings are its own (rls_conns_opts_t, rls_grpc_opts_t);
 * each front end reads the fields that apply to it. */
typedef struct rls_stream_opts_s {
    uint32_t max_conns;     /* open at once (--max-connections; with
                               --threads, this loop's share of it) */
    uint32_t max_conns_all; /* --threads: the process's cap, for the log
                               (0: max_conns is) */
    size_t max_output;     /* unsent output of one connection (--max-output) */
    uint64_t max_input;    /* input held by all its connections
                              (--max-partial-bytes); 0: not capped */
    uint64_t idle_ms;      /* idle connections are closed after this
                              (--idle-timeout); 0: kept */
    uint64_t frame_ms;     /* a frame (request) must be whole within this of
                              its first byte (--frame-timeout-ms); 0: no
                              deadline */
    uint64_t handshake_ms; /* a TLS handshake must be done within this of
                              the accept (--tls-handshake-timeout-ms); 0: no
                              deadline */
} rls_stream_opts_t;

typedef struct rls_streams_s {
    uv_loop_t *loop;
    rls_stream_opts_t opts; /* zero at init; the front end sets them */
    const char *name; /* the listener's label in the log and /metrics */
    const char *alpn; /* the one protocol it speaks under TLS */
    rls_tls_t *tls;   /* NULL: plaintext; else it outlives the set */
    rls_tls_stats_t tls_stats; /* its handshakes (under TLS) */
    rls_tls_plain_t plain;     /* its TLS clients (plaintext) */
    /* One read's worth, shared by every connection (a read is consumed
     * before the next): allocated at first use, rbuf_cap bytes. */
    uint8_t *rbuf;
    size_t rbuf_cap;
    rls_list_t all; /* open streams (those a front end put there) */
    unsigned open;  /* on `all` */
    /* The one timer of its connections' deadlines (rls_streams_sweep_*),
     * if the front end made it: on_sweep every sweep_ms (0: stopped). */
    uv_timer_t sweep;
    uint64_t sweep_ms;
    void (*on_sweep)(struct rls_streams_s *set, uint64_t now);
    /* --threads (server/loops.h): the first loop's listener offers each
     * new connection to handoff, which may give it to another loop (1:
     * taken; 0: accept it here). NULL: every connection is accepted here. */
    int (*handoff)(void *arg, uv_stream_t *listener);
    void *handoff_arg;
    /* The connection another loop handed over (rls_streams_adopt), which
     * the next rls_stream_accept opens instead of accepting; -1: none. */
    int adopt_fd;
    /* The streams open on this set's loop, over all its sets (the
     * hand-off's measure of a loop's load); NULL: not counted. Updated
     * atomically: another thread reads it. */
    unsigned *loop_streams;
} rls_streams_t;

typedef struct rls_stream_s {
    uv_tcp_t tcp; /* tcp.data: the front end's connection */
    rls_streams_t *set;
    rls_tls_conn_t *tls; /* NULL: plaintext */
    rls_list_t node;     /* in set->all, if the front end put it there */
    uint64_t since;      /* what the eviction rule orders by (loop time) */
    uint64_t accepted_ms;
    int handles;   /* open handles; the connection may go at 0 ... */
    unsigned owed; /* ... and no answer owed */
    unsigned reading : 1;
    unsigned closing : 1;
    unsigned heard : 1; /* something was read */
    unsigned counted : 1; /* in set->loop_streams */
    char peer[48];      /* under TLS: the client's address, for the log */
} rls_stream_t;

/* A set for a listener named `name` speaking `alpn` under TLS, sharing a
 * read buffer of rbuf_cap bytes. */
void rls_streams_init(rls_streams_t *set, uv_loop_t *loop, const char *name,
                      const char *alpn, size_t rbuf_cap);
/* Frees the shared buffer (the streams are the front end's). */
void rls_streams_free(rls_streams_t *set);
/* The shared read buffer (rbuf_cap bytes), or NULL when out of memory
 * (inline: the native path asks once per read). */
static inline uint8_t *rls_streams_rbuf(rls_streams_t *set)
{
    if (set->rbuf == NULL)
        set->rbuf = (uint8_t *)malloc(set->rbuf_cap);
    return set->rbuf;
}

/* The set's one timer for its connections' deadlines: fn(set, now) at
 * every tick (the front end closes what is due; lists in deadline order
 * make that O(expired)). init makes the handle, its data `data` (for the
 * close callback: the front end closes &set->sweep with its own
 * handles); every (re)starts it at period_ms (> 0). It never keeps the
 * loop alive. */
void rls_streams_sweep_init(rls_streams_t *set, void *data,
                            void (*fn)(rls_streams_t *set, uint64_t now));
void rls_streams_sweep_every(rls_streams_t *set, uint64_t period_ms);
/* The period for deadlines as short as shortest_ms: a quarter, between
 * 10 and 250 ms (a deadline fires up to one period late). */
uint64_t rls_streams_sweep_period(uint64_t shortest_ms);

/* The stream on set->all that gives way most readily to a new one:
 * lowest rank, then oldest `since`; rank() < 0 never gives way. NULL
 * when none can. */
rls_stream_t *rls_streams_victim(rls_streams_t *set,
                                 int (*rank)(const rls_stream_t *s));

/* The first loop's listener got a connection (at the top of a front end's
 * accept): 1 when set->handoff gave it to another loop (nothing more to
 * do), 0 when it is accepted here. */
static inline int rls_streams_handoff(rls_streams_t *set, uv_stream_t *listener)
{
    return set->handoff != NULL && listener != NULL &&
           set->handoff(set->handoff_arg, listener);
}

/* Runs accept(arg) with fd as the connection its rls_stream_accept takes:
 * a front end's accept path, unchanged, for a connection another loop
 * accepted. fd is closed if the path never took it. */
void rls_streams_adopt(rls_streams_t *set, int fd, void (*accept)(void *arg),
                       void *arg);

/* Starts a stream of set for the connection `owner` (tcp.data): the
 * socket handle is made (handles = 1). Returns 0 or a libuv error (then
 * nothing was made). */
int rls_stream_init(rls_stream_t *s, rls_streams_t *set, void *owner);
/* Takes the next connection off listener, or the one being adopted
 * (rls_streams_adopt), TCP_NODELAY on. Returns 0, or a libuv error after
 * which the caller closes the stream. */
int rls_stream_accept(rls_stream_t *s, uv_stream_t *listener);
/* Under TLS (set->tls), the handshake admitted by the set's caps
 * (rls_tls_accept): past them the client gets the alert its TLS stack
 * can read. Plaintext: nothing. Returns 0, or an error after which the
 * caller closes the stream. */
int rls_stream_tls_begin(rls_stream_t *s);
/* Closes the socket (close_cb once closed) and drops the TLS state. */
void rls_stream_close(rls_stream_t *s, uv_close_cb close_cb);
/* 1 when the connection may be freed: closed, every handle closed and
 * nothing owed. */
int rls_stream_done(const rls_stream_t *s);

/* Reading, with the front end's callbacks. start returns 0 or a libuv
 * error (then the caller closes). */
int rls_stream_read_start(rls_stream_t *s, uv_alloc_cb alloc_cb,
                          uv_read_cb read_cb);
void rls_stream_read_stop(rls_stream_t *s);

/* Writes what can go now, without waiting or queuing (a notice before a
 * close). */
void rls_stream_try_write(rls_stream_t *s, const void *p, size_t n);

/* Try-write, then queued write. write_now sends what the socket takes at
 * once from b (no request, no callback: most answers go out whole this
 * way, and a uv_write would also cost an epoll_ctl when libuv's write
 * queue empties) and consumes it from b. Returns 0 (EAGAIN included), or
 * a libuv error (then the caller closes). write_queued hands the rest,
 * b's bytes, to the socket with req: b must stay untouched until cb.
 * Returns 0 or a libuv error (then cb will not come; the caller closes). */
int rls_stream_write_now(rls_stream_t *s, rl_buf_t *b);
int rls_stream_write_queued(rls_stream_t *s, uv_write_t *req,
                            const rl_buf_t *b, uv_write_cb cb);

/* 1 while a TLS handshake is under way. */
int rls_stream_handshaking(const rls_stream_t *s);
/* 1 when that handshake is past its deadline: limit_ms (> 0) since the
 * accept, at loop time now. */
int rls_stream_handshake_late(const rls_stream_t *s, uint64_t now,
                              uint64_t limit_ms);

/* A plaintext stream's first read p[0, n): when it is a TLS client's
 * hello, the client is told in TLS (an alert) and counted and logged on
 * the set; returns 1 and the caller closes. Else 0. */
int rls_stream_plain_hello(rls_stream_t *s, const uint8_t *p, size_t n);

/* Feeds ciphertext to the TLS layer. Returns 1 when this finished the
 * handshake (counted), 0 when fed, or RL_ECLOSED when the handshake
 * failed (then rls_stream_tls_failed). */
int rls_stream_tls_feed(rls_stream_t *s, const uint8_t *p, size_t n);
/* How rls_stream_tls_failed tells the client. */
#define RLS_STREAM_QUIET 1       /* nothing (a write is in flight) */
#define RLS_STREAM_NOTICE_ONLY 2 /* to a plaintext client, no alert */

/* A handshake failed, or `why` ends it (reason RLS_TLS_CLOSED,
 * RLS_TLS_TIMEOUT; NULL: already recorded): counted and logged within
 * the rate cap; unless RLS_STREAM_QUIET in flags, the client is told
 * what it can read: notice[0, notice_len) when it spoke plaintext (the
 * front end's answer in its protocol; NULL for none), and TLS's alert
 * (but not after the notice with RLS_STREAM_NOTICE_ONLY). The caller
 * closes. */
void rls_stream_tls_failed(rls_stream_t *s, rls_tls_reason_t reason,
                           const char *why, const void *notice,
                           size_t notice_len, int flags);
/* Sends what the TLS layer has to say by itself (its handshake, an
 * alert, a session ticket), apart from the front end's writes: a write
 * of its own memory, freed by its callback. Returns 0, or RL_ENOMEM /
 * RL_EIO when the connection must close. */
int rls_stream_tls_flush(rls_stream_t *s);

/* One family of a front end's part of /metrics (rls_stream_metrics): a
 * counter or gauge, from the front end's own statistics. With n == 0 it
 * is one sample, `name v[0]`; else the samples `name{label="values[i]"}
 * v[i]` for i from `from` up to n, a NULL values[i] left out, and with
 * label NULL values[i] is the sample's whole label list as written
 * (path="/json",result="ok"). */
typedef struct rls_stream_metric_s {
    const char *name;
    const char *type; /* "counter" or "gauge" */
    const char *help;
    const uint64_t *v;
    const char *label;
    const char *const *values;
    size_t from;
    size_t n;
} rls_stream_metric_t;

/* A family of one sample, v (an lvalue of type uint64_t). */
#define RLS_METRIC_ONE(name, type, help, v)                                    \
    {(name), (type), (help), &(v), NULL, NULL, 0, 0}

/* Appends the families m[0, count) to out, in that order: what every
 * front end's metrics callback (net/frontend.h) writes. Returns 0 or the
 * buffer's error. */
int rls_stream_metrics(rl_buf_t *out, const rls_stream_metric_t *m,
                       size_t count);

#endif
