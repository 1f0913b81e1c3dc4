#!/usr/bin/python3
"""deploy/alerts.yml holds valid Prometheus rules whose metrics rl-server
serves: promtool checks the file when it is installed; in any case the
file must parse as a rules file (groups of rules with alert, expr and
labels), and every metric an expression names must be on the /metrics
page of an rl-server with every listener and a Redis store, --fail-local,
TLS on its listeners (a certificate made by openssl) and --envoy-xds (to
a port nothing listens on) (a histogram's _bucket, _sum and _count by its
own name). tests/server/e2e/e2e_prometheus.py has a real Prometheus
evaluate them.

Usage: alerts_check.py RL_SERVER ALERTS_YML [redis-server]"""
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request

import yaml

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "support"))
import rlt  # noqa: E402

RL_SERVER, ALERTS = sys.argv[1], sys.argv[2]
REDIS = sys.argv[3] if len(sys.argv) > 3 else shutil.which("redis-server")
FAILS = []
# PromQL's own words: functions, aggregations, modifiers.
WORDS = {"sum", "min", "max", "avg", "count", "by", "without", "rate",
         "increase", "irate", "delta", "changes", "histogram_quantile",
         "max_over_time", "min_over_time", "avg_over_time", "and", "or",
         "unless", "on", "ignoring", "group_left", "group_right", "bool",
         "offset", "abs", "absent", "clamp_min", "clamp_max", "time",
         "vector", "scalar", "topk", "bottomk", "quantile", "le", "inf"}


def check(cond, what):
    if not cond:
        FAILS.append(what)
        print("FAIL:", what, flush=True)


def metric_names(expr):
    """The metric names of a PromQL expression: label matchers, grouping
    lists and range selectors left out, then every identifier that is not
    one of PromQL's own words."""
    e = re.sub(r"\{[^}]*\}", "", expr)
    e = re.sub(r"\b(by|without|on|ignoring)\s*\([^)]*\)", "", e)
    e = re.sub(r"\[[^\]]*\]", "", e)
    e = re.sub(r'"[^"]*"', "", e)
    names = set(re.findall(r"[A-Za-z_:][A-Za-z0-9_:]*", e))
    return {n for n in names if n.lower() not in WORDS}


def served(page, name):
    for suffix in ("", "_bucket", "_sum", "_count"):
        if name.endswith(suffix) and suffix:
            base = name[:-len(suffix)]
            if re.search(r"^# TYPE %s histogram$" % re.escape(base), page,
                         re.M):
                return True
    # A family with no series yet (counters per rule before any traffic)
    # still says its TYPE.
    return re.search(r"^(%s(\{| )|# TYPE %s )" % (re.escape(name),
                                                  re.escape(name)),
                     page, re.M) is not None


def metrics_page():
    tmp = tempfile.mkdtemp(prefix="rl-alerts-")
    procs = []
    try:
        port = rlt.reserve_port()
        rlog = os.path.join(tmp, "redis.log")
        procs.append(subprocess.Popen(
            [REDIS, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", tmp, "--logfile", rlog],
            stdout=subprocess.DEVNULL))
        rlt.wait_listen(port, procs[-1], rlog)
        cert, key = os.path.join(tmp, "cert.pem"), os.path.join(tmp, "key.pem")
        subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048",
                        "-nodes", "-keyout", key, "-out", cert, "-days", "30",
                        "-subj", "/CN=localhost"], check=True,
                       capture_output=True)
        rules = os.path.join(tmp, "rules.yaml")
        with open(rules, "w") as f:
            f.write("rules:\n  api:\n    limits: [5/1m]\n")
        ports = os.path.join(tmp, "ports")
        log = os.path.join(tmp, "server.log")
        with open(log, "w") as lf:
            procs.append(subprocess.Popen(
                [RL_SERVER, "--listen", "127.0.0.1:0", "--metrics",
                 "127.0.0.1:0", "--grpc", "127.0.0.1:0", "--http",
                 "127.0.0.1:0", "--port-file", ports, "--config", rules,
                 "--redis", "127.0.0.1:%d" % port, "--fail-local",
                 "--tls-cert", cert, "--tls-key", key,
                 "--envoy-xds", "127.0.0.1:%d" % rlt.reserve_port()],
                stderr=lf))
        got = rlt.wait_ports(procs[-1], ports, log)
        url = "http://127.0.0.1:%d" % got["metrics"]
        end = time.time() + 10
        while time.time() < end:  # until the store is up
            try:
                urllib.request.urlopen(url + "/healthz", timeout=2)
                break
            except OSError:
                time.sleep(0.02)
        return urllib.request.urlopen(url + "/metrics",
                                      timeout=5).read().decode()
    finally:
        for p in procs:
            p.terminate()
            p.wait(10)
        shutil.rmtree(tmp, ignore_errors=True)


def main():
    promtool = shutil.which("promtool")
    if promtool:
        r = subprocess.run([promtool, "check", "rules", ALERTS],
                           capture_output=True, text=True)
        check(r.returncode == 0, "promtool: %s" % (r.stdout + r.stderr))
        print("promtool check rules: exit %d" % r.returncode)
    else:
        print("promtool not installed: the rules are checked here alone")
    with open(ALERTS) as f:
        doc = yaml.safe_load(f)
    groups = doc.get("groups") if isinstance(doc, dict) else None
    check(isinstance(groups, list) and groups, "no groups")
    exprs = []
    for g in groups or []:
        check(isinstance(g.get("name"), str), "a group without a name")
        for r in g.get("rules", []):
            check(isinstance(r.get("alert"), str) and r["alert"],
                  "a rule without an alert name: %r" % r)
            check(isinstance(r.get("expr"), str) and r["expr"].strip(),
                  "%s: no expr" % r.get("alert"))
            check(set(r) <= {"alert", "expr", "for", "labels",
                             "annotations"},
                  "%s: unknown keys %r" % (r.get("alert"), set(r)))
            if "for" in r:
                check(re.fullmatch(r"\d+[smhdwy]", str(r["for"])),
                      "%s: bad for: %r" % (r["alert"], r["for"]))
            exprs.append((r.get("alert"), r.get("expr", "")))
    page = metrics_page()
    names = set()
    for alert, expr in exprs:
        found = metric_names(expr)
        check(found, "%s: no metric in %r" % (alert, expr))
        for n in found:
            names.add(n)
            check(served(page, n), "%s: /metrics has no %s" % (alert, n))
    print("%d alerts naming %d metrics" % (len(exprs), len(names)))


main()
print("%d failures" % len(FAILS))
sys.exit(1 if FAILS else 0)
