#!/usr/bin/env bash
# Redis memory per counter, the Lua script's against the ratelimit
# module's (RL.BATCH), on one Redis with the module loaded and a replica
# of it without the module, in one run (DESIGN.md, "Redis store", the module's memory):
#
#   tests/bench/module_memory.sh [KEYS] [ROUNDS]
#
# module_memory writes KEYS counters (default 100000) through each path,
# each into a database of its own, then once more; it prints used_memory
# growth per key on the master and on the replica, MEMORY USAGE and
# OBJECT ENCODING. Defaults: 2 rounds (the order swapped in the second).
# Loopback only; what it starts it stops by pid.
set -euo pipefail
cd "$(dirname "$0")/../.."
keys=${1:-100000}
rounds=${2:-2}
out=$(mktemp -d /tmp/module_memory.XXXXXX)
. tests/bench/lib.sh
cmake --build "$build" -j 2 --target module_memory rl_redis_module >/dev/null

start_redis "$out" --loadmodule "$build/server/redis_module/ratelimit.so"
master=$rport
mkdir -p "$out/replica"
start_redis "$out/replica" --replicaof 127.0.0.1 "$master"
replica=$rport
for _ in $(seq 1 500); do
  redis-cli -p "$replica" info replication | grep -q 'master_link_status:up' &&
    break
  sleep 0.01
done
redis-cli -p "$replica" info replication | grep -q 'master_link_status:up' || {
  echo "replica never synced: $(tail -3 "$out/replica/redis.log")" >&2
  exit 1
}
echo "redis $(redis-server --version | sed 's/.*v=\([^ ]*\).*/\1/'), $keys keys a path, maxmemory-policy $(redis-cli -p "$master" config get maxmemory-policy | tail -1)"
"$build/tests/bench/module_memory" "$master" "$keys" "$rounds" "$replica"
