/* The Redis store's pure parts, without Redis: the command a batch
 * becomes (redis_encode.c), its reply read back (redis_parse.c, through
 * the reply objects of redis_reply_alloc.c), and the clock
 * (redis_clock.c). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <hiredis/hiredis.h>

#include "rl_admit.h"
#include "rl_error.h"
#include "rl_window.h"
#include "store/redis_clock.h"
#include "store/redis_encode.h"
#include "store/redis_parse.h"
#include "store/redis_reply_alloc.h"
#include "store/redis_script.h"
#include "store/store.h"

/* ---- the command and its reply, without Redis ---------------------------*/

/* ops[0..n): nwin windows and ncosts costs each. */
static void parse_ops(rls_op_t *ops,
                      rls_op_window_t (*win)[RL_ADMIT_WINDOWS_MAX], size_t n,
                      uint32_t nwin, uint32_t ncosts)
{
    size_t i;

    memset(ops, 0, n * sizeof(*ops));
    memset(win, 0, n * sizeof(*win));
    for (i = 0; i < n; i++) {
        ops[i].win = win[i];
        ops[i].nwin = nwin;
        ops[i].ncosts = ncosts;
    }
}

/* RESP for a reply written "e1|e2|...": an element ":N" is an integer,
 * "-T" an error, "+T" a status, "~" a nil, "*" an empty array, anything
 * else a string; "=T" alone is the string reply T, "" an empty array. */
static size_t resp_of(const char *note, char *out, size_t cap)
{
    size_t n = 0, k = 0, len = strlen(note);
    const char *p = note, *e;

    if (note[0] == '=')
        return (size_t)snprintf(out, cap, "$%zu\r\n%s\r\n", len - 1, note + 1);
    if (len > 0)
        for (n = 1, e = note; (e = strchr(e, '|')) != NULL; e++)
            n++;
    k = (size_t)snprintf(out, cap, "*%zu\r\n", n);
    while (n-- > 0) {
        size_t el;
        e = strchr(p, '|');
        el = e ? (size_t)(e - p) : strlen(p);
        if (el > 0 && (p[0] == ':' || p[0] == '-' || p[0] == '+'))
            k += (size_t)snprintf(out + k, cap - k, "%.*s\r\n", (int)el, p);
        else if (el == 1 && p[0] == '~')
            k += (size_t)snprintf(out + k, cap - k, "$-1\r\n");
        else if (el == 1 && p[0] == '*')
            k += (size_t)snprintf(out + k, cap - k, "*0\r\n");
        else
            k += (size_t)snprintf(out + k, cap - k, "$%zu\r\n%.*s\r\n", el,
                                  (int)el, p);
        assert_true(k < cap);
        p = e ? e + 1 : p + el;
    }
    return k;
}

/* Reads the reply `note` (see resp_of) as the store does, through a hiredis
 * reader making the store's objects (redis_reply_alloc.c), and parses it. The
 * reply (errs->text points into it) lives until the next call, or until a
 * call with a NULL note frees it. */
static int parse_note(const char *note, rls_op_t *ops, size_t n,
                      rls_op_window_t *quota_win, rls_redis_errs_t *errs)
{
    static char resp[8192];
    static void *rep;
    redisReader *rd;
    size_t len;

    rls_redis_reply_fns.freeObject(rep);
    rep = NULL;
    if (note == NULL)
        return 0;
    len = resp_of(note, resp, sizeof(resp));
    rd = redisReaderCreateWithFunctions(&rls_redis_reply_fns);
    assert_non_null(rd);
    assert_int_equal(redisReaderFeed(rd, resp, len), REDIS_OK);
    assert_int_equal(redisReaderGetReply(rd, &rep), REDIS_OK);
    redisReaderFree(rd);
    assert_non_null(rep);
    return rls_redis_parse_reply(rep, ops, n, quota_win, errs);
}

static void test_parse_counts(void **state)
{
    /* For 3 ops of 2 windows and 3 costs each; "G" stands for two good
     * ops after the one under test. */
#define G "|:1|:2|:3|:1|:2|:3"
    static const char *const bad[] = {
        "",
        "x",
        "=x",
        "=1 2 3",
        ":1|:2|:3",               /* too few ops */
        ":1|:2|:3" G "|:1|:2|:3", /* an op too many */
        ":1|:2" G,                /* a window's count missing */
        ":1|:2|:3|:4" G,          /* a window too many */
        ":4|:2|:3" G,             /* admitted > ncosts */
        ":-1|:2|:3" G,
        ":1|x|:3" G, /* a count that is a string */
        ":1|~|:3" G,
        ":1|:2|*" G,
        "~" G,
        "*" G,
        "-ERR x" G,
        "+OK" G,
        "1  2 3" G,
        " 1 2 3" G,
        "1 2 3 " G,
        "1 2" G,
        "1 2 3 4" G,
        "1e+14 2 3" G,
        "1 - 3" G,
        "1 2 3x" G,
        "1 2 0x3" G,
        "4 2 3" G,
        "-1 2 3" G,
        "1 99999999999999999999 3" G,
        "1 2 9223372036854775808" G,
        "1 q" G, /* a quota of no window */
        "1 q " G,
        "1 q 60 5" G,  /* a quota window's count missing */
        "1 q 0 5 1" G, /* window 0 */
        "1 q 31622401 5 1" G,
        "1 q 60 0 1" G, /* limit 0 */
        "1 q 60 -5 1" G,
        "1 q 60 5 1 " G,
        "1 q 1 1 0 2 1 0 3 1 0 4 1 0 5 1 0 6 1 0 7 1 0 8 1 0 9 1 0" G,
        "1 Q" G,
        "1 QQ 2 3" G,
        "1 Z 2 3" G, /* unknown tags */
        "1 z 2 3" G,
        "1 e 2 3" G,
        "" G,
        "E" G,
        "late" G,
        ":1|:2|:3" G "|:0",  /* an integer after the ops */
        ":1|:2|:3" G "|a|b", /* two texts after the ops */
        ":1|:2|:3" G "|~",
        "=lat",
        "=latex"};
    const char *ok = ":2|:5|:7|eOOM|0 Q -1 3";
    const char *q = "1 q 60 10 4 3600 100 50|:3|:0|:0|0 q 1 1 9";
    const char *oom = "eOOM|:3|:1|:2|eOVERFLOW|OOM command not allowed";
    static rls_op_window_t quota_win[3 * RL_ADMIT_WINDOWS_MAX];
    rls_op_window_t win[3][RL_ADMIT_WINDOWS_MAX];
    rls_redis_errs_t errs;
    rls_op_t ops[3];
    size_t i;

    (void)state;
    parse_ops(ops, win, 3, 2, 3);
    assert_int_equal(parse_note(ok, ops, 3, quota_win, &errs), 0);
    assert_int_equal(ops[0].err, 0);
    assert_int_equal(ops[0].admitted, 2);
    assert_int_equal(ops[0].win[0].before, 5);
    assert_int_equal(ops[0].win[1].before, 7);
    assert_int_equal(ops[0].nquota_win, 0);
    assert_int_equal(ops[1].err, RL_ESTORE);
    assert_int_equal(ops[2].err, 0);
    assert_int_equal(ops[2].admitted, 0);
    assert_int_equal(ops[2].win[0].before, -1);
    assert_int_equal(ops[2].win[1].before, 3);
    assert_int_equal(errs.failed, 1);
    assert_int_equal(errs.by_kind[RLS_SERR_OOM], 1);
    assert_int_equal(errs.bad_quotas, 1);
    assert_null(errs.text);

    /* The caller's quota: its windows replace the op's. */
    parse_ops(ops, win, 3, 2, 3);
    assert_int_equal(parse_note(q, ops, 3, quota_win, &errs), 0);
    assert_int_equal(ops[0].admitted, 1);
    assert_int_equal(ops[0].nquota_win, 2);
    assert_ptr_equal(ops[0].quota_win, &quota_win[0]);
    assert_int_equal(ops[0].quota_win[0].window_s, 60);
    assert_int_equal(ops[0].quota_win[0].limit, 10);
    assert_int_equal(ops[0].quota_win[0].before, 4);
    assert_int_equal(ops[0].quota_win[1].window_s, 3600);
    assert_int_equal(ops[0].quota_win[1].limit, 100);
    assert_int_equal(ops[0].quota_win[1].before, 50);
    assert_int_equal(ops[1].nquota_win, 0);
    assert_null(ops[1].quota_win);
    assert_int_equal(ops[1].admitted, 3);
    assert_int_equal(ops[2].nquota_win, 1);
    assert_ptr_equal(ops[2].quota_win, &quota_win[2 * RL_ADMIT_WINDOWS_MAX]);
    assert_int_equal(ops[2].quota_win[0].before, 9);
    assert_int_equal(errs.bad_quotas, 0);
    /* ...and without room for quota windows it is malformed, not a write
     * through a null pointer. */
    assert_int_equal(parse_note(q, ops, 3, NULL, &errs), RL_EINVAL);
    assert_int_equal(parse_note(":3|:0|:0|1 q 60 10 4", ops, 2, NULL, &errs),
                     RL_EINVAL);
    /* Eight quota windows is the most. */
    parse_ops(ops, win, 1, 2, 3);
    assert_int_equal(
        parse_note("1 q 1 1 0 2 1 0 3 1 0 4 1 0 5 1 0 6 1 0 7 1 0 8 1 0", ops,
                   1, quota_win, &errs),
        0);
    assert_int_equal(ops[0].nquota_win, 8);
    assert_int_equal(ops[0].quota_win[7].window_s, 8);
    /* The extremes of a count, as an integer and as text. */
    parse_ops(ops, win, 1, 1, 1);
    assert_int_equal(
        parse_note(":1|:9223372036854775807", ops, 1, quota_win, &errs), 0);
    assert_int_equal(ops[0].win[0].before, INT64_MAX);
    assert_int_equal(
        parse_note(":1|:-9223372036854775808", ops, 1, quota_win, &errs), 0);
    assert_int_equal(ops[0].win[0].before, INT64_MIN);
    assert_int_equal(
        parse_note("1 -9223372036854775807", ops, 1, quota_win, &errs), 0);
    assert_int_equal(ops[0].win[0].before, -INT64_MAX);

    parse_ops(ops, win, 3, 2, 3);
    for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        if (parse_note(bad[i], ops, 3, quota_win, &errs) != RL_EINVAL)
            fail_msg("accepted \"%s\"", bad[i]);
#undef G
    /* Every array short of a good reply's elements is refused. */
    {
        static const char *const goods[] = {
            ":2|:5|:7|eOOM|0 Q -1 3",
            "1 q 60 10 4 3600 100 50|:3|:0|:0|0 q 1 1 9"};
        char cut[128];
        size_t g;
        for (g = 0; g < 2; g++) {
            const char *p = goods[g];
            while ((p = strchr(p, '|')) != NULL) {
                memcpy(cut, goods[g], (size_t)(p - goods[g]));
                cut[p - goods[g]] = '\0';
                if (parse_note(cut, ops, 3, quota_win, &errs) != RL_EINVAL)
                    fail_msg("accepted \"%s\"", cut);
                p++;
            }
        }
    }
    /* No op at all is an empty array. */
    assert_int_equal(parse_note("", ops, 0, quota_win, &errs), 0);
    assert_int_equal(parse_note(":1|:2|:3", ops, 0, quota_win, &errs),
                     RL_EINVAL);

    /* Refusals by kind, and the first one's text after the ops. */
    parse_ops(ops, win, 3, 2, 3);
    assert_int_equal(parse_note(oom, ops, 3, quota_win, &errs), 0);
    assert_int_equal(ops[0].err, RL_ESTORE);
    assert_int_equal(ops[1].err, 0);
    assert_int_equal(ops[1].admitted, 3);
    assert_int_equal(ops[1].win[1].before, 2);
    assert_int_equal(ops[2].err, RL_ESTORE);
    assert_int_equal(errs.failed, 2);
    assert_int_equal(errs.by_kind[RLS_SERR_OOM], 1);
    assert_int_equal(errs.by_kind[RLS_SERR_OVERFLOW], 1);
    assert_int_equal(errs.text_len, strlen("OOM command not allowed"));
    assert_memory_equal(errs.text, "OOM command not allowed", errs.text_len);
    /* A script run after its deadline: ops untouched. */
    ops[0].admitted = 5;
    ops[0].win[0].before = 6;
    assert_int_equal(parse_note("=late", ops, 1, quota_win, &errs),
                     RLS_REDIS_LATE);
    assert_int_equal(ops[0].admitted, 5);
    assert_int_equal(ops[0].win[0].before, 6);
    parse_note(NULL, NULL, 0, NULL, NULL);
    /* Error texts by kind. */
    assert_int_equal(rls_redis_err_kind("BUSY Redis is busy", 18),
                     RLS_SERR_BUSY);
    assert_int_equal(rls_redis_err_kind("READONLY You can't", 18),
                     RLS_SERR_READONLY);
    assert_int_equal(rls_redis_err_kind("NOSCRIPT No", 11), RLS_SERR_NOSCRIPT);
    assert_int_equal(rls_redis_err_kind("LOADING", 7), RLS_SERR_LOADING);
    assert_int_equal(rls_redis_err_kind("ERR increment or decrement would "
                                        "overflow",
                                        41),
                     RLS_SERR_OVERFLOW);
    assert_int_equal(rls_redis_err_kind("OOMX", 4), RLS_SERR_OTHER);
    assert_int_equal(rls_redis_err_kind("", 0), RLS_SERR_OTHER);
}

/* Reads a command back with hiredis's own parser: RESP commands are arrays
 * of bulk strings. */
static redisReply *read_back(const char *p, size_t len)
{
    redisReader *rd = redisReaderCreate();
    void *rep = NULL;

    assert_non_null(rd);
    assert_int_equal(redisReaderFeed(rd, p, len), REDIS_OK);
    assert_int_equal(redisReaderGetReply(rd, &rep), REDIS_OK);
    assert_non_null(rep);
    redisReaderFree(rd);
    return rep;
}

/* Ops of other algorithms with equal costs and no quota go as "a"
 * profiles, numbered after the fixed windows' profiles: a run of ops of
 * one request of cost 1 on one profile is "R", its length and the
 * profile; one of k requests "A", the profile, k and the cost; one with
 * listed costs, or limits no profile has room for, spelled out ("a"). */
static void test_encode_alg_profiles(void **state)
{
    static const uint32_t one[] = {1}, two[] = {3, 3}, listed[] = {1, 2};
    static const char *const want[] = {
        "EVALSHA", "0123456789abcdef0123456789abcdef01234567", "7", "k0:60:7",
        "k1:1:g", "k2:1:g", "k3:1:g", "k4:60:s", "k4:1:g", "k5:1:g",
        /* deadline, clock, grace, 6 ops, 3 profiles */
        "0", "100", "1000", "6", "3",
        /* profile 1: op 0's fixed window */
        "1", "120000", "5",
        /* profile 2: the gcra; profile 3: the sliding-window-counter and
         * the gcra */
        "a", "1", "g", "3", "333334", "a", "2", "s", "180000", "6", "65536",
        "1", "g", "3", "333334",
        /* op 0 */
        "1",
        /* ops 1 and 2: a run on profile 2; op 3: 2 requests of cost 3 */
        "R", "2", "2", "A", "2", "2", "3",
        /* op 4: a run of one on profile 3 */
        "R", "1", "3",
        /* op 5: listed costs */
        "a", "1", "", "g", "3", "333334", "2", "1", "2"};
    rls_cmdbuf_t buf = {NULL, 0, 0};
    rls_op_window_t wf = {0}, wg = {0}, ws = {0}, w4[2];
    rls_op_t ops[6];
    static char keys[6][4];
    redisReply *r;
    size_t i;

    (void)state;
    memset(ops, 0, sizeof(ops));
    wf.window_s = 60;
    wf.limit = 5;
    wf.index = 7;
    wf.expire_at_ms = 120000;
    wg.algo = RL_ALGO_GCRA;
    wg.window_s = 1;
    wg.limit = 3;
    wg.t_us = 333334;
    wg.expire_at_ms = 1000;
    ws.algo = RL_ALGO_SLIDING_COUNTER;
    ws.window_s = 60;
    ws.limit = 6;
    ws.index = 1;
    ws.weight = 65536;
    ws.expire_at_ms = 180000;
    w4[0] = ws;
    w4[1] = wg;
    for (i = 0; i < 6; i++) {
        snprintf(keys[i], sizeof(keys[i]), "k%zu", i);
        ops[i].key = keys[i];
        ops[i].key_len = 2;
        ops[i].now_ms = 100;
        ops[i].win = i == 0 ? &wf : i == 4 ? w4 : &wg;
        ops[i].nwin = i == 4 ? 2 : 1;
        ops[i].costs = i == 3 ? two : i == 5 ? listed : one;
        ops[i].ncosts = i == 3 || i == 5 ? 2 : 1;
        ops[i].equal_cost = i == 3 ? 3 : i == 5 ? 0 : 1;
    }
    assert_int_equal(rls_redis_encode(&buf, want[1], ops, 6, 100, 1000, 0), 0);
    r = read_back(buf.p, buf.len);
    assert_int_equal(r->type, REDIS_REPLY_ARRAY);
    for (i = 0; i < r->elements && i < sizeof(want) / sizeof(want[0]); i++)
        if (strcmp(r->element[i]->str, want[i]) != 0)
            fail_msg("argument %zu: \"%s\", want \"%s\"", i, r->element[i]->str,
                     want[i]);
    assert_int_equal(r->elements, sizeof(want) / sizeof(want[0]));
    freeReplyObject(r);
    free(buf.p);
}

static void test_encode(void **state)
{
    static const char sha[] = "0123456789abcdef0123456789abcdef01234567";
    static const uint32_t costs0[] = {1, 3, 2};
    static const uint32_t costs1[] = {7, 7};
    static const char *const want[] = {
        "EVALSHA", sha, "4",
        /* keys: op 0's two windows and its quota hash, op 1's window */
        "rl:{a b}:r:api:60:29396283", "rl:{a b}:r:api:3600:489938",
        "rl:{a b}:q", NULL /* op 1's window key */,
        /* deadline, clock, grace, 2 ops, 1 profile: one window, op 1's
         * expiry and limit */
        "1763777001000", "1763777000123", "2500", "2", "1", "1",
        "1763777002000", "5",
        /* op 0: not a profile; two windows, a quota, unequal costs */
        "0", "2", "api", "1763777040000", "33", "1763778000000",
        "18446744073709551615", "0.5", "3", "1", "3", "2",
        /* op 1: profile 1, two requests of cost 7 */
        "-1", "2", "7"};
    rls_cmdbuf_t buf = {NULL, 0, 0};
    rls_op_window_t w0[2], w1[1];
    rls_op_t ops[2];
    redisReply *r;
    size_t len, cap, i;
    char *p;

    (void)state;
    memset(ops, 0, sizeof(ops));
    memset(w0, 0, sizeof(w0));
    memset(w1, 0, sizeof(w1));
    ops[0].key = "rl:{a b}:r:api";
    ops[0].key_len = strlen(ops[0].key);
    ops[0].tag_len = 8;
    ops[0].quota = ops[0].key + 11;
    ops[0].quota_len = 3;
    ops[0].scale = 0.5;
    w0[0] = (rls_op_window_t){60, 33, 29396283, 1763777040000ULL, 0};
    w0[1] = (rls_op_window_t){3600, UINT64_MAX, 489938, 1763778000000ULL, 0};
    ops[0].win = w0;
    ops[0].nwin = 2;
    ops[0].costs = costs0;
    ops[0].ncosts = 3;
    ops[1].key = "rl:{\xe6\x97\xa5\r\n}:i";
    ops[1].key_len = strlen(ops[1].key);
    ops[1].tag_len = ops[1].key_len - 2;
    ops[1].scale = 1;
    w1[0] = (rls_op_window_t){1, 5, 1763777000, 1763777002000ULL, 0};
    ops[1].win = w1;
    ops[1].nwin = 1;
    ops[1].costs = costs1;
    ops[1].ncosts = 2;
    ops[1].equal_cost = 7;
    assert_int_equal(rls_redis_encode(&buf, sha, ops, 2, 1763777000123ULL, 2500,
                                      1763777001000ULL),
                     0);
    len = buf.len;
    assert_true(len > 0);
    r = read_back(buf.p, len);
    assert_int_equal(r->type, REDIS_REPLY_ARRAY);
    assert_int_equal(r->elements, sizeof(want) / sizeof(want[0]));
    for (i = 0; i < r->elements; i++) {
        if (want[i] == NULL) {
            /* the key, ":1:1763777000" */
            assert_int_equal(r->element[i]->len, ops[1].key_len + 13);
            assert_memory_equal(r->element[i]->str, ops[1].key, ops[1].key_len);
            assert_memory_equal(r->element[i]->str + ops[1].key_len,
                                ":1:1763777000", 13);
            continue;
        }
        if (strcmp(r->element[i]->str, want[i]) != 0)
            fail_msg("argument %zu: \"%s\", want \"%s\"", i, r->element[i]->str,
                     want[i]);
    }
    freeReplyObject(r);
    /* The buffer stays: a smaller command reuses it. */
    p = buf.p;
    cap = buf.cap;
    assert_int_equal(rls_redis_encode(&buf, NULL, &ops[1], 1, 1, 0, 0), 0);
    len = buf.len;
    assert_ptr_equal(buf.p, p);
    assert_int_equal(buf.cap, cap);
    r = read_back(buf.p, len);
    assert_int_equal(r->elements, 15);
    assert_string_equal(r->element[0]->str, "EVAL");
    assert_string_equal(r->element[1]->str, rls_redis_script);
    /* one key; no deadline, clock 1 */
    assert_string_equal(r->element[2]->str, "1");
    assert_string_equal(r->element[4]->str, "0");
    assert_string_equal(r->element[5]->str, "1");
    freeReplyObject(r);
    /* A batch of many ops with every window and many costs fits. */
    {
        enum { N = 200 };
        static rls_op_t big[N];
        static rls_op_window_t bw[RL_ADMIT_WINDOWS_MAX];
        static uint32_t bc[500];

        for (i = 0; i < RL_ADMIT_WINDOWS_MAX; i++)
            bw[i] = (rls_op_window_t){RL_WINDOW_MAX_S, INT64_MAX, UINT64_MAX,
                                      UINT64_MAX, 0};
        for (i = 0; i < 500; i++)
            bc[i] = UINT32_MAX;
        for (i = 0; i < N; i++) {
            big[i] = ops[0];
            big[i].win = bw;
            big[i].nwin = RL_ADMIT_WINDOWS_MAX;
            big[i].costs = bc;
            big[i].ncosts = 500;
            big[i].scale = 1.0 / 3;
        }
        assert_int_equal(rls_redis_encode(&buf, NULL, big, N, UINT64_MAX,
                                          UINT64_MAX, UINT64_MAX),
                         0);
        len = buf.len;
        assert_true(len > 0 && len <= buf.cap);
        r = read_back(buf.p, len);
        /* command, script, nkeys; N ops of 8 window keys and a quota
         * key; 5 batch arguments (no profile); per op 0, nwin, field,
         * 8 x (expiry, limit), scale, the count and 500 costs */
        assert_int_equal(r->elements,
                         3 + N * (RL_ADMIT_WINDOWS_MAX + 1) + 5 +
                             N * (3 + 2 * RL_ADMIT_WINDOWS_MAX + 1 + 1 + 500));
        assert_string_equal(r->element[3 + N * (RL_ADMIT_WINDOWS_MAX + 1) + 5 +
                                       3 + 2 * RL_ADMIT_WINDOWS_MAX]
                                ->str,
                            "0.33333333333333331");
        freeReplyObject(r);
    }
    free(buf.p);
}

static void test_clock(void **state)
{
    /* Redis's clock: 2026-11-22, in us; the local monotonic clock starts
     * at 1 s and the local realtime clock is 3 s behind Redis. */
    const uint64_t R = UINT64_C(1795315969000000), M = 1000000;
    const uint64_t local = R / 1000 - 3000;
    rls_redis_clock_t c;

    (void)state;
    rls_redis_clock_init(&c);
    /* Before any sample: the local clock, clamped so it never goes back. */
    assert_int_equal(rls_redis_clock_now(&c, M, local), local);
    assert_int_equal(rls_redis_clock_now(&c, M, local - 50), local);
    assert_int_equal(rls_redis_clock_now(&c, M, local + 7), local + 7);
    /* TIME sent at M, answered 2 ms later: Redis read R at M + 1 ms. */
    assert_int_equal(rls_redis_clock_sample(&c, M, M + 2000, R), 1);
    assert_int_equal(rls_redis_clock_now(&c, M + 1000, 0), R / 1000);
    assert_int_equal(rls_redis_clock_now(&c, M + 61000, 0), R / 1000 + 60);
    /* A later sample says Redis is 5 ms behind our estimate: time stands
     * still until it catches up, then follows the new offset. */
    assert_int_equal(
        rls_redis_clock_sample(&c, M + 100000, M + 102000, R + 100000 - 5000),
        1);
    assert_int_equal(rls_redis_clock_now(&c, M + 62000, 0), R / 1000 + 60);
    assert_int_equal(rls_redis_clock_now(&c, M + 66000, 0), R / 1000 + 60);
    assert_int_equal(rls_redis_clock_now(&c, M + 70000, 0), R / 1000 + 64);
    /* A reply that waited behind big batches (20 ms round trip against a
     * best of 2 ms) is ignored while the offset is fresh... */
    assert_int_equal(
        rls_redis_clock_sample(&c, M + 200000, M + 220000, R + 900000), 0);
    /* (the offset in use: Redis read R + 95000 at M + 101000) */
    assert_int_equal(rls_redis_clock_now(&c, M + 201000, 0),
                     (R + 195000) / 1000);
    /* ...used when the offset is over 10 s old, or on a new path. */
    assert_int_equal(
        rls_redis_clock_sample(&c, M + 20000000, M + 20020000, R + 20010000),
        1);
    rls_redis_clock_new_path(&c);
    assert_int_equal(
        rls_redis_clock_sample(&c, M + 20100000, M + 20140000, R + 20120000),
        1);
    assert_int_equal(rls_redis_clock_now(&c, M + 20120000, 0),
                     (R + 20120000) / 1000);
    /* A receive time before the send time is nonsense, not a sample. */
    assert_int_equal(rls_redis_clock_sample(&c, M + 5, M + 4, R), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_counts),
        cmocka_unit_test(test_encode),
        cmocka_unit_test(test_encode_alg_profiles),
        cmocka_unit_test(test_clock),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
