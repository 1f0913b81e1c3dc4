#!/usr/bin/env python3
"""Writes tests/fuzz/corpus/switches: HGETALL replies of the switches hash
as rl-ctl leaves it (and a few that it never would), RESP-encoded, behind
fuzz_switches.c's first byte (bit 2: a version in force before; 3 in the
low bits: the reply is lost)."""
import os

here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus",
                    "switches")


def bulk(s):
    b = s.encode() if isinstance(s, str) else s
    return b"$%d\r\n%s\r\n" % (len(b), b)


def hash_reply(pairs):
    out = b"*%d\r\n" % (2 * len(pairs))
    for k, v in pairs:
        out += bulk(k) + bulk(v)
    return out


seeds = {
    "empty": (0, b"*0\r\n"),
    "version-only": (0, hash_reply([("version", "1")])),
    "global-off": (0, hash_reply([("version", "2"), ("global", "off")])),
    "rule-switches": (0, hash_reply([
        ("version", "3"), ("mode:api", "shadow"), ("scale:api", "0.5"),
        ("mode:dark", "enforce"), ("scale:gcra", "1000"),
        ("quotas:swc", "1"), ("scale:swc", "3")])),
    "same-version": (4, hash_reply([("version", "7"), ("global", "shadow")])),
    "older-version": (4, hash_reply([("version", "6"), ("mode:quiet", "off")])),
    "bad-values": (0, hash_reply([
        ("version", "4"), ("global", "loud"), ("scale:api", "0"),
        ("scale:gcra", "1e-9"), ("scale:swc", "nan"), ("quotas:api", "2"),
        ("mode:", "off"), ("other", "x"), ("scale:" + "r" * 129, "2")])),
    "version-long": (0, hash_reply([
        ("version", "0" * 40 + "5"), ("mode:api", "off")])),
    "version-text": (4, hash_reply([("version", " 7x"), ("global", "off")])),
    "nul-in-rule": (0, hash_reply([
        ("version", "9"), (b"mode:a\x00b", b"off"), (b"mode:a\x00c", b"shadow")])),
    "not-strings": (0, b"*4\r\n$7\r\nversion\r\n:5\r\n$6\r\nglobal\r\n$-1\r\n"),
    "nested": (0, b"*2\r\n*1\r\n$1\r\nx\r\n$7\r\nversion\r\n"),
    "odd": (0, b"*3\r\n$7\r\nversion\r\n$1\r\n1\r\n$6\r\nglobal\r\n"),
    "error": (0, b"-NOPERM this user has no permissions\r\n"),
    "wrongtype": (0, b"-WRONGTYPE Operation against a key holding the wrong kind of value\r\n"),
    "nil": (0, b"$-1\r\n"),
    "integer": (0, b":1\r\n"),
    "lost": (3, b""),
    "duplicate-rule": (0, hash_reply([
        ("version", "11"), ("mode:api", "off"), ("scale:api", "2"),
        ("quotas:api", "1"), ("mode:api", "shadow")])),
    "unknown-rule": (0, hash_reply([
        ("version", "12"), ("mode:nosuch", "off"), ("scale:nosuch", "9")])),
}

os.makedirs(here, exist_ok=True)
for name, (first, body) in seeds.items():
    with open(os.path.join(here, name), "wb") as f:
        f.write(bytes([first]) + body)
