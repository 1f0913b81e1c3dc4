/* A bounded heavy-hitter sketch (Space-Saving, Metwally, Agrawal and El
 * Abbadi, 2005) and the summaries it reads out as: which callers a rule
 * refused most (server/core/top.c), per loop, per instance and across a
 * fleet (tools/rl-ctl.c). No I/O, no clock, nothing global.
 *
 * A sketch of k entries counts N increments of keys, however many keys
 * there are, in k entries: a key it holds gains the increment; a new key
 * takes the place of the entry with the smallest count m, starting at
 * m + the increment with an error of m. So every entry's count is at
 * least the key's true count and at most err more (count - err <= true
 * <= count), m <= N/k, any key not held was counted at most m times, and
 * so every key counted more than N/k times is held. With fewer than k
 * keys every count is exact (err 0).
 *
 * A summary is what a sketch reads out as, and what merges: its entries
 * with their counts and errors, a floor (no key outside its entries was
 * counted more than floor times: the sketch's m when full, else 0) and the
 * total N. Merging summaries (the two epochs of a window, the loops of
 * --threads, the instances of a fleet) sums each key's count over them,
 * taking a summary's floor for a key it does not hold (its count and its
 * error: the truth there is between 0 and the floor), keeps the `max`
 * largest, and makes the floor the larger of the floors' sum and the
 * largest count it dropped. The bounds above still hold for the result:
 * count - err <= true <= count for each entry, and floor for any other
 * key; err <= the floors' sum <= N/k when every input had k entries; a
 * key counted more than the floor is listed, and the floor of a merge
 * kept to k entries is at most 2N/k.
 *
 * Keys are kept in at most RL_TOPK_KEY_MAX bytes: a longer one as its
 * first RL_TOPK_CUT bytes, '~' and 16 hex digits of a SipHash of the
 * whole key under a fixed key (so two instances store one key alike, and
 * two long keys with one beginning stay apart), marked `cut`. */
#ifndef RL_TOPK_H
#define RL_TOPK_H

#include <stddef.h>
#include <stdint.h>

#include "rl_buf.h"
#include "rl_hash.h"

#define RL_TOPK_KEY_MAX 128
#define RL_TOPK_CUT (RL_TOPK_KEY_MAX - 17)
#define RL_TOPK_K_MAX 1024
/* A merge's inputs at most (tools: the instances of a fleet, times their
 * loops' epochs). */
#define RL_TOPK_MERGE_MAX 4096

typedef struct rl_topk_entry_s {
    uint64_t count; /* at least the key's true count */
    uint64_t err;   /* at most this much over it */
    uint16_t len;   /* of key, 1 to RL_TOPK_KEY_MAX */
    uint8_t cut;    /* the key was longer: see above */
    char key[RL_TOPK_KEY_MAX];
} rl_topk_entry_t;

typedef struct rl_topk_s {
    uint32_t k, n;  /* entries, entries in use */
    uint32_t nb;    /* buckets, a power of two */
    uint64_t total; /* N: increments counted */
    rl_topk_entry_t *e;
    uint64_t *hash;   /* per entry */
    uint32_t *heap;   /* entry indexes, a min-heap by count */
    uint32_t *pos;    /* per entry: its place in heap */
    uint32_t *next;   /* per entry: the next in its bucket, + 1 */
    uint32_t *bucket; /* the first entry, + 1; 0: none */
    rl_hash_key_t hk;
} rl_topk_t;

/* A sketch's read-out (see above). e[0, n) is the owner's: from
 * rl_topk_read or rl_topk_merge, freed with free(); sorted by count, the
 * largest first, after a merge. */
typedef struct rl_topk_sum_s {
    rl_topk_entry_t *e;
    size_t n;
    uint64_t floor;
    uint64_t total;
} rl_topk_sum_t;

/* Bytes a sketch of k entries holds (rl_topk_init's one allocation). */
size_t rl_topk_bytes(uint32_t k);

/* Prepares t for k entries (1 to RL_TOPK_K_MAX), its table hashed under
 * hk (the process's random key: callers choose the keys). Returns 0,
 * RL_EINVAL (k out of bounds) or RL_ENOMEM. */
int rl_topk_init(rl_topk_t *t, uint32_t k, const rl_hash_key_t *hk);

/* Frees what t holds; NULL and a zeroed t are fine. */
void rl_topk_free(rl_topk_t *t);

/* Empties t, keeping its memory. */
void rl_topk_clear(rl_topk_t *t);

/* Counts w (>= 1) more for key[0, len) (len >= 1; a key longer than
 * RL_TOPK_KEY_MAX is kept cut). Allocates nothing. */
void rl_topk_add(rl_topk_t *t, const char *key, size_t len, uint64_t w);

/* The form key[0, len) is kept in: written to out (RL_TOPK_KEY_MAX
 * bytes), its length returned, *cut set. */
size_t rl_topk_key(const char *key, size_t len, char *out, uint8_t *cut);

/* Reads t out into *s (entries unsorted, in a new array; floor and
 * total). Returns 0 or RL_ENOMEM (then s holds nothing). */
int rl_topk_read(const rl_topk_t *t, rl_topk_sum_t *s);

/* Merges in[0, nin) (nin <= RL_TOPK_MERGE_MAX) into *out, keeping the
 * max largest (max >= 1), sorted; ties by the smaller error, then by key.
 * in[i] may hold no entries. Returns 0, RL_EINVAL or RL_ENOMEM (then out
 * holds nothing). */
int rl_topk_merge(const rl_topk_sum_t *in, size_t nin, size_t max,
                  rl_topk_sum_t *out);

/* Frees s's entries; NULL is fine. */
void rl_topk_sum_free(rl_topk_sum_t *s);

/* A summary as text, for Redis and for rl-ctl (the instances' published
 * top offenders, docs/server.md):
 *
 *   rltop1 SINCE NOW TOTAL FLOOR N\n
 *   COUNT ERR CUT LEN KEY\n          (N times; KEY is LEN raw bytes)
 *
 * SINCE and NOW (unix ms) say what the counts cover. Appends to out;
 * returns 0 or the buffer's error. */
int rl_topk_encode(const rl_topk_sum_t *s, uint64_t since_ms, uint64_t now_ms,
                   rl_buf_t *out);

/* Reads the text of rl_topk_encode from p[0, n) into *s (entries
 * allocated, at most RL_TOPK_K_MAX: the count is checked before anything
 * is reserved) and *since_ms, *now_ms. Returns 0, or RL_EINVAL for
 * anything else (s then holds nothing). */
int rl_topk_decode(const char *p, size_t n, rl_topk_sum_t *s,
                   uint64_t *since_ms, uint64_t *now_ms);

#endif
