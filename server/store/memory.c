/* The memory store: counters in this process, for a single server or for
 * tests. Same semantics as Redis: add, then report; every counter expires at
 * the time it was given.
 *
 * Counters live in a chained hash table (keyed SipHash). They are also
 * grouped by expiry time: all counters of one window of one size expire
 * together, so there are only a few groups, kept sorted in an array. A
 * timer frees whole groups as their time passes, a bounded number of
 * counters per tick so a million expiring keys never stall the loop; the
 * table shrinks again when it empties, so memory tracks the live windows.
 *
 * Memory is bounded (rls_store_memory_set_max): the bytes held by counters,
 * the table and the groups are counted as malloc holds them, and a new
 * counter that would pass the cap is refused, its op alone failing with
 * RL_ENOMEM so the batcher answers it by the fail mode. Counters that exist
 * keep counting: they need no memory. Once full, the store refuses new
 * counters until expiry brings it below a low-water mark (7/8 of the cap),
 * so that it does not flap between full and not at every key. */
#include <malloc.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "rl_admit.h"
#include "rl_validate.h"
#include "rl_error.h"
#include "rl_hash.h"
#include "store/memory.h"
#include "store/store.h"
#include "base/util.h"

#define SWEEP_EVERY_MS 250
#define SWEEP_BUDGET 20000 /* counters freed per timer tick, at most */
#define TABLE_MIN 1024
#define GROUPS_MIN 16
#define WARN_EVERY_MS 1000 /* "store full" warnings, at most one per */

typedef struct ent_s {
    struct ent_s *hnext;   /* hash chain */
    struct ent_s **hprev;  /* what points at us in the chain */
    struct ent_s *enext;   /* expiry group */
    uint64_t hash;
    int64_t count;
    uint64_t until;     /* expires then: later than its group's time when a
                           gcra's TAT or a log moved on; the sweep files it
                           again */
    union {
        struct mlog_s *log;      /* ENT_COUNTER: a sliding window's log
                                    (count is its sum), or NULL */
        struct mlease_s *leases; /* ENT_LEASES, ENT_SETTLED: never NULL */
    };
    uint32_t klen;
    uint32_t kind; /* ENT_* */
    char key[];
} ent_t;

/* What an entry holds: a counter (a TAT, a log), a caller's settled set
 * (leases: its (id, end ms) pairs; count: its floor, the latest end it
 * dropped) or a lease set (store/reserve.c, reserve.h's RLS_XOP_*). */
enum { ENT_COUNTER = 0, ENT_SETTLED = 1, ENT_LEASES = 2 };

/* A lease set or a settled set: n (id, end ms) pairs in no order. */
typedef struct mlease_s {
    uint32_t n, cap;
    uint64_t e[]; /* lease i: id at e[2 * i], end at e[2 * i + 1] */
} mlease_t;

#define LEASE_CAP_MIN 4

/* A sliding window's log: a ring of (time ms, cost) entries, oldest
 * first. */
typedef struct mlog_s {
    uint32_t head, n, cap;
    uint64_t e[]; /* entry i at e[2 * ((head + i) % cap)], its cost after */
} mlog_t;

#define LOG_CAP_MIN 4

typedef struct {
    uint64_t expire_at_ms;
    ent_t *head;
} group_t;

typedef struct {
    rls_store_t base;
    uv_timer_t sweep;
    rl_hash_key_t hk;
    ent_t **table;
    size_t mask;
    size_t count;
    group_t *groups; /* sorted by expire_at_ms */
    size_t ngroups, groups_cap;
    size_t freed_since_trim;
    uint64_t last_now;
    uint64_t unwarned;     /* refusals not yet in a warning */
    uint64_t warned_at_ms; /* loop time of the last warning */
    int warned;
    void (*done)(void *);
    void *done_arg;
} mstore_t;

static uint64_t m_now(rls_store_t *s)
{
    mstore_t *m = (mstore_t *)s;
    uint64_t now = rl_unix_ms();

    /* The wall clock may step back (NTP); decisions must not. */
    if (now < m->last_now)
        return m->last_now;
    m->last_now = now;
    return now;
}

static int m_up(rls_store_t *s)
{
    (void)s;
    return 1;
}

static int resize(mstore_t *m, size_t nbuckets)
{
    ent_t **nt = calloc(nbuckets, sizeof(*nt));
    size_t i;

    if (nt == NULL)
        return RL_ENOMEM;
    for (i = 0; i <= m->mask; i++) {
        ent_t *e = m->table[i], *next;
        for (; e != NULL; e = next) {
            ent_t **head = &nt[e->hash & (nbuckets - 1)];
            next = e->hnext;
            e->hnext = *head;
            if (*head)
                (*head)->hprev = &e->hnext;
            e->hprev = head;
            *head = e;
        }
    }
    free(m->table);
    m->base.stats.mem_bytes -= (m->mask + 1) * sizeof(*m->table);
    m->base.stats.mem_bytes += nbuckets * sizeof(*nt);
    m->table = nt;
    m->mask = nbuckets - 1;
    return 0;
}

/* What malloc holds for an entry with a key of klen bytes (glibc: the
 * request plus an 8-byte header, rounded up to 16, at least 32). */
static size_t ent_cost(size_t klen)
{
    size_t n = (sizeof(ent_t) + klen + 8 + 15) & ~(size_t)15;

    return n < 32 ? 32 : n;
}

/* What malloc holds for a lease set of cap leases. */
static size_t lease_cost(uint32_t cap)
{
    size_t n = (sizeof(mlease_t) + (size_t)cap * 16 + 8 + 15) & ~(size_t)15;

    return cap ? n : 0;
}

/* What malloc holds for a log of cap entries. */
static size_t log_cost(uint32_t cap)
{
    size_t n = (sizeof(mlog_t) + (size_t)cap * 16 + 8 + 15) & ~(size_t)15;

    return cap ? n : 0;
}

static uint64_t *log_at(const mlog_t *g, uint32_t i)
{
    return (uint64_t *)&g->e[2 * ((g->head + i) % g->cap)];
}

/* Drops the entries that left the window by now from e's log and its
 * sum. */
static void log_prune(ent_t *e, uint64_t now, uint64_t W)
{
    mlog_t *g = e->log;

    while (g != NULL && g->n > 0 && log_at(g, 0)[0] + W <= now) {
        e->count -= (int64_t)log_at(g, 0)[1];
        g->head = (g->head + 1) % g->cap;
        g->n--;
    }
    if (e->count < 0)
        e->count = 0;
}

/* Reports e's log (NULL: none) as store.h says, for an op whose largest
 * cost is cmax. */
static void log_report(const ent_t *e, rls_op_window_t *wo, uint64_t cmax)
{
    const mlog_t *g = e != NULL ? e->log : NULL;
    uint64_t sum = e != NULL && e->count > 0 ? (uint64_t)e->count : 0;
    uint64_t needed = (sum > wo->limit ? sum - wo->limit : 0) + cmax, acc = 0;
    uint32_t i;

    wo->before = (int64_t)sum;
    wo->before2 = g != NULL && g->n ? (int64_t)log_at(g, g->n - 1)[0] : 0;
    wo->nold = 0;
    for (i = 0; g != NULL && i < g->n && i < RL_SWL_PREFIX && acc < needed;
         i++) {
        wo->old_t[i] = log_at(g, i)[0];
        wo->old_c[i] = log_at(g, i)[1];
        acc += wo->old_c[i];
        wo->nold = i + 1;
    }
}

/* Room in e's log for one more entry: a new log, or one twice the size.
 * The caller checked the budget (log_growth). Returns 0 or RL_ENOMEM. */
static int log_reserve(mstore_t *m, ent_t *e)
{
    mlog_t *g = e->log, *ng;
    uint32_t cap = g ? 2 * g->cap : LOG_CAP_MIN, i;

    if (g != NULL && g->n < g->cap)
        return 0;
    if ((ng = malloc(sizeof(*ng) + (size_t)cap * 16)) == NULL)
        return RL_ENOMEM;
    ng->head = 0;
    ng->cap = cap;
    ng->n = g ? g->n : 0;
    for (i = 0; i < ng->n; i++) {
        ng->e[2 * i] = log_at(g, i)[0];
        ng->e[2 * i + 1] = log_at(g, i)[1];
    }
    m->base.stats.mem_bytes += log_cost(cap) - (g ? log_cost(g->cap) : 0);
    free(g);
    e->log = ng;
    return 0;
}

/* Bytes appending to e's log (NULL: a new entry) at now may take. */
static size_t log_growth(const ent_t *e, uint64_t now)
{
    const mlog_t *g = e != NULL ? e->log : NULL;

    if (g == NULL)
        return log_cost(LOG_CAP_MIN);
    if (g->n < g->cap || (g->n && log_at(g, g->n - 1)[0] == now))
        return 0;
    return log_cost(2 * g->cap) - log_cost(g->cap);
}

/* Appends (now, cost) to e's log (room reserved), or adds cost to its
 * newest entry when that is at now. */
static void log_append(ent_t *e, uint64_t now, uint64_t cost)
{
    mlog_t *g = e->log;

    if (g->n && log_at(g, g->n - 1)[0] == now) {
        log_at(g, g->n - 1)[1] += cost;
    } else {
        uint64_t *x = log_at(g, g->n);
        x[0] = now;
        x[1] = cost;
        g->n++;
    }
    e->count += (int64_t)cost;
}

/* Warns that new counters are being refused, with how many since the last
 * warning, at most once per WARN_EVERY_MS; the sweep timer calls it too, so
 * the last refusals of a burst are reported. */
static void warn_full(mstore_t *m)
{
    const rls_store_stats_t *st = &m->base.stats;
    uint64_t now = uv_now(m->sweep.loop);

    if (m->unwarned == 0 ||
        (m->warned && now - m->warned_at_ms < WARN_EVERY_MS))
        return;
    RLS_WARN("memory store full: new counters refused (--memory-max)",
             " refused=%llu bytes=%llu max=%llu",
             (unsigned long long)m->unwarned,
             (unsigned long long)st->mem_bytes,
             (unsigned long long)st->mem_max);
    m->unwarned = 0;
    m->warned = 1;
    m->warned_at_ms = now;
}

/* Refuses a new counter: the store is full. */
static int refuse(mstore_t *m)
{
    m->base.stats.mem_full = 1;
    m->base.stats.mem_refused++;
    m->unwarned++;
    warn_full(m);
    return RL_ENOMEM;
}

/* Accepts new counters again once expiry brought the store below its
 * low-water mark. */
static void check_recovered(mstore_t *m)
{
    rls_store_stats_t *st = &m->base.stats;

    if (!st->mem_full || st->mem_bytes > st->mem_max - st->mem_max / 8)
        return;
    warn_full(m);
    st->mem_full = 0;
    RLS_INFO("memory store accepting new counters again",
             " bytes=%llu max=%llu refused_total=%llu",
             (unsigned long long)st->mem_bytes,
             (unsigned long long)st->mem_max,
             (unsigned long long)st->mem_refused);
}

/* Where the group for an expiry time is, or would be inserted. */
static size_t group_pos(const mstore_t *m, uint64_t at)
{
    size_t lo = 0, hi = m->ngroups;

    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (m->groups[mid].expire_at_ms < at)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* Resizes the group array to ncap >= ngroups. Returns 0 or RL_ENOMEM. */
static int groups_resize(mstore_t *m, size_t ncap)
{
    group_t *ng = realloc(m->groups, ncap * sizeof(*ng));

    if (ng == NULL)
        return RL_ENOMEM;
    m->base.stats.mem_bytes -= m->groups_cap * sizeof(*ng);
    m->base.stats.mem_bytes += ncap * sizeof(*ng);
    m->groups = ng;
    m->groups_cap = ncap;
    return 0;
}

/* Inserts an empty group for `at` at pos (from group_pos). Returns 0 or
 * RL_ENOMEM. */
static int group_insert(mstore_t *m, size_t pos, uint64_t at)
{
    if (m->ngroups == m->groups_cap &&
        groups_resize(m, m->groups_cap ? 2 * m->groups_cap : GROUPS_MIN) != 0)
        return RL_ENOMEM;
    memmove(&m->groups[pos + 1], &m->groups[pos],
            (m->ngroups - pos) * sizeof(*m->groups));
    m->ngroups++;
    m->groups[pos].expire_at_ms = at;
    m->groups[pos].head = NULL;
    return 0;
}

static ent_t *find(mstore_t *m, const char *key, size_t len, uint64_t h)
{
    ent_t *e;

    for (e = m->table[h & m->mask]; e != NULL; e = e->hnext)
        if (e->hash == h && e->klen == len && memcmp(e->key, key, len) == 0)
            return e;
    return NULL;
}

/* Makes a counter holding 0, expiring at `at`, into *out. The caller
 * checked that it fits under the cap. Returns 0 or RL_ENOMEM. */
static int create(mstore_t *m, const char *key, size_t len, uint64_t h,
                  uint64_t at, ent_t **out)
{
    ent_t **head = &m->table[h & m->mask], *e;
    rls_store_stats_t *st = &m->base.stats;
    size_t pos = group_pos(m, at), grow;
    group_t *g;

    if ((pos == m->ngroups || m->groups[pos].expire_at_ms != at) &&
        group_insert(m, pos, at) != 0)
        return RL_ENOMEM;
    g = &m->groups[pos];
    if ((e = malloc(sizeof(*e) + len)) == NULL)
        return RL_ENOMEM; /* an empty group is freed by the sweep */
    st->mem_bytes += ent_cost(len);
    e->hash = h;
    e->count = 0;
    e->until = at;
    e->log = NULL;
    e->klen = (uint32_t)len;
    e->kind = ENT_COUNTER;
    memcpy(e->key, key, len);
    e->hnext = *head;
    if (*head)
        (*head)->hprev = &e->hnext;
    e->hprev = head;
    *head = e;
    e->enext = g->head;
    g->head = e;
    *out = e;

    /* A bigger table only if it fits too; if not (or on failure), chains
     * just grow. */
    grow = (m->mask + 1) * sizeof(*m->table);
    if (++m->count > m->mask + 1 && st->mem_bytes + grow <= st->mem_max)
        resize(m, 2 * (m->mask + 1));
    return 0;
}

#define OPKEY_MAX RLS_OPKEY_MAX

/* A gcra's key lives until its TAT plus the grace, a time of its own for
 * every caller: its group's time is rounded up to this many ms, so that
 * they share a few groups, as windows do. */
#define GCRA_GROUP_MS 1024

/* Decides an op as the Redis script does (store.h): the limits' state, the
 * admissions in arrival order, then the admitted cost added to every
 * window (a gcra: its new TAT). All or nothing: an op that cannot be
 * applied whole (a counter would overflow, the store is full) changes
 * nothing and fails alone. */
static int apply(mstore_t *m, rls_op_t *op)
{
    char keys[RL_ADMIT_WINDOWS_MAX][OPKEY_MAX + 36], pk[OPKEY_MAX + 36];
    size_t klen[RL_ADMIT_WINDOWS_MAX], need = 0;
    uint64_t h[RL_ADMIT_WINDOWS_MAX], sum = 0, a = 0, now, cmax;
    uint64_t val[RL_ADMIT_WINDOWS_MAX], exp[RL_ADMIT_WINDOWS_MAX];
    ent_t *e[RL_ADMIT_WINDOWS_MAX];
    rl_admit_win_t w[RL_ADMIT_WINDOWS_MAX];
    rls_store_stats_t *st = &m->base.stats;
    uint32_t j;

    if (op->nwin == 0 || op->nwin > RL_ADMIT_WINDOWS_MAX ||
        op->key_len > OPKEY_MAX)
        return RL_EINVAL;
    now = op->now_ms ? op->now_ms : m_now(&m->base);
    cmax = rls_op_max_cost(op);
    for (j = 0; j < op->nwin; j++) {
        rls_op_window_t *wo = &op->win[j];
        klen[j] = rls_wkey(op, wo, RLS_WKEY_CUR, keys[j]);
        h[j] = rl_hash(&m->hk, keys[j], klen[j]);
        e[j] = find(m, keys[j], klen[j], h[j]);
        wo->before = e[j] != NULL ? e[j]->count : 0;
        wo->before2 = 0;
        if (wo->algo == RL_ALGO_SLIDING_LOG) {
            /* What left the window is gone (it decides nothing). */
            if (e[j] != NULL)
                log_prune(e[j], now, (uint64_t)wo->window_s * 1000);
            log_report(e[j], wo, cmax);
        } else if (wo->algo == RL_ALGO_SLIDING_COUNTER) {
            size_t pl = rls_wkey(op, wo, RLS_WKEY_PREV, pk);
            ent_t *p = find(m, pk, pl, rl_hash(&m->hk, pk, pl));
            wo->before2 = p != NULL ? p->count : 0;
        }
        rls_op_window_load(wo, now, &w[j]);
    }
    if (op->equal_cost) {
        a = rl_admit_equal(w, op->nwin, op->equal_cost, op->ncosts);
        sum = a * op->equal_cost;
    } else {
        for (j = 0; j < op->ncosts; j++)
            if (rl_admit_one(w, op->nwin, op->costs[j])) {
                a++;
                sum += op->costs[j];
            }
    }
    op->admitted = a;
    if (sum == 0)
        return 0; /* refusals create nothing */
    for (j = 0; j < op->nwin; j++) {
        val[j] = rl_admit_added(&w[j], now);
        exp[j] = op->win[j].expire_at_ms;
        if (op->win[j].algo == RL_ALGO_GCRA) {
            /* The TAT, plus the grace (expire_at_ms), rounded up. */
            exp[j] += (val[j] + 999) / 1000;
            exp[j] += GCRA_GROUP_MS - exp[j] % GCRA_GROUP_MS;
            if (val[j] > INT64_MAX)
                return RL_ESTORE;
        } else if (op->win[j].algo == RL_ALGO_SLIDING_LOG) {
            /* now + W + the grace (expire_at_ms), rounded up; the log's
             * sum stays below its limit, at most RL_SWL_LIMIT_MAX */
            exp[j] += GCRA_GROUP_MS - exp[j] % GCRA_GROUP_MS;
            need += log_growth(e[j], now);
        } else if (e[j] != NULL &&
                   (val[j] > INT64_MAX ||
                    e[j]->count > INT64_MAX - (int64_t)val[j])) {
            /* Redis refuses to overflow a counter; so do we. */
            return RL_ESTORE;
        }
        if (e[j] == NULL)
            need += ent_cost(klen[j]);
    }
    /* New counters must fit under the cap, with the growth of the group
     * array they may cause. */
    if (need > 0) {
        if (m->ngroups + op->nwin > m->groups_cap)
            need += (m->groups_cap ? m->groups_cap : GROUPS_MIN) *
                    sizeof(group_t);
        if (st->mem_full || st->mem_bytes + need > st->mem_max)
            return refuse(m);
    }
    /* Every new counter first, at 0, so that an allocation failure leaves
     * every count as it was (a counter at 0 decides as a missing one);
     * only then the admitted cost on every window. */
    for (j = 0; j < op->nwin; j++) {
        if (e[j] == NULL &&
            create(m, keys[j], klen[j], h[j], exp[j], &e[j]) != 0)
            return RL_ENOMEM;
        if (op->win[j].algo == RL_ALGO_SLIDING_LOG && log_reserve(m, e[j]) != 0)
            return RL_ENOMEM;
    }
    for (j = 0; j < op->nwin; j++) {
        if (op->win[j].algo == RL_ALGO_SLIDING_LOG) {
            log_append(e[j], now, val[j]);
            if (exp[j] > e[j]->until)
                e[j]->until = exp[j]; /* the sweep files it again */
        } else if (op->win[j].algo == RL_ALGO_GCRA) {
            e[j]->count = (int64_t)val[j];
            if (exp[j] > e[j]->until)
                e[j]->until = exp[j]; /* the sweep files it again */
        } else {
            e[j]->count += (int64_t)val[j];
        }
    }
    return 0;
}

static void m_submit(rls_store_t *s, rls_op_t *ops, size_t n,
                     rls_store_cb cb, void *data)
{
    mstore_t *m = (mstore_t *)s;
    size_t i;

    s->stats.batches++;
    s->stats.ops += n;
    /* An op that fails (overflow, full) fails alone, with its own err, as
     * in the Redis store: the others were counted and must be decided. */
    for (i = 0; i < n; i++)
        ops[i].err = apply(m, &ops[i]);
    cb(data, ops, n, 0);
}

static void ent_free_data(ent_t *e)
{
    if (e->kind == ENT_LEASES || e->kind == ENT_SETTLED)
        free(e->leases);
    else
        free(e->log);
}

static void free_ent(mstore_t *m, ent_t *e)
{
    *e->hprev = e->hnext;
    if (e->hnext)
        e->hnext->hprev = e->hprev;
    m->base.stats.mem_bytes -= ent_cost(e->klen);
    if (e->kind == ENT_LEASES || e->kind == ENT_SETTLED)
        m->base.stats.mem_bytes -= lease_cost(e->leases->cap);
    else if (e->log != NULL)
        m->base.stats.mem_bytes -= log_cost(e->log->cap);
    ent_free_data(e);
    free(e);
    m->count--;
    m->freed_since_trim++;
}

/* Files e in the group of its own expiry (e->until, later than the first
 * group's, which it just left). Returns 0 or RL_ENOMEM. */
static int refile(mstore_t *m, ent_t *e)
{
    size_t pos = group_pos(m, e->until);

    if ((pos == m->ngroups || m->groups[pos].expire_at_ms != e->until) &&
        group_insert(m, pos, e->until) != 0)
        return RL_ENOMEM;
    e->enext = m->groups[pos].head;
    m->groups[pos].head = e;
    return 0;
}

/* Frees up to SWEEP_BUDGET counters that expired by now (or files again
 * those whose expiry moved on); returns how many it looked at. */
static size_t sweep(mstore_t *m, uint64_t now)
{
    size_t budget = SWEEP_BUDGET;

    while (m->ngroups > 0 && m->groups[0].expire_at_ms <= now && budget) {
        while (m->groups[0].head != NULL && budget) {
            ent_t *e = m->groups[0].head;
            m->groups[0].head = e->enext;
            budget--;
            if (e->until <= now || refile(m, e) != 0)
                free_ent(m, e);
        }
        if (m->groups[0].head == NULL) {
            m->ngroups--;
            memmove(&m->groups[0], &m->groups[1],
                    m->ngroups * sizeof(*m->groups));
        }
    }

    /* Give memory back as windows end: shrink a sparse table, and ask
     * malloc to return freed pages once a lot was freed. */
    if (m->mask + 1 > TABLE_MIN && m->count < (m->mask + 1) / 8) {
        size_t nb = m->mask + 1;
        while (nb > TABLE_MIN && m->count < nb / 4)
            nb /= 2;
        resize(m, nb);
    }
    while (m->groups_cap > GROUPS_MIN && m->ngroups < m->groups_cap / 4 &&
           groups_resize(m, m->groups_cap / 2) == 0)
        ;
    if (m->freed_since_trim > 100000 && budget) {
        malloc_trim(0);
        m->freed_since_trim = 0;
    }
    check_recovered(m);
    warn_full(m);
    return SWEEP_BUDGET - budget;
}

static void on_sweep(uv_timer_t *timer)
{
    mstore_t *m = timer->data;

    /* More expired than one tick may free: come back at once. */
    if (sweep(m, m_now(&m->base)) == SWEEP_BUDGET)
        uv_timer_start(&m->sweep, on_sweep, 1, SWEEP_EVERY_MS);
}

size_t rls_store_memory_sweep(rls_store_t *s, uint64_t now_ms)
{
    return sweep((mstore_t *)s, now_ms);
}

void rls_store_memory_set_max(rls_store_t *s, uint64_t max_bytes)
{
    s->stats.mem_max = max_bytes;
    check_recovered((mstore_t *)s);
}

static void on_timer_closed(uv_handle_t *h)
{
    mstore_t *m = h->data;
    void (*done)(void *) = m->done;
    void *arg = m->done_arg;
    size_t i;

    for (i = 0; i < m->ngroups; i++) {
        ent_t *e = m->groups[i].head, *next;
        for (; e != NULL; e = next) {
            next = e->enext;
            ent_free_data(e);
            free(e);
        }
    }
    free(m->groups);
    free(m->table);
    free(m);
    if (done)
        done(arg);
}

static void m_close(rls_store_t *s, void (*done)(void *), void *arg)
{
    mstore_t *m = (mstore_t *)s;

    /* Nothing is ever in flight: submit answers before it returns. */
    m->done = done;
    m->done_arg = arg;
    uv_close((uv_handle_t *)&m->sweep, on_timer_closed);
}

/* ---- reservations and leases (store.h, RLS_XOP_*) ----------------------
 *
 * The same answers as store/reserve.lua, on entries of their own: a caller's
 * settled set "<key>:x" (its floor in the same entry) and a lease set
 * "<key>:c". Both expire and are swept as counters are, and count against
 * the budget: an operation that would need memory past it fails with RL_ENOMEM
 * and changes nothing. */

#define XOP_MAXN INT64_C(9007199254740991) /* as the script's doubles */
#define XOP_DELTA_MAX INT64_C(9999999999)

/* t rounded up to the next GCRA_GROUP_MS, as a group's time. */
static uint64_t group_time(uint64_t t)
{
    return t + GCRA_GROUP_MS - t % GCRA_GROUP_MS;
}

/* Moves e's expiry on to at (the sweep files it again), never back. */
static void ent_extend(ent_t *e, uint64_t at)
{
    if (at > e->until)
        e->until = at;
}

/* The key "<op key><suffix>" into dst, its hash into *h; its length. */
static size_t reserve_key(const mstore_t *m, const rls_reserve_op_t *x,
                          const char *sfx, size_t sl, char *dst, uint64_t *h)
{
    memcpy(dst, x->key, x->key_len);
    memcpy(dst + x->key_len, sfx, sl);
    dst[x->key_len + sl] = '\0';
    *h = rl_hash(&m->hk, dst, x->key_len + sl);
    return x->key_len + sl;
}

/* What a settle does to one window, decided before anything is written. */
typedef struct {
    ent_t *e;
    char key[OPKEY_MAX + 36];
    size_t klen;
    uint64_t h;
    int what;     /* 0 nothing, 1 set count, 2 append to a log, 3 refund a
                     log */
    int64_t val;  /* 1: the new count or TAT; 2: the entry's time */
    uint64_t exp; /* 1 (gcra), 2: the expiry, a group's time */
} xplan_t;

/* Id's index in lease or settled set g, or -1. */
static int64_t lease_find(const mlease_t *g, uint64_t id)
{
    uint32_t i;

    for (i = 0; g != NULL && i < g->n; i++)
        if (g->e[2 * i] == id)
            return i;
    return -1;
}

/* Whether a settle of x may apply on the settled set g with floor (the
 * script's test): its end is after now and after the floor, and its id is
 * not in g. */
static int settled_fresh(const mlease_t *g, uint64_t floor,
                         const rls_reserve_op_t *x)
{
    return x->until_ms > x->now_ms && x->until_ms > floor &&
           lease_find(g, x->id) < 0;
}

/* Drops from g the pairs whose end is at or before now. */
static void pairs_prune(mlease_t *g, uint64_t now)
{
    uint32_t i;

    for (i = 0; g != NULL && i < g->n;) {
        if (g->e[2 * i + 1] <= now) {
            g->n--;
            g->e[2 * i] = g->e[2 * g->n];
            g->e[2 * i + 1] = g->e[2 * g->n + 1];
        } else {
            i++;
        }
    }
}

/* The most pairs a settled set of bound cap holds: past it, the script
 * trims down to cap (a sixteenth more, so that it trims once per cap / 16
 * settlements). */
static uint64_t settled_hi(uint64_t cap)
{
    return cap + cap / 16;
}

/* Adds (id, until) to settled set e, then, past settled_hi(cap), keeps
 * the cap latest ends (the script's ZADD, then ZREMRANGEBYRANK): the
 * earliest go, the new pair too if it is among them, and the floor
 * (e->count) rises to the latest end dropped. The set has room for one
 * more pair, or holds settled_hi(cap) (and then loses some before the new
 * pair goes in). */
static void settled_add(ent_t *e, const rls_reserve_op_t *x, uint64_t cap)
{
    mlease_t *g = e->leases;
    uint64_t gone;
    uint32_t i, lo;
    int in = 1; /* the new pair is still to go in */
    int trim = g->n + 1 > settled_hi(cap);

    while (trim && g->n + (uint32_t)in > cap && g->n > 0) {
        for (lo = 0, i = 1; i < g->n; i++)
            if (g->e[2 * i + 1] < g->e[2 * lo + 1])
                lo = i;
        if (in && x->until_ms < g->e[2 * lo + 1]) {
            gone = x->until_ms;
            in = 0;
        } else {
            gone = g->e[2 * lo + 1];
            g->n--;
            g->e[2 * lo] = g->e[2 * g->n];
            g->e[2 * lo + 1] = g->e[2 * g->n + 1];
        }
        if ((int64_t)gone > e->count)
            e->count = (int64_t)gone;
    }
    if (in) {
        g->e[2 * g->n] = x->id;
        g->e[2 * g->n + 1] = x->until_ms;
        g->n++;
    }
    ent_extend(e, group_time(x->until_ms));
}

static int settle_reservation(mstore_t *m, rls_reserve_op_t *x)
{
    char mk[OPKEY_MAX + 4];
    xplan_t p[RL_ADMIT_WINDOWS_MAX];
    rls_store_stats_t *st = &m->base.stats;
    uint64_t now = x->now_ms, nowus = now * 1000, mh, W;
    uint64_t cap = x->settled_max > 0 ? x->settled_max : 1;
    size_t mlen, need = 0, fresh = 0;
    int64_t d = x->delta;
    ent_t *me;
    mlease_t *sg;
    uint32_t j, i, gcap = 0;
    rls_op_t op = {0};

    if (cap > UINT32_MAX / 4)
        cap = UINT32_MAX / 4;
    mlen = reserve_key(m, x, ":x", 2, mk, &mh);
    me = find(m, mk, mlen, mh);
    if (me != NULL && me->kind != ENT_SETTLED)
        return RL_ESTORE; /* cannot be: no other key ends in ":x" */
    sg = me != NULL ? me->leases : NULL;
    if (!settled_fresh(
            sg, me != NULL && me->count > 0 ? (uint64_t)me->count : 0, x))
        return 0; /* settled, or it may have been */
    /* Room for one more pair: a new set, or one grown (never past what
     * cap needs), unless it is full and trims. */
    if (sg == NULL)
        gcap = LEASE_CAP_MIN;
    else if (sg->n == sg->cap && sg->n < settled_hi(cap))
        gcap = 2 * sg->cap < settled_hi(cap) ? 2 * sg->cap
                                             : (uint32_t)settled_hi(cap);

    op.key = x->key;
    op.key_len = x->key_len;
    op.tag_len = x->tag_len;
    for (j = 0; j < x->nwin; j++) {
        const rls_op_window_t *w = &x->win[j];
        xplan_t *q = &p[j];
        ent_t *e;
        q->klen = rls_wkey(&op, w, RLS_WKEY_CUR, q->key);
        q->h = rl_hash(&m->hk, q->key, q->klen);
        q->e = e = find(m, q->key, q->klen, q->h);
        q->what = 0;
        W = (uint64_t)w->window_s * 1000;
        if (w->algo == RL_ALGO_GCRA) {
            int64_t v = e != NULL ? e->count : 0;
            double nt = -1;
            if (d > 0) {
                nt = (double)(e != NULL && v > (int64_t)nowus ? (uint64_t)v
                                                              : nowus) +
                     (double)d * (double)w->t_us;
                if (nt > (double)XOP_MAXN)
                    return RL_ESTORE;
            } else if (d < 0 && e != NULL && v > (int64_t)nowus) {
                nt = (double)v + (double)d * (double)w->t_us;
                if (nt < (double)nowus)
                    nt = (double)nowus;
            }
            if (nt >= 0) {
                q->what = 1;
                q->val = (int64_t)nt;
                q->exp = group_time(((uint64_t)q->val + 999) / 1000 +
                                    w->expire_at_ms);
                if (e == NULL)
                    need += ent_cost(q->klen), fresh++;
            }
        } else if (w->algo == RL_ALGO_SLIDING_LOG) {
            const mlog_t *g = e != NULL ? e->log : NULL;
            if (d > 0) {
                uint64_t t = now;
                if (g != NULL && g->n && log_at(g, g->n - 1)[0] > t)
                    t = log_at(g, g->n - 1)[0];
                q->what = 2;
                q->val = (int64_t)t;
                q->exp = w->expire_at_ms +
                         (now > x->decided_at_ms ? now - x->decided_at_ms : 0);
                q->exp = group_time(q->exp);
                need += log_growth(e, t);
                if (e == NULL)
                    need += ent_cost(q->klen), fresh++;
            } else if (d < 0 && g != NULL && g->n &&
                       x->decided_at_ms + W > now) {
                q->what = 3;
            }
        } else if (e != NULL && e->count > 0 && d != 0) {
            /* A counter at 0 is none (the script's batches may remove
             * it), so it takes no excess. */
            int64_t v = e->count, nv = v + d;
            if (nv < 0)
                nv = 0;
            if (nv > XOP_MAXN)
                return RL_ESTORE;
            q->what = 1;
            q->val = nv;
            q->exp = 0;
        }
    }
    if (me == NULL)
        need += ent_cost(mlen) + lease_cost(gcap), fresh++;
    else if (gcap > 0)
        need += lease_cost(gcap) - lease_cost(sg->cap);
    if (need > 0) {
        if (m->ngroups + fresh > m->groups_cap)
            need +=
                (m->groups_cap ? m->groups_cap : GROUPS_MIN) * sizeof(group_t);
        if (st->mem_full || st->mem_bytes + need > st->mem_max)
            return refuse(m);
    }
    /* New entries first (a counter at 0, an empty log, decide as none),
     * then the settled set's room: a failure before the windows change
     * leaves the settle undone. */
    for (j = 0; j < x->nwin; j++) {
        xplan_t *q = &p[j];
        if ((q->what == 1 || q->what == 2) && q->e == NULL &&
            create(m, q->key, q->klen, q->h, q->exp, &q->e) != 0)
            return RL_ENOMEM;
        if (q->what == 2 && log_reserve(m, q->e) != 0)
            return RL_ENOMEM;
    }
    if (gcap > 0) {
        uint32_t old = sg != NULL ? sg->cap : 0;
        mlease_t *ng = realloc(sg, sizeof(*ng) + (size_t)gcap * 16);
        if (ng == NULL)
            return RL_ENOMEM;
        if (sg == NULL)
            ng->n = 0;
        ng->cap = gcap;
        sg = ng;
        if (me != NULL) {
            st->mem_bytes += lease_cost(gcap) - lease_cost(old);
            me->leases = sg;
        }
    }
    if (me == NULL) {
        if (create(m, mk, mlen, mh, group_time(x->until_ms), &me) != 0) {
            free(sg);
            return RL_ENOMEM;
        }
        st->mem_bytes += lease_cost(sg->cap);
        me->kind = ENT_SETTLED;
        me->leases = sg;
    }
    settled_add(me, x, cap);
    for (j = 0; j < x->nwin; j++) {
        xplan_t *q = &p[j];
        if (q->what == 1) {
            q->e->count = q->val;
            if (q->exp)
                ent_extend(q->e, q->exp);
        } else if (q->what == 2) {
            log_append(q->e, (uint64_t)q->val, (uint64_t)d);
            ent_extend(q->e, q->exp);
        } else if (q->what == 3) {
            mlog_t *g = q->e->log;
            uint64_t want = (uint64_t)-d, taken = 0;
            for (i = g->n; i-- > 0 && want > 0;) {
                uint64_t *en = log_at(g, i), tk;
                if (en[0] < x->decided_at_ms)
                    break;
                if (en[0] > x->decided_at_ms)
                    continue;
                tk = en[1] < want ? en[1] : want;
                en[1] -= tk;
                want -= tk;
                taken += tk;
            }
            q->e->count -= (int64_t)taken;
            if (q->e->count < 0)
                q->e->count = 0;
        }
    }
    x->result = 1;
    return 0;
}

static int lease_op(mstore_t *m, rls_reserve_op_t *x)
{
    char key[OPKEY_MAX + 4];
    rls_store_stats_t *st = &m->base.stats;
    uint64_t h, now = x->now_ms, latest = 0;
    size_t klen = reserve_key(m, x, ":c", 2, key, &h);
    ent_t *e = find(m, key, klen, h);
    mlease_t *g = e != NULL ? e->leases : NULL;
    int64_t at;
    uint32_t i;

    if (e != NULL && e->kind != ENT_LEASES)
        return RL_ESTORE; /* cannot be: no other key ends in ":c" */
    /* Leases that ended are gone. */
    pairs_prune(g, now);
    at = lease_find(g, x->id);
    if (x->kind == RLS_XOP_ACQUIRE) {
        uint64_t n = g != NULL ? g->n : 0;
        if (at < 0 && n >= x->limit) {
            x->earliest_ms = UINT64_MAX;
            for (i = 0; i < n; i++)
                if (g->e[2 * i + 1] < x->earliest_ms)
                    x->earliest_ms = g->e[2 * i + 1];
            if (n == 0)
                x->earliest_ms = 0;
        } else if (at < 0) {
            /* A new lease: room for it, and for the set when new. */
            size_t need = 0;
            uint32_t cap = g == NULL       ? LEASE_CAP_MIN
                           : g->n < g->cap ? g->cap
                                           : 2 * g->cap;
            if (g == NULL)
                need = ent_cost(klen) + lease_cost(cap) +
                       (m->ngroups + 1 > m->groups_cap
                            ? (m->groups_cap ? m->groups_cap : GROUPS_MIN) *
                                  sizeof(group_t)
                            : 0);
            else if (cap != g->cap)
                need = lease_cost(cap) - lease_cost(g->cap);
            if (need > 0 &&
                (st->mem_full || st->mem_bytes + need > st->mem_max))
                return refuse(m);
            if (g == NULL || cap != g->cap) {
                uint32_t old = g != NULL ? g->cap : 0;
                mlease_t *ng = realloc(g, sizeof(*ng) + (size_t)cap * 16);
                if (ng == NULL)
                    return RL_ENOMEM;
                if (g == NULL)
                    ng->n = 0;
                ng->cap = cap;
                g = ng;
                if (e != NULL) {
                    st->mem_bytes += lease_cost(cap) - lease_cost(old);
                    e->leases = g;
                }
            }
            if (e == NULL) {
                if (create(m, key, klen, h, group_time(x->until_ms), &e) != 0) {
                    free(g);
                    return RL_ENOMEM;
                }
                st->mem_bytes += lease_cost(cap);
                e->kind = ENT_LEASES;
                e->leases = g;
            }
            g->e[2 * g->n] = x->id;
            g->e[2 * g->n + 1] = x->until_ms;
            g->n++;
            x->result = 1;
        } else {
            g->e[2 * at + 1] = x->until_ms;
            x->result = 1;
        }
    } else if (x->kind == RLS_XOP_RELEASE && at >= 0) {
        g->n--;
        g->e[2 * at] = g->e[2 * g->n];
        g->e[2 * at + 1] = g->e[2 * g->n + 1];
        x->result = 1;
    } else if (x->kind == RLS_XOP_RENEW && at >= 0) {
        g->e[2 * at + 1] = x->until_ms;
        x->result = 1;
    }
    x->count = g != NULL ? g->n : 0;
    for (i = 0; g != NULL && i < g->n; i++)
        if (g->e[2 * i + 1] > latest)
            latest = g->e[2 * i + 1];
    if (e != NULL && latest > 0)
        ent_extend(e, group_time(latest));
    return 0;
}

/* Runs x at once (store.h, rls_store_reserve; x was checked there). */
static void m_reserve_op(rls_store_t *s, rls_reserve_op_t *x,
                         rls_reserve_op_cb cb, void *data)
{
    mstore_t *m = (mstore_t *)s;

    x->result = 0;
    x->count = 0;
    x->earliest_ms = 0;
    if (x->key_len > OPKEY_MAX || x->nwin > RL_ADMIT_WINDOWS_MAX ||
        x->delta > XOP_DELTA_MAX || x->delta < -XOP_DELTA_MAX)
        x->err = RL_ESTORE;
    else if (x->kind == RLS_XOP_SETTLE)
        x->err = settle_reservation(m, x);
    else
        x->err = lease_op(m, x);
    if (x->err != 0) {
        x->result = 0;
        x->count = 0;
        x->earliest_ms = 0;
    }
    cb(data, x);
}

static const rls_store_vtbl_t memory_vtbl = {
    m_submit, m_now, m_up, m_close, NULL, NULL, m_reserve_op};

rls_store_t *rls_store_memory_new(uv_loop_t *loop)
{
    mstore_t *m = calloc(1, sizeof(*m));

    if (m == NULL)
        return NULL;
    m->table = calloc(TABLE_MIN, sizeof(*m->table));
    if (m->table == NULL) {
        free(m);
        return NULL;
    }
    m->mask = TABLE_MIN - 1;
    m->base.v = &memory_vtbl;
    m->base.stats.mem_bytes = sizeof(*m) + TABLE_MIN * sizeof(*m->table);
    m->base.stats.mem_max = RLS_MEMORY_MAX_DEFAULT;
    rls_random_key(&m->hk);
    uv_timer_init(loop, &m->sweep);
    m->sweep.data = m;
    uv_timer_start(&m->sweep, on_sweep, SWEEP_EVERY_MS, SWEEP_EVERY_MS);
    /* The sweep timer must not keep a loop alive on its own. */
    uv_unref((uv_handle_t *)&m->sweep);
    return &m->base;
}
