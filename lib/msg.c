#include "rl_msg.h"

#include <string.h>

#include "rl_error.h"
#include "rl_frame.h"

enum { WT_VARINT = 0, WT_I64 = 1, WT_LEN = 2, WT_I32 = 5 };

/* Reads a base-128 varint. Returns bytes used, or 0 when truncated or
 * longer than the 10 bytes a 64-bit value can take. */
static inline size_t get_varint(const uint8_t *p, size_t n, uint64_t *v)
{
    uint64_t x = 0;
    size_t i;

    /* Tags and most values of these messages fit in one byte. */
    if (n > 0 && p[0] < 0x80) {
        *v = p[0];
        return 1;
    }

    for (i = 0; i < n && i < 10; i++) {
        x |= (uint64_t)(p[i] & 0x7f) << (7 * i);
        if ((p[i] & 0x80) == 0) {
            *v = x;
            return i + 1;
        }
    }
    return 0;
}

static inline size_t varint_size(uint64_t v)
{
    size_t n = 1;

    while (v >= 0x80) {
        v >>= 7;
        n++;
    }
    return n;
}

static inline size_t put_varint(uint8_t *p, uint64_t v)
{
    size_t n = 0;

    if (v < 0x80) {
        p[0] = (uint8_t)v;
        return 1;
    }

    while (v >= 0x80) {
        p[n++] = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    p[n++] = (uint8_t)v;
    return n;
}

/* One field of a message: its number and wire type, and either its varint
 * value or its length-delimited bytes. */
typedef struct {
    uint32_t num;
    uint32_t wt;
    uint64_t v;
    const uint8_t *s;
    size_t len;
} field_t;

/* Reads the field at p[*off..n). Returns 1 with *f filled, 0 at the end of
 * input, RL_EDECODE on malformed input. Fixed-width fields are skipped with
 * f->num set to 0 (this schema has none, so they can only be unknown). */
static inline int next_field(const uint8_t *p, size_t n, size_t *off,
                             field_t *f)
{
    uint64_t tag, len;
    size_t k;

    if (*off == n)
        return 0;
    k = get_varint(p + *off, n - *off, &tag);
    if (k == 0 || (tag >> 3) == 0 || (tag >> 3) > UINT32_MAX)
        return RL_EDECODE;
    *off += k;
    f->num = (uint32_t)(tag >> 3);
    f->wt = (uint32_t)(tag & 7);

    switch (f->wt) {
    case WT_VARINT:
        k = get_varint(p + *off, n - *off, &f->v);
        if (k == 0)
            return RL_EDECODE;
        *off += k;
        return 1;
    case WT_LEN:
        k = get_varint(p + *off, n - *off, &len);
        if (k == 0 || len > n - *off - k)
            return RL_EDECODE;
        f->s = p + *off + k;
        f->len = (size_t)len;
        *off += k + (size_t)len;
        return 1;
    case WT_I64:
    case WT_I32:
        k = f->wt == WT_I64 ? 8 : 4;
        if (n - *off < k)
            return RL_EDECODE;
        *off += k;
        f->num = 0;
        return 1;
    default:
        /* Groups (3, 4) are gone from proto3; 6 and 7 do not exist. */
        return RL_EDECODE;
    }
}

/* A known field must arrive with the wire type its declaration implies. */
#define EXPECT(f, type)                                                        \
    do {                                                                       \
        if ((f).wt != (type))                                                  \
            return RL_EDECODE;                                                 \
    } while (0)

/* One CheckRequest.Level (key 1, rule 2) into out's next slot; one past
 * RL_LEVELS_MAX is counted, not kept (validation refuses it). */
static int level_decode(const uint8_t *p, size_t n, rl_check_t *out)
{
    rl_level_t l = {NULL, 0, NULL, 0};
    size_t off = 0;
    field_t f = {0, 0, 0, NULL, 0};
    int rc;

    while ((rc = next_field(p, n, &off, &f)) == 1) {
        if (f.num == 1 || f.num == 2) {
            EXPECT(f, WT_LEN);
            if (f.num == 1) {
                l.key = (const char *)f.s;
                l.key_len = f.len;
            } else {
                l.rule = (const char *)f.s;
                l.rule_len = f.len;
            }
        }
    }
    if (rc != 0)
        return RL_EDECODE;
    if (out->nlevels < RL_LEVELS_MAX)
        out->levels[out->nlevels] = l;
    if (out->nlevels <= RL_LEVELS_MAX)
        out->nlevels++;
    return RL_OK;
}

int rl_check_decode(const uint8_t *p, size_t n, rl_check_t *out)
{
    size_t off = 0;
    field_t f = {0, 0, 0, NULL, 0};
    int rc;

    memset(out, 0, sizeof(*out));
    while ((rc = next_field(p, n, &off, &f)) == 1) {
        switch (f.num) {
        case 1:
            EXPECT(f, WT_VARINT);
            out->id = f.v;
            break;
        case 2:
            EXPECT(f, WT_LEN);
            out->key = (const char *)f.s;
            out->key_len = f.len;
            break;
        case 3:
            EXPECT(f, WT_VARINT);
            out->cost = (uint32_t)f.v;
            break;
        case 4:
            EXPECT(f, WT_VARINT);
            out->limit = f.v;
            break;
        case 5:
            EXPECT(f, WT_VARINT);
            out->window_s = (uint32_t)f.v;
            break;
        case 6:
            EXPECT(f, WT_LEN);
            out->rule = (const char *)f.s;
            out->rule_len = f.len;
            break;
        case 7:
            EXPECT(f, WT_VARINT);
            out->op = (uint32_t)f.v;
            break;
        case 8:
            EXPECT(f, WT_LEN);
            out->handle = f.s;
            out->handle_len = f.len;
            break;
        case 9:
            EXPECT(f, WT_VARINT);
            out->actual = f.v;
            break;
        case 20:
            EXPECT(f, WT_LEN);
            if ((rc = level_decode(f.s, f.len, out)) != RL_OK)
                return rc;
            break;
        default:
            break;
        }
    }
    return rc == 0 ? RL_OK : RL_EDECODE;
}

int rl_result_decode(const uint8_t *p, size_t n, rl_result_t *out)
{
    size_t off = 0;
    field_t f = {0, 0, 0, NULL, 0};
    int rc;

    memset(out, 0, sizeof(*out));
    while ((rc = next_field(p, n, &off, &f)) == 1) {
        if ((f.num >= 1 && f.num <= 7) || (f.num >= 9 && f.num <= 13) ||
            f.num == 15 || f.num == 16 || f.num == 20)
            EXPECT(f, WT_VARINT);
        switch (f.num) {
        case 1:
            out->id = f.v;
            break;
        case 2:
            out->code = (int32_t)(uint32_t)f.v;
            break;
        case 3:
            out->limit = f.v;
            break;
        case 4:
            out->used = f.v;
            break;
        case 5:
            out->remaining = f.v;
            break;
        case 6:
            out->reset_after_ms = f.v;
            break;
        case 7:
            out->retry_after_ms = f.v;
            break;
        case 8:
            EXPECT(f, WT_LEN);
            out->error = (const char *)f.s;
            out->error_len = f.len;
            break;
        case 9:
            out->notice = (int32_t)(uint32_t)f.v;
            break;
        case 10:
            out->shadow_refused = f.v != 0;
            break;
        case 11:
            out->window_s = (uint32_t)f.v;
            break;
        case 12:
            out->algorithm = (uint32_t)f.v;
            break;
        case 13:
            out->decided_at_ms = f.v;
            break;
        case 14:
            EXPECT(f, WT_LEN);
            out->handle = f.s;
            out->handle_len = f.len;
            break;
        case 15:
            out->expires_at_ms = f.v;
            break;
        case 16:
            out->failed_open = f.v != 0;
            break;
        case 20:
            out->level = (uint32_t)f.v;
            break;
        default:
            break;
        }
    }
    return rc == 0 ? RL_OK : RL_EDECODE;
}

/* Size and encoding of single fields; a zero value is not sent. */
static size_t size_u(uint32_t num, uint64_t v)
{
    return v ? varint_size((uint64_t)num << 3) + varint_size(v) : 0;
}

static size_t size_s(uint32_t num, size_t len)
{
    return len ? varint_size((uint64_t)num << 3) + varint_size(len) + len : 0;
}

static size_t put_u(uint8_t *p, uint32_t num, uint64_t v)
{
    size_t k;

    if (v == 0)
        return 0;
    k = put_varint(p, (uint64_t)num << 3 | WT_VARINT);
    return k + put_varint(p + k, v);
}

static size_t put_s(uint8_t *p, uint32_t num, const char *s, size_t len)
{
    size_t k;

    if (len == 0)
        return 0;
    k = put_varint(p, (uint64_t)num << 3 | WT_LEN);
    k += put_varint(p + k, len);
    memcpy(p + k, s, len);
    return k + len;
}

/* The bytes of level l's message (key, rule), without its tag and
 * length. */
static size_t level_size(const rl_level_t *l)
{
    return size_s(1, l->key_len) + size_s(2, l->rule_len);
}

/* Levels kept (nlevels may count one more, which is never sent). */
static uint32_t nlevels_of(const rl_check_t *c)
{
    return c->nlevels < RL_LEVELS_MAX ? c->nlevels : RL_LEVELS_MAX;
}

size_t rl_check_size(const rl_check_t *c)
{
    size_t n = size_u(1, c->id) + size_s(2, c->key_len) + size_u(3, c->cost) +
               size_u(4, c->limit) + size_u(5, c->window_s) +
               size_s(6, c->rule_len) + size_u(7, c->op) +
               size_s(8, c->handle_len) + size_u(9, c->actual);
    uint32_t i;

    /* A level with both strings empty is still sent (tag and length 0). */
    for (i = 0; i < nlevels_of(c); i++) {
        size_t m = level_size(&c->levels[i]);
        n += varint_size((uint64_t)20 << 3) + varint_size(m) + m;
    }
    return n;
}

size_t rl_check_encode(const rl_check_t *c, uint8_t *p)
{
    size_t k = 0;
    uint32_t i;

    k += put_u(p + k, 1, c->id);
    k += put_s(p + k, 2, c->key, c->key_len);
    k += put_u(p + k, 3, c->cost);
    k += put_u(p + k, 4, c->limit);
    k += put_u(p + k, 5, c->window_s);
    k += put_s(p + k, 6, c->rule, c->rule_len);
    k += put_u(p + k, 7, c->op);
    k += put_s(p + k, 8, (const char *)c->handle, c->handle_len);
    k += put_u(p + k, 9, c->actual);
    for (i = 0; i < nlevels_of(c); i++) {
        const rl_level_t *l = &c->levels[i];
        k += put_varint(p + k, (uint64_t)20 << 3 | WT_LEN);
        k += put_varint(p + k, level_size(l));
        k += put_s(p + k, 1, l->key, l->key_len);
        k += put_s(p + k, 2, l->rule, l->rule_len);
    }
    return k;
}

/* Enums are int32 on the wire: a negative value takes ten bytes. */
static uint64_t enum_wire(int32_t v)
{
    return (uint64_t)(int64_t)v;
}

size_t rl_result_size(const rl_result_t *r)
{
    return size_u(1, r->id) + size_u(2, enum_wire(r->code)) +
           size_u(3, r->limit) + size_u(4, r->used) + size_u(5, r->remaining) +
           size_u(6, r->reset_after_ms) + size_u(7, r->retry_after_ms) +
           size_s(8, r->error_len) + size_u(9, enum_wire(r->notice)) +
           size_u(10, r->shadow_refused != 0) + size_u(11, r->window_s) +
           size_u(12, r->algorithm) + size_u(13, r->decided_at_ms) +
           size_s(14, r->handle_len) + size_u(15, r->expires_at_ms) +
           size_u(16, r->failed_open != 0) + size_u(20, r->level);
}

size_t rl_result_encode(const rl_result_t *r, uint8_t *p)
{
    size_t k = 0;

    k += put_u(p + k, 1, r->id);
    k += put_u(p + k, 2, enum_wire(r->code));
    k += put_u(p + k, 3, r->limit);
    k += put_u(p + k, 4, r->used);
    k += put_u(p + k, 5, r->remaining);
    k += put_u(p + k, 6, r->reset_after_ms);
    k += put_u(p + k, 7, r->retry_after_ms);
    k += put_s(p + k, 8, r->error, r->error_len);
    k += put_u(p + k, 9, enum_wire(r->notice));
    k += put_u(p + k, 10, r->shadow_refused != 0);
    k += put_u(p + k, 11, r->window_s);
    k += put_u(p + k, 12, r->algorithm);
    k += put_u(p + k, 13, r->decided_at_ms);
    k += put_s(p + k, 14, (const char *)r->handle, r->handle_len);
    k += put_u(p + k, 15, r->expires_at_ms);
    k += put_u(p + k, 16, r->failed_open != 0);
    k += put_u(p + k, 20, r->level);
    return k;
}

int rl_check_put(rl_buf_t *b, const rl_check_t *c)
{
    size_t n = rl_check_size(c);
    uint8_t *w;
    int rc;

    rc = rl_frame_reserve(b, n, &w);
    if (rc != RL_OK)
        return rc;
    rl_check_encode(c, w);
    rl_frame_commit(b, n);
    return RL_OK;
}

/* A CheckResponse without its error text and handle is at most eight
 * varint fields of a one-byte tag and up to ten bytes each, plus the
 * error's tag and length, then shadow_refused (2 bytes), window_seconds
 * (up to 6), algorithm (up to 6), decided_at_ms (up to 11), the handle's
 * tag and length (up to 11), expires_at_ms (up to 11) and failed_open
 * (3: field 16's tag takes two bytes) and level (up to 7). */
#define RESULT_FIXED_MAX (8 * 11 + 1 + 10 + 2 + 6 + 6 + 11 + 11 + 11 + 3 + 7)

int rl_result_put(rl_buf_t *b, const rl_result_t *r)
{
    size_t n;
    uint8_t *w;
    int rc;

    /* The common case encodes in one pass: room for the largest possible
     * encoding, header written after. Only where that much room is not to
     * be had (a buffer near its cap) is the exact size worked out first,
     * so what fits is exactly what fitted before. */
    if (r->error_len <= UINT32_MAX - RESULT_FIXED_MAX &&
        r->handle_len <= UINT32_MAX - RESULT_FIXED_MAX - r->error_len &&
        rl_buf_avail(b) >=
            RL_FRAME_HEADER + RESULT_FIXED_MAX + r->error_len + r->handle_len) {
        w = b->data + b->wpos;
        n = rl_result_encode(r, w + RL_FRAME_HEADER);
        rl_frame_header(w, (uint32_t)n);
        rl_buf_commit(b, RL_FRAME_HEADER + n);
        return RL_OK;
    }
    n = rl_result_size(r);
    rc = rl_frame_reserve(b, n, &w);
    if (rc != RL_OK)
        return rc;
    rl_result_encode(r, w);
    rl_frame_commit(b, n);
    return RL_OK;
}

int rl_result_take(rl_buf_t *b, uint32_t max_payload, rl_result_t *r)
{
    rl_frame_t f;
    int rc;

    rc = rl_frame_decode(rl_buf_rptr(b), rl_buf_len(b), max_payload, &f);
    if (rc != RL_OK)
        return rc;
    rc = rl_result_decode(f.payload, f.len, r);
    if (rc != RL_OK)
        return rc;
    rl_buf_consume(b, f.size);
    return RL_OK;
}

const rl_result_t rl_goaway_notice = {
    .code = RL_CODE_ERROR,
    .error = "server is shutting down",
    .error_len = sizeof("server is shutting down") - 1,
    .notice = RL_NOTICE_GOAWAY,
};

int rl_result_is_goaway(const rl_result_t *r)
{
    return r->id == 0 && r->code == RL_CODE_ERROR &&
           r->notice == RL_NOTICE_GOAWAY;
}
