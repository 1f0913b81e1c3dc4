#!/usr/bin/python3
"""--fail-local: three rl-servers share one Redis (appendonly, so a
restart keeps its counters) and a rule of 300 a day, each loaded by its
own rl-check at the same time. Some requests are decided by Redis; then
Redis is killed (-9) mid-window, between requests (a batch Redis ran
whose answer was lost would be counted there and charged again: the kill
is placed so no batch is in flight, which keeps the equality below
exact), and each server decides alone on its share (300 / 3 live
instances): the fleet admits the limit within 10 % during the outage; Redis comes back on the same
port and every server adds what it admitted alone, so the window's
counter in Redis equals every admission of the run, counted from the
answers.

Then the same outage on another caller, but Redis comes back empty (its
append-only file removed): each server sends what it admitted alone as
soon as Redis is back, and keeps deciding on its share until its charges
are in and 2 s more (the fleet's come in meanwhile). Checks on the three
at once in that time are refused (the shares are spent); once no server
decides alone, checks on each server in turn are refused by Redis, which
holds exactly the 300 (the first batch used to go before the charges:
100, then 200, then 300 were in Redis before each server's first check,
and all three were admitted).

Usage: e2e_fail_local.py RL_SERVER RL_CHECK REDIS_SERVER"""
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "..", "support"))
import rlt  # noqa: E402

RL_SERVER, RL_CHECK, REDIS = sys.argv[1:4]
REDIS_CLI = shutil.which("redis-cli") or os.path.join(
    os.path.dirname(shutil.which(REDIS) or REDIS), "redis-cli")
TMP = tempfile.mkdtemp(prefix="rl-fail-local-")
FAILS = []
PROCS = []
LIMIT, SERVERS, DAY = 300, 3, 86400


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what, flush=True)
    if not cond:
        FAILS.append(what)


def wait_for(cond, what, timeout_s=15):
    end = time.time() + timeout_s
    while time.time() < end:
        if cond():
            return True
        time.sleep(0.02)
    check(False, what + " (timed out)")
    return False


def start_redis(port=None):
    """Redis with every write in its append-only file, so that a kill -9
    and a restart on the same port keep the counters."""
    extra = ["--appendonly", "yes", "--appendfsync", "always"]
    if port is None:
        port, p = rlt.start_redis(TMP, extra, REDIS, PROCS)
        return port, p
    log = os.path.join(TMP, "redis-%d-again.log" % port)
    p = subprocess.Popen([REDIS, "--port", str(port), "--bind", "127.0.0.1",
                          "--save", "", "--dir", TMP, "--logfile", log] +
                         extra, stdout=subprocess.DEVNULL)
    PROCS.append(p)
    rlt.wait_listen(port, p, log)
    return port, p


class Server:
    def __init__(self, n, rport):
        ports = os.path.join(TMP, "server-%d.ports" % n)
        self.log = open(os.path.join(TMP, "server-%d.log" % n), "w")
        self.p = subprocess.Popen(
            [RL_SERVER, "--listen", "127.0.0.1:0", "--metrics",
             "127.0.0.1:0", "--port-file", ports, "--redis",
             "127.0.0.1:%d" % rport, "--fail-local", "--rule",
             "t=%d/1d" % LIMIT, "--redis-timeout-ms", "500"],
            stderr=self.log)
        PROCS.append(self.p)
        got = rlt.wait_ports(self.p, ports, self.log.name)
        self.port, self.mport = got["listen"], got["metrics"]

    def metric(self, name):
        text = urllib.request.urlopen("http://127.0.0.1:%d/metrics"
                                      % self.mport, timeout=5).read().decode()
        m = re.search(r"^%s (\d+)$" % re.escape(name), text, re.M)
        return int(m.group(1)) if m else -1

    def start_checks(self, n, key="k"):
        """n checks of rule t for key, one after another, by rl-check."""
        return subprocess.Popen(
            [RL_CHECK, "--server", "127.0.0.1:%d" % self.port, "--key", key,
             "--rule", "t", "--repeat", str(n), "--timeout", "3000"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def checks(self, n, key="k"):
        return allowed([self.start_checks(n, key)], n)[0]

    def healthz(self):
        try:
            r = urllib.request.urlopen("http://127.0.0.1:%d/healthz"
                                       % self.mport, timeout=5)
            return r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()

    def stop(self):
        self.p.send_signal(signal.SIGTERM)
        rc = self.p.wait(20)
        self.log.close()
        return rc


def allowed(procs, n):
    """Waits for the rl-checks; each must have answered all n checks with
    a decision (OK or OVER_LIMIT, never ERROR). Returns how many each
    allowed."""
    out = []
    for p in procs:
        stdout, stderr = p.communicate(timeout=60)
        lines = stdout.splitlines()
        if len(lines) != n or any(not (x.startswith("OK ") or
                                       x.startswith("OVER_LIMIT "))
                                  for x in lines):
            check(False, "%d decisions for %d checks: %s %s"
                  % (len(lines), n, lines[-1:], stderr.strip()))
        out.append(sum(1 for x in lines if x.startswith("OK ")))
    return out


def redis_total(port, key="k"):
    """The sum of every window counter of rule t for caller key."""
    keys = subprocess.run([REDIS_CLI, "-p", str(port), "--scan", "--pattern",
                           "*{%s}:r:t:*" % key], capture_output=True,
                          text=True,
                          timeout=10).stdout.split()
    total = 0
    for k in keys:
        v = subprocess.run([REDIS_CLI, "-p", str(port), "GET", k],
                           capture_output=True, text=True,
                           timeout=10).stdout.strip()
        total += int(v or 0)
    return total, keys


def empty_restart(servers, rport, redis):
    day = int(time.time()) // DAY
    redis.kill()
    redis.wait()
    outage = allowed([s.start_checks(LIMIT // SERVERS, "e")
                      for s in servers], LIMIT // SERVERS)
    if int(time.time()) // DAY != day:
        print("-- the day's window ended during the outage: the empty "
              "restart is not checked this run")
        return
    check(outage == [LIMIT // SERVERS] * SERVERS,
          "second outage: each server admitted its share (%s)" % outage)
    shutil.rmtree(os.path.join(TMP, "appendonlydir"), ignore_errors=True)
    rport, redis = start_redis(rport)
    settling = allowed([s.start_checks(20, "e") for s in servers], 20)
    check(settling == [0, 0, 0],
          "Redis back empty: the shares stay spent while the charges come "
          "in (%s allowed)" % settling)
    for s in servers:
        wait_for(lambda: s.metric("rl_fail_local_deciding") == 0,
                 "a server decides with Redis again")
        check(s.metric('rl_fail_local_charges_total{result="charged"}') >= 2,
              "its charges are in")
    got = [s.checks(1, "e") for s in servers]
    check(got == [0, 0, 0],
          "after an empty restart, Redis decides with every server's local "
          "admissions counted: allowed %s, want [0, 0, 0]" % got)
    total, keys = redis_total(rport, "e")
    check(total == LIMIT,
          "the empty Redis holds exactly the outage's %d: %d (keys %s)"
          % (LIMIT, total, keys))


def main():
    rport, redis = start_redis()
    servers = [Server(i, rport) for i in range(SERVERS)]
    for s in servers:
        wait_for(lambda: s.metric("rl_fleet_instances_seen") == SERVERS,
                 "a server sees %d live instances" % SERVERS)

    # Redis decides: 10 from each server, the three at once.
    before = sum(allowed([s.start_checks(10) for s in servers], 10))
    check(before == 30, "Redis up: 30 of 30 allowed (%d)" % before)

    # Redis gone mid-window: each server on its share.
    day = int(time.time()) // DAY
    redis.kill()
    redis.wait()
    # Load on the three at once while Redis is away.
    outage = allowed([s.start_checks(2 * LIMIT // SERVERS) for s in servers],
                     2 * LIMIT // SERVERS)
    crossed = int(time.time()) // DAY != day
    print("admitted during the outage, per server:", outage)
    if crossed:
        print("-- the day's window ended during the outage: its bound is "
              "not checked this run")
    else:
        check(abs(sum(outage) - LIMIT) <= LIMIT // 10,
              "outage: the fleet admitted %d, within 10 %% of %d"
              % (sum(outage), LIMIT))
        check(all(o == LIMIT // SERVERS for o in outage),
              "outage: each server admitted its share, %d" % (LIMIT //
                                                             SERVERS))
    for s in servers:
        check(s.metric("rl_decided_local_total") >= 2 * LIMIT // SERVERS,
              "decided locally, counted in /metrics")
        check(s.metric("rl_fail_local_charges_pending") >= 1,
              "charges pending while Redis is away")
        code, text = s.healthz()
        check(code == 200 and "share" in text,
              "healthy while deciding on its share (%d %s)" % (code,
                                                              text.strip()))

    # Redis back on its port, with its counters: the next batch each
    # server gets through sends its charges.
    rport, redis = start_redis(rport)
    after = 0
    for s in servers:
        def sent():
            nonlocal after
            after += s.checks(1)
            return s.metric("rl_fail_local_charges_pending") == 0
        wait_for(sent, "a server's charges reach Redis")
        check(s.metric('rl_fail_local_charges_total{result="charged"}') >= 1,
              "charges counted as charged")
    total, keys = redis_total(rport)
    admitted = before + sum(outage) + after
    check(total == admitted,
          "Redis's counters hold every admission: %d == %d (%d before, %d "
          "during, %d after; keys %s)" % (total, admitted, before,
                                          sum(outage), after, keys))
    empty_restart(servers, rport, redis)
    for s in servers:
        check(s.stop() == 0, "stopped cleanly")
        with open(s.log.name) as f:
            log = f.read()
        check("ERROR" not in log or "store" in log, "no unexpected error")


try:
    main()
except Exception as e:  # a crash is a failure; the processes still stop
    import traceback
    traceback.print_exc()
    FAILS.append("exception: %s" % e)
rlt.end_run(FAILS, PROCS, TMP)
