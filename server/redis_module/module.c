/* ratelimit.so, a Redis module (redis-server --loadmodule ratelimit.so):
 *
 *   RL.BATCH numkeys key... arg...   one batch of the Redis store, decided
 *                                    as its Lua script decides it, in C
 *   RL.VERSION                       RLM_VERSION, the arguments' and
 *                                    reply's format; rl-server uses the
 *                                    module only when it knows this number
 *
 * Why: a script pays Lua's redis.call for every counter (arguments made
 * into Lua strings and back into Redis objects, the command looked up,
 * its reply turned into RESP and parsed back into Lua), so that Redis
 * spends more CPU per decision than on a pipelined INCR however little
 * else the script does (BENCHMARKS.md, "Redis CPU per decision against
 * its floor"). Here a counter is one keyspace lookup and an in-place
 * write of its digits.
 *
 * The decisions are rlm_batch.c's; this file binds them to the module
 * API.
 *
 * Replication and persistence: RL.BATCH itself never reaches a replica or
 * the AOF, which may not have the module. What a call wrote goes there as
 * one EVAL of a fixed script (REP_SCRIPT) that leaves each counter as the
 * master has it: "SET key count PXAT expiry" when the batch gave it its
 * expiry (it created it), "SET key count KEEPTTL" otherwise, "DEL key"
 * when it removed one, in the order the batch did them (a call that
 * wrote one counter sends that command itself). A replica or an
 * AOF reload thus needs no module (EVAL is built in; never EVALSHA, which
 * a replica or a reload may not have cached), keeps the master's absolute
 * expiries, and could not count differently: it receives counts, not
 * decisions (the way Redis replicates INCRBYFLOAT). One command per call
 * rather than one per counter: RedisModule_Replicate looks the command up
 * and builds its arguments at every call, even when nothing listens, and
 * a call's several commands go out wrapped in MULTI/EXEC. Should Redis
 * not know EVAL (renamed), the effects go out as those SETs and DELs, one
 * command each. An RL.BATCH that does arrive from a master or an AOF
 * (written by an earlier version that replicated the command) is replayed
 * without the deadline check, so it counts what the master counted.
 *
 * Redis Cluster: every key of KEYS is declared (getkeys-api), so Redis
 * answers MOVED, ASK or CROSSSLOT before the command runs; the counters
 * of a stored quota, named at run time, must carry the hash tag of KEYS
 * (rlm_batch's RLM_CLUSTER), or the batch is refused whole.
 *
 * The module API is taken from Redis at load time by name, as the modules
 * API reference documents; the few functions and constants used are
 * declared here rather than by vendoring redismodule.h. */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "rlm_batch.h"

#define RLM_VERSION 4

typedef struct RedisModuleCtx RedisModuleCtx;
typedef struct RedisModuleString RedisModuleString;
typedef struct RedisModuleKey RedisModuleKey;
typedef int (*rm_cmd_fn)(RedisModuleCtx *, RedisModuleString **, int);

#define RM_OK 0
#define RM_ERR 1
#define RM_APIVER_1 1
#define RM_READ (1 << 0)
#define RM_WRITE (1 << 1)
#define RM_KEYTYPE_EMPTY 0
#define RM_KEYTYPE_STRING 1
#define RM_KEYTYPE_HASH 3
#define RM_HASH_NONE 0
#define RM_CTX_FLAGS_CLUSTER (1 << 5)
#define RM_CTX_FLAGS_OOM (1 << 10)
#define RM_CTX_FLAGS_REPLICATED (1 << 12)
#define RM_CTX_FLAGS_LOADING (1 << 13)
#define RM_POSTPONED_LEN -1

static int (*rm_GetApi)(const char *, void *);
static void (*rm_SetModuleAttribs)(RedisModuleCtx *, const char *, int, int);
static int (*rm_CreateCommand)(RedisModuleCtx *, const char *, rm_cmd_fn,
                               const char *, int, int, int);
static const char *(*rm_StringPtrLen)(const RedisModuleString *, size_t *);
static RedisModuleString *(*rm_CreateString)(RedisModuleCtx *, const char *,
                                             size_t);
static void (*rm_FreeString)(RedisModuleCtx *, RedisModuleString *);
static int (*rm_StringToLongLong)(const RedisModuleString *, long long *);
static void *(*rm_OpenKey)(RedisModuleCtx *, RedisModuleString *, int);
static void (*rm_CloseKey)(RedisModuleKey *);
static int (*rm_KeyType)(RedisModuleKey *);
static int (*rm_DeleteKey)(RedisModuleKey *);
static char *(*rm_StringDMA)(RedisModuleKey *, size_t *, int);
static int (*rm_StringTruncate)(RedisModuleKey *, size_t);
static int (*rm_SetAbsExpire)(RedisModuleKey *, long long); /* 6.2 */
static long long (*rm_Milliseconds)(void);
static int (*rm_HashGet)(RedisModuleKey *, int, ...);
static int (*rm_ReplyWithArray)(RedisModuleCtx *, long);
static void (*rm_ReplySetArrayLength)(RedisModuleCtx *, long);
static int (*rm_ReplyWithLongLong)(RedisModuleCtx *, long long);
static int (*rm_ReplyWithStringBuffer)(RedisModuleCtx *, const char *,
                                       size_t);
static int (*rm_ReplyWithError)(RedisModuleCtx *, const char *);
static int (*rm_WrongArity)(RedisModuleCtx *);
static int (*rm_GetContextFlags)(RedisModuleCtx *);
static int (*rm_Replicate)(RedisModuleCtx *, const char *, const char *, ...);
static void (*rm_Log)(RedisModuleCtx *, const char *, const char *, ...);
static int (*rm_IsKeysPositionRequest)(RedisModuleCtx *);
static void (*rm_KeyAtPos)(RedisModuleCtx *, int);
static void *(*rm_Alloc)(size_t);
static void (*rm_Free)(void *);

/* An open counter: its key, and its name for the commands replicated. */
typedef struct {
    RedisModuleKey *k;
    RedisModuleString *name;
    int own; /* name created here (a stored quota's counter) */
} counter_t;

/* The script a call's writes are replicated as. KEYS are the counters in
 * the order written (a counter may come twice), ARGV[1] a word for each,
 * separated by spaces: "count/expiry" for SET ... PXAT, "count" for SET
 * ... KEEPTTL, "d" for DEL. Counts stay text: a Lua number is exact only
 * to 2^53. The replicated command carries the script's text each time, so
 * it is short. */
#define REP_SCRIPT                                                             \
    "local r,k,i=redis.call,KEYS,0 "                                           \
    "for c,x in ARGV[1]:gmatch('([^ /]+)/?(%d*)') do i=i+1 "                   \
    "if c=='d' then r('DEL',k[i]) "                                            \
    "elseif x=='' then r('SET',k[i],c,'KEEPTTL') "                             \
    "else r('SET',k[i],c,'PXAT',x) end end"

/* The longest word: a value (a count, 20 bytes with its sign, or a
 * sliding-window-counter's state, at most 72), '/', an expiry (17 digits:
 * below 2^55, rlm_io_t's write) and the space before the next. */
#define WORD_MAX 92

/* Words of the commands replicated, made once at load: a word given as a
 * string costs the command a reference, as text an allocation. */
static RedisModuleString *w_script, *w_pxat, *w_keepttl;

/* A call's writes, replicated at its end (or sooner: see k_write). The
 * arrays are kept from call to call (Redis runs module commands one at a
 * time), up to FX_KEEP effects (about 200 kB: the largest batch rl-server
 * sends, of two windows an op), and given back after a call that grew
 * them further. */
typedef struct {
    RedisModuleString **key;
    unsigned char *own; /* key[i] made here: freed once replicated */
    char *word;         /* n words, len bytes */
    size_t n, cap, len;
} effects_t;

#define FX_KEEP 4096

static effects_t fx;

typedef struct {
    RedisModuleCtx *ctx;
    RedisModuleString **keys, **args;
    RedisModuleString *qval; /* the last stored quota read */
    int64_t t0;              /* Redis's clock when the call began */
    size_t room;             /* the first room made for effects */
    /* rlm_batch opens at most an op's keys at a time. */
    counter_t c[RLM_OPEN_MAX];
} env_t;

/* Room for cap effects, those logged kept; 0, or -1 (none lost). */
static int fx_grow(size_t cap)
{
    size_t each = sizeof(*fx.key) + sizeof(*fx.own) + WORD_MAX;
    char *m;

    if (cap > SIZE_MAX / each || (m = rm_Alloc(cap * each)) == NULL)
        return -1;
    if (fx.n > 0) {
        memcpy(m, fx.key, fx.n * sizeof(*fx.key));
        memcpy(m + cap * sizeof(*fx.key), fx.own, fx.n);
        memcpy(m + cap * (sizeof(*fx.key) + 1), fx.word, fx.len);
    }
    rm_Free(fx.key);
    fx.key = (RedisModuleString **)(void *)m;
    fx.own = (unsigned char *)m + cap * sizeof(*fx.key);
    fx.word = m + cap * (sizeof(*fx.key) + 1);
    fx.cap = cap;
    return 0;
}

static void fx_release(void)
{
    rm_Free(fx.key);
    memset(&fx, 0, sizeof(fx));
}

/* Replicates one effect as its own command (word as REP_SCRIPT reads
 * it); 0, or -1 if Redis refused. */
static int replicate_one(RedisModuleCtx *ctx, RedisModuleString *key,
                         const char *w, size_t len)
{
    const char *slash = memchr(w, '/', len);

    if (len == 1 && w[0] == 'd')
        return rm_Replicate(ctx, "DEL", "s", key) == RM_OK ? 0 : -1;
    if (slash == NULL)
        return rm_Replicate(ctx, "SET", "sbs", key, w, len, w_keepttl) == RM_OK
                   ? 0
                   : -1;
    return rm_Replicate(ctx, "SET", "sbsb", key, w, (size_t)(slash - w), w_pxat,
                        slash + 1, (size_t)(w + len - slash - 1)) == RM_OK
               ? 0
               : -1;
}

/* Replicates the effects logged, as one EVAL of REP_SCRIPT; a single one
 * as its SET or DEL, which costs the master as much and a replica less
 * (no Lua), and makes a smaller record; and so each, should Redis not
 * have EVAL under that name. */
static void fx_flush(RedisModuleCtx *ctx)
{
    static int warned;
    size_t i, at = 0;
    int bad = 0;

    if (fx.n == 0)
        return;
    if (fx.n == 1 ||
        rm_Replicate(ctx, "EVAL", "slvb", w_script, (long long)fx.n, fx.key,
                     fx.n, fx.word, fx.len) != RM_OK) {
        for (i = 0; i < fx.n; i++) {
            const char *w = fx.word + at, *sp;
            size_t len = fx.len - at;
            if ((sp = memchr(w, ' ', len)) != NULL)
                len = (size_t)(sp - w);
            bad |= replicate_one(ctx, fx.key[i], w, len);
            at += len + 1;
        }
    }
    if (bad && !warned) {
        warned = 1;
        rm_Log(ctx, "warning",
               "ratelimit: Redis refused to replicate a batch's writes "
               "(EVAL, SET or DEL renamed?): replicas and the AOF miss them");
    }
    for (i = 0; i < fx.n; i++)
        if (fx.own[i])
            rm_FreeString(ctx, fx.key[i]);
    fx.n = 0;
    fx.len = 0;
}

/* Logs c's write (count digits d, n bytes; expiry digits x, xn bytes,
 * when x is not NULL) or removal (d NULL); the name passes to the log if
 * c made it. */
static void fx_add(env_t *e, counter_t *c, const char *d, size_t n,
                   const char *x, size_t xn)
{
    char *w;

    if (fx.n == fx.cap && fx_grow(fx.cap > 0 ? 2 * fx.cap : e->room) != 0) {
        /* No room: what is logged goes now, in order, and the log is
         * empty again (or, never having had room, this goes alone). */
        fx_flush(e->ctx);
        if (fx.cap == 0) {
            char t[WORD_MAX];
            size_t len = 1;
            t[0] = 'd';
            if (d != NULL) {
                memcpy(t, d, n);
                len = n;
                if (x != NULL) {
                    t[len++] = '/';
                    memcpy(t + len, x, xn);
                    len += xn;
                }
            }
            replicate_one(e->ctx, c->name, t, len);
            return;
        }
    }
    w = fx.word + fx.len;
    if (fx.n > 0)
        *w++ = ' ';
    if (d == NULL) {
        *w++ = 'd';
    } else {
        memcpy(w, d, n);
        w += n;
        if (x != NULL) {
            *w++ = '/';
            memcpy(w, x, xn);
            w += xn;
        }
    }
    fx.len = (size_t)(w - fx.word);
    fx.key[fx.n] = c->name;
    fx.own[fx.n++] = (unsigned char)c->own;
    c->own = 0;
}

/* A slot is in use while it has a name. */
static void *k_open(void *env, size_t key, const char *name, size_t len)
{
    env_t *e = env;
    counter_t *c = NULL;
    size_t i;

    for (i = 0; i < RLM_OPEN_MAX && c == NULL; i++)
        if (e->c[i].name == NULL)
            c = &e->c[i];
    if (c == NULL)
        return NULL;
    c->own = name != NULL;
    c->name = name == NULL ? e->keys[key] : rm_CreateString(e->ctx, name, len);
    if (c->name == NULL)
        return NULL;
    c->k = rm_OpenKey(e->ctx, c->name, RM_READ | RM_WRITE);
    if (c->k == NULL) {
        if (c->own)
            rm_FreeString(e->ctx, c->name);
        c->name = NULL;
        return NULL;
    }
    return c;
}

static int k_get(void *env, void *h, int64_t *v, int *exists)
{
    RedisModuleKey *k = ((counter_t *)h)->k;
    int t = k != NULL ? rm_KeyType(k) : RM_KEYTYPE_EMPTY;
    const char *p;
    size_t len;

    (void)env;
    *v = 0;
    *exists = t != RM_KEYTYPE_EMPTY;
    if (t == RM_KEYTYPE_EMPTY)
        return RLM_VAL_OK;
    if (t != RM_KEYTYPE_STRING)
        return RLM_VAL_WRONGTYPE;
    p = rm_StringDMA(k, &len, RM_READ);
    return p != NULL && rlm_parse_i64(p, len, v) == 0 ? RLM_VAL_OK
                                                       : RLM_VAL_NOTINT;
}

/* The n bytes at d go into the value in place: no new object, and the key
 * keeps its expiry unless given one. (In place needs a plain string: a
 * counter written here is stored as its digits where INCRBY stores a
 * number; see DESIGN.md for what that costs per key.) Then the write is
 * logged for the replicas and the AOF. */
static void k_wtext(void *env, void *h, const char *d, size_t n,
                    int64_t expire_ms)
{
    env_t *e = env;
    counter_t *c = h;
    char x[24], *p, *xd;
    size_t len;

    p = rm_StringDMA(c->k, &len, RM_WRITE);
    if (p == NULL || len != n) {
        rm_StringTruncate(c->k, n);
        p = rm_StringDMA(c->k, &len, RM_WRITE);
    }
    if (p != NULL && len == n)
        memcpy(p, d, n);
    if (expire_ms <= 0) {
        fx_add(e, c, d, n, NULL, 0);
        return;
    }
    rm_SetAbsExpire(c->k, expire_ms);
    xd = rlm_i64_text(expire_ms, x + sizeof(x));
    fx_add(e, c, d, n, xd, (size_t)(x + sizeof(x) - xd));
    /* Already past (a caller's clock behind Redis's): the next open of
     * this key in the call deletes it and replicates that DEL at once, so
     * the write must go out before it. */
    if (expire_ms <= e->t0)
        fx_flush(e->ctx);
}

static void k_write(void *env, void *h, int64_t v, int64_t expire_ms)
{
    char t[24], *d = rlm_i64_text(v, t + sizeof(t));

    k_wtext(env, h, d, (size_t)(t + sizeof(t) - d), expire_ms);
}

static void k_del(void *env, void *h)
{
    env_t *e = env;
    counter_t *c = h;

    rm_DeleteKey(c->k);
    fx_add(e, c, NULL, 0, NULL, 0);
}

static void k_close(void *env, void *h)
{
    env_t *e = env;
    counter_t *c = h;

    if (c->k != NULL)
        rm_CloseKey(c->k);
    if (c->own)
        rm_FreeString(e->ctx, c->name);
    c->k = NULL;
    c->name = NULL;
}

static int k_quota(void *env, size_t key, size_t field, const char **s,
                   size_t *len)
{
    env_t *e = env;
    RedisModuleKey *k = rm_OpenKey(e->ctx, e->keys[key], RM_READ);
    long long ll;
    int t;

    *s = NULL;
    *len = 0;
    if (e->qval != NULL) {
        rm_FreeString(e->ctx, e->qval);
        e->qval = NULL;
    }
    if (k == NULL)
        return RLM_VAL_OK;
    t = rm_KeyType(k);
    if (t == RM_KEYTYPE_HASH)
        rm_HashGet(k, RM_HASH_NONE, e->args[field], &e->qval, NULL);
    rm_CloseKey(k);
    if (t != RM_KEYTYPE_EMPTY && t != RM_KEYTYPE_HASH)
        return RLM_VAL_WRONGTYPE;
    if (e->qval == NULL)
        return RLM_VAL_OK;
    /* A hash may hold a number as one: no quota, and no string to read. */
    if (rm_StringToLongLong(e->qval, &ll) == RM_OK) {
        *s = "0";
        *len = 1;
    } else {
        *s = rm_StringPtrLen(e->qval, len);
    }
    return RLM_VAL_OK;
}

static void r_begin(void *env)
{
    rm_ReplyWithArray(((env_t *)env)->ctx, RM_POSTPONED_LEN);
}

static void r_int(void *env, int64_t v)
{
    rm_ReplyWithLongLong(((env_t *)env)->ctx, v);
}

static void r_str(void *env, const char *s, size_t len)
{
    rm_ReplyWithStringBuffer(((env_t *)env)->ctx, s, len);
}

/* A sliding window's log (rlm_batch.h): a string of digits, read and
 * written in place like a counter. Its writes go to the replicas and the
 * AOF at once, after whatever the call logged before them (fx_flush), as
 * plain commands: the whole string with SET ... PXAT, or an append as one
 * EVAL of LOG_REP (APPEND, SETRANGE of the header, PEXPIREAT). */
#define LOG_REP                                                                \
    "local k=KEYS[1] redis.call('APPEND',k,ARGV[1]) "                          \
    "redis.call('SETRANGE',k,0,ARGV[2]) redis.call('PEXPIREAT',k,ARGV[3])"

static int k_sget(void *env, void *h, const char **s, size_t *len)
{
    RedisModuleKey *k = ((counter_t *)h)->k;
    int t = k != NULL ? rm_KeyType(k) : RM_KEYTYPE_EMPTY;

    (void)env;
    *s = NULL;
    *len = 0;
    if (t == RM_KEYTYPE_EMPTY)
        return RLM_VAL_OK;
    if (t != RM_KEYTYPE_STRING)
        return RLM_VAL_WRONGTYPE;
    *s = rm_StringDMA(k, len, RM_READ);
    return RLM_VAL_OK;
}

static void warn_log_rep(RedisModuleCtx *ctx)
{
    static int warned;

    if (!warned) {
        warned = 1;
        rm_Log(ctx, "warning",
               "ratelimit: Redis refused to replicate a sliding window's "
               "write (SET or EVAL renamed?): replicas and the AOF miss it");
    }
}

static void k_sset(void *env, void *h, const char *hdr, const char *body,
                   size_t blen, const char *ent, int64_t expire_ms)
{
    env_t *e = env;
    counter_t *c = h;
    size_t n = RLM_LOG_HDR + blen + RLM_LOG_ENT, len = 0;
    char *p = rm_KeyType(c->k) == RM_KEYTYPE_STRING
                  ? rm_StringDMA(c->k, &len, RM_WRITE)
                  : NULL;
    int inside = p != NULL && body >= p && body + blen <= p + len;

    /* The live entries move to just after the header (body lies in the
     * string sget gave: after it, as the header comes first). */
    if (inside)
        memmove(p + RLM_LOG_HDR, body, blen);
    if (rm_StringTruncate(c->k, n) != RM_OK ||
        (p = rm_StringDMA(c->k, &len, RM_WRITE)) == NULL || len != n)
        return;
    memcpy(p, hdr, RLM_LOG_HDR);
    if (!inside)
        memcpy(p + RLM_LOG_HDR, body, blen);
    memcpy(p + RLM_LOG_HDR + blen, ent, RLM_LOG_ENT);
    rm_SetAbsExpire(c->k, expire_ms);
    fx_flush(e->ctx);
    if (rm_Replicate(e->ctx, "SET", "sbsl", c->name, p, n, w_pxat,
                     (long long)expire_ms) != RM_OK)
        warn_log_rep(e->ctx);
}

static void k_sappend(void *env, void *h, const char *hdr, const char *ent,
                      int64_t expire_ms)
{
    env_t *e = env;
    counter_t *c = h;
    size_t len = 0, n;
    char *p = rm_StringDMA(c->k, &len, RM_WRITE);

    n = len + RLM_LOG_ENT;
    if (p == NULL || rm_StringTruncate(c->k, n) != RM_OK ||
        (p = rm_StringDMA(c->k, &len, RM_WRITE)) == NULL || len != n)
        return;
    memcpy(p + n - RLM_LOG_ENT, ent, RLM_LOG_ENT);
    memcpy(p, hdr, RLM_LOG_HDR);
    rm_SetAbsExpire(c->k, expire_ms);
    fx_flush(e->ctx);
    if (rm_Replicate(e->ctx, "EVAL", "clsbbl", LOG_REP, 1LL, c->name, ent,
                     (size_t)RLM_LOG_ENT, hdr, (size_t)RLM_LOG_HDR,
                     (long long)expire_ms) != RM_OK &&
        (rm_Replicate(e->ctx, "APPEND", "sb", c->name, ent,
                      (size_t)RLM_LOG_ENT) != RM_OK ||
         rm_Replicate(e->ctx, "SETRANGE", "slb", c->name, 0LL, hdr,
                      (size_t)RLM_LOG_HDR) != RM_OK ||
         rm_Replicate(e->ctx, "PEXPIREAT", "sl", c->name,
                      (long long)expire_ms) != RM_OK))
        warn_log_rep(e->ctx);
}

static const rlm_io_t io = {k_open,  k_get,   k_write,  k_wtext, k_del,
                            k_close, k_quota, r_begin,  r_int,   r_str,
                            k_sget,  k_sset,  k_sappend};

/* argv[1] is numkeys, as EVAL's; -1 when it is not a count of argv. */
static long long numkeys(RedisModuleString **argv, int argc)
{
    long long nk;

    if (argc < 2 || rm_StringToLongLong(argv[1], &nk) != RM_OK || nk < 0 ||
        nk > argc - 2)
        return -1;
    return nk;
}

static int cmd_batch(RedisModuleCtx *ctx, RedisModuleString **argv, int argc)
{
    long long nk = numkeys(argv, argc);
    const char **ptr;
    size_t *len, nput;
    rlm_args_t a;
    env_t e;
    int i, flags, replay, rc;

    if (rm_IsKeysPositionRequest(ctx)) {
        for (i = 0; i < nk; i++)
            rm_KeyAtPos(ctx, 2 + i);
        return RM_OK;
    }
    if (argc < 2)
        return rm_WrongArity(ctx);
    if (nk < 0)
        return rm_ReplyWithError(ctx, "ERR rl.batch: bad number of keys");
    ptr = rm_Alloc((size_t)argc * (sizeof(*ptr) + sizeof(*len)));
    if (ptr == NULL)
        return rm_ReplyWithError(ctx, "ERR rl.batch: out of memory");
    len = (size_t *)(void *)(ptr + argc);
    for (i = 2; i < argc; i++)
        ptr[i] = rm_StringPtrLen(argv[i], &len[i]);
    a.kv = ptr + 2;
    a.kl = len + 2;
    a.nkeys = (size_t)nk;
    a.av = ptr + 2 + nk;
    a.al = len + 2 + nk;
    a.nargs = (size_t)(argc - 2 - nk);
    memset(&e, 0, sizeof(e));
    e.ctx = ctx;
    e.keys = argv + 2;
    e.args = argv + 2 + nk;
    /* Most batches write a counter per key, a few more with a stored
     * quota's. */
    e.room = (size_t)nk < FX_KEEP ? (size_t)nk + RLM_WIN_MAX : FX_KEEP;
    flags = rm_GetContextFlags(ctx);
    replay = (flags & (RM_CTX_FLAGS_REPLICATED | RM_CTX_FLAGS_LOADING)) != 0;
    e.t0 = rm_Milliseconds();
    rc = rlm_batch(&io, &e, &a, replay ? -1 : e.t0,
                   !replay && (flags & RM_CTX_FLAGS_CLUSTER) ? RLM_CLUSTER : 0,
                   !replay && (flags & RM_CTX_FLAGS_OOM)
                       ? "OOM command not allowed when used memory > "
                         "'maxmemory'."
                       : NULL,
                   &nput);
    fx_flush(ctx);
    if (fx.cap > FX_KEEP)
        fx_release();
    if (e.qval != NULL)
        rm_FreeString(ctx, e.qval);
    rm_Free(ptr);
    if (rc == RLM_EARGS)
        return rm_ReplyWithError(ctx, "ERR rl.batch: malformed arguments");
    if (rc == RLM_ECROSSSLOT)
        return rm_ReplyWithError(ctx, "CROSSSLOT rl.batch: a stored quota's "
                                      "counters need the hash tag of the "
                                      "op's keys");
    if (rc == RLM_LATE)
        return rm_ReplyWithStringBuffer(ctx, "late", 4);
    rm_ReplySetArrayLength(ctx, (long)nput);
    return RM_OK;
}

static int cmd_version(RedisModuleCtx *ctx, RedisModuleString **argv,
                       int argc)
{
    (void)argv;
    if (argc != 1)
        return rm_WrongArity(ctx);
    return rm_ReplyWithLongLong(ctx, RLM_VERSION);
}

#define API(name) rm_GetApi("RedisModule_" #name, (void *)&rm_##name)

int RedisModule_OnLoad(RedisModuleCtx *ctx, RedisModuleString **argv,
                       int argc);
int RedisModule_OnUnload(RedisModuleCtx *ctx);

__attribute__((visibility("default"))) int
RedisModule_OnLoad(RedisModuleCtx *ctx, RedisModuleString **argv, int argc)
{
    int bad = 0;

    (void)argv;
    (void)argc;
    /* The context's first member is the API lookup (the documented
     * RedisModule_Init does the same). */
    memcpy(&rm_GetApi, (void *)ctx, sizeof(rm_GetApi));
    if (API(SetModuleAttribs) != RM_OK)
        return RM_ERR;
    bad |= API(CreateCommand) | API(StringPtrLen) | API(CreateString) |
           API(FreeString) | API(StringToLongLong) | API(OpenKey) |
           API(CloseKey) | API(KeyType) | API(DeleteKey) | API(StringDMA) |
           API(StringTruncate) | API(Milliseconds) | API(HashGet) |
           API(ReplyWithArray) | API(ReplySetArrayLength) |
           API(ReplyWithLongLong) | API(ReplyWithStringBuffer) |
           API(ReplyWithError) | API(WrongArity) | API(GetContextFlags) |
           API(Replicate) | API(IsKeysPositionRequest) | API(KeyAtPos) |
           API(Alloc) | API(Free) | API(Log);
    if (bad)
        return RM_ERR;
    /* Absolute expiries, for the counters and for the SET ... PXAT that
     * replicates them (both Redis 6.2 and later): with relative ones a
     * replica or an AOF reload would move every expiry. */
    if (API(SetAbsExpire) != RM_OK) {
        rm_Log(ctx, "warning",
               "ratelimit: needs Redis 6.2 or later "
               "(RedisModule_SetAbsExpire)");
        return RM_ERR;
    }
    rm_SetModuleAttribs(ctx, "ratelimit", RLM_VERSION, RM_APIVER_1);
    if ((w_script = rm_CreateString(NULL, REP_SCRIPT,
                                    sizeof(REP_SCRIPT) - 1)) == NULL ||
        (w_pxat = rm_CreateString(NULL, "PXAT", 4)) == NULL ||
        (w_keepttl = rm_CreateString(NULL, "KEEPTTL", 7)) == NULL ||
        rm_CreateCommand(ctx, "rl.batch", cmd_batch, "write getkeys-api", 0, 0,
                         0) != RM_OK ||
        rm_CreateCommand(ctx, "rl.version", cmd_version, "readonly fast", 0, 0,
                         0) != RM_OK) {
        RedisModule_OnUnload(ctx);
        return RM_ERR;
    }
    return RM_OK;
}

/* Frees what OnLoad made (Redis calls it at MODULE UNLOAD). */
__attribute__((visibility("default"))) int
RedisModule_OnUnload(RedisModuleCtx *ctx)
{
    if (w_script != NULL)
        rm_FreeString(NULL, w_script);
    if (w_pxat != NULL)
        rm_FreeString(NULL, w_pxat);
    if (w_keepttl != NULL)
        rm_FreeString(NULL, w_keepttl);
    w_script = w_pxat = w_keepttl = NULL;
    fx_release();
    (void)ctx;
    return RM_OK;
}
