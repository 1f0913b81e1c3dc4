#!/usr/bin/python3
"""What a /metrics scrape costs with many envoy-ratelimit series: an
rl-server --grpc (memory store) with N descriptors (two levels, as
Envoy Gateway writes them: the page's reference families give each its
own key1/key2 series), every one hit once over gRPC, then SCRAPES GETs of
/metrics on one keep-alive connection. Prints the page's size, the
median and 90th percentile of the time from request to the last byte, and
the server's CPU time (user + system, /proc) per scrape, which the
machine's other load disturbs less.
Figures, not a test.

Usage: envoy_metrics_render.py RL_SERVER PROTO_DIR [N [SCRAPES]]"""
import http.client
import os
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "support"))
import rlt  # noqa: E402

RL_SERVER, PROTO_DIR = sys.argv[1], sys.argv[2]
N = int(sys.argv[3]) if len(sys.argv) > 3 else 10000
SCRAPES = int(sys.argv[4]) if len(sys.argv) > 4 else 50
TMP = tempfile.mkdtemp(prefix="rl-render-")
PROCS = []


def cpu_ticks(pid):
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime + stime


def main():
    rlt.envoy_stubs(PROTO_DIR, TMP)
    import grpc
    from envoy.service.ratelimit.v3 import rls_pb2, rls_pb2_grpc
    from envoy.extensions.common.ratelimit.v3 import ratelimit_pb2

    conf = os.path.join(TMP, "bench.yaml")
    with open(conf, "w") as f:
        f.write("domain: bench\ndescriptors:\n")
        for i in range(N):
            f.write("  - key: route\n    value: r%d\n    descriptors:\n"
                    "      - key: rule\n        value: m\n"
                    "        rate_limit: {unit: hour, requests_per_unit: "
                    "100}\n" % i)
    ports, log = os.path.join(TMP, "ports"), os.path.join(TMP, "log")
    with open(log, "w") as lf:
        PROCS.append(subprocess.Popen(
            [RL_SERVER, "--listen", "127.0.0.1:0", "--grpc", "127.0.0.1:0",
             "--metrics", "127.0.0.1:0",
             "--envoy-config", conf, "--port-file", ports,
             "--log-level", "warn"], stderr=lf))
    got = rlt.wait_ports(PROCS[0], ports, log, timeout_s=60)
    with grpc.insecure_channel("127.0.0.1:%d" % got["grpc"]) as ch:
        stub = rls_pb2_grpc.RateLimitServiceStub(ch)
        for lo in range(0, N, 1000):
            ds = [ratelimit_pb2.RateLimitDescriptor(entries=[
                ratelimit_pb2.RateLimitDescriptor.Entry(key="route",
                                                        value="r%d" % i),
                ratelimit_pb2.RateLimitDescriptor.Entry(key="rule",
                                                        value="m")])
                  for i in range(lo, min(N, lo + 1000))]
            stub.ShouldRateLimit(rls_pb2.RateLimitRequest(
                domain="bench", descriptors=ds), timeout=30)
    conn = http.client.HTTPConnection("127.0.0.1", got["metrics"], timeout=30)
    times, size = [], 0
    for i in range(SCRAPES + 3):
        if i == 3:  # the first ones warm the buffers
            cpu0 = cpu_ticks(PROCS[0].pid)
        t0 = time.perf_counter()
        conn.request("GET", "/metrics")
        body = conn.getresponse().read()
        times.append(time.perf_counter() - t0)
        size = len(body)
    cpu = (cpu_ticks(PROCS[0].pid) - cpu0) / os.sysconf("SC_CLK_TCK")
    times = sorted(times[3:])
    print("N=%d series  page %d bytes  scrape median %.2f ms  p90 %.2f ms  "
          "server CPU %.2f ms a scrape"
          % (N, size, statistics.median(times) * 1e3,
             times[int(len(times) * 0.9)] * 1e3, cpu / SCRAPES * 1e3))


if __name__ == "__main__":
    try:
        main()
    finally:
        for p in PROCS:
            p.terminate()
            p.wait(10)
        subprocess.run(["rm", "-rf", TMP])
