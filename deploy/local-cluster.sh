#!/usr/bin/env bash
# A ratelimit cluster on loopback: one redis-server, N rl-servers sharing it,
# HAProxy in front of them (TCP mode, health-checked over /healthz), all from
# Debian's packages plus this tree's rl-server.
#
#   deploy/local-cluster.sh up [N]   start it (N rl-servers, default 3)
#   deploy/local-cluster.sh up [N] --redis-cluster
#                                    the same over a Redis Cluster of 3
#                                    masters + 3 replicas instead of one
#                                    redis-server
#   deploy/local-cluster.sh status   what runs, and whether it is healthy
#                                    (exit 0 all healthy, 1 not, 3 not up)
#   deploy/local-cluster.sh down     stop exactly the processes `up` started
#
# Environment (all optional):
#   RL_STATE_DIR    pids, logs and configs (default /tmp/rl-cluster-$UID)
#   RL_PORT         first port of the block used (default 7300):
#                     RL_PORT        HAProxy: clients connect here
#                     RL_PORT+1      HAProxy stats page, /stats
#                     RL_PORT+2      redis-server
#                     RL_PORT+10+i   rl-server i (i = 1..N, N <= 99)
#                     RL_PORT+110+i  its --metrics (/metrics, /healthz)
#                     RL_PORT+2+k    with --redis-cluster: node k (1..6;
#                                    1-3 masters), its bus at RL_PORT+210+k
#   RL_SERVER_BIN   the rl-server to run (default: build/server/rl-server in
#                   this tree if built, else rl-server on PATH)
#   RL_DRAIN_MS     --drain-ms of each rl-server (default 1000)
#   RL_SERVER_OPTS  more rl-server flags, e.g. "--fail-closed"
#   RL_RULES        the rules file every rl-server loads with --config
#                   (default deploy/rules.yaml in this tree; empty: none).
#                   Edit it and each server reloads it; switches and quotas:
#                   build/tools/rl-ctl --redis 127.0.0.1:$((RL_PORT+2)) ...
#
# Every process is started by this script and recorded by pid in the state
# directory; `down` signals those pids only, after checking that each still
# runs the program it started (a pid can be reused). Everything binds to
# 127.0.0.1. This file can also be sourced (tests/cluster does) to reuse
# its helpers without running anything.
set -euo pipefail

LC_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

lc_die() {
    echo "local-cluster: $*" >&2
    exit 1
}

lc_ms() {
    date +%s%3N
}

# lc_wait_until TIMEOUT_MS CMD...: runs CMD every 50 ms until it succeeds;
# returns 1 if TIMEOUT_MS pass first.
lc_wait_until() {
    local deadline=$(($(lc_ms) + $1))
    shift
    until "$@" >/dev/null 2>&1; do
        (($(lc_ms) < deadline)) || return 1
        sleep 0.05
    done
}

# 0 when something accepts connections on 127.0.0.1:PORT.
lc_port_busy() {
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

# 0 when /healthz on 127.0.0.1:PORT answers 200.
lc_healthy() {
    curl -fs -m 1 -o /dev/null "http://127.0.0.1:$1/healthz"
}

# lc_healthy_or_gone DIR I PORT: server I answers 200, or has exited.
lc_healthy_or_gone() {
    lc_healthy "$3" || ! lc_alive "$1" "rl-server-$2"
}

# lc_alive DIR NAME: 0 when the pid recorded for NAME still runs the
# program recorded with it.
lc_alive() {
    local dir=$1 name=$2 pid comm
    [ -f "$dir/$name.pid" ] || return 1
    pid=$(cat "$dir/$name.pid")
    comm=$(cat "$dir/$name.comm" 2>/dev/null || true)
    [ -n "$pid" ] && [ -r "/proc/$pid/comm" ] || return 1
    [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = "$comm" ]
}

# lc_spawn DIR NAME COMM CMD...: starts CMD in the background with its
# output in DIR/NAME.log and records its pid and program name.
lc_spawn() {
    local dir=$1 name=$2 comm=$3
    shift 3
    "$@" </dev/null >>"$dir/$name.log" 2>&1 &
    echo $! >"$dir/$name.pid"
    echo "$comm" >"$dir/$name.comm"
}

# lc_reap DIR NAME TIMEOUT_MS: waits for the recorded pid (already
# signalled) to exit, SIGKILLs it after TIMEOUT_MS, and removes the record.
lc_reap() {
    local dir=$1 name=$2 timeout=$3 pid
    if lc_alive "$dir" "$name"; then
        pid=$(cat "$dir/$name.pid")
        if ! lc_wait_until "$timeout" lc_gone "$pid"; then
            echo "local-cluster: $name (pid $pid) did not stop; killing" >&2
            kill -KILL "$pid" 2>/dev/null || true
            lc_wait_until 2000 lc_gone "$pid" || true
        fi
    fi
    rm -f "$dir/$name.pid" "$dir/$name.comm"
}

# lc_signal DIR NAME SIG: sends SIG to the recorded pid, if it still runs
# the recorded program.
lc_signal() {
    if lc_alive "$1" "$2"; then
        kill "-$3" "$(cat "$1/$2.pid")" 2>/dev/null || true
    fi
}

# lc_stop DIR NAME TIMEOUT_MS: SIGTERM, then SIGKILL after TIMEOUT_MS.
lc_stop() {
    lc_signal "$1" "$2" TERM
    lc_reap "$@"
}

# 0 once PID has exited (a zombie counts: it no longer runs).
lc_gone() {
    local state
    kill -0 "$1" 2>/dev/null || return 0
    state=$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null || true)
    [ -z "$state" ] || [ "$state" = Z ]
}

# lc_haproxy_cfg FILE LB_PORT STATS_PORT "LISTEN:METRICS ..." writes the
# configuration of deploy/haproxy.cfg for loopback servers, with quicker
# health checks (a server is marked down within about half a second).
lc_haproxy_cfg() {
    local file=$1 lb=$2 stats=$3 i=0 s
    {
        cat <<EOF
# Written by deploy/local-cluster.sh; see deploy/haproxy.cfg.
global
    log stdout format raw local0 info
    maxconn 4000
    hard-stop-after 5s

defaults
    mode tcp
    log global
    option tcplog
    option dontlognull
    retries 2
    option redispatch
    timeout connect 500ms
    timeout client 1h
    timeout server 1h
    timeout check 500ms

frontend ratelimit
    bind 127.0.0.1:$lb
    default_backend rl_servers

backend rl_servers
    balance leastconn
    option httpchk
    http-check send meth GET uri /healthz ver HTTP/1.1 hdr Host rl-server
    http-check expect status 200
    default-server check inter 200ms fastinter 100ms downinter 200ms fall 2 rise 2
EOF
        for s in $4; do
            i=$((i + 1))
            echo "    server rl$i 127.0.0.1:${s%%:*} check port ${s##*:}"
        done
        cat <<EOF

listen stats
    mode http
    bind 127.0.0.1:$stats
    stats enable
    stats uri /stats
EOF
    } >"$file"
}

# lc_backend_status STATS_PORT NAME: HAProxy's view of server NAME (UP,
# DOWN, MAINT, ...), from the stats page in CSV.
lc_backend_status() {
    curl -fsS -m 1 "http://127.0.0.1:$1/stats;csv" |
        awk -F, -v n="$2" '$1 == "rl_servers" && $2 == n { print $18 }'
}

lc_find_server_bin() {
    if [ -n "${RL_SERVER_BIN:-}" ]; then
        echo "$RL_SERVER_BIN"
    elif [ -x "$LC_ROOT/build/server/rl-server" ]; then
        echo "$LC_ROOT/build/server/rl-server"
    else
        command -v rl-server || true
    fi
}

lc_state_dir() {
    echo "${RL_STATE_DIR:-/tmp/rl-cluster-$(id -u)}"
}

lc_up() {
    local n=${1:-3} cl=${2:-} dir base bin drain i p m servers="" rp rules
    local -a conf=() store=() nodes=()
    dir=$(lc_state_dir)
    base=${RL_PORT:-7300}
    drain=${RL_DRAIN_MS:-1000}
    if ! [[ "$n" =~ ^[0-9]+$ ]] || ((n < 1 || n > 99)); then
        lc_die "N must be 1..99, got '$n'"
    fi
    if ! [[ "$base" =~ ^[0-9]+$ ]] || ((base < 1024 || base + 110 + n > 65535)); then
        lc_die "RL_PORT must leave room for its ports, got '$base'"
    fi
    bin=$(lc_find_server_bin)
    if [ -z "$bin" ] || [ ! -x "$bin" ]; then
        lc_die "no rl-server: build it (cmake --build build) or set RL_SERVER_BIN"
    fi
    rules=${RL_RULES-$LC_ROOT/deploy/rules.yaml}
    if [ -n "$rules" ]; then
        "$bin" --check-config "$rules" >/dev/null ||
            lc_die "bad rules file $rules (see above)"
        conf=(--config "$(cd "$(dirname "$rules")" && pwd)/$(basename "$rules")")
    fi
    for tool in redis-server redis-cli haproxy curl; do
        command -v "$tool" >/dev/null ||
            lc_die "$tool not found: run deploy/setup-debian.sh"
    done
    mkdir -p "$dir"
    for f in "$dir"/*.pid; do
        [ -e "$f" ] || continue
        lc_alive "$dir" "$(basename "$f" .pid)" &&
            lc_die "already up (state in $dir); run '$0 down' first"
    done
    rp=$((base + 2))
    if [ -n "$cl" ]; then
        # Nodes on RL_PORT+3..8, so rp+1.. ; buses on RL_PORT+211..216.
        for i in 1 2 3 4 5 6; do
            lc_port_busy $((rp + i)) && lc_die "port $((rp + i)) is in use; pick another RL_PORT"
            lc_port_busy $((base + 210 + i)) && lc_die "port $((base + 210 + i)) is in use; pick another RL_PORT"
        done
    fi
    for p in "$base" $((base + 1)) "$rp" $(seq $((base + 11)) $((base + 10 + n))) \
        $(seq $((base + 111)) $((base + 110 + n))); do
        lc_port_busy "$p" && lc_die "port $p is in use; pick another RL_PORT"
    done
    rm -f "$dir"/*.log
    {
        echo "LC_N=$n"
        echo "LC_PORT=$base"
        echo "LC_DRAIN_MS=$drain"
        echo "LC_CLUSTER=${cl:+1}"
    } >"$dir/cluster.env"

    # From here on, a failure stops what was already started.
    if [ -z "$cl" ]; then
        mkdir -p "$dir/redis"
        # The ratelimit module, when built next to rl-server (RL.BATCH;
        # rl-server falls back to the Lua script without it).
        local -a module=()
        local so
        so=$(dirname "$bin")/redis_module/ratelimit.so
        [ -f "$so" ] && module=(--loadmodule "$so")
        lc_spawn "$dir" redis redis-server redis-server --port "$rp" \
            --bind 127.0.0.1 --save "" --appendonly no --dir "$dir/redis" \
            "${module[@]}"
        lc_wait_until 5000 redis-cli -p "$rp" ping ||
            { lc_down >/dev/null; lc_die "redis-server did not start; see $dir/redis.log"; }
        store=(--redis "127.0.0.1:$rp")
    else
        for i in 1 2 3 4 5 6; do
            mkdir -p "$dir/redis-node$i"
            rm -f "$dir/redis-node$i/nodes.conf"
            lc_spawn "$dir" "redis-node$i" redis-server redis-server \
                --port $((rp + i)) --bind 127.0.0.1 --save "" \
                --appendonly no --dir "$dir/redis-node$i" \
                --cluster-enabled yes --cluster-port $((base + 210 + i)) \
                --cluster-config-file nodes.conf --cluster-node-timeout 2000 \
                --cluster-require-full-coverage no
            nodes+=("127.0.0.1:$((rp + i))")
        done
        for i in 1 2 3 4 5 6; do
            lc_wait_until 5000 redis-cli -p $((rp + i)) ping ||
                { lc_down >/dev/null; lc_die "redis node $i did not start; see $dir/redis-node$i.log"; }
        done
        redis-cli --cluster create "${nodes[@]}" --cluster-replicas 1 \
            --cluster-yes >"$dir/cluster-create.log" 2>&1 ||
            { lc_down >/dev/null; lc_die "redis-cli --cluster create failed; see $dir/cluster-create.log"; }
        for i in 1 2 3 4 5 6; do
            lc_wait_until 10000 lc_cluster_ok $((rp + i)) ||
                { lc_down >/dev/null; lc_die "redis node $i: cluster_state not ok"; }
        done
        store=(--redis-cluster "127.0.0.1:$((rp + 1)),127.0.0.1:$((rp + 4))")
    fi

    # One secret for the fleet's reservation and lease handles (a handle
    # settles on whichever instance HAProxy picks), never kept in Redis.
    (umask 077 && head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' \
        >"$dir/handle.secret")
    for i in $(seq 1 "$n"); do
        p=$((base + 10 + i))
        m=$((base + 110 + i))
        # shellcheck disable=SC2086 # RL_SERVER_OPTS holds several flags
        lc_spawn "$dir" "rl-server-$i" rl-server "$bin" \
            --listen "127.0.0.1:$p" --metrics "127.0.0.1:$m" \
            "${store[@]}" --drain-ms "$drain" "${conf[@]}" \
            --handle-secret-file "$dir/handle.secret" \
            ${RL_SERVER_OPTS:-}
        servers="$servers $p:$m"
    done
    for i in $(seq 1 "$n"); do
        # Stop waiting early for a server that exited (a bad flag, say).
        lc_wait_until 5000 lc_healthy_or_gone "$dir" "$i" $((base + 110 + i)) || true
        lc_healthy $((base + 110 + i)) ||
            { lc_down >/dev/null; lc_die "rl-server $i is not healthy; see $dir/rl-server-$i.log"; }
    done

    lc_haproxy_cfg "$dir/haproxy.cfg" "$base" $((base + 1)) "$servers"
    haproxy -c -q -f "$dir/haproxy.cfg" ||
        { lc_down >/dev/null; lc_die "bad HAProxy configuration in $dir/haproxy.cfg"; }
    lc_spawn "$dir" haproxy haproxy haproxy -db -f "$dir/haproxy.cfg"
    for i in $(seq 1 "$n"); do
        lc_wait_until 5000 lc_backend_is $((base + 1)) "rl$i" UP ||
            { lc_down >/dev/null; lc_die "HAProxy does not see rl$i up; see $dir/haproxy.log"; }
    done

    if [ -n "$cl" ]; then
        echo "local cluster up: $n rl-server(s) behind HAProxy, a Redis Cluster (3 masters + 3 replicas)"
    else
        echo "local cluster up: $n rl-server(s) behind HAProxy, one redis-server"
    fi
    echo "  endpoint   127.0.0.1:$base"
    echo "             try: rl-check --server 127.0.0.1:$base --key demo --limit 5 --window 10"
    echo "  haproxy    http://127.0.0.1:$((base + 1))/stats"
    if [ -z "$cl" ]; then
        echo "  redis      127.0.0.1:$rp"
    else
        echo "  redis      cluster nodes 127.0.0.1:$((rp + 1))-$((rp + 6)) (1-3 masters)"
    fi
    if [ -n "$rules" ]; then
        echo "  rules      ${conf[1]} (reloaded on change)"
        echo "             try: rl-check --server 127.0.0.1:$base --key demo --rule api"
        echo "             rl-ctl ${store[*]} show"
    fi
    for i in $(seq 1 "$n"); do
        echo "  rl-server $i 127.0.0.1:$((base + 10 + i))  metrics http://127.0.0.1:$((base + 110 + i))/metrics  health http://127.0.0.1:$((base + 110 + i))/healthz"
    done
    echo "  state      $dir (pids, logs); stop with: $0 down"
}

lc_cluster_ok() {
    redis-cli -p "$1" cluster info 2>/dev/null | grep -q '^cluster_state:ok'
}

lc_backend_is() {
    [ "$(lc_backend_status "$1" "$2")" = "$3" ]
}

lc_load_env() {
    local dir=$1
    [ -f "$dir/cluster.env" ] || return 1
    # shellcheck disable=SC1091
    . "$dir/cluster.env"
}

lc_down() {
    local dir n i
    dir=$(lc_state_dir)
    if ! lc_load_env "$dir"; then
        echo "local cluster: nothing recorded in $dir"
        return 0
    fi
    n=$LC_N
    # The balancer first, so no new connection reaches a stopping server;
    # then the servers, all at once (each drains for --drain-ms); Redis last.
    lc_stop "$dir" haproxy 7000
    for i in $(seq 1 "$n"); do
        lc_signal "$dir" "rl-server-$i" TERM
    done
    for i in $(seq 1 "$n"); do
        lc_reap "$dir" "rl-server-$i" $((LC_DRAIN_MS + 10000))
    done
    lc_stop "$dir" redis 5000
    for i in 1 2 3 4 5 6; do
        lc_signal "$dir" "redis-node$i" TERM
    done
    for i in 1 2 3 4 5 6; do
        lc_reap "$dir" "redis-node$i" 5000
    done
    rm -f "$dir/cluster.env"
    echo "local cluster down (logs kept in $dir)"
}

lc_status() {
    local dir n i base bad=0 h
    dir=$(lc_state_dir)
    if ! lc_load_env "$dir"; then
        echo "local cluster: not running (nothing in $dir)"
        return 3
    fi
    n=$LC_N
    base=$LC_PORT
    if [ -n "${LC_CLUSTER:-}" ]; then
        for i in 1 2 3 4 5 6; do
            if lc_alive "$dir" "redis-node$i"; then
                echo "redis node $i pid $(cat "$dir/redis-node$i.pid")  127.0.0.1:$((base + 2 + i))"
            else
                echo "redis node $i DOWN"
                bad=1
            fi
        done
    elif lc_alive "$dir" redis; then
        echo "redis      pid $(cat "$dir/redis.pid")  127.0.0.1:$((base + 2))"
    else
        echo "redis      DOWN"
        bad=1
    fi
    for i in $(seq 1 "$n"); do
        if lc_alive "$dir" "rl-server-$i"; then
            h=$(curl -sS -m 1 "http://127.0.0.1:$((base + 110 + i))/healthz" 2>/dev/null || echo "no answer")
            echo "rl-server $i pid $(cat "$dir/rl-server-$i.pid")  127.0.0.1:$((base + 10 + i))  healthz: $h  haproxy: $(lc_backend_status $((base + 1)) "rl$i" 2>/dev/null || echo '?')"
            [ "$h" = ok ] || bad=1
        else
            echo "rl-server $i DOWN"
            bad=1
        fi
    done
    if lc_alive "$dir" haproxy; then
        echo "haproxy    pid $(cat "$dir/haproxy.pid")  endpoint 127.0.0.1:$base  stats http://127.0.0.1:$((base + 1))/stats"
    else
        echo "haproxy    DOWN"
        bad=1
    fi
    return "$bad"
}

lc_main() {
    case "${1:-}" in
    up)
        if [ "${2:-}" = --redis-cluster ]; then
            lc_up 3 cluster
        elif [ "${3:-}" = --redis-cluster ]; then
            lc_up "${2:-3}" cluster
        elif [ -n "${3:-}" ]; then
            echo "usage: $0 up [N] [--redis-cluster]" >&2
            exit 2
        else
            lc_up "${2:-3}"
        fi
        ;;
    down) lc_down ;;
    status) lc_status ;;
    *)
        echo "usage: $0 up [N] [--redis-cluster] | down | status" >&2
        exit 2
        ;;
    esac
}

if [[ "${BASH_SOURCE[0]}" == "$0" ]]; then
    lc_main "$@"
fi
