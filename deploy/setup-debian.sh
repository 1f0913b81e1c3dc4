#!/usr/bin/env bash
# Installs what a fresh Debian 12 machine lacks to build, test, benchmark and
# run ratelimit. Idempotent, and silent when everything is already there.
set -euo pipefail

packages=(
  build-essential cmake pkg-config git
  libprotobuf-c-dev protobuf-c-compiler libuv1-dev libhiredis-dev
  libyaml-dev
  libnghttp2-dev
  libssl-dev openssl
  python3-grpcio python3-protobuf python3-grpc-tools python3-yaml
  libcmocka-dev zlib1g-dev
  redis-server redis-tools redis-sentinel
  haproxy faketime gnuplot-nox procps
  nginx-light caddy
  curl jq
  podman runc containernetworking-plugins iptables ca-certificates
  prometheus
)
# node and npm (tests/deploy/k8s_validate.sh): Debian's, unless a nodejs
# that bundles npm (and conflicts with Debian's npm) is installed already.
command -v npm >/dev/null || packages+=(nodejs npm)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q '^install ok installed$'; then
    missing+=("$p")
  fi
done
[ ${#missing[@]} -eq 0 ] && exit 0

sudo=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "setup: need root or sudo to install: ${missing[*]}" >&2; exit 1; }
  sudo="sudo"
fi
echo "setup: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
# Debian starts a system redis-server on 6379 (and redis-sentinel on 26379)
# when the package is installed; nothing here uses them (tests start their
# own on free ports). Likewise prometheus (a system one on 9090; the
# package brings promtool too): deploy_eg_dashboard and e2e_prometheus
# start their own.
