#!/usr/bin/env bash
# The proxy front ends next to the native protocol, same server, same run:
# rl-bench on --listen, grpc_load on --grpc (Envoy's rate limit service)
# and http_check_load on --http (GET /check), each alone for the same time,
# on the memory store and on a private redis-server.
#   tests/bench/run_grpc.sh [BUILD_DIR] [SECONDS]
# Prints one line per (store, protocol). Figures, not a test.
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build-rel}
secs=${2:-5}
tmp=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$tmp"; }
trap cleanup EXIT
. deploy/ports.sh

# rl-bench's default inline limit is 100 per 60 s; the same for Envoy.
cat >"$tmp/bench.yaml" <<'YAML'
domain: bench
descriptors:
  - key: k
    rate_limit: {unit: minute, requests_per_unit: 100}
YAML

run() { # store-name [--redis HOST:PORT]
  local name=$1; shift
  local lp gp hp spid
  rl_start_ours "$tmp/server.log" "$tmp/server.ports" \
    "$build/server/rl-server" --listen 127.0.0.1:0 --grpc 127.0.0.1:0 \
    --envoy-config "$tmp/bench.yaml" --http 127.0.0.1:0 \
    --rule bench=100/60s --log-level warn "$@"
  spid=$rl_pid
  pids+=("$spid")
  lp=$(rl_port_of "$tmp/server.ports" listen)
  gp=$(rl_port_of "$tmp/server.ports" grpc)
  hp=$(rl_port_of "$tmp/server.ports" http)
  echo "== $name store"
  "$build/tools/bench/rl-bench" --server 127.0.0.1:$lp --connections 4 \
    --inflight 64 --duration "$secs" --keys 100000 2>&1 | \
    grep -Ei 'decisions|p50|p99|latency' | sed 's/^/native: /'
  "$build/tests/bench/grpc_load" "$gp" 4 64 "$secs" 100000 1
  "$build/tests/bench/grpc_load" "$gp" 4 64 "$secs" 100000 4
  # One request outstanding per connection, as proxies send auth
  # subrequests, for HTTP and for the native protocol alike.
  "$build/tools/bench/rl-bench" --server 127.0.0.1:$lp --connections 16 \
    --inflight 1 --duration "$secs" --keys 100000 2>&1 | \
    grep -Ei 'decisions|p50|p99|latency' | sed 's/^/native 16x1: /'
  "$build/tests/bench/http_check_load" --addr 127.0.0.1:$hp --rule bench \
    --keys 100000 --connections 16 --duration "$secs" | sed 's/^/http 16x1: /'
  kill "$spid"; wait "$spid" || true
}

run memory
rl_start_redis "$tmp" "$tmp/redis.log"
pids+=("$rl_pid")
rp=$rl_redis_port
run redis --redis 127.0.0.1:$rp
