/* Fuzz target: Envoy's ShouldRateLimit in JSON, as POST /json reads it
 * and answers it (server/envoy/json.c).
 *
 * Beyond "does not crash", it checks the reader's and the writer's
 * contract:
 *   - the input sits in a heap block of exactly its size, so any read past
 *     it is caught under ASan;
 *   - the reader returns 0 or RL_EINVAL with a reason (or the allocator's
 *     RL_ENOMEM); on 0 its output is a RateLimitRequest protobuf-c
 *     decodes, within the caps (RLS_ENVOY_DESCRIPTORS_MAX descriptors,
 *     RLS_ENVOY_ENTRIES_MAX entries each), every string valid UTF-8;
 *   - a RateLimitResponse built from the request's own strings (names,
 *     header keys and values, metadata) is written as JSON that a strict
 *     JSON checker accepts whole.
 *
 * Built two ways (tests/fuzz/CMakeLists.txt, tests/fuzz/run.sh): with
 * clang's libFuzzer, and with RL_FUZZ_REPLAY as a plain program that runs
 * the seed corpus (corpus/json), every prefix of each seed and each seed
 * with one byte changed, in every build. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "envoy/service/ratelimit/v3/rls.pb-c.h"
#include "google/protobuf/struct.pb-c.h"
#include "envoy/json.h"
#include "envoy/rls.h"
#include "rl_buf.h"
#include "rl_error.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond)                                                            \
    do {                                                                       \
        if (!(cond)) {                                                         \
            fprintf(stderr, "fuzz_json: %s:%d: %s\n", __FILE__, __LINE__,     \
                    #cond);                                                    \
            abort();                                                           \
        }                                                                      \
    } while (0)

typedef Envoy__Service__Ratelimit__V3__RateLimitRequest req_t;
typedef Envoy__Service__Ratelimit__V3__RateLimitResponse resp_t;
typedef Envoy__Service__Ratelimit__V3__RateLimitResponse__DescriptorStatus
    dstatus_t;
typedef Envoy__Service__Ratelimit__V3__RateLimitResponse__RateLimit rl_t;
typedef Envoy__Config__Core__V3__HeaderValue header_t;

/* ---- a strict JSON checker (RFC 8259), for the writer's output ---- */

typedef struct jc_s {
    const unsigned char *p;
    size_t n, i;
} jc_t;

static void ws(jc_t *j)
{
    while (j->i < j->n && strchr(" \t\r\n", j->p[j->i]) != NULL &&
           j->p[j->i] != '\0')
        j->i++;
}

static int value(jc_t *j, int depth);

static int str(jc_t *j)
{
    if (j->i >= j->n || j->p[j->i] != '"')
        return 0;
    for (j->i++; j->i < j->n; j->i++) {
        unsigned c = j->p[j->i];
        if (c == '"') {
            j->i++;
            return 1;
        }
        if (c < 0x20)
            return 0;
        if (c == '\\') {
            if (++j->i >= j->n || strchr("\"\\/bfnrtu", j->p[j->i]) == NULL ||
                j->p[j->i] == '\0')
                return 0;
            if (j->p[j->i] == 'u') {
                int k;
                for (k = 0; k < 4; k++)
                    if (++j->i >= j->n ||
                        strchr("0123456789abcdefABCDEF", j->p[j->i]) == NULL ||
                        j->p[j->i] == '\0')
                        return 0;
            }
        }
    }
    return 0;
}

static int num(jc_t *j)
{
    size_t s = j->i;

    if (j->i < j->n && j->p[j->i] == '-')
        j->i++;
    if (j->i < j->n && j->p[j->i] == '0')
        j->i++;
    else if (j->i < j->n && j->p[j->i] >= '1' && j->p[j->i] <= '9')
        while (j->i < j->n && j->p[j->i] >= '0' && j->p[j->i] <= '9')
            j->i++;
    else
        return 0;
    if (j->i < j->n && j->p[j->i] == '.') {
        size_t f = ++j->i;
        while (j->i < j->n && j->p[j->i] >= '0' && j->p[j->i] <= '9')
            j->i++;
        if (j->i == f)
            return 0;
    }
    if (j->i < j->n && (j->p[j->i] == 'e' || j->p[j->i] == 'E')) {
        size_t f;
        j->i++;
        if (j->i < j->n && (j->p[j->i] == '+' || j->p[j->i] == '-'))
            j->i++;
        f = j->i;
        while (j->i < j->n && j->p[j->i] >= '0' && j->p[j->i] <= '9')
            j->i++;
        if (j->i == f)
            return 0;
    }
    return j->i > s;
}

static int lit(jc_t *j, const char *w)
{
    size_t n = strlen(w);

    if (j->n - j->i < n || memcmp(j->p + j->i, w, n) != 0)
        return 0;
    j->i += n;
    return 1;
}

static int value(jc_t *j, int depth)
{
    int first = 1;

    if (depth > 200)
        return 0;
    ws(j);
    if (j->i >= j->n)
        return 0;
    switch (j->p[j->i]) {
    case '{':
        for (j->i++;; first = 0) {
            ws(j);
            if (j->i < j->n && j->p[j->i] == '}' && first) {
                j->i++;
                return 1;
            }
            if (!str(j))
                return 0;
            ws(j);
            if (j->i >= j->n || j->p[j->i++] != ':' || !value(j, depth + 1))
                return 0;
            ws(j);
            if (j->i < j->n && j->p[j->i] == ',') {
                j->i++;
                continue;
            }
            if (j->i < j->n && j->p[j->i] == '}') {
                j->i++;
                return 1;
            }
            return 0;
        }
    case '[':
        for (j->i++;; first = 0) {
            ws(j);
            if (j->i < j->n && j->p[j->i] == ']' && first) {
                j->i++;
                return 1;
            }
            if (!value(j, depth + 1))
                return 0;
            ws(j);
            if (j->i < j->n && j->p[j->i] == ',') {
                j->i++;
                continue;
            }
            if (j->i < j->n && j->p[j->i] == ']') {
                j->i++;
                return 1;
            }
            return 0;
        }
    case '"':
        return str(j);
    case 't':
        return lit(j, "true");
    case 'f':
        return lit(j, "false");
    case 'n':
        return lit(j, "null");
    default:
        return num(j);
    }
}

static int valid_json(const uint8_t *p, size_t n)
{
    jc_t j = {p, n, 0};

    if (!value(&j, 0))
        return 0;
    ws(&j);
    return j.i == j.n;
}

/* Valid UTF-8 (the reader's promise for every string it decodes). */
static int utf8_ok(const char *s)
{
    const unsigned char *p = (const unsigned char *)s;

    while (*p) {
        size_t k, n = *p < 0x80 ? 1 : *p >= 0xf0 ? 4 : *p >= 0xe0 ? 3 : 2;
        if (*p >= 0x80 && *p < 0xc2)
            return 0;
        for (k = 1; k < n; k++)
            if ((p[k] & 0xc0) != 0x80)
                return 0;
        p += n;
    }
    return 1;
}

/* A response from the request's strings, written as JSON. */
static void answer(const req_t *q)
{
    size_t n = q->n_descriptors, i;
    dstatus_t *ds = calloc(n + 1, sizeof(*ds));
    dstatus_t **dsp = calloc(n + 1, sizeof(*dsp));
    rl_t *rl = calloc(n + 1, sizeof(*rl));
    header_t *h = calloc(n + 1, sizeof(*h));
    header_t **hp = calloc(n + 1, sizeof(*hp));
    Google__Protobuf__Duration du = GOOGLE__PROTOBUF__DURATION__INIT;
    Google__Protobuf__Struct st = GOOGLE__PROTOBUF__STRUCT__INIT;
    Google__Protobuf__Struct__FieldsEntry fe[2], *fep[2];
    Google__Protobuf__Value v[2];
    resp_t r = ENVOY__SERVICE__RATELIMIT__V3__RATE_LIMIT_RESPONSE__INIT;
    rl_buf_t out;
    uint8_t *w;
    size_t len;
    int code, rc;

    CHECK(ds && dsp && rl && h && hp);
    du.seconds = (int64_t)q->hits_addend;
    du.nanos = (int32_t)(q->hits_addend % 1000000000u);
    for (i = 0; i < n; i++) {
        const Envoy__Extensions__Common__Ratelimit__V3__RateLimitDescriptor
            *d = q->descriptors[i];
        envoy__service__ratelimit__v3__rate_limit_response__descriptor_status__init(
            &ds[i]);
        envoy__service__ratelimit__v3__rate_limit_response__rate_limit__init(
            &rl[i]);
        envoy__config__core__v3__header_value__init(&h[i]);
        ds[i].code = (Envoy__Service__Ratelimit__V3__RateLimitResponse__Code)(
            i % 3);
        ds[i].limit_remaining = (uint32_t)i;
        if (d->limit != NULL) {
            rl[i].requests_per_unit = d->limit->requests_per_unit;
            rl[i].unit =
                (Envoy__Service__Ratelimit__V3__RateLimitResponse__RateLimit__Unit)
                    d->limit->unit;
        }
        if (d->n_entries > 0) {
            rl[i].name = d->entries[0]->key;
            h[i].key = d->entries[0]->key;
            h[i].value = d->entries[0]->value;
        }
        ds[i].current_limit = &rl[i];
        ds[i].duration_until_reset = &du;
        dsp[i] = &ds[i];
        hp[i] = &h[i];
    }
    for (i = 0; i < 2; i++) {
        google__protobuf__struct__fields_entry__init(&fe[i]);
        google__protobuf__value__init(&v[i]);
        fe[i].value = &v[i];
        fep[i] = &fe[i];
    }
    fe[0].key = q->domain;
    v[0].kind_case = GOOGLE__PROTOBUF__VALUE__KIND_STRING_VALUE;
    v[0].string_value = q->domain;
    fe[1].key = (char *)"n";
    v[1].kind_case = GOOGLE__PROTOBUF__VALUE__KIND_NUMBER_VALUE;
    v[1].number_value = (double)q->hits_addend / 7.0;
    st.n_fields = 2;
    st.fields = fep;
    r.overall_code = (Envoy__Service__Ratelimit__V3__RateLimitResponse__Code)(
        n % 3);
    r.n_statuses = n;
    r.statuses = dsp;
    r.n_response_headers_to_add = n;
    r.response_headers_to_add = hp;
    r.dynamic_metadata = &st;
    len = envoy__service__ratelimit__v3__rate_limit_response__get_packed_size(
        &r);
    w = malloc(len + 1);
    CHECK(w != NULL);
    envoy__service__ratelimit__v3__rate_limit_response__pack(&r, w);
    rl_buf_init(&out, 64u << 20);
    rc = rls_envoy_json_response(w, len, &out, &code);
    CHECK(rc == RL_OK);
    CHECK(code == (int)(n % 3));
    CHECK(valid_json(rl_buf_rptr(&out), rl_buf_len(&out)));
    rl_buf_free(&out);
    free(w);
    free(ds);
    free(dsp);
    free(rl);
    free(h);
    free(hp);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *b = malloc(size ? size : 1), err[256];
    rl_buf_t wire;
    req_t *q;
    size_t i, k;
    int rc;

    CHECK(b != NULL);
    if (size > 0)
        memcpy(b, data, size);
    rl_buf_init(&wire, 16u << 20);
    rc = rls_envoy_json_request(b, size, &wire, err, sizeof(err));
    free(b);
    CHECK(rc == RL_OK || rc == RL_EINVAL || rc == RL_ENOMEM);
    if (rc != RL_OK) {
        CHECK(err[0] != '\0');
        rl_buf_free(&wire);
        return 0;
    }
    q = envoy__service__ratelimit__v3__rate_limit_request__unpack(
        NULL, rl_buf_len(&wire), rl_buf_rptr(&wire));
    CHECK(q != NULL);
    CHECK(q->n_descriptors <= RLS_ENVOY_DESCRIPTORS_MAX);
    CHECK(utf8_ok(q->domain));
    for (i = 0; i < q->n_descriptors; i++) {
        CHECK(q->descriptors[i]->n_entries <= RLS_ENVOY_ENTRIES_MAX);
        for (k = 0; k < q->descriptors[i]->n_entries; k++)
            CHECK(utf8_ok(q->descriptors[i]->entries[k]->key) &&
                  utf8_ok(q->descriptors[i]->entries[k]->value));
    }
    answer(q);
    envoy__service__ratelimit__v3__rate_limit_request__free_unpacked(q, NULL);
    rl_buf_free(&wire);
    return 0;
}

#ifdef RL_FUZZ_REPLAY
#include "walk.h"

static int run_file(const char *path)
{
    uint8_t *buf = malloc(1u << 16);
    size_t n, i;

    if (buf == NULL || rlf_read(path, buf, 1u << 16, &n) != 0) {
        free(buf);
        return 1;
    }
    LLVMFuzzerTestOneInput(buf, n);
    /* Every prefix (a body cut anywhere), and one changed byte each. */
    for (i = 0; i < n; i++) {
        uint8_t keep = buf[i];
        LLVMFuzzerTestOneInput(buf, i);
        buf[i] ^= 0x5a;
        LLVMFuzzerTestOneInput(buf, n);
        buf[i] = '"';
        LLVMFuzzerTestOneInput(buf, n);
        buf[i] = keep;
    }
    free(buf);
    return 0;
}

int main(int argc, char **argv)
{
    int files = 0, i;

    for (i = 1; i < argc; i++)
        if (rlf_walk(argv[i], run_file, &files) != 0)
            return 1;
    printf("fuzz_json: %d files\n", files);
    return files > 0 ? 0 : 1;
}
#endif
