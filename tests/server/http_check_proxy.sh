#!/usr/bin/env bash
# The HTTP check endpoint (--http) with what stands in front of it.
#
#   http_check_proxy.sh nginx RL_SERVER
#       A real nginx (nginx-light: auth_request) on a free loopback port,
#       configured with deploy/nginx/ratelimit.conf and -upstream.conf as
#       shipped (only the upstream's address and the test's ports are
#       changed), in front of a backend (an nginx server block that logs
#       every hit). A 5/1h rule: requests 1-5 get the backend's 200 with
#       the X-RateLimit headers, the 6th gets 429 from nginx with
#       Retry-After, and the backend saw exactly 5 requests.
#
#   http_check_proxy.sh mixed RL_SERVER RL_BENCH HTTP_CHECK_LOAD
#       Native clients (rl-bench --audit) and HTTP checks
#       (http_check_load) on one key of a rule at once: exactly the
#       rule's limit is admitted in total, whoever asked.
#
# Every process is started by this script, recorded by pid and stopped by
# pid on any exit; all traffic is to 127.0.0.1; waits poll a condition
# against a deadline.
set -euo pipefail

SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
# shellcheck source=../../deploy/ports.sh
. "$SRC/deploy/ports.sh"
DIR=$(mktemp -d "${TMPDIR:-/tmp}/rl-http-check.XXXXXX")
PIDS=()

cleanup() {
    local p
    for p in "${PIDS[@]}"; do
        kill -TERM "$p" 2>/dev/null || true
    done
    for p in "${PIDS[@]}"; do
        for _ in $(seq 50); do
            kill -0 "$p" 2>/dev/null || break
            sleep 0.1
        done
        kill -KILL "$p" 2>/dev/null || true
        wait "$p" 2>/dev/null || true
    done
    if [ "${KEEP_DIR:-0}" = 1 ]; then
        echo "kept $DIR"
    else
        rm -rf "$DIR"
    fi
}
trap cleanup EXIT

fail() {
    echo "FAIL: $*" >&2
    for f in "$DIR"/*.log "$DIR"/logs/*.log; do
        [ -s "$f" ] && { echo "--- $f"; tail -20 "$f"; } >&2
    done
    exit 1
}

start_rl() { # RL_SERVER ARGS...
    local bin=$1
    shift
    # Port 0 everywhere: rl-server says which ports it bound.
    "$bin" --listen 127.0.0.1:0 --http 127.0.0.1:0 --metrics 127.0.0.1:0 \
        --port-file "$DIR/rl.ports" --log-level warn "$@" \
        2>"$DIR/rl-server.log" &
    PIDS+=($!)
    rl_wait_ports "$DIR/rl.ports" "$!" "$DIR/rl-server.log" ||
        fail "rl-server did not listen"
    RL_PORT=$(rl_port_of "$DIR/rl.ports" listen)
    RL_HTTP_PORT=$(rl_port_of "$DIR/rl.ports" http)
    RL_MPORT=$(rl_port_of "$DIR/rl.ports" metrics)
}

# The hour-long windows are aligned to the epoch: keep clear of an edge.
away_from_edge() {
    local s=$(( $(date +%s) % 3600 ))
    if [ "$s" -gt 3540 ]; then
        sleep $(( 3601 - s ))
    fi
}

scenario_nginx() {
    local rl=$1 port bport code hits i hdr post attempt npid
    command -v nginx >/dev/null || fail "nginx not installed (deploy/setup-debian.sh)"
    away_from_edge
    start_rl "$rl" --rule 'api=5/3600s' --check-key-header X-RateLimit-Key
    for attempt in 1 2; do
        rl_port_reserve port
        rl_port_reserve bport
        mkdir -p "$DIR/logs" "$DIR/conf"
        # The shipped snippets; only the upstream's address is the test's.
        sed "s/server 127.0.0.1:8081/server 127.0.0.1:$RL_HTTP_PORT/" \
            "$SRC/deploy/nginx/ratelimit-upstream.conf" >"$DIR/conf/ratelimit-upstream.conf"
        cp "$SRC/deploy/nginx/ratelimit.conf" "$DIR/conf/ratelimit.conf"
        cat >"$DIR/conf/nginx.conf" <<EOF
    worker_processes 1;
    error_log $DIR/logs/error.log warn;
    events { worker_connections 64; }
    http {
        access_log off;
        client_body_temp_path $DIR/tmp_body;
        proxy_temp_path $DIR/tmp_proxy;
        fastcgi_temp_path $DIR/tmp_fastcgi;
        uwsgi_temp_path $DIR/tmp_uwsgi;
        scgi_temp_path $DIR/tmp_scgi;
        include $DIR/conf/ratelimit-upstream.conf;
        log_format hit '\$request_uri';
        # The backend: counts its hits in its access log.
        server {
            listen 127.0.0.1:$bport;
            access_log $DIR/logs/backend.log hit;
            location / { return 200 "backend\n"; }
        }
        server {
            listen 127.0.0.1:$port;
            access_log $DIR/logs/front.log;
            include $DIR/conf/ratelimit.conf;
            location /api/ {
                set \$ratelimit_rule api;
                auth_request /_ratelimit;
                add_header X-RateLimit-Remaining \$ratelimit_remaining always;
                proxy_pass http://127.0.0.1:$bport;
            }
            location /unknown/ {
                set \$ratelimit_rule nope;
                auth_request /_ratelimit;
                proxy_pass http://127.0.0.1:$bport;
            }
        }
    }
EOF
        nginx -t -p "$DIR" -c "$DIR/conf/nginx.conf" -g "pid $DIR/nginx.pid;" \
            >"$DIR/nginx-t.log" 2>&1 || fail "nginx -t: $(cat "$DIR/nginx-t.log")"
        nginx -p "$DIR" -c "$DIR/conf/nginx.conf" -g "daemon off; pid $DIR/nginx.pid;" \
            2>"$DIR/nginx.log" &
        npid=$!
        PIDS+=("$npid")
        rl_wait_listen "$port" "$npid" "$DIR/nginx.log" &&
            rl_wait_listen "$bport" "$npid" "$DIR/nginx.log" && break
        # A reserved port that something outside the tests holds: once
        # more on others.
        [ "$attempt" = 1 ] && rl_bind_failed "$DIR/nginx.log" ||
            fail "nginx did not listen"
        wait "$npid" 2>/dev/null || true
    done

    for i in 1 2 3 4 5 6 7; do
        # The first is a POST with a body: the check must still be a GET
        # without one (rl-server refuses request bodies).
        post=()
        [ "$i" = 1 ] && post=(-X POST --data-binary 'a=1&b=2')
        curl -sS "${post[@]}" -o "$DIR/body" -D "$DIR/head" \
            "http://127.0.0.1:$port/api/x$i" || fail "curl $i"
        code=$(awk 'NR==1 {print $2}' "$DIR/head")
        if [ "$i" -le 5 ]; then
            [ "$code" = 200 ] || fail "request $i: $code, expected 200"
            grep -q '^backend$' "$DIR/body" || fail "request $i: not the backend's body"
            hdr=$(tr -d '\r' <"$DIR/head" | awk -F': ' 'tolower($1)=="x-ratelimit-remaining" {print $2}')
            [ "$hdr" = $((5 - i)) ] || fail "request $i: X-RateLimit-Remaining '$hdr'"
        else
            [ "$code" = 429 ] || fail "request $i: $code, expected 429"
            hdr=$(tr -d '\r' <"$DIR/head" | awk -F': ' 'tolower($1)=="retry-after" {print $2}')
            [ -n "$hdr" ] && [ "$hdr" -ge 1 ] || fail "request $i: Retry-After '$hdr'"
            tr -d '\r' <"$DIR/head" | grep -qi '^X-RateLimit-Remaining: 0$' ||
                fail "request $i: no X-RateLimit-Remaining: 0"
            grep -q 'rate limited' "$DIR/body" || fail "request $i: body"
        fi
    done
    # The backend saw exactly the 5 admitted requests (nginx writes its
    # access log line when the request ends, before the response is done).
    hits=$(grep -c '^/api/' "$DIR/logs/backend.log" || true)
    [ "$hits" = 5 ] || fail "backend saw $hits requests, expected 5"
    grep -q '^/api/x6$' "$DIR/logs/backend.log" && fail "backend saw request 6"
    # A rule rl-server does not have: nginx answers 500 (not a refusal).
    code=$(curl -sS -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/unknown/")
    [ "$code" = 500 ] || fail "unknown rule: $code, expected 500"
    # rl-server counted 5 allowed and 2 refused (as 403) checks.
    curl -sS "http://127.0.0.1:$RL_MPORT/metrics" >"$DIR/metrics"
    grep -q '^rl_check_requests_total{code="200"} 5$' "$DIR/metrics" || fail "200s"
    grep -q '^rl_check_requests_total{code="403"} 2$' "$DIR/metrics" || fail "403s"
    grep -q '^rl_check_requests_total{code="400"} 1$' "$DIR/metrics" || fail "400s"
    echo "nginx: 5 x 200 from the backend, then 429 with Retry-After; backend hits 5"
}

scenario_mixed() {
    local rl=$1 bench=$2 load=$3 limit=3000 nat http total
    away_from_edge
    start_rl "$rl" --rule "mix=$limit/3600s"
    # Both at once, each sending more than the limit on the one key mix:0.
    "$load" --addr "127.0.0.1:$RL_HTTP_PORT" --rule mix --key-prefix mix: \
        --keys 1 --requests 4000 --connections 4 >"$DIR/load.out" &
    local lpid=$!
    PIDS+=($lpid)
    "$bench" --server "127.0.0.1:$RL_PORT" --rule mix --limit "$limit" \
        --window 3600 --keys 1 --key-prefix mix: --audit --requests 4000 \
        --connections 2 --inflight 8 --no-progress --json "$DIR/bench.json" \
        >"$DIR/bench.log" 2>&1 || fail "rl-bench: exit $?"
    wait "$lpid" || fail "http_check_load: exit $?"
    nat=$(awk -F': ' '/^  "allowed"/ {gsub(/,/, "", $2); print $2; exit}' "$DIR/bench.json")
    http=$(sed -n 's/.* allowed=\([0-9]*\) .*/\1/p' "$DIR/load.out")
    grep -q ' other=0 ' "$DIR/load.out" || fail "http errors: $(cat "$DIR/load.out")"
    total=$((nat + http))
    echo "mixed: native allowed $nat + http allowed $http = $total (limit $limit)"
    [ "$total" = "$limit" ] || fail "admitted $total, expected exactly $limit"
}

case "${1:-}" in
nginx) scenario_nginx "$2" ;;
mixed) scenario_mixed "$2" "$3" "$4" ;;
*)
    echo "usage: $0 nginx RL_SERVER | mixed RL_SERVER RL_BENCH HTTP_CHECK_LOAD" >&2
    exit 2
    ;;
esac
