# shellcheck shell=bash
# Loopback ports for the scripts that start servers on this machine (the
# demo, the local cluster, the tests and benchmarks), sourced by them.
#
# rl-server and the floor servers are started on port 0 with --port-file
# and say which ports they bound (rl_wait_ports). A server that cannot
# (redis-server, nginx, caddy, haproxy) gets a port from rl_port_reserve:
# below the system's ephemeral range, where every outgoing connection of
# every process draws its local port, and locked (flock on a file in
# $RLT_PORT_DIR, default /tmp/rlt-ports) by this shell until it exits, so
# no other script or test gets it meanwhile and this one never gets it
# twice. tests/support/rlt.c and rlt.py take the same locks.

RLT_PORT_DIR=${RLT_PORT_DIR:-/tmp/rlt-ports}

# rl_port_range: prints "LO HI", the ports rl_port_reserve hands out.
rl_port_range() {
    local elo=32768 ehi=60999
    if [ -r /proc/sys/net/ipv4/ip_local_port_range ]; then
        read -r elo ehi </proc/sys/net/ipv4/ip_local_port_range
    fi
    if ((elo - 1 >= 16000)); then
        echo "15000 $((elo - 1))"
    else
        echo "$((ehi + 1)) 65535"
    fi
}

# rl_port_lock PORT: locks PORT for this shell (and the children it starts,
# which inherit the lock). Returns 1 when another process holds it or
# something accepts connections on it.
rl_port_lock() {
    local fd
    mkdir -p "$RLT_PORT_DIR" 2>/dev/null && chmod 1777 "$RLT_PORT_DIR" 2>/dev/null || true
    # Braces: a bare `exec ... 2>/dev/null` would silence this shell's
    # stderr for good.
    { exec {fd}<>"$RLT_PORT_DIR/$1"; } 2>/dev/null || return 1
    if ! flock -n "$fd"; then
        exec {fd}>&-
        return 1
    fi
    # Kept locked even when busy: whoever else uses it, we never will.
    ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

# rl_port_reserve VAR: sets VAR to a reserved port. Not in a subshell
# ($(...)): the lock would go with it. (The locals' odd names keep them
# from hiding the caller's VAR.)
rl_port_reserve() {
    local _rl_lo _rl_hi _rl_p _rl_try
    read -r _rl_lo _rl_hi < <(rl_port_range)
    for _rl_try in $(seq 1 2000); do
        _rl_p=$((_rl_lo + (RANDOM * 32768 + RANDOM) % (_rl_hi - _rl_lo + 1)))
        if rl_port_lock "$_rl_p"; then
            printf -v "$1" '%d' "$_rl_p"
            return 0
        fi
    done
    echo "rl_port_reserve: no free port in $_rl_lo-$_rl_hi after $_rl_try tries" >&2
    return 1
}

# rl_alive PID: 0 while PID runs (a zombie, exited but not yet waited for,
# counts as gone).
rl_alive() {
    local st
    [ -r "/proc/$1/stat" ] || return 1
    read -r st <"/proc/$1/stat" 2>/dev/null || return 1
    st=${st##*) }
    [ "${st%% *}" != Z ]
}

# rl_gone PID LOG WHAT: says that WHAT exited and shows LOG's last lines.
rl_gone() {
    echo "$3 (pid $1) exited before it listened; last lines of $2:" >&2
    tail -n 15 "$2" >&2 2>/dev/null
}

# rl_wait_ports FILE PID LOG [TIMEOUT_MS]: waits until PID (started with
# --port-file FILE) has written FILE. Fails at once, with LOG's last lines,
# if PID exits first; after TIMEOUT_MS (default 10000) otherwise.
rl_wait_ports() {
    local file=$1 pid=$2 log=$3 ms=${4:-10000} t
    for ((t = 0; t <= ms; t += 10)); do
        [ -s "$file" ] && return 0
        if ! rl_alive "$pid"; then
            rl_gone "$pid" "$log" "server"
            return 1
        fi
        sleep 0.01
    done
    echo "no port file $file after $ms ms" >&2
    return 1
}

# rl_port_of FILE FLAG: the port a --port-file names for FLAG (listen,
# metrics, grpc, http).
rl_port_of() {
    awk -v f="$2" '$1 == f { n = split($2, a, ":"); print a[n]; exit }' "$1"
}

# rl_wait_listen PORT PID LOG [TIMEOUT_MS]: waits until something accepts
# on 127.0.0.1:PORT. Fails at once, with LOG's last lines, if PID exits
# first; after TIMEOUT_MS (default 10000) otherwise.
rl_wait_listen() {
    local port=$1 pid=$2 log=$3 ms=${4:-10000} t
    for ((t = 0; t <= ms; t += 10)); do
        (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && return 0
        if ! rl_alive "$pid"; then
            rl_gone "$pid" "$log" "server on port $port"
            return 1
        fi
        sleep 0.01
    done
    echo "nothing listening on 127.0.0.1:$port after $ms ms" >&2
    return 1
}

# rl_bind_failed LOG: 0 when LOG says a port was taken (the one retry a
# server on a reserved port gets is for this).
rl_bind_failed() {
    grep -qiE 'address already in use|could not create server tcp listening|cannot bind|bind\(\) to .* failed' "$1" 2>/dev/null
}

# rl_start_ours LOG PORT_FILE CMD...: starts CMD (rl-server or a floor
# server, its listeners on port 0) in the background with --port-file
# PORT_FILE and stderr appended to LOG, and waits until it has said which
# ports it bound (rl_port_of PORT_FILE FLAG reads them). Sets rl_pid. A
# server that does not say so in time is killed, and the call fails.
rl_start_ours() {
    local log=$1 pf=$2
    shift 2
    rm -f "$pf"
    "$@" --port-file "$pf" 2>>"$log" &
    rl_pid=$!
    rl_wait_ports "$pf" "$rl_pid" "$log" && return 0
    kill -KILL "$rl_pid" 2>/dev/null
    wait "$rl_pid" 2>/dev/null
    return 1
}

# rl_start_redis DIR LOG [ARGS...]: redis-server on a reserved port, no
# persistence, working in DIR, logging to LOG, with ARGS; one more try on
# another port if the first was taken outside the tests. Sets rl_pid and
# rl_redis_port.
rl_start_redis() {
    local dir=$1 log=$2 attempt
    shift 2
    for attempt in 1 2; do
        rl_port_reserve rl_redis_port || return 1
        redis-server --port "$rl_redis_port" --bind 127.0.0.1 --save '' \
            --appendonly no --dir "$dir" --logfile "$log" "$@" \
            >/dev/null 2>&1 &
        rl_pid=$!
        rl_wait_listen "$rl_redis_port" "$rl_pid" "$log" && return 0
        kill "$rl_pid" 2>/dev/null
        wait "$rl_pid" 2>/dev/null
        { [ "$attempt" = 1 ] && rl_bind_failed "$log"; } || return 1
    done
}
