/* Fuzz target: the --metrics listener past the request head: admin.c's
 * routes (/metrics, /healthz, 404, 405) over http_server.c's connection
 * handling (keep-alive, pipelining one request at a time, Connection:
 * close, HEAD, the 400, 414 and 431 it answers itself, the TLS-on-a-
 * plaintext-port alert), on a real loop. The head parser itself is
 * fuzz_http's.
 *
 * The input's first byte chooses the server's answers (healthy or not;
 * the page renders, fails, or is large) and how the rest is written (at
 * once, or in up to 32 pieces of 1, 7 or 100 bytes, the loop stepped
 * between them, then the rest); the rest is what one client sends on one
 * connection. The target's socket has TCP_NODELAY, so each piece leaves
 * at once (not when the server's delayed ACK comes).
 *
 * How the bytes get there: rls_admin_start on 127.0.0.1 port 0 once, and
 * each input is one loopback TCP connection to it. The target closes
 * with a reset (SO_LINGER 0), which leaves no TIME_WAIT on its side; the
 * server closes first after a Connection: close or a refused head, and
 * its TIME_WAIT holds that connection's addresses for a minute. So each
 * connection comes from another source address of 127.0.0.0/8 (the
 * input's sequence number spread over 127.1.0.1 to 127.254.255.254):
 * no two connections within minutes share addresses, and the ports do
 * not run out however many inputs run (issue 41: an hour's run stopped
 * at 44 minutes on this connect).
 *
 * Beyond "does not crash": the bytes that come back are whole responses,
 * each "HTTP/1.1 NNN", a Content-Length and that many bytes of body
 * (none for HEAD, but for a 405); the target parses the input as the
 * server does (rls_http_parse, one head after the other, up to the first
 * that cannot be served, closes, or is not kept alive) and checks each
 * response against its request: GET or HEAD /metrics is 200 with the page
 * (500 and Connection: close when it fails), /healthz 200 or 503 with the
 * health's reason, another method on them 405 with Allow, a bad head 400,
 * 414 or 431 and Connection: close (other paths: any status, the routes of
 * other front ends may grow); every request whose head ended is answered,
 * none more; once reset, the connection is gone within a bounded number
 * of loop steps; at exit nothing leaks (ASan/LSan).
 *
 * Built two ways (tests/fuzz/CMakeLists.txt, tests/fuzz/run.sh): with
 * clang's libFuzzer, and with RL_FUZZ_REPLAY as a plain program that runs
 * the seed corpus (corpus/admin) and deterministic mutations of it in
 * every build. */
#define _GNU_SOURCE /* memmem */
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <uv.h>

#include "base/log.h"
#include "admin.h"
#include "net/http.h"
#include "net/tls.h"
#include "rl_buf.h"
#include "rl_error.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond)                                                            \
    do {                                                                       \
        if (!(cond)) {                                                         \
            int e_ = errno; /* the last system call's, if it was one */    \
            fprintf(stderr, "fuzz_admin: %s:%d: %s (errno %d: %s)\n",        \
                    __FILE__, __LINE__, #cond, e_, strerror(e_));              \
            abort();                                                           \
        }                                                                      \
    } while (0)

/* Requests predicted per input, at most (each head is at least 16 bytes:
 * "GET / HTTP/1.1\n\n"). */
#define PRED_MAX 1024
/* Loop steps without anything read or written before the target takes
 * the server to be done. */
#define QUIET_STEPS 4
/* Pieces an input is written in, at most (then the rest at once). */
#define PIECES_MAX 32
/* Steps, at most, for the server to see the reset and close. */
#define CLOSE_STEPS 1000

static struct {
    int up;
    uv_loop_t loop;
    rls_admin_t admin;
    int port;
    /* What the server answers for this input. */
    int healthy;
    int page_fails;
    size_t page_extra;
    rl_buf_t page; /* the last page rendered */
    rl_buf_t in;   /* what came back */
} S;

static int page(void *arg, rl_buf_t *out)
{
    const rls_frontend_t *fe = rls_admin_frontend(&S.admin);
    size_t i;
    int rc;

    (void)arg;
    if (S.page_fails)
        return RL_ENOMEM;
    if ((rc = rl_buf_printf(out, "# the page\n")) != RL_OK ||
        (rc = fe->ops->metrics(fe, out)) != RL_OK)
        return rc;
    for (i = 0; i < S.page_extra && rc == RL_OK; i += 64)
        rc = rl_buf_printf(out, "filler_%08zu 1 %044d\n", i, 0);
    rl_buf_reset(&S.page);
    CHECK(rl_buf_append(&S.page, rl_buf_rptr(out), rl_buf_len(out)) == RL_OK);
    return rc;
}

static int health(void *arg, const char **why)
{
    (void)arg;
    *why = S.healthy ? "ok" : "store down";
    return S.healthy;
}

static void setup(void)
{
    char err[256];

    if (S.up)
        return;
    S.up = 1;
    rls_log_set_level("error");
    CHECK(uv_loop_init(&S.loop) == 0);
    CHECK(rls_admin_start(&S.admin, &S.loop, "127.0.0.1", 0, page, health,
                          NULL, err, sizeof(err)) == RL_OK);
    S.port = rls_admin_frontend(&S.admin)->port;
    CHECK(S.port > 0);
    rl_buf_init(&S.page, 64u << 20);
    rl_buf_init(&S.in, 64u << 20);
}

/* ---- the prediction ---------------------------------------------------- */

typedef struct pred_s {
    int status;  /* 0: any (a path admin.c does not route) */
    int head;    /* HEAD: no body (but for a 405) */
    int metrics; /* GET /metrics: the body is the page */
    int healthz;
    int closes;  /* the response says Connection: close */
} pred_t;

static int is(const char *p, size_t n, const char *s)
{
    return n == strlen(s) && memcmp(p, s, n) == 0;
}

/* The responses the server owes, in order, for data[0, n) sent whole:
 * *nok of them to heads that ended (each must be answered), *n_out in all
 * (a bad head's 400, 414 or 431 last: it comes only when the server
 * parsed, which it does at a line's end or a full buffer). */
static void predict(const uint8_t *data, size_t n, pred_t *p, size_t *nok,
                    size_t *n_out)
{
    size_t pos = 0, k = 0;

    *nok = 0;
    while (k < PRED_MAX) {
        rls_http_req_t q;
        size_t len = n - pos < RLS_HTTP_HEAD_MAX ? n - pos : RLS_HTTP_HEAD_MAX;
        int rc = rls_http_parse((const char *)data + pos, len, &q);
        pred_t *e = &p[k];

        memset(e, 0, sizeof(*e));
        if (rc == RL_EAGAIN && len < RLS_HTTP_HEAD_MAX)
            break;
        if (rc != RL_OK) {
            if (rc == RL_EAGAIN)
                rc = RL_EFULL; /* a full buffer, no head in it */
            e->status = rc == RL_EFULL && q.line_len == 0 ? 414
                        : rc == RL_EFULL || q.nheaders == RLS_HTTP_HEADERS_MAX
                            ? 431
                            : 400;
            e->closes = 1;
            k++;
            break;
        }
        if (q.content_length > 0) {
            /* The listener takes no body (admin.c asks for none): 400,
             * closed, before the route sees it (http_server.c). */
            e->status = 400;
            e->closes = 1;
            k++;
            (*nok)++;
            break;
        }
        {
            size_t plen = rls_http_path_len(&q);
            int get = is(q.method, q.method_len, "GET"),
                head = is(q.method, q.method_len, "HEAD");
            e->head = head;
            e->closes = !q.keep_alive;
            if (is(q.target, plen, "/metrics") ||
                is(q.target, plen, "/healthz")) {
                if (!get && !head) {
                    e->status = 405;
                } else if (q.target[1] == 'm') {
                    e->metrics = 1;
                    e->status = S.page_fails ? 500 : 200;
                    e->closes |= S.page_fails;
                } else {
                    e->healthz = 1;
                    e->status = S.healthy ? 200 : 503;
                }
            }
        }
        k++;
        (*nok)++;
        pos += q.head_len;
        if (e->closes)
            break;
    }
    *n_out = k;
}

/* ---- the responses ----------------------------------------------------- */

/* Checks the responses in S.in against p; returns how many there are. */
static size_t check_responses(const pred_t *p, size_t np)
{
    const char *b = (const char *)rl_buf_rptr(&S.in);
    size_t n = rl_buf_len(&S.in), pos = 0, k = 0;

    while (pos < n) {
        const char *h = b + pos, *end, *cl;
        size_t hlen, clen = 0, blen;
        int status;
        char line[64];

        CHECK(k < np);
        CHECK(n - pos > 13 && memcmp(h, "HTTP/1.1 ", 9) == 0);
        status = (h[9] - '0') * 100 + (h[10] - '0') * 10 + (h[11] - '0');
        CHECK(status >= 100 && status <= 599 && h[12] == ' ');
        end = memmem(h, n - pos, "\r\n\r\n", 4);
        CHECK(end != NULL);
        hlen = (size_t)(end - h) + 4;
        cl = memmem(h, hlen, "\r\nContent-Length: ", 18);
        CHECK(cl != NULL);
        clen = strtoul(cl + 18, NULL, 10);
        blen = p[k].head && status != 405 ? 0 : clen;
        CHECK(n - pos - hlen >= blen);
        if (p[k].status != 0)
            CHECK(status == p[k].status);
        if (p[k].closes)
            CHECK(memmem(h, hlen, "\r\nConnection: close\r\n", 21) != NULL);
        if (status == 405 && p[k].status == 405)
            CHECK(memmem(h, hlen, "\r\nAllow: GET, HEAD\r\n", 20) != NULL);
        if (p[k].metrics && status == 200) {
            CHECK(clen == rl_buf_len(&S.page));
            CHECK(blen == 0 ||
                  memcmp(h + hlen, rl_buf_rptr(&S.page), blen) == 0);
        }
        if (p[k].healthz) {
            snprintf(line, sizeof(line), "%s\n",
                     S.healthy ? "ok" : "store down");
            CHECK(clen == strlen(line));
            CHECK(blen == 0 || memcmp(h + hlen, line, blen) == 0);
        }
        pos += hlen + blen;
        k++;
    }
    return k;
}

/* ---- one connection ---------------------------------------------------- */

/* Connects the non-blocking fd to sa. libFuzzer's timers send this
 * process signals, and a blocking connect that one interrupts fails with
 * EINTR while the handshake goes on (issue 41: an hour's run stopped on
 * it at 44 minutes): so the connect is waited for, the loop stepped
 * meanwhile (the listener accepts on it), until the socket is writable
 * and its error 0. */
static void connect_to(int fd, const struct sockaddr_in *sa)
{
    struct pollfd p = {fd, POLLOUT, 0};
    socklen_t len = sizeof(int);
    int rc, err = 0, steps;

    rc = connect(fd, (const struct sockaddr *)sa, sizeof(*sa));
    if (rc == 0)
        return;
    CHECK(errno == EINPROGRESS || errno == EINTR);
    for (steps = 0;; steps++) {
        CHECK(steps < 10000); /* 10 s: the kernel retries a SYN in 1 s */
        uv_run(&S.loop, UV_RUN_NOWAIT);
        rc = poll(&p, 1, 1);
        CHECK(rc >= 0 || errno == EINTR);
        if (rc > 0)
            break;
    }
    CHECK(getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) == 0);
    errno = err;
    CHECK(err == 0);
}

/* The next connection's source address: 127.1.0.1 up to 127.254.255.254,
 * then around again (16.6 million connections apart: hours at any rate
 * this target runs). Loopback only, whatever the count. */
static uint32_t source_address(void)
{
    static uint32_t seq;
    uint32_t n = seq++ % (254u * 65534u);

    return 0x7f000000u | ((n / 65534u + 1) << 16) | (n % 65534u + 1);
}

/* Reads what has come; returns the bytes read, or -1 at the end. */
static ssize_t drain(int fd)
{
    ssize_t got = 0;

    for (;;) {
        uint8_t *w;
        ssize_t k;
        CHECK(rl_buf_reserve(&S.in, 65536, &w) == RL_OK);
        k = recv(fd, w, 65536, MSG_DONTWAIT);
        if (k > 0) {
            rl_buf_commit(&S.in, (size_t)k);
            got += k;
            continue;
        }
        if (k == 0)
            return got > 0 ? got : -1;
        if (errno == EAGAIN || errno == EWOULDBLOCK)
            return got;
        if (errno == EINTR)
            continue;
        return got > 0 ? got : -1; /* ECONNRESET after our own close */
    }
}

static void run_one(const uint8_t *data, size_t size)
{
    static const size_t pieces[4] = {0, 1, 7, 100};
    static pred_t pred[PRED_MAX];
    struct sockaddr_in sa;
    struct linger lg = {1, 0};
    int one = 1;
    size_t piece, off = 0, nok, npred, got_resp, steps;
    int fd, quiet = 0, wdone = 0, rdone = 0, tls;
    uint64_t timed_out;
    const uint8_t *body;
    size_t blen;

    setup();
    if (size == 0)
        return;
    S.healthy = !(data[0] & 1);
    S.page_fails = (data[0] & 6) == 6;
    S.page_extra = (data[0] & 6) == 4 ? 70000 : (data[0] & 6) == 2 ? 200 : 0;
    piece = pieces[(data[0] >> 3) & 3];
    body = data + 1;
    blen = size - 1;
    rl_buf_reset(&S.in);
    rl_buf_reset(&S.page);
    /* A TLS client's first record (its first 3 bytes in the first read)
     * gets the alert: not HTTP. */
    tls = piece != 1 && rls_tls_is_hello(body, blen);
    predict(body, blen, pred, &nok, &npred);
    timed_out = rls_http_server_stats(S.admin.http)->timed_out;

    CHECK((fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC,
                       0)) >= 0);
    CHECK(setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg)) == 0);
    /* Each piece leaves at once: with Nagle, a piece sent while the last
     * is unacknowledged waits for the server's delayed ACK (40 ms), and
     * the server would see the pieces as the clock, not the input, cut
     * them. */
    CHECK(setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) == 0);
    memset(&sa, 0, sizeof(sa));
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(source_address());
    CHECK(bind(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0);
    sa.sin_port = htons((uint16_t)S.port);
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connect_to(fd, &sa);
    /* Write the input (in pieces, the loop stepped between them), then
     * step until nothing moves. */
    for (steps = 0; quiet < QUIET_STEPS; steps++) {
        int moved = 0;
        CHECK(steps < 100000);
        if (off < blen && !wdone) {
            /* At most PIECES_MAX pieces, then the rest at once: each
             * piece is a TCP segment through the kernel's loopback. */
            size_t want = piece == 0 || steps >= PIECES_MAX ? blen - off
                          : piece < blen - off            ? piece
                                                          : blen - off;
            ssize_t k = send(fd, body + off, want, MSG_DONTWAIT | MSG_NOSIGNAL);
            if (k > 0) {
                off += (size_t)k;
                moved = 1;
            } else if (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK) {
                wdone = 1; /* the server closed: the rest is not sent */
            }
        }
        uv_run(&S.loop, UV_RUN_NOWAIT);
        /* Read on after a refused send: what the server answered before
         * it closed is still to be read. */
        if (!rdone) {
            ssize_t k = drain(fd);
            if (k < 0)
                rdone = wdone = 1;
            moved |= k > 0;
        }
        quiet = moved ? 0 : quiet + 1;
        if (off < blen && !wdone)
            quiet = 0;
    }
    /* A connection the server closed at its header deadline or idle limit
     * (this process was not run for seconds, on a loaded machine) was cut
     * by the clock, not by the input: what it answered is not predicted. */
    if (!tls && rls_http_server_stats(S.admin.http)->timed_out == timed_out) {
        /* Every head that ended is answered, and nothing else. */
        got_resp = check_responses(pred, npred);
        CHECK(got_resp >= nok);
    }
    /* Reset: the server must let go of the connection. */
    close(fd);
    for (steps = 0; rls_http_server_live(S.admin.http) > 0; steps++) {
        CHECK(steps < CLOSE_STEPS);
        uv_run(&S.loop, UV_RUN_NOWAIT);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    run_one(data, size);
    return 0;
}

#ifdef RL_FUZZ_REPLAY
#include "walk.h"

static uint8_t seeds[64][4096];
static size_t seed_len[64];
static int nseeds;

static int run_file(const char *path)
{
    static uint8_t buf[1 << 16];
    size_t n;

    if (rlf_read(path, buf, sizeof(buf), &n) != 0)
        return 1;
    run_one(buf, n);
    if (nseeds < 64 && n <= sizeof(seeds[0])) {
        memcpy(seeds[nseeds], buf, n);
        seed_len[nseeds++] = n;
    }
    return 0;
}

int main(int argc, char **argv)
{
    static const char alphabet[] = "GETHEADPOST /metricshealthz?\r\n:"
                                   "Connection: closekeep-alive1.0";
    static uint8_t buf[4096 + 8];
    int i, files = 0, iters = 3000;

    for (i = 1; i < argc; i++)
        if (rlf_walk(argv[i], run_file, &files) != 0)
            return 1;
    if (files == 0) {
        fprintf(stderr, "fuzz_admin: no seed files\n");
        return 1;
    }
    for (i = 0; i < iters && nseeds > 0; i++) {
        int s = (int)(rlf_rand() % (unsigned)nseeds);
        size_t n = seed_len[s], edits = 1 + rlf_rand() % 4;

        memcpy(buf, seeds[s], n);
        n = rlf_mutate(buf, n, sizeof(buf) - 1, edits, alphabet, rlf_rand);
        if (n > 0 && rlf_rand() % 4 == 0)
            buf[0] = (uint8_t)rlf_rand();
        LLVMFuzzerTestOneInput(buf, n);
    }
    printf("fuzz_admin replay: %d files, %d mutations, invariants held\n",
           files, iters);
    return 0;
}
#endif
