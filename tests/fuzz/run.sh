#!/usr/bin/env bash
# Coverage-guided fuzzing of every target with clang's libFuzzer (ASan and
# UBSan, UBSan fatal), each for a bounded time.
#
#   tests/fuzz/run.sh [-j JOBS] [SECONDS] [TARGET...]
#
# SECONDS: how long each target runs (default 60). TARGET: which ones
# (default all, in the order of TARGETS below). JOBS (or FUZZ_JOBS): how
# many targets run at once (default 1; 2 on the two-core machine). Extra
# libFuzzer flags go in FUZZ_FLAGS (e.g. FUZZ_FLAGS=-rss_limit_mb=4096).
#
# Every target runs even when another stops. Each one's output is in
# build-fuzz/logs/TARGET.log, its growing corpus in build-fuzz/corpus/TARGET
# (seeded from tests/fuzz/corpus/TARGET), what it found in
# tests/fuzz/artifacts/TARGET/. A crash, leak, timeout or out-of-memory is
# minimized (-minimize_crash=1) into tests/fuzz/corpus/TARGET/crash-SHA1,
# where ctest replays it once its cause is fixed (tests/fuzz/CMakeLists.txt).
# At the end, one line per target: runs, runs a second, libFuzzer's cov: and
# ft: from its last stats line, and what it found. Exit status: 0 when no
# target found anything, 1 otherwise, 2 when the build failed.
set -uo pipefail
cd "$(dirname "$0")/../.."

TARGETS="request http check redis_reply rlm_batch conn envoy_conf rules grpc
xds_conf handle cluster sentinel fitlog envenv json switches flags
admin admin_api xds_client traceparent rlqs_conf"

jobs=${FUZZ_JOBS:-1}
if [ "${1:-}" = -j ]; then
    jobs=$2
    shift 2
fi
secs=${1:-60}
[ $# -gt 0 ] && shift
want=${*:-$TARGETS}

command -v clang >/dev/null || {
    echo "needs clang: apt-get install clang" >&2
    exit 2
}

# What each target is built from besides its harness, its -max_len, and
# libFuzzer flags of its own.
extra_srcs() {
    case $1 in
    conn) echo tests/fuzz/fuzz_conn_store.c ;;
    esac
}
max_len() {
    case $1 in
    http | check | admin | admin_api) echo 9000 ;;
    handle) echo 600 ;;
    sentinel) echo 1024 ;;
    fitlog) echo 20000 ;;
    *) echo 4096 ;;
    esac
}
own_flags() {
    case $1 in
    conn | envoy_conf | rules | grpc | xds_conf | admin | xds_client)
        echo -timeout=20 ;;
    esac
}

out=build-fuzz
mkdir -p "$out/obj" "$out/logs" "$out/gen" "$out/store"
cflags="-std=c11 -D_POSIX_C_SOURCE=200809L -D_DEFAULT_SOURCE -g -O1
  -fno-sanitize-recover=undefined -Ilib -Iserver -Itools/fit
  -Itests/support -I$out -I$out/gen
  $(pkg-config --cflags libuv yaml-0.1 hiredis libnghttp2 libprotobuf-c)"
libs="$(pkg-config --libs libuv yaml-0.1 hiredis libnghttp2 libprotobuf-c)
  -lssl -lcrypto -lm"
cflags=$(echo $cflags)
libs=$(echo $libs)

# ---- build: every source once into an archive, then one link a target ----
build() {
    local f o srcs objs=() stale=()

    sed 's/@PROJECT_VERSION@/fuzz/' server/version.h.in >"$out/version.h.new"
    cmp -s "$out/version.h.new" "$out/version.h" ||
        mv "$out/version.h.new" "$out/version.h"
    # The Redis store's Lua scripts as C strings, as the CMake build makes
    # them.
    for f in server/store/*.lua; do
        [ "$out/store/$(basename "$f").h" -nt "$f" ] ||
            cmake -DIN="$f" -DOUT="$out/store/$(basename "$f").h" \
                -P server/store/lua_embed.cmake || return 1
    done
    # Into gen.new, then only what changed into gen: a file rewritten
    # unchanged would make every object that includes it stale.
    rm -rf "$out/gen.new" && mkdir -p "$out/gen.new" || return 1
    (cd proto && protoc-c --c_out="../$out/gen.new" \
        envoy/service/ratelimit/v3/rls.proto \
        envoy/extensions/common/ratelimit/v3/ratelimit.proto \
        envoy/config/core/v3/base.proto envoy/type/v3/ratelimit_unit.proto \
        google/protobuf/duration.proto google/protobuf/wrappers.proto \
        envoy/service/discovery/v3/discovery.proto \
        envoy/service/discovery/v3/ads.proto envoy/config/core/v3/node.proto \
        ratelimit/config/ratelimit/v3/rls_conf.proto \
        google/protobuf/any.proto google/protobuf/struct.proto \
        google/rpc/status.proto grpc/health/v1/health.proto \
        opentelemetry/proto/collector/trace/v1/trace_service.proto \
        opentelemetry/proto/trace/v1/trace.proto \
        opentelemetry/proto/common/v1/common.proto \
        opentelemetry/proto/resource/v1/resource.proto \
        envoy/service/rate_limit_quota/v3/rlqs.proto \
        envoy/type/v3/ratelimit_strategy.proto \
        envoy/type/v3/token_bucket.proto) || return 1
    (cd "$out/gen.new" && find . -type f) | while read -r f; do
        mkdir -p "$(dirname "$out/gen/$f")"
        cmp -s "$out/gen.new/$f" "$out/gen/$f" || cp "$out/gen.new/$f" "$out/gen/$f"
    done
    rm -rf "$out/gen.new"
    srcs=$(find lib server "$out/gen" -name '*.c' ! -name main.c \
        ! -name rl-ctl.c ! -path '*/redis_module/module.c' | sort)
    srcs="$srcs tools/fit/fit_log.c tests/support/h2raw.c"
    for f in $srcs; do
        o="$out/obj/$(echo "$f" | tr / _).o"
        objs+=("$o")
        # Rebuilt when the source or any header is newer (coarse, safe).
        if [ ! "$o" -nt "$f" ] || [ -n "$(find lib server "$out/gen" \
            tools/fit tests/support -name '*.h' -newer "$o" | head -1)" ]; then
            stale+=("$f $o")
        fi
    done
    if [ ${#stale[@]} -gt 0 ]; then
        printf '%s\n' "${stale[@]}" | xargs -P "$(nproc)" -L 1 sh -c \
            "clang $cflags -fsanitize=fuzzer-no-link,address,undefined \
             -c \"\$0\" -o \"\$1\"" || return 1
        rm -f "$out/libfuzzsrc.a"
    fi
    [ -f "$out/libfuzzsrc.a" ] || ar rcs "$out/libfuzzsrc.a" "${objs[@]}" ||
        return 1
    for t in $want; do
        # shellcheck disable=SC2046
        clang $cflags -fsanitize=fuzzer,address,undefined \
            "tests/fuzz/fuzz_$t.c" $(extra_srcs "$t") "$out/libfuzzsrc.a" \
            $libs -o "$out/fuzz_$t" || return 1
    done
}

# ---- run: one target; its summary line goes to $out/logs/TARGET.sum ----
run_one() {
    local t=$1 log="$out/logs/$1.log" art="tests/fuzz/artifacts/$1/"
    local seeds="" rc found="" f min stats runs cov ft

    mkdir -p "$out/corpus/$t" "$art"
    [ -d "tests/fuzz/corpus/$t" ] && seeds="tests/fuzz/corpus/$t"
    # shellcheck disable=SC2046,SC2086
    "$out/fuzz_$t" -max_total_time="$secs" -max_len="$(max_len "$t")" \
        -print_final_stats=1 $(own_flags "$t") ${FUZZ_FLAGS:-} \
        -artifact_prefix="$art" "$out/corpus/$t" $seeds >"$log" 2>&1
    rc=$?
    # What it found: the artifact libFuzzer names in its log.
    f=$(sed -n 's/.*Test unit written to \(.*\)$/\1/p' "$log" | tail -1)
    if [ -n "$f" ] && [ -f "$f" ]; then
        min="$f.min"
        # shellcheck disable=SC2046,SC2086
        "$out/fuzz_$t" -minimize_crash=1 -max_total_time=60 \
            -max_len="$(max_len "$t")" $(own_flags "$t") ${FUZZ_FLAGS:-} \
            -exact_artifact_path="$min" "$f" >"$log.min" 2>&1
        [ -s "$min" ] || cp "$f" "$min"
        cp "$min" "tests/fuzz/corpus/$t/crash-$(sha1sum "$min" | cut -c1-40)"
        found="$(grep -o -m1 'ERROR: [A-Za-z]*Sanitizer: [a-z-]*\|ERROR: libFuzzer: [a-z-]*\|runtime error: .*\|fuzz_[a-z_]*: .*' "$log" | head -1)"
        found="FOUND ${found:-exit $rc}: $f"
    elif [ $rc -ne 0 ]; then
        found="FAILED (exit $rc, no artifact): see $log"
    fi
    stats=$(grep -a '^#[0-9]*[[:space:]].*cov: ' "$log" | tail -1)
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
    [ -n "$runs" ] || runs=$(echo "$stats" | sed -n 's/^#\([0-9]*\).*/\1/p')
    cov=$(echo "$stats" | sed -n 's/.* cov: \([0-9]*\).*/\1/p')
    ft=$(echo "$stats" | sed -n 's/.* ft: \([0-9]*\).*/\1/p')
    printf '%-12s %12s %8s %7s %7s  %s\n' "$t" "${runs:-0}" \
        "$(( ${runs:-0} / (secs > 0 ? secs : 1) ))" "${cov:--}" "${ft:--}" \
        "${found:-ok}" >"$out/logs/$t.sum"
    [ -z "$found" ]
}

build || exit 2
for t in $want; do
    rm -f "$out/logs/$t.sum"
    while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do
        wait -n
    done
    echo "fuzzing $t for ${secs}s" >&2
    run_one "$t" &
done
wait

status=0
printf '%-12s %12s %8s %7s %7s  %s\n' target runs runs/s cov ft result
for t in $want; do
    if [ -f "$out/logs/$t.sum" ]; then
        cat "$out/logs/$t.sum"
        grep -q ' ok$' "$out/logs/$t.sum" || status=1
    else
        printf '%-12s did not report\n' "$t"
        status=1
    fi
done
exit $status
