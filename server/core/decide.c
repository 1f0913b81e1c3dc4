/* A request becomes a decision; see decide.h. */
#include "core/decide.h"

#include <stdio.h>
#include <string.h>

#include <stdlib.h>

#include "base/log.h"
#include "core/reserve.h"
#include "store/redis_cluster_map.h"
#include "rl_validate.h"
#include "rl_error.h"
#include "rl_window.h"

/* The limits a request brings itself are the operator's to allow: refused
 * outright with --inline-limits deny, or past the caps. Returns 0 or
 * RL_EINLINE with *why set. */
static int inline_allowed(const rls_runtime_t *rt, const rls_ask_t *a,
                          const char **why)
{
    if (rt->inline_mode == RLS_INLINE_DENY) {
        *why = "inline limits are not allowed here (--inline-limits deny): "
               "name a rule";
        return RL_EINLINE;
    }
    if (rt->max_inline_window && a->q.window_s > rt->max_inline_window) {
        *why = "window_seconds is over this server's --max-inline-window";
        return RL_EINLINE;
    }
    if (rt->max_inline_limit && a->q.limit > rt->max_inline_limit) {
        *why = "limit is over this server's --max-inline-limit";
        return RL_EINLINE;
    }
    return RL_OK;
}

/* The spec of a limit without a rule: the ask's own window. */
static void inline_spec(rls_runtime_t *rt, const rls_ask_t *a, rls_spec_t *spec)
{
    memset(spec, 0, sizeof(*spec));
    spec->rule = NULL;
    spec->ns = a->ns != 0 ? a->ns : RLS_NS_INLINE;
    spec->stats = a->stats_name != NULL
                      ? rls_runtime_stats(rt, a->stats_name, a->stats_name_len)
                      : &rt->inline_stats;
    spec->mode = rt->sw.global_mode >= 0 ? rt->sw.global_mode
                 : a->shadow             ? RLS_MODE_SHADOW
                                         : RLS_MODE_ENFORCE;
    spec->limits.n = 1;
    if (a->algo != NULL)
        spec->limits.w[0] = *a->algo;
    spec->limits.w[0].limit = a->q.limit;
    spec->limits.w[0].window_s = a->q.window_s;
    spec->quota = 0;
    spec->scale = 1.0;
}

/* A charge's limit (decide.h): out of reach of any count. */
#define RLS_CHARGE_LIMIT ((uint64_t)1 << 62)

/* The answer to a limit of 0 from the operator's file: refused, with the
 * window's end as the time to retry, without asking the store. */
static void refuse_all(rls_decider_t *d, const rls_ask_t *a,
                       rls_respond_fn respond, void *owner,
                       const rls_spec_t *spec)
{
    uint64_t now = d->store->v->now_ms(d->store);
    rl_result_t r;

    memset(&r, 0, sizeof(r));
    r.id = a->q.id;
    r.code = RL_CODE_OVER_LIMIT;
    r.window_s = a->q.window_s;
    r.reset_after_ms = r.retry_after_ms =
        rl_window_reset_after_ms(now, a->q.window_s);
    if (!rls_refusal_answer(&r, spec->mode, spec->stats))
        rls_top_refused(d->batcher.top, spec->stats, a->q.key, a->q.key_len,
                        now);
    respond(owner, &r);
}

void rls_decider_opts_init(rls_decider_opts_t *o)
{
    memset(o, 0, sizeof(*o));
    o->max_reqs = 1024;
    o->grace_ms = 1000;
    o->fail_open = 1;
    o->reserve_ttl_ms = 300000;
}

int rls_decider_init(rls_decider_t *d, const rls_decider_opts_t *o, char *err,
                     size_t errlen)
{
    rls_batcher_t *b = &d->batcher;
    int rc;

    memset(d, 0, sizeof(*d));
    d->store = o->store;
    d->rt = o->rt;
    d->reserve.loop = o->loop;
    d->reserve.ttl_ms = o->reserve_ttl_ms;
    d->reserve.xop_timeout_ms = o->xop_timeout_ms;
    /* Reservation and lease handles: signed with the operator's secret,
     * else this process's own. */
    if (o->handle_secret != NULL) {
        rls_hkey_copy(&d->hkey, o->handle_secret);
        rc = RL_OK;
    } else if (o->handle_secret_file != NULL) {
        rc = rls_hkey_from_file(&d->hkey, o->handle_secret_file, err, errlen);
    } else if ((rc = rls_hkey_random(&d->hkey)) != RL_OK) {
        snprintf(err, errlen, "no random bytes for the handle secret");
    }
    if (rc != RL_OK) {
        rls_hkey_free(&d->hkey);
        return rc;
    }
    rls_batcher_init(b, o->store, o->rt, o->prefix, o->prefix_len, o->max_reqs,
                     o->grace_ms, o->fail_open);
    b->max_in_flight = o->max_in_flight;
    b->hold_ns = o->hold_ns;
    b->spread_ms = o->spread_ms;
    b->local = o->local;
    d->one_slot = o->one_slot;
    b->top = o->top;
    if (rls_refusals_init(&b->refusals, o->refusal_cache) != RL_OK)
        RLS_WARN("no memory for the refusal cache; every request goes to "
                 "the store",
                 NULL);
    return RL_OK;
}

void rls_decider_free(rls_decider_t *d)
{
    rls_batcher_free(&d->batcher);
    d->batcher.local = NULL;
    rls_hkey_free(&d->hkey);
}

/* ---- all or nothing across levels ----------------------------------- */

/* One level of a group resolved into *spec (the rule's or the ask's own
 * window, as rls_decide resolves it), counted the native way, without a
 * stored quota. Returns 0, or an RL_E* code with *why set. */
static int level_resolve(rls_decider_t *d, rls_ask_t *a, rls_spec_t *spec,
                         char *msg, size_t msglen, const char **why)
{
    /* Envoy's limit of 0 is valid: it refuses the group. */
    int zero = a->q.rule_len == 0 && a->ns == RLS_NS_ENVOY && a->q.limit == 0;
    int rc;

    if (zero)
        a->q.limit = 1;
    rc = rl_check_validate(&a->q);
    if (zero)
        a->q.limit = 0;
    if (rc != RL_OK) {
        *why = rl_strerror(rc);
        return rc;
    }
    if (a->q.rule_len > 0) {
        if (rls_runtime_resolve(d->rt, a->q.rule, a->q.rule_len, a->q.key,
                                a->q.key_len, spec) != RL_OK) {
            snprintf(msg, msglen, "unknown rule '%.*s'", (int)a->q.rule_len,
                     a->q.rule);
            *why = msg;
            return RL_ENORULE;
        }
        if (a->shadow && spec->mode == RLS_MODE_ENFORCE)
            spec->mode = RLS_MODE_SHADOW;
        if (spec->rule->concurrency) {
            snprintf(msg, msglen,
                     "rule '%.*s' limits concurrency: it cannot be a level",
                     (int)a->q.rule_len, a->q.rule);
            *why = msg;
            return RL_EINVAL;
        }
    } else {
        if (a->from_request && (rc = inline_allowed(d->rt, a, why)) != RL_OK)
            return rc;
        inline_spec(d->rt, a, spec);
    }
    spec->counting = RLS_COUNT_NATIVE;
    spec->quota = 0;
    spec->charge = 0;
    return RL_OK;
}

static int decide_group(rls_decider_t *d, rls_ask_t *a, size_t n,
                        rls_respond_fn respond, void *owner, const char **why);

/* A native request of levels (a->q.levels): one ask per level, the
 * request's id and cost, decided as a group. */
static int decide_levels(rls_decider_t *d, rls_ask_t *a, rls_respond_fn respond,
                         void *owner, const char **why)
{
    rls_ask_t lv[RL_LEVELS_MAX];
    uint32_t i;
    int rc;

    if ((rc = rl_check_validate(&a->q)) != RL_OK) {
        *why = rl_strerror(rc);
        return rc;
    }
    for (i = 0; i < a->q.nlevels; i++) {
        lv[i] = *a;
        memset(&lv[i].q, 0, sizeof(lv[i].q));
        lv[i].q.id = a->q.id;
        lv[i].q.cost = a->q.cost;
        lv[i].q.key = a->q.levels[i].key;
        lv[i].q.key_len = a->q.levels[i].key_len;
        lv[i].q.rule = a->q.levels[i].rule;
        lv[i].q.rule_len = a->q.levels[i].rule_len;
    }
    /* Within rls_decide's span: not a second one. */
    return decide_group(d, lv, a->q.nlevels, respond, owner, why);
}

static int decide_group(rls_decider_t *d, rls_ask_t *a, size_t n,
                        rls_respond_fn respond, void *owner, const char **why)
{
    static _Thread_local char msg[2 * RL_RULE_MAX + 160];
    rls_spec_t spec[RLS_GROUP_MAX];
    rls_level_spec_t lv[RLS_GROUP_MAX];
    size_t i, k = 0, nwin = 0, refuse = n;
    int mode = RLS_MODE_ENFORCE, rc;
    unsigned slot = 0;

    if (n == 0 || n > RLS_GROUP_MAX) {
        *why = rl_strerror(RL_ELEVELS);
        return RL_ELEVELS;
    }
    for (i = 0; i < n; i++) {
        if ((rc = level_resolve(d, &a[i], &spec[i], msg, sizeof(msg), why)) !=
            RL_OK)
            return rc;
        nwin += spec[i].mode != RLS_MODE_OFF ? spec[i].limits.n : 0;
        if (spec[i].rule == NULL && a[i].q.limit == 0 && refuse == n)
            refuse = i;
        if (d->one_slot && spec[i].mode != RLS_MODE_OFF) {
            uint8_t key[RLS_OPKEY_MAX + 1];
            size_t tag,
                len = rls_op_key(d->batcher.prefix, d->batcher.prefix_len,
                                 a[i].q.key, a[i].q.key_len,
                                 spec[i].rule ? spec[i].rule->name : NULL,
                                 spec[i].rule ? spec[i].rule->name_len : 0,
                                 spec[i].ns, key, &tag);
            unsigned s = rls_key_slot((const char *)key, len);
            if (k > 0 && s != slot) {
                snprintf(msg, sizeof(msg),
                         "levels '%.*s' and '%.*s' are in different Redis "
                         "Cluster hash slots: begin every level's key with "
                         "the same {tenant}",
                         (int)a[0].q.key_len, a[0].q.key, (int)a[i].q.key_len,
                         a[i].q.key);
                *why = msg;
                return RL_EINVAL;
            }
            slot = s;
        }
        /* Mode off leaves a level out (nothing counted there); one level in
         * shadow makes the group's refusals shadow ones. */
        if (spec[i].mode == RLS_MODE_OFF)
            continue;
        if (spec[i].mode == RLS_MODE_SHADOW)
            mode = RLS_MODE_SHADOW;
        lv[k].key = a[i].q.key;
        lv[k].key_len = a[i].q.key_len;
        lv[k].spec = &spec[i];
        lv[k].index = (uint32_t)i;
        k++;
    }
    if (nwin > RLS_WINDOWS_MAX) {
        snprintf(msg, sizeof(msg),
                 "the levels' rules have %zu limits together; a group holds "
                 "%d at most",
                 nwin, RLS_WINDOWS_MAX);
        *why = msg;
        return RL_EINVAL;
    }
    if (k == 0) {
        /* Every level off: allowed, nothing counted. */
        rl_result_t r;
        rls_spec_off_result(&spec[0], a[0].q.id, &r);
        r.level = 1;
        respond(owner, &r);
        return RL_OK;
    }
    if (refuse < n && spec[refuse].mode != RLS_MODE_OFF) {
        /* A limit of 0 refuses the group, which then counts nowhere; the
         * other levels are not looked at (code 0 in per_level). */
        uint64_t now = d->store->v->now_ms(d->store);
        rl_result_t r, lr[RLS_GROUP_MAX];
        memset(&r, 0, sizeof(r));
        memset(lr, 0, sizeof(lr));
        r.id = a[0].q.id;
        r.code = RL_CODE_OVER_LIMIT;
        r.window_s = a[refuse].q.window_s;
        r.reset_after_ms = r.retry_after_ms =
            rl_window_reset_after_ms(now, a[refuse].q.window_s);
        r.level = (uint32_t)refuse + 1;
        rls_refusal_answer(&r, mode, spec[refuse].stats);
        lr[refuse] = r;
        r.per_level = lr;
        r.nper_level = (uint32_t)n;
        respond(owner, &r);
        return RL_OK;
    }
    if (rls_batcher_add_group(&d->batcher, respond, owner, a[0].q.id, lv, k,
                              a[0].q.cost, mode) != RL_OK) {
        *why = rl_strerror(RL_ENOMEM);
        return RL_ENOMEM;
    }
    return RL_OK;
}

/* A group asked by a front end itself (Envoy's all_or_nothing): one span,
 * named after its first level, as rls_decide's. */
int rls_decide_group(rls_decider_t *d, rls_ask_t *a, size_t n,
                     rls_respond_fn respond, void *owner, const char **why)
{
    rls_span_t *sp;
    int rc;

    if (n == 0 || d->tracer == NULL ||
        (sp = rls_trace_begin(d->tracer, a[0].parent,
                              a[0].q.rule_len > 0 ? a[0].q.rule
                                                  : a[0].stats_name,
                              a[0].q.rule_len > 0 ? a[0].q.rule_len
                              : a[0].stats_name   ? a[0].stats_name_len
                                                  : 0)) == NULL)
        return decide_group(d, a, n, respond, owner, why);
    sp->respond = respond;
    sp->owner = owner;
    if ((rc = decide_group(d, a, n, rls_trace_respond, sp, why)) != RL_OK)
        rls_trace_refused(d->tracer, sp, rc);
    return rc;
}

static int decide(rls_decider_t *d, rls_ask_t *a, rls_respond_fn respond,
                  void *owner, const char **why)
{
    static _Thread_local char msg[RL_RULE_MAX + 96];
    rls_runtime_t *rt = d->rt;
    rls_spec_t spec;
    uint32_t cost0;
    int zero;
    int rc;

    switch (a->q.op) {
    case RL_OP_CHECK:
    case RL_OP_RESERVE:
    case RL_OP_ACQUIRE:
        break;
    case RL_OP_SETTLE:
        return rls_settle(d, a, respond, owner, why);
    case RL_OP_RELEASE:
    case RL_OP_RENEW:
        return rls_release_renew(d, a, respond, owner, why);
    default:
        snprintf(msg, sizeof(msg), "unknown op %u (this server knows 0-5)",
                 a->q.op);
        *why = msg;
        return RL_EINVAL;
    }
    if (a->q.nlevels > 0)
        return decide_levels(d, a, respond, owner, why);
    /* Envoy's limit of 0 is valid (it refuses everything); the check below
     * would take it for a native request that forgot its limit. */
    zero = a->q.rule_len == 0 && a->ns == RLS_NS_ENVOY && a->q.limit == 0;
    cost0 = a->q.cost;
    if (zero)
        a->q.limit = 1;
    rc = rl_check_validate(&a->q);
    if (zero)
        a->q.limit = 0;
    if (rc != RL_OK) {
        *why = rl_strerror(rc);
        return rc;
    }
    /* Counted envoy-ratelimit's way, or compared alone, 0 adds nothing: a
     * read of the counters (validation reads it as 1, the native rule). */
    if (a->counting != RLS_COUNT_NATIVE && !a->charge && cost0 == 0)
        a->q.cost = 0;
    if (a->q.rule_len > 0) {
        if (rls_runtime_resolve(rt, a->q.rule, a->q.rule_len, a->q.key,
                                a->q.key_len, &spec) != RL_OK) {
            snprintf(msg, sizeof(msg), "unknown rule '%.*s'",
                     (int)a->q.rule_len, a->q.rule);
            *why = msg;
            return RL_ENORULE;
        }
        if (a->shadow && spec.mode == RLS_MODE_ENFORCE)
            spec.mode = RLS_MODE_SHADOW;
        if (spec.rule->concurrency != (a->q.op == RL_OP_ACQUIRE)) {
            snprintf(msg, sizeof(msg),
                     spec.rule->concurrency
                         ? "rule '%.*s' limits concurrency: ACQUIRE a lease"
                         : "rule '%.*s' limits a rate: ACQUIRE needs a "
                           "concurrency rule",
                     (int)a->q.rule_len, a->q.rule);
            *why = msg;
            return RL_EINVAL;
        }
        if (a->q.op == RL_OP_ACQUIRE)
            return rls_acquire(d, a, respond, owner, &spec, why);
    } else {
        if (a->q.op == RL_OP_ACQUIRE) {
            *why = "ACQUIRE needs a concurrency rule";
            return RL_EINVAL;
        }
        if (a->from_request && (rc = inline_allowed(rt, a, why)) != RL_OK)
            return rc;
        inline_spec(rt, a, &spec);
    }
    spec.counting = a->charge ? RLS_COUNT_NATIVE : a->counting;
    if (spec.counting != RLS_COUNT_NATIVE) {
        uint32_t i;
        /* The store decides these under other limits than the rule's
         * (batch.c): a stored quota would replace them there. */
        spec.quota = 0;
        for (i = 0; spec.counting == RLS_COUNT_ENVOY && i < spec.limits.n;
             i++)
            if (spec.limits.w[i].algo == RL_ALGO_SLIDING_LOG) {
                snprintf(msg, sizeof(msg),
                         "%s%.*s%s has a sliding-window limit, which "
                         "envoy-ratelimit's counting cannot count past (its "
                         "log is bounded by the limit): give the domain "
                         "'counting: native'",
                         a->q.rule_len ? "rule '" : "the descriptor",
                         (int)a->q.rule_len, a->q.rule ? a->q.rule : "",
                         a->q.rule_len ? "'" : "");
                *why = msg;
                return RL_EINVAL;
            }
    }
    if (a->charge) {
        /* Counted as consumed whatever the limit: raised out of reach, as
         * --fail-local's charges are (fail_local.c). */
        uint32_t i;
        spec.charge = 1;
        spec.quota = 0;
        for (i = 0; i < spec.limits.n; i++) {
            rls_limit_t *l = &spec.limits.w[i];
            l->limit = RLS_CHARGE_LIMIT;
            /* A gcra's cap stays within the 366 days every store
             * takes (the module refuses more). */
            if (l->algo == RL_ALGO_GCRA)
                l->burst = RL_GCRA_CAP_MAX_US / (l->t_us > 0 ? l->t_us : 1);
        }
    }
    if (a->q.op == RL_OP_RESERVE && (rc = rls_reserve_ready(d, why)) != RL_OK)
        return rc;
    if (spec.mode == RLS_MODE_OFF) {
        /* The kill switch: allowed, nothing counted. */
        rl_result_t r;

        rls_spec_off_result(&spec, a->q.id, &r);
        if (a->q.op == RL_OP_RESERVE)
            return rls_reserve_off(d, a, respond, owner, &spec, &r);
        respond(owner, &r);
        return RL_OK;
    }
    if (spec.rule == NULL && a->q.limit == 0 && !a->charge) {
        refuse_all(d, a, respond, owner, &spec);
        return RL_OK;
    }
    if (a->q.op == RL_OP_RESERVE) {
        if (rls_reserve(d, a, respond, owner, &spec, a->q.cost) != RL_OK) {
            *why = rl_strerror(RL_ENOMEM);
            return RL_ENOMEM;
        }
        return RL_OK;
    }
    if (rls_batcher_add(&d->batcher, respond, owner, a->q.id, a->q.key,
                        a->q.key_len, a->q.cost, &spec) != RL_OK) {
        *why = rl_strerror(RL_ENOMEM);
        return RL_ENOMEM;
    }
    return RL_OK;
}

/* A sampled ask's span wraps its answer: rls_trace_respond ends the span
 * and passes the answer on. Unsampled, or tracing off, it costs a test or
 * two (trace/tracer.h). */
int rls_decide(rls_decider_t *d, rls_ask_t *a, rls_respond_fn respond,
               void *owner, const char **why)
{
    rls_span_t *sp;
    int rc;

    if (d->tracer == NULL ||
        (sp = rls_trace_begin(d->tracer, a->parent,
                              a->q.rule_len > 0 ? a->q.rule : a->stats_name,
                              a->q.rule_len > 0 ? a->q.rule_len
                              : a->stats_name   ? a->stats_name_len
                                                : 0)) == NULL)
        return decide(d, a, respond, owner, why);
    sp->respond = respond;
    sp->owner = owner;
    if ((rc = decide(d, a, rls_trace_respond, sp, why)) != RL_OK)
        rls_trace_refused(d->tracer, sp, rc);
    return rc;
}

uint64_t rls_decider_hold_ns(const rls_decider_t *d)
{
    return d->batcher.hold_ns;
}

void rls_decider_set_hold_ns(rls_decider_t *d, uint64_t hold_ns)
{
    d->batcher.hold_ns = hold_ns;
}

uint64_t rls_decider_tick(rls_decider_t *d, uint64_t now_ns)
{
    return rls_batcher_tick(&d->batcher, now_ns);
}

void rls_decider_flush_now(rls_decider_t *d)
{
    rls_batcher_flush_now(&d->batcher);
}

void rls_decider_set_max_reqs(rls_decider_t *d, size_t max_reqs)
{
    d->batcher.max_reqs = max_reqs;
}

void rls_decider_before_change(rls_decider_t *d)
{
    rls_batcher_flush_now(&d->batcher);
    rls_refusals_invalidate(&d->batcher.refusals);
}

int rls_decider_busy(const rls_decider_t *d)
{
    return d->batcher.in_flight > 0;
}

rls_local_t *rls_decider_local(const rls_decider_t *d)
{
    return d->batcher.local;
}

const rls_batch_stats_t *rls_decider_stats(const rls_decider_t *d)
{
    return &d->batcher.stats;
}

const rls_refusal_stats_t *rls_decider_refusal_stats(const rls_decider_t *d)
{
    return &d->batcher.refusals.stats;
}

void rls_decider_share(const rls_decider_t *d, uint64_t now_s,
                       uint64_t *decided, uint64_t *failed)
{
    rls_batcher_share(&d->batcher, now_s, decided, failed);
}
