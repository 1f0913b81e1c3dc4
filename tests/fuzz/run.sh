#!/usr/bin/env bash
# Coverage-guided fuzzing of the request path with clang's libFuzzer, for a
# bounded time (default 60 s); crashes land in tests/fuzz/artifacts/.
#   tests/fuzz/run.sh [SECONDS]
set -euo pipefail
cd "$(dirname "$0")/../.."
secs=${1:-60}
command -v clang >/dev/null || { echo "needs clang: apt-get install clang" >&2; exit 2; }
out=build-fuzz
mkdir -p "$out" tests/fuzz/artifacts
clang -std=c11 -D_POSIX_C_SOURCE=200809L -g -O1 \
  -fsanitize=fuzzer,address,undefined -Ilib \
  tests/fuzz/fuzz_request.c lib/buf.c lib/validate.c lib/error.c lib/frame.c \
  lib/msg.c lib/window.c lib/hash.c -o "$out/fuzz_request"
mkdir -p "$out/corpus"
"$out/fuzz_request" -max_total_time="$secs" -max_len=4096 \
  -artifact_prefix=tests/fuzz/artifacts/ "$out/corpus"

# The HTTP request-head parser (server/net/http.c), seeded from
# tests/fuzz/corpus/http; heads up to a little over the 8 KiB limit.
clang -std=c11 -D_POSIX_C_SOURCE=200809L -g -O1 \
  -fsanitize=fuzzer,address,undefined -Ilib -Iserver \
  tests/fuzz/fuzz_http.c server/net/http.c -o "$out/fuzz_http"
mkdir -p "$out/corpus_http"
"$out/fuzz_http" -max_total_time="$secs" -max_len=9000 \
  -artifact_prefix=tests/fuzz/artifacts/ "$out/corpus_http" tests/fuzz/corpus/http

# The /check request (server/net/http_check_query.c over server/net/http.c),
# seeded from tests/fuzz/corpus/check; the first byte picks the options.
clang -std=c11 -D_POSIX_C_SOURCE=200809L -D_DEFAULT_SOURCE -g -O1 \
  -fsanitize=fuzzer,address,undefined -Ilib -Iserver \
  tests/fuzz/fuzz_check.c server/net/http_check_query.c server/net/http.c \
  lib/error.c lib/parse.c -o "$out/fuzz_check"
mkdir -p "$out/corpus_check"
"$out/fuzz_check" -max_total_time="$secs" -max_len=9000 \
  -artifact_prefix=tests/fuzz/artifacts/ "$out/corpus_check" tests/fuzz/corpus/check

# The Redis store's script reply: hiredis's reader with the store's reply
# objects (server/store/redis_reply_alloc.c) and the parser (redis_parse.c),
# seeded from tests/fuzz/corpus/redis_reply.
clang -std=c11 -D_POSIX_C_SOURCE=200809L -g -O1 \
  -fsanitize=fuzzer,address,undefined -Ilib -Iserver \
  $(pkg-config --cflags libuv) \
  tests/fuzz/fuzz_redis_reply.c server/store/redis_parse.c \
  server/store/redis_reply_alloc.c server/store/store.c lib/window.c lib/hash.c lib/admit.c \
  $(pkg-config --libs hiredis) -o "$out/fuzz_redis_reply"
mkdir -p "$out/corpus_redis_reply"
"$out/fuzz_redis_reply" -max_total_time="$secs" -max_len=4096 \
  -artifact_prefix=tests/fuzz/artifacts/ "$out/corpus_redis_reply" \
  tests/fuzz/corpus/redis_reply

# The Redis module's batch (server/redis_module/rlm_batch.c) over the
# target's own keyspace, seeded from tests/fuzz/corpus/rlm_batch.
clang -std=c11 -D_POSIX_C_SOURCE=200809L -g -O1 \
  -fsanitize=fuzzer,address,undefined -Iserver -Ilib \
  tests/fuzz/fuzz_rlm_batch.c server/redis_module/rlm_batch.c lib/admit.c \
  -lm \
  -o "$out/fuzz_rlm_batch"
mkdir -p "$out/corpus_rlm_batch"
"$out/fuzz_rlm_batch" -max_total_time="$secs" -max_len=4096 \
  -artifact_prefix=tests/fuzz/artifacts/ "$out/corpus_rlm_batch" \
  tests/fuzz/corpus/rlm_batch

# fuzz_conn: the server's connections, batcher and policy runtime over a
# real libuv loop (server sources as rls_core builds them, minus the stores,
# listeners and server.c it does not use). Seeds: tests/fuzz/corpus/conn.
sed 's/@PROJECT_VERSION@/fuzz/' server/version.h.in >"$out/version.h"
# The Redis store's Lua scripts as C strings, as the CMake build makes them.
mkdir -p "$out/store"
for f in server/store/*.lua; do
  cmake -DIN="$f" -DOUT="$out/store/$(basename "$f").h" \
    -P server/store/lua_embed.cmake
done
clang -std=c11 -D_POSIX_C_SOURCE=200809L -D_DEFAULT_SOURCE -g -O1 \
  -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
  -Ilib -Iserver -I"$out" tests/fuzz/fuzz_conn.c tests/fuzz/fuzz_conn_store.c \
  server/batch.c server/decide.c server/fail_local.c server/store/memory.c \
  server/prom.c server/prom_hist.c server/log.c \
  server/util.c server/net/conn.c server/net/listen.c server/net/tls.c \
  server/ossl.c server/flags.c \
  server/policy/rules.c server/policy/limit.c server/policy/yaml_in.c \
  server/policy/loader.c \
  server/policy/runtime.c server/policy/file_in.c server/refusals.c \
  server/store/store.c server/store/xop.c server/handle.c lib/*.c \
  $(pkg-config --cflags --libs libuv yaml-0.1 hiredis) -lssl -lcrypto -lm \
  -o "$out/fuzz_conn"
mkdir -p "$out/corpus-conn"
"$out/fuzz_conn" -max_total_time="$secs" -max_len=4096 -timeout=20 \
  -artifact_prefix=tests/fuzz/artifacts/ "$out/corpus-conn" \
  tests/fuzz/corpus/conn

# The --envoy-config loader (server/policy/envoy_conf.c), seeded from
# tests/fuzz/corpus/envoy_conf; the rules file loader (rules.c), from
# tests/fuzz/corpus/rules; and the --grpc input path (nghttp2, gRPC,
# RateLimitRequest, batcher, memory store) over a real loop; and a control
# plane's DiscoveryResponse (xds_conf.c), from tests/fuzz/corpus/xds_conf.
# They need the server's sources and the protos' generated code.
mkdir -p "$out/gen"
(cd proto && protoc-c --c_out="../$out/gen" \
  envoy/service/ratelimit/v3/rls.proto \
  envoy/extensions/common/ratelimit/v3/ratelimit.proto \
  envoy/config/core/v3/base.proto envoy/type/v3/ratelimit_unit.proto \
  google/protobuf/duration.proto google/protobuf/wrappers.proto \
  envoy/service/discovery/v3/discovery.proto \
  envoy/service/discovery/v3/ads.proto envoy/config/core/v3/node.proto \
  ratelimit/config/ratelimit/v3/rls_conf.proto google/protobuf/any.proto \
  google/protobuf/struct.proto google/rpc/status.proto)
srv=$(find server -name '*.c' ! -name main.c ! -name rl-ctl.c \
  ! -path '*/redis_module/module.c')
gen=$(find "$out/gen" -name '*.pb-c.c')
for t in envoy_conf rules grpc xds_conf; do
  extra=""
  [ "$t" = grpc ] && extra="tests/support/h2raw.c -Itests/support"
  clang -std=c11 -D_POSIX_C_SOURCE=200809L -D_DEFAULT_SOURCE -g -O1 \
    -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
    -Ilib -Iserver -I"$out" -I"$out/gen" "tests/fuzz/fuzz_$t.c" $extra \
    $srv $gen lib/*.c \
    $(pkg-config --cflags --libs libuv yaml-0.1 hiredis libnghttp2 \
      libprotobuf-c) -lssl -lcrypto -lm -o "$out/fuzz_$t"
  mkdir -p "$out/corpus-$t"
  seeds=""
  [ "$t" = envoy_conf ] && seeds=tests/fuzz/corpus/envoy_conf
  [ "$t" = grpc ] && seeds=tests/fuzz/corpus/grpc
  [ "$t" = rules ] && seeds=tests/fuzz/corpus/rules
  [ "$t" = xds_conf ] && seeds=tests/fuzz/corpus/xds_conf
  "$out/fuzz_$t" -max_total_time="$secs" -max_len=4096 -timeout=20 \
    -artifact_prefix=tests/fuzz/artifacts/ "$out/corpus-$t" $seeds
done

# Reservation and lease handles (server/handle.c), seeded from
# tests/fuzz/corpus/handle.
clang -std=c11 -D_POSIX_C_SOURCE=200809L -g -O1 \
  -fsanitize=fuzzer,address,undefined -Ilib -Iserver \
  tests/fuzz/fuzz_handle.c server/handle.c -lcrypto -o "$out/fuzz_handle"
mkdir -p "$out/corpus_handle"
"$out/fuzz_handle" -max_total_time="$secs" -max_len=600 \
  -artifact_prefix=tests/fuzz/artifacts/ "$out/corpus_handle" \
  tests/fuzz/corpus/handle

# The Redis Cluster store's slot-map and redirection parsers
# (server/store/redis_cluster_map.c), seeded from tests/fuzz/corpus/cluster.
clang -std=c11 -D_POSIX_C_SOURCE=200809L -g -O1 \
  -fsanitize=fuzzer,address,undefined -Ilib -Iserver \
  tests/fuzz/fuzz_cluster.c server/store/redis_cluster_map.c lib/error.c \
  $(pkg-config --cflags --libs hiredis) -o "$out/fuzz_cluster"
mkdir -p "$out/corpus_cluster"
"$out/fuzz_cluster" -max_total_time="$secs" -max_len=4096 \
  -artifact_prefix=tests/fuzz/artifacts/ "$out/corpus_cluster" \
  tests/fuzz/corpus/cluster

# What Redis Sentinel answers (server/store/redis_sentinel_parse.c), seeded
# from tests/fuzz/corpus/sentinel.
clang -std=c11 -D_POSIX_C_SOURCE=200809L -g -O1 \
  -fsanitize=fuzzer,address,undefined -Ilib -Iserver \
  tests/fuzz/fuzz_sentinel.c server/store/redis_sentinel_parse.c lib/error.c \
  $(pkg-config --cflags --libs hiredis) -o "$out/fuzz_sentinel"
mkdir -p "$out/corpus_sentinel"
"$out/fuzz_sentinel" -max_total_time="$secs" -max_len=1024 \
  -artifact_prefix=tests/fuzz/artifacts/ "$out/corpus_sentinel" \
  tests/fuzz/corpus/sentinel

# rl-fit's access-log line parsers (client/fit/fit_log.c), seeded from
# tests/fuzz/corpus/fitlog; byte 0 picks format, key expression and cost.
clang -std=c11 -D_POSIX_C_SOURCE=200809L -g -O1 \
  -fsanitize=fuzzer,address,undefined -Ilib -Iclient/fit \
  tests/fuzz/fuzz_fitlog.c client/fit/fit_log.c -o "$out/fuzz_fitlog"
mkdir -p "$out/corpus_fitlog"
"$out/fuzz_fitlog" -max_total_time="$secs" -max_len=20000 \
  -artifact_prefix=tests/fuzz/artifacts/ "$out/corpus_fitlog" \
  tests/fuzz/corpus/fitlog
