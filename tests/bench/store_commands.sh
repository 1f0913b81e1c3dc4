#!/usr/bin/env bash
# Builds and runs tests/bench/store_commands.c: the measurement behind the
# Redis store's command strategy (BENCHMARKS.md, "Redis command strategy").
# It starts its own redis-server on a free loopback port and stops it.
#
#   tests/bench/store_commands.sh [runs] [ops per run] [batches in flight]
#
# Defaults: 3 runs, 100000 ops (20000 for batch size 1), 8 in flight; about
# a minute on two cores. Built with -O2 and no sanitizers so that the
# allocation counter can interpose on malloc.
set -euo pipefail
cd "$(dirname "$0")/../.."
out=$(mktemp -d /tmp/store_commands.XXXXXX)
trap 'rm -rf "$out"' EXIT
mkdir -p "$out/store"
for f in server/store/*.lua; do
  cmake -DIN="$f" -DOUT="$out/store/$(basename "$f").h" \
    -P server/store/lua_embed.cmake
done
cc -std=c11 -O2 -D_POSIX_C_SOURCE=200809L -DRL_BENCH_COUNT_MALLOC \
  -Wall -Wextra -Itests/support -Iserver -Ilib -I"$out" \
  tests/bench/store_commands.c tests/support/rlt.c server/store/redis*.c \
  server/store/store.c \
  server/base/log.c server/base/prom_hist.c lib/*.c \
  $(pkg-config --cflags --libs hiredis libuv) -o "$out/store_commands"
"$out/store_commands" "$@"
