/* Fuzz target: the Redis module's batch (server/redis_module/rlm_batch.c)
 * over a keyspace of this file's own. Its arguments come from whoever may
 * send RL.BATCH to the Redis, and the counters and quotas it reads from
 * whoever may write there: input like any other.
 *
 * Input, lines ('\n'): first the keyspace, one entry a line, "S name
 * value" (a string), "L name" (a list) or "H name field value" (a hash of
 * one field), up to a line "."; then numkeys, the keys and the arguments,
 * a line each, as RL.BATCH gets them after its name. An input whose
 * length is a multiple of 5 runs as on a Redis Cluster (RLM_CLUSTER).
 * Beyond "does not crash or leak", it checks the contract:
 *   - rlm_batch returns RLM_OK, RLM_LATE, RLM_EARGS or (on a cluster
 *     only) RLM_ECROSSSLOT;
 *   - every counter it opens it closes, at most RLM_OPEN_MAX open at
 *     once, and it writes only through ones open for writing;
 *   - RLM_LATE, RLM_EARGS and RLM_ECROSSSLOT write nothing and reply
 *     nothing;
 *   - RLM_OK and RLM_LATE only with the deadline, clock and grace within
 *     [0, RLM_MS_MAX];
 *   - RLM_OK begins the reply once and *nput is the number of elements;
 *     every value it writes is a counter's digits (an int64) or a
 *     sliding-window-counter's state (digits and ':'); every
 *     counter it creates gets an expiry, and every expiry it sets is
 *     positive;
 *   - on a cluster, with KEYS in one slot, every counter it opens is in
 *     that slot;
 *   - the same input, the same reply and the same keyspace after.
 *
 * Built two ways (tests/fuzz/CMakeLists.txt, tests/fuzz/run.sh): with
 * clang's libFuzzer, and with RL_FUZZ_REPLAY as a plain program that runs
 * the seed corpus (corpus/rlm_batch), then well-formed batches as
 * rl-server encodes them (rls_redis_encode_module) over a random keyspace,
 * some with a time or an expiry at or past the edge of its range (refused
 * exactly when past it) or with keys of no hash tag (refused exactly on a
 * cluster, when a stored quota is named), and, every other one, batches
 * of ops of other algorithms ("a") written here, some with an argument at
 * or past the edge of its range (refused exactly when past it), and
 * mutations of those, in every build. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "redis_module/rlm_batch.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond)                                                            \
    do {                                                                       \
        if (!(cond)) {                                                         \
            fprintf(stderr, "fuzz_rlm_batch: %s:%d: %s\n", __FILE__,          \
                    __LINE__, #cond);                                          \
            abort();                                                           \
        }                                                                      \
    } while (0)

#define MAX_ENTRIES 128
#define MAX_FIELDS 4096

typedef struct {
    char *name, *field, *value; /* NUL-terminated copies */
    size_t name_len, value_len;
    char type; /* 0 none, 'S', 'L', 'H' */
    int64_t expire;
    int open, write; /* open, and for writing */
} entry_t;

typedef struct {
    entry_t e[MAX_ENTRIES];
    size_t n;
    const rlm_args_t *a;
    int begun, opens, writes;
    int slot; /* on a cluster, the slot of every KEYS; else -1 */
    size_t puts;
    uint64_t hash; /* of the reply */
} env_t;

/* Redis Cluster's slot of a key (CRC16/XMODEM of its hash tag, or of the
 * whole name when it has none), computed here apart from the module. */
static int key_slot(const char *k, size_t len)
{
    size_t s, e, i;
    uint16_t crc = 0;

    for (s = 0; s < len && k[s] != '{'; s++)
        ;
    if (s < len) {
        for (e = s + 1; e < len && k[e] != '}'; e++)
            ;
        if (e < len && e > s + 1) {
            k += s + 1;
            len = e - s - 1;
        }
    }
    for (i = 0; i < len; i++) {
        int b;
        crc ^= (uint16_t)((unsigned char)k[i] << 8);
        for (b = 0; b < 8; b++)
            crc = (uint16_t)(crc & 0x8000 ? (crc << 1) ^ 0x1021 : crc << 1);
    }
    return crc & 16383;
}

static char *dup_bytes(const char *s, size_t len)
{
    char *p = malloc(len + 1);

    CHECK(p != NULL);
    memcpy(p, s, len);
    p[len] = '\0';
    return p;
}

static entry_t *find(env_t *v, const char *name, size_t len, int make)
{
    size_t i;

    for (i = 0; i < v->n; i++)
        if (v->e[i].name_len == len && memcmp(v->e[i].name, name, len) == 0)
            return &v->e[i];
    if (!make || v->n == MAX_ENTRIES)
        return NULL;
    memset(&v->e[v->n], 0, sizeof(v->e[0]));
    v->e[v->n].name = dup_bytes(name, len);
    v->e[v->n].name_len = len;
    return &v->e[v->n++];
}

static void *k_open(void *env, size_t key, const char *name, size_t len)
{
    env_t *v = env;
    entry_t *e;

    if (name == NULL) {
        CHECK(key < v->a->nkeys);
        name = v->a->kv[key];
        len = v->a->kl[key];
    }
    CHECK(v->slot < 0 || key_slot(name, len) == v->slot);
    if ((e = find(v, name, len, 1)) == NULL)
        return NULL;
    CHECK(!e->open && v->opens < RLM_OPEN_MAX);
    e->open = 1;
    e->write = 1;
    v->opens++;
    return e;
}

static int k_get(void *env, void *h, int64_t *val, int *exists)
{
    entry_t *e = h;

    (void)env;
    CHECK(e->open);
    *val = 0;
    *exists = e->type != 0;
    if (e->type == 0)
        return RLM_VAL_OK;
    if (e->type != 'S')
        return RLM_VAL_WRONGTYPE;
    return rlm_parse_i64(e->value, e->value_len, val) == 0 ? RLM_VAL_OK
                                                           : RLM_VAL_NOTINT;
}

static void k_write(void *env, void *h, int64_t val, int64_t expire_ms)
{
    entry_t *e = h;
    char t[32];
    int64_t back;
    int n = snprintf(t, sizeof(t), "%lld", (long long)val);

    CHECK(e->open && e->write && (e->type == 0 || e->type == 'S'));
    CHECK(rlm_parse_i64(t, (size_t)n, &back) == 0 && back == val);
    CHECK(expire_ms >= 0 && (e->type != 0 || expire_ms > 0));
    free(e->value);
    e->value = dup_bytes(t, (size_t)n);
    e->value_len = (size_t)n;
    e->type = 'S';
    if (expire_ms > 0)
        e->expire = expire_ms;
    ((env_t *)env)->writes++;
}

static void k_wtext(void *env, void *h, const char *s, size_t n,
                    int64_t expire_ms)
{
    entry_t *e = h;
    size_t i;

    CHECK(e->open && e->write && (e->type == 0 || e->type == 'S'));
    CHECK(n > 0 && n <= 72);
    for (i = 0; i < n; i++)
        CHECK((s[i] >= '0' && s[i] <= '9') || s[i] == ':' || s[i] == '-');
    CHECK(expire_ms >= 0 && (e->type != 0 || expire_ms > 0));
    free(e->value);
    e->value = dup_bytes(s, n);
    e->value_len = n;
    e->type = 'S';
    if (expire_ms > 0)
        e->expire = expire_ms;
    ((env_t *)env)->writes++;
}

static void k_del(void *env, void *h)
{
    entry_t *e = h;

    CHECK(e->open && e->write && e->type == 'S');
    e->type = 0;
    e->expire = 0;
    ((env_t *)env)->writes++;
}

static void k_close(void *env, void *h)
{
    entry_t *e = h;

    CHECK(e->open);
    e->open = 0;
    ((env_t *)env)->opens--;
}

static int k_quota(void *env, size_t key, size_t field, const char **s,
                   size_t *len)
{
    env_t *v = env;
    entry_t *e;

    CHECK(key < v->a->nkeys && field < v->a->nargs);
    *s = NULL;
    *len = 0;
    e = find(v, v->a->kv[key], v->a->kl[key], 0);
    if (e == NULL || e->type == 0)
        return RLM_VAL_OK;
    if (e->type != 'H')
        return RLM_VAL_WRONGTYPE;
    if (strlen(e->field) == v->a->al[field] &&
        memcmp(e->field, v->a->av[field], v->a->al[field]) == 0) {
        *s = e->value;
        *len = e->value_len;
    }
    return RLM_VAL_OK;
}

static void mix(env_t *v, const void *p, size_t n)
{
    const unsigned char *b = p;
    size_t i;

    for (i = 0; i < n; i++)
        v->hash = (v->hash ^ b[i]) * UINT64_C(1099511628211);
}

static void r_begin(void *env)
{
    env_t *v = env;

    CHECK(!v->begun);
    v->begun = 1;
}

static void r_int(void *env, int64_t x)
{
    env_t *v = env;

    CHECK(v->begun);
    v->puts++;
    mix(v, "i", 1);
    mix(v, &x, sizeof(x));
}

static void r_str(void *env, const char *s, size_t len)
{
    env_t *v = env;

    CHECK(v->begun);
    v->puts++;
    mix(v, "s", 1);
    mix(v, s, len);
}

/* A log's string: digits only (as every value written here). */
static int all_digits(const char *s, size_t n)
{
    size_t i;

    for (i = 0; i < n; i++)
        if (s[i] < '0' || s[i] > '9')
            return 0;
    return 1;
}

static int k_sget(void *env, void *h, const char **s, size_t *len)
{
    entry_t *e = h;

    (void)env;
    CHECK(e->open && e->write);
    *s = NULL;
    *len = 0;
    if (e->type == 0)
        return RLM_VAL_OK;
    if (e->type != 'S')
        return RLM_VAL_WRONGTYPE;
    *s = e->value;
    *len = e->value_len;
    return RLM_VAL_OK;
}

static void k_sset(void *env, void *h, const char *hdr, const char *body,
                   size_t blen, const char *ent, int64_t expire_ms)
{
    entry_t *e = h;
    size_t n = RLM_LOG_HDR + blen + RLM_LOG_ENT;
    char *v = malloc(n + 1);

    CHECK(v != NULL);
    CHECK(e->open && e->write && (e->type == 0 || e->type == 'S'));
    CHECK(expire_ms > 0);
    /* body lies in the old value, or is empty */
    CHECK(blen == 0 || (e->type == 'S' && body >= e->value &&
                        body + blen <= e->value + e->value_len));
    memcpy(v, hdr, RLM_LOG_HDR);
    memcpy(v + RLM_LOG_HDR, body, blen);
    memcpy(v + RLM_LOG_HDR + blen, ent, RLM_LOG_ENT);
    v[n] = '\0';
    CHECK(all_digits(v, n));
    free(e->value);
    e->value = v;
    e->value_len = n;
    e->type = 'S';
    e->expire = expire_ms;
    ((env_t *)env)->writes++;
}

static void k_sappend(void *env, void *h, const char *hdr, const char *ent,
                      int64_t expire_ms)
{
    entry_t *e = h;
    char *v;

    CHECK(e->open && e->write && e->type == 'S');
    CHECK(e->value_len >= RLM_LOG_HDR && expire_ms > 0);
    v = malloc(e->value_len + RLM_LOG_ENT + 1);
    CHECK(v != NULL);
    memcpy(v, e->value, e->value_len);
    memcpy(v, hdr, RLM_LOG_HDR);
    memcpy(v + e->value_len, ent, RLM_LOG_ENT);
    v[e->value_len + RLM_LOG_ENT] = '\0';
    CHECK(all_digits(v, e->value_len + RLM_LOG_ENT));
    free(e->value);
    e->value = v;
    e->value_len += RLM_LOG_ENT;
    e->expire = expire_ms;
    ((env_t *)env)->writes++;
}

static const rlm_io_t io = {k_open,  k_get,   k_write,  k_wtext, k_del,
                            k_close, k_quota, r_begin,  r_int,   r_str,
                            k_sget,  k_sset,  k_sappend};

/* Splits the input into its keyspace and its argument lines. Returns the
 * number of argument lines, or -1 when there is no "." line. */
static long split(const uint8_t *data, size_t size, env_t *v,
                  const char **f, size_t *fl)
{
    size_t at = 0, n = 0;
    int in_args = 0;

    while (at < size && n < MAX_FIELDS) {
        const char *s = (const char *)data + at;
        const char *nl = memchr(s, '\n', size - at);
        size_t len = nl != NULL ? (size_t)(nl - s) : size - at;

        at += len + 1;
        if (in_args) {
            f[n] = s;
            fl[n++] = len;
            continue;
        }
        if (len == 1 && s[0] == '.') {
            in_args = 1;
            continue;
        }
        if (len >= 3 && s[1] == ' ' && (s[0] == 'S' || s[0] == 'L' ||
                                        s[0] == 'H')) {
            const char *name = s + 2, *end = s + len;
            const char *sp = memchr(name, ' ', (size_t)(end - name));
            size_t nl2 = sp != NULL ? (size_t)(sp - name) : (size_t)(end - name);
            entry_t *e = find(v, name, nl2, 1);
            const char *rest = sp != NULL ? sp + 1 : end;

            if (e == NULL || e->type != 0)
                continue;
            e->type = s[0];
            if (s[0] == 'H') {
                const char *sp2 = memchr(rest, ' ', (size_t)(end - rest));
                if (sp2 == NULL) {
                    e->type = 0;
                    continue;
                }
                e->field = dup_bytes(rest, (size_t)(sp2 - rest));
                rest = sp2 + 1;
            }
            e->value = dup_bytes(rest, (size_t)(end - rest));
            e->value_len = (size_t)(end - rest);
        }
    }
    return in_args ? (long)n : -1;
}

static void clear(env_t *v)
{
    size_t i;

    for (i = 0; i < v->n; i++) {
        free(v->e[i].name);
        free(v->e[i].field);
        free(v->e[i].value);
    }
    v->n = 0;
}

/* The keyspace's state, for comparing two runs. */
static uint64_t state_of(const env_t *v)
{
    uint64_t h = 14695981039346656037u;
    size_t i, k;

    for (i = 0; i < v->n; i++) {
        const entry_t *e = &v->e[i];
        h = (h ^ (uint64_t)e->type) * UINT64_C(1099511628211);
        h = (h ^ (uint64_t)e->expire) * UINT64_C(1099511628211);
        for (k = 0; e->type == 'S' && k < e->value_len; k++)
            h = (h ^ (unsigned char)e->value[k]) * UINT64_C(1099511628211);
    }
    return h;
}

/* ARGV[i] is a time rlm_batch may take: within [0, RLM_MS_MAX]. */
static int in_range(const rlm_args_t *a, size_t i)
{
    int64_t x;

    return i < a->nargs && rlm_parse_i64(a->av[i], a->al[i], &x) == 0 &&
           x >= 0 && x <= RLM_MS_MAX;
}

/* Runs the input once, as on a Redis Cluster when cluster is set; 0 when
 * it has no argument lines. */
static int run_once(const uint8_t *data, size_t size, int cluster, env_t *v,
                    int *rc, size_t *nput, uint64_t *state)
{
    static const char *f[MAX_FIELDS];
    static size_t fl[MAX_FIELDS];
    int64_t nk;
    long n;
    rlm_args_t a;
    uint64_t before;
    size_t i;

    memset(v, 0, sizeof(*v));
    if ((n = split(data, size, v, f, fl)) < 1 ||
        rlm_parse_i64(f[0], fl[0], &nk) != 0 || nk < 0 || nk > n - 1) {
        clear(v);
        return 0;
    }
    a.kv = f + 1;
    a.kl = fl + 1;
    a.nkeys = (size_t)nk;
    a.av = f + 1 + nk;
    a.al = fl + 1 + nk;
    a.nargs = (size_t)(n - 1 - nk);
    v->a = &a;
    /* Redis runs a call on a cluster node only when its KEYS are in one
     * slot; the counters it names itself must stay there. */
    v->slot = -1;
    for (i = 0; cluster && i < a.nkeys; i++) {
        int s = key_slot(a.kv[i], a.kl[i]);
        if (i > 0 && s != v->slot) {
            v->slot = -1;
            break;
        }
        v->slot = s;
    }
    before = state_of(v);
    /* The clock: late for any deadline set, unless the input is short. */
    *rc = rlm_batch(&io, v, &a, size % 3 == 0 ? -1 : (int64_t)size * 1000,
                    cluster ? RLM_CLUSTER : 0,
                    size % 7 == 0 ? "OOM command not allowed" : NULL, nput);
    CHECK(*rc == RLM_OK || *rc == RLM_LATE || *rc == RLM_EARGS ||
          (cluster && *rc == RLM_ECROSSSLOT));
    CHECK(v->opens == 0);
    if (*rc == RLM_OK || *rc == RLM_LATE)
        CHECK(in_range(&a, 0) && in_range(&a, 1) && in_range(&a, 2));
    if (*rc != RLM_OK) {
        CHECK(!v->begun && v->puts == 0 && *nput == 0 && v->writes == 0);
        CHECK(state_of(v) == before);
    } else {
        CHECK(v->begun && v->puts == *nput);
    }
    *state = state_of(v);
    clear(v);
    return 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static env_t v1, v2;
    size_t n1, n2;
    uint64_t s1, s2;
    int rc1, rc2;

    if (!run_once(data, size, size % 5 == 0, &v1, &rc1, &n1, &s1))
        return 0;
    CHECK(run_once(data, size, size % 5 == 0, &v2, &rc2, &n2, &s2));
    CHECK(rc1 == rc2 && n1 == n2 && s1 == s2 && v1.hash == v2.hash);
    return 0;
}

#ifdef RL_FUZZ_REPLAY
#include "rl_error.h"
#include "store/redis_encode.h"
#include "store/store.h"
#include "walk.h"

/* Without libFuzzer: runs each file named (a directory is read with the
 * names listed in it), then batches as rl-server encodes them, then
 * mutations of those. A seed named ok-* must be RLM_OK; bad-* RLM_EARGS;
 * cross-* RLM_ECROSSSLOT on a cluster and RLM_OK elsewhere. */

static int run_file(const char *path)
{
    static uint8_t buf[1 << 16];
    const char *base = strrchr(path, '/');
    static env_t v;
    size_t n, nput;
    uint64_t st;
    int rc = -100, rc_cl = -100, cross;

    if (rlf_read(path, buf, sizeof(buf), &n) != 0)
        return 1;
    LLVMFuzzerTestOneInput(buf, n);
    base = base != NULL ? base + 1 : path;
    cross = strncmp(base, "cross-", 6) == 0;
    run_once(buf, n, 0, &v, &rc, &nput, &st);
    run_once(buf, n, 1, &v, &rc_cl, &nput, &st);
    if ((strncmp(base, "ok-", 3) == 0 && (rc != RLM_OK || rc_cl != RLM_OK)) ||
        (strncmp(base, "bad-", 4) == 0 &&
         (rc != RLM_EARGS || rc_cl != RLM_EARGS)) ||
        (cross && (rc != RLM_OK || rc_cl != RLM_ECROSSSLOT))) {
        fprintf(stderr, "fuzz_rlm_batch: %s: rc=%d, on a cluster %d\n", path,
                rc, rc_cl);
        return 1;
    }
    return 0;
}

/* Values at the edges of a time's range [0, RLM_MS_MAX] (an expiry's is
 * [1, RLM_MS_MAX]), and whether each is in it. */
static const struct {
    const char *text;
    int in, in_expiry;
} edges[] = {
    {"0", 1, 0},
    {"1", 1, 1},
    {"9007199254740991", 1, 1},
    {"9007199254740992", 0, 0},
    {"9223372036854775807", 0, 0},
    {"-1", 0, 0},
    {"-9223372036854775808", 0, 0},
    {"18446744073709551615", 0, 0},
};
#define NEDGES (sizeof(edges) / sizeof(edges[0]))
/* The expiry a batch's edge replaces: no other argument has this value. */
#define EDGE_EXPIRY "900777"

/* What a generated batch must get. */
typedef struct {
    int bad;         /* an argument out of range: RLM_EARGS */
    int quota_plain; /* a stored quota named on keys of no hash tag */
} expect_t;

/* A batch as the store encodes it (RESP of RL.BATCH), turned into this
 * target's input over a random keyspace; one time in two with one of the
 * deadline, clock, grace or an expiry replaced by an edge value, one in
 * six on keys of no hash tag. */
static size_t well_formed(uint8_t *buf, size_t cap, expect_t *x)
{
    static const char *const quotas[] = {"5/60 9/3600", "abc", "0/60",
                                         "3/60 3/60", "7/1"};
    static char keys[8][64];
    static rls_op_t ops[8];
    static rls_op_window_t win[8][RL_ADMIT_WINDOWS_MAX];
    static uint32_t costs[8][4];
    static rls_cmdbuf_t cmd;
    size_t n = 1 + rlf_rand() % 8, i, j, len = 0, clen, nk = 0;
    unsigned edge = rlf_rand() % 8, e = rlf_rand() % NEDGES;
    int plain = rlf_rand() % 6 == 0, alg = rlf_rand() % 2;
    const char *p, *end, *tag = plain ? "" : "{", *gat = plain ? "" : "}";

    memset(x, 0, sizeof(*x));
    for (i = 0; i < n; i++) {
        rls_op_t *op = &ops[i];
        uint32_t nc = 1 + rlf_rand() % 4, c = 1 + rlf_rand() % 3;
        snprintf(keys[i], sizeof(keys[i]), "rl:%sc%u%s:r:t", tag,
                 rlf_rand() % 4, gat);
        memset(op, 0, sizeof(*op));
        op->key = keys[i];
        op->key_len = strlen(keys[i]);
        op->tag_len = plain ? op->key_len
                            : (size_t)(strchr(keys[i], '}') + 1 - keys[i]);
        op->win = win[i];
        op->nwin = 1 + rlf_rand() % 3;
        op->scale = 1;
        for (j = 0; j < nc; j++)
            costs[i][j] = rlf_rand() % 2 ? c : 1 + rlf_rand() % 3;
        op->costs = costs[i];
        op->ncosts = nc;
        op->equal_cost = costs[i][0];
        for (j = 1; j < nc; j++)
            if (costs[i][j] != costs[i][0])
                op->equal_cost = 0;
        if (rlf_rand() % 4 == 0) {
            op->quota = "t";
            op->quota_len = 1;
            op->scale = rlf_rand() % 2 ? 1 : 0.5;
            x->quota_plain |= plain;
        }
        for (j = 0; j < op->nwin; j++) {
            rls_op_window_t *w = &win[i][j];
            memset(w, 0, sizeof(*w));
            w->window_s = (uint32_t)(60 * (j + 1));
            w->limit = 1 + rlf_rand() % 6;
            w->index = 7;
            w->expire_at_ms = 900000 + j;
            /* Behind a fixed window, one time in two another algorithm:
             * ops that go as "a" profiles ("R", "A") or spelled out. */
            if (j > 0 && alg)
                switch (rlf_rand() % 3) {
                case 0:
                    w->algo = RL_ALGO_SLIDING_COUNTER;
                    w->weight = 40000;
                    break;
                case 1:
                    w->algo = RL_ALGO_GCRA;
                    w->t_us = 500000;
                    break;
                default:
                    w->algo = RL_ALGO_SLIDING_LOG;
                }
        }
    }
    if (edge == 3) {
        i = rlf_rand() % n;
        j = rlf_rand() % ops[i].nwin;
        if (win[i][j].algo == RL_ALGO_GCRA)
            j = 0; /* (it sends no expiry) */
        win[i][j].expire_at_ms = strtoull(EDGE_EXPIRY, NULL, 10);
        x->bad = !edges[e].in_expiry;
    } else if (edge < 3) {
        x->bad = !edges[e].in;
    }
    for (i = 0; i < 4; i++) {
        char k[64], wk[128];
        snprintf(k, sizeof(k), "rl:%sc%zu%s", tag, i, gat);
        switch (rlf_rand() % 4) {
        case 0:
            len += (size_t)snprintf((char *)buf + len, cap - len,
                                    "H %s:q t %s\n", k,
                                    quotas[rlf_rand() % 5]);
            break;
        case 1:
            len += (size_t)snprintf((char *)buf + len, cap - len, "L %s:q\n",
                                    k);
            break;
        default:
            break;
        }
        snprintf(wk, sizeof(wk), "%s:r:t:60:7", k);
        if (rlf_rand() % 2)
            len += (size_t)snprintf((char *)buf + len, cap - len, "S %s %d\n",
                                    wk, (int)(rlf_rand() % 8) - 1);
    }
    len += (size_t)snprintf((char *)buf + len, cap - len, ".\n");
    CHECK(rls_redis_encode_module(&cmd, ops, n, 420000, 1000,
                                  rlf_rand() % 2 ? 0 : 10) == 0);
    clen = cmd.len;
    /* "*N" then "$len\r\nbytes\r\n" per argument; skip RL.BATCH. Argument
     * i is numkeys (i = 1), a key, or ARGV[i - 2 - numkeys]. */
    p = memchr(cmd.p, '\n', clen) + 1;
    end = cmd.p + clen;
    for (i = 0; p < end; i++) {
        size_t ol = (size_t)strtoul(p + 1, NULL, 10), al = ol;
        const char *arg;
        p = memchr(p, '\n', (size_t)(end - p)) + 1;
        arg = p;
        if (i == 1)
            nk = (size_t)strtoul(p, NULL, 10);
        if ((edge < 3 && i == 2 + nk + edge) ||
            (edge == 3 && i > 1 + nk && ol == strlen(EDGE_EXPIRY) &&
             memcmp(p, EDGE_EXPIRY, ol) == 0)) {
            arg = edges[e].text;
            al = strlen(arg);
        }
        if (i > 0 && len + al + 1 < cap) {
            memcpy(buf + len, arg, al);
            len += al;
            buf[len++] = '\n';
        }
        p += ol + 2;
    }
    return len > 0 ? len - 1 : 0;
}

/* Appends a line to buf (len bytes of cap). */
static void line(uint8_t *buf, size_t cap, size_t *len, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static void line(uint8_t *buf, size_t cap, size_t *len, const char *fmt, ...)
{
    va_list ap;
    int n;

    va_start(ap, fmt);
    n = vsnprintf((char *)buf + *len, cap - *len, fmt, ap);
    va_end(ap);
    CHECK(n >= 0 && (size_t)n + 1 < cap - *len);
    *len += (size_t)n;
    buf[(*len)++] = '\n';
}

/* Values at the edges of an "a" op's arguments, and whether each is in
 * range. */
typedef struct {
    const char *text;
    int in;
} edge_t;
static const edge_t lim_edges[] = {
    {"1", 1}, {"9223372036854775807", 1}, {"0", 0}, {"-1", 0}};
static const edge_t weight_edges[] = {
    {"1", 1}, {"65536", 1}, {"0", 0}, {"65537", 0}};
static const edge_t log_lim_edges[] = {
    {"1", 1}, {"1000000", 1}, {"0", 0}, {"1000001", 0}};
static const edge_t log_win_edges[] = {
    {"1", 1}, {"31622400000", 1}, {"0", 0}, {"31622400001", 0}};
static const edge_t idx_edges[] = {
    {"0", 1}, {"9007199254740991", 1}, {"-1", 0}, {"9007199254740992", 0}};
static const edge_t exp_edges[] = {
    {"1", 1}, {"9007199254740991", 1}, {"0", 0}, {"9007199254740992", 0}};
/* burst and interval: burst x interval within RL_GCRA_CAP_MAX_US. */
static const struct {
    const char *burst, *interval;
    int in;
} gcra_edges[] = {{"31622400", "1000000", 1},
                  {"1", "31622400000000", 1},
                  {"1", "1", 1},
                  {"31622400", "1000001", 0},
                  {"1", "31622400000001", 0},
                  {"0", "5", 0},
                  {"5", "0", 0}};
#define NEDGE(a) (sizeof(a) / sizeof(a[0]))

/* One of 4 edges, at random; x->bad is set when it is out of range. */
static const char *pick(const edge_t *e, expect_t *x)
{
    unsigned i = rlf_rand() % 4;

    x->bad |= !e[i].in;
    return e[i].text;
}

/* A batch of ops of other algorithms ("a": 1 to 3 limits of fixed
 * windows, sliding-window-counters, gcras and sliding windows, equal or
 * listed costs), one time in two after a plain op, over 8 keys of each of
 * 4 callers that hold nothing, a count, a TAT about the clock, a log
 * (sometimes cut short), letters or a list; one time in
 * two with one limit's argument replaced by an edge value, x->bad when it
 * is out of range. */
static size_t alg_formed(uint8_t *buf, size_t cap, expect_t *x)
{
    static char keys[64][32];
    static char args[256][48];
    size_t len = 0, nk = 0, na = 0, i, j;
    unsigned nops = 1 + rlf_rand() % 4, plain = rlf_rand() % 2, o;
    unsigned edge_op = rlf_rand() % 8, now = 1000000 + rlf_rand() % 1000;

    memset(x, 0, sizeof(*x));
    for (i = 0; i < 4; i++)
        for (j = 0; j < 8; j++) {
            unsigned r = rlf_rand() % 20;
            if (r < 6)
                continue;
            if (r >= 18) {
                /* a sliding-window-counter's state "index:count:previous"
                 * about the ops' index (5), or (one time in 4) not one */
                static const char *const bad[] = {"5:1",  "5:1:2:3", "-5:1:2",
                                                  "5::2", "x:1:2",   "5:1:2 "};
                if (rlf_rand() % 4 == 0)
                    line(buf, cap, &len, "S rl:{c%zu}:k:1:%zu %s", i, j,
                         bad[rlf_rand() % 6]);
                else
                    line(buf, cap, &len, "S rl:{c%zu}:k:1:%zu %u:%d:%d", i, j,
                         2 + rlf_rand() % 6, (int)(rlf_rand() % 12) - 2,
                         (int)(rlf_rand() % 12) - 2);
                continue;
            }
            if (r >= 16) {
                /* a sliding window's log: two entries about the clock, a
                 * dropped one before them, or (r 17, one time in 4) one
                 * cut short */
                int cut = r == 17 && rlf_rand() % 4 == 0;
                line(buf, cap, &len,
                     "S rl:{c%zu}:k:1:%zu %020u%012u%014u%010u%014u%010u%s", i,
                     j, 3 + rlf_rand() % 3, 56, now - 5000, 1,
                     now - rlf_rand() % 1500, 1 + rlf_rand() % 2,
                     cut ? "12" : "");
                continue;
            }
            if (r < 11)
                line(buf, cap, &len, "S rl:{c%zu}:k:1:%zu %d", i, j,
                     (int)(rlf_rand() % 12) - 2);
            else if (r < 14)
                line(buf, cap, &len, "S rl:{c%zu}:k:1:%zu %lld", i, j,
                     (long long)now * 1000 +
                         ((long long)(rlf_rand() % 9) - 2) * 500000);
            else if (r < 15)
                line(buf, cap, &len, "S rl:{c%zu}:k:1:%zu abc", i, j);
            else
                line(buf, cap, &len, "L rl:{c%zu}:k:1:%zu", i, j);
        }
    /* stored quotas: in any algorithm, or one that does not parse */
    for (i = 0; i < 4; i++) {
        static const char *const quotas[] = {
            "3/1:gcra:burst=2 5/10:sliding-window",
            "4/60:sliding-window-counter 9/3600",
            "2/1 3/60",
            "2/1:leaky",
            "0/1:gcra",
            "1/1:gcra:burst=0"};
        if (rlf_rand() % 3 != 0)
            line(buf, cap, &len, "H rl:{c%zu}:q b %s", i,
                 quotas[rlf_rand() % 6]);
    }
    line(buf, cap, &len, ".");
#define ARG(...) snprintf(args[na++], sizeof(args[0]), __VA_ARGS__)
    ARG("0");
    ARG("%u", now);
    ARG("600000");
    ARG("%u", nops + plain);
    ARG("1");
    ARG("1");
    ARG("900000");
    ARG("5");
    if (plain) {
        snprintf(keys[nk++], sizeof(keys[0]), "rl:{c%u}:p", rlf_rand() % 4);
        ARG("1");
    }
    for (o = 0; o < nops; o++) {
        unsigned caller = rlf_rand() % 4, at = rlf_rand() % 8;
        unsigned nl = 1 + rlf_rand() % 3, l, k = 1 + rlf_rand() % 4;
        unsigned c = 1 + rlf_rand() % 3;

        unsigned quota = rlf_rand() % 4 == 0;

        ARG("a");
        ARG("%u", nl);
        /* one time in four, the caller's stored quota (its hash is the
         * op's last key) */
        ARG("%s", quota ? "b" : "");
        if (quota)
            ARG("%s", rlf_rand() % 2 ? "1" : "0.5");
        for (l = 0; l < nl; l++) {
            unsigned algo = rlf_rand() % 4;
            int edge = edge_op == o && l == 0, e = (int)(rlf_rand() % 5);
            snprintf(keys[nk++], sizeof(keys[0]), "rl:{c%u}:k:1:%u", caller,
                     at++ % 8);
            if (algo == 3) {
                ARG("l");
                ARG("%s", edge && e == 0 ? pick(exp_edges, x) : "900000");
                ARG("%s", edge && e == 1 ? pick(log_lim_edges, x) : "4");
                ARG("%s", edge && e == 2 ? pick(log_win_edges, x) : "1000");
                continue;
            }
            if (algo == 2) {
                unsigned g = rlf_rand() % NEDGE(gcra_edges);
                ARG("g");
                if (edge) {
                    ARG("%s", gcra_edges[g].burst);
                    ARG("%s", gcra_edges[g].interval);
                    x->bad |= !gcra_edges[g].in;
                } else {
                    ARG("%u", 1 + rlf_rand() % 5);
                    ARG("%u", 500000 + rlf_rand() % 2 * 500000);
                }
                continue;
            }
            ARG(algo == 0 ? "f" : "s");
            ARG("%s", edge && e == 0 ? pick(exp_edges, x) : "900000");
            ARG("%s", edge && e == 1 ? pick(lim_edges, x) : "6");
            if (algo == 1) {
                ARG("%s", edge && e == 2 ? pick(weight_edges, x) : "40000");
                ARG("%s", edge && e == 3 ? pick(idx_edges, x) : "5");
            }
        }
        if (quota)
            snprintf(keys[nk++], sizeof(keys[0]), "rl:{c%u}:q", caller);
        if (rlf_rand() % 2) {
            ARG("-%u", k);
            ARG("%u", c);
        } else {
            ARG("%u", k);
            for (j = 0; j < k; j++)
                ARG("%u", rlf_rand() % 2 ? c : 1 + rlf_rand() % 4);
        }
    }
#undef ARG
    line(buf, cap, &len, "%zu", nk);
    for (i = 0; i < nk; i++)
        line(buf, cap, &len, "%s", keys[i]);
    for (i = 0; i < na; i++)
        line(buf, cap, &len, "%s", args[i]);
    return len - 1;
}

int main(int argc, char **argv)
{
    static const char alphabet[] = " \n.-r0123456789:{}qSLH/afsglRA";
    static uint8_t buf[16384];
    static env_t v;
    int i, iters = 20000, files = 0, ok = 0, bad = 0, cross = 0, alg = 0,
           wrote = 0;

    /* The oracle's slots, as CLUSTER KEYSLOT gives them. */
    CHECK(key_slot("foo", 3) == 12182);
    CHECK(key_slot("a{foo}b", 7) == 12182 && key_slot("{}foo", 5) != 12182);
    for (i = 1; i < argc; i++)
        if (rlf_walk(argv[i], run_file, &files) != 0)
            return 1;
    for (i = 0; i < iters; i++) {
        expect_t x;
        size_t n = i % 2 ? alg_formed(buf, sizeof(buf) - 8, &x)
                         : well_formed(buf, sizeof(buf) - 8, &x),
               nput;
        size_t edits = rlf_rand() % 4;
        int cluster = n % 5 == 0, rc = -100;
        uint64_t st;

        CHECK(run_once(buf, n, cluster, &v, &rc, &nput, &st));
        if (x.bad && cluster && x.quota_plain)
            CHECK(rc == RLM_EARGS || rc == RLM_ECROSSSLOT);
        else if (x.bad)
            CHECK(rc == RLM_EARGS);
        else if (cluster && x.quota_plain)
            CHECK(rc == RLM_ECROSSSLOT);
        else
            CHECK(rc == RLM_OK || rc == RLM_LATE);
        ok += rc == RLM_OK;
        bad += rc == RLM_EARGS;
        cross += rc == RLM_ECROSSSLOT;
        alg += i % 2 && rc == RLM_OK;
        wrote += i % 2 && rc == RLM_OK && v.writes > 0;
        n = rlf_mutate(buf, n, sizeof(buf), edits, alphabet, rlf_rand);
        LLVMFuzzerTestOneInput(buf, n);
    }
    /* Each outcome was reached often; "a" ops were decided, and wrote. */
    CHECK(ok > iters / 4 && bad > iters / 20 && cross > iters / 200);
    CHECK(alg > iters / 8 && wrote > iters / 16);
    printf("fuzz_rlm_batch replay: %d files, %d batches (%d decided, %d out "
           "of range, %d cross-slot; %d of other algorithms decided, %d of "
           "them writing), invariants held\n",
           files, iters, ok, bad, cross, alg, wrote);
    return 0;
}
#endif
