#!/usr/bin/python3
"""rl-server where Envoy Gateway runs envoy-ratelimit: started as
`/bin/ratelimit` from the environment EG's Deployment sets and nothing
else, fed over mutual TLS by a control plane that serves what EG's
translator makes of a BackendTrafficPolicy, then called as Envoy calls.

Usage: e2e_envoy_gateway.py RL_SERVER PROTO_DIR

The environment is EG's (envoyproxy/gateway internal/infrastructure/
kubernetes/ratelimit/testdata/deployments/default.yaml), with loopback
addresses and this test's files in place of the cluster's. The policy is
envoyproxy/ai-gateway's examples/token_ratelimit: per x-user-id, 3
requests an hour (a request limit); per x-tenant-id, 100 tokens an hour
(request cost 0: Envoy checks before the request; response cost: the
tokens, charged when the stream ends, answer ignored). The RateLimitConfig
is what EG's translator (internal/xds/translator/ratelimit.go) builds for
them: the route's generic key, then one `rule-N-match-0` entry per rule,
distinct (empty value), with the rule's limit.

Each answer is compared with a model of envoy-ratelimit's fixed window
(src/limiter/base_limiter.go: increment by the hits, then compare; a
descriptor over its limit reports 0 remaining), status by status: code,
current limit, remaining. Then what EG's probes and dashboard read:
GET :PORT/healthcheck, grpc.health.v1 on the gRPC port (over the same
TLS), ratelimit_service_rate_limit_* on PROMETHEUS_ADDR."""

import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "..", "..", "support"))
import rlt  # noqa: E402

RL_SERVER, PROTO_DIR = sys.argv[1], sys.argv[2]
TMP = tempfile.mkdtemp(prefix="rl-eg-")
rlt.xds_stubs(PROTO_DIR, TMP)
rlt.health_stubs(PROTO_DIR, TMP)
import grpc  # noqa: E402
from envoy.service.ratelimit.v3 import rls_pb2, rls_pb2_grpc  # noqa: E402
from envoy.extensions.common.ratelimit.v3 import ratelimit_pb2  # noqa: E402
import health_pb2  # noqa: E402
import health_pb2_grpc  # noqa: E402
from ratelimit.config.ratelimit.v3 import rls_conf_pb2 as rc  # noqa: E402

from rlt_xds import ADS, serve  # noqa: E402
OK, OVER = rls_pb2.RateLimitResponse.OK, rls_pb2.RateLimitResponse.OVER_LIMIT
DOMAIN = "default/envoy-ai-gateway-token-ratelimit/http"
ROUTE = "httproute/default/llm/rule/0/match/0/*"
REQ_LIMIT, TOKEN_LIMIT = 3, 100
FAILS = []
PROCS = []


def check(cond, what):
    if not cond:
        FAILS.append(what)
        print("FAIL:", what, flush=True)


def await_(cond, what, timeout=10):
    end = time.time() + timeout
    while time.time() < end:
        v = cond()
        if v:
            return v
        time.sleep(0.02)
    raise RuntimeError("timed out waiting for " + what)


def eg_config():
    """What EG's translator builds for the two rules: the route's generic
    key (value = route name), under it rule-0-match-0 (x-user-id,
    distinct) and rule-1-match-0 (x-tenant-id, distinct), each with its
    limit."""
    route = rc.RateLimitDescriptor(key=ROUTE, value=ROUTE)
    for i, n in ((0, REQ_LIMIT), (1, TOKEN_LIMIT)):
        d = route.descriptors.add(key="rule-%d-match-0" % i, value="")
        d.rate_limit.unit = rc.HOUR
        d.rate_limit.requests_per_unit = n
    return rc.RateLimitConfig(name=DOMAIN, domain=DOMAIN, descriptors=[route])


def openssl(*args):
    subprocess.run(["openssl"] + list(args), check=True,
                   capture_output=True, timeout=60)


def make_certs():
    """EG's secret envoy-rate-limit: a CA and, from it, the certificate
    rl-server serves with and shows the control plane (tls.crt); the
    control plane's own; Envoy's client certificate."""
    d = os.path.join(TMP, "certs")
    os.mkdir(d)
    P = lambda n: os.path.join(d, n)  # noqa: E731
    openssl("req", "-x509", "-newkey", "ec", "-pkeyopt",
            "ec_paramgen_curve:prime256v1", "-nodes", "-days", "2",
            "-subj", "/CN=envoy-gateway", "-keyout", P("ca.key"),
            "-out", P("ca.crt"))
    san = "subjectAltName=DNS:localhost,IP:127.0.0.1\n"
    for name, ext in (("tls", san + "extendedKeyUsage=serverAuth,clientAuth\n"),
                      ("cp", san + "extendedKeyUsage=serverAuth\n"),
                      ("envoy", "extendedKeyUsage=clientAuth\n")):
        with open(P(name + ".ext"), "w") as f:
            f.write(ext)
        openssl("req", "-newkey", "ec", "-pkeyopt",
                "ec_paramgen_curve:prime256v1", "-nodes", "-subj",
                "/CN=" + name, "-keyout", P(name + ".key"),
                "-out", P(name + ".csr"))
        openssl("x509", "-req", "-in", P(name + ".csr"), "-CA", P("ca.crt"),
                "-CAkey", P("ca.key"), "-CAcreateserial", "-days", "2",
                "-extfile", P(name + ".ext"), "-out", P(name + ".crt"))
    return P


def rd(path):
    with open(path, "rb") as f:
        return f.read()


def eg_environment(P, xds_port, redis_port, ports):
    """EG's Deployment's env (default.yaml), in its order, with this
    test's addresses and files; then the ports EG leaves at
    envoy-ratelimit's defaults, moved to free loopback ones."""
    env = [
        ("RUNTIME_ROOT", os.path.join(TMP, "data")),
        ("RUNTIME_SUBDIRECTORY", "ratelimit"),
        ("RUNTIME_IGNOREDOTFILES", "true"),
        ("RUNTIME_WATCH_ROOT", "false"),
        ("LOG_LEVEL", "info"),
        ("USE_STATSD", "false"),
        ("CONFIG_TYPE", "GRPC_XDS_SOTW"),
        ("CONFIG_GRPC_XDS_SERVER_URL", "127.0.0.1:%d" % xds_port),
        ("CONFIG_GRPC_XDS_NODE_ID", "envoy-ratelimit"),
        ("GRPC_SERVER_USE_TLS", "true"),
        ("GRPC_SERVER_TLS_CERT", P("tls.crt")),
        ("GRPC_SERVER_TLS_KEY", P("tls.key")),
        ("GRPC_SERVER_TLS_CA_CERT", P("ca.crt")),
        ("CONFIG_GRPC_XDS_SERVER_USE_TLS", "true"),
        ("CONFIG_GRPC_XDS_CLIENT_TLS_CERT", P("tls.crt")),
        ("CONFIG_GRPC_XDS_CLIENT_TLS_KEY", P("tls.key")),
        ("CONFIG_GRPC_XDS_SERVER_TLS_CACERT", P("ca.crt")),
        ("FORCE_START_WITHOUT_INITIAL_CONFIG", "true"),
        ("REDIS_SOCKET_TYPE", "tcp"),
        ("REDIS_URL", "127.0.0.1:%d" % redis_port),
        ("USE_PROMETHEUS", "true"),
        ("PROMETHEUS_ADDR", "127.0.0.1:%d" % ports["prom"]),
        ("PROMETHEUS_MAPPER_YAML", "/etc/statsd-exporter/conf.yaml"),
        ("GRPC_HOST", "127.0.0.1"), ("GRPC_PORT", str(ports["grpc"])),
        ("HOST", "127.0.0.1"), ("PORT", str(ports["http"])),
        ("DEBUG_HOST", "127.0.0.1"), ("DEBUG_PORT", str(ports["debug"])),
    ]
    e = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    e.update(env)
    return e


class Model:
    """envoy-ratelimit's fixed window in Redis: every descriptor's hits
    are added (INCRBY), then compared; over when the count after passes
    the limit; remaining = limit - after, 0 when over."""

    def __init__(self):
        self.count = {}

    def status(self, key, limit, hits):
        after = self.count.get(key, 0) + hits
        self.count[key] = after
        over = after > limit
        return (OVER if over else OK, limit, 0 if over else limit - after)


def desc(rule, value, hits=None):
    d = ratelimit_pb2.RateLimitDescriptor(entries=[
        ratelimit_pb2.RateLimitDescriptor.Entry(key=ROUTE, value=ROUTE),
        ratelimit_pb2.RateLimitDescriptor.Entry(key="rule-%d-match-0" % rule,
                                                value=value)])
    if hits is not None:
        d.hits_addend.value = hits
    return d


def statuses(resp):
    return [(s.code, s.current_limit.requests_per_unit, s.limit_remaining)
            for s in resp.statuses]


def scrape(port):
    return urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port,
                                  timeout=5).read().decode()


def sample(text, name, labels):
    """The value of the series name{labels...} (labels a dict, all of
    which must match), or None."""
    for line in text.splitlines():
        if not line.startswith(name + "{"):
            continue
        m = re.match(r"^([a-z_]+)\{(.*)\} (\S+)$", line)
        if not m or m.group(1) != name:
            continue
        got = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', m.group(2)))
        if all(got.get(k) == v for k, v in labels.items()):
            return float(m.group(3))
    return None


def main():
    P = make_certs()
    os.makedirs(os.path.join(TMP, "data", "ratelimit", "config"))
    redis_port, _ = rlt.start_redis(TMP, procs=PROCS)

    ads = ADS()
    ads.push("eg-1", [eg_config()])
    xds, xds_port = serve(ads, 0, grpc.ssl_server_credentials(
        [(rd(P("cp.key")), rd(P("cp.crt")))], root_certificates=rd(P("ca.crt")),
        require_client_auth=True))

    # /bin/ratelimit, as EG's command names it: a link to rl-server.
    binary = os.path.join(TMP, "bin", "ratelimit")
    os.mkdir(os.path.dirname(binary))
    os.symlink(os.path.abspath(RL_SERVER), binary)
    ports = {k: rlt.reserve_port() for k in ("grpc", "http", "debug", "prom")}
    log = open(os.path.join(TMP, "ratelimit.log"), "w")
    p = subprocess.Popen([binary], env=eg_environment(P, xds_port, redis_port,
                                                      ports),
                         stdout=log, stderr=subprocess.STDOUT)
    PROCS.append(p)
    for k in ("http", "grpc", "prom", "debug"):
        rlt.wait_listen(ports[k], p, log.name)
    await_(lambda: ads.acked("nonce-eg-1"), "rl-server to ACK EG's version")

    # The startup probe: GET :PORT/healthcheck until 200, as EG's probe
    # retries. Until the store has answered its first read of the runtime
    # switches the answer is 500 (the xDS ACK can come first: the two are
    # independent); nothing else is.
    seen = []

    def startup_probe():
        try:
            code = urllib.request.urlopen("http://127.0.0.1:%d/healthcheck"
                                          % ports["http"], timeout=5).status
        except urllib.error.HTTPError as e:
            code = e.code
        seen.append(code)
        return code == 200
    await_(startup_probe, "/healthcheck 200")
    check(set(seen) <= {200, 500}, "/healthcheck says 500 or 200: %s" % seen)

    # Envoy's side: mutual TLS to the gRPC port with its own certificate.
    ch = grpc.secure_channel("127.0.0.1:%d" % ports["grpc"],
                             grpc.ssl_channel_credentials(
                                 rd(P("ca.crt")), rd(P("envoy.key")),
                                 rd(P("envoy.crt"))))
    stub = rls_pb2_grpc.RateLimitServiceStub(ch)
    health = health_pb2_grpc.HealthStub(ch)
    for svc in ("", "envoy.service.ratelimit.v3.RateLimitService"):
        st = health.Check(health_pb2.HealthCheckRequest(service=svc),
                          timeout=5).status
        check(st == health_pb2.HealthCheckResponse.SERVING,
              "grpc.health.v1 %r SERVING: %s" % (svc, st))

    model = Model()

    def call(descs, what):
        resp = stub.ShouldRateLimit(rls_pb2.RateLimitRequest(
            domain=DOMAIN, descriptors=[d for d, _, _ in descs]), timeout=5)
        want = [model.status(key, limit, 1 if d.HasField("hits_addend") is
                             False else d.hits_addend.value)
                for d, key, limit in descs]
        got = statuses(resp)
        check(got == want, "%s: statuses %s, envoy-ratelimit says %s"
              % (what, got, want))
        overall = OVER if any(c == OVER for c, _, _ in want) else OK
        check(resp.overall_code == overall, "%s: overall %s, want %s"
              % (what, resp.overall_code, overall))
        return resp

    def request(user, tenant, what):
        """Before the request: the request limit (1 hit) and the token
        budget checked with hits_addend 0."""
        return call([(desc(0, user), "u:" + user, REQ_LIMIT),
                     (desc(1, tenant, 0), "t:" + tenant, TOKEN_LIMIT)], what)

    def tokens(tenant, n, what):
        """When the stream ends: the tokens used, on the budget alone."""
        return call([(desc(1, tenant, n), "t:" + tenant, TOKEN_LIMIT)], what)

    r = request("alice", "acme", "first request")
    check(r.overall_code == OK and r.statuses[1].limit_remaining == 100,
          "a fresh budget reads 100 left: %s" % statuses(r))
    tokens("acme", 70, "70 tokens charged")
    r = request("bob", "acme", "second request reads the budget")
    check(r.statuses[1].limit_remaining == 30,
          "30 tokens left after 70: %s" % statuses(r))
    tokens("acme", 70, "70 more tokens: counted past the limit")
    r = request("carol", "acme", "third request")
    check(r.overall_code == OVER and r.statuses[1].code == OVER,
          "the budget spent (140 of 100): OVER_LIMIT: %s" % statuses(r))
    r = request("alice", "initech", "another tenant")
    check(r.statuses[1].code == OK, "a fresh tenant is OK: %s" % statuses(r))
    for i in range(3):
        r = request("dave", "initech", "dave's request %d" % (i + 1))
        check(r.statuses[0].code == OK,
              "dave's request %d of 3: %s" % (i + 1, statuses(r)))
    r = request("dave", "initech", "dave's 4th request")
    check(r.statuses[0].code == OVER and r.overall_code == OVER,
          "3 requests an hour: the 4th is OVER_LIMIT: %s" % statuses(r))

    # The dashboard's series (EG's global-ratelimit.json reads these).
    def series():
        return scrape(ports["prom"])
    text = await_(lambda: (lambda t: t if sample(
        t, "ratelimit_service_rate_limit_total_hits",
        {"domain": DOMAIN}) is not None else None)(series()),
        "ratelimit_service_rate_limit_total_hits on PROMETHEUS_ADDR")
    hits = sample(text, "ratelimit_service_rate_limit_total_hits",
                  {"domain": DOMAIN, "key2": "rule-1-match-0"})
    check(hits == 140, "total_hits of the token budget = 140 tokens: %s"
          % hits)
    over = sample(text, "ratelimit_service_rate_limit_over_limit",
                  {"domain": DOMAIN, "key2": "rule-0-match-0"})
    check(over is not None and over >= 1,
          "over_limit of the request limit counted: %s" % over)
    check("process_resident_memory_bytes" in text,
          "process_* metrics on PROMETHEUS_ADDR")

    # /rlconfig on DEBUG_PORT names EG's domain.
    dump = urllib.request.urlopen("http://127.0.0.1:%d/rlconfig"
                                  % ports["debug"], timeout=5).read().decode()
    check(DOMAIN in dump and "rule-1-match-0" in dump,
          "/rlconfig shows EG's configuration: %r" % dump[:300])

    # SIGTERM: EG's readiness probe sees 500 while it drains, then it exits.
    p.send_signal(signal.SIGTERM)

    def probe():
        try:
            return urllib.request.urlopen(
                "http://127.0.0.1:%d/healthcheck" % ports["http"],
                timeout=2).status
        except urllib.error.HTTPError as e:
            return e.code
        except OSError:
            return -1
    got = await_(lambda: probe() in (500, -1) and probe(),
                 "/healthcheck to fail on SIGTERM")
    check(got in (500, -1), "/healthcheck while stopping: %s" % got)
    check(p.wait(timeout=20) == 0, "rl-server exits 0 on SIGTERM")
    xds.stop(0)


try:
    main()
except Exception as e:  # noqa: BLE001
    FAILS.append(repr(e))
    print("FAIL:", repr(e), flush=True)
rlt.end_run(FAILS, PROCS, TMP)
