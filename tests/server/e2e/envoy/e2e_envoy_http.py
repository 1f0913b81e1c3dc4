#!/usr/bin/python3
"""envoy-ratelimit's HTTP and debug listeners (--envoy-http, --debug-http),
as Envoy Gateway probes them and operators read them.

Usage: e2e_envoy_http.py RL_SERVER PROTO_DIR REDIS_SERVER

  - GET /healthcheck: 200 "OK" on a healthy server; 500 while draining
    (SIGTERM with --drain-ms), and with the store down under
    --fail-closed; 200 under --fail-open with Redis down;
  - POST /json: the answer of the gRPC call for the same request, in
    protobuf's JSON mapping (parsed strictly by protobuf's json_format):
    OK, then OVER_LIMIT as 429 for a limit of 2; bad JSON and a refused
    request 400, a body over --max-frame 413, a chunked body 411; a
    client that stalls mid-body, clients that send garbage and half
    bodies, none of which keeps a bystander's calls from exact answers;
  - GET /rlconfig: a file's descriptors in envoy-ratelimit's Dump() form,
    then a configuration pushed over xDS by a control plane in the test.
"""

import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "..", "..", "support"))
import rlt  # noqa: E402

RL_SERVER, PROTO_DIR, REDIS = sys.argv[1], sys.argv[2], sys.argv[3]
TMP = tempfile.mkdtemp(prefix="rl-ehttp-")
rlt.xds_stubs(PROTO_DIR, TMP)
import grpc  # noqa: E402
from rlt_xds import ADS, serve  # noqa: E402
from google.protobuf import json_format  # noqa: E402
from envoy.service.ratelimit.v3 import rls_pb2, rls_pb2_grpc  # noqa: E402
from envoy.extensions.common.ratelimit.v3 import ratelimit_pb2  # noqa: E402
from ratelimit.config.ratelimit.v3 import rls_conf_pb2 as rc  # noqa: E402

FAILS, PROCS = [], []
CONF = os.path.join(TMP, "rl.yaml")
with open(CONF, "w") as f:
    f.write("""domain: web
descriptors:
  - key: user
    value: alice
    rate_limit: {unit: hour, requests_per_unit: 2, name: alice-limit}
  - key: user
    descriptors:
      - key: path
        rate_limit: {unit: minute, requests_per_unit: 100}
        shadow_mode: true
  - key: bystander
    rate_limit: {unit: hour, requests_per_unit: 1000000}
  - key: free
    rate_limit: {unlimited: true}
""")


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


def start(name, extra):
    ports = os.path.join(TMP, "ports-" + name)
    log = open(os.path.join(TMP, name + ".log"), "w")
    p = subprocess.Popen([RL_SERVER, "--listen", "127.0.0.1:0",
                          "--grpc", "127.0.0.1:0",
                          "--envoy-http", "127.0.0.1:0",
                          "--debug-http", "127.0.0.1:0",
                          "--metrics", "127.0.0.1:0",
                          "--port-file", ports] + extra, stderr=log)
    PROCS.append(p)
    return p, rlt.wait_ports(p, ports, log.name)


def get(port, path, method="GET", body=None, headers=None):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    c.request(method, path, body=body, headers=headers or {})
    r = c.getresponse()
    out = (r.status, r.getheader("Content-Type"), r.read())
    c.close()
    return out


def health(port):
    return get(port, "/healthcheck")[0]


def req_json(domain, entries, **kw):
    d = {"entries": [{"key": k, "value": v} for k, v in entries]}
    d.update(kw)
    return json.dumps({"domain": domain, "descriptors": [d]})


def grpc_call(port, domain, entries):
    stub = rls_pb2_grpc.RateLimitServiceStub(
        grpc.insecure_channel("127.0.0.1:%d" % port))
    d = ratelimit_pb2.RateLimitDescriptor(entries=[
        ratelimit_pb2.RateLimitDescriptor.Entry(key=k, value=v)
        for k, v in entries])
    return stub.ShouldRateLimit(rls_pb2.RateLimitRequest(
        domain=domain, descriptors=[d]), timeout=5)


def parse(body):
    """A /json answer, parsed as strictly as protobuf's JSON reader does
    (an unknown name or a wrong type fails)."""
    return json_format.Parse(body, rls_pb2.RateLimitResponse())


def phase_json():
    """Redis, --fail-closed: /healthcheck, /json against gRPC, bad input,
    hostile clients, then Redis killed."""
    rport, redis = rlt.start_redis(TMP, redis=REDIS, procs=PROCS)
    p, got = start("json", ["--redis", "127.0.0.1:%d" % rport,
                            "--fail-closed", "--max-frame", "4096",
                            "--envoy-config", CONF])
    eh = got["envoy-http"]
    # 500 until the store has answered once (its switches read), as the
    # reference's Redis component starts unhealthy.
    await_(lambda: health(eh) == 200, "healthcheck 200 on a healthy server")
    st, ct, body = get(eh, "/healthcheck")
    check(body == b"OK", "healthcheck body OK: %r" % body)

    # OK, OK, then OVER_LIMIT as 429, in the mapping gRPC's answer has.
    codes = []
    for i in range(3):
        st, ct, body = get(eh, "/json", "POST",
                           req_json("web", [("user", "alice")]))
        codes.append(st)
        check(ct == "application/json", "json content type: %s" % ct)
        r = parse(body)
        want = rls_pb2.RateLimitResponse.OK if i < 2 else \
            rls_pb2.RateLimitResponse.OVER_LIMIT
        check(r.overall_code == want and r.statuses[0].code == want,
              "call %d: %s" % (i, body))
        check(r.statuses[0].current_limit.requests_per_unit == 2 and
              r.statuses[0].current_limit.unit ==
              rls_pb2.RateLimitResponse.RateLimit.HOUR and
              r.statuses[0].current_limit.name == "alice-limit",
              "current limit: %s" % body)
        check(r.statuses[0].limit_remaining == (1 if i == 0 else 0),
              "remaining after call %d: %s" % (i, body))
        check(r.statuses[0].duration_until_reset.seconds > 0,
              "reset: %s" % body)
    check(codes == [200, 200, 429], "200, 200, 429: %s" % codes)
    # gRPC sees the same counter and says the same, field for field.
    g = grpc_call(got["grpc"], "web", [("user", "alice")])
    st, ct, body = get(eh, "/json", "POST",
                       req_json("web", [("user", "alice")]))
    j = parse(body)
    j.statuses[0].duration_until_reset.Clear()
    g.statuses[0].duration_until_reset.Clear()
    check(j == g, "the JSON answer is the gRPC answer:\n%s\n%s" % (j, g))
    # The exact bytes protojson writes for an unknown domain.
    st, ct, body = get(eh, "/json", "POST", req_json("nowhere", [("a", "b")]))
    check(st == 200 and body == b'{"overallCode":"OK","statuses":'
          b'[{"code":"OK"}]}', "unknown domain: %d %r" % (st, body))
    # The descriptor's own hits_addend, as a string, counts 5 at once.
    st, ct, body = get(eh, "/json", "POST",
                       req_json("web", [("bystander", "x")],
                                hits_addend="5"))
    r = parse(body)
    check(st == 200 and r.statuses[0].limit_remaining == 1000000 - 5,
          "hits_addend 5: %d %s" % (st, body))

    # Bad input: each a clear 4xx, the server unharmed.
    for body, want, say in [
            ("", 400, "empty body"),
            ("}", 400, "expected a RateLimitRequest"),
            ('{"domain":"web"}', 400, "descriptor list must not be empty"),
            ('{"domain":"web","descriptors":[{"entries":[{"key":"user",'
             '"value":"alice"}]}],"bogus":1}', 400, "unknown field"),
            ('{"domain":"web","domain":"x"}', 400, "duplicate field"),
            ('{"domain":"web","hitsAddend":1.5}', 400, "integer"),
            ('{"domain":"\\ud800"}', 400, "surrogate"),
            ("{" * 3000, 400, "expected a string"),
            ('{"domain":"%s"}' % ("x" * 5000), 413, "over")]:
        st, ct, text = get(eh, "/json", "POST", body.encode())
        check(st == want and say.encode() in text,
              "bad body %r: %d %r" % (body[:40], st, text))
    st, ct, text = get(eh, "/json", "POST", iter([b'{"domain":"x"}']),
                       headers={"Transfer-Encoding": "chunked"})
    check(st == 411, "chunked: %d %r" % (st, text))
    check(get(eh, "/nothing")[0] == 404, "other paths 404")

    # Hostile clients beside a bystander: one stalls mid-body (closed at
    # the deadline), many send garbage or half bodies; the bystander's
    # calls are all answered, and exactly counted.
    stop = threading.Event()

    def hostile(kind):
        while not stop.is_set():
            try:
                s = socket.create_connection(("127.0.0.1", eh), 2)
                if kind == 0:
                    s.sendall(b"POST /json HTTP/1.1\r\nContent-Length: 4000"
                              b"\r\n\r\n{\"domain\":")
                    s.settimeout(5)
                    s.recv(100)  # held until the deadline closes it
                elif kind == 1:
                    s.sendall(b"POST /json HTTP/1.1\r\nContent-Length: 9\r\n"
                              b"\r\n\xff\xfe{[\"\\u\r\n" * 20)
                    s.settimeout(2)
                    while s.recv(4096):
                        pass
                else:
                    s.sendall(b"POST /json HTTP/1.1\r\nContent-Length: "
                              b"99999999999999999999\r\n\r\n")
                    s.settimeout(2)
                    s.recv(4096)
                s.close()
            except OSError:
                pass
    threads = [threading.Thread(target=hostile, args=(k % 3,), daemon=True)
               for k in range(30)]
    for t in threads:
        t.start()
    c = http.client.HTTPConnection("127.0.0.1", eh, timeout=10)
    seen = []
    for i in range(200):
        c.request("POST", "/json", body=req_json("web",
                                                 [("bystander", "y")]))
        r = c.getresponse()
        seen.append((r.status, parse(r.read()).statuses[0].limit_remaining))
    stop.set()
    for t in threads:
        t.join(10)
    check(seen == [(200, 1000000 - 1 - i) for i in range(200)],
          "the bystander answered exactly through the attack: %s" % seen[:5])
    page = get(got["metrics"], "/metrics")[2].decode()
    bad = [ln for ln in page.splitlines() if ln.startswith(
        'rl_envoy_http_requests_total{path="/json",result="bad_json"}')]
    check(bad and float(bad[0].split()[-1]) >= 30,
          "the attack was made (its bad bodies counted): %s" % bad)
    print("attack: %s" % bad, flush=True)

    # Redis killed: failing closed, the server takes no work.
    redis.kill()
    redis.wait()
    await_(lambda: health(eh) == 500, "/healthcheck 500, store down, "
           "--fail-closed")
    p.send_signal(signal.SIGTERM)
    check(p.wait(timeout=15) == 0, "exits 0 (json phase)")


def phase_fail_open():
    """--fail-open (the default) with Redis down: still takes work."""
    rport, redis = rlt.start_redis(TMP, redis=REDIS, procs=PROCS)
    p, got = start("open", ["--redis", "127.0.0.1:%d" % rport,
                            "--envoy-config", CONF])
    eh = got["envoy-http"]
    await_(lambda: health(eh) == 200, "healthcheck 200 (fail-open, Redis up)")
    redis.kill()
    redis.wait()
    # /healthz (--metrics) says the store is gone; /healthcheck stays 200.
    await_(lambda: get(got["metrics"], "/healthz")[0] == 503,
           "the store seen down")
    check(health(eh) == 200, "healthcheck 200 under --fail-open, Redis down")
    st, ct, body = get(eh, "/json", "POST",
                       req_json("web", [("user", "alice")]))
    check(st == 200, "fail-open /json answers OK: %d %s" % (st, body))
    p.send_signal(signal.SIGTERM)
    check(p.wait(timeout=15) == 0, "exits 0 (fail-open phase)")


def phase_drain_and_rlconfig():
    """Memory store: /rlconfig of the file; SIGTERM with --drain-ms: 500
    while draining, the debug listener still up."""
    p, got = start("drain", ["--drain-ms", "60000", "--envoy-config", CONF])
    eh, dh = got["envoy-http"], got["debug-http"]
    st, ct, body = get(dh, "/rlconfig")
    lines = sorted(body.decode().splitlines())
    want = sorted([
        "web.user_alice: unit=HOUR requests_per_unit=2, shadow_mode: false, "
        "quota_mode: false",
        "web.user.path: unit=MINUTE requests_per_unit=100, shadow_mode: "
        "true, quota_mode: false",
        "web.bystander: unit=HOUR requests_per_unit=1000000, shadow_mode: "
        "false, quota_mode: false",
        "web.free: unit=UNKNOWN requests_per_unit=0, shadow_mode: false, "
        "quota_mode: false, unlimited: true"])
    check(st == 200 and lines == want, "/rlconfig of the file:\n%s" % body)
    check(b"/rlconfig" in get(dh, "/")[2], "the debug root lists /rlconfig")
    check(get(dh, "/debug/pprof/")[0] == 404, "no pprof")
    check(health(eh) == 200, "healthcheck 200 before the drain")
    p.send_signal(signal.SIGTERM)
    await_(lambda: health(eh) == 500, "/healthcheck 500 while draining")
    st, ct, body = get(eh, "/json", "POST",
                       req_json("web", [("user", "alice")]))
    check(st == 200, "/json still served while draining: %d" % st)
    check(get(dh, "/rlconfig")[0] == 200, "/rlconfig while draining")
    p.send_signal(signal.SIGKILL)
    p.wait()


def phase_xds():
    """A configuration from a control plane, read back at /rlconfig."""
    ads = ADS()
    server, xport = serve(ads, 0)
    p, got = start("xds", ["--envoy-xds", "127.0.0.1:%d" % xport,
                           "--envoy-xds-backoff-ms", "50",
                           "--envoy-xds-backoff-max-ms", "300"])
    dh = got["debug-http"]
    check(get(dh, "/rlconfig") == (200, "text/plain; charset=utf-8", b""),
          "/rlconfig empty before a configuration")
    c = rc.RateLimitConfig(name="eg", domain="gateway")
    d = c.descriptors.add(key="generic_key", value="route-a")
    n = d.descriptors.add(key="x-user-id")
    n.rate_limit.unit = rc.MINUTE
    n.rate_limit.requests_per_unit = 7
    ads.push("v1", [c])
    await_(lambda: ads.acked("nonce-v1"), "the ACK of v1")
    st, ct, body = get(dh, "/rlconfig")
    check(body == b"gateway.generic_key_route-a.x-user-id: unit=MINUTE "
          b"requests_per_unit=7, shadow_mode: false, quota_mode: false\n",
          "/rlconfig shows the xDS configuration: %r" % body)
    # /json decides under it, as gRPC does.
    st, ct, body = get(got["envoy-http"], "/json", "POST", json.dumps({
        "domain": "gateway", "descriptors": [{"entries": [
            {"key": "generic_key", "value": "route-a"},
            {"key": "x-user-id", "value": "u1"}]}]}))
    r = parse(body)
    check(st == 200 and r.statuses[0].current_limit.requests_per_unit == 7
          and r.statuses[0].limit_remaining == 6, "xDS /json: %s" % body)
    p.send_signal(signal.SIGTERM)
    check(p.wait(timeout=15) == 0, "exits 0 (xds phase)")
    server.stop(0)


try:
    phase_json()
    phase_fail_open()
    phase_drain_and_rlconfig()
    phase_xds()
    # The flags need --grpc, said in one line, exit 2.
    r = subprocess.run([RL_SERVER, "--envoy-http", "127.0.0.1:0"],
                       capture_output=True, text=True, timeout=10)
    check(r.returncode == 2 and "--envoy-http needs --grpc" in r.stderr,
          "--envoy-http without --grpc: %d %r" % (r.returncode, r.stderr))
except Exception as e:  # noqa: BLE001
    FAILS.append(repr(e))
    print("FAIL:", repr(e), flush=True)
    for name in ("json", "open", "drain", "xds"):
        print(name, rlt.tail(os.path.join(TMP, name + ".log"), 10))
rlt.end_run(FAILS, PROCS, TMP)
