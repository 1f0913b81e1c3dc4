/* What the policy loaders share: the rules file (rules.c) and Envoy's
 * descriptor files (envoy_conf.c) both collect their errors, each said at
 * its FILE:LINE, and keep the names and keys they read in an arena that
 * lives as long as what they built. The YAML walk itself is yaml_in.h. */
#ifndef RLS_POLICY_LOADER_H
#define RLS_POLICY_LOADER_H

#include <stddef.h>

/* One error found while building a policy: "FILE:LINE: what" (or
 * "FILE: what" when no line applies, such as "--rule: what" for a flag).
 * Building collects up to RLS_DIAG_MAX and counts the rest. */
#define RLS_DIAG_MAX 32
typedef struct rls_diag_s {
    char msg[RLS_DIAG_MAX][256];
    size_t n;
    size_t dropped; /* errors past RLS_DIAG_MAX */
} rls_diag_t;

/* Adds one error to d, at file:line (line <= 0: at file alone); the
 * message is cut to fit. */
#if defined(__GNUC__)
__attribute__((format(printf, 4, 5)))
#endif
void rls_diag_add(rls_diag_t *d, const char *file, int line, const char *fmt,
                  ...);

/* Chunks of at least 64 KiB, each string NUL-terminated; freed together. */
typedef struct rls_arena_chunk_s rls_arena_chunk_t;
typedef struct rls_arena_s {
    rls_arena_chunk_t *head;
} rls_arena_t;

/* Copies len bytes of s into a, NUL-terminated. Returns the copy, valid
 * until rls_arena_free, or NULL when out of memory. */
char *rls_arena_copy(rls_arena_t *a, const char *s, size_t len);

/* Frees every copy; a is empty after. */
void rls_arena_free(rls_arena_t *a);

#endif
