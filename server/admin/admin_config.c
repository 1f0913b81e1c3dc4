/* The configuration in force, for the admin listener's /v1/config
 * (admin_api.h): what this instance enforces, read from its own state,
 * not from the files (which may have changed since, or under xDS not
 * exist at all).
 *
 *   {"instance": {version, started, store, module, scope, prefix},
 *    "rules":    {source, generation, count, items: [{name, line, mode,
 *                 effective_mode, scale, quotas, concurrency, limits,
 *                 overrides: [{key, limits}]}]},
 *    "switches": {source, version, global, items: [{rule, mode, scale,
 *                 quotas}]},
 *    "envoy":    {source: files|xds|none, files, xds: {server, node,
 *                 version, connected}, domains: [{name, counting,
 *                 headers}], descriptors: [envoy-ratelimit's /rlconfig
 *                 lines (envoy/dump.c)]}}
 *
 * No secret is in it: no Redis address or password (the store's kind
 * alone), no handle secret, no token. */
#include <stdio.h>
#include <string.h>

#include "admin/admin_api_parse.h"
#include "admin/admin_config.h"
#include "admin/admin_usage.h"
#include "envoy/dump.h"
#include "policy/limit.h"
#include "rl_error.h"
#include "version.h"

#define TRY(x)                                                                 \
    do {                                                                       \
        int rc_ = (x);                                                         \
        if (rc_ != RL_OK)                                                      \
            return rc_;                                                        \
    } while (0)

static int put_limits(rl_buf_t *b, const rls_limits_t *ls)
{
    char t[RLS_LIMIT_FMT_MAX];
    uint32_t i;

    TRY(RLS_BUF_LIT(b, "["));
    for (i = 0; i < ls->n; i++) {
        size_t n = rls_limit_format(&ls->w[i], t, sizeof(t));
        if (i)
            TRY(RLS_BUF_LIT(b, ","));
        TRY(rls_admin_json_str(b, t, n));
    }
    return RLS_BUF_LIT(b, "]");
}

static int put_rules(const rls_admin_view_t *s, rl_buf_t *b)
{
    const rls_policy_t *p = s->rt->policy;
    size_t n = rls_policy_count(p), i;
    uint32_t k;

    TRY(RLS_BUF_LIT(b, "\"rules\":{\"source\":"));
    if (s->config_path != NULL)
        TRY(rls_admin_json_str(b, s->config_path, strlen(s->config_path)));
    else
        TRY(RLS_BUF_LIT(b, "null"));
    TRY(rl_buf_printf(b,
                      ",\"rule_flags\":%zu,\"generation\":%llu,"
                      "\"count\":%zu,\"items\":[",
                      s->nrules, (unsigned long long)s->rt->generation, n));
    for (i = 0; i < n; i++) {
        const rls_rule_t *r = rls_policy_rule_at(p, i);
        rls_spec_t spec;
        /* The switches applied: as any caller without an override sees
         * the rule (mode, scale and quotas do not depend on the key). */
        if (rls_runtime_resolve(s->rt, r->name, r->name_len, "", 0, &spec) !=
            RL_OK)
            continue;
        TRY((i ? RLS_BUF_LIT(b, ",{\"name\":") : RLS_BUF_LIT(b, "{\"name\":")));
        TRY(rls_admin_json_str(b, r->name, r->name_len));
        TRY(rl_buf_printf(b,
                          ",\"line\":%d,\"mode\":\"%s\","
                          "\"effective_mode\":\"%s\",\"scale\":%.17g,"
                          "\"quotas\":%s,\"concurrency\":%s,\"limits\":",
                          r->line, rls_mode_name(r->mode),
                          rls_mode_name(spec.mode), spec.scale,
                          spec.quota ? "true" : "false",
                          r->concurrency ? "true" : "false"));
        TRY(put_limits(b, &r->limits));
        TRY(RLS_BUF_LIT(b, ",\"overrides\":["));
        for (k = 0; k < r->noverrides; k++) {
            TRY((k ? RLS_BUF_LIT(b, ",{\"key\":")
                   : RLS_BUF_LIT(b, "{\"key\":")));
            TRY(rls_admin_json_str(b, r->overrides[k].key,
                                   r->overrides[k].key_len));
            TRY(RLS_BUF_LIT(b, ",\"limits\":"));
            TRY(put_limits(b, &r->overrides[k].limits));
            TRY(RLS_BUF_LIT(b, "}"));
        }
        TRY(RLS_BUF_LIT(b, "]}"));
    }
    return RLS_BUF_LIT(b, "]}");
}

static int put_switches(const rls_admin_view_t *s, rl_buf_t *b)
{
    const rls_switches_t *sw = &s->rt->sw;
    size_t i;

    TRY(rl_buf_printf(b, "\"switches\":{\"source\":"));
    if (s->use_redis)
        TRY(rl_buf_printf(b, "\"redis\",\"key\":"));
    else
        TRY(rl_buf_printf(b, "null,\"key\":"));
    {
        char k[RLS_ADMIN_NAME_MAX + 16];
        int n = snprintf(k, sizeof(k), "%spolicy", s->prefix);
        TRY(rls_admin_json_str(b, k, (size_t)n));
    }
    TRY(rl_buf_printf(b, ",\"version\":%lld,\"global\":\"%s\",\"items\":[",
                      (long long)sw->version,
                      sw->global_mode >= 0 ? rls_mode_name(sw->global_mode)
                                           : "default"));
    for (i = 0; i < sw->n; i++) {
        const struct rls_switch_s *it = &sw->items[i];
        TRY((i ? RLS_BUF_LIT(b, ",{\"rule\":") : RLS_BUF_LIT(b, "{\"rule\":")));
        TRY(rls_admin_json_str(b, it->rule, strlen(it->rule)));
        TRY(rl_buf_printf(b, ",\"mode\":"));
        if (it->mode >= 0)
            TRY(rl_buf_printf(b, "\"%s\"", rls_mode_name(it->mode)));
        else
            TRY(RLS_BUF_LIT(b, "null"));
        if (it->scale > 0)
            TRY(rl_buf_printf(b, ",\"scale\":%.17g", it->scale));
        else
            TRY(rl_buf_printf(b, ",\"scale\":null"));
        TRY(rl_buf_printf(b, ",\"quotas\":%s}", it->quotas ? "true" : "false"));
    }
    return RLS_BUF_LIT(b, "]}");
}

static int put_envoy(const rls_admin_view_t *s, rl_buf_t *b)
{
    rls_admin_envoy_t e;
    const rls_envoy_conf_t *conf;
    rl_buf_t dump;
    size_t i, n, at;
    int rc;

    TRY(RLS_BUF_LIT(b, "\"envoy\":{\"source\":"));
    memset(&e, 0, sizeof(e));
    if (!s->envoy(s->arg, &e))
        return RLS_BUF_LIT(b, "null}");
    conf = e.conf;
    if (s->xds_host[0] != '\0') {
        TRY(RLS_BUF_LIT(b, "\"xds\",\"xds\":{\"server\":"));
        {
            char hp[RLS_ADMIN_NAME_MAX + 16];
            int k = snprintf(hp, sizeof(hp), "%s:%d", s->xds_host, s->xds_port);
            TRY(rls_admin_json_str(b, hp, (size_t)k));
        }
        TRY(RLS_BUF_LIT(b, ",\"node\":"));
        {
            const char *node =
                s->xds_node_id != NULL ? s->xds_node_id : "default";
            TRY(rls_admin_json_str(b, node, strlen(node)));
        }
        TRY(RLS_BUF_LIT(b, ",\"version\":"));
        if (e.xds_version != NULL)
            TRY(rls_admin_json_str(b, e.xds_version, strlen(e.xds_version)));
        else
            TRY(RLS_BUF_LIT(b, "null"));
        TRY(rl_buf_printf(b, ",\"connected\":%s}",
                          e.xds_connected ? "true" : "false"));
    } else {
        TRY(RLS_BUF_LIT(b, "\"files\",\"files\":["));
        for (i = 0; i < s->nenvoy_configs; i++) {
            if (i)
                TRY(RLS_BUF_LIT(b, ","));
            TRY(rls_admin_json_str(b, s->envoy_configs[i],
                                   strlen(s->envoy_configs[i])));
        }
        TRY(RLS_BUF_LIT(b, "]"));
    }
    TRY(RLS_BUF_LIT(b, ",\"domains\":["));
    n = conf != NULL ? rls_envoy_conf_domains(conf) : 0;
    for (i = 0; i < n; i++) {
        const rls_envoy_domain_t *d =
            rls_envoy_conf_domain_at(conf, (uint32_t)i);
        int c = rls_envoy_conf_counting(d);
        TRY((i ? RLS_BUF_LIT(b, ",{\"name\":") : RLS_BUF_LIT(b, "{\"name\":")));
        TRY(rls_admin_json_str(b, d->name, d->name_len));
        TRY(rl_buf_printf(b, ",\"counting\":\"%s\",\"headers\":%u}",
                          c == RLS_ENVOY_COUNT_NATIVE ? "native"
                          : c == RLS_ENVOY_COUNT_STOP ? "envoy-stop"
                                                      : "envoy",
                          d->headers));
    }
    TRY(RLS_BUF_LIT(b, "],\"descriptors\":["));
    /* envoy-ratelimit's /rlconfig lines, one string each. */
    rl_buf_init(&dump, RLS_ADMIN_OUT_MAX);
    rc = rls_envoy_dump(conf, &dump, RLS_ADMIN_OUT_MAX);
    for (at = 0, i = 0; rc == RL_OK && at < rl_buf_len(&dump); i++) {
        const char *l = (const char *)rl_buf_rptr(&dump) + at;
        const char *nl = memchr(l, '\n', rl_buf_len(&dump) - at);
        size_t ln = nl != NULL ? (size_t)(nl - l) : rl_buf_len(&dump) - at;
        if (i)
            rc = RLS_BUF_LIT(b, ",");
        if (rc == RL_OK)
            rc = rls_admin_json_str(b, l, ln);
        at += ln + 1;
    }
    rl_buf_free(&dump);
    TRY(rc);
    return RLS_BUF_LIT(b, "]}");
}

int rls_admin_config(const rls_admin_view_t *s, unsigned parts, rl_buf_t *out)
{
    int fleet;
    const char *store = rls_admin_store_name(s, &fleet);

    if (parts == 0)
        parts = RLS_ADMIN_PART_RULES | RLS_ADMIN_PART_SWITCHES |
                RLS_ADMIN_PART_ENVOY;
    TRY(rl_buf_printf(out,
                      "{\"instance\":{\"version\":\"%s\","
                      "\"started_unix_ms\":%llu,\"store\":\"%s\","
                      "\"module\":%s,\"scope\":\"%s\",\"prefix\":",
                      RLS_VERSION, (unsigned long long)s->start_unix_ms, store,
                      s->store->stats.redis_module ? "true" : "false",
                      fleet ? "fleet" : "instance"));
    TRY(rls_admin_json_str(out, s->prefix, s->prefix_len));
    TRY(RLS_BUF_LIT(out, "}"));
    if (parts & RLS_ADMIN_PART_RULES) {
        TRY(RLS_BUF_LIT(out, ","));
        TRY(put_rules(s, out));
    }
    if (parts & RLS_ADMIN_PART_SWITCHES) {
        TRY(RLS_BUF_LIT(out, ","));
        TRY(put_switches(s, out));
    }
    if (parts & RLS_ADMIN_PART_ENVOY) {
        TRY(RLS_BUF_LIT(out, ","));
        TRY(put_envoy(s, out));
    }
    return RLS_BUF_LIT(out, "}\n");
}
