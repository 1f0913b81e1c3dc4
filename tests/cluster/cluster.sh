#!/usr/bin/env bash
# Cluster scenarios: three rl-servers behind HAProxy over one Redis, driven
# through HAProxy by rl-bench --audit (the fleet scenario drives the
# servers themselves with rl-bench --fleet). Each scenario starts its own
# cluster on free loopback ports and stops every process by pid when it
# ends.
#
#   tests/cluster/cluster.sh SCENARIO RL_SERVER RL_BENCH [RL_CHECK]
#   tests/cluster/cluster.sh all      RL_SERVER RL_BENCH [RL_CHECK]
#
# Scenarios (CTest runs each as cluster_<name>, label `integration`):
#   hot_key       one key, limit L per window: exactly L per window in total
#   fleet         the same without HAProxy: rl-bench --fleet pins two
#                 connections to each server and audits all their answers
#                 as one; each server's /metrics equals its share
#   uniform       many keys: no window over its limit
#   algorithms    --fleet on a gcra, a sliding-window-counter, a sliding
#                 window and staggered fixed windows: every admission
#                 audited by its own rule
#   clock_skew    two servers' wall clocks shifted by -40 s and +25 s
#   kill_server   one server SIGKILLed mid-run
#   drain         one server SIGTERMed with --drain-ms mid-run
#   redis_health  /healthz 503 while Redis is down, 200 when it is back
#   local_cluster deploy/local-cluster.sh up / status / down
# Every scenario also checks that the servers' /metrics decision counts
# equal what rl-bench saw, where no server died with answers in flight.
# Load is short (a few seconds, 2 s windows) so that the whole set stays
# well under two minutes. Exit status 0 when the scenario passed.
set -euo pipefail

usage() {
    echo "usage: $0 SCENARIO|all RL_SERVER RL_BENCH [RL_CHECK]" >&2
    exit 2
}
[ $# -ge 3 ] || usage
SCENARIO=$1
RL_SERVER_BIN=$(realpath "$2")
RL_BENCH_BIN=$(realpath "$3")
RL_CHECK_BIN=$(realpath "${4:-$(dirname "$3")/../rl-check}")
export RL_SERVER_BIN RL_BENCH_BIN RL_CHECK_BIN

# shellcheck source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

# Six connections: two per server under leastconn.
CONNS=6
# Open loop at a fixed rate, where /metrics must match rl-bench: the run
# sends only what its schedule holds and counts every answer, whereas a
# closed loop sends a few more between the end of the measured time and
# the timer that stops it, which it does not count. 10,000/s hammers a hot
# key (limit 100 per 2 s) and stays within what the sanitizer build
# sustains on two cores.
RATE=10000
LOAD=(--connections "$CONNS" --rate "$RATE" --timeout-ms 3000)
# Closed loop, 16 in flight per connection, where the bound on what a
# killed server can take down with it must be exact.
INFLIGHT=16
CLOSED=(--connections "$CONNS" --inflight "$INFLIGHT" --timeout-ms 3000)

OK='rl_decisions_total{code="ok"}'
OVER='rl_decisions_total{code="over_limit"}'
ERR='rl_decisions_total{code="error"}'

# The servers' decisions, summed, equal rl-bench's answers, code by code:
# every decision a server made reached the client, and none was invented.
# extra_ok/over/err add the counts of a server that has exited.
check_metrics_match() {
    local name=$1 xok=${2:-0} xover=${3:-0} xerr=${4:-0} ok over err
    ok=$(($(t_metric_sum "$OK") + xok))
    over=$(($(t_metric_sum "$OVER") + xover))
    err=$(($(t_metric_sum "$ERR") + xerr))
    t_expect "$name" allowed -eq "$ok"
    t_expect "$name" denied -eq "$over"
    t_expect "$name" server_errors -eq "$err"
    t_log "$name: /metrics summed over servers: ok $ok, over_limit $over, error $err (= rl-bench's allowed, denied, server errors)"
}

# Nothing failed: no request lost, timed out or refused. rl-bench's open
# loop may leave a few scheduled requests unsent at the edges of the run
# (while connecting, at the end of the schedule); those never reached a
# server, and at most 0.5% of them is tolerated.
check_no_errors() {
    local name=$1
    t_expect "$name" connection_lost -eq 0
    t_expect "$name" timeouts -eq 0
    t_expect "$name" server_errors -eq 0
    t_expect "$name" other_errors -eq 0
    t_expect "$name" failed_open -eq 0
    t_expect "$name" unsent -le $(($(t_json "$name" decisions) / 200))
}

check_every_server_served() {
    local i
    for i in $(seq 1 "$T_N"); do
        t_check "rl-server $i took no requests" t_metric_above "$i" "$OVER" 0
    done
}

check_audit_clean() {
    local name=$1
    t_expect "$name" audit_over_limit -eq 0
    t_check "$name: audit unreliable" [ "$(t_json "$name" audit_unreliable)" = false ]
}

check_exact() {
    local name=$1
    t_expect "$name" audit_checked_windows -ge 1
    t_check "$name: a hammered window did not allow exactly its limit" \
        [ "$(t_json "$name" audit_exact)" = true ]
}

scenario_hot_key() {
    t_init 3
    t_cluster_up
    t_bench hot --duration 4 --keys 1 --dist hot --limit 100 --window 2 \
        --key-prefix hot: --audit "${LOAD[@]}"
    t_check "rl-bench exited $(cat "$T_DIR/hot.rc")" [ "$(cat "$T_DIR/hot.rc")" = 0 ]
    check_audit_clean hot
    check_exact hot
    check_no_errors hot
    check_every_server_served
    check_metrics_match hot
    t_log "hot_key: $(t_audit_line hot)"
}

# HAProxy decides which server a connection lands on, so the scenarios
# above cannot say what each server did. --fleet connects to the servers
# themselves, connection i to server i mod 3, and reports each one's
# decisions: they must equal that server's own /metrics, and the one audit
# over every server's answers must find the hot key exact per window.
scenario_fleet() {
    local i j ok over
    t_init 3
    t_cluster_up
    t_bench_at "$(t_servers)" fleet --fleet --duration 4 --keys 1 --dist hot \
        --limit 100 --window 2 --key-prefix fleet: --audit "${LOAD[@]}"
    t_check "rl-bench exited $(cat "$T_DIR/fleet.rc")" [ "$(cat "$T_DIR/fleet.rc")" = 0 ]
    t_check "fleet: not a --fleet run" [ "$(t_json fleet fleet)" = true ]
    check_audit_clean fleet
    check_exact fleet
    check_no_errors fleet
    for i in $(seq 1 "$T_N"); do
        j=$((i - 1))
        t_check "fleet: servers[$j] is not rl-server $i" \
            [ "$(t_json fleet "servers[$j].server")" = "127.0.0.1:$(t_server_port "$i")" ]
        t_expect fleet "servers[$j].connections" -eq $((CONNS / T_N))
        t_expect fleet "servers[$j].decisions" -gt 0
        t_expect fleet "servers[$j].errors" -eq 0
        ok=$(t_metric "$i" "$OK")
        over=$(t_metric "$i" "$OVER")
        t_expect fleet "servers[$j].allowed" -eq "$ok"
        t_expect fleet "servers[$j].denied" -eq "$over"
        t_log "fleet: rl-server $i: /metrics ok $ok, over_limit $over (= rl-bench's count for it)"
    done
    check_metrics_match fleet
    t_log "fleet: $(t_audit_line fleet)"
}

# Every algorithm exact under concurrency: three servers on one Redis, a
# few hot keys per algorithm, every admission audited by its own rule
# (gcra: no interval holds more than the burst and what the rate adds;
# sliding-window-counter: its formula; sliding-window: no window holds more
# than the limit; staggered fixed windows: each caller's windows at its
# offset).
scenario_algorithms() {
    local a
    t_init 3
    t_cluster_up -- --rule 'g=40/1s:gcra:burst=20' \
        --rule 's=60/2s:sliding-window-counter' --rule 'p=30/2s:per-caller' \
        --rule 'l=50/2s:sliding-window'
    t_bench_at "$(t_servers)" alg_g --fleet --duration 3 --keys 5 \
        --dist uniform --rule g --algorithm gcra --limit 40 --window 1 \
        --burst 20 --key-prefix g: --audit "${LOAD[@]}"
    t_bench_at "$(t_servers)" alg_s --fleet --duration 3 --keys 5 \
        --dist uniform --rule s --algorithm sliding-window-counter \
        --limit 60 --window 2 --key-prefix s: --audit "${LOAD[@]}"
    t_bench_at "$(t_servers)" alg_p --fleet --duration 3 --keys 5 \
        --dist uniform --rule p --phase per-caller --limit 30 --window 2 \
        --key-prefix p: --audit "${LOAD[@]}"
    t_bench_at "$(t_servers)" alg_l --fleet --duration 3 --keys 5 \
        --dist uniform --rule l --algorithm sliding-window --limit 50 \
        --window 2 --key-prefix l: --audit "${LOAD[@]}"
    for a in alg_g alg_s alg_p alg_l; do
        t_check "$a: rl-bench exited $(cat "$T_DIR/$a.rc")" \
            [ "$(cat "$T_DIR/$a.rc")" = 0 ]
        t_expect "$a" audit_over_limit -eq 0
        t_expect "$a" denied -gt 0
        check_no_errors "$a"
        t_log "$a: $(t_audit_line "$a")"
    done
    t_expect alg_g audit_admissions_checked -gt 100
    t_expect alg_s audit_admissions_checked -gt 100
    t_expect alg_l audit_admissions_checked -gt 100
}

scenario_uniform() {
    t_init 3
    t_cluster_up
    t_bench uni --duration 4 --keys 500 --dist uniform --limit 20 \
        --window 2 --key-prefix uni: --audit "${LOAD[@]}"
    t_check "rl-bench exited $(cat "$T_DIR/uni.rc")" [ "$(cat "$T_DIR/uni.rc")" = 0 ]
    check_audit_clean uni
    t_expect uni denied -gt 0
    check_no_errors uni
    check_every_server_served
    check_metrics_match uni
    t_log "uniform: $(t_audit_line uni)"
}

# Seconds between now and the ts= of the first line of a server's log.
log_clock_offset() {
    local ts
    ts=$(head -n 1 "$T_DIR/rl-server-$1.log" | sed -E 's/^ts=([^ ]+) .*/\1/')
    echo $(($(date -d "$ts" +%s) - $(date +%s)))
}

scenario_clock_skew() {
    local off2 off3
    t_init 3
    # Server 1 on the true clock, server 2 40 s behind, server 3 25 s
    # ahead: were windows taken from their own clocks, the hot key would
    # get a separate budget on each server.
    t_cluster_up - -40s +25s
    off2=$(log_clock_offset 2)
    off3=$(log_clock_offset 3)
    t_check "server 2's clock is not shifted (${off2}s)" t_between "$off2" -45 -35
    t_check "server 3's clock is not shifted (${off3}s)" t_between "$off3" 20 30
    t_log "clock_skew: server clocks differ from the true clock by 0 s, ${off2} s, ${off3} s"
    t_bench skew --duration 4 --keys 1 --dist hot --limit 100 --window 2 \
        --key-prefix skew: --audit "${LOAD[@]}"
    t_check "rl-bench exited $(cat "$T_DIR/skew.rc")" [ "$(cat "$T_DIR/skew.rc")" = 0 ]
    check_audit_clean skew
    check_exact skew
    check_no_errors skew
    check_every_server_served
    check_metrics_match skew
    t_log "clock_skew: $(t_audit_line skew)"
    t_bench skewu --duration 2 --keys 500 --dist uniform --limit 20 \
        --window 2 --key-prefix skewu: --audit "${LOAD[@]}"
    t_check "rl-bench exited $(cat "$T_DIR/skewu.rc")" [ "$(cat "$T_DIR/skewu.rc")" = 0 ]
    check_audit_clean skewu
    t_log "clock_skew (uniform keys): $(t_audit_line skewu)"
}

scenario_kill_server() {
    local conns2 before after lost
    t_init 3
    t_cluster_up
    t_bench_bg kill --duration 5 --keys 1 --dist hot --limit 100 --window 2 \
        --key-prefix kill: --audit "${CLOSED[@]}"
    t_await 5000 "server 2 serving" t_metric_above 2 "$OVER" 1000
    conns2=$(t_metric 2 rl_connections_open)
    before=$(($(t_metric 1 "$OVER") + $(t_metric 3 "$OVER")))
    t_log "kill_server: SIGKILL rl-server 2 (holding $conns2 client connections)"
    t_stop_server 2 KILL 3000
    t_await 3000 "HAProxy marks rl2 down" t_lb_sees 2 DOWN
    t_log "kill_server: HAProxy marked rl2 DOWN"
    t_bench_wait kill 20000
    t_check "rl-bench exited $(cat "$T_DIR/kill.rc")" [ "$(cat "$T_DIR/kill.rc")" = 0 ]
    t_check "rl-bench ended early" [ "$(t_json kill ended_early)" = false ]
    check_audit_clean kill
    t_expect kill timeouts -eq 0
    t_expect kill server_errors -eq 0
    t_expect kill other_errors -eq 0
    t_expect kill failed_open -eq 0
    t_expect kill disconnects -ge 1
    # Only what was in flight on the killed server's connections failed.
    lost=$(t_json kill connection_lost)
    t_expect kill connection_lost -le $((conns2 * INFLIGHT))
    # The survivors carried the load after the kill.
    after=$(($(t_metric 1 "$OVER") + $(t_metric 3 "$OVER")))
    t_check "no decisions after the kill" [ "$after" -gt $((before + 1000)) ]
    t_log "kill_server: $lost requests lost in flight (bound $((conns2 * INFLIGHT))); survivors decided $((after - before)) more after the kill"
    t_log "kill_server: $(t_audit_line kill)"
}

# A server's last counters, from the line it logs as it exits.
final_counter() {
    grep 'msg="final counters"' "$T_DIR/rl-server-$1.log" | tail -n 1 |
        sed -E "s/.* $2=([0-9]+).*/\1/"
}

scenario_drain() {
    local conns2 pid lost
    t_init 3
    t_cluster_up -- --drain-ms 1500
    t_bench_bg drain --duration 5 --keys 1 --dist hot --limit 100 \
        --window 2 --key-prefix drain: --audit "${LOAD[@]}"
    t_await 5000 "server 2 serving" t_metric_above 2 "$OVER" 500
    conns2=$(t_metric 2 rl_connections_open)
    pid=$(cat "$T_DIR/rl-server-2.pid")
    t_log "drain: SIGTERM rl-server 2 (--drain-ms 1500, $conns2 client connections)"
    lc_signal "$T_DIR" rl-server-2 TERM
    t_await 1000 "/healthz of server 2 says draining" t_health_is 2 draining
    t_await 1500 "HAProxy marks rl2 down while it drains" t_lb_sees 2 DOWN
    t_check "server 2 stopped before its drain ended" lc_alive "$T_DIR" rl-server-2
    t_log "drain: /healthz 503 draining; HAProxy marked rl2 DOWN; server still serving"
    t_await 10000 "server 2 exits" lc_gone "$pid"
    T_RC=0
    wait "$pid" || T_RC=$?
    rm -f "$T_DIR/rl-server-2.pid" "$T_DIR/rl-server-2.comm"
    t_check "drained server exited $T_RC" [ "$T_RC" = 0 ]
    t_check "drained server timed out its stop" \
        bash -c "! grep -q 'stop timed out' '$T_DIR/rl-server-2.log'"
    t_check "drained server exited with requests unanswered" \
        [ "$(final_counter 2 inflight)" = 0 ]
    t_bench_wait drain 20000
    t_check "rl-bench exited $(cat "$T_DIR/drain.rc")" [ "$(cat "$T_DIR/drain.rc")" = 0 ]
    check_audit_clean drain
    t_expect drain timeouts -eq 0
    t_expect drain server_errors -eq 0
    t_expect drain other_errors -eq 0
    t_expect drain failed_open -eq 0
    # GOAWAY: at the end of its drain the server told its clients to leave;
    # they stopped sending there, read their last answers and reconnected
    # through HAProxy, so nothing on the wire to it was lost.
    lost=$(t_json drain connection_lost)
    t_expect drain connection_lost -eq 0
    t_expect drain unsent -le $(($(t_json drain decisions) / 200))
    # Every decision of every server, the drained one included (from its
    # exit line), reached rl-bench: the drained server lost no request.
    check_metrics_match drain "$(final_counter 2 ok)" \
        "$(final_counter 2 over_limit)" "$(final_counter 2 error)"
    t_log "drain: exit 0, inflight=0 at exit, every decision it made reached the client; connection_lost=$lost"
    t_log "drain: $(t_audit_line drain)"
}

http_code() {
    curl -s -m 1 -o /dev/null -w '%{http_code}' \
        "http://127.0.0.1:$(t_metrics_port "$1")/healthz" || true
}

t_code_is() {
    [ "$(http_code "$1")" = "$2" ]
}

scenario_redis_health() {
    local i
    t_init 3
    t_cluster_up
    t_log "redis_health: stopping redis-server"
    lc_stop "$T_DIR" redis 5000
    for i in 1 2 3; do
        t_await 3000 "server $i /healthz 503" t_code_is "$i" 503
        t_check "server $i: wrong reason" t_health_is "$i" "store unavailable"
        t_await 3000 "HAProxy marks rl$i down" t_lb_sees "$i" DOWN
    done
    t_log "redis_health: all /healthz 503 'store unavailable', HAProxy marks all DOWN"
    t_start_redis
    for i in 1 2 3; do
        t_await 10000 "server $i /healthz 200 again" t_code_is "$i" 200
        t_await 3000 "HAProxy routes to rl$i again" t_lb_sees "$i" UP
        t_check "server $i: no reconnect counted" \
            t_metric_above "$i" rl_store_reconnects_total 0
    done
    t_log "redis_health: Redis back: all /healthz 200, HAProxy routes to all"
    t_bench after --duration 1 --keys 100 --limit 10 --window 2 \
        --key-prefix after: --audit "${LOAD[@]}"
    t_check "rl-bench exited $(cat "$T_DIR/after.rc")" [ "$(cat "$T_DIR/after.rc")" = 0 ]
    check_no_errors after
    t_expect after failed_open -eq 0
    check_metrics_match after
}

scenario_local_cluster() {
    local lc pids="" p decoy rc
    t_init 2
    lc="$T_ROOT/deploy/local-cluster.sh"
    export RL_STATE_DIR="$T_DIR/lc" RL_PORT="$T_PORT" RL_DRAIN_MS=300
    "$lc" up 2 | sed 's/^/    /'
    "$lc" status | sed 's/^/    /'
    t_check "status after up" "$lc" status
    rc=0
    # A day's window: a minute's edge could pass between the two checks.
    "$RL_CHECK_BIN" --server "127.0.0.1:$T_PORT" --key lc --limit 1 --window 86400 || rc=$?
    t_check "first check through the endpoint: exit $rc" [ "$rc" = 0 ]
    rc=0
    "$RL_CHECK_BIN" --server "127.0.0.1:$T_PORT" --key lc --limit 1 --window 86400 || rc=$?
    t_check "second check should be over the limit: exit $rc" [ "$rc" = 1 ]
    for p in "$RL_STATE_DIR"/*.pid; do
        pids="$pids $(cat "$p")"
    done
    # A decoy: another rl-server that `up` did not start must survive
    # `down`, which stops recorded pids only.
    lc_spawn "$T_DIR" decoy rl-server "$RL_SERVER_BIN" \
        --listen "127.0.0.1:$((T_PORT + 3))"
    t_await_proc decoy 5000 "decoy rl-server listening" lc_port_busy $((T_PORT + 3))
    decoy=$(cat "$T_DIR/decoy.pid")
    "$lc" down | sed 's/^/    /'
    for p in $pids; do
        t_check "pid $p still runs after down" lc_gone "$p"
    done
    t_check "down stopped a process it had not started" lc_alive "$T_DIR" decoy
    rc=0
    "$lc" status >/dev/null || rc=$?
    t_check "status after down: exit $rc" [ "$rc" = 3 ]
    t_log "local_cluster: up 2, status, rl-check through HAProxy (allowed, then over), down stopped pids$pids and left pid $decoy alone"
}

# One line: the case below matches " NAME " between spaces.
SCENARIOS="hot_key fleet uniform algorithms clock_skew kill_server drain redis_health local_cluster"

if [ "$SCENARIO" = all ]; then
    failed=0
    for s in $SCENARIOS; do
        echo "== $s"
        start=$(date +%s)
        if bash "$0" "$s" "$RL_SERVER_BIN" "$RL_BENCH_BIN" "$RL_CHECK_BIN"; then
            echo "== $s passed ($(($(date +%s) - start)) s)"
        else
            echo "== $s FAILED"
            failed=$((failed + 1))
        fi
    done
    n=$(wc -w <<<"$SCENARIOS")
    echo "cluster: $((n - failed)) passed, $failed failed"
    exit $((failed > 0))
fi

case " $SCENARIOS " in
*" $SCENARIO "*)
    "scenario_$SCENARIO"
    t_servers_exit_clean
    ;;
*) usage ;;
esac
echo "PASS: $SCENARIO"
