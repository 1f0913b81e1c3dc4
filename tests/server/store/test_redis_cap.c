/* The cap on what one Redis reply may make rl-server hold
 * (store/redis_reply_alloc.h), on hiredis's reader as the connections use
 * it (redis_uv.c checks after every read): a "$N" header over the cap is
 * refused before its bytes come, at every split of the header; unread
 * bytes and built objects each stop at the cap, exactly at its edge; a
 * line stops at RLS_REDIS_LINE_MAX; each over is counted once; and the
 * largest reply rl-server asks a data node for (a whole batch of sliding
 * windows' logs) fits under RLS_REDIS_CAP_NODE, fed in hiredis's 16 KiB
 * reads. The blocking connection (rl-ctl's, store/redis_sync.c) under
 * the same cap against a peer thread that streams an endless reply. The
 * whole path (a hostile node and sentinels streaming a "$4000000000"
 * reply at rl-server) is e2e_redis_reply_cap. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sys/socket.h>
#include <unistd.h>

#include <hiredis/hiredis.h>

#include "rl_admit.h"
#include "rl_error.h"
#include "store/redis_reply_alloc.h"
#include "store/redis_sync.h"

/* A batch's most requests (server.c's RLS_BATCH_MAX). */
#define BATCH_MAX 1024

typedef struct {
    redisReader *rd;
    rls_redis_reply_cap_t cap;
    uint64_t count;
    void *rep; /* the last whole reply */
    int replies;
} fx_t;

static void fx_open(fx_t *f, size_t max)
{
    memset(f, 0, sizeof(*f));
    f->rd = redisReaderCreate();
    assert_non_null(f->rd);
    rls_redis_reply_cap_attach(f->rd, &f->cap, max, &f->count);
}

static void fx_close(fx_t *f)
{
    rls_redis_reply_fns.freeObject(f->rep);
    redisReaderFree(f->rd);
}

/* Feeds n bytes as one read and takes the replies, as redis_uv.c does;
 * returns the check's verdict (RL_EIO when hiredis failed the reply). */
static int feed(fx_t *f, const char *p, size_t n)
{
    void *rep;

    assert_int_equal(redisReaderFeed(f->rd, p, n), REDIS_OK);
    for (;;) {
        if (redisReaderGetReply(f->rd, &rep) != REDIS_OK)
            return RL_EIO;
        if (rep == NULL)
            break;
        rls_redis_reply_fns.freeObject(f->rep);
        f->rep = rep;
        f->replies++;
    }
    return rls_redis_reply_cap_check(&f->cap, f->rd);
}

static int feed_str(fx_t *f, const char *s)
{
    return feed(f, s, strlen(s));
}

/* The header alone is enough to refuse: at every split of it, the first
 * read that shows more digits than fit is refused, and nothing of the
 * 4 GB is ever fed. */
static void test_header_refused(void **state)
{
    static const char *const heads[] = {
        "$4000000000\r\n",
        "*2\r\n$9\r\n127.0.0.1\r\n$4000000000\r\n",
        "*3\r\n$7\r\nmessage\r\n$14\r\n+switch-master\r\n$70000\r\n",
        "$9000000000000000000\r\n",
    };
    size_t i, n, cut;
    fx_t f;

    (void)state;
    for (i = 0; i < sizeof(heads) / sizeof(heads[0]); i++) {
        n = strlen(heads[i]);
        for (cut = 1; cut < n; cut++) {
            fx_open(&f, RLS_REDIS_CAP_SENTINEL);
            if (feed(&f, heads[i], cut) == 0 &&
                feed(&f, heads[i] + cut, n - cut) != RL_EFULL)
                fail_msg("%s cut at %zu: not refused", heads[i], cut);
            assert_int_equal(f.cap.over, 1);
            assert_int_equal(f.count, 1);
            /* Asked again (the next read), still over, counted once. */
            assert_int_equal(feed_str(&f, "xxxx"), RL_EFULL);
            assert_int_equal(f.count, 1);
            assert_null(f.rep);
            fx_close(&f);
        }
    }
    /* More digits than any length has, before the line ends (once it
     * ends, hiredis makes a nil of what overflows: nothing to hold). */
    fx_open(&f, RLS_REDIS_CAP_NODE);
    assert_int_equal(feed_str(&f, "$1234567890123456789"), RL_EFULL);
    fx_close(&f);
    fx_open(&f, RLS_REDIS_CAP_NODE);
    assert_int_equal(feed_str(&f, "$123456789012"), RL_EFULL);
    fx_close(&f);
    fx_open(&f, RLS_REDIS_CAP_NODE);
    assert_int_equal(feed_str(&f, "$1677721"), 0); /* 1.6 MB may fit */
    assert_int_equal(feed_str(&f, "6"), RL_EFULL); /* 16 MiB does not */
    fx_close(&f);
}

/* A string of exactly what fits is read; one byte more is refused, by
 * its header (a string alone) or when its object is made (in an array,
 * behind what the array took). */
static void test_string_edge(void **state)
{
    const size_t max = 4096;
    char head[64], *body = malloc(max);
    size_t len;
    fx_t f;

    (void)state;
    assert_non_null(body);
    memset(body, 'x', max);
    /* Alone: its bytes, NUL and its reply. */
    len = max - 1 - sizeof(redisReply);
    fx_open(&f, max);
    snprintf(head, sizeof(head), "$%zu\r\n", len);
    assert_int_equal(feed_str(&f, head), 0);
    assert_int_equal(feed(&f, body, len), 0);
    assert_int_equal(feed_str(&f, "\r\n"), 0);
    assert_int_equal(f.replies, 1);
    assert_int_equal(((redisReply *)f.rep)->len, len);
    assert_int_equal(f.cap.used, max);
    assert_int_equal(f.count, 0);
    /* The next reply starts its own count: the same again fits. */
    assert_int_equal(feed_str(&f, head), 0);
    assert_int_equal(feed(&f, body, len), 0);
    assert_int_equal(feed_str(&f, "\r\n"), 0);
    assert_int_equal(f.replies, 2);
    fx_close(&f);

    fx_open(&f, max);
    snprintf(head, sizeof(head), "$%zu\r\n", len + 1);
    assert_int_equal(feed_str(&f, head), 0); /* the header fits... */
    assert_int_equal(feed(&f, body, len + 1), 0);
    /* ...the object does not: hiredis fails the reply. */
    assert_int_equal(feed_str(&f, "\r\n"), RL_EIO);
    assert_int_equal(f.cap.over, 1);
    assert_int_equal(f.count, 1);
    assert_int_equal(f.replies, 0);
    fx_close(&f);

    /* In an array of one: the array's block, then the string's bytes. */
    len = max - 1 -
          (sizeof(redisReply) + sizeof(redisReply *) + sizeof(redisReply));
    fx_open(&f, max);
    snprintf(head, sizeof(head), "*1\r\n$%zu\r\n", len);
    assert_int_equal(feed_str(&f, head), 0);
    assert_int_equal(feed(&f, body, len), 0);
    assert_int_equal(feed_str(&f, "\r\n"), 0);
    assert_int_equal(f.replies, 1);
    assert_int_equal(f.cap.used, max);
    fx_close(&f);
    fx_open(&f, max);
    snprintf(head, sizeof(head), "*1\r\n$%zu\r\n", len + 1);
    assert_int_equal(feed_str(&f, head), RL_EFULL); /* behind the array */
    assert_int_equal(f.count, 1);
    fx_close(&f);
    free(body);
}

/* Arrays: an element count over the cap is refused before anything is
 * reserved; elements that keep coming stop at the cap. */
static void test_array(void **state)
{
    char buf[64];
    int i, rc = 0;
    fx_t f;

    (void)state;
    fx_open(&f, RLS_REDIS_CAP_SENTINEL);
    assert_int_equal(feed_str(&f, "*1000000\r\n"), RL_EIO);
    assert_int_equal(f.cap.over, 1);
    assert_int_equal(f.count, 1);
    fx_close(&f);
    /* Nested arrays, each within the cap alone, not together. */
    fx_open(&f, RLS_REDIS_CAP_SENTINEL);
    assert_int_equal(feed_str(&f, "*100\r\n"), 0);
    for (i = 0; i < 100 && rc == 0; i++) {
        snprintf(buf, sizeof(buf), "*%d\r\n", 1000);
        rc = feed_str(&f, buf);
    }
    assert_int_equal(rc, RL_EIO);
    assert_true(i < 100);
    assert_int_equal(f.count, 1);
    assert_true(f.cap.used <= RLS_REDIS_CAP_SENTINEL);
    fx_close(&f);
}

/* Lines, and a string's length line, that never end. */
static void test_lines(void **state)
{
    char *junk = malloc(RLS_REDIS_LINE_MAX + 1);
    static const char *const starts[] = {"+", "-", ":", "*"};
    size_t i;
    fx_t f;

    (void)state;
    assert_non_null(junk);
    memset(junk, '1', RLS_REDIS_LINE_MAX + 1);
    for (i = 0; i < sizeof(starts) / sizeof(starts[0]); i++) {
        fx_open(&f, RLS_REDIS_CAP_NODE);
        assert_int_equal(feed_str(&f, starts[i]), 0);
        assert_int_equal(feed(&f, junk, RLS_REDIS_LINE_MAX - 1), 0);
        assert_int_equal(feed(&f, junk, 2), RL_EFULL);
        assert_int_equal(f.count, 1);
        fx_close(&f);
    }
    /* A length line of anything but digits: 23 bytes are still one. */
    memset(junk, 'y', 64);
    fx_open(&f, RLS_REDIS_CAP_NODE);
    assert_int_equal(feed_str(&f, "$"), 0);
    assert_int_equal(feed(&f, junk, 23), 0);
    assert_int_equal(feed(&f, junk, 1), RL_EFULL);
    fx_close(&f);
    /* Unread bytes past the cap, whatever they are: a string that fits
     * by its length, whose bytes with their header do not. */
    fx_open(&f, 64);
    assert_int_equal(feed_str(&f, "$62\r\n"), 0);
    assert_int_equal(feed(&f, junk, 60), 0);
    assert_int_equal(feed(&f, junk, 2), RL_EFULL);
    fx_close(&f);
    free(junk);
}

/* Appends one RESP integer of 19 digits. */
static size_t put_int(char *p)
{
    memcpy(p, ":9223372036854775807\r\n", 22);
    return 22;
}

/* The largest batch reply: BATCH_MAX ops, each its admitted count and
 * RL_ADMIT_WINDOWS_MAX sliding-window logs' states (sum, newest time,
 * m, then m = RL_SWL_PREFIX oldest times and costs), every integer at
 * 19 digits; then one refusal text. Fed in hiredis's 16 KiB reads under
 * the data nodes' cap: read whole, never over. */
static void test_largest_batch_fits(void **state)
{
    const size_t per_op = 1 + RL_ADMIT_WINDOWS_MAX * (3 + 2 * RL_SWL_PREFIX);
    const size_t ints = BATCH_MAX * per_op;
    static const char oom[] = "OOM command not allowed when used memory > "
                              "'maxmemory'.";
    size_t len, off, n, i;
    char *resp = malloc(ints * 22 + 1024);
    redisReply *r;
    fx_t f;

    (void)state;
    assert_non_null(resp);
    len = (size_t)sprintf(resp, "*%zu\r\n", ints + 1);
    for (i = 0; i < ints; i++)
        len += put_int(resp + len);
    len += (size_t)sprintf(resp + len, "$%zu\r\n%s\r\n", strlen(oom), oom);
    fx_open(&f, RLS_REDIS_CAP_NODE);
    for (off = 0; off < len; off += n) {
        n = len - off < 16384 ? len - off : 16384;
        assert_int_equal(feed(&f, resp + off, n), 0);
    }
    assert_int_equal(f.replies, 1);
    r = f.rep;
    assert_int_equal(r->type, REDIS_REPLY_ARRAY);
    assert_int_equal(r->elements, ints + 1);
    assert_int_equal(f.count, 0);
    /* What the figure in redis_reply_alloc.h says, and 3x room. */
    print_message("largest batch reply: %zu integers, %zu bytes on the "
                  "wire, %zu bytes of objects, cap %zu\n",
                  ints, len, f.cap.used, RLS_REDIS_CAP_NODE);
    assert_true(f.cap.used * 3 <= RLS_REDIS_CAP_NODE);
    fx_close(&f);
    free(resp);
}

/* Without a cap (privdata NULL: tests, fuzzing) only the element bound
 * applies, as before. */
static void test_uncapped(void **state)
{
    redisReader *rd = redisReaderCreateWithFunctions(&rls_redis_reply_fns);
    void *rep = NULL;

    (void)state;
    assert_non_null(rd);
    assert_int_equal(redisReaderFeed(rd, "*2\r\n:1\r\n$3\r\nabc\r\n", 17),
                     REDIS_OK);
    assert_int_equal(redisReaderGetReply(rd, &rep), REDIS_OK);
    assert_non_null(rep);
    assert_int_equal(((redisReply *)rep)->elements, 2);
    rls_redis_reply_fns.freeObject(rep);
    assert_int_equal(redisReaderFeed(rd, "*2000000\r\n", 10), REDIS_OK);
    assert_int_equal(redisReaderGetReply(rd, &rep), REDIS_ERR);
    redisReaderFree(rd);
}

/* ---- the blocking connection ------------------------------------------*/

/* What the peer streams at most, if the client never stops it. */
#define ENDLESS_MAX ((size_t)256 << 20)

typedef struct {
    int lfd, port;
    const char *head; /* sent after the first command */
    const char *body; /* then this, again and again */
    size_t sent;      /* bytes of body the socket took */
    pthread_t th;
} peer_t;

static void *peer_main(void *arg)
{
    peer_t *p = arg;
    char buf[16384];
    int fd = accept(p->lfd, NULL, NULL);
    ssize_t n;

    if (fd < 0)
        return NULL;
    if (recv(fd, buf, sizeof(buf), 0) > 0 &&
        send(fd, p->head, strlen(p->head), MSG_NOSIGNAL) > 0) {
        for (n = 0; n + (ssize_t)strlen(p->body) <= (ssize_t)sizeof(buf);
             n += (ssize_t)strlen(p->body))
            memcpy(buf + n, p->body, strlen(p->body));
        while (p->sent < ENDLESS_MAX &&
               (n = send(fd, buf, sizeof(buf), MSG_NOSIGNAL)) > 0)
            p->sent += (size_t)n;
    }
    close(fd);
    return NULL;
}

static void peer_start(peer_t *p, const char *head, const char *body)
{
    struct sockaddr_in a;
    socklen_t len = sizeof(a);

    memset(p, 0, sizeof(*p));
    p->head = head;
    p->body = body;
    p->lfd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(p->lfd >= 0);
    memset(&a, 0, sizeof(a));
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(bind(p->lfd, (struct sockaddr *)&a, sizeof(a)), 0);
    assert_int_equal(listen(p->lfd, 1), 0);
    assert_int_equal(getsockname(p->lfd, (struct sockaddr *)&a, &len), 0);
    p->port = ntohs(a.sin_port);
    assert_int_equal(pthread_create(&p->th, NULL, peer_main, p), 0);
}

/* One command against a peer that answers with head and then body
 * without end: no reply, the reason names the cap, and the peer could
 * write no more than the cap and what the sockets buffer. */
static void sync_refuses(const char *head, const char *body)
{
    const char *argv[] = {"PING"};
    rls_redis_sync_t *s;
    char err[256];
    peer_t p;

    peer_start(&p, head, body);
    s = rls_redis_sync_connect("127.0.0.1", p.port, NULL, 10000, err,
                               sizeof(err));
    assert_non_null(s);
    assert_null(rls_redis_sync_command(s, 1, argv, NULL));
    print_message("reason: %s\n", rls_redis_sync_errstr(s));
    if (strstr(rls_redis_sync_errstr(s), "a reply went past the cap") == NULL)
        fail_msg("reason '%s'", rls_redis_sync_errstr(s));
    rls_redis_sync_free(s);
    pthread_join(p.th, NULL);
    close(p.lfd);
    print_message("the peer wrote %zu bytes\n", p.sent);
    assert_true(p.sent < RLS_REDIS_CAP_NODE + ((size_t)16 << 20));
}

static void test_sync_endless_string(void **state)
{
    (void)state;
    sync_refuses("$4000000000\r\n", "x");
}

static void test_sync_endless_line(void **state)
{
    (void)state;
    sync_refuses("-ERR ", "x");
}

/* An array whose pointers fit, and whose elements keep coming: refused
 * once hiredis's objects for them pass the cap; one announcing more
 * pointers than fit, at its header. */
static void test_sync_endless_array(void **state)
{
    (void)state;
    sync_refuses("*2000000\r\n", ":1\r\n");
    sync_refuses("*2000000000\r\n", ":1\r\n");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_header_refused),
        cmocka_unit_test(test_string_edge),
        cmocka_unit_test(test_array),
        cmocka_unit_test(test_lines),
        cmocka_unit_test(test_largest_batch_fits),
        cmocka_unit_test(test_uncapped),
        cmocka_unit_test(test_sync_endless_string),
        cmocka_unit_test(test_sync_endless_line),
        cmocka_unit_test(test_sync_endless_array),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
