/* Admission against several limits at one instant: a request is allowed
 * only when every limit has room for its cost, and a refused request
 * consumes nothing in any of them (check, then consume). The batcher's
 * replay, the memory store and the Redis module all decide with these; the
 * Redis script (store/redis_script.lua) is the same arithmetic in Lua. So
 * every store agrees request for request.
 *
 * Every algorithm, looked at from one instant, is a capacity, what is used
 * of it, and what one unit of cost uses:
 *
 *   fixed-window            cap L, used = the window's counter, unit 1
 *   sliding-window-counter  cap L, used = cur + ceil(min(prev, L) * weight
 *                           / 65536), unit 1, where weight = ceil((W - e) *
 *                           65536 / W) is the previous window's share at e
 *                           ms into the current one (rl_swc_weight): the
 *                           usual prev x (1 - e/W) + cur, never looser
 *   gcra                    cap B x T us, used = max(TAT, now) - now us,
 *                           unit T us (the emission interval)
 *   sliding-window          cap L, used = the cost admitted in (now - W,
 *                           now] (the log's sum), unit 1; the store also
 *                           reports the oldest entries (when each leaves
 *                           the window, and its cost), enough to say when
 *                           a refused request would fit (RL_SWL_PREFIX)
 *
 * A batch decides its requests at one clock reading, so within a batch an
 * op's requests are admitted in arrival order while used + cost x unit
 * fits. What the store writes afterwards is `added`: the cost admitted
 * (fixed, swc: added to the current counter) or the new TAT (gcra: now +
 * used). Counts are what the store held before the request; a count above
 * its limit (the limit was lowered) leaves no room. */
#ifndef RL_ADMIT_H
#define RL_ADMIT_H

#include <stddef.h>
#include <stdint.h>

#include "rl_msg.h"

#define RL_ADMIT_WINDOWS_MAX 8

/* The algorithms. Their short names, in identifiers here and in every
 * caller: swc is the sliding-window counter (two fixed windows, the
 * previous weighted), swl the sliding-window log (an entry per admitted
 * cost), gcra the generic cell rate algorithm. */
enum {
    RL_ALGO_FIXED = 0, /* fixed-window (optionally staggered per caller) */
    RL_ALGO_SLIDING_COUNTER = 1, /* sliding-window-counter */
    RL_ALGO_GCRA = 2,            /* gcra: token bucket as a meter */
    RL_ALGO_SLIDING_LOG = 3,     /* sliding-window: the exact log */
    RL_ALGO_MAX
};

/* The sliding-window-counter's weights are in 1/65536ths, and its limits
 * stay below 2^36, so that limit x weight stays below 2^53, where the Redis
 * script's doubles are exact. */
#define RL_SWC_ONE 65536u
#define RL_SWC_LIMIT_MAX (UINT64_C(1) << 36)

/* The gcra's cap (burst x interval) stays within 366 days of
 * microseconds, far below 2^53, and its interval at least 1 us. */
#define RL_GCRA_CAP_MAX_US (UINT64_C(31622400) * 1000000)

/* A sliding window's log reaches the replay as its sum, its newest entry
 * and its oldest entries, at most RL_SWL_PREFIX of them: as many as cover
 * max(sum - limit, 0) + the largest cost of the op's requests, which is
 * the most any refused request of the batch needs to leave the window.
 * Limits are at most RL_SWL_LIMIT_MAX (the default cap, --sliding-window-max,
 * is lower), so a log holds at most that many entries. */
#define RL_SWL_PREFIX 4
#define RL_SWL_LIMIT_MAX 1000000u

typedef struct rl_admit_win_s {
    uint64_t limit;          /* fixed, swc: the limit; gcra: the burst */
    uint64_t count;          /* used, in units (above); advanced by admits */
    uint64_t reset_after_ms; /* fixed, swc: until the current window ends,
                                >= 1; gcra: unused */
    uint32_t window_s;       /* fixed, swc: the window; gcra: the period */
    uint8_t algo;            /* RL_ALGO_*; 0 is the fixed window */
    uint32_t weight;         /* swc: the previous window's share */
    uint64_t unit;           /* gcra: the emission interval T, us */
    uint64_t prev;           /* swc: the previous counter, capped at limit */
    uint64_t count0;         /* count when loaded */
    /* swl: its oldest entries, oldest first: when each leaves the window
     * (ms from now, >= 1) and its cost; they cover what any refused
     * request needs unless nold == RL_SWL_PREFIX and they sum to less
     * than count0 (a limit lowered far below the log's sum), when a retry
     * is the log's full reset (an upper bound). */
    uint64_t old_ms[RL_SWL_PREFIX];
    uint64_t old_cost[RL_SWL_PREFIX];
    uint32_t nold;
} rl_admit_win_t;

/* Loads a limit from what the store holds (a missing key reads as 0; a
 * negative count as 0). */
void rl_admit_fixed(rl_admit_win_t *w, uint64_t limit, uint32_t window_s,
                    int64_t count, uint64_t reset_after_ms);
void rl_admit_swc(rl_admit_win_t *w, uint64_t limit, uint32_t window_s,
                  int64_t cur, int64_t prev, uint32_t weight,
                  uint64_t reset_after_ms);
void rl_admit_gcra(rl_admit_win_t *w, uint64_t burst, uint32_t period_s,
                   uint64_t t_us, int64_t tat_us, uint64_t now_ms);

/* A sliding window's log: sum the cost it holds in (now - W, now],
 * newest_ms until its newest entry leaves the window (0 when empty), and
 * its oldest entries (n of them, times as ms from now). */
void rl_admit_swl(rl_admit_win_t *w, uint64_t limit, uint32_t window_s,
                  int64_t sum, uint64_t newest_ms, const uint64_t *old_ms,
                  const uint64_t *old_cost, uint32_t n);

/* The previous window's weight when reset_after_ms remain of a window of
 * window_s: ceil((W - elapsed) x 65536 / W), from 1 to 65536. */
uint32_t rl_swc_weight(uint64_t reset_after_ms, uint32_t window_s);

/* The emission interval of N per period_s seconds, rounded up to a whole
 * microsecond (so never faster than N per period); 0 when N is faster
 * than one per microsecond. */
uint64_t rl_gcra_interval_us(uint64_t n, uint32_t period_s);

/* What to write back after the admissions: fixed, swc, the cost admitted
 * since loading (to add to the current counter); gcra, the new TAT in us
 * (meaningful when something was admitted). */
uint64_t rl_admit_added(const rl_admit_win_t *w, uint64_t now_ms);

/* Room for cost in every limit? */
int rl_admit_fits(const rl_admit_win_t *w, size_t n, uint64_t cost);

/* Decides one request: when it fits, consumes cost in every limit and
 * returns 1; otherwise changes nothing and returns 0. */
int rl_admit_one(rl_admit_win_t *w, size_t n, uint64_t cost);

/* k requests of one cost, in order: how many are admitted. With equal costs
 * the first a fit and the rest do not, a = min(k, min over limits of
 * floor(room / (cost x unit))), so the answer needs no loop. */
uint64_t rl_admit_equal(rl_admit_win_t *w, size_t n, uint64_t cost,
                        uint64_t k);

/* Fills the decision fields of *r (code, limit, used, remaining,
 * reset_after_ms, retry_after_ms, window_s, algorithm) for a request just
 * decided by rl_admit_one on these limits (their counts already include it when
 * it was allowed). Per limit, in requests of cost 1: remaining is the room
 * left; reset_after_ms the time until the caller is back to a full
 * allowance (fixed: the window's end); retry_after_ms the earliest wait
 * after which this same request fits if nothing else arrives (fixed: the
 * window's end). The deciding limit: when allowed, the one with the least
 * remaining (ties: the one that resets last); when refused, among the
 * limits without room, the one whose retry is longest. Returns the
 * deciding limit's index in w (n when there are no limits), which a
 * group's answer names the level of. */
size_t rl_admit_result(const rl_admit_win_t *w, size_t n, uint64_t cost,
                       int allowed, rl_result_t *r);

/* Increment, then compare (envoy-ratelimit's counting), or compare alone
 * (add 0): with add, cost is added to every limit whatever its room; the
 * request is within when, with its cost, no limit is past its cap (at the
 * cap is within, nothing remaining). A cost of 0 adds nothing and is within
 * while no limit is past its cap: a read. Fills *r: within, as
 * rl_admit_result allowed (remaining: the room after it, or now without
 * add); over, OVER_LIMIT for the limit, among those it takes past their
 * cap, whose retry is longest: used its count (with the request when
 * added), remaining the room it found (before it: what envoy-ratelimit's
 * statistics infer the over-limit hits from), retry_after_ms the wait
 * before a request of this cost is within again, reset_after_ms as
 * rl_admit_result's. Returns 1 within, 0 over. */
int rl_admit_counted(rl_admit_win_t *w, size_t n, uint64_t cost, int add,
                     rl_result_t *r);

/* The wait before cost fits in limit w alone (0 when it fits now). */
uint64_t rl_admit_retry_ms(const rl_admit_win_t *w, uint64_t cost);

#endif
