#!/usr/bin/env bash
# Where rl-server's CPU goes per decision, kernel included:
#
#   tests/bench/profile.sh [SECONDS] [--perf]
#
# Starts a private redis-server and rl-server (Release build), then for
# three loads (closed loop uniform over 100k keys, closed loop on one hot
# key, open loop at 50,000/s) reports per decision: rl-server's user and
# system CPU (from /proc/PID/stat), its system calls by kind (perf
# tracepoints: reads, writes, epoll_wait, epoll_ctl), its context
# switches, and Redis's CPU. With --perf it also samples rl-server with
# perf (cpu-clock: this VM has no hardware counters) and prints the top
# symbols, user and kernel. callgrind.sh gives the repeatable user-space
# instruction counts; this gives the wall-clock picture, which on a shared
# machine varies from run to run.
set -euo pipefail
cd "$(dirname "$0")/../.."
secs=${1:-5}
want_perf=0
[ "${2:-}" = --perf ] && want_perf=1
out=$(mktemp -d /tmp/rl-profile.XXXXXX)
. tests/bench/lib.sh

start_redis "$out"
start_server "$out" --redis "127.0.0.1:$rport"
sleep 0.5

field() { awk -v n="$2" '{ print $n }' "/proc/$1/stat"; }
ctx() { awk '/ctxt_switches/ { s += $2 } END { print s }' "/proc/$1/status"; }

load() {
  local name=$1 u0 s0 r0 c0 d
  shift
  "$build/tools/bench/rl-bench" --server "127.0.0.1:$sport" --no-progress \
    --warmup 1 --duration 1 --keys 100000 "$@" >/dev/null
  u0=$(field "$spid" 14)
  s0=$(field "$spid" 15)
  r0=$(($(field "$rpid" 14) + $(field "$rpid" 15)))
  c0=$(ctx "$spid")
  perf stat -x, -p "$spid" -o "$out/$name.stat" \
    -e syscalls:sys_enter_read,syscalls:sys_enter_write \
    -e syscalls:sys_enter_writev,syscalls:sys_enter_epoll_wait \
    -e syscalls:sys_enter_epoll_pwait,syscalls:sys_enter_epoll_ctl \
    -- sleep $((secs + 1)) &
  local ps=$! pr=""
  if [ "$want_perf" = 1 ]; then
    perf record -q -F 1999 -g -p "$spid" -o "$out/$name.perf" \
      -- sleep "$secs" 2>/dev/null &
    pr=$!
  fi
  "$build/tools/bench/rl-bench" --server "127.0.0.1:$sport" --no-progress \
    --duration "$secs" --keys 100000 --json "$out/$name.json" "$@" \
    >/dev/null
  d=$(jf "$out/$name.json" decisions)
  awk -v tck="$tck" -v d="$d" -v u=$(($(field "$spid" 14) - u0)) \
    -v s=$(($(field "$spid" 15) - s0)) \
    -v r=$(($(field "$rpid" 14) + $(field "$rpid" 15) - r0)) \
    -v c=$(($(ctx "$spid") - c0)) -v name="$name" \
    -v rate="$(jf "$out/$name.json" decisions_per_sec)" \
    -v p50="$(jf "$out/$name.json" p50_us)" \
    -v p99="$(jf "$out/$name.json" p99_us)" \
    'BEGIN { printf "%-12s %9.0f/s p50 %7.0f us p99 %7.0f us | server user %5.2f sys %5.2f us/decision, %5.3f ctx switches | redis %5.2f us/decision\n",
      name, rate, p50, p99, u / tck / d * 1e6, s / tck / d * 1e6, c / d, r / tck / d * 1e6 }'
  wait "$ps" || true
  [ -z "$pr" ] || wait "$pr" || true
  awk -F, -v d="$d" '$1 ~ /^[0-9]+$/ && $1 > 0 { sub("syscalls:sys_enter_", "", $3);
    printf "    %-12s %7.3f per decision\n", $3, $1 / d }' "$out/$name.stat"
  if [ "$want_perf" = 1 ]; then
    perf report -i "$out/$name.perf" --no-children --sort dso,sym --stdio \
      -g none 2>/dev/null | grep -E '^ +[0-9]' | head -15 |
      sed 's/^/    /' || true
  fi
}

load closed_uniform --connections 4 --inflight 256 --dist uniform
load closed_hot --connections 4 --inflight 256 --dist hot
load open_50k --connections 1 --rate 50000 --dist uniform
echo "raw data in $out"
