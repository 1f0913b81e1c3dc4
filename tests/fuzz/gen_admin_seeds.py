#!/usr/bin/env python3
"""Writes tests/fuzz/corpus/admin: what a client sends the --metrics
listener on one connection, behind fuzz_admin.c's first byte (bit 0:
unhealthy; bits 1-2: page small, +200 B, +70 kB, fails; bits 3-4: written
at once, or in pieces of 1, 7, 100 bytes)."""
import os

here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus",
                    "admin")

G = b"GET %s HTTP/1.1\r\nHost: x\r\n\r\n"
seeds = {
    "metrics": (0, G % b"/metrics"),
    "metrics-big": (4, G % b"/metrics"),
    "metrics-fails": (6, G % b"/metrics" + G % b"/healthz"),
    "healthz": (0, G % b"/healthz"),
    "healthz-down": (1, b"GET /healthz HTTP/1.0\r\n\r\n"),
    "head": (2, b"HEAD /metrics HTTP/1.1\r\n\r\nHEAD /healthz HTTP/1.1\r\n\r\n"
                b"HEAD /nope HTTP/1.1\r\n\r\n"),
    "post": (0, b"POST /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n"
                b"HEAD /healthz HTTP/1.1\r\n\r\nDELETE /healthz HTTP/1.1\r\n\r\n"),
    "head-405": (0, b"PUT /healthz HTTP/1.1\r\n\r\n"),
    "query": (0, G % b"/metrics?name[]=rl_up" + G % b"/healthz?x"),
    "not-found": (0, G % b"/" + G % b"/metrics/" + G % b"/healthz2" +
                  G % b"*" + G % b"http://h/metrics"),
    "pipelined": (2, (G % b"/metrics") * 3 + G % b"/healthz"),
    "pipelined-pieces": (8 | 2, (G % b"/metrics") * 2 + G % b"/healthz"),
    "pieces-7": (16, G % b"/healthz" + G % b"/metrics"),
    "pieces-100": (24 | 4, G % b"/metrics" + G % b"/metrics"),
    "close": (0, b"GET /healthz HTTP/1.1\r\nConnection: close\r\n\r\n" +
              G % b"/metrics"),
    "http10-keepalive": (0, b"GET /healthz HTTP/1.0\r\nConnection: keep-alive"
                            b"\r\n\r\n" + G % b"/metrics"),
    "bad": (0, G % b"/healthz" + b"GET /x HTTP/1.1\r\nno colon\r\n\r\n"),
    "bad-version": (0, b"GET /metrics HTTP/2.0\r\n\r\n"),
    "long-line": (0, b"GET /" + b"a" * 8300 + b" HTTP/1.1\r\n\r\n"),
    "long-head": (0, b"GET / HTTP/1.1\r\n" + b"X-A: " + b"b" * 8300 +
                  b"\r\n\r\n"),
    "many-headers": (0, b"GET / HTTP/1.1\r\n" + b"".join(
        b"X-%d: y\r\n" % i for i in range(70)) + b"\r\n"),
    "body": (0, b"POST /metrics HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello"),
    "chunked": (0, b"POST /healthz HTTP/1.1\r\nTransfer-Encoding: chunked"
                   b"\r\n\r\n0\r\n\r\n"),
    "tls-hello": (0, b"\x16\x03\x01\x00\x05\x01\x00\x00\x01\x00"),
    "tls-hello-bytes": (8, b"\x16\x03\x01\x00\x05\x01\x00\x00\x01\x00"),
    "empty-lines": (0, b"\r\n\r\n" + G % b"/healthz"),
    "partial": (0, G % b"/healthz" + b"GET /metr"),
    "garbage": (0, b"\x00\x01\x02\xff"),
    "lf-only": (0, b"GET /metrics HTTP/1.1\nHost: x\n\n"),
}

os.makedirs(here, exist_ok=True)
for name, (first, body) in seeds.items():
    with open(os.path.join(here, name), "wb") as f:
        f.write(bytes([first]) + body)
