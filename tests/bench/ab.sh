#!/usr/bin/env bash
# Two builds side by side, in one run, rounds interleaved so that the
# shared machine's noise falls on both alike: BENCHMARKS.md's headline rows
# for a change that must not move them (a refactor).
#   tests/bench/ab.sh BASE_BUILD NEW_BUILD [SECONDS [ROUNDS]]
# BASE_BUILD and NEW_BUILD are Release build trees (rl-server, rl-bench,
# grpc_load and the module built); rl-bench and grpc_load come from
# NEW_BUILD for every row (the same client), the server and the module
# from each build. Rows:
#   closed     rl-bench closed loop, 4 connections x 256 in flight, 100k
#              keys uniform, limit 100 per 60 s, Redis with the module
#   open 50k   rl-bench open loop at 50,000/s, requests one at a time, the
#              same keys and store; rl-server's CPU per decision from
#              /proc
#   envoy      grpc_load 4 x 64 streams, 1 descriptor a call, 100k keys,
#              the memory store
# Prints each run, then per row the medians (decisions/s, p50/p99 us,
# rl-server us of CPU per decision) and the ratio new/base. Figures, not a
# test; every rl-bench run has --audit (a window over its limit fails it).
set -euo pipefail
cd "$(dirname "$0")/../.."
base=$(cd "$1" && pwd)
new=$(cd "$2" && pwd)
secs=${3:-8}
rounds=${4:-3}
tmp=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$tmp"; }
trap cleanup EXIT
. deploy/ports.sh
bench=$new/tools/bench/rl-bench
[ -x "$bench" ] || bench=$new/client/bench/rl-bench
grpc_load=$new/tests/bench/grpc_load
server_of() { echo "$1/server/rl-server"; }
module_of() { echo "$1/server/redis_module/ratelimit.so"; }
cpu() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }
hz=$(getconf CLK_TCK)

cat >"$tmp/envoy.yaml" <<'YAML'
domain: bench
descriptors:
  - key: k
    rate_limit: {unit: minute, requests_per_unit: 100}
YAML

# native ROUND LABEL BUILD ROW RL-BENCH-ARGS...: one rl-bench run against
# the build's rl-server on a Redis of its own with the build's module.
native() {
  local round=$1 label=$2 build=$3 row=$4 rpid spid sp c0 c1 n out rc=0
  shift 4
  rl_start_redis "$tmp" "$tmp/redis.log" --loadmodule "$(module_of "$build")"
  rpid=$rl_pid
  pids+=("$rpid")
  rl_start_ours "$tmp/server.log" "$tmp/server.ports" "$(server_of "$build")" \
    --listen 127.0.0.1:0 --redis "127.0.0.1:$rl_redis_port" --log-level warn
  spid=$rl_pid
  pids+=("$spid")
  sp=$(rl_port_of "$tmp/server.ports" listen)
  c0=$(cpu "$spid")
  "$bench" --server "127.0.0.1:$sp" --audit --no-progress \
    --json "$tmp/run.json" --warmup 1 --duration "$secs" --keys 100000 \
    --dist uniform --limit 100 --window 60 "$@" >"$tmp/run.txt" 2>&1 || rc=$?
  c1=$(cpu "$spid")
  kill "$spid" "$rpid"
  wait "$spid" "$rpid" 2>/dev/null || true
  [ "$rc" = 0 ] || { cat "$tmp/run.txt" >&2; echo "rl-bench failed ($rc)" >&2; exit 1; }
  n=$(sed -n 's/^  "sent_total": \([0-9]*\).*/\1/p' "$tmp/run.json")
  out=$(python3 - "$tmp/run.json" "$c0" "$c1" "$hz" "${n:-0}" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
c = (int(sys.argv[3]) - int(sys.argv[2])) / int(sys.argv[4])
n = int(sys.argv[5]) or j.get("decisions", 1)
over = j.get("audit_over_limit", 0)
if over:
    sys.exit("audit: %d windows over the limit" % over)
print("decisions/s=%.0f p50_us=%d p99_us=%d cpu_us=%.2f" % (
    j["decisions_per_sec"], j["p50_us"], j["p99_us"], 1e6 * c / n))
PY
)
  echo "$round $row $label $out" | tee -a "$tmp/runs"
}

# envoy ROUND LABEL BUILD: grpc_load against the build's rl-server.
envoy() {
  local round=$1 label=$2 build=$3 spid gp out
  rl_start_ours "$tmp/server.log" "$tmp/server.ports" "$(server_of "$build")" \
    --grpc 127.0.0.1:0 --envoy-config "$tmp/envoy.yaml" --log-level warn
  spid=$rl_pid
  pids+=("$spid")
  gp=$(rl_port_of "$tmp/server.ports" grpc)
  out=$("$grpc_load" "$gp" 4 64 "$secs" 100000 1)
  kill "$spid"
  wait "$spid" 2>/dev/null || true
  echo "$round envoy $label $out cpu_us=-" | tee -a "$tmp/runs"
}

for round in $(seq 1 "$rounds"); do
  for pair in "base $base" "new $new"; do
    set -- $pair
    native "$round" "$1" "$2" closed --connections 4 --inflight 256
    native "$round" "$1" "$2" open50k --connections 4 --rate 50000
    envoy "$round" "$1" "$2"
  done
done
echo "== medians of $rounds rounds of ${secs} s (decisions/s, p50/p99 us, rl-server CPU us/decision; ratio new/base of decisions/s)"
python3 - "$tmp/runs" <<'PY'
import statistics, sys
rows = {}
for ln in open(sys.argv[1]):
    f = ln.split()
    kv = dict(x.split("=", 1) for x in f if "=" in x)
    cpu = kv.get("cpu_us", "-")
    rows.setdefault((f[1], f[2]), []).append(
        (float(kv["decisions/s"]), int(kv["p50_us"]), int(kv["p99_us"]),
         float(cpu) if cpu != "-" else float("nan")))
for row in ("closed", "open50k", "envoy"):
    for label in ("base", "new"):
        v = rows.get((row, label))
        if not v:
            continue
        med = [statistics.median(x[i] for x in v) for i in range(4)]
        b = statistics.median(x[0] for x in rows[(row, "base")])
        bc = statistics.median(x[3] for x in rows[(row, "base")])
        print("%-8s %-5s %10.0f  %6.0f / %6.0f  cpu %5.2f  %.3fx  cpu %.3fx  runs=%s" % (
            row, label, med[0], med[1], med[2], med[3], med[0] / b,
            med[3] / bc if bc == bc and bc else float("nan"),
            ",".join("%.0f" % x[0] for x in v)))
PY
