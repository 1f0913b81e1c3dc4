#!/usr/bin/python3
"""Redis over TLS, as managed Redis services serve it: redis-servers with
TLS only (--port 0), certificates made at test time by `openssl` (a CA, a
server certificate for localhost and 127.0.0.1, a client certificate,
and a second CA nobody trusts). rl-server must decide exactly over
rediss:// (the counters in Redis equal what was allowed), with the script
and with the module; rl-ctl must work over TLS and rl-server must apply
its switch through its own TLS connection; a wrong CA, a wrong server
name, a plaintext server and a missing client certificate must be
refused with the reason in the log while decisions go to the fail mode;
--redis-tls-insecure must be needed to skip the check; a restarted Redis
must be reconnected to over TLS; bad TLS flags stop rl-server at start
(exit 2) without printing a key.

Usage: e2e_redis_tls.py RL_SERVER RL_CHECK RL_CTL REDIS_SERVER [MODULE_SO]"""
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
TMP = tempfile.mkdtemp(prefix="rl-tls-")
FAILS = []
PROCS = []
LIMIT = 5


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        FAILS.append(what)


def path(name):
    return os.path.join(TMP, name)


def openssl(*args):
    subprocess.run(["openssl"] + list(args), check=True,
                   capture_output=True, timeout=60)


def make_certs():
    """Two CAs; from the first, a server certificate for localhost and
    127.0.0.1 and a client certificate."""
    for ca in ("ca", "otherca"):
        openssl("req", "-x509", "-newkey", "ec", "-pkeyopt",
                "ec_paramgen_curve:prime256v1", "-nodes", "-days", "2",
                "-subj", "/CN=rl test " + ca, "-keyout", path(ca + ".key"),
                "-out", path(ca + ".crt"))
    for name, ext in (("server", "subjectAltName=DNS:localhost,IP:127.0.0.1"
                       "\nextendedKeyUsage=serverAuth\n"),
                      ("client", "extendedKeyUsage=clientAuth\n")):
        with open(path(name + ".ext"), "w") as f:
            f.write(ext)
        openssl("req", "-newkey", "ec", "-pkeyopt",
                "ec_paramgen_curve:prime256v1", "-nodes", "-subj",
                "/CN=rl test " + name, "-keyout", path(name + ".key"),
                "-out", path(name + ".csr"))
        openssl("x509", "-req", "-in", path(name + ".csr"), "-CA",
                path("ca.crt"), "-CAkey", path("ca.key"), "-CAcreateserial",
                "-days", "2", "-extfile", path(name + ".ext"), "-out",
                path(name + ".crt"))


class Redis:
    """A redis-server serving TLS only, on a reserved port; restartable on
    the same port."""

    def __init__(self, name, extra=(), plain=False):
        self.name, self.extra, self.plain = name, list(extra), plain
        self.port = rlt.reserve_port()
        self.proc = None
        self.start()

    def start(self):
        log = path("redis-%s.log" % self.name)
        if self.plain:
            args = ["--port", str(self.port)]
        else:
            args = ["--port", "0", "--tls-port", str(self.port),
                    "--tls-cert-file", path("server.crt"),
                    "--tls-key-file", path("server.key"),
                    "--tls-ca-cert-file", path("ca.crt")]
        self.proc = subprocess.Popen(
            [REDIS, "--bind", "127.0.0.1", "--save", "", "--appendonly",
             "no", "--dir", TMP, "--logfile", log] + args + self.extra +
            (["--loadmodule", MODULE] if MODULE and not self.plain else []),
            stdout=subprocess.DEVNULL)
        PROCS.append(self.proc)
        rlt.wait_listen(self.port, self.proc, log)

    def stop(self):
        self.proc.kill()
        self.proc.wait()

    def cli(self, *args):
        """redis-cli over TLS (with the client certificate, which every
        Redis here accepts)."""
        return subprocess.run(
            ["redis-cli", "-p", str(self.port), "--tls", "--cacert",
             path("ca.crt"), "--cert", path("client.crt"), "--key",
             path("client.key")] + list(args),
            capture_output=True, text=True, timeout=10).stdout


def start_server(name, args, rules=("api=%d/3600s" % LIMIT,)):
    ports = path(name + ".ports")
    log = path(name + ".log")
    with open(log, "w") as lf:
        p = subprocess.Popen(
            [RL_SERVER, "--listen", "127.0.0.1:0", "--metrics", "127.0.0.1:0",
             "--port-file", ports, "--redis-timeout-ms", "1000"] +
            ["--rule=" + r for r in rules] + args, stderr=lf)
    PROCS.append(p)
    return p, rlt.wait_ports(p, ports, log), log


def healthz(port, want=200, timeout_s=10):
    """Waits up to timeout_s for /healthz to answer want; returns the last
    status and body."""
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


def wait_log(log, text, timeout_s=10):
    end = time.time() + timeout_s
    while time.time() < end:
        if text in open(log).read():
            return True
        time.sleep(0.02)
    return False


def decide(port, key, n):
    """n decisions for key under rule api; (allowed, refused, fail-open
    notes)."""
    out = subprocess.run(
        [RL_CHECK, "--server", "127.0.0.1:%d" % port, "--key", key, "--rule",
         "api", "--repeat", str(n), "--timeout", "10000"],
        capture_output=True, text=True, timeout=60)
    return (out.stdout.count("OK used="), out.stdout.count("OVER_LIMIT"),
            out.stderr.count("allowed by fail-open"))


def counted(redis, key):
    """The sum of the key's counters in Redis."""
    keys = [k for k in redis.cli("--scan", "--pattern",
                                 "rl:{%s}*" % key).split() if k]
    return sum(int(redis.cli("GET", k).strip() or 0) for k in keys)


def stop(p):
    p.terminate()
    p.wait(20)
    return p.returncode


def exact(name, redis, args, key, extra_check=None):
    """rl-server over TLS decides exactly: LIMIT of LIMIT + 3 allowed, and
    Redis holds LIMIT."""
    p, got, log = start_server(name, args)
    code, body = healthz(got["metrics"])
    check(code == 200, "%s: /healthz 200 over TLS (%d %s)"
          % (name, code, body.strip()))
    ok, over, fo = decide(got["listen"], key, LIMIT + 3)
    check((ok, over, fo) == (LIMIT, 3, 0),
          "%s: exactly %d of %d allowed, none by fail-open (%d, %d, %d)"
          % (name, LIMIT, LIMIT + 3, ok, over, fo))
    n = counted(redis, key)
    check(n == LIMIT, "%s: Redis counts %d (want %d)" % (name, n, LIMIT))
    if extra_check:
        extra_check(p, got, log)
    check(stop(p) == 0, "%s: rl-server stops cleanly" % name)
    return log


def refused(name, args, key, reason):
    """rl-server cannot get TLS up: the log names reason, decisions fail
    open, /healthz says 503, and the process lives on."""
    p, got, log = start_server(name, args)
    check(wait_log(log, reason),
          "%s: the log names the reason '%s':\n%s"
          % (name, reason, rlt.tail(log, 4)))
    code, _ = healthz(got["metrics"], want=503)
    check(code == 503, "%s: /healthz 503 (%d)" % (name, code))
    ok, over, fo = decide(got["listen"], key, 3)
    check((ok, fo) == (3, 3), "%s: decisions allowed by fail-open (%d ok, "
          "%d notes)" % (name, ok, fo))
    check(p.poll() is None, "%s: rl-server still running" % name)
    check(stop(p) == 0, "%s: rl-server stops cleanly" % name)


def main():
    make_certs()
    ca = ["--redis-tls-ca", path("ca.crt")]
    tls = Redis("tls", ["--tls-auth-clients", "no"])
    mtls = Redis("mtls", ["--tls-auth-clients", "yes"])
    plain = Redis("plain", plain=True)
    url = "rediss://127.0.0.1:%d" % tls.port
    batch = "batch=module" if MODULE else "batch=script"

    # 1. Exact decisions over TLS, to an IP (checked against the
    #    certificate's IP address) and to a name.
    def connected_so(p, got, log):
        check(batch in open(log).read() and "tls=verify" in open(log).read(),
              "ip: connected over TLS with the certificate checked, " + batch)
    exact("ip", tls, ["--redis", url] + ca, "k-ip", connected_so)
    exact("name", tls, ["--redis", "rediss://localhost:%d" % tls.port] + ca,
          "k-name")

    # 2. rl-ctl over TLS; rl-server polls its switches over its own TLS
    #    connection and applies them (rl-ctl waits for that).
    def ctl_check(p, got, log):
        ctl = subprocess.run([RL_CTL, "--redis", url] + ca +
                             ["--wait-ms", "10000", "mode", "api", "shadow"],
                             capture_output=True, text=True, timeout=30)
        check(ctl.returncode == 0,
              "rl-ctl over TLS: mode set and applied by rl-server over TLS "
              "(%d: %s%s)" % (ctl.returncode, ctl.stdout, ctl.stderr))
        ok, over, fo = decide(got["listen"], "k-ctl", 2)
        check(ok == 2 and over == 0, "shadow mode applied: %d allowed" % ok)
        ctl = subprocess.run([RL_CTL, "--redis", url] + ca +
                             ["--wait-ms", "10000", "mode", "api", "default"],
                             capture_output=True, text=True, timeout=30)
        check(ctl.returncode == 0, "rl-ctl: mode back to default")
        bad = subprocess.run([RL_CTL, "--redis", url, "--redis-tls-ca",
                              path("otherca.crt"), "show"],
                             capture_output=True, text=True, timeout=30)
        check(bad.returncode == 1 and "certificate verify failed" in
              bad.stderr, "rl-ctl with the wrong CA: exit 1, says why (%s)"
              % bad.stderr.strip())
    exact("ctl", tls, ["--redis", url] + ca, "k-ctl0", ctl_check)

    # 3. Refusals: the wrong CA, a name the certificate does not carry, a
    #    plaintext Redis on a rediss:// URL, mTLS without a certificate.
    refused("wrongca", ["--redis", url, "--redis-tls-ca",
                        path("otherca.crt")], "k-r1",
            "certificate verify failed")
    refused("wrongname", ["--redis", url, "--redis-tls-server-name",
                          "redis.example.com"] + ca, "k-r2",
            "certificate verify failed: hostname mismatch")
    exact("insecure", tls, ["--redis", url, "--redis-tls-server-name",
                            "redis.example.com", "--redis-tls-insecure"],
          "k-insecure")
    refused("plaintext", ["--redis", "rediss://127.0.0.1:%d" % plain.port]
            + ca, "k-r3", "TLS handshake timed out")
    refused("nocert", ["--redis", "rediss://127.0.0.1:%d" % mtls.port] + ca,
            "k-r4", "certificate required")
    exact("mtls", mtls, ["--redis", "rediss://127.0.0.1:%d" % mtls.port,
                         "--redis-tls-cert", path("client.crt"),
                         "--redis-tls-key", path("client.key")] + ca,
          "k-mtls")

    # 4. Redis restarts: rl-server reconnects over TLS and decides again.
    def restart(p, got, log):
        tls.stop()
        code, _ = healthz(got["metrics"], want=503)
        check(code == 503, "restart: /healthz 503 while Redis is down")
        tls.start()
        check(wait_log(log, "redis reconnected"),
              "restart: reconnected over TLS")
        ok, over, fo = decide(got["listen"], "k-restart2", LIMIT + 1)
        check((ok, over, fo) == (LIMIT, 1, 0),
              "restart: exact again (%d, %d, %d)" % (ok, over, fo))
        check(counted(tls, "k-restart2") == LIMIT,
              "restart: Redis counts again")
    exact("restart", tls, ["--redis", url] + ca, "k-restart", restart)

    # 5. Bad flags stop rl-server at start, exit 2, never printing a key.
    with open(path("client.key")) as f:
        key_text = f.read()
    body = key_text.splitlines()[1]
    for what, args, want in (
            ("missing CA", ["--redis-tls-ca", path("nope.crt")],
             "--redis-tls-ca: cannot read"),
            ("key of another cert", ["--redis-tls-cert", path("server.crt"),
                                     "--redis-tls-key", path("client.key")],
             "does not match"),
            ("cert without key", ["--redis-tls-cert", path("client.crt")],
             "go together"),
            ("key given as CA", ["--redis-tls-ca", path("client.key")],
             "--redis-tls-ca: no certificate"),
            ("unix socket", ["--redis", "unix:///tmp/x.sock",
                             "--redis-tls-insecure"], "Unix socket")):
        if what != "unix socket":
            args = ["--redis", url] + args
        out = subprocess.run([RL_SERVER, "--listen", "127.0.0.1:0"] + args,
                             capture_output=True, text=True, timeout=10)
        check(out.returncode == 2 and want in out.stderr and
              body not in out.stderr + out.stdout,
              "bad flags (%s): exit 2, '%s' (%d: %s)"
              % (what, want, out.returncode, out.stderr.strip()))

    # 6. No rl-server log holds any of the client key.
    logs = [n for n in os.listdir(TMP) if n.endswith(".log") and
            not n.startswith("redis-")]
    leaked = [n for n in logs if any(
        line in open(path(n)).read() for line in key_text.splitlines()[1:-1])]
    check(len(logs) >= 10 and not leaked,
          "the client key is in no rl-server log (%d logs; leaked: %s)"
          % (len(logs), leaked))


try:
    main()
finally:
    rlt.end_run(FAILS, PROCS, TMP)
