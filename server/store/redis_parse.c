/* The Redis store's batch reply, read back into the ops (see
 * redis_parse.h; redis_script.lua describes the reply). */
#include <stdint.h>
#include <string.h>

#include "rl_error.h"
#include "rl_window.h"
#include "store/redis_parse.h"

int rls_redis_err_kind(const char *s, size_t len)
{
    static const struct {
        const char *word;
        int kind;
    } words[] = {
        {"OOM", RLS_SERR_OOM},           {"BUSY", RLS_SERR_BUSY},
        {"READONLY", RLS_SERR_READONLY}, {"NOSCRIPT", RLS_SERR_NOSCRIPT},
        {"LOADING", RLS_SERR_LOADING},   {"OVERFLOW", RLS_SERR_OVERFLOW}};
    size_t i, w = 0, k;

    while (w < len && s[w] >= 'A' && s[w] <= 'Z')
        w++;
    for (k = 0; k < sizeof(words) / sizeof(words[0]); k++)
        if (strlen(words[k].word) == w && memcmp(s, words[k].word, w) == 0)
            return words[k].kind;
    /* "ERR increment or decrement would overflow" */
    for (i = 0; i + 8 <= len; i++)
        if (memcmp(s + i, "overflow", 8) == 0)
            return RLS_SERR_OVERFLOW;
    return RLS_SERR_OTHER;
}

/* Reads a decimal integer (an optional '-'); RL_EINVAL if malformed. */
static int get_i64(const char **pp, const char *end, int64_t *out)
{
    const char *p = *pp;
    uint64_t v = 0;
    int neg = 0;

    if (p < end && *p == '-') {
        neg = 1;
        p++;
    }
    if (p == end || *p < '0' || *p > '9')
        return RL_EINVAL;
    while (p < end && *p >= '0' && *p <= '9') {
        if (v > (UINT64_C(1) << 62))
            return RL_EINVAL;
        v = v * 10 + (uint64_t)(*p++ - '0');
    }
    if (v > INT64_MAX)
        return RL_EINVAL;
    *out = neg ? -(int64_t)v : (int64_t)v;
    *pp = p;
    return RL_OK;
}

static int get_sp_i64(const char **pp, const char *end, int64_t *out)
{
    if (*pp == end || **pp != ' ')
        return RL_EINVAL;
    (*pp)++;
    return get_i64(pp, end, out);
}

/* A limit's state in text, as the reply array has it (w->algo says
 * which): a count; the current and previous counts; a TAT; a log's sum,
 * newest entry, m and m oldest entries (times and costs). */
static int text_state(const char **pp, const char *end, rls_op_window_t *w)
{
    int64_t m, t, c;
    uint32_t k;

    w->before2 = 0;
    w->nold = 0;
    if (get_sp_i64(pp, end, &w->before) != RL_OK)
        return RL_EINVAL;
    if (w->algo == RL_ALGO_SLIDING_COUNTER || w->algo == RL_ALGO_SLIDING_LOG)
        if (get_sp_i64(pp, end, &w->before2) != RL_OK)
            return RL_EINVAL;
    if (w->algo != RL_ALGO_SLIDING_LOG)
        return RL_OK;
    if (w->before < 0 || w->before2 < 0 || get_sp_i64(pp, end, &m) != RL_OK ||
        m < 0 || m > RL_SWL_PREFIX)
        return RL_EINVAL;
    for (k = 0; k < (uint32_t)m; k++) {
        if (get_sp_i64(pp, end, &t) != RL_OK ||
            get_sp_i64(pp, end, &c) != RL_OK || t < 0 || c < 0)
            return RL_EINVAL;
        w->old_t[k] = (uint64_t)t;
        w->old_c[k] = (uint64_t)c;
    }
    w->nold = (uint32_t)m;
    return RL_OK;
}

/* Reads one op's text entry, [p, end): "e<KIND>", or "<admitted>" then
 * " Q" and the limits' states (a quota that did not parse), or " q" and a
 * window, limit and count per window of the caller's quota, or " A" and
 * per limit of the caller's quota its letter, window, limit, unit and
 * state (into q, RL_ADMIT_WINDOWS_MAX entries). */
static int parse_op_text(const char *p, const char *end, rls_op_t *op,
                         rls_op_window_t *q, rls_redis_errs_t *errs)
{
    int64_t v;
    size_t j;

    if (p < end && *p == 'e') {
        const char *w = ++p;
        size_t wl = (size_t)(end - w);

        /* Redis Cluster: a key of another master (or none now). */
        if ((wl == 8 && memcmp(w, "NONLOCAL", 8) == 0) ||
            (wl == 11 && memcmp(w, "CLUSTERDOWN", 11) == 0)) {
            op->err = RLS_REDIS_ENOTHERE;
            errs->elsewhere++;
            return RL_OK;
        }
        op->err = RL_ESTORE;
        errs->by_kind[rls_redis_err_kind(w, wl)]++;
        errs->failed++;
        return RL_OK;
    }
    if (get_i64(&p, end, &v) != RL_OK || v < 0 || v > op->ncosts)
        return RL_EINVAL;
    op->admitted = (uint64_t)v;
    op->err = 0;
    if (end - p >= 2 && p[0] == ' ' && p[1] == 'A') {
        /* A stored quota with other algorithms: per limit its letter,
         * window, limit and unit, then its state. */
        if (q == NULL)
            return RL_EINVAL;
        p += 2;
        for (j = 0; p < end && *p == ' '; j++) {
            int64_t ws, lim, u;
            int a;
            if (j == RL_ADMIT_WINDOWS_MAX || end - p < 3 || p[2] != ' ')
                return RL_EINVAL;
            a = p[1] == 'f'   ? RL_ALGO_FIXED
                : p[1] == 's' ? RL_ALGO_SLIDING_COUNTER
                : p[1] == 'g' ? RL_ALGO_GCRA
                : p[1] == 'l' ? RL_ALGO_SLIDING_LOG
                              : -1;
            p += 2;
            if (a < 0 || get_sp_i64(&p, end, &ws) != RL_OK ||
                get_sp_i64(&p, end, &lim) != RL_OK ||
                get_sp_i64(&p, end, &u) != RL_OK || ws < 1 ||
                ws > RL_WINDOW_MAX_S || lim < 1 || u < 1)
                return RL_EINVAL;
            memset(&q[j], 0, sizeof(q[j]));
            q[j].algo = (uint8_t)a;
            q[j].window_s = (uint32_t)ws;
            q[j].limit = (uint64_t)lim;
            q[j].t_us = a == RL_ALGO_GCRA ? (uint64_t)u : 0;
            if (text_state(&p, end, &q[j]) != RL_OK)
                return RL_EINVAL;
        }
        if (j == 0)
            return RL_EINVAL;
        op->quota_win = q;
        op->nquota_win = (uint32_t)j;
        return p == end ? RL_OK : RL_EINVAL;
    }
    if (end - p >= 2 && p[0] == ' ' && p[1] == 'Q') {
        p += 2;
        errs->bad_quotas++;
        if (!rls_op_fixed(op)) {
            /* an "a" op's limits, each state as its array entry has it */
            for (j = 0; j < op->nwin; j++)
                if (text_state(&p, end, &op->win[j]) != RL_OK)
                    return RL_EINVAL;
            return p == end ? RL_OK : RL_EINVAL;
        }
    } else if (end - p >= 2 && p[0] == ' ' && p[1] == 'q') {
        /* The caller's quota: its own windows. */
        if (q == NULL)
            return RL_EINVAL;
        p += 2;
        for (j = 0; p < end && *p == ' '; j++) {
            int64_t ws, lim, b;
            if (j == RL_ADMIT_WINDOWS_MAX ||
                get_sp_i64(&p, end, &ws) != RL_OK ||
                get_sp_i64(&p, end, &lim) != RL_OK ||
                get_sp_i64(&p, end, &b) != RL_OK || ws < 1 ||
                ws > RL_WINDOW_MAX_S || lim < 1)
                return RL_EINVAL;
            memset(&q[j], 0, sizeof(q[j])); /* a fixed window */
            q[j].window_s = (uint32_t)ws;
            q[j].limit = (uint64_t)lim;
            q[j].before = b;
        }
        if (j == 0)
            return RL_EINVAL;
        op->quota_win = q;
        op->nquota_win = (uint32_t)j;
        return p == end ? RL_OK : RL_EINVAL;
    }
    for (j = 0; j < op->nwin; j++)
        if (get_sp_i64(&p, end, &op->win[j].before) != RL_OK)
            return RL_EINVAL;
    return p == end ? RL_OK : RL_EINVAL;
}

/* A sliding window's state at rep->element[*e]: its sum, its newest
 * entry's time, a count m of entries (at most RL_SWL_PREFIX), then m
 * times and costs; nothing negative. */
static int parse_log(const redisReply *rep, size_t *e, rls_op_window_t *w)
{
    const redisReply *const *x = (const redisReply *const *)rep->element;
    size_t i = *e, k;
    long long m;

    if (rep->elements - i < 3)
        return RL_EINVAL;
    for (k = 0; k < 3; k++)
        if (x[i + k]->type != REDIS_REPLY_INTEGER || x[i + k]->integer < 0)
            return RL_EINVAL;
    w->before = x[i]->integer;
    w->before2 = x[i + 1]->integer;
    m = x[i + 2]->integer;
    i += 3;
    if (m > RL_SWL_PREFIX || rep->elements - i < 2 * (size_t)m)
        return RL_EINVAL;
    for (k = 0; k < (size_t)m; k++, i += 2) {
        if (x[i]->type != REDIS_REPLY_INTEGER || x[i]->integer < 0 ||
            x[i + 1]->type != REDIS_REPLY_INTEGER || x[i + 1]->integer < 0)
            return RL_EINVAL;
        w->old_t[k] = (uint64_t)x[i]->integer;
        w->old_c[k] = (uint64_t)x[i + 1]->integer;
    }
    w->nold = (uint32_t)m;
    *e = i;
    return RL_OK;
}

int rls_redis_parse_reply(const redisReply *rep, rls_op_t *ops, size_t n,
                          rls_op_window_t *quota_win, rls_redis_errs_t *errs)
{
    size_t i, j, e = 0;

    memset(errs, 0, sizeof(*errs));
    if (rep->type == REDIS_REPLY_STRING && rep->len == 4 &&
        memcmp(rep->str, "late", 4) == 0)
        return RLS_REDIS_LATE;
    if (rep->type != REDIS_REPLY_ARRAY)
        return RL_EINVAL;
    for (i = 0; i < n; i++) {
        rls_op_t *op = &ops[i];
        const redisReply *x;

        op->quota_win = NULL;
        op->nquota_win = 0;
        if (e == rep->elements)
            return RL_EINVAL;
        x = rep->element[e++];
        if (x->type == REDIS_REPLY_STRING) {
            if (parse_op_text(x->str, x->str + x->len, op,
                              quota_win ? quota_win + i * RL_ADMIT_WINDOWS_MAX
                                        : NULL,
                              errs) != RL_OK)
                return RL_EINVAL;
            continue;
        }
        if (x->type != REDIS_REPLY_INTEGER || x->integer < 0 ||
            (uint64_t)x->integer > op->ncosts)
            return RL_EINVAL;
        op->admitted = (uint64_t)x->integer;
        op->err = 0;
        /* Per limit its state before: a count, a sliding-window-counter's
         * current and previous counts, a gcra's TAT. */
        for (j = 0; j < op->nwin; j++) {
            rls_op_window_t *w = &op->win[j];
            if (w->algo == RL_ALGO_SLIDING_LOG) {
                if (parse_log(rep, &e, w) != RL_OK)
                    return RL_EINVAL;
                continue;
            }
            if (rep->elements - e < rls_op_window_counts(w))
                return RL_EINVAL;
            x = rep->element[e++];
            if (x->type != REDIS_REPLY_INTEGER)
                return RL_EINVAL;
            w->before = x->integer;
            w->before2 = 0;
            if (w->algo == RL_ALGO_SLIDING_COUNTER) {
                x = rep->element[e++];
                if (x->type != REDIS_REPLY_INTEGER)
                    return RL_EINVAL;
                w->before2 = x->integer;
            }
        }
    }
    /* The first refusal's text, if any, follows the ops. */
    if (e + 1 == rep->elements && rep->element[e]->type == REDIS_REPLY_STRING) {
        errs->text = rep->element[e]->str;
        errs->text_len = rep->element[e]->len;
        e++;
    }
    return e == rep->elements ? RL_OK : RL_EINVAL;
}
