#!/usr/bin/env bash
# The main job on a fresh Debian 12 machine: install what is missing, build,
# start a private redis-server and rl-server on free loopback ports, show
# real decisions with rl-check, then stop exactly what it started.
set -euo pipefail
cd "$(dirname "$0")/.."

bash deploy/setup-debian.sh
echo "== building (Release) into build-demo/"
log=$(mktemp /tmp/rl-demo-build.XXXXXX)
cmake -S . -B build-demo -DCMAKE_BUILD_TYPE=Release -DRL_BUILD_TESTS=OFF \
  >"$log" 2>&1 || { cat "$log"; exit 1; }
cmake --build build-demo -j "$(nproc)" --target rl-server rl-check \
  >>"$log" 2>&1 || { cat "$log"; exit 1; }

server=build-demo/server/rl-server
check=build-demo/client/rl-check
dir=$(mktemp -d /tmp/rl-demo.XXXXXX)
pids=()

cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  rm -rf "$dir"
}
trap cleanup EXIT

# A loopback port nobody listens on (bash's /dev/tcp: refused means free).
free_port() {
  local p
  while :; do
    p=$((20000 + RANDOM % 40000))
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
      echo "$p"
      return
    fi
  done
}

# Waits (at most 10 s) until something accepts on the port.
wait_port() {
  local i
  for i in $(seq 1 200); do
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
    sleep 0.05
  done
  echo "nothing listening on 127.0.0.1:$1" >&2
  return 1
}

rport=$(free_port)
redis-server --port "$rport" --bind 127.0.0.1 --dir "$dir" --save "" \
  --appendonly no --daemonize no --loglevel warning >"$dir/redis.log" 2>&1 &
pids+=($!)
redis_pid=$!
wait_port "$rport"

port=$(free_port)
"$server" --listen "127.0.0.1:$port" --redis "127.0.0.1:$rport" \
  --rule login=3/60 --redis-timeout-ms 100 2>"$dir/server.log" &
pids+=($!)
wait_port "$port"
echo "== redis-server on 127.0.0.1:$rport, rl-server on 127.0.0.1:$port"

run() {
  echo "\$ rl-check $*"
  "$check" --server "127.0.0.1:$port" "$@" || echo "(exit $?)"
}

echo
echo "-- 5 requests per 60 s for user:demo; the 6th and 7th are refused"
run --key user:demo --limit 5 --window 60 --repeat 7
echo
echo "-- a named server-side rule (--rule login=3/60), cost 2 per request"
run --key ip:203.0.113.7 --rule login --cost 2 --repeat 2
echo
echo "-- what Redis holds: one counter per (key, window), each with a TTL"
redis-cli -p "$rport" --scan --pattern 'rl:*' | sort | while read -r k; do
  printf '   %-40s value=%s pttl_ms=%s\n' "$k" \
    "$(redis-cli -p "$rport" GET "$k")" "$(redis-cli -p "$rport" PTTL "$k")"
done
echo
echo "-- Redis stopped: rl-server keeps answering, failing open (the default)"
kill "$redis_pid"
wait "$redis_pid" 2>/dev/null || true
run --key user:demo --limit 5 --window 60
echo
echo "== rl-server's log:"
sed 's/^/   /' "$dir/server.log"
echo "== stopping rl-server (SIGTERM) and cleaning up"
