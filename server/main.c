/* rl-server: parse flags, open the store, serve until SIGTERM/SIGINT. */
#define _GNU_SOURCE /* sched_getaffinity */
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <uv.h>

#include "envoy_env.h"
#include "base/log.h"
#include "envoy/conf.h"
#include "envoy/dir.h"
#include "policy/limit.h"
#include "policy/rules.h"
#include "rl_error.h"
#include "flags.h"
#include "loops.h"
#include "net/listen.h"
#include "server.h"
#include "store/memory.h"
#include "store/redis.h"
#include "store/redis_cluster.h"
#include "net/tls.h"
#include "store/redis_tls.h"
#include "version.h"

/* Every error of a policy build on stderr, FILE:LINE first. */
static void print_diag(const rls_diag_t *d, int rc)
{
    size_t i;

    if (rc == RL_ENOMEM) {
        fprintf(stderr, "rl-server: out of memory reading the rules\n");
        return;
    }
    for (i = 0; i < d->n; i++)
        fprintf(stderr, "%s\n", d->msg[i]);
    if (d->dropped > 0)
        fprintf(stderr, "(%zu more errors)\n", d->dropped);
}

extern char **environ;

/* Whether envoy-ratelimit's environment is read (envoy_env.h): asked for,
 * or the program is called `ratelimit` (as Envoy Gateway's and Istio's
 * Deployments run it), or it has no arguments and one of envoy-
 * ratelimit's settings is set. Not for --help and --version. */
static int envoy_env_mode(int argc, char **argv)
{
    const char *base = argc > 0 ? strrchr(argv[0], '/') : NULL;
    int i;

    for (i = 1; i < argc; i++)
        if (strcmp(argv[i], "--help") == 0 ||
            strcmp(argv[i], "--version") == 0)
            return 0;
    for (i = 1; i < argc; i++)
        if (strcmp(argv[i], "--envoy-env") == 0 ||
            strcmp(argv[i], "--envoy-env-print") == 0)
            return 1;
    base = base != NULL ? base + 1 : argc > 0 ? argv[0] : "";
    if (strcmp(base, "ratelimit") == 0)
        return 1;
    return argc == 1 && rls_envoy_env_present((const char *const *)environ);
}

/* --envoy-env-print: the arguments that are parsed, one flag a line with
 * its value and where it came from (a variable, or the command line); a
 * URL's password is masked. */
static void print_env(const rls_envoy_env_t *e, int n, char **args)
{
    int i;

    for (i = 1; i < n; i++) {
        const char *a = args[i], *from = "command line", *v = NULL;
        const char *scheme, *at, *colon, *eq = strchr(a, '=');
        int alen = (int)strlen(a);
        char sep = ' ';
        size_t k;

        for (k = 0; k < e->nargs; k++)
            if (e->args[k] == a)
                break;
        if (k < e->nargs) {
            from = e->from[k];
            if (k + 1 < e->nargs && !e->is_flag[k + 1])
                v = args[++i];
        } else if (strncmp(a, "--", 2) == 0 && eq != NULL) {
            alen = (int)(eq - a);
            v = eq + 1;
            sep = '=';
        } else if (strncmp(a, "--", 2) == 0 && i + 1 < n &&
                   strncmp(args[i + 1], "--", 2) != 0) {
            v = args[++i];
        }
        scheme = v != NULL ? strstr(v, "://") : NULL;
        at = v != NULL ? strrchr(v, '@') : NULL;
        colon = scheme != NULL ? strchr(scheme + 3, ':') : NULL;
        if (v == NULL)
            printf("%s  # %s\n", a, from);
        else if (colon != NULL && at != NULL && colon < at)
            printf("%.*s%c%.*s:***%s  # %s\n", alen, a, sep,
                   (int)(colon - v), v, at, from);
        else
            printf("%.*s%c%s  # %s\n", alen, a, sep, v, from);
    }
    if (e->warn[0] != '\0')
        printf("# read but not honoured: %s\n", e->warn);
}

/* A flag's error; one that a flag from the environment caused names its
 * variable first. */
static void flag_error(const rls_envoy_env_t *e, int argc, char **argv,
                       const char *err)
{
    char flag[64];
    const char *src;
    size_t n = strcspn(err, ": =");
    int i;

    if (e == NULL || strncmp(err, "--", 2) != 0 || n >= sizeof(flag)) {
        fprintf(stderr, "rl-server: %s\n", err);
        return;
    }
    memcpy(flag, err, n);
    flag[n] = '\0';
    for (i = 1; i < argc; i++)
        if (strncmp(argv[i], flag, n) == 0 &&
            (argv[i][n] == '\0' || argv[i][n] == '='))
            break;
    src = rls_envoy_env_source(e, flag);
    if (i < argc || src == NULL)
        fprintf(stderr, "rl-server: %s\n", err);
    else
        fprintf(stderr, "rl-server: %s (envoy-ratelimit's setting): %s\n",
                src, err);
}

/* For the log: how the server's certificate is checked. */
static const char *tls_mode(const rls_flags_t *c)
{
    if (!c->redis_tls)
        return "off";
    return c->redis_tls_insecure ? "insecure" : "verify";
}

/* The cores this process may run on (--threads 0). */
static unsigned cores(void)
{
    cpu_set_t set;
    int n;

    if (sched_getaffinity(0, sizeof(set), &set) == 0 &&
        (n = CPU_COUNT(&set)) > 0)
        return n > RLS_LOOPS_MAX ? RLS_LOOPS_MAX : (unsigned)n;
    return 1;
}

/* What every loop's store is made from (main and --threads). */
typedef struct store_args_s {
    const rls_flags_t *cfg;
    rls_redis_tls_t *tls;
    rls_memtab_t *memtab; /* --threads on the memory store: the table */
} store_args_t;

/* The store of one loop, from the flags: Redis Cluster, Redis (or its
 * Sentinel-named master), else the memory store. NULL: out of memory. */
static rls_store_t *new_store(uv_loop_t *loop, void *arg)
{
    const store_args_t *a = arg;
    const rls_flags_t *c = a->cfg;
    rls_store_t *store;

    if (c->redis_cluster > 0) {
        rls_cluster_opts_t co;
        int k;
        memset(&co, 0, sizeof(co));
        for (k = 0; k < c->redis_cluster; k++) {
            co.hosts[k] = c->redis_seed_host[k];
            co.ports[k] = c->redis_seed_port[k];
        }
        co.nseeds = c->redis_cluster;
        co.user = c->redis_user[0] ? c->redis_user : NULL;
        co.password = c->redis_password[0] ? c->redis_password : NULL;
        co.timeout_ms = c->redis_timeout_ms;
        co.grace_ms = c->grace_ms;
        co.tls = a->tls;
        return rls_store_cluster_new(loop, &co);
    } else if (c->use_redis) {
        rls_redis_opts_t ro;
        rls_redis_sentinel_opts_t so;
        memset(&ro, 0, sizeof(ro));
        ro.host = c->redis_host;
        ro.port = c->redis_port;
        ro.user = c->redis_user[0] ? c->redis_user : NULL;
        ro.password = c->redis_password[0] ? c->redis_password : NULL;
        ro.db = c->redis_db;
        ro.tls = a->tls;
        ro.timeout_ms = c->redis_timeout_ms;
        ro.grace_ms = c->grace_ms;
        ro.no_module = c->redis_module_off;
        if (c->redis_sentinels > 0) {
            int k;
            memset(&so, 0, sizeof(so));
            for (k = 0; k < c->redis_sentinels; k++) {
                so.hosts[k] = c->redis_seed_host[k];
                so.ports[k] = c->redis_seed_port[k];
            }
            so.n = c->redis_sentinels;
            so.master = c->redis_sentinel_master;
            so.user = c->redis_sentinel_user[0] ? c->redis_sentinel_user : NULL;
            so.password = c->redis_sentinel_password[0]
                              ? c->redis_sentinel_password
                              : NULL;
            so.timeout_ms = c->redis_timeout_ms;
            so.tls = a->tls;
            so.agree = c->redis_sentinel_agree;
            ro.sentinel = &so;
        }
        return rls_store_redis_new(loop, &ro);
    }
    if (a->memtab != NULL)
        return rls_store_memory_new_shared(loop, a->memtab); /* its cap */
    store = rls_store_memory_new(loop);
    if (store != NULL)
        rls_store_memory_set_max(store, c->memory_max);
    return store;
}

int main(int argc, char **argv)
{
    rls_redis_tls_t *tls = NULL;
    static rls_flags_t cfg; /* large (rules): keep it off the stack */
    static rls_server_t srv;
    rls_policy_t *policy = NULL;
    rls_loops_t *loops = NULL;
    store_args_t sargs;
    rls_diag_t diag;
    rls_store_t *store;
    uv_loop_t loop;
    char err[512];
    int rc, exit_code = 0;
    /* The environment's flags, kept for the process's life (the
     * configuration points into them), parsed before the command line. */
    static rls_envoy_env_t env;
    static char **args;
    rls_envoy_env_t *from_env = NULL;
    int nargs = argc;

    args = argv;
    if (envoy_env_mode(argc, argv)) {
        rc = rls_envoy_env_translate(&env, (const char *const *)environ);
        if (rc == RL_OK)
            rc = rls_envoy_env_merge(&env, argc, argv, &nargs, &args);
        if (rc != RL_OK) {
            fprintf(stderr, "rl-server: %s\n",
                    rc == RL_EINVAL ? env.err : "out of memory");
            return 2;
        }
        from_env = &env;
        for (rc = 1; rc < argc; rc++)
            if (strcmp(argv[rc], "--envoy-env-print") == 0) {
                print_env(&env, nargs, args);
                return 0;
            }
    }
    rls_flags_defaults(&cfg);
    rc = rls_flags_parse(&cfg, nargs, args, stdout, err, sizeof(err));
    if (rc != 0) {
        flag_error(from_env, argc, argv, err);
        return 2;
    }
    if (cfg.info_only)
        return 0;
    if (from_env != NULL)
        cfg.envoy_env = 1; /* also when called ratelimit, or bare */
    rls_envoy_dir_set_ignore_dot(cfg.envoy_config_ignore_dot);
    /* Before any limit is read: it bounds the files' sliding windows. */
    rls_limit_set_swl_max(cfg.swl_max);
    /* Before any Envoy file is read: it says how domains count. */
    rls_envoy_conf_set_counting(cfg.envoy_counting);
    if (cfg.check_envoy_config != NULL || cfg.nenvoy_configs > 0) {
        /* Envoy descriptor files: every error, FILE:LINE first. */
        rls_envoy_conf_t *ec = NULL;
        const char *one[1] = {cfg.check_envoy_config};
        int check = cfg.check_envoy_config != NULL;

        rc = check ? rls_envoy_conf_build_paths(one, 1, NULL, &ec, &diag)
                   : rls_envoy_conf_build_paths(cfg.envoy_configs,
                                                cfg.nenvoy_configs, NULL, &ec,
                                                &diag);
        if (rc != RL_OK) {
            print_diag(&diag, rc);
            return 2;
        }
        if (check) {
            printf("%s: ok, %zu domain, %zu descriptors\n",
                   cfg.check_envoy_config, rls_envoy_conf_domains(ec),
                   rls_envoy_conf_nodes(ec));
            rls_envoy_conf_unref(ec);
            return 0;
        }
        rls_envoy_conf_unref(ec);
        if (cfg.grpc_host[0] == '\0') {
            fprintf(stderr, "rl-server: --envoy-config needs --grpc\n");
            return 2;
        }
    }
    if (cfg.check_config != NULL) {
        /* Validate, report every error, serve nothing. */
        rc = rls_policy_build(cfg.rules, cfg.nrules, cfg.check_config,
                              cfg.max_rules, &policy, &diag);
        if (rc == RL_OK) {
            printf("%s: ok, %zu rules\n", cfg.check_config,
                   rls_policy_count(policy));
            rls_policy_unref(policy);
            return 0;
        }
        print_diag(&diag, rc);
        return 2;
    }
    rc = rls_policy_build(cfg.rules, cfg.nrules, cfg.config_path,
                          cfg.max_rules, &policy, &diag);
    if (rc != RL_OK) {
        print_diag(&diag, rc);
        return 2;
    }
    rls_log_set_level(cfg.log_level);
    if (from_env != NULL && env.warn[0] != '\0')
        RLS_WARN("envoy-ratelimit settings read but not honoured (see "
                 "deploy/README.md, envoy-ratelimit's settings)",
                 " settings=%s", env.warn);
    /* A client that vanishes must not kill the server mid-write. */
    signal(SIGPIPE, SIG_IGN);

    /* TLS to Redis: the files are checked now, before anything starts,
     * so that a bad flag stops the server at once (exit 2). */
    if (cfg.redis_tls) {
        rls_redis_tls_opts_t to = {cfg.redis_tls_ca, cfg.redis_tls_cert,
                                   cfg.redis_tls_key, cfg.redis_tls_server_name,
                                   cfg.redis_tls_insecure};
        if (rls_redis_tls_new(&to, &tls, err, sizeof(err)) != 0) {
            fprintf(stderr, "rl-server: %s\n", err);
            rls_policy_unref(policy);
            return 2;
        }
    }
    /* TLS on our listeners: the files are checked now, for the same
     * reason; the server reads them again as it starts. */
    if (cfg.tls_cert != NULL) {
        rls_tls_opts_t lo = {cfg.tls_cert, cfg.tls_key, cfg.tls_client_ca};
        rls_tls_t *lt = NULL;
        if (rls_tls_new(&lo, &lt, err, sizeof(err)) != 0) {
            fprintf(stderr, "rl-server: %s\n", err);
            rls_policy_unref(policy);
            rls_redis_tls_free(tls);
            return 2;
        }
        rls_tls_free(lt);
    }
    if (uv_loop_init(&loop) != 0) {
        fprintf(stderr, "rl-server: cannot create event loop\n");
        rls_redis_tls_free(tls);
        return 1;
    }
    sargs.cfg = &cfg;
    sargs.tls = tls;
    sargs.memtab = NULL;
    if (cfg.threads == 0)
        cfg.threads = cores();
    /* Several loops on the memory store: one table, a front per loop. */
    if (cfg.threads > 1 && !cfg.use_redis &&
        (sargs.memtab = rls_memtab_new(cfg.memory_max, 0)) == NULL) {
        fprintf(stderr, "rl-server: out of memory\n");
        rls_policy_unref(policy);
        rls_redis_tls_free(tls);
        return 1;
    }
    store = new_store(&loop, &sargs);
    if (store == NULL) {
        fprintf(stderr, "rl-server: out of memory\n");
        rls_policy_unref(policy);
        rls_redis_tls_free(tls);
        return 1;
    }

    rls_listen_set_reuseport(cfg.reuseport);
    if (cfg.threads > 1 && cfg.fail_open == RLS_FAIL_LOCAL) {
        fprintf(stderr, "rl-server: --fail-local takes one loop: not with "
                        "--threads above 1\n");
        store->v->close(store, NULL, NULL);
        uv_run(&loop, UV_RUN_DEFAULT);
        uv_loop_close(&loop);
        rls_memtab_release(sargs.memtab);
        rls_redis_tls_free(tls);
        rls_policy_unref(policy);
        return 2;
    }
    rc = rls_server_start(&srv, &loop, &cfg, store, policy, err,
                          sizeof(err));
    if (rc != RL_OK) {
        fprintf(stderr, "rl-server: %s\n", err);
        store->v->close(store, NULL, NULL);
        uv_run(&loop, UV_RUN_DEFAULT);
        uv_loop_close(&loop);
        rls_memtab_release(sargs.memtab);
        rls_redis_tls_free(tls);
        return 1;
    }
    if (cfg.threads > 1 &&
        (rc = rls_loops_start(&loops, &srv, cfg.threads, new_store, &sargs,
                              err, sizeof(err))) != RL_OK)
        fprintf(stderr, "rl-server: %s\n", err);
    /* Each loop's store holds the table from here on. */
    rls_memtab_release(sargs.memtab);
    if (rc != RL_OK) {
        rls_server_stop(&srv);
        uv_run(&loop, UV_RUN_DEFAULT);
        rls_server_free(&srv);
        uv_loop_close(&loop);
        rls_redis_tls_free(tls);
        return 1;
    }
    RLS_INFO("listening",
             " addr=%s:%d store=%s fail=%s threads=%u reuseport=%s "
             "version=%s",
             cfg.listen_host, rls_server_port(&srv, RLS_LISTENER_NATIVE),
             cfg.use_redis ? "redis" : "memory",
             rls_fail_mode_name(cfg.fail_open), cfg.threads,
             cfg.reuseport ? "on" : "off", RLS_VERSION);
    if (cfg.redis_cluster > 0)
        RLS_INFO(
            "redis cluster", " seeds=%d first=%s:%d tls=%s timeout_ms=%llu",
            cfg.redis_cluster, cfg.redis_seed_host[0], cfg.redis_seed_port[0],
            tls_mode(&cfg), (unsigned long long)cfg.redis_timeout_ms);
    else if (cfg.redis_sentinels > 0)
        RLS_INFO("redis sentinel",
                 " master=%s sentinels=%d agree=%d first=%s:%d "
                 "db=%d timeout_ms=%llu",
                 cfg.redis_sentinel_master, cfg.redis_sentinels,
                 cfg.redis_sentinel_agree > 0 ? cfg.redis_sentinel_agree
                                              : cfg.redis_sentinels / 2 + 1,
                 cfg.redis_seed_host[0], cfg.redis_seed_port[0], cfg.redis_db,
                 (unsigned long long)cfg.redis_timeout_ms);
    /* The data nodes' password goes where the sentinels say, and a data
     * node cannot be asked anything before AUTH (DESIGN.md, "Redis
     * Sentinel"). */
    if (cfg.redis_sentinels > 0 && cfg.redis_password[0] != '\0' &&
        tls == NULL && cfg.redis_sentinel_password[0] == '\0')
        RLS_WARN("redis sentinel: the sentinels need no password and are not "
                 "reached over TLS, yet the data nodes' password goes where "
                 "they say: whoever can reconfigure or impersonate enough of "
                 "them can have it sent elsewhere (give "
                 "--redis-sentinel-password-file, or TLS)",
                 " master=%s", cfg.redis_sentinel_master);
    else if (cfg.use_redis && cfg.redis_host[0] == '/')
        RLS_INFO("redis", " addr=unix:%s db=%d timeout_ms=%llu", cfg.redis_host,
                 cfg.redis_db, (unsigned long long)cfg.redis_timeout_ms);
    else if (cfg.use_redis)
        RLS_INFO("redis", " addr=%s:%d db=%d tls=%s timeout_ms=%llu",
                 cfg.redis_host, cfg.redis_port, cfg.redis_db, tls_mode(&cfg),
                 (unsigned long long)cfg.redis_timeout_ms);

    if (cfg.port_file != NULL &&
        rls_server_write_ports(&srv, cfg.port_file) != RL_OK) {
        RLS_ERROR("cannot write --port-file; stopping",
                  " path=\"%s\"", cfg.port_file);
        exit_code = 1;
        rls_server_stop(&srv);
    }
    uv_run(&loop, UV_RUN_DEFAULT);
    /* The first loop's stop told the others: they finish theirs. */
    rls_loops_join(loops);
    rls_server_free(&srv);
    rc = uv_loop_close(&loop);
    if (rc != 0)
        RLS_WARN("handles left open at exit", " err=\"%s\"", uv_strerror(rc));
    rls_redis_tls_free(tls);
    return exit_code;
}
