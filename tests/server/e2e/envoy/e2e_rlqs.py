#!/usr/bin/python3
"""rl-server's RLQS (--rlqs-config) against clients that behave as Envoy's
rate_limit_quota filter (tests/support/rlqs_envoy.py): K = 6 of them, three
on each of two rl-servers over one Redis, traffic skewed across them and
changing over time.

Usage: e2e_rlqs.py RL_SERVER PROTO_DIR redis-server

The bound, stated from the design (docs/rlqs.md, "What it promises") before
it was measured. The rule: L = 300 requests a second (W = 1 s), burst 0.1,
floor 5, TTL 2 s; the clients report every T = 0.25 s. An Envoy holding a
share q (tokens_per_fill per W) with a bucket of b = ceil(0.1 q) admits at
most b + q in any window of W, and b more each time its bucket is replaced
(a new bucket starts full). Shares computed from one view of the fleet add
up to L * 20 / 21 = 285 at most, and a share kept while it is within 5%
(or 1 request) of the newest one keeps the sum within L + K. So in a window
where no share moved (no bucket replaced in it or the one before), the
fleet admits at most
    L + K + sum(b) <= L + K + 0.1 L + K = 342;
in any window at most that, plus b_max for each replacement in it, plus
what shares computed from views one report apart can add, L * T / W = 75:
    342 + R_w * b_max + 75.
Over the whole run, the admitted total is at most L per second plus the
same extras. No Envoy is starved: each is assigned at least its floor
(5/s), so one asking for more admits at least 80% of 5 a second over a
phase. One that goes away stops holding budget: closed, its entry leaves
the fleet at once; silent, after stale_ms to 1.5 stale_ms (1.5 to 2.25
s: the store sweeps every stale_ms / 2); the shares of the
others then add up to 285 again (within 5%: what they keep).

Also: the protocol's bounds (nonsense and floods answered with their gRPC
status), a bucket no rule takes (the configured blanket rule), abandon
after abandon_s, and the fail mode: Redis killed, a bucket keeps its last
token bucket for its TTL, then gets the rule's fallback (deny_all here);
Redis back, token buckets again. The memory store (one instance's own
view); and the stream over the listener's TLS with --threads 2."""

import os
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "..", "..", "support"))
import rlt  # noqa: E402

RL_SERVER, PROTO_DIR, REDIS = sys.argv[1], sys.argv[2], sys.argv[3]
TMP = tempfile.mkdtemp(prefix="rl-rlqs-")
PROCS = []
FAILS = []

rlt.rlqs_stubs(PROTO_DIR, TMP)
import grpc  # noqa: E402
import rlqs_envoy  # noqa: E402
from envoy.service.rate_limit_quota.v3 import rlqs_pb2  # noqa: E402

L, BURST, FLOOR, TTL, T = 300, 0.1, 5, 2, 0.25
DIVIDED = L * 20 // 21
K = 6
STEADY = L + K + int(BURST * L) + K  # 342, from the design (above)
CONF = """domain: envoy
unmatched: allow_all
unmatched_ttl_s: 30
min_report_ms: 100
buckets:
  - name: api
    match: {name: api}
    requests: %d
    unit: second
    floor: %d
    burst: %s
    ttl_s: %d
    fallback: deny_all
    abandon_s: 3
    stale_ms: 1500
""" % (L, FLOOR, BURST, TTL)
BID = {"name": "api"}


def check(cond, what):
    if not cond:
        FAILS.append(what)
        print("FAIL:", what, flush=True)
    return cond


def write(name, text):
    with open(os.path.join(TMP, name), "w") as f:
        f.write(text)
    return os.path.join(TMP, name)


CONF_FILE = write("rlqs.yaml", CONF)


class Server:
    started = 0

    def __init__(self, redis_port, extra=()):
        Server.started += 1
        n = Server.started
        ports = os.path.join(TMP, "server-%d.ports" % n)
        args = [RL_SERVER, "--listen", "127.0.0.1:0", "--grpc",
                "127.0.0.1:0", "--metrics", "127.0.0.1:0", "--port-file",
                ports, "--rlqs-config", CONF_FILE]
        if redis_port is not None:
            args += ["--redis", "127.0.0.1:%d" % redis_port]
        args += list(extra)
        self.log = open(os.path.join(TMP, "server-%d.log" % n), "w")
        self.p = subprocess.Popen(args, stderr=self.log)
        PROCS.append(self.p)
        got = rlt.wait_ports(self.p, ports, self.log.name)
        self.addr = "127.0.0.1:%d" % got["grpc"]
        self.metrics_port = got["metrics"]

    def metric(self, name):
        import urllib.request
        text = urllib.request.urlopen(
            "http://127.0.0.1:%d/metrics" % self.metrics_port,
            timeout=5).read().decode()
        for line in text.splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
        return None


def share_of(e):
    c = e.current(BID)
    return c[2] if c is not None and c[0] == "tb" else 0


# --- protocol bounds ---------------------------------------------------

def raw_stream(addr, msgs, timeout_s=5, hold_s=None):
    """Sends msgs (bytes each) on one stream and keeps it open until the
    server ends it (or, with hold_s, ends it that long after sending);
    returns (responses, code)."""
    ch = grpc.insecure_channel(addr)
    m = ch.stream_stream(
        "/envoy.service.rate_limit_quota.v3.RateLimitQuotaService/"
        "StreamRateLimitQuotas",
        request_serializer=lambda b: b,
        response_deserializer=rlqs_pb2.RateLimitQuotaResponse.FromString)
    done = threading.Event()

    def gen():
        for x in msgs:
            yield x
        done.wait(timeout_s if hold_s is None else hold_s)

    out = []
    code = None
    try:
        for r in m(gen(), timeout=timeout_s):
            out.append(r)
    except grpc.RpcError as e:
        code = e.code()
    else:
        code = grpc.StatusCode.OK
    done.set()
    ch.close()
    return out, code


def report(domain="envoy", buckets=({"name": "api"},), allowed=1):
    m = rlqs_pb2.RateLimitQuotaUsageReports(domain=domain)
    for b in buckets:
        u = m.bucket_quota_usages.add(num_requests_allowed=allowed)
        u.bucket_id.bucket.update(b)
        u.time_elapsed.seconds = 1
    return m.SerializeToString()


def test_protocol(addr):
    code = raw_stream(addr, [b"\x0a\xff\xff"])[1]
    check(code == grpc.StatusCode.INVALID_ARGUMENT,
          "a message that does not decode: INVALID_ARGUMENT, got %s" % code)
    code = raw_stream(addr, [report(domain="")])[1]
    check(code == grpc.StatusCode.INVALID_ARGUMENT,
          "no domain: INVALID_ARGUMENT, got %s" % code)
    code = raw_stream(addr, [report(domain="other")])[1]
    check(code == grpc.StatusCode.INVALID_ARGUMENT,
          "a domain --rlqs-config does not serve: INVALID_ARGUMENT, got %s"
          % code)
    code = raw_stream(addr, [report(buckets=({},))])[1]
    check(code == grpc.StatusCode.INVALID_ARGUMENT,
          "an empty bucket_id: INVALID_ARGUMENT, got %s" % code)
    code = raw_stream(addr, [report(buckets=())])[1]
    check(code == grpc.StatusCode.INVALID_ARGUMENT,
          "no bucket_quota_usages: INVALID_ARGUMENT, got %s" % code)
    code = raw_stream(addr, [report(buckets=[{"name": "x%d" % i}
                                             for i in range(1025)])])[1]
    check(code == grpc.StatusCode.RESOURCE_EXHAUSTED,
          "1025 buckets on a stream: RESOURCE_EXHAUSTED, got %s" % code)
    out, code = raw_stream(addr, [report()] * 80)
    check(code == grpc.StatusCode.RESOURCE_EXHAUSTED,
          "80 reports at once (over 50 a second): RESOURCE_EXHAUSTED, got %s"
          % code)
    # 1024 buckets (the most a stream may track), reported twice: each is
    # found again (one assignment each, not two), and the stream ends OK.
    many = [{"route": "r%d" % i} for i in range(1024)]
    out, code = raw_stream(addr, [report(buckets=many), report(buckets=many)],
                           hold_s=1.5)
    n = sum(len(r.bucket_action) for r in out)
    check(code == grpc.StatusCode.OK and n == 1024,
          "1024 buckets twice: %d assignments (not 1024), %s" % (n, code))
    # A bucket no rule takes: the configured blanket rule, its TTL.
    out, code = raw_stream(addr, [report(buckets=({"route": "x"},))],
                           hold_s=0.5)
    got = [(a.quota_assignment_action.rate_limit_strategy.blanket_rule,
            a.quota_assignment_action.assignment_time_to_live.seconds)
           for r in out for a in r.bucket_action]
    check(got[:1] == [(rlqs_envoy.ALLOW_ALL, 30)],
          "an unmatched bucket: ALLOW_ALL for 30 s, got %s" % got)


# --- the fleet ---------------------------------------------------------

class Traffic:
    """Feeds each Envoy its rate (requests a second) and counts what is
    admitted per wall-clock second, fleet-wide and per Envoy."""

    def __init__(self, envoys):
        self.envoys = envoys
        self.stalls = set()  # seconds in which this thread fell behind
        self.rates = [0.0] * len(envoys)
        self.acc = [0.0] * len(envoys)
        self.win = {}        # second -> admitted, fleet-wide
        self.per = [0] * len(envoys)
        self.offered = [0] * len(envoys)
        self.stop = threading.Event()
        self.t = threading.Thread(target=self.run, daemon=True)

    def run(self):
        last = time.monotonic()
        while not self.stop.is_set():
            time.sleep(0.002)
            now = time.monotonic()
            dt, last = now - last, now
            if dt > 0.1:
                # The load generator itself fell behind (this process
                # starved of CPU): the requests it missed are not sent
                # after in one burst, and the second is noted (an Envoy
                # stand-in that stalls also stalls its clock's view of
                # its TTLs, which a real Envoy would not).
                self.stalls.add(int(time.time()))
                dt = 0.002
            for i, e in enumerate(self.envoys):
                if self.rates[i] <= 0:
                    continue
                self.acc[i] += self.rates[i] * dt
                while self.acc[i] >= 1.0:
                    self.acc[i] -= 1.0
                    self.offered[i] += 1
                    if e.request(BID):
                        self.per[i] += 1
                        w = int(time.time())
                        self.win[w] = self.win.get(w, 0) + 1

    def snapshot(self):
        return list(self.per), list(self.offered)


def replacements_by_window(envoys):
    """Bucket replacements (a new token bucket, started full) per
    wall-clock second, from the clients' records, with the largest
    bucket seen."""
    off = time.time() - time.monotonic()
    out, bmax, last = {}, 0, {}
    for e in envoys:
        with e.lock:
            for (t, k, act) in e.assignments:
                if act[0] != "tb":
                    continue
                bmax = max(bmax, act[1])
                if last.get((e.name, k)) != act:
                    w = int(t + off)
                    out[w] = out.get(w, 0) + 1
                last[(e.name, k)] = act
    return out, bmax


def test_fleet(redis_port, redis_proc):
    a, b = Server(redis_port), Server(redis_port)
    test_protocol(a.addr)
    envoys = [rlqs_envoy.FakeEnvoy(s.addr, interval_s=T, name="e%d" % i)
              for i, s in enumerate([a, a, a, b, b, b])]
    tr = Traffic(envoys)
    tr.t.start()
    phases = [
        ("skewed", 6, [400, 100, 20, 200, 50, 5]),
        ("shifted", 6, [20, 20, 300, 20, 400, 5]),
    ]
    starts = []
    results = []
    for name, secs, rates in phases:
        before = tr.snapshot()
        t0 = time.time()
        starts.append(int(t0))
        tr.rates = [float(r) for r in rates]
        time.sleep(secs)
        after = tr.snapshot()
        got = [x - y for x, y in zip(after[0], before[0])]
        asked = [x - y for x, y in zip(after[1], before[1])]
        results.append((name, secs, rates, got, asked))
        print("phase %s: offered %s admitted %s (sum %d over %d s, %.1f/s)"
              % (name, asked, got, sum(got), secs, sum(got) / secs),
              flush=True)
    t_end = int(time.time())

    # Per window.
    repl, bmax = replacements_by_window(envoys)
    worst_steady, worst_any, n_steady = 0, 0, 0
    for w in range(starts[0], t_end):
        n = tr.win.get(w, 0)
        r = repl.get(w, 0)
        steady = r == 0 and repl.get(w - 1, 0) == 0
        bound = STEADY if steady else STEADY + r * bmax + 75
        if w in tr.stalls or w - 1 in tr.stalls:
            print("window %d: %d admitted, the client stalled in it or "
                  "the one before: not held to the bound" % (w, n),
                  flush=True)
            continue
        if steady:
            n_steady += 1
            worst_steady = max(worst_steady, n)
        worst_any = max(worst_any, n)
        check(n <= bound, "window %d: %d admitted, over the bound %d "
              "(replacements %d, b_max %d)" % (w, n, bound, r, bmax))
    print("per-window admitted: max %d in any window; %d steady windows, "
          "max %d (bound %d); b_max %d; replacements %d in all" %
          (worst_any, n_steady, worst_steady, STEADY, bmax,
           sum(repl.values())),
          flush=True)
    print("windows:", [tr.win.get(w, 0) for w in range(starts[0], t_end)],
          flush=True)
    total = sum(tr.win.get(w, 0) for w in range(starts[0] + 1, t_end))
    secs = t_end - starts[0] - 1
    extra = K * secs + K * bmax + sum(repl.values()) * bmax + 2 * 75
    check(total <= L * secs + extra,
          "total %d over %d s past L * s + extras = %d" %
          (total, secs, L * secs + extra))
    check(total >= 0.8 * DIVIDED * secs,
          "total %d over %d s below 80%% of %d/s: budget left unused" %
          (total, secs, DIVIDED))
    # No Envoy starved: each admits its floor or its demand.
    for name, s, rates, got, asked in results:
        for i, r in enumerate(rates):
            want = 0.8 * min(r, FLOOR) * (s - 1)
            check(got[i] >= want, "phase %s: e%d admitted %d, under %.0f "
                  "(its floor)" % (name, i, got[i], want))

    # Going away: e4 closes its stream, e0 goes silent (stream open).
    tr.rates[4] = tr.rates[0] = 0
    envoys[4].close()
    envoys[0].silent = True
    live = [1, 2, 3, 5]
    t_gone = time.monotonic()
    ok = envoys[1].wait(
        lambda s: sum(share_of(envoys[i]) for i in live) >= DIVIDED * 0.95,
        10)
    shares = [share_of(envoys[i]) for i in live]
    check(ok, "the shares of the Envoys left add up to %s (%d), not near "
          "%d, 10 s after two went away" % (shares, sum(shares), DIVIDED))
    print("after e4 closed and e0 went silent: shares %s sum %d in %.1f s"
          % (shares, sum(shares), time.monotonic() - t_gone), flush=True)
    ok = envoys[0].wait(lambda s: len(s.abandoned) > 0, 8)
    check(ok, "the silent Envoy's bucket was not abandoned within 8 s")

    # The store goes: each bucket keeps its token bucket for its TTL, then
    # the rule's fallback (deny_all).
    e1 = envoys[1]
    with e1.lock:
        n_before = len(e1.assignments)
    redis_proc.kill()
    redis_proc.wait()
    t_kill = time.monotonic()
    ok = e1.wait(lambda s: s.current(BID) == ("blanket", rlqs_envoy.DENY_ALL),
                 TTL + 5)
    check(ok, "no fallback (DENY_ALL) within TTL + 5 s of Redis going: %s"
          % (e1.current(BID),))
    with e1.lock:
        seen = list(e1.assignments[n_before - 1:])
    tb_last = max((t for t, k, act in seen if act[0] == "tb"), default=None)
    deny = min((t for t, k, act in seen if act[0] == "blanket"),
               default=None)
    if tb_last is not None and deny is not None:
        check(deny - tb_last >= TTL - 0.1,
              "the fallback came %.2f s after the last token bucket, "
              "before its TTL (%d s) ran out" % (deny - tb_last, TTL))
        print("Redis killed: the last token bucket at %+.2f s, the "
              "fallback at %+.2f s (TTL %d s)" %
              (tb_last - t_kill, deny - t_kill, TTL), flush=True)
    check(a.metric("rl_rlqs_fallbacks_total") or
          b.metric("rl_rlqs_fallbacks_total"),
          "rl_rlqs_fallbacks_total stays 0")
    # Redis back (the same port): token buckets again.
    p = subprocess.Popen(
        [REDIS, "--port", str(redis_port), "--bind", "127.0.0.1", "--save",
         "", "--appendonly", "no", "--dir", TMP, "--logfile",
         os.path.join(TMP, "redis-again.log")], stdout=subprocess.DEVNULL)
    PROCS.append(p)
    ok = e1.wait(lambda s: (s.current(BID) or ("",))[0] == "tb", 15)
    check(ok, "no token bucket within 15 s of Redis coming back: %s" %
          (e1.current(BID),))
    tr.stop.set()
    tr.t.join()
    for i in (1, 2, 3, 5):
        envoys[i].close()
    envoys[0].vanish()
    for i in (1, 2, 3, 5):
        check(envoys[i].ended is not None and
              envoys[i].ended[0] == grpc.StatusCode.OK,
              "e%d's stream ended %s, not OK" % (i, envoys[i].ended))


def test_memory():
    """The memory store: one instance, its own fleet view; two Envoys,
    the shares adding up to the divided limit."""
    s = Server(None)
    es = [rlqs_envoy.FakeEnvoy(s.addr, interval_s=T, name="m%d" % i)
          for i in range(2)]
    tr = Traffic(es)
    tr.rates = [600.0, 100.0]
    tr.t.start()
    ok = es[0].wait(lambda _: share_of(es[0]) + share_of(es[1]) >=
                    DIVIDED * 0.95 and share_of(es[1]) >= FLOOR, 10)
    check(ok, "memory store: shares %d + %d, not near %d" %
          (share_of(es[0]), share_of(es[1]), DIVIDED))
    check(share_of(es[0]) <= DIVIDED and share_of(es[1]) <= DIVIDED,
          "memory store: a share over the limit")
    tr.stop.set()
    tr.t.join()
    for e in es:
        e.close()


def openssl(*args):
    subprocess.run(["openssl"] + list(args), check=True, capture_output=True,
                   timeout=60)


def test_tls():
    """The same stream over the --grpc listener's TLS (--tls-listeners
    grpc), with --threads 2 (each loop its own service; the memory store's
    table shared)."""
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
    s = Server(None, ["--tls-cert", p("server.crt"), "--tls-key",
                      p("server.key"), "--tls-listeners", "grpc",
                      "--threads", "2"])
    es = [rlqs_envoy.FakeEnvoy(s.addr, interval_s=T, name="t%d" % i,
                               creds=creds) for i in range(2)]
    tr = Traffic(es)
    tr.rates = [400.0, 400.0]
    tr.t.start()
    ok = es[0].wait(lambda _: share_of(es[0]) + share_of(es[1]) >=
                    DIVIDED * 0.9 and min(share_of(es[0]),
                                          share_of(es[1])) > FLOOR, 10)
    check(ok, "TLS, --threads 2: shares %d + %d, not near %d" %
          (share_of(es[0]), share_of(es[1]), DIVIDED))
    check(share_of(es[0]) + share_of(es[1]) <= DIVIDED + 2,
          "TLS, --threads 2: the loops' shares add up past the limit")
    tr.stop.set()
    tr.t.join()
    for e in es:
        e.close()
        check(e.ended is not None and e.ended[0] == grpc.StatusCode.OK,
              "TLS: the stream ended %s" % (e.ended,))


try:
    port, proc = rlt.start_redis(TMP, redis=REDIS, procs=PROCS)
    test_fleet(port, proc)
    test_memory()
    test_tls()
finally:
    rlt.end_run(FAILS, PROCS, TMP)
