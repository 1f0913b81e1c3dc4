/* What Redis Sentinel answers: see redis_sentinel_parse.h.
 *
 * A host is taken as the sentinel gives it (an IP literal, or a name when
 * the sentinels run with resolve-hostnames), but only if it is 1 to
 * RLS_SENTINEL_HOST_MAX bytes of printable ASCII without spaces, not
 * starting with '/': it goes into log lines and to getaddrinfo. A port is 1 to
 * 5 decimal digits, 1 to 65535, no sign. */
#include <string.h>

#include "rl_error.h"
#include "store/redis_sentinel_parse.h"

/* Checks and copies a host of len bytes at s into out. Returns 0 or
 * RL_EINVAL. */
static int take_host(const char *s, size_t len, rls_sentinel_addr_t *out)
{
    size_t i;

    /* A leading '/' would make it a Unix socket's path to the store's
     * connection: a sentinel names network addresses only. */
    if (len == 0 || len > RLS_SENTINEL_HOST_MAX || s[0] == '/')
        return RL_EINVAL;
    for (i = 0; i < len; i++)
        if ((unsigned char)s[i] <= ' ' || (unsigned char)s[i] >= 127)
            return RL_EINVAL;
    memcpy(out->host, s, len);
    out->host[len] = '\0';
    return 0;
}

/* A port of len bytes at s: 1 to 65535 in decimal. Returns it, or
 * RL_EINVAL. */
static int take_port(const char *s, size_t len)
{
    size_t i;
    int v = 0;

    if (len == 0 || len > 5)
        return RL_EINVAL;
    for (i = 0; i < len; i++) {
        if (s[i] < '0' || s[i] > '9')
            return RL_EINVAL;
        v = v * 10 + (s[i] - '0');
    }
    return v >= 1 && v <= 65535 ? v : RL_EINVAL;
}

int rls_sentinel_parse_addr(const redisReply *r, rls_sentinel_addr_t *out)
{
    rls_sentinel_addr_t a;
    const redisReply *h, *p;
    int port;

    if (r == NULL)
        return RL_EINVAL;
    if (r->type == REDIS_REPLY_NIL)
        return RL_EAGAIN;
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 2)
        return RL_EINVAL;
    h = r->element[0];
    p = r->element[1];
    if (h == NULL || p == NULL || h->type != REDIS_REPLY_STRING ||
        p->type != REDIS_REPLY_STRING)
        return RL_EINVAL;
    if (take_host(h->str, h->len, &a) != 0 ||
        (port = take_port(p->str, p->len)) < 0)
        return RL_EINVAL;
    a.port = port;
    *out = a;
    return 0;
}

/* The next space-separated field of [*s, end): its start and length in
 * *f and *n, *s moved past it and the one space after. Returns 0, or
 * RL_EINVAL when it is empty. */
static int field(const char **s, const char *end, const char **f, size_t *n)
{
    const char *sp = memchr(*s, ' ', (size_t)(end - *s));

    *f = *s;
    *n = (size_t)((sp != NULL ? sp : end) - *s);
    *s = sp != NULL ? sp + 1 : end;
    return *n > 0 ? 0 : RL_EINVAL;
}

int rls_sentinel_parse_switch(const char *s, size_t len, const char *name,
                              rls_sentinel_addr_t *from,
                              rls_sentinel_addr_t *to)
{
    const char *end = s + len, *f[5];
    size_t n[5], k;
    int op, np;

    if (s == NULL)
        return RL_EINVAL;
    for (k = 0; k < 5; k++)
        if (s == end || field(&s, end, &f[k], &n[k]) != 0)
            return RL_EINVAL;
    /* Five fields exactly: a sixth, or a trailing space, is not the
     * message Sentinel sends. */
    if (s != end || f[4] + n[4] != end)
        return RL_EINVAL;
    if (take_host(f[1], n[1], from) != 0 || (op = take_port(f[2], n[2])) < 0 ||
        take_host(f[3], n[3], to) != 0 || (np = take_port(f[4], n[4])) < 0)
        return RL_EINVAL;
    for (k = 0; k < n[0]; k++)
        if ((unsigned char)f[0][k] < ' ')
            return RL_EINVAL;
    from->port = op;
    to->port = np;
    return strlen(name) == n[0] && memcmp(name, f[0], n[0]) == 0 ? 0 : 1;
}
