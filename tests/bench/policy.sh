#!/usr/bin/env bash
# The policy's costs, in one run on this machine:
#   1. decisions/s and CPU per decision (rl-server's and Redis's, from
#      /proc/PID/stat) for a one-window rule against a two-window rule,
#      closed loop, uniform keys, each run ROUNDS times (the median is
#      printed);
#   2. how long a reload of a 10,000-rule file takes (rl-server's own
#      rl_config_reload_last_seconds, five SIGHUPs, median);
#   3. how long a runtime switch takes to reach three rl-servers (rl-ctl
#      reports each instance; the slowest of each change, five changes).
# Big rules files (40k to 400k overrides: start, reload, and what a client
# waits during a reload) are measured by tests/bench/policy_reload.sh.
# Usage: bash tests/bench/policy.sh [SECONDS] [ROUNDS]   (from the root)
set -euo pipefail
cd "$(dirname "$0")/../.."
secs=${1:-5}
rounds=${2:-3}
source tests/bench/lib.sh
cmake --build "$build" -j 2 --target rl-ctl >/dev/null
bin=$build/server
dir=$(mktemp -d)
trap 'cleanup; rm -rf "$dir"' EXIT

clk_tck=$(getconf CLK_TCK)
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }

start_redis "$dir"

cat >"$dir/rules.yaml" <<'EOF'
rules:
  one:
    limits: [1000000/1h]
  two:
    limits: [1000000/1m, 1000000/1h]
EOF
rl_start_ours "$dir/rl-server.log" "$dir/rl-server.ports" \
  "$bin/rl-server" --listen 127.0.0.1:0 --metrics 127.0.0.1:0 \
  --redis "127.0.0.1:$rport" --config "$dir/rules.yaml" --log-level warn
rls_pid=$rl_pid
pids+=("$rls_pid")
sport=$(rl_port_of "$dir/rl-server.ports" listen)

echo "== 1. one window against two, closed loop, 100k uniform keys, ${secs} s x $rounds"
printf '%-6s %12s %16s %16s\n' rule 'decisions/s' 'rl-server us/dec' 'redis us/dec'
for rule in one two; do
  for r in $(seq 1 "$rounds"); do
    c0=$(cpu_ticks "$rls_pid")
    r0=$(cpu_ticks "$rpid")
    "$build/tools/bench/rl-bench" --server "127.0.0.1:$sport" --rule "$rule" \
      --connections 8 --inflight 64 --duration "$secs" --keys 100000 \
      --no-progress --json "$dir/$rule.$r.json" >/dev/null 2>&1
    c1=$(cpu_ticks "$rls_pid")
    r1=$(cpu_ticks "$rpid")
    d=$(jq .decisions "$dir/$rule.$r.json")
    echo "$(jq .decisions_per_sec "$dir/$rule.$r.json") \
$(awk -v t=$((c1 - c0)) -v k="$clk_tck" -v d="$d" 'BEGIN {printf "%.2f", t / k * 1e6 / d}') \
$(awk -v t=$((r1 - r0)) -v k="$clk_tck" -v d="$d" 'BEGIN {printf "%.2f", t / k * 1e6 / d}')" \
      >>"$dir/$rule.rows"
  done
  printf '%-6s %12s %16s %16s\n' "$rule" \
    "$(cut -d' ' -f1 "$dir/$rule.rows" | median)" \
    "$(cut -d' ' -f2 "$dir/$rule.rows" | median)" \
    "$(cut -d' ' -f3 "$dir/$rule.rows" | median)"
done
kill -TERM "$rls_pid"
wait "$rls_pid" 2>/dev/null || true

echo "== 2. reload of a 10,000-rule file (two windows each, 1,000 overrides)"
awk 'BEGIN {
  print "rules:"
  for (i = 0; i < 10000; i++) {
    printf "  rule%d:\n    limits: [%d/1m, %d/1h]\n", i, i + 1, 1000 + i
    if (i % 10 == 0)
      printf "    overrides:\n      \"user:%d\": [5000/1m, 200000/1h]\n", i
  }
}' >"$dir/big.yaml"
ls -l "$dir/big.yaml" | awk '{print "file bytes:", $5}'
rl_start_ours "$dir/rl-server.log" "$dir/big.ports" \
  "$bin/rl-server" --listen 127.0.0.1:0 --metrics 127.0.0.1:0 \
  --max-rules 10000 --config "$dir/big.yaml" --log-level warn
big_pid=$rl_pid
pids+=("$big_pid")
mport=$(rl_port_of "$dir/big.ports" metrics)
metric() {
  curl -s "http://127.0.0.1:$mport/metrics" | awk -v m="$1" '$1 == m {print $2}'
}
for i in 1 2 3 4 5; do
  kill -HUP "$big_pid"
  until [ "$(metric rl_config_reloads_total)" = "$i" ]; do sleep 0.01; done
  metric rl_config_reload_last_seconds
done | median | awk '{printf "reload, parse to swap: %.1f ms (median of 5)\n", $1 * 1000}'
echo "rl-server RSS with it: $(awk '$1 == "VmRSS:" {print $2, $3}' "/proc/$big_pid/status")"
kill -TERM "$big_pid"
wait "$big_pid" 2>/dev/null || true

echo "== 3. a switch reaching three rl-servers (rl-ctl waits and reports)"
for i in 1 2 3; do
  rl_start_ours "$dir/rl-server.log" "$dir/fleet$i.ports" \
    "$bin/rl-server" --listen 127.0.0.1:0 --redis "127.0.0.1:$rport" \
    --config "$dir/rules.yaml" --log-level warn
  pids+=("$rl_pid")
done
sleep 1
for v in 0.5 1 0.25 1 0.5; do
  "$build/tools/rl-ctl" --redis "127.0.0.1:$rport" --wait-ms 5000 scale one "$v" |
    awk '/applied within/ {ms = $(NF - 1); if (ms > max) max = ms} END {print max + 0}'
done | tee "$dir/switch.ms" | tr '\n' ' ' | sed 's/^/slowest instance per change, ms: /'
echo
echo "median: $(median <"$dir/switch.ms") ms (each server polls every 500 ms)"
