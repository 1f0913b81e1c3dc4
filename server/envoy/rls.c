/* Envoy's ShouldRateLimit, decided like a native request; see envoy_rls.h.
 *
 * Each descriptor is one request of the batcher, with the call as owner and
 * the descriptor's index as id, so the descriptors of one call, and of
 * every call and native connection of the same loop iteration, share one
 * batch. What the batcher answers is copied into the call's status slots
 * (its strings do not outlive the callback); the last answer completes the
 * call. A call holds a reference to the configuration it was mapped under
 * until it is freed, so a reload mid-call changes nothing for it. */
#include "envoy/rls.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "envoy/service/ratelimit/v3/rls.pb-c.h"
#include "google/protobuf/struct.pb-c.h"
#include "core/decide.h"
#include "base/log.h"
#include "envoy/pbvalue.h"
#include "envoy/stats.h"
#include "rl_clock.h"
#include "rl_headers.h"
#include "rl_error.h"
#include "rl_frame.h"
#include "rl_hash.h"
#include "rl_window.h"

typedef Envoy__Service__Ratelimit__V3__RateLimitRequest req_t;
typedef Envoy__Extensions__Common__Ratelimit__V3__RateLimitDescriptor desc_t;
typedef Envoy__Service__Ratelimit__V3__RateLimitResponse resp_t;
typedef Envoy__Service__Ratelimit__V3__RateLimitResponse__DescriptorStatus
    dstatus_t;
typedef Envoy__Service__Ratelimit__V3__RateLimitResponse__RateLimit ratelimit_t;
typedef Envoy__Config__Core__V3__HeaderValue header_t;
typedef Google__Protobuf__Duration duration_t;

#define CODE_OK 1
#define CODE_OVER 2

struct rls_envoy_status_s {
    int code;      /* CODE_OK or CODE_OVER */
    int decided;   /* a limit applied: current_limit and the rest are set */
    int unlimited; /* matched unlimited: true */
    int quota;     /* quota_mode: over, refuses the call only with every
                      other quota descriptor over too */
    const rls_envoy_node_t *node; /* matched (NULL: none, or replaced) */
    int from_request;             /* the request's own limit applies */
    int dropped;                  /* replaced by another limit */
    uint32_t rpu;  /* current_limit.requests_per_unit */
    int unit;
    const char *name; /* in the call's configuration; or NULL */
    size_t name_len;
    int rule;         /* name is a rules-file rule's */
    uint32_t stat;    /* its statistics series (rls_estats_slot) */
    uint32_t hits;    /* its cost, what the statistics count */
    uint32_t cost;    /* its hits_addend (envoy-stop's second step) */
    int stop;         /* envoy-stop: asked in the first step */
    int over;         /* envoy-stop: the first step found it going over */
    rl_result_t r; /* the decision (no strings) */
};

/* ------------------------------------------------------------------------ */
/* Counter keys */

static size_t put_escaped(char *out, size_t at, const char *s, size_t n)
{
    static const char hex[] = "0123456789ABCDEF";
    size_t i;

    for (i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (ch <= 0x20 || ch >= 0x7f || ch == '/' || ch == '=' || ch == '%' ||
            ch == '#') {
            if (at + 3 <= RLS_ENVOY_KEY_MAX * 4) {
                out[at++] = '%';
                out[at++] = hex[ch >> 4];
                out[at++] = hex[ch & 15];
            }
        } else if (at < RLS_ENVOY_KEY_MAX * 4) {
            out[at++] = (char)ch;
        }
    }
    return at;
}

size_t rls_envoy_key(char *out, const char *domain, size_t dlen,
                     const char *const *keys, const size_t *klens,
                     const char *const *values, const size_t *vlens, size_t n)
{
    /* Every server must build the same key for the same descriptor, so
     * the hash of a long key is under a fixed key, not a random one. It
     * only shortens keys; nothing is looked up by it in a table here. */
    static const rl_hash_key_t fixed = {0x72656e766f796b31u,
                                        0x6c696d69746b6579u};
    char full[RLS_ENVOY_KEY_MAX * 4];
    size_t at = 0, i;
    uint64_t h0, h1;

    /* Escaped, the whole key may be three times its bytes: build it in
     * `full` (bounded), shorten it if needed. */
    at = put_escaped(full, at, domain, dlen);
    for (i = 0; i < n; i++) {
        if (at < sizeof(full))
            full[at++] = '/';
        at = put_escaped(full, at, keys[i], klens[i]);
        if (at < sizeof(full))
            full[at++] = '=';
        at = put_escaped(full, at, values[i], vlens[i]);
    }
    if (at <= RLS_ENVOY_KEY_MAX && at < sizeof(full)) {
        memcpy(out, full, at);
        return at;
    }
    /* Hash the unescaped parts, whole, so that what the bounded buffer
     * dropped still tells keys apart. */
    h0 = rl_siphash24(&fixed, domain, dlen);
    for (i = 0; i < n; i++) {
        uint64_t part[3];
        part[0] = h0;
        part[1] = rl_siphash24(&fixed, keys[i], klens[i]);
        part[2] = rl_siphash24(&fixed, values[i], vlens[i]);
        h0 = rl_siphash24(&fixed, part, sizeof(part));
    }
    h1 = rl_siphash24(&fixed, &h0, sizeof(h0)) ^ (uint64_t)n;
    memcpy(out, full, 360);
    snprintf(out + 360, RLS_ENVOY_KEY_MAX + 1 - 360,
             "#%016" PRIx64 "%016" PRIx64, h0, h1);
    return 360 + 33;
}

/* ------------------------------------------------------------------------ */
/* Deciding */

static void stop_second(rls_envoy_call_t *call, int from_start);

/* Descriptor st's answer r, copied into its slot (r's strings do not
 * outlive the callback). */
static void settle(rls_envoy_call_t *call, rls_envoy_status_t *st,
                   const rl_result_t *r)
{
    if (call->ctx->estats != NULL)
        rls_estats_count(call->ctx->estats, st->stat, st->hits, r);
    st->r = *r;
    st->r.error = NULL;
    st->r.error_len = 0;
    st->r.per_level = NULL;
    st->r.nper_level = 0;
    /* ERROR: the store could not decide and the server fails closed
     * (fail-open answers OK): refused, as the operator asked. */
    st->code = r->code == RL_CODE_OK ? CODE_OK : CODE_OVER;
    if (r->code == RL_CODE_ERROR) {
        st->r.code = RL_CODE_OVER_LIMIT;
        if (st->r.retry_after_ms == 0)
            st->r.retry_after_ms = 1000;
    }
    /* Allowed with nothing used, no error and no store: a kill
     * switch's answer (an allowed decision counts its cost, a read
     * of a counter at 0 was decided at the store's instant;
     * fail-open says why). */
    if (r->code == RL_CODE_OK && r->used == 0 && r->error_len == 0 &&
        !r->shadow_refused && r->decided_at_ms == 0)
        call->ctx->stats.uncounted++;
}

/* The answer to the call's group (all_or_nothing): each descriptor of it
 * takes its level's answer (rl_result_t.per_level), or the group's when
 * it has none per level (the store failed; every level off). A level
 * left out, or not looked at, is allowed with no limit, as a kill
 * switch's descriptor. */
static void respond_group(void *owner, const rl_result_t *r)
{
    rls_envoy_call_t *call = owner;
    uint32_t l;

    for (l = 0; l < call->ngroup; l++) {
        rls_envoy_status_t *st = &call->st[call->group[l]];
        if (r->per_level == NULL || l >= r->nper_level) {
            settle(call, st, r);
        } else if (r->per_level[l].code == RL_CODE_UNKNOWN) {
            st->decided = 0;
            st->code = CODE_OK;
            call->ctx->stats.uncounted++;
        } else {
            settle(call, st, &r->per_level[l]);
        }
    }
    if (--call->pending == 0 && call->done != NULL)
        call->done(call);
}

static void respond(void *owner, const rl_result_t *r)
{
    rls_envoy_call_t *call = owner;
    rls_envoy_status_t *st;

    if (r->id < call->n && call->phase == 1 && call->st[r->id].stop) {
        /* envoy-stop's look: would the hits take it past its limit? A
         * shadow refusal would too (shadow mode changes the answer, not
         * what is counted). */
        st = &call->st[r->id];
        st->over = r->code == RL_CODE_OVER_LIMIT || r->shadow_refused;
        if (--call->pending == 0)
            stop_second(call, 0);
        return;
    }
    if (r->id < call->n)
        settle(call, &call->st[r->id], r);
    if (--call->pending == 0) {
        if (call->phase == 1)
            stop_second(call, 0);
        else if (call->done != NULL)
            call->done(call);
    }
}

static uint32_t clamp32(uint64_t v)
{
    return v > UINT32_MAX ? UINT32_MAX : (uint32_t)v;
}

/* Whether the descriptor brings its own limit, which then applies in place
 * of the configuration's. */
static int own_limit(const desc_t *d)
{
    return d->limit != NULL && rls_envoy_unit_seconds(d->limit->unit) != 0;
}

/* The ask of descriptor i of the call (mapped through node x, or
 * overridden by the request's own limit), counted as counting says
 * (RLS_COUNT_*; a cost of 0 under NATIVE is looked at, PEEK), its
 * statistics counting hits, into *ap, its key in key (RLS_ENVOY_KEY_MAX +
 * 1 bytes). Returns 1 when it is to be decided, 0 when answered already
 * (no configuration, unlimited, a charge of nothing). */
static int ask_of(rls_envoy_call_t *call, uint32_t i, const desc_t *d,
                  const rls_envoy_node_t *x, uint32_t cost, uint32_t hits,
                  int counting, rls_ask_t *ap, char *key)
{
    rls_envoy_ctx_t *ctx = call->ctx;
    rls_envoy_status_t *st = &call->st[i];
    /* Initialised only for the optimiser, which cannot see that
     * validate() bounds n_entries to RLS_ENVOY_ENTRIES_MAX. */
    const char *keys[RLS_ENVOY_ENTRIES_MAX] = {0};
    const char *vals[RLS_ENVOY_ENTRIES_MAX] = {0};
    size_t klens[RLS_ENVOY_ENTRIES_MAX] = {0},
           vlens[RLS_ENVOY_ENTRIES_MAX] = {0};
    size_t j;
    rls_ask_t a;
    uint32_t window_s = 0;
    uint64_t limit = 0;
    int from_request = 0;

    size_t n = d->n_entries;
    int charge = 0;

    st->code = CODE_OK;
    if (x != NULL && x->charge && !own_limit(d)) {
        /* charge_only: the descriptor's last entry marks a charge to the
         * limit and counter of the entries before it (the node above),
         * as Envoy's apply_on_stream_done action sends it. */
        x = x->parent != 0 && n >= 2
                ? rls_envoy_conf_node_at(call->conf, x->parent - 1)
                : NULL;
        n--;
        charge = 1;
    }
    if (own_limit(d)) {
        window_s = rls_envoy_unit_seconds(d->limit->unit);
        /* The request's own limit (RateLimitOverride), as envoy-ratelimit
         * takes it: in place of whatever the configuration says (its
         * shadow_mode and quota_mode included), and under the caps this
         * server puts on limits requests bring. */
        limit = d->limit->requests_per_unit;
        st->unit = d->limit->unit;
        from_request = 1;
        st->from_request = 1;
        x = NULL;
    } else if (x != NULL && x->kind == RLS_ENVOY_LIMIT) {
        limit = x->lim.limit;
        window_s = x->lim.window_s;
        st->unit = x->unit;
        st->name = x->name;
        st->name_len = x->name_len;
    } else if (x != NULL && x->kind == RLS_ENVOY_RULE) {
        window_s = 0; /* from the rule */
    } else {
        /* No configuration, or unlimited: allowed, nothing counted. */
        st->unlimited = x != NULL && x->kind == RLS_ENVOY_UNLIMITED;
        ctx->stats.uncounted++;
        return 0;
    }
    if (cost == 0 && charge) {
        /* A charge of nothing. */
        ctx->stats.uncounted++;
        return 0;
    }
    /* A descriptor's hits_addend of 0 (Envoy's check before a
     * response-cost charge) reads the counter: OVER_LIMIT once it is past
     * the limit, as envoy-ratelimit's INCRBY of 0 answers. */
    if (cost == 0 && counting == RLS_COUNT_NATIVE)
        counting = RLS_COUNT_PEEK;
    {
        /* share_threshold: an entry matched by such a wildcard is counted
         * under the pattern, so every value it matches shares one
         * counter. The nodes of the walk are the chain up from x. */
        const rls_envoy_node_t *up = x;
        for (j = n; j-- > 0;) {
            keys[j] = d->entries[j]->key;
            klens[j] = strlen(keys[j]);
            if (up != NULL && up->wildcard && up->share_threshold) {
                vals[j] = up->value;
                vlens[j] = up->value_len;
            } else {
                vals[j] = d->entries[j]->value;
                vlens[j] = strlen(vals[j]);
            }
            up = up != NULL && up->parent != 0
                     ? rls_envoy_conf_node_at(call->conf, up->parent - 1)
                     : NULL;
        }
    }
    st->hits = hits;
    if (ctx->estats != NULL)
        st->stat = rls_estats_slot(ctx->estats, call->conf, call->dom, x,
                                   from_request, keys, klens, vals, vlens, n);
    memset(&a, 0, sizeof(a));
    a.q.id = i;
    a.q.key = key;
    a.q.key_len = rls_envoy_key(key, call->dom->name, call->dom->name_len, keys,
                                klens, vals, vlens, n);
    a.q.cost = cost;
    a.shadow = !from_request && x != NULL && x->shadow;
    a.charge = charge;
    a.counting = counting;
    a.parent = &call->parent;
    st->quota = !from_request && x != NULL && x->quota;
    if (window_s != 0) {
        st->rpu = clamp32(limit);
        a.q.limit = limit;
        a.q.window_s = window_s;
        /* The descriptor's algorithm (the request's own limit is a
         * fixed window). */
        a.algo = from_request ? NULL : &x->lim;
        a.from_request = from_request;
        a.ns = RLS_NS_ENVOY;
        a.stats_name = call->dom->stats_name;
        a.stats_name_len = strlen(call->dom->stats_name);
    } else {
        a.q.rule = x->rule;
        a.q.rule_len = x->rule_len;
        st->name = x->rule;
        st->name_len = x->rule_len;
        st->rule = 1;
    }
    st->decided = 1;
    *ap = a;
    return 1;
}

/* The gRPC status of a decider's refusal to queue (rc). */
static int grpc_status_of(int rc, const char **why)
{
    switch (rc) {
    case RL_ENOMEM:
        return RLS_GRPC_RESOURCE_EXHAUSTED;
    case RL_ENORULE:
        *why = "a descriptor's rule is not in the rules file";
        return RLS_GRPC_UNAVAILABLE;
    default:
        return RLS_GRPC_INVALID_ARGUMENT;
    }
}

/* Decides descriptor i of the call, alone (ask_of's arguments). Returns 0
 * or a gRPC status. */
static int add_one(rls_envoy_call_t *call, uint32_t i, const desc_t *d,
                   const rls_envoy_node_t *x, uint32_t cost, uint32_t hits,
                   int counting, const char **why)
{
    char key[RLS_ENVOY_KEY_MAX + 1];
    rls_ask_t a;
    int rc;

    if (!ask_of(call, i, d, x, cost, hits, counting, &a, key))
        return RLS_GRPC_OK;
    call->pending++;
    if ((rc = rls_decide(call->ctx->decider, &a, respond, call, why)) !=
        RL_OK) {
        call->pending--;
        call->st[i].decided = 0;
        return grpc_status_of(rc, why);
    }
    return RLS_GRPC_OK;
}

/* all_or_nothing: the call's descriptors call->group[] decided as one
 * group of that many levels, each a check of cost (counted the native
 * way). Returns 0 or a gRPC status (nothing queued then). */
static int add_group(rls_envoy_call_t *call, const req_t *q, uint32_t cost,
                     const char **why)
{
    char keys[RLS_GROUP_MAX][RLS_ENVOY_KEY_MAX + 1];
    rls_ask_t a[RLS_GROUP_MAX];
    uint32_t l;
    int rc;

    for (l = 0; l < call->ngroup; l++) {
        uint32_t i = call->group[l];
        /* A member is counted in the store (group_member): always asked. */
        (void)ask_of(call, i, q->descriptors[i], call->st[i].node, cost, cost,
                     RLS_COUNT_NATIVE, &a[l], keys[l]);
        a[l].q.id = call->n;
    }
    call->pending++;
    rc = rls_decide_group(call->ctx->decider, a, call->ngroup, respond_group,
                          call, why);
    if (rc != RL_OK) {
        call->pending--;
        for (l = 0; l < call->ngroup; l++)
            call->st[call->group[l]].decided = 0;
        return grpc_status_of(rc, why);
    }
    return RLS_GRPC_OK;
}

/* Checks the request before anything is queued, so that a bad descriptor
 * leaves nothing in flight. What envoy-ratelimit refuses it refuses with
 * its status (UNKNOWN: a Go error); a descriptor without entries or with
 * an empty key it answers (matched by nothing), and so does this. */
static int validate(const req_t *q, const char **why)
{
    size_t i;

    if (q->domain == NULL || q->domain[0] == '\0') {
        *why = "rate limit domain must not be empty";
        return RLS_GRPC_UNKNOWN;
    }
    if (q->n_descriptors == 0) {
        *why = "rate limit descriptor list must not be empty";
        return RLS_GRPC_UNKNOWN;
    }
    if (q->n_descriptors > RLS_ENVOY_DESCRIPTORS_MAX) {
        *why = "more than 1024 descriptors";
        return RLS_GRPC_INVALID_ARGUMENT;
    }
    for (i = 0; i < q->n_descriptors; i++) {
        const desc_t *d = q->descriptors[i];
        if (d->n_entries > RLS_ENVOY_ENTRIES_MAX) {
            *why = "a descriptor has more than 32 entries";
            return RLS_GRPC_INVALID_ARGUMENT;
        }
    }
    return RLS_GRPC_OK;
}

/* The node the descriptor's entries walk down to, or NULL. */
static const rls_envoy_node_t *walk(const rls_envoy_call_t *call,
                                    const desc_t *d)
{
    const rls_envoy_node_t *x = NULL;
    size_t j;

    if (d->n_entries == 0)
        return NULL;
    for (j = 0; j < d->n_entries; j++) {
        x = rls_envoy_conf_step(call->conf, call->dom, x, d->entries[j]->key,
                                strlen(d->entries[j]->key),
                                d->entries[j]->value,
                                strlen(d->entries[j]->value));
        if (x == NULL)
            return NULL;
    }
    return x;
}

/* The limits whose names another limit of the call replaces, dropped as
 * envoy-ratelimit drops them: their descriptors are answered OK, no
 * limit, nothing counted. Only the configuration's limits name and
 * replace (a request's own limit does neither); the work is bounded by
 * the descriptors times the replaces the file gives. */
static int ptr_cmp(const void *a, const void *b)
{
    uintptr_t x = (uintptr_t) * (const void *const *)a,
              y = (uintptr_t) * (const void *const *)b;

    return x < y ? -1 : x > y;
}

static void drop_replaced(rls_envoy_call_t *call, const req_t *q)
{
    /* The limits that replace, each once (many descriptors may reach one
     * node), gathered before any is dropped: a dropped limit still
     * replaces, as in envoy-ratelimit (two that replace each other both
     * go). */
    const rls_envoy_node_t *ys[RLS_ENVOY_DESCRIPTORS_MAX];
    size_t ny = 0, u, k;
    uint32_t i, r;

    for (i = 0; i < call->n; i++) {
        const rls_envoy_node_t *y = call->st[i].node;
        if (y != NULL && y->nreplaces > 0 && !own_limit(q->descriptors[i]) &&
            (y->kind == RLS_ENVOY_LIMIT || y->kind == RLS_ENVOY_UNLIMITED))
            ys[ny++] = y;
    }
    if (ny == 0)
        return;
    qsort(ys, ny, sizeof(ys[0]), ptr_cmp);
    for (u = 0, k = 0; k < ny; k++)
        if (u == 0 || ys[u - 1] != ys[k])
            ys[u++] = ys[k];
    ny = u;
    for (i = 0; i < call->n; i++) {
        const rls_envoy_node_t *x = call->st[i].node;
        int hit = 0;
        if (x == NULL || x->kind != RLS_ENVOY_LIMIT || x->name == NULL ||
            own_limit(q->descriptors[i]))
            continue;
        for (k = 0; k < ny && !hit; k++) {
            const char *nm = ys[k]->replaces;
            for (r = 0; r < ys[k]->nreplaces && !hit; r++, nm += strlen(nm) + 1)
                hit = strcmp(nm, x->name) == 0;
        }
        if (hit)
            call->st[i].dropped = 1;
    }
    for (i = 0; i < call->n; i++)
        if (call->st[i].dropped)
            call->st[i].node = NULL;
}

/* Whether descriptor d (node x) is counted in a store: what
 * envoy-stop's first step looks at. */
static int store_counted(const desc_t *d, const rls_envoy_node_t *x)
{
    if (own_limit(d))
        return 1;
    return x != NULL && !x->charge &&
           (x->kind == RLS_ENVOY_LIMIT || x->kind == RLS_ENVOY_RULE);
}

/* all_or_nothing: whether descriptor d (node x, its cost c) is one of
 * the call's group, whose cost is the call's: counted in a store, a
 * check (not a charge), not in quota mode (which refuses a call only
 * with every quota descriptor over: not a level's all or nothing), and
 * of the call's cost (a group has one cost; a descriptor's own
 * hits_addend of another value, 0 among them, is decided alone). */
static int group_member(const rls_envoy_call_t *call, const desc_t *d,
                        const rls_envoy_node_t *x, uint32_t c, uint32_t cost)
{
    if (!store_counted(d, x) || c != cost || call->ctx->global_quota)
        return 0;
    return own_limit(d) || !x->quota;
}

/* envoy-stop's second step, once the first (every counted descriptor
 * looked at with its hits, nothing counted) is answered: as
 * envoy-ratelimit's STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT, when one of
 * them goes over, only those that go over are counted (with their hits,
 * answered OVER_LIMIT) and the others are read (counted 0, answered from
 * their counter); when none does, all are counted. Then decided as
 * envoy-ratelimit's counting decides. Completes the call when everything
 * is answered, unless from_start (rls_envoy_start returns then). */
static void stop_second(rls_envoy_call_t *call, int from_start)
{
    const req_t *q = call->req != NULL ? call->req : call->held;
    const char *why;
    uint32_t i;
    int any = 0;

    call->phase = 2;
    for (i = 0; i < call->n; i++)
        any |= call->st[i].stop && call->st[i].over;
    call->pending = 1; /* the guard, as in rls_envoy_start */
    for (i = 0; i < call->n; i++) {
        rls_envoy_status_t *st = &call->st[i];
        uint32_t c = st->cost;
        if (!st->stop)
            continue;
        if (any && !st->over)
            c = 0;
        if (add_one(call, i, q->descriptors[i], st->node, c, st->cost,
                    RLS_COUNT_ENVOY, &why) != RLS_GRPC_OK) {
            /* Only when out of memory or the rules changed between the
             * steps: refused, as a store error is when failing closed. */
            st->decided = 0;
            st->code = CODE_OVER;
        }
    }
    if (--call->pending == 0 && !from_start && call->done != NULL)
        call->done(call);
}

/* A descriptor's cost: its own hits_addend, else the call's. */
static uint32_t desc_cost(const desc_t *d, uint32_t cost)
{
    if (d->hits_addend == NULL)
        return cost;
    return d->hits_addend->value > UINT32_MAX ? UINT32_MAX
                                              : (uint32_t)d->hits_addend->value;
}

int rls_envoy_start(rls_envoy_call_t *call, rls_envoy_ctx_t *ctx,
                    const uint8_t *p, size_t n, const char **why)
{
    req_t *q;
    uint32_t i, k, cost, nstore = 0;
    int rc, counting;

    call->ctx = ctx;
    call->conf = NULL;
    call->dom = NULL;
    call->st = NULL;
    call->n = 0;
    call->pending = 0;
    call->req = NULL;
    call->held = NULL;
    call->phase = 0;
    call->ngroup = 0;
    q = envoy__service__ratelimit__v3__rate_limit_request__unpack(NULL, n, p);
    if (q == NULL) {
        *why = "the message is not a RateLimitRequest";
        return RLS_GRPC_INTERNAL;
    }
    if ((rc = validate(q, why)) != RLS_GRPC_OK)
        goto out;
    call->n = (uint32_t)q->n_descriptors;
    if ((call->st = calloc(call->n, sizeof(*call->st))) == NULL) {
        *why = "out of memory";
        rc = RLS_GRPC_RESOURCE_EXHAUSTED;
        goto out;
    }
    if (ctx->conf != NULL) {
        call->conf = rls_envoy_conf_ref(ctx->conf);
        call->dom =
            rls_envoy_conf_domain(call->conf, q->domain, strlen(q->domain));
    }
    if (call->dom == NULL) {
        /* No configuration for the domain: everything allowed, nothing
         * counted, as envoy-ratelimit answers. */
        ctx->stats.unknown_domain++;
        for (i = 0; i < call->n; i++)
            call->st[i].code = CODE_OK;
        ctx->stats.uncounted += call->n;
        rc = RLS_GRPC_OK;
        goto out;
    }
    /* First every descriptor's node, so that one limit can replace
     * another whatever their order; then the decisions. */
    for (i = 0; i < call->n; i++)
        call->st[i].node = walk(call, q->descriptors[i]);
    drop_replaced(call, q);
    cost = q->hits_addend == 0 ? 1 : q->hits_addend;
    if (call->dom->all_or_nothing) {
        /* The group's members, known before anything is queued: a group
         * holds RLS_GROUP_MAX levels. */
        for (i = 0; i < call->n; i++) {
            const desc_t *d = q->descriptors[i];
            uint32_t c = desc_cost(d, cost);
            if (!group_member(call, d, call->st[i].node, c, cost))
                continue;
            if (call->ngroup == RLS_GROUP_MAX) {
                *why = "all_or_nothing decides 8 descriptors with limits "
                       "together at most";
                call->ngroup = 0;
                rc = RLS_GRPC_INVALID_ARGUMENT;
                goto out;
            }
            call->group[call->ngroup++] = i;
        }
    }
    switch (rls_envoy_conf_counting(call->dom)) {
    case RLS_ENVOY_COUNT_NATIVE:
        counting = RLS_COUNT_NATIVE;
        break;
    case RLS_ENVOY_COUNT_STOP:
        /* One counted descriptor is counted as without the option (what
         * goes over is counted there too); two or more take two steps. */
        for (i = 0; i < call->n; i++)
            nstore += store_counted(q->descriptors[i], call->st[i].node);
        counting = RLS_COUNT_ENVOY;
        /* all_or_nothing's group is the exact form of what the two steps
         * approximate: the others are counted as with `envoy`. */
        if (nstore >= 2 && !call->dom->all_or_nothing)
            call->phase = 1;
        break;
    default:
        counting = RLS_COUNT_ENVOY;
    }
    /* The guard: an answer given inside the loop (a full batch the memory
     * store answered at once) must not complete the call under us. */
    call->pending = 1;
    if (call->ngroup > 0 &&
        (rc = add_group(call, q, cost, why)) != RLS_GRPC_OK) {
        call->pending--;
        goto out;
    }
    for (i = 0, k = 0; i < call->n; i++) {
        const desc_t *d = q->descriptors[i];
        rls_envoy_status_t *st = &call->st[i];
        uint32_t c = desc_cost(d, cost);
        st->cost = c;
        if (k < call->ngroup && call->group[k] == i) {
            k++;
            continue;
        }
        st->stop = call->phase == 1 && store_counted(d, st->node);
        if ((rc = add_one(call, i, d, st->node, c, c,
                          st->stop ? RLS_COUNT_PEEK : counting, why)) !=
            RLS_GRPC_OK) {
            /* What is queued stays queued and is answered into the call;
             * the transport waits for it before freeing. The second step
             * is not taken. */
            for (i = 0; i < call->n; i++)
                call->st[i].stop = 0;
            call->phase = 0;
            call->pending--;
            goto out;
        }
    }
    rc = RLS_GRPC_OK;
    if (call->phase == 1) {
        /* The first step's answers may all have come already. */
        call->held = q;
        if (--call->pending == 0)
            stop_second(call, 1);
        goto keep;
    }
    call->pending--;
out:
    /* dynamic_metadata tells the request back: kept until the call is
     * freed. */
    if (rc == RLS_GRPC_OK && ctx->response_metadata)
        call->req = q;
    else
        envoy__service__ratelimit__v3__rate_limit_request__free_unpacked(q,
                                                                         NULL);
    return rc;
keep:
    /* envoy-stop's second step reads the request again. */
    if (ctx->response_metadata) {
        call->req = q;
        call->held = NULL;
    }
    return rc;
}

/* ------------------------------------------------------------------------ */
/* The response */

typedef struct hdrs_s {
    rl_hdr_t r[RL_HDR_MAX];
    header_t h[RL_HDR_MAX];
    header_t *hp[RL_HDR_MAX];
    size_t n;
} hdrs_t;

/* The descriptor whose numbers the headers carry: a refused one that frees
 * up last, else the decided one with the least room left. */
static const rls_envoy_status_t *headline(const rls_envoy_call_t *call)
{
    const rls_envoy_status_t *best = NULL;
    uint32_t i;

    for (i = 0; i < call->n; i++) {
        const rls_envoy_status_t *s = &call->st[i];
        if (!s->decided)
            continue;
        if (best == NULL)
            best = s;
        else if (s->code == CODE_OVER && best->code != CODE_OVER)
            best = s;
        else if (s->code == CODE_OVER && best->code == CODE_OVER)
            best = s->r.retry_after_ms > best->r.retry_after_ms ? s : best;
        else if (s->code == best->code && s->r.remaining < best->r.remaining)
            best = s;
    }
    return best;
}

/* ------------------------------------------------------------------------ */
/* dynamic_metadata (--envoy-response-metadata), as envoy-ratelimit's
 * ratelimitToMetadata builds it: the domain, each descriptor (entries as
 * "key=value", its own limit and hits_addend), the request's hits_addend,
 * and the metadata of the allowed descriptors' limits merged (a key
 * already there stays, two mappings merge). Everything built here comes
 * from one pool freed after packing; the files' metadata is unpacked per
 * response and borrowed. */

typedef Google__Protobuf__Struct gstruct_t;
typedef Google__Protobuf__Struct__FieldsEntry gentry_t;
typedef Google__Protobuf__Value gvalue_t;

typedef struct mpool_s {
    rls_pbv_t pb;         /* everything built (envoy/pbvalue.h) */
    gstruct_t **unpacked; /* the files' metadata, freed after packing */
    size_t nu;
} mpool_t;

static void pool_free(mpool_t *m)
{
    size_t i;

    rls_pbv_free(&m->pb);
    for (i = 0; i < m->nu; i++)
        google__protobuf__struct__free_unpacked(m->unpacked[i], NULL);
    free(m->unpacked);
}

/* v, with every mapping in it copied from the pool so that merging can
 * add to it (lists and scalars are borrowed: nothing changes them). */
static gvalue_t *own(mpool_t *m, gvalue_t *v)
{
    gvalue_t *c;
    size_t i;

    if (v == NULL ||
        v->kind_case != GOOGLE__PROTOBUF__VALUE__KIND_STRUCT_VALUE ||
        v->struct_value == NULL)
        return v;
    if ((c = rls_pbv_struct(&m->pb)) == NULL)
        return NULL;
    for (i = 0; i < v->struct_value->n_fields; i++)
        rls_pbv_set(&m->pb, c->struct_value, v->struct_value->fields[i]->key,
                    own(m, v->struct_value->fields[i]->value));
    return c;
}

static void merge(mpool_t *m, gstruct_t *dst, const gstruct_t *src)
{
    size_t i, j;

    for (i = 0; i < src->n_fields; i++) {
        const gentry_t *e = src->fields[i];
        gentry_t *have = NULL;
        for (j = 0; j < dst->n_fields && have == NULL; j++)
            if (strcmp(dst->fields[j]->key, e->key) == 0)
                have = dst->fields[j];
        if (have == NULL)
            rls_pbv_set(&m->pb, dst, e->key, own(m, e->value));
        else if (have->value != NULL && e->value != NULL &&
                 have->value->kind_case ==
                     GOOGLE__PROTOBUF__VALUE__KIND_STRUCT_VALUE &&
                 e->value->kind_case ==
                     GOOGLE__PROTOBUF__VALUE__KIND_STRUCT_VALUE &&
                 have->value->struct_value && e->value->struct_value)
            merge(m, have->value->struct_value, e->value->struct_value);
    }
}

static const char *unit_name(int unit)
{
    static const char *const names[] = {"UNKNOWN", "SECOND", "MINUTE", "HOUR",
                                        "DAY",     "MONTH",  "YEAR",   "WEEK"};

    return unit >= 0 && unit < 8 ? names[unit] : "UNKNOWN";
}

/* The struct for dynamic_metadata, from the pool; NULL when out of
 * memory. */
static gstruct_t *metadata_of(const rls_envoy_call_t *call, mpool_t *m)
{
    const req_t *q = call->req;
    rls_pbv_t *pb = &m->pb;
    gstruct_t *top = rls_pbv_struct_new(pb), *merged = rls_pbv_struct_new(pb);
    gvalue_t *list = rls_pbv_list(pb);
    uint32_t i;
    size_t j;

    if (top == NULL || merged == NULL || list == NULL)
        return NULL;
    rls_pbv_set(pb, top, "domain", rls_pbv_string(pb, q->domain));
    for (i = 0; i < q->n_descriptors; i++) {
        const desc_t *d = q->descriptors[i];
        gvalue_t *dv = rls_pbv_struct(pb);
        gvalue_t *ev = rls_pbv_list(pb);
        if (dv == NULL || ev == NULL)
            return NULL;
        for (j = 0; j < d->n_entries; j++) {
            size_t kl = strlen(d->entries[j]->key),
                   vl = strlen(d->entries[j]->value);
            char *kv = rls_pbv_alloc(pb, kl + vl + 2);
            if (kv == NULL)
                return NULL;
            memcpy(kv, d->entries[j]->key, kl);
            kv[kl] = '=';
            memcpy(kv + kl + 1, d->entries[j]->value, vl);
            rls_pbv_push(pb, ev->list_value, rls_pbv_string(pb, kv));
        }
        rls_pbv_set(pb, dv->struct_value, "entries", ev);
        if (d->limit != NULL) {
            /* Go's text form of the RateLimitOverride. */
            char *t = rls_pbv_alloc(pb, 64);
            if (t == NULL)
                return NULL;
            snprintf(t, 64, "requests_per_unit:%u unit:%s",
                     d->limit->requests_per_unit, unit_name(d->limit->unit));
            rls_pbv_set(pb, dv->struct_value, "limit", rls_pbv_string(pb, t));
        }
        if (d->hits_addend != NULL)
            rls_pbv_set(pb, dv->struct_value, "hitsAddend",
                        rls_pbv_number(pb, (double)d->hits_addend->value));
        rls_pbv_push(pb, list->list_value, dv);
        /* An allowed descriptor's limit from the file brings its
         * metadata (a request's own limit, an unlimited or a replaced
         * one has none). */
        if (i < call->n) {
            const rls_envoy_status_t *s = &call->st[i];
            if (s->decided && s->code == CODE_OK && !s->from_request &&
                s->node != NULL && s->node->metadata != NULL) {
                gstruct_t *u = google__protobuf__struct__unpack(
                    NULL, s->node->metadata_len, s->node->metadata);
                gstruct_t **nu;
                if (u == NULL)
                    return NULL;
                nu = realloc(m->unpacked, (m->nu + 1) * sizeof(*nu));
                if (nu == NULL) {
                    google__protobuf__struct__free_unpacked(u, NULL);
                    return NULL;
                }
                m->unpacked = nu;
                m->unpacked[m->nu++] = u;
                merge(m, merged, u);
            }
        }
    }
    rls_pbv_set(pb, top, "descriptors", list);
    if (q->hits_addend != 0)
        rls_pbv_set(pb, top, "hitsAddend",
                    rls_pbv_number(pb, (double)q->hits_addend));
    if (merged->n_fields > 0) {
        gvalue_t *mv = rls_pbv_value_of(pb, merged);
        rls_pbv_set(pb, top, "metadata", mv);
    }
    return pb->nomem ? NULL : top;
}

/* duration_until_reset in whole seconds, rounded up, as envoy-ratelimit
 * gives it (the window's length less the whole seconds gone: Envoy's
 * x-ratelimit-reset reads only the seconds, so a part of one must not
 * read as 0 while the window still runs). */
static int64_t reset_seconds(const rls_envoy_status_t *s)
{
    return (int64_t)((s->r.reset_after_ms + 999) / 1000);
}

/* limit_remaining as Envoy is told it: 0 when refused, whatever room a
 * smaller cost would still have (envoy-ratelimit's answer). */
static uint32_t remaining_of(const rls_envoy_status_t *s)
{
    return s->code == CODE_OVER ? 0 : clamp32(s->r.remaining);
}

/* envoy-ratelimit's three headers (LIMIT_RESPONSE_HEADERS_ENABLED), for
 * the descriptor it picks: the last refused one that is not in quota
 * mode, else the one with the least remaining. Returns how many. */
static size_t ref_headers(const rls_envoy_call_t *call, hdrs_t *hs)
{
    static const char *const names[3] = {
        "RateLimit-Limit", "RateLimit-Remaining", "RateLimit-Reset"};
    const header_t init = ENVOY__CONFIG__CORE__V3__HEADER_VALUE__INIT;
    const rls_envoy_status_t *m = NULL;
    uint32_t min = UINT32_MAX, i;
    uint64_t v[3];

    for (i = 0; i < call->n; i++) {
        const rls_envoy_status_t *s = &call->st[i];
        if (!s->decided)
            continue;
        if (remaining_of(s) < min) {
            m = s;
            min = remaining_of(s);
        }
        if (s->code == CODE_OVER && !s->quota && !call->ctx->global_quota) {
            m = s;
            min = 0;
        }
    }
    if (m == NULL)
        return 0;
    v[0] = m->r.limit ? m->r.limit : m->rpu;
    v[1] = remaining_of(m);
    v[2] = (uint64_t)reset_seconds(m);
    for (i = 0; i < 3; i++) {
        hs->h[i] = init;
        hs->h[i].key = (char *)names[i];
        snprintf(hs->r[i].value, sizeof(hs->r[i].value), "%" PRIu64, v[i]);
        hs->h[i].value = hs->r[i].value;
        hs->hp[i] = &hs->h[i];
    }
    return 3;
}

/* What one descriptor's status is encoded from. */
typedef struct enc_s {
    dstatus_t ds;
    ratelimit_t rl;
    duration_t du;
    char name[24];
} enc_t;

int rls_envoy_encode(const rls_envoy_call_t *call, rl_buf_t *out)
{
    resp_t resp = ENVOY__SERVICE__RATELIMIT__V3__RATE_LIMIT_RESPONSE__INIT;
    enc_t *e;
    dstatus_t **dsp;
    hdrs_t hs;
    const rls_envoy_status_t *h;
    mpool_t pool;
    size_t len;
    uint8_t *w;
    uint32_t i, failed = 0, quota = 0, quota_failed = 0;
    int rc;

    hs.n = 0;
    memset(&pool, 0, sizeof(pool));
    e = calloc(call->n ? call->n : 1, sizeof(*e));
    dsp = calloc(call->n ? call->n : 1, sizeof(*dsp));
    if (e == NULL || dsp == NULL) {
        free(e);
        free(dsp);
        return RL_ENOMEM;
    }
    for (i = 0; i < call->n; i++) {
        const rls_envoy_status_t *s = &call->st[i];
        dstatus_t di =
            ENVOY__SERVICE__RATELIMIT__V3__RATE_LIMIT_RESPONSE__DESCRIPTOR_STATUS__INIT;
        ratelimit_t ri =
            ENVOY__SERVICE__RATELIMIT__V3__RATE_LIMIT_RESPONSE__RATE_LIMIT__INIT;
        duration_t dz = GOOGLE__PROTOBUF__DURATION__INIT;
        dstatus_t *ds = &e[i].ds;
        ratelimit_t *rl = &e[i].rl;

        *ds = di;
        *rl = ri;
        e[i].du = dz;
        dsp[i] = ds;
        ds->code = s->code == CODE_OVER ? CODE_OVER : CODE_OK;
        call->ctx->stats.descriptors[ds->code]++;
        /* envoy-ratelimit's overall code: any refused descriptor refuses
         * the call, except those in quota mode, which refuse it only when
         * every one of them is refused. */
        if (!s->unlimited &&
            ((s->decided && s->quota) || call->ctx->global_quota)) {
            quota++;
            quota_failed += s->code == CODE_OVER;
        } else if (s->code == CODE_OVER) {
            failed++;
        }
        if (s->unlimited)
            ds->limit_remaining = UINT32_MAX;
        if (!s->decided)
            continue;
        /* current_limit: the deciding window's (a rule may have several),
         * in Envoy's unit when the window is one, else UNKNOWN with the
         * window in the name, e.g. "90s". */
        rl->requests_per_unit = clamp32(s->r.limit ? s->r.limit : s->rpu);
        rl->unit = rls_envoy_unit_of(s->r.window_s);
        if (s->name != NULL) {
            rl->name = (char *)s->name; /* NUL-terminated in the conf */
        } else if (rl->unit == 0 && s->r.window_s != 0) {
            snprintf(e[i].name, sizeof(e[i].name), "%us", s->r.window_s);
            rl->name = e[i].name;
        }
        ds->current_limit = rl;
        ds->limit_remaining = remaining_of(s);
        e[i].du.seconds = reset_seconds(s);
        ds->duration_until_reset = &e[i].du;
    }
    resp.overall_code = failed > 0 || (quota > 0 && quota_failed == quota)
                            ? CODE_OVER
                            : CODE_OK;
    /* --envoy-shadow-mode (envoy-ratelimit's SHADOW_MODE): the call is let
     * through; its descriptors still say what was over. */
    if (call->ctx->global_shadow)
        resp.overall_code = CODE_OK;
    resp.n_statuses = call->n;
    resp.statuses = dsp;
    if (call->dom != NULL &&
        ((call->dom->headers & RLS_ENVOY_HDR_REF) ||
         (!call->dom->headers_set && call->ctx->ref_headers))) {
        hs.n = ref_headers(call, &hs);
        resp.n_response_headers_to_add = hs.n;
        resp.response_headers_to_add = hs.hp;
    } else if (call->dom != NULL && (call->dom->headers & RL_HDR_ALL) != 0 &&
               (h = headline(call)) != NULL) {
        /* The policy is the rule a descriptor maps to, as /check and
         * librlc name it; for the file's own limits, the domain. */
        const char *pol = h->rule ? h->name : call->dom->stats_name;
        size_t plen = h->rule ? h->name_len : strlen(pol);
        int k = rl_headers(&h->r, rl_unix_ms(), pol, plen,
                           call->dom->headers & RL_HDR_ALL, hs.r, RL_HDR_MAX);
        header_t init = ENVOY__CONFIG__CORE__V3__HEADER_VALUE__INIT;

        for (hs.n = 0; k > 0 && hs.n < (size_t)k; hs.n++) {
            hs.h[hs.n] = init;
            hs.h[hs.n].key = (char *)hs.r[hs.n].name;
            hs.h[hs.n].value = hs.r[hs.n].value;
            hs.hp[hs.n] = &hs.h[hs.n];
        }
        resp.n_response_headers_to_add = hs.n;
        resp.response_headers_to_add = hs.hp;
    }
    if (call->req != NULL &&
        (resp.dynamic_metadata = metadata_of(call, &pool)) == NULL) {
        free(e);
        free(dsp);
        pool_free(&pool);
        return RL_ENOMEM;
    }
    len = envoy__service__ratelimit__v3__rate_limit_response__get_packed_size(
        &resp);
    if ((rc = rl_frame_reserve(out, len, &w)) == RL_OK) {
        envoy__service__ratelimit__v3__rate_limit_response__pack(&resp, w);
        rl_frame_commit(out, len);
    }
    free(e);
    free(dsp);
    pool_free(&pool);
    return rc;
}

void rls_envoy_call_free(rls_envoy_call_t *call)
{
    if (call->req != NULL)
        envoy__service__ratelimit__v3__rate_limit_request__free_unpacked(
            call->req, NULL);
    call->req = NULL;
    if (call->held != NULL)
        envoy__service__ratelimit__v3__rate_limit_request__free_unpacked(
            call->held, NULL);
    call->held = NULL;
    free(call->st);
    call->st = NULL;
    rls_envoy_conf_unref(call->conf);
    call->conf = NULL;
}
