#!/usr/bin/python3
"""TLS on rl-server's own listeners (--tls-cert, --tls-key,
--tls-client-ca), called by grpcio over TLS and by Python's ssl module.

Usage: e2e_tls_listen.py RL_SERVER PROTO_DIR [RL_CHECK RL_BENCH]

With RL_CHECK and RL_BENCH, librlc's TLS (blocking through rl-check,
async through rl-bench) against the native listener over TLS too.

Certificates are made at test time by `openssl`: a CA and another CA, a
server certificate for 127.0.0.1 and localhost, a second one (for the
reload), one for a wrong name, a client certificate, an expired one and
one of the other CA. Every server listens on 127.0.0.1 port 0 and says
its ports in --port-file; every wait is for a condition, with a
deadline; every process is stopped by its pid, also when a check
fails."""

import os
import re
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "..", "support"))
import rlt  # noqa: E402

RL_SERVER, PROTO_DIR = sys.argv[1], sys.argv[2]
RL_CHECK = sys.argv[3] if len(sys.argv) > 4 else None
RL_BENCH = sys.argv[4] if len(sys.argv) > 4 else None
TMP = tempfile.mkdtemp(prefix="rl-tls-listen-")
PROCS = []
FAILS = []

rlt.envoy_stubs(PROTO_DIR, TMP, native=True)
import grpc  # noqa: E402
from envoy.service.ratelimit.v3 import rls_pb2, rls_pb2_grpc  # noqa: E402
from envoy.extensions.common.ratelimit.v3 import ratelimit_pb2  # noqa: E402
import ratelimit_pb2 as native_pb2  # noqa: E402
import struct  # noqa: E402

OK, OVER = rls_pb2.RateLimitResponse.OK, rls_pb2.RateLimitResponse.OVER_LIMIT


def check(cond, what):
    if not cond:
        FAILS.append(what)
        print("FAIL:", what, flush=True)
    else:
        print("ok:", what, flush=True)


def path(name):
    return os.path.join(TMP, name)


def openssl(*args):
    subprocess.run(["openssl"] + list(args), check=True,
                   capture_output=True, timeout=60)


def read(name):
    with open(path(name), "rb") as f:
        return f.read()


def make_certs():
    """Two CAs; from the first, server certificates (one for the wrong
    name), a client certificate and an expired one (dated by `openssl
    ca`, which takes explicit dates); from the other, a client
    certificate it does not know."""
    for ca in ("ca", "otherca"):
        openssl("req", "-x509", "-newkey", "ec", "-pkeyopt",
                "ec_paramgen_curve:prime256v1", "-nodes", "-days", "2",
                "-subj", "/CN=rl test " + ca, "-keyout", path(ca + ".key"),
                "-out", path(ca + ".crt"))
    san = "subjectAltName=DNS:localhost,IP:127.0.0.1\n"
    certs = (("server", "ca", san), ("server2", "ca", san),
             ("wrongname", "ca", "subjectAltName=DNS:wrong.example\n"),
             ("client", "ca", "extendedKeyUsage=clientAuth\n"),
             ("stranger", "otherca", "extendedKeyUsage=clientAuth\n"))
    for name, ca, ext in certs:
        with open(path(name + ".ext"), "w") as f:
            f.write(ext)
        openssl("req", "-newkey", "ec", "-pkeyopt",
                "ec_paramgen_curve:prime256v1", "-nodes", "-subj",
                "/CN=rl test " + name, "-keyout", path(name + ".key"),
                "-out", path(name + ".csr"))
        openssl("x509", "-req", "-in", path(name + ".csr"), "-CA",
                path(ca + ".crt"), "-CAkey", path(ca + ".key"),
                "-CAcreateserial", "-days", "2", "-extfile",
                path(name + ".ext"), "-out", path(name + ".crt"))
    # The expired client certificate: valid for a day in 2020.
    os.mkdir(path("ca.db"))
    open(path("ca.db/index.txt"), "w").close()
    with open(path("ca.db/serial"), "w") as f:
        f.write("1000\n")
    with open(path("ca.cnf"), "w") as f:
        f.write("[ca]\ndefault_ca = d\n[d]\ndatabase = %s\nserial = %s\n"
                "new_certs_dir = %s\ndefault_md = sha256\npolicy = p\n"
                "[p]\ncommonName = supplied\n"
                % (path("ca.db/index.txt"), path("ca.db/serial"),
                   path("ca.db")))
    openssl("req", "-newkey", "ec", "-pkeyopt",
            "ec_paramgen_curve:prime256v1", "-nodes", "-subj",
            "/CN=rl test expired", "-keyout", path("expired.key"),
            "-out", path("expired.csr"))
    openssl("ca", "-batch", "-config", path("ca.cnf"), "-cert",
            path("ca.crt"), "-keyfile", path("ca.key"), "-in",
            path("expired.csr"), "-out", path("expired.crt"), "-notext",
            "-startdate", "20200101000000Z", "-enddate", "20200102000000Z")


def wait_for(cond, what, timeout_s=10):
    """Waits until cond() is true; False (and a failed check) at the
    deadline."""
    end = time.time() + timeout_s
    while time.time() < end:
        if cond():
            return True
        time.sleep(0.02)
    check(False, what + " (timed out)")
    return False


class Server:
    started = 0

    def __init__(self, extra=(), tls=True):
        Server.started += 1
        n = Server.started
        ports = path("server-%d.ports" % n)
        with open(path("domain.yaml"), "w") as f:
            f.write("domain: tls\ndescriptors:\n  - key: k\n"
                    "    rate_limit:\n      unit: day\n"
                    "      requests_per_unit: 2\n")
        args = [RL_SERVER, "--listen", "127.0.0.1:0", "--grpc",
                "127.0.0.1:0", "--metrics", "127.0.0.1:0", "--http",
                "127.0.0.1:0", "--port-file", ports, "--envoy-config",
                path("domain.yaml"), "--rule", "h=2/1d"]
        if tls:
            args += ["--tls-cert", path("server.crt"), "--tls-key",
                     path("server.key")]
        self.log = open(path("server-%d.log" % n), "w")
        args += rlt.server_args()
        self.p = subprocess.Popen(args + list(extra), stderr=self.log)
        PROCS.append(self.p)
        got = rlt.wait_ports(self.p, ports, self.log.name)
        self.grpc_port, self.metrics_port = got["grpc"], got["metrics"]
        self.http_port, self.native_port = got["http"], got["listen"]
        self.https_metrics = "metrics" in " ".join(extra)

    def metrics(self):
        if self.https_metrics:
            return urllib.request.urlopen(
                "https://127.0.0.1:%d/metrics" % self.metrics_port,
                timeout=5, context=https_ctx()).read().decode()
        return urllib.request.urlopen(
            "http://127.0.0.1:%d/metrics" % self.metrics_port,
            timeout=5).read().decode()

    def handshakes(self, result, listener="grpc"):
        m = re.search(r'^rl_tls_handshakes_total\{listener="%s",'
                      r'result="%s"\} (\d+)$' % (listener, result),
                      self.metrics(), re.M)
        return int(m.group(1)) if m else -1

    def log_text(self):
        self.log.flush()
        with open(self.log.name, errors="replace") as f:
            return f.read()

    def stop(self):
        self.p.send_signal(signal.SIGTERM)
        rc = self.p.wait(20)
        self.log.close()
        return rc


def channel(port, cert=None, root="ca.crt"):
    creds = grpc.ssl_channel_credentials(
        root_certificates=read(root),
        private_key=read(cert + ".key") if cert else None,
        certificate_chain=read(cert + ".crt") if cert else None)
    return grpc.secure_channel("127.0.0.1:%d" % port, creds)


def call(ch, key):
    stub = rls_pb2_grpc.RateLimitServiceStub(ch)
    d = ratelimit_pb2.RateLimitDescriptor(entries=[
        ratelimit_pb2.RateLimitDescriptor.Entry(key="k", value=key)])
    return stub.ShouldRateLimit(rls_pb2.RateLimitRequest(
        domain="tls", descriptors=[d]), timeout=5)


def status_of(ch, key):
    try:
        return call(ch, key).overall_code
    except grpc.RpcError as e:
        return e.code()


def ssl_hello(port, alpn=None, cafile="ca.crt", name="127.0.0.1"):
    """One handshake with Python's ssl module: the error it raised, or
    None when it succeeded."""
    ctx = ssl.create_default_context(cafile=path(cafile))
    if alpn:
        ctx.set_alpn_protocols(alpn)
    try:
        with socket.create_connection(("127.0.0.1", port), 5) as s:
            with ctx.wrap_socket(s, server_hostname=name):
                pass
        return None
    except (ssl.SSLError, ssl.CertificateError, OSError) as e:
        return e


def peer_cn(port):
    """The CN of the certificate a new connection is shown."""
    ctx = ssl.create_default_context(cafile=path("ca.crt"))
    ctx.set_alpn_protocols(["h2"])
    with socket.create_connection(("127.0.0.1", port), 5) as s:
        with ctx.wrap_socket(s, server_hostname="127.0.0.1") as t:
            return dict(x[0] for x in t.getpeercert()["subject"])[
                "commonName"]


def install(src, dst):
    """Puts src's certificate and key in place of dst's, each by a
    rename, as a rotation does."""
    for ext in (".crt", ".key"):
        with open(path(dst + ext + ".tmp"), "wb") as f:
            f.write(read(src + ext))
        os.replace(path(dst + ext + ".tmp"), path(dst + ext))


def test_reload():
    # SIGHUP (the watch would wait a minute for the files to settle).
    install("server", "live")
    s = Server(extra=["--tls-cert", path("live.crt"), "--tls-key",
                      path("live.key"), "--reload-settle-ms", "60000"])
    ch = channel(s.grpc_port)
    check(call(ch, "r").overall_code == OK, "served before the reload")
    check(peer_cn(s.grpc_port) == "rl test server", "first certificate")
    install("server2", "live")
    s.p.send_signal(signal.SIGHUP)
    wait_for(lambda: "tls certificates reloaded" in s.log_text(), "reload")
    check(peer_cn(s.grpc_port) == "rl test server2",
          "SIGHUP: a new connection sees the new certificate")
    before = s.handshakes("ok")
    check(call(ch, "r").overall_code == OK and call(ch, "r").overall_code
          == OVER, "the connection made before the reload still served")
    check(s.handshakes("ok") == before, "... on the same connection (no "
          "new handshake)")
    # A bad certificate keeps the old one, with one error line.
    with open(path("live.crt"), "w") as f:
        f.write("-----BEGIN CERTIFICATE-----\ngarbage\n"
                "-----END CERTIFICATE-----\n")
    s.p.send_signal(signal.SIGHUP)
    wait_for(lambda: "not reloaded" in s.log_text(), "refused reload")
    log = s.log_text()
    check(len(re.findall("tls certificates not reloaded", log)) == 1,
          "one error line for the bad certificate")
    check("--tls-cert" in log and "PRIVATE" not in log,
          "the error names the flag, and no key")
    check(peer_cn(s.grpc_port) == "rl test server2",
          "the old certificate stays in force")
    check(call(ch, "r2").overall_code == OK, "still served")
    ch.close()
    check(s.stop() == 0, "stopped cleanly")
    # The files' change alone, once settled.
    install("server", "live")
    s = Server(extra=["--tls-cert", path("live.crt"), "--tls-key",
                      path("live.key"), "--reload-settle-ms", "100"])
    check(peer_cn(s.grpc_port) == "rl test server", "first certificate")
    install("server2", "live")
    check(wait_for(lambda: peer_cn(s.grpc_port) == "rl test server2",
                   "watch reload"), "a changed file reloaded by the watch")
    check(s.stop() == 0, "stopped cleanly")


def https_ctx():
    return ssl.create_default_context(cafile=path("ca.crt"))


def https_check(port, key):
    """GET /check over HTTPS: the status."""
    try:
        return urllib.request.urlopen(
            "https://127.0.0.1:%d/check?rule=h&key=%s" % (port, key),
            timeout=5, context=https_ctx()).status
    except urllib.error.HTTPError as e:
        return e.code


def test_https():
    s = Server()
    got = [https_check(s.http_port, "a") for _ in range(3)]
    check(got == [200, 200, 429], "HTTPS /check: 200, 200, 429 (2/day), "
          "got %s" % got)
    check(s.handshakes("ok", "http") >= 3, "HTTPS handshakes counted")
    # Two requests in one TLS write (pipelined): both answered, the
    # second out of what the TLS layer held after the first.
    ctx = https_ctx()
    ctx.set_alpn_protocols(["h2", "http/1.1"])
    with socket.create_connection(("127.0.0.1", s.http_port), 5) as raw:
        with ctx.wrap_socket(raw, server_hostname="127.0.0.1") as t:
            check(t.selected_alpn_protocol() == "http/1.1",
                  "ALPN http/1.1 chosen over h2")
            t.sendall(b"GET /check?rule=h&key=p HTTP/1.1\r\nHost: x\r\n\r\n"
                      b"GET /check?rule=h&key=p HTTP/1.1\r\nHost: x\r\n"
                      b"Connection: close\r\n\r\n")
            answer = b""
            while True:
                chunk = t.recv(4096)
                if not chunk:
                    break
                answer += chunk
    check(answer.count(b"HTTP/1.1 200") == 2, "pipelined over TLS: both "
          "answered (%r)" % answer[:80])
    # Plain HTTP on the HTTPS port: told, counted; HTTPS served meanwhile.
    try:
        urllib.request.urlopen("http://127.0.0.1:%d/check?rule=h&key=z"
                               % s.http_port, timeout=5)
        st, body = 200, b""
    except urllib.error.HTTPError as e:
        st, body = e.code, e.read()
    check(st == 400 and b"speaks HTTPS" in body,
          "plain HTTP on the HTTPS port: 400 saying so (%s %r)" % (st, body))
    check(wait_for(lambda: s.handshakes("not_tls", "http") >= 1,
                   "http not_tls"), "counted not_tls on http")
    check(https_check(s.http_port, "y") == 200, "HTTPS served meanwhile")
    # A client that never finishes its handshake is closed at the header
    # deadline (2 s from accept) and counted.
    with socket.create_connection(("127.0.0.1", s.http_port), 5) as raw:
        raw.settimeout(6)
        t0 = time.time()
        raw.sendall(b"\x16\x03\x01\x00\x05")  # a record header, no more
        check(raw.recv(10) == b"" and time.time() - t0 < 5,
              "stalled HTTPS handshake closed at the header deadline")
    check(wait_for(lambda: s.handshakes("handshake_timeout", "http") >= 1,
                   "http timeout"), "counted handshake_timeout on http")
    # The metrics listener stays plaintext unless named.
    check(s.handshakes("ok", "metrics") == -1, "metrics plaintext by "
          "default")
    check(s.stop() == 0, "stopped cleanly")
    # Mutual TLS on HTTPS too.
    s = Server(extra=["--tls-client-ca", path("ca.crt")])
    ctx = https_ctx()
    ctx.load_cert_chain(path("client.crt"), path("client.key"))
    st = urllib.request.urlopen("https://127.0.0.1:%d/check?rule=h&key=m"
                                % s.http_port, timeout=5, context=ctx).status
    check(st == 200, "HTTPS with a client certificate: 200")
    try:
        urllib.request.urlopen("https://127.0.0.1:%d/check?rule=h&key=m"
                               % s.http_port, timeout=5, context=https_ctx())
        refused = False
    except (urllib.error.URLError, OSError, ssl.SSLError):
        refused = True
    check(refused, "HTTPS without a client certificate refused")
    check(wait_for(lambda: s.handshakes("no_client_certificate", "http")
                   >= 1, "http mtls"), "counted no_client_certificate")
    check(s.stop() == 0, "stopped cleanly")
    s = Server(extra=["--tls-listeners", "grpc,http,metrics"])
    check(s.handshakes("ok", "metrics") >= 0, "metrics over HTTPS when "
          "named")
    try:
        urllib.request.urlopen("http://127.0.0.1:%d/metrics"
                               % s.metrics_port, timeout=5)
        plain_ok = True
    except (urllib.error.URLError, OSError):
        plain_ok = False
    check(not plain_ok, "plain /metrics refused")
    check(s.stop() == 0, "stopped cleanly")


def frames(reqs):
    out = b""
    for i, (rule, key) in enumerate(reqs):
        m = native_pb2.CheckRequest(id=i + 1, key=key, rule=rule
                                    ).SerializeToString()
        out += struct.pack(">BI", 0, len(m)) + m
    return out


def read_answers(sock, n):
    """n CheckResponses (id-0 notices apart) or what came before the
    connection ended."""
    buf, res = b"", []
    while len(res) < n:
        chunk = sock.recv(65536)
        if not chunk:
            break
        buf += chunk
        while len(buf) >= 5:
            ln = struct.unpack(">I", buf[1:5])[0]
            if len(buf) < 5 + ln:
                break
            r = native_pb2.CheckResponse.FromString(buf[5:5 + ln])
            buf = buf[5 + ln:]
            res.append(r)
    return res


def test_native_over_tls():
    s = Server(extra=["--tls-listeners", "grpc,listen"])
    ctx = https_ctx()
    with socket.create_connection(("127.0.0.1", s.native_port), 5) as raw:
        with ctx.wrap_socket(raw, server_hostname="127.0.0.1") as t:
            # Three pipelined in one write, then a fourth frame split over
            # two records.
            t.sendall(frames([("h", "n")] * 3))
            got = [r.code for r in read_answers(t, 3)]
            C = native_pb2.CheckResponse
            check(got == [C.OK, C.OK, C.OVER_LIMIT], "native over TLS: OK, "
                  "OK, OVER_LIMIT, got %s" % got)
            f = frames([("h", "n2")])
            t.sendall(f[:7])
            t.sendall(f[7:])
            got = [r.code for r in read_answers(t, 1)]
            check(got == [C.OK], "a frame split over two records")
    check(s.handshakes("ok", "listen") >= 1, "native handshake counted")
    # Plaintext frames on the TLS port: an ERROR notice saying so.
    with socket.create_connection(("127.0.0.1", s.native_port), 5) as raw:
        raw.sendall(frames([("h", "p")]))
        got = read_answers(raw, 1)
    check(len(got) == 1 and got[0].id == 0 and "speaks TLS" in got[0].error,
          "plaintext on the native TLS port told: %s" % got)
    check(wait_for(lambda: s.handshakes("not_tls", "listen") >= 1,
                   "native not_tls"), "counted not_tls on listen")
    check(s.stop() == 0, "stopped cleanly")
    # A silent client is closed at the handshake deadline.
    s = Server(extra=["--tls-listeners", "listen",
                      "--tls-handshake-timeout-ms", "200"])
    with socket.create_connection(("127.0.0.1", s.native_port), 5) as raw:
        raw.settimeout(5)
        t0 = time.time()
        check(raw.recv(10) == b"" and time.time() - t0 < 3,
              "silent native client closed at the deadline")
    check(wait_for(lambda: s.handshakes("handshake_timeout", "listen") >= 1,
                   "native timeout"), "native handshake_timeout counted")
    check(s.stop() == 0, "stopped cleanly")


def rl_check(port, key, *tls, server="127.0.0.1"):
    """rl-check (librlc's blocking client): (exit status, stdout,
    stderr)."""
    p = subprocess.run([RL_CHECK, "--server", "%s:%d" % (server, port),
                        "--key", key, "--limit", "1", "--window", "3600",
                        "--timeout", "3000"] + list(tls),
                       capture_output=True, text=True, timeout=30)
    return p.returncode, p.stdout, p.stderr


def test_librlc_tls():
    """librlc over TLS: rl-check (blocking) verifies the server by CA and
    by name (an address or a DNS name), says why when it cannot, and
    does mutual TLS; rl-bench (async, pipelined) gets exact decisions."""
    if RL_CHECK is None:
        print("-- skipped: no rl-check/rl-bench given")
        return
    s = Server(extra=["--tls-listeners", "grpc,listen"])
    ca = ["--tls-ca", path("ca.crt")]
    rc, out, err = rl_check(s.native_port, "c1", *ca)
    check(rc == 0 and out.startswith("OK used=1"),
          "rl-check over TLS to 127.0.0.1 allowed (%d %s %s)" % (rc, out, err))
    rc, out, err = rl_check(s.native_port, "c1", *ca, server="localhost")
    check(rc == 1 and out.startswith("OVER_LIMIT"),
          "rl-check over TLS to localhost, same counter: over (%d %s %s)"
          % (rc, out, err))
    cases = ((["--tls-ca", path("otherca.crt")], "certificate verify failed"),
             (ca + ["--tls-server-name", "wrong.example"],
              "hostname mismatch"),
             (["--tls-ca", path("nope.crt")], "No such file"),
             (["--tls-cert", path("client.crt")], "go together"),
             ([], "speaks TLS"))
    for tls, want in cases:
        rc, out, err = rl_check(s.native_port, "c2", *tls)
        check(rc == 2 and want in err,
              "rl-check %s: exit 2 saying %r (%d: %s)" % (tls, want, rc,
                                                          err.strip()))
    # Async and pipelined: 4 connections, 3,000 checks on one key with
    # limit 700: exactly 700 allowed.
    p = subprocess.run([RL_BENCH, "--server", "127.0.0.1:%d" % s.native_port,
                        "--tls-ca", path("ca.crt"), "--connections", "4",
                        "--requests", "3000", "--keys", "1", "--limit", "700",
                        "--window", "3600", "--duration", "30",
                        "--key-prefix", "tlsbench:", "--no-progress"],
                       capture_output=True, text=True, timeout=60)
    m = re.search(r"allowed (\d+), denied (\d+)", p.stdout)
    check(m is not None and (int(m.group(1)), int(m.group(2))) == (700, 2300),
          "rl-bench over TLS: 700 allowed, 2300 denied (%s %s)"
          % (m and m.groups(), p.stderr.strip()[-300:]))
    p = subprocess.run([RL_BENCH, "--server", "127.0.0.1:%d" % s.native_port,
                        "--tls-ca", path("otherca.crt"), "--connections", "2",
                        "--duration", "5", "--give-up", "0.5",
                        "--no-progress"], capture_output=True, text=True,
                       timeout=60)
    check(p.returncode == 3 and "certificate verify failed" in p.stderr,
          "rl-bench with the wrong CA: exit 3 saying why (%d %s)"
          % (p.returncode, p.stderr.strip()[-300:]))
    check(s.stop() == 0, "stopped cleanly")
    # Mutual TLS on the native listener.
    s = Server(extra=["--tls-listeners", "listen", "--tls-client-ca",
                      path("ca.crt")])
    rc, out, err = rl_check(s.native_port, "m1", *ca, "--tls-cert",
                            path("client.crt"), "--tls-key",
                            path("client.key"))
    check(rc == 0, "rl-check with a client certificate (%d %s)" % (rc, err))
    for tls, want in (([], "certificate required"),
                      (["--tls-cert", path("stranger.crt"), "--tls-key",
                        path("stranger.key")], "unknown ca")):
        rc, out, err = rl_check(s.native_port, "m2", *(ca + tls))
        check(rc == 2 and want in err,
              "mTLS rl-check %s: exit 2 saying %r (%d: %s)"
              % (tls[1:2], want, rc, err.strip()))
    check(s.stop() == 0, "stopped cleanly")


def test_grpc_over_tls():
    s = Server()
    ch = channel(s.grpc_port)
    got = [call(ch, "a").overall_code for _ in range(3)]
    check(got == [OK, OK, OVER], "gRPC over TLS: OK, OK, OVER_LIMIT "
          "(limit 2/day), got %s" % got)
    check(s.handshakes("ok") >= 1, "handshake counted ok")
    # ALPN: a client offering only http/1.1 is refused.
    e = ssl_hello(s.grpc_port, alpn=["http/1.1"])
    check(e is not None and "application protocol" in str(e).lower(),
          "ALPN without h2 refused: %s" % e)
    check(wait_for(lambda: s.handshakes("no_alpn") == 1, "no_alpn counted"),
          "no_alpn counted once")
    # Plaintext gRPC (h2c) on the TLS port: the call fails, the failure
    # is counted and logged, and the TLS channel is served meanwhile.
    plain = grpc.insecure_channel("127.0.0.1:%d" % s.grpc_port)
    st = status_of(plain, "a")
    plain.close()
    check(st == grpc.StatusCode.UNAVAILABLE,
          "h2c on the TLS port fails UNAVAILABLE: %s" % st)
    check(wait_for(lambda: s.handshakes("not_tls") >= 1, "not_tls"),
          "plaintext counted not_tls")
    check("does not speak TLS" in s.log_text(), "plaintext logged plainly")
    check(call(ch, "b").overall_code == OK, "TLS client served meanwhile")
    # An HTTP/1 request on the TLS port is answered a plain 400.
    with socket.create_connection(("127.0.0.1", s.grpc_port), 5) as raw:
        raw.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        answer = b""
        while True:
            chunk = raw.recv(4096)
            if not chunk:
                break
            answer += chunk
    check(answer.startswith(b"HTTP/1.1 400") and b"speaks TLS" in answer,
          "HTTP/1 on the TLS port told so: %r" % answer[:60])
    # The log's rate cap: a burst of plaintext clients, counted each, and
    # logged at most once a second per reason.
    before = s.handshakes("not_tls")
    lines0 = len(re.findall("reason=not_tls", s.log_text()))
    t0 = time.time()
    for _ in range(30):
        with socket.create_connection(("127.0.0.1", s.grpc_port), 5) as raw:
            raw.sendall(b"\x00\x00\x00\x00\x05hello")
            raw.recv(100)
    secs = time.time() - t0
    check(wait_for(lambda: s.handshakes("not_tls") >= before + 30,
                   "burst counted"), "30 plaintext clients counted")
    lines = len(re.findall("reason=not_tls", s.log_text())) - lines0
    check(lines <= 2 + secs, "not_tls logged %d times for 30 in %.1f s"
          % (lines, secs))

    # The next line, once the cap lets one through, says how many were
    # not logged.
    def next_line():
        with socket.create_connection(("127.0.0.1", s.grpc_port), 5) as raw:
            raw.sendall(b"\x00\x00\x00\x00\x05hello")
            raw.recv(100)
        return len(re.findall("reason=not_tls", s.log_text())) > \
            lines0 + lines
    if wait_for(next_line, "a later not_tls line"):
        last = re.findall(r"reason=not_tls .*not_logged=(\d+)",
                          s.log_text())[-1]
        check(int(last) >= 30 - lines, "the later line counts the %s not "
              "logged" % last)
    # A client that refuses our certificate (its CA is another, or the
    # name is wrong): an alert, counted peer_alert.
    e = ssl_hello(s.grpc_port, cafile="otherca.crt")
    check(isinstance(e, ssl.SSLError), "foreign CA refused by the client")
    check(wait_for(lambda: s.handshakes("peer_alert") >= 1, "peer_alert"),
          "the client's refusal counted peer_alert")
    check(re.search(r"peer=127\.0\.0\.1 reason=peer_alert", s.log_text()),
          "its log line names the client's address, though it has gone")
    check(call(ch, "b").overall_code == OK, "still served")
    ch.close()
    check(s.stop() == 0, "stopped cleanly")


def test_wrong_name():
    s = Server(extra=["--tls-cert", path("wrongname.crt"), "--tls-key",
                      path("wrongname.key")])
    e = ssl_hello(s.grpc_port)
    check(e is not None and "match" in str(e).lower(),
          "wrong name refused: %s" % e)
    ch = channel(s.grpc_port)
    check(status_of(ch, "a") == grpc.StatusCode.UNAVAILABLE,
          "grpc refuses the wrong name")
    ch.close()
    check(wait_for(lambda: s.handshakes("peer_alert") >= 1, "peer_alert"),
          "wrong name counted as the client's alert")
    check(s.stop() == 0, "stopped cleanly")


def test_mutual_tls():
    s = Server(extra=["--tls-client-ca", path("ca.crt")])
    ch = channel(s.grpc_port, cert="client")
    check(call(ch, "m").overall_code == OK, "mTLS: client certificate OK")
    cases = ((None, "no_client_certificate"), ("expired", "bad_certificate"),
             ("stranger", "bad_certificate"))
    for cert, reason in cases:
        before = s.handshakes(reason)
        bad = channel(s.grpc_port, cert=cert)
        st = status_of(bad, "m")
        bad.close()
        check(st == grpc.StatusCode.UNAVAILABLE,
              "mTLS: %s refused (%s)" % (cert, st))
        check(wait_for(lambda: s.handshakes(reason) > before, reason),
              "mTLS: %s counted %s" % (cert, reason))
    check("certificate has expired" in s.log_text(),
          "the expired certificate said in the log")
    check(call(ch, "m").overall_code == OK, "good client served meanwhile")
    ch.close()
    check(s.stop() == 0, "stopped cleanly")


def test_ca_recheck():
    """A client whose CA leaves --tls-client-ca keeps its open connection
    after a reload (the default), or loses it at its next call with
    --tls-client-ca-recheck, counted bad_certificate; a client whose CA stays
    is served on its connection either way."""
    for recheck in (False, True):
        shutil.copy(path("ca.crt"), path("live-ca.crt"))
        extra = ["--tls-client-ca", path("live-ca.crt"),
                 "--reload-settle-ms", "60000"]
        if recheck:
            extra.append("--tls-client-ca-recheck")
        s = Server(extra=extra)
        ch = channel(s.grpc_port, cert="client")
        what = "recheck" if recheck else "default"
        check(call(ch, "cr").overall_code == OK, "%s: served before" % what)
        bad = s.handshakes("bad_certificate")
        # The CA file now holds another CA only: the client's is gone.
        shutil.copy(path("otherca.crt"), path("live-ca.crt"))
        s.p.send_signal(signal.SIGHUP)
        wait_for(lambda: "tls certificates reloaded" in s.log_text(),
                 "reload")
        st = status_of(ch, "cr")
        if recheck:
            check(st == grpc.StatusCode.UNAVAILABLE,
                  "recheck: the removed CA's client loses its connection "
                  "(%s)" % st)
            check(wait_for(lambda: s.handshakes("bad_certificate") > bad,
                           "bad_certificate counted"),
                  "recheck: counted bad_certificate")
            check("no longer verifies" in s.log_text(), "recheck: logged")
        else:
            check(st == OK, "default: the open connection is kept (%s)" % st)
        ch.close()
        # A client of a CA that stays: both CAs in the file, reloaded.
        with open(path("live-ca.crt"), "wb") as f:
            f.write(read("ca.crt") + read("otherca.crt"))
        s.p.send_signal(signal.SIGHUP)
        wait_for(lambda: len(re.findall("tls certificates reloaded",
                                        s.log_text())) >= 2, "reload 2")
        ch = channel(s.grpc_port, cert="client")
        check(call(ch, "cs").overall_code == OK, "%s: served" % what)
        s.p.send_signal(signal.SIGHUP)
        wait_for(lambda: len(re.findall("tls certificates reloaded",
                                        s.log_text())) >= 3, "reload 3")
        check(call(ch, "cs").overall_code == OK,
              "%s: a client whose CA stays is served after a reload" % what)
        ch.close()
        check(s.stop() == 0, "stopped cleanly")


def test_handshake_deadline():
    s = Server(extra=["--tls-handshake-timeout-ms", "200"])
    ch = channel(s.grpc_port)
    check(call(ch, "d").overall_code == OK, "served before")
    raw = [socket.create_connection(("127.0.0.1", s.grpc_port), 5)
           for _ in range(5)]
    t0 = time.time()
    for r in raw:
        r.settimeout(5)
        check(r.recv(100) == b"", "silent connection closed by the server")
        r.close()
    check(time.time() - t0 < 3, "within the deadline and a sweep")
    check(wait_for(lambda: s.handshakes("handshake_timeout") >= 5,
                   "timeouts"), "handshake_timeout counted")
    check(call(ch, "d").overall_code == OK, "served after (the channel "
          "was idle meanwhile, not timed out)")
    ch.close()
    check(s.stop() == 0, "stopped cleanly")


def test_tls_to_plaintext_port():
    s = Server(tls=False)
    ch = channel(s.grpc_port)
    check(status_of(ch, "p") == grpc.StatusCode.UNAVAILABLE,
          "TLS to the h2c port fails")
    ch.close()
    check(s.handshakes("ok") == -1, "no TLS family without TLS")

    def on_plain(listener):
        m = re.search(r'^rl_tls_on_plaintext_port_total\{listener="%s"\} '
                      r'(\d+)$' % listener, s.metrics(), re.M)
        return int(m.group(1)) if m else -1
    check(wait_for(lambda: on_plain("grpc") >= 1, "grpc plain"),
          "TLS on the h2c port counted")
    for listener, port in (("http", s.http_port), ("listen", s.native_port),
                           ("metrics", s.metrics_port)):
        e = ssl_hello(port)
        check(isinstance(e, ssl.SSLError) and "handshake failure" in
              str(e).lower(), "TLS to plaintext %s: an alert (%s)"
              % (listener, e))
        check(wait_for(lambda: on_plain(listener) >= 1, listener),
              "TLS on plaintext %s counted" % listener)
    check("TLS sent to a plaintext port" in s.log_text(),
          "TLS on a plaintext port logged")
    plain = grpc.insecure_channel("127.0.0.1:%d" % s.grpc_port)
    check(status_of(plain, "p") == OK, "h2c still served")
    plain.close()
    check(s.stop() == 0, "stopped cleanly")


def test_bad_flags():
    cases = (
        (["--tls-cert", path("server.crt")], "--tls-cert and --tls-key"),
        (["--tls-cert", path("server.crt"), "--tls-key",
          path("client.key")], "--tls-key"),
        (["--tls-cert", path("nope.crt"), "--tls-key", path("server.key")],
         "--tls-cert: cannot read"),
        (["--tls-cert", path("server.crt"), "--tls-key", path("server.key"),
          "--tls-client-ca", path("server.key")], "--tls-client-ca"),
        (["--tls-cert", path("server.crt"), "--tls-key", path("server.key"),
          "--tls-listeners", "redis"], "--tls-listeners"),
        (["--tls-cert", path("server.crt"), "--tls-key", path("server.key"),
          "--tls-listeners", "http"], "no --http"),
        (["--tls-client-ca", path("ca.crt")], "need --tls-cert"),
    )
    key_text = read("server.key").decode()
    for extra, want in cases:
        p = subprocess.run([RL_SERVER, "--listen", "127.0.0.1:0", "--grpc",
                            "127.0.0.1:0"] + extra, capture_output=True,
                           text=True, timeout=30)
        check(p.returncode == 2 and want in p.stderr,
              "bad flags %s: exit 2 naming %s (%d: %s)"
              % (extra[-1], want, p.returncode, p.stderr.strip()))
        check("PRIVATE KEY" not in p.stderr and
              key_text.splitlines()[1] not in p.stderr,
              "no key material in the error")


try:
    make_certs()
    for t in (test_bad_flags, test_grpc_over_tls, test_https, test_wrong_name,
              test_mutual_tls, test_ca_recheck, test_handshake_deadline, test_reload,
              test_native_over_tls, test_librlc_tls,
              test_tls_to_plaintext_port):
        print("--", t.__name__, flush=True)
        t()
except Exception as e:  # a crash is a failure; the processes still stop
    import traceback
    traceback.print_exc()
    FAILS.append("exception: %s" % e)
rlt.end_run(FAILS, PROCS, TMP)
