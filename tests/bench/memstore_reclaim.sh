#!/usr/bin/env bash
# Memory store reclaim: rl-server's RSS before a run over ~1M distinct keys,
# at its peak, and once their window has ended. Prints figures; asserts
# nothing (a benchmark, not a test).
#
#   tests/bench/memstore_reclaim.sh [BUILD_DIR]   (default: build-bench)
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build-bench}
[ -x "$build/server/rl-server" ] && [ -x "$build/tools/bench/rl-bench" ] || {
  echo "build first: cmake -S . -B $build -DCMAKE_BUILD_TYPE=Release && cmake --build $build" >&2
  exit 2
}
window=20
. deploy/ports.sh

rss() { awk '/VmRSS/ {print $2}' "/proc/$1/status"; }
hwm() { awk '/VmHWM/ {print $2}' "/proc/$1/status"; }

tmp=$(mktemp -d)
rl_start_ours "$tmp/server.log" "$tmp/server.ports" \
  "$build/server/rl-server" --listen 127.0.0.1:0 --log-level warn
pid=$rl_pid
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null || true; rm -rf "$tmp"' EXIT
port=$(rl_port_of "$tmp/server.ports" listen)

start=$(rss $pid)
t0=$(date +%s%3N)
"$build/tools/bench/rl-bench" --server "127.0.0.1:$port" --connections 4 \
  --inflight 256 --keys 1000000 --dist uniform --requests 5000000 \
  --duration 60 --window $window --limit 100 --no-progress --json /tmp/memstore.json >/dev/null
t1=$(date +%s%3N)
peak=$(hwm $pid)
after_run=$(rss $pid)

# The keys' window ends at most `window` s after the run started, plus the
# 1 s expiry grace and a sweep tick; then the RSS is read again.
wait_ms=$(( window * 1000 + 1500 - (t1 - t0) ))
[ $wait_ms -gt 0 ] && sleep "$(awk "BEGIN{print $wait_ms/1000}")"
later=$(rss $pid)
sleep 1
later2=$(rss $pid)

printf 'memory store, %s decisions over 1M uniform keys (~%s%% distinct), %ss windows\n' \
  "$(grep -o '"decisions": *[0-9]*' /tmp/memstore.json | grep -o '[0-9]*$')" 99 "$window"
printf '  RSS at start          %8d kB\n' "$start"
printf '  RSS peak (VmHWM)      %8d kB\n' "$peak"
printf '  RSS right after run   %8d kB\n' "$after_run"
printf '  RSS a window later    %8d kB\n' "$later"
printf '  RSS a second after    %8d kB\n' "$later2"
