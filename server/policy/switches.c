/* Polling the runtime switches; see switches.h. */
#include "policy/switches.h"

#include <stdio.h>
#include <string.h>

#include <stdlib.h>
#include <unistd.h>

#include <hiredis/hiredis.h>

#include "base/log.h"
#include "rl_error.h"
#include "base/util.h"

/* Pairs read from one reply at most: a rule has two switches, so this is
 * far above any real fleet; a bigger hash is refused, not half-applied. */
#define PAIRS_MAX 65536

static int report(rls_switch_poll_t *p);
static void on_timer(uv_timer_t *t);

/* The first poll is done: Redis answered it, and, unless its answer was
 * an error, this server's report is on its way, so rl-ctl knows of it.
 * From now on, the usual period. */
static void settle(rls_switch_poll_t *p)
{
    if (!p->first)
        return;
    p->first = 0;
    uv_timer_start(&p->timer, on_timer, RLS_SWITCH_POLL_MS,
                   RLS_SWITCH_POLL_MS);
}

static void on_reply(void *data, void *reply)
{
    rls_switch_poll_t *p = data;
    redisReply *r = reply;
    const char *fields[64], *values[64];
    size_t flens[64], vlens[64];
    const char **f = fields, **v = values;
    size_t *fl = flens, *vl = vlens, n, i, bad = 0;
    rls_switches_t sw;
    int64_t version = 0;

    p->busy = 0;
    if (p->closed)
        return;
    if (r == NULL || r->type != REDIS_REPLY_ARRAY || r->elements % 2 != 0 ||
        r->elements / 2 > PAIRS_MAX) {
        p->stats.failures++;
        /* Switches Redis will not give (an ACL, a wrong type) are not
         * waited for: counted, and the server goes on without. */
        if (r != NULL)
            settle(p);
        return;
    }
    p->stats.polls++;
    n = r->elements / 2;
    for (i = 0; i < n; i++) {
        const redisReply *k = r->element[2 * i], *x = r->element[2 * i + 1];
        /* As rls_switches_parse reads it (the same function): a version
         * the two read differently would be applied again every poll. */
        if (k->type == REDIS_REPLY_STRING && k->len == 7 &&
            memcmp(k->str, "version", 7) == 0 && x->type == REDIS_REPLY_STRING)
            rls_switches_version(x->str, x->len, &version);
    }
    if (version == p->rt->sw.version) {
        if (report(p) == RL_OK)
            settle(p);
        return; /* nothing new: the common case, no allocation */
    }
    if (n > 64) {
        f = malloc(n * sizeof(*f));
        v = malloc(n * sizeof(*v));
        fl = malloc(n * sizeof(*fl));
        vl = malloc(n * sizeof(*vl));
        if (f == NULL || v == NULL || fl == NULL || vl == NULL) {
            p->stats.failures++;
            goto out;
        }
    }
    for (i = 0; i < n; i++) {
        const redisReply *k = r->element[2 * i], *x = r->element[2 * i + 1];
        int ok = k->type == REDIS_REPLY_STRING &&
                 x->type == REDIS_REPLY_STRING;
        f[i] = ok ? k->str : "";
        fl[i] = ok ? k->len : 0;
        v[i] = ok ? x->str : "";
        vl[i] = ok ? x->len : 0;
    }
    if (rls_switches_parse(&sw, n, f, fl, v, vl, &bad) != RL_OK ||
        rls_runtime_set_switches(p->rt, &sw) != RL_OK) {
        p->stats.failures++;
        goto out;
    }
    p->stats.applied++;
    p->stats.bad_fields += bad;
    RLS_INFO("runtime switches applied", " version=%lld global=%s switches=%zu",
             (long long)p->rt->sw.version,
             p->rt->sw.global_mode >= 0 ? rls_mode_name(p->rt->sw.global_mode)
                                        : "default",
             p->rt->sw.n);
    if (bad > 0)
        RLS_WARN("runtime switches: fields skipped (not understood)",
                 " version=%lld bad=%zu", (long long)p->rt->sw.version, bad);
    if (report(p) == RL_OK)
        settle(p);
out:
    if (f != fields) {
        free(f);
        free(v);
        free(fl);
        free(vl);
    }
}

static void on_report_reply(void *data, void *reply)
{
    (void)data;
    (void)reply;
}

/* "<version> <unix ms>" under this instance: rl-ctl's view of the fleet.
 * Returns RL_OK once sent (with a cluster, its key's master may not be
 * connected yet). */
static int report(rls_switch_poll_t *p)
{
    char val[64 + RLS_SWITCH_ADMIN_MAX];
    const char *argv[4] = {"HSET", p->ikey, p->instance, val};
    size_t lens[4];

    snprintf(val, sizeof(val), "%lld %llu%s%s", (long long)p->rt->sw.version,
             (unsigned long long)rl_unix_ms(), p->admin[0] ? " admin=" : "",
             p->admin);
    lens[0] = 4;
    lens[1] = strlen(p->ikey);
    lens[2] = strlen(p->instance);
    lens[3] = strlen(val);
    return p->store->v->command(p->store, 4, argv, lens, on_report_reply, p);
}

/* The live instances: those that reported within RLS_INSTANCE_STALE_MS
 * (by their own clocks, which the fleet keeps within seconds). A reply
 * that cannot be read keeps the last count. */
static void on_live_reply(void *data, void *reply)
{
    rls_switch_poll_t *p = data;
    redisReply *r = reply;
    uint64_t now = rl_unix_ms();
    uint32_t live = 0;
    size_t i;

    p->live_busy = 0;
    if (p->closed || r == NULL || r->type != REDIS_REPLY_ARRAY ||
        r->elements % 2 != 0)
        return;
    for (i = 0; i + 1 < r->elements; i += 2) {
        const redisReply *x = r->element[i + 1];
        unsigned long long at = 0;
        long long v;
        char buf[64];
        if (x->type != REDIS_REPLY_STRING || x->len >= sizeof(buf))
            continue;
        memcpy(buf, x->str, x->len);
        buf[x->len] = '\0';
        if (sscanf(buf, "%lld %llu", &v, &at) == 2 &&
            at + RLS_INSTANCE_STALE_MS >= now && live < UINT32_MAX)
            live++;
    }
    *p->live_out = live > 0 ? live : 1;
}

static void on_timer(uv_timer_t *t)
{
    rls_switch_poll_t *p = t->data;
    const char *argv[2] = {"HGETALL", p->key};
    size_t lens[2] = {7, strlen(p->key)};

    if (p->closed)
        return;
    if (p->live_out != NULL && !p->live_busy) {
        const char *la[2] = {"HGETALL", p->ikey};
        size_t ll[2] = {7, strlen(p->ikey)};
        if (p->store->v->command(p->store, 2, la, ll, on_live_reply, p) ==
            RL_OK)
            p->live_busy = 1;
    }
    if (p->busy)
        return;
    if (p->store->v->command(p->store, 2, argv, lens, on_reply, p) == RL_OK)
        p->busy = 1;
}

int rls_switch_poll_start(rls_switch_poll_t *p, uv_loop_t *loop,
                          rls_store_t *store, rls_runtime_t *rt,
                          const char *prefix, const char *instance)
{
    memset(p, 0, sizeof(*p));
    p->store = store;
    p->rt = rt;
    if (store->v->command == NULL) {
        p->closed = 1;
        return 0;
    }
    snprintf(p->key, sizeof(p->key), "%spolicy", prefix);
    snprintf(p->ikey, sizeof(p->ikey), "%sinstances", prefix);
    snprintf(p->instance, sizeof(p->instance), "%s", instance);
    uv_timer_init(loop, &p->timer);
    p->timer.data = p;
    /* At once, and then often until the first poll is done (settle): the
     * server is not ready (rls_switch_poll_ready) until it applies the
     * fleet's switches and has told rl-ctl so. A poll while the store is
     * down fails at once, with no I/O. */
    p->first = 1;
    uv_timer_start(&p->timer, on_timer, 0, RLS_SWITCH_FIRST_MS);
    return 0;
}

void rls_switch_poll_set_admin(rls_switch_poll_t *p, const char *host, int port)
{
    char name[256];

    if (strcmp(host, "0.0.0.0") == 0 || strcmp(host, "::") == 0 ||
        host[0] == '\0') {
        if (gethostname(name, sizeof(name) - 1) != 0)
            snprintf(name, sizeof(name), "localhost");
        name[sizeof(name) - 1] = '\0';
        host = name;
    }
    snprintf(p->admin, sizeof(p->admin),
             strchr(host, ':') != NULL ? "[%s]:%d" : "%s:%d", host, port);
}

int rls_switch_poll_ready(const rls_switch_poll_t *p)
{
    return p->closed || !p->first;
}

void rls_switch_poll_leave(rls_switch_poll_t *p)
{
    const char *argv[3] = {"HDEL", p->ikey, p->instance};
    size_t lens[3];

    if (p->closed)
        return;
    lens[0] = 4;
    lens[1] = strlen(p->ikey);
    lens[2] = strlen(p->instance);
    p->store->v->command(p->store, 3, argv, lens, on_report_reply, p);
    rls_switch_poll_close(p);
}

void rls_switch_poll_close(rls_switch_poll_t *p)
{
    if (p->closed)
        return;
    p->closed = 1;
    uv_close((uv_handle_t *)&p->timer, NULL);
}
