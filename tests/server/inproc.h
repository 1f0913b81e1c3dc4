/* An rl-server in this process, for the program's tests and /check's:
 * its loop runs on a second thread while the test's thread speaks to its
 * listeners over loopback with plain blocking sockets, the way clients
 * would. The loop thread is stopped through a uv_async handle
 * (rls_server_stop runs on the loop's own thread), and the stop checks
 * that uv_loop_close() succeeds: every handle the server opened was
 * closed. */
#ifndef RLT_INPROC_H
#define RLT_INPROC_H

#include <pthread.h>

#include <uv.h>

#include "server.h"
#include "rlt.h"

typedef struct inproc_s {
    rls_flags_t cfg;
    rls_server_t srv; /* started by the test on loop, with cfg */
    uv_loop_t loop;
    uv_async_t stop;
    pthread_t thread;
    int running;       /* the loop thread runs */
    rlt_redis_t redis; /* pid > 0: a private redis-server of the test's */
    int port, mport, hport;
    char err[256];
} inproc_t;

/* Runs f's loop, where the server was started, on a new thread. */
void inproc_run(inproc_t *f);

/* Asks the loop thread to stop the server and waits for uv_run to return;
 * then frees the server and closes the loop, which must have no handle
 * left. Does nothing when the thread is not running. */
void inproc_stop(inproc_t *f);

/* cmocka setup and teardown: *state is a zeroed inproc_t; the teardown
 * stops its server and its redis-server, whether the test passed or not,
 * and frees it. */
int inproc_setup(void **state);
int inproc_teardown(void **state);

/* A cmocka test run with them. */
#define INPROC_TEST(t)                                                         \
    cmocka_unit_test_setup_teardown(t, inproc_setup, inproc_teardown)

#endif
