#!/usr/bin/env bash
# deploy/kubernetes/ checked against the Kubernetes API schemas: every
# object by npm's kubernetes-models (its JSON schema validators, and its
# TypeScript types under tsc, which refuse a field the API does not have),
# Envoy Gateway's configuration by the types of its api/v1alpha1
# (envoy_gateway.d.ts here), and the rules ConfigMap by rl-server
# --check-envoy-config.
#
# Usage: k8s_validate.sh REPO RL_SERVER NODE_DIR
# The npm packages are installed once into NODE_DIR at pinned versions;
# without the npm registry (and nothing installed yet) this skips (77).
set -euo pipefail
repo=$1 rl_server=$2 dir=$3
here=$(cd "$(dirname "$0")" && pwd)
pins=(kubernetes-models@5.1.0 yaml@2.9.1 typescript@5.9.3)

command -v node >/dev/null && command -v npm >/dev/null ||
  { echo "SKIP: no node/npm (apt-get install nodejs npm)"; exit 77; }
mkdir -p "$dir"
stamp="$dir/installed"
if [ "$(cat "$stamp" 2>/dev/null)" != "${pins[*]}" ]; then
  if ! out=$(cd "$dir" && timeout 240 npm install --no-audit --no-fund \
               --no-save --silent --prefix "$dir" "${pins[@]}" 2>&1); then
    echo "SKIP: npm cannot install ${pins[*]}: $(echo "$out" | tail -3)"
    exit 77
  fi
  echo "${pins[*]}" >"$stamp"
fi

work=$(mktemp -d "$dir/run.XXXXXX")
trap 'rm -rf "$work"' EXIT
cp "$here/k8s_validate.mjs" "$here/envoy_gateway.d.ts" \
   "$here/eg_ratelimit_deployment.yaml" "$work/"
ln -s "$dir/node_modules" "$work/node_modules"
cd "$work"
node k8s_validate.mjs "$repo/deploy/kubernetes" "$work"
./node_modules/.bin/tsc -p tsconfig.json
for f in "$work"/rules/*; do
  "$rl_server" --check-envoy-config "$f" >/dev/null
done
echo "deploy/kubernetes: $(cat "$work/count") objects valid (and Envoy Gateway's Deployment as patched)"
