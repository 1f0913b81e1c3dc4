#!/usr/bin/python3
"""Redis with ACL users, as managed and self-hosted Redis 6+ run it: the
default user needs another password, and rl-server's own user has exactly
the ACL deploy/README.md gives (its commands, the keys under its prefix),
with the module's two commands when the module is loaded. rl-server and
rl-ctl must log in as that user, from a URL with a percent-encoded
password, from a password file, from $RL_REDIS_URL and over a Unix
socket; a wrong password
and a missing permission are said plainly; and the password appears
nowhere a run writes (logs, /metrics, /healthz, errors).

Usage: redis_acl.py RL_SERVER RL_CHECK RL_CTL REDIS_SERVER [MODULE_SO]"""
import os
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "..", "support"))
import rlt  # noqa: E402

RL_SERVER, RL_CHECK, RL_CTL, REDIS = sys.argv[1:5]
MODULE = sys.argv[5] if len(sys.argv) > 5 else None
# The smallest ACL rl-server needs (deploy/README.md, "Redis ACL"): the
# handshake, the batch script and what it calls, the clock, the runtime
# switches and the fleet's report; rl-ctl's hash commands; and with the
# module, its two commands.
RL_ACL = ["~rl:*", "-@all", "+select", "+script|load", "+evalsha", "+eval",
          "+info", "+time", "+incrby", "+decrby", "+del", "+pexpireat",
          "+hget", "+hset", "+hgetall", "+hdel", "+ping"]
CTL_ACL = ["+hsetnx", "+hincrby"]
MODULE_ACL = ["+rl.batch", "+rl.version"]
# Every character a URL must escape, so that the decoding is tested too.
SECRET = "P@ss:w/rd%x-never-elsewhere"
ENCODED = "P%40ss%3Aw%2Frd%25x-never-elsewhere"
DEFAULT_PW = "default-pw-never-elsewhere"
TMP = tempfile.mkdtemp(prefix="rl-acl-")
SOCK = os.path.join(TMP, "redis.sock")
FAILS = []
PROCS = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        FAILS.append(what)


def start_redis():
    acl = RL_ACL + CTL_ACL + (MODULE_ACL if MODULE else [])
    port, _ = rlt.start_redis(
        TMP, ["--unixsocket", SOCK, "--unixsocketperm", "700",
              "--user", "default", "on", ">" + DEFAULT_PW, "~*", "+@all",
              "--user", "rl", "on", ">" + SECRET] + acl +
        (["--loadmodule", MODULE] if MODULE else []), REDIS, PROCS)
    return port


def start_server(name, args, env=None):
    ports = os.path.join(TMP, name + ".ports")
    log = os.path.join(TMP, name + ".log")
    with open(log, "w") as lf:
        p = subprocess.Popen(
            [RL_SERVER, "--listen", "127.0.0.1:0", "--metrics", "127.0.0.1:0",
             "--port-file", ports, "--rule", "api=3/3600s"] + args,
            stderr=lf, env=env)
    PROCS.append(p)
    return p, rlt.wait_ports(p, ports, log), log


def healthz(port):
    """Waits up to 10 s for /healthz 200; returns the last status and
    body."""
    end, last = time.time() + 10, (0, "")
    while time.time() < end:
        try:
            r = urllib.request.urlopen("http://127.0.0.1:%d/healthz" % port,
                                       timeout=2)
            return 200, r.read().decode()
        except urllib.error.HTTPError as e:
            last = (e.code, e.read().decode())
        except OSError:
            pass
        time.sleep(0.02)
    return last


def decisions(port, key):
    out = subprocess.run(
        [RL_CHECK, "--server", "127.0.0.1:%d" % port, "--key", key, "--rule",
         "api", "--repeat", "4", "--timeout", "10000"],
        capture_output=True, text=True, timeout=60)
    return out.stdout


def stop(p):
    p.terminate()
    p.wait(20)


def counted_in_redis(port, key):
    """The key's counters (read as the default user: rl may not SCAN)."""
    out = subprocess.run(
        ["redis-cli", "-p", str(port), "--user", "default", "--pass",
         DEFAULT_PW,
         "--no-auth-warning", "--scan", "--pattern", "rl:{%s}*" % key],
        capture_output=True, text=True, timeout=10).stdout
    return [k for k in out.split() if k]


def main():
    rport = start_redis()
    written = []  # what the run wrote, to search for the password

    # 1. A URL with the user and the percent-encoded password.
    p, got, log = start_server("url", [
        "--redis", "redis://rl:%s@127.0.0.1:%d" % (ENCODED, rport)])
    code, body = healthz(got["metrics"])
    check(code == 200, "url: /healthz 200 once logged in as rl (%d %s)"
          % (code, body.strip()))
    want = "batch=module" if MODULE else "batch=script"
    check(want in open(log).read(), "url: connected, " + want)
    out = decisions(got["listen"], "u1")
    check(out.count("OK used=") == 3 and "OVER_LIMIT" in out,
          "url: 3 allowed then refused, counted in Redis:\n" + out)
    check(len(counted_in_redis(rport, "u1")) == 1,
          "url: the counter is in Redis under rl:")
    m = urllib.request.urlopen("http://127.0.0.1:%d/metrics" % got["metrics"],
                               timeout=5).read().decode()
    written += [m, body]
    stop(p)
    written.append(open(log).read())

    # 2. The password from a file, the user in the URL.
    pwfile = os.path.join(TMP, "redis.password")
    with open(pwfile, "w") as f:
        f.write(SECRET + "\n")
    p, got, log = start_server("file", [
        "--redis", "redis://rl@127.0.0.1:%d" % rport,
        "--redis-password-file", pwfile])
    code, _ = healthz(got["metrics"])
    out = decisions(got["listen"], "u2")
    check(code == 200 and out.count("OK used=") == 3 and "OVER_LIMIT" in out,
          "password file: logged in and decided from Redis:\n" + out)
    stop(p)
    written.append(open(log).read())

    # 3. The URL from the environment: nothing on the command line.
    env = dict(os.environ, RL_REDIS_URL="redis://rl:%s@127.0.0.1:%d"
               % (ENCODED, rport))
    p, got, log = start_server("env", [], env=env)
    code, _ = healthz(got["metrics"])
    out = decisions(got["listen"], "u3")
    check(code == 200 and out.count("OK used=") == 3 and "OVER_LIMIT" in out,
          "RL_REDIS_URL: decided from Redis:\n" + out)
    ps = subprocess.run(["ps", "-o", "args=", "-p", str(p.pid)],
                        capture_output=True, text=True).stdout
    check(SECRET not in ps and ENCODED not in ps and "rl-server" in ps,
          "RL_REDIS_URL: the password is not in ps")
    ctl = subprocess.run([RL_CTL, "--redis-password-file", pwfile, "show"],
                         capture_output=True, text=True, timeout=30,
                         env=dict(os.environ, RL_REDIS_URL="redis://rl@"
                                  "127.0.0.1:%d" % rport))
    check(ctl.returncode == 0, "rl-ctl: logs in from RL_REDIS_URL and a "
          "password file (%d: %s)" % (ctl.returncode, ctl.stderr.strip()))
    written += [ctl.stdout, ctl.stderr]
    stop(p)
    written.append(open(log).read())

    # 4. A Unix socket, with the same credentials; rl-ctl too.
    p, got, log = start_server("unix", [
        "--redis", "unix://rl:%s@%s?db=0" % (ENCODED, SOCK)])
    code, _ = healthz(got["metrics"])
    out = decisions(got["listen"], "u4")
    text = open(log).read()
    check(code == 200 and out.count("OK used=") == 3 and "OVER_LIMIT" in out
          and "addr=unix:" + SOCK in text,
          "unix socket: logged in and decided from Redis:\n" + out)
    check(len(counted_in_redis(rport, "u4")) == 1,
          "unix socket: the counter is in the same Redis")
    ctl = subprocess.run([RL_CTL, "--redis", "unix://rl@" + SOCK,
                          "--redis-password-file", pwfile, "show"],
                         capture_output=True, text=True, timeout=30)
    check(ctl.returncode == 0, "rl-ctl over the unix socket (%d: %s)"
          % (ctl.returncode, ctl.stderr.strip()))
    written += [ctl.stdout, ctl.stderr]
    stop(p)
    written.append(open(log).read())

    # 5. A wrong password: said plainly, and every decision fails open.
    p, got, log = start_server("wrong", [
        "--redis", "redis://rl:wrong-pw@127.0.0.1:%d" % rport])
    code, body = healthz(got["metrics"])
    check(code == 503, "wrong password: /healthz 503 (%d %s)"
          % (code, body.strip()))
    end = time.time() + 10
    while time.time() < end and "WRONGPASS" not in open(log).read():
        time.sleep(0.05)
    text = open(log).read()
    check("WRONGPASS" in text and "wrong-pw" not in text,
          "wrong password: the log says WRONGPASS, without the password")
    stop(p)
    written.append(open(log).read())

    # 6. A permission missing: the log names it, Redis's own words.
    subprocess.run(["redis-cli", "-p", str(rport), "--user", "default",
                    "--pass", DEFAULT_PW, "--no-auth-warning", "ACL",
                    "SETUSER", "rl", "-evalsha", "-rl.batch" if MODULE
                    else "-evalsha"], check=True, capture_output=True)
    p, got, log = start_server("noperm", [
        "--redis", "redis://rl:%s@127.0.0.1:%d" % (ENCODED, rport)])
    healthz(got["metrics"])
    decisions(got["listen"], "u5")
    end = time.time() + 10
    while time.time() < end and "NOPERM" not in open(log).read():
        time.sleep(0.05)
    check("NOPERM" in open(log).read(),
          "missing permission: the log says NOPERM and which command")
    stop(p)
    written.append(open(log).read())

    # 7. Bad flags: the error never repeats the password.
    bad = subprocess.run(
        [RL_SERVER, "--redis", "redis://rl:%s@127.0.0.1:notaport" % ENCODED],
        capture_output=True, text=True, timeout=10)
    check(bad.returncode == 2, "bad URL: exit 2")
    written.append(bad.stderr)

    for text in written:
        if SECRET in text or ENCODED in text:
            check(False, "the password is in what the run wrote: %r"
                  % text[:200])
            break
    else:
        check(True, "the password is in nothing the run wrote (%d texts)"
              % len(written))


try:
    main()
finally:
    rlt.end_run(FAILS, PROCS, TMP)
