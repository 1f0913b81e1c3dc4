#!/usr/bin/python3
"""The container image, built by deploy/image.sh and run with podman as
deploy/kubernetes/rl-server.yaml runs it.

Usage: image_run.py REPO BUILD_DIR PROTO_DIR WORK_DIR

Builds the image from BUILD_DIR's binaries (image.sh --from-build, which
must print nothing), checks what it is (user 65534:65534, no shell,
/bin/ratelimit), then runs it as the manifest's Deployment does: its
rules ConfigMap mounted as a directory, a read-only root, every
capability dropped, no new privileges, and a Redis reached by the
manifest's REDIS_URL host name (podman's /etc/hosts, so glibc's name
resolution in the image is exercised). The container's ports are
published on loopback; its Redis runs in the container's network
namespace (nsenter), so the manifest's fixed ports are used as they are.
From the host: a ShouldRateLimit over gRPC against the ConfigMap's
domain until OVER_LIMIT, a native check, then SIGTERM: the health check
turns 503 during the drain and the container exits 0 by itself.

A machine where podman cannot start a container skips (exit 77) with
the reason; this never passes without running the container."""

import json
import os
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

import yaml

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "support"))
import rlt  # noqa: E402

REPO, BUILD, PROTO, WORK = sys.argv[1:5]
SKIP = 77

# How the container is configured. "flags" until rl-server reads
# envoy-ratelimit's environment (as /bin/ratelimit) and serves
# /healthcheck on PORT; then "env": the manifest's command and
# environment exactly. Switching is this one line.
MODE = os.environ.get("RL_IMAGE_MODE", "env")
DRAIN_MS = 2000


class Skip(Exception):
    pass


class Abort(Exception):
    pass


def skip(why):
    raise Skip(why)


FAILS = []


def check(cond, what):
    print("ok:" if cond else "FAIL:", what, flush=True)
    if not cond:
        FAILS.append(what)


podman = shutil.which("podman")
if podman is None:
    print("SKIP: no podman (apt-get install podman runc)")
    sys.exit(SKIP)
PODMAN = [podman] + os.environ.get("RL_PODMAN_OPTS", "").split()


def run_opts():
    """What a container needs to start in this workplace's sandbox: runc
    (crun fails on the cgroups here) and explicit limits at or under the
    current ones (runc refuses an nproc limit above pid_max here)."""
    import resource
    opts = []
    if shutil.which("runc"):
        opts += ["--runtime", "runc"]
    nofile = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    nproc = resource.getrlimit(resource.RLIMIT_NPROC)[0]
    try:
        with open("/proc/sys/kernel/pid_max") as f:
            pid_max = int(f.read())
    except (OSError, ValueError):
        pid_max = 32768
    nofile = 65536 if nofile == resource.RLIM_INFINITY else min(nofile, 65536)
    nproc = pid_max if nproc == resource.RLIM_INFINITY else min(nproc, pid_max)
    return opts + ["--ulimit", "nofile=%d:%d" % (nofile, nofile),
                   "--ulimit", "nproc=%d:%d" % (nproc, nproc)]


def pod(*args, timeout=60, check_rc=False):
    r = subprocess.run(PODMAN + list(args), capture_output=True, text=True,
                       timeout=timeout)
    if check_rc and r.returncode != 0:
        raise RuntimeError("podman %s: %s" % (" ".join(args), r.stderr))
    return r


RUN = run_opts()
TAG = "localhost/rl-server-test:%d" % os.getpid()
NAME = "rl-image-test-%d" % os.getpid()
TMP = tempfile.mkdtemp(prefix="rl-image-", dir=WORK)
os.chmod(TMP, 0o755)  # the container's user reads the rules under it
PROCS = []

# What the manifest says.
with open(os.path.join(REPO, "deploy/kubernetes/rl-server.yaml")) as f:
    DOCS = {(d["kind"], d["metadata"]["name"]): d for d in yaml.safe_load_all(f)}
DEPLOY = DOCS[("Deployment", "rl-server")]
CTR = DEPLOY["spec"]["template"]["spec"]["containers"][0]
ENV = {e["name"]: e["value"] for e in CTR["env"]}
RULES_MOUNT = next(m["mountPath"] for m in CTR["volumeMounts"]
                   if m["name"] == "rules")
RULES = DOCS[("ConfigMap", "rl-server-rules")]["data"]
redis_host, redis_port = ENV["REDIS_URL"].rsplit(":", 1)


def finish():
    pod("rm", "-f", "-t", "0", NAME)
    pod("rmi", TAG)
    rlt.end_run(FAILS, PROCS, TMP)


try:
    r = pod("info", "--format", "{{.Store.GraphDriverName}}")
    if r.returncode != 0:
        skip("podman does not work here: " + r.stderr.strip()[-400:])
    print("podman storage driver:", r.stdout.strip())

    # 1. The image: built quietly, from the build tree's binaries.
    t0 = time.time()
    r = subprocess.run(["bash", os.path.join(REPO, "deploy/image.sh"),
                        "--from-build", BUILD, TAG], capture_output=True,
                       text=True, timeout=240,
                       env=dict(os.environ, RL_IMAGE_BUILD=WORK))
    check(r.returncode == 0, "image.sh exit 0 (%s)" % r.stderr.strip()[-400:])
    check(r.stdout == "" and r.stderr == "",
          "image.sh prints nothing (%r %r)" % (r.stdout[-200:], r.stderr[-200:]))
    if r.returncode != 0:
        raise Abort()
    print("image built in %.1f s" % (time.time() - t0))
    info = json.loads(pod("image", "inspect", TAG, check_rc=True).stdout)[0]
    cfg = info["Config"]
    print("image size: %d bytes" % info["Size"])
    check(cfg.get("User") == "65534:65534", "image user 65534:65534 (%s)"
          % cfg.get("User"))

    # Can this machine start a container at all? If not, say why and skip.
    r = pod("run", "--rm", *RUN, "--network", "none", TAG, "--version")
    if r.returncode != 0:
        skip("podman cannot start a container here: " + r.stderr.strip())
    check(r.stdout.startswith("rl-server "), "rl-server --version in the image")
    r = pod("run", "--rm", *RUN, "--network", "none", "--entrypoint",
            "/bin/ratelimit", TAG, "--version")
    check(r.returncode == 0 and r.stdout.startswith("rl-server "),
          "/bin/ratelimit runs rl-server (%s)" % r.stderr.strip())
    r = pod("run", "--rm", *RUN, "--network", "none", "--entrypoint",
            "/usr/local/bin/rl-ctl", TAG, "--help")
    check("rl-ctl" in r.stdout + r.stderr, "rl-ctl in the image")
    r = pod("run", "--rm", *RUN, "--network", "none", "--entrypoint",
            "/bin/sh", TAG, "-c", "true")
    check(r.returncode != 0, "no shell in the image")

    # 2. The ConfigMap as Kubernetes mounts it: a directory of files.
    rules = os.path.join(TMP, "rules")
    os.mkdir(rules)
    os.chmod(rules, 0o755)
    for name, text in RULES.items():
        p = os.path.join(rules, name)
        with open(p, "w") as f:
            f.write(text)
        os.chmod(p, 0o644)
    domain = yaml.safe_load(RULES["edge.yaml"])["domain"]
    key_limit = next(d["rate_limit"]["requests_per_unit"] for d in
                     yaml.safe_load(RULES["edge.yaml"])["descriptors"]
                     if d["key"] == "api_key")

    ports = {"grpc": int(ENV["GRPC_PORT"]), "native": 7390,
             "metrics": int(ENV["PROMETHEUS_ADDR"].rsplit(":", 1)[1])}
    if MODE == "env":
        ports["health"] = int(ENV["PORT"])
        health_path = "/healthcheck"
        drain_code = 500  # envoy-ratelimit's /healthcheck while draining
        entry = CTR["command"]
        env = ENV
        args = ["--listen", "0.0.0.0:7390", "--drain-ms", str(DRAIN_MS)]
    else:
        ports["health"] = ports["metrics"]
        health_path = "/healthz"
        drain_code = 503
        entry = ["/usr/local/bin/rl-server"]
        env = {}
        args = ["--grpc", "0.0.0.0:%d" % ports["grpc"],
                "--listen", "0.0.0.0:7390",
                "--metrics", "0.0.0.0:%d" % ports["metrics"],
                "--redis", ENV["REDIS_URL"], "--drain-ms", str(DRAIN_MS)]
        for name in sorted(RULES):
            args += ["--envoy-config", os.path.join(RULES_MOUNT, name)]
    hostport = {p: rlt.reserve_port() for p in set(ports.values())}
    host = {k: hostport[p] for k, p in ports.items()}
    publish = []
    for p, hp in sorted(hostport.items()):
        publish += ["-p", "127.0.0.1:%d:%d" % (hp, p)]
    cmd = ["run", "-d", "--name", NAME, *RUN, "--read-only",
           "--read-only-tmpfs=false", "--cap-drop", "ALL",
           "--security-opt", "no-new-privileges",
           "--add-host", "%s:127.0.0.1" % redis_host,
           "-v", "%s:%s:ro" % (rules, RULES_MOUNT), *publish,
           "--entrypoint", entry[0]]
    for k, v in env.items():
        cmd += ["-e", "%s=%s" % (k, v)]
    cmd += [TAG] + entry[1:] + args
    pod(*cmd, check_rc=True)
    state = json.loads(pod("inspect", NAME, check_rc=True).stdout)[0]
    pid = state["State"]["Pid"]
    check(state["HostConfig"]["ReadonlyRootfs"], "read-only root")

    # 3. Its Redis, in its network namespace, at the manifest's address.
    log = os.path.join(TMP, "redis.log")
    PROCS.append(subprocess.Popen(
        ["nsenter", "-t", str(pid), "-n", "redis-server", "--port",
         redis_port, "--bind", "127.0.0.1", "--save", "", "--appendonly",
         "no", "--dir", TMP, "--logfile", log], stdout=subprocess.DEVNULL))

    with open("/proc/%d/status" % pid) as f:
        ids = {l.split(":")[0]: l.split()[1:] for l in f if ":" in l}
    check(ids["Uid"] == ["65534"] * 4 and ids["Gid"] == ["65534"] * 4,
          "runs as 65534:65534 (%s %s)" % (ids["Uid"], ids["Gid"]))
    with open("/proc/%d/mountinfo" % pid) as f:
        root_opts = next(l.split()[5] for l in f if l.split()[4] == "/")
    check(root_opts.split(",")[0] == "ro", "/ mounted ro (%s)" % root_opts)
    with open("/proc/%d/status" % pid) as f:
        cap_eff = next(l.split()[1] for l in f if l.startswith("CapEff"))
    check(int(cap_eff, 16) == 0, "no capabilities (%s)" % cap_eff)

    def health():
        try:
            with urllib.request.urlopen("http://127.0.0.1:%d%s" % (
                    host["health"], health_path), timeout=2) as r:
                return r.status, r.read().decode().strip()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode().strip()
        except OSError as e:
            return 0, str(e)

    end = time.time() + 30
    while health()[0] != 200 and time.time() < end:
        time.sleep(0.05)
    st = health()
    check(st[0] == 200, "healthy with its Redis (%s)" % (st,))
    if st[0] != 200:
        print(pod("logs", NAME).stderr[-3000:])
        raise Abort()

    # 4. ShouldRateLimit over gRPC, from the host, against the ConfigMap.
    rlt.envoy_stubs(PROTO, TMP, native=True)
    import grpc  # noqa: E402
    from envoy.service.ratelimit.v3 import rls_pb2, rls_pb2_grpc  # noqa: E402
    from envoy.extensions.common.ratelimit.v3 import ratelimit_pb2  # noqa: E402
    import ratelimit_pb2 as native_pb2  # noqa: E402
    ch = grpc.insecure_channel("127.0.0.1:%d" % host["grpc"])
    stub = rls_pb2_grpc.RateLimitServiceStub(ch)
    who = "key-%d" % os.getpid()
    req = rls_pb2.RateLimitRequest(domain=domain, descriptors=[
        ratelimit_pb2.RateLimitDescriptor(entries=[
            ratelimit_pb2.RateLimitDescriptor.Entry(key="api_key",
                                                    value=who)])])
    codes = [stub.ShouldRateLimit(req, timeout=5) for _ in range(key_limit + 1)]
    OK, OVER = rls_pb2.RateLimitResponse.OK, rls_pb2.RateLimitResponse.OVER_LIMIT
    check([c.overall_code for c in codes] == [OK] * key_limit + [OVER],
          "gRPC: %d OK then OVER_LIMIT (%s)" % (key_limit, [
              c.overall_code for c in codes]))
    check(codes[0].statuses[0].current_limit.requests_per_unit == key_limit,
          "gRPC: the ConfigMap's limit")
    ch.close()

    # 5. A native check (inline limit 2 per minute).
    s = socket.create_connection(("127.0.0.1", host["native"]), 5)
    out = b""
    for i in range(3):
        m = native_pb2.CheckRequest(id=i + 1, key=who, limit=2,
                                    window_seconds=60).SerializeToString()
        out += struct.pack(">BI", 0, len(m)) + m
    s.sendall(out)
    buf, res = b"", []
    s.settimeout(5)
    while len(res) < 3:
        chunk = s.recv(65536)
        if not chunk:
            break
        buf += chunk
        while len(buf) >= 5 and len(buf) >= 5 + struct.unpack(">I", buf[1:5])[0]:
            ln = struct.unpack(">I", buf[1:5])[0]
            r = native_pb2.CheckResponse.FromString(buf[5:5 + ln])
            buf = buf[5 + ln:]
            if r.id:
                res.append(r.code)
    s.close()
    NOK, NOVER = native_pb2.CheckResponse.OK, native_pb2.CheckResponse.OVER_LIMIT
    check(res == [NOK, NOK, NOVER], "native: 2 OK then OVER_LIMIT (%s)" % res)

    # 6. SIGTERM: drain (health 503), then exit 0 by itself.
    t0 = time.time()
    pod("kill", "--signal", "TERM", NAME, check_rc=True)
    seen = None
    while time.time() < t0 + DRAIN_MS / 1000.0:
        st = health()
        if st[0] == drain_code:
            seen = st
            break
        time.sleep(0.02)
    check(seen is not None and (MODE == "env" or "draining" in seen[1]),
          "health %d after SIGTERM (%s)" % (drain_code, seen))
    r = pod("wait", NAME, timeout=60)
    took = time.time() - t0
    check(r.stdout.strip() == "0", "exits 0 after the drain (%s)" % r.stdout.strip())
    print("stopped %.1f s after SIGTERM (drain %d ms)" % (took, DRAIN_MS))
    logs = pod("logs", NAME)
    text = logs.stdout + logs.stderr
    check('msg="redis connected" addr=%s' % ENV["REDIS_URL"] in text,
          "Redis reached by host name")
    if FAILS:
        print(text[-3000:])
except Skip as e:
    print("SKIP:", e, flush=True)
    pod("rm", "-f", "-t", "0", NAME)
    pod("rmi", TAG)
    shutil.rmtree(TMP, ignore_errors=True)
    os._exit(SKIP)
except Abort:
    pass
except Exception as e:  # noqa: BLE001 - reported as a failure, cleaned up
    FAILS.append(repr(e))
    print("FAIL:", repr(e))
    print(pod("logs", NAME).stderr[-3000:])
finally:
    finish()
