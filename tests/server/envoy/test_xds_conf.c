/* A control plane's RateLimitConfig resources as YAML and as a
 * configuration (server/envoy/xds_conf.c): what the messages say is what
 * the configuration decides, no string can add YAML of its own, and bad
 * or oversized input is refused with a reason before it is built. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "envoy/service/discovery/v3/discovery.pb-c.h"
#include "envoy/xds_conf.h"
#include "ratelimit/config/ratelimit/v3/rls_conf.pb-c.h"
#include "rl_buf.h"
#include "rl_error.h"

typedef Ratelimit__Config__Ratelimit__V3__RateLimitConfig conf_t;
typedef Ratelimit__Config__Ratelimit__V3__RateLimitDescriptor desc_t;
typedef Ratelimit__Config__Ratelimit__V3__RateLimitPolicy pol_t;

static void desc_init(desc_t *d, const char *k, const char *v)
{
    ratelimit__config__ratelimit__v3__rate_limit_descriptor__init(d);
    d->key = (char *)k;
    d->value = (char *)v;
}

static void pol_init(pol_t *p, int unit, uint32_t rpu)
{
    ratelimit__config__ratelimit__v3__rate_limit_policy__init(p);
    p->unit = (Ratelimit__Config__Ratelimit__V3__RateLimitUnit)unit;
    p->requests_per_unit = rpu;
}

static uint8_t *pack_conf(const conf_t *c, size_t *len)
{
    uint8_t *b;

    *len =
        ratelimit__config__ratelimit__v3__rate_limit_config__get_packed_size(c);
    b = malloc(*len + 1);
    assert_non_null(b);
    ratelimit__config__ratelimit__v3__rate_limit_config__pack(c, b);
    return b;
}

/* A DiscoveryResponse of n packed configs (type: each resource's). */
static uint8_t *pack_resp(const char *version, const char *nonce,
                          const char *type, uint8_t **confs, size_t *lens,
                          size_t n, size_t *len)
{
    Envoy__Service__Discovery__V3__DiscoveryResponse r;
    Google__Protobuf__Any any[4], *anys[4];
    uint8_t *b;
    size_t i;

    envoy__service__discovery__v3__discovery_response__init(&r);
    r.version_info = (char *)version;
    r.nonce = (char *)nonce;
    r.type_url = (char *)RLS_XDS_TYPE_URL;
    for (i = 0; i < n; i++) {
        google__protobuf__any__init(&any[i]);
        any[i].type_url = (char *)type;
        any[i].value.data = confs[i];
        any[i].value.len = lens[i];
        anys[i] = &any[i];
    }
    r.n_resources = n;
    r.resources = anys;
    *len =
        envoy__service__discovery__v3__discovery_response__get_packed_size(&r);
    b = malloc(*len + 1);
    assert_non_null(b);
    envoy__service__discovery__v3__discovery_response__pack(&r, b);
    return b;
}

static char *yaml_of(const conf_t *c)
{
    size_t len;
    uint8_t *m = pack_conf(c, &len);
    rl_buf_t o;
    char *name = NULL, *s;

    rl_buf_init(&o, 1 << 20);
    assert_int_equal(rls_xds_conf_yaml(m, len, &o, &name), RL_OK);
    s = calloc(1, rl_buf_len(&o) + 1);
    assert_non_null(s);
    memcpy(s, rl_buf_rptr(&o), rl_buf_len(&o));
    rl_buf_free(&o);
    free(name);
    free(m);
    return s;
}

static const rls_envoy_node_t *step(const rls_envoy_conf_t *c,
                                    const rls_envoy_domain_t *d,
                                    const rls_envoy_node_t *p, const char *k,
                                    const char *v)
{
    return rls_envoy_conf_step(c, d, p, k, strlen(k), v, strlen(v));
}

/* Two domains, nested descriptors, every key the loader knows today: the
 * configuration built from them decides what the messages say. */
static void test_two_domains_decide(void **state)
{
    desc_t top, inner, any_val, unl, shadow, *tops[3], *inners[2];
    pol_t p_top, p_inner, p_any, p_unl, p_shadow;
    conf_t a, b;
    desc_t *btops[1];
    uint8_t *m[2], *resp;
    size_t lens[2], rlen;
    rls_xds_update_t u;
    rls_envoy_conf_t *c = NULL;
    const rls_envoy_domain_t *d;
    const rls_envoy_node_t *x, *y;
    rls_diag_t diag;
    char err[256];
    (void)state;

    desc_init(&top, "database", "users");
    pol_init(&p_top, 1, 500);
    p_top.name = "users-limit";
    top.rate_limit = &p_top;
    desc_init(&inner, "tenant", "gold");
    pol_init(&p_inner, 2, 7);
    inner.rate_limit = &p_inner;
    desc_init(&any_val, "tenant", "");
    pol_init(&p_any, 3, 3);
    any_val.rate_limit = &p_any;
    inners[0] = &inner;
    inners[1] = &any_val;
    top.descriptors = inners;
    top.n_descriptors = 2;
    desc_init(&unl, "remote_address", "");
    pol_init(&p_unl, 0, 0);
    p_unl.unlimited = 1;
    unl.rate_limit = &p_unl;
    desc_init(&shadow, "path", "/x");
    pol_init(&p_shadow, 4, 9);
    shadow.rate_limit = &p_shadow;
    shadow.shadow_mode = 1;
    tops[0] = &top;
    tops[1] = &unl;
    tops[2] = &shadow;
    ratelimit__config__ratelimit__v3__rate_limit_config__init(&a);
    a.name = "cfg-a";
    a.domain = "mongo_cps";
    a.descriptors = tops;
    a.n_descriptors = 3;
    ratelimit__config__ratelimit__v3__rate_limit_config__init(&b);
    b.name = "cfg-b";
    b.domain = "other";
    btops[0] = &shadow;
    b.descriptors = btops;
    b.n_descriptors = 1;
    m[0] = pack_conf(&a, &lens[0]);
    m[1] = pack_conf(&b, &lens[1]);
    resp = pack_resp("v1", "n1", RLS_XDS_TYPE_URL, m, lens, 2, &rlen);

    assert_int_equal(rls_xds_update_decode(resp, rlen, &u, err, sizeof(err)),
                     RL_OK);
    assert_string_equal(u.version, "v1");
    assert_string_equal(u.nonce, "n1");
    assert_int_equal(u.n, 2);
    assert_string_equal(u.names[0], "xds:cfg-a");
    assert_int_equal(rls_xds_update_build(&u, &c, &diag), RL_OK);
    assert_int_equal(rls_envoy_conf_domains(c), 2);
    d = rls_envoy_conf_domain(c, "mongo_cps", 9);
    assert_non_null(d);
    x = step(c, d, NULL, "database", "users");
    assert_non_null(x);
    assert_int_equal(x->kind, RLS_ENVOY_LIMIT);
    assert_int_equal(x->lim.limit, 500);
    assert_int_equal(x->lim.window_s, 1);
    assert_int_equal(x->name_len, strlen("users-limit"));
    y = step(c, d, x, "tenant", "gold");
    assert_non_null(y);
    assert_int_equal(y->lim.limit, 7);
    assert_int_equal(y->lim.window_s, 60);
    y = step(c, d, x, "tenant", "silver");
    assert_non_null(y);
    assert_int_equal(y->lim.limit, 3);
    assert_int_equal(y->lim.window_s, 3600);
    x = step(c, d, NULL, "remote_address", "1.2.3.4");
    assert_non_null(x);
    assert_int_equal(x->kind, RLS_ENVOY_UNLIMITED);
    x = step(c, d, NULL, "path", "/x");
    assert_non_null(x);
    assert_true(x->shadow);
    assert_int_equal(x->lim.window_s, 86400);
    assert_null(step(c, d, NULL, "path", "/y"));
    d = rls_envoy_conf_domain(c, "other", 5);
    assert_non_null(d);
    assert_non_null(step(c, d, NULL, "path", "/x"));
    rls_envoy_conf_unref(c);
    rls_xds_update_free(&u);
    free(resp);
    free(m[0]);
    free(m[1]);
}

/* The YAML is what a person would write, every string quoted. */
static void test_yaml_text(void **state)
{
    desc_t d, *ds[1];
    pol_t p;
    Ratelimit__Config__Ratelimit__V3__RateLimitReplace rep, *reps[1];
    conf_t c;
    char *s;
    (void)state;

    desc_init(&d, "k", "v");
    pol_init(&p, 7, 5);
    p.name = "n";
    ratelimit__config__ratelimit__v3__rate_limit_replace__init(&rep);
    rep.name = "old";
    reps[0] = &rep;
    p.replaces = reps;
    p.n_replaces = 1;
    d.rate_limit = &p;
    d.detailed_metric = 1;
    d.quota_mode = 1;
    ds[0] = &d;
    ratelimit__config__ratelimit__v3__rate_limit_config__init(&c);
    c.domain = "dom";
    c.descriptors = ds;
    c.n_descriptors = 1;
    s = yaml_of(&c);
    assert_string_equal(s, "domain: \"dom\"\n"
                           "descriptors:\n"
                           "  - key: \"k\"\n"
                           "    value: \"v\"\n"
                           "    rate_limit:\n"
                           "      unit: \"week\"\n"
                           "      requests_per_unit: 5\n"
                           "      name: \"n\"\n"
                           "      replaces:\n"
                           "        - name: \"old\"\n"
                           "    detailed_metric: true\n"
                           "    quota_mode: true\n");
    free(s);
}

/* Values that would be YAML if written bare come back byte for byte. */
static void test_no_injection(void **state)
{
    static const char *const vals[] = {
        "a\"\n  - key: evil\n    unlimited: true\n",
        "back\\slash \\\" x",
        "tab\tcr\rnul-less \x01\x1f\x7f",
        "line\xe2\x80\xa8sep\xe2\x80\xa9par\xc2\x85nel\xc2\x80",
        "&anchor *alias !tag {flow} [seq] # comment: x",
        "\xef\xbf\xbe",
        "caf\xc3\xa9 \xf0\x9f\x98\x80",
    };
    size_t i;
    (void)state;

    for (i = 0; i < sizeof(vals) / sizeof(vals[0]); i++) {
        desc_t d, *ds[1];
        pol_t p;
        conf_t c;
        char *s;
        rls_envoy_conf_t *ec = NULL;
        rls_diag_t diag;
        const rls_envoy_domain_t *dom;
        const rls_envoy_node_t *x;
        int rc;

        desc_init(&d, vals[i], vals[i]);
        pol_init(&p, 1, 11);
        p.name = (char *)vals[i];
        d.rate_limit = &p;
        ds[0] = &d;
        ratelimit__config__ratelimit__v3__rate_limit_config__init(&c);
        c.domain = (char *)vals[i];
        c.descriptors = ds;
        c.n_descriptors = 1;
        s = yaml_of(&c);
        rc = rls_envoy_conf_build_buf("x", s, strlen(s), &ec, &diag);
        if (rc != RL_OK)
            fail_msg("value %zu: %s\n%s", i, diag.msg[0], s);
        assert_int_equal(rls_envoy_conf_nodes(ec), 1);
        dom = rls_envoy_conf_domain(ec, vals[i], strlen(vals[i]));
        assert_non_null(dom);
        x = step(ec, dom, NULL, vals[i], vals[i]);
        assert_non_null(x);
        assert_int_equal(x->kind, RLS_ENVOY_LIMIT);
        assert_int_equal(x->lim.limit, 11);
        assert_int_equal(x->value_len, strlen(vals[i]));
        assert_memory_equal(x->name, vals[i], strlen(vals[i]));
        rls_envoy_conf_unref(ec);
        free(s);
    }
}

/* A configuration the loader refuses: FILE:LINE names the resource. */
static void test_invalid_names_resource(void **state)
{
    desc_t d, *ds[1];
    pol_t p;
    conf_t c;
    uint8_t *m, *resp;
    size_t len, rlen;
    rls_xds_update_t u;
    rls_envoy_conf_t *ec = NULL;
    rls_diag_t diag;
    char err[256];
    (void)state;

    desc_init(&d, "k", "");
    pol_init(&p, 0, 5); /* unit UNKNOWN: a limit without a unit */
    d.rate_limit = &p;
    ds[0] = &d;
    ratelimit__config__ratelimit__v3__rate_limit_config__init(&c);
    c.name = "bad one";
    c.domain = "dom";
    c.descriptors = ds;
    c.n_descriptors = 1;
    m = pack_conf(&c, &len);
    resp = pack_resp("v2", "n2", RLS_XDS_TYPE_URL, &m, &len, 1, &rlen);
    assert_int_equal(rls_xds_update_decode(resp, rlen, &u, err, sizeof(err)),
                     RL_OK);
    assert_int_equal(rls_xds_update_build(&u, &ec, &diag), RL_EINVAL);
    assert_null(ec);
    assert_true(diag.n >= 1);
    if (strncmp(diag.msg[0], "xds:bad_one:5:", 14) != 0)
        fail_msg("%s", diag.msg[0]);
    rls_xds_update_free(&u);
    free(resp);
    free(m);
}

/* Refused before building, with the nonce kept to NACK. */
static void test_refused_on_decode(void **state)
{
    uint8_t *m, *resp, garbage[] = {0x12, 0xff, 0xff, 0x01};
    size_t len, rlen, i;
    rls_xds_update_t u;
    char err[256];
    desc_t *ds = NULL, *chain;
    conf_t c;
    (void)state;

    /* Not a DiscoveryResponse at all: nothing to NACK. */
    assert_int_equal(
        rls_xds_update_decode(garbage, sizeof(garbage), &u, err, sizeof(err)),
        RL_EDECODE);
    rls_xds_update_free(&u);
    assert_int_equal(rls_xds_update_decode(garbage, RLS_XDS_MSG_MAX + 1, &u,
                                           err, sizeof(err)),
                     RL_EDECODE);
    rls_xds_update_free(&u);

    /* Another resource type. */
    ratelimit__config__ratelimit__v3__rate_limit_config__init(&c);
    c.domain = "dom";
    m = pack_conf(&c, &len);
    resp = pack_resp("v3", "n3", "type.googleapis.com/x.Y", &m, &len, 1, &rlen);
    assert_int_equal(rls_xds_update_decode(resp, rlen, &u, err, sizeof(err)),
                     RL_EINVAL);
    assert_string_equal(u.nonce, "n3");
    assert_non_null(strstr(err, "not a RateLimitConfig"));
    rls_xds_update_free(&u);
    free(resp);
    free(m);

    /* Nested deeper than RLS_XDS_DEPTH_MAX: refused on the wire, before
     * protobuf-c recurses; one level less is fine. */
    for (i = RLS_XDS_DEPTH_MAX; i <= RLS_XDS_DEPTH_MAX + 1; i++) {
        size_t k;
        chain = calloc(i, sizeof(*chain));
        assert_non_null(chain);
        for (k = 0; k < i; k++) {
            desc_init(&chain[k], "k", "");
            if (k + 1 < i) {
                ds = &chain[k + 1];
                chain[k].descriptors = malloc(sizeof(desc_t *));
                assert_non_null(chain[k].descriptors);
                chain[k].descriptors[0] = ds;
                chain[k].n_descriptors = 1;
            }
        }
        ds = &chain[0];
        c.descriptors = &ds;
        c.n_descriptors = 1;
        m = pack_conf(&c, &len);
        resp = pack_resp("v4", "n4", RLS_XDS_TYPE_URL, &m, &len, 1, &rlen);
        assert_int_equal(
            rls_xds_update_decode(resp, rlen, &u, err, sizeof(err)),
            i == RLS_XDS_DEPTH_MAX ? RL_OK : RL_EINVAL);
        rls_xds_update_free(&u);
        free(resp);
        free(m);
        for (k = 0; k + 1 < i; k++)
            free(chain[k].descriptors);
        free(chain);
    }

    /* A NUL inside a string would be cut silently by protobuf-c: refused.
     * RateLimitConfig{domain: "a\0b"}. */
    {
        uint8_t nul[] = {0x12, 0x03, 'a', 0x00, 'b'};
        size_t nl = sizeof(nul);
        uint8_t *pn = nul;
        resp = pack_resp("v5", "n5", RLS_XDS_TYPE_URL, &pn, &nl, 1, &rlen);
        assert_int_equal(
            rls_xds_update_decode(resp, rlen, &u, err, sizeof(err)), RL_EINVAL);
        assert_string_equal(u.version, "v5");
        rls_xds_update_free(&u);
        free(resp);
    }
}

/* No resources: an empty configuration (every domain unknown), as the
 * state of the world says. */
static void test_empty_world(void **state)
{
    uint8_t *resp;
    size_t rlen;
    rls_xds_update_t u;
    rls_envoy_conf_t *ec = NULL;
    rls_diag_t diag;
    char err[64];
    (void)state;

    resp = pack_resp("v6", "n6", RLS_XDS_TYPE_URL, NULL, NULL, 0, &rlen);
    assert_int_equal(rls_xds_update_decode(resp, rlen, &u, err, sizeof(err)),
                     RL_OK);
    assert_int_equal(u.n, 0);
    assert_int_equal(rls_xds_update_build(&u, &ec, &diag), RL_OK);
    assert_int_equal(rls_envoy_conf_domains(ec), 0);
    rls_envoy_conf_unref(ec);
    rls_xds_update_free(&u);
    free(resp);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_two_domains_decide),
        cmocka_unit_test(test_yaml_text),
        cmocka_unit_test(test_no_injection),
        cmocka_unit_test(test_invalid_names_resource),
        cmocka_unit_test(test_refused_on_decode),
        cmocka_unit_test(test_empty_world),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
