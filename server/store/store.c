/* Helpers every store shares (store.h). */
#include "store/store.h"

#include <string.h>

#include "rl_window.h"

size_t rls_wkey(const rls_op_t *op, uint32_t window_s, uint64_t index,
                char *dst)
{
    size_t n = op->key_len;

    memcpy(dst, op->key, n);
    dst[n++] = ':';
    n += rl_put_u64(dst + n, window_s);
    dst[n++] = ':';
    n += rl_put_u64(dst + n, index);
    dst[n] = '\0';
    return n;
}
