#!/usr/bin/python3
"""grpc.health.v1 on rl-server's --grpc listener, called by grpcio.

Usage: e2e_grpc_health.py RL_SERVER PROTO_DIR [redis-server]

Stubs are generated from proto/grpc/health/v1/health.proto (Debian has no
grpc_health package) with grpc_tools.protoc. Check for "", "ratelimit",
the RLS service's name and an unknown one (NOT_FOUND); Watch: SERVING at
once, NOT_SERVING when the server drains (SIGTERM with --drain-ms), then
the end of the stream (UNAVAILABLE), the server exiting 0 with Watch
streams open; the idle timeout ends a connection that only watches; the
caps on Watch streams; hostile clients (Watch streams on a zero window,
clients that never read) leave the server's memory bounded and other
clients served. With a redis-server: under --fail-closed a Watch hears
NOT_SERVING when the test's Redis is killed and SERVING when it is back;
under --fail-open the status stays SERVING. Over TLS too."""

import os
import queue
import re
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "..", "..", "support"))
import rlt  # noqa: E402

RL_SERVER, PROTO_DIR = sys.argv[1], sys.argv[2]
REDIS = sys.argv[3] if len(sys.argv) > 3 else None
TMP = tempfile.mkdtemp(prefix="rl-ghealth-")
PROCS = []
FAILS = []

rlt.envoy_stubs(PROTO_DIR, TMP)
rlt.health_stubs(PROTO_DIR, TMP)
import grpc  # noqa: E402
import health_pb2  # noqa: E402
import health_pb2_grpc  # noqa: E402
from envoy.service.ratelimit.v3 import rls_pb2, rls_pb2_grpc  # noqa: E402
from envoy.extensions.common.ratelimit.v3 import ratelimit_pb2  # noqa: E402

H = health_pb2.HealthCheckResponse
SERVING, NOT_SERVING, UNKNOWN_SVC = H.SERVING, H.NOT_SERVING, H.SERVICE_UNKNOWN
RLS_NAME = "envoy.service.ratelimit.v3.RateLimitService"


def check(cond, what):
    if not cond:
        FAILS.append(what)
        print("FAIL:", what, flush=True)


def write(name, text):
    with open(os.path.join(TMP, name), "w") as f:
        f.write(text)
    return os.path.join(TMP, name)


DOMAIN = write("d.yaml", "domain: d\ndescriptors:\n  - key: k\n"
               "    rate_limit: {unit: hour, requests_per_unit: 1000000}\n")


class Server:
    started = 0

    def __init__(self, extra=(), creds=None):
        Server.started += 1
        n = Server.started
        ports = os.path.join(TMP, "server-%d.ports" % n)
        args = [RL_SERVER, "--listen", "127.0.0.1:0", "--grpc",
                "127.0.0.1:0", "--metrics", "127.0.0.1:0", "--port-file",
                ports, "--envoy-config", DOMAIN] + list(extra)
        self.log = open(os.path.join(TMP, "server-%d.log" % n), "w")
        self.p = subprocess.Popen(args, stderr=self.log)
        PROCS.append(self.p)
        got = rlt.wait_ports(self.p, ports, self.log.name)
        self.grpc_port, self.metrics_port = got["grpc"], got["metrics"]
        self.creds = creds
        self.ch = self.channel()
        self.health = health_pb2_grpc.HealthStub(self.ch)

    def channel(self):
        addr = "127.0.0.1:%d" % self.grpc_port
        if self.creds is not None:
            return grpc.secure_channel(addr, self.creds)
        return grpc.insecure_channel(addr)

    def check(self, service):
        """The status Check gives, or the gRPC code of its error."""
        try:
            return self.health.Check(health_pb2.HealthCheckRequest(
                service=service), timeout=5).status
        except grpc.RpcError as e:
            return e.code()

    def call(self):
        stub = rls_pb2_grpc.RateLimitServiceStub(self.ch)
        d = ratelimit_pb2.RateLimitDescriptor(entries=[
            ratelimit_pb2.RateLimitDescriptor.Entry(key="k", value="v")])
        return stub.ShouldRateLimit(rls_pb2.RateLimitRequest(
            domain="d", descriptors=[d]), timeout=5).overall_code

    def healthz(self):
        try:
            return urllib.request.urlopen(
                "http://127.0.0.1:%d/healthz" % self.metrics_port,
                timeout=5).status
        except urllib.error.HTTPError as e:
            return e.code

    def metric(self, name):
        text = urllib.request.urlopen(
            "http://127.0.0.1:%d/metrics" % self.metrics_port,
            timeout=5).read().decode()
        m = re.search(r"^%s (\d+)$" % re.escape(name), text, re.M)
        return int(m.group(1)) if m else -1

    def rss_kb(self):
        with open("/proc/%d/status" % self.p.pid) as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        return -1

    def log_text(self):
        if not self.log.closed:
            self.log.flush()
        with open(self.log.name, errors="replace") as f:
            return f.read()

    def stop(self, timeout=20):
        self.p.send_signal(signal.SIGTERM)
        rc = self.p.wait(timeout)
        self.ch.close()
        self.log.close()
        return rc


class Watch:
    """A Watch stream read by a thread into a queue: each status, then
    ("end", code) when the stream ends."""

    def __init__(self, server, service, channel=None):
        self.q = queue.Queue()
        stub = health_pb2_grpc.HealthStub(channel or server.ch)
        self.call = stub.Watch(health_pb2.HealthCheckRequest(service=service),
                               timeout=60)
        self.t = threading.Thread(target=self._run, daemon=True)
        self.t.start()

    def _run(self):
        try:
            for r in self.call:
                self.q.put(r.status)
            self.q.put(("end", grpc.StatusCode.OK))
        except grpc.RpcError as e:
            self.q.put(("end", e.code()))

    def next(self, timeout=10):
        try:
            return self.q.get(timeout=timeout)
        except queue.Empty:
            return None

    def quiet(self, timeout=0.5):
        """No message came within timeout (a negative check: it can only
        miss a message, never invent one)."""
        return self.next(timeout) is None


def wait_for(what, fn, timeout=10):
    end = time.time() + timeout
    while time.time() < end:
        if fn():
            return True
        time.sleep(0.02)
    check(False, "timed out waiting for " + what)
    return False


# ---------------------------------------------------------------------------


def checks_and_drain():
    # --frame-timeout-ms short: an open Watch is no answer owed, and its
    # connection is not closed for it.
    s = Server(["--drain-ms", "1500", "--frame-timeout-ms", "300"])
    for name in ("", "ratelimit", RLS_NAME):
        check(s.check(name) == SERVING, "Check %r: SERVING" % name)
    got = s.check("no.such.Service")
    check(got == grpc.StatusCode.NOT_FOUND, "Check unknown: NOT_FOUND (%s)"
          % got)
    w = Watch(s, "")
    w2 = Watch(s, RLS_NAME)
    u = Watch(s, "no.such.Service")
    check(w.next() == SERVING, "Watch '': SERVING at once")
    check(w2.next() == SERVING, "Watch RLS name: SERVING at once")
    check(u.next() == UNKNOWN_SVC, "Watch unknown: SERVICE_UNKNOWN")
    # The stream stays: it is counted open, and nothing more comes.
    check(s.metric("rl_grpc_health_watches_open") == 3, "3 Watch streams open")
    check(s.call() == rls_pb2.RateLimitResponse.OK, "ShouldRateLimit beside")
    # Past the frame timeout and a sweep (once a second): still open.
    check(w.quiet(1.5), "no message while nothing changes")
    check(s.metric("rl_grpc_health_watches_open") == 3,
          "Watch streams outlive --frame-timeout-ms")
    check(s.metric('rl_grpc_connections_closed_total{reason="output_timeout"}')
          == 0, "no connection closed for answers not taken")
    s.p.send_signal(signal.SIGTERM)
    check(w.next() == NOT_SERVING, "Watch: NOT_SERVING on the drain")
    check(w2.next() == NOT_SERVING, "Watch RLS name: NOT_SERVING on drain")
    check(s.check("") == NOT_SERVING, "Check during the drain: NOT_SERVING")
    check(s.call() == rls_pb2.RateLimitResponse.OK,
          "ShouldRateLimit still answered during the drain")
    # The drain's end: every stream ends, the server exits 0 (its drain
    # is not held by the Watch streams).
    for name, x in (("''", w), ("RLS", w2), ("unknown", u)):
        last = x.next()
        while last is not None and not isinstance(last, tuple):
            last = x.next()
        check(last == ("end", grpc.StatusCode.UNAVAILABLE),
              "Watch %s ends UNAVAILABLE at the stop (%s)" % (name, last))
    rc = s.p.wait(20)
    s.ch.close()
    check(rc == 0, "server exits 0 with Watch streams open (%s)" % rc)
    check("stop timed out" not in s.log_text(),
          "the stop did not wait for its grace")


def idle_and_caps():
    s = Server(["--idle-timeout", "1"])
    ch = s.channel()
    w = Watch(s, "", channel=ch)
    check(w.next() == SERVING, "idle: SERVING")
    # Only a Watch on the connection: --idle-timeout still ends it.
    last = w.next(timeout=15)
    check(isinstance(last, tuple) and last[1] == grpc.StatusCode.UNAVAILABLE,
          "a connection that only watches is closed by --idle-timeout (%s)"
          % (last,))
    ch.close()
    # 16 Watch streams on one connection; the 17th is refused.
    ch = s.channel()
    ws = [Watch(s, "", channel=ch) for _ in range(16)]
    check(all(x.next() == SERVING for x in ws), "16 Watch streams served")
    x = Watch(s, "", channel=ch)
    last = x.next()
    check(last == ("end", grpc.StatusCode.RESOURCE_EXHAUSTED),
          "the 17th Watch on a connection: RESOURCE_EXHAUSTED (%s)"
          % (last,))
    check(s.metric("rl_grpc_health_watches_refused_total") == 1,
          "refusal counted")
    for x in ws:
        x.call.cancel()
    wait_for("cancelled Watch streams to go",
             lambda: s.metric("rl_grpc_health_watches_open") == 0)
    ch.close()
    check(s.stop() == 0, "idle server exits 0")


# A Watch call by hand: HPACK literals without indexing (no table state).
def _lit(idx, value):
    v = value.encode()
    return bytes([idx]) + bytes([len(v)]) + v


def _frame(type_, flags, sid, payload):
    return struct.pack(">I", len(payload))[1:] + bytes([type_, flags]) + \
        struct.pack(">I", sid) + payload


def raw_watches(port, n, window):
    """A connection that opens n Watch streams for "" with an initial
    window of `window` bytes and then never reads."""
    sock = socket.create_connection(("127.0.0.1", port), 5)
    out = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
    out += _frame(4, 0, 0, struct.pack(">HI", 4, window))
    block = (b"\x83\x86" + _lit(4, "/grpc.health.v1.Health/Watch") +
             _lit(1, "rl") + b"\x0f\x10" + bytes([16]) + b"application/grpc" +
             b"\x00\x02te\x08trailers")
    for i in range(n):
        sid = 2 * i + 1
        out += _frame(1, 4, sid, block)
        out += _frame(0, 1, sid, b"\x00\x00\x00\x00\x00")
    sock.sendall(out)
    return sock


def hostile():
    s = Server(["--drain-ms", "300"])
    check(s.call() == rls_pb2.RateLimitResponse.OK, "hostile: a first call")
    before = s.rss_kb()
    socks = []
    # Zero windows: not even the first status can go.
    for _ in range(25):
        socks.append(raw_watches(s.grpc_port, 20, 0))
    # Normal windows, never read.
    for _ in range(25):
        socks.append(raw_watches(s.grpc_port, 20, 65535))
    wait_for("the hostile Watch streams to be open and refused",
             lambda: s.metric("rl_grpc_health_watches_open") == 50 * 16 and
             s.metric("rl_grpc_health_watches_refused_total") == 50 * 4)
    grown = s.rss_kb() - before
    print("hostile: 800 Watch streams open, RSS grew %d KiB" % grown)
    check(grown < 16 * 1024, "800 Watch streams cost < 16 MiB (%d KiB)"
          % grown)
    # Others are served throughout.
    for _ in range(20):
        check(s.call() == rls_pb2.RateLimitResponse.OK,
              "ShouldRateLimit beside hostile watchers")
    check(s.check("") == SERVING, "Check beside hostile watchers")
    # The drain completes: zero-window streams are reset, the others end.
    t0 = time.time()
    rc = s.stop()
    print("hostile: stop took %.2f s" % (time.time() - t0))
    check(rc == 0, "server exits 0 with hostile watchers (%s)" % rc)
    check("stop timed out" not in s.log_text(),
          "hostile watchers did not hold the stop")
    for sock in socks:
        sock.close()


def with_redis():
    rport, rp = rlt.start_redis(TMP, redis=REDIS, procs=PROCS)

    def redis_again():
        log = os.path.join(TMP, "redis-again-%d.log" % rport)
        p = subprocess.Popen(
            [REDIS, "--port", str(rport), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", TMP, "--logfile", log],
            stdout=subprocess.DEVNULL)
        PROCS.append(p)
        rlt.wait_listen(rport, p, log)
        return p

    s = Server(["--redis", "127.0.0.1:%d" % rport, "--fail-closed"])
    wait_for("the store to be up", lambda: s.healthz() == 200)
    w = Watch(s, RLS_NAME)
    check(w.next() == SERVING, "fail-closed: SERVING with Redis up")
    rp.kill()
    rp.wait()
    check(w.next() == NOT_SERVING,
          "fail-closed: NOT_SERVING once Redis is down")
    check(s.check("") == NOT_SERVING, "fail-closed: Check NOT_SERVING")
    rp = redis_again()
    check(w.next(timeout=20) == SERVING,
          "fail-closed: SERVING again once Redis is back")
    check(s.stop() == 0, "fail-closed server exits 0")

    s = Server(["--redis", "127.0.0.1:%d" % rport, "--fail-open"])
    wait_for("the store to be up", lambda: s.healthz() == 200)
    w = Watch(s, "")
    check(w.next() == SERVING, "fail-open: SERVING with Redis up")
    rp.kill()
    rp.wait()
    # /healthz says the store is down; the health service says the server
    # still takes work, as envoy-ratelimit's does.
    wait_for("/healthz to see the store down", lambda: s.healthz() != 200)
    check(s.check("") == SERVING, "fail-open: Check SERVING, Redis down")
    check(w.quiet(), "fail-open: Watch hears no change")
    check(s.stop() == 0, "fail-open server exits 0")


def openssl(*args):
    subprocess.run(["openssl"] + list(args), check=True, capture_output=True,
                   timeout=60)


def over_tls():
    p = lambda n: os.path.join(TMP, n)  # noqa: E731
    openssl("req", "-x509", "-newkey", "ec", "-pkeyopt",
            "ec_paramgen_curve:prime256v1", "-nodes", "-days", "2", "-subj",
            "/CN=rl test ca", "-keyout", p("ca.key"), "-out", p("ca.crt"))
    write("server.ext", "subjectAltName=DNS:localhost,IP:127.0.0.1\n")
    openssl("req", "-newkey", "ec", "-pkeyopt",
            "ec_paramgen_curve:prime256v1", "-nodes", "-subj",
            "/CN=rl test server", "-keyout", p("server.key"), "-out",
            p("server.csr"))
    openssl("x509", "-req", "-in", p("server.csr"), "-CA", p("ca.crt"),
            "-CAkey", p("ca.key"), "-CAcreateserial", "-days", "2",
            "-extfile", p("server.ext"), "-out", p("server.crt"))
    with open(p("ca.crt"), "rb") as f:
        creds = grpc.ssl_channel_credentials(root_certificates=f.read())
    s = Server(["--tls-cert", p("server.crt"), "--tls-key", p("server.key"),
                "--tls-listeners", "grpc", "--drain-ms", "300"], creds=creds)
    check(s.check("") == SERVING, "TLS: Check SERVING")
    check(s.check("x") == grpc.StatusCode.NOT_FOUND, "TLS: Check NOT_FOUND")
    w = Watch(s, "ratelimit")
    check(w.next() == SERVING, "TLS: Watch SERVING")
    s.p.send_signal(signal.SIGTERM)
    check(w.next() == NOT_SERVING, "TLS: Watch NOT_SERVING on the drain")
    check(s.p.wait(20) == 0, "TLS server exits 0")
    s.ch.close()


try:
    checks_and_drain()
    idle_and_caps()
    hostile()
    over_tls()
    if REDIS:
        with_redis()
except Exception as e:  # noqa: BLE001
    import traceback
    traceback.print_exc()
    FAILS.append("exception: %s" % e)
rlt.end_run(FAILS, PROCS, TMP)
