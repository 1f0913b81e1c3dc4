/* Prometheus text exposition (format 0.0.4): the pieces every part of the
 * /metrics page is written with; see prom.h. */
#include "base/prom.h"

#include <stdio.h>
#include <string.h>

#include "rl_error.h"

/* Microseconds as decimal seconds, exactly: 50 -> "0.00005", 2500000 ->
 * "2.5". Prometheus wants base units, and printing through a double would
 * turn bucket bounds into "5e-05". */
static const char *fmt_us(char *s, size_t n, uint64_t us)
{
    size_t len;

    snprintf(s, n, "%llu.%06llu", (unsigned long long)(us / 1000000),
             (unsigned long long)(us % 1000000));
    len = strlen(s);
    while (s[len - 1] == '0')
        s[--len] = '\0';
    if (s[len - 1] == '.')
        s[--len] = '\0';
    return s;
}

int rls_prom_u64(rl_buf_t *b, uint64_t v)
{
    char d[20];
    size_t n = sizeof(d);

    do {
        d[--n] = (char)('0' + v % 10);
        v /= 10;
    } while (v != 0);
    return rl_buf_append(b, d + n, sizeof(d) - n);
}

int rls_prom_family(rl_buf_t *b, const char *name, const char *type,
                  const char *help)
{
    return rl_buf_printf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* A family of one sample, without labels. */
static int single(rl_buf_t *b, const char *name, const char *type,
                  const char *help, uint64_t v)
{
    int rc = rls_prom_family(b, name, type, help);

    return rc != RL_OK ? rc : rl_buf_printf(b, "%s %llu\n", name, (unsigned long long)v);
}

int rls_prom_counter(rl_buf_t *b, const char *name, const char *help, uint64_t v)
{
    return single(b, name, "counter", help, v);
}

int rls_prom_gauge(rl_buf_t *b, const char *name, const char *help, uint64_t v)
{
    return single(b, name, "gauge", help, v);
}

int rls_prom_sample(rl_buf_t *b, const char *name, const char *label,
                    const char *value, uint64_t v)
{
    return rl_buf_printf(b, "%s{%s=\"%s\"} %llu\n", name, label, value,
                         (unsigned long long)v);
}

int rls_prom_labelled(rl_buf_t *b, const char *name, const char *help,
                    const char *label, const char *const *names,
                    const uint64_t *v, size_t from, size_t to)
{
    int rc = rls_prom_family(b, name, "counter", help);
    size_t i;

    for (i = from; i < to && rc == RL_OK; i++)
        rc = rls_prom_sample(b, name, label, names[i], v[i]);
    return rc;
}

int rls_prom_histogram_series(rl_buf_t *b, const char *name,
                              const char *label, const char *value,
                              const rls_hist_t *h, int us)
{
    char le[32], sum[32], pre[256] = "", only[256] = "";
    uint64_t cum = 0;
    size_t i;
    int rc;

    /* The series' own label before le, {node="a",le="0.5"}, and alone on
     * _sum and _count, {node="a"}. */
    if (label != NULL) {
        snprintf(pre, sizeof(pre), "%s=\"%s\",", label, value);
        snprintf(only, sizeof(only), "{%s=\"%s\"}", label, value);
    }
    for (i = 0; i < h->n && h->bounds != NULL; i++) {
        cum += h->counts[i];
        if (us)
            fmt_us(le, sizeof(le), h->bounds[i]);
        else
            snprintf(le, sizeof(le), "%llu", (unsigned long long)h->bounds[i]);
        if ((rc = rl_buf_printf(b, "%s_bucket{%sle=\"%s\"} %llu\n", name, pre,
                                le, (unsigned long long)cum)) != RL_OK)
            return rc;
    }
    cum += h->counts[i < RLS_HIST_MAX ? i : RLS_HIST_MAX];
    if (us)
        fmt_us(sum, sizeof(sum), h->sum);
    else
        snprintf(sum, sizeof(sum), "%llu", (unsigned long long)h->sum);
    return rl_buf_printf(b,
                         "%s_bucket{%sle=\"+Inf\"} %llu\n%s_sum%s %s\n"
                         "%s_count%s %llu\n",
                         name, pre, (unsigned long long)cum, name, only, sum,
                         name, only, (unsigned long long)cum);
}

int rls_prom_histogram(rl_buf_t *b, const char *name, const char *help,
                       const rls_hist_t *h, int us)
{
    int rc;

    if ((rc = rls_prom_family(b, name, "histogram", help)) != RL_OK)
        return rc;
    return rls_prom_histogram_series(b, name, NULL, NULL, h, us);
}
