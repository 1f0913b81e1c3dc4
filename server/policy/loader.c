#include "policy/loader.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void rls_diag_add(rls_diag_t *d, const char *file, int line, const char *fmt,
                  ...)
{
    char *m;
    size_t cap = sizeof(d->msg[0]);
    va_list ap;
    int k;

    if (d->n >= RLS_DIAG_MAX) {
        d->dropped++;
        return;
    }
    m = d->msg[d->n++];
    k = line > 0 ? snprintf(m, cap, "%s:%d: ", file, line)
                 : snprintf(m, cap, "%s: ", file);
    if (k < 0)
        k = 0;
    if ((size_t)k >= cap)
        return; /* a name that long leaves no room: the prefix says where */
    va_start(ap, fmt);
    vsnprintf(m + k, cap - (size_t)k, fmt, ap);
    va_end(ap);
}

struct rls_arena_chunk_s {
    rls_arena_chunk_t *next;
    size_t used, cap;
    char data[];
};

#define ARENA_CHUNK 65536

char *rls_arena_copy(rls_arena_t *a, const char *s, size_t len)
{
    rls_arena_chunk_t *c = a->head;
    char *out;

    if (c == NULL || c->cap - c->used < len + 1) {
        size_t cap = len + 1 > ARENA_CHUNK ? len + 1 : ARENA_CHUNK;
        if ((c = malloc(sizeof(*c) + cap)) == NULL)
            return NULL;
        c->next = a->head;
        c->used = 0;
        c->cap = cap;
        a->head = c;
    }
    out = c->data + c->used;
    if (len > 0)
        memcpy(out, s, len);
    out[len] = '\0';
    c->used += len + 1;
    return out;
}

void rls_arena_free(rls_arena_t *a)
{
    rls_arena_chunk_t *c, *next;

    for (c = a->head; c != NULL; c = next) {
        next = c->next;
        free(c);
    }
    a->head = NULL;
}
