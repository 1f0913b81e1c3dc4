#!/usr/bin/python3
"""Loopback connection churn, the load that makes port races show: keeps
CONNS connections to a listener of its own open and replaces one after
another, so local ports in the ephemeral range are taken and freed all the
time, as the outgoing connections of busy parallel tests take them.

The listener's side closes first, so the TIME_WAIT states sit on its port
and not on ephemeral ones, and new connections come at most RATE per
second: the load is ports held, not ports exhausted.

Usage: churn.py [CONNS] [SECONDS] [RATE]   (defaults 2000, 3600 and 2000;
stops by itself, or on SIGTERM). Prints the connections made when it
stops."""
import collections
import signal
import socket
import sys
import time

conns = int(sys.argv[1]) if len(sys.argv) > 1 else 2000
secs = float(sys.argv[2]) if len(sys.argv) > 2 else 3600
rate = float(sys.argv[3]) if len(sys.argv) > 3 else 2000
stop = [False]
signal.signal(signal.SIGTERM, lambda *_: stop.__setitem__(0, True))

lsock = socket.socket()
lsock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
lsock.bind(("127.0.0.1", 0))
lsock.listen(4096)
lsock.setblocking(False)
addr = lsock.getsockname()
held, accepted = collections.deque(), collections.deque()
made = 0
start = time.time()
end = start + secs
while not stop[0] and time.time() < end:
    ahead = made / rate - (time.time() - start)
    if ahead > 0:
        time.sleep(ahead)
    try:
        c = socket.create_connection(addr, 1)
        held.append(c)
        made += 1
    except OSError:
        time.sleep(0.01)
    try:
        while True:
            accepted.append(lsock.accept()[0])
    except (BlockingIOError, OSError):
        pass
    while len(accepted) > conns:
        accepted.popleft().close()
    while len(held) > conns + 100:
        held.popleft().close()
print("churn: %d connections made" % made)
