#!/usr/bin/env bash
# Redis CPU per decision, read against what Redis itself needs per counter
# update, on one private Redis in one run (BENCHMARKS.md, "Redis CPU per
# decision against its floor"):
#
#   tests/bench/redis_floor.sh [ROUNDS] [SECONDS]
#
# Per round, on the same redis-server (with the ratelimit module loaded),
# 100k uniform keys:
#   rl       rl-bench closed loop (4 x 256) through rl-server
#            --redis-module off: the Lua script; Redis CPU per decision,
#            batch size
#   module   the same through an rl-server that uses the module (RL.BATCH)
#   script   redis_floor script: one EVALSHA per 512 ops doing one INCRBY
#            per key (PEXPIREAT when created), nothing else: the least a
#            script that keeps every key's TTL costs per op
#   incr     redis_floor incr: pipelined INCR, no TTL, no decision
# and then the medians and the ratios to pipelined INCR.
# Defaults: 3 rounds of 5 s. Loopback only; what it starts it stops by pid.
set -euo pipefail
cd "$(dirname "$0")/../.."
rounds=${1:-3}
secs=${2:-5}
out=$(mktemp -d /tmp/redis_floor.XXXXXX)
. tests/bench/lib.sh
cmake --build "$build" -j 2 --target redis_floor rl_redis_module >/dev/null

start_redis "$out" --loadmodule "$build/server/redis_module/ratelimit.so"
start_server "$out" --redis "127.0.0.1:$rport" --redis-module off
sport_script=$sport
start_server "$out" --redis "127.0.0.1:$rport"
sport_module=$sport

calls() {
  redis-cli -p "$rport" info commandstats |
    sed -n "s/^cmdstat_$1:calls=\\([0-9]*\\),.*/\\1/p" | grep . || echo 0
}
bench() {
  "$build/tools/bench/rl-bench" --server "127.0.0.1:$1" --no-progress \
    --connections 4 --inflight 256 --duration "$2" --keys 100000 \
    --limit 1000000000 --dist uniform --json "$out/rl.json" >/dev/null
}

# Warm-up: every key exists (with its TTL) before anything is measured.
bench "$sport_script" 2
bench "$sport_module" 1
"$build/tests/bench/redis_floor" "$rport" script 200000 512 >/dev/null

for r in $(seq 1 "$rounds"); do
  for m in rl module; do
    port=$sport_script cmd=evalsha
    [ "$m" = module ] && port=$sport_module cmd=rl.batch
    c0=$(cpu "$rpid") e0=$(calls "$cmd")
    bench "$port" "$secs"
    c1=$(cpu "$rpid") e1=$(calls "$cmd")
    # Decisions sent, warmup included: the CPU read covers all of them.
    d=$(jf "$out/rl.json" sent_total)
    awk -v c="$((c1 - c0))" -v t="$tck" -v d="$d" -v e="$((e1 - e0))" \
      'BEGIN { printf "%.3f %.1f %d\n", c / t * 1e6 / d, d / e, d }' \
      >>"$out/$m.txt"
  done
  ops=$(awk -v d="$d" 'BEGIN { n = int(d / 2 / 4096) * 4096; print n < 409600 ? 409600 : n }')
  for m in script incr; do
    "$build/tests/bench/redis_floor" "$rport" "$m" "$ops" 512 |
      tee -a "$out/raw.txt" |
      sed -n 's/.*redis_s_per_M=\([0-9.]*\).*/\1/p' >>"$out/$m.txt"
  done
  echo "round $r: rl $(tail -1 "$out/rl.txt" | cut -d' ' -f1) s/M" \
    "(batch $(tail -1 "$out/rl.txt" | cut -d' ' -f2))," \
    "module $(tail -1 "$out/module.txt" | cut -d' ' -f1) s/M" \
    "(batch $(tail -1 "$out/module.txt" | cut -d' ' -f2))," \
    "script $(tail -1 "$out/script.txt") s/M, incr $(tail -1 "$out/incr.txt") s/M"
done
rl=$(cut -d' ' -f1 "$out/rl.txt" | median)
mo=$(cut -d' ' -f1 "$out/module.txt" | median)
sc=$(median <"$out/script.txt")
in=$(median <"$out/incr.txt")
echo "Redis CPU per decision (s per million), median of $rounds rounds," \
  "100k uniform keys, one redis-server:"
printf '  rl-server, Lua script            %6.3f\n' "$rl"
printf '  rl-server, module (RL.BATCH)     %6.3f\n' "$mo"
printf '  least script (1 INCRBY per key)  %6.3f\n' "$sc"
printf '  pipelined INCR                   %6.3f\n' "$in"
awk -v a="$rl" -v m="$mo" -v b="$sc" -v c="$in" 'BEGIN {
  printf "  rl-server script / INCR   %.2fx\n", a / c
  printf "  rl-server module / INCR   %.2fx\n", m / c
  printf "  rl-server script / least  %.2fx\n", a / b
  printf "  least script / INCR       %.2fx\n", b / c }'
rm -rf "$out"
