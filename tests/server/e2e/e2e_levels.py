#!/usr/bin/python3
"""All or nothing across levels, through the native protocol: rl-check
--level against two rl-servers on one private Redis (the Lua script), and
one rl-server on its memory store.

A rule `org` of 3 a day and `user` of 2 a day (days, so that no
window ends mid-run but at midnight); checks of two levels
(org:acme under org, user:X under user), sent to the two servers in turn:
user a's first two are allowed, its third is refused by level 2 (the
user's) and spends nothing of the organisation's, which user b's check
then gets (allowed, the organisation's third); user c's is refused by
level 1 and spends nothing of user c's. In Redis the counters then hold
exactly what the allowed checks cost: org:acme 3, user:a 2, user:b 1, no
counter for user:c. The memory store answers the same lines. A request
the server refuses to decide is an error (exit 2) that charges nothing:
an unknown rule among the levels, a concurrency rule, the same key and
rule twice, nine levels (the library's own check), levels whose rules
hold more than 8 limits together.

Every process listens on loopback ports (rl-server on port 0 with
--port-file), is stopped by pid, also on failure or a signal (rlt).

Usage: e2e_levels.py RL_SERVER RL_CHECK REDIS_SERVER"""
import os
import shutil
import subprocess
import sys
import tempfile
import urllib.error
import urllib.parse
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "..", "support"))
import rlt  # noqa: E402

RL_SERVER, RL_CHECK, REDIS = sys.argv[1:4]
REDIS_CLI = shutil.which("redis-cli") or os.path.join(
    os.path.dirname(shutil.which(REDIS) or REDIS), "redis-cli")
TMP = tempfile.mkdtemp(prefix="rl-levels-")
FAILS = []
PROCS = []
RULES = """rules:
  org:
    limits: [3/1d]
  user:
    limits: [2/1d]
  conc:
    concurrency: 2
    lease: 10s
  wide:
    limits: [5/1s, 6/2s, 7/3s, 8/4s, 9/5s]
"""


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what, flush=True)
    if not cond:
        FAILS.append(what)


def start_server(n, extra):
    ports = os.path.join(TMP, "server-%d.ports" % n)
    log = open(os.path.join(TMP, "server-%d.log" % n), "w")
    p = subprocess.Popen([RL_SERVER, "--listen", "127.0.0.1:0",
                          "--http", "127.0.0.1:0",
                          "--port-file", ports, "--config", RULES_FILE] +
                         extra, stderr=log)
    PROCS.append(p)
    got = rlt.wait_ports(p, ports, log.name)
    HTTP[got["listen"]] = got["http"]
    return got["listen"]


HTTP = {}  # a server's native port -> its --http port


def http_levels(port, *lv, extra=""):
    """GET /check?level=KEY=RULE... on the server of native port `port`:
    (status, X-RateLimit-Level, RateLimit-Policy, body)."""
    q = "&".join("level=" + urllib.parse.quote("%s=%s" % kv, safe="")
                 for kv in lv) + extra
    try:
        r = urllib.request.urlopen("http://127.0.0.1:%d/check?%s"
                                   % (HTTP[port], q), timeout=10)
        st, h, body = r.status, r.headers, r.read().decode()
    except urllib.error.HTTPError as e:
        st, h, body = e.code, e.headers, e.read().decode()
    return st, h.get("X-RateLimit-Level"), h.get("RateLimit-Policy"), body


def http_scenario(ports, what):
    """The scenario through /check: organisation acme2 (its own
    counters), the answers' statuses and their X-RateLimit-Level."""
    want = [("a", 200, "2", "user"), ("a", 200, "2", "user"),
            ("a", 429, "2", "user"), ("b", 200, "1", "org"),
            ("c", 429, "1", "org")]
    for i, (user, code, level, rule) in enumerate(want):
        st, lv, pol, body = http_levels(ports[i % len(ports)],
                                        ("org:acme2", "org"),
                                        ("user2:" + user, "user"))
        check(st == code and lv == level and pol is not None and
              pol.startswith('"%s"' % rule),
              "%s /check: check %d (user %s) is %d at level %s (%s): "
              "%r %r %r %r" % (what, i, user, code, level, rule, st, lv,
                               pol, body))
    st, lv, pol, body = http_levels(ports[0], ("org:x", "org"),
                                    extra="&rule=org")
    check(st == 400, "%s /check: level= with rule= is a 400: %r %r"
          % (what, st, body))


def levels(port, *lv):
    """One rl-check of the levels (key, rule)...: its exit status and
    output line."""
    args = [RL_CHECK, "--server", "127.0.0.1:%d" % port]
    for key, rule in lv:
        args += ["--level", "%s=%s" % (key, rule)]
    r = subprocess.run(args, capture_output=True, text=True, timeout=30)
    return r.returncode, r.stdout.strip(), r.stderr.strip()


def field(line, name):
    for tok in line.split():
        if tok.startswith(name + "="):
            return tok[len(name) + 1:]
    return None


def scenario(ports, what):
    """The two users and the organisation, the checks alternating between
    the servers in ports."""
    want = [("a", 0, "OK", "2"), ("a", 0, "OK", "2"),
            ("a", 1, "OVER_LIMIT", "2"), ("b", 0, "OK", "1"),
            ("c", 1, "OVER_LIMIT", "1")]
    for i, (user, rc, code, level) in enumerate(want):
        got, line, err = levels(ports[i % len(ports)], ("org:acme", "org"),
                                ("user:" + user, "user"))
        check(got == rc and line.startswith(code + " ") and
              field(line, "level") == level,
              "%s: check %d (user %s) is %s at level %s: %r %r"
              % (what, i, user, code, level, line, err))
    # The organisation's refusal of c names its limit and count.
    check(field(line, "limit") == "3" and field(line, "used") == "3",
          "%s: the refusal describes the organisation's window: %r"
          % (what, line))


def redis_counts(rport):
    """Counter key -> value, for every key in the private Redis."""
    out = {}
    keys = subprocess.run([REDIS_CLI, "-p", str(rport), "--scan"],
                          capture_output=True, text=True, timeout=10)
    for k in keys.stdout.split():
        v = subprocess.run([REDIS_CLI, "-p", str(rport), "GET", k],
                           capture_output=True, text=True, timeout=10)
        out[k] = v.stdout.strip()
    return out


def count_of(counts, caller, rule):
    """The count of caller's day window under rule, or None."""
    for k, v in counts.items():
        if ("{%s}:r:%s:86400:" % (caller, rule)) in k:
            return int(v)
    return None


def refused_to_decide(port, what, *lv):
    got, line, err = levels(port, *lv)
    check(got == 2 and line == "", "%s: exit 2 (%r %r)" % (what, line, err))
    return err


def main():
    global RULES_FILE
    RULES_FILE = os.path.join(TMP, "rules.yaml")
    with open(RULES_FILE, "w") as f:
        f.write(RULES)
    rport, _ = rlt.start_redis(TMP, (), REDIS, PROCS)
    a = start_server(1, ["--redis", "127.0.0.1:%d" % rport])
    b = start_server(2, ["--redis", "127.0.0.1:%d" % rport])
    scenario([a, b], "redis")
    http_scenario([a, b], "redis")
    counts = redis_counts(rport)
    for org, user in (("org:acme", "user:"), ("org:acme2", "user2:")):
        check(count_of(counts, org, "org") == 3 and
              count_of(counts, user + "a", "user") == 2 and
              count_of(counts, user + "b", "user") == 1 and
              count_of(counts, user + "c", "user") is None,
              "redis holds exactly what the allowed checks of %s cost: %r"
              % (org, counts))

    err = refused_to_decide(a, "an unknown rule", ("org:x", "org"),
                            ("user:x", "nosuch"))
    check("unknown rule 'nosuch'" in err, "it says which rule: %r" % err)
    err = refused_to_decide(a, "a concurrency rule", ("org:x", "org"),
                            ("user:x", "conc"))
    check("concurrency" in err, "it says why: %r" % err)
    err = refused_to_decide(a, "a level twice", ("org:x", "org"),
                            ("org:x", "org"))
    check("twice" in err, "it says why: %r" % err)
    err = refused_to_decide(a, "nine levels",
                            *[("k%d" % i, "org") for i in range(9)])
    check("levels" in err, "it says why: %r" % err)
    err = refused_to_decide(a, "ten limits together", ("org:x", "wide"),
                            ("user:x", "wide"))
    check("limits together" in err, "it says why: %r" % err)
    counts = redis_counts(rport)
    check(count_of(counts, "org:x", "org") is None,
          "checks refused as errors charge nothing: %r" % counts)

    m = start_server(3, [])
    scenario([m], "memory")
    http_scenario([m], "memory")


if __name__ == "__main__":
    try:
        main()
    except Exception as e:  # a failure, not a pass: end_run exits
        FAILS.append(repr(e))
        print("FAIL", repr(e), flush=True)
    finally:
        rlt.end_run(FAILS, PROCS, TMP)
