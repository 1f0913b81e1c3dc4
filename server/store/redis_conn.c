/* The Redis store's connection: see redis_conn.h, and redis.c for the
 * batches.
 *
 * AUTH and SELECT (when configured), SCRIPT LOAD, INFO server and TIME are
 * pipelined on every (re)connect; the store is up once TIME answers. INFO's
 * run_id tells a restarted Redis (whose counters of the current window
 * are gone, unless it persisted them) from a connection that was merely
 * lost. Reconnects back off
 * from 20 ms, doubling to 1 s, plus up to 50% jitter. Names are resolved on
 * libuv's thread pool. TIME is sampled again every second: the store's
 * clock is Redis's (redis_clock.h), and a TIME left unanswered tells an
 * idle store that Redis hangs.
 *
 * hiredis's own libuv adapter ignores poll errors (see store/redis_uv.h), so
 * a refused connect would never be reported; redis_uv.c replaces it. */
#include <arpa/inet.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <hiredis/async.h>
#include <hiredis/hiredis.h>

#include "rl_error.h"
#include "log.h"
#include "rl_clock.h"
#include "store/redis_clock.h"
#include "store/redis_conn.h"
#include "store/redis_reply_alloc.h"
#include "store/redis_script.h"
#include "store/redis_uv.h"

#define BACKOFF_MIN_MS 20
#define BACKOFF_MAX_MS 1000
#define CLOCK_EVERY_MS 1000

static void start_connect(rls_redis_store_t *st);

/* ---- clock -------------------------------------------------------------*/

uint64_t rls_redis_now_ms(rls_store_t *s)
{
    rls_redis_store_t *st = (rls_redis_store_t *)s;
    struct timespec ts = {0, 0};

    /* The local clock is read only until Redis's is known. */
    if (st->clk.sampled_us == 0)
        clock_gettime(CLOCK_REALTIME, &ts);
    return rls_redis_clock_now(&st->clk, uv_hrtime() / 1000,
                               (uint64_t)ts.tv_sec * 1000 +
                                   (uint64_t)ts.tv_nsec / 1000000);
}

/* Applies a TIME reply received at now_ns. Returns 0, or RL_EINVAL if the reply
 * is malformed. */
static int clock_sample(rls_redis_store_t *st, rls_redis_conn_t *c,
                        redisReply *r, uint64_t now_ns)
{
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 ||
        r->element[0]->type != REDIS_REPLY_STRING ||
        r->element[1]->type != REDIS_REPLY_STRING)
        return RL_EINVAL;
    rls_redis_clock_sample(&st->clk, c->time_ns / 1000, now_ns / 1000,
                           strtoull(r->element[0]->str, NULL, 10) * 1000000 +
                               strtoull(r->element[1]->str, NULL, 10));
    return 0;
}

/* The connection's poll handle closed: hiredis freed its context. */
static void on_conn_closed(void *arg)
{
    rls_redis_conn_t *c = arg;
    rls_redis_store_t *st = c->st;

    free(c);
    st->open--;
    rls_redis_maybe_finish(st);
}

/* ---- connection state ---------------------------------------------------*/

static void on_retry(uv_timer_t *t)
{
    start_connect(t->data);
}

static void schedule_retry(rls_redis_store_t *st)
{
    uint64_t delay = st->backoff_ms;

    /* xorshift64: jitter only, so that many servers do not reconnect in
     * lockstep after Redis returns. */
    delay += rl_xorshift64(&st->rng) % (st->backoff_ms / 2 + 1);
    st->backoff_ms *= 2;
    if (st->backoff_ms > BACKOFF_MAX_MS)
        st->backoff_ms = BACKOFF_MAX_MS;
    uv_timer_start(&st->retry, on_retry, delay, 0);
}

/* A connection attempt failed before there was a connection to lose. */
static void connect_failed(rls_redis_store_t *st, const char *why)
{
    /* A cluster's masters share one flag: a refusal every node gives
     * (a wrong password) is one warning, not one per node. */
    if (!st->quiet && (st->quiet_shared == NULL || !*st->quiet_shared))
        RLS_WARN("redis unreachable", " addr=%s:%d err=\"%s\"", st->host,
                 st->port, why);
    else
        RLS_DEBUG("redis connect failed", " addr=%s:%d err=\"%s\"", st->host,
                  st->port, why);
    st->quiet = 1;
    if (st->quiet_shared != NULL)
        *st->quiet_shared = 1;
    st->state = RLS_REDIS_DOWN;
    schedule_retry(st);
}

/* Records that connection c is gone or going; idempotent, since hiredis
 * reports one loss through several callbacks. Logs the state change and
 * schedules the reconnect. */
void rls_redis_conn_lost(rls_redis_store_t *st, rls_redis_conn_t *c,
                         const char *why)
{
    if (c == NULL || st->conn != c)
        return;
    st->conn = NULL;
    if (st->state == RLS_REDIS_CLOSING)
        return;
    if (st->state != RLS_REDIS_UP) {
        connect_failed(st, why);
        return;
    }
    RLS_WARN("redis down", " addr=%s:%d err=\"%s\"", st->host, st->port, why);
    st->down_since_ms = rl_mono_ms();
    st->quiet = 1;
    st->state = RLS_REDIS_DOWN;
    schedule_retry(st);
}

/* Drops the current connection; batches in flight fail with `status`.
 * Inside a hiredis callback the free (and their callbacks) happen as soon
 * as that callback returns. */
void rls_redis_conn_drop(rls_redis_store_t *st, int status, const char *why)
{
    rls_redis_conn_t *c = st->conn;
    redisAsyncContext *ac;

    if (c == NULL)
        return;
    ac = c->ac;
    c->fail = status;
    rls_redis_conn_lost(st, c, why);
    redisAsyncFree(ac);
}

static void on_connect(const redisAsyncContext *ac, int status)
{
    /* hiredis frees the context itself after a failed connect. */
    if (status != REDIS_OK)
        rls_redis_conn_lost(rls_redis_conn_of(ac)->st, rls_redis_conn_of(ac),
                            ac->errstr ? ac->errstr : "?");
}

static void on_disconnect(const redisAsyncContext *ac, int status)
{
    (void)status;
    rls_redis_conn_lost(rls_redis_conn_of(ac)->st, rls_redis_conn_of(ac),
                        ac->err && ac->errstr ? ac->errstr
                                              : "connection closed");
}

/* Checks a handshake reply; on trouble drops the connection and returns
 * RL_ESTORE. */
static int hs_check(redisAsyncContext *ac, redisReply *r, int type)
{
    rls_redis_conn_t *c = rls_redis_conn_of(ac);
    rls_redis_store_t *st = c->st;

    if (r == NULL) {
        rls_redis_conn_lost(st, c,
                            ac->err && ac->errstr ? ac->errstr : "dropped");
        return RL_ESTORE;
    }
    if (st->conn != c)
        return RL_ESTORE;
    if (r->type == type)
        return 0;
    rls_redis_conn_drop(st, RL_ESTORE,
                        r->type == REDIS_REPLY_ERROR ? r->str
                                                     : "unexpected reply");
    return RL_ESTORE;
}

static void on_status_reply(redisAsyncContext *ac, void *r, void *priv)
{
    (void)priv;
    hs_check(ac, r, REDIS_REPLY_STATUS);
}

static void on_load_reply(redisAsyncContext *ac, void *r, void *priv)
{
    rls_redis_store_t *st = rls_redis_conn_of(ac)->st;
    redisReply *rep = r;

    (void)priv;
    if (hs_check(ac, rep, REDIS_REPLY_STRING) != 0)
        return;
    if (rep->len != 40) {
        rls_redis_conn_drop(st, RL_ESTORE, "bad SCRIPT LOAD reply");
        return;
    }
    memcpy(st->sha, rep->str, 40);
}

/* RL.VERSION: the ratelimit module (server/redis_module) is loaded and
 * speaks our format. Anything else (an unknown command, another version)
 * leaves batches to the script. */
static void on_module_reply(redisAsyncContext *ac, void *r, void *priv)
{
    rls_redis_conn_t *c = rls_redis_conn_of(ac);
    rls_redis_store_t *st = c->st;
    redisReply *rep = r;

    (void)priv;
    if (rep == NULL || st->conn != c)
        return;
    st->base.stats.redis_module = rep->type == REDIS_REPLY_INTEGER &&
                                  rep->integer == RLS_REDIS_MODULE_VERSION;
    if (!st->base.stats.redis_module && rep->type == REDIS_REPLY_INTEGER)
        RLS_WARN("redis: the ratelimit module speaks another version; "
                 "batches go to the Lua script",
                 " addr=%s:%d version=%lld want=%d", st->host, st->port,
                 rep->integer, RLS_REDIS_MODULE_VERSION);
}

/* Reads run_id from INFO server. A Redis where INFO is renamed or denied
 * still serves: restarts then go unnoticed (logged at debug). */
static void on_info_reply(redisAsyncContext *ac, void *r, void *priv)
{
    rls_redis_conn_t *c = rls_redis_conn_of(ac);
    rls_redis_store_t *st = c->st;
    redisReply *rep = r;
    const char *id;

    (void)priv;
    if (rep == NULL || st->conn != c)
        return;
    if (rep->type != REDIS_REPLY_STRING ||
        (id = strstr(rep->str, "run_id:")) == NULL ||
        strspn(id + 7, "0123456789abcdef") != 40) {
        RLS_DEBUG("redis run_id unknown", " err=\"%s\"",
                  rep->type == REDIS_REPLY_ERROR ? rep->str : "no run_id");
        return;
    }
    id += 7;
    if (st->run_id[0] != '\0' && memcmp(st->run_id, id, 40) != 0) {
        st->base.stats.restarts++;
        RLS_WARN("redis restarted: counts of the current windows are lost "
                 "unless it persists them",
                 " addr=%s:%d run_id=%.40s was=%s", st->host, st->port, id,
                 st->run_id);
    }
    memcpy(st->run_id, id, 40);
    st->run_id[40] = '\0';
}

static void on_time_reply(redisAsyncContext *ac, void *r, void *priv)
{
    rls_redis_conn_t *c = rls_redis_conn_of(ac);
    rls_redis_store_t *st = c->st;

    (void)priv;
    if (hs_check(ac, r, REDIS_REPLY_ARRAY) != 0)
        return;
    if (clock_sample(st, c, r, uv_hrtime()) != 0) {
        rls_redis_conn_drop(st, RL_ESTORE, "bad TIME reply");
        return;
    }
    c->time_ns = 0;
    if (st->state != RLS_REDIS_CONNECTING)
        return;
    uv_timer_stop(&st->retry);
    st->state = RLS_REDIS_UP;
    st->backoff_ms = BACKOFF_MIN_MS;
    st->quiet = 0;
    if (st->quiet_shared != NULL)
        *st->quiet_shared = 0;
    if (st->ever_up) {
        st->base.stats.reconnects++;
        RLS_INFO("redis reconnected", " addr=%s:%d down_ms=%llu batch=%s",
                 st->host, st->port,
                 (unsigned long long)(rl_mono_ms() - st->down_since_ms),
                 st->base.stats.redis_module ? "module" : "script");
    } else {
        RLS_INFO("redis connected", " addr=%s:%d db=%d batch=%s", st->host,
                 st->port, st->db,
                 st->base.stats.redis_module ? "module" : "script");
    }
    st->ever_up = 1;
}

static void send_time(rls_redis_conn_t *c)
{
    c->time_ns = uv_hrtime();
    if (redisAsyncCommand(c->ac, on_time_reply, NULL, "TIME") != REDIS_OK)
        c->time_ns = 0;
}

/* Samples Redis's clock every CLOCK_EVERY_MS. A TIME left unanswered also
 * tells an idle store that Redis hangs, so up() turns 0 without waiting for
 * a batch to time out. */
static void on_clock(uv_timer_t *t)
{
    rls_redis_store_t *st = t->data;
    uint64_t wait_ms;

    rls_redis_errors_log(st);
    if (st->state != RLS_REDIS_UP)
        return;
    if (st->conn->time_ns == 0) {
        send_time(st->conn);
        return;
    }
    wait_ms = (uv_hrtime() - st->conn->time_ns) / 1000000;
    if (wait_ms <= st->timeout_ms)
        return;
    /* Dropping the connection now would fail the batches in flight before
     * their deadline, and a Redis that wakes up would still run them:
     * stop sending instead; the last batch's deadline drops it. */
    st->stalled = 1;
    if (st->live == 0)
        rls_redis_conn_drop(st, RL_ETIMEDOUT, "TIME unanswered");
}

/* The handshake did not finish in time (Redis stopped, or a black hole).
 * It gets at least 250 ms, because a very short batch timeout says nothing
 * about how long a TCP connect plus four commands may take. */
static void on_hs_deadline(uv_timer_t *t)
{
    rls_redis_store_t *st = t->data;

    rls_redis_conn_drop(st, RL_ESTORE, "connect timed out");
}

static void connect_addr(rls_redis_store_t *st, const char *ip)
{
    redisAsyncContext *ac = redisAsyncConnect(ip, st->port);
    rls_redis_conn_t *c = NULL;
    char why[128];

    snprintf(why, sizeof(why), "%s",
             ac == NULL ? "out of memory"
             : ac->err  ? ac->errstr
                        : "");
    if (ac == NULL || ac->err)
        goto fail;
    snprintf(why, sizeof(why), "cannot attach to the loop");
    if ((c = calloc(1, sizeof(*c))) == NULL ||
        rls_redis_uv_attach(ac, st->loop, on_conn_closed, c) != 0)
        goto fail;
    st->open++;
    c->ac = ac;
    ac->c.reader->fn = &rls_redis_reply_fns;
    c->st = st;
    c->fail = RL_ESTORE;
    rls_redis_clock_new_path(&st->clk);
    st->stalled = 0;
    ac->data = c;
    st->conn = c;
    redisAsyncSetConnectCallback(ac, on_connect);
    redisAsyncSetDisconnectCallback(ac, on_disconnect);
    /* The handshake is pipelined behind the connect; hiredis sends it once
     * the socket is writable. */
    if (st->password != NULL)
        redisAsyncCommand(ac, on_status_reply, NULL, "AUTH %s", st->password);
    if (st->db > 0)
        redisAsyncCommand(ac, on_status_reply, NULL, "SELECT %d", st->db);
    if (st->cluster) {
        size_t slen;
        const char *text = rls_redis_cluster_script(&slen);
        redisAsyncCommand(ac, on_load_reply, NULL, "SCRIPT LOAD %b", text,
                          slen);
    } else {
        redisAsyncCommand(ac, on_load_reply, NULL, "SCRIPT LOAD %s",
                          rls_redis_script);
    }
    st->base.stats.redis_module = 0;
    if (st->use_module)
        redisAsyncCommand(ac, on_module_reply, NULL, "RL.VERSION");
    redisAsyncCommand(ac, on_info_reply, NULL, "INFO server");
    send_time(c);
    uv_timer_start(&st->retry, on_hs_deadline,
                   st->timeout_ms > 250 ? st->timeout_ms : 250, 0);
    return;
fail:
    free(c);
    if (ac != NULL)
        redisAsyncFree(ac);
    connect_failed(st, why);
}

static void on_resolved(uv_getaddrinfo_t *req, int status, struct addrinfo *res)
{
    rls_redis_store_t *st = req->data;
    struct addrinfo *ai, *pick = NULL;
    char ip[64] = "";

    st->gai_busy = 0;
    st->open--;
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
    if (st->state == RLS_REDIS_CLOSING) {
        rls_redis_maybe_finish(st);
    } else if (ip[0] == '\0') {
        connect_failed(st, status ? uv_strerror(status) : "no address");
    } else {
        connect_addr(st, ip);
    }
}

static void start_connect(rls_redis_store_t *st)
{
    struct addrinfo hints;
    int rc;

    st->state = RLS_REDIS_CONNECTING;
    if (st->numeric) {
        connect_addr(st, st->host);
        return;
    }
    /* A name is resolved on libuv's thread pool: getaddrinfo blocks. */
    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    st->gai.data = st;
    rc =
        uv_getaddrinfo(st->loop, &st->gai, on_resolved, st->host, NULL, &hints);
    if (rc == 0) {
        st->gai_busy = 1;
        st->open++;
        return;
    }
    connect_failed(st, uv_strerror(rc));
}

int rls_redis_up(rls_store_t *s)
{
    rls_redis_store_t *st = (rls_redis_store_t *)s;

    return st->state == RLS_REDIS_UP && !st->stalled;
}

void rls_redis_conn_start(rls_redis_store_t *st)
{
    st->backoff_ms = BACKOFF_MIN_MS;
    uv_timer_start(&st->clock, on_clock, CLOCK_EVERY_MS, CLOCK_EVERY_MS);
    start_connect(st);
}
