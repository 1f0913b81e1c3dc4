/* The threshold study's simulation (fit_sim.h). */
#include "fit_sim.h"

#include <stdlib.h>
#include <string.h>

#include "rl_error.h"
#include "rl_window.h"

/* A caller's record: this header, then the windows' indices (u64 each),
 * then one u64 state per candidate and window: fixed, the window's
 * counter; sliding-window-counter, the current counter in the low 32 bits
 * and the previous one in the high 32; gcra, the TAT in microseconds;
 * sliding window, a pointer to its log (slog_t, NULL when empty). */
typedef struct rec_s {
    uint64_t h;
    uint64_t pidx;  /* the period (window 0) holding use */
    uint64_t use;   /* cost in that period, refused or not */
    uint64_t peak;  /* most use in any closed period */
    uint64_t ever;  /* candidates that refused this caller */
    uint64_t pmask; /* candidates that refused it in this period */
} rec_t;

/* A sliding window's log, as the memory store keeps it
 * (server/store/memory.c, log_*): a ring of (ms, cost) entries, oldest
 * first, one per millisecond that admitted something, and their sum. Its
 * cap ms slots are followed by cap uint32 costs (an entry's cost is at
 * most the limit, below 2^32). */
typedef struct slog_s {
    uint64_t sum;
    uint32_t head, n, cap, pad;
    uint64_t ms[];
} slog_t;

_Static_assert(sizeof(slog_t *) <= sizeof(uint64_t),
               "a log's pointer fits a candidate's 8-byte state");

#define SLOG_CAP_MIN 4
#define SWEEP_MIN_BYTES (UINT64_C(64) << 20)

struct rlf_sim_s {
    rlf_sim_conf_t c;
    uint64_t lim[RLF_CAND_MAX][RL_ADMIT_WINDOWS_MAX];
    uint64_t t_us[RLF_CAND_MAX][RL_ADMIT_WINDOWS_MAX]; /* gcra */
    size_t rec_bytes;
    unsigned char *recs; /* count records, room for rcap */
    size_t count, rcap;
    uint32_t *index; /* record number + 1, or 0; icap a power of 2 */
    size_t icap;
    rlf_cand_stats_t st[RLF_CAND_MAX];
    rlf_sim_totals_t tot;
    uint32_t *peaks; /* sorted, after finish */
    uint64_t now;    /* the latest ms added */
    rlf_log_stats_t ls;
    uint64_t worst_rec; /* sliding window: the most log bytes per caller */
    uint64_t sweep_at;  /* sweep every log when their bytes pass this */
};

static size_t slog_bytes(uint32_t cap)
{
    return sizeof(slog_t) + (size_t)cap * RLF_LOG_ENTRY_BYTES;
}

static uint64_t *slog_ms(slog_t *g, uint32_t i)
{
    return &g->ms[(g->head + i) % g->cap];
}

static uint32_t *slog_cost(slog_t *g, uint32_t i)
{
    return (uint32_t *)(void *)(g->ms + g->cap) + (g->head + i) % g->cap;
}

size_t rlf_sim_rec_bytes(const rlf_sim_conf_t *conf)
{
    return sizeof(rec_t) + 8 * conf->nwin + 8 * conf->nwin * conf->ncand;
}

static rec_t *rec_at(const rlf_sim_t *s, size_t i)
{
    return (rec_t *)(void *)(s->recs + i * s->rec_bytes);
}

static uint64_t *widx_of(rec_t *r)
{
    return (uint64_t *)(void *)(r + 1);
}

static uint64_t *slots_of(const rlf_sim_t *s, rec_t *r)
{
    return widx_of(r) + s->c.nwin;
}

static slog_t **logs_of(const rlf_sim_t *s, rec_t *r)
{
    return (slog_t **)(void *)slots_of(s, r);
}

/* Moves *gp's entries to a log of cap slots (cap >= n; 0 frees it).
 * Returns 0 or RL_ENOMEM (*gp unchanged). */
static int slog_resize(rlf_sim_t *s, slog_t **gp, uint32_t cap)
{
    slog_t *g = *gp, *ng = NULL;
    uint32_t i, n = g ? g->n : 0;

    if (cap && (ng = malloc(slog_bytes(cap))) == NULL)
        return RL_ENOMEM;
    if (ng != NULL) {
        ng->sum = g ? g->sum : 0;
        ng->head = 0;
        ng->n = n;
        ng->cap = cap;
        ng->pad = 0;
        for (i = 0; i < n; i++) {
            *slog_ms(ng, i) = *slog_ms(g, i);
            *slog_cost(ng, i) = *slog_cost(g, i);
        }
        s->ls.bytes += slog_bytes(cap);
    }
    if (g != NULL)
        s->ls.bytes -= slog_bytes(g->cap);
    if (s->ls.bytes > s->ls.peak_bytes)
        s->ls.peak_bytes = s->ls.bytes;
    free(g);
    *gp = ng;
    return 0;
}

/* Drops the entries that left the window (W ms) by now, as the memory
 * store's log_prune does; an empty log is freed and a mostly empty one
 * halved, so a log holds at most about 4 slots per entry in the window. */
static void slog_prune(rlf_sim_t *s, slog_t **gp, uint64_t now, uint64_t W)
{
    slog_t *g = *gp;

    while (g != NULL && g->n > 0 && *slog_ms(g, 0) + W <= now) {
        g->sum -= *slog_cost(g, 0);
        g->head = (g->head + 1) % g->cap;
        g->n--;
        s->ls.entries--;
    }
    if (g != NULL && g->n == 0)
        slog_resize(s, gp, 0);
    else if (g != NULL && g->cap > SLOG_CAP_MIN && g->n <= g->cap / 4)
        slog_resize(s, gp, g->cap / 2); /* on failure it stays as it is */
}

/* Prunes every caller's logs at the latest time. */
static void sweep(rlf_sim_t *s)
{
    size_t i, j, k, nw = s->c.nwin;

    for (i = 0; i < s->count; i++) {
        slog_t **lg = logs_of(s, rec_at(s, i));
        for (k = 0; k < s->c.ncand; k++)
            for (j = 0; j < nw; j++)
                slog_prune(s, &lg[k * nw + j], s->now,
                           (uint64_t)s->c.window_s[j] * 1000);
    }
    s->sweep_at =
        2 * s->ls.bytes > SWEEP_MIN_BYTES ? 2 * s->ls.bytes : SWEEP_MIN_BYTES;
}

/* Adds cost admitted at now to *gp (pruned at now): to its newest entry
 * when that is at now, as the memory store's log_append does. Returns 0,
 * RL_ENOMEM or RLF_ELOG (the cap, even after a sweep). */
static int slog_append(rlf_sim_t *s, slog_t **gp, uint64_t now, uint64_t cost)
{
    slog_t *g = *gp;
    int rc;

    if (g == NULL || (g->n == g->cap && *slog_ms(g, g->n - 1) != now)) {
        uint32_t cap = g ? 2 * g->cap : SLOG_CAP_MIN;
        uint64_t grow = slog_bytes(cap) - (g ? slog_bytes(g->cap) : 0);
        if (s->ls.bytes + grow > s->c.max_log_bytes ||
            s->ls.bytes + grow > s->sweep_at) {
            sweep(s);
            g = *gp; /* still there: it is not empty, or NULL */
            if (s->ls.bytes + grow > s->c.max_log_bytes)
                return RLF_ELOG;
        }
        if ((rc = slog_resize(s, gp, cap)) != 0)
            return rc;
        g = *gp;
    }
    if (g->n && *slog_ms(g, g->n - 1) == now) {
        *slog_cost(g, g->n - 1) += (uint32_t)cost;
    } else {
        *slog_ms(g, g->n) = now;
        *slog_cost(g, g->n) = (uint32_t)cost;
        g->n++;
        s->ls.entries++;
    }
    g->sum += cost;
    return 0;
}

/* Loads limit w from the log *gp as the store reports it (store.c,
 * rls_op_window_load after memory.c's log_report): its sum, when its newest
 * entry leaves the window, and the oldest entries that cover what cost
 * needs to leave. */
static void slog_load(rl_admit_win_t *w, slog_t *g, uint64_t limit,
                      uint32_t window_s, uint64_t now, uint64_t cost)
{
    uint64_t W = (uint64_t)window_s * 1000, sum = g ? g->sum : 0;
    uint64_t needed = (sum > limit ? sum - limit : 0) + cost, acc = 0;
    uint64_t oms[RL_SWL_PREFIX], oc[RL_SWL_PREFIX], newest = 0;
    uint32_t i;

    if (g != NULL && g->n)
        newest = *slog_ms(g, g->n - 1) + W - now; /* pruned: > now */
    for (i = 0; g != NULL && i < g->n && i < RL_SWL_PREFIX && acc < needed;
         i++) {
        oms[i] = *slog_ms(g, i) + W - now;
        oc[i] = *slog_cost(g, i);
        acc += oc[i];
    }
    rl_admit_swl(w, limit, window_s, (int64_t)sum, newest, oms, oc, i);
}

int rlf_sim_new(rlf_sim_t **out, const rlf_sim_conf_t *conf, const char **why)
{
    rlf_sim_t *s;
    size_t i, j;

    if (conf->algo >= RL_ALGO_MAX) {
        *why = "the algorithm is fixed-window, sliding-window-counter, gcra "
               "or sliding-window";
        return RL_EINVAL;
    }
    if (conf->algo == RL_ALGO_SLIDING_LOG && conf->max_log_bytes == 0) {
        *why = "the sliding window's logs need a cap above 0";
        return RL_EINVAL;
    }
    if (conf->nwin == 0 || conf->nwin > RL_ADMIT_WINDOWS_MAX ||
        conf->ncand == 0 || conf->ncand > RLF_CAND_MAX) {
        *why = "1 to 8 windows and 1 to 64 thresholds";
        return RL_EINVAL;
    }
    if (conf->max_users == 0 || conf->max_users > UINT32_MAX / 2) {
        *why = "--max-users is 1 to 2^31-1";
        return RL_EINVAL;
    }
    if ((s = calloc(1, sizeof(*s))) == NULL)
        return RL_ENOMEM;
    s->c = *conf;
    s->rec_bytes = rlf_sim_rec_bytes(conf);
    for (i = 0; i < conf->ncand; i++) {
        if (conf->cand[i] == 0 ||
            (i > 0 && conf->cand[i] <= conf->cand[i - 1])) {
            *why = "thresholds are positive and ascending";
            free(s);
            return RL_EINVAL;
        }
        for (j = 0; j < conf->nwin; j++) {
            uint64_t lim = conf->cand[i] * conf->mult[j];
            if (conf->window_s[j] == 0 || conf->window_s[j] > RL_WINDOW_MAX_S ||
                conf->mult[j] == 0 || lim / conf->mult[j] != conf->cand[i] ||
                lim > UINT32_MAX) {
                *why = "a window is 1 s to 366 days, and a threshold times "
                       "its multiplier below 2^32";
                free(s);
                return RL_EINVAL;
            }
            if (conf->algo == RL_ALGO_SLIDING_LOG && lim > RL_SWL_LIMIT_MAX) {
                *why = "a sliding-window limit (threshold times multiplier) "
                       "is at most 1000000, as in the service";
                free(s);
                return RL_EINVAL;
            }
            s->lim[i][j] = lim;
            if (conf->algo == RL_ALGO_SLIDING_LOG) {
                uint32_t cap = SLOG_CAP_MIN; /* logs double from 4 */
                while (cap < lim)
                    cap *= 2;
                s->worst_rec += slog_bytes(cap);
            }
            if (conf->algo == RL_ALGO_GCRA) {
                s->t_us[i][j] = rl_gcra_interval_us(lim, conf->window_s[j]);
                if (s->t_us[i][j] == 0 ||
                    lim > RL_GCRA_CAP_MAX_US / s->t_us[i][j]) {
                    *why = "a gcra rate is at most 1 per microsecond";
                    free(s);
                    return RL_EINVAL;
                }
            }
        }
    }
    s->sweep_at = SWEEP_MIN_BYTES;
    *out = s;
    return 0;
}

/* The record's sliding-window logs, nwin x ncand of them. */
static slog_t **logs_of(const rlf_sim_t *s, rec_t *r);

void rlf_sim_free(rlf_sim_t *s)
{
    size_t i, k;

    if (s == NULL)
        return;
    for (i = 0; s->c.algo == RL_ALGO_SLIDING_LOG && i < s->count; i++)
        for (k = 0; k < s->c.nwin * s->c.ncand; k++)
            free(logs_of(s, rec_at(s, i))[k]);
    free(s->recs);
    free(s->index);
    free(s->peaks);
    free(s);
}

static int index_grow(rlf_sim_t *s)
{
    size_t ncap = s->icap ? 2 * s->icap : 1024, i, k;
    uint32_t *ni = calloc(ncap, sizeof(*ni));

    if (ni == NULL)
        return RL_ENOMEM;
    for (i = 0; i < s->count; i++) {
        for (k = rec_at(s, i)->h & (ncap - 1); ni[k]; k = (k + 1) & (ncap - 1))
            ;
        ni[k] = (uint32_t)i + 1;
    }
    free(s->index);
    s->index = ni;
    s->icap = ncap;
    return 0;
}

/* The caller's record, made when new (at ms). NULL with *err. */
static rec_t *lookup(rlf_sim_t *s, uint64_t h, uint64_t ms, int *err)
{
    size_t k, j;
    rec_t *r;

    if (s->icap) {
        for (k = h & (s->icap - 1); s->index[k]; k = (k + 1) & (s->icap - 1)) {
            r = rec_at(s, s->index[k] - 1);
            if (r->h == h)
                return r;
        }
    }
    if (s->count == s->c.max_users) {
        *err = RL_EFULL;
        return NULL;
    }
    if ((s->count + 1) * 4 > s->icap * 3) {
        if (index_grow(s) != 0) {
            *err = RL_ENOMEM;
            return NULL;
        }
    }
    if (s->count == s->rcap) {
        size_t ncap = s->rcap ? 2 * s->rcap : 1024;
        unsigned char *nr;
        if (ncap > s->c.max_users)
            ncap = s->c.max_users;
        if ((nr = realloc(s->recs, ncap * s->rec_bytes)) == NULL) {
            *err = RL_ENOMEM;
            return NULL;
        }
        s->recs = nr;
        s->rcap = ncap;
    }
    for (k = h & (s->icap - 1); s->index[k]; k = (k + 1) & (s->icap - 1))
        ;
    s->index[k] = (uint32_t)s->count + 1;
    r = rec_at(s, s->count++);
    memset(r, 0, s->rec_bytes);
    r->h = h;
    r->pidx = rl_window_index(ms, s->c.window_s[0]);
    for (j = 0; j < s->c.nwin; j++)
        widx_of(r)[j] = rl_window_index(ms, s->c.window_s[j]);
    s->tot.users++;
    return r;
}

static void period_close(rlf_sim_t *s, rec_t *r)
{
    uint64_t m = r->pmask;

    if (r->use == 0)
        return;
    s->tot.periods++;
    if (r->use > r->peak)
        r->peak = r->use;
    while (m) {
        s->st[__builtin_ctzll(m)].periods++;
        m &= m - 1;
    }
    r->pmask = 0;
    r->use = 0;
}

/* Window j moved from index `from` to `to`: fixed counters start again;
 * a sliding counter's current one becomes the previous (or both end). */
static void window_roll(rlf_sim_t *s, rec_t *r, size_t j, uint64_t to)
{
    uint64_t *sl = slots_of(s, r), from = widx_of(r)[j];
    size_t i, nw = s->c.nwin;

    widx_of(r)[j] = to;
    if (s->c.algo == RL_ALGO_GCRA || s->c.algo == RL_ALGO_SLIDING_LOG)
        return;
    for (i = 0; i < s->c.ncand; i++) {
        uint64_t *v = &sl[i * nw + j];
        if (s->c.algo == RL_ALGO_SLIDING_COUNTER && to == from + 1)
            *v = (*v & 0xffffffffu) << 32;
        else
            *v = 0;
    }
}

int rlf_sim_add(rlf_sim_t *s, uint64_t h, uint64_t ms, uint64_t cost)
{
    rl_admit_win_t w[RL_ADMIT_WINDOWS_MAX];
    uint64_t reset[RL_ADMIT_WINDOWS_MAX], *sl, idx;
    uint32_t weight[RL_ADMIT_WINDOWS_MAX];
    size_t nw = s->c.nwin, i, j;
    int err = 0;
    rec_t *r;

    if (ms > s->now)
        s->now = ms;
    h |= h == 0; /* 0 marks nothing; a caller hashing to 0 shares 1 */
    if ((r = lookup(s, h, ms, &err)) == NULL) {
        if (err == RL_EFULL)
            s->tot.dropped++;
        return err;
    }
    cost = cost ? cost : 1; /* the admission counts a cost of 0 as 1 */
    s->tot.requests++;
    s->tot.cost += cost;
    idx = rl_window_index(ms, s->c.window_s[0]);
    if (idx != r->pidx) {
        period_close(s, r);
        r->pidx = idx;
    }
    r->use += cost;
    for (j = 0; j < nw; j++) {
        uint32_t W = s->c.window_s[j];
        idx = rl_window_index(ms, W);
        if (idx != widx_of(r)[j])
            window_roll(s, r, j, idx);
        reset[j] = rl_window_reset_after_ms(ms, W);
        weight[j] = rl_swc_weight(reset[j], W);
    }
    sl = slots_of(s, r);
    for (i = 0; i < s->c.ncand; i++) {
        uint64_t *v = &sl[i * nw];
        for (j = 0; j < nw; j++) {
            uint32_t W = s->c.window_s[j];
            switch (s->c.algo) {
            case RL_ALGO_SLIDING_COUNTER:
                rl_admit_swc(&w[j], s->lim[i][j], W,
                             (int64_t)(v[j] & 0xffffffffu),
                             (int64_t)(v[j] >> 32), weight[j], reset[j]);
                break;
            case RL_ALGO_GCRA:
                rl_admit_gcra(&w[j], s->lim[i][j], W, s->t_us[i][j],
                              (int64_t)v[j], ms);
                break;
            case RL_ALGO_SLIDING_LOG: {
                slog_t **gp = (slog_t **)(void *)&v[j];
                slog_prune(s, gp, ms, (uint64_t)W * 1000);
                slog_load(&w[j], *gp, s->lim[i][j], W, ms, cost);
                break;
            }
            default:
                rl_admit_fixed(&w[j], s->lim[i][j], W, (int64_t)v[j], reset[j]);
            }
        }
        if (!rl_admit_one(w, nw, cost)) {
            uint64_t bit = UINT64_C(1) << i;
            s->st[i].refused++;
            s->st[i].refused_cost += cost;
            r->pmask |= bit;
            if (!(r->ever & bit)) {
                r->ever |= bit;
                s->st[i].users++;
            }
        } else if (s->c.algo == RL_ALGO_SLIDING_LOG) {
            for (j = 0; j < nw; j++)
                if ((err = slog_append(s, (slog_t **)(void *)&v[j], ms,
                                       rl_admit_added(&w[j], ms))) != 0)
                    return err;
        } else {
            for (j = 0; j < nw; j++)
                v[j] = s->c.algo == RL_ALGO_GCRA
                           ? rl_admit_added(&w[j], ms)
                           : v[j] + rl_admit_added(&w[j], ms);
        }
    }
    return 0;
}

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;

    return (x > y) - (x < y);
}

void rlf_sim_finish(rlf_sim_t *s)
{
    size_t i;

    for (i = 0; i < s->count; i++)
        period_close(s, rec_at(s, i));
    free(s->peaks);
    s->peaks = s->count ? malloc(s->count * sizeof(*s->peaks)) : NULL;
    if (s->peaks == NULL)
        return;
    for (i = 0; i < s->count; i++) {
        uint64_t p = rec_at(s, i)->peak;
        s->peaks[i] = p > UINT32_MAX ? UINT32_MAX : (uint32_t)p;
    }
    qsort(s->peaks, s->count, sizeof(*s->peaks), cmp_u32);
}

void rlf_sim_totals(const rlf_sim_t *s, rlf_sim_totals_t *t)
{
    *t = s->tot;
}

size_t rlf_sim_log_header_bytes(void)
{
    return sizeof(slog_t);
}

void rlf_sim_log_stats(const rlf_sim_t *s, rlf_log_stats_t *ls)
{
    *ls = s->ls;
    ls->worst_bytes = s->worst_rec * s->count;
}

const rlf_cand_stats_t *rlf_sim_cand(const rlf_sim_t *s, size_t i)
{
    return &s->st[i];
}

uint64_t rlf_sim_peak_quantile(const rlf_sim_t *s, double q)
{
    size_t rank;

    if (s->peaks == NULL || s->count == 0)
        return 0;
    rank = (size_t)(q * (double)s->count);
    if ((double)rank < q * (double)s->count - 1e-9)
        rank++; /* the ceiling */
    if (rank < 1)
        rank = 1;
    if (rank > s->count)
        rank = s->count;
    return s->peaks[rank - 1];
}
