/* The Redis store's connection: see redis_conn.h.
 *
 * AUTH and SELECT (when configured), SCRIPT LOAD, RL.VERSION (when the
 * module is wanted), INFO server and TIME are pipelined on every
 * (re)connect; the connection is up once TIME answers. INFO's run_id
 * tells a restarted Redis (whose counters of the current window are gone,
 * unless it persisted them) from a connection that was merely lost.
 * Reconnects back off from 20 ms, doubling to 1 s, plus up to 50% jitter.
 * Names are resolved on libuv's thread pool. TIME is sampled again every
 * second: the store's clock is Redis's (redis_clock.h), and a TIME left
 * unanswered tells an idle store that Redis hangs.
 *
 * Each hiredis context gets a record of its own (ctx_t, ac->data), which
 * outlives the context: it is freed once the poll handle that drove the
 * context has closed. hiredis's own libuv adapter ignores poll errors (see
 * redis_uv.h), so a refused connect would never be reported; redis_uv.c
 * replaces it. */
#include <arpa/inet.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <hiredis/async.h>
#include <hiredis/hiredis.h>

#include "base/log.h"
#include "rl_clock.h"
#include "rl_error.h"
#include "store/redis_clock.h"
#include "store/redis_conn.h"
#include "store/redis_reply_alloc.h"
#include "store/redis_script.h"
#include "store/redis_uv.h"

#define BACKOFF_MIN_MS 20
#define BACKOFF_MAX_MS 1000
#define CLOCK_EVERY_MS 1000
/* After a connection is up, this many TIME samples CLOCK_FRESH_MS apart
 * before the usual one a second: the first sample's round trip may be
 * long (a loaded host), and its error (half that round trip) would stand
 * for a second; with several, the round-trip filter keeps a short one,
 * so the instances of a fleet agree on the store's time within about a
 * millisecond soon after they start or reconnect. */
#define CLOCK_FRESH 8
#define CLOCK_FRESH_MS 20

enum { DOWN, CONNECTING, UP, CLOSING };

/* One hiredis context (ac->data points here). */
typedef struct ctx_s {
    redisAsyncContext *ac;
    rls_redis_conn_t *conn;
    int fail;         /* status of commands failed by freeing the context */
    uint64_t time_ns; /* when the pending TIME was sent, 0 if none */
} ctx_t;

struct rls_redis_conn_s {
    uv_loop_t *loop;
    char *host, *user, *password;
    const rls_redis_tls_t *tls;    /* NULL: plain */
    char addr[RLS_REDIS_ADDR_MAX]; /* host:port, or unix:PATH; for logs */
    const char *script;
    size_t script_len;
    int port, db, numeric, state, ever_up, use_module;
    int quiet; /* a failure was logged; more go to debug until up */
    int *quiet_shared;
    uint64_t timeout_ms, backoff_ms, down_since_ms;
    ctx_t *ctx;       /* current context, NULL while down */
    uv_timer_t retry; /* reconnect backoff, or handshake deadline */
    uv_timer_t clock;
    unsigned fresh; /* quick TIME samples still to take (CLOCK_FRESH) */
    uv_getaddrinfo_t gai;
    int gai_busy, open; /* handles and requests not yet finished */
    char run_id[41];    /* Redis's INFO run_id; "" until known */
    char sha[41];
    int module; /* this connection's Redis has the module */
    rls_redis_clock_t clk;
    uint64_t rng;
    rls_store_stats_t *stats;
    uint64_t *over_cap; /* where a reply past the cap is counted */
    rls_redis_conn_cbs_t cbs;
    void *data;
    /* Sentinel (opts->addr): where to connect, and whom to tell that an
     * address failed; want_master: the handshake asks ROLE. */
    int (*addr_fn)(void *arg, char *host, size_t hostlen, int *port);
    void (*addr_stale)(void *arg);
    void *addr_arg;
    int want_master;
    int retargeting; /* inside rls_redis_conn_retarget's own drop */
};

static void start_connect(rls_redis_conn_t *c);
static void on_clock(uv_timer_t *t);

static ctx_t *ctx_of(const redisAsyncContext *ac)
{
    return ac->data;
}

static void set_module(rls_redis_conn_t *c, int on)
{
    c->module = on;
    c->stats->redis_module = on;
}

/* Frees the connection once it is closing and every handle and request
 * has finished; then tells the owner. */
static void maybe_finish(rls_redis_conn_t *c)
{
    void (*closed)(void *) = c->cbs.closed;
    void *data = c->data;

    if (c->state != CLOSING || c->open > 0)
        return;
    free(c->host);
    free(c->user);
    free(c->password);
    free(c);
    closed(data);
}

static void on_closed(uv_handle_t *h)
{
    rls_redis_conn_t *c = h->data;

    c->open--;
    maybe_finish(c);
}

/* A context's poll handle closed: hiredis freed the context. */
static void on_ctx_closed(void *arg)
{
    ctx_t *x = arg;
    rls_redis_conn_t *c = x->conn;

    free(x);
    c->open--;
    maybe_finish(c);
}

/* ---- clock -------------------------------------------------------------*/

uint64_t rls_redis_conn_now_ms(rls_redis_conn_t *c)
{
    struct timespec ts = {0, 0};

    /* The local clock is read only until Redis's is known. */
    if (c->clk.sampled_us == 0)
        clock_gettime(CLOCK_REALTIME, &ts);
    return rls_redis_clock_now(&c->clk, uv_hrtime() / 1000,
                               (uint64_t)ts.tv_sec * 1000 +
                                   (uint64_t)ts.tv_nsec / 1000000);
}

uint64_t rls_redis_conn_rtt_us(const rls_redis_conn_t *c)
{
    return c->clk.best_rtt_us;
}

/* Applies a TIME reply received at now_ns. Returns 0, or RL_EINVAL if the
 * reply is malformed. */
static int clock_sample(rls_redis_conn_t *c, ctx_t *x, const redisReply *r,
                        uint64_t now_ns)
{
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 ||
        r->element[0]->type != REDIS_REPLY_STRING ||
        r->element[1]->type != REDIS_REPLY_STRING)
        return RL_EINVAL;
    rls_redis_clock_sample(&c->clk, x->time_ns / 1000, now_ns / 1000,
                           strtoull(r->element[0]->str, NULL, 10) * 1000000 +
                               strtoull(r->element[1]->str, NULL, 10));
    return 0;
}

/* ---- connection state ---------------------------------------------------*/

static void on_retry(uv_timer_t *t)
{
    start_connect(t->data);
}

static void schedule_retry(rls_redis_conn_t *c)
{
    uint64_t delay = c->backoff_ms;

    /* xorshift64: jitter only, so that many servers do not reconnect in
     * lockstep after Redis returns. */
    delay += rl_xorshift64(&c->rng) % (c->backoff_ms / 2 + 1);
    c->backoff_ms *= 2;
    if (c->backoff_ms > BACKOFF_MAX_MS)
        c->backoff_ms = BACKOFF_MAX_MS;
    uv_timer_start(&c->retry, on_retry, delay, 0);
}

/* The address in use failed: with Sentinel, ask where the master is now
 * (not when the drop is retarget's own: it knows already). */
static void addr_failed(rls_redis_conn_t *c)
{
    if (c->addr_stale != NULL && !c->retargeting)
        c->addr_stale(c->addr_arg);
}

/* A connection attempt failed before there was a connection to lose. */
static void connect_failed(rls_redis_conn_t *c, const char *why)
{
    /* A cluster's masters share one flag: a refusal every node gives
     * (a wrong password) is one warning, not one per node. */
    if (!c->quiet && (c->quiet_shared == NULL || !*c->quiet_shared))
        RLS_WARN("redis unreachable", " addr=%s err=\"%s\"", c->addr, why);
    else
        RLS_DEBUG("redis connect failed", " addr=%s err=\"%s\"", c->addr, why);
    c->quiet = 1;
    if (c->quiet_shared != NULL)
        *c->quiet_shared = 1;
    c->state = DOWN;
    schedule_retry(c);
    addr_failed(c);
}

/* Records that context x is gone or going; idempotent, since hiredis
 * reports one loss through several callbacks. Logs the state change,
 * tells the owner of a connection that was up, and schedules the
 * reconnect. */
static void lost(rls_redis_conn_t *c, ctx_t *x, const char *why)
{
    if (x == NULL || c->ctx != x)
        return;
    c->ctx = NULL;
    if (c->state == CLOSING)
        return;
    if (c->state != UP) {
        connect_failed(c, why);
        return;
    }
    RLS_WARN("redis down", " addr=%s err=\"%s\"", c->addr, why);
    c->down_since_ms = rl_mono_ms();
    c->quiet = 1;
    c->state = DOWN;
    schedule_retry(c);
    c->cbs.down(c->data);
    addr_failed(c);
}

/* Why hiredis let go of ac, for the log: a reply past the cap fails a
 * reply as "Out of memory" inside hiredis, which is not the reason. */
static const char *why_gone(const redisAsyncContext *ac, const char *dflt)
{
    const char *cap = rls_redis_uv_cap_why(ac);

    if (cap != NULL)
        return cap;
    return ac->err && ac->errstr ? ac->errstr : dflt;
}

int rls_redis_conn_gone(const redisAsyncContext *ac)
{
    ctx_t *x = ctx_of(ac);

    /* The context is being freed: by us (x->fail says why) or by hiredis
     * after an I/O error (RL_ESTORE). */
    lost(x->conn, x, why_gone(ac, "dropped"));
    return x->fail;
}

void rls_redis_conn_drop(rls_redis_conn_t *c, int status, const char *why)
{
    ctx_t *x = c->ctx;
    redisAsyncContext *ac;

    if (x == NULL)
        return;
    ac = x->ac;
    x->fail = status;
    lost(c, x, why);
    redisAsyncFree(ac);
}

static void on_connect(const redisAsyncContext *ac, int status)
{
    /* hiredis frees the context itself after a failed connect. */
    if (status != REDIS_OK)
        lost(ctx_of(ac)->conn, ctx_of(ac), ac->errstr ? ac->errstr : "?");
}

static void on_disconnect(const redisAsyncContext *ac, int status)
{
    (void)status;
    lost(ctx_of(ac)->conn, ctx_of(ac), why_gone(ac, "connection closed"));
}

/* ---- the handshake ------------------------------------------------------*/

/* Checks a handshake reply; on trouble drops the connection and returns
 * RL_ESTORE. */
static int hs_check(redisAsyncContext *ac, const redisReply *r, int type)
{
    ctx_t *x = ctx_of(ac);
    rls_redis_conn_t *c = x->conn;

    if (r == NULL) {
        lost(c, x, why_gone(ac, "dropped"));
        return RL_ESTORE;
    }
    if (c->ctx != x)
        return RL_ESTORE;
    if (r->type == type)
        return 0;
    rls_redis_conn_drop(c, RL_ESTORE,
                        r->type == REDIS_REPLY_ERROR ? r->str
                                                     : "unexpected reply");
    return RL_ESTORE;
}

static void on_status_reply(redisAsyncContext *ac, void *r, void *priv)
{
    (void)priv;
    hs_check(ac, r, REDIS_REPLY_STATUS);
}

/* ROLE (want_master): only a master takes our writes. A replica (a stale
 * address after a failover, or a master demoted since) is dropped, which
 * asks Sentinel again (addr_failed). */
static void on_role_reply(redisAsyncContext *ac, void *r, void *priv)
{
    rls_redis_conn_t *c = ctx_of(ac)->conn;
    redisReply *rep = r;
    const redisReply *e;
    char why[96];

    (void)priv;
    if (hs_check(ac, rep, REDIS_REPLY_ARRAY) != 0)
        return;
    e = rep->elements > 0 ? rep->element[0] : NULL;
    if (e != NULL && e->type == REDIS_REPLY_STRING && e->len == 6 &&
        memcmp(e->str, "master", 6) == 0)
        return;
    snprintf(why, sizeof(why), "not the master (ROLE %.32s)",
             e != NULL && e->type == REDIS_REPLY_STRING ? e->str : "?");
    rls_redis_conn_drop(c, RL_ESTORE, why);
}

static void on_load_reply(redisAsyncContext *ac, void *r, void *priv)
{
    rls_redis_conn_t *c = ctx_of(ac)->conn;
    redisReply *rep = r;

    (void)priv;
    if (hs_check(ac, rep, REDIS_REPLY_STRING) != 0)
        return;
    if (rep->len != 40) {
        rls_redis_conn_drop(c, RL_ESTORE, "bad SCRIPT LOAD reply");
        return;
    }
    memcpy(c->sha, rep->str, 40);
}

/* RL.VERSION: the ratelimit module (server/redis_module) is loaded and
 * speaks our format. Anything else (an unknown command, another version)
 * leaves batches to the script. */
static void on_module_reply(redisAsyncContext *ac, void *r, void *priv)
{
    ctx_t *x = ctx_of(ac);
    rls_redis_conn_t *c = x->conn;
    redisReply *rep = r;

    (void)priv;
    if (rep == NULL || c->ctx != x)
        return;
    set_module(c, rep->type == REDIS_REPLY_INTEGER &&
                      rep->integer == RLS_REDIS_MODULE_VERSION);
    if (!c->module && rep->type == REDIS_REPLY_INTEGER)
        RLS_WARN("redis: the ratelimit module speaks another version; "
                 "batches go to the Lua script",
                 " addr=%s version=%lld want=%d", c->addr, rep->integer,
                 RLS_REDIS_MODULE_VERSION);
}

/* Reads run_id from INFO server. A Redis where INFO is renamed or denied
 * still serves: restarts then go unnoticed (logged at debug). */
static void on_info_reply(redisAsyncContext *ac, void *r, void *priv)
{
    ctx_t *x = ctx_of(ac);
    rls_redis_conn_t *c = x->conn;
    redisReply *rep = r;
    const char *id;

    (void)priv;
    if (rep == NULL || c->ctx != x)
        return;
    if (rep->type != REDIS_REPLY_STRING ||
        (id = strstr(rep->str, "run_id:")) == NULL ||
        strspn(id + 7, "0123456789abcdef") != 40) {
        RLS_DEBUG("redis run_id unknown", " err=\"%s\"",
                  rep->type == REDIS_REPLY_ERROR ? rep->str : "no run_id");
        return;
    }
    id += 7;
    if (c->run_id[0] != '\0' && memcmp(c->run_id, id, 40) != 0) {
        c->stats->restarts++;
        RLS_WARN("redis restarted: counts of the current windows are lost "
                 "unless it persists them",
                 " addr=%s run_id=%.40s was=%s", c->addr, id, c->run_id);
    }
    memcpy(c->run_id, id, 40);
    c->run_id[40] = '\0';
}

static void on_time_reply(redisAsyncContext *ac, void *r, void *priv)
{
    ctx_t *x = ctx_of(ac);
    rls_redis_conn_t *c = x->conn;

    (void)priv;
    if (hs_check(ac, r, REDIS_REPLY_ARRAY) != 0)
        return;
    if (clock_sample(c, x, r, uv_hrtime()) != 0) {
        rls_redis_conn_drop(c, RL_ESTORE, "bad TIME reply");
        return;
    }
    x->time_ns = 0;
    if (c->state != CONNECTING) {
        if (c->fresh > 0 && --c->fresh == 0)
            uv_timer_start(&c->clock, on_clock, CLOCK_EVERY_MS, CLOCK_EVERY_MS);
        return;
    }
    uv_timer_stop(&c->retry);
    c->state = UP;
    c->fresh = CLOCK_FRESH;
    uv_timer_start(&c->clock, on_clock, CLOCK_FRESH_MS, CLOCK_FRESH_MS);
    c->backoff_ms = BACKOFF_MIN_MS;
    c->quiet = 0;
    if (c->quiet_shared != NULL)
        *c->quiet_shared = 0;
    if (c->ever_up) {
        c->stats->reconnects++;
        RLS_INFO("redis reconnected", " addr=%s down_ms=%llu batch=%s", c->addr,
                 (unsigned long long)(rl_mono_ms() - c->down_since_ms),
                 c->module ? "module" : "script");
    } else {
        RLS_INFO("redis connected", " addr=%s db=%d batch=%s", c->addr, c->db,
                 c->module ? "module" : "script");
    }
    c->ever_up = 1;
}

static void send_time(ctx_t *x)
{
    x->time_ns = uv_hrtime();
    if (redisAsyncCommand(x->ac, on_time_reply, NULL, "TIME") != REDIS_OK)
        x->time_ns = 0;
}

/* Samples Redis's clock every CLOCK_EVERY_MS. A TIME left unanswered also
 * tells an idle store that Redis hangs, so that it stops counting as up
 * without waiting for a batch to time out. */
static void on_clock(uv_timer_t *t)
{
    rls_redis_conn_t *c = t->data;

    if (c->state != UP)
        return;
    if (c->ctx->time_ns == 0) {
        send_time(c->ctx);
        return;
    }
    if ((uv_hrtime() - c->ctx->time_ns) / 1000000 > c->timeout_ms)
        c->cbs.stuck(c->data);
}

/* The handshake did not finish in time (Redis stopped, or a black hole).
 * It gets at least 250 ms, because a very short batch timeout says nothing
 * about how long a TCP connect plus four commands may take. */
static void on_hs_deadline(uv_timer_t *t)
{
    rls_redis_conn_t *c = t->data;

    rls_redis_conn_drop(c, RL_ESTORE,
                        c->ctx != NULL ? rls_redis_uv_timeout_why(c->ctx->ac)
                                       : "connect timed out");
}

static void connect_addr(rls_redis_conn_t *c, const char *ip)
{
    /* A host that starts with '/' is a Unix socket's path. */
    redisAsyncContext *ac = ip[0] == '/' ? redisAsyncConnectUnix(ip)
                                         : redisAsyncConnect(ip, c->port);
    ctx_t *x = NULL;
    char why[128];

    snprintf(why, sizeof(why), "%s",
             ac == NULL ? "out of memory"
             : ac->err  ? ac->errstr
                        : "");
    if (ac == NULL || ac->err)
        goto fail;
    snprintf(why, sizeof(why), "cannot attach to the loop");
    if ((x = calloc(1, sizeof(*x))) == NULL ||
        rls_redis_uv_attach(ac, c->loop, on_ctx_closed, x) != 0)
        goto fail;
    c->open++;
    /* The certificate names the host as given, not the address it
     * resolved to. Failing here leaves the context plain: drop it. */
    if (c->tls != NULL && rls_redis_uv_use_tls(ac, c->tls, c->host) != 0) {
        x->conn = c;
        ac->data = x;
        redisAsyncFree(ac);
        connect_failed(c, "TLS: out of memory");
        return;
    }
    x->ac = ac;
    rls_redis_uv_cap(ac, RLS_REDIS_CAP_NODE, c->over_cap);
    x->conn = c;
    x->fail = RL_ESTORE;
    rls_redis_clock_new_path(&c->clk);
    ac->data = x;
    c->ctx = x;
    redisAsyncSetConnectCallback(ac, on_connect);
    redisAsyncSetDisconnectCallback(ac, on_disconnect);
    /* The handshake is pipelined behind the connect; hiredis sends it once
     * the socket is writable. */
    if (c->password != NULL && c->user != NULL)
        redisAsyncCommand(ac, on_status_reply, NULL, "AUTH %s %s", c->user,
                          c->password);
    else if (c->password != NULL)
        redisAsyncCommand(ac, on_status_reply, NULL, "AUTH %s", c->password);
    if (c->db > 0)
        redisAsyncCommand(ac, on_status_reply, NULL, "SELECT %d", c->db);
    if (c->want_master)
        redisAsyncCommand(ac, on_role_reply, NULL, "ROLE");
    redisAsyncCommand(ac, on_load_reply, NULL, "SCRIPT LOAD %b", c->script,
                      c->script_len);
    set_module(c, 0);
    if (c->use_module)
        redisAsyncCommand(ac, on_module_reply, NULL, "RL.VERSION");
    redisAsyncCommand(ac, on_info_reply, NULL, "INFO server");
    send_time(x);
    uv_timer_start(&c->retry, on_hs_deadline,
                   c->timeout_ms > 250 ? c->timeout_ms : 250, 0);
    return;
fail:
    free(x);
    if (ac != NULL)
        redisAsyncFree(ac);
    connect_failed(c, why);
}

static void on_resolved(uv_getaddrinfo_t *req, int status, struct addrinfo *res)
{
    rls_redis_conn_t *c = req->data;
    struct addrinfo *ai, *pick = NULL;
    char ip[64] = "";

    c->gai_busy = 0;
    c->open--;
    /* IPv4 first, as hiredis does for names: "localhost" often lists ::1
     * first, while Redis commonly binds 127.0.0.1 only. */
    for (ai = status == 0 ? res : NULL; ai != NULL; ai = ai->ai_next) {
        if (ai->ai_family == AF_INET ||
            (pick == NULL && ai->ai_family == AF_INET6))
            pick = ai;
        if (ai->ai_family == AF_INET)
            break;
    }
    if (pick != NULL && pick->ai_family == AF_INET)
        inet_ntop(AF_INET, &((struct sockaddr_in *)pick->ai_addr)->sin_addr, ip,
                  sizeof(ip));
    else if (pick != NULL)
        inet_ntop(AF_INET6, &((struct sockaddr_in6 *)pick->ai_addr)->sin6_addr,
                  ip, sizeof(ip));
    uv_freeaddrinfo(res);
    if (c->state == CLOSING) {
        maybe_finish(c);
    } else if (ip[0] == '\0') {
        connect_failed(c, status ? uv_strerror(status) : "no address");
    } else {
        connect_addr(c, ip);
    }
}

/* Names the address in use, for the log and for numeric hosts. */
static void set_addr(rls_redis_conn_t *c)
{
    unsigned char bin[16];

    c->numeric = c->host[0] == '/' || inet_pton(AF_INET, c->host, bin) == 1 ||
                 inet_pton(AF_INET6, c->host, bin) == 1;
    if (c->host[0] == '/')
        snprintf(c->addr, sizeof(c->addr), "unix:%s", c->host);
    else
        snprintf(c->addr, sizeof(c->addr), "%s:%d", c->host, c->port);
}

/* With opts->addr: takes the address it gives now. Returns 0, RL_EAGAIN
 * (none known) or RL_ENOMEM. */
static int take_addr(rls_redis_conn_t *c)
{
    char host[RLS_REDIS_ADDR_MAX], *dup;
    int port = 0, rc;

    if ((rc = c->addr_fn(c->addr_arg, host, sizeof(host), &port)) != 0)
        return rc;
    if (strcmp(host, c->host) == 0 && port == c->port)
        return 0;
    if ((dup = strdup(host)) == NULL)
        return RL_ENOMEM;
    free(c->host);
    c->host = dup;
    c->port = port;
    set_addr(c);
    /* Another server: its run_id says nothing of a restart. */
    c->run_id[0] = '\0';
    return 0;
}

static void start_connect(rls_redis_conn_t *c)
{
    struct addrinfo hints;
    int rc;

    c->state = CONNECTING;
    if (c->addr_fn != NULL && (rc = take_addr(c)) != 0) {
        if (rc != RL_EAGAIN) {
            connect_failed(c, rl_strerror(rc));
            return;
        }
        /* Sentinel has not answered yet: it connects us when it does
         * (rls_redis_conn_retarget). */
        RLS_DEBUG("redis master address not known yet", NULL);
        c->state = DOWN;
        schedule_retry(c);
        return;
    }
    if (c->numeric) {
        connect_addr(c, c->host);
        return;
    }
    /* A name is resolved on libuv's thread pool: getaddrinfo blocks. */
    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    c->gai.data = c;
    rc = uv_getaddrinfo(c->loop, &c->gai, on_resolved, c->host, NULL, &hints);
    if (rc == 0) {
        c->gai_busy = 1;
        c->open++;
        return;
    }
    connect_failed(c, uv_strerror(rc));
}

/* ---- what the owner uses ------------------------------------------------*/

redisAsyncContext *rls_redis_conn_ctx(const rls_redis_conn_t *c)
{
    return c->state == UP && c->ctx != NULL ? c->ctx->ac : NULL;
}

const char *rls_redis_conn_sha(const rls_redis_conn_t *c)
{
    return c->sha;
}

int rls_redis_conn_module(const rls_redis_conn_t *c)
{
    return c->module;
}

void rls_redis_conn_module_gone(rls_redis_conn_t *c)
{
    if (!c->module)
        return;
    set_module(c, 0);
    RLS_WARN("redis: the ratelimit module is gone; batches go to the Lua "
             "script",
             " addr=%s", c->addr);
}

rls_redis_conn_t *rls_redis_conn_new(uv_loop_t *loop,
                                     const rls_redis_conn_opts_t *opts,
                                     const rls_redis_conn_cbs_t *cbs,
                                     void *data)
{
    rls_redis_conn_t *c = calloc(1, sizeof(*c));

    if (c == NULL || (c->host = strdup(opts->host)) == NULL)
        goto fail;
    if ((opts->user != NULL && (c->user = strdup(opts->user)) == NULL) ||
        (opts->password != NULL &&
         (c->password = strdup(opts->password)) == NULL))
        goto fail;
    c->loop = loop;
    c->tls = opts->tls;
    c->port = opts->port;
    c->db = opts->db;
    c->timeout_ms = opts->timeout_ms;
    c->script = opts->script;
    c->script_len = opts->script_len;
    c->use_module = opts->use_module;
    c->quiet_shared = opts->quiet;
    c->stats = opts->stats;
    c->over_cap =
        opts->over_cap != NULL ? opts->over_cap : &opts->stats->reply_over_cap;
    c->cbs = *cbs;
    c->data = data;
    c->addr_fn = opts->addr;
    c->addr_stale = opts->addr_stale;
    c->addr_arg = opts->addr_arg;
    c->want_master = opts->want_master;
    set_addr(c);
    c->rng = (uv_hrtime() ^ (uint64_t)(uintptr_t)c) | 1;
    rls_redis_clock_init(&c->clk);
    c->backoff_ms = BACKOFF_MIN_MS;
    uv_timer_init(loop, &c->retry);
    uv_timer_init(loop, &c->clock);
    c->retry.data = c->clock.data = c;
    c->open = 2;
    uv_timer_start(&c->clock, on_clock, CLOCK_EVERY_MS, CLOCK_EVERY_MS);
    start_connect(c);
    return c;
fail:
    if (c != NULL) {
        free(c->host);
        free(c->user);
        free(c->password);
        free(c);
    }
    return NULL;
}

void rls_redis_conn_retarget(rls_redis_conn_t *c)
{
    char host[RLS_REDIS_ADDR_MAX];
    int port = 0;

    if (c->state == CLOSING || c->addr_fn == NULL ||
        c->addr_fn(c->addr_arg, host, sizeof(host), &port) != 0)
        return;
    if (strcmp(host, c->host) == 0 && port == c->port &&
        (c->state == UP || c->state == CONNECTING))
        return;
    /* A name being resolved finishes first; the connect it starts asks
     * ROLE, and a stale address is then dropped and retried here. */
    if (c->gai_busy)
        return;
    if (c->ctx != NULL) {
        c->retargeting = 1;
        rls_redis_conn_drop(c, RL_ESTORE, "the master moved");
        c->retargeting = 0;
    }
    uv_timer_stop(&c->retry);
    c->backoff_ms = BACKOFF_MIN_MS;
    start_connect(c);
}

void rls_redis_conn_close(rls_redis_conn_t *c)
{
    ctx_t *x = c->ctx;

    c->state = CLOSING;
    /* Fails what is pending: the replies' callbacks fire now, or as soon
     * as the hiredis callback we may be inside returns. */
    if (x != NULL) {
        x->fail = RL_ESHUTDOWN;
        redisAsyncFree(x->ac);
        c->ctx = NULL;
    }
    if (c->gai_busy)
        uv_cancel((uv_req_t *)&c->gai);
    uv_close((uv_handle_t *)&c->retry, on_closed);
    uv_close((uv_handle_t *)&c->clock, on_closed);
}
