#!/usr/bin/env bash
# The installed library as a user sees it: `cmake --install` into a fresh
# prefix, then a program outside the tree built with nothing but
# `pkg-config --cflags --libs rlc`, and one built with find_package(rlc)
# (shared and static), each asking a running rl-server for decisions.
#
#   install_test.sh BUILD_DIR RL_SERVER_BIN [SANITIZE_FLAGS]
#
# SANITIZE_FLAGS (e.g. -fsanitize=address,undefined) must match the build:
# an instrumented library needs its runtime in the program too.
set -euo pipefail
build=$1 server_bin=$2 san=${3:-}
# shellcheck source=../../deploy/ports.sh
. "$(dirname "${BASH_SOURCE[0]}")/../../deploy/ports.sh"

work=$(mktemp -d /tmp/rlc-install-XXXXXX)
server_pid=
cleanup() {
  if [ -n "$server_pid" ]; then kill "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT

prefix=$work/prefix
cmake --install "$build" --prefix "$prefix" --component rlc >/dev/null
pc=$(find "$prefix" -name rlc.pc)
[ -f "$prefix/include/rlc.h" ] || { echo "rlc.h not installed"; exit 1; }
libdir=$(dirname "$(dirname "$pc")")
for f in librlc.so librlc.a cmake/rlc/rlcConfig.cmake; do
  [ -e "$libdir/$f" ] || { echo "$f not installed"; exit 1; }
done
# Only the API leaves the shared library.
if nm -D --defined-only "$libdir/librlc.so" | awk '{print $3}' |
   grep -v '^rlc_' | grep -q .; then
  echo "non-API symbols exported:"; nm -D --defined-only "$libdir/librlc.so"
  exit 1
fi

mkdir -p "$work/user"
cat >"$work/user/prog.c" <<'C'
#include <stdio.h>
#include <string.h>
#include <rlc.h>

/* Two allowed per minute, then refused; prints one word per decision. */
int main(int argc, char **argv)
{
    rlc_options_t o;
    rlc_client_t *c;
    rlc_result_t r;
    int i, rc;

    rlc_options_init(&o);
    o.servers = argv[1];
    rc = rlc_connect(&c, &o);
    if (rc != RLC_OK) {
        fprintf(stderr, "connect: %s\n", rlc_strerror(rc));
        return 2;
    }
    rlc_check_t req = {.key = argv[2], .limit = 2, .window_s = 60};
    for (i = 0; i < 3; i++) {
        if (rlc_check(c, &req, &r) != RLC_OK)
            return 2;
        printf("%s%s", i ? " " : "", rlc_code_name(r.code));
    }
    printf("\n");
    rlc_free(c);
    (void)argc;
    return 0;
}
C

# A server on the port the system picks, as it reports it.
rl_start_ours "$work/server.log" "$work/server.ports" \
  "$server_bin" --listen 127.0.0.1:0 --log-level warn ||
  { echo "rl-server did not start"; exit 1; }
server_pid=$rl_pid
port=$(rl_port_of "$work/server.ports" listen)

expect="OK OK OVER_LIMIT"
run() { # NAME BINARY
  local out
  out=$(LD_LIBRARY_PATH="$libdir" "$2" "127.0.0.1:$port" "install:$1:$$")
  echo "$1: $out"
  [ "$out" = "$expect" ] || { echo "$1: expected '$expect'"; exit 1; }
}

# 1. pkg-config alone.
export PKG_CONFIG_PATH=$libdir/pkgconfig
flags=$(pkg-config --cflags --libs rlc)
echo "pkg-config --cflags --libs rlc: $flags"
# shellcheck disable=SC2086
cc -std=c11 -Wall -Werror -o "$work/user/prog" "$work/user/prog.c" $flags $san
run pkg-config "$work/user/prog"

# 2. find_package(rlc), shared and static.
cat >"$work/user/CMakeLists.txt" <<'CM'
cmake_minimum_required(VERSION 3.18)
project(rlc_user C)
find_package(rlc REQUIRED)
add_executable(prog_shared prog.c)
target_link_libraries(prog_shared PRIVATE rlc::rlc)
add_executable(prog_static prog.c)
target_link_libraries(prog_static PRIVATE rlc::rlc_static)
CM
cmake -S "$work/user" -B "$work/user/build" -DCMAKE_PREFIX_PATH="$prefix" \
  -DCMAKE_C_FLAGS="$san" -DCMAKE_EXE_LINKER_FLAGS="$san" >/dev/null
cmake --build "$work/user/build" >/dev/null
run find_package-shared "$work/user/build/prog_shared"
run find_package-static "$work/user/build/prog_static"
# The static program must not need librlc.so at run time.
if ldd "$work/user/build/prog_static" | grep -q librlc; then
  echo "prog_static links librlc.so"; exit 1
fi

# 3. The installed rl-check finds its library by itself (RPATH).
out=$("$prefix/bin/rl-check" --server "127.0.0.1:$port" --key "install:cli:$$" \
      --limit 1 --window 60 --repeat 2) && rc=0 || rc=$?
echo "rl-check: $out (exit $rc)"
[ "$rc" = 1 ] || { echo "rl-check: expected exit 1"; exit 1; }
echo "install test: 4 passed, 0 failed"
