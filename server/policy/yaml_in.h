/* A YAML document read event by event with libyaml (yaml_in.c), for the
 * rules file (rules.c) and Envoy's descriptor files (envoy_conf.c): the
 * parts of the walk that do not depend on what the document means. It
 * keeps the current event, the nesting depth (bounded), and stops for
 * good at the first broken event: bad YAML, an alias, nesting past the
 * bound, or a read past the end. Nothing here reserves memory but
 * libyaml's own. */
#ifndef RLS_POLICY_YAML_IN_H
#define RLS_POLICY_YAML_IN_H

#include <stddef.h>

#include <yaml.h>

/* Told once, when the walk stops: where (line, 1-based) and why, and
 * whether libyaml ran out of memory. */
typedef void (*rls_yaml_stop_fn)(void *arg, int line, const char *why,
                                 int nomem);

typedef struct rls_yaml_in_s {
    yaml_parser_t parser;
    yaml_event_t ev; /* the current event, owned until the next */
    int have;        /* ev holds an event to delete */
    int depth;       /* sequences and maps open around ev */
    int depth_max;
    int broken;      /* stopped: every rls_yaml_next fails */
    rls_yaml_stop_fn on_stop;
    void *arg;
} rls_yaml_in_t;

/* Prepares to read len bytes of buf (which must outlive y), nesting at
 * most depth_max deep; on_stop(arg, ...) hears why it stopped, once.
 * Returns 0, or RL_ENOMEM with nothing to close. */
int rls_yaml_in_open(rls_yaml_in_t *y, const char *buf, size_t len,
                     int depth_max, rls_yaml_stop_fn on_stop, void *arg);

/* Frees what y holds. */
void rls_yaml_in_close(rls_yaml_in_t *y);

/* Advances to the next event. Returns 0, or RL_EINVAL once stopped (the
 * first time telling on_stop why). */
int rls_yaml_in_next(rls_yaml_in_t *y);

/* The current event's line, 1-based. */
int rls_yaml_in_line(const rls_yaml_in_t *y);

/* Skips the value the current event starts (nothing for a scalar).
 * Returns 0 or RL_EINVAL. */
int rls_yaml_in_skip(rls_yaml_in_t *y);

#endif
