/* envoy-ratelimit's per-descriptor statistics (server/envoy/stats.c)
 * and their statsd exporter (server/envoy/statsd.c): the reference's stat
 * names from a loaded configuration, its arithmetic of total_hits,
 * within_limit, near_limit, over_limit and shadow_mode (base_limiter.go at
 * envoyproxy/ratelimit f2fb157), the cap on series named after request
 * values, series surviving a reload by name, the /metrics families, and
 * the exporter's datagrams read from a UDP socket of this test. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <uv.h>

#include "flags.h"
#include "envoy/stats.h"
#include "envoy/statsd.h"
#include "envoy/conf.h"
#include "rl_error.h"

static const char conf_a[] =
    "domain: edge\n"
    "descriptors:\n"
    "  - key: remote_address\n"
    "    rate_limit: {unit: second, requests_per_unit: 10}\n"
    "  - key: remote_address\n"
    "    value: 10.0.0.1\n"
    "    rate_limit: {unit: second, requests_per_unit: 5}\n"
    "  - key: path\n"
    "    value: /api/*\n"
    "    rate_limit: {unit: minute, requests_per_unit: 7}\n"
    "  - key: a:b|c\n"
    "    rate_limit: {unit: minute, requests_per_unit: 7}\n"
    "  - key: database\n"
    "    value: users\n"
    "    descriptors:\n"
    "      - key: tenant\n"
    "        rate_limit: {unit: hour, requests_per_unit: 100}\n";

/* The same descriptors but one, and a limit changed: a reload. */
static const char conf_b[] =
    "domain: edge\n"
    "descriptors:\n"
    "  - key: path\n"
    "    value: /api/*\n"
    "    rate_limit: {unit: minute, requests_per_unit: 70}\n"
    "  - key: database\n"
    "    value: users\n"
    "    descriptors:\n"
    "      - key: tenant\n"
    "        rate_limit: {unit: hour, requests_per_unit: 100}\n";

static rls_envoy_conf_t *build(const char *yaml)
{
    rls_envoy_conf_t *c = NULL;
    rls_diag_t d;

    assert_int_equal(
        rls_envoy_conf_build_buf("t.yaml", yaml, strlen(yaml), &c, &d), 0);
    return c;
}

/* Walks pairs (k1, v1, k2, v2, ..., NULL) of domain "edge". */
static const rls_envoy_node_t *walk(const rls_envoy_conf_t *c, ...)
{
    const rls_envoy_domain_t *d = rls_envoy_conf_domain(c, "edge", 4);
    const rls_envoy_node_t *x = NULL;
    const char *k, *v;
    va_list ap;

    va_start(ap, c);
    while ((k = va_arg(ap, const char *)) != NULL) {
        v = va_arg(ap, const char *);
        x = rls_envoy_conf_step(c, d, x, k, strlen(k), v, strlen(v));
        assert_non_null(x);
    }
    va_end(ap);
    return x;
}

static const rls_envoy_domain_t *edge(const rls_envoy_conf_t *c)
{
    return rls_envoy_conf_domain(c, "edge", 4);
}

static void node_names(void **state)
{
    rls_envoy_conf_t *c = build(conf_a);
    char name[RLS_ESTATS_NAME_MAX + 1];

    (void)state;
    /* The reference's NewStats keys: domain, then key[_value] per level,
     * a wildcard with its '*'; IPv4 dots, ':' and '|' as '_'. */
    rls_estats_node_name(name, edge(c),
                         walk(c, "remote_address", "1.2.3.4", NULL));
    assert_string_equal(name, "edge.remote_address");
    rls_estats_node_name(name, edge(c),
                         walk(c, "remote_address", "10.0.0.1", NULL));
    assert_string_equal(name, "edge.remote_address_10_0_0_1");
    rls_estats_node_name(name, edge(c), walk(c, "path", "/api/x", NULL));
    assert_string_equal(name, "edge.path_/api/*");
    rls_estats_node_name(name, edge(c), walk(c, "a:b|c", "v", NULL));
    assert_string_equal(name, "edge.a_b_c");
    assert_int_equal(
        rls_estats_node_name(
            name, edge(c), walk(c, "database", "users", "tenant", "t1", NULL)),
        strlen("edge.database_users.tenant"));
    assert_string_equal(name, "edge.database_users.tenant");
    rls_envoy_conf_unref(c);
}

static rl_result_t ok(uint64_t limit, uint64_t remaining)
{
    rl_result_t r;

    memset(&r, 0, sizeof(r));
    r.code = RL_CODE_OK;
    r.limit = limit;
    r.remaining = remaining;
    return r;
}

static rl_result_t over(uint64_t limit, uint64_t remaining, int shadow)
{
    rl_result_t r = ok(limit, remaining);

    r.code = shadow ? RL_CODE_OK : RL_CODE_OVER_LIMIT;
    r.shadow_refused = shadow;
    return r;
}

/* Drives one series with a simulated fixed window of `limit` and returns
 * its counters, as the reference's limiter would leave them. */
static const uint64_t *series(rls_estats_t *t, uint32_t slot)
{
    assert_true(slot > 0 && slot <= t->n);
    return t->s[slot - 1].c;
}

static void counting(void **state)
{
    rls_envoy_conf_t *c = build(conf_a);
    const rls_envoy_node_t *x = walk(c, "remote_address", "9.9.9.9", NULL);
    rls_estats_t t;
    const uint64_t *v;
    uint64_t used = 0, i;
    uint32_t slot;
    rl_result_t r;

    (void)state;
    rls_estats_init(&t, 10);
    slot = rls_estats_slot(&t, c, edge(c), x, 0, NULL, NULL, NULL, NULL, 0);
    /* Twelve single hits on a limit of 10: 10 within (the 9th and 10th
     * past floor(10 * 0.8) = 8 are near), 2 over. */
    for (i = 0; i < 12; i++) {
        if (used + 1 <= 10) {
            used++;
            r = ok(10, 10 - used);
        } else {
            r = over(10, 10 - used, 0);
        }
        rls_estats_count(&t, slot, 1, &r);
    }
    v = series(&t, slot);
    assert_int_equal(v[RLS_ESTAT_TOTAL_HITS], 12);
    assert_int_equal(v[RLS_ESTAT_WITHIN_LIMIT], 10);
    assert_int_equal(v[RLS_ESTAT_NEAR_LIMIT], 2);
    assert_int_equal(v[RLS_ESTAT_OVER_LIMIT], 2);
    assert_int_equal(v[RLS_ESTAT_SHADOW_MODE], 0);

    /* The same node resolves to the same series, without a new one. */
    assert_int_equal(
        rls_estats_slot(&t, c, edge(c), x, 0, NULL, NULL, NULL, NULL, 0), slot);
    assert_int_equal(t.n, 1);

    /* hits_addend 5 on 7 used of 10: the reference counts 2 over and the
     * 2 between max(8, 7) and 10 near; answered OK in shadow mode, the 2
     * over are shadow_mode too. */
    x = walk(c, "path", "/api/v2", NULL);
    slot = rls_estats_slot(&t, c, edge(c), x, 0, NULL, NULL, NULL, NULL, 0);
    r = over(10, 3, 1);
    rls_estats_count(&t, slot, 5, &r);
    v = series(&t, slot);
    assert_int_equal(v[RLS_ESTAT_TOTAL_HITS], 5);
    assert_int_equal(v[RLS_ESTAT_OVER_LIMIT], 2);
    assert_int_equal(v[RLS_ESTAT_NEAR_LIMIT], 2);
    assert_int_equal(v[RLS_ESTAT_SHADOW_MODE], 2);
    assert_int_equal(v[RLS_ESTAT_WITHIN_LIMIT], 0);
    /* Within, from 6 to 9 used with 3 hits: 1 past 8 is near. */
    r = ok(10, 1);
    rls_estats_count(&t, slot, 3, &r);
    assert_int_equal(v[RLS_ESTAT_NEAR_LIMIT], 3);
    assert_int_equal(v[RLS_ESTAT_WITHIN_LIMIT], 3);
    /* NEAR_LIMIT_RATIO 0.5 (--envoy-near-limit-ratio): 3 hits taking
     * 10 from 3 to 6 used: the one past floor(10 * 0.5) = 5 is near (at
     * 0.8 none would be); 3 more, to 7 used: 2 near. */
    t.near_ratio = 0.5;
    r = ok(10, 4);
    rls_estats_count(&t, slot, 3, &r);
    assert_int_equal(v[RLS_ESTAT_NEAR_LIMIT], 4);
    r = ok(10, 3);
    rls_estats_count(&t, slot, 3, &r);
    assert_int_equal(v[RLS_ESTAT_NEAR_LIMIT], 6);
    assert_int_equal(v[RLS_ESTAT_WITHIN_LIMIT], 9);
    t.near_ratio = 0.8;
    /* A store error: total_hits only. */
    r = ok(10, 1);
    r.code = RL_CODE_ERROR;
    rls_estats_count(&t, slot, 4, &r);
    assert_int_equal(v[RLS_ESTAT_TOTAL_HITS], 18);
    assert_int_equal(v[RLS_ESTAT_WITHIN_LIMIT] + v[RLS_ESTAT_OVER_LIMIT], 11);
    rls_estats_free(&t);
    rls_envoy_conf_unref(c);
}

/* Request-supplied limits are named after the request: at most
 * max_values such series, the rest counted as dropped. */
static void value_cap(void **state)
{
    rls_envoy_conf_t *c = build(conf_a);
    const char *keys[2] = {"user", "plan"}, *vals[2] = {NULL, "gold"};
    size_t klens[2] = {4, 4}, vlens[2] = {0, 4};
    char val[16];
    rls_estats_t t;
    uint32_t slot, first = 0;
    rl_result_t r = ok(5, 4);
    int i;

    (void)state;
    rls_estats_init(&t, 3);
    for (i = 0; i < 5; i++) {
        snprintf(val, sizeof(val), "u%d", i);
        vals[0] = val;
        vlens[0] = strlen(val);
        slot = rls_estats_slot(&t, c, edge(c), NULL, 1, keys, klens, vals,
                               vlens, 2);
        if (i == 0)
            first = slot;
        if (i < 3)
            assert_true(slot > 0 && slot <= t.n);
        else
            assert_int_equal(slot, RLS_ESTATS_DROP_VALUE);
        rls_estats_count(&t, slot, 2, &r);
    }
    assert_int_equal(t.values, 3);
    assert_int_equal(t.values_dropped, 4);
    assert_string_equal(t.s[first - 1].name, "edge.user_u0.plan_gold");
    /* A value seen before still counts, under the cap. */
    vals[0] = "u0";
    vlens[0] = 2;
    assert_int_equal(
        rls_estats_slot(&t, c, edge(c), NULL, 1, keys, klens, vals, vlens, 2),
        first);
    /* Node series are not capped by it. */
    slot = rls_estats_slot(&t, c, edge(c), walk(c, "path", "/api/", NULL), 0,
                           NULL, NULL, NULL, NULL, 0);
    assert_true(slot > 0 && slot <= t.n);
    rls_estats_free(&t);
    rls_envoy_conf_unref(c);
}

/* detailed_metric and value_to_metric (given, as the configuration does
 * not carry them yet): the reference's per-value names, under the cap. */
static void per_value_names(void **state)
{
    rls_envoy_conf_t *c = build(conf_a);
    const char *keys[2] = {"database", "tenant"}, *vals[2] = {"users", "t1"};
    size_t klens[2] = {8, 6}, vlens[2] = {5, 2};
    const rls_envoy_node_t *x =
        walk(c, "database", "users", "tenant", "t1", NULL);
    const rls_envoy_node_t *w = walk(c, "path", "/api/x", NULL);
    const char *pk[1] = {"path"}, *pv[1] = {"/api/x"};
    size_t pkl[1] = {4}, pvl[1] = {6};
    rls_estats_t t;
    uint32_t s;

    (void)state;
    rls_estats_init(&t, 3);
    /* detailed_metric: every entry's key_value. */
    s = rls_estats_slot_as(&t, c, edge(c), x, keys, klens, vals, vlens, 2, 1,
                           0);
    assert_true(s > 0 && s <= t.n);
    assert_string_equal(t.s[s - 1].name, "edge.database_users.tenant_t1");
    /* value_to_metric on the key-alone node (level 1): its value from the
     * request, so the same name and series. */
    assert_int_equal(rls_estats_slot_as(&t, c, edge(c), x, keys, klens, vals,
                                        vlens, 2, 0, 2),
                     s);
    /* A wildcard keeps its pattern, unless value_to_metric. */
    s = rls_estats_slot_as(&t, c, edge(c), w, pk, pkl, pv, pvl, 1, 0, 1);
    assert_string_equal(t.s[s - 1].name, "edge.path_/api/x");
    assert_int_equal(t.values, 2);
    /* detailed_metric with an empty value: "key_", as the reference. */
    pv[0] = "";
    pvl[0] = 0;
    s = rls_estats_slot_as(&t, c, edge(c), w, pk, pkl, pv, pvl, 1, 1, 0);
    assert_string_equal(t.s[s - 1].name, "edge.path_");
    /* The cap holds for them. */
    pv[0] = "/api/y";
    pvl[0] = 6;
    assert_int_equal(
        rls_estats_slot_as(&t, c, edge(c), w, pk, pkl, pv, pvl, 1, 0, 1),
        RLS_ESTATS_DROP_VALUE);
    /* Without either, the node's own name. */
    s = rls_estats_slot_as(&t, c, edge(c), w, pk, pkl, pv, pvl, 1, 0, 0);
    assert_string_equal(t.s[s - 1].name, "edge.path_/api/*");
    rls_estats_free(&t);
    rls_envoy_conf_unref(c);
}

/* A reload keeps a descriptor's series by name: its counts go on. */
static void reload(void **state)
{
    rls_envoy_conf_t *a = build(conf_a), *b = build(conf_b);
    rls_estats_t t;
    uint32_t sa, sb, sa2;
    rl_result_t r = ok(100, 99);

    (void)state;
    rls_estats_init(&t, 10);
    sa = rls_estats_slot(&t, a, edge(a),
                         walk(a, "database", "users", "tenant", "x", NULL), 0,
                         NULL, NULL, NULL, NULL, 0);
    rls_estats_count(&t, sa, 1, &r);
    sb = rls_estats_slot(&t, b, edge(b),
                         walk(b, "database", "users", "tenant", "y", NULL), 0,
                         NULL, NULL, NULL, NULL, 0);
    assert_int_equal(sa, sb);
    rls_estats_count(&t, sb, 1, &r);
    assert_int_equal(t.s[sb - 1].c[RLS_ESTAT_TOTAL_HITS], 2);
    /* A call still under the old configuration finds its cache. */
    sa2 = rls_estats_slot(&t, a, edge(a), walk(a, "path", "/api/z", NULL), 0,
                          NULL, NULL, NULL, NULL, 0);
    assert_int_equal(rls_estats_slot(&t, b, edge(b),
                                     walk(b, "path", "/api/q", NULL), 0, NULL,
                                     NULL, NULL, NULL, 0),
                     sa2);
    assert_ptr_equal(t.cache[0].conf, b);
    assert_ptr_equal(t.cache[1].conf, a);
    rls_envoy_conf_unref(a);
    rls_envoy_conf_unref(b);
    /* The table holds its own references: still valid here. */
    rls_estats_free(&t);
}

static void metrics(void **state)
{
    rls_envoy_conf_t *c = build(conf_a);
    rls_estats_t t;
    rl_buf_t b;
    rl_result_t r = over(5, 0, 0);
    uint32_t slot;
    char *page;

    (void)state;
    rls_estats_init(&t, 0);
    rl_buf_init(&b, 1 << 20);
    slot = rls_estats_slot(&t, c, edge(c),
                           walk(c, "remote_address", "10.0.0.1", NULL), 0, NULL,
                           NULL, NULL, NULL, 0);
    rls_estats_count(&t, slot, 3, &r);
    /* Per-value series are off (cap 0): dropped, and counted. */
    assert_int_equal(
        rls_estats_slot(&t, c, edge(c), NULL, 1, (const char *const[]){"k"},
                        (const size_t[]){1}, (const char *const[]){"v"},
                        (const size_t[]){1}, 1),
        RLS_ESTATS_DROP_VALUE);
    rls_estats_count(&t, RLS_ESTATS_DROP_VALUE, 7, &r);
    assert_int_equal(rls_estats_metrics(&t, &b), 0);
    assert_int_equal(rl_buf_append(&b, "", 1), 0);
    page = (char *)rl_buf_rptr(&b);
    assert_non_null(strstr(page, "rl_envoy_rate_limit_over_limit_total{"
                                 "domain=\"edge\",key=\"remote_address_10_0_"
                                 "0_1\"} 3\n"));
    assert_non_null(strstr(page, "rl_envoy_rate_limit_total_hits_total{"
                                 "domain=\"edge\",key=\"remote_address_10_0_"
                                 "0_1\"} 3\n"));
    assert_non_null(strstr(page, "rl_envoy_rate_limit_within_limit_total{"
                                 "domain=\"edge\",key=\"remote_address_10_0_"
                                 "0_1\"} 0\n"));
    assert_non_null(strstr(page, "rl_envoy_stats_values_dropped_total 7\n"));
    rl_buf_free(&b);
    rls_estats_free(&t);
    rls_envoy_conf_unref(c);
}

/* ------------------------------------------------------------------------ */
/* statsd */

static int udp_listener(int *port)
{
    struct sockaddr_in a;
    socklen_t alen = sizeof(a);
    int fd = socket(AF_INET, SOCK_DGRAM, 0), rcvbuf = 1 << 20;

    assert_true(fd >= 0);
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof(rcvbuf));
    memset(&a, 0, sizeof(a));
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
    assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &alen), 0);
    *port = ntohs(a.sin_port);
    return fd;
}

/* Reads datagrams until `want` lines "name:delta|c" have come or 3 s
 * pass, adding each line's delta to the sum for names found in names[].
 * Returns the lines read. */
static int read_lines(int fd, int want, const char *const *names,
                      uint64_t *sums, size_t n, size_t *max_datagram)
{
    char buf[2048];
    struct timespec t0, t1;
    int lines = 0;

    clock_gettime(CLOCK_MONOTONIC, &t0);
    while (lines < want) {
        struct pollfd p = {fd, POLLIN, 0};
        long ms;
        ssize_t got;
        char *line, *save = NULL;

        clock_gettime(CLOCK_MONOTONIC, &t1);
        ms = 3000 - ((t1.tv_sec - t0.tv_sec) * 1000 +
                     (t1.tv_nsec - t0.tv_nsec) / 1000000);
        if (ms <= 0 || poll(&p, 1, (int)ms) <= 0)
            break;
        got = recv(fd, buf, sizeof(buf) - 1, 0);
        assert_true(got > 0);
        assert_true((size_t)got <= RLS_STATSD_PACKET);
        if ((size_t)got > *max_datagram)
            *max_datagram = (size_t)got;
        buf[got] = '\0';
        assert_int_equal(buf[got - 1], '\n');
        for (line = strtok_r(buf, "\n", &save); line != NULL;
             line = strtok_r(NULL, "\n", &save)) {
            char *colon = strrchr(line, ':');
            size_t i;
            assert_non_null(colon);
            assert_non_null(strstr(colon, "|c"));
            *colon = '\0';
            for (i = 0; i < n; i++)
                if (strcmp(line, names[i]) == 0)
                    sums[i] += strtoull(colon + 1, NULL, 10);
            lines++;
        }
    }
    return lines;
}

static void statsd(void **state)
{
    rls_envoy_conf_t *c = build(conf_a);
    static const char *const names[] = {
        "ratelimit.service.rate_limit.edge.remote_address.total_hits",
        "ratelimit.service.rate_limit.edge.remote_address.within_limit",
        "ratelimit.service.rate_limit.edge.remote_address.over_limit",
        "ratelimit.service.rate_limit.edge.path_/api/*.total_hits",
        "ratelimit.service.rate_limit.edge.user_u250.total_hits"};
    uint64_t sums[5] = {0};
    const char *keys[1] = {"user"}, *vals[1];
    size_t klens[1] = {4}, vlens[1], maxd = 0;
    char val[16], err[128];
    rls_estats_t t;
    rls_statsd_t sd;
    uv_loop_t loop;
    rl_result_t r;
    uint32_t slot;
    int fd, port, i, lines = 0;

    (void)state;
    fd = udp_listener(&port);
    assert_int_equal(uv_loop_init(&loop), 0);
    rls_estats_init(&t, 1000);
    assert_int_equal(rls_statsd_start(&sd, &loop, "127.0.0.1", port, 3600000,
                                      rls_estats_statsd, &t, err, sizeof(err)),
                     0);
    slot = rls_estats_slot(&t, c, edge(c),
                           walk(c, "remote_address", "1.1.1.1", NULL), 0, NULL,
                           NULL, NULL, NULL, 0);
    r = ok(10, 5);
    rls_estats_count(&t, slot, 4, &r);
    r = over(10, 0, 0);
    rls_estats_count(&t, slot, 1, &r);
    slot = rls_estats_slot(&t, c, edge(c), walk(c, "path", "/api/1", NULL), 0,
                           NULL, NULL, NULL, NULL, 0);
    r = ok(7, 6);
    rls_estats_count(&t, slot, 1, &r);
    /* 500 per-value series: with 5 counters each moved at most, more
     * lines than one flush's 64 datagrams carry; the rest goes next. */
    for (i = 0; i < 500; i++) {
        snprintf(val, sizeof(val), "u%d", i);
        vals[0] = val;
        vlens[0] = strlen(val);
        slot = rls_estats_slot(&t, c, edge(c), NULL, 1, keys, klens, vals,
                               vlens, 1);
        r = ok(1000, 1000 - 1);
        rls_estats_count(&t, slot, 1, &r);
    }
    /* 2 + 1 + 500 series: 3 lines (total, within, over), 2 (total,
     * within), then total_hits and within_limit of each per-value one.
     * Under a bound of 4 datagrams a flush, that takes several flushes,
     * each resuming where the last stopped. */
    sd.max_packets = 4;
    for (i = 0; i < 40; i++) {
        uint64_t deferred = sd.stats.deferred;
        rls_statsd_flush(&sd);
        lines +=
            read_lines(fd, (int)sd.stats.lines - lines, names, sums, 5, &maxd);
        assert_int_equal(lines, (int)sd.stats.lines);
        if (sd.stats.deferred == deferred)
            break;
    }
    assert_true(sd.stats.deferred >= 3);
    assert_int_equal(lines, 3 + 2 + 2 * 500);
    assert_int_equal(sd.stats.lines_dropped, 0);
    assert_true(maxd > RLS_STATSD_PACKET - 100);
    assert_int_equal(sums[0], 5);
    assert_int_equal(sums[1], 4);
    assert_int_equal(sums[2], 1);
    assert_int_equal(sums[3], 1);
    assert_int_equal(sums[4], 1);

    /* Only what moved since: one more hit sends its deltas, 1 each. */
    memset(sums, 0, sizeof(sums));
    slot = rls_estats_slot(&t, c, edge(c),
                           walk(c, "remote_address", "1.1.1.1", NULL), 0, NULL,
                           NULL, NULL, NULL, 0);
    r = ok(10, 4);
    rls_estats_count(&t, slot, 1, &r);
    rls_statsd_flush(&sd);
    assert_int_equal(read_lines(fd, 2, names, sums, 5, &maxd), 2);
    assert_int_equal(sums[0], 1);
    assert_int_equal(sums[1], 1);

    /* A line longer than a datagram is dropped and counted. */
    {
        char big[RLS_STATSD_PACKET];
        memset(big, 'x', sizeof(big));
        assert_int_equal(
            rls_statsd_counter(&sd, "p.", big, sizeof(big), "total_hits", 1),
            0);
        assert_int_equal(sd.stats.lines_dropped, 1);
    }

    rls_statsd_close(&sd);
    assert_int_equal(uv_run(&loop, UV_RUN_DEFAULT), 0);
    assert_int_equal(uv_loop_close(&loop), 0);
    close(fd);
    rls_estats_free(&t);
    rls_envoy_conf_unref(c);
}

static int parse(rls_flags_t *c, char *err, int argc, char **argv)
{
    rls_flags_defaults(c);
    return rls_flags_parse(c, argc, argv, stdout, err, 256);
}

/* The flags: defaults, --statsd's address, and what it needs. */
static void flags(void **state)
{
    static rls_flags_t c;
    char err[256];
    char *ok[] = {"rl-server", "--grpc",         "127.0.0.1:0",
                  "--statsd",  "127.0.0.1:8125", "--envoy-stats-max-values",
                  "5"};
    char *no_grpc[] = {"rl-server", "--statsd", "127.0.0.1:8125"};
    char *off[] = {"rl-server", "--grpc",   "127.0.0.1:0",   "--envoy-stats",
                   "0",         "--statsd", "127.0.0.1:8125"};
    char *bad[] = {"rl-server", "--grpc", "127.0.0.1:0", "--statsd", "8125"};
    char *near[] = {"rl-server", "--grpc", "127.0.0.1:0",
                    "--envoy-near-limit-ratio", "0.5"};
    char *near0[] = {"rl-server", "--grpc", "127.0.0.1:0",
                     "--envoy-near-limit-ratio", "0"};

    (void)state;
    rls_flags_defaults(&c);
    assert_int_equal(c.envoy_stats, 1);
    assert_int_equal(c.envoy_stats_max_values, 1000);
    assert_int_equal(c.statsd_flush_ms, 1000);
    assert_int_equal(c.statsd_host[0], '\0');
    assert_true(c.envoy_near_ratio == 0.8);
    assert_int_equal(parse(&c, err, 5, near), 0);
    assert_true(c.envoy_near_ratio == 0.5);
    assert_int_equal(parse(&c, err, 5, near0), RL_EINVAL);
    assert_non_null(strstr(err, "--envoy-near-limit-ratio"));
    assert_int_equal(parse(&c, err, 7, ok), 0);
    assert_string_equal(c.statsd_host, "127.0.0.1");
    assert_int_equal(c.statsd_port, 8125);
    assert_int_equal(c.envoy_stats_max_values, 5);
    assert_int_equal(parse(&c, err, 3, no_grpc), RL_EINVAL);
    assert_non_null(strstr(err, "--statsd needs --grpc"));
    assert_int_equal(parse(&c, err, 7, off), RL_EINVAL);
    assert_int_equal(parse(&c, err, 5, bad), RL_EINVAL);
    assert_non_null(strstr(err, "--statsd"));
}

/* ------------------------------------------------------------------------ */
/* The reference's Prometheus names (envoy_prom.c) */

static const char conf_prom[] =
    "domain: domain1\n"
    "descriptors:\n"
    "  - key: key1\n"
    "    value: val1\n"
    "    rate_limit: {unit: second, requests_per_unit: 10}\n"
    "    descriptors:\n"
    "      - key: key2\n"
    "        value: val2\n"
    "        rate_limit: {unit: second, requests_per_unit: 10}\n"
    "  - key: key3\n"
    "    value: val3\n"
    "    descriptors:\n"
    "      - key: key4\n"
    "        value: val4\n"
    "        rate_limit: {unit: second, requests_per_unit: 10}\n"
    "        descriptors:\n"
    "          - key: key5\n"
    "            value: val5\n"
    "            rate_limit: {unit: second, requests_per_unit: 10}\n"
    "  - key: a\n"
    "    descriptors:\n"
    "      - key: b\n"
    "        descriptors:\n"
    "          - key: over_limit\n"
    "            rate_limit: {unit: second, requests_per_unit: 10}\n"
    "  - key: host\n"
    "    value: api.example.com\n"
    "    rate_limit: {unit: second, requests_per_unit: 10}\n"
    "  - key: q\"k\\\n"
    "    rate_limit: {unit: second, requests_per_unit: 10}\n"
    "  - key: quiet\n"
    "    rate_limit: {unit: second, requests_per_unit: 10}\n";

/* The series of the node that pairs (k1, v1, ..., NULL) of domain1 reach,
 * its counters set to c (total_hits, over_limit, near_limit,
 * within_limit, shadow_mode). */
static void set_series(rls_estats_t *t, rls_envoy_conf_t *conf,
                       const uint64_t c[RLS_ESTATS], ...)
{
    const rls_envoy_domain_t *d = rls_envoy_conf_domain(conf, "domain1", 7);
    const rls_envoy_node_t *x = NULL;
    const char *k, *v;
    uint32_t slot;
    va_list ap;

    va_start(ap, c);
    while ((k = va_arg(ap, const char *)) != NULL) {
        v = va_arg(ap, const char *);
        x = rls_envoy_conf_step(conf, d, x, k, strlen(k), v, strlen(v));
        assert_non_null(x);
    }
    va_end(ap);
    slot = rls_estats_slot(t, conf, d, x, 0, NULL, NULL, NULL, NULL, 0);
    assert_true(slot != 0 && slot <= t->n);
    memcpy(t->s[slot - 1].c, c, sizeof(t->s[slot - 1].c));
}

static int count_of(const char *page, const char *what)
{
    int n = 0;

    for (; (page = strstr(page, what)) != NULL; page += strlen(what))
        n++;
    return n;
}

static void prom_names(void **state)
{
    rls_envoy_conf_t *c = build(conf_prom);
    rls_estats_t t;
    rl_buf_t b;
    char *page;

    (void)state;
    rls_estats_init(&t, 0);
    rl_buf_init(&b, 1 << 20);
    /* The reference's TestFlushCounterWithDifferentLabels: over_limit 1,
     * 2, 1 and 2; the last two share their first three components. */
    set_series(&t, c, (const uint64_t[]){1, 1, 0, 0, 0}, "key1", "val1", NULL);
    set_series(&t, c, (const uint64_t[]){2, 2, 0, 0, 0}, "key1", "val1", "key2",
               "val2", NULL);
    set_series(&t, c, (const uint64_t[]){1, 1, 0, 0, 0}, "key3", "val3", "key4",
               "val4", NULL);
    set_series(&t, c, (const uint64_t[]){2, 2, 0, 0, 0}, "key3", "val3", "key4",
               "val4", "key5", "val5", NULL);
    /* A fourth component "over_limit": the unanchored over_limit regex,
     * tried before total_hits' and within_limit's, takes those too. */
    set_series(&t, c, (const uint64_t[]){4, 0, 1, 3, 0}, "a", "1", "b", "2",
               "over_limit", "3", NULL);
    /* Dots of a value split it into components, as in the statsd name. */
    set_series(&t, c, (const uint64_t[]){5, 0, 0, 5, 0}, "host",
               "api.example.com", NULL);
    set_series(&t, c, (const uint64_t[]){1, 0, 0, 1, 0}, "q\"k\\", "v", NULL);
    /* Counted nothing: not shown (gostats flushes no zero). */
    set_series(&t, c, (const uint64_t[]){0, 0, 0, 0, 0}, "quiet", "v", NULL);
    assert_int_equal(rls_estats_metrics(&t, &b), 0);
    assert_int_equal(rl_buf_append(&b, "", 1), 0);
    page = (char *)rl_buf_rptr(&b);
    assert_non_null(
        strstr(page, "# HELP ratelimit_service_rate_limit_over_limit Metric "
                     "autogenerated by statsd_exporter.\n"
                     "# TYPE ratelimit_service_rate_limit_over_limit "
                     "counter\n"));
    assert_non_null(strstr(page, "\nratelimit_service_rate_limit_over_limit{"
                                 "domain=\"domain1\",key1=\"key1_val1\"} 1\n"));
    assert_non_null(strstr(page, "\nratelimit_service_rate_limit_over_limit{"
                                 "domain=\"domain1\",key1=\"key1_val1\","
                                 "key2=\"key2_val2\"} 2\n"));
    assert_non_null(strstr(page, "\nratelimit_service_rate_limit_over_limit{"
                                 "domain=\"domain1\",key1=\"key3_val3\","
                                 "key2=\"key4_val4\"} 3\n"));
    assert_non_null(strstr(page, "\nratelimit_service_rate_limit_total_hits{"
                                 "domain=\"domain1\",key1=\"key3_val3\","
                                 "key2=\"key4_val4\"} 3\n"));
    /* total_hits 4 + within_limit 3 went to over_limit; near_limit's rule
     * comes first and keeps its own. */
    assert_non_null(strstr(page, "\nratelimit_service_rate_limit_over_limit{"
                                 "domain=\"domain1\",key1=\"a\",key2=\"b\"} "
                                 "7\n"));
    assert_non_null(strstr(page, "\nratelimit_service_rate_limit_near_limit{"
                                 "domain=\"domain1\",key1=\"a\",key2=\"b\"} "
                                 "1\n"));
    assert_null(strstr(page, "total_hits{domain=\"domain1\",key1=\"a\""));
    assert_null(strstr(page, "within_limit{domain=\"domain1\",key1=\"a\""));
    assert_non_null(strstr(page, "\nratelimit_service_rate_limit_within_limit{"
                                 "domain=\"domain1\",key1=\"host_api\","
                                 "key2=\"example\"} 5\n"));
    assert_non_null(strstr(page,
                           "\nratelimit_service_rate_limit_total_hits{"
                           "domain=\"domain1\",key1=\"q\\\"k\\\\\"} 1\n"));
    assert_null(strstr(page, "key1=\"quiet\""));
    /* One family header each, zero series of a family left out. */
    assert_int_equal(
        count_of(page, "# TYPE ratelimit_service_rate_limit_over_limit "), 1);
    assert_null(strstr(page, "ratelimit_service_rate_limit_shadow_mode"));
    assert_int_equal(count_of(page, "ratelimit_service_rate_limit_over_limit{"),
                     4);
    rl_buf_free(&b);
    rls_estats_free(&t);
    rls_envoy_conf_unref(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(node_names), cmocka_unit_test(counting),
        cmocka_unit_test(value_cap),  cmocka_unit_test(per_value_names),
        cmocka_unit_test(reload),     cmocka_unit_test(metrics),
        cmocka_unit_test(statsd),     cmocka_unit_test(flags),
        cmocka_unit_test(prom_names),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
