/* rl-check: ask rl-server for a decision from the command line.
 *
 *   rl-check --server HOST:PORT --key KEY
 *            (--limit N --window SECONDS | --rule NAME)
 *   rl-check --server HOST:PORT --level KEY=RULE [--level KEY=RULE...]
 *            (all or nothing across levels)
 *            [--cost N] [--repeat N] [--timeout MS]
 *            [--tls] [--tls-ca FILE] [--tls-cert FILE --tls-key FILE]
 *            [--tls-server-name NAME] [--tls-insecure]
 *            [--reserve | --acquire]
 *   rl-check --server HOST:PORT (--settle HEX --actual N | --release HEX |
 *            --renew HEX) [--timeout MS] [--tls...]
 *
 * Prints one line per decision and exits 0 when the last decision allowed,
 * 1 when it was over the limit, 2 on any error (with a message on stderr).
 * Exit codes are the interface for scripts, so every failure path ends in
 * 2, never in a crash or a 1. A refusal by a rule in shadow mode is an
 * allowed answer (exit 0): the line ends in "shadow_refused" instead.
 * Fields are only ever added at the end of a line, so scripts that read
 * the first ones keep working. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rl_error.h"
#include "rl_parse.h"
#include "rlc.h"

#define EXIT_ALLOWED 0
#define EXIT_OVER 1
#define EXIT_ERROR 2

static void usage(FILE *f)
{
    fprintf(f, "usage: rl-check --server HOST:PORT --key KEY\n"
               "                (--limit N --window SECONDS | --rule NAME)\n"
               "                [--cost N] [--repeat N] [--timeout MS]"
               " [--headers]\n"
               "                [--tls] [--tls-ca FILE] [--tls-cert FILE "
               "--tls-key FILE]\n"
               "                [--tls-server-name NAME] [--tls-insecure]\n"
               "                [--reserve | --acquire]\n"
               "       rl-check --server HOST:PORT --level KEY=RULE "
               "[--level KEY=RULE...]\n"
               "                [--cost N] [--repeat N] [--timeout MS] "
               "[--headers] [--tls...]\n"
               "       rl-check --server HOST:PORT (--settle HEX --actual N |"
               " --release HEX |\n"
               "                --renew HEX) [--timeout MS] [--tls...]\n"
               "Asks rl-server for a rate-limit decision and prints one line "
               "per decision:\n"
               "  OK used=N remaining=N limit=N reset_after_ms=N window=Ss"
               " [shadow_refused]\n"
               "  OVER_LIMIT used=N remaining=N limit=N retry_after_ms=N"
               " window=Ss\n"
               "window is the length of the window that decided (0s when an "
               "older server\n"
               "does not say, for a rule). shadow_refused: the rule is in "
               "shadow mode and\n"
               "would have refused; the request is allowed and consumed "
               "nothing.\n"
               "--level KEY=RULE (up to 8): one check decided all or nothing "
               "across the\n"
               "levels, allowed only if every level's rule has room, charged "
               "nowhere when\n"
               "refused; the line ends in level=N, the deciding level "
               "(1-based).\n"
               "Exit status: 0 allowed (shadow refusals included), 1 over the "
               "limit,\n"
               "2 error. With --repeat, the status is that of the last "
               "decision.\n"
               "--headers: after each decision, the HTTP rate-limit headers "
               "a backend\n"
               "would send for it (rlc_http_format; the policy is the rule, "
               "else \"default\"),\n"
               "each line indented by two spaces.\n"
               "--tls: connect over TLS (rl-server --tls-cert with native in "
               "--tls-listeners),\n"
               "verifying the server against --tls-ca (default: the system's "
               "CAs) and the\n"
               "name of --server (or --tls-server-name); --tls-cert/--tls-key "
               "for mutual\n"
               "TLS. Any --tls-* option implies --tls. --tls-insecure skips "
               "verification\n"
               "(tests only).\n"
               "Reservations and leases (the OK and OVER_LIMIT lines as "
               "above, fields added\n"
               "at the end):\n"
               "  --reserve       check --cost as an estimate; when allowed "
               "the line ends in\n"
               "                  handle=HEX expires_at_ms=N [failed_open]\n"
               "  --settle HEX --actual N\n"
               "                  charge the reservation HEX its actual cost "
               "(0 refunds it);\n"
               "                  prints OK settled actual=N\n"
               "  --acquire       take a lease of --rule (a concurrency rule); "
               "as --reserve,\n"
               "                  or OVER_LIMIT ... retry_after_ms=N until the "
               "earliest lease\n"
               "                  ends\n"
               "  --release HEX   give the lease back; prints OK released\n"
               "  --renew HEX     extend the lease; prints OK renewed "
               "expires_at_ms=N\n"
               "HEX is the handle in hex as printed (at most 512 bytes); "
               "expires_at_ms is\n"
               "the end, ms since the Unix epoch on the store's clock. A "
               "handle the server\n"
               "does not know (expired, settled, released) is an error: "
               "exit 2.\n");
}

typedef struct args_s {
    const char *server, *key, *rule;
    const char *tls_ca, *tls_cert, *tls_key, *tls_name;
    uint64_t limit, window, cost, repeat, timeout, actual;
    int have_limit, have_window, have_actual, headers, tls, tls_insecure;
    int op;          /* RLC_OP_* */
    const char *hex; /* --settle, --release, --renew */
    /* --level KEY=RULE (one past the most is counted: the library refuses
     * it with its reason) */
    rlc_level_t levels[RLC_LEVELS_MAX];
    size_t nlevels;
} args_t;

/* Sets the op once; two op flags are an error. Returns 0 or 1. */
static int set_op(args_t *a, int op, const char *name)
{
    if (a->op != RLC_OP_CHECK) {
        fprintf(stderr,
                "rl-check: %s: give one of --reserve, --settle, "
                "--acquire, --release, --renew\n",
                name);
        return 1;
    }
    a->op = op;
    return 0;
}

/* Accepts "--name value" and "--name=value". Returns 0, or 1 after
 * printing a message. */
static int parse_args(int argc, char **argv, args_t *a)
{
    int i;

    memset(a, 0, sizeof(*a));
    a->repeat = 1;
    for (i = 1; i < argc; i++) {
        char *name = argv[i], *val = NULL, *eq;
        uint64_t v;

        if (strcmp(name, "--help") == 0 || strcmp(name, "-h") == 0) {
            usage(stdout);
            exit(EXIT_ALLOWED);
        }
        if (strncmp(name, "--", 2) != 0) {
            fprintf(stderr, "rl-check: unexpected argument '%s'\n", name);
            return 1;
        }
        if (strcmp(name, "--headers") == 0) {
            a->headers = 1;
            continue;
        }
        if (strcmp(name, "--tls") == 0) {
            a->tls = 1;
            continue;
        }
        if (strcmp(name, "--tls-insecure") == 0) {
            a->tls = a->tls_insecure = 1;
            continue;
        }
        if (strcmp(name, "--reserve") == 0 || strcmp(name, "--acquire") == 0) {
            if (set_op(a, name[2] == 'r' ? RLC_OP_RESERVE : RLC_OP_ACQUIRE,
                       name) != 0)
                return 1;
            continue;
        }
        eq = strchr(name, '=');
        if (eq != NULL) {
            *eq = '\0';
            val = eq + 1;
        } else if (i + 1 < argc) {
            val = argv[++i];
        } else {
            fprintf(stderr, "rl-check: %s needs a value\n", name);
            return 1;
        }

#define NUM(opt, lo, hi, dst)                                                  \
    if (strcmp(name, opt) == 0) {                                              \
        if (rl_parse_u64(val, lo, hi, &v) != RL_OK) {                          \
            fprintf(stderr,                                                    \
                    "rl-check: %s wants a number in [%" PRIu64 ", %" PRIu64    \
                    "], not '%s'\n",                                           \
                    opt, (uint64_t)(lo), (uint64_t)(hi), val);                 \
            return 1;                                                          \
        }                                                                      \
        dst = v;                                                               \
        continue;                                                              \
    }
        if (strcmp(name, "--server") == 0) {
            a->server = val;
            continue;
        }
        if (strcmp(name, "--key") == 0) {
            a->key = val;
            continue;
        }
        if (strcmp(name, "--level") == 0) {
            /* KEY=RULE at the last '=': a rule has none, a key may. */
            const char *at = strrchr(val, '=');
            if (at == NULL || at == val || at[1] == '\0') {
                fprintf(stderr, "rl-check: --level takes KEY=RULE\n");
                return 1;
            }
            if (a->nlevels < RLC_LEVELS_MAX) {
                a->levels[a->nlevels].key = val;
                a->levels[a->nlevels].key_len = (size_t)(at - val);
                a->levels[a->nlevels].rule = at + 1;
            }
            if (a->nlevels <= RLC_LEVELS_MAX)
                a->nlevels++;
            continue;
        }
        if (strcmp(name, "--rule") == 0) {
            a->rule = val;
            continue;
        }
        if (strcmp(name, "--settle") == 0 || strcmp(name, "--release") == 0 ||
            strcmp(name, "--renew") == 0) {
            int op = name[2] == 's'   ? RLC_OP_SETTLE
                     : name[4] == 'l' ? RLC_OP_RELEASE
                                      : RLC_OP_RENEW;
            if (set_op(a, op, name) != 0)
                return 1;
            a->hex = val;
            continue;
        }
        if (strcmp(name, "--actual") == 0)
            a->have_actual = 1;
        if (strcmp(name, "--tls-ca") == 0) {
            a->tls_ca = val;
            continue;
        }
        if (strcmp(name, "--tls-cert") == 0) {
            a->tls_cert = val;
            continue;
        }
        if (strcmp(name, "--tls-key") == 0) {
            a->tls_key = val;
            continue;
        }
        if (strcmp(name, "--tls-server-name") == 0) {
            a->tls_name = val;
            continue;
        }
        if (strcmp(name, "--limit") == 0)
            a->have_limit = 1;
        if (strcmp(name, "--window") == 0)
            a->have_window = 1;
        NUM("--limit", 1, INT64_MAX, a->limit)
        NUM("--window", 1, RLC_WINDOW_MAX_S, a->window)
        NUM("--cost", 1, UINT32_MAX, a->cost)
        NUM("--repeat", 1, 100000000, a->repeat)
        NUM("--timeout", 1, 3600000, a->timeout)
        NUM("--actual", 0, UINT64_MAX, a->actual)
#undef NUM
        fprintf(stderr, "rl-check: unknown option '%s'\n", name);
        return 1;
    }

    if ((a->tls_cert == NULL) != (a->tls_key == NULL)) {
        fprintf(stderr, "rl-check: --tls-cert and --tls-key go together\n");
        return 1;
    }
    if (a->have_actual != (a->op == RLC_OP_SETTLE)) {
        fprintf(stderr, "rl-check: --settle HEX and --actual N go together\n");
        return 1;
    }
    if (a->hex != NULL) {
        /* A handle names what it settles, releases or renews: no key and
         * no limit go with it. */
        if (a->server == NULL) {
            fprintf(stderr, "rl-check: --server is required\n");
            return 1;
        }
        if (a->key != NULL || a->rule != NULL || a->have_limit ||
            a->have_window || a->cost != 0 || a->headers) {
            fprintf(stderr, "rl-check: --settle, --release and --renew take "
                            "a handle, not --key, --rule, --limit, --window, "
                            "--cost or --headers\n");
            return 1;
        }
        return 0;
    }
    if (a->nlevels > 0) {
        if (a->server == NULL) {
            fprintf(stderr, "rl-check: --server is required\n");
            return 1;
        }
        if (a->key != NULL || a->rule != NULL || a->have_limit ||
            a->have_window || a->op != RLC_OP_CHECK) {
            fprintf(stderr, "rl-check: --level takes no --key, --rule, "
                            "--limit, --window, --reserve or --acquire\n");
            return 1;
        }
        return 0;
    }
    if (a->server == NULL || a->key == NULL) {
        fprintf(stderr, "rl-check: --server and --key are required\n");
        return 1;
    }
    if (a->rule != NULL && (a->have_limit || a->have_window)) {
        fprintf(stderr, "rl-check: give --limit/--window or --rule, not "
                        "both\n");
        return 1;
    }
    if (a->rule == NULL && !(a->have_limit && a->have_window)) {
        fprintf(stderr, "rl-check: give --limit N --window SECONDS, or "
                        "--rule NAME\n");
        return 1;
    }
    return 0;
}

/* Decodes hex into out (cap bytes). Returns the length, or -1 after
 * printing why. A handle one byte over the maximum is decoded all the
 * same, so that the library's own refusal is what the user sees. */
static long unhex(const char *hex, uint8_t *out, size_t cap)
{
    size_t n = strlen(hex), i;

    if (n % 2 != 0) {
        fprintf(stderr, "rl-check: the handle '%s' is not hex (odd length)\n",
                hex);
        return -1;
    }
    if (n / 2 > cap) {
        fprintf(stderr, "rl-check: the handle is longer than %d bytes\n",
                RLC_HANDLE_MAX);
        return -1;
    }
    for (i = 0; i < n; i += 2) {
        int hi = rl_hex_digit(hex[i]), lo = rl_hex_digit(hex[i + 1]);
        if (hi < 0 || lo < 0) {
            fprintf(stderr, "rl-check: the handle '%s' is not hex\n", hex);
            return -1;
        }
        out[i / 2] = (uint8_t)(hi << 4 | lo);
    }
    return (long)(n / 2);
}

static void print_hex(const uint8_t *p, size_t n)
{
    size_t i;

    for (i = 0; i < n; i++)
        printf("%02x", p[i]);
}

/* The line for an answer to a handle op. Returns the exit status. */
static int print_handle_op(int op, const rlc_xresult_t *x, uint64_t actual)
{
    if (x->r.code != RLC_CODE_OK) {
        fprintf(stderr, "rl-check: server answered %s: %s\n",
                rlc_code_name(x->r.code),
                x->r.error[0] ? x->r.error : "(no message)");
        return EXIT_ERROR;
    }
    if (op == RLC_OP_SETTLE)
        printf("OK settled actual=%" PRIu64 "\n", actual);
    else if (op == RLC_OP_RELEASE)
        printf("OK released\n");
    else
        printf("OK renewed expires_at_ms=%" PRIu64 "\n", x->expires_at_ms);
    return EXIT_ALLOWED;
}

int main(int argc, char **argv)
{
    rlc_options_t o;
    rlc_client_t *c = NULL;
    rlc_check_t req;
    rlc_result_t res;
    rlc_xop_t xop;
    rlc_xresult_t xres;
    uint8_t handle[RLC_HANDLE_MAX + 1];
    args_t a;
    uint64_t i;
    int rc, status = EXIT_ERROR;

    if (parse_args(argc, argv, &a) != 0) {
        usage(stderr);
        return EXIT_ERROR;
    }
    /* A malformed handle is the user's to fix before any connecting. */
    memset(&xop, 0, sizeof(xop));
    xop.op = a.op;
    if (a.hex != NULL) {
        long hn = unhex(a.hex, handle, sizeof(handle));
        if (hn < 0)
            return EXIT_ERROR;
        xop.handle = handle;
        xop.handle_len = (size_t)hn;
        xop.actual = a.actual;
    }

    rlc_options_init(&o);
    o.servers = a.server;
    if (a.timeout) {
        o.connect_timeout_ms = (uint32_t)a.timeout;
        o.request_timeout_ms = (uint32_t)a.timeout;
    }
    o.tls = a.tls;
    o.tls_ca_file = a.tls_ca;
    o.tls_cert_file = a.tls_cert;
    o.tls_key_file = a.tls_key;
    o.tls_server_name = a.tls_name;
    o.tls_insecure = a.tls_insecure;
    char why[256];
    rc = rlc_connect_why(&c, &o, why, sizeof(why));
    if (rc != RLC_OK) {
        if (rc == RLC_ETLS && why[0] != '\0')
            fprintf(stderr, "rl-check: cannot connect: %s\n", why);
        else
            fprintf(stderr, "rl-check: cannot connect to %s: %s%s\n", a.server,
                    rc == RLC_ECLOSED ? "connection refused" : rlc_strerror(rc),
                    rc == RLC_EADDR ? " (expected " RL_HOSTPORT_HELP ")" : "");
        return EXIT_ERROR;
    }

    memset(&req, 0, sizeof(req));
    req.key = a.key;
    req.cost = (uint32_t)a.cost;
    req.limit = a.limit;
    req.window_s = (uint32_t)a.window;
    req.rule = a.rule;
    req.levels = a.nlevels > 0 ? a.levels : NULL;
    req.nlevels = a.nlevels;
    xop.check = req;
    for (i = 0; i < a.repeat; i++) {
        if (a.op == RLC_OP_CHECK) {
            rc = rlc_check(c, &req, &res);
        } else {
            rc = rlc_xop(c, &xop, &xres);
            res = xres.r;
        }
        if (rc == RLC_EHANDLE) {
            fprintf(stderr, "rl-check: %s\n", rlc_strerror(rc));
            status = EXIT_ERROR;
            break;
        }
        if (rc == RLC_OK && a.hex != NULL) {
            status = print_handle_op(a.op, &xres, a.actual);
            if (status != EXIT_ALLOWED)
                break;
            continue;
        }
        if (rc != RLC_OK) {
            const char *last = rlc_last_error(c);
            fprintf(stderr, "rl-check: %s: %s%s%s%s\n", rlc_server(c),
                    rlc_strerror(rc), last[0] != '\0' ? " (" : "", last,
                    last[0] != '\0' ? ")" : "");
            status = EXIT_ERROR;
            break;
        }
        if (res.code == RLC_CODE_OK) {
            /* New fields go at the end: scripts read the first ones. */
            printf("OK used=%" PRIu64 " remaining=%" PRIu64 " limit=%" PRIu64
                   " reset_after_ms=%" PRIu64 " window=%" PRIu32 "s%s",
                   res.used, res.remaining, res.limit, res.reset_after_ms,
                   res.window_s, res.shadow_refused ? " shadow_refused" : "");
            if (a.nlevels > 0)
                printf(" level=%" PRIu32, res.level);
            if (a.op != RLC_OP_CHECK) {
                printf(" handle=");
                print_hex(xres.handle, xres.handle_len);
                printf(" expires_at_ms=%" PRIu64 "%s", xres.expires_at_ms,
                       xres.failed_open ? " failed_open" : "");
            }
            printf("\n");
            status = EXIT_ALLOWED;
        } else if (res.code == RLC_CODE_OVER_LIMIT) {
            printf("OVER_LIMIT used=%" PRIu64 " remaining=%" PRIu64
                   " limit=%" PRIu64 " retry_after_ms=%" PRIu64
                   " window=%" PRIu32 "s",
                   res.used, res.remaining, res.limit, res.retry_after_ms,
                   res.window_s);
            if (a.nlevels > 0)
                printf(" level=%" PRIu32, res.level);
            printf("\n");
            status = EXIT_OVER;
        } else {
            fprintf(stderr, "rl-check: server answered %s: %s\n",
                    rlc_code_name(res.code),
                    res.error[0] ? res.error : "(no message)");
            status = EXIT_ERROR;
            break;
        }
        if (a.headers) {
            rlc_http_header_t h[RLC_HTTP_HEADERS_MAX];
            /* The policy: the rule, or the deciding level's. */
            const char *pol =
                a.nlevels > 0 && res.level >= 1 && res.level <= RLC_LEVELS_MAX
                    ? a.levels[res.level - 1].rule
                    : a.rule;
            int k, n = rlc_http_headers(&res, pol, h, RLC_HTTP_HEADERS_MAX);
            for (k = 0; k < n; k++)
                printf("  %s: %s\n", h[k].name, h[k].value);
        }
        /* An allowed answer can still carry news, e.g. that the server
         * could not reach its store and failed open. */
        if (res.error[0])
            fprintf(stderr, "rl-check: note from server: %s\n", res.error);
    }
    if (fflush(stdout) != 0) {
        fprintf(stderr, "rl-check: writing output: %s\n", strerror(errno));
        status = EXIT_ERROR;
    }
    rlc_free(c);
    return status;
}
