/* The transport every front end shares (see stream.h): accepting, TLS in
 * and out around the front end's protocol, the notices a client gets
 * before it is closed, the shared read buffer, the eviction order and
 * the rule that frees a connection. Written once here, as libuv writes
 * src/unix/stream.c once under tcp.c and pipe.c. */
#include "net/stream.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/log.h"
#include "base/prom.h"
#include "net/listen.h"
#include "rl_buf.h"
#include "rl_error.h"

/* What one write of the TLS layer's own output may hold, at most. */
#define TLS_OWN_MAX (16u << 20)

void rls_streams_init(rls_streams_t *set, uv_loop_t *loop, const char *name,
                      const char *alpn, size_t rbuf_cap)
{
    memset(set, 0, sizeof(*set));
    set->loop = loop;
    set->name = name;
    set->alpn = alpn;
    set->rbuf_cap = rbuf_cap;
    set->adopt_fd = -1;
    rls_list_init(&set->all);
}

void rls_streams_adopt(rls_streams_t *set, int fd, void (*accept)(void *arg),
                       void *arg)
{
    set->adopt_fd = fd;
    accept(arg);
    if (set->adopt_fd >= 0) {
        /* The path gave up before taking it (out of memory). */
        close(set->adopt_fd);
        set->adopt_fd = -1;
    }
}

void rls_streams_free(rls_streams_t *set)
{
    free(set->rbuf);
    set->rbuf = NULL;
}

static void on_sweep(uv_timer_t *t)
{
    rls_streams_t *set = RLS_CONTAINER_OF(t, rls_streams_t, sweep);

    set->on_sweep(set, uv_now(set->loop));
}

void rls_streams_sweep_init(rls_streams_t *set, void *data,
                            void (*fn)(rls_streams_t *set, uint64_t now))
{
    uv_timer_init(set->loop, &set->sweep);
    set->sweep.data = data;
    set->on_sweep = fn;
}

void rls_streams_sweep_every(rls_streams_t *set, uint64_t period_ms)
{
    set->sweep_ms = period_ms;
    uv_timer_start(&set->sweep, on_sweep, period_ms, period_ms);
    uv_unref((uv_handle_t *)&set->sweep);
}

uint64_t rls_streams_sweep_period(uint64_t shortest_ms)
{
    uint64_t p = shortest_ms / 4;

    return p < 10 ? 10 : p > 250 ? 250 : p;
}

rls_stream_t *rls_streams_victim(rls_streams_t *set,
                                 int (*rank)(const rls_stream_t *s))
{
    rls_stream_t *s, *victim = NULL;
    rls_list_t *n;
    int r, best = 0;

    for (n = set->all.next; n != &set->all; n = n->next) {
        s = RLS_CONTAINER_OF(n, rls_stream_t, node);
        if ((r = rank(s)) < 0)
            continue;
        if (victim == NULL || r < best ||
            (r == best && s->since < victim->since)) {
            victim = s;
            best = r;
        }
    }
    return victim;
}

int rls_stream_init(rls_stream_t *s, rls_streams_t *set, void *owner)
{
    int rc;

    s->set = set;
    s->tls = NULL;
    rls_list_init(&s->node);
    if ((rc = uv_tcp_init(set->loop, &s->tcp)) != 0)
        return rc;
    s->tcp.data = owner;
    s->handles = 1;
    s->counted = set->loop_streams != NULL;
    if (s->counted)
        __atomic_add_fetch(set->loop_streams, 1, __ATOMIC_RELAXED);
    s->accepted_ms = s->since = uv_now(set->loop);
    return 0;
}

int rls_stream_accept(rls_stream_t *s, uv_stream_t *listener)
{
    int rc, fd = s->set->adopt_fd;

    if (fd >= 0) {
        s->set->adopt_fd = -1;
        if ((rc = uv_tcp_open(&s->tcp, fd)) != 0) {
            close(fd);
            return rc;
        }
    } else if ((rc = uv_accept(listener, (uv_stream_t *)&s->tcp)) != 0) {
        return rc;
    }
    uv_tcp_nodelay(&s->tcp, 1);
    return 0;
}

int rls_stream_tls_begin(rls_stream_t *s)
{
    rls_streams_t *set = s->set;
    int rc;

    if (set->tls != NULL) {
        /* Past the listener's caps on handshakes: closed before anything
         * is read (counted and logged by the TLS layer), after the alert
         * its TLS stack can read. */
        rls_peer_name(&s->tcp, s->peer, sizeof(s->peer));
        if ((rc = rls_tls_accept(set->tls, &set->tls_stats, set->name,
                                 set->alpn, s->peer, s->accepted_ms,
                                 &s->tls)) != 0) {
            if (rc == RL_EBUSY)
                rls_stream_try_write(s, rls_tls_plain_alert,
                                     sizeof(rls_tls_plain_alert));
            return rc;
        }
    }
    return 0;
}

void rls_stream_close(rls_stream_t *s, uv_close_cb close_cb)
{
    if (s->closing)
        return;
    s->closing = 1;
    s->reading = 0;
    if (s->counted)
        __atomic_sub_fetch(s->set->loop_streams, 1, __ATOMIC_RELAXED);
    uv_close((uv_handle_t *)&s->tcp, close_cb);
    /* Its handshake, if under way, stops counting against the caps. */
    rls_tls_conn_free(s->tls);
    s->tls = NULL;
}

int rls_stream_done(const rls_stream_t *s)
{
    return s->closing && s->handles <= 0 && s->owed == 0;
}

int rls_stream_read_start(rls_stream_t *s, uv_alloc_cb alloc_cb,
                          uv_read_cb read_cb)
{
    int rc;

    if (s->reading || s->closing)
        return 0;
    if ((rc = uv_read_start((uv_stream_t *)&s->tcp, alloc_cb, read_cb)) != 0)
        return rc;
    s->reading = 1;
    return 0;
}

void rls_stream_read_stop(rls_stream_t *s)
{
    if (s->reading) {
        uv_read_stop((uv_stream_t *)&s->tcp);
        s->reading = 0;
    }
}

void rls_stream_try_write(rls_stream_t *s, const void *p, size_t n)
{
    uv_buf_t b = uv_buf_init((char *)p, (unsigned)n);

    if (n > 0)
        uv_try_write((uv_stream_t *)&s->tcp, &b, 1);
}

int rls_stream_write_now(rls_stream_t *s, rl_buf_t *b)
{
    uv_buf_t u = uv_buf_init((char *)rl_buf_rptr(b), (unsigned)rl_buf_len(b));
    int wrote;

    if (u.len == 0)
        return 0;
    wrote = uv_try_write((uv_stream_t *)&s->tcp, &u, 1);
    if (wrote == UV_EAGAIN)
        return 0;
    if (wrote < 0)
        return wrote;
    rl_buf_consume(b, (size_t)wrote);
    return 0;
}

int rls_stream_write_queued(rls_stream_t *s, uv_write_t *req,
                            const rl_buf_t *b, uv_write_cb cb)
{
    uv_buf_t u = uv_buf_init((char *)rl_buf_rptr(b), (unsigned)rl_buf_len(b));

    return uv_write(req, (uv_stream_t *)&s->tcp, &u, 1, cb);
}

int rls_stream_handshaking(const rls_stream_t *s)
{
    return s->tls != NULL && !rls_tls_conn_ready(s->tls);
}

int rls_stream_handshake_late(const rls_stream_t *s, uint64_t now,
                              uint64_t limit_ms)
{
    return limit_ms > 0 && rls_stream_handshaking(s) &&
           now - s->accepted_ms >= limit_ms;
}

int rls_stream_plain_hello(rls_stream_t *s, const uint8_t *p, size_t n)
{
    char peer[48];

    if (s->heard)
        return 0;
    s->heard = 1;
    if (s->tls != NULL || !rls_tls_is_hello(p, n))
        return 0;
    /* A TLS client on a plaintext port: told in TLS, and said. */
    rls_peer_name(&s->tcp, peer, sizeof(peer));
    rls_tls_count_plain(&s->set->plain, s->set->name, peer,
                        uv_now(s->set->loop));
    rls_stream_try_write(s, rls_tls_plain_alert, sizeof(rls_tls_plain_alert));
    return 1;
}

int rls_stream_tls_feed(rls_stream_t *s, const uint8_t *p, size_t n)
{
    int was = rls_tls_conn_ready(s->tls);

    s->heard = 1;
    if (rls_tls_conn_feed(s->tls, p, n) != 0)
        return RL_ECLOSED;
    if (!was && rls_tls_conn_ready(s->tls)) {
        s->set->tls_stats.ok++;
        return 1;
    }
    return 0;
}

void rls_stream_tls_failed(rls_stream_t *s, rls_tls_reason_t reason,
                           const char *why, const void *notice,
                           size_t notice_len, int flags)
{
    rls_streams_t *set = s->set;
    rl_buf_t alert;

    if (s->tls == NULL)
        return;
    if (why != NULL)
        rls_tls_conn_fail(s->tls, reason, why);
    rls_tls_count_failure(&set->tls_stats, set->name, s->tls, s->peer,
                          uv_now(set->loop));
    if (flags & RLS_STREAM_QUIET)
        return;
    if (notice != NULL && rls_tls_conn_reason(s->tls) == RLS_TLS_NOT_TLS) {
        rls_stream_try_write(s, notice, notice_len);
        if (flags & RLS_STREAM_NOTICE_ONLY)
            return;
    }
    rl_buf_init(&alert, TLS_OWN_MAX);
    if (rls_tls_conn_take(s->tls, &alert) == 0)
        rls_stream_try_write(s, rl_buf_rptr(&alert), rl_buf_len(&alert));
    rl_buf_free(&alert);
}

/* One write of the TLS layer's own output, apart from the front end's:
 * its own memory, freed by its callback, which touches nothing else (it
 * may come after the connection closed). libuv writes in the order
 * asked, and each write takes all the ciphertext there is, so records
 * stay in order. */
typedef struct tls_write_s {
    uv_write_t req;
    rl_buf_t buf;
} tls_write_t;

static void on_tls_write(uv_write_t *req, int status)
{
    tls_write_t *w = req->data;

    (void)status; /* a failed write fails the reads too */
    rl_buf_free(&w->buf);
    free(w);
}

int rls_stream_tls_flush(rls_stream_t *s)
{
    tls_write_t *w;
    uv_buf_t b;

    if (s->tls == NULL || rls_tls_conn_pending(s->tls) == 0)
        return 0;
    if ((w = calloc(1, sizeof(*w))) == NULL)
        return RL_ENOMEM;
    w->req.data = w;
    rl_buf_init(&w->buf, TLS_OWN_MAX);
    if (rls_tls_conn_take(s->tls, &w->buf) != 0)
        goto fail;
    b = uv_buf_init((char *)rl_buf_rptr(&w->buf),
                    (unsigned)rl_buf_len(&w->buf));
    if (uv_write(&w->req, (uv_stream_t *)&s->tcp, &b, 1, on_tls_write) != 0)
        goto fail;
    return 0;
fail:
    rl_buf_free(&w->buf);
    free(w);
    return RL_EIO;
}

int rls_stream_metrics(rl_buf_t *out, const rls_stream_metric_t *m,
                       size_t count)
{
    size_t k, i;
    int rc = RL_OK;

    for (k = 0; k < count && rc == RL_OK; k++) {
        const rls_stream_metric_t *f = &m[k];

        rc = rls_prom_family(out, f->name, f->type, f->help);
        if (f->n == 0 && rc == RL_OK)
            rc = rl_buf_printf(out, "%s %llu\n", f->name,
                               (unsigned long long)f->v[0]);
        for (i = f->from; i < f->n && rc == RL_OK; i++) {
            if (f->values[i] == NULL)
                continue;
            rc = f->label != NULL
                     ? rls_prom_sample(out, f->name, f->label, f->values[i],
                                       f->v[i])
                     : rl_buf_printf(out, "%s{%s} %llu\n", f->name,
                                     f->values[i],
                                     (unsigned long long)f->v[i]);
        }
    }
    return rc;
}
