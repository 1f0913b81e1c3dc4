#!/usr/bin/python3
"""RLQS benchmark: usage reports one rl-server takes, and what each costs
it and its store.

Usage: rlqs_bench.py RL_SERVER PROTO_DIR [redis-server|-] [STREAMS] [SECS]
                     [BUDGETS]

STREAMS RLQS streams (default 200; one bucket each, spread over BUDGETS
budgets, default 1: every stream shares one) each send 40 reports a second (under the 50 a second a stream may
send) for SECS seconds (default 10), from asyncio grpc in this process.
With min_report_ms 0 every report is a store step (the worst case; the
default 100 ms coalesces a stream's reports into 10 steps a second).
Prints, per store (memory; Redis when given): reports a second taken, the
server's CPU per report (user + system, from /proc) and so the reports a
second one core would take, store calls per report, and on Redis its
EVALSHA calls, microseconds per call (INFO commandstats) and Redis's CPU
per report. The client shares the machine: the figures per report, not
the rate, are what carry over."""

import asyncio
import os
import subprocess
import sys
import tempfile
import time
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "support"))
import rlt  # noqa: E402

RL_SERVER, PROTO_DIR = sys.argv[1], sys.argv[2]
REDIS = sys.argv[3] if len(sys.argv) > 3 and sys.argv[3] != "-" else None
STREAMS = int(sys.argv[4]) if len(sys.argv) > 4 else 200
SECS = float(sys.argv[5]) if len(sys.argv) > 5 else 10.0
BUDGETS = int(sys.argv[6]) if len(sys.argv) > 6 else 1
RATE = 40
TMP = tempfile.mkdtemp(prefix="rl-rlqs-bench-")
PROCS = []

rlt.rlqs_stubs(PROTO_DIR, TMP)
import grpc  # noqa: E402
from envoy.service.rate_limit_quota.v3 import rlqs_pb2  # noqa: E402
from envoy.service.rate_limit_quota.v3 import rlqs_pb2_grpc  # noqa: E402

CONF = os.path.join(TMP, "rlqs.yaml")
with open(CONF, "w") as f:
    f.write("domain: envoy\nmin_report_ms: 0\nbuckets:\n"
            "  - name: api\n    match: {name: api, budget: \"*\"}\n"
            "    requests: 100000\n"
            "    stale_ms: 5000\n")


def cpu_s(pid):
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def metric(port, name):
    text = urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port,
                                  timeout=5).read().decode()
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return 0.0


def redis_info(port, section):
    out = subprocess.check_output(["redis-cli", "-p", str(port), "INFO",
                                   section]).decode()
    return dict(line.split(":", 1) for line in out.splitlines()
                if ":" in line)


async def one_stream(addr, i, stop_at, counts):
    async with grpc.aio.insecure_channel(addr) as ch:
        stub = rlqs_pb2_grpc.RateLimitQuotaServiceStub(ch)

        async def gen():
            while time.monotonic() < stop_at:
                m = rlqs_pb2.RateLimitQuotaUsageReports(domain="envoy")
                u = m.bucket_quota_usages.add(num_requests_allowed=5,
                                              num_requests_denied=1)
                u.bucket_id.bucket["name"] = "api"
                u.bucket_id.bucket["envoy"] = "e%d" % i
                u.bucket_id.bucket["budget"] = "b%d" % (i % BUDGETS)
                u.time_elapsed.seconds = 0
                yield m
                counts[0] += 1
                # Never faster than RATE, even after a stall (a stream may
                # send 50 a second).
                await asyncio.sleep(1.0 / RATE)

        call = stub.StreamRateLimitQuotas(gen())
        try:
            async for _ in call:
                counts[1] += 1
        except grpc.aio.AioRpcError as e:
            counts[2] += 1
            if counts[2] <= 3:
                print("stream ended:", e.code(), e.details())


async def drive(addr):
    counts = [0, 0, 0]  # sent, responses, errors
    stop_at = time.monotonic() + SECS
    await asyncio.gather(*[one_stream(addr, i, stop_at, counts)
                           for i in range(STREAMS)])
    return counts


def run(store_args, label, redis_port=None):
    ports = os.path.join(TMP, label + ".ports")
    log = open(os.path.join(TMP, label + ".log"), "w")
    p = subprocess.Popen([RL_SERVER, "--listen", "127.0.0.1:0", "--grpc",
                          "127.0.0.1:0", "--metrics", "127.0.0.1:0",
                          "--port-file", ports, "--rlqs-config", CONF,
                          "--log-level", "warn"] + store_args, stderr=log)
    PROCS.append(p)
    got = rlt.wait_ports(p, ports, log.name)
    addr = "127.0.0.1:%d" % got["grpc"]
    if redis_port is not None:
        subprocess.check_call(["redis-cli", "-p", str(redis_port),
                               "CONFIG", "RESETSTAT"],
                              stdout=subprocess.DEVNULL)
        rcpu0 = redis_info(redis_port, "cpu")
    c0, r0 = cpu_s(p.pid), metric(got["metrics"], "rl_rlqs_reports_total")
    s0 = metric(got["metrics"], "rl_rlqs_store_calls_total")
    t0 = time.monotonic()
    counts = asyncio.run(drive(addr))
    dt = time.monotonic() - t0
    c1, r1 = cpu_s(p.pid), metric(got["metrics"], "rl_rlqs_reports_total")
    s1 = metric(got["metrics"], "rl_rlqs_store_calls_total")
    reports = r1 - r0
    cpu = c1 - c0
    print("%s: %d streams on %d budgets, %.0f reports in %.1f s = %.0f "
          "reports/s; responses %d, streams ended early %d" %
          (label, STREAMS, BUDGETS, reports, dt, reports / dt, counts[1],
           counts[2]))
    if reports > 0:
        print("  rl-server CPU %.2f s: %.1f us per report (one core: "
              "%.0f reports/s); store calls per report %.2f" %
              (cpu, cpu / reports * 1e6,
               reports / cpu if cpu > 0 else 0, (s1 - s0) / reports))
    if redis_port is not None and reports > 0:
        st = redis_info(redis_port, "commandstats")
        rcpu1 = redis_info(redis_port, "cpu")
        ev = st.get("cmdstat_evalsha", "")
        kv = dict(x.split("=") for x in ev.split(",")) if ev else {}
        rc = (float(rcpu1["used_cpu_user"]) + float(rcpu1["used_cpu_sys"]) -
              float(rcpu0["used_cpu_user"]) - float(rcpu0["used_cpu_sys"]))
        print("  Redis: EVALSHA calls %s, %s us per call (in the script); "
              "Redis CPU %.1f us per report" %
              (kv.get("calls", "0"), kv.get("usec_per_call", "?"),
               rc / reports * 1e6))
    p.terminate()
    p.wait()


try:
    run([], "memory")
    if REDIS is not None:
        port, proc = rlt.start_redis(TMP, redis=REDIS, procs=PROCS)
        run(["--redis", "127.0.0.1:%d" % port], "redis", port)
finally:
    rlt._kill(PROCS)
