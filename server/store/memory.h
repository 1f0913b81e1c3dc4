/* The memory store (memory.c): one process's counters. */
#ifndef RLS_STORE_MEMORY_H
#define RLS_STORE_MEMORY_H

#include <stddef.h>
#include <stdint.h>

#include <uv.h>

#include "store/store.h"

/* The cap on the store's memory unless told otherwise: fits a small VM. */
#define RLS_MEMORY_MAX_DEFAULT ((uint64_t)256 << 20)

/* Memory store: counters in a hash table, reclaimed as windows end, at most
 * RLS_MEMORY_MAX_DEFAULT bytes of them. Returns NULL on allocation
 * failure. */
rls_store_t *rls_store_memory_new(uv_loop_t *loop);

/* Caps the bytes the store holds (counters, their table and groups, as
 * malloc holds them; see stats.mem_bytes) at max_bytes > 0. A new counter
 * that would pass it is refused: its op fails with RL_ENOMEM and
 * stats.mem_full is set until expiry brings the store below 7/8 of the
 * cap. Counters that exist keep counting. */
void rls_store_memory_set_max(rls_store_t *s, uint64_t max_bytes);

/* Frees up to one sweep's worth of counters that expired by now_ms, as the
 * store's timer does every 250 ms on the wall clock; for tests on a
 * scripted clock. Returns how many counters it freed. */
size_t rls_store_memory_sweep(rls_store_t *s, uint64_t now_ms);

#endif
