/* The Envoy descriptors in force as text; see envoy_dump.h. */
#include "envoy/dump.h"

#include <stdio.h>
#include <string.h>

#include "policy/limit.h"
#include "rl_error.h"

/* Deeper than any configuration loads (YAML nesting is capped at 64, a
 * descriptor takes two levels of it). */
#define DEPTH_MAX 64

static const char *unit_name(int unit)
{
    static const char *const names[] = {"UNKNOWN", "SECOND", "MINUTE", "HOUR",
                                        "DAY",     "MONTH",  "YEAR",   "WEEK"};

    return unit >= 0 && unit < 8 ? names[unit] : "UNKNOWN";
}

/* The reference's key of x: the domain, then each node up to x as key,
 * or key_value, joined by dots. */
static int put_key(rl_buf_t *out, const rls_envoy_conf_t *c,
                   const rls_envoy_node_t *x)
{
    const rls_envoy_node_t *chain[DEPTH_MAX];
    const rls_envoy_domain_t *d = rls_envoy_conf_domain_at(c, x->domain);
    size_t n = 0;
    int rc;

    while (x != NULL && n < DEPTH_MAX) {
        chain[n++] = x;
        x = x->parent != 0 ? rls_envoy_conf_node_at(c, x->parent - 1) : NULL;
    }
    if ((rc = rl_buf_append(out, d->name, d->name_len)) != RL_OK)
        return rc;
    while (n-- > 0) {
        x = chain[n];
        if ((rc = rl_buf_append(out, ".", 1)) != RL_OK ||
            (rc = rl_buf_append(out, x->key, x->key_len)) != RL_OK)
            return rc;
        if (x->value != NULL && x->value_len > 0 &&
            ((rc = rl_buf_append(out, "_", 1)) != RL_OK ||
             (rc = rl_buf_append(out, x->value, x->value_len)) != RL_OK))
            return rc;
    }
    return RL_OK;
}

static int put_node(rl_buf_t *out, const rls_envoy_conf_t *c,
                    const rls_envoy_node_t *x)
{
    char lim[RLS_LIMIT_FMT_MAX];
    uint64_t rpu = x->lim.limit > UINT32_MAX ? UINT32_MAX : x->lim.limit;
    int rc;

    if ((rc = put_key(out, c, x)) != RL_OK ||
        (rc = rl_buf_printf(out,
                            ": unit=%s requests_per_unit=%llu, shadow_mode: "
                            "%s, quota_mode: %s",
                            unit_name(x->kind == RLS_ENVOY_LIMIT ? x->unit : 0),
                            (unsigned long long)rpu,
                            x->shadow ? "true" : "false",
                            x->quota ? "true" : "false")) != RL_OK)
        return rc;
    if (x->kind == RLS_ENVOY_LIMIT &&
        (x->unit == 0 || x->lim.algo != 0 || x->lim.phase != 0)) {
        rls_limit_format(&x->lim, lim, sizeof(lim));
        if ((rc = rl_buf_printf(out, ", limit: %s", lim)) != RL_OK)
            return rc;
    }
    if (x->kind == RLS_ENVOY_UNLIMITED &&
        (rc = rl_buf_printf(out, ", unlimited: true")) != RL_OK)
        return rc;
    if (x->kind == RLS_ENVOY_RULE &&
        (rc = rl_buf_printf(out, ", rule: %.*s", (int)x->rule_len,
                            x->rule)) != RL_OK)
        return rc;
    if (x->charge && (rc = rl_buf_printf(out, ", charge_only: true")) != RL_OK)
        return rc;
    return rl_buf_append(out, "\n", 1);
}

int rls_envoy_dump(const rls_envoy_conf_t *c, rl_buf_t *out, size_t max)
{
    size_t i, n, start = rl_buf_len(out), left = 0;
    int rc;

    if (c == NULL)
        return RL_OK;
    n = rls_envoy_conf_nodes(c);
    /* The nodes are kept in the files' order, each before its children. */
    for (i = 0; i < n; i++) {
        const rls_envoy_node_t *x = rls_envoy_conf_node_at(c, (uint32_t)i);
        if (x->kind == RLS_ENVOY_NONE)
            continue;
        if (rl_buf_len(out) - start >= max) {
            left++;
            continue;
        }
        if ((rc = put_node(out, c, x)) != RL_OK)
            return rc;
    }
    if (left > 0)
        return rl_buf_printf(out, "# truncated: %zu more limits\n", left);
    return RL_OK;
}
