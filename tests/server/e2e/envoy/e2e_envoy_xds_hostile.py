#!/usr/bin/python3
"""A hostile control plane against rl-server's xDS client (--envoy-xds).

Usage: e2e_envoy_xds_hostile.py RL_SERVER PROTO_DIR

The control plane here is HTTP/2 written by hand on a loopback socket, so
that it can send what no conforming server would. rl-server connects to
it and is answered, one connection after another (each the client's
reconnection after its backoff):

1. an HPACK bomb: endless informational (`:status 100`) header blocks,
   each a 4,000-byte header put in the dynamic table and then referred to
   by one byte 7 x 16,000 + times over CONTINUATIONs (a few MB decoded for
   every 128 KB sent). rl-server must advertise a header list size in its
   SETTINGS and drop the connection at the first block, counted by
   rl_xds_header_drops_total;
2. endless small `:status 100` blocks, each one field: a stream may carry
   only a few blocks, so rl-server drops this connection too, counted;
3. a well-behaved response: rl-server comes back once more (the backoff
   still works after the drops), takes the configuration and ACKs it;
4. a resource of another type: NACKed, naming the version in force;
5. a message that is not a DiscoveryResponse: the connection goes, and
   the next one names the version in force.

Before the fix rl-server decoded every block and kept the connection, so
steps 1 and 2 each failed (timed out with the connection up)."""

import os
import select
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "..", "..", "support"))
import rlt  # noqa: E402

RL_SERVER, PROTO_DIR = sys.argv[1], sys.argv[2]
TMP = tempfile.mkdtemp(prefix="rl-xds-hostile-")
rlt.envoy_stubs(PROTO_DIR, TMP)
OUT = os.path.join(TMP, "stubs")
subprocess.check_call([sys.executable, "-m", "grpc_tools.protoc", "-I",
                       PROTO_DIR, "--python_out=" + OUT,
                       "envoy/service/discovery/v3/discovery.proto",
                       "envoy/config/core/v3/node.proto",
                       "google/rpc/status.proto",
                       "ratelimit/config/ratelimit/v3/rls_conf.proto"])
from envoy.service.discovery.v3 import discovery_pb2  # noqa: E402
from ratelimit.config.ratelimit.v3 import rls_conf_pb2 as rc  # noqa: E402

TYPE = "type.googleapis.com/ratelimit.config.ratelimit.v3.RateLimitConfig"
PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
DATA, HEADERS, SETTINGS, CONTINUATION = 0, 1, 4, 9
END_STREAM, ACK, END_HEADERS = 1, 1, 4
SETTINGS_MAX_HEADER_LIST_SIZE = 6
FAILS = []
PROCS = []


def check(cond, what):
    if not cond:
        FAILS.append(what)
        print("FAIL:", what, flush=True)


def await_(cond, what, timeout=10):
    end = time.time() + timeout
    while time.time() < end:
        v = cond()
        if v:
            return v
        time.sleep(0.02)
    raise RuntimeError("timed out waiting for " + what)


def frame(ftype, flags, sid, payload):
    return struct.pack(">I", len(payload))[1:] + bytes([ftype, flags]) + \
        struct.pack(">I", sid) + payload


def hpack_int(first, prefix_bits, v):
    """An HPACK integer with its first byte's high bits `first`."""
    top = (1 << prefix_bits) - 1
    if v < top:
        return bytes([first | v])
    out = [first | top]
    v -= top
    while v >= 128:
        out.append(v % 128 + 128)
        v //= 128
    out.append(v)
    return bytes(out)


def hpack_str(s):
    return hpack_int(0, 7, len(s)) + s


# :status 100, a literal not indexed with the static table's name 8.
STATUS_100 = b"\x08" + hpack_str(b"100")
# :status 200 (static 8) and content-type (static name 31) as gRPC sends.
RESPONSE_HEADERS = b"\x88" + b"\x0f\x10" + hpack_str(b"application/grpc")


class Conn:
    """One connection from rl-server, the server side of HTTP/2 by hand."""

    def __init__(self, sock):
        self.s = sock
        self.buf = b""
        self.settings = {}
        self.data = b""  # the request stream's DATA, as received
        self.closed = False

    def _fill(self, timeout):
        r, _, _ = select.select([self.s], [], [], timeout)
        if not r:
            return False
        try:
            b = self.s.recv(65536)
        except (ConnectionResetError, OSError):
            b = b""
        if not b:
            self.closed = True
            return False
        self.buf += b
        return True

    def frames(self):
        while len(self.buf) >= 9:
            n = int.from_bytes(self.buf[:3], "big")
            if len(self.buf) < 9 + n:
                return
            t, fl = self.buf[3], self.buf[4]
            sid = int.from_bytes(self.buf[5:9], "big") & 0x7fffffff
            p = self.buf[9:9 + n]
            self.buf = self.buf[9 + n:]
            if t == SETTINGS and not fl & ACK:
                for i in range(0, len(p) - 5, 6):
                    k, v = struct.unpack(">HI", p[i:i + 6])
                    self.settings[k] = v
                self.send(frame(SETTINGS, ACK, 0, b""))
            elif t == DATA and sid == 1:
                self.data += p
            yield t, fl, sid, p

    def handshake(self):
        """The client's preface and its request's HEADERS; ours SETTINGS."""
        end = time.time() + 10
        while len(self.buf) < len(PREFACE) and time.time() < end:
            self._fill(0.1)
        check(self.buf.startswith(PREFACE), "the client preface")
        self.buf = self.buf[len(PREFACE):]
        self.send(frame(SETTINGS, 0, 0, b""))
        while time.time() < end:
            for t, _, sid, _ in self.frames():
                if t == HEADERS and sid == 1:
                    return
            if self.closed:
                break
            self._fill(0.1)
        raise RuntimeError("no request from rl-server")

    def send(self, b):
        try:
            self.s.sendall(b)
            return True
        except OSError:
            self.closed = True
            return False

    def flood(self, block, seconds):
        """Sends block over and over for up to seconds, reading what comes
        meanwhile; returns (seconds until rl-server closed, bytes sent)
        or (None, bytes) if it kept the connection."""
        t0 = time.time()
        sent, left = 0, b""
        while time.time() - t0 < seconds:
            _, w, _ = select.select([], [self.s], [], 0.05)
            if w:
                if not left:
                    left = block
                try:
                    k = self.s.send(left)
                    sent += k
                    left = left[k:]
                except (BlockingIOError, InterruptedError):
                    pass
                except OSError:
                    self.closed = True
            while not self.closed and self._fill(0):
                for _ in self.frames():
                    pass
            if self.closed:
                return time.time() - t0, sent
        return None, sent

    def messages(self):
        """The gRPC messages of the request stream so far."""
        out, p = [], self.data
        while len(p) >= 5 and len(p) >= 5 + int.from_bytes(p[1:5], "big"):
            n = int.from_bytes(p[1:5], "big")
            out.append(p[5:5 + n])
            p = p[5 + n:]
        return out


def bomb_block():
    """One informational header block as the attack sends it: :status 100
    and a 4,000-byte header inserted in the dynamic table (index 62), then
    one-byte references to it: the rest of the HEADERS frame and 7
    CONTINUATIONs of 16,000, 16 MB decoded for 128 KB sent."""
    insert = b"\x40" + hpack_str(b"x-bomb") + hpack_str(b"b" * 4000)
    ref = bytes([0x80 | 62])
    first = STATUS_100 + insert
    first += ref * (16384 - len(first))
    b = frame(HEADERS, 0, 1, first)
    for i in range(7):
        b += frame(CONTINUATION, END_HEADERS if i == 6 else 0, 1,
                   ref * 16000)
    return b


def metrics(port):
    body = urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port,
                                  timeout=5).read().decode()
    out = {}
    for line in body.splitlines():
        if line.startswith("rl_xds_"):
            k, v = line.rsplit(" ", 1)
            out[k] = float(v)
    return out


def accept(lsock, what):
    r, _, _ = select.select([lsock], [], [], 10)
    if not r:
        raise RuntimeError("rl-server did not connect: " + what)
    s, _ = lsock.accept()
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    s.setblocking(False)
    c = Conn(s)
    c.handshake()
    return c


def main():
    lsock = socket.socket()
    lsock.bind(("127.0.0.1", 0))
    lsock.listen(4)
    cp_port = lsock.getsockname()[1]

    ports = os.path.join(TMP, "ports")
    log = open(os.path.join(TMP, "server.log"), "w")
    p = subprocess.Popen([RL_SERVER, "--listen", "127.0.0.1:0",
                          "--grpc", "127.0.0.1:0", "--metrics", "127.0.0.1:0",
                          "--port-file", ports,
                          "--envoy-xds", "127.0.0.1:%d" % cp_port,
                          "--envoy-xds-backoff-ms", "50",
                          "--envoy-xds-backoff-max-ms", "300"], stderr=log)
    PROCS.append(p)
    got = rlt.wait_ports(p, ports, log.name)
    mport = got["metrics"]

    # 1. The HPACK bomb: the connection goes at the first block.
    c = accept(lsock, "the first connection")
    check(c.settings.get(SETTINGS_MAX_HEADER_LIST_SIZE) == 16384,
          "SETTINGS_MAX_HEADER_LIST_SIZE advertised: %s" % c.settings)
    took, sent = c.flood(bomb_block(), 5)
    print("bomb: dropped after %s s, %d bytes sent" % (took, sent),
          flush=True)
    check(took is not None, "rl-server drops the bomb's connection "
          "(kept it 5 s, %d bytes taken)" % sent)
    await_(lambda: metrics(mport).get("rl_xds_header_drops_total") == 1,
           "rl_xds_header_drops_total 1")
    c.s.close()

    # 2. Endless small 1xx blocks: a stream may carry only a few.
    c = accept(lsock, "the reconnection after the bomb")
    took, sent = c.flood(frame(HEADERS, END_HEADERS, 1, STATUS_100) * 64, 5)
    print("1xx flood: dropped after %s s, %d bytes sent" % (took, sent),
          flush=True)
    check(took is not None, "rl-server drops a stream of endless 1xx "
          "blocks (kept it 5 s, %d bytes taken)" % sent)
    await_(lambda: metrics(mport).get("rl_xds_header_drops_total") == 2,
           "rl_xds_header_drops_total 2")
    c.s.close()

    # 3. A well-behaved answer, one informational block first: taken and
    # ACKed on the next connection.
    c = accept(lsock, "the reconnection after the 1xx flood")
    d = rc.RateLimitDescriptor(key="k", value="v")
    d.rate_limit.unit = rc.HOUR
    d.rate_limit.requests_per_unit = 1
    r = discovery_pb2.DiscoveryResponse(version_info="h1", nonce="nonce-h1",
                                        type_url=TYPE)
    a = r.resources.add()
    a.type_url = TYPE
    a.value = rc.RateLimitConfig(name="limits", domain="hostile",
                                 descriptors=[d]).SerializeToString()
    m = r.SerializeToString()
    c.send(frame(HEADERS, END_HEADERS, 1, STATUS_100) +
           frame(HEADERS, END_HEADERS, 1, RESPONSE_HEADERS) + grpc_data(m))
    q = await_(lambda: answer_to(c, "nonce-h1"), "the ACK of h1")
    check(q.version_info == "h1" and not q.HasField("error_detail"),
          "h1 ACKed: %s" % q)

    # 4. A resource of another type: NACKed naming h1, the one in force.
    r = discovery_pb2.DiscoveryResponse(version_info="h2", nonce="nonce-h2",
                                        type_url=TYPE)
    a = r.resources.add()
    a.type_url = "type.googleapis.com/envoy.config.cluster.v3.Cluster"
    a.value = b""
    c.send(grpc_data(r.SerializeToString()))
    q = await_(lambda: answer_to(c, "nonce-h2"), "the NACK of h2")
    check(q.version_info == "h1" and q.HasField("error_detail"),
          "h2 NACKed naming h1: %s" % q)

    # 5. A message that is not a DiscoveryResponse: the connection goes
    # and the next one names h1.
    c.send(grpc_data(b"\xff\xff\xff"))
    await_(lambda: drain(c) or c.closed,
           "rl-server to drop the connection after a bad message")
    c.s.close()
    c = accept(lsock, "the reconnection after the bad message")
    q = await_(lambda: drain(c) or
               [discovery_pb2.DiscoveryRequest.FromString(b)
                for b in c.messages()], "the first request")[0]
    check(q.version_info == "h1" and q.response_nonce == "",
          "reconnected naming h1: %s" % q)
    mt = metrics(mport)
    check(mt.get('rl_xds_updates_total{result="accepted"}') == 1 and
          mt.get('rl_xds_updates_total{result="rejected"}') == 1 and
          mt.get('rl_xds_connections_total{event="connected"}') == 4 and
          mt.get("rl_xds_header_drops_total") == 2 and
          mt.get("rl_xds_connected") == 1, "metrics at the end: %s" % mt)
    p.send_signal(signal.SIGTERM)
    check(p.wait(timeout=10) == 0, "rl-server exits 0 on SIGTERM")
    c.s.close()
    lsock.close()


def grpc_data(m):
    """A DATA frame on the stream with one gRPC message."""
    return frame(DATA, 0, 1, b"\x00" + struct.pack(">I", len(m)) + m)


def drain(c):
    """Reads what has come (frames parsed, SETTINGS ACKed); None."""
    while c._fill(0.05):
        for _ in c.frames():
            pass


def answer_to(c, nonce):
    """The request that answered the response with this nonce, if come."""
    drain(c)
    for b in c.messages():
        q = discovery_pb2.DiscoveryRequest.FromString(b)
        if q.response_nonce == nonce:
            return q
    return None


try:
    main()
except Exception as e:  # noqa: BLE001
    FAILS.append(repr(e))
    print("FAIL:", repr(e), flush=True)
if FAILS:
    print(rlt.tail(os.path.join(TMP, "server.log"), 30))
rlt.end_run(FAILS, PROCS, TMP)
