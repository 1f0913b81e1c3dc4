/* Fuzz target: the Redis module's batch (server/redis_module/rlm_batch.c)
 * over a keyspace of this file's own. Its arguments come from whoever may
 * send RL.BATCH to the Redis, and the counters and quotas it reads from
 * whoever may write there: input like any other.
 *
 * Input, lines ('\n'): first the keyspace, one entry a line, "S name
 * value" (a string), "L name" (a list) or "H name field value" (a hash of
 * one field), up to a line "."; then numkeys, the keys and the arguments,
 * a line each, as RL.BATCH gets them after its name. Beyond "does not
 * crash or leak", it checks the contract:
 *   - rlm_batch returns RLM_OK, RLM_LATE or RLM_EARGS;
 *   - every counter it opens it closes, and it writes only through open
 *     ones;
 *   - RLM_LATE and RLM_EARGS write nothing and reply nothing;
 *   - RLM_OK begins the reply once and *nput is the number of elements;
 *     every value it writes is a counter's digits (an int64);
 *   - the same input, the same reply and the same keyspace after.
 *
 * Built two ways (tests/fuzz/CMakeLists.txt, tests/fuzz/run.sh): with
 * clang's libFuzzer, and with RL_FUZZ_REPLAY as a plain program that runs
 * the seed corpus (corpus/rlm_batch), then well-formed batches as
 * rl-server encodes them (rls_redis_encode_module) over a random keyspace,
 * and mutations of those, in every build. */
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
    int open;
} entry_t;

typedef struct {
    entry_t e[MAX_ENTRIES];
    size_t n;
    const rlm_args_t *a;
    int begun, opens, writes;
    size_t puts;
    uint64_t hash; /* of the reply */
} env_t;

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
    if ((e = find(v, name, len, 1)) == NULL)
        return NULL;
    CHECK(!e->open);
    e->open = 1;
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

static void k_set(void *env, void *h, int64_t val)
{
    entry_t *e = h;
    char t[32];
    int64_t back;
    int n = snprintf(t, sizeof(t), "%lld", (long long)val);

    CHECK(e->open && (e->type == 0 || e->type == 'S'));
    CHECK(rlm_parse_i64(t, (size_t)n, &back) == 0 && back == val);
    free(e->value);
    e->value = dup_bytes(t, (size_t)n);
    e->value_len = (size_t)n;
    e->type = 'S';
    ((env_t *)env)->writes++;
}

static void k_del(void *env, void *h)
{
    entry_t *e = h;

    CHECK(e->open && e->type == 'S');
    e->type = 0;
    e->expire = 0;
    ((env_t *)env)->writes++;
}

static void k_expire_at(void *env, void *h, int64_t ms)
{
    entry_t *e = h;

    CHECK(e->open && e->type == 'S');
    e->expire = ms;
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

static const rlm_io_t io = {k_open,  k_get,   k_set,   k_del, k_expire_at,
                            k_close, k_quota, r_begin, r_int, r_str};

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

static int run_once(const uint8_t *data, size_t size, env_t *v, int *rc,
                    size_t *nput, uint64_t *state)
{
    static const char *f[MAX_FIELDS];
    static size_t fl[MAX_FIELDS];
    int64_t nk;
    long n;
    rlm_args_t a;
    uint64_t before;

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
    before = state_of(v);
    /* The clock: late for any deadline set, unless the input is short. */
    *rc = rlm_batch(&io, v, &a, size % 3 == 0 ? -1 : (int64_t)size * 1000,
                    size % 7 == 0 ? "OOM command not allowed" : NULL, nput);
    CHECK(*rc == RLM_OK || *rc == RLM_LATE || *rc == RLM_EARGS);
    CHECK(v->opens == 0);
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

    if (!run_once(data, size, &v1, &rc1, &n1, &s1))
        return 0;
    CHECK(run_once(data, size, &v2, &rc2, &n2, &s2));
    CHECK(rc1 == rc2 && n1 == n2 && s1 == s2 && v1.hash == v2.hash);
    return 0;
}

#ifdef RL_FUZZ_REPLAY
#include "rl_error.h"
#include "store/redis_script.h"
#include "store/store.h"
#include "walk.h"

/* Without libFuzzer: runs each file named (a directory is read with the
 * names listed in it), then batches as rl-server encodes them, then
 * mutations of those. A seed named ok-* must be RLM_OK; bad-* RLM_EARGS. */

static int run_file(const char *path)
{
    static uint8_t buf[1 << 16];
    const char *base = strrchr(path, '/');
    static env_t v;
    size_t n, nput;
    uint64_t st;
    int rc = -100;

    if (rlf_read(path, buf, sizeof(buf), &n) != 0)
        return 1;
    LLVMFuzzerTestOneInput(buf, n);
    base = base != NULL ? base + 1 : path;
    run_once(buf, n, &v, &rc, &nput, &st);
    if ((strncmp(base, "ok-", 3) == 0 && rc != RLM_OK) ||
        (strncmp(base, "bad-", 4) == 0 && rc != RLM_EARGS)) {
        fprintf(stderr, "fuzz_rlm_batch: %s: rc=%d\n", path, rc);
        return 1;
    }
    return 0;
}

/* A batch as the store encodes it (RESP of RL.BATCH), turned into this
 * target's input over a random keyspace. */
static size_t well_formed(uint8_t *buf, size_t cap)
{
    static const char *const quotas[] = {"5/60 9/3600", "abc", "0/60",
                                         "3/60 3/60", "7/1"};
    static char keys[8][64];
    static rls_op_t ops[8];
    static rls_wop_t win[8][RLS_WINDOWS_MAX];
    static uint32_t costs[8][4];
    static rls_cmdbuf_t cmd;
    size_t n = 1 + rlf_rand() % 8, i, j, len = 0, clen;
    const char *p, *end;

    for (i = 0; i < n; i++) {
        rls_op_t *op = &ops[i];
        uint32_t nc = 1 + rlf_rand() % 4, c = 1 + rlf_rand() % 3;
        snprintf(keys[i], sizeof(keys[i]), "rl:{c%u}:r:t", rlf_rand() % 4);
        memset(op, 0, sizeof(*op));
        op->key = keys[i];
        op->key_len = strlen(keys[i]);
        op->tag_len = (size_t)(strchr(keys[i], '}') + 1 - keys[i]);
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
        }
        for (j = 0; j < op->nwin; j++) {
            win[i][j].window_s = (uint32_t)(60 * (j + 1));
            win[i][j].limit = 1 + rlf_rand() % 6;
            win[i][j].index = 7;
            win[i][j].expire_at_ms = 900000 + j;
        }
    }
    for (i = 0; i < 4; i++) {
        char k[64], wk[128];
        snprintf(k, sizeof(k), "rl:{c%zu}", i);
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
    clen = rls_redis_encode_module(&cmd, ops, n, 420000, 1000,
                                   rlf_rand() % 2 ? 0 : 10);
    CHECK(clen > 0);
    /* "*N" then "$len\r\nbytes\r\n" per argument; skip RL.BATCH. */
    p = memchr(cmd.p, '\n', clen) + 1;
    end = cmd.p + clen;
    for (i = 0; p < end; i++) {
        size_t al = (size_t)strtoul(p + 1, NULL, 10);
        p = memchr(p, '\n', (size_t)(end - p)) + 1;
        if (i > 0 && len + al + 1 < cap) {
            memcpy(buf + len, p, al);
            len += al;
            buf[len++] = '\n';
        }
        p += al + 2;
    }
    return len > 0 ? len - 1 : 0;
}

int main(int argc, char **argv)
{
    static const char alphabet[] = " \n.-r0123456789:{}qSLH/";
    static uint8_t buf[16384];
    static env_t v;
    int i, iters = 20000, files = 0, ok = 0;

    for (i = 1; i < argc; i++)
        if (rlf_walk(argv[i], run_file, &files) != 0)
            return 1;
    for (i = 0; i < iters; i++) {
        size_t n = well_formed(buf, sizeof(buf) - 8), edits = rlf_rand() % 4;

        if (edits == 0) {
            size_t nput;
            uint64_t st;
            int rc = -100;
            CHECK(run_once(buf, n, &v, &rc, &nput, &st));
            CHECK(rc == RLM_OK || rc == RLM_LATE);
            ok += rc == RLM_OK;
        }
        n = rlf_mutate(buf, n, sizeof(buf), edits, alphabet, rlf_rand);
        LLVMFuzzerTestOneInput(buf, n);
    }
    printf("fuzz_rlm_batch replay: %d files, %d batches (%d unmutated "
           "decided), invariants held\n",
           files, iters, ok);
    return 0;
}
#endif
