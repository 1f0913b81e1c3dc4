/* One caller's usage and its reset, for the admin listener (admin_api.h).
 *
 * The read is the decider's PEEK, made per window: the caller's windows
 * (the rule's, or the caller's override, scaled by the switch; or a
 * stored quota's) go to the store's submit as one op under limits of 1
 * with a cost of 2, which every store refuses without writing anything
 * (no key made, none extended: redis_script.lua, the module, the memory
 * store), and which reports each window's state before it, exactly as
 * a batch's does: so the read is the store's one atomic view, on the
 * Redis stores the fleet's, on the memory store this process's. Each
 * window's used, remaining and reset are then worked out against its
 * real limit by lib/admit.c, as the batcher's replay would.
 *
 * Before it, one step of store/usage.c reads what the op cannot: the
 * caller's stored quota (when the rule has the "quotas:<rule>" switch,
 * as the decider looks) and a concurrency rule's leases alive. So a
 * quota is read just before the counters, not in the same step; a
 * quota changed between the two is read the next time.
 *
 * A reset reads the quota the same way, then clears in one store step
 * every key the caller's state under the rule may be in (each window's,
 * with the windows either side, the quota's windows, and the lease set
 * when asked), and makes the refusal caches forget what they knew: this
 * loop's and every other loop's at once (the runtime's change hooks, as
 * a new policy does), the fleet's within a switch poll (the switches'
 * version bumped in Redis, which every instance's poller takes as a
 * change). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "admin/admin_usage.h"
#include "base/log.h"
#include "core/batch.h"
#include "envoy/conf.h"
#include "envoy/rls.h"
#include "policy/limit.h"
#include "rl_admit.h"
#include "rl_error.h"
#include "rl_window.h"
#include "store/usage.h"

#define DESC_MAX 2048

typedef struct job_s {
    rls_admin_state_t *a;
    rls_http_conn_t *conn;
    int reset, leases, text;
    char who[160];
    /* Who and under what. */
    char rule[RL_RULE_MAX + 1]; /* "" for an Envoy descriptor's limit */
    size_t rule_len;
    char caller[RLS_ENVOY_KEY_MAX > RL_KEY_MAX ? RLS_ENVOY_KEY_MAX + 1
                                               : RL_KEY_MAX + 1];
    size_t caller_len;
    char desc[DESC_MAX]; /* the Envoy descriptor, "" for a rule */
    const char *domain_counting;
    int ns;
    int concurrency;
    int mode;
    int quota_on;
    double scale;
    const char *source; /* the limits': rule, override, envoy, quota */
    rls_limits_t limits;
    char opkey[RLS_OPKEY_MAX + 1];
    size_t opkey_len, tag_len;
    char qkey[RLS_OPKEY_MAX + 8], lkey[RLS_OPKEY_MAX + 8];
    rls_usage_op_t u;
    int quota_valid;
    rls_limit_t ql[RLS_ADMIN_QUOTA_LIMITS];
    uint32_t nq;
    uint64_t now_ms;
    /* The read. */
    rls_op_t op;
    rls_op_window_t win[RLS_WINDOWS_MAX];
    uint64_t real[RLS_WINDOWS_MAX];
    uint32_t cost;
    /* The reset's keys. */
    char keys[RLS_USAGE_KEYS_MAX][RLS_OPKEY_MAX + 40];
    const char *kp[RLS_USAGE_KEYS_MAX];
    size_t kl[RLS_USAGE_KEYS_MAX];
    rl_buf_t out;
} job_t;

const char *rls_admin_store_name(const rls_admin_view_t *v, int *fleet)
{
    *fleet = v->use_redis != 0;
    if (!v->use_redis)
        return "memory";
    if (v->redis_cluster > 0)
        return "redis-cluster";
    if (v->redis_sentinels > 0)
        return "redis-sentinel";
    return "redis";
}

/* ---- answers -------------------------------------------------------- */

static void answer(job_t *j, int status, const char *ctype)
{
    rls_admin_state_t *a = j->a;
    rls_http_reply_t r;

    memset(&r, 0, sizeof(r));
    rls_http_reply_text(&r, status,
                        status == 200   ? "OK"
                        : status == 413 ? "Content Too Large"
                        : status == 503 ? "Service Unavailable"
                                        : "Internal Server "
                                          "Error",
                        "");
    r.ctype = ctype;
    r.body = rl_buf_rptr(&j->out);
    r.body_len = rl_buf_len(&j->out);
    a->jobs--;
    rls_http_answer(j->conn, &r);
    rl_buf_free(&j->out);
    free(j);
}

static void answer_error(job_t *j, int status, const char *why)
{
    rl_buf_reset(&j->out);
    if (RLS_BUF_LIT(&j->out, "{\"error\":") != RL_OK ||
        rls_admin_json_str(&j->out, why, strlen(why)) != RL_OK ||
        rl_buf_printf(&j->out, ",\"status\":%d}\n", status) != RL_OK)
        rl_buf_reset(&j->out);
    answer(j, status, "application/json");
}

/* The answer written, or a 413 / 500 when it did not fit. */
static void answer_built(job_t *j, int rc)
{
    if (rc == RL_EFULL) {
        j->a->stats.too_large++;
        answer_error(j, 413, "the answer is over the cap");
    } else if (rc != RL_OK) {
        answer_error(j, 500, "out of memory");
    } else {
        answer(j, 200,
               j->text ? "text/plain; charset=utf-8" : "application/json");
    }
}

static int put_str(rl_buf_t *b, const char *name, const char *s, size_t n)
{
    int rc;

    if ((rc = rl_buf_printf(b, "\"%s\":", name)) != RL_OK)
        return rc;
    return rls_admin_json_str(b, s, n);
}

/* Who the answer is about, and where it came from: the start of every
 * usage answer. */
static int put_head(job_t *j, rl_buf_t *b)
{
    int fleet, rc;
    const char *store = rls_admin_store_name(&j->a->v, &fleet);

    if (j->text) {
        if (j->desc[0] != '\0' && j->caller_len == 0)
            rc = rl_buf_printf(b, "descriptor %s", j->desc);
        else if (j->desc[0] != '\0')
            rc = rl_buf_printf(b, "descriptor %s (counter key %.*s)", j->desc,
                               (int)j->caller_len, j->caller);
        else
            rc = rl_buf_printf(b, "rule %s, caller %.*s", j->rule,
                               (int)j->caller_len, j->caller);
        if (rc == RL_OK)
            rc = rl_buf_printf(
                b, ": store %s%s, %s\n", store,
                j->a->v.store->stats.redis_module ? " (module)" : "",
                fleet ? "read for the fleet" : "this instance only");
        return rc;
    }
    if ((rc = RLS_BUF_LIT(b, "{")) != RL_OK)
        return rc;
    if (j->desc[0] != '\0') {
        if ((rc = put_str(b, "descriptor", j->desc, strlen(j->desc))) !=
                RL_OK ||
            (rc = RLS_BUF_LIT(b, ",")) != RL_OK ||
            (rc = put_str(b, "counting", j->domain_counting,
                          strlen(j->domain_counting))) != RL_OK ||
            (rc = RLS_BUF_LIT(b, ",")) != RL_OK)
            return rc;
    }
    if (j->rule_len > 0 &&
        ((rc = put_str(b, "rule", j->rule, j->rule_len)) != RL_OK ||
         (rc = RLS_BUF_LIT(b, ",")) != RL_OK))
        return rc;
    if ((rc = put_str(b, "key", j->caller, j->caller_len)) != RL_OK ||
        (rc = rl_buf_printf(
             b,
             ",\"store\":\"%s\",\"module\":%s,"
             "\"scope\":\"%s\",\"now_ms\":%llu",
             store, j->a->v.store->stats.redis_module ? "true" : "false",
             fleet ? "fleet" : "instance", (unsigned long long)j->now_ms)) !=
            RL_OK)
        return rc;
    return RL_OK;
}

/* The quota's part of an answer. */
static int put_quota(job_t *j, rl_buf_t *b)
{
    int rc;

    if (j->text) {
        if (!j->u.has_quota)
            return RL_OK;
        return rl_buf_printf(b, "  stored quota \"%s\"%s\n", j->u.quota,
                             j->quota_valid
                                 ? ": applies"
                                 : ": does not parse, the rule's limits "
                                   "apply");
    }
    if (!j->u.has_quota)
        return rl_buf_printf(b, ",\"quota\":null");
    if ((rc = RLS_BUF_LIT(b, ",\"quota\":{")) != RL_OK ||
        (rc = put_str(b, "stored", j->u.quota, j->u.quota_len)) != RL_OK)
        return rc;
    return rl_buf_printf(b, ",\"applied\":%s}",
                         j->quota_valid ? "true" : "false");
}

static void ms_text(uint64_t ms, char *out, size_t len)
{
    if (ms < 10000)
        snprintf(out, len, "%llu ms", (unsigned long long)ms);
    else
        snprintf(out, len, "%.1f s", (double)ms / 1000.0);
}

/* ---- the read ------------------------------------------------------- */

/* Limit l of the caller at now, as the batcher sets a window up
 * (batch.c's window_set, without the expiry spread: nothing is written). */
static void win_set(rls_op_window_t *wo, const rls_limit_t *l, const char *key,
                    size_t klen, uint64_t now, uint64_t grace)
{
    uint64_t W = (uint64_t)l->window_s * 1000, off, end;

    memset(wo, 0, sizeof(*wo));
    wo->window_s = l->window_s;
    wo->algo = l->algo;
    wo->limit = l->limit;
    if (l->algo == RL_ALGO_GCRA) {
        wo->limit = l->burst;
        wo->t_us = l->t_us;
        wo->expire_at_ms = grace;
        return;
    }
    if (l->algo == RL_ALGO_SLIDING_LOG) {
        wo->expire_at_ms = now + W + grace;
        return;
    }
    off = l->phase ? rl_phase_offset_ms(key, klen, l->window_s) : 0;
    wo->index = (now - off) / W;
    end = (wo->index + 1) * W + off;
    wo->reset_ms = end - now;
    wo->expire_at_ms = end + grace;
    wo->phased = l->phase != 0;
    if (l->algo == RL_ALGO_SLIDING_COUNTER) {
        wo->expire_at_ms += W;
        wo->weight = rl_swc_weight(wo->reset_ms, l->window_s);
    }
}

/* The limits that decide: a stored quota that parses, else the rule's. */
static const rls_limit_t *limits_of(const job_t *j, uint32_t *n)
{
    if (j->quota_valid) {
        *n = j->nq;
        return j->ql;
    }
    *n = j->limits.n;
    return j->limits.w;
}

static int put_windows(job_t *j, rl_buf_t *b)
{
    rl_admit_win_t aw[RLS_WINDOWS_MAX];
    uint32_t n = j->op.nwin, i;
    uint64_t retry = 0;
    uint32_t nl;
    const rls_limit_t *ls = limits_of(j, &nl);
    int rc, ok;

    if (!j->text && (rc = rl_buf_printf(b, ",\"limits\":[")) != RL_OK)
        return rc;
    for (i = 0; i < n; i++) {
        rls_op_window_t q = j->win[i];
        rl_result_t r;
        char lim[RLS_LIMIT_FMT_MAX], wk[RLS_OPKEY_MAX + 40], t1[32], t2[32];
        uint64_t rt;

        q.limit = j->real[i];
        rls_op_window_load(&q, j->now_ms, &aw[i]);
        memset(&r, 0, sizeof(r));
        /* A read: cost 0, nothing added (rl_admit.h). */
        rl_admit_counted(&aw[i], 1, 0, 0, &r);
        rt = rl_admit_retry_ms(&aw[i], 1);
        if (rt > retry)
            retry = rt;
        rls_limit_format(&ls[i], lim, sizeof(lim));
        rls_wkey(&j->op, &j->win[i], RLS_WKEY_STATE, wk);
        if (j->text) {
            ms_text(r.reset_after_ms, t1, sizeof(t1));
            ms_text(rt, t2, sizeof(t2));
            rc = rl_buf_printf(b,
                               "  %s: used %llu of %llu, remaining %llu, "
                               "full again in %s%s%s\n",
                               lim, (unsigned long long)r.used,
                               (unsigned long long)r.limit,
                               (unsigned long long)r.remaining, t1,
                               rt ? ", next request in " : "", rt ? t2 : "");
        } else {
            rc = rl_buf_printf(
                b,
                "%s{\"limit_spec\":\"%s\",\"algorithm\":\"%s\","
                "\"window_s\":%u,\"limit\":%llu,\"used\":%llu,"
                "\"remaining\":%llu,\"reset_after_ms\":%llu,"
                "\"retry_after_ms\":%llu,",
                i ? "," : "", lim, rls_algo_name(q.algo), q.window_s,
                (unsigned long long)r.limit, (unsigned long long)r.used,
                (unsigned long long)r.remaining,
                (unsigned long long)r.reset_after_ms, (unsigned long long)rt);
            if (rc == RL_OK)
                rc = put_str(b, "store_key", wk, strlen(wk));
            if (rc == RL_OK)
                rc = RLS_BUF_LIT(b, "}");
        }
        if (rc != RL_OK)
            return rc;
    }
    ok = rl_admit_fits(aw, n, 1);
    if (j->text) {
        char t[32];
        ms_text(retry, t, sizeof(t));
        return rl_buf_printf(b, "  next request (cost 1): %s%s%s\n",
                             ok ? "allowed" : "refused",
                             ok ? "" : ", retry in ", ok ? "" : t);
    }
    return rl_buf_printf(b,
                         "],\"next\":{\"allowed\":%s,\"retry_after_ms\":%llu}"
                         "}\n",
                         ok ? "true" : "false",
                         (unsigned long long)(ok ? 0 : retry));
}

static int put_mode(job_t *j, rl_buf_t *b)
{
    if (j->text)
        return rl_buf_printf(b, "  mode %s, limits from the %s%s\n",
                             rls_mode_name(j->mode), j->source,
                             j->scale != 1.0 ? " (scaled)" : "");
    return rl_buf_printf(b,
                         ",\"mode\":\"%s\",\"scale\":%.17g,"
                         "\"limits_from\":\"%s\"",
                         rls_mode_name(j->mode), j->scale, j->source);
}

static void on_peek(void *data, rls_op_t *ops, size_t n, int status)
{
    job_t *j = data;
    rl_buf_t *b = &j->out;
    int rc;

    (void)n;
    if (status != 0 || ops[0].err != 0) {
        j->a->stats.store_errors++;
        answer_error(j, 503,
                     status != 0 ? "the store did not answer the read"
                                 : "the store refused the read");
        return;
    }
    rc = put_head(j, b);
    if (rc == RL_OK)
        rc = put_mode(j, b);
    if (rc == RL_OK)
        rc = put_quota(j, b);
    if (rc == RL_OK)
        rc = put_windows(j, b);
    if (rc == RL_OK)
        j->a->stats.reads++;
    answer_built(j, rc);
}

/* A concurrency rule's read: its leases alive against its limit. */
static void answer_leases(job_t *j)
{
    rl_buf_t *b = &j->out;
    uint64_t limit = j->limits.w[0].limit;
    int rc;

    if (j->quota_valid && j->nq > 0)
        limit = j->ql[0].limit;
    rc = put_head(j, b);
    if (rc == RL_OK)
        rc = put_mode(j, b);
    if (rc == RL_OK)
        rc = put_quota(j, b);
    if (rc == RL_OK)
        rc = j->text
                 ? rl_buf_printf(b,
                                 "  leases alive %llu of %llu "
                                 "(lease %u s)\n",
                                 (unsigned long long)j->u.leases,
                                 (unsigned long long)limit,
                                 j->limits.w[0].window_s)
                 : rl_buf_printf(b,
                                 ",\"leases\":{\"alive\":%llu,"
                                 "\"limit\":%llu,\"remaining\":%llu,"
                                 "\"lease_s\":%u}}\n",
                                 (unsigned long long)j->u.leases,
                                 (unsigned long long)limit,
                                 (unsigned long long)(j->u.leases < limit
                                                          ? limit - j->u.leases
                                                          : 0),
                                 j->limits.w[0].window_s);
    if (rc == RL_OK)
        j->a->stats.reads++;
    answer_built(j, rc);
}

static void start_peek(job_t *j)
{
    const rls_admin_view_t *s = &j->a->v;
    const rls_limit_t *ls;
    uint32_t n, i;

    ls = limits_of(j, &n);
    memset(&j->op, 0, sizeof(j->op));
    for (i = 0; i < n; i++) {
        win_set(&j->win[i], &ls[i], j->caller, j->caller_len, j->now_ms,
                s->grace_ms);
        /* PEEK: a cost of 2 no limit of 1 holds (batch.c's submit). */
        j->real[i] = j->win[i].limit;
        j->win[i].limit = 1;
    }
    j->cost = 2;
    j->op.key = j->opkey;
    j->op.key_len = j->opkey_len;
    j->op.tag_len = j->tag_len;
    j->op.scale = 1.0;
    j->op.now_ms = j->now_ms;
    j->op.win = j->win;
    j->op.nwin = n;
    j->op.costs = &j->cost;
    j->op.ncosts = 1;
    j->op.equal_cost = 2;
    /* May answer before it returns (the memory store). */
    s->store->v->submit(s->store, &j->op, 1, on_peek, j);
}

/* ---- the reset ------------------------------------------------------ */

static void on_version_bumped(void *data, void *reply)
{
    (void)data;
    (void)reply;
}

/* What a printable log field of s[0, n) can be: its bytes, those outside
 * [0x21, 0x7e] and quotes as '?'. */
static void log_safe(const char *s, size_t n, char *out, size_t len)
{
    size_t i;

    if (len == 0)
        return;
    for (i = 0; i < n && i + 1 < len; i++)
        out[i] = s[i] > 0x20 && s[i] < 0x7f && s[i] != '"' && s[i] != '\\'
                     ? s[i]
                     : '?';
    out[i] = '\0';
}

static void on_reset(void *data, rls_usage_op_t *u)
{
    job_t *j = data;
    const rls_admin_view_t *s = &j->a->v;
    rl_buf_t *b = &j->out;
    char key[RLS_ENVOY_KEY_MAX + 1];
    int rc;

    if (u->err != 0) {
        j->a->stats.store_errors++;
        answer_error(j, 503, "the store did not clear the keys");
        return;
    }
    j->a->stats.resets++;
    j->a->stats.cleared += u->cleared;
    log_safe(j->caller, j->caller_len, key, sizeof(key));
    RLS_INFO("admin: usage reset",
             " by=%s rule=\"%s\" descriptor=\"%s\" key=\"%s\" cleared=%llu "
             "leases=%s",
             j->who, j->rule, j->desc, key, (unsigned long long)u->cleared,
             j->leases ? "cleared" : "kept");
    /* The refusal caches forget: every loop's now (the change hooks of a
     * new policy), the fleet's at its next switch poll. */
    if (s->rt->before_change != NULL)
        s->rt->before_change(s->rt->arg);
    if (s->rt->after_change != NULL)
        s->rt->after_change(s->rt->arg);
    if (s->store->v->command != NULL) {
        char pkey[RLS_ADMIN_NAME_MAX + 16];
        const char *argv[4] = {"HINCRBY", pkey, "version", "1"};
        size_t lens[4] = {7, 0, 7, 1};
        lens[1] = (size_t)snprintf(pkey, sizeof(pkey), "%spolicy", s->prefix);
        /* Fire and forget: the reply outlives the job. */
        s->store->v->command(s->store, 4, argv, lens, on_version_bumped, NULL);
    }
    rc = put_head(j, b);
    if (rc == RL_OK)
        rc = j->text ? rl_buf_printf(b, "  reset: %llu keys cleared%s\n",
                                     (unsigned long long)u->cleared,
                                     j->leases ? ", leases included" : "")
                     : rl_buf_printf(b,
                                     ",\"reset\":true,\"cleared\":%llu,"
                                     "\"leases_cleared\":%s}\n",
                                     (unsigned long long)u->cleared,
                                     j->leases ? "true" : "false");
    answer_built(j, rc);
}

/* Adds the keys the caller's state under limits ls[0, n) may be in. */
static void reset_keys(job_t *j, const rls_limit_t *ls, uint32_t n)
{
    static const int which[] = {RLS_WKEY_STATE, RLS_WKEY_CUR, RLS_WKEY_PREV};
    uint32_t i, k;
    int d;

    for (i = 0; i < n; i++) {
        rls_op_window_t w;
        win_set(&w, &ls[i], j->caller, j->caller_len, j->now_ms, 0);
        /* The window either side too: another instance's clock, or a
         * batch of the previous window's last instant, may count there. */
        for (d = -1; d <= 1; d++) {
            rls_op_window_t x = w;
            if (d < 0 && x.index == 0)
                continue;
            x.index = (uint64_t)((int64_t)x.index + d);
            for (k = 0; k < 3; k++) {
                if (j->u.nkeys == RLS_USAGE_KEYS_MAX)
                    return;
                /* Fixed windows have one key per index; a
                 * sliding-window-counter one state key (Redis) and a
                 * counter per index (the memory store); gcra and logs one
                 * key. */
                if ((w.algo == RL_ALGO_FIXED && which[k] != RLS_WKEY_STATE) ||
                    ((w.algo == RL_ALGO_GCRA || w.algo == RL_ALGO_SLIDING_LOG ||
                      (w.algo == RL_ALGO_SLIDING_COUNTER &&
                       which[k] == RLS_WKEY_STATE)) &&
                     d != 0))
                    continue;
                j->kl[j->u.nkeys] =
                    rls_wkey(&j->op, &x, which[k], j->keys[j->u.nkeys]);
                j->kp[j->u.nkeys] = j->keys[j->u.nkeys];
                j->u.nkeys++;
                if (w.algo == RL_ALGO_GCRA || w.algo == RL_ALGO_SLIDING_LOG)
                    break;
            }
        }
    }
}

static void start_reset(job_t *j)
{
    const rls_admin_view_t *s = &j->a->v;

    j->op.key = j->opkey;
    j->op.key_len = j->opkey_len;
    j->op.tag_len = j->tag_len;
    j->u.keys = j->kp;
    j->u.lens = j->kl;
    j->u.nkeys = 0;
    reset_keys(j, j->limits.w, j->concurrency ? 0 : j->limits.n);
    if (j->quota_valid && !j->concurrency)
        reset_keys(j, j->ql, j->nq);
    j->u.qkey = NULL;
    j->u.qfield = NULL;
    j->u.qfield_len = 0;
    if (!j->leases)
        j->u.lkey = NULL;
    j->u.reset = 1;
    if (j->u.nkeys == 0 && j->u.lkey == NULL) {
        /* A concurrency rule without leases=1: nothing to clear. */
        rls_usage_op_t none;
        memset(&none, 0, sizeof(none));
        on_reset(j, &none);
        return;
    }
    rls_store_usage(s->store, &j->u, on_reset, j);
}

/* ---- the start ------------------------------------------------------ */

static void on_first(void *data, rls_usage_op_t *u)
{
    job_t *j = data;

    if (u->err != 0) {
        j->a->stats.store_errors++;
        answer_error(j, 503, "the store did not answer");
        return;
    }
    if (u->has_quota && j->quota_on) {
        double sc = j->scale;
        j->quota_valid = rls_admin_quota_parse(u->quota, u->quota_len, sc,
                                               j->ql, &j->nq) == RL_OK;
        /* A concurrency rule's quota is its one N/S (reserve.lua). */
        if (j->concurrency && j->nq != 1)
            j->quota_valid = 0;
        if (j->quota_valid)
            j->source = "stored quota";
    }
    if (j->reset)
        start_reset(j);
    else if (j->concurrency)
        answer_leases(j);
    else
        start_peek(j);
}

/* The Envoy descriptor's counter and limit, as envoy/rls.c's add_one
 * finds them. Returns 0, 1 when nothing is counted for it (j->out holds
 * the answer's reason), or an HTTP status with *why. */
static int resolve_envoy(job_t *j, const rls_admin_req_t *q, rls_spec_t *spec,
                         const char **why)
{
    const rls_admin_view_t *s = &j->a->v;
    const rls_envoy_conf_t *conf;
    const rls_envoy_domain_t *dom;
    const rls_envoy_node_t *x = NULL, *up;
    const char *keys[RLS_ADMIN_ENTRIES_MAX], *vals[RLS_ADMIN_ENTRIES_MAX];
    size_t klens[RLS_ADMIN_ENTRIES_MAX], vlens[RLS_ADMIN_ENTRIES_MAX];
    size_t n = q->nentries, i, at;
    char *key;
    rls_admin_envoy_t e;

    memset(&e, 0, sizeof(e));
    if (!s->envoy(s->arg, &e) || (conf = e.conf) == NULL) {
        *why = "no Envoy domains here (no --grpc, or no configuration yet)";
        return 404;
    }
    if ((dom = rls_envoy_conf_domain(conf, q->domain, q->domain_len)) == NULL) {
        *why = "no such Envoy domain";
        return 404;
    }
    at = (size_t)snprintf(j->desc, sizeof(j->desc), "%.*s", (int)dom->name_len,
                          dom->name);
    for (i = 0; i < n && at < sizeof(j->desc); i++)
        at += (size_t)snprintf(j->desc + at, sizeof(j->desc) - at, ".%.*s_%.*s",
                               (int)q->eklen[i], q->ekey[i], (int)q->evlen[i],
                               q->evalue[i]);
    switch (rls_envoy_conf_counting(dom)) {
    case RLS_ENVOY_COUNT_NATIVE:
        j->domain_counting = "native";
        break;
    case RLS_ENVOY_COUNT_STOP:
        j->domain_counting = "envoy-stop";
        break;
    default:
        j->domain_counting = "envoy";
    }
    for (i = 0; i < n; i++)
        if ((x = rls_envoy_conf_step(conf, dom, x, q->ekey[i], q->eklen[i],
                                     q->evalue[i], q->evlen[i])) == NULL)
            break;
    if (x != NULL && x->charge) {
        /* charge_only: a charge to the limit of the entries before it. */
        x = x->parent != 0 && n >= 2
                ? rls_envoy_conf_node_at(conf, x->parent - 1)
                : NULL;
        n--;
    }
    if (x == NULL || (x->kind != RLS_ENVOY_LIMIT && x->kind != RLS_ENVOY_RULE))
        return 1; /* allowed, not counted */
    for (i = n, up = x; i-- > 0;) {
        keys[i] = q->ekey[i];
        klens[i] = q->eklen[i];
        if (up != NULL && up->wildcard && up->share_threshold) {
            vals[i] = up->value;
            vlens[i] = up->value_len;
        } else {
            vals[i] = q->evalue[i];
            vlens[i] = q->evlen[i];
        }
        up = up != NULL && up->parent != 0
                 ? rls_envoy_conf_node_at(conf, up->parent - 1)
                 : NULL;
    }
    key = j->caller;
    j->caller_len = rls_envoy_key(key, dom->name, dom->name_len, keys, klens,
                                  vals, vlens, n);
    if (x->kind == RLS_ENVOY_RULE) {
        if (rls_runtime_resolve(s->rt, x->rule, x->rule_len, key, j->caller_len,
                                spec) != RL_OK) {
            *why = "the descriptor's rule is not in the rules file";
            return 404;
        }
        if (x->shadow && spec->mode == RLS_MODE_ENFORCE)
            spec->mode = RLS_MODE_SHADOW;
        return 0;
    }
    memset(spec, 0, sizeof(*spec));
    spec->ns = RLS_NS_ENVOY;
    spec->limits.n = 1;
    spec->limits.w[0] = x->lim;
    spec->mode = s->rt->sw.global_mode >= 0 ? s->rt->sw.global_mode
                 : x->shadow                ? RLS_MODE_SHADOW
                                            : RLS_MODE_ENFORCE;
    spec->scale = 1.0;
    return 0;
}

int rls_admin_usage_start(rls_admin_state_t *a, const rls_admin_req_t *q,
                          const char *who, rls_http_conn_t *c, const char **why)
{
    const rls_admin_view_t *s = &a->v;
    rls_spec_t spec;
    job_t *j;
    int rc;

    if (a->jobs >= RLS_ADMIN_JOBS_MAX) {
        *why = "too many reads and resets under way";
        return 503;
    }
    if ((j = calloc(1, sizeof(*j))) == NULL) {
        *why = "out of memory";
        return 500;
    }
    j->a = a;
    j->conn = c;
    j->reset = q->route == RLS_ADMIN_RESET;
    j->leases = q->leases;
    j->text = q->text;
    snprintf(j->who, sizeof(j->who), "%s", who);
    rl_buf_init(&j->out, RLS_ADMIN_OUT_MAX);
    j->source = "rule";
    if (q->domain != NULL) {
        j->source = "Envoy descriptor";
        if ((rc = resolve_envoy(j, q, &spec, why)) != 0) {
            if (rc == 1) {
                /* Matched by nothing that counts: said as such. */
                a->jobs++;
                rc = put_head(j, &j->out);
                if (rc == RL_OK)
                    rc = j->text
                             ? rl_buf_printf(&j->out, "  not counted: no "
                                                      "descriptor with a limit "
                                                      "matches (allowed)\n")
                             : rl_buf_printf(&j->out, ",\"counted\":false}\n");
                answer_built(j, rc);
                return 0;
            }
            rl_buf_free(&j->out);
            free(j);
            return rc;
        }
    } else {
        memcpy(j->caller, q->key, q->key_len);
        j->caller_len = q->key_len;
        if (rls_runtime_resolve(s->rt, q->rule, q->rule_len, q->key, q->key_len,
                                &spec) != RL_OK) {
            rl_buf_free(&j->out);
            free(j);
            *why = "no such rule in the policy in force";
            return 404;
        }
        if (rls_rule_limits(spec.rule, q->key, q->key_len) !=
            &spec.rule->limits)
            j->source = "override";
    }
    if (spec.rule != NULL) {
        memcpy(j->rule, spec.rule->name, spec.rule->name_len);
        j->rule_len = spec.rule->name_len;
        j->concurrency = spec.rule->concurrency;
    }
    j->ns = spec.ns;
    j->mode = spec.mode;
    j->scale = spec.scale > 0 ? spec.scale : 1.0;
    j->limits = spec.limits;
    j->quota_on = spec.quota && s->store->v->command != NULL;
    j->opkey_len =
        rls_op_key(s->prefix, s->prefix_len, j->caller, j->caller_len, j->rule,
                   j->rule_len, j->ns, (uint8_t *)j->opkey, &j->tag_len);
    j->now_ms = s->store->v->now_ms(s->store);
    /* The first step: the quota and the leases, when there are any to
     * read; the keys all of the caller's tag. */
    memset(&j->u, 0, sizeof(j->u));
    j->u.now_ms = j->now_ms;
    j->u.tag_len = j->tag_len;
    if (j->quota_on) {
        j->u.qkey_len = (size_t)snprintf(j->qkey, sizeof(j->qkey), "%.*s:q",
                                         (int)j->tag_len, j->opkey);
        j->u.qkey = j->qkey;
        j->u.qfield = j->rule;
        j->u.qfield_len = j->rule_len;
    }
    if (j->concurrency) {
        j->u.lkey_len =
            (size_t)snprintf(j->lkey, sizeof(j->lkey), "%s:c", j->opkey);
        j->u.lkey = j->lkey;
    } else if (j->leases) {
        j->leases = 0; /* a rate rule has no leases */
    }
    a->jobs++;
    if (j->u.qkey == NULL && j->u.lkey == NULL) {
        rls_usage_op_t none;
        memset(&none, 0, sizeof(none));
        j->u = none;
        j->u.now_ms = j->now_ms;
        j->u.tag_len = j->tag_len;
        on_first(j, &j->u);
        return 0;
    }
    rls_store_usage(s->store, &j->u, on_first, j);
    return 0;
}
