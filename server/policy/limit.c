/* A limit and its syntax; see limit.h. */
#include "policy/limit.h"

#include <stdio.h>
#include <string.h>

#include "rl_error.h"
#include "rl_parse.h"
#include "rl_window.h"

static const char *const algo_names[RL_ALGO_MAX] = {
    [RL_ALGO_FIXED] = "fixed-window",
    [RL_ALGO_SLIDING_COUNTER] = "sliding-window-counter",
    [RL_ALGO_GCRA] = "gcra",
    [RL_ALGO_SLIDING_LOG] = "sliding-window",
};

/* --sliding-window-max: the largest sliding-window limit a file may set. */
static uint64_t swl_max = RLS_SWL_MAX_DEFAULT;

void rls_limit_set_swl_max(uint64_t max)
{
    swl_max = max < 1 ? 1 : max > RL_SWL_LIMIT_MAX ? RL_SWL_LIMIT_MAX : max;
}

uint64_t rls_limit_swl_max(void)
{
    return swl_max;
}

static int word_is(const char *s, size_t len, const char *w)
{
    return len == strlen(w) && memcmp(s, w, len) == 0;
}

const char *rls_algo_name(int algo)
{
    return algo >= 0 && algo < RL_ALGO_MAX ? algo_names[algo] : "unknown";
}

int rls_algo_parse(const char *s, size_t len, const char **why)
{
    int a;

    for (a = 0; a < RL_ALGO_MAX; a++)
        if (word_is(s, len, algo_names[a]))
            return a;
    *why = "unknown algorithm (fixed-window, sliding-window, "
           "sliding-window-counter or gcra)";
    return RL_EINVAL;
}

int rls_phase_parse(const char *s, size_t len)
{
    if (word_is(s, len, "aligned"))
        return 0;
    if (word_is(s, len, "per-caller"))
        return 1;
    return RL_EINVAL;
}

int rls_burst_parse(const char *s, size_t len, uint64_t *out, const char **why)
{
    if (rl_parse_u64n(s, len, 0, INT64_MAX, out) != RL_OK) {
        *why = "the burst must be a whole number from 1 to 2^63-1";
        return RL_EINVAL;
    }
    if (*out == 0) {
        *why = "the burst must be at least 1";
        return RL_EINVAL;
    }
    return RL_OK;
}

int rls_duration_parse(const char *s, size_t len, uint32_t *out)
{
    uint64_t secs, unit = 1;

    if (len > 0) {
        switch (s[len - 1]) {
        case 's':
            unit = 1;
            len--;
            break;
        case 'm':
            unit = 60;
            len--;
            break;
        case 'h':
            unit = 3600;
            len--;
            break;
        case 'd':
            unit = 86400;
            len--;
            break;
        }
    }
    if (rl_parse_u64n(s, len, 0, RL_WINDOW_MAX_S, &secs) != RL_OK ||
        secs * unit > RL_WINDOW_MAX_S || secs == 0)
        return RL_EINVAL;
    *out = (uint32_t)(secs * unit);
    return RL_OK;
}

int rls_rate_parse(const char *s, size_t len, rls_limit_t *out,
                   const char **why)
{
    const char *slash = memchr(s, '/', len), *d;
    uint64_t n;

    if (slash == NULL) {
        *why = "expected N/DURATION, e.g. 100/1m";
        return RL_EINVAL;
    }
    if (rl_parse_u64n(s, (size_t)(slash - s), 0, INT64_MAX, &n) != RL_OK) {
        *why = "the limit must be a whole number from 1 to 2^63-1";
        return RL_EINVAL;
    }
    if (n == 0) {
        *why = "the limit must be at least 1 (mode: off allows everything)";
        return RL_EINVAL;
    }
    d = slash + 1;
    if (rls_duration_parse(d, len - (size_t)(d - s), &out->window_s) != RL_OK) {
        *why = "the duration must be 1s to 366d: a number with s, m, h or d,"
               " or bare seconds";
        return RL_EINVAL;
    }
    out->limit = n;
    return RL_OK;
}

int rls_limit_check(rls_limit_t *l, const char **why)
{
    uint64_t t;

    if (l->algo >= RL_ALGO_MAX) {
        *why = "unknown algorithm (fixed-window, sliding-window, "
               "sliding-window-counter or gcra)";
        return RL_EINVAL;
    }
    if (l->algo == RL_ALGO_SLIDING_LOG) {
        /* Every admission is an entry of the caller's log (24 bytes in
         * Redis): the cap bounds a caller's log and the work to read it. */
        static char msg[96];
        if (l->burst != 0) {
            *why = "burst is for gcra only";
            return RL_EINVAL;
        }
        if (l->phase != 0) {
            *why = "per-caller staggers windows, and a sliding window has "
                   "none";
            return RL_EINVAL;
        }
        if (l->limit > swl_max) {
            snprintf(msg, sizeof(msg),
                     "a sliding-window limit must be at most %llu "
                     "(--sliding-window-max)",
                     (unsigned long long)swl_max);
            *why = msg;
            return RL_EINVAL;
        }
        l->t_us = 0;
        return RL_OK;
    }
    if (l->algo != RL_ALGO_GCRA) {
        if (l->burst != 0) {
            /* A window's limit is its burst already. */
            *why = "burst is for gcra only";
            return RL_EINVAL;
        }
        /* Past this, limit x weight would leave the doubles the Redis
         * script counts in exactly (rl_admit.h). */
        if (l->algo == RL_ALGO_SLIDING_COUNTER && l->limit > RL_SWC_LIMIT_MAX) {
            *why = "a sliding-window-counter's limit must be at most 2^36 "
                   "(68719476736)";
            return RL_EINVAL;
        }
        l->t_us = 0;
        return RL_OK;
    }
    if (l->phase != 0) {
        *why = "per-caller staggers windows, and a gcra has none";
        return RL_EINVAL;
    }
    if ((t = rl_gcra_interval_us(l->limit, l->window_s)) == 0) {
        *why = "a gcra's rate must be at most 1 per microsecond";
        return RL_EINVAL;
    }
    if (l->burst == 0)
        l->burst = l->limit;
    if (l->burst > RL_GCRA_CAP_MAX_US / t) {
        *why = "a gcra's burst x interval (DURATION / N) must be at most 366 "
               "days";
        return RL_EINVAL;
    }
    l->t_us = t;
    return RL_OK;
}

int rls_limit_parse(const char *s, size_t len, rls_limit_t *out,
                    const char **why)
{
    const char *end = s + len, *w = memchr(s, ':', len), *next;
    int have_algo = 0, have_phase = 0, have_burst = 0, v;
    rls_limit_t l;

    memset(&l, 0, sizeof(l));
    if (rls_rate_parse(s, w != NULL ? (size_t)(w - s) : len, &l, why) != RL_OK)
        return RL_EINVAL;
    /* Each option once, in any order: a second one is a mistake rather
     * than a correction. */
    for (; w != NULL; w = next) {
        size_t wl;

        w++;
        next = memchr(w, ':', (size_t)(end - w));
        wl = (size_t)((next != NULL ? next : end) - w);
        if (wl > 6 && memcmp(w, "burst=", 6) == 0) {
            if (have_burst++) {
                *why = "burst is given twice";
                return RL_EINVAL;
            }
            if (rls_burst_parse(w + 6, wl - 6, &l.burst, why) != RL_OK)
                return RL_EINVAL;
        } else if ((v = rls_phase_parse(w, wl)) >= 0) {
            if (have_phase++) {
                *why = "the phase is given twice";
                return RL_EINVAL;
            }
            l.phase = (uint8_t)v;
        } else if (word_is(w, wl, "burst=")) {
            *why = "the burst must be a whole number from 1 to 2^63-1";
            return RL_EINVAL;
        } else if ((v = rls_algo_parse(w, wl, why)) >= 0) {
            if (have_algo++) {
                *why = "the algorithm is given twice";
                return RL_EINVAL;
            }
            l.algo = (uint8_t)v;
        } else {
            *why = "unknown algorithm or option: after N/DURATION come ':' "
                   "and fixed-window, sliding-window, "
                   "sliding-window-counter, gcra, per-caller, aligned or "
                   "burst=B";
            return RL_EINVAL;
        }
    }
    if (rls_limit_check(&l, why) != RL_OK)
        return RL_EINVAL;
    *out = l;
    return RL_OK;
}

size_t rls_limit_format(const rls_limit_t *l, char *buf, size_t len)
{
    static const struct {
        uint32_t secs;
        char unit;
    } units[] = {{86400, 'd'}, {3600, 'h'}, {60, 'm'}, {1, 's'}};
    char burst[32] = "";
    size_t i;
    int n;

    for (i = 0; l->window_s % units[i].secs != 0; i++)
        ;
    /* The burst only when it is not the default, so that a limit written
     * without one reads back as it was written. */
    if (l->algo == RL_ALGO_GCRA && l->burst != l->limit)
        snprintf(burst, sizeof(burst), ":burst=%llu",
                 (unsigned long long)l->burst);
    n = snprintf(buf, len, "%llu/%u%c%s%s%s%s", (unsigned long long)l->limit,
                 l->window_s / units[i].secs, units[i].unit,
                 l->algo != RL_ALGO_FIXED ? ":" : "",
                 l->algo != RL_ALGO_FIXED ? rls_algo_name(l->algo) : "",
                 l->phase ? ":per-caller" : "", burst);
    return n < 0 ? 0 : (size_t)n < len ? (size_t)n : len - 1;
}
