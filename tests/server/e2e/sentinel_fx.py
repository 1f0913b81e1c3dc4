"""What the Sentinel tests share (e2e_sentinel_stale.py,
e2e_sentinel_failover.py): rl-server's start, /metrics and /healthz,
rl-check's decisions, and redis-cli, all on 127.0.0.1 and bounded in
time."""
import os
import re
import subprocess
import time
import urllib.error
import urllib.request

import rlt


def start_server(rl_server, tmp, name, args, procs):
    """rl-server on ports it picks, logging to tmp/name.log; returns
    (proc, {flag: port}, log path)."""
    ports = os.path.join(tmp, name + ".ports")
    log = os.path.join(tmp, name + ".log")
    with open(log, "w") as lf:
        p = subprocess.Popen(
            [rl_server, "--listen", "127.0.0.1:0", "--metrics", "127.0.0.1:0",
             "--port-file", ports, "--rule", "api=3/3600s",
             "--log-level", "debug"] + args, stderr=lf)
    procs.append(p)
    return p, rlt.wait_ports(p, ports, log), log


def healthz(port, want, timeout_s=10):
    """Waits up to timeout_s for /healthz to answer `want`; returns the
    last status and body."""
    end, last = time.time() + timeout_s, (0, "")
    while time.time() < end:
        try:
            r = urllib.request.urlopen("http://127.0.0.1:%d/healthz" % port,
                                       timeout=2)
            last = (200, r.read().decode())
        except urllib.error.HTTPError as e:
            last = (e.code, e.read().decode())
        except OSError:
            pass
        if last[0] == want:
            return last
        time.sleep(0.02)
    return last


def metric(port, name):
    """The sum of a metric's samples on /metrics (0 when absent)."""
    text = urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port,
                                  timeout=5).read().decode()
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            total += float(line.rsplit(" ", 1)[1])
    return total


def decisions(rl_check, port, key, repeat=4):
    out = subprocess.run(
        [rl_check, "--server", "127.0.0.1:%d" % port, "--key", key, "--rule",
         "api", "--repeat", str(repeat), "--timeout", "10000"],
        capture_output=True, text=True, timeout=60)
    return out.stdout


def exact(out):
    """rl-check's four answers for api=3/3600s on a fresh key, decided by
    the store: three allowed, then refused."""
    lines = out.strip().splitlines()
    return (len(lines) == 4 and
            [x.split()[0] for x in lines] == ["OK", "OK", "OK", "OVER_LIMIT"]
            and "used=3" in lines[2])


def cli(port, *args, password=None):
    cmd = ["redis-cli", "-h", "127.0.0.1", "-p", str(port)]
    if password:
        cmd += ["--no-auth-warning", "-a", password]
    return subprocess.run(cmd + list(args), capture_output=True, text=True,
                          timeout=10).stdout


def keys(port, key, password=None):
    """The key's counters in the Redis on port."""
    out = cli(port, "--scan", "--pattern", "rl:{%s}*" % key,
              password=password)
    return [k for k in out.split() if k]


def role(port, password=None):
    out = cli(port, "ROLE", password=password).split()
    return out[0] if out else ""


def wait_for(cond, timeout_s, step=0.02):
    """Polls cond() until it is true or timeout_s passed; returns its last
    value."""
    end = time.time() + timeout_s
    while True:
        v = cond()
        if v or time.time() >= end:
            return v
        time.sleep(step)


def log_has(log, pattern):
    with open(log, errors="replace") as f:
        return re.search(pattern, f.read()) is not None
