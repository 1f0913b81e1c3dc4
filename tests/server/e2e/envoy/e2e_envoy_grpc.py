#!/usr/bin/python3
"""Envoy's rate limit service, called by a real gRPC client (grpcio).

Usage: e2e_envoy_grpc.py RL_SERVER PROTO_DIR FIXTURE_DIR [redis-server]

Stubs are generated from the repository's .proto files into a temporary
directory with grpc_tools.protoc. rl-server runs with envoy-ratelimit's
own README examples as --envoy-config files and the test asserts the
decisions and statuses that README documents, then rl-server's
extensions, the errors, reload, /metrics and the drain. With a
redis-server path as the last argument the same runs against Redis."""

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "..", "..", "support"))
import rlt  # noqa: E402

RL_SERVER, PROTO_DIR, FIX = sys.argv[1], sys.argv[2], sys.argv[3]
REDIS = sys.argv[4] if len(sys.argv) > 4 else None
# RL_ENVOY_STORE: the store flags to run the same against instead (e.g.
# "--redis-cluster 127.0.0.1:7001,127.0.0.1:7004" from redis_cluster.sh,
# which starts that cluster).
STORE_ARGS = os.environ.get("RL_ENVOY_STORE", "").split()
# RL_ENVOY_REDIS_MODULE: the ratelimit module (ratelimit.so) to load into
# that redis-server, so the same runs go through RL.BATCH.
MODULE = os.environ.get("RL_ENVOY_REDIS_MODULE")
TMP = tempfile.mkdtemp(prefix="rl-envoy-")
PROCS = []


rlt.envoy_stubs(PROTO_DIR, TMP, native=True)
import grpc  # noqa: E402
from envoy.service.ratelimit.v3 import rls_pb2, rls_pb2_grpc  # noqa: E402
from envoy.extensions.common.ratelimit.v3 import ratelimit_pb2  # noqa: E402
import ratelimit_pb2 as native_pb2  # noqa: E402
import struct  # noqa: E402
import threading  # noqa: E402

OK, OVER = rls_pb2.RateLimitResponse.OK, rls_pb2.RateLimitResponse.OVER_LIMIT
RL = rls_pb2.RateLimitResponse.RateLimit
FAILS = []


def check(cond, what):
    if not cond:
        FAILS.append(what)
        print("FAIL:", what, flush=True)


def D(*kv, override=None, hits=None):
    d = ratelimit_pb2.RateLimitDescriptor(entries=[
        ratelimit_pb2.RateLimitDescriptor.Entry(key=k, value=v)
        for k, v in kv])
    if override:
        d.limit.requests_per_unit, d.limit.unit = override
    if hits is not None:
        d.hits_addend.value = hits
    return d


def native_checks(port, rule, key, n, limit=0, window=0):
    """n CheckRequests on the native protocol, pipelined on one
    connection (naming rule, or with an inline limit per window seconds);
    returns the CheckResponses."""
    sock = socket.create_connection(("127.0.0.1", port), 5)
    out = b""
    for i in range(n):
        m = native_pb2.CheckRequest(id=i + 1, key=key, rule=rule,
                                    limit=limit, window_seconds=window
                                    ).SerializeToString()
        out += struct.pack(">BI", 0, len(m)) + m
    sock.sendall(out)
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
            if r.id != 0:
                res.append(r)
    sock.close()
    return res


class Server:
    started = 0

    def __init__(self, envoy_files, extra=()):
        Server.started += 1
        n = Server.started
        ports = os.path.join(TMP, "server-%d.ports" % n)
        # Every listener on port 0: the server says which ports it bound.
        args = [RL_SERVER, "--listen", "127.0.0.1:0",
                "--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0",
                "--metrics", "127.0.0.1:0", "--port-file", ports,
                "--config", os.path.join(FIX, "rules.yaml")]
        for f in envoy_files:
            args += ["--envoy-config", f]
        # A loaded machine may stretch a Redis round trip past the default
        # 200 ms; the server would then fail open, and the exact counts
        # asserted here (mixed: 40 of 360) would gain what it allowed
        # uncounted (44 once, at a load average of 9). No scenario here
        # is about the timeout.
        if STORE_ARGS:
            args += STORE_ARGS + ["--prefix", "rl%d:" % n,
                                  "--redis-timeout-ms", "5000"]
        elif REDIS_PORT:
            args += ["--redis", "127.0.0.1:%d" % REDIS_PORT,
                     "--prefix", "rl%d:" % n, "--redis-timeout-ms", "5000"]
        self.log = open(os.path.join(TMP, "server-%d.log" % n), "w")
        args += rlt.server_args()
        self.p = subprocess.Popen(args + list(extra), stderr=self.log)
        PROCS.append(self.p)
        got = rlt.wait_ports(self.p, ports, self.log.name)
        self.native_port, self.http_port = got["listen"], got["http"]
        self.grpc_port, self.metrics_port = got["grpc"], got["metrics"]
        # Decisions before the store is up get the fail mode: wait for
        # /healthz 200, as a load balancer would.
        end = time.time() + 10
        while True:
            try:
                urllib.request.urlopen("http://127.0.0.1:%d/healthz"
                                       % self.metrics_port, timeout=2)
                break
            except OSError:
                if time.time() > end or self.p.poll() is not None:
                    raise RuntimeError("rl-server never healthy; log in %s"
                                       % self.log.name)
                time.sleep(0.02)
        self.ch = grpc.insecure_channel("127.0.0.1:%d" % self.grpc_port)
        self.stub = rls_pb2_grpc.RateLimitServiceStub(self.ch)

    def call(self, domain, *descs, hits=0):
        return self.stub.ShouldRateLimit(rls_pb2.RateLimitRequest(
            domain=domain, descriptors=list(descs), hits_addend=hits),
            timeout=5)

    def status_of(self, domain, *descs, **kw):
        try:
            self.call(domain, *descs, **kw)
            return grpc.StatusCode.OK
        except grpc.RpcError as e:
            return e.code()

    def metrics(self):
        return urllib.request.urlopen(
            "http://127.0.0.1:%d/metrics" % self.metrics_port,
            timeout=5).read().decode()

    def stop(self):
        self.ch.close()
        self.p.send_signal(signal.SIGTERM)
        rc = self.p.wait(20)
        self.log.close()
        return rc


def in_one_window(fn, reset_of, tries=5):
    """Runs fn() (a sequence of calls) until it ran inside one window: the
    window's remaining time never grew between its first and last answer.
    Returns fn's result."""
    for _ in range(tries):
        res = fn()
        resets = [reset_of(r) for r in res]
        if all(a >= b for a, b in zip(resets, resets[1:])):
            return res
    raise RuntimeError("window edge crossed on every try")


def reset_ms(resp, i=0):
    d = resp.statuses[i].duration_until_reset
    return d.seconds * 1000 + d.nanos // 1000000


def readme_examples(s):
    # Example 1: 500/s per database value; other values are not limited.
    r = s.call("mongo_cps", D(("database", "users")),
               D(("database", "default")), D(("database", "other")))
    check(r.overall_code == OK, "ex1 overall OK")
    for i in (0, 1):
        st = r.statuses[i]
        check(st.code == OK and st.current_limit.requests_per_unit == 500
              and st.current_limit.unit == RL.SECOND,
              "ex1 descriptor %d 500/second" % i)
    check(r.statuses[2].code == OK and
          not r.statuses[2].HasField("current_limit"),
          "ex1 unmatched value allowed without a limit")

    # In a second where nothing was counted yet 500 fit and the 501st does
    # not (a refused call consumes nothing, so a try that met counts of
    # the call above simply goes again).
    def burst():
        for _ in range(20):
            a = s.call("mongo_cps", D(("database", "users")), hits=500)
            if a.overall_code == OK:
                return [a, s.call("mongo_cps", D(("database", "users")))]
            time.sleep(0.1)
        raise RuntimeError("no fresh second")
    res = in_one_window(burst, reset_ms)
    check(res[1].overall_code == OVER and res[1].statuses[0].code == OVER,
          "ex1 the 501st request in a second is over the limit")
    check(res[1].statuses[0].limit_remaining == 0, "ex1 remaining 0")

    # Example 2: 5 marketing messages a day per number, 100 a day per
    # number overall; both descriptors in one call.
    both = (D(("message_type", "marketing"), ("to_number", "2061111111")),
            D(("to_number", "2061111111")))
    rs = [s.call("messaging", *both) for _ in range(6)]
    check(all(r.overall_code == OK for r in rs[:5]), "ex2 five allowed")
    check(rs[5].overall_code == OVER and rs[5].statuses[0].code == OVER and
          rs[5].statuses[1].code == OK, "ex2 the sixth marketing message "
          "is over, the per-number limit is not")
    check(rs[0].statuses[0].current_limit.unit == RL.DAY and
          rs[0].statuses[0].current_limit.requests_per_unit == 5 and
          rs[0].statuses[1].current_limit.requests_per_unit == 100,
          "ex2 limits 5/day and 100/day")
    check(rs[5].statuses[1].limit_remaining == 94,
          "ex2 per-number remaining 94 after six")
    r = s.call("messaging", D(("message_type", "marketing"),
                              ("to_number", "2062222222")))
    check(r.overall_code == OK and r.statuses[0].limit_remaining == 4,
          "ex2 another number has its own 5")

    # Example 3: key/value preferred over key; 0 refuses everything.
    r = s.call("edge_proxy_per_ip", D(("remote_address", "50.0.0.5")))
    check(r.overall_code == OVER and
          r.statuses[0].current_limit.requests_per_unit == 0,
          "ex3 blacklisted address refused")
    r = s.call("edge_proxy_per_ip", D(("remote_address", "50.0.0.1")))
    check(r.overall_code == OK and
          r.statuses[0].current_limit.requests_per_unit == 10,
          "ex3 other address 10/s")

    # Example 4: levels must match the number of entries.
    two = D(("key", "value"), ("subkey", "subvalue"))
    r = s.call("example4", two)
    check(r.statuses[0].code == OK and
          not r.statuses[0].HasField("current_limit"),
          "ex4 two entries do not match a one-level config")
    r = s.call("example4b", two)
    check(r.statuses[0].current_limit.requests_per_unit == 300,
          "ex4 two entries match the nested config")

    # Example 5: unlimited answers OK with LimitRemaining MaxUint32.
    r = s.call("internal", D(("ldap", "x")), D(("azure", "y")))
    check(r.statuses[0].code == OK and
          r.statuses[0].limit_remaining == 4294967295 and
          not r.statuses[0].HasField("current_limit"),
          "ex5 unlimited")
    check(r.statuses[1].current_limit.requests_per_unit == 100 and
          r.statuses[1].current_limit.unit == RL.MINUTE, "ex5 azure 100/m")

    # Example 6: shadow mode never refuses; user-b is limited to 20/s.
    res = in_one_window(
        lambda: [s.call("example6", D(("service", "auth"),
                                      ("user", "user-a")), hits=10),
                 s.call("example6", D(("service", "auth"),
                                      ("user", "user-a")))],
        reset_ms)
    check(res[1].overall_code == OK, "ex6 shadow mode allows the 11th")
    res = in_one_window(
        lambda: [s.call("example6", D(("service", "auth"),
                                      ("user", "user-b")), hits=20),
                 s.call("example6", D(("service", "auth"),
                                      ("user", "user-b")))],
        reset_ms)
    check(res[1].overall_code == OVER, "ex6 user-b refused at 21")

    # Example 9: a wildcard value matches by prefix, each value counted
    # on its own.
    r = s.call("example9", D(("key1", "value1")), D(("key1", "value2")),
               D(("key1", "other")))
    check(r.statuses[0].current_limit.requests_per_unit == 20 and
          r.statuses[1].current_limit.requests_per_unit == 20 and
          r.statuses[0].limit_remaining == 19 and
          r.statuses[1].limit_remaining == 19 and
          not r.statuses[2].HasField("current_limit"),
          "ex9 wildcard value*")

    # The "rl" domain: one request a minute per cluster pair.
    pair = D(("source_cluster", "proxy"), ("destination_cluster", "bar"))
    a, b = s.call("rl", pair), s.call("rl", pair)
    check(a.overall_code == OK and b.overall_code == OVER,
          "rl: second call a minute refused")
    check(b.statuses[0].current_limit.unit == RL.MINUTE and
          b.statuses[0].duration_until_reset.seconds <= 60,
          "rl: minute unit, reset within a minute")
    r = s.call("rl", D(("source_cluster", "proxy"),
                       ("destination_cluster", "foo")))
    check(r.overall_code == OK and not r.statuses[0].HasField(
        "current_limit"), "rl: unconfigured pair not limited")
    r = s.call("no_such_domain", D(("a", "b")))
    check(r.overall_code == OK, "unknown domain allowed")


def extensions(s):
    # window: 90s, 2 per window; refusals consume nothing; headers.
    rs = [s.call("ext", D(("client", "c1"))) for _ in range(4)]
    check([r.overall_code for r in rs] == [OK, OK, OVER, OVER],
          "ext: 2 per 90 s")
    st = rs[2].statuses[0]
    check(st.current_limit.name == "90s" and
          st.current_limit.unit == RL.UNKNOWN, "ext: custom window named")
    h = {x.key: x.value for x in rs[2].response_headers_to_add}
    check("Retry-After" in h and "RateLimit" in h and
          "RateLimit-Policy" in h and h.get("X-RateLimit-Limit") == "2",
          "ext: rate-limit headers on a refusal: %r" % h)
    check(h.get("RateLimit-Policy") == '"envoy:ext";q=2;w=90',
          "ext: policy header")
    h0 = {x.key: x.value for x in rs[0].response_headers_to_add}
    check("Retry-After" not in h0 and h0.get("X-RateLimit-Remaining") ==
          "1", "ext: headers when allowed")
    # rule: tenant_api (3/1m, 100/1h from the rules file).
    rs = [s.call("ext", D(("tenant", "t1"))) for _ in range(4)]
    check([r.overall_code for r in rs] == [OK, OK, OK, OVER],
          "ext: rules-file rule 3/1m")
    check(rs[3].statuses[0].current_limit.name == "tenant_api",
          "ext: rule named in current_limit")
    # algorithm: gcra, 1/s with a burst of 3: three at once, the fourth
    # refused, its limit the burst. Counted envoy-ratelimit's way (the
    # default), the refused one is counted too: 4 used, Retry-After 2 s
    # (two must drip back for one more to fit), full again within 4 s.
    rs = [s.call("ext", D(("burst", "b1"))) for _ in range(4)]
    check([r.overall_code for r in rs] == [OK, OK, OK, OVER],
          "ext: gcra burst of 3")
    h = {x.key: x.value for x in rs[3].response_headers_to_add}
    check(h.get("Retry-After") == "2" and h.get("X-RateLimit-Limit") == "3"
          and h.get("X-RateLimit-Used") == "4",
          "ext: gcra headers: %r" % h)
    check(0 < rs[3].statuses[0].duration_until_reset.seconds <= 4,
          "ext: gcra reset: back to a full bucket within 4 s")
    # algorithm: sliding-window-counter, 2 per hour.
    rs = [s.call("ext", D(("swc", "s1"))) for _ in range(3)]
    check([r.overall_code for r in rs] == [OK, OK, OVER],
          "ext: sliding-window-counter 2/h")
    # The request's own limit (RateLimitOverride) replaces the config's.
    rs = [s.call("mongo_cps", D(("database", "ovr"),
                                override=(1, RL.HOUR))) for _ in range(2)]
    check(rs[0].overall_code == OK and rs[1].overall_code == OVER and
          rs[1].statuses[0].current_limit.unit == RL.HOUR,
          "override: 1/hour")


def charges(s):
    """charge_only: the stream-done charge of a tokens-per-hour limit."""
    r = s.call("ext", D(("tokens", "team1"), hits=0))
    check(r.overall_code == OK, "charge: a check of 0 before the request")
    r = s.call("ext", D(("tokens", "team1"), ("phase", "done"), hits=70))
    check(r.overall_code == OK, "charge: 70 tokens charged after it")
    r = s.call("ext", D(("tokens", "team1"), hits=31))
    check(r.overall_code == OVER and
          r.statuses[0].limit_remaining == 0,
          "charge: the same counter, 31 more refused")
    r = s.call("ext", D(("tokens", "team1"), ("phase", "done"), hits=80))
    check(r.overall_code == OK, "charge: 80 more charged past the limit")
    r = s.call("ext", D(("tokens", "team1"), hits=1))
    check(r.overall_code == OVER,
          "charge: and every check refused until the window ends")
    r = s.call("ext", D(("tokens", "team2"), ("phase", "done"), hits=5))
    r2 = s.call("ext", D(("tokens", "team2"), hits=95))
    r3 = s.call("ext", D(("tokens", "team2"), hits=1))
    check(r.overall_code == OK and r2.overall_code == OK and
          r3.overall_code == OVER, "charge: 5 charged + 95 = the 100")


def minute_room(need_s=20):
    """Waits (at most need_s) until need_s seconds are left in the wall
    clock's minute, so that a sequence on a minute window stays in one."""
    while 60 - time.time() % 60 < need_s:
        time.sleep(0.1)


def token_sequence(s, domain, key, user, native=False):
    """The issue's sequence on a limit of 100 tokens a minute: check (a
    descriptor's hits_addend 0), charge 70, check, charge 70, check; then
    a fresh user. Counted envoy-ratelimit's way the second charge is
    counted past the limit and the last check is OVER_LIMIT; natively it
    is refused, not counted, and the last check is OK with 30 left."""
    minute_room()
    what = "%s %s" % (domain, key)
    r = s.call(domain, D((key, user), hits=0))
    st = r.statuses[0]
    check(r.overall_code == OK and st.code == OK and
          st.limit_remaining == 100 and
          st.current_limit.requests_per_unit == 100 and
          st.current_limit.unit == RL.MINUTE and
          0 < st.duration_until_reset.seconds <= 60,
          "%s: a check reads the counter: OK, 100 left, the limit and "
          "the reset, got %r" % (what, r))
    r = s.call(domain, D((key, user), hits=70))
    check(r.overall_code == OK and r.statuses[0].limit_remaining == 30,
          "%s: 70 charged, 30 left: %r" % (what, r))
    r = s.call(domain, D((key, user), hits=0))
    check(r.overall_code == OK and r.statuses[0].limit_remaining == 30,
          "%s: the check after it: OK, 30 left: %r" % (what, r))
    r = s.call(domain, D((key, user), hits=70))
    check(r.overall_code == OVER and r.statuses[0].limit_remaining == 0,
          "%s: 70 more: OVER_LIMIT: %r" % (what, r))
    r = s.call(domain, D((key, user), hits=0))
    if native:
        check(r.overall_code == OK and r.statuses[0].limit_remaining == 30,
              "%s: native: the refused charge consumed nothing: %r"
              % (what, r))
    else:
        check(r.overall_code == OVER and r.statuses[0].code == OVER and
              r.statuses[0].limit_remaining == 0 and
              r.statuses[0].current_limit.requests_per_unit == 100,
              "%s: the charge past the limit was counted: the check is "
              "OVER_LIMIT: %r" % (what, r))
        r = s.call(domain, D((key, user), hits=1))
        check(r.overall_code == OVER,
              "%s: and a request of 1 too: %r" % (what, r))
    r = s.call(domain, D((key, user + "-fresh"), hits=0))
    check(r.overall_code == OK and r.statuses[0].limit_remaining == 100,
          "%s: a fresh user: OK, 100 left: %r" % (what, r))


def counting(s):
    """Token budgets as Envoy clients expect (issue 42): the default
    counting is envoy-ratelimit's, a file may choose envoy-stop or
    native."""
    u = "u%d" % s.grpc_port
    token_sequence(s, "tokens", "user", u)
    token_sequence(s, "tokens", "ruled", u)
    token_sequence(s, "tokens_stop", "user", u)
    token_sequence(s, "tokens_native", "user", u, native=True)
    # A rule's sliding window cannot be counted past its limit: the call
    # is refused with the reason, not decided some other way.
    try:
        s.call("tokens", D(("logged", u), hits=1))
        check(False, "tokens: a sliding-window rule under envoy counting "
              "was answered")
    except grpc.RpcError as e:
        check(e.code() == grpc.StatusCode.INVALID_ARGUMENT and
              "tokens_log" in e.details() and
              "counting: native" in e.details(),
              "tokens: sliding-window rule refused: %s %s"
              % (e.code(), e.details()))
    # At the limit exactly: OK with nothing left (over only past it).
    r = s.call("tokens", D(("user", u + "-edge"), hits=100))
    r2 = s.call("tokens", D(("user", u + "-edge"), hits=0))
    check(r.overall_code == OK and r.statuses[0].limit_remaining == 0 and
          r2.overall_code == OK and r2.statuses[0].limit_remaining == 0,
          "tokens: a count at the limit is OK, 0 left: %r %r" % (r, r2))
    # Two descriptors of one call, a (10/h) and b (5/h), 1 hit each: the
    # sixth call takes b past its limit. envoy counts a anyway (4 left,
    # then 3); envoy-stop counts only b, so a stays at 5 left, as
    # envoy-ratelimit's integration test has it.
    for dom, left in (("tokens", [4, 3]), ("tokens_stop", [5, 5])):
        v = "p%s%d" % (dom, s.grpc_port)
        rs = [s.call(dom, D(("a", v)), D(("b", v))) for _ in range(7)]
        check([r.overall_code for r in rs] == [OK] * 5 + [OVER] * 2 and
              [r.statuses[0].code for r in rs] == [OK] * 7 and
              [r.statuses[0].limit_remaining for r in rs[:5]] ==
              [9, 8, 7, 6, 5] and
              [r.statuses[0].limit_remaining for r in rs[5:]] == left and
              [r.statuses[1].limit_remaining for r in rs] ==
              [4, 3, 2, 1, 0, 0, 0],
              "%s: a and b in one call: a's remaining %r, got %r" %
              (dom, left, [[(x.code, x.limit_remaining)
                            for x in r.statuses] for r in rs]))
        # b alone (one counted descriptor): counted past its limit in
        # both, so a check of b is over.
        r = s.call(dom, D(("b", v), hits=0))
        check(r.overall_code == OVER, "%s: b over: %r" % (dom, r))
        r = s.call(dom, D(("a", v), hits=0))
        check(r.overall_code == OK and
              r.statuses[0].limit_remaining == left[-1],
              "%s: a read: %r" % (dom, r))


def counting_flag():
    """--envoy-counting native: a domain whose file does not say counts
    natively; a file's counting: still wins."""
    s = Server([os.path.join(FIX, f) for f in
                ("tokens.yaml", "tokens_stop.yaml")],
               extra=["--envoy-counting", "native"])
    try:
        u = "f%d" % s.grpc_port
        token_sequence(s, "tokens", "user", u, native=True)
        token_sequence(s, "tokens_stop", "user", u)
    finally:
        check(s.stop() == 0, "counting flag: server exit 0")
    # A sliding-window limit cannot be counted past its limit (its log
    # is bounded by it): refused at load, FILE:LINE, unless native.
    swl = os.path.join(TMP, "swl.yaml")
    with open(swl, "w") as f:
        f.write("domain: swl\ndescriptors:\n  - key: k\n    rate_limit:\n"
                "      unit: minute\n      requests_per_unit: 5\n"
                "      algorithm: sliding-window\n")
    p = subprocess.run([RL_SERVER, "--check-envoy-config", swl],
                       capture_output=True, text=True, timeout=10)
    check(p.returncode != 0 and (swl + ":7:") in p.stderr + p.stdout and
          "counting: native" in p.stderr + p.stdout,
          "swl under envoy counting refused at load: %r" % (p,))
    p = subprocess.run([RL_SERVER, "--envoy-counting", "native",
                        "--check-envoy-config", swl],
                       capture_output=True, text=True, timeout=10)
    check(p.returncode == 0, "swl under native counting loads: %r" % (p,))
    p = subprocess.run([RL_SERVER, "--envoy-counting", "bogus",
                        "--check-envoy-config", swl],
                       capture_output=True, text=True, timeout=10)
    check(p.returncode != 0 and "--envoy-counting" in p.stderr,
          "a bad --envoy-counting is an error: %r" % (p,))


AON_TRY = [0]


def all_or_nothing(s, domain):
    """A domain with all_or_nothing: an organisation's 3 a minute and each
    of its users' 2, asked together in every call. A call refused at one
    level spends nothing at the other: told by the refused call's own
    statuses, by later answers and, on Redis, by the counters."""
    def seq():
        AON_TRY[0] += 1
        org = "acme%d" % AON_TRY[0]

        def two(u):
            return s.call(domain, D(("org", org)), D(("org", org), ("user", u)))
        rs = [two("ann"), two("ann"), two("ann"), two("bob"), two("cid")]
        # cid alone: its level untouched by the refused call above.
        rs.append(s.call(domain, D(("org", org), ("user", "cid"))))
        return org, rs
    got = []

    def run():
        got[:] = [seq()]
        return got[0][1][:5]
    in_one_window(run, reset_ms)
    org, rs = got[0]
    st = [[(x.code, x.limit_remaining) for x in r.statuses] for r in rs]
    what = "all_or_nothing %s: %r" % (domain, st)
    check([r.overall_code for r in rs] == [OK, OK, OVER, OK, OVER, OK], what)
    check(st[0] == [(OK, 2), (OK, 1)] and st[1] == [(OK, 1), (OK, 0)],
          what + ": both levels charged while both fit")
    check(st[2] == [(OK, 1), (OVER, 0)],
          what + ": the user refuses, the organisation not charged (1 left)")
    check(st[3] == [(OK, 0), (OK, 1)], what + ": another user takes the last")
    check(st[4] == [(OVER, 0), (OK, 2)],
          what + ": the organisation refuses, the user not charged (2 left)")
    check(st[5] == [(OK, 1)], what + ": the user refused by the "
          "organisation had spent nothing")
    lim = [[x.current_limit.requests_per_unit for x in r.statuses]
           for r in rs[:5]]
    check(all(v == [3, 2] for v in lim), what + ": limits %r" % lim)
    if REDIS_PORT:
        # The counters hold what the allowed calls cost, nothing more.
        cli = shutil.which("redis-cli") or os.path.join(
            os.path.dirname(shutil.which(REDIS) or REDIS), "redis-cli")
        keys = subprocess.run([cli, "-p", str(REDIS_PORT), "--scan",
                               "--pattern", "*%s*" % org],
                              capture_output=True, text=True, timeout=10)
        counts = {}
        for k in keys.stdout.split():
            v = subprocess.run([cli, "-p", str(REDIS_PORT), "GET", k],
                               capture_output=True, text=True, timeout=10)
            tail = k.split("org=%s" % org, 1)[1]
            if tail[:1] in ("}", "/"):
                counts[tail.split("}", 1)[0] or "org"] = int(v.stdout)
        check(counts == {"org": 3, "/user=ann": 2, "/user=bob": 1,
                         "/user=cid": 1},
              what + ": redis counts %r" % counts)


def all_or_nothing_cluster(s):
    """On a Redis Cluster a group's levels must share a hash slot: the
    untagged domain's are refused, naming the remedy; the tagged one is
    decided (all_or_nothing(s, "{levels}"))."""
    try:
        s.call("levels", D(("org", "x")), D(("org", "x"), ("user", "y")))
        check(False, "all_or_nothing on a cluster: levels in two slots "
              "were decided")
    except grpc.RpcError as e:
        check(e.code() == grpc.StatusCode.INVALID_ARGUMENT and
              "different Redis Cluster hash slots" in (e.details() or ""),
              "all_or_nothing on a cluster: %r %r" % (e.code(), e.details()))


def headers_agree(s):
    # One decision, three surfaces, one set of headers: librlc (rl-check
    # --headers), GET /check and Envoy's response_headers_to_add, for the
    # first request of three callers under the rule tenant_api (3/1m and
    # 100/1h; the minute decides). The calls go inside one wall-clock
    # second, away from its edges, so that every delta rounds alike.
    import http.client
    rl_check = os.environ.get("RL_CHECK")
    if not rl_check:
        check(False, "headers: RL_CHECK not set")
        return
    for attempt in range(10):
        while not 0.1 < time.time() % 1 < 0.4:
            time.sleep(0.01)
        t0 = time.time()
        tag = "h%d-%d" % (s.grpc_port, attempt)
        out = subprocess.run(
            [rl_check, "--server", "127.0.0.1:%d" % s.native_port, "--rule",
             "tenant_api", "--key", tag + "-rlc", "--headers"],
            capture_output=True, text=True, timeout=10).stdout
        rlc = [ln.strip() for ln in out.splitlines() if ln.startswith("  ")]
        c = http.client.HTTPConnection("127.0.0.1", s.http_port, timeout=10)
        c.request("GET", "/check?rule=tenant_api&key=%s-http" % tag)
        r = c.getresponse()
        r.read()
        web = ["%s: %s" % (k, v) for k, v in r.getheaders()
               if "ratelimit" in k.lower() or k.lower() == "retry-after"]
        c.close()
        e = s.call("ext", D(("tenant", tag + "-envoy")))
        env = ["%s: %s" % (x.key, x.value)
               for x in e.response_headers_to_add]
        if int(time.time()) == int(t0):
            break
    check(len(rlc) == 6 and rlc[0] == "X-RateLimit-Limit: 3" and
          "RateLimit-Policy: \"tenant_api\";q=3;w=60" in rlc,
          "headers: librlc's set %r" % rlc)
    check(rlc == web, "headers: /check %r != librlc %r" % (web, rlc))
    check(rlc == env, "headers: Envoy %r != librlc %r" % (env, rlc))


def isolation(s):
    # A native request's own limit never spends an Envoy descriptor's
    # counter, however its key is spelled: "ext/client=..." is the
    # descriptor's counter key, and 2 per 90 s its limit and window.
    v = "iso%d" % s.grpc_port
    nat = native_checks(s.native_port, "", "ext/client=" + v, 2, limit=2,
                        window=90)
    check([r.code for r in nat] == [native_pb2.CheckResponse.OK] * 2,
          "isolation: native inline allowed")
    rs = [s.call("ext", D(("client", v))) for _ in range(3)]
    check([r.overall_code for r in rs] == [OK, OK, OVER],
          "isolation: the descriptor keeps its own 2 per 90 s, got %r"
          % [r.overall_code for r in rs])


def inline_caps_test():
    # A limit the request brings (RateLimitDescriptor.limit) is under the
    # same caps as a native inline limit: --max-inline-limit and
    # --inline-limits deny refuse it (INVALID_ARGUMENT), and nothing is
    # counted.
    IA = grpc.StatusCode.INVALID_ARGUMENT
    f = [os.path.join(FIX, "mongo_cps.yaml")]
    s = Server(f, ["--max-inline-limit", "1000"])
    try:
        big = [s.status_of("mongo_cps", D(("database", "cap"),
                                          override=(4294967295, RL.SECOND)))
               for _ in range(50)]
        check(big == [IA] * 50, "caps: 50 overrides over "
              "--max-inline-limit refused, got %r" % set(big))
        r = s.call("mongo_cps", D(("database", "cap"), override=(5, RL.HOUR)))
        check(r.overall_code == OK and
              r.statuses[0].current_limit.requests_per_unit == 5 and
              r.statuses[0].limit_remaining == 4,
              "caps: an override under the cap is decided, first of 5")
    finally:
        check(s.stop() == 0, "caps server exit 0")
    s = Server(f, ["--inline-limits", "deny"])
    try:
        check(s.status_of("mongo_cps", D(("database", "d"),
                                         override=(5, RL.HOUR))) == IA,
              "caps: --inline-limits deny refuses an override")
        r = s.call("mongo_cps", D(("database", "users")))
        check(r.overall_code == OK and
              r.statuses[0].current_limit.requests_per_unit == 500,
              "caps: the file's limits still apply under deny")
    finally:
        check(s.stop() == 0, "deny server exit 0")


def mixed(s):
    # Native requests, Envoy descriptors and HTTP checks on one counter, at
    # once: a descriptor naming a rule counts under <prefix>{<descriptor
    # key>}:r:<rule>, which a native request and a GET /check for that rule
    # and key share. The rule "mix" allows 40 an hour; 4 native
    # connections, 4 gRPC threads and 4 kept-alive HTTP connections send
    # 30 each: exactly 40 are admitted in total.
    key = "ext/mix=m%d" % s.grpc_port
    results = {"native": 0, "grpc": 0, "http": 0}
    lock = threading.Lock()

    def nat():
        ok = sum(1 for r in native_checks(s.native_port, "mix", key, 30)
                 if r.code == native_pb2.CheckResponse.OK)
        with lock:
            results["native"] += ok

    def env():
        ok = 0
        for _ in range(30):
            r = s.call("ext", D(("mix", "m%d" % s.grpc_port)))
            ok += r.overall_code == OK
        with lock:
            results["grpc"] += ok
    def web():
        import http.client
        import urllib.parse
        ok = refused = 0
        c = http.client.HTTPConnection("127.0.0.1", s.http_port, timeout=10)
        path = "/check?rule=mix&key=" + urllib.parse.quote(key, safe="")
        for _ in range(30):
            c.request("GET", path)
            r = c.getresponse()
            r.read()
            ok += r.status == 200
            refused += r.status == 429
        c.close()
        check(ok + refused == 30, "mixed: HTTP answers other than 200/429")
        with lock:
            results["http"] += ok
    ts = [threading.Thread(target=f) for f in [nat, env, web] * 4]
    for t in ts:
        t.start()
    for t in ts:
        t.join(30)
    total = results["native"] + results["grpc"] + results["http"]
    check(total == 40,
          "mixed: %d admitted (native %d, grpc %d, http %d), want 40"
          % (total, results["native"], results["grpc"], results["http"]))
    print("mixed: native %d + grpc %d + http %d = %d admitted of 360 asked"
          % (results["native"], results["grpc"], results["http"], total))


def errors(s):
    # envoy-ratelimit's answers: UNKNOWN (a Go error) for an empty domain
    # or descriptor list; a descriptor without entries, or with an empty
    # key, matches nothing and is answered.
    UNK, OKS = grpc.StatusCode.UNKNOWN, grpc.StatusCode.OK
    check(s.status_of("", D(("a", "b"))) == UNK, "empty domain")
    check(s.status_of("mongo_cps") == UNK, "no descriptors")
    check(s.status_of("mongo_cps",
                      ratelimit_pb2.RateLimitDescriptor()) == OKS,
          "empty descriptor")
    check(s.status_of("mongo_cps", D(("", "x"))) == OKS, "empty key")
    big = D(("database", "x" * 70000))
    check(s.status_of("mongo_cps", big) ==
          grpc.StatusCode.RESOURCE_EXHAUSTED, "message over 64 KiB")
    other = s.ch.unary_unary(
        "/envoy.service.ratelimit.v3.RateLimitService/Other",
        request_serializer=rls_pb2.RateLimitRequest.SerializeToString,
        response_deserializer=rls_pb2.RateLimitResponse.FromString)
    try:
        other(rls_pb2.RateLimitRequest(domain="x"), timeout=5)
        check(False, "unknown method answered")
    except grpc.RpcError as e:
        check(e.code() == grpc.StatusCode.UNIMPLEMENTED, "unknown method")
    other = s.ch.unary_unary("/pkg.Nope/ShouldRateLimit",
                             request_serializer=lambda b: b,
                             response_deserializer=lambda b: b)
    try:
        other(b"", timeout=5)
        check(False, "unknown service answered")
    except grpc.RpcError as e:
        check(e.code() == grpc.StatusCode.UNIMPLEMENTED, "unknown service")
    # Compressed messages: not supported, UNIMPLEMENTED per gRPC.
    try:
        s.stub.ShouldRateLimit(rls_pb2.RateLimitRequest(
            domain="mongo_cps", descriptors=[D(("database", "u" * 4000))]),
            timeout=5, compression=grpc.Compression.Gzip)
        check(False, "compressed call answered")
    except grpc.RpcError as e:
        check(e.code() == grpc.StatusCode.UNIMPLEMENTED,
              "compressed: %s" % e.code())
    # The connection is still good for everyone.
    r = s.call("internal", D(("azure", "after-errors")))
    check(r.overall_code == OK and r.statuses[0].limit_remaining == 99,
          "served after errors")


def resets_held(rs, i=0):
    """Whether calls rs all fell in one window of descriptor i: its
    duration_until_reset never grew between them."""
    d = [r.statuses[i].duration_until_reset.seconds for r in rs]
    return all(a >= b for a, b in zip(d, d[1:]))


def near(got, want, what, slack=2):
    check(abs(got - want) <= slack, "%s: %d, expected %d" % (what, got, want))


def current(s):
    """envoy-ratelimit's current keys and answers, each expected value from
    its README or from the source (commit f2fb1577 of
    github.com/envoyproxy/ratelimit): config_impl.go, ratelimit.go,
    base_limiter.go, utilities.go."""
    # README Example 7: the (key_2, value_2) limit replaces specific_limit
    # when both apply; the replaced one is not counted.
    a = D(("key_1", "value_1"), ("user", "bkthomps"))
    b = D(("key_2", "value_2"), ("user", "bkthomps"))
    r = s.call("example7", a)
    check(r.statuses[0].current_limit.requests_per_unit == 5 and
          r.statuses[0].current_limit.name == "specific_limit",
          "ex7 specific_limit alone: 5/s")
    r = s.call("example7", a, b)
    check(r.overall_code == OK and r.statuses[0].code == OK and
          not r.statuses[0].HasField("current_limit") and
          r.statuses[1].current_limit.requests_per_unit == 10 and
          r.statuses[1].limit_remaining == 9,
          "ex7 replaced: only the 10/s limit applies")
    # Limits that replace each other both go (the names to replace are
    # gathered before any limit is dropped); alone, each applies.
    r = s.call("current", D(("mutual_a", "x")), D(("mutual_b", "x")),
               D(("mutual_b", "x")))
    check(all(not st.HasField("current_limit") for st in r.statuses) and
          r.overall_code == OK, "replaces: two that replace each other")
    r = s.call("current", D(("mutual_a", "y")))
    check(r.statuses[0].current_limit.name == "ma",
          "replaces: alone, a limit applies")
    # README Example 9: '*' in the middle, and several.
    r = s.call("example9_mid", D(("path", "/api/123/action")),
               D(("path", "/api/user-id/action")),
               D(("path", "/api/123/other")),
               D(("route", "/api/v1/resource/123/action")),
               D(("route", "/api/v1/resource/123")))
    got = [st.HasField("current_limit") for st in r.statuses]
    check(got == [True, True, False, True, False],
          "ex9 middle and multiple wildcards: %r" % got)
    # README Example 11: files/* share one counter of 10 an hour; each
    # files_no_share/* value has its own.
    rs = [s.call("example11", D(("files", "files/a.pdf")))
          for _ in range(5)]
    rs += [s.call("example11", D(("files", "files/b.csv")))
           for _ in range(5)]
    rs.append(s.call("example11", D(("files", "files/c.txt"))))
    if resets_held(rs):
        check([r.overall_code for r in rs] == [OK] * 10 + [OVER],
              "ex11 shared: the 11th file over")
    rs = [s.call("example11", D(("files_no_share", "files_no_share/a.pdf")))
          for _ in range(11)]
    rs.append(s.call("example11",
                     D(("files_no_share", "files_no_share/b.csv"))))
    if resets_held(rs):
        check([r.overall_code for r in rs] == [OK] * 10 + [OVER, OK],
              "ex11 not shared: a.pdf over at 11, b.csv still allowed")
    # Example 11 with nesting: the api/* entry shares, method does not.
    r1 = s.call("example11_metrics", D(("route", "api/v1"), ("method", "GET")))
    r2 = s.call("example11_metrics", D(("route", "api/v2"), ("method", "GET")))
    r3 = s.call("example11_metrics", D(("route", "api/v2"), ("method", "PUT")))
    if resets_held([r1, r2, r3]):
        check([r.statuses[0].limit_remaining for r in (r1, r2, r3)] ==
              [59, 58, 59], "ex11 nested: api/v1 and api/v2 share per method")
    # README Example 10: value_to_metric changes metrics only.
    r = s.call("example10", D(("route", "api"), ("http_method", "GET"),
                              ("subject_id", "123")))
    check(r.statuses[0].current_limit.requests_per_unit == 60,
          "ex10 loads and limits 60/min")
    # quota_mode: over, a quota descriptor refuses the call only when
    # every quota descriptor of it is over (ratelimit.go).
    r = s.call("current", D(("quota_a", "x")))
    check(r.overall_code == OK, "quota: first allowed")
    r = s.call("current", D(("quota_a", "x")))
    check(r.overall_code == OVER and r.statuses[0].code == OVER,
          "quota: the only quota descriptor over refuses")
    r = s.call("current", D(("quota_a", "x")), D(("quota_b", "y")))
    check(r.overall_code == OK and r.statuses[0].code == OVER and
          r.statuses[1].code == OK, "quota: one of two over is allowed")
    r = s.call("current", D(("quota_a", "x")), D(("plain", "z")))
    check(r.overall_code == OVER and r.statuses[1].code == OK,
          "quota: all quota descriptors over refuses beside an OK limit")
    # Units week/month/year, in the file and in a request's own limit:
    # windows of 7, 30 and 365 days on the epoch, reset in whole seconds
    # (utilities.go: CalculateReset, unit - now % unit).
    for key, unit, secs in (("monthly", RL.MONTH, 30 * 86400),
                            ("weekly", RL.WEEK, 7 * 86400)):
        rs = [s.call("current", D((key, "v"))) for _ in range(2)]
        st = rs[0].statuses[0]
        check(st.current_limit.unit == unit and
              [r.overall_code for r in rs] == [OK, OVER],
              "%s: 1 per unit, the second over" % key)
        near(st.duration_until_reset.seconds, secs - int(time.time()) % secs,
             "%s reset" % key)
    for unit, secs in ((5, 30 * 86400), (6, 365 * 86400), (7, 7 * 86400)):
        rs = [s.call("current", D(("own", "u%d" % unit),
                                  override=(2, unit))) for _ in range(3)]
        st = rs[0].statuses[0]
        check([r.overall_code for r in rs] == [OK, OK, OVER] and
              st.current_limit.unit == unit and
              st.current_limit.requests_per_unit == 2,
              "request's own limit, unit %d: 2 per unit" % unit)
        near(st.duration_until_reset.seconds, secs - int(time.time()) % secs,
             "request's own limit, unit %d: reset" % unit)
    # A request's own limit on a shadow_mode node is enforced (GetLimit
    # builds it without shadow); the node's own limit is shadow.
    rs = [s.call("current", D(("shadowed", "o"), override=(1, 3)))
          for _ in range(2)]
    if resets_held(rs):
        check([r.overall_code for r in rs] == [OK, OVER],
              "shadow node: a request's own limit enforced")
    rs = [s.call("current", D(("shadowed", "n"))) for _ in range(2)]
    check([r.overall_code for r in rs] == [OK, OK],
          "shadow node: its own limit only shadows")
    # requests_per_unit left out: 0, which refuses everything.
    r = s.call("current", D(("closed", "x")))
    check(r.overall_code == OVER and
          r.statuses[0].current_limit.requests_per_unit == 0,
          "no requests_per_unit: 0, refused")
    # duration_until_reset: whole seconds, never 0 while a window runs.
    r = s.call("current", D(("per_second", "x")), D(("per_minute", "x")))
    d0, d1 = r.statuses[0].duration_until_reset, \
        r.statuses[1].duration_until_reset
    check(d0.seconds == 1 and d0.nanos == 0 and d1.nanos == 0 and
          1 <= d1.seconds <= 60,
          "whole-second resets: %d.%09d and %d.%09d"
          % (d0.seconds, d0.nanos, d1.seconds, d1.nanos))
    near(d1.seconds, 60 - int(time.time()) % 60, "minute reset", slack=1)
    # OVER_LIMIT says 0 remaining even when a smaller cost would fit;
    # a descriptor's own hits_addend takes the request's place.
    rs = [s.call("current", D(("plain", "cost")), hits=3) for _ in range(2)]
    if resets_held(rs):
        check(rs[0].statuses[0].limit_remaining == 2 and
              rs[1].statuses[0].code == OVER and
              rs[1].statuses[0].limit_remaining == 0,
              "over: limit_remaining 0 (%d, %d)"
              % (rs[0].statuses[0].limit_remaining,
                 rs[1].statuses[0].limit_remaining))
    r = s.call("current", D(("plain", "own-cost"), hits=4),
               D(("plain", "req-cost")), hits=2)
    check(r.statuses[0].limit_remaining == 1 and
          r.statuses[1].limit_remaining == 3,
          "descriptor hits_addend over the request's")
    # More than 64 descriptors: answered, one status each.
    r = s.call("current", *[D(("per_minute", "many%d" % i))
                            for i in range(100)])
    check(len(r.statuses) == 100 and r.overall_code == OK,
          "100 descriptors in one call answered")


def global_switches():
    """--envoy-shadow-mode and --envoy-response-headers: envoy-ratelimit's
    SHADOW_MODE (overall OK, statuses unchanged) and
    LIMIT_RESPONSE_HEADERS_ENABLED (RateLimit-Limit/-Remaining/-Reset of
    the refused, else least remaining, descriptor)."""
    s = Server([os.path.join(FIX, "current.yaml")],
               ["--envoy-shadow-mode", "--envoy-response-headers",
                "--envoy-response-metadata"])
    try:
        r = s.call("current", D(("closed", "x")), D(("per_minute", "g")))
        h = {x.key: x.value for x in r.response_headers_to_add}
        check(r.overall_code == OK and r.statuses[0].code == OVER,
              "global shadow: overall OK, the descriptor still OVER")
        check(h.get("RateLimit-Limit") == "0" and
              h.get("RateLimit-Remaining") == "0" and
              h.get("RateLimit-Reset") == "1",
              "reference headers of the refused descriptor: %r" % h)
        r = s.call("current", D(("per_minute", "h")), D(("plain", "h")))
        h = {x.key: x.value for x in r.response_headers_to_add}
        check(h.get("RateLimit-Limit") == "5" and
              h.get("RateLimit-Remaining") == "4",
              "reference headers of the least remaining: %r" % h)
        # RESPONSE_DYNAMIC_METADATA: the call told back, and the allowed
        # descriptors' metadata (ratelimit.go's ratelimitToMetadata).
        r = s.call("current", D(("monthly", "meta")),
                   D(("own", "x"), override=(5, 5), hits=3))
        m = r.dynamic_metadata
        ds = m["descriptors"]
        check(m["domain"] == "current" and len(ds) == 2 and
              list(ds[0]["entries"]) == ["monthly=meta"] and
              ds[1]["limit"] == "requests_per_unit:5 unit:MONTH" and
              ds[1]["hitsAddend"] == 3 and "hitsAddend" not in m.keys(),
              "dynamic_metadata: the call: %s" % m)
        check("metadata" in m.keys() and
              m["metadata"]["team"] == "payments" and
              list(m["metadata"]["tiers"]) == ["gold", "silver"],
              "dynamic_metadata: the file's metadata: %s" % m)
        r = s.call("current", D(("monthly", "meta")), hits=1)
        m = r.dynamic_metadata
        check(r.statuses[0].code == OVER and "metadata" not in m.keys() and
              m["hitsAddend"] == 1,
              "dynamic_metadata: none from a refused descriptor: %s" % m)
    finally:
        check(s.stop() == 0, "switches server exit 0")


def many_streams(s):
    # More concurrent calls than --grpc-max-streams on one channel: the
    # client queues by our SETTINGS; every one is answered.
    futs = [s.stub.ShouldRateLimit.future(rls_pb2.RateLimitRequest(
        domain="mongo_cps", descriptors=[D(("database", "m%d" % i))]),
        timeout=10) for i in range(300)]
    check(all(f.result().overall_code == OK for f in futs),
          "300 concurrent calls answered")


def reload_test():
    path = os.path.join(TMP, "live.yaml")
    with open(path, "w") as f:
        f.write("domain: live\ndescriptors:\n  - key: k\n    rate_limit:"
                " {unit: minute, requests_per_unit: 1}\n")
    s = Server([path], ["--envoy-quota-mode"])
    try:
        r = s.call("live", D(("k", "a")))
        check(r.statuses[0].current_limit.requests_per_unit == 1,
              "reload: initial limit")
        # --envoy-quota-mode (QUOTA_MODE): every descriptor in quota mode,
        # so a call is refused only when all its descriptors are over.
        rs = [s.call("live", D(("k", "q")), D(("k", "q"))),
              s.call("live", D(("k", "q")))]
        if resets_held(rs):
            check(rs[0].statuses[1].code == OVER and
                  rs[0].overall_code == OK and rs[1].overall_code == OVER,
                  "global quota mode: refused only when all are over")
        # A bad file keeps the old configuration.
        with open(path + ".tmp", "w") as f:
            f.write("domain: live\ndescriptors:\n  - key: k\n    "
                    "rate_limit: {unit: fortnight}\n")
        os.rename(path + ".tmp", path)
        end = time.time() + 10
        while time.time() < end and \
                "rl_envoy_config_reload_failures_total 1" not in s.metrics():
            time.sleep(0.05)
        check("rl_envoy_config_reload_failures_total 1" in s.metrics(),
              "reload: bad file counted")
        r = s.call("live", D(("k", "b")))
        check(r.statuses[0].current_limit.requests_per_unit == 1,
              "reload: bad file kept the old config")
        with open(path + ".tmp", "w") as f:
            f.write("domain: live\ndescriptors:\n  - key: k\n    "
                    "rate_limit: {unit: minute, requests_per_unit: 7}\n")
        os.rename(path + ".tmp", path)
        end, got = time.time() + 10, 0
        while time.time() < end:
            r = s.call("live", D(("k", "c")))
            got = r.statuses[0].current_limit.requests_per_unit
            if got == 7:
                break
            time.sleep(0.05)
        check(got == 7, "reload: new file in force")
    finally:
        check(s.stop() == 0, "reload server exit 0")


def drain_test():
    # Long enough that a machine stalling the test for a second or two
    # still calls while draining, not after.
    s = Server([os.path.join(FIX, "mongo_cps.yaml")], ["--drain-ms", "3000"])
    futs = []
    s.call("mongo_cps", D(("database", "users")))
    s.p.send_signal(signal.SIGTERM)
    # While draining, /healthz says so and calls are still answered.
    end, health = time.time() + 5, None
    while time.time() < end:
        try:
            urllib.request.urlopen("http://127.0.0.1:%d/healthz" %
                                   s.metrics_port, timeout=2)
        except urllib.error.HTTPError as e:
            health = e.code
            break
        time.sleep(0.02)
    check(health == 503, "drain: /healthz 503")
    r = s.call("mongo_cps", D(("database", "users")))
    check(r.overall_code == OK, "drain: served while draining")
    rc = s.p.wait(20)
    s.ch.close()
    check(rc == 0, "drain: exit 0 after GOAWAY")
    log = open(s.log.name).read()
    check("GOAWAY sent" in log, "drain: GOAWAY logged")
    s.log.close()


REDIS_PORT = None


def main():
    global REDIS_PORT
    if REDIS:
        REDIS_PORT, _ = rlt.start_redis(
            TMP, extra=(["--loadmodule", MODULE] if MODULE else []),
            redis=REDIS, procs=PROCS)
    files = [os.path.join(FIX, f) for f in sorted(os.listdir(FIX))
             if f.endswith(".yaml") and f != "rules.yaml"]
    s = Server(files)
    try:
        readme_examples(s)
        extensions(s)
        charges(s)
        counting(s)
        if REDIS:
            check(("rl_store_redis_module %d" % (1 if MODULE else 0))
                  in s.metrics(), "the store used: module %r" % MODULE)
        if "--redis-cluster" in STORE_ARGS:
            all_or_nothing_cluster(s)
        else:
            all_or_nothing(s, "levels")
        all_or_nothing(s, "{levels}")
        headers_agree(s)
        isolation(s)
        mixed(s)
        errors(s)
        current(s)
        many_streams(s)
        m = s.metrics()
        check('rl_grpc_calls_total{status="OK"}' in m and
              'rl_grpc_calls_total{status="UNKNOWN"} 2' in m,
              "metrics: calls by status")
        check("rl_grpc_connections_open 1" in m, "metrics: connections")
        check('rl_rule_decisions_total{rule="envoy:mongo_cps"' in m,
              "metrics: per-domain decisions")
    finally:
        check(s.stop() == 0, "server exit 0")
    counting_flag()
    reload_test()
    global_switches()
    inline_caps_test()
    drain_test()


try:
    main()
except BaseException:
    # end_run exits; an exception must count as a failure, not vanish
    # behind that exit.
    import traceback
    traceback.print_exc()
    FAILS.append("exception")
finally:
    rlt.end_run(FAILS, PROCS, TMP)
