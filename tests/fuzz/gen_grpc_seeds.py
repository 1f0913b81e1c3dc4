#!/usr/bin/env python3
"""Writes the seed corpus of fuzz_grpc.c (tests/fuzz/corpus/grpc/):
programs in its op language (fuzz_grpc.c: build(), OP_*) that take the
--grpc listener's header path: HPACK dynamic-table inserts and indexed
references, CONTINUATION frames, header lists around and over the 8 KiB
limit, trailers, zero windows, resets, pings; for libFuzzer to start from
and for the replay test in every build. Run from anywhere; rewrites the
seeds."""
import os

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus", "grpc")

(CALL, HEADERS, BOMB, BOMB_MORE, DATA, SETTINGS, PING, RST, WINDOW, RAW,
 TRAILERS, SPLIT) = range(12)
END_STREAM, ALIKE = 0x40, 0x80


def mode(piece=31, preface=True):
    """Byte 0: a program (top bit), sent with the client preface first, in
    pieces of piece * 8 + 1 bytes (31: all at once)."""
    return bytes([0x80 | (1 if preface else 0) | (piece << 2)])


def op(code, a=0, b=0):
    return bytes([code, a, b])


def bomb(value=4000, refs=8000, per=16000, end_stream=True, open_=False):
    """A block inserting one header of `value` bytes and `refs` one-byte
    references to it, in frames of `per` references."""
    return op(BOMB, value // 16, min(refs // 32, 255)) + bytes(
        [min((per - 1) // 64, 255), (1 if end_stream else 0) | (2 if open_ else 0)])


def raw_frame(type_, flags, stream, payload):
    """A frame copied as it is (OP_RAW)."""
    frame = len(payload).to_bytes(3, "big") + bytes([type_, flags]) \
        + stream.to_bytes(4, "big") + payload
    assert len(frame) < 256
    return bytes([RAW, len(frame), 0]) + frame


def health_headers(sid, method):
    """A HEADERS frame opening a grpc.health.v1 call (Check or Watch):
    HPACK literals without indexing, so no table state is shared with the
    program's other ops."""
    def lit(idx, value):
        return bytes([idx, len(value)]) + value
    block = (b"\x83\x86" + lit(4, b"/grpc.health.v1.Health/" + method)
             + lit(1, b"rl") + b"\x0f\x10" + bytes([16])
             + b"application/grpc")
    return raw_frame(1, 4, sid, block)


def health_call(sid, method, service=b"", end_stream=True, message=None):
    """A whole grpc.health.v1 call: HEADERS, then one DATA frame with the
    HealthCheckRequest naming service (or `message` as it is)."""
    if message is None:
        message = (bytes([0x0a, len(service)]) + service) if service else b""
    return health_headers(sid, method) + raw_frame(
        0, 1 if end_stream else 0, sid,
        bytes([0]) + len(message).to_bytes(4, "big") + message)


def window_update(sid, inc):
    return raw_frame(8, 0, sid, inc.to_bytes(4, "big"))


def headers(fields, value, end_stream=True, alike=False):
    return op(HEADERS, fields | (END_STREAM if end_stream else 0)
              | (ALIKE if alike else 0), value // 16)


SEEDS = {
    # Well-formed calls, as in the replay's synthesized ones.
    "calls": mode() + op(CALL, 1) + op(CALL, 2) + op(CALL, 3),
    "calls_in_pieces": mode(piece=2) + op(CALL, 1) + op(CALL, 7, 2),
    # The amplification: a 4,000-byte insert and references in
    # CONTINUATION frames; the stream is reset at once.
    "bomb": mode() + bomb(refs=8000, per=2000),
    # Two of them: the second ends the connection.
    "bomb_twice": mode() + bomb(refs=3000, per=1000) + op(CALL, 1)
    + bomb(refs=3000, per=1000),
    # A block left open, finished by a CONTINUATION, then a call (HPACK in
    # step after a reset).
    "bomb_open": mode() + bomb(refs=4, end_stream=False, open_=True)
    + op(BOMB_MORE, 8, 1) + op(CALL, 4),
    # Just under the limit: two references to a 4,000-byte header.
    "bomb_under": mode() + bomb(value=3900, refs=1, per=64) + op(CALL, 5),
    # Fields named alike: the deflater inserts the first and refers to it.
    "alike_over": mode() + headers(12, 1600, alike=True),
    "alike_under": mode() + headers(2, 2400, alike=True) + op(CALL, 6),
    "distinct_fields": mode() + headers(20, 300) + op(CALL, 6),
    # Many streams of header lists near the limit: the decode budget runs
    # out in the middle of a block (pause, stash, resume).
    "budget": mode() + b"".join(headers(3, 2560, alike=True)
                                for _ in range(8)) + op(CALL, 9),
    # Trailers counted with the headers.
    "trailers": mode() + headers(1, 64, end_stream=False) + op(DATA, 5)
    + op(TRAILERS, 6, 1600 // 16),
    # A header block split between HEADERS and CONTINUATION.
    "split": mode() + op(SPLIT, 4 | ALIKE, 3) + op(SPLIT, 8, 40),
    # A zero window: answers are owed, not drawn.
    "zero_window": mode() + op(SETTINGS, 0) + op(CALL, 1) + op(CALL, 2)
    + op(CALL, 3) + op(WINDOW, 1, 1),
    # HEADERS only, then pings: a stream that never ends its request.
    "headers_only": mode() + headers(0, 0, end_stream=False) + op(PING)
    + op(PING) + op(PING),
    # A call reset by the client, and one answered before it ends.
    "reset": mode() + op(CALL, 1) + op(RST, 8) + headers(0, 0, end_stream=False)
    + op(DATA, 200) + op(RST, 0),
    # Raw HPACK: a literal insert with incremental indexing, then indexed
    # references (0xbe: the newest dynamic entry) in a HEADERS frame.
    "raw_refs": mode() + raw_frame(1, 5, 1, bytes(
        [0x82, 0x86, 0x84,                  # GET, http, /
         0x41, 0x02]) + b"rl"               # :authority rl, inserted
        + bytes([0x40, 0x01]) + b"x" + bytes([0x05]) + b"vvvvv"  # x, inserted
        + bytes([0xBE, 0xBE, 0xBE])),       # x three times more
    # grpc.health.v1 (envoy/health.c): Check for "", envoy-ratelimit's
    # name, the RLS service's, an unknown one (NOT_FOUND), a message that is
    # no HealthCheckRequest (INTERNAL).
    "health_check": mode() + health_call(1, b"Check")
    + health_call(3, b"Check", b"ratelimit")
    + health_call(5, b"Check", b"envoy.service.ratelimit.v3.RateLimitService")
    + health_call(7, b"Check", b"no.such.Service")
    + health_call(9, b"Check", message=b"\x0a\xff"),
    # Watch: known and unknown services (SERVICE_UNKNOWN, the stream stays),
    # one the client resets, one whose request never ends, pings between.
    "health_watch": mode() + health_call(1, b"Watch")
    + health_call(3, b"Watch", b"x") + op(PING)
    + health_call(5, b"Watch", b"ratelimit")
    + raw_frame(3, 0, 5, bytes([0, 0, 0, 8]))
    + health_call(7, b"Watch", end_stream=False) + op(PING),
    # A zero window: the first status waits; a byte at a time it goes out
    # over several DATA frames.
    "health_watch_window": mode() + op(SETTINGS, 0)
    + health_call(1, b"Watch") + health_call(3, b"Watch", b"u")
    + window_update(0, 1 << 16) + window_update(1, 1) + window_update(1, 2)
    + window_update(3, 7) + window_update(1, 4),
    # Watch streams, then Checks: the target's status flips at each look,
    # so every Check pushes the Watch streams a change (one on a zero
    # window: its newer status replaces the one waiting).
    "health_watch_flip": mode() + health_call(1, b"Watch")
    + health_call(3, b"Watch", b"ratelimit") + health_call(5, b"Check")
    + health_call(7, b"Check") + op(SETTINGS, 0) + health_call(9, b"Watch")
    + health_call(11, b"Check") + health_call(13, b"Check")
    + window_update(9, 3) + health_call(15, b"Check")
    + window_update(0, 1 << 16) + window_update(9, 64),
    # More Watch streams than the connection's stream cap, and a Check
    # after them.
    "health_watch_many": mode() + b"".join(
        health_call(2 * i + 1, b"Watch") for i in range(12))
    + health_call(25, b"Check"),
}


def main():
    os.makedirs(OUT, exist_ok=True)
    for name in os.listdir(OUT):
        os.remove(os.path.join(OUT, name))
    for name, data in SEEDS.items():
        with open(os.path.join(OUT, name), "wb") as f:
            f.write(data)


if __name__ == "__main__":
    main()
