/* rl-fit's access-log line parsers: nginx/Apache combined format and JSON
 * lines, and the caller-key expression that picks a caller from a line.
 *
 * A line comes from outside: every parser reads only p[0, n), never
 * more, bounds its work by n (JSON nesting by RLF_JSON_DEPTH), allocates
 * nothing, and answers a malformed line with RL_EINVAL. What it returns
 * points into the line. */
#ifndef RLF_LOG_H
#define RLF_LOG_H

#include <stddef.h>
#include <stdint.h>

/* Longest line read; a longer one is skipped and counted as malformed. */
#define RLF_LINE_MAX 16384
/* Terms of a key expression ("user|addr"), and a field name's length. */
#define RLF_KEY_TERMS 4
#define RLF_NAME_MAX 64
/* Nesting skipped inside a JSON line's values. */
#define RLF_JSON_DEPTH 32
/* Largest cost a line may carry. */
#define RLF_COST_MAX 1000000000u

enum { RLF_FMT_COMBINED = 1, RLF_FMT_JSON = 2 };

/* Returned by the parsers for a well-formed line on which no term of the
 * key expression is present: counted apart from malformed lines. */
#define RLF_NOKEY 1

typedef struct rlf_name_s {
    char s[RLF_NAME_MAX + 1];
    size_t len; /* 0: not set */
} rlf_name_t;

typedef struct rlf_conf_s {
    int fmt;                       /* RLF_FMT_* */
    rlf_name_t key[RLF_KEY_TERMS]; /* the expression's terms, in order */
    size_t nkey;
    rlf_name_t time; /* json: the time field */
    rlf_name_t cost; /* json: the cost field (unset: 1) */
} rlf_conf_t;

typedef struct rlf_line_s {
    uint64_t ms;     /* ms since the Unix epoch */
    uint64_t cost;   /* 1 unless a cost field says otherwise */
    const char *key; /* the first present term's value, inside the line */
    size_t key_len;
    unsigned term; /* which term it is (0 .. nkey-1) */
} rlf_line_t;

/* Sets a name from s[0, n); RL_EINVAL if empty or longer than
 * RLF_NAME_MAX. */
int rlf_name_set(rlf_name_t *nm, const char *s, size_t n);

/* Parses a key expression: field names separated by '|', the first
 * present one is the caller (combined format: user = the remote user
 * unless "-", addr = the remote address, ident). Returns 0 or RL_EINVAL
 * (and *why). */
int rlf_key_parse(rlf_conf_t *c, const char *expr, const char **why);

/* One line, without its newline (a trailing CR is ignored). Returns 0,
 * RLF_NOKEY or RL_EINVAL. */
int rlf_parse_combined(const rlf_conf_t *c, const char *p, size_t n,
                       rlf_line_t *out);
int rlf_parse_json(const rlf_conf_t *c, const char *p, size_t n,
                   rlf_line_t *out);
int rlf_parse_line(const rlf_conf_t *c, const char *p, size_t n,
                   rlf_line_t *out);

/* A time as logs write it: "10/Oct/2000:13:55:36 -0700" (combined),
 * ISO 8601 "2000-10-10T13:55:36[.fff](Z|+hh:mm|-hhmm)", or decimal Unix
 * seconds with an optional fraction (an integer part of 11 digits or more
 * is taken as milliseconds). Returns 0 or RL_EINVAL. */
int rlf_parse_time(const char *p, size_t n, uint64_t *ms);

#endif
