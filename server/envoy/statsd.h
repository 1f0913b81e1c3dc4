/* A statsd / DogStatsD counter exporter over UDP (statsd.c): every flush
 * (a loop timer), a collector given at start appends the counters that
 * moved since the last flush as "<name>:<delta>|c" lines; lines are packed
 * into datagrams of at most RLS_STATSD_PACKET bytes and sent with a
 * non-blocking sendto, so the loop never waits on the network.
 *
 * Bounded: one datagram's buffer, and at most max_packets datagrams a
 * flush; a collector that has more stops (rls_statsd_counter says
 * RL_EFULL) and resumes at the next flush, its deltas kept in its own
 * counters, so nothing is lost for being late. A datagram the kernel
 * refuses (its socket buffer full, no route) is dropped and its lines
 * counted in lines_dropped: statsd is lossy by design, and a blocked
 * loop would cost every client. */
#ifndef RLS_NET_STATSD_H
#define RLS_NET_STATSD_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <uv.h>

#include "rl_buf.h"

/* A datagram's payload at most: fits a 1500-byte MTU with IP and UDP
 * headers, what statsd clients use. */
#define RLS_STATSD_PACKET 1432

typedef struct rls_statsd_stats_s {
    uint64_t packets;       /* datagrams sent */
    uint64_t lines;         /* counter lines sent */
    uint64_t lines_dropped; /* in datagrams the kernel refused, or longer
                               than a datagram */
    uint64_t send_errors;   /* sendto failures */
    uint64_t deferred;      /* flushes that hit max_packets */
} rls_statsd_stats_t;

typedef struct rls_statsd_s rls_statsd_t;

/* Called on every flush: appends lines with rls_statsd_counter until it
 * has nothing more or that returns RL_EFULL. */
typedef void (*rls_statsd_collect_cb)(void *arg, rls_statsd_t *sd);

struct rls_statsd_s {
    uv_timer_t timer;
    int fd;
    struct sockaddr_storage addr;
    socklen_t addrlen;
    char pkt[RLS_STATSD_PACKET];
    size_t len;       /* bytes of pkt filled */
    size_t pkt_lines; /* lines in it */
    uint32_t packets_this_flush;
    uint32_t max_packets;
    rls_statsd_collect_cb collect;
    void *arg;
    rls_statsd_stats_t stats;
    int started;
};

/* Resolves host:port (once, here), opens a non-blocking UDP socket and
 * starts flushing every flush_ms on loop. Returns 0, or RL_EADDR (host
 * does not resolve) / RL_EIO with a one-line reason in err; nothing is
 * left open then. */
int rls_statsd_start(rls_statsd_t *sd, uv_loop_t *loop, const char *host,
                     int port, uint64_t flush_ms, rls_statsd_collect_cb cb,
                     void *arg, char *err, size_t errlen);

/* Appends "<prefix><name>.<stat>:<delta>|c" to the datagram, sending the
 * datagram first when the line does not fit. Returns 0 (the line is taken,
 * or dropped and counted for being longer than a datagram), or RL_EFULL
 * when this flush has sent max_packets datagrams: the line is not taken,
 * the collector stops and resumes next flush. */
int rls_statsd_counter(rls_statsd_t *sd, const char *prefix, const char *name,
                       size_t name_len, const char *stat, uint64_t delta);

/* One flush now: the collector, then the last partial datagram. What the
 * timer does; also called once at stop, so the last counts go out. */
void rls_statsd_flush(rls_statsd_t *sd);

/* Appends the exporter's /metrics families (rl_statsd_*). sd NULL or not
 * started: nothing. Returns 0 or the buffer's error. */
int rls_statsd_metrics(const rls_statsd_t *sd, rl_buf_t *out);

/* Closes the socket and the timer (its close completes on the loop). A
 * struct that never started is fine. */
void rls_statsd_close(rls_statsd_t *sd);

#endif
