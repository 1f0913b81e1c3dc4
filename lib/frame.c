#include "rl_frame.h"

#include "rl_error.h"

int rl_frame_decode(const uint8_t *p, size_t n, uint32_t max_payload,
                    rl_frame_t *f)
{
    f->payload = NULL;
    f->len = 0;
    f->size = 0;

    if (n == 0)
        return RL_EAGAIN;
    if (p[0] != 0)
        return RL_EFRAMEFLAG;
    if (n < RL_FRAME_HEADER)
        return RL_EAGAIN;

    uint32_t len = rl_frame_length(p);
    if (len > max_payload)
        return RL_EFRAMESIZE;

    f->size = RL_FRAME_HEADER + (size_t)len;
    if (n < f->size)
        return RL_EAGAIN;
    f->payload = p + RL_FRAME_HEADER;
    f->len = len;
    return RL_OK;
}

int rl_frame_take(rl_buf_t *b, uint32_t max_payload, rl_frame_t *f)
{
    int rc = rl_frame_decode(rl_buf_rptr(b), rl_buf_len(b), max_payload, f);

    if (rc == RL_OK)
        rl_buf_consume(b, f->size);
    return rc;
}

void rl_frame_header(uint8_t *p, uint32_t len)
{
    p[0] = 0;
    p[1] = (uint8_t)(len >> 24);
    p[2] = (uint8_t)(len >> 16);
    p[3] = (uint8_t)(len >> 8);
    p[4] = (uint8_t)len;
}

uint32_t rl_frame_length(const uint8_t *p)
{
    return (uint32_t)p[1] << 24 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 8 |
           (uint32_t)p[4];
}

int rl_frame_reserve(rl_buf_t *b, size_t len, uint8_t **payload)
{
    uint8_t *w;
    int rc;

    if (len > UINT32_MAX)
        return RL_EINVAL;
    rc = rl_buf_reserve(b, RL_FRAME_HEADER + len, &w);
    if (rc != RL_OK)
        return rc;
    rl_frame_header(w, (uint32_t)len);
    *payload = w + RL_FRAME_HEADER;
    return RL_OK;
}

void rl_frame_commit(rl_buf_t *b, size_t len)
{
    rl_buf_commit(b, RL_FRAME_HEADER + len);
}
