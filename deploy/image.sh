#!/usr/bin/env bash
# Builds the rl-server container image with Debian's podman, from a fresh
# clone and without an image registry: a Release build of rl-server and
# rl-ctl in their own build directory, then an image FROM scratch holding
# the two binaries, exactly the shared libraries they link (ldd), the
# dynamic loader, CA certificates and the few files glibc reads at run
# time. Prints nothing but errors. deploy/Containerfile says what goes in.
#
#   bash deploy/image.sh TAG              build, then `podman build -t TAG`
#   bash deploy/image.sh --rootfs DIR     only assemble the file system in DIR
#                                         (what Containerfile.debian runs)
#
# TAG is an image name (`registry.example.com/rl-server:0.1.0`); a bare tag
# (`0.1.0`) names `localhost/rl-server:0.1.0`.
#
# Options (before TAG):
#   --from-build DIR  take server/rl-server and tools/rl-ctl from an
#                     existing build tree instead of building (the tests)
#
# Environment:
#   RL_IMAGE_BUILD   build directory (default: build-image in the clone)
#   PODMAN           the podman command (default: podman)
#   RL_PODMAN_OPTS   global podman options, e.g. "--storage-driver vfs"
#                    where overlay is not available
set -euo pipefail

die() { echo "image.sh: $*" >&2; exit 1; }

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
from_build=""
rootfs_only=""
tag=""
while [ $# -gt 0 ]; do
  case "$1" in
    --from-build) [ $# -ge 2 ] || die "--from-build needs a directory"
                  from_build=$2; shift 2 ;;
    --rootfs) [ $# -ge 2 ] || die "--rootfs needs a directory"
              rootfs_only=$2; shift 2 ;;
    -h|--help) sed -n '2,25p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
               exit 0 ;;
    -*) die "unknown option $1" ;;
    *) [ -z "$tag" ] || die "one TAG only"; tag=$1; shift ;;
  esac
done
[ -n "$tag" ] || [ -n "$rootfs_only" ] || die "usage: image.sh [--from-build DIR] TAG | --rootfs DIR"
case "$tag" in
  ""|*/*|*:*) ;;
  *) tag="localhost/rl-server:$tag" ;;
esac

build=${RL_IMAGE_BUILD:-$repo/build-image}
mkdir -p "$build"
log="$build/image.log"
: >"$log"
# A step's output goes to the log; on failure its end goes to stderr.
quiet() {
  if ! "$@" >>"$log" 2>&1; then
    tail -n 30 "$log" >&2
    die "failed: $* (whole output in $log)"
  fi
}

# 1. The binaries.
if [ -n "$from_build" ]; then
  top=$(cd "$from_build" && pwd)
else
  command -v cmake >/dev/null || die "cmake missing: bash deploy/setup-debian.sh"
  quiet cmake -S "$repo" -B "$build" -DCMAKE_BUILD_TYPE=Release \
    -DRL_BUILD_TESTS=OFF
  quiet cmake --build "$build" -j "$(nproc)" --target rl-server rl-ctl
  top=$build
fi
# Where each binary is built: the server in server/, rl-ctl in tools/.
binpath() { case $1 in rl-ctl) echo "$top/tools/$1" ;; *) echo "$top/server/$1" ;; esac; }
for b in rl-server rl-ctl; do
  [ -x "$(binpath "$b")" ] || die "no $(binpath "$b")"
done

# 2. The root file system.
root=${rootfs_only:-$build/image/rootfs}
case "$root" in /|"") die "refusing rootfs '$root'" ;; esac
rm -rf "$root"
mkdir -p "$root/usr/local/bin" "$root/bin" "$root/etc/ssl/certs"
for b in rl-server rl-ctl; do
  if command -v strip >/dev/null; then
    strip --strip-unneeded -o "$root/usr/local/bin/$b" "$(binpath "$b")"
  else
    cp "$(binpath "$b")" "$root/usr/local/bin/$b"
  fi
done
# Envoy Gateway's and Istio's Deployments run `command: /bin/ratelimit`;
# under that name rl-server reads envoy-ratelimit's environment.
ln -s ../usr/local/bin/rl-server "$root/bin/ratelimit"

# Every library either binary links, at the path ldd resolves it to (the
# loader's default directories, so no ld.so.cache is needed), and the
# loader at the binary's PT_INTERP path.
copy_lib() {
  local src=$1
  [ -e "$src" ] || die "ldd named $src, which does not exist"
  mkdir -p "$root$(dirname "$src")"
  cp -L "$src" "$root$src"
}
libs=$(for b in rl-server rl-ctl; do
         ldd "$(binpath "$b")" | awk '$2 == "=>" && $3 ~ /^\// {print $3}
                                 $1 ~ /^\// {print $1}'
       done | sort -u)
[ -n "$libs" ] || die "ldd found no libraries in $top/server/rl-server"
for l in $libs; do copy_lib "$l"; done
interp=$(readelf -l "$top/server/rl-server" |
         sed -n 's/.*Requesting program interpreter: \(.*\)]/\1/p')
[ -n "$interp" ] || die "rl-server has no program interpreter"
[ -e "$root$interp" ] || copy_lib "$interp"

# Host names (--redis redis:6379, the xDS server): glibc 2.34 and later
# resolve files and dns inside libc; older ones dlopen these.
libdir=$(dirname "$(echo "$libs" | grep '/libc\.so\.6$')")
glibc=$(getconf GNU_LIBC_VERSION 2>/dev/null | awk '{print $2}')
if [ -n "$glibc" ] && [ "$(printf '%s\n2.34\n' "$glibc" | sort -V | head -1)" != 2.34 ]; then
  for n in libnss_files.so.2 libnss_dns.so.2 libresolv.so.2; do
    [ -e "$libdir/$n" ] && copy_lib "$libdir/$n"
  done
fi
cat >"$root/etc/nsswitch.conf" <<'EOF'
passwd: files
group: files
hosts: files dns
EOF
# The user the image runs as (65534, as distroless's nonroot... and
# Debian's nobody); /etc/hosts and /etc/resolv.conf come from the runtime.
cat >"$root/etc/passwd" <<'EOF'
root:x:0:0:root:/root:/sbin/nologin
nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin
EOF
cat >"$root/etc/group" <<'EOF'
root:x:0:
nogroup:x:65534:
EOF

# CA certificates for rediss:// without --redis-tls-ca: OpenSSL's default
# file (OPENSSLDIR/cert.pem) points at Debian's bundle.
bundle=/etc/ssl/certs/ca-certificates.crt
[ -r "$bundle" ] || die "no $bundle: apt-get install ca-certificates"
cp "$bundle" "$root$bundle"
ssldir=$( (strings "$(echo "$libs" | grep '/libcrypto\.so' | head -1)" |
          sed -n 's/^OPENSSLDIR: "\(.*\)"$/\1/p' | head -1) 2>/dev/null || true)
ssldir=${ssldir:-/usr/lib/ssl}
mkdir -p "$root$ssldir"
ln -s "$bundle" "$root$ssldir/cert.pem"

# Same content, same bytes: fixed times make the image reproducible.
find "$root" -exec touch -h -d @0 {} +

[ -n "$rootfs_only" ] && exit 0

# 3. The image.
podman=${PODMAN:-podman}
command -v "${podman%% *}" >/dev/null || die "podman missing: apt-get install podman runc"
# shellcheck disable=SC2086
quiet $podman ${RL_PODMAN_OPTS:-} build --timestamp 0 --pull=never \
  -f "$repo/deploy/Containerfile" -t "$tag" "$build/image"
