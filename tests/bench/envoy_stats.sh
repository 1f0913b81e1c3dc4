#!/usr/bin/env bash
# What envoy-ratelimit's per-descriptor statistics cost: grpc_load on two
# servers of the same build, memory store, one with --envoy-stats 0 and one
# with the statistics and --statsd (to a UDP port of this script's nc, or
# a closed loopback port), taking turns, ROUNDS times each.
#   tests/bench/envoy_stats.sh [BUILD_DIR] [SECONDS] [ROUNDS]
# Prints one grpc_load line per run, and the server's CPU time (user +
# system, from /proc) per descriptor decision, which the machine's other
# load disturbs less than the rate. Figures, not a test.
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build}
secs=${2:-5}
rounds=${3:-3}
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

start() { # name args...
  local name=$1; shift
  rl_start_ours "$tmp/$name.log" "$tmp/$name.ports" \
    "$build/server/rl-server" --listen 127.0.0.1:0 --grpc 127.0.0.1:0 \
    --envoy-config "$tmp/bench.yaml" --log-level warn "$@"
  pids+=("$rl_pid")
}
rl_port_reserve sport
cpu() { awk '{print $14 + $15}' "/proc/$1/stat"; } # clock ticks
start off --envoy-stats 0
off=$(rl_port_of "$tmp/off.ports" grpc); offpid=$rl_pid
start on --statsd 127.0.0.1:$sport --statsd-flush-ms 1000
on=$(rl_port_of "$tmp/on.ports" grpc); onpid=$rl_pid
hz=$(getconf CLK_TCK)
for r in $(seq "$rounds"); do
  for which in off on; do
    port=$off pid=$offpid
    [ $which = on ] && port=$on pid=$onpid
    c0=$(cpu "$pid")
    line=$("$build/tests/bench/grpc_load" "$port" 4 64 "$secs" 100000 4)
    c1=$(cpu "$pid")
    d=$(sed -n 's/.*decisions\/s=\([0-9]*\).*/\1/p' <<<"$line")
    echo "stats $which: $line server_cpu_ns_per_decision=$(( (c1 - c0) * 1000000000 / hz / (d * secs) ))"
  done
done
