#include "rl_window.h"

#include <string.h>

#include "rl_error.h"
#include "rl_hash.h"

void rl_decide(uint64_t count, uint64_t limit, uint64_t now_ms,
               uint32_t window_s, rl_result_t *r)
{
    rl_decide_reset(count, limit, rl_window_reset_after_ms(now_ms, window_s),
                    r);
}

void rl_decide_reset(uint64_t count, uint64_t limit, uint64_t reset,
                     rl_result_t *r)
{
    int allowed = count <= limit;

    r->code = allowed ? RL_CODE_OK : RL_CODE_OVER_LIMIT;
    r->limit = limit;
    r->used = count;
    r->remaining = allowed ? limit - count : 0;
    r->reset_after_ms = reset;
    r->retry_after_ms = allowed ? 0 : reset;
}

size_t rl_put_u64(char *p, uint64_t v)
{
    char tmp[20];
    size_t n = 0, i;

    do {
        tmp[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    for (i = 0; i < n; i++)
        p[i] = tmp[n - 1 - i];
    return n;
}

int rl_key_format(char *dst, size_t cap, const char *prefix, size_t prefix_len,
                  const char *key, size_t key_len, uint32_t window_s,
                  uint64_t index)
{
    size_t n = 0;

    if (cap < RL_KEY_SIZE(prefix_len, key_len))
        return RL_EFULL;
    memcpy(dst, prefix, prefix_len);
    n += prefix_len;
    dst[n++] = '{';
    memcpy(dst + n, key, key_len);
    n += key_len;
    dst[n++] = '}';
    dst[n++] = ':';
    n += rl_put_u64(dst + n, window_s);
    dst[n++] = ':';
    n += rl_put_u64(dst + n, index);
    dst[n] = '\0';
    return (int)n;
}

uint64_t rl_phase_offset_ms(const char *key, size_t len, uint32_t window_s)
{
    /* Fixed, so that every instance staggers a caller alike. */
    static const rl_hash_key_t k = {UINT64_C(0x7068617365206f66),
                                    UINT64_C(0x6673657420763121)};
    uint64_t W = (uint64_t)window_s * 1000;

    return W ? rl_hash(&k, key, len) % W : 0;
}
