#!/usr/bin/env bash
# Redis Cluster scenarios: rl-server with --redis-cluster over a local Redis
# Cluster of 3 masters + 3 replicas (redis-server --cluster-enabled yes,
# joined by redis-cli --cluster create), each scenario with its own cluster
# on free loopback ports, every process stopped by pid when it ends
# (lib.sh's harness).
#
#   tests/cluster/redis_cluster.sh SCENARIO RL_SERVER RL_BENCH [RL_CHECK]
#
# Scenarios (CTest: rcluster_<name>, label `integration`):
#   match     a scripted sequence of checks (rules with several windows,
#             a gcra, a sliding-window-counter, a sliding window, inline
#             limits, costs) decided through the cluster and through
#             one Redis: the same answers, field by field (reset times
#             aside); then every algorithm under two cluster servers'
#             concurrent load (rl-bench --fleet --audit): none over what
#             its algorithm allows; then the counters sit on all 3
#             masters, each with its TTL
#   reshard   rl-bench --audit (uniform + hot key) while redis-cli --cluster
#             reshard moves 1,000 slots: every request answered, none over
#             its limit, MOVED/ASK counted
#   failover  kill -9 a master under load: no request unanswered, none over
#             its limit, errors only until the replica is promoted;
#             recovery time printed
#   hang      a master SIGSTOPped: keys of the other masters are still
#             decided by Redis, its keys fail by --redis-timeout-ms (fail
#             mode); /healthz names the share of slots down
#   password  a cluster with requirepass: served with the password, and
#             as an ACL user with exactly the documented ACL; a
#             wrong one gives one clear error line (2 seeds)
#   ctl       rl-ctl --redis-cluster: a quota set lands in the caller's slot
#             and is decided under; a switch (global shadow) reaches the
#             server, which polls it and reports in <prefix>instances
#             through the cluster store's command routing; then
#             envoy-ratelimit's examples over gRPC (e2e_envoy_grpc.py)
#             with their counters on the cluster
#   tls       a cluster serving TLS only (tls-cluster, tls-replication;
#             certificates made by openssl): rl-server with a rediss://
#             seed decides exactly and audits clean under load, counters
#             land on all 3 masters, rl-ctl sets a quota over TLS; a server
#             given the wrong CA logs the verification failure
#   rlqs      RLQS's fleet step (store/rlqs.lua through the cluster
#             store's command()) on budgets of every master
#             (test_rlqs_fleet's scripted steps; RLT_RLQS_BIN)
#   levels    all or nothing across levels on the cluster: checks whose
#             levels' keys share one {tenant} are decided (two servers,
#             rl-check --level: the user's refusal spends nothing of the
#             organisation's, and its refusal nothing of the user's; the
#             counters on the tenant's master hold what the allowed checks
#             cost), levels in different slots are refused with the
#             documented message and charge nothing; then rl-bench --levels
#             (3 tenants) over two servers audits both levels clean
#   xop       the store's reservations and leases (store/reserve.lua through
#             the cluster store's command()): test_store_xop's scripted run
#             against its model, on this cluster (RLT_XOP_BIN names the
#             test binary, RLT_XOP_CLUSTER tells it the seed)
set -euo pipefail

[ $# -ge 3 ] || {
    echo "usage: $0 SCENARIO RL_SERVER RL_BENCH [RL_CHECK]" >&2
    exit 2
}
SCENARIO=$1
RL_SERVER_BIN=$(realpath "$2")
RL_BENCH_BIN=$(realpath "$3")
RL_CHECK_BIN=$(realpath "${4:-$(dirname "$3")/../rl-check}")
export RL_SERVER_BIN RL_BENCH_BIN RL_CHECK_BIN

# shellcheck source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

# Cluster nodes on T_PORT+31..36, their bus ports on T_PORT+41..46 (the
# default, port + 10000, may fall in the ephemeral range).
rc_port() { echo $((T_PORT + 30 + $1)); }
rc_bus_port() { echo $((T_PORT + 40 + $1)); }
RC_PASS=""
RC_TLS=0 # 1: the nodes serve TLS only (rc_tls_certs first)
# A failed master's replica takes over after about this long (ms): 1 s
# in the failover scenario, which kills one; 15 s elsewhere, where a node
# that misses a second of cluster-bus pings on a loaded machine (a load
# average of 9, beside a full ctest) was marked FAIL and failed over in
# the middle of a scenario that meant no failover.
RC_NODE_TIMEOUT=15000

rc_cli() {
    local p=$1
    shift
    if [ "$RC_TLS" = 1 ]; then
        redis-cli --tls --cacert "$T_DIR/tls/ca.crt" -p "$p" "$@"
    elif [ -n "$RC_PASS" ]; then
        redis-cli --no-auth-warning -a "$RC_PASS" -p "$p" "$@"
    else
        redis-cli -p "$p" "$@"
    fi
}

rc_ping() {
    [ "$(rc_cli "$1" ping 2>/dev/null)" = PONG ]
}

rc_synced() {
    rc_cli "$(rc_port "$1")" info replication 2>/dev/null |
        grep -q '^master_link_status:up'
}

rc_state_ok() {
    rc_cli "$(rc_port "$1")" cluster info 2>/dev/null |
        grep -q '^cluster_state:ok'
}

# rc_start [requirepass]: 6 nodes, 3 masters + 3 replicas, state ok on all.
rc_start() {
    local i p args
    RC_PASS=${1:-}
    # (Every node's port and bus port is free: t_init locked them only
    # after finding nothing listening there.)
    for i in 1 2 3 4 5 6; do
        p=$(rc_port "$i")
        mkdir -p "$T_DIR/node$i"
        args=(--port "$p" --bind 127.0.0.1 --save "" --appendonly no
            --dir "$T_DIR/node$i" --cluster-enabled yes
            --cluster-port "$(rc_bus_port "$i")" --cluster-config-file nodes.conf
            --cluster-node-timeout "$RC_NODE_TIMEOUT"
            --cluster-replica-validity-factor 0
            --cluster-require-full-coverage no
            --repl-diskless-sync-delay 0)
        # (Redis 7 waits 5 s by default before a diskless full sync, for
        # more replicas to share it: each replica here has its own master,
        # and rc_start awaits their sync.)
        [ -n "$RC_PASS" ] && args+=(--requirepass "$RC_PASS" --masterauth "$RC_PASS")
        [ "$RC_TLS" = 1 ] && args+=(--port 0 --tls-port "$p" --tls-cluster yes
            --tls-replication yes --tls-auth-clients no
            --tls-cert-file "$T_DIR/tls/server.crt"
            --tls-key-file "$T_DIR/tls/server.key"
            --tls-ca-cert-file "$T_DIR/tls/ca.crt")
        lc_spawn "$T_DIR" "node$i" redis-server redis-server "${args[@]}"
    done
    for i in 1 2 3 4 5 6; do
        t_await_proc "node$i" 5000 "node $i answers" rc_ping "$(rc_port "$i")"
    done
    local addrs=()
    for i in 1 2 3 4 5 6; do addrs+=("127.0.0.1:$(rc_port "$i")"); done
    if [ "$RC_TLS" = 1 ]; then
        redis-cli --tls --cacert "$T_DIR/tls/ca.crt" --cluster create \
            "${addrs[@]}" --cluster-replicas 1 --cluster-yes \
            >"$T_DIR/create.log" 2>&1 ||
            t_fail "cluster create: $(tail -3 "$T_DIR/create.log")"
    elif [ -n "$RC_PASS" ]; then
        redis-cli --no-auth-warning -a "$RC_PASS" --cluster create "${addrs[@]}" \
            --cluster-replicas 1 --cluster-yes >"$T_DIR/create.log" 2>&1 ||
            t_fail "cluster create: $(tail -3 "$T_DIR/create.log")"
    else
        redis-cli --cluster create "${addrs[@]}" --cluster-replicas 1 \
            --cluster-yes >"$T_DIR/create.log" 2>&1 ||
            t_fail "cluster create: $(tail -3 "$T_DIR/create.log")"
    fi
    for i in 1 2 3 4 5 6; do
        t_await 10000 "node $i: cluster_state:ok" rc_state_ok "$i"
    done
    # Replicas in sync, so that a failover can happen at once.
    for i in 4 5 6; do
        t_await 10000 "node $i: replica in sync" rc_synced "$i"
    done
    t_log "redis cluster up on ports $(rc_port 1)-$(rc_port 6)"
}

# rc_masters: the ports of the masters that serve slots (node 1's view).
rc_masters() {
    rc_cli "$(rc_port 1)" cluster nodes |
        awk '$3 ~ /master/ && $3 !~ /fail/ && NF > 8 { split($2, a, "[:@]"); print a[2] }' |
        sort -n
}

# rc_server I [flags]: rl-server I over the cluster (seeds: nodes 1 and 4).
rc_server() {
    local i=$1 seeds
    shift
    seeds="127.0.0.1:$(rc_port 1),127.0.0.1:$(rc_port 4)"
    [ -n "$RC_PASS" ] && seeds="redis://:$RC_PASS@$seeds"
    [ "$RC_TLS" = 1 ] && seeds="rediss://$seeds"
    lc_spawn "$T_DIR" "rl-server-$i" rl-server "$RL_SERVER_BIN" \
        --listen "127.0.0.1:$(t_server_port "$i")" \
        --metrics "127.0.0.1:$(t_metrics_port "$i")" \
        --redis-cluster "$seeds" "$@"
}

# Stops every rl-server with one SIGTERM each and fails unless each exits
# 0. (lib.sh's t_servers_exit_clean signals twice, and a second SIGTERM
# that lands after the server's signal handle closed ends it with 143.)
rc_servers_exit_clean() {
    local f name pid rc
    for f in "$T_DIR"/rl-server-*.pid; do
        [ -e "$f" ] || continue
        name=$(basename "$f" .pid)
        pid=$(cat "$f")
        lc_signal "$T_DIR" "$name" TERM
        t_await 10000 "$name exits" lc_gone "$pid"
        rc=0
        wait "$pid" || rc=$?
        rm -f "$T_DIR/$name.pid" "$T_DIR/$name.comm"
        t_check "$name exited $rc on SIGTERM" [ "$rc" = 0 ]
    done
}

rc_bench() {
    local name=$1
    shift
    t_bench_at "127.0.0.1:$(t_server_port 1)" "$name" "$@"
}

rc_bench_bg() {
    local name=$1
    shift
    lc_spawn "$T_DIR" "$name" rl-bench "$RL_BENCH_BIN" \
        --server "127.0.0.1:$(t_server_port 1)" --no-progress \
        --json "$T_DIR/$name.json" "$@"
}

# rc_serving N: server 1 has made more than N decisions (load is running).
rc_serving() {
    t_metric_above 1 'rl_decisions_total{code="ok"}' "$1"
}

rc_redirections() {
    curl -fsS -m 2 "http://127.0.0.1:$(t_metrics_port 1)/metrics" |
        awk -v k="$1" '$1 ~ /^rl_redis_cluster_redirections_total/ && $1 ~ ("kind=\"" k "\"") { s += $2 } END { print s + 0 }'
}

# ---- match ----------------------------------------------------------------

# The scripted sequence for one caller: rl-check against server I with key
# KEY, one line per decision, reset and retry times cut (they depend on
# when the line was decided).
rc_sequence() {
    local port k=$2 out=""
    port=$(t_server_port "$1")
    out+=$("$RL_CHECK_BIN" --server "127.0.0.1:$port" --key "$k" \
        --rule multi --repeat 7 || true)$'\n'
    out+=$("$RL_CHECK_BIN" --server "127.0.0.1:$port" --key "$k" \
        --limit 4 --window 60 --cost 3 --repeat 3 || true)$'\n'
    out+=$("$RL_CHECK_BIN" --server "127.0.0.1:$port" --key "$k" \
        --limit 10 --window 3600 --repeat 11 || true)$'\n'
    # a gcra and a sliding-window-counter: keys in the caller's slot
    # (their state moves by a second at most between the runs, which a
    # 20-minute interval and an hour's window do not show)
    out+=$("$RL_CHECK_BIN" --server "127.0.0.1:$port" --key "$k" \
        --rule g --repeat 6 || true)$'\n'
    out+=$("$RL_CHECK_BIN" --server "127.0.0.1:$port" --key "$k" \
        --rule s --cost 2 --repeat 4 || true)$'\n'
    # a sliding window: its log in the caller's slot
    out+=$("$RL_CHECK_BIN" --server "127.0.0.1:$port" --key "$k" \
        --rule l --cost 2 --repeat 5 || true)$'\n'
    echo "$out" | sed -E 's/ (reset_after_ms|retry_after_ms)=[0-9]+//'
}

# rc_sequences KEY: one caller's sequence through server 1 (one Redis) and
# server 2 (the cluster) at once, appended to single.txt and cluster.txt;
# 1 (and nothing appended) when a minute's edge passed meanwhile: the
# windows of 60 s would then differ by when each request came, not by the
# store. (Edges are on the Unix epoch.)
rc_sequences() {
    local p1 p2 minute
    minute=$(($(date +%s) / 60))
    rc_sequence 1 "$1" >"$T_DIR/single.key" &
    p1=$!
    rc_sequence 2 "$1" >"$T_DIR/cluster.key" &
    p2=$!
    wait "$p1"
    wait "$p2"
    [ $(($(date +%s) / 60)) -eq "$minute" ] || return 1
    cat "$T_DIR/single.key" >>"$T_DIR/single.txt"
    cat "$T_DIR/cluster.key" >>"$T_DIR/cluster.txt"
}

scenario_match() {
    local p keys k ttl n a
    t_init 3
    t_start_redis
    rc_start
    local rules=(--rule multi=5/60,6/3600 --rule 'g=3/1h:gcra:burst=4'
        --rule 's=5/1h:sliding-window-counter' --rule 'l=7/1h:sliding-window'
        --rule 'ga=40/1s:gcra:burst=20' --rule 'sa=60/2s:sliding-window-counter'
        --rule 'pa=30/2s:per-caller' --rule 'la=50/2s:sliding-window')
    t_start_server 1 "" "${rules[@]}"
    rc_server 2 "${rules[@]}"
    rc_server 3 "${rules[@]}"
    t_await_proc rl-server-1 5000 "single-Redis server healthy" t_healthy 1
    t_await_proc rl-server-2 5000 "cluster server healthy" t_healthy 2
    t_await_proc rl-server-3 5000 "second cluster server healthy" t_healthy 3
    # Each caller's two runs inside one minute: one a minute's edge cut
    # runs again with a new key (up to 3 times).
    : >"$T_DIR/single.txt"
    : >"$T_DIR/cluster.txt"
    for k in u1 u2 u3 u4 u5 u6 u7 u8 "user:{x}" "a}b"; do
        for a in 1 2 3; do
            rc_sequences "$k$( ((a == 1)) || echo "~$a")" && break
            t_log "$k, attempt $a: a minute's edge passed during the runs"
            [ "$a" = 3 ] && t_fail "$k: a minute's edge passed during the runs, 3 times"
        done
    done
    n=$(grep -c . "$T_DIR/single.txt")
    t_check "sequence ran ($n lines)" [ "$n" -ge 200 ]
    grep -q OVER_LIMIT "$T_DIR/single.txt" || t_fail "no refusal in the sequence"
    diff "$T_DIR/single.txt" "$T_DIR/cluster.txt" >&2 ||
        t_fail "cluster answers differ from single Redis"
    t_log "same $n answers through the cluster and one Redis"

    # Every algorithm exact under concurrency on the cluster: two servers
    # (each its own batches to every master), a few hot keys, audited.
    local both="127.0.0.1:$(t_server_port 2),127.0.0.1:$(t_server_port 3)"
    t_bench_at "$both" alg_g --fleet --duration 2 --keys 6 --dist uniform \
        --rule ga --algorithm gcra --limit 40 --window 1 --burst 20 \
        --key-prefix g: --audit --timeout-ms 3000
    t_bench_at "$both" alg_s --fleet --duration 2 --keys 6 --dist uniform \
        --rule sa --algorithm sliding-window-counter --limit 60 --window 2 \
        --key-prefix s: --audit --timeout-ms 3000
    t_bench_at "$both" alg_p --fleet --duration 2 --keys 6 --dist uniform \
        --rule pa --phase per-caller --limit 30 --window 2 --key-prefix p: \
        --audit --timeout-ms 3000
    t_bench_at "$both" alg_l --fleet --duration 3 --keys 6 --dist uniform \
        --rule la --algorithm sliding-window --limit 50 --window 2 \
        --key-prefix l: --audit --timeout-ms 3000
    for a in alg_g alg_s alg_p alg_l; do
        t_check "$a: rl-bench exited $(cat "$T_DIR/$a.rc")" \
            [ "$(cat "$T_DIR/$a.rc")" = 0 ]
        t_expect "$a" audit_over_limit -eq 0
        t_expect "$a" errors -eq 0
        t_expect "$a" denied -gt 0
        t_log "$a: $(t_audit_line "$a")"
    done
    t_expect alg_g audit_admissions_checked -gt 100
    t_expect alg_l audit_admissions_checked -gt 100

    # Counters on every master, each with a TTL.
    "$RL_BENCH_BIN" --server "127.0.0.1:$(t_server_port 2)" --no-progress \
        --duration 1 --connections 2 --keys 3000 --limit 5 >/dev/null 2>&1 ||
        t_fail "rl-bench against the cluster server"
    for p in $(rc_masters); do
        n=$(rc_cli "$p" dbsize)
        t_log "master :$p dbsize $n"
        t_check "master :$p holds counters" [ "$n" -gt 100 ]
        keys=$(rc_cli "$p" --scan 2>/dev/null | head -n 50 || true)
        # Their TTLs in one redis-cli (each key quoted for its parser):
        # one process per key took seconds on a loaded machine.
        awk '{ gsub(/\\/, "\\\\"); gsub(/"/, "\\\""); print "PTTL \"" $0 "\"" }' \
            <<<"$keys" | rc_cli "$p" >"$T_DIR/ttls" 2>&1 ||
            t_fail "PTTL on :$p: $(tail -1 "$T_DIR/ttls")"
        t_check "a TTL for each of the keys of :$p" \
            [ "$(grep -c . "$T_DIR/ttls")" = "$(grep -c . <<<"$keys")" ]
        while IFS=$'\t' read -r k ttl; do
            # The fleet's own bookkeeping (the switches and the instances
            # that poll them, written by rl-ctl and the switch poller,
            # DESIGN.md) is meant to stay; every counter and quota must
            # expire. (The scan's first 50 keys hold them or not, as the
            # slots fall.)
            case "$k" in rl:policy | rl:instances) continue ;; esac
            # -2: gone since the scan (its window ended and it expired,
            # which a slow machine's minute of checks can span); only -1,
            # a key without an expiry, is wrong.
            [ "$ttl" -gt 0 ] || [ "$ttl" = -2 ] ||
                t_fail "key $k on :$p has no TTL ($ttl)"
        done < <(paste <(echo "$keys") "$T_DIR/ttls")
    done
    rc_servers_exit_clean
}

# ---- reshard --------------------------------------------------------------

scenario_reshard() {
    local from to moved ask
    t_init 1
    rc_start
    rc_server 1 --redis-timeout-ms 1000
    t_await_proc rl-server-1 5000 "server healthy" t_healthy 1
    from=$(rc_cli "$(rc_port 1)" cluster myid)
    to=$(rc_cli "$(rc_port 2)" cluster myid)
    rc_bench_bg uni --duration 8 --connections 4 --inflight 32 --keys 20000 \
        --dist hot:0.3 --limit 50 --window 60 --audit --timeout-ms 3000
    t_await_proc uni 10000 "load running" rc_serving 1000
    t_log "moving 1000 slots from :$(rc_port 1) to :$(rc_port 2) under load"
    redis-cli --cluster reshard "127.0.0.1:$(rc_port 1)" --cluster-from "$from" \
        --cluster-to "$to" --cluster-slots 1000 --cluster-yes \
        >"$T_DIR/reshard.log" 2>&1 || t_fail "reshard: $(tail -3 "$T_DIR/reshard.log")"
    t_log "reshard done"
    t_bench_wait uni 30000
    t_check "rl-bench exit 0 (audit)" [ "$(cat "$T_DIR/uni.rc")" = 0 ]
    t_log "$(t_audit_line uni)"
    t_expect uni audit_over_limit -eq 0
    t_expect uni timeouts -eq 0
    t_expect uni connection_lost -eq 0
    t_expect uni errors -eq 0
    moved=$(rc_redirections moved)
    ask=$(rc_redirections ask)
    t_log "redirections: MOVED $moved, ASK $ask"
    t_check "MOVED or ASK seen" [ $((moved + ask)) -gt 0 ]
    rc_servers_exit_clean
}

# ---- failover -------------------------------------------------------------

scenario_failover() {
    RC_NODE_TIMEOUT=1000
    local victim t0 t1 errs masters p
    t_init 1
    rc_start
    # The surviving masters must fail no call: a timeout long enough that a
    # loaded machine does not make them (the dead master's calls fail at
    # once: its connections are reset).
    rc_server 1 --redis-timeout-ms 2000 --fail-closed
    t_await_proc rl-server-1 5000 "server healthy" t_healthy 1
    masters=$(rc_masters)
    victim=$(echo "$masters" | head -n 1)
    rc_bench_bg fo --duration 10 --connections 4 --inflight 32 --keys 20000 \
        --limit 50 --window 60 --audit --timeout-ms 3000
    t_await_proc fo 10000 "load running" rc_serving 2000
    t_log "kill -9 master :$victim"
    t0=$(lc_ms)
    for n in 1 2 3; do
        [ "$(rc_port "$n")" = "$victim" ] && lc_signal "$T_DIR" "node$n" KILL
    done
    t_await 3000 "/healthz 503 (slots down)" bash -c \
        "! curl -fsS -m 1 http://127.0.0.1:$(t_metrics_port 1)/healthz >/dev/null"
    curl -sS -m 1 "http://127.0.0.1:$(t_metrics_port 1)/healthz" | sed 's/^/    healthz: /'
    echo
    t_await 15000 "server healthy again (replica promoted)" t_healthy 1
    t1=$(lc_ms)
    t_log "recovered: /healthz 200 again $((t1 - t0)) ms after the kill"
    t_bench_wait fo 30000
    t_log "$(t_audit_line fo)"
    t_expect fo audit_over_limit -eq 0
    t_expect fo timeouts -eq 0
    t_expect fo connection_lost -eq 0
    errs=$(t_json fo errors)
    t_log "errors during the failover: $errs"
    # Only the dead master's calls failed: the other two masters count no
    # error (cluster-require-full-coverage no keeps them serving). (The
    # promoted replica may count a few: calls sent while rl-server was
    # still connecting to it.)
    curl -fsS -m 2 "http://127.0.0.1:$(t_metrics_port 1)/metrics" |
        grep '^rl_redis_cluster_node_errors_total' >"$T_DIR/node_errors"
    sed 's/^/    /' "$T_DIR/node_errors"
    grep -q ":$victim\"" "$T_DIR/node_errors" &&
        t_fail "the dead master is still in the map"
    for p in $masters; do
        [ "$p" = "$victim" ] && continue
        grep -q ":$p\"} 0\$" "$T_DIR/node_errors" ||
            t_fail "surviving master :$p had failed calls"
    done
    # After recovery: no more errors.
    rc_bench after --duration 2 --connections 2 --keys 5000 --limit 50 \
        --audit --timeout-ms 3000
    t_expect after errors -eq 0
    t_expect after audit_over_limit -eq 0
    rc_servers_exit_clean
}

# ---- hang -----------------------------------------------------------------

scenario_hang() {
    local victim n ok err k line port
    t_init 1
    # No failover while the master is stopped: the point is a hung node.
    RC_NODE_TIMEOUT=60000
    rc_start
    rc_server 1 --redis-timeout-ms 300 --fail-closed
    t_await_proc rl-server-1 5000 "server healthy" t_healthy 1
    victim=$(rc_masters | head -n 1)
    for n in 1 2 3; do
        [ "$(rc_port "$n")" = "$victim" ] && lc_signal "$T_DIR" "node$n" STOP
    done
    t_log "master :$victim stopped (SIGSTOP)"
    ok=0
    err=0
    port=$(t_server_port 1)
    for k in $(seq 1 60); do
        line=$("$RL_CHECK_BIN" --server "127.0.0.1:$port" --key "h$k" \
            --limit 5 --window 60 --timeout 3000 2>&1 || true)
        case $line in
        OK*) ok=$((ok + 1)) ;;
        *) err=$((err + 1)) ;;
        esac
    done
    t_log "while stopped: $ok decided, $err failed (of 60 keys)"
    t_check "keys of the other masters decided" [ "$ok" -ge 20 ]
    t_check "keys of the stopped master failed" [ "$err" -ge 5 ]
    # Under load: the stopped master's share fails (after one timeout, at
    # once while it stays stuck), the rest is decided without waiting for
    # it: a median latency far below the 300 ms timeout. (That a part is
    # answered before the rest of its batch is test_batch's
    # test_part_answers.)
    rc_bench hung --duration 3 --connections 4 --inflight 16 --keys 20000 \
        --limit 1000 --timeout-ms 3000
    t_expect hung timeouts -eq 0
    t_expect hung connection_lost -eq 0
    p50=$(t_json hung p50_us)
    t_log "while stopped, under load: p50 $p50 us, $(t_json hung errors) of $(t_json hung decisions) failed"
    t_check "others not held by the stopped master (p50 $p50 us)" \
        awk -v p="$p50" 'BEGIN { exit !(p < 150000) }'
    t_check "the stopped master's share failed" [ "$(t_json hung errors)" -gt 0 ]
    curl -sS -m 1 "http://127.0.0.1:$(t_metrics_port 1)/healthz" >"$T_DIR/hz" || true
    t_log "healthz: $(cat "$T_DIR/hz")"
    grep -q 'slots' "$T_DIR/hz" || t_fail "/healthz does not name the slots down"
    for n in 1 2 3; do
        [ "$(rc_port "$n")" = "$victim" ] && lc_signal "$T_DIR" "node$n" CONT
    done
    t_await 10000 "server healthy after SIGCONT" t_healthy 1
    rc_servers_exit_clean
}

# ---- password -------------------------------------------------------------

scenario_password() {
    local n i out
    t_init 3
    rc_start s3cret-pw
    rc_server 1
    t_await_proc rl-server-1 5000 "server healthy with the password" t_healthy 1
    "$RL_CHECK_BIN" --server "127.0.0.1:$(t_server_port 1)" --key pw \
        --limit 3 --window 60 | grep -q '^OK' || t_fail "no decision"
    # An ACL user with exactly what deploy/README.md gives rl-server on a
    # cluster (ACLs are per node: set on each), its password from a file.
    for i in 1 2 3 4 5 6; do
        redis-cli --no-auth-warning -a s3cret-pw -p "$(rc_port "$i")" \
            ACL SETUSER rl on '>rl-user-pw' '~rl:*' -@all +select \
            '+script|load' +evalsha +eval +info +time +incrby +decrby +del \
            +pexpireat +hget +hset +hgetall +hdel +ping '+cluster|shards' \
            '+cluster|slots' +asking >/dev/null ||
            t_fail "ACL SETUSER on node $i"
    done
    printf 'rl-user-pw\n' >"$T_DIR/rl.pw"
    lc_spawn "$T_DIR" "rl-server-3" rl-server "$RL_SERVER_BIN" \
        --listen "127.0.0.1:$(t_server_port 3)" \
        --metrics "127.0.0.1:$(t_metrics_port 3)" \
        --redis-cluster "redis://rl@127.0.0.1:$(rc_port 1),127.0.0.1:$(rc_port 4)" \
        --redis-password-file "$T_DIR/rl.pw"
    t_await_proc rl-server-3 5000 "server healthy as the ACL user" t_healthy 3
    for i in 1 2 3 4 5 6 7 8; do
        # (rl-check exits 1 after a refusal: the last answer here.)
        out=$({ "$RL_CHECK_BIN" --server "127.0.0.1:$(t_server_port 3)" \
            --key "acl$i" --limit 2 --window 3600 --repeat 3 || true; } |
            cut -d' ' -f1 | tr '\n' ' ')
        t_check "ACL user, caller acl$i: OK OK OVER_LIMIT (got $out)" \
            [ "$out" = "OK OK OVER_LIMIT " ]
    done
    grep -q NOPERM "$T_DIR/rl-server-3.log" && t_fail "NOPERM under the ACL"
    grep -q rl-user-pw "$T_DIR/rl-server-3.log" &&
        t_fail "the user's password in a log line"
    RC_PASS=wrong-pw rc_server 2
    t_await 5000 "server 2 logs the refusal" grep -q 'WRONGPASS\|invalid' \
        "$T_DIR/rl-server-2.log"
    sleep 1 # more attempts happen meanwhile; they must not add lines
    # (The start's warning that this fleet has no --handle-secret-file is
    # not one of the refusal's.)
    n=$(grep 'level=warn' "$T_DIR/rl-server-2.log" | grep -vc handle-secret)
    grep 'level=warn' "$T_DIR/rl-server-2.log" | sed 's/^/    /'
    t_check "one warning line (2 seeds), got $n" [ "$n" -eq 1 ]
    t_healthy 2 && t_fail "server 2 healthy with a wrong password"
    rc_servers_exit_clean
}

# ---- ctl ------------------------------------------------------------------

rc_ctl() {
    "$(dirname "$RL_SERVER_BIN")/../tools/rl-ctl" --redis-cluster \
        "127.0.0.1:$(rc_port 2),127.0.0.1:$(rc_port 5)" "$@"
}

scenario_ctl() {
    local out
    t_init 1
    rc_start
    # Hour windows: a minute's edge passing mid-test would reset counts.
    rc_server 1 --rule api=5/3600
    t_await_proc rl-server-1 5000 "server healthy" t_healthy 1
    for k in q1 q2 q3 q4 q5 q6; do
        rc_ctl --wait-ms 5000 quota set api "$k" 2/3600 >"$T_DIR/ctl.out" 2>&1 ||
            t_fail "rl-ctl quota set: $(cat "$T_DIR/ctl.out")"
        out=$(rc_ctl quota get api "$k" 2>&1 || true)
        [[ "$out" == *2/1h* ]] || t_fail "quota get $k: $out"
        out=$("$RL_CHECK_BIN" --server "127.0.0.1:$(t_server_port 1)" \
            --key "$k" --rule api --repeat 3 || true)
        echo "$out" | tail -n 1 | grep -q '^OVER_LIMIT.*limit=2' ||
            t_fail "quota of $k not applied: $out"
    done
    t_log "quotas of 6 callers set through rl-ctl --redis-cluster, applied"
    rc_ctl --wait-ms 5000 global shadow >"$T_DIR/ctl.out" 2>&1 ||
        t_fail "rl-ctl global shadow: $(cat "$T_DIR/ctl.out")"
    sed 's/^/    /' "$T_DIR/ctl.out"
    out=$("$RL_CHECK_BIN" --server "127.0.0.1:$(t_server_port 1)" --key q1 \
        --rule api)
    echo "$out" | grep -q shadow_refused || t_fail "switch not applied: $out"
    t_log "global shadow reached the server: $out"
    rc_servers_exit_clean
    # Envoy's API with its counters on this cluster: envoy-ratelimit's
    # examples and today's configurations, the same runs as on the memory
    # store and one Redis (e2e_envoy_grpc.py; its servers use their own
    # prefixes, so the global shadow above is not theirs).
    local src
    src=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
    RL_CHECK="$RL_CHECK_BIN" \
        RL_ENVOY_STORE="--redis-cluster 127.0.0.1:$(rc_port 1),127.0.0.1:$(rc_port 4)" \
        /usr/bin/python3 "$src/tests/server/e2e/envoy/e2e_envoy_grpc.py" \
        "$RL_SERVER_BIN" "$src/proto" "$src/tests/server/e2e/envoy" \
        >"$T_DIR/envoy.log" 2>&1 ||
        t_fail "Envoy's API on the cluster: $(grep -E '^FAIL|rror' \
            "$T_DIR/envoy.log" | head -5)"
    t_log "Envoy's API on the cluster: $(tail -1 "$T_DIR/envoy.log")"
    # Reservations and leases across three instances on this cluster
    # (e2e_xop.py, with its own prefix).
    RL_XOP_STORE="--redis-cluster 127.0.0.1:$(rc_port 1),127.0.0.1:$(rc_port 4)" \
        /usr/bin/python3 "$src/tests/server/e2e/e2e_xop.py" \
        "$RL_SERVER_BIN" "$src/proto" >"$T_DIR/xop.log" 2>&1 ||
        t_fail "reservations and leases on the cluster: $(grep -E \
            '^FAIL|rror' "$T_DIR/xop.log" | head -5)"
    t_log "reservations and leases on the cluster: $(tail -1 "$T_DIR/xop.log")"
}

# ---- tls ------------------------------------------------------------------

# A CA, a server certificate for 127.0.0.1 and localhost (every node's),
# and a second CA that signed nothing of ours.
rc_tls_certs() {
    local d=$T_DIR/tls ca
    mkdir -p "$d"
    for ca in ca otherca; do
        openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 \
            -nodes -days 2 -subj "/CN=rl test $ca" -keyout "$d/$ca.key" \
            -out "$d/$ca.crt" 2>/dev/null || t_fail "openssl: $ca"
    done
    printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\n' >"$d/server.ext"
    openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
        -subj "/CN=rl test node" -keyout "$d/server.key" \
        -out "$d/server.csr" 2>/dev/null || t_fail "openssl: server key"
    openssl x509 -req -in "$d/server.csr" -CA "$d/ca.crt" -CAkey "$d/ca.key" \
        -CAcreateserial -days 2 -extfile "$d/server.ext" \
        -out "$d/server.crt" 2>/dev/null || t_fail "openssl: server cert"
}

scenario_tls() {
    local out p n
    t_init 2
    command -v openssl >/dev/null || t_fail "openssl not found"
    RC_TLS=1
    rc_tls_certs
    rc_start
    rc_server 1 --redis-tls-ca "$T_DIR/tls/ca.crt" --rule api=5/3600
    t_await_proc rl-server-1 5000 "server healthy over TLS" t_healthy 1
    grep -q 'tls=verify' "$T_DIR/rl-server-1.log" ||
        t_fail "the server does not say it checks certificates"
    # Exact: 5 of 8 allowed for each of a dozen callers (spread over the
    # masters).
    for k in t1 t2 t3 t4 t5 t6 t7 t8 t9 t10 t11 t12; do
        out=$("$RL_CHECK_BIN" --server "127.0.0.1:$(t_server_port 1)" \
            --key "$k" --rule api --repeat 8 2>&1 || true)
        [ "$(echo "$out" | grep -c '^OK')" = 5 ] &&
            [ "$(echo "$out" | grep -c '^OVER_LIMIT')" = 3 ] &&
            ! echo "$out" | grep -q fail-open ||
            t_fail "caller $k: not exactly 5 of 8 over TLS: $out"
    done
    t_log "12 callers: exactly 5 of 8 allowed each, over TLS"
    rc_bench tlsload --duration 3 --connections 4 --inflight 32 \
        --keys 20000 --limit 50 --window 60 --audit --timeout-ms 3000
    t_expect tlsload errors -eq 0
    t_expect tlsload audit_over_limit -eq 0
    t_log "$(t_audit_line tlsload)"
    for p in $(rc_masters); do
        n=$(rc_cli "$p" dbsize)
        t_log "master :$p dbsize $n (over TLS)"
        t_check "master :$p holds counters" [ "$n" -gt 100 ]
    done
    "$(dirname "$RL_SERVER_BIN")/../tools/rl-ctl" --redis-cluster \
        "rediss://127.0.0.1:$(rc_port 2),127.0.0.1:$(rc_port 5)" \
        --redis-tls-ca "$T_DIR/tls/ca.crt" --wait-ms 5000 \
        quota set api tq 2/3600 >"$T_DIR/ctl.out" 2>&1 ||
        t_fail "rl-ctl over TLS: $(cat "$T_DIR/ctl.out")"
    out=$("$RL_CHECK_BIN" --server "127.0.0.1:$(t_server_port 1)" \
        --key tq --rule api --repeat 3 || true)
    echo "$out" | tail -n 1 | grep -q '^OVER_LIMIT.*limit=2' ||
        t_fail "quota set over TLS not applied: $out"
    t_log "rl-ctl --redis-cluster rediss://: quota set and applied"
    rc_server 2 --redis-tls-ca "$T_DIR/tls/otherca.crt"
    t_await 5000 "server 2 logs the verification failure" grep -q \
        'certificate verify failed' "$T_DIR/rl-server-2.log"
    t_healthy 2 && t_fail "server 2 healthy with the wrong CA"
    rc_servers_exit_clean
}

# ---- levels ---------------------------------------------------------------

# rc_level N K1=R1 K2=R2: one rl-check of two levels on server N; prints
# its line (stderr too) and leaves its exit status in T_RC.
rc_level() {
    local n=$1
    shift
    T_RC=0
    "$RL_CHECK_BIN" --server "127.0.0.1:$(t_server_port "$n")" \
        --level "$1" --level "$2" 2>&1 || T_RC=$?
}

scenario_levels() {
    local out i want p n total=0 key
    t_init 2
    rc_start
    # Hour windows: no edge passes mid-test. A second pair for the load.
    for i in 1 2; do
        rc_server "$i" --rule org=3/3600 --rule user=2/3600 \
            --rule lorg=20/1 --rule luser=8/1
        t_await_proc "rl-server-$i" 5000 "server $i healthy" t_healthy "$i"
    done
    # The organisation {acme} and its users, alternating servers: a's
    # third is refused by level 2 (spending nothing of the organisation's,
    # which b then gets), c's by level 1 (spending nothing of c's).
    want=("a OK 2" "a OK 2" "a OVER_LIMIT 2" "b OK 1" "c OVER_LIMIT 1")
    for i in 0 1 2 3 4; do
        set -- ${want[$i]}
        out=$(rc_level $((i % 2 + 1)) "{acme}org=org" "{acme}user:$1=user"; echo "rc=$T_RC")
        [[ "$out" == "$2 "*"level=$3"* ]] ||
            t_fail "check $i (user $1): expected $2 at level $3: $out"
    done
    t_log "one {tenant}: decided all or nothing on the cluster: $out"
    out=$(rc_level 1 "org:x=org" "user:y=user"; echo "rc=$T_RC")
    [[ "$out" == *"different Redis Cluster hash slots"*"rc=2"* ]] ||
        t_fail "levels in two slots were not refused: $out"
    t_log "levels in two slots refused: $(echo "$out" | head -1)"
    # The counters: what the allowed checks cost, on the {acme} slot's
    # master; none for the refused user c, none for the refused pair.
    for p in $(rc_masters); do
        for key in $(rc_cli "$p" --scan --pattern '*{acme}*'); do
            n=$(rc_cli "$p" get "$key")
            t_log "master :$p $key = $n"
            case $key in
            *"{acme}org}"*) t_check "org count 3" [ "$n" = 3 ] ;;
            *"{acme}user:a}"*) t_check "user a count 2" [ "$n" = 2 ] ;;
            *"{acme}user:b}"*) t_check "user b count 1" [ "$n" = 1 ] ;;
            *) t_fail "unexpected counter $key = $n" ;;
            esac
            total=$((total + 1))
        done
        [ -z "$(rc_cli "$p" --scan --pattern '*org:x*')" ] ||
            t_fail "the refused pair left a counter on :$p"
    done
    t_check "3 counters of {acme} ($total)" [ "$total" = 3 ]
    # Under load: users of 3 tenants over both servers, audited per level.
    local both="127.0.0.1:$(t_server_port 1),127.0.0.1:$(t_server_port 2)"
    t_bench_at "$both" lv --fleet --connections 4 --inflight 8 --levels 3 \
        --keys 12 --dist hot:0.5 --rule luser --org-rule lorg --limit 8 \
        --window 1 --org-limit 20 --duration 2.5 --audit --key-prefix lv: \
        --timeout-ms 5000
    t_check "lv: rl-bench exited $(cat "$T_DIR/lv.rc")" \
        [ "$(cat "$T_DIR/lv.rc")" = 0 ]
    t_expect lv errors -eq 0
    t_expect lv audit_over_limit -eq 0
    t_expect lv audit_org_over_limit -eq 0
    t_expect lv levels_refused_org -gt 0
    t_expect lv levels_refused_user -gt 0
    t_expect lv audit_org_checked_windows -gt 0
    [ "$(t_json lv audit_exact)" = true ] && [ "$(t_json lv audit_org_exact)" = true ] ||
        t_fail "lv: a level refused short of its limit"
    t_log "lv: $(t_audit_line lv); org: $(t_json lv audit_org_exact_windows)/$(t_json lv audit_org_checked_windows) exact"
    for p in $(rc_masters); do
        t_log "master :$p dbsize $(rc_cli "$p" dbsize)"
    done
    rc_servers_exit_clean
}

scenario_xop() {
    [ -x "${RLT_XOP_BIN:-}" ] || t_fail "RLT_XOP_BIN: no test binary"
    t_init 0
    rc_start
    RLT_XOP_CLUSTER="127.0.0.1:$(rc_port 1)" "$RLT_XOP_BIN" \
        >"$T_DIR/xop.log" 2>&1 || t_fail "test_store_xop on the cluster:
$(grep -v '^ts=' "$T_DIR/xop.log" | tail -20)"
    grep -q '^\[       OK \] test_model_cluster' "$T_DIR/xop.log" ||
        t_fail "the cluster run did not run: $(tail -5 "$T_DIR/xop.log")"
    grep -E 'settles|OK|PASSED' "$T_DIR/xop.log"
    for p in $(rc_masters); do
        t_log "master :$p dbsize $(rc_cli "$p" dbsize)"
    done
}

# RLQS's fleet step (store/rlqs.lua through the cluster store's command())
# on budgets of every master: test_rlqs_fleet's scripted steps
# (RLT_RLQS_BIN names the test binary, RLT_RLQS_CLUSTER tells it the seed).
scenario_rlqs() {
    local p n
    [ -x "${RLT_RLQS_BIN:-}" ] || t_fail "RLT_RLQS_BIN: no test binary"
    t_init 0
    rc_start
    RLT_RLQS_CLUSTER="127.0.0.1:$(rc_port 1)" "$RLT_RLQS_BIN" \
        >"$T_DIR/rlqs.log" 2>&1 || t_fail "test_rlqs_fleet on the cluster:
$(grep -v '^ts=' "$T_DIR/rlqs.log" | tail -20)"
    grep -q '^\[       OK \] test_cluster' "$T_DIR/rlqs.log" ||
        t_fail "the cluster run did not run: $(tail -5 "$T_DIR/rlqs.log")"
    for p in $(rc_masters); do
        n=$(rc_cli "$p" --scan --pattern 'rl:rlqs*' | wc -l)
        t_log "master :$p holds $n RLQS keys"
        [ "$n" -gt 0 ] || t_fail "master :$p holds no RLQS key"
    done
}

case $SCENARIO in
match | reshard | failover | hang | password | ctl | tls | xop | rlqs | levels)
    "scenario_$SCENARIO"
    ;;
*)
    echo "unknown scenario '$SCENARIO'" >&2
    exit 2
    ;;
esac
t_log "PASS $SCENARIO"
