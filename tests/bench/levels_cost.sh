#!/usr/bin/env bash
# Redis CPU per decision of a check across two levels (one op holding
# both levels' windows, all or nothing) against the same two rules asked
# as two separate checks, on the Lua script and on the ratelimit module:
#
#   tests/bench/levels_cost.sh [N]
#
# One redis-server per store kind behind an rl-server of this build; per
# kind, N (default 2000) checks of --level org:acme=org --level
# user:a=user by rl-check (one at a time: a batch of one request, so a
# store call per decision), then N of org:acme under org and N of user:a
# under user. Prints Redis's own time for those calls (INFO commandstats,
# usec of EVALSHA or RL.BATCH, which include the commands a script runs)
# per decision: the group's one call against the singles' two. Limits are
# out of reach: every check is admitted. Loopback only; what it starts it
# stops by pid.
set -euo pipefail
cd "$(dirname "$0")/../.."
n=${1:-2000}
out=$(mktemp -d /tmp/levels_cost.XXXXXX)
. tests/bench/lib.sh
cmake --build "$build" -j 2 --target rl_redis_module rl-check >/dev/null
so=$build/server/redis_module/ratelimit.so
cat >"$out/rules.yaml" <<'EOF'
rules:
  org:
    limits: [1000000000/1d, 1000000000/1h]
  user:
    limits: [1000000000/1d]
EOF

# usec CMD PORT: total usec Redis spent in CMD so far.
usec() {
  redis-cli -p "$2" info commandstats | tr -d '\r' |
    sed -n "s/^cmdstat_$1:calls=[0-9]*,usec=\\([0-9]*\\),.*/\\1/p" |
    grep . || echo 0
}
check() {
  "$build/tools/rl-check" --server "127.0.0.1:$1" --repeat "$n" "${@:2}" \
    >/dev/null
}
for kind in script module; do
  mkdir -p "$out/$kind"
  if [ "$kind" = module ]; then
    start_redis "$out/$kind" --loadmodule "$so"
    cmd=rl.batch
    args=()
  else
    start_redis "$out/$kind"
    cmd=evalsha
    args=(--redis-module off)
  fi
  start_server "$out/$kind" --redis "127.0.0.1:$rport" \
    --config "$out/rules.yaml" "${args[@]}"
  u0=$(usec "$cmd" "$rport")
  check "$sport" --level org:acme=org --level user:a=user
  u1=$(usec "$cmd" "$rport")
  check "$sport" --key org:acme --rule org
  check "$sport" --key user:a --rule user
  u2=$(usec "$cmd" "$rport")
  awk -v k="$kind" -v n="$n" -v g=$((u1 - u0)) -v s=$((u2 - u1)) 'BEGIN {
    printf "%-7s group of 2 levels: %.2f us/decision (1 call); " \
           "2 single checks: %.2f us/decision (2 calls); ratio %.2f\n",
           k, g / n, s / n, (g / n) / (s / n) }'
done
