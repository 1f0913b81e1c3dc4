#include "policy/yaml_in.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rl_error.h"
#include "base/util.h"

int rls_yaml_in_open(rls_yaml_in_t *y, const char *buf, size_t len,
                     int depth_max, rls_diag_t *diag, const char *file)
{
    assert(depth_max > 0 && depth_max <= RLS_YAML_DEPTH_LIMIT);
    memset(y, 0, sizeof(*y));
    y->diag = diag;
    y->file = file;
    if (!yaml_parser_initialize(&y->parser))
        return RL_ENOMEM;
    yaml_parser_set_input_string(&y->parser, (const unsigned char *)buf, len);
    y->depth_max = depth_max;
    /* Keys come from files; a random key still keeps a file crafted to
     * collide from costing more than its size. */
    rls_random_key(&y->hash_key);
    return RL_OK;
}

void rls_yaml_in_close(rls_yaml_in_t *y)
{
    if (y->have)
        yaml_event_delete(&y->ev);
    y->have = 0;
    yaml_parser_delete(&y->parser);
    free(y->keys);
    free(y->bytes);
    free(y->slots);
    y->keys = NULL;
    y->bytes = NULL;
    y->slots = NULL;
}

int rls_yaml_in_line(const rls_yaml_in_t *y)
{
    return (int)y->ev.start_mark.line + 1;
}

int rls_yaml_in_is(const rls_yaml_in_t *y, const char *lit)
{
    size_t n = strlen(lit);

    return rls_yaml_in_is_scalar(y) && y->ev.data.scalar.length == n &&
           memcmp(y->ev.data.scalar.value, lit, n) == 0;
}

int rls_yaml_in_is_null(const rls_yaml_in_t *y)
{
    return rls_yaml_in_is_scalar(y) && y->ev.data.scalar.plain_implicit &&
           (y->ev.data.scalar.length == 0 || rls_yaml_in_is(y, "~") ||
            rls_yaml_in_is(y, "null"));
}

/* Stops the walk, saying why (once: a stopped walk says nothing more). */
static int stop(rls_yaml_in_t *y, int line, const char *why, int nomem)
{
    y->broken = 1;
    y->nomem |= nomem;
    rls_diag_add(y->diag, y->file, line, "%s", why);
    return RL_EINVAL;
}

/* ------------------------------------------------------------------------ */
/* The keys of the open mappings */

static uint64_t key_hash(const rls_yaml_in_t *y, uint32_t serial,
                         const char *k, size_t len)
{
    return rl_hash(&y->hash_key, k, len) ^
           ((uint64_t)serial * UINT64_C(0x9e3779b97f4a7c15));
}

/* The slot of (serial, k) in the set: where it is (*found 1) or where it
 * would go. */
static size_t key_find(const rls_yaml_in_t *y, uint64_t h, uint32_t serial,
                       const char *k, size_t len, int *found)
{
    size_t mask = y->slots_cap - 1, pos;

    *found = 0;
    for (pos = (size_t)h & mask; y->slots[pos] != 0;
         pos = (pos + 1) & mask) {
        const rls_yaml_key_t *e = &y->keys[y->slots[pos] - 1];
        if (e->hash == h && e->serial == serial && e->len == len &&
            (len == 0 || memcmp(y->bytes + e->off, k, len) == 0)) {
            *found = 1;
            break;
        }
    }
    return pos;
}

/* Room for one more key of len bytes. Returns 0 or RL_ENOMEM. */
static int key_reserve(rls_yaml_in_t *y, size_t len)
{
    if (y->nkeys == y->keys_cap) {
        size_t cap = y->keys_cap ? 2 * y->keys_cap : 32;
        rls_yaml_key_t *k = realloc(y->keys, cap * sizeof(*k));
        if (k == NULL)
            return RL_ENOMEM;
        y->keys = k;
        y->keys_cap = cap;
    }
    if (y->bytes_cap - y->nbytes < len) {
        size_t cap = y->bytes_cap ? y->bytes_cap : 1024;
        char *b;
        while (cap - y->nbytes < len)
            cap *= 2;
        if ((b = realloc(y->bytes, cap)) == NULL)
            return RL_ENOMEM;
        y->bytes = b;
        y->bytes_cap = cap;
    }
    if (2 * (y->nkeys + 1) > y->slots_cap) {
        size_t cap = y->slots_cap ? 2 * y->slots_cap : 64, i;
        uint32_t *s = calloc(cap, sizeof(*s));
        int found;
        if (s == NULL)
            return RL_ENOMEM;
        free(y->slots);
        y->slots = s;
        y->slots_cap = cap;
        /* In the order read, so that the last key in is still the one
         * whose slot no other key's probe passed. */
        for (i = 0; i < y->nkeys; i++) {
            rls_yaml_key_t *e = &y->keys[i];
            e->slot = key_find(y, e->hash, e->serial, y->bytes + e->off,
                               e->len, &found);
            y->slots[e->slot] = (uint32_t)i + 1;
        }
    }
    return RL_OK;
}

/* The current scalar is a key of the mapping f: an error if f had it. */
static void key_check(rls_yaml_in_t *y, const rls_yaml_frame_t *f)
{
    const char *k = (const char *)y->ev.data.scalar.value;
    size_t len = y->ev.data.scalar.length, pos;
    uint64_t h = key_hash(y, f->serial, k, len);
    rls_yaml_key_t *e;
    char why[160];
    int found;

    if (key_reserve(y, len) != RL_OK) {
        /* Not a stop: the document is fine; the build fails for want of
         * memory all the same. */
        y->nomem = 1;
        rls_diag_add(y->diag, y->file, rls_yaml_in_line(y), "out of memory");
        return;
    }
    pos = key_find(y, h, f->serial, k, len, &found);
    if (found) {
        snprintf(why, sizeof(why), "key '%.*s' given twice (first at line %u)",
                 (int)(len > 40 ? 40 : len), k,
                 y->keys[y->slots[pos] - 1].line);
        rls_diag_add(y->diag, y->file, rls_yaml_in_line(y), "%s", why);
        return;
    }
    e = &y->keys[y->nkeys];
    e->hash = h;
    e->serial = f->serial;
    e->line = (uint32_t)rls_yaml_in_line(y);
    e->off = y->nbytes;
    e->len = len;
    e->slot = pos;
    if (len > 0)
        memcpy(y->bytes + y->nbytes, k, len);
    y->nbytes += len;
    y->slots[pos] = (uint32_t)++y->nkeys;
}

/* A node at the current event starts inside the innermost collection:
 * in a mapping, a scalar key is checked. */
static void node_starts(rls_yaml_in_t *y)
{
    rls_yaml_frame_t *f;

    if (y->depth == 0)
        return;
    f = &y->frames[y->depth - 1];
    if (f->is_map && f->want_key && !f->own_keys &&
        y->ev.type == YAML_SCALAR_EVENT)
        key_check(y, f);
}

/* A node ended inside the innermost collection: in a mapping, a key is
 * followed by its value and a value by the next key. */
static void node_ends(rls_yaml_in_t *y)
{
    rls_yaml_frame_t *f;

    if (y->depth == 0)
        return;
    f = &y->frames[y->depth - 1];
    if (f->is_map)
        f->want_key = !f->want_key;
}

/* The innermost collection ended: its keys leave the set, newest first. */
static void frame_pop(rls_yaml_in_t *y)
{
    rls_yaml_frame_t *f = &y->frames[y->depth - 1];

    while (y->nkeys > f->mark)
        y->slots[y->keys[--y->nkeys].slot] = 0;
    y->nbytes = f->bytes;
    y->depth--;
}

int rls_yaml_in_next(rls_yaml_in_t *y)
{
    rls_yaml_frame_t *f;
    char why[160];

    if (y->broken)
        return RL_EINVAL;
    if (y->have)
        yaml_event_delete(&y->ev);
    y->have = 0;
    if (!yaml_parser_parse(&y->parser, &y->ev)) {
        snprintf(why, sizeof(why), "not valid YAML: %s%s%s",
                 y->parser.problem ? y->parser.problem : "parse error",
                 y->parser.context ? " " : "",
                 y->parser.context ? y->parser.context : "");
        return stop(y, (int)(y->parser.problem_mark.line + 1), why,
                    y->parser.error == YAML_MEMORY_ERROR);
    }
    y->have = 1;
    switch (y->ev.type) {
    case YAML_SEQUENCE_START_EVENT:
    case YAML_MAPPING_START_EVENT:
        if (y->depth + 1 > y->depth_max) {
            snprintf(why, sizeof(why), "nested deeper than %d levels",
                     y->depth_max);
            return stop(y, rls_yaml_in_line(y), why, 0);
        }
        node_starts(y);
        f = &y->frames[y->depth++];
        memset(f, 0, sizeof(*f));
        f->mark = (uint32_t)y->nkeys;
        f->bytes = y->nbytes;
        if (y->ev.type == YAML_MAPPING_START_EVENT) {
            f->is_map = 1;
            f->want_key = 1;
            f->serial = ++y->serials;
        }
        break;
    case YAML_SEQUENCE_END_EVENT:
    case YAML_MAPPING_END_EVENT:
        if (y->depth > 0)
            frame_pop(y);
        node_ends(y);
        break;
    case YAML_SCALAR_EVENT:
        node_starts(y);
        node_ends(y);
        break;
    case YAML_ALIAS_EVENT:
        return stop(y, rls_yaml_in_line(y),
                    "aliases (*name) are not supported", 0);
    case YAML_NO_EVENT:
        /* Past the end: a walk that lost its place must stop (libyaml
         * hands out empty events forever). Nothing to say: the walk
         * reported what it expected before. */
        y->broken = 1;
        return RL_EINVAL;
    default:
        break;
    }
    return RL_OK;
}

int rls_yaml_in_skip(rls_yaml_in_t *y)
{
    int depth = y->depth;

    if (y->ev.type != YAML_SEQUENCE_START_EVENT &&
        y->ev.type != YAML_MAPPING_START_EVENT)
        return RL_OK;
    while (y->depth >= depth)
        if (rls_yaml_in_next(y) != RL_OK)
            return RL_EINVAL;
    return RL_OK;
}

void rls_yaml_in_own_keys(rls_yaml_in_t *y)
{
    if (y->have && y->ev.type == YAML_MAPPING_START_EVENT && y->depth > 0)
        y->frames[y->depth - 1].own_keys = 1;
}

int rls_yaml_in_next_key(rls_yaml_in_t *y, const char *what, int *ok)
{
    for (;;) {
        if (rls_yaml_in_next(y) != RL_OK)
            return RL_EINVAL;
        if (y->ev.type == YAML_MAPPING_END_EVENT)
            return 0;
        if (rls_yaml_in_is_scalar(y))
            return 1;
        rls_diag_add(y->diag, y->file, rls_yaml_in_line(y), "%s", what);
        if (ok != NULL)
            *ok = 0;
        if (rls_yaml_in_skip(y) != RL_OK || rls_yaml_in_next(y) != RL_OK ||
            rls_yaml_in_skip(y) != RL_OK)
            return RL_EINVAL;
    }
}
