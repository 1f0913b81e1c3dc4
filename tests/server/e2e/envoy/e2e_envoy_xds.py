#!/usr/bin/python3
"""rl-server's descriptors from a control plane (--envoy-xds), as Envoy
Gateway pushes them to envoy-ratelimit (CONFIG_TYPE=GRPC_XDS_SOTW).

Usage: e2e_envoy_xds.py RL_SERVER PROTO_DIR

A small aggregated discovery service (grpcio, stubs generated from
PROTO_DIR at run time) pushes RateLimitConfig resources; rl-server's
decisions are checked over Envoy's rate limit service (gRPC). In one run:
a configuration is ACKed and decides; a new version is ACKed and the
decisions change; an invalid one is NACKed with the loader's FILE:LINE
and the one before keeps deciding; the control plane stops and the last
configuration keeps deciding; it comes back on the same port, rl-server
reconnects and takes a new version; 40 versions pushed 10 ms apart are
installed at the pace rl-server allows, the last one winning; large
ones are decoded and built off the loop, those that come faster than
they build skipped. /metrics counts all of it. Then a
second rl-server takes a version over mutual TLS (certificates made by
`openssl` at run time), and one that does not trust the control plane's
certificate takes none."""

import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "..", "..", "support"))
import rlt  # noqa: E402

RL_SERVER, PROTO_DIR = sys.argv[1], sys.argv[2]
TMP = tempfile.mkdtemp(prefix="rl-xds-")
rlt.xds_stubs(PROTO_DIR, TMP)
import grpc  # noqa: E402
from envoy.service.ratelimit.v3 import rls_pb2, rls_pb2_grpc  # noqa: E402
from envoy.extensions.common.ratelimit.v3 import ratelimit_pb2  # noqa: E402
from ratelimit.config.ratelimit.v3 import rls_conf_pb2 as rc  # noqa: E402

from rlt_xds import ADS, TYPE, serve  # noqa: E402
OK, OVER = rls_pb2.RateLimitResponse.OK, rls_pb2.RateLimitResponse.OVER_LIMIT
DOMAIN = "xds_test"
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


def conf(name, *descs):
    return rc.RateLimitConfig(name=name, domain=DOMAIN, descriptors=descs)


def limit(key, value, unit, rpu, **kw):
    d = rc.RateLimitDescriptor(key=key, value=value, **kw)
    d.rate_limit.unit = unit
    d.rate_limit.requests_per_unit = rpu
    return d


def unlimited(key, value):
    d = rc.RateLimitDescriptor(key=key, value=value)
    d.rate_limit.unlimited = True
    return d


def metrics(port):
    body = urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port,
                                  timeout=5).read().decode()
    out = {}
    for line in body.splitlines():
        if line.startswith("rl_xds_"):
            k, v = line.rsplit(" ", 1)
            out[k] = float(v)
    return out


def openssl(*args):
    subprocess.run(["openssl"] + list(args), check=True,
                   capture_output=True, timeout=60)


def make_certs():
    """Two CAs; from the first, the control plane's certificate (for
    127.0.0.1) and rl-server's client certificate."""
    P = lambda n: os.path.join(TMP, n)  # noqa: E731
    for ca in ("ca", "otherca"):
        openssl("req", "-x509", "-newkey", "ec", "-pkeyopt",
                "ec_paramgen_curve:prime256v1", "-nodes", "-days", "2",
                "-subj", "/CN=rl xds " + ca, "-keyout", P(ca + ".key"),
                "-out", P(ca + ".crt"))
    for name, ext in (("cp", "subjectAltName=DNS:localhost,IP:127.0.0.1\n"),
                      ("client", "extendedKeyUsage=clientAuth\n")):
        with open(P(name + ".ext"), "w") as f:
            f.write(ext)
        openssl("req", "-newkey", "ec", "-pkeyopt",
                "ec_paramgen_curve:prime256v1", "-nodes", "-subj",
                "/CN=rl xds " + name, "-keyout", P(name + ".key"),
                "-out", P(name + ".csr"))
        openssl("x509", "-req", "-in", P(name + ".csr"), "-CA", P("ca.crt"),
                "-CAkey", P("ca.key"), "-CAcreateserial", "-days", "2",
                "-extfile", P(name + ".ext"), "-out", P(name + ".crt"))
    return P


def start_server(n, extra):
    ports = os.path.join(TMP, "ports-%d" % n)
    log = open(os.path.join(TMP, "server-%d.log" % n), "w")
    p = subprocess.Popen([RL_SERVER, "--listen", "127.0.0.1:0",
                          "--grpc", "127.0.0.1:0", "--metrics", "127.0.0.1:0",
                          "--port-file", ports,
                          "--envoy-xds-backoff-ms", "50",
                          "--envoy-xds-backoff-max-ms", "300"] + extra,
                         stderr=log)
    PROCS.append(p)
    return p, rlt.wait_ports(p, ports, log.name)


def cpu_ms(pid, tid=None):
    """CPU time (user and system) of a process, or of one of its threads,
    in ms: /proc's stat, fields 14 and 15, in ticks of 10 ms."""
    path = "/proc/%d/stat" % pid if tid is None else \
        "/proc/%d/task/%d/stat" % (pid, tid)
    with open(path) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) * 1000 // \
        os.sysconf("SC_CLK_TCK")


def off_loop(ads, mport, pid, codes):
    """Large configurations (100,000 descriptors, 2 MB each) pushed back to
    back: the loop (rl-server's main thread) only receives their bytes;
    decoding, YAML and the build run on the rebuild's thread, and versions
    that come faster than they build are skipped undecoded. Measured as
    CPU time, the main thread's against the whole process's, so that the
    machine's load does not count: with the decode on the loop, the main
    thread took about half (500 of 1,050 ms); now about 2 %."""
    n, big = 5, rc.RateLimitConfig(name="limits", domain=DOMAIN)
    for i in range(100000):
        d = big.descriptors.add(key="k%d" % i, value="v")
        d.rate_limit.unit = rc.HOUR
        d.rate_limit.requests_per_unit = i + 1
    blob = big.SerializeToString()
    m0 = metrics(mport)
    total0, main0 = cpu_ms(pid), cpu_ms(pid, pid)
    for i in range(n):
        ads.push_raw("big%d" % i, [blob])
    await_(lambda: ads.answer_to("nonce-big%d" % (n - 1)),
           "the ACK of the last large version", 60)
    total, main = cpu_ms(pid) - total0, cpu_ms(pid, pid) - main0
    m = metrics(mport)
    acc = m['rl_xds_updates_total{result="accepted"}'] - \
        m0['rl_xds_updates_total{result="accepted"}']
    sup = m['rl_xds_updates_total{result="superseded"}'] - \
        m0['rl_xds_updates_total{result="superseded"}']
    print("off the loop: %d versions of %d bytes: CPU %d ms, %d ms of it "
          "on the loop; %d built, %d superseded"
          % (n, len(blob), total, main, acc, sup), flush=True)
    check(main * 100 <= total * 15,
          "large versions decoded off the loop: %d of %d ms on it"
          % (main, total))
    check(acc + sup == n and sup >= 1,
          "versions that come faster than they build are skipped: "
          "%d built, %d superseded of %d" % (acc, sup, n))
    check(codes("k7", "v", 9) == [OK] * 8 + [OVER],
          "the last large version decides")


def tls_phase():
    """Mutual TLS: the control plane requires rl-server's certificate;
    rl-server verifies the control plane's against the CA and its
    address."""
    P = make_certs()

    def rd(n):
        with open(P(n), "rb") as f:
            return f.read()
    ads = ADS()
    ads.push("t1", [conf("limits", limit("k", "t", rc.HOUR, 1))])
    creds = grpc.ssl_server_credentials([(rd("cp.key"), rd("cp.crt"))],
                                        root_certificates=rd("ca.crt"),
                                        require_client_auth=True)
    xds, port = serve(ads, 0, creds)
    tls = ["--envoy-xds", "127.0.0.1:%d" % port,
           "--envoy-xds-tls-cert", P("client.crt"),
           "--envoy-xds-tls-key", P("client.key")]
    p, got = start_server(2, tls + ["--envoy-xds-tls-ca", P("ca.crt")])
    ack = await_(lambda: ads.answer_to("nonce-t1"), "the ACK of t1 over TLS")
    check(ack.version_info == "t1", "t1 ACKed over TLS: %s" % ack)
    stub = rls_pb2_grpc.RateLimitServiceStub(
        grpc.insecure_channel("127.0.0.1:%d" % got["grpc"]))
    d = ratelimit_pb2.RateLimitDescriptor(entries=[
        ratelimit_pb2.RateLimitDescriptor.Entry(key="k", value="t")])
    got_codes = [stub.ShouldRateLimit(rls_pb2.RateLimitRequest(
        domain=DOMAIN, descriptors=[d]), timeout=5).overall_code
        for _ in range(2)]
    check(got_codes == [OK, OVER], "t1 decides over TLS: %s" % got_codes)
    # Trusting another CA: the handshake fails, nothing is taken, and the
    # client keeps trying (its connections are counted as failures only).
    q, got3 = start_server(3, tls + ["--envoy-xds-tls-ca", P("otherca.crt")])
    log3 = os.path.join(TMP, "server-3.log")
    await_(lambda: open(log3).read().count('msg="xds: TLS handshake failed"')
           >= 2,
           "two refused handshakes")
    m = metrics(got3["metrics"])
    check(m.get('rl_xds_updates_total{result="accepted"}') == 0 and
          m.get("rl_xds_connected") == 0, "untrusted: nothing taken: %s" % m)
    for proc in (p, q):
        proc.send_signal(signal.SIGTERM)
        check(proc.wait(timeout=10) == 0, "rl-server exits 0 (TLS)")
    xds.stop(0)


def main():
    ads = ADS()
    ads.push("v1", [conf("limits", limit("k", "a", rc.HOUR, 2),
                         limit("tok", "", rc.MINUTE, 100))])
    xds, xds_port = serve(ads, 0)

    ports = os.path.join(TMP, "ports")
    log = open(os.path.join(TMP, "server.log"), "w")
    p = subprocess.Popen([RL_SERVER, "--listen", "127.0.0.1:0",
                          "--grpc", "127.0.0.1:0", "--metrics", "127.0.0.1:0",
                          "--port-file", ports,
                          "--envoy-xds", "127.0.0.1:%d" % xds_port,
                          "--envoy-xds-node-id", "rl-test",
                          "--envoy-xds-backoff-ms", "50",
                          "--envoy-xds-backoff-max-ms", "300"], stderr=log)
    PROCS.append(p)
    got = rlt.wait_ports(p, ports, log.name)
    stub = rls_pb2_grpc.RateLimitServiceStub(
        grpc.insecure_channel("127.0.0.1:%d" % got["grpc"]))
    mport = got["metrics"]

    def codes(key, value, n):
        d = ratelimit_pb2.RateLimitDescriptor(entries=[
            ratelimit_pb2.RateLimitDescriptor.Entry(key=key, value=value)])
        return [stub.ShouldRateLimit(rls_pb2.RateLimitRequest(
            domain=DOMAIN, descriptors=[d]), timeout=5).overall_code
            for _ in range(n)]

    # v1: ACKed with its version and nonce, under the node id given.
    ack = await_(lambda: ads.answer_to("nonce-v1"), "the ACK of v1")
    check(ack.version_info == "v1" and not ack.HasField("error_detail"),
          "v1 ACKed: %s" % ack)
    check(ack.node.id == "rl-test" and ack.type_url == TYPE,
          "node and type_url: %s" % ack)
    first = ads.requests[0]
    check(first.version_info == "" and first.response_nonce == "",
          "the first request names no version: %s" % first)
    check(codes("k", "a", 3) == [OK, OK, OVER], "v1: 2 per hour on k=a")
    check(codes("k", "b", 3) == [OK, OK, OK], "v1: k=b not limited")

    # A token budget on a domain from xDS (which cannot say how to
    # count): envoy-ratelimit's counting, the default. A check (a
    # descriptor's hits_addend 0) reads the counter; a charge past the
    # limit is counted, so the next check is OVER_LIMIT; a fresh user OK.
    def tokens(value, hits):
        d = ratelimit_pb2.RateLimitDescriptor(entries=[
            ratelimit_pb2.RateLimitDescriptor.Entry(key="tok", value=value)])
        d.hits_addend.value = hits
        r = stub.ShouldRateLimit(rls_pb2.RateLimitRequest(
            domain=DOMAIN, descriptors=[d]), timeout=5)
        return r.overall_code, r.statuses[0].limit_remaining

    while 60 - time.time() % 60 < 10:  # one minute window throughout
        time.sleep(0.1)
    got = [tokens("u1", h) for h in (0, 70, 0, 70, 0)] + [tokens("u2", 0)]
    check(got == [(OK, 100), (OK, 30), (OK, 30), (OVER, 0), (OVER, 0),
                  (OK, 100)], "xds: a token budget counted past the "
          "limit: %r" % got)

    # v2: the decisions change.
    ads.push("v2", [conf("limits", unlimited("k", "a"),
                         limit("k", "b", rc.HOUR, 1))])
    ack = await_(lambda: ads.answer_to("nonce-v2"), "the ACK of v2")
    check(ack.version_info == "v2" and not ack.HasField("error_detail"),
          "v2 ACKed: %s" % ack)
    check(codes("k", "a", 3) == [OK, OK, OK], "v2: k=a unlimited")
    check(codes("k", "b", 2) == [OK, OVER], "v2: 1 per hour on k=b")

    # v3 is invalid (a limit without a unit): NACKed with FILE:LINE, the
    # version in force named, v2 still deciding.
    bad = rc.RateLimitDescriptor(key="k", value="c")
    bad.rate_limit.requests_per_unit = 1
    ads.push("v3", [conf("broken", bad)])
    nack = await_(lambda: ads.answer_to("nonce-v3"), "the NACK of v3")
    check(nack.HasField("error_detail") and nack.version_info == "v2",
          "v3 NACKed naming v2: %s" % nack)
    check(nack.error_detail.message.startswith("xds:broken:")
          and "unit" in nack.error_detail.message,
          "NACK says FILE:LINE and why: %r" % nack.error_detail.message)
    check(codes("k", "c", 3) == [OK, OK, OK], "v3 not in force: k=c")
    check(codes("k", "b", 1) == [OVER], "v2 still in force: k=b")
    check(codes("k", "a", 3) == [OK, OK, OK], "v2 still in force: k=a")
    m = metrics(mport)
    check(m.get('rl_xds_updates_total{result="accepted"}') == 2 and
          m.get('rl_xds_updates_total{result="rejected"}') == 1 and
          m.get("rl_xds_connected") == 1, "metrics after v3: %s" % m)

    # The control plane goes away: the last good configuration decides.
    xds.stop(0).wait()
    await_(lambda: metrics(mport).get("rl_xds_connected") == 0,
           "rl-server to see the control plane gone")
    check(codes("k", "b", 1) == [OVER], "v2 decides with no control plane")
    check(codes("k", "a", 2) == [OK, OK], "v2 k=a with no control plane")

    # It comes back on the same port with v4: rl-server reconnects, names
    # v2 as in force, and takes v4.
    ads2 = ADS()
    ads2.push("v4", [conf("limits", limit("k", "d", rc.HOUR, 1))])
    xds, again = serve(ads2, xds_port)
    check(again == xds_port, "the control plane back on its port")
    ack = await_(lambda: ads2.answer_to("nonce-v4"), "the ACK of v4")
    check(ads2.requests[0].version_info == "v2",
          "reconnected naming v2: %s" % ads2.requests[0])
    check(ack.version_info == "v4", "v4 ACKed: %s" % ack)
    check(codes("k", "d", 2) == [OK, OVER], "v4: 1 per hour on k=d")
    check(codes("k", "b", 2) == [OK, OK], "v4: k=b no longer limited")
    m = metrics(mport)
    check(m.get('rl_xds_updates_total{result="accepted"}') == 3 and
          m.get('rl_xds_connections_total{event="connected"}') == 2 and
          m.get('rl_xds_connections_total{event="lost"}') >= 1,
          "metrics after v4: %s" % m)

    burst(ads2, mport, codes)
    off_loop(ads2, mport, p.pid, codes)

    p.send_signal(signal.SIGTERM)
    check(p.wait(timeout=10) == 0, "rl-server exits 0 on SIGTERM")
    xds.stop(0)
    tls_phase()


def burst(ads, mport, codes):
    """Versions pushed 10 ms apart, faster than rl-server installs them
    (builds start at least 250 ms apart): the last one wins and is ACKed,
    those replaced before their build are counted as superseded and
    answered neither way, and no more are installed than the pace
    allows."""
    n = 40
    m0 = metrics(mport)
    t0 = time.time()
    # 10 ms apart, so the burst outlasts the gap and several builds run.
    for i in range(n):
        ads.push("b%d" % i, [conf("limits", limit("k", "b%d" % i, rc.HOUR,
                                                  1))])
        time.sleep(0.01)
    last = "nonce-b%d" % (n - 1)
    ack = await_(lambda: ads.answer_to(last), "the ACK of the last version")
    took = time.time() - t0
    check(ack.version_info == "b%d" % (n - 1) and
          not ack.HasField("error_detail"), "the last version ACKed: %s" % ack)
    check(codes("k", "b%d" % (n - 1), 2) == [OK, OVER],
          "the last version decides")
    m = metrics(mport)
    acc = m['rl_xds_updates_total{result="accepted"}'] - \
        m0['rl_xds_updates_total{result="accepted"}']
    sup = m.get('rl_xds_updates_total{result="superseded"}', 0) - \
        m0.get('rl_xds_updates_total{result="superseded"}', 0)
    answered = [i for i in range(n) if ads.answer_to("nonce-b%d" % i)]
    print("burst: %d versions in %.3f s: %d installed, %d superseded"
          % (n, took, acc, sup), flush=True)
    # One build at once, then one each 250 ms: at most 1 + took / 0.25.
    check(2 <= acc <= 1 + took / 0.25 + 1e-9,
          "installs paced: %d in %.3f s" % (acc, took))
    check(acc + sup == n and len(answered) == acc,
          "each version installed and ACKed, or superseded and not "
          "answered: %d + %d of %d, %d answered" % (acc, sup, n,
                                                    len(answered)))


try:
    main()
except Exception as e:  # noqa: BLE001
    FAILS.append(repr(e))
    print("FAIL:", repr(e), flush=True)
finally:
    for proc in PROCS:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
if FAILS:
    print(rlt.tail(os.path.join(TMP, "server.log"), 30))
    print("%d failure(s)" % len(FAILS))
    sys.exit(1)
print("ok")
