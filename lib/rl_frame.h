/* Frame codec: the gRPC-style framing of DESIGN.md, "Framing".
 *
 *   +------+----------------------+-----------------------+
 *   | flag | length (u32, BE)     | payload (length bytes)|
 *   +------+----------------------+-----------------------+
 *
 * The flag must be 0 (no compression). The decoder does no I/O and never
 * allocates: it looks at bytes the caller already holds and answers "here is
 * a frame", "need more" or a specific error, as hiredis's reader does. The
 * declared length is checked against the caller's maximum as soon as the
 * header is complete, before anything is reserved for the payload. */
#ifndef RL_FRAME_H
#define RL_FRAME_H

#include <stddef.h>
#include <stdint.h>

#include "rl_buf.h"

#define RL_FRAME_HEADER 5
#define RL_FRAME_MAX_DEFAULT 65536
/* gRPC's flag for a compressed message; this codec refuses it as any other
 * flag, and a caller that answers it apart (gRPC's status) compares p[0]. */
#define RL_FRAME_COMPRESSED 1

typedef struct rl_frame_s {
    const uint8_t *payload; /* points into the caller's bytes */
    uint32_t len;           /* payload length */
    size_t size;            /* header + payload; bytes to consume */
} rl_frame_t;

/* Decodes one frame from the front of p[0..n).
 *
 * Returns RL_OK with *f describing the frame (its payload points into p);
 * RL_EAGAIN when more bytes are needed, with f->size set to the whole
 * frame's size once the header is known (0 before), so a caller can reserve
 * exactly; RL_EFRAMEFLAG as soon as the first byte is not 0; RL_EFRAMESIZE as
 * soon as the header declares more than max_payload bytes. After an error
 * the stream is unusable and the caller should close it. */
int rl_frame_decode(const uint8_t *p, size_t n, uint32_t max_payload,
                    rl_frame_t *f);

/* Takes the next frame off the front of b: rl_frame_decode on b's readable
 * bytes, then, on RL_OK only, consumes the frame. f->payload stays valid
 * until the next reserve, append or free on b (consuming moves no bytes).
 * Returns what rl_frame_decode returns. */
int rl_frame_take(rl_buf_t *b, uint32_t max_payload, rl_frame_t *f);

/* Writes a 5-byte header for a payload of `len` bytes at p. */
void rl_frame_header(uint8_t *p, uint32_t len);

/* The payload length a complete header at p[0..RL_FRAME_HEADER) declares,
 * whatever its flag: for a caller that reads a frame piece by piece and
 * wants the rest's size, or says how large a refused frame was. */
uint32_t rl_frame_length(const uint8_t *p);

/* Reserves room at the end of b for one frame of a `len`-byte payload and
 * writes its header; *payload is where the caller writes the len bytes,
 * then rl_frame_commit(b, len) makes the frame readable. Returns RL_OK,
 * RL_EINVAL when len does not fit the header's 32 bits, or what
 * rl_buf_reserve returns (b is unchanged on an error). */
int rl_frame_reserve(rl_buf_t *b, size_t len, uint8_t **payload);

/* Commits the frame rl_frame_reserve made room for: header + len bytes. */
void rl_frame_commit(rl_buf_t *b, size_t len);

#endif
