#!/usr/bin/python3
"""Envoy Gateway's Global Ratelimit dashboard reads rl-server: a real
Prometheus (Debian's) scrapes a live rl-server, and every panel query of
the dashboard (eg_global_ratelimit_queries.json, taken from
envoyproxy/gateway's gateway-addons-helm chart; its "source" says where)
answers with the values the traffic made, under the labels
envoy-ratelimit's exporter gives them.

rl-server runs --grpc with an --envoy-config domain shaped as Envoy
Gateway's translator writes one (the names the dashboard's queries hold);
12 hits on a limit of 10 an hour: 10 OK, 2 OVER_LIMIT, so total_hits 12,
within_limit 10, near_limit 2 (past floor(10 * 0.8)), over_limit 2. The
process_* panels select app_kubernetes_io_component="ratelimit", the label
Prometheus' Kubernetes discovery makes of the pod label EG sets; the
scrape job here sets it. Beyond the dashboard: the mapper's two-label and
summed long names, the reference's ShouldRateLimit counter, timer and
service error, its config loads (a refused reload, then one taken), and
the other process_* families. promtool checks the page as exposition: it
must parse, and its only lint is the reference's counters named without
_total.

Prometheus listens on a reserved loopback port with its storage in a temp
directory, and is stopped by pid, also on failure; every wait is for a
condition, bounded.

Usage: eg_dashboard.py RL_SERVER PROTO_DIR [prometheus [promtool]]"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "support"))
import rlt  # noqa: E402

RL_SERVER, PROTO_DIR = sys.argv[1], sys.argv[2]
PROMETHEUS = sys.argv[3] if len(sys.argv) > 3 else shutil.which("prometheus")
PROMTOOL = sys.argv[4] if len(sys.argv) > 4 else shutil.which("promtool")
FAILS = []
PROCS = []
TMP = tempfile.mkdtemp(prefix="rl-egdash-")

DOMAIN = "default/eg/http"
K1 = "httproute/default/http-ratelimit/rule/0/match/0/ratelimit_example"
K2 = "rule-0-match-0"
# The descriptors Envoy Gateway's translator writes for an HTTPRoute rule
# with one limit (internal/xds/translator/ratelimit.go: the route rule's
# key and value, then the match's), 10 an hour; and two more shapes of
# name for the mapper: one entry (two components: the glob's domain and
# key1) and four levels (the regex's first three; the fourth is dropped
# and both leaves sum into one series).
CONFIG = """domain: %s
descriptors:
  - key: %s
    value: %s
    descriptors:
      - key: %s
        value: %s
        rate_limit: {unit: hour, requests_per_unit: 10}
  - key: tenant
    rate_limit: {unit: hour, requests_per_unit: 100}
  - key: a
    descriptors:
      - key: b
        descriptors:
          - key: c
            descriptors:
              - key: x
                rate_limit: {unit: hour, requests_per_unit: 100}
              - key: y
                rate_limit: {unit: hour, requests_per_unit: 100}
""" % (DOMAIN, K1, K1, K2, K2)


def check(cond, what):
    if not cond:
        FAILS.append(what)
        print("FAIL:", what, flush=True)
    return cond


def prom_query(base, q):
    url = base + "/api/v1/query?" + urllib.parse.urlencode({"query": q})
    with urllib.request.urlopen(url, timeout=5) as r:
        doc = json.loads(r.read().decode())
    if doc.get("status") != "success":
        raise RuntimeError("query %r: %s" % (q, doc))
    return doc["data"]["result"]


def await_query(base, q, want, timeout_s=30):
    """Runs q until want(result) holds (the scrape that carries the
    traffic has happened); returns the last result."""
    end = time.time() + timeout_s
    res = []
    while time.time() < end:
        res = prom_query(base, q)
        if want(res):
            return res
        if PROCS[-1].poll() is not None:
            raise RuntimeError("prometheus exited; last lines:\n%s"
                               % rlt.tail(os.path.join(TMP, "prom.log")))
        time.sleep(0.1)
    return res


def proc_kb(pid, field):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    return 0


def one_value(res):
    return float(res[0]["value"][1]) if len(res) == 1 else None


def main():
    rlt.envoy_stubs(PROTO_DIR, TMP)
    import grpc
    from envoy.service.ratelimit.v3 import rls_pb2, rls_pb2_grpc
    from envoy.extensions.common.ratelimit.v3 import ratelimit_pb2

    conf = os.path.join(TMP, "eg.yaml")
    with open(conf, "w") as f:
        f.write(CONFIG)
    ports = os.path.join(TMP, "ports")
    log = os.path.join(TMP, "server.log")
    with open(log, "w") as lf:
        PROCS.append(subprocess.Popen(
            [RL_SERVER, "--listen", "127.0.0.1:0", "--grpc", "127.0.0.1:0",
             "--metrics", "127.0.0.1:0",
             "--envoy-config", conf, "--port-file", ports], stderr=lf))
    server = PROCS[-1]
    got = rlt.wait_ports(server, ports, log)
    metrics_url = "http://127.0.0.1:%d/metrics" % got["metrics"]

    def call(*kv):
        d = ratelimit_pb2.RateLimitDescriptor(entries=[
            ratelimit_pb2.RateLimitDescriptor.Entry(key=k, value=v)
            for k, v in zip(kv[::2], kv[1::2])])
        return stub.ShouldRateLimit(
            rls_pb2.RateLimitRequest(domain=DOMAIN, descriptors=[d]),
            timeout=5).overall_code

    OK = rls_pb2.RateLimitResponse.OK
    OVER = rls_pb2.RateLimitResponse.OVER_LIMIT
    with grpc.insecure_channel("127.0.0.1:%d" % got["grpc"]) as ch:
        stub = rls_pb2_grpc.RateLimitServiceStub(ch)
        codes = [call(K1, K1, K2, K2) for _ in range(12)]
        check(codes == [OK] * 10 + [OVER] * 2,
              "EG descriptor: 10 OK then 2 OVER_LIMIT, got %s" % codes)
        check(call("tenant", "t1") == OK, "tenant: OK")
        for leaf, n in (("x", 2), ("y", 3)):
            for _ in range(n):
                check(call("a", "1", "b", "2", "c", "3", leaf, "4") == OK,
                      "a.b.c.%s: OK" % leaf)
        # The reference's service error: an empty domain, refused UNKNOWN.
        try:
            stub.ShouldRateLimit(rls_pb2.RateLimitRequest(domain=""),
                                 timeout=5)
            check(False, "an empty domain is refused")
        except grpc.RpcError as e:
            check(e.code() == grpc.StatusCode.UNKNOWN,
                  "an empty domain: UNKNOWN, got %s" % e.code())

    page = urllib.request.urlopen(metrics_url, timeout=5).read().decode()
    with open(os.path.join(TMP, "metrics.txt"), "w") as f:
        f.write(page)
    if PROMTOOL:
        r = subprocess.run([PROMTOOL, "check", "metrics"], input=page,
                           capture_output=True, text=True)
        lint = [ln for ln in (r.stdout + r.stderr).splitlines() if ln.strip()]
        # The reference's own names break the _total convention; nothing
        # else may be reported.
        other = [ln for ln in lint
                 if not (ln.startswith("ratelimit_service_") and
                         'counter metrics should have "_total" suffix' in ln)]
        check(not other and r.returncode in (0, 3),
              "promtool check metrics: exit %d: %s" % (r.returncode, other))
        print("promtool check metrics: exit %d, %d lint lines (the "
              "reference's counters without _total)"
              % (r.returncode, len(lint)))
    else:
        print("promtool not installed: exposition not linted")

    if not PROMETHEUS:
        print("SKIP: no prometheus binary (Debian's prometheus package); "
              "the dashboard's queries were not run")
        return "skip"
    pport = rlt.reserve_port()
    pconf = os.path.join(TMP, "prometheus.yml")
    with open(pconf, "w") as f:
        f.write("global:\n  scrape_interval: 1s\n"
                "scrape_configs:\n"
                "  - job_name: ratelimit\n"
                "    scrape_interval: 250ms\n"
                "    scrape_timeout: 200ms\n"
                "    static_configs:\n"
                "      - targets: ['127.0.0.1:%d']\n"
                "        labels: {app_kubernetes_io_component: ratelimit}\n"
                % got["metrics"])
    plog = os.path.join(TMP, "prom.log")
    with open(plog, "w") as lf:
        PROCS.append(subprocess.Popen(
            [PROMETHEUS, "--config.file=" + pconf,
             "--storage.tsdb.path=" + os.path.join(TMP, "data"),
             "--web.listen-address=127.0.0.1:%d" % pport,
             "--log.level=warn"], stdout=lf, stderr=lf))
    rlt.wait_listen(pport, PROCS[-1], plog, timeout_s=30)
    base = "http://127.0.0.1:%d" % pport
    end = time.time() + 30
    while True:  # listening comes before ready (its storage opened)
        try:
            urllib.request.urlopen(base + "/-/ready", timeout=2)
            break
        except OSError:
            if time.time() > end or PROCS[-1].poll() is not None:
                raise RuntimeError("prometheus not ready; last lines:\n%s"
                                   % rlt.tail(plog))
            time.sleep(0.05)

    with open(os.path.join(HERE, "eg_global_ratelimit_queries.json")) as f:
        dash = json.load(f)
    want = {"Total Hits": 12, "Near Limit": 2, "Over Limit": 2}
    for p in dash["panels"]:
        q = p["expr"]
        for name, value in dash["variables"].items():
            q = q.replace("$" + name, value)
        title = p["title"]
        res = await_query(base, q, lambda r: len(r) == 1 and (
            title not in want or float(r[0]["value"][1]) == want[title]))
        v = one_value(res)
        if not check(v is not None, "%s: %s answers one series, got %s"
                     % (title, q, res)):
            continue
        labels = res[0]["metric"]
        if title in want:
            check(v == want[title], "%s: %s == %d, got %s"
                  % (title, q, want[title], v))
            check(labels.get("domain") == DOMAIN and
                  labels.get("key1") == K1 + "_" + K1 and
                  labels.get("key2") == K2 + "_" + K2,
                  "%s: labels %s" % (title, labels))
        elif title == "CPU Fraction":
            check(v == 0, "%s: 0 (no garbage collector), got %s" % (title, v))
        else:
            field = "VmRSS" if title == "Resident Memory" else "VmSize"
            now = proc_kb(server.pid, field) / 1e6
            check(now / 2 <= v <= now * 2,
                  "%s: %s MB, /proc says %s MB" % (title, v, now))
        print("panel %-15s %s -> %s" % (title, q[:60], v))

    # Beyond the dashboard: the glob's two labels, the regex's sum of
    # names longer than three components, the rest of what the reference
    # exports, all as Prometheus stored them.
    res = await_query(base, 'ratelimit_service_rate_limit_total_hits'
                      '{key1="tenant"}', lambda r: len(r) == 1)
    check(one_value(res) == 1 and "key2" not in res[0]["metric"],
          "tenant: {domain, key1} only, 1 hit: %s" % res)
    res = await_query(base, 'ratelimit_service_rate_limit_within_limit'
                      '{key1="a",key2="b"}', lambda r: len(r) == 1)
    check(one_value(res) == 5, "a.b.c.x + a.b.c.y: one series of 2 + 3: %s"
          % res)
    res = await_query(base, 'ratelimit_service_rate_limit_within_limit'
                      '{key1="%s_%s"}' % (K1, K1), lambda r: len(r) == 1)
    check(one_value(res) == 10, "within_limit 10: %s" % res)
    res = await_query(base, "ratelimit_service_config_load_success",
                      lambda r: len(r) == 1)
    check(one_value(res) == 1, "config_load_success 1: %s" % res)
    res = await_query(base, 'ratelimit_service_should_rate_limit_error'
                      '{err_type="service_error"}', lambda r: len(r) == 1)
    check(one_value(res) == 1, "should_rate_limit_error 1: %s" % res)
    calls = 12 + 1 + 5 + 1
    for q in ('ratelimit_service_total_requests'
              '{grpc_method="ShouldRateLimit"}',
              'ratelimit_service_response_time_seconds_count'
              '{grpc_method="ShouldRateLimit"}',
              'ratelimit_service_response_time_seconds_bucket'
              '{grpc_method="ShouldRateLimit",le="+Inf"}'):
        res = await_query(base, q, lambda r: len(r) == 1)
        check(one_value(res) == calls, "%s == %d: %s" % (q, calls, res))
    res = await_query(base, 'histogram_quantile(0.5, '
                      'ratelimit_service_response_time_seconds_bucket)',
                      lambda r: len(r) == 1)
    check(one_value(res) is not None and 0 <= one_value(res) <= 10,
          "response time quantile computes: %s" % res)
    # CPU seconds may still be 0 ticks in so short a run.
    for m, least in (("process_cpu_seconds_total", 0), ("process_open_fds", 1),
                     ("process_max_fds", 1), ("process_start_time_seconds", 1),
                     ("process_virtual_memory_max_bytes", 1)):
        res = await_query(base, m, lambda r: len(r) == 1)
        check(one_value(res) is not None and one_value(res) >= least,
              "%s >= %d: %s" % (m, least, res))
    # A reload refused, then one taken: the reference counts each.
    def page_value(name):
        text = urllib.request.urlopen(metrics_url, timeout=5).read().decode()
        for line in text.splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
        return 0

    def await_page(name, want, timeout_s=30):
        end = time.time() + timeout_s
        while page_value(name) != want and time.time() < end:
            time.sleep(0.05)
        return page_value(name)

    with open(conf, "w") as f:
        f.write("domain: [not, a, domain\n")
    v = await_page("ratelimit_service_config_load_error", 1)
    check(v == 1, "a refused reload: config_load_error 1, got %s" % v)
    with open(conf, "w") as f:
        f.write(CONFIG + "# reloaded\n")
    v = await_page("ratelimit_service_config_load_success", 2)
    check(v == 2, "a reload taken: config_load_success 2, got %s" % v)
    res = prom_query(base, "process_start_time_seconds")
    if res:
        start = float(res[0]["value"][1])
        check(abs(start - time.time()) < 600,
              "process_start_time_seconds %s is about now" % start)


if __name__ == "__main__":
    skipped = False
    try:
        skipped = main() == "skip"
    except Exception as e:  # noqa: BLE001 - reported, then cleaned up
        check(False, "error: %r" % (e,))
    for p in reversed(PROCS):
        if p.poll() is None:
            p.terminate()
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
    if skipped and not FAILS:
        shutil.rmtree(TMP, ignore_errors=True)
        sys.exit(77)  # ctest's SKIP_RETURN_CODE: never a silent pass
    rlt.end_run(FAILS, PROCS, TMP)
