/* Spans of decisions, sampled, pooled and exported; see tracer.h. */
#include "trace/tracer.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "rl_error.h"
#include "base/log.h"
#include "base/prom.h"
#include "trace/otlp.h"

/* An export's request holds batch spans of at most ~300 bytes each. */
#define SPAN_WIRE_MAX 512

static uint64_t rng_next(uint64_t s[2])
{
    uint64_t a = s[0], b = s[1];

    s[0] = b;
    a ^= a << 23;
    s[1] = a ^ b ^ (a >> 17) ^ (b >> 26);
    return s[1] + b;
}

static void put64(uint8_t *p, uint64_t v)
{
    int i;

    for (i = 7; i >= 0; i--) {
        p[i] = (uint8_t)v;
        v >>= 8;
    }
}

static uint64_t unix_now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void on_timer(uv_timer_t *h)
{
    rls_tracer_flush(h->data);
}

int rls_tracer_start(rls_tracer_t *t, uv_loop_t *loop,
                     const rls_trace_opts_t *o, char *err, size_t errlen)
{
    size_t i;
    int rc;

    memset(t, 0, sizeof(*t));
    t->loop = loop;
    t->o = *o;
    /* OpenTelemetry's TraceIDRatioBased: a trace is sampled when the low
     * 63 bits of its id's last 8 bytes are under ratio * 2^63. */
    if (o->sample >= 1)
        t->ratio_bound = UINT64_MAX;
    else if (o->sample > 0)
        t->ratio_bound = (uint64_t)(o->sample * 9223372036854775808.0);
    if (uv_random(NULL, NULL, t->rng, sizeof(t->rng), 0, NULL) != 0 ||
        (t->rng[0] | t->rng[1]) == 0) {
        t->rng[0] = unix_now_ns() | 1;
        t->rng[1] = (uint64_t)(uintptr_t)t ^ uv_hrtime();
    }
    t->epoch_off_ns = (int64_t)(unix_now_ns() - uv_hrtime());
    if ((t->spans = calloc(o->max_spans, sizeof(*t->spans))) == NULL) {
        snprintf(err, errlen, "out of memory");
        return RL_ENOMEM;
    }
    for (i = 0; i < o->max_spans; i++) {
        t->spans[i].t = t;
        t->spans[i].next = i + 1 < o->max_spans ? &t->spans[i + 1] : NULL;
    }
    t->free = &t->spans[0];
    rl_buf_init(&t->body, o->batch * SPAN_WIRE_MAX + 4096);
    if ((rc = rls_otlp_http_init(&t->http, loop, o->endpoint, o->timeout_ms,
                                 err, errlen)) != RL_OK)
        goto fail;
    if (uv_timer_init(loop, &t->timer) != 0) {
        rls_otlp_http_close(&t->http);
        snprintf(err, errlen, "trace exporter: cannot start its timer");
        rc = RL_EIO;
        goto fail;
    }
    t->timer.data = t;
    uv_timer_start(&t->timer, on_timer, o->flush_ms, o->flush_ms);
    t->started = 1;
    return RL_OK;
fail:
    free(t->spans);
    t->spans = NULL;
    return rc;
}

rls_span_t *rls_trace_begin(rls_tracer_t *t, const rls_traceparent_t *parent,
                            const char *name, size_t len)
{
    rls_span_t *sp;
    uint64_t lo = 0;

    if (parent != NULL && parent->valid) {
        if (!(parent->flags & RLS_TRACE_FLAG_SAMPLED))
            return NULL;
    } else {
        if (t->ratio_bound == 0)
            return NULL;
        lo = rng_next(t->rng);
        if (t->ratio_bound != UINT64_MAX && (lo >> 1) >= t->ratio_bound)
            return NULL;
    }
    t->stats.sampled++;
    if ((sp = t->free) == NULL) {
        t->stats.dropped_full++;
        return NULL;
    }
    t->free = sp->next;
    sp->next = NULL;
    if (parent != NULL && parent->valid) {
        memcpy(sp->trace_id, parent->trace_id, 16);
        memcpy(sp->parent_id, parent->span_id, 8);
        sp->has_parent = 1;
    } else {
        put64(sp->trace_id, rng_next(t->rng));
        put64(sp->trace_id + 8, lo);
        sp->has_parent = 0;
    }
    {
        uint64_t id;
        do /* an all-zero span id is invalid */
            id = rng_next(t->rng);
        while (id == 0);
        put64(sp->span_id, id);
    }
    if (len > RLS_SPAN_NAME_MAX)
        len = RLS_SPAN_NAME_MAX;
    if (len > 0)
        memcpy(sp->name, name, len);
    sp->name[len] = '\0';
    sp->name_len = (uint8_t)len;
    sp->err = 0;
    sp->outcome = RLS_TRACE_OUT_OK;
    sp->start_ns = uv_hrtime() + (uint64_t)t->epoch_off_ns;
    return sp;
}

/* The span's end: it joins the export queue; a full batch is exported at
 * once (from the timer, on this loop's next turn, not from here). */
static void end(rls_tracer_t *t, rls_span_t *sp)
{
    sp->end_ns = uv_hrtime() + (uint64_t)t->epoch_off_ns;
    sp->respond = NULL;
    sp->owner = NULL;
    sp->next = NULL;
    if (t->tail != NULL)
        t->tail->next = sp;
    else
        t->head = sp;
    t->tail = sp;
    if (++t->queued == t->o.batch && t->in_flight == 0 && !t->closing)
        uv_timer_start(&t->timer, on_timer, 0, t->o.flush_ms);
}

void rls_trace_respond(void *span, const rl_result_t *r)
{
    rls_span_t *sp = span;
    rls_trace_respond_fn respond = sp->respond;
    void *owner = sp->owner;

    sp->outcome = r->failed_open                  ? RLS_TRACE_OUT_FAILED_OPEN
                  : r->shadow_refused             ? RLS_TRACE_OUT_SHADOW_REFUSED
                  : r->code == RL_CODE_OK         ? RLS_TRACE_OUT_OK
                  : r->code == RL_CODE_OVER_LIMIT ? RLS_TRACE_OUT_OVER_LIMIT
                                                  : RLS_TRACE_OUT_ERROR;
    end(sp->t, sp);
    respond(owner, r);
}

void rls_trace_refused(rls_tracer_t *t, rls_span_t *sp, int err)
{
    sp->outcome = RLS_TRACE_OUT_REFUSED;
    sp->err = (int8_t)err;
    end(t, sp);
}

/* Puts the first n queued spans back on the free list. */
static void release(rls_tracer_t *t, size_t n)
{
    while (n-- > 0 && t->head != NULL) {
        rls_span_t *sp = t->head;
        t->head = sp->next;
        if (t->head == NULL)
            t->tail = NULL;
        sp->next = t->free;
        t->free = sp;
        t->queued--;
    }
}

static void on_exported(void *arg, int status)
{
    rls_tracer_t *t = arg;
    size_t n = t->in_flight;

    t->in_flight = 0;
    rl_buf_reset(&t->body);
    if (status >= 200 && status < 300) {
        t->stats.exported += n;
        t->stats.exports_ok++;
    } else {
        t->stats.dropped_export += n;
        t->stats.exports_failed++;
        RLS_DEBUG("trace export failed", " status=%d spans=%zu", status, n);
    }
    /* More than a batch waits: the next goes now. */
    if (!t->closing && t->queued >= t->o.batch)
        uv_timer_start(&t->timer, on_timer, 0, t->o.flush_ms);
}

void rls_tracer_flush(rls_tracer_t *t)
{
    size_t n;

    if (!t->started || t->closing || t->in_flight > 0 || t->queued == 0)
        return;
    n = t->queued < t->o.batch ? t->queued : t->o.batch;
    rl_buf_reset(&t->body);
    if (rls_otlp_encode(&t->o, t->head, n, &t->body) != RL_OK) {
        t->stats.dropped_export += n;
        t->stats.exports_failed++;
        release(t, n);
        return;
    }
    /* The spans are in the request now: back to the pool. */
    release(t, n);
    if (rls_otlp_http_post(&t->http, rl_buf_rptr(&t->body),
                           rl_buf_len(&t->body), on_exported, t) != RL_OK) {
        /* The last connection is still closing: these go with it. */
        t->stats.dropped_export += n;
        t->stats.exports_failed++;
        return;
    }
    t->in_flight = n;
}

void rls_tracer_close(rls_tracer_t *t)
{
    if (!t->started || t->closing)
        return;
    t->closing = 1;
    uv_close((uv_handle_t *)&t->timer, NULL);
    rls_otlp_http_close(&t->http); /* an export in flight: on_exported */
    t->stats.dropped_stopped += t->queued;
    release(t, t->queued);
    rl_buf_free(&t->body);
    free(t->spans);
    t->spans = NULL;
    t->free = NULL;
}

int rls_tracer_metrics(const rls_tracer_t *t, rl_buf_t *out)
{
    static const char dropped[] = "rl_trace_spans_dropped_total";
    static const char exports[] = "rl_trace_exports_total";
    const rls_trace_stats_t *s;
    int rc;

    if (t == NULL)
        return RL_OK;
    s = &t->stats;
    if ((rc = rls_prom_counter(out, "rl_trace_spans_sampled_total",
                               "Decisions sampled for a span "
                               "(--trace-sample, or their traceparent).",
                               s->sampled)) != RL_OK ||
        (rc = rls_prom_counter(out, "rl_trace_spans_exported_total",
                               "Spans the collector took (--trace-otlp).",
                               s->exported)) != RL_OK ||
        (rc = rls_prom_family(out, dropped, "counter",
                              "Spans sampled and not exported: no room "
                              "(--trace-max-spans), in an export that "
                              "failed, or waiting at the stop.")) != RL_OK ||
        (rc = rls_prom_sample(out, dropped, "reason", "queue_full",
                              s->dropped_full)) != RL_OK ||
        (rc = rls_prom_sample(out, dropped, "reason", "export_failed",
                              s->dropped_export)) != RL_OK ||
        (rc = rls_prom_sample(out, dropped, "reason", "stopped",
                              s->dropped_stopped)) != RL_OK ||
        (rc = rls_prom_family(out, exports, "counter",
                              "OTLP exports, by result (failed: refused, "
                              "unreachable or past --trace-timeout-ms).")) !=
            RL_OK ||
        (rc = rls_prom_sample(out, exports, "result", "ok", s->exports_ok)) !=
            RL_OK ||
        (rc = rls_prom_sample(out, exports, "result", "failed",
                              s->exports_failed)) != RL_OK)
        return rc;
    return rls_prom_gauge(out, "rl_trace_spans_queued",
                          "Spans ended and waiting for export.",
                          (uint64_t)t->queued);
}
