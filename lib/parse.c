#include "rl_parse.h"

#include <string.h>

#include "rl_error.h"

int rl_parse_u64n(const char *s, size_t len, uint64_t min, uint64_t max,
                  uint64_t *out)
{
    uint64_t v = 0;
    unsigned d;
    size_t i;

    if (s == NULL || len == 0)
        return RL_EINVAL;
    for (i = 0; i < len; i++) {
        if (s[i] < '0' || s[i] > '9')
            return RL_EINVAL;
        d = (unsigned)(s[i] - '0');
        if (v > (UINT64_MAX - d) / 10)
            return RL_EINVAL; /* past 2^64 - 1 */
        v = v * 10 + d;
    }
    if (v < min || v > max)
        return RL_EINVAL;
    *out = v;
    return RL_OK;
}

int rl_parse_u64(const char *s, uint64_t min, uint64_t max, uint64_t *out)
{
    return s == NULL ? RL_EINVAL : rl_parse_u64n(s, strlen(s), min, max, out);
}

/* rl_parse_hostport with the lowest port allowed. */
static int parse_hostport(const char *s, char *host, size_t hostlen, int *port,
                          uint64_t min_port)
{
    const char *h = s, *colon;
    size_t hl;
    uint64_t p;

    if (s == NULL)
        return RL_EADDR;
    if (*s == '[') {
        const char *close = strchr(s, ']');
        if (close == NULL || close[1] != ':')
            return RL_EADDR;
        h = s + 1;
        hl = (size_t)(close - h);
        colon = close + 1;
    } else {
        /* One colon only: "::1:7390" could be ::1 port 7390 or the
         * address ::1:7390 missing its port; brackets say which. */
        colon = strchr(s, ':');
        if (colon == NULL || strchr(colon + 1, ':') != NULL)
            return RL_EADDR;
        hl = (size_t)(colon - s);
    }
    if (hl == 0 || hl >= hostlen)
        return RL_EADDR;
    if (rl_parse_u64(colon + 1, min_port, 65535, &p) != RL_OK)
        return RL_EADDR;
    memcpy(host, h, hl);
    host[hl] = '\0';
    *port = (int)p;
    return RL_OK;
}

int rl_parse_hostport(const char *s, char *host, size_t hostlen, int *port)
{
    return parse_hostport(s, host, hostlen, port, 1);
}

int rl_parse_listen(const char *s, char *host, size_t hostlen, int *port)
{
    return parse_hostport(s, host, hostlen, port, 0);
}
