/* rl-bench's audit table (tools/bench/audit.c): sized up front for the
 * windows a run expects, it takes them all without growing (a grow is a
 * rehash of everything that stalls rl-bench's loop mid-run, inside the
 * latencies it measures); unsized, it grows and still holds every window;
 * either way a window over its limit is reported. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>

#include <cmocka.h>

#include "rl_admit.h"
#include "rl_window.h"
#include "rlb.h"

/* An audit of inline fixed windows (limits from the answers), as before
 * stamps. */
static int init_fixed(rlb_audit_t *a, uint32_t window_s, uint64_t expect)
{
    rlb_audit_conf_t c;

    rlb_audit_conf_init(&c);
    c.window_s = window_s;
    c.expect = expect;
    return rlb_audit_init(a, &c);
}

/* An answer of a server older than decided_at_ms. */
static void add_unstamped(rlb_audit_t *a, uint32_t key, int admitted,
                          uint64_t limit, uint32_t window_s, uint64_t reset,
                          double sent, double recv)
{
    rlb_answer_t x = {.key = key,
                      .admitted = admitted,
                      .limit = limit,
                      .window_s = window_s,
                      .reset_after_ms = reset,
                      .sent_ms = sent,
                      .recv_ms = recv};

    rlb_audit_add(a, &x);
}

/* Adds one admitted check for each of keys 1..n, all in the window that
 * ends 60 s after t=0 (sent and answered at 1 s, reset 59 s later). */
static void add_keys(rlb_audit_t *a, uint32_t n)
{
    uint32_t k;

    for (k = 1; k <= n; k++)
        add_unstamped(a, k, 1, 100, 60, 59000, 1000, 1000);
}

static uint64_t windows_of(rlb_audit_t *a, uint64_t *over)
{
    rlb_audit_report_t r;
    uint64_t n;

    assert_int_equal(rlb_audit_report(a, 0, 0, &r), 0);
    n = r.windows;
    *over = r.over_limit;
    rlb_audit_report_free(&r);
    return n;
}

static void test_presized_never_grows(void **state)
{
    rlb_audit_t a;
    size_t mask;
    uint64_t over;

    (void)state;
    assert_int_equal(init_fixed(&a, 60, 50000), 0);
    mask = a.mask;
    assert_true(mask + 1 >= 2 * 50000);
    add_keys(&a, 50000);
    assert_int_equal(a.mask, mask);
    assert_int_equal(a.used, 50000);
    assert_int_equal(windows_of(&a, &over), 50000);
    assert_int_equal(over, 0);
    rlb_audit_free(&a);
}

static void test_unsized_grows_and_keeps_all(void **state)
{
    rlb_audit_t a;
    size_t mask;
    uint64_t over;

    (void)state;
    assert_int_equal(init_fixed(&a, 60, 0), 0);
    mask = a.mask;
    add_keys(&a, 50000);
    assert_true(a.mask > mask);
    assert_int_equal(windows_of(&a, &over), 50000);
    assert_int_equal(over, 0);
    rlb_audit_free(&a);
}

/* A key admitted 3 times in a window of limit 2 is one window over, in a
 * presized table as in a grown one. */
static void test_over_limit_reported(void **state)
{
    rlb_audit_t a;
    uint64_t expect, over;
    int i;

    (void)state;
    for (expect = 0; expect <= 100000; expect += 100000) {
        assert_int_equal(init_fixed(&a, 60, expect), 0);
        add_keys(&a, 10000);
        for (i = 0; i < 3; i++)
            add_unstamped(&a, 20000, 1, 2, 60, 59000, 1000, 1000);
        assert_int_equal(windows_of(&a, &over), 10001);
        assert_int_equal(over, 1);
        rlb_audit_free(&a);
    }
}

/* Answers as slow as a third of the window, on a machine that stalls: the
 * server decides anywhere between send and receive. Every answer lands in
 * its own window: the audit finds exactly the (key, window) pairs made
 * here and exactly those given more than the limit, the grid stays as
 * exact as the quick answers made it, and the audit stays reliable. */
static void test_slow_answers_keep_the_grid(void **state)
{
    enum { KEYS = 50, WINDOWS = 16, LIMIT = 12 };
    const double w = 2000, phase = 1234.5; /* windows end at phase + k*w */
    static uint32_t admitted[KEYS + 1][WINDOWS];
    rlb_audit_t a;
    rlb_audit_report_t r;
    uint64_t seed = 88172645463325252ull, pairs = 0, over = 0;
    uint32_t key, n, win;
    double t = 10000;

    (void)state;
    memset(admitted, 0, sizeof(admitted));
    assert_int_equal(init_fixed(&a, 2, 0), 0);
    for (n = 0; n < 4000; n++) {
        double rtt, sent, decided, end;

        seed ^= seed << 13, seed ^= seed >> 7, seed ^= seed << 17;
        rtt = n % 10 == 0 ? 0.2 : (double)(seed % 650) + 0.2;
        sent = t;
        decided = sent + rtt * (double)((seed >> 20) % 1000) / 1000.0;
        end = phase + floor((decided - phase) / w) * w + w;
        win = (uint32_t)((end - phase) / w);
        key = 1 + (uint32_t)((seed >> 40) % KEYS);
        assert_true(win < WINDOWS);
        admitted[key][win]++;
        add_unstamped(&a, key, 1, LIMIT, 2, (uint64_t)(end - decided), sent,
                      sent + rtt);
        t += 5;
    }
    for (key = 1; key <= KEYS; key++)
        for (win = 0; win < WINDOWS; win++) {
            pairs += admitted[key][win] > 0;
            over += admitted[key][win] > LIMIT;
        }
    assert_int_equal(rlb_audit_report(&a, 0, 0, &r), 0);
    assert_false(r.unreliable);
    assert_true(r.max_skew_ms < 1.0);
    assert_true(a.ref_hi - a.ref_lo < 2.0);
    assert_int_equal(r.unplaced, 0);
    assert_int_equal(r.windows, pairs);
    assert_true(over > 0);
    assert_int_equal(r.over_limit, over);
    rlb_audit_report_free(&r);
    rlb_audit_free(&a);
}

/* ---- answers stamped with decided_at_ms ------------------------------ */

/* A stamp on a boundary of every window below (whole seconds and two). */
#define T0 UINT64_C(1700000000000)

static uint64_t rng = 88172645463325252ull;

static uint64_t next(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

static int init_algo(rlb_audit_t *a, int algo, uint64_t limit,
                     uint32_t window_s, uint64_t burst, int per_caller)
{
    rlb_audit_conf_t c;

    rlb_audit_conf_init(&c);
    c.algo = algo;
    c.limit = limit;
    c.window_s = window_s;
    c.burst = burst;
    c.per_caller = per_caller;
    c.key_prefix = "k:";
    c.expect = 100;
    return rlb_audit_init(a, &c);
}

/* An answer of the audited limit decided at stamp, answered 1 ms after it
 * was sent (the local clock runs 5 s behind the stamps' from T0). */
static void add_at(rlb_audit_t *a, uint32_t key, int admitted, uint64_t stamp)
{
    rlb_answer_t x = {.key = key,
                      .admitted = admitted,
                      .limit = a->c.limit,
                      .window_s = a->c.window_s,
                      .algorithm = (uint32_t)a->c.algo,
                      .decided_at_ms = stamp};

    x.sent_ms = (double)(stamp - T0) + 5000;
    x.recv_ms = x.sent_ms + 1;
    rlb_audit_add(a, &x);
}

/* Reports and returns the failed checks (fixed: windows over). */
static uint64_t over_of(rlb_audit_t *a, rlb_audit_report_t *r)
{
    assert_int_equal(rlb_audit_report(a, 0, 0, r), 0);
    return r->over_limit;
}

/* The offset of key "k:<key>" for windows of window_s. */
static uint64_t off_of(uint32_t key, uint32_t window_s)
{
    char buf[32];
    size_t n = (size_t)snprintf(buf, sizeof(buf), "k:%u", (unsigned)key);

    return rl_phase_offset_ms(buf, n, window_s);
}

/* Fixed windows by their stamps: ten admissions per window of 2 s and a
 * refusal past them, in any order, pass and are exact; one more in a
 * window fails that window alone. */
static void test_fixed_stamped(void **state)
{
    rlb_audit_t a;
    rlb_audit_report_t r;
    uint32_t key, win, i;

    (void)state;
    assert_int_equal(init_algo(&a, RL_ALGO_FIXED, 10, 2, 0, 0), 0);
    for (win = 0; win < 4; win++)
        for (key = 0; key < 5; key++) {
            for (i = 0; i < 10; i++)
                add_at(&a, key, 1, T0 + win * 2000 + next() % 2000);
            add_at(&a, key, 0, T0 + win * 2000 + 1999);
        }
    assert_int_equal(over_of(&a, &r), 0);
    assert_int_equal(r.windows, 20);
    /* The first window began with the first decision: not ours alone. */
    assert_int_equal(r.checked, 15);
    assert_int_equal(r.exact, 15);
    assert_int_equal(r.unplaced, 0);
    assert_false(r.unreliable);
    rlb_audit_report_free(&r);
    rlb_audit_free(&a);

    assert_int_equal(init_algo(&a, RL_ALGO_FIXED, 10, 2, 0, 0), 0);
    for (i = 0; i < 10; i++)
        add_at(&a, 3, 1, T0 + 2000 + i);
    add_at(&a, 3, 1, T0 + 3999);
    add_at(&a, 3, 1, T0 + 4000); /* the next window */
    assert_int_equal(over_of(&a, &r), 1);
    assert_int_equal(r.nover, 1);
    assert_int_equal(r.over[0].key, 3);
    assert_int_equal(r.over[0].allowed, 11);
    rlb_audit_report_free(&r);
    rlb_audit_free(&a);
}

/* Staggered fixed windows: per key, ten admissions just before its own
 * boundary and ten just after pass per caller, and fail as aligned
 * windows (they share an aligned one); ten and ten around an aligned
 * boundary are the other way round. */
static void test_fixed_per_caller(void **state)
{
    rlb_audit_t per, aligned;
    rlb_audit_report_t r;
    uint32_t key, i, used = 0;

    (void)state;
    assert_int_equal(init_algo(&per, RL_ALGO_FIXED, 10, 2, 0, 1), 0);
    assert_int_equal(init_algo(&aligned, RL_ALGO_FIXED, 10, 2, 0, 0), 0);
    for (key = 0; key < 20; key++) {
        uint64_t off = off_of(key, 2), edge = T0 + 2000 + off;
        if (off < 20 || off > 1980)
            continue; /* too near an aligned boundary to tell */
        used++;
        for (i = 0; i < 10; i++) {
            add_at(&per, key, 1, edge - 10 + i);
            add_at(&per, key, 1, edge + i);
            add_at(&aligned, key, 1, edge - 10 + i);
            add_at(&aligned, key, 1, edge + i);
        }
    }
    assert_true(used >= 10);
    assert_int_equal(over_of(&per, &r), 0);
    assert_int_equal(r.windows, 2 * used);
    rlb_audit_report_free(&r);
    assert_int_equal(over_of(&aligned, &r), used);
    rlb_audit_report_free(&r);
    rlb_audit_free(&per);
    rlb_audit_free(&aligned);

    assert_int_equal(init_algo(&per, RL_ALGO_FIXED, 10, 2, 0, 1), 0);
    used = 0;
    for (key = 0; key < 20; key++) {
        uint64_t off = off_of(key, 2);
        if (off < 20 || off > 1980)
            continue;
        used++;
        for (i = 0; i < 10; i++) {
            add_at(&per, key, 1, T0 + 4000 - 10 + i);
            add_at(&per, key, 1, T0 + 4000 + i);
        }
    }
    assert_int_equal(over_of(&per, &r), used);
    rlb_audit_report_free(&r);
    rlb_audit_free(&per);
}

/* A gcra store for one key, deciding with lib/'s arithmetic at stamp now:
 * returns 1 when it admits. */
typedef struct gstore_s {
    int64_t tat_us;
} gstore_t;

static int gcra_decide(gstore_t *s, uint64_t n, uint32_t period_s,
                       uint64_t burst, uint64_t now)
{
    rl_admit_win_t w;

    rl_admit_gcra(&w, burst, period_s, rl_gcra_interval_us(n, period_s),
                  s->tat_us, now);
    if (!rl_admit_one(&w, 1, 1))
        return 0;
    s->tat_us = (int64_t)rl_admit_added(&w, now);
    return 1;
}

/* The bound is exact: a burst of B, then one every T, passes; one more
 * anywhere fails. */
static void test_gcra_exact_bound(void **state)
{
    rlb_audit_t a;
    rlb_audit_report_t r;
    uint32_t i, extra;
    /* 5 per second, burst 5: T = 200 ms. Extras: at the burst, one ms
     * before the next emission, and on one. */
    const uint64_t extras[] = {0, 199, 200, 1000};

    (void)state;
    for (extra = 0; extra <= 4; extra++) {
        assert_int_equal(init_algo(&a, RL_ALGO_GCRA, 5, 1, 5, 0), 0);
        /* In stamp order (the answers of one instance). */
        for (i = 0; i < 5; i++)
            add_at(&a, 1, 1, T0);
        for (i = 0; i <= 10; i++) {
            if (extra < 4 && extras[extra] >= i * 200 &&
                extras[extra] < i * 200 + 200)
                add_at(&a, 1, 1, T0 + extras[extra]);
            if (i < 10)
                add_at(&a, 1, 1, T0 + i * 200 + 200);
        }
        assert_int_equal(over_of(&a, &r) > 0, extra < 4);
        assert_int_equal(r.admissions, extra < 4 ? 16 : 15);
        assert_int_equal(r.late, 0);
        if (extra < 4) {
            /* From the burst to where it broke: one more than allowed. */
            assert_int_equal(r.over[0].key, 1);
            assert_int_equal(r.over[0].allowed, r.over[0].limit + 1);
        }
        rlb_audit_report_free(&r);
        rlb_audit_free(&a);
    }
}

/* Two instances share one gcra store, hammering a few keys: each batch is
 * stamped with its instance's reading of the store's clock (one 2 ms
 * ahead, the other 2 ms behind) and applied in the order the batches
 * reach the store, so stamps arrive up to 4 ms out of order. The audit,
 * fed the answers in that order, passes: the bound holds whatever the
 * order. Two stores of their own (no sharing) each admit the burst and
 * the rate, and fail it. */
static void test_gcra_out_of_order(void **state)
{
    enum { KEYS = 4 };
    gstore_t shared[KEYS], own[2][KEYS];
    rlb_audit_t a, b;
    rlb_audit_report_t r;
    uint64_t t, admitted = 0;
    uint32_t key;

    (void)state;
    memset(shared, 0, sizeof(shared));
    memset(own, 0, sizeof(own));
    assert_int_equal(init_algo(&a, RL_ALGO_GCRA, 50, 1, 20, 0), 0);
    assert_int_equal(init_algo(&b, RL_ALGO_GCRA, 50, 1, 20, 0), 0);
    for (t = T0; t < T0 + 5000; t++) {
        int inst = (int)(next() % 2);
        uint64_t stamp = inst ? t + 2 - next() % 3 : t - 2 + next() % 3;
        key = (uint32_t)(next() % KEYS);
        if (gcra_decide(&shared[key], 50, 1, 20, stamp)) {
            add_at(&a, key, 1, stamp);
            admitted++;
        } else {
            add_at(&a, key, 0, stamp);
        }
        add_at(&b, key, gcra_decide(&own[inst][key], 50, 1, 20, stamp), stamp);
    }
    assert_int_equal(over_of(&a, &r), 0);
    assert_int_equal(r.windows, KEYS);
    assert_int_equal(r.admissions, admitted);
    assert_int_equal(r.late, 0);
    /* The store was hammered: about the burst and the rate per key. */
    assert_true(admitted >= KEYS * (20 + 5 * 50 - 10));
    rlb_audit_report_free(&r);
    assert_true(over_of(&b, &r) > 0);
    assert_true(r.nover >= KEYS);
    rlb_audit_report_free(&r);
    rlb_audit_free(&a);
    rlb_audit_free(&b);
}

/* A sliding window's store, as store/memory.c keeps a log: entries (stamp,
 * 1) in the order applied; a decision at now drops the entries at the
 * head stamped at or before now - W, then admits when what is left plus
 * one is at most L. */
typedef struct {
    uint64_t t[4096];
    size_t head, n;
} lstore_t;

static int log_decide(lstore_t *s, uint64_t L, uint64_t W, uint64_t now)
{
    while (s->n > 0 && s->t[s->head] + W <= now) {
        s->head = (s->head + 1) % 4096;
        s->n--;
    }
    if (s->n + 1 > L || s->n == 4096)
        return 0;
    s->t[(s->head + s->n++) % 4096] = now;
    return 1;
}

/* The sliding window's bound is exact with a margin of 0: five at T0 and
 * one at T0 + 999 are six in one second; one at T0 + 1000 is not. */
static void test_swl_exact_bound(void **state)
{
    const uint64_t extras[] = {1, 999, 1000, 1500};
    rlb_audit_t a;
    rlb_audit_report_t r;
    uint32_t i, e;

    (void)state;
    for (e = 0; e < 4; e++) {
        rlb_audit_conf_t c;
        rlb_audit_conf_init(&c);
        c.algo = RL_ALGO_SLIDING_LOG;
        c.limit = 5;
        c.window_s = 1;
        c.margin_ms = 0;
        c.key_prefix = "k:";
        c.expect = 10;
        assert_int_equal(rlb_audit_init(&a, &c), 0);
        for (i = 0; i < 5; i++)
            add_at(&a, 3, 1, T0);
        add_at(&a, 3, 1, T0 + extras[e]);
        assert_int_equal(over_of(&a, &r) > 0, extras[e] < 1000);
        assert_int_equal(r.admissions, 6);
        if (extras[e] < 1000) {
            assert_int_equal(r.over[0].key, 3);
            assert_int_equal(r.over[0].allowed, 6);
            assert_int_equal(r.over[0].limit, 5);
        }
        rlb_audit_report_free(&r);
        rlb_audit_free(&a);
    }
}

/* Two instances share one log per key, stamping 2 ms apart either way and
 * applied in the order they reach the store: the audit (margin 10 ms)
 * passes. Two logs of their own each admit the limit in every window, and
 * fail it. */
static void test_swl_out_of_order(void **state)
{
    enum { KEYS = 4 };
    static lstore_t shared[KEYS], own[2][KEYS];
    rlb_audit_t a, b;
    rlb_audit_conf_t c;
    rlb_audit_report_t r;
    uint64_t t, admitted = 0;
    uint32_t key;

    (void)state;
    memset(shared, 0, sizeof(shared));
    memset(own, 0, sizeof(own));
    rlb_audit_conf_init(&c);
    c.algo = RL_ALGO_SLIDING_LOG;
    c.limit = 30;
    c.window_s = 1;
    c.margin_ms = 10;
    c.key_prefix = "k:";
    c.expect = KEYS;
    assert_int_equal(rlb_audit_init(&a, &c), 0);
    assert_int_equal(rlb_audit_init(&b, &c), 0);
    for (t = T0; t < T0 + 5000; t++) {
        int inst = (int)(next() % 2);
        uint64_t stamp = inst ? t + 2 - next() % 3 : t - 2 + next() % 3;
        key = (uint32_t)(next() % KEYS);
        if (log_decide(&shared[key], 30, 1000, stamp)) {
            add_at(&a, key, 1, stamp);
            admitted++;
        } else {
            add_at(&a, key, 0, stamp);
        }
        add_at(&b, key, log_decide(&own[inst][key], 30, 1000, stamp), stamp);
    }
    assert_int_equal(over_of(&a, &r), 0);
    assert_int_equal(r.windows, KEYS);
    assert_int_equal(r.admissions, admitted);
    /* hammered: about the limit in every second, per key */
    assert_true(admitted >= KEYS * 30 * 5 - KEYS * 30);
    rlb_audit_report_free(&r);
    assert_true(over_of(&b, &r) > 0);
    rlb_audit_report_free(&r);
    rlb_audit_free(&a);
    rlb_audit_free(&b);
}

/* An admission stamped before one already checked (more than the hold's
 * worth of stamps later) is late: left out and counted, never a
 * failure. */
static void test_late_left_out(void **state)
{
    rlb_audit_t a;
    rlb_audit_report_t r;
    uint32_t i;

    (void)state;
    assert_int_equal(init_algo(&a, RL_ALGO_GCRA, 5, 1, 5, 0), 0);
    for (i = 0; i <= RLB_AUDIT_HOLD; i++)
        add_at(&a, 1, 1, T0 + 1000 * i + 10);
    add_at(&a, 1, 1, T0 + 5); /* before the first, which went to the check */
    add_at(&a, 1, 1, T0 + 1000 + 5); /* before the second, still held */
    assert_int_equal(over_of(&a, &r), 0);
    assert_int_equal(r.late, 1);
    assert_int_equal(r.admissions, RLB_AUDIT_HOLD + 2);
    rlb_audit_report_free(&r);
    rlb_audit_free(&a);

    /* A batch's many admissions at one stamp take one place: another
     * instance's answers stamped a ms earlier, arriving after them, are
     * still in time. */
    assert_int_equal(init_algo(&a, RL_ALGO_GCRA, 50, 1, 40, 0), 0);
    for (i = 0; i < 30; i++)
        add_at(&a, 1, 1, T0 + 100);
    for (i = 0; i < 5; i++)
        add_at(&a, 1, 1, T0 + 99);
    add_at(&a, 1, 1, T0 + 99);
    assert_int_equal(over_of(&a, &r), 0);
    assert_int_equal(r.late, 0);
    assert_int_equal(r.admissions, 36);
    rlb_audit_report_free(&r);
    rlb_audit_free(&a);

    /* And one more is one too many for the burst. */
    assert_int_equal(init_algo(&a, RL_ALGO_GCRA, 50, 1, 40, 0), 0);
    for (i = 0; i < 41; i++)
        add_at(&a, 1, 1, T0 + 100 - i % 2);
    assert_int_equal(over_of(&a, &r), 1);
    assert_int_equal(r.late, 0);
    rlb_audit_report_free(&r);
    rlb_audit_free(&a);
}

/* A sliding-window-counter store for one key (windows of window_s from
 * off), deciding with lib/'s arithmetic at stamp now. */
typedef struct sstore_s {
    uint64_t base; /* the index of cnt[0] */
    uint64_t cnt[64];
} sstore_t;

static void swc_init(sstore_t *s, uint32_t window_s, uint64_t off)
{
    memset(s, 0, sizeof(*s));
    s->base = (T0 - off) / ((uint64_t)window_s * 1000) - 1;
}

static int swc_decide(sstore_t *s, uint64_t limit, uint32_t window_s,
                      uint64_t off, uint64_t now)
{
    uint64_t W = (uint64_t)window_s * 1000, idx = (now - off) / W;
    uint64_t reset = (idx + 1) * W + off - now, i = idx - s->base;
    rl_admit_win_t w;

    assert_true(i >= 1 && i < 64);
    rl_admit_swc(&w, limit, window_s, (int64_t)s->cnt[i],
                 (int64_t)s->cnt[i - 1], rl_swc_weight(reset, window_s), reset);
    if (!rl_admit_one(&w, 1, 1))
        return 0;
    s->cnt[i] += rl_admit_added(&w, now);
    return 1;
}

/* One store (aligned, then per caller), hammered over several windows,
 * passes; two stores of their own fail in every window after the first
 * few ms, and in the first, at 2 L. */
static void swc_one_and_two(int per_caller)
{
    enum { KEYS = 5 };
    sstore_t one[KEYS], two[2][KEYS];
    rlb_audit_t a, b;
    rlb_audit_report_t r;
    uint64_t t, off[KEYS], admitted = 0;
    uint32_t key;

    assert_int_equal(
        init_algo(&a, RL_ALGO_SLIDING_COUNTER, 20, 2, 0, per_caller), 0);
    assert_int_equal(
        init_algo(&b, RL_ALGO_SLIDING_COUNTER, 20, 2, 0, per_caller), 0);
    for (key = 0; key < KEYS; key++) {
        off[key] = per_caller ? off_of(key, 2) : 0;
        swc_init(&one[key], 2, off[key]);
        swc_init(&two[0][key], 2, off[key]);
        swc_init(&two[1][key], 2, off[key]);
    }
    for (t = T0; t < T0 + 9000; t += 1 + next() % 3) {
        int inst = (int)(next() % 2);
        key = (uint32_t)(next() % KEYS);
        if (swc_decide(&one[key], 20, 2, off[key], t)) {
            add_at(&a, key, 1, t);
            admitted++;
        } else {
            add_at(&a, key, 0, t);
        }
        add_at(&b, key, swc_decide(&two[inst][key], 20, 2, off[key], t), t);
    }
    assert_int_equal(over_of(&a, &r), 0);
    assert_int_equal(r.admissions, admitted);
    assert_true(r.windows >= 4 * KEYS);
    /* Hammered: about the limit per window, after a first full one. */
    assert_true(admitted >= KEYS * 20 * 4);
    rlb_audit_report_free(&r);
    assert_true(over_of(&b, &r) > 0);
    /* Every key, in most of its windows. */
    assert_true(r.nover >= 3 * KEYS);
    rlb_audit_report_free(&r);
    rlb_audit_free(&a);
    rlb_audit_free(&b);
}

static void test_swc_aligned(void **state)
{
    (void)state;
    swc_one_and_two(0);
}

static void test_swc_per_caller(void **state)
{
    (void)state;
    swc_one_and_two(1);
}

/* Near a boundary, on a shared store: instance A's batch stamped 2 ms
 * before the end of window i-1 reaches the store after instance B's
 * stamped 1 ms into window i. B saw prev = 5, admitted 5; A then admitted
 * 5 more in window i-1. A check against the final prev (10, share 10 at
 * 1 ms) would call B's admissions over the limit; the audit counts only
 * what was stamped margin_ms before the end (5), and passes. The same
 * answers with B's past what even that allows fail. */
static void test_swc_boundary_reorder(void **state)
{
    sstore_t s;
    rlb_audit_t a;
    rlb_audit_report_t r;
    const uint64_t end = T0 + 2000; /* window i-1 is [T0, T0 + 2000) */
    uint32_t i, round;

    (void)state;
    for (round = 0; round < 2; round++) {
        swc_init(&s, 2, 0);
        assert_int_equal(init_algo(&a, RL_ALGO_SLIDING_COUNTER, 10, 2, 0, 0),
                         0);
        for (i = 0; i < 5; i++) {
            assert_true(swc_decide(&s, 10, 2, 0, T0 + 100));
            add_at(&a, 1, 1, T0 + 100);
        }
        for (i = 0; i < 5; i++) {
            assert_true(swc_decide(&s, 10, 2, 0, end + 1));
            add_at(&a, 1, 1, end + 1);
        }
        assert_false(swc_decide(&s, 10, 2, 0, end + 1));
        if (round == 1)
            add_at(&a, 1, 1, end + 1); /* one B did not admit */
        for (i = 0; i < 5; i++) {
            assert_true(swc_decide(&s, 10, 2, 0, end - 2));
            add_at(&a, 1, 1, end - 2);
        }
        assert_int_equal(s.cnt[1], 10);
        assert_int_equal(over_of(&a, &r), round);
        assert_int_equal(r.late, 0);
        if (round == 1) {
            assert_int_equal(r.over[0].allowed, 6);
            assert_int_equal(r.over[0].share, 5);
        }
        rlb_audit_report_free(&r);
        rlb_audit_free(&a);
    }
}

/* An answer slower than the margin makes the sliding window's audit
 * unreliable: a batch may have reached the store later than that. */
static void test_swc_slow_answer_unreliable(void **state)
{
    rlb_audit_t a;
    rlb_audit_report_t r;
    rlb_answer_t x = {.key = 1,
                      .admitted = 1,
                      .limit = 10,
                      .window_s = 2,
                      .algorithm = RL_ALGO_SLIDING_COUNTER,
                      .decided_at_ms = T0 + 5,
                      .sent_ms = 100,
                      .recv_ms = 100 + RLB_AUDIT_MARGIN_MS + 1};

    (void)state;
    assert_int_equal(init_algo(&a, RL_ALGO_SLIDING_COUNTER, 10, 2, 0, 0), 0);
    add_at(&a, 1, 1, T0 + 1);
    rlb_audit_add(&a, &x);
    assert_int_equal(over_of(&a, &r), 0);
    assert_true(r.unreliable);
    rlb_audit_report_free(&r);
    rlb_audit_free(&a);
}

/* With a rule of several limits: answers decided by another (another
 * window, or the same window under another algorithm) are refusals left
 * out, admissions that counted in the audited limit too. An older
 * server's admissions cannot be placed for a gcra: counted apart. */
static void test_other_limits_and_unstamped(void **state)
{
    rlb_audit_t a;
    rlb_audit_report_t r;
    rlb_answer_t x = {.key = 1, .limit = 100, .window_s = 1};

    (void)state;
    assert_int_equal(init_algo(&a, RL_ALGO_GCRA, 5, 1, 5, 0), 0);
    x.algorithm = RL_ALGO_FIXED;
    x.decided_at_ms = T0;
    rlb_audit_add(&a, &x); /* a refusal by 100/1s fixed */
    x.window_s = 60;
    rlb_audit_add(&a, &x); /* by another window */
    x.admitted = 1;
    x.decided_at_ms = 0;
    rlb_audit_add(&a, &x); /* an older server's admission */
    for (x.decided_at_ms = T0; x.decided_at_ms < T0 + 6; x.decided_at_ms++)
        rlb_audit_add(&a, &x); /* six admissions, another limit deciding */
    assert_int_equal(over_of(&a, &r), 1);
    assert_int_equal(r.other_refused, 2);
    assert_int_equal(r.unstamped, 1);
    assert_int_equal(r.admissions, 6);
    rlb_audit_report_free(&r);
    rlb_audit_free(&a);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_presized_never_grows),
        cmocka_unit_test(test_unsized_grows_and_keeps_all),
        cmocka_unit_test(test_over_limit_reported),
        cmocka_unit_test(test_slow_answers_keep_the_grid),
        cmocka_unit_test(test_fixed_stamped),
        cmocka_unit_test(test_fixed_per_caller),
        cmocka_unit_test(test_gcra_exact_bound),
        cmocka_unit_test(test_gcra_out_of_order),
        cmocka_unit_test(test_late_left_out),
        cmocka_unit_test(test_swl_exact_bound),
        cmocka_unit_test(test_swl_out_of_order),
        cmocka_unit_test(test_swc_aligned),
        cmocka_unit_test(test_swc_per_caller),
        cmocka_unit_test(test_swc_boundary_reorder),
        cmocka_unit_test(test_swc_slow_answer_unreliable),
        cmocka_unit_test(test_other_limits_and_unstamped),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
