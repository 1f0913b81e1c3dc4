/* A request becomes a decision; see decide.h. */
#include "core/decide.h"

#include <stdio.h>
#include <string.h>

#include <stdlib.h>

#include "core/handle.h"
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

/* A charge's limit (decide.h): out of reach of any count. */
#define RLS_CHARGE_LIMIT ((uint64_t)1 << 62)

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

/* Reservations and leases: what one RESERVE, SETTLE, ACQUIRE, RELEASE or
 * RENEW carries until its answer. */
typedef struct {
    rls_batcher_t *b;
    rls_respond_fn respond;
    void *owner;
    uint64_t id;
    rls_rule_stats_t *stats;
    int shadow;
    uint64_t lease_ms;
    rls_handle_t h; /* its strings point at key and rule below */
    char key[RL_KEY_MAX];
    char rule[RL_RULE_MAX];
    uint8_t phase[RLS_WINDOWS_MAX];
    rls_xop_t x;
    rls_wop_t win[RL_ADMIT_WINDOWS_MAX];
    uint8_t opkey[RLS_OPKEY_MAX];
    /* The store's step, bounded in time (xop_send). */
    rls_xop_cb done; /* settled() or leased() */
    uv_timer_t timer;
    int timing;   /* the timer runs or closes */
    int answered; /* done() ran: by the store or by the timeout */
    int refs;     /* the store's callback, the timer's close */
} xctx_t;

static const char not_ready[] =
    "not ready for reservations and leases: no handle secret";

static void answer_error(rls_respond_fn respond, void *owner, uint64_t id,
                         const char *why)
{
    rl_result_t r;

    memset(&r, 0, sizeof(r));
    r.id = id;
    r.code = RL_CODE_ERROR;
    r.error = why;
    r.error_len = strlen(why);
    respond(owner, &r);
}

static xctx_t *xctx_new(rls_batcher_t *b, const rls_ask_t *a,
                        rls_respond_fn respond, void *owner)
{
    xctx_t *c = calloc(1, sizeof(*c));

    if (c == NULL)
        return NULL;
    c->b = b;
    c->respond = respond;
    c->owner = owner;
    c->id = a->id;
    return c;
}

/* The handle's caller and rule: copied, the ask's are the front end's. */
static void xctx_names(xctx_t *c, const char *key, size_t key_len,
                       const char *rule, size_t rule_len)
{
    memcpy(c->key, key, key_len);
    c->h.key = c->key;
    c->h.key_len = key_len;
    if (rule_len > 0)
        memcpy(c->rule, rule, rule_len);
    c->h.rule = c->rule;
    c->h.rule_len = rule_len;
}

/* Points x at the handle's counters: "<prefix>{<caller>}:r:<rule>". */
static void xctx_key(xctx_t *c, int kind, uint64_t now)
{
    rls_batcher_t *b = c->b;

    c->x.kind = kind;
    c->x.key = (const char *)c->opkey;
    c->x.key_len =
        rls_op_key(b->prefix, b->prefix_len, c->h.key, c->h.key_len, c->h.rule,
                   c->h.rule_len, c->h.ns, c->opkey, &c->x.tag_len);
    c->x.now_ms = now;
    c->x.id = c->h.id;
}

static void answer_handle(xctx_t *c, rl_result_t *r)
{
    uint8_t buf[RL_HANDLE_MAX];

    r->handle = buf;
    r->handle_len = rls_handle_encode(&c->h, &c->b->hkey, buf);
    c->respond(c->owner, r);
}

/* RESERVE's answer from the batcher: a handle when allowed. */
static void reserved(void *owner, const rl_result_t *r)
{
    xctx_t *c = owner;
    rls_handle_t *h = &c->h;
    rl_result_t a = *r;
    uint64_t now = r->decided_at_ms;
    uint32_t i;

    if (r->code != RL_CODE_OK) {
        c->respond(c->owner, r);
        free(c);
        return;
    }
    if (now == 0)
        now = c->b->store->v->now_ms(c->b->store);
    /* Nothing was charged: a shadow refusal, fail-open. */
    if (r->shadow_refused || r->failed_open || r->decided_at_ms == 0)
        h->flags |= RLS_HANDLE_UNCHARGED;
    h->decided_at_ms = now;
    h->expires_at_ms = now + c->b->reserve_ttl_ms;
    for (i = 0; i < h->nwin; i++) {
        rls_hwin_t *w = &h->win[i];
        uint64_t off = c->phase[i]
                           ? rl_phase_offset_ms(h->key, h->key_len, w->window_s)
                           : 0;
        if (w->algo == RL_ALGO_GCRA || w->algo == RL_ALGO_SWL)
            continue;
        w->phased = off != 0;
        w->index = off == 0 ? rl_window_index(now, w->window_s)
                            : (now - off) / ((uint64_t)w->window_s * 1000);
    }
    a.expires_at_ms = h->expires_at_ms;
    answer_handle(c, &a);
    free(c);
}

static int reserve(rls_batcher_t *b, const rls_ask_t *a, rls_respond_fn respond,
                   void *owner, const rls_spec_t *spec, uint32_t cost)
{
    xctx_t *c = xctx_new(b, a, respond, owner);
    uint32_t i;

    if (c == NULL)
        return RL_ENOMEM;
    xctx_names(c, a->key, a->key_len, spec->rule ? spec->rule->name : NULL,
               spec->rule ? spec->rule->name_len : 0);
    c->h.kind = RLS_HANDLE_RESERVATION;
    c->h.ns = spec->rule ? 0 : (uint8_t)spec->ns;
    c->h.id = rls_handle_new_id();
    c->h.estimate = cost;
    c->h.nwin = spec->limits.n;
    /* From now on this rule's refusals are not cached here: a refund
     * would free room the cache cannot see. What the cache learnt before
     * goes (it cannot tell this rule's entries apart, and this happens
     * once per rule). */
    if (spec->stats->reserves++ == 0 && b->refusals.slots != NULL)
        rls_refusals_invalidate(&b->refusals);
    for (i = 0; i < spec->limits.n; i++) {
        const rls_limit_t *l = &spec->limits.w[i];
        c->h.win[i].algo = l->algo;
        c->h.win[i].window_s = l->window_s;
        c->h.win[i].t_us = l->t_us;
        c->phase[i] = l->phase;
    }
    if (rls_batcher_add(b, reserved, c, a->id, a->key, a->key_len, cost,
                        spec) != RL_OK) {
        free(c);
        return RL_ENOMEM;
    }
    return RL_OK;
}

static const char *store_text(int err)
{
    /* A step that timed out may still run in the store: retrying is safe
     * (a settlement happens once; a lease taken unknowingly ends by
     * itself). */
    return err == RL_ETIMEDOUT
               ? "store timeout: it may or may not have been applied; "
                 "retrying is safe"
               : "store unavailable: nothing changed, try again";
}

static void xctx_release(xctx_t *c)
{
    if (--c->refs == 0)
        free(c);
}

static void on_xtimer_closed(uv_handle_t *h)
{
    xctx_release(h->data);
}

/* No answer from the store in time: answered as a store timeout; what the
 * store says later is dropped. */
static void on_xop_timeout(uv_timer_t *t)
{
    xctx_t *c = t->data;
    rls_xop_t x = c->x;

    x.err = RL_ETIMEDOUT;
    c->answered = 1;
    c->refs++; /* done() releases one */
    c->done(c, &x);
    uv_close((uv_handle_t *)t, on_xtimer_closed);
}

static void on_xop(void *data, rls_xop_t *x)
{
    xctx_t *c = data;

    if (c->answered) {
        xctx_release(c); /* timed out before */
        return;
    }
    c->answered = 1;
    if (c->timing) {
        uv_timer_stop(&c->timer);
        uv_close((uv_handle_t *)&c->timer, on_xtimer_closed);
    }
    c->done(c, x);
}

/* Sends c's step to the store; done(c, x) answers it exactly once, within
 * the store's timeout (the batches' --redis-timeout-ms). */
static void xop_send(xctx_t *c, rls_xop_cb done)
{
    rls_batcher_t *b = c->b;

    c->done = done;
    c->refs = 1;
    if (b->loop != NULL && b->xop_timeout_ms > 0) {
        uv_timer_init(b->loop, &c->timer);
        c->timer.data = c;
        c->timing = 1;
        c->refs++;
        uv_timer_start(&c->timer, on_xop_timeout, b->xop_timeout_ms, 0);
    }
    rls_store_xop(b->store, &c->x, on_xop, c);
}

static void settled(void *data, rls_xop_t *x)
{
    xctx_t *c = data;
    rl_result_t r;

    memset(&r, 0, sizeof(r));
    r.id = c->id;
    if (x->err != 0) {
        answer_error(c->respond, c->owner, c->id, store_text(x->err));
    } else if (x->result != 1) {
        if (c->stats)
            c->stats->xop_errors++;
        answer_error(c->respond, c->owner, c->id,
                     "reservation already settled (or older than the "
                     "settlements kept for its caller): nothing changed");
    } else {
        if (c->stats) {
            c->stats->settled++;
            if (x->delta < 0)
                c->stats->refunded += (uint64_t)-x->delta;
            else
                c->stats->excess += (uint64_t)x->delta;
        }
        r.code = RL_CODE_OK;
        r.decided_at_ms = x->now_ms;
        c->respond(c->owner, &r);
    }
    xctx_release(c);
}

/* The rule's statistics for a handle, if the rule still exists. */
static rls_rule_stats_t *handle_stats(rls_batcher_t *b, const rls_handle_t *h,
                                      rls_spec_t *spec)
{
    if (h->rule_len == 0 ||
        rls_runtime_resolve(b->rt, h->rule, h->rule_len, h->key, h->key_len,
                            spec) != RL_OK)
        return NULL;
    return spec->stats;
}

static int take_handle(rls_batcher_t *b, const rls_ask_t *a, int kind,
                       rls_handle_t *h, const char **why)
{
    if (!b->hkey.set) {
        *why = not_ready;
        return RL_EINVAL;
    }
    if (a->handle_len == 0) {
        *why = "this op needs the handle RESERVE or ACQUIRE returned";
        return RL_EINVAL;
    }
    if (rls_handle_decode(a->handle, a->handle_len, &b->hkey, h, why) != RL_OK)
        return RL_EINVAL;
    if (h->kind != kind) {
        *why = kind == RLS_HANDLE_RESERVATION
                   ? "SETTLE takes a reservation's handle; this is a lease's"
                   : "RELEASE and RENEW take a lease's handle; this is a "
                     "reservation's";
        return RL_EINVAL;
    }
    return RL_OK;
}

/* How many settled ids the caller's set keeps (store.h, RLS_SETTLED_*):
 * what it can be made to hold is bounded by its rule's largest limit, not
 * by how often it reserves and refunds. spec: the rule as resolved now, or
 * NULL when it is not known. */
static uint64_t settled_max(const rls_spec_t *spec)
{
    uint64_t lim = 0;
    uint32_t i;

    if (spec == NULL)
        return RLS_SETTLED_DEFAULT;
    for (i = 0; i < spec->limits.n; i++)
        if (spec->limits.w[i].limit > lim)
            lim = spec->limits.w[i].limit;
    return lim < RLS_SETTLED_MIN   ? RLS_SETTLED_MIN
           : lim > RLS_SETTLED_MAX ? RLS_SETTLED_MAX
                                   : lim;
}

static int settle(rls_batcher_t *b, const rls_ask_t *a, rls_respond_fn respond,
                  void *owner, const char **why)
{
    rls_handle_t h;
    rls_spec_t spec;
    rls_rule_stats_t *st;
    uint64_t now;
    xctx_t *c;
    uint32_t i;

    if (take_handle(b, a, RLS_HANDLE_RESERVATION, &h, why) != RL_OK)
        return RL_EINVAL;
    if (a->actual > UINT32_MAX) {
        *why = "actual is over 4294967295";
        return RL_EINVAL;
    }
    st = handle_stats(b, &h, &spec);
    if (st != NULL && st->reserves++ == 0 && b->refusals.slots != NULL)
        rls_refusals_invalidate(&b->refusals); /* as in reserve() */
    now = b->store->v->now_ms(b->store);
    if (now >= h.expires_at_ms) {
        if (st)
            st->xop_errors++;
        *why = "reservation expired: its estimate stays charged";
        return RL_EINVAL;
    }
    if (h.flags & RLS_HANDLE_UNCHARGED) {
        rl_result_t r;
        memset(&r, 0, sizeof(r));
        r.id = a->id;
        r.code = RL_CODE_OK;
        r.decided_at_ms = now;
        respond(owner, &r);
        return RL_OK;
    }
    if ((c = xctx_new(b, a, respond, owner)) == NULL)
        return RL_ENOMEM;
    c->stats = st;
    c->h = h;
    xctx_names(c, h.key, h.key_len, h.rule, h.rule_len);
    xctx_key(c, RLS_XOP_SETTLE, now);
    c->x.until_ms = h.expires_at_ms;
    c->x.delta = (int64_t)a->actual - (int64_t)h.estimate;
    c->x.decided_at_ms = h.decided_at_ms;
    c->x.settled_max = settled_max(st != NULL ? &spec : NULL);
    c->x.marker = h.version < 2;
    for (i = 0; i < h.nwin; i++) {
        rls_wop_t *w = &c->win[i];
        w->algo = h.win[i].algo;
        w->phased = h.win[i].phased;
        w->window_s = h.win[i].window_s;
        w->index = h.win[i].index;
        w->t_us = h.win[i].t_us;
        w->expire_at_ms = b->grace_ms;
    }
    c->x.win = c->win;
    c->x.nwin = h.nwin;
    xop_send(c, settled);
    return RL_OK;
}

/* ACQUIRE's, RELEASE's and RENEW's answers. */
static void leased(void *data, rls_xop_t *x)
{
    xctx_t *c = data;
    rls_batcher_t *b = c->b;
    rls_rule_stats_t *st = c->stats;
    rl_result_t r;
    char text[160];

    memset(&r, 0, sizeof(r));
    r.id = c->id;
    r.decided_at_ms = x->now_ms;
    if (x->err != 0 && x->kind == RLS_XOP_ACQUIRE && b->fail_open == 1) {
        /* Fail-open: allowed, nothing counted, a handle that releases
         * nothing. */
        snprintf(text, sizeof(text), "%s; failed open",
                 x->err == RL_ETIMEDOUT ? "store timeout"
                                        : "store unavailable");
        r.code = RL_CODE_OK;
        r.failed_open = 1;
        r.error = text;
        r.error_len = strlen(text);
        r.limit = x->limit;
        r.remaining = x->limit;
        r.expires_at_ms = x->until_ms;
        c->h.flags |= RLS_HANDLE_UNCHARGED;
        b->stats.failed_open++;
        answer_handle(c, &r);
    } else if (x->err != 0) {
        answer_error(c->respond, c->owner, c->id, store_text(x->err));
    } else if (x->kind == RLS_XOP_ACQUIRE) {
        r.limit = x->qlimit != 0 ? x->qlimit : x->limit;
        r.used = x->count;
        r.window_s = (uint32_t)(c->lease_ms / 1000);
        if (x->result == 1) {
            r.code = RL_CODE_OK;
            r.remaining = r.limit > x->count ? r.limit - x->count : 0;
            r.expires_at_ms = x->until_ms;
            r.reset_after_ms = c->lease_ms;
            if (st)
                st->allowed++;
            answer_handle(c, &r);
        } else if (c->shadow) {
            r.code = RL_CODE_OK;
            r.shadow_refused = 1;
            r.expires_at_ms = x->until_ms;
            c->h.flags |= RLS_HANDLE_UNCHARGED;
            if (st)
                st->shadow_refused++;
            answer_handle(c, &r);
        } else {
            r.code = RL_CODE_OVER_LIMIT;
            r.retry_after_ms =
                x->earliest_ms > x->now_ms ? x->earliest_ms - x->now_ms : 1;
            r.reset_after_ms = r.retry_after_ms;
            if (st)
                st->refused++;
            c->respond(c->owner, &r);
        }
    } else if (x->result != 1) {
        if (st)
            st->xop_errors++;
        answer_error(c->respond, c->owner, c->id,
                     x->kind == RLS_XOP_RELEASE
                         ? "lease not held: released already, ended (not "
                           "renewed in time), or never granted"
                         : "lease ended (not renewed in time) or released: "
                           "ACQUIRE a new one");
    } else {
        r.code = RL_CODE_OK;
        if (x->kind == RLS_XOP_RENEW) {
            r.expires_at_ms = x->until_ms;
            r.used = x->count;
            if (st)
                st->renewed++;
        } else if (st) {
            st->released++;
        }
        c->respond(c->owner, &r);
    }
    xctx_release(c);
}

static int acquire(rls_batcher_t *b, const rls_ask_t *a, rls_respond_fn respond,
                   void *owner, const rls_spec_t *spec, const char **why)
{
    uint64_t now = b->store->v->now_ms(b->store);
    xctx_t *c;

    if (!b->hkey.set) {
        *why = not_ready;
        return RL_EINVAL;
    }
    if ((c = xctx_new(b, a, respond, owner)) == NULL)
        return RL_ENOMEM;
    xctx_names(c, a->key, a->key_len, spec->rule->name, spec->rule->name_len);
    c->h.kind = RLS_HANDLE_LEASE;
    c->h.id = rls_handle_new_id();
    c->stats = spec->stats;
    c->shadow = spec->mode == RLS_MODE_SHADOW;
    c->lease_ms = (uint64_t)spec->limits.w[0].window_s * 1000;
    xctx_key(c, RLS_XOP_ACQUIRE, now);
    c->x.limit = spec->limits.w[0].limit;
    c->x.until_ms = now + c->lease_ms;
    if (spec->quota) {
        /* rl-ctl stores quotas for this rule: the caller's may set N. */
        c->x.quota = c->rule;
        c->x.quota_len = c->h.rule_len;
        c->x.scale = spec->scale;
    }
    if (spec->mode == RLS_MODE_OFF) {
        rl_result_t r;
        rls_spec_off_result(spec, a->id, &r);
        r.expires_at_ms = c->x.until_ms;
        c->h.flags |= RLS_HANDLE_UNCHARGED;
        answer_handle(c, &r);
        free(c);
        return RL_OK;
    }
    xop_send(c, leased);
    return RL_OK;
}

static int release_renew(rls_batcher_t *b, const rls_ask_t *a,
                         rls_respond_fn respond, void *owner, const char **why)
{
    static char msg[RL_RULE_MAX + 64];
    int renew = a->op == RL_OP_RENEW;
    rls_handle_t h;
    rls_spec_t spec;
    uint64_t now;
    xctx_t *c;

    if (take_handle(b, a, RLS_HANDLE_LEASE, &h, why) != RL_OK)
        return RL_EINVAL;
    now = b->store->v->now_ms(b->store);
    memset(&spec, 0, sizeof(spec));
    if (handle_stats(b, &h, &spec) == NULL && renew) {
        snprintf(msg, sizeof(msg), "rule '%.*s' no longer exists",
                 (int)h.rule_len, h.rule);
        *why = msg;
        return RL_ENORULE;
    }
    if ((c = xctx_new(b, a, respond, owner)) == NULL)
        return RL_ENOMEM;
    c->h = h;
    c->stats = spec.stats;
    xctx_names(c, h.key, h.key_len, h.rule, h.rule_len);
    xctx_key(c, renew ? RLS_XOP_RENEW : RLS_XOP_RELEASE, now);
    if (renew)
        c->x.until_ms = now + (uint64_t)spec.limits.w[0].window_s * 1000;
    if (h.flags & RLS_HANDLE_UNCHARGED) {
        rl_result_t r;
        memset(&r, 0, sizeof(r));
        r.id = a->id;
        r.code = RL_CODE_OK;
        r.expires_at_ms = c->x.until_ms;
        respond(owner, &r);
        free(c);
        return RL_OK;
    }
    xop_send(c, leased);
    return RL_OK;
}

/* RESERVE under the kill switch: allowed, a handle that charges nothing. */
static int reserve_off(xctx_t *c, const rls_ask_t *a, const rls_spec_t *spec,
                       const rl_result_t *r)
{
    xctx_names(c, a->key, a->key_len, spec->rule ? spec->rule->name : NULL,
               spec->rule ? spec->rule->name_len : 0);
    c->h.kind = RLS_HANDLE_RESERVATION;
    c->h.ns = spec->rule ? 0 : (uint8_t)spec->ns;
    c->h.id = rls_handle_new_id();
    c->h.estimate = a->cost ? a->cost : 1;
    reserved(c, r);
    return RL_OK;
}

int rls_decide(rls_batcher_t *b, const rls_ask_t *a, rls_respond_fn respond,
               void *owner, const char **why)
{
    static char msg[RL_RULE_MAX + 96];
    rls_runtime_t *rt = b->rt;
    rls_spec_t spec;
    rl_check_t q;
    int rc;

    switch (a->op) {
    case RL_OP_CHECK:
    case RL_OP_RESERVE:
    case RL_OP_ACQUIRE:
        break;
    case RL_OP_SETTLE:
        return settle(b, a, respond, owner, why);
    case RL_OP_RELEASE:
    case RL_OP_RENEW:
        return release_renew(b, a, respond, owner, why);
    default:
        snprintf(msg, sizeof(msg), "unknown op %u (this server knows 0-5)",
                 a->op);
        *why = msg;
        return RL_EINVAL;
    }
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
    /* Counted envoy-ratelimit's way, or compared alone, 0 adds nothing: a
     * read of the counters (validation reads it as 1, the native rule). */
    if (a->counting != RLS_COUNT_NATIVE && !a->charge && a->cost == 0)
        q.cost = 0;
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
        if (spec.rule->concurrency != (a->op == RL_OP_ACQUIRE)) {
            snprintf(msg, sizeof(msg),
                     spec.rule->concurrency
                         ? "rule '%.*s' limits concurrency: ACQUIRE a lease"
                         : "rule '%.*s' limits a rate: ACQUIRE needs a "
                           "concurrency rule",
                     (int)a->rule_len, a->rule);
            *why = msg;
            return RL_EINVAL;
        }
        if (a->op == RL_OP_ACQUIRE)
            return acquire(b, a, respond, owner, &spec, why);
    } else {
        if (a->op == RL_OP_ACQUIRE) {
            *why = "ACQUIRE needs a concurrency rule";
            return RL_EINVAL;
        }
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
    spec.counting = a->charge ? RLS_COUNT_NATIVE : a->counting;
    if (spec.counting != RLS_COUNT_NATIVE) {
        uint32_t i;
        /* The store decides these under other limits than the rule's
         * (batch.c): a stored quota would replace them there. */
        spec.quota = 0;
        for (i = 0; spec.counting == RLS_COUNT_ENVOY && i < spec.limits.n;
             i++)
            if (spec.limits.w[i].algo == RL_ALGO_SWL) {
                snprintf(msg, sizeof(msg),
                         "%s%.*s%s has a sliding-window limit, which "
                         "envoy-ratelimit's counting cannot count past (its "
                         "log is bounded by the limit): give the domain "
                         "'counting: native'",
                         a->rule_len ? "rule '" : "the descriptor",
                         (int)a->rule_len, a->rule ? a->rule : "",
                         a->rule_len ? "'" : "");
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
    if (a->op == RL_OP_RESERVE && !b->hkey.set) {
        *why = not_ready;
        return RL_EINVAL;
    }
    if (spec.mode == RLS_MODE_OFF) {
        /* The kill switch: allowed, nothing counted. */
        rl_result_t r;

        rls_spec_off_result(&spec, a->id, &r);
        if (a->op == RL_OP_RESERVE) {
            xctx_t *c = xctx_new(b, a, respond, owner);
            if (c == NULL)
                return RL_ENOMEM;
            r.decided_at_ms = 0; /* reserved() marks it uncharged */
            return reserve_off(c, a, &spec, &r);
        }
        respond(owner, &r);
        return RL_OK;
    }
    if (spec.rule == NULL && a->limit == 0 && !a->charge) {
        refuse_all(b, a, respond, owner, &spec);
        return RL_OK;
    }
    if (a->op == RL_OP_RESERVE) {
        if (reserve(b, a, respond, owner, &spec, q.cost) != RL_OK) {
            *why = rl_strerror(RL_ENOMEM);
            return RL_ENOMEM;
        }
        return RL_OK;
    }
    if (rls_batcher_add(b, respond, owner, a->id, a->key, a->key_len, q.cost,
                        &spec) != RL_OK) {
        *why = rl_strerror(RL_ENOMEM);
        return RL_ENOMEM;
    }
    return RL_OK;
}
