/* Logging: one line per event on stderr, key=value fields.
 *
 *   ts=2026-11-22T02:32:49.123Z level=warn msg="redis down" err="..."
 *
 * Nothing is logged per request at the default level (info). */
#ifndef RLS_LOG_H
#define RLS_LOG_H

enum { RLS_LOG_DEBUG, RLS_LOG_INFO, RLS_LOG_WARN, RLS_LOG_ERROR };

/* Sets the lowest level printed; returns 0, or RL_EINVAL for an unknown name
 * ("debug", "info", "warn", "error"). */
int rls_log_set_level(const char *name);

int rls_log_enabled(int level);

/* Names `loop` (> 0) in every line this thread logs from now on
 * (--threads' other loops). */
void rls_log_set_loop(unsigned loop);

/* Prints one line: ts, level, msg="<msg>", then the caller's fields, which
 * are a printf format producing ` key=value` pairs (may be NULL). */
void rls_log(int level, const char *msg, const char *fields, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

#define RLS_DEBUG(msg, ...) rls_log(RLS_LOG_DEBUG, msg, __VA_ARGS__)
#define RLS_INFO(msg, ...) rls_log(RLS_LOG_INFO, msg, __VA_ARGS__)
#define RLS_WARN(msg, ...) rls_log(RLS_LOG_WARN, msg, __VA_ARGS__)
#define RLS_ERROR(msg, ...) rls_log(RLS_LOG_ERROR, msg, __VA_ARGS__)

#endif
