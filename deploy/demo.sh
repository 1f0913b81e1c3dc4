#!/usr/bin/env bash
# The main job on a fresh Debian 12 machine: install what is missing, build,
# start a private redis-server and rl-server (with deploy/rules.yaml) on free
# loopback ports, show real decisions with rl-check (among them the fixed
# window's boundary burst, and the sliding window and GCRA refusing it) and
# a quota set with rl-ctl, then stop exactly what it started. Every count it
# prints is checked: the demo exits 1 when a figure is not what it says.
set -euo pipefail
cd "$(dirname "$0")/.."

bash deploy/setup-debian.sh
echo "== building (Release) into build-demo/"
log=$(mktemp /tmp/rl-demo-build.XXXXXX)
cmake -S . -B build-demo -DCMAKE_BUILD_TYPE=Release -DRL_BUILD_TESTS=OFF \
  >"$log" 2>&1 || { cat "$log"; exit 1; }
cmake --build build-demo -j "$(nproc)" --target rl-server rl-check rl-ctl \
  rl_redis_module \
  >>"$log" 2>&1 || { cat "$log"; exit 1; }

server=build-demo/server/rl-server
check=build-demo/tools/rl-check
ctl=build-demo/tools/rl-ctl
dir=$(mktemp -d /tmp/rl-demo.XXXXXX)
pids=()

cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  rm -rf "$dir" "$log"
}
trap cleanup EXIT

# Loopback ports: rl-server picks its own and says which (--port-file);
# redis-server gets one reserved below the ephemeral range.
. deploy/ports.sh

# Waits (at most 10 s) until rl-server is ready as a load balancer sees it
# (/healthz 200 on the metrics port): Redis connected and the fleet's
# runtime switches applied.
wait_ready() {
  local i
  for i in $(seq 1 200); do
    curl -fsS "http://127.0.0.1:$1/healthz" >/dev/null 2>&1 && return 0
    sleep 0.05
  done
  echo "rl-server not ready on 127.0.0.1:$1" >&2
  return 1
}

# With the ratelimit module loaded, rl-server decides its batches with
# RL.BATCH instead of the Lua script (deploy/README.md, "Redis module").
rl_start_redis "$dir" "$dir/redis.log" --loglevel warning \
  --loadmodule "$PWD/build-demo/server/redis_module/ratelimit.so"
pids+=("$rl_pid")
redis_pid=$rl_pid
rport=$rl_redis_port

rl_start_ours "$dir/server.log" "$dir/server.ports" \
  "$server" --listen 127.0.0.1:0 --metrics 127.0.0.1:0 \
  --redis "127.0.0.1:$rport" --config deploy/rules.yaml \
  --rule edge-fixed=5/4s --rule edge-sliding=5/4s:sliding-window \
  --rule edge-gcra=5/4s:gcra:burst=5 \
  --redis-timeout-ms 100
pids+=("$rl_pid")
port=$(rl_port_of "$dir/server.ports" listen)
mport=$(rl_port_of "$dir/server.ports" metrics)
wait_ready "$mport"
echo "== redis-server on 127.0.0.1:$rport, rl-server on 127.0.0.1:$port" \
  "(rules: deploy/rules.yaml, metrics on 127.0.0.1:$mport)"

fail() {
  echo "demo: $*" >&2
  exit 1
}

# rl-check's decisions into $dir/last.out; prints them when $1 is "show".
ask() {
  local show=$1
  shift
  "$check" --server "127.0.0.1:$port" "$@" >"$dir/last.out" || true
  if [ "$show" = show ]; then sed 's/^/   /' "$dir/last.out"; fi
}
# The decisions of $dir/last.out (or $3) that begin with $1 ("OK",
# "OVER_LIMIT") and contain $2 (a field, or "" for any).
count() {
  grep -c "^$1 .*$2" "${3:-$dir/last.out}" || true
}
# Fails the demo unless the last decisions were $1 OK and $2 OVER_LIMIT.
expect() {
  local ok over
  ok=$(count OK "")
  over=$(count OVER_LIMIT "")
  [ "$ok" = "$1" ] && [ "$over" = "$2" ] ||
    fail "expected $1 OK and $2 OVER_LIMIT, got $ok and $over"
}
run() {
  echo "\$ rl-check $*"
  ask show "$@"
}
# When less than 200 ms of this second are left, sleeps until 20 ms past
# the next, so that a quick burst of a 1 s window does not straddle its
# edge.
next_second() {
  sleep "$(date +%s.%N |
    awk '{ f = $1 - int($1); printf "%.3f", (f > 0.8 ? 1.02 - f : 0) }')"
}
sleep_ms() {
  sleep "$(awk -v ms="$1" 'BEGIN { printf "%.3f", (ms < 0 ? 0 : ms) / 1000 }')"
}
ms_now() {
  date +%s%3N
}

echo
echo "-- 5 requests per 60 s for user:demo; the 6th and 7th are refused"
run --key user:demo --limit 5 --window 60 --repeat 7
expect 5 2
echo
echo "-- rule login (5/60s in deploy/rules.yaml), cost 2 per request: the third"
echo "   is refused (4 used, 1 left) and, refused, consumes nothing"
run --key ip:203.0.113.7 --rule login --cost 2 --repeat 3
expect 2 1
grep -q '^OVER_LIMIT used=4 remaining=1 ' "$dir/last.out" ||
  fail "the refusal does not say 4 used, 1 left"
echo
echo "-- rule api, two windows (33/1m and 2000/1h): every window must allow;"
echo "   the answer describes the deciding window (here the minute)"
echo "\$ rl-check --key user:demo --rule api --repeat 35   (first 2 and last 3 lines)"
ask quiet --key user:demo --rule api --repeat 35
sed -n '1,2p;33,35p' "$dir/last.out" | sed 's/^/   /'
expect 33 2
[ "$(count OVER_LIMIT 'window=60s')" = 2 ] ||
  fail "the refusals are not the minute's"
echo
echo "-- the fixed window's boundary burst: a limit of 5 per 4 s, five requests"
echo "   just before a window's edge and five just after it. The fixed window"
echo "   admits all ten, twice its limit within half a second; the sliding"
echo "   window (its exact log) and the GCRA (rate 5/4s, burst 5) refuse the"
echo "   second five: no 4 s span gets more than 5 from them"
echo "   (rules: --rule edge-fixed=5/4s --rule edge-sliding=5/4s:sliding-window"
echo "   --rule edge-gcra=5/4s:gcra:burst=5)"
algos="fixed sliding gcra"
edge_burst() {
  local key=user:edge$1 r a t0 t1
  # The probe's reset_after_ms is the time to the current 4 s window's end
  # on the store's clock (windows are aligned to the epoch).
  ask quiet --key "probe:edge$1" --limit 1000000 --window 4
  r=$(sed -n 's/.*reset_after_ms=\([0-9]*\).*/\1/p' "$dir/last.out")
  [ -n "$r" ] || fail "no reset_after_ms in: $(cat "$dir/last.out")"
  if [ "$r" -lt 700 ]; then r=$((r + 4000)); fi
  sleep_ms $((r - 300))
  t0=$(ms_now)
  for a in $algos; do
    ask quiet --key "$key" --rule "edge-$a" --repeat 5
    mv "$dir/last.out" "$dir/$a.before"
  done
  r=$(sed -n '$s/.*reset_after_ms=\([0-9]*\).*/\1/p' "$dir/fixed.before")
  [ -n "$r" ] || fail "no reset_after_ms in: $(cat "$dir/fixed.before")"
  sleep_ms $((r + 150 - ($(ms_now) - t0)))
  for a in $algos; do
    ask quiet --key "$key" --rule "edge-$a" --repeat 5
    mv "$dir/last.out" "$dir/$a.after"
  done
  t1=$(ms_now)
  edge_ms=$((t1 - t0))
  for a in $algos; do
    got_before[$a]=$(count OK "" "$dir/$a.before")
    got_after[$a]=$(count OK "" "$dir/$a.after")
  done
  [ "${got_before[fixed]}/${got_after[fixed]}" = 5/5 ] &&
    [ "${got_before[sliding]}/${got_after[sliding]}" = 5/0 ] &&
    [ "${got_before[gcra]}/${got_after[gcra]}" = 5/0 ]
}
declare -A got_before got_after
edge_ok=0
for attempt in 1 2 3; do
  if edge_burst "$attempt"; then
    edge_ok=1
    break
  fi
  # Only a stall of the machine between the two bursts (or before the
  # first, past the edge) changes these counts: then once more.
  echo "   (attempt $attempt: the bursts were not placed around the edge" \
    "in time, the machine is busy; again)"
done
[ "$edge_ok" = 1 ] ||
  fail "boundary burst: admitted before/after the edge: fixed" \
    "${got_before[fixed]}/${got_after[fixed]}, sliding" \
    "${got_before[sliding]}/${got_after[sliding]}, gcra" \
    "${got_before[gcra]}/${got_after[gcra]} (expected 5/5, 5/0, 5/0)"
printf '   %-16s %-18s %-16s %s\n' algorithm "before the edge" "after it" \
  "admitted in ${edge_ms} ms"
for a in $algos; do
  case $a in
  fixed) name=fixed-window note=" (twice the limit)" ;;
  sliding) name=sliding-window note= ;;
  gcra) name=gcra note= ;;
  esac
  printf '   %-16s %-18s %-16s %s\n' "$name" "${got_before[$a]} of 5 admitted" \
    "${got_after[$a]} of 5 admitted" \
    "$((got_before[$a] + got_after[$a]))$note"
done
echo "   the fixed window's answers after the edge (a new window, a fresh count):"
sed -n '1p;5p' "$dir/fixed.after" | sed 's/^/     /'
echo "   the sliding window's and the GCRA's (retry when the burst has aged):"
sed -n '1p' "$dir/sliding.after" | sed 's/^/     /'
sed -n '1p' "$dir/gcra.after" | sed 's/^/     /'
echo
echo "-- rule search (10/1s, mode: shadow): decided and counted, never refused;"
echo "   what enforce would have refused is answered OK with shadow_refused set"
echo "   (and counted on /metrics)"
echo "\$ rl-check --key ip:198.51.100.9 --rule search --repeat 12   (last 3 lines)"
next_second
ask quiet --key ip:198.51.100.9 --rule search --repeat 12
tail -n 3 "$dir/last.out" | sed 's/^/   /'
expect 12 0
[ "$(count OK shadow_refused)" = 2 ] ||
  fail "expected 2 shadow refusals, got $(count OK shadow_refused)"
curl -fsS "http://127.0.0.1:$mport/metrics" |
  grep '^rl_rule_decisions_total{rule="search"' | sed 's/^/   /'
echo
echo "-- rl-ctl: caller user:partner gets its own quota under api (2/1m),"
echo "   read by the decision script itself; no restart, no reload"
echo "\$ rl-ctl quota set api user:partner 2/1m"
"$ctl" --redis "127.0.0.1:$rport" quota set api user:partner 2/1m
run --key user:partner --rule api --repeat 3
expect 2 1
echo
echo "-- what Redis holds: counters <prefix>{<caller>}:r:<rule>:<window_s>:<index>"
echo "   (each with a TTL; a refusal creates none), a gcra's theoretical arrival"
echo "   time in us (...:g), a sliding window's log (...:l), and the quota hash"
redis-cli -p "$rport" --scan --pattern 'rl:{*' | sort | while read -r k; do
  if [ "$(redis-cli -p "$rport" TYPE "$k")" = string ]; then
    v=$(redis-cli -p "$rport" GET "$k")
    if [ "${#v}" -gt 40 ]; then v="${v:0:24}... (${#v} bytes)"; fi
    printf '   %-44s value=%s pttl_ms=%s\n' "$k" "$v" \
      "$(redis-cli -p "$rport" PTTL "$k")"
  else
    printf '   %-44s hash: %s\n' "$k" \
      "$(redis-cli -p "$rport" HGETALL "$k" | paste -sd' ')"
  fi
done
echo
echo "-- Redis stopped: rl-server keeps answering, failing open (the default)"
kill "$redis_pid"
wait "$redis_pid" 2>/dev/null || true
run --key user:demo --limit 5 --window 60
[ "$(count OK "")" = 1 ] || fail "no OK while Redis is away (fail open)"
echo
echo "== rl-server's log:"
sed 's/^/   /' "$dir/server.log"
echo "== stopping rl-server (SIGTERM) and cleaning up"
