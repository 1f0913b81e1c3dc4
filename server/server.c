/* The server's life: start, one tick per loop iteration, graceful stop.
 *
 * Every loop iteration ends in on_tick (a uv_check handle, which runs right
 * after libuv has dispatched the iteration's I/O): connections that were
 * paused read again, the batch of requests read during the iteration goes
 * to the store in one submission, and every connection with responses gets
 * one write. With the memory store the answers of that batch are already in
 * the output buffers when the writes go out, so a request read in an
 * iteration is answered in the same iteration. A uv_prepare handle does the
 * same right before each poll, for requests that joined the batch outside
 * the poll (on_before_poll). */
#include <signal.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rl_error.h"
#include "log.h"
#include "metrics.h"
#include "net/listen.h"
#include "server.h"
#include "util.h"

/* Requests per batch. Bounds one store submission (one Redis script run)
 * and the batch's memory; a busier iteration sends several batches. */
#define RLS_BATCH_MAX 1024

/* How long a stop waits for clients to act on GOAWAY (and for answers and
 * writes) before closing the connections that remain. */
#define RLS_STOP_GRACE_MIN_MS 5000

/* The hold's timer fired: its loop iteration ends in on_tick, which sends
 * the batch that is due. */
static void on_hold(uv_poll_t *p, int status, int events)
{
    rls_server_t *s = p->data;
    uint64_t expirations;

    (void)status;
    (void)events;
    if (read(s->hold_fd, &expirations, sizeof(expirations)) < 0) {
        /* EAGAIN: nothing to read, nothing to do */
    }
    s->hold_due_ns = 0;
}

/* Arms the hold's timer for `wait` ns from now (unless it fires sooner
 * already). A timerfd and not a libuv timer: libuv's count milliseconds,
 * and a hold is a few hundred microseconds. */
static void hold_arm(rls_server_t *s, uint64_t now_ns, uint64_t wait)
{
    struct itimerspec it;

    if (s->hold_fd < 0 ||
        (s->hold_due_ns != 0 && s->hold_due_ns <= now_ns + wait))
        return;
    memset(&it, 0, sizeof(it));
    it.it_value.tv_sec = (time_t)(wait / 1000000000);
    it.it_value.tv_nsec = (long)(wait % 1000000000);
    if (timerfd_settime(s->hold_fd, 0, &it, NULL) == 0)
        s->hold_due_ns = now_ns + wait;
}

/* Sends the filling batch (unless held or behind one in flight) and
 * writes what the connections have to write. */
static void submit_and_write(rls_server_t *s)
{
    uint64_t now = s->batcher.hold_ns != 0 ? uv_hrtime() : 0, wait;

    /* A held batch is due in `wait` ns: any loop iteration before then
     * looks again; the timer makes sure one comes. */
    if ((wait = rls_batcher_tick(&s->batcher, now)) > 0)
        hold_arm(s, now, wait);
    rls_conns_flush(&s->conns);
    if (s->grpc != NULL)
        rls_grpc_flush(s->grpc);
}

/* Right before the poll: requests that joined the batch since the last
 * tick without a read of this iteration's poll (a front end that reads a
 * client's next request from a write's callback, which libuv runs before
 * the poll) go now, or the poll could block with them unsent. */
static void on_before_poll(uv_prepare_t *h)
{
    submit_and_write(h->data);
}

static void on_tick(uv_check_t *h)
{
    rls_server_t *s = h->data;

    rls_conns_resume(&s->conns);
    submit_and_write(s);
    if (s->stopping && !s->draining && !s->closed &&
        rls_list_empty(&s->conns.all) && rls_grpc_idle(s->grpc) &&
        s->batcher.in_flight == 0 && !rls_check_busy(&s->check))
        rls_server_stop(s); /* everything answered: finish the stop */
}

static void on_signal(uv_signal_t *h, int signum)
{
    rls_server_t *s = h->data;

    RLS_INFO("signal received, stopping", " signal=%d", signum);
    rls_server_stop(s);
}

static void on_store_closed(void *arg)
{
    (void)arg;
}

static void on_hold_closed(uv_handle_t *h)
{
    rls_server_t *s = h->data;

    close(s->hold_fd);
    s->hold_fd = -1;
}

static void close_all(rls_server_t *s)
{
    s->closed = 1;
    rls_batcher_free(&s->batcher);
    uv_close((uv_handle_t *)&s->tick, NULL);
    uv_close((uv_handle_t *)&s->before_poll, NULL);
    if (s->hold_fd >= 0)
        uv_close((uv_handle_t *)&s->hold, on_hold_closed);
    rls_conns_free(&s->conns);
    uv_close((uv_handle_t *)&s->sigterm, NULL);
    uv_close((uv_handle_t *)&s->sigint, NULL);
    uv_close((uv_handle_t *)&s->stop_timer, NULL);
    /* The last scrape misses whatever happened after it, which during a
     * stop is exactly what an operator wants to see: whether everything
     * read was answered. */
    RLS_INFO("final counters",
             " ok=%llu over_limit=%llu error=%llu failed_open=%llu"
             " inflight=%llu",
             (unsigned long long)s->conns.stats.decisions[RL_CODE_OK],
             (unsigned long long)s->conns.stats.decisions[RL_CODE_OVER_LIMIT],
             (unsigned long long)s->conns.stats.decisions[RL_CODE_ERROR],
             (unsigned long long)s->batcher.stats.failed_open,
             (unsigned long long)s->conns.stats.inflight);
    rls_http_server_close(s->http);
    s->http = NULL;
    rls_grpc_free(s->grpc);
    s->grpc = NULL;
    rls_envoy_reload_close(&s->envoy_reload);
    rls_check_close(&s->check);
    rls_reload_close(&s->reload);
    rls_switch_poll_close(&s->switches);
    s->store->v->close(s->store, on_store_closed, s);
    s->store = NULL;
    RLS_INFO("stopped", NULL);
}

/* Drain over (or the stop's time is up). */
static void on_stop_timer(uv_timer_t *t)
{
    rls_server_t *s = t->data;

    if (s->draining) {
        RLS_INFO("drain over", NULL);
        s->draining = 0;
        s->conns.draining = 0;
        rls_server_stop(s);
        return;
    }
    /* Answers or writes are stuck (a client not reading, say): close the
     * remaining connections; their requests' answers are dropped. */
    RLS_WARN("stop timed out; closing remaining connections", NULL);
    rls_check_close(&s->check);
    rls_conns_close(&s->conns);
    if (s->grpc != NULL)
        rls_grpc_close_all(s->grpc);
}

void rls_server_stop(rls_server_t *s)
{
    uint64_t grace;

    if (s->closed)
        return;
    if (!s->stopping) {
        s->stopping = 1;
        s->conns.stopping = 1;
        rls_switch_poll_leave(&s->switches);
        if (s->cfg->drain_ms > 0) {
            /* Keep serving while the load balancer notices /healthz. */
            s->draining = 1;
            s->conns.draining = 1;
            if (s->grpc != NULL)
                rls_grpc_set_draining(s->grpc, 1);
            RLS_INFO("draining", " drain_ms=%llu",
                     (unsigned long long)s->cfg->drain_ms);
            uv_timer_start(&s->stop_timer, on_stop_timer, s->cfg->drain_ms,
                           0);
            return;
        }
    }
    if (s->draining)
        return; /* the drain timer comes back here */

    if (!uv_is_closing((uv_handle_t *)&s->listener)) {
        uv_close((uv_handle_t *)&s->listener, NULL);
        RLS_INFO("stopping: listener closed, clients told to go away",
                 " connections=%zu", rls_conns_goaway(&s->conns));
        if (s->grpc != NULL)
            RLS_INFO("stopping: gRPC listener closed, GOAWAY sent",
                     " connections=%zu", rls_grpc_goaway(s->grpc));
        grace = 4 * s->cfg->redis_timeout_ms;
        if (grace < RLS_STOP_GRACE_MIN_MS)
            grace = RLS_STOP_GRACE_MIN_MS;
        uv_timer_start(&s->stop_timer, on_stop_timer, grace, 0);
        /* --http: answers what it holds, with Connection: close. */
        rls_check_stop(&s->check);
    }
    rls_batcher_flush_now(&s->batcher);
    if (rls_list_empty(&s->conns.all) && rls_grpc_idle(s->grpc) &&
        s->batcher.in_flight == 0 && !rls_check_busy(&s->check))
        close_all(s);
}

static void on_conns_empty(void *arg)
{
    rls_server_stop(arg);
}

static void on_connection(uv_stream_t *listener, int status)
{
    rls_server_t *s = listener->data;

    rls_conns_accept(&s->conns, listener, status);
}

int rls_server_metrics(const rls_server_t *s, rl_buf_t *out)
{
    rls_metrics_view_t v;
    const char *why;

    memset(&v, 0, sizeof(v));
    v.cfg = s->cfg;
    v.conns = &s->conns.stats;
    v.batch = &s->batcher.stats;
    v.store = s->store;
    v.http = s->http != NULL ? rls_http_server_stats(s->http) : NULL;
    v.start_unix_ms = s->start_unix_ms;
    v.healthy = s->store != NULL && rls_server_healthy(s, &why);
    v.draining = s->draining;
    v.rt = s->rt.policy != NULL ? &s->rt : NULL;
    v.reload = &s->reload.stats;
    v.switches = &s->switches.stats;
    v.refusals = &s->batcher.refusals.stats;
    v.grpc = s->grpc;
    v.envoy_reload = s->cfg->nenvoy_configs > 0 ? &s->envoy_reload.stats
                                                : NULL;
    v.check = rls_check_stats(&s->check);
    v.check_rejected = s->check.rejected;
    return rls_metrics_render(&v, out);
}

static int path_is(const rls_http_req_t *q, size_t plen, const char *p)
{
    return plen == strlen(p) && memcmp(q->target, p, plen) == 0;
}

static int method_is(const rls_http_req_t *q, const char *name)
{
    return q->method_len == strlen(name) &&
           memcmp(q->method, name, q->method_len) == 0;
}

/* The --metrics listener's pages: GET (or HEAD) /metrics and /healthz;
 * another method on them is 405, any other path 404. */
static void on_http(void *arg, const rls_http_req_t *q, rls_http_reply_t *r)
{
    static char body[128];
    rls_server_t *s = arg;
    size_t plen = rls_http_path_len(q);
    int get = method_is(q, "HEAD") || method_is(q, "GET");
    int rc;

    if (!path_is(q, plen, "/metrics") && !path_is(q, plen, "/healthz"))
        return; /* 404 */
    if (!get) {
        rls_http_reply_text(r, 405, "Method Not Allowed",
                            "method not allowed\n");
        r->extra = "Allow: GET, HEAD\r\n";
        return;
    }
    if (path_is(q, plen, "/healthz")) {
        const char *why = "stopped";
        int ok = s->store != NULL && rls_server_healthy(s, &why);

        snprintf(body, sizeof(body), "%s\n", why);
        rls_http_reply_text(r, ok ? 200 : 503,
                            ok ? "OK" : "Service Unavailable", body);
        return;
    }
    rl_buf_reset(&s->page);
    if ((rc = rls_server_metrics(s, &s->page)) != RL_OK) {
        RLS_ERROR("cannot render /metrics", " err=\"%s\"", rl_strerror(rc));
        rls_http_reply_text(r, 500, "Internal Server Error",
                            "internal error\n");
        r->close = 1;
        return;
    }
    rls_http_reply_text(r, 200, "OK", "");
    r->ctype = "text/plain; version=0.0.4; charset=utf-8";
    r->body = rl_buf_rptr(&s->page);
    r->body_len = rl_buf_len(&s->page);
}

static void install_envoy_conf(void *arg, rls_envoy_conf_t *conf)
{
    rls_server_t *s = arg;

    rls_grpc_set_conf(s->grpc, conf);
}

/* The --grpc listener and its --envoy-config files. Returns 0 or a libuv
 * error (UV_EINVAL: a bad file, logged). */
static int start_grpc(rls_server_t *s)
{
    const rls_config_t *cfg = s->cfg;
    rls_envoy_conf_t *conf = NULL;
    rls_diag_t d;
    int rc;

    if (cfg->nenvoy_configs > 0 &&
        (rc = rls_envoy_conf_build(cfg->envoy_configs, cfg->nenvoy_configs,
                                   &conf, &d)) != RL_OK) {
        RLS_ERROR("bad --envoy-config", " error=\"%s\"",
                  rc == RL_EINVAL ? d.msg[0] : "out of memory");
        return UV_EINVAL;
    }
    if ((rc = rls_grpc_start(&s->grpc, s->loop, cfg, &s->batcher)) != 0) {
        rls_envoy_conf_unref(conf);
        RLS_ERROR("cannot listen for gRPC", " addr=%s:%d err=\"%s\"",
                  cfg->grpc_host, cfg->grpc_port, uv_strerror(rc));
        return rc;
    }
    rls_grpc_set_conf(s->grpc, conf);
    rls_grpc_on_empty(s->grpc, on_conns_empty, s);
    if (cfg->nenvoy_configs > 0)
        rls_envoy_reload_start(&s->envoy_reload, s->loop, cfg->envoy_configs,
                               cfg->nenvoy_configs, cfg->reload_settle_ms,
                               install_envoy_conf, s);
    s->port[RLS_LISTENER_GRPC] = rls_grpc_port(s->grpc);
    RLS_INFO("grpc listening", " addr=%s:%d envoy_configs=%zu",
             cfg->grpc_host, s->port[RLS_LISTENER_GRPC],
             cfg->nenvoy_configs);
    return 0;
}

/* A new policy or new switches: the batch being filled goes out first,
 * so that no batch mixes two versions. */
static void before_policy_change(void *arg)
{
    rls_server_t *s = arg;

    rls_batcher_flush_now(&s->batcher);
    /* A limit may have gone up: what was full may not be any more. */
    rls_refusals_invalidate(&s->batcher.refusals);
}

int rls_server_start(rls_server_t *s, uv_loop_t *loop,
                     const rls_config_t *cfg, rls_store_t *store,
                     rls_policy_t *policy)
{
    int rc;

    memset(s, 0, sizeof(*s));
    s->hold_fd = -1;
    s->loop = loop;
    s->cfg = cfg;
    s->store = store;
    s->start_unix_ms = rl_unix_ms();
    if (policy == NULL) {
        rls_diag_t d;
        if (rls_policy_build(cfg->rules, cfg->nrules, NULL, cfg->max_rules,
                             &policy, &d) != RL_OK) {
            RLS_ERROR("bad --rule", " error=\"%s\"", d.msg[0]);
            s->failed = RLS_LISTENER_NATIVE;
            return UV_EINVAL;
        }
    }
    if (rls_runtime_init(&s->rt, policy, cfg->max_rules) != RL_OK) {
        rls_policy_unref(policy);
        return UV_ENOMEM;
    }
    s->rt.inline_mode = cfg->inline_deny ? RLS_INLINE_DENY : RLS_INLINE_ALLOW;
    s->rt.max_inline_window = (uint32_t)cfg->max_inline_window;
    s->rt.max_inline_limit = cfg->max_inline_limit;
    s->rt.before_change = before_policy_change;
    s->rt.arg = s;
    rl_buf_init(&s->page, RLS_HTTP_OUT_MAX);
    rls_batcher_init(&s->batcher, store, &s->rt, cfg->prefix,
                     cfg->prefix_len, RLS_BATCH_MAX,
                     cfg->grace_ms, cfg->fail_open);
    s->batcher.max_in_flight = cfg->batches_in_flight;
    s->batcher.hold_ns = cfg->batch_hold_us * 1000;
    /* The memory store frees a window's counters a few thousand per tick
     * (store/memory.c): its expiries need no spreading. */
    if (cfg->use_redis)
        s->batcher.spread_ms = cfg->spread_ms;

    uv_tcp_init(loop, &s->listener);
    s->listener.data = s;
    rc = rls_listen(&s->listener, cfg->listen_host, cfg->listen_port, 511,
                    on_connection);
    if (rc != 0) {
        s->failed = RLS_LISTENER_NATIVE;
        uv_close((uv_handle_t *)&s->listener, NULL);
        rls_runtime_free(&s->rt);
        return rc;
    }
    s->port[RLS_LISTENER_NATIVE] = rls_listen_port(&s->listener);

    if (cfg->metrics_host[0] != '\0') {
        rc = rls_http_server_start(&s->http, loop, cfg->metrics_host,
                                   cfg->metrics_port, on_http, s);
        if (rc != 0) {
            RLS_ERROR("cannot listen for metrics", " addr=%s:%d err=\"%s\"",
                      cfg->metrics_host, cfg->metrics_port, uv_strerror(rc));
            s->failed = RLS_LISTENER_METRICS;
            uv_close((uv_handle_t *)&s->listener, NULL);
            rls_runtime_free(&s->rt);
            return rc;
        }
        s->port[RLS_LISTENER_METRICS] = rls_http_server_port(s->http);
        RLS_INFO("metrics listening", " addr=%s:%d", cfg->metrics_host,
                 s->port[RLS_LISTENER_METRICS]);
    }
    if (cfg->grpc_host[0] != '\0' && (rc = start_grpc(s)) != 0) {
        s->failed = RLS_LISTENER_GRPC;
        uv_close((uv_handle_t *)&s->listener, NULL);
        rls_http_server_close(s->http);
        s->http = NULL;
        rls_runtime_free(&s->rt);
        return rc;
    }
    if (cfg->http_host[0] != '\0') {
        rls_check_opts_t o;

        rc = rls_check_opts_init(&o, cfg->check_key_header,
                                 cfg->check_rule_header);
        o.xff_hops = (unsigned)cfg->check_xff_hops;
        o.error_details = cfg->check_error_details;
        if (rc != RL_OK ||
            (rc = rls_check_start(&s->check, loop, cfg->http_host,
                                  cfg->http_port, &s->batcher, &o)) != 0) {
            rc = rc == RL_EINVAL ? UV_EINVAL : rc;
            RLS_ERROR("cannot listen for checks", " addr=%s:%d err=\"%s\"",
                      cfg->http_host, cfg->http_port, uv_strerror(rc));
            s->failed = RLS_LISTENER_HTTP;
            rls_http_server_close(s->http);
            s->http = NULL;
            rls_grpc_free(s->grpc);
            s->grpc = NULL;
            rls_envoy_reload_close(&s->envoy_reload);
            uv_close((uv_handle_t *)&s->listener, NULL);
            rls_runtime_free(&s->rt);
            return rc;
        }
        s->port[RLS_LISTENER_HTTP] = rls_check_port(&s->check);
        RLS_INFO("checks listening", " addr=%s:%d", cfg->http_host,
                 s->port[RLS_LISTENER_HTTP]);
    }
    if (rls_refusals_init(&s->batcher.refusals, cfg->refusal_cache) != RL_OK)
        RLS_WARN("no memory for the refusal cache; every request goes to "
                 "the store",
                 NULL);
    rls_conns_init(&s->conns, loop, cfg, &s->batcher);
    s->conns.on_empty = on_conns_empty;
    s->conns.arg = s;

    uv_check_init(loop, &s->tick);
    s->tick.data = s;
    uv_check_start(&s->tick, on_tick);
    uv_prepare_init(loop, &s->before_poll);
    s->before_poll.data = s;
    uv_prepare_start(&s->before_poll, on_before_poll);
    if (s->batcher.hold_ns != 0) {
        s->hold_fd =
            timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
        if (s->hold_fd < 0 || uv_poll_init(loop, &s->hold, s->hold_fd) != 0) {
            RLS_WARN("no timer for --batch-hold-us; batches are not held",
                     NULL);
            if (s->hold_fd >= 0)
                close(s->hold_fd);
            s->hold_fd = -1;
            s->batcher.hold_ns = 0;
        } else {
            s->hold.data = s;
            uv_poll_start(&s->hold, UV_READABLE, on_hold);
        }
    }
    uv_timer_init(loop, &s->stop_timer);
    s->stop_timer.data = s;
    uv_signal_init(loop, &s->sigterm);
    s->sigterm.data = s;
    uv_signal_start(&s->sigterm, on_signal, SIGTERM);
    uv_signal_init(loop, &s->sigint);
    s->sigint.data = s;
    uv_signal_start(&s->sigint, on_signal, SIGINT);
    rls_reload_start(&s->reload, loop, &s->rt, cfg->config_path, cfg->rules,
                     cfg->nrules, cfg->max_rules, cfg->reload_settle_ms);
    {
        char host[64] = "localhost", inst[160];
        gethostname(host, sizeof(host) - 1);
        host[sizeof(host) - 1] = '\0';
        snprintf(inst, sizeof(inst), "%s:%d:%ld", host,
                 s->port[RLS_LISTENER_NATIVE],
                 (long)getpid());
        rls_switch_poll_start(&s->switches, loop, store, &s->rt, cfg->prefix,
                              inst);
    }
    return 0;
}

int rls_server_write_ports(const rls_server_t *s, const char *path)
{
    static const char *const flag[RLS_LISTENERS] = {
        [RLS_LISTENER_NATIVE] = "listen", [RLS_LISTENER_METRICS] = "metrics",
        [RLS_LISTENER_GRPC] = "grpc", [RLS_LISTENER_HTTP] = "http"};
    const char *host[RLS_LISTENERS] = {
        [RLS_LISTENER_NATIVE] = s->cfg->listen_host,
        [RLS_LISTENER_METRICS] = s->cfg->metrics_host,
        [RLS_LISTENER_GRPC] = s->cfg->grpc_host,
        [RLS_LISTENER_HTTP] = s->cfg->http_host};
    char tmp[4096];
    FILE *f;
    int i, ok;

    if (snprintf(tmp, sizeof(tmp), "%s.%ld.tmp", path, (long)getpid()) >=
        (int)sizeof(tmp))
        return RL_EIO;
    if ((f = fopen(tmp, "w")) == NULL)
        return RL_EIO;
    for (i = 0; i < RLS_LISTENERS; i++) {
        if (s->port[i] <= 0)
            continue;
        /* An IPv6 literal in brackets, as the flags take it. */
        fprintf(f, strchr(host[i], ':') != NULL ? "%s [%s]:%d\n" : "%s %s:%d\n",
                flag[i], host[i], s->port[i]);
    }
    ok = fflush(f) == 0 && !ferror(f);
    ok = fclose(f) == 0 && ok;
    if (!ok || rename(tmp, path) != 0) {
        unlink(tmp);
        return RL_EIO;
    }
    return RL_OK;
}

/* The store answers, but with errors (Redis out of memory, read-only, a
 * script that fails): a load balancer and an alert must see that too. */
static int store_failing(const rls_server_t *s, const char **why)
{
    static char text[96];
    uint64_t decided, failed;

    rls_batcher_share(&s->batcher, uv_hrtime() / 1000000000, &decided,
                      &failed);
    if (decided < s->cfg->unhealthy_min_decisions ||
        (double)failed <= s->cfg->unhealthy_error_ratio * (double)decided)
        return 0;
    snprintf(text, sizeof(text),
             "store errors: %llu of %llu decisions failed in the last %d s",
             (unsigned long long)failed, (unsigned long long)decided,
             RLS_SHARE_S);
    *why = text;
    return 1;
}

int rls_server_healthy(const rls_server_t *s, const char **why)
{
    if (s->stopping) {
        *why = s->draining ? "draining" : "stopping";
        return 0;
    }
    if (!s->store->v->up(s->store)) {
        *why = s->store->stats.down_text[0] ? s->store->stats.down_text
                                            : "store unavailable";
        return 0;
    }
    if (!rls_switch_poll_ready(&s->switches)) {
        *why = "runtime switches not read yet";
        return 0;
    }
    if (s->store->stats.mem_full) {
        *why = "memory store full";
        return 0;
    }
    if (store_failing(s, why))
        return 0;
    *why = "ok";
    return 1;
}

void rls_server_free(rls_server_t *s)
{
    rl_buf_free(&s->page);
    rls_runtime_free(&s->rt);
}
