/* envoy-ratelimit's environment as flags (server/envoy_env.c): Envoy
 * Gateway's and Istio's Deployments give exactly the flags expected, with
 * envoy-ratelimit's defaults; the command line wins; an invalid value is
 * one error naming its variable; a setting read but not honoured is named
 * in the warning unless it is at its default. The flags the other parts
 * of issue 42 add (--envoy-http, --debug-http, --envoy-counting) are
 * compared as text here; e2e_envoy_env_start runs them. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "envoy_env.h"
#include "flags.h"
#include "rl_error.h"

/* The flags of e as one line, "--a v --b". */
static const char *joined(const rls_envoy_env_t *e)
{
    static char buf[8192];
    size_t i, n = 0;

    buf[0] = '\0';
    for (i = 0; i < e->nargs; i++)
        n += (size_t)snprintf(buf + n, sizeof(buf) - n, "%s%s",
                              i > 0 ? " " : "", e->args[i]);
    return buf;
}

/* Envoy Gateway's Deployment (internal/infrastructure/kubernetes/
 * ratelimit/testdata/deployments/default.yaml), its addresses made
 * loopback ones. */
static const char *const eg_env[] = {
    "RUNTIME_ROOT=/data",
    "RUNTIME_SUBDIRECTORY=ratelimit",
    "RUNTIME_IGNOREDOTFILES=true",
    "RUNTIME_WATCH_ROOT=false",
    "LOG_LEVEL=info",
    "USE_STATSD=false",
    "CONFIG_TYPE=GRPC_XDS_SOTW",
    "CONFIG_GRPC_XDS_SERVER_URL=127.0.0.1:18001",
    "CONFIG_GRPC_XDS_NODE_ID=envoy-ratelimit",
    "GRPC_SERVER_USE_TLS=true",
    "GRPC_SERVER_TLS_CERT=/certs/tls.crt",
    "GRPC_SERVER_TLS_KEY=/certs/tls.key",
    "GRPC_SERVER_TLS_CA_CERT=/certs/ca.crt",
    "CONFIG_GRPC_XDS_SERVER_USE_TLS=true",
    "CONFIG_GRPC_XDS_CLIENT_TLS_CERT=/certs/tls.crt",
    "CONFIG_GRPC_XDS_CLIENT_TLS_KEY=/certs/tls.key",
    "CONFIG_GRPC_XDS_SERVER_TLS_CACERT=/certs/ca.crt",
    "FORCE_START_WITHOUT_INITIAL_CONFIG=true",
    "REDIS_SOCKET_TYPE=tcp",
    "REDIS_URL=127.0.0.1:6379",
    "USE_PROMETHEUS=true",
    "PROMETHEUS_ADDR=127.0.0.1:19001",
    "PROMETHEUS_MAPPER_YAML=/etc/statsd-exporter/conf.yaml",
    "PATH=/usr/bin",
    NULL,
};

static void test_envoy_gateway(void **state)
{
    rls_envoy_env_t e;

    (void)state;
    assert_true(rls_envoy_env_present(eg_env));
    assert_int_equal(rls_envoy_env_translate(&e, eg_env), RL_OK);
    assert_string_equal(
        joined(&e),
        "--listen 127.0.0.1:0 --grpc 0.0.0.0:8081 "
        "--envoy-http 0.0.0.0:8080 "
        "--debug-http 0.0.0.0:6070 --log-level info "
        "--tls-cert /certs/tls.crt --tls-key /certs/tls.key "
        "--tls-listeners grpc --tls-client-ca /certs/ca.crt "
        "--envoy-xds 127.0.0.1:18001 --envoy-xds-node-id envoy-ratelimit "
        "--envoy-xds-backoff-ms 10000 --envoy-xds-backoff-max-ms 60000 "
        "--envoy-xds-tls-ca /certs/ca.crt --envoy-xds-tls-cert /certs/tls.crt "
        "--envoy-xds-tls-key /certs/tls.key "
        "--redis 127.0.0.1:6379 --redis-timeout-ms 10000 "
        "--metrics 127.0.0.1:19001 --envoy-counting envoy "
        "--expiry-spread-ms 300000");
    /* EG always sets the mapper file; its names are the default's here. */
    assert_string_equal(e.warn, "PROMETHEUS_MAPPER_YAML");
    assert_string_equal(rls_envoy_env_source(&e, "--tls-client-ca"),
                        "GRPC_SERVER_TLS_CA_CERT");
    rls_envoy_env_free(&e);
}

/* Istio's samples/ratelimit/rate-limit-service.yaml: a ConfigMap mounted
 * at /data/ratelimit/config. */
static void test_istio(void **state)
{
    static const char *const env[] = {
        "LOG_LEVEL=debug",
        "REDIS_SOCKET_TYPE=tcp",
        "REDIS_URL=127.0.0.1:6379",
        "USE_STATSD=false",
        "RUNTIME_ROOT=/data",
        "RUNTIME_SUBDIRECTORY=ratelimit",
        "RUNTIME_WATCH_ROOT=false",
        "RUNTIME_IGNOREDOTFILES=true",
        "HOST=::",
        "GRPC_HOST=::",
        NULL,
    };
    rls_envoy_env_t e;

    (void)state;
    assert_int_equal(rls_envoy_env_translate(&e, env), RL_OK);
    assert_string_equal(
        joined(&e), "--listen 127.0.0.1:0 --grpc [::]:8081 "
                    "--envoy-http [::]:8080 "
                    "--debug-http 0.0.0.0:6070 --log-level debug "
                    "--envoy-config /data/ratelimit/config "
                    "--envoy-config-ignore-dotfiles --redis 127.0.0.1:6379 "
                    "--redis-timeout-ms 10000 --envoy-counting envoy "
                    "--expiry-spread-ms 300000");
    assert_string_equal(e.warn, "");
    rls_envoy_env_free(&e);
}

/* Nothing set: envoy-ratelimit's defaults, statsd and the nutcracker
 * socket included; without RUNTIME_SUBDIRECTORY its loader reads no file. */
static void test_defaults(void **state)
{
    static const char *const env[] = {"HOME=/", NULL};
    rls_envoy_env_t e;

    (void)state;
    assert_false(rls_envoy_env_present(env));
    assert_int_equal(rls_envoy_env_translate(&e, env), RL_OK);
    assert_string_equal(
        joined(&e),
        "--listen 127.0.0.1:0 --grpc 0.0.0.0:8081 "
        "--envoy-http 0.0.0.0:8080 "
        "--debug-http 0.0.0.0:6070 --log-level warn "
        "--redis unix:///var/run/nutcracker/ratelimit.sock "
        "--redis-timeout-ms 10000 --statsd 127.0.0.1:8125 "
        "--statsd-flush-ms 10000 --envoy-counting envoy "
        "--expiry-spread-ms 300000");
    rls_envoy_env_free(&e);
}

/* Each line: the environment (';'-separated), then the flags expected to
 * appear in order (a substring of the whole). */
static void test_mappings(void **state)
{
    static const struct {
        const char *env, *want;
    } cases[] = {
        {"RUNTIME_SUBDIRECTORY=rl;RUNTIME_ROOT=/srv/",
         "--envoy-config /srv/rl/config --redis"},
        {"RUNTIME_WATCH_ROOT=false;RUNTIME_ROOT=/r;RUNTIME_APPDIRECTORY=app",
         "--envoy-config /r/app --redis"},
        {"REDIS_SOCKET_TYPE=tcp;REDIS_URL=r:6379;REDIS_AUTH=s3cr:t@x",
         "--redis redis://s3cr:t%40x@r:6379"},
        {"REDIS_SOCKET_TYPE=tcp;REDIS_URL=r:6379;REDIS_AUTH=pw;REDIS_TLS=true;"
         "REDIS_TLS_CACERT=/ca;REDIS_TLS_CLIENT_CERT=/c;"
         "REDIS_TLS_CLIENT_KEY=/k",
         "--redis rediss://:pw@r:6379 --redis-tls-cert /c --redis-tls-key /k "
         "--redis-tls-ca /ca"},
        {"REDIS_SOCKET_TYPE=tcp;REDIS_TYPE=cluster;REDIS_URL=a:1,b:2",
         "--redis-cluster a:1,b:2 "},
        {"REDIS_SOCKET_TYPE=tcp;REDIS_TYPE=SENTINEL;"
         "REDIS_URL=mymaster,10.0.0.1:26379,10.0.0.2:26379",
         "--redis-sentinel 10.0.0.1:26379,10.0.0.2:26379 "
         "--redis-sentinel-master mymaster"},
        {"REDIS_SOCKET_TYPE=tcp;REDIS_URL=r:1;REDIS_TIMEOUT=250ms;"
         "REDIS_PIPELINE_WINDOW=300us",
         "--redis-timeout-ms 250 --batch-hold-us 300"},
        {"USE_STATSD=true;STATSD_HOST=127.0.0.1;STATSD_PORT=9125;"
         "STATS_FLUSH_INTERVAL=1.5s",
         "--statsd 127.0.0.1:9125 --statsd-flush-ms 1500"},
        {"USE_STATSD=false;USE_PROMETHEUS=1", "--metrics 0.0.0.0:9090"},
        {"DISABLE_STATS=true;USE_PROMETHEUS=true", "--envoy-counting"},
        {"SHADOW_MODE=True;QUOTA_MODE=t;RESPONSE_DYNAMIC_METADATA=1;"
         "LIMIT_RESPONSE_HEADERS_ENABLED=TRUE;"
         "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=true;NEAR_LIMIT_RATIO=0.9;"
         "CACHE_KEY_PREFIX=erl_;EXPIRATION_JITTER_MAX_SECONDS=0",
         "--envoy-shadow-mode --envoy-quota-mode --envoy-response-metadata "
         "--envoy-response-headers --envoy-counting envoy-stop "
         "--envoy-near-limit-ratio 0.9 --prefix erl_ --expiry-spread-ms 0"},
        {"GRPC_HOST=::1;GRPC_PORT=0;LOG_LEVEL=Warning",
         "--grpc [::1]:0 --envoy-http"},
        {"CONFIG_TYPE=GRPC_XDS_SOTW;CONFIG_GRPC_XDS_SERVER_URL=dns:///cp:18000;"
         "XDS_CLIENT_BACKOFF_INITIAL_INTERVAL=250ms;"
         "XDS_CLIENT_BACKOFF_MAX_INTERVAL=1m;"
         "CONFIG_GRPC_XDS_SERVER_USE_TLS=true;"
         "CONFIG_GRPC_XDS_SERVER_TLS_CACERT=/ca;"
         "CONFIG_GRPC_XDS_SERVER_TLS_SAN=cp.example",
         "--envoy-xds cp:18000 --envoy-xds-node-id default "
         "--envoy-xds-backoff-ms 250 --envoy-xds-backoff-max-ms 60000 "
         "--envoy-xds-tls-ca /ca --envoy-xds-tls-server-name cp.example"},
        {"GRPC_SERVER_USE_TLS=true;GRPC_SERVER_TLS_CERT=/c;"
         "GRPC_SERVER_TLS_KEY=/k;GRPC_CLIENT_TLS_CACERT=/ca",
         "--tls-cert /c --tls-key /k --tls-listeners grpc --tls-client-ca /ca"},
    };
    size_t i;

    (void)state;
    for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char buf[1024], *envp[32], *save = NULL, *tok;
        rls_envoy_env_t e;
        size_t n = 0;

        snprintf(buf, sizeof(buf), "%s", cases[i].env);
        for (tok = strtok_r(buf, ";", &save); tok != NULL;
             tok = strtok_r(NULL, ";", &save))
            envp[n++] = tok;
        envp[n] = NULL;
        if (rls_envoy_env_translate(&e, (const char *const *)envp) != RL_OK)
            fail_msg("%s: %s", cases[i].env, e.err);
        if (strstr(joined(&e), cases[i].want) == NULL)
            fail_msg("%s:\n got %s\nwant %s", cases[i].env, joined(&e),
                     cases[i].want);
        if (i == 9) /* DISABLE_STATS: neither statsd nor Prometheus */
            assert_null(strstr(joined(&e), "--metrics"));
        rls_envoy_env_free(&e);
    }
}

/* Invalid values: one error, naming the variable. */
static void test_invalid(void **state)
{
    static const struct {
        const char *env, *var;
    } cases[] = {
        {"PORT=x", "PORT:"},
        {"PORT=65536", "PORT:"},
        {"GRPC_PORT=", "GRPC_PORT:"},
        {"SHADOW_MODE=yes", "SHADOW_MODE:"},
        {"REDIS_TIMEOUT=10", "REDIS_TIMEOUT:"},
        {"REDIS_TIMEOUT=-1s", "REDIS_TIMEOUT:"},
        {"NEAR_LIMIT_RATIO=a", "NEAR_LIMIT_RATIO:"},
        {"LOG_LEVEL=loud", "LOG_LEVEL:"},
        {"CONFIG_TYPE=GRPC_XDS_DELTA", "CONFIG_TYPE:"},
        {"REDIS_TYPE=ring", "REDIS_TYPE:"},
        {"REDIS_SOCKET_TYPE=udp", "REDIS_SOCKET_TYPE:"},
        {"REDIS_SOCKET_TYPE=tcp;REDIS_TYPE=sentinel;REDIS_URL=m",
         "REDIS_URL:"},
        {"REDIS_URL=relative.sock", "REDIS_URL:"},
        {"REDIS_TLS=true", "REDIS_TLS:"},
        {"BACKEND_TYPE=etcd", "BACKEND_TYPE:"},
        {"USE_PROMETHEUS=true", "USE_PROMETHEUS:"},
        {"USE_STATSD=false;USE_DOG_STATSD=true;USE_PROMETHEUS=true",
         "USE_DOG_STATSD:"},
        {"GRPC_SERVER_USE_TLS=true;GRPC_SERVER_TLS_CERT=/c",
         "GRPC_SERVER_USE_TLS:"},
        {"GRPC_SERVER_USE_TLS=true;GRPC_SERVER_TLS_CERT=/c;"
         "GRPC_SERVER_TLS_KEY=/k;GRPC_CLIENT_TLS_SAN=envoy",
         "GRPC_CLIENT_TLS_SAN:"},
        {"CONFIG_TYPE=GRPC_XDS_SOTW;CONFIG_GRPC_XDS_SERVER_USE_TLS=true",
         "CONFIG_GRPC_XDS_SERVER_USE_TLS:"},
        {"CONFIG_TYPE=GRPC_XDS_SOTW;CONFIG_GRPC_XDS_SERVER_URL=http://cp:1",
         "CONFIG_GRPC_XDS_SERVER_URL:"},
        {"CONFIG_TYPE=GRPC_XDS_SOTW;XDS_CLIENT_BACKOFF_MAX_INTERVAL=0",
         "XDS_CLIENT_BACKOFF_MAX_INTERVAL:"},
        {"REDIS_POOL_ON_EMPTY_BEHAVIOR=create",
         "REDIS_POOL_ON_EMPTY_BEHAVIOR:"},
        {"REDIS_SOCKET_TYPE=tcp;REDIS_URL=redis://u:p@h:1;REDIS_AUTH=p",
         "REDIS_AUTH:"},
        /* Read only by gated parts, still checked, as envconfig does. */
        {"TRACING_SAMPLING_RATE=often", "TRACING_SAMPLING_RATE:"},
        {"MEMCACHE_TLS=maybe", "MEMCACHE_TLS:"},
        {"EXPIRATION_JITTER_MAX_SECONDS=-5", "EXPIRATION_JITTER_MAX_SECONDS:"},
    };
    size_t i;

    (void)state;
    for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char buf[512], *envp[16], *save = NULL, *tok;
        rls_envoy_env_t e;
        size_t n = 0;

        snprintf(buf, sizeof(buf), "%s", cases[i].env);
        for (tok = strtok_r(buf, ";", &save); tok != NULL;
             tok = strtok_r(NULL, ";", &save))
            envp[n++] = tok;
        envp[n] = NULL;
        if (rls_envoy_env_translate(&e, (const char *const *)envp) !=
            RL_EINVAL)
            fail_msg("%s: accepted", cases[i].env);
        if (strncmp(e.err, cases[i].var, strlen(cases[i].var)) != 0)
            fail_msg("%s: error '%s' does not start with %s", cases[i].env,
                     e.err, cases[i].var);
        assert_null(strchr(e.err, '\n'));
        rls_envoy_env_free(&e);
    }
}

/* TRACING_ENABLED and the OTLP exporter's variables, as envoy-ratelimit's
 * tracer reads them: a base endpoint gets /v1/traces, a traces endpoint is
 * taken whole, the rate is clamped to [0, 1]; grpc and https are refused,
 * naming the variable. */
static void test_tracing(void **state)
{
    static const char *const base[] = {
        "TRACING_ENABLED=true",
        "OTEL_EXPORTER_OTLP_ENDPOINT=http://otel-collector.monitoring:4318/",
        "TRACING_SERVICE_NAMESPACE=gw",
        "TRACING_SERVICE_INSTANCE_ID=pod-1",
        "TRACING_SAMPLING_RATE=7",
        "OTEL_EXPORTER_OTLP_TIMEOUT=2500",
        NULL,
    };
    static const char *const whole[] = {
        "TRACING_ENABLED=true",
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=http://c:4318/custom",
        "OTEL_EXPORTER_OTLP_ENDPOINT=http://ignored:4318",
        "TRACING_SAMPLING_RATE=0.25",
        NULL,
    };
    static const char *const insecure[] = {"TRACING_ENABLED=true",
                                           "OTEL_EXPORTER_OTLP_INSECURE=true",
                                           "TRACING_SAMPLING_RATE=-1", NULL};
    static const struct {
        const char *env[4];
        const char *var;
    } bad[] = {
        {{"TRACING_ENABLED=true", "TRACING_EXPORTER_PROTOCOL=grpc",
          "OTEL_EXPORTER_OTLP_ENDPOINT=http://c:4317", NULL},
         "TRACING_EXPORTER_PROTOCOL: grpc"},
        {{"TRACING_ENABLED=true", "TRACING_EXPORTER_PROTOCOL=udp", NULL},
         "TRACING_EXPORTER_PROTOCOL: expected"},
        {{"TRACING_ENABLED=true", NULL},
         "OTEL_EXPORTER_OTLP_ENDPOINT: OTLP "
         "over https"},
        {{"TRACING_ENABLED=true", "OTEL_EXPORTER_OTLP_ENDPOINT=https://c:4318",
          NULL},
         "OTEL_EXPORTER_OTLP_ENDPOINT: OTLP over https"},
        {{"TRACING_ENABLED=true", "OTEL_EXPORTER_OTLP_ENDPOINT=http://c",
          "OTEL_EXPORTER_OTLP_TIMEOUT=soon", NULL},
         "OTEL_EXPORTER_OTLP_TIMEOUT:"},
    };
    static const char *const off[] = {
        "TRACING_ENABLED=false", "OTEL_EXPORTER_OTLP_ENDPOINT=http://c:4318",
        NULL};
    rls_envoy_env_t e;
    size_t i;

    (void)state;
    assert_int_equal(rls_envoy_env_translate(&e, base), RL_OK);
    assert_non_null(
        strstr(joined(&e),
               "--trace-otlp http://otel-collector.monitoring:4318/v1/traces "
               "--trace-service RateLimit --trace-service-namespace gw "
               "--trace-service-instance pod-1 --trace-sample 1 "
               "--trace-timeout-ms 2500"));
    assert_string_equal(e.warn, "");
    rls_envoy_env_free(&e);
    assert_int_equal(rls_envoy_env_translate(&e, whole), RL_OK);
    assert_non_null(strstr(joined(&e), "--trace-otlp http://c:4318/custom "));
    assert_non_null(strstr(joined(&e), "--trace-sample 0.25"));
    rls_envoy_env_free(&e);
    assert_int_equal(rls_envoy_env_translate(&e, insecure), RL_OK);
    assert_non_null(
        strstr(joined(&e), "--trace-otlp http://localhost:4318/v1/traces "));
    assert_non_null(strstr(joined(&e), "--trace-sample 0"));
    rls_envoy_env_free(&e);
    assert_int_equal(rls_envoy_env_translate(&e, off), RL_OK);
    assert_null(strstr(joined(&e), "--trace"));
    rls_envoy_env_free(&e);
    for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        assert_int_equal(rls_envoy_env_translate(&e, bad[i].env), RL_EINVAL);
        if (strstr(e.err, bad[i].var) != e.err)
            fail_msg("case %zu: '%s' does not start with '%s'", i, e.err,
                     bad[i].var);
        rls_envoy_env_free(&e);
    }
}

/* Settings read but not honoured: named once each, in one line; the same
 * settings at their defaults (in any spelling of the value): nothing. */
static void test_unhonoured(void **state)
{
    static const char *const on[] = {
        "REDIS_PERSECOND=true",
        "REDIS_PERSECOND_URL=other:6379",
        "BACKEND_TYPE=memcache",
        "MEMCACHE_HOST_PORT=mc:11211",
        "GRPC_MAX_CONNECTION_AGE=1h",
        "REDIS_POOL_SIZE=20",
        "LOG_FORMAT=json",
        "MERGE_DOMAIN_CONFIG=true",
        NULL,
    };
    static const char *const at_default[] = {
        "TRACING_ENABLED=false",
        "TRACING_SERVICE_NAME=rl", /* read only with tracing */
        "REDIS_PERSECOND=0",
        "REDIS_PERSECOND_URL=other:6379",
        "BACKEND_TYPE=redis",
        "GRPC_MAX_CONNECTION_AGE=1440m",
        "REDIS_POOL_SIZE=10",
        "LOG_FORMAT=text",
        "MERGE_DOMAIN_CONFIG=False",
        "XDS_CLIENT_BACKOFF_JITTER=false", /* read only under xDS */
        "PROMETHEUS_PATH=/m",              /* read only with Prometheus */
        NULL,
    };
    rls_envoy_env_t e;

    (void)state;
    assert_int_equal(rls_envoy_env_translate(&e, on), RL_OK);
    assert_string_equal(e.warn,
                        "GRPC_MAX_CONNECTION_AGE,REDIS_POOL_SIZE,"
                        "REDIS_PERSECOND,MERGE_DOMAIN_CONFIG,LOG_FORMAT,"
                        "BACKEND_TYPE");
    /* memcache: counted in memory, so no Redis flag */
    assert_null(strstr(joined(&e), "--redis"));
    rls_envoy_env_free(&e);
    assert_int_equal(rls_envoy_env_translate(&e, at_default), RL_OK);
    assert_string_equal(e.warn, "");
    rls_envoy_env_free(&e);
}

/* The command line wins: a flag of the same name, or one standing for the
 * same thing, drops the environment's. */
static void test_merge(void **state)
{
    static const char *const env[] = {
        "REDIS_SOCKET_TYPE=tcp",   "REDIS_TYPE=sentinel",
        "REDIS_URL=m,10.0.0.1:1",  "RUNTIME_SUBDIRECTORY=rl",
        "RUNTIME_IGNOREDOTFILES=true", "LOG_LEVEL=debug",
        NULL,
    };
    char *argv[] = {"ratelimit",       "--redis-cluster=127.0.0.1:7000",
                    "--envoy-config",  "/etc/rl.yaml",
                    "--log-level=error", "--grpc",
                    "127.0.0.1:0",     NULL};
    char line[2048], **out = NULL;
    rls_envoy_env_t e;
    size_t k = 0;
    int n = 0, i;

    (void)state;
    assert_int_equal(rls_envoy_env_translate(&e, env), RL_OK);
    assert_int_equal(rls_envoy_env_merge(&e, 7, argv, &n, &out), RL_OK);
    line[0] = '\0';
    for (i = 0; i < n; i++)
        k += (size_t)snprintf(line + k, sizeof(line) - k, "%s%s",
                              i ? " " : "", out[i]);
    assert_null(out[n]);
    assert_string_equal(line, "ratelimit --listen 127.0.0.1:0 "
                              "--envoy-http 0.0.0.0:8080 "
                              "--debug-http 0.0.0.0:6070 "
                              "--redis-timeout-ms 10000 "
                              "--statsd 127.0.0.1:8125 "
                              "--statsd-flush-ms 10000 "
                              "--envoy-counting envoy "
                              "--expiry-spread-ms 300000 "
                              "--redis-cluster=127.0.0.1:7000 "
                              "--envoy-config /etc/rl.yaml "
                              "--log-level=error --grpc 127.0.0.1:0");
    free(out);
    rls_envoy_env_free(&e);
}

/* The flags that exist in this build parse as rl-server's own; a Redis
 * URL made from REDIS_AUTH decodes back to the same password. */
static void test_parses(void **state)
{
    static const char *const env[] = {
        "REDIS_SOCKET_TYPE=tcp", "REDIS_URL=127.0.0.1:6390",
        "REDIS_AUTH=ad:m:in@/%", "GRPC_HOST=127.0.0.1",
        "GRPC_PORT=0",           "NEAR_LIMIT_RATIO=0.5",
        "SHADOW_MODE=true",      NULL,
    };
    static rls_flags_t c;
    char *argv[32], err[256];
    rls_envoy_env_t e;
    size_t i, n = 1;

    (void)state;
    assert_int_equal(rls_envoy_env_translate(&e, env), RL_OK);
    argv[0] = "rl-server";
    /* The flags of other parts of issue 42 are left out until they are
     * in this build (rls_flags_parse refuses an unknown one). */
    for (i = 0; i < e.nargs; i++) {
        if (strcmp(e.args[i], "--envoy-http") == 0 ||
            strcmp(e.args[i], "--debug-http") == 0 ||
            strcmp(e.args[i], "--envoy-counting") == 0) {
            i++;
            continue;
        }
        argv[n++] = e.args[i];
    }
    rls_flags_defaults(&c);
    if (rls_flags_parse(&c, (int)n, argv, stdout, err, sizeof(err)) != 0)
        fail_msg("%s", err);
    assert_string_equal(c.redis_host, "127.0.0.1");
    assert_int_equal(c.redis_port, 6390);
    assert_string_equal(c.redis_user, "ad");
    assert_string_equal(c.redis_password, "m:in@/%");
    assert_int_equal(c.redis_timeout_ms, 10000);
    assert_string_equal(c.grpc_host, "127.0.0.1");
    assert_int_equal(c.grpc_port, 0);
    assert_true(c.envoy_near_ratio == 0.5);
    assert_true(c.envoy_shadow_mode);
    assert_string_equal(c.log_level, "warn");
    assert_int_equal(c.spread_ms, 300000);
    rls_envoy_env_free(&e);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_envoy_gateway), cmocka_unit_test(test_istio),
        cmocka_unit_test(test_defaults),      cmocka_unit_test(test_mappings),
        cmocka_unit_test(test_invalid),       cmocka_unit_test(test_unhonoured),
        cmocka_unit_test(test_tracing),       cmocka_unit_test(test_merge),
        cmocka_unit_test(test_parses),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
