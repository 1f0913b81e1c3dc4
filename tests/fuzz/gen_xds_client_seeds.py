#!/usr/bin/env python3
"""Writes tests/fuzz/corpus/xds_client: what a control plane sends on the
xDS client's stream, behind fuzz_xds_client.c's first byte (bit 0: the
target sends an empty SETTINGS first; bit 1: the rest is stream 1's DATA
after the target's response HEADERS; bit 2: with bit 1, the rest is one
DiscoveryResponse the target frames; bits 3-4: at once, or pieces of 1,
9, 100 bytes). The DiscoveryResponses are corpus/xds_conf's (written by
gen_xds_seeds.py); the frames are written here by hand, with HPACK's
static table only."""
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "corpus", "xds_client")
CONF = os.path.join(HERE, "corpus", "xds_conf")


def frame(t, flags, sid, payload=b""):
    return struct.pack(">I", len(payload))[1:] + bytes([t, flags]) + \
        struct.pack(">I", sid & 0x7fffffff) + payload


def grpc(msg, flag=0):
    return bytes([flag]) + struct.pack(">I", len(msg)) + msg


SETTINGS, HEADERS, DATA, RST, PING, GOAWAY, WINDOW, CONT = 4, 1, 0, 3, 6, 7, 8, 9
CT = b"\x0f\x10\x10application/grpc"   # content-type, literal, static name
H200 = b"\x88" + CT                      # :status 200
TRAILERS_OK = b"\x00\x0bgrpc-status\x010"          # literal, new name
TRAILERS_BAD = b"\x00\x0bgrpc-status\x0214" + b"\x00\x0cgrpc-message\x04down"

with open(os.path.join(CONF, "basic"), "rb") as f:
    basic = f.read()
confs = {}
for name in sorted(os.listdir(CONF)):
    if not name.startswith("."):
        with open(os.path.join(CONF, name), "rb") as f:
            confs[name] = f.read()

seeds = {}
# Framed by the target: one DiscoveryResponse each (bits 0, 1, 2).
for name, body in confs.items():
    if len(body) <= 4000:
        seeds["msg-" + name] = bytes([7]) + body
# Stream DATA framed here: messages split, several, compressed, too long.
m = grpc(basic)
seeds["data-two-messages"] = bytes([3]) + m + grpc(confs.get("empty_world", b""))
seeds["data-split-prefix"] = bytes([3 | 8]) + m
seeds["data-compressed"] = bytes([3]) + grpc(basic, 1)
seeds["data-too-long"] = bytes([3]) + b"\x00\x7f\xff\xff\xff" + basic[:20]
seeds["data-4mib"] = bytes([3]) + b"\x00\x00\x40\x00\x01"
seeds["data-not-proto"] = bytes([3]) + grpc(b"\xff\xff\xff\xff\x0f")
seeds["data-empty-msg"] = bytes([3]) + grpc(b"")
seeds["data-pieces-9"] = bytes([3 | 16]) + m
seeds["data-pieces-100"] = bytes([3 | 24]) + m + m
# Raw frames after the target's SETTINGS (bit 0 only).
raw = {
    "raw-response": frame(HEADERS, 4, 1, H200) + frame(DATA, 0, 1, m),
    "raw-trailers": frame(HEADERS, 4, 1, H200) + frame(DATA, 0, 1, m) +
    frame(HEADERS, 5, 1, TRAILERS_OK),
    "raw-trailers-only": frame(HEADERS, 5, 1, b"\x88" + CT + TRAILERS_BAD),
    "raw-status-503": frame(HEADERS, 4, 1, b"\x48\x03503" + CT),
    "raw-100-continue": frame(HEADERS, 4, 1, b"\x48\x03100") +
    frame(HEADERS, 4, 1, H200) + frame(DATA, 0, 1, m),
    "raw-continuation": frame(HEADERS, 0, 1, H200[:3]) +
    frame(CONT, 4, 1, H200[3:]) + frame(DATA, 0, 1, m),
    "raw-many-blocks": b"".join(frame(HEADERS, 4, 1, b"\x48\x03100")
                                for _ in range(6)),
    "raw-big-header": frame(HEADERS, 4, 1, H200 + b"\x00\x03x-a\x7f\x81\x7f" +
                            b"a" * 16384),
    "raw-rst": frame(HEADERS, 4, 1, H200) + frame(RST, 0, 1, b"\x00\x00\x00\x08"),
    "raw-goaway": frame(GOAWAY, 0, 0, b"\x00\x00\x00\x01\x00\x00\x00\x00"),
    "raw-ping": frame(PING, 0, 0, b"\x00" * 8) + frame(PING, 1, 0, b"\x00" * 8),
    "raw-window": frame(WINDOW, 0, 0, b"\x00\x00\x10\x00") +
    frame(WINDOW, 0, 1, b"\x7f\xff\xff\xff"),
    "raw-settings": frame(SETTINGS, 0, 0, b"\x00\x04\x00\x00\x00\x00"
                          b"\x00\x05\x00\x00\x40\x00\x00\x03\x00\x00\x00\x01") +
    frame(SETTINGS, 1, 0),
    "raw-other-stream": frame(HEADERS, 4, 3, H200) + frame(DATA, 0, 3, m),
    "raw-push": frame(5, 4, 1, b"\x00\x00\x00\x02" + H200),
    "raw-data-padded": frame(HEADERS, 4, 1, H200) +
    frame(DATA, 8, 1, b"\x04" + m + b"\x00" * 4),
    "raw-end-stream": frame(HEADERS, 4, 1, H200) + frame(DATA, 1, 1, m),
}
for name, body in raw.items():
    seeds[name] = bytes([1]) + body
seeds["raw-no-settings"] = bytes([0]) + raw["raw-response"]
seeds["raw-garbage"] = bytes([0]) + b"HTTP/1.1 200 OK\r\n\r\n"

os.makedirs(OUT, exist_ok=True)
for name, body in seeds.items():
    with open(os.path.join(OUT, name), "wb") as f:
        f.write(body[:4096])
