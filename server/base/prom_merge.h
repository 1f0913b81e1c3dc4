/* Merging Prometheus text pages (format 0.0.4) into one: with --threads,
 * each loop writes its own /metrics page (metrics.c over prom.c) and the
 * process answers a scrape with their sum. Pure: no I/O, no loop, no
 * state between calls. */
#ifndef RLS_PROM_MERGE_H
#define RLS_PROM_MERGE_H

#include <stddef.h>

#include "rl_buf.h"

/* The most the pages may hold together, in bytes: a page is at most the
 * metrics listener's 1 MiB response, and the merge indexes its input with
 * 32-bit offsets. */
#define RLS_PROM_MERGE_MAX ((size_t)256 << 20)

/* Whether a gauge family's samples are summed over the pages (1) or keep
 * the first page's value (0); name[0, len) is the family's name, not
 * NUL-terminated. */
typedef int (*rls_prom_sum_gauge_fn)(const char *name, size_t len);

/* Merges the pages p[0, n) (p[i] holds len[i] bytes; NULL if len[i] is 0)
 * and appends the result to out.
 *
 * Families come out in the order first seen (page 0 first), each with the
 * first HELP and the first TYPE line seen for it (none when no page has
 * one), then all of its samples in the order first seen, whichever page
 * they came from. A histogram's name_bucket, name_sum and name_count
 * samples belong to the family of the TYPE line "name histogram" (a
 * summary's name_sum and name_count likewise) once that line has been
 * read; a sample of no known family is a family of its own name, untyped
 * (until that TYPE line comes, when one of a family first seen after the
 * histogram's name, with no HELP or TYPE of its own, joins it).
 *
 * A sample is its name and label set, compared as written (so {a="1",b="2"}
 * and {b="2",a="1"} are two). One present in several pages, or twice in
 * one, is one line, whose value is:
 *   - summed for counters, histograms (every _bucket, _sum and _count),
 *     a summary's _sum and _count, and gauges for which sum_gauge (NULL:
 *     none) returns 1 (asked at most once per family, when a second
 *     value comes);
 *   - the first value seen for other gauges, untyped families and a
 *     summary's quantiles (quantiles of parts do not add up to a quantile
 *     of the whole; the first loop's is at least one loop's truth).
 * Integers (digits only, up to 2^64-1) add exactly and saturate at 2^64-1;
 * decimals (digits with one '.', their digits as one integer below 2^64,
 * at most 19 after the point) add exactly, while the sum fits, and
 * print as prom.c prints seconds ("0.00015", "2.5", trailing zeros
 * dropped); anything else (a sign, an exponent, +Inf, -Inf, NaN, more
 * digits) adds as a double and prints in the shortest %g that reads back
 * to the same double, or "+Inf", "-Inf", "NaN". A value nothing was added
 * to is copied as written.
 *
 * Blank lines and comments other than HELP and TYPE are dropped, blanks
 * around tokens and a sample's timestamp too; the last line of a page may
 * lack its '\n'. The output is canonical: merging it alone gives it back.
 *
 * Work is linear in the input (one keyed SipHash table over samples, one
 * over families, under a fresh random key per call) and so is memory.
 *
 * Returns 0; RL_EINVAL for a line that is not the format (a bad name,
 * label set, escape, value or TYPE), with nothing appended to out;
 * RL_EFULL when the pages together exceed RLS_PROM_MERGE_MAX (nothing
 * appended) or the result exceeds out's cap; RL_ENOMEM. After RL_EFULL or
 * RL_ENOMEM out may hold part of a page after what it held before. */
int rls_prom_merge(const char *const *p, const size_t *len, size_t n,
                   rls_prom_sum_gauge_fn sum_gauge, rl_buf_t *out);

#endif
