/* The HTTP check endpoint in process, for what cannot be arranged from
 * outside: the batcher answering a check before rls_batcher_add returns,
 * i.e. before the route has returned (a batch that fills is submitted at
 * once, and the memory store answers in its submit). With the batch size
 * forced to 1, every check takes that path; pipelined checks on one
 * connection and checks on several connections must all be answered, in
 * order, exactly once, and the server must stop cleanly (every handle
 * closed, nothing leaked under ASan). */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>
#include <uv.h>

#include "rl_error.h"
#include "rlt.h"
#include "inproc.h"
#include "server.h"
#include "store/memory.h"

/* Reads until `n` responses (each ending in "allowed\n" or "over
 * limit\n") have come; returns the bytes read, NUL-terminated, in buf. */
static size_t read_answers(int fd, char *buf, size_t cap, int n)
{
    size_t len = 0;
    int seen = 0;
    const char *p;

    while (seen < n) {
        ssize_t got = recv(fd, buf + len, cap - 1 - len, 0);
        assert_true(got > 0);
        len += (size_t)got;
        buf[len] = '\0';
        for (seen = 0, p = buf; (p = strstr(p, "HTTP/1.1 ")) != NULL; p++)
            seen++;
        /* The last one must be whole: its body ends the buffer. */
        if (seen == n &&
            !(len >= 8 && (strcmp(buf + len - 8, "allowed\n") == 0 ||
                           strcmp(buf + len - 11, "over limit\n") == 0)))
            seen--;
    }
    return len;
}

static void test_answered_inside_add(void **state)
{
    static char buf[1 << 18];
    static const char req[] = "GET /check?rule=api&key=k HTTP/1.1\r\n\r\n";
    char rule[] = "api=10/3600s", more[64 * sizeof(req)];
    inproc_t *f = *state;
    rls_store_t *st;
    const char *p;
    int fd[3], i, k, allowed = 0, refused = 0, last = 11;

    rls_flags_defaults(&f->cfg);
    /* Port 0: the system picks; the server says which it bound. */
    f->cfg.listen_port = 0;
    strcpy(f->cfg.http_host, "127.0.0.1");
    f->cfg.http_port = 0;
    f->cfg.rules[0] = rule;
    f->cfg.nrules = 1;
    f->cfg.refusal_cache = 0; /* every refusal from the store */
    assert_int_equal(uv_loop_init(&f->loop), 0);
    st = rls_store_memory_new(&f->loop);
    assert_non_null(st);
    assert_int_equal(rls_server_start(&f->srv, &f->loop, &f->cfg, st, NULL,
                                      f->err, sizeof(f->err)),
                     0);
    f->hport = rls_server_port(&f->srv, RLS_LISTENER_HTTP);
    assert_true(f->hport > 0);
    /* Before the loop runs: each check fills a batch by itself. */
    rls_decider_set_max_reqs(&f->srv.decider, 1);
    inproc_run(f);
    assert_true(rlt_wait_port(f->hport, 5000));

    /* 3 connections x 8 pipelined checks of one key with limit 10: the
     * answers on each connection come in order (remaining counts down),
     * 10 allowed and 14 refused in all. */
    for (k = 0; k < 3; k++) {
        fd[k] = rlt_dial(f->hport);
        assert_true(fd[k] >= 0);
    }
    for (i = 0; i < 8; i++)
        memcpy(more + i * (sizeof(req) - 1), req, sizeof(req) - 1);
    for (k = 0; k < 3; k++)
        assert_int_equal(rlt_send_all(fd[k], more, 8 * (sizeof(req) - 1)),
                         RL_OK);
    for (k = 0; k < 3; k++) {
        int prev = 11;
        read_answers(fd[k], buf, sizeof(buf), 8);
        for (p = buf; (p = strstr(p, "X-RateLimit-Remaining: ")) != NULL; p++) {
            int rem = atoi(p + 23);
            assert_true(rem <= prev); /* in order */
            prev = rem;
        }
        for (p = buf; (p = strstr(p, "HTTP/1.1 200")) != NULL; p++)
            allowed++;
        for (p = buf; (p = strstr(p, "HTTP/1.1 429")) != NULL; p++)
            refused++;
        if (prev < last)
            last = prev;
        close(fd[k]);
    }
    assert_int_equal(allowed, 10);
    assert_int_equal(refused, 14);
    assert_int_equal(last, 0);
    assert_int_equal(rls_decider_stats(&f->srv.decider)->size.count, 24);

    inproc_stop(f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        INPROC_TEST(test_answered_inside_add),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
