/* Fixed-window arithmetic (DESIGN.md, "Semantics"). Time is always a
 * parameter, in milliseconds since the Unix epoch, so tests can stand exactly
 * on a window boundary. */
#ifndef RL_WINDOW_H
#define RL_WINDOW_H

#include <stddef.h>
#include <stdint.h>

#include "rl_msg.h"

/* Longest window accepted: 366 days. Keeps window arithmetic far from
 * overflow and Redis expiry times sane. */
#define RL_WINDOW_MAX_S 31622400u

/* Index of the window holding now_ms: floor(now_ms / window). */
static inline uint64_t rl_window_index(uint64_t now_ms, uint32_t window_s)
{
    return now_ms / ((uint64_t)window_s * 1000);
}

/* First millisecond after window `index`, i.e. when it ends. */
static inline uint64_t rl_window_end_ms(uint64_t index, uint32_t window_s)
{
    return (index + 1) * ((uint64_t)window_s * 1000);
}

/* Milliseconds from now_ms until its window ends; always >= 1. */
static inline uint64_t rl_window_reset_after_ms(uint64_t now_ms,
                                                uint32_t window_s)
{
    return rl_window_end_ms(rl_window_index(now_ms, window_s), window_s) -
           now_ms;
}

/* Fills the decision fields of *r (code, limit, used, remaining,
 * reset_after_ms, retry_after_ms) for a request whose cost has been added
 * to the window's counter, giving `count`. Allowed when count <= limit.
 * id and error are left alone. */
void rl_decide(uint64_t count, uint64_t limit, uint64_t now_ms,
               uint32_t window_s, rl_result_t *r);

/* The same, for a caller that already knows reset_after_ms (the window's
 * end minus now, >= 1): a batch decides many requests at one instant, and
 * the division need not be repeated for each. */
void rl_decide_reset(uint64_t count, uint64_t limit, uint64_t reset_after_ms,
                     rl_result_t *r);

/* Writes v in decimal at p (no NUL; up to 20 bytes) and returns the digit
 * count. */
size_t rl_put_u64(char *p, uint64_t v);

/* Longest key rl_key_format() can produce for these lengths, NUL included:
 * prefix, braces, key, two colons, up to 10 + 20 digits, NUL. */
#define RL_KEY_SIZE(prefix_len, key_len) ((prefix_len) + (key_len) + 35)

/* Writes the store key "<prefix>{<key>}:<window_s>:<index>" to dst with a
 * terminating NUL. The braces make the caller's key a Redis Cluster hash tag,
 * so every window of one caller lands on one slot. (Cluster takes the tag up
 * to the first '}', so a key that begins with '}' has an empty tag and each
 * window hashes on its own; that costs co-location only, never correctness,
 * since every command for one window names one key.) The mapping is one to
 * one: the window and index are digits after the last two colons. Returns the
 * length without the NUL, or RL_EFULL if cap is too small (see RL_KEY_SIZE). */
int rl_key_format(char *dst, size_t cap, const char *prefix, size_t prefix_len,
                  const char *key, size_t key_len, uint32_t window_s,
                  uint64_t index);

/* A caller's window offset for `phase: per-caller`, in [0, window_s x 1000)
 * ms: a hash of the caller's key under a fixed key, so every instance and
 * every restart agrees. */
uint64_t rl_phase_offset_ms(const char *key, size_t len, uint32_t window_s);

#endif
