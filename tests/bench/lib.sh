# Shared by the bench scripts (allocs.sh, callgrind.sh, profile.sh,
# redis_floor.sh); source
# it from the repository root. Builds the Release binaries and gives:
#   pids        processes to stop on exit (append to it); stopped by pid
#   pick_port   a loopback port nobody listens on, below the ephemeral range
#   wait_port P [TRIES]  waits until something listens on P (10 ms a try)
#   start_redis DIR, start_server DIR ARGS...  a private redis-server and
#               rl-server on free ports (rport/rpid, sport/spid)
build=${RL_BENCH_BUILD:-$PWD/build-bench}
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DRL_WERROR=ON >/dev/null
cmake --build "$build" -j 2 --target rl-server rl-bench >/dev/null

pids=()
cleanup() {
  local p
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
}
trap cleanup EXIT

port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
wait_port() {
  local i
  for i in $(seq 1 "${2:-500}"); do
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
    sleep 0.01
  done
  return 1
}
pick_port() {
  local p
  while :; do
    p=$((20000 + RANDOM % 12000))
    port_free "$p" && { echo "$p"; return; }
  done
}

# start_redis DIR [ARGS...]: a private redis-server on a free port, no
# persistence, logging to DIR/redis.log, with ARGS (e.g. --loadmodule F);
# sets rport and rpid.
start_redis() {
  local dir=$1
  shift
  rport=$(pick_port)
  redis-server --port "$rport" --bind 127.0.0.1 --save '' --appendonly no \
    --dir "$dir" "$@" >"$dir/redis.log" 2>&1 &
  rpid=$!
  pids+=("$rpid")
  wait_port "$rport"
}

# start_server DIR ARGS...: rl-server (the Release build) on a free port
# with ARGS, logging to DIR/server.log; sets sport and spid.
start_server() {
  local dir=$1
  shift
  sport=$(pick_port)
  "$build/server/rl-server" --listen "127.0.0.1:$sport" --log-level warn \
    "$@" 2>"$dir/server.log" &
  spid=$!
  pids+=("$spid")
  wait_port "$sport"
}
