/* What a GET /check request asks (check_query.c): the rule, the caller's
 * key, the cost and the status to refuse with, from the query string and
 * the configured request headers, read straight into the check a front
 * end hands the decider (the ask's rl_check_t), as the native protocol
 * decodes its frame into it. No I/O and no allocation: the decoded bytes
 * go into fixed buffers the check points into, each bounded before a
 * byte is written, so the parser can be fuzzed on its own (tests/fuzz/
 * fuzz_check.c).
 *
 * Query: name=value pairs separated by '&', values percent-decoded
 * (%XX, and '+' for a space, as HTML forms and URLSearchParams encode
 * them). Known names: rule, key, cost, deny_status, op, handle, actual,
 * level; others are ignored so
 * that a proxy may add its own. A known name given twice is an error (two
 * components that read it differently must not disagree on the key),
 * except level.
 *
 * level=KEY=RULE (repeated, up to RL_LEVELS_MAX): the check's levels,
 * decided all or nothing (rl_check_t.levels), the decoded value split at
 * its last '=' (a rule has none; a key may), as rl-check's --level KEY=RULE.
 * Levels stand instead of rule= and key= (and the headers, not read
 * then), in a check (op= check or none).
 *
 * Where each value comes from, first found wins:
 *   rule: rule= in the query; else the --check-rule-header header, if set.
 *   key:  key= in the query; else the --check-key-header header, if set.
 * The query wins because it is what the proxy's configuration writes; a
 * header may have come from the client (Traefik's forwardAuth copies every
 * client header to the check). A key header named X-Forwarded-For gives
 * the entry xff_hops from the right of the list (all its header lines
 * together, in order), white space trimmed; any other header gives its
 * whole value, trimmed. */
#ifndef RLS_NET_CHECK_QUERY_H
#define RLS_NET_CHECK_QUERY_H

#include <stddef.h>
#include <stdint.h>

#include "net/http.h"
#include "rl_msg.h"
#include "rl_validate.h"

/* Longest request-target /check reads: every byte of the largest key and
 * rule percent-encoded, and room for more parameters. Longer: 414. */
#define RLS_CHECK_TARGET_MAX 4096
/* Longest configured header name. */
#define RLS_CHECK_HEADER_MAX 64

typedef struct rls_check_opts_s {
    /* Lower-case header names; empty: not read. */
    char key_header[RLS_CHECK_HEADER_MAX + 1];
    char rule_header[RLS_CHECK_HEADER_MAX + 1];
    int key_xff; /* key_header is x-forwarded-for */
    /* X-Forwarded-For: the key is the address the xff_hops-th trusted
     * proxy appended, counting from the right (1: the last entry, written
     * by the proxy in front of rl-server); 0: the leftmost, which the
     * client wrote itself (only when asked for). */
    unsigned xff_hops;
    /* 400 answers name the problem (the missing parameter, the unknown
     * rule); else a plain status, the detail logged and counted. */
    int error_details;
} rls_check_opts_t;

/* Most trusted hops --check-xff-hops takes. */
#define RLS_CHECK_XFF_HOPS_MAX 16

/* Fills *o from header names as given (any case), with xff_hops 1 and no
 * error details. Returns 0, or RL_EINVAL when a name is longer than
 * RLS_CHECK_HEADER_MAX or not a token. NULL or "" leaves that header
 * unread. */
int rls_check_opts_init(rls_check_opts_t *o, const char *key_header,
                        const char *rule_header);

/* Why a check is refused before it is decided, for the metrics
 * (rl_check_rejected_total{reason}). */
enum {
    RLS_CHECK_BAD_QUERY,    /* bad escape, parameter twice, cost... */
    RLS_CHECK_NO_RULE,      /* neither rule= nor the rule header */
    RLS_CHECK_NO_KEY,       /* neither key= nor a usable key header */
    RLS_CHECK_BAD_KEY,      /* too long, a NUL; a rule name's syntax */
    RLS_CHECK_UNKNOWN_RULE, /* not in the policy (decide's answer) */
    RLS_CHECK_REASONS
};

/* The bytes a check's rl_check_t points into (its decoded rule, key and
 * handle), and what a check asks beyond the rl_check_t. */
typedef struct rls_check_query_s {
    char rule[RL_RULE_MAX];
    char key[RL_KEY_MAX];
    uint8_t handle[RL_HANDLE_MAX];
    /* The levels' keys and rules, decoded one after the other (never
     * longer than the query they came from). */
    char levels[RLS_CHECK_TARGET_MAX];
    size_t levels_len;
    int deny_status; /* 429 unless deny_status= says 403 */
    int reason;      /* RLS_CHECK_*, when refused */
} rls_check_query_t;

/* Reads the check request q (a head rls_http_parse accepted) into *c, its
 * strings pointing into out's buffers (valid while *out is); path_op is
 * what its path says (RL_OP_CHECK for /check, which op= may make a
 * reserve or an acquire; RL_OP_SETTLE, _RELEASE, _RENEW for their POST
 * paths, which op= may only repeat). Of *c it sets rule, key (rule= and
 * key=, or the headers), cost (1 unless cost= says otherwise), op (op=:
 * check, reserve, acquire, settle, release, renew), handle (handle=, hex
 * as answers carry it in X-RateLimit-Handle) and actual (actual=, for a
 * settle), levels (level=; nlevels 0 without), and leaves id, limit and
 * window_s alone. Settle, release and
 * renew need a handle and no rule or key; settle needs actual.
 * Returns 0; or RL_EINVAL with *why a static, human-readable reason (bad
 * escape, value too long, a NUL in the key, a parameter twice, a missing
 * rule or key, a bad cost or deny_status) and out->reason the reason's
 * RLS_CHECK_*. The rule's syntax is not checked here (rl_check_validate
 * does, with the native protocol's words). */
int rls_check_query(const rls_http_req_t *q, const rls_check_opts_t *o,
                    uint32_t path_op, rl_check_t *c, rls_check_query_t *out,
                    const char **why);

#endif
