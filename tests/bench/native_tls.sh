#!/usr/bin/env bash
# What TLS on the native listener costs, librlc on both ends of the
# comparison, in one run:
#
#   tests/bench/native_tls.sh [ROUNDS] [SECONDS] [IDLE]
#
# Two rl-servers of this build on the memory store, one with a plaintext
# --listen and one with --tls-cert/--tls-key and --tls-listeners listen
# (a P-256 certificate for 127.0.0.1, made by openssl at start). Per round,
# each in turn (the order alternates): rl-bench closed loop, 4 connections
# x INFLIGHT (default 64) in flight, 100k uniform keys, SECONDS s;
# decisions per second and CPU per decision (utime + stime, s per million
# decisions) of the rl-server and of rl-bench (the client pays for TLS
# too, on the same 2 cores). Then the medians and TLS's ratio (target:
# decisions/s >= 0.8x at 4 connections).
# Then IDLE (default 5000) idle connections to each server, opened by
# Python (handshakes done, nothing sent), and each server's RSS before and
# after: memory per idle connection, TLS against plaintext.
# Defaults: 3 rounds of 5 s. Loopback only; what it starts it stops by pid.
set -euo pipefail
cd "$(dirname "$0")/../.."
rounds=${1:-3}
secs=${2:-5}
idle=${3:-5000}
out=$(mktemp -d /tmp/native_tls.XXXXXX)
. tests/bench/lib.sh

bench_certs "$out"

ulimit -n 20000 2>/dev/null || ulimit -n "$(ulimit -Hn)"
declare -A sp spids
mkdir -p "$out/plain" "$out/tls"
start_server "$out/plain" --max-connections 20000
sp[plain]=$sport
spids[plain]=$spid
# No caps on handshakes: the idle connections are opened as fast as the
# client can, which is what is measured, not --tls-handshake-rate.
start_server "$out/tls" --max-connections 20000 --tls-cert "$out/server.crt" \
  --tls-key "$out/server.key" --tls-listeners listen \
  --tls-max-handshakes 0 --tls-handshake-rate 0
sp[tls]=$sport
spids[tls]=$spid

bench() { # MODE SECONDS
  local tls=()
  [ "$1" = tls ] && tls=(--tls-ca "$out/ca.crt")
  "$build/tools/bench/rl-bench" --server "127.0.0.1:${sp[$1]}" \
    --no-progress "${tls[@]}" --connections 4 --inflight "${INFLIGHT:-64}" \
    --duration "$2" --keys 100000 --limit 1000000000 --dist uniform \
    --json "$out/rl.json" >/dev/null &
  bpid=$!
  pids+=("$bpid")
  wait "$bpid"
}

for m in plain tls; do
  bench "$m" 1
  e=$(jf "$out/rl.json" errors)
  [ "$e" = 0 ] || {
    echo "$m: $e errors in the warm-up; see $out/$m/server.log" >&2
    exit 1
  }
done
for r in $(seq 1 "$rounds"); do
  order="plain tls"
  [ $((r % 2)) = 0 ] && order="tls plain"
  line="round $r:"
  for m in $order; do
    s0=$(cpu "${spids[$m]}")
    # rl-bench's CPU: its children's time, read from our own rusage.
    c0=$(awk '{ print $16 + $17 }' /proc/$$/stat)
    bench "$m" "$secs"
    s1=$(cpu "${spids[$m]}")
    c1=$(awk '{ print $16 + $17 }' /proc/$$/stat)
    d=$(jf "$out/rl.json" decisions)
    rate=$(jf "$out/rl.json" decisions_per_sec)
    e=$(jf "$out/rl.json" errors)
    awk -v s="$((s1 - s0))" -v c="$((c1 - c0))" -v t="$tck" -v d="$d" \
      -v r="$rate" -v e="$e" \
      'BEGIN { printf "%.1f %.3f %.3f %d\n", r, s / t * 1e6 / d,
               c / t * 1e6 / d, e }' >>"$out/$m.txt"
    read -r v sc cc e < <(tail -1 "$out/$m.txt")
    line="$line $m $v/s (rl-server $sc, rl-bench $cc s/M, errors $e),"
  done
  echo "${line%,}"
done
col() { cut -d' ' -f"$2" "$out/$1.txt" | median; }
echo "median of $rounds rounds of ${secs} s, 4 x ${INFLIGHT:-64} in flight," \
  "memory store, $(nproc) CPUs ($(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)):"
printf '  %-6s %12s %16s %14s\n' "" "decisions/s" "rl-server s/M" \
  "rl-bench s/M"
for m in plain tls; do
  printf '  %-6s %12.0f %16.3f %14.3f\n' "$m" "$(col "$m" 1)" \
    "$(col "$m" 2)" "$(col "$m" 3)"
done
awk -v p="$(col plain 1)" -v t="$(col tls 1)" \
  -v ps="$(col plain 2)" -v ts="$(col tls 2)" 'BEGIN {
  printf "  tls / plain: decisions/s %.2fx (target >= 0.8x), rl-server CPU per decision %.2fx\n",
    t / p, ts / ps }'

# Idle connections: RSS before and after IDLE of them.
rss() { awk '/^VmRSS/ { print $2 }' "/proc/$1/status"; }
for m in plain tls; do
  printf '%s ' "$(rss "${spids[$m]}")"
  python3 - "${sp[$m]}" "$m" "$idle" "$out/ca.crt" "${spids[$m]}" <<'EOF'
import socket, ssl, sys, time
port, mode, n, ca, pid = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5]
ctx = ssl.create_default_context(cafile=ca)
ctx.set_alpn_protocols(["rl1"])
conns = []
t0 = time.time()
for i in range(n):
    s = socket.create_connection(("127.0.0.1", port), 10)
    if mode == "tls":
        s = ctx.wrap_socket(s, server_hostname="127.0.0.1")
    conns.append(s)
hs = time.time() - t0
with open("/proc/%s/status" % pid) as f:
    rss = [l.split()[1] for l in f if l.startswith("VmRSS")][0]
print("%s %s %d %.2f" % (mode, rss, n, hs))
for s in conns:
    s.close()
EOF
done >"$out/idle.txt"
echo "idle connections, $idle to each server (RSS in kB before and after):"
while read -r before m after n hs; do
  awk -v m="$m" -v b="$before" -v a="$after" -v n="$n" -v t="$hs" 'BEGIN {
    printf "  %-6s %8d -> %8d kB: %5.1f KiB per connection; opened in %.2f s (%.0f/s%s)\n",
      m, b, a, (a - b) / n, t, n / t,
      m == "tls" ? " with handshakes, client and server on one machine" : "" }'
done <"$out/idle.txt"
rm -rf "$out"
