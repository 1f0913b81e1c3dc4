#!/usr/bin/python3
"""Spans of decisions (--trace-otlp, server/trace/), end to end, against a
stand-in OTLP/HTTP collector: a small HTTP server in this script, on a
free loopback port, that decodes every ExportTraceServiceRequest it is
posted with protoc-c --decode and OpenTelemetry's own .proto files
(proto/opentelemetry/), not with rl-server's code.

With --trace-sample 0, only a sampled traceparent makes a span:
  - GET /check with a traceparent header: one span, its trace id the
    header's, its parent span id the header's, name ratelimit.decision,
    attributes ratelimit.rule=api, ratelimit.outcome=ok,
    ratelimit.store=memory, ratelimit.latency_us;
  - the same with flags 00, with a malformed traceparent, and without
    one: no span;
  - ShouldRateLimit over h2c (--grpc) with traceparent in the gRPC
    metadata, twice for a descriptor limited to 1 an hour: two spans of
    that trace, outcomes ok then over_limit, rule envoy:shop;
  - POST /json (--envoy-http) with a traceparent header: a span of that
    trace;
  - POST /json of two descriptors of an all_or_nothing domain: one span
    (one decision of two levels), rule envoy:team.
rl_trace_spans_sampled_total and rl_trace_spans_exported_total count
them. Then a dead collector (a port nobody listens on), --trace-sample 1:
every check is still answered, and every span is counted in
rl_trace_spans_dropped_total{reason="export_failed"}.

Usage: e2e_trace.py RL_SERVER PROTOC_C PROTO_DIR"""
import codecs
import http.server
import os
import re
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "..", "support"))
import rlt  # noqa: E402

RL_SERVER, PROTOC_C, PROTO_DIR = sys.argv[1:4]
TMP = tempfile.mkdtemp(prefix="rl-trace-")
FAILS, PROCS = [], []
REQ_TYPE = "opentelemetry.proto.collector.trace.v1.ExportTraceServiceRequest"
REQ_PROTO = "opentelemetry/proto/collector/trace/v1/trace_service.proto"

ENVOY = """domain: shop
descriptors:
  - key: user
    rate_limit:
      unit: hour
      requests_per_unit: 1
"""
ENVOY_TEAM = """domain: team
all_or_nothing: true
descriptors:
  - key: org
    rate_limit: {unit: hour, requests_per_unit: 5}
    descriptors:
      - key: user
        rate_limit: {unit: hour, requests_per_unit: 2}
"""


def check(cond, what):
    if not cond:
        FAILS.append(what)
        print("FAIL:", what, flush=True)
    return cond


# --- the stand-in collector ---------------------------------------------

def parse_text(text):
    """protobuf text format (what protoc --decode prints) into nested
    dicts: each field name maps to the list of its values."""
    root, stack = {}, []
    cur = root
    for line in text.splitlines():
        line = line.strip()
        if not line:
            continue
        if line.endswith("{"):
            child = {}
            cur.setdefault(line[:-1].strip(), []).append(child)
            stack.append(cur)
            cur = child
        elif line == "}":
            cur = stack.pop()
        else:
            name, _, val = line.partition(":")
            val = val.strip()
            if val.startswith('"'):
                val = codecs.escape_decode(val[1:-1].encode())[0]
            cur.setdefault(name.strip(), []).append(val)
    return root


class Collector:
    def __init__(self):
        self.lock = threading.Lock()
        self.spans, self.resources, self.errors = [], [], []
        col = self

        class H(http.server.BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_POST(self):
                n = int(self.headers.get("Content-Length", "0"))
                body = self.rfile.read(n)
                p = subprocess.run(
                    [PROTOC_C, "--proto_path=" + PROTO_DIR,
                     "--decode=" + REQ_TYPE, REQ_PROTO],
                    input=body, capture_output=True)
                with col.lock:
                    if (self.path != "/v1/traces" or
                            self.headers.get("Content-Type") !=
                            "application/x-protobuf" or p.returncode != 0):
                        col.errors.append((self.path, p.stderr))
                    else:
                        msg = parse_text(p.stdout.decode("latin-1"))
                        for rs in msg.get("resource_spans", []):
                            col.resources.append(rs.get("resource", [{}])[0])
                            for ss in rs.get("scope_spans", []):
                                col.spans.extend(ss.get("spans", []))
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()

        self.srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.port = self.srv.server_address[1]
        threading.Thread(target=self.srv.serve_forever, daemon=True).start()

    def wait(self, n, timeout_s=10):
        end = time.time() + timeout_s
        while time.time() < end:
            with self.lock:
                if len(self.spans) >= n:
                    return list(self.spans)
            time.sleep(0.02)
        with self.lock:
            return list(self.spans)


def attrs(span):
    out = {}
    for kv in span.get("attributes", []):
        v = kv["value"][0]
        if "string_value" in v:
            out[kv["key"][0].decode()] = v["string_value"][0].decode()
        elif "int_value" in v:
            out[kv["key"][0].decode()] = int(v["int_value"][0])
    return out


# --- clients ------------------------------------------------------------

def http_check(port, key, traceparent=None):
    req = urllib.request.Request(
        "http://127.0.0.1:%d/check?rule=api&key=%s" % (port, key))
    if traceparent is not None:
        req.add_header("traceparent", traceparent)
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code


def hpack_literal(name, value):
    """A header field as an HPACK literal without indexing, new name, no
    Huffman (RFC 7541 6.2.2): all a server must understand."""
    def s(b):
        assert len(b) < 127
        return bytes([len(b)]) + b
    return b"\x00" + s(name.encode()) + s(value.encode())


def frame(ftype, flags, sid, payload):
    return struct.pack(">I", len(payload))[1:] + bytes([ftype, flags]) + \
        struct.pack(">I", sid) + payload


def pb_str(field, b):
    return bytes([field << 3 | 2, len(b)]) + b


def grpc_call(sock, sid, traceparent, user):
    """One ShouldRateLimit on an h2c connection; returns the response's
    overall_code (1 OK, 2 OVER_LIMIT) or None."""
    entry = pb_str(1, b"user") + pb_str(2, user.encode())
    desc = pb_str(1, entry)
    msg = pb_str(1, b"shop") + pb_str(2, desc)
    hdrs = b"".join(hpack_literal(n, v) for n, v in (
        (":method", "POST"), (":scheme", "http"),
        (":path", "/envoy.service.ratelimit.v3.RateLimitService/"
                  "ShouldRateLimit"),
        (":authority", "rl"), ("content-type", "application/grpc"),
        ("te", "trailers"), ("traceparent", traceparent)))
    sock.sendall(frame(1, 0x4, sid, hdrs) +
                 frame(0, 0x1, sid, b"\x00" + struct.pack(">I", len(msg)) +
                       msg))
    data, buf = b"", b""
    sock.settimeout(10)
    while True:
        while len(buf) < 9 or len(buf) < 9 + int.from_bytes(buf[:3], "big"):
            got = sock.recv(65536)
            if not got:
                return None
            buf += got
        n = int.from_bytes(buf[:3], "big")
        ftype, flags = buf[3], buf[4]
        fsid = int.from_bytes(buf[5:9], "big") & 0x7fffffff
        payload, buf = buf[9:9 + n], buf[9 + n:]
        if ftype == 4 and not flags & 1:
            sock.sendall(frame(4, 1, 0, b""))  # SETTINGS ack
        elif ftype in (3, 7):  # RST_STREAM, GOAWAY
            return None
        elif ftype == 0 and fsid == sid:
            data += payload
        elif ftype == 1 and fsid == sid and flags & 1:
            break  # the trailers
    if len(data) >= 7 and data[5] == 0x08:
        return data[6]
    return None


def json_call(port, traceparent, user, body=None):
    body = body or ('{"domain":"shop","descriptors":[{"entries":'
                    '[{"key":"user","value":"%s"}]}]}' % user).encode()
    req = urllib.request.Request("http://127.0.0.1:%d/json" % port,
                                 data=body, method="POST")
    req.add_header("Content-Type", "application/json")
    req.add_header("traceparent", traceparent)
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code


def metric(mport, name):
    with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % mport,
                                timeout=10) as r:
        text = r.read().decode()
    m = re.search("^" + re.escape(name) + r" (\d+)$", text, re.M)
    return int(m.group(1)) if m else None


def start(name, extra):
    log = os.path.join(TMP, name + ".log")
    pf = os.path.join(TMP, name + ".ports")
    envoy = os.path.join(TMP, "envoy.yaml")
    with open(envoy, "w") as f:
        f.write(ENVOY)
    team = os.path.join(TMP, "team.yaml")
    with open(team, "w") as f:
        f.write(ENVOY_TEAM)
    args = [RL_SERVER, "--listen", "127.0.0.1:0", "--grpc", "127.0.0.1:0",
            "--http", "127.0.0.1:0", "--metrics", "127.0.0.1:0",
            "--envoy-http", "127.0.0.1:0",
            "--port-file", pf, "--rule", "api=1000/1m",
            "--envoy-config", envoy, "--envoy-config", team,
            "--trace-flush-ms", "50",
            "--log-level", "debug"] + extra + rlt.server_args()
    p = subprocess.Popen(args, stdout=open(log, "w"), stderr=subprocess.STDOUT)
    PROCS.append(p)
    return p, rlt.wait_ports(p, pf, log)


def stop(p):
    p.terminate()
    p.wait(timeout=20)


def main():
    col = Collector()
    tid1, par1 = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
    tid2, par2 = "0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331"
    p, ports = start("live", [
        "--trace-otlp", "http://127.0.0.1:%d/v1/traces" % col.port,
        "--trace-sample", "0", "--trace-service", "rl-e2e"])
    hp, gp, mp = ports["http"], ports["grpc"], ports["metrics"]

    check(http_check(hp, "alice", "00-%s-%s-01" % (tid1, par1)) == 200,
          "a traced check is answered 200")
    check(http_check(hp, "bob", "00-%s-%s-00" % (tid1, par1)) == 200,
          "an unsampled traceparent's check is answered")
    check(http_check(hp, "carol", "00-%s-%s-01" % (tid1.upper(), par1))
          == 200, "a malformed traceparent's check is answered")
    check(http_check(hp, "dave") == 200, "a check without one is answered")
    s = socket.create_connection(("127.0.0.1", gp), 10)
    s.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + frame(4, 0, 0, b""))
    tp2 = "00-%s-%s-01" % (tid2, par2)
    check(grpc_call(s, 1, tp2, "eve") == 1, "the first gRPC call is OK")
    check(grpc_call(s, 3, tp2, "eve") == 2,
          "the second gRPC call is OVER_LIMIT (1 an hour)")
    s.close()
    tid3, par3 = "a3ce929d0e0e47364bf92f3577b34da6", "0ba902b700f067aa"
    check(json_call(ports["envoy-http"], "00-%s-%s-01" % (tid3, par3),
                    "frank") == 200, "POST /json is answered 200")
    tid4, par4 = "e47364bf92f3577b34da6a3ce929d0e0", "f067aa0ba902b700"
    check(json_call(ports["envoy-http"], "00-%s-%s-01" % (tid4, par4), None,
                    b'{"domain":"team","descriptors":['
                    b'{"entries":[{"key":"org","value":"o"}]},'
                    b'{"entries":[{"key":"org","value":"o"},'
                    b'{"key":"user","value":"u"}]}]}') == 200,
          "POST /json of an all_or_nothing domain is answered 200")

    spans = col.wait(5)
    check(len(spans) == 5, "5 spans reach the collector, got %d"
          % len(spans))
    check(not col.errors, "every export decodes: %r" % col.errors[:1])
    by_trace = {}
    for sp in spans:
        by_trace.setdefault(sp["trace_id"][0].hex(), []).append(sp)
    h = by_trace.get(tid1, [])
    check(len(h) == 1, "one span of the HTTP check's trace")
    if h:
        a = attrs(h[0])
        check(h[0]["parent_span_id"][0].hex() == par1,
              "its parent is the traceparent's span id")
        check(h[0]["name"][0] == b"ratelimit.decision", "its name")
        check(h[0]["kind"][0] == "SPAN_KIND_SERVER", "its kind")
        check(len(h[0]["span_id"][0]) == 8 and
              h[0]["span_id"][0] != bytes(8), "a span id of its own")
        check(a.get("ratelimit.rule") == "api", "rule api: %r" % a)
        check(a.get("ratelimit.outcome") == "ok", "outcome ok: %r" % a)
        check(a.get("ratelimit.store") == "memory", "store memory: %r" % a)
        check(isinstance(a.get("ratelimit.latency_us"), int),
              "latency_us: %r" % a)
        check(int(h[0]["end_time_unix_nano"][0]) >=
              int(h[0]["start_time_unix_nano"][0]) >
              (time.time() - 3600) * 1e9, "its times are Unix nanoseconds")
    g = by_trace.get(tid2, [])
    check(len(g) == 2, "two spans of the gRPC calls' trace")
    outs = sorted(attrs(sp).get("ratelimit.outcome") for sp in g)
    check(outs == ["ok", "over_limit"], "outcomes ok, over_limit: %r" % outs)
    check(all(sp["parent_span_id"][0].hex() == par2 for sp in g),
          "their parent is the gRPC metadata's span id")
    check(all(attrs(sp).get("ratelimit.rule") == "envoy:shop" for sp in g),
          "their rule is the Envoy domain's")
    j = by_trace.get(tid3, [])
    check(len(j) == 1 and j[0]["parent_span_id"][0].hex() == par3,
          "one span of POST /json's trace, its parent the header's")
    t = by_trace.get(tid4, [])
    check(len(t) == 1 and t[0]["parent_span_id"][0].hex() == par4 and
          attrs(t[0]).get("ratelimit.rule") == "envoy:team" and
          attrs(t[0]).get("ratelimit.outcome") == "ok",
          "one span of the all_or_nothing call's two levels: %r"
          % [attrs(x) for x in t])
    res = {kv["key"][0].decode(): kv["value"][0]["string_value"][0].decode()
           for r in col.resources[:1] for kv in r.get("attributes", [])}
    check(res.get("service.name") == "rl-e2e", "service.name: %r" % res)
    check(len(res.get("service.instance.id", "")) == 36,
          "a UUID as service.instance.id: %r" % res)
    check(metric(mp, "rl_trace_spans_sampled_total") == 5,
          "rl_trace_spans_sampled_total 5")
    end = time.time() + 10
    while time.time() < end and \
            metric(mp, "rl_trace_spans_exported_total") != 5:
        time.sleep(0.02)
    check(metric(mp, "rl_trace_spans_exported_total") == 5,
          "rl_trace_spans_exported_total 5")
    stop(p)

    # A dead collector: a port reserved, nobody listening.
    dead = rlt.reserve_port()
    p, ports = start("dead", [
        "--trace-otlp", "http://127.0.0.1:%d" % dead, "--trace-sample", "1",
        "--trace-timeout-ms", "500"])
    hp, mp = ports["http"], ports["metrics"]
    n = 50
    codes = [http_check(hp, "k%d" % i) for i in range(n)]
    check(codes == [200] * n, "every check answered with the collector "
          "dead: %r" % sorted(set(codes)))
    name = 'rl_trace_spans_dropped_total{reason="export_failed"}'
    end = time.time() + 15
    while time.time() < end and metric(mp, name) != n:
        time.sleep(0.05)
    if not check(metric(mp, name) == n, "%d spans counted dropped, got %r"
                 % (n, metric(mp, name))):
        with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % mp) as r:
            print("".join(ln for ln in r.read().decode().splitlines(True)
                          if ln.startswith("rl_trace")))
    check(metric(mp, "rl_trace_spans_exported_total") == 0,
          "none exported")
    check((metric(mp, 'rl_trace_exports_total{result="failed"}') or 0) >= 1,
          "failed exports counted")
    stop(p)
    col.srv.shutdown()
    rlt.end_run(FAILS, PROCS, TMP)


if __name__ == "__main__":
    main()
