#!/usr/bin/env bash
# The main job on a fresh Debian 12 machine: install what is missing, build,
# start a private redis-server and rl-server (with deploy/rules.yaml) on free
# loopback ports, show real decisions with rl-check and a quota set with
# rl-ctl, then stop exactly what it started.
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
  --redis-timeout-ms 100
pids+=("$rl_pid")
port=$(rl_port_of "$dir/server.ports" listen)
mport=$(rl_port_of "$dir/server.ports" metrics)
wait_ready "$mport"
echo "== redis-server on 127.0.0.1:$rport, rl-server on 127.0.0.1:$port" \
  "(rules: deploy/rules.yaml, metrics on 127.0.0.1:$mport)"

run() {
  echo "\$ rl-check $*"
  "$check" --server "127.0.0.1:$port" "$@" || echo "(exit $?)"
}

echo
echo "-- 5 requests per 60 s for user:demo; the 6th and 7th are refused"
run --key user:demo --limit 5 --window 60 --repeat 7
echo
echo "-- rule login (5/60s in deploy/rules.yaml), cost 2 per request: the third"
echo "   is refused (4 used, 1 left) and, refused, consumes nothing"
run --key ip:203.0.113.7 --rule login --cost 2 --repeat 3
echo
echo "-- rule api, two windows (33/1m and 2000/1h): every window must allow;"
echo "   the answer describes the deciding window (here the minute)"
echo "\$ rl-check --key user:demo --rule api --repeat 35   (first 2 and last 3 lines)"
"$check" --server "127.0.0.1:$port" --key user:demo --rule api --repeat 35 \
  >"$dir/api.out" || true
sed -n '1,2p;33,35p' "$dir/api.out"
echo
echo "-- rule search (10/1s, mode: shadow): decided and counted, never refused;"
echo "   what enforce would have refused is answered OK with shadow_refused set"
echo "   in the response (rl-check does not print it; /metrics counts it)"
echo "\$ rl-check --key ip:198.51.100.9 --rule search --repeat 12   (last 3 lines)"
"$check" --server "127.0.0.1:$port" --key ip:198.51.100.9 --rule search \
  --repeat 12 | tail -n 3
curl -fsS "http://127.0.0.1:$mport/metrics" |
  grep '^rl_rule_decisions_total{rule="search"' | sed 's/^/   /'
echo
echo "-- rl-ctl: caller user:partner gets its own quota under api (2/1m),"
echo "   read by the decision script itself; no restart, no reload"
echo "\$ rl-ctl quota set api user:partner 2/1m"
"$ctl" --redis "127.0.0.1:$rport" quota set api user:partner 2/1m
run --key user:partner --rule api --repeat 3
echo
echo "-- what Redis holds: counters <prefix>{<caller>}:r:<rule>:<window_s>:<index>"
echo "   (each with a TTL; a refusal creates none), and the quota hash"
redis-cli -p "$rport" --scan --pattern 'rl:{*' | sort | while read -r k; do
  if [ "$(redis-cli -p "$rport" TYPE "$k")" = string ]; then
    printf '   %-44s value=%s pttl_ms=%s\n' "$k" \
      "$(redis-cli -p "$rport" GET "$k")" "$(redis-cli -p "$rport" PTTL "$k")"
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
echo
echo "== rl-server's log:"
sed 's/^/   /' "$dir/server.log"
echo "== stopping rl-server (SIGTERM) and cleaning up"
