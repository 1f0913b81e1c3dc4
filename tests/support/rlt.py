"""Ports and servers for the Python tests, as tests/support/rlt.c does for
the C ones: our servers listen on port 0 and say which ports they bound
(--port-file); a server that cannot (redis-server) gets a port reserved
with the same lock files as rlt.c and deploy/ports.sh. Every wait also
watches the process, and a process that exits fails the wait at once with
the last lines of its log.

A script that imports this module and is stopped with SIGTERM or SIGINT
(ctest's timeout, tests/run.sh's, an operator's ^C) kills what it started
first, as end_run does, keeps its logs and exits non-zero (128 + the
signal), so no redis-server or rl-server outlives a test that was cut
short."""
import fcntl
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import time

PORT_DIR = os.environ.get("RLT_PORT_DIR") or "/tmp/rlt-ports"
_held = []  # lock files, open for as long as this process lives


def _port_range():
    lo, hi = 32768, 60999
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            lo, hi = (int(x) for x in f.read().split())
    except (OSError, ValueError):
        pass
    return (15000, lo - 1) if lo - 1 >= 16000 else (hi + 1, 65535)


def _bindable(port):
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        s.bind(("127.0.0.1", port))
        return True
    except OSError:
        return False
    finally:
        s.close()


def reserve_port():
    """A loopback port outside the ephemeral range, locked for this process
    until it exits (no other test gets it, and this one never twice)."""
    try:
        os.mkdir(PORT_DIR, 0o1777)
        os.chmod(PORT_DIR, 0o1777)
    except FileExistsError:
        pass
    lo, hi = _port_range()
    for _ in range(4096):
        port = random.randint(lo, hi)
        try:
            f = open(os.path.join(PORT_DIR, str(port)), "a+")
        except OSError:
            continue
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            f.close()
            continue
        _held.append(f)  # kept locked even when busy: never ours to use
        if _bindable(port):
            return port
    raise RuntimeError("no port left to reserve in %d-%d" % (lo, hi))


def tail(path, lines=15):
    try:
        with open(path, errors="replace") as f:
            return "".join(f.readlines()[-lines:])
    except OSError:
        return ""


def _gone(proc, log, what):
    raise RuntimeError("%s exited (status %s) before it listened; last "
                       "lines of %s:\n%s" % (what, proc.returncode, log,
                                             tail(log)))


def wait_ports(proc, port_file, log, timeout_s=10):
    """Waits until proc (started with --port-file port_file) has written
    it; returns {flag: port}. Fails at once if proc exits first."""
    end = time.time() + timeout_s
    while time.time() < end:
        try:
            with open(port_file) as f:
                text = f.read()
        except FileNotFoundError:
            text = ""
        if text.endswith("\n"):
            return {flag: int(addr.rsplit(":", 1)[1]) for flag, addr in
                    (line.split() for line in text.splitlines())}
        if proc.poll() is not None:
            _gone(proc, log, "server")
        time.sleep(0.01)
    raise RuntimeError("no port file %s after %d s" % (port_file, timeout_s))


def wait_listen(port, proc, log, timeout_s=10):
    """Waits until something accepts on 127.0.0.1:port; fails at once if
    proc exits first."""
    end = time.time() + timeout_s
    while time.time() < end:
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            return
        except OSError:
            pass
        if proc.poll() is not None:
            _gone(proc, log, "server on port %d" % port)
        time.sleep(0.01)
    raise RuntimeError("nothing listening on port %d after %d s"
                       % (port, timeout_s))


def server_args():
    """$RLT_SERVER_ARGS, split at spaces: what every rl-server a script
    starts gets after its own flags (how a suite runs again under other
    flags, --threads 2), as rlt.c's rlt_spawn_listening adds them."""
    return os.environ.get("RLT_SERVER_ARGS", "").split()


def start_redis(tmp, extra=(), redis="redis-server", procs=None):
    """Starts a redis-server on a reserved port with its log and files in
    tmp (one more try on another port if something outside the tests
    holds the first); returns (port, proc). The process is appended to
    procs, for end_run to stop."""
    for attempt in (1, 2):
        port = reserve_port()
        log = os.path.join(tmp, "redis-%d.log" % port)
        p = subprocess.Popen(
            [redis, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", tmp, "--logfile", log] +
            list(extra), stdout=subprocess.DEVNULL)
        if procs is not None:
            procs.append(p)
        try:
            wait_listen(port, p, log)
            return port, p
        except RuntimeError:
            if attempt == 2:
                raise


def _kill(procs):
    """Kills (SIGKILL) and reaps each process of procs that still runs."""
    for p in procs:
        if p.poll() is None:
            p.kill()
            p.wait()


def _children():
    """The pids of this process's children (every thread's), from /proc:
    whatever a script started, whether it kept the Popen in its procs list,
    a fixture's, or none."""
    me, out = os.getpid(), []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % name) as f:
                stat = f.read()
        except OSError:
            continue  # gone meanwhile
        # pid (comm) state ppid ...: comm may hold spaces and parentheses.
        fields = stat[stat.rfind(")") + 2:].split()
        if len(fields) > 1 and fields[1] == str(me):
            out.append(int(name))
    return out


def _on_signal(signum, frame):
    """SIGTERM or SIGINT: end_run's cleanup for a script cut short. Every
    child still running is killed and reaped (the procs a script hands to
    end_run are among them), nothing is removed (the logs are what tells
    why it was stopped), and the script exits with 128 + signum at once:
    no finally block or thread of the test runs on."""
    killed = 0
    for pid in _children():
        try:
            os.kill(pid, signal.SIGKILL)
            killed += 1
        except ProcessLookupError:
            pass
        try:
            os.waitpid(pid, 0)
        except ChildProcessError:
            pass  # reaped already (a Popen's wait)
    print("stopped by signal %d: killed the %d processes it started; logs "
          "kept" % (signum, killed), flush=True)
    sys.stderr.flush()
    os._exit(128 + signum)


for _sig in (signal.SIGTERM, signal.SIGINT):
    signal.signal(_sig, _on_signal)


def end_run(fails, procs, tmp):
    """A script's end: kills what it started that still runs, removes tmp
    unless something failed (then says where the logs are), prints the
    count of failures and exits with 1 if there were any. A script stopped
    by SIGTERM or SIGINT before gets the same cleanup (_on_signal), its
    logs kept."""
    _kill(procs)
    if not fails:
        shutil.rmtree(tmp, ignore_errors=True)
    else:
        print("logs in", tmp)
    print("%d failures" % len(fails))
    sys.exit(1 if fails else 0)


def envoy_stubs(proto_dir, tmp, native=False):
    """Generates the Python stubs of Envoy's rate limit service (and with
    native, of ratelimit.proto) from proto_dir into tmp/stubs, and puts
    them on sys.path."""
    files = ["envoy/service/ratelimit/v3/rls.proto",
             "envoy/extensions/common/ratelimit/v3/ratelimit.proto",
             "envoy/config/core/v3/base.proto",
             "envoy/type/v3/ratelimit_unit.proto"]
    out = os.path.join(tmp, "stubs")
    os.mkdir(out)
    subprocess.check_call([sys.executable, "-m", "grpc_tools.protoc",
                           "-I", proto_dir, "--python_out=" + out,
                           "--grpc_python_out=" + out] + files +
                          (["ratelimit.proto"] if native else []))
    sys.path.insert(0, out)


def health_stubs(proto_dir, tmp):
    """Generates the Python stubs of grpc.health.v1 (proto_dir's
    grpc/health/v1/health.proto; Debian packages no grpc_health) into
    tmp/stubs as top-level health_pb2 and health_pb2_grpc, and puts them on
    sys.path: compiled as grpc/health/v1/... they would hide under grpcio's
    own package `grpc`. The proto package, and so the method paths, stay
    grpc.health.v1."""
    src = os.path.join(tmp, "health_proto")
    out = os.path.join(tmp, "stubs")
    os.makedirs(src, exist_ok=True)
    os.makedirs(out, exist_ok=True)
    shutil.copy(os.path.join(proto_dir, "grpc", "health", "v1",
                             "health.proto"), src)
    subprocess.check_call([sys.executable, "-m", "grpc_tools.protoc",
                           "-I", src, "--python_out=" + out,
                           "--grpc_python_out=" + out, "health.proto"])
    if out not in sys.path:
        sys.path.insert(0, out)


def rlqs_stubs(proto_dir, tmp):
    """envoy_stubs, and the stubs of Envoy's rate limit quota service
    (RLQS) beside them (tmp/stubs), for rlqs_envoy (the client that
    behaves as Envoy's rate_limit_quota filter)."""
    envoy_stubs(proto_dir, tmp)
    subprocess.check_call([sys.executable, "-m", "grpc_tools.protoc",
                           "-I", proto_dir,
                           "--python_out=" + os.path.join(tmp, "stubs"),
                           "--grpc_python_out=" + os.path.join(tmp, "stubs"),
                           "envoy/service/rate_limit_quota/v3/rlqs.proto",
                           "envoy/type/v3/ratelimit_strategy.proto",
                           "envoy/type/v3/token_bucket.proto"])


def xds_stubs(proto_dir, tmp):
    """envoy_stubs, and the stubs of the aggregated discovery service and
    RateLimitConfig beside them (tmp/stubs), for rlt_xds and the tests that
    push descriptors over xDS."""
    envoy_stubs(proto_dir, tmp)
    subprocess.check_call([sys.executable, "-m", "grpc_tools.protoc",
                           "-I", proto_dir,
                           "--python_out=" + os.path.join(tmp, "stubs"),
                           "--grpc_python_out=" + os.path.join(tmp, "stubs"),
                           "envoy/service/discovery/v3/discovery.proto",
                           "envoy/service/discovery/v3/ads.proto",
                           "envoy/config/core/v3/node.proto",
                           "google/rpc/status.proto",
                           "ratelimit/config/ratelimit/v3/rls_conf.proto"])
