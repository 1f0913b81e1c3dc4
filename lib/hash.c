#include "rl_hash.h"

#define ROTL(x, b) (uint64_t)(((x) << (b)) | ((x) >> (64 - (b))))

#define SIPROUND                                                              \
    do {                                                                      \
        v0 += v1;                                                             \
        v1 = ROTL(v1, 13);                                                    \
        v1 ^= v0;                                                             \
        v0 = ROTL(v0, 32);                                                    \
        v2 += v3;                                                             \
        v3 = ROTL(v3, 16);                                                    \
        v3 ^= v2;                                                             \
        v0 += v3;                                                             \
        v3 = ROTL(v3, 21);                                                    \
        v3 ^= v0;                                                             \
        v2 += v1;                                                             \
        v1 = ROTL(v1, 17);                                                    \
        v1 ^= v2;                                                             \
        v2 = ROTL(v2, 32);                                                    \
    } while (0)

static uint64_t load_le64(const uint8_t *p)
{
    return (uint64_t)p[0] | (uint64_t)p[1] << 8 | (uint64_t)p[2] << 16 |
           (uint64_t)p[3] << 24 | (uint64_t)p[4] << 32 |
           (uint64_t)p[5] << 40 | (uint64_t)p[6] << 48 |
           (uint64_t)p[7] << 56;
}

uint64_t rl_siphash(const rl_hash_key_t *k, const void *data, size_t n,
                    int c, int d)
{
    const uint8_t *p = data, *end = p + (n & ~(size_t)7);
    uint64_t v0 = k->k0 ^ UINT64_C(0x736f6d6570736575);
    uint64_t v1 = k->k1 ^ UINT64_C(0x646f72616e646f6d);
    uint64_t v2 = k->k0 ^ UINT64_C(0x6c7967656e657261);
    uint64_t v3 = k->k1 ^ UINT64_C(0x7465646279746573);
    uint64_t m, b = (uint64_t)n << 56;
    int i;

    for (; p != end; p += 8) {
        m = load_le64(p);
        v3 ^= m;
        for (i = 0; i < c; i++)
            SIPROUND;
        v0 ^= m;
    }
    switch (n & 7) {
    case 7:
        b |= (uint64_t)p[6] << 48;
        /* fall through */
    case 6:
        b |= (uint64_t)p[5] << 40;
        /* fall through */
    case 5:
        b |= (uint64_t)p[4] << 32;
        /* fall through */
    case 4:
        b |= (uint64_t)p[3] << 24;
        /* fall through */
    case 3:
        b |= (uint64_t)p[2] << 16;
        /* fall through */
    case 2:
        b |= (uint64_t)p[1] << 8;
        /* fall through */
    case 1:
        b |= (uint64_t)p[0];
        break;
    case 0:
        break;
    }
    v3 ^= b;
    for (i = 0; i < c; i++)
        SIPROUND;
    v0 ^= b;
    v2 ^= 0xff;
    for (i = 0; i < d; i++)
        SIPROUND;
    return v0 ^ v1 ^ v2 ^ v3;
}
