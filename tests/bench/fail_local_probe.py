#!/usr/bin/python3
"""--fail-local across an outage, measured: three rl-servers over one Redis
(loopback, free ports), rule 600/20s, 12 concurrent rl-check loops (4 per
server). At the start of a 20 s window they send BEFORE checks each; Redis
is SIGKILLed and restarted without persistence (MODE=kill, the default)
or SIGSTOPped and continued (MODE=stop) while each loop sends 100 more;
then 8 bursts of 50 each over 4 s. Prints what the window admitted (the
OK answers) and what Redis's counter holds. Bounded: about 35 s, every
process stopped at the end.

Usage: fail_local_probe.py BUILD_DIR   (env: MODE=kill|stop, BEFORE=100)"""
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

B = sys.argv[1]
RS, RC = B + "/server/rl-server", B + "/tools/rl-check"
MODE = os.environ.get("MODE", "kill")
BEFORE = int(os.environ.get("BEFORE", "100"))
TMP = tempfile.mkdtemp(prefix="rl-fl-probe-")
PROCS = []


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


RP = free_port()


def redis():
    p = subprocess.Popen(["redis-server", "--port", str(RP), "--bind",
                          "127.0.0.1", "--save", "", "--appendonly", "no",
                          "--dir", TMP], stdout=subprocess.DEVNULL)
    PROCS.append(p)
    for _ in range(250):
        try:
            socket.create_connection(("127.0.0.1", RP), 0.1).close()
            return p
        except OSError:
            time.sleep(0.02)
    raise SystemExit("redis-server did not start")


def metric(mp, name):
    try:
        t = urllib.request.urlopen("http://127.0.0.1:%d/metrics" % mp,
                                   timeout=5).read().decode()
    except OSError:
        return -1  # not listening yet
    m = re.search(r"^%s (\d+)$" % re.escape(name), t, re.M)
    return int(m.group(1)) if m else -1


def load(ports, n):
    return [subprocess.Popen([RC, "--server", "127.0.0.1:%d" % p, "--key",
                              "k", "--rule", "t", "--repeat", str(n),
                              "--timeout", "3000"], stdout=subprocess.PIPE,
                             stderr=subprocess.DEVNULL, text=True)
            for p in ports for _ in range(4)]


def ok(ps):
    return sum(sum(1 for x in p.communicate(timeout=60)[0].splitlines()
                   if x.startswith("OK")) for p in ps)


def main():
    red = redis()
    ports, mports = [], []
    for i in range(3):
        port, mp = free_port(), free_port()
        PROCS.append(subprocess.Popen(
            [RS, "--listen", "127.0.0.1:%d" % port, "--metrics",
             "127.0.0.1:%d" % mp, "--redis", "127.0.0.1:%d" % RP,
             "--fail-local", "--rule", "t=600/20s", "--redis-timeout-ms",
             "200"], stderr=open(os.path.join(TMP, "s%d.log" % i), "w")))
        ports.append(port)
        mports.append(mp)
    end = time.time() + 20
    while time.time() < end and any(
            metric(mp, "rl_fleet_instances_seen") != 3 for mp in mports):
        time.sleep(0.1)
    while int(time.time()) % 20 != 0:
        time.sleep(0.02)
    w0 = int(time.time()) // 20
    a = ok(load(ports, BEFORE))
    if MODE == "stop":
        red.send_signal(signal.SIGSTOP)
    else:
        red.kill()
        red.wait()
    b = ok(load(ports, 100))
    if MODE == "stop":
        red.send_signal(signal.SIGCONT)
    else:
        red = redis()
    time.sleep(0.3)
    c = 0
    for _ in range(8):
        c += ok(load(ports, 50))
        time.sleep(0.5)
    if int(time.time()) // 20 != w0:
        print("the window ended during the run: run it again")
        return
    keys = subprocess.run(["redis-cli", "-p", str(RP), "--scan", "--pattern",
                           "*{k}:r:t:*"], capture_output=True, text=True,
                          timeout=10).stdout.split()
    held = sum(int(subprocess.run(["redis-cli", "-p", str(RP), "GET", k],
                                  capture_output=True, text=True,
                                  timeout=10).stdout.strip() or 0)
               for k in keys)
    print("mode %s: before %d, outage %d, after %d: the window admitted %d "
          "= %.2fx the limit; Redis holds %d" % (MODE, a, b, c, a + b + c,
                                                  (a + b + c) / 600.0, held))


try:
    main()
finally:
    for p in PROCS:
        if p.poll() is None:
            p.send_signal(signal.SIGCONT)
            p.terminate()
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
