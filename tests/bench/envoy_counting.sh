#!/usr/bin/env bash
# Envoy's counting (issue 42): BENCHMARKS.md's Envoy rows ("gRPC, 1 and 4
# descriptors/call", run_grpc.sh's grpc_load 4 x 64 on 100,000 keys) for a
# build before the change and one after, in one run, rounds interleaved
# so that the shared machine's noise falls on both alike; the new build
# with every --envoy-counting (envoy, the default; native, the old rule;
# envoy-stop, two steps for calls of two descriptors or more).
#   tests/bench/envoy_counting.sh BASE_BUILD NEW_BUILD [SECONDS [ROUNDS]]
# Prints each run, then per row the median decisions/s, p50 and p99 (us)
# and the ratio to the base build. Figures, not a test.
set -euo pipefail
cd "$(dirname "$0")/../.."
base=$1
new=$2
secs=${3:-5}
rounds=${4:-3}
tmp=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$tmp"; }
trap cleanup EXIT
. deploy/ports.sh

cat >"$tmp/bench.yaml" <<'YAML'
domain: bench
descriptors:
  - key: k
    rate_limit: {unit: minute, requests_per_unit: 100}
YAML

one() { # round store build label desc [rl-server flags...]
  local round=$1 store=$2 build=$3 label=$4 desc=$5; shift 5
  local gp spid out
  rl_start_ours "$tmp/server.log" "$tmp/server.ports" \
    "$build/server/rl-server" --grpc 127.0.0.1:0 \
    --envoy-config "$tmp/bench.yaml" --log-level warn "$@"
  spid=$rl_pid
  pids+=("$spid")
  gp=$(rl_port_of "$tmp/server.ports" grpc)
  # grpc_load from the new build for every row: the same client.
  out=$("$new/tests/bench/grpc_load" "$gp" 4 64 "$secs" 100000 "$desc")
  kill "$spid"; wait "$spid" || true
  echo "$round $store $label $desc $out" | tee -a "$tmp/runs"
}

rl_start_redis "$tmp" "$tmp/redis.log"
pids+=("$rl_pid")
rp=$rl_redis_port
for round in $(seq 1 "$rounds"); do
  for store in memory redis; do
    sargs=()
    [ "$store" = redis ] && sargs=(--redis "127.0.0.1:$rp" --prefix "b$round:")
    for desc in 1 4; do
      one "$round" "$store" "$base" base "$desc" "${sargs[@]}"
      one "$round" "$store" "$new" envoy "$desc" "${sargs[@]}"
      one "$round" "$store" "$new" native "$desc" "${sargs[@]}" \
        --envoy-counting native
      one "$round" "$store" "$new" envoy-stop "$desc" "${sargs[@]}" \
        --envoy-counting envoy-stop
    done
  done
done
echo "== medians of $rounds rounds of ${secs} s (decisions/s, p50/p99 us, ratio to base)"
python3 - "$tmp/runs" <<'PY'
import re, statistics, sys
rows = {}
for ln in open(sys.argv[1]):
    f = ln.split()
    rnd, store, label, desc = f[0], f[1], f[2], f[3]
    kv = dict(x.split("=", 1) for x in f if "=" in x)
    rows.setdefault((store, desc, label), []).append(
        (float(kv["decisions/s"]), int(kv["p50_us"]), int(kv["p99_us"])))
for (store, desc, label), v in sorted(rows.items()):
    med = [statistics.median(x[i] for x in v) for i in range(3)]
    b = statistics.median(x[0] for x in rows[(store, desc, "base")])
    print("%-6s %s desc %-10s %10.0f  %6.0f / %6.0f  %.3fx  runs=%s" % (
        store, desc, label, med[0], med[1], med[2], med[0] / b,
        ",".join("%.0f" % x[0] for x in v)))
PY
