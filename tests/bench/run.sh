#!/usr/bin/env bash
# The benchmark of BENCHMARKS.md, in one command, on one machine:
#
#   tests/bench/run.sh [RESULTS_DIR]
#
# Builds Release (build-bench/, or $RL_BENCH_BUILD), starts a private
# redis-server and rl-server on free loopback ports, and measures side by
# side, in this order:
#   rl uniform   rl-bench closed loop, 100k keys, limit 100 per 60 s
#   rl uniform script  the same (61 s windows: keys of its own) through a
#                second rl-server on the same Redis with --redis-module
#                off: the Lua script instead of the module (this row and
#                open 50k script only when the module is loaded)
#   base uniform baseline_hiredis (INCR-then-EXPIRE, 8 connections), the same
#                keys: it counts on the keys rl-server just created, so its
#                INCRs find them and skip EXPIRE (the baseline at its best)
#   rl hot       one key
#   base hot     the same key
#   rl zipf      zipf:1.1 over 100k keys
#   ceiling      redis-benchmark INCR, -P 64, -r 100000: Redis alone
#   floor ping   redis-benchmark PING, one client: one round trip on this
#                machine, no rl-server (the latency floor of a hop)
#   open 5k, 20k rl-bench open loop at 5,000 and 20,000/s, half of
#                $RL_BENCH_OPEN_SECONDS each (batch size and CPU per
#                decision at light load)
#   floor echo   floor_echo (tests/bench/floor.c): answers every frame OK at
#                once, one write per read; the 50k/s open loop below,
#                unaudited: rl-bench, loopback and the kernel, nothing else
#   floor redis  floor_redis: the same after ONE blocking Redis PING per
#                read, the one-hop floor every open-loop p99 is divided by
#   floor incr   floor_redis --incr: that round trip carrying one
#                pipelined INCR per frame (no expiry): the least Redis and
#                server work that counts each decision
#   open 50k/s   rl-bench open loop at 50,000/s, latency from the schedule,
#                $RL_BENCH_OPEN_SECONDS (default 20)
#   open 50k script  the same through the script's rl-server (61 s
#                windows)
#   floor redis split, floor incr split, open 50k split  floor_redis,
#                floor_incr and open 50k again, the service (every server
#                and Redis) on the last vCPU and rl-bench on vCPU 0: the
#                load generator apart from what it measures
#                The floors and these rows run interleaved in
#                $RL_BENCH_ROUNDS rounds (default 3); their figures are the
#                medians of the rounds, p99/floor the median of each
#                round's own ratio
#   open steady  the same once every counter it touches exists (a
#                closed-loop pass in hour windows creates them first)
#   open hold    the same through a second rl-server on the same Redis with
#                --batch-hold-us $RL_BENCH_HOLD_US (default 300; 0: skip)
#   open awake   the same with rl-bench --keep-awake (idle vCPUs of this
#                VM halt, and their wakeups, not the service, then make
#                the tail), $RL_BENCH_SOAK seconds (default 60) with
#                rl-server's RSS sampled every 5 s
#   open pinned  awake, Redis on CPU 1, rl-server and rl-bench on CPU 0
#   open memory  awake, against an rl-server on the memory store: the same
#                path without Redis
# Open loops write a timeline (rl-bench --timeline-csv) and report how many
# 100 ms slots had a p99 over 1 ms. Every rl-bench run reports the steal
# time of the VM's CPUs meanwhile (/proc/stat).
# Every rl-bench run against rl-server has --audit. For each run:
# decisions/s, p50/p99, open-loop p99 over floor_redis's p99, the mean
# store batch (rl_batch_size_sum / _count deltas from rl-server's
# /metrics), rl-server CPU seconds per million decisions (utime+stime from
# /proc/PID/stat), Redis's too, Redis commands per decision (INFO
# commandstats: EVALSHA calls for rl-server, every command but our INFO
# for the baseline, redis-benchmark and the floors), and
# rl-server's peak RSS (VmHWM); then the ratios to the baseline and to the
# ceiling, and a verdict on the targets. rl-server runs with
# --batches-in-flight $RL_BENCH_BATCHES_IN_FLIGHT (default 1; 0 unbounded).
# Closed-loop phases last $RL_BENCH_SECONDS (default 10) after 1 s of
# warmup; the whole run takes about 13 minutes. Loopback only; everything
# started here is stopped by its pid on exit.
#
# Redis runs with the ratelimit module (server/redis_module, RL.BATCH)
# loaded, which rl-server then uses; RL_BENCH_MODULE=0 runs it without,
# every rl-server row then being the Lua script's.
#
# Results (JSON of each run, the table, a latency plot of the open loop)
# go to RESULTS_DIR (default: a new directory under /tmp). Exit status 0
# when every run completed and every audit passed, 1 otherwise; the speed
# targets are reported, not enforced.
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
build=${RL_BENCH_BUILD:-$root/build-bench}
secs=${RL_BENCH_SECONDS:-10}
soak=${RL_BENCH_SOAK:-60}
open_secs=${RL_BENCH_OPEN_SECONDS:-20}
conns=${RL_BENCH_CONNECTIONS:-4}
inflight=${RL_BENCH_INFLIGHT:-256}
bif=${RL_BENCH_BATCHES_IN_FLIGHT:-1}
with_module=${RL_BENCH_MODULE:-1}
low_secs=$(( open_secs / 2 > 2 ? open_secs / 2 : 2 ))
out=${1:-$(mktemp -d /tmp/rl-bench-run.XXXXXX)}
mkdir -p "$out"

log() { printf '%s\n' "$*" >&2; }

# ---- build ---------------------------------------------------------------
log "== building Release in $build"
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DRL_WERROR=ON \
  >"$out/cmake.log" 2>&1 || { cat "$out/cmake.log"; exit 1; }
cmake --build "$build" -j 2 --target rl-server rl-bench baseline_hiredis \
  floor_echo floor_redis rl_redis_module \
  >"$out/build.log" 2>&1 || { cat "$out/build.log"; exit 1; }
server_bin=$build/server/rl-server
bench_bin=$build/tools/bench/rl-bench
base_bin=$build/tests/bench/baseline_hiredis
floor_bin=$build/tests/bench
for tool in redis-server redis-benchmark redis-cli curl; do
  command -v "$tool" >/dev/null ||
    { log "$tool not found: apt-get install redis-server redis-tools curl"; exit 1; }
done

# ---- processes -----------------------------------------------------------
pids=()
cleanup() {
  local p
  for p in "${pids[@]}"; do
    kill -TERM "$p" 2>/dev/null || true
  done
  for p in "${pids[@]}"; do
    wait "$p" 2>/dev/null || true
  done
}
trap cleanup EXIT

. deploy/ports.sh

# start_on NAME COMMAND...: runs COMMAND in the background until it
# listens. Our servers (an argument with 127.0.0.1:PORT, and MPORT for
# --metrics) listen on port 0 and say which ports they bound; another
# (redis-server's --port PORT) gets a reserved port, and one more try on
# another if that one was taken. Sets started_pid, started_port and
# started_mport.
start_on() {
  local name=$1 try p a ours=0 args
  shift
  for a in "$@"; do [[ $a == *127.0.0.1:PORT* ]] && ours=1; done
  if [ "$ours" = 1 ]; then
    args=()
    for a in "$@"; do a=${a//MPORT/0}; args+=("${a//PORT/0}"); done
    rl_start_ours "$out/$name.log" "$out/$name.ports" "${args[@]}" ||
      { log "$name did not start; see $out/$name.log"; exit 1; }
    started_pid=$rl_pid
    pids+=("$started_pid")
    started_port=$(rl_port_of "$out/$name.ports" listen)
    started_mport=$(rl_port_of "$out/$name.ports" metrics)
    return 0
  fi
  for try in 1 2; do
    rl_port_reserve p
    args=()
    for a in "$@"; do args+=("${a//PORT/$p}"); done
    "${args[@]}" 2>>"$out/$name.log" &
    started_pid=$!
    if rl_wait_listen "$p" "$started_pid" "$out/$name.log"; then
      pids+=("$started_pid")
      started_port=$p
      return 0
    fi
    kill "$started_pid" 2>/dev/null || true
    wait "$started_pid" 2>/dev/null || true
  done
  log "$name did not start; see $out/$name.log"
  exit 1
}

mkdir -p "$out/redis"
module_args=()
if [ "$with_module" = 1 ]; then
  module_args=(--loadmodule "$build/server/redis_module/ratelimit.so")
fi
start_on redis redis-server --port PORT --bind 127.0.0.1 --save '' \
  --appendonly no --dir "$out/redis" --logfile "$out/redis/redis.log" \
  "${module_args[@]}"
redis_pid=$started_pid
redis_port=$started_port
start_on rl-server "$server_bin" --listen 127.0.0.1:PORT \
  --metrics 127.0.0.1:MPORT --redis "127.0.0.1:$redis_port" \
  --batches-in-flight "$bif" --log-level warn
rls_pid=$started_pid
rls_port=$started_port
rls_mport=$started_mport
# Let the store connect and sample Redis's clock before measuring.
sleep 0.5

clk_tck=$(getconf CLK_TCK)
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
status_kb() { awk -v f="$2:" '$1 == f {print $2}' "/proc/$1/status"; }

# Reads a number or token from our own JSON ("  \"name\": value,").
jf() { sed -n "s/^  \"$2\": \\([^,]*\\),\\{0,1\\}\$/\\1/p" "$1" | head -1; }

failed=0
declare -A rate p50 p99 cpu rcpu note steal errors batch cmds pfr

# Redis's command calls so far, "name calls" a line, from INFO
# commandstats; INFO itself (ours, for this) is left out.
redis_cmds() {
  redis-cli -h 127.0.0.1 -p "$redis_port" INFO commandstats | tr -d '\r' |
    awk -F'[:=,]' '/^cmdstat_/ && $1 != "cmdstat_info" { print substr($1, 9), $3 }'
}

# rl-server's batch histogram so far, "sum count", from /metrics on port $1.
batch_stat() {
  curl -s --max-time 5 "http://127.0.0.1:$1/metrics" |
    awk '$1 == "rl_batch_size_sum" { s = $2 } $1 == "rl_batch_size_count" { c = $2 }
      END { if (c != "") print s, c }'
}

# snap PID MPORT: the counters before a run: the server's CPU (PID; - for
# none), Redis's CPU and commands, the server's batches (/metrics on MPORT;
# - for none).
snap() {
  snap_pid=$1
  snap_mport=$2
  snap_c0=
  snap_b0=
  if [ "$1" != - ]; then snap_c0=$(cpu_ticks "$1"); fi
  snap_r0=$(cpu_ticks "$redis_pid")
  redis_cmds >"$out/cmds.before"
  if [ "$2" != - ]; then snap_b0=$(batch_stat "$2"); fi
}

# per_m TICKS DECISIONS: CPU seconds per million decisions.
per_m() { awk -v t="$1" -v k="$clk_tck" -v d="$2" 'BEGIN { printf "%.2f", t / k / d * 1e6 }'; }

# record NAME DECISIONS: the per-decision figures since snap: server CPU,
# Redis CPU, Redis commands (EVALSHA when there were any, else all; each
# command's count in $out/NAME.cmdstats) and the mean store batch.
record() {
  local name=$1 d=$2 b1 total
  cpu[$name]="-"
  rcpu[$name]="-"
  cmds[$name]="-"
  batch[$name]="-"
  [ "${d:-0}" -gt 0 ] || return 0
  if [ -n "$snap_c0" ]; then
    cpu[$name]=$(per_m $(($(cpu_ticks "$snap_pid") - snap_c0)) "$d")
  fi
  rcpu[$name]=$(per_m $(($(cpu_ticks "$redis_pid") - snap_r0)) "$d")
  redis_cmds | awk 'NR == FNR { b[$1] = $2; next }
    $2 - b[$1] > 0 { print $1, $2 - b[$1] }' "$out/cmds.before" - \
    >"$out/$name.cmdstats"
  # Commands a script runs count in commandstats too: for rl-server, whose
  # every batch is one EVALSHA (or RL.BATCH), count those; for others,
  # every command.
  total=$(awk '$1 == "evalsha" || $1 == "eval" || $1 == "rl.batch" { e += $2 } { n += $2 }
    END { print (e > 0 ? e : n + 0) }' "$out/$name.cmdstats")
  cmds[$name]=$(awk -v n="$total" -v d="$d" 'BEGIN { printf "%.4f", n / d }')
  if [ -n "$snap_b0" ]; then
    b1=$(batch_stat "$snap_mport")
    batch[$name]=$(awk -v a="$snap_b0" -v b="$b1" 'BEGIN { split(a, x, " ");
      split(b, y, " "); c = y[2] - x[2];
      if (c > 0) printf "%.1f", (y[1] - x[1]) / c; else printf "-" }')
  fi
}

# record_json NAME JSON: rate and latency from an rl-bench or baseline
# JSON, then record. CPU and commands are per check the server answered
# over the whole run: rl-bench's sent_total counts its warmup too, which
# the measured decisions leave out (the CPU read from /proc covers it).
record_json() {
  local all
  rate[$1]=$(jf "$2" decisions_per_sec)
  p50[$1]=$(jf "$2" p50_us)
  p99[$1]=$(jf "$2" p99_us)
  all=$(jf "$2" sent_total)
  record "$1" "${all:-$(jf "$2" decisions)}"
}

# Steal: time the hypervisor ran something else while our vCPUs wanted to
# run, as a share of all CPU time (/proc/stat, every CPU).
cpu_stat() { awk '/^cpu / { t = 0; for (i = 2; i <= NF; i++) t += $i; print $9, t }' /proc/stat; }
steal_pct() { awk -v a="$1" -v b="$2" 'BEGIN { split(a, x, " "); split(b, y, " ");
  d = y[2] - x[2]; printf "%.1f", (d > 0 ? 100 * (y[1] - x[1]) / d : 0) }'; }

# rl NAME RL-BENCH-ARGS...: one rl-bench run with the audit, against
# rl-server on ${RL_PORT:-$rls_port} (pid ${RL_PID:-$rls_pid}, /metrics on
# ${RL_MPORT:-$rls_mport}, - for none), run through ${RL_WRAP:-}
# (taskset). RL_NOAUDIT=1: no audit (a floor server decides nothing).
rl() {
  local name=$1 s0 rc=0 audit=(--audit)
  shift
  if [ -n "${RL_NOAUDIT:-}" ]; then audit=(); fi
  log "== $name: ${RL_WRAP:+$RL_WRAP }rl-bench $*"
  snap "${RL_PID:-$rls_pid}" "${RL_MPORT:-$rls_mport}"
  s0=$(cpu_stat)
  ${RL_WRAP:-} "$bench_bin" --server "127.0.0.1:${RL_PORT:-$rls_port}" \
    "${audit[@]}" --no-progress --json "$out/$name.json" "$@" \
    >"$out/$name.txt" 2>&1 || rc=$?
  steal[$name]=$(steal_pct "$s0" "$(cpu_stat)")
  cat "$out/$name.txt" >&2
  record_json "$name" "$out/$name.json"
  if [ -n "${RL_NOAUDIT:-}" ]; then
    note[$name]="no audit"
    [ "$rc" -eq 0 ] || { log "!! $name failed (exit $rc)"; failed=1; }
    return 0
  fi
  note[$name]="audit: $(jf "$out/$name.json" audit_windows) windows, $(jf "$out/$name.json" audit_over_limit) over"
  if [ "$rc" -ne 0 ] || [ "$(jf "$out/$name.json" audit_over_limit)" != 0 ]; then
    log "!! $name failed (exit $rc)"
    failed=1
  fi
}

# open NAME RL-BENCH-ARGS...: an open-loop run, with its timeline; the note
# says how many 100 ms slots had a p99 over 1 ms (stalls, or a steady tail).
open_run() {
  local name=$1
  shift
  rl "$name" "${open[@]}" --timeline-csv "$out/$name.timeline.csv" "$@"
  errors[$name]=$(jf "$out/$name.json" errors)
  note[$name]="errors ${errors[$name]}; $(awk -F, 'NR > 1 { n++; if ($4 > 1000) k++ }
    END { printf "%d of %d slots of 100 ms with p99 > 1 ms", k, n }' \
    "$out/$name.timeline.csv"); ${note[$name]}"
}

# median_rows NAME: NAME's figures as the medians of its rounds' (rows
# NAME@1..NAME@$rounds); errors as their most; p99/floor (pfr) as the
# median of each round's p99 over FLOOR's (default floor_redis) in the
# same round.
median_of() { tr ' ' '\n' | awk '/^[0-9.]+$/' | sort -g |
  awk '{ v[NR] = $1 } END { if (NR == 0) print "-";
    else if (NR % 2) print v[(NR + 1) / 2];
    else printf "%.2f\n", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
median_rows() {
  local n=$1 fl=${2:-floor_redis} a r vals
  for a in rate p50 p99 cpu rcpu cmds batch steal; do
    local -n arr=$a
    vals=
    for r in $(seq 1 "$rounds"); do vals+=" ${arr[$n@$r]:--}"; done
    arr[$n]=$(median_of <<<"$vals")
  done
  vals=
  for r in $(seq 1 "$rounds"); do
    vals+=" $(awk -v a="${p99[$n@$r]:-0}" -v b="${p99[$fl@$r]:-0}" \
      'BEGIN { if (b > 0) printf "%.2f", a / b; else printf "-" }')"
  done
  pfr[$n]=$(median_of <<<"$vals")
  errors[$n]=0
  for r in $(seq 1 "$rounds"); do
    if [ "${errors[$n@$r]:-1}" != 0 ]; then errors[$n]=${errors[$n@$r]:-1}; fi
  done
  note[$n]="median of $rounds rounds; ${note[$n@$rounds]:-}"
}

# base NAME ARGS...: one baseline run.
base() {
  local name=$1 rc=0
  shift
  log "== $name: baseline_hiredis $*"
  snap - -
  "$base_bin" --redis "127.0.0.1:$redis_port" --threads 8 \
    --duration "$secs" --json "$out/$name.json" "$@" \
    >"$out/$name.txt" 2>&1 || rc=$?
  cat "$out/$name.txt" >&2
  record_json "$name" "$out/$name.json"
  note[$name]="8 connections, INCR + EXPIRE on first hit"
  [ "$rc" -eq 0 ] || { log "!! $name failed (exit $rc)"; failed=1; }
}

closed=(--connections "$conns" --inflight "$inflight" --warmup 1
  --duration "$secs" --limit 100 --window 60)

rl rl_uniform "${closed[@]}" --keys 100000 --dist uniform
scripts=()
if [ "$with_module" = 1 ]; then
  start_on rl-server-script "$server_bin" --listen 127.0.0.1:PORT \
    --metrics 127.0.0.1:MPORT --redis "127.0.0.1:$redis_port" \
    --batches-in-flight "$bif" --redis-module off --log-level warn
  script_pid=$started_pid script_port=$started_port script_mport=$started_mport
  sleep 0.5
  RL_PORT=$script_port RL_PID=$script_pid RL_MPORT=$script_mport \
    rl rl_uniform_script "${closed[@]}" --keys 100000 --dist uniform \
    --window 61
  note[rl_uniform_script]="Lua script (--redis-module off); ${note[rl_uniform_script]}"
  scripts=(rl_uniform_script)
fi
base base_uniform --keys 100000 --dist uniform --store-prefix rl:
rl rl_hot "${closed[@]}" --keys 100000 --dist hot
base base_hot --dist hot --store-prefix rl:
rl rl_zipf "${closed[@]}" --keys 100000 --dist zipf:1.1

# The ceiling: Redis alone, pipelined INCR over the same key spread.
log "== ceiling: redis-benchmark INCR -P 64 -r 100000"
snap - -
redis-benchmark -h 127.0.0.1 -p "$redis_port" -c 4 -P 64 -r 100000 \
  -n 3000000 --csv -t incr >"$out/ceiling.csv" 2>/dev/null || failed=1
line=$(grep -i '"INCR"' "$out/ceiling.csv" | tail -1 | tr -d '"')
rate[ceiling]=$(cut -d, -f2 <<<"$line")
p50[ceiling]=$(awk -F, '{printf "%.1f", $5 * 1000}' <<<"$line")
p99[ceiling]=$(awk -F, '{printf "%.1f", $7 * 1000}' <<<"$line")
record ceiling 3000000
note[ceiling]="Redis alone: pipelined INCR, no TTL, no decision; per INCR"
log "$line"

# The platform's own floor: one client ping-ponging PING with Redis, one
# hop and no rl-server. An rl-server decision crosses two such hops
# (client to rl-server, rl-server to Redis).
log "== floor: redis-benchmark PING, 1 client, no pipelining"
snap - -
redis-benchmark -h 127.0.0.1 -p "$redis_port" -c 1 -n 20000 --csv \
  -t ping_mbulk >"$out/floor.csv" 2>/dev/null || failed=1
line=$(grep -i '"PING_MBULK"' "$out/floor.csv" | tail -1 | tr -d '"')
rate[floor_ping]=$(cut -d, -f2 <<<"$line")
p50[floor_ping]=$(awk -F, '{printf "%.1f", $5 * 1000}' <<<"$line")
p99[floor_ping]=$(awk -F, '{printf "%.1f", $7 * 1000}' <<<"$line")
record floor_ping 20000
note[floor_ping]="one round trip to Redis, 1 client: this VM's floor; per PING"

# Open loop. First at 5,000 and 20,000/s (small batches: CPU per decision
# at light load), shorter. Then at 50,000/s: the two floor servers, then
# rl-server as the machine is; then with rl-bench's --keep-awake
# (idle-priority spinners, so idle vCPUs do not halt; see
# tools/bench/awake.c), a longer run through which rl-server's RSS is
# sampled; then, still awake, with Redis on a CPU of its own (rl-server and
# rl-bench on the other), as deploy/README.md advises; and last against an
# rl-server on the memory store, the same path without Redis.
# Requests arrive one at a time, each at its own scheduled time, as from
# independent clients (rl-bench's default --arrivals each), over 4
# connections; open_50k_grouped sends what fell due every 400 us on one
# connection instead (about 20 requests a write), the batches it hands
# the server being what a grouped generator flatters.
open=(--connections 4 --warmup 1 --keys 100000
  --dist uniform --limit 100 --window 60)
lows=(open_5k open_20k)
open_run open_5k --rate 5000 --duration "$low_secs"
open_run open_20k --rate 20000 --duration "$low_secs"
open+=(--rate 50000)

# The floors at 50k/s and open_50k, the same open loop, interleaved in
# $RL_BENCH_ROUNDS rounds (default 3; each row's figures are then the
# medians over its rounds, and p99/floor the median of each round's own
# ratio): no hop (floor_echo), one blocking Redis round trip per read
# (floor_redis, the one-hop floor of the p99 / floor column), and that
# round trip carrying one pipelined INCR per frame (floor_incr: the least
# Redis work that counts each decision, and the least server work that
# sends it; no expiry). The server CPU column is then the floor server's;
# floor_redis's batch is its frames per PING.
rounds=${RL_BENCH_ROUNDS:-3}
floors=(floor_echo floor_redis floor_incr)
start_on floor_echo "$floor_bin/floor_echo" --listen 127.0.0.1:PORT
echo_pid=$started_pid echo_port=$started_port
start_on floor_redis "$floor_bin/floor_redis" --listen 127.0.0.1:PORT \
  --redis "127.0.0.1:$redis_port"
fredis_pid=$started_pid fredis_port=$started_port
start_on floor_incr "$floor_bin/floor_redis" --listen 127.0.0.1:PORT \
  --redis "127.0.0.1:$redis_port" --incr
fincr_pid=$started_pid fincr_port=$started_port
paired=("${floors[@]}" open_50k open_50k_grouped)
if [ "$with_module" = 1 ]; then paired+=(open_50k_script); fi
# The same rows again with the load generator apart from the service:
# every server and Redis on the last vCPU, rl-bench on vCPU 0. Three busy
# processes on two vCPUs otherwise queue behind each other and migrate
# (about one migration per frame for rl-server, a wakeup across vCPUs being
# a hypervisor exit on this VM), and the figures measure that as much as
# the service.
splits=()
service=("$redis_pid" "$rls_pid" "$echo_pid" "$fredis_pid" "$fincr_pid")
if [ "$with_module" = 1 ]; then service+=("$script_pid"); fi
last_cpu=$(($(nproc) - 1))
if [ "$last_cpu" -ge 1 ] && command -v taskset >/dev/null; then
  splits=(floor_redis_split floor_incr_split open_50k_split)
fi
# pin_service CPUS: every thread of every service process onto CPUS.
pin_service() {
  local p
  for p in "${service[@]}"; do taskset -apc "$1" "$p" >/dev/null; done
}
for r in $(seq 1 "$rounds"); do
  log "== 50k/s round $r of $rounds"
  RL_PORT=$echo_port RL_PID=$echo_pid RL_MPORT=- RL_NOAUDIT=1 \
    open_run "floor_echo@$r" --duration "$open_secs"
  RL_PORT=$fredis_port RL_PID=$fredis_pid RL_MPORT=- RL_NOAUDIT=1 \
    open_run "floor_redis@$r" --duration "$open_secs"
  RL_PORT=$fincr_port RL_PID=$fincr_pid RL_MPORT=- RL_NOAUDIT=1 \
    open_run "floor_incr@$r" --duration "$open_secs"
  open_run "open_50k@$r" --duration "$open_secs"
  open_run "open_50k_grouped@$r" --duration "$open_secs" --connections 1 \
    --tick-us 400
  if [ "$with_module" = 1 ]; then
    RL_PORT=$script_port RL_PID=$script_pid RL_MPORT=$script_mport \
      open_run "open_50k_script@$r" --duration "$open_secs" --window 61
  fi
  if [ "${#splits[@]}" -gt 0 ]; then
    pin_service "$last_cpu"
    RL_PORT=$fredis_port RL_PID=$fredis_pid RL_MPORT=- RL_NOAUDIT=1 \
      RL_WRAP="taskset -c 0" open_run "floor_redis_split@$r" \
      --duration "$open_secs"
    RL_PORT=$fincr_port RL_PID=$fincr_pid RL_MPORT=- RL_NOAUDIT=1 \
      RL_WRAP="taskset -c 0" open_run "floor_incr_split@$r" \
      --duration "$open_secs"
    RL_WRAP="taskset -c 0" open_run "open_50k_split@$r" \
      --duration "$open_secs"
    pin_service "0-$last_cpu"
  fi
done
for n in "${paired[@]}"; do median_rows "$n"; done
for n in "${splits[@]}"; do median_rows "$n" floor_redis_split; done
paired+=("${splits[@]}")
batch[floor_redis]=$(awk -v c="${cmds[floor_redis]}" 'BEGIN { if (c > 0) printf "%.1f", 1 / c; else printf "-" }')
if [ "$with_module" = 1 ]; then
  note[open_50k_script]="Lua script; ${note[open_50k_script]}"
fi

# The same open loop once every counter it touches exists: open_50k's
# window is new to Redis, so about a third of its ops create their counter
# (and give it its expiry), which a window's later traffic does not. A
# closed-loop pass (not measured) creates them first, in hour windows.
steady=(--keys 100000 --dist uniform --limit 1000000 --window 3600)
log "== open_50k_steady: creating its counters first"
"$bench_bin" --server "127.0.0.1:$rls_port" --no-progress --connections 4 \
  --inflight 256 --duration 3 "${steady[@]}" >"$out/steady_pre.txt" 2>&1 ||
  failed=1
rl open_50k_steady --connections 4 --warmup 1 --rate 50000 \
  --duration "$open_secs" "${steady[@]}" \
  --timeline-csv "$out/open_50k_steady.timeline.csv"
errors[open_50k_steady]=$(jf "$out/open_50k_steady.json" errors)
note[open_50k_steady]="counters existing; errors ${errors[open_50k_steady]}; ${note[open_50k_steady]}"

# The same open loop through a second rl-server on the same Redis with
# --batch-hold-us $RL_BENCH_HOLD_US (default 300; 0 skips the row): what
# fewer, bigger store calls save in CPU and cost in latency.
hold_us=${RL_BENCH_HOLD_US:-300}
holds=()
if [ "$hold_us" -gt 0 ]; then
  start_on rl-server-hold "$server_bin" --listen 127.0.0.1:PORT \
    --metrics 127.0.0.1:MPORT --redis "127.0.0.1:$redis_port" \
    --batches-in-flight "$bif" --batch-hold-us "$hold_us" --log-level warn
  sleep 0.5
  RL_PORT=$started_port RL_PID=$started_pid RL_MPORT=$started_mport \
    open_run open_50k_hold --duration "$open_secs"
  note[open_50k_hold]="--batch-hold-us $hold_us; ${note[open_50k_hold]}"
  holds=(open_50k_hold)
fi
holds=(open_50k_steady "${holds[@]}")
if [ "$with_module" = 1 ]; then holds=(open_50k_script "${holds[@]}"); fi

log "== open loop 50000/s, vCPUs kept awake, for ${soak}s"
: >"$out/rss.txt"
(
  for _ in $(seq 1 $((soak / 5))); do
    sleep 5
    echo "$(status_kb "$rls_pid" VmRSS)" >>"$out/rss.txt"
  done
) &
sampler=$!
open_run open_50k_awake --duration "$soak" --keep-awake \
  --hist-csv "$out/open_50k_awake.csv" \
  $(command -v gnuplot >/dev/null && echo --plot "$out/open_50k_awake.png")
wait "$sampler" || true

opens=(open_50k open_50k_awake)
if [ "$(nproc)" -ge 2 ] && command -v taskset >/dev/null; then
  taskset -pc 1 "$redis_pid" >/dev/null
  taskset -pc 0 "$rls_pid" >/dev/null
  RL_WRAP="taskset -c 0" open_run open_50k_pinned --duration "$open_secs" \
    --keep-awake
  taskset -pc "0-$(($(nproc) - 1))" "$redis_pid" >/dev/null
  taskset -pc "0-$(($(nproc) - 1))" "$rls_pid" >/dev/null
  opens+=(open_50k_pinned)
fi

start_on rl-server-memory "$server_bin" --listen 127.0.0.1:PORT \
  --metrics 127.0.0.1:MPORT --batches-in-flight "$bif" --log-level warn
RL_PORT=$started_port RL_PID=$started_pid RL_MPORT=$started_mport \
  open_run open_50k_memory \
  --duration "$open_secs" --keep-awake
opens+=(open_50k_memory)

hwm_kb=$(status_kb "$rls_pid" VmHWM)
rss_first=$(head -1 "$out/rss.txt")
rss_last=$(tail -1 "$out/rss.txt")

# ---- the table -----------------------------------------------------------
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2fx", a / b; else printf "-" }'; }
{
  echo "date: $(date -u '+%Y-%m-%d %H:%M UTC')"
  echo "machine: $(nproc) cores, $(lscpu | sed -n 's/^Model name: *//p' | head -1), kernel $(uname -r)"
  echo "redis: $(redis-server --version | sed 's/.*v=\([^ ]*\).*/\1/'), rl-bench: $conns connections x $inflight in flight (closed loop), ${secs}s per run"
  echo
  echo "rl-server: --batches-in-flight $bif; p99 / floor: open-loop p99 over floor_redis's (one blocking Redis round trip per read, the same open loop; _split rows: over floor_redis_split's)"
  echo
  printf '| %-16s | %12s | %9s | %9s | %9s | %7s | %10s | %10s | %9s | %7s | %s |\n' \
    run "decisions/s" "p50 us" "p99 us" "p99/floor" batch "server s/M" \
    "redis s/M" "cmd/dec" "steal %" notes
  printf '|%s|%s|%s|%s|%s|%s|%s|%s|%s|%s|%s|\n' ------------------ \
    -------------: ----------: ----------: ----------: --------: \
    -----------: -----------: ----------: --------: -------
  for n in rl_uniform "${scripts[@]}" base_uniform rl_hot base_hot rl_zipf ceiling \
    floor_ping "${lows[@]}" "${floors[@]}" "${opens[@]}" "${splits[@]}" \
    "${holds[@]}"; do
    case " ${lows[*]} ${floors[*]} ${opens[*]} ${splits[*]} ${holds[*]} " in
      *" $n "*) pf=${pfr[$n]:-$(awk -v a="${p99[$n]:-0}" -v b="${p99[floor_redis]:-0}" \
          'BEGIN { if (b > 0) printf "%.2f", a / b; else printf "-" }')} ;;
      *) pf="-" ;;
    esac
    printf '| %-16s | %12.0f | %9s | %9s | %9s | %7s | %10s | %10s | %9s | %7s | %s |\n' \
      "$n" "${rate[$n]:-0}" "${p50[$n]:--}" "${p99[$n]:--}" "$pf" \
      "${batch[$n]:--}" "${cpu[$n]:--}" "${rcpu[$n]:--}" "${cmds[$n]:--}" \
      "${steal[$n]:--}" "${note[$n]:-}"
  done
  echo
  echo "50k/s rounds (p99 us / server s/M / redis s/M, round by round):"
  for n in "${paired[@]}"; do
    line="  $n:"
    for r in $(seq 1 "$rounds"); do
      line+=" ${p99[$n@$r]:--} / ${cpu[$n@$r]:--} / ${rcpu[$n@$r]:--};"
    done
    echo "${line%;}"
  done
  echo
  echo "rl-server peak RSS (VmHWM): $((hwm_kb / 1024)) MB; RSS during the open loop: first sample $((rss_first / 1024)) MB, last $((rss_last / 1024)) MB ($(tr '\n' ' ' <"$out/rss.txt" | sed 's/ $//') kB)"
  echo
  echo "ratios: uniform $(ratio "${rate[rl_uniform]}" "${rate[base_uniform]}") the baseline," \
    "hot $(ratio "${rate[rl_hot]}" "${rate[base_hot]}") the baseline;" \
    "uniform at $(awk -v a="${rate[rl_uniform]}" -v b="${rate[ceiling]}" 'BEGIN { printf "%.0f%%", 100 * a / b }') of the ceiling," \
    "hot at $(awk -v a="${rate[rl_hot]}" -v b="${rate[ceiling]}" 'BEGIN { printf "%.0f%%", 100 * a / b }')"
  verdict() { if awk "BEGIN { exit !($2) }"; then echo "  met:    $1"; else echo "  MISSED: $1"; fi; }
  echo "targets:"
  verdict "uniform >= 5x baseline" "${rate[rl_uniform]} >= 5 * ${rate[base_uniform]}"
  verdict "hot >= 8x baseline" "${rate[rl_hot]} >= 8 * ${rate[base_hot]}"
  for n in "${opens[@]}"; do
    verdict "$n: 50k/s p99 <= 1 ms (p99 ${p99[$n]} us, steal ${steal[$n]}%)" "${p99[$n]} <= 1000"
  done
  for n in "${lows[@]}" "${floors[@]}" "${opens[@]}" "${splits[@]}"; do
    verdict "$n: no errors (${errors[$n]})" "${errors[$n]} == 0"
  done
  verdict "closed loop: Redis CPU per decision <= 1.0x the ceiling's per INCR (${rcpu[rl_uniform]} vs ${rcpu[ceiling]} s/M)" "${rcpu[rl_uniform]} <= ${rcpu[ceiling]}"
  # targets_50k ROW FLOOR INCR: the 50k/s targets (BENCHMARKS.md, Targets) for ROW, read
  # against the floors of the same rounds and layout.
  targets_50k() {
    verdict "$1: Redis CPU <= 3 s/M (${rcpu[$1]})" "${rcpu[$1]} <= 3"
    verdict "$1: rl-server CPU <= 2.5 s/M (${cpu[$1]})" "${cpu[$1]} <= 2.5"
    verdict "$1: p99 <= 1.3x $2's, median of $rounds rounds' ratios (${pfr[$1]}x)" "${pfr[$1]} <= 1.3"
    echo "against $3 (pipelined INCR per frame, same rounds): rl-server CPU $(ratio "${cpu[$1]}" "${cpu[$3]}"), Redis CPU $(ratio "${rcpu[$1]}" "${rcpu[$3]}")"
  }
  targets_50k open_50k floor_redis floor_incr
  if [ "${#splits[@]}" -gt 0 ]; then
    targets_50k open_50k_split floor_redis_split floor_incr_split
  fi
  verdict "rl-server RSS <= 64 MB ($((hwm_kb / 1024)) MB)" "$hwm_kb <= 65536"
  verdict "no RSS growth over the ${soak}s run (+$(( (rss_last - rss_first) / 1024 )) MB)" "$rss_last - $rss_first <= 2048"
  verdict "every audit: no window over its limit" "$failed == 0"
} | tee "$out/table.md"
log "results in $out"
exit "$failed"
