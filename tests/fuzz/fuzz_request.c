/* Fuzz target: bytes off the network, as rl-server and librlc see them.
 *
 * The input is a byte stream cut into frames (max payload 1024); every
 * payload is decoded as a CheckRequest and as a CheckResponse. Beyond "does
 * not crash", it checks a property: whatever decodes re-encodes and decodes
 * to the same fields, and a request that passes validation formats a store
 * key within the documented bound. */
#include <assert.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "rl_buf.h"
#include "rl_validate.h"
#include "rl_error.h"
#include "rl_frame.h"
#include "rl_msg.h"
#include "rl_window.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_roundtrip(const rl_check_t *c)
{
    rl_buf_t b;
    rl_frame_t f;
    rl_check_t back;

    rl_buf_init(&b, 1 << 20);
    if (rl_check_put(&b, c) != RL_OK)
        abort();
    if (rl_frame_decode(rl_buf_rptr(&b), rl_buf_len(&b), 1 << 20, &f) != RL_OK)
        abort();
    if (rl_check_decode(f.payload, f.len, &back) != RL_OK)
        abort();
    if (back.id != c->id || back.cost != c->cost || back.limit != c->limit ||
        back.window_s != c->window_s || back.key_len != c->key_len ||
        back.rule_len != c->rule_len ||
        (c->key_len && memcmp(back.key, c->key, c->key_len) != 0) ||
        (c->rule_len && memcmp(back.rule, c->rule, c->rule_len) != 0))
        abort();
    rl_buf_free(&b);
}

static void result_roundtrip(const rl_result_t *r)
{
    uint8_t *p = malloc(rl_result_size(r) + 1);
    rl_result_t back;
    size_t n;

    if (p == NULL)
        return;
    n = rl_result_encode(r, p);
    if (n != rl_result_size(r) || rl_result_decode(p, n, &back) != RL_OK ||
        back.id != r->id || back.code != r->code || back.used != r->used ||
        back.error_len != r->error_len)
        abort();
    free(p);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    size_t off = 0;

    while (off < size) {
        rl_frame_t f;
        rl_check_t c;
        rl_result_t r;
        int rc = rl_frame_decode(data + off, size - off, 1024, &f);

        if (rc != RL_OK)
            break; /* need more, or a broken frame: the stream ends */
        if (f.size > size - off || f.len > 1024)
            abort();
        if (rl_check_decode(f.payload, f.len, &c) == RL_OK) {
            check_roundtrip(&c);
            if (rl_check_validate(&c) == RL_OK) {
                char key[RL_KEY_SIZE(3, RL_KEY_MAX)];
                uint32_t w = c.window_s ? c.window_s : 60;
                int n = rl_key_format(key, sizeof(key), "rl:", 3, c.key,
                                      c.key_len, w,
                                      rl_window_index(UINT64_MAX / 2, w));
                if (n <= 0 || (size_t)n >= sizeof(key) || c.cost == 0)
                    abort();
            }
        }
        if (rl_result_decode(f.payload, f.len, &r) == RL_OK)
            result_roundtrip(&r);
        off += f.size;
    }
    return 0;
}
