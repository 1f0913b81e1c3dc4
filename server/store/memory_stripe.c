/* One stripe of the memory store's table (memory_tab.h): counters with the
 * same semantics as Redis: add, then report; every counter expires at the
 * time it was given.
 *
 * Counters live in a chained hash table (keyed SipHash). They are also
 * grouped by expiry time: all counters of one window of one size expire
 * together, so there are only a few groups, kept sorted in an array. The
 * table's sweep frees whole groups as their time passes, a bounded number
 * of counters per tick so a million expiring keys never stall a loop; the
 * hash table shrinks again when it empties, so memory tracks the live
 * windows.
 *
 * Memory is bounded: the bytes held by counters, the hash table and the
 * groups are counted as malloc holds them, and a new counter that would
 * pass the stripe's share of the cap is refused, its op alone failing with
 * RL_ENOMEM so the batcher answers it by the fail mode. Counters that
 * exist keep counting: they need no memory. Once full, the stripe refuses
 * new counters until expiry brings it below a low-water mark (7/8 of its
 * share), so that it does not flap between full and not at every key.
 *
 * Nothing here locks: the caller holds the stripe's lock (memory.c). */
#include <stdlib.h>
#include <string.h>

#include "rl_admit.h"
#include "rl_error.h"
#include "rl_hash.h"
#include "base/util.h"
#include "store/memory_tab.h"
#include "store/store.h"

#define LOG_CAP_MIN 4

static int resize(rls_mem_stripe_t *m, size_t nbuckets)
{
    rls_mem_ent_t **nt = calloc(nbuckets, sizeof(*nt));
    size_t i;

    if (nt == NULL)
        return RL_ENOMEM;
    for (i = 0; i <= m->mask; i++) {
        rls_mem_ent_t *e = m->table[i], *next;
        for (; e != NULL; e = next) {
            rls_mem_ent_t **head = &nt[e->hash & (nbuckets - 1)];
            next = e->hnext;
            e->hnext = *head;
            if (*head)
                (*head)->hprev = &e->hnext;
            e->hprev = head;
            *head = e;
        }
    }
    free(m->table);
    m->bytes -= (m->mask + 1) * sizeof(*m->table);
    m->bytes += nbuckets * sizeof(*nt);
    m->table = nt;
    m->mask = nbuckets - 1;
    return 0;
}

/* What malloc holds for an entry with a key of klen bytes (glibc: the
 * request plus an 8-byte header, rounded up to 16, at least 32). */
size_t rls_mem_ent_cost(size_t klen)
{
    size_t n = (sizeof(rls_mem_ent_t) + klen + 8 + 15) & ~(size_t)15;

    return n < 32 ? 32 : n;
}

/* What malloc holds for a lease set of cap leases. */
size_t rls_mem_lease_cost(uint32_t cap)
{
    size_t n =
        (sizeof(rls_mem_lease_t) + (size_t)cap * 16 + 8 + 15) & ~(size_t)15;

    return cap ? n : 0;
}

/* What malloc holds for a log of cap entries. */
static size_t log_cost(uint32_t cap)
{
    size_t n =
        (sizeof(rls_mem_log_t) + (size_t)cap * 16 + 8 + 15) & ~(size_t)15;

    return cap ? n : 0;
}

/* Drops the entries that left the window by now from e's log and its
 * sum. */
static void log_prune(rls_mem_ent_t *e, uint64_t now, uint64_t W)
{
    rls_mem_log_t *g = e->log;

    while (g != NULL && g->n > 0 && rls_mem_log_at(g, 0)[0] + W <= now) {
        e->count -= (int64_t)rls_mem_log_at(g, 0)[1];
        g->head = (g->head + 1) % g->cap;
        g->n--;
    }
    if (e->count < 0)
        e->count = 0;
}

/* Reports e's log (NULL: none) as store.h says, for an op whose largest
 * cost is cmax. */
static void log_report(const rls_mem_ent_t *e, rls_op_window_t *wo,
                       uint64_t cmax)
{
    const rls_mem_log_t *g = e != NULL ? e->log : NULL;
    uint64_t sum = e != NULL && e->count > 0 ? (uint64_t)e->count : 0;
    uint64_t needed = (sum > wo->limit ? sum - wo->limit : 0) + cmax, acc = 0;
    uint32_t i;

    wo->before = (int64_t)sum;
    wo->before2 =
        g != NULL && g->n ? (int64_t)rls_mem_log_at(g, g->n - 1)[0] : 0;
    wo->nold = 0;
    for (i = 0; g != NULL && i < g->n && i < RL_SWL_PREFIX && acc < needed;
         i++) {
        wo->old_t[i] = rls_mem_log_at(g, i)[0];
        wo->old_c[i] = rls_mem_log_at(g, i)[1];
        acc += wo->old_c[i];
        wo->nold = i + 1;
    }
}

/* Room in e's log for one more entry: a new log, or one twice the size.
 * The caller checked the budget (log_growth). Returns 0 or RL_ENOMEM. */
int rls_mem_log_reserve(rls_mem_stripe_t *m, rls_mem_ent_t *e)
{
    rls_mem_log_t *g = e->log, *ng;
    uint32_t cap = g ? 2 * g->cap : LOG_CAP_MIN, i;

    if (g != NULL && g->n < g->cap)
        return 0;
    if ((ng = malloc(sizeof(*ng) + (size_t)cap * 16)) == NULL)
        return RL_ENOMEM;
    ng->head = 0;
    ng->cap = cap;
    ng->n = g ? g->n : 0;
    for (i = 0; i < ng->n; i++) {
        ng->e[2 * i] = rls_mem_log_at(g, i)[0];
        ng->e[2 * i + 1] = rls_mem_log_at(g, i)[1];
    }
    m->bytes += log_cost(cap) - (g ? log_cost(g->cap) : 0);
    free(g);
    e->log = ng;
    return 0;
}

/* Bytes appending to e's log (NULL: a new entry) at now may take. */
size_t rls_mem_log_growth(const rls_mem_ent_t *e, uint64_t now)
{
    const rls_mem_log_t *g = e != NULL ? e->log : NULL;

    if (g == NULL)
        return log_cost(LOG_CAP_MIN);
    if (g->n < g->cap || (g->n && rls_mem_log_at(g, g->n - 1)[0] == now))
        return 0;
    return log_cost(2 * g->cap) - log_cost(g->cap);
}

/* Appends (now, cost) to e's log (room reserved), or adds cost to its
 * newest entry when that is at now. */
void rls_mem_log_append(rls_mem_ent_t *e, uint64_t now, uint64_t cost)
{
    rls_mem_log_t *g = e->log;

    if (g->n && rls_mem_log_at(g, g->n - 1)[0] == now) {
        rls_mem_log_at(g, g->n - 1)[1] += cost;
    } else {
        uint64_t *x = rls_mem_log_at(g, g->n);
        x[0] = now;
        x[1] = cost;
        g->n++;
    }
    e->count += (int64_t)cost;
}

/* Where the group for an expiry time is, or would be inserted. */
static size_t group_pos(const rls_mem_stripe_t *m, uint64_t at)
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
static int groups_resize(rls_mem_stripe_t *m, size_t ncap)
{
    rls_mem_group_t *ng = realloc(m->groups, ncap * sizeof(*ng));

    if (ng == NULL)
        return RL_ENOMEM;
    m->bytes -= m->groups_cap * sizeof(*ng);
    m->bytes += ncap * sizeof(*ng);
    m->groups = ng;
    m->groups_cap = ncap;
    return 0;
}

/* Inserts an empty group for `at` at pos (from group_pos). Returns 0 or
 * RL_ENOMEM. */
static int group_insert(rls_mem_stripe_t *m, size_t pos, uint64_t at)
{
    if (m->ngroups == m->groups_cap &&
        groups_resize(m, m->groups_cap ? 2 * m->groups_cap
                                       : RLS_MEM_GROUPS_MIN) != 0)
        return RL_ENOMEM;
    memmove(&m->groups[pos + 1], &m->groups[pos],
            (m->ngroups - pos) * sizeof(*m->groups));
    m->ngroups++;
    m->groups[pos].expire_at_ms = at;
    m->groups[pos].head = NULL;
    return 0;
}

rls_mem_ent_t *rls_mem_find(rls_mem_stripe_t *m, const char *key, size_t len,
                            uint64_t h)
{
    rls_mem_ent_t *e;

    for (e = m->table[h & m->mask]; e != NULL; e = e->hnext)
        if (e->hash == h && e->klen == len && memcmp(e->key, key, len) == 0)
            return e;
    return NULL;
}

int rls_mem_create(rls_mem_stripe_t *m, const char *key, size_t len, uint64_t h,
                   uint64_t at, rls_mem_ent_t **out)
{
    rls_mem_ent_t **head = &m->table[h & m->mask], *e;
    size_t pos = group_pos(m, at), grow;
    rls_mem_group_t *g;

    if ((pos == m->ngroups || m->groups[pos].expire_at_ms != at) &&
        group_insert(m, pos, at) != 0)
        return RL_ENOMEM;
    g = &m->groups[pos];
    if ((e = malloc(sizeof(*e) + len)) == NULL)
        return RL_ENOMEM; /* an empty group is freed by the sweep */
    m->bytes += rls_mem_ent_cost(len);
    e->hash = h;
    e->count = 0;
    e->until = at;
    e->log = NULL;
    e->klen = (uint32_t)len;
    e->kind = RLS_MEM_COUNTER;
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
    if (++m->count > m->mask + 1 && m->bytes + grow <= m->share)
        resize(m, 2 * (m->mask + 1));
    return 0;
}

int rls_mem_fits(rls_mem_stripe_t *m, size_t need, size_t fresh)
{
    if (need == 0)
        return 1;
    /* The growth of the group array new entries may cause. */
    if (m->ngroups + fresh > m->groups_cap)
        need += (m->groups_cap ? m->groups_cap : RLS_MEM_GROUPS_MIN) *
                sizeof(rls_mem_group_t);
    if (!m->full && m->bytes + need <= m->share)
        return 1;
    rls_memtab_refused(m->t, m);
    return 0;
}

/* Leaves the full state once expiry brought the stripe below its
 * low-water mark. */
static void check_recovered(rls_mem_stripe_t *m)
{
    if (m->full && m->bytes <= m->share - m->share / 8) {
        m->full = 0;
        rls_memtab_recovered(m->t, m);
    }
}

void rls_mem_stripe_set_share(rls_mem_stripe_t *m, uint64_t share)
{
    m->share = share;
    check_recovered(m);
}

/* The time a log entry made at now is stamped with: now, or the log's
 * newest entry's time when that is later (another loop's batch of a
 * later instant came first), so that the log stays in time order. */
static uint64_t log_time(const rls_mem_ent_t *e, uint64_t now)
{
    const rls_mem_log_t *g = e != NULL ? e->log : NULL;
    uint64_t t = g != NULL && g->n ? rls_mem_log_at(g, g->n - 1)[0] : 0;

    return t > now ? t : now;
}

/* Decides an op as the Redis script does (store.h): the limits' state, the
 * admissions in arrival order, then the admitted cost added to every
 * window (a gcra: its new TAT). All or nothing: an op that cannot be
 * applied whole (a counter would overflow, the store is full) changes
 * nothing and fails alone. */
int rls_mem_stripe_apply(rls_mem_stripe_t *m, rls_op_t *op, uint64_t now)
{
    rls_mem_stripe_t *ms[RL_ADMIT_WINDOWS_MAX];
    uint32_t j;

    if (op->nwin == 0 || op->nwin > RL_ADMIT_WINDOWS_MAX)
        return RL_EINVAL;
    for (j = 0; j < op->nwin; j++)
        ms[j] = m;
    return rls_mem_stripes_apply(ms, op, now);
}

int rls_mem_stripes_apply(rls_mem_stripe_t *const *ms, rls_op_t *op,
                          uint64_t now)
{
    char keys[RL_ADMIT_WINDOWS_MAX][RLS_MEM_OPKEY_MAX + 36],
        pk[RLS_MEM_OPKEY_MAX + 36];
    size_t klen[RL_ADMIT_WINDOWS_MAX], need = 0;
    uint64_t h[RL_ADMIT_WINDOWS_MAX], sum = 0, a = 0, cmax;
    uint64_t val[RL_ADMIT_WINDOWS_MAX], exp[RL_ADMIT_WINDOWS_MAX];
    rls_mem_ent_t *e[RL_ADMIT_WINDOWS_MAX];
    rl_admit_win_t w[RL_ADMIT_WINDOWS_MAX];
    size_t needs[RL_ADMIT_WINDOWS_MAX];
    uint32_t j, i;

    if (op->nwin == 0 || op->nwin > RL_ADMIT_WINDOWS_MAX ||
        rls_op_key_max(op) > RLS_MEM_OPKEY_MAX)
        return RL_EINVAL;
    cmax = rls_op_max_cost(op);
    for (j = 0; j < op->nwin; j++) {
        rls_op_window_t *wo = &op->win[j];
        klen[j] = rls_wkey(op, wo, RLS_WKEY_CUR, keys[j]);
        h[j] = rl_hash(&ms[j]->hk, keys[j], klen[j]);
        e[j] = rls_mem_find(ms[j], keys[j], klen[j], h[j]);
        wo->before = e[j] != NULL ? e[j]->count : 0;
        wo->before2 = 0;
        if (wo->algo == RL_ALGO_SLIDING_LOG) {
            /* What left the window is gone (it decides nothing). */
            if (e[j] != NULL)
                log_prune(e[j], now, (uint64_t)wo->window_s * 1000);
            log_report(e[j], wo, cmax);
        } else if (wo->algo == RL_ALGO_SLIDING_COUNTER) {
            size_t pl = rls_wkey(op, wo, RLS_WKEY_PREV, pk);
            rls_mem_ent_t *p =
                rls_mem_find(ms[j], pk, pl, rl_hash(&ms[j]->hk, pk, pl));
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
        need = 0;
        val[j] = rl_admit_added(&w[j], now);
        exp[j] = op->win[j].expire_at_ms;
        if (op->win[j].algo == RL_ALGO_GCRA) {
            /* The TAT, plus the grace (expire_at_ms), rounded up. */
            exp[j] += (val[j] + 999) / 1000;
            exp[j] += RLS_MEM_GROUP_MS - exp[j] % RLS_MEM_GROUP_MS;
            if (val[j] > INT64_MAX)
                return RL_ESTORE;
        } else if (op->win[j].algo == RL_ALGO_SLIDING_LOG) {
            /* now + W + the grace (expire_at_ms), rounded up; the log's
             * sum stays below its limit, at most RL_SWL_LIMIT_MAX */
            exp[j] += RLS_MEM_GROUP_MS - exp[j] % RLS_MEM_GROUP_MS;
            need += rls_mem_log_growth(e[j], log_time(e[j], now));
        } else if (e[j] != NULL &&
                   (val[j] > INT64_MAX ||
                    e[j]->count > INT64_MAX - (int64_t)val[j])) {
            /* Redis refuses to overflow a counter; so do we. */
            return RL_ESTORE;
        }
        if (e[j] == NULL)
            need += rls_mem_ent_cost(klen[j]);
        needs[j] = need;
    }
    /* New counters must fit under the share, with the growth of the group
     * array they may cause: each stripe's (a group's levels may live in
     * several), before anything is written. */
    for (j = 0; j < op->nwin; j++) {
        uint32_t fresh = 0;
        for (i = 0, need = 0; i < op->nwin; i++)
            if (ms[i] == ms[j]) {
                if (i < j)
                    break; /* that stripe was checked */
                need += needs[i];
                fresh++;
            }
        if (i == op->nwin && !rls_mem_fits(ms[j], need, fresh))
            return RL_ENOMEM;
    }
    /* Every new counter first, at 0, so that an allocation failure leaves
     * every count as it was (a counter at 0 decides as a missing one);
     * only then the admitted cost on every window. */
    for (j = 0; j < op->nwin; j++) {
        if (e[j] == NULL &&
            rls_mem_create(ms[j], keys[j], klen[j], h[j], exp[j], &e[j]) != 0)
            return RL_ENOMEM;
        if (op->win[j].algo == RL_ALGO_SLIDING_LOG &&
            rls_mem_log_reserve(ms[j], e[j]) != 0)
            return RL_ENOMEM;
    }
    for (j = 0; j < op->nwin; j++) {
        if (op->win[j].algo == RL_ALGO_SLIDING_LOG) {
            rls_mem_log_append(e[j], log_time(e[j], now), val[j]);
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

static void ent_free_data(rls_mem_ent_t *e)
{
    if (e->kind == RLS_MEM_LEASES || e->kind == RLS_MEM_SETTLED)
        free(e->leases);
    else
        free(e->log);
}

static void free_ent(rls_mem_stripe_t *m, rls_mem_ent_t *e)
{
    *e->hprev = e->hnext;
    if (e->hnext)
        e->hnext->hprev = e->hprev;
    m->bytes -= rls_mem_ent_cost(e->klen);
    if (e->kind == RLS_MEM_LEASES || e->kind == RLS_MEM_SETTLED)
        m->bytes -= rls_mem_lease_cost(e->leases->cap);
    else if (e->log != NULL)
        m->bytes -= log_cost(e->log->cap);
    ent_free_data(e);
    free(e);
    m->count--;
    m->freed++;
}

/* Files e in the group of its own expiry (e->until, later than the first
 * group's, which it just left). Returns 0 or RL_ENOMEM. */
static int refile(rls_mem_stripe_t *m, rls_mem_ent_t *e)
{
    size_t pos = group_pos(m, e->until);

    if ((pos == m->ngroups || m->groups[pos].expire_at_ms != e->until) &&
        group_insert(m, pos, e->until) != 0)
        return RL_ENOMEM;
    e->enext = m->groups[pos].head;
    m->groups[pos].head = e;
    return 0;
}

size_t rls_mem_stripe_sweep(rls_mem_stripe_t *m, uint64_t now, size_t budget)
{
    size_t looked = 0;

    while (m->ngroups > 0 && m->groups[0].expire_at_ms <= now && budget) {
        while (m->groups[0].head != NULL && budget) {
            rls_mem_ent_t *e = m->groups[0].head;
            m->groups[0].head = e->enext;
            budget--;
            looked++;
            if (e->until <= now || refile(m, e) != 0)
                free_ent(m, e);
        }
        if (m->groups[0].head == NULL) {
            m->ngroups--;
            memmove(&m->groups[0], &m->groups[1],
                    m->ngroups * sizeof(*m->groups));
        }
    }

    /* Give memory back as windows end: shrink a sparse table (the table
     * asks malloc to return freed pages once a lot was freed). */
    if (m->mask + 1 > m->table_min && m->count < (m->mask + 1) / 8) {
        size_t nb = m->mask + 1;
        while (nb > m->table_min && m->count < nb / 4)
            nb /= 2;
        resize(m, nb);
    }
    while (m->groups_cap > RLS_MEM_GROUPS_MIN &&
           m->ngroups < m->groups_cap / 4 &&
           groups_resize(m, m->groups_cap / 2) == 0)
        ;
    check_recovered(m);
    return looked;
}

int rls_mem_stripe_init(rls_mem_stripe_t *m, rls_memtab_t *t, size_t table_min)
{
    m->table = calloc(table_min, sizeof(*m->table));
    if (m->table == NULL)
        return RL_ENOMEM;
    m->t = t;
    rls_random_key(&m->hk);
    m->mask = table_min - 1;
    m->count = 0;
    m->table_min = table_min;
    m->groups = NULL;
    m->ngroups = m->groups_cap = 0;
    m->bytes = table_min * sizeof(*m->table);
    m->told = 0;
    m->share = 0;
    m->freed = 0;
    m->full = 0;
    return 0;
}

void rls_mem_stripe_free(rls_mem_stripe_t *m)
{
    size_t i;

    for (i = 0; i < m->ngroups; i++) {
        rls_mem_ent_t *e = m->groups[i].head, *next;
        for (; e != NULL; e = next) {
            next = e->enext;
            ent_free_data(e);
            free(e);
        }
    }
    free(m->groups);
    free(m->table);
    m->groups = NULL;
    m->table = NULL;
}
