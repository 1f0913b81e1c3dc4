#!/usr/bin/env bash
# Reservations and leases against plain checks, on one Redis, in one run:
#
#   tests/bench/xop.sh [ROUNDS] [SECONDS] [CONNECTIONS] [INFLIGHT]
#
# One redis-server loading this build's ratelimit module, and two
# rl-servers on it: "script" (--redis-module off, prefix xs:) and
# "module" (prefix xm:; the prefixes keep the script's INCRBY and the
# module's in-place writes off each other's counters). Per round, for
# each server and each op in turn, rl-bench closed loop (CONNECTIONS x
# INFLIGHT, the same for all), 100k uniform keys, SECONDS s:
#
#   check    --rule tokens (a limit never reached)
#   reserve  --op reserve --rule tokens: each RESERVE settled at once,
#            with an actual drawn in [0, 2]
#   acquire  --op acquire --rule slots (concurrency 1000, lease 10 s):
#            each lease released at once, no crash
#
# A request slot waits for the settle or release before its next RESERVE
# or ACQUIRE, as a client would. Per run: decisions/s (the first request
# of each pair), follow-ups/s (settles, releases), and CPU per decision
# (its follow-up included) of Redis (utime + stime of redis-server) and of
# the rl-server, in us. Printed: the medians over ROUNDS. Defaults: 3
# rounds of 5 s, 4 x 64. Loopback only; what it starts it stops by pid.
set -euo pipefail
cd "$(dirname "$0")/../.."
rounds=${1:-3}
secs=${2:-5}
conns=${3:-4}
inflight=${4:-64}
out=$(mktemp -d /tmp/xop_bench.XXXXXX)
. tests/bench/lib.sh
cmake --build "$build" -j 2 --target rl_redis_module >/dev/null
so=$build/server/redis_module/ratelimit.so

cat >"$out/rules.yaml" <<'EOF'
rules:
  tokens:
    limits: [1000000000/30d]
  slots:
    concurrency: 1000
    lease: 10s
EOF

start_redis "$out" --loadmodule "$so"
declare -A sp spid
for m in script module; do
  mkdir -p "$out/$m"
  args=(--prefix xm:)
  [ "$m" = script ] && args=(--redis-module off --prefix xs:)
  start_server "$out/$m" --redis "127.0.0.1:$rport" --config \
    "$out/rules.yaml" "${args[@]}"
  sp[$m]=$sport
  spid[$m]=$spid
done

# bench M OP SECONDS: one rl-bench run of OP against server M.
bench() {
  local a=(--rule tokens)
  case $2 in
  reserve) a=(--op reserve --rule tokens) ;;
  acquire) a=(--op acquire --rule slots) ;;
  esac
  "$build/tools/bench/rl-bench" --server "127.0.0.1:${sp[$1]}" \
    --no-progress --connections "$conns" --inflight "$inflight" \
    --duration "$3" --keys 100000 --dist uniform "${a[@]}" \
    --json "$out/rl.json" >"$out/rl.txt"
}

# Warm-up until a short run has no errors (every key then exists, with
# its TTL, before measuring).
for m in script module; do
  for i in $(seq 1 50); do
    bench "$m" reserve 0.3
    [ "$(jf "$out/rl.json" server_errors)" = 0 ] && break
    sleep 0.1
  done
  for op in check reserve acquire; do bench "$m" "$op" 1; done
done

ops="check reserve acquire"
for r in $(seq 1 "$rounds"); do
  line="round $r:"
  for m in script module; do
    for op in $ops; do
      c0=$(cpu "$rpid") s0=$(cpu "${spid[$m]}")
      bench "$m" "$op" "$secs"
      c1=$(cpu "$rpid") s1=$(cpu "${spid[$m]}")
      d=$(jf "$out/rl.json" decisions)
      e=$(jf "$out/rl.json" errors)
      f=$(jf "$out/rl.json" follow_sent)
      t=$(jf "$out/rl.json" seconds)
      n=$(jf "$out/rl.json" sent_total)
      awk -v c="$((c1 - c0))" -v s="$((s1 - s0))" -v k="$tck" -v d="$d" \
        -v n="$n" -v f="${f:-0}" -v t="$t" -v e="$e" \
        'BEGIN { printf "%.0f %.0f %.2f %.2f %d\n", d / t, f / t,
                 c / k * 1e6 / n, s / k * 1e6 / n, e }' \
        >>"$out/$m.$op.txt"
      read -r v _ rc _ ee < <(tail -1 "$out/$m.$op.txt")
      line="$line $m/$op ${v}/s redis ${rc} us"
      [ "$ee" = 0 ] || line="$line ($ee errors)"
      line="$line,"
    done
  done
  echo "${line%,}"
done

col() { cut -d' ' -f"$2" "$1" | median; }
echo
echo "Medians of $rounds runs of ${secs} s, closed loop $conns x $inflight," \
  "100k uniform keys, one Redis $(redis-server --version | sed -n \
    's/.*v=\([^ ]*\).*/\1/p') (module loaded; 'script' is --redis-module off)"
echo "CPU per decision: its settle or release included; us of user + sys."
printf '%-8s %-8s %14s %14s %14s %16s\n' store op decisions/s \
  follow-ups/s "Redis us/dec" "rl-server us/dec"
for m in script module; do
  for op in $ops; do
    f=$out/$m.$op.txt
    printf '%-8s %-8s %14s %14s %14s %16s\n' "$m" "$op" "$(col "$f" 1)" \
      "$(col "$f" 2)" "$(col "$f" 3)" "$(col "$f" 4)"
  done
done
echo "(clock ticks: ${tck}/s; machine: $(nproc) vCPUs, $(sed -n \
  's/^model name\s*: //p' /proc/cpuinfo | head -1))"
rm -rf "$out"
