/* google.protobuf.Value built from one pool; see pbvalue.h. */
#include "envoy/pbvalue.h"

#include <stdlib.h>
#include <string.h>

void rls_pbv_init(rls_pbv_t *m)
{
    memset(m, 0, sizeof(*m));
}

void rls_pbv_free(rls_pbv_t *m)
{
    size_t i;

    for (i = 0; i < m->n; i++)
        free(m->p[i]);
    free(m->p);
    rls_pbv_init(m);
}

void *rls_pbv_alloc(rls_pbv_t *m, size_t size)
{
    void *p;

    if (m->n == m->cap) {
        size_t cap = m->cap ? m->cap * 2 : 32;
        void **np = realloc(m->p, cap * sizeof(*np));
        if (np == NULL) {
            m->nomem = 1;
            return NULL;
        }
        m->p = np;
        m->cap = cap;
    }
    if ((p = calloc(1, size)) == NULL) {
        m->nomem = 1;
        return NULL;
    }
    m->p[m->n++] = p;
    return p;
}

char *rls_pbv_strdup(rls_pbv_t *m, const char *s, size_t n)
{
    char *p = rls_pbv_alloc(m, n + 1);

    if (p != NULL)
        memcpy(p, s, n);
    return p;
}

static rls_pbv_value_t *value(rls_pbv_t *m, Google__Protobuf__Value__KindCase k)
{
    rls_pbv_value_t *v = rls_pbv_alloc(m, sizeof(*v));

    if (v != NULL) {
        google__protobuf__value__init(v);
        v->kind_case = k;
    }
    return v;
}

rls_pbv_value_t *rls_pbv_null(rls_pbv_t *m)
{
    return value(m, GOOGLE__PROTOBUF__VALUE__KIND_NULL_VALUE);
}

rls_pbv_value_t *rls_pbv_bool(rls_pbv_t *m, int b)
{
    rls_pbv_value_t *v = value(m, GOOGLE__PROTOBUF__VALUE__KIND_BOOL_VALUE);

    if (v != NULL)
        v->bool_value = b != 0;
    return v;
}

rls_pbv_value_t *rls_pbv_number(rls_pbv_t *m, double d)
{
    rls_pbv_value_t *v = value(m, GOOGLE__PROTOBUF__VALUE__KIND_NUMBER_VALUE);

    if (v != NULL)
        v->number_value = d;
    return v;
}

rls_pbv_value_t *rls_pbv_string(rls_pbv_t *m, const char *s)
{
    rls_pbv_value_t *v = value(m, GOOGLE__PROTOBUF__VALUE__KIND_STRING_VALUE);

    if (v != NULL)
        v->string_value = (char *)s;
    return v;
}

rls_pbv_struct_t *rls_pbv_struct_new(rls_pbv_t *m)
{
    rls_pbv_struct_t *st = rls_pbv_alloc(m, sizeof(*st));

    if (st != NULL)
        google__protobuf__struct__init(st);
    return st;
}

rls_pbv_value_t *rls_pbv_struct(rls_pbv_t *m)
{
    rls_pbv_value_t *v = value(m, GOOGLE__PROTOBUF__VALUE__KIND_STRUCT_VALUE);

    if (v != NULL && (v->struct_value = rls_pbv_struct_new(m)) == NULL)
        return NULL;
    return v;
}

rls_pbv_value_t *rls_pbv_value_of(rls_pbv_t *m, rls_pbv_struct_t *st)
{
    rls_pbv_value_t *v = value(m, GOOGLE__PROTOBUF__VALUE__KIND_STRUCT_VALUE);

    if (v != NULL)
        v->struct_value = st;
    return v;
}

rls_pbv_value_t *rls_pbv_list(rls_pbv_t *m)
{
    rls_pbv_value_t *v = value(m, GOOGLE__PROTOBUF__VALUE__KIND_LIST_VALUE);
    rls_pbv_list_t *l;

    if (v == NULL || (l = rls_pbv_alloc(m, sizeof(*l))) == NULL)
        return NULL;
    google__protobuf__list_value__init(l);
    v->list_value = l;
    return v;
}

/* The array a of n pointers with room for one more: a itself, or at each
 * power of two a new one from the pool (the old stays in the pool). NULL
 * without memory. */
static void *grow(rls_pbv_t *m, void *a, size_t n, size_t size)
{
    void *na;

    if (n != 0 && (n & (n - 1)) != 0)
        return a;
    if ((na = rls_pbv_alloc(m, (n ? n * 2 : 1) * size)) != NULL && n > 0)
        memcpy(na, a, n * size);
    return na;
}

void rls_pbv_set(rls_pbv_t *m, rls_pbv_struct_t *st, const char *key,
                 rls_pbv_value_t *v)
{
    Google__Protobuf__Struct__FieldsEntry *e, **f;

    if (v == NULL || (e = rls_pbv_alloc(m, sizeof(*e))) == NULL)
        return;
    google__protobuf__struct__fields_entry__init(e);
    e->key = (char *)key;
    e->value = v;
    if ((f = grow(m, st->fields, st->n_fields, sizeof(*f))) == NULL)
        return;
    st->fields = f;
    st->fields[st->n_fields++] = e;
}

void rls_pbv_push(rls_pbv_t *m, rls_pbv_list_t *l, rls_pbv_value_t *v)
{
    rls_pbv_value_t **a;

    if (v == NULL ||
        (a = grow(m, l->values, l->n_values, sizeof(*a))) == NULL)
        return;
    l->values = a;
    l->values[l->n_values++] = v;
}
