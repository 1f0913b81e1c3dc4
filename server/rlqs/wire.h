/* RLQS's messages (wire.c): a report's bucket id checked and put in its
 * canonical form, a budget's store key, and one BucketAction encoded as
 * a RateLimitQuotaResponse. No I/O: rlqs.c calls these on the loop and
 * tests call them on bytes. */
#ifndef RLS_RLQS_WIRE_H
#define RLS_RLQS_WIRE_H

#include <stddef.h>
#include <stdint.h>

#include "envoy/service/rate_limit_quota/v3/rlqs.pb-c.h"
#include "rlqs/conf.h"

/* Pairs in one bucket id, at most. */
#define RLS_RLQS_PAIRS_MAX 16
/* A canonical bucket id or a budget key, at most, its NUL included. */
#define RLS_RLQS_ID_MAX 2048

typedef Envoy__Service__RateLimitQuota__V3__BucketId rls_rlqs_bid_t;
typedef Envoy__Service__RateLimitQuota__V3__BucketId__BucketEntry
    rls_rlqs_entry_t;

/* Checks a bucket id (1 to RLS_RLQS_PAIRS_MAX pairs, keys and values
 * non-empty, a key RLS_RLQS_NAME_MAX bytes at most and a value
 * RLS_RLQS_VALUE_MAX, no key twice), sorts its entries by key into e
 * (pointers into bid), and writes its canonical text into id (cap
 * bytes): "key=value," for each pair in key order, bytes outside
 * [A-Za-z0-9_.-] as %XX, so that two ids are the same bucket exactly when
 * their texts are equal. Returns NULL, or why it is refused (a static
 * text). */
const char *rls_rlqs_bucket_check(const rls_rlqs_bid_t *bid,
                                  rls_rlqs_entry_t **e, char *id, size_t cap);

/* The store key of the budget rule r takes a bucket id to (its n entries
 * e, sorted or not): "<prefix>rlqs{<rule>:<v1>|<v2>...}", the values of
 * the rule's keys in the rule's order, escaped as above, all in one hash
 * tag (Redis Cluster: one slot). Returns it (malloc'd; the caller frees
 * it), or NULL: a key of r missing from e, longer than RLS_RLQS_ID_MAX,
 * or no memory. */
char *rls_rlqs_budget_key(const char *prefix, const rls_rlqs_rule_t *r,
                          rls_rlqs_entry_t *const *e, size_t n);

/* What one BucketAction says. */
enum { RLS_RLQS_ABANDON, RLS_RLQS_BLANKET, RLS_RLQS_BUCKET };

typedef struct rls_rlqs_action_s {
    const char *const *keys; /* the bucket id, npairs pairs */
    const char *const *vals;
    uint32_t npairs;
    int what;            /* RLS_RLQS_ABANDON, _BLANKET or _BUCKET */
    int blanket;         /* RLS_RLQS_ALLOW_ALL or RLS_RLQS_DENY_ALL */
    uint32_t per_fill;   /* a token bucket's tokens_per_fill, >= 1 */
    uint32_t max_tokens; /* >= 1 */
    uint32_t fill_s;     /* its fill_interval, whole seconds */
    uint32_t ttl_s;      /* the assignment's time to live (seconds only:
                            Envoy reads nothing finer) */
} rls_rlqs_action_t;

/* The size of a's RateLimitQuotaResponse (one bucket_action), and its
 * encoding into buf (that many bytes). */
size_t rls_rlqs_action_size(const rls_rlqs_action_t *a);
void rls_rlqs_action_pack(const rls_rlqs_action_t *a, uint8_t *buf);

#endif
