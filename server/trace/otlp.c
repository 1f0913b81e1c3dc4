/* Spans as an OTLP ExportTraceServiceRequest; see otlp.h. */
#include "trace/otlp.h"

#include <stdlib.h>
#include <string.h>

#include "opentelemetry/proto/collector/trace/v1/trace_service.pb-c.h"
#include "rl_error.h"
#include "trace/traceparent.h"
#include "version.h"

typedef Opentelemetry__Proto__Common__V1__KeyValue kv_t;
typedef Opentelemetry__Proto__Common__V1__AnyValue av_t;
typedef Opentelemetry__Proto__Trace__V1__Span span_t;
typedef Opentelemetry__Proto__Trace__V1__Status status_t;

/* Attributes per span: rule, outcome, store, latency. */
#define SPAN_ATTRS 4
#define RES_ATTRS 3

static void str_kv(kv_t *kv, av_t *av, const char *key, const char *val)
{
    opentelemetry__proto__common__v1__key_value__init(kv);
    opentelemetry__proto__common__v1__any_value__init(av);
    av->value_case =
        OPENTELEMETRY__PROTO__COMMON__V1__ANY_VALUE__VALUE_STRING_VALUE;
    av->string_value = (char *)(uintptr_t)val;
    kv->key = (char *)(uintptr_t)key;
    kv->value = av;
}

static void int_kv(kv_t *kv, av_t *av, const char *key, int64_t val)
{
    opentelemetry__proto__common__v1__key_value__init(kv);
    opentelemetry__proto__common__v1__any_value__init(av);
    av->value_case =
        OPENTELEMETRY__PROTO__COMMON__V1__ANY_VALUE__VALUE_INT_VALUE;
    av->int_value = val;
    kv->key = (char *)(uintptr_t)key;
    kv->value = av;
}

/* Everything one request points into, allocated at once. */
typedef struct {
    span_t *spans;
    span_t **span_ptrs;
    kv_t *kvs;
    kv_t **kv_ptrs;
    av_t *avs;
    status_t *status;
} arena_t;

static void arena_free(arena_t *a)
{
    free(a->spans);
    free(a->span_ptrs);
    free(a->kvs);
    free(a->kv_ptrs);
    free(a->avs);
    free(a->status);
}

static int arena_alloc(arena_t *a, size_t n)
{
    size_t nkv = n * SPAN_ATTRS;

    memset(a, 0, sizeof(*a));
    a->spans = calloc(n, sizeof(*a->spans));
    a->span_ptrs = calloc(n, sizeof(*a->span_ptrs));
    a->kvs = calloc(nkv, sizeof(*a->kvs));
    a->kv_ptrs = calloc(nkv, sizeof(*a->kv_ptrs));
    a->avs = calloc(nkv, sizeof(*a->avs));
    a->status = calloc(n, sizeof(*a->status));
    if (a->spans == NULL || a->span_ptrs == NULL || a->kvs == NULL ||
        a->kv_ptrs == NULL || a->avs == NULL || a->status == NULL) {
        arena_free(a);
        return RL_ENOMEM;
    }
    return RL_OK;
}

static void fill_span(span_t *s, kv_t *kv, kv_t **kvp, av_t *av, status_t *st,
                      const rls_span_t *sp, const char *store)
{
    size_t i;

    opentelemetry__proto__trace__v1__span__init(s);
    s->trace_id.data = (uint8_t *)(uintptr_t)sp->trace_id;
    s->trace_id.len = 16;
    s->span_id.data = (uint8_t *)(uintptr_t)sp->span_id;
    s->span_id.len = 8;
    if (sp->has_parent) {
        s->parent_span_id.data = (uint8_t *)(uintptr_t)sp->parent_id;
        s->parent_span_id.len = 8;
        /* The parent is remote (trace.proto's SPAN_FLAGS_CONTEXT_*: the
         * has-is-remote bit and the is-remote bit), sampled. */
        s->flags = 0x100 | 0x200 | RLS_TRACE_FLAG_SAMPLED;
    } else {
        s->flags = 0x100 | RLS_TRACE_FLAG_SAMPLED;
    }
    s->name = "ratelimit.decision";
    s->kind =
        OPENTELEMETRY__PROTO__TRACE__V1__SPAN__SPAN_KIND__SPAN_KIND_SERVER;
    s->start_time_unix_nano = sp->start_ns;
    s->end_time_unix_nano = sp->end_ns;
    str_kv(&kv[0], &av[0], "ratelimit.rule", sp->name);
    str_kv(&kv[1], &av[1], "ratelimit.outcome",
           rls_trace_outcome_name(sp->outcome));
    str_kv(&kv[2], &av[2], "ratelimit.store", store);
    int_kv(&kv[3], &av[3], "ratelimit.latency_us",
           (int64_t)((sp->end_ns - sp->start_ns) / 1000));
    for (i = 0; i < SPAN_ATTRS; i++)
        kvp[i] = &kv[i];
    s->n_attributes = SPAN_ATTRS;
    s->attributes = kvp;
    opentelemetry__proto__trace__v1__status__init(st);
    if (sp->outcome == RLS_TRACE_OUT_ERROR ||
        sp->outcome == RLS_TRACE_OUT_REFUSED) {
        st->code =
            OPENTELEMETRY__PROTO__TRACE__V1__STATUS__STATUS_CODE__STATUS_CODE_ERROR;
        st->message = (char *)(uintptr_t)(sp->outcome == RLS_TRACE_OUT_REFUSED
                                              ? rl_strerror(sp->err)
                                              : "answered ERROR");
    }
    s->status = st;
}

int rls_otlp_encode(const rls_trace_opts_t *o, const rls_span_t *first,
                    size_t n, rl_buf_t *out)
{
    Opentelemetry__Proto__Collector__Trace__V1__ExportTraceServiceRequest req;
    Opentelemetry__Proto__Trace__V1__ResourceSpans rs, *rsp = &rs;
    Opentelemetry__Proto__Trace__V1__ScopeSpans ss, *ssp = &ss;
    Opentelemetry__Proto__Resource__V1__Resource res;
    Opentelemetry__Proto__Common__V1__InstrumentationScope scope;
    kv_t rkv[RES_ATTRS], *rkvp[RES_ATTRS];
    av_t rav[RES_ATTRS];
    size_t nres = 0, i, len;
    const rls_span_t *sp;
    arena_t a;
    uint8_t *w;
    int rc;

    if (n == 0)
        return RL_OK;
    if (arena_alloc(&a, n) != RL_OK)
        return RL_ENOMEM;
    str_kv(&rkv[nres], &rav[nres], "service.name",
           o->service != NULL ? o->service : "rl-server");
    nres++;
    if (o->service_ns != NULL && o->service_ns[0] != '\0') {
        str_kv(&rkv[nres], &rav[nres], "service.namespace", o->service_ns);
        nres++;
    }
    if (o->instance != NULL && o->instance[0] != '\0') {
        str_kv(&rkv[nres], &rav[nres], "service.instance.id", o->instance);
        nres++;
    }
    for (i = 0; i < nres; i++)
        rkvp[i] = &rkv[i];
    opentelemetry__proto__resource__v1__resource__init(&res);
    res.n_attributes = nres;
    res.attributes = rkvp;
    opentelemetry__proto__common__v1__instrumentation_scope__init(&scope);
    scope.name = "rl-server";
    scope.version = RLS_VERSION;
    for (i = 0, sp = first; i < n && sp != NULL; i++, sp = sp->next) {
        fill_span(&a.spans[i], &a.kvs[i * SPAN_ATTRS],
                  &a.kv_ptrs[i * SPAN_ATTRS], &a.avs[i * SPAN_ATTRS],
                  &a.status[i], sp, o->store != NULL ? o->store : "");
        a.span_ptrs[i] = &a.spans[i];
    }
    opentelemetry__proto__trace__v1__scope_spans__init(&ss);
    ss.scope = &scope;
    ss.n_spans = i;
    ss.spans = a.span_ptrs;
    opentelemetry__proto__trace__v1__resource_spans__init(&rs);
    rs.resource = &res;
    rs.n_scope_spans = 1;
    rs.scope_spans = &ssp;
    opentelemetry__proto__collector__trace__v1__export_trace_service_request__init(
        &req);
    req.n_resource_spans = 1;
    req.resource_spans = &rsp;
    len =
        opentelemetry__proto__collector__trace__v1__export_trace_service_request__get_packed_size(
            &req);
    if ((rc = rl_buf_reserve(out, len, &w)) == RL_OK) {
        opentelemetry__proto__collector__trace__v1__export_trace_service_request__pack(
            &req, w);
        rl_buf_commit(out, len);
    }
    arena_free(&a);
    return rc;
}
