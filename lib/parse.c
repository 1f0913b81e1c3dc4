#include "rl_parse.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "rl_error.h"

int rl_parse_u64(const char *s, uint64_t min, uint64_t max, uint64_t *out)
{
    char *end;
    unsigned long long v;

    /* strtoull would take a sign or leading space: only digits are a
     * number here. */
    if (s == NULL || *s < '0' || *s > '9')
        return RL_EINVAL;
    errno = 0;
    v = strtoull(s, &end, 10);
    if (errno != 0 || *end != '\0' || v < min || v > max)
        return RL_EINVAL;
    *out = v;
    return RL_OK;
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
