/* One caller's state under one rule or limit, for the admin endpoint
 * (store/usage.c, server/admin/admin_api.h): what a read of its counters does
 * not give (its stored quota, its leases alive), and a reset (every key
 * named cleared in one atomic step). The counters themselves are read
 * through the store's submit, as the decider's PEEK reads them (a cost of
 * 2 under limits of 1, which every store refuses, writing nothing).
 *
 * Every key of one op key shares its tag "<prefix>{<caller>}", so one
 * step is one Redis script call on one slot (Redis Cluster included), or
 * one memory-store step under the lock of that tag's one stripe. */
#ifndef RLS_STORE_USAGE_H
#define RLS_STORE_USAGE_H

#include <stddef.h>
#include <stdint.h>

typedef struct rls_store_s rls_store_t;

/* Keys one step may name (a rule's windows and a stored quota's, each
 * with the neighbouring windows, and the lease set). */
#define RLS_USAGE_KEYS_MAX 128
/* Longest stored quota read back (rl-ctl writes at most 8 tokens). */
#define RLS_USAGE_QUOTA_MAX 512

typedef struct rls_usage_op_s {
    /* Set by the caller; untouched by the store. */
    const char *const *keys; /* reset: the keys cleared, NUL-terminated */
    const size_t *lens;
    uint32_t nkeys;   /* at most RLS_USAGE_KEYS_MAX */
    size_t tag_len;   /* every key starts with the same tag */
    const char *qkey; /* the quota hash "<tag>:q", or NULL */
    size_t qkey_len;
    const char *qfield; /* its field: the rule */
    size_t qfield_len;
    const char *lkey; /* the lease set "<op key>:c", or NULL */
    size_t lkey_len;
    uint64_t now_ms; /* the store's clock */
    int reset;       /* clear keys (and lkey); 0: read only */
    /* Set by the store before the callback. */
    char quota[RLS_USAGE_QUOTA_MAX + 1]; /* NUL-terminated */
    size_t quota_len;
    int has_quota;    /* a quota is stored (quota_len may be 0) */
    uint64_t leases;  /* leases alive at now_ms, before a reset */
    uint64_t cleared; /* keys that held something and were cleared */
    int err;          /* 0, RL_EINVAL (bad arguments), RL_ESTORE, or
                         RL_EFULL (a quota longer than the buffer) */
} rls_usage_op_t;

typedef void (*rls_usage_cb)(void *data, rls_usage_op_t *u);

/* Runs u on s: the memory store at once (its vtable's usage), a Redis
 * store through one script sent with its command(). cb fires exactly
 * once, before this returns or later; u must stay valid until then. */
void rls_store_usage(rls_store_t *s, rls_usage_op_t *u, rls_usage_cb cb,
                     void *data);

#endif
