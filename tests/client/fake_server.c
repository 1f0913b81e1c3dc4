#include "fake_server.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "rl_buf.h"
#include "rl_clock.h"
#include "rl_error.h"
#include "rl_frame.h"
#include "rl_msg.h"

#define MAXCONN FAKE_MAXCONN
#define MAXKEYS 64
#define MAXHELD 4096

typedef struct {
    char key[600];
    uint64_t used;
} counter_t;

typedef struct {
    int fd;
    rl_buf_t in;
    int seen; /* requests on this connection */
    rl_result_t held[MAXHELD];
    int nheld;
    int delayed;          /* FAKE_DELAY_FIRST: the first answer went out */
    int ordinal;          /* accept order, from 0 */
    int noticed;          /* GOAWAY sent on this connection */
    int silent;           /* FAKE_GOAWAY_DROP: never answered */
    uint64_t stall_until; /* not read before this (monotonic ms) */
    uint64_t close_at;    /* ended by the client; close at this time */
} fconn_t;

typedef struct {
    fake_t *f;
    fconn_t conns[MAXCONN];
    counter_t keys[MAXKEYS];
    int nkeys;
    int naccepted;
    int goaway_done; /* FAKE_GOAWAY*: the one scripted notice went out */
} state_t;

static void nap_us(long us)
{
    struct timespec ts = {us / 1000000, (us % 1000000) * 1000};

    nanosleep(&ts, NULL);
}

static uint64_t *counter(state_t *st, const rl_check_t *c)
{
    int i;

    for (i = 0; i < st->nkeys; i++)
        if (strlen(st->keys[i].key) == c->key_len &&
            memcmp(st->keys[i].key, c->key, c->key_len) == 0)
            return &st->keys[i].used;
    if (st->nkeys == MAXKEYS || c->key_len >= sizeof(st->keys[0].key))
        return &st->keys[0].used;
    memcpy(st->keys[st->nkeys].key, c->key, c->key_len);
    st->keys[st->nkeys].key[c->key_len] = '\0';
    return &st->keys[st->nkeys++].used;
}

/* The fixed-window decision, with a constant 1234 ms to the window's end. */
static void decide(state_t *st, const rl_check_t *c, rl_result_t *r)
{
    uint64_t *used = counter(st, c);
    uint64_t limit = c->limit;

    uint64_t cost = c->cost ? c->cost : 1;

    memset(r, 0, sizeof(*r));
    r->id = c->id;
    if (c->rule_len == 6 && memcmp(c->rule, "shadow", 6) == 0) {
        /* A rule in shadow mode, 2 per 7 s, from a server that names the
         * deciding window: past the limit it answers OK, shadow_refused,
         * and counts nothing, as a refusal would. */
        r->window_s = 7;
        r->limit = 2;
        r->reset_after_ms = 1234;
        r->code = RL_CODE_OK;
        if (*used + cost > 2) {
            r->shadow_refused = 1;
            r->used = *used;
        } else {
            *used += cost;
            r->used = *used;
        }
        r->remaining = r->used < 2 ? 2 - r->used : 0;
        return;
    }
    if (c->rule_len) {
        if (c->rule_len != 5 || memcmp(c->rule, "known", 5) != 0) {
            r->code = RL_CODE_ERROR;
            r->error = "unknown rule";
            r->error_len = strlen(r->error);
            return;
        }
        limit = 10;
    }
    *used += cost;
    r->limit = limit;
    r->used = *used;
    r->remaining = *used < limit ? limit - *used : 0;
    r->reset_after_ms = 1234;
    r->code = *used <= limit ? RL_CODE_OK : RL_CODE_OVER_LIMIT;
    r->retry_after_ms = r->code == RL_CODE_OK ? 0 : 1234;
}

/* Appends r's frame. rl_result_put is not used: its fast path reserves a
 * fixed room that does not count the handle (lib/msg.c RESULT_FIXED_MAX),
 * and these answers carry handles of up to 513 bytes. */
static void put(rl_buf_t *b, const rl_result_t *r)
{
    size_t n = rl_result_size(r);
    uint8_t *w;

    if (rl_buf_reserve(b, RL_FRAME_HEADER + n, &w) != RL_OK)
        return;
    rl_frame_header(w, (uint32_t)n);
    rl_result_encode(r, w + RL_FRAME_HEADER);
    rl_buf_commit(b, RL_FRAME_HEADER + n);
}

static int has_prefix(const rl_check_t *c, const char *p)
{
    size_t n = strlen(p);

    return c->handle_len >= n && memcmp(c->handle, p, n) == 0;
}

static int key_is(const rl_check_t *c, const char *k)
{
    return c->key_len == strlen(k) && memcmp(c->key, k, c->key_len) == 0;
}

static void xlog(fake_t *f, const rl_check_t *c)
{
    int i = atomic_load(&f->nxop);
    fake_xop_t *x;

    if (i >= FAKE_XLOG)
        return;
    pthread_mutex_lock(&f->xlock);
    x = &f->xlog[i];
    memset(x, 0, sizeof(*x));
    x->op = c->op;
    x->id = c->id;
    x->actual = c->actual;
    x->cost = c->cost;
    x->key_len = c->key_len;
    /* A field the request left out is NULL: no memcpy from it. */
    if (c->key_len)
        memcpy(x->key, c->key, c->key_len < 63 ? c->key_len : 63);
    x->rule_len = c->rule_len;
    x->handle_len = c->handle_len;
    if (c->handle_len)
        memcpy(x->handle, c->handle,
               c->handle_len < sizeof(x->handle) ? c->handle_len
                                                 : sizeof(x->handle));
    x->mono_ms = rl_mono_ms();
    pthread_mutex_unlock(&f->xlock);
    atomic_store(&f->nxop, i + 1);
}

int fake_xop_get(fake_t *f, int i, fake_xop_t *out)
{
    if (i < 0 || i >= atomic_load(&f->nxop))
        return 0;
    pthread_mutex_lock(&f->xlock);
    *out = f->xlog[i];
    pthread_mutex_unlock(&f->xlock);
    return 1;
}

static void decide(state_t *st, const rl_check_t *c, rl_result_t *r);

/* Answers a request with an op, as the header says. hbuf holds the handle
 * until r is encoded. */
static void xdecide(state_t *st, const rl_check_t *c, rl_result_t *r,
                    uint8_t *hbuf, size_t hcap)
{
    fake_t *f = st->f;
    uint64_t now = rl_unix_ms();
    int n;

    xlog(f, c);
    memset(r, 0, sizeof(*r));
    r->id = c->id;
    switch (c->op) {
    case RL_OP_RESERVE:
        decide(st, c, r);
        if (r->code != RL_CODE_OK)
            return;
        r->decided_at_ms = now;
        r->expires_at_ms = now + 60000;
        r->failed_open = key_is(c, "fo");
        if (key_is(c, "big512") || key_is(c, "big513")) {
            r->handle_len = key_is(c, "big512") ? 512 : 513;
            memset(hbuf, 'h', r->handle_len);
        } else {
            n = snprintf((char *)hbuf, hcap, "R:%.*s:%llu", (int)c->key_len,
                         c->key, (unsigned long long)c->id);
            r->handle_len = (size_t)n < hcap ? (size_t)n : hcap - 1;
        }
        r->handle = hbuf;
        return;
    case RL_OP_SETTLE:
        if (!has_prefix(c, "R:"))
            break;
        r->code = RL_CODE_OK;
        r->used = c->actual;
        r->decided_at_ms = now;
        return;
    case RL_OP_ACQUIRE:
        r->decided_at_ms = now;
        r->limit = 1;
        r->used = 1;
        if (key_is(c, "busy")) {
            r->code = RL_CODE_OVER_LIMIT;
            r->retry_after_ms = 777;
            return;
        }
        r->code = RL_CODE_OK;
        r->expires_at_ms = now + (uint64_t)atomic_load(&f->lease_ms);
        n = snprintf((char *)hbuf, hcap, "L:%.*s", (int)c->key_len, c->key);
        r->handle_len = (size_t)n < hcap ? (size_t)n : hcap - 1;
        r->handle = hbuf;
        return;
    case RL_OP_RENEW: {
        int k = atomic_fetch_add(&f->renews, 1) + 1;
        int from = atomic_load(&f->renew_fail_from);
        nap_us((long)atomic_load(&f->renew_delay_ms) * 1000);
        if (!has_prefix(c, "L:") || (from > 0 && k >= from))
            break;
        r->code = RL_CODE_OK;
        r->decided_at_ms = now;
        r->expires_at_ms = now + (uint64_t)atomic_load(&f->lease_ms);
        return;
    }
    case RL_OP_RELEASE:
        atomic_fetch_add(&f->releases, 1);
        if (!has_prefix(c, "L:"))
            break;
        r->code = RL_CODE_OK;
        r->decided_at_ms = now;
        return;
    default:
        r->code = RL_CODE_ERROR;
        r->error = "unknown op";
        r->error_len = strlen(r->error);
        return;
    }
    r->code = RL_CODE_ERROR;
    r->error = c->op == RL_OP_SETTLE ? "unknown or settled reservation"
                                     : "no such lease alive";
    r->error_len = strlen(r->error);
}

static void send_all(int fd, const uint8_t *p, size_t n, int bytewise)
{
    while (n > 0) {
        ssize_t k = send(fd, p, bytewise ? 1 : n, MSG_NOSIGNAL);
        if (k <= 0) {
            if (k < 0 && errno == EINTR)
                continue;
            return;
        }
        p += k;
        n -= (size_t)k;
        if (bytewise)
            nap_us(200);
    }
}

/* The stopping server's notice: id 0 (about the connection), ERROR, and
 * exactly this text. */
static void send_notice(fake_t *f, fconn_t *fc)
{
    rl_buf_t out;

    rl_buf_init(&out, 1024);
    put(&out, &rl_goaway_notice);
    send_all(fc->fd, rl_buf_rptr(&out), rl_buf_len(&out), 0);
    rl_buf_free(&out);
    fc->noticed = 1;
    atomic_fetch_add(&f->notices, 1);
}

static void drop_conn(fconn_t *fc)
{
    close(fc->fd);
    rl_buf_free(&fc->in);
    memset(fc, 0, sizeof(*fc));
    fc->fd = -1;
}

/* Handles what one read brought. Returns 0, or an RL_E* code when the
 * connection is to be closed. */
static int handle(state_t *st, fconn_t *fc)
{
    fake_t *f = st->f;
    rl_buf_t out;
    int burst = 0, rc = 0;
    /* Frames of a read done after the notice went out. */
    int late = fc->noticed;

    rl_buf_init(&out, 1 << 24);
    for (;;) {
        rl_frame_t fr;
        rl_check_t c;
        rl_result_t r;
        uint8_t hbuf[RL_HANDLE_MAX + 8];

        if (rl_frame_take(&fc->in, 1 << 20, &fr) != RL_OK)
            break;
        if (rl_check_decode(fr.payload, fr.len, &c) != RL_OK) {
            rc = RL_EDECODE;
            break;
        }
        burst++;
        fc->seen++;
        atomic_fetch_add(&f->requests, 1);
        if (c.id == 0)
            atomic_fetch_add(&f->id0, 1);
        if (fc->ordinal < MAXCONN)
            atomic_fetch_add(&f->conn_requests[fc->ordinal], 1);
        if (late)
            atomic_fetch_add(&f->after_notice, 1);
        if (c.op != RL_OP_CHECK)
            xdecide(st, &c, &r, hbuf, sizeof(hbuf));
        else
            decide(st, &c, &r);
        switch (f->mode) {
        case FAKE_ANSWER:
        case FAKE_BYTEWISE:
        case FAKE_GOAWAY_STALL:
            put(&out, &r);
            break;
        case FAKE_GOAWAY:
            if (!st->goaway_done && atomic_load(&f->requests) == f->param) {
                /* The answers of this read, this one's included, go out
                 * after the notice, and only once the client has had time
                 * to act on it: its checks are in flight meanwhile. */
                st->goaway_done = 1;
                send_all(fc->fd, rl_buf_rptr(&out), rl_buf_len(&out), 0);
                rl_buf_reset(&out);
                send_notice(f, fc);
                nap_us(20000);
            }
            put(&out, &r);
            break;
        case FAKE_GOAWAY_DROP:
            if (!fc->silent)
                put(&out, &r);
            break;
        case FAKE_SILENT:
            break;
        case FAKE_CLOSE_AFTER:
            if (fc->seen >= f->param)
                rc = RL_ECLOSED;
            break;
        case FAKE_REVERSE:
            if (fc->nheld < MAXHELD)
                fc->held[fc->nheld++] = r;
            if (fc->nheld == f->param) {
                while (fc->nheld > 0)
                    put(&out, &fc->held[--fc->nheld]);
            }
            break;
        case FAKE_DELAY_FIRST:
            if (!fc->delayed) {
                /* The late answer goes out before anything else. */
                fc->delayed = 1;
                nap_us((long)f->param * 1000);
            }
            put(&out, &r);
            break;
        case FAKE_GARBAGE: {
            uint8_t bad[6] = {1, 0, 0, 0, 1, 0};
            rl_buf_append(&out, bad, sizeof(bad));
            break;
        }
        }
        if (rc != 0)
            break;
    }
    if (burst > atomic_load(&f->max_burst))
        atomic_store(&f->max_burst, burst);
    if (rc == 0 && rl_buf_len(&out) > 0)
        send_all(fc->fd, rl_buf_rptr(&out), rl_buf_len(&out),
                 f->mode == FAKE_BYTEWISE);
    rl_buf_free(&out);
    return rc;
}

static void *run(void *arg)
{
    state_t *st = calloc(1, sizeof(*st));
    fake_t *f = arg;
    int i;

    if (st == NULL)
        return NULL;
    st->f = f;
    for (i = 0; i < MAXCONN; i++)
        st->conns[i].fd = -1;
    while (!atomic_load(&f->stop)) {
        struct pollfd p[MAXCONN + 1];
        int n = 0, map[MAXCONN + 1];
        uint64_t now = rl_mono_ms();

        if (atomic_load(&f->goaway_now)) {
            for (i = 0; i < MAXCONN; i++)
                if (st->conns[i].fd >= 0 && !st->conns[i].noticed)
                    send_notice(f, &st->conns[i]);
            atomic_store(&f->goaway_now, 0);
        }
        p[n].fd = f->lfd;
        p[n].events = POLLIN;
        map[n++] = -1;
        for (i = 0; i < MAXCONN; i++) {
            fconn_t *fc = &st->conns[i];
            if (fc->fd >= 0 && fc->close_at && fc->close_at <= now)
                drop_conn(fc);
            if (fc->fd >= 0 && fc->stall_until && fc->stall_until <= now) {
                /* The stall is over: read at full speed from now on. */
                int big = 1 << 20;
                setsockopt(fc->fd, SOL_SOCKET, SO_RCVBUF, &big, sizeof(big));
                fc->stall_until = 0;
            }
            if (fc->fd >= 0 && !fc->close_at && fc->stall_until <= now) {
                p[n].fd = fc->fd;
                p[n].events = POLLIN;
                map[n++] = i;
            }
        }
        if (poll(p, (nfds_t)n, 5) <= 0)
            continue;
        if (p[0].revents & POLLIN) {
            int fd = accept(f->lfd, NULL, NULL);
            for (i = 0; fd >= 0 && i < MAXCONN; i++)
                if (st->conns[i].fd < 0) {
                    fconn_t *fc = &st->conns[i];
                    fc->fd = fd;
                    fc->ordinal = st->naccepted++;
                    rl_buf_init(&fc->in, 1 << 22);
                    atomic_fetch_add(&f->accepted, 1);
                    if ((f->mode == FAKE_GOAWAY_STALL ||
                         f->mode == FAKE_GOAWAY_DROP) &&
                        !st->goaway_done) {
                        st->goaway_done = 1;
                        send_notice(f, fc);
                        if (f->mode == FAKE_GOAWAY_STALL)
                            fc->stall_until = rl_mono_ms() + (uint64_t)f->param;
                        else
                            fc->silent = 1;
                    }
                    break;
                }
            if (fd >= 0 && i == MAXCONN)
                close(fd);
        }
        for (int k = 1; k < n; k++) {
            fconn_t *fc = &st->conns[map[k]];
            uint8_t *w;
            ssize_t got;

            if (!(p[k].revents & (POLLIN | POLLHUP | POLLERR)))
                continue;
            if (rl_buf_reserve(&fc->in, 65536, &w) != 0) {
                drop_conn(fc);
                continue;
            }
            got = recv(fc->fd, w, 65536, 0);
            if (got == 0 && fc->noticed) {
                /* The client left as told: were its requests whole? */
                atomic_fetch_add(&f->left, 1);
                if (rl_buf_len(&fc->in) > 0)
                    atomic_fetch_add(&f->partial, 1);
                if (f->mode == FAKE_GOAWAY_DROP && f->param > 0) {
                    fc->close_at = rl_mono_ms() + (uint64_t)f->param;
                    continue;
                }
            }
            if (got <= 0) {
                drop_conn(fc);
                continue;
            }
            rl_buf_commit(&fc->in, (size_t)got);
            atomic_fetch_add(&f->reads, 1);
            if (handle(st, fc) != 0)
                drop_conn(fc);
        }
    }
    for (i = 0; i < MAXCONN; i++)
        if (st->conns[i].fd >= 0)
            drop_conn(&st->conns[i]);
    free(st);
    return NULL;
}

int fake_start(fake_t *f, int port, fake_mode_t mode, int param)
{
    struct sockaddr_in sa;
    socklen_t len = sizeof(sa);
    int one = 1, attempt;

    memset(f, 0, sizeof(*f));
    atomic_store(&f->lease_ms, 600);
    pthread_mutex_init(&f->xlock, NULL);
    f->mode = mode;
    f->param = param;
    f->lfd = socket(AF_INET, SOCK_STREAM, 0);
    if (f->lfd < 0)
        return RL_EIO;
    setsockopt(f->lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (mode == FAKE_GOAWAY_STALL) {
        /* A small window (accepted sockets inherit it), so that a client
         * writing to a stalled connection soon has bytes it cannot send. */
        int small = 4096;
        setsockopt(f->lfd, SOL_SOCKET, SO_RCVBUF, &small, sizeof(small));
    }
    memset(&sa, 0, sizeof(sa));
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    sa.sin_port = htons((uint16_t)port);
    /* A restart on the same port may race the old socket's teardown. */
    for (attempt = 0; attempt < 200; attempt++) {
        if (bind(f->lfd, (struct sockaddr *)&sa, sizeof(sa)) == 0)
            break;
        nap_us(10000);
    }
    if (attempt == 200 || listen(f->lfd, 64) != 0 ||
        getsockname(f->lfd, (struct sockaddr *)&sa, &len) != 0) {
        close(f->lfd);
        return RL_EIO;
    }
    f->port = ntohs(sa.sin_port);
    if (pthread_create(&f->thread, NULL, run, f) != 0) {
        close(f->lfd);
        return RL_EIO;
    }
    return 0;
}

int fake_wait(atomic_int *counter, int want, int ms)
{
    uint64_t end = rl_mono_ms() + (uint64_t)ms;

    while (atomic_load(counter) < want) {
        if (rl_mono_ms() >= end)
            return 0;
        nap_us(1000);
    }
    return 1;
}

int fake_goaway(fake_t *f)
{
    uint64_t end = rl_mono_ms() + 2000;

    atomic_store(&f->goaway_now, 1);
    while (atomic_load(&f->goaway_now)) {
        if (rl_mono_ms() >= end)
            return RL_ETIMEDOUT;
        nap_us(1000);
    }
    return atomic_load(&f->notices);
}

void fake_stop(fake_t *f)
{
    atomic_store(&f->stop, 1);
    pthread_join(f->thread, NULL);
    close(f->lfd);
    pthread_mutex_destroy(&f->xlock);
}
