#!/usr/bin/env bash
# The algorithms side by side, and beside the npm packages that do the
# same job, in one run on this machine (BENCHMARKS.md, "Algorithms"):
#
#   tests/bench/algorithms.sh [RESULTS_DIR]
#
# One limit for all, 10^9 per 1000 s (N/DUR: fixed-window, and the same
# under :sliding-window-counter and :gcra, whose default burst is N; the
# sliding window at 100 per 1000 s, the issue's figure, which 100k uniform
# keys never reach in a row), so that nothing is refused and every uniform
# figure is the cost of an admitted decision. One redis-server with the ratelimit module and two rl-servers
# on it, one deciding with the module (RL.BATCH) and one with the Lua
# script (--redis-module off), each with the three rules. In each of
# $RL_BENCH_ROUNDS rounds (the algorithms' order rotated every round),
# with FLUSHALL before every row so that each starts from an empty Redis:
#   closed loop  rl-bench --rule f|s|g, 4 x 256 in flight, 1 s warmup and
#                $RL_BENCH_SECONDS s, 100k uniform keys and one hot key,
#                through each rl-server: decisions/s, Redis's and
#                rl-server's CPU per decision (utime + stime from
#                /proc/PID/stat over every check sent, warmup included),
#                rl-server's mean store batch (/metrics)
#   open loop    50,000/s, independent arrivals (rl-bench's default), 4
#                connections, 100k uniform keys, $RL_BENCH_OPEN_SECONDS s,
#                through the module's rl-server; before them, in the same
#                round, floor_redis (tests/bench/floor.c) with run.sh's
#                floor_redis row: p50, p99, and p99 over the floor's
#   npm peers    rolling-rate-limiter (a sliding LOG: the sliding window's
#                own algorithm, and the nearest package to the
#                sliding-window-counter) and redis-gcra (GCRA), each
#                driven by tests/bench/npm_peers/PKG.js from one Node
#                process (ioredis, $RL_BENCH_PEER_INFLIGHT promises in
#                flight, 100k uniform keys, the same limit, 1 s warmup and
#                $RL_BENCH_SECONDS s) against a redis-server of their own:
#                decisions/s and Redis CPU per decision by the same method
# Then once, memory: for each algorithm and store path, a fresh Redis and
# rl-server, INFO memory before and after rl-bench has sent
# $RL_BENCH_MEM_REQUESTS checks over 100k uniform keys at 100 per 1000 s
# (every key touched with near certainty, none refused; the callers
# actually present are counted by SCAN): used_memory and RSS growth per
# caller, and MEMORY USAGE of one key. The peers' Redis memory a key at
# the end of their last row is printed beside them, unmeasured otherwise.
# The figures are the medians of the rounds; a ratio (x fixed-window, x the
# peer, p99/floor) is the median of each round's own ratio. The table puts
# each target beside its figure: sliding-window-counter and gcra at least
# 0.8x fixed-window's uniform decisions/s; each at least 10x its npm peer's
# decisions/s at no more Redis CPU per decision; Redis memory per caller
# reported for each, gcra's at most fixed-window's.
#
# The packages are installed (npm install --no-save, once) into
# $RL_BENCH_NPM_DIR (default BUILD/npm_peers): rolling-rate-limiter
# $RL_BENCH_RRL_VERSION (0.4.2) with ioredis 5 (the client its own tests
# use), redis-gcra $RL_BENCH_GCRA_VERSION (0.3.0), which brings its own
# ioredis 4 (it declares ioredis < 5). Without node and npm the peers are
# skipped, and the run says so.
#
# Knobs (defaults take about 7.5 minutes on 2 vCPUs): RL_BENCH_SECONDS (4),
# RL_BENCH_OPEN_SECONDS (6), RL_BENCH_ROUNDS (3), RL_BENCH_CONNECTIONS x
# RL_BENCH_INFLIGHT (4 x 256), RL_BENCH_PEER_INFLIGHT (128),
# RL_BENCH_MEM_REQUESTS (1000000), RL_BENCH_BUILD (build-bench),
# RL_BENCH_PERF (0; 1: a perf profile of round 1's uniform rows). Results
# (each run's JSON and output, the table) go to RESULTS_DIR (default: a
# new directory under /tmp). Not a timed test: exit status 1 when a run
# failed or had errors, else 0; targets are reported, not enforced.
# Loopback only; every process started here is stopped by its pid on exit,
# also on failure or a signal, and every load run is bounded by timeout.
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
secs=${RL_BENCH_SECONDS:-4}
open_secs=${RL_BENCH_OPEN_SECONDS:-6}
rounds=${RL_BENCH_ROUNDS:-3}
conns=${RL_BENCH_CONNECTIONS:-4}
inflight=${RL_BENCH_INFLIGHT:-256}
peer_inflight=${RL_BENCH_PEER_INFLIGHT:-128}
mem_requests=${RL_BENCH_MEM_REQUESTS:-1000000}
rrl_version=${RL_BENCH_RRL_VERSION:-0.4.2}
gcra_version=${RL_BENCH_GCRA_VERSION:-0.3.0}
out=${1:-$(mktemp -d /tmp/rl-bench-algo.XXXXXX)}
mkdir -p "$out"
out=$(realpath "$out")

log() { printf '%s\n' "$*" >&2; }

# lib.sh builds rl-server and rl-bench (Release), and gives pids, cleanup
# (its EXIT trap) and start_redis.
. tests/bench/lib.sh
trap 'exit 130' INT
trap 'exit 143' TERM
cmake --build "$build" -j 2 --target floor_redis rl_redis_module \
  >"$out/build.log" 2>&1 || { cat "$out/build.log"; exit 1; }
npm_dir=${RL_BENCH_NPM_DIR:-$build/npm_peers}
bench_bin=$build/tools/bench/rl-bench
module_so=$build/server/redis_module/ratelimit.so
for tool in redis-server redis-cli jq curl; do
  command -v "$tool" >/dev/null ||
    { log "$tool not found: apt-get install redis-server redis-tools jq curl"; exit 1; }
done

# The limit, and the three rules that carry it: f, s and g (names of one
# letter, so that the keys of the three differ only where their
# algorithms make them: memory per key depends on the key's length). The
# memory fills use 100 per 1000 s instead (about 10 checks a caller, none
# refused): a gcra's key lives until its caller has its whole burst back
# (TAT, plus --expiry-grace-ms), which at 10^9 per 1000 s is 1 us after
# each check: its callers would leave little but the grace to count.
limit_n=1000000000
limit_s=1000
mem_limit=100/1000s
algos=(fixed-window sliding-window-counter gcra sliding-window)
# rules_for LIMIT [LOG_LIMIT]: --rule flags for the algorithms at LIMIT;
# the sliding window (an entry per admission) at LOG_LIMIT, at most
# 1,000,000 (--sliding-window-max): the issue's target row is at limit 100,
# and 100 per 1000 s refuses nothing either at these rates over 100k
# uniform keys (about 15 checks a key in a row); the hot key's row is
# refused after its first 100.
rules_for() {
  rules=(--rule "f=$1" --rule "s=$1:sliding-window-counter" --rule "g=$1:gcra"
    --rule "l=${2:-$1}:sliding-window" --sliding-window-max 1000000)
}
rules_for "$limit_n/${limit_s}s" "100/${limit_s}s"
peers=(rolling-rate-limiter redis-gcra)
declare -A peer_of=([sliding-window-counter]=rolling-rate-limiter
  [gcra]=redis-gcra [sliding-window]=rolling-rate-limiter)
declare -A rule_of=([fixed-window]=f [sliding-window-counter]=s [gcra]=g
  [sliding-window]=l)

failed=0
clk_tck=$(getconf CLK_TCK)
cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }
# per_m TICKS N: CPU seconds per million (us per decision).
per_m() { awk -v t="$1" -v k="$clk_tck" -v d="$2" \
  'BEGIN { if (d > 0) printf "%.3f", t / k / d * 1e6; else printf "-" }'; }
cpu_stat() { awk '/^cpu / { t = 0; for (i = 2; i <= NF; i++) t += $i; print $9, t }' /proc/stat; }
info_field() {
  redis-cli -p "$1" INFO "$2" | tr -d '\r' | sed -n "s/^$3://p"
}
flush() { redis-cli -p "$1" FLUSHALL SYNC >/dev/null; }

# run_child SECONDS CMD...: CMD in the background under timeout (SECONDS,
# then KILL 5 s later), waited for: a signal to this script then reaches
# its trap at once, and cleanup stops CMD by its pid. Returns CMD's status.
run_child() {
  local limit=$1 p rc=0
  shift
  timeout -k 5 "$limit" "$@" &
  p=$!
  pids+=("$p")
  wait "$p" || rc=$?
  unset 'pids[-1]'
  return "$rc"
}

# start_rl NAME REDIS_PORT ARGS...: an rl-server with the three rules and
# /metrics; sets spid, sport, smport.
start_rl() {
  local name=$1 port=$2
  shift 2
  mkdir -p "$out/$name"
  rl_start_ours "$out/$name/server.log" "$out/$name/server.ports" \
    "$build/server/rl-server" --listen 127.0.0.1:0 --metrics 127.0.0.1:0 \
    --redis "127.0.0.1:$port" --log-level warn "${rules[@]}" "$@" ||
    { log "$name did not start"; exit 1; }
  spid=$rl_pid
  pids+=("$spid")
  sport=$(rl_port_of "$out/$name/server.ports" listen)
  smport=$(rl_port_of "$out/$name/server.ports" metrics)
}

# rl-server's batch histogram so far, "sum count".
batch_stat() {
  curl -s --max-time 5 "http://127.0.0.1:$1/metrics" |
    awk '$1 == "rl_batch_size_sum" { s = $2 } $1 == "rl_batch_size_count" { c = $2 }
      END { if (c != "") print s, c; else print "0 0" }'
}

# ---- the npm peers ---------------------------------------------------------
have_peers=0
peer_note=
install_peers() {
  local want have
  if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
    peer_note="node or npm not found: the npm peers are skipped"
    return 1
  fi
  mkdir -p "$npm_dir"
  [ -f "$npm_dir/package.json" ] ||
    echo '{ "name": "rl-npm-peers", "private": true }' >"$npm_dir/package.json"
  want="$rrl_version $gcra_version"
  have=$(cd "$npm_dir" && node -e '
    const v = p => { try { return require(p + "/package.json").version } catch (e) { return "-" } };
    console.log(v("rolling-rate-limiter"), v("redis-gcra"))' 2>/dev/null || true)
  if [ "$have" != "$want" ]; then
    log "== npm install --no-save into $npm_dir"
    # One command for every package: a later --no-save install removes
    # what an earlier one added.
    if ! (cd "$npm_dir" && timeout 300 npm install --no-save --no-audit \
      --no-fund --loglevel=error "rolling-rate-limiter@$rrl_version" \
      "redis-gcra@$gcra_version" "ioredis@5") >"$out/npm.log" 2>&1; then
      peer_note="npm install failed (see $out/npm.log): $(tail -3 "$out/npm.log" | tr '\n' ' ')"
      return 1
    fi
  fi
  return 0
}
if install_peers; then have_peers=1; else log "!! $peer_note"; failed=1; fi

# ---- the servers -----------------------------------------------------------
mkdir -p "$out/redis"
start_redis "$out/redis" --loadmodule "$module_so"
redis_pid=$rpid redis_port=$rport
start_rl rl-module "$redis_port"
mod_pid=$spid mod_port=$sport mod_mport=$smport
start_rl rl-script "$redis_port" --redis-module off
scr_pid=$spid scr_port=$sport scr_mport=$smport
mkdir -p "$out/floor"
rl_start_ours "$out/floor/floor.log" "$out/floor/floor.ports" \
  "$build/tests/bench/floor_redis" --listen 127.0.0.1:0 \
  --redis "127.0.0.1:$redis_port" || { log "floor_redis did not start"; exit 1; }
floor_pid=$rl_pid
pids+=("$floor_pid")
floor_port=$(rl_port_of "$out/floor/floor.ports" listen)
if [ "$have_peers" = 1 ]; then
  mkdir -p "$out/peer-redis"
  start_redis "$out/peer-redis"
  peer_redis_pid=$rpid peer_redis_port=$rport
fi
# Let the stores connect and sample Redis's clock.
sleep 0.5
if [ "$(redis-cli -p "$redis_port" RL.VERSION 2>/dev/null | head -1)" = "" ]; then
  log "the ratelimit module is not loaded"; exit 1
fi

declare -A rate p50 p99 rcpu scpu batch denied errs ccpu

# rl_row NAME PATH RL-BENCH-ARGS...: one rl-bench run through the rl-server
# of PATH (module or script), after FLUSHALL; figures under NAME.
rl_row() {
  local name=$1 path=$2 sp mp port c0 r0 b0 rc=0 f=$out/${1//\//_}
  shift 2
  if [ "$path" = module ]; then sp=$mod_pid port=$mod_port mp=$mod_mport
  else sp=$scr_pid port=$scr_port mp=$scr_mport; fi
  flush "$redis_port"
  log "== $name: rl-bench $*"
  c0=$(cpu_ticks "$sp") r0=$(cpu_ticks "$redis_pid") b0=$(batch_stat "$mp")
  perf_start "$name" "$sp"
  run_child $((secs + open_secs + 60)) "$bench_bin" \
    --server "127.0.0.1:$port" --no-progress --json "$f.json" "$@" \
    >"$f.txt" 2>&1 || rc=$?
  perf_end
  tail -3 "$f.txt" >&2
  record_rl "$name" "$sp" "$c0" "$r0" "$b0" "$(batch_stat "$mp")" "$rc"
}

# With RL_BENCH_PERF=1, perf samples Redis and the rl-server (cpu-clock,
# this VM has no hardware counters) through the measured seconds of each
# closed-loop uniform row of round 1, and the run ends with each one's top
# symbols: where an algorithm's time goes. perf costs CPU itself, so such
# a run is for the profile, not for the table.
perf_pid=
perf_start() {
  [ "${RL_BENCH_PERF:-0}" = 1 ] && [[ $1 == */uniform@1 ]] || return 0
  mkdir -p "$out/perf"
  (sleep 1; exec perf record -q -F 999 -p "$redis_pid,$2" \
    -o "$out/perf/${1//\//_}.data" -- sleep "$secs") >/dev/null 2>&1 &
  perf_pid=$!
  pids+=("$perf_pid")
}
perf_end() {
  [ -n "$perf_pid" ] || return 0
  wait "$perf_pid" || true
  unset 'pids[-1]'
  perf_pid=
}

# record_rl NAME SERVER_PID C0 R0 B0 B1 RC: NAME's figures from its JSON
# (NAME, a slash for each _) and the CPU and batch counters since C0, R0,
# B0. A run with errors or answers from the fail-open policy (rl-server
# found the store unavailable: no reply within --redis-timeout-ms, which
# a stall of this shared VM can cause) is reported and its figures left
# out: they are not the algorithm's decisions.
record_rl() {
  local name=$1 j=$out/${1//\//_}.json sent
  if [ "$7" != 0 ] || [ ! -s "$j" ]; then
    log "!! $name failed (exit $7)"
    failed=1
    errs[$name]=failed
    return 0
  fi
  errs[$name]=$(jq '.errors + .failed_open' "$j")
  if [ "${errs[$name]}" != 0 ]; then
    log "!! $name: $(jq .errors "$j") errors, $(jq .failed_open "$j") answered by the fail-open policy: left out"
    failed=1
    return 0
  fi
  sent=$(jq .sent_total "$j")
  rate[$name]=$(jq .decisions_per_sec "$j")
  p50[$name]=$(jq .p50_us "$j")
  p99[$name]=$(jq .p99_us "$j")
  denied[$name]=$(jq '.denied / ([.decisions, 1] | max)' "$j")
  rcpu[$name]=$(per_m $(($(cpu_ticks "$redis_pid") - $4)) "$sent")
  if [ "$2" != - ]; then
    scpu[$name]=$(per_m $(($(cpu_ticks "$2") - $3)) "$sent")
    batch[$name]=$(awk -v a="$5" -v b="$6" 'BEGIN { split(a, x, " ");
      split(b, y, " "); c = y[2] - x[2];
      if (c > 0) printf "%.1f", (y[1] - x[1]) / c; else printf "-" }')
  fi
}

# floor_row NAME: run.sh's floor_redis row (one blocking PING to Redis per
# read, unaudited) at 50k/s.
floor_row() {
  local name=$1 c0 r0 rc=0
  log "== $name: floor_redis at 50000/s"
  c0=$(cpu_ticks "$floor_pid") r0=$(cpu_ticks "$redis_pid")
  run_child $((open_secs + 60)) "$bench_bin" --server "127.0.0.1:$floor_port" \
    --no-progress --json "$out/$name.json" --connections 4 --warmup 1 \
    --keys 100000 --dist uniform --limit 100 --window 60 --rate 50000 \
    --duration "$open_secs" >"$out/$name.txt" 2>&1 || rc=$?
  tail -3 "$out/$name.txt" >&2
  record_rl "$name" "$floor_pid" "$c0" "$r0" "0 0" "0 0" "$rc"
  batch[$name]=-
}

# peer_row NAME PKG: the npm package PKG's driver against its own Redis,
# after FLUSHALL; its Redis's CPU per check sent, the Node process's CPU
# (the application, the package and its client), and the Redis memory
# its keys hold at the end (bytes a key; a sliding log's key holds one
# entry per attempt in its interval).
peer_row() {
  local name=$1 pkg=$2 r0 m0 rc=0 j=$out/$1.json sent keys
  flush "$peer_redis_port"
  m0=$(info_field "$peer_redis_port" memory used_memory)
  log "== $name: node npm_peers/$pkg.js, $peer_inflight in flight"
  r0=$(cpu_ticks "$peer_redis_pid")
  run_child $((secs + 60)) node "$root/tests/bench/npm_peers/$pkg.js" \
    --modules "$npm_dir" --port "$peer_redis_port" \
    --concurrency "$peer_inflight" --keys 100000 --warmup 1 \
    --duration "$secs" --limit "$limit_n" --period-ms $((limit_s * 1000)) \
    --json "$j" >"$out/$name.txt" 2>&1 || rc=$?
  cat "$out/$name.txt" >&2
  if [ "$rc" != 0 ] || [ ! -s "$j" ]; then
    log "!! $name failed (exit $rc)"
    failed=1
    errs[$name]=failed
    return 0
  fi
  errs[$name]=$(jq .errors "$j")
  if [ "${errs[$name]}" != 0 ]; then
    log "!! $name: ${errs[$name]} errors ($(jq -r .last_error "$j")): left out"
    failed=1
    return 0
  fi
  sent=$(jq .sent_total "$j")
  rate[$name]=$(jq .decisions_per_sec "$j")
  p50[$name]=$(jq .p50_us "$j")
  p99[$name]=$(jq .p99_us "$j")
  denied[$name]=$(jq '.denied / ([.decisions, 1] | max)' "$j")
  rcpu[$name]=$(per_m $(($(cpu_ticks "$peer_redis_pid") - r0)) "$sent")
  ccpu[$name]=$(jq '.cpu_us / .sent_total * 1000 | round / 1000' "$j")
  keys=$(redis-cli -p "$peer_redis_port" DBSIZE)
  peer_client[$pkg]=$(jq -r .client "$j")
  peer_mem[$pkg]=$(awk -v a="$m0" -v b="$(info_field "$peer_redis_port" memory used_memory)" \
    -v k="$keys" -v s="$sent" 'BEGIN { if (k > 0) printf "%.0f B a key over %d keys (%.1f checks a key)", (b - a) / k, k, s / k }')
  peer_type[$pkg]=$(redis-cli -p "$peer_redis_port" TYPE "$(redis-cli -p "$peer_redis_port" RANDOMKEY)")
}
declare -A peer_client peer_mem peer_type

uptime_before=$(uptime)
steal0=$(cpu_stat)
t_start=$(date +%s)
log "== $uptime_before"

# ---- rounds ----------------------------------------------------------------
for r in $(seq 1 "$rounds"); do
  # The algorithms' order rotated each round, so that none always runs
  # first on a freshly flushed Redis or last in a round.
  k=$(((r - 1) % 3))
  order=("${algos[@]:k}" "${algos[@]:0:k}")
  log "== round $r of $rounds: ${order[*]}"
  # The three algorithms back to back for each store path and key spread:
  # the rows a ratio compares are seconds apart, not a minute.
  for path in module script; do
    for dist in uniform hot; do
      for a in "${order[@]}"; do
        rl_row "$a/$path/$dist@$r" "$path" --rule "${rule_of[$a]}" \
          --connections "$conns" --inflight "$inflight" --warmup 1 \
          --duration "$secs" --keys 100000 --dist "$dist"
      done
    done
  done
  floor_row "floor_redis@$r"
  for a in "${order[@]}"; do
    rl_row "$a/open@$r" module --rule "${rule_of[$a]}" --connections 4 --warmup 1 \
      --keys 100000 --dist uniform --rate 50000 --duration "$open_secs" \
      --timeline-csv "$out/$a.open@$r.timeline.csv"
  done
  if [ "$have_peers" = 1 ]; then
    porder=("${peers[@]}")
    [ $((r % 2)) = 0 ] && porder=("${peers[1]}" "${peers[0]}")
    for p in "${porder[@]}"; do peer_row "$p@$r" "$p"; done
  fi
done

# ---- memory ----------------------------------------------------------------
# A fresh Redis and rl-server for each algorithm and path: RSS growth is
# then the fill's alone (after a FLUSHALL the allocator keeps its pages).
declare -A mem_used mem_rss mem_callers mem_usage mem_enc mem_keys mem_refused
for a in "${algos[@]}"; do
  for path in module script; do
    n="$a/$path"
    log "== memory: $n, $mem_requests checks over 100k keys"
    d=$out/mem/${a}-$path
    mkdir -p "$d"
    start_redis "$d" --loadmodule "$module_so"
    mrp=$rport mrpid=$rpid
    args=()
    [ "$path" = script ] && args=(--redis-module off)
    rules_for "$mem_limit"
    start_rl "mem/${a}-$path/rl" "$mrp" "${args[@]}"
    msp=$spid
    sleep 0.5
    u0=$(info_field "$mrp" memory used_memory)
    s0=$(info_field "$mrp" memory used_memory_rss)
    rc=0
    run_child 120 "$bench_bin" --server "127.0.0.1:$sport" --no-progress \
      --rule "${rule_of[$a]}" --connections "$conns" --inflight "$inflight" \
      --keys 100000 --dist uniform --requests "$mem_requests" \
      --duration 100 --json "$d/fill.json" >"$d/fill.txt" 2>&1 || rc=$?
    if [ "$rc" != 0 ]; then
      log "!! memory fill $n failed (exit $rc)"
      failed=1
    else
      u1=$(info_field "$mrp" memory used_memory)
      s1=$(info_field "$mrp" memory used_memory_rss)
      redis-cli -p "$mrp" --scan >"$d/keys.txt"
      mem_keys[$n]=$(wc -l <"$d/keys.txt")
      mem_callers[$n]=$(sed -n 's/^[^{]*{\([^}]*\)}.*/\1/p' "$d/keys.txt" | sort -u | wc -l)
      mem_used[$n]=$(awk -v a="$u0" -v b="$u1" -v c="${mem_callers[$n]}" 'BEGIN { printf "%.1f", (b - a) / c }')
      mem_rss[$n]=$(awk -v a="$s0" -v b="$s1" -v c="${mem_callers[$n]}" 'BEGIN { printf "%.1f", (b - a) / c }')
      key=$(grep -m1 '{bench:' "$d/keys.txt")
      mem_usage[$n]=$(redis-cli -p "$mrp" MEMORY USAGE "$key")
      mem_enc[$n]="$(redis-cli -p "$mrp" TYPE "$key")/$(redis-cli -p "$mrp" OBJECT ENCODING "$key")"
      mem_refused[$n]=$(jq .denied "$d/fill.json")
    fi
    # Stopped now, by pid, and taken off the list.
    for p in "$msp" "$mrpid"; do
      kill -TERM "$p" 2>/dev/null || true
      wait "$p" 2>/dev/null || true
      for i in "${!pids[@]}"; do [ "${pids[$i]}" = "$p" ] && unset "pids[$i]"; done
    done
  done
done

uptime_after=$(uptime)
steal_pct=$(awk -v a="$steal0" -v b="$(cpu_stat)" 'BEGIN { split(a, x, " ");
  split(b, y, " "); d = y[2] - x[2]; printf "%.1f", (d > 0 ? 100 * (y[1] - x[1]) / d : 0) }')
t_end=$(date +%s)

# ---- medians ---------------------------------------------------------------
median_of() { tr ' ' '\n' | awk '/^[0-9.]+$/' | sort -g |
  awk '{ v[NR] = $1 } END { if (NR == 0) { print "-"; exit }
    if (NR % 2) { print v[(NR + 1) / 2]; exit }
    m = (v[NR / 2] + v[NR / 2 + 1]) / 2
    if (m == int(m)) printf "%d\n", m
    else { s = sprintf("%.3f", m); sub(/0+$/, "", s); print s } }'; }
# median_rows NAME: NAME's figures, the medians of NAME@1..NAME@rounds
# (those kept: kept[NAME] says how many).
median_rows() {
  local n=$1 a r vals
  for a in rate p50 p99 rcpu scpu batch denied ccpu; do
    local -n arr=$a
    vals=
    for r in $(seq 1 "$rounds"); do vals+=" ${arr[$n@$r]:--}"; done
    arr[$n]=$(median_of <<<"$vals")
  done
  kept[$n]=0
  for r in $(seq 1 "$rounds"); do
    [ -z "${rate[$n@$r]:-}" ] || kept[$n]=$((kept[$n] + 1))
  done
}
declare -A kept
# ratio_med A B FIELD: the median over rounds of A@r's FIELD over B@r's.
ratio_med() {
  local -n arr=$3
  local r vals=
  for r in $(seq 1 "$rounds"); do
    vals+=" $(awk -v a="${arr[$1@$r]:-0}" -v b="${arr[$2@$r]:-0}" \
      'BEGIN { if (a > 0 && b > 0) printf "%.3f", a / b; else printf "-" }')"
  done
  median_of <<<"$vals"
}
rows=(floor_redis)
for a in "${algos[@]}"; do
  rows+=("$a/open")
  for path in module script; do rows+=("$a/$path/uniform" "$a/$path/hot"); done
done
[ "$have_peers" = 1 ] && rows+=("${peers[@]}")
for n in "${rows[@]}"; do median_rows "$n"; done

# ---- the tables ------------------------------------------------------------
fmt_rate() { awk -v v="$1" 'BEGIN { if (v ~ /^[0-9.]+$/) printf "%.0f", v; else printf "-" }'; }
x() { [ "$1" = - ] && echo - || echo "${1}x"; }
verdict() { if awk "BEGIN { exit !($1) }" 2>/dev/null; then echo met; else echo MISSED; fi; }
{
  echo "date: $(date -u '+%Y-%m-%d %H:%M UTC'), $((t_end - t_start)) s; commit $(git rev-parse --short HEAD 2>/dev/null || echo -)"
  echo "machine: $(nproc) vCPUs, $(lscpu | sed -n 's/^Model name: *//p' | head -1), kernel $(uname -r), redis $(redis-server --version | sed 's/.*v=\([^ ]*\).*/\1/'), node $(node --version 2>/dev/null || echo -)"
  echo "load before: ${uptime_before#*load average: }; after: ${uptime_after#*load average: }; steal over the run ${steal_pct} %"
  echo "rows left out (errors, or answers from the fail-open policy: Redis unanswered for --redis-timeout-ms): $(for n in "${!errs[@]}"; do [ "${errs[$n]}" = 0 ] || printf '%s (%s) ' "$n" "${errs[$n]}"; done)"
  echo "limit: $limit_n/${limit_s}s for every algorithm (gcra: burst $limit_n) but the sliding window's, 100/${limit_s}s; rounds $rounds, closed loops ${conns} x ${inflight}, 1 s warmup + ${secs} s; open loops ${open_secs} s; FLUSHALL before every row; figures are medians of the rounds, ratios medians of each round's ratio"
  echo
  echo "Closed loop through one rl-server (module: RL.BATCH; script: --redis-module off), s/M = CPU us per decision:"
  echo
  echo "| algorithm | store | uniform dec/s | x fixed | hot dec/s | x fixed | Redis s/M uniform | Redis s/M hot | rl-server s/M uniform | rl-server s/M hot | batch uniform | refused | rounds kept uniform / hot |"
  echo "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
  for a in "${algos[@]}"; do
    for path in module script; do
      u="$a/$path/uniform" h="$a/$path/hot"
      echo "| $a | $path | $(fmt_rate "${rate[$u]}") | $(x "$(ratio_med "$u" "fixed-window/$path/uniform" rate)") | $(fmt_rate "${rate[$h]}") | $(x "$(ratio_med "$h" "fixed-window/$path/hot" rate)") | ${rcpu[$u]} | ${rcpu[$h]} | ${scpu[$u]} | ${scpu[$h]} | ${batch[$u]} | ${denied[$u]} | ${kept[$u]} / ${kept[$h]} |"
    done
  done
  echo
  echo "Open loop, 50,000/s, independent arrivals, 4 connections, 100k uniform keys, the module's rl-server; floor_redis: run.sh's floor row in the same rounds:"
  echo
  echo "| row | p50 us | p99 us | p99/floor | rl-server s/M | Redis s/M | batch | rounds kept |"
  echo "|---|---:|---:|---:|---:|---:|---:|---:|"
  for n in floor_redis "${algos[@]/%//open}"; do
    pf=-
    [ "$n" = floor_redis ] || pf=$(ratio_med "$n" floor_redis p99)
    echo "| ${n%/open} | ${p50[$n]} | ${p99[$n]} | $pf | ${scpu[$n]} | ${rcpu[$n]} | ${batch[$n]} | ${kept[$n]} |"
  done
  echo
  echo "Redis memory per active caller ($mem_requests checks over 100k uniform keys at $mem_limit into a fresh Redis; callers counted by SCAN):"
  echo
  echo "| algorithm | store | callers | keys | used_memory B/caller | MB per 100k callers | RSS B/caller | MEMORY USAGE of a key | type/encoding | refused |"
  echo "|---|---|---:|---:|---:|---:|---:|---:|---|---:|"
  for a in "${algos[@]}"; do
    for path in module script; do
      n="$a/$path"
      echo "| $a | $path | ${mem_callers[$n]:--} | ${mem_keys[$n]:--} | ${mem_used[$n]:--} | $(awk -v v="${mem_used[$n]:-0}" 'BEGIN { printf "%.1f", v * 1e5 / 1048576 }') | ${mem_rss[$n]:--} | ${mem_usage[$n]:--} | ${mem_enc[$n]:--} | ${mem_refused[$n]:--} |"
    done
  done
  echo
  if [ "$have_peers" = 1 ]; then
    echo "npm peers: one Node process, $peer_inflight promises in flight, 100k uniform keys, the same limit, a redis-server of their own; rolling-rate-limiter is a sliding LOG (a sorted set of every attempt per caller: the exact rolling window), not a counter, compared with the sliding-window-counter as the nearest package for the job:"
    echo
    echo "| ours | npm peer (client) | ours dec/s module / script | peer dec/s | ours / peer module / script | Redis s/M ours module / script | Redis s/M peer | peer Node s/M | peer p50 / p99 us | peer's Redis memory |"
    echo "|---|---|---:|---:|---:|---:|---:|---:|---:|---|"
    for a in sliding-window-counter gcra sliding-window; do
      p=${peer_of[$a]}
      echo "| $a | $p ${peer_type[$p]:+(${peer_type[$p]}) }${peer_client[$p]:-} | $(fmt_rate "${rate[$a/module/uniform]}") / $(fmt_rate "${rate[$a/script/uniform]}") | $(fmt_rate "${rate[$p]}") | $(x "$(ratio_med "$a/module/uniform" "$p" rate)") / $(x "$(ratio_med "$a/script/uniform" "$p" rate)") | ${rcpu[$a/module/uniform]} / ${rcpu[$a/script/uniform]} | ${rcpu[$p]} | ${ccpu[$p]} | $(fmt_rate "${p50[$p]}") / $(fmt_rate "${p99[$p]}") | ${peer_mem[$p]:--} |"
    done
  else
    echo "npm peers: skipped: $peer_note"
  fi
  echo
  echo "Targets:"
  echo
  echo "| target | figure | status |"
  echo "|---|---|---|"
  # The issue's targets: 0.8x for the counter and the gcra, 0.4x for the
  # sliding window (its log, at limit 100).
  for a in sliding-window-counter gcra sliding-window; do
    want=0.8
    [ "$a" = sliding-window ] && want=0.4
    for path in module script; do
      v=$(ratio_med "$a/$path/uniform" "fixed-window/$path/uniform" rate)
      echo "| $a ($path) uniform decisions/s >= ${want}x fixed-window's | ${v}x ($(fmt_rate "${rate[$a/$path/uniform]}") against $(fmt_rate "${rate[fixed-window/$path/uniform]}")) | $(verdict "$v >= $want") |"
    done
  done
  if [ "$have_peers" = 1 ]; then
    for a in sliding-window-counter gcra sliding-window; do
      p=${peer_of[$a]}
      for path in module script; do
        v=$(ratio_med "$a/$path/uniform" "$p" rate)
        echo "| $a ($path) >= 10x $p's decisions/s | ${v}x | $(verdict "$v >= 10") |"
        echo "| $a ($path) Redis CPU per decision <= $p's | ${rcpu[$a/$path/uniform]} against ${rcpu[$p]} s/M ($(awk -v a="${rcpu[$a/$path/uniform]}" -v b="${rcpu[$p]}" 'BEGIN { if (b > 0) printf "%.2fx", a / b; else printf "-" }')) | $(verdict "${rcpu[$a/$path/uniform]} <= ${rcpu[$p]}") |"
      done
    done
  fi
  for a in "${algos[@]}"; do
    for path in module script; do
      echo "| $a ($path) Redis memory per active caller reported | ${mem_used[$a/$path]:--} B ($(awk -v v="${mem_used[$a/$path]:-0}" 'BEGIN { printf "%.1f", v * 1e5 / 1048576 }') MB per 100k) | $([ -n "${mem_used[$a/$path]:-}" ] && echo met || echo MISSED) |"
    done
  done
  for path in module script; do
    echo "| gcra ($path) memory per caller <= fixed-window's | ${mem_used[gcra/$path]:--} against ${mem_used[fixed-window/$path]:--} B | $(verdict "${mem_used[gcra/$path]:-1} <= ${mem_used[fixed-window/$path]:-0}") |"
  done
  echo
  echo "Rounds (uniform dec/s module / script; Redis s/M module / script; open p99 us):"
  for a in "${algos[@]}"; do
    line="  $a:"
    for r in $(seq 1 "$rounds"); do
      line+=" $(fmt_rate "${rate[$a/module/uniform@$r]:--}") / $(fmt_rate "${rate[$a/script/uniform@$r]:--}"); ${rcpu[$a/module/uniform@$r]:--} / ${rcpu[$a/script/uniform@$r]:--}; ${p99[$a/open@$r]:--} |"
    done
    echo "${line% |}"
  done
  line="  floor_redis p99:"
  for r in $(seq 1 "$rounds"); do line+=" ${p99[floor_redis@$r]:--}"; done
  echo "$line"
  if [ "$have_peers" = 1 ]; then
    for p in "${peers[@]}"; do
      line="  $p dec/s; Redis s/M:"
      for r in $(seq 1 "$rounds"); do
        line+=" $(fmt_rate "${rate[$p@$r]:--}"); ${rcpu[$p@$r]:--} |"
      done
      echo "${line% |}"
    done
  fi
} | tee "$out/table.md"
# perf_groups FILE SM: Redis's samples in FILE by what they do, % of its
# own and, of SM (its CPU s/M in that row, perf's cost included), us per
# decision (symbols grouped by name; the Lua interpreter's are unnamed
# addresses in redis-server, counted as Lua).
perf_groups() {
  perf report -i "$1" --comm redis-server --no-children --sort dso,sym \
    --percentage relative --stdio 2>/dev/null | grep -E '^ +[0-9]' |
    awk -v sm="$2" '
    { p = $1; sub("%", "", p); dso = $2; sym = $NF
      if (dso ~ /kernel/) k = "kernel (system calls, wake-ups)"
      else if (sym ~ /^(dictFind|dictSdsKeyCompare|dictSdsHash|lookupKey|siphash|dbAdd|dictAddRaw|dictRehash|_dictRehashStep|expireIfNeeded|getExpire|setExpire|removeExpire|keyIsExpired|dictFetchValue|dictExpandIfNeeded|_dictKeyIndex|dictDelete|dictGenericDelete|setKey|genericSetKey|dbOverwrite|dictReplace|dictSetKey|activeExpireCycle|activeExpireCycleTryExpire|dbSyncDelete|deleteExpiredKeyAndPropagate)$/) k = "keyspace (lookups, expiries)"
      else if (dso ~ /ratelimit\.so/) k = "the module"
      else if (dso ~ /jemalloc/ || sym ~ /^(zmalloc|zfree|zrealloc|zcalloc|ztrymalloc|malloc|free|realloc)/) k = "allocation"
      else if (sym ~ /(printf|strtod|mpn|hack_digit|round_and_return|ld2string|string2ll|ll2string|d2string|fpconv)/) k = "numbers to and from text"
      else if (sym ~ /^0x/ || sym ~ /^lua/ || sym ~ /^(evalGenericCommand|luaRedis|redisProtocolToLuaType|scriptCall)/) k = "Lua"
      else if (sym ~ /^(processMultibulkBuffer|processInputBuffer|createStringObject|createEmbeddedStringObject|createRawStringObject|decrRefCount|incrRefCount|tryObjectEncoding|sdsnewlen|_sdsnewlen|sdsMakeRoomFor|sdsfree|freeClientArgv|resetClient|call|processCommand|lookupCommand|readQueryFromClient|addReply|_addReply|addReplyLongLong|_addReplyToBufferOrList|prepareClientToWrite|writeToClient|_writeToClient|RM_)/ || sym ~ /writev|__libc_read/) k = "Redis: arguments, replies, module API"
      else k = "other"
      s[k] += p }
    END { for (k in s) printf "    %5.1f %%  %5.2f us  %s\n", s[k],
      (sm ~ /^[0-9.]+$/ ? s[k] * sm / 100 : 0), k }' | sort -rn || true
}
if [ "${RL_BENCH_PERF:-0}" = 1 ]; then
  for f in "$out"/perf/*.data; do
    [ -s "$f" ] || continue
    echo
    n=$(basename "$f" .data)
    echo "perf, $n: Redis's samples by what they do (Redis ${rcpu[${n//_//}]:--} s/M in this row)"
    perf_groups "$f" "${rcpu[${n//_//}]:-}"
    echo "  top symbols (comm, dso, symbol; % of all samples, Redis's and rl-server's)"
    perf report -i "$f" --no-children --sort comm,dso,sym --stdio 2>/dev/null |
      grep -E '^ +[0-9]' | head -18 || true
  done | tee "$out/profile.txt"
fi
log "results in $out"
exit "$failed"
