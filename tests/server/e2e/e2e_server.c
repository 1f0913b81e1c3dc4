/* rl-server end to end: a real process on a free loopback port, spoken to
 * over TCP with the frame codec of rl_core. Each test starts what it needs
 * (rl-server, a private redis-server) and stops it by pid, also when an
 * assertion fails (teardown). */
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
#include <sys/socket.h>
#include <sys/wait.h>
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

typedef struct {
    int fd;
    rl_buf_t in;
} cli_t;

typedef struct {
    rl_result_t r;
    char err[200];
} res_t;

static void cli_open(cli_t *c, int port)
{
    c->fd = rlt_dial(port);
    assert_true(c->fd >= 0);
    rl_buf_init(&c->in, 1 << 24);
}

static void cli_close(cli_t *c)
{
    if (c->fd >= 0)
        close(c->fd);
    c->fd = -1;
    rl_buf_free(&c->in);
}

static void send_checks(cli_t *c, const rl_check_t *q, size_t n)
{
    rl_buf_t b;
    size_t i;

    rl_buf_init(&b, 1 << 26);
    for (i = 0; i < n; i++)
        assert_int_equal(rl_check_put(&b, &q[i]), RL_OK);
    assert_int_equal(rlt_send_all(c->fd, rl_buf_rptr(&b), rl_buf_len(&b)),
                     RL_OK); /* one write */
    rl_buf_free(&b);
}

/* Reads up to n responses, waiting at most timeout_ms for each next byte.
 * Returns how many arrived; *eof is set when the server closed. */
static size_t recv_results(cli_t *c, res_t *out, size_t n, int timeout_ms,
                           int *eof)
{
    size_t got = 0;

    *eof = 0;
    while (got < n) {
        rl_frame_t f;
        int rc = rl_frame_decode(rl_buf_rptr(&c->in), rl_buf_len(&c->in),
                                 1 << 20, &f);
        if (rc == RL_OK) {
            assert_int_equal(rl_result_decode(f.payload, f.len, &out[got].r),
                             RL_OK);
            snprintf(out[got].err, sizeof(out[got].err), "%.*s",
                     (int)out[got].r.error_len,
                     out[got].r.error ? out[got].r.error : "");
            out[got].r.error = NULL;
            rl_buf_consume(&c->in, f.size);
            got++;
            continue;
        }
        assert_int_equal(rc, RL_EAGAIN);
        struct pollfd p = {c->fd, POLLIN, 0};
        if (poll(&p, 1, timeout_ms) <= 0)
            break;
        uint8_t *w;
        assert_int_equal(rl_buf_reserve(&c->in, 65536, &w), RL_OK);
        ssize_t k = recv(c->fd, w, 65536, 0);
        if (k <= 0) {
            *eof = 1;
            break;
        }
        rl_buf_commit(&c->in, (size_t)k);
    }
    return got;
}

/* One request, one answer. */
static res_t ask(cli_t *c, rl_check_t q)
{
    res_t r;
    int eof;

    send_checks(c, &q, 1);
    assert_int_equal(recv_results(c, &r, 1, 5000, &eof), 1);
    assert_int_equal(r.r.id, q.id);
    return r;
}

/* rl-server connects to Redis in the background: wait (bounded) until a
 * probe on a key of its own is counted, not failed open or closed. */
static void await_store_up(int port)
{
    uint64_t deadline = rlt_mono_ms() + 10000, id = 1;
    cli_t c;
    res_t r;

    cli_open(&c, port);
    do {
        r = ask(&c, rlt_check(id++, "probe:store-up", 1000000, 60, 1));
    } while (r.err[0] != '\0' && rlt_mono_ms() < deadline);
    assert_string_equal(r.err, "");
    cli_close(&c);
}

/* ---- tests ---- */

/* The textbook example over the wire, on both stores: 5 per 60 s; the sixth
 * is refused with retry_after_ms equal to the time left in the window. If a
 * window edge happens to fall inside the run (reset_after_ms jumps up), the
 * run is repeated on a fresh key. */
static void five_per_minute(int port)
{
    char key[64];
    int attempt;

    for (attempt = 0; attempt < 3; attempt++) {
        cli_t c;
        res_t r[6];
        int i, same_window = 1;

        snprintf(key, sizeof(key), "user:fpm:%d:%d", getpid(), attempt);
        cli_open(&c, port);
        for (i = 0; i < 6; i++) {
            r[i] = ask(&c, rlt_check((uint64_t)i + 1, key, 5, 60, 0));
            if (i > 0 && r[i].r.reset_after_ms > r[i - 1].r.reset_after_ms)
                same_window = 0;
        }
        cli_close(&c);
        if (!same_window)
            continue;
        for (i = 0; i < 6; i++) {
            assert_int_equal(r[i].r.code,
                             i < 5 ? RL_CODE_OK : RL_CODE_OVER_LIMIT);
            /* The refusal consumed nothing: used stays at 5. */
            assert_int_equal(r[i].r.used, i < 5 ? i + 1 : 5);
            assert_int_equal(r[i].r.window_s, 60);
            assert_int_equal(r[i].r.limit, 5);
            assert_int_equal(r[i].r.remaining, i < 5 ? 4 - i : 0);
            assert_true(r[i].r.reset_after_ms >= 1 &&
                        r[i].r.reset_after_ms <= 60000);
            assert_string_equal(r[i].err, "");
        }
        assert_int_equal(r[5].r.retry_after_ms, r[5].r.reset_after_ms);
        return;
    }
    fail_msg("three window edges in a row");
}

static void test_five_per_minute_memory(void **state)
{
    rlt_fx_t *f = *state;
    rlt_fx_start(f, 0, NULL);
    five_per_minute(f->srv[0].port);
}

static void test_five_per_minute_redis(void **state)
{
    rlt_fx_t *f = *state;
    rlt_fx_redis(f);
    rlt_fx_start(f, 0, "--redis", f->raddr, NULL);
    await_store_up(f->srv[0].port);
    five_per_minute(f->srv[0].port);
}

/* 1,000 requests for one key in one write, limit 300: exactly 300 allowed,
 * the first 300 in arrival order, and the 700 refusals consume nothing;
 * every id answered exactly once. */
static void coalesce_scenario(int port)
{
    static rl_check_t q[1000];
    static res_t r[1000];
    int seen[1001] = {0}, eof;
    char key[64];
    size_t i;
    cli_t c;

    snprintf(key, sizeof(key), "hot:%d", getpid());
    for (i = 0; i < 1000; i++)
        q[i] = rlt_check(i + 1, key, 300, 3600, 1);
    cli_open(&c, port);
    send_checks(&c, q, 1000);
    assert_int_equal(recv_results(&c, r, 1000, 5000, &eof), 1000);
    for (i = 0; i < 1000; i++) {
        uint64_t id = r[i].r.id;
        assert_true(id >= 1 && id <= 1000);
        seen[id]++;
        /* arrival order: request n saw the counter at n, and the
         * refused ones see it stay at 300 */
        assert_int_equal(r[i].r.used, id <= 300 ? id : 300);
        assert_int_equal(r[i].r.code,
                         id <= 300 ? RL_CODE_OK : RL_CODE_OVER_LIMIT);
    }
    for (i = 1; i <= 1000; i++)
        assert_int_equal(seen[i], 1);
    cli_close(&c);
}

static void test_coalesce_memory(void **state)
{
    rlt_fx_t *f = *state;
    rlt_fx_start(f, 0, NULL);
    coalesce_scenario(f->srv[0].port);
}

static void test_coalesce_redis(void **state)
{
    rlt_fx_t *f = *state;
    rlt_fx_redis(f);
    rlt_fx_start(f, 0, "--redis", f->raddr, NULL);
    await_store_up(f->srv[0].port);
    coalesce_scenario(f->srv[0].port);
}

/* Cost weighting: limit 10, cost 4: 4, 8 allowed; 12 refused, consuming
 * nothing; then a request of cost 2 still fits. */
static void test_cost(void **state)
{
    rlt_fx_t *f = *state;
    cli_t c;
    res_t r;

    rlt_fx_start(f, 0, NULL);
    cli_open(&c, f->srv[0].port);
    r = ask(&c, rlt_check(1, "cost", 10, 3600, 4));
    assert_int_equal(r.r.used, 4);
    r = ask(&c, rlt_check(2, "cost", 10, 3600, 4));
    assert_int_equal(r.r.code, RL_CODE_OK);
    assert_int_equal(r.r.remaining, 2);
    r = ask(&c, rlt_check(3, "cost", 10, 3600, 4));
    assert_int_equal(r.r.code, RL_CODE_OVER_LIMIT);
    assert_int_equal(r.r.used, 8);
    assert_int_equal(r.r.remaining, 2);
    r = ask(&c, rlt_check(4, "cost", 10, 3600, 2));
    assert_int_equal(r.r.code, RL_CODE_OK);
    assert_int_equal(r.r.used, 10);
    cli_close(&c);
}

/* A frame cut at every byte offset, the two halves sent separately: each
 * is answered, once. */
static void test_split_at_every_byte(void **state)
{
    rlt_fx_t *f = *state;
    rl_buf_t b;
    cli_t c;
    size_t k, len;
    int eof;

    rlt_fx_start(f, 0, NULL);
    cli_open(&c, f->srv[0].port);
    rl_buf_init(&b, 1 << 16);
    rl_check_t q = rlt_check(7, "split:key", 1000000, 60, 1);
    assert_int_equal(rl_check_put(&b, &q), RL_OK);
    len = rl_buf_len(&b);
    for (k = 1; k < len; k++) {
        res_t r;
        assert_int_equal(rlt_send_all(c.fd, rl_buf_rptr(&b), k), RL_OK);
        /* nothing can be answered from half a frame */
        struct pollfd p = {c.fd, POLLIN, 0};
        assert_int_equal(poll(&p, 1, 0), 0);
        assert_int_equal(rlt_send_all(c.fd, rl_buf_rptr(&b) + k, len - k),
                         RL_OK);
        assert_int_equal(recv_results(&c, &r, 1, 5000, &eof), 1);
        assert_int_equal(r.r.id, 7);
        assert_int_equal(r.r.used, k);
    }
    rl_buf_free(&b);
    cli_close(&c);
}

static void put_raw_frame(rl_buf_t *b, uint8_t flag, const void *p, uint32_t n)
{
    uint8_t h[RL_FRAME_HEADER];

    rl_frame_header(h, n);
    h[0] = flag;
    assert_int_equal(rl_buf_append(b, h, sizeof(h)), RL_OK);
    assert_int_equal(rl_buf_append(b, p, n), RL_OK);
}

/* The bad-input rules (DESIGN.md, "Bad input"): an invalid request gets
 * ERROR with its id and the connection stays open; an undecodable payload
 * gets ERROR with id 0 and the connection stays open; a broken frame gets
 * one ERROR with id 0 and the connection is closed. Another connection is
 * unaffected throughout. */
static void test_bad_inputs(void **state)
{
    rlt_fx_t *f = *state;
    static const struct {
        rl_check_t q;
        const char *msg;
    } invalid[] = {
        {{11, "", 0, 0, 5, 60, NULL, 0}, "key is empty"},
        {{12, "a\0b", 3, 0, 5, 60, NULL, 0}, "key contains a NUL byte"},
        {{13, "k", 1, 0, 0, 0, NULL, 0}, "neither"},
        {{14, "k", 1, 0, 5, 0, NULL, 0}, "window_seconds must be > 0"},
        {{15, "k", 1, 0, 0, 60, NULL, 0}, "limit must be > 0"},
        {{16, "k", 1, 0, 5, 31622401, NULL, 0}, "exceeds the maximum"},
        {{17, "k", 1, 0, 0, 0, "nope", 4}, "unknown rule 'nope'"},
        {{18, "k", 1, 0, 5, 60, "api", 3}, "not both"},
        {{19, "k", 1, 0, 0, 0, "bad rule", 8}, "rule name contains"},
    };
    char longkey[600];
    cli_t bad, good;
    res_t r;
    size_t i;
    int eof;

    rlt_fx_start(f, 0, "--rule", "api=2/60", "--max-frame", "1024", NULL);
    cli_open(&good, f->srv[0].port);
    cli_open(&bad, f->srv[0].port);

    for (i = 0; i < sizeof(invalid) / sizeof(invalid[0]); i++) {
        r = ask(&bad, invalid[i].q);
        assert_int_equal(r.r.code, RL_CODE_ERROR);
        assert_non_null(strstr(r.err, invalid[i].msg));
    }
    memset(longkey, 'k', sizeof(longkey));
    rl_check_t q = rlt_check(20, "", 5, 60, 1);
    q.key = longkey;
    q.key_len = 513;
    r = ask(&bad, q);
    assert_int_equal(r.r.code, RL_CODE_ERROR);
    assert_string_equal(r.err, "key is longer than 512 bytes");

    /* a rule by name works */
    q = rlt_check(21, "ruled", 0, 0, 1);
    q.rule = "api";
    q.rule_len = 3;
    r = ask(&bad, q);
    assert_int_equal(r.r.code, RL_CODE_OK);
    assert_int_equal(r.r.limit, 2);

    /* undecodable payload: ERROR id 0, connection stays open */
    rl_buf_t b;
    rl_buf_init(&b, 1 << 20);
    put_raw_frame(&b, 0, "\x0f\x01", 2);
    assert_int_equal(rlt_send_all(bad.fd, rl_buf_rptr(&b), rl_buf_len(&b)),
                     RL_OK);
    assert_int_equal(recv_results(&bad, &r, 1, 5000, &eof), 1);
    assert_int_equal(r.r.id, 0);
    assert_int_equal(r.r.code, RL_CODE_ERROR);
    r = ask(&bad, rlt_check(22, "still-open", 5, 60, 1));
    assert_int_equal(r.r.code, RL_CODE_OK);

    /* the other connection has been fine all along */
    r = ask(&good, rlt_check(1, "good", 5, 60, 1));
    assert_int_equal(r.r.code, RL_CODE_OK);

    /* over --max-frame: one ERROR id 0, then close; requests before it in
     * the same write are still answered */
    rl_buf_reset(&b);
    q = rlt_check(23, "before", 5, 60, 1);
    assert_int_equal(rl_check_put(&b, &q), RL_OK);
    uint8_t hdr[RL_FRAME_HEADER];
    rl_frame_header(hdr, 1025);
    rl_buf_append(&b, hdr, sizeof(hdr));
    assert_int_equal(rlt_send_all(bad.fd, rl_buf_rptr(&b), rl_buf_len(&b)),
                     RL_OK);
    res_t two[3];
    assert_int_equal(recv_results(&bad, two, 3, 5000, &eof), 2);
    assert_true(eof);
    /* answers come in any order; here the frame error is written at once
     * while the valid request waits for its batch */
    i = two[0].r.id == 0 ? 0 : 1;
    assert_int_equal(two[1 - i].r.id, 23);
    assert_int_equal(two[1 - i].r.code, RL_CODE_OK);
    assert_int_equal(two[i].r.id, 0);
    assert_int_equal(two[i].r.code, RL_CODE_ERROR);
    assert_string_equal(two[i].err,
                        "frame length exceeds the configured maximum");
    cli_close(&bad);

    /* flag byte not 0: the same */
    cli_open(&bad, f->srv[0].port);
    rl_buf_reset(&b);
    put_raw_frame(&b, 1, "\x08\x01", 2);
    assert_int_equal(rlt_send_all(bad.fd, rl_buf_rptr(&b), rl_buf_len(&b)),
                     RL_OK);
    assert_int_equal(recv_results(&bad, two, 3, 5000, &eof), 1);
    assert_true(eof);
    assert_int_equal(two[0].r.id, 0);
    assert_non_null(strstr(two[0].err, "flag byte"));
    cli_close(&bad);

    /* garbage: whatever it is, the server answers or closes, never hangs,
     * and the good connection still works */
    for (i = 0; i < 50; i++) {
        uint8_t junk[256];
        size_t k;
        unsigned seed = (unsigned)i;
        for (k = 0; k < sizeof(junk); k++)
            junk[k] = (uint8_t)rand_r(&seed);
        junk[0] = i % 2 ? 0 : junk[0];
        cli_open(&bad, f->srv[0].port);
        assert_int_equal(rlt_send_all(bad.fd, junk, sizeof(junk)), RL_OK);
        shutdown(bad.fd, SHUT_WR);
        res_t g[64];
        recv_results(&bad, g, 64, 5000, &eof);
        assert_true(eof); /* closed after answering what it could */
        cli_close(&bad);
    }
    r = ask(&good, rlt_check(2, "good", 5, 60, 1));
    assert_int_equal(r.r.code, RL_CODE_OK);
    assert_int_equal(r.r.used, 2);
    rl_buf_free(&b);
    cli_close(&good);
}

/* Redis killed mid-run, then restarted: answers follow the fail mode, no
 * request hangs, and real decisions resume by themselves. */
static void redis_outage(rlt_fx_t *f, int fail_open)
{
    cli_t c;
    res_t r;
    uint64_t id = 1, deadline;

    rlt_fx_redis(f);
    rlt_fx_start(f, 0, "--redis", f->raddr, "--redis-timeout-ms", "200",
                 fail_open ? "--fail-open" : "--fail-closed", NULL);
    await_store_up(f->srv[0].port);
    cli_open(&c, f->srv[0].port);
    r = ask(&c, rlt_check(id++, "outage", 100, 3600, 1));
    assert_int_equal(r.r.code, RL_CODE_OK);
    assert_string_equal(r.err, "");

    rlt_redis_kill(&f->redis);
    r = ask(&c, rlt_check(id++, "outage", 100, 3600, 1));
    assert_int_equal(r.r.code, fail_open ? RL_CODE_OK : RL_CODE_ERROR);
    assert_non_null(strstr(r.err, "store unavailable"));

    /* a burst while down: all answered, once */
    rl_check_t q[100];
    res_t rr[100];
    int eof, i;
    for (i = 0; i < 100; i++)
        q[i] = rlt_check(id++, "outage", 100, 3600, 1);
    send_checks(&c, q, 100);
    assert_int_equal(recv_results(&c, rr, 100, 5000, &eof), 100);
    for (i = 0; i < 100; i++)
        assert_int_equal(rr[i].r.code, fail_open ? RL_CODE_OK : RL_CODE_ERROR);

    assert_int_equal(rlt_redis_restart(&f->redis), 0);
    deadline = rlt_mono_ms() + 10000;
    do {
        r = ask(&c, rlt_check(id++, "outage", 100, 3600, 1));
    } while (r.err[0] != '\0' && rlt_mono_ms() < deadline);
    assert_string_equal(r.err, "");
    assert_int_equal(r.r.code, RL_CODE_OK);
    assert_true(r.r.used >= 1);
    cli_close(&c);
}

static void test_redis_killed_fail_open(void **state)
{
    rlt_fx_t *f = *state;

    redis_outage(f, 1);
}

static void test_redis_killed_fail_closed(void **state)
{
    rlt_fx_t *f = *state;

    redis_outage(f, 0);
}

/* Redis never started: answered at once per the fail mode. */
static void test_redis_never_started(void **state)
{
    rlt_fx_t *f = *state;
    char addr[32];
    cli_t c;
    res_t r;

    /* Reserved, so nothing listens there. */
    snprintf(addr, sizeof(addr), "127.0.0.1:%d", rlt_port_reserve());
    rlt_fx_start(f, 0, "--redis", addr, "--fail-closed", NULL);
    cli_open(&c, f->srv[0].port);
    r = ask(&c, rlt_check(1, "k", 5, 60, 1));
    assert_int_equal(r.r.code, RL_CODE_ERROR);
    assert_non_null(strstr(r.err, "fail-closed"));
    cli_close(&c);
}

/* After a run every key in Redis has a TTL no longer than its window plus
 * the grace plus the spread (at most a quarter of the window). */
static void test_every_key_has_ttl(void **state)
{
    rlt_fx_t *f = *state;
    static rl_check_t q[600];
    static const uint32_t windows[] = {1, 60, 3600, 86400};
    char keys[600][32];
    res_t r[600];
    size_t i;
    int eof;
    cli_t c;

    rlt_fx_redis(f);
    rlt_fx_start(f, 0, "--redis", f->raddr, "--expiry-grace-ms", "1000",
                 "--expiry-spread-ms", "2000", NULL);
    await_store_up(f->srv[0].port);
    cli_open(&c, f->srv[0].port);
    for (i = 0; i < 600; i++) {
        snprintf(keys[i], sizeof(keys[i]), "ttl:%zu", i % 150);
        q[i] = rlt_check(i + 1, keys[i], 10, windows[i % 4], 1);
    }
    send_checks(&c, q, 600);
    assert_int_equal(recv_results(&c, r, 600, 5000, &eof), 600);
    cli_close(&c);

    redisContext *rc = rlt_redis_connect(&f->redis);
    assert_non_null(rc);
    /* Counters only: rl:instances is the server's report to rl-ctl. */
    redisReply *keysr = redisCommand(rc, "KEYS rl:{*");
    assert_non_null(keysr);
    assert_true(keysr->elements >= 150);
    for (i = 0; i < keysr->elements; i++) {
        const char *k = keysr->element[i]->str;
        /* rl:{<caller>}:i:<window>:<index> for an inline limit */
        assert_int_equal(strncmp(strrchr(k, '}'), "}:i:", 4), 0);
        unsigned long w = strtoul(strrchr(k, '}') + 4, NULL, 10);
        redisReply *t = redisCommand(rc, "PTTL %s", k);
        assert_non_null(t);
        assert_true(t->integer > 0); /* -1 would be a key without TTL */
        assert_true((uint64_t)t->integer <=
                    w * 1000 + 1000 + (w * 250 < 2000 ? w * 250 : 2000));
        freeReplyObject(t);
    }
    freeReplyObject(keysr);
    redisFree(rc);
}

static long rss_kb(pid_t pid)
{
    char path[64], line[256];
    long kb = -1;
    FILE *f;

    snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
    if ((f = fopen(path, "r")) == NULL)
        return -1;
    while (fgets(line, sizeof(line), f))
        if (sscanf(line, "VmRSS: %ld kB", &kb) == 1)
            break;
    fclose(f);
    return kb;
}

/* A client that never reads: the server stops reading it at
 * --max-inflight, closes it once its unsent output passes --max-output,
 * does not grow without bound meanwhile, and keeps answering another client
 * all along. */
static void test_backpressure(void **state)
{
    rlt_fx_t *f = *state;
    static rl_check_t q[2000];
    cli_t flood, good;
    long rss0, rss1;
    int i, closed = 0, rounds = 0;
    uint64_t deadline;
    res_t r;

    rlt_fx_start(f, 0, "--max-inflight", "64", "--max-output", "65536", NULL);
    rss0 = rss_kb(f->srv[0].pid);
    cli_open(&flood, f->srv[0].port);
    cli_open(&good, f->srv[0].port);
    int small = 4096;
    setsockopt(flood.fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof(small));
    for (i = 0; i < 2000; i++)
        q[i] = rlt_check((uint64_t)i + 1, "flood", 1000000000, 3600, 1);

    /* Flood from a non-blocking socket until the server closes it; the
     * good client does a round trip between bursts. */
    int fl = 1;
    setsockopt(flood.fd, SOL_SOCKET, SO_SNDBUF, &small, sizeof(small));
    rl_buf_t b;
    rl_buf_init(&b, 1 << 26);
    for (i = 0; i < 2000; i++)
        rl_check_put(&b, &q[i]);
    deadline = rlt_mono_ms() + 20000;
    while (!closed && rlt_mono_ms() < deadline) {
        ssize_t k = send(flood.fd, rl_buf_rptr(&b), rl_buf_len(&b),
                         MSG_NOSIGNAL | MSG_DONTWAIT);
        if (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK)
            closed = 1;
        r = ask(&good, rlt_check((uint64_t)++rounds, "good", 1000000, 3600, 1));
        assert_int_equal(r.r.code, RL_CODE_OK);
        assert_int_equal(r.r.used, rounds);
        (void)fl;
    }
    assert_true(closed);
    assert_true(rounds >= 1);
    rss1 = rss_kb(f->srv[0].pid);
    /* bounded: nowhere near the megabytes the flood sent */
    assert_true(rss1 - rss0 < 32 * 1024);
    rl_buf_free(&b);
    cli_close(&flood);
    cli_close(&good);
}

/* --max-connections: the extra client gets one ERROR saying why, then EOF;
 * those already connected carry on. The server warns of refusals, at most
 * once a second however many there are. */
static void test_max_connections(void **state)
{
    rlt_fx_t *f = *state;
    char log_path[] = "/tmp/rlt-maxconn-XXXXXX", line[512];
    cli_t a, b, extra;
    res_t r[2];
    int eof, i, saved, fd, warnings = 0, first_counts_one = 0;
    FILE *fp;

    /* the server inherits our stderr: point it at a file meanwhile */
    fd = mkstemp(log_path);
    assert_true(fd >= 0);
    saved = dup(STDERR_FILENO);
    assert_true(saved >= 0);
    assert_true(dup2(fd, STDERR_FILENO) >= 0);
    rlt_fx_start(f, 0, "--max-connections", "2", NULL);
    dup2(saved, STDERR_FILENO);
    close(saved);
    close(fd);
    /* rlt_fx_start's port probe was a connection too; a round trip on `a`
     * proves the server has seen the probe close before `b` connects */
    cli_open(&a, f->srv[0].port);
    assert_int_equal(ask(&a, rlt_check(1, "a", 5, 60, 1)).r.code, RL_CODE_OK);
    cli_open(&b, f->srv[0].port);
    assert_int_equal(ask(&b, rlt_check(1, "b", 5, 60, 1)).r.code, RL_CODE_OK);
    cli_open(&extra, f->srv[0].port);
    assert_int_equal(recv_results(&extra, r, 2, 5000, &eof), 1);
    assert_true(eof);
    assert_int_equal(r[0].r.code, RL_CODE_ERROR);
    assert_string_equal(r[0].err, "server at --max-connections");
    cli_close(&extra);
    for (i = 0; i < 20; i++) {
        cli_open(&extra, f->srv[0].port);
        assert_int_equal(recv_results(&extra, r, 2, 5000, &eof), 1);
        assert_true(eof);
        cli_close(&extra);
    }
    assert_int_equal(ask(&a, rlt_check(2, "a", 5, 60, 1)).r.code, RL_CODE_OK);
    cli_close(&a);
    cli_close(&b);

    assert_int_equal(rlt_stop(f->srv[0].pid, SIGTERM, 5000), 0);
    f->srv[0].pid = -1;
    fp = fopen(log_path, "r");
    assert_non_null(fp);
    while (fgets(line, sizeof(line), fp)) {
        if (strstr(line, "level=warn msg=\"refusing connections at "
                         "--max-connections\"") == NULL)
            continue;
        assert_non_null(strstr(line, " max=2"));
        if (warnings++ == 0)
            first_counts_one = strstr(line, " refused=1 ") != NULL;
    }
    fclose(fp);
    unlink(log_path);
    /* 21 refusals: the first is told at once, the rest folded into at
     * most one line a second (a second apart would take a very slow run) */
    assert_true(first_counts_one);
    assert_true(warnings >= 1 && warnings <= 5);
}

/* SIGTERM with requests received but not yet answered (the connection is
 * held at --max-inflight 8): the server tells the client to go away (id 0,
 * ERROR, "server is shutting down"), answers every request, keeps reading
 * and answering until the client closes, then exits 0. A second client that
 * ignores the notice is closed after the stop's grace. */
static void test_sigterm_goaway(void **state)
{
    rlt_fx_t *f = *state;
    static rl_check_t q[500];
    static res_t r[600];
    int eof, status, notices = 0, seen[503] = {0};
    size_t i, got;
    cli_t c, deaf;

    rlt_fx_redis(f);
    rlt_fx_start(f, 0, "--redis", f->raddr, "--max-inflight", "8", NULL);
    await_store_up(f->srv[0].port);
    cli_open(&c, f->srv[0].port);
    cli_open(&deaf, f->srv[0].port);
    assert_int_equal(ask(&deaf, rlt_check(1, "deaf", 1000, 3600, 1)).r.code,
                     RL_CODE_OK);
    for (i = 0; i < 500; i++)
        q[i] = rlt_check(i + 1, "term", 1000, 3600, 1);
    send_checks(&c, q, 500);
    /* the server has read the write once the first answer is back */
    assert_int_equal(recv_results(&c, r, 1, 5000, &eof), 1);
    kill(f->srv[0].pid, SIGTERM);
    got = 1 + recv_results(&c, r + 1, 500, 5000, &eof);
    assert_int_equal(got, 501); /* 500 answers and the notice */
    assert_false(eof);

    /* after the notice, what the client still sends is answered too */
    q[0] = rlt_check(501, "term", 1000, 3600, 1);
    q[1] = rlt_check(502, "term", 1000, 3600, 1);
    send_checks(&c, q, 2);
    assert_int_equal(recv_results(&c, r + 501, 2, 5000, &eof), 2);
    for (i = 0; i < 503; i++) {
        if (r[i].r.id == 0) {
            notices++;
            assert_int_equal(r[i].r.code, RL_CODE_ERROR);
            assert_string_equal(r[i].err, "server is shutting down");
            continue;
        }
        assert_true(r[i].r.id <= 502);
        seen[r[i].r.id]++;
        assert_int_equal(r[i].r.code, RL_CODE_OK);
    }
    assert_int_equal(notices, 1);
    for (i = 1; i <= 502; i++)
        assert_int_equal(seen[i], 1);

    /* the client leaves: its connection ends cleanly */
    shutdown(c.fd, SHUT_WR);
    assert_int_equal(recv_results(&c, r, 1, 5000, &eof), 0);
    assert_true(eof);
    cli_close(&c);

    /* the deaf client got the notice too, ignores it, and is closed after
     * the grace; then the server exits 0 */
    assert_int_equal(recv_results(&deaf, r, 1, 5000, &eof), 1);
    assert_int_equal(r[0].r.id, 0);
    assert_int_equal(recv_results(&deaf, r, 1, 15000, &eof), 0);
    assert_true(eof);
    cli_close(&deaf);
    /* wait for the exit; another SIGTERM could land after the server has
     * closed its signal handles and kill it */
    status = rlt_stop(f->srv[0].pid, 0, 10000);
    f->srv[0].pid = -1;
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
}

/* Flags: bad ones and an address in use give one line and a non-zero
 * exit. */
static void test_bad_flags(void **state)
{
    rlt_fx_t *f = *state;
    static const char *const bad[][4] = {
        {"--bogus", NULL},           {"--listen", "nowhere", NULL},
        {"--max-frame", "12", NULL}, {"--redis", "redis://:pw@", NULL},
        {"--prefix", "a{b", NULL},   {"--rule", "x=0/60", NULL},
    };
    char *argv[8];
    size_t i;

    for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        int k = 0, status;
        argv[k++] = RL_SERVER_BIN;
        for (int j = 0; bad[i][j] != NULL; j++)
            argv[k++] = (char *)bad[i][j];
        argv[k] = NULL;
        pid_t p = rlt_spawn(argv);
        status = rlt_stop(p, 0, 5000);
        assert_true(WIFEXITED(status));
        assert_int_equal(WEXITSTATUS(status), 2);
    }
    /* address in use */
    rlt_fx_start(f, 0, NULL);
    char addr[32];
    snprintf(addr, sizeof(addr), "127.0.0.1:%d", f->srv[0].port);
    argv[0] = RL_SERVER_BIN;
    argv[1] = "--listen";
    argv[2] = addr;
    argv[3] = NULL;
    pid_t p = rlt_spawn(argv);
    int status = rlt_stop(p, 0, 5000);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        RLT_FX_TEST(test_five_per_minute_memory),
        RLT_FX_TEST(test_five_per_minute_redis),
        RLT_FX_TEST(test_coalesce_memory),
        RLT_FX_TEST(test_coalesce_redis),
        RLT_FX_TEST(test_cost),
        RLT_FX_TEST(test_split_at_every_byte),
        RLT_FX_TEST(test_bad_inputs),
        RLT_FX_TEST(test_redis_killed_fail_open),
        RLT_FX_TEST(test_redis_killed_fail_closed),
        RLT_FX_TEST(test_redis_never_started),
        RLT_FX_TEST(test_every_key_has_ttl),
        RLT_FX_TEST(test_backpressure),
        RLT_FX_TEST(test_max_connections),
        RLT_FX_TEST(test_sigterm_goaway),
        RLT_FX_TEST(test_bad_flags),
    };
    rlt_fx_use(&(rlt_fx_conf_t){.bin = RL_SERVER_BIN, .log_level = "warn"});
    /* RLT_FILTER=test_name runs one test (cmocka's glob filter). */
    if (getenv("RLT_FILTER") != NULL)
        cmocka_set_test_filter(getenv("RLT_FILTER"));
    return cmocka_run_group_tests(tests, NULL, NULL);
}
