/* Fuzz target: the HTTP check request as the --http listener reads it:
 * the head (server/net/http.c), then the query string and headers
 * (server/check/http_check_query.c: percent-decoding, bounds, header lookup).
 *
 * The input is split: its first byte picks the options (key header none,
 * X-Forwarded-For or X-User-Id; rule header or not), the rest is the
 * request head. Beyond "does not crash", it checks:
 *   - the input sits in a heap block of exactly its size, so reading past
 *     it is caught;
 *   - rls_check_query returns 0 or RL_EINVAL, the latter with a reason;
 *   - on 0: 1 <= rule_len <= RL_RULE_MAX, 1 <= key_len <= RL_KEY_MAX, no
 *     NUL in the key, cost >= 1, deny_status 403 or 429; or, with levels
 *     (level=KEY=RULE), 1 to RL_LEVELS_MAX of them, each key 1 to
 *     RL_KEY_MAX bytes without NUL and each rule 1 to RL_RULE_MAX bytes
 *     without '=', all inside the query's level buffer and apart, no
 *     rule or key beside them, a check;
 *   - a header value rls_http_header finds lies inside the head;
 *   - round trip: a key of any bytes but NUL, percent-encoded into
 *     key= (and into level=KEY=r), decodes to exactly those bytes.
 *
 * Built two ways (tests/fuzz/CMakeLists.txt, tests/fuzz/run.sh): with
 * libFuzzer, and with RL_FUZZ_REPLAY as a plain program that runs the seed
 * corpus (corpus/check) and deterministic mutations in every build. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check/http_check_query.h"
#include "net/http.h"
#include "rl_error.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond)                                                            \
    do {                                                                       \
        if (!(cond)) {                                                         \
            fprintf(stderr, "fuzz_check: %s:%d: %s\n", __FILE__, __LINE__,     \
                    #cond);                                                    \
            abort();                                                           \
        }                                                                      \
    } while (0)

static void opts_for(uint8_t sel, rls_check_opts_t *o)
{
    static const char *keys[] = {NULL, "X-Forwarded-For", "X-User-Id"};

    CHECK(rls_check_opts_init(o, keys[sel % 3],
                              (sel / 3) % 2 ? "X-RateLimit-Rule" : NULL) ==
          RL_OK);
    /* X-Forwarded-For from the leftmost (0) to past the most hops. */
    o->xff_hops = (unsigned)(sel / 6) % (RLS_CHECK_XFF_HOPS_MAX + 2);
}

static void check_query(const rls_http_req_t *q, const rls_check_opts_t *o,
                        uint32_t path_op)
{
    rls_check_query_t cq;
    rl_check_t c;
    const char *why = NULL, *v;
    size_t vlen;
    int rc = rls_check_query(q, o, path_op, &c, &cq, &why);

    CHECK(rc == RL_OK || rc == RL_EINVAL);
    CHECK(cq.reason >= 0 && cq.reason < RLS_CHECK_REASONS);
    if (rc != RL_OK) {
        CHECK(why != NULL && why[0] != '\0');
        return;
    }
    CHECK(c.op < RL_OP_MAX);
    CHECK(path_op == RL_OP_CHECK || c.op == path_op);
    /* The check's bytes are the query's buffers. */
    CHECK(c.rule == cq.rule && c.key == cq.key && c.handle == cq.handle);
    if (c.op == RL_OP_SETTLE || c.op == RL_OP_RELEASE || c.op == RL_OP_RENEW) {
        /* The handle names the caller: no rule or key needed. */
        CHECK(c.handle_len >= 1 && c.handle_len <= RL_HANDLE_MAX);
        CHECK(c.actual <= UINT32_MAX);
        return;
    }
    CHECK(c.nlevels <= RL_LEVELS_MAX);
    CHECK(cq.levels_len <= sizeof(cq.levels));
    if (c.nlevels > 0) {
        const char *end = cq.levels;
        uint32_t i;
        CHECK(c.rule_len == 0 && c.key_len == 0 && c.op == RL_OP_CHECK);
        for (i = 0; i < c.nlevels; i++) {
            const rl_level_t *l = &c.levels[i];
            CHECK(l->key_len >= 1 && l->key_len <= RL_KEY_MAX);
            CHECK(l->rule_len >= 1 && l->rule_len <= RL_RULE_MAX);
            CHECK(memchr(l->key, '\0', l->key_len) == NULL);
            CHECK(memchr(l->rule, '=', l->rule_len) == NULL);
            /* In order, one after the other, within what was decoded. */
            CHECK(l->key >= end && l->rule == l->key + l->key_len + 1);
            end = l->rule + l->rule_len;
            CHECK(end <= cq.levels + cq.levels_len);
        }
        CHECK(c.cost >= 1);
        CHECK(cq.deny_status == 403 || cq.deny_status == 429);
        return;
    }
    CHECK(c.rule_len >= 1 && c.rule_len <= RL_RULE_MAX);
    CHECK(c.key_len >= 1 && c.key_len <= RL_KEY_MAX);
    CHECK(memchr(c.key, '\0', c.key_len) == NULL);
    CHECK(c.cost >= 1);
    CHECK(cq.deny_status == 403 || cq.deny_status == 429);
    if (o->key_header[0] != '\0' &&
        rls_http_header(q, o->key_header, &v, &vlen))
        CHECK(v >= q->head && v + vlen <= q->head + q->head_len);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    rls_check_opts_t o;
    rls_http_req_t q;
    char *b;

    if (size < 1)
        return 0;
    opts_for(data[0], &o);
    size--;
    b = malloc(size ? size : 1);
    CHECK(b != NULL);
    if (size > 0)
        memcpy(b, data + 1, size);
    if (rls_http_parse(b, size, &q) == RL_OK)
        check_query(&q, &o,
                    (data[0] & 0xc0) == 0x40   ? RL_OP_SETTLE
                    : (data[0] & 0xc0) == 0x80 ? RL_OP_RELEASE
                                               : RL_OP_CHECK);
    free(b);
    return 0;
}

/* key= with every byte of key[0, n) percent-encoded (or left as is when
 * unreserved) decodes to exactly those bytes. */
static void roundtrip(const uint8_t *key, size_t n, int plain, int level)
{
    static char head[8192];
    static const char hex[] = "0123456789ABCDEF";
    rls_check_opts_t o;
    rls_check_query_t cq;
    rl_check_t chk;
    rls_http_req_t q;
    const char *why;
    size_t len = 0, i;

    len += (size_t)snprintf(head, sizeof(head),
                            level ? "GET /check?level="
                                  : "GET /check?rule=r&key=");
    for (i = 0; i < n; i++) {
        unsigned char c = key[i];
        if (plain && ((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'))) {
            head[len++] = (char)c;
        } else {
            head[len++] = '%';
            head[len++] = hex[c >> 4];
            head[len++] = hex[c & 15];
        }
    }
    len += (size_t)snprintf(head + len, sizeof(head) - len,
                            level ? "=r&level=%%3D=r2&x=y HTTP/1.1\r\n\r\n"
                                  : "&x=y HTTP/1.1\r\n\r\n");
    CHECK(rls_http_parse(head, len, &q) == RL_OK);
    CHECK(rls_check_opts_init(&o, NULL, NULL) == RL_OK);
    CHECK(rls_check_query(&q, &o, RL_OP_CHECK, &chk, &cq, &why) == RL_OK);
    if (level) {
        /* The key is everything before the last '=': it may hold some. */
        CHECK(chk.nlevels == 2);
        CHECK(chk.levels[0].key_len == n &&
              memcmp(chk.levels[0].key, key, n) == 0);
        CHECK(chk.levels[0].rule_len == 1 && chk.levels[0].rule[0] == 'r');
        CHECK(chk.levels[1].key_len == 1 && chk.levels[1].key[0] == '=');
        CHECK(chk.levels[1].rule_len == 2);
        return;
    }
    CHECK(chk.key_len == n && memcmp(chk.key, key, n) == 0);
}

#ifdef RL_FUZZ_REPLAY
#include "walk.h"

static int run_file(const char *path)
{
    static uint8_t buf[1 << 16];
    size_t n;

    if (rlf_read(path, buf, sizeof(buf), &n) != 0)
        return 1;
    LLVMFuzzerTestOneInput(buf, n);
    return 0;
}

int main(int argc, char **argv)
{
    static const char *heads[] = {
        "\x01GET /check?rule=api&key=u%3A1&cost=2 HTTP/1.1\r\n"
        "X-Forwarded-For: 10.0.0.1, 10.0.0.2\r\n\r\n",
        "\x04GET /check HTTP/1.1\r\nX-RateLimit-Rule: api\r\n"
        "X-Forwarded-For:  ,1.2.3.4\r\n\r\n",
        "\x02GET /check?deny_status=403&rule=a.b:c-d_e&key=a+b%2B HTTP/1.0\r\n"
        "X-User-Id: 42\r\n\r\n",
        "\x00HEAD /check?rule=r&&key=%00&key=k&cost=4294967295 "
        "HTTP/1.1\r\n\r\n",
        "\x05GET /check?rule=%41pi&key=%zz&cost=0&deny_status=500&x HTTP/1.1"
        "\r\nx-ratelimit-rule:\r\nx-user-id: \t\r\n\r\n",
        "\x01GET /check?level=org%3Aacme=org&level=user%3Ab%3D1=user&cost=2 "
        "HTTP/1.1\r\nX-Forwarded-For: 10.0.0.1\r\n\r\n",
        "\x00GET /check?level==r&level=k=&level=k&level=a=b&rule=x&op=reserve"
        "&level=%00=r HTTP/1.1\r\n\r\n",
    };
    static const char alphabet[] = "%&=+?,:0129AFafz \t\r\n\x80";
    static uint8_t buf[1024], key[RL_KEY_MAX];
    int i, iters = 50000, files = 0;
    size_t k;

    for (i = 1; i < argc; i++)
        if (rlf_walk(argv[i], run_file, &files) != 0)
            return 1;
    for (i = 0; i < iters; i++) {
        const char *h = heads[rlf_rand() % (sizeof(heads) / sizeof(heads[0]))];
        size_t n = 1 + strlen(h + 1), edits = rlf_rand() % 4;

        memcpy(buf, h, n);
        n = rlf_mutate(buf, n, sizeof(buf), edits, alphabet, rlf_rand);
        buf[0] = (uint8_t)rlf_rand();
        LLVMFuzzerTestOneInput(buf, n);
    }
    /* Round trips: keys of every length up to the cap, any bytes but NUL. */
    for (i = 0; i < 2000; i++) {
        size_t n = 1 + rlf_rand() % RL_KEY_MAX;
        for (k = 0; k < n; k++)
            key[k] = (uint8_t)(1 + rlf_rand() % 255);
        roundtrip(key, n, i % 2, (i / 2) % 2);
    }
    printf("fuzz_check replay: %d files, %d mutated requests, 2000 key "
           "round trips (key= and level=), invariants held\n",
           files, iters);
    return 0;
}
#endif
