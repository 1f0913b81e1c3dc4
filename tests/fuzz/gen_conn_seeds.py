#!/usr/bin/env python3
"""Writes the seed corpus of fuzz_conn.c (tests/fuzz/corpus/conn/): a few
scripts in its input language, one per area, for libFuzzer to start from and
for the replay test in every build. Run from anywhere; rewrites the seeds."""
import os

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus", "conn")


# Store modes, count styles and twists (fuzz_conn.c: ST_*, CT_*, TW_*).
NOW, LATER, ESTORE, ETIMEDOUT, PEROP = range(5)
REAL, NEAR_MAX, ZERO, NEG, SMALL, MIN = range(6)
LIE, QUOTA = 1, 2
# Rule names by index (fuzz_conn.c: rules[]): policy A's, then unknown.
API, BURST, HUGE, SHADOWED, DARK, FLAGGED, NOSUCH, BAD = range(8)


def store(mode=NOW, style=REAL, twist=0):
    return mode | (style << 3) | (twist << 6)


def cfg(inflight=6, output=5, frame=3, fail_open=0, maxconn=3, mode=NOW,
        style=REAL, twist=0, clock=0, batch=5, spread=0, deny=False,
        iwin=0, ilim=0):
    a = inflight | (output << 3) | (frame << 6)
    b = fail_open | (maxconn << 1)
    d = (7 if deny else 0) | (iwin << 3) | (ilim << 5)
    return bytes([a, b, clock, store(mode, style, twist), batch, spread, d])


def req(ci, key=0, id_=1, rule=None, cost=None, limit=None, window=None):
    """A well-formed request: key from the table; cost 1 or cost % 4; a rule
    by index, or an inline limit (100 per 60 s, or 1 + limit % 8 per
    1 + window % 4 s)."""
    a = 0x10 if cost is None else 0x00
    if rule is not None:
        a |= 0x20
        b = (rule << 3) | key
    else:
        b = (0x10 if limit is None else 0) | (0x40 if window is None else 0)
        b |= key
    out = [2 if rule is not None else 1, ci, a, b, id_ % 64]
    if cost is not None:
        out.append(cost)
    if rule is None and limit is not None:
        out.append(limit - 1)
    if rule is None and window is not None:
        out.append(window - 1)
    return bytes(out)


def raw(ci, data):
    return bytes([4, ci, len(data)]) + data


def burst(ci, n, key=0, id_=1, rule=None):
    return bytes([3, n - 1]) + req(ci, key, id_, rule)[1:]


WRITE_ALL = lambda ci: bytes([0x15, ci])
WRITE = lambda ci, n: bytes([5, ci, n - 1])
STEP = b"\x07"
READ = b"\x09"
SHUT = lambda ci: bytes([10, ci])
RELEASE = lambda m=0, idx=0: bytes([11, m, idx])
STORE = lambda m, adv=0: bytes([12, m, adv])
GOAWAY = bytes([13])
CLOSEALL = bytes([0x1D])
SHRINK = bytes([0x2D])
RELOAD = bytes([0x3D])
ABORT = lambda ci: bytes([14, ci])
CONNECT = b"\x00"
# fields: global mode:api mode:burst scale:api scale:huge mode:dark
#         scale:burst version
# values: enforce shadow off 0.5 1000 1e-9 2 x
SWITCH = lambda *pairs: bytes([0x4D, len(pairs) - 1]) + bytes(
    f | (v << 3) for f, v in pairs)
SEND = lambda ci: WRITE_ALL(ci) + STEP + STEP + READ

seeds = {
    "basic": cfg() + b"".join(req(0, k % 6, k + 1) for k in range(10))
    + WRITE_ALL(0) + STEP + STEP + READ,
    "pieces": cfg() + req(0, 0, 1) + req(0, 0, 2) + req(0, 1, 3)
    + WRITE(0, 1) + STEP + WRITE(0, 3) + STEP + WRITE(0, 7) + STEP
    + WRITE_ALL(0) + STEP + READ + SHUT(0) + STEP + READ,
    "deferred": cfg(mode=LATER, batch=2)
    + b"".join(req(0, 0, k) for k in range(1, 8))
    + WRITE_ALL(0) + STEP + STEP + RELEASE() + STEP + READ
    + RELEASE(store(ESTORE)) + STEP + RELEASE(store(ETIMEDOUT)) + STEP + READ,
    "backpressure": cfg(inflight=0, output=0, mode=LATER, batch=0)
    + SHRINK + bytes([15, 0])
    + b"".join(req(0, k % 3, k) for k in range(1, 60))
    + WRITE_ALL(0) + STEP + RELEASE() + STEP + STEP + RELEASE() + STEP
    + WRITE_ALL(0) + STEP + READ,
    "goaway": cfg(maxconn=1) + CONNECT + req(0, 0, 1) + req(1, 0, 2)
    + WRITE_ALL(0) + WRITE_ALL(1) + STEP + READ + GOAWAY + STEP + READ
    + CONNECT + req(0, 2, 3) + WRITE_ALL(0) + STEP + READ + CLOSEALL + STEP,
    "broken": cfg(frame=0) + req(0, 6, 1) + req(0, 0, 2, rule=API)
    + req(0, 0, 3, rule=NOSUCH) + req(0, 0, 4, rule=BAD)
    + raw(0, b"\x00\x00\x00\x00\x02\xff\xff")
    + req(0, 0, 0) + WRITE_ALL(0) + STEP + READ
    + raw(0, b"\x00\x00\x00\x01\x00") + req(0, 0, 5) + WRITE_ALL(0) + STEP
    + READ,
    "store_errors": cfg(fail_open=1, style=NEAR_MAX)
    + b"".join(req(0, k % 2, k) for k in range(1, 5)) + WRITE_ALL(0) + STEP
    + STORE(store(ESTORE)) + req(0, 0, 9) + WRITE_ALL(0) + STEP
    + STORE(store(ETIMEDOUT)) + req(0, 0, 10, rule=BURST) + WRITE_ALL(0) + STEP
    + STORE(store(PEROP, NEG))
    + b"".join(req(0, k % 4, k + 10, rule=API if k % 2 else None)
               for k in range(1, 8))
    + WRITE_ALL(0) + STEP + STORE(store(NOW, ZERO), 40) + req(0, 0, 30)
    + WRITE_ALL(0) + STEP + READ + ABORT(0),
    "overflow": cfg(output=0) + SHRINK + burst(0, 250) + burst(0, 250, 1, 9)
    + WRITE_ALL(0) + STEP * 6 + burst(0, 200, 2) + WRITE_ALL(0) + STEP * 4
    + READ,
    "write_path": cfg(output=4) + SHRINK + burst(0, 250) + burst(0, 250, 1)
    + WRITE_ALL(0) + STEP * 3 + READ + STEP * 3 + READ + STEP + READ,
    "late_answer": cfg(mode=LATER) + CONNECT + req(0, 0, 1) + burst(1, 20, 2)
    + WRITE_ALL(0) + WRITE_ALL(1) + STEP + STEP + GOAWAY + STEP + CLOSEALL
    + STEP + RELEASE(store(NOW, NEAR_MAX)) + STEP + STEP,
    # Every rule of policy A and unknown ones, inline limits among them,
    # from two clients, equal and unequal costs, the override's caller
    # (key 0 under api): coalesced per (rule, caller), one op per window
    # length for inline limits.
    "rules": cfg(batch=4) + CONNECT
    + b"".join(req(k % 2, k % 3, k + 1, rule=k % 8) for k in range(16))
    + b"".join(req(0, 0, 20 + k, rule=API, cost=k) for k in range(6))
    + b"".join(req(1, 1, 30 + k, limit=2, window=1 + k % 2)
               for k in range(5))
    + b"".join(req(1, 1, 40 + k, limit=3 + k % 2) for k in range(3))
    + burst(0, 12, 2, 50, rule=BURST) + burst(1, 6, 4, 10, rule=SHADOWED)
    + burst(0, 4, 3, 60, rule=DARK)
    + WRITE_ALL(0) + WRITE_ALL(1) + STEP + STEP + READ + STEP + READ,
    # Counts before the batch at INT64_MAX (and just under): every window
    # is full, even the largest rule's; then the store's own counters.
    "store_count_max": cfg(style=NEAR_MAX)
    + req(0, 0, 1, rule=HUGE) + req(0, 0, 2, rule=API) + req(0, 0, 3)
    + burst(0, 3, 1, 4, rule=BURST) + req(0, 2, 8, rule=SHADOWED)
    + SEND(0) + STORE(store(NOW, REAL)) + req(0, 0, 9, rule=HUGE)
    + req(0, 3, 10, cost=3) + SEND(0),
    # Counts at -INT64_MAX, the lowest a Redis reply parses to: they count
    # as 0, with equal and unequal costs, one window and several.
    "store_count_min": cfg(style=MIN) + req(0, 0, 1) + burst(0, 3, 1, 2)
    + req(0, 0, 6, rule=HUGE, cost=3) + req(0, 0, 7, rule=HUGE, cost=2)
    + burst(0, 5, 1, 8, rule=BURST) + req(0, 1, 20, limit=8, window=4)
    + SEND(0),
    # A store whose admitted disagrees with its counts, at once and late:
    # the batcher answers from its replay, every request exactly once.
    "store_lies": cfg(twist=LIE, batch=3)
    + burst(0, 5, 0, 1, rule=API) + req(0, 1, 9, rule=BURST, cost=2)
    + req(0, 1, 10, rule=BURST, cost=1) + req(0, 3, 11) + SEND(0)
    + STORE(store(LATER)) + burst(0, 4, 2, 20, rule=SHADOWED)
    + req(0, 2, 30, limit=1, window=1) + WRITE_ALL(0) + STEP
    + RELEASE(store(NOW, SMALL, LIE)) + STEP + RELEASE(store(NOW, NEG, LIE))
    + STEP + READ,
    # Stored quotas (quota_win) replacing some callers' rule windows.
    "quota": cfg(twist=QUOTA, batch=6)
    + b"".join(req(0, k % 8, k + 1, rule=(API, BURST, HUGE, SHADOWED)[k % 4],
                   cost=k % 4 if k % 3 else None) for k in range(24))
    + burst(0, 9, 0, 40, rule=API) + SEND(0)
    + STORE(store(NOW, NEAR_MAX, QUOTA)) + burst(0, 6, 1, 50, rule=BURST)
    + SEND(0),
    # A reload and switches while batches are in flight: those batches
    # keep the policy they were made under; burst and flagged disappear
    # with policy B, come back with A.
    "reload_inflight": cfg(mode=LATER, batch=2) + CONNECT
    + b"".join(req(k % 2, k % 4, k + 1, rule=(BURST, API, FLAGGED)[k % 3])
               for k in range(9))
    + WRITE_ALL(0) + WRITE_ALL(1) + STEP + RELOAD
    + req(0, 0, 20, rule=BURST) + req(0, 0, 21, rule=HUGE)
    + req(1, 1, 22, rule=DARK) + WRITE_ALL(0) + WRITE_ALL(1) + STEP
    + RELEASE(store(NOW), 1) + STEP + SWITCH((0, 1), (3, 3))
    + burst(1, 5, 0, 30, rule=API) + WRITE_ALL(1) + STEP + RELOAD
    + RELEASE(store(NOW, SMALL)) + SWITCH((1, 2), (4, 4), (7, 6))
    + burst(0, 4, 0, 40, rule=API) + req(0, 2, 50, rule=DARK)
    + WRITE_ALL(0) + STEP + RELEASE() + RELEASE() + STEP + READ
    + SWITCH((0, 2), (5, 0)) + req(0, 3, 60, rule=DARK) + req(0, 3, 61)
    + SEND(0),
    # --inline-limits deny, then caps on inline windows and limits.
    "inline_deny": cfg(deny=True) + req(0, 0, 1) + req(0, 0, 2, rule=API)
    + req(0, 1, 3, limit=4, window=2) + SEND(0),
    # Found by fuzzing (harness fixes): a client gone in the middle of a
    # frame with a send buffer shrunk; a client cut over --max-output
    # while it reads.
    "client_gone_mid_frame": bytes([0xEE, 0x07, 0, store(ETIMEDOUT, NEAR_MAX),
                                    5, 0, 0])
    + bytes.fromhex("2d03f90000100000001500070" "90e"),
    "overflow_reading_client": bytes([0xC6, 0x04, 0, store(LATER), 0, 0, 0])
    + b"\x03\xff",
    # Clients that connect and leave without a byte: conn.c looks at an
    # input buffer never allocated (clang UBSan: NULL + 0 in rl_buf_rptr).
    "eof_no_bytes": cfg() + CONNECT + SHUT(0) + SHUT(1) + STEP + READ
    + ABORT(0),
    "inline_caps": cfg(iwin=2, ilim=2) + req(0, 0, 1)
    + bytes([1, 0, 0x10, 0x28, 2]) + (10 ** 6).to_bytes(8, "big")
    + bytes([1, 0, 0x10, 0x30, 3]) + (3601).to_bytes(4, "big")
    + req(0, 1, 4, limit=8, window=4) + req(0, 1, 5, rule=HUGE) + SEND(0),
}

os.makedirs(OUT, exist_ok=True)
for name, data in seeds.items():
    with open(os.path.join(OUT, name), "wb") as f:
        f.write(data)
