#!/usr/bin/env bash
# rl-server --threads N (server/loops.c): decisions per second and CPU per
# decision as the loops of one process grow, side by side in one run
# (BENCHMARKS.md, "Threads"):
#
#   tests/bench/threads.sh [RESULTS_DIR]
#
# For N = 1, 2, 4, ... and the host's cores (nproc; RL_BENCH_THREADS="1 2
# 3" for another list), on the memory store and on a private Redis with
# the ratelimit module (RL.BATCH), each run against an rl-server
# --threads N of its own:
#   closed  rl-bench closed loop, RL_BENCH_CONNECTIONS (8) connections per
#           loop x RL_BENCH_INFLIGHT (128) in flight: each loop as loaded as
#           the one loop at N = 1 (the hand-off pins a connection to a loop)
#   open    rl-bench open loop, independent arrivals (--arrivals each), at
#           RL_BENCH_RATE (50000)/s per loop over 4 connections per loop
# and each of these against two rl-server processes of one loop each on
# one port (--reuseport: the kernel's hash spreads the connections),
# beside --threads 2: what two loops cost on this host without sharing a
# process.
# Every run: 100k uniform keys, --audit, 1 s of warmup and
# RL_BENCH_SECONDS (6) measured. Every decision is the same work, an
# allowed increment of a counter that exists: a limit of 10^9 per hour,
# and before each run (Redis flushed first) a pass that is not measured
# makes its counters (12 requests a key); a limit reached, or a window
# begun, mid-run would make a row's decisions cheaper or dearer than
# another's at another rate. (So the audit finds no double count; whether
# the loops count exactly is e2e_threads' to test.) CPU per
# decision: utime + stime (/proc/PID/stat) of rl-server (both processes for
# reuseport) and of Redis over the whole run, warmup included, over every
# request sent. The runs go in RL_BENCH_ROUNDS (3) rounds, even rounds in
# the reverse order of odd ones; each figure is the median of its rounds,
# xN1 the ratio of a row's median CPU per decision to N = 1's (same store
# and mode): rl-server's, and rl-server's plus Redis's; batch, rl-server's
# mean store batch over the run (rl_batch_size on /metrics); other %, the
# CPU every other process on the machine took meanwhile (/proc/stat's busy
# time less ours), in % of all CPUs: a shared machine's noise, per run.
# rl-bench is one thread: a run has ceil(N / RL_BENCH_LOOPS_PER_CLIENT (2))
# of them in parallel, each with its share of the connections and of the
# rate and 100k keys of a prefix of its own (so each audit is exact);
# decisions/s is their sum, p50 their median, p99 their most. Where the
# host has more cores than N + 1, rl-server and Redis run on CPUs 0..N and
# rl-bench on the rest (taskset); otherwise everything shares every CPU,
# as the output says.
# After each N > 1 run of the last round, rl_loop_connections{loop=...}
# from /metrics (read 1 s before the run's end) shows how the hand-off
# spread the connections; for reuseport, each process's
# rl_connections_open.
# The memory store is one table per process (store/memory.c), exact
# whichever loop counts; two --reuseport processes have one each.
# About 5 minutes at the defaults on 2 vCPUs (12 runs a round; on 16
# cores 24, about 10 minutes: RL_BENCH_SECONDS and RL_BENCH_THREADS bound
# it); JSON and
# logs of every run in RESULTS_DIR (default: a new directory under /tmp).
# Exit status 1 when a run failed or its audit found a window over its
# limit. Loopback only; what it starts it stops by pid.
set -euo pipefail
cd "$(dirname "$0")/../.."
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
secs=${RL_BENCH_SECONDS:-6}
rounds=${RL_BENCH_ROUNDS:-3}
cpl=${RL_BENCH_CONNECTIONS:-8}
inflight=${RL_BENCH_INFLIGHT:-128}
rate_pl=${RL_BENCH_RATE:-50000}
lpc=${RL_BENCH_LOOPS_PER_CLIENT:-2}
cores=$(nproc)
if [ -n "${RL_BENCH_THREADS:-}" ]; then
  read -r -a ns <<<"$RL_BENCH_THREADS"
else
  ns=()
  for ((n = 1; n < cores; n *= 2)); do ns+=("$n"); done
  ns+=("$cores")
fi
out=${1:-$(mktemp -d /tmp/rl-threads.XXXXXX)}
mkdir -p "$out"
for tool in redis-server redis-cli curl; do
  command -v "$tool" >/dev/null ||
    { echo "$tool not found: apt-get install redis-server redis-tools curl" >&2; exit 1; }
done

log() { printf '%s\n' "$*" >&2; }
log "== building Release in ${RL_BENCH_BUILD:-build-bench}"
. tests/bench/lib.sh
cmake --build "$build" -j 2 --target rl_redis_module >/dev/null
bench_bin=$build/tools/bench/rl-bench

start_redis "$out" --loadmodule "$build/server/redis_module/ratelimit.so"

# stop PID...: stops rl-servers (SIGTERM, then waits) and forgets them.
stop() {
  local p q keep=()
  for p in "$@"; do kill -TERM "$p" 2>/dev/null || true; done
  for p in "$@"; do wait "$p" 2>/dev/null || true; done
  for q in "${pids[@]}"; do
    for p in "$@"; do [ "$q" = "$p" ] && continue 2; done
    keep+=("$q")
  done
  pids=("${keep[@]}")
}

# batches MPORT...: "sum count" of rl_batch_size (store batches), summed
# over the /metrics pages on MPORT...
batches() {
  local p
  for p in "$@"; do
    curl -s --max-time 2 "http://127.0.0.1:$p/metrics" || true
  done | awk '$1 == "rl_batch_size_sum" { s += $2 } $1 == "rl_batch_size_count" { c += $2 }
    END { print s + 0, c + 0 }'
}

# sys: "busy total" ticks of every CPU so far (/proc/stat; busy: all but
# idle and iowait); reaped: the CPU ticks of this shell's reaped children
# (the rl-bench runs, once waited for).
sys() { awk '/^cpu / { t = 0; for (i = 2; i <= 9; i++) t += $i; print t - $5 - $6, t }' /proc/stat; }
reaped() { awk '{ print $16 + $17 }' "/proc/$$/stat"; }

# healthy MPORT: waits (up to 5 s) until /healthz on MPORT answers 200:
# the store is up and the switches read.
healthy() {
  local i
  for i in $(seq 1 500); do
    [ "$(curl -s -o /dev/null -w '%{http_code}' --max-time 1 \
      "http://127.0.0.1:$1/healthz")" = 200 ] && return 0
    sleep 0.01
  done
  log "rl-server on metrics port $1 not healthy after 5 s"
  return 1
}

# Where rl-bench runs: apart from the service when the host has the cores.
pinned_any=0
placement() {
  svc_cpus="0-$((cores - 1))"
  cli_wrap=()
  if [ "$cores" -gt "$(($1 + 1))" ] && command -v taskset >/dev/null; then
    svc_cpus="0-$1"
    cli_wrap=(taskset -c "$(($1 + 1))-$((cores - 1))")
    pinned_any=1
  fi
}

declare -A rate scpu rcpu p50 p99 over errs clients batch other
failed=0
key_opts=(--keys 100000 --dist uniform --limit 1000000000 --window 3600)

# run ROW STORE MODE N HOW ROUND: one run; ROW names its figures (STORE
# memory or redis, MODE closed or open, HOW threads (one process of N
# loops) or reuseport (N processes of one loop on one port)).
run() {
  local row=$1 store=$2 mode=$3 n=$4 how=$5 r=$6
  local dir="$out/${row//\//_}@$r" sargs=() spids=() mports=() port k i
  local c0=0 r0 c1=0 d=0 rc conns crate sampler='' p q b0 b1 s0 s1 k0 k1
  mkdir -p "$dir"
  [ "$store" = redis ] && sargs=(--redis "127.0.0.1:$rport")
  if [ "$how" = threads ]; then
    start_server "$dir" --metrics 127.0.0.1:0 --threads "$n" "${sargs[@]}"
    spids=("$spid") mports=("$smport") port=$sport
  else
    start_server "$dir" --metrics 127.0.0.1:0 --reuseport "${sargs[@]}"
    spids=("$spid") mports=("$smport") port=$sport
    for ((i = 1; i < n; i++)); do
      start_server "$dir" --metrics 127.0.0.1:0 --reuseport "${sargs[@]}" \
        --listen "127.0.0.1:$port"
      spids+=("$spid") mports+=("$smport")
    done
  fi
  for p in "${mports[@]}"; do healthy "$p" || failed=1; done
  if [ "$store" = redis ]; then
    redis-cli -p "$rport" FLUSHALL >/dev/null
  fi
  placement "$n"
  for p in "${spids[@]}" "$rpid"; do
    taskset -apc "$svc_cpus" "$p" >/dev/null 2>&1 || true
  done
  # The clients: ceil(N / lpc), each its share of connections and rate.
  k=$(((n + lpc - 1) / lpc))
  if [ "$mode" = closed ]; then
    conns=$(((cpl * n + k - 1) / k))
    margs=(--connections "$conns" --inflight "$inflight")
  else
    conns=$(((4 * n + k - 1) / k))
    crate=$((rate_pl * n / k))
    margs=(--connections "$conns" --rate "$crate")
  fi
  log "== $row round $r: $k x ${cli_wrap[*]:+${cli_wrap[*]} }rl-bench ${margs[*]} (service on CPUs $svc_cpus)"
  # Each client's counters, made before the run (not measured): 12
  # requests a key, over enough connections to reach every loop (and both
  # --reuseport processes, each a store of its own on memory).
  q=()
  for ((i = 1; i <= k; i++)); do
    "${cli_wrap[@]}" "$bench_bin" --server "127.0.0.1:$port" --no-progress \
      --key-prefix "c$i:" "${key_opts[@]}" --connections "$((8 * n))" \
      --inflight 64 --requests 1200000 >"$dir/pre$i.txt" 2>&1 &
    q+=($!)
  done
  for p in "${q[@]}"; do
    wait "$p" || { log "!! $row round $r: the pass before failed; see $dir/pre*.txt"; failed=1; }
  done
  if [ "$r" = "$rounds" ] && { [ "$n" -gt 1 ] || [ "$how" != threads ]; }; then
    (
      sleep "$secs"
      for i in "${!mports[@]}"; do
        curl -s --max-time 2 "http://127.0.0.1:${mports[$i]}/metrics" \
          >"$dir/metrics.$i" || true
      done
    ) &
    sampler=$!
  fi
  b0=$(batches "${mports[@]}")
  k0=$(reaped)
  s0=$(sys)
  for p in "${spids[@]}"; do c0=$((c0 + $(cpu "$p"))); done
  r0=$(cpu "$rpid")
  q=()
  for ((i = 1; i <= k; i++)); do
    "${cli_wrap[@]}" "$bench_bin" --server "127.0.0.1:$port" --audit \
      --no-progress --json "$dir/c$i.json" --key-prefix "c$i:" \
      "${key_opts[@]}" --warmup 1 --duration "$secs" "${margs[@]}" \
      >"$dir/c$i.txt" 2>&1 &
    q+=($!)
  done
  rc=0
  for p in "${q[@]}"; do wait "$p" || rc=1; done
  s1=$(sys)
  k1=$(reaped)
  for p in "${spids[@]}"; do c1=$((c1 + $(cpu "$p"))); done
  r1=$(cpu "$rpid")
  b1=$(batches "${mports[@]}")
  [ -z "$sampler" ] || wait "$sampler" || true
  stop "${spids[@]}"

  local key="$row@$r" sum_rate=0 sum_over=0 sum_err=0 f
  local l50=() l99=()
  for ((i = 1; i <= k; i++)); do
    f="$dir/c$i.json"
    if [ ! -s "$f" ]; then
      log "!! $row round $r: client $i wrote no JSON; see $dir/c$i.txt"
      failed=1
      return 0
    fi
    d=$((d + $(jf "$f" sent_total)))
    sum_rate=$(awk -v a="$sum_rate" -v b="$(jf "$f" decisions_per_sec)" 'BEGIN { printf "%.1f", a + b }')
    sum_over=$((sum_over + $(jf "$f" audit_over_limit)))
    sum_err=$((sum_err + $(jf "$f" errors) + $(jf "$f" unsent)))
    l50+=("$(jf "$f" p50_us)") l99+=("$(jf "$f" p99_us)")
  done
  rate[$key]=$sum_rate
  # What the rest of the machine (other users of these CPUs) took meanwhile,
  # in % of all of it: every CPU's busy time but ours (rl-server, Redis,
  # rl-bench).
  other[$key]=$(awk -v a="$s0" -v b="$s1" -v o="$((c1 - c0 + r1 - r0 + k1 - k0))" \
    'BEGIN { split(a, x, " "); split(b, y, " "); t = y[2] - x[2];
      v = t > 0 ? 100 * (y[1] - x[1] - o) / t : 0; printf "%.0f", v < 0 ? 0 : v }')
  batch[$key]=$(awk -v a="$b0" -v b="$b1" 'BEGIN { split(a, x, " ");
    split(b, y, " "); c = y[2] - x[2];
    if (c > 0) printf "%.1f", (y[1] - x[1]) / c; else printf "-" }')
  over[$key]=$sum_over
  errs[$key]=$sum_err
  clients[$row]=$k
  p50[$key]=$(printf '%s\n' "${l50[@]}" | median)
  p99[$key]=$(printf '%s\n' "${l99[@]}" | sort -g | tail -1)
  scpu[$key]=$(awk -v t="$((c1 - c0))" -v k="$tck" -v d="$d" 'BEGIN { printf "%.3f", t / k * 1e6 / d }')
  rcpu[$key]=-
  if [ "$store" = redis ]; then
    rcpu[$key]=$(awk -v t="$((r1 - r0))" -v k="$tck" -v d="$d" 'BEGIN { printf "%.3f", t / k * 1e6 / d }')
  fi
  log "   ${rate[$key]}/s, rl-server ${scpu[$key]} us/decision, Redis ${rcpu[$key]}, p50 ${p50[$key]} p99 ${p99[$key]} us, batch ${batch[$key]}, others ${other[$key]} % of the CPUs, errors ${errs[$key]}, audit $sum_over over"
  if [ "$rc" != 0 ] && [ "$sum_over" = 0 ]; then
    log "!! $row round $r: rl-bench failed; see $dir/c*.txt"
    failed=1
  fi
  if [ "$sum_over" != 0 ]; then
    log "!! $row round $r: audit found $sum_over windows over the limit"
    failed=1
  fi
}

# The rows, in the order of odd rounds (even rounds run it backwards): per
# store and mode, N rising, then reuseport.
rows=()
for store in memory redis; do
  for mode in closed open; do
    for n in "${ns[@]}"; do rows+=("$store/$mode/$n"); done
    rows+=("$store/$mode/2rp")
  done
done
redis-cli -p "$rport" MODULE LIST | grep -q ratelimit ||
  { log "the ratelimit module did not load; see $out/redis.log"; exit 1; }
load_runs=$(cut -d' ' -f1-3 /proc/loadavg)
for r in $(seq 1 "$rounds"); do
  order=("${rows[@]}")
  if [ $((r % 2)) = 0 ]; then
    order=()
    for ((i = ${#rows[@]} - 1; i >= 0; i--)); do order+=("${rows[$i]}"); done
  fi
  for row in "${order[@]}"; do
    IFS=/ read -r store mode n <<<"$row"
    if [ "$n" = 2rp ]; then
      run "$row" "$store" "$mode" 2 reuseport "$r"
    else
      run "$row" "$store" "$mode" "$n" threads "$r"
    fi
  done
done

# The medians; then the table.
med() {
  local -n arr=$1
  local r vals=()
  for r in $(seq 1 "$rounds"); do
    [ -z "${arr[$2@$r]:-}" ] || [ "${arr[$2@$r]}" = - ] || vals+=("${arr[$2@$r]}")
  done
  if [ "${#vals[@]}" = 0 ]; then echo -; else printf '%s\n' "${vals[@]}" | median; fi
}
declare -A m_rate m_s m_r m_50 m_99 m_b m_o m_over m_err
for row in "${rows[@]}"; do
  m_rate[$row]=$(med rate "$row")
  m_s[$row]=$(med scpu "$row")
  m_r[$row]=$(med rcpu "$row")
  m_50[$row]=$(med p50 "$row")
  m_99[$row]=$(med p99 "$row")
  m_b[$row]=$(med batch "$row")
  m_o[$row]=$(med other "$row")
  m_over[$row]=0 m_err[$row]=0
  for r in $(seq 1 "$rounds"); do
    m_over[$row]=$((m_over[$row] + ${over[$row@$r]:-0}))
    m_err[$row]=$((m_err[$row] + ${errs[$row@$r]:-0}))
  done
done
# ratio A B: A / B as "1.02x", or -.
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a != "-" && b > 0) printf "%.2fx", a / b; else printf "-" }'; }
total() { awk -v a="$1" -v b="$2" 'BEGIN { if (b == "-") b = 0; if (a == "-") print "-"; else printf "%.3f", a + b }'; }
{
  echo "machine: $cores cores, $(lscpu | sed -n 's/^Model name: *//p' | head -1), kernel $(uname -r); load average $load_before before the build, $load_runs before the runs"
  echo "redis: $(redis-server --version | sed 's/.*v=\([^ ]*\).*/\1/') with the ratelimit module; ${secs}s measured per run (1 s warmup), $rounds rounds, medians"
  echo "closed: $cpl connections per loop x $inflight in flight; open: ${rate_pl}/s per loop, 4 connections per loop, independent arrivals; 100k uniform keys per rl-bench, each counter made before the run, limit 10^9 per hour"
  if [ "$pinned_any" = 1 ]; then
    echo "placement: where cores > N + 1, rl-server and Redis on CPUs 0..N, rl-bench on the rest (taskset); other rows unpinned"
  else
    echo "placement: $cores cores, never more than N + 1: every row unpinned, rl-bench, rl-server and Redis sharing every CPU"
  fi
  echo
  printf '| %-6s | %-6s | %2s | %-19s | %12s | %9s | %9s | %8s | %8s | %6s | %10s | %9s | %7s | %s |\n' \
    store mode N server decisions/s "server us" "redis us" "p50 us" \
    "p99 us" batch "server xN1" "total xN1" "other %" notes
  printf '|%s|%s|%s|%s|%s|%s|%s|%s|%s|%s|%s|%s|%s|%s|\n' -------- -------- \
    ---: --------------------- -------------: ----------: ----------: \
    ---------: ---------: -------: -----------: ----------: --------: ------
  for row in "${rows[@]}"; do
    IFS=/ read -r store mode n <<<"$row"
    base="$store/$mode/1"
    label="--threads $n" nn=$n
    [ "$n" = 2rp ] && label="2 x 1, --reuseport" nn=2
    note="audit ${m_over[$row]} over; errors ${m_err[$row]}"
    [ "${clients[$row]:-1}" = 1 ] || note="${clients[$row]} rl-bench; $note"
    sx="-" tx="-"
    if [ -n "${m_s[$base]:-}" ]; then
      sx=$(ratio "${m_s[$row]}" "${m_s[$base]}")
      tx=$(ratio "$(total "${m_s[$row]}" "${m_r[$row]}")" \
        "$(total "${m_s[$base]}" "${m_r[$base]}")")
    fi
    printf '| %-6s | %-6s | %2s | %-19s | %12.0f | %9s | %9s | %8s | %8s | %6s | %10s | %9s | %7s | %s |\n' \
      "$store" "$mode" "$nn" "$label" "${m_rate[$row]/-/0}" "${m_s[$row]}" \
      "${m_r[$row]}" "${m_50[$row]}" "${m_99[$row]}" "${m_b[$row]}" "$sx" \
      "$tx" "${m_o[$row]}" "$note"
  done
  echo
  echo "server us, redis us: CPU microseconds per decision (utime + stime); batch: rl-server's mean store batch; other %: the CPU every other process on the machine took meanwhile, in % of all CPUs; xN1: CPU per decision over N = 1's (server: rl-server's; total: rl-server + Redis)"
  echo "Redis commands over the run: $(redis-cli -p "$rport" INFO commandstats | tr -d '\r' |
    awk -F'[:=,]' '$1 == "cmdstat_rl.batch" || $1 == "cmdstat_evalsha" { printf "%s %s calls; ", substr($1, 9), $3 }')"
  echo
  echo "rounds (decisions/s / server us / redis us / other %):"
  for row in "${rows[@]}"; do
    line="  $row:"
    for r in $(seq 1 "$rounds"); do
      line+=" ${rate[$row@$r]:--} / ${scpu[$row@$r]:--} / ${rcpu[$row@$r]:--} / ${other[$row@$r]:--};"
    done
    echo "${line%;}"
  done
  echo
  echo "connections per loop, read 1 s before the end of the last round's runs:"
  for row in "${rows[@]}"; do
    IFS=/ read -r store mode n <<<"$row"
    [ "$n" != 1 ] || continue
    dir="$out/${row//\//_}@$rounds"
    if [ "$n" = 2rp ]; then
      line=$(for f in "$dir"/metrics.*; do
        awk '$1 == "rl_connections_open" { printf "%s ", $2 }' "$f"; done)
      echo "  $row: rl_connections_open per process: ${line% }"
    else
      line=$(awk '/^rl_loop_connections\{/ { printf "%s %s, ", $1, $2 }' \
        "$dir/metrics.0" 2>/dev/null || true)
      echo "  $row: ${line%, }"
    fi
  done
  echo
  echo "checks (CPU per decision at N = 2 against N = 1, same run):"
  for store in memory redis; do
    for mode in closed open; do
      a="$store/$mode/2" b="$store/$mode/1"
      [ -n "${m_s[$a]:-}" ] && [ -n "${m_s[$b]:-}" ] || continue
      v=$(ratio "${m_s[$a]}" "${m_s[$b]}")
      case $(awk -v a="${m_s[$a]}" -v b="${m_s[$b]}" 'BEGIN {
        print (a > 1.1 * b ? "over" : a < 0.9 * b ? "under" : "within") }') in
        within) echo "  met:    $store $mode: rl-server ${m_s[$a]} vs ${m_s[$b]} us/decision ($v), within 10 %" ;;
        under) echo "  met:    $store $mode: rl-server ${m_s[$a]} vs ${m_s[$b]} us/decision ($v), over 10 % less at N = 2" ;;
        *) echo "  MISSED: $store $mode: rl-server ${m_s[$a]} vs ${m_s[$b]} us/decision ($v), over 10 % more at N = 2" ;;
      esac
    done
  done
  echo "2 processes --reuseport against --threads 2 (us per decision: rl-server, and rl-server + Redis):"
  for store in memory redis; do
    for mode in closed open; do
      a="$store/$mode/2rp" b="$store/$mode/2"
      [ -n "${m_s[$b]:-}" ] || continue
      printf '  %s %s: --reuseport %.0f/s at %s (%s), --threads 2 %.0f/s at %s (%s); rl-server --threads 2 / --reuseport %s\n' \
        "$store" "$mode" "${m_rate[$a]}" "${m_s[$a]}" \
        "$(total "${m_s[$a]}" "${m_r[$a]}")" "${m_rate[$b]}" "${m_s[$b]}" \
        "$(total "${m_s[$b]}" "${m_r[$b]}")" "$(ratio "${m_s[$b]}" "${m_s[$a]}")"
    done
  done
} | tee "$out/table.md"
log "results in $out"
exit "$failed"
