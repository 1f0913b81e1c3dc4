#!/usr/bin/python3
"""A Redis node or a sentinel that streams one endless reply cannot grow
rl-server's memory (issue 40, finding 2): hiredis 0.14 buffers a
"$4000000000" bulk string for as long as its bytes keep coming. Two
hostile peers on reserved loopback ports, each streaming "x" after such a
header, up to LIMIT bytes a connection (so that a build without the cap
ends too):

  1. a data node (--redis) that passes the handshake, then answers the
     first batch with the endless string: rl-server drops the connection
     at the header (it announces more than the 16 MiB cap), counts it in
     rl_store_redis_reply_over_cap_total{peer="node"}, answers the
     request by the fail mode, and reconnects (and is dropped again);
     then the same with a status line that never ends (no length to
     judge by: dropped once 64 KiB of it are buffered, as hiredis scans
     the whole line again after every read); and as a Redis Cluster seed
     (--redis-cluster), whose slot map (CLUSTER SHARDS) is the endless
     string;
  2. sentinels (--redis-sentinel) that answer get-master-addr-by-name,
     and a +switch-master message on a confirmed subscription, with the
     endless string: each connection is dropped past 64 KiB and counted
     under peer="sentinel".

Both times rl-server's peak RSS (VmHWM) stays within a few MiB of where
it started, no connection took more than the cap plus the sockets'
buffers before rl-server closed it, and /metrics and rl-check keep being
answered.

Usage: e2e_redis_reply_cap.py RL_SERVER RL_CHECK"""
import os
import socketserver
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "..", "support"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import rlt  # noqa: E402
import sentinel_fx as fx  # noqa: E402

RL_SERVER, RL_CHECK = sys.argv[1:3]
TMP = tempfile.mkdtemp(prefix="rl-reply-cap-")
FAILS = []
PROCS = []
LIMIT = 256 << 20  # what one connection is streamed at most
CHUNK = b"x" * (256 << 10)
# What a connection may take before rl-server closes it: its cap plus the
# two sockets' buffers on loopback (tcp_wmem and tcp_rmem at most 4 and 6
# MiB by default) and one chunk in flight.
SLACK = 16 << 20
METRIC = "rl_store_redis_reply_over_cap_total"


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        FAILS.append(what)


def bulk(s):
    b = s.encode()
    return b"$%d\r\n%s\r\n" % (len(b), b)


class Hostile(socketserver.ThreadingTCPServer):
    """kind "node": a Redis that passes rl-server's handshake and answers
    EVALSHA/EVAL with the endless string; kind "sentinel": a sentinel
    that answers get-master-addr-by-name with it, and after confirming
    SUBSCRIBE sends a message holding it. Records, per connection, how
    much of the string went out and whether the peer closed first."""
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, kind, bomb=b"$4000000000\r\n"):
        self.kind = kind
        self.bomb = bomb
        self.lock = threading.Lock()
        self.streams = []  # [bytes sent, closed by the peer]
        super().__init__(("127.0.0.1", rlt.reserve_port()), Handler)

    def closed_by_peer(self):
        with self.lock:
            return [s[0] for s in self.streams if s[1]]

    def most(self):
        with self.lock:
            return max([s[0] for s in self.streams] or [0])


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

    def stream(self, head):
        """head, the bomb ("$4000000000\\r\\n" unless told otherwise),
        then "x" until the peer closes or LIMIT bytes went out."""
        srv, sock = self.server, self.request
        rec = [0, False]
        with srv.lock:
            srv.streams.append(rec)
        try:
            sock.sendall(head + srv.bomb)
            while rec[0] < LIMIT:
                sock.sendall(CHUNK)
                with srv.lock:
                    rec[0] += len(CHUNK)
        except OSError:
            with srv.lock:
                rec[1] = True

    def handle(self):
        srv, sock = self.server, self.request
        f = sock.makefile("rb")
        while True:
            try:
                cmd = self.read_command(f)
            except (OSError, ValueError):
                return
            if cmd is None:
                return
            word = cmd[0].upper()
            if srv.kind == "sentinel" and word == "SENTINEL":
                return self.stream(b"*2\r\n")
            if srv.kind == "sentinel" and word == "SUBSCRIBE":
                sock.sendall(b"*3\r\n" + bulk("subscribe") + bulk(cmd[1]) +
                             b":1\r\n")
                return self.stream(b"*3\r\n" + bulk("message") +
                                   bulk("+switch-master"))
            if word in ("EVALSHA", "EVAL", "CLUSTER"):
                return self.stream(b"")
            if word == "SCRIPT":
                sock.sendall(bulk("0" * 40))
            elif word == "INFO":
                sock.sendall(bulk("# Server\r\nrun_id:" + "1" * 40 + "\r\n"))
            elif word == "TIME":
                sock.sendall(b"*2\r\n" + bulk(str(int(time.time()))) +
                             bulk("0"))
            elif word in ("AUTH", "SELECT"):
                sock.sendall(b"+OK\r\n")
            else:
                sock.sendall(b"-ERR unknown command\r\n")


def start(kind, **kw):
    h = Hostile(kind, **kw)
    threading.Thread(target=h.serve_forever, daemon=True).start()
    return h


def vm(pid, field):
    """A /proc/PID/status field in bytes (VmRSS, VmHWM)."""
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    return 0


def probe(name, args, peer, cap, closes, poke):
    """Runs rl-server with args against a hostile peer and checks it
    drops every stream past cap, counts it, and stays bounded."""
    p, got, log = fx.start_server(RL_SERVER, TMP, name, args, PROCS)
    mp = got["metrics"]
    fx.metric(mp, "rl_store_up")  # /metrics answers: started
    base = vm(p.pid, "VmRSS")
    out = poke(got)
    check(fx.wait_for(lambda: len(h.closed_by_peer()) >= closes or
                      h.most() >= LIMIT, 30, 0.05) and
          len(h.closed_by_peer()) >= closes,
          "%s: rl-server closed %d streams (of %d; most sent to one: "
          "%.1f MiB)" % (name, len(h.closed_by_peer()), len(h.streams),
                         h.most() / 1048576.0))
    check(h.most() <= cap + SLACK,
          "%s: no connection took more than the cap and the sockets' "
          "buffers (%.1f MiB at most, cap %d KiB)"
          % (name, h.most() / 1048576.0, cap >> 10))
    check(fx.wait_for(lambda: fx.metric(mp, METRIC + '{peer="%s"}' % peer)
                      >= closes, 10),
          "%s: %s{peer=\"%s\"} counts them (%d)"
          % (name, METRIC, peer, fx.metric(mp, METRIC + '{peer="%s"}'
                                           % peer)))
    hwm = vm(p.pid, "VmHWM")
    check(hwm - base <= cap + (24 << 20),
          "%s: peak RSS %.1f MiB, %.1f MiB over the %.1f MiB at start"
          % (name, hwm / 1048576.0, (hwm - base) / 1048576.0,
             base / 1048576.0))
    check(fx.log_has(log, r"a reply went past the cap \(%d bytes" % cap),
          "%s: the log says why the connection was dropped" % name)
    out += fx.decisions(RL_CHECK, got["listen"], name, repeat=1)
    check(out.count("OK") >= 1,
          "%s: rl-check is answered (the fail mode): %s"
          % (name, " / ".join(out.split("\n"))))
    p.terminate()
    check(p.wait(20) == 0, "%s: rl-server stops cleanly" % name)


def main():
    global h
    # 1. A data node: the handshake passes, the first batch's reply is the
    # endless string; the request that sent it is answered by the fail
    # mode, and the reconnect meets the same.
    h = start("node")
    port = h.server_address[1]
    def batches(got):
        """Two requests, each once the store is up (so that it sends a
        batch): each meets the endless string."""
        out = ""
        for key in ("n0", "n1"):
            fx.healthz(got["metrics"], 200, 10)
            out += fx.decisions(RL_CHECK, got["listen"], key, repeat=1)
        return out

    probe("node", ["--redis", "redis://127.0.0.1:%d" % port], "node",
          16 << 20, 2, batches)
    h.shutdown()
    h.server_close()
    # 1b. No length to judge early: a status line that never ends is held
    # until it is 64 KiB long (hiredis scans it whole after every read).
    h = start("node", bomb=b"+")
    port = h.server_address[1]
    probe("line", ["--redis", "redis://127.0.0.1:%d" % port], "node",
          16 << 20, 2, batches)
    h.shutdown()
    h.server_close()
    # 1c. A cluster seed: the slot map is asked again after each drop.
    h = start("node")
    port = h.server_address[1]
    probe("cluster", ["--redis-cluster", "127.0.0.1:%d" % port], "node",
          16 << 20, 2, lambda got: "")
    h.shutdown()
    h.server_close()
    # 2. Sentinels: the question and the subscription (no deadline once
    # confirmed) both get the endless string, from each of two.
    s1, s2 = start("sentinel"), start("sentinel")
    h = s1
    sentinels = "127.0.0.1:%d,127.0.0.1:%d" % (s1.server_address[1],
                                               s2.server_address[1])
    probe("sentinel", ["--redis-sentinel", sentinels,
                       "--redis-sentinel-master", "mymaster"], "sentinel",
          64 << 10, 2, lambda got: "")
    for s in (s1, s2):
        s.shutdown()
        s.server_close()


h = None
try:
    main()
except Exception as e:  # noqa: BLE001 -- reported as a failure, logs kept
    check(False, "exception: %r" % e)
finally:
    rlt.end_run(FAILS, PROCS, TMP)
