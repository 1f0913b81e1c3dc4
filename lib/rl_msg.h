/* CheckRequest / CheckResponse codec (proto/ratelimit.proto).
 *
 * These two messages are small and sit on every hot path, so they are
 * encoded and decoded here by hand rather than through protobuf-c's
 * descriptor-driven runtime: decoding is zero-copy (strings point into the
 * frame, with their exact lengths, so a NUL inside a key is visible) and
 * allocates nothing. The generated protobuf-c code remains the reference:
 * tests check this codec against it byte for byte. Unknown fields are
 * skipped, so newer peers that add fields still interoperate. */
#ifndef RL_MSG_H
#define RL_MSG_H

#include <stddef.h>
#include <stdint.h>

#include "rl_buf.h"

typedef enum {
    RL_CODE_UNKNOWN = 0,
    RL_CODE_OK = 1,
    RL_CODE_OVER_LIMIT = 2,
    RL_CODE_ERROR = 3
} rl_code_t;

/* What an id-0 response (a notice about the connection) announces, in its
 * `notice` field, so that a peer tells notices apart by number, never by
 * their text. RL_NOTICE_NONE is every other notice, and every notice of a
 * server older than the field. */
typedef enum {
    RL_NOTICE_NONE = 0,
    RL_NOTICE_GOAWAY = 1 /* the server is stopping: send no more here */
} rl_notice_t;

/* What a CheckRequest does (CheckRequest.Op). */
typedef enum {
    RL_OP_CHECK = 0,
    RL_OP_RESERVE = 1,
    RL_OP_SETTLE = 2,
    RL_OP_ACQUIRE = 3,
    RL_OP_RELEASE = 4,
    RL_OP_RENEW = 5,
    RL_OP_MAX
} rl_op_t;

/* The longest handle a server returns or takes. */
#define RL_HANDLE_MAX 512

/* Levels a request may name (CheckRequest.levels, field 20): decided all
 * or nothing, each a key and a rule. */
#define RL_LEVELS_MAX 8

/* One level of a CheckRequest: whose counters (key) under which rule. */
typedef struct rl_level_s {
    const char *key;
    size_t key_len;
    const char *rule;
    size_t rule_len;
} rl_level_t;

/* A CheckRequest. Strings are not NUL-terminated; NULL with length 0 is the
 * empty string. */
typedef struct rl_check_s {
    uint64_t id;
    const char *key;
    size_t key_len;
    uint32_t cost;
    uint64_t limit;
    uint32_t window_s;
    const char *rule;
    size_t rule_len;
    uint32_t op;           /* RL_OP_*; others may come from newer clients */
    const uint8_t *handle; /* RL_OP_SETTLE, _RELEASE, _RENEW */
    size_t handle_len;
    uint64_t actual; /* RL_OP_SETTLE: the cost really used */
    /* Levels decided all or nothing (field 20): key, rule, limit and
     * window_s stay empty beside them. The first RL_LEVELS_MAX are in
     * levels; nlevels is how many the message holds, counted up to
     * RL_LEVELS_MAX + 1, which rl_check_validate refuses. */
    rl_level_t levels[RL_LEVELS_MAX];
    uint32_t nlevels;
} rl_check_t;

/* A CheckResponse. */
typedef struct rl_result_s {
    uint64_t id;
    int32_t code; /* rl_code_t; other values may come from newer servers */
    uint64_t limit;
    uint64_t used;
    uint64_t remaining;
    uint64_t reset_after_ms;
    uint64_t retry_after_ms;
    const char *error;
    size_t error_len;
    int32_t notice;     /* rl_notice_t, with id 0 only */
    int shadow_refused; /* allowed by a rule in shadow mode that refused */
    uint32_t window_s;  /* the deciding window's length; 0 if unknown */
    uint32_t algorithm; /* the deciding limit's (RL_ALGO_*: 0 fixed window,
                           1 sliding-window-counter, 2 gcra) */
    uint64_t decided_at_ms; /* when it was decided, ms since the Unix epoch
                               on the store's clock (the one every
                               instance shares); 0 if not decided */
    const uint8_t *handle;  /* RL_OP_RESERVE, _ACQUIRE when allowed */
    size_t handle_len;
    uint64_t expires_at_ms; /* the reservation's or lease's end */
    int failed_open;        /* OK because the store could not answer */
    uint32_t level; /* a request of levels: the deciding one, 1-based (the
                       level that refused, or when allowed the one with
                       the least room left); 0 otherwise */
    /* Not on the wire: the server's answer to a group (rls_decide_group)
     * also says how each level stands, per_level[i] the request's level i
     * (nper_level of them, NULL and 0 otherwise), each as its own answer:
     * allowed, charged there (counts including the request); refused, the
     * levels without room OVER_LIMIT and the others OK with the room they
     * have (nothing charged anywhere); code 0 for a level left out (mode
     * off). Valid only while the answer is. */
    const struct rl_result_s *per_level;
    uint32_t nper_level;
} rl_result_t;

/* The GOAWAY notice: id 0, code ERROR, notice RL_NOTICE_GOAWAY and the
 * text of RL_ESHUTDOWN for people reading it. */
extern const rl_result_t rl_goaway_notice;

/* Returns 1 when r is a GOAWAY notice (id 0, code ERROR, notice
 * RL_NOTICE_GOAWAY), else 0. The text is not looked at. */
int rl_result_is_goaway(const rl_result_t *r);

/* Decode a payload. Strings in *out point into p, valid while p is.
 * Return 0 or RL_EDECODE (truncated, overlong varint, bad wire type). */
int rl_check_decode(const uint8_t *p, size_t n, rl_check_t *out);
int rl_result_decode(const uint8_t *p, size_t n, rl_result_t *out);

/* Exact encoded sizes (proto3: zero-valued fields are omitted). */
size_t rl_check_size(const rl_check_t *c);
size_t rl_result_size(const rl_result_t *r);

/* Encode into p, which has at least the *_size() bytes; return bytes
 * written. */
size_t rl_check_encode(const rl_check_t *c, uint8_t *p);
size_t rl_result_encode(const rl_result_t *r, uint8_t *p);

/* Append one whole frame (header + message) to b. Return 0, RL_EFULL or
 * RL_ENOMEM; on error b is unchanged. */
int rl_check_put(rl_buf_t *b, const rl_check_t *c);
int rl_result_put(rl_buf_t *b, const rl_result_t *r);

/* Takes the next response off the front of b: decodes its frame (payload at
 * most max_payload bytes) and its message, then consumes the frame.
 * Returns RL_OK with *r filled (its strings point into b's storage and stay
 * valid until the next reserve, append or free on b); RL_EAGAIN when no
 * whole frame is buffered yet; RL_EFRAMEFLAG, RL_EFRAMESIZE or RL_EDECODE
 * when the stream is broken. Nothing is consumed unless RL_OK. */
int rl_result_take(rl_buf_t *b, uint32_t max_payload, rl_result_t *r);

#endif
