#!/usr/bin/env bash
# Heap allocations per decision in rl-server under rl-bench (the goal: "no
# allocation per request on the hot path", DESIGN.md, "Batching and
# coalescing"):
#
#   tests/bench/allocs.sh [SECONDS]
#
# rl-server (Release build) runs with tests/bench/malloc_count.c preloaded,
# which counts every malloc, calloc, realloc and aligned allocation in the
# process, hiredis and libuv included, and reports the totals on SIGUSR2.
# For each store (memory, and Redis on a private redis-server) and each key
# pattern (uniform over 100k keys, one hot key) the server is warmed up
# first (so connection buffers, batch slots and the keys of the current
# window exist), then the counts are read before and after SECONDS
# (default 5) of closed-loop load, and divided by the decisions made in
# between, and by the store batches (from --metrics). A brand-new key costs
# the memory store one allocation (its counter entry) once per window: per
# key and window, not per request; the warmup puts the steady state in
# front of the counter. The Redis store allocates per batch, inside
# hiredis (callback node, output buffer, reply), never per request.
# Exit status 1 if a run allocates more than 8 times per batch or more
# than 0.05 times per decision: then something scales with requests.
set -euo pipefail
cd "$(dirname "$0")/../.."
secs=${1:-5}
out=$(mktemp -d /tmp/rl-allocs.XXXXXX)
. tests/bench/lib.sh
cc -std=c11 -O2 -shared -fPIC -Wall -Wextra -o "$out/malloc_count.so" \
  tests/bench/malloc_count.c

start_redis "$out"

# Batches the server has submitted, from its /metrics.
batches() {
  local body
  exec 3<>"/dev/tcp/127.0.0.1/$1"
  printf 'GET /metrics HTTP/1.0\r\nHost: x\r\n\r\n' >&3
  body=$(cat <&3)
  exec 3<&-
  sed -n 's/^rl_batch_size_count \([0-9]*\).*/\1/p' <<<"$body"
}

# Reads the counter: signal, then wait for the line to appear.
snapshot() {
  local pid=$1 file=$2 n
  n=$(wc -l <"$file")
  kill -USR2 "$pid"
  for _ in $(seq 1 200); do
    [ "$(wc -l <"$file")" -gt "$n" ] && break
    sleep 0.01
  done
  tail -1 "$file" | sed 's/allocs=\([0-9]*\).*/\1/'
}

bad=0
for store in memory redis; do
  count="$out/count-$store.txt"
  : >"$count"
  store_args=()
  [ "$store" = redis ] && store_args=(--redis "127.0.0.1:$rport")
  rl_start_ours "$out/server-$store.log" "$out/server-$store.ports" \
    env LD_PRELOAD="$out/malloc_count.so" RL_MALLOC_COUNT_FILE="$count" \
    "$build/server/rl-server" --listen 127.0.0.1:0 --log-level warn \
    --metrics 127.0.0.1:0 "${store_args[@]}"
  spid=$rl_pid
  pids+=("$spid")
  sport=$(rl_port_of "$out/server-$store.ports" listen)
  mport=$(rl_port_of "$out/server-$store.ports" metrics)
  sleep 0.3
  for dist in uniform hot; do
    bench=("$build/tools/bench/rl-bench" --server "127.0.0.1:$sport"
      --connections 4 --inflight 256 --keys 100000 --dist "$dist"
      --limit 100 --window 60 --no-progress)
    "${bench[@]}" --requests 300000 --duration 60 >/dev/null
    a=$(snapshot "$spid" "$count")
    ba=$(batches "$mport")
    "${bench[@]}" --duration "$secs" --json "$out/$store-$dist.json" \
      >/dev/null
    b=$(snapshot "$spid" "$count")
    bb=$(batches "$mport")
    d=$(sed -n 's/^  "decisions": \([0-9]*\),/\1/p' "$out/$store-$dist.json")
    printf '%-7s %-8s %9d decisions in %7d batches: %7d allocations, %s per decision, %s per batch\n' \
      "$store" "$dist" "$d" $((bb - ba)) $((b - a)) \
      "$(awk -v n=$((b - a)) -v d="$d" 'BEGIN { printf "%.5f", n / d }')" \
      "$(awk -v n=$((b - a)) -v d=$((bb - ba)) 'BEGIN { printf "%.2f", n / d }')"
    awk -v n=$((b - a)) -v d="$d" -v k=$((bb - ba)) \
      'BEGIN { exit !(n > 0.05 * d || n > 8 * k) }' && bad=1
  done
  kill -TERM "$spid"
  wait "$spid" || true
done
echo "(each run includes rl-bench's 4 connections being accepted: a few"
echo " allocations per connection, not per decision)"
exit "$bad"
