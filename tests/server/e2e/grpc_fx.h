/* What the --grpc tests share (grpc_fx.c): one rl-server with --grpc for
 * a whole program, started by its group setup, with a well-behaved client
 * on its own long-lived connection that every case calls again after its
 * bad input; raw HTTP/2 connections (tests/support/h2raw.c) and what
 * their streams ended with. Cases that need their own limits start their
 * own server in an rlt_fx fixture, configured alike (--grpc with the
 * mongo_cps descriptors, --metrics). Used by e2e_grpc_bad.c and
 * e2e_grpc_limits.c. */
#ifndef RLT_GRPC_FX_H
#define RLT_GRPC_FX_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "h2raw.h"
#include "rlt.h"
#include "rlt_fx.h"

/* The five header fields of a gRPC call to the rate limit service, as
 * Envoy sends them: the start of every hand-made request. */
#define GRPC_REQUEST_NV                                                        \
    {(uint8_t *)":method", (uint8_t *)"POST", 7, 4, 0},                        \
        {(uint8_t *)":scheme", (uint8_t *)"http", 7, 4, 0},                    \
        {(uint8_t *)":path", (uint8_t *)H2R_PATH, 5, sizeof(H2R_PATH) - 1, 0}, \
        {(uint8_t *)":authority", (uint8_t *)"rl", 10, 2, 0},                  \
    {                                                                          \
        (uint8_t *)"content-type", (uint8_t *)"application/grpc", 12, 16, 0    \
    }

/* The shared server's --grpc and --metrics ports, and the well-behaved
 * client's connection to it. */
extern int port, mport;

/* A UDP socket on loopback the servers' --statsd sends to (flushed every
 * 50 ms); nobody need read it. */
extern int statsd_fd;
extern h2r_t good;

/* What the streams of one connection ended with, by stream id: the
 * answer (grpc -1 and http 0: none), and whether and how the server
 * reset the stream, before its answer or after it. */
#define MAXS 4096
typedef struct {
    int grpc[MAXS];
    int http[MAXS];
    uint32_t rst[MAXS];
    int reset[MAXS];
    int done[MAXS];
    int ndone;
} ends_t;

/* One raw connection with its stream results. */
typedef struct {
    h2r_t c;
    ends_t e;
} conn_t;

/* SIGPIPE ignored, rlt_fx configured as above, and RLT_FILTER=test_name
 * (a glob) to run only matching tests. Called first by each main. */
void grpc_init(void);

/* cmocka group setup and teardown: the shared server (--grpc-max-streams
 * 8, --idle-timeout 1, --max-connections 6, --frame-timeout-ms 500,
 * --max-partial-bytes 150000) and the good client's connection. */
int grpc_setup(void **state);
int grpc_teardown(void **state);

/* Records a stream's end in the ends_t at arg (an h2r_t's on_done). */
void on_done(void *arg, int32_t id, int grpc, int http, uint32_t rst);

/* Pumps c until stream id ended, the connection ended, or 5 s. */
int wait_stream(h2r_t *c, ends_t *e, int32_t id);

/* Pumps c until the server closed it (end of file) or 5 s. */
int wait_eof(h2r_t *c);

/* The well-behaved client: one call on its long-lived connection, which
 * must be answered OK. */
void good_call(void);

/* A connection to the shared server; raw: without the client preface. */
conn_t *dial(int raw);

/* Closes k and frees it. */
void hang_up(conn_t *k);

/* Pumps k until the server's SETTINGS came and our ACK went out: after
 * this nothing the client queues on its own can cut into a header block
 * the test leaves open. */
void ready(conn_t *k);

/* Queues a valid call (answered OK by the store) on stream id. */
void call(conn_t *k, int32_t id);

/* Opens a connection to the port of another server. */
conn_t *dial_to(int p);

/* The shared server, after all a program's cases, exits 0 on SIGTERM
 * (under ASan: with nothing leaked or touched after its free). The last
 * case of each program. */
void test_stop_clean(void **state);

#endif
