#!/usr/bin/python3
"""Top offenders (--top-k; server/core/top.c, GET /v1/top, rl-ctl top), end
to end.

Two rl-server instances on one Redis (the test starts its own), the
second with --threads 2. One caller, mallory, is refused most: more than
all of the twenty light callers together, which outnumber the sketch's k
entries (--top-k 8), so entries are evicted and errors made. On each
instance /v1/top lists mallory first with a count within its error of the
refusals that instance made (both loops of the second merged); /v1/top
alone lists the rule; the text and summary formats; bad requests 4xx.
rl-ctl top finds both instances' published summaries in Redis and lists
mallory first with the fleet's refusals; rl-ctl --admin A --admin B top
merges the two admin listeners' the same way (the memory store's way).
With --top-metric, /metrics has rl_top_refused{rule,key} for mallory and
no more series than asked. An Envoy descriptor's refusals are kept under
envoy:DOMAIN with the descriptor's key.

Usage: e2e_top.py RL_SERVER RL_CHECK RL_CTL REDIS_SERVER"""
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "..", "support"))
import rlt  # noqa: E402

RL_SERVER, RL_CHECK, RL_CTL, REDIS = sys.argv[1:5]
TMP = tempfile.mkdtemp(prefix="rl-top-")
FAILS, PROCS = [], []
K = 8
LIMIT = 5

RULES = """rules:
  fx:
    limits: [%d/1h]
""" % LIMIT

ENVOY = """domain: shop
descriptors:
  - key: user
    rate_limit:
      unit: hour
      requests_per_unit: 2
"""


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what, flush=True)
    if not cond:
        FAILS.append(what)


def http(port, method, path):
    req = urllib.request.Request("http://127.0.0.1:%d%s" % (port, path),
                                 method=method)
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def refuse(listen, key, refusals):
    """Sends LIMIT + refusals requests for key: refusals of them refused.
    Each call is a connection of its own (spread over the loops)."""
    out = subprocess.run([RL_CHECK, "--server", "127.0.0.1:%d" % listen,
                          "--key", key, "--rule", "fx", "--repeat",
                          str(LIMIT + refusals)], capture_output=True,
                         text=True, timeout=60)
    return out.stdout.count("OVER_LIMIT")


def ctl(*args):
    return subprocess.run([RL_CTL] + list(args), capture_output=True,
                          text=True, timeout=30)


def start(name, rport, rules, envoy, extra):
    ports_file = os.path.join(TMP, name + ".ports")
    log = os.path.join(TMP, name + ".log")
    with open(log, "w") as lf:
        p = subprocess.Popen(
            [RL_SERVER, "--listen", "127.0.0.1:0", "--metrics", "127.0.0.1:0",
             "--admin", "127.0.0.1:0", "--grpc", "127.0.0.1:0",
             "--envoy-http", "127.0.0.1:0", "--envoy-config", envoy,
             "--config", rules, "--redis", "127.0.0.1:%d" % rport,
             "--top-k", str(K), "--top-metric", "2",
             "--port-file", ports_file] + extra + rlt.server_args(),
            stderr=lf)
    PROCS.append(p)
    ports = rlt.wait_ports(p, ports_file, log)
    end = time.time() + 10
    while (http(ports["metrics"], "GET", "/healthz")[0] != 200 and
           time.time() < end):
        time.sleep(0.01)
    return ports


def top(port, rule="fx"):
    st, body = http(port, "GET", "/v1/top?rule=" + rule)
    return json.loads(body) if st == 200 else None


def main():
    rules = os.path.join(TMP, "rules.yaml")
    envoy = os.path.join(TMP, "shop.yaml")
    with open(rules, "w") as f:
        f.write(RULES)
    with open(envoy, "w") as f:
        f.write(ENVOY)
    rport, _ = rlt.start_redis(TMP, [], REDIS, PROCS)
    a = start("a", rport, rules, envoy, [])
    b = start("b", rport, rules, envoy, ["--threads", "2"])

    # The counters are the fleet's (one Redis): each caller is refused
    # once it has spent LIMIT anywhere; so each instance's own refusals
    # are what it answered, which the test counts.
    made = {"a": {}, "b": {}}
    for i in range(20):
        key = "light-%d" % i
        made["a"][key] = refuse(a["listen"], key, 1)
        made["b"][key] = refuse(b["listen"], key, 1)
    heavy_a = refuse(a["listen"], "mallory", 40)
    # On b, over several connections (both loops).
    heavy_b = sum(refuse(b["listen"], "mallory", 10) for _ in range(4))
    made["a"]["mallory"], made["b"]["mallory"] = heavy_a, heavy_b
    check(heavy_a == 40 and heavy_b == 40 + 4 * LIMIT,
          "mallory refused 40 times on a, and all %d requests on b, its limit spent (%d, %d)"
          % (40 + 4 * LIMIT, heavy_a, heavy_b))

    for name, ports in (("a", a), ("b", b)):
        t = top(ports["admin"])
        total = sum(made[name].values())
        ok = t is not None and t["top"] and t["top"][0]["key"] == "mallory"
        e = t["top"][0] if ok else {}
        truth = made[name]["mallory"]
        check(ok and e["refused"] >= truth and
              e["refused"] - e["error"] <= truth and
              e["error"] <= total // K and t["refused"] == total and
              len(t["top"]) <= K and t["scope"] == "instance",
              "%s: /v1/top?rule=fx lists mallory first, %d <= %s <= %d + "
              "error, %d refusals in all (%s)"
              % (name, truth, e.get("refused"), truth, total,
                 t and t["top"][:2]))
        for x in (t or {}).get("top", []):
            if x["key"] in made[name]:
                check(x["refused"] - x["error"] <= made[name][x["key"]] <=
                      x["refused"], "%s: %s's count brackets its %d refusals"
                      % (name, x["key"], made[name][x["key"]]))

    st, body = http(a["admin"], "GET", "/v1/top")
    check(st == 200 and any(r["rule"] == "fx" and r["most"] == "mallory"
                            for r in json.loads(body)["rules"]),
          "/v1/top lists fx, its most refused caller mallory (%s)" % body)
    st, body = http(a["admin"], "GET", "/v1/top?rule=fx&format=text")
    check(st == 200 and "mallory" in body.splitlines()[2],
          "format=text: mallory on the first line of callers")
    st, body = http(a["admin"], "GET", "/v1/top?rule=fx&format=summary")
    check(st == 200 and body.startswith("rltop1 "), "format=summary")
    t = top(a["admin"], "nobody")
    check(t is not None and t["top"] == [] and t["refused"] == 0,
          "a rule without refusals: an empty list")
    for method, path, want in (
            ("GET", "/v1/top?rule=fx&key=k", 400),
            ("GET", "/v1/top?rule=bad!", 400),
            ("GET", "/v1/top?format=summary", 400),
            ("GET", "/v1/usage?rule=fx&key=k&format=summary", 400),
            ("POST", "/v1/top?rule=fx", 405)):
        st, body = http(a["admin"], method, path)
        check(st == want and '"error"' in body,
              "%s %s: %d (%s)" % (method, path, st, body.strip()))

    # An Envoy descriptor without a rule: under envoy:shop.
    body = json.dumps({"domain": "shop", "descriptors": [
        {"entries": [{"key": "user", "value": "eve"}]}]}).encode()
    for _ in range(5):
        try:
            urllib.request.urlopen(urllib.request.Request(
                "http://127.0.0.1:%d/json" % a["envoy-http"], data=body),
                timeout=10).read()
        except urllib.error.HTTPError:
            pass  # 429 once over
    t = top(a["admin"], "envoy:shop")
    check(t is not None and t["top"] and
          t["top"][0]["key"] == "shop/user=eve" and
          t["top"][0]["refused"] == 3,
          "Envoy: shop user=eve's 3 refusals under envoy:shop (%s)"
          % (t and t["top"]))

    # The fleet's: rl-ctl top from what both instances publish (every 5 s).
    fleet = heavy_a + heavy_b
    end, r = time.time() + 20, None
    while time.time() < end:
        r = ctl("--redis", "127.0.0.1:%d" % rport, "top", "fx", "5")
        lines = r.stdout.splitlines()
        if (r.returncode == 0 and "2 of 2 instances" in r.stdout and
                len(lines) > 2 and lines[2].split()[-1] == "mallory"):
            break
        time.sleep(0.2)
    lines = r.stdout.splitlines() if r else []
    first = lines[2].split() if len(lines) > 2 else []
    check(len(first) == 3 and first[2] == "mallory" and
          int(first[0]) >= fleet and int(first[0]) - int(first[1]) <= fleet
          and "fleet-wide" in lines[0],
          "rl-ctl top fx: mallory first with the fleet's %d refusals (%s)"
          % (fleet, r and (r.stdout.strip() or r.stderr.strip())))
    check(len([x for x in lines if x.startswith(" ")]) <= 6,
          "rl-ctl top fx 5: at most 5 callers")
    keys = subprocess.run(["redis-cli", "-p", str(rport), "--scan",
                           "--pattern", "rl:top:*"], capture_output=True,
                          text=True).stdout.split()
    ttls = [int(subprocess.run(["redis-cli", "-p", str(rport), "pttl", k],
                               capture_output=True, text=True).stdout)
            for k in keys]
    check(len(keys) >= 2 and all(0 < x <= 15000 for x in ttls),
          "each instance's key expires within 15 s (%s %s)" % (keys, ttls))

    # The admin listeners', merged the same way.
    r = ctl("--admin", "127.0.0.1:%d" % a["admin"], "--admin",
            "127.0.0.1:%d" % b["admin"], "top", "fx")
    lines = r.stdout.splitlines()
    first = lines[2].split() if len(lines) > 2 else []
    check(r.returncode == 0 and len(first) == 3 and first[2] == "mallory" and
          int(first[0]) >= fleet and int(first[0]) - int(first[1]) <= fleet,
          "rl-ctl --admin A --admin B top fx: mallory first, %d (%s)"
          % (fleet, r.stdout.strip() or r.stderr.strip()))
    r = ctl("--admin", "127.0.0.1:%d" % a["admin"], "top", "bad!")
    check(r.returncode == 2, "rl-ctl top of a bad rule name: exit 2")

    # The opt-in metric: at most 2 callers per rule, mallory among them.
    page = urllib.request.urlopen("http://127.0.0.1:%d/metrics" % b["metrics"],
                                  timeout=10).read().decode()
    series = [x for x in page.splitlines()
              if x.startswith("rl_top_refused{rule=\"fx\"")]
    check(len(series) == 2 and 'key="mallory"' in series[0],
          "rl_top_refused: fx's 2 top callers, mallory first (%s)" % series)
    check(any(x.startswith("rl_top_refusals_total ") for x in
              page.splitlines()), "rl_top_refusals_total on the page")


try:
    main()
except Exception as e:  # a broken run is a failure, not a crash
    import traceback
    traceback.print_exc()
    FAILS.append("exception: %s" % e)
rlt.end_run(FAILS, PROCS, TMP)
