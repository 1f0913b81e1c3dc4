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
#include <pthread.h>
#include <signal.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rl_error.h"
#include "base/log.h"
#include "metrics.h"
#include "net/tls.h"
#include "envoy/dir.h"
#include "rlqs/rlqs.h"
#include "server.h"
#include "base/util.h"

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
    uint64_t now = rls_decider_hold_ns(&s->decider) != 0 ? uv_hrtime() : 0,
             wait;

    /* A held batch is due in `wait` ns: any loop iteration before then
     * looks again; the timer makes sure one comes. */
    int i;

    if ((wait = rls_decider_tick(&s->decider, now)) > 0)
        hold_arm(s, now, wait);
    for (i = 0; i < RLS_LISTENERS; i++)
        if (s->fe[i] != NULL && s->fe[i]->ops->flush != NULL)
            s->fe[i]->ops->flush(s->fe[i]);
}

/* 1 while a front end holds a connection or owes an answer, or the store
 * owes one: the stop waits. */
static int busy(const rls_server_t *s)
{
    int i;

    if (rls_decider_busy(&s->decider))
        return 1;
    for (i = 0; i < RLS_LISTENERS; i++)
        if (s->fe[i] != NULL && s->fe[i]->ops->busy != NULL &&
            s->fe[i]->ops->busy(s->fe[i]))
            return 1;
    return 0;
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
    int i;

    for (i = 0; i < RLS_LISTENERS; i++)
        if (s->fe[i] != NULL && s->fe[i]->ops->resume != NULL)
            s->fe[i]->ops->resume(s->fe[i]);
    submit_and_write(s);
    if (s->store_up_out != NULL && s->store != NULL) {
        int up = s->store->v->up(s->store) != 0;
        if (up != s->store_up_last) {
            s->store_up_last = up;
            __atomic_store_n(s->store_up_out, up, __ATOMIC_RELAXED);
        }
    }
    if (s->hooks.ready != NULL && !s->ready_told &&
        rls_switch_poll_ready(&s->switches)) {
        s->ready_told = 1;
        s->hooks.ready(s->hooks.arg);
    }
    if (s->stopping && !s->draining && !s->closed && !busy(s))
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
    int i, local;

    s->closed = 1;
    local = rls_decider_local(&s->decider) != NULL;
    rls_decider_free(&s->decider); /* it uses --fail-local's no more */
    rls_tracer_close(&s->tracer);  /* every span ended with its answer */
    if (local) {
        if (s->local.n > 0)
            RLS_WARN("fail-local: stopping with admissions the store was "
                     "never told of",
                     " charges=%zu", s->local.n);
        rls_local_close(&s->local, NULL, NULL);
    }
    uv_close((uv_handle_t *)&s->tick, NULL);
    uv_close((uv_handle_t *)&s->before_poll, NULL);
    if (s->hold_fd >= 0)
        uv_close((uv_handle_t *)&s->hold, on_hold_closed);
    /* Closing them gives the signals their default action back: one more
     * SIGTERM (a supervisor repeating itself) must not kill a server that
     * is finishing its stop and exits 0 in a moment. So they are ignored
     * after, and blocked until then: one that came in between (libuv
     * blocks them while it unregisters, and lets one pending through when
     * it unblocks) would otherwise meet the default action. */
    {
        sigset_t set, old;
        sigemptyset(&set);
        sigaddset(&set, SIGTERM);
        sigaddset(&set, SIGINT);
        if (s->first == NULL) {
            pthread_sigmask(SIG_BLOCK, &set, &old);
            uv_close((uv_handle_t *)&s->sigterm, NULL);
            uv_close((uv_handle_t *)&s->sigint, NULL);
            signal(SIGTERM, SIG_IGN);
            signal(SIGINT, SIG_IGN);
            pthread_sigmask(SIG_SETMASK, &old, NULL);
        }
    }
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
             (unsigned long long)rls_decider_stats(&s->decider)->failed_open,
             (unsigned long long)s->conns.stats.inflight);
    for (i = 0; i < RLS_LISTENERS; i++)
        if (s->fe[i] != NULL) {
            s->fe[i]->ops->free(s->fe[i]);
            s->fe[i] = NULL;
        }
    s->grpc = NULL;
    /* The last counts go out before the exporter closes. */
    rls_statsd_flush(&s->statsd);
    rls_statsd_close(&s->statsd);
    rls_envoy_reload_close(&s->envoy_reload);
    rls_xds_close(&s->xds);
    if (s->tls != NULL)
        rls_tls_reload_close(&s->tls_reload);
    if (s->first == NULL) {
        rls_rules_reload_close(&s->reload);
        rls_switch_poll_close(&s->switches);
        rls_top_pub_close(&s->top_pub);
    }
    s->store->v->close(s->store, on_store_closed, s);
    s->store = NULL;
    RLS_INFO("stopped", NULL);
}

/* Drain over (or the stop's time is up). */
static void on_stop_timer(uv_timer_t *t)
{
    rls_server_t *s = t->data;
    int i;

    if (s->draining) {
        RLS_INFO("drain over", NULL);
        s->draining = 0;
        rls_server_stop(s);
        return;
    }
    /* Answers or writes are stuck (a client not reading, say): close the
     * remaining connections; their requests' answers are dropped. */
    RLS_WARN("stop timed out; closing remaining connections", NULL);
    for (i = 0; i < RLS_LISTENERS; i++)
        if (s->fe[i] != NULL && s->fe[i]->ops->close_all != NULL)
            s->fe[i]->ops->close_all(s->fe[i]);
}

void rls_server_stop(rls_server_t *s)
{
    uint64_t grace;
    int i;

    if (s->closed)
        return;
    if (!s->stopping) {
        s->stopping = 1;
        if (s->first == NULL)
            rls_switch_poll_leave(&s->switches);
        if (s->hooks.stop != NULL)
            s->hooks.stop(s->hooks.arg); /* every other loop stops too */
        if (s->cfg->drain_ms > 0) {
            /* Keep serving while the load balancer notices /healthz. */
            s->draining = 1;
            for (i = 0; i < RLS_LISTENERS; i++)
                if (s->fe[i] != NULL && s->fe[i]->ops->drain != NULL)
                    s->fe[i]->ops->drain(s->fe[i]);
            RLS_INFO("draining", " drain_ms=%llu",
                     (unsigned long long)s->cfg->drain_ms);
            uv_timer_start(&s->stop_timer, on_stop_timer, s->cfg->drain_ms, 0);
            return;
        }
    }
    if (s->draining)
        return; /* the drain timer comes back here */

    if (!s->told) {
        /* Each front end closes its listener and tells its clients to go
         * (GOAWAY, Connection: close), answering what they asked. */
        s->told = 1;
        for (i = 0; i < RLS_LISTENERS; i++)
            if (s->fe[i] != NULL && s->fe[i]->ops->goaway != NULL)
                RLS_INFO("stopping: listener closed, GOAWAY sent",
                         " listener=%s connections=%zu", s->fe[i]->ops->flag,
                         s->fe[i]->ops->goaway(s->fe[i]));
        grace = 4 * s->cfg->redis_timeout_ms;
        if (grace < RLS_STOP_GRACE_MIN_MS)
            grace = RLS_STOP_GRACE_MIN_MS;
        uv_timer_start(&s->stop_timer, on_stop_timer, grace, 0);
    }
    rls_decider_flush_now(&s->decider);
    if (!busy(s))
        close_all(s);
}

/* A front end's last connection closed after goaway. */
static void on_fe_empty(void *arg)
{
    rls_server_stop(arg);
}

int rls_server_metrics(const rls_server_t *s, rl_buf_t *out)
{
    if (s->hooks.metrics != NULL)
        return s->hooks.metrics(s->hooks.arg, out);
    return rls_server_metrics_loop(s, out);
}

int rls_server_metrics_loop(const rls_server_t *s, rl_buf_t *out)
{
    rls_metrics_view_t v;
    const char *why;
    int i, rc;

    memset(&v, 0, sizeof(v));
    v.cfg = s->cfg;
    v.batch = rls_decider_stats(&s->decider);
    v.store = s->store;
    v.start_unix_ms = s->start_unix_ms;
    v.other_loop = s->first != NULL;
    v.healthy = s->store != NULL && rls_server_healthy(s, &why);
    v.draining = s->draining;
    v.rt = s->rt.policy != NULL ? &s->rt : NULL;
    /* Another loop's page holds only what is its own: the first loop's
     * has the process's (its reloads, switches, xDS). */
    v.reload = s->first == NULL ? &s->reload.rl.stats : NULL;
    v.switches = s->first == NULL ? &s->switches.stats : NULL;
    v.refusals = rls_decider_refusal_stats(&s->decider);
    v.local = rls_decider_local(&s->decider);
    v.envoy_reload = s->cfg->nenvoy_configs > 0 && s->first == NULL
                         ? &s->envoy_reload.rl.stats
                         : NULL;
    v.envoy_stats = s->estats_on ? &s->estats : NULL;
    v.statsd = &s->statsd;
    v.tracer = s->decider.tracer;
    v.xds = s->xds.started ? &s->xds.stats : NULL;
    v.grpc = s->grpc != NULL ? rls_grpc_stats(s->grpc) : NULL;
    if ((rc = rls_metrics_render(&v, out)) != RL_OK)
        return rc;
    if (s->xds.started && (rc = rls_xds_metrics(&s->xds, out)) != RL_OK)
        return rc;
    /* The process's sketches, on the first loop's page alone. */
    if (s->first == NULL && s->store != NULL &&
        (rc = rls_top_metrics(s->top, s->store->v->now_ms(s->store),
                              s->cfg->top_metric, out)) != RL_OK)
        return rc;
    for (i = 0; i < RLS_LISTENERS; i++)
        if (s->fe[i] != NULL && s->fe[i]->ops->metrics != NULL &&
            (rc = s->fe[i]->ops->metrics(s->fe[i], out)) != RL_OK)
            return rc;
    {
        const char *names[RLS_LISTENERS];
        const rls_tls_stats_t *tls[RLS_LISTENERS];
        const rls_tls_plain_t *plain[RLS_LISTENERS];
        for (i = 0; i < RLS_LISTENERS; i++) {
            names[i] = s->fe[i] != NULL ? s->fe[i]->ops->flag : "";
            tls[i] = s->fe[i] != NULL ? s->fe[i]->tls : NULL;
            plain[i] = s->fe[i] != NULL ? s->fe[i]->plain : NULL;
        }
        if ((rc = rls_tls_metrics(out, names, tls, RLS_LISTENERS)) != RL_OK ||
            (rc = rls_tls_cert_metrics(out, s->tls, names, tls,
                                       RLS_LISTENERS)) != RL_OK ||
            (rc = rls_tls_plain_metrics(out, names, plain, RLS_LISTENERS)) !=
                RL_OK)
            return rc;
    }
    return RL_OK;
}

static int admin_page(void *arg, rl_buf_t *out)
{
    return rls_server_metrics(arg, out);
}

static int admin_health(void *arg, const char **why)
{
    rls_server_t *s = arg;

    return s->store != NULL && rls_server_healthy(s, why);
}

_Static_assert(RLS_HOST_MAX <= RLS_ADMIN_NAME_MAX &&
                   RLS_PREFIX_MAX <= RLS_ADMIN_NAME_MAX,
               "the admin listener's names fit");

/* The Envoy tree in force and the xDS client's state, for --admin. */
static int admin_envoy(void *arg, rls_admin_envoy_t *e)
{
    const rls_server_t *s = arg;

    if (s->grpc == NULL)
        return 0;
    e->conf = rls_grpc_envoy_ctx(s->grpc)->conf;
    e->xds_version = s->xds.version;
    e->xds_connected = s->xds.stats.connected;
    return 1;
}

/* --admin's loops: the hooks of --threads, or this loop alone. */
static int admin_loop(void *arg, unsigned i, rls_admin_loop_t *out)
{
    rls_server_t *s = arg;

    if (s->hooks.loop_info != NULL)
        return s->hooks.loop_info(s->hooks.arg, i, out);
    if (i > 0)
        return RL_EINVAL;
    memset(out, 0, sizeof(*out));
    out->up = s->store->v->up(s->store) != 0;
    return RL_OK;
}

static int admin_loop_pause(void *arg, unsigned i, int on)
{
    rls_server_t *s = arg;

    if (s->hooks.loop_pause != NULL)
        return s->hooks.loop_pause(s->hooks.arg, i, on);
    return i > 0 ? RL_EINVAL : RL_EBUSY;
}

/* What --admin shows and acts on: the flags it names and the state. */
static void admin_view(rls_server_t *s, rls_admin_view_t *v)
{
    const rls_flags_t *cfg = s->cfg;

    memset(v, 0, sizeof(*v));
    v->prefix = cfg->prefix;
    v->prefix_len = cfg->prefix_len;
    v->grace_ms = cfg->grace_ms;
    v->use_redis = cfg->use_redis;
    v->redis_cluster = cfg->redis_cluster;
    v->redis_sentinels = cfg->redis_sentinels;
    v->config_path = cfg->config_path;
    v->nrules = cfg->nrules;
    v->envoy_configs = cfg->envoy_configs;
    v->nenvoy_configs = cfg->nenvoy_configs;
    v->xds_host = cfg->envoy_xds_host;
    v->xds_port = cfg->envoy_xds_port;
    v->xds_node_id = cfg->envoy_xds_node_id;
    v->start_unix_ms = s->start_unix_ms;
    v->store = s->store;
    v->rt = &s->rt;
    v->top = s->top;
    v->envoy = admin_envoy;
    v->loop = admin_loop;
    v->loop_pause = admin_loop_pause;
    v->arg = s;
}

static void install_envoy_conf(void *arg, rls_envoy_conf_t *conf)
{
    rls_server_t *s = arg;

    rls_grpc_set_conf(s->grpc, conf);
    if (s->hooks.envoy_conf != NULL)
        s->hooks.envoy_conf(s->hooks.arg, conf);
}

/* grpc.health.v1 on the --grpc listener: what /healthcheck says. */
static int grpc_takes_work(void *arg)
{
    const char *why;

    return rls_server_takes_work(arg, &why);
}

/* The --grpc listener and its --envoy-config files. Returns 0 or an RL_E*
 * code with err set. */
/* The front ends' settings, from the flags: the one place a flag becomes
 * a transport limit or a front end's setting. */
void rls_server_stream_opts(const rls_flags_t *cfg, rls_stream_opts_t *o)
{
    memset(o, 0, sizeof(*o));
    o->max_conns = cfg->max_connections;
    o->max_output = cfg->max_output;
    o->max_input = cfg->max_partial_bytes;
    o->idle_ms = cfg->idle_timeout_s * 1000;
    o->frame_ms = cfg->frame_timeout_ms;
    o->handshake_ms = cfg->tls_handshake_timeout_ms;
}

void rls_server_conns_opts(const rls_flags_t *cfg, rls_conns_opts_t *o)
{
    memset(o, 0, sizeof(*o));
    rls_server_stream_opts(cfg, &o->stream);
    o->max_frame = cfg->max_frame;
    o->max_inflight = cfg->max_inflight;
}

void rls_server_grpc_opts(const rls_flags_t *cfg, rls_grpc_opts_t *o)
{
    memset(o, 0, sizeof(*o));
    rls_server_stream_opts(cfg, &o->stream);
    o->host = cfg->grpc_host;
    o->port = cfg->grpc_port;
    o->max_frame = cfg->max_frame;
    o->max_streams = cfg->grpc_max_streams;
    o->shadow_mode = cfg->envoy_shadow_mode;
    o->quota_mode = cfg->envoy_quota_mode;
    o->response_headers = cfg->envoy_response_headers;
    o->response_metadata = cfg->envoy_response_metadata;
}

/* --rlqs-config: Envoy's RLQS on the --grpc listener, over the loop's
 * store. Returns 0 or an RL_E* code with err set. */
static int start_rlqs(rls_server_t *s, char *err, size_t errlen)
{
    rls_rlqs_conf_t *conf;
    rls_rlqs_t *q;
    char why[256];
    int rc;

    if ((rc = rls_rlqs_conf_load(s->cfg->rlqs_config, &conf, why,
                                 sizeof(why))) != 0) {
        snprintf(err, errlen, "bad --rlqs-config %s: %s", s->cfg->rlqs_config,
                 rc == RL_ENOMEM ? "out of memory" : why);
        return rc;
    }
    if ((rc = rls_rlqs_new(&q, s->loop, s->store, conf, s->cfg->prefix)) != 0) {
        snprintf(err, errlen, "out of memory");
        return rc;
    }
    rls_grpc_set_rlqs(s->grpc, q);
    return 0;
}

static int start_grpc(rls_server_t *s, char *err, size_t errlen)
{
    const rls_flags_t *cfg = s->cfg;
    rls_envoy_conf_t *conf = NULL;
    rls_grpc_opts_t go;
    rls_diag_t d;
    int rc;

    if (s->first != NULL) {
        /* Another loop of --threads: the first loop's tree, by reference;
         * the first reads the files and the control plane. */
        conf = rls_grpc_envoy_ctx((rls_grpc_t *)s->first->grpc)->conf;
        if (conf != NULL)
            rls_envoy_conf_ref(conf);
    } else if (cfg->nenvoy_configs > 0 &&
               (rc = rls_envoy_conf_build_paths(cfg->envoy_configs,
                                                cfg->nenvoy_configs, NULL,
                                                &conf, &d)) != RL_OK) {
        snprintf(err, errlen, "bad --envoy-config: %s",
                 rc == RL_EINVAL ? d.msg[0] : "out of memory");
        return rc;
    }
    if (cfg->envoy_xds_host[0] != '\0' && s->first == NULL) {
        rls_xds_opts_t o = {
            .host = cfg->envoy_xds_host,
            .port = cfg->envoy_xds_port,
            .node_id = cfg->envoy_xds_node_id,
            .backoff_min_ms = cfg->envoy_xds_backoff_ms,
            .backoff_max_ms = cfg->envoy_xds_backoff_max_ms,
            .tls_ca = cfg->envoy_xds_tls_ca,
            .tls_server_name = cfg->envoy_xds_tls_server_name,
            .tls_cert = cfg->envoy_xds_tls_cert,
            .tls_key = cfg->envoy_xds_tls_key,
        };
        /* No descriptors until the control plane's first configuration:
         * answered as without --envoy-config. Its first install comes from
         * the loop, once the listener below is up; a failed start unwinds
         * it with the listeners. */
        if ((rc = rls_xds_start(&s->xds, s->loop, &o, install_envoy_conf, s,
                                err, errlen)) != RL_OK)
            return rc;
    }
    rls_server_grpc_opts(cfg, &go);
    if (s->first != NULL)
        go.port = -1; /* the first loop's listener hands it connections */
    if ((rc = rls_grpc_start(&s->grpc, s->loop, &go, &s->decider, err,
                             errlen)) != RL_OK) {
        rls_envoy_conf_unref(conf);
        return rc;
    }
    rls_grpc_set_conf(s->grpc, conf);
    rls_grpc_set_health(s->grpc, grpc_takes_work, s);
    if (cfg->envoy_stats) {
        rls_estats_init(&s->estats, (size_t)cfg->envoy_stats_max_values);
        s->estats.near_ratio = cfg->envoy_near_ratio;
        s->estats_on = 1;
        rls_grpc_set_estats(s->grpc, &s->estats);
        /* Every loop sends its own counters' deltas (statsd counters,
         * "|c"): the statsd server sums them. */
        if (cfg->statsd_host[0] != '\0' &&
            (rc = rls_statsd_start(&s->statsd, s->loop, cfg->statsd_host,
                                   cfg->statsd_port, cfg->statsd_flush_ms,
                                   rls_estats_statsd, &s->estats, err,
                                   errlen)) != RL_OK) {
            s->fe[RLS_LISTENER_GRPC] = rls_grpc_frontend(s->grpc);
            return rc;
        }
    }
    if (cfg->tls_listeners & RLS_TLS_ON_GRPC)
        rls_grpc_set_tls(s->grpc, s->tls);
    s->fe[RLS_LISTENER_GRPC] = rls_grpc_frontend(s->grpc);
    if (cfg->rlqs_config != NULL && (rc = start_rlqs(s, err, errlen)) != 0)
        return rc;
    /* Out of memory stops the start (rls_server_start's unwind closes
     * the listener); a file that cannot be watched is logged, and SIGHUP
     * still reloads it. */
    if (cfg->nenvoy_configs > 0 && s->first == NULL &&
        (rc = rls_envoy_reload_start(
             &s->envoy_reload, s->loop, cfg->envoy_configs, cfg->nenvoy_configs,
             cfg->reload_settle_ms, install_envoy_conf, s)) == RL_ENOMEM) {
        snprintf(err, errlen, "out of memory");
        return rc;
    }
    return RL_OK;
}

/* The --http listener. Returns 0 or an RL_E* code with err set. */
static int start_check(rls_server_t *s, char *err, size_t errlen)
{
    const rls_flags_t *cfg = s->cfg;
    rls_check_opts_t o;
    int rc;

    if (rls_check_opts_init(&o, cfg->check_key_header,
                            cfg->check_rule_header) != RL_OK) {
        snprintf(err, errlen, "bad --check-key-header or --check-rule-header");
        return RL_EINVAL;
    }
    o.xff_hops = (unsigned)cfg->check_xff_hops;
    o.error_details = cfg->check_error_details;
    /* Another loop of --threads binds nothing: the first's listener
     * hands it connections. */
    if ((rc = rls_check_start(&s->check, s->loop, cfg->http_host,
                              s->first != NULL ? -1 : cfg->http_port,
                              &s->decider, &o, err, errlen)) != RL_OK)
        return rc;
    rls_http_server_set_tls(
        s->check.http, cfg->tls_listeners & RLS_TLS_ON_HTTP ? s->tls : NULL,
        "http");
    s->check.fe.tls = rls_http_server_tls_stats(s->check.http);
    s->check.fe.plain = rls_http_server_plain_stats(s->check.http);
    s->fe[RLS_LISTENER_HTTP] = rls_check_frontend(&s->check);
    return RL_OK;
}

static int ehttp_takes_work(void *arg, const char **why)
{
    rls_server_t *s = arg;

    return s->store != NULL && rls_server_takes_work(s, why);
}

/* --envoy-http and --debug-http, beside --grpc (whose calls and
 * configuration they share). Returns 0 or an RL_E* code with err set. */
static int start_envoy_listeners(rls_server_t *s, char *err, size_t errlen)
{
    const rls_flags_t *cfg = s->cfg;
    rls_envoy_ctx_t *ctx = rls_grpc_envoy_ctx(s->grpc);
    int rc;

    if (cfg->envoy_http_host[0] != '\0') {
        /* A body as large as a gRPC message may be. */
        if ((rc = rls_ehttp_start(&s->ehttp, s->loop, cfg->envoy_http_host,
                                  cfg->envoy_http_port, ctx,
                                  (size_t)cfg->max_frame, ehttp_takes_work, s,
                                  err, errlen)) != RL_OK)
            return rc;
        s->fe[RLS_LISTENER_ENVOY_HTTP] = rls_ehttp_frontend(&s->ehttp);
    }
    if (cfg->debug_http_host[0] != '\0') {
        if ((rc = rls_dhttp_start(&s->dhttp, s->loop, cfg->debug_http_host,
                                  cfg->debug_http_port, ctx, err, errlen)) !=
            RL_OK)
            return rc;
        s->fe[RLS_LISTENER_DEBUG_HTTP] = rls_dhttp_frontend(&s->dhttp);
    }
    return RL_OK;
}

/* Opens the listeners the configuration names, in rls_listener_t order.
 * Returns 0, or an RL_E* code with err set and the ones opened before it
 * in s->fe. */
static int start_frontends(rls_server_t *s, char *err, size_t errlen)
{
    const rls_flags_t *cfg = s->cfg;
    rls_conns_opts_t co;
    int rc;

    if (cfg->tls_cert != NULL) {
        rls_tls_opts_t to = {cfg->tls_cert,
                             cfg->tls_key,
                             cfg->tls_client_ca,
                             (uint32_t)cfg->tls_max_handshakes,
                             (uint32_t)cfg->tls_handshake_rate,
                             cfg->tls_client_ca_recheck};
        /* Another loop of --threads shares the first's certificates
         * (read once; each reload handed over, loops.c), under caps and
         * counters of its own. */
        if (s->first != NULL) {
            if ((s->tls = rls_tls_new_like(s->first->tls)) == NULL) {
                snprintf(err, errlen, "TLS: out of memory");
                return RL_ENOMEM;
            }
        } else if ((rc = rls_tls_new(&to, &s->tls, err, errlen)) != RL_OK) {
            return rc;
        }
    }
    rls_server_conns_opts(cfg, &co);
    rls_conns_init(&s->conns, s->loop, &co, &s->decider);
    if (s->first != NULL) {
        /* Another loop of --threads: no listener of its own. */
        s->fe[RLS_LISTENER_NATIVE] = rls_conns_frontend(&s->conns);
        s->conns.fe.plain = &s->conns.set.plain;
    } else if ((rc = rls_conns_listen(&s->conns, cfg->listen_host,
                                      cfg->listen_port, err, errlen)) !=
               RL_OK) {
        rls_conns_free(&s->conns);
        return rc;
    }
    if (cfg->tls_listeners & RLS_TLS_ON_LISTEN)
        rls_conns_set_tls(&s->conns, s->tls);
    s->fe[RLS_LISTENER_NATIVE] = rls_conns_frontend(&s->conns);
    if (cfg->metrics_host[0] != '\0' && s->first == NULL) {
        if ((rc = rls_admin_start(&s->admin, s->loop, cfg->metrics_host,
                                  cfg->metrics_port, admin_page, admin_health,
                                  s, err, errlen)) != RL_OK)
            return rc;
        rls_http_server_set_tls(
            s->admin.http,
            cfg->tls_listeners & RLS_TLS_ON_METRICS ? s->tls : NULL, "metrics");
        s->admin.fe.tls = rls_http_server_tls_stats(s->admin.http);
        s->admin.fe.plain = rls_http_server_plain_stats(s->admin.http);
        s->fe[RLS_LISTENER_METRICS] = rls_admin_frontend(&s->admin);
    }
    if (cfg->grpc_host[0] != '\0' && (rc = start_grpc(s, err, errlen)) != RL_OK)
        return rc;
    if (cfg->http_host[0] != '\0' &&
        (rc = start_check(s, err, errlen)) != RL_OK)
        return rc;
    if (s->grpc != NULL && s->first == NULL &&
        (rc = start_envoy_listeners(s, err, errlen)) != RL_OK)
        return rc;
    if (cfg->admin_host[0] != '\0' && s->first == NULL) {
        rls_admin_view_t v;
        admin_view(s, &v);
        if ((rc = rls_admin_api_start(
                 &s->admin_api, &v, s->loop, cfg->admin_host, cfg->admin_port,
                 cfg->admin_token_file, err, errlen)) != RL_OK)
            return rc;
        s->fe[RLS_LISTENER_ADMIN] = rls_admin_api_frontend(&s->admin_api);
    }
    return RL_OK;
}

/* A new policy or new switches: the batch being filled goes out first,
 * so that no batch mixes two versions. */
static void before_policy_change(void *arg)
{
    rls_server_t *s = arg;

    rls_decider_before_change(&s->decider);
}

/* A new policy or new switches are in force: the first loop of
 * --threads hands them to the others. */
static void after_policy_change(void *arg)
{
    rls_server_t *s = arg;

    if (s->hooks.changed != NULL)
        s->hooks.changed(s->hooks.arg, &s->rt);
}

/* New listener certificates in force: the first loop of --threads hands
 * them to the others. */
static void tls_installed(void *arg, rls_tls_t *tls)
{
    rls_server_t *s = arg;

    if (s->hooks.tls != NULL)
        s->hooks.tls(s->hooks.arg, tls);
}

/* rls_server_start, or another loop's (first != NULL). */
/* --trace-otlp: this loop's tracer, which the decider then feeds. Returns
 * 0 or an RL_E* code with err set. */
static int start_tracer(rls_server_t *s, const rls_server_t *first, char *err,
                        size_t errlen)
{
    const rls_flags_t *cfg = s->cfg;
    rls_trace_opts_t o;
    int rc;

    /* One service.instance.id for the process (envoy-ratelimit's: a
     * random UUID when none is given). */
    if (first != NULL) {
        memcpy(s->trace_instance, first->trace_instance,
               sizeof(s->trace_instance));
    } else if (cfg->trace_instance != NULL && cfg->trace_instance[0] != '\0') {
        snprintf(s->trace_instance, sizeof(s->trace_instance), "%.39s",
                 cfg->trace_instance);
    } else {
        uint8_t u[16];
        if (uv_random(NULL, NULL, u, sizeof(u), 0, NULL) != 0)
            memset(u, 0, sizeof(u));
        u[6] = (uint8_t)((u[6] & 0x0f) | 0x40); /* version 4 */
        u[8] = (uint8_t)((u[8] & 0x3f) | 0x80); /* RFC 4122 variant */
        snprintf(s->trace_instance, sizeof(s->trace_instance),
                 "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-"
                 "%02x%02x%02x%02x%02x%02x",
                 u[0], u[1], u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9],
                 u[10], u[11], u[12], u[13], u[14], u[15]);
    }
    memset(&o, 0, sizeof(o));
    o.endpoint = cfg->trace_otlp;
    o.sample = cfg->trace_sample;
    o.max_spans = (size_t)cfg->trace_max_spans;
    o.batch = o.max_spans < 512 ? o.max_spans : 512;
    o.flush_ms = cfg->trace_flush_ms;
    o.timeout_ms = cfg->trace_timeout_ms;
    o.service = cfg->trace_service;
    o.service_ns = cfg->trace_service_ns;
    o.instance = s->trace_instance;
    o.store = cfg->redis_cluster > 0     ? "redis-cluster"
              : cfg->redis_sentinels > 0 ? "redis-sentinel"
              : cfg->use_redis           ? "redis"
                                         : "memory";
    if ((rc = rls_tracer_start(&s->tracer, s->loop, &o, err, errlen)) != RL_OK)
        return rc;
    s->decider.tracer = &s->tracer;
    if (first == NULL)
        RLS_INFO("tracing", " endpoint=%s sample=%g service=%s instance=%s",
                 cfg->trace_otlp, cfg->trace_sample, cfg->trace_service,
                 s->trace_instance);
    return RL_OK;
}

static int start(rls_server_t *s, uv_loop_t *loop, const rls_flags_t *cfg,
                 rls_store_t *store, rls_policy_t *policy,
                 const rls_server_t *first, char *err, size_t errlen)
{
    /* The server's own handles, in the order they are opened: the first
     * nhandles of them are closed again by the unwind. */
    uv_handle_t *handles[] = {
        (uv_handle_t *)&s->tick,       (uv_handle_t *)&s->before_poll,
        (uv_handle_t *)&s->stop_timer, (uv_handle_t *)&s->sigterm,
        (uv_handle_t *)&s->sigint,
    };
    rls_decider_opts_t dopts;
    int rc, i, nhandles = 0, local = 0, decider = 0;

    memset(s, 0, sizeof(*s));
    s->first = first;
    s->hold_fd = -1;
    s->loop = loop;
    s->cfg = cfg;
    s->store = store;
    s->start_unix_ms = rl_unix_ms();
    if (policy == NULL) {
        rls_diag_t d;
        if ((rc = rls_policy_build(cfg->rules, cfg->nrules, NULL,
                                   cfg->max_rules, &policy, &d)) != RL_OK) {
            snprintf(err, errlen, "bad --rule: %s",
                     rc == RL_EINVAL ? d.msg[0] : rl_strerror(rc));
            return rc;
        }
    }
    /* Nothing to undo before the runtime holds the policy; from here
     * on, every failure goes to the one unwind at fail. */
    if (rls_runtime_init(&s->rt, policy, cfg->max_rules) != RL_OK) {
        rls_policy_unref(policy);
        snprintf(err, errlen, "out of memory");
        return RL_ENOMEM;
    }
    s->rt.inline_mode = cfg->inline_deny ? RLS_INLINE_DENY : RLS_INLINE_ALLOW;
    s->rt.max_inline_window = (uint32_t)cfg->max_inline_window;
    s->rt.max_inline_limit = cfg->max_inline_limit;
    s->rt.before_change = before_policy_change;
    s->rt.after_change = after_policy_change;
    s->rt.arg = s;
    if (cfg->fail_open == RLS_FAIL_LOCAL) {
        local = 1; /* a failed init is closed too */
        if ((rc = rls_local_init(&s->local, loop, store)) != RL_OK) {
            snprintf(err, errlen, "out of memory");
            goto fail;
        }
    }
    rls_decider_opts_init(&dopts);
    dopts.store = store;
    dopts.rt = &s->rt;
    dopts.loop = loop;
    dopts.prefix = cfg->prefix;
    dopts.prefix_len = cfg->prefix_len;
    dopts.max_reqs = RLS_BATCH_MAX;
    dopts.grace_ms = cfg->grace_ms;
    dopts.fail_open = cfg->fail_open;
    dopts.local = cfg->fail_open == RLS_FAIL_LOCAL ? &s->local : NULL;
    dopts.max_in_flight = cfg->batches_in_flight;
    dopts.hold_ns = cfg->batch_hold_us * 1000;
    /* The memory store frees a window's counters a few thousand per tick
     * (store/memory.c): its expiries need no spreading. */
    dopts.spread_ms = cfg->use_redis ? cfg->spread_ms : 0;
    dopts.refusal_cache = cfg->refusal_cache;
    /* Reservation and lease handles: signed with the operator's secret,
     * else this process's own. Never with one kept in the store: whoever
     * can read Redis could then forge handles (a settlement refunding any
     * caller's window), and whoever can write it could replace it. */
    dopts.handle_secret_file = cfg->handle_secret_file;
    dopts.handle_secret = first != NULL ? &first->decider.hkey : NULL;
    dopts.reserve_ttl_ms = cfg->reserve_ttl_ms;
    dopts.xop_timeout_ms = cfg->redis_timeout_ms;
    dopts.one_slot = cfg->redis_cluster > 0;
    /* Top offenders: the first loop makes the sketches, every loop joins. */
    if (first == NULL && cfg->top_k > 0 &&
        (s->top = rls_top_new(cfg->top_k, cfg->top_window_s)) == NULL) {
        snprintf(err, errlen, "out of memory");
        rc = RL_ENOMEM;
        goto fail;
    }
    if (first != NULL)
        s->top = first->top;
    dopts.top = rls_top_join(s->top);
    if ((rc = rls_decider_init(&s->decider, &dopts, err, errlen)) != RL_OK)
        goto fail;
    decider = 1;
    if (cfg->trace_otlp != NULL &&
        (rc = start_tracer(s, first, err, errlen)) != RL_OK)
        goto fail;
    /* Not as envoy-ratelimit (--envoy-env): the native protocol, the only
     * one with handles, is then on a loopback port of its own. */
    if (first == NULL && cfg->handle_secret_file == NULL && cfg->use_redis &&
        !cfg->envoy_env)
        RLS_WARN("no --handle-secret-file on a Redis store: reservation "
                 "and lease handles are signed with this instance's own "
                 "secret, so another instance (or this one restarted) "
                 "refuses them; give every instance the same "
                 "--handle-secret-file",
                 NULL);

    if ((rc = start_frontends(s, err, errlen)) != RL_OK)
        goto fail;
    for (i = 0; i < RLS_LISTENERS; i++)
        if (s->fe[i] != NULL) {
            s->fe[i]->on_empty = on_fe_empty;
            s->fe[i]->arg = s;
            if (i != RLS_LISTENER_NATIVE && first == NULL) /* main.c: that
                                                              one */
                RLS_INFO("listening", " listener=%s addr=%s:%d tls=%s",
                         s->fe[i]->ops->flag, s->fe[i]->host, s->fe[i]->port,
                         s->fe[i]->tls != NULL ? "on" : "off");
        }
    if (s->tls != NULL && first == NULL) {
        char desc[256];
        rls_tls_describe(s->tls, desc, sizeof(desc));
        RLS_INFO("tls certificate", " %s client_ca=%s", desc,
                 cfg->tls_client_ca != NULL ? "required" : "none");
        /* The reloaders log their own failures. Out of memory stops the
         * start, as everywhere here (with no SIGHUP handler a reload
         * would kill the process); a file that cannot be watched does
         * not: SIGHUP still reloads it. */
        if ((rc = rls_tls_reload_start(&s->tls_reload, loop, s->tls,
                                       cfg->reload_settle_ms)) == RL_ENOMEM) {
            snprintf(err, errlen, "out of memory");
            goto fail;
        }
        s->tls_reload.installed = tls_installed;
        s->tls_reload.arg = s;
    }

    if ((rc = uv_check_init(loop, &s->tick)) != 0)
        goto fail_uv;
    nhandles++;
    s->tick.data = s;
    if ((rc = uv_check_start(&s->tick, on_tick)) != 0 ||
        (rc = uv_prepare_init(loop, &s->before_poll)) != 0)
        goto fail_uv;
    nhandles++;
    s->before_poll.data = s;
    if ((rc = uv_prepare_start(&s->before_poll, on_before_poll)) != 0)
        goto fail_uv;
    if (rls_decider_hold_ns(&s->decider) != 0) {
        s->hold_fd =
            timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
        if (s->hold_fd < 0 || uv_poll_init(loop, &s->hold, s->hold_fd) != 0) {
            RLS_WARN("no timer for --batch-hold-us; batches are not held",
                     NULL);
            if (s->hold_fd >= 0)
                close(s->hold_fd);
            s->hold_fd = -1;
            rls_decider_set_hold_ns(&s->decider, 0);
        } else {
            s->hold.data = s;
            uv_poll_start(&s->hold, UV_READABLE, on_hold);
        }
    }
    if ((rc = uv_timer_init(loop, &s->stop_timer)) != 0)
        goto fail_uv;
    nhandles++;
    s->stop_timer.data = s;
    if (first != NULL)
        return RL_OK; /* the first loop has the signals and the policy */
    if ((rc = uv_signal_init(loop, &s->sigterm)) != 0)
        goto fail_uv;
    nhandles++;
    s->sigterm.data = s;
    if ((rc = uv_signal_start(&s->sigterm, on_signal, SIGTERM)) != 0 ||
        (rc = uv_signal_init(loop, &s->sigint)) != 0)
        goto fail_uv;
    nhandles++;
    s->sigint.data = s;
    if ((rc = uv_signal_start(&s->sigint, on_signal, SIGINT)) != 0)
        goto fail_uv;
    if ((rc = rls_rules_reload_start(&s->reload, loop, &s->rt, cfg->config_path,
                                     cfg->rules, cfg->nrules, cfg->max_rules,
                                     cfg->reload_settle_ms)) == RL_ENOMEM) {
        snprintf(err, errlen, "out of memory");
        goto fail;
    }
    {
        char host[64] = "localhost", inst[160];
        gethostname(host, sizeof(host) - 1);
        host[sizeof(host) - 1] = '\0';
        snprintf(inst, sizeof(inst), "%s:%d:%ld", host,
                 rls_server_port(s, RLS_LISTENER_NATIVE), (long)getpid());
        /* The last step: nothing after it fails, so the unwind never
         * has it to stop. */
        if ((rc = rls_switch_poll_start(&s->switches, loop, store, &s->rt,
                                        cfg->prefix, inst)) != RL_OK) {
            snprintf(err, errlen, "cannot poll the runtime switches: %s",
                     rl_strerror(rc));
            goto fail;
        }
        rls_top_pub_start(&s->top_pub, loop, store, s->top, cfg->prefix, inst);
        if (s->fe[RLS_LISTENER_ADMIN] != NULL)
            rls_switch_poll_set_admin(&s->switches, cfg->admin_host,
                                      s->fe[RLS_LISTENER_ADMIN]->port);
        /* --fail-local's share: the live instances the poller sees. */
        if (rls_decider_local(&s->decider) != NULL)
            s->switches.live_out = &s->local.live;
    }
    return RL_OK;

fail_uv:
    snprintf(err, errlen, "cannot start the server's loop handles: %s",
             uv_strerror(rc));
    rc = RL_EIO;
fail:
    /* One unwind, for a failure at any step: what was started stops, and
     * the handles close with the loop the caller runs after. */
    rls_rules_reload_close(&s->reload);
    for (i = nhandles - 1; i >= 0; i--)
        uv_close(handles[i], NULL);
    if (s->hold_fd >= 0)
        uv_close((uv_handle_t *)&s->hold, on_hold_closed);
    rls_tls_reload_close(&s->tls_reload);
    for (i = 0; i < RLS_LISTENERS; i++)
        if (s->fe[i] != NULL) {
            s->fe[i]->ops->free(s->fe[i]);
            s->fe[i] = NULL;
        }
    s->grpc = NULL;
    rls_envoy_reload_close(&s->envoy_reload);
    rls_statsd_close(&s->statsd);
    rls_estats_free(&s->estats);
    rls_xds_close(&s->xds);
    rls_tls_free(s->tls);
    s->tls = NULL;
    if (decider)
        rls_decider_free(&s->decider);
    rls_tracer_close(&s->tracer);
    if (local)
        rls_local_close(&s->local, NULL, NULL);
    if (first == NULL)
        rls_top_free(s->top);
    s->top = NULL;
    rls_runtime_free(&s->rt);
    return rc;
}

int rls_server_start(rls_server_t *s, uv_loop_t *loop, const rls_flags_t *cfg,
                     rls_store_t *store, rls_policy_t *policy, char *err,
                     size_t errlen)
{
    return start(s, loop, cfg, store, policy, NULL, err, errlen);
}

int rls_server_start_loop(rls_server_t *s, uv_loop_t *loop,
                          const rls_server_t *first, rls_store_t *store,
                          char *err, size_t errlen)
{
    return start(s, loop, first->cfg, store, rls_policy_ref(first->rt.policy),
                 first, err, errlen);
}

int rls_server_port(const rls_server_t *s, rls_listener_t which)
{
    return s->fe[which] != NULL && s->fe[which]->port > 0 ? s->fe[which]->port
                                                          : 0;
}

int rls_server_write_ports(const rls_server_t *s, const char *path)
{
    const rls_frontend_t *fe;
    char tmp[4096];
    FILE *f;
    int i, ok;

    if (snprintf(tmp, sizeof(tmp), "%s.%ld.tmp", path, (long)getpid()) >=
        (int)sizeof(tmp))
        return RL_EIO;
    if ((f = fopen(tmp, "w")) == NULL)
        return RL_EIO;
    for (i = 0; i < RLS_LISTENERS; i++) {
        if ((fe = s->fe[i]) == NULL || fe->port <= 0)
            continue;
        /* An IPv6 literal in brackets, as the flags take it. */
        fprintf(f,
                strchr(fe->host, ':') != NULL ? "%s [%s]:%d\n" : "%s %s:%d\n",
                fe->ops->flag, fe->host, fe->port);
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
    static _Thread_local char text[96];
    uint64_t decided, failed;

    rls_decider_share(&s->decider, uv_hrtime() / 1000000000, &decided, &failed);
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
        /* --fail-local keeps deciding, on a share of the fleet it has seen:
         * it takes work, unless it never saw the fleet (a share of 1 would
         * be the whole limit). */
        if (rls_decider_local(&s->decider) != NULL && s->local.live > 0 &&
            rls_switch_poll_ready(&s->switches)) {
            *why = "ok: store unavailable, deciding on this instance's "
                   "share (--fail-local)";
            return 1;
        }
        *why = s->store->stats.down_text[0] ? s->store->stats.down_text
                                            : "store unavailable";
        return 0;
    }
    if (s->first != NULL ? !s->sw_ready
                         : !rls_switch_poll_ready(&s->switches)) {
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

int rls_server_takes_work(const rls_server_t *s, const char **why)
{
    if (rls_server_healthy(s, why))
        return 1;
    /* --fail-open answers for a store that is down: the server still
     * takes work, as envoy-ratelimit's health check says while its Redis
     * is away. Draining, failing closed, a full memory store and a
     * failing store do not. */
    if (!s->stopping && s->store != NULL && !s->store->v->up(s->store) &&
        s->cfg->fail_open == 1) {
        *why = "ok: store unavailable, failing open (--fail-open)";
        return 1;
    }
    return 0;
}

void rls_server_free(rls_server_t *s)
{
    /* After the loop: no call is left to count. */
    rls_estats_free(&s->estats);
    rls_tls_free(s->tls);
    s->tls = NULL;
    /* The first loop's, after every other loop has stopped (main.c). */
    if (s->first == NULL)
        rls_top_free(s->top);
    s->top = NULL;
    rls_runtime_free(&s->rt);
}
