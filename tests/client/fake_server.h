/* A scripted fake rl-server for the client's unit tests. It runs in its own
 * thread on 127.0.0.1, reads CheckRequest frames and answers as its mode
 * says, and counts what it saw, so a test can assert how the client behaved
 * on the wire (how many reads a batch took, how many connections were made).
 *
 * Answers echo the request where a test needs to match them: limit is the
 * request's limit (or 10 for the rule "known"), used is a per-key running
 * total of costs, so a test can tell which answer went to which check. */
#ifndef FAKE_SERVER_H
#define FAKE_SERVER_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

typedef enum {
    FAKE_ANSWER,      /* answer every request at once, all of a read in one
                         send */
    FAKE_SILENT,      /* read, never answer */
    FAKE_CLOSE_AFTER, /* close the connection after param requests */
    FAKE_REVERSE,     /* collect param requests, answer them in reverse */
    FAKE_BYTEWISE,    /* answer, one byte per send, 200 us apart */
    FAKE_DELAY_FIRST, /* answer the first request after param ms, the rest
                         at once */
    FAKE_GARBAGE      /* answer with a frame whose flag byte is 1 */
} fake_mode_t;

typedef struct fake_s {
    int port;
    fake_mode_t mode;
    int param;
    atomic_int accepted;  /* connections */
    atomic_int requests;  /* frames decoded */
    atomic_int reads;     /* recv calls that returned data */
    atomic_int max_burst; /* most frames that arrived in one recv */
    atomic_int stop;
    int lfd;
    pthread_t thread;
} fake_t;

/* Starts a fake on port (0: a free port; the port is in f->port). Returns
 * 0 or -1. The counters start at 0. */
int fake_start(fake_t *f, int port, fake_mode_t mode, int param);

/* Stops the thread and closes every socket (clients see end of file). */
void fake_stop(fake_t *f);

#endif
