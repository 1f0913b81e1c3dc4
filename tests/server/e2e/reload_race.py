#!/usr/bin/python3
"""The reload race: the rules file (--config) and an Envoy descriptor file
(--envoy-config) changed in every awkward way while requests flow.

Usage: reload_race.py RL_SERVER PROTO_DIR

Two clients run throughout, one asking /check (--http) for the rules
file's rules, one calling ShouldRateLimit (--grpc) for the Envoy file's
descriptors, each request with a 10 s deadline. Meanwhile the harness:

  - writes each file in place, in pieces, pausing between them (cut where
    what was written so far still parses: inside "1h", inside a number,
    before the last rule), and waits for the whole version to be in force;
  - renames a FIFO, a directory and a socket over each file, waits for the
    refusal to be counted, then renames a good version over again;
  - with the files mounted as the kubelet mounts a ConfigMap (the path a
    link through ..data, ..data a link to a timestamped directory),
    switches ..data to new versions, some in quick succession.

Every answer must come from a whole version written (no limit, window or
missing rule that only a part of a file would give), no request may go
unanswered past its deadline (the server never blocks), each non-regular
file is refused with exactly one error line, and the last version written
is the one in force. Prints the worst request latency seen. Exit 0, or 1
with every failure listed."""

import http.client
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "..", "support"))
import rlt  # noqa: E402

RL_SERVER, PROTO_DIR = sys.argv[1], sys.argv[2]
TMP = tempfile.mkdtemp(prefix="rl-race-")
FAILS = []
# A blocked server (a FIFO opened for reading waits for a writer that
# never comes) misses any deadline; a slow one does not. 2 s was missed by
# requests that were only slow, under ASan at a load average of 9.
DEADLINE_S = 10.0


def check(cond, what):
    if not cond:
        FAILS.append(what)
        print("FAIL:", what, flush=True)


rlt.envoy_stubs(PROTO_DIR, TMP)
import grpc  # noqa: E402
from envoy.service.ratelimit.v3 import rls_pb2, rls_pb2_grpc  # noqa: E402
from envoy.extensions.common.ratelimit.v3 import ratelimit_pb2  # noqa: E402

HOUR, MINUTE = rls_pb2.RateLimitResponse.RateLimit.HOUR, \
    rls_pb2.RateLimitResponse.RateLimit.MINUTE


# ---- the versions ----------------------------------------------------------
# Version k of each file. No prefix of a number is another version's
# number (7001..7999, 301..399), so a file cut inside a number, inside a
# unit or before its last entry gives answers no version gives.

def rules_text(k):
    return ("rules:\n"
            "  api:\n"
            "    limits: %d/1h\n"
            "  mid:\n"
            "    limits: [5/1m]\n"
            "  last:\n"
            "    limits: %d/1m\n" % (7000 + k, 300 + k))


def rules_answers(k):
    return {"api": (7000 + k, 3600), "last": (300 + k, 60)}


def envoy_text(k):
    return ("domain: race\n"
            "descriptors:\n"
            "  - key: k\n"
            "    rate_limit:\n"
            "      unit: hour\n"
            "      requests_per_unit: %d\n"
            "  - key: z\n"
            "    rate_limit:\n"
            "      unit: minute\n"
            "      requests_per_unit: %d\n" % (7000 + k, 300 + k))


def envoy_answers(k):
    return {"k": (7000 + k, HOUR), "z": (300 + k, MINUTE)}


def cuts(text):
    """Where a slow writer pauses: inside the first unit, inside the last
    number, and just before the last entry."""
    a = text.index("/1h") + 2 if "/1h" in text else text.index("hour") + 2
    b = text.rindex("30") + 1
    c = text.rindex("  last:") if "  last:" in text else text.rindex("  - key")
    return sorted({a, b, c})


# ---- the server and its clients --------------------------------------------

class Server:
    started = 0

    def __init__(self, rules, envoy):
        Server.started += 1
        self.log_path = os.path.join(TMP, "server-%d.log" % Server.started)
        ports = os.path.join(TMP, "server-%d.ports" % Server.started)
        self.log = open(self.log_path, "w")
        self.proc = subprocess.Popen(
            [RL_SERVER, "--listen", "127.0.0.1:0", "--http", "127.0.0.1:0",
             "--grpc", "127.0.0.1:0", "--metrics", "127.0.0.1:0",
             "--port-file", ports, "--config", rules,
             "--envoy-config", envoy, "--log-level", "info"],
            stdout=subprocess.DEVNULL, stderr=self.log)
        got = rlt.wait_ports(self.proc, ports, self.log_path)
        self.hport, self.gport, self.mport = got["http"], got["grpc"], \
            got["metrics"]

    def metric(self, name):
        c = http.client.HTTPConnection("127.0.0.1", self.mport, timeout=5)
        c.request("GET", "/metrics")
        page = c.getresponse().read().decode()
        c.close()
        for line in page.splitlines():
            if line.split(" ")[0] == name:
                return int(float(line.split(" ")[1]))
        return 0

    def log_lines(self, *want):
        with open(self.log_path, errors="replace") as f:
            return sum(1 for line in f if all(w in line for w in want))

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            rc = self.proc.wait()
        self.log.close()
        return rc


class Clients:
    """Requests on both front ends until stopped; every answer checked
    against the versions written so far."""

    def __init__(self, srv):
        self.srv = srv
        self.stop_flag = False
        self.lock = threading.Lock()
        self.rules_ok = set()   # (rule, limit, window) of whole versions
        self.envoy_ok = set()   # (key, rpu, unit)
        self.seen_rules = {}    # rule -> last (limit, window)
        self.seen_envoy = {}
        self.bad = []
        self.late = 0
        self.errors = []
        self.worst = 0.0
        self.count = 0
        self.threads = [threading.Thread(target=self.run_http),
                        threading.Thread(target=self.run_grpc)]

    def allow(self, rules, envoy):
        with self.lock:
            for r, (lim, win) in rules.items():
                self.rules_ok.add((r, lim, win))
            for k, (rpu, unit) in envoy.items():
                self.envoy_ok.add((k, rpu, unit))

    def took(self, t):
        with self.lock:
            self.count += 1
            self.worst = max(self.worst, t)
            if t > DEADLINE_S:
                self.late += 1

    def run_http(self):
        conn = None
        while not self.stop_flag:
            for rule in ("api", "last"):
                t0 = time.monotonic()
                try:
                    if conn is None:
                        conn = http.client.HTTPConnection(
                            "127.0.0.1", self.srv.hport, timeout=DEADLINE_S)
                    conn.request("GET", "/check?rule=%s&key=c" % rule)
                    resp = conn.getresponse()
                    body = resp.read().decode(errors="replace")
                except (OSError, http.client.HTTPException) as e:
                    self.took(time.monotonic() - t0)
                    with self.lock:
                        self.errors.append("http %s: %r" % (rule, e))
                    conn = None
                    continue
                self.took(time.monotonic() - t0)
                if resp.status not in (200, 429):
                    with self.lock:
                        self.bad.append("http %s: %d %s" % (rule, resp.status,
                                                            body.strip()))
                    continue
                lim = int(resp.getheader("X-RateLimit-Limit"))
                pol = resp.getheader("RateLimit-Policy")
                win = int(pol.rsplit("w=", 1)[1])
                with self.lock:
                    self.seen_rules[rule] = (lim, win)
                    if (rule, lim, win) not in self.rules_ok:
                        self.bad.append("http %s: %d/%ds is no version's" %
                                        (rule, lim, win))

    def run_grpc(self):
        ch = grpc.insecure_channel("127.0.0.1:%d" % self.srv.gport)
        stub = rls_pb2_grpc.RateLimitServiceStub(ch)
        while not self.stop_flag:
            for key in ("k", "z"):
                req = rls_pb2.RateLimitRequest(domain="race", descriptors=[
                    ratelimit_pb2.RateLimitDescriptor(entries=[
                        ratelimit_pb2.RateLimitDescriptor.Entry(
                            key=key, value="v")])])
                t0 = time.monotonic()
                try:
                    r = stub.ShouldRateLimit(req, timeout=DEADLINE_S)
                except grpc.RpcError as e:
                    self.took(time.monotonic() - t0)
                    with self.lock:
                        self.errors.append("grpc %s: %s" % (key, e.code()))
                    continue
                self.took(time.monotonic() - t0)
                st = r.statuses[0]
                got = (key, st.current_limit.requests_per_unit,
                       st.current_limit.unit) if st.HasField(
                           "current_limit") else (key, 0, 0)
                with self.lock:
                    self.seen_envoy[key] = got[1:]
                    if got not in self.envoy_ok:
                        self.bad.append("grpc %s: %d per unit %d is no "
                                        "version's" % got)
        ch.close()

    def start(self):
        for t in self.threads:
            t.start()

    def stop(self):
        self.stop_flag = True
        for t in self.threads:
            t.join(30)
            check(not t.is_alive(), "a client thread stopped")

    def wait_in_force(self, rules, envoy, what, timeout_s=15):
        """Until the clients have seen exactly these answers."""
        want_r = dict(rules)
        want_e = dict(envoy)
        end = time.time() + timeout_s
        while time.time() < end:
            with self.lock:
                ok = all(self.seen_rules.get(r) == v
                         for r, v in want_r.items()) and \
                    all(self.seen_envoy.get(k) == v
                        for k, v in want_e.items())
            if ok:
                return
            time.sleep(0.02)
        check(False, "%s: version in force within %d s (rules %r, envoy %r)"
              % (what, timeout_s, self.seen_rules, self.seen_envoy))


# ---- what is done to the files ---------------------------------------------

def write_aside(path, text):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.rename(tmp, path)


def write_slowly(path, text, pause_s):
    """In place, in pieces, pausing at each cut."""
    with open(path, "r+") as f:
        f.truncate(0)
        done = 0
        for c in cuts(text) + [len(text)]:
            f.write(text[done:c])
            f.flush()
            done = c
            if c < len(text):
                time.sleep(pause_s)


def not_regular(kind, at):
    """Makes a FIFO, a directory or a socket at `at`; returns what to
    close afterwards (or None)."""
    if kind == "FIFO":
        os.mkfifo(at)
    elif kind == "directory":
        os.mkdir(at)
    else:
        s = socket.socket(socket.AF_UNIX)
        s.bind(at)
        return s
    return None


def remove(path):
    if os.path.isdir(path) and not os.path.islink(path):
        os.rmdir(path)
    elif os.path.lexists(path):
        os.unlink(path)


def plain_files():
    rules = os.path.join(TMP, "plain", "rules.yaml")
    envoy = os.path.join(TMP, "plain", "envoy.yaml")
    os.mkdir(os.path.dirname(rules))
    write_aside(rules, rules_text(0))
    write_aside(envoy, envoy_text(0))
    srv = Server(rules, envoy)
    cl = Clients(srv)
    cl.allow(rules_answers(0), envoy_answers(0))
    cl.start()
    try:
        cl.wait_in_force(rules_answers(0), envoy_answers(0), "start")
        k = 0
        # In place, in pieces, pauses well past the watch's debounce and
        # within its settle time.
        for _ in range(3):
            k += 1
            cl.allow(rules_answers(k), envoy_answers(k))
            write_slowly(rules, rules_text(k), 0.3)
            write_slowly(envoy, envoy_text(k), 0.3)
            cl.wait_in_force(rules_answers(k), envoy_answers(k),
                             "in place, version %d" % k)
        # Non-regular files renamed over each file, one after the other:
        # each refused once, the server answering throughout.
        for kind in ("FIFO", "directory", "socket"):
            for path, metric in ((rules, "rl_config_reload_failures_total"),
                                 (envoy,
                                  "rl_envoy_config_reload_failures_total")):
                at = os.path.join(TMP, "plain", "incoming")
                base = srv.metric(metric)
                keep = not_regular(kind, at)
                remove(path)
                os.rename(at, path)
                end, got = time.time() + 15, base
                while time.time() < end and got < base + 1:
                    time.sleep(0.05)
                    try:
                        got = srv.metric(metric)
                    except OSError as e:
                        check(False, "%s over %s: the server answers "
                              "(/metrics: %r)" % (kind, path, e))
                        raise
                check(got == base + 1, "%s over %s: refused once (%d)" %
                      (kind, path, got - base))
                remove(path)
                if keep is not None:
                    keep.close()
            k += 1
            cl.allow(rules_answers(k), envoy_answers(k))
            write_aside(rules, rules_text(k))
            write_aside(envoy, envoy_text(k))
            cl.wait_in_force(rules_answers(k), envoy_answers(k),
                             "after the %s, version %d" % (kind, k))
        for kind in ("FIFO", "directory", "socket"):
            check(srv.log_lines("rules not reloaded",
                                "not a regular file (a %s)" % kind) == 1,
                  "one error line for the rules file as a %s" % kind)
            check(srv.log_lines("envoy config not reloaded",
                                "not a regular file (a %s)" % kind) == 1,
                  "one error line for the envoy file as a %s" % kind)
    finally:
        cl.stop()
        check(srv.stop() == 0, "plain: server exit 0")
    return cl


def configmap_version(cm, v, files):
    ts = "..2026_01_01_00_00_%02d.%09d" % (v % 60, 100000 + v)
    os.mkdir(os.path.join(cm, ts))
    for name, text in files.items():
        with open(os.path.join(cm, ts, name), "w") as f:
            f.write(text)
    tmp = os.path.join(cm, "..data_tmp")
    os.symlink(ts, tmp)
    old = os.readlink(os.path.join(cm, "..data")) \
        if os.path.lexists(os.path.join(cm, "..data")) else None
    os.rename(tmp, os.path.join(cm, "..data"))
    if old:
        shutil.rmtree(os.path.join(cm, old))
    for name in files:
        link = os.path.join(cm, name)
        if not os.path.lexists(link):
            os.symlink(os.path.join("..data", name), link)


def configmap():
    cm = os.path.join(TMP, "cm")
    os.mkdir(cm)
    configmap_version(cm, 0, {"rules.yaml": rules_text(0),
                              "envoy.yaml": envoy_text(0)})
    srv = Server(os.path.join(cm, "rules.yaml"),
                 os.path.join(cm, "envoy.yaml"))
    cl = Clients(srv)
    cl.allow(rules_answers(0), envoy_answers(0))
    cl.start()
    try:
        cl.wait_in_force(rules_answers(0), envoy_answers(0), "configmap start")
        for v in range(1, 5):
            cl.allow(rules_answers(v), envoy_answers(v))
            configmap_version(cm, v, {"rules.yaml": rules_text(v),
                                      "envoy.yaml": envoy_text(v)})
            cl.wait_in_force(rules_answers(v), envoy_answers(v),
                             "configmap version %d" % v)
        # Three switches in quick succession: the last one wins.
        for v in range(5, 8):
            cl.allow(rules_answers(v), envoy_answers(v))
            configmap_version(cm, v, {"rules.yaml": rules_text(v),
                                      "envoy.yaml": envoy_text(v)})
            time.sleep(0.1)
        cl.wait_in_force(rules_answers(7), envoy_answers(7),
                         "configmap, last of three quick switches")
        check(srv.metric("rl_config_reload_failures_total") == 0,
              "configmap: no rules reload refused")
        check(srv.metric("rl_envoy_config_reload_failures_total") == 0,
              "configmap: no envoy reload refused")
    finally:
        cl.stop()
        check(srv.stop() == 0, "configmap: server exit 0")
    return cl


def report(name, cl):
    check(not cl.bad, "%s: every answer from a whole version (%d not: %s)"
          % (name, len(cl.bad), cl.bad[:5]))
    check(not cl.errors, "%s: every request answered (%d not: %s)"
          % (name, len(cl.errors), cl.errors[:5]))
    check(cl.late == 0, "%s: no request over %.0f s" % (name, DEADLINE_S))
    print("%s: %d requests, worst %.1f ms" % (name, cl.count,
                                              cl.worst * 1000), flush=True)


def main():
    try:
        report("plain files", plain_files())
        report("configmap", configmap())
    finally:
        shutil.rmtree(TMP, ignore_errors=True)
    if FAILS:
        print("%d passed, %d failed" % (0, len(FAILS)))
        sys.exit(1)
    print("1 passed, 0 failed")


main()
