/* The process_* families Prometheus client libraries export (client_golang
 * 1.19's process collector, which envoy-ratelimit's exporter serves), read
 * from /proc/self at scrape time (process_metrics.c): dashboards written
 * for envoy-ratelimit (Envoy Gateway's global-ratelimit.json) read
 * process_resident_memory_bytes and process_virtual_memory_bytes.
 *
 *   process_cpu_seconds_total           counter, user + system CPU
 *   process_open_fds                    gauge, entries of /proc/self/fd
 *   process_max_fds                     gauge, RLIMIT_NOFILE (soft)
 *   process_virtual_memory_bytes        gauge, vsize
 *   process_virtual_memory_max_bytes    gauge, RLIMIT_AS (soft; unlimited
 *                                       as 2^64 - 1, as client_golang)
 *   process_resident_memory_bytes       gauge, rss pages * page size
 *   process_start_time_seconds          gauge, boot time + starttime
 *
 * and go_memstats_gc_cpu_fraction 0: the Go runtime's share of CPU spent
 * in its garbage collector, which the dashboard's "CPU Fraction" panel
 * reads; rl-server has no collector, so it is 0, said so in its help.
 *
 * Costs one read of /proc/self/stat and a walk of /proc/self/fd (as
 * client_golang's collector does); the boot time is read once. */
#ifndef RLS_PROCESS_METRICS_H
#define RLS_PROCESS_METRICS_H

#include "rl_buf.h"

/* Appends the families. A /proc file that cannot be read leaves its
 * families out (not an error: a scrape still answers). Returns 0 or the
 * buffer's error. */
int rls_process_metrics(rl_buf_t *out);

/* The values, for tests: fills v from /proc/self. Returns 0, or RL_EIO
 * when /proc/self/stat cannot be read or parsed. */
typedef struct rls_process_s {
    double cpu_seconds;
    double start_time_seconds; /* 0: the boot time was not found */
    unsigned long long vsize, rss_bytes;
    unsigned long long open_fds; /* 0: /proc/self/fd not readable */
    unsigned long long max_fds, max_vsize;
} rls_process_t;
int rls_process_read(rls_process_t *v);

#endif
