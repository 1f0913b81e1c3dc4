/* POST /json's JSON (server/envoy/json.c): what the reader takes and
 * refuses, as protojson.Unmarshal does for a RateLimitRequest, and the
 * bytes the writer gives for a RateLimitResponse, as protojson.Marshal
 * writes them. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "envoy/service/ratelimit/v3/rls.pb-c.h"
#include "google/protobuf/struct.pb-c.h"
#include "envoy/json.h"
#include "envoy/pbvalue.h"
#include "rl_error.h"

typedef Envoy__Service__Ratelimit__V3__RateLimitRequest req_t;
typedef Envoy__Service__Ratelimit__V3__RateLimitResponse resp_t;

static char err[256];

/* Decodes s; returns the request (to free) or NULL with err set. */
static req_t *decode(const char *s, int *rc)
{
    rl_buf_t b;
    req_t *q = NULL;

    rl_buf_init(&b, 1u << 24);
    *rc = rls_envoy_json_request(s, strlen(s), &b, err, sizeof(err));
    if (*rc == RL_OK)
        q = envoy__service__ratelimit__v3__rate_limit_request__unpack(
            NULL, rl_buf_len(&b), rl_buf_rptr(&b));
    rl_buf_free(&b);
    return q;
}

static void freeq(req_t *q)
{
    envoy__service__ratelimit__v3__rate_limit_request__free_unpacked(q, NULL);
}

static void test_takes(void **state)
{
    int rc;
    req_t *q;

    (void)state;
    q = decode(" {\"domain\": \"d\", \"hits_addend\": 3, \"descriptors\": ["
               "{\"entries\": [{\"key\": \"k\", \"value\": \"v\\u00e9\\ud83d"
               "\\ude00\\n\\/\"}, {\"key\": \"e\"}],"
               " \"limit\": {\"requestsPerUnit\": \"1e1\", \"unit\": "
               "\"MINUTE\"}, \"hitsAddend\": \"18446744073709551615\"},"
               " {\"entries\": null, \"limit\": {\"unit\": 4, "
               "\"requests_per_unit\": 5.0}, \"hits_addend\": 100e-2},"
               " {}]} \n",
               &rc);
    assert_int_equal(rc, RL_OK);
    assert_non_null(q);
    assert_string_equal(q->domain, "d");
    assert_int_equal(q->hits_addend, 3);
    assert_int_equal(q->n_descriptors, 3);
    assert_int_equal(q->descriptors[0]->n_entries, 2);
    assert_string_equal(q->descriptors[0]->entries[0]->value,
                        "v\xc3\xa9\xf0\x9f\x98\x80\n/");
    assert_string_equal(q->descriptors[0]->entries[1]->value, "");
    assert_int_equal(q->descriptors[0]->limit->requests_per_unit, 10);
    assert_int_equal(q->descriptors[0]->limit->unit, 2);
    assert_true(q->descriptors[0]->hits_addend->value == UINT64_MAX);
    assert_int_equal(q->descriptors[1]->n_entries, 0);
    assert_int_equal(q->descriptors[1]->limit->unit, 4);
    assert_int_equal(q->descriptors[1]->limit->requests_per_unit, 5);
    assert_int_equal(q->descriptors[1]->hits_addend->value, 1);
    assert_null(q->descriptors[2]->hits_addend);
    assert_null(q->descriptors[2]->limit);
    freeq(q);
}

static void test_refuses(void **state)
{
    static const struct {
        const char *in, *why;
    } bad[] = {
        {"", "empty body"},
        {"null", "expected a RateLimitRequest"},
        {"[]", "expected a RateLimitRequest"},
        {"{\"domain\":\"a\"} x", "data after the object"},
        {"{\"domain\":\"a\",}", "expected a string"},
        {"{\"domain\":1}", "expected a string"},
        {"{\"Domain\":\"a\"}", "unknown field \"Domain\""},
        {"{\"hitsAddend\":1,\"hits_addend\":1}", "duplicate field"},
        {"{\"hitsAddend\":1.5}", "expected an integer"},
        {"{\"hitsAddend\":-1}", "out of range"},
        {"{\"hitsAddend\":-0}", "out of range"},
        {"{\"hitsAddend\":+1}", "expected an integer"},
        {"{\"hitsAddend\":01}", "expected ',' or '}'"},
        {"{\"hitsAddend\":4294967296}", "out of range"},
        {"{\"hitsAddend\":\" 1\"}", "integer in the string"},
        {"{\"hitsAddend\":1e400}", "out of range"},
        {"{\"domain\":\"\\ud800\"}", "lone surrogate"},
        {"{\"domain\":\"\\udc00\"}", "lone surrogate"},
        {"{\"domain\":\"\\u0000\"}", "NUL"},
        {"{\"domain\":\"\\x\"}", "bad escape"},
        {"{\"domain\":\"\xc0\xaf\"}", "invalid UTF-8"},
        {"{\"domain\":\"\xed\xa0\x80\"}", "invalid UTF-8"},
        {"{\"domain\":\"a\nb\"}", "control character"},
        {"{\"domain\":\"a", "unterminated string"},
        {"{\"descriptors\":[null]}", "expected a descriptor object"},
        {"{\"descriptors\":[{\"limit\":{\"unit\":\"minute\"}}]}",
         "unknown unit"},
        {"{\"descriptors\":[{\"limit\":{\"unit\":2147483648}}]}",
         "enum number out of range"},
        {"{\"descriptors\":[{\"entries\":[{\"key\":\"a\",\"k\":1}]}]}",
         "unknown field"},
    };
    size_t i;
    int rc;

    (void)state;
    for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        req_t *q = decode(bad[i].in, &rc);
        if (rc != RL_EINVAL || strstr(err, bad[i].why) == NULL)
            fail_msg("case %zu (%s): rc %d, err '%s'", i, bad[i].in, rc, err);
        assert_null(q);
    }
}

/* The caps the gRPC path puts on a request, before memory for more. */
static void test_caps(void **state)
{
    size_t n = 1025 * 3 + 64, i;
    char *s = malloc(n), *p = s;
    int rc;
    req_t *q;

    (void)state;
    p += sprintf(p, "{\"descriptors\":[");
    for (i = 0; i < 1025; i++)
        p += sprintf(p, "%s{}", i ? "," : "");
    sprintf(p, "]}");
    q = decode(s, &rc);
    assert_int_equal(rc, RL_EINVAL);
    assert_non_null(strstr(err, "more than 1024 descriptors"));
    /* 1,024 is fine. */
    p = s + strlen("{\"descriptors\":[") + 1024 * 3 - 1;
    sprintf(p, "]}");
    q = decode(s, &rc);
    assert_int_equal(rc, RL_OK);
    assert_int_equal(q->n_descriptors, 1024);
    freeq(q);
    p = s + sprintf(s, "{\"descriptors\":[{\"entries\":[");
    for (i = 0; i < 33; i++)
        p += sprintf(p, "%s{}", i ? "," : "");
    sprintf(p, "]}]}");
    q = decode(s, &rc);
    assert_int_equal(rc, RL_EINVAL);
    assert_non_null(strstr(err, "more than 32 entries"));
    free(s);
}

/* The writer's bytes, as protojson writes them. */
static void test_writes(void **state)
{
    resp_t r = ENVOY__SERVICE__RATELIMIT__V3__RATE_LIMIT_RESPONSE__INIT;
    Envoy__Service__Ratelimit__V3__RateLimitResponse__DescriptorStatus ds[2],
        *dsp[2] = {&ds[0], &ds[1]};
    Envoy__Service__Ratelimit__V3__RateLimitResponse__RateLimit rl;
    Google__Protobuf__Duration du = GOOGLE__PROTOBUF__DURATION__INIT;
    Envoy__Config__Core__V3__HeaderValue h, *hp = &h;
    rls_pbv_t pb;
    Google__Protobuf__Struct *st;
    Google__Protobuf__Value *z;
    uint8_t w[1024];
    rl_buf_t out;
    size_t len;
    int code;

    (void)state;
    envoy__service__ratelimit__v3__rate_limit_response__descriptor_status__init(
        &ds[0]);
    envoy__service__ratelimit__v3__rate_limit_response__descriptor_status__init(
        &ds[1]);
    envoy__service__ratelimit__v3__rate_limit_response__rate_limit__init(&rl);
    envoy__config__core__v3__header_value__init(&h);
    rl.name = (char *)"a\"b";
    rl.requests_per_unit = 7;
    rl.unit = 3;
    du.seconds = 59;
    du.nanos = 500000000;
    ds[0].code = 2;
    ds[0].current_limit = &rl;
    ds[0].duration_until_reset = &du;
    ds[1].code = 1;
    ds[1].limit_remaining = 4;
    h.key = (char *)"RateLimit-Limit";
    h.value = (char *)"\x01";
    rls_pbv_init(&pb);
    st = rls_pbv_struct_new(&pb);
    rls_pbv_set(&pb, st, "z", z = rls_pbv_number(&pb, 0.5));
    rls_pbv_set(&pb, st, "a", rls_pbv_number(&pb, 3));
    rls_pbv_set(&pb, st, "m", rls_pbv_bool(&pb, 1));
    r.overall_code = 2;
    r.n_statuses = 2;
    r.statuses = dsp;
    r.n_response_headers_to_add = 1;
    r.response_headers_to_add = &hp;
    r.dynamic_metadata = st;
    len = envoy__service__ratelimit__v3__rate_limit_response__pack(&r, w);
    rl_buf_init(&out, 1u << 20);
    assert_int_equal(rls_envoy_json_response(w, len, &out, &code), RL_OK);
    assert_int_equal(code, 2);
    rl_buf_append(&out, "", 1);
    assert_string_equal(
        (const char *)rl_buf_rptr(&out),
        "{\"overallCode\":\"OVER_LIMIT\",\"statuses\":[{\"code\":\"OVER_LIMIT\","
        "\"currentLimit\":{\"name\":\"a\\\"b\",\"requestsPerUnit\":7,\"unit\":"
        "\"HOUR\"},\"durationUntilReset\":\"59.500s\"},{\"code\":\"OK\","
        "\"limitRemaining\":4}],\"responseHeadersToAdd\":[{\"key\":"
        "\"RateLimit-Limit\",\"value\":\"\\u0001\"}],\"dynamicMetadata\":"
        "{\"a\":3,\"m\":true,\"z\":0.5}}");
    /* protojson refuses a NaN in a Struct: so does the writer. */
    z->number_value = 0.0 / 0.0;
    len = envoy__service__ratelimit__v3__rate_limit_response__pack(&r, w);
    rl_buf_reset(&out);
    assert_int_equal(rls_envoy_json_response(w, len, &out, &code), RL_EINVAL);
    /* The empty response: an UNKNOWN code, "{}" as the reference's test
     * has it. */
    rl_buf_reset(&out);
    assert_int_equal(rls_envoy_json_response(w, 0, &out, &code), RL_OK);
    assert_int_equal(code, 0);
    assert_int_equal(rl_buf_len(&out), 2);
    assert_memory_equal(rl_buf_rptr(&out), "{}", 2);
    rl_buf_free(&out);
    rls_pbv_free(&pb);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_takes),
        cmocka_unit_test(test_refuses),
        cmocka_unit_test(test_caps),
        cmocka_unit_test(test_writes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
