# shellcheck shell=bash
# Harness for the cluster scenarios (sourced by cluster.sh): one
# redis-server, N rl-servers and HAProxy on loopback ports, each a child of
# the test's shell, recorded by pid and stopped by pid when the scenario
# ends, whatever happens. Waits poll a condition against a deadline; nothing
# sleeps and hopes. The HAProxy configuration and the process helpers are
# deploy/local-cluster.sh's own (sourced), so the tests also exercise them.

T_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
# shellcheck source=../../deploy/local-cluster.sh
. "$T_ROOT/deploy/local-cluster.sh"
# shellcheck source=../../deploy/ports.sh
. "$T_ROOT/deploy/ports.sh"

T_DIR=""
T_PORT=0
T_N=0
T_FAILED=0
# Flags every rl-server gets. A Redis round trip that a busy machine
# stretches past the default 200 ms would make servers fail open, which
# the scenarios count as a failure; they test the cluster, not the timeout.
T_SERVER_FLAGS=(--redis-timeout-ms 1000)

t_log() {
    echo "[$(date +%H:%M:%S.%3N)] $*"
}

t_fail() {
    echo "FAIL: $*" >&2
    T_FAILED=1
    exit 1
}

# t_check DESCRIPTION CMD...: fails the scenario unless CMD succeeds.
t_check() {
    local what=$1
    shift
    "$@" || t_fail "$what"
}

# t_await TIMEOUT_MS DESCRIPTION CMD...: polls CMD until it succeeds.
t_await() {
    local ms=$1 what=$2
    shift 2
    lc_wait_until "$ms" "$@" || t_fail "not within ${ms} ms: $what"
}

# t_await_proc NAME TIMEOUT_MS DESCRIPTION CMD...: t_await that fails at
# once when the process recorded as NAME exits meanwhile (the logs' last
# lines follow, from t_cleanup).
t_await_proc() {
    local name=$1 ms=$2 what=$3 deadline pid
    shift 3
    pid=$(cat "$T_DIR/$name.pid")
    deadline=$(($(lc_ms) + ms))
    until "$@" >/dev/null 2>&1; do
        # By pid, not by program name: right after the spawn the child may
        # still be the shell that is about to exec it.
        lc_gone "$pid" && t_fail "$name exited before: $what"
        (($(lc_ms) < deadline)) || t_fail "not within ${ms} ms: $what"
        sleep 0.05
    done
}

t_cleanup() {
    local f name
    [ -n "$T_DIR" ] && [ -d "$T_DIR" ] || return 0
    # Stop every process this scenario started, by its recorded pid: all
    # at once with SIGTERM (each exits 0 on it), SIGKILL for any still
    # there after 5 s. A directory below T_DIR holds the pids of what a
    # script started for it (local_cluster's deploy/local-cluster.sh),
    # stopped here too when the scenario fails before its `down`.
    for f in "$T_DIR"/*.pid "$T_DIR"/*/*.pid; do
        [ -e "$f" ] || continue
        lc_signal "$(dirname "$f")" "$(basename "$f" .pid)" TERM
    done
    for f in "$T_DIR"/*.pid "$T_DIR"/*/*.pid; do
        [ -e "$f" ] || continue
        name=$(basename "$f" .pid)
        lc_reap "$(dirname "$f")" "$name" 5000
    done
    if [ "$T_FAILED" -ne 0 ]; then
        for f in "$T_DIR"/*.log; do
            [ -e "$f" ] || continue
            echo "---- last lines of $(basename "$f")" >&2
            tail -n 15 "$f" >&2
        done
        echo "(logs kept in $T_DIR)" >&2
    else
        rm -rf "$T_DIR"
    fi
}

t_on_exit() {
    local rc=$?
    [ "$rc" -ne 0 ] && T_FAILED=1
    t_cleanup
    exit "$rc"
}

# t_init N: a private directory and a block of ports for N servers: every
# port of the block a scenario may use (the ones below, the Redis Cluster
# nodes' and local-cluster.sh's) is reserved as deploy/ports.sh does (below
# the ephemeral range, locked until the scenario ends). The block is fixed
# because servers come back on their own ports (HAProxy knows them).
t_init() {
    local tries p ok lo hi
    T_N=$1
    for tool in redis-server redis-cli haproxy curl jq; do
        command -v "$tool" >/dev/null ||
            t_fail "$tool not found: run deploy/setup-debian.sh"
    done
    for bin in "$RL_SERVER_BIN" "$RL_BENCH_BIN"; do
        [ -x "$bin" ] || t_fail "not executable: $bin"
    done
    T_DIR=$(mktemp -d "${TMPDIR:-/tmp}/rl-cluster-test.XXXXXX")
    trap t_on_exit EXIT
    # A command that fails outside t_fail (set -e) says which and where:
    # otherwise the scenario would end with nothing on its output.
    set -E
    trap 'echo "FAIL: status $? from \"$BASH_COMMAND\" (line $LINENO of ${BASH_SOURCE[0]##*/})" >&2' ERR
    read -r lo hi < <(rl_port_range)
    for tries in $(seq 1 50); do
        T_PORT=$((lo + (RANDOM % ((hi - lo - 220) / 250)) * 250))
        ok=1
        for p in $(seq "$T_PORT" $((T_PORT + 8))) \
            $(seq $((T_PORT + 11)) $((T_PORT + 10 + T_N))) \
            $(seq $((T_PORT + 31)) $((T_PORT + 36))) \
            $(seq $((T_PORT + 41)) $((T_PORT + 46))) \
            $(seq $((T_PORT + 61)) $((T_PORT + 60 + T_N))) \
            $(seq $((T_PORT + 111)) $((T_PORT + 110 + T_N))) \
            $(seq $((T_PORT + 211)) $((T_PORT + 216))); do
            if ! rl_port_lock "$p"; then
                ok=0
                break
            fi
        done
        [ "$ok" -eq 1 ] && return 0
    done
    t_fail "no free block of ports after $tries tries"
}

t_lb_port() { echo "$T_PORT"; }
# t_servers: every rl-server's address, comma-separated, server 1 first.
t_servers() {
    local i list=""
    for i in $(seq 1 "$T_N"); do
        list="$list${list:+,}127.0.0.1:$(t_server_port "$i")"
    done
    echo "$list"
}
t_stats_port() { echo $((T_PORT + 1)); }
t_redis_port() { echo $((T_PORT + 2)); }
t_server_port() { echo $((T_PORT + 10 + $1)); }
t_metrics_port() { echo $((T_PORT + 60 + $1)); }

t_start_redis() {
    mkdir -p "$T_DIR/redis"
    lc_spawn "$T_DIR" redis redis-server redis-server \
        --port "$(t_redis_port)" --bind 127.0.0.1 --save "" \
        --appendonly no --dir "$T_DIR/redis"
    t_await_proc redis 5000 "redis-server answers" \
        redis-cli -p "$(t_redis_port)" ping
}

t_redis_ping() {
    [ "$(redis-cli -p "$(t_redis_port)" ping 2>/dev/null)" = PONG ]
}

# t_start_server I [FAKETIME_OFFSET] [rl-server flags...]: starts server I
# against the Redis. With an offset such as "-40s", the server's wall clock
# is shifted by libfaketime (preloaded directly: the faketime wrapper forks,
# and the pid recorded must be rl-server's own). Monotonic time is left
# alone: the point is servers whose wall clocks disagree.
t_start_server() {
    local i=$1 fake=${2:-} lib
    shift
    [ $# -gt 0 ] && shift
    if [ -n "$fake" ]; then
        lib=$(ls /usr/lib/*/faketime/libfaketime.so.1 2>/dev/null | head -n 1)
        [ -n "$lib" ] || t_fail "libfaketime not found: apt-get install faketime"
        # ASan must come first among the libraries unless told otherwise.
        lc_spawn "$T_DIR" "rl-server-$i" rl-server env LD_PRELOAD="$lib" \
            FAKETIME="$fake" FAKETIME_DONT_FAKE_MONOTONIC=1 \
            ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0" \
            "$RL_SERVER_BIN" --listen "127.0.0.1:$(t_server_port "$i")" \
            --metrics "127.0.0.1:$(t_metrics_port "$i")" \
            --redis "127.0.0.1:$(t_redis_port)" "${T_SERVER_FLAGS[@]}" "$@"
    else
        lc_spawn "$T_DIR" "rl-server-$i" rl-server "$RL_SERVER_BIN" \
            --listen "127.0.0.1:$(t_server_port "$i")" \
            --metrics "127.0.0.1:$(t_metrics_port "$i")" \
            --redis "127.0.0.1:$(t_redis_port)" "${T_SERVER_FLAGS[@]}" "$@"
    fi
}

t_healthy() {
    lc_healthy "$(t_metrics_port "$1")"
}

# t_health_is I BODY: /healthz of server I says BODY (e.g. "draining").
t_health_is() {
    [ "$(curl -sS -m 1 "http://127.0.0.1:$(t_metrics_port "$1")/healthz")" = "$2" ]
}

t_start_haproxy() {
    local servers="" i
    for i in $(seq 1 "$T_N"); do
        servers="$servers $(t_server_port "$i"):$(t_metrics_port "$i")"
    done
    lc_haproxy_cfg "$T_DIR/haproxy.cfg" "$(t_lb_port)" "$(t_stats_port)" \
        "$servers"
    haproxy -c -q -f "$T_DIR/haproxy.cfg" || t_fail "bad HAProxy config"
    lc_spawn "$T_DIR" haproxy haproxy haproxy -db -f "$T_DIR/haproxy.cfg"
}

t_lb_sees() {
    lc_backend_is "$(t_stats_port)" "rl$1" "$2"
}

# t_cluster_up [FAKE1 FAKE2 ...] [-- rl-server flags]: Redis, T_N servers
# (server i under faketime offset FAKEi when given and not "-"), HAProxy;
# returns once HAProxy routes to every server.
t_cluster_up() {
    local fakes=() i
    while [ $# -gt 0 ] && [ "$1" != -- ]; do
        fakes+=("$1")
        shift
    done
    [ $# -gt 0 ] && shift
    t_start_redis
    for i in $(seq 1 "$T_N"); do
        local f=${fakes[$((i - 1))]:-}
        [ "$f" = - ] && f=""
        t_start_server "$i" "$f" "$@"
    done
    for i in $(seq 1 "$T_N"); do
        t_await_proc "rl-server-$i" 5000 "rl-server $i healthy" t_healthy "$i"
    done
    t_start_haproxy
    for i in $(seq 1 "$T_N"); do
        t_await_proc haproxy 5000 "HAProxy routes to rl$i" t_lb_sees "$i" UP
    done
    t_log "cluster up: redis :$(t_redis_port), $T_N rl-servers, HAProxy :$(t_lb_port)"
}

# t_metric I SERIES: the value of one sample on server I's /metrics.
t_metric() {
    curl -fsS -m 2 "http://127.0.0.1:$(t_metrics_port "$1")/metrics" |
        awk -v s="$2" '$1 == s { print $2; found = 1 } END { if (!found) print "missing" }'
}

# t_metric_sum SERIES: the sample summed over every running server.
t_metric_sum() {
    local i sum=0 v
    for i in $(seq 1 "$T_N"); do
        lc_alive "$T_DIR" "rl-server-$i" || continue
        v=$(t_metric "$i" "$1")
        [[ "$v" =~ ^[0-9]+$ ]] || t_fail "server $i: no sample $1"
        sum=$((sum + v))
    done
    echo "$sum"
}

# t_between V LO HI: LO <= V <= HI.
t_between() {
    [ "$1" -ge "$2" ] && [ "$1" -le "$3" ]
}

t_metric_above() {
    local v
    v=$(t_metric "$1" "$2")
    [[ "$v" =~ ^[0-9]+$ ]] && ((v > $3))
}

# t_bench NAME ARGS...: rl-bench through HAProxy, JSON into NAME.json;
# runs in the foreground and records its exit status in NAME.rc.
t_bench() {
    t_bench_at "127.0.0.1:$(t_lb_port)" "$@"
}

# t_bench_at SERVERS NAME ARGS...: the same against --server SERVERS.
t_bench_at() {
    local server=$1 name=$2 rc=0
    shift 2
    "$RL_BENCH_BIN" --server "$server" --no-progress \
        --json "$T_DIR/$name.json" "$@" >"$T_DIR/$name.out" 2>&1 || rc=$?
    echo "$rc" >"$T_DIR/$name.rc"
    sed 's/^/    /' "$T_DIR/$name.out"
}

# t_bench_bg NAME ARGS...: the same in the background; t_bench_wait NAME
# TIMEOUT_MS waits for it (by pid) and returns its exit status.
t_bench_bg() {
    local name=$1
    shift
    lc_spawn "$T_DIR" "$name" rl-bench "$RL_BENCH_BIN" \
        --server "127.0.0.1:$(t_lb_port)" --no-progress \
        --json "$T_DIR/$name.json" "$@"
}

t_bench_wait() {
    local name=$1 ms=$2 pid rc=0
    pid=$(cat "$T_DIR/$name.pid")
    t_await "$ms" "rl-bench $name finishes" lc_gone "$pid"
    wait "$pid" || rc=$?
    rm -f "$T_DIR/$name.pid" "$T_DIR/$name.comm"
    echo "$rc" >"$T_DIR/$name.rc"
    sed 's/^/    /' "$T_DIR/$name.log"
    return 0
}

# t_json NAME FIELD: one field of rl-bench's JSON.
t_json() {
    jq -r ".$2" "$T_DIR/$1.json"
}

# t_expect NAME FIELD OP VALUE: e.g. t_expect hot audit_over_limit -eq 0.
t_expect() {
    local v
    v=$(t_json "$1" "$2")
    if [ -z "$v" ] || [ "$v" = null ]; then
        t_fail "$1: no field $2 in the JSON"
    fi
    test "$v" "$3" "$4" || t_fail "$1: expected $2 $3 $4, got $v"
}

# t_audit_line NAME: the audit's findings in one line, for the report.
t_audit_line() {
    jq -r '"audit: \(.audit_windows) windows, \(.audit_over_limit) over the limit, exact \(.audit_exact_windows)/\(.audit_checked_windows) hammered; decisions \(.decisions): allowed \(.allowed), denied \(.denied), errors \(.errors) (lost \(.connection_lost), timeouts \(.timeouts), server \(.server_errors)), disconnects \(.disconnects)"' \
        "$T_DIR/$1.json"
}

# t_stop_server I SIGNAL TIMEOUT_MS: signals server I by pid and waits for
# it; leaves its exit status in T_RC (128+N if signal N ended it). Not for
# use inside $(...): only this shell can wait for its children.
T_RC=0
t_stop_server() {
    local name="rl-server-$1" pid
    pid=$(cat "$T_DIR/$name.pid")
    lc_signal "$T_DIR" "$name" "$2"
    t_await "$3" "$name exits" lc_gone "$pid"
    T_RC=0
    wait "$pid" || T_RC=$?
    rm -f "$T_DIR/$name.pid" "$T_DIR/$name.comm"
}

# t_servers_exit_clean: stops every rl-server still running with SIGTERM,
# as an operator would, and fails unless each exits 0. Under the sanitizer
# build this is where a leak or an error inside rl-server shows.
t_servers_exit_clean() {
    local f name
    for f in "$T_DIR"/rl-server-*.pid; do
        [ -e "$f" ] || continue
        lc_signal "$T_DIR" "$(basename "$f" .pid)" TERM
    done
    for f in "$T_DIR"/rl-server-*.pid; do
        [ -e "$f" ] || continue
        name=$(basename "$f" .pid)
        t_stop_server "${name#rl-server-}" TERM 10000
        t_check "$name exited $T_RC on SIGTERM" [ "$T_RC" = 0 ]
    done
}
