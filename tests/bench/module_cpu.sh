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
# turn each other's counters back and forth between a number and digits).
# Per round, for each in turn (the order rotated every round): rl-bench
# closed loop (4 x 256), 100k uniform keys, SECONDS s; Redis CPU (utime +
# stime of the master) per decision and the batch size, and with a
# replica its CPU per decision too (what it spends applying the master's
# stream: it must keep up). Then the medians and their ratios.
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

declare -A rp rpid sp qpid qp
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
    qpid[$m]=$rpid
    qp[$m]=$rport
  fi
  args=()
  [ "$m" = script ] && args=(--redis-module off)
  start_server "$out/$m" --redis "127.0.0.1:${rp[$m]}" "${args[@]}"
  sp[$m]=$sport
done

calls() {
  redis-cli -p "$1" info commandstats |
    sed -n "s/^cmdstat_$2:calls=\\([0-9]*\\),.*/\\1/p" | grep . || echo 0
}
# offset PORT KEY: a number of INFO replication.
offset() {
  redis-cli -p "$1" info replication | tr -d '\r' | sed -n "s/^$2://p"
}
# caught_up M: waits (10 s at most) until M's replica has applied all that
# its master had replicated when asked.
caught_up() {
  local want i
  want=$(offset "${rp[$1]}" master_repl_offset)
  for i in $(seq 1 1000); do
    [ "$(offset "${qp[$1]}" slave_repl_offset)" -ge "$want" ] && return 0
    sleep 0.01
  done
  echo "the replica of $1 is behind" >&2
}
bench() {
  "$build/tools/bench/rl-bench" --server "127.0.0.1:$1" --no-progress \
    --connections 4 --inflight 256 --duration "$2" --keys 100000 \
    --limit 1000000000 --dist uniform --json "$out/rl.json" >/dev/null
}

# Warm-up: every key exists (with its TTL) before anything is measured.
for m in other this script; do
  bench "${sp[$m]}" 2
  if [ "$replicas" = 1 ]; then caught_up "$m"; fi
done
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
    q0=0 q1=0
    c0=$(cpu "${rpid[$m]}") e0=$(calls "${rp[$m]}" $cmd)
    [ "$replicas" = 1 ] && q0=$(cpu "${qpid[$m]}")
    bench "${sp[$m]}" "$secs"
    c1=$(cpu "${rpid[$m]}") e1=$(calls "${rp[$m]}" $cmd)
    if [ "$replicas" = 1 ]; then
      caught_up "$m"
      q1=$(cpu "${qpid[$m]}")
    fi
    d=$(jf "$out/rl.json" sent_total)
    awk -v c="$((c1 - c0))" -v t="$tck" -v d="$d" -v e="$((e1 - e0))" \
      -v q="$((q1 - q0))" \
      'BEGIN { printf "%.3f %.1f %d %.3f\n", c / t * 1e6 / d, d / e, d,
               q / t * 1e6 / d }' >>"$out/$m.txt"
    read -r v b _ q < <(tail -1 "$out/$m.txt")
    line="$line $m $v s/M (batch $b)"
    [ "$replicas" = 1 ] && line="$line replica $q s/M"
    line="$line,"
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
if [ "$replicas" = 1 ]; then
  qo=$(cut -d' ' -f4 "$out/other.txt" | median)
  qt=$(cut -d' ' -f4 "$out/this.txt" | median)
  qs=$(cut -d' ' -f4 "$out/script.txt" | median)
  echo "The replica's CPU per decision (s per million), median:"
  printf '  other module           %6.3f\n' "$qo"
  printf '  this build'"'"'s module   %6.3f\n' "$qt"
  printf '  Lua script             %6.3f\n' "$qs"
  awk -v o="$qo" -v t="$qt" 'BEGIN { printf "  this / other   %.2fx\n", t / o }'
fi
rm -rf "$out"
