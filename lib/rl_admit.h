/* Admission against several fixed windows: a request is allowed only when
 * every window has room for its cost, and a refused request consumes
 * nothing in any window (check, then increment). The batcher, the memory
 * store and the Redis script (store/redis_script.c, the same rules in Lua)
 * all decide with these, so every store agrees request for request.
 *
 * Counts are what the windows hold before the request; a count above its
 * limit (the limit was lowered) leaves no room. */
#ifndef RL_ADMIT_H
#define RL_ADMIT_H

#include <stddef.h>
#include <stdint.h>

#include "rl_msg.h"

#define RL_ADMIT_WINDOWS_MAX 8

typedef struct rl_admit_win_s {
    uint64_t limit;
    uint64_t count;          /* consumed so far; advanced by admissions */
    uint64_t reset_after_ms; /* until this window ends, >= 1 */
    uint32_t window_s;
} rl_admit_win_t;

/* Room for cost in every window? */
int rl_admit_fits(const rl_admit_win_t *w, size_t n, uint64_t cost);

/* Decides one request: when it fits, adds cost to every window and returns
 * 1; otherwise changes nothing and returns 0. */
int rl_admit_one(rl_admit_win_t *w, size_t n, uint64_t cost);

/* k requests of one cost, in order: how many are admitted. With equal costs
 * the first a fit and the rest do not, a = min(k, min over windows of
 * floor((limit - count) / cost)), so the answer needs no loop. Counts are
 * advanced by a * cost. */
uint64_t rl_admit_equal(rl_admit_win_t *w, size_t n, uint64_t cost,
                        uint64_t k);

/* Fills the decision fields of *r (code, limit, used, remaining,
 * reset_after_ms, retry_after_ms, window_s) for a request just decided by
 * rl_admit_one on these windows (their counts already include it when it
 * was allowed). The deciding window: when allowed, the one with the least
 * remaining (ties: the one that ends last); when refused, among the windows
 * without room, the one that frees up last, whose end is retry_after_ms. */
void rl_admit_result(const rl_admit_win_t *w, size_t n, uint64_t cost,
                     int allowed, rl_result_t *r);

#endif
