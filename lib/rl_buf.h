/* A growable byte buffer with separate read and write cursors.
 *
 *   data           rpos            wpos                cap
 *   |  consumed    |  readable      |  writable          |
 *
 * Writers reserve space, fill it, then commit; readers look at the readable
 * window and consume what they have handled. The allocation bounds (data,
 * cap) are kept apart from the unread window (rpos, wpos), as nginx's
 * ngx_buf_t does. Consumed space is reclaimed lazily: the cursors snap back
 * to 0 for free whenever the buffer drains, and unread bytes are moved to the
 * front only when a reservation would otherwise have to grow the allocation,
 * so a steady stream of frames costs no memmove per frame.
 *
 * A buffer never grows past its cap (`max`): a reservation that would need
 * more returns RL_EFULL, which is how callers bound a peer's memory. */
#ifndef RL_BUF_H
#define RL_BUF_H

#include <stddef.h>
#include <stdint.h>

typedef struct rl_buf_s {
    uint8_t *data;
    size_t cap;  /* bytes allocated at data */
    size_t rpos; /* first unread byte */
    size_t wpos; /* first free byte */
    size_t max;  /* cap may never exceed this */
} rl_buf_t;

/* Initialises an empty buffer that may grow up to `max` bytes. Allocates
 * nothing until the first reservation. */
void rl_buf_init(rl_buf_t *b, size_t max);

/* Releases the allocation; the buffer is empty and reusable afterwards.
 * Accepts NULL. */
void rl_buf_free(rl_buf_t *b);

/* Makes at least `n` contiguous writable bytes available after the readable
 * window and stores their address in *out. The pointer is valid until the
 * next reserve, append or free. Returns 0, RL_EFULL when the readable bytes
 * plus `n` exceed the cap, or RL_ENOMEM. */
int rl_buf_reserve(rl_buf_t *b, size_t n, uint8_t **out);

/* Marks `n` bytes of a preceding reservation as written. */
void rl_buf_commit(rl_buf_t *b, size_t n);

/* Drops `n` readable bytes from the front. Draining the buffer resets both
 * cursors to 0 so the next write starts at the front. */
void rl_buf_consume(rl_buf_t *b, size_t n);

/* Copies `n` bytes in (reserve + memcpy + commit). Same returns as reserve. */
int rl_buf_append(rl_buf_t *b, const void *p, size_t n);

/* Forgets all content but keeps the allocation. */
void rl_buf_reset(rl_buf_t *b);

/* Appends printf-formatted text (no NUL). Returns 0, RL_EFULL / RL_ENOMEM
 * from the buffer (nothing appended), or RL_EINVAL for a bad format. */
int rl_buf_printf(rl_buf_t *b, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

static inline uint8_t *rl_buf_rptr(const rl_buf_t *b)
{
    /* A buffer not yet allocated has data NULL, and NULL + 0 is undefined
     * in C (clang's UBSan reports it): hand back data itself then. */
    return b->rpos != 0 ? b->data + b->rpos : b->data;
}

static inline size_t rl_buf_len(const rl_buf_t *b)
{
    return b->wpos - b->rpos;
}

/* Writable bytes available without moving or growing anything. */
static inline size_t rl_buf_avail(const rl_buf_t *b)
{
    return b->cap - b->wpos;
}

#endif
