#!/usr/bin/python3
"""A Redis Sentinel failover under load: 1 master, 1 replica and 3
redis-sentinel processes (quorum 2, down-after-milliseconds 1000) on
reserved loopback ports, rl-server with --redis-sentinel, and the master
killed with -9 while rl-bench --audit loads rl-server (open loop, 20,000
requests/s over 200 keys, 10 s windows, limit 300): the kill falls 2 s
into a window, so that window admits on the old master before the kill and
on the new one after the failover, up to its limit (which it reaches as
long as decisions come from the new master within 7 s of the kill; about
2.3 s is usual, 5 s was seen on a loaded machine).

Asserted:
  - before: decisions are exact and counted in the master;
  - every request got exactly one answer: rl-bench saw no timeout, no
    lost connection, no error, and rl-server sent exactly as many
    responses (rl_decisions_total) as rl-bench sent requests;
  - the audit: no window over its limit among the decisions the store
    made, except, honestly, a window that was open when the master died:
    Redis replicates asynchronously, so increments the old master had
    acknowledged but not yet sent to the replica are lost with it, and
    that window's admissions may then exceed its limit by that many
    (under-counting in the store; never an admission counted twice).
    Such windows, if any, are printed with their excess;
  - the window open at the kill reached its limit on the new master
    (sampled keys' counters), so the audit did hold admissions on both
    masters to one limit;
  - after: the sentinels' new master is the old replica (ROLE master),
    decisions come from it (its EVALSHA count grows, a fresh key is
    exact and counted there), rl-server logged one "redis master switched"
    line and rl_store_master_switches_total is 1.
Printed: the time from the kill to the sentinels' +switch-master (their
failover time, from their logs) beside the time from the kill to the
first decision the new master made for rl-server, and whether that met
the target (within the former plus 1 s). A figure, not an assertion: on
a machine loaded by other tests it has taken longer (the brief: speed is
measured, never asserted by time).

Usage: e2e_sentinel_failover.py RL_SERVER RL_CHECK RL_BENCH REDIS_SERVER
       REDIS_SENTINEL"""
import datetime
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "..", "support"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import rlt  # noqa: E402
import sentinel_fx as fx  # noqa: E402

RL_SERVER, RL_CHECK, RL_BENCH, REDIS, SENTINEL = sys.argv[1:6]
TMP = tempfile.mkdtemp(prefix="rl-sentinel-failover-")
FAILS = []
PROCS = []
DOWN_AFTER_MS = 1000
# Open loop, RATE requests a second over KEYS keys, fixed windows of
# WINDOW_S aligned to the clock. The master dies KILL_AT_S into a window,
# and the limit is what a key gets in 3 s: so the window open at the kill
# admits on the old master before it and on the new one after the
# failover (about 2.3 s), up to its limit; writes lost with the old master
# would show as admissions over it.
RATE = 20000
KEYS = 200
WINDOW_S = 10
KILL_AT_S = 2.0
LIMIT = 3 * RATE // KEYS


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        FAILS.append(what)


def start_sentinel(mport):
    port = rlt.reserve_port()
    conf = os.path.join(TMP, "sentinel-%d.conf" % port)
    log = os.path.join(TMP, "sentinel-%d.log" % port)
    with open(conf, "w") as f:
        f.write("port %d\nbind 127.0.0.1\ndir %s\nlogfile %s\n"
                "sentinel monitor mymaster 127.0.0.1 %d 2\n"
                "sentinel down-after-milliseconds mymaster %d\n"
                "sentinel failover-timeout mymaster 5000\n"
                "sentinel parallel-syncs mymaster 1\n"
                % (port, TMP, log, mport, DOWN_AFTER_MS))
    p = subprocess.Popen([SENTINEL, conf], stdout=subprocess.DEVNULL)
    PROCS.append(p)
    rlt.wait_listen(port, p, log)
    return port, log


def sentinel_ready(sport):
    """The sentinel sees the replica and both other sentinels."""
    out = fx.cli(sport, "SENTINEL", "master", "mymaster").split("\n")
    kv = dict(zip(out[0::2], out[1::2]))
    return kv.get("num-slaves") == "1" and \
        kv.get("num-other-sentinels") == "2"


class Probe:
    """One connection to a Redis, for polling INFO every few ms."""

    def __init__(self, port):
        self.s = socket.create_connection(("127.0.0.1", port), 2)
        self.f = self.s.makefile("rb")

    def info(self, section):
        self.s.sendall(b"*2\r\n$4\r\nINFO\r\n$%d\r\n%s\r\n"
                       % (len(section), section.encode()))
        n = int(self.f.readline()[1:])
        return self.f.read(n + 2).decode()

    def script_calls(self):
        text = self.info("commandstats")
        return sum(int(m) for m in re.findall(
            r"cmdstat_(?:evalsha|eval|rl\.batch):calls=(\d+)", text))


def log_time(line):
    """A Redis log line's time ("pid:X 27 Nov 2026 17:02:44.123 # ...")
    as a Unix time (the log is in local time, as time.time() is read)."""
    m = re.search(r"(\d+ \w{3} \d{4} \d\d:\d\d:\d\d\.\d{3})", line)
    return datetime.datetime.strptime(
        m.group(1), "%d %b %Y %H:%M:%S.%f").timestamp() if m else None


def first_event(logs, event):
    times = []
    for log in logs:
        with open(log, errors="replace") as f:
            for line in f:
                if event in line:
                    t = log_time(line)
                    if t is not None:
                        times.append(t)
                    break
    return min(times) if times else None


def main():
    mport, mproc = rlt.start_redis(TMP, [], REDIS, PROCS)
    rport, _ = rlt.start_redis(
        TMP, ["--replicaof", "127.0.0.1", str(mport)], REDIS, PROCS)
    check(fx.wait_for(lambda: "master_link_status:up" in fx.cli(
        rport, "INFO", "replication"), 10), "the replica follows the master")
    sentinels = [start_sentinel(mport) for _ in range(3)]
    check(fx.wait_for(lambda: all(sentinel_ready(s) for s, _ in sentinels),
                      30, 0.1),
          "3 sentinels see the master, the replica and each other")

    p, got, log = fx.start_server(RL_SERVER, TMP, "failover", [
        "--redis-sentinel", ",".join("127.0.0.1:%d" % s for s, _ in sentinels),
        "--redis-sentinel-master", "mymaster",
        # The kill window's counters outlive the run, to be read after it.
        "--expiry-grace-ms", "60000"], PROCS)
    mp = got["metrics"]
    code, body = fx.healthz(mp, 200, 10)
    check(code == 200, "up through the sentinels (%d %s)"
          % (code, body.strip()))
    out = fx.decisions(RL_CHECK, got["listen"], "f1")
    check(fx.exact(out) and len(fx.keys(mport, "f1")) == 1,
          "before: exact decisions, counted in the master:\n" + out)

    probe = Probe(rport)
    calls0 = probe.script_calls()
    sent0 = fx.metric(mp, "rl_decisions_total")
    report = os.path.join(TMP, "bench.json")
    blog = open(os.path.join(TMP, "bench.log"), "w")
    t_start = time.time()
    # KILL_AT_S into the first window that starts after rl-bench's first
    # request (0.5 s from now, at most), so that the audit checks it whole;
    # the run lasts to the end of that window and a little more.
    t_plan = (int(t_start + 0.5) // WINDOW_S + 1) * WINDOW_S + KILL_AT_S
    bench_s = int(t_plan - t_start + (WINDOW_S - KILL_AT_S) + 1.5) + 1
    bench = subprocess.Popen(
        [RL_BENCH, "--server", "127.0.0.1:%d" % got["listen"],
         "--connections", "4", "--rate", str(RATE), "--duration",
         str(bench_s), "--keys", str(KEYS), "--limit", str(LIMIT),
         "--window", str(WINDOW_S), "--timeout-ms", "5000", "--audit",
         "--no-progress", "--json", report],
        stdout=blog, stderr=subprocess.STDOUT)
    PROCS.append(bench)
    check(fx.wait_for(lambda: fx.metric(mp, "rl_decisions_total") > sent0 +
                      1000, 10), "load: rl-server is deciding")
    time.sleep(max(0.0, t_plan - time.time()))
    t_kill = time.time()
    mproc.kill()
    mproc.wait()

    # The first decision the new master makes: its script calls grow.
    t_first = None
    end = time.time() + 30
    while time.time() < end:
        try:
            if probe.script_calls() > calls0:
                t_first = time.time()
                break
        except (OSError, ValueError):
            # The sentinels close normal clients of the node they promote
            # (CLIENT KILL TYPE normal): this one too.
            probe = Probe(rport)
        time.sleep(0.005)
    check(t_first is not None, "after: the new master makes decisions")
    bench.wait(bench_s + 60)
    blog.close()
    check(bench.returncode == 0, "rl-bench ended normally, audit passed or "
          "explained below (exit %d)" % bench.returncode)
    with open(report) as f:
        r = json.load(f)
    sent1 = fx.metric(mp, "rl_decisions_total")

    # Every request answered exactly once.
    answered = r["allowed"] + r["denied"]
    check(r["timeouts"] == 0 and r["connection_lost"] == 0 and
          r["other_errors"] == 0 and r["server_errors"] == 0 and
          r["disconnects"] == 0 and r["unsent"] == 0 and
          answered == r["sent"],
          "exactly once: %d sent, %d answered (%d allowed, %d denied, %d of "
          "them by the fail mode), no timeout, loss or error"
          % (r["sent"], answered, r["allowed"], r["denied"],
             r["failed_open"]))
    check(sent1 - sent0 == r["sent_total"],
          "exactly once: rl-server sent %d responses for rl-bench's %d "
          "requests" % (sent1 - sent0, r["sent_total"]))
    check(fx.metric(mp, "rl_requests_inflight") == 0,
          "exactly once: nothing left in flight in rl-server")

    # The audit, honest about what asynchronous replication loses.
    kill_off = t_kill - t_start  # rl-bench's run began a little after
    over = r.get("audit_violations", [])
    straddle = [w for w in over
                if w["from_s"] - 1 <= kill_off <= w["window_end_s"] + 1]
    excess = sum(w["allowed"] - w["limit"] for w in over)
    check(not r["audit_unreliable"] and r["audit_windows"] > 0,
          "audit: %d windows checked, reliable" % r["audit_windows"])
    check(len(straddle) == len(over) == r["audit_over_limit"],
          "audit: %d windows over their limit, all open when the master "
          "died (admissions over: %d, the acknowledged writes the replica "
          "had not yet received); none after the failover"
          % (r["audit_over_limit"], excess))
    check(r["audit_checked_windows"] >= KEYS,
          "audit: every key's window open at the kill began in the run and "
          "reached its limit (%d windows with refusals checked)"
          % r["audit_checked_windows"])
    print("     audit: %d windows, %d over the limit, %d with refusals "
          "exact, %d inexact (under-admitted: a batch Redis ran whose "
          "answer was lost with the connection is answered by the fail "
          "mode)" % (r["audit_windows"], r["audit_over_limit"],
                     r["audit_exact_windows"], len(r["audit_inexact"])))
    # The window open at the kill went on filling on the new master: its
    # counters there reached the limit (so the audit above did compare
    # admissions on both masters against it).
    win = int(t_kill * 1000) // (WINDOW_S * 1000)
    full = sampled = 0
    for k in range(0, KEYS, 10):
        for n in fx.cli(rport, "--scan", "--pattern", "rl:{bench:%d}:*:%d:%d"
                        % (k, WINDOW_S, win)).split():
            sampled += 1
            v = fx.cli(rport, "GET", n).strip()
            full += v.isdigit() and int(v) >= LIMIT
    check(sampled > 0 and full * 2 >= sampled,
          "audit: the window open at the kill filled up to its limit on the "
          "new master (%d of %d sampled keys), so admissions on both masters "
          "were held to one limit" % (full, sampled))

    # After: the new master, and the switch heard once.
    check(fx.role(rport) == "master", "after: the old replica is master")
    check(fx.wait_for(lambda: fx.metric(
        mp, "rl_store_master_switches_total") == 1, 5),
        "after: rl_store_master_switches_total 1")
    check(fx.log_has(log, r"redis master switched\" master=mymaster "
                          r"from=127\.0\.0\.1:%d to=127\.0\.0\.1:%d"
                     % (mport, rport)),
          "after: one line names the old and the new master")
    out = fx.decisions(RL_CHECK, got["listen"], "f2")
    check(fx.exact(out) and len(fx.keys(rport, "f2")) == 1,
          "after: exact decisions, counted in the new master:\n" + out)

    # The figures.
    logs = [lg for _, lg in sentinels]
    t_sdown = first_event(logs, "+sdown master")
    t_switch = first_event(logs, "+switch-master")
    check(t_switch is not None, "the sentinels logged +switch-master")
    if t_switch is not None and t_first is not None:
        failover = t_switch - t_kill
        ours = t_first - t_kill
        print("     failover: kill -9 -> +sdown %.0f ms, -> +switch-master "
              "%.0f ms (the sentinels' failover time); -> first decision "
              "on the new master %.0f ms (%+.0f ms after +switch-master)"
              % ((t_sdown - t_kill) * 1000 if t_sdown else -1,
                 failover * 1000, ours * 1000, (ours - failover) * 1000))
        print("     target (decisions from the new master within the "
              "sentinels' failover time plus 1 s, %.0f <= %.0f ms): %s"
              % (ours * 1000, (failover + 1.0) * 1000,
                 "met" if ours <= failover + 1.0 else
                 "MISSED (a figure, not an assertion; see the docstring)"))
    p.terminate()
    check(p.wait(20) == 0, "rl-server stops cleanly")


try:
    main()
except Exception as e:  # noqa: BLE001 -- reported as a failure, logs kept
    check(False, "exception: %r" % e)
finally:
    rlt.end_run(FAILS, PROCS, TMP)
