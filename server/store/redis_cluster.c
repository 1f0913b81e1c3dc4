/* Redis Cluster store: the counters of each caller live on the master
 * that serves the caller's hash slot; one Redis store (redis.c) per master
 * does the talking.
 *
 * Slot map. Loaded from CLUSTER SHARDS (CLUSTER SLOTS when a node does not
 * know SHARDS, before Redis 7) of any node that is up, first a seed; then
 * again every 2 s, every 250 ms while some slot has no reachable master (a
 * failover: the replica's promotion is seen within a quarter second), and
 * within 100 ms of a MOVED or of a call failing on a lost connection.
 * Masters get a Redis store each when they enter the map (it connects,
 * AUTHs, loads the script and samples TIME as the single-Redis store
 * does); a node that leaves the map is closed once nothing of ours is in
 * flight on it.
 *
 * Calls. A batch's ops are sorted by master, and each master gets one
 * script call (EVALSHA of the cluster script, with redis.c's NOSCRIPT
 * handling) for all of its ops. Redis refuses a call whose declared keys
 * span slots (CROSSSLOT), even from a script flagged allow-cross-slot-keys
 * (checked on 7.0.15; the flag covers keys a script touches without
 * declaring them), so the keys go undeclared (redis_cluster_prologue.lua,
 * rls_redis_cluster_script) and Redis checks each as the script touches
 * it: an op whose keys this master does not serve fails alone, before
 * writing anything (eNONLOCAL), and is sent again on its own with its
 * keys declared, so that Redis's routing answers MOVED or ASK for it. The
 * calls of one batch leave in one write per master (cork/uncork).
 * DESIGN.md ("Redis Cluster store") has the measured cost.
 *
 * Redirections: a node's store hands MOVED, ASK, TRYAGAIN and CLUSTERDOWN
 * replies back uncounted (is_redirect, rls_redis_redirect). MOVED (the map
 * was stale) updates the slot and resends the call to the named node; ASK
 * (the slot is migrating) resends it, preceded by ASKING (a flag of the
 * call: the node's store puts it before every send, see redis.c), without
 * touching the map; either only to a node the map gives slots (any other
 * is retried after a refresh, never connected to); TRYAGAIN and
 * CLUSTERDOWN resend it after 10, 20, 40... ms while the batch is younger
 * than the timeout. At most MAX_HOPS resends a call. Each of those replies
 * means Redis ran nothing of the call, so a resend never counts twice. A
 * call that fails any other way (timeout, connection lost with the call in
 * flight) is never resent: its ops are answered by the fail mode, as with
 * one Redis, because it may have run.
 *
 * Each call's ops are reported to the batcher as soon as that call is
 * answered (store->part), so a slow master delays only its own requests;
 * the batch's callback fires once, after its last call. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hiredis/hiredis.h>

#include "base/log.h"
#include "base/prom.h"
#include "rl_error.h"
#include "store/redis.h"
#include "store/redis_cluster.h"
#include "store/redis_cluster_map.h"
#include "store/redis_parse.h"
#include "store/redis_script.h"
#include "store/store.h"

#define TICK_MS 50
#define REFRESH_EVERY_MS 2000
#define REFRESH_DOWN_MS 250
#define REFRESH_MIN_MS 100
#define MAX_HOPS 5

typedef struct rls_cluster_s rls_cluster_t;

typedef struct node_s {
    struct node_s *next;
    rls_cluster_t *cl;
    rls_store_t *st;
    char host[RLS_NODE_HOST_MAX + 1];
    int port;
    unsigned id;     /* order of creation: sorts a batch's ops by node */
    char addr[RLS_NODE_HOST_MAX + 8]; /* host:port, the metrics label */
    int retired;     /* not in the map: closed once nothing is in flight */
    int closed;      /* close called; freed from its done callback */
    int up;          /* st->v->up, as of the last tick */
    size_t inflight; /* our calls and commands on it */
    uint32_t slots;  /* slots the map gives it */
    int mapped;      /* has had slots in an applied map */
    uint64_t moved, ask, calls;
} node_t;

typedef struct batch_s batch_t;

typedef struct call_s {
    struct call_s *next; /* waiting for a retry */
    batch_t *bt;
    node_t *node;
    uint32_t off, n; /* bt->sub[off, off + n) */
    unsigned slot;   /* of a declared call */
    int hops, asking, declared;
    uint64_t due_ms, sent_ns;
} call_t;

struct batch_s {
    rls_cluster_t *cl;
    rls_op_t *ops;
    size_t n;
    rls_store_cb cb;
    void *data;
    size_t pending; /* calls not yet answered, + 1 while being sent */
    uint64_t start_ms;
    rls_op_t *sub;   /* copies of ops, sorted by master, then slot */
    uint64_t *order; /* slot << 32 | index into ops, in that order */
    call_t *calls;   /* room for 2n: one per master, and one per op */
    size_t ncalls;   /* sent again on its own after eNONLOCAL */
    rls_op_window_t
        *quota_win;  /* stored quotas' windows, RL_ADMIT_WINDOWS_MAX per op */
    uint32_t *idx;   /* scratch: the ops of a part reported early */
    size_t cap;      /* ops the block has room for (quota_win too, if made) */
    batch_t *next;   /* in the pool */
};

/* Spare batch records kept: steady traffic allocates nothing per batch. */
#define POOL_MAX 8

struct rls_cluster_s {
    rls_store_t base;
    uv_loop_t *loop;
    char *user, *password;
    const struct rls_redis_tls_s *tls;
    uint64_t timeout_ms, grace_ms;
    char seed_host[RLS_CLUSTER_SEEDS_MAX][RLS_NODE_HOST_MAX + 1];
    int seed_port[RLS_CLUSTER_SEEDS_MAX];
    int nseeds;
    node_t *nodes;
    node_t *slot[RLS_SLOTS];
    int have_map, use_slots_cmd, refreshing, want_refresh, closing;
    uint64_t last_refresh_ms, no_node_since_ms;
    call_t *retry; /* calls waiting for TRYAGAIN / CLUSTERDOWN backoff */
    batch_t *pool;
    unsigned npool;
    uv_timer_t tick;
    uint64_t refreshes, refresh_failures, moved, ask;
    uint64_t unmapped; /* redirections to nodes not in the map */
    uint32_t slots_down;
    unsigned masters, covered; /* in the map applied last */
    uint64_t last_ms;
    unsigned next_id;
    int quiet; /* the nodes' shared "connect failure logged" */
    int open; /* tick handle + nodes not yet freed */
    void (*done)(void *);
    void *done_arg;
};

static void dispatch(call_t *c);

/* ---- nodes --------------------------------------------------------------*/

static void maybe_finish(rls_cluster_t *cl)
{
    batch_t *bt;

    if (!cl->closing || cl->open > 0)
        return;
    while ((bt = cl->pool) != NULL) {
        cl->pool = bt->next;
        free(bt->quota_win);
        free(bt);
    }
    free(cl->user);
    free(cl->password);
    if (cl->done != NULL)
        cl->done(cl->done_arg);
    free(cl);
}

static void on_node_closed(void *arg)
{
    node_t *nd = arg, **pp;
    rls_cluster_t *cl = nd->cl;

    for (pp = &cl->nodes; *pp != NULL; pp = &(*pp)->next)
        if (*pp == nd) {
            *pp = nd->next;
            break;
        }
    free(nd);
    cl->open--;
    maybe_finish(cl);
}

static void node_close(node_t *nd)
{
    int s;

    if (nd->closed)
        return;
    nd->closed = 1;
    for (s = 0; s < RLS_SLOTS; s++)
        if (nd->cl->slot[s] == nd)
            nd->cl->slot[s] = NULL;
    nd->st->v->close(nd->st, on_node_closed, nd);
}

/* A node's store hands these error replies back to us uncounted
 * (rls_redis_redirect): Redis ran nothing of the call, and on_call_done
 * sends it where the reply says. */
static int is_redirect(const char *err, size_t len)
{
    return rls_cluster_redirect_kind(err, len) != 0;
}

/* The live node at host:port, made (and connecting) if there is none.
 * NULL when out of memory. */
static node_t *node_get(rls_cluster_t *cl, const char *host, int port)
{
    rls_redis_opts_t o;
    node_t *nd;

    for (nd = cl->nodes; nd != NULL; nd = nd->next)
        if (!nd->retired && !nd->closed && nd->port == port &&
            strcmp(nd->host, host) == 0)
            return nd;
    if (cl->closing || (nd = calloc(1, sizeof(*nd))) == NULL)
        return NULL;
    snprintf(nd->host, sizeof(nd->host), "%s", host);
    nd->port = port;
    nd->id = ++cl->next_id;
    snprintf(nd->addr, sizeof(nd->addr), "%s:%d", host, port);
    memset(&o, 0, sizeof(o));
    o.host = nd->host;
    o.port = port;
    o.user = cl->user;
    o.password = cl->password;
    o.tls = cl->tls;
    o.timeout_ms = cl->timeout_ms;
    o.grace_ms = cl->grace_ms;
    o.no_module = 1;
    o.quiet = &cl->quiet;
    o.script = rls_redis_cluster_script(&o.script_len);
    o.is_redirect = is_redirect;
    o.over_cap = &cl->base.stats.reply_over_cap;
    if ((nd->st = rls_store_redis_new(cl->loop, &o)) == NULL) {
        free(nd);
        return NULL;
    }
    nd->cl = cl;
    nd->next = cl->nodes;
    cl->nodes = nd;
    cl->open++;
    RLS_DEBUG("redis cluster node added", " node=%s", nd->addr);
    return nd;
}

/* The live node at host:port if the applied map gives it slots, else
 * NULL. A redirection is followed only to such a node: the map comes from
 * the cluster itself, while a MOVED or ASK reply could name any address,
 * and following it means connecting there and sending the password. */
static node_t *node_mapped(rls_cluster_t *cl, const char *host, int port)
{
    node_t *nd;

    for (nd = cl->nodes; nd != NULL; nd = nd->next)
        if (!nd->retired && !nd->closed && nd->slots > 0 &&
            nd->port == port && strcmp(nd->host, host) == 0)
            return nd;
    return NULL;
}

/* ---- the slot map -------------------------------------------------------*/

static void apply_map(rls_cluster_t *cl, const rls_slot_range_t *r, size_t n)
{
    static _Thread_local uint8_t named[RLS_SLOTS];
    node_t *nd, *was;
    size_t i;
    unsigned s, changed = 0, masters = 0, covered = 0, added = 0;

    memset(named, 0, sizeof(named));
    for (nd = cl->nodes; nd != NULL; nd = nd->next)
        nd->slots = 0;
    for (i = 0; i < n; i++) {
        nd = node_get(cl, r[i].host, r[i].port);
        for (s = r[i].first; s <= r[i].last; s++) {
            was = cl->slot[s];
            cl->slot[s] = nd;
            changed += was != nd && !named[s];
            named[s] = 1;
        }
    }
    /* Slots no range names have no master now. */
    for (s = 0; s < RLS_SLOTS; s++) {
        if (!named[s]) {
            changed += cl->slot[s] != NULL;
            cl->slot[s] = NULL;
        }
        if (cl->slot[s] != NULL) {
            cl->slot[s]->slots++;
            covered++;
        }
    }
    for (nd = cl->nodes; nd != NULL; nd = nd->next) {
        masters += nd->slots > 0;
        if (nd->slots > 0 && !nd->mapped) {
            nd->mapped = 1;
            added++;
        }
        if (nd->slots == 0 && !nd->retired && !nd->closed) {
            nd->retired = 1;
            RLS_DEBUG("redis cluster node left the map", " node=%s",
                      nd->addr);
        }
    }
    cl->refreshes++;
    /* Info when the set of masters changes (a failover, a node added);
     * slots moving between the same masters (a resharding, many maps a
     * second) at debug. */
    if (!cl->have_map || masters != cl->masters || covered != cl->covered ||
        added > 0)
        RLS_INFO(cl->have_map ? "redis cluster map changed"
                              : "redis cluster map loaded",
                 " masters=%u new_masters=%u slots_covered=%u slots_moved=%u",
                 masters, added, covered, changed);
    else if (changed > 0)
        RLS_DEBUG("redis cluster slots moved", " slots_moved=%u", changed);
    cl->masters = masters;
    cl->covered = covered;
    cl->have_map = 1;
}

static void on_map_reply(void *data, void *reply)
{
    node_t *nd = data;
    rls_cluster_t *cl = nd->cl;
    redisReply *r = reply;
    rls_slot_range_t *ranges;
    int n;

    nd->inflight--;
    cl->refreshing = 0;
    cl->last_refresh_ms = uv_now(cl->loop);
    if (cl->closing)
        return;
    if (r == NULL) {
        cl->refresh_failures++;
        cl->want_refresh = 1;
        return;
    }
    if (r->type == REDIS_REPLY_ERROR && !cl->use_slots_cmd) {
        /* Before Redis 7: CLUSTER SLOTS has the same facts. */
        cl->use_slots_cmd = 1;
        cl->want_refresh = 1;
        cl->last_refresh_ms = 0;
        return;
    }
    if ((ranges = malloc(RLS_SLOTS * sizeof(*ranges))) == NULL) {
        cl->refresh_failures++;
        return;
    }
    n = rls_cluster_parse_map_tls(r, ranges, RLS_SLOTS, cl->tls != NULL);
    if (n < 0) {
        cl->refresh_failures++;
        RLS_WARN("redis cluster map unreadable", " node=%s err=\"%s\"",
                 nd->addr,
                 r->type == REDIS_REPLY_ERROR ? r->str : "unexpected reply");
    } else {
        apply_map(cl, ranges, (size_t)n);
    }
    free(ranges);
}

static void refresh(rls_cluster_t *cl)
{
    const char *argv[2] = {"CLUSTER", NULL};
    size_t lens[2] = {7, 0};
    node_t *nd, *pick = NULL;
    int i;

    /* A node that serves slots first, then any node that is up. */
    for (nd = cl->nodes; nd != NULL; nd = nd->next) {
        if (nd->closed || !nd->st->v->up(nd->st))
            continue;
        if (pick == NULL || (pick->slots == 0 && nd->slots > 0))
            pick = nd;
    }
    if (pick == NULL) {
        /* Nothing reachable for a second: the seeds again, in case every
         * node we knew has gone. */
        uint64_t now = uv_now(cl->loop);
        if (cl->no_node_since_ms == 0)
            cl->no_node_since_ms = now;
        else if (now - cl->no_node_since_ms >= 1000) {
            for (i = 0; i < cl->nseeds; i++)
                node_get(cl, cl->seed_host[i], cl->seed_port[i]);
            cl->no_node_since_ms = now;
        }
        return;
    }
    cl->no_node_since_ms = 0;
    argv[1] = cl->use_slots_cmd ? "SLOTS" : "SHARDS";
    lens[1] = strlen(argv[1]);
    if (pick->st->v->command(pick->st, 2, argv, lens, on_map_reply, pick) !=
        RL_OK)
        return;
    pick->inflight++;
    cl->refreshing = 1;
    cl->want_refresh = 0;
    cl->last_refresh_ms = uv_now(cl->loop);
}

/* ---- batches ------------------------------------------------------------*/

static void batch_end(batch_t *bt)
{
    rls_cluster_t *cl = bt->cl;

    if (--bt->pending > 0)
        return;
    bt->cb(bt->data, bt->ops, bt->n, 0);
    if (cl->npool < POOL_MAX) {
        bt->next = cl->pool;
        cl->pool = bt;
        cl->npool++;
        return;
    }
    free(bt->quota_win);
    free(bt);
}

/* A batch record with room for n ops, from the pool or made; NULL when out
 * of memory. Its fields are zero but for its room. */
static batch_t *batch_take(rls_cluster_t *cl, size_t n)
{
    batch_t *bt, **pp;
    rls_op_window_t *quota_win = NULL;
    size_t cap;

    for (pp = &cl->pool; (bt = *pp) != NULL; pp = &bt->next)
        if (bt->cap >= n)
            break;
    if (bt != NULL) {
        *pp = bt->next;
        cl->npool--;
        cap = bt->cap;
        quota_win = bt->quota_win;
    } else {
        cap = (n + 63) & ~(size_t)63;
        bt = malloc(sizeof(*bt) + cap * (sizeof(rls_op_t) + sizeof(uint64_t) +
                                         2 * sizeof(call_t) +
                                         sizeof(uint32_t)));
        if (bt == NULL)
            return NULL;
    }
    memset(bt, 0, sizeof(*bt));
    bt->cap = cap;
    bt->quota_win = quota_win;
    bt->sub = (rls_op_t *)(void *)(bt + 1);
    bt->order = (uint64_t *)(void *)(bt->sub + cap);
    bt->calls = (call_t *)(void *)(bt->order + cap);
    bt->idx = (uint32_t *)(void *)(bt->calls + 2 * cap);
    return bt;
}

/* Reports bt->idx[0, k) to the batcher as decided, so that their requests
 * are answered now (a slow master delays only its own), unless the batch's
 * callback is about to answer everything anyway. */
static void report_part(batch_t *bt, size_t k)
{
    rls_cluster_t *cl = bt->cl;

    if (cl->base.part != NULL && bt->pending > 1 && k > 0)
        cl->base.part(bt->data, bt->ops, bt->idx, k);
}

/* The call's ops get `status`, and it ends. */
static void call_fail(call_t *c, int status)
{
    batch_t *bt = c->bt;
    rls_cluster_t *cl = bt->cl;
    uint32_t j;

    for (j = 0; j < c->n; j++) {
        bt->idx[j] = (uint32_t)bt->order[c->off + j];
        bt->ops[bt->idx[j]].err = status;
    }
    report_part(bt, c->n);
    cl->base.stats.errors++;
    if (status == RL_ETIMEDOUT) {
        cl->base.stats.timeouts++;
        cl->base.stats.errors_kind[RLS_SERR_TIMEOUT]++;
    } else {
        cl->base.stats.errors_kind[RLS_SERR_UNAVAILABLE]++;
    }
    batch_end(bt);
}

static void on_call_done(void *data, rls_op_t *ops, size_t n, int status)
{
    call_t *c = data;
    batch_t *bt = c->bt;
    rls_cluster_t *cl = bt->cl;
    node_t *nd = c->node, *to;
    rls_redirect_t rd;
    const char *text;
    size_t len, j;
    uint64_t now, wait;

    nd->inflight--;
    if (status == 0) {
        call_t *more = bt->calls + bt->ncalls;
        size_t nmore = 0, k = 0;

        for (j = 0; j < n; j++) {
            uint32_t i = (uint32_t)bt->order[c->off + j];
            rls_op_t *o = &bt->ops[i];
            if (ops[j].err == RLS_REDIS_ENOTHERE) {
                /* Not this master's (a stale map, a migrating slot): it
                 * ran nothing; sent again alone, keys declared, so that
                 * Redis answers MOVED or ASK for it. */
                call_t *f = &more[nmore++];
                memset(f, 0, sizeof(*f));
                f->bt = bt;
                f->off = c->off + (uint32_t)j;
                f->n = 1;
                f->slot = (unsigned)(bt->order[f->off] >> 32);
                f->declared = 1;
                f->hops = c->hops + 1;
                f->node = cl->slot[f->slot] != NULL ? cl->slot[f->slot] : nd;
                ops[j].err = 0;
                continue;
            }
            bt->idx[k++] = i;
            o->admitted = ops[j].admitted;
            o->err = ops[j].err;
            if (ops[j].err != 0) {
                cl->base.stats.errors_kind[RLS_SERR_OTHER]++;
                continue;
            }
            if (ops[j].nquota_win > 0) {
                if (bt->quota_win == NULL &&
                    (bt->quota_win = malloc(bt->cap * RL_ADMIT_WINDOWS_MAX *
                                            sizeof(*bt->quota_win))) == NULL) {
                    o->err = RL_ENOMEM;
                    continue;
                }
                memcpy(&bt->quota_win[(size_t)i * RL_ADMIT_WINDOWS_MAX],
                       ops[j].quota_win,
                       ops[j].nquota_win * sizeof(*bt->quota_win));
                o->quota_win = &bt->quota_win[(size_t)i * RL_ADMIT_WINDOWS_MAX];
                o->nquota_win = ops[j].nquota_win;
            }
        }
        cl->base.stats.rtt_us_last = (uv_hrtime() - c->sent_ns) / 1000;
        rls_hist_observe(&cl->base.stats.rtt_us, cl->base.stats.rtt_us_last);
        /* Every follow-up counted before anything is answered or sent:
         * one may be answered at once (and reuse idx). */
        bt->ncalls += nmore;
        bt->pending += nmore;
        report_part(bt, k);
        if (nmore > 0) {
            cl->want_refresh = 1;
            for (j = 0; j < nmore; j++) {
                if (cl->closing || more[j].hops > MAX_HOPS)
                    call_fail(&more[j], cl->closing ? RL_ESHUTDOWN : RL_ESTORE);
                else
                    dispatch(&more[j]);
            }
        }
        batch_end(bt);
        return;
    }
    text = rls_redis_redirect(nd->st, &len);
    if (text == NULL) {
        /* A lost or refused connection: the map may be stale (a master
         * died). The call may have run: never resent. */
        if (status != RL_ETIMEDOUT)
            cl->want_refresh = 1;
        call_fail(c, status);
        return;
    }
    if (cl->closing || c->hops >= MAX_HOPS ||
        rls_cluster_parse_redirect(text, len, nd->host, &rd) != 0) {
        RLS_DEBUG("redis cluster redirection not followed", " err=\"%.*s\"",
                  (int)len, text);
        call_fail(c, cl->closing ? RL_ESHUTDOWN : RL_ESTORE);
        return;
    }
    c->hops++;
    for (j = 0; j < n; j++) {
        ops[j].err = 0;
        ops[j].nquota_win = 0;
        ops[j].quota_win = NULL;
    }
    if ((rd.kind == RLS_REDIR_MOVED || rd.kind == RLS_REDIR_ASK) &&
        (to = node_mapped(cl, rd.host, rd.port)) == NULL) {
        /* A node the map does not know (yet): the map is refreshed from
         * the cluster, and the call goes back where it was after the
         * backoff below; by then a real move is in the map, and a
         * redirection anywhere else is never followed. */
        cl->unmapped++;
        RLS_DEBUG("redis cluster redirection to a node not in the map",
                  " node=%s:%d", rd.host, rd.port);
    } else if (rd.kind == RLS_REDIR_MOVED || rd.kind == RLS_REDIR_ASK) {
        if (rd.kind == RLS_REDIR_MOVED) {
            nd->moved++;
            cl->moved++;
            cl->slot[rd.slot] = to;
            cl->want_refresh = 1;
            c->asking = 0;
        } else {
            nd->ask++;
            cl->ask++;
            c->asking = 1;
        }
        c->node = to;
        dispatch(c);
        return;
    }
    /* TRYAGAIN (a multi-key call during a migration), CLUSTERDOWN or a
     * redirection to an unknown node: again after a short backoff, while
     * the batch is younger than the timeout. */
    now = uv_now(cl->loop);
    wait = (uint64_t)10 << (c->hops - 1);
    if (now + wait >= bt->start_ms + cl->timeout_ms) {
        call_fail(c, RL_ETIMEDOUT);
        return;
    }
    cl->want_refresh = 1;
    c->due_ms = now + wait;
    c->next = cl->retry;
    cl->retry = c;
    nd->inflight++; /* not closed while a call waits to go back to it */
}

static void dispatch(call_t *c)
{
    node_t *nd = c->node;

    nd->inflight++;
    nd->calls++;
    c->sent_ns = uv_hrtime();
    /* May call on_call_done before returning (a node that is down). */
    rls_redis_submit_ex(nd->st, c->bt->sub + c->off, c->n, on_call_done, c,
                        (c->asking ? RLS_REDIS_ASKING : 0) |
                            (c->declared ? 0 : RLS_REDIS_UNDECLARED));
}

/* Sorts a batch's ops by master (the map's, at submission), then slot,
 * then arrival. The loop is single-threaded: the map is passed aside. */
static const rls_cluster_t *sort_cl;

static int cmp_op(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    const node_t *nx = sort_cl->slot[x >> 32], *ny = sort_cl->slot[y >> 32];
    unsigned ix = nx != NULL ? nx->id : 0, iy = ny != NULL ? ny->id : 0;

    if (ix != iy)
        return ix < iy ? -1 : 1;
    return x < y ? -1 : x > y;
}

static void cl_submit(rls_store_t *s, rls_op_t *ops, size_t n, rls_store_cb cb,
                      void *data)
{
    rls_cluster_t *cl = (rls_cluster_t *)s;
    batch_t *bt;
    node_t *nd;
    size_t i, j, k;

    s->stats.batches++;
    s->stats.ops += n;
    if (n == 0) {
        cb(data, ops, n, 0);
        return;
    }
    if (cl->closing || !cl->have_map || (bt = batch_take(cl, n)) == NULL) {
        for (i = 0; i < n; i++)
            ops[i].err = cl->closing ? RL_ESHUTDOWN : RL_ESTORE;
        s->stats.errors++;
        s->stats.errors_kind[RLS_SERR_UNAVAILABLE]++;
        cb(data, ops, n, cl->closing ? RL_ESHUTDOWN : RL_ESTORE);
        return;
    }
    bt->cl = cl;
    bt->ops = ops;
    bt->n = n;
    bt->cb = cb;
    bt->data = data;
    bt->start_ms = uv_now(cl->loop);
    for (i = 0; i < n; i++)
        bt->order[i] = (uint64_t)rls_key_slot(ops[i].key, ops[i].key_len)
                           << 32 |
                       i;
    sort_cl = cl;
    qsort(bt->order, n, sizeof(*bt->order), cmp_op);
    for (i = 0; i < n; i++)
        bt->sub[i] = ops[(uint32_t)bt->order[i]];
    /* One call per master: its ops' keys go undeclared (they span
     * slots), under the cluster script's allow-cross-slot-keys. */
    for (i = 0; i < n; i = j) {
        unsigned slot = (unsigned)(bt->order[i] >> 32);
        call_t *c = &bt->calls[bt->ncalls++];
        for (j = i + 1;
             j < n && cl->slot[bt->order[j] >> 32] == cl->slot[slot]; j++)
            ;
        memset(c, 0, sizeof(*c));
        c->bt = bt;
        c->off = (uint32_t)i;
        c->n = (uint32_t)(j - i);
        c->slot = slot;
        c->node = cl->slot[slot];
    }
    bt->pending = bt->ncalls + 1;
    /* Each master's calls leave in one write. */
    for (nd = cl->nodes; nd != NULL; nd = nd->next)
        if (!nd->closed)
            rls_redis_cork(nd->st);
    for (k = 0; k < bt->ncalls; k++) {
        if (bt->calls[k].node == NULL) {
            call_fail(&bt->calls[k], RL_ESTORE); /* no master for the slot */
            continue;
        }
        dispatch(&bt->calls[k]);
    }
    for (nd = cl->nodes; nd != NULL; nd = nd->next)
        if (!nd->closed)
            rls_redis_uncork(nd->st);
    batch_end(bt);
}

/* ---- tick: health, retries, refreshes, retired nodes --------------------*/

static void on_tick(uv_timer_t *t)
{
    rls_cluster_t *cl = t->data;
    node_t *nd, *next;
    call_t *c, **pp, *due = NULL;
    uint64_t now = uv_now(cl->loop), every;
    unsigned s, down = 0;

    for (nd = cl->nodes; nd != NULL; nd = nd->next)
        nd->up = !nd->closed && nd->st->v->up(nd->st);
    for (s = 0; s < RLS_SLOTS; s++)
        down += cl->slot[s] == NULL || !cl->slot[s]->up;
    cl->slots_down = cl->have_map ? down : RLS_SLOTS;
    if (cl->slots_down > 0)
        snprintf(cl->base.stats.down_text, sizeof(cl->base.stats.down_text),
                 "store unavailable: %u of %u slots (%u%%) have no reachable "
                 "master",
                 cl->slots_down, RLS_SLOTS,
                 (cl->slots_down * 100 + RLS_SLOTS - 1) / RLS_SLOTS);
    else
        cl->base.stats.down_text[0] = '\0';

    for (pp = &cl->retry; (c = *pp) != NULL;) {
        if (c->due_ms <= now) {
            *pp = c->next;
            c->next = due;
            due = c;
        } else {
            pp = &c->next;
        }
    }
    while ((c = due) != NULL) {
        due = c->next;
        c->node->inflight--;
        /* The slot's master as the map now says. */
        if (c->declared && cl->slot[c->slot] != NULL)
            c->node = cl->slot[c->slot];
        dispatch(c);
    }

    every = cl->slots_down > 0 ? REFRESH_DOWN_MS : REFRESH_EVERY_MS;
    if (!cl->refreshing &&
        (now - cl->last_refresh_ms >= every ||
         (cl->want_refresh && now - cl->last_refresh_ms >= REFRESH_MIN_MS)))
        refresh(cl);

    for (nd = cl->nodes; nd != NULL; nd = next) {
        next = nd->next;
        if (nd->retired && nd->inflight == 0 && !nd->closed)
            node_close(nd);
    }
}

/* ---- the vtbl -----------------------------------------------------------*/

/* Redis's clock, from one node: the one serving slot 0 while it is up,
 * else any that is up. Never goes backwards. */
static uint64_t cl_now_ms(rls_store_t *s)
{
    rls_cluster_t *cl = (rls_cluster_t *)s;
    node_t *nd = cl->slot[0], *pick = NULL;
    uint64_t ms;

    if (nd != NULL && nd->up && !nd->closed)
        pick = nd;
    for (nd = cl->nodes; pick == NULL && nd != NULL; nd = nd->next)
        if (!nd->closed && nd->up)
            pick = nd;
    if (pick == NULL)
        for (nd = cl->nodes; pick == NULL && nd != NULL; nd = nd->next)
            if (!nd->closed)
                pick = nd;
    ms = pick != NULL ? pick->st->v->now_ms(pick->st) : cl->last_ms;
    if (ms < cl->last_ms)
        ms = cl->last_ms;
    cl->last_ms = ms;
    return ms;
}

static int cl_up(rls_store_t *s)
{
    rls_cluster_t *cl = (rls_cluster_t *)s;

    return cl->have_map && cl->slots_down == 0;
}

static void on_tick_closed(uv_handle_t *h)
{
    rls_cluster_t *cl = h->data;

    cl->open--;
    maybe_finish(cl);
}

static void cl_close(rls_store_t *s, void (*done)(void *arg), void *arg)
{
    rls_cluster_t *cl = (rls_cluster_t *)s;
    node_t *nd, *next;
    call_t *c;

    cl->done = done;
    cl->done_arg = arg;
    cl->closing = 1;
    while ((c = cl->retry) != NULL) {
        cl->retry = c->next;
        c->node->inflight--;
        call_fail(c, RL_ESHUTDOWN);
    }
    for (nd = cl->nodes; nd != NULL; nd = next) {
        next = nd->next;
        node_close(nd);
    }
    uv_close((uv_handle_t *)&cl->tick, on_tick_closed);
}

typedef struct {
    node_t *nd;
    void (*cb)(void *data, void *reply);
    void *data;
} cmd_t;

static void on_cmd_reply(void *data, void *reply)
{
    cmd_t *k = data;
    redisReply *r = reply;

    k->nd->inflight--;
    if (r != NULL && r->type == REDIS_REPLY_ERROR &&
        (rls_cluster_redirect_kind(r->str, r->len) == RLS_REDIR_MOVED ||
         rls_cluster_redirect_kind(r->str, r->len) == RLS_REDIR_ASK))
        k->nd->cl->want_refresh = 1;
    k->cb(k->data, reply);
    free(k);
}

/* One command (the switch poller's, an xop's script), to the master of its
 * first key's slot. A MOVED reply is passed on (the poller tries again at its
 * next poll) and refreshes the map. */
static int route_command(rls_store_t *s, int argc, const char **argv,
                         const size_t *lens,
                         void (*cb)(void *data, void *reply), void *data,
                         int later)
{
    rls_cluster_t *cl = (rls_cluster_t *)s;
    node_t *nd;
    cmd_t *k;
    int rc, kx = 1;

    if (argc < 2 || cl->closing)
        return RL_ESTORE;
    /* EVAL's and EVALSHA's first key comes after the script and numkeys
     * (store/reserve.c). */
    if (argc >= 4 && ((lens[0] == 4 && memcmp(argv[0], "EVAL", 4) == 0) ||
                      (lens[0] == 7 && memcmp(argv[0], "EVALSHA", 7) == 0)))
        kx = 3;
    nd = cl->slot[rls_key_slot(argv[kx], lens[kx])];
    if (nd == NULL || nd->closed)
        return RL_ESTORE;
    if ((k = malloc(sizeof(*k))) == NULL)
        return RL_ENOMEM;
    k->nd = nd;
    k->cb = cb;
    k->data = data;
    nd->inflight++;
    rc = (later && nd->st->v->command_later != NULL
              ? nd->st->v->command_later
              : nd->st->v->command)(nd->st, argc, argv, lens, on_cmd_reply, k);
    if (rc != RL_OK) {
        nd->inflight--;
        free(k);
    }
    return rc;
}

static int cl_command(rls_store_t *s, int argc, const char **argv,
                      const size_t *lens, void (*cb)(void *data, void *reply),
                      void *data)
{
    return route_command(s, argc, argv, lens, cb, data, 0);
}

static int cl_command_later(rls_store_t *s, int argc, const char **argv,
                            const size_t *lens,
                            void (*cb)(void *data, void *reply), void *data)
{
    return route_command(s, argc, argv, lens, cb, data, 1);
}

#define TRY(x)                                                                 \
    do {                                                                       \
        int rc_ = (x);                                                         \
        if (rc_ != RL_OK)                                                      \
            return rc_;                                                        \
    } while (0)

/* One gauge or counter family with a sample per open node. */
static int per_node(rl_buf_t *b, const rls_cluster_t *cl, const char *name,
                    const char *type, const char *help,
                    uint64_t (*value)(const node_t *nd))
{
    const node_t *nd;

    TRY(rls_prom_family(b, name, type, help));
    for (nd = cl->nodes; nd != NULL; nd = nd->next)
        if (!nd->closed)
            TRY(rls_prom_sample(b, name, "node", nd->addr, value(nd)));
    return RL_OK;
}

static uint64_t node_up(const node_t *nd) { return (uint64_t)nd->up; }
static uint64_t node_slots(const node_t *nd) { return nd->slots; }
static uint64_t node_calls(const node_t *nd) { return nd->calls; }
static uint64_t node_errors(const node_t *nd)
{
    return nd->st->stats.errors;
}

static int cl_metrics(const rls_store_t *s, rl_buf_t *b)
{
    const rls_cluster_t *cl = (const rls_cluster_t *)s;
    const node_t *nd;

    TRY(rls_prom_gauge(b, "rl_redis_cluster_slots_down",
                       "Hash slots without a reachable master (of 16384).",
                       cl->slots_down));
    TRY(rls_prom_counter(b, "rl_redis_cluster_map_refreshes_total",
                         "Slot maps loaded (CLUSTER SHARDS or SLOTS).",
                         cl->refreshes));
    TRY(rls_prom_counter(b, "rl_redis_cluster_map_refresh_failures_total",
                         "Slot map requests that failed or did not parse.",
                         cl->refresh_failures));
    TRY(per_node(b, cl, "rl_redis_cluster_node_up", "gauge",
                 "1 while rl-server is connected to this node and it "
                 "answers.",
                 node_up));
    TRY(per_node(b, cl, "rl_redis_cluster_node_slots", "gauge",
                 "Hash slots the map gives this node.", node_slots));
    TRY(per_node(b, cl, "rl_redis_cluster_node_calls_total", "counter",
                 "Script calls sent to this node (one per hash slot of a "
                 "batch, and each resend).",
                 node_calls));
    TRY(rls_prom_family(b, "rl_redis_cluster_redirections_total", "counter",
                        "MOVED and ASK replies from this node (each call "
                        "resent)."));
    for (nd = cl->nodes; nd != NULL; nd = nd->next)
        if (!nd->closed)
            TRY(rl_buf_printf(
                b,
                "rl_redis_cluster_redirections_total{node=\"%s\",kind="
                "\"moved\"} %llu\n"
                "rl_redis_cluster_redirections_total{node=\"%s\",kind="
                "\"ask\"} %llu\n",
                nd->addr, (unsigned long long)nd->moved, nd->addr,
                (unsigned long long)nd->ask));
    TRY(rls_prom_counter(b, "rl_redis_cluster_unmapped_redirections_total",
                         "MOVED and ASK replies naming a node the slot map "
                         "does not give slots: not followed (the map is "
                         "refreshed and the call tried again).",
                         cl->unmapped));
    TRY(per_node(b, cl, "rl_redis_cluster_node_errors_total", "counter",
                 "Calls to this node that failed (timeout, connection, "
                 "Redis error).",
                 node_errors));
    TRY(rls_prom_family(b, "rl_redis_cluster_node_rtt_seconds", "histogram",
                        "Round trip of answered script calls, per node."));
    for (nd = cl->nodes; nd != NULL; nd = nd->next)
        if (!nd->closed)
            TRY(rls_prom_histogram_series(b,
                                          "rl_redis_cluster_node_rtt_seconds",
                                          "node", nd->addr,
                                          &nd->st->stats.rtt_us, 1));
    return RL_OK;
}

static const rls_store_vtbl_t vtbl = {cl_submit, cl_now_ms,       cl_up,
                                      cl_close,  cl_command,      cl_metrics,
                                      NULL,      cl_command_later};

rls_store_t *rls_store_cluster_new(uv_loop_t *loop,
                                   const rls_cluster_opts_t *opts)
{
    rls_cluster_t *cl = calloc(1, sizeof(*cl));
    int i;

    if (cl == NULL)
        return NULL;
    if ((opts->user != NULL && (cl->user = strdup(opts->user)) == NULL) ||
        (opts->password != NULL &&
         (cl->password = strdup(opts->password)) == NULL)) {
        free(cl->user);
        free(cl);
        return NULL;
    }
    cl->base.v = &vtbl;
    rls_hist_init(&cl->base.stats.rtt_us, rls_rtt_bounds_us,
                  sizeof(rls_rtt_bounds_us) / sizeof(rls_rtt_bounds_us[0]));
    cl->loop = loop;
    cl->tls = opts->tls;
    cl->timeout_ms = opts->timeout_ms > 0 ? opts->timeout_ms : 1000;
    cl->grace_ms = opts->grace_ms;
    for (i = 0; i < opts->nseeds && i < RLS_CLUSTER_SEEDS_MAX; i++) {
        snprintf(cl->seed_host[i], sizeof(cl->seed_host[i]), "%s",
                 opts->hosts[i]);
        cl->seed_port[i] = opts->ports[i];
    }
    cl->nseeds = i;
    snprintf(cl->base.stats.down_text, sizeof(cl->base.stats.down_text),
             "store unavailable: no slot map yet");
    uv_timer_init(loop, &cl->tick);
    cl->tick.data = cl;
    cl->open = 1;
    for (i = 0; i < cl->nseeds; i++)
        node_get(cl, cl->seed_host[i], cl->seed_port[i]);
    uv_timer_start(&cl->tick, on_tick, TICK_MS, TICK_MS);
    return &cl->base;
}
