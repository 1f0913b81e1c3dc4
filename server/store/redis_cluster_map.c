/* Slots, the slot-map reply parser and the redirection parser; see
 * redis_cluster_map.h. Every length and index from a reply is checked
 * before use: a reply is input from the network. */
#include <stdio.h>
#include <string.h>

#include "rl_error.h"
#include "store/redis_cluster_map.h"

/* CRC16-CCITT (XMODEM), polynomial 0x1021, as Redis's crc16.c. */
static uint16_t crc16(const char *buf, size_t len)
{
    uint16_t crc = 0;
    size_t i;
    int b;

    for (i = 0; i < len; i++) {
        crc ^= (uint16_t)((unsigned char)buf[i] << 8);
        for (b = 0; b < 8; b++)
            crc = (crc & 0x8000) ? (uint16_t)((crc << 1) ^ 0x1021)
                                 : (uint16_t)(crc << 1);
    }
    return crc;
}

unsigned rls_key_slot(const char *key, size_t len)
{
    size_t s, e;

    for (s = 0; s < len && key[s] != '{'; s++)
        ;
    if (s == len)
        return crc16(key, len) & (RLS_SLOTS - 1);
    for (e = s + 1; e < len && key[e] != '}'; e++)
        ;
    if (e == len || e == s + 1)
        return crc16(key, len) & (RLS_SLOTS - 1);
    return crc16(key + s + 1, e - s - 1) & (RLS_SLOTS - 1);
}

static int is_str(const redisReply *r)
{
    return r != NULL && (r->type == REDIS_REPLY_STRING ||
                         r->type == REDIS_REPLY_STATUS);
}

static int str_is(const redisReply *r, const char *s)
{
    size_t n = strlen(s);

    return is_str(r) && r->len == n && memcmp(r->str, s, n) == 0;
}

/* An integer reply, or a string of digits, within [lo, hi]. */
static int get_int(const redisReply *r, long long lo, long long hi,
                   long long *v)
{
    long long x = 0;
    size_t i;

    if (r == NULL)
        return RL_EINVAL;
    if (r->type == REDIS_REPLY_INTEGER) {
        x = r->integer;
    } else if (is_str(r) && r->len > 0 && r->len <= 18) {
        for (i = 0; i < r->len; i++) {
            if (r->str[i] < '0' || r->str[i] > '9')
                return RL_EINVAL;
            x = x * 10 + (r->str[i] - '0');
        }
    } else {
        return RL_EINVAL;
    }
    if (x < lo || x > hi)
        return RL_EINVAL;
    *v = x;
    return 0;
}

static int set_host(char *dst, const redisReply *r)
{
    if (!is_str(r) || r->len == 0 || r->len > RLS_NODE_HOST_MAX ||
        memchr(r->str, '\0', r->len) != NULL || strcmp(r->str, "?") == 0)
        return RL_EINVAL;
    memcpy(dst, r->str, r->len);
    dst[r->len] = '\0';
    return 0;
}

static int add_range(rls_slot_range_t *out, size_t cap, size_t *n,
                     long long first, long long last, const char *host,
                     int port)
{
    if (first > last)
        return RL_EINVAL;
    if (*n == cap)
        return RL_EFULL;
    out[*n].first = (uint16_t)first;
    out[*n].last = (uint16_t)last;
    out[*n].port = port;
    snprintf(out[*n].host, sizeof(out[*n].host), "%s", host);
    (*n)++;
    return 0;
}

/* One node of CLUSTER SHARDS: a flat array of name, value pairs. With
 * tls, its "tls-port" (a node with tls-cluster yes gives both, and
 * "port" is then the plaintext one; a TLS-only node gives no "port");
 * else its "port". Returns 1 for a master whose address was read, 2 for
 * one in health "fail", 0 otherwise. */
static int shard_node(const redisReply *nd, char *host, int *port, int tls)
{
    const char *port_key = tls ? "tls-port" : "port";
    long long p = 0;
    int master = 0, failed = 0, have_host = 0, have_port = 0;
    size_t i;

    if (nd == NULL || nd->type != REDIS_REPLY_ARRAY || nd->elements % 2 != 0)
        return 0;
    for (i = 0; i + 1 < nd->elements; i += 2) {
        const redisReply *k = nd->element[i], *v = nd->element[i + 1];
        if (str_is(k, "role"))
            master = str_is(v, "master");
        else if (str_is(k, "health"))
            failed = str_is(v, "fail");
        else if (str_is(k, "ip") && set_host(host, v) == 0)
            have_host = 1;
        else if (str_is(k, "endpoint") && !have_host &&
                 set_host(host, v) == 0)
            have_host = 1;
        else if (str_is(k, port_key) && get_int(v, 1, 65535, &p) == 0)
            have_port = 1;
    }
    if (!master || !have_host || !have_port)
        return 0;
    *port = (int)p;
    return failed ? 2 : 1;
}

static int parse_shards(const redisReply *r, rls_slot_range_t *out, size_t cap,
                        int tls)
{
    size_t i, j, n = 0;
    int rc;

    for (i = 0; i < r->elements; i++) {
        const redisReply *sh = r->element[i], *slots = NULL, *nodes = NULL;
        char host[RLS_NODE_HOST_MAX + 1] = "", h[RLS_NODE_HOST_MAX + 1];
        int port = 0, p = 0, got = 0, k;

        if (sh == NULL || sh->type != REDIS_REPLY_ARRAY ||
            sh->elements % 2 != 0)
            return RL_EINVAL;
        for (j = 0; j + 1 < sh->elements; j += 2) {
            if (str_is(sh->element[j], "slots"))
                slots = sh->element[j + 1];
            else if (str_is(sh->element[j], "nodes"))
                nodes = sh->element[j + 1];
        }
        if (slots == NULL || nodes == NULL ||
            slots->type != REDIS_REPLY_ARRAY ||
            nodes->type != REDIS_REPLY_ARRAY || slots->elements % 2 != 0)
            return RL_EINVAL;
        /* The master: one in good health if there is one. */
        for (j = 0; j < nodes->elements; j++) {
            k = shard_node(nodes->element[j], h, &p, tls);
            if (k == 0 || (got == 1 && k == 2) || (got == 1 && k == 1))
                continue;
            memcpy(host, h, sizeof(host));
            port = p;
            got = k;
        }
        if (!got)
            continue;
        for (j = 0; j + 1 < slots->elements; j += 2) {
            long long a, b;
            if (get_int(slots->element[j], 0, RLS_SLOTS - 1, &a) != 0 ||
                get_int(slots->element[j + 1], 0, RLS_SLOTS - 1, &b) != 0)
                return RL_EINVAL;
            if ((rc = add_range(out, cap, &n, a, b, host, port)) != 0)
                return rc;
        }
    }
    return (int)n;
}

static int parse_slots(const redisReply *r, rls_slot_range_t *out, size_t cap)
{
    size_t i, n = 0;
    int rc;

    for (i = 0; i < r->elements; i++) {
        const redisReply *e = r->element[i], *m;
        char host[RLS_NODE_HOST_MAX + 1];
        long long a, b, p;

        if (e == NULL || e->type != REDIS_REPLY_ARRAY || e->elements < 3 ||
            get_int(e->element[0], 0, RLS_SLOTS - 1, &a) != 0 ||
            get_int(e->element[1], 0, RLS_SLOTS - 1, &b) != 0)
            return RL_EINVAL;
        m = e->element[2];
        if (m == NULL || m->type != REDIS_REPLY_ARRAY || m->elements < 2)
            return RL_EINVAL;
        if (set_host(host, m->element[0]) != 0 ||
            get_int(m->element[1], 1, 65535, &p) != 0)
            continue; /* a master without a usable address */
        if ((rc = add_range(out, cap, &n, a, b, host, (int)p)) != 0)
            return rc;
    }
    return (int)n;
}

int rls_cluster_parse_map(const redisReply *r, rls_slot_range_t *out,
                          size_t cap)
{
    return rls_cluster_parse_map_tls(r, out, cap, 0);
}

int rls_cluster_parse_map_tls(const redisReply *r, rls_slot_range_t *out,
                              size_t cap, int tls)
{
    const redisReply *e;

    if (r == NULL || r->type != REDIS_REPLY_ARRAY)
        return RL_EINVAL;
    if (r->elements == 0)
        return 0;
    e = r->element[0];
    if (e == NULL || e->type != REDIS_REPLY_ARRAY || e->elements == 0)
        return RL_EINVAL;
    /* SLOTS entries start with an integer, SHARDS entries with a name. */
    if (e->element[0] != NULL && e->element[0]->type == REDIS_REPLY_INTEGER)
        return parse_slots(r, out, cap);
    return parse_shards(r, out, cap, tls);
}

/* Reads "<digits>" at s[*i], up to a space or the end, within [lo, hi]. */
static int read_num(const char *s, size_t len, size_t *i, long lo, long hi,
                    long *v)
{
    long x = 0;
    size_t st = *i;

    while (*i < len && s[*i] >= '0' && s[*i] <= '9' && *i - st < 9)
        x = x * 10 + (s[(*i)++] - '0');
    if (*i == st || x < lo || x > hi)
        return RL_EINVAL;
    *v = x;
    return 0;
}

int rls_cluster_redirect_kind(const char *s, size_t len)
{
    if (len >= 8 && memcmp(s, "TRYAGAIN", 8) == 0)
        return RLS_REDIR_TRYAGAIN;
    if (len >= 11 && memcmp(s, "CLUSTERDOWN", 11) == 0)
        return RLS_REDIR_CLUSTERDOWN;
    if (len >= 6 && memcmp(s, "MOVED ", 6) == 0)
        return RLS_REDIR_MOVED;
    if (len >= 4 && memcmp(s, "ASK ", 4) == 0)
        return RLS_REDIR_ASK;
    return 0;
}

int rls_cluster_parse_redirect(const char *s, size_t len, const char *self_host,
                               rls_redirect_t *out)
{
    size_t i, hs, he, colon;
    long slot, port;

    memset(out, 0, sizeof(*out));
    out->kind = rls_cluster_redirect_kind(s, len);
    if (out->kind == RLS_REDIR_TRYAGAIN || out->kind == RLS_REDIR_CLUSTERDOWN)
        return 0;
    if (out->kind == RLS_REDIR_MOVED)
        i = 6;
    else if (out->kind == RLS_REDIR_ASK)
        i = 4;
    else
        return RL_EINVAL;
    if (read_num(s, len, &i, 0, RLS_SLOTS - 1, &slot) != 0 || i >= len ||
        s[i] != ' ')
        return RL_EINVAL;
    hs = ++i;
    /* The port follows the last colon; the host may be an IPv6 literal. */
    he = len;
    while (he > hs && (s[he - 1] == '\r' || s[he - 1] == '\n' ||
                       s[he - 1] == ' '))
        he--;
    for (colon = he; colon > hs && s[colon - 1] != ':'; colon--)
        ;
    if (colon == hs)
        return RL_EINVAL;
    i = colon;
    if (read_num(s, he, &i, 1, 65535, &port) != 0 || i != he)
        return RL_EINVAL;
    he = colon - 1; /* the host is s[hs, he) */
    if (he - hs >= 2 && s[hs] == '[' && s[he - 1] == ']') {
        hs++;
        he--;
    }
    if (he == hs) {
        if (self_host == NULL || strlen(self_host) > RLS_NODE_HOST_MAX)
            return RL_EINVAL;
        snprintf(out->host, sizeof(out->host), "%s", self_host);
    } else {
        if (he - hs > RLS_NODE_HOST_MAX || memchr(s + hs, '\0', he - hs) ||
            memchr(s + hs, ' ', he - hs))
            return RL_EINVAL;
        memcpy(out->host, s + hs, he - hs);
        out->host[he - hs] = '\0';
    }
    out->slot = (int)slot;
    out->port = (int)port;
    return 0;
}
