/* What fuzz_conn.c's harness and its scripted store (fuzz_conn_store.c)
 * share: the store's modes and its state. What the store does is in
 * fuzz_conn.c's opening comment. */
#ifndef RL_FUZZ_CONN_H
#define RL_FUZZ_CONN_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "store/store.h"

#define FAIL(...)                                                              \
    do {                                                                       \
        fprintf(stderr, "fuzz_conn: " __VA_ARGS__);                            \
        fputc('\n', stderr);                                                   \
        abort();                                                               \
    } while (0)

/* How the store answers a batch: at once, later (a command releases it),
 * failed whole, or with some ops failed on their own. */
enum { ST_NOW, ST_LATER, ST_ESTORE, ST_ETIMEDOUT, ST_PEROP, ST_MODES };
/* What it reports as the windows' counts before the batch: its own
 * counters, or counts someone else left there (near INT64_MAX, zero,
 * decremented below zero, the lowest a Redis reply parses to, small). */
enum { CT_REAL, CT_NEAR_MAX, CT_ZERO, CT_NEG, CT_SMALL, CT_MIN, CT_STYLES };
/* Twists, as bits: TW_LIE reports an admitted count that disagrees with
 * the counts (a store bug: the batcher must still answer every request
 * once); TW_QUOTA gives half the rule ops a stored quota's windows (quota_win),
 * as the Redis script does for a caller with one. */
enum { TW_LIE = 1, TW_QUOTA = 2 };

typedef struct pend_s {
    rls_op_t *ops;
    size_t n;
    rls_store_cb cb;
    void *data;
    struct pend_s *next;
} pend_t;

typedef struct {
    rls_store_t base;
    uint64_t now;
    int mode, style, twist;
    int lied;         /* a TW_LIE answer went out */
    unsigned salt;    /* varies per-op errors and counts */
    int64_t ctr[256]; /* CT_REAL counters, by counter key hash */
    pend_t *pend;     /* deferred batches, oldest first */
    size_t npend;
} fstore_t;

/* One store byte: mode, count style, twists. */
void fs_modes(unsigned m, int *mode, int *style, int *twist);

/* Answers the deferred batch at position i. */
void fs_release(fstore_t *fs, size_t i, int mode, int style, int twist);

/* The store's functions; the harness owns its memory (fstore_t). */
extern const rls_store_vtbl_t fs_vtbl;

#endif
