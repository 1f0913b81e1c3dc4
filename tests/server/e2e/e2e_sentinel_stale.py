#!/usr/bin/python3
"""Redis Sentinel's paths that a real failover does not reach on demand,
with a scripted sentinel (this file's FakeSentinel, speaking RESP on a
reserved loopback port) in front of two real redis-servers that need a
password:

  1. the sentinel names a replica (a stale address after a failover):
     rl-server asks ROLE, hears "slave", drops it, asks the sentinel again,
     and decides nothing from it (fail mode, /healthz 503) until the
     sentinel names the master; then decisions are exact, in the master;
  2. a +switch-master message (to a promoted replica) moves rl-server at
     once: one "redis master switched" line with both addresses,
     rl_store_master_switches_total 1, decisions counted in the new master;
  3. the master demoted under rl-server (REPLICAOF, the connection kept):
     its batches get READONLY, are answered once by the fail mode, and
     rl-server asks the sentinel again and returns to the master it names;
  4. the sentinel's own password (--redis-sentinel-password-file) goes to
     the sentinel only, the data nodes' (--redis-password-file) to the
     data nodes only; a sentinel that answers garbage or nil is left for
     the next one.

Usage: e2e_sentinel_stale.py RL_SERVER RL_CHECK REDIS_SERVER"""
import os
import socket
import socketserver
import subprocess
import sys
import tempfile
import threading

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "..", "support"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import rlt  # noqa: E402
import sentinel_fx as fx  # noqa: E402

RL_SERVER, RL_CHECK, REDIS = sys.argv[1:4]
DATA_PW = "data-pw-only-for-redis"
SENT_PW = "sentinel-pw-only-for-sentinels"
TMP = tempfile.mkdtemp(prefix="rl-sentinel-stale-")
FAILS = []
PROCS = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        FAILS.append(what)


def bulk(s):
    b = s.encode()
    return b"$%d\r\n%s\r\n" % (len(b), b)


class FakeSentinel(socketserver.ThreadingTCPServer):
    """Answers AUTH (SENT_PW), SENTINEL get-master-addr-by-name (with
    self.answer: (host, port), None for nil, or raw bytes) and SUBSCRIBE
    (then pushes what publish() is given). Records every command."""
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, port):
        self.lock = threading.Lock()
        self.answer = None
        self.commands = []
        self.subscribers = []
        self.no_subscribe = False
        super().__init__(("127.0.0.1", port), Handler)

    def publish(self, text):
        with self.lock:
            subs = list(self.subscribers)
        msg = b"*3\r\n" + bulk("message") + bulk("+switch-master") + \
            bulk(text)
        for s in subs:
            try:
                s.sendall(msg)
            except OSError:
                pass

    def count(self, word):
        with self.lock:
            return sum(1 for c in self.commands if c and c[0].upper() == word)


class Handler(socketserver.BaseRequestHandler):
    def read_command(self, f):
        line = f.readline()
        if not line.startswith(b"*"):
            return None
        args = []
        for _ in range(int(line[1:])):
            n = int(f.readline()[1:])
            args.append(f.read(n + 2)[:-2].decode())
        return args

    def handle(self):
        srv, sock = self.server, self.request
        f = sock.makefile("rb")
        authed = False
        while True:
            try:
                cmd = self.read_command(f)
            except (OSError, ValueError):
                return
            if cmd is None:
                return
            with srv.lock:
                srv.commands.append(cmd)
                answer = srv.answer
            word = cmd[0].upper()
            if word == "AUTH":
                authed = cmd[-1] == SENT_PW
                sock.sendall(b"+OK\r\n" if authed else
                             b"-WRONGPASS invalid password\r\n")
            elif not authed:
                sock.sendall(b"-NOAUTH Authentication required.\r\n")
            elif word == "SENTINEL":
                if answer is None:
                    sock.sendall(b"*-1\r\n")
                elif isinstance(answer, bytes):
                    sock.sendall(answer)
                else:
                    sock.sendall(b"*2\r\n" + bulk(answer[0]) +
                                 bulk(str(answer[1])))
            elif word == "SUBSCRIBE" and srv.no_subscribe:
                return
            elif word == "SUBSCRIBE":
                sock.sendall(b"*3\r\n" + bulk("subscribe") + bulk(cmd[1]) +
                             b":1\r\n")
                with srv.lock:
                    srv.subscribers.append(sock)
            else:
                sock.sendall(b"-ERR unknown command\r\n")


def start_fake():
    fake = FakeSentinel(rlt.reserve_port())
    threading.Thread(target=fake.serve_forever, daemon=True).start()
    return fake


def main():
    auth = ["--requirepass", DATA_PW, "--masterauth", DATA_PW]
    mport, _ = rlt.start_redis(TMP, auth, REDIS, PROCS)
    rport, _ = rlt.start_redis(
        TMP, auth + ["--replicaof", "127.0.0.1", str(mport)], REDIS, PROCS)
    check(fx.wait_for(lambda: "master_link_status:up" in fx.cli(
        rport, "INFO", "replication", password=DATA_PW), 10),
        "the replica follows the master")
    # The first sentinel answers garbage, the second nil (it does not know
    # the master), the third names the replica.
    bad, nil, fake = start_fake(), start_fake(), start_fake()
    bad.answer = b"*2\r\n$9\r\n127.0.0.1\r\n$5\r\n99999\r\n"
    nil.answer = None
    fake.answer = ("127.0.0.1", rport)
    # Neither keeps a subscription (the connection closes): rl-server
    # subscribes to the next, the third.
    bad.no_subscribe = nil.no_subscribe = True
    pwfile = os.path.join(TMP, "data.pw")
    spwfile = os.path.join(TMP, "sentinel.pw")
    with open(pwfile, "w") as f:
        f.write(DATA_PW + "\n")
    with open(spwfile, "w") as f:
        f.write(SENT_PW + "\n")
    sentinels = ",".join("127.0.0.1:%d" % f.server_address[1]
                         for f in (bad, nil, fake))
    # One sentinel of three names anything at all here, so an address is
    # taken from one (--redis-sentinel-agree 1); the default, a majority,
    # is e2e_sentinel_agree's.
    p, got, log = fx.start_server(RL_SERVER, TMP, "stale", [
        "--redis-sentinel", sentinels, "--redis-sentinel-master", "mymaster",
        "--redis-sentinel-password-file", spwfile,
        "--redis-password-file", pwfile, "--redis-sentinel-agree", "1"],
        PROCS)
    mp = got["metrics"]

    # 1. The stale address: ROLE slave, dropped, asked again.
    check(fx.wait_for(lambda: fx.log_has(log, r"not the master \(ROLE "
                                              r"slave\)"), 10),
          "stale: ROLE slave is refused ('not the master (ROLE slave)')")
    asked = fake.count("SENTINEL")
    check(fx.wait_for(lambda: fake.count("SENTINEL") > asked + 1, 10),
          "stale: the sentinel is asked again after the refusal")
    code, _ = fx.healthz(mp, 503, 2)
    check(code == 503, "stale: /healthz 503 while only a replica is named")
    out = fx.decisions(RL_CHECK, got["listen"], "s0", repeat=1)
    check(out.startswith("OK") and not fx.keys(rport, "s0", DATA_PW),
          "stale: answered by the fail mode, nothing counted: " + out.strip())
    check(fx.log_has(log, r"redis sentinel failed.*does not know the "
                          r"master") and
          fx.log_has(log, r"redis sentinel failed.*unexpected reply"),
          "the nil and the garbage sentinels are left for the next")
    fake.answer = ("127.0.0.1", mport)
    code, body = fx.healthz(mp, 200, 10)
    check(code == 200, "stale: up once the master is named (%d %s)"
          % (code, body.strip()))
    out = fx.decisions(RL_CHECK, got["listen"], "s1")
    check(fx.exact(out) and len(fx.keys(mport, "s1", DATA_PW)) == 1,
          "stale: exact decisions, counted in the master:\n" + out)

    # 2. +switch-master: to the replica, promoted.
    fx.cli(rport, "REPLICAOF", "NO", "ONE", password=DATA_PW)
    check(fx.wait_for(lambda: fx.role(rport, DATA_PW) == "master", 5),
          "switch: the replica is promoted")
    check(fx.wait_for(lambda: fake.subscribers, 5),
          "switch: rl-server subscribed to +switch-master")
    switches = fx.metric(mp, "rl_store_master_switches_total")
    fake.answer = ("127.0.0.1", rport)
    fake.publish("othermaster 127.0.0.1 1 127.0.0.1 2")
    fake.publish("mymaster 127.0.0.1 %d 127.0.0.1 %d" % (mport, rport))
    check(fx.wait_for(lambda: fx.log_has(
        log, r"redis master switched\" master=mymaster from=127\.0\.0\.1:%d "
             r"to=127\.0\.0\.1:%d via=\+switch-master" % (mport, rport)), 5),
          "switch: one line with the old and the new address")
    check(fx.wait_for(lambda: fx.metric(
        mp, "rl_store_master_switches_total") == switches + 1, 5) and
        fx.metric(mp, "rl_store_master_switches_total") == switches + 1,
        "switch: rl_store_master_switches_total one more (another master's "
        "message ignored)")
    fx.healthz(mp, 200, 5)
    out = fx.decisions(RL_CHECK, got["listen"], "s2")
    check(fx.exact(out) and len(fx.keys(rport, "s2", DATA_PW)) == 1 and
          not fx.keys(mport, "s2", DATA_PW),
          "switch: exact decisions, counted in the new master:\n" + out)

    # 3. The master demoted under the connection: READONLY. The sentinel
    # still names it for a moment (ROLE refuses it), then the other.
    before = fx.metric(mp, "rl_decisions_total")
    fx.cli(rport, "REPLICAOF", "127.0.0.1", str(mport), password=DATA_PW)
    out = fx.decisions(RL_CHECK, got["listen"], "s3", repeat=1)
    check(fx.wait_for(lambda: fx.log_has(log, r"READONLY"), 5),
          "readonly: the refusal is seen (log says READONLY)")
    check(fx.metric(mp, "rl_decisions_total") - before == 1 and
          out.startswith("OK") and not fx.keys(mport, "s3", DATA_PW),
          "readonly: that request got one answer (the fail mode), "
          "nothing counted: " + out.strip())
    fake.answer = ("127.0.0.1", mport)
    code, _ = fx.healthz(mp, 200, 10)
    out = fx.decisions(RL_CHECK, got["listen"], "s4")
    check(code == 200 and fx.exact(out) and
          len(fx.keys(mport, "s4", DATA_PW)) == 1,
          "readonly: back on the master the sentinel names:\n" + out)

    # 4. Passwords where they belong.
    with fake.lock:
        sent = [c for c in fake.commands if c[0].upper() == "AUTH"]
        everything = repr(fake.commands)
    check(sent and all(c[-1] == SENT_PW for c in sent) and
          DATA_PW not in everything,
          "auth: the sentinel got its own password, never the data nodes'")
    with open(log) as f:
        text = f.read()
    check(SENT_PW not in text and DATA_PW not in text,
          "auth: neither password is in the log")
    p.terminate()
    check(p.wait(20) == 0, "rl-server stops cleanly")
    for f in (bad, nil, fake):
        f.shutdown()
        f.server_close()


try:
    main()
except Exception as e:  # noqa: BLE001 -- reported as a failure, logs kept
    check(False, "exception: %r" % e)
finally:
    rlt.end_run(FAILS, PROCS, TMP)
