/* rl-server against connections that send nothing useful, end to end: a
 * real process on a free loopback port, spoken to over TCP, its counters
 * read from /metrics. Idle connections and frames that never finish are
 * closed on their deadlines while active connections stay; the cap on input
 * memory closes the largest holders first; a request with id 0 gets the
 * reserved-id notice. The last test measures the server's peak RSS under
 * many connections each holding an almost whole maximum-size frame, at the
 * defaults, and prints it (RLT_SERVER_BIN runs it against another build;
 * RLT_HOSTILE_CONNS sets the number of connections). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "rl_buf.h"
#include "rl_error.h"
#include "rl_frame.h"
#include "rl_msg.h"
#include "rlt.h"
#include "rlt_fx.h"

#ifndef RL_SERVER_BIN
#error "RL_SERVER_BIN must name the rl-server binary"
#endif

/* ---- a tiny blocking client ---- */

static int dial(int port)
{
    int fd = rlt_dial(port);

    assert_true(fd >= 0);
    return fd;
}

typedef struct {
    int fd;
    rl_buf_t in;
} cli_t;

typedef struct {
    uint64_t id;
    int code;
    char err[200];
} res_t;

static void cli_open(cli_t *c, int port)
{
    c->fd = dial(port);
    rl_buf_init(&c->in, 1 << 20);
}

static void cli_close(cli_t *c)
{
    if (c->fd >= 0)
        close(c->fd);
    c->fd = -1;
    rl_buf_free(&c->in);
}

/* Waits up to timeout_ms for the next response. Returns 1 with *r, 0 on
 * timeout, -1 when the server closed the connection first. */
static int recv_one(cli_t *c, res_t *r, int timeout_ms)
{
    uint64_t deadline = rlt_mono_ms() + (uint64_t)timeout_ms;

    for (;;) {
        rl_frame_t f;
        rl_result_t x;
        uint8_t *w;
        uint64_t now;
        int rc = rl_frame_decode(rl_buf_rptr(&c->in), rl_buf_len(&c->in),
                                 1 << 16, &f);
        if (rc == RL_OK) {
            assert_int_equal(rl_result_decode(f.payload, f.len, &x), RL_OK);
            r->id = x.id;
            r->code = x.code;
            snprintf(r->err, sizeof(r->err), "%.*s", (int)x.error_len,
                     x.error ? x.error : "");
            rl_buf_consume(&c->in, f.size);
            return 1;
        }
        assert_int_equal(rc, RL_EAGAIN);
        now = rlt_mono_ms();
        if (now >= deadline)
            return 0;
        struct pollfd p = {c->fd, POLLIN, 0};
        if (poll(&p, 1, (int)(deadline - now)) <= 0)
            return 0;
        assert_int_equal(rl_buf_reserve(&c->in, 4096, &w), RL_OK);
        ssize_t k = recv(c->fd, w, 4096, 0);
        if (k <= 0)
            return -1;
        rl_buf_commit(&c->in, (size_t)k);
    }
}

/* Waits up to timeout_ms for the server to close the connection; the
 * last notice before the close, if any, goes to *last. Returns 1 once
 * closed. */
static int await_close(cli_t *c, res_t *last, int timeout_ms)
{
    uint64_t deadline = rlt_mono_ms() + (uint64_t)timeout_ms;
    int rc;

    last->err[0] = '\0';
    while (rlt_mono_ms() < deadline) {
        rc = recv_one(c, last, (int)(deadline - rlt_mono_ms()));
        if (rc < 0)
            return 1;
        if (rc == 0)
            return 0;
    }
    return 0;
}

static void send_check(cli_t *c, uint64_t id, const char *key)
{
    rl_check_t q;
    rl_buf_t b;

    memset(&q, 0, sizeof(q));
    q.id = id;
    q.key = key;
    q.key_len = strlen(key);
    q.limit = 1000;
    q.window_s = 60;
    q.cost = 1;
    rl_buf_init(&b, 4096);
    assert_int_equal(rl_check_put(&b, &q), RL_OK);
    assert_int_equal(rlt_send_all(c->fd, rl_buf_rptr(&b), rl_buf_len(&b)),
                     RL_OK);
    rl_buf_free(&b);
}

/* One request, one answer, within 5 s. */
static void ask_ok(cli_t *c, uint64_t id, const char *key)
{
    res_t r;

    send_check(c, id, key);
    assert_int_equal(recv_one(c, &r, 5000), 1);
    assert_int_equal(r.id, id);
    assert_int_equal(r.code, RL_CODE_OK);
}

/* Sends the first `n` bytes of a frame declaring `len` payload bytes (a
 * payload of 0xff bytes, which never decodes as a CheckRequest). */
static void send_partial(int fd, uint32_t len, size_t n)
{
    uint8_t *p = malloc(RL_FRAME_HEADER + (size_t)len);

    assert_non_null(p);
    rl_frame_header(p, len);
    memset(p + RL_FRAME_HEADER, 0xff, len);
    assert_true(n <= RL_FRAME_HEADER + (size_t)len);
    assert_int_equal(rlt_send_all(fd, p, n), RL_OK);
    free(p);
}

/* ---- /metrics ---- */

/* The value of the sample line starting with `name ` (labels included in
 * name), or UINT64_MAX if the page or the line is missing. */
static uint64_t metric(const rlt_fx_t *f, const char *name)
{
    long long v = rlt_metric(f->srv[0].mport, name);

    return v < 0 ? UINT64_MAX : (uint64_t)v;
}

/* Waits up to timeout_ms for metric(name) to reach at least want. */
static uint64_t await_metric(const rlt_fx_t *f, const char *name, uint64_t want,
                             int timeout_ms)
{
    uint64_t deadline = rlt_mono_ms() + (uint64_t)timeout_ms, v;

    for (;;) {
        v = metric(f, name);
        if ((v != UINT64_MAX && v >= want) || rlt_mono_ms() >= deadline)
            return v;
        rlt_nap_ms(20);
    }
}

#define CLOSED(reason) "rl_connections_closed_total{reason=\"" reason "\"}"

/* ---- tests ---- */

/* --idle-timeout: a connection that sends nothing is closed, with a
 * notice saying why; one that keeps sending requests stays open, and so
 * does one whose request is in flight (Redis paused) for longer than the
 * timeout. */
static void test_idle(void **state)
{
    rlt_fx_t *f = *state;
    cli_t idle, active, waiting;
    res_t r;
    uint64_t t0, id = 1;
    int closed = 0;

    rlt_fx_redis(f);
    rlt_fx_start(f, 0, "--idle-timeout", "1", "--redis", f->raddr,
                 "--redis-timeout-ms", "10000", NULL);
    cli_open(&active, f->srv[0].port);
    cli_open(&waiting, f->srv[0].port);
    /* the store is up once a probe is answered without an error */
    t0 = rlt_mono_ms();
    for (;;) {
        send_check(&active, id, "probe");
        assert_int_equal(recv_one(&active, &r, 5000), 1);
        assert_int_equal(r.id, id++);
        if (r.err[0] == '\0')
            break;
        assert_true(rlt_mono_ms() - t0 < 10000);
    }
    ask_ok(&waiting, 400, "waiting");

    /* active asks every 200 ms; idle says nothing; up to 4 s */
    cli_open(&idle, f->srv[0].port);
    t0 = rlt_mono_ms();
    while (rlt_mono_ms() - t0 < 4000 && !closed) {
        struct pollfd p = {idle.fd, POLLIN, 0};
        if (poll(&p, 1, 200) > 0) {
            closed = await_close(&idle, &r, 1000);
            break;
        }
        ask_ok(&active, id++, "active");
        ask_ok(&waiting, 400 + id, "waiting");
    }
    assert_true(closed);
    assert_string_equal(r.err, "connection idle longer than --idle-timeout");
    /* closed after the timeout, not before */
    assert_true(rlt_mono_ms() - t0 >= 900);
    ask_ok(&active, id++, "active");
    assert_int_equal(metric(f, CLOSED("idle")), 1);

    /* waiting: a request in flight (Redis paused) for twice the timeout;
     * the connection stays open and gets its answer */
    rlt_redis_pause(&f->redis, 1);
    send_check(&waiting, 500, "waiting");
    assert_int_equal(recv_one(&waiting, &r, 2000), 0); /* nor closed */
    rlt_redis_pause(&f->redis, 0);
    assert_int_equal(recv_one(&waiting, &r, 10000), 1);
    assert_int_equal(r.id, 500);
    assert_int_equal(r.code, RL_CODE_OK);
    /* while it waited, active was quiet for 2 s: closed as idle */
    assert_true(await_close(&active, &r, 1000));
    assert_int_equal(metric(f, CLOSED("idle")), 2);
    cli_close(&idle);
    cli_close(&active);
    cli_close(&waiting);
}

/* --frame-timeout-ms: a frame trickled one byte per 50 ms is closed by its
 * deadline, which more bytes do not extend; a frame sent in two halves
 * within the deadline is read, and the connection that sent it, and one
 * sending whole requests all along, stay open. */
static void test_frame_timeout(void **state)
{
    rlt_fx_t *f = *state;
    cli_t trickle, halves, steady;
    uint8_t frame[RL_FRAME_HEADER + 100];
    res_t r;
    uint64_t t0, id = 1;
    size_t sent = 0;
    int closed = 0;

    rlt_fx_start(f, 0, "--frame-timeout-ms", "500", "--idle-timeout", "0",
                 NULL);
    cli_open(&trickle, f->srv[0].port);
    cli_open(&halves, f->srv[0].port);
    cli_open(&steady, f->srv[0].port);
    rl_frame_header(frame, 100);
    memset(frame + RL_FRAME_HEADER, 0xff, 100);

    /* 105 bytes at one per 50 ms would take over 5 s */
    t0 = rlt_mono_ms();
    while (sent < sizeof(frame) && rlt_mono_ms() - t0 < 5000) {
        struct pollfd p = {trickle.fd, POLLIN, 0};
        if (poll(&p, 1, 50) > 0) {
            closed = await_close(&trickle, &r, 1000);
            break;
        }
        if (send(trickle.fd, frame + sent, 1, MSG_NOSIGNAL) != 1)
            break;
        sent++;
        if (sent % 4 == 0)
            ask_ok(&steady, id++, "steady");
    }
    if (!closed)
        closed = await_close(&trickle, &r, 1000);
    assert_true(closed);
    assert_true(sent < sizeof(frame));
    assert_string_equal(r.err, "frame not completed within --frame-timeout-ms");
    assert_int_equal(metric(f, CLOSED("frame_timeout")), 1);

    /* half a frame, 100 ms, the other half: well within 500 ms */
    send_partial(halves.fd, 100, 50);
    rlt_nap_ms(100);
    assert_int_equal(rlt_send_all(halves.fd, frame + 50, sizeof(frame) - 50),
                     RL_OK);
    assert_int_equal(recv_one(&halves, &r, 5000), 1);
    assert_int_equal(r.id, 0);
    assert_string_equal(r.err, "payload is not a valid CheckRequest");
    ask_ok(&halves, 7, "halves");
    ask_ok(&steady, id++, "steady");
    assert_int_equal(metric(f, CLOSED("frame_timeout")), 1);
    cli_close(&trickle);
    cli_close(&halves);
    cli_close(&steady);
}

/* --max-partial-bytes: four connections hold partial frames of 100,005,
 * 40,005, 2,005 and 40,005 bytes (buffers of 128, 64, 4 and 64 KiB); the
 * fourth takes the total past a 256 KiB cap and the largest holder, the
 * first, is closed; the others complete their frames and are answered. */
static void test_partial_memory(void **state)
{
    rlt_fx_t *f = *state;
    static const uint32_t len[4] = {120000, 50000, 3000, 50000};
    static const size_t sent[4] = {100005, 40005, 2005, 40005};
    static const uint64_t held[4] = {131072, 196608, 200704, 0};
    uint8_t *rest;
    cli_t c[4];
    res_t r;
    int i;

    rlt_fx_start(f, 0, "--max-partial-bytes", "262144", "--max-frame", "200000",
                 NULL);
    for (i = 0; i < 4; i++) {
        cli_open(&c[i], f->srv[0].port);
        send_partial(c[i].fd, len[i], sent[i]);
        if (held[i] > 0)
            assert_int_equal(
                await_metric(f, "rl_connections_input_bytes", held[i], 5000),
                held[i]);
    }
    assert_true(await_close(&c[0], &r, 5000));
    assert_string_equal(r.err,
                        "server input memory full (--max-partial-bytes)");
    assert_int_equal(metric(f, CLOSED("partial_memory")), 1);
    /* 196,608 = three quarters of the cap: B, C and D are what is left */
    assert_int_equal(metric(f, "rl_connections_input_bytes"), 135168);

    rest = malloc(RL_FRAME_HEADER + 120000);
    assert_non_null(rest);
    memset(rest, 0xff, RL_FRAME_HEADER + 120000);
    for (i = 1; i < 4; i++) {
        assert_int_equal(
            rlt_send_all(c[i].fd, rest, RL_FRAME_HEADER + len[i] - sent[i]),
            RL_OK);
        assert_int_equal(recv_one(&c[i], &r, 5000), 1);
        assert_int_equal(r.id, 0);
        assert_string_equal(r.err, "payload is not a valid CheckRequest");
        ask_ok(&c[i], (uint64_t)i, "holder");
    }
    free(rest);
    /* drained buffers are given back */
    assert_int_equal(metric(f, "rl_connections_input_bytes"), 0);
    assert_int_equal(metric(f, CLOSED("partial_memory")), 1);
    for (i = 0; i < 4; i++)
        cli_close(&c[i]);
}

/* A request with id 0: its answer could not be told from a notice, so it
 * gets the reserved-id notice, is counted as rejected (not as a decision),
 * and the connection stays open. */
static void test_id0(void **state)
{
    rlt_fx_t *f = *state;
    cli_t c;
    res_t r;

    rlt_fx_start(f, 0, NULL);
    cli_open(&c, f->srv[0].port);
    send_check(&c, 0, "zero");
    assert_int_equal(recv_one(&c, &r, 5000), 1);
    assert_int_equal(r.id, 0);
    assert_int_equal(r.code, RL_CODE_ERROR);
    assert_string_equal(r.err, "request id 0 is reserved for server notices");
    ask_ok(&c, 1, "one");
    assert_int_equal(metric(f, "rl_frames_rejected_total{reason=\"id0\"}"), 1);
    assert_int_equal(metric(f, "rl_decisions_total{code=\"error\"}"), 0);
    assert_int_equal(metric(f, "rl_decisions_total{code=\"ok\"}"), 1);
    cli_close(&c);
}

/* kB of a "Vm...:" line of /proc/PID/status, or 0. */
static uint64_t proc_kb(pid_t pid, const char *field)
{
    char path[64], line[256];
    uint64_t v = 0;
    FILE *f;

    snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
    if ((f = fopen(path, "r")) == NULL)
        return 0;
    while (fgets(line, sizeof(line), f) != NULL)
        if (strncmp(line, field, strlen(field)) == 0)
            v = strtoull(line + strlen(field), NULL, 10);
    fclose(f);
    return v;
}

/* Many connections, each sending 64,000 bytes of a frame that declares
 * 64,000 payload bytes (so 5 are never sent), at the default flags. Prints
 * the server's RSS and its peak; asserts the peak under 100 MB when the
 * server is not built with sanitizers (their shadow memory and quarantine
 * would be measured too). */
static void test_hostile_rss(void **state)
{
    rlt_fx_t *f = *state;

#ifdef RLT_SANITIZED
    int n = 2000;
#else
    int n = 10000;
#endif
    struct rlimit rl;
    struct timeval tv = {10, 0};
    uint64_t before, rss, prev = 0, deadline;
    int *fds, i, open_n = 0;

    if (getenv("RLT_HOSTILE_CONNS") != NULL)
        n = atoi(getenv("RLT_HOSTILE_CONNS"));
    /* the server inherits the raised limit */
    assert_int_equal(getrlimit(RLIMIT_NOFILE, &rl), 0);
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
    if ((rlim_t)n + 64 > rl.rlim_cur)
        n = (int)rl.rlim_cur - 64;
    assert_true(n > 0);
    fds = calloc((size_t)n, sizeof(*fds));
    assert_non_null(fds);

    rlt_fx_start(f, 0, NULL);
    rlt_nap_ms(200);
    before = proc_kb(f->srv[0].pid, "VmRSS:");
    for (i = 0; i < n; i++) {
        fds[i] = dial(f->srv[0].port);
        setsockopt(fds[i], SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
        /* a server that closed the connection may reset it: fine */
        uint8_t *p = malloc(64000);
        assert_non_null(p);
        rl_frame_header(p, 64000);
        memset(p + RL_FRAME_HEADER, 0xff, 64000 - RL_FRAME_HEADER);
        size_t off = 0;
        while (off < 64000) {
            ssize_t k = send(fds[i], p + off, 64000 - off, MSG_NOSIGNAL);
            if (k <= 0)
                break;
            off += (size_t)k;
        }
        free(p);
    }
    /* every connection accepted, then RSS steady for 500 ms */
    /* (the start's port probe was accepted too) */
    assert_true(await_metric(f, "rl_connections_accepted_total", (uint64_t)n,
                             30000) >= (uint64_t)n);
    deadline = rlt_mono_ms() + 30000;
    for (;;) {
        rlt_nap_ms(500);
        rss = proc_kb(f->srv[0].pid, "VmRSS:");
        if (rss == prev || rlt_mono_ms() >= deadline)
            break;
        prev = rss;
    }
    for (i = 0; i < n; i++) {
        char b[256];
        ssize_t k;
        while ((k = recv(fds[i], b, sizeof(b), MSG_DONTWAIT)) > 0)
            ; /* a notice before the close */
        if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            open_n++; /* not closed by the server */
    }
    uint64_t peak = proc_kb(f->srv[0].pid, "VmHWM:");
    print_message("hostile connections: %d x 64,000-byte partial frames: "
                  "server RSS %.1f MB before, %.1f MB after, peak %.1f MB; "
                  "%d left open; input bytes held %llu\n",
                  n, before / 1024.0, rss / 1024.0, peak / 1024.0, open_n,
                  (unsigned long long)metric(f, "rl_connections_input_bytes"));
    if (getenv("RLT_SERVER_BIN") == NULL)
        assert_int_equal(metric(f, CLOSED("partial_memory")),
                         (uint64_t)(n - open_n));
#ifndef RLT_SANITIZED
    if (getenv("RLT_SERVER_BIN") == NULL)
        assert_true(peak < 100 * 1024);
#endif
    for (i = 0; i < n; i++)
        close(fds[i]);
    free(fds);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        RLT_FX_TEST(test_idle),           RLT_FX_TEST(test_frame_timeout),
        RLT_FX_TEST(test_partial_memory), RLT_FX_TEST(test_id0),
        RLT_FX_TEST(test_hostile_rss),
    };

    /* RLT_SERVER_BIN: the hostile RSS measured on another build. */
    const char *bin = getenv("RLT_SERVER_BIN");

    signal(SIGPIPE, SIG_IGN);
    rlt_fx_use(&(rlt_fx_conf_t){
        .bin = bin ? bin : RL_SERVER_BIN, .log_level = "error", .metrics = 1});
    return cmocka_run_group_tests(tests, NULL, NULL);
}
