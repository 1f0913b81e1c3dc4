/* The audit of a gcra and of a sliding-window-counter: per key, each
 * admission is checked, in the order of the stamps (decided_at_ms), against
 * what the server must have known when it decided. Each check below can
 * fail only when the server admitted more than its algorithm allows, and
 * each still sees an over-admission by servers that do not share a store.
 *
 * Notation: t a stamp, on the store's clock; c the cost of one request
 * (one per run); a key's admissions sorted by stamp, P_j the cost of the
 * first j.
 *
 * gcra (burst B, emission interval T us). The store keeps a TAT per key and
 * admits at now when max(TAT, now) - now + c T <= B T, setting TAT to
 * max(TAT, now) + c T. So TAT never goes down, every admission raises it by
 * at least c T, and right after one stamped t, TAT <= t + B T. Take the
 * admissions stamped in [a, b], in whatever order the store applied them
 * (several instances may apply them out of stamp order): after the first
 * applied, TAT >= a + c T; after all, TAT >= a + (their cost) T; and after
 * the last applied, TAT <= b + B T. Hence their cost is at most B +
 * floor((b - a) / T), whatever the order, and also for any subset of them
 * (another client's admissions only raise TAT). The check is that bound for
 * every pair i <= j, in O(1) per admission: (P_j - P_{i-1}) T - (t_j - t_i)
 * <= B T for all i <= j is
 *
 *     P_j T - t_j <= B T + min over i <= j of (P_{i-1} T - t_i),
 *
 * a running minimum. Exact: it fails exactly when some interval holds more.
 *
 * sliding-window-counter (limit L per window W ms; window i of a caller
 * starts at i W + its offset). The store admits at t in window i when
 * share(min(prev, L), t) + cur + c <= L, where share(p, t) = ceil(p x
 * weight(t) / 65536), weight(t) = ceil((W - e) x 65536 / W), e = t - start
 * of window i, prev and cur its counters of windows i-1 and i as the store
 * held them at that moment: with several instances, possibly without
 * admissions stamped a little earlier that had not reached the store yet.
 * So the final counts could be too strict. The check, for each admission j
 * of window i:
 *
 *     share(min(E_{i-1} c, L), t_j) + C_j c <= L
 *
 * where C_j is the number of window i's admissions stamped up to t_j
 * (checked so far, j included), and E_{i-1} the number of window i-1's
 * stamped at least margin before it ended. Sound: among the C_j
 * admissions, let z be the last the store applied. When it decided z, its
 * cur held the C_j - 1 others (applied before, in the same window's
 * counter) and its prev held the E_{i-1} (stamped margin or more before
 * window i began, so applied before z, stamped in window i, was decided:
 * this is the margin's assumption, below); weight(t_z) >= weight(t_j) as
 * t_z <= t_j; and share is monotonic. So the store's own test for z, which
 * passed, bounds the left side. Still sharp: E_{i-1} is the whole previous
 * window but its last margin ms, so servers that each admit L per window
 * put about 2 L (capped at L) x weight + the current count, over L as soon
 * as a window is under way.
 *
 * The margin's assumption: an admission stamped t is in the store's
 * counters before the store decides anything stamped t + margin_ms or
 * later. A stamp is a batch's clock reading, which the store applies after
 * at most the batch's wait and one round trip (and instances read the
 * store's clock within a round trip of each other), so a margin longer
 * than the slowest answer holds; the report calls the audit unreliable
 * when some answer was slower than the margin.
 *
 * sliding-window (limit L per W ms, the exact log). The store admits at
 * now when the cost its log holds stamped in (now - W, now] plus c is at
 * most L, and drops from the log what is stamped at or before now - W.
 * The check, for each admission j: the admissions stamped in (t_j - W +
 * margin, t_j] cost at most L. Sound: among them, let z be the last the
 * store applied. Every batch the store ran before z was stamped at most
 * margin before z was applied (the margin's assumption), so none dropped
 * an entry stamped after t_z - W + margin, which every other admission of
 * the set is; they were all applied before z, so z's sum held them, and
 * z's own test bounds the set's cost by L. Sharp but for the margin:
 * servers that do not share a store each admit L in every window.
 *
 * Late admissions (stamped before one already checked: rlb.h) are left
 * out: every check above is of a set of admissions that really lie in its
 * interval, and a smaller set only makes the left side smaller. */
#include <stdlib.h>
#include <string.h>

#include "rl_admit.h"
#include "rl_error.h"
#include "rl_window.h"
#include "rlb.h"

#define TAB_MIN 4096
#define TAB_PRESIZE_MAX (1u << 22) /* entries reserved up front, at most */

/* The audit's tables (audit.c's windows, this file's keys). */
void *rlb_audit_table(size_t size, uint64_t expect, size_t *mask)
{
    size_t n = TAB_MIN, i;
    char *t;

    /* Room for what the run is expected to see, at most half full, so
     * that no grow (a rehash of everything, tens of ms with a large table)
     * stalls the loop mid-run and shows in the latencies it measures; the
     * pages are touched now, before anything is timed. */
    while (n < TAB_PRESIZE_MAX && n < 2 * expect)
        n *= 2;
    t = calloc(n, size);
    if (t == NULL)
        return NULL;
    for (i = 0; i < n * size; i += 4096)
        ((volatile char *)t)[i] = 0;
    *mask = n - 1;
    return t;
}

int rlb_audit_keys_init(rlb_audit_t *a)
{
    a->keys = rlb_audit_table(sizeof(*a->keys), a->c.expect, &a->kmask);
    return a->keys != NULL ? 0 : RL_ENOMEM;
}

uint64_t rlb_audit_offset(const rlb_audit_t *a, uint32_t key)
{
    char buf[RLB_AUDIT_PREFIX_MAX + 24];
    size_t n;

    /* Every answer of an aligned audit asks: no work then. The prefix's
     * length was checked by rlb_audit_init. */
    if (!a->c.per_caller)
        return 0;
    n = strlen(a->c.key_prefix);
    memcpy(buf, a->c.key_prefix, n);
    n += rl_put_u64(buf + n, key);
    return rl_phase_offset_ms(buf, n, a->c.window_s);
}

static int kgrow(rlb_audit_t *a)
{
    size_t n = 2 * (a->kmask + 1), i;
    rlb_audit_key_t *t = calloc(n, sizeof(*t));

    if (t == NULL)
        return RL_ENOMEM;
    for (i = 0; i <= a->kmask; i++) {
        size_t p;
        if (a->keys[i].key1 == 0)
            continue;
        for (p = rlb_mix64(a->keys[i].key1) & (n - 1); t[p].key1 != 0;
             p = (p + 1) & (n - 1))
            ;
        t[p] = a->keys[i];
    }
    free(a->keys);
    a->keys = t;
    a->kmask = n - 1;
    return 0;
}

/* The key's state, created on first use; NULL when out of memory. */
static rlb_audit_key_t *key_get(rlb_audit_t *a, uint32_t key)
{
    uint32_t k1 = key + 1;
    size_t p;

    if (k1 == 0)
        return NULL; /* UINT32_MAX is no key index rl-bench makes */
    for (p = rlb_mix64(k1) & a->kmask; a->keys[p].key1 != 0;
         p = (p + 1) & a->kmask)
        if (a->keys[p].key1 == k1)
            return &a->keys[p];
    if (2 * (a->kused + 1) > a->kmask + 1) {
        if (kgrow(a) != 0)
            return NULL;
        for (p = rlb_mix64(k1) & a->kmask; a->keys[p].key1 != 0;
             p = (p + 1) & a->kmask)
            ;
    }
    memset(&a->keys[p], 0, sizeof(a->keys[p]));
    a->keys[p].key1 = k1;
    if (a->c.algo == RL_ALGO_SLIDING_COUNTER)
        a->keys[p].u.s.off = rlb_audit_offset(a, key);
    else
        a->awindows++; /* a gcra's or a log's "windows" are its keys */
    a->kused++;
    return &a->keys[p];
}

/* Keeps a failed check for the report; times are stamps until then. */
static void fail(rlb_audit_t *a, uint32_t key, double from, double end,
                 double at, uint64_t allowed, uint64_t limit, uint64_t share)
{
    rlb_audit_window_t *w;

    a->over++;
    if (a->viol == NULL &&
        (a->viol = calloc(RLB_AUDIT_LIST_MAX, sizeof(*a->viol))) == NULL) {
        a->nomem = 1;
        return;
    }
    if (a->nviol >= RLB_AUDIT_LIST_MAX)
        return;
    w = &a->viol[a->nviol++];
    w->key = key;
    w->from_ms = from;
    w->end_ms = end;
    w->at_ms = at;
    w->allowed = allowed;
    w->limit = limit;
    w->share = share;
}

/* gcra: admission of key k stamped base + rel, the next in stamp order. */
static void check_gcra(rlb_audit_t *a, rlb_audit_key_t *k, uint32_t rel)
{
    __int128 ct = (__int128)a->c.cost * a->t_us;
    __int128 t = (__int128)rel * 1000;
    __int128 cand = (__int128)k->u.g.n * ct - t;

    if (!k->began || cand < k->u.g.m) {
        k->u.g.m = cand;
        k->u.g.m_n = k->u.g.n;
        k->u.g.m_t = rel;
    }
    k->u.g.n++;
    if ((__int128)k->u.g.n * ct - t <=
        (__int128)a->c.burst * a->t_us + k->u.g.m) {
        k->failed = 0;
    } else if (k->failed) {
        a->over++; /* the same excess, still inside the interval */
    } else {
        /* One entry per run of failed checks: the admissions that broke
         * the bound keep every interval over it that holds them. */
        uint64_t from = a->stamp_base + k->u.g.m_t;
        uint64_t span_us = ((uint64_t)rel - k->u.g.m_t) * 1000;
        k->failed = 1;
        fail(a, k->key1 - 1, (double)from, (double)(a->stamp_base + rel),
             (double)(a->stamp_base + rel), k->u.g.n - k->u.g.m_n,
             a->c.burst + span_us / a->t_us, 0);
    }
}

/* sliding-window-counter: the same, for its check. */
static void check_swc(rlb_audit_t *a, rlb_audit_key_t *k, uint32_t rel)
{
    uint64_t W = (uint64_t)a->c.window_s * 1000, t = a->stamp_base + rel;
    uint64_t L = a->c.limit, idx, start, end, prev, share;
    unsigned __int128 used;

    if (t < k->u.s.off) {
        a->unplaced++; /* before the key's first window: no such stamp */
        return;
    }
    idx = (t - k->u.s.off) / W;
    start = idx * W + k->u.s.off;
    end = start + W;
    if (!k->began || idx != k->u.s.win) {
        /* Stamp order: a later window. Its previous one counts only if
         * it is the window just checked. */
        k->u.s.prev = k->began && idx == k->u.s.win + 1 ? k->u.s.early : 0;
        k->u.s.win = idx;
        k->u.s.cur = k->u.s.early = 0;
        k->failed = 0;
        a->awindows++;
    }
    k->u.s.cur++;
    if (t + a->c.margin_ms <= end)
        k->u.s.early++;
    prev = k->u.s.prev;
    prev = prev > L / a->c.cost ? L : prev * a->c.cost;
    share = (uint64_t)(((unsigned __int128)prev *
                            rl_swc_weight(end - t, a->c.window_s) +
                        RL_SWC_ONE - 1) /
                       RL_SWC_ONE);
    used = (unsigned __int128)k->u.s.cur * a->c.cost + share;
    if (used > L && !k->failed) {
        /* One entry per window: every later admission of it fails too. */
        k->failed = 1;
        fail(a, k->key1 - 1, (double)start, (double)end, (double)t, k->u.s.cur,
             L, share);
    } else if (used > L) {
        a->over++;
    }
}

/* sliding-window: admission of key k stamped base + rel, the next in stamp
 * order. Returns 0, or RL_ENOMEM. */
static int check_swl(rlb_audit_t *a, rlb_audit_key_t *k, uint32_t rel)
{
    uint64_t W = (uint64_t)a->c.window_s * 1000, span;
    uint32_t *t, *n, i;

    span = W > a->c.margin_ms ? W - a->c.margin_ms : 0;
    /* What is stamped at or before rel - span is out of the check. */
    while (k->u.l.len > 0 && (uint64_t)k->u.l.t[k->u.l.head] + span <= rel) {
        k->u.l.sum -= k->u.l.n[k->u.l.head];
        k->u.l.head = (k->u.l.head + 1) % k->u.l.cap;
        k->u.l.len--;
    }
    if (k->u.l.len > 0 &&
        k->u.l.t[(k->u.l.head + k->u.l.len - 1) % k->u.l.cap] == rel) {
        k->u.l.n[(k->u.l.head + k->u.l.len - 1) % k->u.l.cap]++;
    } else {
        if (k->u.l.len == k->u.l.cap) {
            uint32_t cap = k->u.l.cap ? 2 * k->u.l.cap : 8;
            t = malloc(cap * sizeof(*t));
            n = malloc(cap * sizeof(*n));
            if (t == NULL || n == NULL) {
                free(t);
                free(n);
                return RL_ENOMEM;
            }
            for (i = 0; i < k->u.l.len; i++) {
                t[i] = k->u.l.t[(k->u.l.head + i) % k->u.l.cap];
                n[i] = k->u.l.n[(k->u.l.head + i) % k->u.l.cap];
            }
            free(k->u.l.t);
            free(k->u.l.n);
            k->u.l.t = t;
            k->u.l.n = n;
            k->u.l.head = 0;
            k->u.l.cap = cap;
        }
        i = (k->u.l.head + k->u.l.len) % k->u.l.cap;
        k->u.l.t[i] = rel;
        k->u.l.n[i] = 1;
        k->u.l.len++;
    }
    k->u.l.sum++;
    if ((unsigned __int128)k->u.l.sum * a->c.cost <= a->c.limit) {
        k->failed = 0;
    } else if (k->failed) {
        a->over++; /* the same excess, still inside the interval */
    } else {
        uint64_t end = a->stamp_base + rel;
        k->failed = 1;
        fail(a, k->key1 - 1, (double)(end > span ? end - span : 0), (double)end,
             (double)end, k->u.l.sum, a->c.limit, 0);
    }
    return 0;
}

/* Checks n admissions stamped base + rel, the earliest not yet checked. */
static void check(rlb_audit_t *a, rlb_audit_key_t *k, uint32_t rel, uint32_t n)
{
    for (; n > 0; n--) {
        a->admissions++;
        if (a->c.algo == RL_ALGO_GCRA)
            check_gcra(a, k, rel);
        else if (a->c.algo == RL_ALGO_SLIDING_LOG) {
            if (check_swl(a, k, rel) != 0)
                a->nomem = 1;
        } else
            check_swc(a, k, rel);
        k->began = 1;
        k->done = rel;
    }
}

void rlb_audit_keys_add(rlb_audit_t *a, uint32_t key, uint64_t decided_at_ms)
{
    rlb_audit_key_t *k;
    uint32_t rel, i;

    if (decided_at_ms < a->stamp_base ||
        decided_at_ms - a->stamp_base > UINT32_MAX) {
        a->unplaced++; /* 24 days from the first stamp: not a real one */
        return;
    }
    rel = (uint32_t)(decided_at_ms - a->stamp_base);
    if ((k = key_get(a, key)) == NULL) {
        a->nomem = 1;
        return;
    }
    if (k->began && rel < k->done) {
        a->late++;
        return;
    }
    /* Where it goes: after every stamp held that is earlier. */
    for (i = k->nheld; i > 0 && k->held[i - 1].t > rel; i--)
        ;
    if (i > 0 && k->held[i - 1].t == rel) {
        if (k->held[i - 1].n == UINT32_MAX)
            a->late++; /* 4 billion at one ms: no real store */
        else
            k->held[i - 1].n++;
        return;
    }
    if (k->nheld == RLB_AUDIT_HOLD) {
        if (i == 0) {
            /* Earlier than every stamp held: its turn is now. */
            check(a, k, rel, 1);
            return;
        }
        check(a, k, k->held[0].t, k->held[0].n);
        memmove(k->held, k->held + 1, (RLB_AUDIT_HOLD - 1) * sizeof(*k->held));
        k->nheld--;
        i--;
    }
    memmove(k->held + i + 1, k->held + i, (k->nheld - i) * sizeof(*k->held));
    k->held[i].t = rel;
    k->held[i].n = 1;
    k->nheld++;
}

void rlb_audit_keys_flush(rlb_audit_t *a)
{
    size_t p;
    uint32_t i;

    if (a->keys == NULL)
        return;
    for (p = 0; p <= a->kmask; p++) {
        rlb_audit_key_t *k = &a->keys[p];
        if (k->key1 == 0)
            continue;
        for (i = 0; i < k->nheld; i++)
            check(a, k, k->held[i].t, k->held[i].n);
        k->nheld = 0;
    }
}
