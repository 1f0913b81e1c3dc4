/* What the Redis store's tests share (store_redis_fx.c): a libuv loop, a
 * private redis-server and a blocking connection to inspect it, a store
 * opened on them; batches ("jobs") and their callbacks; waits with
 * deadlines; reading counters and expiries back; capturing the log.
 * Every test that uses it runs once more with the ratelimit module loaded
 * into its redis-servers (store_redis.cmake). */
#ifndef RLT_STORE_REDIS_FX_H
#define RLT_STORE_REDIS_FX_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <hiredis/hiredis.h>
#include <uv.h>

#include "rl_admit.h"
#include "store/store.h"
#include "rlt.h"

#define MAX_OPS 300

typedef struct fx_s {
    uv_loop_t loop;
    uv_timer_t tick; /* wakes uv_run(UV_RUN_ONCE) so deadlines are seen */
    rlt_redis_t redis;
    rlt_redis_t replica; /* test_module_replicates; pid 0 if none */
    redisContext *rc;    /* blocking connection, to inspect Redis */
    rls_store_t *st;
    int closed;
    const char *password;
} fx_t;

/* One batch and what its callback saw: each op one 60 s window (index 1)
 * with a limit nothing reaches, and one request of cost `incr`, so the
 * count after the batch is before + admitted * incr. */
typedef struct job_s {
    rls_op_t ops[MAX_OPS];
    rls_op_window_t win[MAX_OPS][RL_ADMIT_WINDOWS_MAX];
    uint32_t cost[MAX_OPS][32];
    char keys[MAX_OPS][96];   /* the ops' base keys */
    char wkeys[MAX_OPS][128]; /* their counters */
    /* A stored quota's windows, copied in the callback. */
    rls_op_window_t quota_win[MAX_OPS][RL_ADMIT_WINDOWS_MAX];
    uint32_t nquota_win[MAX_OPS];
    size_t n;
    int calls, status;
    uint64_t fired_ms;
    fx_t *resubmit; /* submit again from inside the callback */
    int resubmit_status, resubmit_calls;
} job_t;

/* A one-op batch, small enough to submit a thousand of. */
typedef struct small_s {
    rls_op_t op;
    rls_op_window_t win;
    uint32_t cost;
    int calls, status;
} small_t;

/* Runs the loop until cond holds or ms pass; evaluates to cond. */
#define RUN_UNTIL(f, cond, ms)                                                 \
    do {                                                                       \
        uint64_t dl_ = rlt_mono_ms() + (ms);                                   \
        while (!(cond) && rlt_mono_ms() < dl_)                                 \
            uv_run(&(f)->loop, UV_RUN_ONCE);                                   \
    } while (0)

/* ---- the fixture --------------------------------------------------------*/

/* cmocka setups: a loop and a private redis-server (fx_setup_auth: one
 * that wants a password; fx_setup_with: with extra arguments); the
 * teardown closes the store, checks uv_loop_close() == 0 and stops every
 * redis-server by its pid. */
int fx_setup_with(void **state, char *const extra[], const char *pw);
int fx_setup(void **state);
int fx_setup_auth(void **state);
int fx_teardown(void **state);

/* Opens f->st on 127.0.0.1:port (f->password, db, grace 1000 ms). */
rls_store_t *open_store(fx_t *f, int port, uint64_t timeout_ms, int db);
/* Closes f->st and waits for its close callback, which must not fire
 * inline. */
void close_store(fx_t *f);
/* A close callback: counts into the int at arg. */
void on_done(void *arg);
void run_for(fx_t *f, uint64_t ms);
/* Runs the loop until the store is up (at most ms), and asserts it is. */
void wait_up(fx_t *f, uint64_t ms);
/* 1 when this run loads the ratelimit module into its redis-servers (the
 * *_module twin of each test): the store must then use it. */
int with_module(void);

/* ---- batches ------------------------------------------------------------*/

/* The callback of a job: checks it got the job's ops, copies the quota
 * windows, counts the call, and resubmits from inside if asked. */
void on_job(void *data, rls_op_t *ops, size_t n, int status);
/* One request of cost 1 on the 60 s window of index 1 of key. */
void small_init(small_t *s, const char *key, uint64_t expire_at_ms);
void on_small(void *data, rls_op_t *ops, size_t n, int status);
/* The count of op's first window after the batch, its requests all of
 * one cost. */
int64_t after(const rls_op_t *op);
/* Sets up op i of j: base key `key`, one window (60 s, index 1, expiring
 * at expire_at_ms, no reachable limit), one request of cost incr. */
void job_op(job_t *j, size_t i, const char *key, uint64_t incr,
            uint64_t expire_at_ms);
/* Fills a job with n ops "rl:{<tag>:<i>}:r:t" (counters
 * "rl:{<tag>:<i>}:r:t:60:1"), each due to expire a minute from now on the
 * store's clock. */
void job_init(job_t *j, fx_t *f, size_t n, const char *tag, uint64_t incr);
void submit(fx_t *f, job_t *j);
/* Builds job j, submits it and runs the loop until it is answered (5 s at
 * most). */
void run_new_job(fx_t *f, job_t *j, size_t n, const char *tag, uint64_t incr);
/* Window w: length ws, limit lim, at index idx, expiring at its end plus
 * grace. */
void win_at(rls_op_window_t *w, uint32_t ws, uint64_t lim, uint64_t idx,
            uint64_t grace);
/* Makes op i of j a request list on base key `key` with windows set by the
 * caller (nw of them in j->win[i]); equal: all costs are costs[0]. */
void job_costs(job_t *j, size_t i, const char *key, uint32_t nw,
               const uint32_t *costs, uint32_t nc, int equal);
/* Op i of j names the stored quota of its rule (the base key's last
 * part, after ":r:"), scaled. */
void job_quota(job_t *j, size_t i, double scale);
/* Submits j's first n ops and asserts one answer, status 0, within 5 s. */
void run_job(fx_t *f, job_t *j, size_t n);

/* ---- reading Redis back -------------------------------------------------*/

/* The integer reply of command fmt on key (a string of digits read as one;
 * -999 for anything else). */
long long redis_int(fx_t *f, const char *fmt, const char *key);
/* Redis's TIME, in ms. */
uint64_t redis_now_ms(fx_t *f);
/* Every key in the current db of f->rc carries a TTL no longer than
 * max_ms. Returns how many keys there are. */
long long assert_all_keys_expire(fx_t *f, long long max_ms);
/* Every counter key ("...:<window_s>:<index>") matching pattern expires
 * no later than its window's end + grace + slack_ms, and does expire.
 * Returns how many there are. */
long long assert_counters_expire(fx_t *f, const char *pattern, uint64_t grace,
                                 uint64_t slack_ms);
/* GET and EXISTS of op's counter for window ws at index idx. */
long long redis_get(fx_t *f, const rls_op_t *op, uint32_t ws, uint64_t idx);
long long redis_exists(fx_t *f, const rls_op_t *op, uint32_t ws, uint64_t idx);

/* ---- the log ------------------------------------------------------------*/

/* Points stderr (where rls_log writes) at a temporary file until
 * log_end, which returns whether a line holds every one of the given
 * strings (NULL-terminated). */
typedef struct logcap_s {
    char path[64];
    int saved;
} logcap_t;

void log_begin(logcap_t *l);
int log_end(logcap_t *l, ...);

#endif
