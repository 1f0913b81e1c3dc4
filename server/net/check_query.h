/* What a GET /check request asks (check_query.c): the rule, the caller's
 * key, the cost and the status to refuse with, from the query string and
 * the configured request headers. No I/O and no allocation: the decoded
 * values are copied into fixed buffers, each bounded before a byte is
 * written, so the parser can be fuzzed on its own (tests/fuzz/
 * fuzz_check.c).
 *
 * Query: name=value pairs separated by '&', values percent-decoded
 * (%XX, and '+' for a space, as HTML forms and URLSearchParams encode
 * them). Known names: rule, key, cost, deny_status; others are ignored so
 * that a proxy may add its own. A known name given twice is an error (two
 * components that read it differently must not disagree on the key).
 *
 * Where each value comes from, first found wins:
 *   rule: rule= in the query; else the --check-rule-header header, if set.
 *   key:  key= in the query; else the --check-key-header header, if set.
 * The query wins because it is what the proxy's configuration writes; a
 * header may have come from the client (Traefik's forwardAuth copies every
 * client header to the check). A key header named X-Forwarded-For gives
 * the first address of the list, white space trimmed; any other header
 * gives its whole value, trimmed. */
#ifndef RLS_NET_CHECK_QUERY_H
#define RLS_NET_CHECK_QUERY_H

#include <stddef.h>
#include <stdint.h>

#include "net/http.h"
#include "rl_check.h"

/* Longest request-target /check reads: every byte of the largest key and
 * rule percent-encoded, and room for more parameters. Longer: 414. */
#define RLS_CHECK_TARGET_MAX 4096
/* Longest configured header name. */
#define RLS_CHECK_HEADER_MAX 64

typedef struct rls_check_opts_s {
    /* Lower-case header names; empty: not read. */
    char key_header[RLS_CHECK_HEADER_MAX + 1];
    char rule_header[RLS_CHECK_HEADER_MAX + 1];
    int key_xff; /* key_header is x-forwarded-for: take the first entry */
} rls_check_opts_t;

/* Fills *o from header names as given (any case). Returns 0, or RL_EINVAL
 * when a name is longer than RLS_CHECK_HEADER_MAX or not a token. NULL or
 * "" leaves that header unread. */
int rls_check_opts_init(rls_check_opts_t *o, const char *key_header,
                        const char *rule_header);

typedef struct rls_check_query_s {
    char rule[RL_RULE_MAX];
    size_t rule_len;
    char key[RL_KEY_MAX];
    size_t key_len;
    uint32_t cost;   /* 1 unless cost= says otherwise */
    int deny_status; /* 429 unless deny_status= says 403 */
} rls_check_query_t;

/* Reads the check request q (a head rls_http_parse accepted) into *out.
 * Returns 0; or RL_EINVAL with *why a static, human-readable reason (bad
 * escape, value too long, a NUL in the key, a parameter twice, a missing
 * rule or key, a bad cost or deny_status). The rule's syntax is not
 * checked here (rl_check_validate does, with the native protocol's
 * words). */
int rls_check_query(const rls_http_req_t *q, const rls_check_opts_t *o,
                    rls_check_query_t *out, const char **why);

#endif
