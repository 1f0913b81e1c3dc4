/* RLQS streams (rlqs.h).
 *
 * A participant is one bucket id on one stream: what the fleet divides a
 * budget among. It reports through its stream; its store step (fleet.h)
 * runs at most every min_report_ms, the reports between added up, and
 * one at a time. Each step's answer gives its share: when it moved
 * (rls_rlqs_share_changed) or half the TTL has passed, the Envoy is sent
 * the assignment. A participant lives until its stream closes or its
 * bucket is abandoned, and then until its last store call (the leave:
 * its entry removed from the budget's participants) is back.
 *
 * The timer (TICK_MS) abandons buckets reported with no requests for
 * abandon_s, and sends steps that reports left pending. */
#include "rlqs/rlqs.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/grpc_status.h"
#include "base/log.h"
#include "base/prom.h"
#include "base/util.h"
#include "rl_error.h"
#include "rlqs/fleet.h"
#include "rlqs/share.h"
#include "rlqs/wire.h"

#define TICK_MS 200
/* Chains of a stream's participants (a power of 2): 512 bytes a stream,
 * and 1024 buckets 16 a chain. */
#define PART_CHAINS 64

typedef Envoy__Service__RateLimitQuota__V3__RateLimitQuotaUsageReports
    reports_t;
typedef Envoy__Service__RateLimitQuota__V3__RateLimitQuotaUsageReports__BucketQuotaUsage
    usage_t;
typedef rls_rlqs_entry_t entry_t;

/* What was last assigned. */
enum { KIND_NONE, KIND_BLANKET, KIND_BUCKET };

typedef struct part_s {
    rls_list_t node; /* in its stream's parts */
    struct part_s *hnext; /* in its stream's chain, while alive */
    uint64_t hash;        /* of id */
    rls_rlqs_stream_t *st;
    const rls_rlqs_rule_t *rule; /* NULL: no rule takes it */
    uint32_t npairs;
    char *keys[RLS_RLQS_PAIRS_MAX]; /* into pairs, sorted by key */
    char *vals[RLS_RLQS_PAIRS_MAX];
    char *pairs;
    char *id;   /* canonical, escaped */
    char *bkey; /* the budget's store key */
    char member[64];
    uint64_t demand; /* requests per unit, 0 before the first step */
    uint64_t dem_count; /* requests since dem_ms, for the next demand */
    uint64_t dem_ms;
    int dem_first;                     /* demand is the first report's alone */
    uint64_t pend_allowed, pend_count; /* reported since the last step */
    int pending;                       /* a report waits for a step */
    uint64_t step_ms;                  /* when the last step went */
    uint64_t active_ms;                /* the last report with requests in it */
    int inflight;
    int dead; /* abandoned, or its stream closed: leaves the fleet */
    rls_rlqs_fleet_op_t op;
    /* The assignment last sent. */
    int kind;
    int blanket;
    uint64_t q;
    uint32_t b;
    uint64_t sent_ms, ttl_ms;
    uint64_t ok_ms; /* the last step the store answered */
} part_t;

struct rls_rlqs_stream_s {
    rls_list_t node; /* in q->streams */
    rls_rlqs_t *q;
    rls_rlqs_sink_t sink;
    rls_list_t parts; /* alive ones and dead ones waiting on the store */
    uint32_t nparts;  /* alive */
    /* The alive ones by their id's hash: a report of 1024 buckets finds
     * each in a chain of 16, not in a walk of them all. */
    struct part_s *chains[PART_CHAINS];
    uint32_t nheld;   /* all on parts */
    uint64_t seq;
    char domain[RLS_RLQS_NAME_MAX + 1];
    int have_domain;
    int ended;     /* the sink was told to end */
    int closed;    /* the transport is done with it */
    double tokens; /* messages it may still send now */
    uint64_t tokens_ms;
};

struct rls_rlqs_s {
    uv_loop_t *loop;
    rls_store_t *store;
    rls_rlqs_conf_t *conf;
    char prefix[128];
    uint64_t instance;
    uint64_t seq;
    uv_timer_t timer;
    rls_list_t streams;
    uint64_t held; /* streams alive + parts alive, dead included */
    int freeing;
    rls_rlqs_stats_t stats;
};

static void on_timer_closed(uv_handle_t *h)
{
    rls_rlqs_t *q = h->data;

    q->timer.data = NULL;
    if (q->held == 0) {
        rls_rlqs_conf_free(q->conf);
        free(q);
    }
}

static void service_release(rls_rlqs_t *q)
{
    q->held--;
    if (q->freeing && q->held == 0 && q->timer.data == NULL) {
        rls_rlqs_conf_free(q->conf);
        free(q);
    }
}

static void stream_release(rls_rlqs_stream_t *st)
{
    rls_rlqs_t *q = st->q;

    if (!st->closed || st->nheld > 0)
        return;
    rls_list_remove(&st->node);
    free(st);
    service_release(q);
}

static void part_free(part_t *p)
{
    rls_rlqs_stream_t *st = p->st;

    rls_list_remove(&p->node);
    st->nheld--;
    free(p->pairs);
    free(p->id);
    free(p->bkey);
    free(p);
    service_release(st->q);
    stream_release(st);
}

/* ------------------------------------------------------------------------ */
/* Responses */

static void send_action(part_t *p, int what, int blanket, uint64_t q,
                        uint32_t b, uint32_t ttl_s)
{
    rls_rlqs_stream_t *st = p->st;
    rls_rlqs_action_t a;
    uint8_t stackbuf[4096], *buf = stackbuf;
    size_t len;

    if (st->ended || st->closed)
        return;
    a.keys = (const char *const *)p->keys;
    a.vals = (const char *const *)p->vals;
    a.npairs = p->npairs;
    a.what = what == KIND_NONE      ? RLS_RLQS_ABANDON
             : what == KIND_BLANKET ? RLS_RLQS_BLANKET
                                    : RLS_RLQS_BUCKET;
    a.blanket = blanket;
    a.per_fill = q > UINT32_MAX ? UINT32_MAX : (uint32_t)q;
    a.max_tokens = b;
    a.fill_s = p->rule != NULL ? p->rule->unit_s : 1;
    a.ttl_s = ttl_s;
    len = rls_rlqs_action_size(&a);
    if (len > sizeof(stackbuf) && (buf = malloc(len)) == NULL)
        return; /* the next report tries again */
    rls_rlqs_action_pack(&a, buf);
    st->sink.send(st->sink.arg, buf, len);
    if (buf != stackbuf)
        free(buf);
}

static void end_stream(rls_rlqs_stream_t *st, int code, const char *why)
{
    if (st->ended || st->closed)
        return;
    st->ended = 1;
    st->sink.end(st->sink.arg, code, why);
}

/* Sends a blanket rule or a token bucket and remembers it. */
static void assign(part_t *p, int kind, int blanket, uint64_t q, uint32_t b,
                   uint32_t ttl_s, uint64_t now)
{
    rls_rlqs_t *svc = p->st->q;

    if (p->kind == kind && p->blanket == blanket && p->q == q && p->b == b)
        svc->stats.renewals++;
    svc->stats.assignments++;
    p->kind = kind;
    p->blanket = blanket;
    p->q = q;
    p->b = b;
    p->sent_ms = now;
    p->ttl_ms = (uint64_t)ttl_s * 1000;
    send_action(p, kind, blanket, q, b, ttl_s);
}

/* ------------------------------------------------------------------------ */
/* Store steps */

static void step(part_t *p, uint64_t now);
static void on_step(void *data, rls_rlqs_fleet_op_t *op);

static void leave(part_t *p)
{
    rls_rlqs_t *q = p->st->q;

    if (p->inflight)
        return; /* at its step's answer */
    if (p->rule == NULL) {
        part_free(p);
        return;
    }
    memset(&p->op, 0, sizeof(p->op));
    p->op.key = p->bkey;
    p->op.key_len = strlen(p->bkey);
    p->op.member = p->member;
    p->op.member_len = strlen(p->member);
    p->op.window_ms = (uint64_t)p->rule->unit_s * 1000;
    p->op.stale_ms = p->rule->stale_ms;
    p->op.now_ms = q->store->v->now_ms(q->store);
    p->op.leave = 1;
    p->inflight = 1;
    q->stats.store_calls++;
    rls_rlqs_fleet_submit(q->store, &p->op, on_step, p);
}

static void on_step(void *data, rls_rlqs_fleet_op_t *op)
{
    part_t *p = data;
    rls_rlqs_t *q = p->st->q;
    const rls_rlqs_rule_t *r = p->rule;
    uint64_t now = uv_now(q->loop), share;
    uint32_t b;

    p->inflight = 0;
    if (op->leave) {
        part_free(p);
        return;
    }
    if (p->dead) {
        /* The store is closing (the server stops): nothing more to it. */
        if (op->err == RL_ESHUTDOWN)
            part_free(p);
        else
            leave(p);
        return;
    }
    if (op->err != 0) {
        q->stats.store_errors++;
        /* The last assignment runs its TTL out; after it, the rule's
         * fallback. */
        if (rls_rlqs_expired(p->kind != KIND_NONE, p->sent_ms, p->ttl_ms,
                             now)) {
            q->stats.fallbacks++;
            assign(p, KIND_BLANKET, r->fallback, 0, 0, r->ttl_s, now);
        }
    } else {
        p->ok_ms = now;
        share = rls_rlqs_share(rls_rlqs_divided(r->limit), r->floor, op->n,
                               op->sum, op->demand);
        /* A participant's first share is its floor at most: the others
         * were assigned from views without it, and hold their shares
         * until their next step; by its own next step they have theirs
         * from views with it (docs/rlqs.md, "Joining"). */
        if (p->kind == KIND_NONE && share > r->floor)
            share = r->floor;
        if (share > UINT32_MAX)
            share = UINT32_MAX;
        if (share == 0) {
            if (p->kind != KIND_BLANKET || p->blanket != RLS_RLQS_DENY_ALL ||
                rls_rlqs_renew_due(p->sent_ms, p->ttl_ms, now))
                assign(p, KIND_BLANKET, RLS_RLQS_DENY_ALL, 0, 0, r->ttl_s, now);
        } else if (p->kind != KIND_BUCKET ||
                   rls_rlqs_share_changed(p->q, 1, share)) {
            b = rls_rlqs_burst(share, r->burst);
            assign(p, KIND_BUCKET, 0, share, b, r->ttl_s, now);
        } else if (rls_rlqs_renew_due(p->sent_ms, p->ttl_ms, now)) {
            assign(p, KIND_BUCKET, 0, p->q, p->b, r->ttl_s, now);
        }
    }
    /* Reports that came while it was at the store. */
    if (p->pending && now >= p->step_ms + q->conf->min_report_ms)
        step(p, now);
}

static void step(part_t *p, uint64_t now)
{
    rls_rlqs_t *q = p->st->q;
    const rls_rlqs_rule_t *r = p->rule;

    /* Demand is measured over RLS_RLQS_DEMAND_MS at least; the first
     * report's alone stands until then, and is not averaged in. */
    p->dem_count += p->pend_count;
    if (p->demand == 0 || now >= p->dem_ms + RLS_RLQS_DEMAND_MS) {
        p->demand =
            rls_rlqs_demand(p->dem_first ? 0 : p->demand, p->dem_count,
                            p->demand == 0 ? 0 : now - p->dem_ms, r->unit_s);
        p->dem_first = p->dem_ms == 0;
        p->dem_count = 0;
        p->dem_ms = now;
    }
    memset(&p->op, 0, sizeof(p->op));
    p->op.key = p->bkey;
    p->op.key_len = strlen(p->bkey);
    p->op.member = p->member;
    p->op.member_len = strlen(p->member);
    p->op.demand = p->demand;
    p->op.allowed = p->pend_allowed;
    p->op.now_ms = q->store->v->now_ms(q->store);
    p->op.window_ms = (uint64_t)r->unit_s * 1000;
    p->op.stale_ms = r->stale_ms;
    p->pend_allowed = p->pend_count = 0;
    p->pending = 0;
    p->step_ms = now;
    p->inflight = 1;
    q->stats.store_calls++;
    rls_rlqs_fleet_submit(q->store, &p->op, on_step, p);
}

/* ------------------------------------------------------------------------ */
/* Reports */

static uint64_t id_hash(const char *id)
{
    uint64_t h = 1469598103934665603ULL;

    for (; *id != '\0'; id++)
        h = (h ^ (uint8_t)*id) * 1099511628211ULL;
    return h;
}

static part_t *part_find(rls_rlqs_stream_t *st, const char *id, uint64_t h)
{
    part_t *p;

    for (p = st->chains[h & (PART_CHAINS - 1)]; p != NULL; p = p->hnext)
        if (p->hash == h && strcmp(p->id, id) == 0)
            return p;
    return NULL;
}

static void part_unchain(part_t *p)
{
    part_t **pp = &p->st->chains[p->hash & (PART_CHAINS - 1)];

    for (; *pp != NULL; pp = &(*pp)->hnext)
        if (*pp == p) {
            *pp = p->hnext;
            p->hnext = NULL;
            return;
        }
}

static part_t *part_new(rls_rlqs_stream_t *st, entry_t **e, size_t n,
                        const char *id, uint64_t h)
{
    rls_rlqs_t *q = st->q;
    const char *keys[RLS_RLQS_PAIRS_MAX], *vals[RLS_RLQS_PAIRS_MAX];
    part_t *p;
    size_t i, total = 0, off = 0;

    for (i = 0; i < n; i++) {
        keys[i] = e[i]->key;
        vals[i] = e[i]->value;
        total += strlen(keys[i]) + strlen(vals[i]) + 2;
    }
    if ((p = calloc(1, sizeof(*p))) == NULL ||
        (p->pairs = malloc(total)) == NULL || (p->id = strdup(id)) == NULL) {
        if (p != NULL) {
            free(p->pairs);
            free(p);
        }
        return NULL;
    }
    for (i = 0; i < n; i++) {
        size_t kl = strlen(keys[i]) + 1, vl = strlen(vals[i]) + 1;
        p->keys[i] = memcpy(p->pairs + off, keys[i], kl);
        off += kl;
        p->vals[i] = memcpy(p->pairs + off, vals[i], vl);
        off += vl;
    }
    p->npairs = (uint32_t)n;
    p->rule = rls_rlqs_conf_match(q->conf, keys, vals, n);
    if (p->rule != NULL &&
        (p->bkey = rls_rlqs_budget_key(q->prefix, p->rule, e, n)) == NULL) {
        free(p->pairs);
        free(p->id);
        free(p);
        return NULL;
    }
    snprintf(p->member, sizeof(p->member), "%016llx:%llu:%llu",
             (unsigned long long)q->instance, (unsigned long long)st->seq,
             (unsigned long long)++q->seq);
    p->st = st;
    p->hash = h;
    p->hnext = st->chains[h & (PART_CHAINS - 1)];
    st->chains[h & (PART_CHAINS - 1)] = p;
    rls_list_push(&st->parts, &p->node);
    st->nparts++;
    st->nheld++;
    q->held++;
    q->stats.buckets_open++;
    return p;
}

/* A participant is done: abandoned (abandon: tell the Envoy) or its
 * stream went. */
static void part_end(part_t *p, int abandon)
{
    rls_rlqs_t *q = p->st->q;

    if (p->dead)
        return;
    if (abandon) {
        q->stats.abandons++;
        send_action(p, KIND_NONE, 0, 0, 0, 0);
    }
    p->dead = 1;
    part_unchain(p);
    p->st->nparts--;
    q->stats.buckets_open--;
    leave(p);
}

/* Message tokens: RLS_RLQS_MSGS_PER_S a second, as many at once. */
static int msg_allowed(rls_rlqs_stream_t *st, uint64_t now)
{
    st->tokens += (double)(now - st->tokens_ms) * RLS_RLQS_MSGS_PER_S / 1000.0;
    if (st->tokens > RLS_RLQS_MSGS_PER_S)
        st->tokens = RLS_RLQS_MSGS_PER_S;
    st->tokens_ms = now;
    if (st->tokens < 1.0)
        return 0;
    st->tokens -= 1.0;
    return 1;
}

static void report(rls_rlqs_stream_t *st, const usage_t *u, uint64_t now)
{
    rls_rlqs_t *q = st->q;
    entry_t *e[RLS_RLQS_PAIRS_MAX];
    char id[RLS_RLQS_ID_MAX];
    const char *why;
    part_t *p;
    uint64_t count, h;

    if ((why = rls_rlqs_bucket_check(u->bucket_id, e, id, sizeof(id))) !=
        NULL) {
        q->stats.bad_reports++;
        end_stream(st, RLS_GRPC_INVALID_ARGUMENT, why);
        return;
    }
    h = id_hash(id);
    if ((p = part_find(st, id, h)) == NULL) {
        if (st->nparts >= RLS_RLQS_BUCKETS_PER_STREAM) {
            q->stats.too_many_buckets++;
            end_stream(st, RLS_GRPC_RESOURCE_EXHAUSTED,
                       "more than 1024 buckets on one stream");
            return;
        }
        if ((p = part_new(st, e, u->bucket_id->n_bucket, id, h)) == NULL) {
            end_stream(st, RLS_GRPC_RESOURCE_EXHAUSTED, "out of memory");
            return;
        }
        p->active_ms = now;
    }
    count = u->num_requests_allowed + u->num_requests_denied;
    if (count < u->num_requests_allowed) {
        q->stats.bad_reports++;
        end_stream(st, RLS_GRPC_INVALID_ARGUMENT, "request counts overflow");
        return;
    }
    if (count > 0)
        p->active_ms = now;
    if (p->rule == NULL) {
        if (p->kind == KIND_NONE) {
            q->stats.unmatched++;
            assign(p, KIND_BLANKET, q->conf->unmatched, 0, 0,
                   q->conf->unmatched_ttl_s, now);
        } else if (rls_rlqs_renew_due(p->sent_ms, p->ttl_ms, now)) {
            assign(p, KIND_BLANKET, q->conf->unmatched, 0, 0,
                   q->conf->unmatched_ttl_s, now);
        }
        return;
    }
    /* Counts a stream cannot have had pass 2^53 only by lying: capped so
     * the sums below stay exact. */
    if (p->pend_count + count > ((uint64_t)1 << 53) ||
        p->pend_allowed + u->num_requests_allowed > ((uint64_t)1 << 53)) {
        q->stats.bad_reports++;
        end_stream(st, RLS_GRPC_INVALID_ARGUMENT, "request counts too large");
        return;
    }
    p->pend_allowed += u->num_requests_allowed;
    p->pend_count += count;
    if (p->pending)
        q->stats.coalesced++;
    p->pending = 1;
    if (!p->inflight && now >= p->step_ms + q->conf->min_report_ms)
        step(p, now);
}

void rls_rlqs_message(rls_rlqs_stream_t *st, const uint8_t *p, size_t n)
{
    rls_rlqs_t *q = st->q;
    uint64_t now = uv_now(q->loop);
    reports_t *r;
    size_t i;

    if (st->ended || st->closed)
        return;
    q->stats.reports++;
    if (!msg_allowed(st, now)) {
        q->stats.too_often++;
        end_stream(st, RLS_GRPC_RESOURCE_EXHAUSTED,
                   "more than 50 reports a second");
        return;
    }
    r = envoy__service__rate_limit_quota__v3__rate_limit_quota_usage_reports__unpack(
        NULL, n, p);
    if (r == NULL) {
        q->stats.bad_reports++;
        end_stream(st, RLS_GRPC_INVALID_ARGUMENT,
                   "not a RateLimitQuotaUsageReports");
        return;
    }
    if (!st->have_domain) {
        if (r->domain[0] == '\0' || strlen(r->domain) > RLS_RLQS_NAME_MAX) {
            q->stats.bad_reports++;
            end_stream(st, RLS_GRPC_INVALID_ARGUMENT,
                       "the first report must name a domain (64 bytes at "
                       "most)");
            goto done;
        }
        if (q->conf->domain[0] != '\0' &&
            strcmp(q->conf->domain, r->domain) != 0) {
            q->stats.bad_reports++;
            end_stream(st, RLS_GRPC_INVALID_ARGUMENT,
                       "unknown domain for --rlqs-config");
            goto done;
        }
        strcpy(st->domain, r->domain);
        st->have_domain = 1;
    } else if (r->domain[0] != '\0' && strcmp(r->domain, st->domain) != 0) {
        q->stats.bad_reports++;
        end_stream(st, RLS_GRPC_INVALID_ARGUMENT,
                   "the domain changed on the stream");
        goto done;
    }
    if (r->n_bucket_quota_usages == 0) {
        q->stats.bad_reports++;
        end_stream(st, RLS_GRPC_INVALID_ARGUMENT, "no bucket_quota_usages");
        goto done;
    }
    for (i = 0; i < r->n_bucket_quota_usages && !st->ended; i++)
        report(st, r->bucket_quota_usages[i], now);
done:
    envoy__service__rate_limit_quota__v3__rate_limit_quota_usage_reports__free_unpacked(
        r, NULL);
}

/* ------------------------------------------------------------------------ */
/* Streams and the service */

rls_rlqs_stream_t *rls_rlqs_open(rls_rlqs_t *q, const rls_rlqs_sink_t *sink)
{
    rls_rlqs_stream_t *st;

    if (q->freeing || q->stats.streams_open >= RLS_RLQS_STREAMS_MAX ||
        (st = calloc(1, sizeof(*st))) == NULL) {
        q->stats.streams_refused++;
        return NULL;
    }
    st->q = q;
    st->sink = *sink;
    st->seq = ++q->seq;
    st->tokens = RLS_RLQS_MSGS_PER_S;
    st->tokens_ms = uv_now(q->loop);
    rls_list_init(&st->parts);
    rls_list_push(&q->streams, &st->node);
    q->held++;
    q->stats.streams_total++;
    q->stats.streams_open++;
    return st;
}

void rls_rlqs_close(rls_rlqs_stream_t *st)
{
    rls_list_t *n, *next;

    if (st == NULL || st->closed)
        return;
    st->closed = 1;
    st->q->stats.streams_open--;
    /* Held by the stream itself while its parts are ended: a part whose
     * store call answers at once (the memory store) is freed inside. */
    st->nheld++;
    for (n = st->parts.next; n != &st->parts; n = next) {
        next = n->next;
        part_end(RLS_CONTAINER_OF(n, part_t, node), 0);
    }
    st->nheld--;
    stream_release(st);
}

static void on_tick(uv_timer_t *t)
{
    rls_rlqs_t *q = t->data;
    uint64_t now = uv_now(q->loop);
    rls_list_t *sn, *pn, *pnext;

    for (sn = q->streams.next; sn != &q->streams; sn = sn->next) {
        rls_rlqs_stream_t *st = RLS_CONTAINER_OF(sn, rls_rlqs_stream_t, node);
        if (st->closed || st->ended)
            continue;
        for (pn = st->parts.next; pn != &st->parts; pn = pnext) {
            part_t *p = RLS_CONTAINER_OF(pn, part_t, node);
            uint32_t ab = p->rule != NULL ? p->rule->abandon_s : 60;
            pnext = pn->next;
            if (p->dead)
                continue;
            if (rls_rlqs_abandon_due(p->active_ms, ab, now)) {
                part_end(p, 1);
                continue;
            }
            if (p->rule != NULL && p->pending && !p->inflight &&
                now >= p->step_ms + q->conf->min_report_ms)
                step(p, now);
            /* Renewed on time even when the reports come late (an Envoy
             * whose reporting_interval is near half the TTL, a loop or a
             * client behind): while the store answered within half the
             * TTL. With the store down the TTL runs out (the fail mode);
             * an Envoy gone silent stops being renewed too. */
            else if (p->rule != NULL && p->kind != KIND_NONE && !p->inflight &&
                     rls_rlqs_renew_due(p->sent_ms, p->ttl_ms, now) &&
                     now < p->ok_ms + p->ttl_ms / 2)
                assign(p, p->kind, p->blanket, p->q, p->b, p->rule->ttl_s, now);
        }
    }
}

int rls_rlqs_new(rls_rlqs_t **out, uv_loop_t *loop, rls_store_t *store,
                 rls_rlqs_conf_t *conf, const char *prefix)
{
    rls_rlqs_t *q;
    rl_hash_key_t k;

    *out = NULL;
    if ((q = calloc(1, sizeof(*q))) == NULL) {
        rls_rlqs_conf_free(conf);
        return RL_ENOMEM;
    }
    q->loop = loop;
    q->store = store;
    q->conf = conf;
    snprintf(q->prefix, sizeof(q->prefix), "%s", prefix);
    rls_random_key(&k);
    memcpy(&q->instance, &k,
           sizeof(q->instance) < sizeof(k) ? sizeof(q->instance) : sizeof(k));
    rls_list_init(&q->streams);
    uv_timer_init(loop, &q->timer);
    q->timer.data = q;
    uv_timer_start(&q->timer, on_tick, TICK_MS, TICK_MS);
    uv_unref((uv_handle_t *)&q->timer);
    *out = q;
    return 0;
}

void rls_rlqs_free(rls_rlqs_t *q)
{
    if (q == NULL || q->freeing)
        return;
    q->freeing = 1;
    uv_timer_stop(&q->timer);
    uv_close((uv_handle_t *)&q->timer, on_timer_closed);
}

const rls_rlqs_stats_t *rls_rlqs_stats(const rls_rlqs_t *q)
{
    return &q->stats;
}

int rls_rlqs_metrics(const rls_rlqs_t *q, rl_buf_t *out)
{
    const rls_rlqs_stats_t *s = &q->stats;
    const struct {
        const char *name, *help;
        uint64_t v;
        int gauge;
    } m[] = {
        {"rl_rlqs_streams_total", "RLQS streams opened.", s->streams_total, 0},
        {"rl_rlqs_streams_open", "RLQS streams open now.", s->streams_open, 1},
        {"rl_rlqs_streams_refused_total",
         "RLQS streams refused (65536 open on the loop).", s->streams_refused,
         0},
        {"rl_rlqs_reports_total", "RLQS usage report messages.", s->reports, 0},
        {"rl_rlqs_bad_reports_total",
         "RLQS streams ended INVALID_ARGUMENT (a report that breaks the "
         "protocol).",
         s->bad_reports, 0},
        {"rl_rlqs_too_often_total",
         "RLQS streams ended: more than 50 reports a second.", s->too_often, 0},
        {"rl_rlqs_too_many_buckets_total",
         "RLQS streams ended: more than 1024 buckets.", s->too_many_buckets, 0},
        {"rl_rlqs_buckets_open", "RLQS buckets tracked now (per stream).",
         s->buckets_open, 1},
        {"rl_rlqs_coalesced_total",
         "RLQS reports added to a store call still pending.", s->coalesced, 0},
        {"rl_rlqs_store_calls_total", "RLQS store calls (one per step).",
         s->store_calls, 0},
        {"rl_rlqs_store_errors_total", "RLQS store calls that failed.",
         s->store_errors, 0},
        {"rl_rlqs_assignments_total",
         "RLQS assignments sent (token buckets and blanket rules).",
         s->assignments, 0},
        {"rl_rlqs_renewals_total",
         "RLQS assignments sent again unchanged (their TTL extended).",
         s->renewals, 0},
        {"rl_rlqs_fallbacks_total",
         "RLQS fallbacks sent: the store down past the last assignment's "
         "TTL.",
         s->fallbacks, 0},
        {"rl_rlqs_unmatched_total", "RLQS buckets no rule takes.", s->unmatched,
         0},
        {"rl_rlqs_abandons_total", "RLQS buckets abandoned.", s->abandons, 0},
    };
    size_t i;
    int rc = 0;

    for (i = 0; rc == 0 && i < sizeof(m) / sizeof(m[0]); i++)
        rc = m[i].gauge ? rls_prom_gauge(out, m[i].name, m[i].help, m[i].v)
                        : rls_prom_counter(out, m[i].name, m[i].help, m[i].v);
    return rc;
}
