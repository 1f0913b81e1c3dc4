/* SipHash, keyed: the hash for tables indexed by client-chosen keys. A
 * per-process random key keeps a client from crafting keys that all land in
 * one bucket (hash flooding), as redis does for its dicts. */
#ifndef RL_HASH_H
#define RL_HASH_H

#include <stddef.h>
#include <stdint.h>

typedef struct rl_hash_key_s {
    uint64_t k0, k1;
} rl_hash_key_t;

/* SipHash-c-d of p[0..n) under key k. rl_hash() is SipHash-1-3, the
 * variant redis uses for its tables; rl_siphash24() is the reference
 * SipHash-2-4, kept for its published test vectors. */
uint64_t rl_siphash(const rl_hash_key_t *k, const void *p, size_t n, int c,
                    int d);

static inline uint64_t rl_hash(const rl_hash_key_t *k, const void *p,
                               size_t n)
{
    return rl_siphash(k, p, n, 1, 3);
}

static inline uint64_t rl_siphash24(const rl_hash_key_t *k, const void *p,
                                    size_t n)
{
    return rl_siphash(k, p, n, 2, 4);
}

#endif
