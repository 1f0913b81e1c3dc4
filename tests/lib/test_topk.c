/* The heavy-hitter sketch (lib/topk.c): Space-Saving's bounds, its
 * memory, merges and the summary's text. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "rl_error.h"
#include "rl_topk.h"

static const rl_hash_key_t hk = {0x0123456789abcdefu, 0xfedcba9876543210u};

/* A deterministic stream: xorshift64. */
static uint64_t rnd(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static const rl_topk_entry_t *find(const rl_topk_sum_t *s, const char *key)
{
    size_t i;

    for (i = 0; i < s->n; i++)
        if (s->e[i].len == strlen(key) &&
            memcmp(s->e[i].key, key, s->e[i].len) == 0)
            return &s->e[i];
    return NULL;
}

/* Fewer keys than entries: every count exact, no error, floor 0. */
static void test_exact_below_k(void **state)
{
    rl_topk_t t;
    rl_topk_sum_t s, m;
    char key[16];
    int i;

    (void)state;
    assert_int_equal(rl_topk_init(&t, 8, &hk), RL_OK);
    for (i = 0; i < 100; i++) {
        snprintf(key, sizeof(key), "k%d", i % 5);
        rl_topk_add(&t, key, strlen(key), 1);
    }
    assert_int_equal(rl_topk_read(&t, &s), RL_OK);
    assert_int_equal(s.n, 5);
    assert_int_equal(s.floor, 0);
    assert_int_equal(s.total, 100);
    assert_int_equal(rl_topk_merge(&s, 1, 8, &m), RL_OK);
    for (i = 0; i < 5; i++) {
        assert_int_equal(m.e[i].count, 20);
        assert_int_equal(m.e[i].err, 0);
    }
    rl_topk_sum_free(&s);
    rl_topk_sum_free(&m);
    rl_topk_free(&t);
}

/* One heavy caller among 100,000 distinct light ones, interleaved: it is
 * first, and its count is exact within the error reported, which is at
 * most N/k; every entry brackets its true count; memory does not grow
 * with the keys (the sketch allocates nothing past init). */
static void test_heavy_among_many(void **state)
{
    enum { K = 32, LIGHT = 100000, HEAVY = 20000 };
    rl_topk_t t;
    rl_topk_sum_t s, m;
    uint64_t seed = 88172645463325252u;
    const rl_topk_entry_t *e;
    char key[32];
    size_t i, h = 0;

    (void)state;
    assert_int_equal(rl_topk_init(&t, K, &hk), RL_OK);
    /* The whole sketch is one block of this many bytes, whatever the
     * keys: about 190 bytes an entry. */
    assert_true(rl_topk_bytes(K) < (size_t)K * 200 + 4 * 128);
    for (i = 0; i < LIGHT; i++) {
        snprintf(key, sizeof(key), "light-%zu", i);
        rl_topk_add(&t, key, strlen(key), 1);
        /* The heavy one, one time in five, at random places. */
        if (rnd(&seed) % 5 == 0 && h < HEAVY) {
            rl_topk_add(&t, "heavy", 5, 1);
            h++;
        }
    }
    for (; h < HEAVY; h++)
        rl_topk_add(&t, "heavy", 5, 1);
    assert_int_equal(t.n, K);
    assert_int_equal(rl_topk_read(&t, &s), RL_OK);
    assert_int_equal(s.total, LIGHT + HEAVY);
    assert_true(s.floor <= s.total / K);
    assert_int_equal(rl_topk_merge(&s, 1, K, &m), RL_OK);
    e = &m.e[0];
    assert_int_equal(e->len, 5);
    assert_memory_equal(e->key, "heavy", 5);
    assert_true(e->count >= HEAVY);
    assert_true(e->count - e->err <= HEAVY);
    assert_true(e->err <= s.total / K);
    /* Every light key was counted once: each entry brackets 1. */
    for (i = 1; i < m.n; i++) {
        assert_true(m.e[i].count >= 1);
        assert_true(m.e[i].count - m.e[i].err <= 1);
        assert_true(m.e[i].err <= s.total / K);
    }
    rl_topk_sum_free(&s);
    rl_topk_sum_free(&m);
    rl_topk_free(&t);
}

/* A skewed stream checked against exact counts: for every entry,
 * count - err <= true <= count; every key counted more than N/k is held;
 * the floor bounds every key not held. */
static void test_bounds_zipf(void **state)
{
    enum { K = 16, KEYS = 2000, N = 200000 };
    static uint64_t truth[KEYS];
    rl_topk_t t;
    rl_topk_sum_t s;
    uint64_t seed = 0x9e3779b97f4a7c15u;
    char key[32];
    size_t i;

    (void)state;
    memset(truth, 0, sizeof(truth));
    assert_int_equal(rl_topk_init(&t, K, &hk), RL_OK);
    for (i = 0; i < N; i++) {
        /* Roughly 1/x: the smaller of three draws, squared down. */
        uint64_t a = rnd(&seed) % KEYS, b = rnd(&seed) % KEYS,
                 c = rnd(&seed) % KEYS;
        uint64_t x = a < b ? a : b;
        x = (x < c ? x : c) * (x < c ? x : c) / KEYS;
        truth[x]++;
        snprintf(key, sizeof(key), "caller-%llu", (unsigned long long)x);
        rl_topk_add(&t, key, strlen(key), 1);
    }
    assert_int_equal(rl_topk_read(&t, &s), RL_OK);
    for (i = 0; i < KEYS; i++) {
        const rl_topk_entry_t *e;
        snprintf(key, sizeof(key), "caller-%zu", i);
        e = find(&s, key);
        if (e != NULL) {
            assert_true(e->count >= truth[i]);
            assert_true(e->count - e->err <= truth[i]);
            assert_true(e->err <= (uint64_t)N / K);
        } else {
            assert_true(truth[i] <= s.floor);
            assert_true(truth[i] <= (uint64_t)N / K);
        }
    }
    rl_topk_sum_free(&s);
    rl_topk_free(&t);
}

/* Merges of several sketches (loops, epochs, instances) keep the bounds
 * against the true sums, and list every key above the floor. */
static void test_merge_bounds(void **state)
{
    enum { K = 8, KEYS = 300, S = 4, N = 20000 };
    static uint64_t truth[KEYS];
    rl_topk_t t[S];
    rl_topk_sum_t s[S], m;
    uint64_t seed = 12345;
    char key[32];
    size_t i, j;

    (void)state;
    memset(truth, 0, sizeof(truth));
    for (j = 0; j < S; j++)
        assert_int_equal(rl_topk_init(&t[j], K, &hk), RL_OK);
    for (i = 0; i < N; i++) {
        uint64_t a = rnd(&seed) % KEYS, b = rnd(&seed) % KEYS;
        uint64_t x = a < b ? a : b;
        /* Each sketch sees its own mix. */
        j = (size_t)(rnd(&seed) % S);
        if (j == 0 && x % 7 == 0)
            x = 3;
        truth[x]++;
        snprintf(key, sizeof(key), "c%llu", (unsigned long long)x);
        rl_topk_add(&t[j], key, strlen(key), 1);
    }
    for (j = 0; j < S; j++)
        assert_int_equal(rl_topk_read(&t[j], &s[j]), RL_OK);
    assert_int_equal(rl_topk_merge(s, S, K, &m), RL_OK);
    assert_int_equal(m.total, N);
    assert_int_equal(m.n, K);
    assert_true(m.floor <= 2 * (uint64_t)N / K);
    for (i = 1; i < m.n; i++)
        assert_true(m.e[i - 1].count >= m.e[i].count);
    for (i = 0; i < KEYS; i++) {
        const rl_topk_entry_t *e;
        snprintf(key, sizeof(key), "c%zu", i);
        e = find(&m, key);
        if (e != NULL) {
            assert_true(e->count >= truth[i]);
            assert_true(e->count - e->err <= truth[i]);
            assert_true(e->err <= (uint64_t)N / K);
        } else {
            assert_true(truth[i] <= m.floor);
        }
    }
    rl_topk_sum_free(&m);
    for (j = 0; j < S; j++) {
        rl_topk_sum_free(&s[j]);
        rl_topk_free(&t[j]);
    }
}

/* A key over RL_TOPK_KEY_MAX is kept cut: its beginning, '~' and a hash;
 * two long keys with one beginning stay apart, and one key cuts alike
 * whatever the table's key. */
static void test_long_keys(void **state)
{
    char a[300], b[300], out1[RL_TOPK_KEY_MAX], out2[RL_TOPK_KEY_MAX];
    uint8_t cut;
    rl_topk_t t;
    rl_topk_sum_t s;

    (void)state;
    memset(a, 'x', sizeof(a));
    memcpy(b, a, sizeof(b));
    b[299] = 'y';
    assert_int_equal(rl_topk_key(a, 300, out1, &cut), RL_TOPK_KEY_MAX);
    assert_int_equal(cut, 1);
    assert_int_equal(out1[RL_TOPK_CUT], '~');
    assert_memory_equal(out1, a, RL_TOPK_CUT);
    assert_int_equal(rl_topk_key(b, 300, out2, &cut), RL_TOPK_KEY_MAX);
    assert_memory_not_equal(out1, out2, RL_TOPK_KEY_MAX);
    assert_int_equal(rl_topk_key(a, RL_TOPK_KEY_MAX, out2, &cut),
                     RL_TOPK_KEY_MAX);
    assert_int_equal(cut, 0);
    assert_int_equal(rl_topk_init(&t, 4, &hk), RL_OK);
    rl_topk_add(&t, a, 300, 3);
    rl_topk_add(&t, b, 300, 1);
    rl_topk_add(&t, a, 300, 1);
    assert_int_equal(rl_topk_read(&t, &s), RL_OK);
    assert_int_equal(s.n, 2);
    rl_topk_sum_free(&s);
    rl_topk_free(&t);
    assert_int_equal(rl_topk_init(&t, 0, &hk), RL_EINVAL);
    assert_int_equal(rl_topk_init(&t, RL_TOPK_K_MAX + 1, &hk), RL_EINVAL);
}

/* The text round-trips, and anything off by a byte is refused. */
static void test_encode_decode(void **state)
{
    rl_topk_t t;
    rl_topk_sum_t s, m, d;
    rl_buf_t b;
    uint64_t since, now;
    char text[2048];
    size_t n, i;

    (void)state;
    assert_int_equal(rl_topk_init(&t, 2, &hk), RL_OK);
    rl_topk_add(&t, "alice", 5, 10);
    rl_topk_add(&t, "b o\nb", 5, 4);
    rl_topk_add(&t, "carol", 5, 1);
    assert_int_equal(rl_topk_read(&t, &s), RL_OK);
    assert_int_equal(rl_topk_merge(&s, 1, 2, &m), RL_OK);
    rl_buf_init(&b, 1 << 16);
    assert_int_equal(rl_topk_encode(&m, 1000, 2000, &b), RL_OK);
    n = rl_buf_len(&b);
    assert_true(n < sizeof(text));
    memcpy(text, rl_buf_rptr(&b), n);
    assert_int_equal(rl_topk_decode(text, n, &d, &since, &now), RL_OK);
    assert_int_equal(since, 1000);
    assert_int_equal(now, 2000);
    assert_int_equal(d.n, m.n);
    assert_int_equal(d.floor, m.floor);
    assert_int_equal(d.total, 15);
    for (i = 0; i < d.n; i++) {
        assert_int_equal(d.e[i].count, m.e[i].count);
        assert_int_equal(d.e[i].err, m.e[i].err);
        assert_int_equal(d.e[i].len, m.e[i].len);
        assert_memory_equal(d.e[i].key, m.e[i].key, d.e[i].len);
    }
    rl_topk_sum_free(&d);
    /* Every prefix is refused, and one byte more. */
    for (i = 0; i < n; i++)
        assert_int_equal(rl_topk_decode(text, i, &d, &since, &now), RL_EINVAL);
    text[n] = 'x';
    assert_int_equal(rl_topk_decode(text, n + 1, &d, &since, &now), RL_EINVAL);
    /* An entry count past the cap, an error over its count. */
    assert_int_equal(
        rl_topk_decode("rltop1 1 2 3 4 1025\n", 20, &d, &since, &now),
        RL_EINVAL);
    assert_int_equal(
        rl_topk_decode("rltop1 1 2 3 4 1\n5 6 0 1 a\n", 27, &d, &since, &now),
        RL_EINVAL);
    assert_int_equal(
        rl_topk_decode("rltop1 1 2 3 4 1\n6 5 0 1 a\n", 27, &d, &since, &now),
        RL_OK);
    rl_topk_sum_free(&d);
    assert_int_equal(rl_topk_decode("rltop1 1 2 3 4 0\n", 17, &d, &since, &now),
                     RL_OK);
    assert_int_equal(d.n, 0);
    assert_int_equal(rl_topk_decode("rltop1 1 2 3 18446744073709551616 0\n", 36,
                                    &d, &since, &now),
                     RL_EINVAL);
    rl_buf_free(&b);
    rl_topk_sum_free(&s);
    rl_topk_sum_free(&m);
    rl_topk_free(&t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_exact_below_k),
        cmocka_unit_test(test_heavy_among_many),
        cmocka_unit_test(test_bounds_zipf),
        cmocka_unit_test(test_merge_bounds),
        cmocka_unit_test(test_long_keys),
        cmocka_unit_test(test_encode_decode),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
