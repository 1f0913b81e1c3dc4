/* rl-bench internals: options, key choice, the load loop, the audit and
 * the reports. The names carry the rlb_ prefix; nothing here is part of
 * librlc, which rl-bench uses only through its public header, as any
 * user's load generator would. */
#ifndef RLB_H
#define RLB_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "rl_admit.h"
#include "rl_hist.h"

/* Exit statuses, the interface for scripts. */
#define RLB_EXIT_OK 0
#define RLB_EXIT_AUDIT 1 /* some window allowed more than its limit */
#define RLB_EXIT_USAGE                                                         \
    2                     /* bad arguments, an output file cannot open,        \
                             or a --replay log cannot be read */
#define RLB_EXIT_SERVER 3 /* no server reachable, or it went away */
#define RLB_EXIT_OUTPUT 4 /* a report could not be written or drawn */

enum { RLB_DIST_UNIFORM, RLB_DIST_ZIPF, RLB_DIST_HOT };

/* --op: what each request is. RESERVE is followed, when allowed, by a
 * SETTLE of its handle; ACQUIRE by a RELEASE (unless the client
 * "crashes"). */
enum { RLB_OP_CHECK, RLB_OP_RESERVE, RLB_OP_ACQUIRE };

/* Open loop: how requests arrive. EACH and POISSON send every request at
 * its own scheduled time, as independent clients do (evenly spaced, or
 * with exponential gaps); GROUPED sends what fell due once per tick, so
 * that each write carries several requests. */
enum { RLB_ARRIVE_EACH, RLB_ARRIVE_POISSON, RLB_ARRIVE_GROUPED };

typedef struct rlb_opts_s {
    const char *server;
    /* --tls*: librlc's TLS options (rlc.h), as rl-check takes them. */
    int tls, tls_insecure;
    const char *tls_ca, *tls_cert, *tls_key, *tls_name;
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
    /* The audited limit's algorithm (RL_ALGO_*), a gcra's burst (0: the
     * limit) and phase (windows staggered per caller): --rule only, since
     * inline requests are aligned fixed windows. margin_ms: see
     * rlb_audit_conf_t. */
    int algo;
    uint64_t burst;
    int per_caller;
    uint64_t margin_ms;
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
    /* --replay LOG: the log's callers, costs and times instead of --keys,
     * --dist, --cost and --rate. replay_speed: 1 real time, 10 ten times
     * faster, 0 as fast as the server answers (closed loop, --inflight
     * per connection). log_*: rl-fit's --format, --key (--json-key),
     * --json-time and --json-cost; NULL: rl-fit's defaults. The log is
     * opened (replay) while the options are read, so a bad path fails
     * early. */
    const char *replay_path;
    double replay_speed;
    const char *log_format, *log_key, *log_time, *log_cost;
    struct rlb_replay_s *replay;
    int have_duration; /* --replay: --duration given, a cap on the replay */
    /* --op (RLB_OP_*); --hold-ms: the longest a reservation or lease is
     * held before its settle or release (each draws in [0, hold_ms]; a
     * reservation holds exactly hold_ms); --crash: the share of leases
     * never released; --settle-actual: the actual cost of every settle
     * (settle_fixed), else uniform in [0, 2 x cost]; lease_limit: --limit
     * with --op acquire (0: each answer's own limit). */
    int op;
    uint32_t hold_ms;
    double crash;
    int settle_fixed;
    uint64_t settle_actual;
    uint64_t lease_limit;
    /* --levels T: hierarchical keys. Key i is a user of tenant i mod T,
     * and each check names two levels, decided all or nothing: the
     * tenant's "{<prefix>t<j>}org" under org_rule and the user's
     * "{<prefix>t<j>}u<i>" under rule (the {tenant} hash tag keeps a
     * Redis Cluster's levels on one slot). The audit checks both levels'
     * fixed windows: --limit for the user's, org_limit (--org-limit) for
     * the organisation's, both of --window. 0: plain keys. */
    uint32_t tenants;
    const char *org_rule;
    uint64_t org_limit;
} rlb_opts_t;

/* Open loop: each check sent at its own scheduled time (--rate, or
 * --replay at a speed above 0). */
static inline int rlb_open_loop(const rlb_opts_t *o)
{
    return o->rate > 0 || (o->replay_path != NULL && o->replay_speed > 0);
}

/* Parses argv into *o. Returns 0; prints usage and exits 0 for --help;
 * prints one clear line on stderr and returns RLB_EXIT_USAGE otherwise. */
int rlb_opts_parse(int argc, char **argv, rlb_opts_t *o);

/* Copies o's --tls* flags into a librlc connection's options, for every
 * connection rl-bench opens (the load's and the ledger's). */
struct rlc_options_s;
void rlb_opts_tls(const rlb_opts_t *o, struct rlc_options_s *ro);

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

/* ---- replay (replay.c) ------------------------------------------------- */

typedef struct rlb_replay_s rlb_replay_t;

/* What reading the log found. */
typedef struct rlb_replay_stats_s {
    uint64_t lines;        /* lines read */
    uint64_t requests;     /* lines that became requests */
    uint64_t malformed;    /* rejected by the parser (longer than 16 KiB too) */
    uint64_t nokey;        /* well formed, but no term of --key present */
    uint64_t bad_key;      /* --key-prefix and the caller over RLC_KEY_MAX
                              bytes, or a NUL in the caller */
    uint64_t out_of_order; /* earlier than a line before them: sent at
                              that line's time */
    uint64_t first_ms, last_ms; /* the log's times of the first and last
                                   request read (ms since the epoch) */
    int read_error;             /* the log could not be read to its end (said on
                                   stderr): a read error or truncated gzip input */
} rlb_replay_stats_t;

/* One request of the log. */
typedef struct rlb_replay_req_s {
    uint64_t off_ms; /* its time after the log's first request */
    uint32_t cost;
    const char *key; /* --key-prefix, then the caller: valid until the next
                        rlb_replay_next */
    size_t key_len;
} rlb_replay_req_t;

/* Opens o->replay_path ("-": stdin; gzip or plain) with o's format and key
 * flags. Returns 0 with *out set (close it with rlb_replay_close), or
 * RL_EINVAL (a bad flag), RL_EIO (cannot open) or RL_ENOMEM, with *why
 * saying what. */
int rlb_replay_open(rlb_replay_t **out, const rlb_opts_t *o, const char **why);

/* Reads up to the next line that makes a request, counting the others.
 * Returns 1 with *q filled, or 0 at the end of the log (or at a read
 * error, in the stats). Memory stays one buffer, whatever the log. */
int rlb_replay_next(rlb_replay_t *r, rlb_replay_req_t *q);

const rlb_replay_stats_t *rlb_replay_stats(const rlb_replay_t *r);

/* Closes the log and frees r; accepts NULL. */
void rlb_replay_close(rlb_replay_t *r);

/* ---- audit ------------------------------------------------------------ */

/* The audit checks, from the answers alone, that the server never admitted
 * more than the audited limit allows. Each answer is placed by when the
 * store decided it, decided_at_ms, on the store's clock that every
 * instance sharing the store reads, so answers from several servers go on
 * one time line. What is checked depends on the limit's algorithm:
 *
 *   fixed-window  the admitted cost in each window (aligned, or starting
 *                 at the caller's rl_phase_offset_ms with phase
 *                 per-caller) is at most the limit;
 *   gcra          (N per DUR, burst B, T = rl_gcra_interval_us(N, DUR))
 *                 the admitted cost decided within any [a, b] is at most
 *                 B + floor((b - a) us / T): see audit_algo.c;
 *   sliding-window-counter  each window's admissions against the previous
 *                 window's count as the store must have seen it: see
 *                 audit_algo.c.
 *
 * An answer of a server older than decided_at_ms (0) is placed in its
 * fixed window as before: the server decided between the request's send
 * and its answer, so the deciding window ends within reset_after_ms of
 * that interval, on the local monotonic clock. Ends lie exactly window_ms
 * apart on a grid whose phase every answer bounds: the phase is narrowed
 * to what all answers allow, and each answer is placed on the grid point
 * its interval holds. A slow answer widens only its own interval, so the
 * grid stays as exact as the quickest answers made it, however loaded the
 * machine; an answer slower than half a window cannot be placed and is
 * counted apart (unplaced). Skew is how far an answer's interval misses
 * the grid: 0 while clocks are steady. Without a stamp, a gcra's or a
 * sliding window's admissions, or staggered windows, cannot be placed:
 * they are counted apart (unstamped). */

/* A fixed window's counts. id: key index << 32 | window, where window is
 * 2^31 + (index - first index seen) for a window known from stamps, and
 * 2^30 + the grid's window number for one inferred; 0: empty. */
typedef struct rlb_audit_ent_s {
    uint64_t id;
    uint64_t limit;
    uint32_t allowed, denied;
} rlb_audit_ent_t;

/* gcra and sliding-window-counter: a key's admissions are checked in the
 * order of their stamps, which the answers nearly keep (a few ms apart
 * across connections and servers). So each key holds its admissions of
 * its latest few stamps back and lets the oldest go to the check when a
 * newer stamp needs the room, or at the end of the run. An admission stamped
 * before one already checked is late: it is left out, which can only make the
 * check find less, never fail a correct server, and counted. */
#define RLB_AUDIT_HOLD 8

typedef struct rlb_audit_key_s {
    uint32_t key1; /* key index + 1; 0: empty slot */
    /* The admissions held back: n of them stamped stamp_base + t, t
     * ascending (a batch admits many of one key at one stamp). */
    uint32_t nheld;
    struct {
        uint32_t t, n;
    } held[RLB_AUDIT_HOLD];
    uint32_t done;   /* stamp - stamp_base of the last checked */
    uint32_t began;  /* something was checked */
    uint32_t failed; /* gcra: the last check failed; swc: a check of the
                        current window did */
    union {
        struct {
            uint64_t n; /* admissions checked: P / cost */
            /* min over checked i of P_{i-1} x cost x T - t_i us, and that
             * i's P_{i-1} / cost and stamp - stamp_base */
            __int128 m;
            uint64_t m_n;
            uint32_t m_t;
        } g;
        struct {
            uint64_t off;   /* the key's window offset, ms */
            uint64_t win;   /* index of the window being checked */
            uint64_t cur;   /* admissions checked in it */
            uint64_t early; /* of those, stamped margin_ms or more before
                               its end */
            uint64_t prev;  /* early of the window before, if adjacent */
        } s;
        struct {
            /* sliding-window: the admissions checked, in stamp order, that
             * are still within a window (less the margin) of the last: a
             * ring of (stamp - stamp_base, how many at that stamp) */
            uint32_t *t, *n;
            uint32_t head, len, cap;
            uint64_t sum; /* admissions in the ring */
        } l;
    } u;
} rlb_audit_key_t;

/* What the audit is told about the audited limit. */
typedef struct rlb_audit_conf_s {
    int algo;               /* RL_ALGO_* (rl_admit.h) */
    uint64_t limit;         /* N; 0: inline fixed windows, each window's limit
                               is the one its answers give */
    uint32_t window_s;      /* the window; a gcra's period */
    uint64_t burst;         /* gcra: the bucket; 0 is N */
    int per_caller;         /* fixed, swc: windows staggered per caller */
    const char *key_prefix; /* key i is this, then i in decimal (per-caller
                               offsets are of the whole key); not copied */
    uint32_t cost;
    /* swc, sliding-window: how long after its stamp an admission may still
     * be on its way
     * to the store's counter (a batch's age when the store applies it,
     * and the instances' clock estimates apart); see audit_algo.c. */
    uint64_t margin_ms;
    uint64_t expect; /* windows (fixed) or keys (gcra, swc) the run should
                        see, room for which is reserved up front (up to 4M
                        entries; beyond, the table grows as it fills) */
} rlb_audit_conf_t;

#define RLB_AUDIT_MARGIN_MS 250

/* Fills *c with the defaults: fixed windows of 60 s, limit from the
 * answers, cost 1, margin RLB_AUDIT_MARGIN_MS, prefix "bench:". */
void rlb_audit_conf_init(rlb_audit_conf_t *c);

typedef struct rlb_audit_s {
    rlb_audit_conf_t c;
    uint64_t t_us; /* gcra: the emission interval */
    /* fixed windows */
    rlb_audit_ent_t *tab;
    size_t mask, used;
    /* gcra, swc: per key */
    rlb_audit_key_t *keys;
    size_t kmask, kused;
    double window_ms;
    int have_ref;
    double ref_lo, ref_hi; /* where window number 0 can end (local ms) */
    double ref_ms;         /* the middle of that: the grid's estimate */
    double max_skew_ms;    /* largest miss of an answer from the grid */
    /* Stamps: the first seen fixes stamp_base (stamps are kept as
     * stamp - stamp_base in 32 bits: 49 days either side) and, for fixed
     * windows, the window numbering; stamp_to_local maps a stamp to the
     * local clock, roughly (for the report). */
    int have_stamp;
    uint64_t stamp_base, stamp_min, base_index;
    double stamp_to_local;
    double max_rtt_ms;       /* slowest stamped answer */
    uint64_t failed_open;    /* allowed without counting: left out */
    uint64_t limit_mismatch; /* responses whose limit differed in a window */
    int nomem;               /* a window or key could not be recorded */
    /* --rule with several windows: answers decided by another window. An
     * admitted one is placed in the audited window by its time on the grid,
     * unless that is too near a window's edge to tell (unplaced); a refused
     * one tells nothing about the audited window (other_refused). */
    uint64_t unplaced, other_refused;
    uint64_t unstamped;  /* admissions that needed a stamp and had none */
    uint64_t late;       /* gcra, swc: stamped before one already checked */
    uint64_t admissions; /* gcra, swc: admissions checked */
    uint64_t awindows;   /* swc: windows; gcra: keys */
    /* gcra, swc: checks that failed, the first RLB_AUDIT_LIST_MAX of them
     * kept (times as stamps until the report) */
    uint64_t over;
    struct rlb_audit_window_s *viol;
    size_t nviol;
} rlb_audit_t;

/* Returns 0, RL_EINVAL (a gcra faster than one per microsecond, a window
 * of 0, no limit for a gcra or swc, a prefix over RLB_AUDIT_PREFIX_MAX)
 * or RL_ENOMEM. */
int rlb_audit_init(rlb_audit_t *a, const rlb_audit_conf_t *c);
void rlb_audit_free(rlb_audit_t *a);

/* One server decision (code OK or OVER_LIMIT). */
typedef struct rlb_answer_s {
    uint32_t key; /* key index */
    /* Whether it consumed quota: an OK answer that is shadow_refused did
     * not (in shadow mode the server counts exactly as enforce would, and
     * a refusal consumes nothing), so it is recorded as refused. */
    int admitted;
    uint64_t limit;
    uint32_t window_s;  /* the deciding limit's (0: not said, taken as
                           the audited one) */
    uint32_t algorithm; /* the deciding limit's, RL_ALGO_* */
    uint64_t reset_after_ms;
    uint64_t decided_at_ms;  /* 0: not said (an older server) */
    double sent_ms, recv_ms; /* local monotonic ms */
} rlb_answer_t;

/* Records one answer. Time per answer is bounded (a hash probe and, for
 * gcra and swc, up to RLB_AUDIT_HOLD moves); memory is a table entry per
 * fixed window, or per key. */
void rlb_audit_add(rlb_audit_t *a, const rlb_answer_t *x);

/* What the audit found. A fixed window is "checked" for exactness when its
 * key was refused at least once in it (hammered past its limit) and it
 * began after the run's first request, so that every hit it holds is ours;
 * it is exact when it allowed exactly floor(limit / cost). For gcra and
 * swc an entry is a check that failed: from_ms to end_ms the interval
 * (gcra) or the window (swc), at_ms the admission at which it failed,
 * allowed the admissions counted, share the previous window's share (swc)
 * and limit the bound they broke (in cost: allowed x cost > limit -
 * share). */
typedef struct rlb_audit_window_s {
    uint32_t key;
    double from_ms, end_ms, at_ms; /* ms after the run's start */
    uint64_t allowed, denied, limit, share;
} rlb_audit_window_t;

typedef struct rlb_audit_report_s {
    int algo;
    /* fixed: windows; swc: windows; gcra: keys */
    uint64_t windows;
    /* fixed: windows over the limit; gcra, swc: failed checks */
    uint64_t over_limit;
    uint64_t checked, exact;
    /* Copied from the audit. */
    uint64_t unplaced, other_refused, unstamped, late, admissions;
    rlb_audit_window_t *over;    /* the windows over their limit */
    rlb_audit_window_t *inexact; /* checked windows that were not exact */
    size_t nover, ninexact;      /* entries listed (capped) */
    double max_skew_ms, max_rtt_ms;
    uint64_t margin_ms;
    /* estimates strayed too far from the grid, a table ran out of memory,
     * or (swc) answers slower than the margin */
    int unreliable;
} rlb_audit_report_t;

#define RLB_AUDIT_LIST_MAX 1000

/* Checks the admissions still held back, then fills *r; run_start_ms and
 * first_send_ms are local monotonic ms. Call once, after the last add.
 * Returns 0 or RL_ENOMEM. */
int rlb_audit_report(rlb_audit_t *a, double run_start_ms, double first_send_ms,
                     rlb_audit_report_t *r);
void rlb_audit_report_free(rlb_audit_report_t *r);

/* Longest --key-prefix the audit takes (librlc's key limit is 512). */
#define RLB_AUDIT_PREFIX_MAX 512

/* audit.c and audit_algo.c: a mixer of table ids, and a table of n
 * zeroed entries of size bytes for about expect of them, at most half
 * full, its pages touched (no grow, a rehash of everything that stalls
 * rl-bench's loop, mid-run); *mask is n - 1. NULL when out of memory. */
static inline uint64_t rlb_mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
    return z ^ (z >> 31);
}
void *rlb_audit_table(size_t size, uint64_t expect, size_t *mask);

/* audit_algo.c, for audit.c: the gcra and swc checks. keys_init reserves
 * the key table (0 or RL_ENOMEM); keys_add takes one admission stamped
 * decided_at_ms; keys_flush checks every admission still held. */
int rlb_audit_keys_init(rlb_audit_t *a);
void rlb_audit_keys_add(rlb_audit_t *a, uint32_t key, uint64_t decided_at_ms);
void rlb_audit_keys_flush(rlb_audit_t *a);
/* The caller's window offset of key index key (0 unless per-caller). */
uint64_t rlb_audit_offset(const rlb_audit_t *a, uint32_t key);

/* ---- the lease audit (lease.c) ----------------------------------------- */

/* --op acquire --audit: from the store's times alone, at every grant (an
 * ACQUIRE's decided_at_ms) the caller's leases alive then, those with
 * start <= t < end - skew_ms, are at most N. A lease starts at its grant
 * and ends at its RELEASE's decided_at_ms, or at expires_at_ms when it was
 * never released (a crash, or a release that failed). skew_ms allows for
 * the instances' estimates of the store's clock.
 *
 * A grant is checked once the latest store time seen is horizon_ms past
 * it: by then every grant decided before it has been answered (or timed
 * out), so every lease that could be alive at it is known. A lease still
 * held then counts with its expires_at_ms, which changes nothing: its
 * release is decided after the store's time seen, far past the grant. A
 * lease is forgotten once checked, ended and horizon_ms in the past: what
 * is kept per caller is the leases that can still overlap a grant. A grant
 * answered later than that (late) is checked at once with what is kept,
 * which can only undercount.
 *
 * A stamp is the batch's clock reading, taken before the store applies
 * it, and instances' batches reach the store in any order: the store
 * applied an answer's operation somewhere between its stamp and its stamp
 * plus the answer's round trip (rtt). So another lease counts at grant G
 * only when it was surely applied before G (its start + its grant's rtt
 * <= G's stamp) and, when it was released, its release surely came after
 * G (G's stamp + G's rtt + skew_ms < the release's stamp); a lease ended
 * by its expiry counts while G's stamp + skew_ms < its expires_at_ms (the
 * store drops it by the op's own stamp). With round trips of 0 this is
 * the interval rule above. (Without the round trips, a release stamped
 * after a grant but applied before it, a few ms apart under load, made a
 * fourth lease seem alive under N = 3.) */
typedef struct rlb_lease_s {
    uint64_t id, start, end, limit;
    uint64_t rtt_ms; /* its grant's round trip, as rl-bench saw it */
    uint8_t final, checked, released;
} rlb_lease_t;

typedef struct rlb_lease_caller_s {
    rlb_lease_t *v;
    uint32_t n, cap;
} rlb_lease_caller_t;

typedef struct rlb_lease_audit_s {
    rlb_lease_caller_t *callers; /* one per key index */
    uint32_t ncallers;
    uint64_t limit; /* N; 0: each grant's own */
    uint64_t skew_ms, horizon_ms;
    uint64_t high;    /* the latest store time seen */
    uint64_t next_id; /* lease ids, from 1 */
    /* results */
    uint64_t checked, over, late, max_alive, kept_max;
    uint64_t unknown;    /* releases and grants of leases no longer kept */
    uint64_t unstamped;  /* grants without decided_at_ms: not audited */
    uint64_t limit_seen; /* N of the last grant checked */
    uint64_t first_over_at, first_over_alive, first_over_limit;
    uint32_t first_over_key;
    int nomem;
} rlb_lease_audit_t;

#define RLB_LEASE_SKEW_MS 5

/* Returns 0 or RL_ENOMEM (a slot per caller: ncallers x 16 bytes). */
int rlb_lease_init(rlb_lease_audit_t *a, uint32_t ncallers, uint64_t limit,
                   uint64_t skew_ms, uint64_t horizon_ms);
void rlb_lease_free(rlb_lease_audit_t *a);
/* Any answer's decided_at_ms: moves the horizon on. */
void rlb_lease_time(rlb_lease_audit_t *a, uint64_t stamp_ms);
/* A grant of caller key at start, ending by end (expires_at_ms), of limit
 * N. Returns the lease's id for rlb_lease_end, or 0 when it could not be
 * kept (out of memory: the audit says it is incomplete). */
uint64_t rlb_lease_grant(rlb_lease_audit_t *a, uint32_t key, uint64_t start,
                         uint64_t end, uint64_t limit);
/* The same, with the grant's round trip in ms (rounded up). */
uint64_t rlb_lease_grant_rtt(rlb_lease_audit_t *a, uint32_t key, uint64_t start,
                             uint64_t end, uint64_t limit, uint64_t rtt_ms);
/* The lease ended: released at end_ms (0: never released, it ends at its
 * expires_at_ms). */
void rlb_lease_end(rlb_lease_audit_t *a, uint32_t key, uint64_t id,
                   uint64_t end_ms);
/* Checks every grant still unchecked; call once, after the last answer. */
void rlb_lease_flush(rlb_lease_audit_t *a);

/* ---- the reservation ledger (ledger.c) -------------------------------- */

/* --op reserve --audit: a plain check of every key before the run and
 * after it (cost 1, which counts); between them each key's counter must
 * have moved by exactly what the answers say: + cost for each RESERVE
 * allowed, + (actual - cost) for each SETTLE answered OK (a settle the
 * server refused, or never sent, leaves the estimate charged). A key
 * whose outcome is unknown (a request with no answer, an answer failed
 * open) is left out, and so is one whose window changed between the two
 * checks or that either check found over its limit (used then says
 * nothing exact). Up to RLB_LEDGER_KEYS_MAX keys. */
#define RLB_LEDGER_KEYS_MAX 100000

typedef struct rlb_ledger_s {
    uint32_t nkeys;
    int64_t *delta;        /* per key, from the answers */
    uint64_t *used, *wend; /* per key: the first check's used, window end */
    uint8_t *skip;         /* per key: left out (unknown or over) */
    /* results */
    uint64_t checked, mismatched, unknown, rolled, full;
    uint32_t first_key;
    int64_t first_want, first_got;
    int done;     /* the last check ran */
    char why[96]; /* why the checks could not run, or "" */
} rlb_ledger_t;

/* Checks every key once (the first check). Returns 0, RL_ENOMEM, or RL_EIO
 * with l->why saying what failed. */
int rlb_ledger_open(rlb_ledger_t *l, const rlb_opts_t *o);
/* The key's counter moved by d (a RESERVE allowed: its cost; a SETTLE
 * answered OK: actual - cost). */
void rlb_ledger_add(rlb_ledger_t *l, uint32_t key, int64_t d);
/* What a request did to the key is not known: leave the key out. */
void rlb_ledger_unknown(rlb_ledger_t *l, uint32_t key);
/* The last check of every key, and the comparison. Returns 0 or RL_EIO
 * (l->why). */
int rlb_ledger_close(rlb_ledger_t *l, const rlb_opts_t *o);
void rlb_ledger_free(rlb_ledger_t *l);

/* ---- results and reports ---------------------------------------------- */

typedef struct rlb_stats_s {
    uint64_t sent;    /* checks submitted (measured part) */
    uint64_t allowed; /* answered OK */
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
    /* --replay, open loop: checks that found every request slot (--inflight
     * per connection) taken when due; each was sent once a slot freed, as
     * late as late_ns says. */
    uint64_t slot_waits;
    uint64_t disconnects; /* connections lost */
    rl_hist_t lat_ns;     /* latency of answered checks */
    /* --replay, open loop: how long after its scheduled time each measured
     * check was handed to librlc, whether the generator kept up. */
    rl_hist_t late_ns;
    /* --op reserve and acquire, of the measured requests: settles and
     * releases sent, answered OK, and not (an error, or no answer);
     * crashed: leases never released on purpose; refunded and excess:
     * over the settles answered OK, the sum of cost - actual where the
     * actual was less, and of actual - cost where it was more. */
    uint64_t follow_sent, follow_ok, follow_errors, crashed;
    uint64_t refunded, excess;
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
    double seconds;      /* measured time */
    uint64_t sent_total; /* checks sent, warmup included: what the server
                          * answered over the whole run */
    int ended_early;     /* the server went away (or SIGINT) */
    const char *end_reason;
    rlb_audit_report_t audit;
    int audited;
    /* --levels: the organisation level's audit (audit is the users'),
     * and the refusals each level made (by the answers' level; [0]:
     * none named) */
    rlb_audit_report_t org_audit;
    uint64_t level_refused[3];
    /* --op acquire --audit: the lease audit, flushed (lease_audited) */
    rlb_lease_audit_t lease;
    int lease_audited;
    /* --op reserve --audit */
    rlb_ledger_t ledger;
    int ledger_audited;
    /* --replay: what reading the log found; complete: every request of the
     * log was sent (not cut short by --duration, --requests, the server
     * or SIGINT, nor by a read error). */
    rlb_replay_stats_t replay;
    int replay_complete;
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
