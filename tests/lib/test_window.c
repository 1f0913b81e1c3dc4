#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "rl_error.h"
#include "rl_window.h"

/* A realistic epoch: 2026-11-22, in ms. Every window size below divides
 * 86400 s, so B is a boundary of all of them. */
static const uint64_t DAY_MS = 86400000;
#define B (UINT64_C(20414) * DAY_MS)

static const uint32_t windows[] = {1, 60, 3600, 86400};

static void test_index_and_reset_at_boundary(void **state)
{
    size_t i;

    (void)state;
    for (i = 0; i < sizeof(windows) / sizeof(windows[0]); i++) {
        uint32_t w = windows[i];
        uint64_t wms = (uint64_t)w * 1000, k = B / wms;

        assert_int_equal(B % wms, 0);
        /* boundary - 1 ms: last millisecond of window k-1 */
        assert_int_equal(rl_window_index(B - 1, w), k - 1);
        assert_int_equal(rl_window_end_ms(k - 1, w), B);
        assert_int_equal(rl_window_reset_after_ms(B - 1, w), 1);
        /* boundary: first millisecond of window k */
        assert_int_equal(rl_window_index(B, w), k);
        assert_int_equal(rl_window_end_ms(k, w), B + wms);
        assert_int_equal(rl_window_reset_after_ms(B, w), wms);
        /* boundary + 1 ms */
        assert_int_equal(rl_window_index(B + 1, w), k);
        assert_int_equal(rl_window_reset_after_ms(B + 1, w), wms - 1);
    }
}

static void test_decide(void **state)
{
    rl_result_t r;

    (void)state;
    memset(&r, 0, sizeof(r));
    r.id = 77;
    rl_decide(3, 5, B + 18766, 60, &r);
    assert_int_equal(r.id, 77); /* left alone */
    assert_int_equal(r.code, RL_CODE_OK);
    assert_int_equal(r.limit, 5);
    assert_int_equal(r.used, 3);
    assert_int_equal(r.remaining, 2);
    assert_int_equal(r.reset_after_ms, 60000 - 18766);
    assert_int_equal(r.retry_after_ms, 0);

    rl_decide(5, 5, B, 60, &r); /* exactly at the limit: allowed */
    assert_int_equal(r.code, RL_CODE_OK);
    assert_int_equal(r.remaining, 0);
    assert_int_equal(r.retry_after_ms, 0);

    rl_decide(6, 5, B + 59999, 60, &r);
    assert_int_equal(r.code, RL_CODE_OVER_LIMIT);
    assert_int_equal(r.used, 6);
    assert_int_equal(r.remaining, 0);
    assert_int_equal(r.reset_after_ms, 1);
    assert_int_equal(r.retry_after_ms, 1);

    rl_decide(UINT64_MAX, INT64_MAX, B, 1, &r);
    assert_int_equal(r.code, RL_CODE_OVER_LIMIT);
    assert_int_equal(r.remaining, 0);
}

/* The textbook example, 5 per 60 s, counted one at a time: the sixth is
 * refused with retry_after_ms equal to the time left in the window. */
static void test_five_per_minute(void **state)
{
    uint64_t now = B + 20000, count = 0;
    rl_result_t r;
    int i;

    (void)state;
    for (i = 1; i <= 6; i++) {
        count++;
        rl_decide(count, 5, now, 60, &r);
        if (i <= 5) {
            assert_int_equal(r.code, RL_CODE_OK);
            assert_int_equal(r.remaining, 5 - i);
        } else {
            assert_int_equal(r.code, RL_CODE_OVER_LIMIT);
            assert_int_equal(r.retry_after_ms, 40000);
        }
    }
}

/* Five at the end of one window and five at the start of the next are all
 * allowed: the 2x boundary burst is the fixed-window algorithm's own. */
static void test_boundary_burst(void **state)
{
    uint64_t count[2] = {0, 0}, k = B / 60000;
    rl_result_t r;
    int i;

    (void)state;
    for (i = 0; i < 10; i++) {
        uint64_t now = i < 5 ? B - 1 : B;
        uint64_t w = rl_window_index(now, 60);
        count[w - (k - 1)]++;
        rl_decide(count[w - (k - 1)], 5, now, 60, &r);
        assert_int_equal(r.code, RL_CODE_OK);
    }
    assert_int_equal(count[0], 5);
    assert_int_equal(count[1], 5);
}

static void test_key_format(void **state)
{
    char k[RL_KEY_SIZE(3, 64)];
    int n;

    (void)state;
    n = rl_key_format(k, sizeof(k), "rl:", 3, "user:u123", 9, 60, 28333335);
    assert_string_equal(k, "rl:{user:u123}:60:28333335");
    assert_int_equal(n, (int)strlen(k));

    n = rl_key_format(k, sizeof(k), "rl:", 3, "a{b}c", 5, 1, 0);
    assert_string_equal(k, "rl:{a{b}c}:1:0");
    assert_int_equal(n, 14);

    n = rl_key_format(k, sizeof(k), "rl:", 3, "ip:203.0.113.7:/search", 22,
                      3600, 491234);
    assert_string_equal(k, "rl:{ip:203.0.113.7:/search}:3600:491234");

    /* UTF-8 is copied byte for byte */
    n = rl_key_format(k, sizeof(k), "rl:", 3, "user:\xc3\xa9\xe2\x82\xac", 10,
                      86400, 20414);
    assert_string_equal(k, "rl:{user:\xc3\xa9\xe2\x82\xac}:86400:20414");

    n = rl_key_format(k, sizeof(k), "", 0, "x", 1, 60, 1);
    assert_string_equal(k, "{x}:60:1");
}

/* Redis Cluster's hash tag: the bytes between the first '{' and the first
 * '}' after it, when not empty; else the whole key. */
static void hash_tag(const char *key, const char **tag, size_t *len)
{
    const char *open = strchr(key, '{'), *close;

    *tag = key;
    *len = strlen(key);
    if (open == NULL)
        return;
    close = strchr(open + 1, '}');
    if (close == NULL || close == open + 1)
        return;
    *tag = open + 1;
    *len = (size_t)(close - open - 1);
}

/* Every window of one key hashes to the same slot, whatever the key holds
 * (braces, colons, UTF-8): the tag never depends on the window. The one
 * exception is documented in rl_window.h: a key beginning with '}' has an
 * empty tag, so Redis hashes the whole name. */
static void test_hash_tag_stable_across_windows(void **state)
{
    static const char *keys[] = {"u1", "a}b", "{x}", "a:b:c", "{", "\xc3\xa9"};
    char k1[RL_KEY_SIZE(3, 16)], k2[RL_KEY_SIZE(3, 16)];
    size_t i;

    (void)state;
    for (i = 0; i < sizeof(keys) / sizeof(keys[0]); i++) {
        const char *t1, *t2;
        size_t l1, l2;

        rl_key_format(k1, sizeof(k1), "rl:", 3, keys[i], strlen(keys[i]), 60,
                      1);
        rl_key_format(k2, sizeof(k2), "rl:", 3, keys[i], strlen(keys[i]), 3600,
                      987654321);
        hash_tag(k1, &t1, &l1);
        hash_tag(k2, &t2, &l2);
        assert_int_equal(l1, l2);
        assert_memory_equal(t1, t2, l1);
        assert_true(t1 != k1); /* a tag was found */
    }
    {
        const char *t1, *t2;
        size_t l1, l2;

        rl_key_format(k1, sizeof(k1), "rl:", 3, "}x", 2, 60, 1);
        rl_key_format(k2, sizeof(k2), "rl:", 3, "}x", 2, 60, 2);
        hash_tag(k1, &t1, &l1);
        hash_tag(k2, &t2, &l2);
        assert_ptr_equal(t1, k1); /* no tag: the whole name is hashed */
        assert_int_not_equal(l1, 0);
    }
}

static void test_key_size_bound(void **state)
{
    char key[512], k[RL_KEY_SIZE(8, 512)];
    int n;

    (void)state;
    memset(key, 'k', sizeof(key));
    n = rl_key_format(k, sizeof(k), "prefix::", 8, key, sizeof(key),
                      UINT32_MAX, UINT64_MAX);
    assert_true(n > 0);
    assert_int_equal((size_t)n + 1, sizeof(k)); /* the bound is exact */
    assert_int_equal(rl_key_format(k, sizeof(k) - 1, "prefix::", 8, key,
                                   sizeof(key), 1, 1),
                     RL_EFULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_index_and_reset_at_boundary),
        cmocka_unit_test(test_decide),
        cmocka_unit_test(test_five_per_minute),
        cmocka_unit_test(test_boundary_burst),
        cmocka_unit_test(test_key_format),
        cmocka_unit_test(test_hash_tag_stable_across_windows),
        cmocka_unit_test(test_key_size_bound),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
