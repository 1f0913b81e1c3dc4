/* Inside the Envoy descriptor configuration: what its tree (conf.c) and
 * its YAML reader (conf_yaml.c) share. No other file includes this. */
#ifndef RLS_ENVOY_CONF_INT_H
#define RLS_ENVOY_CONF_INT_H

#include <stddef.h>
#include <stdint.h>

#include "policy/loader.h"
#include "rl_hash.h"

/* The types are envoy/conf.h's, named by their tags: this header is below
 * both files that include it. */
struct rls_envoy_node_s;
struct rls_envoy_domain_s;

struct rls_envoy_conf_s {
    unsigned refs;
    struct rls_envoy_node_s *nodes;
    size_t n, cap;
    struct rls_envoy_domain_s *domains;
    size_t nd, dcap;
    uint32_t *index; /* node index + 1, by (domain, parent, key, value) */
    uint32_t *wild;  /* indexes of wildcard nodes, in file order */
    size_t nwild;
    uint32_t mask;
    rl_hash_key_t hash_key;
    rls_arena_t arena; /* names, keys and values */
    rls_diag_t warnings;
};

typedef struct rls_envoy_builder_s {
    struct rls_envoy_conf_s *c;
    rls_diag_t *d;
    const char *file;
    int nomem;
    int swl_line; /* the file's first sliding-window rate_limit, or 0 */
} rls_envoy_builder_t;

/* A new configuration, empty, with one reference. NULL without memory. */
struct rls_envoy_conf_s *rls_envoy_conf_new(void);

/* Ends b's build: indexes every node (a duplicate is an error at
 * lines[k], the line of node k; lines is freed), then returns 0 with *out
 * set, or frees the configuration and returns RL_EINVAL (errors in b->d)
 * or RL_ENOMEM. */
int rls_envoy_conf_finish(rls_envoy_builder_t *b, int *lines,
                          struct rls_envoy_conf_s **out);

#endif
