#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "rl_hash.h"

/* The reference vectors of the SipHash paper: key 00 01 .. 0f, message
 * 00 01 .. (n-1). */
static void test_siphash24_vectors(void **state)
{
    rl_hash_key_t k;
    uint8_t key[16], msg[64];
    int i;

    (void)state;
    for (i = 0; i < 16; i++)
        key[i] = (uint8_t)i;
    for (i = 0; i < 64; i++)
        msg[i] = (uint8_t)i;
    memcpy(&k.k0, key, 8); /* little-endian host assumed, as x86/arm */
    memcpy(&k.k1, key + 8, 8);
    assert_int_equal(rl_siphash24(&k, msg, 0), UINT64_C(0x726fdb47dd0e0e31));
    assert_int_equal(rl_siphash24(&k, msg, 15), UINT64_C(0xa129ca6149be45e5));
}

/* Every length hashes every byte: flipping any one bit changes the value,
 * and so does the length alone. */
static void test_every_byte_counts(void **state)
{
    rl_hash_key_t k = {1, 2};
    uint8_t msg[40];
    size_t n, i;

    (void)state;
    memset(msg, 'a', sizeof(msg));
    for (n = 1; n <= sizeof(msg); n++) {
        uint64_t h = rl_hash(&k, msg, n);
        assert_int_not_equal(h, rl_hash(&k, msg, n - 1));
        for (i = 0; i < n; i++) {
            msg[i] ^= 0x10;
            assert_int_not_equal(h, rl_hash(&k, msg, n));
            msg[i] ^= 0x10;
        }
    }
}

static void test_key_changes_hash(void **state)
{
    rl_hash_key_t a = {1, 2}, b = {1, 3};

    (void)state;
    assert_int_not_equal(rl_hash(&a, "user:1", 6), rl_hash(&b, "user:1", 6));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_siphash24_vectors),
        cmocka_unit_test(test_every_byte_counts),
        cmocka_unit_test(test_key_changes_hash),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
