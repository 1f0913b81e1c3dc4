#!/usr/bin/python3
"""The admin listener (--admin, server/admin_api.c) and rl-ctl's usage and
config, end to end, on one store: the memory store, Redis with the script,
or Redis with the module (its path as the last argument).

After N requests a caller's usage is N, window by window, for a fixed
window, a sliding window, a sliding-window counter and a gcra (and the
leases of a concurrency rule), at /v1/usage and through rl-ctl; on Redis a
stored quota (rl-ctl quota) is what the answer's limits are, and a read
creates no key. A reset without a token is 401, with a wrong one 403,
with the right one 200: the next request sees 0 (the refusal cache
forgets too), the log names who asked, rl_admin_resets_total counts it.
An Envoy descriptor's usage by domain and entries; the config dump names
the rules and the Envoy domain; bad requests are 4xx; a non-loopback
--admin without a token file refuses to start.

Usage: e2e_admin.py RL_SERVER RL_CHECK RL_CTL REDIS_SERVER memory|redis
       e2e_admin.py RL_SERVER RL_CHECK RL_CTL REDIS_SERVER module MODULE"""
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

RL_SERVER, RL_CHECK, RL_CTL, REDIS, MODE = sys.argv[1:6]
MODULE = os.path.abspath(sys.argv[6]) if MODE == "module" else None
TMP = tempfile.mkdtemp(prefix="rl-admin-")
FAILS, PROCS = [], []
TOKEN = "e2e-admin-token-0123456789"
N = 7

RULES = """rules:
  fx:
    limits: [100/1h]
  sw:
    limits: [100/1h:sliding-window]
  swc:
    limits: [100/1h:sliding-window-counter]
  g:
    limits: [100/1h:gcra]
  multi:
    limits: [50/1m, 1000/1d:per-caller]
  cc:
    concurrency: 3
    lease: 60s
"""

ENVOY = """domain: shop
descriptors:
  - key: user
    rate_limit:
      unit: hour
      requests_per_unit: 20
"""


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what, flush=True)
    if not cond:
        FAILS.append(what)


def http(port, method, path, token=None):
    """(status, body text) of one request to the admin listener."""
    req = urllib.request.Request("http://127.0.0.1:%d%s" % (port, path),
                                 method=method, data=b"" if method == "POST"
                                 else None)
    if token is not None:
        req.add_header("Authorization", "Bearer " + token)
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def usage(port, rule, key):
    st, body = http(port, "GET", "/v1/usage?rule=%s&key=%s" % (rule, key))
    if st != 200:
        print("  usage answered", st, body)
        return None
    return json.loads(body)


def ask(listen, rule, key, n=1, extra=()):
    """rl-check's last line after n requests."""
    out = subprocess.run([RL_CHECK, "--server", "127.0.0.1:%d" % listen,
                          "--key", key, "--rule", rule, "--repeat", str(n)] +
                         list(extra), capture_output=True, text=True,
                         timeout=30)
    lines = out.stdout.strip().splitlines()
    return lines[-1] if lines else out.stderr


def ctl(*args, redis_port=None):
    cmd = [RL_CTL] + (["--redis", "127.0.0.1:%d" % redis_port]
                      if redis_port else []) + list(args)
    return subprocess.run(cmd, capture_output=True, text=True, timeout=30)


def main():
    rules = os.path.join(TMP, "rules.yaml")
    envoy = os.path.join(TMP, "shop.yaml")
    tokens = os.path.join(TMP, "admin.tokens")
    with open(rules, "w") as f:
        f.write(RULES)
    with open(envoy, "w") as f:
        f.write(ENVOY)
    with open(tokens, "w") as f:
        f.write("# the operators\nops %s\n" % TOKEN)

    # A non-loopback --admin without a token file refuses to start.
    r = subprocess.run([RL_SERVER, "--listen", "127.0.0.1:0", "--admin",
                        "0.0.0.0:0"], capture_output=True, text=True,
                       timeout=10)
    check(r.returncode == 2 and "loopback" in r.stderr,
          "--admin 0.0.0.0 without --admin-token-file: exit 2, said why "
          "(%d: %s)" % (r.returncode, r.stderr.strip()))

    store, rport = [], None
    if MODE != "memory":
        rport, _ = rlt.start_redis(TMP, ["--loadmodule", MODULE] if MODULE
                                   else [], REDIS, PROCS)
        store = ["--redis", "127.0.0.1:%d" % rport]
    ports_file = os.path.join(TMP, "ports")
    log = os.path.join(TMP, "server.log")
    with open(log, "w") as lf:
        p = subprocess.Popen(
            [RL_SERVER, "--listen", "127.0.0.1:0", "--metrics", "127.0.0.1:0",
             "--grpc", "127.0.0.1:0", "--envoy-http", "127.0.0.1:0",
             "--envoy-config", envoy, "--config", rules,
             "--admin", "127.0.0.1:0", "--admin-token-file", tokens,
             "--port-file", ports_file] + store + rlt.server_args(),
            stderr=lf)
    PROCS.append(p)
    ports = rlt.wait_ports(p, ports_file, log)
    listen, admin, metrics = ports["listen"], ports["admin"], ports["metrics"]
    scope = "instance" if MODE == "memory" else "fleet"
    want_store = "memory" if MODE == "memory" else "redis"
    # Ready once it applies the fleet's switches (and has said so in
    # <prefix>instances, where rl-ctl finds its admin listener).
    end = time.time() + 10
    while http(metrics, "GET", "/healthz")[0] != 200 and time.time() < end:
        time.sleep(0.01)

    def redis_keys():
        out = subprocess.run(["redis-cli", "-p", str(rport), "--scan"],
                             capture_output=True, text=True)
        return sorted(out.stdout.split())

    # Usage after N requests is N, every algorithm.
    for rule in ("fx", "sw", "swc", "g"):
        key = "alice-" + rule
        last = ask(listen, rule, key, N)
        check(last.startswith("OK used=%d " % N),
              "%s: %d requests allowed (%s)" % (rule, N, last))
        u = usage(admin, rule, key)
        ok = (u is not None and u["store"] == want_store and
              u["scope"] == scope and len(u["limits"]) == 1 and
              u["limits"][0]["used"] == N and
              u["limits"][0]["limit"] == 100 and
              u["limits"][0]["remaining"] == 100 - N and
              u["next"]["allowed"] is True)
        check(ok, "%s: usage says used %d of 100, store %s, %s (%s)"
              % (rule, N, want_store, scope, u and u["limits"]))
    if MODULE:
        u = usage(admin, "fx", "alice-fx")
        check(u is not None and u["module"] is True,
              "the answer says the module decides")

    # Two windows, one per caller-phase: both shown.
    ask(listen, "multi", "bob", 3)
    u = usage(admin, "multi", "bob")
    check(u is not None and [w["used"] for w in u["limits"]] == [3, 3] and
          [w["limit"] for w in u["limits"]] == [50, 1000],
          "a rule of two windows: each window's used and limit (%s)"
          % (u and u["limits"]))

    # A concurrency rule: its leases alive.
    ask(listen, "cc", "carol", 2, ["--acquire"])
    u = usage(admin, "cc", "carol")
    check(u is not None and u["leases"]["alive"] == 2 and
          u["leases"]["limit"] == 3,
          "a concurrency rule: 2 leases alive of 3 (%s)"
          % (u and u.get("leases")))

    # A read of a caller never seen creates nothing.
    if rport:
        before = redis_keys()
        for rule in ("fx", "sw", "swc", "g", "multi", "cc"):
            usage(admin, rule, "nobody")
        check(redis_keys() == before,
              "reads of a caller never seen created no key")

    # rl-ctl usage: through --admin, or (Redis) the published address.
    r = ctl("--admin", "127.0.0.1:%d" % admin, "usage", "fx", "alice-fx")
    check(r.returncode == 0 and "used %d of 100" % N in r.stdout,
          "rl-ctl --admin usage fx: used %d of 100 (%s)"
          % (N, r.stdout.strip() or r.stderr.strip()))
    if rport:
        r = ctl("usage", "g", "alice-g", redis_port=rport)
        check(r.returncode == 0 and "used %d of 100" % N in r.stdout and
              "read for the fleet" in r.stdout,
              "rl-ctl usage finds the admin listener in <prefix>instances "
              "(%s)" % (r.stdout.strip() or r.stderr.strip()))

    # A stored quota is the limit the answer shows (Redis).
    if rport:
        r = ctl("--wait-ms", "5000", "quota", "set", "fx", "dave", "20/3600",
                redis_port=rport)
        check(r.returncode == 0, "rl-ctl quota set fx dave 20/3600")
        last = ask(listen, "fx", "dave", 3)
        u = usage(admin, "fx", "dave")
        check(u is not None and u["quota"] is not None and
              u["quota"]["applied"] is True and
              u["limits"][0]["limit"] == 20 and u["limits"][0]["used"] == 3 and
              u["limits_from"] == "stored quota",
              "a stored quota: used 3 of 20 (%s, %s)"
              % (last, u and (u["quota"], u["limits"])))

    # Writes: no token 401, a wrong one 403, the right one 200.
    st, body = http(admin, "POST", "/v1/usage/reset?rule=fx&key=alice-fx")
    check(st == 401 and "Bearer" in body, "reset without a token: 401")
    st, body = http(admin, "POST", "/v1/usage/reset?rule=fx&key=alice-fx",
                    token="wrong-token-wrong-token")
    check(st == 403, "reset with a wrong token: 403")
    u = usage(admin, "fx", "alice-fx")
    check(u is not None and u["limits"][0]["used"] == N,
          "refused writes changed nothing")

    # A caller at its limit, refused (the refusal cache learns it), reset:
    # the next request sees 0.
    last = ask(listen, "fx", "erin", 101)
    check(last.startswith("OVER_LIMIT"), "erin at fx's limit: refused")
    resets = 0
    for rule in ("fx", "erin"), ("sw", "alice-sw"), ("swc", "alice-swc"), \
            ("g", "alice-g"):
        st, body = http(admin, "POST", "/v1/usage/reset?rule=%s&key=%s"
                        % rule, token=TOKEN)
        ans = json.loads(body) if st == 200 else {}
        check(st == 200 and ans.get("reset") is True and
              ans.get("cleared", 0) >= 1,
              "reset %s %s: 200, cleared %s" % (rule + (ans.get("cleared"),)))
        resets += st == 200
        last = ask(listen, rule[0], rule[1], 1)
        check(last.startswith("OK used=1 "),
              "after the reset %s %s's next request sees 0 (%s)"
              % (rule + (last,)))
    st, body = http(admin, "POST",
                    "/v1/usage/reset?rule=cc&key=carol&leases=1", token=TOKEN)
    resets += st == 200
    u = usage(admin, "cc", "carol")
    check(st == 200 and u is not None and u["leases"]["alive"] == 0,
          "reset with leases=1: no lease alive")
    with open(log) as f:
        text = f.read()
    check('msg="admin: usage reset" by=ops@127.0.0.1 rule="fx"' in text and
          'key="erin"' in text, "the reset is logged with who asked")
    check(TOKEN not in text, "the token is in no log line")
    page = urllib.request.urlopen("http://127.0.0.1:%d/metrics" % metrics,
                                  timeout=10).read().decode()
    check(rlt_sample(page, "rl_admin_resets_total") == resets,
          "rl_admin_resets_total counts the %d resets" % resets)
    check(rlt_sample(page, "rl_admin_unauthorized_total") == 1 and
          rlt_sample(page, "rl_admin_forbidden_total") == 1,
          "the 401 and the 403 are counted")

    # An Envoy descriptor, by domain and entries.
    body = json.dumps({"domain": "shop", "descriptors": [
        {"entries": [{"key": "user", "value": "ann"}]}]}).encode()
    for _ in range(4):
        urllib.request.urlopen(urllib.request.Request(
            "http://127.0.0.1:%d/json" % ports["envoy-http"], data=body),
            timeout=10).read()
    st, b = http(admin, "GET", "/v1/usage?domain=shop&entry=user=ann")
    u = json.loads(b) if st == 200 else None
    check(u is not None and u["limits"][0]["used"] == 4 and
          u["limits"][0]["limit"] == 20 and u["descriptor"] ==
          "shop.user_ann", "Envoy shop user=ann: used 4 of 20 (%s)" % b)
    r = ctl("--admin", "127.0.0.1:%d" % admin, "usage", "envoy", "shop",
            "user=ann")
    check(r.returncode == 0 and "used 4 of 20" in r.stdout,
          "rl-ctl usage envoy shop user=ann (%s)" % r.stdout.strip())
    r = ctl("--admin", "127.0.0.1:%d" % admin, "--admin-token-file", tokens,
            "usage", "reset", "envoy", "shop", "user=ann")
    st, b = http(admin, "GET", "/v1/usage?domain=shop&entry=user=ann")
    check(r.returncode == 0 and st == 200 and
          json.loads(b)["limits"][0]["used"] == 0,
          "rl-ctl usage reset envoy: used 0 after")

    # The loops of --threads (1 unless RLT_SERVER_ARGS says): read, and
    # the last one paused and resumed through rl-ctl; one loop alone
    # cannot be paused (409).
    sargs = rlt.server_args()
    nloops = int(sargs[sargs.index("--threads") + 1]) \
        if "--threads" in sargs else 1
    st, b = http(admin, "GET", "/v1/loops")
    lp = json.loads(b) if st == 200 else {}
    check(lp.get("threads") == nloops and len(lp.get("loops", [])) == nloops
          and not any(x["paused"] for x in lp["loops"]),
          "GET /v1/loops: %d loops, none paused (%s)" % (nloops, b.strip()))
    r = ctl("--admin", "127.0.0.1:%d" % admin, "loops")
    check(r.returncode == 0 and '"threads":%d' % nloops in r.stdout,
          "rl-ctl loops (%s)" % r.stdout.strip())
    r = ctl("--admin", "127.0.0.1:%d" % admin, "loops", "pause",
            str(nloops - 1))
    check(r.returncode != 0 and "--admin-token-file" in r.stderr,
          "rl-ctl loops pause without a token file: refused (%s)"
          % r.stderr.strip())
    r = ctl("--admin", "127.0.0.1:%d" % admin, "--admin-token-file", tokens,
            "loops", "pause", str(nloops - 1))
    if nloops == 1:
        check(r.returncode != 0 and "--threads 1" in r.stdout + r.stderr,
              "rl-ctl loops pause 0 with one loop: 409 (%s)"
              % (r.stdout + r.stderr).strip())
    else:
        st, b = http(admin, "GET", "/v1/loops")
        lp = json.loads(b) if st == 200 else {}
        check(r.returncode == 0 and lp["loops"][nloops - 1]["paused"] and
              not lp["loops"][0]["paused"],
              "rl-ctl loops pause %d: paused (%s)" % (nloops - 1, b.strip()))
        r = ctl("--admin", "127.0.0.1:%d" % admin, "--admin-token-file",
                tokens, "loops", "resume", str(nloops - 1))
        st, b = http(admin, "GET", "/v1/loops")
        check(r.returncode == 0 and not any(
            x["paused"] for x in json.loads(b)["loops"]),
            "rl-ctl loops resume %d: none paused" % (nloops - 1))

    # The configuration in force.
    st, b = http(admin, "GET", "/v1/config")
    conf = json.loads(b) if st == 200 else {}
    names = [x["name"] for x in conf.get("rules", {}).get("items", [])]
    doms = [d["name"] for d in conf.get("envoy", {}).get("domains", [])]
    check(st == 200 and names == ["fx", "sw", "swc", "g", "multi", "cc"] and
          conf["rules"]["source"] == rules and doms == ["shop"] and
          conf["envoy"]["source"] == "files" and
          conf["envoy"]["files"] == [envoy],
          "config: the rules, their file, the Envoy domain and its file")
    if rport:
        check(any(x["rule"] == "fx" and x["quotas"]
                  for x in conf["switches"]["items"]),
              "config: the switch quotas:fx")
        r = ctl("config", redis_port=rport)
        check(r.returncode == 0 and '"name":"shop"' in r.stdout and
              r.stdout.startswith("# "),
              "rl-ctl config: every live instance's, named")
    else:
        r = ctl("--admin", "127.0.0.1:%d" % admin, "config")
        check(r.returncode == 0 and '"name":"fx"' in r.stdout,
              "rl-ctl --admin config")
    check("password" not in b and TOKEN not in b,
          "config holds no secret")

    # Every bad request a clear 4xx.
    for method, path, want in (
            ("GET", "/v1/usage?rule=nope&key=k", 404),
            ("GET", "/v1/usage?rule=fx", 400),
            ("GET", "/v1/usage?rule=fx&key=k&x=1", 400),
            ("GET", "/v1/usage?domain=nope&entry=a=b", 404),
            ("POST", "/v1/usage?rule=fx&key=k", 405),
            ("GET", "/v1/usage/reset?rule=fx&key=k", 405),
            ("GET", "/nope", 404)):
        st, b = http(admin, method, path)
        check(st == want and '"error"' in b,
              "%s %s: %d (%s)" % (method, path, st, b.strip()))
    r = ctl("--admin", "127.0.0.1:%d" % admin, "usage", "nope", "k")
    check(r.returncode == 1 and "404" in r.stderr,
          "rl-ctl usage of an unknown rule: exit 1, the server's reason")


def rlt_sample(page, name):
    for line in page.splitlines():
        if line.startswith(name + " "):
            return int(float(line.split()[1]))
    return -1


try:
    main()
except Exception as e:  # a broken run is a failure, not a crash
    import traceback
    traceback.print_exc()
    FAILS.append("exception: %s" % e)
rlt.end_run(FAILS, PROCS, TMP)
