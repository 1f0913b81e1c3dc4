/* A raw HTTP/2 client for tests and load (h2raw.c): frames written by
 * hand so that a test can send anything (a stream flood, a frame on the
 * wrong stream, garbage), header blocks through nghttp2's HPACK deflater
 * and inflater (no hand-written HPACK), blocking I/O on one socket with
 * poll deadlines. Not a conforming HTTP/2 client: just enough to drive
 * rl-server's --grpc listener and read its answers. */
#ifndef RLT_H2RAW_H
#define RLT_H2RAW_H

#include <stddef.h>
#include <stdint.h>

#include <nghttp2/nghttp2.h>

/* What ended a stream: grpc_status from the final HEADERS (-1: none),
 * http_status from a HEADERS seen on it (0: none), rst the RST_STREAM
 * code (0: none). */
typedef void (*h2r_done_fn)(void *arg, int32_t id, int grpc_status,
                            int http_status, uint32_t rst);
/* A DATA frame's payload. */
typedef void (*h2r_data_fn)(void *arg, int32_t id, const uint8_t *p, size_t n);

typedef struct h2r_s {
    int fd;
    nghttp2_hd_deflater *def;
    nghttp2_hd_inflater *inf;
    uint8_t *in;
    size_t in_len, in_cap;
    uint8_t *out;
    size_t out_len, out_cap;
    int eof;
    int goaway;           /* GOAWAY frames received */
    int rsts;             /* RST_STREAM frames received */
    uint32_t goaway_code; /* the last one's error code */
    int settings;         /* SETTINGS frames (not ACKs) received */
    uint64_t unacked;     /* DATA bytes not yet given back */
    int last_http_status; /* per the last HEADERS, for trailers-only */
    h2r_done_fn on_done;
    h2r_data_fn on_data;
    void *arg;
} h2r_t;

/* Connects to 127.0.0.1:port and queues the preface and an empty
 * SETTINGS (unless raw: nothing queued). Returns 0 or -1. */
int h2r_connect(h2r_t *c, int port, int raw);
void h2r_close(h2r_t *c);

/* Queues a frame (no flags checked). */
int h2r_frame(h2r_t *c, uint8_t type, uint8_t flags, int32_t id, const void *p,
              size_t n);
/* Queues a HEADERS frame with the header block of nv. */
int h2r_headers(h2r_t *c, int32_t id, const nghttp2_nv *nv, size_t n,
                int end_stream);
/* Queues HEADERS and DATA of a unary gRPC call to path with message
 * msg[0, n) (the 5-byte prefix is added; flag is its first byte). */
int h2r_grpc(h2r_t *c, int32_t id, const char *path, const uint8_t *msg,
             size_t n, uint8_t flag);
/* Queues bytes as they are. */
int h2r_raw(h2r_t *c, const void *p, size_t n);
/* Queues a SETTINGS frame with n entries (e.g. INITIAL_WINDOW_SIZE 0: the
 * server may send no DATA), after h2r_connect(c, port, 1) and the
 * client magic, or at any time as a change. */
int h2r_settings(h2r_t *c, const nghttp2_settings_entry *iv, size_t n);
/* Queues a PING (not an ACK) with 8 bytes of zeros. */
int h2r_ping(h2r_t *c);

/* HPACK amplification, as an attacker sends it: a request's header block
 * on stream id that inserts one header of value_len bytes ("x-bomb",
 * value_len at most 4,000 so that it fits the 4,096-byte dynamic table)
 * into the server's dynamic table and then refers to it `refs` times, one
 * byte each. The block is a HEADERS frame (the request's fields, the
 * insert and as many of the references as fit in 16,384 bytes, at most
 * frame_refs) and CONTINUATION frames of
 * frame_refs references each (at most 16,000: the default frame size);
 * the last frame has END_HEADERS unless `open` (the caller goes on with
 * h2r_bomb_more). The block starts by emptying the dynamic table, and the
 * deflater empties its own at the start of its next block, so that both
 * ends' tables stay alike for h2r_headers and h2r_grpc afterwards. */
int h2r_bomb(h2r_t *c, int32_t id, size_t value_len, size_t refs,
             size_t frame_refs, int end_stream, int open);
/* A CONTINUATION of `refs` more references to h2r_bomb's header, in the
 * block h2r_bomb left open; `last`: END_HEADERS. */
int h2r_bomb_more(h2r_t *c, int32_t id, size_t refs, int last);

/* Writes what is queued and reads what has come, for up to timeout_ms
 * (returns sooner once something was read and parsed). Returns 0, or -1
 * at end of file or on an error. */
int h2r_pump(h2r_t *c, int timeout_ms);

/* One non-blocking round for a caller's own poll over many connections:
 * sends what is queued if revents has POLLOUT, reads and parses once if
 * it has POLLIN. Returns 0, or -1 at end of file or on an error. */
int h2r_io(h2r_t *c, short revents);

/* A RateLimitRequest for domain with one descriptor per (key, value)
 * pair (n pairs, each its own descriptor); *len set. malloc'd. */
uint8_t *h2r_rls_request(const char *domain, const char *const *kv, size_t n,
                         uint32_t hits, size_t *len);

#define H2R_PATH "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"

#endif
