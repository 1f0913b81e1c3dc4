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
  tests/fuzz/fuzz_request.c lib/buf.c lib/check.c lib/error.c lib/frame.c \
  lib/msg.c lib/window.c -o "$out/fuzz_request"
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

# The Redis store's script reply parser (server/store/redis_script.c),
# seeded from tests/fuzz/corpus/redis_reply.
clang -std=c11 -D_POSIX_C_SOURCE=200809L -g -O1 \
  -fsanitize=fuzzer,address,undefined -Ilib -Iserver \
  $(pkg-config --cflags libuv) \
  tests/fuzz/fuzz_redis_reply.c server/store/redis_script.c lib/window.c \
  -o "$out/fuzz_redis_reply"
mkdir -p "$out/corpus_redis_reply"
"$out/fuzz_redis_reply" -max_total_time="$secs" -max_len=4096 \
  -artifact_prefix=tests/fuzz/artifacts/ "$out/corpus_redis_reply" \
  tests/fuzz/corpus/redis_reply

# fuzz_conn: the server's connections, batcher and policy runtime over a
# real libuv loop (server sources as rls_core builds them, minus the stores,
# listeners and server.c it does not use). Seeds: tests/fuzz/corpus/conn.
sed 's/@PROJECT_VERSION@/fuzz/' server/version.h.in >"$out/version.h"
clang -std=c11 -D_POSIX_C_SOURCE=200809L -D_DEFAULT_SOURCE -g -O1 \
  -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
  -Ilib -Iserver -I"$out" tests/fuzz/fuzz_conn.c server/batch.c server/hist.c server/log.c \
  server/util.c server/net/conn.c server/policy/config.c \
  server/policy/rules.c server/policy/runtime.c server/refusals.c \
  server/store/store.c lib/*.c \
  $(pkg-config --cflags --libs libuv yaml-0.1) -lm -o "$out/fuzz_conn"
mkdir -p "$out/corpus-conn"
"$out/fuzz_conn" -max_total_time="$secs" -max_len=4096 -timeout=20 \
  -artifact_prefix=tests/fuzz/artifacts/ "$out/corpus-conn" \
  tests/fuzz/corpus/conn

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
