/* envoy-ratelimit's environment as rl-server's flags; see envoy_env.h. */
#include "envoy_env.h"

#include <ctype.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rl_error.h"

/* How a setting's value is read, as envconfig reads settings.go's field
 * types: strconv.ParseBool, ParseInt, ParseFloat, time.ParseDuration;
 * strings and lists as they are. */
enum { K_STR, K_BOOL, K_INT, K_DUR, K_FLOAT };

/* What happens to a setting besides checking its value:
 *   P_MAP   the code below turns it into flags (or it is honoured as is);
 *   P_WARN  not honoured: named in the warning when set to other than its
 *           default;
 *   P_XDS   the same, only under CONFIG_TYPE=GRPC_XDS_SOTW (read only
 *           there);
 *   P_PROM  the same, only with USE_PROMETHEUS (read only there);
 *   P_GATED read only when another setting turns it on, and that one is
 *           named instead (REDIS_PERSECOND, BACKEND_TYPE, TRACING_ENABLED,
 *           USE_DOG_STATSD). */
enum { P_MAP, P_WARN, P_XDS, P_PROM, P_GATED };

typedef struct {
    const char *name;
    const char *dflt; /* NULL: no default (unset means not given) */
    unsigned char kind, policy;
} setting_t;

/* Every setting of envoy-ratelimit's src/settings/settings.go, with its
 * default. */
static const setting_t settings[] = {
    {"HOST", "0.0.0.0", K_STR, P_MAP},
    {"PORT", "8080", K_INT, P_MAP},
    {"DEBUG_HOST", "0.0.0.0", K_STR, P_MAP},
    {"DEBUG_PORT", "6070", K_INT, P_MAP},
    {"GRPC_UDS", "", K_STR, P_WARN},
    {"GRPC_HOST", "0.0.0.0", K_STR, P_MAP},
    {"GRPC_PORT", "8081", K_INT, P_MAP},
    {"GRPC_MAX_CONNECTION_AGE", "24h", K_DUR, P_WARN},
    {"GRPC_MAX_CONNECTION_AGE_GRACE", "1h", K_DUR, P_WARN},
    {"GRPC_SERVER_USE_TLS", "false", K_BOOL, P_MAP},
    {"GRPC_SERVER_TLS_CERT", "", K_STR, P_MAP},
    {"GRPC_SERVER_TLS_KEY", "", K_STR, P_MAP},
    {"GRPC_CLIENT_TLS_CACERT", "", K_STR, P_MAP},
    {"GRPC_CLIENT_TLS_SAN", "", K_STR, P_MAP},
    {"LOG_LEVEL", "WARN", K_STR, P_MAP},
    {"LOG_FORMAT", "text", K_STR, P_MAP},
    {"CONFIG_TYPE", "FILE", K_STR, P_MAP},
    {"FORCE_START_WITHOUT_INITIAL_CONFIG", "false", K_BOOL, P_MAP},
    {"CONFIG_GRPC_XDS_NODE_ID", "default", K_STR, P_MAP},
    {"CONFIG_GRPC_XDS_NODE_METADATA", "", K_STR, P_XDS},
    {"CONFIG_GRPC_XDS_SERVER_URL", "localhost:18000", K_STR, P_MAP},
    {"CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL", "3s", K_DUR, P_XDS},
    {"CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS", "", K_STR, P_XDS},
    {"CONFIG_GRPC_XDS_SERVER_USE_TLS", "false", K_BOOL, P_MAP},
    {"CONFIG_GRPC_XDS_CLIENT_TLS_CERT", "", K_STR, P_MAP},
    {"CONFIG_GRPC_XDS_CLIENT_TLS_KEY", "", K_STR, P_MAP},
    {"CONFIG_GRPC_XDS_SERVER_TLS_CACERT", "", K_STR, P_MAP},
    {"CONFIG_GRPC_XDS_SERVER_TLS_SAN", "", K_STR, P_MAP},
    {"XDS_CLIENT_BACKOFF_INITIAL_INTERVAL", "10s", K_DUR, P_MAP},
    {"XDS_CLIENT_BACKOFF_MAX_INTERVAL", "60s", K_DUR, P_MAP},
    {"XDS_CLIENT_BACKOFF_RANDOM_FACTOR", "0.5", K_FLOAT, P_XDS},
    {"XDS_CLIENT_BACKOFF_JITTER", "true", K_BOOL, P_XDS},
    {"XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES", NULL, K_INT, P_XDS},
    {"USE_DOG_STATSD", "false", K_BOOL, P_MAP},
    {"USE_DOG_STATSD_MOGRIFIERS", "", K_STR, P_GATED},
    {"USE_STATSD", "true", K_BOOL, P_MAP},
    {"STATSD_HOST", "localhost", K_STR, P_MAP},
    {"STATSD_PORT", "8125", K_INT, P_MAP},
    {"EXTRA_TAGS", "", K_STR, P_WARN},
    {"STATS_FLUSH_INTERVAL", "10s", K_DUR, P_MAP},
    {"DISABLE_STATS", "false", K_BOOL, P_MAP},
    {"USE_PROMETHEUS", "false", K_BOOL, P_MAP},
    {"PROMETHEUS_ADDR", ":9090", K_STR, P_MAP},
    {"PROMETHEUS_PATH", "/metrics", K_STR, P_PROM},
    {"PROMETHEUS_MAPPER_YAML", "", K_STR, P_PROM},
    {"PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS", "false", K_BOOL, P_PROM},
    {"RUNTIME_ROOT", "/srv/runtime_data/current", K_STR, P_MAP},
    {"RUNTIME_SUBDIRECTORY", "", K_STR, P_MAP},
    {"RUNTIME_APPDIRECTORY", "config", K_STR, P_MAP},
    {"RUNTIME_IGNOREDOTFILES", "false", K_BOOL, P_MAP},
    {"RUNTIME_WATCH_ROOT", "true", K_BOOL, P_MAP},
    {"EXPIRATION_JITTER_MAX_SECONDS", "300", K_INT, P_MAP},
    {"LOCAL_CACHE_SIZE_IN_BYTES", "0", K_INT, P_MAP},
    {"NEAR_LIMIT_RATIO", "0.8", K_FLOAT, P_MAP},
    {"CACHE_KEY_PREFIX", "", K_STR, P_MAP},
    {"BACKEND_TYPE", "redis", K_STR, P_MAP},
    {"STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", "false", K_BOOL, P_MAP},
    {"LIMIT_RESPONSE_HEADERS_ENABLED", "false", K_BOOL, P_MAP},
    {"LIMIT_LIMIT_HEADER", "RateLimit-Limit", K_STR, P_WARN},
    {"LIMIT_REMAINING_HEADER", "RateLimit-Remaining", K_STR, P_WARN},
    {"LIMIT_RESET_HEADER", "RateLimit-Reset", K_STR, P_WARN},
    {"HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED", "false", K_BOOL, P_WARN},
    {"REDIS_SOCKET_TYPE", "unix", K_STR, P_MAP},
    {"REDIS_TYPE", "SINGLE", K_STR, P_MAP},
    {"REDIS_URL", "/var/run/nutcracker/ratelimit.sock", K_STR, P_MAP},
    {"REDIS_POOL_SIZE", "10", K_INT, P_WARN},
    {"REDIS_AUTH", "", K_STR, P_MAP},
    {"REDIS_TLS", "false", K_BOOL, P_MAP},
    {"REDIS_TLS_CLIENT_CERT", "", K_STR, P_MAP},
    {"REDIS_TLS_CLIENT_KEY", "", K_STR, P_MAP},
    {"REDIS_TLS_CACERT", "", K_STR, P_MAP},
    {"REDIS_TLS_SKIP_HOSTNAME_VERIFICATION", "false", K_BOOL, P_WARN},
    {"REDIS_PIPELINE_WINDOW", "0", K_DUR, P_MAP},
    {"REDIS_PIPELINE_LIMIT", "0", K_INT, P_MAP},
    {"REDIS_CLUSTER_PIPELINE_PARALLELISM", "1", K_INT, P_WARN},
    {"REDIS_PERSECOND", "false", K_BOOL, P_WARN},
    {"REDIS_PERSECOND_SOCKET_TYPE", "unix", K_STR, P_GATED},
    {"REDIS_PERSECOND_TYPE", "SINGLE", K_STR, P_GATED},
    {"REDIS_PERSECOND_URL", "/var/run/nutcracker/ratelimitpersecond.sock",
     K_STR, P_GATED},
    {"REDIS_PERSECOND_POOL_SIZE", "10", K_INT, P_GATED},
    {"REDIS_PERSECOND_AUTH", "", K_STR, P_GATED},
    {"REDIS_PERSECOND_TLS", "false", K_BOOL, P_GATED},
    {"REDIS_SENTINEL_AUTH", "", K_STR, P_WARN},
    {"REDIS_PERSECOND_SENTINEL_AUTH", "", K_STR, P_GATED},
    {"REDIS_PERSECOND_PIPELINE_WINDOW", "0", K_DUR, P_GATED},
    {"REDIS_PERSECOND_PIPELINE_LIMIT", "0", K_INT, P_GATED},
    {"REDIS_PERSECOND_CLUSTER_PIPELINE_PARALLELISM", "1", K_INT, P_GATED},
    {"REDIS_HEALTH_CHECK_ACTIVE_CONNECTION", "false", K_BOOL, P_WARN},
    {"REDIS_TIMEOUT", "10s", K_DUR, P_MAP},
    {"REDIS_PERSECOND_TIMEOUT", "10s", K_DUR, P_GATED},
    {"REDIS_POOL_ON_EMPTY_BEHAVIOR", "WAIT", K_STR, P_MAP},
    {"REDIS_PERSECOND_POOL_ON_EMPTY_BEHAVIOR", "WAIT", K_STR, P_GATED},
    {"REDIS_STARTUP_INITIAL_INTERVAL", "1s", K_DUR, P_WARN},
    {"REDIS_STARTUP_MAX_INTERVAL", "30s", K_DUR, P_WARN},
    {"REDIS_STARTUP_MAX_ELAPSED_TIME", "0", K_DUR, P_WARN},
    {"MEMCACHE_HOST_PORT", "", K_STR, P_GATED},
    {"MEMCACHE_MAX_IDLE_CONNS", "2", K_INT, P_GATED},
    {"MEMCACHE_SRV", "", K_STR, P_GATED},
    {"MEMCACHE_SRV_REFRESH", "0", K_DUR, P_GATED},
    {"MEMCACHE_TLS", "false", K_BOOL, P_GATED},
    {"MEMCACHE_TLS_CLIENT_CERT", "", K_STR, P_GATED},
    {"MEMCACHE_TLS_CLIENT_KEY", "", K_STR, P_GATED},
    {"MEMCACHE_TLS_CACERT", "", K_STR, P_GATED},
    {"MEMCACHE_TLS_SKIP_HOSTNAME_VERIFICATION", "false", K_BOOL, P_GATED},
    {"SHADOW_MODE", "false", K_BOOL, P_MAP},
    {"QUOTA_MODE", "false", K_BOOL, P_MAP},
    {"RESPONSE_DYNAMIC_METADATA", "false", K_BOOL, P_MAP},
    {"MERGE_DOMAIN_CONFIG", "false", K_BOOL, P_WARN},
    {"TRACING_ENABLED", "false", K_BOOL, P_MAP},
    {"TRACING_SERVICE_NAME", "RateLimit", K_STR, P_GATED},
    {"TRACING_SERVICE_NAMESPACE", "", K_STR, P_GATED},
    {"TRACING_SERVICE_INSTANCE_ID", "", K_STR, P_GATED},
    {"TRACING_EXPORTER_PROTOCOL", "http", K_STR, P_GATED},
    {"TRACING_SAMPLING_RATE", "1", K_FLOAT, P_GATED},
};

#define NSETTINGS (sizeof(settings) / sizeof(settings[0]))

/* The translation under way: the environment and each setting's value. */
typedef struct {
    rls_envoy_env_t *e;
    const char *val[NSETTINGS]; /* as set, or NULL */
} tr_t;

static int fail(rls_envoy_env_t *e, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(e->err, sizeof(e->err), fmt, ap);
    va_end(ap);
    return RL_EINVAL;
}

/* The value of NAME in envp (the first, as getenv), or NULL. */
static const char *lookup(const char *const *envp, const char *name)
{
    size_t n = strlen(name), i;

    for (i = 0; envp != NULL && envp[i] != NULL; i++)
        if (strncmp(envp[i], name, n) == 0 && envp[i][n] == '=')
            return envp[i] + n + 1;
    return NULL;
}

static size_t index_of(const char *name)
{
    size_t i;

    for (i = 0; i < NSETTINGS; i++)
        if (strcmp(settings[i].name, name) == 0)
            return i;
    return NSETTINGS; /* a programmer's error: every name is in the table */
}

/* A setting's value as given, else its default ("" when it has none). */
static const char *get(const tr_t *t, const char *name)
{
    size_t i = index_of(name);

    if (i == NSETTINGS)
        return "";
    if (t->val[i] != NULL)
        return t->val[i];
    return settings[i].dflt != NULL ? settings[i].dflt : "";
}

static int is_set(const tr_t *t, const char *name)
{
    size_t i = index_of(name);

    return i < NSETTINGS && t->val[i] != NULL;
}

/* strconv.ParseBool. Returns 0 or 1, or -1 when it is not a bool. */
static int parse_bool(const char *s)
{
    static const char *const yes[] = {"1", "t", "T", "TRUE", "true", "True"};
    static const char *const no[] = {"0", "f", "F", "FALSE", "false", "False"};
    size_t i;

    for (i = 0; i < 6; i++) {
        if (strcmp(s, yes[i]) == 0)
            return 1;
        if (strcmp(s, no[i]) == 0)
            return 0;
    }
    return -1;
}

/* strconv.ParseInt(s, 10, 64): an optional sign and decimal digits. */
static int parse_int(const char *s, int64_t *out)
{
    const char *p = s;
    int neg = 0;
    uint64_t v = 0;

    if (*p == '+' || *p == '-')
        neg = *p++ == '-';
    if (*p == '\0')
        return RL_EINVAL;
    for (; *p != '\0'; p++) {
        if (*p < '0' || *p > '9' || v > (uint64_t)INT64_MAX / 10)
            return RL_EINVAL;
        v = v * 10 + (uint64_t)(*p - '0');
        if (v > (uint64_t)INT64_MAX)
            return RL_EINVAL;
    }
    *out = neg ? -(int64_t)v : (int64_t)v;
    return RL_OK;
}

/* time.ParseDuration, into nanoseconds (as a double: durations here are
 * far from its 2^53 precision where it matters). "0" alone needs no unit;
 * otherwise each number has one of ns, us, µs, ms, s, m, h. */
static int parse_dur(const char *s, double *ns)
{
    static const struct {
        const char *u;
        double ns;
    } units[] = {{"ns", 1},    {"us", 1e3},         {"\xc2\xb5s", 1e3},
                 {"\xce\xbcs", 1e3}, {"ms", 1e6}, {"s", 1e9},
                 {"m", 60e9},  {"h", 3600e9}};
    const char *p = s;
    double total = 0;
    int neg = 0;

    if (*p == '+' || *p == '-')
        neg = *p++ == '-';
    if (strcmp(p, "0") == 0) {
        *ns = 0;
        return RL_OK;
    }
    if (*p == '\0')
        return RL_EINVAL;
    while (*p != '\0') {
        double v = 0, scale = 1;
        int digits = 0;
        size_t k, best = 0, bestlen = 0;

        for (; *p >= '0' && *p <= '9'; p++, digits++)
            v = v * 10 + (*p - '0');
        if (*p == '.')
            for (p++; *p >= '0' && *p <= '9'; p++, digits++)
                v += (*p - '0') * (scale /= 10);
        if (digits == 0)
            return RL_EINVAL;
        for (k = 0; k < sizeof(units) / sizeof(units[0]); k++) {
            size_t n = strlen(units[k].u);
            if (n > bestlen && strncmp(p, units[k].u, n) == 0) {
                best = k;
                bestlen = n;
            }
        }
        if (bestlen == 0)
            return RL_EINVAL;
        p += bestlen;
        total += v * units[best].ns;
        if (total > 9.2e18)
            return RL_EINVAL;
    }
    *ns = neg ? -total : total;
    return RL_OK;
}

static int parse_float(const char *s, double *out)
{
    char *end;

    if (*s == '\0' || isspace((unsigned char)*s))
        return RL_EINVAL;
    *out = strtod(s, &end);
    return *end == '\0' ? RL_OK : RL_EINVAL;
}

/* A value read as its kind reads it, as a number (strings: 0). Returns 0
 * or RL_EINVAL. */
static int number(unsigned kind, const char *s, double *out)
{
    int64_t i;
    int b;

    *out = 0;
    switch (kind) {
    case K_BOOL:
        if ((b = parse_bool(s)) < 0)
            return RL_EINVAL;
        *out = b;
        return RL_OK;
    case K_INT:
        if (parse_int(s, &i) != RL_OK)
            return RL_EINVAL;
        *out = (double)i;
        return RL_OK;
    case K_DUR:
        return parse_dur(s, out);
    case K_FLOAT:
        return parse_float(s, out);
    default:
        return RL_OK;
    }
}

static const char *kind_help(unsigned kind)
{
    return kind == K_BOOL    ? "true or false"
           : kind == K_INT   ? "a whole number"
           : kind == K_DUR   ? "a duration such as 300ms, 10s or 1h"
           : kind == K_FLOAT ? "a number"
                             : "a value";
}

/* Whether setting i is set to something other than its default. */
static int non_default(const tr_t *t, size_t i)
{
    const setting_t *s = &settings[i];
    double a, b;

    if (t->val[i] == NULL)
        return 0;
    if (s->dflt == NULL)
        return 1;
    if (s->kind == K_STR)
        return strcmp(t->val[i], s->dflt) != 0;
    return number(s->kind, t->val[i], &a) != RL_OK ||
           number(s->kind, s->dflt, &b) != RL_OK || a != b;
}

/* Names a setting in the warning, once. */
static void warn(tr_t *t, const char *name)
{
    rls_envoy_env_t *e = t->e;
    size_t n = strlen(e->warn), k = strlen(name);
    const char *p = e->warn;

    while ((p = strstr(p, name)) != NULL) {
        if ((p == e->warn || p[-1] == ',') && (p[k] == ',' || p[k] == '\0'))
            return;
        p += k;
    }
    if (n + k + 2 >= sizeof(e->warn))
        return; /* the table has fewer names than fit */
    if (n > 0)
        e->warn[n++] = ',';
    memcpy(e->warn + n, name, k + 1);
}

/* Appends flag (and its value, when val is not NULL), from variable
 * `from`. Returns 0 or RL_ENOMEM. */
static int emit(tr_t *t, const char *flag, const char *val, const char *from)
{
    rls_envoy_env_t *e = t->e;
    size_t need = val != NULL ? 2 : 1;

    if (e->nargs + need > RLS_ENV_ARGS_MAX)
        return RL_ENOMEM; /* more than the code below ever emits */
    if ((e->args[e->nargs] = strdup(flag)) == NULL)
        return RL_ENOMEM;
    e->is_flag[e->nargs] = 1;
    e->from[e->nargs++] = from;
    if (val != NULL) {
        if ((e->args[e->nargs] = strdup(val)) == NULL)
            return RL_ENOMEM;
        e->from[e->nargs++] = from;
    }
    return RL_OK;
}

/* HOST and PORT as a listen address ("[v6]:port" for an IPv6 literal; an
 * empty host, as Go's ":9090", is every address). */
static int listen_arg(tr_t *t, const char *flag, const char *hostvar,
                      const char *host, const char *portvar)
{
    char buf[RLS_ENV_VALUE_MAX + 16];
    int64_t port;

    if (parse_int(get(t, portvar), &port) != RL_OK || port < 0 ||
        port > 65535)
        return fail(t->e, "%s: expected a port from 0 to 65535, got '%s'",
                    portvar, get(t, portvar));
    if (host[0] == '\0')
        host = "0.0.0.0";
    snprintf(buf, sizeof(buf), strchr(host, ':') ? "[%s]:%lld" : "%s:%lld",
             host, (long long)port);
    return emit(t, flag, buf, hostvar);
}

/* PROMETHEUS_ADDR, Go's "[HOST]:PORT" (":9090": every address). */
static int prom_addr(tr_t *t)
{
    const char *a = get(t, "PROMETHEUS_ADDR");
    char buf[RLS_ENV_VALUE_MAX + 16];

    if (a[0] == ':')
        snprintf(buf, sizeof(buf), "0.0.0.0%s", a);
    else
        snprintf(buf, sizeof(buf), "%s", a);
    return emit(t, "--metrics", buf, "PROMETHEUS_ADDR");
}

/* A duration setting in milliseconds (rounded up) within [min, max]. */
static int dur_ms(tr_t *t, const char *name, double min_ms, double max_ms,
                  char *out, size_t outlen)
{
    double ns, ms;

    if (parse_dur(get(t, name), &ns) != RL_OK)
        return fail(t->e, "%s: expected %s, got '%s'", name, kind_help(K_DUR),
                    get(t, name));
    ms = ceil(ns / 1e6);
    if (ms < min_ms || ms > max_ms)
        return fail(t->e, "%s: expected from %.0fms to %.0fms here, got '%s'",
                    name, min_ms, max_ms, get(t, name));
    snprintf(out, outlen, "%.0f", ms);
    return RL_OK;
}

static int flag_bool(const tr_t *t, const char *name)
{
    return parse_bool(get(t, name)) == 1;
}

/* Percent-encodes s (a user or password) into out for a redis:// URL. */
static void url_escape(const char *s, char *out, size_t outlen)
{
    static const char hex[] = "0123456789ABCDEF";
    size_t o = 0;

    for (; *s != '\0' && o + 4 < outlen; s++) {
        unsigned char c = (unsigned char)*s;
        if (isalnum(c) || c == '-' || c == '.' || c == '_' || c == '~') {
            out[o++] = (char)c;
        } else {
            out[o++] = '%';
            out[o++] = hex[c >> 4];
            out[o++] = hex[c & 15];
        }
    }
    out[o] = '\0';
}

/* REDIS_AUTH ("PASSWORD" or "USER:PASSWORD") as a URL's "USER:PASSWORD@"
 * part, escaped; "" without. */
static void userinfo(const tr_t *t, char *out, size_t outlen)
{
    const char *auth = get(t, "REDIS_AUTH"), *colon = strchr(auth, ':');
    char user[3 * RLS_ENV_VALUE_MAX + 1], pass[3 * RLS_ENV_VALUE_MAX + 1];
    char ubuf[RLS_ENV_VALUE_MAX + 1];

    out[0] = '\0';
    if (auth[0] == '\0')
        return;
    if (colon != NULL) {
        size_t n = (size_t)(colon - auth);
        memcpy(ubuf, auth, n);
        ubuf[n] = '\0';
        url_escape(ubuf, user, sizeof(user));
        url_escape(colon + 1, pass, sizeof(pass));
    } else {
        user[0] = '\0';
        url_escape(auth, pass, sizeof(pass));
    }
    snprintf(out, outlen, "%s:%s@", user, pass);
}

static void upper(const char *s, char *out, size_t outlen)
{
    size_t i;

    for (i = 0; s[i] != '\0' && i + 1 < outlen; i++)
        out[i] = (char)toupper((unsigned char)s[i]);
    out[i] = '\0';
}

/* The store: REDIS_* (BACKEND_TYPE redis) into --redis, --redis-cluster or
 * --redis-sentinel and --redis-tls-*. */
static int redis(tr_t *t)
{
    /* Big enough for any REDIS_AUTH escaped and REDIS_URL: never cut. */
    static char url[8 * RLS_ENV_VALUE_MAX + 64], ui[7 * RLS_ENV_VALUE_MAX];
    const char *u = get(t, "REDIS_URL"), *comma;
    char type[16], sock[16], behavior[16], ms[32];
    int tls = flag_bool(t, "REDIS_TLS"), rc;
    const char *scheme = tls ? "rediss://" : "redis://";
    double ns;

    upper(get(t, "REDIS_TYPE"), type, sizeof(type));
    upper(get(t, "REDIS_SOCKET_TYPE"), sock, sizeof(sock));
    upper(get(t, "REDIS_POOL_ON_EMPTY_BEHAVIOR"), behavior, sizeof(behavior));
    if (strcmp(type, "SINGLE") != 0 && strcmp(type, "SENTINEL") != 0 &&
        strcmp(type, "CLUSTER") != 0)
        return fail(t->e,
                    "REDIS_TYPE: expected SINGLE, SENTINEL or CLUSTER, got "
                    "'%s'",
                    get(t, "REDIS_TYPE"));
    if (strcmp(behavior, "CREATE") == 0 || strcmp(behavior, "ERROR") == 0)
        return fail(t->e,
                    "REDIS_POOL_ON_EMPTY_BEHAVIOR: %s is refused by "
                    "envoy-ratelimit too; remove it or set WAIT",
                    behavior);
    if (strcmp(sock, "TCP") != 0 && strcmp(sock, "TCP4") != 0 &&
        strcmp(sock, "TCP6") != 0 && strcmp(sock, "UNIX") != 0)
        return fail(t->e, "REDIS_SOCKET_TYPE: expected tcp or unix, got '%s'",
                    get(t, "REDIS_SOCKET_TYPE"));
    if (u[0] == '\0')
        return fail(t->e, "REDIS_URL: empty");
    userinfo(t, ui, sizeof(ui));
    if (strcmp(type, "SINGLE") == 0 && strcmp(sock, "UNIX") == 0) {
        if (u[0] != '/')
            return fail(t->e,
                        "REDIS_URL: REDIS_SOCKET_TYPE unix needs an "
                        "absolute socket path, got '%s'",
                        u);
        if (tls)
            return fail(t->e, "REDIS_TLS: Redis serves no TLS on a Unix "
                              "socket (REDIS_SOCKET_TYPE unix)");
        snprintf(url, sizeof(url), "unix://%s%s", ui, u);
        rc = emit(t, "--redis", url, "REDIS_URL");
    } else if (strcmp(sock, "UNIX") == 0) {
        return fail(t->e,
                    "REDIS_SOCKET_TYPE: unix only with REDIS_TYPE SINGLE, "
                    "got REDIS_TYPE '%s'",
                    get(t, "REDIS_TYPE"));
    } else if (strcmp(type, "SINGLE") == 0) {
        if (strncmp(u, "redis://", 8) == 0 || strncmp(u, "rediss://", 9) == 0) {
            if (ui[0] != '\0')
                return fail(t->e, "REDIS_AUTH: REDIS_URL is a URL: put the "
                                  "credentials in one of them");
            snprintf(url, sizeof(url), "%s", u);
        } else if (ui[0] != '\0' || tls) {
            snprintf(url, sizeof(url), "%s%s%s", scheme, ui, u);
        } else {
            snprintf(url, sizeof(url), "%s", u);
        }
        rc = emit(t, "--redis", url, "REDIS_URL");
    } else if (strcmp(type, "CLUSTER") == 0) {
        if (ui[0] != '\0' || tls)
            snprintf(url, sizeof(url), "%s%s%s", scheme, ui, u);
        else
            snprintf(url, sizeof(url), "%s", u);
        rc = emit(t, "--redis-cluster", url, "REDIS_URL");
    } else {
        /* SENTINEL: MASTER,SENTINEL[,SENTINEL...] */
        char master[RLS_ENV_VALUE_MAX + 1];
        size_t n;

        if ((comma = strchr(u, ',')) == NULL || comma[1] == '\0')
            return fail(t->e,
                        "REDIS_URL: REDIS_TYPE sentinel needs "
                        "MASTER,HOST:PORT[,HOST:PORT...], got '%s'",
                        u);
        n = (size_t)(comma - u);
        memcpy(master, u, n);
        master[n] = '\0';
        if (ui[0] != '\0' || tls)
            snprintf(url, sizeof(url), "%s%s%s", scheme, ui, comma + 1);
        else
            snprintf(url, sizeof(url), "%s", comma + 1);
        if ((rc = emit(t, "--redis-sentinel", url, "REDIS_URL")) != RL_OK)
            return rc;
        rc = emit(t, "--redis-sentinel-master", master, "REDIS_URL");
    }
    if (rc != RL_OK)
        return rc;
    if (tls) {
        const char *cert = get(t, "REDIS_TLS_CLIENT_CERT");
        const char *key = get(t, "REDIS_TLS_CLIENT_KEY");
        const char *ca = get(t, "REDIS_TLS_CACERT");

        if ((cert[0] == '\0') != (key[0] == '\0'))
            return fail(t->e, "REDIS_TLS_CLIENT_CERT: goes with "
                              "REDIS_TLS_CLIENT_KEY (give both or neither)");
        if (cert[0] != '\0' &&
            ((rc = emit(t, "--redis-tls-cert", cert,
                        "REDIS_TLS_CLIENT_CERT")) != RL_OK ||
             (rc = emit(t, "--redis-tls-key", key, "REDIS_TLS_CLIENT_KEY")) !=
                 RL_OK))
            return rc;
        if (ca[0] != '\0' &&
            (rc = emit(t, "--redis-tls-ca", ca, "REDIS_TLS_CACERT")) != RL_OK)
            return rc;
    }
    /* REDIS_TIMEOUT: 0 is none in envoy-ratelimit; here the longest. */
    if (parse_dur(get(t, "REDIS_TIMEOUT"), &ns) != RL_OK || ns < 0)
        return fail(t->e, "REDIS_TIMEOUT: expected %s, got '%s'",
                    kind_help(K_DUR), get(t, "REDIS_TIMEOUT"));
    if (ns == 0 || ns > 600e9) {
        warn(t, "REDIS_TIMEOUT");
        ns = 600e9;
    }
    snprintf(ms, sizeof(ms), "%.0f", ns < 1e6 ? 1.0 : ceil(ns / 1e6));
    if ((rc = emit(t, "--redis-timeout-ms", ms, "REDIS_TIMEOUT")) != RL_OK)
        return rc;
    /* REDIS_PIPELINE_WINDOW: writes held to go out together, as
     * --batch-hold-us holds a batch (at most 10 ms). */
    if (parse_dur(get(t, "REDIS_PIPELINE_WINDOW"), &ns) != RL_OK || ns < 0)
        return fail(t->e, "REDIS_PIPELINE_WINDOW: expected %s, got '%s'",
                    kind_help(K_DUR), get(t, "REDIS_PIPELINE_WINDOW"));
    if (ns > 0) {
        if (ns > 10e6) {
            warn(t, "REDIS_PIPELINE_WINDOW");
            ns = 10e6;
        }
        snprintf(ms, sizeof(ms), "%.0f", ceil(ns / 1e3));
        rc = emit(t, "--batch-hold-us", ms, "REDIS_PIPELINE_WINDOW");
    }
    return rc;
}

/* CONFIG_TYPE=GRPC_XDS_SOTW: the control plane and TLS to it. */
static int xds(tr_t *t)
{
    const char *u = get(t, "CONFIG_GRPC_XDS_SERVER_URL");
    char a[32], b[32];
    size_t i;
    int rc;

    /* gRPC's target syntax: dns:///HOST:PORT is HOST:PORT. */
    if (strncmp(u, "dns:///", 7) == 0)
        u += 7;
    else if (strncmp(u, "passthrough:///", 15) == 0)
        u += 15;
    if (strstr(u, "://") != NULL || strncmp(u, "unix:", 5) == 0)
        return fail(t->e, "CONFIG_GRPC_XDS_SERVER_URL: expected HOST:PORT, got "
                          "'%s'",
                    get(t, "CONFIG_GRPC_XDS_SERVER_URL"));
    if ((rc = emit(t, "--envoy-xds", u, "CONFIG_GRPC_XDS_SERVER_URL")) !=
            RL_OK ||
        (rc = emit(t, "--envoy-xds-node-id", get(t, "CONFIG_GRPC_XDS_NODE_ID"),
                   "CONFIG_GRPC_XDS_NODE_ID")) != RL_OK)
        return rc;
    if (dur_ms(t, "XDS_CLIENT_BACKOFF_INITIAL_INTERVAL", 1, 3600000, a,
               sizeof(a)) != RL_OK ||
        dur_ms(t, "XDS_CLIENT_BACKOFF_MAX_INTERVAL", 1, 3600000, b,
               sizeof(b)) != RL_OK)
        return RL_EINVAL;
    if ((rc = emit(t, "--envoy-xds-backoff-ms", a,
                   "XDS_CLIENT_BACKOFF_INITIAL_INTERVAL")) != RL_OK ||
        (rc = emit(t, "--envoy-xds-backoff-max-ms", b,
                   "XDS_CLIENT_BACKOFF_MAX_INTERVAL")) != RL_OK)
        return rc;
    for (i = 0; i < NSETTINGS; i++)
        if (settings[i].policy == P_XDS && non_default(t, i))
            warn(t, settings[i].name);
    if (flag_bool(t, "CONFIG_GRPC_XDS_SERVER_USE_TLS")) {
        const char *ca = get(t, "CONFIG_GRPC_XDS_SERVER_TLS_CACERT");
        const char *cert = get(t, "CONFIG_GRPC_XDS_CLIENT_TLS_CERT");
        const char *key = get(t, "CONFIG_GRPC_XDS_CLIENT_TLS_KEY");
        const char *san = get(t, "CONFIG_GRPC_XDS_SERVER_TLS_SAN");

        if (ca[0] == '\0')
            return fail(t->e, "CONFIG_GRPC_XDS_SERVER_USE_TLS: needs "
                              "CONFIG_GRPC_XDS_SERVER_TLS_CACERT (rl-server "
                              "trusts no system CAs for xDS)");
        if ((rc = emit(t, "--envoy-xds-tls-ca", ca,
                       "CONFIG_GRPC_XDS_SERVER_TLS_CACERT")) != RL_OK)
            return rc;
        if (cert[0] != '\0' &&
            (rc = emit(t, "--envoy-xds-tls-cert", cert,
                       "CONFIG_GRPC_XDS_CLIENT_TLS_CERT")) != RL_OK)
            return rc;
        if (key[0] != '\0' &&
            (rc = emit(t, "--envoy-xds-tls-key", key,
                       "CONFIG_GRPC_XDS_CLIENT_TLS_KEY")) != RL_OK)
            return rc;
        if (san[0] != '\0' &&
            (rc = emit(t, "--envoy-xds-tls-server-name", san,
                       "CONFIG_GRPC_XDS_SERVER_TLS_SAN")) != RL_OK)
            return rc;
    }
    return RL_OK;
}

/* Appends part to path with one '/' between (empty parts are skipped). */
static void join(char *path, size_t len, const char *part)
{
    size_t n = strlen(path);

    if (part[0] == '\0')
        return;
    if (n > 0 && path[n - 1] != '/' && part[0] != '/')
        snprintf(path + n, len - n, "/%s", part);
    else if (n > 0 && path[n - 1] == '/' && part[0] == '/')
        snprintf(path + n, len - n, "%s", part + 1);
    else
        snprintf(path + n, len - n, "%s", part);
}

/* CONFIG_TYPE=FILE: the directory envoy-ratelimit's runtime loader reads,
 * RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/RUNTIME_APPDIRECTORY. With
 * RUNTIME_WATCH_ROOT (its default) and no subdirectory, or no app
 * directory, it reads none (goruntime's nil loader): nor does this. */
static int files(tr_t *t)
{
    static char dir[3 * RLS_ENV_VALUE_MAX + 4];
    const char *sub = get(t, "RUNTIME_SUBDIRECTORY");
    const char *app = get(t, "RUNTIME_APPDIRECTORY");
    int rc;

    if ((flag_bool(t, "RUNTIME_WATCH_ROOT") && sub[0] == '\0') ||
        app[0] == '\0')
        return RL_OK;
    dir[0] = '\0';
    join(dir, sizeof(dir), get(t, "RUNTIME_ROOT"));
    join(dir, sizeof(dir), sub);
    join(dir, sizeof(dir), app);
    if ((rc = emit(t, "--envoy-config", dir, "RUNTIME_ROOT")) != RL_OK)
        return rc;
    if (flag_bool(t, "RUNTIME_IGNOREDOTFILES"))
        rc = emit(t, "--envoy-config-ignore-dotfiles", NULL,
                  "RUNTIME_IGNOREDOTFILES");
    return rc;
}

/* USE_STATSD, USE_DOG_STATSD, USE_PROMETHEUS, DISABLE_STATS: envoy-
 * ratelimit takes one sink (its runner refuses two, and USE_STATSD is true
 * unless said otherwise). */
static int stats(tr_t *t)
{
    int dis = flag_bool(t, "DISABLE_STATS");
    int dog = flag_bool(t, "USE_DOG_STATSD");
    int sd = flag_bool(t, "USE_STATSD"), prom = flag_bool(t, "USE_PROMETHEUS");
    char ms[32];
    size_t i;
    int rc;

    if (dis)
        return RL_OK;
    if ((dog && (sd || prom)) || (sd && prom))
        return fail(t->e, "%s: envoy-ratelimit takes one stats sink: set the "
                          "others false (USE_STATSD is true by default)",
                    dog ? "USE_DOG_STATSD" : "USE_PROMETHEUS");
    if (dog || sd) {
        if (dog)
            warn(t, "USE_DOG_STATSD"); /* plain statsd names, no tags */
        /* localhost (the default) needs no resolver: a name that does
         * not resolve stops the start, where envoy-ratelimit's sink only
         * logs that it cannot connect. */
        const char *host = get(t, "STATSD_HOST");

        if (strcmp(host, "localhost") == 0)
            host = "127.0.0.1";
        if ((rc = listen_arg(t, "--statsd", "STATSD_HOST", host,
                             "STATSD_PORT")) != RL_OK)
            return rc;
        if (dur_ms(t, "STATS_FLUSH_INTERVAL", 10, 3600000, ms, sizeof(ms)) !=
            RL_OK)
            return RL_EINVAL;
        return emit(t, "--statsd-flush-ms", ms, "STATS_FLUSH_INTERVAL");
    }
    if (prom) {
        for (i = 0; i < NSETTINGS; i++)
            if (settings[i].policy == P_PROM && non_default(t, i))
                warn(t, settings[i].name);
        return prom_addr(t);
    }
    return RL_OK;
}

/* TRACING_ENABLED: envoy-ratelimit's OpenTelemetry tracer, whose OTLP
 * exporter reads the SDK's own variables: OTEL_EXPORTER_OTLP_TRACES_ENDPOINT
 * as the whole URL, else OTEL_EXPORTER_OTLP_ENDPOINT with /v1/traces
 * appended, else https://localhost:4318 (http:// with
 * OTEL_EXPORTER_OTLP_INSECURE=true); OTEL_EXPORTER_OTLP_TIMEOUT in ms.
 * rl-server speaks OTLP/HTTP with protobuf over plain http only: grpc and
 * https endpoints are refused with the reason. */
static int tracing(tr_t *t, const char *const *envp)
{
    static char url[RLS_ENV_VALUE_MAX + 32];
    const char *proto = get(t, "TRACING_EXPORTER_PROTOCOL");
    const char *tr = lookup(envp, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT");
    const char *base = lookup(envp, "OTEL_EXPORTER_OTLP_ENDPOINT");
    const char *ins = lookup(envp, "OTEL_EXPORTER_OTLP_TRACES_INSECURE");
    const char *to = lookup(envp, "OTEL_EXPORTER_OTLP_TIMEOUT");
    const char *from, *v;
    int is_base = 1; /* the signal's path goes after it */
    char num[32];
    double rate = 1;
    int rc;

    if (!flag_bool(t, "TRACING_ENABLED"))
        return RL_OK;
    if (strcmp(proto, "grpc") == 0)
        return fail(t->e, "TRACING_EXPORTER_PROTOCOL: grpc is not supported "
                          "by rl-server, which exports OTLP over HTTP "
                          "(protobuf): set it to http, and the endpoint to "
                          "the collector's OTLP/HTTP port (4318)");
    if (strcmp(proto, "http") != 0 && proto[0] != '\0')
        return fail(t->e,
                    "TRACING_EXPORTER_PROTOCOL: expected http or grpc, "
                    "got '%s'",
                    proto);
    if (ins == NULL)
        ins = lookup(envp, "OTEL_EXPORTER_OTLP_INSECURE");
    if (tr != NULL && tr[0] != '\0') {
        from = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT";
        v = tr;
        is_base = 0;
    } else if (base != NULL && base[0] != '\0') {
        from = "OTEL_EXPORTER_OTLP_ENDPOINT";
        v = base;
    } else {
        from = "OTEL_EXPORTER_OTLP_ENDPOINT";
        v = "localhost:4318";
    }
    if (strlen(v) > RLS_ENV_VALUE_MAX)
        return fail(t->e, "%s: longer than %d bytes", from, RLS_ENV_VALUE_MAX);
    if (strncmp(v, "https://", 8) == 0 ||
        (strstr(v, "://") == NULL && !(ins != NULL && parse_bool(ins) == 1)))
        return fail(t->e,
                    "%s: OTLP over https (the default without "
                    "http:// or OTEL_EXPORTER_OTLP_INSECURE=true) is "
                    "not supported by rl-server: give an http:// "
                    "endpoint (a collector beside it)",
                    from);
    if (strncmp(v, "http://", 7) != 0 && strstr(v, "://") != NULL)
        return fail(t->e, "%s: expected http://HOST:PORT, got '%s'", from, v);
    snprintf(url, sizeof(url), "%s%s", strstr(v, "://") ? "" : "http://", v);
    if (is_base) {
        size_t n = strlen(url);
        if (n > 0 && url[n - 1] == '/')
            url[--n] = '\0';
        snprintf(url + n, sizeof(url) - n, "/v1/traces");
    }
    if ((rc = emit(t, "--trace-otlp", url, from)) != RL_OK ||
        (rc = emit(t, "--trace-service", get(t, "TRACING_SERVICE_NAME"),
                   "TRACING_SERVICE_NAME")) != RL_OK)
        return rc;
    if (get(t, "TRACING_SERVICE_NAMESPACE")[0] != '\0' &&
        (rc = emit(t, "--trace-service-namespace",
                   get(t, "TRACING_SERVICE_NAMESPACE"),
                   "TRACING_SERVICE_NAMESPACE")) != RL_OK)
        return rc;
    if (get(t, "TRACING_SERVICE_INSTANCE_ID")[0] != '\0' &&
        (rc = emit(t, "--trace-service-instance",
                   get(t, "TRACING_SERVICE_INSTANCE_ID"),
                   "TRACING_SERVICE_INSTANCE_ID")) != RL_OK)
        return rc;
    /* ParentBased(TraceIDRatioBased(rate)): 1 and above always, 0 and
     * below never. */
    (void)parse_float(get(t, "TRACING_SAMPLING_RATE"), &rate);
    rate = rate >= 1 ? 1 : rate > 0 ? rate : 0;
    snprintf(num, sizeof(num), "%.17g", rate);
    if ((rc = emit(t, "--trace-sample", num, "TRACING_SAMPLING_RATE")) != RL_OK)
        return rc;
    if (to != NULL && to[0] != '\0') {
        int64_t ms;
        if (parse_int(to, &ms) != RL_OK || ms < 1 || ms > 600000)
            return fail(t->e,
                        "OTEL_EXPORTER_OTLP_TIMEOUT: expected "
                        "milliseconds from 1 to 600000, got '%s'",
                        to);
        snprintf(num, sizeof(num), "%lld", (long long)ms);
        rc = emit(t, "--trace-timeout-ms", num, "OTEL_EXPORTER_OTLP_TIMEOUT");
    }
    return rc;
}

/* LOG_LEVEL: logrus's names, any case. */
static int log_level(tr_t *t)
{
    static const struct {
        const char *in, *out;
    } map[] = {{"TRACE", "debug"}, {"DEBUG", "debug"}, {"INFO", "info"},
               {"WARN", "warn"},   {"WARNING", "warn"}, {"ERROR", "error"},
               {"FATAL", "error"}, {"PANIC", "error"}};
    char lv[16];
    size_t i;

    upper(get(t, "LOG_LEVEL"), lv, sizeof(lv));
    for (i = 0; i < sizeof(map) / sizeof(map[0]); i++)
        if (strcmp(lv, map[i].in) == 0)
            return emit(t, "--log-level", map[i].out, "LOG_LEVEL");
    return fail(t->e,
                "LOG_LEVEL: expected trace, debug, info, warn, error, fatal "
                "or panic, got '%s'",
                get(t, "LOG_LEVEL"));
}

/* GRPC_SERVER_USE_TLS: TLS on the gRPC listener only (envoy-ratelimit's
 * HTTP and debug listeners stay plaintext: the probes speak HTTP). Envoy
 * Gateway names the client CA GRPC_SERVER_TLS_CA_CERT, which envoy-
 * ratelimit does not read (its name is GRPC_CLIENT_TLS_CACERT); both are
 * taken here, so the client certificates EG's Envoy shows are checked. */
static int grpc_tls(tr_t *t, const char *const *envp)
{
    const char *cert = get(t, "GRPC_SERVER_TLS_CERT");
    const char *key = get(t, "GRPC_SERVER_TLS_KEY");
    const char *ca = get(t, "GRPC_CLIENT_TLS_CACERT");
    const char *eg = lookup(envp, "GRPC_SERVER_TLS_CA_CERT");
    int rc;

    if (!flag_bool(t, "GRPC_SERVER_USE_TLS"))
        return RL_OK;
    if (cert[0] == '\0' || key[0] == '\0')
        return fail(t->e, "GRPC_SERVER_USE_TLS: needs GRPC_SERVER_TLS_CERT "
                          "and GRPC_SERVER_TLS_KEY");
    if (get(t, "GRPC_CLIENT_TLS_SAN")[0] != '\0')
        return fail(t->e, "GRPC_CLIENT_TLS_SAN: rl-server cannot require a "
                          "SAN of client certificates (it would accept any "
                          "of the CA's); unset it");
    if ((rc = emit(t, "--tls-cert", cert, "GRPC_SERVER_TLS_CERT")) != RL_OK ||
        (rc = emit(t, "--tls-key", key, "GRPC_SERVER_TLS_KEY")) != RL_OK ||
        (rc = emit(t, "--tls-listeners", "grpc", "GRPC_SERVER_USE_TLS")) !=
            RL_OK)
        return rc;
    if (ca[0] != '\0')
        return emit(t, "--tls-client-ca", ca, "GRPC_CLIENT_TLS_CACERT");
    if (eg != NULL && eg[0] != '\0')
        return emit(t, "--tls-client-ca", eg, "GRPC_SERVER_TLS_CA_CERT");
    return RL_OK;
}

/* The rest: the Envoy protocol's switches and the counters' keys. */
static int envoy(tr_t *t)
{
    static const struct {
        const char *var, *flag;
    } bools[] = {{"SHADOW_MODE", "--envoy-shadow-mode"},
                 {"QUOTA_MODE", "--envoy-quota-mode"},
                 {"RESPONSE_DYNAMIC_METADATA", "--envoy-response-metadata"},
                 {"LIMIT_RESPONSE_HEADERS_ENABLED",
                  "--envoy-response-headers"}};
    char buf[64];
    int64_t j = 0;
    size_t i;
    int rc;

    for (i = 0; i < sizeof(bools) / sizeof(bools[0]); i++)
        if (flag_bool(t, bools[i].var) &&
            (rc = emit(t, bools[i].flag, NULL, bools[i].var)) != RL_OK)
            return rc;
    if ((rc = emit(t, "--envoy-counting",
                   flag_bool(t, "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT")
                       ? "envoy-stop"
                       : "envoy",
                   "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT")) != RL_OK)
        return rc;
    if (is_set(t, "NEAR_LIMIT_RATIO") &&
        (rc = emit(t, "--envoy-near-limit-ratio", get(t, "NEAR_LIMIT_RATIO"),
                   "NEAR_LIMIT_RATIO")) != RL_OK)
        return rc;
    if (get(t, "CACHE_KEY_PREFIX")[0] != '\0' &&
        (rc = emit(t, "--prefix", get(t, "CACHE_KEY_PREFIX"),
                   "CACHE_KEY_PREFIX")) != RL_OK)
        return rc;
    /* EXPIRATION_JITTER_MAX_SECONDS: keys live up to this much longer, at
     * random (here also at most a quarter of their window, and an hour). */
    parse_int(get(t, "EXPIRATION_JITTER_MAX_SECONDS"), &j);
    if (j < 0)
        return fail(t->e, "EXPIRATION_JITTER_MAX_SECONDS: negative");
    if (j > 3600) {
        warn(t, "EXPIRATION_JITTER_MAX_SECONDS");
        j = 3600;
    }
    snprintf(buf, sizeof(buf), "%lld", (long long)j * 1000);
    return emit(t, "--expiry-spread-ms", buf, "EXPIRATION_JITTER_MAX_SECONDS");
}

int rls_envoy_env_present(const char *const *envp)
{
    size_t i;

    for (i = 0; i < NSETTINGS; i++)
        if (lookup(envp, settings[i].name) != NULL)
            return 1;
    return 0;
}

int rls_envoy_env_translate(rls_envoy_env_t *e, const char *const *envp)
{
    static tr_t t; /* NSETTINGS pointers: off the stack, one caller */
    char cfgtype[32], fmt[16];
    size_t i;
    double num;
    int rc;

    memset(e, 0, sizeof(*e));
    memset(&t, 0, sizeof(t));
    t.e = e;
    /* Every setting's value is checked first, as envconfig does before
     * envoy-ratelimit starts (also those it reads only in some modes). */
    for (i = 0; i < NSETTINGS; i++) {
        const char *v = lookup(envp, settings[i].name);

        if (v == NULL)
            continue;
        if (strlen(v) > RLS_ENV_VALUE_MAX)
            return fail(e, "%s: longer than %d bytes", settings[i].name,
                        RLS_ENV_VALUE_MAX);
        if (number(settings[i].kind, v, &num) != RL_OK)
            return fail(e, "%s: expected %s, got '%s'", settings[i].name,
                        kind_help(settings[i].kind), v);
        t.val[i] = v;
    }
    for (i = 0; i < NSETTINGS; i++)
        if (settings[i].policy == P_WARN && non_default(&t, i))
            warn(&t, settings[i].name);
    upper(get(&t, "LOG_FORMAT"), fmt, sizeof(fmt));
    if (strcmp(fmt, "JSON") == 0)
        warn(&t, "LOG_FORMAT");

    /* The native protocol is none of envoy-ratelimit's: its listener goes
     * to any free loopback port, where it collides with nothing. */
    if ((rc = emit(&t, "--listen", "127.0.0.1:0", "default")) != RL_OK ||
        (rc = listen_arg(&t, "--grpc", "GRPC_HOST", get(&t, "GRPC_HOST"),
                         "GRPC_PORT")) != RL_OK ||
        (rc = listen_arg(&t, "--envoy-http", "HOST", get(&t, "HOST"),
                         "PORT")) != RL_OK ||
        (rc = listen_arg(&t, "--debug-http", "DEBUG_HOST",
                         get(&t, "DEBUG_HOST"), "DEBUG_PORT")) != RL_OK ||
        (rc = log_level(&t)) != RL_OK || (rc = grpc_tls(&t, envp)) != RL_OK)
        return rc;

    snprintf(cfgtype, sizeof(cfgtype), "%s", get(&t, "CONFIG_TYPE"));
    if (strcmp(cfgtype, "FILE") == 0)
        rc = files(&t);
    else if (strcmp(cfgtype, "GRPC_XDS_SOTW") == 0)
        rc = xds(&t);
    else
        return fail(e, "CONFIG_TYPE: expected FILE or GRPC_XDS_SOTW, got '%s'",
                    get(&t, "CONFIG_TYPE"));
    if (rc != RL_OK)
        return rc;

    {
        const char *b = get(&t, "BACKEND_TYPE");

        if (strcmp(b, "redis") == 0 || b[0] == '\0')
            rc = redis(&t);
        else if (strcmp(b, "memcache") == 0)
            warn(&t, "BACKEND_TYPE"); /* counted in memory instead */
        else
            return fail(e, "BACKEND_TYPE: expected redis or memcache, got "
                           "'%s'",
                        b);
        if (rc != RL_OK)
            return rc;
    }
    if ((rc = stats(&t)) != RL_OK || (rc = tracing(&t, envp)) != RL_OK)
        return rc;
    return envoy(&t);
}

/* The flag name of an argument ("--name" of "--name=value"), into name;
 * "" when arg is not a flag. */
static void flag_name(const char *arg, char *name, size_t len)
{
    size_t n;

    name[0] = '\0';
    if (strncmp(arg, "--", 2) != 0)
        return;
    n = strcspn(arg, "=");
    if (n >= len)
        n = len - 1;
    memcpy(name, arg, n);
    name[n] = '\0';
}

/* Flags that stand for each other: the command line's one drops all of
 * the environment's. */
static const char *const groups[][4] = {
    {"--redis", "--redis-cluster", "--redis-sentinel",
     "--redis-sentinel-master"},
    {"--envoy-config", "--envoy-xds", "--envoy-config-ignore-dotfiles", NULL},
};

static int group_of(const char *name)
{
    size_t g, k;

    for (g = 0; g < sizeof(groups) / sizeof(groups[0]); g++)
        for (k = 0; k < 4 && groups[g][k] != NULL; k++)
            if (strcmp(name, groups[g][k]) == 0)
                return (int)g;
    return -1;
}

int rls_envoy_env_merge(const rls_envoy_env_t *e, int argc, char **argv,
                        int *outc, char ***out)
{
    char **v, name[64], cmd[64];
    size_t i, n = 0;
    int j;

    *out = NULL;
    *outc = 0;
    if ((v = calloc((size_t)argc + e->nargs + 2, sizeof(*v))) == NULL)
        return RL_ENOMEM;
    v[n++] = argc > 0 ? argv[0] : (char *)"rl-server";
    for (i = 0; i < e->nargs;) {
        size_t k = i + 1;
        int drop = 0, g;

        /* The flag and its value, if it has one. */
        while (k < e->nargs && !e->is_flag[k])
            k++;
        flag_name(e->args[i], name, sizeof(name));
        g = group_of(name);
        for (j = 1; j < argc && !drop; j++) {
            flag_name(argv[j], cmd, sizeof(cmd));
            drop = cmd[0] != '\0' &&
                   (strcmp(cmd, name) == 0 || (g >= 0 && group_of(cmd) == g));
        }
        for (; i < k; i++)
            if (!drop)
                v[n++] = e->args[i];
    }
    for (j = 1; j < argc; j++)
        v[n++] = argv[j];
    v[n] = NULL;
    *out = v;
    *outc = (int)n;
    return RL_OK;
}

const char *rls_envoy_env_source(const rls_envoy_env_t *e, const char *flag)
{
    size_t i;

    for (i = 0; i < e->nargs; i++)
        if (strcmp(e->args[i], flag) == 0)
            return e->from[i];
    return NULL;
}

void rls_envoy_env_free(rls_envoy_env_t *e)
{
    size_t i;

    if (e == NULL)
        return;
    for (i = 0; i < e->nargs; i++)
        free(e->args[i]);
    e->nargs = 0;
}
