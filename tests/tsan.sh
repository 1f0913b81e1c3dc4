#!/usr/bin/env bash
# ThreadSanitizer over --threads' cross-loop code (server/loops.c, the
# shared memory store): a -fsanitize=thread build in build-tsan/ (gcc;
# $RL_TSAN_BUILD elsewhere), then the tests that run rl-server with two
# loops, every rl-server's reports collected. Exits 0 only when every
# test passed and no report was written.
#
#   tests/tsan.sh            # build, run, print any report
#
# Not part of .ci/run (a third build would double its time); the memory
# store's own threaded test runs under TSan there (test_store_memory_mt_tsan).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${RL_TSAN_BUILD:-build-tsan}
reports=$(mktemp -d /tmp/rl-tsan-XXXXXX)
trap 'rm -rf "$reports"' EXIT

cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Debug -DRL_SANITIZE=thread \
  >"$build.cmake.log" 2>&1 || { cat "$build.cmake.log"; exit 1; }
cmake --build "$build" -j "$(nproc)" --target rl-server rl-check rl-bench e2e_threads \
  e2e_server e2e_policy e2e_http_check e2e_grpc_bad test_store_memory_mt \
  >"$build.build.log" 2>&1 || { tail -40 "$build.build.log"; exit 1; }

export TSAN_OPTIONS="log_path=$reports/report second_deadlock_stack=1"
status=0
run() {
  echo "== $*"
  "$@" >"$reports/out" 2>&1 || { status=1; tail -30 "$reports/out"; }
}
run "$build/tests/server/e2e/e2e_threads"
run "$build/tests/server/store/test_store_memory_mt"
for t in e2e_server e2e_policy e2e_http_check e2e_grpc_bad; do
  RLT_SERVER_ARGS="--threads 2" run "$build/tests/server/e2e/$t"
done
RLT_SERVER_ARGS="--threads 2" run /usr/bin/python3 \
  tests/server/e2e/e2e_tls_listen.py "$build/server/rl-server" proto \
  "$build/tools/rl-check" "$build/tools/bench/rl-bench"
n=$(find "$reports" -name 'report.*' | wc -l)
for f in "$reports"/report.*; do
  [ -e "$f" ] && cat "$f"
done
echo "tsan: $n report(s); tests $([ $status = 0 ] && echo passed || echo FAILED)"
[ "$status" = 0 ] && [ "$n" = 0 ]
