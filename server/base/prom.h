/* Writing Prometheus text exposition (format 0.0.4) into a buffer: the
 * server's page (metrics.c) and each front end's and store's part of it.
 * Each returns 0, or the buffer's error (RL_EFULL, RL_ENOMEM), after which
 * the page is truncated and must not be sent. */
#ifndef RLS_PROM_H
#define RLS_PROM_H

#include <stddef.h>
#include <stdint.h>

#include "base/prom_hist.h"
#include "rl_buf.h"

/* The HELP and TYPE lines of a family. */
int rls_prom_family(rl_buf_t *b, const char *name, const char *type,
                    const char *help);

/* Appends v in decimal, without printf: for pages of many series. */
int rls_prom_u64(rl_buf_t *b, uint64_t v);

/* A counter or gauge family of one sample, without labels. */
int rls_prom_counter(rl_buf_t *b, const char *name, const char *help,
                     uint64_t v);
int rls_prom_gauge(rl_buf_t *b, const char *name, const char *help,
                   uint64_t v);

/* One sample with one label: name{label="value"} v (after its family). */
int rls_prom_sample(rl_buf_t *b, const char *name, const char *label,
                    const char *value, uint64_t v);

/* A counter family with one label: the sample name{label="names[i]"} v[i]
 * for each i from `from` up to, not including, `to`. */
int rls_prom_labelled(rl_buf_t *b, const char *name, const char *help,
                      const char *label, const char *const *names,
                      const uint64_t *v, size_t from, size_t to);

/* A histogram; with `us` the observations are microseconds and are shown
 * in seconds. Buckets are cumulative, and +Inf equals _count. */
int rls_prom_histogram(rl_buf_t *b, const char *name, const char *help,
                       const rls_hist_t *h, int us);

/* One series of a histogram family, labelled label="value" (label NULL:
 * none), after the family's rls_prom_family. */
int rls_prom_histogram_series(rl_buf_t *b, const char *name,
                              const char *label, const char *value,
                              const rls_hist_t *h, int us);

#endif
