/* RLQS's messages (wire.h). */
#include "rlqs/wire.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef Envoy__Service__RateLimitQuota__V3__RateLimitQuotaResponse resp_t;
typedef Envoy__Service__RateLimitQuota__V3__RateLimitQuotaResponse__BucketAction
    action_t;
typedef Envoy__Service__RateLimitQuota__V3__RateLimitQuotaResponse__BucketAction__QuotaAssignmentAction
    assign_t;
typedef Envoy__Service__RateLimitQuota__V3__RateLimitQuotaResponse__BucketAction__AbandonAction
    abandon_t;

/* Appends s escaped (bytes outside [A-Za-z0-9_.-] as %XX) to dst at *k;
 * 0, or -1 past cap. */
static int esc(char *dst, size_t cap, size_t *k, const char *s)
{
    static const char hex[] = "0123456789ABCDEF";

    for (; *s != '\0'; s++) {
        unsigned char c = (unsigned char)*s;
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
            (c >= '0' && c <= '9') || c == '_' || c == '.' || c == '-') {
            if (*k + 1 >= cap)
                return -1;
            dst[(*k)++] = (char)c;
        } else {
            if (*k + 3 >= cap)
                return -1;
            dst[(*k)++] = '%';
            dst[(*k)++] = hex[c >> 4];
            dst[(*k)++] = hex[c & 15];
        }
    }
    dst[*k] = '\0';
    return 0;
}

static int cmp_entry(const void *a, const void *b)
{
    const rls_rlqs_entry_t *x = *(const rls_rlqs_entry_t *const *)a;
    const rls_rlqs_entry_t *y = *(const rls_rlqs_entry_t *const *)b;

    return strcmp(x->key, y->key);
}

const char *rls_rlqs_bucket_check(const rls_rlqs_bid_t *bid,
                                  rls_rlqs_entry_t **e, char *id, size_t cap)
{
    size_t i, k = 0;

    if (bid == NULL || bid->n_bucket == 0)
        return "a bucket_id with no pairs";
    if (bid->n_bucket > RLS_RLQS_PAIRS_MAX)
        return "a bucket_id with more than 16 pairs";
    for (i = 0; i < bid->n_bucket; i++) {
        e[i] = bid->bucket[i];
        if (e[i]->key[0] == '\0' || e[i]->value[0] == '\0')
            return "a bucket_id with an empty key or value";
        if (strlen(e[i]->key) > RLS_RLQS_NAME_MAX ||
            strlen(e[i]->value) > RLS_RLQS_VALUE_MAX)
            return "a bucket_id key or value too long";
    }
    qsort(e, bid->n_bucket, sizeof(*e), cmp_entry);
    for (i = 0; i < bid->n_bucket; i++) {
        if (i > 0 && strcmp(e[i - 1]->key, e[i]->key) == 0)
            return "a bucket_id with a key twice";
        if (esc(id, cap, &k, e[i]->key) != 0 || k + 1 >= cap)
            return "a bucket_id too long";
        id[k++] = '=';
        if (esc(id, cap, &k, e[i]->value) != 0 || k + 1 >= cap)
            return "a bucket_id too long";
        id[k++] = ',';
        id[k] = '\0';
    }
    return NULL;
}

char *rls_rlqs_budget_key(const char *prefix, const rls_rlqs_rule_t *r,
                          rls_rlqs_entry_t *const *e, size_t n)
{
    char buf[RLS_RLQS_ID_MAX];
    size_t k = 0, i;
    uint32_t j;
    int w = snprintf(buf, sizeof(buf), "%srlqs{", prefix);

    if (w < 0 || (size_t)w >= sizeof(buf))
        return NULL;
    k = (size_t)w;
    if (esc(buf, sizeof(buf), &k, r->name) != 0)
        return NULL;
    for (j = 0; j < r->nmatch; j++) {
        for (i = 0; i < n && strcmp(e[i]->key, r->keys[j]) != 0; i++)
            ;
        if (i == n || k + 2 >= sizeof(buf))
            return NULL;
        buf[k++] = j == 0 ? ':' : '|';
        if (esc(buf, sizeof(buf), &k, e[i]->value) != 0)
            return NULL;
    }
    if (k + 2 >= sizeof(buf))
        return NULL;
    buf[k++] = '}';
    buf[k] = '\0';
    return strdup(buf);
}

/* The message of a, in structures on the caller's stack (r and what it
 * points to). */
typedef struct {
    rls_rlqs_entry_t ents[RLS_RLQS_PAIRS_MAX], *entp[RLS_RLQS_PAIRS_MAX];
    rls_rlqs_bid_t bid;
    action_t act, *actp;
    assign_t as;
    abandon_t ab;
    resp_t resp;
    Google__Protobuf__Duration ttl, fill;
    Google__Protobuf__UInt32Value per;
    Envoy__Type__V3__RateLimitStrategy strat;
    Envoy__Type__V3__TokenBucket tb;
} msg_t;

static void build(const rls_rlqs_action_t *a, msg_t *m)
{
    static const rls_rlqs_entry_t e0 =
        ENVOY__SERVICE__RATE_LIMIT_QUOTA__V3__BUCKET_ID__BUCKET_ENTRY__INIT;
    static const rls_rlqs_bid_t bid0 =
        ENVOY__SERVICE__RATE_LIMIT_QUOTA__V3__BUCKET_ID__INIT;
    static const action_t act0 =
        ENVOY__SERVICE__RATE_LIMIT_QUOTA__V3__RATE_LIMIT_QUOTA_RESPONSE__BUCKET_ACTION__INIT;
    static const assign_t as0 =
        ENVOY__SERVICE__RATE_LIMIT_QUOTA__V3__RATE_LIMIT_QUOTA_RESPONSE__BUCKET_ACTION__QUOTA_ASSIGNMENT_ACTION__INIT;
    static const abandon_t ab0 =
        ENVOY__SERVICE__RATE_LIMIT_QUOTA__V3__RATE_LIMIT_QUOTA_RESPONSE__BUCKET_ACTION__ABANDON_ACTION__INIT;
    static const resp_t resp0 =
        ENVOY__SERVICE__RATE_LIMIT_QUOTA__V3__RATE_LIMIT_QUOTA_RESPONSE__INIT;
    static const Google__Protobuf__Duration d0 =
        GOOGLE__PROTOBUF__DURATION__INIT;
    static const Google__Protobuf__UInt32Value u0 =
        GOOGLE__PROTOBUF__UINT32_VALUE__INIT;
    static const Envoy__Type__V3__RateLimitStrategy s0 =
        ENVOY__TYPE__V3__RATE_LIMIT_STRATEGY__INIT;
    static const Envoy__Type__V3__TokenBucket tb0 =
        ENVOY__TYPE__V3__TOKEN_BUCKET__INIT;
    uint32_t i,
        n = a->npairs < RLS_RLQS_PAIRS_MAX ? a->npairs : RLS_RLQS_PAIRS_MAX;

    for (i = 0; i < n; i++) {
        m->ents[i] = e0;
        m->ents[i].key = (char *)a->keys[i];
        m->ents[i].value = (char *)a->vals[i];
        m->entp[i] = &m->ents[i];
    }
    m->bid = bid0;
    m->bid.n_bucket = n;
    m->bid.bucket = m->entp;
    m->act = act0;
    m->act.bucket_id = &m->bid;
    m->actp = &m->act;
    m->resp = resp0;
    m->resp.n_bucket_action = 1;
    m->resp.bucket_action = &m->actp;
    if (a->what == RLS_RLQS_ABANDON) {
        m->ab = ab0;
        m->act.bucket_action_case =
            ENVOY__SERVICE__RATE_LIMIT_QUOTA__V3__RATE_LIMIT_QUOTA_RESPONSE__BUCKET_ACTION__BUCKET_ACTION_ABANDON_ACTION;
        m->act.abandon_action = &m->ab;
        return;
    }
    m->as = as0;
    m->ttl = d0;
    m->strat = s0;
    m->act.bucket_action_case =
        ENVOY__SERVICE__RATE_LIMIT_QUOTA__V3__RATE_LIMIT_QUOTA_RESPONSE__BUCKET_ACTION__BUCKET_ACTION_QUOTA_ASSIGNMENT_ACTION;
    m->act.quota_assignment_action = &m->as;
    m->ttl.seconds = a->ttl_s;
    m->as.assignment_time_to_live = &m->ttl;
    m->as.rate_limit_strategy = &m->strat;
    if (a->what == RLS_RLQS_BLANKET) {
        m->strat.strategy_case =
            ENVOY__TYPE__V3__RATE_LIMIT_STRATEGY__STRATEGY_BLANKET_RULE;
        m->strat.blanket_rule =
            a->blanket == RLS_RLQS_DENY_ALL
                ? ENVOY__TYPE__V3__RATE_LIMIT_STRATEGY__BLANKET_RULE__DENY_ALL
                : ENVOY__TYPE__V3__RATE_LIMIT_STRATEGY__BLANKET_RULE__ALLOW_ALL;
        return;
    }
    m->tb = tb0;
    m->per = u0;
    m->fill = d0;
    m->strat.strategy_case =
        ENVOY__TYPE__V3__RATE_LIMIT_STRATEGY__STRATEGY_TOKEN_BUCKET;
    m->strat.token_bucket = &m->tb;
    m->tb.max_tokens = a->max_tokens;
    m->per.value = a->per_fill;
    m->tb.tokens_per_fill = &m->per;
    /* Whole seconds: Envoy's filter divides by the interval's seconds. */
    m->fill.seconds = a->fill_s;
    m->tb.fill_interval = &m->fill;
}

size_t rls_rlqs_action_size(const rls_rlqs_action_t *a)
{
    msg_t m;

    build(a, &m);
    return envoy__service__rate_limit_quota__v3__rate_limit_quota_response__get_packed_size(
        &m.resp);
}

void rls_rlqs_action_pack(const rls_rlqs_action_t *a, uint8_t *buf)
{
    msg_t m;

    build(a, &m);
    envoy__service__rate_limit_quota__v3__rate_limit_quota_response__pack(
        &m.resp, buf);
}
