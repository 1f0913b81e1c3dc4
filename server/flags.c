#include "flags.h"

#include <arpa/inet.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "policy/limit.h"
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
}

static const char usage[] =
    "usage: rl-server [options]\n"
    "\n"
    "A rate-limit service with four algorithms (fixed window, sliding window\n"
    "log, sliding-window counter, GCRA). Clients send CheckRequest frames;\n"
    "counts live in Redis (--redis) or, without it, in process memory.\n"
    "\n"
    "  --listen HOST:PORT       accept clients here (default 127.0.0.1:7390;\n"
    "                           port 0 on this and every listener: any\n"
    "                           free port, see --port-file)\n"
    "  --redis HOST:PORT        count in this Redis; also\n"
    "          redis://[[USER]:PASSWORD@]HOST:PORT[/DB] (%-escapes in USER\n"
    "                           and PASSWORD; or the URL in $RL_REDIS_URL),\n"
    "          unix://[[USER]:PASSWORD@]/PATH[?db=N] (a Unix socket)\n"
    "                           (default: none, the embedded memory store)\n"
    "  --redis-cluster HOST:PORT[,HOST:PORT...]  count in this Redis\n"
    "                           Cluster (seed nodes; also\n"
    "                           redis://[[USER]:PASSWORD@] before the list);\n"
    "                           not with --redis\n"
    "  --redis-password-file FILE  the Redis password: FILE's first line\n"
    "                           (kept out of ps and of the URL)\n"
    "  --redis-sentinel IP:PORT[,IP:PORT...]  count in the master these\n"
    "                           Redis Sentinels name (asked in this order;\n"
    "                           redis://[[USER]:PASSWORD@] before the list\n"
    "                           gives the data nodes' credentials); not\n"
    "                           with --redis or --redis-cluster\n"
    "  --redis-sentinel-master NAME  the master's name in the sentinels\n"
    "                           (required with --redis-sentinel)\n"
    "  --redis-sentinel-user NAME  the sentinels' own AUTH user\n"
    "  --redis-sentinel-password-file FILE  the sentinels' own password:\n"
    "                           FILE's first line\n"
    "  --redis-sentinel-agree N  take a master's address (and send it the\n"
    "                           data nodes' password) once N sentinels\n"
    "                           name it (default: a majority of them)\n"
    "  TLS to Redis: rediss://[[USER]:PASSWORD@]HOST[:PORT][/DB] on\n"
    "  --redis (port 6379 when not given) or before the seeds\n"
    "  of --redis-cluster, or any of these flags (every node then TLS):\n"
    "  --redis-tls-ca FILE      trust these CAs (PEM; default: the system's)\n"
    "  --redis-tls-cert FILE    client certificate (PEM), with its key:\n"
    "  --redis-tls-key FILE     ... (PEM, no passphrase)\n"
    "  --redis-tls-server-name NAME  SNI and the name the certificate must\n"
    "                           match (default: the host as given; an IP\n"
    "                           is matched against the IP addresses)\n"
    "  --redis-tls-insecure     do not check the server's certificate at\n"
    "                           all (testing only)\n"
    "  --prefix STR             Redis key prefix, no braces (default rl:)\n"
    "  --config FILE            rules file (YAML; see the README's Rules);\n"
    "                           reloaded on SIGHUP and when it changes\n"
    "  --check-config FILE      validate a rules file (with any --rule)\n"
    "                           and exit: 0, or 2 with FILE:LINE: errors\n"
    "  --reload-settle-ms MS    a changed rules or Envoy file is reloaded\n"
    "                           once unchanged this long (default 1000;\n"
    "                           write files aside and rename them over)\n"
    "  --rule NAME=LIMIT[,LIMIT...]  a named rule, e.g. api=33/1m,2000/1h;\n"
    "                           LIMIT is N/DUR (DUR: 60, 60s, 1m, 1h, 1d)\n"
    "                           then :ALGORITHM, :per-caller, :burst=B, e.g.\n"
    "                           10/1s:gcra:burst=20 (README, Algorithms);\n"
    "                           repeatable; merged with --config\n"
    "  --max-rules N            rules at most (default 1000)\n"
    "  --inline-limits MODE     allow (default) or deny requests that carry\n"
    "                           their own limit instead of naming a rule\n"
    "  --max-inline-window SECS refuse inline windows longer (default 0:\n"
    "                           366 days)\n"
    "  --max-inline-limit N     refuse inline limits higher (default 0: no\n"
    "                           cap)\n"
    "  --refusal-cache N        remember up to N (rule, caller)s the store\n"
    "                           showed full, and refuse what cannot fit\n"
    "                           there without a store call (default 16384;\n"
    "                           0: off)\n"
    "  --batches-in-flight N    send a new batch only while fewer than N\n"
    "                           are with the store; requests arriving\n"
    "                           meanwhile join the next (default 1; 0: no\n"
    "                           bound)\n"
    "  --batch-hold-us N        under load, hold a batch that is not full\n"
    "                           until it is N us old (at most 10000) when\n"
    "                           the arrival rate says at least 4 more\n"
    "                           requests will join it meanwhile: fewer,\n"
    "                           bigger store calls for up to N us more\n"
    "                           latency; never at low load (default 0: off)\n"
    "  --fail-open              allow requests when the store cannot answer,\n"
    "                           saying so in `error` (default)\n"
    "  --fail-closed            answer ERROR when the store cannot answer\n"
    "  --fail-local             decide in this instance's memory while Redis\n"
    "                           cannot answer, on its share of every limit\n"
    "                           (the limit over the live instances it last\n"
    "                           saw), then add what it admitted to Redis's\n"
    "                           counters once Redis answers again\n"
    "  --redis-module MODE      auto (default): decide batches with the\n"
    "                           ratelimit Redis module (RL.BATCH) where\n"
    "                           Redis has it loaded, else with the Lua\n"
    "                           script; off: always the script\n"
    "  --redis-timeout-ms N     a Redis batch unanswered this long fails\n"
    "                           (default 200)\n"
    "  --reserve-ttl-ms N       a reservation may be settled for this long\n"
    "                           (default 300000); unsettled, it keeps its\n"
    "                           estimate\n"
    "  --handle-secret-file F   the secret that signs reservation and lease\n"
    "                           handles, the same file on every instance of\n"
    "                           a Redis fleet (default: each instance draws\n"
    "                           its own; only it accepts its handles)\n"
    "  --expiry-grace-ms N      keys expire this long after their window\n"
    "                           ends (default 1000)\n"
    "  --expiry-spread-ms N     Redis store: each key lives up to this much\n"
    "                           longer, at random (at most a quarter of its\n"
    "                           window), so that a window's keys do not all\n"
    "                           expire at once and stall Redis (default\n"
    "                           10000; 0: none)\n"
    "  --sliding-window-max N   the largest limit a sliding-window (the\n"
    "                           exact log) may have; each admission is an\n"
    "                           entry of the caller's log, 24 bytes in\n"
    "                           Redis (default 10000: up to 240 KB per\n"
    "                           caller and limit)\n"
    "  --memory-max BYTES       memory store: cap on its counters' memory;\n"
    "                           new counters past it are refused (by the\n"
    "                           fail mode), existing ones keep counting;\n"
    "                           k, m or g suffix for KiB, MiB, GiB\n"
    "                           (default 256m)\n"
    "  --max-frame BYTES        largest request frame accepted; a bigger one\n"
    "                           closes its connection (default 65536)\n"
    "  --max-connections N      refuse clients beyond this (default 10000)\n"
    "  --max-inflight N         stop reading a connection with this many\n"
    "                           requests unanswered (default 1024)\n"
    "  --max-output BYTES       close a connection whose unsent responses\n"
    "                           pass this (default 4194304)\n"
    "  --idle-timeout SECS      close a connection that sends no whole\n"
    "                           request this long while nothing of it is\n"
    "                           in flight (default 300; 0: never)\n"
    "  --frame-timeout-ms N     close a connection whose frame is not whole\n"
    "                           this long after its first byte (default\n"
    "                           10000; 0: never)\n"
    "  --max-partial-bytes N    memory all connections may hold in input\n"
    "                           buffers (partial frames); past it the\n"
    "                           largest holders are closed (default\n"
    "                           67108864; 0: no cap)\n"
    "  --metrics HOST:PORT      serve /metrics and /healthz over HTTP\n"
    "                           (default: off)\n"
    "  --grpc HOST:PORT         serve Envoy's rate limit service (gRPC,\n"
    "                           HTTP/2 cleartext) here (default: off)\n"
    "  --envoy-config FILE      envoy-ratelimit descriptor file, one domain\n"
    "                           each (see deploy/README.md, Envoy);\n"
    "                           repeatable; reloaded on SIGHUP and when\n"
    "                           one changes; or a DIR: its *.yaml and\n"
    "                           *.yml files (a mounted ConfigMap), read\n"
    "                           again when one is added, removed or\n"
    "                           changed\n"
    "  --envoy-xds HOST:PORT    take the descriptors from a control plane\n"
    "                           over xDS (Envoy Gateway; envoy-ratelimit's\n"
    "                           CONFIG_TYPE=GRPC_XDS_SOTW) instead of\n"
    "                           --envoy-config files; needs --grpc\n"
    "  --envoy-xds-node-id ID   the xDS node id (default: default)\n"
    "  --envoy-xds-tls-ca FILE  speak TLS to the control plane, verified\n"
    "                           with this CA; --envoy-xds-tls-cert FILE and\n"
    "                           --envoy-xds-tls-key FILE: our certificate\n"
    "                           (mutual TLS); --envoy-xds-tls-server-name\n"
    "                           NAME: the name it must hold (default: host)\n"
    "  --envoy-xds-backoff-ms MS, --envoy-xds-backoff-max-ms MS\n"
    "                           reconnection wait: first and cap (default\n"
    "                           1000 and 30000), jittered\n"
    "  --envoy-config-ignore-dotfiles  in an --envoy-config directory, pass\n"
    "                           over files whose name starts with '.'\n"
    "                           (envoy-ratelimit's RUNTIME_IGNOREDOTFILES)\n"
    "  --envoy-env              read envoy-ratelimit's settings from the\n"
    "                           environment (HOST, PORT, GRPC_PORT,\n"
    "                           REDIS_URL, CONFIG_TYPE, RUNTIME_ROOT...;\n"
    "                           deploy/README.md), with its defaults; the\n"
    "                           command line's flags win. Also when called\n"
    "                           `ratelimit`, or with no arguments while one\n"
    "                           of them is set\n"
    "  --envoy-env-print        print the flags the environment gives, and\n"
    "                           exit\n"
    "  --check-envoy-config FILE  validate an Envoy descriptor file and\n"
    "                           exit: 0, or 2 with FILE:LINE: errors\n"
    "  --envoy-stats 0|1        count envoy-ratelimit's per-descriptor\n"
    "                           statistics (total_hits, over_limit...) on\n"
    "                           /metrics (default 1)\n"
    "  --envoy-stats-max-values N  series named after request values at\n"
    "                           most; the rest counted as dropped (default\n"
    "                           1000)\n"
    "  --statsd HOST:PORT       also send them to statsd/DogStatsD over UDP\n"
    "                           under the reference's names (default: off)\n"
    "  --statsd-flush-ms N      how often (default 1000)\n"
    "  --envoy-counting MODE    how Envoy domains count whose file does\n"
    "                           not say (counting:): envoy (default; a\n"
    "                           charge counts even past the limit, then\n"
    "                           compares), envoy-stop (envoy-ratelimit's\n"
    "                           STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT) or\n"
    "                           native (a refusal consumes nothing)\n"
    "  --envoy-near-limit-ratio R  envoy-ratelimit's NEAR_LIMIT_RATIO: the\n"
    "                           near_limit statistic counts the hits past\n"
    "                           floor(limit * R) (default 0.8)\n"
    "  --envoy-shadow-mode      envoy-ratelimit's SHADOW_MODE: a call over\n"
    "                           a limit is answered OK overall (its\n"
    "                           descriptors still say OVER_LIMIT)\n"
    "  --envoy-quota-mode       envoy-ratelimit's QUOTA_MODE: every\n"
    "                           descriptor in quota mode (a call is\n"
    "                           refused only when all are over)\n"
    "  --envoy-response-headers envoy-ratelimit's LIMIT_RESPONSE_HEADERS_\n"
    "                           ENABLED: RateLimit-Limit, -Remaining, -Reset\n"
    "                           for domains whose file does not say\n"
    "                           rate_limit_headers\n"
    "  --envoy-response-metadata  envoy-ratelimit's "
    "RESPONSE_DYNAMIC_METADATA:\n"
    "                           the call and the allowed descriptors'\n"
    "                           metadata in dynamic_metadata\n"
    "  --grpc-max-streams N     concurrent streams per gRPC connection\n"
    "                           (SETTINGS; default 100)\n"
    "  --envoy-http HOST:PORT   envoy-ratelimit's HTTP listener (its HOST:\n"
    "                           PORT): GET /healthcheck, POST /json (needs\n"
    "                           --grpc; default: off)\n"
    "  --debug-http HOST:PORT   envoy-ratelimit's debug listener (DEBUG_PORT):\n"
    "                           GET /rlconfig (needs --grpc; default: off)\n"
    "  --http HOST:PORT         serve GET /check?rule=R&key=K over HTTP, for\n"
    "                           proxies' auth subrequests (default: off)\n"
    "  --check-key-header NAME  /check: the key from this request header when\n"
    "                           the query has no key= (X-Forwarded-For: see\n"
    "                           --check-xff-hops) (default: none)\n"
    "  --check-xff-hops N       /check, key from X-Forwarded-For: the address\n"
    "                           the Nth trusted proxy appended, counting\n"
    "                           from the right (1, the default: the last,\n"
    "                           written by the proxy in front of rl-server;\n"
    "                           0: the leftmost, which the client wrote)\n"
    "  --check-error-details    /check: a 400 names its reason in the body\n"
    "                           (the missing key, the unknown rule); by\n"
    "                           default the body is plain and the reason\n"
    "                           goes to the log and the metrics\n"
    "  --check-rule-header NAME /check: the rule from this request header\n"
    "                           when the query has no rule= (default: none)\n"
    "  --tls-cert FILE          serve TLS (1.2 and up) with this certificate\n"
    "                           chain (PEM) on the --tls-listeners;\n"
    "                           reloaded on SIGHUP and when it changes\n"
    "  --tls-key FILE           ... and its key (PEM, no passphrase)\n"
    "  --tls-client-ca FILE     mutual TLS: clients must show a certificate\n"
    "                           of these CAs (PEM) (default: none asked)\n"
    "  --tls-client-ca-recheck  after a reload of the TLS files, an open\n"
    "                           connection whose client certificate the new\n"
    "                           CAs do not verify is closed at its next\n"
    "                           read (default: kept until it closes)\n"
    "  --tls-listeners LIST     which listeners speak TLS: grpc, http,\n"
    "                           metrics, listen, comma-separated (default:\n"
    "                           grpc and http when open; listen, the\n"
    "                           native protocol, only when named: librlc\n"
    "                           speaks no TLS yet)\n"
    "  --tls-handshake-timeout-ms N  close a gRPC or native TLS\n"
    "                           connection whose handshake is not done\n"
    "                           this long after it was accepted (default\n"
    "                           5000; 0: never; the\n"
    "                           HTTP listeners' header deadline, 2 s,\n"
    "                           covers their handshakes)\n"
    "  --tls-max-handshakes N   per TLS listener, handshakes in progress at\n"
    "                           once; a new connection past it is closed at\n"
    "                           accept, counted (default 256; 0: no cap)\n"
    "  --tls-handshake-rate N   per TLS listener, handshakes begun per\n"
    "                           second (a burst of N at once); past it the\n"
    "                           same (default 200; 0: no cap)\n"
    "  --drain-ms N             on SIGTERM, report unhealthy and keep serving\n"
    "                           this long before closing (default 0)\n"
    "  --unhealthy-error-ratio R\n"
    "                           /healthz answers 503 while more than this\n"
    "                           share (0-1) of the last 10 s of decisions\n"
    "                           failed in the store (default 0.5; 1: never)\n"
    "  --unhealthy-min-decisions N\n"
    "                           ... once there were at least this many\n"
    "                           (default 20)\n"
    "  --port-file FILE         once every listener is open, write one\n"
    "                           line per listener to FILE, e.g. \"listen\n"
    "                           127.0.0.1:7390\" (with the port bound, for\n"
    "                           listeners given port 0: the system picks a\n"
    "                           free one); the file appears whole\n"
    "  --log-level LEVEL        debug, info, warn or error (default info)\n"
    "  --version                print the version and exit\n"
    "  --help                   print this and exit\n";

static int fail(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    return RL_EINVAL;
}

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

/* --redis-sentinel: as a cluster's seeds, but IP literals only: hiredis
 * would resolve a name with a blocking getaddrinfo on the loop. */
static int parse_redis_sentinel(rls_flags_t *c, const char *s, char *err,
                                size_t errlen)
{
    unsigned char bin[16];
    int i;

    if (parse_seeds(c, "--redis-sentinel", s, &c->redis_sentinels, err,
                    errlen) != 0)
        return RL_EINVAL;
    for (i = 0; i < c->redis_sentinels; i++)
        if (inet_pton(AF_INET, c->redis_seed_host[i], bin) != 1 &&
            inet_pton(AF_INET6, c->redis_seed_host[i], bin) != 1)
            return fail(err, errlen,
                        "--redis-sentinel: '%s' is not an IP address "
                        "(sentinels are given by address)",
                        c->redis_seed_host[i]);
    return 0;
}

/* --redis-sentinel-master: a name as a sentinel's config takes it. */
static int parse_sentinel_master(rls_flags_t *c, const char *s, char *err,
                                 size_t errlen)
{
    size_t i, n = strlen(s);

    for (i = 0; i < n; i++)
        if ((unsigned char)s[i] <= ' ' || (unsigned char)s[i] >= 127)
            break;
    if (n == 0 || n > 128 || i < n)
        return fail(err, errlen,
                    "--redis-sentinel-master: expected a name (1 to 128 "
                    "printable bytes, no spaces)");
    memcpy(c->redis_sentinel_master, s, n + 1);
    return 0;
}

/* Numeric flags: name, where to store, and the accepted range. */
typedef struct {
    const char *name;
    size_t off;
    int size; /* 4 or 8 bytes */
    uint64_t min, max;
} num_flag_t;

#define NUM(name, field, min, max)                                             \
    {                                                                          \
        name, offsetof(rls_flags_t, field),                                    \
            (int)sizeof(((rls_flags_t *)0)->field), min, max                   \
    }

static const num_flag_t num_flags[] = {
    NUM("--redis-timeout-ms", redis_timeout_ms, 1, 600000),
    NUM("--expiry-grace-ms", grace_ms, 0, 3600000),
    NUM("--reserve-ttl-ms", reserve_ttl_ms, 1000, 86400000),
    NUM("--expiry-spread-ms", spread_ms, 0, 3600000),
    NUM("--sliding-window-max", swl_max, 1, RL_SWL_LIMIT_MAX),
    NUM("--max-frame", max_frame, 64, 16u << 20),
    NUM("--max-connections", max_connections, 1, 1000000),
    NUM("--max-inflight", max_inflight, 1, 1u << 20),
    NUM("--max-output", max_output, 4096, (uint64_t)1 << 32),
    NUM("--idle-timeout", idle_timeout_s, 0, 604800),
    NUM("--frame-timeout-ms", frame_timeout_ms, 0, 3600000),
    NUM("--max-partial-bytes", max_partial_bytes, 0, (uint64_t)1 << 40),
    NUM("--drain-ms", drain_ms, 0, 3600000),
    NUM("--unhealthy-min-decisions", unhealthy_min_decisions, 1, 1u << 30),
    NUM("--max-rules", max_rules, 1, 1000000),
    NUM("--reload-settle-ms", reload_settle_ms, 0, 60000),
    NUM("--refusal-cache", refusal_cache, 0, 1u << 24),
    NUM("--batches-in-flight", batches_in_flight, 0, 1024),
    NUM("--batch-hold-us", batch_hold_us, 0, 10000),
    NUM("--max-inline-window", max_inline_window, 0, RL_WINDOW_MAX_S),
    NUM("--max-inline-limit", max_inline_limit, 0, INT64_MAX),
    NUM("--grpc-max-streams", grpc_max_streams, 1, 65536),
    NUM("--envoy-stats", envoy_stats, 0, 1),
    NUM("--envoy-stats-max-values", envoy_stats_max_values, 0, 1u << 20),
    NUM("--statsd-flush-ms", statsd_flush_ms, 10, 3600000),
    NUM("--check-xff-hops", check_xff_hops, 0, 16),
    NUM("--redis-sentinel-agree", redis_sentinel_agree, 1, 16),
    NUM("--tls-handshake-timeout-ms", tls_handshake_timeout_ms, 0, 3600000),
    NUM("--tls-max-handshakes", tls_max_handshakes, 0, 1000000),
    NUM("--tls-handshake-rate", tls_handshake_rate, 0, 1000000),
    NUM("--envoy-xds-backoff-ms", envoy_xds_backoff_ms, 1, 3600000),
    NUM("--envoy-xds-backoff-max-ms", envoy_xds_backoff_max_ms, 1, 3600000),
};

static int takes_value(const char *name)
{
    static const char *const names[] = {"--listen",
                                        "--metrics",
                                        "--redis",
                                        "--redis-cluster",
                                        "--redis-password-file",
                                        "--redis-sentinel",
                                        "--redis-sentinel-master",
                                        "--redis-sentinel-user",
                                        "--redis-sentinel-password-file",
                                        "--redis-tls-ca",
                                        "--redis-tls-cert",
                                        "--redis-tls-key",
                                        "--redis-tls-server-name",
                                        "--prefix",
                                        "--rule",
                                        "--log-level",
                                        "--memory-max",
                                        "--unhealthy-error-ratio",
                                        "--envoy-near-limit-ratio",
                                        "--envoy-counting",
                                        "--config",
                                        "--check-config",
                                        "--inline-limits",
                                        "--grpc",
                                        "--redis-module",
                                        "--envoy-config",
                                        "--check-envoy-config",
                                        "--statsd",
                                        "--envoy-xds",
                                        "--envoy-xds-node-id",
                                        "--envoy-xds-tls-ca",
                                        "--envoy-xds-tls-cert",
                                        "--envoy-xds-tls-key",
                                        "--envoy-xds-tls-server-name",
                                        "--http",
                                        "--check-key-header",
                                        "--check-rule-header",
                                        "--tls-cert",
                                        "--tls-key",
                                        "--tls-client-ca",
                                        "--tls-listeners",
                                        "--port-file",
                                        "--handle-secret-file",
                                        "--envoy-http",
                                        "--debug-http"};
    size_t k;

    for (k = 0; k < sizeof(names) / sizeof(names[0]); k++)
        if (strcmp(name, names[k]) == 0)
            return 1;
    for (k = 0; k < sizeof(num_flags) / sizeof(num_flags[0]); k++)
        if (strcmp(name, num_flags[k].name) == 0)
            return 1;
    return 0;
}

/* --tls-listeners grpc[,http...]: the listeners named, each one that can
 * speak TLS in this build. Returns 0 or RL_EINVAL with err. */
static int parse_tls_listeners(rls_flags_t *c, const char *val, char *err,
                               size_t errlen)
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

int rls_flags_parse(rls_flags_t *c, int argc, char **argv, void *out, char *err,
                    size_t errlen)
{
    const char *env;
    int i;
    size_t k;

    for (i = 1; i < argc; i++) {
        const char *arg = argv[i], *val = NULL, *eq;
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

        if (strcmp(name, "--help") == 0) {
            fputs(usage, out);
            c->info_only = 1;
            return 0;
        }
        if (strcmp(name, "--version") == 0) {
            fprintf(out, "rl-server %s\n", RLS_VERSION);
            c->info_only = 1;
            return 0;
        }
        if (strcmp(name, "--check-error-details") == 0) {
            if (val != NULL)
                return fail(err, errlen, "%s takes no value", name);
            c->check_error_details = 1;
            continue;
        }
        if (strcmp(name, "--envoy-env") == 0 ||
            strcmp(name, "--envoy-env-print") == 0 ||
            strcmp(name, "--envoy-config-ignore-dotfiles") == 0) {
            if (val != NULL)
                return fail(err, errlen, "%s takes no value", name);
            if (strcmp(name, "--envoy-config-ignore-dotfiles") == 0)
                c->envoy_config_ignore_dot = 1;
            else if (strcmp(name, "--envoy-env-print") == 0)
                c->envoy_env = c->envoy_env_print = 1;
            else
                c->envoy_env = 1;
            continue;
        }
        if (strcmp(name, "--tls-client-ca-recheck") == 0) {
            if (val != NULL)
                return fail(err, errlen, "%s takes no value", name);
            c->tls_client_ca_recheck = 1;
            continue;
        }
        if (strcmp(name, "--redis-tls-insecure") == 0) {
            if (val != NULL)
                return fail(err, errlen, "%s takes no value", name);
            c->redis_tls = c->redis_tls_insecure = 1;
            continue;
        }
        if (strcmp(name, "--envoy-shadow-mode") == 0 ||
            strcmp(name, "--envoy-quota-mode") == 0 ||
            strcmp(name, "--envoy-response-headers") == 0 ||
            strcmp(name, "--envoy-response-metadata") == 0) {
            if (val != NULL)
                return fail(err, errlen, "%s takes no value", name);
            if (name[8] == 's')
                c->envoy_shadow_mode = 1;
            else if (name[8] == 'q')
                c->envoy_quota_mode = 1;
            else if (name[17] == 'h')
                c->envoy_response_headers = 1;
            else
                c->envoy_response_metadata = 1;
            continue;
        }
        if (strcmp(name, "--fail-open") == 0 ||
            strcmp(name, "--fail-closed") == 0 ||
            strcmp(name, "--fail-local") == 0) {
            if (val != NULL)
                return fail(err, errlen, "%s takes no value", name);
            /* 1 open, 0 closed, 2 local (RLS_FAIL_LOCAL, batch.h) */
            c->fail_open = name[7] == 'o' ? 1 : name[7] == 'l' ? 2 : 0;
            continue;
        }

        if (!takes_value(name))
            return fail(err, errlen, "unknown option '%s' (see --help)", name);
        if (val == NULL) {
            if (i + 1 >= argc)
                return fail(err, errlen, "%s needs a value", name);
            val = argv[++i];
        }

        if (strcmp(name, "--listen") == 0) {
            if (rl_parse_listen(val, c->listen_host, sizeof(c->listen_host),
                                &c->listen_port) != RL_OK)
                return fail(err, errlen,
                            "--listen: expected " RL_HOSTPORT_HELP ", got '%s'",
                            val);
        } else if (strcmp(name, "--metrics") == 0) {
            if (rl_parse_listen(val, c->metrics_host, sizeof(c->metrics_host),
                                &c->metrics_port) != RL_OK)
                return fail(
                    err, errlen,
                    "--metrics: expected " RL_HOSTPORT_HELP ", got '%s'", val);
        } else if (strcmp(name, "--statsd") == 0) {
            if (rl_parse_hostport(val, c->statsd_host, sizeof(c->statsd_host),
                                  &c->statsd_port) != RL_OK)
                return fail(err, errlen,
                            "--statsd: expected " RL_HOSTPORT_HELP ", got '%s'",
                            val);
        } else if (strcmp(name, "--http") == 0) {
            if (rl_parse_listen(val, c->http_host, sizeof(c->http_host),
                                &c->http_port) != RL_OK)
                return fail(err, errlen,
                            "--http: expected " RL_HOSTPORT_HELP ", got '%s'",
                            val);
        } else if (strcmp(name, "--envoy-http") == 0 ||
                   strcmp(name, "--debug-http") == 0) {
            int envoy = name[2] == 'e';
            if (rl_parse_listen(val,
                                envoy ? c->envoy_http_host : c->debug_http_host,
                                envoy ? sizeof(c->envoy_http_host)
                                      : sizeof(c->debug_http_host),
                                envoy ? &c->envoy_http_port
                                      : &c->debug_http_port) != RL_OK)
                return fail(err, errlen,
                            "%s: expected " RL_HOSTPORT_HELP ", got '%s'",
                            name, val);
        } else if (strcmp(name, "--check-key-header") == 0 ||
                   strcmp(name, "--check-rule-header") == 0) {
            /* A header field name: a token, as rls_check_opts_init takes. */
            size_t n = strspn(val, "abcdefghijklmnopqrstuvwxyz"
                                   "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
                                   "!#$%&'*+-.^_`|~");
            if (val[0] == '\0' || val[n] != '\0' || n > 64)
                return fail(err, errlen,
                            "%s: expected a header name (up to "
                            "64 bytes of letters, digits and "
                            "-), got '%s'",
                            name, val);
            if (name[8] == 'k')
                c->check_key_header = val;
            else
                c->check_rule_header = val;
        } else if (strcmp(name, "--redis") == 0) {
            if (c->redis_cluster > 0 || c->redis_sentinels > 0)
                return fail(err, errlen,
                            "--redis, --redis-cluster and "
                            "--redis-sentinel are exclusive: "
                            "give one");
            if (parse_redis(c, val, err, errlen) != 0)
                return RL_EINVAL;
        } else if (strcmp(name, "--redis-cluster") == 0) {
            if (c->use_redis && c->redis_cluster == 0)
                return fail(err, errlen,
                            "--redis, --redis-cluster and "
                            "--redis-sentinel are exclusive: "
                            "give one");
            if (parse_seeds(c, "--redis-cluster", val, &c->redis_cluster, err,
                            errlen) != 0)
                return RL_EINVAL;
            c->use_redis = 1;
        } else if (strcmp(name, "--redis-sentinel") == 0) {
            if (c->use_redis && c->redis_sentinels == 0)
                return fail(err, errlen,
                            "--redis, --redis-cluster and "
                            "--redis-sentinel are exclusive: "
                            "give one");
            if (parse_redis_sentinel(c, val, err, errlen) != 0)
                return RL_EINVAL;
            c->use_redis = 1;
        } else if (strcmp(name, "--redis-sentinel-master") == 0) {
            if (parse_sentinel_master(c, val, err, errlen) != 0)
                return RL_EINVAL;
        } else if (strcmp(name, "--redis-sentinel-user") == 0) {
            if (val[0] == '\0' || strlen(val) > RLS_HOST_MAX)
                return fail(err, errlen,
                            "--redis-sentinel-user: 1 to %d "
                            "bytes",
                            RLS_HOST_MAX);
            strcpy(c->redis_sentinel_user, val);
        } else if (strcmp(name, "--redis-sentinel-password-file") == 0) {
            c->redis_sentinel_password_file = val;
        } else if (strcmp(name, "--redis-password-file") == 0) {
            c->redis_password_file = val;
        } else if (strncmp(name, "--redis-tls-", 12) == 0) {
            /* The files are read, and checked, when the store is made. */
            const char **dst = name[12] == 'c' && name[13] == 'a'
                                   ? &c->redis_tls_ca
                               : name[12] == 'c' ? &c->redis_tls_cert
                               : name[12] == 'k' ? &c->redis_tls_key
                                                 : &c->redis_tls_server_name;
            if (val[0] == '\0')
                return fail(err, errlen, "%s: empty", name);
            *dst = val;
            c->redis_tls = 1;
        } else if (strcmp(name, "--tls-cert") == 0 ||
                   strcmp(name, "--tls-key") == 0 ||
                   strcmp(name, "--tls-client-ca") == 0) {
            /* The files are read, and checked, before the server starts
             * (main.c) and again on each reload. */
            if (val[0] == '\0')
                return fail(err, errlen, "%s: empty", name);
            *(name[6] == 'c' && name[7] == 'e' ? &c->tls_cert
              : name[6] == 'k'                 ? &c->tls_key
                                               : &c->tls_client_ca) = val;
        } else if (strcmp(name, "--tls-listeners") == 0) {
            if (parse_tls_listeners(c, val, err, errlen) != 0)
                return RL_EINVAL;
        } else if (strcmp(name, "--prefix") == 0) {
            /* Braces in the prefix would move the Redis Cluster hash tag
             * off the caller's key. */
            if (strlen(val) > RLS_PREFIX_MAX || strpbrk(val, "{}") != NULL)
                return fail(err, errlen,
                            "--prefix: at most %d bytes, no "
                            "braces",
                            RLS_PREFIX_MAX);
            strcpy(c->prefix, val);
            c->prefix_len = strlen(val);
        } else if (strcmp(name, "--rule") == 0) {
            if (c->nrules == RLS_RULES_MAX)
                return fail(err, errlen, "--rule: at most %d; use --config",
                            RLS_RULES_MAX);
            c->rules[c->nrules++] = val;
        } else if (strcmp(name, "--handle-secret-file") == 0) {
            if (val[0] == '\0')
                return fail(err, errlen, "%s: empty", name);
            c->handle_secret_file = val;
        } else if (strcmp(name, "--port-file") == 0) {
            c->port_file = val;
        } else if (strcmp(name, "--config") == 0) {
            c->config_path = val;
        } else if (strcmp(name, "--check-config") == 0) {
            c->check_config = val;
        } else if (strcmp(name, "--grpc") == 0) {
            if (rl_parse_listen(val, c->grpc_host, sizeof(c->grpc_host),
                                &c->grpc_port) != RL_OK)
                return fail(err, errlen,
                            "--grpc: expected " RL_HOSTPORT_HELP ", got '%s'",
                            val);
        } else if (strcmp(name, "--envoy-config") == 0) {
            if (c->nenvoy_configs == RLS_ENVOY_CONFIGS_MAX)
                return fail(err, errlen, "--envoy-config: at most %d files",
                            RLS_ENVOY_CONFIGS_MAX);
            c->envoy_configs[c->nenvoy_configs++] = val;
        } else if (strcmp(name, "--check-envoy-config") == 0) {
            c->check_envoy_config = val;
        } else if (strcmp(name, "--envoy-xds") == 0) {
            if (rl_parse_hostport(val, c->envoy_xds_host,
                                  sizeof(c->envoy_xds_host),
                                  &c->envoy_xds_port) != RL_OK)
                return fail(err, errlen,
                            "--envoy-xds: expected HOST:PORT, got '%s'", val);
        } else if (strcmp(name, "--envoy-xds-node-id") == 0) {
            if (val[0] == '\0')
                return fail(err, errlen, "--envoy-xds-node-id: empty");
            c->envoy_xds_node_id = val;
        } else if (strcmp(name, "--envoy-xds-tls-ca") == 0) {
            c->envoy_xds_tls_ca = val;
        } else if (strcmp(name, "--envoy-xds-tls-cert") == 0) {
            c->envoy_xds_tls_cert = val;
        } else if (strcmp(name, "--envoy-xds-tls-key") == 0) {
            c->envoy_xds_tls_key = val;
        } else if (strcmp(name, "--envoy-xds-tls-server-name") == 0) {
            c->envoy_xds_tls_server_name = val;
        } else if (strcmp(name, "--redis-module") == 0) {
            if (strcmp(val, "auto") != 0 && strcmp(val, "off") != 0)
                return fail(err, errlen,
                            "--redis-module: expected auto or "
                            "off, got '%s'",
                            val);
            c->redis_module_off = val[0] == 'o';
        } else if (strcmp(name, "--inline-limits") == 0) {
            if (strcmp(val, "allow") != 0 && strcmp(val, "deny") != 0)
                return fail(err, errlen,
                            "--inline-limits: expected allow or "
                            "deny, got '%s'",
                            val);
            c->inline_deny = val[0] == 'd';
        } else if (strcmp(name, "--memory-max") == 0) {
            if (parse_bytes(val, 65536, (uint64_t)1 << 40, &c->memory_max) != 0)
                return fail(err, errlen,
                            "--memory-max: expected bytes from "
                            "65536 to 1099511627776, or with a "
                            "k, m or g suffix, got '%s'",
                            val);
        } else if (strcmp(name, "--envoy-counting") == 0) {
            /* RLS_ENVOY_COUNT_* (envoy/conf.h) */
            if (strcmp(val, "envoy") == 0)
                c->envoy_counting = 1;
            else if (strcmp(val, "envoy-stop") == 0)
                c->envoy_counting = 2;
            else if (strcmp(val, "native") == 0)
                c->envoy_counting = 3;
            else
                return fail(err, errlen,
                            "--envoy-counting: expected envoy, "
                            "envoy-stop or native, got '%s'",
                            val);
        } else if (strcmp(name, "--envoy-near-limit-ratio") == 0) {
            char *end;
            double r = strtod(val, &end);
            if (end == val || *end != '\0' || !(r > 0 && r <= 1))
                return fail(err, errlen,
                            "--envoy-near-limit-ratio: expected "
                            "a number above 0, up to 1, got "
                            "'%s'",
                            val);
            c->envoy_near_ratio = r;
        } else if (strcmp(name, "--unhealthy-error-ratio") == 0) {
            char *end;
            double r = strtod(val, &end);
            if (end == val || *end != '\0' || !(r >= 0 && r <= 1))
                return fail(err, errlen,
                            "--unhealthy-error-ratio: expected "
                            "a number from 0 to 1, got '%s'",
                            val);
            c->unhealthy_error_ratio = r;
        } else if (strcmp(name, "--log-level") == 0) {
            if (strcmp(val, "debug") && strcmp(val, "info") &&
                strcmp(val, "warn") && strcmp(val, "error"))
                return fail(err, errlen,
                            "--log-level: expected debug, info, "
                            "warn or error, got '%s'",
                            val);
            strcpy(c->log_level, val);
        } else {
            for (k = 0; k < sizeof(num_flags) / sizeof(num_flags[0]); k++)
                if (strcmp(name, num_flags[k].name) == 0)
                    break;
            if (k == sizeof(num_flags) / sizeof(num_flags[0]))
                return fail(err, errlen, "unknown option '%s' (see --help)",
                            name);
            const num_flag_t *f = &num_flags[k];
            uint64_t v;
            if (rl_parse_u64(val, f->min, f->max, &v) != RL_OK)
                return fail(err, errlen,
                            "%s: expected a number from %llu "
                            "to %llu, got '%s'",
                            name, (unsigned long long)f->min,
                            (unsigned long long)f->max, val);
            char *dst = (char *)c + f->off;
            if (f->size == 4) {
                uint32_t v32 = (uint32_t)v;
                memcpy(dst, &v32, 4);
            } else {
                memcpy(dst, &v, 8);
            }
        }
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
    if (c->envoy_xds_host[0] != '\0' && c->nenvoy_configs > 0)
        return fail(err, errlen,
                    "--envoy-xds and --envoy-config: give one source of "
                    "Envoy descriptors");
    if (c->envoy_xds_host[0] != '\0' && c->grpc_host[0] == '\0')
        return fail(err, errlen, "--envoy-xds needs --grpc");
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
