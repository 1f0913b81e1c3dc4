#!/usr/bin/env bash
# Where rl-server's time goes per decision, counted in instructions, which
# callgrind counts the same way on every run (wall-clock profiles on a
# shared 2-core VM do not repeat):
#
#   tests/bench/callgrind.sh [memory|redis] [uniform|hot] [REQUESTS]
#
# Starts rl-server under valgrind --tool=callgrind with instrumentation off
# (and a private redis-server for the Redis store), warms it up with
# rl-bench, switches it on for REQUESTS decisions (default 100000;
# 4 connections x 64 in flight), dumps, and prints instructions per
# decision with the functions that account for them (inclusive and self).
# The raw profile stays in the output directory for callgrind_annotate.
# RL_SERVER_EXTRA: more rl-server flags, split at spaces (trace_cost.sh's
# --trace-otlp ...).
# Everything started here is stopped by its pid.
set -euo pipefail
cd "$(dirname "$0")/../.."
store=${1:-redis}
dist=${2:-uniform}
n=${3:-100000}
out=$(mktemp -d /tmp/rl-callgrind.XXXXXX)

for tool in valgrind callgrind_control callgrind_annotate; do
  command -v "$tool" >/dev/null ||
    { echo "$tool not found: apt-get install valgrind" >&2; exit 1; }
done
. tests/bench/lib.sh

store_args=()
if [ "$store" = redis ]; then
  start_redis "$out"
  store_args=(--redis "127.0.0.1:$rport")
fi
rl_start_ours "$out/server.log" "$out/server.ports" \
  valgrind --tool=callgrind --instr-atstart=no \
  --callgrind-out-file="$out/callgrind.out" \
  "$build/server/rl-server" --listen 127.0.0.1:0 --log-level warn \
  "${store_args[@]}" ${RL_SERVER_EXTRA:-}
vg=$rl_pid
pids+=("$vg")
sport=$(rl_port_of "$out/server.ports" listen)
sleep 1

bench=("$build/tools/bench/rl-bench" --server "127.0.0.1:$sport"
  --connections 4 --inflight 64 --timeout-ms 60000 --give-up 30
  --keys 100000 --dist "$dist" --limit 100 --window 60 --no-progress
  --duration 3600)
"${bench[@]}" --requests 20000 >/dev/null
callgrind_control -i on "$vg" >/dev/null
"${bench[@]}" --requests "$n" --json "$out/bench.json" >"$out/bench.txt"
callgrind_control -d "$vg" >/dev/null
callgrind_control -i off "$vg" >/dev/null
sleep 0.5

prof=$out/callgrind.out.1 # the dump; callgrind.out is written at exit
decisions=$(sed -n 's/^  "decisions": \([0-9]*\),/\1/p' "$out/bench.json")
total=$(callgrind_annotate "$prof" 2>/dev/null |
  sed -n 's/^ *\([0-9,]*\) .*PROGRAM TOTALS.*/\1/p' | tr -d ,)
echo "store $store, keys $dist: $decisions decisions, $total instructions," \
  "$(awk -v t="$total" -v d="$decisions" 'BEGIN { printf "%.0f", t / d }') per decision"
echo
echo "inclusive (instructions per decision, function):"
callgrind_annotate --inclusive=yes "$prof" 2>/dev/null |
  awk -v d="$decisions" '/^ *[0-9,]+ .*[:]/ { v = $1; gsub(",", "", v);
    $1 = ""; printf "%8.0f %s\n", v / d, $0 }' | head -25
echo
echo "self:"
callgrind_annotate "$prof" 2>/dev/null |
  awk -v d="$decisions" '/^ *[0-9,]+ .*[:]/ { v = $1; gsub(",", "", v);
    $1 = ""; printf "%8.0f %s\n", v / d, $0 }' | head -25
echo
echo "profile: $prof"
