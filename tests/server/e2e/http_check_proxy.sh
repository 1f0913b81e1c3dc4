#!/usr/bin/env bash
# The HTTP check endpoint (--http) with what stands in front of it.
#
#   http_check_proxy.sh nginx RL_SERVER
#   http_check_proxy.sh caddy RL_SERVER
#       A real nginx (nginx-light: auth_request) or Caddy (forward_auth,
#       expanded) configured with deploy/nginx/ or deploy/caddy/ as
#       shipped (only addresses, ports and log paths are the test's), in
#       front of a backend that logs every hit, with two rl-servers on one
#       Redis behind it and two front sites: one failing open, one failing
#       closed. A 5/1h rule: requests 1-5 reach the backend and carry the
#       rate-limit headers, 6 and 7 get 429 with Retry-After and the same
#       headers; forged X-RateLimit-Key, X-Forwarded-For and X-Real-IP do
#       not change the counter spent; the backend saw exactly 5; an unknown
#       rule is a 500. Then the outages: both rl-servers paused (SIGSTOP)
#       and both stopped: the fail-open site lets requests through, within
#       a second or two and visibly in its log; the fail-closed site
#       answers 503 with Retry-After; one rl-server stopped: the other
#       decides.
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

SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)
# shellcheck source=../../../deploy/ports.sh
. "$SRC/deploy/ports.sh"
DIR=$(mktemp -d "${TMPDIR:-/tmp}/rl-http-check.XXXXXX")
PIDS=()

cleanup() {
    local p
    for p in "${PIDS[@]}"; do
        kill -CONT "$p" 2>/dev/null || true
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

# wait_ms TIMEOUT_MS CMD...: CMD until it succeeds, every 20 ms.
wait_ms() {
    local deadline=$(($(date +%s%3N) + $1))
    shift
    until "$@" >/dev/null 2>&1; do
        (($(date +%s%3N) < deadline)) || return 1
        sleep 0.02
    done
}

start_rl() { # RL_SERVER ARGS...
    local bin=$1
    shift
    # Port 0 everywhere: rl-server says which ports it bound.
    rl_start_ours "$DIR/rl-server.log" "$DIR/rl.ports" \
        "$bin" --listen 127.0.0.1:0 --http 127.0.0.1:0 --metrics 127.0.0.1:0 \
        --log-level warn "$@" || fail "rl-server did not listen"
    PIDS+=("$rl_pid")
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

# start_pair RL_SERVER: a private Redis and two rl-servers counting in it
# (RL1_PID/RL1_HTTP, RL2_PID/RL2_HTTP), as a proxy's upstream lists them.
start_pair() {
    local bin=$1 i m
    mkdir -p "$DIR/redis"
    rl_start_redis "$DIR/redis" "$DIR/redis.log" || fail "redis-server"
    PIDS+=("$rl_pid")
    for i in 1 2; do
        rl_start_ours "$DIR/rl$i.log" "$DIR/rl$i.ports" \
            "$bin" --listen 127.0.0.1:0 --http 127.0.0.1:0 \
            --metrics 127.0.0.1:0 --log-level warn \
            --redis "127.0.0.1:$rl_redis_port" --redis-timeout-ms 1000 \
            --rule 'api=5/3600s' --rule 'free=100000/3600s' \
            --check-key-header X-RateLimit-Key ||
            fail "rl-server $i did not listen"
        PIDS+=("$rl_pid")
        printf -v "RL${i}_PID" '%s' "$rl_pid"
        printf -v "RL${i}_HTTP" '%s' "$(rl_port_of "$DIR/rl$i.ports" http)"
        m=$(rl_port_of "$DIR/rl$i.ports" metrics)
        # Until it has Redis: /healthz 200.
        wait_ms 5000 curl -fsS -m 1 -o /dev/null "http://127.0.0.1:$m/healthz" ||
            fail "rl-server $i not healthy"
    done
}

# fetch URL [CURL ARGS...]: GETs URL (5 s at most); sets CODE, BODY and the
# header lines in HEAD.
fetch() {
    local url=$1
    shift
    : >"$DIR/head"
    CODE=$(curl -sS -m 5 -o "$DIR/body" -D "$DIR/head" -w '%{http_code}' \
        "$@" "$url" 2>/dev/null || true)
    BODY=$(cat "$DIR/body" 2>/dev/null || true)
    HEAD=$(tr -d '\r' <"$DIR/head")
}

# hdr NAME: the value of header NAME in the last fetch ("" when absent).
hdr() {
    awk -F': ' -v n="$(tr 'A-Z' 'a-z' <<<"$1")" \
        'tolower($1) == n { print $2; exit }' <<<"$HEAD"
}

# check_limits OPEN CLOSED HITS: the limits through both front sites (base
# URLs); HITS is a command printing the backend's hits, one URI a line.
check_limits() {
    local open=$1 closed=$2 hits_of=$3 i hits now
    now=$(date +%s)
    for i in 1 2 3 4 5 6 7; do
        if [ "$i" = 6 ]; then
            # Every header a key could come from, forged.
            fetch "$open/api/x$i" -H 'X-RateLimit-Key: forged' \
                -H 'X-Forwarded-For: 203.0.113.9' -H 'X-Real-IP: 203.0.113.9'
        else
            fetch "$open/api/x$i"
        fi
        if [ "$i" -le 5 ]; then
            [ "$CODE" = 200 ] || fail "request $i: $CODE, expected 200"
            grep -q '^backend$' <<<"$BODY" || fail "request $i: not the backend's body"
            [ "$(hdr X-RateLimit-Limit)" = 5 ] ||
                fail "request $i: X-RateLimit-Limit '$(hdr X-RateLimit-Limit)'"
            [ "$(hdr X-RateLimit-Used)" = "$i" ] ||
                fail "request $i: X-RateLimit-Used '$(hdr X-RateLimit-Used)'"
            [ "$(hdr X-RateLimit-Remaining)" = $((5 - i)) ] ||
                fail "request $i: X-RateLimit-Remaining '$(hdr X-RateLimit-Remaining)'"
        else
            [ "$CODE" = 429 ] || fail "request $i: $CODE, expected 429"
            [ "$(hdr Retry-After)" -ge 1 ] 2>/dev/null ||
                fail "request $i: Retry-After '$(hdr Retry-After)'"
            [ "$(hdr X-RateLimit-Remaining)" = 0 ] ||
                fail "request $i: X-RateLimit-Remaining '$(hdr X-RateLimit-Remaining)'"
        fi
        [ "$(hdr X-RateLimit-Reset)" -ge "$now" ] 2>/dev/null ||
            fail "request $i: X-RateLimit-Reset '$(hdr X-RateLimit-Reset)' is not a Unix time"
        [ "$(hdr RateLimit-Policy)" = '"api";q=5;w=3600' ] ||
            fail "request $i: RateLimit-Policy '$(hdr RateLimit-Policy)'"
        [ -n "$(hdr RateLimit)" ] || fail "request $i: no RateLimit"
    done
    # The fail-closed site spends the same counter (the same key).
    fetch "$closed/api/y"
    [ "$CODE" = 429 ] || fail "closed site: $CODE, expected 429"
    # The proxies write a hit's line as the request ends: awaited.
    wait_ms 2000 test "$("$hits_of" | grep -c '^/api/')" = 5 ||
        fail "backend saw $("$hits_of" | grep -c '^/api/') requests, expected 5"
    "$hits_of" | grep -q '^/api/x6$' && fail "backend saw request 6"
    # A rule rl-server does not have: a 500 on either site (never a reason
    # to fail open), and the client learns nothing of it.
    fetch "$open/unknown/"
    [ "$CODE" = 500 ] || fail "unknown rule (open site): $CODE, expected 500"
    grep -q nope <<<"$BODY" && fail "unknown rule: the body names it"
    fetch "$closed/unknown/"
    [ "$CODE" = 500 ] || fail "unknown rule (closed site): $CODE, expected 500"
    echo "limits: 5 x 200 with headers, then 429 with Retry-After (forged keys too); backend hits 5; unknown rule 500"
}

# checked URL: a GET through the proxy that a rl-server decided.
checked() {
    fetch "$1"
    [ "$CODE" = 200 ] && [ -n "$(hdr X-RateLimit-Limit)" ]
}

# more_than COUNT N: COUNT (a command printing a number) prints more than
# N.
more_than() {
    [ "$("$1")" -gt "$2" ]
}

# outage OPEN CLOSED BYPASSES: the fail modes with both rl-servers paused,
# then one stopped, then both. BYPASSES prints how many requests the
# proxy's log shows let through unchecked.
outage() {
    local open=$1 closed=$2 bypasses=$3 t0 t1 i n
    n=$("$bypasses")
    kill -STOP "$RL1_PID" "$RL2_PID"
    t0=$(date +%s%3N)
    fetch "$open/free/p1"
    t1=$(date +%s%3N)
    kill -CONT "$RL1_PID" "$RL2_PID"
    [ "$CODE" = 200 ] && grep -q '^backend$' <<<"$BODY" ||
        fail "paused, fail-open site: $CODE '$BODY'"
    echo "paused: the fail-open site answered from the backend in $((t1 - t0)) ms"
    # The proxies write a line as the request ends: awaited.
    wait_ms 2000 more_than "$bypasses" "$n" ||
        fail "paused: the bypass is not in the proxy's log"
    kill -STOP "$RL1_PID" "$RL2_PID"
    t0=$(date +%s%3N)
    fetch "$closed/free/p2"
    t1=$(date +%s%3N)
    kill -CONT "$RL1_PID" "$RL2_PID"
    [ "$CODE" = 503 ] && [ "$(hdr Retry-After)" -ge 1 ] 2>/dev/null ||
        fail "paused, fail-closed site: $CODE, Retry-After '$(hdr Retry-After)'"
    echo "paused: the fail-closed site answered 503 with Retry-After in $((t1 - t0)) ms"
    # Checked again once the proxy retries them (it may leave a failed
    # server alone for a few seconds).
    wait_ms 15000 checked "$open/free/q" || fail "checks did not come back"
    # One rl-server stopped: the other decides, once the proxy no longer
    # skips it for the earlier failures.
    kill -TERM "$RL1_PID"
    wait "$RL1_PID" 2>/dev/null || true
    wait_ms 15000 checked "$open/free/one" ||
        fail "one rl-server left: no check decided"
    for i in 1 2 3; do
        fetch "$open/free/one$i"
        [ "$CODE" = 200 ] && [ -n "$(hdr X-RateLimit-Limit)" ] ||
            fail "one rl-server left: $CODE, X-RateLimit-Limit '$(hdr X-RateLimit-Limit)'"
    done
    echo "one rl-server stopped: the other decided 3 of 3"
    kill -TERM "$RL2_PID"
    wait "$RL2_PID" 2>/dev/null || true
    n=$("$bypasses")
    fetch "$open/free/down"
    [ "$CODE" = 200 ] && grep -q '^backend$' <<<"$BODY" ||
        fail "stopped, fail-open site: $CODE '$BODY'"
    wait_ms 2000 more_than "$bypasses" "$n" ||
        fail "stopped: the bypass is not in the proxy's log"
    fetch "$closed/free/down"
    [ "$CODE" = 503 ] && [ "$(hdr Retry-After)" -ge 1 ] 2>/dev/null ||
        fail "stopped, fail-closed site: $CODE"
    echo "stopped: the fail-open site let it through (logged), the fail-closed one 503"
}

# ---- nginx ---------------------------------------------------------------

nginx_hits() { cat "$DIR/logs/backend.log" 2>/dev/null || true; }

# nginx_bypasses: the bypass log's lines.
nginx_bypasses() {
    cat "$DIR/logs/bypass.log" 2>/dev/null | wc -l
}

# A front site: the snippets and three limited locations.
nginx_front() { # PORT NAME FAIL_SNIPPET
    cat <<EOF
    server {
        listen 127.0.0.1:$1;
        access_log $DIR/logs/$2.log;
        include $DIR/conf/ratelimit.conf;
        include $DIR/conf/$3;
        location /api/ {
            set \$ratelimit_rule api;
            set \$ratelimit_backend http://backend;
            auth_request /_ratelimit;
            proxy_pass http://backend;
        }
        location /free/ {
            set \$ratelimit_rule free;
            set \$ratelimit_backend http://backend;
            auth_request /_ratelimit;
            proxy_pass http://backend;
        }
        location /unknown/ {
            set \$ratelimit_rule nope;
            set \$ratelimit_backend http://backend;
            auth_request /_ratelimit;
            proxy_pass http://backend;
        }
    }
EOF
}

scenario_nginx() {
    local rl=$1 port cport bport attempt npid
    command -v nginx >/dev/null || fail "nginx not installed (deploy/setup-debian.sh)"
    away_from_edge
    start_pair "$rl"
    mkdir -p "$DIR/logs" "$DIR/conf"
    # The shipped snippets; only the rl-servers' addresses and the bypass
    # log's path are the test's.
    sed -e "s/server 127.0.0.1:8081 /server 127.0.0.1:$RL1_HTTP /" \
        -e "s/server 127.0.0.1:8082 /server 127.0.0.1:$RL2_HTTP /" \
        "$SRC/deploy/nginx/ratelimit-upstream.conf" \
        >"$DIR/conf/ratelimit-upstream.conf"
    grep -q "$RL2_HTTP" "$DIR/conf/ratelimit-upstream.conf" ||
        fail "upstream not rewritten"
    cp "$SRC/deploy/nginx/ratelimit.conf" \
        "$SRC/deploy/nginx/ratelimit-fail-closed.conf" "$DIR/conf/"
    sed "s#/var/log/nginx/ratelimit-bypass.log#$DIR/logs/bypass.log#" \
        "$SRC/deploy/nginx/ratelimit-fail-open.conf" \
        >"$DIR/conf/ratelimit-fail-open.conf"
    for attempt in 1 2; do
        rl_port_reserve port
        rl_port_reserve cport
        rl_port_reserve bport
        {
            cat <<EOF
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
    upstream backend { server 127.0.0.1:$bport; }
    # The backend: counts its hits in its access log.
    server {
        listen 127.0.0.1:$bport;
        access_log $DIR/logs/backend.log hit;
        location / { return 200 "backend\n"; }
    }
EOF
            nginx_front "$port" front-open ratelimit-fail-open.conf
            nginx_front "$cport" front-closed ratelimit-fail-closed.conf
            echo "}"
        } >"$DIR/conf/nginx.conf"
        nginx -t -p "$DIR" -c "$DIR/conf/nginx.conf" -g "pid $DIR/nginx.pid;" \
            >"$DIR/nginx-t.log" 2>&1 || fail "nginx -t: $(cat "$DIR/nginx-t.log")"
        nginx -p "$DIR" -c "$DIR/conf/nginx.conf" -g "daemon off; pid $DIR/nginx.pid;" \
            2>"$DIR/nginx.log" &
        npid=$!
        PIDS+=("$npid")
        rl_wait_listen "$port" "$npid" "$DIR/nginx.log" &&
            rl_wait_listen "$cport" "$npid" "$DIR/nginx.log" &&
            rl_wait_listen "$bport" "$npid" "$DIR/nginx.log" && break
        # A reserved port that something outside the tests holds: once
        # more on others.
        [ "$attempt" = 1 ] && rl_bind_failed "$DIR/nginx.log" ||
            fail "nginx did not listen"
        wait "$npid" 2>/dev/null || true
    done
    check_limits "http://127.0.0.1:$port" "http://127.0.0.1:$cport" nginx_hits
    outage "http://127.0.0.1:$port" "http://127.0.0.1:$cport" nginx_bypasses
    grep -q 'connect() failed\|upstream timed out' "$DIR/logs/error.log" ||
        fail "nginx's error log does not say why the checks failed"
}

# ---- Caddy ---------------------------------------------------------------

# The backend's hits, one URI a line, from its (JSON) access log.
caddy_hits() {
    sed -n 's/.*"uri":"\([^"]*\)".*/\1/p' "$DIR/backend.log" 2>/dev/null || true
}

# caddy_bypasses: the fail-open site's responses that carry the bypass
# marker, from its access log.
caddy_bypasses() {
    grep -c 'X-Ratelimit-Bypass' "$DIR/front.log" 2>/dev/null || true
}

# A front site: the snippets imported per path, and the fail mode.
caddy_front() { # PORT FAIL_IMPORT LOG
    cat <<EOF
:$1 {
	log {
		output file $3
	}
	route {
		@api path /api/*
		route @api {
			import ratelimit api
		}
		@free path /free/*
		route @free {
			import ratelimit free
		}
		@unknown path /unknown/*
		route @unknown {
			import ratelimit nope
		}
		reverse_proxy 127.0.0.1:$bport
	}
	handle_errors {
		import $2
	}
}
EOF
}

scenario_caddy() {
    local rl=$1 port cport bport attempt cpid
    command -v caddy >/dev/null || fail "caddy not installed (deploy/setup-debian.sh)"
    away_from_edge
    start_pair "$rl"
    mkdir -p "$DIR/caddy"
    export RL_CHECK_UPSTREAMS="127.0.0.1:$RL1_HTTP 127.0.0.1:$RL2_HTTP"
    for attempt in 1 2; do
        rl_port_reserve port
        rl_port_reserve cport
        rl_port_reserve bport
        # The shipped snippets, imported as they are; the sites are the
        # test's, as a user writes them.
        {
            cat <<EOF
{
	admin off
	auto_https off
	log {
		output file $DIR/caddy.log
	}
}
import $SRC/deploy/caddy/ratelimit.caddy

:$bport {
	log {
		output file $DIR/backend.log
	}
	respond "backend" 200
}
EOF
            caddy_front "$port" "ratelimit_fail_open 127.0.0.1:$bport" \
                "$DIR/front.log"
            caddy_front "$cport" ratelimit_fail_closed "$DIR/front-closed.log"
        } >"$DIR/Caddyfile"
        caddy validate --config "$DIR/Caddyfile" --adapter caddyfile \
            >"$DIR/caddy-validate.log" 2>&1 ||
            fail "caddy validate: $(tail -3 "$DIR/caddy-validate.log")"
        XDG_DATA_HOME="$DIR/caddy" XDG_CONFIG_HOME="$DIR/caddy" \
            caddy run --config "$DIR/Caddyfile" --adapter caddyfile \
            >"$DIR/caddy-run.log" 2>&1 &
        cpid=$!
        PIDS+=("$cpid")
        rl_wait_listen "$port" "$cpid" "$DIR/caddy-run.log" &&
            rl_wait_listen "$cport" "$cpid" "$DIR/caddy-run.log" &&
            rl_wait_listen "$bport" "$cpid" "$DIR/caddy-run.log" && break
        [ "$attempt" = 1 ] && grep -qi 'address already in use' \
            "$DIR/caddy-run.log" "$DIR/caddy.log" 2>/dev/null ||
            fail "caddy did not listen"
        wait "$cpid" 2>/dev/null || true
    done
    check_limits "http://127.0.0.1:$port" "http://127.0.0.1:$cport" caddy_hits
    outage "http://127.0.0.1:$port" "http://127.0.0.1:$cport" caddy_bypasses
}

# ---- native and HTTP at once --------------------------------------------

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
caddy) scenario_caddy "$2" ;;
mixed) scenario_mixed "$2" "$3" "$4" ;;
*)
    echo "usage: $0 nginx|caddy RL_SERVER | mixed RL_SERVER RL_BENCH HTTP_CHECK_LOAD" >&2
    exit 2
    ;;
esac
