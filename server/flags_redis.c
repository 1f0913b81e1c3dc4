/* The Redis flags' values (flags_redis.h): --redis's URLs with their
 * %-encoded credentials, --redis-cluster's seeds, --redis-sentinel's
 * sentinels and their master, the password files, and $RL_REDIS_URL. A
 * password is a secret: no error repeats one. */
#include "flags_redis.h"

#include <arpa/inet.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rl_error.h"
#include "rl_parse.h"

static int fail(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    return RL_EINVAL;
}

/* One %XX escape's value, or -1. */
static int hexval(unsigned char ch)
{
    if (ch >= '0' && ch <= '9')
        return ch - '0';
    if (ch >= 'a' && ch <= 'f')
        return ch - 'a' + 10;
    if (ch >= 'A' && ch <= 'F')
        return ch - 'A' + 10;
    return -1;
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
        if (n - i < 3 || (hi = hexval((unsigned char)s[i + 1])) < 0 ||
            (lo = hexval((unsigned char)s[i + 2])) < 0 || (hi | lo) == 0)
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
int rls_flags_redis_sentinel(rls_flags_t *c, const rls_flag_row_t *f,
                             const char *val, char *err, size_t errlen)
{
    unsigned char bin[16];
    int i;

    if (c->use_redis && c->redis_sentinels == 0)
        return redis_exclusive(err, errlen);
    (void)f;
    if (parse_seeds(c, "--redis-sentinel", val, &c->redis_sentinels, err,
                    errlen) != 0)
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
int rls_flags_sentinel_master(rls_flags_t *c, const rls_flag_row_t *f,
                              const char *val, char *err, size_t errlen)
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

/* --redis accepts HOST:PORT or a URL; not with the other two. */
int rls_flags_redis(rls_flags_t *c, const rls_flag_row_t *f, const char *val,
                    char *err, size_t errlen)
{
    (void)f;
    if (c->redis_cluster > 0 || c->redis_sentinels > 0)
        return redis_exclusive(err, errlen);
    return parse_redis(c, val, err, errlen) != 0 ? RL_EINVAL : 0;
}

int rls_flags_redis_cluster(rls_flags_t *c, const rls_flag_row_t *f,
                            const char *val, char *err, size_t errlen)
{
    (void)f;
    if (c->use_redis && c->redis_cluster == 0)
        return redis_exclusive(err, errlen);
    if (parse_seeds(c, "--redis-cluster", val, &c->redis_cluster, err,
                    errlen) != 0)
        return RL_EINVAL;
    c->use_redis = 1;
    return 0;
}

int rls_flags_sentinel_user(rls_flags_t *c, const rls_flag_row_t *f,
                            const char *val, char *err, size_t errlen)
{
    (void)f;
    if (val[0] == '\0' || strlen(val) > RLS_HOST_MAX)
        return fail(err, errlen, "--redis-sentinel-user: 1 to %d bytes",
                    RLS_HOST_MAX);
    strcpy(c->redis_sentinel_user, val);
    return 0;
}

int rls_flags_redis_finish(rls_flags_t *c, char *err, size_t errlen)
{
    const char *env;

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
    return 0;
}
