/* The server's life: start, one tick per loop iteration, graceful stop.
 *
 * Every loop iteration ends in on_tick (a uv_check handle, which runs right
 * after libuv has dispatched the iteration's I/O): connections that were
 * paused read again, the batch of requests read during the iteration goes
 * to the store in one submission, and every connection with responses gets
 * one write. With the memory store the answers of that batch are already in
 * the output buffers when the writes go out, so a request read in an
 * iteration is answered in the same iteration. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rl_error.h"
#include "rls_log.h"
#include "rls_server.h"

/* Requests per batch. Bounds one store submission (one Redis script run)
 * and the batch's memory; a busier iteration sends several batches. */
#define RLS_BATCH_MAX 1024

/* How long a stop waits for clients to act on GOAWAY (and for answers and
 * writes) before closing the connections that remain. */
#define RLS_STOP_GRACE_MIN_MS 5000

static void on_tick(uv_check_t *h)
{
    rls_server_t *s = h->data;

    rls_conn_resume(s);
    rls_batcher_flush(&s->batcher);
    rls_conn_flush(s);
    if (s->stopping && !s->draining && !s->closed &&
        rls_list_empty(&s->conns) && s->batcher.in_flight == 0)
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

static void close_all(rls_server_t *s)
{
    s->closed = 1;
    rls_batcher_free(&s->batcher);
    uv_close((uv_handle_t *)&s->tick, NULL);
    uv_close((uv_handle_t *)&s->spin, NULL);
    uv_close((uv_handle_t *)&s->sigterm, NULL);
    uv_close((uv_handle_t *)&s->sigint, NULL);
    uv_close((uv_handle_t *)&s->stop_timer, NULL);
    rls_metrics_close(s);
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
        rls_server_stop(s);
        return;
    }
    /* Answers or writes are stuck (a client not reading, say): close the
     * remaining connections; their requests' answers are dropped. */
    RLS_WARN("stop timed out; closing remaining connections", NULL);
    rls_conn_close_all(s);
}

void rls_server_stop(rls_server_t *s)
{
    uint64_t grace;

    if (s->closed)
        return;
    if (!s->stopping) {
        s->stopping = 1;
        if (s->cfg->drain_ms > 0) {
            /* Keep serving while the load balancer notices /healthz. */
            s->draining = 1;
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
                 " connections=%zu", rls_conn_goaway_all(s));
        grace = 4 * s->cfg->redis_timeout_ms;
        if (grace < RLS_STOP_GRACE_MIN_MS)
            grace = RLS_STOP_GRACE_MIN_MS;
        uv_timer_start(&s->stop_timer, on_stop_timer, grace, 0);
    }
    rls_batcher_flush(&s->batcher);
    if (rls_list_empty(&s->conns) && s->batcher.in_flight == 0)
        close_all(s);
}

int rls_server_start(rls_server_t *s, uv_loop_t *loop,
                     const rls_config_t *cfg, rls_store_t *store)
{
    int rc;

    memset(s, 0, sizeof(*s));
    s->loop = loop;
    s->cfg = cfg;
    s->store = store;
    rls_list_init(&s->conns);
    rls_list_init(&s->dirty);
    rls_list_init(&s->resume);
    rls_batcher_init(&s->batcher, store, rls_conn_respond, cfg->prefix,
                     cfg->prefix_len, RLS_BATCH_MAX, cfg->grace_ms,
                     cfg->fail_open);
    /* The memory store frees a window's counters a few thousand per tick
     * (store_memory.c): its expiries need no spreading. */
    if (cfg->use_redis)
        s->batcher.spread_ms = cfg->spread_ms;

    uv_tcp_init(loop, &s->listener);
    s->listener.data = s;
    rc = rls_listen(&s->listener, cfg->listen_host, cfg->listen_port, 511,
                    rls_conn_on_connection);
    if (rc != 0) {
        s->failed_flag = "--listen";
        uv_close((uv_handle_t *)&s->listener, NULL);
        return rc;
    }

    if (cfg->metrics_host[0] != '\0' && (rc = rls_metrics_start(s)) != 0) {
        s->failed_flag = "--metrics";
        uv_close((uv_handle_t *)&s->listener, NULL);
        return rc;
    }

    uv_check_init(loop, &s->tick);
    s->tick.data = s;
    uv_check_start(&s->tick, on_tick);
    uv_idle_init(loop, &s->spin);
    s->spin.data = s;
    uv_timer_init(loop, &s->stop_timer);
    s->stop_timer.data = s;
    uv_signal_init(loop, &s->sigterm);
    s->sigterm.data = s;
    uv_signal_start(&s->sigterm, on_signal, SIGTERM);
    uv_signal_init(loop, &s->sigint);
    s->sigint.data = s;
    uv_signal_start(&s->sigint, on_signal, SIGINT);
    return 0;
}

int rls_server_healthy(const rls_server_t *s, const char **why)
{
    if (s->stopping) {
        *why = s->draining ? "draining" : "stopping";
        return 0;
    }
    if (!s->store->v->up(s->store)) {
        *why = "store unavailable";
        return 0;
    }
    *why = "ok";
    return 1;
}

void rls_server_free(rls_server_t *s)
{
    (void)s;
}
