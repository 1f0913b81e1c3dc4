"""rl-server run as envoy-ratelimit is run: configured by its environment
alone (server/envoy_env.c).

  e2e_envoy_env.py RL_SERVER basic
      the program called `ratelimit` reads the environment (called
      rl-server with arguments, it does not; with none, it does); Envoy
      Gateway's environment (loopback addresses) gives exactly the
      expected flags; the command line wins; an invalid value is one line
      on stderr naming the variable, and exit 2.
  e2e_envoy_env.py RL_SERVER start
      `ratelimit` started from an Istio-style environment with a ConfigMap
      mounted as RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/config: its listeners
      bound where the environment says, one warning line naming the
      settings it does not honour, the ConfigMap's files loaded, and
      loaded again when the ConfigMap is switched (a key added). Exits 77
      (skipped) when this build lacks --envoy-http (issue 42's HTTP part
      not merged yet).

Every server is on loopback and stopped by pid, also on failure."""
import os
import subprocess
import sys
import tempfile
import time
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..",
                                "support"))
import rlt  # noqa: E402

BIN = os.path.abspath(sys.argv[1])
MODE = sys.argv[2] if len(sys.argv) > 2 else "basic"
fails = []
procs = []
tmp = tempfile.mkdtemp(prefix="rlt-envoy-env-")


def check(cond, what):
    if not cond:
        fails.append(what)
        print("FAIL:", what)


def run(argv0, args, env, timeout=20):
    """Runs the binary under the name argv0, with exactly env."""
    env = dict(env)
    env.setdefault("PATH", "/usr/bin:/bin")
    p = subprocess.run([argv0] + args, executable=BIN, env=env,
                       capture_output=True, text=True, timeout=timeout)
    return p.returncode, p.stdout, p.stderr


# Envoy Gateway's Deployment (testdata/deployments/default.yaml), with
# loopback addresses.
EG = {
    "RUNTIME_ROOT": "/data", "RUNTIME_SUBDIRECTORY": "ratelimit",
    "RUNTIME_IGNOREDOTFILES": "true", "RUNTIME_WATCH_ROOT": "false",
    "LOG_LEVEL": "info", "USE_STATSD": "false",
    "CONFIG_TYPE": "GRPC_XDS_SOTW",
    "CONFIG_GRPC_XDS_SERVER_URL": "127.0.0.1:18001",
    "CONFIG_GRPC_XDS_NODE_ID": "envoy-ratelimit",
    "GRPC_SERVER_USE_TLS": "true",
    "GRPC_SERVER_TLS_CERT": "/certs/tls.crt",
    "GRPC_SERVER_TLS_KEY": "/certs/tls.key",
    "GRPC_SERVER_TLS_CA_CERT": "/certs/ca.crt",
    "CONFIG_GRPC_XDS_SERVER_USE_TLS": "true",
    "CONFIG_GRPC_XDS_CLIENT_TLS_CERT": "/certs/tls.crt",
    "CONFIG_GRPC_XDS_CLIENT_TLS_KEY": "/certs/tls.key",
    "CONFIG_GRPC_XDS_SERVER_TLS_CACERT": "/certs/ca.crt",
    "FORCE_START_WITHOUT_INITIAL_CONFIG": "true",
    "REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": "127.0.0.1:6379",
    "USE_PROMETHEUS": "true", "PROMETHEUS_ADDR": "127.0.0.1:19001",
    "PROMETHEUS_MAPPER_YAML": "/etc/statsd-exporter/conf.yaml",
    "GRPC_HOST": "127.0.0.1", "HOST": "127.0.0.1", "DEBUG_HOST": "127.0.0.1",
}

EG_FLAGS = """\
--listen 127.0.0.1:0  # default
--grpc 127.0.0.1:8081  # GRPC_HOST
--envoy-http 127.0.0.1:8080  # HOST
--debug-http 127.0.0.1:6070  # DEBUG_HOST
--log-level info  # LOG_LEVEL
--tls-cert /certs/tls.crt  # GRPC_SERVER_TLS_CERT
--tls-key /certs/tls.key  # GRPC_SERVER_TLS_KEY
--tls-listeners grpc  # GRPC_SERVER_USE_TLS
--tls-client-ca /certs/ca.crt  # GRPC_SERVER_TLS_CA_CERT
--envoy-xds 127.0.0.1:18001  # CONFIG_GRPC_XDS_SERVER_URL
--envoy-xds-node-id envoy-ratelimit  # CONFIG_GRPC_XDS_NODE_ID
--envoy-xds-backoff-ms 10000  # XDS_CLIENT_BACKOFF_INITIAL_INTERVAL
--envoy-xds-backoff-max-ms 60000  # XDS_CLIENT_BACKOFF_MAX_INTERVAL
--envoy-xds-tls-ca /certs/ca.crt  # CONFIG_GRPC_XDS_SERVER_TLS_CACERT
--envoy-xds-tls-cert /certs/tls.crt  # CONFIG_GRPC_XDS_CLIENT_TLS_CERT
--envoy-xds-tls-key /certs/tls.key  # CONFIG_GRPC_XDS_CLIENT_TLS_KEY
--redis 127.0.0.1:6379  # REDIS_URL
--redis-timeout-ms 10000  # REDIS_TIMEOUT
--metrics 127.0.0.1:19001  # PROMETHEUS_ADDR
--envoy-counting envoy  # STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT
--expiry-spread-ms 300000  # EXPIRATION_JITTER_MAX_SECONDS
"""


def basic():
    conf = os.path.join(tmp, "d.yaml")
    with open(conf, "w") as f:
        f.write("domain: d\ndescriptors:\n  - key: k\n    rate_limit: "
                "{unit: second, requests_per_unit: 1}\n")
    ratelimit = os.path.join(tmp, "ratelimit")

    # The name decides: `ratelimit` reads PORT=x (and fails on it), the
    # same program called rl-server with arguments does not.
    rc, out, err = run(ratelimit, ["--check-envoy-config", conf],
                       {"PORT": "x"})
    check(rc == 2 and err.startswith("rl-server: PORT: "),
          "ratelimit reads the environment: rc=%d %r" % (rc, err))
    rc, out, err = run("rl-server", ["--check-envoy-config", conf],
                       {"PORT": "x"})
    check(rc == 0 and "ok" in out,
          "rl-server with arguments ignores it: rc=%d %r" % (rc, err))
    # With no arguments at all, one of its settings is enough.
    rc, out, err = run(os.path.join(tmp, "rl-server"), [], {"PORT": "x"})
    check(rc == 2 and err.startswith("rl-server: PORT: "),
          "no arguments and PORT set: rc=%d %r" % (rc, err))

    rc, out, err = run(ratelimit, ["--envoy-env-print"], EG)
    check(rc == 0, "EG's environment: rc=%d %r" % (rc, err))
    want = EG_FLAGS + "--envoy-env-print  # command line\n" + \
        "# read but not honoured: PROMETHEUS_MAPPER_YAML\n"
    check(out == want, "EG's environment's flags:\n%s\nwant:\n%s"
          % (out, want))

    # The command line wins: its --grpc and --redis-cluster replace the
    # environment's --grpc and --redis.
    rc, out, err = run(ratelimit, ["--envoy-env-print", "--grpc",
                                   "127.0.0.1:0",
                                   "--redis-cluster=127.0.0.1:7000"], EG)
    check(rc == 0 and "# GRPC_HOST" not in out and "# REDIS_URL" not in out
          and "--grpc 127.0.0.1:0  # command line" in out
          and "--redis-cluster=127.0.0.1:7000  # command line" in out
          and "--redis-timeout-ms 10000  # REDIS_TIMEOUT" in out,
          "flags win: %s" % out)

    # A password in REDIS_AUTH is never printed.
    rc, out, err = run(ratelimit, ["--envoy-env-print"],
                       {"REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": "r:6379",
                        "REDIS_AUTH": "hunter2"})
    check(rc == 0 and "hunter2" not in out and
          "--redis redis://:***@r:6379" in out, "password masked: %s" % out)

    # An invalid value: exit 2 and one line naming the variable.
    for env, var in ((dict(EG, GRPC_PORT="80a"), "GRPC_PORT"),
                     (dict(EG, SHADOW_MODE="on"), "SHADOW_MODE"),
                     (dict(EG, CONFIG_TYPE="XDS"), "CONFIG_TYPE"),
                     (dict(EG, REDIS_TIMEOUT="5"), "REDIS_TIMEOUT"),
                     ({"GRPC_HOST": "h" * 300}, "GRPC_HOST")):
        rc, out, err = run(ratelimit, ["--port-file", "/nonexistent/p"], env)
        lines = err.splitlines()
        check(rc == 2 and len(lines) == 1 and
              lines[0].startswith("rl-server: %s" % var),
              "%s invalid: rc=%d %r" % (var, rc, err))

    # Unhonoured settings are named, defaults are not.
    rc, out, err = run(ratelimit, ["--envoy-env-print"],
                       {"MERGE_DOMAIN_CONFIG": "true", "REDIS_PERSECOND": "1",
                        "REDIS_POOL_SIZE": "10"})
    check(out.endswith("# read but not honoured: REDIS_PERSECOND,"
                       "MERGE_DOMAIN_CONFIG\n"), "unhonoured named: %s" % out)
    # Tracing: the OTLP exporter's variables become --trace-* flags.
    rc, out, err = run(ratelimit, ["--envoy-env-print"],
                       {"TRACING_ENABLED": "true",
                        "OTEL_EXPORTER_OTLP_ENDPOINT": "http://otel:4318",
                        "TRACING_SAMPLING_RATE": "0.1"})
    check(rc == 0 and "--trace-otlp http://otel:4318/v1/traces" in out and
          "--trace-sample 0.1" in out and
          "--trace-service RateLimit" in out, "tracing mapped: %s" % out)


def configmap(root, version, keys):
    """Kubernetes' atomic writer into root: the keys' files in a new
    ..TIMESTAMP directory, ..data switched to it, links for the keys."""
    ts = "..2026_12_02_v%d" % version
    os.mkdir(os.path.join(root, ts))
    for k in keys:
        with open(os.path.join(root, ts, k + ".yaml"), "w") as f:
            f.write("domain: %s\ndescriptors:\n  - key: k\n    rate_limit: "
                    "{unit: minute, requests_per_unit: 5}\n" % k)
    os.symlink(ts, os.path.join(root, "..data_tmp"))
    os.rename(os.path.join(root, "..data_tmp"), os.path.join(root, "..data"))
    for k in keys:
        link = os.path.join(root, k + ".yaml")
        if not os.path.islink(link):
            os.symlink("..data/%s.yaml" % k, link)


def wait_for(path, text, proc, timeout_s=20):
    end = time.time() + timeout_s
    while time.time() < end:
        with open(path, errors="replace") as f:
            if text in f.read():
                return True
        if proc.poll() is not None:
            return False
        time.sleep(0.02)
    return False


def start():
    helptext = subprocess.run([BIN, "--help"], capture_output=True,
                              text=True).stdout
    if "--envoy-http" not in helptext or "--debug-http" not in helptext:
        print("this build has no --envoy-http: skipped")
        sys.exit(77)
    root = os.path.join(tmp, "data")
    cm = os.path.join(root, "ratelimit", "config")
    os.makedirs(cm)
    configmap(cm, 1, ["a"])
    env = {"HOST": "127.0.0.1", "PORT": "0", "GRPC_HOST": "127.0.0.1",
           "GRPC_PORT": "0", "DEBUG_HOST": "127.0.0.1", "DEBUG_PORT": "0",
           "USE_STATSD": "false", "USE_PROMETHEUS": "true",
           "PROMETHEUS_ADDR": "127.0.0.1:0", "LOG_LEVEL": "info",
           "RUNTIME_ROOT": root, "RUNTIME_SUBDIRECTORY": "ratelimit",
           "RUNTIME_IGNOREDOTFILES": "true", "BACKEND_TYPE": "memcache",
           "MEMCACHE_HOST_PORT": "127.0.0.1:1", "TRACING_ENABLED": "true",
           # a collector nobody runs: tracing costs the start nothing
           "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1",
           "PATH": "/usr/bin:/bin"}
    ports = os.path.join(tmp, "ports")
    log = os.path.join(tmp, "server.log")
    with open(log, "w") as lf:
        p = subprocess.Popen(["ratelimit", "--port-file", ports,
                              "--reload-settle-ms", "100"], executable=BIN,
                             env=env, stdout=lf, stderr=lf)
    procs.append(p)
    got = rlt.wait_ports(p, ports, log)
    for name in ("grpc", "envoy-http", "debug-http", "metrics"):
        check(got.get(name, 0) > 0, "listener %s bound: %s" % (name, got))
    body = urllib.request.urlopen(
        "http://127.0.0.1:%d/healthcheck" % got["envoy-http"],
        timeout=5).read()
    check(body.strip() != b"", "/healthcheck answers")
    configmap(cm, 2, ["a", "b"])
    check(wait_for(log, "domains=2", p), "the ConfigMap switched is loaded")
    with open(log, errors="replace") as f:
        text = f.read()
    warns = [ln for ln in text.splitlines() if "not honoured" in ln]
    check(len(warns) == 1 and "settings=BACKEND_TYPE" in warns[0],
          "one warning line: %r" % warns)
    p.terminate()
    p.wait(timeout=10)


try:
    basic() if MODE == "basic" else start()
except Exception as e:  # a helper failed: counted, and the run ends clean
    fails.append(repr(e))
    print("FAIL:", repr(e))
rlt.end_run(fails, procs, tmp)
