#!/usr/bin/env python3
"""Writes the seed corpus of fuzz_conn.c (tests/fuzz/corpus/conn/): a few
scripts in its input language, one per area, for libFuzzer to start from and
for the replay test in every build. Run from anywhere; rewrites the seeds."""
import os

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus", "conn")


def cfg(inflight=6, output=5, frame=3, fail_open=0, maxconn=3, mode=0,
        style=0, clock=0, batch=5, spread=0):
    a = inflight | (output << 3) | (frame << 6)
    b = fail_open | (maxconn << 1) | (mode << 3) | (style << 6)
    return bytes([a, b, clock, batch, spread])


def req(ci, key=0, id_=1, rule=None, cost1=True):
    # a: key from table, cost 1, inline limit 100 / window 60, short id
    if rule is None:
        return bytes([1, ci, 0x10, 0x50 | key, id_ % 64])
    # a: rule bit; b bits 3..5 choose the rule name
    return bytes([2, ci, 0x30, (rule << 3) | key, id_ % 64])


def raw(ci, data):
    return bytes([4, ci, len(data)]) + data


def burst(ci, n, key=0, id_=1):
    return bytes([3, n - 1, ci, 0x10, 0x50 | key, id_ % 64])


WRITE_ALL = lambda ci: bytes([0x15, ci])
WRITE = lambda ci, n: bytes([5, ci, n - 1])
STEP = b"\x07"
READ = b"\x09"
SHUT = lambda ci: bytes([10, ci])
RELEASE = lambda mode=0, style=0, idx=0: bytes([11, mode | (style << 4), idx])
STORE = lambda mode, style=0, adv=0: bytes([12, mode | (style << 4), adv])
GOAWAY = bytes([13])
CLOSEALL = bytes([0x1D])
SHRINK = bytes([0x2D])
ABORT = lambda ci: bytes([14, ci])
CONNECT = b"\x00"

seeds = {
    "basic": cfg() + b"".join(req(0, k % 6, k + 1) for k in range(10))
    + WRITE_ALL(0) + STEP + STEP + READ,
    "pieces": cfg() + req(0, 0, 1) + req(0, 0, 2) + req(0, 1, 3)
    + WRITE(0, 1) + STEP + WRITE(0, 3) + STEP + WRITE(0, 7) + STEP
    + WRITE_ALL(0) + STEP + READ + SHUT(0) + STEP + READ,
    "deferred": cfg(mode=1, batch=2) + b"".join(req(0, 0, k) for k in range(1, 8))
    + WRITE_ALL(0) + STEP + STEP + RELEASE() + STEP + READ
    + RELEASE(2) + STEP + RELEASE(3) + STEP + READ,
    "backpressure": cfg(inflight=0, output=0, mode=1, batch=0)
    + SHRINK + bytes([15, 0])
    + b"".join(req(0, k % 3, k) for k in range(1, 60))
    + WRITE_ALL(0) + STEP + RELEASE() + STEP + STEP + RELEASE() + STEP
    + WRITE_ALL(0) + STEP + READ,
    "goaway": cfg(maxconn=1) + CONNECT + req(0, 0, 1) + req(1, 0, 2)
    + WRITE_ALL(0) + WRITE_ALL(1) + STEP + READ + GOAWAY + STEP + READ
    + CONNECT + req(0, 2, 3) + WRITE_ALL(0) + STEP + READ + CLOSEALL + STEP,
    "broken": cfg(frame=0) + req(0, 6, 1) + req(0, 0, 2, rule=0)
    + req(0, 0, 3, rule=3) + req(0, 0, 4, rule=4) + raw(0, b"\x00\x00\x00\x00\x02\xff\xff")
    + req(0, 0, 0) + WRITE_ALL(0) + STEP + READ
    + raw(0, b"\x00\x00\x00\x01\x00") + req(0, 0, 5) + WRITE_ALL(0) + STEP + READ,
    "store_errors": cfg(fail_open=1, style=1)
    + b"".join(req(0, k % 2, k) for k in range(1, 5)) + WRITE_ALL(0) + STEP
    + STORE(2) + req(0, 0, 9) + WRITE_ALL(0) + STEP
    + STORE(3) + req(0, 0, 10) + WRITE_ALL(0) + STEP
    + STORE(4, 3) + b"".join(req(0, k % 4, k + 10) for k in range(1, 8))
    + WRITE_ALL(0) + STEP + STORE(0, 2, 40) + req(0, 0, 30) + WRITE_ALL(0)
    + STEP + READ + ABORT(0),
    "overflow": cfg(output=0) + SHRINK + burst(0, 250) + burst(0, 250, 1, 9)
    + WRITE_ALL(0) + STEP * 6 + burst(0, 200, 2) + WRITE_ALL(0) + STEP * 4
    + READ,
    "write_path": cfg(output=4) + SHRINK + burst(0, 250) + burst(0, 250, 1)
    + WRITE_ALL(0) + STEP * 3 + READ + STEP * 3 + READ + STEP + READ,
    "late_answer": cfg(mode=1) + CONNECT + req(0, 0, 1) + burst(1, 20, 2)
    + WRITE_ALL(0) + WRITE_ALL(1) + STEP + STEP + GOAWAY + STEP + CLOSEALL
    + STEP + RELEASE(0, 1) + STEP + STEP,
    # A count far below the increment (a reply parses to -INT64_MAX).
    "store_count_min": cfg() + STORE(0, 5) + req(0, 0, 1) + burst(0, 3, 1, 2)
    + WRITE_ALL(0) + STEP + READ,
}

os.makedirs(OUT, exist_ok=True)
for name, data in seeds.items():
    with open(os.path.join(OUT, name), "wb") as f:
        f.write(data)
