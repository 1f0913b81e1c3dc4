#!/usr/bin/python3
"""What a TLS handshake costs rl-server, and what a ClientHello replay
flood does to a bystander (DESIGN.md, "TLS on the listeners", "Caps on
handshakes"):

  tests/bench/tls_handshakes.py RL_SERVER PROTO_DIR [N] [SECONDS] [RATE]

1. For an RSA-2048 and an ECDSA P-256 certificate (made by openssl at
   start), N (default 3000) sequential full handshakes from Python's ssl
   against the native listener over TLS, TLS 1.3 then 1.2, no tickets:
   rl-server's CPU time (utime + stime from /proc) per handshake.
2. For the RSA certificate, a bystander on the plaintext native port
   (batches of 10 checks, 200 batches a second) for SECONDS (default 5)
   alone, then beside two processes replaying one 517-byte ClientHello
   at the gRPC TLS port, RATE (default 400) a second each (0: flat out):
   the bystander's p50/p99/max, rl-server's CPU, and the handshakes done
   and refused. Once with the default caps, once with none
   (--tls-max-handshakes 0 --tls-handshake-rate 0), as the build before
   them behaved.

Loopback only; every server listens on port 0 and says its ports in
--port-file; what it starts it stops by pid."""

import os
import re
import signal
import socket
import ssl
import struct
import subprocess
import sys
import tempfile
import time
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "support"))
import rlt  # noqa: E402

RL_SERVER, PROTO_DIR = sys.argv[1], sys.argv[2]
N = int(sys.argv[3]) if len(sys.argv) > 3 else 3000
SECS = float(sys.argv[4]) if len(sys.argv) > 4 else 5.0
RATE = float(sys.argv[5]) if len(sys.argv) > 5 else 400.0
TMP = tempfile.mkdtemp(prefix="rl-tls-handshakes-")
PROCS = []

rlt.envoy_stubs(PROTO_DIR, TMP, native=True)
import ratelimit_pb2 as pb  # noqa: E402

TCK = os.sysconf("SC_CLK_TCK")


def path(name):
    return os.path.join(TMP, name)


def make_certs():
    for name, key in (("rsa", ["-newkey", "rsa:2048"]),
                      ("ec", ["-newkey", "ec", "-pkeyopt",
                              "ec_paramgen_curve:prime256v1"])):
        subprocess.run(["openssl", "req", "-x509"] + key +
                       ["-nodes", "-days", "2", "-subj", "/CN=127.0.0.1",
                        "-addext", "subjectAltName=IP:127.0.0.1",
                        "-keyout", path(name + ".key"),
                        "-out", path(name + ".crt")],
                       check=True, capture_output=True, timeout=60)


class Server:
    started = 0

    def __init__(self, cert, extra=()):
        Server.started += 1
        ports = path("server-%d.ports" % Server.started)
        self.p = subprocess.Popen(
            [RL_SERVER, "--listen", "127.0.0.1:0", "--grpc", "127.0.0.1:0",
             "--metrics", "127.0.0.1:0", "--port-file", ports,
             "--rule", "h=1000000000/1d", "--tls-cert", path(cert + ".crt"),
             "--tls-key", path(cert + ".key"), "--log-level", "error"] +
            list(extra), stderr=subprocess.DEVNULL)
        PROCS.append(self.p)
        self.port = rlt.wait_ports(self.p, ports, "/dev/null")

    def cpu(self):
        f = open("/proc/%d/stat" % self.p.pid).read().rsplit(")", 1)[1]
        f = f.split()
        return (int(f[11]) + int(f[12])) / TCK

    def handshakes(self):
        m = urllib.request.urlopen("http://127.0.0.1:%d/metrics"
                                   % self.port["metrics"], timeout=5)
        return {k: int(v) for k, v in re.findall(
            r'rl_tls_handshakes_total\{listener="grpc",result="([a-z_]+)"\}'
            r' (\d+)', m.read().decode()) if int(v) > 0}

    def stop(self):
        self.p.send_signal(signal.SIGTERM)
        self.p.wait(30)


def handshake_cpu(cert, version):
    s = Server(cert, ["--tls-listeners", "listen",
                      "--tls-handshake-rate", "0"])
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    ctx.minimum_version = ctx.maximum_version = version
    ctx.options |= ssl.OP_NO_TICKET
    c0, t0 = s.cpu(), time.time()
    for _ in range(N):
        with socket.create_connection(("127.0.0.1", s.port["listen"]),
                                      5) as raw:
            with ctx.wrap_socket(raw, server_hostname="127.0.0.1"):
                pass
    c1, t1 = s.cpu(), time.time()
    s.stop()
    print("%-5s %s: %d handshakes in %.2f s, rl-server CPU %.2f s: "
          "%.3f ms a handshake" % (cert, version.name, N, t1 - t0, c1 - c0,
                                   (c1 - c0) * 1000 / N), flush=True)


def client_hello():
    inb, outb = ssl.MemoryBIO(), ssl.MemoryBIO()
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    o = ctx.wrap_bio(inb, outb, server_hostname="127.0.0.1")
    try:
        o.do_handshake()
    except ssl.SSLWantReadError:
        pass
    return outb.read()


def bystander(port, secs):
    """Latencies (ms) of batches of 10 checks, 200 batches a second."""
    batch = b""
    for i in range(10):
        m = pb.CheckRequest(id=i + 1, key="b%d" % i, rule="h")
        m = m.SerializeToString()
        batch += struct.pack(">BI", 0, len(m)) + m
    lat = []
    with socket.create_connection(("127.0.0.1", port), 5) as s:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        end = time.time() + secs
        nxt = time.time()
        while time.time() < end:
            t0 = time.perf_counter()
            s.sendall(batch)
            n, buf = 0, b""
            while n < 10:
                buf += s.recv(65536)
                while len(buf) >= 5:
                    ln = struct.unpack(">I", buf[1:5])[0]
                    if len(buf) < 5 + ln:
                        break
                    buf = buf[5 + ln:]
                    n += 1
            lat.append((time.perf_counter() - t0) * 1000)
            nxt += 0.005
            if nxt > time.time():
                time.sleep(nxt - time.time())
    return sorted(lat)


def flooder(port, hello, rate):
    """Replays hello on new connections until killed, rate a second (0:
    flat out), reading the server's answer (its flight, or a refusal)."""
    nxt = time.time()
    while True:
        if rate > 0:
            nxt += 1.0 / rate
            if nxt > time.time():
                time.sleep(nxt - time.time())
        try:
            with socket.create_connection(("127.0.0.1", port), 2) as s:
                s.sendall(hello)
                s.settimeout(2)
                try:
                    s.recv(4096)
                except OSError:
                    pass
        except OSError:
            time.sleep(0.001)


def stats(lat):
    return "%.2f/%.2f/%.2f ms" % (lat[len(lat) // 2],
                                  lat[min(len(lat) - 1,
                                          int(len(lat) * 0.99))], lat[-1])


def flood(label, extra):
    s = Server("rsa", ["--tls-listeners", "grpc"] + extra)
    alone = bystander(s.port["listen"], SECS)
    hello = client_hello()
    pids = []
    for _ in range(2):
        pid = os.fork()
        if pid == 0:
            try:
                flooder(s.port["grpc"], hello, RATE)
            finally:
                os._exit(0)
        pids.append(pid)
    try:
        time.sleep(0.5)
        h0, c0, t0 = s.handshakes(), s.cpu(), time.time()
        beside = bystander(s.port["listen"], SECS)
        h1, c1, t1 = s.handshakes(), s.cpu(), time.time()
    finally:
        for pid in pids:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
    done = {k: v - h0.get(k, 0) for k, v in h1.items() if v > h0.get(k, 0)}
    print("%s: bystander p50/p99/max alone %s, during the flood %s; "
          "rl-server CPU %.0f %% during it; handshakes in %.1f s: %s"
          % (label, stats(alone), stats(beside),
             100 * (c1 - c0) / (t1 - t0), t1 - t0, done), flush=True)
    s.stop()


try:
    make_certs()
    for cert in ("rsa", "ec"):
        for v in (ssl.TLSVersion.TLSv1_3, ssl.TLSVersion.TLSv1_2):
            handshake_cpu(cert, v)
    print("flood: 2 clients x %s ClientHellos a second" %
          (RATE if RATE > 0 else "flat out"), flush=True)
    flood("caps at their defaults", [])
    flood("no caps", ["--tls-max-handshakes", "0",
                      "--tls-handshake-rate", "0"])
finally:
    for p in PROCS:
        if p.poll() is None:
            p.kill()
            p.wait()
    subprocess.run(["rm", "-rf", TMP])
