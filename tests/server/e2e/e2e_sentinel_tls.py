#!/usr/bin/python3
"""Sentinel over TLS: a master and a redis-sentinel that both serve TLS
only (certificates made by openssl at test time, for 127.0.0.1), and
rl-server with --redis-sentinel and --redis-tls-ca: it asks the sentinel
over TLS where the master is, checks it over TLS (ROLE) and decides there
exactly. The sentinel has no default user: rl-server logs in as a
sentinel ACL user with exactly what deploy/README.md says it needs. With
a CA that did not sign the sentinel's certificate it finds no master,
says why in its log and /healthz stays 503.

Usage: e2e_sentinel_tls.py RL_SERVER RL_CHECK REDIS_SERVER REDIS_SENTINEL"""
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "..", "support"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import rlt  # noqa: E402
import sentinel_fx as fx  # noqa: E402

RL_SERVER, RL_CHECK, REDIS, SENTINEL = sys.argv[1:5]
TMP = tempfile.mkdtemp(prefix="rl-sentinel-tls-")
FAILS = []
PROCS = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what, flush=True)
    if not cond:
        FAILS.append(what)


def path(name):
    return os.path.join(TMP, name)


def openssl(*args):
    subprocess.run(["openssl"] + list(args), check=True,
                   capture_output=True, timeout=60)


def make_certs():
    for ca in ("ca", "otherca"):
        openssl("req", "-x509", "-newkey", "ec", "-pkeyopt",
                "ec_paramgen_curve:prime256v1", "-nodes", "-days", "2",
                "-subj", "/CN=rl test " + ca, "-keyout", path(ca + ".key"),
                "-out", path(ca + ".crt"))
    with open(path("server.ext"), "w") as f:
        f.write("subjectAltName=IP:127.0.0.1\n")
    openssl("req", "-newkey", "ec", "-pkeyopt",
            "ec_paramgen_curve:prime256v1", "-nodes", "-subj",
            "/CN=rl test redis", "-keyout", path("server.key"), "-out",
            path("server.csr"))
    openssl("x509", "-req", "-in", path("server.csr"), "-CA", path("ca.crt"),
            "-CAkey", path("ca.key"), "-CAcreateserial", "-days", "2",
            "-extfile", path("server.ext"), "-out", path("server.crt"))


TLS = ["tls-cert-file", "tls-key-file", "tls-ca-cert-file"]


def tls_conf():
    return "".join("%s %s\n" % (k, path(v)) for k, v in
                   zip(TLS, ("server.crt", "server.key", "ca.crt"))) + \
        "tls-auth-clients no\ntls-replication yes\n"


def start(binary, conf_name, conf):
    """A redis-server or redis-sentinel on a TLS port only: (port, proc)."""
    for attempt in (1, 2):
        port = rlt.reserve_port()
        with open(path(conf_name), "w") as f:
            f.write("port 0\ntls-port %d\nbind 127.0.0.1\ndir %s\n"
                    "logfile %s\n" % (port, TMP, path(conf_name + ".log"))
                    + tls_conf() + conf)
        p = subprocess.Popen([binary, path(conf_name)],
                             stdout=subprocess.DEVNULL)
        PROCS.append(p)
        try:
            rlt.wait_listen(port, p, path(conf_name + ".log"))
            return port, p
        except RuntimeError:
            if attempt == 2:
                raise


SENT_PW = "sentinel-pw-never-elsewhere"
# The smallest sentinel ACL (deploy/README.md, "Redis Sentinel").
SENT_ACL = "-@all +sentinel|get-master-addr-by-name +subscribe &+switch-master"


def cli(port, *args, auth=False):
    a = ["--user", "rl", "--pass", SENT_PW, "--no-auth-warning"] if auth \
        else []
    return subprocess.run(
        ["redis-cli", "-p", str(port), "--tls", "--cacert", path("ca.crt")]
        + a + list(args), capture_output=True, text=True, timeout=10).stdout


def main():
    make_certs()
    mport, _ = start(REDIS, "master.conf", "save \"\"\nappendonly no\n")
    sport, _ = start(SENTINEL, "sentinel.conf",
                     "sentinel monitor m 127.0.0.1 %d 1\n"
                     "user default off\nuser rl on >%s %s\n"
                     % (mport, SENT_PW, SENT_ACL))
    check(fx.wait_for(lambda: str(mport) in cli(
        sport, "SENTINEL", "get-master-addr-by-name", "m", auth=True), 10),
        "the sentinel knows the master over TLS")
    with open(path("sentinel.pw"), "w") as f:
        f.write(SENT_PW + "\n")

    args = ["--redis-sentinel", "127.0.0.1:%d" % sport,
            "--redis-sentinel-master", "m", "--redis-sentinel-user", "rl",
            "--redis-sentinel-password-file", path("sentinel.pw"),
            "--redis-tls-ca", path("ca.crt")]
    p, ports, log = fx.start_server(RL_SERVER, TMP, "rl", args, PROCS)
    code, body = fx.healthz(ports["metrics"], 200)
    check(code == 200, "healthy: master found and checked over TLS (%d %s)"
          % (code, body.strip()))
    out = fx.decisions(RL_CHECK, ports["listen"], "tls-k")
    check(fx.exact(out), "decisions exact over TLS: %s" % out.strip())
    keys = cli(mport, "--scan", "--pattern", "*{tls-k}*").split()
    check(len(keys) == 1 and cli(mport, "GET", keys[0]).strip() == "3",
          "counted in the master: %s" % keys)
    check(fx.log_has(log, r"redis master.*127\.0\.0\.1:%d" % mport) or
          fx.log_has(log, str(mport)), "the master's address logged")
    check(not fx.log_has(log, "NOPERM|permission"),
          "the ACL allows every command rl-server sends the sentinel")
    with open(log, errors="replace") as f:
        check(SENT_PW not in f.read(), "no password in the log")
    p.terminate()
    check(p.wait(20) == 0, "stopped cleanly")

    # A CA that did not sign the sentinel's certificate: no master.
    args[-1] = path("otherca.crt")
    p, ports, log = fx.start_server(RL_SERVER, TMP, "rl-bad", args, PROCS)
    check(fx.wait_for(lambda: fx.log_has(log, "certificate verify failed"),
                      10), "the wrong CA refused, said in the log")
    code, body = fx.healthz(ports["metrics"], 200, timeout_s=1)
    check(code == 503, "not healthy without a sentinel (%d %s)"
          % (code, body.strip()))
    p.terminate()
    check(p.wait(20) == 0, "stopped cleanly")


try:
    main()
except Exception as e:  # a crash is a failure; the processes still stop
    import traceback
    traceback.print_exc()
    FAILS.append("exception: %s" % e)
rlt.end_run(FAILS, PROCS, TMP)
