#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "rl_buf.h"
#include "rl_error.h"

static void test_reserve_commit_consume(void **state)
{
    rl_buf_t b;
    uint8_t *w;

    (void)state;
    rl_buf_init(&b, 1 << 20);
    assert_int_equal(rl_buf_len(&b), 0);
    assert_int_equal(rl_buf_reserve(&b, 10, &w), RL_OK);
    memcpy(w, "0123456789", 10);
    rl_buf_commit(&b, 10);
    assert_int_equal(rl_buf_len(&b), 10);
    assert_memory_equal(rl_buf_rptr(&b), "0123456789", 10);
    rl_buf_consume(&b, 4);
    assert_int_equal(rl_buf_len(&b), 6);
    assert_memory_equal(rl_buf_rptr(&b), "456789", 6);
    rl_buf_free(&b);
    rl_buf_free(NULL);
}

static void test_drain_resets_cursors(void **state)
{
    rl_buf_t b;

    (void)state;
    rl_buf_init(&b, 1 << 20);
    assert_int_equal(rl_buf_append(&b, "abcdef", 6), RL_OK);
    rl_buf_consume(&b, 6);
    assert_int_equal(b.rpos, 0);
    assert_int_equal(b.wpos, 0);
    assert_ptr_equal(rl_buf_rptr(&b), b.data);
    rl_buf_free(&b);
}

/* Consuming frame after frame must not move the unread bytes: the read
 * pointer only advances, as long as the tail has room. */
static void test_no_memmove_per_frame(void **state)
{
    rl_buf_t b;
    uint8_t frame[16];
    int i;

    (void)state;
    rl_buf_init(&b, 1 << 20);
    memset(frame, 'x', sizeof(frame));
    assert_int_equal(rl_buf_append(&b, frame, sizeof(frame)), RL_OK);
    assert_int_equal(rl_buf_append(&b, frame, 8), RL_OK); /* partial next */
    for (i = 0; i < 100; i++) {
        uint8_t *before = rl_buf_rptr(&b);
        rl_buf_consume(&b, sizeof(frame));
        assert_ptr_equal(rl_buf_rptr(&b), before + sizeof(frame));
        /* the rest of the partial frame arrives, plus the start of another */
        assert_int_equal(rl_buf_append(&b, frame, 16), RL_OK);
        assert_ptr_equal(rl_buf_rptr(&b), before + sizeof(frame));
    }
    rl_buf_free(&b);
}

/* When the tail is too short but the allocation is big enough, unread bytes
 * move to the front and the allocation is kept. */
static void test_compacts_instead_of_growing(void **state)
{
    rl_buf_t b;
    uint8_t *w, *data;
    size_t cap;

    (void)state;
    rl_buf_init(&b, 1 << 20);
    assert_int_equal(rl_buf_reserve(&b, 4000, &w), RL_OK);
    memset(w, 'a', 4000);
    rl_buf_commit(&b, 4000);
    data = b.data;
    cap = b.cap;
    rl_buf_consume(&b, 3990);
    assert_int_equal(rl_buf_reserve(&b, 1000, &w), RL_OK);
    assert_ptr_equal(b.data, data);
    assert_int_equal(b.cap, cap);
    assert_int_equal(b.rpos, 0);
    assert_int_equal(rl_buf_len(&b), 10);
    assert_ptr_equal(w, b.data + 10);
    rl_buf_free(&b);
}

static void test_growth_keeps_content(void **state)
{
    rl_buf_t b;
    uint8_t chunk[1000];
    size_t i;

    (void)state;
    rl_buf_init(&b, 1 << 20);
    for (i = 0; i < 100; i++) {
        memset(chunk, (int)i, sizeof(chunk));
        assert_int_equal(rl_buf_append(&b, chunk, sizeof(chunk)), RL_OK);
    }
    assert_int_equal(rl_buf_len(&b), 100000);
    for (i = 0; i < 100; i++)
        assert_int_equal(rl_buf_rptr(&b)[i * 1000 + 999], (uint8_t)i);
    rl_buf_free(&b);
}

static void test_cap_is_enforced(void **state)
{
    rl_buf_t b;
    uint8_t *w;

    (void)state;
    rl_buf_init(&b, 100);
    assert_int_equal(rl_buf_reserve(&b, 101, &w), RL_EFULL);
    assert_null(b.data); /* nothing was reserved for the refused request */
    assert_int_equal(rl_buf_reserve(&b, 100, &w), RL_OK);
    assert_true(b.cap <= 100);
    rl_buf_commit(&b, 60);
    assert_int_equal(rl_buf_append(&b, "0123456789012345678901234567890123456"
                                       "789",
                                   41),
                     RL_EFULL);
    assert_int_equal(rl_buf_len(&b), 60); /* unchanged by the refusal */
    assert_int_equal(rl_buf_append(&b, "0123456789", 10), RL_OK);
    rl_buf_consume(&b, 50);
    /* 20 unread + 80 fits the cap once the consumed space is reused */
    assert_int_equal(rl_buf_reserve(&b, 80, &w), RL_OK);
    assert_int_equal(rl_buf_reserve(&b, 81, &w), RL_EFULL);
    assert_int_equal(rl_buf_reserve(&b, SIZE_MAX, &w), RL_EFULL);
    rl_buf_free(&b);
}

static void test_reset_keeps_allocation(void **state)
{
    rl_buf_t b;
    uint8_t *data;

    (void)state;
    rl_buf_init(&b, 1 << 20);
    assert_int_equal(rl_buf_append(&b, "abc", 3), RL_OK);
    data = b.data;
    rl_buf_reset(&b);
    assert_int_equal(rl_buf_len(&b), 0);
    assert_ptr_equal(b.data, data);
    assert_int_equal(rl_buf_append(&b, "xyz", 3), RL_OK);
    assert_ptr_equal(b.data, data);
    assert_memory_equal(rl_buf_rptr(&b), "xyz", 3);
    rl_buf_free(&b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reserve_commit_consume),
        cmocka_unit_test(test_drain_resets_cursors),
        cmocka_unit_test(test_no_memmove_per_frame),
        cmocka_unit_test(test_compacts_instead_of_growing),
        cmocka_unit_test(test_growth_keeps_content),
        cmocka_unit_test(test_cap_is_enforced),
        cmocka_unit_test(test_reset_keeps_allocation),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
