/* The Redis flags' values (flags_redis.c): rows of flags.c's table whose
 * syntax is Redis's (URLs, seed lists, sentinels), and what follows the
 * command line for them. Each row function parses val into c and returns
 * 0 or RL_EINVAL with one line in err; f is the row. */
#ifndef RLS_FLAGS_REDIS_H
#define RLS_FLAGS_REDIS_H

#include <stddef.h>

#include "flags.h"

typedef struct rls_flag_row_s rls_flag_row_t; /* a row (flags.c) */

/* --redis: HOST:PORT, redis://, rediss:// or unix:// (not with
 * --redis-cluster or --redis-sentinel). */
int rls_flags_redis(rls_flags_t *c, const rls_flag_row_t *f, const char *val,
                    char *err, size_t errlen);
/* --redis-cluster: [redis://[[USER]:PASSWORD@]]HOST:PORT[,HOST:PORT...]. */
int rls_flags_redis_cluster(rls_flags_t *c, const rls_flag_row_t *f,
                            const char *val, char *err, size_t errlen);
/* --redis-sentinel: the same, IP literals only. */
int rls_flags_redis_sentinel(rls_flags_t *c, const rls_flag_row_t *f,
                             const char *val, char *err, size_t errlen);
/* --redis-sentinel-master NAME, --redis-sentinel-user NAME. */
int rls_flags_sentinel_master(rls_flags_t *c, const rls_flag_row_t *f,
                              const char *val, char *err, size_t errlen);
int rls_flags_sentinel_user(rls_flags_t *c, const rls_flag_row_t *f,
                            const char *val, char *err, size_t errlen);

/* Once the command line is parsed: $RL_REDIS_URL when no store flag was
 * given, the password files read, and the Sentinel flags checked
 * together. Returns 0 or RL_EINVAL with err. */
int rls_flags_redis_finish(rls_flags_t *c, char *err, size_t errlen);

#endif
