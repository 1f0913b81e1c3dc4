/* The blocking client: plain non-blocking sockets waited on with poll(), so
 * that every wait has a deadline. A batch is encoded into one buffer and
 * leaves in one send(); its answers are matched by id, which makes late
 * answers to earlier, timed-out calls harmless: their ids are below the
 * current batch's.
 *
 * GOAWAY: a server that stops sends a notice (id 0, ERROR, notice
 * NOTICE_GOAWAY; rl_result_is_goaway) and answers everything it still reads until the client
 * closes. A notice that comes while a call waits changes nothing for that
 * call (its answers still come); the connection is closed when the call
 * returns. One found on an idle connection, before sending, closes it at
 * once. Either way the next call connects again, without an error, starting
 * at the next address. */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "rl_error.h"
#include "rl_frame.h"
#include "rlc_int.h"

/* Marks a result whose answer is still awaited, inside one call only. */
#define PENDING RLC_EAGAIN

/* One call's requests and where their results go: plain checks into an
 * array of rlc_result_t, or requests of any op (x not NULL) into an array
 * of rlc_xresult_t, whose first member is the rlc_result_t. */
typedef struct batch_s {
    const rlc_xop_t *x;
    char *res;
    size_t stride;
    size_t n;
    uint64_t base;
} batch_t;

static rlc_result_t *at(const batch_t *b, size_t i)
{
    return (rlc_result_t *)(void *)(b->res + i * b->stride);
}

static int op_of(const batch_t *b, size_t i)
{
    return b->x != NULL ? b->x[i].op : RLC_OP_CHECK;
}

/* Fills result i for a request no server answered. */
static void fail_one(const batch_t *b, size_t i, uint64_t id, int status,
                     int fail_mode, uint32_t window_s, uint64_t now)
{
    if (b->x != NULL)
        rlc__xresult_fail((rlc_xresult_t *)(void *)at(b, i), op_of(b, i), id,
                          status, fail_mode, window_s, now);
    else
        rlc__result_fail(at(b, i), id, status, fail_mode, window_s, now);
}

struct rlc_client_s {
    rlc__conf_t cf;
    int fd;           /* -1 when not connected */
    SSL *ssl;         /* over fd, with TLS */
    size_t cur;       /* address in use, or where the next round starts */
    rl_buf_t in, out; /* reused across calls */
    uint64_t next_id;
    uint32_t backoff_ms; /* 0 after a successful connect */
    uint64_t retry_at;   /* no connect attempt before this (monotonic ms) */
    unsigned seed;
    int goaway;  /* the server of this connection said it is shutting down */
    int move_on; /* so the next connect starts at the next address */
    char why[RLC__WHY_MAX]; /* the last connect failure, in words */
};

/* Waits for events on fd until the absolute deadline. Returns 1 when
 * ready, 0 on timeout, or an RLC_E* code. */
static int wait_fd(int fd, short events, uint64_t deadline)
{
    struct pollfd p;

    for (;;) {
        uint64_t now = rl_mono_ms();
        int rc;

        if (now >= deadline)
            return 0;
        p.fd = fd;
        p.events = events;
        p.revents = 0;
        rc =
            poll(&p, 1, (int)(deadline - now > 60000 ? 60000 : deadline - now));
        if (rc > 0)
            return 1;
        if (rc < 0 && errno != EINTR)
            return rlc__errno(errno);
    }
}

/* The TLS handshake on a fresh connection, within the connect's
 * deadline. */
static int handshake(rlc_client_t *c, const rlc__addr_t *a, uint64_t deadline)
{
    int rc = rlc__tls_start(c->cf.tls, a, c->fd, &c->ssl);

    while (rc == RLC_OK) {
        int want = 0;
        rc = rlc__tls_handshake(c->ssl, &want, c->why, sizeof(c->why));
        if (rc != RLC_EAGAIN)
            break;
        rc = wait_fd(c->fd, want == RLC__WANT_WRITE ? POLLOUT : POLLIN,
                     deadline);
        if (rc == 1)
            rc = RLC_OK;
        else if (rc == 0)
            rc = RLC_ETIMEDOUT;
    }
    return rc;
}

/* Connects c->fd (and its TLS, if any) to a within timeout_ms. */
static int connect_one(rlc_client_t *c, const rlc__addr_t *a,
                       uint32_t timeout_ms)
{
    uint64_t deadline = rl_mono_ms() + timeout_ms;
    int rc = rlc__sock_connect(a, &c->fd);

    c->why[0] = '\0';
    if (rc == RLC_EAGAIN) {
        rc = wait_fd(c->fd, POLLOUT, deadline);
        if (rc == 1)
            rc = rlc__sock_finish(c->fd);
        else if (rc == 0)
            rc = RLC_ETIMEDOUT;
    }
    if (rc == RLC_OK && c->cf.tls != NULL)
        rc = handshake(c, a, deadline);
    if (rc != RLC_OK) {
        rlc__why_at(c->why, a->text, rc);
        rlc__tls_end(c->ssl);
        c->ssl = NULL;
        if (c->fd >= 0)
            close(c->fd);
        c->fd = -1;
    }
    return rc;
}

/* Tries every address once, starting at the current one. On failure the
 * next round is put off by the backoff. Returns 0 or the last error. */
static int connect_round(rlc_client_t *c)
{
    int rc = RLC_ECLOSED;
    size_t i;

    if (c->move_on) {
        c->move_on = 0;
        c->cur = (c->cur + 1) % c->cf.naddr;
    }
    for (i = 0; i < c->cf.naddr; i++) {
        size_t k = (c->cur + i) % c->cf.naddr;
        rc = connect_one(c, &c->cf.addrs[k], c->cf.o.connect_timeout_ms);
        if (rc == RLC_OK) {
            c->cur = k;
            c->backoff_ms = 0;
            c->retry_at = 0;
            return RLC_OK;
        }
    }
    c->backoff_ms = rlc__backoff(c->backoff_ms, &c->cf.o, &c->seed);
    c->retry_at = rl_mono_ms() + c->backoff_ms;
    return rc;
}

/* Forgets the connection. The next call reconnects at once: a connection
 * that worked and then closed most often means a restarted server. */
static void drop(rlc_client_t *c)
{
    rlc__tls_end(c->ssl);
    c->ssl = NULL;
    if (c->fd >= 0)
        close(c->fd);
    c->fd = -1;
    c->goaway = 0;
    rl_buf_reset(&c->in);
}

/* Closes a connection whose server said GOAWAY once nothing more is wanted
 * from it. The next call connects at once (the server kept its word: this
 * is no failure, so no backoff), starting at the next address: this one is
 * shutting down, and behind a load balancer the one address leads to
 * another server. */
static void leave_server(rlc_client_t *c)
{
    drop(c);
    c->move_on = 1;
}

/* A notice about the connection (id 0) other than GOAWAY, e.g. "this
 * port speaks TLS": kept as the reason the connection ends with. */
static void note(rlc_client_t *c, const rl_result_t *r)
{
    size_t n =
        r->error_len < sizeof(c->why) - 16 ? r->error_len : sizeof(c->why) - 16;

    memcpy(c->why, "server said: ", 13);
    memcpy(c->why + 13, r->error, n);
    c->why[13 + n] = '\0';
}

/* Goes through the whole frames an idle connection received: late answers
 * to timed-out calls, dropped here as they would be later (their ids are
 * below any call still to come), and possibly a GOAWAY. Stops at a broken
 * frame, leaving it for the next call to report. */
static void skim(rlc_client_t *c)
{
    rl_result_t r;

    while (rl_result_take(&c->in, c->cf.o.max_frame, &r) == RL_OK)
        if (rl_result_is_goaway(&r))
            c->goaway = 1;
        else if (r.id == 0)
            note(c, &r);
}

/* Makes sure a live connection is there. An idle connection whose server
 * has closed it, or said GOAWAY, is found out here, before anything is sent
 * on it: a non-blocking read sees the end of file or the notice (any other
 * bytes it finds are late answers, dropped by id). */
static int ensure_conn(rlc_client_t *c)
{
    if (c->fd >= 0) {
        uint8_t *w;
        long n;
        int want;

        if (rl_buf_reserve(&c->in, RLC__READ_CHUNK, &w) != RL_OK)
            rl_buf_reset(&c->in);
        else {
            n = rlc__io_recv(c->fd, c->ssl, w, RLC__READ_CHUNK, &want, c->why);
            if (n > 0) {
                rl_buf_commit(&c->in, (size_t)n);
                skim(c);
            } else if (n != RLC_EAGAIN)
                drop(c);
        }
        if (c->goaway)
            leave_server(c);
    }
    if (c->fd >= 0)
        return RLC_OK;
    if (rl_mono_ms() < c->retry_at)
        return RLC_ECLOSED;
    return connect_round(c);
}

static void fail_pending(rlc_client_t *c, const batch_t *b, int status)
{
    uint64_t now = rl_unix_ms();
    size_t i;

    for (i = 0; i < b->n; i++) {
        rlc_result_t *r = at(b, i);
        if (r->status == PENDING)
            fail_one(b, i, r->id, status, c->cf.o.fail_mode, r->window_s, now);
    }
}

static int send_all(rlc_client_t *c, uint64_t deadline)
{
    while (rl_buf_len(&c->out) > 0) {
        int want;
        long n = rlc__io_send(c->fd, c->ssl, rl_buf_rptr(&c->out),
                              rl_buf_len(&c->out), &want, c->why);
        if (n > 0) {
            rl_buf_consume(&c->out, (size_t)n);
            continue;
        }
        if (n == RLC_EAGAIN) {
            int rc = wait_fd(c->fd, want == RLC__WANT_READ ? POLLIN : POLLOUT,
                             deadline);
            if (rc == 1)
                continue;
            return rc == 0 ? RLC_ETIMEDOUT : rc;
        }
        return n == 0 ? RLC_ECLOSED : (int)n;
    }
    return RLC_OK;
}

/* Decodes every whole frame in the input buffer and files the answers that
 * belong to this batch; a GOAWAY notice sets c->goaway. Returns 0 or a
 * protocol error. */
static int take_answers(rlc_client_t *c, const batch_t *b, size_t *pending)
{
    uint64_t base = b->base;
    size_t n = b->n;

    uint64_t now = 0;

    for (;;) {
        rl_result_t r;
        int rc = rl_result_take(&c->in, c->cf.o.max_frame, &r);
        if (rc == RL_EAGAIN)
            return RLC_OK;
        if (rc != RL_OK)
            return rc;
        if (rl_result_is_goaway(&r))
            c->goaway = 1;
        else if (r.id == 0)
            note(c, &r);
        else if (r.id >= base && r.id - base < n &&
                 at(b, r.id - base)->status == PENDING) {
            size_t i = r.id - base;
            rlc_result_t *res = at(b, i);
            if (now == 0)
                now = rl_unix_ms();
            if (b->x != NULL)
                rlc__xresult_from((rlc_xresult_t *)(void *)res, op_of(b, i), &r,
                                  res->window_s, now);
            else
                rlc__result_from(res, &r, res->window_s, now);
            (*pending)--;
        }
    }
}

static int roundtrip(rlc_client_t *c, const batch_t *b, size_t pending)
{
    uint64_t deadline;
    int rc;

    rc = ensure_conn(c);
    if (rc != RLC_OK)
        return rc;
    deadline = rl_mono_ms() + c->cf.o.request_timeout_ms;
    rc = send_all(c, deadline);
    if (rc != RLC_OK) {
        /* Part of a frame may be out: the stream is no longer framed. */
        drop(c);
        return rc;
    }
    short wait_for = POLLIN;
    for (;;) {
        uint8_t *w;
        long got;
        int want;

        rc = take_answers(c, b, &pending);
        if (rc != RLC_OK) {
            drop(c);
            return rc;
        }
        /* After a GOAWAY the answers still come; the connection is closed
         * once the call has them (or has given up on them). */
        if (pending == 0) {
            if (c->goaway)
                leave_server(c);
            return RLC_OK;
        }
        /* TLS may hold bytes already read from the socket. */
        if (!rlc__io_pending(c->ssl)) {
            rc = wait_fd(c->fd, wait_for, deadline);
            if (rc == 0) {
                if (c->goaway)
                    leave_server(c);
                return RLC_ETIMEDOUT;
            }
            if (rc < 0) {
                drop(c);
                return rc;
            }
        }
        rc = rl_buf_reserve(&c->in, RLC__READ_CHUNK, &w);
        if (rc != RL_OK) {
            drop(c);
            return rc;
        }
        got = rlc__io_recv(c->fd, c->ssl, w, RLC__READ_CHUNK, &want, c->why);
        wait_for = POLLIN;
        if (got > 0)
            rl_buf_commit(&c->in, (size_t)got);
        else if (got == RLC_EAGAIN)
            wait_for = want == RLC__WANT_WRITE ? POLLOUT : POLLIN;
        else {
            drop(c);
            return got == 0 ? RLC_ECLOSED : (int)got;
        }
    }
}

/* The body of every blocking call: reqs (plain checks) or b->x, n of
 * them, answered into b->res. */
static int run_batch(rlc_client_t *c, const rlc_check_t *reqs, batch_t *b)
{
    size_t i, pending = 0;
    int rc;

    /* Every request gets an id, sent or not, so an answer finds its slot by
     * subtraction. */
    b->base = c->next_id;
    c->next_id += b->n;
    rl_buf_reset(&c->out);
    for (i = 0; i < b->n; i++) {
        uint32_t window_s = 0;
        rlc_result_t *res = at(b, i);
        if (b->x != NULL)
            rc = rlc__encode_x(&c->out, &b->x[i], b->base + i, &window_s);
        else
            rc = rlc__encode(&c->out, &reqs[i], b->base + i, &window_s);
        if (rc != RLC_OK) {
            fail_one(b, i, b->base + i, rc, c->cf.o.fail_mode, 0, rl_unix_ms());
            continue;
        }
        res->status = PENDING;
        res->id = b->base + i;
        res->window_s = window_s;
        pending++;
    }

    if (pending > 0) {
        rc = roundtrip(c, b, pending);
        rl_buf_reset(&c->out);
        if (rc != RLC_OK)
            fail_pending(c, b, rc);
    }
    for (i = 0; i < b->n; i++)
        if (at(b, i)->status != RLC_OK)
            return at(b, i)->status;
    return RLC_OK;
}

int rlc_check_batch(rlc_client_t *c, const rlc_check_t *reqs, size_t n,
                    rlc_result_t *res)
{
    batch_t b = {NULL, (char *)res, sizeof(*res), n, 0};
    size_t i;

    if (n == 0)
        return RLC_OK;
    if (res == NULL)
        return RLC_EINVAL;
    if (c == NULL || reqs == NULL) {
        for (i = 0; i < n; i++)
            rlc__result_fail(&res[i], 0, RLC_EINVAL, RLC_FAIL_CLOSED, 0,
                             rl_unix_ms());
        return RLC_EINVAL;
    }
    return run_batch(c, reqs, &b);
}

int rlc_xop_batch(rlc_client_t *c, const rlc_xop_t *reqs, size_t n,
                  rlc_xresult_t *res)
{
    batch_t b = {reqs, (char *)res, sizeof(*res), n, 0};
    size_t i;

    if (n == 0)
        return RLC_OK;
    if (res == NULL)
        return RLC_EINVAL;
    if (c == NULL || reqs == NULL) {
        for (i = 0; i < n; i++)
            rlc__xresult_fail(&res[i], reqs != NULL ? reqs[i].op : 0, 0,
                              RLC_EINVAL, RLC_FAIL_CLOSED, 0, rl_unix_ms());
        return RLC_EINVAL;
    }
    return run_batch(c, NULL, &b);
}

int rlc_xop(rlc_client_t *c, const rlc_xop_t *req, rlc_xresult_t *res)
{
    if (req == NULL) {
        if (res != NULL)
            rlc__xresult_fail(res, 0, 0, RLC_EINVAL, RLC_FAIL_CLOSED, 0,
                              rl_unix_ms());
        return RLC_EINVAL;
    }
    return rlc_xop_batch(c, req, 1, res);
}

/* The shorthands build the request: a check for the ops that decide, a
 * handle for the others. */
static int check_op(rlc_client_t *c, int op, const rlc_check_t *req,
                    rlc_xresult_t *res)
{
    rlc_xop_t x;

    memset(&x, 0, sizeof(x));
    x.op = op;
    if (req == NULL) {
        if (res != NULL)
            rlc__xresult_fail(res, op, 0, RLC_EINVAL, RLC_FAIL_CLOSED, 0,
                              rl_unix_ms());
        return RLC_EINVAL;
    }
    x.check = *req;
    return rlc_xop(c, &x, res);
}

static int handle_op(rlc_client_t *c, int op, const void *handle,
                     size_t handle_len, uint64_t actual, rlc_xresult_t *res)
{
    rlc_xop_t x;

    memset(&x, 0, sizeof(x));
    x.op = op;
    x.handle = handle;
    x.handle_len = handle_len;
    x.actual = actual;
    return rlc_xop(c, &x, res);
}

int rlc_reserve(rlc_client_t *c, const rlc_check_t *req, rlc_xresult_t *res)
{
    return check_op(c, RLC_OP_RESERVE, req, res);
}

int rlc_acquire(rlc_client_t *c, const rlc_check_t *req, rlc_xresult_t *res)
{
    return check_op(c, RLC_OP_ACQUIRE, req, res);
}

int rlc_settle(rlc_client_t *c, const void *handle, size_t handle_len,
               uint64_t actual, rlc_xresult_t *res)
{
    return handle_op(c, RLC_OP_SETTLE, handle, handle_len, actual, res);
}

int rlc_release(rlc_client_t *c, const void *handle, size_t handle_len,
                rlc_xresult_t *res)
{
    return handle_op(c, RLC_OP_RELEASE, handle, handle_len, 0, res);
}

int rlc_renew(rlc_client_t *c, const void *handle, size_t handle_len,
              rlc_xresult_t *res)
{
    return handle_op(c, RLC_OP_RENEW, handle, handle_len, 0, res);
}

int rlc_check(rlc_client_t *c, const rlc_check_t *req, rlc_result_t *res)
{
    if (req == NULL) {
        if (res != NULL)
            rlc__result_fail(res, 0, RLC_EINVAL, RLC_FAIL_CLOSED, 0,
                             rl_unix_ms());
        return RLC_EINVAL;
    }
    return rlc_check_batch(c, req, 1, res);
}

int rlc_connect_why(rlc_client_t **out, const rlc_options_t *opts, char *why,
                    size_t whylen)
{
    rlc_client_t *c;
    int rc;

    if (why != NULL && whylen > 0)
        why[0] = '\0';
    if (out == NULL)
        return RLC_EINVAL;
    *out = NULL;
    c = calloc(1, sizeof(*c));
    if (c == NULL)
        return RLC_ENOMEM;
    rc = rlc__conf_init(&c->cf, opts, c->why, sizeof(c->why));
    if (rc != RLC_OK) {
        if (why != NULL && whylen > 0)
            snprintf(why, whylen, "%s", c->why);
        free(c);
        return rc;
    }
    c->fd = -1;
    c->next_id = 1; /* id 0 is what the server uses for unmatched errors */
    c->seed = (unsigned)rl_mono_ms() ^ (unsigned)(uintptr_t)c;
    rl_buf_init(&c->in, c->cf.o.max_frame + RL_FRAME_HEADER + RLC__READ_CHUNK);
    rl_buf_init(&c->out, SIZE_MAX / 2);
    rc = connect_round(c);
    if (rc != RLC_OK) {
        if (why != NULL && whylen > 0)
            snprintf(why, whylen, "%s", c->why);
        rlc_free(c);
        return rc;
    }
    *out = c;
    return RLC_OK;
}

int rlc_connect(rlc_client_t **out, const rlc_options_t *opts)
{
    return rlc_connect_why(out, opts, NULL, 0);
}

const char *rlc_last_error(const rlc_client_t *c)
{
    return c == NULL ? "" : c->why;
}

const char *rlc_server(const rlc_client_t *c)
{
    return c == NULL ? "" : c->cf.addrs[c->cur].text;
}

void rlc_free(rlc_client_t *c)
{
    if (c == NULL)
        return;
    drop(c);
    rl_buf_free(&c->in);
    rl_buf_free(&c->out);
    rlc__conf_free(&c->cf);
    free(c);
}
