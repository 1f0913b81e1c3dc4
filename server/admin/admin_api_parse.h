/* The admin endpoint's pure parts (admin_api_parse.c): no I/O, no loop,
 * nothing kept between calls, so that each is tested and fuzzed alone.
 *
 *   - a request's method and target: its route and its query
 *     (rls_admin_parse), every bad request a 4xx with a reason;
 *   - a stored quota as the Redis script reads it (rls_admin_quota_parse,
 *     a mirror of redis_script.lua's qparse);
 *   - the token file and the check of an Authorization header
 *     (rls_admin_tokens_*), which keeps only the tokens' SHA-256 and
 *     compares in constant time;
 *   - a JSON string (rls_admin_json_str).
 *
 * The routes (docs/server.md, "The admin listener"):
 *
 *   GET  /                   the routes, one line each
 *   GET  /v1/usage?rule=R&key=K              one caller's state under a
 *   GET  /v1/usage?domain=D&entry=K=V[&...]  rule, or an Envoy descriptor
 *   POST /v1/usage/reset?...                 the same caller's, cleared
 *                                            (&leases=1: its leases too)
 *   GET  /v1/config[?part=rules,switches,envoy]   the configuration in
 *                                                 force
 *   GET  /v1/loops                           the loops of --threads
 *   POST /v1/loops/pause?loop=N              loop N takes no new
 *   POST /v1/loops/resume?loop=N             connection; and again
 *   GET  /v1/top[?rule=R]    the callers refused most under R (a rule's
 *                            name, envoy:DOMAIN, (inline), (other)); no
 *                            rule: every rule with refusals
 *
 * with format=text on the usage and top routes for people, and
 * format=summary on /v1/top for rl-ctl (rl_topk_encode's text). HEAD as
 * GET.
 * Parameters are percent-decoded; an entry's key and value are split at
 * the first '=' before decoding, so "%3D" is an '=' in either. */
#ifndef RLS_ADMIN_API_PARSE_H
#define RLS_ADMIN_API_PARSE_H

#include <stddef.h>
#include <stdint.h>

#include "net/http.h"
#include "policy/limit.h"
#include "rl_buf.h"

enum {
    RLS_ADMIN_INDEX = 1,
    RLS_ADMIN_USAGE,
    RLS_ADMIN_RESET,
    RLS_ADMIN_CONFIG,
    RLS_ADMIN_LOOPS,       /* GET /v1/loops */
    RLS_ADMIN_LOOP_PAUSE,  /* POST /v1/loops/pause?loop=N */
    RLS_ADMIN_LOOP_RESUME, /* POST /v1/loops/resume?loop=N */
    RLS_ADMIN_TOP          /* GET /v1/top */
};

/* /v1/config's parts (a bit each; 0: all). */
#define RLS_ADMIN_PART_RULES 1u
#define RLS_ADMIN_PART_SWITCHES 2u
#define RLS_ADMIN_PART_ENVOY 4u

/* A descriptor's entries (envoy/rls.h's RLS_ENVOY_ENTRIES_MAX). */
#define RLS_ADMIN_ENTRIES_MAX 32

typedef struct rls_admin_req_s {
    int route; /* RLS_ADMIN_* */
    int write; /* POST: needs a token */
    int head;  /* HEAD: the headers alone (the server drops the body) */
    /* The caller: rule and key, or domain and entries (one of the two
     * on the usage routes). Point into buf, decoded; not terminated. */
    const char *rule, *key, *domain;
    size_t rule_len, key_len, domain_len;
    uint32_t nentries;
    const char *ekey[RLS_ADMIN_ENTRIES_MAX], *evalue[RLS_ADMIN_ENTRIES_MAX];
    size_t eklen[RLS_ADMIN_ENTRIES_MAX], evlen[RLS_ADMIN_ENTRIES_MAX];
    int text;       /* format=text */
    int summary;    /* format=summary (/v1/top?rule=R) */
    int leases;     /* leases=1 (reset: clear the leases too) */
    unsigned parts; /* config: RLS_ADMIN_PART_* (0: all) */
    int loop;       /* loop=N (pause, resume): 0 to 999; -1: none */
    char buf[RLS_HTTP_HEAD_MAX];
    size_t used;
} rls_admin_req_t;

/* Parses a request's method and target into *out. Returns 0, or the
 * HTTP status to answer (400: a bad query, a missing or doubled
 * parameter; 404: no such route; 405: a method the route does not take,
 * with *allow its Allow header line, CRLF-terminated) with *why a
 * one-line reason (static, or in out->buf). */
int rls_admin_parse(const char *method, size_t mlen, const char *target,
                    size_t tlen, rls_admin_req_t *out, const char **why,
                    const char **allow);

/* Limits a stored quota may hold, as the script: 8 tokens. */
#define RLS_ADMIN_QUOTA_LIMITS 8

/* A stored quota q[0, len) ("N/S[:ALGO][:burst=B] ...", rl-ctl's form)
 * at scale, exactly as redis_script.lua's qparse reads it (which the
 * module mirrors): 1 to 8 tokens, N >= 1, S 1 s to 366 days, ALGO
 * fixed-window, sliding-window-counter, sliding-window or gcra, no
 * window twice under one algorithm, a burst >= 1 for a gcra alone; the
 * scaled limit floor(N x scale) within [1, 2^63 - 1024], a
 * sliding-window-counter's within 2^36, a sliding window's within 10^6, a
 * gcra's burst x interval within 366 days. Fills out[0, *n) in the
 * quota's order: limit, window_s, algo, and for a gcra burst (the
 * bucket the store decides with) and t_us; phase 0 (a quota's windows
 * are aligned). Returns 0, or RL_EINVAL when the script would ignore the
 * quota (the rule's limits apply). */
int rls_admin_quota_parse(const char *q, size_t len, double scale,
                          rls_limit_t *out, uint32_t *n);

/* The tokens of --admin-token-file: each line "NAME TOKEN" or "TOKEN"
 * (named "token"), blank lines and "#" lines skipped; a token 16 to 512
 * bytes of printable ASCII, a name 1 to 63 of [A-Za-z0-9_.@-]; at most
 * RLS_ADMIN_TOKENS_MAX. Kept as SHA-256 digests alone. */
#define RLS_ADMIN_TOKENS_MAX 16
#define RLS_ADMIN_TOKEN_MIN 16
#define RLS_ADMIN_TOKEN_MAX 512
#define RLS_ADMIN_TOKEN_FILE_MAX 65536

typedef struct rls_admin_tokens_s {
    uint32_t n;
    struct {
        char name[64];
        uint8_t sha[32];
    } t[RLS_ADMIN_TOKENS_MAX];
} rls_admin_tokens_t;

/* Parses the file's text[0, len). Returns 0, or RL_EINVAL with *why
 * (static text) naming what is wrong (never the token itself); no
 * token at all is an error. */
int rls_admin_tokens_parse(const char *text, size_t len,
                           rls_admin_tokens_t *out, const char **why);

/* Reads and parses the file at path. Returns 0, or RL_EIO or RL_EINVAL
 * with a one-line reason in err. */
int rls_admin_tokens_load(const char *path, rls_admin_tokens_t *out, char *err,
                          size_t errlen);

/* Checks an Authorization header's value v[0, vlen) ("Bearer TOKEN"; v
 * NULL: none): the index of the token it names, -1 when it names none
 * (every token is compared, in time that does not depend on where or
 * whether one matches), -2 when the header is missing or not a Bearer
 * token. */
int rls_admin_tokens_check(const rls_admin_tokens_t *t, const char *v,
                           size_t vlen);

/* 1 when host (as --admin names it: an address or "localhost") is a
 * loopback one (127.0.0.0/8, ::1, ::ffff:127.x), else 0. A name other
 * than localhost is not, whatever it resolves to. */
int rls_admin_loopback(const char *host);

/* Appends the string literal s (its bytes, not its NUL). */
#define RLS_BUF_LIT(b, s) rl_buf_append((b), (s), sizeof(s) - 1)

/* Appends s[0, n) to out as a JSON string: quotes, the escapes JSON
 * needs, and each byte that is not part of valid UTF-8 as \u00XX.
 * Returns 0 or the buffer's error. */
int rls_admin_json_str(rl_buf_t *out, const char *s, size_t n);

#endif
