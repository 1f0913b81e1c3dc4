#!/usr/bin/env bash
# What TLS to Redis costs, in one run against ONE Redis that serves both
# a plaintext and a TLS port:
#
#   tests/bench/redis_tls.sh [ROUNDS] [SECONDS] [MODULE]
#
# Two rl-servers of this build, one with --redis 127.0.0.1:PORT and one
# with --redis rediss://127.0.0.1:TLSPORT (certificate checked; made by
# openssl at start). Per round, each in turn (the order alternates):
# rl-bench closed loop (4 connections x 256 in flight), 100k uniform keys,
# SECONDS s; decisions per second, and CPU per decision (utime + stime, s
# per million decisions) of Redis and of the rl-server in use, and the
# decisions per Redis call (the batch: a closed loop's batches grow with
# the round trip). Each server has its own --prefix, so neither touches
# the other's counters. Then the medians and TLS's ratio to plaintext
# (target: decisions/s >= 0.85x). Last, redis_floor on each port.
# MODULE=module loads this build's ratelimit module into the Redis (the
# default is the Lua script). INFLIGHT=N in the environment: N in flight
# per connection instead of 256 (small batches: TLS's cost per call shows
# more). Defaults: 3 rounds of 5 s. Loopback only;
# what it starts it stops by pid.
set -euo pipefail
cd "$(dirname "$0")/../.."
rounds=${1:-3}
secs=${2:-5}
mode=${3:-script}
out=$(mktemp -d /tmp/redis_tls.XXXXXX)
. tests/bench/lib.sh

# A CA and a certificate for 127.0.0.1.
bench_certs "$out"

rl_port_reserve tport
margs=()
if [ "$mode" = module ]; then
  cmake --build "$build" -j 2 --target rl_redis_module >/dev/null
  margs=(--loadmodule "$build/server/redis_module/ratelimit.so")
fi
start_redis "$out" --tls-port "$tport" --tls-cert-file "$out/server.crt" \
  --tls-key-file "$out/server.key" --tls-ca-cert-file "$out/ca.crt" \
  --tls-auth-clients no "${margs[@]}"
wait_port "$tport" || {
  echo "redis-server did not open its TLS port" >&2
  exit 1
}

declare -A sp spids
mkdir -p "$out/plain" "$out/tls"
start_server "$out/plain" --redis "127.0.0.1:$rport" --prefix rlp:
sp[plain]=$sport
spids[plain]=$spid
start_server "$out/tls" --redis "rediss://127.0.0.1:$tport" \
  --redis-tls-ca "$out/ca.crt" --prefix rlt:
sp[tls]=$sport
spids[tls]=$spid

# calls: batches Redis ran so far (script or module).
calls() {
  redis-cli -p "$rport" info commandstats |
    sed -n 's/^cmdstat_\(evalsha\|eval\|rl\.batch\):calls=\([0-9]*\),.*/\2/p' |
    awk '{ s += $1 } END { print s + 0 }'
}
bench() {
  "$build/tools/bench/rl-bench" --server "127.0.0.1:$1" --no-progress \
    --connections 4 --inflight "${INFLIGHT:-256}" --duration "$2" --keys 100000 \
    --limit 1000000000 --dist uniform --json "$out/rl.json" >/dev/null
}

# Warm-up: every key exists before anything is measured; both servers
# must decide from Redis (no error: TLS up).
for m in plain tls; do
  bench "${sp[$m]}" 2
  e=$(jf "$out/rl.json" errors)
  [ "$e" = 0 ] || {
    echo "$m: $e errors in the warm-up; see $out/$m/server.log" >&2
    exit 1
  }
done
for r in $(seq 1 "$rounds"); do
  order="plain tls"
  [ $((r % 2)) = 0 ] && order="tls plain"
  line="round $r:"
  for m in $order; do
    c0=$(cpu "$rpid") s0=$(cpu "${spids[$m]}") k0=$(calls)
    bench "${sp[$m]}" "$secs"
    c1=$(cpu "$rpid") s1=$(cpu "${spids[$m]}") k1=$(calls)
    d=$(jf "$out/rl.json" decisions)
    rate=$(jf "$out/rl.json" decisions_per_sec)
    e=$(jf "$out/rl.json" errors)
    awk -v c="$((c1 - c0))" -v s="$((s1 - s0))" -v t="$tck" -v d="$d" \
      -v r="$rate" -v e="$e" -v k="$((k1 - k0))" \
      'BEGIN { printf "%.1f %.3f %.3f %.1f %d\n", r, c / t * 1e6 / d,
               s / t * 1e6 / d, d / k, e }' >>"$out/$m.txt"
    read -r v rc sc b e < <(tail -1 "$out/$m.txt")
    line="$line $m $v/s (redis $rc, rl-server $sc s/M, batch $b, errors $e),"
  done
  echo "${line%,}"
done
col() { cut -d' ' -f"$2" "$out/$1.txt" | median; }
echo "median of $rounds rounds of ${secs} s, 4 x ${INFLIGHT:-256} in flight," \
  "batches by the $mode," \
  "$(nproc) CPUs ($(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)):"
printf '  %-6s %12s %14s %16s %8s\n' "" "decisions/s" "redis s/M" \
  "rl-server s/M" "batch"
for m in plain tls; do
  printf '  %-6s %12.0f %14.3f %16.3f %8.1f\n' "$m" "$(col "$m" 1)" \
    "$(col "$m" 2)" "$(col "$m" 3)" "$(col "$m" 4)"
done
awk -v p="$(col plain 1)" -v t="$(col tls 1)" \
  -v pr="$(col plain 2)" -v tr="$(col tls 2)" \
  -v ps="$(col plain 3)" -v ts="$(col tls 3)" 'BEGIN {
  printf "  tls / plain: decisions/s %.2fx (target >= 0.85x), redis CPU %.2fx, rl-server CPU %.2fx\n",
    t / p, tr / pr, ts / ps }'
# The floor on each port (redis_floor script: the least script that keeps
# every key's TTL, 512 keys a call), through the same transport: what TLS
# costs Redis itself per op.
cmake --build "$build" -j 2 --target redis_floor >/dev/null
# A first pass creates the keys (and sets their TTLs): both measured
# passes then find them, whatever their order.
"$build/tests/bench/redis_floor" "$rport" script 1000000 512 >/dev/null
echo "floor (redis_floor script, 512 ops a call, 8 calls in flight):"
for m in plain tls; do
  if [ "$m" = tls ]; then
    f=$("$build/tests/bench/redis_floor" --tls-ca "$out/ca.crt" "$tport" \
      script 1000000 512)
  else
    f=$("$build/tests/bench/redis_floor" "$rport" script 1000000 512)
  fi
  printf '  %-6s %s\n' "$m" "$f"
done
rm -rf "$out"
