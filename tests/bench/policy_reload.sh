#!/usr/bin/env bash
# Big rules files: how long rl-server takes to start and to reload a rules
# file of 40,000, 100,000 and 400,000 overrides (the largest is about as
# many as the 16 MiB cap holds), and how much longer than usual a client
# waits while the 400,000-override file reloads.
#
#   start   spawn to the port file (the file parsed, listeners open)
#   reload  SIGHUP to the new policy in force: the server's own
#           rl_config_reload_last_seconds
#   wait    rl-bench, open loop at RATE requests/s on 2 connections (so
#           a stall shows as the time a request waited past its slot),
#           its latency over time in 0.1 s steps: SECS s with nothing
#           else going on, then SECS s with a SIGHUP 0.5 s in. "reload
#           max" is the worst latency from just before the SIGHUP until
#           0.5 s after the reload was done (the server's own time); the
#           quiet run is cut into windows as long, and "quiet max" is the
#           median of their worst latencies: what such a window shows
#           without a reload on this machine at this moment. "extra" =
#           reload max - quiet max. (The VM is shared: a plain max over
#           the whole run catches other work's stalls of hundreds of ms
#           at random times.)
#
# Each figure is the median of ROUNDS rounds. Other rl-server binaries
# given (e.g. one built from an older commit) are measured the same way,
# in the same run, after this tree's; a binary whose start took more than
# CAP seconds for one size skips the larger ones (printed as skipped).
#
# Usage: bash tests/bench/policy_reload.sh [ROUNDS] [RL_SERVER...]
#   env: RATE (default 2000), SECS (default 10), CAP (default 30), NICE
#   (the server's and the client's niceness, default -10 as root: the VM
#   is shared, and other work's bursts would otherwise swamp a 50 ms
#   figure; both runs of a round get the same), WAIT_N
#   (the file reloaded during the wait runs: 40000, 100000 or 400000, the
#   default; an old build freezes for minutes on 400000, and SECS must
#   cover the reload)
set -euo pipefail
cd "$(dirname "$0")/../.."
rounds=${1:-3}
shift || true
rate=${RATE:-2000}
secs=${SECS:-10}
cap=${CAP:-30}
wait_n=${WAIT_N:-400000}
nice=${NICE:-$([ "$(id -u)" = 0 ] && echo -10 || echo 0)}
source tests/bench/lib.sh
dir=$(mktemp -d)
trap 'cleanup; rm -rf "$dir"' EXIT
now_ms() { date +%s%3N; }

bins=("$build/server/rl-server" "$@")

# N overrides under one rule, short keys so 400,000 fit in 16 MiB.
gen() {
  awk -v n="$1" 'BEGIN {
    print "rules:\n  api:\n    limits: [100/1m, 5000/1h]\n    overrides:"
    for (i = 0; i < n; i++)
      printf "      \"u:%d\": [%d/1m, 5000/1h]\n", i, i % 1000 + 1
  }' >"$dir/o$1.yaml"
}
for n in 40000 100000 400000; do gen "$n"; done
echo "files: $(for n in 40000 100000 400000; do
  printf '%s overrides %s bytes; ' "$n" "$(stat -c %s "$dir/o$n.yaml")"; done)"
echo "machine: $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg); nice $nice"

metric() {
  curl -s "http://127.0.0.1:$1/metrics" | awk -v m="$2" '$1 == m {print $2}'
}

# reload_seconds PORT: the server's last reload time in seconds
# (rl_config_reload_last_seconds; an older build given to compare serves
# rl_config_reload_last_microseconds instead).
reload_seconds() {
  curl -s "http://127.0.0.1:$1/metrics" | awk '
    $1 == "rl_config_reload_last_seconds" {print $2}
    $1 == "rl_config_reload_last_microseconds" {print $2 / 1e6}'
}

# start BIN FILE: starts it (sets pid, sport, mport); prints ms to ready.
# An old binary may take minutes on a big file: no 10 s limit here.
start() {
  local t0 t1
  rm -f "$dir/ports"
  t0=$(now_ms)
  nice -n "$nice" "$1" --listen 127.0.0.1:0 --metrics 127.0.0.1:0 \
    --config "$2" \
    --log-level warn --port-file "$dir/ports" 2>>"$dir/server.log" &
  pid=$!
  pids+=("$pid")
  rl_wait_ports "$dir/ports" "$pid" "$dir/server.log" 900000
  t1=$(now_ms)
  sport=$(rl_port_of "$dir/ports" listen)
  mport=$(rl_port_of "$dir/ports" metrics)
  echo $((t1 - t0))
}

stop() {
  kill -TERM "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
}

# reload_s: one SIGHUP, awaited; prints the server's reload time (s).
reload_s() {
  local before
  before=$(metric "$mport" rl_config_reloads_total)
  before=${before:-0}
  kill -HUP "$pid"
  until [ "$(metric "$mport" rl_config_reloads_total)" = $((before + 1)) ]; do
    sleep 0.02
  done
  reload_seconds "$mport"
}

# bench OUT [hup]: an open-loop run; with hup, a SIGHUP 0.5 s in, and the
# run lasts until the reload is done.
bench() {
  local out=$1 hup=${2:-} before
  before=$(metric "$mport" rl_config_reloads_total)
  before=${before:-0}
  nice -n "$nice" "$build/tools/bench/rl-bench" \
    --server "127.0.0.1:$sport" --rule api \
    --connections 2 --rate "$rate" --duration "$secs" --keys 100000 \
    --timeout-ms 600000 --no-progress --json "$out" \
    --timeline-csv "$out.csv" >/dev/null 2>&1 &
  local bpid=$!
  if [ -n "$hup" ]; then
    sleep 0.5
    kill -HUP "$pid"
  fi
  wait "$bpid"
  if [ -n "$hup" ] && [ "$(metric "$mport" rl_config_reloads_total)" != \
    $((before + 1)) ]; then
    echo "reload not done within the run; make SECS longer" >&2
    return 1
  fi
}

for bin in "${bins[@]}"; do
  echo "== $bin"
  printf '%-9s %10s %10s\n' overrides 'start ms' 'reload ms'
  skip=
  done_n=0
  for n in 40000 100000 400000; do
    if [ -n "$skip" ]; then
      printf '%-9s %10s %10s\n' "$n" skipped "(start > ${cap} s at fewer)"
      continue
    fi
    : >"$dir/start" >"$dir/reload"
    for r in $(seq 1 "$rounds"); do
      start "$bin" "$dir/o$n.yaml" >>"$dir/start"
      reload_s >>"$dir/reload"
      stop
      if [ "$(tail -1 "$dir/start")" -gt $((cap * 1000)) ]; then
        skip=1
        break
      fi
    done
    done_n=$n
    printf '%-9s %10s %10.0f\n' "$n" "$(median <"$dir/start")" \
      "$(median <"$dir/reload" | awk '{print $1 * 1000}')"
  done
  if [ "$done_n" -lt "$wait_n" ]; then
    echo "wait during a $wait_n-override reload: skipped"
    continue
  fi
  echo "wait during a $wait_n-override reload, $rate requests/s open loop:"
  printf '%-6s %10s %12s %12s %10s\n' round 'reload ms' 'quiet max' \
    'reload max' 'extra ms'
  start "$bin" "$dir/o$wait_n.yaml" >/dev/null
  : >"$dir/extra"
  for r in $(seq 1 "$rounds"); do
    bench "$dir/quiet.json"
    bench "$dir/hup.json" hup
    rs=$(reload_seconds "$mport")
    # The window: 0.3 s (before the SIGHUP, allowing for the client's
    # start) to 0.5 s after the reload ended.
    w=$(awk -v r="$rs" 'BEGIN {print 0.7 + r + 0.5}')
    h=$(awk -F, -v w="$w" 'NR > 1 && $1 >= 0.3 && $1 < 0.3 + w &&
      $5 > m {m = $5} END {print m / 1000}' "$dir/hup.json.csv")
    q=$(awk -F, -v w="$w" 'NR > 1 {k = int($1 / w); if ($5 > m[k]) m[k] = $5}
      END {for (k in m) print m[k] / 1000}' "$dir/quiet.json.csv" | median)
    awk -v q="$q" -v h="$h" 'BEGIN {printf "%.1f\n", h - q}' >>"$dir/extra"
    printf '%-6s %10.0f %12.1f %12.1f %10s\n' "$r" \
      "$(awk -v r="$rs" 'BEGIN {print r * 1000}')" "$q" "$h" \
      "$(tail -1 "$dir/extra")"
  done
  echo "extra wait, median of $rounds: $(median <"$dir/extra") ms" \
    "(latencies in ms; the target is under 50)"
  stop
done
