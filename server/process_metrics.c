/* process_* metrics from /proc/self; see process_metrics.h. */
#include "process_metrics.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "rl_error.h"

/* Reads a small /proc file into buf (NUL-terminated). Returns its length,
 * or RL_EIO. */
static ssize_t slurp(const char *path, char *buf, size_t size)
{
    ssize_t n, at = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);

    if (fd < 0)
        return RL_EIO;
    while ((size_t)at < size - 1 &&
           (n = read(fd, buf + at, size - 1 - (size_t)at)) > 0)
        at += n;
    close(fd);
    buf[at] = '\0';
    return at;
}

/* The boot time (btime of /proc/stat), seconds since the epoch; read once,
 * it does not change. 0 when not found. */
static unsigned long long boot_time(void)
{
    static unsigned long long btime;
    static int done;
    char buf[8192];
    const char *p;

    if (done)
        return btime;
    done = 1;
    if (slurp("/proc/stat", buf, sizeof(buf)) > 0 &&
        (p = strstr(buf, "\nbtime ")) != NULL)
        btime = strtoull(p + 7, NULL, 10);
    return btime;
}

/* Entries of /proc/self/fd but "." and "..", the directory's own
 * descriptor included (client_golang counts it too). */
static unsigned long long open_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    struct dirent *e;
    unsigned long long n = 0;

    if (d == NULL)
        return 0;
    while ((e = readdir(d)) != NULL)
        if (e->d_name[0] != '.')
            n++;
    closedir(d);
    return n;
}

int rls_process_read(rls_process_t *v)
{
    char buf[1024], *p;
    unsigned long long f[22];
    struct rlimit rl;
    long tck = sysconf(_SC_CLK_TCK), page = sysconf(_SC_PAGESIZE);
    int i;

    memset(v, 0, sizeof(*v));
    if (slurp("/proc/self/stat", buf, sizeof(buf)) <= 0 ||
        (p = strrchr(buf, ')')) == NULL)
        return RL_EIO;
    /* After "pid (comm)" (comm may hold spaces and ')': the last one ends
     * it), fields 3 (state) on; f[k] is field k + 3. */
    p++;
    while (*p == ' ')
        p++;
    if (*p == '\0')
        return RL_EIO;
    p++; /* the state, one letter */
    for (i = 1; i < 22; i++) {
        char *end;
        f[i] = strtoull(p, &end, 10);
        if (end == p)
            return RL_EIO;
        p = end;
    }
    if (tck <= 0)
        tck = 100;
    if (page <= 0)
        page = 4096;
    /* utime 14, stime 15, starttime 22, vsize 23, rss 24. */
    v->cpu_seconds = (double)(f[11] + f[12]) / (double)tck;
    v->vsize = f[20];
    v->rss_bytes = f[21] * (unsigned long long)page;
    if (boot_time() != 0)
        v->start_time_seconds =
            (double)boot_time() + (double)f[19] / (double)tck;
    v->open_fds = open_fds();
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0)
        v->max_fds = rl.rlim_cur == RLIM_INFINITY ? UINT64_MAX : rl.rlim_cur;
    if (getrlimit(RLIMIT_AS, &rl) == 0)
        v->max_vsize = rl.rlim_cur == RLIM_INFINITY ? UINT64_MAX : rl.rlim_cur;
    return 0;
}

int rls_process_metrics(rl_buf_t *out)
{
    rls_process_t v;
    int rc;

    rc = rl_buf_printf(
        out, "# HELP go_memstats_gc_cpu_fraction The fraction of this "
             "program's available CPU time used by the GC since the program "
             "started. rl-server is C and has no garbage collector: always 0 "
             "(dashboards for envoy-ratelimit read it).\n"
             "# TYPE go_memstats_gc_cpu_fraction gauge\n"
             "go_memstats_gc_cpu_fraction 0\n");
    if (rc != RL_OK || rls_process_read(&v) != 0)
        return rc;
    rc = rl_buf_printf(
        out,
        "# HELP process_cpu_seconds_total Total user and system CPU time "
        "spent in seconds.\n"
        "# TYPE process_cpu_seconds_total counter\n"
        "process_cpu_seconds_total %.2f\n"
        "# HELP process_max_fds Maximum number of open file descriptors.\n"
        "# TYPE process_max_fds gauge\n"
        "process_max_fds %llu\n",
        v.cpu_seconds, v.max_fds);
    if (rc == RL_OK && v.open_fds != 0)
        rc = rl_buf_printf(
            out,
            "# HELP process_open_fds Number of open file descriptors.\n"
            "# TYPE process_open_fds gauge\n"
            "process_open_fds %llu\n",
            v.open_fds);
    if (rc == RL_OK)
        rc = rl_buf_printf(
            out,
            "# HELP process_resident_memory_bytes Resident memory size in "
            "bytes.\n"
            "# TYPE process_resident_memory_bytes gauge\n"
            "process_resident_memory_bytes %llu\n",
            v.rss_bytes);
    if (rc == RL_OK && v.start_time_seconds != 0)
        rc = rl_buf_printf(
            out,
            "# HELP process_start_time_seconds Start time of the process "
            "since unix epoch in seconds.\n"
            "# TYPE process_start_time_seconds gauge\n"
            "process_start_time_seconds %.2f\n",
            v.start_time_seconds);
    if (rc == RL_OK)
        rc = rl_buf_printf(
            out,
            "# HELP process_virtual_memory_bytes Virtual memory size in "
            "bytes.\n"
            "# TYPE process_virtual_memory_bytes gauge\n"
            "process_virtual_memory_bytes %llu\n"
            "# HELP process_virtual_memory_max_bytes Maximum amount of "
            "virtual memory available in bytes.\n"
            "# TYPE process_virtual_memory_max_bytes gauge\n"
            "process_virtual_memory_max_bytes %llu\n",
            v.vsize, v.max_vsize);
    return rc;
}
