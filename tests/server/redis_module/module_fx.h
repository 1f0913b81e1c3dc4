/* What the module's tests share (module_fx.c): up to NODES private
 * redis-servers, each with the module loaded by path ($RLT_MODULE_SO) or
 * not, a blocking connection to each, stopped by the teardown whether the
 * test passed or not; RL.BATCH and other commands whose replies are
 * checked; the keyspace as a sorted list, to compare two servers' or one
 * server's before and after. Used by test_redis_module.c and
 * test_redis_module_replica.c. */
#ifndef RLT_MODULE_FX_H
#define RLT_MODULE_FX_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <hiredis/hiredis.h>

#include "rlt.h"

#define NODES 3
#define SNAP_MAX 4096
/* 2^53 - 1: the module's largest time (RLM_MS_MAX). */
#define MS_MAX 9007199254740991LL

typedef struct fx_s {
    rlt_redis_t r[NODES];
    redisContext *c[NODES];
} fx_t;

/* cmocka setup and teardown: *state is a fresh fx_t; the teardown stops
 * every node and removes what it left in its directory. */
int fx_setup(void **state);
int fx_teardown(void **state);
#define MODULE_TEST(t) cmocka_unit_test_setup_teardown(t, fx_setup, fx_teardown)

/* Starts node i with extra arguments, the module loaded when module is
 * set, and connects to it. */
void node_start(fx_t *f, int i, int module, char *const extra[]);

/* Node i again on its port and directory (after node_kill), once it has
 * loaded its data. */
void node_restart(fx_t *f, int i, int module, char *const extra[]);

/* SIGKILLs node i, keeping its directory for node_restart. */
void node_kill(fx_t *f, int i);

/* A command whose reply must not be an error; freed here. */
void ok(redisContext *c, const char *fmt, ...);

/* The integer reply of a command with one string argument. */
long long int_of(redisContext *c, const char *fmt, const char *arg);

/* The value of the string key into buf (n bytes): buf, or NULL when the
 * key is missing. */
const char *str_of(redisContext *c, const char *key, char *buf, size_t n);

/* The string key holds want (NULL: it is missing). */
void str_is(redisContext *c, const char *key, const char *want);

/* DBSIZE. */
long long dbsize(redisContext *c);

/* The server's clock, in ms (TIME). */
long long redis_ms(redisContext *c);

/* RL.BATCH with the arguments of fmt (printf-like) split at spaces, ''
 * standing for an empty one. Returns the reply (the caller frees it). */
redisReply *rlb(redisContext *c, const char *fmt, ...);

/* RL.BATCH that must be decided (an array reply): rlb_arr returns the
 * reply (the caller frees it), rlb_ok frees it. */
redisReply *rlb_arr(redisContext *c, const char *fmt, ...);
void rlb_ok(redisContext *c, const char *fmt, ...);

/* ---- the keyspace, as a sorted list ---- */

typedef struct {
    char key[128], type[16], val[96];
    long long pexp; /* PEXPIRETIME: -1 none */
} entry_t;

typedef struct {
    entry_t e[SNAP_MAX];
    size_t n;
} snap_t;

/* The keys matching pattern, sorted, with their types, values and
 * expiries. */
void snap(redisContext *c, const char *pattern, snap_t *s);

/* Fails the test, naming what, where a and b differ. */
void same_snap(const snap_t *a, const snap_t *b, const char *what);

/* RL.BATCH that must be refused whole: an error, and the keyspace as it
 * was. */
void rlb_refused(redisContext *c, const char *fmt, ...);

/* Every counter (every key but the ":q" quota hashes) has an expiry (or
 * had: -2, gone since it was listed). Returns how many there are. */
size_t all_expire(const snap_t *s);

/* Batches of every kind under tag t: runs of one profile, listed and
 * equal costs, refusals, a stored quota (its counters named by the
 * module), a counter at 0 that a refusal removes, and ops of other
 * algorithms (a fixed window, a sliding-window-counter's one key whose
 * state was of the previous window, a gcra's TAT). Every expiry is
 * minutes away (a grace of 10 min for the stored quota's windows and the
 * TAT), so that none passes while a test compares. */
void mix(redisContext *c, const char *t);

#endif
