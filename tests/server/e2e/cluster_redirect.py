#!/usr/bin/python3
"""A hostile Redis Cluster node: rl-server --redis-cluster with a password,
seeded with a fake node that serves every slot by its own map and answers
every script call with MOVED to another address (a trap). rl-server must
never follow the redirection to an address the cluster's map does not
name: the trap must see no connection, and so never the password. The
calls fail (the fail mode answers them) and the refusal is counted.

Usage: cluster_redirect.py RL_SERVER RL_CHECK"""
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "..", "support"))
import rlt  # noqa: E402

RL_SERVER, RL_CHECK = sys.argv[1], sys.argv[2]
SECRET = "s3cret-never-elsewhere"
TMP = tempfile.mkdtemp(prefix="rl-redirect-")
FAILS = []
trap_bytes = []


def check(cond, what):
    if not cond:
        FAILS.append(what)
        print("FAIL:", what, flush=True)


def bulk(s):
    b = s.encode() if isinstance(s, str) else s
    return b"$%d\r\n%s\r\n" % (len(b), b)


def read_command(f):
    """One RESP command (an array of bulk strings), or None at EOF."""
    line = f.readline()
    if not line:
        return None
    if not line.startswith(b"*"):
        return [line.strip()]
    n, args = int(line[1:]), []
    for _ in range(n):
        ln = int(f.readline()[1:])
        args.append(f.read(ln + 2)[:-2])
    return args


def fake_node(conn, port, trap_port):
    try:
        answer(conn, port, trap_port)
    except (OSError, ValueError):
        pass  # rl-server went away mid-command
    conn.close()


def answer(conn, port, trap_port):
    f = conn.makefile("rb")
    while True:
        cmd = read_command(f)
        if cmd is None:
            break
        name = cmd[0].upper()
        sub = cmd[1].upper() if len(cmd) > 1 else b""
        if name == b"AUTH":
            out = b"+OK\r\n" if cmd[-1] == SECRET.encode() else \
                b"-WRONGPASS invalid password\r\n"
        elif name == b"SCRIPT":
            out = bulk("0" * 40)
        elif name == b"INFO":
            out = bulk("redis_version:7.0.15\r\nrun_id:%s\r\n" % ("a" * 40))
        elif name == b"TIME":
            t = time.time()
            out = b"*2\r\n" + bulk(str(int(t))) + \
                bulk(str(int((t % 1) * 1e6)))
        elif name == b"CLUSTER" and sub == b"SLOTS":
            # Every slot, on this node.
            out = (b"*1\r\n*3\r\n:0\r\n:16383\r\n*2\r\n" + bulk("127.0.0.1") +
                   b":%d\r\n" % port)
        elif name in (b"EVALSHA", b"EVAL"):
            out = b"-MOVED 866 127.0.0.1:%d\r\n" % trap_port
        elif name == b"HGETALL":
            out = b"*0\r\n"
        elif name in (b"HSET", b"HDEL", b"PEXPIRE", b"EXPIRE"):
            out = b":1\r\n"
        else:
            out = b"-ERR unknown command\r\n"
        conn.sendall(out)


def serve(lsock, handler):
    while True:
        try:
            c, _ = lsock.accept()
        except OSError:
            return
        threading.Thread(target=handler, args=(c,), daemon=True).start()


def trap(conn):
    conn.settimeout(2)
    try:
        while True:
            b = conn.recv(4096)
            if not b:
                break
            trap_bytes.append(b)
    except OSError:
        pass
    conn.close()


def listener():
    for _ in range(2):
        port = rlt.reserve_port()
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            s.close()
            continue
        s.listen(16)
        return s, port
    raise RuntimeError("no port for a listener")


def main():
    node, nport = listener()
    tsock, tport = listener()
    threading.Thread(target=serve, daemon=True, args=(
        node, lambda c: fake_node(c, nport, tport))).start()
    trap_conns = []
    threading.Thread(target=serve, daemon=True, args=(
        tsock, lambda c: (trap_conns.append(1), trap(c)))).start()
    ports = os.path.join(TMP, "ports")
    log = os.path.join(TMP, "server.log")
    with open(log, "w") as lf:
        p = subprocess.Popen(
            [RL_SERVER, "--listen", "127.0.0.1:0", "--metrics",
             "127.0.0.1:0", "--port-file", ports, "--redis-cluster",
             "redis://:%s@127.0.0.1:%d" % (SECRET, nport),
             "--redis-timeout-ms", "500", "--log-level", "debug"],
            stderr=lf)
    try:
        got = rlt.wait_ports(p, ports, log)
        # Until the store reports the map: /healthz 200.
        end = time.time() + 10
        while time.time() < end:
            try:
                urllib.request.urlopen("http://127.0.0.1:%d/healthz"
                                       % got["metrics"], timeout=2)
                break
            except OSError:
                time.sleep(0.02)
        out = subprocess.run(
            [RL_CHECK, "--server", "127.0.0.1:%d" % got["listen"], "--key",
             "k", "--limit", "5", "--window", "60", "--repeat", "3",
             # The store gives up after --redis-timeout-ms; a loaded
             # machine may take longer to say so than rl-check's 1 s.
             "--timeout", "10000"],
            capture_output=True, text=True, timeout=30).stdout
        print(out, end="")
        # Every call failed over to the fail mode (open by default):
        # allowed, nothing counted.
        check(out.count("OK used=0 ") == 3,
              "the redirected calls are answered by the fail mode")
        m = urllib.request.urlopen("http://127.0.0.1:%d/metrics"
                                   % got["metrics"], timeout=5).read().decode()
        n = [line for line in m.splitlines() if line.startswith(
            "rl_redis_cluster_unmapped_redirections_total ")]
        check(n and int(n[0].split()[1]) >= 1,
              "unmapped redirections counted: %r" % n)
    finally:
        p.terminate()
        p.wait(20)
    seen = b"".join(trap_bytes)
    check(not trap_conns, "rl-server connected to the address a MOVED named "
          "(%d connections)" % len(trap_conns))
    check(SECRET.encode() not in seen, "the password reached the trap")
    with open(log) as f:
        check(SECRET not in f.read(), "the password is in the log")


try:
    main()
finally:
    if not FAILS:
        shutil.rmtree(TMP, ignore_errors=True)
    else:
        print("logs in", TMP)
print("%d failures" % len(FAILS))
sys.exit(1 if FAILS else 0)
