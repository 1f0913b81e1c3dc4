#include "flags.h"

#include "admin/admin_api_parse.h"

#include <arpa/inet.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "policy/limit.h"
#include "trace/otlp_http.h"
#include "rl_error.h"
#include "rl_parse.h"
#include "rl_window.h"
#include "version.h"

void rls_flags_defaults(rls_flags_t *c)
{
    memset(c, 0, sizeof(*c));
    strcpy(c->listen_host, "127.0.0.1");
    c->listen_port = 7390;
    c->redis_timeout_ms = 200;
    c->grace_ms = 1000;
    c->reserve_ttl_ms = 300000;
    c->spread_ms = 10000;
    c->swl_max = RLS_SWL_MAX_DEFAULT;
    c->memory_max = (uint64_t)256 << 20;
    strcpy(c->prefix, "rl:");
    c->prefix_len = 3;
    c->max_frame = 65536;
    c->fail_open = 1;
    c->max_connections = 10000;
    c->threads = 1;
    c->max_inflight = 1024;
    c->max_output = 4u << 20;
    c->idle_timeout_s = 300;
    c->frame_timeout_ms = 10000;
    c->max_partial_bytes = 64u << 20;
    c->drain_ms = 0;
    c->unhealthy_error_ratio = 0.5;
    c->envoy_near_ratio = 0.8;
    c->envoy_counting = 1; /* RLS_ENVOY_COUNT_ENVOY */
    c->unhealthy_min_decisions = 20;
    strcpy(c->log_level, "info");
    c->max_rules = 1000;
    c->reload_settle_ms = 1000;
    c->envoy_xds_node_id = "default";
    c->envoy_xds_backoff_ms = 1000;
    c->envoy_xds_backoff_max_ms = 30000;
    c->refusal_cache = 16384;
    c->envoy_stats = 1;
    c->envoy_stats_max_values = 1000;
    c->statsd_flush_ms = 1000;
    c->batches_in_flight = 1;
    c->grpc_max_streams = 100;
    c->tls_handshake_timeout_ms = 5000;
    c->tls_max_handshakes = 256;
    c->tls_handshake_rate = 200;
    c->check_xff_hops = 1;
    c->trace_sample = 1.0;
    c->trace_service = "rl-server";
    c->trace_max_spans = 2048;
    c->trace_flush_ms = 5000;
    c->trace_timeout_ms = 10000;
    c->top_k = 32;
    c->top_window_s = 300;
}

static const char usage[] =
    "usage: rl-server [options]\n"
    "\n"
    "A rate-limit service with four algorithms (fixed window, sliding window\n"
    "log, sliding-window counter, GCRA). Clients send CheckRequest frames;\n"
    "counts live in Redis (--redis) or, without it, in process memory.\n"
    "\n";

static int fail(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    return RL_EINVAL;
}

/* The flags, one row each, in the order --help lists them: the usage text,
 * whether a flag takes a value and how it is parsed all come from here.
 * A row names its field (and a second one for some kinds); the kind says
 * what the value is and which of the row's bounds apply. */
typedef enum {
    F_TEXT,     /* no flag: lines of the usage text, as they are */
    F_HELP,     /* print the usage, and parse no further */
    F_VERSION,  /* print the version, the same */
    F_SET,      /* no value: the ints at off and off2 become min */
    F_NUM,      /* an integer in [min, max] into the 4- or 8-byte field */
    F_BYTES,    /* the same, with a k, m or g suffix */
    F_RATIO,    /* a double in [0, 1], or in (0, 1] when min is 1 */
    F_STR,      /* the value itself (argv's string); not empty if min is 1 */
    F_LISTEN,   /* HOST:PORT to listen on: the host's array at off, the
                   port (an int) at off2 */
    F_HOSTPORT, /* HOST:PORT to reach, the same */
    F_CHOICE,   /* one of text ("a|b|c"): the int at off becomes min plus
                   its index */
    F_CUSTOM,   /* parse(): lists, URLs, repeatable flags, cross checks */
} flag_kind_t;

typedef struct flag_s flag_t;

/* A custom row's parser: val into c. Returns 0 or RL_EINVAL with err. */
typedef int (*flag_parse_fn)(rls_flags_t *c, const flag_t *f, const char *val,
                             char *err, size_t errlen);

struct flag_s {
    const char *name; /* "--name"; NULL: F_TEXT */
    /* The value's name in the usage; NULL: the flag takes no value. */
    const char *arg;
    flag_kind_t kind;
    size_t off, off2; /* the fields, offsets into rls_flags_t */
    size_t size;      /* sizeof the field at off */
    uint64_t min, max;
    /* F_CHOICE: the choices; F_LISTEN, F_HOSTPORT: what the error says
     * was expected. */
    const char *text;
    flag_parse_fn parse; /* F_CUSTOM */
    /* The usage's lines after the flag and its value's name: the first
     * one beside them (from column 27, or 2 spaces after them when they
     * are longer; an empty first line, help starting with "\n", leaves
     * them on a line of their own), the others under it at column 27,
     * except those that begin with a space, printed as they are. NULL:
     * the row before says it. */
    const char *help;
};

/* Parses a byte count with an optional k, m or g suffix (KiB, MiB, GiB)
 * into [min, max]. Returns 0 or RL_EINVAL. */
static int parse_bytes(const char *s, uint64_t min, uint64_t max, uint64_t *out)
{
    char num[24];
    size_t len = strlen(s);
    unsigned shift = 0;
    uint64_t v;

    if (len > 0 && strchr("kKmMgG", s[len - 1]) != NULL) {
        char u = s[len - 1];
        shift = u == 'k' || u == 'K' ? 10 : u == 'm' || u == 'M' ? 20 : 30;
        len--;
    }
    if (len == 0 || len >= sizeof(num))
        return RL_EINVAL;
    memcpy(num, s, len);
    num[len] = '\0';
    if (rl_parse_u64(num, 0, max >> shift, &v) != RL_OK || (v << shift) < min)
        return RL_EINVAL;
    *out = v << shift;
    return RL_OK;
}

/* Percent-decodes s[0, n) into dst (at most RLS_HOST_MAX bytes and a NUL).
 * Returns 0 or RL_EINVAL. */
static int url_decode(const char *s, size_t n, char *dst)
{
    size_t i, o = 0;

    for (i = 0; i < n; i++) {
        int hi, lo;
        if (o == RLS_HOST_MAX)
            return RL_EINVAL;
        if (s[i] != '%') {
            dst[o++] = s[i];
            continue;
        }
        if (n - i < 3 || (hi = rl_hex_digit((unsigned char)s[i + 1])) < 0 ||
            (lo = rl_hex_digit((unsigned char)s[i + 2])) < 0 || (hi | lo) == 0)
            return RL_EINVAL;
        dst[o++] = (char)(hi * 16 + lo);
        i += 2;
    }
    dst[o] = '\0';
    return RL_OK;
}

/* A Redis URL's credentials before the '@': USER:PASSWORD, :PASSWORD, or
 * USER alone (the password from --redis-password-file), percent-encoded as
 * in any URL (a password may hold ':', '@' or '/'). Errors never repeat
 * what was given: it is a secret. */
static int parse_userinfo(rls_flags_t *c, const char *flag, const char *u,
                          size_t n, char *err, size_t errlen)
{
    const char *colon = memchr(u, ':', n);
    size_t ulen = colon != NULL ? (size_t)(colon - u) : n;

    c->redis_password[0] = '\0';
    if (url_decode(u, ulen, c->redis_user) != RL_OK ||
        (colon != NULL &&
         url_decode(colon + 1, n - ulen - 1, c->redis_password) != RL_OK))
        return fail(err, errlen,
                    "%s: the URL's user or password is over %d bytes or has "
                    "a bad %%-escape",
                    flag, RLS_HOST_MAX);
    return 0;
}

/* A password file (given to flag): the password is the file's first
 * line, into dst (RLS_HOST_MAX + 1 bytes). */
static int read_first_line(const char *flag, const char *path, char *dst,
                           char *err, size_t errlen)
{
    char line[RLS_HOST_MAX + 3];
    size_t n;
    FILE *f;

    if ((f = fopen(path, "r")) == NULL)
        return fail(err, errlen, "%s: cannot read '%s'", flag, path);
    if (fgets(line, sizeof(line), f) == NULL)
        line[0] = '\0';
    fclose(f);
    n = strcspn(line, "\r\n");
    if (n == 0 || n > RLS_HOST_MAX)
        return fail(err, errlen,
                    "%s: '%s' must hold the password "
                    "(1 to %d bytes) on its first line",
                    flag, path, RLS_HOST_MAX);
    memcpy(dst, line, n);
    dst[n] = '\0';
    return 0;
}

/* --redis-password-file: the password is the file's first line. */
static int read_password_file(rls_flags_t *c, char *err, size_t errlen)
{
    if (c->redis_password[0] != '\0')
        return fail(err, errlen,
                    "--redis-password-file: the Redis URL has a password "
                    "already");
    return read_first_line("--redis-password-file", c->redis_password_file,
                           c->redis_password, err, errlen);
}

/* A URL's HOST:PORT; with dflt, the port 6379 when not given, as Redis
 * clients' rediss:// URLs do (redis:// keeps wanting the port, as it
 * always did here). Returns RL_OK or RL_EADDR. */
static int url_hostport(const char *hp, char *host, size_t hostlen, int *port,
                        int dflt)
{
    const char *b = strrchr(hp, ']');
    char buf[RLS_HOST_MAX + 16];

    if (!dflt || strchr(b != NULL ? b : hp, ':') != NULL || hp[0] == '\0' ||
        strlen(hp) > RLS_HOST_MAX)
        return rl_parse_hostport(hp, host, hostlen, port);
    snprintf(buf, sizeof(buf), "%s:6379", hp);
    return rl_parse_hostport(buf, host, hostlen, port);
}

/* redis:// or rediss:// (TLS): the scheme's length, else 0. */
static size_t url_scheme(rls_flags_t *c, const char *s)
{
    if (strncmp(s, "redis://", 8) == 0)
        return 8;
    if (strncmp(s, "rediss://", 9) != 0)
        return 0;
    c->redis_tls = 1;
    return 9;
}

/* --redis unix://[[USER]:PASSWORD@]/PATH[?db=N]: the socket's path goes in
 * redis_host (a host that starts with '/' is a socket), port 0. */
static int parse_redis_unix(rls_flags_t *c, const char *s, char *err,
                            size_t errlen)
{
    const char *p = s + 7, *at = strchr(p, '@'), *q;
    uint64_t db;
    size_t n;

    if (at != NULL && at < strchr(p, '/')) {
        if (parse_userinfo(c, "--redis", p, (size_t)(at - p), err, errlen) != 0)
            return RL_EINVAL;
        p = at + 1;
    }
    q = strchr(p, '?');
    n = q != NULL ? (size_t)(q - p) : strlen(p);
    /* sun_path holds 108 bytes with its NUL. */
    if (p[0] != '/' || n < 2 || n > 107 || memchr(p, '@', n) != NULL)
        return fail(err, errlen,
                    "--redis: expected unix://[[USER]:PASSWORD@]"
                    "/PATH with an absolute path of at most "
                    "107 bytes");
    if (q != NULL) {
        if (strncmp(q, "?db=", 4) != 0 ||
            rl_parse_u64(q + 4, 0, 1 << 20, &db) != RL_OK)
            return fail(err, errlen,
                        "--redis: after the socket's path only "
                        "?db=N");
        c->redis_db = (int)db;
    }
    memcpy(c->redis_host, p, n);
    c->redis_host[n] = '\0';
    c->redis_port = 0;
    c->use_redis = 1;
    return 0;
}

/* --redis accepts HOST:PORT or redis://[[USER]:PASSWORD@]HOST:PORT[/DB]. */
static int parse_redis(rls_flags_t *c, const char *s, char *err, size_t errlen)
{
    char buf[2 * RLS_HOST_MAX + 32], *at, *slash, *hp;
    uint64_t db;
    size_t skip;

    if (strncmp(s, "unix://", 7) == 0)
        return parse_redis_unix(c, s, err, errlen);
    if ((skip = url_scheme(c, s)) == 0) {
        if (strchr(s, '@') != NULL) /* credentials: never repeated */
            return fail(err, errlen,
                        "--redis: credentials need a URL: "
                        "redis://USER:PASSWORD@HOST:PORT");
        if (rl_parse_hostport(s, c->redis_host, sizeof(c->redis_host),
                              &c->redis_port) != RL_OK)
            return fail(err, errlen,
                        "--redis: expected " RL_HOSTPORT_HELP
                        " or redis://[[USER]:PASSWORD@]HOST:PORT[/DB], "
                        "got '%s'",
                        s);
        c->use_redis = 1;
        return 0;
    }
    if (strlen(s + skip) >= sizeof(buf))
        return fail(err, errlen, "--redis: URL too long");
    strcpy(buf, s + skip);
    hp = buf;
    at = strrchr(buf, '@');
    if (at != NULL) {
        if (parse_userinfo(c, "--redis", buf, (size_t)(at - buf), err,
                           errlen) != 0)
            return RL_EINVAL;
        hp = at + 1;
    }
    slash = strchr(hp, '/');
    if (slash != NULL) {
        *slash = '\0';
        if (slash[1] != '\0') {
            if (rl_parse_u64(slash + 1, 0, 1 << 20, &db) != RL_OK)
                return fail(err, errlen, "--redis: bad database number '%s'",
                            slash + 1);
            c->redis_db = (int)db;
        }
    }
    if (url_hostport(hp, c->redis_host, sizeof(c->redis_host), &c->redis_port,
                     skip == 9) != RL_OK)
        return fail(err, errlen,
                    "--redis: bad HOST:PORT in '%s' (expected " RL_HOSTPORT_HELP
                    ")",
                    hp);
    c->use_redis = 1;
    return 0;
}

/* --redis-cluster and --redis-sentinel (flag):
 * [redis://[[USER]:PASSWORD@]]HOST:PORT[,HOST:PORT...], at most 16, into
 * redis_seed_host/port; their number in *count. */
static int parse_seeds(rls_flags_t *c, const char *flag, const char *s,
                       int *count, char *err, size_t errlen)
{
    char buf[2 * RLS_HOST_MAX + 1024], host[RLS_HOST_MAX + 1], *at, *hp, *tok;
    char *save = NULL;
    int port;
    size_t skip;

    if (strlen(s) >= sizeof(buf))
        return fail(err, errlen, "%s: value too long", flag);
    strcpy(buf, s);
    hp = buf;
    if ((skip = url_scheme(c, buf)) > 0) {
        hp = buf + skip;
        at = strrchr(hp, '@');
        if (at != NULL) {
            if (parse_userinfo(c, flag, hp, (size_t)(at - hp), err, errlen) !=
                0)
                return RL_EINVAL;
            hp = at + 1;
        }
    }
    *count = 0;
    for (tok = strtok_r(hp, ",", &save); tok != NULL;
         tok = strtok_r(NULL, ",", &save)) {
        if (*count == 16)
            return fail(err, errlen, "%s: at most 16 addresses", flag);
        if (rl_parse_hostport(tok, host, sizeof(host), &port) != RL_OK ||
            strlen(host) >= sizeof(c->redis_seed_host[0]))
            return fail(err, errlen,
                        "%s: bad address '%s' (expected " RL_HOSTPORT_HELP ")",
                        flag, tok);
        strcpy(c->redis_seed_host[*count], host);
        c->redis_seed_port[(*count)++] = port;
    }
    if (*count == 0)
        return fail(err, errlen, "%s: expected HOST:PORT[,HOST:PORT...]", flag);
    return 0;
}

/* --redis, --redis-cluster and --redis-sentinel: one of them. */
static int redis_exclusive(char *err, size_t errlen)
{
    return fail(err, errlen,
                "--redis, --redis-cluster and --redis-sentinel are "
                "exclusive: give one");
}

/* --redis-sentinel: as a cluster's seeds, but IP literals only: hiredis
 * would resolve a name with a blocking getaddrinfo on the loop. */
static int row_redis_sentinel(rls_flags_t *c, const flag_t *f, const char *val,
                              char *err, size_t errlen)
{
    unsigned char bin[16];
    int i;

    if (c->use_redis && c->redis_sentinels == 0)
        return redis_exclusive(err, errlen);
    if (parse_seeds(c, f->name, val, &c->redis_sentinels, err, errlen) != 0)
        return RL_EINVAL;
    for (i = 0; i < c->redis_sentinels; i++)
        if (inet_pton(AF_INET, c->redis_seed_host[i], bin) != 1 &&
            inet_pton(AF_INET6, c->redis_seed_host[i], bin) != 1)
            return fail(err, errlen,
                        "--redis-sentinel: '%s' is not an IP address "
                        "(sentinels are given by address)",
                        c->redis_seed_host[i]);
    c->use_redis = 1;
    return 0;
}

/* --redis-sentinel-master: a name as a sentinel's config takes it. */
static int row_sentinel_master(rls_flags_t *c, const flag_t *f, const char *val,
                               char *err, size_t errlen)
{
    size_t i, n = strlen(val);

    (void)f;
    for (i = 0; i < n; i++)
        if ((unsigned char)val[i] <= ' ' || (unsigned char)val[i] >= 127)
            break;
    if (n == 0 || n > 128 || i < n)
        return fail(err, errlen,
                    "--redis-sentinel-master: expected a name (1 to 128 "
                    "printable bytes, no spaces)");
    memcpy(c->redis_sentinel_master, val, n + 1);
    return 0;
}

/* --tls-listeners grpc[,http...]: the listeners named, each one that can
 * speak TLS in this build. Returns 0 or RL_EINVAL with err. */
static int row_tls_listeners(rls_flags_t *c, const flag_t *f, const char *val,
                             char *err, size_t errlen)
{
    static const struct {
        const char *name;
        unsigned bit;
    } names[] = {{"grpc", RLS_TLS_ON_GRPC},
                 {"http", RLS_TLS_ON_HTTP},
                 {"metrics", RLS_TLS_ON_METRICS},
                 {"listen", RLS_TLS_ON_LISTEN}};
    const char *p = val;
    size_t k, n;

    (void)f;
    c->tls_listeners = 0;
    while (*p != '\0') {
        n = strcspn(p, ",");
        for (k = 0; k < sizeof(names) / sizeof(names[0]); k++)
            if (n == strlen(names[k].name) && strncmp(p, names[k].name, n) == 0)
                break;
        if (k == sizeof(names) / sizeof(names[0]))
            return fail(err, errlen,
                        "--tls-listeners: '%.*s' is not a listener (grpc, "
                        "http, metrics, listen)",
                        (int)n, p);
        c->tls_listeners |= names[k].bit;
        p += n;
        if (*p == ',')
            p++;
    }
    if (c->tls_listeners == 0)
        return fail(err, errlen, "--tls-listeners: empty");
    return 0;
}

static void *field(rls_flags_t *c, size_t off)
{
    return (char *)c + off;
}

static int row_redis(rls_flags_t *c, const flag_t *f, const char *val,
                     char *err, size_t errlen)
{
    (void)f;
    if (c->redis_cluster > 0 || c->redis_sentinels > 0)
        return redis_exclusive(err, errlen);
    return parse_redis(c, val, err, errlen) != 0 ? RL_EINVAL : 0;
}

static int row_redis_cluster(rls_flags_t *c, const flag_t *f, const char *val,
                             char *err, size_t errlen)
{
    if (c->use_redis && c->redis_cluster == 0)
        return redis_exclusive(err, errlen);
    if (parse_seeds(c, f->name, val, &c->redis_cluster, err, errlen) != 0)
        return RL_EINVAL;
    c->use_redis = 1;
    return 0;
}

static int row_sentinel_user(rls_flags_t *c, const flag_t *f, const char *val,
                             char *err, size_t errlen)
{
    if (val[0] == '\0' || strlen(val) > RLS_HOST_MAX)
        return fail(err, errlen, "%s: 1 to %d bytes", f->name, RLS_HOST_MAX);
    strcpy(c->redis_sentinel_user, val);
    return 0;
}

/* --redis-tls-*: the files are read, and checked, when the store is
 * made; any of them turns TLS on. */
static int row_redis_tls_file(rls_flags_t *c, const flag_t *f, const char *val,
                              char *err, size_t errlen)
{
    if (val[0] == '\0')
        return fail(err, errlen, "%s: empty", f->name);
    *(const char **)field(c, f->off) = val;
    c->redis_tls = 1;
    return 0;
}

static int row_prefix(rls_flags_t *c, const flag_t *f, const char *val,
                      char *err, size_t errlen)
{
    /* Braces in the prefix would move the Redis Cluster hash tag off the
     * caller's key. */
    if (strlen(val) > RLS_PREFIX_MAX || strpbrk(val, "{}") != NULL)
        return fail(err, errlen, "%s: at most %d bytes, no braces", f->name,
                    RLS_PREFIX_MAX);
    strcpy(c->prefix, val);
    c->prefix_len = strlen(val);
    return 0;
}

/* --rule: repeatable; validated when the policy is built. */
static int row_rule(rls_flags_t *c, const flag_t *f, const char *val, char *err,
                    size_t errlen)
{
    if (c->nrules == RLS_RULES_MAX)
        return fail(err, errlen, "%s: at most %d; use --config", f->name,
                    RLS_RULES_MAX);
    c->rules[c->nrules++] = val;
    return 0;
}

/* --envoy-config: repeatable. */
static int row_envoy_config(rls_flags_t *c, const flag_t *f, const char *val,
                            char *err, size_t errlen)
{
    if (c->nenvoy_configs == RLS_ENVOY_CONFIGS_MAX)
        return fail(err, errlen, "%s: at most %d files", f->name,
                    RLS_ENVOY_CONFIGS_MAX);
    c->envoy_configs[c->nenvoy_configs++] = val;
    return 0;
}

/* --check-key-header, --check-rule-header: a header field name, a token
 * as rls_check_opts_init takes it. */
static int row_header(rls_flags_t *c, const flag_t *f, const char *val,
                      char *err, size_t errlen)
{
    size_t n = strspn(val, "abcdefghijklmnopqrstuvwxyz"
                           "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
                           "!#$%&'*+-.^_`|~");

    if (val[0] == '\0' || val[n] != '\0' || n > 64)
        return fail(err, errlen,
                    "%s: expected a header name (up to 64 bytes of letters, "
                    "digits and -), got '%s'",
                    f->name, val);
    *(const char **)field(c, f->off) = val;
    return 0;
}

/* Which of choices ("a|b|c") val is: its index, or -1. */
static int choice_index(const char *choices, const char *val)
{
    size_t n = strlen(val);
    const char *p = choices;
    int k;

    for (k = 0;; k++) {
        size_t len = strcspn(p, "|");
        if (len == n && strncmp(p, val, n) == 0)
            return k;
        if (p[len] == '\0')
            return -1;
        p += len + 1;
    }
}

/* "--name: expected a, b or c, got 'val'". */
static int choice_fail(const char *name, const char *choices, const char *val,
                       char *err, size_t errlen)
{
    char list[128];
    size_t o = 0;
    const char *p = choices;

    while (*p != '\0' && o + 8 < sizeof(list)) {
        size_t len = strcspn(p, "|");
        const char *sep = p[len] == '\0'                     ? ""
                          : strchr(p + len + 1, '|') == NULL ? " or "
                                                             : ", ";
        o += (size_t)snprintf(list + o, sizeof(list) - o, "%.*s%s", (int)len, p,
                              sep);
        p += p[len] == '\0' ? len : len + 1;
    }
    return fail(err, errlen, "%s: expected %s, got '%s'", name, list, val);
}

static int row_log_level(rls_flags_t *c, const flag_t *f, const char *val,
                         char *err, size_t errlen)
{
    static const char levels[] = "debug|info|warn|error";

    if (choice_index(levels, val) < 0)
        return choice_fail(f->name, levels, val, err, errlen);
    strcpy(c->log_level, val);
    return 0;
}

/* --trace-otlp: an http:// URL the exporter takes (trace/otlp_http.h). */
static int row_trace_otlp(rls_flags_t *c, const flag_t *f, const char *val,
                          char *err, size_t errlen)
{
    char host[RLS_OTLP_HOST_MAX + 1], port[8], path[RLS_OTLP_PATH_MAX + 1];
    char why[160];

    if (rls_otlp_url_parse(val, host, sizeof(host), port, sizeof(port), path,
                           sizeof(path), why, sizeof(why)) != RL_OK)
        return fail(err, errlen, "%s: %s", f->name, why);
    *(const char **)field(c, f->off) = val;
    return 0;
}

#define AT(fld) offsetof(rls_flags_t, fld)
#define SIZE(fld) sizeof(((rls_flags_t *)0)->fld)
/* The field's offset; it does not compile unless the field is a T. */
#define AT_T(fld, T) _Generic(((rls_flags_t *)0)->fld, T : AT(fld))

#define TEXT(help_)                                                            \
    {                                                                          \
        .kind = F_TEXT, .help = help_                                          \
    }
#define INFO(name_, kind_, help_)                                              \
    {                                                                          \
        .name = name_, .kind = kind_, .help = help_                            \
    }
#define SET2(name_, fld, fld2, v, help_)                                       \
    {                                                                          \
        .name = name_, .kind = F_SET, .off = AT_T(fld, int),                   \
        .off2 = AT_T(fld2, int), .min = v, .help = help_                       \
    }
#define SET(name_, fld, v, help_) SET2(name_, fld, fld, v, help_)
#define NUM_K(kind_, name_, arg_, fld, lo, hi, help_)                          \
    {                                                                          \
        .name = name_, .arg = arg_, .kind = kind_, .off = AT(fld),             \
        .size = SIZE(fld), .min = lo, .max = hi, .help = help_                 \
    }
#define NUM(...) NUM_K(F_NUM, __VA_ARGS__)
#define BYTES(...) NUM_K(F_BYTES, __VA_ARGS__)
#define RATIO(name_, arg_, fld, above0, help_)                                 \
    {                                                                          \
        .name = name_, .arg = arg_, .kind = F_RATIO, .off = AT_T(fld, double), \
        .min = above0, .max = 1, .help = help_                                 \
    }
#define STR(name_, arg_, fld, nonempty, help_)                                 \
    {                                                                          \
        .name = name_, .arg = arg_, .kind = F_STR,                             \
        .off = AT_T(fld, const char *), .min = nonempty, .help = help_         \
    }
#define ADDR(kind_, name_, arg_, host, port, expect, help_)                    \
    {                                                                          \
        .name = name_, .arg = arg_, .kind = kind_, .off = AT_T(host, char *),  \
        .size = SIZE(host), .off2 = AT_T(port, int), .text = expect,           \
        .help = help_                                                          \
    }
#define LISTEN(name_, arg_, host, port, help_)                                 \
    ADDR(F_LISTEN, name_, arg_, host, port, RL_HOSTPORT_HELP, help_)
#define HOSTPORT(...) ADDR(F_HOSTPORT, __VA_ARGS__)
#define CHOICE(name_, arg_, fld, choices, first, help_)                        \
    {                                                                          \
        .name = name_, .arg = arg_, .kind = F_CHOICE, .off = AT_T(fld, int),   \
        .min = first, .text = choices, .help = help_                           \
    }
/* A custom row that stores a string (fn writes it at off). */
#define CUSTOM_AT(name_, arg_, fn, fld, help_)                                 \
    {                                                                          \
        .name = name_, .arg = arg_, .kind = F_CUSTOM,                          \
        .off = AT_T(fld, const char *), .parse = fn, .help = help_             \
    }
#define CUSTOM(name_, arg_, fn, help_)                                         \
    {                                                                          \
        .name = name_, .arg = arg_, .kind = F_CUSTOM, .parse = fn,             \
        .help = help_                                                          \
    }

static const flag_t flags[] = {
    LISTEN("--listen", "HOST:PORT", listen_host, listen_port,
           "accept clients here (default 127.0.0.1:7390;\n"
           "port 0 on this and every listener: any\n"
           "free port, see --port-file)"),
    CUSTOM("--redis", "HOST:PORT", row_redis,
           "count in this Redis; also\n"
           "          redis://[[USER]:PASSWORD@]HOST:PORT[/DB] (%-escapes in "
           "USER\n"
           "and PASSWORD; or the URL in $RL_REDIS_URL),\n"
           "          unix://[[USER]:PASSWORD@]/PATH[?db=N] (a Unix socket)\n"
           "(default: none, the embedded memory store)"),
    CUSTOM("--redis-cluster", "HOST:PORT[,HOST:PORT...]", row_redis_cluster,
           "count in this Redis\n"
           "Cluster (seed nodes; also\n"
           "redis://[[USER]:PASSWORD@] before the list);\n"
           "not with --redis"),
    STR("--redis-password-file", "FILE", redis_password_file, 0,
        "the Redis password: FILE's first line\n"
        "(kept out of ps and of the URL)"),
    CUSTOM("--redis-sentinel", "IP:PORT[,IP:PORT...]", row_redis_sentinel,
           "count in the master these\n"
           "Redis Sentinels name (asked in this order;\n"
           "redis://[[USER]:PASSWORD@] before the list\n"
           "gives the data nodes' credentials); not\n"
           "with --redis or --redis-cluster"),
    CUSTOM("--redis-sentinel-master", "NAME", row_sentinel_master,
           "the master's name in the sentinels\n"
           "(required with --redis-sentinel)"),
    CUSTOM("--redis-sentinel-user", "NAME", row_sentinel_user,
           "the sentinels' own AUTH user"),
    STR("--redis-sentinel-password-file", "FILE", redis_sentinel_password_file,
        0,
        "the sentinels' own password:\n"
        "FILE's first line"),
    NUM("--redis-sentinel-agree", "N", redis_sentinel_agree, 1, 16,
        " take a master's address (and send it the\n"
        "data nodes' password) once N sentinels\n"
        "name it (default: a majority of them)"),
    TEXT("TLS to Redis: rediss://[[USER]:PASSWORD@]HOST[:PORT][/DB] on\n"
         "--redis (port 6379 when not given) or before the seeds\n"
         "of --redis-cluster, or any of these flags (every node then TLS):"),
    CUSTOM_AT("--redis-tls-ca", "FILE", row_redis_tls_file, redis_tls_ca,
              "trust these CAs (PEM; default: the system's)"),
    CUSTOM_AT("--redis-tls-cert", "FILE", row_redis_tls_file, redis_tls_cert,
              "client certificate (PEM), with its key:"),
    CUSTOM_AT("--redis-tls-key", "FILE", row_redis_tls_file, redis_tls_key,
              "... (PEM, no passphrase)"),
    CUSTOM_AT("--redis-tls-server-name", "NAME", row_redis_tls_file,
              redis_tls_server_name,
              "SNI and the name the certificate must\n"
              "match (default: the host as given; an IP\n"
              "is matched against the IP addresses)"),
    SET2("--redis-tls-insecure", redis_tls, redis_tls_insecure, 1,
         "do not check the server's certificate at\n"
         "all (testing only)"),
    CUSTOM("--prefix", "STR", row_prefix,
           "Redis key prefix, no braces (default rl:)"),
    STR("--config", "FILE", config_path, 0,
        "rules file (YAML; see the README's Rules);\n"
        "reloaded on SIGHUP and when it changes"),
    STR("--check-config", "FILE", check_config, 0,
        "validate a rules file (with any --rule)\n"
        "and exit: 0, or 2 with FILE:LINE: errors"),
    NUM("--reload-settle-ms", "MS", reload_settle_ms, 0, 60000,
        "a changed rules or Envoy file is reloaded\n"
        "once unchanged this long (default 1000;\n"
        "write files aside and rename them over)"),
    CUSTOM("--rule", "NAME=LIMIT[,LIMIT...]", row_rule,
           "a named rule, e.g. api=33/1m,2000/1h;\n"
           "LIMIT is N/DUR (DUR: 60, 60s, 1m, 1h, 1d)\n"
           "then :ALGORITHM, :per-caller, :burst=B, e.g.\n"
           "10/1s:gcra:burst=20 (README, Algorithms);\n"
           "repeatable; merged with --config"),
    NUM("--max-rules", "N", max_rules, 1, 1000000,
        "rules at most (default 1000)"),
    CHOICE("--inline-limits", "MODE", inline_deny, "allow|deny", 0,
           "allow (default) or deny requests that carry\n"
           "their own limit instead of naming a rule"),
    NUM("--max-inline-window", "SECS", max_inline_window, 0, RL_WINDOW_MAX_S,
        "refuse inline windows longer (default 0:\n"
        "366 days)"),
    NUM("--max-inline-limit", "N", max_inline_limit, 0, INT64_MAX,
        "refuse inline limits higher (default 0: no\n"
        "cap)"),
    NUM("--refusal-cache", "N", refusal_cache, 0, 1u << 24,
        "remember up to N (rule, caller)s the store\n"
        "showed full, and refuse what cannot fit\n"
        "there without a store call (default 16384;\n"
        "0: off)"),
    NUM("--batches-in-flight", "N", batches_in_flight, 0, 1024,
        "send a new batch only while fewer than N\n"
        "are with the store; requests arriving\n"
        "meanwhile join the next (default 1; 0: no\n"
        "bound)"),
    NUM("--batch-hold-us", "N", batch_hold_us, 0, 10000,
        "under load, hold a batch that is not full\n"
        "until it is N us old (at most 10000) when\n"
        "the arrival rate says at least 4 more\n"
        "requests will join it meanwhile: fewer,\n"
        "bigger store calls for up to N us more\n"
        "latency; never at low load (default 0: off)"),
    SET("--fail-open", fail_open, 1,
        "allow requests when the store cannot answer,\n"
        "saying so in `error` (default)"),
    SET("--fail-closed", fail_open, 0,
        "answer ERROR when the store cannot answer"),
    SET("--fail-local", fail_open, 2,
        "decide in this instance's memory while Redis\n"
        "cannot answer, on its share of every limit\n"
        "(the limit over the live instances it last\n"
        "saw), then add what it admitted to Redis's\n"
        "counters once Redis answers again"),
    CHOICE("--redis-module", "MODE", redis_module_off, "auto|off", 0,
           "auto (default): decide batches with the\n"
           "ratelimit Redis module (RL.BATCH) where\n"
           "Redis has it loaded, else with the Lua\n"
           "script; off: always the script"),
    NUM("--redis-timeout-ms", "N", redis_timeout_ms, 1, 600000,
        "a Redis batch unanswered this long fails\n"
        "(default 200)"),
    NUM("--reserve-ttl-ms", "N", reserve_ttl_ms, 1000, 86400000,
        "a reservation may be settled for this long\n"
        "(default 300000); unsettled, it keeps its\n"
        "estimate"),
    STR("--handle-secret-file", "F", handle_secret_file, 1,
        "the secret that signs reservation and lease\n"
        "handles, the same file on every instance of\n"
        "a Redis fleet (default: each instance draws\n"
        "its own; only it accepts its handles)"),
    NUM("--expiry-grace-ms", "N", grace_ms, 0, 3600000,
        "keys expire this long after their window\n"
        "ends (default 1000)"),
    NUM("--expiry-spread-ms", "N", spread_ms, 0, 3600000,
        "Redis store: each key lives up to this much\n"
        "longer, at random (at most a quarter of its\n"
        "window), so that a window's keys do not all\n"
        "expire at once and stall Redis (default\n"
        "10000; 0: none)"),
    NUM("--sliding-window-max", "N", swl_max, 1, RL_SWL_LIMIT_MAX,
        "the largest limit a sliding-window (the\n"
        "exact log) may have; each admission is an\n"
        "entry of the caller's log, 24 bytes in\n"
        "Redis (default 10000: up to 240 KB per\n"
        "caller and limit)"),
    BYTES("--memory-max", "BYTES", memory_max, 65536, (uint64_t)1 << 40,
          "memory store: cap on its counters' memory;\n"
          "new counters past it are refused (by the\n"
          "fail mode), existing ones keep counting;\n"
          "k, m or g suffix for KiB, MiB, GiB\n"
          "(default 256m)"),
    NUM("--max-frame", "BYTES", max_frame, 64, 16u << 20,
        "largest request frame accepted; a bigger one\n"
        "closes its connection (default 65536)"),
    NUM("--threads", "N", threads, 0, 64,
        "event loops in this process, each on a\n"
        "thread and core of its own, sharing the\n"
        "listeners and one policy (default 1; 0: one\n"
        "per core this process may run on)"),
    SET("--reuseport", reuseport, 1,
        "bind every listener with SO_REUSEPORT, so\n"
        "that several rl-server processes share its\n"
        "port (the Redis stores are exact across\n"
        "them; the memory store is not)"),
    NUM("--max-connections", "N", max_connections, 1, 1000000,
        "refuse clients beyond this, per loop of\n"
        "--threads (default 10000)"),
    NUM("--max-inflight", "N", max_inflight, 1, 1u << 20,
        "stop reading a connection with this many\n"
        "requests unanswered (default 1024)"),
    NUM("--max-output", "BYTES", max_output, 4096, (uint64_t)1 << 32,
        "close a connection whose unsent responses\n"
        "pass this (default 4194304)"),
    NUM("--idle-timeout", "SECS", idle_timeout_s, 0, 604800,
        "close a connection that sends no whole\n"
        "request this long while nothing of it is\n"
        "in flight (default 300; 0: never)"),
    NUM("--frame-timeout-ms", "N", frame_timeout_ms, 0, 3600000,
        "close a connection whose frame is not whole\n"
        "this long after its first byte (default\n"
        "10000; 0: never)"),
    NUM("--max-partial-bytes", "N", max_partial_bytes, 0, (uint64_t)1 << 40,
        "memory all connections may hold in input\n"
        "buffers (partial frames); past it the\n"
        "largest holders are closed; per loop of\n"
        "--threads (default 67108864; 0: no cap)"),
    LISTEN("--metrics", "HOST:PORT", metrics_host, metrics_port,
           "serve /metrics and /healthz over HTTP\n"
           "(default: off)"),
    LISTEN("--grpc", "HOST:PORT", grpc_host, grpc_port,
           "serve Envoy's rate limit service (gRPC,\n"
           "HTTP/2 cleartext) here (default: off)"),
    CUSTOM("--envoy-config", "FILE", row_envoy_config,
           "envoy-ratelimit descriptor file, one domain\n"
           "each (see deploy/README.md, Envoy);\n"
           "repeatable; reloaded on SIGHUP and when\n"
           "one changes; or a DIR: its *.yaml and\n"
           "*.yml files (a mounted ConfigMap), read\n"
           "again when one is added, removed or\n"
           "changed"),
    HOSTPORT("--envoy-xds", "HOST:PORT", envoy_xds_host, envoy_xds_port,
             "HOST:PORT",
             "take the descriptors from a control plane\n"
             "over xDS (Envoy Gateway; envoy-ratelimit's\n"
             "CONFIG_TYPE=GRPC_XDS_SOTW) instead of\n"
             "--envoy-config files; needs --grpc"),
    STR("--envoy-xds-node-id", "ID", envoy_xds_node_id, 1,
        "the xDS node id (default: default)"),
    STR("--envoy-xds-tls-ca", "FILE", envoy_xds_tls_ca, 0,
        "speak TLS to the control plane, verified\n"
        "with this CA; --envoy-xds-tls-cert FILE and\n"
        "--envoy-xds-tls-key FILE: our certificate\n"
        "(mutual TLS); --envoy-xds-tls-server-name\n"
        "NAME: the name it must hold (default: host)"),
    STR("--envoy-xds-tls-cert", "FILE", envoy_xds_tls_cert, 0, NULL),
    STR("--envoy-xds-tls-key", "FILE", envoy_xds_tls_key, 0, NULL),
    STR("--envoy-xds-tls-server-name", "NAME", envoy_xds_tls_server_name, 0,
        NULL),
    NUM("--envoy-xds-backoff-ms", "MS, --envoy-xds-backoff-max-ms MS",
        envoy_xds_backoff_ms, 1, 3600000,
        "\n"
        "reconnection wait: first and cap (default\n"
        "1000 and 30000), jittered"),
    NUM("--envoy-xds-backoff-max-ms", "MS", envoy_xds_backoff_max_ms, 1,
        3600000, NULL),
    SET("--envoy-config-ignore-dotfiles", envoy_config_ignore_dot, 1,
        "in an --envoy-config directory, pass\n"
        "over files whose name starts with '.'\n"
        "(envoy-ratelimit's RUNTIME_IGNOREDOTFILES)"),
    SET("--envoy-env", envoy_env, 1,
        "read envoy-ratelimit's settings from the\n"
        "environment (HOST, PORT, GRPC_PORT,\n"
        "REDIS_URL, CONFIG_TYPE, RUNTIME_ROOT...;\n"
        "deploy/README.md), with its defaults; the\n"
        "command line's flags win. Also when called\n"
        "`ratelimit`, or with no arguments while one\n"
        "of them is set"),
    SET2("--envoy-env-print", envoy_env, envoy_env_print, 1,
         "print the flags the environment gives, and\n"
         "exit"),
    STR("--rlqs-config", "FILE", rlqs_config, 0,
        "serve Envoy's rate limit quota service\n"
        "(RLQS, the rate_limit_quota filter) on\n"
        "--grpc, its buckets from FILE (docs/rlqs.md;\n"
        "read at start)"),
    STR("--check-envoy-config", "FILE", check_envoy_config, 0,
        "validate an Envoy descriptor file and\n"
        "exit: 0, or 2 with FILE:LINE: errors"),
    NUM("--envoy-stats", "0|1", envoy_stats, 0, 1,
        "count envoy-ratelimit's per-descriptor\n"
        "statistics (total_hits, over_limit...) on\n"
        "/metrics (default 1)"),
    NUM("--envoy-stats-max-values", "N", envoy_stats_max_values, 0, 1u << 20,
        "series named after request values at\n"
        "most; the rest counted as dropped (default\n"
        "1000)"),
    HOSTPORT("--statsd", "HOST:PORT", statsd_host, statsd_port,
             RL_HOSTPORT_HELP,
             "also send them to statsd/DogStatsD over UDP\n"
             "under the reference's names (default: off)"),
    NUM("--statsd-flush-ms", "N", statsd_flush_ms, 10, 3600000,
        "how often (default 1000)"),
    CHOICE("--envoy-counting", "MODE", envoy_counting,
           "envoy|envoy-stop|native", 1,
           "how Envoy domains count whose file does\n"
           "not say (counting:): envoy (default; a\n"
           "charge counts even past the limit, then\n"
           "compares), envoy-stop (envoy-ratelimit's\n"
           "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT) or\n"
           "native (a refusal consumes nothing)"),
    RATIO("--envoy-near-limit-ratio", "R", envoy_near_ratio, 1,
          "envoy-ratelimit's NEAR_LIMIT_RATIO: the\n"
          "near_limit statistic counts the hits past\n"
          "floor(limit * R) (default 0.8)"),
    SET("--envoy-shadow-mode", envoy_shadow_mode, 1,
        "envoy-ratelimit's SHADOW_MODE: a call over\n"
        "a limit is answered OK overall (its\n"
        "descriptors still say OVER_LIMIT)"),
    SET("--envoy-quota-mode", envoy_quota_mode, 1,
        "envoy-ratelimit's QUOTA_MODE: every\n"
        "descriptor in quota mode (a call is\n"
        "refused only when all are over)"),
    SET("--envoy-response-headers", envoy_response_headers, 1,
        "envoy-ratelimit's LIMIT_RESPONSE_HEADERS_\n"
        "ENABLED: RateLimit-Limit, -Remaining, -Reset\n"
        "for domains whose file does not say\n"
        "rate_limit_headers"),
    SET("--envoy-response-metadata", envoy_response_metadata, 1,
        "envoy-ratelimit's RESPONSE_DYNAMIC_METADATA:\n"
        "the call and the allowed descriptors'\n"
        "metadata in dynamic_metadata"),
    NUM("--grpc-max-streams", "N", grpc_max_streams, 1, 65536,
        "concurrent streams per gRPC connection\n"
        "(SETTINGS; default 100)"),
    LISTEN("--envoy-http", "HOST:PORT", envoy_http_host, envoy_http_port,
           "envoy-ratelimit's HTTP listener (its HOST:\n"
           "PORT): GET /healthcheck, POST /json (needs\n"
           "--grpc; default: off)"),
    LISTEN("--debug-http", "HOST:PORT", debug_http_host, debug_http_port,
           "envoy-ratelimit's debug listener (DEBUG_PORT):\n"
           "GET /rlconfig (needs --grpc; default: off)"),
    LISTEN("--admin", "HOST:PORT", admin_host, admin_port,
           "the admin listener: one caller's usage and\n"
           "its reset, the configuration in force (see\n"
           "docs/server.md; default: off, and no default\n"
           "port: instances sharing a host would collide\n"
           "on it); a non-loopback address needs\n"
           "--admin-token-file"),
    STR("--admin-token-file", "FILE", admin_token_file, 1,
        "--admin's write tokens, a line each (TOKEN,\n"
        "or NAME TOKEN): a POST needs Authorization:\n"
        "Bearer TOKEN (default: none, no writes)"),
    NUM("--top-k", "N", top_k, 0, 1024,
        "top offenders: the N callers refused most\n"
        "per rule, from a sketch of N entries (a\n"
        "count is within refusals/N of the truth;\n"
        "GET /v1/top on --admin, rl-ctl top; default\n"
        "32; 0: off)"),
    NUM("--top-window-s", "S", top_window_s, 10, 86400,
        "their window: epochs of S seconds, the\n"
        "current and the one before (default 300: the\n"
        "last 5 to 10 minutes)"),
    NUM("--top-metric", "N", top_metric, 0, 100,
        "also export each rule's N top callers as\n"
        "rl_top_refused{rule,key} (at most 100 rules;\n"
        "default 0: no caller in a label)"),
    LISTEN("--http", "HOST:PORT", http_host, http_port,
           "serve GET /check?rule=R&key=K over HTTP, for\n"
           "proxies' auth subrequests (default: off)"),
    CUSTOM_AT("--check-key-header", "NAME", row_header, check_key_header,
              "/check: the key from this request header when\n"
              "the query has no key= (X-Forwarded-For: see\n"
              "--check-xff-hops) (default: none)"),
    NUM("--check-xff-hops", "N", check_xff_hops, 0, 16,
        "/check, key from X-Forwarded-For: the address\n"
        "the Nth trusted proxy appended, counting\n"
        "from the right (1, the default: the last,\n"
        "written by the proxy in front of rl-server;\n"
        "0: the leftmost, which the client wrote)"),
    SET("--check-error-details", check_error_details, 1,
        "/check: a 400 names its reason in the body\n"
        "(the missing key, the unknown rule); by\n"
        "default the body is plain and the reason\n"
        "goes to the log and the metrics"),
    CUSTOM_AT("--check-rule-header", "NAME", row_header, check_rule_header,
              "/check: the rule from this request header\n"
              "when the query has no rule= (default: none)"),
    STR("--tls-cert", "FILE", tls_cert, 1,
        "serve TLS (1.2 and up) with this certificate\n"
        "chain (PEM) on the --tls-listeners;\n"
        "reloaded on SIGHUP and when it changes"),
    STR("--tls-key", "FILE", tls_key, 1,
        "... and its key (PEM, no passphrase)"),
    STR("--tls-client-ca", "FILE", tls_client_ca, 1,
        "mutual TLS: clients must show a certificate\n"
        "of these CAs (PEM) (default: none asked)"),
    SET("--tls-client-ca-recheck", tls_client_ca_recheck, 1,
        "after a reload of the TLS files, an open\n"
        "connection whose client certificate the new\n"
        "CAs do not verify is closed at its next\n"
        "read (default: kept until it closes)"),
    CUSTOM("--tls-listeners", "LIST", row_tls_listeners,
           "which listeners speak TLS: grpc, http,\n"
           "metrics, listen, comma-separated (default:\n"
           "grpc and http when open; listen, the\n"
           "native protocol, only when named: librlc\n"
           "speaks no TLS yet)"),
    NUM("--tls-handshake-timeout-ms", "N", tls_handshake_timeout_ms, 0, 3600000,
        "close a gRPC or native TLS\n"
        "connection whose handshake is not done\n"
        "this long after it was accepted (default\n"
        "5000; 0: never; the\n"
        "HTTP listeners' header deadline, 2 s,\n"
        "covers their handshakes)"),
    NUM("--tls-max-handshakes", "N", tls_max_handshakes, 0, 1000000,
        "per TLS listener, handshakes in progress at\n"
        "once; a new connection past it is closed at\n"
        "accept, counted (default 256; 0: no cap)"),
    NUM("--tls-handshake-rate", "N", tls_handshake_rate, 0, 1000000,
        "per TLS listener, handshakes begun per\n"
        "second (a burst of N at once); past it the\n"
        "same (default 200; 0: no cap)"),
    NUM("--drain-ms", "N", drain_ms, 0, 3600000,
        "on SIGTERM, report unhealthy and keep serving\n"
        "this long before closing (default 0)"),
    RATIO("--unhealthy-error-ratio", "R", unhealthy_error_ratio, 0,
          "\n"
          "/healthz answers 503 while more than this\n"
          "share (0-1) of the last 10 s of decisions\n"
          "failed in the store (default 0.5; 1: never)"),
    NUM("--unhealthy-min-decisions", "N", unhealthy_min_decisions, 1, 1u << 30,
        "\n"
        "... once there were at least this many\n"
        "(default 20)"),
    STR("--port-file", "FILE", port_file, 0,
        "once every listener is open, write one\n"
        "line per listener to FILE, e.g. \"listen\n"
        "127.0.0.1:7390\" (with the port bound, for\n"
        "listeners given port 0: the system picks a\n"
        "free one); the file appears whole"),
    CUSTOM("--log-level", "LEVEL", row_log_level,
           "debug, info, warn or error (default info)"),
    CUSTOM_AT("--trace-otlp", "URL", row_trace_otlp, trace_otlp,
              "export a span per decision over OTLP/HTTP\n"
              "(protobuf) to http://HOST[:PORT][/PATH]\n"
              "(port 4318, path /v1/traces by default;\n"
              "default: no tracing)"),
    RATIO("--trace-sample", "R", trace_sample, 0,
          "the share of requests without a sampled\n"
          "traceparent that are traced (default 1; a\n"
          "traceparent's own flag decides the rest)"),
    STR("--trace-service", "NAME", trace_service, 1,
        "the spans' service.name (default rl-server)"),
    STR("--trace-service-namespace", "NAME", trace_service_ns, 0,
        "their service.namespace (default: none)"),
    STR("--trace-service-instance", "ID", trace_instance, 0,
        "their service.instance.id (default: a\n"
        "random UUID per process)"),
    NUM("--trace-max-spans", "N", trace_max_spans, 1, 1u << 20,
        "spans held per loop, in progress or\n"
        "waiting for export; more are dropped and\n"
        "counted (default 2048)"),
    NUM("--trace-flush-ms", "MS", trace_flush_ms, 1, 3600000,
        "export what waits this often (default\n"
        "5000; also as soon as 512 wait)"),
    NUM("--trace-timeout-ms", "MS", trace_timeout_ms, 1, 600000,
        "one export's deadline (default 10000)"),
    INFO("--version", F_VERSION, "print the version and exit"),
    INFO("--help", F_HELP, "print this and exit"),
};

#define NFLAGS (sizeof(flags) / sizeof(flags[0]))

#define HELP_COL 27 /* the usage's column where the help text starts */

/* The usage: the head, then each row's lines. */
static void print_usage(FILE *out)
{
    size_t k;

    fputs(usage, out);
    for (k = 0; k < NFLAGS; k++) {
        const flag_t *f = &flags[k];
        const char *p = f->help, *nl;
        int col, first = 1;

        if (p == NULL)
            continue;
        col = f->kind == F_TEXT
                  ? 0
                  : fprintf(out, "  %s%s%s", f->name, f->arg != NULL ? " " : "",
                            f->arg != NULL ? f->arg : "");
        for (;; first = 0) {
            int len = (int)((nl = strchr(p, '\n')) != NULL ? (size_t)(nl - p)
                                                           : strlen(p));
            if (f->kind == F_TEXT)
                fputs("  ", out);
            else if (first && len > 0)
                fprintf(out, "%*s", col < HELP_COL ? HELP_COL - col : 2, "");
            else if (!first && p[0] != ' ')
                fprintf(out, "%*s", HELP_COL, "");
            fprintf(out, "%.*s\n", len, p);
            if (nl == NULL)
                break;
            p = nl + 1;
        }
    }
}

static const flag_t *find(const char *name)
{
    size_t k;

    for (k = 0; k < NFLAGS; k++)
        if (flags[k].name != NULL && strcmp(flags[k].name, name) == 0)
            return &flags[k];
    return NULL;
}

/* The row's value (NULL when it takes none) into c. Returns 0 or
 * RL_EINVAL with err. */
static int apply(rls_flags_t *c, const flag_t *f, const char *val, char *err,
                 size_t errlen)
{
    void *dst = field(c, f->off);
    uint64_t v;
    double r;
    char *end;
    int k;

    switch (f->kind) {
    case F_SET:
        *(int *)dst = (int)f->min;
        *(int *)field(c, f->off2) = (int)f->min;
        return 0;
    case F_NUM:
        if (rl_parse_u64(val, f->min, f->max, &v) != RL_OK)
            return fail(err, errlen,
                        "%s: expected a number from %llu to %llu, got '%s'",
                        f->name, (unsigned long long)f->min,
                        (unsigned long long)f->max, val);
        break;
    case F_BYTES:
        if (parse_bytes(val, f->min, f->max, &v) != RL_OK)
            return fail(err, errlen,
                        "%s: expected bytes from %llu to %llu, or with a k, "
                        "m or g suffix, got '%s'",
                        f->name, (unsigned long long)f->min,
                        (unsigned long long)f->max, val);
        break;
    case F_RATIO:
        r = strtod(val, &end);
        if (end == val || *end != '\0' ||
            !(f->min ? r > 0 && r <= 1 : r >= 0 && r <= 1))
            return fail(err, errlen,
                        f->min ? "%s: expected a number above 0, up to 1, "
                                 "got '%s'"
                               : "%s: expected a number from 0 to 1, got '%s'",
                        f->name, val);
        *(double *)dst = r;
        return 0;
    case F_STR:
        if (f->min && val[0] == '\0')
            return fail(err, errlen, "%s: empty", f->name);
        *(const char **)dst = val;
        return 0;
    case F_LISTEN:
    case F_HOSTPORT:
        if ((f->kind == F_LISTEN ? rl_parse_listen : rl_parse_hostport)(
                val, dst, f->size, (int *)field(c, f->off2)) != RL_OK)
            return fail(err, errlen, "%s: expected %s, got '%s'", f->name,
                        f->text, val);
        return 0;
    case F_CHOICE:
        if ((k = choice_index(f->text, val)) < 0)
            return choice_fail(f->name, f->text, val, err, errlen);
        *(int *)dst = (int)f->min + k;
        return 0;
    case F_CUSTOM:
        return f->parse(c, f, val, err, errlen);
    default: /* F_TEXT, F_HELP, F_VERSION: not values */
        return 0;
    }
    /* F_NUM, F_BYTES: v into the field, of 4 or 8 bytes. */
    if (f->size == 4) {
        uint32_t v32 = (uint32_t)v;
        memcpy(dst, &v32, 4);
    } else {
        memcpy(dst, &v, 8);
    }
    return 0;
}

int rls_flags_info(size_t i, rls_flag_info_t *info)
{
    size_t k;

    for (k = 0; k < NFLAGS; k++) {
        const flag_t *f = &flags[k];
        if (f->name == NULL || i-- > 0)
            continue;
        memset(info, 0, sizeof(*info));
        info->name = f->name;
        info->takes_value = f->arg != NULL;
        info->off = f->off;
        info->size = f->size;
        info->min = f->min;
        info->max = f->max;
        info->choices = f->kind == F_CHOICE ? f->text : NULL;
        info->help = f->help;
        info->kind = f->kind == F_NUM      ? RLS_FLAG_NUM
                     : f->kind == F_BYTES  ? RLS_FLAG_BYTES
                     : f->kind == F_RATIO  ? RLS_FLAG_RATIO
                     : f->kind == F_CHOICE ? RLS_FLAG_CHOICE
                     : f->kind == F_SET    ? RLS_FLAG_SET
                                           : RLS_FLAG_OTHER;
        return 1;
    }
    return 0;
}

int rls_flags_parse(rls_flags_t *c, int argc, char **argv, void *out, char *err,
                    size_t errlen)
{
    const char *env;
    int i;

    for (i = 1; i < argc; i++) {
        const char *arg = argv[i], *val = NULL, *eq;
        const flag_t *f;
        char name[64];

        if (strncmp(arg, "--", 2) != 0)
            return fail(err, errlen, "unexpected argument '%s' (see --help)",
                        arg);
        /* --name=value or --name value */
        eq = strchr(arg, '=');
        if (eq != NULL) {
            if ((size_t)(eq - arg) >= sizeof(name))
                return fail(err, errlen, "unknown option '%s'", arg);
            memcpy(name, arg, (size_t)(eq - arg));
            name[eq - arg] = '\0';
            val = eq + 1;
        } else {
            if (strlen(arg) >= sizeof(name))
                return fail(err, errlen, "unknown option '%s'", arg);
            strcpy(name, arg);
        }

        if ((f = find(name)) == NULL)
            return fail(err, errlen, "unknown option '%s' (see --help)", name);
        if (f->kind == F_HELP || f->kind == F_VERSION) {
            if (f->kind == F_HELP)
                print_usage(out);
            else
                fprintf(out, "rl-server %s\n", RLS_VERSION);
            c->info_only = 1;
            return 0;
        }
        if (f->arg == NULL && val != NULL)
            return fail(err, errlen, "%s takes no value", name);
        if (f->arg != NULL && val == NULL) {
            if (i + 1 >= argc)
                return fail(err, errlen, "%s needs a value", name);
            val = argv[++i];
        }
        if (apply(c, f, val, err, errlen) != 0)
            return RL_EINVAL;
    }
    /* The URL from the environment keeps its password out of ps. */
    if (!c->use_redis && (env = getenv("RL_REDIS_URL")) != NULL &&
        env[0] != '\0' && parse_redis(c, env, err, errlen) != 0)
        return RL_EINVAL;
    if (c->redis_password_file != NULL &&
        read_password_file(c, err, errlen) != 0)
        return RL_EINVAL;
    if (c->redis_sentinels > 0 && c->redis_sentinel_master[0] == '\0')
        return fail(err, errlen,
                    "--redis-sentinel needs "
                    "--redis-sentinel-master NAME");
    if (c->redis_sentinels == 0 && (c->redis_sentinel_master[0] != '\0' ||
                                    c->redis_sentinel_user[0] != '\0' ||
                                    c->redis_sentinel_password_file != NULL ||
                                    c->redis_sentinel_agree > 0))
        return fail(err, errlen,
                    "--redis-sentinel-master, -user, -password-file and "
                    "-agree need --redis-sentinel");
    if (c->redis_sentinel_agree > c->redis_sentinels)
        return fail(err, errlen,
                    "--redis-sentinel-agree: more sentinels than "
                    "--redis-sentinel gives");
    if (c->redis_sentinel_password_file != NULL &&
        read_first_line("--redis-sentinel-password-file",
                        c->redis_sentinel_password_file,
                        c->redis_sentinel_password, err, errlen) != 0)
        return RL_EINVAL;
    if (c->statsd_host[0] != '\0' &&
        (c->grpc_host[0] == '\0' || c->envoy_stats == 0))
        return fail(err, errlen,
                    "--statsd needs --grpc (and --envoy-stats 1): it sends "
                    "the Envoy descriptors' statistics");
    if ((c->tls_cert == NULL) != (c->tls_key == NULL))
        return fail(err, errlen, "--tls-cert and --tls-key go together");
    if (c->tls_cert == NULL &&
        (c->tls_client_ca != NULL || c->tls_listeners != 0))
        return fail(err, errlen,
                    "--tls-client-ca and --tls-listeners need --tls-cert "
                    "and --tls-key");
    if (c->tls_client_ca_recheck && c->tls_client_ca == NULL)
        return fail(err, errlen,
                    "--tls-client-ca-recheck needs --tls-client-ca");
    if (c->tls_cert != NULL) {
        /* The listeners open that serve decisions, unless named: the
         * metrics listener is scraped and probed by the cluster's own
         * agents, plaintext unless asked for; the native one is spoken
         * by librlc, which has no TLS yet. */
        unsigned open = (c->grpc_host[0] != '\0' ? RLS_TLS_ON_GRPC : 0) |
                        (c->http_host[0] != '\0' ? RLS_TLS_ON_HTTP : 0) |
                        (c->metrics_host[0] != '\0' ? RLS_TLS_ON_METRICS : 0) |
                        RLS_TLS_ON_LISTEN;
        if (c->tls_listeners == 0)
            c->tls_listeners = open & (RLS_TLS_ON_GRPC | RLS_TLS_ON_HTTP);
        if (c->tls_listeners == 0)
            return fail(err, errlen,
                        "--tls-cert: no listener to speak TLS on (give "
                        "--grpc or --http, or --tls-listeners listen or "
                        "metrics)");
        if ((c->tls_listeners & ~open) != 0)
            return fail(err, errlen,
                        "--tls-listeners: names a listener that is not "
                        "open (%s)",
                        (c->tls_listeners & ~open & RLS_TLS_ON_GRPC)
                            ? "no --grpc"
                        : (c->tls_listeners & ~open & RLS_TLS_ON_HTTP)
                            ? "no --http"
                            : "no --metrics");
    }
    if (c->admin_token_file != NULL && c->admin_host[0] == '\0')
        return fail(err, errlen, "--admin-token-file needs --admin");
    if (c->admin_host[0] != '\0' && c->admin_token_file == NULL &&
        !rls_admin_loopback(c->admin_host))
        return fail(err, errlen,
                    "--admin %s is not a loopback address: give "
                    "--admin-token-file (every request from the network "
                    "then needs a token), or bind it to 127.0.0.1",
                    c->admin_host);
    if (c->envoy_xds_host[0] != '\0' && c->nenvoy_configs > 0)
        return fail(err, errlen,
                    "--envoy-xds and --envoy-config: give one source of "
                    "Envoy descriptors");
    if (c->envoy_xds_host[0] != '\0' && c->grpc_host[0] == '\0')
        return fail(err, errlen, "--envoy-xds needs --grpc");
    if (c->rlqs_config != NULL && c->grpc_host[0] == '\0')
        return fail(err, errlen, "--rlqs-config needs --grpc");
    if ((c->envoy_http_host[0] != '\0' || c->debug_http_host[0] != '\0') &&
        c->grpc_host[0] == '\0')
        return fail(err, errlen,
                    "%s needs --grpc: it serves Envoy's rate limit service "
                    "and its descriptors",
                    c->envoy_http_host[0] != '\0' ? "--envoy-http"
                                                  : "--debug-http");
    if ((c->envoy_xds_tls_cert == NULL) != (c->envoy_xds_tls_key == NULL))
        return fail(err, errlen,
                    "--envoy-xds-tls-cert and --envoy-xds-tls-key go "
                    "together");
    if (c->envoy_xds_tls_ca == NULL &&
        (c->envoy_xds_tls_cert != NULL || c->envoy_xds_tls_server_name != NULL))
        return fail(err, errlen,
                    "--envoy-xds-tls-cert, -key and -server-name need "
                    "--envoy-xds-tls-ca (the CA of the control plane)");
    if (c->envoy_xds_tls_ca != NULL && c->envoy_xds_host[0] == '\0')
        return fail(err, errlen, "--envoy-xds-tls-ca needs --envoy-xds");
    if (c->envoy_xds_backoff_max_ms < c->envoy_xds_backoff_ms)
        return fail(err, errlen,
                    "--envoy-xds-backoff-max-ms is below "
                    "--envoy-xds-backoff-ms");
    if (c->fail_open == 2 && !c->use_redis)
        return fail(err, errlen,
                    "--fail-local needs --redis, --redis-cluster or "
                    "--redis-sentinel: the memory store has no outage to "
                    "decide through");
    if (c->redis_tls && !c->use_redis)
        return fail(err, errlen,
                    "--redis-tls-*: no --redis or "
                    "--redis-cluster to speak TLS to");
    if (c->redis_tls && c->redis_cluster == 0 && c->redis_host[0] == '/')
        return fail(err, errlen,
                    "--redis-tls-*: Redis serves no TLS on a "
                    "Unix socket");
    return 0;
}
