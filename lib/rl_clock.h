/* Clocks in milliseconds, and a small fast random sequence. Logic that
 * depends on "now" takes now_ms as a parameter; these are for the edges
 * that read the clock. */
#ifndef RL_CLOCK_H
#define RL_CLOCK_H

#include <stdint.h>

/* Milliseconds since the Unix epoch (CLOCK_REALTIME): what windows are
 * counted in. */
uint64_t rl_unix_ms(void);

/* Milliseconds on CLOCK_MONOTONIC: for deadlines and elapsed time. */
uint64_t rl_mono_ms(void);

/* Advances the xorshift64 state *s (which must not be 0, and stays non-zero)
 * and returns the new value. For jitter and spreading, not for secrets. */
uint64_t rl_xorshift64(uint64_t *s);

#endif
