#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "rl_buf.h"
#include "rl_error.h"
#include "rl_frame.h"
#include "rl_msg.h"

#define MAXP 4096

static const char long_key[] =
    "user:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
    "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

/* A spread of requests: all fields zero, all set, long strings, big ids. */
static size_t sample_checks(rl_check_t *c)
{
    size_t n = 0;

    memset(c, 0, sizeof(rl_check_t) * 5);
    n++; /* all zero: an empty payload */
    c[n].id = 1;
    c[n].key = "user:u123";
    c[n].key_len = 9;
    c[n].limit = 5;
    c[n].window_s = 60;
    n++;
    c[n].id = UINT64_MAX;
    c[n].key = long_key;
    c[n].key_len = sizeof(long_key) - 1;
    c[n].cost = UINT32_MAX;
    c[n].limit = UINT64_MAX;
    c[n].window_s = UINT32_MAX;
    n++;
    c[n].id = 300;
    c[n].key = "ip:203.0.113.7:/search";
    c[n].key_len = 22;
    c[n].rule = "search.per_ip";
    c[n].rule_len = 13;
    n++;
    return n;
}

static void assert_check_equal(const rl_check_t *a, const rl_check_t *b)
{
    assert_int_equal(a->id, b->id);
    assert_int_equal(a->key_len, b->key_len);
    if (a->key_len)
        assert_memory_equal(a->key, b->key, a->key_len);
    assert_int_equal(a->cost, b->cost);
    assert_int_equal(a->limit, b->limit);
    assert_int_equal(a->window_s, b->window_s);
    assert_int_equal(a->rule_len, b->rule_len);
    if (a->rule_len)
        assert_memory_equal(a->rule, b->rule, a->rule_len);
}

/* Every frame, cut at every byte offset: the decoder says "need more" until
 * the last byte, knows the whole size as soon as the header is complete, and
 * then yields the same message. */
static void test_split_at_every_offset(void **state)
{
    rl_check_t c[5], got;
    size_t n = sample_checks(c), i, k;

    (void)state;
    for (i = 0; i < n; i++) {
        rl_buf_t b;
        rl_frame_t f;

        rl_buf_init(&b, 1 << 20);
        assert_int_equal(rl_check_put(&b, &c[i]), RL_OK);
        size_t size = rl_buf_len(&b);
        /* copy to an exact-size heap block so any over-read is caught */
        for (k = 0; k < size; k++) {
            uint8_t *p = malloc(k ? k : 1);
            memcpy(p, rl_buf_rptr(&b), k);
            assert_int_equal(rl_frame_decode(p, k, MAXP, &f), RL_EAGAIN);
            assert_int_equal(f.size, k >= RL_FRAME_HEADER ? size : 0);
            free(p);
        }
        uint8_t *p = malloc(size);
        memcpy(p, rl_buf_rptr(&b), size);
        assert_int_equal(rl_frame_decode(p, size, MAXP, &f), RL_OK);
        assert_int_equal(f.size, size);
        assert_int_equal(f.len, size - RL_FRAME_HEADER);
        assert_int_equal(rl_check_decode(f.payload, f.len, &got), RL_OK);
        assert_check_equal(&got, &c[i]);
        free(p);
        rl_buf_free(&b);
    }
}

/* A stream of several frames fed in chunks of every size from 1 up: the
 * frames come out whole and in order, however the reads fall. */
static void test_stream_in_chunks(void **state)
{
    rl_check_t c[5], got;
    size_t n = sample_checks(c), i, chunk;
    rl_buf_t all;

    (void)state;
    rl_buf_init(&all, 1 << 20);
    for (i = 0; i < n; i++)
        assert_int_equal(rl_check_put(&all, &c[i]), RL_OK);
    size_t total = rl_buf_len(&all);

    for (chunk = 1; chunk <= total; chunk++) {
        rl_buf_t in;
        size_t fed = 0, seen = 0;
        rl_frame_t f;

        rl_buf_init(&in, 1 << 20);
        while (fed < total) {
            size_t k = total - fed < chunk ? total - fed : chunk;
            assert_int_equal(rl_buf_append(&in, rl_buf_rptr(&all) + fed, k),
                             RL_OK);
            fed += k;
            int rc;
            while ((rc = rl_frame_decode(rl_buf_rptr(&in), rl_buf_len(&in),
                                         MAXP, &f)) == RL_OK) {
                assert_true(seen < n);
                assert_int_equal(rl_check_decode(f.payload, f.len, &got),
                                 RL_OK);
                assert_check_equal(&got, &c[seen]);
                seen++;
                rl_buf_consume(&in, f.size);
            }
            assert_int_equal(rc, RL_EAGAIN);
        }
        assert_int_equal(seen, n);
        assert_int_equal(rl_buf_len(&in), 0);
        rl_buf_free(&in);
    }
    rl_buf_free(&all);
}

static void put_header(uint8_t *p, uint8_t flag, uint32_t len)
{
    rl_frame_header(p, len);
    p[0] = flag;
}

static void test_max_size_and_one_over(void **state)
{
    uint8_t *p = calloc(1, RL_FRAME_HEADER + MAXP + 1);
    rl_frame_t f;

    (void)state;
    put_header(p, 0, MAXP);
    assert_int_equal(rl_frame_decode(p, RL_FRAME_HEADER + MAXP, MAXP, &f),
                     RL_OK);
    assert_int_equal(f.len, MAXP);
    assert_ptr_equal(f.payload, p + RL_FRAME_HEADER);

    /* one byte over is refused from the header alone, before any payload
     * arrives, so nothing is ever reserved for it */
    put_header(p, 0, MAXP + 1);
    assert_int_equal(rl_frame_decode(p, RL_FRAME_HEADER, MAXP, &f),
                     RL_EFRAMESIZE);
    assert_int_equal(rl_frame_decode(p, RL_FRAME_HEADER + MAXP + 1, MAXP, &f),
                     RL_EFRAMESIZE);
    put_header(p, 0, UINT32_MAX);
    assert_int_equal(rl_frame_decode(p, RL_FRAME_HEADER, MAXP, &f),
                     RL_EFRAMESIZE);
    free(p);
}

static void test_zero_length_payload(void **state)
{
    uint8_t p[RL_FRAME_HEADER];
    rl_frame_t f;
    rl_check_t c;

    (void)state;
    put_header(p, 0, 0);
    assert_int_equal(rl_frame_decode(p, sizeof(p), MAXP, &f), RL_OK);
    assert_int_equal(f.len, 0);
    assert_int_equal(f.size, RL_FRAME_HEADER);
    /* an empty payload is a valid message with every field at zero */
    assert_int_equal(rl_check_decode(f.payload, f.len, &c), RL_OK);
    assert_int_equal(c.id, 0);
    assert_int_equal(c.key_len, 0);
}

static void test_flag_not_zero(void **state)
{
    uint8_t p[RL_FRAME_HEADER + 4];
    rl_frame_t f;
    int flag;

    (void)state;
    for (flag = 1; flag < 256; flag++) {
        put_header(p, (uint8_t)flag, 4);
        /* refused on the first byte, without waiting for the header */
        assert_int_equal(rl_frame_decode(p, 1, MAXP, &f), RL_EFRAMEFLAG);
        assert_int_equal(rl_frame_decode(p, sizeof(p), MAXP, &f),
                         RL_EFRAMEFLAG);
    }
    assert_int_equal(rl_frame_decode(p, 0, MAXP, &f), RL_EAGAIN);
}

/* Garbage never crashes the decoders and never yields a frame beyond the
 * bytes given. */
static void test_garbage(void **state)
{
    uint8_t p[64];
    unsigned seed = 12345;
    int i;
    size_t k;

    (void)state;
    for (i = 0; i < 200000; i++) {
        rl_frame_t f;
        size_t n = (size_t)(rand_r(&seed) % (int)sizeof(p));
        for (k = 0; k < n; k++)
            p[k] = (uint8_t)rand_r(&seed);
        if (i & 1 && n > 0)
            p[0] = 0;
        int rc = rl_frame_decode(p, n, 32, &f);
        assert_true(rc == RL_OK || rc == RL_EAGAIN || rc == RL_EFRAMEFLAG ||
                    rc == RL_EFRAMESIZE);
        if (rc == RL_OK) {
            rl_check_t c;
            assert_true(f.size <= n);
            rc = rl_check_decode(f.payload, f.len, &c);
            assert_true(rc == RL_OK || rc == RL_EDECODE);
            if (rc == RL_OK) {
                assert_true(c.key_len <= f.len);
                assert_true(c.rule_len <= f.len);
            }
        }
    }
}

static void test_several_frames_in_one_buffer(void **state)
{
    rl_buf_t b;
    rl_frame_t f;
    rl_check_t c, got;
    uint64_t id;

    (void)state;
    rl_buf_init(&b, 1 << 20);
    memset(&c, 0, sizeof(c));
    c.key = "k";
    c.key_len = 1;
    c.limit = 10;
    c.window_s = 1;
    for (id = 1; id <= 1000; id++) {
        c.id = id;
        assert_int_equal(rl_check_put(&b, &c), RL_OK);
    }
    for (id = 1; id <= 1000; id++) {
        assert_int_equal(
            rl_frame_decode(rl_buf_rptr(&b), rl_buf_len(&b), MAXP, &f), RL_OK);
        assert_int_equal(rl_check_decode(f.payload, f.len, &got), RL_OK);
        assert_int_equal(got.id, id);
        rl_buf_consume(&b, f.size);
    }
    assert_int_equal(rl_frame_decode(rl_buf_rptr(&b), rl_buf_len(&b), MAXP, &f),
                     RL_EAGAIN);
    rl_buf_free(&b);
}

/* rl_frame_take consumes a frame only when it is whole and sound. */
static void test_take(void **state)
{
    rl_buf_t b;
    rl_frame_t f;
    rl_check_t c, got;
    size_t one;

    (void)state;
    rl_buf_init(&b, 1 << 20);
    memset(&c, 0, sizeof(c));
    c.id = 9;
    c.key = "k";
    c.key_len = 1;
    assert_int_equal(rl_check_put(&b, &c), RL_OK);
    one = rl_buf_len(&b);
    c.id = 10;
    assert_int_equal(rl_check_put(&b, &c), RL_OK);
    /* The second frame lacks its last byte. */
    b.wpos--;

    assert_int_equal(rl_frame_take(&b, MAXP, &f), RL_OK);
    assert_int_equal(f.size, one);
    assert_int_equal(rl_check_decode(f.payload, f.len, &got), RL_OK);
    assert_int_equal(got.id, 9);
    assert_int_equal(rl_buf_len(&b), one - 1);
    assert_int_equal(rl_frame_take(&b, MAXP, &f), RL_EAGAIN);
    assert_int_equal(rl_buf_len(&b), one - 1);
    b.wpos++;
    assert_int_equal(rl_frame_take(&b, 2, &f), RL_EFRAMESIZE);
    assert_int_equal(rl_buf_len(&b), one);
    assert_int_equal(rl_frame_take(&b, MAXP, &f), RL_OK);
    assert_int_equal(rl_check_decode(f.payload, f.len, &got), RL_OK);
    assert_int_equal(got.id, 10);
    assert_int_equal(rl_buf_len(&b), 0);

    assert_int_equal(rl_buf_append(&b, "\x01\0\0\0\0", 5), RL_OK);
    assert_int_equal(rl_frame_take(&b, MAXP, &f), RL_EFRAMEFLAG);
    assert_int_equal(rl_buf_len(&b), 5);
    rl_buf_free(&b);
}

/* rl_frame_length reads what the header declares, whatever the flag and
 * however large, so a caller can size the rest or report a refused frame. */
static void test_length(void **state)
{
    uint8_t p[RL_FRAME_HEADER];

    (void)state;
    put_header(p, 0, 0);
    assert_int_equal(rl_frame_length(p), 0);
    put_header(p, RL_FRAME_COMPRESSED, 0x01020304u);
    assert_int_equal(rl_frame_length(p), 0x01020304u);
    put_header(p, 0xff, UINT32_MAX);
    assert_int_equal(rl_frame_length(p), UINT32_MAX);
}

/* rl_frame_reserve + rl_frame_commit write a frame rl_frame_take reads
 * back; a reservation that does not fit leaves the buffer as it was. */
static void test_reserve_commit(void **state)
{
    rl_buf_t b;
    rl_frame_t f;
    uint8_t *w;
    size_t len, k;

    (void)state;
    rl_buf_init(&b, 64);
    for (len = 0; len <= 3; len++) {
        assert_int_equal(rl_frame_reserve(&b, len, &w), RL_OK);
        memset(w, 'a' + (int)len, len);
        rl_frame_commit(&b, len);
    }
    assert_int_equal(rl_buf_len(&b), 4 * RL_FRAME_HEADER + 0 + 1 + 2 + 3);
    for (len = 0; len <= 3; len++) {
        assert_int_equal(rl_frame_take(&b, MAXP, &f), RL_OK);
        assert_int_equal(f.len, len);
        assert_int_equal(f.size, RL_FRAME_HEADER + len);
        for (k = 0; k < len; k++)
            assert_int_equal(f.payload[k], 'a' + (int)len);
    }
    assert_int_equal(rl_buf_len(&b), 0);

    /* 64 bytes of cap: a 59-byte payload fills it, one more does not fit */
    assert_int_equal(rl_frame_reserve(&b, 60, &w), RL_EFULL);
    assert_int_equal(rl_buf_len(&b), 0);
    assert_int_equal(rl_frame_reserve(&b, 59, &w), RL_OK);
    memset(w, 0, 59);
    rl_frame_commit(&b, 59);
    assert_int_equal(rl_frame_take(&b, MAXP, &f), RL_OK);
    assert_int_equal(f.len, 59);

    /* a length the header's 32 bits cannot say is refused, not wrapped */
    if (SIZE_MAX > UINT32_MAX) {
        assert_int_equal(rl_frame_reserve(&b, (size_t)UINT32_MAX + 1, &w),
                         RL_EINVAL);
        assert_int_equal(rl_buf_len(&b), 0);
    }
    rl_buf_free(&b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_split_at_every_offset),
        cmocka_unit_test(test_stream_in_chunks),
        cmocka_unit_test(test_max_size_and_one_over),
        cmocka_unit_test(test_zero_length_payload),
        cmocka_unit_test(test_flag_not_zero),
        cmocka_unit_test(test_garbage),
        cmocka_unit_test(test_several_frames_in_one_buffer),
        cmocka_unit_test(test_take),
        cmocka_unit_test(test_length),
        cmocka_unit_test(test_reserve_commit),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
