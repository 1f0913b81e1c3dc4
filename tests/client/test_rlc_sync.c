/* The blocking client against the scripted fake server: decisions, one
 * round trip per batch, partial frames, a server that closes mid-flight or
 * never answers, reconnect after a restart, a server that says GOAWAY, and
 * misuse. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "fake_server.h"
#include "rlc.h"
#include "rlt.h"

static char addr[64];

static rlc_client_t *open_client(fake_t *f, fake_mode_t mode, int param,
                                 uint32_t timeout_ms, int fail_mode)
{
    rlc_options_t o;
    rlc_client_t *c = NULL;

    assert_int_equal(fake_start(f, 0, mode, param), 0);
    snprintf(addr, sizeof(addr), "127.0.0.1:%d", f->port);
    rlc_options_init(&o);
    o.servers = addr;
    o.request_timeout_ms = timeout_ms;
    o.fail_mode = fail_mode;
    o.reconnect_min_ms = 10;
    assert_int_equal(rlc_connect(&c, &o), RLC_OK);
    assert_non_null(c);
    assert_string_equal(rlc_server(c), addr);
    return c;
}

static void test_decisions(void **state)
{
    rlc_check_t req = {.key = "user:u1", .limit = 5, .window_s = 60};
    rlc_result_t res;
    fake_t f;
    rlc_client_t *c = open_client(&f, FAKE_ANSWER, 0, 1000, RLC_FAIL_CLOSED);
    int i;

    (void)state;
    for (i = 1; i <= 6; i++) {
        assert_int_equal(rlc_check(c, &req, &res), RLC_OK);
        assert_int_equal(res.status, RLC_OK);
        assert_int_equal(res.flags, 0);
        assert_int_equal(res.used, (uint64_t)i);
        assert_int_equal(res.limit, 5);
        assert_int_equal(res.window_s, 60);
        assert_int_equal(res.reset_after_ms, 1234);
        assert_true(res.unix_ms > UINT64_C(1600000000000));
        assert_int_equal(res.code, i <= 5 ? RLC_CODE_OK : RLC_CODE_OVER_LIMIT);
        assert_int_equal(res.remaining, i <= 5 ? 5 - i : 0);
        assert_int_equal(res.retry_after_ms, i <= 5 ? 0 : 1234);
    }
    /* A cost counts as that many hits; a rule the server knows, and one
     * it does not (an ERROR answer is still an answer: status 0). */
    req.cost = 3;
    req.key = "user:u2";
    assert_int_equal(rlc_check(c, &req, &res), RLC_OK);
    assert_int_equal(res.used, 3);
    rlc_check_t rule = {.key = "ip:1", .rule = "known"};
    assert_int_equal(rlc_check(c, &rule, &res), RLC_OK);
    assert_int_equal(res.code, RLC_CODE_OK);
    assert_int_equal(res.limit, 10);
    assert_int_equal(res.window_s, 0);
    rule.rule = "unknown";
    assert_int_equal(rlc_check(c, &rule, &res), RLC_OK);
    assert_int_equal(res.code, RLC_CODE_ERROR);
    assert_string_equal(res.error, "unknown rule");
    rlc_free(c);
    fake_stop(&f);
    assert_int_equal(atomic_load(&f.accepted), 1);
}

/* A rule in shadow mode: past its limit the answer is still OK, and the
 * result says it would have been refused, with the server's window; a
 * result filled after it (reused storage) does not keep the mark. Single
 * checks and a batch fill the fields alike. */
static void test_shadow_refused(void **state)
{
    rlc_check_t req = {.key = "s1", .rule = "shadow"};
    rlc_check_t inl = {.key = "s2", .limit = 5, .window_s = 60};
    rlc_check_t reqs[3];
    rlc_result_t res, bres[3];
    fake_t f;
    rlc_client_t *c = open_client(&f, FAKE_ANSWER, 0, 1000, RLC_FAIL_CLOSED);
    int i;

    (void)state;
    for (i = 1; i <= 3; i++) {
        memset(&res, 0xff, sizeof(res));
        assert_int_equal(rlc_check(c, &req, &res), RLC_OK);
        assert_int_equal(res.status, RLC_OK);
        assert_int_equal(res.code, RLC_CODE_OK);
        assert_int_equal(rlc_result_allowed(&res), 1);
        assert_int_equal(rlc_http_status(&res), 200);
        assert_int_equal(res.shadow_refused, i == 3);
        assert_int_equal(res.window_s, 7);
        assert_int_equal(res.limit, 2);
        assert_int_equal(res.used, i < 3 ? (uint64_t)i : 2);
        assert_int_equal(res.retry_after_ms, 0);
    }
    /* The same storage, an inline check: an older server's answer (no
     * window_seconds) keeps the check's window, and no shadow mark. */
    assert_int_equal(rlc_check(c, &inl, &res), RLC_OK);
    assert_int_equal(res.shadow_refused, 0);
    assert_int_equal(res.window_s, 60);

    reqs[0] = req;
    reqs[1] = inl;
    reqs[2] = req;
    memset(bres, 0xff, sizeof(bres));
    assert_int_equal(rlc_check_batch(c, reqs, 3, bres), RLC_OK);
    assert_int_equal(bres[0].shadow_refused, 1);
    assert_int_equal(bres[0].window_s, 7);
    assert_int_equal(bres[1].shadow_refused, 0);
    assert_int_equal(bres[1].window_s, 60);
    assert_int_equal(bres[1].used, 2);
    assert_int_equal(bres[2].shadow_refused, 1);
    assert_int_equal(bres[2].code, RLC_CODE_OK);
    rlc_free(c);
    fake_stop(&f);

    /* No answer: no shadow mark either, whatever the storage held. */
    fake_t g;
    c = open_client(&g, FAKE_SILENT, 0, 100, RLC_FAIL_OPEN);
    memset(&res, 0xff, sizeof(res));
    assert_int_equal(rlc_check(c, &req, &res), RLC_ETIMEDOUT);
    assert_int_equal(res.code, RLC_CODE_OK);
    assert_int_equal(res.flags, RLC_RESULT_FAILED_OPEN);
    assert_int_equal(res.shadow_refused, 0);
    assert_int_equal(res.window_s, 0);
    rlc_free(c);
    fake_stop(&g);
}

/* All N checks reach the fake in one read, and the answers come back to
 * the right slots. */
static void test_batch_is_one_round_trip(void **state)
{
    rlc_check_t reqs[50];
    rlc_result_t res[50];
    char keys[50][16];
    fake_t f;
    rlc_client_t *c = open_client(&f, FAKE_ANSWER, 0, 1000, RLC_FAIL_CLOSED);
    int i;

    (void)state;
    memset(reqs, 0, sizeof(reqs));
    for (i = 0; i < 50; i++) {
        snprintf(keys[i], sizeof(keys[i]), "k%d", i);
        reqs[i].key = keys[i];
        reqs[i].limit = 1000 + (uint64_t)i;
        reqs[i].window_s = 60;
    }
    assert_int_equal(rlc_check_batch(c, reqs, 50, res), RLC_OK);
    for (i = 0; i < 50; i++) {
        assert_int_equal(res[i].status, RLC_OK);
        assert_int_equal(res[i].limit, 1000 + (uint64_t)i);
        assert_int_equal(res[i].used, 1);
    }
    assert_int_equal(atomic_load(&f.reads), 1);
    assert_int_equal(atomic_load(&f.max_burst), 50);
    assert_int_equal(atomic_load(&f.requests), 50);

    /* One bad check in a batch: it alone is refused, the rest go out. */
    reqs[3].key_len = RLC_KEY_MAX + 1;
    static char big[RLC_KEY_MAX + 2];
    memset(big, 'k', sizeof(big) - 1);
    reqs[3].key = big;
    assert_int_equal(rlc_check_batch(c, reqs, 50, res), RLC_EKEYLONG);
    assert_int_equal(res[3].status, RLC_EKEYLONG);
    assert_int_equal(res[3].code, RLC_CODE_ERROR);
    assert_int_equal(res[3].flags, 0);
    assert_int_equal(res[4].status, RLC_OK);
    assert_int_equal(res[4].used, 2);
    assert_int_equal(atomic_load(&f.reads), 2);
    assert_int_equal(atomic_load(&f.requests), 99);
    /* id 0 is the server's (notices): no request carries it */
    assert_int_equal(atomic_load(&f.id0), 0);
    assert_int_equal(rlc_check_batch(c, reqs, 0, res), RLC_OK);
    rlc_free(c);
    fake_stop(&f);
}

static void test_partial_frames(void **state)
{
    rlc_check_t reqs[4] = {
        {.key = "a", .limit = 3, .window_s = 1},
        {.key = "b", .limit = 300, .window_s = 1},
        {.key = "c", .limit = 30000000000ull, .window_s = 1},
        {.key = "a", .limit = 3, .window_s = 1},
    };
    rlc_result_t res[4];
    fake_t f;
    rlc_client_t *c = open_client(&f, FAKE_BYTEWISE, 0, 5000, RLC_FAIL_CLOSED);

    (void)state;
    assert_int_equal(rlc_check_batch(c, reqs, 4, res), RLC_OK);
    assert_int_equal(res[0].limit, 3);
    assert_int_equal(res[1].limit, 300);
    assert_int_equal(res[2].limit, 30000000000ull);
    assert_int_equal(res[3].used, 2);
    rlc_free(c);
    fake_stop(&f);
}

static void test_never_answers(void **state)
{
    rlc_check_t req = {.key = "k", .limit = 5, .window_s = 60};
    rlc_result_t res;
    fake_t f;
    rlc_client_t *c = open_client(&f, FAKE_SILENT, 0, 150, RLC_FAIL_CLOSED);
    uint64_t t0 = rlt_mono_ms(), dt;

    (void)state;
    assert_int_equal(rlc_check(c, &req, &res), RLC_ETIMEDOUT);
    dt = rlt_mono_ms() - t0;
    assert_true(dt >= 149 && dt < 10000);
    assert_int_equal(res.status, RLC_ETIMEDOUT);
    assert_int_equal(res.code, RLC_CODE_ERROR);
    assert_int_equal(res.flags, RLC_RESULT_FAILED_CLOSED);
    assert_non_null(strstr(res.error, "failed closed"));
    rlc_free(c);
    fake_stop(&f);

    c = open_client(&f, FAKE_SILENT, 0, 100, RLC_FAIL_OPEN);
    assert_int_equal(rlc_check(c, &req, &res), RLC_ETIMEDOUT);
    assert_int_equal(res.code, RLC_CODE_OK);
    assert_int_equal(res.flags, RLC_RESULT_FAILED_OPEN);
    assert_int_equal(rlc_result_allowed(&res), 1);
    rlc_free(c);
    fake_stop(&f);
}

/* A check that timed out gets its answer late, during the next call: the
 * next call must take its own answer, not that one. */
static void test_late_answer_is_dropped(void **state)
{
    rlc_check_t a = {.key = "a", .limit = 111, .window_s = 60};
    rlc_check_t b = {.key = "b", .limit = 222, .window_s = 60};
    rlc_result_t res;
    fake_t f;
    rlc_client_t *c =
        open_client(&f, FAKE_DELAY_FIRST, 150, 100, RLC_FAIL_CLOSED);

    (void)state;
    assert_int_equal(rlc_check(c, &a, &res), RLC_ETIMEDOUT);
    assert_int_equal(rlc_check(c, &b, &res), RLC_OK);
    assert_int_equal(res.limit, 222);
    assert_int_equal(rlc_check(c, &a, &res), RLC_OK);
    assert_int_equal(res.limit, 111);
    assert_int_equal(res.used, 2);
    assert_int_equal(atomic_load(&f.accepted), 1);
    rlc_free(c);
    fake_stop(&f);
}

static void test_closes_mid_flight(void **state)
{
    rlc_check_t reqs[5] = {
        {.key = "a", .limit = 3, .window_s = 1},
        {.key = "b", .limit = 3, .window_s = 1},
        {.key = "c", .limit = 3, .window_s = 1},
        {.key = "d", .limit = 3, .window_s = 1},
        {.key = "e", .limit = 3, .window_s = 1},
    };
    rlc_result_t res[5];
    fake_t f;
    rlc_client_t *c =
        open_client(&f, FAKE_CLOSE_AFTER, 2, 2000, RLC_FAIL_CLOSED);
    uint64_t t0 = rlt_mono_ms();
    int i;

    (void)state;
    assert_int_equal(rlc_check_batch(c, reqs, 5, res), RLC_ECLOSED);
    assert_true(rlt_mono_ms() - t0 < 1900); /* not the 2 s timeout */
    for (i = 0; i < 5; i++) {
        assert_int_equal(res[i].status, RLC_ECLOSED);
        assert_int_equal(res[i].flags, RLC_RESULT_FAILED_CLOSED);
    }
    rlc_free(c);
    fake_stop(&f);

    /* Garbage framing from the server is a protocol error. */
    c = open_client(&f, FAKE_GARBAGE, 0, 2000, RLC_FAIL_OPEN);
    assert_int_equal(rlc_check(c, &reqs[0], &res[0]), RLC_EFRAMEFLAG);
    assert_int_equal(res[0].code, RLC_CODE_OK);
    assert_int_equal(res[0].flags, RLC_RESULT_FAILED_OPEN);
    rlc_free(c);
    fake_stop(&f);
}

static void test_reconnect_after_restart(void **state)
{
    rlc_check_t req = {.key = "k", .limit = 5, .window_s = 60};
    rlc_result_t res;
    fake_t f;
    rlc_client_t *c = open_client(&f, FAKE_ANSWER, 0, 1000, RLC_FAIL_CLOSED);
    int port = f.port;

    (void)state;
    assert_int_equal(rlc_check(c, &req, &res), RLC_OK);
    fake_stop(&f);
    /* While the server is down: a clear error, quickly. */
    assert_int_equal(rlc_check(c, &req, &res), RLC_ECLOSED);
    assert_int_equal(res.flags, RLC_RESULT_FAILED_CLOSED);
    assert_int_equal(fake_start(&f, port, FAKE_ANSWER, 0), 0);
    /* The failed attempt put the next one off by the backoff (10 ms min,
     * up to 25% jitter). */
    nanosleep(&(struct timespec){0, 30 * 1000000L}, NULL);
    assert_int_equal(rlc_check(c, &req, &res), RLC_OK);
    assert_int_equal(res.used, 1); /* a new fake: counts start again */
    assert_int_equal(atomic_load(&f.accepted), 1);

    /* A restart between two calls is found before sending: no error. */
    fake_stop(&f);
    assert_int_equal(fake_start(&f, port, FAKE_ANSWER, 0), 0);
    assert_int_equal(rlc_check(c, &req, &res), RLC_OK);
    assert_int_equal(res.status, RLC_OK);
    rlc_free(c);
    fake_stop(&f);
}

/* The second address answers when the first is down. */
static void test_address_list(void **state)
{
    rlc_check_t req = {.key = "k", .limit = 5, .window_s = 60};
    rlc_result_t res;
    rlc_options_t o;
    rlc_client_t *c;
    char list[128];
    fake_t f;
    int dead = rlt_port_reserve(); /* reserved: nothing listens there */

    (void)state;
    assert_int_equal(fake_start(&f, 0, FAKE_ANSWER, 0), 0);
    snprintf(list, sizeof(list), "127.0.0.1:%d, localhost:%d", dead, f.port);
    rlc_options_init(&o);
    o.servers = list;
    assert_int_equal(rlc_connect(&c, &o), RLC_OK);
    assert_int_equal(rlc_check(c, &req, &res), RLC_OK);
    assert_int_equal(res.used, 1);
    snprintf(list, sizeof(list), "localhost:%d", f.port);
    assert_string_equal(rlc_server(c), list);
    rlc_free(c);
    fake_stop(&f);
}

/* A listener whose backlog is full leaves a connect hanging: the connect
 * timeout must end it. */
static void test_connect_timeout(void **state)
{
    struct sockaddr_in sa;
    socklen_t len = sizeof(sa);
    rlc_options_t o;
    rlc_client_t *c = NULL;
    int lfd = socket(AF_INET, SOCK_STREAM, 0), fill[8], i, rc;
    char a[64];
    uint64_t t0;

    (void)state;
    memset(&sa, 0, sizeof(sa));
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(bind(lfd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    assert_int_equal(listen(lfd, 0), 0);
    assert_int_equal(getsockname(lfd, (struct sockaddr *)&sa, &len), 0);
    for (i = 0; i < 8; i++) {
        struct timeval tv = {0, 50000};
        fill[i] = socket(AF_INET, SOCK_STREAM, 0);
        setsockopt(fill[i], SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
        (void)connect(fill[i], (struct sockaddr *)&sa, sizeof(sa));
    }
    snprintf(a, sizeof(a), "127.0.0.1:%d", ntohs(sa.sin_port));
    rlc_options_init(&o);
    o.servers = a;
    o.connect_timeout_ms = 200;
    t0 = rlt_mono_ms();
    rc = rlc_connect(&c, &o);
    assert_int_equal(rc, RLC_ETIMEDOUT);
    assert_null(c);
    assert_true(rlt_mono_ms() - t0 >= 199);
    assert_true(rlt_mono_ms() - t0 < 2000);
    for (i = 0; i < 8; i++)
        close(fill[i]);
    close(lfd);
}

static void test_misuse(void **state)
{
    rlc_options_t o;
    rlc_client_t *c = (rlc_client_t *)&o;
    rlc_result_t res;
    char big[RLC_KEY_MAX + 2], rule[RLC_RULE_MAX + 2];
    fake_t f;

    (void)state;
    assert_int_equal(rlc_connect(NULL, NULL), RLC_EINVAL);
    assert_int_equal(rlc_connect(&c, NULL), RLC_EINVAL);
    assert_null(c);
    rlc_options_init(&o);
    assert_int_equal(rlc_connect(&c, &o), RLC_EINVAL); /* no servers */
    const char *bad[] = {"",
                         "127.0.0.1",
                         "127.0.0.1:",
                         ":80",
                         "1.2.3.4:0",
                         "1.2.3.4:65536",
                         "1.2.3.4:80x",
                         "[::1:80",
                         "::1:7390", /* a bare IPv6 address: ambiguous */
                         "no-such-host.invalid:80",
                         "127.0.0.1:80,",
                         "a:b:c"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        o.servers = bad[i];
        assert_int_equal(rlc_connect(&c, &o), RLC_EADDR);
        assert_null(c);
    }
    o.servers = "127.0.0.1:1";
    o.request_timeout_ms = 0;
    assert_int_equal(rlc_connect(&c, &o), RLC_EINVAL);
    rlc_options_init(&o);
    o.servers = "127.0.0.1:1";
    o.fail_mode = 7;
    assert_int_equal(rlc_connect(&c, &o), RLC_EINVAL);
    o.fail_mode = RLC_FAIL_CLOSED;
    assert_int_equal(rlc_connect(&c, &o), RLC_ECLOSED); /* refused */
    assert_null(c);

    c = open_client(&f, FAKE_ANSWER, 0, 1000, RLC_FAIL_OPEN);
    rlc_check_t req = {.key = NULL, .limit = 5, .window_s = 60};
    assert_int_equal(rlc_check(c, &req, &res), RLC_EKEYEMPTY);
    /* Invalid input is never decided by the fail-open policy. */
    assert_int_equal(res.code, RLC_CODE_ERROR);
    assert_int_equal(res.flags, 0);
    req.key = "";
    assert_int_equal(rlc_check(c, &req, &res), RLC_EKEYEMPTY);
    memset(big, 'k', sizeof(big));
    big[RLC_KEY_MAX + 1] = '\0';
    req.key = big;
    assert_int_equal(rlc_check(c, &req, &res), RLC_EKEYLONG);
    assert_string_equal(res.error, "key is longer than 512 bytes");
    big[RLC_KEY_MAX] = '\0'; /* exactly the maximum is fine */
    assert_int_equal(rlc_check(c, &req, &res), RLC_OK);
    req.key = "a\0b";
    req.key_len = 3;
    assert_int_equal(rlc_check(c, &req, &res), RLC_EKEYNUL);
    req.key = "k";
    req.key_len = 0;
    req.window_s = 0;
    assert_int_equal(rlc_check(c, &req, &res), RLC_EWINDOW);
    req.limit = 0;
    assert_int_equal(rlc_check(c, &req, &res), RLC_ENOLIMIT);
    req.rule = "has space";
    assert_int_equal(rlc_check(c, &req, &res), RLC_ERULEBAD);
    memset(rule, 'r', sizeof(rule));
    rule[RLC_RULE_MAX + 1] = '\0';
    req.rule = rule;
    assert_int_equal(rlc_check(c, &req, &res), RLC_ERULELONG);
    req.rule = "known";
    req.limit = 5;
    assert_int_equal(rlc_check(c, &req, &res), RLC_EBOTH);
    assert_int_equal(rlc_check(c, NULL, &res), RLC_EINVAL);
    assert_int_equal(res.status, RLC_EINVAL);
    assert_int_equal(rlc_check(NULL, &req, &res), RLC_EINVAL);
    assert_int_equal(rlc_check(c, &req, NULL), RLC_EINVAL);
    assert_int_equal(rlc_check_batch(c, NULL, 2, NULL), RLC_EINVAL);
    /* None of those reached the server. */
    assert_int_equal(atomic_load(&f.requests), 1);
    rlc_free(c);
    rlc_free(NULL);
    assert_string_equal(rlc_server(NULL), "");
    fake_stop(&f);
}

/* GOAWAY while a batch waits: the notice comes after two answers, the
 * other eight 20 ms later. The batch still gets every answer; then the
 * client closes that connection (after whole frames), and the next call
 * goes out on a new one. */
static void test_goaway_during_batch(void **state)
{
    rlc_check_t reqs[10];
    rlc_result_t res[10], one;
    char keys[10][16];
    fake_t f;
    rlc_client_t *c = open_client(&f, FAKE_GOAWAY, 3, 2000, RLC_FAIL_CLOSED);
    int i;

    (void)state;
    memset(reqs, 0, sizeof(reqs));
    for (i = 0; i < 10; i++) {
        snprintf(keys[i], sizeof(keys[i]), "k%d", i);
        reqs[i].key = keys[i];
        reqs[i].limit = 100 + (uint64_t)i;
        reqs[i].window_s = 60;
    }
    assert_int_equal(rlc_check_batch(c, reqs, 10, res), RLC_OK);
    for (i = 0; i < 10; i++) {
        assert_int_equal(res[i].status, RLC_OK);
        assert_int_equal(res[i].code, RLC_CODE_OK);
        assert_int_equal(res[i].limit, 100 + (uint64_t)i);
    }
    assert_int_equal(atomic_load(&f.notices), 1);
    /* Closed when the call returned, not at the next call. */
    assert_true(fake_wait(&f.left, 1, 1000));
    assert_int_equal(atomic_load(&f.partial), 0);
    assert_int_equal(atomic_load(&f.conn_requests[0]), 10);

    assert_int_equal(rlc_check(c, &reqs[0], &one), RLC_OK);
    assert_int_equal(one.status, RLC_OK);
    assert_int_equal(one.used, 2);
    assert_int_equal(atomic_load(&f.accepted), 2);
    assert_int_equal(atomic_load(&f.conn_requests[1]), 1);
    rlc_free(c);
    fake_stop(&f);
}

/* GOAWAY on an idle connection: it is found before anything is sent, and
 * the next call succeeds on a new connection, with no error. */
static void test_goaway_idle(void **state)
{
    rlc_check_t req = {.key = "k", .limit = 5, .window_s = 60};
    rlc_result_t res;
    fake_t f;
    rlc_client_t *c = open_client(&f, FAKE_ANSWER, 0, 1000, RLC_FAIL_CLOSED);

    (void)state;
    assert_int_equal(rlc_check(c, &req, &res), RLC_OK);
    assert_int_equal(fake_goaway(&f), 1);
    /* Let the notice reach the client's socket. */
    nanosleep(&(struct timespec){0, 20 * 1000000L}, NULL);
    assert_int_equal(rlc_check(c, &req, &res), RLC_OK);
    assert_int_equal(res.status, RLC_OK);
    assert_int_equal(res.used, 2);
    assert_int_equal(atomic_load(&f.accepted), 2);
    assert_int_equal(atomic_load(&f.conn_requests[0]), 1);
    assert_int_equal(atomic_load(&f.conn_requests[1]), 1);
    assert_int_equal(atomic_load(&f.after_notice), 0);
    assert_true(fake_wait(&f.left, 1, 1000));
    assert_int_equal(atomic_load(&f.partial), 0);
    /* The new connection is used from then on. */
    assert_int_equal(rlc_check(c, &req, &res), RLC_OK);
    assert_int_equal(atomic_load(&f.accepted), 2);
    rlc_free(c);
    fake_stop(&f);
}

/* GOAWAY from the first of two servers: the next call goes to the second
 * (the address list moves on), even though the first still listens. */
static void test_goaway_moves_on(void **state)
{
    rlc_check_t req = {.key = "k", .limit = 5, .window_s = 60};
    rlc_result_t res;
    rlc_options_t o;
    rlc_client_t *c;
    fake_t a, b;
    char list[128], first[64], second[64];

    (void)state;
    assert_int_equal(fake_start(&a, 0, FAKE_ANSWER, 0), 0);
    assert_int_equal(fake_start(&b, 0, FAKE_ANSWER, 0), 0);
    snprintf(list, sizeof(list), "127.0.0.1:%d,127.0.0.1:%d", a.port, b.port);
    snprintf(first, sizeof(first), "127.0.0.1:%d", a.port);
    snprintf(second, sizeof(second), "127.0.0.1:%d", b.port);
    rlc_options_init(&o);
    o.servers = list;
    assert_int_equal(rlc_connect(&c, &o), RLC_OK);
    assert_int_equal(rlc_check(c, &req, &res), RLC_OK);
    assert_string_equal(rlc_server(c), first);
    assert_int_equal(fake_goaway(&a), 1);
    nanosleep(&(struct timespec){0, 20 * 1000000L}, NULL);
    assert_int_equal(rlc_check(c, &req, &res), RLC_OK);
    assert_string_equal(rlc_server(c), second);
    assert_int_equal(atomic_load(&a.accepted), 1);
    assert_int_equal(atomic_load(&b.requests), 1);
    rlc_free(c);
    fake_stop(&a);
    fake_stop(&b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_decisions),
        cmocka_unit_test(test_shadow_refused),
        cmocka_unit_test(test_batch_is_one_round_trip),
        cmocka_unit_test(test_partial_frames),
        cmocka_unit_test(test_never_answers),
        cmocka_unit_test(test_late_answer_is_dropped),
        cmocka_unit_test(test_closes_mid_flight),
        cmocka_unit_test(test_reconnect_after_restart),
        cmocka_unit_test(test_address_list),
        cmocka_unit_test(test_connect_timeout),
        cmocka_unit_test(test_misuse),
        cmocka_unit_test(test_goaway_during_batch),
        cmocka_unit_test(test_goaway_idle),
        cmocka_unit_test(test_goaway_moves_on),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
