/* A YAML document read event by event with libyaml (yaml_in.c), for the
 * rules file (rules.c) and Envoy's descriptor files (envoy_conf.c): the
 * parts of the walk that do not depend on what the document means. It
 * keeps the current event, the nesting depth (bounded), and stops for
 * good at the first broken event: bad YAML, an alias, nesting past the
 * bound, or a read past the end.
 *
 * It also enforces what libyaml's event parser leaves to its caller: the
 * keys of a mapping are unique. A key given twice is an error naming both
 * lines (the walk goes on, so every error is still reported), whatever
 * the mapping means; a caller that checks a mapping's keys itself, with
 * a message of its own, says so (rls_yaml_in_own_keys). The keys of the
 * mappings open around the current event are kept for that (copied: an
 * event's text lives until the next event), and dropped when their
 * mapping ends. */
#ifndef RLS_POLICY_YAML_IN_H
#define RLS_POLICY_YAML_IN_H

#include <stddef.h>
#include <stdint.h>

#include <yaml.h>

#include "policy/loader.h"
#include "rl_hash.h"

/* Nesting a walk can be asked to allow, at most. */
#define RLS_YAML_DEPTH_LIMIT 64

/* A sequence or mapping open around the current event. */
typedef struct rls_yaml_frame_s {
    uint32_t serial;  /* mappings: numbered from 1 in the walk */
    uint32_t mark;    /* keys held when it opened */
    size_t bytes;     /* key bytes held when it opened */
    uint8_t is_map;
    uint8_t want_key; /* mappings: the next node is a key */
    uint8_t own_keys; /* the caller checks this mapping's keys */
} rls_yaml_frame_t;

typedef struct rls_yaml_key_s {
    uint64_t hash;
    uint32_t serial, line;
    size_t off, len; /* in the key bytes */
    size_t slot;     /* where it sits in the set */
} rls_yaml_key_t;

typedef struct rls_yaml_in_s {
    yaml_parser_t parser;
    yaml_event_t ev; /* the current event, owned until the next */
    int have;        /* ev holds an event to delete */
    int depth;       /* sequences and maps open around ev */
    int depth_max;
    int broken;      /* stopped: every rls_yaml_in_next fails */
    rls_diag_t *diag; /* hears each error, at file:line */
    const char *file;
    int nomem; /* stopped: libyaml or the key set ran out of memory */
    rls_yaml_frame_t frames[RLS_YAML_DEPTH_LIMIT];
    uint32_t serials;
    /* The keys of the open mappings, in the order read (a stack), their
     * bytes, and a set over them: open-addressed, at most half full, each
     * slot a key's index + 1. Keys leave in the reverse of their order,
     * which lets a linear-probing set drop them by emptying their slots. */
    rls_yaml_key_t *keys;
    size_t nkeys, keys_cap;
    char *bytes;
    size_t nbytes, bytes_cap;
    uint32_t *slots;
    size_t slots_cap;
    rl_hash_key_t hash_key;
} rls_yaml_in_t;

/* Prepares to read len bytes of buf (which must outlive y), nesting at
 * most depth_max (<= RLS_YAML_DEPTH_LIMIT) deep. Each error goes to diag
 * at file:line: a key given twice (the walk goes on), and once why the
 * walk stopped (nomem set when that was memory). Returns 0, or RL_ENOMEM
 * with nothing to close. */
int rls_yaml_in_open(rls_yaml_in_t *y, const char *buf, size_t len,
                     int depth_max, rls_diag_t *diag, const char *file);

/* Frees what y holds. */
void rls_yaml_in_close(rls_yaml_in_t *y);

/* Advances to the next event. Returns 0, or RL_EINVAL once stopped (the
 * first time telling diag why). A key given twice is told to diag and is
 * not a stop. */
int rls_yaml_in_next(rls_yaml_in_t *y);

/* The current event's line, 1-based. */
int rls_yaml_in_line(const rls_yaml_in_t *y);

/* Skips the value the current event starts (nothing for a scalar).
 * Returns 0 or RL_EINVAL. */
int rls_yaml_in_skip(rls_yaml_in_t *y);

/* The current event is a scalar. */
static inline int rls_yaml_in_is_scalar(const rls_yaml_in_t *y)
{
    return y->ev.type == YAML_SCALAR_EVENT;
}

/* The current scalar's bytes (valid until the next event) and length. */
static inline const char *rls_yaml_in_str(const rls_yaml_in_t *y, size_t *len)
{
    *len = y->ev.data.scalar.length;
    return (const char *)y->ev.data.scalar.value;
}

/* The current event is the scalar lit, exactly. */
int rls_yaml_in_is(const rls_yaml_in_t *y, const char *lit);

/* The current event is YAML's null: a plain empty, ~ or null scalar. */
int rls_yaml_in_is_null(const rls_yaml_in_t *y);

/* Moves to the next key of the mapping being read. A key that is not a
 * scalar (a YAML complex key) is told to diag as `what` (the walk goes
 * on), skipped with its value, and clears *ok when ok is not NULL.
 * Returns 1 at a scalar key, 0 at the end of the mapping, or RL_EINVAL. */
int rls_yaml_in_next_key(rls_yaml_in_t *y, const char *what, int *ok);

/* At a MAPPING_START: the caller finds this mapping's duplicate keys
 * itself (it indexes them anyway, and has a better message). */
void rls_yaml_in_own_keys(rls_yaml_in_t *y);

#endif
