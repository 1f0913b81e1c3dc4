#include "rl_buf.h"

#include <assert.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rl_error.h"

/* First allocation; large enough for a socket read full of small frames. */
#define RL_BUF_MIN 4096

void rl_buf_init(rl_buf_t *b, size_t max)
{
    memset(b, 0, sizeof(*b));
    b->max = max;
}

void rl_buf_free(rl_buf_t *b)
{
    if (b == NULL)
        return;
    free(b->data);
    b->data = NULL;
    b->cap = b->rpos = b->wpos = 0;
}

int rl_buf_reserve(rl_buf_t *b, size_t n, uint8_t **out)
{
    size_t len = b->wpos - b->rpos;

    if (b->cap - b->wpos >= n) {
        *out = b->data + b->wpos;
        return RL_OK;
    }
    if (n > b->max || len > b->max - n)
        return RL_EFULL;

    /* Moving the unread bytes to the front is cheaper than growing, and it
     * happens only when the tail is too short, not once per frame. */
    if (b->cap >= len + n) {
        memmove(b->data, b->data + b->rpos, len);
        b->rpos = 0;
        b->wpos = len;
        *out = b->data + b->wpos;
        return RL_OK;
    }

    size_t ncap = b->cap ? b->cap : RL_BUF_MIN;
    while (ncap < len + n)
        ncap = ncap > SIZE_MAX / 2 ? SIZE_MAX : ncap * 2;
    if (ncap > b->max)
        ncap = b->max;

    uint8_t *nd = malloc(ncap);
    if (nd == NULL)
        return RL_ENOMEM;
    if (len)
        memcpy(nd, b->data + b->rpos, len);
    free(b->data);
    b->data = nd;
    b->cap = ncap;
    b->rpos = 0;
    b->wpos = len;
    *out = b->data + b->wpos;
    return RL_OK;
}

void rl_buf_commit(rl_buf_t *b, size_t n)
{
    assert(n <= b->cap - b->wpos);
    b->wpos += n;
}

void rl_buf_consume(rl_buf_t *b, size_t n)
{
    assert(n <= b->wpos - b->rpos);
    b->rpos += n;
    if (b->rpos == b->wpos)
        b->rpos = b->wpos = 0;
}

int rl_buf_append(rl_buf_t *b, const void *p, size_t n)
{
    uint8_t *w;
    int rc = rl_buf_reserve(b, n, &w);

    if (rc != RL_OK)
        return rc;
    if (n)
        memcpy(w, p, n);
    b->wpos += n;
    return RL_OK;
}

void rl_buf_reset(rl_buf_t *b)
{
    b->rpos = b->wpos = 0;
}

int rl_buf_printf(rl_buf_t *b, const char *fmt, ...)
{
    size_t room = 256;
    uint8_t *w;
    va_list ap;
    int k, rc;

    for (;;) {
        if ((rc = rl_buf_reserve(b, room, &w)) != RL_OK)
            return rc;
        va_start(ap, fmt);
        k = vsnprintf((char *)w, rl_buf_avail(b), fmt, ap);
        va_end(ap);
        if (k < 0)
            return RL_EINVAL;
        if ((size_t)k < rl_buf_avail(b)) {
            rl_buf_commit(b, (size_t)k);
            return RL_OK;
        }
        room = (size_t)k + 1;
    }
}
