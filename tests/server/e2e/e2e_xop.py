#!/usr/bin/python3
"""Reservations and leases across instances: three rl-servers share one
Redis (or, with RL_XOP_STORE, the store flags given there, such as a
Redis Cluster that tests/cluster/redis_cluster.sh starts), spoken to in
the native protocol (frames of ratelimit.proto) and over HTTP.

Reservations: reserve on one instance, settle on another, the window's
counter moves by exactly actual - estimate (a refund frees room at once,
an excess refuses later requests), a second settlement or a forged,
changed, expired or lease handle is refused and changes nothing, on a
fixed window and on a rule of every algorithm; a long random run against
a model of the counter, across the three instances, agrees answer for
answer.

Leases: never more than N alive per caller across the instances, audited
from the answers' times while clients crash (never release) at random;
release, renew, an expired lease, shadow mode.

HTTP: GET /check?op=reserve|acquire and POST /settle, /release, /renew.

Fail-open: with the store gone, reserve and acquire answer OK marked
failed_open, and their handles settle and release without effect.

Usage: e2e_xop.py RL_SERVER PROTO_DIR [REDIS_SERVER]"""
import hashlib
import hmac
import os
import random
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
                                "..", "..", "support"))
import rlt  # noqa: E402

RL_SERVER, PROTO_DIR = sys.argv[1], sys.argv[2]
REDIS = sys.argv[3] if len(sys.argv) > 3 else "redis-server"
STORE_ARGS = os.environ.get("RL_XOP_STORE", "").split()
TMP = tempfile.mkdtemp(prefix="rl-xop-")
FAILS, PROCS = [], []
SERVERS = 3
LEASE_N = 5

rlt.envoy_stubs(PROTO_DIR, TMP, native=True)
import ratelimit_pb2 as pb  # noqa: E402

Req, Resp = pb.CheckRequest, pb.CheckResponse


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what, flush=True)
    if not cond:
        FAILS.append(what)


class Native:
    """One native connection: requests pipelined, answers matched by
    id."""

    def __init__(self, port):
        self.s = socket.create_connection(("127.0.0.1", port), 5)
        self.s.settimeout(10)
        self.buf = b""
        self.next_id = 1

    def send(self, **kw):
        kw.setdefault("id", self.next_id)
        self.next_id = max(self.next_id, kw["id"]) + 1
        m = Req(**kw).SerializeToString()
        self.s.sendall(struct.pack(">BI", 0, len(m)) + m)
        return kw["id"]

    def recv(self):
        while True:
            if len(self.buf) >= 5:
                n = struct.unpack(">I", self.buf[1:5])[0]
                if len(self.buf) >= 5 + n:
                    r = Resp()
                    r.ParseFromString(self.buf[5:5 + n])
                    self.buf = self.buf[5 + n:]
                    return r
            chunk = self.s.recv(65536)
            if not chunk:
                raise RuntimeError("connection closed")
            self.buf += chunk

    def ask(self, **kw):
        i = self.send(**kw)
        r = self.recv()
        assert r.id == i, (r.id, i)
        return r


RULES = """rules:
  tokens:
    limits: [1000/30d]
  every:
    limits:
      - {limit: 50/30d}
      - {limit: 20/1h, algorithm: sliding-window-counter}
      - {limit: 20/1h, algorithm: sliding-window}
      - {rate: 20/1h, burst: 20, algorithm: gcra}
  model:
    limits: [100/30d]
  probe:
    limits: [100/1m]
  exports:
    concurrency: %d
    lease: 2s
  churn:
    concurrency: %d
    lease: 1s
  quiet:
    concurrency: 1
    lease: 60s
    mode: shadow
""" % (LEASE_N, LEASE_N)


# The fleet's handle secret: a file every instance reads (the documented
# way for a Redis fleet: DESIGN.md, "Reservations and leases").
SECRET = os.urandom(32).hex().encode()
SECRET_FILE = os.path.join(TMP, "handle-secret")
with open(SECRET_FILE, "wb") as f:
    f.write(SECRET)


def start_servers(store_args, n=SERVERS, extra=(), secret=True):
    """n rl-servers on the store; the fleet's secret file unless secret
    is False. Their ports, and "log": the path of each one's log."""
    cfg = os.path.join(TMP, "rules.yaml")
    with open(cfg, "w") as f:
        f.write(RULES)
    if secret:
        extra = ["--handle-secret-file", SECRET_FILE] + list(extra)
    out = []
    for i in range(n):
        name = "s%d-%d" % (i, len(PROCS))
        ports_f = os.path.join(TMP, name + ".ports")
        log = os.path.join(TMP, name + ".log")
        with open(log, "w") as lf:
            p = subprocess.Popen(
                [RL_SERVER, "--listen", "127.0.0.1:0", "--http", "127.0.0.1:0",
                 "--metrics", "127.0.0.1:0", "--port-file", ports_f,
                 "--config", cfg, "--reserve-ttl-ms", "3000",
                 "--prefix", "xop:",
                 "--redis-timeout-ms", "300"] + store_args + list(extra),
                stderr=lf)
        PROCS.append(p)
        out.append(rlt.wait_ports(p, ports_f, log))
        out[-1]["log"] = log
    return out


def ready(conns):
    """Until every instance answers a reservation from its store (not
    failed open: a fresh instance on a Redis Cluster answers before the
    slot map is in; with the secret in a file nothing else waits)."""
    end = time.time() + 15
    for c in conns:
        while True:
            r = c.ask(key="ready", rule="tokens", cost=1, op=Req.RESERVE)
            if (r.code == Resp.OK and not r.failed_open) or time.time() > end:
                break
            time.sleep(0.02)
        check(r.code == Resp.OK and not r.failed_open and len(r.handle) > 0,
              "an instance reserves, its store up")


def reservations(c):
    a, b, d = c
    r = a.ask(key="u1", rule="tokens", cost=100, op=Req.RESERVE)
    check(r.code == Resp.OK and r.used == 100 and len(r.handle) > 0 and
          r.expires_at_ms > r.decided_at_ms,
          "reserve 100 of 1000: OK, used 100, a handle that expires")
    h1 = r.handle
    r = b.ask(op=Req.SETTLE, handle=h1, actual=30)
    check(r.code == Resp.OK, "settled with 30 on another instance")
    r = d.ask(key="u1", rule="tokens", cost=1)
    check(r.code == Resp.OK and r.used == 31,
          "the refund freed 70 at once: a check sees 31 (got %d)" % r.used)
    r = d.ask(op=Req.SETTLE, handle=h1, actual=0)
    check(r.code == Resp.ERROR and "already settled" in r.error,
          "settling twice: ERROR '%s'" % r.error)
    r = d.ask(key="u1", rule="tokens", cost=1)
    check(r.used == 32, "and nothing changed (used %d, want 32)" % r.used)
    r = b.ask(key="u1", rule="tokens", cost=500, op=Req.RESERVE)
    h2 = r.handle
    check(r.code == Resp.OK and r.used == 532, "reserve 500: used 532")
    r = a.ask(op=Req.SETTLE, handle=h2, actual=900)
    check(r.code == Resp.OK, "settle 900 of an estimate of 500 (excess)")
    r = d.ask(key="u1", rule="tokens", cost=69)
    check(r.code == Resp.OVER_LIMIT and r.used == 932,
          "the excess is charged: 932 used, 69 more refused (used %d)"
          % r.used)
    r = d.ask(key="u1", rule="tokens", cost=68)
    check(r.code == Resp.OK and r.used == 1000, "68 more fit exactly")
    r = a.ask(key="u2", rule="tokens", cost=10, op=Req.RESERVE)
    bad = bytearray(r.handle)
    bad[len(bad) // 2] ^= 1
    r2 = a.ask(op=Req.SETTLE, handle=bytes(bad), actual=0)
    check(r2.code == Resp.ERROR and "not one this service issued" in r2.error,
          "a changed handle is refused: '%s'" % r2.error)
    r2 = a.ask(op=Req.SETTLE, handle=b"\x01junk", actual=0)
    check(r2.code == Resp.ERROR and "malformed" in r2.error,
          "a junk handle is refused: '%s'" % r2.error)
    r2 = a.ask(key="u2", rule="tokens", cost=1)
    check(r2.used == 11, "neither changed anything (used %d)" % r2.used)
    r2 = b.ask(key="u3", rule="tokens", cost=10, op=Req.RESERVE)
    r3 = b.ask(op=Req.RELEASE, handle=r2.handle)
    check(r3.code == Resp.ERROR and "lease's handle" in r3.error,
          "a reservation's handle does not release a lease")
    # Expiry: the estimate stays.
    r = a.ask(key="u4", rule="tokens", cost=40, op=Req.RESERVE)
    wait = (r.expires_at_ms - r.decided_at_ms) / 1000.0 + 0.2
    time.sleep(wait)  # the reservation's lifetime: nothing to await
    r2 = b.ask(op=Req.SETTLE, handle=r.handle, actual=0)
    check(r2.code == Resp.ERROR and "expired" in r2.error,
          "settling after the reservation expired: '%s'" % r2.error)
    r2 = d.ask(key="u4", rule="tokens", cost=1)
    check(r2.used == 41, "an expired reservation keeps its estimate (%d)"
          % r2.used)
    # Refused requests consume nothing and get no handle.
    r = a.ask(key="u1", rule="tokens", cost=5, op=Req.RESERVE)
    check(r.code == Resp.OVER_LIMIT and len(r.handle) == 0,
          "a refused reserve has no handle")


def every_algorithm(c):
    a, b, d = c
    # Every limit of the rule is full after a reserve of 20; a refund of
    # all of it makes room in all four algorithms again.
    r = a.ask(key="e1", rule="every", cost=20, op=Req.RESERVE)
    check(r.code == Resp.OK, "reserve 20 under four algorithms")
    r2 = b.ask(key="e1", rule="every", cost=1)
    check(r2.code == Resp.OVER_LIMIT, "then a check is refused")
    r3 = d.ask(op=Req.SETTLE, handle=r.handle, actual=0)
    check(r3.code == Resp.OK, "settle with 0: everything refunded")
    r2 = b.ask(key="e1", rule="every", cost=20)
    check(r2.code == Resp.OK,
          "20 fit again in every algorithm (%s, used %d, algorithm %d)"
          % (Resp.Code.Name(r2.code), r2.used, r2.algorithm))
    r2 = b.ask(key="e1", rule="every", cost=1)
    check(r2.code == Resp.OVER_LIMIT, "and no more than 20")
    # An excess refuses until the windows free it.
    r = a.ask(key="e2", rule="every", cost=5, op=Req.RESERVE)
    r3 = d.ask(op=Req.SETTLE, handle=r.handle, actual=20)
    r2 = b.ask(key="e2", rule="every", cost=1)
    check(r3.code == Resp.OK and r2.code == Resp.OVER_LIMIT,
          "an excess of 15 fills every algorithm (%s)"
          % Resp.Code.Name(r2.code))


def model_run(c, rounds=1500, seed=29):
    """Random reserves, settles (some twice), checks across instances on a
    few keys, against a model of the counter."""
    rnd = random.Random(seed)
    L = 100
    used = {}
    open_h = []
    agree = 0
    for i in range(rounds):
        conn = rnd.choice(c)
        key = "m%d" % rnd.randrange(4)
        u = used.get(key, 0)
        op = rnd.random()
        if op < 0.45:
            cost = rnd.randint(1, 30)
            r = conn.ask(key=key, rule="model", cost=cost, op=Req.RESERVE)
            ok = u + cost <= L
            want = Resp.OK if ok else Resp.OVER_LIMIT
            if r.code == want and (not ok or r.used == u + cost):
                agree += 1
            else:
                check(False, "round %d reserve %d on %s: got %s used %d, "
                      "model %s used %d" % (i, cost, key,
                                            Resp.Code.Name(r.code), r.used,
                                            Resp.Code.Name(want), u + cost))
            if ok:
                used[key] = u + cost
                open_h.append((key, cost, r.handle, time.time()))
        elif op < 0.8 and open_h:
            key, est, h, t = open_h.pop(rnd.randrange(len(open_h)))
            if time.time() - t > 2.0:
                continue  # near its expiry: left unsettled, as a client may
            actual = rnd.randint(0, 45)
            r = conn.ask(op=Req.SETTLE, handle=h, actual=actual)
            if r.code == Resp.OK:
                agree += 1
            else:
                check(False, "round %d settle: %s" % (i, r.error))
            used[key] = max(0, used.get(key, 0) + actual - est)
            if rnd.random() < 0.2:
                r = rnd.choice(c).ask(op=Req.SETTLE, handle=h, actual=0)
                if r.code == Resp.ERROR:
                    agree += 1
                else:
                    check(False, "round %d: a second settle was applied" % i)
        else:
            cost = rnd.randint(1, 10)
            r = conn.ask(key=key, rule="model", cost=cost)
            ok = u + cost <= L
            want = Resp.OK if ok else Resp.OVER_LIMIT
            if r.code == want and r.used == (u + cost if ok else u):
                agree += 1
            else:
                check(False, "round %d check %d on %s: got %s used %d, "
                      "model %s used %d" % (i, cost, key,
                                            Resp.Code.Name(r.code), r.used,
                                            Resp.Code.Name(want),
                                            u + cost if ok else u))
            if ok:
                used[key] = u + cost
        if len(FAILS) > 5:
            break
    check(agree > rounds * 0.9 and len(FAILS) == 0,
          "model run: %d answers across %d instances agree with the model"
          % (agree, len(c)))


def leases_basic(c):
    a, b, d = c
    got = []
    for i in range(LEASE_N):
        r = c[i % 3].ask(key="x1", rule="exports", op=Req.ACQUIRE)
        got.append(r)
    check(all(r.code == Resp.OK and r.handle for r in got) and
          [r.used for r in got] == list(range(1, LEASE_N + 1)),
          "%d leases across three instances: used %s"
          % (LEASE_N, [r.used for r in got]))
    r = d.ask(key="x1", rule="exports", op=Req.ACQUIRE)
    check(r.code == Resp.OVER_LIMIT and 0 < r.retry_after_ms <= 2000,
          "the next is refused, retry in %d ms (<= the lease)"
          % r.retry_after_ms)
    r = b.ask(op=Req.RELEASE, handle=got[0].handle)
    check(r.code == Resp.OK, "a lease released on another instance")
    r = b.ask(op=Req.RELEASE, handle=got[0].handle)
    check(r.code == Resp.ERROR and "not held" in r.error,
          "released twice: '%s'" % r.error)
    r = a.ask(key="x1", rule="exports", op=Req.ACQUIRE)
    check(r.code == Resp.OK, "the freed slot is taken at once")
    keep = r
    r = d.ask(key="x1", rule="exports", op=Req.CHECK)
    check(r.code == Resp.ERROR and "concurrency" in r.error,
          "a check on a concurrency rule is refused: '%s'" % r.error)
    # Renew one; let the others end by themselves.
    deadline = max(x.expires_at_ms for x in got[1:])
    while time.time() * 1000 < deadline + 300:
        r = b.ask(op=Req.RENEW, handle=keep.handle)
        if r.code != Resp.OK:
            break
        time.sleep(0.3)  # renewing while the others run out
    check(r.code == Resp.OK and r.expires_at_ms > keep.expires_at_ms,
          "renewed past its first end")
    r = d.ask(key="x1", rule="exports", op=Req.ACQUIRE)
    check(r.code == Resp.OK and r.used == 2,
          "leases never released ended by themselves: 2 alive (%d)"
          % r.used)
    r2 = a.ask(op=Req.RENEW, handle=got[1].handle)
    check(r2.code == Resp.ERROR and "ended" in r2.error,
          "renewing an ended lease: '%s'" % r2.error)
    r = a.ask(key="q1", rule="quiet", op=Req.ACQUIRE)
    r2 = b.ask(key="q1", rule="quiet", op=Req.ACQUIRE)
    check(r.code == Resp.OK and r2.code == Resp.OK and r2.shadow_refused,
          "shadow mode: the second lease of 1 is allowed, marked")
    r3 = b.ask(op=Req.RELEASE, handle=r2.handle)
    check(r3.code == Resp.OK, "and its handle releases without effect")


def leases_churn(ports, seconds=3.0, threads=12):
    """Clients on every instance acquire, hold briefly, and release, or
    crash (never release); the answers' store times say how many leases
    were alive at each grant: never more than N."""
    intervals, grants, refused = [], [], [0]
    lock = threading.Lock()
    stop = time.time() + seconds

    def worker(i):
        conn = Native(ports[i % len(ports)])
        rnd = random.Random(i)
        while time.time() < stop:
            key = "c%d" % rnd.randrange(2)
            r = conn.ask(key=key, rule="churn", op=Req.ACQUIRE)
            if r.code != Resp.OK:
                with lock:
                    refused[0] += 1
                time.sleep(min(r.retry_after_ms, 50) / 1000.0)
                continue
            start, end = r.decided_at_ms, r.expires_at_ms
            time.sleep(rnd.random() * 0.03)  # the work
            if rnd.random() < 0.8:
                r2 = conn.ask(op=Req.RELEASE, handle=r.handle)
                if r2.code == Resp.OK:
                    end = r2.decided_at_ms
            with lock:
                intervals.append((key, start, end))
                grants.append((key, start))

    ts = [threading.Thread(target=worker, args=(i,)) for i in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    # Instances read the store's clock each with its own small error:
    # allow a few ms at the edges.
    skew = 5
    worst = 0
    for key, t in grants:
        alive = sum(1 for k, s, e in intervals
                    if k == key and s <= t < e - skew)
        worst = max(worst, alive)
    check(worst <= LEASE_N and len(grants) > 50 and refused[0] > 0,
          "churn with crashes: %d leases granted, %d refused, at most %d "
          "alive at any grant (N = %d)" % (len(grants), refused[0], worst,
                                          LEASE_N))


def http(ports):
    base = "http://127.0.0.1:%d" % ports[0]["http"]
    other = "http://127.0.0.1:%d" % ports[1]["http"]

    def req(url, method="GET"):
        try:
            r = urllib.request.urlopen(
                urllib.request.Request(url, method=method, data=b"" if
                                       method == "POST" else None),
                timeout=5)
            return r.status, r.headers, r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.headers, e.read().decode()

    st, hd, body = req(base + "/check?rule=tokens&key=h1&cost=10&op=reserve")
    h = hd.get("X-RateLimit-Handle", "")
    check(st == 200 and len(h) > 20 and hd.get("X-RateLimit-Expires-At"),
          "GET /check?op=reserve: 200 with X-RateLimit-Handle")
    st, _, body = req(other + "/settle?handle=%s&actual=3" % h, "POST")
    check(st == 200 and body == "settled\n", "POST /settle: 200 settled")
    st, _, body = req(other + "/settle?handle=%s&actual=3" % h, "POST")
    check(st == 409 and "already settled" in body,
          "POST /settle again: 409 '%s'" % body.strip())
    st, _, body = req(base + "/settle?handle=%s&actual=3" % h, "GET")
    check(st == 405, "GET /settle: 405")
    st, _, body = req(base + "/settle?handle=zz&actual=3", "POST")
    check(st == 400, "POST /settle with a bad handle: 400 '%s'"
          % body.strip())
    st, _, body = req(base + "/settle?handle=%s" % h, "POST")
    check(st == 400 and "actual" in body, "POST /settle without actual: 400")
    st, hd, _ = req(base + "/check?rule=tokens&key=h1&cost=1")
    check(st == 200 and hd.get("X-RateLimit-Remaining") == "996",
          "the settlement shows in the next check (remaining %s)"
          % hd.get("X-RateLimit-Remaining"))
    st, hd, _ = req(base + "/check?rule=exports&key=h2&op=acquire")
    h = hd.get("X-RateLimit-Handle", "")
    check(st == 200 and h, "GET /check?op=acquire: 200 with a lease handle")
    st, hd, _ = req(other + "/renew?handle=%s" % h, "POST")
    check(st == 200 and hd.get("X-RateLimit-Expires-At"),
          "POST /renew: 200 with the new end")
    st, _, body = req(other + "/release?handle=%s" % h, "POST")
    check(st == 200 and body == "released\n", "POST /release: 200")
    st, _, body = req(other + "/release?handle=%s" % h, "POST")
    check(st == 409, "POST /release again: 409")


def store_timeout(ports, redis_port):
    """Redis stalls (DEBUG SLEEP) under a settlement: the answer is a
    store timeout within --redis-timeout-ms; the step runs when Redis
    wakes, and retrying is refused as settled: it happened once."""
    c = Native(ports[0]["listen"])
    r = c.ask(key="t1", rule="tokens", cost=10, op=Req.RESERVE)
    blocker = socket.create_connection(("127.0.0.1", redis_port), 5)
    blocker.sendall(b"DEBUG SLEEP 1.5\r\n")
    # Until Redis is asleep: a PING left unanswered for 100 ms.
    end = time.time() + 5
    while time.time() < end:
        p = socket.create_connection(("127.0.0.1", redis_port), 5)
        p.settimeout(0.1)
        p.sendall(b"PING\r\n")
        try:
            p.recv(16)
            asleep = False
        except socket.timeout:
            asleep = True
        p.close()
        if asleep:
            break
    check(asleep, "Redis is asleep (DEBUG SLEEP)")
    t0 = time.time()
    r2 = c.ask(op=Req.SETTLE, handle=r.handle, actual=0)
    took = time.time() - t0
    check(r2.code == Resp.ERROR and "store timeout" in r2.error,
          "a stalled store: the settlement answers '%s' after %.2f s"
          % (r2.error, took))
    blocker.settimeout(5)
    blocker.recv(16)  # +OK when Redis wakes
    blocker.close()
    end = time.time() + 5
    while time.time() < end:
        r3 = c.ask(op=Req.SETTLE, handle=r.handle, actual=0)
        if "store" not in r3.error:
            break
        time.sleep(0.02)
    check(r3.code == Resp.ERROR and "already settled" in r3.error,
          "retried once Redis woke: '%s' (the late step ran, once)"
          % r3.error)
    r4 = c.ask(key="t1", rule="tokens", cost=1)
    check(r4.used == 1, "the refund was applied exactly once (used %d)"
          % r4.used)


def redis_cmd(port, *args):
    """One command to the test's Redis; its reply decoded (bytes, int,
    list, None; an error raised)."""
    s = socket.create_connection(("127.0.0.1", port), 5)
    s.settimeout(10)
    out = b"*%d\r\n" % len(args)
    for a in args:
        a = a if isinstance(a, bytes) else str(a).encode()
        out += b"$%d\r\n%s\r\n" % (len(a), a)
    s.sendall(out)
    f = s.makefile("rb")

    def read():
        line = f.readline()[:-2]
        t, rest = line[:1], line[1:]
        if t == b"+":
            return rest
        if t == b"-":
            raise RuntimeError(rest.decode())
        if t == b":":
            return int(rest)
        if t == b"$":
            n = int(rest)
            if n < 0:
                return None
            v = f.read(n + 2)[:-2]
            return v
        if t == b"*":
            n = int(rest)
            return None if n < 0 else [read() for _ in range(n)]
        raise RuntimeError("bad reply %r" % line)

    try:
        return read()
    finally:
        f.close()
        s.close()


def caller_keys(port, pattern):
    """The keys matching pattern and what Redis says they hold."""
    keys, cur = [], b"0"
    while True:
        cur, got = redis_cmd(port, "SCAN", cur, "MATCH", pattern, "COUNT",
                             1000)
        keys += got
        if cur == b"0":
            break
    return keys, sum(redis_cmd(port, "MEMORY", "USAGE", k) or 0
                     for k in keys)


def bounded_caller(keys, mem, window_keys_max=2):
    """Whether what Redis holds for a caller after a reserve/settle probe
    is bounded by its rule: the settled set and its floor (':x', ':xf'),
    and the window counters. A run may cross the rule's minute edge (3000
    pairs take seconds on a loaded machine; it did, 1 run in 25), which
    leaves the last window's counter until it expires: two counters, not
    one, each some 256 bytes."""
    settle = [k for k in keys if k.endswith(b":x") or k.endswith(b":xf")]
    windows = len(keys) - len(settle)
    bound = 106 * 64 + (len(settle) + windows) * 256
    return len(settle) <= 2 and windows <= window_keys_max and mem <= bound


def http_refund_probe(ports, redis_port, n=400):
    """The same probe over HTTP (GET /check?op=reserve, POST /settle on
    another instance, one keep-alive connection each): bounded alike."""
    import http.client
    a = http.client.HTTPConnection("127.0.0.1", ports[0]["http"], timeout=5)
    b = http.client.HTTPConnection("127.0.0.1", ports[1]["http"], timeout=5)
    ok = 0
    for _ in range(n):
        a.request("GET", "/check?rule=probe&key=pr2&cost=1&op=reserve")
        r = a.getresponse()
        r.read()
        h = r.getheader("X-RateLimit-Handle", "")
        b.request("POST", "/settle?handle=%s&actual=0" % h, body=b"")
        s = b.getresponse()
        s.read()
        ok += r.status == 200 and s.status == 200
    a.close()
    b.close()
    keys, mem = caller_keys(redis_port, "xop:{pr2}*")
    check(ok == n and bounded_caller(keys, mem),
          "over HTTP, %d of %d reserve/settle pairs: the caller holds %d "
          "keys, %d bytes in Redis (%s)" % (ok, n, len(keys), mem,
                                            sorted(keys)))


def reserve_refund_probe(c, redis_port, n=3000):
    """Issue 40's finding 3: one connection reserving 1 and settling 0 in
    a loop, on a rule of 100/min. Every reservation is granted (each
    refund gives back what it took), but what the store then holds for
    the caller is bounded by the rule: the settled ids of one set of at
    most 100 (the rule's limit; 106 between trims), its floor and the
    counter, not a marker per settlement; a handle dropped from the set
    is refused rather than settled twice."""
    granted = settled = 0
    handles = []
    for _ in range(n):
        r = c.ask(key="pr1", rule="probe", cost=1, op=Req.RESERVE)
        if r.code != Resp.OK:
            break
        granted += 1
        handles.append(r.handle)
        if c.ask(op=Req.SETTLE, handle=r.handle, actual=0).code == Resp.OK:
            settled += 1
    check(granted == n and settled == n,
          "reserve 1, settle 0, %d times: all granted and settled "
          "(%d, %d)" % (n, granted, settled))
    keys, mem = caller_keys(redis_port, "xop:{pr1}*")
    print("     the caller's keys in Redis: %d, %d bytes" % (len(keys), mem),
          flush=True)
    # At most 106 ids between trims (a sixteenth more), some 64 bytes each
    # in Redis's skiplist; the set, its floor, and a window counter or two.
    check(bounded_caller(keys, mem),
          "what Redis holds for the caller is bounded by its rule of 100: "
          "%d keys (the settled set, its floor, at most 2 windows), %d "
          "bytes (%s)" % (len(keys), mem, sorted(keys)))
    # 200 settlements ago: past the set's bound, well within the
    # reservations' 3 s; and the first, dropped or expired by now.
    r = c.ask(op=Req.SETTLE, handle=handles[-200], actual=0)
    check(r.code == Resp.ERROR and "already settled" in r.error,
          "a handle dropped from the set is refused, not settled again: "
          "'%s'" % r.error)
    r = c.ask(op=Req.SETTLE, handle=handles[0], actual=0)
    check(r.code == Resp.ERROR, "and so is the first: '%s'" % r.error)
    r = c.ask(key="pr1", rule="probe", cost=1)
    check(r.code == Resp.OK and r.used == 1,
          "and nothing was refunded twice (used %d, want 1)" % r.used)


def forge(handle, secret, key, estimate):
    """A reservation handle (server/core/handle.h's layout) made from one this
    service issued: another caller's key, another estimate, a fresh id,
    signed as the server signs (HMAC-SHA256 under SHA-256 of the secret's
    bytes, 16 bytes)."""
    h = bytearray(handle[:-16])
    off = 33 + 22 * h[32]
    off += 1 + h[off]
    body = h[:off] + struct.pack(">H", len(key)) + key
    body[4:12] = os.urandom(8)
    body[28:32] = struct.pack(">I", estimate)
    k = hashlib.sha256(secret).digest()
    return bytes(body) + hmac.new(k, bytes(body), hashlib.sha256).digest()[:16]


def metric(port, name):
    """A sample's value on an instance's /metrics, or None."""
    text = urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port,
                                  timeout=5).read().decode()
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return None


def forged_from_store(conns, ports, store, redis_port):
    """Issue 40's finding 7: the fleet's handle secret sat in Redis in
    clear (<prefix>handle-secret), so anyone who could read Redis could
    forge a settlement that refunds a victim's whole window. An instance
    started without --handle-secret-file now warns and signs with a
    secret of its own: nothing in Redis signs handles, and a handle forged
    with what Redis holds is refused. A writer's secret in Redis is never
    adopted by the fleet (its file's secret is in force), and a handle
    forged with the fleet's own secret (the control: the forging is
    faithful) is accepted."""
    lone_p = start_servers(store, n=1, secret=False)[0]
    lone = Native(lone_p["listen"])
    ready([lone])
    with open(lone_p["log"]) as f:
        log = f.read()
    check("level=warn" in log and "--handle-secret-file" in log,
          "an instance on Redis without --handle-secret-file warns at start")
    check(metric(lone_p["metrics"], "rl_handle_secret_file") == 0 and
          all(metric(p["metrics"], "rl_handle_secret_file") == 1
              for p in ports),
          "/metrics: rl_handle_secret_file 0 there, 1 on the fleet")
    stored = redis_cmd(redis_port, "GET", "xop:handle-secret")
    check(stored is None, "nothing in Redis signs handles (GET "
          "xop:handle-secret: %r)" % (stored,))
    r = lone.ask(key="vic", rule="tokens", cost=1000)
    check(r.code == Resp.OK and r.used == 1000, "the victim uses all 1000")
    own = lone.ask(key="att", rule="tokens", cost=1, op=Req.RESERVE).handle
    for secret in (stored or b"", b"w" * 64):
        s = lone.ask(op=Req.SETTLE, handle=forge(own, secret, b"vic", 1000),
                     actual=0)
        check(s.code == Resp.ERROR and "not one this service issued" in
              s.error, "a settlement forged with %r from Redis is refused: "
              "'%s'" % (secret[:8], s.error))
    r = lone.ask(key="vic", rule="tokens", cost=1)
    check(r.code == Resp.OVER_LIMIT and r.used == 1000,
          "and the victim's window is still full (used %d)" % r.used)
    # A writer puts a secret of its own in Redis: the fleet adopts none.
    redis_cmd(redis_port, "SET", "xop:handle-secret", b"w" * 64)
    h = conns[0].ask(key="w1", rule="tokens", cost=5, op=Req.RESERVE).handle
    conns[1].ask(key="vic2", rule="tokens", cost=1000)
    s = conns[1].ask(op=Req.SETTLE, handle=forge(h, b"w" * 64, b"vic2", 1000),
                     actual=0)
    check(s.code == Resp.ERROR and "not one this service issued" in s.error,
          "a handle signed with a writer's secret in Redis is refused by "
          "the fleet: '%s'" % s.error)
    s = conns[2].ask(op=Req.SETTLE, handle=forge(h, SECRET, b"vic2", 1000),
                     actual=0)
    r = conns[0].ask(key="vic2", rule="tokens", cost=1)
    check(s.code == Resp.OK and r.code == Resp.OK and r.used == 1,
          "the control: forged with the fleet's file secret, it is accepted "
          "(%s, used %d)" % (Resp.Code.Name(s.code), r.used))
    s = conns[2].ask(op=Req.SETTLE, handle=h, actual=5)
    check(s.code == Resp.OK, "and the fleet's own handles still settle")
    redis_cmd(redis_port, "DEL", "xop:handle-secret")


def v1_handles(conns, redis_port):
    """Handles are version 2; a version 1 handle (a server's before the
    settled set, which settled through a marker "<key>:x<id>" per
    reservation) is still taken, and refused as settled while its marker
    is in Redis, so a rolling upgrade never settles one twice (and a
    server of before refuses version 2 handles as malformed)."""
    a, b, d = conns

    def v1(handle):
        body = bytearray(handle[:-16])
        body[0] = 1
        k = hashlib.sha256(SECRET).digest()
        return bytes(body) + hmac.new(k, bytes(body),
                                      hashlib.sha256).digest()[:16]

    r = a.ask(key="v1a", rule="tokens", cost=10, op=Req.RESERVE)
    check(r.code == Resp.OK and r.handle[0] == 2, "a handle is version 2")
    redis_cmd(redis_port, "SET", "xop:{v1a}:r:tokens:x" + r.handle[4:12].hex(),
              1, "PX", 60000)
    s = b.ask(op=Req.SETTLE, handle=v1(r.handle), actual=0)
    u = d.ask(key="v1a", rule="tokens", cost=1)
    check(s.code == Resp.ERROR and "already settled" in s.error and
          u.used == 11,
          "a version 1 handle whose marker is in Redis: refused, its "
          "estimate stays ('%s', used %d)" % (s.error, u.used))
    r = a.ask(key="v1b", rule="tokens", cost=10, op=Req.RESERVE)
    s = b.ask(op=Req.SETTLE, handle=v1(r.handle), actual=0)
    s2 = d.ask(op=Req.SETTLE, handle=v1(r.handle), actual=0)
    u = d.ask(key="v1b", rule="tokens", cost=1)
    check(s.code == Resp.OK and s2.code == Resp.ERROR and u.used == 1,
          "one without a marker settles, once (used %d)" % u.used)


def secret_after_flush(conns, store, redis_port):
    """Redis loses its data (FLUSHALL, as a restart without persistence
    would) and a new instance starts: with the fleet's secret in a file,
    nothing of it was in the store, so a reservation made on an old
    instance settles on the new one, and the other way round."""
    r = socket.create_connection(("127.0.0.1", redis_port), 5)
    r.sendall(b"FLUSHALL\r\n")
    r.settimeout(5)
    check(r.recv(16).startswith(b"+OK"), "FLUSHALL")
    r.close()
    new = Native(start_servers(store, n=1)[0]["listen"])
    ready([new])
    end, ok = time.time() + 15, False
    while time.time() < end and not ok:
        a = conns[0].ask(key="fl1", rule="tokens", cost=2, op=Req.RESERVE)
        b = new.ask(key="fl2", rule="tokens", cost=2, op=Req.RESERVE)
        ok = (new.ask(op=Req.SETTLE, handle=a.handle, actual=1).code ==
              Resp.OK and
              conns[1].ask(op=Req.SETTLE, handle=b.handle,
                           actual=1).code == Resp.OK)
        if not ok:
            time.sleep(0.1)
    check(ok, "after the store lost its data, old and new instances agree "
          "on one secret (handles settle across them)")
    # The flush took the fleet's report (<prefix>instances) too, which
    # rl-ctl waits on: until every live instance is in it again.
    want = sum(1 for p in PROCS if p.poll() is None and p.args[0] == RL_SERVER)
    end = time.time() + 10
    while (redis_cmd(redis_port, "HLEN", "xop:instances") < want and
           time.time() < end):
        time.sleep(0.05)
    check(redis_cmd(redis_port, "HLEN", "xop:instances") >= want,
          "every instance (%d) reports to the store again" % want)
    return new


def stored_quota(c, store):
    """rl-ctl's stored quota for a concurrency rule sets the caller's N
    (its one "N/S"), scaled, across the fleet."""
    rl_ctl = os.path.join(os.path.dirname(os.path.dirname(RL_SERVER)), "tools", "rl-ctl")
    addr = (["--redis-cluster", store[1]] if store[0] == "--redis-cluster"
            else ["--redis", store[1]])
    out = subprocess.run([rl_ctl] + addr + ["--prefix", "xop:", "--wait-ms",
                                            "10000", "quota", "set",
                                            "exports", "big", "8/60s"],
                         capture_output=True, text=True, timeout=30)
    check(out.returncode == 0, "rl-ctl quota set exports big 8/60s: %s"
          % (out.stdout + out.stderr).strip()[:200])
    got = [c[i % 3].ask(key="big", rule="exports", op=Req.ACQUIRE)
           for i in range(9)]
    codes = [r.code for r in got]
    check(codes == [Resp.OK] * 8 + [Resp.OVER_LIMIT] and got[0].limit == 8,
          "a stored quota of 8 leases for one caller: 8 granted, the 9th "
          "refused (limit %d)" % got[0].limit)
    r = c[0].ask(key="small", rule="exports", op=Req.ACQUIRE)
    check(r.code == Resp.OK and r.limit == LEASE_N,
          "other callers keep the rule's %d" % LEASE_N)


def switches_and_metrics(c, store, ports):
    """rl-ctl's mode off on a concurrency rule: leases allowed, nothing
    taken (their release changes nothing); back to the file's mode. And
    the per-rule counters on /metrics."""
    rl_ctl = os.path.join(os.path.dirname(os.path.dirname(RL_SERVER)), "tools", "rl-ctl")
    addr = (["--redis-cluster", store[1]] if store[0] == "--redis-cluster"
            else ["--redis", store[1]])

    def ctl(*args):
        return subprocess.run([rl_ctl] + addr + ["--prefix", "xop:",
                                                 "--wait-ms", "10000"] +
                              list(args), capture_output=True, text=True,
                              timeout=30).returncode

    check(ctl("mode", "quiet", "off") == 0, "rl-ctl mode quiet off")
    rs = [c[i % 3].ask(key="off1", rule="quiet", op=Req.ACQUIRE)
          for i in range(3)]
    check(all(r.code == Resp.OK and r.handle and not r.shadow_refused
              for r in rs),
          "mode off: 3 leases of a rule of 1 allowed, uncounted")
    r = c[1].ask(op=Req.RELEASE, handle=rs[0].handle)
    check(r.code == Resp.OK, "and released without effect")
    check(ctl("mode", "quiet", "default") == 0, "rl-ctl mode quiet default")
    r1 = c[0].ask(key="off2", rule="quiet", op=Req.ACQUIRE)
    r2 = c[2].ask(key="off2", rule="quiet", op=Req.ACQUIRE)
    check(r1.code == Resp.OK and not r1.shadow_refused and
          r2.code == Resp.OK and r2.shadow_refused,
          "back to the file's mode (shadow): the second lease is marked")
    text = ""
    for p in ports:
        text += urllib.request.urlopen(
            "http://127.0.0.1:%d/metrics" % p["metrics"], timeout=5).read(
        ).decode()

    def total(prefix):
        return sum(float(l.rsplit(" ", 1)[1]) for l in text.splitlines()
                   if l.startswith(prefix))

    check(total('rl_rule_handle_ops_total{rule="tokens",result="settled"}')
          > 0 and
          total('rl_rule_handle_ops_total{rule="exports",result="released"}')
          > 0 and
          total('rl_rule_handle_ops_total{rule="tokens",result="refused"}')
          > 0 and
          total('rl_rule_settled_cost_total{rule="tokens",kind="refunded"}')
          > 0 and
          total('rl_rule_decisions_total{rule="exports",result="refused"}')
          > 0,
          "/metrics: settlements, releases, refusals, refunded cost and "
          "lease refusals per rule")


def fail_open(ports, redis_proc):
    c = Native(ports[0]["listen"])
    redis_proc.kill()
    redis_proc.wait()
    end = time.time() + 10
    while time.time() < end:
        r = c.ask(key="f1", rule="tokens", cost=5, op=Req.RESERVE)
        if r.failed_open:
            break
        time.sleep(0.05)
    check(r.code == Resp.OK and r.failed_open and len(r.handle) > 0,
          "store gone: reserve answers OK, failed_open, with a handle")
    r2 = c.ask(op=Req.SETTLE, handle=r.handle, actual=50)
    check(r2.code == Resp.OK, "whose settlement changes nothing and succeeds")
    r = c.ask(key="f1", rule="exports", op=Req.ACQUIRE)
    check(r.code == Resp.OK and r.failed_open,
          "acquire answers OK, failed_open")
    r2 = c.ask(op=Req.RELEASE, handle=r.handle)
    check(r2.code == Resp.OK, "and its lease releases without effect")


def main():
    redis_proc = None
    store = STORE_ARGS
    if not store:
        port, redis_proc = rlt.start_redis(
            TMP, ("--enable-debug-command", "yes"), REDIS, PROCS)
        store = ["--redis", "127.0.0.1:%d" % port]
    ports = start_servers(store)
    conns = [Native(p["listen"]) for p in ports]
    ready(conns)
    reservations(conns)
    every_algorithm(conns)
    model_run(conns)
    leases_basic(conns)
    leases_churn([p["listen"] for p in ports])
    http(ports)
    if redis_proc is not None:
        reserve_refund_probe(conns[0], int(store[1].rsplit(":", 1)[1]))
        http_refund_probe(ports, int(store[1].rsplit(":", 1)[1]))
        forged_from_store(conns, ports, store,
                          int(store[1].rsplit(":", 1)[1]))
        v1_handles(conns, int(store[1].rsplit(":", 1)[1]))
        secret_after_flush(conns, store, int(store[1].rsplit(":", 1)[1]))
    stored_quota(conns, store)
    switches_and_metrics(conns, store, ports)
    if redis_proc is not None:
        store_timeout(ports, int(store[1].rsplit(":", 1)[1]))
        fail_open(ports, redis_proc)
    rlt.end_run(FAILS, PROCS, TMP)


try:
    main()
except Exception as e:  # a crash is a failure, with what was started stopped
    import traceback
    traceback.print_exc()
    FAILS.append(repr(e))
    rlt.end_run(FAILS, PROCS, TMP)
