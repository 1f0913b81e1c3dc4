/* rl-fit's simulation: every caller's requests, in log order, decided
 * under each candidate threshold by the service's own admission code
 * (lib/rl_admit.h), with the log's time as the clock.
 *
 * A candidate is a rule of one algorithm and up to RL_ADMIT_WINDOWS_MAX
 * windows; window j's limit is the threshold times its multiplier. Per
 * caller it holds one fixed-size record in an open-addressed table keyed
 * by a 64-bit hash of the caller's key (rlf_sim_rec_bytes): the current
 * period's use and the peak, each window's index, two bit masks and one
 * 8-byte state per candidate and window. Nothing else grows with the log,
 * except for the sliding window (the exact log): there each candidate and
 * window's 8 bytes point to a log of the cost it admitted in the window,
 * one entry (12 bytes: the ms and the cost) per admitted millisecond, so at
 * most the limit's entries, and pruned as the caller's time moves on (all
 * callers' logs are swept when their bytes pass 64 MB, double or reach the
 * cap). Their total is capped (max_log_bytes): past it rlf_sim_add
 * returns RLF_ELOG and the run cannot go on, never a silently wrong
 * answer. */
#ifndef RLF_SIM_H
#define RLF_SIM_H

#include <stddef.h>
#include <stdint.h>

#include "rl_admit.h"

#define RLF_CAND_MAX 64

/* rlf_sim_add: the sliding-window logs would pass max_log_bytes. */
#define RLF_ELOG (-1000)

/* A sliding-window log: this header, then 12 bytes per entry slot. */
#define RLF_LOG_ENTRY_BYTES 12

typedef struct rlf_sim_conf_s {
    uint8_t algo; /* RL_ALGO_FIXED, _SWC, _GCRA or _SWL */
    size_t nwin;
    uint32_t window_s[RL_ADMIT_WINDOWS_MAX]; /* [0] is the period */
    uint32_t mult[RL_ADMIT_WINDOWS_MAX];
    size_t ncand;
    uint64_t cand[RLF_CAND_MAX]; /* ascending thresholds */
    size_t max_users;
    uint64_t max_log_bytes; /* sliding window: its logs' cap, > 0 */
} rlf_sim_conf_t;

typedef struct rlf_cand_stats_s {
    uint64_t users;   /* callers with a refusal */
    uint64_t periods; /* caller-periods with a refusal */
    uint64_t refused; /* requests refused */
    uint64_t refused_cost;
} rlf_cand_stats_t;

typedef struct rlf_sim_s rlf_sim_t;

/* Checks the configuration (why on RL_EINVAL) and makes a simulation.
 * Returns 0, RL_EINVAL or RL_ENOMEM. */
int rlf_sim_new(rlf_sim_t **out, const rlf_sim_conf_t *conf, const char **why);
void rlf_sim_free(rlf_sim_t *s);

/* Bytes per caller record. */
size_t rlf_sim_rec_bytes(const rlf_sim_conf_t *conf);

/* One request of caller h at ms (not earlier than the previous request's
 * of any caller: the sliding window's sweep prunes every log at the latest
 * ms). Returns 0, or RL_EFULL when h is new and max_users callers are held
 * (it is counted as dropped), or RL_ENOMEM, or RLF_ELOG (the sliding
 * window's logs would pass max_log_bytes even after a sweep; the run cannot
 * go on). */
int rlf_sim_add(rlf_sim_t *s, uint64_t h, uint64_t ms, uint64_t cost);

/* Closes every caller's open period. Call once, after the last add. */
void rlf_sim_finish(rlf_sim_t *s);

typedef struct rlf_sim_totals_s {
    uint64_t users, periods, requests, cost, dropped;
} rlf_sim_totals_t;

void rlf_sim_totals(const rlf_sim_t *s, rlf_sim_totals_t *t);

/* The sliding window's logs: bytes held now and at most, entries held
 * now, and the most they could take for the callers held (every log full:
 * per caller, the sum over candidates and windows of a log with room for
 * the limit's entries). All 0 for other algorithms. */
typedef struct rlf_log_stats_s {
    uint64_t bytes, peak_bytes, entries, worst_bytes;
} rlf_log_stats_t;

void rlf_sim_log_stats(const rlf_sim_t *s, rlf_log_stats_t *ls);

/* Bytes of a sliding-window log besides its entries. */
size_t rlf_sim_log_header_bytes(void);
const rlf_cand_stats_t *rlf_sim_cand(const rlf_sim_t *s, size_t i);

/* The q-quantile (nearest rank, q in (0, 1]) of the callers' peak use in
 * one period (the sum of their requests' cost in it, refused or not).
 * After finish; 0 when there are no callers. */
uint64_t rlf_sim_peak_quantile(const rlf_sim_t *s, double q);

#endif
