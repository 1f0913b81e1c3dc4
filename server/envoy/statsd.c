/* The statsd exporter's UDP side; see statsd.h. Nothing here knows what
 * the counters are: the collector given at start does. */
#include "envoy/statsd.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "base/prom.h"
#include "rl_error.h"
#include "rl_window.h"

/* Datagrams a flush may send: 64 of 1432 bytes, about 1,500 lines. */
#define MAX_PACKETS 64

/* Sends the datagram being filled, if any. */
static void send_packet(rls_statsd_t *sd)
{
    ssize_t n;

    if (sd->len == 0)
        return;
    do {
        n = sendto(sd->fd, sd->pkt, sd->len, MSG_DONTWAIT,
                   (const struct sockaddr *)&sd->addr, sd->addrlen);
    } while (n < 0 && errno == EINTR);
    if (n == (ssize_t)sd->len) {
        sd->stats.packets++;
        sd->stats.lines += sd->pkt_lines;
    } else {
        sd->stats.send_errors++;
        sd->stats.lines_dropped += sd->pkt_lines;
    }
    sd->packets_this_flush++;
    sd->len = 0;
    sd->pkt_lines = 0;
}

int rls_statsd_counter(rls_statsd_t *sd, const char *prefix, const char *name,
                       size_t name_len, const char *stat, uint64_t delta)
{
    char num[24];
    size_t plen = strlen(prefix), slen = strlen(stat), dlen, need;

    dlen = rl_put_u64(num, delta);
    /* name '.' stat ':' delta "|c" '\n' */
    need = plen + name_len + 1 + slen + 1 + dlen + 3;
    if (need > sizeof(sd->pkt)) {
        sd->stats.lines_dropped++;
        return 0;
    }
    if (sd->len + need > sizeof(sd->pkt)) {
        if (sd->packets_this_flush >= sd->max_packets)
            return RL_EFULL;
        send_packet(sd);
    }
    if (sd->packets_this_flush >= sd->max_packets)
        return RL_EFULL;
    memcpy(sd->pkt + sd->len, prefix, plen);
    sd->len += plen;
    memcpy(sd->pkt + sd->len, name, name_len);
    sd->len += name_len;
    sd->pkt[sd->len++] = '.';
    memcpy(sd->pkt + sd->len, stat, slen);
    sd->len += slen;
    sd->pkt[sd->len++] = ':';
    memcpy(sd->pkt + sd->len, num, dlen);
    sd->len += dlen;
    memcpy(sd->pkt + sd->len, "|c\n", 3);
    sd->len += 3;
    sd->pkt_lines++;
    return 0;
}

void rls_statsd_flush(rls_statsd_t *sd)
{
    if (!sd->started)
        return;
    sd->packets_this_flush = 0;
    sd->collect(sd->arg, sd);
    if (sd->packets_this_flush >= sd->max_packets)
        sd->stats.deferred++;
    else
        send_packet(sd);
}

static void on_timer(uv_timer_t *t)
{
    rls_statsd_flush(t->data);
}

int rls_statsd_start(rls_statsd_t *sd, uv_loop_t *loop, const char *host,
                     int port, uint64_t flush_ms, rls_statsd_collect_cb cb,
                     void *arg, char *err, size_t errlen)
{
    struct addrinfo hints, *ai = NULL;
    char service[16];
    int fl;

    memset(sd, 0, sizeof(*sd));
    sd->fd = -1;
    sd->collect = cb;
    sd->arg = arg;
    sd->max_packets = MAX_PACKETS;
    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_DGRAM;
    snprintf(service, sizeof(service), "%d", port);
    /* At start, before the loop runs: a name resolves once, as the
     * reference's statsd client does. */
    if (getaddrinfo(host, service, &hints, &ai) != 0 || ai == NULL ||
        ai->ai_addrlen > sizeof(sd->addr)) {
        if (ai != NULL)
            freeaddrinfo(ai);
        snprintf(err, errlen, "--statsd: cannot resolve '%s'", host);
        return RL_EADDR;
    }
    memcpy(&sd->addr, ai->ai_addr, ai->ai_addrlen);
    sd->addrlen = ai->ai_addrlen;
    sd->fd = socket(ai->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    freeaddrinfo(ai);
    if (sd->fd < 0 || (fl = fcntl(sd->fd, F_GETFL)) < 0 ||
        fcntl(sd->fd, F_SETFL, fl | O_NONBLOCK) < 0) {
        snprintf(err, errlen, "--statsd: socket: %s", strerror(errno));
        if (sd->fd >= 0)
            close(sd->fd);
        sd->fd = -1;
        return RL_EIO;
    }
    uv_timer_init(loop, &sd->timer);
    sd->timer.data = sd;
    uv_timer_start(&sd->timer, on_timer, flush_ms, flush_ms);
    /* The exporter alone must not keep a stopping server's loop alive. */
    uv_unref((uv_handle_t *)&sd->timer);
    sd->started = 1;
    return RL_OK;
}

void rls_statsd_close(rls_statsd_t *sd)
{
    if (!sd->started)
        return;
    sd->started = 0;
    uv_close((uv_handle_t *)&sd->timer, NULL);
    close(sd->fd);
    sd->fd = -1;
}

int rls_statsd_metrics(const rls_statsd_t *sd, rl_buf_t *out)
{
    int rc;

    if (sd == NULL || !sd->started)
        return RL_OK;
    if ((rc = rls_prom_counter(out, "rl_statsd_packets_total",
                               "--statsd datagrams sent.",
                               sd->stats.packets)) != RL_OK ||
        (rc = rls_prom_counter(out, "rl_statsd_lines_total",
                               "--statsd counter lines sent.",
                               sd->stats.lines)) != RL_OK ||
        (rc = rls_prom_counter(out, "rl_statsd_lines_dropped_total",
                               "--statsd lines lost: in datagrams the "
                               "kernel refused, or longer than one.",
                               sd->stats.lines_dropped)) != RL_OK ||
        (rc = rls_prom_counter(out, "rl_statsd_send_errors_total",
                               "--statsd datagrams the kernel refused.",
                               sd->stats.send_errors)) != RL_OK)
        return rc;
    return rls_prom_counter(out, "rl_statsd_flushes_deferred_total",
                            "--statsd flushes that reached their bound (64 "
                            "datagrams); the rest went with the next.",
                            sd->stats.deferred);
}
