#!/usr/bin/env bash
# The --grpc listener under attack, in one run, rl-server on a private
# redis-server (so that answers given by the fail mode can be counted):
#
#  1. HPACK amplification (grpc_attack hpack, 800,000 B/s on one
#     connection): a native client (rl-bench, 1 connection, open loop at
#     RL_RATE requests/s, default 2,000, latency counted from each
#     request's scheduled time so that a stalled server cannot hide it)
#     measured quiet, under the attack, and with the same attack sent to a
#     sink instead (a process that reads and drops it: the floor, what the
#     attack's traffic costs this machine whatever the server does),
#     ROUNDS times each, interleaved; p50, p99, answers/s, answers given
#     by fail-open (the client's count and rl_failed_open_total), and
#     rl-server's CPU.
#  2. Zero windows: 1,000 connections that announce a zero flow-control
#     window and make 100 calls each; rl-server's RSS before, at its
#     peak and at the end, and how many connections it ended, when.
#  3. HEADERS-only streams filling --max-connections (200 here): whether
#     a new gRPC client is served (grpc_load, 1 connection, 1 s).
#
#   tests/bench/grpc_attack.sh [BUILD_DIR] [SECONDS] [ROUNDS]
#
# BUILD_DIR (default build) has the tools; RL_SERVER=PATH runs another
# rl-server binary (an older build, say) with them. Figures, not a test:
# the machine's load shows in them, so compare the ratios of one run.
set -Eeuo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build}
secs=${2:-5}
rounds=${3:-3}
rate=${RL_RATE:-2000}
server=${RL_SERVER:-$build/server/rl-server}
attack=$build/tests/bench/grpc_attack
bench=$build/tools/bench/rl-bench
load=$build/tests/bench/grpc_load
for f in "$server" "$attack" "$bench" "$load"; do
  [ -x "$f" ] || { echo "grpc_attack.sh: missing $f (build first)" >&2; exit 2; }
done
tmp=$(mktemp -d)
pids=()
cleanup() {
  local p
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  rm -rf "$tmp"
}
trap cleanup EXIT
# A step that fails says which, with the server's last words.
trap 'echo "grpc_attack.sh: line $LINENO failed: $BASH_COMMAND" >&2;
      tail -5 "$tmp/server.log" >&2 2>/dev/null' ERR
. deploy/ports.sh

cat >"$tmp/bench.yaml" <<'YAML'
domain: bench
descriptors:
  - key: k
    rate_limit: {unit: minute, requests_per_unit: 100}
YAML

rl_start_redis "$tmp" "$tmp/redis.log"
pids+=("$rl_pid")
rport=$rl_redis_port

# start_server ARGS...: rl-server on Redis with every listener on port 0;
# sets spid, lport, gport, mport.
start_server() {
  rl_start_ours "$tmp/server.log" "$tmp/server.ports" "$server" \
    --listen 127.0.0.1:0 --grpc 127.0.0.1:0 --metrics 127.0.0.1:0 \
    --envoy-config "$tmp/bench.yaml" --redis "127.0.0.1:$rport" \
    --log-level error "$@"
  spid=$rl_pid
  pids+=("$spid")
  lport=$(rl_port_of "$tmp/server.ports" listen)
  gport=$(rl_port_of "$tmp/server.ports" grpc)
  mport=$(rl_port_of "$tmp/server.ports" metrics)
}
stop_server() { kill "$spid" 2>/dev/null || true; wait "$spid" 2>/dev/null || true; }

metric() { # NAME: its value on /metrics (0 when absent)
  local page="" i
  # A server stalled by the attack (the old build) may drop a scrape: its
  # header deadline passes before its loop reads the request.
  for i in 1 2 3 4 5; do
    page=$(curl -s --max-time 10 "http://127.0.0.1:$mport/metrics") && break
    sleep 0.2
  done
  printf '%s\n' "$page" |
    awk -v n="$1" '$1 == n { v = $2 } END { print v + 0 }'
}
cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$spid/stat"; }
rss_kb() { awk '/^VmRSS/ { print $2 }' "/proc/$spid/status"; }
hz=$(getconf CLK_TCK)

# native LABEL: one rl-bench run; prints LABEL p50 p99 answers/s
# fail-open(client) fail-open(server) cpu%.
native() {
  local fo0 fo1 t0 t1
  fo0=$(metric rl_failed_open_total)
  t0=$(cpu_ticks)
  rm -f "$tmp/b.json"
  "$bench" --server "127.0.0.1:$lport" --connections 1 --rate "$rate" \
    --duration "$secs" --keys 100000 --rule bench --no-progress \
    --json "$tmp/b.json" >"$tmp/b.out" 2>&1 || true
  t1=$(cpu_ticks)
  fo1=$(metric rl_failed_open_total)
  if [ ! -s "$tmp/b.json" ]; then
    echo "rl-bench wrote no report ($1): $(tail -1 "$tmp/b.out")" >&2
    return 0
  fi
  jq -r --arg l "$1" --argjson fo $((fo1 - fo0)) \
    --argjson cpu "$(( (t1 - t0) * 100 / hz / secs ))" \
    '[$l, .p50_us, .p99_us, .decisions_per_sec, .failed_open, $fo, $cpu]
     | @tsv' "$tmp/b.json"
}

echo "== rl-server: $server"
echo "== machine: $(nproc) vCPUs, load average $(cut -d' ' -f1-3 /proc/loadavg)"
start_server --rule bench=100/60s --idle-timeout 3 --frame-timeout-ms 1000

echo "== 1. HPACK amplification, ${secs}s per phase, $rounds rounds"
printf '%-7s %9s %9s %10s %14s %14s %5s\n' phase p50_us p99_us answers/s \
  failopen_cli failopen_srv cpu%
: >"$tmp/rows"
# The sink: reads every connection to the end and drops what it reads.
rl_port_reserve sport
python3 -c '
import socket, sys, threading
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(sys.argv[1])))
s.listen(64)
def drain(c):
    try:
        while c.recv(65536):
            pass
    except OSError:
        pass
while True:
    c = s.accept()[0]
    threading.Thread(target=drain, args=(c,), daemon=True).start()
' "$sport" &
pids+=($!)
rl_wait_listen "$sport" "$!" /dev/null || { echo "no sink" >&2; exit 1; }
for r in $(seq 1 "$rounds"); do
  native quiet >>"$tmp/rows"
  "$attack" hpack "$sport" "$((secs + 2))" 800000 >/dev/null &
  apid=$!
  pids+=("$apid")
  sleep 1
  native sink >>"$tmp/rows"
  wait "$apid" || true
  "$attack" hpack "$gport" "$((secs + 2))" 800000 >>"$tmp/attack.out" &
  apid=$!
  pids+=("$apid")
  sleep 1
  native attack >>"$tmp/rows"
  wait "$apid" || true
done
awk -F'\t' '{ printf "%-7s %9.0f %9.0f %10.0f %14d %14d %5d\n",
  $1, $2, $3, $4, $5, $6, $7 }' "$tmp/rows"
sed 's/^/attacker: /' "$tmp/attack.out"
# Medians by phase, and the ratio that matters: p99 under attack / quiet.
awk -F'\t' '
  function med(a, n,   i, j, t) {
    for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++)
      if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
    return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
  }
  { n[$1]++; p50[$1, n[$1]] = $2; p99[$1, n[$1]] = $3; aps[$1, n[$1]] = $4
    foc[$1] += $5; fos[$1] += $6 }
  END {
    for (ph in n) {
      delete x; for (i = 1; i <= n[ph]; i++) x[i] = p50[ph, i]; m50[ph] = med(x, n[ph])
      delete x; for (i = 1; i <= n[ph]; i++) x[i] = p99[ph, i]; m99[ph] = med(x, n[ph])
      delete x; for (i = 1; i <= n[ph]; i++) x[i] = aps[ph, i]; ma[ph] = med(x, n[ph])
    }
    printf "median quiet:  p50 %.0f us  p99 %.0f us  %.0f answers/s\n", m50["quiet"], m99["quiet"], ma["quiet"]
    printf "median sink:   p50 %.0f us  p99 %.0f us  %.0f answers/s\n", m50["sink"], m99["sink"], ma["sink"]
    printf "median attack: p50 %.0f us  p99 %.0f us  %.0f answers/s\n", m50["attack"], m99["attack"], ma["attack"]
    printf "fail-open answers: quiet %d (client) %d (server), attack %d (client) %d (server), all rounds\n", foc["quiet"], fos["quiet"], foc["attack"], fos["attack"]
    printf "p99 attack/quiet: %.2f   answers/s attack/quiet: %.2f\n", m99["attack"] / m99["quiet"], ma["attack"] / ma["quiet"]
    printf "p99 sink/quiet (the floor: the attack traffic itself): %.2f   attack/sink: %.2f\n", m99["sink"] / m99["quiet"], m99["attack"] / m99["sink"]
  }' "$tmp/rows"
for m in rl_grpc_streams_oversized_total rl_grpc_reads_deferred_total \
  'rl_grpc_connections_closed_total{reason="headers"}' \
  'rl_grpc_connections_closed_total{reason="protocol"}'; do
  echo "metric: $m $(metric "$m")"
done

echo "== 2. zero windows: 1000 connections x 100 calls" \
  "(--idle-timeout 3 --frame-timeout-ms 1000)"
rss0=$(rss_kb)
"$attack" zerowin "$gport" 1000 100 15 >"$tmp/zw.out" &
apid=$!
pids+=("$apid")
peak=$rss0
while kill -0 "$apid" 2>/dev/null; do
  r=$(rss_kb)
  [ "$r" -gt "$peak" ] && peak=$r
  sleep 0.25
done
wait "$apid" || true
echo "rss: before $((rss0 / 1024)) MB, peak $((peak / 1024)) MB," \
  "after 15 s $(( $(rss_kb) / 1024 )) MB"
sed 's/^/attacker: /' "$tmp/zw.out"
for m in 'rl_grpc_connections_closed_total{reason="output"}' \
  'rl_grpc_connections_closed_total{reason="output_timeout"}' \
  'rl_grpc_connections_closed_total{reason="idle"}' rl_grpc_connections_open; do
  echo "metric: $m $(metric "$m")"
done
stop_server

echo "== 3. HEADERS-only streams at --max-connections 200" \
  "(--idle-timeout 60 --frame-timeout-ms 30000)"
start_server --max-connections 200 --idle-timeout 60 --frame-timeout-ms 30000
"$attack" headers-only "$gport" 200 6 >"$tmp/ho.out" &
apid=$!
pids+=("$apid")
sleep 2
echo "new client: $("$load" "$gport" 1 1 1 1000 1 2>&1 | head -1)"
wait "$apid" || true
sed 's/^/attacker: /' "$tmp/ho.out"
for m in 'rl_grpc_connections_closed_total{reason="evicted"}' \
  rl_grpc_connections_refused_total; do
  echo "metric: $m $(metric "$m")"
done
stop_server
