/* The memory store (memory.c): one process's counters.
 *
 * Counters live in a table (rls_memtab_t) that one loop or several share;
 * each loop calls it through a front of its own, an rls_store_t made by
 * rls_store_memory_new (a table of its own) or rls_store_memory_new_shared
 * (a table shared with other loops, on other threads). Every front of a
 * table sees the same counters, decided exactly as by one store: an op
 * takes the lock of the one stripe its tag's keys are in. */
#ifndef RLS_STORE_MEMORY_H
#define RLS_STORE_MEMORY_H

#include <stddef.h>
#include <stdint.h>

#include <uv.h>

#include "store/store.h"

/* The cap on the store's memory unless told otherwise: fits a small VM. */
#define RLS_MEMORY_MAX_DEFAULT ((uint64_t)256 << 20)

/* Stripes of a shared table unless told otherwise; a table has fewer when
 * its cap leaves each less than RLS_MEMTAB_STRIPE_MIN_BYTES. */
#define RLS_MEMTAB_STRIPES_DEFAULT 64
#define RLS_MEMTAB_STRIPE_MIN_BYTES ((uint64_t)16 << 10)

typedef struct rls_memtab_s rls_memtab_t;

/* Memory store: counters in a hash table of their own, reclaimed as
 * windows end, at most RLS_MEMORY_MAX_DEFAULT bytes of them, used by this
 * loop only (no lock is taken). Returns NULL on allocation failure. */
rls_store_t *rls_store_memory_new(uv_loop_t *loop);

/* A table for several loops: stripes (0: RLS_MEMTAB_STRIPES_DEFAULT;
 * rounded down to a power of two, and to fewer while a stripe's share of
 * max_bytes would be under RLS_MEMTAB_STRIPE_MIN_BYTES; at least 1), each
 * with its lock and max_bytes / stripes of the cap. Returns it holding one
 * reference, the caller's (rls_memtab_release), or NULL on allocation
 * failure. Thread-safe from then on. */
rls_memtab_t *rls_memtab_new(uint64_t max_bytes, unsigned stripes);

/* Drops a reference to t; the last one frees it. The fronts hold one
 * each, so a caller may release its own as soon as it made them. NULL is
 * ignored. */
void rls_memtab_release(rls_memtab_t *t);

/* A front on loop over table t (which it holds a reference to, until its
 * close callback): the store the batcher of that loop calls. Made on
 * loop's thread, or before loop runs (it starts the front's timer); its
 * submit, xop and close run on loop's thread, and its callbacks fire
 * there, before submit returns, as rls_store_memory_new's. Returns NULL
 * on allocation failure. */
rls_store_t *rls_store_memory_new_shared(uv_loop_t *loop, rls_memtab_t *t);

/* The stats of a front: batches, ops and errors are its own (sum them over
 * a table's fronts); mem_bytes, mem_max, mem_full and mem_refused are the
 * table's, the same in every front (never sum them), as of the front's
 * last batch, xop, sweep tick (250 ms) or call below. */

/* Caps the bytes s's table holds (counters, their tables and groups, as
 * malloc holds them; see stats.mem_bytes) at max_bytes > 0, each stripe
 * holding at most its share. A new counter that would pass its stripe's
 * share is refused: its op fails with RL_ENOMEM and stats.mem_full is set
 * until expiry brings that stripe below 7/8 of its share. Counters that
 * exist keep counting. Called on s's loop's thread (it refreshes s's
 * stats); the cap is the table's, for every front. */
void rls_store_memory_set_max(rls_store_t *s, uint64_t max_bytes);

/* Frees up to one sweep's worth of counters of s's table that expired by
 * now_ms, as one table sweep does every 250 ms on the wall clock; for
 * tests on a scripted clock; on s's loop's thread, and while another
 * thread sweeps it waits. Returns how many counters it looked at. */
size_t rls_store_memory_sweep(rls_store_t *s, uint64_t now_ms);

#endif
