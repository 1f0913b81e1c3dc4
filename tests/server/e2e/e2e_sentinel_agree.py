#!/usr/bin/python3
"""The data nodes' password goes only where enough sentinels say the
master is (issue 40, finding 10). Redis answers ROLE, HELLO and anything
else with NOAUTH before AUTH on a protected node, so a node cannot be
checked before it gets the password: what rl-server can do is take an
address only once a majority of the sentinels (--redis-sentinel-agree)
name it. Two scripted sentinels (this file's Sentinel, RESP on reserved
loopback ports), a real redis-server that needs a password, and a trap
(a fake Redis that records every connection and command):

  1. sentinel A (asked first, and subscribed to) names the trap, B the
     master: nothing reaches the trap, rl-server logs that the sentinels
     disagree, /healthz is 503 and requests get the fail mode;
  2. A names the master too: rl-server connects there, decisions exact;
  3. A announces +switch-master to the trap: rl-server asks B, which
     still names the master, and stays; the trap is never connected to
     and no AUTH with the password leaves for it;
  4. with --redis-sentinel-agree 1 (the old behaviour) the same first
     step sends the trap the password: what the default prevents.
Without a sentinel password or TLS, rl-server warns at start.

Usage: e2e_sentinel_agree.py RL_SERVER RL_CHECK REDIS_SERVER"""
import os
import socketserver
import sys
import tempfile
import threading

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "..", "support"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import rlt  # noqa: E402
import sentinel_fx as fx  # noqa: E402

RL_SERVER, RL_CHECK, REDIS = sys.argv[1:4]
DATA_PW = "data-pw-only-for-the-master"
TMP = tempfile.mkdtemp(prefix="rl-sentinel-agree-")
FAILS = []
PROCS = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        FAILS.append(what)


def bulk(s):
    b = s.encode()
    return b"$%d\r\n%s\r\n" % (len(b), b)


class Fake(socketserver.ThreadingTCPServer):
    """kind "sentinel": answers get-master-addr-by-name with self.answer
    and keeps SUBSCRIBE (publish() pushes a message); kind "trap": a
    Redis that answers +OK to everything. Records every command and
    counts connections."""
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, kind):
        self.kind = kind
        self.lock = threading.Lock()
        self.answer = None
        self.commands = []
        self.connections = 0
        self.subscribers = []
        super().__init__(("127.0.0.1", rlt.reserve_port()), Handler)

    def port(self):
        return self.server_address[1]

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

    def seen(self):
        with self.lock:
            return repr(self.commands)


class Handler(socketserver.BaseRequestHandler):
    def read_command(self, f):
        line = f.readline()
        if not line.startswith(b"*"):
            return None
        args = []
        for _ in range(int(line[1:])):
            n = int(f.readline()[1:])
            args.append(f.read(n + 2)[:-2].decode(errors="replace"))
        return args

    def handle(self):
        srv, sock = self.server, self.request
        f = sock.makefile("rb")
        with srv.lock:
            srv.connections += 1
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
            try:
                self.answer(srv, sock, cmd, word, answer)
            except OSError:
                return

    def answer(self, srv, sock, cmd, word, answer):
        if srv.kind == "trap":
            sock.sendall(b"+OK\r\n")
        elif word == "SENTINEL":
            sock.sendall(b"*2\r\n" + bulk(answer[0]) + bulk(str(answer[1])))
        elif word == "SUBSCRIBE":
            sock.sendall(b"*3\r\n" + bulk("subscribe") + bulk(cmd[1]) +
                         b":1\r\n")
            with srv.lock:
                srv.subscribers.append(sock)
        else:
            sock.sendall(b"-ERR unknown command\r\n")


def start(kind):
    s = Fake(kind)
    threading.Thread(target=s.serve_forever, daemon=True).start()
    return s


def main():
    mport, _ = rlt.start_redis(TMP, ["--requirepass", DATA_PW], REDIS, PROCS)
    trap, a, b = start("trap"), start("sentinel"), start("sentinel")
    master = ("127.0.0.1", mport)
    a.answer, b.answer = ("127.0.0.1", trap.port()), master
    pwfile = os.path.join(TMP, "data.pw")
    with open(pwfile, "w") as f:
        f.write(DATA_PW + "\n")
    sentinels = "127.0.0.1:%d,127.0.0.1:%d" % (a.port(), b.port())
    p, got, log = fx.start_server(RL_SERVER, TMP, "agree", [
        "--redis-sentinel", sentinels, "--redis-sentinel-master", "mymaster",
        "--redis-password-file", pwfile], PROCS)
    mp = got["metrics"]

    # 1. One of two names the trap: not agreed, nothing sent there.
    check(fx.wait_for(lambda: fx.log_has(log, r"redis sentinels disagree"),
                      10),
          "disagree: logged (the trap named by A, the master by B)")
    check(fx.wait_for(lambda: b.count("SENTINEL") >= 2 and
                      a.count("SENTINEL") >= 2, 10),
          "disagree: both sentinels asked, and asked again (A %d, B %d)"
          % (a.count("SENTINEL"), b.count("SENTINEL")))
    code, _ = fx.healthz(mp, 503, 2)
    out = fx.decisions(RL_CHECK, got["listen"], "t0", repeat=1)
    check(code == 503 and out.startswith("OK") and
          not fx.keys(mport, "t0", DATA_PW),
          "disagree: /healthz 503, the fail mode, nothing counted: "
          + out.strip())
    check(trap.connections == 0 and DATA_PW not in trap.seen(),
          "disagree: the trap was never connected to (%d connections, "
          "commands %s)" % (trap.connections, trap.seen()[:200]))

    # 2. Both name the master.
    a.answer = master
    code, body = fx.healthz(mp, 200, 10)
    check(code == 200, "agree: up once both name the master (%d %s)"
          % (code, body.strip()))
    out = fx.decisions(RL_CHECK, got["listen"], "t1")
    check(fx.exact(out) and len(fx.keys(mport, "t1", DATA_PW)) == 1,
          "agree: exact decisions, counted in the master:\n" + out)

    # 3. A +switch-master to the trap from the subscription alone.
    check(fx.wait_for(lambda: a.subscribers or b.subscribers, 5),
          "switch: rl-server subscribed to +switch-master")
    subscribed = a if a.subscribers else b
    asked = {s: s.count("SENTINEL") for s in (a, b)}
    subscribed.answer = ("127.0.0.1", trap.port())
    subscribed.publish("mymaster 127.0.0.1 %d 127.0.0.1 %d"
                       % (mport, trap.port()))
    other = b if subscribed is a else a
    check(fx.wait_for(lambda: other.count("SENTINEL") > asked[other], 5),
          "switch: the other sentinel is asked at once")
    out = fx.decisions(RL_CHECK, got["listen"], "t2")
    check(fx.exact(out) and len(fx.keys(mport, "t2", DATA_PW)) == 1,
          "switch: still on the master, decisions exact:\n" + out)
    check(trap.connections == 0 and DATA_PW not in trap.seen() and
          not fx.log_has(log, r"redis master switched"),
          "switch: not followed, the trap never connected to (%d)"
          % trap.connections)
    check(fx.log_has(log, r"the sentinels need no password and are not "
                          r"reached over TLS"),
          "the start warns: the data nodes have a password, the sentinels "
          "neither a password nor TLS")
    with open(log) as f:
        check(DATA_PW not in f.read(), "the password is not in the log")
    p.terminate()
    check(p.wait(20) == 0, "rl-server stops cleanly")

    # 4. --redis-sentinel-agree 1: the first answer is taken, and the trap
    # gets the password.
    a.answer = ("127.0.0.1", trap.port())
    b.answer = master
    p, got, log = fx.start_server(RL_SERVER, TMP, "agree1", [
        "--redis-sentinel", sentinels, "--redis-sentinel-master", "mymaster",
        "--redis-password-file", pwfile, "--redis-sentinel-agree", "1"],
        PROCS)
    check(fx.wait_for(lambda: DATA_PW in trap.seen(), 10),
          "agree 1: the trap named by the first sentinel gets AUTH with "
          "the password (what a majority prevents)")
    p.terminate()
    check(p.wait(20) == 0, "rl-server stops cleanly")
    for s in (trap, a, b):
        s.shutdown()
        s.server_close()


try:
    main()
except Exception as e:  # noqa: BLE001 -- reported as a failure, logs kept
    check(False, "exception: %r" % e)
finally:
    rlt.end_run(FAILS, PROCS, TMP)
