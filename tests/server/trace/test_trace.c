/* server/trace/: the traceparent parser, the endpoint's URL, the tracer's
 * sampling and bound, and the OTLP request it encodes. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "opentelemetry/proto/collector/trace/v1/trace_service.pb-c.h"
#include "rl_error.h"
#include "trace/otlp.h"
#include "trace/otlp_http.h"
#include "trace/traceparent.h"
#include "trace/tracer.h"

#define TID "4bf92f3577b34da6a3ce929d0e0e4736"
#define SID "00f067aa0ba902b7"
#define GOOD "00-" TID "-" SID "-01"

static int parses(const char *s)
{
    rls_traceparent_t tp;
    int rc = rls_traceparent_parse(s, strlen(s), &tp);

    if (rc != RL_OK) {
        static const rls_traceparent_t zero;
        assert_memory_equal(&tp, &zero, sizeof(tp)); /* cleared */
        return 0;
    }
    assert_int_equal(tp.valid, 1);
    return 1;
}

static void test_valid(void **state)
{
    static const uint8_t tid[16] = {0x4b, 0xf9, 0x2f, 0x35, 0x77, 0xb3,
                                    0x4d, 0xa6, 0xa3, 0xce, 0x92, 0x9d,
                                    0x0e, 0x0e, 0x47, 0x36};
    static const uint8_t sid[8] = {0x00, 0xf0, 0x67, 0xaa,
                                   0x0b, 0xa9, 0x02, 0xb7};
    rls_traceparent_t tp;

    (void)state;
    assert_int_equal(rls_traceparent_parse(GOOD, strlen(GOOD), &tp), RL_OK);
    assert_int_equal(tp.valid, 1);
    assert_memory_equal(tp.trace_id, tid, 16);
    assert_memory_equal(tp.span_id, sid, 8);
    assert_int_equal(tp.flags, RLS_TRACE_FLAG_SAMPLED);
    assert_true(parses("00-" TID "-" SID "-00")); /* not sampled: valid */
    assert_true(parses("00-" TID "-" SID "-09")); /* other flags kept */
    assert_true(parses(" \t" GOOD "\t "));        /* a field value's spaces */
    /* A version this parser does not know: its first 55 bytes, and more
     * after a '-'. */
    assert_true(parses("cc-" TID "-" SID "-01"));
    assert_true(parses("cc-" TID "-" SID "-01-what-the-future-holds"));
    assert_true(parses("fe-" TID "-" SID "-01-"));
    /* The length given, not the NUL: bytes past it are not read. */
    assert_int_equal(rls_traceparent_parse(GOOD "-x", 55, &tp), RL_OK);
}

static void test_malformed(void **state)
{
    char s[80];
    size_t i;

    (void)state;
    assert_false(parses(""));
    assert_false(parses("   "));
    assert_false(parses("ff-" TID "-" SID "-01")); /* version ff */
    assert_false(parses("00-00000000000000000000000000000000-" SID "-01"));
    assert_false(parses("00-" TID "-0000000000000000-01"));
    /* Uppercase hex is not hex here. */
    assert_false(parses("00-4BF92F3577B34DA6A3CE929D0E0E4736-" SID "-01"));
    assert_false(parses("00-" TID "-00F067AA0BA902B7-01"));
    assert_false(parses("0A-" TID "-" SID "-01"));
    assert_false(parses("00-" TID "-" SID "-0A"));
    /* Wrong lengths: each field one short and one long, the whole. */
    assert_false(parses("0-" TID "-" SID "-01"));
    assert_false(parses("000-" TID "-" SID "-01"));
    assert_false(parses("00-" TID "0-" SID "-01"));
    assert_false(parses("00-4bf92f3577b34da6a3ce929d0e0e473-" SID "-01"));
    assert_false(parses("00-" TID "-" SID "0-01"));
    assert_false(parses("00-" TID "-00f067aa0ba902b-01"));
    assert_false(parses("00-" TID "-" SID "-1"));
    assert_false(parses("00-" TID "-" SID "-011"));
    assert_false(parses("00-" TID "-" SID "-01-")); /* 00 is 55 bytes */
    assert_false(parses("00-" TID "-" SID "-01-extra"));
    assert_false(parses("cc-" TID "-" SID "-01x")); /* not after a '-' */
    /* Other delimiters. */
    assert_false(parses("00_" TID "-" SID "-01"));
    assert_false(parses("00-" TID "_" SID "-01"));
    assert_false(parses("00-" TID "-" SID "_01"));
    assert_false(parses("00 " TID " " SID " 01"));
    /* Every hex digit replaced by a byte that is not one. */
    for (i = 0; i < 55; i++) {
        static const char bad[] = "gG -z\x01\xff";
        size_t k;
        if (i == 2 || i == 35 || i == 52)
            continue;
        for (k = 0; k < sizeof(bad) - 1; k++) {
            snprintf(s, sizeof(s), "%s", GOOD);
            s[i] = bad[k];
            assert_false(parses(s));
        }
    }
    /* Spaces inside are not trimmed. */
    assert_false(parses("00-" TID " -" SID "-01"));
}

static void test_take(void **state)
{
    rls_traceparent_t tp;
    unsigned seen = 0;

    (void)state;
    memset(&tp, 0, sizeof(tp));
    rls_traceparent_take(&tp, &seen, GOOD, strlen(GOOD));
    assert_int_equal(tp.valid, 1);
    /* Two traceparent fields: neither is trusted. */
    rls_traceparent_take(&tp, &seen, GOOD, strlen(GOOD));
    assert_int_equal(tp.valid, 0);
    assert_int_equal(seen, 2);
    rls_traceparent_take(&tp, &seen, GOOD, strlen(GOOD));
    assert_int_equal(tp.valid, 0);
}

static void test_url(void **state)
{
    char host[256], port[8], path[513], err[160];

    (void)state;
#define URL(u)                                                                 \
    rls_otlp_url_parse(u, host, sizeof(host), port, sizeof(port), path,        \
                       sizeof(path), err, sizeof(err))
    assert_int_equal(URL("http://collector"), RL_OK);
    assert_string_equal(host, "collector");
    assert_string_equal(port, "4318");
    assert_string_equal(path, "/v1/traces");
    assert_int_equal(URL("http://127.0.0.1:55681/"), RL_OK);
    assert_string_equal(port, "55681");
    assert_string_equal(path, "/v1/traces");
    assert_int_equal(URL("http://[::1]:4318/otlp/v1/traces"), RL_OK);
    assert_string_equal(host, "::1");
    assert_string_equal(path, "/otlp/v1/traces");
    assert_int_equal(URL("https://collector:4318"), RL_EINVAL);
    assert_non_null(strstr(err, "https"));
    assert_int_equal(URL("collector:4318"), RL_EINVAL);
    assert_int_equal(URL("http://"), RL_EINVAL);
    assert_int_equal(URL("http://c:0"), RL_EINVAL);
    assert_int_equal(URL("http://c:65536"), RL_EINVAL);
    assert_int_equal(URL("http://c:x"), RL_EINVAL);
    assert_int_equal(URL("http://[::1"), RL_EINVAL);
    assert_int_equal(URL("http://c/a b"), RL_EINVAL);
#undef URL
}

static int answered;
static rl_result_t last;

static void on_answer(void *owner, const rl_result_t *r)
{
    (void)owner;
    answered++;
    last = *r;
}

static void start(rls_tracer_t *t, uv_loop_t *loop, double sample,
                  size_t max_spans)
{
    rls_trace_opts_t o;
    char err[160];

    memset(&o, 0, sizeof(o));
    o.endpoint = "http://127.0.0.1:1/v1/traces";
    o.sample = sample;
    o.max_spans = max_spans;
    o.batch = max_spans;
    o.flush_ms = 60000;
    o.timeout_ms = 1000;
    o.service = "svc";
    o.service_ns = "ns";
    o.instance = "inst";
    o.store = "memory";
    assert_int_equal(rls_tracer_start(t, loop, &o, err, sizeof(err)), RL_OK);
}

static void stop(rls_tracer_t *t, uv_loop_t *loop)
{
    rls_tracer_close(t);
    uv_run(loop, UV_RUN_DEFAULT);
    assert_int_equal(uv_loop_close(loop), 0);
}

static void test_sampling(void **state)
{
    uv_loop_t loop;
    rls_tracer_t t;
    rls_traceparent_t on, off;
    rls_span_t *sp;
    int i, n;

    (void)state;
    assert_int_equal(rls_traceparent_parse(GOOD, strlen(GOOD), &on), RL_OK);
    assert_int_equal(rls_traceparent_parse("00-" TID "-" SID "-00", 55, &off),
                     RL_OK);
    uv_loop_init(&loop);
    /* Ratio 0: roots are not sampled, a sampled parent is, an unsampled
     * one is not. */
    start(&t, &loop, 0, 16);
    assert_null(rls_trace_begin(&t, NULL, "r", 1));
    assert_null(rls_trace_begin(&t, &off, "r", 1));
    assert_int_equal(t.stats.sampled, 0);
    sp = rls_trace_begin(&t, &on, "rule", 4);
    assert_non_null(sp);
    assert_memory_equal(sp->trace_id, on.trace_id, 16);
    assert_memory_equal(sp->parent_id, on.span_id, 8);
    assert_int_equal(sp->has_parent, 1);
    assert_string_equal(sp->name, "rule");
    rls_trace_refused(&t, sp, RL_ENORULE);
    assert_int_equal(t.queued, 1);
    stop(&t, &loop);
    assert_int_equal(t.stats.dropped_stopped, 1);

    /* Ratio 1: every root, an unsampled parent still not. */
    uv_loop_init(&loop);
    start(&t, &loop, 1, 4);
    for (i = 0; i < 4; i++) {
        sp = rls_trace_begin(&t, NULL, NULL, 0);
        assert_non_null(sp);
        assert_int_equal(sp->has_parent, 0);
        sp->respond = on_answer;
        rls_trace_respond(sp, &last);
    }
    assert_null(rls_trace_begin(&t, &off, "r", 1));
    /* The pool (4) is full of spans waiting: the next is dropped, counted. */
    assert_null(rls_trace_begin(&t, NULL, "r", 1));
    assert_int_equal(t.stats.sampled, 5);
    assert_int_equal(t.stats.dropped_full, 1);
    assert_int_equal(answered, 4); /* every answer passed on */
    stop(&t, &loop);

    /* A ratio: about that share of roots, by their trace ids. */
    uv_loop_init(&loop);
    start(&t, &loop, 0.25, 1);
    for (i = 0, n = 0; i < 40000; i++) {
        if ((sp = rls_trace_begin(&t, NULL, "r", 1)) != NULL) {
            uint64_t lo = 0;
            int k;
            for (k = 8; k < 16; k++)
                lo = lo << 8 | sp->trace_id[k];
            assert_true((lo >> 1) < (uint64_t)(0.25 * 9223372036854775808.0));
            n++;
            rls_trace_refused(&t, sp, RL_EINVAL);
            /* back to the pool, as an export would */
            t.head = t.tail = NULL;
            t.queued = 0;
            sp->next = NULL;
            t.free = sp;
        }
    }
    assert_true(n > 9000 && n < 11000);
    stop(&t, &loop);
}

static void test_encode(void **state)
{
    typedef Opentelemetry__Proto__Collector__Trace__V1__ExportTraceServiceRequest
        req_t;
    uv_loop_t loop;
    rls_tracer_t t;
    rls_traceparent_t on;
    rls_span_t *a, *b;
    rl_result_t r;
    rl_buf_t out;
    req_t *q;
    size_t i;

    (void)state;
    assert_int_equal(rls_traceparent_parse(GOOD, strlen(GOOD), &on), RL_OK);
    uv_loop_init(&loop);
    start(&t, &loop, 1, 8);
    a = rls_trace_begin(&t, &on, "api", 3);
    a->respond = on_answer;
    memset(&r, 0, sizeof(r));
    r.code = RL_CODE_OVER_LIMIT;
    rls_trace_respond(a, &r);
    b = rls_trace_begin(&t, NULL, NULL, 0);
    rls_trace_refused(&t, b, RL_ENORULE);
    rl_buf_init(&out, 1 << 20);
    assert_int_equal(rls_otlp_encode(&t.o, t.head, 2, &out), RL_OK);
    q = opentelemetry__proto__collector__trace__v1__export_trace_service_request__unpack(
        NULL, rl_buf_len(&out), rl_buf_rptr(&out));
    assert_non_null(q);
    assert_int_equal(q->n_resource_spans, 1);
    {
        Opentelemetry__Proto__Trace__V1__ResourceSpans *rs =
            q->resource_spans[0];
        Opentelemetry__Proto__Trace__V1__Span *s0, *s1;
        int seen = 0;

        assert_int_equal(rs->resource->n_attributes, 3);
        assert_string_equal(rs->resource->attributes[0]->key, "service.name");
        assert_string_equal(rs->resource->attributes[0]->value->string_value,
                            "svc");
        assert_int_equal(rs->n_scope_spans, 1);
        assert_string_equal(rs->scope_spans[0]->scope->name, "rl-server");
        assert_int_equal(rs->scope_spans[0]->n_spans, 2);
        s0 = rs->scope_spans[0]->spans[0];
        s1 = rs->scope_spans[0]->spans[1];
        assert_string_equal(s0->name, "ratelimit.decision");
        assert_int_equal(s0->trace_id.len, 16);
        assert_memory_equal(s0->trace_id.data, on.trace_id, 16);
        assert_int_equal(s0->parent_span_id.len, 8);
        assert_memory_equal(s0->parent_span_id.data, on.span_id, 8);
        assert_true(s0->end_time_unix_nano >= s0->start_time_unix_nano);
        for (i = 0; i < s0->n_attributes; i++) {
            const char *k = s0->attributes[i]->key;
            const char *v = s0->attributes[i]->value->string_value;
            if (strcmp(k, "ratelimit.rule") == 0)
                seen += strcmp(v, "api") == 0;
            else if (strcmp(k, "ratelimit.outcome") == 0)
                seen += strcmp(v, "over_limit") == 0;
            else if (strcmp(k, "ratelimit.store") == 0)
                seen += strcmp(v, "memory") == 0;
        }
        assert_int_equal(seen, 3);
        assert_int_equal(s1->parent_span_id.len, 0); /* a root */
        assert_int_equal(
            s1->status->code,
            OPENTELEMETRY__PROTO__TRACE__V1__STATUS__STATUS_CODE__STATUS_CODE_ERROR);
        assert_string_equal(s1->status->message, rl_strerror(RL_ENORULE));
    }
    opentelemetry__proto__collector__trace__v1__export_trace_service_request__free_unpacked(
        q, NULL);
    rl_buf_free(&out);
    stop(&t, &loop);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_valid),    cmocka_unit_test(test_malformed),
        cmocka_unit_test(test_take),     cmocka_unit_test(test_url),
        cmocka_unit_test(test_sampling), cmocka_unit_test(test_encode),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
