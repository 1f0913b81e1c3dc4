/* The memory store (memory.c): one process's counters. */
#ifndef RLS_STORE_MEMORY_H
#define RLS_STORE_MEMORY_H

#include <uv.h>

#include "store/store.h"

/* Memory store: counters in a hash table, reclaimed as windows end.
 * Returns NULL on allocation failure. */
rls_store_t *rls_store_memory_new(uv_loop_t *loop);

#endif
