/* Fuzz target: the --admin listener's request parsing and routing
 * (server/admin/admin_api_parse.c): a request head as http_server.c parses it
 * (rls_http_parse), then its method and target through rls_admin_parse,
 * its Authorization header through rls_admin_tokens_check against two
 * known tokens; and the bytes after the head as a stored quota
 * (rls_admin_quota_parse, at a scale the first byte picks), as a token
 * file (rls_admin_tokens_parse), as a JSON string (rls_admin_json_str)
 * and as a top-offenders summary (rl_topk_decode: what rl-ctl top reads
 * from Redis and from /v1/top?format=summary).
 *
 * Beyond "does not crash": a status is 0, 400, 404 or 405 (405 with an
 * Allow line); a route is one of the seven, a write is a POST and only the
 * reset's, a loop's pause's or its resume's (with loop=N, 0 to 999, which
 * no other route has); a usage route names rule and key (a valid rule name, a
 * key of 1 to 512 bytes) or a domain and 1 to 32 entries, each pointer inside
 * the request's buffer; a token check is -2, -1 or the index of the
 * token the header names, and the known tokens are found; a quota that
 * parses has 1 to 8 limits within the script's bounds; a token file
 * that parses holds 1 to 16 digests; the JSON string is quoted, has no
 * raw control byte, and is valid UTF-8; /v1/top names no caller and at
 * most a valid rule name, (inline) or (other); a summary that decodes
 * holds at most RL_TOPK_K_MAX entries, each of 1 to RL_TOPK_KEY_MAX
 * bytes and an error within its count, and merges, encodes and decodes
 * again to the same entries.
 *
 * Built two ways (tests/fuzz/CMakeLists.txt, tests/fuzz/run.sh): with
 * clang's libFuzzer, and with RL_FUZZ_REPLAY as a plain program that runs
 * the seed corpus (corpus/admin_api) and deterministic mutations of it in
 * every build. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "admin/admin_api_parse.h"
#include "net/http.h"
#include "policy/rules.h"
#include "rl_admit.h"
#include "rl_buf.h"
#include "rl_error.h"
#include "rl_topk.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char tok_file[] = "ops AAAAAAAAAAAAAAAA0123\n"
                               "# a comment\n"
                               "BBBBBBBBBBBBBBBBBBBB\n";

static void inside(const rls_admin_req_t *r, const char *p, size_t n)
{
    if (p == NULL || (const char *)p < r->buf ||
        p + n > r->buf + sizeof(r->buf))
        abort();
}

/* Valid UTF-8, no raw byte below 0x20, quoted. */
static void json_ok(const uint8_t *p, size_t n)
{
    size_t i = 1;

    if (n < 2 || p[0] != '"' || p[n - 1] != '"')
        abort();
    while (i < n - 1) {
        size_t k = p[i] < 0x80                    ? 1
                   : p[i] >= 0xc2 && p[i] <= 0xdf ? 2
                   : p[i] >= 0xe0 && p[i] <= 0xef ? 3
                   : p[i] >= 0xf0 && p[i] <= 0xf4 ? 4
                                                  : 0;
        if (k == 0 || p[i] < 0x20 || i + k > n - 1)
            abort();
        i += k;
    }
}

static void check_req(const rls_admin_req_t *r, int status, const char *allow,
                      const rls_http_req_t *q)
{
    uint32_t i;

    if (status != 0 && status != 400 && status != 404 && status != 405)
        abort();
    if ((status == 405) != (allow != NULL))
        abort();
    if (status != 0)
        return;
    if (r->route < RLS_ADMIN_INDEX || r->route > RLS_ADMIN_TOP)
        abort();
    if (r->write != (q->method_len == 4 && memcmp(q->method, "POST", 4) == 0))
        abort();
    if (r->write !=
        (r->route == RLS_ADMIN_RESET || r->route == RLS_ADMIN_LOOP_PAUSE ||
         r->route == RLS_ADMIN_LOOP_RESUME))
        abort();
    /* loop=N on the pause and resume alone, and always there. */
    if ((r->route == RLS_ADMIN_LOOP_PAUSE || r->route == RLS_ADMIN_LOOP_RESUME)
            ? r->loop < 0 || r->loop > 999
            : r->loop != -1)
        abort();
    if (r->summary && (r->route != RLS_ADMIN_TOP || r->rule == NULL))
        abort();
    if (r->route == RLS_ADMIN_TOP) {
        if (r->key != NULL || r->domain != NULL || r->nentries != 0)
            abort();
        if (r->rule != NULL) {
            inside(r, r->rule, r->rule_len);
            if (!rls_rule_name_ok(r->rule, r->rule_len) &&
                !(r->rule_len == 8 && memcmp(r->rule, "(inline)", 8) == 0) &&
                !(r->rule_len == 7 && memcmp(r->rule, "(other)", 7) == 0))
                abort();
        }
        return;
    }
    if (r->route != RLS_ADMIN_USAGE && r->route != RLS_ADMIN_RESET) {
        if (r->rule != NULL || r->key != NULL || r->domain != NULL ||
            r->nentries != 0)
            abort();
        return;
    }
    if (r->rule != NULL) {
        inside(r, r->rule, r->rule_len);
        inside(r, r->key, r->key_len);
        if (!rls_rule_name_ok(r->rule, r->rule_len) || r->key_len == 0 ||
            r->key_len > 512 || r->domain != NULL || r->nentries != 0)
            abort();
        return;
    }
    inside(r, r->domain, r->domain_len);
    if (r->domain_len == 0 || r->nentries == 0 ||
        r->nentries > RLS_ADMIN_ENTRIES_MAX)
        abort();
    for (i = 0; i < r->nentries; i++) {
        inside(r, r->ekey[i], r->eklen[i]);
        if (r->eklen[i] == 0)
            abort();
        if (r->evlen[i] > 0)
            inside(r, r->evalue[i], r->evlen[i]);
    }
}

static void check_quota(const char *p, size_t n, double sc)
{
    rls_limit_t l[RLS_ADMIN_QUOTA_LIMITS];
    uint32_t k = 0, i;

    if (rls_admin_quota_parse(p, n, sc, l, &k) != RL_OK)
        return;
    if (k < 1 || k > RLS_ADMIN_QUOTA_LIMITS)
        abort();
    for (i = 0; i < k; i++) {
        if (l[i].limit < 1 || l[i].window_s < 1 || l[i].window_s > 31622400 ||
            l[i].algo >= RL_ALGO_MAX)
            abort();
        if (l[i].algo == RL_ALGO_GCRA &&
            (l[i].burst < 1 || l[i].t_us < 1 ||
             (double)l[i].burst * (double)l[i].t_us > 31622400000000.0))
            abort();
    }
}

/* A summary that decodes keeps its bounds, and survives a merge and the
 * text's round trip. */
static void check_summary(const char *p, size_t n)
{
    rl_topk_sum_t s, m, d;
    uint64_t since, now, s2, n2;
    rl_buf_t b;
    size_t i;

    if (rl_topk_decode(p, n, &s, &since, &now) != RL_OK)
        return;
    if (s.n > RL_TOPK_K_MAX)
        abort();
    for (i = 0; i < s.n; i++)
        if (s.e[i].err > s.e[i].count || s.e[i].len < 1 ||
            s.e[i].len > RL_TOPK_KEY_MAX || s.e[i].cut > 1)
            abort();
    if (rl_topk_merge(&s, 1, RL_TOPK_K_MAX, &m) != RL_OK)
        abort();
    rl_buf_init(&b, 1u << 20);
    if (rl_topk_encode(&m, since, now, &b) != RL_OK ||
        rl_topk_decode((const char *)rl_buf_rptr(&b), rl_buf_len(&b), &d, &s2,
                       &n2) != RL_OK ||
        d.n != m.n || s2 != since || n2 != now || d.floor != m.floor)
        abort();
    for (i = 0; i < d.n; i++)
        if (d.e[i].count != m.e[i].count || d.e[i].len != m.e[i].len ||
            memcmp(d.e[i].key, m.e[i].key, d.e[i].len) != 0 ||
            (i > 0 && m.e[i].count > m.e[i - 1].count))
            abort();
    rl_buf_free(&b);
    rl_topk_sum_free(&d);
    rl_topk_sum_free(&m);
    rl_topk_sum_free(&s);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static rls_admin_req_t req;
    static rls_admin_tokens_t known, file;
    static int init;
    static const double scales[] = {1.0, 0.5, 2.0, 1e-9, 1000.0, 0.001};
    const char *why = NULL, *allow = NULL, *v = NULL, *body;
    rls_http_req_t q;
    size_t vl = 0, bn;
    rl_buf_t out;
    int status, t;

    if (!init) {
        if (rls_admin_tokens_parse(tok_file, sizeof(tok_file) - 1, &known,
                                   &why) != RL_OK ||
            known.n != 2)
            abort();
        init = 1;
    }
    if (size < 1)
        return 0;
    memset(&q, 0, sizeof(q));
    body = (const char *)data + 1;
    bn = size - 1;
    if (rls_http_parse((const char *)data + 1, size - 1, &q) == RL_OK) {
        status = rls_admin_parse(q.method, q.method_len, q.target, q.target_len,
                                 &req, &why, &allow);
        if (why == NULL && status != 0)
            abort();
        check_req(&req, status, allow, &q);
        if (!rls_http_header(&q, "authorization", &v, &vl))
            v = NULL;
        t = rls_admin_tokens_check(&known, v, vl);
        if (t < -2 || t >= (int)known.n)
            abort();
        if (v != NULL && vl == 27 &&
            memcmp(v, "Bearer AAAAAAAAAAAAAAAA0123", 27) == 0 && t != 0)
            abort();
        body += q.head_len;
        bn -= q.head_len;
    }
    check_quota(body, bn, scales[data[0] % 6]);
    check_summary(body, bn);
    if (rls_admin_tokens_parse(body, bn, &file, &why) == RL_OK &&
        (file.n < 1 || file.n > RLS_ADMIN_TOKENS_MAX))
        abort();
    rl_buf_init(&out, 1u << 20);
    if (rls_admin_json_str(&out, body, bn) == RL_OK)
        json_ok(rl_buf_rptr(&out), rl_buf_len(&out));
    rl_buf_free(&out);
    return 0;
}

#ifdef RL_FUZZ_REPLAY
#include "walk.h"

static int run_file(const char *path)
{
    static unsigned char buf[9000];
    size_t n;

    if (rlf_read(path, buf, sizeof(buf), &n) != 0)
        return 1;
    LLVMFuzzerTestOneInput(buf, n);
    return 0;
}

int main(int argc, char **argv)
{
    static const char *const seeds[] = {
        "\x00GET /v1/usage?rule=api&key=alice HTTP/1.1\r\n\r\n",
        "\x01POST /v1/usage/reset?rule=api&key=a%20b&leases=1 HTTP/1.1\r\n"
        "Authorization: Bearer AAAAAAAAAAAAAAAA0123\r\n\r\n100/60 "
        "5/1:gcra:burst=3",
        "\x02GET /v1/usage?domain=shop&entry=user=ann&entry=path=%2Fbuy"
        "&format=text HTTP/1.1\r\n\r\n10/60:sliding-window",
        "\x03GET /v1/config?part=rules,envoy HTTP/1.1\r\n\r\n",
        "\x04HEAD / HTTP/1.1\r\n\r\n\xc3\xa9\x01\"\\",
        "\x05GET /v1/top?rule=api&format=summary HTTP/1.1\r\n\r\nrltop1 1 "
        "2 30 4 2\n9 1 0 5 alice\n5 4 0 3 b\nb\n",
        "\x06GET /v1/top?rule=(inline)&format=text HTTP/1.1\r\n\r\n",
    };
    static const char alphabet[] = "%&=?/,:0129AFaz \t\r\n\x80\xc3()";
    static unsigned char buf[1024];
    int i, iters = 50000, files = 0;

    for (i = 1; i < argc; i++)
        if (rlf_walk(argv[i], run_file, &files) != 0)
            return 1;
    for (i = 0; i < iters; i++) {
        const char *s = seeds[rlf_rand() % (sizeof(seeds) / sizeof(seeds[0]))];
        size_t n = 1 + strlen(s + 1), edits = rlf_rand() % 4;

        memcpy(buf, s, n);
        n = rlf_mutate(buf, n, sizeof(buf), edits, alphabet, rlf_rand);
        buf[0] = (uint8_t)rlf_rand();
        LLVMFuzzerTestOneInput(buf, n);
    }
    printf("fuzz_admin_api replay: %d files, %d mutated requests, "
           "invariants held\n",
           files, iters);
    return 0;
}
#endif
