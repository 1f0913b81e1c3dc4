/* Reservations and leases (reserve.h): RESERVE goes through the batcher
 * as a check of its estimate and comes back with a signed handle; SETTLE,
 * ACQUIRE, RELEASE and RENEW are one store step each (rls_store_reserve),
 * bounded in time on the decider's loop. */
#include "core/reserve.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rl_error.h"
#include "rl_validate.h"
#include "rl_window.h"

/* Reservations and leases: what one RESERVE, SETTLE, ACQUIRE, RELEASE or
 * RENEW carries until its answer. */
typedef struct {
    rls_decider_t *d;
    rls_respond_fn respond;
    void *owner;
    uint64_t id;
    rls_rule_stats_t *stats;
    int mode; /* RLS_MODE_*: a lease refused in shadow mode is OK */
    uint64_t lease_ms;
    rls_handle_t h; /* its strings point at key and rule below */
    char key[RL_KEY_MAX];
    char rule[RL_RULE_MAX];
    uint8_t phase[RLS_WINDOWS_MAX];
    rls_reserve_op_t x;
    rls_op_window_t win[RL_ADMIT_WINDOWS_MAX];
    uint8_t opkey[RLS_OPKEY_MAX];
    /* The store's step, bounded in time (xop_send). */
    rls_reserve_op_cb done; /* settled() or leased() */
    uv_timer_t timer;
    int timing;   /* the timer runs or closes */
    int answered; /* done() ran: by the store or by the timeout */
    int refs;     /* the store's callback, the timer's close */
} xctx_t;

static const char not_ready[] =
    "not ready for reservations and leases: no handle secret";

int rls_reserve_ready(const rls_decider_t *d, const char **why)
{
    if (!d->hkey.set) {
        *why = not_ready;
        return RL_EINVAL;
    }
    return RL_OK;
}

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

static xctx_t *xctx_new(rls_decider_t *d, const rls_ask_t *a,
                        rls_respond_fn respond, void *owner)
{
    xctx_t *c = calloc(1, sizeof(*c));

    if (c == NULL)
        return NULL;
    c->d = d;
    c->respond = respond;
    c->owner = owner;
    c->id = a->q.id;
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
    rls_decider_t *d = c->d;

    c->x.kind = kind;
    c->x.key = (const char *)c->opkey;
    c->x.key_len = rls_op_key(d->batcher.prefix, d->batcher.prefix_len,
                              c->h.key, c->h.key_len, c->h.rule, c->h.rule_len,
                              c->h.ns, c->opkey, &c->x.tag_len);
    c->x.now_ms = now;
    c->x.id = c->h.id;
}

static void answer_handle(xctx_t *c, rl_result_t *r)
{
    uint8_t buf[RL_HANDLE_MAX];

    r->handle = buf;
    r->handle_len = rls_handle_encode(&c->h, &c->d->hkey, buf);
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
        now = c->d->store->v->now_ms(c->d->store);
    /* Nothing was charged: a shadow refusal, fail-open. */
    if (r->shadow_refused || r->failed_open || r->decided_at_ms == 0)
        h->flags |= RLS_HANDLE_UNCHARGED;
    h->decided_at_ms = now;
    h->expires_at_ms = now + c->d->reserve.ttl_ms;
    for (i = 0; i < h->nwin; i++) {
        rls_hwin_t *w = &h->win[i];
        uint64_t off = c->phase[i]
                           ? rl_phase_offset_ms(h->key, h->key_len, w->window_s)
                           : 0;
        if (w->algo == RL_ALGO_GCRA || w->algo == RL_ALGO_SLIDING_LOG)
            continue;
        w->phased = off != 0;
        w->index = off == 0 ? rl_window_index(now, w->window_s)
                            : (now - off) / ((uint64_t)w->window_s * 1000);
    }
    a.expires_at_ms = h->expires_at_ms;
    answer_handle(c, &a);
    free(c);
}

int rls_reserve(rls_decider_t *d, const rls_ask_t *a, rls_respond_fn respond,
                void *owner, const rls_spec_t *spec, uint32_t cost)
{
    xctx_t *c = xctx_new(d, a, respond, owner);
    uint32_t i;

    if (c == NULL)
        return RL_ENOMEM;
    xctx_names(c, a->q.key, a->q.key_len, spec->rule ? spec->rule->name : NULL,
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
    if (spec->stats->reserves++ == 0 && d->batcher.refusals.slots != NULL)
        rls_refusals_invalidate(&d->batcher.refusals);
    for (i = 0; i < spec->limits.n; i++) {
        const rls_limit_t *l = &spec->limits.w[i];
        c->h.win[i].algo = l->algo;
        c->h.win[i].window_s = l->window_s;
        c->h.win[i].t_us = l->t_us;
        c->phase[i] = l->phase;
    }
    if (rls_batcher_add(&d->batcher, reserved, c, a->q.id, a->q.key,
                        a->q.key_len, cost, spec) != RL_OK) {
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
    rls_reserve_op_t x = c->x;

    x.err = RL_ETIMEDOUT;
    c->answered = 1;
    c->refs++; /* done() releases one */
    c->done(c, &x);
    uv_close((uv_handle_t *)t, on_xtimer_closed);
}

static void on_xop(void *data, rls_reserve_op_t *x)
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
static void xop_send(xctx_t *c, rls_reserve_op_cb done)
{
    rls_decider_t *d = c->d;

    c->done = done;
    c->refs = 1;
    if (d->reserve.loop != NULL && d->reserve.xop_timeout_ms > 0) {
        uv_timer_init(d->reserve.loop, &c->timer);
        c->timer.data = c;
        c->timing = 1;
        c->refs++;
        uv_timer_start(&c->timer, on_xop_timeout, d->reserve.xop_timeout_ms, 0);
    }
    rls_store_reserve(d->store, &c->x, on_xop, c);
}

static void settled(void *data, rls_reserve_op_t *x)
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
static rls_rule_stats_t *handle_stats(rls_decider_t *d, const rls_handle_t *h,
                                      rls_spec_t *spec)
{
    if (h->rule_len == 0 ||
        rls_runtime_resolve(d->rt, h->rule, h->rule_len, h->key, h->key_len,
                            spec) != RL_OK)
        return NULL;
    return spec->stats;
}

static int take_handle(rls_decider_t *d, const rls_ask_t *a, int kind,
                       rls_handle_t *h, const char **why)
{
    if (!d->hkey.set) {
        *why = not_ready;
        return RL_EINVAL;
    }
    if (a->q.handle_len == 0) {
        *why = "this op needs the handle RESERVE or ACQUIRE returned";
        return RL_EINVAL;
    }
    if (rls_handle_decode(a->q.handle, a->q.handle_len, &d->hkey, h, why) !=
        RL_OK)
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

int rls_settle(rls_decider_t *d, const rls_ask_t *a, rls_respond_fn respond,
               void *owner, const char **why)
{
    rls_handle_t h;
    rls_spec_t spec;
    rls_rule_stats_t *st;
    uint64_t now;
    xctx_t *c;
    uint32_t i;

    if (take_handle(d, a, RLS_HANDLE_RESERVATION, &h, why) != RL_OK)
        return RL_EINVAL;
    if (a->q.actual > UINT32_MAX) {
        *why = "actual is over 4294967295";
        return RL_EINVAL;
    }
    st = handle_stats(d, &h, &spec);
    if (st != NULL && st->reserves++ == 0 && d->batcher.refusals.slots != NULL)
        rls_refusals_invalidate(&d->batcher.refusals); /* as in reserve() */
    now = d->store->v->now_ms(d->store);
    if (now >= h.expires_at_ms) {
        if (st)
            st->xop_errors++;
        *why = "reservation expired: its estimate stays charged";
        return RL_EINVAL;
    }
    if (h.flags & RLS_HANDLE_UNCHARGED) {
        rl_result_t r;
        memset(&r, 0, sizeof(r));
        r.id = a->q.id;
        r.code = RL_CODE_OK;
        r.decided_at_ms = now;
        respond(owner, &r);
        return RL_OK;
    }
    if ((c = xctx_new(d, a, respond, owner)) == NULL)
        return RL_ENOMEM;
    c->stats = st;
    c->h = h;
    xctx_names(c, h.key, h.key_len, h.rule, h.rule_len);
    xctx_key(c, RLS_XOP_SETTLE, now);
    c->x.until_ms = h.expires_at_ms;
    c->x.delta = (int64_t)a->q.actual - (int64_t)h.estimate;
    c->x.decided_at_ms = h.decided_at_ms;
    c->x.settled_max = settled_max(st != NULL ? &spec : NULL);
    c->x.marker = h.version < 2;
    for (i = 0; i < h.nwin; i++) {
        rls_op_window_t *w = &c->win[i];
        w->algo = h.win[i].algo;
        w->phased = h.win[i].phased;
        w->window_s = h.win[i].window_s;
        w->index = h.win[i].index;
        w->t_us = h.win[i].t_us;
        w->expire_at_ms = d->batcher.grace_ms;
    }
    c->x.win = c->win;
    c->x.nwin = h.nwin;
    xop_send(c, settled);
    return RL_OK;
}

/* ACQUIRE's, RELEASE's and RENEW's answers. */
static void leased(void *data, rls_reserve_op_t *x)
{
    xctx_t *c = data;
    rls_decider_t *d = c->d;
    rls_rule_stats_t *st = c->stats;
    rl_result_t r;
    char text[160];

    memset(&r, 0, sizeof(r));
    r.id = c->id;
    r.decided_at_ms = x->now_ms;
    if (x->err != 0 && x->kind == RLS_XOP_ACQUIRE &&
        d->batcher.fail_open == 1) {
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
        d->batcher.stats.failed_open++;
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
        } else {
            r.code = RL_CODE_OVER_LIMIT;
            r.retry_after_ms =
                x->earliest_ms > x->now_ms ? x->earliest_ms - x->now_ms : 1;
            r.reset_after_ms = r.retry_after_ms;
            if (rls_refusal_answer(&r, c->mode, st)) {
                /* Shadow: allowed, nothing taken, a handle that releases
                 * nothing. */
                r.reset_after_ms = 0;
                r.expires_at_ms = x->until_ms;
                c->h.flags |= RLS_HANDLE_UNCHARGED;
                answer_handle(c, &r);
            } else {
                rls_top_refused(d->batcher.top, st, c->h.key, c->h.key_len,
                                x->now_ms);
                c->respond(c->owner, &r);
            }
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

int rls_acquire(rls_decider_t *d, const rls_ask_t *a, rls_respond_fn respond,
                void *owner, const rls_spec_t *spec, const char **why)
{
    uint64_t now = d->store->v->now_ms(d->store);
    xctx_t *c;

    if (!d->hkey.set) {
        *why = not_ready;
        return RL_EINVAL;
    }
    if ((c = xctx_new(d, a, respond, owner)) == NULL)
        return RL_ENOMEM;
    xctx_names(c, a->q.key, a->q.key_len, spec->rule->name,
               spec->rule->name_len);
    c->h.kind = RLS_HANDLE_LEASE;
    c->h.id = rls_handle_new_id();
    c->stats = spec->stats;
    c->mode = spec->mode;
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
        rls_spec_off_result(spec, a->q.id, &r);
        r.expires_at_ms = c->x.until_ms;
        c->h.flags |= RLS_HANDLE_UNCHARGED;
        answer_handle(c, &r);
        free(c);
        return RL_OK;
    }
    xop_send(c, leased);
    return RL_OK;
}

int rls_release_renew(rls_decider_t *d, const rls_ask_t *a,
                      rls_respond_fn respond, void *owner, const char **why)
{
    static _Thread_local char msg[RL_RULE_MAX + 64];
    int renew = a->q.op == RL_OP_RENEW;
    rls_handle_t h;
    rls_spec_t spec;
    uint64_t now;
    xctx_t *c;

    if (take_handle(d, a, RLS_HANDLE_LEASE, &h, why) != RL_OK)
        return RL_EINVAL;
    now = d->store->v->now_ms(d->store);
    memset(&spec, 0, sizeof(spec));
    if (handle_stats(d, &h, &spec) == NULL && renew) {
        snprintf(msg, sizeof(msg), "rule '%.*s' no longer exists",
                 (int)h.rule_len, h.rule);
        *why = msg;
        return RL_ENORULE;
    }
    if ((c = xctx_new(d, a, respond, owner)) == NULL)
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
        r.id = a->q.id;
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
int rls_reserve_off(rls_decider_t *d, const rls_ask_t *a,
                    rls_respond_fn respond, void *owner, const rls_spec_t *spec,
                    rl_result_t *r)
{
    xctx_t *c = xctx_new(d, a, respond, owner);

    if (c == NULL)
        return RL_ENOMEM;
    r->decided_at_ms = 0; /* reserved() marks it uncharged */
    xctx_names(c, a->q.key, a->q.key_len, spec->rule ? spec->rule->name : NULL,
               spec->rule ? spec->rule->name_len : 0);
    c->h.kind = RLS_HANDLE_RESERVATION;
    c->h.ns = spec->rule ? 0 : (uint8_t)spec->ns;
    c->h.id = rls_handle_new_id();
    c->h.estimate = a->q.cost ? a->q.cost : 1;
    reserved(c, r);
    return RL_OK;
}
