#!/usr/bin/env bash
# Every shipped example binds its listeners to loopback or a private
# address the operator names, never to every interface: no flag value or
# RL_LISTEN/RL_METRICS setting in deploy/ or the README reads 0.0.0.0 or
# [::]. Prints the offending lines and exits 1 otherwise.
set -euo pipefail
cd "$(dirname "$0")/../.."
bad=$(grep -rnE -- '(--(listen|metrics|grpc|http)[ =]|RL_(LISTEN|METRICS)=)(0\.0\.0\.0|\[::\])' \
  deploy README.md client/README.md || true)
if [ -n "$bad" ]; then
  echo "examples binding every interface:"
  echo "$bad"
  exit 1
fi
echo "deploy examples: no listener on every interface"
