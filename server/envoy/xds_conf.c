/* A control plane's RateLimitConfig resources as envoy-ratelimit YAML; see
 * xds_conf.h. */
#include "envoy/xds_conf.h"

#include <math.h>
#include <stdalign.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "envoy/service/discovery/v3/discovery.pb-c.h"
#include "ratelimit/config/ratelimit/v3/rls_conf.pb-c.h"
#include "rl_buf.h"
#include "rl_error.h"

/* All documents of one update together: a message of small nested
 * descriptors grows several times over as YAML. */
#define XDS_YAML_MAX (32u << 20)
#define XDS_NAME_MAX 128

typedef Ratelimit__Config__Ratelimit__V3__RateLimitConfig conf_pb_t;
typedef Ratelimit__Config__Ratelimit__V3__RateLimitDescriptor desc_pb_t;
typedef Ratelimit__Config__Ratelimit__V3__RateLimitPolicy policy_pb_t;
typedef Envoy__Service__Discovery__V3__DiscoveryResponse resp_pb_t;

/* ---- The wire, before protobuf-c: nesting depth and NUL bytes ---- */

/* The messages a RateLimitConfig nests, by what their fields hold. */
enum {
    M_NONE,
    M_CONF,
    M_DESC,
    M_POLICY,
    M_REPLACE,
    M_STRUCT,
    M_ENTRY,
    M_VALUE,
    M_LIST,
    M_STRING
};

static int field_kind(int m, uint64_t f)
{
    switch (m) {
    case M_CONF:
        return f == 1 || f == 2 ? M_STRING : f == 3 ? M_DESC : M_NONE;
    case M_DESC:
        return f == 1 || f == 2 ? M_STRING
               : f == 3         ? M_POLICY
               : f == 4         ? M_DESC
               : f == 8         ? M_STRUCT
                                : M_NONE;
    case M_POLICY:
        return f == 4 ? M_STRING : f == 5 ? M_REPLACE : M_NONE;
    case M_REPLACE:
        return f == 1 ? M_STRING : M_NONE;
    case M_STRUCT:
        return f == 1 ? M_ENTRY : M_NONE;
    case M_ENTRY:
        return f == 1 ? M_STRING : f == 2 ? M_VALUE : M_NONE;
    case M_VALUE:
        return f == 3 ? M_STRING : f == 5 ? M_STRUCT : f == 6 ? M_LIST : M_NONE;
    case M_LIST:
        return f == 1 ? M_VALUE : M_NONE;
    default:
        return M_NONE;
    }
}

static int varint(const uint8_t **p, const uint8_t *end, uint64_t *v)
{
    unsigned shift = 0;

    *v = 0;
    while (*p < end && shift < 64) {
        uint8_t b = *(*p)++;
        *v |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80))
            return RL_OK;
        shift += 7;
    }
    return RL_EDECODE;
}

/* protobuf-c recurses once per nested message with no limit of its own,
 * and cuts a string at a NUL byte silently: both are refused here, in one
 * pass over the bytes (each byte is read at one level only). */
static int scan(const uint8_t *p, size_t n, int m, int depth)
{
    const uint8_t *end;

    if (depth > RLS_XDS_DEPTH_MAX)
        return RL_EDECODE;
    if (n == 0) /* an empty Any's value is NULL */
        return RL_OK;
    end = p + n;
    while (p < end) {
        uint64_t key, len;
        int kind;
        if (varint(&p, end, &key) != RL_OK)
            return RL_EDECODE;
        switch (key & 7) {
        case 0:
            if (varint(&p, end, &len) != RL_OK)
                return RL_EDECODE;
            break;
        case 1:
            if ((size_t)(end - p) < 8)
                return RL_EDECODE;
            p += 8;
            break;
        case 5:
            if ((size_t)(end - p) < 4)
                return RL_EDECODE;
            p += 4;
            break;
        case 2:
            if (varint(&p, end, &len) != RL_OK || len > (uint64_t)(end - p))
                return RL_EDECODE;
            kind = field_kind(m, key >> 3);
            if (kind == M_STRING && memchr(p, 0, (size_t)len) != NULL)
                return RL_EDECODE;
            if (kind != M_NONE && kind != M_STRING &&
                scan(p, (size_t)len, kind, depth + 1) != RL_OK)
                return RL_EDECODE;
            p += len;
            break;
        default: /* groups: not in these messages */
            return RL_EDECODE;
        }
    }
    return RL_OK;
}

/* ---- protobuf-c's memory, bounded ---- */

typedef struct budget_s {
    size_t used;
} budget_t;

typedef union hdr_u {
    size_t size;
    max_align_t align;
} hdr_t;

static void *budget_alloc(void *data, size_t size)
{
    budget_t *b = data;
    hdr_t *h;

    if (size > RLS_XDS_DECODE_MEM_MAX - sizeof(hdr_t) ||
        size + sizeof(hdr_t) > RLS_XDS_DECODE_MEM_MAX - b->used)
        return NULL;
    if ((h = malloc(sizeof(hdr_t) + size)) == NULL)
        return NULL;
    h->size = size + sizeof(hdr_t);
    b->used += h->size;
    return h + 1;
}

static void budget_free(void *data, void *ptr)
{
    budget_t *b = data;
    hdr_t *h;

    if (ptr == NULL)
        return;
    h = (hdr_t *)ptr - 1;
    b->used -= h->size;
    free(h);
}

/* ---- YAML ---- */

static int put(rl_buf_t *o, const char *s)
{
    return rl_buf_append(o, s, strlen(s));
}

static int indent(rl_buf_t *o, int n)
{
    static const char sp[] = "                                ";
    int rc;

    while (n > 0) {
        int k = n < (int)sizeof(sp) - 1 ? n : (int)sizeof(sp) - 1;
        if ((rc = rl_buf_append(o, sp, (size_t)k)) != RL_OK)
            return rc;
        n -= k;
    }
    return RL_OK;
}

/* s double-quoted: '"' and '\' escaped, and every character YAML would
 * not keep as it is inside quotes (C0 and C1 controls, DEL, the line
 * separators it folds, U+FFFE/U+FFFF) as an escape of the same code
 * point. Other bytes pass; libyaml refuses bytes that are not UTF-8. */
static int qstr(rl_buf_t *o, const char *str)
{
    const unsigned char *s = (const unsigned char *)str;
    char esc[8];
    size_t i;
    int rc;

    if ((rc = rl_buf_append(o, "\"", 1)) != RL_OK)
        return rc;
    for (i = 0; s[i] != 0; i++) {
        unsigned c = s[i];
        const char *e = NULL;
        size_t skip = 0;
        if (c == '"')
            e = "\\\"";
        else if (c == '\\')
            e = "\\\\";
        else if (c < 0x20 || c == 0x7f) {
            snprintf(esc, sizeof(esc), "\\x%02x", c);
            e = esc;
        } else if (c == 0xc2 && s[i + 1] >= 0x80 && s[i + 1] <= 0x9f) {
            snprintf(esc, sizeof(esc), "\\x%02x", s[i + 1]);
            e = esc;
            skip = 1;
        } else if (c == 0xe2 && s[i + 1] == 0x80 &&
                   (s[i + 2] == 0xa8 || s[i + 2] == 0xa9)) {
            e = s[i + 2] == 0xa8 ? "\\L" : "\\P";
            skip = 2;
        } else if (c == 0xef && s[i + 1] == 0xbf &&
                   (s[i + 2] == 0xbe || s[i + 2] == 0xbf)) {
            e = s[i + 2] == 0xbe ? "\\uFFFE" : "\\uFFFF";
            skip = 2;
        }
        if (e != NULL) {
            rc = put(o, e);
            i += skip;
        } else {
            rc = rl_buf_append(o, &s[i], 1);
        }
        if (rc != RL_OK)
            return rc;
    }
    return rl_buf_append(o, "\"", 1);
}

/* "<indent>key: " */
static int field(rl_buf_t *o, int ind, const char *key)
{
    int rc;

    if ((rc = indent(o, ind)) != RL_OK || (rc = put(o, key)) != RL_OK)
        return rc;
    return put(o, ": ");
}

static int str_line(rl_buf_t *o, int ind, const char *key, const char *v)
{
    int rc;

    if ((rc = field(o, ind, key)) != RL_OK || (rc = qstr(o, v)) != RL_OK)
        return rc;
    return put(o, "\n");
}

static int true_line(rl_buf_t *o, int ind, const char *key)
{
    int rc;

    if ((rc = field(o, ind, key)) != RL_OK)
        return rc;
    return put(o, "true\n");
}

static int value_flow(rl_buf_t *o, const Google__Protobuf__Value *v);

static int struct_flow(rl_buf_t *o, const Google__Protobuf__Struct *s)
{
    size_t i;
    int rc;

    if ((rc = put(o, "{")) != RL_OK)
        return rc;
    for (i = 0; s != NULL && i < s->n_fields; i++) {
        const Google__Protobuf__Struct__FieldsEntry *e = s->fields[i];
        if ((i > 0 && (rc = put(o, ", ")) != RL_OK) ||
            (rc = qstr(o, e->key != NULL ? e->key : "")) != RL_OK ||
            (rc = put(o, ": ")) != RL_OK || (rc = value_flow(o, e->value)))
            return rc;
    }
    return put(o, "}");
}

/* Nesting is bounded by scan() before protobuf-c built v. */
static int value_flow(rl_buf_t *o, const Google__Protobuf__Value *v)
{
    size_t i;
    int rc;

    if (v == NULL)
        return put(o, "null");
    switch (v->kind_case) {
    case GOOGLE__PROTOBUF__VALUE__KIND_NUMBER_VALUE:
        if (isnan(v->number_value))
            return put(o, ".nan");
        if (isinf(v->number_value))
            return put(o, v->number_value > 0 ? ".inf" : "-.inf");
        return rl_buf_printf(o, "%.17g", v->number_value);
    case GOOGLE__PROTOBUF__VALUE__KIND_STRING_VALUE:
        return qstr(o, v->string_value != NULL ? v->string_value : "");
    case GOOGLE__PROTOBUF__VALUE__KIND_BOOL_VALUE:
        return put(o, v->bool_value ? "true" : "false");
    case GOOGLE__PROTOBUF__VALUE__KIND_STRUCT_VALUE:
        return struct_flow(o, v->struct_value);
    case GOOGLE__PROTOBUF__VALUE__KIND_LIST_VALUE:
        if ((rc = put(o, "[")) != RL_OK)
            return rc;
        for (i = 0; v->list_value != NULL && i < v->list_value->n_values; i++)
            if ((i > 0 && (rc = put(o, ", ")) != RL_OK) ||
                (rc = value_flow(o, v->list_value->values[i])) != RL_OK)
                return rc;
        return put(o, "]");
    default:
        return put(o, "null");
    }
}

static const char *unit_name(int u)
{
    static const char *const names[] = {"unknown", "second", "minute", "hour",
                                        "day",     "month",  "year",   "week"};

    return u >= 0 && u < (int)(sizeof(names) / sizeof(names[0])) ? names[u]
                                                                 : NULL;
}

/* rate_limit at ind: unlimited first (the loader then skips the rest, as
 * envoy-ratelimit ignores a unit beside it), the unit unless UNKNOWN
 * (which envoy-ratelimit treats as none). */
static int policy(rl_buf_t *o, int ind, const policy_pb_t *p)
{
    const char *u;
    size_t i;
    int rc;

    if ((rc = indent(o, ind)) != RL_OK || (rc = put(o, "rate_limit:\n")))
        return rc;
    ind += 2;
    if (p->unlimited && (rc = true_line(o, ind, "unlimited")) != RL_OK)
        return rc;
    if (p->unit != 0) {
        if ((u = unit_name((int)p->unit)) != NULL)
            rc = str_line(o, ind, "unit", u);
        else if ((rc = field(o, ind, "unit")) == RL_OK)
            rc = rl_buf_printf(o, "\"%d\"\n", (int)p->unit);
        if (rc != RL_OK)
            return rc;
    }
    if ((!p->unlimited || p->requests_per_unit != 0) &&
        ((rc = field(o, ind, "requests_per_unit")) != RL_OK ||
         (rc = rl_buf_printf(o, "%u\n", (unsigned)p->requests_per_unit))))
        return rc;
    if (p->name != NULL && p->name[0] != 0 &&
        (rc = str_line(o, ind, "name", p->name)) != RL_OK)
        return rc;
    if (p->n_replaces > 0) {
        if ((rc = indent(o, ind)) != RL_OK || (rc = put(o, "replaces:\n")))
            return rc;
        for (i = 0; i < p->n_replaces; i++) {
            const char *n = p->replaces[i]->name;
            if ((rc = indent(o, ind + 2)) != RL_OK ||
                (rc = put(o, "- ")) != RL_OK ||
                (rc = str_line(o, 0, "name", n != NULL ? n : "")) != RL_OK)
                return rc;
        }
    }
    return RL_OK;
}

static int descriptors(rl_buf_t *o, int ind, desc_pb_t *const *d, size_t n)
{
    size_t i;
    int rc;

    if ((rc = indent(o, ind)) != RL_OK || (rc = put(o, "descriptors:\n")))
        return rc;
    for (i = 0; i < n; i++) {
        const desc_pb_t *x = d[i];
        int in = ind + 4;
        /* "  - key: ..." then the rest under it */
        if ((rc = indent(o, ind + 2)) != RL_OK || (rc = put(o, "- ")) ||
            (rc = str_line(o, 0, "key", x->key != NULL ? x->key : "")))
            return rc;
        if (x->value != NULL && x->value[0] != 0 &&
            (rc = str_line(o, in, "value", x->value)) != RL_OK)
            return rc;
        if (x->rate_limit != NULL &&
            (rc = policy(o, in, x->rate_limit)) != RL_OK)
            return rc;
        if ((x->shadow_mode && (rc = true_line(o, in, "shadow_mode"))) ||
            (x->detailed_metric &&
             (rc = true_line(o, in, "detailed_metric"))) ||
            (x->quota_mode && (rc = true_line(o, in, "quota_mode"))))
            return rc;
        if (x->metadata != NULL &&
            ((rc = field(o, in, "metadata")) != RL_OK ||
             (rc = struct_flow(o, x->metadata)) != RL_OK ||
             (rc = put(o, "\n")) != RL_OK))
            return rc;
        if (x->n_descriptors > 0 &&
            (rc = descriptors(o, in, x->descriptors, x->n_descriptors)))
            return rc;
    }
    return RL_OK;
}

int rls_xds_conf_yaml(const uint8_t *msg, size_t len, rl_buf_t *out,
                      char **name)
{
    ProtobufCAllocator a;
    budget_t b = {0};
    conf_pb_t *c;
    int rc;

    if (name != NULL)
        *name = NULL;
    if (len > RLS_XDS_MSG_MAX || scan(msg, len, M_CONF, 0) != RL_OK)
        return RL_EDECODE;
    a.alloc = budget_alloc;
    a.free = budget_free;
    a.allocator_data = &b;
    c = ratelimit__config__ratelimit__v3__rate_limit_config__unpack(&a, len,
                                                                    msg);
    if (c == NULL)
        return RL_EDECODE;
    rc = str_line(out, 0, "domain", c->domain != NULL ? c->domain : "");
    if (rc == RL_OK && c->n_descriptors > 0)
        rc = descriptors(out, 0, c->descriptors, c->n_descriptors);
    if (rc == RL_OK && name != NULL &&
        (*name = strdup(c->name != NULL ? c->name : "")) == NULL)
        rc = RL_ENOMEM;
    ratelimit__config__ratelimit__v3__rate_limit_config__free_unpacked(c, &a);
    return rc;
}

/* ---- One DiscoveryResponse ---- */

void rls_xds_update_free(rls_xds_update_t *u)
{
    size_t i;

    for (i = 0; i < u->n; i++) {
        if (u->names != NULL)
            free(u->names[i]);
        if (u->bufs != NULL)
            free(u->bufs[i]);
    }
    free(u->names);
    free(u->bufs);
    free(u->lens);
    free(u->version);
    free(u->nonce);
    free(u->type_url);
    memset(u, 0, sizeof(*u));
}

/* "xds:NAME" (or "xds:#i" unnamed), cut to XDS_NAME_MAX and printable:
 * it is each error's FILE, in logs and NACKs. */
static char *doc_name(const char *name, size_t i)
{
    char *s = malloc(XDS_NAME_MAX + 32);
    size_t k, n = 0;

    if (s == NULL)
        return NULL;
    if (name == NULL || name[0] == 0) {
        snprintf(s, XDS_NAME_MAX + 32, "xds:#%zu", i);
        return s;
    }
    memcpy(s, "xds:", 4);
    n = 4;
    for (k = 0; name[k] != 0 && k < XDS_NAME_MAX; k++) {
        unsigned char c = (unsigned char)name[k];
        s[n++] = c > 0x20 && c < 0x7f && c != ':' ? (char)c : '_';
    }
    s[n] = 0;
    return s;
}

int rls_xds_update_decode(const uint8_t *msg, size_t len, rls_xds_update_t *u,
                          char *err, size_t errlen)
{
    ProtobufCAllocator a;
    budget_t b = {0};
    resp_pb_t *r;
    size_t i, total = 0;
    int rc = RL_OK;

    memset(u, 0, sizeof(*u));
    if (errlen > 0)
        err[0] = 0;
    if (len > RLS_XDS_MSG_MAX)
        return RL_EDECODE;
    a.alloc = budget_alloc;
    a.free = budget_free;
    a.allocator_data = &b;
    r = envoy__service__discovery__v3__discovery_response__unpack(&a, len, msg);
    if (r == NULL)
        return RL_EDECODE;
    if ((u->version = strdup(r->version_info ? r->version_info : "")) == NULL ||
        (u->nonce = strdup(r->nonce ? r->nonce : "")) == NULL ||
        (u->type_url = strdup(r->type_url ? r->type_url : "")) == NULL) {
        rc = RL_ENOMEM;
        goto out;
    }
    if (strcmp(u->type_url, RLS_XDS_TYPE_URL) != 0) {
        snprintf(err, errlen, "type_url is not " RLS_XDS_TYPE_URL);
        rc = RL_EINVAL;
        goto out;
    }
    if (r->n_resources > RLS_XDS_RESOURCES_MAX) {
        snprintf(err, errlen, "%zu resources: at most %u", r->n_resources,
                 RLS_XDS_RESOURCES_MAX);
        rc = RL_EINVAL;
        goto out;
    }
    u->names = calloc(r->n_resources + 1, sizeof(*u->names));
    u->bufs = calloc(r->n_resources + 1, sizeof(*u->bufs));
    u->lens = calloc(r->n_resources + 1, sizeof(*u->lens));
    if (u->names == NULL || u->bufs == NULL || u->lens == NULL) {
        rc = RL_ENOMEM;
        goto out;
    }
    for (i = 0; i < r->n_resources; i++) {
        const Google__Protobuf__Any *any = r->resources[i];
        size_t cap = XDS_YAML_MAX - total;
        rl_buf_t o;
        char *name = NULL;
        if (any->type_url == NULL || strcmp(any->type_url, RLS_XDS_TYPE_URL)) {
            snprintf(err, errlen, "resource %zu is not a RateLimitConfig", i);
            rc = RL_EINVAL;
            goto out;
        }
        rl_buf_init(&o, cap < RLS_RULES_FILE_MAX ? cap : RLS_RULES_FILE_MAX);
        rc = rls_xds_conf_yaml(any->value.data, any->value.len, &o, &name);
        if (rc == RL_OK && (u->names[i] = doc_name(name, i)) == NULL)
            rc = RL_ENOMEM;
        free(name);
        if (rc != RL_OK) {
            rl_buf_free(&o);
            free(u->names[i]);
            u->names[i] = NULL;
            if (rc == RL_EDECODE)
                snprintf(err, errlen,
                         "resource %zu does not decode as a RateLimitConfig "
                         "(or nests deeper than %d, or a string holds a NUL)",
                         i, RLS_XDS_DEPTH_MAX);
            else if (rc == RL_EFULL)
                snprintf(err, errlen,
                         "resource %zu: the configuration is too large", i);
            rc = rc == RL_ENOMEM ? RL_ENOMEM : RL_EINVAL;
            goto out;
        }
        u->lens[i] = rl_buf_len(&o);
        u->bufs[i] = (char *)o.data; /* never consumed: rpos is 0 */
        u->n = i + 1;
        total += u->lens[i];
    }
out:
    envoy__service__discovery__v3__discovery_response__free_unpacked(r, &a);
    return rc;
}

int rls_xds_update_build(const rls_xds_update_t *u, rls_envoy_conf_t **out,
                         rls_diag_t *diag)
{
    return rls_envoy_conf_build((const char *const *)u->names,
                                (const char *const *)u->bufs, u->lens, u->n,
                                out, diag);
}
