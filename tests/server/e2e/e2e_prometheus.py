#!/usr/bin/python3
"""A real Prometheus (Debian's prometheus, with its promtool) scrapes a
fleet of two rl-servers on one private Redis, evaluates deploy/alerts.yml
and answers every panel query of deploy/grafana/ratelimit.json.

The fleet: server A with --fail-local, TLS on its gRPC and HTTP listeners
(a certificate made by openssl, valid 7 days), --envoy-xds to a port
nothing listens on and --reserve-ttl-ms 1000; server B failing open with
--refusal-cache 1. Both load the same rules file (a limited rule, a rule
in shadow mode, a rule reservations use). Prometheus scrapes both every
second and evaluates every second a copy of deploy/alerts.yml whose only
change is every `for:` set to 3 s (the file's are minutes to a day; its
expressions, ranges and thresholds are the file's), so an alert goes
pending and fires within seconds.

What must hold, through Prometheus's HTTP API:
- every rule loaded and evaluated, health "ok" (the expression is valid
  PromQL over what was scraped), at the start and at the end; every
  metric an expression names is among the series Prometheus scraped (an
  expression over a name no rl-server serves evaluates "ok" to nothing,
  so this is asked separately);
- Redis stopped: RateLimiterStoreDown goes pending, then firing, for
  both instances, and RateLimiterFailingLocal fires for A; Redis back on
  its port: RateLimiterStoreDown resolves;
- the alerts added since the file was first written fire on what makes
  them: RateLimiterTlsCertificateExpiring (the 7-day certificate; it
  resolves once a 90-day one is put in place and A reloads, and
  rl_tls_certificate_expiry_seconds equals each certificate's notAfter
  as openssl prints it), RateLimiterXdsDisconnected,
  RateLimiterRefusalCacheFull (B's one entry, two callers refused),
  RateLimiterSettlementsRefused (a reservation settled after its end,
  twice);
- promtool check rules (lint all, fatal) reports nothing on the file and
  on the copy, and promtool check metrics nothing on either live page
  after the traffic (rl_config_reload_last_seconds, in seconds, is the
  reload SIGHUP made);
- the dashboard is a Grafana dashboard with a Prometheus data source
  variable, and each target of each panel (its Grafana variables given
  the values "all" gives them, $__rate_interval 1m) answers a non-empty
  result with a number in it (not only NaN) after traffic through
  rl-check, some of it refused; each query variable's metric has series.

Every process listens on loopback ports (the servers on port 0 with
--port-file, Redis and Prometheus on reserved ones), is stopped by pid,
also on failure or a signal (rlt), and every wait polls a condition
against a deadline. Exits 77 (skipped) when prometheus or promtool is not
installed.

Usage: e2e_prometheus.py RL_SERVER RL_CHECK REDIS_SERVER DEPLOY_DIR
                         [PROMETHEUS [PROMTOOL]]"""
import calendar
import json
import math
import os
import re
import shutil
import signal
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request

import yaml

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "..", "support"))
import rlt  # noqa: E402

RL_SERVER, RL_CHECK, REDIS, DEPLOY = sys.argv[1:5]
PROMETHEUS = sys.argv[5] if len(sys.argv) > 5 else shutil.which("prometheus")
PROMTOOL = sys.argv[6] if len(sys.argv) > 6 else shutil.which("promtool")
ALERTS = os.path.join(DEPLOY, "alerts.yml")
DASHBOARD = os.path.join(DEPLOY, "grafana", "ratelimit.json")
TMP = tempfile.mkdtemp(prefix="rl-prometheus-")
FAILS = []
PROCS = []
FOR = "3s"  # every alert's `for:` in the test's copy
RULES = """rules:
  api:
    limits: [5/1m]
  shadowed:
    limits: [2/1m]
    mode: shadow
  tokens:
    limits: [1000/1m]
"""


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what, flush=True)
    if not cond:
        FAILS.append(what)
    return cond


def wait_for(cond, what, timeout_s=30, every_s=0.05):
    """Polls cond until it returns something true (returned), or fails
    `what` at the deadline (None returned)."""
    end = time.time() + timeout_s
    while time.time() < end:
        got = cond()
        if got:
            return got
        time.sleep(every_s)
    check(False, what + " (not within %d s)" % timeout_s)
    return None


# ---- certificates ----------------------------------------------------------

def make_cert(name, days, key=None):
    """A self-signed certificate for 127.0.0.1 valid `days` days, with a
    new P-256 key, or `key`'s. Returns (cert, key) paths."""
    cert = os.path.join(TMP, name + ".pem")
    if key is None:
        key = os.path.join(TMP, name + ".key")
        args = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                "-keyout", key]
    else:
        args = ["-key", key]
    subprocess.run(["openssl", "req", "-x509", "-nodes", "-days", str(days),
                    "-subj", "/CN=localhost", "-addext",
                    "subjectAltName=IP:127.0.0.1", "-out", cert] + args,
                   check=True, capture_output=True, timeout=30)
    return cert, key


def not_after(cert):
    """The certificate's notAfter in seconds since the epoch, as openssl
    prints it."""
    out = subprocess.run(["openssl", "x509", "-in", cert, "-noout",
                          "-enddate"], check=True, capture_output=True,
                         text=True, timeout=30).stdout.strip()
    when = out.split("=", 1)[1]  # "Dec 10 10:35:53 2026 GMT"
    return calendar.timegm(time.strptime(when, "%b %d %H:%M:%S %Y %Z"))


# ---- the fleet -------------------------------------------------------------

def start_redis_on(port):
    """redis-server again on port (reserved by this process already)."""
    log = os.path.join(TMP, "redis-%d-again.log" % port)
    p = subprocess.Popen([REDIS, "--port", str(port), "--bind", "127.0.0.1",
                          "--save", "", "--appendonly", "no", "--dir", TMP,
                          "--logfile", log], stdout=subprocess.DEVNULL)
    PROCS.append(p)
    rlt.wait_listen(port, p, log)
    return p


class Server:
    def __init__(self, name, args):
        self.name = name
        ports = os.path.join(TMP, name + ".ports")
        self.log = os.path.join(TMP, name + ".log")
        with open(self.log, "w") as lf:
            self.p = subprocess.Popen(
                [RL_SERVER, "--listen", "127.0.0.1:0", "--metrics",
                 "127.0.0.1:0", "--port-file", ports] + args +
                rlt.server_args(), stderr=lf)
        PROCS.append(self.p)
        self.ports = rlt.wait_ports(self.p, ports, self.log)
        self.native = "127.0.0.1:%d" % self.ports["listen"]
        self.target = "127.0.0.1:%d" % self.ports["metrics"]

    def page(self):
        with urllib.request.urlopen("http://%s/metrics" % self.target,
                                    timeout=5) as r:
            return r.read().decode()

    def metric(self, series):
        """The value of one series of the page (exact name and labels as
        written), or None."""
        m = re.search(r"^%s (\S+)$" % re.escape(series), self.page(), re.M)
        return float(m.group(1)) if m else None

    def checks(self, rule, key, n, extra=()):
        """n checks by rl-check; returns its output lines (one per
        decision)."""
        r = subprocess.run([RL_CHECK, "--server", self.native, "--rule",
                            rule, "--key", key, "--repeat", str(n),
                            "--timeout", "3000"] + list(extra),
                           capture_output=True, text=True, timeout=60)
        return r.stdout.splitlines()

    def settle(self, handle):
        r = subprocess.run([RL_CHECK, "--server", self.native, "--settle",
                            handle, "--actual", "0", "--timeout", "3000"],
                           capture_output=True, text=True, timeout=60)
        return (r.stdout + r.stderr).strip()

    def stop(self):
        self.p.send_signal(signal.SIGTERM)
        return self.p.wait(30)


def decided(lines, n, what):
    """Every one of n checks answered with a decision; returns (allowed,
    refused)."""
    ok = sum(1 for x in lines if x.startswith("OK "))
    over = sum(1 for x in lines if x.startswith("OVER_LIMIT "))
    check(ok + over == n, "%s: %d decisions of %d (%s)" % (what, ok + over, n,
                                                          lines[-1:]))
    return ok, over


# ---- Prometheus ------------------------------------------------------------

class Prom:
    def __init__(self, targets, rules_file):
        self.port = rlt.reserve_port()
        self.base = "http://127.0.0.1:%d" % self.port
        conf = os.path.join(TMP, "prometheus.yml")
        with open(conf, "w") as f:
            f.write("global:\n"
                    "  scrape_interval: 1s\n"
                    "  scrape_timeout: 900ms\n"
                    "  evaluation_interval: 1s\n"
                    "rule_files: ['%s']\n"
                    "scrape_configs:\n"
                    "  - job_name: ratelimit\n"
                    "    static_configs:\n"
                    "      - targets: [%s]\n"
                    % (rules_file, ", ".join("'%s'" % t for t in targets)))
        self.log = os.path.join(TMP, "prometheus.log")
        with open(self.log, "w") as lf:
            self.p = subprocess.Popen(
                [PROMETHEUS, "--config.file=" + conf,
                 "--storage.tsdb.path=" + os.path.join(TMP, "tsdb"),
                 "--web.listen-address=127.0.0.1:%d" % self.port,
                 "--log.level=warn"], stdout=lf, stderr=lf)
        PROCS.append(self.p)
        rlt.wait_listen(self.port, self.p, self.log, timeout_s=30)
        # Listening comes before ready (its storage opened, rules loaded).
        if not wait_for(lambda: self.ready(), "prometheus ready"):
            raise RuntimeError("prometheus not ready; last lines:\n%s"
                               % rlt.tail(self.log))

    def ready(self):
        if self.p.poll() is not None:
            raise RuntimeError("prometheus exited; last lines:\n%s"
                               % rlt.tail(self.log))
        try:
            with urllib.request.urlopen(self.base + "/-/ready", timeout=2):
                return True
        except OSError:
            return False

    def api(self, path, **params):
        url = self.base + "/api/v1/" + path
        if params:
            url += "?" + urllib.parse.urlencode(params, doseq=True)
        with urllib.request.urlopen(url, timeout=10) as r:
            doc = json.loads(r.read().decode())
        if doc.get("status") != "success":
            raise RuntimeError("%s: %s" % (url, doc))
        return doc["data"]

    def query(self, q):
        return self.api("query", query=q)["result"]

    def rules(self):
        """Every alerting rule Prometheus holds: {name: rule}."""
        return {r["name"]: r for g in self.api("rules")["groups"]
                for r in g["rules"]}

    def alerts(self, name):
        """The active alerts (pending or firing) of rule name, as the API
        gives them (labels, state, value...)."""
        return [a for a in self.api("alerts")["alerts"]
                if a["labels"].get("alertname") == name]


def firing(prom, name, want=lambda a: True):
    return [a for a in prom.alerts(name)
            if a["state"] == "firing" and want(a)]


def test_copy():
    """deploy/alerts.yml with every `for:` FOR; returns the copy's path and
    the rules as the file has them."""
    with open(ALERTS) as f:
        doc = yaml.safe_load(f)
    rules = [r for g in doc["groups"] for r in g["rules"]]
    for r in rules:
        if "for" in r:
            r["for"] = FOR
    path = os.path.join(TMP, "alerts-test.yml")
    with open(path, "w") as f:
        yaml.safe_dump(doc, f, sort_keys=False)
    with open(ALERTS) as f:
        return path, [r for g in yaml.safe_load(f)["groups"]
                      for r in g["rules"]]


def promtool_rules(path):
    r = subprocess.run([PROMTOOL, "check", "rules", "--lint=all",
                        "--lint-fatal", path], capture_output=True,
                       text=True, timeout=60)
    lines = [ln.strip() for ln in (r.stdout + r.stderr).splitlines()
             if ln.strip()]
    extra = [ln for ln in lines if not (ln.startswith("Checking ") or
                                        re.fullmatch(r"SUCCESS: \d+ rules "
                                                     r"found", ln))]
    check(r.returncode == 0 and not extra,
          "promtool check rules %s: exit %d, %s" % (os.path.basename(path),
                                                   r.returncode,
                                                   extra or "nothing else"))


def promtool_metrics(server):
    page = server.page()
    with open(os.path.join(TMP, server.name + ".metrics"), "w") as f:
        f.write(page)
    r = subprocess.run([PROMTOOL, "check", "metrics"], input=page,
                       capture_output=True, text=True, timeout=60)
    said = (r.stdout + r.stderr).strip()
    check(r.returncode == 0 and not said,
          "promtool check metrics on %s's page (%d lines): exit %d%s"
          % (server.name, page.count("\n"), r.returncode,
             ": " + said if said else ", nothing reported"))


def rules_ok(prom, names, when):
    """Every rule of names loaded and evaluated since Prometheus started,
    each with health ok."""
    def evaluated():
        got = prom.rules()
        if set(got) >= set(names) and all(
                not got[n]["lastEvaluation"].startswith("0001-")
                for n in names):
            return got
        return None
    got = wait_for(evaluated, "%s: every rule of alerts.yml evaluated" % when)
    if not got:
        return
    check(len(got) == len(names), "%s: Prometheus holds the file's %d rules "
          "(%d)" % (when, len(names), len(got)))
    bad = ["%s: %s %s" % (n, got[n]["health"], got[n].get("lastError", ""))
           for n in names if got[n]["health"] != "ok"]
    check(not bad, "%s: every rule's health is ok %s" % (when, bad or ""))


def names_scraped(prom, rules):
    """Every metric an alert's expression names is among the names
    Prometheus scraped. Every one of ours begins rl_."""
    want = {}
    for r in rules:
        for n in re.findall(r"\brl_[a-z0-9_]+", r["expr"]):
            want.setdefault(n, r["alert"])

    def missing():
        have = set(prom.api("label/__name__/values"))
        return [n for n in want if n not in have]
    if wait_for(lambda: not missing(), "every metric the alerts name "
                "scraped"):
        check(True, "the %d metrics the alerts name were all scraped"
              % len(want))
    else:
        check(False, "not scraped: %s" % ["%s (%s)" % (n, want[n])
                                          for n in missing()])


def store_down_cycle(prom, servers, redis_port, redis):
    """Redis stopped: RateLimiterStoreDown pending, then firing, on every
    instance; A fails local; Redis back: resolved."""
    name = "RateLimiterStoreDown"
    check(not prom.alerts(name), "%s inactive while Redis is up" % name)
    redis.kill()
    redis.wait()
    t0 = time.time()
    seen = {s.target: [] for s in servers}

    def progress():
        for a in prom.alerts(name):
            st = seen.get(a["labels"].get("instance"))
            if st is not None and (not st or st[-1] != a["state"]):
                st.append(a["state"])
        return all(st and st[-1] == "firing" for st in seen.values())
    if wait_for(progress, "%s firing on both instances" % name,
                every_s=0.02):
        print("     firing on both %.1f s after Redis stopped"
              % (time.time() - t0))
    for inst, states in seen.items():
        check(states == ["pending", "firing"],
              "%s on %s: %s (want pending, then firing)" % (name, inst,
                                                           states))
    a = servers[0]
    # Decisions while Redis is away: A on its share (the limit over the
    # two live instances it saw), B failing open.
    ok, over = decided(a.checks("api", "outage-A", 8), 8,
                       "A during the outage")
    check(ok == 2 and over == 6, "A on its share of 5 over 2 instances: 2 "
          "allowed, 6 refused (%d, %d)" % (ok, over))
    ok, _ = decided(servers[1].checks("api", "outage-B", 3), 3,
                    "B during the outage")
    check(ok == 3, "B fails open: 3 of 3 allowed (%d)" % ok)
    wait_for(lambda: firing(prom, "RateLimiterFailingLocal",
                            lambda x: x["labels"]["instance"] == a.target),
             "RateLimiterFailingLocal firing for A")
    redis = start_redis_on(redis_port)
    t1 = time.time()
    for s in servers:
        wait_for(lambda: s.metric("rl_store_up") == 1,
                 "%s reconnected to Redis" % s.name)
    # A adds what it admitted alone to Redis, then decides on its share 2 s
    # more while the fleet does the same.
    wait_for(lambda: a.metric("rl_fail_local_deciding") == 0 and
             a.metric("rl_fail_local_charges_pending") == 0,
             "A decides with Redis again, its charges in")

    def resolved():
        return (not prom.alerts(name) and
                prom.rules()[name]["state"] == "inactive")
    if wait_for(resolved, "%s resolved once Redis is back" % name):
        check(True, "%s resolved %.1f s after Redis came back"
              % (name, time.time() - t1))
    return redis


def traffic(a, b, when):
    """Decisions on both servers, some refused, some shadow refused; and
    /check over TLS on A."""
    for s in (a, b):
        key = "k-%s-%s" % (s.name, when)
        ok, over = decided(s.checks("api", key, 8), 8,
                           "%s %s api" % (s.name, when))
        check(ok == 5 and over == 3, "%s %s: 5 allowed, 3 refused of a 5/1m "
              "rule (%d, %d)" % (s.name, when, ok, over))
        lines = s.checks("shadowed", key, 4)
        decided(lines, 4, "%s %s shadowed" % (s.name, when))
        check(sum("shadow_refused" in x for x in lines) == 2,
              "%s %s: a shadow rule of 2: the 3rd and 4th allowed, marked "
              "shadow_refused" % (s.name, when))
    ctx = ssl.create_default_context(cafile=a.cert)
    codes = []
    for _ in range(7):
        url = "https://127.0.0.1:%d/check?rule=api&key=h-%s" % (
            a.ports["http"], when)
        try:
            with urllib.request.urlopen(url, timeout=5, context=ctx) as r:
                codes.append(r.status)
        except urllib.error.HTTPError as e:
            codes.append(e.code)
    check(codes == [200] * 5 + [429] * 2,
          "A's /check over TLS (verified): 5 x 200, 2 x 429 (%s)" % codes)


def reservations(prom, a):
    """One reservation settled in time, one settled after its end (twice,
    with a scrape between: a series that appears at 1 shows no increase
    until it moves)."""
    got = a.checks("tokens", "r", 1, ["--reserve", "--cost", "10"])
    h = re.search(r"handle=([0-9a-f]+)", got[0] if got else "")
    check(h is not None and a.settle(h.group(1)).startswith("OK"),
          "a reservation settled in time")
    got = a.checks("tokens", "r", 1, ["--reserve", "--cost", "10"])
    m = re.search(r"handle=([0-9a-f]+) expires_at_ms=(\d+)",
                  got[0] if got else "")
    if not check(m is not None, "a second reservation: %s" % got):
        return
    # Its end is in the store's clock, Redis's TIME on this machine.
    wait_for(lambda: time.time() * 1000 > int(m.group(2)) + 200,
             "the reservation's end passed", timeout_s=10)
    said = a.settle(m.group(1))
    check("expired" in said, "settled after its end: refused (%s)" % said)
    series = 'rl_rule_handle_ops_total{rule="tokens",result="refused"}'
    wait_for(lambda: prom.query(series), "the refused settlement scraped")
    said = a.settle(m.group(1))
    check("expired" in said, "and again: refused (%s)" % said)
    wait_for(lambda: a.metric(series) == 2, "two refused settlements")


def reload_b(b):
    """SIGHUP: a reload, and its time in seconds."""
    b.p.send_signal(signal.SIGHUP)
    wait_for(lambda: b.metric("rl_config_reloads_total") == 1,
             "B reloaded its rules on SIGHUP")
    took = b.metric("rl_config_reload_last_seconds")
    check(took is not None and 0 < took < 10,
          "rl_config_reload_last_seconds is the reload's time in seconds: "
          "%s" % took)


def expiry_metric(prom, a, want):
    res = wait_for(lambda: [r for r in prom.query(
        'rl_tls_certificate_expiry_seconds{instance="%s"}' % a.target)
        if float(r["value"][1]) == want] and prom.query(
        'rl_tls_certificate_expiry_seconds{instance="%s"}' % a.target),
        "rl_tls_certificate_expiry_seconds %d scraped" % want)
    if res:
        got = sorted((r["metric"]["listener"], float(r["value"][1]))
                     for r in res)
        check(got == [("grpc", want), ("http", want)],
              "rl_tls_certificate_expiry_seconds{listener} of A's two TLS "
              "listeners is the certificate's notAfter %d: %s" % (want, got))


def new_alerts(prom, a, b):
    """The alerts added since the file was first written, on what makes
    them fire."""
    tls = "RateLimiterTlsCertificateExpiring"
    got = wait_for(lambda: len(firing(prom, tls)) == 2 and firing(prom, tls),
                   "%s firing for A's two TLS listeners" % tls)
    if got:
        left = float(got[0]["value"])
        check(6 * 86400 < left < 7 * 86400 + 60,
              "%s: the value is the time left, about 7 days (%.0f s)"
              % (tls, left))
    wait_for(lambda: firing(prom, "RateLimiterXdsDisconnected",
                            lambda x: x["labels"]["instance"] == a.target),
             "RateLimiterXdsDisconnected firing for A (no control plane)")
    wait_for(lambda: firing(prom, "RateLimiterRefusalCacheFull",
                            lambda x: x["labels"]["instance"] == b.target),
             "RateLimiterRefusalCacheFull firing for B (--refusal-cache 1)")
    wait_for(lambda: firing(prom, "RateLimiterSettlementsRefused",
                            lambda x: x["labels"].get("rule") == "tokens"),
             "RateLimiterSettlementsRefused firing for rule tokens")
    for quiet in ("RateLimiterXdsStale", "RateLimiterFailLocalChargesLost",
                  "RateLimiterStoreDown", "RateLimiterFailingLocal"):
        check(not prom.alerts(quiet), "%s inactive" % quiet)


def rotate_cert(prom, a):
    """A 90-day certificate in place of the 7-day one (same key, renamed
    over it), SIGHUP: the gauge follows, the alert resolves."""
    cert, _ = make_cert("cert90", 90, a.key)
    want = not_after(cert)
    os.replace(cert, a.cert)
    a.p.send_signal(signal.SIGHUP)
    expiry_metric(prom, a, want)
    tls = "RateLimiterTlsCertificateExpiring"
    wait_for(lambda: not prom.alerts(tls) and
             prom.rules()[tls]["state"] == "inactive",
             "%s resolved with a 90-day certificate" % tls)


# ---- the dashboard ---------------------------------------------------------

def dashboard(prom):
    with open(DASHBOARD) as f:
        dash = json.load(f)
    variables = {v["name"]: v for v in dash.get("templating", {})
                 .get("list", [])}
    ds = variables.get("datasource", {})
    check(ds.get("type") == "datasource" and ds.get("query") == "prometheus",
          "the dashboard has a Prometheus data source variable")
    panels = []
    for p in dash.get("panels", []):
        panels.append(p)
        panels.extend(p.get("panels", []))  # a collapsed row's
    ids = [p["id"] for p in panels]
    check(len(ids) == len(set(ids)), "panel ids are unique")
    for p in panels:
        g = p.get("gridPos", {})
        check(g.get("w", 0) >= 1 and g.get("x", 0) + g.get("w", 0) <= 24,
              "%s: within the 24 columns" % p["title"])
        if p["type"] != "row":
            check(p.get("datasource", {}).get("uid") == "${datasource}" and
                  all(t.get("datasource", {}).get("uid") == "${datasource}"
                      for t in p["targets"]),
                  "%s: on the data source variable" % p["title"])
            check(p["targets"] and len({t["refId"] for t in p["targets"]})
                  == len(p["targets"]),
                  "%s: targets with distinct refIds" % p["title"])

    def grafana(q):
        # "All" of a multi-value variable with allValue .*; the rate
        # interval Grafana would pick for a 1 s scrape over a short range.
        for name, v in variables.items():
            if v.get("type") == "query":
                q = q.replace("$" + name, v.get("allValue", ".*"))
        return q.replace("$__rate_interval", "1m")
    for name, v in variables.items():
        if v.get("type") != "query":
            continue
        m = re.fullmatch(r"label_values\((.+),\s*(\w+)\)", v["query"])
        if check(m is not None, "variable %s: label_values(...)" % name):
            sel = grafana(m.group(1))
            got = prom.api("series", **{"match[]": sel})
            check(any(m.group(2) in s for s in got),
                  "variable %s: %s has series with %s" % (name, sel,
                                                          m.group(2)))

    def answers(q):
        res = prom.query(q)
        return res if any(not math.isnan(float(r["value"][1]))
                          for r in res) else None
    n = 0
    for p in panels:
        for t in p.get("targets", []):
            q = grafana(t["expr"])
            n += 1
            res = wait_for(lambda: answers(q), "panel %r target %s: %s "
                           "answers" % (p["title"], t["refId"], q),
                           timeout_s=20, every_s=0.2)
            if res:
                print("ok   panel %-40s %s: %d series, e.g. %s" % (
                    repr(p["title"])[:40], t["refId"], len(res),
                    res[0]["value"][1]))
    check(n > 0, "%d panel queries answered" % n)


def main():
    for what, path in (("prometheus", PROMETHEUS), ("promtool", PROMTOOL)):
        if not path or not os.access(path, os.X_OK):
            print("SKIP: no %s (Debian's prometheus package)" % what)
            return "skip"
    cert, key = make_cert("cert7", 7)
    rules_yaml = os.path.join(TMP, "rules.yaml")
    with open(rules_yaml, "w") as f:
        f.write(RULES)
    rport, redis = rlt.start_redis(TMP, (), REDIS, PROCS)
    # --top-metric: the Top offenders panel reads rl_top_refused.
    common = ["--redis", "127.0.0.1:%d" % rport, "--config", rules_yaml,
              "--top-metric", "5"]
    a = Server("A", common + [
        "--fail-local", "--grpc", "127.0.0.1:0", "--http", "127.0.0.1:0",
        "--tls-cert", cert, "--tls-key", key, "--reserve-ttl-ms", "1000",
        "--envoy-xds", "127.0.0.1:%d" % rlt.reserve_port()])
    a.cert, a.key = cert, key
    b = Server("B", common + ["--refusal-cache", "1"])
    for s in (a, b):
        wait_for(lambda: s.metric("rl_store_up") == 1,
                 "%s connected to Redis" % s.name)
    wait_for(lambda: a.metric("rl_fleet_instances_seen") == 2,
             "A sees both instances live in Redis (its fail-local share)")

    promtool_rules(ALERTS)
    copy, rules = test_copy()
    promtool_rules(copy)
    prom = Prom([a.target, b.target], copy)
    names = [r["alert"] for r in rules]
    rules_ok(prom, names, "at the start")
    # A counter's increase shows only from its first sample on: the
    # traffic starts once both pages have been scraped.
    wait_for(lambda: len(prom.query('up{job="ratelimit"} == 1')) == 2 and
             prom.query('rl_refusal_cache_full_total{instance="%s"}'
                        % b.target),
             "Prometheus has scraped both servers")

    traffic(a, b, "before")
    # B's refusal cache holds one (rule, caller): a second caller refused
    # finds it full, again on each refusal.
    for key in ("full-1", "full-2"):
        decided(b.checks("api", key, 8), 8, "B api " + key)
    reservations(prom, a)
    reload_b(b)
    for s in (a, b):
        promtool_metrics(s)

    names_scraped(prom, rules)
    expiry_metric(prom, a, not_after(cert))
    new_alerts(prom, a, b)
    redis = store_down_cycle(prom, [a, b], rport, redis)
    rotate_cert(prom, a)
    traffic(a, b, "after")
    dashboard(prom)
    rules_ok(prom, names, "at the end")
    for s in (a, b):
        check(s.stop() == 0, "%s stopped cleanly" % s.name)


if __name__ == "__main__":
    t = time.time()
    skipped = False
    try:
        skipped = main() == "skip"
    except Exception as e:  # noqa: BLE001 - reported, then cleaned up
        import traceback
        traceback.print_exc()
        FAILS.append("exception: %r" % (e,))
    print("%.1f s" % (time.time() - t))
    if skipped and not FAILS:
        shutil.rmtree(TMP, ignore_errors=True)
        sys.exit(77)  # ctest's SKIP_RETURN_CODE: never a silent pass
    rlt.end_run(FAILS, PROCS, TMP)
