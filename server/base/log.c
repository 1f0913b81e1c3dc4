#include "base/log.h"

#include "rl_error.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

/* The one piece of process-wide state in the server: the log threshold. */
static int log_level = RLS_LOG_INFO;

static const char *const level_names[] = {"debug", "info", "warn", "error"};

/* --threads: the loop this thread runs, named in its lines (0: the first
 * loop's, or the only one: no field). */
static _Thread_local unsigned log_loop;

void rls_log_set_loop(unsigned loop)
{
    log_loop = loop;
}

int rls_log_set_level(const char *name)
{
    int i;

    for (i = 0; i < 4; i++) {
        if (strcmp(name, level_names[i]) == 0) {
            log_level = i;
            return 0;
        }
    }
    return RL_EINVAL;
}

int rls_log_enabled(int level)
{
    return level >= log_level;
}

void rls_log(int level, const char *msg, const char *fields, ...)
{
    char line[1024], ts[32];
    struct timespec now;
    struct tm tm;
    size_t n;
    int k;
    va_list ap;

    if (level < log_level)
        return;
    clock_gettime(CLOCK_REALTIME, &now);
    gmtime_r(&now.tv_sec, &tm);
    strftime(ts, sizeof(ts), "%Y-%m-%dT%H:%M:%S", &tm);
    k = snprintf(line, sizeof(line), "ts=%s.%03ldZ level=%s msg=\"%s\"", ts,
                 now.tv_nsec / 1000000, level_names[level], msg);
    n = k < 0 ? 0 : (size_t)k < sizeof(line) ? (size_t)k : sizeof(line) - 1;
    if (fields != NULL && n < sizeof(line) - 1) {
        va_start(ap, fields);
        k = vsnprintf(line + n, sizeof(line) - n, fields, ap);
        va_end(ap);
        if (k > 0)
            n += (size_t)k < sizeof(line) - n ? (size_t)k
                                              : sizeof(line) - n - 1;
    }
    if (log_loop > 0 && n < sizeof(line) - 1) {
        k = snprintf(line + n, sizeof(line) - n, " loop=%u", log_loop);
        if (k > 0)
            n +=
                (size_t)k < sizeof(line) - n ? (size_t)k : sizeof(line) - n - 1;
    }
    line[n++] = '\n';
    /* One write per line so lines from several processes do not interleave
     * mid-line on a shared stderr. */
    fwrite(line, 1, n, stderr);
}
