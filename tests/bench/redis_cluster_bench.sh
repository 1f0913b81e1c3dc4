#!/usr/bin/env bash
# One rl-server over one Redis vs over a 3-master Redis Cluster (+3
# replicas), the same closed-loop rl-bench load against each: decisions/s,
# latency, and Redis CPU-seconds per million decisions summed over the
# redis-server processes (utime + stime from /proc/PID/stat, masters and
# replicas apart). Everything on loopback ports from BASE (default 26500,
# reserved as deploy/ports.sh reserves ports), stopped by pid at the end. REPLICAS=0 leaves the replicas out (3
# masters only), to compare the per-decision cost without replication.
#   tests/bench/redis_cluster_bench.sh BUILD_DIR [SECONDS] [BENCH ARGS...]
set -euo pipefail
build=$(realpath "$1")
secs=${2:-10}
shift $(($# >= 2 ? 2 : 1))
extra=("$@")
base=${BASE:-26500}
. "$(dirname "${BASH_SOURCE[0]}")/../../deploy/ports.sh"
for p in $((base + 1)) $(seq $((base + 11)) $((base + 16))) \
    $(seq $((base + 21)) $((base + 26))) $((base + 90)) $((base + 91)); do
    rl_port_lock "$p" || { echo "port $p is taken; pick another BASE" >&2; exit 1; }
done
dir=$(mktemp -d /tmp/rl-cluster-bench.XXXXXX)
pids=()
cleanup() {
    local p
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    for p in "${pids[@]}"; do
        for _ in $(seq 1 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
        kill -9 "$p" 2>/dev/null || true
    done
    rm -rf "$dir"
}
trap cleanup EXIT

await() { # await TRIES CMD...
    local n=$1
    shift
    for _ in $(seq 1 "$n"); do "$@" >/dev/null 2>&1 && return 0; sleep 0.1; done
    echo "timed out: $*" >&2
    exit 1
}

cpu_ticks() { # sum of utime+stime over pids
    local t=0 p
    for p in "$@"; do
        t=$((t + $(awk '{print $14 + $15}' "/proc/$p/stat")))
    done
    echo "$t"
}

redis() { # redis PORT [args]: starts redis-server, echoes its pid
    local port=$1
    shift
    mkdir -p "$dir/$port"
    redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no \
        --dir "$dir/$port" "$@" >"$dir/$port.log" 2>&1 &
    echo $!
}

run() { # run NAME REDIS_FLAG_AND_VALUE MASTER_PIDS REPLICA_PIDS
    local name=$1 flag=$2 val=$3 masters=$4 replicas=$5 spid m0 r0 m1 r1 dec
    "$build/server/rl-server" --listen "127.0.0.1:$((base + 90))" \
        --metrics "127.0.0.1:$((base + 91))" "$flag" "$val" \
        --redis-timeout-ms 1000 >"$dir/$name.server.log" 2>&1 &
    spid=$!
    pids+=("$spid")
    await 100 curl -fsS "http://127.0.0.1:$((base + 91))/healthz"
    # shellcheck disable=SC2086
    m0=$(cpu_ticks $masters)
    # shellcheck disable=SC2086
    r0=$( [ -n "$replicas" ] && cpu_ticks $replicas || echo 0)
    "$build/tools/bench/rl-bench" --server "127.0.0.1:$((base + 90))" \
        --no-progress --duration "$secs" --connections 4 --inflight 64 \
        --keys 100000 --limit 100 --window 60 --json "$dir/$name.json" \
        "${extra[@]}" >"$dir/$name.out" 2>&1
    # shellcheck disable=SC2086
    m1=$(cpu_ticks $masters)
    # shellcheck disable=SC2086
    r1=$( [ -n "$replicas" ] && cpu_ticks $replicas || echo 0)
    kill "$spid"
    wait "$spid" || true
    dec=$(jq -r .decisions "$dir/$name.json")
    echo "== $name"
    sed 's/^/   /' "$dir/$name.out"
    awk -v d="$dec" -v s="$secs" -v m=$((m1 - m0)) -v r=$((r1 - r0)) 'BEGIN {
        printf "   redis CPU: masters %.2f s (%.0f%% of one core), replicas %.2f s; per million decisions: masters %.2f s, all %.2f s\n",
            m / 100, m / s, r / 100, m / 100 / (d / 1e6), (m + r) / 100 / (d / 1e6) }'
}

single=$(redis $((base + 1)))
pids+=("$single")
await 50 redis-cli -p $((base + 1)) ping
run single --redis "127.0.0.1:$((base + 1))" "$single" ""

reps=${REPLICAS:-1}
nn=$((reps > 0 ? 6 : 3))
nodes=()
cpids=()
for i in $(seq 1 $nn); do
    p=$((base + 10 + i))
    cpids+=("$(redis "$p" --cluster-enabled yes --cluster-port $((base + 20 + i)) \
        --cluster-config-file nodes.conf --cluster-node-timeout 2000)")
    nodes+=("127.0.0.1:$p")
done
pids+=("${cpids[@]}")
for i in $(seq 1 $nn); do await 50 redis-cli -p $((base + 10 + i)) ping; done
redis-cli --cluster create "${nodes[@]}" --cluster-replicas "$reps" \
    --cluster-yes >"$dir/create.log" 2>&1
for i in $(seq 1 $nn); do
    await 100 bash -c "redis-cli -p $((base + 10 + i)) cluster info | grep -q cluster_state:ok"
done
# create makes the first three nodes the masters.
run "cluster (replicas: $reps per master)" --redis-cluster \
    "127.0.0.1:$((base + 11))" "${cpids[0]} ${cpids[1]} ${cpids[2]}" \
    "${cpids[*]:3}"
