/* google.protobuf.Value, Struct and ListValue built by hand, the one way:
 * every piece (values, structs, lists, their arrays, copied strings) comes
 * from one pool and is freed with it, after the message is packed. The
 * descriptor files' metadata (envoy/conf.c) and the responses'
 * dynamic_metadata (envoy/rls.c) are built here.
 *
 * Out of memory, a call returns NULL (or adds nothing) and sets nomem;
 * a NULL value given to rls_pbv_set or rls_pbv_push adds nothing, so a
 * caller builds a whole message and checks nomem once. */
#ifndef RLS_ENVOY_PBVALUE_H
#define RLS_ENVOY_PBVALUE_H

#include <stddef.h>

#include "google/protobuf/struct.pb-c.h"

typedef Google__Protobuf__Value rls_pbv_value_t;
typedef Google__Protobuf__Struct rls_pbv_struct_t;
typedef Google__Protobuf__ListValue rls_pbv_list_t;

typedef struct rls_pbv_s {
    void **p; /* every block, freed by rls_pbv_free */
    size_t n, cap;
    int nomem;
} rls_pbv_t;

/* An empty pool (allocates nothing). */
void rls_pbv_init(rls_pbv_t *m);

/* Frees every block of the pool. */
void rls_pbv_free(rls_pbv_t *m);

/* size zeroed bytes from the pool. */
void *rls_pbv_alloc(rls_pbv_t *m, size_t size);

/* s[0, n) copied into the pool, NUL-terminated. */
char *rls_pbv_strdup(rls_pbv_t *m, const char *s, size_t n);

/* Values of each kind. A string is borrowed: it must outlive the packing
 * (copy it with rls_pbv_strdup when it does not). */
rls_pbv_value_t *rls_pbv_null(rls_pbv_t *m);
rls_pbv_value_t *rls_pbv_bool(rls_pbv_t *m, int b);
rls_pbv_value_t *rls_pbv_number(rls_pbv_t *m, double d);
rls_pbv_value_t *rls_pbv_string(rls_pbv_t *m, const char *s);
/* A struct value, its Struct empty (v->struct_value). */
rls_pbv_value_t *rls_pbv_struct(rls_pbv_t *m);
/* A list value, its ListValue empty (v->list_value). */
rls_pbv_value_t *rls_pbv_list(rls_pbv_t *m);

/* An empty Struct, for a message's top. */
rls_pbv_struct_t *rls_pbv_struct_new(rls_pbv_t *m);

/* A struct value holding st (borrowed). */
rls_pbv_value_t *rls_pbv_value_of(rls_pbv_t *m, rls_pbv_struct_t *st);

/* Appends the field (key, v) to st, key borrowed; the fields array grows
 * at powers of two. Nothing when v is NULL. */
void rls_pbv_set(rls_pbv_t *m, rls_pbv_struct_t *st, const char *key,
                 rls_pbv_value_t *v);

/* Appends v to l, as rls_pbv_set does. */
void rls_pbv_push(rls_pbv_t *m, rls_pbv_list_t *l, rls_pbv_value_t *v);

#endif
