/* rl-fit: picks a rate-limit threshold from access logs people already
 * have. Streams each log once (gzip or plain, in the order given),
 * decides every caller's requests under each candidate threshold with the
 * service's own admission code (fit_sim.c over lib/rl_admit.h), prints
 * per candidate the callers, caller-periods and requests it would refuse,
 * recommends the lowest that meets the targets, and plots refused share
 * against threshold as SVG. See README.md, "Picking a threshold". */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "fit_log.h"
#include "fit_sim.h"
#include "rl_error.h"
#include "rl_hash.h"

#define READ_CHUNK (1u << 20)

typedef struct counts_s {
    uint64_t lines, malformed, nokey, late, dropped;
} counts_t;

typedef struct fit_s {
    rlf_conf_t conf;
    int fmt_auto;
    rlf_sim_t *sim;
    rl_hash_key_t hk;
    uint64_t latest_ms;
    uint64_t max_log_mb;
    counts_t n;
} fit_t;

static void usage(FILE *f)
{
    fprintf(f, "usage: rl-fit [options] LOG...   (LOG: a file, gzip or plain, "
               "or - for stdin)\n"
               "  --format auto|combined|json  line format (auto: per file, "
               "from its first line)\n"
               "  --key EXPR        caller key: field names joined by |, the "
               "first present wins\n"
               "                    (default user|addr; combined: user, addr, "
               "ident; json: any\n"
               "                    top-level field)\n"
               "  --json-time NAME  json: the time field (default time)\n"
               "  --json-key EXPR   json: the same as --key\n"
               "  --json-cost NAME  json: a field holding each request's cost "
               "(default: cost 1)\n"
               "  --algo A          fixed-window (default), "
               "sliding-window-counter, gcra,\n"
               "                    sliding-window (the exact log)\n"
               "  --max-log-mb N    sliding-window: the logs' memory cap "
               "(default 1024); past it\n"
               "                    rl-fit stops and says what it needs\n"
               "  --window S[:M]    a window of S seconds whose limit is M x "
               "the threshold\n"
               "                    (repeatable, up to 8; default 300; the "
               "first is the period)\n"
               "  --thresholds LIST ascending, comma-separated (default "
               "1,2,5,10,...,100000)\n"
               "  --target-users PCT    most callers refused (default 0.1)\n"
               "  --target-periods PCT  most caller-periods refused (default "
               "0.01)\n"
               "  --max-users N     callers held (default 4000000); more are "
               "counted as dropped\n"
               "  --svg FILE        plot of refused share against threshold\n");
}

static int parse_u64(const char *s, uint64_t max, uint64_t *v)
{
    char *end;
    unsigned long long x;

    if (s[0] < '0' || s[0] > '9')
        return RL_EINVAL;
    errno = 0;
    x = strtoull(s, &end, 10);
    if (errno || *end || x > max)
        return RL_EINVAL;
    *v = x;
    return 0;
}

static int parse_pct(const char *s, double *v)
{
    char *end;

    errno = 0;
    *v = strtod(s, &end);
    return errno || *end || end == s || !(*v >= 0 && *v <= 100) ? RL_EINVAL : 0;
}

static int parse_thresholds(const char *s, rlf_sim_conf_t *c)
{
    char buf[1024], *tok, *save = NULL;

    if (strlen(s) >= sizeof(buf))
        return RL_EINVAL;
    strcpy(buf, s);
    c->ncand = 0;
    for (tok = strtok_r(buf, ",", &save); tok;
         tok = strtok_r(NULL, ",", &save)) {
        if (c->ncand == RLF_CAND_MAX ||
            parse_u64(tok, UINT32_MAX, &c->cand[c->ncand]) != 0)
            return RL_EINVAL;
        c->ncand++;
    }
    return c->ncand ? 0 : RL_EINVAL;
}

static int parse_window(const char *s, rlf_sim_conf_t *c)
{
    char buf[64], *colon;
    uint64_t w, m = 1;

    if (c->nwin == RL_ADMIT_WINDOWS_MAX || strlen(s) >= sizeof(buf))
        return RL_EINVAL;
    strcpy(buf, s);
    if ((colon = strchr(buf, ':')) != NULL) {
        *colon = '\0';
        if (parse_u64(colon + 1, UINT32_MAX, &m) != 0 || m == 0)
            return RL_EINVAL;
    }
    if (parse_u64(buf, UINT32_MAX, &w) != 0 || w == 0)
        return RL_EINVAL;
    c->window_s[c->nwin] = (uint32_t)w;
    c->mult[c->nwin] = (uint32_t)m;
    c->nwin++;
    return 0;
}

static int parse_algo(const char *s, uint8_t *algo)
{
    if (strcmp(s, "fixed-window") == 0 || strcmp(s, "fixed") == 0)
        *algo = RL_ALGO_FIXED;
    else if (strcmp(s, "sliding-window-counter") == 0 || strcmp(s, "swc") == 0)
        *algo = RL_ALGO_SLIDING_COUNTER;
    else if (strcmp(s, "gcra") == 0)
        *algo = RL_ALGO_GCRA;
    else if (strcmp(s, "sliding-window") == 0 || strcmp(s, "swl") == 0)
        *algo = RL_ALGO_SLIDING_LOG;
    else
        return RL_EINVAL;
    return 0;
}

static const char *algo_name(uint8_t algo)
{
    return algo == RL_ALGO_SLIDING_COUNTER ? "sliding-window-counter"
           : algo == RL_ALGO_GCRA          ? "gcra"
           : algo == RL_ALGO_SLIDING_LOG   ? "sliding-window"
                                           : "fixed-window";
}

/* One line. Out-of-order lines run at the latest time seen (each
 * caller's clock must not go back), and are counted. */
static int one_line(fit_t *f, const char *p, size_t n)
{
    rlf_line_t ln;
    unsigned char kb[1 + RLF_LINE_MAX];
    int rc;

    f->n.lines++;
    if (f->fmt_auto && f->conf.fmt == 0) {
        size_t i = 0;
        while (i < n && (p[i] == ' ' || p[i] == '\t'))
            i++;
        f->conf.fmt = i < n && p[i] == '{' ? RLF_FMT_JSON : RLF_FMT_COMBINED;
    }
    rc = rlf_parse_line(&f->conf, p, n, &ln);
    if (rc == RLF_NOKEY) {
        f->n.nokey++;
        return 0;
    }
    if (rc != 0) {
        f->n.malformed++;
        return 0;
    }
    if (ln.ms < f->latest_ms) {
        f->n.late++;
        ln.ms = f->latest_ms;
    }
    f->latest_ms = ln.ms;
    /* the term is part of the key: user "1.2.3.4" is not address 1.2.3.4 */
    kb[0] = (unsigned char)ln.term;
    memcpy(kb + 1, ln.key, ln.key_len);
    rc = rlf_sim_add(f->sim, rl_hash(&f->hk, kb, ln.key_len + 1), ln.ms,
                     ln.cost);
    if (rc == RL_EFULL) {
        f->n.dropped++;
        return 0;
    }
    if (rc == RLF_ELOG) {
        rlf_log_stats_t ls;
        rlf_sim_totals_t t;
        rlf_sim_log_stats(f->sim, &ls);
        rlf_sim_totals(f->sim, &t);
        fprintf(stderr,
                "rl-fit: the sliding-window logs need more than --max-log-mb "
                "%llu at line %llu (time %llu ms): %llu entries of the %llu "
                "callers so far take %llu MB, and with every log full these "
                "callers and thresholds need up to %llu MB (later callers "
                "add to it). Raise --max-log-mb, or try fewer or lower "
                "thresholds, or a shorter log\n",
                (unsigned long long)(f->max_log_mb),
                (unsigned long long)f->n.lines, (unsigned long long)ln.ms,
                (unsigned long long)ls.entries, (unsigned long long)t.users,
                (unsigned long long)((ls.bytes + (1u << 20) - 1) >> 20),
                (unsigned long long)((ls.worst_bytes + (1u << 20) - 1) >> 20));
    }
    return rc;
}

/* Streams one file, line by line; a line longer than RLF_LINE_MAX is
 * skipped to its newline and counted as malformed. Returns 0, 1 (a read
 * error, said on stderr; the lines before it count), RL_ENOMEM or RLF_ELOG
 * (said on stderr). */
static int one_file(fit_t *f, const char *path, char *buf, size_t cap)
{
    gzFile gz;
    size_t start = 0, end = 0;
    int skipping = 0, eof = 0, trunc = 0, rc = 0, r;

    if (strcmp(path, "-") == 0) {
        int fd = dup(0);
        gz = fd >= 0 ? gzdopen(fd, "rb") : NULL;
    } else {
        gz = gzopen(path, "rb");
    }
    if (gz == NULL) {
        fprintf(stderr, "rl-fit: %s: %s\n", path, strerror(errno));
        return 1;
    }
    gzbuffer(gz, 256 * 1024);
    if (f->fmt_auto)
        f->conf.fmt = 0;
    while (rc == 0) {
        char *nl = end > start ? memchr(buf + start, '\n', end - start) : NULL;
        if (nl != NULL) {
            size_t len = (size_t)(nl - (buf + start));
            if (skipping) {
                skipping = 0;
                f->n.lines++;
                f->n.malformed++;
            } else {
                rc = one_line(f, buf + start, len);
            }
            start += len + 1;
            continue;
        }
        if (end - start > RLF_LINE_MAX) {
            skipping = 1; /* drop what we hold of this line */
            start = end;
        }
        if (eof) {
            if (end > start || skipping) {
                if (skipping) {
                    f->n.lines++;
                    f->n.malformed++;
                } else {
                    rc = one_line(f, buf + start, end - start);
                }
            }
            break;
        }
        memmove(buf, buf + start, end - start);
        end -= start;
        start = 0;
        r = gzread(gz, buf + end, (unsigned)(cap - end));
        if (r < 0) {
            int e;
            fprintf(stderr, "rl-fit: %s: %s\n", path, gzerror(gz, &e));
            rc = 1;
            break;
        }
        if (r == 0) {
            int e;
            eof = 1;
            gzerror(gz, &e);
            if (e == Z_BUF_ERROR) { /* ended inside a gzip stream */
                fprintf(stderr, "rl-fit: %s: truncated gzip input\n", path);
                trunc = 1; /* what was read counts, its last line too */
            }
        }
        end += (size_t)r;
    }
    gzclose(gz);
    return rc == 0 && trunc ? 1 : rc;
}

static double pct(uint64_t a, uint64_t b)
{
    return b ? 100.0 * (double)a / (double)b : 0.0;
}

/* refused share (% of requests) against threshold, x on a log scale. */
static int write_svg(const char *path, const rlf_sim_conf_t *c,
                     const double *share, ssize_t rec)
{
    const double W = 640, H = 400, L = 60, R = 20, T = 30, B = 50;
    double lx0, lx1, ymax = 0, x, y;
    FILE *f = fopen(path, "w");
    size_t i;

    if (f == NULL)
        return RL_EIO;
    for (i = 0; i < c->ncand; i++)
        if (share[i] > ymax)
            ymax = share[i];
    if (ymax <= 0)
        ymax = 1;
    lx0 = log10((double)c->cand[0]);
    lx1 = log10((double)c->cand[c->ncand - 1]);
    if (lx1 <= lx0)
        lx1 = lx0 + 1;
#define PX(v) (L + ((log10((double)(v)) - lx0) / (lx1 - lx0)) * (W - L - R))
#define PY(v) (T + (1 - (v) / ymax) * (H - T - B))
    fprintf(f,
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" "
            "height=\"%.0f\" font-family=\"sans-serif\" font-size=\"12\">\n"
            "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n"
            "<text x=\"%.0f\" y=\"18\">requests refused (%%) against "
            "threshold, %s, %u s</text>\n"
            "<line x1=\"%.0f\" y1=\"%.0f\" x2=\"%.0f\" y2=\"%.0f\" "
            "stroke=\"black\"/>\n"
            "<line x1=\"%.0f\" y1=\"%.0f\" x2=\"%.0f\" y2=\"%.0f\" "
            "stroke=\"black\"/>\n",
            W, H, L, algo_name(c->algo), c->window_s[0], L, H - B, W - R, H - B,
            L, T, L, H - B);
    fprintf(f, "<text x=\"5\" y=\"%.0f\">%.3g</text>\n", T + 4, ymax);
    fprintf(f, "<text x=\"5\" y=\"%.0f\">0</text>\n", H - B + 4);
    for (i = 0; i < c->ncand; i++)
        fprintf(f,
                "<text x=\"%.1f\" y=\"%.0f\" text-anchor=\"middle\">%llu"
                "</text>\n",
                PX(c->cand[i]), H - B + 16, (unsigned long long)c->cand[i]);
    fprintf(f,
            "<text x=\"%.0f\" y=\"%.0f\" text-anchor=\"middle\">threshold "
            "(log scale)</text>\n",
            (W + L) / 2, H - 10);
    fprintf(f, "<polyline fill=\"none\" stroke=\"steelblue\" "
               "stroke-width=\"2\" points=\"");
    for (i = 0; i < c->ncand; i++) {
        x = PX(c->cand[i]);
        y = PY(share[i]);
        fprintf(f, "%s%.1f,%.1f", i ? " " : "", x, y);
    }
    fprintf(f, "\"/>\n");
    if (rec >= 0)
        fprintf(f,
                "<line x1=\"%.1f\" y1=\"%.0f\" x2=\"%.1f\" y2=\"%.0f\" "
                "stroke=\"firebrick\" stroke-dasharray=\"4\"/>\n"
                "<text x=\"%.1f\" y=\"%.0f\" fill=\"firebrick\">recommended "
                "%llu</text>\n",
                PX(c->cand[rec]), T, PX(c->cand[rec]), H - B,
                PX(c->cand[rec]) + 4, T + 12, (unsigned long long)c->cand[rec]);
#undef PX
#undef PY
    fprintf(f, "</svg>\n");
    return fclose(f) == 0 ? 0 : RL_EIO;
}

static void report(fit_t *f, const rlf_sim_conf_t *c, double tu, double tp,
                   const char *svg, int *status)
{
    rlf_sim_totals_t t;
    double share[RLF_CAND_MAX];
    ssize_t rec = -1;
    size_t i, j;

    rlf_sim_finish(f->sim);
    rlf_sim_totals(f->sim, &t);
    printf("lines %llu  requests %llu  malformed %llu  no-key %llu  "
           "out-of-order %llu  dropped %llu\n",
           (unsigned long long)f->n.lines, (unsigned long long)t.requests,
           (unsigned long long)f->n.malformed, (unsigned long long)f->n.nokey,
           (unsigned long long)f->n.late, (unsigned long long)f->n.dropped);
    printf("callers %llu  caller-periods %llu  (period %u s, %s",
           (unsigned long long)t.users, (unsigned long long)t.periods,
           c->window_s[0], algo_name(c->algo));
    for (j = 0; j < c->nwin; j++)
        printf("%s%u s x%u", j ? ", " : "; windows ", c->window_s[j],
               c->mult[j]);
    printf(")\n");
    printf("peak use per caller per period: p99 %llu  p99.9 %llu  "
           "p99.99 %llu  max %llu\n",
           (unsigned long long)rlf_sim_peak_quantile(f->sim, 0.99),
           (unsigned long long)rlf_sim_peak_quantile(f->sim, 0.999),
           (unsigned long long)rlf_sim_peak_quantile(f->sim, 0.9999),
           (unsigned long long)rlf_sim_peak_quantile(f->sim, 1.0));
    printf("%12s %14s %9s %14s %9s %14s %9s\n", "threshold", "callers", "%",
           "periods", "%", "refused", "%");
    for (i = 0; i < c->ncand; i++) {
        const rlf_cand_stats_t *s = rlf_sim_cand(f->sim, i);
        double pu = pct(s->users, t.users), pp = pct(s->periods, t.periods);
        share[i] = pct(s->refused, t.requests);
        printf("%12llu %14llu %9.4f %14llu %9.4f %14llu %9.4f\n",
               (unsigned long long)c->cand[i], (unsigned long long)s->users, pu,
               (unsigned long long)s->periods, pp,
               (unsigned long long)s->refused, share[i]);
        /* exact: users x 100 <= target x total, in integers of 1e-6 % */
        if (rec < 0 && t.users > 0 &&
            (double)s->users * 1e8 <= tu * 1e6 * (double)t.users + 0.5 &&
            (double)s->periods * 1e8 <= tp * 1e6 * (double)t.periods + 0.5)
            rec = (ssize_t)i;
    }
    if (rec >= 0) {
        uint64_t p999 = rlf_sim_peak_quantile(f->sim, 0.999);
        printf("recommended %llu  (callers <= %g %%, caller-periods <= %g "
               "%%)",
               (unsigned long long)c->cand[rec], tu, tp);
        if (p999)
            printf("  %.2f x the p99.9 peak",
                   (double)c->cand[rec] / (double)p999);
        printf("\n");
    } else {
        printf("recommended none  (no threshold keeps callers <= %g %% and "
               "caller-periods <= %g %%)\n",
               tu, tp);
    }
    if (f->n.late * 100 > f->n.lines)
        fprintf(stderr,
                "rl-fit: %llu lines were out of order (more than "
                "1 %%): are the files in time order?\n",
                (unsigned long long)f->n.late);
    if (svg && write_svg(svg, c, share, rec) != 0) {
        fprintf(stderr, "rl-fit: %s: cannot write\n", svg);
        *status = 1;
    }
}

int main(int argc, char **argv)
{
    enum {
        O_FMT = 256,
        O_KEY,
        O_JT,
        O_JC,
        O_ALGO,
        O_WIN,
        O_TH,
        O_TU,
        O_TP,
        O_MAX,
        O_SVG,
        O_LOGMB
    };
    static const struct option opts[] = {{"format", 1, NULL, O_FMT},
                                         {"key", 1, NULL, O_KEY},
                                         {"json-key", 1, NULL, O_KEY},
                                         {"json-time", 1, NULL, O_JT},
                                         {"json-cost", 1, NULL, O_JC},
                                         {"algo", 1, NULL, O_ALGO},
                                         {"window", 1, NULL, O_WIN},
                                         {"thresholds", 1, NULL, O_TH},
                                         {"target-users", 1, NULL, O_TU},
                                         {"target-periods", 1, NULL, O_TP},
                                         {"max-users", 1, NULL, O_MAX},
                                         {"svg", 1, NULL, O_SVG},
                                         {"max-log-mb", 1, NULL, O_LOGMB},
                                         {"help", 0, NULL, 'h'},
                                         {NULL, 0, NULL, 0}};
    static const uint64_t def_th[] = {1,     2,     5,     10,    20,   50,
                                      100,   200,   500,   1000,  2000, 5000,
                                      10000, 20000, 50000, 100000};
    rlf_sim_conf_t sc = {.algo = RL_ALGO_FIXED, .max_users = 4000000};
    fit_t f;
    const char *why = NULL, *svg = NULL, *key = "user|addr";
    double tu = 0.1, tp = 0.01;
    uint64_t v = 0;
    char *buf;
    int o, li = 0, i, status = 0, rc = 0;

    memset(&f, 0, sizeof(f));
    f.fmt_auto = 1;
    f.max_log_mb = 1024;
    rlf_name_set(&f.conf.time, "time", 4);
    /* a fixed hash key: the same log gives the same answer every run */
    f.hk.k0 = UINT64_C(0x726c2d6669742d31);
    f.hk.k1 = UINT64_C(0x7468726573686f6c);
    while ((o = getopt_long(argc, argv, "h", opts, &li)) != -1) {
        int bad = 0;
        switch (o) {
        case O_FMT:
            f.fmt_auto = strcmp(optarg, "auto") == 0;
            f.conf.fmt = strcmp(optarg, "json") == 0       ? RLF_FMT_JSON
                         : strcmp(optarg, "combined") == 0 ? RLF_FMT_COMBINED
                                                           : 0;
            bad = !f.fmt_auto && f.conf.fmt == 0;
            break;
        case O_KEY:
            key = optarg;
            break;
        case O_JT:
            bad = rlf_name_set(&f.conf.time, optarg, strlen(optarg)) != 0;
            break;
        case O_JC:
            bad = rlf_name_set(&f.conf.cost, optarg, strlen(optarg)) != 0;
            break;
        case O_ALGO:
            bad = parse_algo(optarg, &sc.algo) != 0;
            break;
        case O_WIN:
            bad = parse_window(optarg, &sc) != 0;
            break;
        case O_TH:
            bad = parse_thresholds(optarg, &sc) != 0;
            break;
        case O_TU:
            bad = parse_pct(optarg, &tu) != 0;
            break;
        case O_TP:
            bad = parse_pct(optarg, &tp) != 0;
            break;
        case O_MAX:
            bad = parse_u64(optarg, UINT32_MAX / 2, &v) != 0 || v == 0;
            sc.max_users = (size_t)v;
            break;
        case O_SVG:
            svg = optarg;
            break;
        case O_LOGMB:
            bad = parse_u64(optarg, UINT64_C(1) << 30, &f.max_log_mb) != 0 ||
                  f.max_log_mb == 0;
            break;
        case 'h':
            usage(stdout);
            return 0;
        default:
            usage(stderr);
            return 2;
        }
        if (bad) {
            fprintf(stderr, "rl-fit: bad value for --%s: %s\n", opts[li].name,
                    optarg);
            return 2;
        }
    }
    if (optind == argc) {
        usage(stderr);
        return 2;
    }
    if (rlf_key_parse(&f.conf, key, &why) != 0) {
        fprintf(stderr, "rl-fit: --key: %s\n", why);
        return 2;
    }
    for (i = 0; f.conf.fmt == RLF_FMT_COMBINED && i < (int)f.conf.nkey; i++)
        if (strcmp(f.conf.key[i].s, "user") != 0 &&
            strcmp(f.conf.key[i].s, "addr") != 0 &&
            strcmp(f.conf.key[i].s, "ident") != 0) {
            fprintf(stderr,
                    "rl-fit: --key: a combined log has user, addr "
                    "and ident, not %s\n",
                    f.conf.key[i].s);
            return 2;
        }
    if (sc.nwin == 0)
        parse_window("300", &sc);
    if (sc.ncand == 0) {
        memcpy(sc.cand, def_th, sizeof(def_th));
        sc.ncand = sizeof(def_th) / sizeof(def_th[0]);
    }
    sc.max_log_bytes = f.max_log_mb << 20;
    if ((rc = rlf_sim_new(&f.sim, &sc, &why)) != 0) {
        fprintf(stderr, "rl-fit: %s\n",
                rc == RL_EINVAL ? why : "out of memory");
        return 2;
    }
    fprintf(stderr, "rl-fit: %zu bytes per caller, at most %zu callers\n",
            rlf_sim_rec_bytes(&sc) + 8, sc.max_users);
    if (sc.algo == RL_ALGO_SLIDING_LOG)
        fprintf(stderr,
                "rl-fit: and per caller, candidate and window a log: %zu "
                "bytes, %d per entry (one per millisecond that admitted "
                "something, within the window), at most %llu MB in all\n",
                rlf_sim_log_header_bytes(), RLF_LOG_ENTRY_BYTES,
                (unsigned long long)f.max_log_mb);
    if ((buf = malloc(READ_CHUNK + RLF_LINE_MAX + 1)) == NULL) {
        fprintf(stderr, "rl-fit: out of memory\n");
        return 1;
    }
    for (i = optind; i < argc && rc >= 0; i++) {
        rc = one_file(&f, argv[i], buf, READ_CHUNK + RLF_LINE_MAX + 1);
        if (rc > 0)
            status = 1;
    }
    free(buf);
    if (rc < 0) {
        if (rc != RLF_ELOG)
            fprintf(stderr, "rl-fit: out of memory\n");
        rlf_sim_free(f.sim);
        return 1;
    }
    if (sc.algo == RL_ALGO_SLIDING_LOG) {
        rlf_log_stats_t ls;
        rlf_sim_log_stats(f.sim, &ls);
        fprintf(stderr,
                "rl-fit: the sliding-window logs took at most %.1f MB\n",
                (double)ls.peak_bytes / (1 << 20));
    }
    report(&f, &sc, tu, tp, svg, &status);
    rlf_sim_free(f.sim);
    return status;
}
