#!/usr/bin/env bash
# rl-fit's speed and memory on a synthetic month of access logs
# (fit_month.c: by default 1M callers, 30M requests, 30 days, combined
# format): the generator alone, then rl-fit on the plain file, on the same
# file gzipped (with --gzip), with --algo sliding-window-counter and two
# windows, gcra, and the exact sliding window (its logs' peak is printed).
# Prints figures; asserts nothing (a benchmark, not a test).
#
#   tests/bench/fit_month.sh [BUILD_DIR [USERS [REQUESTS [DAYS]]]] [--gzip]
set -euo pipefail
cd "$(dirname "$0")/../.."
gz=0
args=()
for a in "$@"; do [ "$a" = --gzip ] && gz=1 || args+=("$a"); done
build=${args[0]:-build}
users=${args[1]:-1000000}; requests=${args[2]:-30000000}; days=${args[3]:-30}
gen=$build/tests/bench/fit_month fit=$build/tools/fit/rl-fit
[ -x "$gen" ] && [ -x "$fit" ] || {
  echo "build first: cmake --build $build --target fit_month rl-fit" >&2; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

t0=$(date +%s.%N)
"$gen" "$users" "$requests" "$days" > "$tmp/month.log"
t1=$(date +%s.%N)
printf 'generator: %s lines, %s MB in %.1f s\n' "$(wc -l < "$tmp/month.log")" \
  "$(( $(stat -c %s "$tmp/month.log") / 1000000 ))" "$(echo "$t1 - $t0" | bc)"

run() { # label, rl-fit arguments...
  local label=$1; shift
  /usr/bin/time -f '%e %M' -o "$tmp/time" "$fit" "$@" > "$tmp/out" 2>"$tmp/err"
  read -r secs kb < "$tmp/time"
  printf '%-34s %6.1f s  %6d MB max RSS  %s%s\n' "$label" "$secs" $((kb / 1024)) \
    "$(grep '^recommended' "$tmp/out" | cut -c1-60)" \
    "$(sed -n 's/^rl-fit: the sliding-window logs took at most \(.*\)/  (logs \1)/p' "$tmp/err")"
}
run "fixed-window, 16 thresholds" "$tmp/month.log"
run "fixed-window, 4 thresholds" --thresholds 10,50,100,500 "$tmp/month.log"
run "swc, 300 s + 3600 s x6, 16 thr." --algo sliding-window-counter \
  --window 300 --window 3600:6 "$tmp/month.log"
run "gcra, 16 thresholds" --algo gcra "$tmp/month.log"
run "sliding-window, 16 thresholds" --algo sliding-window "$tmp/month.log"
run "sliding-window, 4 thresholds" --algo sliding-window \
  --thresholds 10,50,100,500 "$tmp/month.log"
if [ $gz = 1 ]; then
  gzip -1 -c "$tmp/month.log" > "$tmp/month.log.gz"
  run "fixed-window, gzip input" "$tmp/month.log.gz"
fi
echo "full output of the first run:"
"$fit" "$tmp/month.log" 2>&1
