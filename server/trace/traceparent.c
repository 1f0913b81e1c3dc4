/* W3C traceparent parsing; see traceparent.h. */
#include "trace/traceparent.h"

#include <string.h>

#include "rl_error.h"

/* Lowercase hex only: the specification refuses uppercase digits. */
static int lhex(unsigned char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    return -1;
}

/* Decodes 2 * n hex digits at s into out[0, n). Returns 0, or -1 at a
 * byte that is not one. */
static int hex_bytes(const char *s, uint8_t *out, size_t n)
{
    size_t i;

    for (i = 0; i < n; i++) {
        int hi = lhex((unsigned char)s[2 * i]);
        int lo = lhex((unsigned char)s[2 * i + 1]);

        if (hi < 0 || lo < 0)
            return -1;
        out[i] = (uint8_t)(hi << 4 | lo);
    }
    return 0;
}

static int all_zero(const uint8_t *p, size_t n)
{
    size_t i;

    for (i = 0; i < n; i++)
        if (p[i] != 0)
            return 0;
    return 1;
}

int rls_traceparent_parse(const char *s, size_t n, rls_traceparent_t *out)
{
    uint8_t version;

    memset(out, 0, sizeof(*out));
    while (n > 0 && (s[0] == ' ' || s[0] == '\t')) {
        s++;
        n--;
    }
    while (n > 0 && (s[n - 1] == ' ' || s[n - 1] == '\t'))
        n--;
    if (n < RLS_TRACEPARENT_LEN || s[2] != '-' || s[35] != '-' ||
        s[52] != '-' || hex_bytes(s, &version, 1) != 0 || version == 0xff)
        goto bad;
    /* Version 00 is exactly its 55 bytes; a later version may go on, but
     * only after a '-'. */
    if (n > RLS_TRACEPARENT_LEN &&
        (version == 0 || s[RLS_TRACEPARENT_LEN] != '-'))
        goto bad;
    if (hex_bytes(s + 3, out->trace_id, 16) != 0 ||
        hex_bytes(s + 36, out->span_id, 8) != 0 ||
        hex_bytes(s + 53, &out->flags, 1) != 0 || all_zero(out->trace_id, 16) ||
        all_zero(out->span_id, 8))
        goto bad;
    out->valid = 1;
    return RL_OK;
bad:
    memset(out, 0, sizeof(*out));
    return RL_EINVAL;
}

void rls_traceparent_take(rls_traceparent_t *tp, unsigned *seen, const char *s,
                          size_t n)
{
    if ((*seen)++ == 0)
        (void)rls_traceparent_parse(s, n, tp);
    else
        memset(tp, 0, sizeof(*tp));
}
