/* Envoy's rate limit service (envoy/rls.c) fed RateLimitRequest bytes,
 * packed with protobuf-c, through the decider (core/decide.h) on the
 * memory store at a scripted time; the RateLimitResponse it encodes is
 * unpacked and its codes, limits and remaining counts asserted. No HTTP/2
 * here: the transport (envoy/grpc.c) has tests of its own. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <uv.h>

#include "envoy/service/ratelimit/v3/rls.pb-c.h"
#include "core/decide.h"
#include "envoy/conf.h"
#include "envoy/rls.h"
#include "policy/rules.h"
#include "policy/runtime.h"
#include "rl_buf.h"
#include "rl_error.h"
#include "decider_fx.h"

typedef Envoy__Service__Ratelimit__V3__RateLimitRequest req_t;
typedef Envoy__Service__Ratelimit__V3__RateLimitResponse resp_t;
typedef Envoy__Service__Ratelimit__V3__RateLimitResponse__DescriptorStatus
    status_t;
typedef Envoy__Extensions__Common__Ratelimit__V3__RateLimitDescriptor desc_t;
typedef Envoy__Extensions__Common__Ratelimit__V3__RateLimitDescriptor__Entry
    entry_t;

#define OK ENVOY__SERVICE__RATELIMIT__V3__RATE_LIMIT_RESPONSE__CODE__OK
#define OVER                                                                   \
    ENVOY__SERVICE__RATELIMIT__V3__RATE_LIMIT_RESPONSE__CODE__OVER_LIMIT
#define SECOND                                                                 \
    ENVOY__SERVICE__RATELIMIT__V3__RATE_LIMIT_RESPONSE__RATE_LIMIT__UNIT__SECOND
#define MINUTE                                                                 \
    ENVOY__SERVICE__RATELIMIT__V3__RATE_LIMIT_RESPONSE__RATE_LIMIT__UNIT__MINUTE

/* An hour boundary, and 250 ms past it. */
#define B UINT64_C(1700002800000)

/* ---- the harness ---- */

static const char conf_yaml[] = "domain: d\n"
                                "descriptors:\n"
                                "  - key: a\n"
                                "    rate_limit: {unit: second, "
                                "requests_per_unit: 3}\n"
                                "  - key: b\n"
                                "    value: x\n"
                                "    descriptors:\n"
                                "      - key: c\n"
                                "        rate_limit: {unit: minute, "
                                "requests_per_unit: 1}\n"
                                "        shadow_mode: true\n"
                                "  - key: z\n"
                                "    rate_limit: {unit: minute, "
                                "requests_per_unit: 0}\n"
                                "  - key: u\n"
                                "    unlimited: true\n"
                                "  - key: r\n"
                                "    rule: api\n";

static const char rules_yaml[] = "rules:\n"
                                 "  api:\n"
                                 "    limits: [2/1m]\n";

typedef struct {
    dfx_t dx; /* the decider on the memory store (decider_fx.h) */
    rls_envoy_ctx_t ctx;
    int done; /* calls whose last answer came */
} fx_t;

static fx_t *cur;

static void on_done(rls_envoy_call_t *call)
{
    (void)call;
    cur->done++;
}

static void fx_open(fx_t *f)
{
    rls_diag_t dg;

    memset(f, 0, sizeof(*f));
    cur = f;
    dfx_open(&f->dx, rules_yaml, B + 250, NULL);
    f->ctx.decider = &f->dx.d;
    assert_int_equal(rls_envoy_conf_build_buf("d.yaml", conf_yaml,
                                              strlen(conf_yaml), &f->ctx.conf,
                                              &dg),
                     RL_OK);
}

static void fx_close(fx_t *f)
{
    rls_envoy_conf_unref(f->ctx.conf);
    dfx_close(&f->dx);
}

/* Packs a RateLimitRequest for domain with the descriptors in `descs`:
 * each a string of "key=value" entries separated by ',' (value may be
 * empty), the descriptors separated by ';'. */
static uint8_t *pack(const char *domain, const char *descs, uint32_t hits,
                     size_t *len)
{
    req_t q = ENVOY__SERVICE__RATELIMIT__V3__RATE_LIMIT_REQUEST__INIT;
    desc_t d[10], *dp[10];
    entry_t e[10][4], *ep[10][4];
    char buf[256], *save = NULL, *tok;
    size_t nd = 0;
    uint8_t *out;

    snprintf(buf, sizeof(buf), "%s", descs);
    for (tok = strtok_r(buf, ";", &save); tok != NULL;
         tok = strtok_r(NULL, ";", &save)) {
        char *s2 = NULL, *kv;
        size_t ne = 0;
        assert_true(nd < 10);
        envoy__extensions__common__ratelimit__v3__rate_limit_descriptor__init(
            &d[nd]);
        for (kv = strtok_r(tok, ",", &s2); kv != NULL;
             kv = strtok_r(NULL, ",", &s2)) {
            char *eq = strchr(kv, '=');
            assert_non_null(eq);
            assert_true(ne < 4);
            *eq = '\0';
            envoy__extensions__common__ratelimit__v3__rate_limit_descriptor__entry__init(
                &e[nd][ne]);
            e[nd][ne].key = kv;
            e[nd][ne].value = eq + 1;
            ep[nd][ne] = &e[nd][ne];
            ne++;
        }
        d[nd].n_entries = ne;
        d[nd].entries = ep[nd];
        dp[nd] = &d[nd];
        nd++;
    }
    q.domain = (char *)domain;
    q.n_descriptors = nd;
    q.descriptors = dp;
    q.hits_addend = hits;
    *len =
        envoy__service__ratelimit__v3__rate_limit_request__get_packed_size(&q);
    out = malloc(*len + 1);
    assert_non_null(out);
    assert_int_equal(
        envoy__service__ratelimit__v3__rate_limit_request__pack(&q, out), *len);
    return out;
}

/* Sends one request through the service; returns its status, and the
 * response (to free with ..._free_unpacked) in *out when OK. The done
 * callback fires exactly once when anything was in flight, never when
 * nothing was. */
static int call(fx_t *f, const char *domain, const char *descs, uint32_t hits,
                resp_t **out, const char **why)
{
    rls_envoy_call_t c;
    size_t n;
    uint8_t *p = pack(domain, descs, hits, &n);
    int rc, before = f->done, queued;
    const char *w = NULL;
    rl_buf_t b;

    memset(&c, 0, sizeof(c));
    c.done = on_done;
    rc = rls_envoy_start(&c, &f->ctx, p, n, &w);
    free(p);
    queued = c.pending > 0;
    /* Never answered from inside rls_envoy_start. */
    assert_int_equal(f->done, before);
    rls_decider_flush_now(&f->dx.d);
    uv_run(&f->dx.loop, UV_RUN_NOWAIT);
    assert_int_equal(c.pending, 0);
    assert_int_equal(f->done, before + queued);
    if (why != NULL)
        *why = w;
    *out = NULL;
    if (rc == RLS_GRPC_OK) {
        rl_buf_init(&b, 1 << 20);
        assert_int_equal(rls_envoy_encode(&c, &b), RL_OK);
        /* One gRPC message: uncompressed, its length, the bytes. */
        assert_true(rl_buf_len(&b) >= 5);
        assert_int_equal(rl_buf_rptr(&b)[0], 0);
        n = ((size_t)rl_buf_rptr(&b)[1] << 24) |
            ((size_t)rl_buf_rptr(&b)[2] << 16) |
            ((size_t)rl_buf_rptr(&b)[3] << 8) | rl_buf_rptr(&b)[4];
        assert_int_equal(n + 5, rl_buf_len(&b));
        *out = envoy__service__ratelimit__v3__rate_limit_response__unpack(
            NULL, n, rl_buf_rptr(&b) + 5);
        assert_non_null(*out);
        rl_buf_free(&b);
    }
    rls_envoy_call_free(&c);
    return rc;
}

static void resp_free(resp_t *r)
{
    envoy__service__ratelimit__v3__rate_limit_response__free_unpacked(r, NULL);
}

/* The i-th status has code, a limit of rpu per unit (rpu 0: no limit
 * given) and remaining. */
static void status_is(const resp_t *r, size_t i, int code, uint32_t rpu,
                      int unit, uint32_t remaining)
{
    const status_t *s;

    assert_true(i < r->n_statuses);
    s = r->statuses[i];
    assert_int_equal(s->code, code);
    if (rpu == 0) {
        assert_null(s->current_limit);
        return;
    }
    assert_non_null(s->current_limit);
    assert_int_equal(s->current_limit->requests_per_unit, rpu);
    assert_int_equal(s->current_limit->unit, unit);
    assert_int_equal(s->limit_remaining, remaining);
}

/* ---- the tests ---- */

/* all_or_nothing's domain: an organisation's limit and its users'. */
static const char group_yaml[] = "domain: g\n"
                                 "all_or_nothing: true\n"
                                 "descriptors:\n"
                                 "  - key: org\n"
                                 "    rate_limit: {unit: minute, "
                                 "requests_per_unit: 3}\n"
                                 "    descriptors:\n"
                                 "      - key: user\n"
                                 "        rate_limit: {unit: minute, "
                                 "requests_per_unit: 2}\n"
                                 "  - key: z\n"
                                 "    rate_limit: {unit: minute, "
                                 "requests_per_unit: 0}\n"
                                 "  - key: u\n"
                                 "    unlimited: true\n"
                                 "  - key: s\n"
                                 "    rate_limit: {unit: minute, "
                                 "requests_per_unit: 1}\n"
                                 "    shadow_mode: true\n";

static void use_conf(fx_t *f, const char *yaml)
{
    rls_diag_t dg;

    rls_envoy_conf_unref(f->ctx.conf);
    assert_int_equal(rls_envoy_conf_build_buf("g.yaml", yaml, strlen(yaml),
                                              &f->ctx.conf, &dg),
                     RL_OK);
}

/* all_or_nothing: a call's limited descriptors are allowed together and
 * charged together; refused, none is charged, and each status says how
 * its own level stands. */
static void test_all_or_nothing(void **state)
{
    fx_t f;
    resp_t *r;
    const char *why;
    int i;

    (void)state;
    fx_open(&f);
    use_conf(&f, group_yaml);
    for (i = 0; i < 2; i++) {
        assert_int_equal(call(&f, "g", "org=a;org=a,user=u1", 0, &r, NULL),
                         RLS_GRPC_OK);
        assert_int_equal(r->overall_code, OK);
        status_is(r, 0, OK, 3, MINUTE, (uint32_t)(2 - i));
        status_is(r, 1, OK, 2, MINUTE, (uint32_t)(1 - i));
        resp_free(r);
    }
    /* The user's level refuses: the organisation's is not charged, and
     * says the room it has. */
    assert_int_equal(call(&f, "g", "org=a;org=a,user=u1", 0, &r, NULL),
                     RLS_GRPC_OK);
    assert_int_equal(r->overall_code, OVER);
    status_is(r, 0, OK, 3, MINUTE, 1);
    status_is(r, 1, OVER, 2, MINUTE, 0);
    resp_free(r);
    assert_int_equal(call(&f, "g", "org=a;org=a,user=u2", 0, &r, NULL),
                     RLS_GRPC_OK);
    assert_int_equal(r->overall_code, OK);
    status_is(r, 0, OK, 3, MINUTE, 0);
    status_is(r, 1, OK, 2, MINUTE, 1);
    resp_free(r);
    /* Now the organisation's refuses, and u3 is not charged: its status
     * says 2 left, and its next call, with another organisation's level
     * that has room, leaves 1. */
    assert_int_equal(call(&f, "g", "org=a;org=a,user=u3", 0, &r, NULL),
                     RLS_GRPC_OK);
    assert_int_equal(r->overall_code, OVER);
    status_is(r, 0, OVER, 3, MINUTE, 0);
    status_is(r, 1, OK, 2, MINUTE, 2);
    resp_free(r);
    assert_int_equal(call(&f, "g", "org=b;org=a,user=u3", 0, &r, NULL),
                     RLS_GRPC_OK);
    assert_int_equal(r->overall_code, OK);
    status_is(r, 0, OK, 3, MINUTE, 2);
    status_is(r, 1, OK, 2, MINUTE, 1);
    resp_free(r);
    /* Two levels without room: both say so. */
    assert_int_equal(call(&f, "g", "org=a;org=a,user=u1", 0, &r, NULL),
                     RLS_GRPC_OK);
    status_is(r, 0, OVER, 3, MINUTE, 0);
    status_is(r, 1, OVER, 2, MINUTE, 0);
    resp_free(r);
    /* A limit of 0 refuses the group without the store: the others are
     * not looked at (no current_limit) and not charged. */
    assert_int_equal(call(&f, "g", "org=c;z=1", 0, &r, NULL), RLS_GRPC_OK);
    assert_int_equal(r->overall_code, OVER);
    status_is(r, 0, OK, 0, 0, 0);
    assert_int_equal(r->statuses[1]->code, OVER);
    resp_free(r);
    /* Unlimited and unmatched descriptors are not levels; hits_addend 2
     * is every level's cost. */
    assert_int_equal(call(&f, "g", "org=c;u=1;nothing=1", 2, &r, NULL),
                     RLS_GRPC_OK);
    assert_int_equal(r->overall_code, OK);
    status_is(r, 0, OK, 3, MINUTE, 1);
    status_is(r, 1, OK, 0, 0, 0);
    status_is(r, 2, OK, 0, 0, 0);
    resp_free(r);
    /* A level in shadow mode puts the group in shadow: refused there, the
     * call is let through and charges nothing (the organisation's level
     * says 2 left both times). */
    for (i = 0; i < 2; i++) {
        assert_int_equal(call(&f, "g", "org=e;s=1", 0, &r, NULL), RLS_GRPC_OK);
        assert_int_equal(r->overall_code, OK);
        status_is(r, 0, OK, 3, MINUTE, 2);
        assert_int_equal(r->statuses[1]->code, OK);
        resp_free(r);
    }
    assert_int_equal(call(&f, "g", "org=e", 0, &r, NULL), RLS_GRPC_OK);
    status_is(r, 0, OK, 3, MINUTE, 1);
    resp_free(r);
    /* A group holds 8 levels: the ninth is refused before anything is
     * queued. */
    assert_int_equal(call(&f, "g",
                          "org=f;org=f;org=f;org=f;org=f;org=f;org=f;org=f;"
                          "org=f",
                          0, &r, &why),
                     RLS_GRPC_INVALID_ARGUMENT);
    assert_non_null(strstr(why, "8 descriptors"));
    assert_int_equal(call(&f, "g", "org=f", 0, &r, NULL), RLS_GRPC_OK);
    status_is(r, 0, OK, 3, MINUTE, 2);
    resp_free(r);
    fx_close(&f);
}

/* Without the option (envoy-ratelimit's semantics, the default) a
 * refused call still charges the descriptors that fit. */
static void test_one_by_one(void **state)
{
    fx_t f;
    resp_t *r;

    (void)state;
    fx_open(&f);
    assert_int_equal(call(&f, "d", "a=x;z=1", 0, &r, NULL), RLS_GRPC_OK);
    assert_int_equal(r->overall_code, OVER);
    status_is(r, 0, OK, 3, SECOND, 2);
    resp_free(r);
    assert_int_equal(call(&f, "d", "a=x", 0, &r, NULL), RLS_GRPC_OK);
    status_is(r, 0, OK, 3, SECOND, 1);
    resp_free(r);
    fx_close(&f);
}

static void test_limit_counts_down(void **state)
{
    fx_t f;
    resp_t *r;
    int i;

    (void)state;
    fx_open(&f);
    for (i = 0; i < 3; i++) {
        assert_int_equal(call(&f, "d", "a=x", 0, &r, NULL), RLS_GRPC_OK);
        assert_int_equal(r->overall_code, OK);
        assert_int_equal(r->n_statuses, 1);
        status_is(r, 0, OK, 3, SECOND, (uint32_t)(2 - i));
        /* The second ends in 750 ms: 1 s, rounded up. */
        assert_non_null(r->statuses[0]->duration_until_reset);
        assert_int_equal(r->statuses[0]->duration_until_reset->seconds, 1);
        resp_free(r);
    }
    assert_int_equal(call(&f, "d", "a=x", 0, &r, NULL), RLS_GRPC_OK);
    assert_int_equal(r->overall_code, OVER);
    status_is(r, 0, OVER, 3, SECOND, 0);
    resp_free(r);
    /* Another value of the key has a counter of its own; hits_addend 2. */
    assert_int_equal(call(&f, "d", "a=y", 2, &r, NULL), RLS_GRPC_OK);
    assert_int_equal(r->overall_code, OK);
    status_is(r, 0, OK, 3, SECOND, 1);
    resp_free(r);
    /* The next second: room again. */
    f.dx.store->now = B + 1000;
    assert_int_equal(call(&f, "d", "a=x", 0, &r, NULL), RLS_GRPC_OK);
    status_is(r, 0, OK, 3, SECOND, 2);
    resp_free(r);
    assert_int_equal(f.ctx.stats.descriptors[1], 5);
    assert_int_equal(f.ctx.stats.descriptors[2], 1);
    fx_close(&f);
}

/* Several descriptors: each its own status, the overall code the worst. */
static void test_descriptors(void **state)
{
    fx_t f;
    resp_t *r;

    (void)state;
    fx_open(&f);
    assert_int_equal(call(&f, "d", "a=x;z=1;u=1;nothing=1", 0, &r, NULL),
                     RLS_GRPC_OK);
    assert_int_equal(r->overall_code, OVER);
    assert_int_equal(r->n_statuses, 4);
    status_is(r, 0, OK, 3, SECOND, 2);
    /* A limit of 0 refuses everything. */
    assert_int_equal(r->statuses[1]->code, OVER);
    assert_int_equal(r->statuses[1]->limit_remaining, 0);
    status_is(r, 2, OK, 0, 0, 0); /* unlimited */
    status_is(r, 3, OK, 0, 0, 0); /* matched by nothing */
    resp_free(r);
    /* A rule of the rules file, by name. */
    assert_int_equal(call(&f, "d", "r=1;r=1", 0, &r, NULL), RLS_GRPC_OK);
    assert_int_equal(r->overall_code, OK);
    assert_int_equal(r->n_statuses, 2);
    resp_free(r);
    assert_int_equal(call(&f, "d", "r=1", 0, &r, NULL), RLS_GRPC_OK);
    assert_int_equal(r->overall_code, OVER);
    resp_free(r);
    assert_int_equal(rls_runtime_stats(&f.dx.rt, "api", 3)->allowed, 2);
    assert_int_equal(rls_runtime_stats(&f.dx.rt, "api", 3)->refused, 1);
    fx_close(&f);
}

static void test_shadow_and_unknown(void **state)
{
    fx_t f;
    resp_t *r;

    (void)state;
    fx_open(&f);
    assert_int_equal(call(&f, "d", "b=x,c=1", 0, &r, NULL), RLS_GRPC_OK);
    status_is(r, 0, OK, 1, MINUTE, 0);
    resp_free(r);
    /* Over its limit, in shadow mode: OK, as envoy-ratelimit answers. */
    assert_int_equal(call(&f, "d", "b=x,c=1", 0, &r, NULL), RLS_GRPC_OK);
    assert_int_equal(r->overall_code, OK);
    assert_int_equal(r->statuses[0]->code, OK);
    resp_free(r);
    /* A domain without configuration: allowed, nothing counted. */
    assert_int_equal(call(&f, "other", "a=x", 0, &r, NULL), RLS_GRPC_OK);
    assert_int_equal(r->overall_code, OK);
    assert_int_equal(r->n_statuses, 1);
    status_is(r, 0, OK, 0, 0, 0);
    resp_free(r);
    assert_int_equal(f.ctx.stats.unknown_domain, 1);
    fx_close(&f);
}

static void test_bad_requests(void **state)
{
    fx_t f;
    resp_t *r;
    const char *why;
    rls_envoy_call_t c;
    static const uint8_t junk[] = {0x0a, 0x05, 'd'};

    (void)state;
    fx_open(&f);
    /* envoy-ratelimit's answers: UNKNOWN (a Go error). */
    assert_int_equal(call(&f, "", "a=x", 0, &r, &why), RLS_GRPC_UNKNOWN);
    assert_string_equal(why, "rate limit domain must not be empty");
    assert_int_equal(call(&f, "d", "", 0, &r, &why), RLS_GRPC_UNKNOWN);
    assert_string_equal(why, "rate limit descriptor list must not be empty");
    /* Bytes that are no RateLimitRequest. */
    memset(&c, 0, sizeof(c));
    c.done = on_done;
    assert_int_equal(rls_envoy_start(&c, &f.ctx, junk, sizeof(junk), &why),
                     RLS_GRPC_INTERNAL);
    assert_int_equal(c.pending, 0);
    rls_envoy_call_free(&c);
    assert_int_equal(f.done, 0);
    assert_int_equal(rls_decider_stats(&f.dx.d)->requests, 0);
    fx_close(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_limit_counts_down),
        cmocka_unit_test(test_descriptors),
        cmocka_unit_test(test_shadow_and_unknown),
        cmocka_unit_test(test_bad_requests),
        cmocka_unit_test(test_all_or_nothing),
        cmocka_unit_test(test_one_by_one),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
