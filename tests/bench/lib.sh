# Shared by the bench scripts (allocs.sh, callgrind.sh, profile.sh,
# redis_floor.sh); source
# it from the repository root. Builds the Release binaries and gives:
#   pids        processes to stop on exit (append to it); stopped by pid
#   wait_port P [TRIES]  waits until something listens on P (10 ms a try)
#   start_redis DIR, start_server DIR ARGS...  a private redis-server on a
#               reserved port and rl-server on ports it picks (rport/rpid,
#               sport/smport/spid); deploy/ports.sh's helpers for others
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

. deploy/ports.sh

# tck: clock ticks a second; cpu PID: a process's utime + stime in ticks;
# jf FILE FIELD: a top-level number of rl-bench's --json output; median:
# the median of the numbers on stdin, one a line.
tck=$(getconf CLK_TCK)
cpu() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }
jf() { sed -n "s/^  \"$2\": \\([^,]*\\),\\{0,1\\}\$/\\1/p" "$1" | head -1; }
median() { sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }

# bench_certs DIR: a CA (DIR/ca.crt) and a P-256 certificate for
# 127.0.0.1 signed by it (DIR/server.crt, DIR/server.key), by openssl.
bench_certs() {
  local d=$1
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 \
    -nodes -days 1 -subj "/CN=rl bench ca" -keyout "$d/ca.key" \
    -out "$d/ca.crt" 2>/dev/null
  openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
    -subj "/CN=rl bench server" -keyout "$d/server.key" \
    -out "$d/server.csr" 2>/dev/null
  printf 'subjectAltName=IP:127.0.0.1\n' >"$d/server.ext"
  openssl x509 -req -in "$d/server.csr" -CA "$d/ca.crt" -CAkey \
    "$d/ca.key" -CAcreateserial -days 1 -extfile "$d/server.ext" \
    -out "$d/server.crt" 2>/dev/null
}

wait_port() {
  local i
  for i in $(seq 1 "${2:-500}"); do
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
    sleep 0.01
  done
  return 1
}

# start_redis DIR [ARGS...]: a private redis-server on a reserved port, no
# persistence, logging to DIR/redis.log, with ARGS (e.g. --loadmodule F);
# sets rport and rpid.
start_redis() {
  local dir=$1
  shift
  rl_start_redis "$dir" "$dir/redis.log" "$@"
  rport=$rl_redis_port
  rpid=$rl_pid
  pids+=("$rpid")
}

# start_server DIR ARGS...: rl-server (the Release build) with ARGS, its
# listeners on port 0 (ARGS may add --metrics 127.0.0.1:0), logging to
# DIR/server.log; sets sport, smport (the metrics port, if any) and spid.
start_server() {
  local dir=$1
  shift
  rl_start_ours "$dir/server.log" "$dir/server.ports" \
    "$build/server/rl-server" --listen 127.0.0.1:0 --log-level warn "$@"
  spid=$rl_pid
  pids+=("$spid")
  sport=$(rl_port_of "$dir/server.ports" listen)
  smport=$(rl_port_of "$dir/server.ports" metrics)
}
