#!/usr/bin/env bash
# Redis CPU per decision with this build's ratelimit module against
# another build of it (the commit before a change, say), in one run:
#
#   tests/bench/module_cpu.sh OTHER_SO [ROUNDS] [SECONDS] [REPLICAS]
#
# Two redis-servers, one loading OTHER_SO and one this build's module,
# each behind an rl-server of this build; with REPLICAS=1 (default 0) each
# has a replica too (loading the same module: an older one may need it),
# so that every write is also propagated. A third pair sends the Lua
# script (--redis-module off), for scale, to a Redis of its own (on a
# shared one, the script's INCRBY and the module's in-place writes would
# turn each other's counters back and forth between a number and digits). Per round, for each in turn (the order rotated every round):
# rl-bench closed loop (4 x 256), 100k uniform keys, SECONDS s; Redis CPU
# (utime + stime of the master) per decision and the batch size. Then the
# medians and their ratios.
# Defaults: 5 rounds of 5 s. Loopback only; what it starts it stops by pid.
set -euo pipefail
cd "$(dirname "$0")/../.."
[ $# -ge 1 ] || {
  echo "usage: $0 OTHER_SO [ROUNDS] [SECONDS] [REPLICAS]" >&2
  exit 2
}
other=$(realpath "$1")
rounds=${2:-5}
secs=${3:-5}
replicas=${4:-0}
out=$(mktemp -d /tmp/module_cpu.XXXXXX)
. tests/bench/lib.sh
cmake --build "$build" -j 2 --target rl_redis_module >/dev/null
this=$build/server/redis_module/ratelimit.so

declare -A rp rpid sp
for m in other this script; do
  so=$other
  [ "$m" = other ] || so=$this
  mkdir -p "$out/$m"
  start_redis "$out/$m" --loadmodule "$so"
  rp[$m]=$rport
  rpid[$m]=$rpid
  if [ "$replicas" = 1 ]; then
    mkdir -p "$out/$m/replica"
    start_redis "$out/$m/replica" --loadmodule "$so" \
      --replicaof 127.0.0.1 "${rp[$m]}"
  fi
  args=()
  [ "$m" = script ] && args=(--redis-module off)
  start_server "$out/$m" --redis "127.0.0.1:${rp[$m]}" "${args[@]}"
  sp[$m]=$sport
done

tck=$(getconf CLK_TCK)
cpu() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }
calls() {
  redis-cli -p "$1" info commandstats |
    sed -n "s/^cmdstat_$2:calls=\\([0-9]*\\),.*/\\1/p" | grep . || echo 0
}
jf() { sed -n "s/^  \"$2\": \\([^,]*\\),\\{0,1\\}\$/\\1/p" "$1" | head -1; }
median() { sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
bench() {
  "$build/client/bench/rl-bench" --server "127.0.0.1:$1" --no-progress \
    --connections 4 --inflight 256 --duration "$2" --keys 100000 \
    --limit 1000000000 --dist uniform --json "$out/rl.json" >/dev/null
}

# Warm-up: every key exists (with its TTL) before anything is measured.
for m in other this script; do bench "${sp[$m]}" 2; done
for r in $(seq 1 "$rounds"); do
  case $((r % 3)) in
  1) order="other this script" ;;
  2) order="this script other" ;;
  *) order="script other this" ;;
  esac
  line="round $r:"
  for m in $order; do
    cmd=rl.batch
    [ "$m" = script ] && cmd=evalsha
    c0=$(cpu "${rpid[$m]}") e0=$(calls "${rp[$m]}" $cmd)
    bench "${sp[$m]}" "$secs"
    c1=$(cpu "${rpid[$m]}") e1=$(calls "${rp[$m]}" $cmd)
    d=$(jf "$out/rl.json" sent_total)
    awk -v c="$((c1 - c0))" -v t="$tck" -v d="$d" -v e="$((e1 - e0))" \
      'BEGIN { printf "%.3f %.1f %d\n", c / t * 1e6 / d, d / e, d }' \
      >>"$out/$m.txt"
    line="$line $m $(tail -1 "$out/$m.txt" | cut -d' ' -f1) s/M (batch $(tail -1 "$out/$m.txt" | cut -d' ' -f2)),"
  done
  echo "${line%,}"
done
o=$(cut -d' ' -f1 "$out/other.txt" | median)
t=$(cut -d' ' -f1 "$out/this.txt" | median)
sc=$(cut -d' ' -f1 "$out/script.txt" | median)
echo "Redis CPU per decision (s per million), median of $rounds rounds," \
  "replicas=$replicas:"
printf '  other module (%s)  %6.3f\n' "$1" "$o"
printf '  this build'"'"'s module   %6.3f\n' "$t"
printf '  Lua script             %6.3f\n' "$sc"
awk -v o="$o" -v t="$t" -v s="$sc" 'BEGIN {
  printf "  this / other   %.2fx\n", t / o
  printf "  script / this  %.2fx\n", s / t }'
rm -rf "$out"
