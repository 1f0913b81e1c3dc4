/* envoy-ratelimit's environment (envoy_env.c): the settings its
 * src/settings/settings.go reads, turned into rl-server's flags, so that a
 * Deployment written for envoy-ratelimit (Envoy Gateway's, Istio's sample,
 * the charts) runs rl-server unchanged. Pure: no I/O, no getenv; the
 * environment is given as an array of "NAME=VALUE" strings.
 *
 * The flags come with envoy-ratelimit's defaults (gRPC on 0.0.0.0:8081,
 * HTTP on 0.0.0.0:8080, debug on 0.0.0.0:6070, LOG_LEVEL warn, ...) and
 * are parsed BEFORE the command line's, which wins (rls_envoy_env_merge):
 * a flag given on the command line drops the environment's flag of the
 * same name, and --redis, --redis-cluster and --redis-sentinel (and
 * --envoy-config and --envoy-xds) stand for each other.
 *
 * A setting read but not honoured is named in e->warn (one line, when it
 * is set to something other than its default); an invalid value is one
 * error naming the variable. deploy/README.md, "envoy-ratelimit's
 * settings", maps every setting. */
#ifndef RLS_ENVOY_ENV_H
#define RLS_ENVOY_ENV_H

#include <stddef.h>

#define RLS_ENV_ARGS_MAX 96
/* A value longer than this is refused (paths, URLs, lists). */
#define RLS_ENV_VALUE_MAX 4096

typedef struct rls_envoy_env_s {
    /* The flags, each "--name" then its value when it takes one (malloc'd,
     * owned by e); from[i]: the variable (or "default") arg i came from. */
    char *args[RLS_ENV_ARGS_MAX];
    const char *from[RLS_ENV_ARGS_MAX];
    unsigned char is_flag[RLS_ENV_ARGS_MAX]; /* args[i] is a "--name" */
    size_t nargs;
    /* Settings read but not honoured, comma-separated ("" when none). */
    char warn[768];
    /* On RL_EINVAL: one line, starting with the variable's name. */
    char err[320];
} rls_envoy_env_t;

/* Whether envp (NULL-terminated "NAME=VALUE" strings) sets at least one
 * of envoy-ratelimit's settings. */
int rls_envoy_env_present(const char *const *envp);

/* Translates envp into e (which it initializes). Returns 0; RL_EINVAL with
 * e->err; RL_ENOMEM. Free e with rls_envoy_env_free whatever it returns. */
int rls_envoy_env_translate(rls_envoy_env_t *e, const char *const *envp);

/* The arguments to parse: argv[0], e's flags but those the command line
 * overrides, then argv[1..argc). *out (malloc'd, NULL-terminated; its
 * strings stay e's and argv's) has *outc entries. Returns 0 or
 * RL_ENOMEM. */
int rls_envoy_env_merge(const rls_envoy_env_t *e, int argc, char **argv,
                        int *outc, char ***out);

/* The variable a flag of e came from, for an error the flag's parser gave
 * ("--redis-sentinel: ..." is REDIS_URL's); NULL when none of e's. */
const char *rls_envoy_env_source(const rls_envoy_env_t *e, const char *flag);

void rls_envoy_env_free(rls_envoy_env_t *e); /* NULL is fine */

#endif
