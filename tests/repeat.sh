#!/usr/bin/env bash
# Runs the whole suite N times in a row, as .ci/run runs it (ctest, Release
# and Debug with ASan+UBSan, in this tree's build-ci/), optionally with
# loopback connection churn beside it (tests/support/churn.py), and prints
# the failures of every round: the way to show that a fix for a flaky test
# holds.
#   tests/repeat.sh N [--churn CONNS]
set -euo pipefail
cd "$(dirname "$0")/.."
n=${1:?usage: tests/repeat.sh N [--churn CONNS]}
churn=0
[ "${2:-}" = --churn ] && churn=${3:-2000}
bash deploy/setup-debian.sh
jobs=$(nproc 2>/dev/null || echo 2)
for cfg in release:Release sanitize:Debug; do
  dir=build-ci/${cfg%%:*}
  san=()
  [ "${cfg%%:*}" = sanitize ] && san=(-DRL_SANITIZE=address,undefined)
  cmake -S . -B "$dir" -DRL_WERROR=ON -DCMAKE_BUILD_TYPE="${cfg##*:}" \
    "${san[@]}" >/dev/null
  cmake --build "$dir" -j "$jobs" >/dev/null
done
cpid=
if [ "$churn" -gt 0 ]; then
  python3 tests/support/churn.py "$churn" 86400 >build-ci/churn.out 2>&1 &
  cpid=$!
fi
trap '[ -n "$cpid" ] && kill "$cpid" 2>/dev/null; true' EXIT
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
failed=0
for r in $(seq 1 "$n"); do
  for dir in build-ci/release build-ci/sanitize; do
    log=build-ci/repeat-$r-$(basename "$dir").log
    (cd "$dir" && ctest -j "$jobs" --timeout 300 --output-on-failure) \
      >"$log" 2>&1 || true
    line=$(grep -E 'tests passed, [0-9]+ tests? failed' "$log" | tail -1)
    bad=$(sed -n 's/^[[:space:]]*[0-9]* - \(.*\) (.*)$/\1/p' "$log" | tr '\n' ' ')
    echo "round $r $(basename "$dir"): $line ${bad:+[$bad]}"
    grep -q ' 0 tests failed' <<<"$line" || failed=$((failed + 1))
  done
done
echo "repeat: $n rounds x 2 builds, $failed runs with failures"
[ "$failed" = 0 ]
