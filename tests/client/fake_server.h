/* A scripted fake rl-server for the client's unit tests. It runs in its own
 * thread on 127.0.0.1, reads CheckRequest frames and answers as its mode
 * says, and counts what it saw, so a test can assert how the client behaved
 * on the wire (how many reads a batch took, how many connections were made).
 *
 * Answers echo the request where a test needs to match them: limit is the
 * request's limit (or 10 for the rule "known"), used is a per-key running
 * total of costs, so a test can tell which answer went to which check.
 * Those answers leave out window_seconds, as a server older than the field
 * does. The rule "shadow" is 2 per 7 s in shadow mode, answered as a newer
 * server does: window_seconds 7, and past the limit OK with shadow_refused
 * set and nothing counted.
 *
 * GOAWAY: the fake can send the stopping server's notice (id 0, ERROR,
 * "server is shutting down"), by mode or on demand (fake_goaway). A
 * connection that got it is still read and answered until the client's end
 * of file, and the fake counts how that end came: after whole frames only,
 * or in the middle of one.
 *
 * Reservations and leases (any answering mode): every request with an op
 * is logged (fake_xop_get) and answered as rl-server's contract says:
 *   RESERVE  decided as a check; when allowed, handle "R:KEY:ID" (key
 *            "big512": 512 bytes of 'h'; key "big513": 513, over the
 *            maximum), decided_at_ms now, expires_at_ms now + 60000, and
 *            failed_open for the key "fo";
 *   SETTLE   OK (used = actual) for a handle starting "R:", else ERROR
 *            "unknown or settled reservation";
 *   ACQUIRE  key "busy": OVER_LIMIT, limit 1, used 1, retry_after_ms 777;
 *            else OK, handle "L:KEY", expires_at_ms now + lease_ms;
 *   RENEW    OK with a new expires_at_ms for a handle starting "L:",
 *            unless it is the renew_fail_from-th renewal or later; else
 *            ERROR "no such lease alive";
 *   RELEASE  OK for a handle starting "L:", else ERROR as RENEW.
 * A RENEW is answered renew_delay_ms late (default 0). "now" is the wall
 * clock in ms. */
#ifndef FAKE_SERVER_H
#define FAKE_SERVER_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

typedef enum {
    FAKE_ANSWER,       /* answer every request at once, all of a read in one
                          send */
    FAKE_SILENT,       /* read, never answer */
    FAKE_CLOSE_AFTER,  /* close the connection after param requests */
    FAKE_REVERSE,      /* collect param requests, answer them in reverse */
    FAKE_BYTEWISE,     /* answer, one byte per send, 200 us apart */
    FAKE_DELAY_FIRST,  /* answer the first request after param ms, the rest
                          at once */
    FAKE_GARBAGE,      /* answer with a frame whose flag byte is 1 */
    FAKE_GOAWAY,       /* answer; on the connection that brings the param-th
                          request, the notice goes out alone before that
                          request's answer, and the answers 20 ms later */
    FAKE_GOAWAY_STALL, /* answer; the first connection gets the notice as
                          it is accepted and is not read for param ms */
    FAKE_GOAWAY_DROP   /* answer; the first connection gets the notice as
                          it is accepted, is never answered, and is closed
                          param ms after the client's end of file */
} fake_mode_t;

#define FAKE_MAXCONN 8
#define FAKE_XLOG 64

/* A request with an op, as the fake decoded it. */
typedef struct fake_xop_s {
    uint32_t op;
    uint64_t id;
    uint64_t actual;
    uint32_t cost;
    size_t key_len;
    char key[64]; /* NUL-terminated, cut at 63 bytes */
    size_t rule_len;
    size_t handle_len;
    uint8_t handle[600];
    uint64_t mono_ms; /* when it was read */
} fake_xop_t;

typedef struct fake_s {
    int port;
    fake_mode_t mode;
    int param;
    atomic_int accepted;  /* connections */
    atomic_int requests;  /* frames decoded */
    atomic_int id0;       /* of which with id 0 (librlc must send none) */
    atomic_int reads;     /* recv calls that returned data */
    atomic_int max_burst; /* most frames that arrived in one recv */
    atomic_int conn_requests[FAKE_MAXCONN]; /* frames, by accept order */
    atomic_int notices;                     /* GOAWAY notices sent */
    atomic_int after_notice; /* frames of reads done after the notice */
    atomic_int left;       /* clean ends of file on notified connections ... */
    atomic_int partial;    /* ... of which in the middle of a frame */
    atomic_int goaway_now; /* fake_goaway's request to the thread */
    atomic_int stop;
    atomic_int nxop;            /* requests with an op (the log's length) */
    atomic_int renews;          /* RENEW requests */
    atomic_int releases;        /* RELEASE requests */
    atomic_int renew_fail_from; /* 0: never; N: the N-th RENEW on fail */
    atomic_int lease_ms;        /* ACQUIRE and RENEW: default 600 */
    atomic_int renew_delay_ms;  /* a RENEW is answered this much later */
    pthread_mutex_t xlock;
    fake_xop_t xlog[FAKE_XLOG];
    int lfd;
    pthread_t thread;
} fake_t;

/* Starts a fake on port (0: a free port; the port is in f->port). Returns
 * 0 or RL_EIO. The counters start at 0. */
int fake_start(fake_t *f, int port, fake_mode_t mode, int param);

/* Sends the GOAWAY notice on every open connection that has not had it,
 * from the fake's thread. Returns once it is sent: the number of notices
 * sent so far, or RL_ETIMEDOUT if the thread did not act within 2 s. */
int fake_goaway(fake_t *f);

/* Waits up to ms for *counter to reach want. Returns 1 when it did. */
int fake_wait(atomic_int *counter, int want, int ms);

/* Copies the i-th logged request with an op (from 0). Returns 1, or 0 when
 * there is none yet. */
int fake_xop_get(fake_t *f, int i, fake_xop_t *out);

/* Stops the thread and closes every socket (clients see end of file). */
void fake_stop(fake_t *f);

#endif
