/* rl-ctl: the operators' switches, kept in Redis for every rl-server.
 *
 *   per-caller quotas   <prefix>{<key>}:q      HASH  rule -> "N/S N/S..."
 *   runtime switches    <prefix>policy         HASH  version, global,
 *                                                    mode:<rule>, scale:<rule>
 *   who applies what    <prefix>instances      HASH  instance -> "V MS
 *                                                    [admin=HOST:PORT]"
 *   who is refused most <prefix>top:<rule>:<instance>  STRING, written
 *                                                    by each instance
 *                                                    every 5 s, expiring
 *
 * And, through the instances' admin listeners (rl-server --admin), one
 * caller's usage and its reset (`usage`) and the configuration each
 * instance enforces (`config`): an instance's address comes from
 * --admin, or from what the live ones publish in <prefix>instances.
 *
 * A quota lives beside the caller's counters (same hash tag, so the same
 * Redis Cluster slot) and is read by the decision script itself: setting
 * one adds no round trip to any decision and takes effect on the next.
 * Switches are polled by every rl-server (twice a second); each change
 * bumps `version`, and each server records the version it applies under
 * its instance name, which is how `rl-ctl` tells when the fleet has it.
 *
 * Exit: 0 done; 1 Redis failed, nothing found, or the fleet did not apply
 * a change in time; 2 bad arguments. */
#include <errno.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>

#include <hiredis/hiredis.h>

#include "flags.h"
#include "policy/rules.h"
#include "rl_validate.h"
#include "rl_clock.h"
#include "rl_error.h"
#include "rl_parse.h"
#include "rl_topk.h"
#include "store/redis_cluster_map.h"
#include "store/redis_sync.h"
#include "store/redis_tls.h"
#include "version.h"

#define EXIT_FAIL 1
#define EXIT_USAGE 2

/* An instance that has not reported for this long is not waited for. */
#define STALE_MS 10000
/* One that has not reported for this long is removed from the list. */
#define PRUNE_MS 3600000

static const char usage[] =
    "usage: rl-ctl [--redis ADDR | --redis-cluster SEEDS] [--prefix STR]\n"
    "              [--redis-tls-* ...] [--wait-ms N] COMMAND\n"
    "\n"
    "Per-caller quotas and fleet-wide switches for rl-server, stored in\n"
    "Redis; every rl-server using that Redis (and prefix) applies them.\n"
    "\n"
    "  quota set RULE KEY LIMIT...  give caller KEY its own limits under\n"
    "                               RULE, e.g. 1000/1m 50000/1h, in any\n"
    "                               algorithm (10/1s:gcra:burst=20,\n"
    "                               100/1m:sliding-window, ...)\n"
    "  quota get RULE KEY           print them\n"
    "  quota del RULE KEY           back to the rule's limits\n"
    "  mode RULE MODE               enforce, shadow, off, or default (the\n"
    "                               rules file's mode)\n"
    "  scale RULE FACTOR            multiply RULE's limits by FACTOR\n"
    "                               (0 < FACTOR <= 1000), or default\n"
    "  global MODE                  one mode for every rule and inline\n"
    "                               limit: enforce, shadow, off, or default\n"
    "                               (each rule its own)\n"
    "  show                         the switches, and which version each\n"
    "                               rl-server applies\n"
    "  wait                         until every rl-server applies the\n"
    "                               current version\n"
    "  usage RULE KEY               caller KEY's usage under RULE, every\n"
    "                               window: used, limit, remaining, reset\n"
    "  usage envoy DOMAIN K=V...    the same for an Envoy descriptor\n"
    "  usage reset RULE KEY [--leases]\n"
    "  usage reset envoy DOMAIN K=V...\n"
    "                               clear it (needs --admin-token-file)\n"
    "  config                       the configuration each live rl-server\n"
    "                               enforces (JSON, one per instance)\n"
    "  top RULE [N]                 the N (default 20) callers RULE refused\n"
    "                               most over the last minutes, merged over\n"
    "                               every live rl-server (what each\n"
    "                               publishes in Redis), or over every\n"
    "                               --admin given; RULE may be envoy:DOMAIN\n"
    "                               or (inline)\n"
    "  loops                        each live rl-server's loops (--threads):\n"
    "                               store up, paused, connections\n"
    "  loops pause N | loops resume N\n"
    "                               loop N of the --admin given takes no new\n"
    "                               connection, or takes them again (needs\n"
    "                               --admin-token-file)\n"
    "\n"
    "  --redis ADDR    HOST:PORT or "
    "redis[s]://[[USER]:PASSWORD@]HOST:PORT[/DB],\n"
    "                  as rl-server's --redis (default $RL_REDIS_URL, else\n"
    "                  127.0.0.1:6379)\n"
    "  --redis-password-file FILE  the password, as rl-server's\n"
    "  --redis-tls-ca FILE, --redis-tls-cert FILE, --redis-tls-key FILE,\n"
    "  --redis-tls-server-name NAME, --redis-tls-insecure\n"
    "                  TLS to Redis, as rl-server's (also rediss:// URLs)\n"
    "  --redis-cluster SEEDS  a Redis Cluster instead, as rl-server's\n"
    "                  --redis-cluster: each command goes to the master of\n"
    "                  its key's slot\n"
    "  --prefix STR    key prefix, as rl-server's (default rl:)\n"
    "  --admin HOST:PORT  usage and config ask this rl-server's --admin\n"
    "                  listener (default: a live instance's, as published\n"
    "                  in Redis; config asks every one); top asks it instead\n"
    "                  of Redis, and every one when given more than once\n"
    "  --admin-token-file FILE  the token for usage reset and loops pause\n"
    "                  (its first)\n"
    "  --wait-ms N     after a switch, wait this long for every rl-server\n"
    "                  to apply it, printing each one's delay (default\n"
    "                  5000; 0: do not wait)\n"
    "\n"
    "Exit status: 0 done; 1 Redis failed, nothing found, or a server did not\n"
    "apply the change in time; 2 bad arguments.\n";

typedef struct ctl_s {
    rls_redis_sync_t *rc; /* plain, Unix socket or TLS (redis_sync.h) */
    rls_redis_tls_t *tls; /* NULL: plain */
    rls_flags_t cfg; /* --redis and --prefix, parsed as rl-server does */
    uint64_t wait_ms;
    /* --redis-cluster: the slot map, and the node rc is connected to. */
    rls_slot_range_t *map;
    int nmap;
    char at_host[RLS_NODE_HOST_MAX + 1];
    int at_port;
    const char *admin;      /* --admin HOST:PORT, or NULL: the first */
    const char *admins[64]; /* every --admin (top merges them) */
    int nadmins;
    const char *token_file; /* --admin-token-file, or NULL */
} ctl_t;

#if defined(__GNUC__)
__attribute__((format(printf, 1, 2)))
#endif
static int bad(const char *fmt, ...)
{
    va_list ap;

    fprintf(stderr, "rl-ctl: ");
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\n");
    return EXIT_USAGE;
}

static int rule_ok(const char *s)
{
    return rls_rule_name_ok(s, strlen(s));
}

static int key_ok(const char *s)
{
    size_t n = strlen(s);

    return n > 0 && n <= RL_KEY_MAX;
}

static int route(ctl_t *c, const char *key);
static int connect_to(ctl_t *c, const char *host, int port);

/* Runs one command on the current connection; NULL (with a message
 * printed) when Redis failed or answered an error. */
static redisReply *cmd_raw(ctl_t *c, int argc, const char **argv,
                           const size_t *lens)
{
    redisReply *r;

    if (c->rc == NULL) {
        fprintf(stderr, "rl-ctl: redis: not connected\n");
        return NULL;
    }
    r = rls_redis_sync_command(c->rc, argc, argv, lens);
    /* A cluster's slot moved since the map was read: once to the node
     * named. */
    if (c->map != NULL && r != NULL && r->type == REDIS_REPLY_ERROR &&
        strncmp(r->str, "MOVED ", 6) == 0) {
        rls_redirect_t rd;
        if (rls_cluster_parse_redirect(r->str, r->len, c->at_host, &rd) == 0 &&
            connect_to(c, rd.host, rd.port) == 0) {
            freeReplyObject(r);
            r = c->rc != NULL ? rls_redis_sync_command(c->rc, argc, argv, lens)
                              : NULL;
        }
    }

    if (r == NULL) {
        fprintf(stderr, "rl-ctl: redis: %s\n",
                c->rc != NULL ? rls_redis_sync_errstr(c->rc) : "no reply");
        return NULL;
    }
    if (r->type == REDIS_REPLY_ERROR) {
        fprintf(stderr, "rl-ctl: redis: %s\n", r->str);
        freeReplyObject(r);
        return NULL;
    }
    return r;
}

/* The same, on a cluster first to the master of argv[1]'s slot (a
 * command with a key). */
static redisReply *cmd(ctl_t *c, int argc, const char **argv,
                       const size_t *lens)
{
    if (c->map != NULL && argc >= 2 && route(c, argv[1]) != 0)
        return NULL;
    return cmd_raw(c, argc, argv, lens);
}

static int connect_to(ctl_t *c, const char *host, int port)
{
    char why[RLS_REDIS_TLS_WHY_MAX];
    redisReply *r;

    rls_redis_sync_free(c->rc);
    c->at_host[0] = '\0';
    c->rc = rls_redis_sync_connect(host, port, c->tls, 2000, why, sizeof(why));
    if (c->rc == NULL) {
        fprintf(stderr, "rl-ctl: cannot connect to redis at %s:%d: %s\n", host,
                port, why);
        return EXIT_FAIL;
    }
    snprintf(c->at_host, sizeof(c->at_host), "%s", host);
    c->at_port = port;
    if (c->cfg.redis_password[0]) {
        const char *a[3] = {"AUTH"};
        int n = 1;
        if (c->cfg.redis_user[0])
            a[n++] = c->cfg.redis_user;
        a[n++] = c->cfg.redis_password;
        if ((r = cmd_raw(c, n, a, NULL)) == NULL)
            return EXIT_FAIL;
        freeReplyObject(r);
    }
    if (c->cfg.redis_db > 0) {
        char db[16];
        const char *a[] = {"SELECT", db};
        snprintf(db, sizeof(db), "%d", c->cfg.redis_db);
        if ((r = cmd_raw(c, 2, a, NULL)) == NULL)
            return EXIT_FAIL;
        freeReplyObject(r);
    }
    return 0;
}

/* A cluster's slot map, from the first seed that gives one. */
static int load_map(ctl_t *c)
{
    const char *shards[] = {"CLUSTER", "SHARDS"}, *slots[] = {"CLUSTER",
                                                              "SLOTS"};
    redisReply *r;
    int i, n = -1;

    if ((c->map = malloc(RLS_SLOTS * sizeof(*c->map))) == NULL)
        return bad("out of memory");
    for (i = 0; i < c->cfg.redis_cluster && n <= 0; i++) {
        if (connect_to(c, c->cfg.redis_seed_host[i],
                       c->cfg.redis_seed_port[i]) != 0)
            continue;
        r = rls_redis_sync_command(c->rc, 2, shards, NULL);
        if (r != NULL && r->type == REDIS_REPLY_ERROR) {
            freeReplyObject(r);
            r = rls_redis_sync_command(c->rc, 2, slots, NULL);
        }
        n = r != NULL ? rls_cluster_parse_map_tls(r, c->map, RLS_SLOTS,
                                                  c->tls != NULL)
                      : -1;
        if (n <= 0)
            fprintf(stderr, "rl-ctl: no slot map from %s:%d\n",
                    c->cfg.redis_seed_host[i], c->cfg.redis_seed_port[i]);
        if (r != NULL)
            freeReplyObject(r);
    }
    if (n <= 0)
        return EXIT_FAIL;
    c->nmap = n;
    return 0;
}

/* On a cluster: connected to the master of key's slot. */
static int route(ctl_t *c, const char *key)
{
    unsigned slot = rls_key_slot(key, strlen(key));
    int i;

    for (i = 0; i < c->nmap; i++)
        if (slot >= c->map[i].first && slot <= c->map[i].last)
            break;
    if (i == c->nmap) {
        fprintf(stderr, "rl-ctl: no master serves slot %u\n", slot);
        return EXIT_FAIL;
    }
    if (c->rc != NULL && c->at_port == c->map[i].port &&
        strcmp(c->at_host, c->map[i].host) == 0)
        return 0;
    return connect_to(c, c->map[i].host, c->map[i].port);
}

static int connect_redis(ctl_t *c)
{
    if (c->cfg.redis_cluster > 0)
        return c->map != NULL ? 0 : load_map(c);
    return connect_to(c, c->cfg.redis_host, c->cfg.redis_port);
}

static void quota_key(const ctl_t *c, const char *key, char *out, size_t len)
{
    snprintf(out, len, "%s{%s}:q", c->cfg.prefix, key);
}

static void policy_key(const ctl_t *c, const char *what, char *out,
                       size_t len)
{
    snprintf(out, len, "%s%s", c->cfg.prefix, what);
}

static int wait_for(ctl_t *c, long long v, uint64_t since_ms);

/* The servers look a caller's quota up (a Redis call per decision) only
 * for rules marked as having some: the first quota of a rule sets the
 * switch "quotas:<rule>" and bumps the version, and rl-ctl then waits
 * for the fleet to apply it as for any switch. */
static int mark_quotas(ctl_t *c, const char *rule)
{
    char pkey[128], field[RL_RULE_MAX + 16];
    const char *a[] = {"HSETNX", pkey, field, "1"};
    const char *bump[] = {"HINCRBY", pkey, "version", "1"};
    uint64_t t0 = rl_unix_ms();
    redisReply *r;
    long long v;

    policy_key(c, "policy", pkey, sizeof(pkey));
    snprintf(field, sizeof(field), "quotas:%s", rule);
    if ((r = cmd(c, 4, a, NULL)) == NULL)
        return EXIT_FAIL;
    v = r->type == REDIS_REPLY_INTEGER ? r->integer : 0;
    freeReplyObject(r);
    if (v != 1)
        return 0; /* marked already: every server looks */
    if ((r = cmd(c, 4, bump, NULL)) == NULL)
        return EXIT_FAIL;
    v = r->integer;
    freeReplyObject(r);
    printf("%s = 1 (version %lld): rl-servers now look up quotas of %s\n",
           field, v, rule);
    return c->wait_ms ? wait_for(c, v, t0) : 0;
}

/* ------------------------------------------------------------------------ */
/* Quotas */

static int quota(ctl_t *c, int argc, char **argv)
{
    char qkey[RL_KEY_MAX + 80], value[RLS_WINDOWS_MAX * 96];
    const char *op, *rule, *key;
    redisReply *r;
    int rc;

    if (argc < 3)
        return bad("%s", "quota: expected set|get|del RULE KEY [LIMIT...]");
    op = argv[0];
    rule = argv[1];
    key = argv[2];
    if (!rule_ok(rule))
        return bad("bad rule name '%s': 1-128 bytes of [A-Za-z0-9_.:-]", rule);
    if (!key_ok(key))
        return bad("%s", "bad key: 1-512 bytes");
    quota_key(c, key, qkey, sizeof(qkey));

    if (strcmp(op, "set") == 0) {
        /* Validated whole before anything is written: never half-applied.
         * Stored normalized (limit/seconds, in the order given) so the
         * script reads it with one pattern. */
        rls_limits_t ls;
        size_t i, n = 0;

        memset(&ls, 0, sizeof(ls));
        if (argc < 4)
            return bad("%s", "quota set: give at least one LIMIT, e.g. 100/1m");
        for (i = 3; i < (size_t)argc; i++) {
            const char *why;
            rls_limit_t l;
            uint32_t j;

            if (rls_limit_parse(argv[i], strlen(argv[i]), &l, &why) != RL_OK) {
                fprintf(stderr, "rl-ctl: bad limit '%s': %s\n", argv[i], why);
                return EXIT_USAGE;
            }
            if (l.phase)
                return bad("quota set: '%s': a stored quota's windows are "
                           "aligned (per-caller is for rules)",
                           argv[i]);
            if (ls.n == RLS_WINDOWS_MAX)
                return bad("%s", "quota set: at most 8 limits");
            for (j = 0; j < ls.n; j++)
                if (ls.w[j].window_s == l.window_s && ls.w[j].algo == l.algo)
                    return bad("quota set: two limits with the window and "
                               "algorithm of '%s'",
                               argv[i]);
            ls.w[ls.n++] = l;
        }
        /* "N/S", then ":ALGO" when not a fixed window and a gcra's
         * ":burst=B": the tokens the script and the module read. */
        for (i = 0; i < ls.n; i++) {
            const rls_limit_t *l = &ls.w[i];
            n += (size_t)snprintf(value + n, sizeof(value) - n, "%s%llu/%u",
                                  i ? " " : "", (unsigned long long)l->limit,
                                  l->window_s);
            if (l->algo != RL_ALGO_FIXED)
                n += (size_t)snprintf(value + n, sizeof(value) - n, ":%s",
                                      rls_algo_name(l->algo));
            if (l->algo == RL_ALGO_GCRA)
                n += (size_t)snprintf(value + n, sizeof(value) - n,
                                      ":burst=%llu",
                                      (unsigned long long)l->burst);
        }
        {
            const char *a[] = {"HSET", qkey, rule, value};
            if ((rc = connect_redis(c)) != 0)
                return rc;
            if ((r = cmd(c, 4, a, NULL)) == NULL)
                return EXIT_FAIL;
            freeReplyObject(r);
        }
        printf("quota %s %s: %s\n", rule, key, value);
        return mark_quotas(c, rule);
    }
    if (strcmp(op, "get") == 0 || strcmp(op, "del") == 0) {
        int get = op[0] == 'g';
        const char *a[] = {get ? "HGET" : "HDEL", qkey, rule};

        if (argc != 3)
            return bad("quota %s: expected RULE KEY", op);
        if ((rc = connect_redis(c)) != 0)
            return rc;
        if ((r = cmd(c, 3, a, NULL)) == NULL)
            return EXIT_FAIL;
        if (get && r->type == REDIS_REPLY_STRING) {
            /* Shown in the form it was given in: 1000/1m 50000/1h. */
            const char *p = r->str;
            printf("quota %s %s:", rule, key);
            while (*p) {
                const char *sp = strchr(p, ' '), *why;
                size_t len = sp ? (size_t)(sp - p) : strlen(p);
                char buf[48];
                rls_limit_t l;
                if (rls_limit_parse(p, len, &l, &why) == RL_OK) {
                    rls_limit_format(&l, buf, sizeof(buf));
                    printf(" %s", buf);
                } else {
                    printf(" (unparsable: %.*s)", (int)len, p);
                }
                p += len;
                while (*p == ' ')
                    p++;
            }
            printf("\n");
            freeReplyObject(r);
            return 0;
        }
        rc = get ? r->type == REDIS_REPLY_STRING : r->integer == 1;
        freeReplyObject(r);
        if (!rc) {
            fprintf(stderr, "rl-ctl: no quota for %s under %s\n", key, rule);
            return EXIT_FAIL;
        }
        printf("quota %s %s: deleted\n", rule, key);
        return 0;
    }
    return bad("quota: unknown operation '%s' (set, get, del)", op);
}

/* ------------------------------------------------------------------------ */
/* Switches */

/* Reads the instances hash and prints, for each live instance, whether it
 * applies version v. Returns how many live instances do not yet, or RL_EIO
 * when Redis failed (said on stderr). */
static long instances_behind(ctl_t *c, long long v, int print,
                             uint64_t since_ms, long *live)
{
    char ikey[128];
    const char *a[] = {"HGETALL", ikey};
    redisReply *r;
    uint64_t now = rl_unix_ms();
    long behind = 0;
    size_t i;

    policy_key(c, "instances", ikey, sizeof(ikey));
    if ((r = cmd(c, 2, a, NULL)) == NULL)
        return RL_EIO;
    for (i = 0; r->type == REDIS_REPLY_ARRAY && i + 1 < r->elements; i += 2) {
        long long iv = 0;
        unsigned long long at = 0;
        const char *name = r->element[i]->str;
        if (r->element[i + 1]->type != REDIS_REPLY_STRING ||
            sscanf(r->element[i + 1]->str, "%lld %llu", &iv, &at) != 2)
            continue;
        if (at + PRUNE_MS < now) {
            /* Gone for an hour: an instance name includes the pid, so
             * every restart adds one; old ones are removed here. */
            const char *d[] = {"HDEL", ikey, name};
            redisReply *x = cmd(c, 3, d, NULL);
            if (x != NULL)
                freeReplyObject(x);
            continue;
        }
        if (at + STALE_MS < now)
            continue; /* gone, or not reporting: not waited for */
        (*live)++;
        if (iv < v)
            behind++;
        if (print)
            printf("  %-40s version %lld%s", name, iv,
                   iv >= v ? "" : " (behind)");
        if (print && since_ms && iv >= v)
            printf("  applied within %llu ms",
                   (unsigned long long)(at > since_ms ? at - since_ms : 0));
        if (print)
            printf("\n");
    }
    freeReplyObject(r);
    return behind;
}

/* Waits until every live instance applies version v. */
static int wait_for(ctl_t *c, long long v, uint64_t since_ms)
{
    uint64_t deadline = rl_unix_ms() + c->wait_ms;
    long behind, live;

    for (;;) {
        live = 0;
        behind = instances_behind(c, v, 0, 0, &live);
        if (behind < 0)
            return EXIT_FAIL;
        if (behind == 0 || rl_unix_ms() >= deadline)
            break;
        struct timespec ts = {0, 20 * 1000000};
        nanosleep(&ts, NULL);
    }
    if (live == 0) {
        printf("version %lld: no rl-server has reported in the last %d s\n",
               v, STALE_MS / 1000);
        return 0;
    }
    printf("version %lld applied by every live rl-server%s\n", v,
           behind ? ": NO, some are behind" : "");
    live = 0;
    instances_behind(c, v, 1, since_ms, &live);
    if (behind) {
        fprintf(stderr, "rl-ctl: %ld rl-server(s) did not apply version %lld "
                        "within %llu ms\n",
                behind, v, (unsigned long long)c->wait_ms);
        return EXIT_FAIL;
    }
    return 0;
}

/* Sets (or with value NULL, clears) one field of the switches and bumps
 * the version, atomically. */
static int set_switch(ctl_t *c, const char *field, const char *value)
{
    char pkey[128];
    const char *multi[] = {"MULTI"}, *exec[] = {"EXEC"};
    const char *set[] = {"HSET", pkey, field, value};
    const char *del[] = {"HDEL", pkey, field};
    const char *bump[] = {"HINCRBY", pkey, "version", "1"};
    redisReply *r;
    uint64_t t0;
    long long v;
    int rc;

    policy_key(c, "policy", pkey, sizeof(pkey));
    if ((rc = connect_redis(c)) != 0)
        return rc;
    /* MULTI has no key: on a cluster, to the policy hash's master first. */
    if (c->map != NULL && (rc = route(c, pkey)) != 0)
        return rc;
    t0 = rl_unix_ms();
    if ((r = cmd(c, 1, multi, NULL)) == NULL)
        return EXIT_FAIL;
    freeReplyObject(r);
    if ((r = value ? cmd(c, 4, set, NULL) : cmd(c, 3, del, NULL)) == NULL)
        return EXIT_FAIL;
    freeReplyObject(r);
    if ((r = cmd(c, 4, bump, NULL)) == NULL)
        return EXIT_FAIL;
    freeReplyObject(r);
    if ((r = cmd(c, 1, exec, NULL)) == NULL)
        return EXIT_FAIL;
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 ||
        r->element[1]->type != REDIS_REPLY_INTEGER) {
        fprintf(stderr, "rl-ctl: redis: unexpected reply to EXEC\n");
        freeReplyObject(r);
        return EXIT_FAIL;
    }
    v = r->element[1]->integer;
    freeReplyObject(r);
    printf("%s = %s (version %lld)\n", field, value ? value : "default", v);
    return c->wait_ms ? wait_for(c, v, t0) : 0;
}

static int mode_value(const char *s, const char **out)
{
    if (strcmp(s, "default") == 0) {
        *out = NULL;
        return 0;
    }
    if (rls_mode_parse(s, strlen(s)) < 0)
        return bad("bad mode '%s': enforce, shadow, off or default", s);
    *out = s;
    return 0;
}

static int show(ctl_t *c)
{
    char pkey[128];
    const char *a[] = {"HGETALL", pkey};
    long long v = 0;
    redisReply *r;
    size_t i;
    int rc;

    policy_key(c, "policy", pkey, sizeof(pkey));
    if ((rc = connect_redis(c)) != 0)
        return rc;
    if ((r = cmd(c, 2, a, NULL)) == NULL)
        return EXIT_FAIL;
    printf("switches (%s):\n", pkey);
    for (i = 0; r->type == REDIS_REPLY_ARRAY && i + 1 < r->elements; i += 2) {
        if (strcmp(r->element[i]->str, "version") == 0)
            v = strtoll(r->element[i + 1]->str, NULL, 10);
        else
            printf("  %s = %s\n", r->element[i]->str, r->element[i + 1]->str);
    }
    freeReplyObject(r);
    printf("version %lld; rl-servers reporting in the last %d s:\n", v,
           STALE_MS / 1000);
    {
        long live = 0;
        return instances_behind(c, v, 1, 0, &live) < 0 ? EXIT_FAIL : 0;
    }
}

static int current_version(ctl_t *c, long long *v)
{
    char pkey[128];
    const char *a[] = {"HGET", pkey, "version"};
    redisReply *r;

    policy_key(c, "policy", pkey, sizeof(pkey));
    if ((r = cmd(c, 3, a, NULL)) == NULL)
        return EXIT_FAIL;
    *v = r->type == REDIS_REPLY_STRING ? strtoll(r->str, NULL, 10) : 0;
    freeReplyObject(r);
    return 0;
}

/* ------------------------------------------------------------------------ */
/* The instances' admin listeners (rl-server --admin) */

#define ADMIN_AT_MAX 256
/* The largest answer read (the server caps its own at 4 MiB). */
#define HTTP_MAX (8u << 20)

typedef struct admin_at_s {
    char host[RLS_HOST_MAX + 1];
    int port;
    char name[160]; /* the instance's, "" for --admin's */
} admin_at_t;

/* The admin listeners to ask: --admin's, else those the live instances
 * publish. Returns how many, or -1 (said on stderr). */
static int admin_list(ctl_t *c, admin_at_t *out, int max)
{
    char ikey[128];
    const char *a[] = {"HGETALL", ikey};
    redisReply *r;
    uint64_t now = rl_unix_ms();
    int n = 0;
    size_t i;

    if (c->admin != NULL) {
        if (rl_parse_hostport(c->admin, out[0].host, sizeof(out[0].host),
                              &out[0].port) != 0) {
            fprintf(stderr, "rl-ctl: --admin: expected %s, got '%s'\n",
                    RL_HOSTPORT_HELP, c->admin);
            return -1;
        }
        out[0].name[0] = '\0';
        return 1;
    }
    if (connect_redis(c) != 0)
        return -1;
    policy_key(c, "instances", ikey, sizeof(ikey));
    if ((r = cmd(c, 2, a, NULL)) == NULL)
        return -1;
    for (i = 0; r->type == REDIS_REPLY_ARRAY && i + 1 < r->elements && n < max;
         i += 2) {
        const redisReply *v = r->element[i + 1];
        unsigned long long at = 0;
        long long iv;
        const char *ad;
        if (v->type != REDIS_REPLY_STRING ||
            sscanf(v->str, "%lld %llu", &iv, &at) != 2 || at + STALE_MS < now ||
            (ad = strstr(v->str, " admin=")) == NULL ||
            rl_parse_hostport(ad + 7, out[n].host, sizeof(out[n].host),
                              &out[n].port) != 0)
            continue;
        snprintf(out[n].name, sizeof(out[n].name), "%s", r->element[i]->str);
        n++;
    }
    freeReplyObject(r);
    if (n == 0)
        fprintf(stderr, "rl-ctl: no live rl-server publishes an admin listener "
                        "(start them with --admin, or give rl-ctl --admin "
                        "HOST:PORT)\n");
    return n > 0 ? n : -1;
}

/* The token of --admin-token-file: its first token line's last word. */
static int admin_token(const ctl_t *c, char *out, size_t len)
{
    char line[1024];
    FILE *f;
    int found = 0;

    if (c->token_file == NULL) {
        fprintf(stderr, "rl-ctl: a write (a reset, a loop's pause) needs "
                        "--admin-token-file\n");
        return EXIT_USAGE;
    }
    if ((f = fopen(c->token_file, "r")) == NULL) {
        fprintf(stderr, "rl-ctl: cannot open %s\n", c->token_file);
        return EXIT_FAIL;
    }
    while (!found && fgets(line, sizeof(line), f) != NULL) {
        char *w, *last = NULL, *save = NULL;
        if (line[strspn(line, " \t")] == '#')
            continue;
        for (w = strtok_r(line, " \t\r\n", &save); w != NULL;
             w = strtok_r(NULL, " \t\r\n", &save))
            last = w;
        if (last != NULL && strlen(last) < len) {
            snprintf(out, len, "%s", last);
            found = 1;
        }
    }
    fclose(f);
    if (!found) {
        fprintf(stderr, "rl-ctl: no token in %s\n", c->token_file);
        return EXIT_FAIL;
    }
    return 0;
}

/* One HTTP/1.1 request to host:port (Connection: close), the whole
 * answer read: its status into *status and its body (NUL-terminated,
 * the caller's to free) into *body. Returns 0, or EXIT_FAIL (said on
 * stderr). */
static int http_call(const admin_at_t *at, const char *method,
                     const char *target, const char *token, int *status,
                     char **body)
{
    struct addrinfo hints, *res = NULL, *ai;
    struct timeval tv = {10, 0};
    static char req[20000];
    char port[16], *buf = NULL, *p;
    size_t n = 0, cap = 65536;
    int fd = -1, rc = EXIT_FAIL, len;

    memset(&hints, 0, sizeof(hints));
    hints.ai_socktype = SOCK_STREAM;
    snprintf(port, sizeof(port), "%d", at->port);
    if (getaddrinfo(at->host, port, &hints, &res) != 0) {
        fprintf(stderr, "rl-ctl: cannot resolve %s\n", at->host);
        return EXIT_FAIL;
    }
    for (ai = res; ai != NULL && fd < 0; ai = ai->ai_next) {
        fd = socket(ai->ai_family, ai->ai_socktype, ai->ai_protocol);
        if (fd >= 0 && connect(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
            close(fd);
            fd = -1;
        }
    }
    freeaddrinfo(res);
    if (fd < 0) {
        fprintf(stderr, "rl-ctl: cannot connect to %s:%d\n", at->host,
                at->port);
        return EXIT_FAIL;
    }
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    len = snprintf(req, sizeof(req),
                   "%s %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n"
                   "%s%s%s\r\n",
                   method, target, at->host,
                   token != NULL ? "Authorization: Bearer " : "",
                   token != NULL ? token : "", token != NULL ? "\r\n" : "");
    if (len < 0 || len >= (int)sizeof(req) ||
        send(fd, req, (size_t)len, MSG_NOSIGNAL) != len) {
        fprintf(stderr, "rl-ctl: cannot send to %s:%d\n", at->host, at->port);
        goto out;
    }
    if ((buf = malloc(cap + 1)) == NULL)
        goto out;
    for (;;) {
        ssize_t k;
        if (n == cap) {
            char *nb;
            if (cap >= HTTP_MAX || (nb = realloc(buf, 2 * cap + 1)) == NULL) {
                fprintf(stderr, "rl-ctl: answer too large\n");
                goto out;
            }
            buf = nb;
            cap *= 2;
        }
        if ((k = recv(fd, buf + n, cap - n, 0)) < 0) {
            if (errno == EINTR)
                continue;
            fprintf(stderr, "rl-ctl: no answer from %s:%d\n", at->host,
                    at->port);
            goto out;
        }
        if (k == 0)
            break;
        n += (size_t)k;
    }
    buf[n] = '\0';
    if (sscanf(buf, "HTTP/1.%*d %d", status) != 1 ||
        (p = strstr(buf, "\r\n\r\n")) == NULL) {
        fprintf(stderr, "rl-ctl: not an HTTP answer from %s:%d\n", at->host,
                at->port);
        goto out;
    }
    memmove(buf, p + 4, n - (size_t)(p + 4 - buf) + 1);
    *body = buf;
    buf = NULL;
    rc = 0;
out:
    free(buf);
    close(fd);
    return rc;
}

/* Appends v percent-encoded (all but RFC 3986's unreserved bytes) to t
 * (len bytes). */
static void put_enc(char *t, size_t len, const char *v)
{
    size_t at = strlen(t);

    for (; *v != '\0' && at + 4 < len; v++) {
        unsigned char ch = (unsigned char)*v;
        if ((ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z') ||
            (ch >= '0' && ch <= '9') || ch == '-' || ch == '_' || ch == '.' ||
            ch == '~')
            t[at++] = (char)ch;
        else
            at += (size_t)snprintf(t + at, len - at, "%%%02X", ch);
    }
    t[at] = '\0';
}

/* Appends "?name=" or "&name=", then value encoded. */
static void put_param(char *t, size_t len, const char *name, const char *v)
{
    size_t at = strlen(t);

    snprintf(t + at, len - at, "%s%s=", strchr(t, '?') ? "&" : "?", name);
    put_enc(t, len, v);
}

/* Prints an answer: 200 on stdout, else the server's reason on stderr. */
static int admin_print(const admin_at_t *at, int status, const char *body)
{
    if (status == 200) {
        fputs(body, stdout);
        return 0;
    }
    fprintf(stderr, "rl-ctl: %s:%d answered %d: %s", at->host, at->port, status,
            body);
    if (body[0] == '\0' || body[strlen(body) - 1] != '\n')
        fputc('\n', stderr);
    return EXIT_FAIL;
}

static int usage_cmd(ctl_t *c, int argc, char **argv)
{
    static char target[16384];
    static admin_at_t at[1];
    char token[600], *body = NULL;
    int reset = 0, leases = 0, status = 0, rc, i;

    if (argc > 0 && strcmp(argv[0], "reset") == 0) {
        reset = 1;
        argc--;
        argv++;
    }
    if (reset && argc > 0 && strcmp(argv[argc - 1], "--leases") == 0) {
        leases = 1;
        argc--;
    }
    snprintf(target, sizeof(target), "%s",
             reset ? "/v1/usage/reset" : "/v1/usage");
    if (argc >= 3 && strcmp(argv[0], "envoy") == 0) {
        put_param(target, sizeof(target), "domain", argv[1]);
        for (i = 2; i < argc; i++) {
            char *eq = strchr(argv[i], '=');
            size_t at0;
            if (eq == NULL || eq == argv[i])
                return bad("usage envoy: '%s' is not KEY=VALUE", argv[i]);
            /* KEY=VALUE, each half encoded, the '=' between them raw:
             * the server splits there before decoding. */
            *eq = '\0';
            put_param(target, sizeof(target), "entry", argv[i]);
            at0 = strlen(target);
            snprintf(target + at0, sizeof(target) - at0, "=");
            put_enc(target, sizeof(target), eq + 1);
            *eq = '=';
        }
    } else if (argc == 2) {
        if (!rule_ok(argv[0]))
            return bad("bad rule name '%s'", argv[0]);
        if (!key_ok(argv[1]))
            return bad("%s", "bad key: 1 to 512 bytes");
        put_param(target, sizeof(target), "rule", argv[0]);
        put_param(target, sizeof(target), "key", argv[1]);
    } else {
        return bad("%s", "usage: expected [reset] RULE KEY, or [reset] envoy "
                         "DOMAIN KEY=VALUE...");
    }
    if (leases)
        put_param(target, sizeof(target), "leases", "1");
    put_param(target, sizeof(target), "format", "text");
    if (reset && (rc = admin_token(c, token, sizeof(token))) != 0)
        return rc;
    if (admin_list(c, at, 1) < 0)
        return EXIT_FAIL;
    if ((rc = http_call(&at[0], reset ? "POST" : "GET", target,
                        reset ? token : NULL, &status, &body)) != 0)
        return rc;
    rc = admin_print(&at[0], status, body);
    free(body);
    return rc;
}

/* GET path from every live instance's --admin (or the one given), each
 * answer printed under a line naming its instance when there are
 * several. Returns 0, or EXIT_FAIL when one could not be read. */
static int admin_get_all(ctl_t *c, const char *path)
{
    static admin_at_t at[ADMIN_AT_MAX];
    int n = admin_list(c, at, ADMIN_AT_MAX), i, rc = 0, status = 0;

    if (n < 0)
        return EXIT_FAIL;
    for (i = 0; i < n; i++) {
        char *body = NULL;
        if (http_call(&at[i], "GET", path, NULL, &status, &body) != 0) {
            rc = EXIT_FAIL;
            continue;
        }
        if (n > 1 || at[i].name[0] != '\0')
            printf("# %s (admin %s:%d)\n", at[i].name[0] ? at[i].name : "-",
                   at[i].host, at[i].port);
        if (admin_print(&at[i], status, body) != 0)
            rc = EXIT_FAIL;
        free(body);
    }
    return rc;
}

static int config_cmd(ctl_t *c)
{
    return admin_get_all(c, "/v1/config");
}

/* rl-ctl loops [pause|resume N]: GET /v1/loops of every live instance,
 * or one instance's loop N paused or resumed (--admin names it). */
static int loops_cmd(ctl_t *c, int argc, char **argv)
{
    static admin_at_t at[ADMIN_AT_MAX];
    char target[64], token[512], *end;
    int rc = 0, status = 0, pause;
    long loop;

    if (argc == 0)
        return admin_get_all(c, "/v1/loops");
    pause = strcmp(argv[0], "pause") == 0;
    if (argc != 2 || (!pause && strcmp(argv[0], "resume") != 0))
        return bad("%s", "usage: loops, or loops pause N, or loops resume N");
    errno = 0;
    loop = strtol(argv[1], &end, 10);
    if (errno || *end || end == argv[1] || loop < 0 || loop > 999)
        return bad("bad loop '%s': a loop's number, 0 to 999", argv[1]);
    snprintf(target, sizeof(target), "/v1/loops/%s?loop=%ld",
             pause ? "pause" : "resume", loop);
    if ((rc = admin_token(c, token, sizeof(token))) != 0)
        return rc;
    if (admin_list(c, at, 1) < 0)
        return EXIT_FAIL;
    {
        char *body = NULL;
        if ((rc = http_call(&at[0], "POST", target, token, &status, &body)) !=
            0)
            return rc;
        rc = admin_print(&at[0], status, body);
        free(body);
    }
    return rc;
}

/* ------------------------------------------------------------------------ */
/* Top offenders */

/* One instance's summary for rule: from --admin's /v1/top (at), or its
 * key in Redis (name). Returns 1 with *s filled, 0 when it has none, -1
 * when it could not be read (said on stderr). */
static int top_one(ctl_t *c, const admin_at_t *at, const char *name,
                   const char *rule, rl_topk_sum_t *s, uint64_t *since,
                   uint64_t *now)
{
    static char target[1024];
    int status = 0, rc;
    char *body = NULL;

    if (at != NULL) {
        snprintf(target, sizeof(target), "/v1/top");
        put_param(target, sizeof(target), "rule", rule);
        put_param(target, sizeof(target), "format", "summary");
        if (http_call(at, "GET", target, NULL, &status, &body) != 0)
            return -1;
        if (status != 200) {
            admin_print(at, status, body);
            free(body);
            return -1;
        }
        rc = rl_topk_decode(body, strlen(body), s, since, now);
        free(body);
    } else {
        char key[1024];
        const char *a[] = {"GET", key};
        redisReply *r;
        snprintf(key, sizeof(key), "%stop:%s:%s", c->cfg.prefix, rule, name);
        if ((r = cmd(c, 2, a, NULL)) == NULL)
            return -1;
        if (r->type != REDIS_REPLY_STRING) {
            freeReplyObject(r);
            return 0;
        }
        rc = rl_topk_decode(r->str, r->len, s, since, now);
        freeReplyObject(r);
    }
    if (rc != RL_OK) {
        fprintf(stderr, "rl-ctl: %s's top offenders do not parse\n",
                at != NULL ? at->host : name);
        return -1;
    }
    return 1;
}

/* A key for people: printable ASCII as it is, any other byte \xNN. */
static void print_key(const rl_topk_entry_t *e)
{
    uint16_t i;

    for (i = 0; i < e->len; i++) {
        unsigned char ch = (unsigned char)e->key[i];
        if (ch >= 0x20 && ch < 0x7f && ch != '\\')
            putchar(ch);
        else
            printf("\\x%02x", ch);
    }
}

static int top_cmd(ctl_t *c, const char *rule, const char *nstr)
{
    static admin_at_t at[ADMIN_AT_MAX];
    static rl_topk_sum_t in[ADMIN_AT_MAX];
    uint64_t since = UINT64_MAX, now = 0, max = 20;
    rl_topk_sum_t m;
    int n = 0, nin = 0, i, bad_reads = 0;
    size_t j;

    if (!rule_ok(rule) && strcmp(rule, "(inline)") != 0 &&
        strcmp(rule, "(other)") != 0)
        return bad("bad rule name '%s'", rule);
    if (nstr != NULL) {
        char *end;
        errno = 0;
        max = strtoull(nstr, &end, 10);
        if (errno || *end || nstr[0] == '-' || max < 1 || max > RL_TOPK_K_MAX)
            return bad("top: N is 1 to %d, got '%s'", RL_TOPK_K_MAX, nstr);
    }
    if (c->nadmins > 0) {
        for (i = 0; i < c->nadmins; i++) {
            if (rl_parse_hostport(c->admins[i], at[n].host, sizeof(at[n].host),
                                  &at[n].port) != 0)
                return bad("--admin: expected %s, got '%s'", RL_HOSTPORT_HELP,
                           c->admins[i]);
            n++;
        }
    } else {
        /* The live instances, from <prefix>instances. */
        char ikey[128];
        const char *a[] = {"HGETALL", ikey};
        uint64_t t = rl_unix_ms();
        redisReply *r;
        size_t k;
        if (connect_redis(c) != 0)
            return EXIT_FAIL;
        policy_key(c, "instances", ikey, sizeof(ikey));
        if ((r = cmd(c, 2, a, NULL)) == NULL)
            return EXIT_FAIL;
        for (k = 0; r->type == REDIS_REPLY_ARRAY && k + 1 < r->elements &&
                    n < ADMIN_AT_MAX;
             k += 2) {
            const redisReply *v = r->element[k + 1];
            unsigned long long when = 0;
            long long iv;
            if (v->type != REDIS_REPLY_STRING ||
                sscanf(v->str, "%lld %llu", &iv, &when) != 2 ||
                when + STALE_MS < t)
                continue;
            snprintf(at[n].name, sizeof(at[n].name), "%s", r->element[k]->str);
            n++;
        }
        freeReplyObject(r);
        if (n == 0) {
            fprintf(stderr,
                    "rl-ctl: no rl-server has reported in the last "
                    "%d s\n",
                    STALE_MS / 1000);
            return EXIT_FAIL;
        }
    }
    for (i = 0; i < n; i++) {
        uint64_t s0 = 0, n0 = 0;
        int got = top_one(c, c->nadmins > 0 ? &at[i] : NULL, at[i].name, rule,
                          &in[nin], &s0, &n0);
        if (got < 0)
            bad_reads++;
        if (got <= 0)
            continue;
        nin++;
        since = s0 < since ? s0 : since;
        now = n0 > now ? n0 : now;
    }
    if (rl_topk_merge(in, (size_t)nin, (size_t)max, &m) != RL_OK) {
        fprintf(stderr, "rl-ctl: out of memory\n");
        return EXIT_FAIL;
    }
    printf("top offenders of %s, %s (%d of %d instance%s with refusals): "
           "%llu refusals",
           rule, c->nadmins > 0 ? "over the --admin listeners" : "fleet-wide",
           nin, n, n == 1 ? "" : "s", (unsigned long long)m.total);
    if (nin > 0)
        printf(" in the last %llu s",
               (unsigned long long)((now - since) / 1000));
    printf("\n");
    if (m.n > 0)
        printf("     refused       error  key\n");
    for (j = 0; j < m.n; j++) {
        printf("%12llu %11llu  ", (unsigned long long)m.e[j].count,
               (unsigned long long)m.e[j].err);
        print_key(&m.e[j]);
        printf("%s\n", m.e[j].cut ? "  (cut: a longer key)" : "");
    }
    printf("a caller not listed was refused at most %llu times\n",
           (unsigned long long)m.floor);
    rl_topk_sum_free(&m);
    for (i = 0; i < nin; i++)
        rl_topk_sum_free(&in[i]);
    return bad_reads > 0 ? EXIT_FAIL : 0;
}

int main(int argc, char **argv)
{
    static ctl_t c;
    const char *redis = NULL, *prefix = "rl:", *value, *pwfile = NULL;
    const char *redis_flag = "--redis";
    /* The --redis-tls-* flags, passed on as given to rl-server's parser. */
    const char *tls_args[9];
    int ntls = 0;
    char field[RL_RULE_MAX + 16], err[512];
    int i, rc;

    c.wait_ms = 5000;
    for (i = 1; i < argc && argv[i][0] == '-'; i++) {
        const char *o = argv[i];
        if (strcmp(o, "--help") == 0 || strcmp(o, "-h") == 0) {
            fputs(usage, stdout);
            return 0;
        }
        if (strcmp(o, "--version") == 0) {
            printf("rl-ctl %s\n", RLS_VERSION);
            return 0;
        }
        if (strcmp(o, "--redis-tls-insecure") == 0) {
            if (ntls < 9)
                tls_args[ntls++] = o;
            continue;
        }
        if (i + 1 >= argc)
            return bad("%s needs a value (see --help)", o);
        if (strncmp(o, "--redis-tls-", 12) == 0) {
            if (ntls >= 8)
                return bad("too many --redis-tls-* flags");
            tls_args[ntls++] = o;
            tls_args[ntls++] = argv[++i];
        } else if (strcmp(o, "--redis") == 0 ||
                   strcmp(o, "--redis-cluster") == 0) {
            redis_flag = o;
            redis = argv[++i];
        } else if (strcmp(o, "--redis-password-file") == 0) {
            pwfile = argv[++i];
        } else if (strcmp(o, "--admin") == 0) {
            if (c.nadmins == 64)
                return bad("at most 64 --admin");
            c.admins[c.nadmins++] = argv[++i];
            if (c.admin == NULL)
                c.admin = argv[i];
        } else if (strcmp(o, "--admin-token-file") == 0) {
            c.token_file = argv[++i];
        } else if (strcmp(o, "--prefix") == 0) {
            prefix = argv[++i];
        } else if (strcmp(o, "--wait-ms") == 0) {
            char *end;
            errno = 0;
            c.wait_ms = strtoull(argv[++i], &end, 10);
            if (errno || *end || argv[i][0] == '-' || c.wait_ms > 600000)
                return bad("--wait-ms: expected 0 to 600000, got '%s'",
                           argv[i]);
        } else {
            return bad("unknown option '%s' (see --help)", o);
        }
    }
    /* --redis and --prefix mean exactly what they mean to rl-server: its
     * own parser reads them. */
    {
        char *sargv[16] = {"rl-ctl", "--prefix", (char *)prefix};
        int sargc = 3, k;
        const char *env = getenv("RL_REDIS_URL");
        if (redis == NULL && (env == NULL || env[0] == '\0'))
            redis = "127.0.0.1:6379";
        if (redis != NULL) { /* else the parser reads $RL_REDIS_URL */
            sargv[sargc++] = (char *)redis_flag;
            sargv[sargc++] = (char *)redis;
        }
        if (pwfile != NULL) {
            sargv[sargc++] = "--redis-password-file";
            sargv[sargc++] = (char *)pwfile;
        }
        for (k = 0; k < ntls; k++)
            sargv[sargc++] = (char *)tls_args[k];
        rls_flags_defaults(&c.cfg);
        if (rls_flags_parse(&c.cfg, sargc, sargv, stdout, err, sizeof(err)) !=
            0) {
            fprintf(stderr, "rl-ctl: %s\n", err);
            return EXIT_USAGE;
        }
    }
    if (c.cfg.redis_tls) {
        rls_redis_tls_opts_t to = {
            c.cfg.redis_tls_ca, c.cfg.redis_tls_cert, c.cfg.redis_tls_key,
            c.cfg.redis_tls_server_name, c.cfg.redis_tls_insecure};
        if (rls_redis_tls_new(&to, &c.tls, err, sizeof(err)) != 0)
            return bad("%s", err);
    }
    if (i >= argc) {
        fputs(usage, stderr);
        return EXIT_USAGE;
    }
    argc -= i;
    argv += i;

    if (strcmp(argv[0], "quota") == 0) {
        rc = quota(&c, argc - 1, argv + 1);
    } else if (strcmp(argv[0], "mode") == 0 && argc == 3) {
        if (!rule_ok(argv[1]))
            return bad("bad rule name '%s'", argv[1]);
        if ((rc = mode_value(argv[2], &value)) != 0)
            return rc;
        snprintf(field, sizeof(field), "mode:%s", argv[1]);
        rc = set_switch(&c, field, value);
    } else if (strcmp(argv[0], "global") == 0 && argc == 2) {
        if ((rc = mode_value(argv[1], &value)) != 0)
            return rc;
        rc = set_switch(&c, "global", value);
    } else if (strcmp(argv[0], "scale") == 0 && argc == 3) {
        char *end;
        double f;
        if (!rule_ok(argv[1]))
            return bad("bad rule name '%s'", argv[1]);
        value = NULL;
        if (strcmp(argv[2], "default") != 0) {
            errno = 0;
            f = strtod(argv[2], &end);
            if (errno || *end || end == argv[2] || !(f > 0 && f <= 1000))
                return bad("bad scale '%s': a number above 0, at most 1000, "
                           "or default",
                           argv[2]);
            value = argv[2];
        }
        snprintf(field, sizeof(field), "scale:%s", argv[1]);
        rc = set_switch(&c, field, value);
    } else if (strcmp(argv[0], "usage") == 0) {
        rc = usage_cmd(&c, argc - 1, argv + 1);
    } else if (strcmp(argv[0], "config") == 0 && argc == 1) {
        rc = config_cmd(&c);
    } else if (strcmp(argv[0], "loops") == 0) {
        rc = loops_cmd(&c, argc - 1, argv + 1);
    } else if (strcmp(argv[0], "top") == 0 && (argc == 2 || argc == 3)) {
        rc = top_cmd(&c, argv[1], argc == 3 ? argv[2] : NULL);
    } else if (strcmp(argv[0], "show") == 0 && argc == 1) {
        rc = show(&c);
    } else if (strcmp(argv[0], "wait") == 0 && argc == 1) {
        long long v;
        if ((rc = connect_redis(&c)) == 0 &&
            (rc = current_version(&c, &v)) == 0)
            rc = wait_for(&c, v, 0);
    } else {
        rc = bad("unknown command or wrong arguments: '%s' (see --help)",
                 argv[0]);
    }
    rls_redis_sync_free(c.rc);
    rls_redis_tls_free(c.tls);
    free(c.map);
    return rc;
}
