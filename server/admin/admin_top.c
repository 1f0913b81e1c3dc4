/* /v1/top: see admin_top.h. */
#include "admin/admin_top.h"

#include <stdlib.h>
#include <string.h>

#include "core/top.h"
#include "rl_error.h"

#define TRY(x)                                                                 \
    do {                                                                       \
        int rc_ = (x);                                                         \
        if (rc_ != RL_OK)                                                      \
            goto out;                                                          \
    } while (0)

/* A key for people: printable ASCII as it is, any other byte \xNN. */
static int put_text_key(rl_buf_t *b, const char *k, size_t n)
{
    size_t i;
    int rc = RL_OK;

    for (i = 0; i < n && rc == RL_OK; i++) {
        unsigned char c = (unsigned char)k[i];
        rc = c >= 0x20 && c < 0x7f && c != '\\'
                 ? rl_buf_append(b, k + i, 1)
                 : rl_buf_printf(b, "\\x%02x", c);
    }
    return rc;
}

static int one_rule(const rls_admin_view_t *v, const rls_admin_req_t *q,
                    uint64_t now, rl_buf_t *b)
{
    rls_top_t *t = v->top;
    rl_topk_sum_t s;
    uint64_t since;
    size_t i;
    int rc;

    if ((rc = rls_top_read(t, q->rule, q->rule_len, now, t->k, &s, &since)) !=
        RL_OK)
        return rc;
    if (q->summary) {
        rc = rl_topk_encode(&s, since, now, b);
        rl_topk_sum_free(&s);
        return rc;
    }
    if (q->text) {
        TRY(rc = rl_buf_printf(b,
                               "top offenders of %.*s on this instance: %llu "
                               "refusals in the last %llu s (epochs of %llu "
                               "s, k=%u)\n",
                               (int)q->rule_len, q->rule,
                               (unsigned long long)s.total,
                               (unsigned long long)((now - since) / 1000),
                               (unsigned long long)(t->epoch_ms / 1000), t->k));
        if (s.n > 0)
            TRY(rc = RLS_BUF_LIT(b, "     refused       error  key\n"));
        for (i = 0; i < s.n; i++) {
            TRY(rc = rl_buf_printf(b, "%12llu %11llu  ",
                                   (unsigned long long)s.e[i].count,
                                   (unsigned long long)s.e[i].err));
            TRY(rc = put_text_key(b, s.e[i].key, s.e[i].len));
            TRY(rc = rl_buf_printf(b, "%s\n",
                                   s.e[i].cut ? "  (cut: a longer key)" : ""));
        }
        TRY(rc = rl_buf_printf(b,
                               "a caller not listed was refused at most %llu "
                               "times\n",
                               (unsigned long long)s.floor));
        goto out;
    }
    TRY(rc = RLS_BUF_LIT(b, "{\"rule\":"));
    TRY(rc = rls_admin_json_str(b, q->rule, q->rule_len));
    TRY(rc = rl_buf_printf(b,
                           ",\"scope\":\"instance\",\"k\":%u,\"window_s\":%llu,"
                           "\"since_unix_ms\":%llu,\"now_unix_ms\":%llu,"
                           "\"refused\":%llu,\"floor\":%llu,\"top\":[",
                           t->k, (unsigned long long)(t->epoch_ms / 1000),
                           (unsigned long long)since, (unsigned long long)now,
                           (unsigned long long)s.total,
                           (unsigned long long)s.floor));
    for (i = 0; i < s.n; i++) {
        if (i)
            TRY(rc = RLS_BUF_LIT(b, ","));
        TRY(rc = RLS_BUF_LIT(b, "{\"key\":"));
        TRY(rc = rls_admin_json_str(b, s.e[i].key, s.e[i].len));
        TRY(rc = rl_buf_printf(
                b, ",\"cut\":%s,\"refused\":%llu,\"error\":%llu}",
                s.e[i].cut ? "true" : "false", (unsigned long long)s.e[i].count,
                (unsigned long long)s.e[i].err));
    }
    TRY(rc = RLS_BUF_LIT(b, "]}\n"));
out:
    rl_topk_sum_free(&s);
    return rc;
}

/* Every rule with refusals in the window, with its first caller. */
static int all_rules(const rls_admin_view_t *v, const rls_admin_req_t *q,
                     uint64_t now, rl_buf_t *b)
{
    rls_top_t *t = v->top;
    char(*names)[RL_RULE_MAX + 1] = NULL;
    size_t n = 0, i;
    int rc;

    if ((rc = rls_top_names(t, now, &names, &n)) != RL_OK)
        return rc;
    if (q->text)
        TRY(rc = rl_buf_printf(b,
                               "rules with refusals on this instance (epochs "
                               "of %llu s, k=%u)\n",
                               (unsigned long long)(t->epoch_ms / 1000), t->k));
    else
        TRY(rc = rl_buf_printf(b,
                               "{\"scope\":\"instance\",\"k\":%u,\"window_s\":"
                               "%llu,\"now_unix_ms\":%llu,\"rules\":[",
                               t->k, (unsigned long long)(t->epoch_ms / 1000),
                               (unsigned long long)now));
    for (i = 0; i < n; i++) {
        rl_topk_sum_t s;
        uint64_t since;
        size_t len = strlen(names[i]);
        if ((rc = rls_top_read(t, names[i], len, now, 1, &s, &since)) != RL_OK)
            goto out;
        if (q->text) {
            rc = rl_buf_printf(b, "  %-40s %12llu refusals", names[i],
                               (unsigned long long)s.total);
            if (rc == RL_OK && s.n > 0 &&
                (rc = RLS_BUF_LIT(b, ", most: ")) == RL_OK)
                rc = put_text_key(b, s.e[0].key, s.e[0].len);
            if (rc == RL_OK)
                rc = RLS_BUF_LIT(b, "\n");
        } else {
            rc = i ? RLS_BUF_LIT(b, ",") : RL_OK;
            if (rc == RL_OK)
                rc = RLS_BUF_LIT(b, "{\"rule\":");
            if (rc == RL_OK)
                rc = rls_admin_json_str(b, names[i], len);
            if (rc == RL_OK)
                rc = rl_buf_printf(b, ",\"refused\":%llu",
                                   (unsigned long long)s.total);
            if (rc == RL_OK && s.n > 0 &&
                (rc = RLS_BUF_LIT(b, ",\"most\":")) == RL_OK &&
                (rc = rls_admin_json_str(b, s.e[0].key, s.e[0].len)) == RL_OK)
                rc = rl_buf_printf(b, ",\"most_refused\":%llu",
                                   (unsigned long long)s.e[0].count);
            if (rc == RL_OK)
                rc = RLS_BUF_LIT(b, "}");
        }
        rl_topk_sum_free(&s);
        if (rc != RL_OK)
            goto out;
    }
    if (!q->text)
        TRY(rc = RLS_BUF_LIT(b, "]}\n"));
out:
    free(names);
    return rc;
}

int rls_admin_top(const rls_admin_view_t *v, const rls_admin_req_t *q,
                  rl_buf_t *out)
{
    uint64_t now = v->store->v->now_ms(v->store);

    return q->rule != NULL ? one_rule(v, q, now, out)
                           : all_rules(v, q, now, out);
}
