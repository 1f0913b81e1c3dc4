/* The memory store's full state (memory_tab.h): a stripe that refuses a
 * new counter, or takes them again, tells its table here, which keeps the
 * count of full stripes and warns, at most once a second for the table.
 * Apart from memory.c so that a stripe (memory_stripe.c) calls down into
 * it, never back up into the table's fronts. */
#include <stdatomic.h>
#include <stdint.h>

#include <uv.h>

#include "base/log.h"
#include "store/memory_tab.h"

#define WARN_EVERY_MS 1000 /* "store full" warnings, at most one per */

/* Monotonic ms, the same clock on every thread. */
static uint64_t mono_ms(void)
{
    return uv_hrtime() / 1000000;
}

/* Warns that new counters are being refused, with how many since the last
 * warning, at most once per WARN_EVERY_MS for the table (whichever loop
 * wins the warning's time says it); the sweep calls it too, so the last
 * refusals of a burst are reported. */
void rls_memtab_warn_full(rls_memtab_t *t)
{
    uint64_t now = mono_ms(), n;
    uint64_t at = atomic_load_explicit(&t->warned_at, memory_order_relaxed);

    if (atomic_load_explicit(&t->unwarned, memory_order_relaxed) == 0 ||
        (at != 0 && now - at < WARN_EVERY_MS))
        return;
    if (!atomic_compare_exchange_strong_explicit(
            &t->warned_at, &at, now ? now : 1, memory_order_relaxed,
            memory_order_relaxed))
        return;
    n = atomic_exchange_explicit(&t->unwarned, 0, memory_order_relaxed);
    if (n == 0)
        return;
    RLS_WARN("memory store full: new counters refused (--memory-max)",
             " refused=%llu bytes=%llu max=%llu", (unsigned long long)n,
             (unsigned long long)atomic_load_explicit(&t->bytes,
                                                      memory_order_relaxed),
             (unsigned long long)atomic_load_explicit(&t->max,
                                                      memory_order_relaxed));
}

void rls_memtab_refused(rls_memtab_t *t, rls_mem_stripe_t *sp)
{
    if (!sp->full) {
        sp->full = 1;
        atomic_fetch_add_explicit(&t->nfull, 1, memory_order_relaxed);
    }
    atomic_fetch_add_explicit(&t->refused, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&t->unwarned, 1, memory_order_relaxed);
    rls_memtab_warn_full(t);
}

void rls_memtab_recovered(rls_memtab_t *t, rls_mem_stripe_t *sp)
{
    /* The table accepts new counters again with its last full stripe. */
    if (atomic_fetch_sub_explicit(&t->nfull, 1, memory_order_relaxed) != 1)
        return;
    rls_memtab_warn_full(t);
    RLS_INFO(
        "memory store accepting new counters again",
        " bytes=%llu max=%llu refused_total=%llu",
        (unsigned long long)(atomic_load_explicit(&t->bytes,
                                                  memory_order_relaxed) +
                             sp->bytes - sp->told),
        (unsigned long long)atomic_load_explicit(&t->max, memory_order_relaxed),
        (unsigned long long)atomic_load_explicit(&t->refused,
                                                 memory_order_relaxed));
}
