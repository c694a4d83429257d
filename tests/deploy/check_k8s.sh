#!/usr/bin/env bash
# Validates deploy/k8s/*.yaml against the Kubernetes API's schemas: the validators that the npm
# package kubernetes-models generates from the Kubernetes OpenAPI definitions (types, required
# fields, enums, formats), unknown fields against the package's declarations, and the promises
# the manifests make (probes on /healthz, the preStop drain, a sessions volume, resources, the
# scrape annotation). The npm packages go into
# $FG_TEST_DATA/npm-k8s (pinned versions); exit 77 (skip) only when npm cannot install them.
set -euo pipefail
: "${FG_TEST_DATA:?run through ctest}"
here=$(cd "$(dirname "$0")" && pwd)
src=$(cd "$here/../.." && pwd)
npm_dir="$FG_TEST_DATA/npm-k8s"
pkgs=(kubernetes-models@5.1.0 yaml@2.9.1)
have() { grep -q "\"version\": \"$2\"" "$npm_dir/node_modules/$1/package.json" 2>/dev/null; }
if ! { have kubernetes-models 5.1.0 && have yaml 2.9.1; }; then
  if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
    echo "SKIP: node/npm not installed (deploy/install-deps.sh test installs them)"; exit 77
  fi
  mkdir -p "$npm_dir"
  if ! timeout 300 npm install --prefix "$npm_dir" --no-audit --no-fund --no-save "${pkgs[@]}" >"$npm_dir/install.log" 2>&1; then
    tail -5 "$npm_dir/install.log"
    echo "SKIP: npm could not install ${pkgs[*]} (see $npm_dir/install.log)"; exit 77
  fi
fi
NODE_PATH="$npm_dir/node_modules" node "$here/check_k8s.mjs" "$npm_dir/node_modules" "$src/deploy/k8s"
