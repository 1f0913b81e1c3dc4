/* A request becomes a decision; see decide.h. */
#include "decide.h"

#include <stdio.h>
#include <string.h>

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
    if (rt->max_inline_window && a->window_s > rt->max_inline_window) {
        *why = "window_seconds is over this server's --max-inline-window";
        return RL_EINLINE;
    }
    if (rt->max_inline_limit && a->limit > rt->max_inline_limit) {
        *why = "limit is over this server's --max-inline-limit";
        return RL_EINLINE;
    }
    return RL_OK;
}

/* The answer to a limit of 0 from the operator's file: refused, with the
 * window's end as the time to retry, without asking the store. */
static void refuse_all(rls_batcher_t *b, const rls_ask_t *a,
                       rls_respond_fn respond, void *owner,
                       const rls_spec_t *spec)
{
    uint64_t now = b->store->v->now_ms(b->store);
    rl_result_t r;

    memset(&r, 0, sizeof(r));
    r.id = a->id;
    r.code = RL_CODE_OVER_LIMIT;
    r.window_s = a->window_s;
    r.reset_after_ms = r.retry_after_ms =
        rl_window_reset_after_ms(now, a->window_s);
    if (spec->mode == RLS_MODE_SHADOW) {
        r.code = RL_CODE_OK;
        r.retry_after_ms = 0;
        r.shadow_refused = 1;
        spec->stats->shadow_refused++;
    } else {
        spec->stats->refused++;
    }
    respond(owner, &r);
}

int rls_decide(rls_batcher_t *b, const rls_ask_t *a, rls_respond_fn respond,
               void *owner, const char **why)
{
    static char msg[RL_RULE_MAX + 32];
    rls_runtime_t *rt = b->rt;
    rls_spec_t spec;
    rl_check_t q;
    int rc;

    memset(&q, 0, sizeof(q));
    q.id = a->id;
    q.key = a->key;
    q.key_len = a->key_len;
    q.cost = a->cost;
    q.rule = a->rule;
    q.rule_len = a->rule_len;
    q.limit = a->limit;
    q.window_s = a->window_s;
    /* Envoy's limit of 0 is valid (it refuses everything); the check below
     * would take it for a native request that forgot its limit. */
    if (a->rule_len == 0 && a->ns == RLS_NS_ENVOY && a->limit == 0)
        q.limit = 1;
    if ((rc = rl_check_validate(&q)) != RL_OK) {
        *why = rl_strerror(rc);
        return rc;
    }
    if (a->rule_len > 0) {
        if (rls_runtime_resolve(rt, a->rule, a->rule_len, a->key, a->key_len,
                                &spec) != RL_OK) {
            snprintf(msg, sizeof(msg), "unknown rule '%.*s'",
                     (int)a->rule_len, a->rule);
            *why = msg;
            return RL_ENORULE;
        }
        if (a->shadow && spec.mode == RLS_MODE_ENFORCE)
            spec.mode = RLS_MODE_SHADOW;
    } else {
        if (a->from_request && (rc = inline_allowed(rt, a, why)) != RL_OK)
            return rc;
        memset(&spec, 0, sizeof(spec));
        spec.rule = NULL;
        spec.ns = a->ns != 0 ? a->ns : RLS_NS_INLINE;
        spec.stats = a->stats_name != NULL
                         ? rls_runtime_stats(rt, a->stats_name,
                                             a->stats_name_len)
                         : &rt->inline_stats;
        spec.mode = rt->sw.global_mode >= 0 ? rt->sw.global_mode
                    : a->shadow             ? RLS_MODE_SHADOW
                                            : RLS_MODE_ENFORCE;
        spec.limits.n = 1;
        if (a->algo != NULL)
            spec.limits.w[0] = *a->algo;
        spec.limits.w[0].limit = a->limit;
        spec.limits.w[0].window_s = a->window_s;
        spec.quota = 0;
        spec.scale = 1.0;
    }
    if (spec.mode == RLS_MODE_OFF) {
        /* The kill switch: allowed, nothing counted. */
        rl_result_t r;

        rls_spec_off_result(&spec, a->id, &r);
        respond(owner, &r);
        return RL_OK;
    }
    if (spec.rule == NULL && a->limit == 0) {
        refuse_all(b, a, respond, owner, &spec);
        return RL_OK;
    }
    if (rls_batcher_add(b, respond, owner, a->id, a->key, a->key_len, q.cost,
                        &spec) != RL_OK) {
        *why = rl_strerror(RL_ENOMEM);
        return RL_ENOMEM;
    }
    return RL_OK;
}
