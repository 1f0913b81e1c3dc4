/* One limit of a rule and its syntax (limit.c): N per duration under an
 * algorithm (rl_admit.h), in one word "N/DURATION[:OPTION...]" (the
 * compact form of --rule and of a YAML scalar) or built from a YAML map's
 * fields (rules.c, envoy_conf.c) and checked whole by rls_limit_check.
 * Options: an algorithm (fixed-window, sliding-window,
 * sliding-window-counter, gcra),
 * per-caller or aligned (the windows' phase), burst=B (gcra only). */
#ifndef RLS_POLICY_LIMIT_H
#define RLS_POLICY_LIMIT_H

#include <stddef.h>
#include <stdint.h>

#include "rl_admit.h"

/* One limit of a rule: N per window_s seconds under an algorithm
 * (RL_ALGO_*, rl_admit.h). For a gcra, N/window_s is the rate and burst
 * the bucket (t_us its emission interval, worked out at load). phase: the
 * windows (fixed, sliding-window-counter) start at a per-caller offset. */
typedef struct rls_limit_s {
    uint64_t limit;
    uint32_t window_s;
    uint8_t algo;
    uint8_t phase;
    uint64_t burst; /* gcra only; >= 1 */
    uint64_t t_us;  /* gcra only: the emission interval */
} rls_limit_t;

/* Parses a limit in one word, "N/DURATION[:OPTION...]" (len bytes, no NUL
 * needed; see the top), checked whole (rls_limit_check): every field of
 * *out is set. Returns 0 or RL_EINVAL with a reason in why (static
 * text). */
int rls_limit_parse(const char *s, size_t len, rls_limit_t *out,
                    const char **why);

/* Checks the algorithm's bounds on a limit whose limit, window_s, algo,
 * phase and burst (0: not given) are set, and completes it: a gcra's
 * emission interval t_us and its burst (N when not given); 0 for the
 * other algorithms. Returns 0 or RL_EINVAL with a reason in why (static
 * text). */
int rls_limit_check(rls_limit_t *l, const char **why);

/* Formats a limit in the form rls_limit_parse reads back to the same
 * fields: "N/DURATION" with the largest exact unit ("33/1m"), then the
 * options that are not defaults ("10/1s:gcra:burst=20"). Returns the length
 * written; a buf of RLS_LIMIT_FMT_MAX bytes is always enough (48 for a
 * fixed window). */
#define RLS_LIMIT_FMT_MAX 80
size_t rls_limit_format(const rls_limit_t *l, char *buf, size_t len);

/* "N/DURATION" alone (no options), into out's limit and window_s. Returns
 * 0 or RL_EINVAL with a reason in why (static text). */
int rls_rate_parse(const char *s, size_t len, rls_limit_t *out,
                   const char **why);

/* A duration, "90s", "15m", "2h", "7d" or bare seconds, 1 s to 366 d.
 * Returns 0 or RL_EINVAL. */
int rls_duration_parse(const char *s, size_t len, uint32_t *secs);

/* The largest sliding-window limit (--sliding-window-max): a caller's
 * log holds up to that many entries. Process-wide, set once at start
 * (1 to RL_SWL_LIMIT_MAX). */
#define RLS_SWL_MAX_DEFAULT 10000
void rls_limit_set_swl_max(uint64_t max);
uint64_t rls_limit_swl_max(void);

/* An algorithm's name (fixed-window, sliding-window,
 * sliding-window-counter, gcra). */
const char *rls_algo_name(int algo);

/* Returns RL_ALGO_* for a name, or RL_EINVAL with why (static text: the
 * names there are). */
int rls_algo_parse(const char *s, size_t len, const char **why);

/* Returns 0 for "aligned", 1 for "per-caller", RL_EINVAL otherwise. */
int rls_phase_parse(const char *s, size_t len);

/* A gcra's burst: 1 to 2^63-1. Returns 0 or RL_EINVAL with why (static
 * text). */
int rls_burst_parse(const char *s, size_t len, uint64_t *out, const char **why);

#endif
