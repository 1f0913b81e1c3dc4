#!/usr/bin/env bash
# Sets up a Debian 12 machine, builds twice (Release, and Debug with
# AddressSanitizer + UndefinedBehaviorSanitizer) and runs every test in both.
# Exits non-zero if anything fails; ends with a one-line summary.
set -euo pipefail
cd "$(dirname "$0")/.."

bash deploy/setup-debian.sh

jobs=$(nproc 2>/dev/null || echo 2)
total_pass=0
total_fail=0

run_config() {
  local dir=$1; shift
  echo "== build $dir ($*)"
  cmake -S . -B "$dir" -DRL_WERROR=ON "$@" >"$dir.cmake.log" 2>&1 ||
    { cat "$dir.cmake.log"; return 1; }
  cmake --build "$dir" -j "$jobs" >"$dir.build.log" 2>&1 ||
    { cat "$dir.build.log"; return 1; }
  echo "== test $dir"
  local log="$dir.ctest.log" rc=0
  (cd "$dir" && ctest --output-on-failure -j "$jobs" --timeout 300) 2>&1 |
    tee "$log" || rc=$?
  local line pass fail
  line=$(grep -E 'tests passed, [0-9]+ tests? failed out of [0-9]+' "$log" | tail -1)
  fail=$(sed -E 's/.* ([0-9]+) tests? failed out of.*/\1/' <<<"$line")
  pass=$(( $(sed -E 's/.*out of ([0-9]+).*/\1/' <<<"$line") - fail ))
  total_pass=$((total_pass + pass))
  total_fail=$((total_fail + fail))
  return "$rc"
}

mkdir -p build-ci
status=0
run_config build-ci/release -DCMAKE_BUILD_TYPE=Release || status=1
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  run_config build-ci/sanitize -DCMAKE_BUILD_TYPE=Debug \
    -DRL_SANITIZE=address,undefined || status=1

echo "tests: $total_pass passed, $total_fail failed"
exit "$status"
