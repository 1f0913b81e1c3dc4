/* Redis Sentinel for the Redis store: see redis_sentinel.h.
 *
 * Two hiredis async connections, each to one sentinel, driven by the
 * server's loop (redis_uv.c):
 *   - the question: AUTH when configured, then SENTINEL
 *     get-master-addr-by-name; kept open between questions. A sentinel
 *     that refuses, does not know the master, answers something else or
 *     nothing within the timeout is dropped and the next one asked; after
 *     a round where every sentinel failed, the next round waits 500 ms
 *     (unless the store's connection reports a failure first). A question
 *     is asked at start, 2 s after the last answer, and at once when the
 *     connection says the address failed (coalesced: one in flight, one
 *     more after it at most).
 *   - the subscription: SUBSCRIBE +switch-master. A message about our
 *     master moves us at once, without waiting for the connection to the
 *     old master to fail. When the subscription is lost, or not
 *     confirmed within the timeout, the next sentinel is subscribed to
 *     after 100 ms (500 ms after a round), and a question is asked once
 *     subscribed, for what was announced in between.
 * The answers are read by redis_sentinel_parse.c (pure, fuzzed).
 *
 * Agreement: the data nodes' password goes wherever the master is said
 * to be, and Redis answers ROLE (or anything) only after AUTH on a
 * protected node, so the node cannot be checked before it gets the
 * password. An address is therefore taken only once `need` sentinels
 * (opts->agree; a majority by default) name it: each sentinel's last
 * answer (a question's or a +switch-master message) is kept, and an
 * answer that does not make an address agreed asks the next sentinel at
 * once (once around, then after the round's pause). One sentinel lying,
 * reconfigured or impersonated cannot send rl-server, and the password,
 * elsewhere.
 *
 * Each context has a record of its own (sctx_t, ac->data), freed once the
 * poll handle that drove it has closed. A record that is no longer the
 * question's or the subscription's (dropped, replaced) is ignored when
 * its callbacks fire, so one failure is handled once. */
#include <stdlib.h>
#include <string.h>

#include <hiredis/async.h>
#include <hiredis/hiredis.h>

#include "base/log.h"
#include "rl_error.h"
#include "store/redis_reply_alloc.h"
#include "store/redis_sentinel.h"
#include "store/redis_sentinel_parse.h"
#include "store/redis_uv.h"

#define REFRESH_MS 2000
#define ROUND_PAUSE_MS 500
#define RESUBSCRIBE_MS 100

typedef struct sctx_s {
    redisAsyncContext *ac;
    rls_redis_sentinel_t *s;
    int sentinel; /* index into hosts/ports */
} sctx_t;

struct rls_redis_sentinel_s {
    uv_loop_t *loop;
    char *hosts[RLS_SENTINELS_MAX];
    int ports[RLS_SENTINELS_MAX];
    int n;
    char *master, *user, *password;
    uint64_t timeout_ms;
    const rls_redis_tls_t *tls; /* NULL: plain */
    rls_store_stats_t *stats;
    rls_redis_sentinel_cbs_t cbs;
    void *data;
    int closing;
    int open;                /* timers and contexts not yet closed */
    rls_sentinel_addr_t cur; /* the master, once known */
    int known;
    int need; /* sentinels that must name an address before it is taken */
    rls_sentinel_addr_t said[RLS_SENTINELS_MAX]; /* each one's last word */
    unsigned char has_said[RLS_SENTINELS_MAX];
    int unagreed;        /* answers in a row that settled nothing */
    int disagree_logged; /* until an address is agreed again */
    /* The question. */
    sctx_t *q;
    int q_idx;          /* the sentinel asked next */
    int q_busy;         /* a question is in flight */
    int q_again;        /* ask again once it is answered */
    int q_fails;        /* sentinels failed in a row */
    int q_logged;       /* a failure was logged; more go to debug until one
                         * answers */
    uv_timer_t q_timer; /* the question's deadline, the pause after a
                         * failed round, or the next refresh */
    /* The subscription. */
    sctx_t *sub;
    int sub_idx;
    int sub_logged;
    int sub_ok;           /* the subscription is confirmed */
    uv_timer_t sub_timer; /* the confirmation's deadline, or the next
                           * attempt */
};

static void query_start(rls_redis_sentinel_t *s);

static void maybe_finish(rls_redis_sentinel_t *s)
{
    void (*closed)(void *) = s->cbs.closed;
    void *data = s->data;
    int i;

    if (!s->closing || s->open > 0)
        return;
    for (i = 0; i < s->n; i++)
        free(s->hosts[i]);
    free(s->master);
    free(s->user);
    free(s->password);
    free(s);
    closed(data);
}

static void on_handle_closed(uv_handle_t *h)
{
    rls_redis_sentinel_t *s = h->data;

    s->open--;
    maybe_finish(s);
}

/* A context's poll handle closed: hiredis freed the context. */
static void on_sctx_closed(void *arg)
{
    sctx_t *x = arg;
    rls_redis_sentinel_t *s = x->s;

    free(x);
    s->open--;
    maybe_finish(s);
}

static const char *why_gone(const redisAsyncContext *ac)
{
    const char *cap = rls_redis_uv_cap_why(ac);

    if (cap != NULL)
        return cap;
    return ac->err && ac->errstr[0] ? ac->errstr : "connection lost";
}

/* ---- the master's address ----------------------------------------------*/

/* Takes the address a sentinel gave; tells the owner when it is new. */
static void set_master(rls_redis_sentinel_t *s, const rls_sentinel_addr_t *a,
                       const char *via)
{
    if (s->known && s->cur.port == a->port && strcmp(s->cur.host, a->host) == 0)
        return;
    if (s->known) {
        s->stats->master_switches++;
        RLS_WARN("redis master switched",
                 " master=%s from=%s:%d to=%s:%d "
                 "via=%s",
                 s->master, s->cur.host, s->cur.port, a->host, a->port, via);
    } else {
        RLS_INFO("redis sentinel: master found", " master=%s addr=%s:%d",
                 s->master, a->host, a->port);
    }
    s->cur = *a;
    s->known = 1;
    s->cbs.moved(s->data);
}

static int same_addr(const rls_sentinel_addr_t *a, const rls_sentinel_addr_t *b)
{
    return a->port == b->port && strcmp(a->host, b->host) == 0;
}

/* Sentinel idx names a (its answer, or a +switch-master message): a is
 * taken once `need` sentinels' last words name it. Returns 1 if a is the
 * master now, 0 while it waits for more sentinels to say so. */
static int heard(rls_redis_sentinel_t *s, int idx, const rls_sentinel_addr_t *a,
                 const char *via)
{
    int i, votes = 0;

    s->said[idx] = *a;
    s->has_said[idx] = 1;
    for (i = 0; i < s->n; i++)
        votes += s->has_said[i] && same_addr(&s->said[i], a);
    if (votes < s->need) {
        RLS_DEBUG("redis sentinel: address not agreed yet",
                  " sentinel=%s:%d addr=%s:%d via=%s sentinels=%d need=%d",
                  s->hosts[idx], s->ports[idx], a->host, a->port, via, votes,
                  s->need);
        return 0;
    }
    s->unagreed = 0;
    s->disagree_logged = 0;
    set_master(s, a, via);
    return 1;
}

int rls_redis_sentinel_addr(void *arg, char *host, size_t hostlen, int *port)
{
    const rls_redis_sentinel_t *s = arg;
    size_t n = strlen(s->cur.host);

    if (!s->known || n >= hostlen)
        return RL_EAGAIN;
    memcpy(host, s->cur.host, n + 1);
    *port = s->cur.port;
    return 0;
}

void rls_redis_sentinel_stale(void *arg)
{
    query_start(arg);
}

/* ---- connections to sentinels -------------------------------------------*/

static void on_auth_reply(redisAsyncContext *ac, void *r, void *priv);

/* Connects to sentinel idx and pipelines AUTH when configured. Returns
 * the record, or NULL with the reason in why. */
static sctx_t *sctx_connect(rls_redis_sentinel_t *s, int idx, char *why,
                            size_t whylen)
{
    redisAsyncContext *ac = redisAsyncConnect(s->hosts[idx], s->ports[idx]);
    sctx_t *x = NULL;

    snprintf(why, whylen, "%s",
             ac == NULL ? "out of memory"
             : ac->err  ? ac->errstr
                        : "cannot attach to the loop");
    if (ac == NULL || ac->err)
        goto fail;
    if ((x = calloc(1, sizeof(*x))) == NULL ||
        rls_redis_uv_attach(ac, s->loop, on_sctx_closed, x) != 0)
        goto fail;
    s->open++;
    /* Checked against the sentinel's address as given (an IP literal),
     * unless --redis-tls-server-name says otherwise. Failing here leaves
     * the context plain: its close callback frees x. */
    if (s->tls != NULL &&
        rls_redis_uv_use_tls(ac, s->tls, s->hosts[idx]) != 0) {
        x->s = s;
        x->sentinel = idx;
        ac->data = x;
        snprintf(why, whylen, "TLS: out of memory");
        redisAsyncFree(ac);
        return NULL;
    }
    x->ac = ac;
    x->s = s;
    x->sentinel = idx;
    ac->data = x;
    /* A sentinel's replies are small; one that streams a huge one (a
     * "$4000000000" message on the subscription, which has no deadline
     * once confirmed) is dropped past RLS_REDIS_CAP_SENTINEL. */
    rls_redis_uv_cap(ac, RLS_REDIS_CAP_SENTINEL,
                     &s->stats->sentinel_reply_over_cap);
    if (s->password != NULL && s->user != NULL)
        redisAsyncCommand(ac, on_auth_reply, NULL, "AUTH %s %s", s->user,
                          s->password);
    else if (s->password != NULL)
        redisAsyncCommand(ac, on_auth_reply, NULL, "AUTH %s", s->password);
    return x;
fail:
    free(x);
    if (ac != NULL)
        redisAsyncFree(ac);
    return NULL;
}

/* ---- the question --------------------------------------------------------*/

static void on_q_timer(uv_timer_t *t);

/* The sentinel asked failed: drops its connection and asks the next one
 * (after a pause once all have failed in a row). */
static void query_failed(rls_redis_sentinel_t *s, const char *why)
{
    sctx_t *x = s->q;
    int idx = s->q_idx;

    s->q = NULL;
    s->q_busy = 0;
    if (!s->q_logged)
        RLS_WARN("redis sentinel failed",
                 " sentinel=%s:%d master=%s "
                 "err=\"%s\"",
                 s->hosts[idx], s->ports[idx], s->master, why);
    else
        RLS_DEBUG("redis sentinel failed", " sentinel=%s:%d err=\"%s\"",
                  s->hosts[idx], s->ports[idx], why);
    s->q_logged = 1;
    /* Inside one of x's callbacks hiredis frees it once that returns;
     * its other callbacks then find it is no longer s->q. */
    if (x != NULL)
        redisAsyncFree(x->ac);
    if (s->closing)
        return;
    s->q_idx = (s->q_idx + 1) % s->n;
    if (++s->q_fails < s->n) {
        query_start(s);
        return;
    }
    s->q_fails = 0;
    uv_timer_start(&s->q_timer, on_q_timer, ROUND_PAUSE_MS, 0);
}

/* The question now goes to sentinel idx: the connection to another is
 * dropped (inside one of its callbacks hiredis frees it once that
 * returns). */
static void query_move(rls_redis_sentinel_t *s, int idx)
{
    sctx_t *x = s->q;

    if (s->q_idx == idx)
        return;
    s->q_idx = idx;
    s->q = NULL;
    if (x != NULL)
        redisAsyncFree(x->ac);
}

/* An answer settled nothing: asks the next sentinel now, once around;
 * then after the round's pause, warning once until an address is
 * agreed. */
static void ask_next(rls_redis_sentinel_t *s)
{
    s->q_busy = 0;
    query_move(s, (s->q_idx + 1) % s->n);
    if (++s->unagreed < s->n) {
        query_start(s);
        return;
    }
    s->unagreed = 0;
    if (!s->disagree_logged)
        RLS_WARN("redis sentinels disagree: no address is named by enough "
                 "of them; the master's is not taken (nor sent the "
                 "password) until it is",
                 " master=%s need=%d of=%d", s->master, s->need, s->n);
    s->disagree_logged = 1;
    uv_timer_start(&s->q_timer, on_q_timer, ROUND_PAUSE_MS, 0);
}

static void on_addr_reply(redisAsyncContext *ac, void *r, void *priv)
{
    sctx_t *x = ac->data;
    rls_redis_sentinel_t *s = x->s;
    const redisReply *rep = r;
    rls_sentinel_addr_t a;
    int rc;

    (void)priv;
    if (x != s->q)
        return;
    if (rep == NULL) {
        query_failed(s, why_gone(ac));
        return;
    }
    if ((rc = rls_sentinel_parse_addr(rep, &a)) != 0) {
        /* It vouches for no address any more. */
        s->has_said[x->sentinel] = 0;
        query_failed(s, rc == RL_EAGAIN ? "does not know the master"
                        : rep->type == REDIS_REPLY_ERROR ? rep->str
                                                         : "unexpected reply");
        return;
    }
    s->q_fails = 0;
    s->q_logged = 0;
    if (!heard(s, x->sentinel, &a, "query")) {
        ask_next(s);
        return;
    }
    s->q_busy = 0;
    uv_timer_start(&s->q_timer, on_q_timer, REFRESH_MS, 0);
    if (s->q_again)
        query_start(s);
}

static void query_start(rls_redis_sentinel_t *s)
{
    char why[128];

    if (s->closing)
        return;
    if (s->q_busy) {
        s->q_again = 1;
        return;
    }
    s->q_again = 0;
    if (s->q == NULL &&
        (s->q = sctx_connect(s, s->q_idx, why, sizeof(why))) == NULL) {
        query_failed(s, why);
        return;
    }
    if (redisAsyncCommand(s->q->ac, on_addr_reply, NULL,
                          "SENTINEL get-master-addr-by-name %s",
                          s->master) != REDIS_OK) {
        query_failed(s, "cannot send");
        return;
    }
    s->q_busy = 1;
    uv_timer_start(&s->q_timer, on_q_timer,
                   s->timeout_ms > 250 ? s->timeout_ms : 250, 0);
}

static void on_q_timer(uv_timer_t *t)
{
    rls_redis_sentinel_t *s = t->data;
    char why[64];

    if (!s->q_busy) {
        query_start(s);
        return;
    }
    snprintf(why, sizeof(why), "no answer within %llu ms",
             (unsigned long long)(s->timeout_ms > 250 ? s->timeout_ms : 250));
    query_failed(s, why);
}

/* ---- the subscription ----------------------------------------------------*/

static void on_sub_timer(uv_timer_t *t);

static void sub_failed(rls_redis_sentinel_t *s, const char *why)
{
    sctx_t *x = s->sub;
    int idx = s->sub_idx;

    s->sub = NULL;
    if (!s->sub_logged)
        RLS_WARN("redis sentinel subscription lost",
                 " sentinel=%s:%d "
                 "err=\"%s\"",
                 s->hosts[idx], s->ports[idx], why);
    s->sub_logged = 1;
    if (x != NULL)
        redisAsyncFree(x->ac);
    if (s->closing)
        return;
    s->sub_idx = (s->sub_idx + 1) % s->n;
    uv_timer_start(&s->sub_timer, on_sub_timer,
                   s->sub_idx == 0 ? ROUND_PAUSE_MS : RESUBSCRIBE_MS, 0);
}

static int is_str(const redisReply *e, const char *t)
{
    size_t n = strlen(t);

    return e != NULL && e->type == REDIS_REPLY_STRING && e->len == n &&
           memcmp(e->str, t, n) == 0;
}

/* Every reply on the subscription: the confirmation, then messages; NULL
 * once the context is freed. */
static void on_sub_msg(redisAsyncContext *ac, void *r, void *priv)
{
    sctx_t *x = ac->data;
    rls_redis_sentinel_t *s = x->s;
    const redisReply *rep = r;
    rls_sentinel_addr_t from, to;
    int rc;

    (void)priv;
    if (x != s->sub)
        return;
    if (rep == NULL) {
        sub_failed(s, why_gone(ac));
        return;
    }
    if (rep->type != REDIS_REPLY_ARRAY || rep->elements != 3)
        return;
    if (is_str(rep->element[0], "subscribe")) {
        RLS_DEBUG("redis sentinel: subscribed", " sentinel=%s:%d",
                  s->hosts[x->sentinel], s->ports[x->sentinel]);
        s->sub_logged = 0;
        s->sub_ok = 1;
        uv_timer_stop(&s->sub_timer);
        /* A switch announced while we were not subscribed. */
        query_start(s);
        return;
    }
    if (!is_str(rep->element[0], "message") ||
        rep->element[2]->type != REDIS_REPLY_STRING)
        return;
    rc = rls_sentinel_parse_switch(rep->element[2]->str, rep->element[2]->len,
                                   s->master, &from, &to);
    if (rc == 0 && heard(s, x->sentinel, &to, "+switch-master"))
        return;
    if (rc == 0) {
        /* Another sentinel is asked (one that has the news too makes it
         * agreed). */
        if (!s->q_busy && s->n > 1 && s->q_idx == x->sentinel)
            query_move(s, (s->q_idx + 1) % s->n);
        query_start(s);
        return;
    }
    if (rc < 0)
        RLS_WARN("redis sentinel: a +switch-master message that does not "
                 "parse; asking instead",
                 " sentinel=%s:%d", s->hosts[x->sentinel],
                 s->ports[x->sentinel]);
    if (rc < 0)
        query_start(s);
}

static void sub_start(rls_redis_sentinel_t *s)
{
    char why[128];

    if (s->closing || s->sub != NULL)
        return;
    s->sub_ok = 0;
    if ((s->sub = sctx_connect(s, s->sub_idx, why, sizeof(why))) == NULL) {
        sub_failed(s, why);
        return;
    }
    if (redisAsyncCommand(s->sub->ac, on_sub_msg, NULL,
                          "SUBSCRIBE +switch-master") != REDIS_OK) {
        sub_failed(s, "cannot send");
        return;
    }
    /* A sentinel that never answers (a black hole: the connect alone
     * would take minutes to fail) is left for the next. */
    uv_timer_start(&s->sub_timer, on_sub_timer,
                   s->timeout_ms > 250 ? s->timeout_ms : 250, 0);
}

static void on_sub_timer(uv_timer_t *t)
{
    rls_redis_sentinel_t *s = t->data;

    if (s->sub != NULL && !s->sub_ok) {
        sub_failed(s, "no answer to SUBSCRIBE in time");
        return;
    }
    sub_start(s);
}

/* AUTH on either connection: a refusal fails that sentinel. */
static void on_auth_reply(redisAsyncContext *ac, void *r, void *priv)
{
    sctx_t *x = ac->data;
    rls_redis_sentinel_t *s = x->s;
    const redisReply *rep = r;

    (void)priv;
    if (rep == NULL || rep->type != REDIS_REPLY_ERROR)
        return;
    if (x == s->q)
        query_failed(s, rep->str);
    else if (x == s->sub)
        sub_failed(s, rep->str);
}

/* ---- life ----------------------------------------------------------------*/

rls_redis_sentinel_t *
rls_redis_sentinel_new(uv_loop_t *loop, const rls_redis_sentinel_opts_t *opts,
                       const rls_redis_sentinel_cbs_t *cbs, void *data)
{
    rls_redis_sentinel_t *s;
    int i;

    if (opts->n < 1 || opts->n > RLS_SENTINELS_MAX)
        return NULL;
    if ((s = calloc(1, sizeof(*s))) == NULL)
        return NULL;
    s->n = opts->n;
    for (i = 0; i < s->n; i++) {
        if ((s->hosts[i] = strdup(opts->hosts[i])) == NULL)
            goto fail;
        s->ports[i] = opts->ports[i];
    }
    if ((s->master = strdup(opts->master)) == NULL ||
        (opts->user != NULL && (s->user = strdup(opts->user)) == NULL) ||
        (opts->password != NULL &&
         (s->password = strdup(opts->password)) == NULL))
        goto fail;
    s->loop = loop;
    s->timeout_ms = opts->timeout_ms;
    s->tls = opts->tls;
    s->stats = opts->stats;
    s->need =
        opts->agree > 0 && opts->agree <= s->n ? opts->agree : s->n / 2 + 1;
    s->cbs = *cbs;
    s->data = data;
    uv_timer_init(loop, &s->q_timer);
    uv_timer_init(loop, &s->sub_timer);
    s->q_timer.data = s->sub_timer.data = s;
    s->open = 2;
    query_start(s);
    sub_start(s);
    return s;
fail:
    for (i = 0; i < s->n; i++)
        free(s->hosts[i]);
    free(s->master);
    free(s->user);
    free(s->password);
    free(s);
    return NULL;
}

void rls_redis_sentinel_close(rls_redis_sentinel_t *s)
{
    sctx_t *q = s->q, *sub = s->sub;

    s->closing = 1;
    s->q = s->sub = NULL;
    if (q != NULL)
        redisAsyncFree(q->ac);
    if (sub != NULL)
        redisAsyncFree(sub->ac);
    uv_close((uv_handle_t *)&s->q_timer, on_handle_closed);
    uv_close((uv_handle_t *)&s->sub_timer, on_handle_closed);
}
