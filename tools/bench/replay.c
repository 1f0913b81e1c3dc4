/* --replay: reads an access log one request at a time, with rl-fit's line
 * parsers (tools/fit/fit_log.h, linked, not copied), so that the load
 * loop can send each request at the time the log gives it.
 *
 * The log is streamed through one fixed buffer (gzip or plain: zlib reads
 * both), never loaded whole, so a month of logs replays in the memory of a
 * few megabytes. A line the parser rejects, or whose caller makes no
 * usable key, is counted and skipped; only a log that cannot be read stops
 * the replay, and that is reported too. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "fit_log.h"
#include "rl_error.h"
#include "rlb.h"
#include "rlc.h"

#define READ_CHUNK (256u * 1024)

struct rlb_replay_s {
    gzFile gz;
    const char *path;
    rlf_conf_t conf;
    int fmt_auto;
    char *buf; /* READ_CHUNK + RLF_LINE_MAX + 1 bytes */
    size_t cap, start, end;
    int eof, skipping, done;
    int have_first;
    uint64_t first_ms, latest_ms;
    char key[RLC_KEY_MAX + 1]; /* the prefix, then the caller */
    size_t prefix_len;
    rlb_replay_stats_t st;
};

int rlb_replay_open(rlb_replay_t **out, const rlb_opts_t *o, const char **why)
{
    rlb_replay_t *r;
    size_t i;

    *out = NULL;
    r = calloc(1, sizeof(*r));
    if (r == NULL) {
        *why = "out of memory";
        return RL_ENOMEM;
    }
    r->path = o->replay_path;
    r->fmt_auto = o->log_format == NULL || strcmp(o->log_format, "auto") == 0;
    if (!r->fmt_auto) {
        r->conf.fmt = strcmp(o->log_format, "json") == 0 ? RLF_FMT_JSON
                      : strcmp(o->log_format, "combined") == 0
                          ? RLF_FMT_COMBINED
                          : 0;
        if (r->conf.fmt == 0) {
            *why = "--format wants auto, combined or json";
            goto fail;
        }
    }
    if (rlf_key_parse(&r->conf, o->log_key ? o->log_key : "user|addr", why) !=
        0)
        goto fail;
    /* rl-fit's own check: a combined line has only these three fields. */
    for (i = 0; r->conf.fmt == RLF_FMT_COMBINED && i < r->conf.nkey; i++)
        if (strcmp(r->conf.key[i].s, "user") != 0 &&
            strcmp(r->conf.key[i].s, "addr") != 0 &&
            strcmp(r->conf.key[i].s, "ident") != 0) {
            *why = "--key: a combined log has user, addr and ident";
            goto fail;
        }
    if (rlf_name_set(&r->conf.time, o->log_time ? o->log_time : "time",
                     strlen(o->log_time ? o->log_time : "time")) != 0) {
        *why = "--json-time wants a field name of 1 to 64 bytes";
        goto fail;
    }
    if (o->log_cost != NULL &&
        rlf_name_set(&r->conf.cost, o->log_cost, strlen(o->log_cost)) != 0) {
        *why = "--json-cost wants a field name of 1 to 64 bytes";
        goto fail;
    }
    r->prefix_len = strlen(o->key_prefix);
    if (r->prefix_len >= RLC_KEY_MAX) {
        *why = "--key-prefix leaves no room for a caller";
        goto fail;
    }
    memcpy(r->key, o->key_prefix, r->prefix_len);
    r->cap = READ_CHUNK + RLF_LINE_MAX + 1;
    r->buf = malloc(r->cap);
    if (r->buf == NULL) {
        *why = "out of memory";
        rlb_replay_close(r);
        return RL_ENOMEM;
    }
    if (strcmp(r->path, "-") == 0) {
        int fd = dup(STDIN_FILENO);
        r->gz = fd >= 0 ? gzdopen(fd, "rb") : NULL;
        if (r->gz == NULL && fd >= 0)
            close(fd);
    } else {
        r->gz = gzopen(r->path, "rb");
    }
    if (r->gz == NULL) {
        *why = strerror(errno ? errno : ENOMEM);
        rlb_replay_close(r);
        return RL_EIO;
    }
    gzbuffer(r->gz, 256 * 1024);
    *out = r;
    return 0;
fail:
    rlb_replay_close(r);
    return RL_EINVAL;
}

/* One whole line. Returns 1 with *q filled when it makes a request, else 0
 * (counted as what it is). */
static int take(rlb_replay_t *r, const char *p, size_t n, rlb_replay_req_t *q)
{
    rlf_line_t ln;
    int rc;

    r->st.lines++;
    if (r->fmt_auto && r->conf.fmt == 0) {
        size_t i = 0;
        while (i < n && (p[i] == ' ' || p[i] == '\t'))
            i++;
        r->conf.fmt = i < n && p[i] == '{' ? RLF_FMT_JSON : RLF_FMT_COMBINED;
    }
    rc = rlf_parse_line(&r->conf, p, n, &ln);
    if (rc == RLF_NOKEY) {
        r->st.nokey++;
        return 0;
    }
    if (rc != 0) {
        r->st.malformed++;
        return 0;
    }
    /* librlc would refuse the key: too long with the prefix, or a NUL. */
    if (ln.key_len > RLC_KEY_MAX - r->prefix_len ||
        memchr(ln.key, '\0', ln.key_len) != NULL) {
        r->st.bad_key++;
        return 0;
    }
    memcpy(r->key + r->prefix_len, ln.key, ln.key_len);
    if (!r->have_first) {
        r->have_first = 1;
        r->first_ms = r->latest_ms = ln.ms;
        r->st.first_ms = ln.ms;
    }
    /* As rl-fit does: a line earlier than one before it runs at the latest
     * time seen, so the schedule never goes back. */
    if (ln.ms < r->latest_ms) {
        r->st.out_of_order++;
        ln.ms = r->latest_ms;
    }
    r->latest_ms = ln.ms;
    r->st.last_ms = ln.ms;
    r->st.requests++;
    q->off_ms = ln.ms - r->first_ms;
    q->cost = (uint32_t)ln.cost; /* at most RLF_COST_MAX */
    q->key = r->key;
    q->key_len = r->prefix_len + ln.key_len;
    return 1;
}

/* The buffer's next bytes from the file. Sets eof at the end, or on an
 * error (then read_error, said on stderr). */
static void refill(rlb_replay_t *r)
{
    int n, e;

    memmove(r->buf, r->buf + r->start, r->end - r->start);
    r->end -= r->start;
    r->start = 0;
    n = gzread(r->gz, r->buf + r->end, (unsigned)(r->cap - r->end));
    if (n < 0) {
        fprintf(stderr, "rl-bench: --replay %s: %s\n", r->path,
                gzerror(r->gz, &e));
        r->st.read_error = 1;
        r->eof = 1;
        return;
    }
    if (n == 0) {
        r->eof = 1;
        gzerror(r->gz, &e);
        if (e == Z_BUF_ERROR) { /* ended inside a gzip stream */
            fprintf(stderr, "rl-bench: --replay %s: truncated gzip input\n",
                    r->path);
            r->st.read_error = 1; /* what was read is replayed all the same */
        }
    }
    r->end += (size_t)n;
}

int rlb_replay_next(rlb_replay_t *r, rlb_replay_req_t *q)
{
    while (!r->done) {
        char *nl = r->end > r->start
                       ? memchr(r->buf + r->start, '\n', r->end - r->start)
                       : NULL;
        if (nl != NULL) {
            size_t len = (size_t)(nl - (r->buf + r->start));
            const char *p = r->buf + r->start;
            r->start += len + 1;
            if (r->skipping) {
                r->skipping = 0;
                r->st.lines++;
                r->st.malformed++;
                continue;
            }
            if (take(r, p, len, q))
                return 1;
            continue;
        }
        /* A line longer than any the parser takes: dropped to its
         * newline, and counted as malformed (as rl-fit counts it). */
        if (r->end - r->start > RLF_LINE_MAX) {
            r->skipping = 1;
            r->start = r->end;
        }
        if (r->eof) {
            /* The last line, without a newline. */
            const char *p = r->buf + r->start;
            size_t len = r->end - r->start;
            int skipping = r->skipping;
            r->done = 1;
            r->start = r->end;
            if (skipping) {
                r->st.lines++;
                r->st.malformed++;
            } else if (len > 0 && take(r, p, len, q)) {
                return 1;
            }
            break;
        }
        refill(r);
    }
    return 0;
}

const rlb_replay_stats_t *rlb_replay_stats(const rlb_replay_t *r)
{
    return &r->st;
}

void rlb_replay_close(rlb_replay_t *r)
{
    if (r == NULL)
        return;
    if (r->gz != NULL)
        gzclose(r->gz);
    free(r->buf);
    free(r);
}
