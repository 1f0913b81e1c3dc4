/* rl-bench internals: options, key choice, the load loop, the audit and
 * the reports. The names carry the rlb_ prefix; nothing here is part of
 * librlc, which rl-bench uses only through its public header, as any
 * user's load generator would. */
#ifndef RLB_H
#define RLB_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "rl_hist.h"

/* Exit statuses, the interface for scripts. */
#define RLB_EXIT_OK 0
#define RLB_EXIT_AUDIT 1  /* some window allowed more than its limit */
#define RLB_EXIT_USAGE 2  /* bad arguments, or an output file cannot open */
#define RLB_EXIT_SERVER 3 /* no server reachable, or it went away */
#define RLB_EXIT_OUTPUT 4 /* a report could not be written or drawn */

enum { RLB_DIST_UNIFORM, RLB_DIST_ZIPF, RLB_DIST_HOT };

/* Open loop: how requests arrive. EACH and POISSON send every request at
 * its own scheduled time, as independent clients do (evenly spaced, or
 * with exponential gaps); GROUPED sends what fell due once per tick, so
 * that each write carries several requests. */
enum { RLB_ARRIVE_EACH, RLB_ARRIVE_POISSON, RLB_ARRIVE_GROUPED };

typedef struct rlb_opts_s {
    const char *server;
    /* --fleet: connection i talks to server i mod nservers only, instead of
     * every connection failing over along the whole list. */
    int fleet;
    uint32_t nservers; /* entries in --server's comma-separated list */
    uint32_t connections;
    double duration_s;
    double warmup_s;   /* run but not measured; audited all the same */
    uint32_t inflight; /* closed loop: requests outstanding per conn */
    double rate;       /* open loop when > 0: requests per second */
    double tick_us;    /* open loop, grouped: send what is due this often */
    int arrivals;      /* RLB_ARRIVE_* */
    uint64_t requests; /* stop after this many sent (0: no cap) */
    uint32_t keys;
    int dist;
    double zipf_s;   /* zipf exponent */
    double hot_frac; /* hot: share of requests for key 0 */
    const char *key_prefix;
    /* --rule: requests name this server rule instead of an inline limit;
     * limit and window_s are then only the window the audit checks, given
     * by --limit and --window (have_window), or nothing to audit. */
    const char *rule;
    int have_window;
    const char *audit_skipped; /* why --audit was turned off, or NULL */
    uint64_t limit;
    uint32_t window_s;
    uint32_t cost;
    uint32_t timeout_ms; /* per request */
    double down_s;       /* end the run after this long with no server */
    uint64_t seed;
    int audit;
    int keep_awake; /* idle-priority spinners on every CPU */
    int progress;   /* -1: when stderr is a terminal */
    const char *json_path, *csv_path, *plot_path, *timeline_path;
    FILE *json, *csv; /* opened before the run, so bad paths fail early */
    FILE *timeline;   /* --timeline-csv: one row per 100 ms, during the run */
} rlb_opts_t;

/* Parses argv into *o. Returns 0; prints usage and exits 0 for --help;
 * prints one clear line on stderr and returns RLB_EXIT_USAGE otherwise. */
int rlb_opts_parse(int argc, char **argv, rlb_opts_t *o);

/* ---- keys ------------------------------------------------------------ */

/* A small, fast generator (xoshiro256**); quality is ample for picking
 * keys, and one seed makes a run's key sequence repeatable. */
typedef struct rlb_rng_s {
    uint64_t s[4];
} rlb_rng_t;

void rlb_rng_seed(rlb_rng_t *r, uint64_t seed);
uint64_t rlb_rng_next(rlb_rng_t *r);

/* Picks key indices in [0, n) by the chosen distribution. */
typedef struct rlb_keys_s {
    int dist;
    uint32_t n;
    double hot_frac;
    double *cdf; /* zipf only: cumulative probabilities, n entries */
    rlb_rng_t rng;
} rlb_keys_t;

/* Returns 0 or RL_ENOMEM (the zipf table takes 8 bytes a key). */
int rlb_keys_init(rlb_keys_t *k, const rlb_opts_t *o);
void rlb_keys_free(rlb_keys_t *k);
uint32_t rlb_keys_pick(rlb_keys_t *k);

/* ---- audit ------------------------------------------------------------ */

/* Counts the decisions of every (key, window) from the responses. The
 * window is recognised from the response alone: the server decided
 * between the request's send and its answer, so the deciding window ends
 * within reset_after_ms of that interval, on the local monotonic clock.
 * Servers take time from Redis, so their reset_after_ms agree whatever
 * their own clocks say; the client's clock only has to be steady. Ends lie
 * exactly window_ms apart on a grid whose phase every answer bounds: the
 * phase is narrowed to what all answers allow, and each answer is placed
 * on the grid point its interval holds. A slow answer widens only its own
 * interval, so the grid stays as exact as the quickest answers made it,
 * however loaded the machine; an answer slower than half a window cannot
 * be placed and is counted apart (unplaced). Skew is how far an answer's
 * interval misses the grid: 0 while clocks are steady. */
typedef struct rlb_audit_ent_s {
    uint64_t id; /* key index << 32 | (window number + 2^31); 0: empty */
    uint64_t limit;
    uint32_t allowed, denied;
} rlb_audit_ent_t;

typedef struct rlb_audit_s {
    rlb_audit_ent_t *tab;
    size_t mask, used;
    double window_ms;
    uint32_t window_s;
    uint32_t cost;
    uint64_t fixed_limit; /* --rule: the audited window's limit, else 0 */
    int have_ref;
    double ref_lo, ref_hi;   /* where window number 0 can end (local ms) */
    double ref_ms;           /* the middle of that: the grid's estimate */
    double max_skew_ms;      /* largest miss of an answer from the grid */
    uint64_t failed_open;    /* allowed without counting: left out */
    uint64_t limit_mismatch; /* responses whose limit differed in a window */
    int nomem;               /* a window could not be recorded */
    /* --rule with several windows: answers decided by another window. An
     * admitted one is placed in the audited window by its time on the grid,
     * unless that is too near a window's edge to tell (unplaced); a refused
     * one tells nothing about the audited window (other_refused). */
    uint64_t unplaced, other_refused;
} rlb_audit_t;

/* fixed_limit 0: each window's limit is the one its answers give (inline
 * limits); else the audited window's limit (--rule, whose answers give the
 * deciding window's limit, which may be another window's). expect: the
 * windows the run should see, room for which is reserved up front (up to
 * 4M entries; beyond, the table grows as it fills). */
int rlb_audit_init(rlb_audit_t *a, uint32_t window_s, uint32_t cost,
                   uint64_t fixed_limit, uint64_t expect);
void rlb_audit_free(rlb_audit_t *a);

/* Records one server decision (code OK or OVER_LIMIT) for key index key:
 * the request left at sent_ms and its answer came at recv_ms (local
 * monotonic ms). admitted is whether it consumed quota: an OK answer that
 * is shadow_refused did not (in shadow mode the server counts exactly as
 * enforce would, and a refusal consumes nothing), so it is recorded as
 * refused. window_s is the answer's deciding window (0: not said, taken as
 * the audited one). */
void rlb_audit_add(rlb_audit_t *a, uint32_t key, int admitted, uint64_t limit,
                   uint32_t window_s, uint64_t reset_after_ms, double sent_ms,
                   double recv_ms);

/* What the audit found. A window is "checked" for exactness when its key
 * was refused at least once in it (hammered past its limit) and it began
 * after the run's first request, so that every hit it holds is ours; it is
 * exact when it allowed exactly floor(limit / cost). */
typedef struct rlb_audit_window_s {
    uint32_t key;
    double end_ms; /* estimated end, ms after the run's start */
    uint64_t allowed, denied, limit;
} rlb_audit_window_t;

typedef struct rlb_audit_report_s {
    uint64_t windows, over_limit, checked, exact;
    /* Copied from the audit. */
    uint64_t unplaced, other_refused;
    rlb_audit_window_t *over;    /* the windows over their limit */
    rlb_audit_window_t *inexact; /* checked windows that were not exact */
    size_t nover, ninexact;      /* entries listed (capped) */
    double max_skew_ms;
    int unreliable; /* estimates strayed too far from the grid */
} rlb_audit_report_t;

#define RLB_AUDIT_LIST_MAX 1000

/* Fills *r; run_start_ms and first_send_ms are local monotonic ms. Returns
 * 0 or RL_ENOMEM. */
int rlb_audit_report(const rlb_audit_t *a, double run_start_ms,
                     double first_send_ms, rlb_audit_report_t *r);
void rlb_audit_report_free(rlb_audit_report_t *r);

/* ---- results and reports ---------------------------------------------- */

typedef struct rlb_stats_s {
    uint64_t sent;          /* checks submitted (measured part) */
    uint64_t allowed;       /* answered OK */
    /* Of those, how many a rule in shadow mode would have refused (they
     * consumed nothing). */
    uint64_t shadow_refused;
    uint64_t denied;        /* answered OVER_LIMIT */
    uint64_t server_errors; /* answered ERROR */
    uint64_t failed_open;   /* OK, but the server bypassed its store */
    uint64_t timeouts;      /* no answer in time */
    uint64_t closed;        /* connection lost with the check in flight */
    uint64_t other_errors;  /* refused before sending, and the like */
    uint64_t unsent;        /* open loop: scheduled, never sent */
    uint64_t disconnects;   /* connections lost */
    rl_hist_t lat_ns;       /* latency of answered checks */
} rlb_stats_t;

/* --fleet: one server's share of the measured answers. */
typedef struct rlb_server_stats_s {
    char *addr; /* "HOST:PORT", owned */
    uint32_t connections;
    uint64_t allowed, denied;
    uint64_t errors; /* server errors, timeouts, connections lost, other */
} rlb_server_stats_t;

typedef struct rlb_result_s {
    rlb_stats_t st;
    rlb_server_stats_t *servers; /* --fleet only: nservers entries */
    uint32_t nservers;
    double seconds;  /* measured time */
    uint64_t sent_total; /* checks sent, warmup included: what the server
                          * answered over the whole run */
    int ended_early; /* the server went away (or SIGINT) */
    const char *end_reason;
    rlb_audit_report_t audit;
    int audited;
} rlb_result_t;

static inline uint64_t rlb_errors(const rlb_stats_t *s)
{
    return s->server_errors + s->timeouts + s->closed + s->other_errors;
}

/* Runs the load as *o says; fills *res, which the caller frees with
 * rlb_result_free whatever the return. Returns 0, or RL_ENOMEM /
 * RL_EADDR-like codes for setup failures (after printing why). */
int rlb_run(const rlb_opts_t *o, rlb_result_t *res);

/* Frees what rlb_run allocated in *r (the histogram, the audit's lists,
 * the per-server counts). Accepts NULL. */
void rlb_result_free(rlb_result_t *r);

/* One progress line (no newline) into buf. */
void rlb_progress_line(char *buf, size_t cap, double t, double rate,
                       const rlb_stats_t *s);

void rlb_print_summary(FILE *f, const rlb_opts_t *o, const rlb_result_t *r);
/* Each returns 0, or RL_EIO after printing why. */
int rlb_write_json(FILE *f, const rlb_opts_t *o, const rlb_result_t *r);
int rlb_write_csv(FILE *f, const rl_hist_t *h);
int rlb_plot(const char *path, const rlb_opts_t *o, const rl_hist_t *h);

/* --keep-awake (awake.c): starts a SCHED_IDLE spinning thread per CPU;
 * returns 0 or RL_EIO after printing why. stop ends and joins them. */
int rlb_awake_start(void);
void rlb_awake_stop(void);

/* 1 if an executable named name is on PATH. */
int rlb_have_program(const char *name);

#endif
